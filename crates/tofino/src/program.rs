//! What a data-plane program is: declarations (registers, tables, hashes,
//! packet generators, all with their stage) and the ingress/egress/CPU
//! hooks the switch calls for every packet.
//!
//! A scheme implements [`Program`]. The switch runs its own L3 stage first
//! (route lookup → the equal-cost group of egress ports for the destination)
//! and passes the group to [`Program::ingress`], which picks an egress port
//! and queue and may pause/resume queues, mirror, recirculate or punt to
//! the CPU. Register state lives in the switch's [`RegisterFile`] so the
//! access rules of the hardware are enforced on every access.

use super::l3::RouteTable;
use super::registers::{PassState, ProgramError, RegisterFile, RegisterId};
use super::resources::{Gress, HashDecl, RegisterDecl, ResourceUsage, TableDecl, TableKind};
pub use super::tm::QueueDepths;
use super::tm::TmConfig;
use bytes::BytesMut;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use weft_wire::frame::FrameInfo;
use weft_wire::ids::{PortId, QueueId};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::Ipv4Address;

/// Role of a switch in a Clos fabric (what a program learns of the
/// fabric through [`SwitchView`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchRole {
    /// Top-of-rack / leaf / edge (hosts attach here).
    Leaf,
    /// Spine (2-tier) or aggregation (3-tier).
    Spine,
    /// Fat-tree core.
    Core,
    /// Anything else (explicit topologies).
    Other,
}

/// EtherType of packet-generator frames (IEEE local experimental).
pub const GENERATOR_ETHERTYPE: u16 = 0x88b5;

/// The program's declaration builder, filled by [`Program::declare`].
#[derive(Debug, Default)]
pub struct Declarations {
    usage: ResourceUsage,
    generators: Vec<PacketGenerator>,
}

impl Declarations {
    /// What was declared: the resource usage (checked against the target
    /// when the switch loads the program) and the packet generators.
    #[must_use]
    pub fn into_parts(self) -> (ResourceUsage, Vec<PacketGenerator>) {
        (self.usage, self.generators)
    }
    /// Declares a register array of `entries` x `width_bits` in `stage`.
    pub fn register(&mut self, name: &str, gress: Gress, stage: u8, entries: u32, width_bits: u32) -> RegisterId {
        self.usage.registers.push(RegisterDecl { name: name.into(), gress, stage, entries, width_bits });
        RegisterId((self.usage.registers.len() - 1) as u16)
    }
    /// Declares a match table.
    pub fn table(&mut self, table: TableDecl) {
        self.usage.tables.push(table);
    }
    /// Declares a hash computation.
    pub fn hash(&mut self, name: &str, gress: Gress, stage: u8, bits: u32) {
        self.usage.hashes.push(HashDecl { name: name.into(), gress, stage, bits });
    }
    /// Declares metadata bits the program adds to the PHV.
    pub fn metadata_bits(&mut self, bits: u32) {
        self.usage.metadata_bits += bits;
    }
    /// Declares a packet generator (the hardware's replacement for timers).
    pub fn packet_generator(&mut self, g: PacketGenerator) {
        self.generators.push(g);
    }
    /// What has been declared so far.
    pub fn usage(&self) -> &ResourceUsage {
        &self.usage
    }
}

/// A periodic packet generator: every `period_ns` a frame of `frame_len`
/// bytes (filled with `id` in its first byte) enters ingress with
/// [`PacketSource::Generator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketGenerator {
    /// Generator id passed to the program.
    pub id: u8,
    /// Period.
    pub period_ns: Nanos,
    /// Frame length.
    pub frame_len: u16,
}

/// Where a packet entering ingress comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketSource {
    /// A front-panel port.
    Port(PortId),
    /// The recirculation port, after `pass` previous passes.
    Recirculated {
        /// Port the packet originally arrived on.
        original: PortId,
        /// Number of passes so far (1 = first recirculation).
        pass: u8,
    },
    /// The packet generator.
    Generator(u8),
    /// The switch CPU.
    Cpu,
}

/// A mirror request: a copy, truncated to `truncate` bytes if set, to
/// `port` (or the CPU) in `queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorRequest {
    /// Destination (`None` = CPU port).
    pub port: Option<PortId>,
    /// Queue at the destination.
    pub queue: QueueId,
    /// Truncate the copy to this many bytes.
    pub truncate: Option<u16>,
}

/// A Tofino2 advanced-flow-control message (pause with credit 1, resume with 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFlowControl {
    /// Egress port.
    pub port: PortId,
    /// Queue.
    pub queue: QueueId,
    /// `true` pauses, `false` resumes.
    pub pause: bool,
}

/// Where a frame made by the program goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitTarget {
    /// Out of a front-panel port, in a queue.
    Port(PortId, QueueId),
    /// Around the recirculation port (back into ingress, ~1 µs later).
    Recirculate,
}

/// A frame the program makes from the current packet: on the hardware, a
/// mirrored (and usually truncated) copy whose headers the mirror session's
/// egress pass rewrites — how ConWeave builds RTT_REPLY, NOTIFY, CLEAR and
/// its resume-timer packets (paper §3.4).
#[derive(Debug, Clone)]
pub struct EmittedFrame {
    /// Destination.
    pub target: EmitTarget,
    /// The whole frame (the switch rewrites its MACs for the port).
    pub frame: BytesMut,
}

/// The ingress pipeline's decisions for one packet.
#[derive(Debug, Clone, Default)]
pub struct IngressDecision {
    /// Egress port (`None` with no other action = drop).
    pub egress_port: Option<PortId>,
    /// Queue at the egress port (default: by traffic class).
    pub queue: Option<QueueId>,
    /// Drop the packet.
    pub drop: bool,
    /// The program consumed the packet (e.g. a control packet addressed to
    /// this switch's program): it ends here and is not counted as a drop.
    pub consume: bool,
    /// Send the packet around the recirculation port instead of egress.
    pub recirculate: bool,
    /// Punt the packet to the CPU.
    pub to_cpu: bool,
    /// Mirror a copy.
    pub mirror: Option<MirrorRequest>,
    /// Queue pause/resume messages to apply.
    pub flow_control: Vec<QueueFlowControl>,
    /// Frames made from this packet (mirrored copies rewritten).
    pub emit: Vec<EmittedFrame>,
}

/// The register file seen through one pipeline pass: every access goes
/// through [`RegisterFile::access`] with the pass's state, so the
/// one-access-per-pass and stage-order rules hold. The switch makes one per
/// pass.
pub struct PassRegisters<'a> {
    regs: &'a mut RegisterFile,
    pass: PassState,
}

impl<'a> PassRegisters<'a> {
    /// The registers of `regs` for the pass `pass`.
    pub fn new(regs: &'a mut RegisterFile, pass: PassState) -> Self {
        PassRegisters { regs, pass }
    }
    /// One stateful-ALU access to `reg[index]` (see [`RegisterFile::access`]).
    #[inline]
    pub fn access<R>(&mut self, reg: RegisterId, index: u32, f: impl FnOnce(u64) -> (u64, R)) -> Result<R, ProgramError> {
        self.regs.access(&mut self.pass, reg, index, f)
    }
}

/// Everything a program sees and decides in one ingress pass.
pub struct IngressCx<'a> {
    /// Ingress timestamp.
    pub now: Nanos,
    /// The frame (real wire bytes; the program may rewrite header fields).
    pub frame: &'a mut BytesMut,
    /// Parsed header offsets and fields.
    pub info: &'a FrameInfo,
    /// Where the packet comes from.
    pub source: PacketSource,
    /// Equal-cost egress ports for the destination (static group; check
    /// `port_up`). Empty if there is no route.
    pub group: &'a [PortId],
    /// Link status per port.
    pub port_up: &'a [bool],
    /// Ingress-visible queue depths (ghost-thread snapshot).
    pub depths: &'a dyn QueueDepths,
    /// The node's seeded RNG.
    pub rng: &'a mut ChaCha8Rng,
    /// Per-switch hash seed (so switches hash differently).
    pub hash_seed: u32,
    /// Index of the leaf the destination attaches to (from the route).
    pub dst_leaf: Option<u16>,
    /// The decisions.
    pub decision: IngressDecision,
    /// The switch's L3 table (read-only; see [`IngressCx::route`]).
    pub routes: &'a RouteTable,
    /// The register file as this pass sees it.
    pub registers: PassRegisters<'a>,
}

impl IngressCx<'_> {
    /// One stateful-ALU access to `reg[index]` (see [`RegisterFile::access`]).
    #[inline]
    pub fn register<R>(&mut self, reg: RegisterId, index: u32, f: impl FnOnce(u64) -> (u64, R)) -> Result<R, ProgramError> {
        self.registers.access(reg, index, f)
    }
    /// Chooses the egress port.
    pub fn forward(&mut self, port: PortId) {
        self.decision.egress_port = Some(port);
    }
    /// Pauses a queue (advanced flow control).
    pub fn pause_queue(&mut self, port: PortId, queue: QueueId) {
        self.decision.flow_control.push(QueueFlowControl { port, queue, pause: true });
    }
    /// Resumes a queue.
    pub fn resume_queue(&mut self, port: PortId, queue: QueueId) {
        self.decision.flow_control.push(QueueFlowControl { port, queue, pause: false });
    }
    /// The equal-cost group towards another address (the same L3 tables,
    /// for frames the program makes, e.g. a reply to the source).
    pub fn route(&self, dst: Ipv4Address) -> Option<&[PortId]> {
        self.routes.lookup(dst)
    }
    /// Index of the leaf `ip` attaches to (from the routes).
    pub fn leaf_of(&self, ip: Ipv4Address) -> Option<u16> {
        self.routes.lookup_with_leaf(ip).and_then(|(_, leaf)| leaf)
    }
    /// Emits a frame made from this packet (see [`EmittedFrame`]).
    pub fn emit(&mut self, target: EmitTarget, frame: BytesMut) {
        self.decision.emit.push(EmittedFrame { target, frame });
    }
}

/// Everything a program sees in one egress pass.
pub struct EgressCx<'a> {
    /// Dequeue timestamp.
    pub now: Nanos,
    /// The frame.
    pub frame: &'a mut BytesMut,
    /// Egress port.
    pub port: PortId,
    /// The port's current line rate (links can be degraded at run time).
    pub port_rate: BitRate,
    /// Queue it left.
    pub queue: QueueId,
    /// Enqueue timestamp.
    pub enq_ts: Nanos,
    /// Queue depth (bytes) at enqueue.
    pub enq_depth: u64,
    /// Queue depth (bytes) at dequeue, including this packet.
    pub deq_depth: u64,
    /// Exact queue depths.
    pub depths: &'a dyn QueueDepths,
    /// Drop the packet instead of sending it.
    pub drop: bool,
    /// Queue pause/resume messages.
    pub flow_control: Vec<QueueFlowControl>,
    /// The register file as this pass sees it.
    pub registers: PassRegisters<'a>,
}

impl EgressCx<'_> {
    /// One stateful-ALU access in the egress pipeline.
    #[inline]
    pub fn register<R>(&mut self, reg: RegisterId, index: u32, f: impl FnOnce(u64) -> (u64, R)) -> Result<R, ProgramError> {
        self.registers.access(reg, index, f)
    }
}

/// What the switch CPU (control plane) may do in response to a punted packet.
pub struct CpuCx<'a> {
    /// Time the CPU handles the packet.
    pub now: Nanos,
    /// Register writes to apply after the control-plane latency.
    pub register_writes: Vec<(RegisterId, u32, u64)>,
    /// Frames the CPU sends out of ports.
    pub send: Vec<(PortId, BytesMut)>,
    /// Read access to registers (control-plane reads).
    pub regs: &'a RegisterFile,
}

/// What a program learns about its switch when it is loaded (the facts a
/// P4 program is compiled or configured with: which ports face servers,
/// which leaf this is).
#[derive(Debug, Clone)]
pub struct SwitchView {
    /// Role in the fabric.
    pub role: SwitchRole,
    /// For a leaf: its index among the fabric's leaves.
    pub leaf_index: Option<u16>,
    /// Number of leaves in the fabric.
    pub leaves: u16,
    /// For a leaf: upward fan-out one tier above (see `SwitchSpec::upper_fanout`).
    pub upper_fanout: u16,
    /// Per front-panel port: whether it faces a host.
    pub host_facing: Vec<bool>,
    /// Per front-panel port: its line rate.
    pub rates: Vec<BitRate>,
    /// Per front-panel port: its MTU (IP bytes).
    pub mtus: Vec<u16>,
    /// Queues per port.
    pub queues_per_port: u8,
    /// PFC (lossless) is enabled on the switch.
    pub pfc: bool,
}

impl SwitchView {
    /// Whether `port` faces a host.
    pub fn faces_host(&self, port: PortId) -> bool {
        self.host_facing.get(port.index()).copied().unwrap_or(false)
    }
    /// Front-panel ports that face other switches (uplinks at a leaf).
    pub fn fabric_ports(&self) -> Vec<PortId> {
        (0..self.host_facing.len()).filter(|i| !self.host_facing[*i]).map(|i| PortId(i as u16)).collect()
    }
}

/// A data-plane program (a load-balancing scheme).
///
/// Call order: [`declare`](Program::declare) once at load; then per packet
/// [`ingress`](Program::ingress), and at dequeue [`egress`](Program::egress);
/// [`cpu_receive`](Program::cpu_receive) for punted packets.
pub trait Program: Send {
    /// Scheme name.
    fn name(&self) -> &'static str;
    /// Declares registers, tables, hashes and generators.
    fn declare(&mut self, d: &mut Declarations);
    /// Learns the switch it is loaded on (called once, after `declare`).
    fn attach(&mut self, _view: &SwitchView) {}
    /// Adjusts the traffic manager's queue layout (priorities, weights)
    /// before the switch is built, as the TM is configured with the program.
    fn configure_traffic_manager(&self, _tm: &mut TmConfig) {}
    /// The ingress pipeline.
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError>;
    /// The egress pipeline.
    fn egress(&mut self, _cx: &mut EgressCx<'_>) -> Result<(), ProgramError> {
        Ok(())
    }
    /// The switch CPU's handler of punted packets.
    fn cpu_receive(&mut self, _cx: &mut CpuCx<'_>, _frame: &[u8]) {}
    /// Scheme counters for `summary.json` and metrics (name, value).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Sampled distributions (name, value → number of samples), merged over
    /// switches in `summary.json` (e.g. ConWeave's reorder queues per port).
    fn distributions(&self) -> Vec<(&'static str, std::collections::BTreeMap<u64, u64>)> {
        Vec::new()
    }
    /// Current per-port state worth watching live (name, port, value) at
    /// fabric time `now`, e.g. ConWeave's reorder queues in use; exported
    /// as Prometheus gauges. Read at scrape time only.
    fn port_gauges(&self, _now: Nanos) -> Vec<(&'static str, PortId, f64)> {
        Vec::new()
    }
    /// Current per-switch state (name, value), as [`Program::port_gauges`].
    fn gauges(&self, _now: Nanos) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}

/// Declares `p` on a fresh builder and returns the declarations.
pub fn declarations_of(p: &mut dyn Program) -> Declarations {
    let mut d = Declarations::default();
    p.declare(&mut d);
    d
}

/// The switch's own L3 tables, declared next to every program (stage 0–1).
pub fn declare_l3_tables(d: &mut Declarations, routes: u32) {
    let t = |name: &str, gress, stage, kind, entries, key_bits, action_bits| TableDecl {
        name: name.into(),
        gress,
        stage,
        kind,
        entries,
        key_bits,
        action_bits,
    };
    d.table(t("ipv4_lpm", Gress::Ingress, 0, TableKind::Lpm, routes.max(512), 32, 16));
    d.table(t("nexthop_group", Gress::Ingress, 1, TableKind::Exact, 1024, 16, 64));
    d.table(t("port_mac_rewrite", Gress::Egress, 0, TableKind::Exact, 512, 9, 96));
}
