//! ConWeave (Song et al., SIGCOMM 2023): congestion-evasive rerouting at the
//! source ToR and in-network reordering at the destination ToR, for RDMA.
//!
//! Source ToR (paper §3.2, [`SrcTor`](self) logic in `ingress_source`):
//! - per connection (a 32-bit CRC of src IP, dst IP and UDP source port, the
//!   QP, indexed in `conn_entries` entries with a 16-bit signature) an epoch;
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
//! Destination ToR (§3.3, Appendix A, `ingress_destination`):
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
//! - T_resume (Appendix A): on the first out-of-order packet, the arrival
//!   time of the latest OLD packet of the epoch plus (TAIL_TX − its TX), or
//!   now + θ_resume_default without one (a REROUTED packet that opens its
//!   epoch here); each later OLD packet re-estimates it; θ_resume_extra is
//!   added in every case (conweave-routing.cc, `RouteInput`,
//!   `timeExpectedToFlush`). A timer packet per held queue circles the
//!   recirculation port (~1 µs per pass) and resumes the queue (and sends
//!   CLEAR) when T_resume passes with no TAIL; it frees the queue's table
//!   entry once the queue is empty;
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
//! Parameters and defaults (paper Table 3 and §4.1; DESIGN §6.1): θ_reply
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

pub mod frames;

use super::ecmp::{flow_hash, select_resilient};
use super::{param_in, param_us, ParamInfo, Params, SchemeError, SchemeInfo};
use frames::{Connection, TimerInfo};
use std::collections::BTreeMap;
use weft_tofino::program::{Declarations, EmitTarget, PacketSource, QueueDepths, ScrapeView, SwitchView, Verdict};
use weft_tofino::SwitchRole;
use weft_tofino::{EgressCx, Gress, IngressCx, Program, ProgramError, RegisterId, TmConfig};
use weft_wire::conweave::{self as cwire, ts16, ts16_diff_ns, CwBits, CwOpcode};
use weft_wire::frame::{FrameInfo, FrameKind};
use weft_wire::ids::{PortId, QueueId};
use weft_wire::ipv4;
use weft_wire::time::Nanos;

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: "conweave",
        source: "ConWeave (SIGCOMM'23) §3, Appendix A",
        summary: "RTT-triggered rerouting at the source ToR, in-network reordering with paused queues at the destination ToR",
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

/// Scheme counters (DESIGN §6.1 metrics).
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
    timer_passes: u64,
    fallback_packets: u64,
    conn_collisions: u64,
}

/// The ConWeave program.
#[derive(Debug, Clone)]
pub struct ConWeave {
    explicit: Params,
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

    fn faces_host(&self, p: PortId) -> bool {
        self.host_facing.get(p.index()).copied().unwrap_or(false)
    }
}

/// Source-ToR connection state, packed in one 64-bit register:
/// sig 16 | epoch 2 | rerouted 1 | request pending 1 | path 8 | request time 32 (ns, low bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SrcConn {
    sig: u16,
    epoch: u8,
    rerouted: bool,
    req_pending: bool,
    path: u8,
    req_ts: u32,
}

impl SrcConn {
    fn unpack(v: u64) -> Self {
        SrcConn {
            sig: (v >> 48) as u16,
            epoch: ((v >> 46) & 3) as u8,
            rerouted: (v >> 45) & 1 == 1,
            req_pending: (v >> 44) & 1 == 1,
            path: (v >> 32) as u8,
            req_ts: v as u32,
        }
    }
    fn pack(self) -> u64 {
        ((self.sig as u64) << 48)
            | (((self.epoch & 3) as u64) << 46)
            | ((self.rerouted as u64) << 45)
            | ((self.req_pending as u64) << 44)
            | ((self.path as u64) << 32)
            | self.req_ts as u64
    }
}

/// Destination-ToR connection state: sig 16 | epoch 2 | tail seen 1 |
/// rerouted seen 1 | TX of the epoch's first packet here 16 | TAIL_TX 16.
/// The epoch's TX time tells a packet of an older epoch (older TX, e.g.
/// held by PFC on a congested path) from a new epoch when the 2-bit epoch
/// wrapped: the paper's footnote 6 remedy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DstConn {
    sig: u16,
    epoch: u8,
    tail_seen: bool,
    rr_seen: bool,
    epoch_tx: u16,
    tail_tx: u16,
}

impl DstConn {
    fn unpack(v: u64) -> Self {
        DstConn {
            sig: (v >> 48) as u16,
            epoch: ((v >> 46) & 3) as u8,
            tail_seen: (v >> 45) & 1 == 1,
            rr_seen: (v >> 44) & 1 == 1,
            epoch_tx: (v >> 16) as u16,
            tail_tx: v as u16,
        }
    }
    fn pack(self) -> u64 {
        ((self.sig as u64) << 48)
            | (((self.epoch & 3) as u64) << 46)
            | ((self.tail_seen as u64) << 45)
            | ((self.rr_seen as u64) << 44)
            | ((self.epoch_tx as u64) << 16)
            | self.tail_tx as u64
    }
}

/// A reorder-queue table entry: sig 16 | state 2 | epoch 2 | T_resume 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReorderSlot {
    sig: u16,
    state: SlotState,
    epoch: u8,
    resume_at: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Paused,
    Resumed,
}

impl ReorderSlot {
    fn unpack(v: u64) -> Self {
        ReorderSlot {
            sig: (v >> 48) as u16,
            state: match (v >> 46) & 3 {
                1 => SlotState::Paused,
                2 => SlotState::Resumed,
                _ => SlotState::Free,
            },
            epoch: ((v >> 44) & 3) as u8,
            resume_at: v as u32,
        }
    }
    fn pack(self) -> u64 {
        let st = match self.state {
            SlotState::Free => 0u64,
            SlotState::Paused => 1,
            SlotState::Resumed => 2,
        };
        ((self.sig as u64) << 48) | (st << 46) | (((self.epoch & 3) as u64) << 44) | self.resume_at as u64
    }
}

/// Queue of bank `k`, slot `s`.
fn bank_queue(k: usize, s: u32) -> u8 {
    (1 + k as u32 + 4 * s) as u8
}
/// Slots of bank `k` that exist with `n` reorder queues (1..=n).
fn bank_size(k: usize, n: u8) -> u32 {
    (0..SLOTS_PER_BANK).filter(|s| bank_queue(k, *s) <= n).count() as u32
}
/// Bank and slot of reorder queue `q`.
fn queue_slot(q: u8) -> (usize, u32) {
    (((q - 1) % 4) as usize, ((q - 1) / 4) as u32)
}

/// Whether the BTH at `bth` is an RC SEND or RDMA WRITE packet (ConWeave
/// reroutes data; ACK/NAK and CNP go by ECMP in the control queue).
fn carries_data(frame: &[u8], bth: usize) -> bool {
    use weft_wire::roce::{BthPacket, Opcode};
    frame.get(bth..).and_then(|b| BthPacket::new_checked(b).ok()).is_some_and(|b| {
        matches!(
            b.opcode(),
            Opcode::SendFirst
                | Opcode::SendMiddle
                | Opcode::SendLast
                | Opcode::SendOnly
                | Opcode::WriteFirst
                | Opcode::WriteMiddle
                | Opcode::WriteLast
                | Opcode::WriteOnly
        )
    })
}

/// `a` is at or after `b` on the 32-bit ns clock.
fn reached(now32: u32, at: u32) -> bool {
    (now32.wrapping_sub(at) as i32) >= 0
}

/// What the source ToR decided for one data packet.
#[derive(Debug, Clone, Copy)]
enum SrcDecision {
    Fallback,
    Send(CwBits),
}

/// What the destination ToR's connection stage classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DstClass {
    /// A packet of the OLD path (or of a path without reroute); `update`:
    /// a held queue waits, re-estimate T_resume.
    Old { update: bool },
    /// The TAIL.
    Tail,
    /// The first REROUTED packet before the TAIL.
    FirstOoo,
    /// A later REROUTED packet before the TAIL.
    Ooo,
    /// A REROUTED packet after the TAIL.
    InOrder,
    /// Another connection's entry, or a straggler: no reordering.
    Ignore,
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

    /// Number of paths from this ToR and the port/path-id of path index `i`.
    fn paths(&self, uplinks: usize) -> u32 {
        (uplinks.min(16) as u32 * self.upper_fanout.clamp(1, 16) as u32).clamp(1, MAX_PATHS)
    }
    fn path_id(&self, i: u32) -> u8 {
        let u = self.upper_fanout.clamp(1, 16) as u32;
        ((i / u) | ((i % u) << 4)) as u8
    }
    fn path_index(&self, id: u8) -> u32 {
        let u = self.upper_fanout.clamp(1, 16) as u32;
        (id & 0xf) as u32 * u + ((id >> 4) as u32 % u)
    }
    fn busy_slot(leaf: u16, i: u32) -> (usize, u32) {
        ((i % 4) as usize, (leaf as u32 % MAX_LEAVES) * (MAX_PATHS / 4) + i / 4)
    }

    fn ingress_source(&mut self, cx: &mut IngressCx<'_>, bth: usize) -> Result<(), ProgramError> {
        let Some(ip) = cx.info.ip else { return Ok(()) };
        let Some(dst_leaf) = cx.route_data.map(|d| d as u16) else {
            self.c.fallback_packets += 1;
            self.ecmp(cx);
            return Ok(());
        };
        let (h, sig) = Self::conn_key(ip.src, ip.dst, ip.src_port);
        let idx = h % self.conn_entries;
        let now = cx.now;
        let now32 = now as u32;
        let times = self.times;
        // Stage 2: the entry's owner and its last packet time (sig 16 | ns 32):
        // another connection takes the entry over only after the owner was
        // inactive for θ_inactive.
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Owner {
            Mine { inactive: bool },
            TakeOver,
            Collision,
        }
        let owner = cx.register(self.regs.src_last_seen, idx, |old| {
            let (osig, last) = ((old >> 32) as u16, old as u32);
            let idle = now32.wrapping_sub(last) as u64 >= times.inactive;
            let new = ((sig as u64) << 32) | now32 as u64;
            if osig == sig {
                (new, Owner::Mine { inactive: idle })
            } else if osig == 0 || idle {
                (new, Owner::TakeOver)
            } else {
                (old, Owner::Collision)
            }
        })?;
        // Stages 3-6: two sampled paths from different banks of the path-status table.
        let n_paths = self.paths(cx.group.len());
        let s1 = rand::Rng::random_range(cx.rng, 0..n_paths);
        let s2 = if n_paths >= 2 {
            let mut s = rand::Rng::random_range(cx.rng, 0..n_paths - 1);
            if s >= s1 {
                s += 1;
            }
            // Another bank than s1's (one access per array and pass).
            if s % 4 == s1 % 4 {
                let other_bank = |p: &u32| p % 4 != s1 % 4;
                match (0..n_paths).filter(other_bank).count() {
                    0 => u32::MAX,
                    n => (0..n_paths).filter(other_bank).nth(rand::Rng::random_range(cx.rng, 0..n)).unwrap_or(u32::MAX),
                }
            } else {
                s
            }
        } else {
            u32::MAX
        };
        let mut avail = [false; 2];
        for k in 0..4 {
            for (j, s) in [s1, s2].into_iter().enumerate() {
                if s != u32::MAX && (s % 4) as usize == k {
                    let (_, e) = Self::busy_slot(dst_leaf, s);
                    let busy_for = times.path_busy;
                    avail[j] = cx.register(self.regs.path_busy[k], e, |until| {
                        // Busy while now is in [until − θ_path_busy, until).
                        let rem = (until as u32).wrapping_sub(now32) as u64;
                        (until, until == 0 || rem == 0 || rem > busy_for)
                    })?;
                }
            }
        }
        // Stage 7: the connection's state machine.
        let initial = h % n_paths;
        let pid = |i: u32| self.path_id(i);
        let candidates = [(s1, avail[0]), (s2, avail[1])];
        let mut c = self.c;
        let decision = cx.register(self.regs.src_conn, idx, |old| {
            let mut st = SrcConn::unpack(old);
            let inactive = match owner {
                Owner::Collision => {
                    c.conn_collisions += 1;
                    return (old, SrcDecision::Fallback);
                }
                Owner::TakeOver => true,
                Owner::Mine { inactive } => inactive,
            };
            if st.sig != sig || owner == Owner::TakeOver {
                st = SrcConn { sig, epoch: 0, rerouted: false, req_pending: false, path: pid(initial), req_ts: 0 };
                c.epochs += 1;
            } else if inactive {
                st.epoch = (st.epoch + 1) & 3;
                st.rerouted = false;
                st.req_pending = false;
                c.epochs += 1;
                c.epochs_inactive += 1;
                // Nothing in flight: move to a sampled path that is not busy
                // at no reordering risk (as the authors' simulator does).
                if let Some(p) = candidates.iter().find(|(s, ok)| *s != u32::MAX && *ok).map(|(s, _)| pid(*s)) {
                    c.inactive_path_changes += (p != st.path) as u64;
                    st.path = p;
                }
            }
            let mut bits = CwBits { path: st.path, opcode: CwOpcode::Data, epoch: st.epoch, rerouted: false, tail: false };
            if st.rerouted {
                bits.rerouted = true;
                c.rerouted_packets += 1;
            } else if !st.req_pending {
                bits.opcode = CwOpcode::RttRequest;
                st.req_pending = true;
                st.req_ts = now32;
                c.rtt_requests += 1;
            } else if now32.wrapping_sub(st.req_ts) as u64 >= times.reply {
                c.rtt_reply_timeouts += 1;
                let pick = candidates.iter().find(|(s, ok)| *s != u32::MAX && *ok && pid(*s) != st.path).map(|(s, _)| pid(*s));
                match pick {
                    Some(new) => {
                        // This packet is the TAIL on the OLD path.
                        bits.tail = true;
                        st.rerouted = true;
                        st.path = new;
                        c.reroutes += 1;
                        c.tail_packets += 1;
                    }
                    None => {
                        // All samples busy: no reroute; monitor again.
                        c.reroute_aborted += 1;
                        bits.opcode = CwOpcode::RttRequest;
                        st.req_ts = now32;
                        c.rtt_requests += 1;
                    }
                }
            }
            (st.pack(), SrcDecision::Send(bits))
        })?;
        self.c = c;
        let SrcDecision::Send(bits) = decision else {
            self.c.fallback_packets += 1;
            self.ecmp(cx);
            return Ok(());
        };
        // Stage 8: TAIL_TX_TSTAMP (written by the TAIL, read by REROUTED).
        let tx = ts16(now);
        let tail_tx = cx.register(self.regs.src_tail_ts, idx, |old| if bits.tail { (tx as u64, tx) } else { (old, old as u16) })?;
        let tor = (bits.path & 0xf) as usize;
        let port = cx.group.get(tor % cx.group.len().max(1)).copied().filter(|p| cx.port_up.get(p.index()).copied().unwrap_or(false));
        let Some(port) = port else {
            // The path's uplink is down: ECMP over the live ones, unmarked.
            self.c.fallback_packets += 1;
            self.ecmp(cx);
            return Ok(());
        };
        let l3 = cx.info.l3_offset as usize;
        if cwire::insert_ts(cx.frame, l3, bth, tx, if bits.rerouted { tail_tx } else { 0 }).is_err() || bits.write(cx.frame, bth).is_err() {
            self.ecmp(cx);
            return Ok(());
        }
        cx.forward(port);
        Ok(())
    }

    fn control_at_source(&mut self, cx: &mut IngressCx<'_>, bits: CwBits) -> Result<(), ProgramError> {
        let Some(ip) = cx.info.ip else { return Ok(()) };
        // The control packet travels dst → src of the data direction.
        let (h, sig) = Self::conn_key(ip.dst, ip.src, ip.src_port);
        let idx = h % self.conn_entries;
        let now32 = cx.now as u32;
        let reply = self.times.reply;
        cx.consume();
        match bits.opcode {
            CwOpcode::Notify => {
                self.c.notify_received += 1;
                if let Some(leaf) = cx.route_data_of(ip.src).map(|d| d as u16) {
                    let (k, e) = Self::busy_slot(leaf, self.path_index(bits.path));
                    let until = now32.wrapping_add(self.times.path_busy as u32).max(1);
                    cx.register(self.regs.path_busy[k], e, |_| (until as u64, ()))?;
                }
            }
            CwOpcode::RttReply | CwOpcode::Clear => {
                let mut c = self.c;
                if bits.opcode == CwOpcode::Clear {
                    c.clear_received += 1;
                }
                cx.register(self.regs.src_conn, idx, |old| {
                    let mut st = SrcConn::unpack(old);
                    if st.sig != sig || st.epoch != bits.epoch {
                        return (old, ());
                    }
                    if bits.opcode == CwOpcode::Clear {
                        if st.rerouted {
                            st.rerouted = false;
                            st.req_pending = false;
                            st.epoch = (st.epoch + 1) & 3;
                            c.epochs += 1;
                        }
                    } else if !st.rerouted && st.req_pending && (now32.wrapping_sub(st.req_ts) as u64) < reply {
                        c.rtt_replies_in_time += 1;
                        st.req_pending = false;
                        st.epoch = (st.epoch + 1) & 3;
                        c.epochs += 1;
                    }
                    (st.pack(), ())
                })?;
                self.c = c;
            }
            _ => {}
        }
        Ok(())
    }

    /// Sends a control packet about `conn` towards its source.
    fn send_control(&mut self, cx: &mut IngressCx<'_>, conn: Connection, bits: CwBits) {
        let f = frames::control(conn, bits, ts16(cx.now));
        let Some(group) = cx.route(conn.src) else { return };
        let h = flow_hash(cx.hash_seed, (conn.dst.0, conn.src.0, 17, conn.sport, 4791), true);
        let (port, _) = select_resilient(group, cx.port_up, h);
        if let Some(p) = port {
            let cq = QueueId(self.queues_per_port.saturating_sub(1));
            cx.emit(EmitTarget::Port(p, cq), f);
            match bits.opcode {
                CwOpcode::RttReply => self.c.rtt_replies_sent += 1,
                CwOpcode::Clear => self.c.clear_sent += 1,
                CwOpcode::Notify => self.c.notify_sent += 1,
                _ => {}
            }
        }
    }

    fn ingress_destination(&mut self, cx: &mut IngressCx<'_>, bth: usize, bits: CwBits, out_port: PortId) -> Result<(), ProgramError> {
        let Some(ip) = cx.info.ip else { return Ok(()) };
        cx.forward(out_port);
        let Some((tx, tail_tx_pkt)) = cwire::read_ts(cx.frame, bth) else { return Ok(()) };
        let conn = Connection {
            src: ip.src,
            dst: ip.dst,
            sport: ip.src_port,
            dest_qp: weft_wire::roce::BthPacket::new_checked(&cx.frame[bth..]).map(|b| b.dest_qp()).unwrap_or(0),
        };
        let (h, sig) = Self::conn_key(ip.src, ip.dst, ip.src_port);
        let idx = h % self.conn_entries;
        let now = cx.now;
        let now32 = now as u32;
        // Stage 2: the connection's reorder state.
        let (class, tail_tx, epoch_start) = cx.register(self.regs.dst_conn, idx, |old| {
            let mut st = DstConn::unpack(old);
            let fresh = DstConn { sig, epoch: bits.epoch, tail_seen: false, rr_seen: false, epoch_tx: tx, tail_tx: 0 };
            let mut epoch_start = false;
            if st.sig != sig {
                st = fresh;
                epoch_start = true;
            } else if st.epoch != bits.epoch {
                if ts16_diff_ns(tx, st.epoch_tx) < 0 {
                    // Sent before the current epoch's first packet: a
                    // straggler of an older epoch, passed to the host.
                    return (old, (DstClass::Ignore, 0, false));
                }
                st = fresh;
                epoch_start = true;
            }
            let class = if bits.tail {
                st.tail_seen = true;
                DstClass::Tail
            } else if bits.rerouted {
                if st.tail_seen {
                    DstClass::InOrder
                } else if !st.rr_seen {
                    st.rr_seen = true;
                    st.tail_tx = tail_tx_pkt;
                    DstClass::FirstOoo
                } else {
                    DstClass::Ooo
                }
            } else {
                DstClass::Old { update: st.rr_seen && !st.tail_seen }
            };
            (st.pack(), (class, st.tail_tx, epoch_start))
        })?;
        // Stage 3: the latest OLD packet's (TX, arrival), for T_resume. Only
        // one of the current epoch counts: a REROUTED packet that opens its
        // epoch here has none, and waits θ_resume_default (the authors'
        // phase-0 cache, conweave-routing.cc `RouteInput`: reset when a new
        // epoch begins with a phase-1 packet, `_phase0Cache = pkt_phase == 0`).
        let epoch = bits.epoch;
        let reference = cx.register(self.regs.dst_old_ref, idx, |old| match class {
            DstClass::Old { .. } | DstClass::Tail => ((1 << 49) | ((tx as u64) << 32) | now32 as u64, None),
            DstClass::FirstOoo if epoch_start => (old, None),
            DstClass::FirstOoo => ((old), ((old >> 49) & 1 == 1).then_some(((old >> 32) as u16, old as u32))),
            _ => (old, None),
        })?;
        let extra = self.times.resume_extra as i64;
        let estimate = |rx: u32, tx_ref: u16| -> u32 {
            let d = ts16_diff_ns(tail_tx, tx_ref) + extra;
            (rx as i64 + d.max(0)) as u32
        };
        // Stages 4-7: the 4-way reorder-queue table of the egress port.
        let n = self.n_reorder(self.queues_per_port);
        let mut held: Option<u8> = None;
        let mut claimed = false;
        let mut resumed: Option<u8> = None;
        if matches!(class, DstClass::Tail | DstClass::FirstOoo | DstClass::Ooo | DstClass::Old { update: true }) && n > 0 {
            let resume_at = match (class, reference) {
                (DstClass::FirstOoo, Some((tx_ref, rx))) => estimate(rx, tx_ref),
                (DstClass::FirstOoo, None) => now32.wrapping_add((self.times.resume_default + self.times.resume_extra) as u32),
                _ => estimate(now32, tx),
            };
            for k in 0..REORDER_BANKS {
                let size = bank_size(k, n);
                if size == 0 {
                    continue;
                }
                let hk = h.rotate_left(8 * k as u32) ^ (k as u32).wrapping_mul(0x9e37_79b9);
                let s = hk % size;
                let e = out_port.0 as u32 % MAX_PORTS * SLOTS_PER_BANK + s;
                let q = bank_queue(k, s);
                let done = held.is_some() || resumed.is_some() || claimed;
                let r = cx.register(self.regs.reorder[k], e, |old| {
                    let mut slot = ReorderSlot::unpack(old);
                    if done {
                        return (old, None);
                    }
                    let mine = slot.sig == sig && slot.epoch == epoch && slot.state == SlotState::Paused;
                    match class {
                        DstClass::FirstOoo if slot.state == SlotState::Free => {
                            slot = ReorderSlot { sig, state: SlotState::Paused, epoch, resume_at };
                            (slot.pack(), Some((q, true)))
                        }
                        DstClass::Ooo if mine => (old, Some((q, false))),
                        DstClass::Tail if mine => {
                            slot.state = SlotState::Resumed;
                            (slot.pack(), Some((q, false)))
                        }
                        DstClass::Old { .. } if mine => {
                            slot.resume_at = resume_at;
                            (slot.pack(), None)
                        }
                        _ => (old, None),
                    }
                })?;
                if let Some((q, claim)) = r {
                    match class {
                        DstClass::Tail => resumed = Some(q),
                        _ => {
                            held = Some(q);
                            claimed = claim;
                        }
                    }
                }
            }
        }
        match class {
            DstClass::FirstOoo | DstClass::Ooo => {
                if let Some(q) = held {
                    if claimed {
                        cx.pause_queue(out_port, QueueId(q));
                        self.c.reorder_queues_allocated += 1;
                        *self.in_use.entry(out_port.0).or_default() += 1;
                        let t = TimerInfo { port: out_port.0, queue: q, sig, epoch, path: bits.path, conn };
                        cx.emit(EmitTarget::Recirculate, frames::timer(t));
                    }
                    self.c.held_packets += 1;
                    cx.decision.queue = Some(QueueId(q));
                } else {
                    if class == DstClass::FirstOoo {
                        self.c.reorder_alloc_failures += 1;
                    }
                    cx.decision.queue = Some(QueueId(0));
                }
            }
            DstClass::Tail => {
                // The queue id rides to egress in the TAIL's timestamp header.
                let bridged = resumed.map_or(0, |q| 0x8000 | q as u16);
                let _ = cwire::write_ts(cx.frame, bth, tx, bridged);
                if resumed.is_some() {
                    self.c.resume_on_tail += 1;
                }
                let clear = CwBits { path: bits.path, opcode: CwOpcode::Clear, epoch, rerouted: false, tail: false };
                self.send_control(cx, conn, clear);
                cx.decision.queue = Some(QueueId(0));
            }
            _ => cx.decision.queue = Some(QueueId(0)),
        }
        if bits.opcode == CwOpcode::RttRequest {
            let reply = CwBits { path: bits.path, opcode: CwOpcode::RttReply, epoch, rerouted: false, tail: false };
            self.send_control(cx, conn, reply);
        }
        if ip.ecn == ipv4::Ecn::Ce {
            let notify = CwBits { path: bits.path, opcode: CwOpcode::Notify, epoch, rerouted: false, tail: false };
            self.send_control(cx, conn, notify);
        }
        Ok(())
    }

    fn timer_pass(&mut self, cx: &mut IngressCx<'_>, t: TimerInfo) -> Result<(), ProgramError> {
        self.c.timer_passes += 1;
        cx.consume();
        let n = self.n_reorder(self.queues_per_port);
        if t.queue == 0 || t.queue > n {
            return Ok(());
        }
        let (k, s) = queue_slot(t.queue);
        let e = t.port as u32 % MAX_PORTS * SLOTS_PER_BANK + s;
        let now32 = cx.now as u32;
        let port = PortId(t.port);
        let q = QueueId(t.queue);
        let empty = cx.depths.queue_bytes(port, q) == 0;
        #[derive(PartialEq)]
        enum Act {
            Stale,
            Wait,
            Expire,
            Free,
        }
        let act = cx.register(self.regs.reorder[k], e, |old| {
            let mut slot = ReorderSlot::unpack(old);
            if slot.sig != t.sig || slot.epoch != t.epoch || slot.state == SlotState::Free {
                return (old, Act::Stale);
            }
            match slot.state {
                SlotState::Paused if reached(now32, slot.resume_at) => {
                    slot.state = SlotState::Resumed;
                    (slot.pack(), Act::Expire)
                }
                SlotState::Resumed if empty => (0, Act::Free),
                _ => (old, Act::Wait),
            }
        })?;
        match act {
            Act::Stale => {}
            Act::Free => self.release(port),
            Act::Expire => {
                self.c.resume_expiries += 1;
                cx.resume_queue(port, q);
                let clear = CwBits { path: t.path, opcode: CwOpcode::Clear, epoch: t.epoch, rerouted: false, tail: false };
                self.send_control(cx, t.conn, clear);
                cx.decision.verdict = Verdict::Recirculate;
            }
            Act::Wait => {
                cx.decision.verdict = Verdict::Recirculate;
            }
        }
        Ok(())
    }

    fn release(&mut self, port: PortId) {
        if let Some(n) = self.in_use.get_mut(&port.0) {
            *n = n.saturating_sub(1);
        }
    }

    /// Records the usage samples due at every multiple of `sample_ns` up
    /// to `now` (metrics, not data plane). The number of queues in use only
    /// changes in pipeline passes, so sampling at each pass the instants
    /// since the previous one is exact for it; held bytes are read at the
    /// pass (they change at dequeues in between).
    fn sample_until(&mut self, now: Nanos, depths: &dyn QueueDepths) {
        let due = now / self.sample_ns;
        if due <= self.sampled_until {
            return;
        }
        let k = due - self.sampled_until;
        self.sampled_until = due;
        let n = self.n_reorder(self.queues_per_port);
        let mut bytes = 0u64;
        for (p, faces) in self.host_facing.iter().enumerate() {
            if !*faces {
                continue;
            }
            let used = self.in_use.get(&(p as u16)).copied().unwrap_or(0) as u64;
            *self.queues_per_port_hist.entry(used).or_default() += k;
            if used > 0 {
                bytes += (1..=n).map(|q| depths.queue_bytes(PortId(p as u16), QueueId(q))).sum::<u64>();
            }
        }
        self.last_buffer_bytes = bytes;
        if self.host_facing.iter().any(|f| *f) {
            *self.buffer_hist.entry(bytes.div_ceil(1000) * 1000).or_default() += k;
        }
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
            // 9 vs 6 of ~15 000 reorder episodes: EXPERIMENTS.md, issue 11.)
            self.times.resume_extra = 64_000;
        }
        if self.upper_fanout > 1 {
            // 3-tier defaults (DESIGN §6.1, the authors' fat-tree setup).
            let set = |k: &str| self.explicit.contains_key(k);
            if !set("theta_path_busy_us") {
                self.times.path_busy = 16_000;
            }
            if !set("theta_inactive_us") {
                self.times.inactive = 1_000_000;
            }
            if !set("theta_resume_default_us") {
                self.times.resume_default = 600_000;
            }
        }
    }

    fn configure_traffic_manager(&self, tm: &mut TmConfig) {
        // Reorder queues: strict priority above the data queue 0, below the
        // control queue; PFC class and ECN of the data queue.
        let n = tm.queues_per_port;
        if n < 3 {
            return;
        }
        let data = tm.queues[0];
        for q in 1..n - 1 {
            tm.queues[q as usize] = weft_tofino::QueueConfig { priority: 1, weight: 1, ecn: data.ecn, pfc_class: data.pfc_class };
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
            (Some((bth, b)), Some(port)) if b.opcode.is_data() => self.ingress_destination(cx, bth, b, port),
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
        let Ok(info) = FrameInfo::parse(cx.frame) else { return Ok(()) };
        let Some(bth) = info.ip.and_then(|i| i.bth_offset).map(|b| b as usize) else { return Ok(()) };
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
        let _ = cwire::strip(cx.frame, info.l3_offset as usize, bth);
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
    build: |p| Ok(Box::new(ConWeave::from_params(p)?)),
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
