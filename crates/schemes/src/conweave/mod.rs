//! ConWeave (Song et al., SIGCOMM 2023): congestion-evasive rerouting at the
//! source ToR and in-network reordering at the destination ToR, for RDMA.
//!
//! Source ToR (paper §3.2, module `source`):
//! - per connection (a 32-bit CRC of src IP, dst IP and UDP source port, the
//!   QP, indexed in `conn_entries` entries with a 16-bit signature) an epoch
//!   and a path; a new connection takes the first of two sampled paths that
//!   is not marked busy (the first sample if both are: "whenever a new path
//!   is needed", §3.2.2, as the authors' simulator's `RouteInput`);
//!   one data packet per epoch is marked RTT_REQUEST;
//! - an RTT_REPLY within θ_reply starts the next epoch; a data packet that
//!   finds the request older than θ_reply triggers a reroute: two paths are
//!   sampled (from different banks of the path-status table), the first
//!   that is not the current path and not marked busy is taken; this packet
//!   goes on the OLD path marked TAIL, later ones on the NEW path marked
//!   REROUTED and carrying TAIL_TX_TSTAMP; if both samples are busy the
//!   reroute is aborted and monitoring restarts;
//! - CLEAR from the destination ToR ends the reroute and starts the next
//!   epoch; so does θ_inactive without packets (CLEAR lost), which also
//!   moves the connection to a sampled non-busy path (nothing is in flight;
//!   the authors' simulator does the same); so **at most two paths are in
//!   flight** per connection;
//! - NOTIFY marks (destination leaf, path) busy for θ_path_busy;
//! - source routing: the path id names the ToR uplink (low 4 bits) and the
//!   uplink one tier above (high 4 bits, fat-tree); switches above the ToR
//!   follow it.
//!
//! Destination ToR (§3.3, Appendix A, module `destination`; the reorder
//! queues' timer and usage samples in `reorder`; the register words in
//! `state`):
//! - answers RTT_REQUEST with RTT_REPLY, ECN-marked (CE) packets with
//!   NOTIFY, TAIL with CLEAR: control packets, truncated, strict highest
//!   priority (`frames`);
//! - REROUTED packets arriving before the TAIL of their epoch are held in a
//!   paused queue of the egress port towards the host: one of the 30 queues
//!   other than the default data queue 0 and the control queue 31, found in
//!   a 4-way associative table (4 register arrays in 4 stages; bank k holds
//!   queues q ≡ k + 1 mod 4). Reorder queues have strict priority above
//!   queue 0 and below the control queue, PFC class of the data;
//! - the TAIL goes to queue 0 behind the OLD packets; when it leaves the
//!   egress pipeline resumes the held queue (the queue id rides in the TAIL's
//!   timestamp header, as bridged metadata), which then drains before any
//!   later packet of queue 0; REROUTED packets after the TAIL go to queue 0;
//!   a TAIL the traffic manager drops before it leaves (a lossy fabric with
//!   a full buffer) cannot resume its queue, so the TAIL also gives the slot
//!   a deadline of θ_resume_default + θ_resume_extra, at which the timer
//!   resumes a queue that still holds packets;
//! - T_resume (Appendix A): on the first out-of-order packet, the arrival
//!   time of the latest OLD packet of the epoch plus (TAIL_TX − its TX), or
//!   now + θ_resume_default without one (a REROUTED packet that opens its
//!   epoch here); each later OLD packet re-estimates it; θ_resume_extra is
//!   added in every case (conweave-routing.cc, `RouteInput`,
//!   `timeExpectedToFlush`). A timer packet per held queue circles the
//!   recirculation port (~1 µs per pass) and resumes the queue (and sends
//!   CLEAR) when T_resume passes with no TAIL; it frees the queue's table
//!   entry once the queue is empty. The recirculation port's queue has a
//!   guaranteed minimum in the traffic manager (the target profile's
//!   `recirculation_min_cells`), so a full shared buffer never drops a
//!   timer packet: every held queue keeps a live timer;
//! - the destination ToR removes the ConWeave header before the host, which
//!   receives exactly what its peer sent.
//!
//! Fallbacks: non-RoCE traffic, traffic inside one rack, connections whose
//! table entry another active connection holds, and packets when no
//! reorder queue is free go by ECMP / queue 0 (counted).
//!
//! Invariants (tested with a whole switch in weft-core's
//! `tests/conweave.rs`, and end to end in the workspace's
//! `tests/tests/fabric/schemes.rs`):
//! REROUTED packets reach the host strictly after the TAIL and in order;
//! a connection never has a second reroute before CLEAR or θ_inactive;
//! every register is accessed once per pass in increasing stage order.
//!
//! Parameters and defaults (paper Table 3 and §4.1; docs/SCHEMES.md): θ_reply
//! 8 µs, θ_path_busy 8 µs, θ_inactive 300 µs, θ_resume_extra 16 µs (64 µs
//! on lossless switches, Appendix A; the authors' simulator uses 64 µs only
//! on lossless fat-trees, see `attach`), θ_resume_default 200 µs; on a
//! 3-tier fabric (detected from the switch's upward fan-out) θ_path_busy
//! 16 µs, θ_inactive 1 ms, θ_resume_default 600 µs, unless set explicitly.
//!
//! Tofino2 resources (`weft resources --scheme conweave`, with the L3
//! tables every program carries): 13 of 20 ingress stages, 13 stateful ALUs
//! of 160 (8.1 %), 32 SRAM blocks of 3 200 (1.0 %), 865 PHV bits (17 %).
//! The paper reports ~44 % of the SALUs and ~22 % of the SRAM for the
//! authors' P4 program (whose compiled form uses stages 0–18). The gap is
//! in the accounting, not the mechanism: weft counts one SALU per register
//! array and packs the fields of one connection into 48/64-bit registers
//! (source ToR: owner + last-seen, state, TAIL_TX; destination ToR: state,
//! OLD-path reference), whereas the authors keep most fields in their own
//! arrays (one SALU each) for both ToR roles and for the recirculating
//! timer's logic, size the tables for more ports and connections, and carry
//! their own L2/L3 virtualisation tables. Every access here still obeys the
//! one-access-per-pass and stage-order rules (checked on every packet), so
//! the logic fits a 20-stage pipeline as modelled.

mod destination;
pub mod frames;
mod reorder;
mod source;
mod state;

use super::ecmp::{flow_hash, select_resilient};
use super::{param_in, param_us, ParamInfo, Params, SchemeError, SchemeInfo, TimeScale};
use frames::{Connection, TimerInfo};
use state::*;
use std::collections::BTreeMap;
use weft_tofino::program::{Declarations, EmitTarget, PacketSource, QueueDepths, ScrapeView, SwitchView, Verdict};
use weft_tofino::SwitchRole;
use weft_tofino::{EgressCx, Gress, IngressCx, Program, ProgramError, RegisterId, TmConfig};
use weft_wire::conweave::{self as cwire, ts16, ts16_diff_ns, CwBits, CwOpcode};
use weft_wire::frame::FrameKind;
use weft_wire::ids::{PortId, QueueId};
use weft_wire::ipv4;
use weft_wire::time::{BitRate, Nanos};

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: "conweave",
        source: "ConWeave (SIGCOMM'23) §3, Appendix A",
        summary: "RTT-triggered rerouting at the source ToR, in-network reordering with paused queues at the destination ToR",
        reference_rate: Some(BitRate::gbps(100)),
        params: vec![
            ParamInfo { name: "theta_reply_us", default: "8", unit: "µs", doc: "RTT_REPLY cut-off that triggers a reroute" },
            ParamInfo {
                name: "theta_path_busy_us",
                default: "8 (3-tier: 16)",
                unit: "µs",
                doc: "a NOTIFYed path is not chosen for this long",
            },
            ParamInfo {
                name: "theta_inactive_us",
                default: "300 (3-tier: 1000)",
                unit: "µs",
                doc: "inactivity that starts a new epoch without CLEAR",
            },
            ParamInfo {
                name: "theta_resume_extra_us",
                default: "16 (with PFC: 64)",
                unit: "µs",
                doc: "added to the T_resume estimate (Appendix A)",
            },
            ParamInfo {
                name: "theta_resume_default_us",
                default: "200 (3-tier: 600)",
                unit: "µs",
                doc: "T_resume when no OLD packet of the epoch was seen",
            },
            ParamInfo { name: "conn_entries", default: "4096", unit: "entries", doc: "per-connection table size at each ToR role" },
            ParamInfo { name: "sample_us", default: "10", unit: "µs", doc: "period of the reorder-queue usage samples (metrics)" },
        ],
    }
}

/// Queues 1..=30 hold reordered packets (0 = data, 31 = control).
const REORDER_BANKS: usize = 4;
/// Slots per bank and port (bank k: queues 1 + k + 4 s).
const SLOTS_PER_BANK: u32 = 8;
/// Ports a reorder table covers.
const MAX_PORTS: u32 = 64;
/// Leaves the path-status table covers.
const MAX_LEAVES: u32 = 256;
/// Paths per leaf the path-status table covers (4 bits + 4 bits).
const MAX_PATHS: u32 = 256;
/// Seed of the connection hash: fixed, so both ToRs compute the same key.
const CONN_SEED: u32 = 0xc0_4e_a7_e0;

#[derive(Debug, Clone, Copy)]
struct Times {
    reply: Nanos,
    path_busy: Nanos,
    inactive: Nanos,
    resume_extra: Nanos,
    resume_default: Nanos,
}

#[derive(Debug, Clone, Copy)]
struct Regs {
    src_last_seen: RegisterId,
    path_busy: [RegisterId; 4],
    src_conn: RegisterId,
    src_tail_ts: RegisterId,
    dst_conn: RegisterId,
    dst_old_ref: RegisterId,
    reorder: [RegisterId; 4],
}

impl Default for Regs {
    /// Before `declare`: handles no register has (accesses fail loudly).
    fn default() -> Self {
        let none = RegisterId(u16::MAX);
        Regs {
            src_last_seen: none,
            path_busy: [none; 4],
            src_conn: none,
            src_tail_ts: none,
            dst_conn: none,
            dst_old_ref: none,
            reorder: [none; 4],
        }
    }
}

/// Scheme counters (docs/SCHEMES.md metrics).
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    reroutes: u64,
    reroute_aborted: u64,
    epochs: u64,
    epochs_inactive: u64,
    inactive_path_changes: u64,
    rtt_requests: u64,
    rtt_replies_sent: u64,
    rtt_replies_in_time: u64,
    rtt_reply_timeouts: u64,
    notify_sent: u64,
    notify_received: u64,
    clear_sent: u64,
    clear_received: u64,
    tail_packets: u64,
    rerouted_packets: u64,
    held_packets: u64,
    reorder_queues_allocated: u64,
    reorder_alloc_failures: u64,
    resume_on_tail: u64,
    resume_expiries: u64,
    resume_after_tail_deadline: u64,
    timer_passes: u64,
    fallback_packets: u64,
    conn_collisions: u64,
}

/// The ConWeave program.
#[derive(Debug, Clone)]
pub struct ConWeave {
    explicit: Params,
    /// Multiplier of its time parameters (docs/SCHEMES.md#parameter-scaling).
    scale: TimeScale,
    times: Times,
    conn_entries: u32,
    sample_ns: Nanos,
    regs: Regs,
    leaf: bool,
    upper_fanout: u16,
    host_facing: Vec<bool>,
    queues_per_port: u8,
    c: Counters,
    /// Reorder queues in use per host port (shadow of the tables, for metrics).
    in_use: BTreeMap<u16, u32>,
    queues_per_port_hist: BTreeMap<u64, u64>,
    buffer_hist: BTreeMap<u64, u64>,
    /// Reorder buffer bytes at the latest sample.
    last_buffer_bytes: u64,
    /// Samples taken: at every multiple of `sample_ns` up to
    /// `sampled_until × sample_ns`.
    sampled_until: u64,
}

fn us(p: &Params, key: &str, default: f64) -> Result<Nanos, SchemeError> {
    param_us("conweave", p, key, default, false)
}

impl ConWeave {
    /// Builds from parameters (2-tier defaults; 3-tier ones at attach).
    pub fn from_params(p: &Params) -> Result<Self, SchemeError> {
        let times = Times {
            reply: us(p, "theta_reply_us", 8.0)?,
            path_busy: us(p, "theta_path_busy_us", 8.0)?,
            inactive: us(p, "theta_inactive_us", 300.0)?,
            resume_extra: us(p, "theta_resume_extra_us", 16.0)?,
            resume_default: us(p, "theta_resume_default_us", 200.0)?,
        };
        let conn_entries = param_in("conweave", p, "conn_entries", "u32 > 0", 4096u32, |e| *e > 0)?;
        Ok(ConWeave {
            explicit: p.clone(),
            scale: TimeScale::ONE,
            times,
            conn_entries,
            sample_ns: us(p, "sample_us", 10.0)?.max(1),
            regs: Regs::default(),
            leaf: false,
            upper_fanout: 1,
            host_facing: Vec::new(),
            queues_per_port: 32,
            c: Counters::default(),
            in_use: BTreeMap::new(),
            queues_per_port_hist: BTreeMap::new(),
            buffer_hist: BTreeMap::new(),
            last_buffer_bytes: 0,
            sampled_until: 0,
        })
    }

    /// Its thresholds and sample period multiplied by `s`, also the
    /// defaults it picks when attached to a lossless or 3-tier fabric
    /// (docs/SCHEMES.md#parameter-scaling).
    pub fn time_scaled(mut self, s: TimeScale) -> Self {
        self.scale = s;
        let t = &mut self.times;
        for v in [&mut t.reply, &mut t.path_busy, &mut t.inactive, &mut t.resume_extra, &mut t.resume_default] {
            *v = s.ns(*v);
        }
        self.sample_ns = s.ns(self.sample_ns).max(1);
        self
    }

    fn faces_host(&self, p: PortId) -> bool {
        self.host_facing.get(p.index()).copied().unwrap_or(false)
    }
}

impl ConWeave {
    fn n_reorder(&self, view_queues: u8) -> u8 {
        view_queues.saturating_sub(2).min((REORDER_BANKS as u32 * SLOTS_PER_BANK) as u8)
    }

    fn conn_key(src: ipv4::Ipv4Address, dst: ipv4::Ipv4Address, sport: u16) -> (u32, u16) {
        let h = flow_hash(CONN_SEED, (src.0, dst.0, 17, sport, weft_wire::udp::ROCEV2_PORT), true);
        (h, ((h >> 16) as u16) | 1)
    }

    fn ecmp(&mut self, cx: &mut IngressCx<'_>) {
        let h = match cx.info.five_tuple() {
            Some(t) if cx.group.len() > 1 => flow_hash(cx.hash_seed, t, true),
            _ => 0,
        };
        cx.forward_to(select_resilient(cx.group, cx.port_up, h).0);
    }
}

impl Program for ConWeave {
    /// The destination's leaf index (per-destination-ToR state).
    fn route_data(&self, route: &weft_tofino::l3::Route) -> Option<u32> {
        crate::leaf_of_route(route)
    }
    fn name(&self) -> &'static str {
        "conweave"
    }

    fn declare(&mut self, d: &mut Declarations) {
        let ig = Gress::Ingress;
        d.hash("conweave_conn_crc32", ig, 1, 32);
        d.hash("conweave_reorder_bank_hash", ig, 3, 32);
        let ce = self.conn_entries;
        let busy_entries = MAX_LEAVES * MAX_PATHS / 4;
        let reorder_entries = MAX_PORTS * SLOTS_PER_BANK;
        self.regs = Regs {
            src_last_seen: d.register("conweave_src_owner", ig, 2, ce, 48),
            path_busy: [
                d.register("conweave_path_busy_0", ig, 3, busy_entries, 32),
                d.register("conweave_path_busy_1", ig, 4, busy_entries, 32),
                d.register("conweave_path_busy_2", ig, 5, busy_entries, 32),
                d.register("conweave_path_busy_3", ig, 6, busy_entries, 32),
            ],
            src_conn: d.register("conweave_src_conn", ig, 7, ce, 64),
            src_tail_ts: d.register("conweave_src_tail_tx", ig, 8, ce, 16),
            dst_conn: d.register("conweave_dst_conn", ig, 2, ce, 64),
            dst_old_ref: d.register("conweave_dst_old_ref", ig, 3, ce, 64),
            reorder: [
                d.register("conweave_reorder_bank_0", ig, 9, reorder_entries, 64),
                d.register("conweave_reorder_bank_1", ig, 10, reorder_entries, 64),
                d.register("conweave_reorder_bank_2", ig, 11, reorder_entries, 64),
                d.register("conweave_reorder_bank_3", ig, 12, reorder_entries, 64),
            ],
        };
        // ConWeave header fields, connection key, samples, decisions.
        d.metadata_bits(15 + 32 + 32 + 16 + 2 * 8 + 2 + 64);
    }

    fn attach(&mut self, view: &SwitchView) {
        self.leaf = view.role == SwitchRole::Leaf || view.leaf_index.is_some();
        self.upper_fanout = view.upper_fanout.max(1);
        self.host_facing = view.host_facing.clone();
        self.queues_per_port = view.queues_per_port;
        if view.pfc && !self.explicit.contains_key("theta_resume_extra_us") {
            // Lossless (PFC) paths vary more: the paper's Appendix A value,
            // on every lossless fabric. The authors' run.py uses it on
            // lossless fat-trees and 16 µs on leaf-spine; set
            // theta_resume_extra_us=16 for that. (With 16 µs, weft's
            // T_resume expiries on their 50 % flow files are 16 vs 8 and
            // 9 vs 6 of ~15 000 reorder episodes: EXPERIMENTS.md, "Side by side with the authors' simulator".)
            self.times.resume_extra = self.scale.ns(64_000);
        }
        if self.upper_fanout > 1 {
            // 3-tier defaults (docs/SCHEMES.md, the authors' fat-tree setup).
            let set = |k: &str| self.explicit.contains_key(k);
            if !set("theta_path_busy_us") {
                self.times.path_busy = self.scale.ns(16_000);
            }
            if !set("theta_inactive_us") {
                self.times.inactive = self.scale.ns(1_000_000);
            }
            if !set("theta_resume_default_us") {
                self.times.resume_default = self.scale.ns(600_000);
            }
        }
    }

    fn configure_traffic_manager(&self, tm: &mut TmConfig) {
        // Reorder queues: strict priority above the data queue 0, below the
        // control queue; ECN of the data queue. Each keeps its PFC class:
        // on the uplinks queue q still carries traffic class q, which a
        // pause for class q from the next hop must stop. (The packets a
        // reorder queue holds are accounted to the priority they arrived
        // with, whatever the queue: the traffic manager's ingress CoS.)
        let n = tm.queues_per_port;
        if n < 3 {
            return;
        }
        let data = tm.queues[0];
        for q in 1..n - 1 {
            let qc = &mut tm.queues[q as usize];
            *qc = weft_tofino::QueueConfig { priority: 1, weight: 1, ecn: data.ecn, pfc_class: qc.pfc_class };
        }
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        self.sample_until(cx.now, cx.depths);
        if let (PacketSource::Recirculated { .. }, FrameKind::Other(_)) = (cx.source, cx.info.kind) {
            if let Some(t) = frames::parse_timer(cx.frame) {
                return self.timer_pass(cx, t);
            }
            cx.drop_packet();
            return Ok(());
        }
        let Some(ip) = cx.info.ip else {
            self.ecmp(cx);
            return Ok(());
        };
        let bits = ip.bth_offset.and_then(|b| CwBits::read(cx.frame, b as usize).map(|x| (b as usize, x)));
        let from_host = matches!(cx.source, PacketSource::Port(p) if self.faces_host(p));
        let to_host = (cx.group.len() == 1).then(|| cx.group[0]).filter(|p| self.faces_host(*p));
        let routed = match (bits, to_host) {
            // Control packets for this ToR's hosts' connections: consumed here.
            (Some((_, b)), Some(_)) if b.opcode.is_control() => self.control_at_source(cx, b),
            // Data with a ConWeave header reaching its destination ToR.
            (Some((bth, b)), Some(port)) if b.opcode.is_data() => {
                cx.bridge(StripAt { l3: cx.info.l3_offset, bth: bth as u16 }.bridged());
                self.ingress_destination(cx, bth, b, port)
            }
            // New RoCE data from a host towards another rack: source ToR.
            (Some((bth, b)), None) if self.leaf && from_host && b.opcode == CwOpcode::None && carries_data(cx.frame, bth) => {
                self.ingress_source(cx, bth)
            }
            // Transit: follow the path id one tier above the ToR.
            (Some((_, b)), None) if b.opcode != CwOpcode::None && cx.group.len() > 1 && !self.leaf => {
                let i = ((b.path >> 4) as usize) % cx.group.len();
                match cx.group.get(i).copied().filter(|p| cx.port_up.get(p.index()).copied().unwrap_or(false)) {
                    Some(p) => cx.forward(p),
                    None => self.ecmp(cx),
                }
                Ok(())
            }
            _ => {
                self.ecmp(cx);
                Ok(())
            }
        };
        // Every other data packet towards a host (traffic inside the rack,
        // connections that fell back to ECMP, non-RoCE data) shares the
        // common default queue Q_0 with the in-order ConWeave packets (paper
        // §3.3, Fig. 9: "Q_0 has the lowest scheduling priority and is
        // common for all flows"). By traffic class it would land in a queue
        // that this program made a strict-priority reorder queue: it would
        // overtake every flow of Q_0 and could itself be held by a pause.
        let towards_host = self.leaf && cx.decision.verdict.forward_port().is_some_and(|p| self.faces_host(p));
        if towards_host && cx.decision.queue.is_none() && ip.dscp >> 3 < weft_tofino::CONTROL_TRAFFIC_CLASS {
            cx.decision.queue = Some(QueueId(0));
        }
        routed
    }

    fn egress(&mut self, cx: &mut EgressCx<'_>) -> Result<(), ProgramError> {
        self.sample_until(cx.now, cx.depths);
        if !self.faces_host(cx.port) {
            return Ok(());
        }
        // Only ConWeave data for a host of this ToR carries the header; its
        // offsets come bridged from ingress (no second parse).
        let Some(at) = StripAt::from_bridged(cx.bridged) else { return Ok(()) };
        let (l3, bth) = (at.l3 as usize, at.bth as usize);
        let Some(bits) = CwBits::read(cx.frame, bth) else { return Ok(()) };
        if !bits.opcode.is_data() {
            return Ok(());
        }
        if bits.tail {
            if let Some((_, bridged)) = cwire::read_ts(cx.frame, bth) {
                if bridged & 0x8000 != 0 {
                    let q = QueueId((bridged & 0xff) as u8);
                    cx.flow_control.push(weft_tofino::program::QueueFlowControl { port: cx.port, queue: q, pause: false });
                }
            }
        }
        let _ = cwire::strip(cx.frame, l3, bth);
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.c;
        vec![
            ("conweave_reroutes", c.reroutes),
            ("conweave_reroute_aborted_all_busy", c.reroute_aborted),
            ("conweave_epochs", c.epochs),
            ("conweave_epochs_by_inactivity", c.epochs_inactive),
            ("conweave_path_changes_after_inactivity", c.inactive_path_changes),
            ("conweave_rtt_requests", c.rtt_requests),
            ("conweave_rtt_replies_sent", c.rtt_replies_sent),
            ("conweave_rtt_replies_in_time", c.rtt_replies_in_time),
            ("conweave_rtt_reply_timeouts", c.rtt_reply_timeouts),
            ("conweave_notify_sent", c.notify_sent),
            ("conweave_notify_received", c.notify_received),
            ("conweave_clear_sent", c.clear_sent),
            ("conweave_clear_received", c.clear_received),
            ("conweave_tail_packets", c.tail_packets),
            ("conweave_rerouted_packets", c.rerouted_packets),
            ("conweave_held_packets", c.held_packets),
            ("conweave_reorder_queues_allocated", c.reorder_queues_allocated),
            ("conweave_reorder_alloc_failures", c.reorder_alloc_failures),
            ("conweave_resume_on_tail", c.resume_on_tail),
            ("conweave_resume_expiries", c.resume_expiries),
            ("conweave_resume_after_tail_deadline", c.resume_after_tail_deadline),
            ("conweave_timer_passes", c.timer_passes),
            ("conweave_fallback_packets", c.fallback_packets),
            ("conweave_conn_collisions", c.conn_collisions),
        ]
    }

    fn distributions(&self) -> Vec<(&'static str, BTreeMap<u64, u64>)> {
        vec![
            ("conweave_reorder_queues_per_port", self.queues_per_port_hist.clone()),
            ("conweave_reorder_buffer_bytes_per_switch", self.buffer_hist.clone()),
        ]
    }

    fn port_gauges(&self, _view: &ScrapeView<'_>) -> Vec<(&'static str, PortId, f64)> {
        self.host_facing
            .iter()
            .enumerate()
            .filter(|(_, f)| **f)
            .map(|(p, _)| ("conweave_reorder_queues_in_use", PortId(p as u16), self.in_use.get(&(p as u16)).copied().unwrap_or(0) as f64))
            .collect()
    }

    fn gauges(&self, _view: &ScrapeView<'_>) -> Vec<(&'static str, f64)> {
        vec![("conweave_reorder_buffer_bytes", self.last_buffer_bytes as f64)]
    }
}

/// The registry entry of `conweave` (see [`crate::REGISTRY`]).
pub const SCHEME: crate::Scheme = crate::Scheme {
    info,
    build: |p, s| Ok(Box::new(ConWeave::from_params(p)?.time_scaled(s))),
    metrics: crate::SchemeMetrics {
        counters: &[
            ("conweave_reroutes", "Connections the source ToR moved to a new path (RTT_REPLY timeout → TAIL + REROUTED)."),
            ("conweave_reroute_aborted_all_busy", "Reroutes abandoned because both sampled paths were busy (NOTIFY)."),
            ("conweave_epochs", "Epochs started at the source ToR."),
            ("conweave_epochs_by_inactivity", "Epochs started by θ_inactive instead of CLEAR."),
            ("conweave_path_changes_after_inactivity", "Connections that moved to a non-busy path after inactivity."),
            ("conweave_rtt_requests", "RTT_REQUEST marks sent (one per epoch)."),
            ("conweave_rtt_replies_sent", "RTT_REPLY control packets the destination ToR sent."),
            ("conweave_rtt_replies_in_time", "RTT_REPLYs that arrived within θ_reply."),
            ("conweave_rtt_reply_timeouts", "θ_reply expiries (a reroute is attempted)."),
            ("conweave_notify_sent", "NOTIFY packets sent for CE-marked data (path congested)."),
            ("conweave_notify_received", "NOTIFY packets received (path busy for θ_path_busy)."),
            ("conweave_clear_sent", "CLEAR packets the destination ToR sent (epoch done)."),
            ("conweave_clear_received", "CLEAR packets the source ToR received."),
            ("conweave_tail_packets", "Packets marked TAIL (last on the old path)."),
            ("conweave_rerouted_packets", "Packets marked REROUTED (on the new path)."),
            ("conweave_held_packets", "REROUTED packets held in a paused reorder queue until the TAIL."),
            ("conweave_reorder_queues_allocated", "Reorder queues allocated at the destination ToR."),
            ("conweave_reorder_alloc_failures", "REROUTED packets that found no free reorder queue (sent through queue 0)."),
            ("conweave_resume_on_tail", "Reorder queues resumed by their TAIL."),
            ("conweave_resume_expiries", "Reorder queues flushed at T_resume (TAIL late or lost)."),
            (
                "conweave_resume_after_tail_deadline",
                "Timer resumes of a reorder queue still holding packets θ_resume_default + θ_resume_extra after its TAIL arrived (the TAIL was dropped inside the switch, or the queue drains slowly).",
            ),
            ("conweave_timer_passes", "Recirculations of the T_resume timer packet."),
            ("conweave_fallback_packets", "Packets forwarded by ECMP (non-RoCE, ACK/NAK/CNP, intra-rack, collisions)."),
            ("conweave_conn_collisions", "Connections whose table entry another active connection held (ECMP fallback)."),
        ],
        gauges: &[("conweave_reorder_buffer_bytes", "bytes", "Bytes held in ConWeave reorder queues of the switch (sampled every 10 µs).")],
        port_gauges: &[("conweave_reorder_queues_in_use", "queues", "Reorder queues allocated on a host-facing port now (of 31).")],
        distributions: &[
            (
                "conweave_reorder_queues_per_port",
                "queues",
                "Reorder queues in use per host-facing port, sampled every 10 µs of fabric time.",
                &[0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 31.0],
            ),
            (
                "conweave_reorder_buffer_bytes_per_switch",
                "bytes",
                "Bytes in reorder queues per switch, sampled every 10 µs of fabric time.",
                &[0.0, 1e3, 1e4, 5e4, 1e5, 2.5e5, 5e5, 1e6, 2.5e6, 5e6, 1e7],
            ),
        ],
    },
};
