//! LBSP, load balancing based on symmetric path groups (Lim, "Enhancing
//! Robustness of Per-Packet Load-Balancing for Fat-Tree", Appl. Sci. 2021):
//! the data-plane part — upward link-group choice, round robin inside a
//! group, the failure overrides the switch CPU installs, and the
//! queue-differential states of §5.
//!
//! - **Path groups** (§3.1, Table 1; §3.2). A ToR's uplinks and an
//!   aggregation switch's uplinks are each split into two *link groups* by
//!   the parity of the uplink's position (the ports of an equal-cost group
//!   are in port order, so position = aggregation switch index at a ToR,
//!   core position at an aggregation switch). A ToR picks the link group
//!   from the least significant bit of the destination address, an
//!   aggregation switch from the second least significant bit; together
//!   they name one of four path groups of equal size. Inside the group the
//!   packets go round robin (one counter per link group: LBSP keeps no
//!   per-flow state, §3.4). Downward forwarding is by address range: the
//!   L3 routes' single-port groups (§3.2, Fig. 4a).
//! - **Addressing** (DESIGN §5): host `j` of edge `e` in pod `p` is
//!   `10.p.e.(j+2)`. The paper numbers hosts 0…k³/4−1 in pod, edge, host
//!   order, so with k/2 hosts per edge (a multiple of 4 for k ≥ 8) the
//!   paper's LSB and second LSB of a host number are bits 0 and 1 of `j`,
//!   the host's index on its edge: LBSP reads `j = last octet − 2`. An
//!   edge's hosts are `10.p.e.0/24` and a pod's `10.p.0.0/16`: the paper's
//!   address ranges ([124…127], [112…127]) are these prefixes.
//! - **Failures** (§3.3, Table 2). Which link group a destination range
//!   must avoid is kept in three exact-match tables the switch CPU writes
//!   (`lbsp_avoid_edge` keyed by the /24, `lbsp_avoid_pod` by the /16,
//!   `lbsp_avoid_all` with key 0), each holding a 2-bit mask of forbidden
//!   link groups; ingress ORs the three hits, as three tables in successive
//!   stages set bits of one metadata field. A packet whose chosen group is
//!   forbidden takes the other (§3.3.2); with both forbidden, any up uplink.
//! - **States** (§5.1, Fig. 8, Table 3). A ToR compares the mean queue
//!   length (packets) of its two link groups on every packet it forwards
//!   upwards: over `tor_threshold` and `tor_ratio` times the other group's
//!   → state 1 (group 0 crowded) or 2 (group 1 crowded); back to state 0
//!   when the two differ by at most `equal_margin` packets. In state 1 a
//!   packet for group 0 whose input port is odd goes to group 1; in state 2
//!   one for group 1 whose input port is even goes to group 0 (Table 3).
//!   Aggregation switches use `agg_threshold` / `agg_ratio`.
//!
//! Invariants: a packet goes up only through an up port of the equal-cost
//! group; in state 0 with no failure entry, every packet of a destination
//! uses the same link group at a switch; a forbidden group is never chosen
//! while the other has an up port.
//!
//! Tofino resources: `lbsp_state` (1 entry, ingress stage 2), `lbsp_rr`
//! (2 entries, stage 3), the three avoid tables (stage 1), queue-depth
//! snapshot reads of the uplinks.
//!
//! Status (issue 14): not yet in [`crate::REGISTRY`]. Still to come before
//! `--scheme lbsp` exists: the switch CPU's part (hello messages from the
//! packet generator, failure detection, Table 2 failure messages flooded
//! and applied after the control-plane latency, recovery), the
//! aggregation pairs' state exchange, host numbers for fabrics whose edges
//! have a host count that is not a multiple of 4, and the refusal of
//! fabrics that are not fat-trees.

use super::{param_in, ParamInfo, Params, SchemeError, SchemeInfo};
use weft_tofino::program::{Declarations, PacketSource, QueueDepths, SwitchView};
use weft_tofino::resources::{TableDecl, TableKind};
use weft_tofino::tables::TableId;
use weft_tofino::{Gress, IngressCx, Program, ProgramError, RegisterId, SwitchRole};
use weft_wire::ids::PortId;
use weft_wire::Ipv4Address;

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: "lbsp",
        source: "LBSP (Lim, Appl. Sci. 2021) §3, §5",
        summary: "path groups from destination-address LSBs, round robin inside a link group, failure overrides, queue-differential states",
        params: vec![
            ParamInfo { name: "states", default: "true", unit: "bool", doc: "queue-differential states of §5 (false: state 0 always)" },
            ParamInfo {
                name: "tor_threshold",
                default: "5",
                unit: "packets",
                doc: "ToR: a link group's queue over this (and tor_ratio x the other's) is crowded",
            },
            ParamInfo { name: "tor_ratio", default: "1.5", unit: "ratio", doc: "ToR: t of §5.1" },
            ParamInfo { name: "agg_threshold", default: "20", unit: "packets", doc: "aggregation switch: threshold of §5.1" },
            ParamInfo { name: "agg_ratio", default: "2", unit: "ratio", doc: "aggregation switch: t of §5.1" },
            ParamInfo {
                name: "equal_margin",
                default: "1",
                unit: "packets",
                doc: "back to state 0 when the groups' queues differ by at most this",
            },
            ParamInfo {
                name: "packet_bytes",
                default: "1500",
                unit: "bytes",
                doc: "bytes per packet when queue depths are counted in packets",
            },
        ],
    }
}

/// Where the switch sits in the fat-tree (from [`SwitchView::role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Tor,
    Agg,
    Core,
}

/// Parameters of §5.
#[derive(Debug, Clone, Copy, PartialEq)]
struct StateRule {
    threshold_pkts: f64,
    ratio: f64,
}

/// The LBSP program.
#[derive(Debug, Clone)]
pub struct Lbsp {
    states: bool,
    tor: StateRule,
    agg: StateRule,
    equal_margin: f64,
    packet_bytes: f64,
    tier: Tier,
    state: Option<RegisterId>,
    rr: Option<RegisterId>,
    avoid: Option<[TableId; 3]>,
    c: Counters,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    up_decisions: u64,
    avoided: u64,
    state_moves: u64,
    state_changes: u64,
    no_group: u64,
}

impl Lbsp {
    /// Builds from parameters.
    pub fn from_params(p: &Params) -> Result<Self, SchemeError> {
        let pos = |k: &str, d: f64| param_in("lbsp", p, k, "positive number", d, |v: &f64| v.is_finite() && *v > 0.0);
        let states = param_in("lbsp", p, "states", "bool", true, |_| true)?;
        Ok(Lbsp {
            states,
            tor: StateRule { threshold_pkts: pos("tor_threshold", 5.0)?, ratio: pos("tor_ratio", 1.5)? },
            agg: StateRule { threshold_pkts: pos("agg_threshold", 20.0)?, ratio: pos("agg_ratio", 2.0)? },
            equal_margin: param_in("lbsp", p, "equal_margin", "non-negative number", 1.0, |v: &f64| v.is_finite() && *v >= 0.0)?,
            packet_bytes: pos("packet_bytes", 1500.0)?,
            tier: Tier::Core,
            state: None,
            rr: None,
            avoid: None,
            c: Counters::default(),
        })
    }
}

/// The host's index on its edge switch in the addressing plan
/// (`10.p.e.(j+2)`): the paper's host number modulo k/2.
pub fn host_index(dst: Ipv4Address) -> u32 {
    (dst.0 & 0xff).wrapping_sub(2) & 0xff
}

/// The link group of §3.2 for `dst` at a ToR (`second` false: the LSB) or
/// an aggregation switch (`second` true: the second LSB).
pub fn default_link_group(dst: Ipv4Address, second: bool) -> u8 {
    ((host_index(dst) >> second as u32) & 1) as u8
}

/// Table 3: the link group in `state` for destination bit `d` and
/// input-port parity `s`.
pub fn table3(state: u8, d: u8, s: u8) -> u8 {
    match state {
        1 if d == 0 && s == 1 => 1,
        2 if d == 1 && s == 0 => 0,
        _ => d,
    }
}

/// The next state of Fig. 8 from the mean queue lengths (packets) of link
/// groups 0 and 1.
fn next_state(state: u8, q0: f64, q1: f64, rule: StateRule, equal_margin: f64) -> u8 {
    if q0 > rule.threshold_pkts && q0 > rule.ratio * q1 {
        1
    } else if q1 > rule.threshold_pkts && q1 > rule.ratio * q0 {
        2
    } else if state != 0 && (q0 - q1).abs() <= equal_margin {
        0
    } else {
        state
    }
}

impl Lbsp {
    /// Mean queue length (packets) of the up members of link group `g`.
    fn group_queue(&self, group: &[PortId], up: &[bool], g: usize, depths: &dyn QueueDepths) -> f64 {
        let (mut sum, mut n) = (0u64, 0u32);
        for p in group.iter().skip(g).step_by(2).filter(|p| up.get(p.index()).copied().unwrap_or(false)) {
            sum += depths.port_bytes(*p);
            n += 1;
        }
        if n == 0 {
            0.0
        } else {
            sum as f64 / n as f64 / self.packet_bytes
        }
    }

    /// The 2-bit mask of forbidden link groups for `dst` (the three avoid
    /// tables ORed).
    fn forbidden(&self, cx: &IngressCx<'_>, dst: Ipv4Address) -> Result<u8, ProgramError> {
        let Some([edge, pod, all]) = self.avoid else { return Ok(0) };
        let mut m = 0u64;
        for (t, key) in [(edge, (dst.0 >> 8) as u64), (pod, (dst.0 >> 16) as u64), (all, 0)] {
            m |= cx.table(t, key)?.unwrap_or(0);
        }
        Ok((m & 3) as u8)
    }
}

impl Program for Lbsp {
    fn name(&self) -> &'static str {
        "lbsp"
    }

    fn declare(&mut self, d: &mut Declarations) {
        let table = |name: &str, key_bits| TableDecl {
            name: name.into(),
            gress: Gress::Ingress,
            stage: 1,
            kind: TableKind::Exact,
            entries: 1024,
            key_bits,
            action_bits: 2,
        };
        self.avoid =
            Some([d.table(table("lbsp_avoid_edge", 24)), d.table(table("lbsp_avoid_pod", 16)), d.table(table("lbsp_avoid_all", 1))]);
        self.state = Some(d.register("lbsp_state", Gress::Ingress, 2, 1, 8));
        self.rr = Some(d.register("lbsp_rr", Gress::Ingress, 3, 2, 16));
        d.metadata_bits(2 + 2 + 8 + 16);
    }

    fn attach(&mut self, view: &SwitchView) {
        self.tier = match view.role {
            SwitchRole::Leaf => Tier::Tor,
            SwitchRole::Spine => Tier::Agg,
            SwitchRole::Core | SwitchRole::Other => Tier::Core,
        };
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let up = |p: &PortId| cx.port_up.get(p.index()).copied().unwrap_or(false);
        let ip = cx.info.ip;
        if cx.group.len() <= 1 || self.tier == Tier::Core || ip.is_none() {
            // Downward (or nothing to choose): by address range.
            cx.forward_to(cx.group.first().copied().filter(|p| up(p)));
            return Ok(());
        }
        let dst = ip.map_or(Ipv4Address(0), |i| i.dst);
        let (Some(state_reg), Some(rr_reg)) = (self.state, self.rr) else { return Ok(()) };
        let d = default_link_group(dst, self.tier == Tier::Agg);
        let s = match cx.source {
            PacketSource::Port(p) | PacketSource::Recirculated { original: p, .. } => (p.0 & 1) as u8,
            _ => 0,
        };
        let mut g = d;
        if self.states {
            let rule = if self.tier == Tier::Tor { self.tor } else { self.agg };
            let q0 = self.group_queue(cx.group, cx.port_up, 0, cx.depths);
            let q1 = self.group_queue(cx.group, cx.port_up, 1, cx.depths);
            let margin = self.equal_margin;
            let (old, new) = cx.register(state_reg, 0, |old| {
                let new = next_state(old as u8, q0, q1, rule, margin);
                (new as u64, (old as u8, new))
            })?;
            self.c.state_changes += (old != new) as u64;
            g = table3(new, d, s);
            self.c.state_moves += (g != d) as u64;
        }
        let forbidden = self.forbidden(cx, dst)?;
        if forbidden & (1 << g) != 0 && forbidden & (1 << (g ^ 1)) == 0 {
            g ^= 1;
            self.c.avoided += 1;
        }
        // The up members of link group `g` (every up uplink when both
        // groups are forbidden), in port order.
        let all = forbidden == 3;
        let group = cx.group;
        let member = |i: usize, p: &PortId| (all || i % 2 == g as usize) && up(p);
        let n = group.iter().enumerate().filter(|(i, p)| member(*i, p)).count() as u64;
        if n == 0 {
            // The whole link group is down before the CPU heard of it: any
            // up uplink (as every scheme of weft fails over).
            self.c.no_group += 1;
            cx.forward_to(group.iter().copied().find(|p| up(p)));
            return Ok(());
        }
        let k = cx.register(rr_reg, g as u32, |c| ((c + 1) & 0xffff, c))?;
        self.c.up_decisions += 1;
        let chosen = group.iter().enumerate().filter(|(i, p)| member(*i, p)).nth((k % n) as usize).map(|(_, p)| *p);
        cx.forward_to(chosen);
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("lbsp_up_decisions", self.c.up_decisions),
            ("lbsp_failure_avoided", self.c.avoided),
            ("lbsp_state_moves", self.c.state_moves),
            ("lbsp_state_changes", self.c.state_changes),
            ("lbsp_no_group", self.c.no_group),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_groups_follow_the_host_number_bits() {
        // Host j = 0..3 of an edge: 10.p.e.2 .. 10.p.e.5.
        for j in 0..8u8 {
            let ip = Ipv4Address::new(10, 7, 3, j + 2);
            assert_eq!(host_index(ip), j as u32);
            assert_eq!(default_link_group(ip, false), j & 1, "ToR: LSB of {j}");
            assert_eq!(default_link_group(ip, true), (j >> 1) & 1, "aggregation: second LSB of {j}");
        }
    }

    #[test]
    fn table3_moves_only_the_input_parity_the_paper_names() {
        for d in 0..2 {
            for s in 0..2 {
                assert_eq!(table3(0, d, s), d, "state 0: by address only");
            }
        }
        assert_eq!((table3(1, 0, 0), table3(1, 0, 1), table3(1, 1, 0), table3(1, 1, 1)), (0, 1, 1, 1));
        assert_eq!((table3(2, 0, 0), table3(2, 0, 1), table3(2, 1, 0), table3(2, 1, 1)), (0, 0, 0, 1));
    }

    #[test]
    fn states_change_at_the_thresholds_of_section_5() {
        let tor = StateRule { threshold_pkts: 5.0, ratio: 1.5 };
        assert_eq!(next_state(0, 5.0, 1.0, tor, 1.0), 0, "not over the threshold");
        assert_eq!(next_state(0, 6.0, 3.9, tor, 1.0), 1, "6 > 5 and 6 > 1.5 x 3.9");
        assert_eq!(next_state(0, 6.0, 4.0, tor, 1.0), 0, "6 is not more than 1.5 x 4");
        assert_eq!(next_state(0, 2.0, 7.0, tor, 1.0), 2);
        assert_eq!(next_state(1, 4.0, 2.0, tor, 1.0), 1, "not yet almost equal");
        assert_eq!(next_state(1, 3.0, 2.0, tor, 1.0), 0, "within one packet: back to 0");
        let agg = StateRule { threshold_pkts: 20.0, ratio: 2.0 };
        assert_eq!(next_state(0, 20.5, 10.0, agg, 1.0), 1);
        assert_eq!(next_state(0, 20.5, 10.5, agg, 1.0), 0);
        assert_eq!(next_state(0, 19.0, 1.0, agg, 1.0), 0);
    }
}
