//! LBSP, load balancing based on symmetric path groups (Lim, "Enhancing
//! Robustness of Per-Packet Load-Balancing for Fat-Tree", Appl. Sci. 2021):
//! upward link-group choice, round robin inside a group, hello and failure
//! messages handled by the switch CPU, and the queue-differential states
//! of §5 with the aggregation switches' state exchange.
//!
//! - **Path groups** (§3.1, Table 1; §3.2). A ToR's uplinks and an
//!   aggregation switch's uplinks are each split into two *link groups* by
//!   the parity of the uplink's position (the ports of an equal-cost group
//!   are in port order, so position = aggregation switch index at a ToR,
//!   core position at an aggregation switch). A ToR picks the link group
//!   from the least significant bit of the destination's host number, an
//!   aggregation switch from the second least significant bit; together
//!   they name one of four path groups of equal size. Inside the group the
//!   packets go round robin (one counter per link group: LBSP keeps no
//!   per-flow state, §3.4). Downward forwarding is by address range: the
//!   L3 routes' single-port groups (§3.2, Fig. 4a).
//! - **Addressing** (docs/ARCHITECTURE.md#topologies): host `j` of edge `e` in pod `p` is
//!   `10.p.e.(j+2)`. The paper numbers hosts 0…k³/4−1 in pod, edge, host
//!   order: host number `n = leaf × hosts_per_leaf + j`, with the
//!   destination's leaf index from the route (its action data) and `j =
//!   last octet − 2`. With k/2 hosts per edge (a multiple of 4 for k ≥ 8)
//!   the LSBs of `n` are those of `j`; with 2 hosts per edge
//!   (`fat-tree-k4-rt`) the second LSB is the edge's parity. An edge's
//!   hosts are `10.p.e.0/24` and a pod's `10.p.0.0/16`: the paper's
//!   address ranges ([124…127], [112…127]) are these prefixes.
//! - **Failure detection** (§3.3.1). The packet generator fires every
//!   `hello_interval_us`: ingress sends a hello (`weft_wire::lbsp`, with
//!   the sender's tier position) out of every up port facing a switch and
//!   punts the generator packet to the CPU, which declares a neighbour
//!   silent after `dead_after` intervals without a hello (the receiving
//!   ingress writes each hello's time into `lbsp_hello_seen` and punts
//!   only the first after silence, from which the CPU learns the
//!   neighbour). A link also fails when the driver reports it down
//!   (port-status callback) or its rate drops below `degraded_below` of
//!   nominal: §3.4 treats a degraded link as a disconnected one.
//! - **Failure messages** (§3.3.1, Table 2). The switch that finds a link
//!   failed floods a message (type, affected range) to every neighbour
//!   switch; each switch's CPU floods a message it has not seen once more
//!   and applies it after the control-plane latency; recovery undoes it.
//!   Who sends what: an aggregation switch losing a ToR downlink sends
//!   type 0/1 (its own position parity = the ToR's link group) for the
//!   ToR's /24 — A31 for link A31–T31 sends type 1, [124…127]; a core
//!   switch losing an aggregation downlink sends type 2/3 (its position at
//!   the aggregation switch) for the pod's /16 with the failed aggregation
//!   switch's parity (from its hellos); the switch below a failed uplink
//!   avoids that link group for *all* hosts itself (§3.3.1: "the address
//!   range of all the hosts") and — weft's reading, so that a dead node's
//!   links are announced although the node cannot speak — floods the
//!   message the other end would have sent (a ToR: its /24; an
//!   aggregation switch: its pod with its own parity).
//! - **Applying** (§3.3.2). ToRs apply types 0/1 to the edge's range;
//!   aggregation switches of the failed one's parity apply types 2/3 to
//!   the pod's range (A1 and A3 for link A31–C15 in Fig. 5); ToRs ignore
//!   types 2/3 ("Type 3 does not affect the forwarding tables of ToR
//!   switches"). The entries sit in three exact-match tables
//!   (`lbsp_avoid_edge` keyed by the /24, `lbsp_avoid_pod` by the /16,
//!   `lbsp_avoid_all` with key 0), each a 2-bit mask of forbidden link
//!   groups (the OR of the failures in force, which the CPU keeps); ingress
//!   ORs the three hits. A packet whose group is forbidden takes the other;
//!   with both forbidden, any up uplink.
//! - **States** (§5.1, Fig. 8, Table 3). A ToR compares the mean queue
//!   length (packets) of its two link groups on every packet it forwards
//!   upwards: over `tor_threshold` and `tor_ratio` times the other group's
//!   → state 1 (group 0 crowded) or 2 (group 1 crowded); back to state 0
//!   when the two differ by at most `equal_margin` packets. In state 1 a
//!   packet for group 0 whose input port is odd goes to group 1; in state 2
//!   one for group 1 whose input port is even goes to group 0 (Table 3).
//!   Aggregation switches use `agg_threshold` / `agg_ratio` and change
//!   state only together with their partners (the same-parity aggregation
//!   switches of the pod, A0 and A2 in Fig. 5): a switch whose queues call
//!   for another state sends the proposal down to one ToR, which relays it
//!   up to every uplink of that parity, the proposer's included, so all of
//!   them take the state when the relay reaches them, at the same time
//!   (symmetric links). An unechoed proposal is repeated after
//!   `pair_retry_us`.
//!
//! Invariants: a packet goes up only through an up port of the equal-cost
//! group; in state 0 with no failure entry, every packet of a destination
//! uses the same link group at a switch; a forbidden group is never chosen
//! while the other has an up port; a failure entry stays exactly as long
//! as its failure; hosts cannot inject LBSP messages (dropped from
//! host-facing ports). LBSP runs only on generated fat-trees: any other
//! fabric is refused at load with the reason ([`Program::check_fabric`]).
//!
//! Tofino resources: the three avoid tables (stage 1), `lbsp_state`
//! (1 entry) and `lbsp_hello_seen` (256) in stage 2, `lbsp_rr` (2) in
//! stage 3 with `lbsp_pair_pending` (1), one packet generator,
//! queue-depth snapshot reads of the uplinks.

use super::{leaf_of_route, param_in, param_us, ParamInfo, Params, SchemeError, SchemeInfo, TimeScale};
use std::collections::{BTreeMap, BTreeSet};
use weft_tofino::l3::Route;
use weft_tofino::program::{CpuCx, Declarations, EmitTarget, PacketGenerator, PacketSource, QueueDepths, SwitchView};
use weft_tofino::resources::{TableDecl, TableKind};
use weft_tofino::tables::TableId;
use weft_tofino::{Gress, IngressCx, Program, ProgramError, RegisterId, SwitchRole};
use weft_wire::frame::{FrameInfo, FrameKind};
use weft_wire::ids::{PortId, QueueId};
use weft_wire::lbsp::{self as msg, Kind, Repr};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::Ipv4Address;

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: "lbsp",
        source: "LBSP (Lim, Appl. Sci. 2021) §3, §5",
        summary: "path groups from destination-address LSBs, round robin inside a link group, failure messages, queue-differential states",
        reference_rate: Some(BitRate::gbps(1)),
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
            ParamInfo {
                name: "hello_interval_us",
                default: "1000",
                unit: "µs",
                doc: "hello messages to every neighbour switch this often",
            },
            ParamInfo {
                name: "dead_after",
                default: "3",
                unit: "hellos",
                doc: "a neighbour silent for this many hello intervals has failed",
            },
            ParamInfo {
                name: "degraded_below",
                default: "0.5",
                unit: "fraction",
                doc: "a link whose rate falls below this fraction of its nominal rate counts as failed",
            },
            ParamInfo {
                name: "pair_retry_us",
                default: "1000",
                unit: "µs",
                doc: "an aggregation switch repeats a state proposal its partners did not echo after this",
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

impl Tier {
    fn code(self) -> u8 {
        match self {
            Tier::Tor => 0,
            Tier::Agg => 1,
            Tier::Core => 2,
        }
    }
}

/// Parameters of §5.
#[derive(Debug, Clone, Copy, PartialEq)]
struct StateRule {
    threshold_pkts: f64,
    ratio: f64,
}

/// Generator id of the hello timer.
const HELLO_GENERATOR: u8 = 1;

/// Which avoid table an entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Range {
    /// One edge's hosts (key: address >> 8).
    Edge,
    /// One pod's hosts (key: address >> 16).
    Pod,
    /// Every host (key 0).
    All,
}

/// What the switch CPU knows of one port's link (its software state).
#[derive(Debug, Clone, Copy, Default)]
struct PortHealth {
    /// The driver says the link is down.
    down: bool,
    /// No hello for `dead_after` intervals.
    silent: bool,
    /// The link runs below `degraded_below` of its nominal rate.
    degraded: bool,
    /// A hello was heard on it at least once.
    heard: bool,
    /// The neighbour's tier position, from its hellos.
    neighbour_position: Option<u16>,
}

impl PortHealth {
    fn failed(&self) -> bool {
        self.down || self.silent || self.degraded
    }
}

/// A failure in force at this switch: (origin, origin port, type).
type FailureId = (u32, u16, u8);

/// The switch CPU's part (§3.3): neighbours, failures in force, flooding.
#[derive(Debug, Clone, Default)]
struct ControlPlane {
    health: Vec<PortHealth>,
    seq: u32,
    seen: BTreeSet<(u32, u32)>,
    /// Failure entries in force: id → (table, key, link group).
    active: BTreeMap<FailureId, (Range, u64, u8)>,
}

/// What the program learns of its place at attach (§3.2's address ranges).
#[derive(Debug, Clone, Default)]
struct Place {
    address: Ipv4Address,
    /// Position among the upward ports of the tier below.
    position: Option<u16>,
    /// The address range below this switch (ToR: its /24, aggregation
    /// switch: its pod's /16).
    own_range: Option<(u32, u8)>,
    /// The upward equal-cost group, in port order.
    up_ports: Vec<PortId>,
    /// Per port: the address range reachable through it downwards.
    down_range: Vec<Option<(u32, u8)>>,
    /// Per port: faces a host.
    host_facing: Vec<bool>,
    /// Per port: nominal line rate.
    nominal: Vec<BitRate>,
    hosts_per_leaf: u32,
    control_queue: QueueId,
    /// Why LBSP cannot run here (reported by `check_fabric`).
    unusable: Option<String>,
}

/// The LBSP program.
#[derive(Debug, Clone)]
pub struct Lbsp {
    states: bool,
    tor: StateRule,
    agg: StateRule,
    equal_margin: f64,
    packet_bytes: f64,
    hello_ns: Nanos,
    dead_after: u32,
    degraded_below: f64,
    pair_retry_ns: Nanos,
    tier: Tier,
    place: Place,
    state: Option<RegisterId>,
    pending: Option<RegisterId>,
    rr: Option<RegisterId>,
    hello_seen: Option<RegisterId>,
    avoid: Option<[TableId; 3]>,
    cpu: ControlPlane,
    pair_seq: u32,
    c: Counters,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    up_decisions: u64,
    avoided: u64,
    state_moves: u64,
    state_changes: u64,
    no_group: u64,
    hellos_sent: u64,
    failures_detected: u64,
    recoveries_detected: u64,
    messages_flooded: u64,
    table_writes: u64,
    pair_messages: u64,
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
            hello_ns: param_us("lbsp", p, "hello_interval_us", 1000.0, true)?.max(1),
            dead_after: param_in("lbsp", p, "dead_after", "whole number >= 1", 3u32, |v: &u32| *v >= 1)?,
            degraded_below: param_in("lbsp", p, "degraded_below", "fraction in (0, 1]", 0.5, |v: &f64| *v > 0.0 && *v <= 1.0)?,
            pair_retry_ns: param_us("lbsp", p, "pair_retry_us", 1000.0, true)?,
            tier: Tier::Core,
            place: Place::default(),
            state: None,
            pending: None,
            rr: None,
            hello_seen: None,
            avoid: None,
            cpu: ControlPlane::default(),
            pair_seq: 0,
            c: Counters::default(),
        })
    }

    /// Its hello interval and pairing retry multiplied by `s` (docs/SCHEMES.md#parameter-scaling).
    pub fn time_scaled(mut self, s: TimeScale) -> Self {
        self.hello_ns = s.ns(self.hello_ns).max(1);
        self.pair_retry_ns = s.ns(self.pair_retry_ns);
        self
    }
}

/// The host's index on its edge switch in the addressing plan
/// (`10.p.e.(j+2)`).
pub fn host_index(dst: Ipv4Address) -> u32 {
    (dst.0 & 0xff).wrapping_sub(2) & 0xff
}

/// The paper's host number of `dst` (§3.2: hosts numbered in pod, edge,
/// host order): `leaf × hosts_per_leaf + j`.
pub fn host_number(dst: Ipv4Address, leaf: u32, hosts_per_leaf: u32) -> u32 {
    leaf.wrapping_mul(hosts_per_leaf).wrapping_add(host_index(dst))
}

/// The link group of §3.2 for host number `n` at a ToR (`second` false:
/// the LSB) or an aggregation switch (`second` true: the second LSB).
pub fn default_link_group(n: u32, second: bool) -> u8 {
    ((n >> second as u32) & 1) as u8
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

/// The avoid-table key of an address in `range`.
fn range_key(range: Range, addr: u32) -> u64 {
    match range {
        Range::Edge => (addr >> 8) as u64,
        Range::Pod => (addr >> 16) as u64,
        Range::All => 0,
    }
}

/// Where LBSP stands at this switch, from the routes (§3.2, Fig. 4a):
/// the upward group, the address range of each downward port and of the
/// switch itself. `Err` says why the fabric is not one LBSP can use.
fn place_of(tier: Tier, view: &SwitchView) -> Result<Place, String> {
    let n = view.host_facing.len();
    let mut place = Place {
        address: view.address,
        position: view.tier_position,
        down_range: vec![None; n],
        host_facing: view.host_facing.clone(),
        nominal: view.rates.clone(),
        hosts_per_leaf: view.hosts_per_leaf as u32,
        control_queue: QueueId(view.queues_per_port.saturating_sub(1)),
        ..Place::default()
    };
    let widest = view.routes.iter().max_by_key(|r| r.ports.len());
    if let Some(r) = widest.filter(|r| r.ports.len() > 1) {
        place.up_ports = r.ports.clone();
    }
    let single = |r: &Route| (r.ports.len() == 1).then(|| r.ports[0]);
    match tier {
        Tier::Tor => {
            let hosts: Vec<&Route> = view.routes.iter().filter(|r| r.len == 32).collect();
            let net = hosts.first().map(|r| r.prefix.0 & 0xffff_ff00);
            if net.is_none() || hosts.iter().any(|r| Some(r.prefix.0 & 0xffff_ff00) != net) {
                return Err("its hosts do not share one /24 (LBSP's address ranges are 10.pod.edge.0/24 per edge switch)".into());
            }
            if hosts.iter().any(|r| host_index(r.prefix) >= view.hosts_per_leaf as u32) {
                return Err("its hosts are not numbered .2, .3, ... on their /24 (the fat-tree generator's plan), so the destination's LSBs do not number them".into());
            }
            place.own_range = net.map(|n| (n, 24));
            if place.up_ports.is_empty() {
                return Err("it has no equal-cost uplinks".into());
            }
        }
        Tier::Agg => {
            if place.up_ports.is_empty() {
                return Err("it has no uplinks to core switches: LBSP needs a three-tier fat-tree (generator kind = \"fat-tree\"), not a leaf-spine".into());
            }
            let mut pod = None;
            for r in view.routes.iter().filter(|r| r.len == 24) {
                if let Some(p) = single(r) {
                    place.down_range[p.index()] = Some((r.prefix.0, 24));
                    if pod.is_some_and(|x| x != r.prefix.0 & 0xffff_0000) {
                        return Err("the edge switches below it are not in one 10.pod.0.0/16".into());
                    }
                    pod = Some(r.prefix.0 & 0xffff_0000);
                }
            }
            place.own_range = pod.map(|p| (p, 16));
            if view.tier_position.is_none() {
                return Err("its position among the edge switches' uplinks differs between them (not a generated fat-tree)".into());
            }
        }
        Tier::Core => {
            for r in view.routes.iter().filter(|r| r.len == 24) {
                if let Some(p) = single(r) {
                    let pod = (r.prefix.0 & 0xffff_0000, 16);
                    if place.down_range[p.index()].is_some_and(|x| x != pod) {
                        return Err("a port reaches edge switches of more than one 10.pod.0.0/16".into());
                    }
                    place.down_range[p.index()] = Some(pod);
                } else {
                    return Err("it has equal-cost choices (a core switch has none in a fat-tree)".into());
                }
            }
            if view.tier_position.is_none() {
                return Err("its position among the aggregation switches' uplinks differs between them (not a generated fat-tree)".into());
            }
        }
    }
    if tier != Tier::Core && !place.up_ports.len().is_multiple_of(2) {
        return Err(format!("it has {} uplinks: two link groups of equal size need an even number", place.up_ports.len()));
    }
    Ok(place)
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

    fn table_of(&self, r: Range) -> Option<TableId> {
        let [edge, pod, all] = self.avoid?;
        Some(match r {
            Range::Edge => edge,
            Range::Pod => pod,
            Range::All => all,
        })
    }

    fn message(&self, kind: Kind, value: u8, position: Option<u16>, range: (u32, u8), port: u16, seq: u32) -> Repr {
        Repr {
            kind,
            value,
            position,
            origin: self.place.address,
            origin_port: port,
            in_port: 0,
            prefix: Ipv4Address(range.0),
            prefix_len: range.1,
            tier: self.tier.code(),
            seq,
        }
    }

    /// The hello timer: a hello out of every up port that faces a switch.
    fn send_hellos(&mut self, cx: &mut IngressCx<'_>) {
        let hello = self.message(Kind::Hello, 0, self.place.position, (0, 0), 0, 0);
        for (i, host) in self.place.host_facing.iter().enumerate() {
            if !host && cx.port_up.get(i).copied().unwrap_or(false) {
                cx.emit(EmitTarget::Port(PortId(i as u16), self.place.control_queue), hello.frame());
                self.c.hellos_sent += 1;
            }
        }
    }

    /// An LBSP message reached ingress from `port`.
    fn receive(&mut self, cx: &mut IngressCx<'_>, port: PortId) -> Result<(), ProgramError> {
        if self.place.host_facing.get(port.index()).copied().unwrap_or(true) {
            // Hosts cannot speak for switches (docs/ARCHITECTURE.md#input-from-outside).
            cx.drop_packet();
            return Ok(());
        }
        let Ok(m) = Repr::parse_frame(cx.frame) else {
            cx.drop_packet();
            return Ok(());
        };
        match m.kind {
            Kind::Hello => {
                let Some(reg) = self.hello_seen else { return Ok(()) };
                let now_us = ((cx.now / 1_000) as u32).max(1);
                let before = cx.register(reg, port.0 as u32, |old| (now_us as u64, old))?;
                // The first hello (or the first after silence) goes to the
                // CPU, which learns the neighbour from it; the rest only
                // refresh the register the CPU polls.
                if before == 0 {
                    msg::set_in_port(cx.frame, port.0);
                    cx.to_cpu();
                } else {
                    cx.consume();
                }
            }
            Kind::Failure | Kind::Recovery => {
                msg::set_in_port(cx.frame, port.0);
                cx.to_cpu();
            }
            Kind::PairState => self.pair_state(cx, &m, port)?,
        }
        Ok(())
    }

    /// §5.1's state exchange. A ToR relays a proposal to its uplinks of
    /// the proposer's parity (the proposer included); an aggregation
    /// switch takes the proposed state when the relay reaches it, so the
    /// same-parity aggregation switches of a pod change together.
    fn pair_state(&mut self, cx: &mut IngressCx<'_>, m: &Repr, port: PortId) -> Result<(), ProgramError> {
        match self.tier {
            Tier::Tor if self.place.up_ports.contains(&port) => {
                let parity = m.position.map_or(0, |p| p & 1) as usize;
                for (i, p) in self.place.up_ports.iter().enumerate() {
                    if i % 2 == parity && cx.port_up.get(p.index()).copied().unwrap_or(false) {
                        cx.emit(EmitTarget::Port(*p, self.place.control_queue), cx.frame.clone());
                    }
                }
                cx.consume();
            }
            Tier::Agg if !self.place.up_ports.contains(&port) => {
                if let (Some(state), Some(pending)) = (self.state, self.pending) {
                    let old = cx.register(state, 0, |old| (m.value as u64, old))?;
                    self.c.state_changes += (old != m.value as u64) as u64;
                    cx.register(pending, 0, |_| (0, ()))?;
                }
                cx.consume();
            }
            _ => cx.drop_packet(),
        }
        Ok(())
    }

    /// An aggregation switch's proposal of a new state: out to one edge
    /// switch, unless the same proposal is already on its way.
    fn propose(&mut self, cx: &mut IngressCx<'_>, proposal: u8) -> Result<(), ProgramError> {
        let Some(pending) = self.pending else { return Ok(()) };
        let now_us = cx.now / 1_000;
        let retry_us = self.pair_retry_ns / 1_000;
        let send = cx.register(pending, 0, |old| {
            let (was, at) = (old & 3, old >> 2);
            if was == proposal as u64 + 1 && now_us.saturating_sub(at) < retry_us {
                (old, false)
            } else {
                ((now_us << 2) | (proposal as u64 + 1), true)
            }
        })?;
        if !send {
            return Ok(());
        }
        let down = (0..self.place.host_facing.len())
            .map(|i| PortId(i as u16))
            .find(|p| !self.place.up_ports.contains(p) && cx.port_up.get(p.index()).copied().unwrap_or(false));
        if let Some(p) = down {
            self.pair_seq = self.pair_seq.wrapping_add(1);
            let m = self.message(Kind::PairState, proposal, self.place.position, (0, 0), p.0, self.pair_seq);
            cx.emit(EmitTarget::Port(p, self.place.control_queue), m.frame());
            self.c.pair_messages += 1;
        }
        Ok(())
    }

    /// Recomputes the mask of `(range, key)` from the failures in force
    /// and writes it (after the control-plane latency).
    fn rewrite(&mut self, cx: &mut CpuCx<'_>, range: Range, key: u64) {
        let Some(t) = self.table_of(range) else { return };
        let mask = self.cpu.active.values().filter(|(r, k, _)| *r == range && *k == key).fold(0u64, |m, (_, _, g)| m | 1 << g);
        cx.write_table(t, key, (mask != 0).then_some(mask));
        self.c.table_writes += 1;
    }

    /// §3.3.2: the entry a failure message makes at this switch, if it
    /// affects flows through it.
    fn entry_for(&self, m: &Repr) -> Option<(Range, u64, u8)> {
        let own = self.place.own_range.map(|(p, _)| p);
        match (self.tier, m.value) {
            // ToR–aggregation link: every ToR avoids the link group for
            // the edge's hosts (its own hosts it reaches downwards).
            (Tier::Tor, 0 | 1) if m.prefix_len == 24 && own != Some(m.prefix.0) => {
                Some((Range::Edge, range_key(Range::Edge, m.prefix.0), m.value & 1))
            }
            // Aggregation–core link: the aggregation switches of the
            // failed one's parity (A1 and A3 for A31 in Fig. 5) avoid the
            // core link group for the pod's hosts.
            (Tier::Agg, 2 | 3)
                if m.prefix_len == 16
                    && own != Some(m.prefix.0)
                    && m.position.is_some_and(|p| Some(p & 1) == self.place.position.map(|q| q & 1)) =>
            {
                Some((Range::Pod, range_key(Range::Pod, m.prefix.0), m.value & 1))
            }
            _ => None,
        }
    }

    /// Applies a failure or recovery message (ours or a neighbour's).
    fn apply(&mut self, cx: &mut CpuCx<'_>, m: &Repr) {
        let Some(entry) = self.entry_for(m) else { return };
        let id = (m.origin.0, m.origin_port, m.value);
        match m.kind {
            Kind::Failure => {
                self.cpu.active.insert(id, entry);
            }
            Kind::Recovery => {
                self.cpu.active.remove(&id);
            }
            _ => return,
        }
        self.rewrite(cx, entry.0, entry.1);
    }

    /// Floods `m` out of every up port facing a switch but `except`.
    fn flood(&mut self, cx: &mut CpuCx<'_>, m: &Repr, except: Option<PortId>) {
        for (i, host) in self.place.host_facing.iter().enumerate() {
            let p = PortId(i as u16);
            if !host && Some(p) != except && cx.port_up.get(i).copied().unwrap_or(false) {
                cx.send(p, m.frame());
            }
        }
        self.c.messages_flooded += 1;
    }

    /// A port's link changed between working and failed: the local
    /// "all hosts" entry of an uplink (§3.3.1), and the failure message
    /// of Table 2 for the range below the link, flooded.
    fn announce(&mut self, cx: &mut CpuCx<'_>, port: PortId, failed: bool) {
        if failed {
            self.c.failures_detected += 1;
        } else {
            self.c.recoveries_detected += 1;
        }
        let kind = if failed { Kind::Failure } else { Kind::Recovery };
        let up_pos = self.place.up_ports.iter().position(|p| *p == port).map(|i| (i & 1) as u8);
        let own_parity = self.place.position.map(|p| p & 1);
        let health = self.cpu.health.get(port.index()).copied().unwrap_or_default();
        // (type, range, parity filter) of the message, if any.
        let message = match (self.tier, up_pos) {
            (Tier::Tor, Some(g)) => self.place.own_range.map(|r| (g, r, None)),
            (Tier::Agg, Some(g)) => self.place.own_range.map(|r| (2 + g, r, own_parity)),
            (Tier::Agg, None) => {
                own_parity.and_then(|q| self.place.down_range.get(port.index()).copied().flatten().map(|r| (q as u8, r, None)))
            }
            (Tier::Core, None) => match (self.place.position, health.neighbour_position) {
                (Some(c), Some(a)) => {
                    self.place.down_range.get(port.index()).copied().flatten().map(|r| (2 + (c & 1) as u8, r, Some(a & 1)))
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(g) = up_pos {
            // An uplink of ours: no destination through it (all hosts).
            let id = (self.place.address.0, port.0, 0xff);
            if failed {
                self.cpu.active.insert(id, (Range::All, 0, g));
            } else {
                self.cpu.active.remove(&id);
            }
            self.rewrite(cx, Range::All, 0);
        }
        if let Some((ty, range, parity)) = message {
            self.cpu.seq = self.cpu.seq.wrapping_add(1);
            let m = self.message(kind, ty, parity, range, port.0, self.cpu.seq);
            self.cpu.seen.insert((m.origin.0, m.seq));
            self.apply(cx, &m);
            self.flood(cx, &m, None);
        }
    }

    /// Sets one cause of a port's failure and announces a change.
    fn set_health(&mut self, cx: &mut CpuCx<'_>, port: PortId, f: impl FnOnce(&mut PortHealth)) {
        let Some(h) = self.cpu.health.get_mut(port.index()) else { return };
        let was = h.failed();
        f(h);
        let now = h.failed();
        if was != now {
            self.announce(cx, port, now);
        }
    }

    /// The hello timer's CPU half: neighbours silent for `dead_after`
    /// intervals have failed.
    fn check_neighbours(&mut self, cx: &mut CpuCx<'_>) {
        let Some(reg) = self.hello_seen else { return };
        let now_us = (cx.now / 1_000) as u32;
        let dead_us = (self.hello_ns.saturating_mul(self.dead_after as u64) / 1_000) as u32;
        for i in 0..self.cpu.health.len() {
            let h = self.cpu.health[i];
            if !h.heard || h.silent {
                continue;
            }
            let last = cx.regs.cpu_read(reg, i as u32).unwrap_or(0) as u32;
            if last != 0 && now_us.wrapping_sub(last) > dead_us {
                // The next hello goes to the CPU again (recovery).
                cx.write_register(reg, i as u32, 0);
                self.set_health(cx, PortId(i as u16), |h| h.silent = true);
            }
        }
    }
}

impl Program for Lbsp {
    fn has_egress(&self) -> bool {
        false
    }
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
        self.pending = Some(d.register("lbsp_pair_pending", Gress::Ingress, 3, 1, 32));
        self.hello_seen = Some(d.register("lbsp_hello_seen", Gress::Ingress, 2, 256, 32));
        d.packet_generator(PacketGenerator { id: HELLO_GENERATOR, period_ns: self.hello_ns, frame_len: 64 });
        d.port_status_to_cpu();
        d.metadata_bits(2 + 2 + 8 + 16 + 32);
    }

    fn attach(&mut self, view: &SwitchView) {
        self.tier = match view.role {
            SwitchRole::Leaf => Tier::Tor,
            SwitchRole::Spine => Tier::Agg,
            SwitchRole::Core | SwitchRole::Other => Tier::Core,
        };
        self.place = match place_of(self.tier, view) {
            Ok(p) => p,
            Err(why) => Place { unusable: Some(why), ..Place::default() },
        };
        if view.role == SwitchRole::Other {
            self.place.unusable =
                Some("it has no fat-tree tier (LBSP runs on generated fat-trees: [generator] kind = \"fat-tree\")".into());
        }
        self.cpu.health = vec![PortHealth::default(); view.host_facing.len()];
    }

    fn check_fabric(&self, _view: &SwitchView) -> Result<(), String> {
        match &self.place.unusable {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    fn route_data(&self, route: &Route) -> Option<u32> {
        leaf_of_route(route)
    }

    fn claim(&self, info: &FrameInfo, for_switch: bool) -> bool {
        !for_switch && info.kind == FrameKind::Other(msg::ETHERTYPE)
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        match cx.source {
            PacketSource::Generator(HELLO_GENERATOR) => {
                self.send_hellos(cx);
                // The generator packet goes on to the CPU, which polls the
                // neighbours' last hello times.
                cx.to_cpu();
                return Ok(());
            }
            PacketSource::Port(p) if cx.claimed => return self.receive(cx, p),
            _ => {}
        }
        let up = |p: &PortId| cx.port_up.get(p.index()).copied().unwrap_or(false);
        let ip = cx.info.ip;
        if cx.group.len() <= 1 || self.tier == Tier::Core || ip.is_none() {
            // Downward (or nothing to choose): by address range.
            cx.forward_to(cx.group.first().copied().filter(|p| up(p)));
            return Ok(());
        }
        let dst = ip.map_or(Ipv4Address(0), |i| i.dst);
        let (Some(state_reg), Some(rr_reg)) = (self.state, self.rr) else { return Ok(()) };
        let n = host_number(dst, cx.route_data.unwrap_or(0), self.place.hosts_per_leaf);
        let d = default_link_group(n, self.tier == Tier::Agg);
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
            let state = if self.tier == Tier::Tor {
                let (old, new) = cx.register(state_reg, 0, |old| {
                    let new = next_state(old as u8, q0, q1, rule, margin);
                    (new as u64, (old as u8, new))
                })?;
                self.c.state_changes += (old != new) as u64;
                new
            } else {
                // Aggregation switches change state only together with
                // their partners (§5.1): a change is proposed to them and
                // taken when the relay comes back.
                let state = cx.register(state_reg, 0, |old| (old, old as u8))?;
                let proposal = next_state(state, q0, q1, rule, margin);
                if proposal != state {
                    self.propose(cx, proposal)?;
                }
                state
            };
            g = table3(state, d, s);
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
        let count = group.iter().enumerate().filter(|(i, p)| member(*i, p)).count() as u64;
        if count == 0 {
            // The whole link group is down before the CPU heard of it: any
            // up uplink (as every scheme of weft fails over).
            self.c.no_group += 1;
            cx.forward_to(group.iter().copied().find(|p| up(p)));
            return Ok(());
        }
        let k = cx.register(rr_reg, g as u32, |c| ((c + 1) & 0xffff, c))?;
        self.c.up_decisions += 1;
        let chosen = group.iter().enumerate().filter(|(i, p)| member(*i, p)).nth((k % count) as usize).map(|(_, p)| *p);
        cx.forward_to(chosen);
        Ok(())
    }

    fn cpu_receive(&mut self, cx: &mut CpuCx<'_>, frame: &[u8]) {
        if frame.get(12..14) == Some(&weft_tofino::program::GENERATOR_ETHERTYPE.to_be_bytes()[..]) {
            self.check_neighbours(cx);
            return;
        }
        let Ok(m) = Repr::parse_frame(frame) else { return };
        let port = PortId(m.in_port);
        match m.kind {
            Kind::Hello => {
                self.set_health(cx, port, |h| {
                    h.heard = true;
                    h.silent = false;
                    h.neighbour_position = m.position;
                });
            }
            Kind::Failure | Kind::Recovery => {
                if !self.cpu.seen.insert((m.origin.0, m.seq)) {
                    return;
                }
                self.apply(cx, &m);
                let mut fwd = m;
                fwd.in_port = 0;
                self.flood(cx, &fwd, Some(port));
            }
            Kind::PairState => {}
        }
    }

    fn cpu_port_status(&mut self, cx: &mut CpuCx<'_>, port: PortId, up: bool) {
        self.set_health(cx, port, |h| h.down = !up);
    }

    fn cpu_port_rate(&mut self, cx: &mut CpuCx<'_>, port: PortId, rate: BitRate) {
        let Some(nominal) = self.place.nominal.get(port.index()).copied() else { return };
        let degraded = (rate.bps() as f64) < nominal.bps() as f64 * self.degraded_below;
        self.set_health(cx, port, |h| h.degraded = degraded);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("lbsp_up_decisions", self.c.up_decisions),
            ("lbsp_failure_avoided", self.c.avoided),
            ("lbsp_state_moves", self.c.state_moves),
            ("lbsp_state_changes", self.c.state_changes),
            ("lbsp_no_group", self.c.no_group),
            ("lbsp_hellos_sent", self.c.hellos_sent),
            ("lbsp_failures_detected", self.c.failures_detected),
            ("lbsp_recoveries_detected", self.c.recoveries_detected),
            ("lbsp_messages_flooded", self.c.messages_flooded),
            ("lbsp_table_writes", self.c.table_writes),
            ("lbsp_pair_messages", self.c.pair_messages),
        ]
    }
}

/// The registry entry.
pub const SCHEME: crate::Scheme = crate::Scheme {
    info,
    build: |p, s| Ok(Box::new(Lbsp::from_params(p)?.time_scaled(s))),
    metrics: crate::SchemeMetrics {
        counters: &[
            ("lbsp_up_decisions", "Packets sent upwards through a link group (round robin inside it)."),
            ("lbsp_failure_avoided", "Packets moved to the other link group by a failure entry (§3.3.2)."),
            ("lbsp_state_moves", "Packets moved to the other link group by the state rule of Table 3."),
            ("lbsp_state_changes", "Changes of a switch's queue-differential state (§5.1)."),
            ("lbsp_no_group", "Packets whose link group had no up port before the CPU heard of it (sent to any up uplink)."),
            ("lbsp_hellos_sent", "Hello messages sent to neighbour switches (§3.3.1)."),
            ("lbsp_failures_detected", "Links this switch found failed (down, silent or degraded)."),
            ("lbsp_recoveries_detected", "Failed links this switch found working again."),
            ("lbsp_messages_flooded", "Failure and recovery messages this switch's CPU sent on (its own and new ones from neighbours)."),
            ("lbsp_table_writes", "Avoid-table entries the switch CPU wrote or removed."),
            ("lbsp_pair_messages", "State proposals an aggregation switch sent its partners (§5.1)."),
        ],
        gauges: &[],
        port_gauges: &[],
        distributions: &[],
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_groups_follow_the_host_number_bits() {
        // Host j = 0..3 of an edge: 10.p.e.2 .. 10.p.e.5.
        for j in 0..8u8 {
            let ip = Ipv4Address::new(10, 7, 3, j + 2);
            assert_eq!(host_index(ip), j as u32);
            // 4 hosts per edge (the paper's k = 8): host number 4 * leaf + j.
            let n = host_number(ip, 29, 4);
            assert_eq!(n, 116 + j as u32);
            assert_eq!(default_link_group(n, false), j & 1, "ToR: LSB of {j}");
            assert_eq!(default_link_group(n, true), (j >> 1) & 1, "aggregation: second LSB of {j}");
        }
        // 2 hosts per edge (fat-tree-k4-rt): the second LSB is the edge's.
        let n = host_number(Ipv4Address::new(10, 1, 1, 3), 3, 2);
        assert_eq!((n, default_link_group(n, false), default_link_group(n, true)), (7, 1, 1));
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
