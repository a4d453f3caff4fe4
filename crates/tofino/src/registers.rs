//! Register arrays at run time, with the hardware's access rules enforced.
//!
//! Invariants checked on every access (docs/ARCHITECTURE.md#the-tofino2-model):
//! - a register array is read-modify-written at most **once per packet per
//!   pass** (one SALU, one access);
//! - accesses follow stage order within a pass: once a stage `k` register
//!   was used, a register of stage `j < k` cannot be (to go back, the
//!   program must recirculate);
//! - the index is inside the array.
//!
//! Violations are [`ProgramError`]s: tests fail on them, the switch counts
//! them (`program_errors`) and drops the packet.

use super::meters::{Color, MeterConfig, MeterId, MeterState};
use super::resources::{Gress, MeterDecl, RegisterDecl};
use serde::Serialize;
use weft_wire::time::Nanos;

/// Handle of a declared register array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct RegisterId(pub u16);

/// A violation of the pipeline's rules by a program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// A second access to one register array in one pass.
    #[error("register `{register}` (stage {stage}) accessed twice in one pass")]
    DoubleAccess {
        /// Register name.
        register: String,
        /// Its stage.
        stage: u8,
    },
    /// An access to an earlier stage after a later one.
    #[error("register `{register}` lives in stage {stage} but the pass is already at stage {current}")]
    StageOrder {
        /// Register name.
        register: String,
        /// Its stage.
        stage: u8,
        /// The stage already reached.
        current: u8,
    },
    /// A register of the other pipeline.
    #[error("register `{register}` belongs to the {owner} pipeline, accessed from {from}")]
    WrongGress {
        /// Register name.
        register: String,
        /// Its pipeline.
        owner: Gress,
        /// The accessing pipeline.
        from: Gress,
    },
    /// Index outside the array.
    #[error("register `{register}` index {index} outside 0..{entries}")]
    IndexOutOfRange {
        /// Register name.
        register: String,
        /// Index.
        index: u32,
        /// Size.
        entries: u32,
    },
    /// An egress publish to, or an ingress snapshot read of, a register
    /// not declared with [`crate::Declarations::egress_to_ingress`].
    #[error("register `{0}` is not published from egress to ingress")]
    NotPublished(String),
    /// An unknown meter handle.
    #[error("unknown meter id {0}")]
    UnknownMeter(u16),
    /// An unknown register handle.
    #[error("unknown register id {0}")]
    UnknownRegister(u16),
    /// An unknown table handle.
    #[error("unknown table id {0}")]
    UnknownTable(u16),
    /// A new entry in a table that holds its declared number already.
    #[error("table `{table}` is full ({entries} entries)")]
    TableFull {
        /// Table name.
        table: String,
        /// Its capacity.
        entries: u32,
    },
}

struct Array {
    decl: RegisterDecl,
    mask: u64,
    data: Vec<u64>,
    /// Pass serial of the last access.
    last_pass: u64,
    /// Written by egress, read by ingress ([`RegisterFile::publish`]).
    published: bool,
}

/// A meter array: per entry its configuration (`None`: unconfigured,
/// every packet green) and buckets.
struct MeterArray {
    decl: MeterDecl,
    configs: Vec<Option<MeterConfig>>,
    state: Vec<MeterState>,
    last_pass: u64,
}

/// All register (and meter) arrays of a loaded program.
pub struct RegisterFile {
    arrays: Vec<Array>,
    meters: Vec<MeterArray>,
}

/// The state of one pass through one pipeline (what a packet carries).
#[derive(Debug, Clone, Copy)]
pub struct PassState {
    serial: u64,
    gress: Gress,
    stage: u8,
}

impl RegisterFile {
    /// Allocates the declared arrays (zeroed).
    pub fn new(decls: &[RegisterDecl]) -> Self {
        RegisterFile {
            arrays: decls
                .iter()
                .map(|d| Array {
                    decl: d.clone(),
                    mask: if d.width_bits >= 64 { u64::MAX } else { (1u64 << d.width_bits) - 1 },
                    data: vec![0; d.entries as usize],
                    last_pass: 0,
                    published: false,
                })
                .collect(),
            meters: Vec::new(),
        }
    }

    /// Adds the declared meter arrays (unconfigured: every packet green).
    #[must_use]
    pub fn with_meters(mut self, decls: &[MeterDecl]) -> Self {
        self.meters = decls
            .iter()
            .map(|d| MeterArray {
                decl: d.clone(),
                configs: vec![None; d.entries as usize],
                state: vec![MeterState::default(); d.entries as usize],
                last_pass: 0,
            })
            .collect();
        self
    }

    /// Executes meter `id[index]` on a packet of `bytes` at `now`, with the
    /// register access rules (once per pass, stage order, its pipeline).
    pub fn execute_meter(&mut self, pass: &mut PassState, id: MeterId, index: u32, now: Nanos, bytes: u64) -> Result<Color, ProgramError> {
        let m = self.meters.get_mut(id.0 as usize).ok_or(ProgramError::UnknownMeter(id.0))?;
        check_pass(pass, &m.decl.name, m.decl.gress, m.decl.stage, m.last_pass)?;
        let entries = m.state.len() as u32;
        let (Some(state), Some(cfg)) = (m.state.get_mut(index as usize), m.configs.get(index as usize)) else {
            return Err(out_of_range(&m.decl.name, index, entries));
        };
        m.last_pass = pass.serial;
        pass.stage = m.decl.stage;
        Ok(match cfg {
            Some(cfg) => state.execute(m.decl.kind, cfg, now, bytes),
            None => Color::Green,
        })
    }

    /// Control-plane configuration of meter `id[index]` (its buckets start
    /// full again).
    pub fn configure_meter(&mut self, id: MeterId, index: u32, cfg: MeterConfig) -> Result<(), ProgramError> {
        let m = self.meters.get_mut(id.0 as usize).ok_or(ProgramError::UnknownMeter(id.0))?;
        let entries = m.state.len() as u32;
        let slot = m.configs.get_mut(index as usize).ok_or_else(|| out_of_range(&m.decl.name, index, entries))?;
        *slot = Some(cfg);
        m.state[index as usize] = MeterState::default();
        Ok(())
    }

    /// Executes one SALU access: `f` gets the old value and returns the new
    /// value and the result. Checks the access rules for `pass`.
    #[inline]
    pub fn access<R>(
        &mut self,
        pass: &mut PassState,
        id: RegisterId,
        index: u32,
        f: impl FnOnce(u64) -> (u64, R),
    ) -> Result<R, ProgramError> {
        let a = self.arrays.get_mut(id.0 as usize).ok_or(ProgramError::UnknownRegister(id.0))?;
        check_pass(pass, &a.decl.name, a.decl.gress, a.decl.stage, a.last_pass)?;
        let entries = a.data.len() as u32;
        let slot = a.data.get_mut(index as usize).ok_or_else(|| out_of_range(&a.decl.name, index, entries))?;
        a.last_pass = pass.serial;
        pass.stage = a.decl.stage;
        let (new, r) = f(*slot);
        *slot = new & a.mask;
        Ok(r)
    }

    /// Marks `id` as an egress-to-ingress array (done at load for the
    /// arrays of [`crate::Declarations::egress_to_ingress`]).
    pub fn mark_published(&mut self, id: RegisterId) -> Result<(), ProgramError> {
        let a = self.arrays.get_mut(id.0 as usize).ok_or(ProgramError::UnknownRegister(id.0))?;
        a.published = true;
        Ok(())
    }

    /// The egress pipeline's write of `value` into the ingress-side array
    /// `id` (the egress-to-ingress path, see
    /// [`crate::Declarations::egress_to_ingress`]).
    pub fn publish(&mut self, id: RegisterId, index: u32, value: u64) -> Result<(), ProgramError> {
        let a = self.arrays.get(id.0 as usize).ok_or(ProgramError::UnknownRegister(id.0))?;
        if !a.published {
            return Err(ProgramError::NotPublished(a.decl.name.clone()));
        }
        self.cpu_write(id, index, value)
    }

    /// The ingress pipeline's read of entry `index` of the egress-to-ingress
    /// array `id` (any entry, any number per pass: a snapshot, as the
    /// ghost thread's queue depths).
    pub fn snapshot(&self, id: RegisterId, index: u32) -> Result<u64, ProgramError> {
        let a = self.arrays.get(id.0 as usize).ok_or(ProgramError::UnknownRegister(id.0))?;
        if !a.published {
            return Err(ProgramError::NotPublished(a.decl.name.clone()));
        }
        a.data.get(index as usize).copied().ok_or_else(|| out_of_range(&a.decl.name, index, a.data.len() as u32))
    }

    /// Control-plane write (no pass rules; the CPU writes through the driver).
    pub fn cpu_write(&mut self, id: RegisterId, index: u32, value: u64) -> Result<(), ProgramError> {
        let a = self.arrays.get_mut(id.0 as usize).ok_or(ProgramError::UnknownRegister(id.0))?;
        let entries = a.data.len() as u32;
        let mask = a.mask;
        let slot = a.data.get_mut(index as usize).ok_or_else(|| out_of_range(&a.decl.name, index, entries))?;
        *slot = value & mask;
        Ok(())
    }

    /// Control-plane read.
    pub fn cpu_read(&self, id: RegisterId, index: u32) -> Option<u64> {
        self.arrays.get(id.0 as usize)?.data.get(index as usize).copied()
    }

    /// Every array's name and cells, in declaration order (what a control
    /// plane dumping the registers reads; tests compare states with it).
    pub fn contents(&self) -> Vec<(&str, &[u64])> {
        self.arrays.iter().map(|a| (a.decl.name.as_str(), a.data.as_slice())).collect()
    }
}

/// An index outside an array of `entries`.
fn out_of_range(name: &str, index: u32, entries: u32) -> ProgramError {
    ProgramError::IndexOutOfRange { register: name.to_string(), index, entries }
}

/// The pass rules of one stateful-ALU access (a register or a meter of
/// `gress`, `stage`, last accessed in pass `last_pass`): its own pipeline,
/// once per pass, never behind a later stage.
#[inline]
fn check_pass(pass: &PassState, name: &str, gress: Gress, stage: u8, last_pass: u64) -> Result<(), ProgramError> {
    if gress != pass.gress {
        return Err(ProgramError::WrongGress { register: name.to_string(), owner: gress, from: pass.gress });
    }
    if last_pass == pass.serial {
        return Err(ProgramError::DoubleAccess { register: name.to_string(), stage });
    }
    if stage < pass.stage {
        return Err(ProgramError::StageOrder { register: name.to_string(), stage, current: pass.stage });
    }
    Ok(())
}

impl PassState {
    /// A new pass with a unique serial (serials start at 1).
    pub fn new(serial: u64, gress: Gress) -> Self {
        PassState { serial, gress, stage: 0 }
    }
    /// The stage the pass has reached.
    pub fn stage(&self) -> u8 {
        self.stage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> RegisterFile {
        RegisterFile::new(&[
            RegisterDecl { name: "a".into(), gress: Gress::Ingress, stage: 1, entries: 8, width_bits: 32 },
            RegisterDecl { name: "b".into(), gress: Gress::Ingress, stage: 3, entries: 8, width_bits: 64 },
            RegisterDecl { name: "e".into(), gress: Gress::Egress, stage: 0, entries: 8, width_bits: 16 },
        ])
    }

    #[test]
    fn double_access_in_one_pass_is_caught() {
        let mut f = file();
        let mut p = PassState::new(1, Gress::Ingress);
        f.access(&mut p, RegisterId(0), 0, |v| (v + 1, ())).unwrap();
        let e = f.access(&mut p, RegisterId(0), 1, |v| (v, ())).unwrap_err();
        assert_eq!(e, ProgramError::DoubleAccess { register: "a".into(), stage: 1 });
        // The next pass may access it again.
        let mut p2 = PassState::new(2, Gress::Ingress);
        assert_eq!(f.access(&mut p2, RegisterId(0), 0, |v| (v, v)).unwrap(), 1);
    }

    #[test]
    fn stage_order_and_gress_are_enforced() {
        let mut f = file();
        let mut p = PassState::new(1, Gress::Ingress);
        f.access(&mut p, RegisterId(1), 0, |v| (v, ())).unwrap();
        assert!(matches!(f.access(&mut p, RegisterId(0), 0, |v| (v, ())), Err(ProgramError::StageOrder { stage: 1, current: 3, .. })));
        assert!(matches!(f.access(&mut p, RegisterId(2), 0, |v| (v, ())), Err(ProgramError::WrongGress { .. })));
        assert!(matches!(
            f.access(&mut PassState::new(2, Gress::Ingress), RegisterId(0), 8, |v| (v, ())),
            Err(ProgramError::IndexOutOfRange { index: 8, entries: 8, .. })
        ));
    }

    #[test]
    fn only_published_arrays_take_egress_writes_and_snapshot_reads() {
        let mut f = file();
        assert_eq!(f.publish(RegisterId(0), 0, 7), Err(ProgramError::NotPublished("a".into())));
        assert_eq!(f.snapshot(RegisterId(0), 0), Err(ProgramError::NotPublished("a".into())));
        f.mark_published(RegisterId(0)).unwrap();
        f.publish(RegisterId(0), 3, 0x1_0000_0007).unwrap();
        // Truncated to the width; readable many times in one pass.
        assert_eq!(f.snapshot(RegisterId(0), 3), Ok(7));
        assert_eq!(f.snapshot(RegisterId(0), 3), Ok(7));
        assert!(matches!(f.snapshot(RegisterId(0), 8), Err(ProgramError::IndexOutOfRange { index: 8, .. })));
        // A snapshot read is not a SALU access: the pass may still use it.
        let mut p = PassState::new(1, Gress::Ingress);
        assert_eq!(f.access(&mut p, RegisterId(0), 3, |v| (v, v)).unwrap(), 7);
    }

    #[test]
    fn values_are_truncated_to_width() {
        let mut f = file();
        let mut p = PassState::new(1, Gress::Egress);
        f.access(&mut p, RegisterId(2), 0, |_| (0x1_2345, ())).unwrap();
        assert_eq!(f.cpu_read(RegisterId(2), 0), Some(0x2345));
    }
}
