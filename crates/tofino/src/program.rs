//! What a data-plane program is: declarations (registers, tables, hashes,
//! packet generators, all with their stage) and the ingress/egress/CPU
//! hooks the switch calls for every packet.
//!
//! A scheme implements [`Program`]. The switch's fixed front end parses the
//! frame, answers ARP and PFC itself, and hands the program what it would
//! otherwise drop only if the program [claims](Program::claim) it (its own
//! control messages: another ethertype, or IPv4 addressed to the switch).
//! It runs its own L3 stage (route lookup → the equal-cost group of egress
//! ports and the program's [route data](Program::route_data)) and passes
//! both to [`Program::ingress`], whose [`Verdict`] forwards (port, queue),
//! drops, consumes, recirculates or punts to the CPU, and which may
//! pause/resume queues, mirror and emit frames. [`Program::egress`] sees
//! the packet at dequeue with what ingress bridged to it. The switch CPU
//! ([`CpuCx`]) handles punted packets, port-status changes and its own
//! timers, and writes registers and tables after the control-plane latency.
//! State lives in the switch's [`RegisterFile`] and [`TableFile`], which the
//! resource check sees, so the hardware's access rules hold on every access;
//! what egress measures for ingress to decide on (CONGA's DRE) crosses in an
//! egress-to-ingress array ([`Declarations::egress_to_ingress`]).

use super::l3::{Route, RouteTable};
use super::meters::{Color, MeterConfig, MeterId, MeterKind};
use super::registers::{PassState, ProgramError, RegisterFile, RegisterId};
use super::resources::{Gress, HashDecl, MeterDecl, RegisterDecl, ResourceUsage, TableDecl, TableKind};
use super::tables::{TableFile, TableId};
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
    port_down: Option<PortDownGenerator>,
    port_status: bool,
    published: Vec<RegisterId>,
}

/// What a program declared, as the switch loads it.
#[derive(Debug)]
pub struct Declared {
    /// The resource usage (checked against the target at load).
    pub usage: ResourceUsage,
    /// Periodic packet generators.
    pub generators: Vec<PacketGenerator>,
    /// The port-down generator, if any.
    pub port_down: Option<PortDownGenerator>,
    /// The CPU wants port-status changes ([`Program::cpu_port_status`]).
    pub port_status: bool,
    /// Egress-to-ingress arrays ([`Declarations::egress_to_ingress`]).
    pub published: Vec<RegisterId>,
}

impl Declarations {
    /// What was declared.
    #[must_use]
    pub fn into_parts(self) -> Declared {
        Declared {
            usage: self.usage,
            generators: self.generators,
            port_down: self.port_down,
            port_status: self.port_status,
            published: self.published,
        }
    }
    /// Declares a register array of `entries` x `width_bits` in `stage`.
    pub fn register(&mut self, name: &str, gress: Gress, stage: u8, entries: u32, width_bits: u32) -> RegisterId {
        self.usage.registers.push(RegisterDecl { name: name.into(), gress, stage, entries, width_bits });
        RegisterId((self.usage.registers.len() - 1) as u16)
    }
    /// Declares an egress-to-ingress array: an ingress register array of
    /// `entries` x `width_bits` in `stage` that the egress pipeline writes
    /// ([`EgressCx::publish`], at dequeue) and the ingress pipeline reads
    /// as a snapshot ([`IngressCx::snapshot`]: any entry, several per pass,
    /// no SALU ordering), the way Tofino2's ghost threads carry the traffic
    /// manager's per-queue state to ingress. It is counted as an ingress
    /// register (one SALU, its SRAM), so the resource check sees the state.
    /// On the hardware a program-defined value takes this path only as a
    /// small update packet from egress; the model applies it at once.
    pub fn egress_to_ingress(&mut self, name: &str, stage: u8, entries: u32, width_bits: u32) -> RegisterId {
        let id = self.register(name, Gress::Ingress, stage, entries, width_bits);
        self.published.push(id);
        id
    }
    /// Declares a meter array of `entries` in `stage` (see
    /// [`crate::meters`]); the control plane configures its entries
    /// ([`Program::control_plane_init`]).
    pub fn meter(&mut self, name: &str, gress: Gress, stage: u8, entries: u32, kind: MeterKind) -> MeterId {
        self.usage.meters.push(MeterDecl { name: name.into(), gress, stage, entries, kind });
        MeterId((self.usage.meters.len() - 1) as u16)
    }
    /// Declares a match table; the switch CPU fills it (exact match, see
    /// [`crate::tables`]), the pipelines look it up.
    pub fn table(&mut self, table: TableDecl) -> TableId {
        self.usage.tables.push(table);
        TableId((self.usage.tables.len() - 1) as u16)
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
    /// Declares the port-down trigger of the packet generator (Tofino2:
    /// a packet enters ingress when a port goes down; a later declaration
    /// replaces an earlier one).
    pub fn port_down_generator(&mut self, g: PortDownGenerator) {
        self.port_down = Some(g);
    }
    /// Registers the CPU for port-status changes (the driver's port-status
    /// callback): [`Program::cpu_port_status`] is called after the
    /// control-plane latency whenever a front-panel port goes up or down,
    /// and [`Program::cpu_port_rate`] when its line rate changes.
    pub fn port_status_to_cpu(&mut self) {
        self.port_status = true;
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

/// The packet generator's port-down trigger: when a front-panel port goes
/// down, a frame of `frame_len` bytes (generator ethertype, `id` in its
/// first payload byte, the port number big-endian in the next two; read it
/// with [`port_down_port`]) enters ingress with [`PacketSource::Generator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortDownGenerator {
    /// Generator id passed to the program.
    pub id: u8,
    /// Frame length.
    pub frame_len: u16,
}

/// The port a port-down generator frame reports.
pub fn port_down_port(frame: &[u8]) -> Option<PortId> {
    let b = frame.get(15..17)?;
    Some(PortId(u16::from_be_bytes([b[0], b[1]])))
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
    /// To the switch CPU through the CPU port ([`Program::cpu_receive`]):
    /// a mirrored copy whose mirror header carries what the program put in
    /// the frame, as Tofino's mirror sessions to the CPU port do.
    Cpu,
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

/// What happens to the packet itself after ingress. Several hooks of one
/// program may give verdicts for one packet; [`Verdict::merge`] keeps the
/// one of highest [`Verdict::precedence`] (the order the hardware applies
/// its drop, recirculate, copy-to-CPU and forward bits), the later of equal
/// precedence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing decided: the packet is dropped, counted as a program drop.
    #[default]
    Undecided,
    /// Out of a front-panel port (in [`IngressDecision::queue`], default by
    /// traffic class).
    Forward(PortId),
    /// Punted to the switch CPU.
    ToCpu,
    /// Around the recirculation port, back into ingress.
    Recirculate,
    /// Dropped, counted as a program drop.
    Drop,
    /// Consumed by the program (e.g. a control packet for this switch): it
    /// ends here and is not counted as a drop.
    Consume,
}

impl Verdict {
    /// Rank when verdicts meet: consume > drop > recirculate > to CPU >
    /// forward > undecided.
    pub fn precedence(&self) -> u8 {
        match self {
            Verdict::Undecided => 0,
            Verdict::Forward(_) => 1,
            Verdict::ToCpu => 2,
            Verdict::Recirculate => 3,
            Verdict::Drop => 4,
            Verdict::Consume => 5,
        }
    }
    /// Keeps `v` if it ranks at least as high as the current verdict.
    pub fn merge(&mut self, v: Verdict) {
        if v.precedence() >= self.precedence() {
            *self = v;
        }
    }
    /// The egress port, if the packet is forwarded.
    pub fn forward_port(&self) -> Option<PortId> {
        match self {
            Verdict::Forward(p) => Some(*p),
            _ => None,
        }
    }
}

/// The ingress pipeline's decisions for one packet.
#[derive(Debug, Clone, Default)]
pub struct IngressDecision {
    /// What happens to the packet (set through [`IngressCx`]'s methods,
    /// which merge by precedence; assign to override).
    pub verdict: Verdict,
    /// Queue at the egress port (default: by traffic class).
    pub queue: Option<QueueId>,
    /// Metadata bridged to the egress pipeline ([`EgressCx::bridged`]).
    pub bridged: u32,
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
    /// Executes meter `id[index]` on a packet of `bytes` at `now` (one
    /// access per pass, as a register).
    #[inline]
    pub fn meter(&mut self, id: MeterId, index: u32, now: Nanos, bytes: u64) -> Result<Color, ProgramError> {
        self.regs.execute_meter(&mut self.pass, id, index, now, bytes)
    }
    /// Egress's write into an egress-to-ingress array.
    #[inline]
    pub fn publish(&mut self, reg: RegisterId, index: u32, value: u64) -> Result<(), ProgramError> {
        self.regs.publish(reg, index, value)
    }
    /// Ingress's snapshot read of an egress-to-ingress array.
    #[inline]
    pub fn snapshot(&self, reg: RegisterId, index: u32) -> Result<u64, ProgramError> {
        self.regs.snapshot(reg, index)
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
    /// Line rate per port now (links can be degraded at run time; the
    /// control plane knows each port's speed).
    pub port_rates: &'a [BitRate],
    /// Ingress-visible queue depths (ghost-thread snapshot).
    pub depths: &'a dyn QueueDepths,
    /// The node's seeded RNG.
    pub rng: &'a mut ChaCha8Rng,
    /// Per-switch hash seed (so switches hash differently).
    pub hash_seed: u32,
    /// The program's data of the destination's route (see
    /// [`Program::route_data`]); `None` without a route or data.
    pub route_data: Option<u32>,
    /// The frame reached the program because it [claimed](Program::claim)
    /// it (another ethertype, or IPv4 addressed to this switch): `group`
    /// is empty and the switch decremented no TTL.
    pub claimed: bool,
    /// The decisions, written where the switch keeps them (the switch reads
    /// each field where the program wrote it, not a copy of the whole).
    pub decision: &'a mut IngressDecision,
    /// The switch's L3 table (read-only; see [`IngressCx::route`]).
    pub routes: &'a RouteTable,
    /// The register file as this pass sees it.
    pub registers: PassRegisters<'a>,
    /// The program's tables (read-only in the pipeline).
    pub tables: &'a TableFile,
}

impl IngressCx<'_> {
    /// One stateful-ALU access to `reg[index]` (see [`RegisterFile::access`]).
    #[inline]
    pub fn register<R>(&mut self, reg: RegisterId, index: u32, f: impl FnOnce(u64) -> (u64, R)) -> Result<R, ProgramError> {
        self.registers.access(reg, index, f)
    }
    /// Executes meter `id[index]` on this packet (its whole frame length).
    #[inline]
    pub fn meter(&mut self, id: MeterId, index: u32) -> Result<Color, ProgramError> {
        let (now, bytes) = (self.now, self.frame.len() as u64);
        self.registers.meter(id, index, now, bytes)
    }
    /// Entry `index` of an egress-to-ingress array as egress last
    /// [published](EgressCx::publish) it (see
    /// [`Declarations::egress_to_ingress`]).
    #[inline]
    pub fn snapshot(&self, reg: RegisterId, index: u32) -> Result<u64, ProgramError> {
        self.registers.snapshot(reg, index)
    }
    /// Chooses the egress port.
    pub fn forward(&mut self, port: PortId) {
        self.decision.verdict.merge(Verdict::Forward(port));
    }
    /// Chooses the egress port if there is one; `None` takes back an
    /// earlier forward (nothing else).
    pub fn forward_to(&mut self, port: Option<PortId>) {
        match port {
            Some(p) => self.forward(p),
            None if matches!(self.decision.verdict, Verdict::Forward(_)) => self.decision.verdict = Verdict::Undecided,
            None => {}
        }
    }
    /// Drops the packet.
    pub fn drop_packet(&mut self) {
        self.decision.verdict.merge(Verdict::Drop);
    }
    /// Consumes the packet (it ends here, not counted as a drop).
    pub fn consume(&mut self) {
        self.decision.verdict.merge(Verdict::Consume);
    }
    /// Sends the packet around the recirculation port.
    pub fn recirculate(&mut self) {
        self.decision.verdict.merge(Verdict::Recirculate);
    }
    /// Punts the packet to the CPU.
    pub fn to_cpu(&mut self) {
        self.decision.verdict.merge(Verdict::ToCpu);
    }
    /// Metadata for the egress pipeline ([`EgressCx::bridged`]).
    pub fn bridge(&mut self, meta: u32) {
        self.decision.bridged = meta;
    }
    /// Looks `key` up in a table of the program.
    #[inline]
    pub fn table(&self, table: TableId, key: u64) -> Result<Option<u64>, ProgramError> {
        self.tables.lookup(table, key)
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
    /// The program's route data of the route to `ip` (see
    /// [`Program::route_data`]).
    pub fn route_data_of(&self, ip: Ipv4Address) -> Option<u32> {
        self.routes.lookup_with_data(ip).and_then(|(_, d)| d)
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
    /// The port it entered on (`None`: generated, recirculated, from the
    /// CPU or made by the program).
    pub in_port: Option<PortId>,
    /// What ingress bridged ([`IngressCx::bridge`]; 0 if nothing).
    pub bridged: u32,
    /// The node's seeded RNG.
    pub rng: &'a mut ChaCha8Rng,
    /// Egress port.
    pub port: PortId,
    /// The port's current line rate (links can be degraded at run time).
    pub port_rate: BitRate,
    /// Queue it left.
    pub queue: QueueId,
    /// Enqueue timestamp, which is also the ingress timestamp (the model's
    /// ingress pipeline takes no time).
    pub enq_ts: Nanos,
    /// Queue depth (bytes) at enqueue.
    pub enq_depth: u64,
    /// Queue depth (bytes) at dequeue, including this packet.
    pub deq_depth: u64,
    /// Exact queue depths.
    pub depths: &'a dyn QueueDepths,
    /// Drop the packet instead of sending it.
    pub drop: bool,
    /// The program took the packet (e.g. a telemetry probe at its sink):
    /// not sent and not counted as a drop.
    pub consume: bool,
    /// Queue pause/resume messages.
    pub flow_control: Vec<QueueFlowControl>,
    /// The register file as this pass sees it.
    pub registers: PassRegisters<'a>,
    /// The program's tables (read-only in the pipeline).
    pub tables: &'a TableFile,
    /// Frames made from this packet (sent after it).
    pub emit: Vec<EmittedFrame>,
    /// Mirror a copy (after the packet is sent).
    pub mirror: Option<MirrorRequest>,
}

impl EgressCx<'_> {
    /// One stateful-ALU access in the egress pipeline.
    #[inline]
    pub fn register<R>(&mut self, reg: RegisterId, index: u32, f: impl FnOnce(u64) -> (u64, R)) -> Result<R, ProgramError> {
        self.registers.access(reg, index, f)
    }
    /// Executes meter `id[index]` on this packet (its whole frame length).
    #[inline]
    pub fn meter(&mut self, id: MeterId, index: u32) -> Result<Color, ProgramError> {
        let (now, bytes) = (self.now, self.frame.len() as u64);
        self.registers.meter(id, index, now, bytes)
    }
    /// Writes entry `index` of an egress-to-ingress array (see
    /// [`Declarations::egress_to_ingress`]); ingress sees it from the next
    /// packet on.
    #[inline]
    pub fn publish(&mut self, reg: RegisterId, index: u32, value: u64) -> Result<(), ProgramError> {
        self.registers.publish(reg, index, value)
    }
    /// The parsed headers of the frame (parsed on request: egress programs
    /// that do not need them pay nothing); `None` if it does not parse.
    pub fn info(&self) -> Option<FrameInfo> {
        FrameInfo::parse(self.frame).ok()
    }
    /// Looks `key` up in a table of the program.
    #[inline]
    pub fn table(&self, table: TableId, key: u64) -> Result<Option<u64>, ProgramError> {
        self.tables.lookup(table, key)
    }
    /// Emits a frame made from this packet (see [`EmittedFrame`]).
    pub fn emit(&mut self, target: EmitTarget, frame: BytesMut) {
        self.emit.push(EmittedFrame { target, frame });
    }
}

/// Counters of a front-panel port, as the switch CPU reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
}

/// What the switch CPU (control plane) sees and does when it handles an
/// event (a punted packet, a port-status change, one of its timers).
/// Register and table writes take effect after the switch's control-plane
/// latency, in the order they were made; frames leave at once.
pub struct CpuCx<'a> {
    /// Time the CPU handles the event.
    pub now: Nanos,
    /// Register writes to apply after the control-plane latency.
    pub register_writes: Vec<(RegisterId, u32, u64)>,
    /// Table writes (install `Some`, remove `None`) to apply after the
    /// control-plane latency.
    pub table_writes: Vec<(TableId, u64, Option<u64>)>,
    /// Timers to arm: (time, token passed back to [`Program::cpu_timer`]).
    pub timers: Vec<(Nanos, u64)>,
    /// Frames the CPU sends out of ports.
    pub send: Vec<(PortId, BytesMut)>,
    /// Read access to registers (control-plane reads).
    pub regs: &'a RegisterFile,
    /// Read access to the program's tables.
    pub tables: &'a TableFile,
    /// Link status per front-panel port.
    pub port_up: &'a [bool],
    /// Counters per front-panel port.
    pub port_stats: &'a [PortStats],
    /// Exact queue depths.
    pub depths: &'a dyn QueueDepths,
}

impl CpuCx<'_> {
    /// Writes `reg[index]` after the control-plane latency.
    pub fn write_register(&mut self, reg: RegisterId, index: u32, value: u64) {
        self.register_writes.push((reg, index, value));
    }
    /// Installs (`Some`) or removes (`None`) `key` of `table` after the
    /// control-plane latency.
    pub fn write_table(&mut self, table: TableId, key: u64, data: Option<u64>) {
        self.table_writes.push((table, key, data));
    }
    /// Calls [`Program::cpu_timer`] with `token` at `at`.
    pub fn timer(&mut self, at: Nanos, token: u64) {
        self.timers.push((at, token));
    }
    /// Sends a frame out of a front-panel port (control queue).
    pub fn send(&mut self, port: PortId, frame: BytesMut) {
        self.send.push((port, frame));
    }
}

/// What a program learns about its switch when it is loaded (the facts a
/// P4 program is compiled or configured with: which ports face servers,
/// which leaf this is).
#[derive(Debug, Clone)]
pub struct SwitchView {
    /// The switch's own IPv4 address (what its control messages carry;
    /// IPv4 frames to it reach the program if it [claims](Program::claim)
    /// them).
    pub address: Ipv4Address,
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
    /// The routes the control plane installs (prefix, equal-cost ports,
    /// destination leaf): what a program's control plane derives address
    /// ranges per port from.
    pub routes: Vec<Route>,
    /// For a switch one tier above others (a spine, an aggregation or a
    /// core switch): its position in the upward equal-cost groups of the
    /// switches below it (the same at every one of them in a generated
    /// fabric); `None` where there is none or they disagree.
    pub tier_position: Option<u16>,
    /// The largest number of hosts on one leaf of the fabric.
    pub hosts_per_leaf: u16,
    /// Per leaf index: an address routed to that leaf (its first host's).
    pub leaf_addresses: Vec<Ipv4Address>,
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

/// What the control plane installs when the program is loaded, before the
/// switch takes traffic (the initialisation phase of P4TE §5: meter rates,
/// initial table entries, initial register values).
#[derive(Debug, Clone, Default)]
pub struct ControlPlaneInit {
    /// Meter entries to configure.
    pub meters: Vec<(MeterId, u32, MeterConfig)>,
    /// Table entries to install.
    pub tables: Vec<(TableId, u64, u64)>,
    /// Register entries to set.
    pub registers: Vec<(RegisterId, u32, u64)>,
}

/// A data-plane program (a load-balancing scheme).
///
/// Call order: [`declare`](Program::declare) once at load, then
/// [`configure_traffic_manager`](Program::configure_traffic_manager),
/// [`attach`](Program::attach) and [`route_data`](Program::route_data) per
/// route; then per packet [`claim`](Program::claim) (only for frames the
/// front end would drop), [`ingress`](Program::ingress), and at dequeue
/// [`egress`](Program::egress); on the switch CPU
/// [`cpu_receive`](Program::cpu_receive) for punted packets,
/// [`cpu_port_status`](Program::cpu_port_status) when a port changes and
/// [`cpu_timer`](Program::cpu_timer) for its timers, each after the
/// control-plane latency.
pub trait Program: Send {
    /// Scheme name.
    fn name(&self) -> &'static str;
    /// Declares registers, tables, hashes and generators.
    fn declare(&mut self, d: &mut Declarations);
    /// Learns the switch it is loaded on (called once, after `declare`).
    fn attach(&mut self, _view: &SwitchView) {}
    /// Whether the program can run on this switch of this fabric (called
    /// after [`attach`](Program::attach)): `Err(why)` refuses the fabric
    /// at load with that reason (e.g. a scheme made for fat-trees on a
    /// leaf-spine).
    fn check_fabric(&self, _view: &SwitchView) -> Result<(), String> {
        Ok(())
    }
    /// What the control plane installs at load (called once, after
    /// [`attach`](Program::attach)); default nothing.
    fn control_plane_init(&mut self) -> ControlPlaneInit {
        ControlPlaneInit::default()
    }
    /// Adjusts the traffic manager's queue layout (priorities, weights)
    /// before the switch is built, as the TM is configured with the program.
    fn configure_traffic_manager(&self, _tm: &mut TmConfig) {}
    /// The program's data of a route, which ingress gets with every
    /// lookup ([`IngressCx::route_data`]): what the control plane installs
    /// as the route's action data (e.g. the destination's leaf, an
    /// address-bit group, a per-metric group id). Called once per route
    /// at load; default none.
    fn route_data(&self, _route: &Route) -> Option<u32> {
        None
    }
    /// Whether the program takes a frame the fixed front end would drop:
    /// another ethertype than IPv4/ARP/PFC (`for_switch` false), or IPv4
    /// addressed to the switch's own address (`for_switch` true). A claimed
    /// frame goes to [`Program::ingress`] with [`IngressCx::claimed`] set.
    fn claim(&self, _info: &FrameInfo, _for_switch: bool) -> bool {
        false
    }
    /// The ingress pipeline.
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError>;
    /// The egress pipeline.
    fn egress(&mut self, _cx: &mut EgressCx<'_>) -> Result<(), ProgramError> {
        Ok(())
    }
    /// Whether [`Program::egress`] does anything. A program that keeps the
    /// default (empty) egress says `false`, and the switch then builds no
    /// [`EgressCx`] for its packets (asked once, when the switch is built).
    /// Default `true`: a program that forgets this only runs slower.
    fn has_egress(&self) -> bool {
        true
    }
    /// The switch CPU's handler of punted packets.
    fn cpu_receive(&mut self, _cx: &mut CpuCx<'_>, _frame: &[u8]) {}
    /// The switch CPU learns that a front-panel port went up or down (the
    /// driver's port-status callback).
    fn cpu_port_status(&mut self, _cx: &mut CpuCx<'_>, _port: PortId, _up: bool) {}
    /// The switch CPU learns that a front-panel port's line rate changed
    /// (a degraded or restored link; with
    /// [`Declarations::port_status_to_cpu`]).
    fn cpu_port_rate(&mut self, _cx: &mut CpuCx<'_>, _port: PortId, _rate: BitRate) {}
    /// A timer the CPU armed ([`CpuCx::timer`]) fired.
    fn cpu_timer(&mut self, _cx: &mut CpuCx<'_>, _token: u64) {}
    /// Scheme counters for `summary.json` and metrics (name, value).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Sampled distributions (name, value → number of samples), merged over
    /// switches in `summary.json` (e.g. ConWeave's reorder queues per port).
    fn distributions(&self) -> Vec<(&'static str, std::collections::BTreeMap<u64, u64>)> {
        Vec::new()
    }
    /// Current per-port state worth watching live (name, port, value),
    /// e.g. ConWeave's reorder queues in use; exported as Prometheus
    /// gauges. Read at scrape time only, through the control plane's view.
    fn port_gauges(&self, _view: &ScrapeView<'_>) -> Vec<(&'static str, PortId, f64)> {
        Vec::new()
    }
    /// Current per-switch state (name, value), as [`Program::port_gauges`].
    fn gauges(&self, _view: &ScrapeView<'_>) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
    /// The in-band telemetry this switch holds as an INT sink, one entry
    /// per (source leaf, port) path it has heard of: what an INT collector
    /// reads (`weft_int_*` series, `summary.json`). Read at scrape time.
    fn path_telemetry(&self, _view: &ScrapeView<'_>) -> Vec<PathTelemetry> {
        Vec::new()
    }
}

/// One path's telemetry at an INT sink (see [`Program::path_telemetry`]):
/// the bottleneck values last carried by a packet from `source_leaf` that
/// arrived on `port`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PathTelemetry {
    /// Leaf index of the packets' source.
    pub source_leaf: u16,
    /// Port of this switch they arrived on (the path's last hop).
    pub port: u16,
    /// Largest hop latency along the path, ns.
    pub hop_latency_ns: u32,
    /// Largest queue occupancy along the path, bytes.
    pub queue_bytes: u32,
    /// Largest link utilisation (DRE value) along the path.
    pub utilization: u32,
    /// The program's degree of congestion of the path.
    pub congestion: f64,
    /// Reports (packets and probes) the sink has had of the path.
    pub reports: u64,
    /// The port is the best one towards the source leaf.
    pub best: bool,
}

/// What a program's gauges see at scrape time: the control plane's
/// read-only view of the switch (no pass rules, nothing changes).
#[derive(Clone, Copy)]
pub struct ScrapeView<'a> {
    /// Fabric time of the scrape.
    pub now: Nanos,
    /// The register file.
    pub registers: &'a RegisterFile,
    /// The program's tables.
    pub tables: &'a TableFile,
    /// Line rate per port now.
    pub port_rates: &'a [BitRate],
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
