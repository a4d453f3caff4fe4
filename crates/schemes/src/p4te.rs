//! P4TE (`../shared/papers/p4te-techreport.txt`): in-band traffic
//! engineering with Δ-event monitoring, per-metric routing groups that the
//! switch CPU reorders, traffic-class path selection and FACK rate control.
//!
//! **Monitoring (§6.1).**
//! - Egress queue depth, Algorithm 1 lines 1–10: per egress port the depth
//!   last reported; a packet that sees `depth ≥ last + Δq` is an increase
//!   event, `depth < last − Δq` a decrease event (the difference taken as
//!   signed numbers; the authors' `bit<19>` subtraction in
//!   egress_queue_depth_monitor.p4 wraps below Δ, which would report a
//!   decrease on every packet of a short queue), and the depth is stored.
//!   The depth is the queue's, in bytes, at dequeue (the reference reads
//!   `deq_qdepth`); Δq is `queue_delta_bytes` (§7.1: δ = 2 packets).
//! - Link utilisation, Algorithm 1 lines 11–18, §6.1.3: a two-rate
//!   three-colour meter (RFC 2698, [`weft_tofino::meters`]) per egress
//!   port at fixed CIR/PIR (§7.1: 70 % and 90 % of the link); a colour
//!   different from the port's last one is an increase or decrease event.
//! - Queue and utilisation events leave egress as one feedback frame to
//!   the CPU (a mirrored copy with a mirror header, [`EmitTarget::Cpu`]);
//!   a utilisation event also recirculates a copy to ingress, which writes
//!   the colour into `port_utilizations` (§6.1.3; 2 bits per port in one
//!   64-bit register word, so Algorithm 3 and the rate control read every
//!   port's colour with one access).
//! - Hop-to-hop delay, §6.1.2 and Algorithm 2: a leaf inserts the hop
//!   header ([`weft_wire::p4te`]) into every IPv4 packet from a host; every
//!   switch writes its ingress timestamp and egress port into it when it
//!   sends the packet up a port with path diversity (the only ports the
//!   routing groups hold; down ports clear the timestamp). The next switch
//!   computes `T^Dest − T^Source` for its ingress port and runs the same
//!   Δ rule (`delay_delta_us`, §7.1: 15 ms at the paper's 10 packets/s);
//!   on an event it sends a feedback frame back to the previous switch,
//!   whose ingress punts it to its CPU. The paper's Algorithm 2 is a
//!   figure; the text says it follows Algorithm 1 (§6.1.2), as done here on
//!   the raw delay (the authors' int_delay_processor.p4 smooths it first).
//! - Traffic-class incoming rate, §6.1.4, Algorithm 2 line 11: a one-rate
//!   two-colour meter (RFC 2697 with EBS = 0) per (ingress port, class) at
//!   the class's safe rate (§7.1: 65 % of the port for short flows, 35 %
//!   for large ones); not green = the class is over its safe rate.
//!
//! **Path control (§6.2, §6.3).** Downward: the switch's own L3 table
//! (prefix routing; one port, no choice). Upward (a route with several
//! ports): three routing-group tables — delay, queue depth, utilisation —
//! each with `groups` entries, key = group (0 = highest priority), action
//! data = the set of member ports (an action-profile group). A lookup
//! takes the highest-priority group that has an up member and hashes the
//! flow onto its members (the ternary match with the member-count range of
//! cp_assisted_multicriteria_upstream_routing_tables.p4). At load all
//! upward ports are in group 0 (§6.2.1.2, Algorithm 4 lines 1–5).
//! Algorithm 3 then picks, per traffic class, with flowlets
//! (`flowlet_gap_us`; FLOWLET_INTER_PACKET_GAP_THRESHOLD = 40 ms in the
//! authors' CONSTANTS.p4): short (latency-sensitive) flowlets take the
//! low-delay port if it is green, else the low-queue-depth port (yellow)
//! or the low-utilisation port (red); large (throughput) flowlets the
//! low-utilisation port if green, else low queue depth (yellow) or low
//! delay (red); other traffic the low-queue-depth port per packet
//! (line 33). Traffic classes are IPv4 TOS values (iperf3 `-S`; the paper's
//! 0x10 and 0x08; the authors' CONSTANTS.p4 notes they arrive as DSCP 4
//! and 2), matched on the DSCP bits.
//!
//! The CPU (§6.3, Algorithm 4) moves the event's port one group down
//! (increase) or up (decrease) within `0..groups`, writing the two
//! affected group entries in one batch that the switch applies after its
//! control-plane latency (the topology's `cpu_latency`) plus
//! `cp_delay_us`, so the data plane sees the port in its old group or in
//! its new one, never in neither or both (§6.2.1.2's consistency argument).
//!
//! **Rate control (§6.4).** At the switch that forwards a TCP data packet
//! of a class over its safe rate (incoming colour not green): if the chosen
//! port is not green, a FACK reducing the window by `window_decrease`
//! (¼, §6.4.2) and an ECN mark on the packet; if it is green, a FACK raising
//! the window by `window_increase` (1/256). No action for a class under its
//! safe rate. The FACK is a pure ACK from the receiver to the sender whose
//! window is the data packet's own window so adjusted (what the authors'
//! leaf.p4 does: a switch does not know the receiver's window). The
//! sender's leaf keeps per flow the sequence number of the last rate
//! control and marks the flow's packets "blocked" for the next
//! `rate_control_bytes` (B, §6.4.1; SEQ_NUMBER_THRESHOLD_FOR_RATE_CONTROL
//! = 5000 in CONSTANTS.p4), and a switch that acts marks the packet so no
//! later switch does; a FACK passing the sender's leaf updates that record.
//! Its acknowledgment number (`fack_ack`): `acked` (default) — the last
//! acknowledgment the sender's leaf saw from the receiver, as §7.2.1
//! describes ("the last sequence number … for which the sender has
//! received acknowledgment"): it repeats the receiver's last ACK with a
//! new window, so it is a window update, not a duplicate ACK (RFC 5681 §2
//! (e)), for every sender that applies the window; it never
//! acknowledges data the receiver lacks (before the leaf has seen an ACK
//! of the flow, no FACK reaches the sender: counted). `segment` — the data packet's
//! sequence number (close to the authors' `seq + 1`): it acknowledges
//! bytes still in flight, so Linux applies even a smaller window, but a
//! byte lost behind the switch is then never retransmitted.
//!
//! Real Linux TCP and FACKs: Linux updates its send window from an ACK
//! only if it acknowledges new data, or carries a newer sequence number,
//! or (same numbers) a larger window (`tcp_may_update_window`). An `acked`
//! FACK carries the receiver's last sequence and acknowledgment numbers,
//! so Linux applies its increases but ignores its decreases, and counts a
//! FACK it ignored as a duplicate ACK (no FLAG_WIN_UPDATE); without SACK
//! three of them trigger a fast retransmit — the paper's extra
//! retransmissions — while with SACK (Linux's default) duplicate ACKs
//! without SACK blocks do not. The ECN mark acts only on ECN-capable flows
//! (iperf3 does not ask for ECN by default). weft's synthetic TCP takes the
//! window of every ACK (docs/HOSTS.md), so a FACK never counts as a duplicate
//! there.
//!
//! Hosts cannot forge P4TE state: a hop header on a packet from a host,
//! and a feedback frame from a host, are dropped and counted.
//!
//! Invariants: one feedback frame per Δ change per port and metric, none
//! in between; a port is in exactly one group per metric at every instant
//! the data plane sees; hosts receive packets without the hop header.

use super::flowlet::FlowletTable;
use super::{ecmp, param, param_in, param_us, ParamInfo, Params, SchemeError, SchemeInfo, TimeScale};
use std::collections::VecDeque;
use weft_tofino::meters::{Color, MeterConfig, MeterId, MeterKind};
use weft_tofino::program::{ControlPlaneInit, CpuCx, Declarations, EmitTarget, PacketSource, ScrapeView, SwitchView};
use weft_tofino::resources::{TableDecl, TableKind};
use weft_tofino::{EgressCx, Gress, IngressCx, Program, ProgramError, RegisterId, TableId};
use weft_wire::ids::{PortId, QueueId};
use weft_wire::p4te::{self as hdr, flags, Event, Feedback, FeedbackKind, Hop};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::{ipv4, tcp};

const SCHEME_NAME: &str = "p4te";

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: SCHEME_NAME,
        source: "P4TE tech report §6.1–§6.4 (Alg. 1–4), §7.1",
        summary:
            "Δ-event monitoring, routing groups per metric reordered by the switch CPU, traffic-class path selection, FACK rate control",
        reference_rate: Some(REFERENCE_RATE),
        params: vec![
            ParamInfo {
                name: "delay_delta_us",
                default: "15000",
                unit: "µs",
                doc: "Δ of the hop-to-hop delay events (Alg. 2; §7.1: 15 ms)",
            },
            ParamInfo {
                name: "queue_delta_bytes",
                default: "3000",
                unit: "bytes",
                doc: "Δ of the egress queue-depth events (Alg. 1; §7.1: δ = 2 packets)",
            },
            ParamInfo { name: "groups", default: "3", unit: "1..=1024", doc: "routing groups per metric (§7.1: 3 sub-ranges)" },
            ParamInfo {
                name: "util_cir_percent",
                default: "70",
                unit: "% of the link",
                doc: "utilisation meter CIR: green up to here (§7.1)",
            },
            ParamInfo {
                name: "util_pir_percent",
                default: "90",
                unit: "% of the link",
                doc: "utilisation meter PIR: yellow up to here, red beyond (§7.1)",
            },
            ParamInfo {
                name: "meter_burst_us",
                default: "100000",
                unit: "µs",
                doc: "meter bursts: CBS/PBS = rate x this (ConfigConst.py: 0.1 s), at least one full frame",
            },
            ParamInfo {
                name: "classes",
                default: "short:0x10:65,large:0x08:35",
                unit: "kind:TOS:safe-%",
                doc: "traffic classes: short (latency-sensitive) / large (throughput), IPv4 TOS, safe rate in % of the port (§7.1)",
            },
            ParamInfo {
                name: "flowlet_gap_us",
                default: "40000",
                unit: "µs",
                doc: "a gap this long starts a new flowlet (authors' CONSTANTS.p4: 40 ms)",
            },
            ParamInfo { name: "flowlet_entries", default: "8192", unit: "entries", doc: "flowlet and rate-control table size" },
            ParamInfo {
                name: "rate_control_bytes",
                default: "5000",
                unit: "bytes",
                doc: "B: no second rate control on a flow within this many bytes (§6.4.1; CONSTANTS.p4)",
            },
            ParamInfo { name: "window_decrease", default: "0.25", unit: "fraction", doc: "FACK window reduction (§6.4.2: 1/4)" },
            ParamInfo { name: "window_increase", default: "0.00390625", unit: "fraction", doc: "FACK window increase (§6.4.2: 1/256)" },
            ParamInfo {
                name: "fack_ack",
                default: "acked",
                unit: "acked|segment",
                doc: "a FACK's ACK number: the receiver's last ACK (§7.2.1) or the data segment's sequence number",
            },
            ParamInfo {
                name: "cp_delay_us",
                default: "0",
                unit: "µs",
                doc: "controller time per event, added to the switch's control-plane latency (the topology's cpu_latency)",
            },
        ],
    }
}

/// The paper's links between switches that carry its traffic: 20
/// packets/s of 1500 bytes between leaves and spines (§7; all its hosts sit
/// in one pod, so the 10 packets/s links to the super spine carry none),
/// what its time values (Δ = 15 ms, the 40 ms flowlet gap) are given for.
/// weft's shipped P4TE topologies run those links at 20 Mbit/s: scale
/// 0.012, the same 83x speed-up for every rate.
pub const REFERENCE_RATE: BitRate = BitRate(240_000);
/// Most routing groups per metric (§6.6: "1024 entries in a TCAM based
/// match-action-table is pretty common").
pub const MAX_GROUPS: u32 = 1024;
/// Most front-panel ports (2 colour bits each in one 64-bit register word).
pub const MAX_PORTS: usize = 32;

/// The three link metrics, in table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Hop-to-hop delay (§6.1.2).
    Delay = 0,
    /// Egress queue depth (§6.1.1).
    QueueDepth = 1,
    /// Link utilisation (§6.1.3).
    Utilization = 2,
}

impl Metric {
    /// All three.
    pub const ALL: [Metric; 3] = [Metric::Delay, Metric::QueueDepth, Metric::Utilization];
    fn name(self) -> &'static str {
        ["delay", "queue_depth", "utilization"][self as usize]
    }
}

/// Algorithm 3's traffic classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassKind {
    /// Latency-sensitive short flows (TRAFFIC_CLASS_LOW_DELAY).
    Short,
    /// Throughput-oriented large flows (TRAFFIC_CLASS_HIGH_THROUGHPUT).
    Large,
}

/// One configured traffic class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrafficClass {
    /// Its kind.
    pub kind: ClassKind,
    /// IPv4 TOS byte (DSCP << 2).
    pub tos: u8,
    /// Safe rate, % of the ingress port.
    pub safe_percent: f64,
}

fn bad(param: &str, value: &str, unit: &str) -> SchemeError {
    SchemeError::BadValue { scheme: SCHEME_NAME.into(), param: param.into(), value: value.into(), unit: unit.into() }
}

/// Parses `kind:TOS:safe-%,…`.
pub fn parse_classes(s: &str) -> Result<Vec<TrafficClass>, SchemeError> {
    let mut out: Vec<TrafficClass> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parts: Vec<&str> = item.split(':').map(str::trim).collect();
        let kind = match parts.first().copied() {
            Some("short") => ClassKind::Short,
            Some("large") => ClassKind::Large,
            _ => return Err(bad("classes", item, "class kind:TOS:safe-% whose kind is `short` or `large`")),
        };
        let tos = parts.get(1).and_then(|t| t.strip_prefix("0x").map_or_else(|| t.parse::<u8>().ok(), |h| u8::from_str_radix(h, 16).ok()));
        let Some(tos) = tos else { return Err(bad("classes", item, "class kind:TOS:safe-% with a TOS byte (e.g. 0x10)")) };
        let Some(rate) = parts.get(2).filter(|r| !r.is_empty()) else {
            return Err(bad("classes", item, "class kind:TOS:safe-% (this class has no safe rate)"));
        };
        let safe_percent: f64 = rate.trim_end_matches('%').parse().map_err(|_| bad("classes", item, "class kind:TOS:safe-%"))?;
        if !(safe_percent > 0.0 && safe_percent <= 100.0) || parts.len() > 3 {
            return Err(bad("classes", item, "class kind:TOS:safe-% with a safe rate in (0, 100]"));
        }
        if out.iter().any(|c| c.tos >> 2 == tos >> 2) {
            return Err(bad("classes", item, "class list with one class per DSCP"));
        }
        out.push(TrafficClass { kind, tos, safe_percent });
    }
    if out.is_empty() || out.len() > 8 {
        return Err(bad("classes", s, "list of 1 to 8 classes kind:TOS:safe-%"));
    }
    Ok(out)
}

/// Algorithm 1 lines 1–10 (and Algorithm 2's delay rule): the event a
/// value `v` causes against the stored `last`, with threshold `delta`, and
/// the value to store.
pub fn delta_event(last: u64, v: u64, delta: u64) -> (Event, u64) {
    if v >= last.saturating_add(delta) {
        (Event::Increase, v)
    } else if v.saturating_add(delta) < last {
        (Event::Decrease, v)
    } else {
        (Event::None, last)
    }
}

/// Algorithm 4's runtime step: the group a port moves to on an event, or
/// `None` when it stays (already in the last / first group).
pub fn regroup(old: u16, event: Event, groups: u16) -> Option<u16> {
    match event {
        Event::Increase if old + 1 < groups => Some(old + 1),
        Event::Decrease if old > 0 => Some(old - 1),
        _ => None,
    }
}

/// Algorithm 3's choice among the three candidates (ports found in the
/// delay, queue-depth and utilisation tables) for a packet of `class`,
/// given each port's utilisation colour.
pub fn select_port(class: Option<ClassKind>, candidates: [Option<PortId>; 3], colour: impl Fn(PortId) -> Color) -> Option<PortId> {
    let [delay, queue, util] = candidates;
    match class {
        Some(ClassKind::Short) => match delay.map(&colour) {
            Some(Color::Green) => delay,
            Some(Color::Yellow) => queue,
            Some(Color::Red) => util,
            None => queue.or(util),
        },
        Some(ClassKind::Large) => match util.map(&colour) {
            Some(Color::Green) => util,
            Some(Color::Yellow) => queue,
            Some(Color::Red) => delay,
            None => queue.or(delay),
        },
        None => queue,
    }
}

/// The FACK a switch's rate control sends (§6.4.1, §6.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateAction {
    /// Reduce the window (port not green).
    Decrease,
    /// Raise the window (port green).
    Increase,
}

/// §6.4.1's flow selection: the action for a class whose incoming colour
/// is `incoming`, forwarded to a port whose utilisation colour is `port`.
pub fn rate_action(incoming: Color, port: Color) -> Option<RateAction> {
    match (incoming, port) {
        (Color::Green, _) => None,
        (_, Color::Green) => Some(RateAction::Increase),
        _ => Some(RateAction::Decrease),
    }
}

/// Which acknowledgment number a FACK carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FackAck {
    /// The receiver's last acknowledgment, as the sender's leaf saw it.
    Acked,
    /// The data segment's sequence number.
    Segment,
}

impl std::str::FromStr for FackAck {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "acked" => Ok(FackAck::Acked),
            "segment" => Ok(FackAck::Segment),
            _ => Err(()),
        }
    }
}

impl std::fmt::Display for FackAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FackAck::Acked => "acked",
            FackAck::Segment => "segment",
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Regs {
    /// Ingress stage 0, per ingress port: the delay last reported (Alg. 2).
    delay_last: RegisterId,
    /// Ingress stage 1, per (ingress port, class): safe-rate meters.
    class_meter: MeterId,
    /// Ingress stage 2, one word: 2 colour bits per port (port_utilizations).
    colours: RegisterId,
    /// Ingress stage 7, per flow: last rate-controlled sequence + 1 (leaf).
    rc_seq: RegisterId,
    /// Ingress stage 6, per flow: the receiver's last ACK + 1 (leaf).
    last_ack: RegisterId,
    /// Egress stage 0, per port: the depth last reported (Alg. 1).
    queue_last: RegisterId,
    /// Egress stage 1, per port: utilisation meters.
    util_meter: MeterId,
    /// Egress stage 2, per port: the colour last seen (old_packet_colors).
    colour_last: RegisterId,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    inserted: u64,
    stripped: u64,
    delay_events: u64,
    queue_events: u64,
    util_events: u64,
    feedback_to_cpu: u64,
    feedback_to_neighbour: u64,
    regroups: u64,
    new_flowlets: u64,
    no_group: u64,
    facks_decrease: u64,
    facks_increase: u64,
    rate_control_blocked: u64,
    facks_unknown_ack: u64,
    host_forged_drops: u64,
}

/// The P4TE program.
#[derive(Debug, Clone)]
pub struct P4te {
    delay_delta: Nanos,
    queue_delta: u64,
    groups: u16,
    util_cir: f64,
    util_pir: f64,
    burst: Nanos,
    classes: Vec<TrafficClass>,
    flowlet_gap: Nanos,
    entries: u32,
    rc_bytes: u32,
    window_down: f64,
    window_up: f64,
    fack_ack: FackAck,
    cp_delay: Nanos,
    // Learned at attach.
    leaf: bool,
    host_facing: Vec<bool>,
    upward: u64,
    rates: Vec<BitRate>,
    mtus: Vec<u16>,
    control_queue: QueueId,
    regs: Option<Regs>,
    tables: [Option<TableId>; 3],
    flowlets: Option<FlowletTable>,
    /// The controller's port → group map per metric (Alg. 4).
    group_of: [Vec<u16>; 3],
    /// Events waiting for the controller (with `cp_delay_us`).
    pending: VecDeque<(Metric, u16, Event)>,
    c: Counters,
}

impl P4te {
    /// Builds from parameters.
    pub fn from_params(p: &Params) -> Result<Self, SchemeError> {
        let pct = |k: &str, d: f64| param_in(SCHEME_NAME, p, k, "percentage in (0, 100]", d, |v: &f64| *v > 0.0 && *v <= 100.0);
        let frac = |k: &str, d: f64| param_in(SCHEME_NAME, p, k, "fraction in [0, 1)", d, |v: &f64| (0.0..1.0).contains(v));
        let util_cir = pct("util_cir_percent", 70.0)?;
        let util_pir = pct("util_pir_percent", 90.0)?;
        if util_pir < util_cir {
            return Err(bad("util_pir_percent", &util_pir.to_string(), "percentage at least util_cir_percent"));
        }
        let classes_text: String = param(SCHEME_NAME, p, "classes", "class list", "short:0x10:65,large:0x08:35".to_string())?;
        Ok(P4te {
            delay_delta: param_us(SCHEME_NAME, p, "delay_delta_us", 15_000.0, true)?,
            queue_delta: param_in(SCHEME_NAME, p, "queue_delta_bytes", "positive number of bytes", 3000u64, |v| *v > 0)?,
            groups: param_in(SCHEME_NAME, p, "groups", "number of groups in 1..=1024 (the routing-group table holds 1024)", 3u32, |v| {
                (1..=MAX_GROUPS).contains(v)
            })? as u16,
            util_cir,
            util_pir,
            burst: param_us(SCHEME_NAME, p, "meter_burst_us", 100_000.0, true)?,
            classes: parse_classes(&classes_text)?,
            flowlet_gap: param_us(SCHEME_NAME, p, "flowlet_gap_us", 40_000.0, true)?,
            entries: param_in(SCHEME_NAME, p, "flowlet_entries", "entries (1..=65536)", 8192u32, |v| (1..=65536).contains(v))?,
            rc_bytes: param_in(SCHEME_NAME, p, "rate_control_bytes", "bytes", 5000u32, |_| true)?,
            window_down: frac("window_decrease", 0.25)?,
            window_up: frac("window_increase", 1.0 / 256.0)?,
            fack_ack: param_in(SCHEME_NAME, p, "fack_ack", "`acked` or `segment`", FackAck::Acked, |_| true)?,
            cp_delay: param_us(SCHEME_NAME, p, "cp_delay_us", 0.0, false)?,
            leaf: false,
            host_facing: Vec::new(),
            upward: 0,
            rates: Vec::new(),
            mtus: Vec::new(),
            control_queue: QueueId(0),
            regs: None,
            tables: [None; 3],
            flowlets: None,
            group_of: [Vec::new(), Vec::new(), Vec::new()],
            pending: VecDeque::new(),
            c: Counters::default(),
        })
    }

    /// Its delay Δ, meter bursts, flowlet gap and controller delay
    /// multiplied by `s` (docs/SCHEMES.md#parameter-scaling).
    pub fn time_scaled(mut self, s: TimeScale) -> Self {
        self.delay_delta = s.ns(self.delay_delta);
        self.burst = s.ns(self.burst);
        self.flowlet_gap = s.ns(self.flowlet_gap);
        self.cp_delay = s.ns(self.cp_delay);
        self
    }

    fn faces_host(&self, p: PortId) -> bool {
        self.host_facing.get(p.index()).copied().unwrap_or(false)
    }
    fn is_upward(&self, p: PortId) -> bool {
        p.index() < 64 && self.upward & (1 << p.index()) != 0
    }
    fn class_of(&self, dscp: u8) -> Option<(usize, ClassKind)> {
        self.classes.iter().position(|c| c.tos >> 2 == dscp).map(|i| (i, self.classes[i].kind))
    }

    /// A meter burst for `rate`: rate x burst time, at least a full frame.
    fn burst_bytes(&self, rate: BitRate, port: usize) -> u64 {
        let frame = self.mtus.get(port).copied().unwrap_or(1500) as u64 + 64;
        ((rate.bps() as u128 * self.burst as u128 / 8_000_000_000) as u64).max(frame)
    }

    fn percent(rate: BitRate, pct: f64) -> BitRate {
        BitRate((rate.bps() as f64 * pct / 100.0).round() as u64)
    }

    /// The first group (by priority) of `metric`'s table with an up member,
    /// and the member the flow hashes to (`up_mask`: the up ports, bit per port).
    fn candidate(&self, cx: &IngressCx<'_>, metric: Metric, hash: u32, up_mask: u64) -> Result<Option<PortId>, ProgramError> {
        let Some(t) = self.tables[metric as usize] else { return Ok(None) };
        for g in 0..self.groups {
            let Some(members) = cx.table(t, g as u64)? else { continue };
            let alive = members & up_mask;
            let n = alive.count_ones();
            if n == 0 {
                continue;
            }
            let mut k = hash.rotate_left(metric as u32 * 8) % n;
            let mut m = alive;
            loop {
                let bit = m.trailing_zeros();
                if k == 0 {
                    return Ok(Some(PortId(bit as u16)));
                }
                k -= 1;
                m &= m - 1;
            }
        }
        Ok(None)
    }

    /// The group entries of `metric` after moving `port` to `to`.
    fn move_port(&mut self, cx: &mut CpuCx<'_>, metric: Metric, port: u16, event: Event) {
        let Some(table) = self.tables[metric as usize] else { return };
        let map = &mut self.group_of[metric as usize];
        let Some(&old) = map.get(port as usize) else { return };
        let Some(new) = regroup(old, event, self.groups) else { return };
        map[port as usize] = new;
        let mask_of =
            |g: u16| map.iter().enumerate().filter(|(p, m)| **m == g && self.upward & (1 << p) != 0).fold(0u64, |a, (p, _)| a | 1 << p);
        let (old_mask, new_mask) = (mask_of(old), mask_of(new));
        // One batch: applied together after the control-plane latency.
        cx.write_table(table, old as u64, (old_mask != 0).then_some(old_mask));
        cx.write_table(table, new as u64, Some(new_mask));
        self.c.regroups += 1;
    }

    fn handle_event(&mut self, cx: &mut CpuCx<'_>, metric: Metric, port: u16, event: Event) {
        if event == Event::None || !self.is_upward(PortId(port)) {
            return;
        }
        if self.cp_delay == 0 {
            self.move_port(cx, metric, port, event);
        } else {
            self.pending.push_back((metric, port, event));
            cx.timer(cx.now + self.cp_delay, 0);
        }
    }

    /// A claimed P4TE frame at ingress.
    fn feedback_in(&mut self, cx: &mut IngressCx<'_>, regs: Regs) -> Result<(), ProgramError> {
        let fb = Feedback::parse(cx.frame);
        match (cx.source, fb) {
            (PacketSource::Port(p), _) if self.faces_host(p) => {
                self.c.host_forged_drops += 1;
                cx.drop_packet();
            }
            (PacketSource::Port(_), Ok(fb)) if fb.kind == FeedbackKind::Neighbour => cx.to_cpu(),
            (PacketSource::Recirculated { .. }, Ok(fb)) if fb.kind == FeedbackKind::Utilization => {
                let shift = 2 * (fb.port as u32 % MAX_PORTS as u32);
                let colour = fb.color as u64 & 3;
                cx.register(regs.colours, 0, |w| ((w & !(3 << shift)) | colour << shift, ()))?;
                cx.consume();
            }
            _ => cx.drop_packet(),
        }
        Ok(())
    }
}

/// Whether the TCP segment at `at` carries data (not SYN/FIN/RST).
fn tcp_data(frame: &[u8], at: usize, ip_end: usize) -> Option<tcp::Repr> {
    let seg = tcp::Packet::new_checked(frame.get(at..ip_end)?).ok()?;
    let r = tcp::Repr::parse(&seg);
    let payload = ip_end.saturating_sub(at + seg.header_len());
    (payload > 0 && r.flags & (tcp::flags::SYN | tcp::flags::FIN | tcp::flags::RST) == 0).then_some(r)
}

impl Program for P4te {
    fn name(&self) -> &'static str {
        SCHEME_NAME
    }

    fn declare(&mut self, d: &mut Declarations) {
        let (i, e) = (Gress::Ingress, Gress::Egress);
        let ports = MAX_PORTS as u32;
        d.hash("p4te_5tuple_crc32", i, 0, 32);
        let classes = self.classes.len() as u32;
        self.regs = Some(Regs {
            delay_last: d.register("p4te_old_delays", i, 0, ports, 32),
            class_meter: d.meter("p4te_class_rate", i, 1, ports * classes, MeterKind::SingleRate),
            colours: d.register("p4te_port_utilizations", i, 2, 1, 64),
            rc_seq: d.register("p4te_rate_control_seq", i, 7, self.entries, 32),
            last_ack: d.register("p4te_last_ack", i, 6, self.entries, 32),
            queue_last: d.register("p4te_old_queue_depths", e, 0, ports, 32),
            util_meter: d.meter("p4te_link_util", e, 1, ports, MeterKind::TwoRate),
            colour_last: d.register("p4te_old_packet_colors", e, 2, ports, 8),
        });
        self.flowlets = Some(FlowletTable::declare(d, "p4te", self.entries, self.flowlet_gap, 3, 5));
        for m in Metric::ALL {
            self.tables[m as usize] = Some(d.table(TableDecl {
                name: format!("p4te_up_{}", m.name()),
                gress: i,
                stage: 4,
                kind: TableKind::Ternary,
                entries: self.groups as u32,
                key_bits: 32 + 10,
                action_bits: MAX_PORTS as u32,
            }));
        }
        d.metadata_bits(48 + 16 + 8 + 3 * 9 + 2 + 2);
    }

    fn attach(&mut self, view: &SwitchView) {
        self.leaf = view.leaf_index.is_some();
        self.host_facing = view.host_facing.clone();
        self.rates = view.rates.clone();
        self.mtus = view.mtus.clone();
        self.control_queue = QueueId(view.queues_per_port.saturating_sub(1));
        self.upward = view
            .routes
            .iter()
            .filter(|r| r.ports.len() > 1)
            .flat_map(|r| r.ports.iter())
            .filter(|p| p.index() < MAX_PORTS)
            .fold(0u64, |m, p| m | 1 << p.index());
        let n = view.host_facing.len();
        self.group_of = [vec![0; n], vec![0; n], vec![0; n]];
    }

    fn check_fabric(&self, view: &SwitchView) -> Result<(), String> {
        if view.host_facing.len() > MAX_PORTS {
            return Err(format!(
                "p4te keeps every port's utilisation colour in one 64-bit register word (2 bits per port, §6.1.3), so a switch has at most {MAX_PORTS} ports; this one has {}",
                view.host_facing.len()
            ));
        }
        Ok(())
    }

    fn control_plane_init(&mut self) -> ControlPlaneInit {
        let mut init = ControlPlaneInit::default();
        let Some(regs) = self.regs else { return init };
        for (p, rate) in self.rates.iter().enumerate().take(MAX_PORTS) {
            let (cir, pir) = (Self::percent(*rate, self.util_cir), Self::percent(*rate, self.util_pir));
            let cfg = MeterConfig::two_rate(cir, self.burst_bytes(cir, p), pir, self.burst_bytes(pir, p));
            init.meters.push((regs.util_meter, p as u32, cfg));
            for (k, class) in self.classes.iter().enumerate() {
                let safe = Self::percent(*rate, class.safe_percent);
                let cfg = MeterConfig::single_rate(safe, self.burst_bytes(safe, p), 0);
                init.meters.push((regs.class_meter, (p * self.classes.len() + k) as u32, cfg));
            }
        }
        // Algorithm 4, initialisation: every upward port in the highest
        // priority group of every metric.
        if self.upward != 0 {
            for t in self.tables.iter().flatten() {
                init.tables.push((*t, 0, self.upward));
            }
        }
        init
    }

    fn route_data(&self, route: &weft_tofino::l3::Route) -> Option<u32> {
        super::leaf_of_route(route)
    }

    fn claim(&self, info: &weft_wire::frame::FrameInfo, for_switch: bool) -> bool {
        let _ = info;
        !for_switch
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let (Some(regs), Some(flowlets)) = (self.regs, self.flowlets.clone()) else { return Ok(()) };
        if cx.claimed {
            if hdr::is_feedback(cx.frame) {
                return self.feedback_in(cx, regs);
            }
            cx.drop_packet();
            return Ok(());
        }
        let in_port = match cx.source {
            PacketSource::Port(p) => Some(p),
            _ => None,
        };
        let Some(ip) = cx.info.ip else {
            cx.forward_to(cx.group.first().copied());
            return Ok(());
        };
        let l3 = cx.info.l3_offset as usize;
        let from_host = in_port.is_some_and(|p| self.faces_host(p));
        // The hop header: inserted at the leaf, read (Alg. 2) elsewhere.
        let mut hop_at = hdr::find(cx.frame, l3);
        if from_host {
            if hop_at.is_some() {
                self.c.host_forged_drops += 1;
                cx.drop_packet();
                return Ok(());
            }
            if self.leaf && hdr::insert(cx.frame, l3, &Hop::default()).is_ok() {
                self.c.inserted += 1;
                hop_at = hdr::find(cx.frame, l3);
            }
        }
        let mut hop = hop_at.and_then(|at| hdr::read(cx.frame, at)).unwrap_or_default();
        if let (Some(p), false, true) = (in_port, from_host, hop.flags & flags::TIMESTAMP != 0) {
            let delay = hop.delay_until(cx.now);
            let delta = self.delay_delta;
            let (event, _) = cx.register(regs.delay_last, p.0 as u32 % MAX_PORTS as u32, |last| {
                let (ev, store) = delta_event(last, delay.min(u32::MAX as u64), delta);
                (store, (ev, store))
            })?;
            if event != Event::None {
                self.c.delay_events += 1;
                self.c.feedback_to_neighbour += 1;
                let fb = Feedback {
                    kind: FeedbackKind::Neighbour,
                    port: hop.port,
                    delay: event,
                    queue: Event::None,
                    util: Event::None,
                    color: 0,
                    delay_ns: delay.min(u32::MAX as u64) as u32,
                    queue_bytes: 0,
                };
                cx.emit(EmitTarget::Port(p, self.control_queue), fb.frame());
            }
        }
        let is_fack = hop.flags & flags::FACK != 0;
        // §6.1.4: the class's incoming rate against its safe rate.
        let class = self.class_of(ip.dscp);
        let incoming = match (class, in_port, is_fack) {
            (Some((k, _)), Some(p), false) => cx.meter(regs.class_meter, (p.index() % MAX_PORTS * self.classes.len() + k) as u32)?,
            _ => Color::Green,
        };
        // Every port's utilisation colour (port_utilizations).
        let colours = cx.register(regs.colours, 0, |w| (w, w))?;
        let colour = |p: PortId| Color::from_bits(colours >> (2 * (p.index() % MAX_PORTS)));
        let hash = ecmp::flow_hash(cx.hash_seed, (ip.src.0, ip.dst.0, ip.protocol, ip.src_port, ip.dst_port), true);
        let up = |cx: &IngressCx<'_>, p: PortId| cx.port_up.get(p.index()).copied().unwrap_or(false);
        let egress = if cx.group.len() <= 1 {
            cx.group.first().copied().filter(|p| up(cx, *p))
        } else {
            // Algorithm 3.
            let up_mask = cx.port_up.iter().take(64).enumerate().fold(0u64, |m, (i, up)| m | (*up as u64) << i);
            let candidates = [
                self.candidate(cx, Metric::Delay, hash, up_mask)?,
                self.candidate(cx, Metric::QueueDepth, hash, up_mask)?,
                self.candidate(cx, Metric::Utilization, hash, up_mask)?,
            ];
            let chosen = select_port(class.map(|c| c.1), candidates, colour);
            let fallback = |cx: &IngressCx<'_>| ecmp::select_resilient(cx.group, cx.port_up, hash).0;
            if chosen.is_none() {
                self.c.no_group += 1;
            }
            if class.is_some() {
                let d = flowlets.lookup(cx, hash, |cx| Ok(chosen.filter(|p| cx.group.contains(p)).or_else(|| fallback(cx))))?;
                self.c.new_flowlets += d.new_flowlet as u64;
                d.port
            } else {
                chosen.filter(|p| cx.group.contains(p)).or_else(|| fallback(cx))
            }
        };
        let to_host = egress.is_some_and(|p| self.faces_host(p));
        // The L4 header moved if this switch inserted the hop header.
        let (l4, ip_end) = match cx.frame.get(l3..l3 + 4) {
            Some(b) => (l3 + (b[0] & 0xf) as usize * 4, l3 + u16::from_be_bytes([b[2], b[3]]) as usize),
            None => (l3, l3),
        };
        // §6.4: rate control of TCP data of a known class.
        let data = (ip.protocol == 6 && !is_fack && !to_host).then(|| tcp_data(cx.frame, l4, ip_end)).flatten();
        if let (Some(seg), Some(out), Some(at), Some((_, _))) = (data, egress, hop_at, class) {
            let mut action = rate_action(incoming, colour(out));
            if hop.flags & (flags::RATE_CONTROL_BLOCKED | flags::RATE_CONTROL_APPLIED) != 0 {
                action = None;
            }
            let mut fack_ack = seg.seq;
            if from_host && self.leaf {
                let (b, idx) = (self.rc_bytes, hash % self.entries);
                // This leaf is the sender's: its FACK goes straight to the
                // host, with the receiver's last ACK (see the module doc);
                // without one seen yet, no FACK.
                let mut unknown = false;
                if action.is_some() && self.fack_ack == FackAck::Acked {
                    let last = cx.register(regs.last_ack, idx, |v| (v, v))?;
                    unknown = last == 0;
                    fack_ack = last.saturating_sub(1) as u32;
                }
                let acts = action.is_some() && !unknown;
                let blocked = cx.register(regs.rc_seq, idx, |last| {
                    let blocked = last != 0 && (seg.seq.wrapping_sub(last as u32 - 1) as i32) < b as i32;
                    let store = if !blocked && acts { seg.seq as u64 + 1 } else { last };
                    (store, blocked)
                })?;
                if blocked {
                    hop.flags |= flags::RATE_CONTROL_BLOCKED;
                    self.c.rate_control_blocked += 1;
                    action = None;
                } else if unknown {
                    self.c.facks_unknown_ack += 1;
                    action = None;
                }
            }
            if let Some(a) = action {
                hop.flags |= flags::RATE_CONTROL_APPLIED;
                let w = seg.window as f64;
                let window = match a {
                    RateAction::Decrease => {
                        self.c.facks_decrease += 1;
                        if matches!(ip.ecn, ipv4::Ecn::Ect0 | ipv4::Ecn::Ect1) {
                            ipv4::Packet::new_unchecked(&mut cx.frame[l3..]).set_ecn(ipv4::Ecn::Ce);
                        }
                        (w - (w * self.window_down).floor()).max(1.0)
                    }
                    RateAction::Increase => {
                        self.c.facks_increase += 1;
                        (w + (w * self.window_up).floor().max(1.0)).min(65535.0)
                    }
                };
                let mut fack = hdr::fack(&hdr::FackOf {
                    sender: ip.src,
                    receiver: ip.dst,
                    sender_port: seg.src_port,
                    receiver_port: seg.dst_port,
                    seq: seg.ack,
                    ack: fack_ack,
                    window: window as u16,
                    dscp: ip.dscp,
                });
                if let Some(p) = in_port {
                    if from_host {
                        // Hosts never see the hop header.
                        let _ = hdr::strip(&mut fack, weft_wire::ethernet::HEADER_LEN);
                    }
                    cx.emit(EmitTarget::Port(p, QueueId(0)), fack);
                }
            }
            let _ = hdr::write(cx.frame, l3, at, &hop);
        }
        // The sender's leaf: FACKs and the receiver's ACKs towards its host.
        if to_host && hop_at.is_some() && self.leaf {
            let at = l4;
            if let Some(seg) = cx.frame.get(at..ip_end).and_then(|b| tcp::Packet::new_checked(b).ok()).map(|s| tcp::Repr::parse(&s)) {
                // The data flow's hash at this leaf: the reverse tuple.
                let idx = ecmp::flow_hash(cx.hash_seed, (ip.dst.0, ip.src.0, 6, ip.dst_port, ip.src_port), true) % self.entries;
                if is_fack {
                    let last = cx.register(regs.last_ack, idx, |v| (v, v))?;
                    cx.register(regs.rc_seq, idx, |_| (seg.ack as u64 + 1, ()))?;
                    if self.fack_ack == FackAck::Acked {
                        if last == 0 {
                            // As above: never acknowledge unseen data.
                            self.c.facks_unknown_ack += 1;
                            cx.drop_packet();
                            return Ok(());
                        }
                        let ack = (last - 1) as u32;
                        let b = &mut cx.frame[at..ip_end];
                        b[8..12].copy_from_slice(&ack.to_be_bytes());
                        tcp::Packet::new_unchecked(b).fill_checksum(ip.src, ip.dst);
                    }
                } else if seg.flags & tcp::flags::ACK != 0 {
                    cx.register(regs.last_ack, idx, |_| (seg.ack as u64 + 1, ()))?;
                }
            }
        }
        if to_host && hop_at.is_some() && hdr::strip(cx.frame, l3).is_ok() {
            self.c.stripped += 1;
        }
        cx.forward_to(egress);
        Ok(())
    }

    fn egress(&mut self, cx: &mut EgressCx<'_>) -> Result<(), ProgramError> {
        let Some(regs) = self.regs else { return Ok(()) };
        if self.faces_host(cx.port) || cx.port.index() >= MAX_PORTS {
            return Ok(());
        }
        let Some(info) = cx.info() else { return Ok(()) };
        let Some(ip) = info.ip else { return Ok(()) };
        let l3 = info.l3_offset as usize;
        let upward = self.is_upward(cx.port);
        if let Some(at) = hdr::find(cx.frame, l3) {
            if let Some(mut hop) = hdr::read(cx.frame, at) {
                if upward {
                    hop.flags |= flags::TIMESTAMP;
                    hop.port = cx.port.0;
                    hop.t_source = cx.enq_ts;
                } else {
                    hop.flags &= !flags::TIMESTAMP;
                }
                let _ = hdr::write(cx.frame, l3, at, &hop);
            }
        }
        let _ = ip;
        if !upward {
            return Ok(());
        }
        // Algorithm 1.
        let (depth, delta) = (cx.deq_depth, self.queue_delta);
        let port = cx.port.0 as u32;
        let queue = cx.register(regs.queue_last, port, |last| {
            let (ev, store) = delta_event(last, depth, delta);
            (store, ev)
        })?;
        let new = cx.meter(regs.util_meter, port)?;
        let old = cx.register(regs.colour_last, port, |v| (new as u64, Color::from_bits(v)))?;
        let util = match new.cmp(&old) {
            std::cmp::Ordering::Greater => Event::Increase,
            std::cmp::Ordering::Less => Event::Decrease,
            std::cmp::Ordering::Equal => Event::None,
        };
        if queue == Event::None && util == Event::None {
            return Ok(());
        }
        self.c.queue_events += (queue != Event::None) as u64;
        self.c.util_events += (util != Event::None) as u64;
        self.c.feedback_to_cpu += 1;
        let fb = Feedback {
            kind: FeedbackKind::Local,
            port: cx.port.0,
            delay: Event::None,
            queue,
            util,
            color: new as u8,
            delay_ns: 0,
            queue_bytes: depth.min(u32::MAX as u64) as u32,
        };
        cx.emit(EmitTarget::Cpu, fb.frame());
        if util != Event::None {
            cx.emit(EmitTarget::Recirculate, Feedback { kind: FeedbackKind::Utilization, ..fb }.frame());
        }
        Ok(())
    }

    fn cpu_receive(&mut self, cx: &mut CpuCx<'_>, frame: &[u8]) {
        let Ok(fb) = Feedback::parse(frame) else { return };
        match fb.kind {
            FeedbackKind::Neighbour => self.handle_event(cx, Metric::Delay, fb.port, fb.delay),
            FeedbackKind::Local => {
                self.handle_event(cx, Metric::QueueDepth, fb.port, fb.queue);
                self.handle_event(cx, Metric::Utilization, fb.port, fb.util);
            }
            FeedbackKind::Utilization => {}
        }
    }

    fn cpu_timer(&mut self, cx: &mut CpuCx<'_>, _token: u64) {
        if let Some((m, p, e)) = self.pending.pop_front() {
            self.move_port(cx, m, p, e);
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.c;
        vec![
            ("p4te_inserted", c.inserted),
            ("p4te_stripped", c.stripped),
            ("p4te_delay_events", c.delay_events),
            ("p4te_queue_events", c.queue_events),
            ("p4te_util_events", c.util_events),
            ("p4te_feedback_to_cpu", c.feedback_to_cpu),
            ("p4te_feedback_to_neighbour", c.feedback_to_neighbour),
            ("p4te_regroups", c.regroups),
            ("p4te_new_flowlets", c.new_flowlets),
            ("p4te_no_group", c.no_group),
            ("p4te_facks_decrease", c.facks_decrease),
            ("p4te_facks_increase", c.facks_increase),
            ("p4te_rate_control_blocked", c.rate_control_blocked),
            ("p4te_facks_unknown_ack", c.facks_unknown_ack),
            ("p4te_host_forged_drops", c.host_forged_drops),
        ]
    }

    fn port_gauges(&self, view: &ScrapeView<'_>) -> Vec<(&'static str, PortId, f64)> {
        let mut out = Vec::new();
        for m in Metric::ALL {
            let Some(t) = self.tables[m as usize] else { continue };
            let name = ["p4te_group_delay", "p4te_group_queue_depth", "p4te_group_utilization"][m as usize];
            for (g, mask) in view.tables.entries(t) {
                for p in 0..64u16 {
                    if mask & (1 << p) != 0 {
                        out.push((name, PortId(p), g as f64));
                    }
                }
            }
        }
        out
    }
}

/// The scheme's registry entry.
pub const SCHEME: crate::Scheme = crate::Scheme {
    info,
    build: |p, s| Ok(Box::new(P4te::from_params(p)?.time_scaled(s))),
    metrics: crate::SchemeMetrics {
        counters: &[
            ("p4te_inserted", "Packets from hosts a leaf gave the hop header (§6.1.2)."),
            ("p4te_stripped", "Packets whose hop header a leaf removed before the host."),
            ("p4te_delay_events", "Hop-to-hop delay Δ events found at ingress (Alg. 2), each sent to the previous switch."),
            ("p4te_queue_events", "Egress queue-depth Δ events (Alg. 1 lines 1-10)."),
            ("p4te_util_events", "Link-utilisation colour changes (Alg. 1 lines 11-18)."),
            ("p4te_feedback_to_cpu", "Feedback frames egress sent to the switch CPU."),
            ("p4te_feedback_to_neighbour", "Delay feedback frames sent to the previous switch."),
            ("p4te_regroups", "Ports the CPU moved between routing groups (Alg. 4)."),
            ("p4te_new_flowlets", "Flowlets started (Alg. 3)."),
            ("p4te_no_group", "Upward packets whose tables had no up port (ECMP over the route's ports)."),
            ("p4te_facks_decrease", "FACKs that reduced a sender's window (§6.4)."),
            ("p4te_facks_increase", "FACKs that raised a sender's window (§6.4)."),
            ("p4te_rate_control_blocked", "Packets a leaf exempted from rate control (within B bytes of the last, §6.4.1)."),
            (
                "p4te_facks_unknown_ack",
                "FACKs not sent or dropped at the sender's leaf because it had seen no ACK of the flow yet (fack_ack = acked).",
            ),
            ("p4te_host_forged_drops", "Hop headers or feedback frames from hosts (dropped: hosts cannot forge P4TE state)."),
        ],
        gauges: &[],
        port_gauges: &[
            ("p4te_group_delay", "group", "Routing group of an upward port in the delay table (0 = highest priority)."),
            ("p4te_group_queue_depth", "group", "Routing group of an upward port in the queue-depth table."),
            ("p4te_group_utilization", "group", "Routing group of an upward port in the utilisation table."),
        ],
        distributions: &[],
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_events_fire_at_exactly_plus_or_minus_delta() {
        assert_eq!(delta_event(30, 39, 10), (Event::None, 30));
        assert_eq!(delta_event(30, 40, 10), (Event::Increase, 40));
        assert_eq!(delta_event(40, 30, 10), (Event::None, 40), "Alg. 1 line 7 is strict: < last − Δ");
        assert_eq!(delta_event(41, 30, 10), (Event::Decrease, 30));
        assert_eq!(delta_event(5, 0, 10), (Event::None, 5), "no wrap below Δ");
    }

    #[test]
    fn regrouping_moves_one_group_within_bounds() {
        assert_eq!(regroup(0, Event::Increase, 3), Some(1));
        assert_eq!(regroup(2, Event::Increase, 3), None);
        assert_eq!(regroup(0, Event::Decrease, 3), None);
        assert_eq!(regroup(2, Event::Decrease, 3), Some(1));
        assert_eq!(regroup(0, Event::None, 3), None);
    }

    #[test]
    fn algorithm_3_picks_by_class_and_colour() {
        let (d, q, u) = (Some(PortId(1)), Some(PortId(2)), Some(PortId(3)));
        let colours = |g: Color| move |p: PortId| if p == PortId(1) || p == PortId(3) { g } else { Color::Green };
        assert_eq!(select_port(Some(ClassKind::Short), [d, q, u], colours(Color::Green)), d);
        assert_eq!(select_port(Some(ClassKind::Short), [d, q, u], colours(Color::Yellow)), q);
        assert_eq!(select_port(Some(ClassKind::Short), [d, q, u], colours(Color::Red)), u);
        assert_eq!(select_port(Some(ClassKind::Large), [d, q, u], colours(Color::Green)), u);
        assert_eq!(select_port(Some(ClassKind::Large), [d, q, u], colours(Color::Yellow)), q);
        assert_eq!(select_port(Some(ClassKind::Large), [d, q, u], colours(Color::Red)), d);
        assert_eq!(select_port(None, [d, q, u], colours(Color::Red)), q);
    }

    #[test]
    fn rate_control_follows_section_6_4_1() {
        assert_eq!(rate_action(Color::Green, Color::Red), None);
        assert_eq!(rate_action(Color::Yellow, Color::Green), Some(RateAction::Increase));
        assert_eq!(rate_action(Color::Red, Color::Yellow), Some(RateAction::Decrease));
    }

    #[test]
    fn bad_parameters_are_one_clear_error_each() {
        let p = |k: &str, v: &str| Params::from([(k.to_string(), v.to_string())]);
        let e = P4te::from_params(&p("classes", "short:0x10,large:0x08:35")).unwrap_err().to_string();
        assert!(e.contains("classes") && e.contains("no safe rate"), "{e}");
        let e = P4te::from_params(&p("delay_delta_us", "0")).unwrap_err().to_string();
        assert!(e.contains("delay_delta_us") && e.contains("positive"), "{e}");
        let e = P4te::from_params(&p("queue_delta_bytes", "0")).unwrap_err().to_string();
        assert!(e.contains("queue_delta_bytes"), "{e}");
        let e = P4te::from_params(&p("groups", "2000")).unwrap_err().to_string();
        assert!(e.contains("groups") && e.contains("1024"), "{e}");
        assert!(P4te::from_params(&p("classes", "tiny:0x10:5")).is_err());
        assert!(P4te::from_params(&p("fack_ack", "maybe")).is_err());
        let c = parse_classes("short:0x10:65, large:8:35").unwrap();
        assert_eq!((c[0].tos, c[1].tos, c[1].safe_percent), (0x10, 8, 35.0));
    }
}
