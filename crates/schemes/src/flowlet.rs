//! A flowlet table in two register arrays: the last-seen timestamp and the
//! chosen egress port of each hashed flow entry (CONGA §3.4 "Flowlet
//! detection"; LetFlow; ConWeave §4.1 uses a 100 µs gap for both).
//!
//! Invariants:
//! - a packet whose entry was seen less than `gap` ago keeps the entry's
//!   port (never moves inside a flowlet) unless that port's link is down;
//! - a gap of at least `gap` (or an empty entry) starts a new flowlet, and
//!   only then may the caller's choice change the port;
//! - each array is accessed once per pass, timestamp stage before port
//!   stage (the caller's decision logic runs in the stages between).
//!
//! Timestamps are the low 32 bits of the ns clock (wrapping difference, as
//! a 32-bit SALU compares them); port entries store port + 1 (0 = empty).

use weft_tofino::program::Declarations;
use weft_tofino::{Gress, IngressCx, ProgramError, RegisterId};
use weft_wire::ids::PortId;
use weft_wire::time::Nanos;

/// The outcome of a flowlet lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowletDecision {
    /// Egress port (`None` if the caller found none).
    pub port: Option<PortId>,
    /// The packet started a new flowlet.
    pub new_flowlet: bool,
    /// The new flowlet took another port than the previous one.
    pub path_changed: bool,
}

/// The table's registers and gap.
#[derive(Debug, Clone)]
pub struct FlowletTable {
    gap_ns: Nanos,
    entries: u32,
    ts: RegisterId,
    port: RegisterId,
}

impl FlowletTable {
    /// Declares the two arrays (`entries` each) in `ts_stage` < `port_stage`.
    pub fn declare(d: &mut Declarations, prefix: &str, entries: u32, gap_ns: Nanos, ts_stage: u8, port_stage: u8) -> Self {
        let ts = d.register(&format!("{prefix}_flowlet_ts"), Gress::Ingress, ts_stage, entries, 32);
        let port = d.register(&format!("{prefix}_flowlet_port"), Gress::Ingress, port_stage, entries, 16);
        FlowletTable { gap_ns, entries, ts, port }
    }

    /// Looks up flow `hash`. `choose` (which may use `cx` for randomness
    /// or registers in stages between the two arrays, as the hardware
    /// computes the candidate in those stages for every packet) gives the
    /// port a new flowlet takes; it is stored on a new flowlet, or when the
    /// flowlet's port is no longer an up member of the group (failover).
    pub fn lookup(
        &self,
        cx: &mut IngressCx<'_>,
        hash: u32,
        choose: impl FnOnce(&mut IngressCx<'_>) -> Result<Option<PortId>, ProgramError>,
    ) -> Result<FlowletDecision, ProgramError> {
        let idx = hash % self.entries;
        let now32 = cx.now as u32;
        let gap = self.gap_ns.min(u32::MAX as u64) as u32;
        let expired = cx.register(self.ts, idx, |last| (now32 as u64, last == 0 || now32.wrapping_sub(last as u32) >= gap))?;
        let choice = choose(cx)?;
        let (up, group) = (cx.port_up, cx.group);
        let mut changed = false;
        let port = cx.register(self.port, idx, |old| {
            let old_port = (old != 0).then(|| PortId((old - 1) as u16));
            let old_ok = old_port.filter(|p| group.contains(p) && up.get(p.index()).copied().unwrap_or(false));
            match (expired, old_ok, choice) {
                (false, Some(p), _) => (old, Some(p)),
                (_, _, Some(c)) => {
                    changed = old_port.is_some_and(|o| o != c);
                    (c.0 as u64 + 1, Some(c))
                }
                (_, o, None) => (old, o),
            }
        })?;
        Ok(FlowletDecision { port, new_flowlet: expired, path_changed: changed })
    }
}

/// A uniformly random up member of `group`.
pub fn random_up_port(cx: &mut IngressCx<'_>) -> Option<PortId> {
    let up = cx.port_up;
    let n = cx.group.iter().filter(|p| up.get(p.index()).copied().unwrap_or(false)).count();
    if n == 0 {
        return None;
    }
    let k = rand::Rng::random_range(cx.rng, 0..n);
    cx.group.iter().copied().filter(|p| up.get(p.index()).copied().unwrap_or(false)).nth(k)
}
