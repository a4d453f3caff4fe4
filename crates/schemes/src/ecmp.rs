//! ECMP: equal-cost multipath by a hash of the 5-tuple.
//!
//! Every paper of README.md uses it as the baseline (ConWeave §4.1, CONGA
//! §2, LBSP §2). The switch hashes (src IP, dst IP, protocol, src port, dst
//! port) — for RoCEv2 the UDP source port, which RNICs derive from the QP,
//! so QPs of one host pair spread — with CRC-32 seeded per switch (as
//! Tofino's hash engine does with a per-device seed) and picks
//! `group[hash % |group|]`. Resilient failover: if the chosen member's link
//! is down, the flow is re-hashed over the members that are up, so only the
//! failed link's flows move.
//!
//! Parameters: `seed` (u32, default: per-switch seed from the run seed);
//! `use_ports` (bool, default true: include L4 ports; false = 3-tuple).
//!
//! Tofino resources: one 32-bit hash in ingress stage 1; the selector uses
//! the switch's `nexthop_group` table; no registers.

use super::{param, ParamInfo, Params, SchemeError, SchemeInfo};
use weft_tofino::program::Declarations;
use weft_tofino::{Gress, IngressCx, Program, ProgramError};
use weft_wire::ids::PortId;

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: "ecmp",
        source: "baseline in all five papers (e.g. ConWeave §4.1)",
        summary: "hash of the 5-tuple (RoCEv2: incl. UDP source port) over equal-cost next hops",
        reference_rate: None,
        params: vec![
            ParamInfo {
                name: "seed",
                default: "per switch",
                unit: "u32",
                doc: "hash seed (default derived from the run seed and switch id)",
            },
            ParamInfo { name: "use_ports", default: "true", unit: "bool", doc: "include L4 ports in the hash (false: 3-tuple)" },
        ],
    }
}

/// The ECMP program.
#[derive(Debug, Clone)]
pub struct Ecmp {
    seed: Option<u32>,
    use_ports: bool,
    /// Packets that needed failover re-hashing.
    failovers: u64,
}

impl Ecmp {
    /// Builds from parameters.
    pub fn from_params(p: &Params) -> Result<Self, SchemeError> {
        let seed = match p.get("seed") {
            None => None,
            Some(_) => Some(param("ecmp", p, "seed", "u32", 0u32)?),
        };
        Ok(Ecmp { seed, use_ports: param("ecmp", p, "use_ports", "bool", true)?, failovers: 0 })
    }
}

impl Default for Ecmp {
    fn default() -> Self {
        Ecmp { seed: None, use_ports: true, failovers: 0 }
    }
}

/// CRC-32 of the 5-tuple with `seed` as initial value (Tofino-style hash).
#[inline]
pub fn flow_hash(seed: u32, t: (u32, u32, u8, u16, u16), use_ports: bool) -> u32 {
    let mut b = [0u8; 13];
    b[0..4].copy_from_slice(&t.0.to_be_bytes());
    b[4..8].copy_from_slice(&t.1.to_be_bytes());
    b[8] = t.2;
    if use_ports {
        b[9..11].copy_from_slice(&t.3.to_be_bytes());
        b[11..13].copy_from_slice(&t.4.to_be_bytes());
    }
    let mut h = crc32fast::Hasher::new_with_initial(seed);
    h.update(&b);
    h.finalize()
}

/// Picks a member of `group` for hash `h`, re-hashing over the up members if
/// the first choice is down. `None` if every member is down.
#[inline]
pub fn select_resilient(group: &[PortId], up: &[bool], h: u32) -> (Option<PortId>, bool) {
    if group.is_empty() {
        return (None, false);
    }
    let first = group[h as usize % group.len()];
    if up.get(first.index()).copied().unwrap_or(false) {
        return (Some(first), false);
    }
    let alive = group.iter().filter(|p| up.get(p.index()).copied().unwrap_or(false)).count();
    if alive == 0 {
        return (None, true);
    }
    let k = (h.rotate_left(16) as usize) % alive;
    (group.iter().copied().filter(|p| up.get(p.index()).copied().unwrap_or(false)).nth(k), true)
}

impl Program for Ecmp {
    fn has_egress(&self) -> bool {
        false
    }
    fn name(&self) -> &'static str {
        "ecmp"
    }

    fn declare(&mut self, d: &mut Declarations) {
        d.hash("ecmp_5tuple_crc32", Gress::Ingress, 1, 32);
        d.metadata_bits(32);
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let h = match cx.info.five_tuple() {
            Some(t) if cx.group.len() > 1 => flow_hash(self.seed.unwrap_or(cx.hash_seed), t, self.use_ports),
            _ => 0,
        };
        let (port, failover) = select_resilient(cx.group, cx.port_up, h);
        self.failovers += failover as u64;
        cx.forward_to(port);
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("ecmp_failover_packets", self.failovers)]
    }
}

/// The registry entry of `ecmp` (see [`crate::REGISTRY`]).
pub const SCHEME: crate::Scheme = crate::Scheme {
    info,
    build: |p, _| Ok(Box::new(Ecmp::from_params(p)?)),
    metrics: crate::SchemeMetrics {
        counters: &[("ecmp_failover_packets", "Packets ECMP sent to another member because the hashed uplink was down.")],
        gauges: &[],
        port_gauges: &[],
        distributions: &[],
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resilient_selection_moves_only_the_failed_members_flows() {
        let group: Vec<PortId> = (0..8).map(PortId).collect();
        let mut up = vec![true; 8];
        let before: Vec<PortId> =
            (0..10_000u32).map(|i| select_resilient(&group, &up, flow_hash(7, (i, 1, 17, 1, 2), true)).0.unwrap()).collect();
        up[3] = false;
        for (i, b) in before.iter().enumerate() {
            let after = select_resilient(&group, &up, flow_hash(7, (i as u32, 1, 17, 1, 2), true)).0.unwrap();
            if *b == PortId(3) {
                assert_ne!(after, PortId(3));
            } else {
                assert_eq!(after, *b, "flow {i} moved though its link is up");
            }
        }
        assert_eq!(select_resilient(&group, &[false; 8], 5), (None, true));
    }
}
