//! The traffic manager: per-port queues, the shared buffer, the scheduler,
//! ECN marking and PFC accounting (docs/ARCHITECTURE.md#the-tofino2-model, "Traffic manager").
//!
//! Invariants:
//! - every queued packet's cells are counted once in the shared buffer, in
//!   its queue, and (if it came from a front-panel port) in the counter of
//!   its ingress port and ingress CoS used for PFC; dequeue and drop release
//!   all three
//!   (with [`TmConfig::held_outside_pfc`], a packet enqueued into a queue the
//!   pipeline paused enters the ingress counter only when that queue
//!   resumes, and is released from it only if it entered);
//! - strict priority between priority levels (7 highest), deficit weighted
//!   round robin between queues of one level;
//! - a queue paused by the pipeline (Tofino2 advanced flow control) still
//!   releases up to `pause_leak_packets` of the packets it held when paused
//!   (already in the dequeue pipeline), then nothing until resumed;
//! - a queue whose PFC class was paused by a received pause frame is not
//!   served until the pause expires or is cancelled, unless the optional
//!   PFC watchdog ([`PfcWatchdog`]) declared a storm on that port and
//!   priority: then its pauses are ignored (forward) or its packets
//!   dropped (drop), counted per queue;
//! - PFC accounting and pause generation follow the packet's **ingress
//!   CoS** ([`Arrival::cos`]: the priority it arrived with), whatever queue
//!   the pipeline put it in; the queue's own `pfc_class` only says which
//!   received pauses stop that queue. A Tofino keeps the two apart the same
//!   way: `ig_intr_md_for_tm.ingress_cos` picks the packet's PPG, whose
//!   counters assert PFC (open-p4studio `traffic_mgr_ppg_intf.h`,
//!   `bf_tm_ppg_icos_mapping_set`), while a queue's PFC priority is a
//!   separate mapping for received pauses (`traffic_mgr_q_intf.h`,
//!   `bf_tm_q_pfc_cos_mapping_set`). A program that moves traffic into
//!   queues of another class (ConWeave's reorder queues) therefore still
//!   pauses the right priority upstream;
//! - lossless classes (PFC enabled) are never dropped by the egress dynamic
//!   threshold, only when the whole buffer is full (counted separately);
//! - a queue given a guaranteed minimum ([`TrafficManager::set_guaranteed_min`],
//!   Tofino's per-queue `gmin` from the MIN pool, open-p4studio
//!   `traffic_mgr_q_intf.h`, `bf_tm_q_guaranteed_min_limit_set`) admits a
//!   packet that fits in what is left of it without any shared-pool check:
//!   those cells come from the MIN pool, outside the shared buffer, and
//!   return to it at dequeue. weft gives one only to the recirculation
//!   port's queue (the programs' timer packets), so a full shared buffer
//!   cannot drop a timer;
//! - ECN (RED: Kmin, Kmax, Pmax) is decided at dequeue on the queue depth
//!   including the departing packet.
//!
//! With [`BufferModel::Ns3`] the admission, PFC and ECN rules are instead
//! those of the ConWeave authors' ns-3 switch (github
//! conweave-project/conweave-ns3, src/point-to-point/model/switch-mmu.cc,
//! `SwitchMmu` in dynamic-threshold mode, and switch-node.cc, `SwitchNode`),
//! so that weft can be calibrated against that simulator:
//! - ingress accounting in bytes per (ingress port, class) and per ingress
//!   port, with a pool limit of buffer − Σ per-port headroom − ports × 8 MTU
//!   (`InitSwitch`: `m_buffer_cell_limit_sp`), headroom per port
//!   2 × rate × delay + 2 MTU (network-load-balance.cc, `ConfigHdrm`), MTU
//!   = 1048 B (switch-mmu.h); control traffic (the control queue, their
//!   queue 0) is not accounted (`DoSwitchSend`, `SwitchNotifyDequeue`);
//! - XOFF when a class holds more than 2 MTU (`m_pg_min_cell +
//!   m_port_min_cell`) plus α_in × (pool limit − pool use), or the headroom
//!   of the arriving packet's class is in use (`GetPauseClasses`); every
//!   class of the ingress port is checked on *every* admitted packet and a
//!   pause frame sent for each over it (`CheckAndSendPfc`), never
//!   refreshed by a timer, so an upstream port whose pause expires sends
//!   again until the next arrival renews it;
//! - XON, only while the last pause sent has not expired, when the class is
//!   below α_in × (pool limit − pool use − 16) over its 2 MTU and no
//!   headroom is in use (`GetResumeClasses`): checked at the dequeue of a
//!   packet of that port and class (`CheckAndSendResume`) and, for every
//!   paused class of the port, at each admitted arrival on it after its
//!   pauses (`CheckAndSendPfc`'s second loop: a class that other ports'
//!   departures brought under the threshold resumes at the next arrival);
//!   after the pause expired no XON is sent;
//! - ingress drop only when the pool is exhausted and the class's headroom
//!   too (`CheckIngressAdmission`); egress drop (for every class, lossless
//!   ones included) when a queue's bytes beyond its 1 MTU + 1 B minimum
//!   exceed egress α × (buffer − ports × 8 MTU − egress shared use)
//!   (`CheckEgressAdmission`, `UpdateEgressAdmission`);
//! - RED on the queue's shared bytes after the departing packet left, i.e.
//!   the depth without it minus the 1049 B minimum (`SwitchNotifyDequeue`
//!   calls `RemoveFromEgressAdmission` before `ShouldSendCN`);
//! - no cut-through: every packet is admitted, queued and dequeued, as in
//!   ns-3 (it makes no timing difference, only the accounting);
//! - bytes, not cells: the configured cell size is replaced by 1 B;
//! - packets that arrive for a queue the pipeline paused (ConWeave's reorder
//!   queues) are held outside the buffer, with no admission check and no
//!   count of any kind, until the queue resumes; then each is admitted in
//!   order as a new arrival (and may be dropped or cause a pause): the
//!   authors hold them in VOQs outside the MMU (conweave-routing.cc,
//!   `RouteInput` returns before `DoSwitchSend`; conweave-voq.cc,
//!   `FlushAllImmediately` sends each through `DoSwitchSend`). Held packets
//!   therefore never cause PFC or fill the buffer there.
//!
//! One simplification: ns-3 keeps priority group 1 in a second pool; weft
//! puts all classes in one pool (weft's RoCE runs use one data class, so
//! both are the same there).
//!
//! No I/O, no clock: `now` is passed in; randomness comes from the caller's RNG.

use crate::depth_histogram::DepthHistogram;
use bytes::BytesMut;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use weft_wire::ids::{PortId, QueueId};
use weft_wire::time::Nanos;

/// RED-style ECN marking profile of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RedConfig {
    /// At or below this depth (bytes) nothing is marked.
    pub kmin_bytes: u64,
    /// At or above this depth every ECT packet is marked (with
    /// `kmin_bytes == kmax_bytes`, a step: every packet above it).
    pub kmax_bytes: u64,
    /// Marking probability reached at Kmax.
    pub pmax: f64,
}

impl RedConfig {
    /// DCQCN defaults of the ConWeave setup at 100 Gbit/s: 100 KB, 400 KB, 0.2.
    pub fn dcqcn_100g() -> Self {
        RedConfig { kmin_bytes: 100_000, kmax_bytes: 400_000, pmax: 0.2 }
    }
    /// Marking probability at `depth` bytes.
    pub fn probability(&self, depth: u64) -> f64 {
        if depth <= self.kmin_bytes {
            0.0
        } else if depth >= self.kmax_bytes {
            1.0
        } else {
            self.pmax * (depth - self.kmin_bytes) as f64 / (self.kmax_bytes - self.kmin_bytes) as f64
        }
    }
}

/// Configuration of one queue of every port.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// Strict priority level, 0 (lowest) to 7 (highest).
    pub priority: u8,
    /// DWRR weight within the level.
    pub weight: u32,
    /// ECN marking, if any.
    pub ecn: Option<RedConfig>,
    /// 802.1Qbb priority class of the queue.
    pub pfc_class: u8,
}

/// PFC (802.1Qbb) configuration of a switch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PfcConfig {
    /// Bit i: class i is lossless.
    pub classes: u8,
    /// XOFF when an ingress port/class holds more than `alpha_in` x free
    /// shared buffer (dynamic threshold).
    pub alpha_in: f64,
    /// Resume hysteresis: XON below XOFF threshold minus this many bytes.
    pub xon_delta_bytes: u64,
    /// Pause time carried by each pause frame, in quanta (512 bit times).
    pub pause_quanta: u16,
    /// When set, a port's pause frames carry the quanta nearest to this many
    /// ns at the port's rate instead of `pause_quanta` (a pause of a fixed
    /// duration, as the ConWeave authors' simulator sends: 5 us at any rate).
    #[serde(default)]
    pub pause_ns: Option<u64>,
}

impl PfcConfig {
    /// The quanta a pause frame carries on a port of `rate`.
    pub fn pause_quanta_at(&self, rate: weft_wire::time::BitRate) -> u16 {
        self.pause_ns.map_or(self.pause_quanta, |ns| weft_wire::pfc::ns_to_quanta(ns, rate))
    }
}

impl Default for PfcConfig {
    fn default() -> Self {
        // 8.1: alpha_in = 1/16; pause ~5 us at 100G (977 quanta x 5.12 ns).
        PfcConfig { classes: 0xff, alpha_in: 1.0 / 16.0, xon_delta_bytes: 2 * 1500, pause_quanta: 977, pause_ns: None }
    }
}

/// A PFC watchdog, as data-center switches offer (SONiC's "PFC Watchdog
/// Design": detection, mitigation by drop or forward, restoration; Junos'
/// `pfc-watchdog` defaults to 200 ms of detection and of recovery): a
/// port whose priority has been held by received pauses without a break
/// for `detect_ns` is in a *storm* for that priority, which lasts until no
/// pause for it has arrived for `restore_ns`. During a storm the port
/// ignores that priority's pauses and sends (`Forward`), or drops the
/// packets it holds and receives for it (`Drop`). A pause that never ends
/// (a deadlock, a peer that pauses forever) thus stops spreading, at the
/// price of the priority's losslessness. Off unless configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PfcWatchdog {
    /// Continuous pause that declares a storm, ns.
    pub detect_ns: Nanos,
    /// Time without a received pause that ends a storm, ns.
    pub restore_ns: Nanos,
    /// What the port does during a storm.
    pub action: PfcWatchdogAction,
}

/// What a port does for a priority in a PFC storm ([`PfcWatchdog`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PfcWatchdogAction {
    /// Drop the priority's queued and arriving packets (SONiC's default).
    #[default]
    Drop,
    /// Ignore the priority's pauses and send.
    Forward,
}

impl std::str::FromStr for PfcWatchdogAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "drop" => Ok(PfcWatchdogAction::Drop),
            "forward" => Ok(PfcWatchdogAction::Forward),
            _ => Err(format!("unknown PFC watchdog action `{s}` (drop, forward)")),
        }
    }
}

/// The authors' ns-3 MTU constant (`SwitchMmu::MTU`, "1000 + headers").
pub const NS3_MTU: u64 = 1048;

/// Whose buffer-sharing, PFC and ECN rules the traffic manager follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BufferModel {
    /// weft's Tofino2 model (the module doc's invariants).
    #[default]
    Tofino,
    /// The ConWeave authors' ns-3 switch MMU (module doc).
    Ns3(Ns3Mmu),
}

/// Which buffer model a switch asks for (`--set tm.buffer=tofino|ns3`);
/// the engine turns it into a [`BufferModel`] with the port parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BufferRules {
    /// [`BufferModel::Tofino`].
    #[default]
    Tofino,
    /// [`BufferModel::Ns3`].
    Ns3,
}

impl std::str::FromStr for BufferRules {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tofino" => Ok(BufferRules::Tofino),
            "ns3" => Ok(BufferRules::Ns3),
            _ => Err(format!("unknown buffer model `{s}` (tofino, ns3)")),
        }
    }
}

/// Parameters of [`BufferModel::Ns3`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ns3Mmu {
    /// PFC headroom of each port in bytes, 2 × rate × delay + 2 MTU (a port
    /// not listed gets none).
    pub headroom_bytes: Vec<u64>,
}

impl Ns3Mmu {
    /// The headroom the authors configure for a port of `rate_bps` on a link
    /// of `delay_ns` (network-load-balance.cc: `rate * delay / 8 / 1e9 * 2 +
    /// 2 * MTU`, integer arithmetic).
    pub fn headroom_for(rate_bps: u64, delay_ns: u64) -> u64 {
        (rate_bps as u128 * delay_ns as u128 / 8 / 1_000_000_000) as u64 * 2 + 2 * NS3_MTU
    }
}

/// Configuration of the traffic manager.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TmConfig {
    /// Queues per port (1..=128).
    pub queues_per_port: u8,
    /// Shared buffer in bytes.
    pub buffer_bytes: u64,
    /// Bytes per buffer cell.
    pub cell_bytes: u32,
    /// Egress dynamic threshold: a queue may hold `alpha` x free buffer.
    pub egress_alpha: f64,
    /// Per-queue configuration (index = queue id).
    pub queues: Vec<QueueConfig>,
    /// PFC, if enabled.
    pub pfc: Option<PfcConfig>,
    /// Packets that still leave a queue after the pipeline paused it.
    pub pause_leak_packets: u32,
    /// Bytes of DWRR quantum per unit of weight.
    pub dwrr_quantum_bytes: u32,
    /// Buffer-sharing, PFC and ECN rules.
    #[serde(default)]
    pub buffer_model: BufferModel,
    /// Packets enqueued into a queue the pipeline has paused (ConWeave's
    /// reorder queues) enter the ingress PFC accounting only when the queue
    /// resumes, as the ConWeave authors' VOQs do (`--set tm.held_pfc=outside`).
    /// Off by default: in a traffic manager a buffered packet counts against
    /// its ingress port whichever queue holds it. The ns-3 model always keeps
    /// them outside.
    #[serde(default)]
    pub held_outside_pfc: bool,
    /// Drop-tail limit of every data queue in packets (ns-2's DropTail
    /// queue `limit`, e.g. the LBSP paper's 250): a packet that finds its
    /// queue this full is dropped and counted with the threshold drops.
    /// `None`: only the buffer rules.
    #[serde(default)]
    pub queue_limit_packets: Option<u32>,
    /// The PFC watchdog, if any (reacts to pauses this switch receives).
    #[serde(default)]
    pub pfc_watchdog: Option<PfcWatchdog>,
}

/// Traffic classes from this one up (DSCP CS6, CS7) go to the control
/// queue, whatever the configuration.
pub const CONTROL_TRAFFIC_CLASS: u8 = 6;

impl TmConfig {
    /// Queue used for control traffic (ACK/NAK/CNP/PFC/scheme control): the last one.
    pub fn control_queue(&self) -> QueueId {
        QueueId(self.queues_per_port - 1)
    }
    /// The PFC class of `queue` in the standard layout of `queues_per_port`
    /// queues: q (at most 6) for a data queue, 7 for the control queue.
    pub fn standard_pfc_class(queues_per_port: u8, queue: QueueId) -> u8 {
        if queue.0 >= queues_per_port.saturating_sub(1) {
            7
        } else {
            queue.0.min(6)
        }
    }
    /// Default layout: queue q < 8 carries traffic class q (PFC class q),
    /// queues 0..n-1 at priority 0 with weight 1 (DWRR), the last queue is the
    /// control queue at priority 7 without ECN; data queues mark with `ecn`.
    pub fn standard(queues_per_port: u8, buffer_bytes: u64, cell_bytes: u32, ecn: Option<RedConfig>) -> Self {
        let n = queues_per_port.clamp(2, 128);
        let queues = (0..n)
            .map(|q| {
                let pfc_class = Self::standard_pfc_class(n, QueueId(q));
                if q == n - 1 {
                    QueueConfig { priority: 7, weight: 1, ecn: None, pfc_class }
                } else {
                    QueueConfig { priority: 0, weight: 1, ecn, pfc_class }
                }
            })
            .collect();
        TmConfig {
            queues_per_port: n,
            buffer_bytes,
            cell_bytes: cell_bytes.max(1),
            egress_alpha: 1.0,
            queues,
            pfc: None,
            pause_leak_packets: 2,
            dwrr_quantum_bytes: 1536,
            buffer_model: BufferModel::Tofino,
            held_outside_pfc: false,
            queue_limit_packets: None,
            pfc_watchdog: None,
        }
    }
}

/// Where a packet entered the switch, for the ingress (PFC) accounting: a
/// front-panel port and the packet's ingress CoS, the priority class its
/// sender transmitted it with (Tofino's `ingress_cos`, which selects the
/// PPG). Packets the switch made itself (generated, recirculated, emitted
/// by the program) have none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Front-panel port it came in on.
    pub port: PortId,
    /// Priority class (0..=7) it is accounted to and paused by upstream.
    pub cos: u8,
}

/// A packet in a queue, with the intrinsic metadata the TM keeps: 64
/// bytes, on a cache line of its own in its queue's ring.
#[derive(Debug)]
#[repr(align(64))]
pub struct QueuedPacket {
    /// The frame.
    pub frame: BytesMut,
    /// Port it came in on (`None` for generated/recirculated/CPU packets).
    pub ingress_port: Option<PortId>,
    /// Ingress CoS: the PFC class of its ingress accounting
    /// ([`Arrival::cos`]).
    pub pfc_class: u8,
    /// Enqueue time.
    pub enq_ts: Nanos,
    /// Queue depth (bytes) at enqueue, before this packet.
    pub enq_depth: u64,
    /// Metadata bridged through the traffic manager with the packet (as a
    /// Tofino carries bridged metadata from ingress to egress); 0 unless
    /// the packet was enqueued with [`TrafficManager::enqueue_bridged`].
    pub bridged: u32,
    /// Buffer cells held.
    cells: u32,
    /// Accounted by the ns-3 buffer model (not control traffic).
    mmu_counted: bool,
    /// [`TmConfig::held_outside_pfc`]: held by a pipeline pause, so not yet
    /// in the ingress (PFC) accounting.
    ingress_pending: bool,
    /// Its cells come from the queue's guaranteed minimum (MIN pool), not
    /// from the shared buffer.
    from_min: bool,
}

/// ns-3 model: a packet held for a pipeline-paused queue outside the buffer
/// (the authors' ConWeave VOQ), admitted when the queue resumes.
#[derive(Debug)]
struct VoqPacket {
    frame: BytesMut,
    arrival: Option<Arrival>,
    bridged: u32,
}

/// Why a packet was not enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DropReason {
    /// The queue is over its dynamic share.
    DynamicThreshold,
    /// The shared buffer is full.
    BufferFull,
    /// The queue holds its configured number of packets.
    QueueLimit,
    /// Its priority is in a PFC storm and the watchdog drops
    /// ([`PfcWatchdogAction::Drop`]).
    PfcWatchdog,
}

/// Per-queue counters.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct QueueStats {
    /// Packets enqueued.
    pub enq_packets: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Drops by the dynamic threshold (or the static queue limit,
    /// [`TmConfig::queue_limit_packets`]).
    pub drops_threshold: u64,
    /// Drops because the buffer was full.
    pub drops_buffer_full: u64,
    /// Packets marked CE.
    pub ecn_marks: u64,
    /// Largest depth seen, bytes.
    pub max_depth_bytes: u64,
    /// PFC storms the watchdog declared while the queue held packets
    /// ([`PfcWatchdog`]; written only when non-zero, as the next two).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pfc_watchdog_storms: u64,
    /// Packets the PFC watchdog dropped (queued or arriving in a storm).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pfc_watchdog_drops: u64,
    /// Packets sent in a storm although their priority was paused.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pfc_watchdog_forwarded: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One queue in two cache lines (the struct starts a line), the state a
/// packet's enqueue and dequeue touch: the first holds the packet ring and
/// the depth and buffer counts both read, the second the round-robin
/// deficit, the counters each packet moves, the pipeline pause's leak and
/// the bytes of the ns-3 VOQ (which the depth snapshots read). What a
/// packet rarely touches is in the port's [`RareQueueState`]s.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct Queue {
    pkts: VecDeque<QueuedPacket>,
    bytes: u64,
    cells: u64,
    /// Cells of the guaranteed minimum in use.
    min_used_cells: u64,
    /// Guaranteed minimum in cells ([`TrafficManager::set_guaranteed_min`]).
    gmin_cells: u64,
    deficit: i64,
    stats: PacketCounters,
    leak: u32,
    /// ns-3 model only: bytes of the VOQ ([`RareQueueState::voq`]).
    voq_bytes: u64,
}

/// The counters of [`QueueStats`] that every packet moves.
#[derive(Debug, Clone, Copy, Default)]
struct PacketCounters {
    enq_packets: u64,
    tx_packets: u64,
    tx_bytes: u64,
    ecn_marks: u64,
    max_depth_bytes: u64,
}

/// What a queue's packets rarely touch: the drop counters, the PFC
/// watchdog's, and the ns-3 model's VOQ. A port's are grown to a queue on
/// its first write ([`grown_to`]); the queues past their end have none of
/// it (zero counts, an empty VOQ).
#[derive(Debug, Default)]
struct RareQueueState {
    drops_threshold: u64,
    drops_buffer_full: u64,
    pfc_watchdog_storms: u64,
    pfc_watchdog_drops: u64,
    pfc_watchdog_forwarded: u64,
    /// ns-3 model only: packets held while the pipeline paused the queue,
    /// outside every buffer count until [`TrafficManager::resume_queue`].
    voq: VecDeque<VoqPacket>,
}

/// `v[i]`, with `v` grown by defaults to hold it if need be (a port's
/// per-queue state made on a queue's first use).
#[inline]
fn grown_to<T: Default>(v: &mut Vec<T>, i: usize) -> &mut T {
    if i >= v.len() {
        grow_to(v, i);
    }
    &mut v[i]
}

/// [`grown_to`]'s growth, out of the hot path.
#[cold]
#[inline(never)]
fn grow_to<T: Default>(v: &mut Vec<T>, i: usize) {
    v.resize_with(i + 1, T::default);
}

/// One egress port. The first cache line holds what every enqueue,
/// dequeue and cut-through check reads (the queue masks, the port's bytes,
/// the end of its latest PFC pause), the second where its queues are.
#[derive(Debug)]
#[repr(C, align(64))]
struct PortState {
    nonempty: u128,
    /// Queues paused by the pipeline with no leak left.
    held: u128,
    /// Queues paused by the pipeline (in the port's state, not the
    /// queue's, so that the cut-through check reads one line).
    paused: u128,
    bytes: u64,
    /// Latest of `pfc_paused_until` (no class is paused from then on).
    pfc_any_until: Nanos,
    queues: Vec<Queue>,
    /// Per queue: depths seen by buffered packets (apart from `queues` to
    /// keep the scheduler's per-queue state compact). Grown to a queue on
    /// the first packet it buffers: the queues past its end have seen none
    /// (most of a port's 32 never buffer one, and a histogram takes three
    /// cache lines).
    depth_hists: Vec<DepthHistogram>,
    /// Per queue, grown on a first write: what its packets rarely touch.
    rare: Vec<RareQueueState>,
    rr: [u8; 8],
    /// PFC watchdog: classes in a storm, as last updated at a dequeue.
    storm: u8,
    /// Classes whose `pfc_paused_until` is not 0 (a pause received and not
    /// resumed, expired or not): the only ones a pause check reads.
    pfc_classes: u8,
    /// Per PFC class: paused by a received pause frame until this time.
    pfc_paused_until: [Nanos; 8],
    /// Per PFC class: when its current unbroken pause began.
    pfc_since: [Nanos; 8],
    /// Per PFC class: the latest pause received.
    pfc_last_rx: [Nanos; 8],
}

/// Why [`TrafficManager::pass_through`] did not pass a packet.
#[derive(Debug)]
pub enum PassThrough {
    /// The port has packets or the queue may not send: buffer it.
    Queued(BytesMut),
    /// The buffer is full: dropped (counted).
    Dropped(BytesMut),
}

/// What [`TrafficManager::arrive_idle`] did with a packet it took.
#[derive(Debug)]
pub enum IdleArrival {
    /// Accounted as queued: for [`TrafficManager::depart_idle`] at once.
    Accepted(IdlePacket),
    /// Dropped by the admission checks (counted).
    Dropped(DropReason, BytesMut),
}

/// A packet accounted as queued by [`TrafficManager::arrive_idle`] and
/// not stored: it must go to [`TrafficManager::depart_idle`].
#[derive(Debug)]
#[must_use = "an accepted packet counts as queued until it departs"]
pub struct IdlePacket {
    pkt: QueuedPacket,
    queue: u8,
}

/// A PFC transition the switch must announce upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcTransition {
    /// Ingress port to send the frame out of.
    pub port: PortId,
    /// Priority class.
    pub class: u8,
    /// `true` = XOFF (pause), `false` = XON (resume).
    pub pause: bool,
}

/// A dequeued packet and whether RED selected it for CE marking.
#[derive(Debug)]
pub struct Dequeued {
    /// The packet.
    pub pkt: QueuedPacket,
    /// Queue it left.
    pub queue: QueueId,
    /// RED decided to mark (the switch marks only ECT packets).
    pub mark_ce: bool,
    /// Queue depth in bytes when it left (including itself).
    pub deq_depth: u64,
}

/// The ingress (PFC) accounting of one port, in one struct so that an
/// arrival's checks read two or three of its cache lines, not a line of
/// each of six arrays: the cells it holds per ingress CoS (Tofino's PPG
/// counters) and the classes it paused upstream, and with
/// [`BufferModel::Ns3`] its bytes per class and in all, its headroom and
/// the pauses it sent (names after switch-mmu.cc). Lines: the cells; the
/// ns-3 bytes per class; the headroom in use (read when a class holds more
/// than its guarantee); the pauses sent (read for a class paused); the
/// XOFF bits, the port's bytes and its headroom.
#[derive(Debug, Clone, Default)]
#[repr(C, align(64))]
struct IngressPort {
    /// Cells held per ingress CoS.
    cells: [u64; 8],
    /// `m_usedIngressPGBytes` per class.
    pg: [u64; 8],
    /// `m_usedIngressPGHeadroomBytes` per class.
    headroom_used: [u64; 8],
    /// When the last pause sent out of the port for each class expires (`paused`).
    pause_until: [Nanos; 8],
    /// Classes with XOFF asserted (a pause sent upstream and not resumed).
    xoff: u8,
    /// `m_usedIngressPortBytes`.
    port_bytes: u64,
    /// `m_pg_hdrm_limit`.
    headroom_limit: u64,
}

/// Accounting of [`BufferModel::Ns3`] (names after switch-mmu.cc): the
/// pool's use and limits (each port's own counts are in its
/// [`IngressPort`]).
#[derive(Debug)]
#[repr(C)]
struct Ns3Accounting {
    /// `m_usedIngressSPBytes` (one pool).
    ingress_used: u64,
    /// `m_usedEgressSPBytes`: Σ queue bytes beyond each queue's minimum.
    egress_used: u64,
    /// `m_buffer_cell_limit_sp`: buffer − Σ headroom − ports × 8 MTU.
    ingress_limit: u64,
    /// `m_op_buffer_shared_limit_cell`: buffer − ports × 8 MTU.
    egress_limit: u64,
}

/// The set bits of `mask`, lowest first (the classes of a class mask, in
/// class order).
#[inline(always)]
fn bits(mut mask: u8) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let c = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            c
        })
    })
}

/// `m_q_min_cell`: bytes of a queue not counted as shared.
const NS3_Q_MIN: u64 = NS3_MTU + 1;

impl Ns3Accounting {
    /// The accounting of a switch whose ports' ingress accounting is
    /// `ingress` (one per port); writes each port's headroom limit there.
    fn new(m: &Ns3Mmu, buffer: u64, ingress: &mut [IngressPort]) -> Self {
        for (i, ip) in ingress.iter_mut().enumerate() {
            ip.headroom_limit = m.headroom_bytes.get(i).copied().unwrap_or(0);
        }
        let reserve = ingress.len() as u64 * 8 * NS3_MTU;
        Ns3Accounting {
            ingress_limit: buffer.saturating_sub(ingress.iter().map(|ip| ip.headroom_limit).sum::<u64>() + reserve),
            egress_limit: buffer.saturating_sub(reserve),
            ingress_used: 0,
            egress_used: 0,
        }
    }

    fn shared(queue_bytes: u64) -> u64 {
        queue_bytes.saturating_sub(NS3_Q_MIN)
    }

    /// `CheckEgressAdmission`: whether a queue now holding `queue_bytes` may take `len` more.
    fn egress_admits(&self, queue_bytes: u64, len: u64, alpha: f64) -> bool {
        let shared = Self::shared(queue_bytes);
        self.egress_used + len <= self.egress_limit && (shared + len) as f64 <= alpha * (self.egress_limit as f64 - self.egress_used as f64)
    }

    /// `CheckIngressAdmission` for a packet from port `ip`.
    fn ingress_admits(&self, ip: &IngressPort, class: usize, len: u64) -> bool {
        let beyond_min = ip.pg[class] + len > NS3_MTU && ip.port_bytes + len > NS3_MTU;
        !(beyond_min && self.ingress_used > self.ingress_limit && ip.headroom_used[class] + len > ip.headroom_limit)
    }

    /// `UpdateIngressAdmission`.
    fn admit_ingress(&mut self, ip: &mut IngressPort, class: usize, len: u64) {
        self.ingress_used += len;
        ip.port_bytes += len;
        ip.pg[class] += len;
        if self.ingress_used > self.ingress_limit {
            ip.headroom_used[class] += len;
        }
    }

    /// `RemoveFromIngressAdmission`.
    fn release_ingress(&mut self, ip: &mut IngressPort, class: usize, len: u64) {
        self.ingress_used = self.ingress_used.saturating_sub(len);
        ip.port_bytes = ip.port_bytes.saturating_sub(len);
        ip.pg[class] = ip.pg[class].saturating_sub(len);
        ip.headroom_used[class] = ip.headroom_used[class].saturating_sub(len);
    }

    /// Egress shared use after a queue went from `before` to `after` bytes.
    fn egress_change(&mut self, before: u64, after: u64) {
        self.egress_used = (self.egress_used + Self::shared(after)).saturating_sub(Self::shared(before));
    }

    /// `GetPauseClasses` (dynamic threshold) for `class` of `port`, on the
    /// arrival of a packet of `arriving` (whose headroom use pauses every
    /// class of the port that holds more than its guarantee).
    fn should_pause(&self, ip: &IngressPort, class: usize, arriving: usize, alpha: f64) -> bool {
        let pg = ip.pg[class];
        if pg <= 2 * NS3_MTU {
            return false;
        }
        (pg - 2 * NS3_MTU) as f64 > alpha * (self.ingress_limit as f64 - self.ingress_used as f64) || ip.headroom_used[arriving] != 0
    }

    /// For a class of `port` (accounted in `ip`) whose XOFF bit is set:
    /// clears it if the last pause expired upstream (ns-3's `paused` is
    /// off: no XON), or if the class may resume, then with an XON in `pfc`.
    fn check_resume(&self, ip: &mut IngressPort, port: PortId, class: u8, now: Nanos, alpha: f64, pfc: &mut Vec<PfcTransition>) {
        let k = (class & 7) as usize;
        if ip.pause_until[k] <= now {
            ip.xoff &= !(1 << k);
        } else if self.may_resume(ip, k, alpha) {
            ip.xoff &= !(1 << k);
            ip.pause_until[k] = 0;
            pfc.push(PfcTransition { port, class, pause: false });
        }
    }

    /// `GetResumeClasses` (dynamic threshold) for one class.
    fn may_resume(&self, ip: &IngressPort, class: usize, alpha: f64) -> bool {
        let over = ip.pg[class] as f64 - 2.0 * NS3_MTU as f64;
        over < alpha * (self.ingress_limit as f64 - self.ingress_used as f64 - 16.0) && ip.headroom_used[class] == 0
    }
}

/// The traffic manager of one switch, laid out by what a packet reads
/// (the struct starts a cache line): the first line holds what every
/// enqueue and dequeue reads (the ports, the buffer's use, the per-packet
/// settings copied out of [`TmConfig`]), the second the egress threshold
/// and the ingress (PFC) accounting, the third the ns-3 model's pool
/// counters (unread without it); the configuration itself, read when the
/// traffic manager is reconfigured or a pause changes, comes last. (Read
/// from the configuration, a packet's settings were spread over four lines
/// behind the masks and the ns-3 accounting, each missed on most packets:
/// a switch's state leaves the first-level cache between two of its
/// packets.)
#[derive(Debug)]
#[repr(C, align(64))]
pub struct TrafficManager {
    ports: Vec<PortState>,
    used_cells: u64,
    total_cells: u64,
    /// `cfg.cell_bytes`.
    cell_bytes: u32,
    /// `cfg.queues_per_port`.
    queues_per_port: u8,
    /// The lossless PFC classes (`cfg.pfc`'s; none without PFC).
    lossless: u8,
    /// `cfg.held_outside_pfc`.
    held_outside_pfc: bool,
    /// Whether `cfg.pfc_watchdog` is set.
    watchdog: bool,
    /// `cfg.queues`.
    queues: Box<[QueueConfig]>,
    /// `cfg.egress_alpha`.
    egress_alpha: f64,
    /// `cfg.pfc`'s α_in (0 without PFC).
    alpha_in: f64,
    /// Per port: its ingress (PFC) accounting.
    ingress: Vec<IngressPort>,
    /// `cfg.queue_limit_packets`.
    queue_limit_packets: Option<u32>,
    max_used_cells: u64,
    /// Priority levels that have queues (bit l: level l).
    levels: u8,
    ns3: Option<Ns3Accounting>,
    level_mask: [u128; 8],
    class_mask: [u128; 8],
    cfg: TmConfig,
}

impl TrafficManager {
    /// A traffic manager for `ports` ports.
    pub fn new(mut cfg: TmConfig, ports: usize) -> Self {
        if matches!(cfg.buffer_model, BufferModel::Ns3(_)) {
            // The authors' MMU counts bytes: no cell rounding (with 176 B
            // cells the whole buffer would fill before their byte pool).
            cfg.cell_bytes = 1;
        }
        let n = cfg.queues_per_port as usize;
        let mut level_mask = [0u128; 8];
        let mut class_mask = [0u128; 8];
        for (q, qc) in cfg.queues.iter().enumerate().take(n) {
            level_mask[(qc.priority & 7) as usize] |= 1u128 << q;
            class_mask[(qc.pfc_class & 7) as usize] |= 1u128 << q;
        }
        let total_cells = cfg.buffer_bytes / cfg.cell_bytes as u64;
        let levels = (0..8).filter(|&l| level_mask[l] != 0).fold(0u8, |m, l| m | 1 << l);
        let mut ingress = vec![IngressPort::default(); ports];
        let ns3 = match &cfg.buffer_model {
            BufferModel::Tofino => None,
            BufferModel::Ns3(m) => Some(Ns3Accounting::new(m, cfg.buffer_bytes, &mut ingress)),
        };
        TrafficManager {
            cell_bytes: cfg.cell_bytes,
            queues_per_port: cfg.queues_per_port,
            lossless: cfg.pfc.map_or(0, |p| p.classes),
            held_outside_pfc: cfg.held_outside_pfc,
            watchdog: cfg.pfc_watchdog.is_some(),
            queues: cfg.queues.clone().into_boxed_slice(),
            egress_alpha: cfg.egress_alpha,
            alpha_in: cfg.pfc.map_or(0.0, |p| p.alpha_in),
            queue_limit_packets: cfg.queue_limit_packets,
            levels,
            ports: (0..ports)
                .map(|_| PortState {
                    queues: (0..n).map(|_| Queue::default()).collect(),
                    rare: Vec::new(),
                    nonempty: 0,
                    held: 0,
                    paused: 0,
                    pfc_paused_until: [0; 8],
                    pfc_classes: 0,
                    pfc_any_until: 0,
                    pfc_since: [0; 8],
                    pfc_last_rx: [0; 8],
                    storm: 0,
                    rr: [0; 8],
                    bytes: 0,
                    depth_hists: Vec::new(),
                })
                .collect(),
            level_mask,
            class_mask,
            total_cells,
            used_cells: 0,
            ingress,
            max_used_cells: 0,
            ns3,
            cfg,
        }
    }

    /// Whether [`TrafficManager::pass_through`] can do anything but hand
    /// the frame back: not with the ns-3 buffer model (every packet is
    /// queued, as in ns-3) unless a PFC watchdog may drop it there.
    #[inline(always)]
    pub fn may_pass_through(&self) -> bool {
        self.ns3.is_none() || self.watchdog
    }

    /// The configuration.
    pub fn config(&self) -> &TmConfig {
        &self.cfg
    }

    fn cells_of(&self, len: usize) -> u32 {
        (len as u64).div_ceil(self.cell_bytes as u64) as u32
    }

    fn is_lossless(&self, class: u8) -> bool {
        self.lossless & (1 << (class & 7)) != 0
    }

    /// The cells an ingress port's class may hold before XOFF, with
    /// `used` cells of `total` in use (the settings passed in, so that it
    /// can be asked while a port's accounting is borrowed).
    fn xoff_threshold_cells(lossless: u8, alpha_in: f64, total: u64, used: u64) -> u64 {
        // (Asked only for a lossless class, so with PFC configured.)
        if lossless == 0 {
            return u64::MAX;
        }
        ((total - used.min(total)) as f64 * alpha_in) as u64
    }

    /// Admits `frame` to `queue` of `port`. On success PFC transitions (XOFF)
    /// may be appended to `pfc`. `queue` is clamped to the port's queues.
    /// A packet from `ingress_port` is accounted to the queue's own PFC
    /// class (a packet whose priority selected its queue); use
    /// [`TrafficManager::enqueue_bridged`] with an [`Arrival`] when the
    /// pipeline chose a queue of another class.
    pub fn enqueue(
        &mut self,
        now: Nanos,
        port: PortId,
        queue: QueueId,
        frame: BytesMut,
        ingress_port: Option<PortId>,
        pfc: &mut Vec<PfcTransition>,
    ) -> Result<(), (DropReason, BytesMut)> {
        let qi = (queue.0 as usize).min(self.queues_per_port as usize - 1);
        let arrival = ingress_port.map(|port| Arrival { port, cos: self.queues[qi].pfc_class });
        self.enqueue_bridged(now, port, queue, frame, arrival, 0, pfc)
    }

    /// [`TrafficManager::enqueue`] for a packet that arrived as `arrival`
    /// says (its ingress accounting, whatever `queue` is), with metadata
    /// that travels with the packet and comes back in [`Dequeued::pkt`]
    /// (`bridged`): a dropped packet takes its metadata with it.
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue_bridged(
        &mut self,
        now: Nanos,
        port: PortId,
        queue: QueueId,
        frame: BytesMut,
        arrival: Option<Arrival>,
        bridged: u32,
        pfc: &mut Vec<PfcTransition>,
    ) -> Result<(), (DropReason, BytesMut)> {
        let qi = (queue.0 as usize).min(self.queues_per_port as usize - 1);
        let control = qi == self.queues_per_port as usize - 1;
        let p = &mut self.ports[port.index()];
        if self.ns3.is_some() && p.paused & (1u128 << qi) != 0 && !control {
            // conweave-routing.cc `RouteInput` returns before `DoSwitchSend`:
            // the VOQ holds the packet outside the MMU, no check, no count.
            p.queues[qi].voq_bytes += frame.len() as u64;
            grown_to(&mut p.rare, qi).voq.push_back(VoqPacket { frame, arrival, bridged });
            return Ok(());
        }
        let pkt = self.account_arrival(now, port, qi, frame, arrival, bridged, pfc)?;
        self.ports[port.index()].queues[qi].pkts.push_back(pkt);
        Ok(())
    }

    /// Everything [`TrafficManager::enqueue_bridged`] does to a packet
    /// that is not held in a VOQ but storing it: the watchdog, the
    /// admission checks, the counters, the buffer and ingress (PFC)
    /// accounting with its transitions. The packet returned counts as
    /// queued in queue `qi` of `port` (its bytes, its cells, the port's
    /// non-empty bit) until it is stored or departs.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn account_arrival(
        &mut self,
        now: Nanos,
        port: PortId,
        qi: usize,
        frame: BytesMut,
        arrival: Option<Arrival>,
        bridged: u32,
        pfc: &mut Vec<PfcTransition>,
    ) -> Result<QueuedPacket, (DropReason, BytesMut)> {
        let class = arrival.map_or_else(|| self.queues[qi].pfc_class, |a| a.cos & 7);
        let ingress_port = arrival.map(|a| a.port);
        if self.watchdog_drops(now, port, qi) {
            grown_to(&mut self.ports[port.index()].rare, qi).pfc_watchdog_drops += 1;
            return Err((DropReason::PfcWatchdog, frame));
        }
        let cells = self.cells_of(frame.len());
        let lossless = self.is_lossless(class);
        let free = self.total_cells.saturating_sub(self.used_cells);
        let control = qi == self.queues_per_port as usize - 1;
        let len = frame.len() as u64;
        let p = &mut self.ports[port.index()];
        let queue_paused = p.paused & (1u128 << qi) != 0;
        let q = &mut p.queues[qi];
        // Within the queue's guaranteed minimum: the MIN pool, no shared check.
        let from_min = q.min_used_cells + cells as u64 <= q.gmin_cells;
        if !from_min && cells as u64 > free {
            grown_to(&mut p.rare, qi).drops_buffer_full += 1;
            return Err((DropReason::BufferFull, frame));
        }
        if !control && self.queue_limit_packets.is_some_and(|l| q.pkts.len() >= l as usize) {
            grown_to(&mut p.rare, qi).drops_threshold += 1;
            return Err((DropReason::QueueLimit, frame));
        }
        let mmu_counted = self.ns3.is_some() && !control && !from_min;
        let ingress_pending = !control && queue_paused && self.held_outside_pfc;
        if let Some(n3) = &self.ns3 {
            if !control && !n3.egress_admits(q.bytes, len, self.egress_alpha) {
                grown_to(&mut p.rare, qi).drops_threshold += 1;
                return Err((DropReason::DynamicThreshold, frame));
            }
            if let Some(ip) = ingress_port.filter(|_| !control) {
                if !n3.ingress_admits(&self.ingress[ip.index()], (class & 7) as usize, len) {
                    grown_to(&mut p.rare, qi).drops_buffer_full += 1;
                    return Err((DropReason::BufferFull, frame));
                }
            }
        } else if !lossless && !from_min && (q.cells + cells as u64) as f64 > self.egress_alpha * free as f64 {
            grown_to(&mut p.rare, qi).drops_threshold += 1;
            return Err((DropReason::DynamicThreshold, frame));
        }
        let enq_depth = q.bytes;
        grown_to(&mut p.depth_hists, qi).record(enq_depth);
        q.bytes += len;
        q.cells += cells as u64;
        q.stats.enq_packets += 1;
        q.stats.max_depth_bytes = q.stats.max_depth_bytes.max(q.bytes);
        let depth_after = q.bytes;
        p.bytes += len;
        p.nonempty |= 1u128 << qi;
        let pkt = QueuedPacket {
            frame,
            ingress_port,
            pfc_class: class,
            enq_ts: now,
            enq_depth,
            bridged,
            cells,
            mmu_counted,
            ingress_pending,
            from_min,
        };
        if from_min {
            q.min_used_cells += cells as u64;
        } else {
            self.used_cells += cells as u64;
            self.max_used_cells = self.max_used_cells.max(self.used_cells);
        }
        // (Held outside the PFC accounting: counted at resume_queue.)
        if let Some(ip) = ingress_port.filter(|_| !ingress_pending) {
            let (mask, alpha_in, total, used) = (self.lossless, self.alpha_in, self.total_cells, self.used_cells);
            let acc = &mut self.ingress[ip.index()];
            let c = &mut acc.cells[class as usize];
            *c += cells as u64;
            let held = *c;
            match &mut self.ns3 {
                None => {
                    if lossless && acc.xoff & (1 << class) == 0 && held > Self::xoff_threshold_cells(mask, alpha_in, total, used) {
                        acc.xoff |= 1 << class;
                        pfc.push(PfcTransition { port: ip, class, pause: true });
                    }
                }
                Some(n3) if mmu_counted => {
                    let k = (class & 7) as usize;
                    n3.admit_ingress(acc, k, len);
                    // switch-node.cc `CheckAndSendPfc`, on every counted
                    // arrival: a pause for each class of the ingress port
                    // over the threshold (`GetPauseClasses`), then a resume
                    // for each class paused before that is now under it
                    // (`GetResumeClasses`).
                    // (A class paused by this arrival is not checked again:
                    // its resume threshold lies below its pause threshold,
                    // except when another class's headroom paused it.)
                    let (alpha, classes) = (self.alpha_in, self.lossless);
                    let mut paused_now = 0u8;
                    for c in bits(classes).map(|c| c as u8) {
                        if n3.should_pause(acc, c as usize, k, alpha) {
                            acc.xoff |= 1 << c;
                            paused_now |= 1 << c;
                            pfc.push(PfcTransition { port: ip, class: c, pause: true });
                        }
                    }
                    // (In class order, over the set bits only: a check
                    // clears at most its own class's bit.)
                    let mut paused_before = acc.xoff & !paused_now;
                    while paused_before != 0 {
                        let c = paused_before.trailing_zeros() as u8;
                        paused_before &= paused_before - 1;
                        n3.check_resume(acc, ip, c, now, alpha, pfc);
                    }
                }
                Some(_) => {}
            }
        }
        if let Some(n3) = self.ns3.as_mut().filter(|_| mmu_counted) {
            n3.egress_change(enq_depth, depth_after);
        }
        Ok(pkt)
    }

    /// With the ns-3 buffer model (which queues every packet), the first
    /// half of a packet that finds `port` idle: if the port holds no packet
    /// at all, the queue may send (not paused by the pipeline, no received
    /// pause on the port) and there is no PFC watchdog, the packet is
    /// accounted exactly as [`TrafficManager::enqueue_bridged`] would
    /// (counters, buffer and ingress accounting, pause transitions in
    /// `pfc`) but not stored: the caller sends the transitions and then
    /// hands the packet to [`TrafficManager::depart_idle`] at the same
    /// instant, with nothing else asked of this port in between, which
    /// does what [`TrafficManager::dequeue`] would do with the one packet
    /// of the port. The pair changes the state as enqueue and dequeue do
    /// (tested), without the queue's ring and the scheduler. Otherwise the
    /// frame is handed back for [`TrafficManager::enqueue_bridged`].
    #[allow(clippy::too_many_arguments)]
    pub fn arrive_idle(
        &mut self,
        now: Nanos,
        port: PortId,
        queue: QueueId,
        frame: BytesMut,
        arrival: Option<Arrival>,
        bridged: u32,
        pfc: &mut Vec<PfcTransition>,
    ) -> Result<IdleArrival, BytesMut> {
        let qi = (queue.0 as usize).min(self.queues_per_port as usize - 1);
        match self.ports.get(port.index()) {
            Some(p)
                if self.ns3.is_some()
                    && !self.watchdog
                    && p.nonempty == 0
                    && (p.paused | p.held) & (1u128 << qi) == 0
                    && p.pfc_any_until <= now => {}
            _ => return Err(frame),
        }
        Ok(match self.account_arrival(now, port, qi, frame, arrival, bridged, pfc) {
            Ok(pkt) => IdleArrival::Accepted(IdlePacket { pkt, queue: qi as u8 }),
            Err((reason, frame)) => IdleArrival::Dropped(reason, frame),
        })
    }

    /// The second half of [`TrafficManager::arrive_idle`]: the packet
    /// leaves `port` as [`TrafficManager::dequeue`] would have taken it
    /// (the only packet of the port, its queue chosen at once).
    pub fn depart_idle(
        &mut self,
        now: Nanos,
        port: PortId,
        idle: IdlePacket,
        rng: &mut impl Rng,
        pfc: &mut Vec<PfcTransition>,
    ) -> Dequeued {
        let qi = idle.queue as usize;
        let deq_depth = self.ports[port.index()].queues[qi].bytes;
        self.account_departure(now, port, qi, idle.pkt, deq_depth, rng, pfc)
    }

    /// Cut-through: if `port` holds no packet at all and `queue` may send
    /// (not paused by the pipeline or by PFC), the packet is accounted as
    /// enqueued and immediately dequeued (counters, max depth, the RED
    /// decision at its own depth) and returned without being buffered; its
    /// cells are never held, so it cannot trigger PFC. Otherwise the frame
    /// is handed back for [`TrafficManager::enqueue`]. The packet returned
    /// carries `arrival` and `bridged` as [`TrafficManager::enqueue_bridged`]
    /// would have queued it with (built once: a caller that wrote them into
    /// the returned packet field by field and then moved it read them back
    /// before the CPU could forward its stores, a stall on every packet).
    #[allow(clippy::too_many_arguments)]
    pub fn pass_through(
        &mut self,
        now: Nanos,
        port: PortId,
        queue: QueueId,
        frame: BytesMut,
        arrival: Option<Arrival>,
        bridged: u32,
        rng: &mut impl Rng,
    ) -> Result<Dequeued, PassThrough> {
        let qi = (queue.0 as usize).min(self.queues_per_port as usize - 1);
        let class = self.queues[qi].pfc_class as usize;
        let cells = self.cells_of(frame.len()) as u64;
        let free = self.total_cells.saturating_sub(self.used_cells);
        let storms = match self.ports.get(port.index()) {
            Some(p) if self.watchdog => Self::storms(self.cfg.pfc_watchdog.as_ref(), p, now),
            _ => 0,
        };
        if storms & (1 << class) != 0 && self.ports[port.index()].pfc_paused_until[class] > now {
            // Its priority is paused, in a storm: dropped, or sent anyway.
            let stats = grown_to(&mut self.ports[port.index()].rare, qi);
            if self.cfg.pfc_watchdog.is_some_and(|w| w.action == PfcWatchdogAction::Drop) {
                stats.pfc_watchdog_drops += 1;
                return Err(PassThrough::Dropped(frame));
            }
            stats.pfc_watchdog_forwarded += 1;
        }
        let Some(p) = self.ports.get_mut(port.index()) else { return Err(PassThrough::Queued(frame)) };
        if self.ns3.is_some()
            || p.nonempty != 0
            || p.paused & (1u128 << qi) != 0
            // The latest pause first: it is on the line already read.
            || (p.pfc_any_until > now && p.pfc_paused_until[class] > now && storms & (1 << class) == 0)
        {
            return Err(PassThrough::Queued(frame));
        }
        if cells > free {
            grown_to(&mut p.rare, qi).drops_buffer_full += 1;
            return Err(PassThrough::Dropped(frame));
        }
        let q = &mut p.queues[qi];
        let len = frame.len() as u64;
        q.stats.enq_packets += 1;
        q.stats.tx_packets += 1;
        q.stats.tx_bytes += len;
        q.stats.max_depth_bytes = q.stats.max_depth_bytes.max(len);
        let mark_ce = match self.queues[qi].ecn {
            Some(red) => {
                let pr = red.probability(len);
                pr >= 1.0 || (pr > 0.0 && rng.random::<f64>() < pr)
            }
            None => false,
        };
        let pkt = QueuedPacket {
            frame,
            ingress_port: arrival.map(|a| a.port),
            pfc_class: arrival.map_or(class as u8, |a| a.cos & 7),
            enq_ts: now,
            enq_depth: 0,
            bridged,
            cells: cells as u32,
            mmu_counted: false,
            ingress_pending: false,
            from_min: false,
        };
        Ok(Dequeued { pkt, queue: QueueId(qi as u8), mark_ce, deq_depth: len })
    }

    /// Picks the next packet of `port` by strict priority + DWRR, honouring
    /// pipeline pauses and received PFC pauses. XON transitions may be
    /// appended to `pfc`.
    #[must_use = "a dequeued packet must be sent or counted as dropped"]
    pub fn dequeue(&mut self, now: Nanos, port: PortId, rng: &mut impl Rng, pfc: &mut Vec<PfcTransition>) -> Option<Dequeued> {
        if self.watchdog {
            self.update_storms(now, port, pfc);
        }
        let p = &mut self.ports[port.index()];
        let mut eligible = p.nonempty & !p.held;
        if eligible == 0 {
            return None;
        }
        let mut blocked_by_pause = 0;
        if p.pfc_any_until > now {
            blocked_by_pause = Self::pfc_blocked(&self.class_mask, p, now, 0);
            eligible &= !Self::pfc_blocked(&self.class_mask, p, now, p.storm);
        }
        if eligible == 0 {
            return None;
        }
        let mut chosen = None;
        let mut levels = self.levels;
        while levels != 0 {
            let level = 7 - levels.leading_zeros() as usize;
            levels &= !(1 << level);
            let m = eligible & self.level_mask[level];
            if m == 0 {
                continue;
            }
            if m.count_ones() == 1 {
                chosen = Some(m.trailing_zeros() as usize);
                break;
            }
            // DWRR among the queues of this level.
            let n = self.queues_per_port as u32;
            let mut at = p.rr[level] as u32 % n;
            loop {
                let hi = m & (u128::MAX << at);
                let q = if hi != 0 { hi.trailing_zeros() } else { m.trailing_zeros() };
                let qi = q as usize;
                let head = p.queues[qi].pkts.front().map(|h| h.frame.len() as i64).unwrap_or(0);
                if p.queues[qi].deficit >= head {
                    p.queues[qi].deficit -= head;
                    p.rr[level] = q as u8;
                    chosen = Some(qi);
                    break;
                }
                p.queues[qi].deficit += (self.queues[qi].weight.max(1) * self.cfg.dwrr_quantum_bytes) as i64;
                at = (q + 1) % n;
            }
            break;
        }
        let qi = chosen?;
        if blocked_by_pause & (1u128 << qi) != 0 {
            // Sent in a storm although its priority is paused.
            grown_to(&mut p.rare, qi).pfc_watchdog_forwarded += 1;
        }
        let q = &mut p.queues[qi];
        let deq_depth = q.bytes;
        let pkt = q.pkts.pop_front()?;
        // The next packets' slots were written when they were queued and
        // are cold by now: start loading them for this queue's next
        // dequeues (one packet time is too short a warning on its own).
        for next in q.pkts.iter().take(2) {
            weft_wire::hint::prefetch(next);
        }
        Some(self.account_departure(now, port, qi, pkt, deq_depth, rng, pfc))
    }

    /// Everything [`TrafficManager::dequeue`] does to the packet it took
    /// out of queue `qi` of `port` (which held `deq_depth` bytes with it):
    /// the counters, the queue's and port's bytes, the scheduler's state
    /// of a queue left empty, the leak of a paused queue, the RED decision,
    /// the buffer and ingress accounting with its transitions.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn account_departure(
        &mut self,
        now: Nanos,
        port: PortId,
        qi: usize,
        pkt: QueuedPacket,
        deq_depth: u64,
        rng: &mut impl Rng,
        pfc: &mut Vec<PfcTransition>,
    ) -> Dequeued {
        let p = &mut self.ports[port.index()];
        let q = &mut p.queues[qi];
        let len = pkt.frame.len() as u64;
        q.bytes -= len;
        q.cells -= pkt.cells as u64;
        if pkt.from_min {
            q.min_used_cells -= pkt.cells as u64;
        }
        q.stats.tx_packets += 1;
        q.stats.tx_bytes += len;
        p.bytes -= len;
        if q.pkts.is_empty() {
            p.nonempty &= !(1u128 << qi);
            q.deficit = 0;
            let lvl = (self.queues[qi].priority & 7) as usize;
            p.rr[lvl] = ((qi + 1) % self.queues_per_port as usize) as u8;
        }
        if p.paused & (1u128 << qi) != 0 {
            q.leak = q.leak.saturating_sub(1);
            if q.leak == 0 {
                p.held |= 1u128 << qi;
            }
        }
        let red_depth = match self.ns3.as_mut().filter(|_| pkt.mmu_counted) {
            Some(n3) => {
                // SwitchNotifyDequeue: removed first, then ShouldSendCN on the shared bytes.
                n3.egress_change(deq_depth, deq_depth - len);
                Ns3Accounting::shared(deq_depth - len)
            }
            None => deq_depth,
        };
        let mark_ce = match self.queues[qi].ecn {
            Some(red) => {
                let pr = red.probability(red_depth);
                pr >= 1.0 || (pr > 0.0 && rng.random::<f64>() < pr)
            }
            None => false,
        };
        self.release(now, &pkt, pfc);
        Dequeued { pkt, queue: QueueId(qi as u8), mark_ce, deq_depth }
    }

    /// Queues blocked by received PFC pauses at `now`, but for the classes
    /// in `storms` (the watchdog ignores or drops their pauses).
    fn pfc_blocked(class_mask: &[u128; 8], p: &PortState, now: Nanos, storms: u8) -> u128 {
        bits(p.pfc_classes & !storms).filter(|&c| p.pfc_paused_until[c] > now).fold(0, |m, c| m | class_mask[c])
    }

    /// The PFC classes of `p` in a storm at `now` ([`PfcWatchdog`]): paused
    /// without a break for the detection time, or declared a storm before
    /// and paused again within the restoration time.
    fn storms(wd: Option<&PfcWatchdog>, p: &PortState, now: Nanos) -> u8 {
        let Some(wd) = wd else { return 0 };
        bits(p.pfc_classes | p.storm)
            .filter(|&c| {
                let detected = p.pfc_paused_until[c] > now && now.saturating_sub(p.pfc_since[c]) >= wd.detect_ns;
                let lasting = p.storm & (1 << c) != 0 && now.saturating_sub(p.pfc_last_rx[c]) < wd.restore_ns;
                detected || lasting
            })
            .fold(0, |m, c| m | 1 << c)
    }

    /// Whether the watchdog drops what arrives for queue `qi` of `port` now.
    fn watchdog_drops(&self, now: Nanos, port: PortId, qi: usize) -> bool {
        if !self.watchdog {
            return false;
        }
        let (Some(wd), Some(p)) = (self.cfg.pfc_watchdog, self.ports.get(port.index())) else { return false };
        wd.action == PfcWatchdogAction::Drop && Self::storms(Some(&wd), p, now) & (1 << (self.queues[qi].pfc_class & 7)) != 0
    }

    /// Declares and ends storms on `port` at `now`; a new storm is counted
    /// on each queue of its class that holds packets and, with the drop
    /// action, those packets are dropped.
    fn update_storms(&mut self, now: Nanos, port: PortId, pfc: &mut Vec<PfcTransition>) {
        let p = &self.ports[port.index()];
        if p.storm == 0 && p.pfc_any_until <= now {
            return;
        }
        let storms = Self::storms(self.cfg.pfc_watchdog.as_ref(), p, now);
        let new = storms & !p.storm;
        self.ports[port.index()].storm = storms;
        let drop = self.cfg.pfc_watchdog.is_some_and(|w| w.action == PfcWatchdogAction::Drop);
        for c in (0..8).filter(|c| (new | if drop { storms } else { 0 }) & (1 << c) != 0) {
            let mut m = self.class_mask[c] & self.ports[port.index()].nonempty;
            while m != 0 {
                let qi = m.trailing_zeros() as usize;
                m &= m - 1;
                if new & (1 << c) != 0 {
                    grown_to(&mut self.ports[port.index()].rare, qi).pfc_watchdog_storms += 1;
                }
                if drop {
                    let n = self.drain_queue(now, port, qi, pfc);
                    if n > 0 {
                        grown_to(&mut self.ports[port.index()].rare, qi).pfc_watchdog_drops += n;
                    }
                }
            }
        }
    }

    /// Whether `port` has packets it could send now.
    pub fn has_eligible(&self, now: Nanos, port: PortId) -> bool {
        let p = &self.ports[port.index()];
        let e = p.nonempty & !p.held;
        if e == 0 || p.pfc_any_until <= now {
            return e != 0;
        }
        e & !Self::pfc_blocked(&self.class_mask, p, now, Self::storms(self.cfg.pfc_watchdog.as_ref(), p, now)) != 0
    }

    /// Earliest time a received PFC pause on `port` ends while packets wait
    /// behind it (or, with a PFC watchdog, the pause turns into a storm).
    pub fn pfc_wakeup(&self, now: Nanos, port: PortId) -> Option<Nanos> {
        let p = &self.ports[port.index()];
        if p.pfc_any_until <= now {
            return None;
        }
        let waiting = p.nonempty & !p.held;
        let detect = self.cfg.pfc_watchdog.map(|w| w.detect_ns);
        bits(p.pfc_classes)
            .filter(|&c| p.pfc_paused_until[c] > now && waiting & self.class_mask[c] != 0)
            .map(|c| match detect {
                Some(d) => p.pfc_paused_until[c].min(p.pfc_since[c].saturating_add(d).max(now + 1)),
                None => p.pfc_paused_until[c],
            })
            .min()
    }

    /// Applies a pause received at `now` (`until` > now) or a resume
    /// (`until` = 0) for `class` on `port`.
    pub fn pfc_receive(&mut self, now: Nanos, port: PortId, class: u8, until: Nanos) {
        let p = &mut self.ports[port.index()];
        let c = (class & 7) as usize;
        if let Some(wd) = self.cfg.pfc_watchdog {
            // A storm ended once no pause came for the restoration time,
            // whether or not a dequeue noticed it.
            if now.saturating_sub(p.pfc_last_rx[c]) >= wd.restore_ns {
                p.storm &= !(1 << c);
            }
        }
        if until > now {
            if p.pfc_paused_until[c] <= now {
                p.pfc_since[c] = now;
            }
            p.pfc_last_rx[c] = now;
        }
        p.pfc_paused_until[c] = until;
        if until == 0 {
            p.pfc_classes &= !(1 << c);
        } else {
            p.pfc_classes |= 1 << c;
        }
        p.pfc_any_until = p.pfc_paused_until.iter().copied().max().unwrap_or(0);
    }

    /// Whether `class` on egress `port` is paused by a received PFC frame.
    pub fn pfc_paused(&self, now: Nanos, port: PortId, class: u8) -> bool {
        self.ports[port.index()].pfc_paused_until[(class & 7) as usize] > now
    }

    /// Whether XOFF is currently asserted for `class` toward ingress `port`.
    pub fn xoff_asserted(&self, port: PortId, class: u8) -> bool {
        self.ingress[port.index()].xoff & (1 << (class & 7)) != 0
    }

    /// Pauses a queue from the data plane (advanced flow control, credit 1).
    /// Up to `pause_leak_packets` of the packets already queued still leave
    /// (they were in the dequeue pipeline); pausing an empty queue holds
    /// everything that arrives later.
    pub fn pause_queue(&mut self, port: PortId, queue: QueueId) {
        let leak = self.cfg.pause_leak_packets;
        if let Some(p) = self.ports.get_mut(port.index()) {
            if let Some(q) = p.queues.get_mut(queue.0 as usize) {
                if p.paused & (1u128 << queue.0) == 0 {
                    let leak = leak.min(q.pkts.len() as u32);
                    p.paused |= 1u128 << queue.0;
                    q.leak = leak;
                    if leak == 0 {
                        p.held |= 1u128 << queue.0;
                    }
                }
            }
        }
    }

    /// Resumes a queue from the data plane (credit 0). With
    /// [`TmConfig::held_outside_pfc`] the packets it held enter the ingress
    /// (PFC) accounting now; the pause check waits for the next arrival.
    /// With the ns-3 model the packets its VOQ held are admitted now, in
    /// order, each through the full admission (the authors' flush,
    /// `ConWeaveVOQ::FlushAllImmediately` → `DoSwitchSend`, which may drop
    /// and may pause); PFC transitions are appended to `pfc` and the number
    /// dropped is returned.
    #[must_use = "the packets dropped at resume must be counted"]
    pub fn resume_queue(&mut self, now: Nanos, port: PortId, queue: QueueId, pfc: &mut Vec<PfcTransition>) -> u64 {
        let Some(p) = self.ports.get_mut(port.index()) else { return 0 };
        let Some(q) = p.queues.get_mut(queue.0 as usize) else { return 0 };
        p.paused &= !(1u128 << queue.0);
        q.leak = 0;
        q.voq_bytes = 0;
        let voq = p.rare.get_mut(queue.0 as usize).map(|r| std::mem::take(&mut r.voq)).unwrap_or_default();
        for pkt in q.pkts.iter_mut().filter(|k| k.ingress_pending) {
            pkt.ingress_pending = false;
            if let Some(ip) = pkt.ingress_port {
                self.ingress[ip.index()].cells[pkt.pfc_class as usize] += pkt.cells as u64;
            }
        }
        self.ports[port.index()].held &= !(1u128 << queue.0);
        let mut dropped = 0;
        for v in voq {
            if self.enqueue_bridged(now, port, queue, v.frame, v.arrival, v.bridged, pfc).is_err() {
                dropped += 1;
            }
        }
        dropped
    }

    /// Gives `queue` of `port` a guaranteed minimum of `cells` from the MIN
    /// pool (Tofino's `bf_tm_q_guaranteed_min_limit_set`): a packet that
    /// fits in what is left of it is admitted whatever the shared buffer
    /// holds, and its cells are not counted in the shared buffer.
    pub fn set_guaranteed_min(&mut self, port: PortId, queue: QueueId, cells: u32) {
        if let Some(q) = self.ports.get_mut(port.index()).and_then(|p| p.queues.get_mut(queue.0 as usize)) {
            q.gmin_cells = cells as u64;
        }
    }

    /// Whether the pipeline paused `queue` of `port`.
    pub fn is_paused(&self, port: PortId, queue: QueueId) -> bool {
        self.ports.get(port.index()).is_some_and(|p| (queue.0 as usize) < p.queues.len() && p.paused & (1u128 << queue.0) != 0)
    }

    /// Depth of one queue in bytes (with the ns-3 model, including what its
    /// VOQ holds while the pipeline pauses it).
    pub fn queue_bytes(&self, port: PortId, queue: QueueId) -> u64 {
        self.ports.get(port.index()).and_then(|p| p.queues.get(queue.0 as usize)).map_or(0, |q| q.bytes + q.voq_bytes)
    }

    /// Depth of one queue in cells (what the hardware reports).
    pub fn queue_cells(&self, port: PortId, queue: QueueId) -> u64 {
        self.ports.get(port.index()).and_then(|p| p.queues.get(queue.0 as usize)).map_or(0, |q| q.cells)
    }

    /// Every queue's depth of `port` at once, in bytes and cells (as
    /// [`TrafficManager::queue_bytes`] and [`TrafficManager::queue_cells`]
    /// for each queue), and the port's total bytes: what an ingress
    /// snapshot copies. Only the queues that hold packets are read (and,
    /// with the ns-3 model, those with a VOQ).
    pub fn snapshot_port(&self, port: PortId, bytes: &mut Vec<u64>, cells: &mut Vec<u64>) -> u64 {
        let n = self.queues_per_port as usize;
        bytes.clear();
        bytes.resize(n, 0);
        cells.clear();
        cells.resize(n, 0);
        let Some(p) = self.ports.get(port.index()) else { return 0 };
        if self.ns3.is_some() {
            for (i, q) in p.queues.iter().enumerate().take(n) {
                bytes[i] = q.bytes + q.voq_bytes;
                cells[i] = q.cells;
            }
        } else {
            let mut m = p.nonempty;
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                if let (Some(q), true) = (p.queues.get(i), i < n) {
                    bytes[i] = q.bytes;
                    cells[i] = q.cells;
                }
            }
        }
        p.bytes
    }

    /// Total bytes queued at a port.
    pub fn port_bytes(&self, port: PortId) -> u64 {
        self.ports.get(port.index()).map_or(0, |p| p.bytes)
    }

    /// Packets queued in one queue (with the ns-3 model, including its VOQ).
    pub fn queue_len(&self, port: PortId, queue: QueueId) -> usize {
        let qi = queue.0 as usize;
        self.ports
            .get(port.index())
            .and_then(|p| Some(p.queues.get(qi)?.pkts.len() + p.rare.get(qi).map_or(0, |r| r.voq.len())))
            .unwrap_or(0)
    }

    /// Counters of one queue.
    pub fn queue_stats(&self, port: PortId, queue: QueueId) -> QueueStats {
        let Some(p) = self.ports.get(port.index()) else { return QueueStats::default() };
        let Some(q) = p.queues.get(queue.0 as usize) else { return QueueStats::default() };
        let c = q.stats;
        let mut s = QueueStats {
            enq_packets: c.enq_packets,
            tx_packets: c.tx_packets,
            tx_bytes: c.tx_bytes,
            ecn_marks: c.ecn_marks,
            max_depth_bytes: c.max_depth_bytes,
            ..QueueStats::default()
        };
        if let Some(r) = p.rare.get(queue.0 as usize) {
            s.drops_threshold = r.drops_threshold;
            s.drops_buffer_full = r.drops_buffer_full;
            s.pfc_watchdog_storms = r.pfc_watchdog_storms;
            s.pfc_watchdog_drops = r.pfc_watchdog_drops;
            s.pfc_watchdog_forwarded = r.pfc_watchdog_forwarded;
        }
        s
    }

    /// Depths seen by the packets enqueued to one queue (None: no such
    /// queue). Cut-through packets (which found the port empty) are counted
    /// in the depth-0 bucket from the queue's `enq_packets`, so that the
    /// cut-through path does not touch the histogram.
    pub fn queue_depth_histogram(&self, port: PortId, queue: QueueId) -> Option<DepthHistogram> {
        let p = self.ports.get(port.index())?;
        let q = p.queues.get(queue.0 as usize)?;
        let mut h = p.depth_hists.get(queue.0 as usize).cloned().unwrap_or_default();
        h.counts[0] += q.stats.enq_packets.saturating_sub(h.count());
        Some(h)
    }

    /// Counts a CE mark on a queue (the switch marks only ECT packets).
    pub fn count_mark(&mut self, port: PortId, queue: QueueId) {
        if let Some(q) = self.ports.get_mut(port.index()).and_then(|p| p.queues.get_mut(queue.0 as usize)) {
            q.stats.ecn_marks += 1;
        }
    }

    /// Shared buffer cells in use.
    pub fn used_cells(&self) -> u64 {
        self.used_cells
    }

    /// Largest buffer use seen, bytes.
    pub fn max_used_bytes(&self) -> u64 {
        self.max_used_cells * self.cell_bytes as u64
    }

    /// Buffer capacity in cells.
    pub fn total_cells(&self) -> u64 {
        self.total_cells
    }

    /// Number of ports.
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// Drops every queued packet of a port (link down), returning how many.
    pub fn flush_port(&mut self, now: Nanos, port: PortId, pfc: &mut Vec<PfcTransition>) -> u64 {
        let mut n = 0;
        let nq = self.queues_per_port as usize;
        for qi in 0..nq {
            let p = &mut self.ports[port.index()];
            p.queues[qi].voq_bytes = 0;
            if let Some(r) = p.rare.get_mut(qi) {
                let held = r.voq.len() as u64;
                r.drops_buffer_full += held;
                n += held;
                r.voq.clear();
            }
            let dropped = self.drain_queue(now, port, qi, pfc);
            if dropped > 0 {
                grown_to(&mut self.ports[port.index()].rare, qi).drops_buffer_full += dropped;
            }
            n += dropped;
        }
        n
    }

    /// Removes every packet of queue `qi` of `port` (releasing its buffer
    /// and ingress accounting); returns how many. The caller counts them.
    fn drain_queue(&mut self, now: Nanos, port: PortId, qi: usize, pfc: &mut Vec<PfcTransition>) -> u64 {
        let mut n = 0;
        while let Some(pkt) = self.ports[port.index()].queues[qi].pkts.pop_front() {
            let p = &mut self.ports[port.index()];
            let q = &mut p.queues[qi];
            let len = pkt.frame.len() as u64;
            let before = q.bytes;
            q.bytes -= len;
            q.cells -= pkt.cells as u64;
            if pkt.from_min {
                q.min_used_cells -= pkt.cells as u64;
            }
            p.bytes -= len;
            if let Some(n3) = self.ns3.as_mut().filter(|_| pkt.mmu_counted) {
                n3.egress_change(before, before - len);
            }
            self.release(now, &pkt, pfc);
            n += 1;
        }
        let p = &mut self.ports[port.index()];
        p.nonempty &= !(1u128 << qi);
        p.queues[qi].deficit = 0;
        n
    }

    fn release(&mut self, now: Nanos, pkt: &QueuedPacket, pfc: &mut Vec<PfcTransition>) {
        if !pkt.from_min {
            self.used_cells -= pkt.cells as u64;
        }
        let Some(ip) = pkt.ingress_port else { return };
        if pkt.ingress_pending {
            // Left a paused queue (leak) before the Tofino accounting saw it.
            return;
        }
        let class = pkt.pfc_class;
        let (mask, alpha_in, total, used) = (self.lossless, self.alpha_in, self.total_cells, self.used_cells);
        let acc = &mut self.ingress[ip.index()];
        let c = &mut acc.cells[class as usize];
        *c -= pkt.cells as u64;
        let held = *c;
        match &mut self.ns3 {
            None => {
                if acc.xoff & (1 << class) != 0 {
                    let delta = self.cfg.pfc.map(|p| p.xon_delta_bytes / self.cell_bytes as u64).unwrap_or(0);
                    if held + delta <= Self::xoff_threshold_cells(mask, alpha_in, total, used) || held == 0 {
                        acc.xoff &= !(1 << class);
                        pfc.push(PfcTransition { port: ip, class, pause: false });
                    }
                }
            }
            Some(n3) if pkt.mmu_counted => {
                n3.release_ingress(acc, (class & 7) as usize, pkt.frame.len() as u64);
                if acc.xoff & (1 << (class & 7)) != 0 {
                    n3.check_resume(acc, ip, class, now, alpha_in, pfc);
                }
            }
            Some(_) => {}
        }
    }

    /// Records that a pause for `class` went out of `port` and holds the
    /// peer until `until` (the ns-3 model sends XON only before that).
    pub fn pfc_pause_sent(&mut self, port: PortId, class: u8, until: Nanos) {
        if self.ns3.is_some() {
            if let Some(ip) = self.ingress.get_mut(port.index()) {
                ip.pause_until[(class & 7) as usize] = until;
            }
        }
    }

    /// Whether an asserted XOFF is refreshed by a timer before the peer's
    /// pause expires (weft's model); the ns-3 model renews it only on arrivals.
    pub fn refreshes_pause(&self) -> bool {
        self.ns3.is_none()
    }
}

/// Egress sees the traffic manager's exact depths.
/// Read-only view of queue depths (egress: exact; ingress: a snapshot).
pub trait QueueDepths {
    /// Queue depth in bytes.
    fn queue_bytes(&self, port: PortId, queue: QueueId) -> u64;
    /// Total port depth in bytes.
    fn port_bytes(&self, port: PortId) -> u64;
    /// Queue depth in buffer cells (what the hardware reports).
    fn queue_cells(&self, port: PortId, queue: QueueId) -> u64;
}

impl QueueDepths for TrafficManager {
    fn queue_bytes(&self, port: PortId, queue: QueueId) -> u64 {
        TrafficManager::queue_bytes(self, port, queue)
    }
    fn port_bytes(&self, port: PortId) -> u64 {
        TrafficManager::port_bytes(self, port)
    }
    fn queue_cells(&self, port: PortId, queue: QueueId) -> u64 {
        TrafficManager::queue_cells(self, port, queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// The layout the hot path counts on: a packet's enqueue reads the
    /// first line of its port and of its queue, its queue's second line
    /// (counters) and one ring slot; its depth record one histogram line.
    #[test]
    fn an_enqueue_touches_one_port_line_two_queue_lines_one_slot_one_histogram_line() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<PortState>(), 64);
        assert!(offset_of!(PortState, pfc_any_until) + 8 <= 64);
        assert_eq!(align_of::<Queue>(), 64);
        assert!(offset_of!(Queue, gmin_cells) + 8 <= 64);
        assert_eq!(offset_of!(Queue, deficit), 64);
        let counters = [
            offset_of!(PacketCounters, enq_packets),
            offset_of!(PacketCounters, tx_packets),
            offset_of!(PacketCounters, tx_bytes),
            offset_of!(PacketCounters, ecn_marks),
            offset_of!(PacketCounters, max_depth_bytes),
        ];
        assert!(counters.iter().all(|&o| offset_of!(Queue, stats) + o + 8 <= 128), "{counters:?}");
        // Two lines in all: 32 queues a port are 8 KiB, not 16.
        assert_eq!(size_of::<Queue>(), 128);
        assert_eq!((size_of::<QueuedPacket>(), align_of::<QueuedPacket>()), (64, 64));
        assert_eq!(align_of::<DepthHistogram>(), 64);
        assert!(offset_of!(DepthHistogram, counts) + 7 * 8 <= 64);
    }

    /// What every packet reads of the traffic manager itself is on its
    /// first line, the egress threshold and the ingress accounting on its
    /// second, the ns-3 model's pool counters on its third.
    #[test]
    fn a_packet_reads_the_first_two_lines_of_the_traffic_manager() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<TrafficManager>(), 64);
        let first = [
            offset_of!(TrafficManager, ports),
            offset_of!(TrafficManager, used_cells),
            offset_of!(TrafficManager, total_cells),
            offset_of!(TrafficManager, cell_bytes),
            offset_of!(TrafficManager, queues_per_port),
            offset_of!(TrafficManager, lossless),
            offset_of!(TrafficManager, held_outside_pfc),
            offset_of!(TrafficManager, watchdog),
            offset_of!(TrafficManager, queues),
        ];
        assert!(first.iter().all(|&o| o < 64) && offset_of!(TrafficManager, queues) + 16 <= 64, "{first:?}");
        let second = [
            offset_of!(TrafficManager, egress_alpha),
            offset_of!(TrafficManager, alpha_in),
            offset_of!(TrafficManager, ingress),
            offset_of!(TrafficManager, queue_limit_packets),
            offset_of!(TrafficManager, max_used_cells),
            offset_of!(TrafficManager, levels),
        ];
        assert!(second.iter().all(|&o| (64..128).contains(&o)), "{second:?}");
        assert_eq!(offset_of!(TrafficManager, ns3), 128);
        assert!(size_of::<Option<Ns3Accounting>>() <= 64);
        // A port's accounting: the cells, the ns-3 bytes per class, its
        // headroom and pauses sent each on a line; the XOFF bits, bytes and
        // headroom limit on the last.
        assert_eq!(align_of::<IngressPort>(), 64);
        assert_eq!(
            [offset_of!(IngressPort, pg), offset_of!(IngressPort, headroom_used), offset_of!(IngressPort, pause_until)],
            [64, 128, 192]
        );
        assert!(offset_of!(IngressPort, headroom_limit) + 8 <= 5 * 64 && offset_of!(IngressPort, xoff) >= 4 * 64);
    }

    fn frame(len: usize) -> BytesMut {
        BytesMut::zeroed(len)
    }

    fn tm(cfg: TmConfig) -> TrafficManager {
        TrafficManager::new(cfg, 4)
    }

    #[test]
    fn depth_histogram_counts_buffered_depths_and_cut_through_as_empty() {
        let mut t = tm(TmConfig::standard(8, 10_000_000, 80, None));
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        // Two packets cut through the idle port.
        for _ in 0..2 {
            assert!(t.pass_through(0, PortId(0), QueueId(0), frame(1000), None, 0, &mut rng).is_ok());
        }
        // Three are buffered behind each other: they find 0, 1000, 2000 B.
        for _ in 0..3 {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc).unwrap();
        }
        let h = t.queue_depth_histogram(PortId(0), QueueId(0)).unwrap();
        assert_eq!(h.counts[0], 3, "2 cut through + 1 into an empty queue");
        assert_eq!(h.counts[1], 1, "1000 B <= 1 KiB");
        assert_eq!(h.counts[2], 1, "2000 B <= 2 KiB");
        assert_eq!((h.count(), h.sum), (5, 3000));
        assert!(t.queue_depth_histogram(PortId(9), QueueId(0)).is_none());
    }

    /// A port's histograms are grown to a queue on its first buffered
    /// packet: queues that never buffered one (past the end, or below a
    /// queue that did) read as empty, or as their cut-through packets.
    #[test]
    fn depth_histograms_of_queues_that_never_buffered_are_empty() {
        let mut t = tm(TmConfig::standard(8, 10_000_000, 80, None));
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        assert!(t.pass_through(0, PortId(1), QueueId(2), frame(500), None, 0, &mut rng).is_ok());
        for q in 0..8 {
            let h = t.queue_depth_histogram(PortId(1), QueueId(q)).unwrap();
            assert_eq!((h.count(), h.sum, h.counts[0]), (u64::from(q == 2), 0, u64::from(q == 2)), "queue {q}");
        }
        t.enqueue(0, PortId(1), QueueId(5), frame(1000), None, &mut pfc).unwrap();
        t.enqueue(0, PortId(1), QueueId(5), frame(1000), None, &mut pfc).unwrap();
        t.enqueue(0, PortId(1), QueueId(1), frame(1000), None, &mut pfc).unwrap();
        let counts = |q: u8| {
            let h = t.queue_depth_histogram(PortId(1), QueueId(q)).unwrap();
            (h.count(), h.sum)
        };
        assert_eq!([counts(0), counts(1), counts(2), counts(5), counts(6)], [(0, 0), (1, 0), (1, 0), (2, 1000), (0, 0)]);
        assert!(t.queue_depth_histogram(PortId(1), QueueId(8)).is_none(), "no such queue");
    }

    #[test]
    fn a_queue_limit_drops_the_packet_beyond_it_and_spares_control() {
        let mut cfg = TmConfig::standard(8, 10_000_000, 80, None);
        cfg.queue_limit_packets = Some(3);
        let mut t = tm(cfg);
        let mut pfc = vec![];
        for _ in 0..3 {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc).unwrap();
        }
        let Err((why, _)) = t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc) else { panic!("a 4th packet fits") };
        assert_eq!(why, DropReason::QueueLimit);
        assert_eq!(t.queue_stats(PortId(0), QueueId(0)).drops_threshold, 1);
        // Another queue, and the control queue, are not limited by queue 0.
        t.enqueue(0, PortId(0), QueueId(1), frame(1000), None, &mut pfc).unwrap();
        for _ in 0..5 {
            t.enqueue(0, PortId(0), QueueId(7), frame(100), None, &mut pfc).unwrap();
        }
    }

    #[test]
    fn strict_priority_starves_lower_queues() {
        let mut cfg = TmConfig::standard(8, 10_000_000, 80, None);
        cfg.queues[1].priority = 3;
        let mut t = tm(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        for _ in 0..100 {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc).unwrap();
            t.enqueue(0, PortId(0), QueueId(1), frame(1000), None, &mut pfc).unwrap();
        }
        for _ in 0..100 {
            assert_eq!(t.dequeue(0, PortId(0), &mut rng, &mut pfc).unwrap().queue, QueueId(1));
        }
        assert_eq!(t.dequeue(0, PortId(0), &mut rng, &mut pfc).unwrap().queue, QueueId(0));
    }

    #[test]
    fn dwrr_shares_follow_weights_within_one_percent() {
        let mut cfg = TmConfig::standard(8, 100_000_000, 80, None);
        cfg.queues[0].weight = 1;
        cfg.queues[1].weight = 2;
        cfg.queues[2].weight = 5;
        let mut t = tm(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        let sizes = [1500usize, 700, 64];
        for i in 0..12_000 {
            for q in 0..3 {
                t.enqueue(0, PortId(1), QueueId(q), frame(sizes[(i + q as usize) % 3]), None, &mut pfc).unwrap();
            }
        }
        let mut bytes = [0u64; 3];
        for _ in 0..10_000 {
            let d = t.dequeue(0, PortId(1), &mut rng, &mut pfc).unwrap();
            bytes[d.queue.0 as usize] += d.pkt.frame.len() as u64;
        }
        let total: u64 = bytes.iter().sum();
        for (q, w) in [(0, 1.0), (1, 2.0), (2, 5.0)] {
            let share = bytes[q] as f64 / total as f64;
            let want = w / 8.0;
            assert!((share - want).abs() / want < 0.01, "queue {q}: share {share:.4}, want {want:.4}");
        }
    }

    #[test]
    fn pausing_an_empty_queue_leaks_nothing() {
        let mut cfg = TmConfig::standard(8, 10_000_000, 80, None);
        cfg.pause_leak_packets = 2;
        let mut t = tm(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        t.pause_queue(PortId(0), QueueId(3));
        for _ in 0..3 {
            t.enqueue(0, PortId(0), QueueId(3), frame(100), None, &mut pfc).unwrap();
        }
        assert!(t.dequeue(0, PortId(0), &mut rng, &mut pfc).is_none(), "nothing was in the dequeue pipeline when paused");
        assert_eq!(t.resume_queue(0, PortId(0), QueueId(3), &mut pfc), 0, "the Tofino model holds in the buffer: nothing to admit or drop");
        assert_eq!(std::iter::from_fn(|| t.dequeue(0, PortId(0), &mut rng, &mut pfc)).count(), 3);
    }

    #[test]
    fn paused_queue_holds_in_order_and_releases_on_resume() {
        let mut cfg = TmConfig::standard(8, 10_000_000, 80, None);
        cfg.pause_leak_packets = 1;
        let mut t = tm(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        for i in 0..5u8 {
            let mut f = frame(100);
            f[0] = i;
            t.enqueue(0, PortId(0), QueueId(3), f, None, &mut pfc).unwrap();
            t.enqueue(0, PortId(0), QueueId(0), frame(100), None, &mut pfc).unwrap();
        }
        t.pause_queue(PortId(0), QueueId(3));
        let mut from3 = vec![];
        let mut from0 = 0;
        while let Some(d) = t.dequeue(0, PortId(0), &mut rng, &mut pfc) {
            if d.queue == QueueId(3) {
                from3.push(d.pkt.frame[0]);
            } else {
                from0 += 1;
            }
        }
        assert_eq!(from0, 5, "other queues flow while one is paused");
        assert_eq!(from3, vec![0], "exactly the configured leak of 1 packet leaves after the pause");
        assert_eq!(t.queue_len(PortId(0), QueueId(3)), 4);
        assert_eq!(t.resume_queue(0, PortId(0), QueueId(3), &mut pfc), 0, "the Tofino model holds in the buffer: nothing to admit or drop");
        let rest: Vec<u8> = std::iter::from_fn(|| t.dequeue(0, PortId(0), &mut rng, &mut pfc)).map(|d| d.pkt.frame[0]).collect();
        assert_eq!(rest, vec![1, 2, 3, 4]);
    }

    #[test]
    fn shared_buffer_overflow_tail_drops() {
        let cfg = TmConfig::standard(8, 100 * 1000, 100, None);
        let mut t = tm(cfg);
        let mut pfc = vec![];
        let mut ok = 0;
        let mut dropped = 0;
        for _ in 0..200 {
            match t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc) {
                Ok(()) => ok += 1,
                Err((r, _)) => {
                    assert_eq!(r, DropReason::DynamicThreshold);
                    dropped += 1
                }
            }
        }
        // alpha = 1: one queue may take half the buffer.
        assert_eq!(ok, 50);
        assert_eq!(dropped, 150);
        assert_eq!(t.queue_stats(PortId(0), QueueId(0)).drops_threshold, 150);
        // A second queue gets alpha x remaining free.
        let mut ok2 = 0;
        while t.enqueue(0, PortId(1), QueueId(0), frame(1000), None, &mut pfc).is_ok() {
            ok2 += 1;
        }
        assert_eq!(ok2, 25);
    }

    #[test]
    fn ecn_marking_follows_the_red_line() {
        let red = RedConfig { kmin_bytes: 10_000, kmax_bytes: 50_000, pmax: 0.5 };
        let cfg = TmConfig::standard(8, 100_000_000, 80, Some(red));
        let mut t = tm(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut pfc = vec![];
        for depth_pkts in [5usize, 20, 30, 40, 60] {
            while t.queue_len(PortId(0), QueueId(0)) < depth_pkts {
                t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc).unwrap();
            }
            let n = 20_000;
            let mut marks = 0;
            for _ in 0..n {
                let d = t.dequeue(0, PortId(0), &mut rng, &mut pfc).unwrap();
                marks += d.mark_ce as u32;
                t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc).unwrap();
            }
            let got = marks as f64 / n as f64;
            let want = red.probability(depth_pkts as u64 * 1000);
            assert!((got - want).abs() < 0.015, "depth {depth_pkts} KB: marked {got:.3}, RED line {want:.3}");
            while t.dequeue(0, PortId(0), &mut rng, &mut pfc).is_some() {}
        }
    }

    /// The ns-3 model on 4 ports: 1 MB buffer, headroom 27 096 B per port
    /// (100 Gbit/s, 1 µs), α_in = 1/16, class 0 lossless.
    fn ns3_tm(ecn: Option<RedConfig>) -> TrafficManager {
        let mut cfg = TmConfig::standard(8, 1_000_000, 80, ecn);
        cfg.pfc = Some(PfcConfig { classes: 1, alpha_in: 1.0 / 16.0, xon_delta_bytes: 3000, pause_quanta: 977, pause_ns: None });
        cfg.buffer_model = BufferModel::Ns3(Ns3Mmu { headroom_bytes: vec![Ns3Mmu::headroom_for(100_000_000_000, 1000); 4] });
        tm(cfg)
    }

    /// With the ns-3 model, a packet for an idle port taken through
    /// `arrive_idle` and `depart_idle` does to the traffic manager what an
    /// enqueue and the dequeue that takes it do: the same packet out, the
    /// same transitions, the same state (every field, compared through
    /// `Debug`), over random traffic with pauses sent and received,
    /// resumes, RED marks and drops.
    #[test]
    fn ns3_an_idle_ports_packet_without_the_queue_is_an_enqueue_and_its_dequeue() {
        let red = RedConfig { kmin_bytes: 0, kmax_bytes: 60_000, pmax: 0.5 };
        let (mut a, mut b) = (ns3_tm(Some(red)), ns3_tm(Some(red)));
        let (mut rng_a, mut rng_b) = (ChaCha8Rng::seed_from_u64(3), ChaCha8Rng::seed_from_u64(3));
        let (mut pfc_a, mut pfc_b) = (vec![], vec![]);
        let mut x: u64 = 11;
        let mut now = 0;
        let (mut fused, mut dropped, mut queued) = (0, 0, 0);
        // The pauses a switch sends for the transitions (`emit_pfc`).
        let send = |t: &mut TrafficManager, pfc: &mut Vec<PfcTransition>, now: Nanos| {
            for tr in pfc.drain(..).filter(|tr| tr.pause) {
                t.pfc_pause_sent(tr.port, tr.class, now + 3_000);
            }
        };
        for step in 0..40_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            now += (x >> 58) * 10;
            // Ports 0 and 1 take most arrivals and, every other phase of
            // 4 000 steps, no departures (the pool fills: drops); ports 2
            // and 3 are mostly idle.
            let filling = (step / 4_000) % 2 == 1;
            let op = (x >> 40) % 16;
            let busy = (x >> 20) % 10 < 7 && (op < 10 || !filling);
            let egress = PortId(((x >> 18) % 2 + if busy { 0 } else { 2 }) as u16);
            match op {
                // Arrivals, mostly to ports 0 and 1 from ports 2 and 3.
                0..=9 => {
                    let ingress = PortId(((x >> 24) % 4) as u16);
                    if ingress == egress {
                        continue;
                    }
                    let queue = QueueId([0, 0, 0, 1, 7][((x >> 28) % 5) as usize]);
                    let arrival = Some(Arrival { port: ingress, cos: [0, 0, 3][((x >> 32) % 3) as usize] });
                    let mut f = frame(if filling { 1400 } else { 64 } + ((x >> 44) % 101) as usize * if filling { 1 } else { 14 });
                    f[..4].copy_from_slice(&step.to_be_bytes());
                    let out_a = match a.arrive_idle(now, egress, queue, f.clone(), arrival, step, &mut pfc_a) {
                        Ok(IdleArrival::Accepted(idle)) => {
                            fused += 1;
                            send(&mut a, &mut pfc_a, now);
                            let d = a.depart_idle(now, egress, idle, &mut rng_a, &mut pfc_a);
                            Some(Some(format!("{d:?}")))
                        }
                        Ok(IdleArrival::Dropped(..)) => {
                            dropped += 1;
                            Some(None)
                        }
                        Err(f) => {
                            queued += 1;
                            let _ = a.enqueue_bridged(now, egress, queue, f, arrival, step, &mut pfc_a);
                            None
                        }
                    };
                    let admitted = b.enqueue_bridged(now, egress, queue, f, arrival, step, &mut pfc_b).is_ok();
                    if let Some(out_a) = out_a {
                        send(&mut b, &mut pfc_b, now);
                        assert_eq!(out_a.is_some(), admitted, "step {step}");
                        let d = b.dequeue(now, egress, &mut rng_b, &mut pfc_b).map(|d| format!("{d:?}"));
                        assert_eq!(out_a, d, "step {step}");
                    }
                }
                // Departures, received pauses and resumes.
                10..=14 => {
                    let da = a.dequeue(now, egress, &mut rng_a, &mut pfc_a).map(|d| format!("{d:?}"));
                    let db = b.dequeue(now, egress, &mut rng_b, &mut pfc_b).map(|d| format!("{d:?}"));
                    assert_eq!(da, db, "step {step}");
                }
                _ => {
                    let until = if (x >> 50).is_multiple_of(2) { 0 } else { now + 2_000 };
                    a.pfc_receive(now, egress, 0, until);
                    b.pfc_receive(now, egress, 0, until);
                }
            }
            assert_eq!(pfc_a, pfc_b, "step {step}");
            send(&mut a, &mut pfc_a, now);
            send(&mut b, &mut pfc_b, now);
            if step % 256 == 0 {
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "step {step}");
            }
        }
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert!(
            fused > 1_000 && dropped > 0 && queued > 1_000,
            "{fused} taken at once, {dropped} dropped, {queued} queued, max {}",
            a.max_used_bytes()
        );
    }

    #[test]
    fn ns3_headroom_is_twice_the_bdp_plus_two_mtu() {
        assert_eq!(Ns3Mmu::headroom_for(100_000_000_000, 1000), 2 * 12_500 + 2 * 1048);
    }

    #[test]
    fn ns3_pauses_at_the_authors_dynamic_threshold_on_every_arrival_and_resumes_only_before_expiry() {
        let mut t = ns3_tm(None);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        // Pool limit: buffer − 4 headrooms − 4 ports × 8 MTU (InitSwitch).
        let limit = 1_000_000.0 - 4.0 * 27_096.0 - 4.0 * 8.0 * 1048.0;
        // The first n with n×1000 − 2096 > (limit − n×1000)/16 (GetPauseClasses).
        let first = (1..).find(|&n: &u64| (n * 1000) as f64 - 2096.0 > (limit - (n * 1000) as f64) / 16.0).unwrap();
        let mut n = 0;
        while pfc.is_empty() {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
            n += 1;
        }
        assert_eq!(n, first);
        assert_eq!(pfc, vec![PfcTransition { port: PortId(2), class: 0, pause: true }]);
        t.pfc_pause_sent(PortId(2), 0, 5_000);
        // Every further arrival over the threshold renews the pause (CheckAndSendPfc).
        pfc.clear();
        for _ in 0..3 {
            t.enqueue(10, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
        }
        assert_eq!(pfc.len(), 3);
        assert!(pfc.iter().all(|p| p.pause));
        t.pfc_pause_sent(PortId(2), 0, 5_010);
        // Dequeues before the pause expires: XON once below the threshold, not before.
        pfc.clear();
        let mut left = first + 3;
        while pfc.is_empty() {
            t.dequeue(100, PortId(0), &mut rng, &mut pfc).unwrap();
            left -= 1;
        }
        let pg = (left * 1000) as f64 - 2096.0;
        assert!(pg < (limit - (left * 1000) as f64 - 16.0) / 16.0, "resumed at {left} packets");
        let pg_before = pg + 1000.0;
        assert!(pg_before >= (limit - ((left + 1) * 1000) as f64 - 16.0) / 16.0, "resumed late: {left} packets");
        assert_eq!(pfc, vec![PfcTransition { port: PortId(2), class: 0, pause: false }]);
        // A pause that expired upstream gets no XON (ns-3's `paused` flag is off).
        while t.dequeue(100, PortId(0), &mut rng, &mut pfc).is_some() {}
        pfc.clear();
        for _ in 0..first {
            t.enqueue(200, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
        }
        assert_eq!(pfc.len(), 1);
        t.pfc_pause_sent(PortId(2), 0, 5_200);
        pfc.clear();
        while t.dequeue(6_000, PortId(0), &mut rng, &mut pfc).is_some() {}
        assert!(pfc.is_empty(), "{pfc:?}");
        assert!(!t.xoff_asserted(PortId(2), 0));
        assert!(!t.refreshes_pause());
    }

    #[test]
    fn ns3_an_arrival_resumes_a_class_that_other_ports_draining_brought_under_its_threshold() {
        let mut t = ns3_tm(None);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        // 400 kB from port 3 to port 1 fill the shared pool and lower port
        // 2's threshold; then port 2 sends to port 0 until it is paused.
        for _ in 0..400 {
            t.enqueue(0, PortId(1), QueueId(0), frame(1000), Some(PortId(3)), &mut pfc).unwrap();
        }
        pfc.clear();
        let mut n = 0;
        while !pfc.iter().any(|p| p.port == PortId(2)) {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
            n += 1;
        }
        assert!(n < 60, "paused after {n} packets: the full pool should lower the threshold");
        t.pfc_pause_sent(PortId(2), 0, 5_000);
        // Port 1 drains: the pool empties, port 2's bytes stay where they were,
        // and no packet of port 2 leaves, so no dequeue resumes it.
        pfc.clear();
        while t.dequeue(100, PortId(1), &mut rng, &mut pfc).is_some() {}
        assert!(!pfc.iter().any(|p| p.port == PortId(2)), "{pfc:?}");
        assert!(t.xoff_asserted(PortId(2), 0));
        // The next arrival from port 2 (in flight when the pause left) finds
        // its class under the threshold: CheckAndSendPfc resumes it.
        pfc.clear();
        t.enqueue(200, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
        assert_eq!(pfc, vec![PfcTransition { port: PortId(2), class: 0, pause: false }]);
        assert!(!t.xoff_asserted(PortId(2), 0));
    }

    #[test]
    fn ns3_packets_held_by_a_pipeline_pause_stay_outside_the_buffer_until_resumed() {
        let mut t = ns3_tm(None);
        let mut pfc = vec![];
        t.pause_queue(PortId(0), QueueId(0));
        // More than the whole 1 MB buffer, all held: no check, no count.
        for _ in 0..1_500 {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
        }
        assert!(pfc.is_empty(), "{pfc:?}");
        assert_eq!(t.used_cells(), 0);
        assert_eq!(t.queue_len(PortId(0), QueueId(0)), 1_500);
        assert_eq!(t.queue_bytes(PortId(0), QueueId(0)), 1_500_000);
        // Resumed: each is admitted in order as an arrival (the authors'
        // flush through DoSwitchSend): pauses on every arrival over the
        // XOFF threshold (~54 packets) and drops once the pool and the
        // headroom are exhausted, or the queue exceeds its egress share.
        let dropped = t.resume_queue(0, PortId(0), QueueId(0), &mut pfc);
        let admitted = t.queue_len(PortId(0), QueueId(0)) as u64;
        assert_eq!(admitted + dropped, 1_500);
        assert!(dropped > 0 && admitted > 400, "admitted {admitted}, dropped {dropped}");
        assert!(pfc.len() > 300 && pfc.iter().all(|p| *p == PfcTransition { port: PortId(2), class: 0, pause: true }), "{}", pfc.len());
        assert_eq!(t.queue_bytes(PortId(0), QueueId(0)), admitted * 1000);
        // Counted in bytes, not the configured 80 B cells (13 per frame).
        assert_eq!(t.used_cells(), admitted * 1000);
    }

    #[test]
    fn ns3_marks_on_the_shared_bytes_left_behind_and_does_not_cut_through() {
        // Kmin = Kmax = 2 000 B: marked iff the bytes behind the departing
        // packet exceed the 1 049 B queue minimum by more than 2 000 B.
        let red = RedConfig { kmin_bytes: 2_000, kmax_bytes: 2_000, pmax: 1.0 };
        let mut t = ns3_tm(Some(red));
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        assert!(matches!(t.pass_through(0, PortId(1), QueueId(1), frame(1000), None, 0, &mut rng), Err(PassThrough::Queued(_))));
        for _ in 0..5 {
            t.enqueue(0, PortId(1), QueueId(1), frame(1000), Some(PortId(0)), &mut pfc).unwrap();
        }
        // Behind each departure: 4000, 3000, 2000, 1000, 0 B; shared 2951, 1951, 951, 0, 0.
        let marks: Vec<bool> = (0..5).map(|_| t.dequeue(0, PortId(1), &mut rng, &mut pfc).unwrap().mark_ce).collect();
        assert_eq!(marks, vec![true, false, false, false, false]);
    }

    #[test]
    fn ns3_drops_at_the_egress_dynamic_threshold_even_when_lossless() {
        let mut t = ns3_tm(None);
        let mut pfc = vec![];
        // Egress limit: buffer − 4 × 8 MTU; a queue may hold α = 1 × (limit − shared use).
        let limit = 1_000_000 - 4 * 8 * 1048;
        let mut n = 0u64;
        loop {
            let ingress = PortId((n % 3) as u16 + 1);
            match t.enqueue(0, PortId(0), QueueId(0), frame(1000), Some(ingress), &mut pfc) {
                Ok(()) => n += 1,
                Err((reason, _)) => {
                    assert_eq!(reason, DropReason::DynamicThreshold);
                    break;
                }
            }
        }
        let shared = |k: u64| (k * 1000).saturating_sub(1049);
        assert!(shared(n) + 1000 > limit - shared(n), "dropped too early, after {n} packets");
        assert!(shared(n - 1) + 1000 <= limit - shared(n - 1), "dropped too late, after {n} packets");
    }

    #[test]
    fn pfc_xoff_and_xon_per_ingress_port_and_class() {
        let mut cfg = TmConfig::standard(8, 1_000_000, 100, None);
        cfg.pfc = Some(PfcConfig { classes: 1, alpha_in: 0.1, xon_delta_bytes: 2000, pause_quanta: 100, pause_ns: None });
        let mut t = tm(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        let mut n = 0;
        while pfc.is_empty() {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
            n += 1;
        }
        assert_eq!(pfc, vec![PfcTransition { port: PortId(2), class: 0, pause: true }]);
        assert!(n > 50 && n < 120, "xoff after {n} packets");
        // Lossless class: never dropped by the dynamic threshold.
        for _ in 0..300 {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
        }
        pfc.clear();
        while pfc.is_empty() {
            t.dequeue(0, PortId(0), &mut rng, &mut pfc).unwrap();
        }
        assert_eq!(pfc, vec![PfcTransition { port: PortId(2), class: 0, pause: false }]);
    }

    /// A program may put a packet in a queue of another class (ConWeave's
    /// reorder queues, its queue 0 towards hosts): the pause must still name
    /// the priority the packet arrived with, or its sender never stops.
    #[test]
    fn pfc_follows_the_ingress_cos_not_the_queue_the_packet_waits_in() {
        let mut cfg = TmConfig::standard(8, 1_000_000, 100, None);
        cfg.pfc = Some(PfcConfig { classes: 0xff, alpha_in: 0.1, xon_delta_bytes: 2000, pause_quanta: 100, pause_ns: None });
        let mut t = tm(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        let class3 = Some(Arrival { port: PortId(2), cos: 3 });
        while pfc.is_empty() {
            t.enqueue_bridged(0, PortId(0), QueueId(5), frame(1000), class3, 0, &mut pfc).unwrap();
        }
        assert_eq!(pfc, vec![PfcTransition { port: PortId(2), class: 3, pause: true }], "XOFF for class 3, not queue 5's class 5");
        assert!(t.xoff_asserted(PortId(2), 3) && !t.xoff_asserted(PortId(2), 5));
        pfc.clear();
        while pfc.is_empty() {
            t.dequeue(0, PortId(0), &mut rng, &mut pfc).unwrap();
        }
        assert_eq!(pfc, vec![PfcTransition { port: PortId(2), class: 3, pause: false }]);
        // A received pause stops the queues mapped to its priority: a pause
        // for class 3 stops queue 3, not queue 5.
        for q in [3, 5] {
            t.enqueue(0, PortId(1), QueueId(q), frame(1000), None, &mut pfc).unwrap();
        }
        t.pfc_receive(0, PortId(1), 3, 1_000);
        assert_eq!(t.dequeue(0, PortId(1), &mut rng, &mut pfc).map(|d| d.queue), Some(QueueId(5)));
        assert!(t.dequeue(0, PortId(1), &mut rng, &mut pfc).is_none(), "queue 3 is paused");
    }

    fn with_watchdog(action: PfcWatchdogAction) -> TrafficManager {
        let mut cfg = TmConfig::standard(8, 1_000_000, 100, None);
        cfg.pfc_watchdog = Some(PfcWatchdog { detect_ns: 20_000, restore_ns: 20_000, action });
        tm(cfg)
    }

    /// Forward: a priority paused without a break for the detection time
    /// sends anyway (the port wakes at that instant), counted; once no
    /// pause arrived for the restoration time, pauses hold it again.
    #[test]
    fn the_pfc_watchdog_forwards_a_priority_paused_too_long_then_honours_pauses_again() {
        let mut t = with_watchdog(PfcWatchdogAction::Forward);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        for _ in 0..3 {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc).unwrap();
        }
        // Pauses refreshed every 5 µs, each for 10 µs: an unbroken pause.
        for k in 0..8u64 {
            t.pfc_receive(k * 5_000, PortId(0), 0, k * 5_000 + 10_000);
            if k * 5_000 < 20_000 {
                assert!(t.dequeue(k * 5_000, PortId(0), &mut rng, &mut pfc).is_none(), "paused at {} µs", k * 5);
                assert_eq!(t.pfc_wakeup(k * 5_000, PortId(0)), Some((k * 5_000 + 10_000).min(20_000)));
            }
        }
        let d = t.dequeue(20_000, PortId(0), &mut rng, &mut pfc).expect("a storm: sent anyway");
        assert_eq!(d.queue, QueueId(0));
        let st = t.queue_stats(PortId(0), QueueId(0));
        assert_eq!((st.pfc_watchdog_storms, st.pfc_watchdog_forwarded, st.pfc_watchdog_drops), (1, 1, 0));
        // The last pause came at 35 µs; at 60 µs the storm is over and a
        // new pause holds the queue again.
        t.pfc_receive(60_000, PortId(0), 0, 70_000);
        assert!(t.dequeue(60_000, PortId(0), &mut rng, &mut pfc).is_none(), "pauses are honoured after the storm");
        assert!(t.dequeue(70_000, PortId(0), &mut rng, &mut pfc).is_some(), "and expire as usual");
    }

    /// Drop: the paused priority's queued packets are dropped at the
    /// detection instant (their buffer released) and arrivals refused.
    #[test]
    fn the_pfc_watchdog_drops_a_priority_paused_too_long() {
        let mut t = with_watchdog(PfcWatchdogAction::Drop);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        for _ in 0..3 {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc).unwrap();
        }
        t.enqueue(0, PortId(0), QueueId(1), frame(1000), None, &mut pfc).unwrap();
        t.pfc_receive(0, PortId(0), 0, 1_000_000);
        t.pfc_receive(0, PortId(0), 1, 1_000);
        // Class 1's short pause ends at 1 µs: its packet leaves, no storm.
        assert_eq!(t.dequeue(1_000, PortId(0), &mut rng, &mut pfc).map(|d| d.queue), Some(QueueId(1)));
        assert!(t.dequeue(19_999, PortId(0), &mut rng, &mut pfc).is_none());
        assert!(t.dequeue(20_000, PortId(0), &mut rng, &mut pfc).is_none(), "dropped, not sent");
        assert_eq!(t.queue_stats(PortId(0), QueueId(0)).pfc_watchdog_drops, 3);
        assert_eq!(t.used_cells(), 0, "their buffer is released");
        let refused = t.enqueue(21_000, PortId(0), QueueId(0), frame(1000), None, &mut pfc);
        assert!(matches!(refused, Err((DropReason::PfcWatchdog, _))));
        assert_eq!(t.queue_stats(PortId(0), QueueId(0)).pfc_watchdog_drops, 4);
        assert_eq!(t.queue_stats(PortId(0), QueueId(1)).pfc_watchdog_storms, 0);
    }

    /// A guaranteed minimum (Tofino's queue gmin, from the MIN pool) admits
    /// within it when the shared buffer is full, outside the shared count.
    #[test]
    fn a_guaranteed_minimum_admits_when_the_shared_buffer_is_full() {
        let mut cfg = TmConfig::standard(8, 10_000, 100, None);
        cfg.egress_alpha = 1e6;
        let mut t = tm(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        t.set_guaranteed_min(PortId(3), QueueId(7), 3);
        // Fill the shared buffer (100 cells) from port 0.
        while t.enqueue(0, PortId(0), QueueId(0), frame(1000), None, &mut pfc).is_ok() {}
        let shared = t.used_cells();
        assert_eq!(shared, t.total_cells());
        assert!(t.enqueue(0, PortId(1), QueueId(7), frame(100), None, &mut pfc).is_err(), "no minimum: dropped");
        for _ in 0..3 {
            t.enqueue(0, PortId(3), QueueId(7), frame(100), None, &mut pfc).expect("within the minimum");
        }
        assert_eq!(t.used_cells(), shared, "the minimum is not counted in the shared buffer");
        assert!(t.enqueue(0, PortId(3), QueueId(7), frame(100), None, &mut pfc).is_err(), "beyond the minimum: dropped");
        assert!(t.dequeue(0, PortId(3), &mut rng, &mut pfc).is_some());
        t.enqueue(0, PortId(3), QueueId(7), frame(100), None, &mut pfc).expect("a departure returns its cell to the minimum");
        while t.dequeue(0, PortId(3), &mut rng, &mut pfc).is_some() {}
        assert_eq!(t.used_cells(), shared);
    }

    /// Packets of a pipeline-paused queue from ingress port 2: how many
    /// arrive before port 2 is paused, with and without `held_outside_pfc`.
    fn held_packets_until_xoff(outside: bool) -> (usize, Vec<PfcTransition>) {
        let mut cfg = TmConfig::standard(8, 1_000_000, 100, None);
        cfg.pfc = Some(PfcConfig { classes: 1, alpha_in: 0.1, xon_delta_bytes: 2000, pause_quanta: 100, pause_ns: None });
        cfg.held_outside_pfc = outside;
        let mut t = tm(cfg);
        let mut pfc = vec![];
        t.pause_queue(PortId(0), QueueId(0));
        let mut n = 0;
        while pfc.is_empty() && n < 200 {
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
            n += 1;
        }
        if outside {
            assert_eq!(t.resume_queue(0, PortId(0), QueueId(0), &mut pfc), 0);
            t.enqueue(0, PortId(0), QueueId(0), frame(1000), Some(PortId(2)), &mut pfc).unwrap();
        }
        (n, pfc)
    }

    #[test]
    fn held_packets_count_for_pfc_unless_kept_outside_until_their_queue_resumes() {
        let xoff = vec![PfcTransition { port: PortId(2), class: 0, pause: true }];
        let (n, pfc) = held_packets_until_xoff(false);
        assert!(n > 50 && n < 120, "counted: xoff after {n} held packets");
        assert_eq!(pfc, xoff);
        // Outside: 200 held packets pause nothing; once resumed they count,
        // and the next arrival pauses the port.
        let (n, pfc) = held_packets_until_xoff(true);
        assert_eq!(n, 200);
        assert_eq!(pfc, xoff);
    }

    #[test]
    fn received_pfc_pause_blocks_its_class_only() {
        let cfg = TmConfig::standard(8, 1_000_000, 100, None);
        let mut t = tm(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut pfc = vec![];
        t.enqueue(0, PortId(0), QueueId(0), frame(100), None, &mut pfc).unwrap();
        t.enqueue(0, PortId(0), QueueId(1), frame(100), None, &mut pfc).unwrap();
        t.pfc_receive(0, PortId(0), 0, 1000);
        assert_eq!(t.dequeue(10, PortId(0), &mut rng, &mut pfc).unwrap().queue, QueueId(1));
        assert!(t.dequeue(10, PortId(0), &mut rng, &mut pfc).is_none());
        assert_eq!(t.pfc_wakeup(10, PortId(0)), Some(1000));
        assert_eq!(t.dequeue(1000, PortId(0), &mut rng, &mut pfc).unwrap().queue, QueueId(0));
    }
}
