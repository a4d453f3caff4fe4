//! Program resource declarations and the load-time budget check.
//!
//! A program declares, per gress and stage, its register arrays (one SALU
//! each), match tables (exact → SRAM, ternary/LPM → TCAM + action SRAM) and
//! hash computations. [`ResourceUsage::check`] compares the sums per stage
//! with a [`TargetProfile`] and fails with the resource, the stage and the
//! numbers, as the P4 compiler does. [`ResourceUsage::report`] prints the
//! used / available / % summary.
//!
//! Accounting rules (documented approximations of the compiler's):
//! - a register array of `entries` x `width` bits takes one SALU and
//!   ceil(entries x width / block bits) SRAM blocks (at least one);
//! - an exact table takes ceil(entries x (key + action + 8 overhead) / block
//!   bits) SRAM blocks;
//! - a ternary/LPM table takes ceil(key / 44) x ceil(entries / 512) TCAM
//!   blocks and ceil(entries x action / block bits) SRAM blocks;
//! - a hash computation takes ceil(bits / 52) hash units;
//! - a meter array takes one of the stage's meter/stateful ALUs (Tofino
//!   shares them) and ceil(entries x 128 / block bits) SRAM blocks.

use super::TargetProfile;
use core::fmt;
use serde::Serialize;

/// Ingress or egress pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Gress {
    /// The ingress pipeline.
    Ingress,
    /// The egress pipeline.
    Egress,
}
impl fmt::Display for Gress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Gress::Ingress => "ingress",
            Gress::Egress => "egress",
        })
    }
}

/// Kind of match table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TableKind {
    /// Exact match (hash table in SRAM).
    Exact,
    /// Ternary match (TCAM).
    Ternary,
    /// Longest-prefix match (TCAM).
    Lpm,
}

/// A declared register array.
#[derive(Debug, Clone, Serialize)]
pub struct RegisterDecl {
    /// Name.
    pub name: String,
    /// Pipeline.
    pub gress: Gress,
    /// Stage (0-based).
    pub stage: u8,
    /// Number of entries.
    pub entries: u32,
    /// Width of one entry in bits (up to the target's max).
    pub width_bits: u32,
}

/// A declared match table.
#[derive(Debug, Clone, Serialize)]
pub struct TableDecl {
    /// Name.
    pub name: String,
    /// Pipeline.
    pub gress: Gress,
    /// Stage.
    pub stage: u8,
    /// Match kind.
    pub kind: TableKind,
    /// Capacity in entries.
    pub entries: u32,
    /// Key width in bits.
    pub key_bits: u32,
    /// Action data width in bits.
    pub action_bits: u32,
}

/// A declared meter array (see [`crate::meters`]).
#[derive(Debug, Clone, Serialize)]
pub struct MeterDecl {
    /// Name.
    pub name: String,
    /// Pipeline.
    pub gress: Gress,
    /// Stage.
    pub stage: u8,
    /// Number of entries.
    pub entries: u32,
    /// srTCM or trTCM.
    pub kind: crate::meters::MeterKind,
}

/// Bits of SRAM one meter entry takes (two buckets, rates, timestamp).
pub const METER_ENTRY_BITS: u64 = 128;

/// A declared hash computation.
#[derive(Debug, Clone, Serialize)]
pub struct HashDecl {
    /// Name.
    pub name: String,
    /// Pipeline.
    pub gress: Gress,
    /// Stage.
    pub stage: u8,
    /// Output bits.
    pub bits: u32,
}

/// Everything a program (plus the switch's own L3 tables) declares.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ResourceUsage {
    /// Register arrays.
    pub registers: Vec<RegisterDecl>,
    /// Tables.
    pub tables: Vec<TableDecl>,
    /// Hashes.
    pub hashes: Vec<HashDecl>,
    /// Meter arrays.
    pub meters: Vec<MeterDecl>,
    /// Metadata bits the program adds to the PHV.
    pub metadata_bits: u32,
}

/// The resource kinds checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Resource {
    /// Pipeline stages.
    Stages,
    /// Stateful ALUs.
    Salu,
    /// SRAM blocks.
    Sram,
    /// TCAM blocks.
    Tcam,
    /// Hash units.
    Hash,
    /// Register width.
    RegisterWidth,
    /// PHV bits.
    Phv,
}
impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Stages => "pipeline stages",
            Resource::Salu => "stateful ALUs",
            Resource::Sram => "SRAM blocks",
            Resource::Tcam => "TCAM blocks",
            Resource::Hash => "hash units",
            Resource::RegisterWidth => "register width (bits)",
            Resource::Phv => "PHV bits",
        })
    }
}

/// A budget violation found at load time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("program does not fit target `{target}`: {gress} stage {stage} needs {used} {resource}, the target has {available} ({what})")]
pub struct ResourceError {
    /// Target name.
    pub target: String,
    /// Pipeline.
    pub gress: Gress,
    /// Stage.
    pub stage: u8,
    /// Resource.
    pub resource: Resource,
    /// Needed.
    pub used: u64,
    /// Available.
    pub available: u64,
    /// Which declarations use it.
    pub what: String,
}

/// Per-stage use of each resource.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct StageUse {
    /// SALUs.
    pub salu: u64,
    /// SRAM blocks.
    pub sram: u64,
    /// TCAM blocks.
    pub tcam: u64,
    /// Hash units.
    pub hash: u64,
}

/// Header bits every weft program parses (Ethernet + 802.1Q + IPv4 + UDP/TCP + BTH + RETH).
pub const BASE_HEADER_PHV_BITS: u32 = (18 + 20 + 20 + 12 + 16) * 8;

impl ResourceUsage {
    fn register_sram(&self, r: &RegisterDecl, t: &TargetProfile) -> u64 {
        (r.entries as u64 * r.width_bits as u64).div_ceil(t.sram_block_bits).max(1)
    }
    fn table_use(&self, tb: &TableDecl, t: &TargetProfile) -> (u64, u64) {
        match tb.kind {
            TableKind::Exact => {
                let bits = tb.entries as u64 * (tb.key_bits + tb.action_bits + 8) as u64;
                (bits.div_ceil(t.sram_block_bits).max(1), 0)
            }
            TableKind::Ternary | TableKind::Lpm => {
                let tcam = (tb.key_bits as u64).div_ceil(t.tcam_block_key_bits as u64).max(1)
                    * (tb.entries as u64).div_ceil(t.tcam_block_entries as u64).max(1);
                let sram = (tb.entries as u64 * tb.action_bits as u64).div_ceil(t.sram_block_bits);
                (sram, tcam)
            }
        }
    }

    /// Use per (gress, stage), indexed `[gress][stage]`.
    pub fn per_stage(&self, t: &TargetProfile) -> [Vec<StageUse>; 2] {
        let n = self.max_stage().map(|s| s as usize + 1).unwrap_or(0).max(t.stages.min(32) as usize);
        let mut out = [vec![StageUse::default(); n], vec![StageUse::default(); n]];
        let gi = |g: Gress| if g == Gress::Ingress { 0 } else { 1 };
        for r in &self.registers {
            let s = &mut out[gi(r.gress)][r.stage as usize];
            s.salu += 1;
            s.sram += self.register_sram(r, t);
        }
        for tb in &self.tables {
            let (sram, tcam) = self.table_use(tb, t);
            let s = &mut out[gi(tb.gress)][tb.stage as usize];
            s.sram += sram;
            s.tcam += tcam;
        }
        for m in &self.meters {
            let s = &mut out[gi(m.gress)][m.stage as usize];
            s.salu += 1;
            s.sram += (m.entries as u64 * METER_ENTRY_BITS).div_ceil(t.sram_block_bits).max(1);
        }
        for h in &self.hashes {
            out[gi(h.gress)][h.stage as usize].hash += (h.bits as u64).div_ceil(t.hash_unit_bits as u64).max(1);
        }
        out
    }

    fn max_stage(&self) -> Option<u8> {
        let r = self.registers.iter().map(|r| r.stage);
        let t = self.tables.iter().map(|t| t.stage);
        let h = self.hashes.iter().map(|h| h.stage);
        let m = self.meters.iter().map(|m| m.stage);
        r.chain(t).chain(h).chain(m).max()
    }

    fn names_at(&self, g: Gress, stage: u8, res: Resource) -> String {
        let mut v: Vec<&str> = Vec::new();
        match res {
            Resource::Salu => {
                v.extend(self.registers.iter().filter(|r| r.gress == g && r.stage == stage).map(|r| r.name.as_str()));
                v.extend(self.meters.iter().filter(|m| m.gress == g && m.stage == stage).map(|m| m.name.as_str()));
            }
            Resource::Sram => {
                v.extend(self.registers.iter().filter(|r| r.gress == g && r.stage == stage).map(|r| r.name.as_str()));
                v.extend(self.meters.iter().filter(|m| m.gress == g && m.stage == stage).map(|m| m.name.as_str()));
                v.extend(self.tables.iter().filter(|t| t.gress == g && t.stage == stage).map(|t| t.name.as_str()));
            }
            Resource::Tcam => v.extend(
                self.tables.iter().filter(|t| t.gress == g && t.stage == stage && t.kind != TableKind::Exact).map(|t| t.name.as_str()),
            ),
            Resource::Hash => v.extend(self.hashes.iter().filter(|h| h.gress == g && h.stage == stage).map(|h| h.name.as_str())),
            _ => {}
        }
        v.join(", ")
    }

    /// Checks every budget; the first violation is returned.
    pub fn check(&self, t: &TargetProfile) -> Result<(), ResourceError> {
        let err = |g, stage, resource, used, available, what: String| ResourceError {
            target: t.name.clone(),
            gress: g,
            stage,
            resource,
            used,
            available,
            what,
        };
        for r in &self.registers {
            if r.stage >= t.stages {
                return Err(err(r.gress, r.stage, Resource::Stages, r.stage as u64 + 1, t.stages as u64, format!("register `{}`", r.name)));
            }
            if r.width_bits > t.max_register_bits {
                return Err(err(
                    r.gress,
                    r.stage,
                    Resource::RegisterWidth,
                    r.width_bits as u64,
                    t.max_register_bits as u64,
                    format!("register `{}`", r.name),
                ));
            }
        }
        for tb in &self.tables {
            if tb.stage >= t.stages {
                return Err(err(
                    tb.gress,
                    tb.stage,
                    Resource::Stages,
                    tb.stage as u64 + 1,
                    t.stages as u64,
                    format!("table `{}`", tb.name),
                ));
            }
        }
        for m in &self.meters {
            if m.stage >= t.stages {
                return Err(err(m.gress, m.stage, Resource::Stages, m.stage as u64 + 1, t.stages as u64, format!("meter `{}`", m.name)));
            }
        }
        for h in &self.hashes {
            if h.stage >= t.stages {
                return Err(err(h.gress, h.stage, Resource::Stages, h.stage as u64 + 1, t.stages as u64, format!("hash `{}`", h.name)));
            }
        }
        let per = self.per_stage(t);
        for (gi, g) in [Gress::Ingress, Gress::Egress].into_iter().enumerate() {
            for (s, u) in per[gi].iter().enumerate() {
                let s8 = s as u8;
                let checks = [
                    (Resource::Salu, u.salu, t.salus_per_stage as u64),
                    (Resource::Sram, u.sram, t.sram_blocks_per_stage as u64),
                    (Resource::Tcam, u.tcam, t.tcam_blocks_per_stage as u64),
                    (Resource::Hash, u.hash, t.hash_units_per_stage as u64),
                ];
                for (res, used, avail) in checks {
                    if used > avail {
                        return Err(err(g, s8, res, used, avail, self.names_at(g, s8, res)));
                    }
                }
            }
        }
        let phv = BASE_HEADER_PHV_BITS as u64 + self.metadata_bits as u64;
        if phv > t.phv_bits as u64 {
            return Err(err(Gress::Ingress, 0, Resource::Phv, phv, t.phv_bits as u64, "headers + program metadata".into()));
        }
        Ok(())
    }

    /// The resource report (like the P4 compiler's summary).
    pub fn report(&self, program: &str, t: &TargetProfile) -> ResourceReport {
        let per = self.per_stage(t);
        let stages_used = self.max_stage().map(|s| s as u64 + 1).unwrap_or(0);
        let tot = |f: fn(&StageUse) -> u64| per.iter().flat_map(|g| g.iter()).map(f).sum::<u64>();
        let two = 2 * t.stages as u64;
        let rows = vec![
            ReportRow::new("stages", stages_used, t.stages as u64),
            ReportRow::new("stateful ALUs", tot(|u| u.salu), two * t.salus_per_stage as u64),
            ReportRow::new("SRAM blocks", tot(|u| u.sram), two * t.sram_blocks_per_stage as u64),
            ReportRow::new("TCAM blocks", tot(|u| u.tcam), two * t.tcam_blocks_per_stage as u64),
            ReportRow::new("hash units", tot(|u| u.hash), two * t.hash_units_per_stage as u64),
            ReportRow::new("PHV bits", (BASE_HEADER_PHV_BITS + self.metadata_bits) as u64, t.phv_bits as u64),
        ];
        ResourceReport {
            program: program.to_string(),
            target: t.clone(),
            rows,
            ingress: per[0].clone(),
            egress: per[1].clone(),
            fits: self.check(t).err().map(|e| e.to_string()),
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct ReportRow {
    /// Resource.
    pub resource: String,
    /// Used.
    pub used: u64,
    /// Available.
    pub available: u64,
}
impl ReportRow {
    fn new(r: &str, used: u64, available: u64) -> Self {
        ReportRow { resource: r.into(), used, available }
    }
    /// Percentage used.
    pub fn percent(&self) -> f64 {
        if self.available == 0 {
            0.0
        } else {
            100.0 * self.used as f64 / self.available as f64
        }
    }
}

/// The printable resource report.
#[derive(Debug, Clone, Serialize)]
pub struct ResourceReport {
    /// Program name.
    pub program: String,
    /// Target.
    pub target: TargetProfile,
    /// Totals.
    pub rows: Vec<ReportRow>,
    /// Ingress use per stage.
    pub ingress: Vec<StageUse>,
    /// Egress use per stage.
    pub egress: Vec<StageUse>,
    /// `None` if it fits, else the violation.
    pub fits: Option<String>,
}

impl fmt::Display for ResourceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.target;
        writeln!(f, "Resource report: program `{}` on target `{}`", self.program, t.name)?;
        writeln!(f, "{:<16} {:>10} {:>10} {:>8}", "resource", "used", "available", "%")?;
        for r in &self.rows {
            writeln!(f, "{:<16} {:>10} {:>10} {:>7.1}%", r.resource, r.used, r.available, r.percent())?;
        }
        for (name, per) in [("ingress", &self.ingress), ("egress", &self.egress)] {
            writeln!(f)?;
            writeln!(
                f,
                "{name} per stage: SALU (of {}), SRAM (of {}), TCAM (of {}), hash (of {})",
                t.salus_per_stage, t.sram_blocks_per_stage, t.tcam_blocks_per_stage, t.hash_units_per_stage
            )?;
            writeln!(f, "{:>6} {:>6} {:>6} {:>6} {:>6}", "stage", "SALU", "SRAM", "TCAM", "hash")?;
            for (s, u) in per.iter().enumerate().take(t.stages as usize) {
                if *u != StageUse::default() {
                    writeln!(f, "{:>6} {:>6} {:>6} {:>6} {:>6}", s, u.salu, u.sram, u.tcam, u.hash)?;
                }
            }
        }
        match &self.fits {
            None => writeln!(f, "\nfits: yes"),
            Some(e) => writeln!(f, "\nfits: NO — {e}"),
        }
    }
}
