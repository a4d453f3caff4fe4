//! A synthetic RoCEv2 RC endpoint (sans-IO): queue pairs sending RDMA WRITE
//! messages as real RoCEv2 frames, with DCQCN congestion control and the
//! two loss-recovery modes of the ConWeave paper (§4.1).
//!
//! Frames: Ethernet / IPv4 (DSCP of the flow, ECT(0)) / UDP (source port
//! from the QP, destination 4791) / BTH (WRITE First/Middle/Last/Only, PSN,
//! ack-request) [/ RETH on the first packet] / payload (1000 B default) /
//! ICRC (valid RoCEv2 invariant CRC). The receiver acknowledges every packet
//! (BTH Acknowledge + AETH), sends NAKs (AETH NAK "PSN sequence error")
//! and CNPs (opcode 0x81) in the control priority (DSCP 48).
//!
//! Recovery ([`Recovery`]):
//! - `GoBackN` (`roce-lossless`, with PFC in the switches): an
//!   out-of-sequence packet is dropped and answered with a NAK carrying the
//!   expected PSN (at most one per `nak_interval` per QP); the sender goes
//!   back to that PSN and resends everything from there. This is what a
//!   ConnectX NIC does and why reordering hurts RDMA (ConWeave §1, Fig. 3).
//! - `Irn` (`roce-irn`, no PFC): the receiver keeps out-of-order packets and
//!   NAKs with the expected PSN plus the PSN that arrived (in the AETH MSN
//!   field); the sender retransmits only the missing packet (selective
//!   repeat), keeps at most one BDP in flight, and retransmits on a timeout
//!   (`rto_low` when at most 3 packets are in flight, else `rto_high`).
//!   `irn.resend = from-unacked` ([`IrnResend::FromUnacked`]) resends as
//!   the ConWeave authors' simulator does instead: back to the oldest
//!   unacknowledged packet, then every packet no NAK reported. weft's
//!   default stays the IRN paper's selective repeat (what IRN and a
//!   ConnectX with selective repeat do); `scripts/compare-ns3` sets it.
//!
//! DCQCN ([`DcqcnConfig`], docs/HOSTS.md#reference-parameters) follows the RNIC model of the
//! ConWeave authors' ns-3 simulator (conweave-ns3
//! `src/point-to-point/model/rdma-hw.cc`, the "Mellanox's version of DCQCN"
//! functions; parameters from its `run.py`), rule by rule:
//! - the receiver marks a CNP for every ECN-marked data packet
//!   (`ReceiveUdp`: `ecnbits` sets the CNP flag of the ACK; weft sends the
//!   CNP as its own RoCEv2 frame, opcode 0x81) and for every out-of-order
//!   NAK (`ReceiverCheckSeq`: `cnp = true`); `cnp_interval` (default 0, as
//!   the authors) can space them as a ConnectX's `min_time_between_cnps` does;
//! - the first CNP of a QP sets α = 1, sets rate and target to
//!   `rate_on_first_cnp` × rate and starts two periodic timers
//!   (`cnp_received_mlx`): the α update every `alpha_interval` (1 µs) and
//!   the rate-decrease check every `decrease_interval` (4 µs, 1 ns after the
//!   α update);
//! - later CNPs only set two "CNP arrived" bits (`cnp_received_mlx`);
//! - α update (`UpdateAlphaMlx`): α ← (1 − g)·α + g if a CNP arrived since
//!   the last update, else α ← (1 − g)·α; the bit is cleared;
//! - decrease check (`CheckRateDecreaseMlx`): only if a CNP arrived since the
//!   last check: the target is set to the current rate unless
//!   `clamp_target_rate` is off (the authors' `CLAMP_TARGET_RATE 0`) and the
//!   increase stage is 0, so consecutive cuts inside one congestion episode
//!   keep the pre-episode target; rate ← max(min_rate, rate·(1 − α/2));
//!   stage ← 0; the increase timer restarts `rp_timer` (300 µs) from now;
//! - increase timer (`RateIncEventTimerMlx`, `FastRecoveryMlx`,
//!   `ActiveIncreaseMlx`, `HyperIncreaseMlx`), every `rp_timer` after the
//!   last cut: stage < F: rate ← (rate + target)/2; stage = F: target +=
//!   `rai`; stage > F: target += `rhai` (target capped at the line rate),
//!   then rate ← (rate + target)/2; stage += 1. No byte counter.
//!
//! Events at the same nanosecond run in the authors' order: α update, then
//! rate increase, then decrease check (the ns-3 scheduler runs equal times
//! in insertion order). The timers are evaluated lazily, when the QP is next
//! looked at (a CNP, a send), which gives the same rates as running every
//! event. Pacing: a QP sends its next packet `wire bytes x 8 / rate` after
//! the previous one (`UpdateNextAvail` with `RATE_BOUND 1`), in whole ns
//! with the fraction carried to the next gap, so a QP sends its rate on
//! average. (The authors' simulator truncates each gap to the ns, `Time`
//! keeping the integer part, so its QPs send up to 1 ns per packet faster
//! than their rate; rounding each gap up, as weft did before, sent up to
//! 1 ns slower.)
//!
//! Wake-ups: the host's timer is the earliest instant at which something
//! could leave (a QP ready and the wire free, a control frame and the wire
//! free, a QP's start, a pause's end, a retransmission timeout), never the
//! end of a frame on the wire alone; frames leave at the same instants as
//! if the host woke at every event, so the wake-up rule moves no result.
//!
//! Go-Back-N also resends from the oldest unacknowledged packet after
//! `gbn_timeout` (1 ms) without progress, so a tail lost on a failed link
//! does not hang the QP.
//!
//! Completion: a flow completes when its receiver has every byte in order
//! (one-way, the base FCT's convention in [`crate::fct`]).

use super::nic::{HostError, Nic};
use super::rank_set::RankSet;
use super::SizedFlow;
use crate::fabric::NodeSpec;
use crate::transmit::Transmit;
use bytes::BytesMut;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use weft_wire::frame::FrameInfo;
use weft_wire::ids::{NodeId, PortId};
use weft_wire::roce::{self, Aeth, AethKind, BthPacket, BthRepr, Opcode, Reth};
use weft_wire::template::{UdpFields, UdpHeaders};
use weft_wire::time::{BitRate, Nanos, MICROS};
use weft_wire::{ethernet, ipv4, udp, EthernetAddress, Ipv4Address};

/// Bytes of headers on every data packet: Ethernet 14, IPv4 20, UDP 8,
/// BTH 12, ICRC 4 (the first packet adds a 16-byte RETH).
pub const DATA_OVERHEAD: usize = 14 + 20 + 8 + roce::BTH_LEN + roce::ICRC_LEN;
/// DSCP of ACK/NAK/CNP (CS6: the switches' control queue).
pub const CONTROL_DSCP: u8 = 48;

/// Loss recovery.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Recovery {
    /// Go-Back-N (lossless RoCE with PFC).
    GoBackN,
    /// IRN: selective repeat + BDP flow control.
    Irn {
        /// In-flight bytes allowed.
        bdp_bytes: u64,
        /// Timeout with at most 3 packets in flight.
        rto_low: Nanos,
        /// Timeout otherwise.
        rto_high: Nanos,
        /// What a NAK makes the sender resend.
        resend: IrnResend,
    },
}

impl Recovery {
    /// The shortest retransmission timeout a QP can have (`gbn` for
    /// Go-Back-N, the lower of IRN's two).
    fn min_rto(&self, gbn: Nanos) -> Nanos {
        match *self {
            Recovery::GoBackN => gbn,
            Recovery::Irn { rto_low, rto_high, .. } => rto_low.min(rto_high),
        }
    }
}

/// What an IRN sender resends when a NAK reports a hole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IrnResend {
    /// Only the missing packet the NAK names, once (the IRN paper's
    /// selective repeat, what weft does by default).
    #[default]
    Selective,
    /// The ConWeave authors' simulator (`rdma-hw.cc` `ReceiveAck`,
    /// `RecoverQueue`; `rdma-queue-pair.cc` `GetBytesLeft`): the first NAK
    /// enters loss recovery and sends the QP back to its oldest
    /// unacknowledged packet; from there it resends every packet no NAK has
    /// reported as received (also those still in flight), until an ACK
    /// without a hole, or the cumulative acknowledgment passing the point
    /// where recovery began, ends it. The receiver keeps answering in-order
    /// packets with a NAK (hole still open) while it holds out-of-order
    /// ones (`ReceiverCheckSeq`, return 2).
    FromUnacked,
}

/// DCQCN parameters (defaults: the ConWeave setup at 100 Gbit/s, docs/HOSTS.md#reference-parameters,
/// the authors' `run.py`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DcqcnConfig {
    /// Enabled.
    pub enabled: bool,
    /// α gain g (`EWMA_GAIN` 1/256).
    pub g: f64,
    /// Period of the α update (`ALPHA_RESUME_INTERVAL` 1 µs).
    pub alpha_interval: Nanos,
    /// Period of the rate-decrease check (`RATE_DECREASE_INTERVAL` 4 µs).
    pub decrease_interval: Nanos,
    /// Rate-increase timer (`RP_TIMER` 300 µs).
    pub rp_timer: Nanos,
    /// Fast-recovery stages before additive increase (`FAST_RECOVERY_TIMES` 1).
    pub fast_recovery_stages: u32,
    /// Additive increase (`RATE_AI`).
    pub rai: BitRate,
    /// Hyper increase (`RATE_HAI`).
    pub rhai: BitRate,
    /// Minimum rate (`MIN_RATE`).
    pub min_rate: BitRate,
    /// Clamp the target rate to the current rate on every cut
    /// (`CLAMP_TARGET_RATE`; the authors run 0: no clamp while the increase
    /// stage is 0).
    pub clamp_target_rate: bool,
    /// Fraction of the rate kept on a QP's first CNP (`RateOnFirstCnp` 1.0).
    pub rate_on_first_cnp: f64,
    /// Receiver: minimum time between two CNPs of a QP (0: one for every
    /// ECN-marked packet, as the authors' simulator).
    pub cnp_interval: Nanos,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            enabled: true,
            g: 1.0 / 256.0,
            alpha_interval: MICROS,
            decrease_interval: 4 * MICROS,
            rp_timer: 300 * MICROS,
            fast_recovery_stages: 1,
            rai: BitRate::mbps(40),
            rhai: BitRate::mbps(100),
            min_rate: BitRate::mbps(100),
            clamp_target_rate: false,
            rate_on_first_cnp: 1.0,
            cnp_interval: 0,
        }
    }
}

/// RoCE endpoint configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RoceConfig {
    /// Payload bytes per packet.
    pub payload: u16,
    /// Loss recovery.
    pub recovery: Recovery,
    /// Receiver: minimum time between two NAKs of a QP.
    pub nak_interval: Nanos,
    /// Go-Back-N: resend from the oldest unacknowledged packet when nothing
    /// was acknowledged for this long (losses only happen on link failures
    /// in lossless mode; without a timeout a lost tail would hang the QP).
    pub gbn_timeout: Nanos,
    /// Congestion control.
    pub dcqcn: DcqcnConfig,
    /// Compute the ICRC of every packet. Only a consumer outside weft
    /// checks it (a capture, a real RNIC behind a TAP): real time fills it;
    /// virtual time leaves the 4 bytes zero (no weft node reads them, so
    /// results do not change), which saves a CRC over every packet.
    pub icrc: bool,
    /// Wire time of the ACKs, NAKs and CNPs the host sends, when not their
    /// length (calibration, `weft run --frame-bytes`).
    #[serde(default)]
    pub control_frame_bytes: weft_wire::frame::ControlFrameBytes,
    /// The gateway's MAC known from the start, no ARP (`roce.arp=static`:
    /// as the ConWeave authors' simulator, which has no ARP).
    #[serde(default)]
    pub static_arp: bool,
}

impl RoceConfig {
    /// Lossless RoCE (Go-Back-N) with the ConWeave defaults.
    pub fn lossless() -> Self {
        RoceConfig {
            payload: 1000,
            recovery: Recovery::GoBackN,
            nak_interval: 4 * MICROS,
            gbn_timeout: 1_000 * MICROS,
            dcqcn: DcqcnConfig::default(),
            icrc: true,
            control_frame_bytes: Default::default(),
            static_arp: false,
        }
    }
    /// IRN with BDP flow control for `bdp_bytes` (104 000 B on leaf-spine at 100G).
    pub fn irn(bdp_bytes: u64) -> Self {
        RoceConfig {
            recovery: Recovery::Irn { bdp_bytes, rto_low: 100 * MICROS, rto_high: 320 * MICROS, resend: IrnResend::Selective },
            ..Self::lossless()
        }
    }
}

/// Sender-side state and counters of a QP.
#[derive(Debug, Clone, Serialize)]
pub struct SendQp {
    /// The flow.
    pub flow: SizedFlow,
    /// Packets in the message.
    pub packets: u32,
    /// Lowest unacknowledged PSN.
    pub snd_una: u32,
    /// Next new PSN.
    pub snd_nxt: u32,
    /// Current rate.
    pub rate: f64,
    /// Packets sent again (go-back or selective).
    pub retransmits: u64,
    /// NAKs received.
    pub naks: u64,
    /// CNPs received.
    pub cnps: u64,
    /// Largest in-flight bytes seen.
    pub max_in_flight: u64,
    /// First packet sent.
    pub first_sent: Option<Nanos>,
    /// Last acknowledgment received.
    pub acked_at: Option<Nanos>,
    #[serde(skip)]
    cc: Dcqcn,
    #[serde(skip)]
    next_send: Nanos,
    /// The fraction of a ns by which `next_send` is early: the pacing's
    /// rounding carried to the next packet, so a QP paced at `rate` sends
    /// at `rate` on average, not a little below it.
    #[serde(skip)]
    pace_carry: f32,
    #[serde(skip)]
    last_progress: Nanos,
    /// Loss-recovery state, made at the QP's first NAK or timeout and
    /// dropped once every packet is acknowledged (most QPs never lose a
    /// packet: a million QPs would otherwise carry 80 MB of empty sets).
    #[serde(skip)]
    loss: Option<Box<LossState>>,
}

/// What a QP keeps while it recovers from losses.
#[derive(Debug, Clone, Default)]
struct LossState {
    /// PSNs to send again.
    retx: std::collections::BTreeSet<u32>,
    /// IRN: PSNs a NAK reported as received.
    sacked: Vec<bool>,
    /// PSNs sent again since the last timeout.
    resent: std::collections::BTreeSet<u32>,
    /// IRN loss recovery ([`IrnResend::FromUnacked`]): the `snd_nxt` at
    /// which it began.
    recovery_until: Option<u32>,
}

/// Receiver-side state and counters of a QP.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecvQp {
    /// Expected PSN.
    pub epsn: u32,
    /// Message length from the RETH (0 until the first packet arrived).
    pub length: u64,
    /// Packets received (incl. duplicates and out-of-order).
    pub packets: u64,
    /// Bytes delivered in order.
    pub bytes: u64,
    /// Packets that arrived out of order.
    pub out_of_order: u64,
    /// NAKs sent.
    pub naks: u64,
    /// CNPs sent.
    pub cnps: u64,
    /// ECN-marked packets.
    pub ecn_marks: u64,
    /// First arrival.
    pub first_arrival: Option<Nanos>,
    /// When every byte had arrived in order.
    pub completed: Option<Nanos>,
    #[serde(skip)]
    held: Vec<bool>,
    /// Out-of-order packets held beyond `epsn` (IRN).
    #[serde(skip)]
    held_ahead: u32,
    #[serde(skip)]
    last_nak: Option<(Nanos, u32)>,
    #[serde(skip)]
    last_cnp: Option<Nanos>,
}

/// DCQCN reaction-point state of a QP (the `mlx` fields of the authors'
/// `RdmaQueuePair`), with the next due time of each of its three timers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dcqcn {
    /// Target rate, bit/s.
    pub target: f64,
    /// α.
    pub alpha: f64,
    /// A CNP arrived since the last α update.
    alpha_cnp: bool,
    /// A CNP arrived since the last decrease check.
    decrease_cnp: bool,
    /// Increase stage (0 right after a cut).
    pub stage: u32,
    /// Next α update and next decrease check (`None` before the first CNP).
    periodic: Option<(Nanos, Nanos)>,
    /// Next rate increase (`None` before the first cut).
    increase_at: Option<Nanos>,
}

impl Dcqcn {
    /// A QP starting at `line` bit/s (α = 1, no timer running).
    pub fn new(line: f64) -> Self {
        Dcqcn { target: line, alpha: 1.0, alpha_cnp: false, decrease_cnp: false, stage: 0, periodic: None, increase_at: None }
    }

    /// A CNP for this QP at `now` (`cnp_received_mlx`). Call
    /// [`Dcqcn::advance`] to `now` first.
    pub fn on_cnp(&mut self, cfg: &DcqcnConfig, now: Nanos, rate: &mut f64) {
        self.alpha_cnp = true;
        self.decrease_cnp = true;
        if self.periodic.is_none() {
            self.alpha = 1.0;
            self.alpha_cnp = false;
            // The decrease check runs 1 ns after the α update.
            self.periodic = Some((now + cfg.alpha_interval, now + cfg.decrease_interval + 1));
            *rate *= cfg.rate_on_first_cnp;
            self.target = *rate;
        }
    }

    /// Runs every timer event due at or before `now`, in the authors' order.
    pub fn advance(&mut self, cfg: &DcqcnConfig, now: Nanos, rate: &mut f64, line: f64) {
        let Some((mut alpha_at, mut decrease_at)) = self.periodic else { return };
        let (ai, di) = (cfg.alpha_interval.max(1), cfg.decrease_interval.max(1));
        loop {
            if !self.alpha_cnp && !self.decrease_cnp {
                // Nothing pending: α only decays and the decrease checks do
                // nothing until the next CNP; only increases change the rate.
                if alpha_at <= now {
                    let k = (now - alpha_at) / ai + 1;
                    self.alpha *= (1.0 - cfg.g).powi(k.min(1 << 30) as i32);
                    alpha_at += k * ai;
                }
                if decrease_at <= now {
                    decrease_at += ((now - decrease_at) / di + 1) * di;
                }
                while let Some(t) = self.increase_at.filter(|&t| t <= now) {
                    self.increase(cfg, rate, line);
                    self.increase_at = Some(t + cfg.rp_timer.max(1));
                }
                break;
            }
            let inc = self.increase_at.unwrap_or(Nanos::MAX);
            let next = alpha_at.min(inc).min(decrease_at);
            if next > now {
                break;
            }
            if alpha_at == next {
                self.alpha = (1.0 - cfg.g) * self.alpha + if self.alpha_cnp { cfg.g } else { 0.0 };
                self.alpha_cnp = false;
                alpha_at += ai;
            } else if inc == next {
                self.increase(cfg, rate, line);
                self.increase_at = Some(inc + cfg.rp_timer.max(1));
            } else {
                if self.decrease_cnp {
                    if cfg.clamp_target_rate || self.stage != 0 {
                        self.target = *rate;
                    }
                    *rate = (*rate * (1.0 - self.alpha / 2.0)).max(cfg.min_rate.bps() as f64);
                    self.stage = 0;
                    self.decrease_cnp = false;
                    self.increase_at = Some(decrease_at + cfg.rp_timer.max(1));
                }
                decrease_at += di;
            }
        }
        self.periodic = Some((alpha_at, decrease_at));
    }

    /// One increase event (`RateIncEventMlx`).
    fn increase(&mut self, cfg: &DcqcnConfig, rate: &mut f64, line: f64) {
        let f = cfg.fast_recovery_stages;
        if self.stage == f {
            self.target = (self.target + cfg.rai.bps() as f64).min(line);
        } else if self.stage > f {
            self.target = (self.target + cfg.rhai.bps() as f64).min(line);
        }
        *rate = (*rate + self.target) / 2.0;
        self.stage = self.stage.saturating_add(1);
    }
}

/// The time from a `len`-byte packet of a QP paced at `rate` bit/s to its
/// next, in whole ns, with the fraction of a ns left over carried in
/// `carry` to the next packet's: back to back, a QP sends `rate` on
/// average (rounding each gap up would send a little below it: 0.3 % at
/// 50 Gbit/s with 1 kB packets).
fn pacing_gap(len: usize, rate: f64, carry: &mut f32) -> Nanos {
    let gap = len as f64 * 8e9 / rate.max(1.0) + f64::from(*carry);
    let whole = gap.floor();
    *carry = (gap - whole) as f32;
    whole as Nanos
}

/// A synthetic RoCEv2 host. Call order as [`crate::node`] says.
#[derive(Debug)]
pub struct RoceHost {
    id: NodeId,
    name: String,
    nic: Nic,
    cfg: RoceConfig,
    send: Vec<SendQp>,
    /// QP number of each of `send` (same order): the ACK path's search
    /// reads 4 bytes per QP here instead of a QP's cache line.
    send_qpns: Vec<u32>,
    /// Indices of the QPs not yet fully acknowledged (started or not): the
    /// round robin's positions are their ranks in index order.
    unfinished: RankSet,
    /// The started ones among them (start time reached at a wake-up), in
    /// index order: the only QPs a wake-up looks at.
    started: Vec<usize>,
    /// QPs not started yet, per priority class, by (start time, index).
    pending: [BinaryHeap<Reverse<(Nanos, usize)>>; 8],
    /// Bit `c` set: `pending[c]` holds QPs (a run's flows are mostly of
    /// one class, and all have started after its last start time, so a
    /// wake-up looks at none or one of the eight).
    pending_classes: u8,
    /// Round robin: the position in `unfinished` a send looks at first.
    rr: usize,
    recv: FxHashMap<u32, RecvQp>,
    /// Its frames' Ethernet, IPv4 and UDP headers, the host's own fields
    /// in place.
    headers: UdpHeaders,
    timer: Option<Nanos>,
    /// No started QP with packets in flight times out before this: at most
    /// the smallest `last_progress + RTO` among them (the lower of IRN's
    /// two RTOs), so a wake-up before it skips the timeout scan.
    rto_floor: Nanos,
    /// A QP may have finished since `started` was last pruned.
    maybe_done: bool,
    /// The QPs acknowledgments came for last, by QP number.
    recent_qps: RecentQps,
}

super::host_common!(RoceHost);

/// The last few (QP number, index) pairs a sender looked up: the
/// acknowledgments a host receives are for the few QPs it is sending on,
/// so they are found here without reading the sorted QP numbers (a cache
/// miss or two a lookup, thousands of QPs in). An index once found never
/// changes (QPs are only appended), so an entry stays right.
#[derive(Debug, Default, Clone)]
struct RecentQps {
    qpn: [u32; RecentQps::LEN],
    index: [u32; RecentQps::LEN],
    /// Bit `k` set: entry `k` holds a pair.
    valid: u8,
    /// The entry the next pair replaces.
    next: u8,
}

impl RecentQps {
    const LEN: usize = 4;

    fn get(&self, qpn: u32) -> Option<usize> {
        (0..Self::LEN).find(|&k| self.valid & (1 << k) != 0 && self.qpn[k] == qpn).map(|k| self.index[k] as usize)
    }

    fn put(&mut self, qpn: u32, index: usize) {
        let k = self.next as usize;
        self.qpn[k] = qpn;
        self.index[k] = index as u32;
        self.valid |= 1 << k;
        self.next = ((k + 1) % Self::LEN) as u8;
    }
}

/// Position of `x` in the sorted `keys`, if there. A host's QP numbers
/// are the run's flow ids of its own flows, spread about evenly over all
/// ids, so a guess by interpolation lands within a few entries and a
/// galloping search from it reads a cache line or two, where a binary
/// search over thousands of QPs misses on its last steps.
fn find_sorted(keys: &[u32], x: u32) -> Option<usize> {
    let (&first, &last) = (keys.first()?, keys.last()?);
    if x < first || x > last {
        return None;
    }
    let n = keys.len();
    let guess = if last == first { 0 } else { ((x - first) as u64 * (n - 1) as u64 / (last - first) as u64) as usize };
    // Gallop from the guess to a range [lo, hi) that holds the first key >= x.
    let (mut lo, mut hi);
    if keys[guess] < x {
        let mut step = 1;
        lo = guess + 1;
        hi = guess + 1 + step;
        while hi < n && keys[hi - 1] < x {
            lo = hi;
            step *= 2;
            hi = lo + step;
        }
        hi = hi.min(n);
    } else {
        let mut step = 1;
        hi = guess + 1;
        lo = guess.saturating_sub(step);
        while lo > 0 && keys[lo] >= x {
            hi = lo + 1;
            step *= 2;
            lo = lo.saturating_sub(step);
        }
    }
    let i = lo + keys[lo..hi].partition_point(|&k| k < x);
    (keys.get(i) == Some(&x)).then_some(i)
}

impl SendQp {
    /// The DCQCN reaction-point state (as of the QP's last send or CNP).
    pub fn dcqcn(&self) -> &Dcqcn {
        &self.cc
    }

    /// Whether a NAK reported PSN `p` as received.
    fn sacked(&self, p: u32) -> bool {
        self.loss.as_ref().is_some_and(|l| l.sacked.get(p as usize).copied().unwrap_or(false))
    }

    /// The first PSN waiting to be sent again.
    fn next_retx(&self) -> Option<u32> {
        self.loss.as_ref().and_then(|l| l.retx.first().copied())
    }

    /// Moves `snd_nxt` past packets a NAK reported as received.
    fn skip_sacked(&mut self) {
        while self.snd_nxt < self.packets && self.sacked(self.snd_nxt) {
            self.snd_nxt += 1;
        }
    }
}

impl RoceHost {
    /// The host of fabric node `node`.
    pub fn from_spec(id: NodeId, node: &NodeSpec, cfg: RoceConfig) -> Result<Self, HostError> {
        let mut nic = Nic::from_spec(node)?;
        nic.control_frame_bytes = cfg.control_frame_bytes;
        if cfg.static_arp {
            nic.resolve_gateway_statically(node);
        }
        Ok(RoceHost {
            id,
            name: node.name.clone(),
            headers: UdpHeaders::new(nic.mac, nic.ip, super::TTL),
            nic,
            cfg,
            send: Vec::new(),
            send_qpns: Vec::new(),
            unfinished: RankSet::default(),
            started: Vec::new(),
            pending: Default::default(),
            pending_classes: 0,
            rr: 0,
            recv: FxHashMap::default(),
            timer: None,
            rto_floor: Nanos::MAX,
            maybe_done: false,
            recent_qps: RecentQps::default(),
        })
    }
    /// Sending QPs.
    pub fn send_qps(&self) -> &[SendQp] {
        &self.send
    }
    /// Receiving QPs by QP number.
    pub fn recv_qps(&self) -> &FxHashMap<u32, RecvQp> {
        &self.recv
    }
    /// The configuration.
    pub fn config(&self) -> &RoceConfig {
        &self.cfg
    }

    /// Room for `n` more flows, allocated exactly (a run that knows its
    /// flows up front spares the growth of the QP list).
    pub fn reserve_flows(&mut self, n: usize) {
        self.send.reserve_exact(n);
        self.send_qpns.reserve_exact(n);
        self.unfinished.reserve_exact(n);
    }

    /// Adds a message to send.
    pub fn add_flow(&mut self, flow: SizedFlow) {
        let p = self.cfg.payload.max(1) as u64;
        let packets = flow.size.div_ceil(p).max(1) as u32;
        let line = self.nic.rate().bps() as f64;
        let cc = Dcqcn::new(line);
        self.send.push(SendQp {
            flow,
            packets,
            snd_una: 0,
            snd_nxt: 0,
            rate: line,
            retransmits: 0,
            naks: 0,
            cnps: 0,
            max_in_flight: 0,
            first_sent: None,
            acked_at: None,
            cc,
            next_send: flow.start,
            pace_carry: 0.0,
            last_progress: flow.start,
            loss: None,
        });
        self.send_qpns.push(flow.id.0 + 1);
        let i = self.send.len() - 1;
        debug_assert_eq!(self.unfinished.capacity(), i, "QPs are added in index order");
        self.unfinished.push();
        let class = (flow.dscp >> 3) as usize % 8;
        self.pending[class].push(Reverse((flow.start, i)));
        self.pending_classes |= 1 << class;
        self.timer = Some(self.timer.map_or(flow.start, |t| t.min(flow.start)));
    }

    fn wire_len(&self, qp: &SendQp, psn: u32) -> usize {
        let p = self.cfg.payload as u64;
        let payload = if psn + 1 == qp.packets { qp.flow.size - p * psn as u64 } else { p } as usize;
        DATA_OVERHEAD + payload + if psn == 0 { roce::RETH_LEN } else { 0 }
    }

    fn in_flight_bytes(&self, qp: &SendQp) -> u64 {
        let full = (self.cfg.payload as usize + DATA_OVERHEAD) as u64;
        qp.snd_nxt.saturating_sub(qp.snd_una) as u64 * full
    }

    /// A frame received at `now`.
    pub fn handle_frame(&mut self, now: Nanos, _port: PortId, frame: BytesMut, out: &mut Vec<Transmit>) {
        self.nic.counters.rx_frames += 1;
        let info = match FrameInfo::parse(&frame) {
            Ok(i) => i,
            Err(_) => {
                self.nic.counters.rx_malformed += 1;
                return;
            }
        };
        if !self.nic.handle_control(now, &info, &frame) {
            match info.ip.and_then(|ip| ip.bth_offset.map(|b| (ip, b))) {
                Some((ip, bth)) if ip.dst == self.nic.ip => {
                    let Ok(b) = BthPacket::new_checked(&frame[bth as usize..]) else {
                        self.nic.counters.rx_malformed += 1;
                        return;
                    };
                    match b.opcode() {
                        Opcode::Acknowledge => self.on_ack(now, b.dest_qp(), b.psn(), b.aeth()),
                        Opcode::Cnp => self.on_cnp(now, b.dest_qp()),
                        Opcode::WriteFirst | Opcode::WriteMiddle | Opcode::WriteLast | Opcode::WriteOnly => {
                            let payload = frame.len() - bth as usize - roce::BTH_LEN - b.opcode().ext_header_len() - roce::ICRC_LEN;
                            let reth = b.reth();
                            self.on_data(now, ip.src, ip.ecn == ipv4::Ecn::Ce, b.dest_qp(), b.psn(), payload as u64, reth);
                        }
                        _ => self.nic.counters.rx_ignored += 1,
                    }
                }
                _ => self.nic.counters.rx_ignored += 1,
            }
        }
        self.nic.frames.give(frame);
        self.pump(now, out);
    }

    fn qp_index(&mut self, qpn: u32) -> Option<usize> {
        if let Some(i) = self.recent_qps.get(qpn) {
            return Some(i);
        }
        let i = find_sorted(&self.send_qpns, qpn)?;
        self.recent_qps.put(qpn, i);
        Some(i)
    }

    fn on_ack(&mut self, now: Nanos, qpn: u32, psn: u32, aeth: Option<Aeth>) {
        let Some(i) = self.qp_index(qpn) else { return };
        let irn = match self.cfg.recovery {
            Recovery::Irn { resend, .. } => Some(resend),
            Recovery::GoBackN => None,
        };
        let qp = &mut self.send[i];
        match aeth.map(|a| a.kind) {
            Some(AethKind::Nak(_)) => {
                qp.naks += 1;
                // psn = the receiver's expected PSN: everything below arrived.
                if psn > qp.snd_una {
                    qp.snd_una = psn.min(qp.packets);
                    qp.last_progress = now;
                }
                if let Some(resend) = irn {
                    let sack = aeth.map_or(0, |a| a.msn);
                    let packets = qp.packets as usize;
                    let l = qp.loss.get_or_insert_with(Default::default);
                    if l.sacked.len() < packets {
                        l.sacked.resize(packets, false);
                    }
                    // msn = the PSN that arrived (0 with none: the NAK then
                    // only reports the hole).
                    if sack > 0 {
                        if let Some(s) = l.sacked.get_mut(sack as usize) {
                            *s = true;
                        }
                    }
                    match resend {
                        // Selective repeat: resend the missing packet once (a
                        // lost retransmission is recovered by the timeout).
                        IrnResend::Selective => {
                            if psn < qp.snd_nxt && !l.resent.contains(&psn) {
                                l.retx.insert(psn);
                            }
                        }
                        IrnResend::FromUnacked => {
                            if l.recovery_until.is_none() && qp.snd_una < qp.snd_nxt {
                                let sacked = &l.sacked;
                                qp.retransmits +=
                                    (qp.snd_una..qp.snd_nxt).filter(|&p| !sacked.get(p as usize).copied().unwrap_or(false)).count() as u64;
                                l.recovery_until = Some(qp.snd_nxt);
                                qp.snd_nxt = qp.snd_una;
                            }
                            qp.skip_sacked();
                        }
                    }
                } else if psn < qp.snd_nxt {
                    qp.retransmits += (qp.snd_nxt - psn) as u64;
                    qp.snd_nxt = psn;
                }
            }
            _ => {
                if psn + 1 > qp.snd_una {
                    qp.snd_una = (psn + 1).min(qp.packets);
                    qp.last_progress = now;
                }
                // An ACK without a hole ends IRN loss recovery.
                if let Some(l) = qp.loss.as_mut() {
                    l.recovery_until = None;
                }
            }
        }
        // Late ACKs of packets sent before a go-back may pass snd_nxt.
        qp.snd_nxt = qp.snd_nxt.max(qp.snd_una);
        self.maybe_done |= qp.snd_una >= qp.packets;
        let una = qp.snd_una;
        if let Some(l) = qp.loss.as_mut() {
            if l.recovery_until.is_some_and(|r| una >= r) {
                l.recovery_until = None;
            }
            l.retx.retain(|&p| p >= una);
            l.resent.retain(|&p| p >= una);
        }
        if qp.snd_una >= qp.packets {
            if qp.acked_at.is_none() {
                qp.acked_at = Some(now);
            }
            // Nothing is left to recover: the sets are empty (every PSN is
            // below `una`), `sacked` is read only below `packets`.
            qp.loss = None;
        }
    }

    fn on_cnp(&mut self, now: Nanos, qpn: u32) {
        let cfg = self.cfg.dcqcn;
        let Some(i) = self.qp_index(qpn) else { return };
        let line = self.nic.rate().bps() as f64;
        let qp = &mut self.send[i];
        qp.cnps += 1;
        if !cfg.enabled {
            return;
        }
        qp.cc.advance(&cfg, now, &mut qp.rate, line);
        qp.cc.on_cnp(&cfg, now, &mut qp.rate);
    }

    #[allow(clippy::too_many_arguments)]
    fn on_data(&mut self, now: Nanos, src: Ipv4Address, ce: bool, qpn: u32, psn: u32, payload: u64, reth: Option<Reth>) {
        let irn = matches!(self.cfg.recovery, Recovery::Irn { .. });
        let nak_while_holes = matches!(self.cfg.recovery, Recovery::Irn { resend: IrnResend::FromUnacked, .. });
        let (nak_interval, cnp_interval) = (self.cfg.nak_interval, self.cfg.dcqcn.cnp_interval);
        let p = self.cfg.payload as u64;
        let r = self.recv.entry(qpn).or_default();
        r.packets += 1;
        r.first_arrival.get_or_insert(now);
        if let Some(reth) = reth {
            r.length = reth.dma_len as u64;
        }
        let mut cnp = false;
        if ce {
            r.ecn_marks += 1;
            cnp = cnp_interval == 0 || r.last_cnp.is_none_or(|t| now >= t + cnp_interval);
        }
        let mut reply = None;
        if psn == r.epsn {
            r.bytes += payload;
            r.epsn += 1;
            if irn {
                while r.held.get(r.epsn as usize).copied().unwrap_or(false) {
                    r.bytes += p.min(r.length.saturating_sub(r.bytes));
                    r.epsn += 1;
                    r.held_ahead = r.held_ahead.saturating_sub(1);
                }
            }
            reply = if nak_while_holes && r.held_ahead > 0 {
                // The hole is still open: report this packet, as a NAK.
                r.naks += 1;
                Some((AethKind::Nak(Aeth::NAK_PSN_SEQUENCE_ERROR), r.epsn, psn))
            } else {
                Some((AethKind::Ack { credits: 31 }, r.epsn - 1, 0))
            };
        } else if psn > r.epsn {
            r.out_of_order += 1;
            if irn {
                if r.held.len() <= psn as usize {
                    r.held.resize(psn as usize + 1, false);
                }
                if !r.held[psn as usize] {
                    r.held_ahead += 1;
                }
                r.held[psn as usize] = true;
                reply = Some((AethKind::Nak(Aeth::NAK_PSN_SEQUENCE_ERROR), r.epsn, psn));
                r.naks += 1;
                cnp = true;
            } else if r.last_nak.is_none_or(|(t, e)| e != r.epsn || now >= t + nak_interval) {
                // A NAK per sequence error, repeated after `nak_interval` (as
                // the ConWeave/HPCC ns-3 RNIC model does).
                r.last_nak = Some((now, r.epsn));
                r.naks += 1;
                reply = Some((AethKind::Nak(Aeth::NAK_PSN_SEQUENCE_ERROR), r.epsn, 0));
                cnp = true;
            }
        } else {
            reply = Some((AethKind::Ack { credits: 31 }, r.epsn.saturating_sub(1), 0));
        }
        if r.length > 0 && r.bytes >= r.length && r.completed.is_none() {
            r.completed = Some(now);
        }
        if cnp && self.cfg.dcqcn.enabled {
            r.cnps += 1;
            r.last_cnp = Some(now);
        }
        let gw = EthernetAddress::default(); // filled in by the NIC
        if let Some((kind, apsn, msn)) = reply {
            let f = self.control_frame(gw, src, qpn, Opcode::Acknowledge, apsn, Some(Aeth { kind, msn }));
            self.nic.push_routed(now, f);
        }
        if cnp && self.cfg.dcqcn.enabled {
            let f = self.control_frame(gw, src, qpn, Opcode::Cnp, 0, None);
            self.nic.push_routed(now, f);
        }
    }

    fn control_frame(&mut self, gw: EthernetAddress, dst: Ipv4Address, qpn: u32, opcode: Opcode, psn: u32, aeth: Option<Aeth>) -> BytesMut {
        let ext = if aeth.is_some() { roce::AETH_LEN } else { roce::CNP_PAYLOAD_LEN };
        let l4 = udp::HEADER_LEN + roce::BTH_LEN + ext + roce::ICRC_LEN;
        let mut b = self.nic.frames.zeroed(ethernet::HEADER_LEN + ipv4::HEADER_LEN + l4);
        self.headers.write(&mut b, &Self::udp_fields(gw, dst, CONTROL_DSCP, false, 0xc000 ^ (qpn as u16), l4));
        let o = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;
        BthRepr { opcode, solicited: false, pad: 0, pkey: roce::DEFAULT_PKEY, dest_qp: qpn, ack_req: false, psn, reserved15: 0 }
            .emit(&mut b[o..]);
        if let Some(a) = aeth {
            a.emit(&mut b[o + roce::BTH_LEN..]);
        }
        if self.cfg.icrc {
            let _ = roce::fill_icrc(&mut b[ethernet::HEADER_LEN..]);
        }
        b
    }

    /// The Ethernet, IPv4 and UDP fields of a frame to `dst` from UDP
    /// source port `sport` with `l4` bytes from the UDP header on (the rest
    /// is the host's template).
    fn udp_fields(gw: EthernetAddress, dst: Ipv4Address, dscp: u8, ect: bool, sport: u16, l4: usize) -> UdpFields {
        UdpFields {
            dst_mac: gw,
            dst,
            dscp,
            ecn: if ect { ipv4::Ecn::Ect0 } else { ipv4::Ecn::NotEct },
            ident: 0,
            src_port: sport,
            dst_port: udp::ROCEV2_PORT,
            payload_len: l4 - udp::HEADER_LEN,
        }
    }

    fn data_frame(&mut self, gw: EthernetAddress, i: usize, psn: u32) -> BytesMut {
        let len = self.wire_len(&self.send[i], psn);
        let l4 = len - ethernet::HEADER_LEN - ipv4::HEADER_LEN;
        let mut b = self.nic.frames.zeroed(len);
        let qp = &self.send[i];
        self.headers.write(&mut b, &Self::udp_fields(gw, qp.flow.dst, qp.flow.dscp, true, qp.flow.src_port, l4));
        let opcode = match (psn == 0, psn + 1 == qp.packets) {
            (true, true) => Opcode::WriteOnly,
            (true, false) => Opcode::WriteFirst,
            (false, true) => Opcode::WriteLast,
            (false, false) => Opcode::WriteMiddle,
        };
        let o = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;
        let qpn = qp.flow.id.0 + 1;
        BthRepr { opcode, solicited: false, pad: 0, pkey: roce::DEFAULT_PKEY, dest_qp: qpn, ack_req: true, psn, reserved15: 0 }
            .emit(&mut b[o..]);
        if opcode.has_reth() {
            Reth { virtual_addr: 0x1000, rkey: qpn, dma_len: qp.flow.size.min(u32::MAX as u64) as u32 }.emit(&mut b[o + roce::BTH_LEN..]);
        }
        if self.cfg.icrc {
            let _ = roce::fill_icrc(&mut b[ethernet::HEADER_LEN..]);
        }
        b
    }

    /// What QP `i` would send next at `now`, if anything: (psn, is retransmission).
    fn next_packet(&self, i: usize, now: Nanos) -> Option<(u32, bool)> {
        let qp = &self.send[i];
        if qp.flow.start > now || qp.next_send > now || qp.snd_una >= qp.packets {
            return None;
        }
        if self.nic.paused_until(qp.flow.dscp >> 3) > now {
            return None;
        }
        if let Some(p) = qp.next_retx() {
            return Some((p, true));
        }
        if qp.snd_nxt >= qp.packets {
            return None;
        }
        if let Recovery::Irn { bdp_bytes, .. } = self.cfg.recovery {
            let next = self.wire_len(qp, qp.snd_nxt) as u64;
            if self.in_flight_bytes(qp) + next > bdp_bytes {
                return None;
            }
        }
        Some((qp.snd_nxt, false))
    }

    /// Moves the QPs whose start time has come into `started` and drops the
    /// fully acknowledged ones (from `unfinished` too), so a wake-up never
    /// walks QPs that cannot send. Keeps every QP's position in
    /// `unfinished` exactly as one list of all unfinished QPs would.
    fn update_started(&mut self, now: Nanos) {
        let mut classes = self.pending_classes;
        while classes != 0 {
            let class = classes.trailing_zeros() as usize;
            classes &= classes - 1;
            let heap = &mut self.pending[class];
            while let Some(&Reverse((start, i))) = heap.peek() {
                if start > now {
                    break;
                }
                heap.pop();
                let at = self.started.partition_point(|&j| j < i);
                self.started.insert(at, i);
                // (A flow with no packets is done from its start.)
                self.maybe_done = true;
            }
            if heap.is_empty() {
                self.pending_classes &= !(1 << class);
            }
        }
        if !std::mem::take(&mut self.maybe_done) {
            return;
        }
        let send = &self.send;
        let unfinished = &mut self.unfinished;
        self.started.retain(|&i| {
            let done = send[i].snd_una >= send[i].packets;
            if done {
                unfinished.remove(i);
            }
            !done
        });
    }

    /// The first started QP that can send now, in round-robin order: from
    /// position `rr` of `unfinished` on, cyclically (QPs not started never
    /// can, so they are skipped without being looked at).
    fn next_ready(&self, now: Nanos) -> Option<usize> {
        let n = self.unfinished.len();
        if n == 0 || self.started.is_empty() {
            return None;
        }
        let first = self.unfinished.select(self.rr % n)?;
        let from = self.started.partition_point(|&j| j < first);
        let m = self.started.len();
        (0..m).map(|k| self.started[(from + k) % m]).find(|&i| self.next_packet(i, now).is_some())
    }

    fn pump(&mut self, now: Nanos, out: &mut Vec<Transmit>) {
        self.update_started(now);
        // Retransmission timeouts (none can be due before `rto_floor`).
        if now >= self.rto_floor {
            let (recovery, gbn_rto) = (self.cfg.recovery, self.cfg.gbn_timeout);
            let min_rto = recovery.min_rto(gbn_rto);
            let mut floor = Nanos::MAX;
            for &i in &self.started {
                let qp = &mut self.send[i];
                if qp.snd_una >= qp.snd_nxt {
                    continue;
                }
                match recovery {
                    // Go-Back-N: everything unacknowledged again.
                    Recovery::GoBackN => {
                        if now >= qp.last_progress + gbn_rto {
                            qp.retransmits += (qp.snd_nxt - qp.snd_una) as u64;
                            qp.snd_nxt = qp.snd_una;
                            qp.last_progress = now;
                        }
                    }
                    // IRN: the packets no NAK reported as received.
                    Recovery::Irn { rto_low, rto_high, .. } => {
                        let rto = if qp.snd_nxt - qp.snd_una <= 3 { rto_low } else { rto_high };
                        if now >= qp.last_progress + rto {
                            let (una, nxt) = (qp.snd_una, qp.snd_nxt);
                            let l = qp.loss.get_or_insert_with(Default::default);
                            if l.sacked.len() < nxt as usize {
                                l.sacked.resize(nxt as usize, false);
                            }
                            for p in una..nxt {
                                if !l.sacked[p as usize] {
                                    l.retx.insert(p);
                                }
                            }
                            l.resent.clear();
                            qp.last_progress = now;
                        }
                    }
                }
                if qp.snd_una < qp.snd_nxt {
                    floor = floor.min(qp.last_progress + min_rto);
                }
            }
            self.rto_floor = floor;
        }
        // Control frames first, strict priority. A frame charged no wire
        // time (`--frame-bytes cnp=0`: the CNP that rides on an ACK in the
        // ConWeave authors' simulator) leaves the wire free, so the next
        // control frame or a data packet goes at the same instant; otherwise
        // nothing would wake the host for it (the wake-up below considers
        // only later instants) until the next frame arrived.
        while self.nic.send_control(now, out) {}
        if !self.nic.is_busy(now) {
            let line = self.nic.rate().bps() as f64;
            let n = self.unfinished.len();
            if let Some(i) = self.next_ready(now) {
                match self.nic.gateway_mac(now) {
                    None => {
                        self.nic.send_control(now, out);
                    }
                    Some(gw) => {
                        let cfg = self.cfg.dcqcn;
                        if cfg.enabled {
                            let qp = &mut self.send[i];
                            qp.cc.advance(&cfg, now, &mut qp.rate, line);
                        }
                        if let Some((psn, retx)) = self.next_packet(i, now) {
                            let f = self.data_frame(gw, i, psn);
                            let len = f.len();
                            self.nic.transmit(now, f, out);
                            let in_flight = self.in_flight_bytes(&self.send[i]);
                            let qp = &mut self.send[i];
                            if retx {
                                if let Some(l) = qp.loss.as_mut() {
                                    l.retx.remove(&psn);
                                    l.resent.insert(psn);
                                }
                                qp.retransmits += 1;
                            } else {
                                qp.snd_nxt += 1;
                                qp.skip_sacked();
                            }
                            qp.first_sent.get_or_insert(now);
                            if qp.snd_una == qp.snd_nxt.saturating_sub(1) && !retx {
                                qp.last_progress = now;
                            }
                            if qp.snd_una < qp.snd_nxt {
                                self.rto_floor = self.rto_floor.min(qp.last_progress + self.cfg.recovery.min_rto(self.cfg.gbn_timeout));
                            }
                            qp.max_in_flight = qp.max_in_flight.max(in_flight + if retx { 0 } else { len as u64 });
                            qp.next_send = now + pacing_gap(len, qp.rate, &mut qp.pace_carry);
                            let at = if self.unfinished.contains(i) { self.unfinished.rank(i) } else { 0 };
                            self.rr = (at + 1) % n.max(1);
                        }
                    }
                }
            }
        }
        if !self.unfinished.is_empty() && self.nic.arp_retry_at().is_some_and(|t| t <= now) {
            // As TcpHost::pump: a due ARP retry nobody asked for.
            let _ = self.nic.gateway_mac(now);
            self.nic.send_control(now, out);
        }
        // Next wakeup.
        let mut next: Option<Nanos> = None;
        let mut consider = |t: Nanos| next = Some(next.map_or(t, |x: Nanos| x.min(t)));
        // Nothing leaves before the frame on the wire has: a wake-up for a
        // frame or a QP is at the wire's end at the earliest, and none is
        // made for the wire's end alone (a receiver sending one ACK would
        // wake for nothing at the end of each).
        let busy = self.nic.is_busy(now);
        let free_at = if busy { self.nic.busy_until() } else { now };
        if self.nic.has_control() {
            consider(free_at.max(now + if busy { 0 } else { 1 }));
        }
        if let Some(t) = self.nic.arp_retry_at() {
            if !self.unfinished.is_empty() {
                consider(t);
            }
        }
        let irn_rto = match self.cfg.recovery {
            Recovery::Irn { rto_low, rto_high, .. } => Some((rto_low, rto_high)),
            Recovery::GoBackN => None,
        };
        // QPs not started: the earliest start per class, or the class's
        // pause end if later.
        let mut classes = self.pending_classes;
        while classes != 0 {
            let class = classes.trailing_zeros() as u8;
            classes &= classes - 1;
            if let Some(&Reverse((start, _))) = self.pending[class as usize].peek() {
                consider(start.max(self.nic.paused_until(class)).max(free_at));
            }
        }
        for &i in &self.started {
            let qp = &self.send[i];
            let class = qp.flow.dscp >> 3;
            let t = qp.next_send.max(qp.flow.start).max(self.nic.paused_until(class)).max(free_at);
            let has_work = qp.next_retx().is_some() || qp.snd_nxt < qp.packets;
            // (A QP with work and `t` ≤ now had the wire free and did not
            // send: the BDP window holds it, and an ACK or the RTO wakes it.)
            if has_work && t > now {
                consider(t);
            }
            if qp.snd_una < qp.snd_nxt {
                match irn_rto {
                    Some((lo, hi)) => consider(qp.last_progress + if qp.snd_nxt - qp.snd_una <= 3 { lo } else { hi }),
                    None => consider(qp.last_progress + self.cfg.gbn_timeout),
                }
            }
        }
        self.timer = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: f64 = 100e9;

    /// The recent QPs in front of the search find what the search finds,
    /// for hot, cold and absent QP numbers.
    #[test]
    fn recent_qps_give_what_the_search_gives() {
        let mut rand = crate::test_rand::below(11);
        let keys: Vec<u32> = (0..300u32).map(|k| k * 3 + 1).collect();
        let mut recent = RecentQps::default();
        for _ in 0..100_000 {
            // Mostly a few hot QPs, now and then any number, present or not.
            let q = if rand(4) == 0 { rand(1000) as u32 } else { keys[rand(6) as usize * 7] };
            let want = find_sorted(&keys, q);
            let got = recent.get(q).or_else(|| {
                let i = find_sorted(&keys, q)?;
                recent.put(q, i);
                Some(i)
            });
            assert_eq!(got, want, "{q}");
        }
        assert_eq!(RecentQps::default().get(0), None, "an empty entry matches nothing");
    }

    /// The interpolating search finds what a binary search finds, on even,
    /// clustered and tiny key sets, for present and absent keys.
    #[test]
    fn find_sorted_is_a_binary_search() {
        let mut rand = crate::test_rand::below(3);
        let mut sets: Vec<Vec<u32>> = vec![vec![], vec![5], vec![5, 6], vec![1, 1_000_000], (0..100).collect()];
        for _ in 0..40 {
            let n = rand(3000) as usize + 1;
            let spread = [4, 1000, 1 << 30][rand(3) as usize];
            let mut keys: Vec<u32> = (0..n).map(|_| rand(spread) as u32).collect();
            // Clustered: a dense run in a sparse set.
            if rand(2) == 0 {
                keys.extend((0..rand(500) as u32).map(|k| 7_000 + k));
            }
            keys.sort_unstable();
            keys.dedup();
            sets.push(keys);
        }
        for keys in &sets {
            let max = keys.last().map_or(10, |&k| k as u64 + 10);
            let probes: Vec<u32> = keys.iter().copied().chain((0..200).map(|_| rand(max + 1) as u32)).collect();
            for q in probes {
                let want = keys.binary_search(&q).ok();
                assert_eq!(find_sorted(keys, q), want, "{q} in {} keys", keys.len());
            }
        }
    }

    #[test]
    fn a_paced_qp_sends_its_rate_on_average() {
        // 1 058 B frames at 37.3 Gbit/s: 226.91 ns apart, not a whole ns.
        let (len, rate) = (1058usize, 37.3e9);
        let mut carry = 0.0f32;
        let mut t: Nanos = 0;
        for k in 1..=100_000u64 {
            t += pacing_gap(len, rate, &mut carry);
            let exact = k as f64 * len as f64 * 8e9 / rate;
            assert!((t as f64 - exact).abs() < 1.0, "after {k} packets: {t} ns against {exact:.2}");
        }
        // A whole-ns gap stays whole.
        let mut carry = 0.0f32;
        assert_eq!((0..1000).map(|_| pacing_gap(1000, 100e9, &mut carry)).sum::<Nanos>(), 80_000);
    }

    /// Drives one QP's DCQCN state: CNPs at `cnps` (ns), then reads the
    /// state at `at`.
    fn after(cfg: &DcqcnConfig, cnps: &[Nanos], at: Nanos) -> (Dcqcn, f64) {
        let (mut cc, mut rate) = (Dcqcn::new(LINE), LINE);
        for &t in cnps {
            cc.advance(cfg, t, &mut rate, LINE);
            cc.on_cnp(cfg, t, &mut rate);
        }
        cc.advance(cfg, at, &mut rate, LINE);
        (cc, rate)
    }

    #[test]
    fn alpha_follows_the_per_microsecond_update_of_cnp_arrived_bits() {
        let cfg = DcqcnConfig::default();
        let g = cfg.g;
        // First CNP at 0: alpha = 1, its bit cleared (cnp_received_mlx).
        let (cc, rate) = after(&cfg, &[0], 0);
        assert_eq!((cc.alpha, rate), (1.0, LINE), "rate_on_first_cnp 1.0 keeps the rate");
        // Updates at 1, 2 us without CNP: alpha x (1 - g) each.
        let (cc, _) = after(&cfg, &[0], 2_000);
        assert_eq!(cc.alpha, (1.0 - g) * (1.0 - g));
        // A CNP at 2.5 us: the update at 3 us adds g, the one at 4 us decays.
        let a3 = (1.0 - g) * (1.0 - g) * (1.0 - g) + g;
        let (cc, _) = after(&cfg, &[0, 2_500], 3_000);
        assert_eq!(cc.alpha, a3);
        // Two CNPs inside one interval count once.
        let (cc, _) = after(&cfg, &[0, 2_200, 2_700], 3_000);
        assert_eq!(cc.alpha, a3);
        let (cc, _) = after(&cfg, &[0, 2_500], 4_000);
        assert_eq!(cc.alpha, a3 * (1.0 - g));
        // 1000 quiet updates later.
        let (cc, _) = after(&cfg, &[0, 2_500], 1_004_000);
        assert!((cc.alpha - a3 * (1.0 - g).powi(1001)).abs() < 1e-12, "{}", cc.alpha);
    }

    #[test]
    fn a_cut_happens_at_the_decrease_check_after_a_cnp_with_that_moments_alpha() {
        let cfg = DcqcnConfig::default();
        let g = cfg.g;
        // First CNP at 0: the check at 4 us + 1 ns cuts with alpha after four
        // quiet updates.
        let (_, rate) = after(&cfg, &[0], 4_000);
        assert_eq!(rate, LINE, "not before the check");
        let (cc, rate) = after(&cfg, &[0], 4_001);
        let a4 = (1.0 - g).powi(4);
        assert_eq!(rate, LINE * (1.0 - a4 / 2.0));
        assert_eq!((cc.stage, cc.target), (0, LINE));
        // No CNP since: the next checks do nothing.
        let (_, r2) = after(&cfg, &[0], 200_000);
        assert_eq!(r2, rate);
    }

    #[test]
    fn the_target_rate_is_kept_across_consecutive_cuts_unless_clamped() {
        // CNPs every 3 us for 40 us: a cut at every 4 us check.
        let cnps: Vec<Nanos> = (0..14).map(|k| k * 3_000).collect();
        let cfg = DcqcnConfig::default();
        let (cc, rate) = after(&cfg, &cnps, 41_000);
        assert!(rate < 0.5 * LINE, "{rate}");
        assert_eq!(cc.target, LINE, "CLAMP_TARGET_RATE 0: stage 0 keeps the target");
        let clamped = DcqcnConfig { clamp_target_rate: true, ..cfg };
        let (cc2, rate2) = after(&clamped, &cnps, 41_000);
        assert_eq!(rate2, rate, "the cuts are the same");
        assert!(cc2.target < LINE && cc2.target > rate2, "clamped to the rate before the last cut: {}", cc2.target);
    }

    #[test]
    fn increases_follow_the_timer_stages_from_the_last_cut() {
        let cfg = DcqcnConfig::default();
        let (_, cut) = after(&cfg, &[0], 4_001);
        let t0 = 4_001;
        // Stage 0 (fast recovery): halfway to the target.
        let (cc, r1) = after(&cfg, &[0], t0 + 300_000);
        assert_eq!(r1, (cut + LINE) / 2.0);
        assert_eq!(cc.stage, 1);
        // Stage 1 (active increase): target + rai, capped at the line rate.
        let (cc, r2) = after(&cfg, &[0], t0 + 600_000);
        assert_eq!((cc.target, r2), (LINE, (r1 + LINE) / 2.0));
        // A CNP after an increase: the cut clamps the target (stage != 0).
        let (cc, r3) = after(&cfg, &[0, t0 + 650_000], t0 + 654_000);
        assert_eq!(cc.target, r2, "stage 2 at the cut: the target becomes the rate");
        assert!(r3 < r2);
        assert_eq!(cc.stage, 0);
    }
}
