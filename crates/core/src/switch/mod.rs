//! A sans-IO switch: the Tofino model + a loaded program + ports.
//!
//! [`Switch`] never reads a clock or a socket. Call order (as
//! `quinn-proto`'s `Connection`):
//! 1. inputs: [`Switch::handle_frame`] for a frame fully received on a
//!    port at `now`, [`Switch::handle_timeout`] when `now` reaches
//!    [`Switch::poll_timeout`], [`Switch::set_port_up`] /
//!    [`Switch::set_port_rate`] for link changes;
//! 2. outputs: every input appends [`Transmit`]s to the caller's buffer —
//!    a frame leaving `port`, its first bit at `start` and last bit at `end`
//!    (the driver adds the link's propagation delay);
//! 3. after each input, re-arm one timer from [`Switch::poll_timeout`].
//!
//! Forwarding: parse → (PFC frames: pause egress classes; ARP for a
//! gateway: answer; another ethertype, or IPv4 to the switch's own address
//! [`switch_address`]: to the program if it claims it, else dropped) →
//! IPv4: destination MAC must be the port's, TTL > 1, LPM route →
//! equal-cost group and the program's route data → the program's ingress
//! gives its verdict (port and queue, drop, consume, recirculate, CPU) →
//! TTL and MACs rewritten → traffic manager (with the ingress port and the
//! bridged metadata) → the port drains at line rate (serialization exact
//! to the ns, never above the rate) → the program's egress → ECN mark →
//! wire. Recirculation, mirroring, the CPU port (punted packets,
//! port-status events and CPU timers, each reaching the CPU after the
//! control-plane latency, whose register and table writes apply one
//! latency later), the packet generator (periodic and port-down) are
//! modelled here (docs/ARCHITECTURE.md#the-tofino2-model). On a software
//! target (`bmv2`) every frame from a port first waits in one input buffer
//! for the one ingress thread, which serves a frame per drawn service time
//! (docs/ARCHITECTURE.md#the-bmv2-target); ports rated in packets hold
//! every frame for a full-size frame's time.
//! Malformed frames are counted and dropped, never panic.

use crate::fabric::{switch_address, NodeSpec, PortSpec, SwitchRole};
use crate::serializer::Serializer;
use bytes::BytesMut;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use weft_schemes as schemes;
use weft_tofino::l3::{GroupId, RouteTable};
use weft_tofino::program::{
    declarations_of, declare_l3_tables, CpuCx, Declared, EgressCx, EmitTarget, EmittedFrame, IngressDecision, MirrorRequest,
    PacketGenerator, PacketSource, PassRegisters, PortDownGenerator, PortStats, QueueDepths, ScrapeView, SwitchView, Verdict,
};
use weft_tofino::registers::PassState;
use weft_tofino::tables::{TableFile, TableId};
use weft_tofino::tm::{Arrival, Dequeued, IdleArrival, PassThrough, PfcTransition, QueueStats};
use weft_tofino::{
    Gress, IngressCx, Program, ProgramError, RegisterFile, ResourceError, ResourceUsage, TargetProfile, TmConfig, TrafficManager,
};
use weft_wire::frame::{ControlFrameBytes, FrameInfo, FrameKind};
use weft_wire::ids::{NodeId, PortId, QueueId};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::{arp, ethernet, ipv4, pfc, EtherType, EthernetAddress, Ipv4Address};

pub use crate::transmit::Transmit;

/// Settings of a switch instance (beyond its fabric spec).
#[derive(Debug, Clone)]
pub struct SwitchConfig {
    /// Target profile.
    pub target: TargetProfile,
    /// Traffic manager configuration.
    pub tm: TmConfig,
    /// How stale the ingress view of queue depths may be.
    pub snapshot_period_ns: Nanos,
    /// Control-plane latency (CPU register/table writes).
    pub cpu_latency_ns: Nanos,
    /// Seed of the switch's RNG (derive from the run seed and node id).
    pub seed: u64,
    /// Panic on a program error (tests); otherwise count and drop.
    pub strict: bool,
}

impl SwitchConfig {
    /// Tofino2 with 32 queues per port and the ConWeave setup's 9 MB buffer,
    /// no ECN, a 1 µs ingress depth snapshot, 10 µs control-plane latency.
    pub fn tofino2(seed: u64, strict: bool) -> Self {
        let target = TargetProfile::tofino2();
        SwitchConfig {
            tm: TmConfig::standard(32, 9_000_000, target.cell_bytes, None),
            target,
            snapshot_period_ns: 1000,
            cpu_latency_ns: 10_000,
            seed,
            strict,
        }
    }
}

/// Errors when building a switch.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    /// The program does not fit the target.
    #[error("switch `{switch}`: {source}")]
    Resources {
        /// Switch name.
        switch: String,
        /// Violation.
        #[source]
        source: ResourceError,
    },
    /// Unknown scheme or bad parameter.
    #[error("switch `{switch}`: {source}")]
    Scheme {
        /// Switch name.
        switch: String,
        /// Cause.
        #[source]
        source: schemes::SchemeError,
    },
    /// The program's declarations do not hold together.
    #[error("switch `{switch}`: {source}")]
    Program {
        /// Switch name.
        switch: String,
        /// Cause.
        #[source]
        source: ProgramError,
    },
    /// The node is not a switch.
    #[error("node `{0}` is not a switch")]
    NotASwitch(String),
    /// The switch runs a program given by the caller
    /// ([`Switch::with_program`]), which a restart cannot load again.
    #[error("switch `{0}` runs a program built outside its spec; it cannot restart")]
    NotRestartable(String),
    /// The scheme cannot run on this fabric.
    #[error("scheme `{scheme}` cannot run on this fabric (switch `{switch}`): {why}")]
    Unsupported {
        /// Switch name.
        switch: String,
        /// Scheme.
        scheme: &'static str,
        /// Why.
        why: String,
    },
}

/// Switch-wide counters.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct SwitchCounters {
    /// Frames received on front-panel ports.
    pub rx_frames: u64,
    /// Pipeline passes (ingress), incl. recirculations and generated packets.
    pub pipeline_passes: u64,
    /// Malformed frames dropped (truncated, bad checksum...).
    pub drop_malformed: u64,
    /// Frames longer than the port MTU.
    pub drop_oversize: u64,
    /// Unknown EtherType.
    pub drop_unknown_ethertype: u64,
    /// IPv4 frames not addressed to the port's MAC.
    pub drop_not_for_us: u64,
    /// TTL expired.
    pub drop_ttl: u64,
    /// No route.
    pub drop_no_route: u64,
    /// Dropped by the program (or no egress chosen).
    pub drop_program: u64,
    /// Dropped by the traffic manager (threshold or buffer full).
    pub drop_tm: u64,
    /// Frames lost because their port went down.
    pub drop_link_down: u64,
    /// Program errors (double register access, stage order...).
    pub program_errors: u64,
    /// ARP replies sent for gateway addresses.
    pub arp_replies: u64,
    /// Recirculated passes.
    pub recirculations: u64,
    /// Mirrored copies.
    pub mirrored: u64,
    /// Packets delivered to the CPU.
    pub to_cpu: u64,
    /// Packets from the packet generator.
    pub generated: u64,
    /// Frames marked CE.
    pub ecn_marks: u64,
    /// Packets the program consumed (its own control and timer packets).
    #[serde(default)]
    pub consumed_by_program: u64,
    /// Restarts ([`Switch::restart`]). Written only when non-zero, so the
    /// results of runs without restarts keep their bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u64,
    /// Routing tables installed by routing updates (`--routing-update`;
    /// absent when 0, so results without them keep their bytes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub route_updates: u64,
    /// Frames lost from the queues when the switch restarted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drop_restart: u64,
    /// Recirculated packets (the programs' timers) the traffic manager
    /// refused: more than the recirculation queue's guaranteed minimum was
    /// queued while the shared buffer was full. Not in `drop_tm`; written
    /// only when non-zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drop_recirculation: u64,
    /// Frames a software target (`bmv2`) dropped because its input buffer
    /// was full: they arrived faster than its pipeline serves packets.
    /// Written only when non-zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drop_input_buffer: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl SwitchCounters {
    /// Frames dropped, every cause together.
    pub fn drops(&self) -> u64 {
        self.drop_malformed
            + self.drop_oversize
            + self.drop_unknown_ethertype
            + self.drop_not_for_us
            + self.drop_ttl
            + self.drop_no_route
            + self.drop_program
            + self.drop_tm
            + self.drop_link_down
            + self.drop_restart
            + self.drop_recirculation
            + self.drop_input_buffer
    }
}

/// Per-port counters.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// PFC pause (XOFF) frames sent upstream (incl. refreshes).
    pub pfc_pause_sent: u64,
    /// PFC resume (XON) frames sent.
    pub pfc_resume_sent: u64,
    /// PFC frames received.
    pub pfc_received: u64,
}

/// One front-panel port, laid out by what a packet reads: a departure
/// reads and writes the first two lines (the serializer and packet slot;
/// the control frames waiting, the sent counters and the MACs the frame is
/// rewritten with), an arrival the third (the received counters, the MTU
/// and MAC it checks); the rest is read when the port is reconfigured.
/// The MTU and MACs are copies of `spec`'s, which never changes.
#[derive(Debug)]
#[repr(C, align(64))]
struct Port {
    serializer: Serializer,
    /// With `packet_slot_ns`: the next frame starts no earlier.
    next_start: Nanos,
    /// Ports rated in packets (`SwitchSpec::queue_rate_packets`): the time
    /// one full-size frame holds the port at its rate; 0 otherwise.
    packet_slot_ns: Nanos,
    mac_control: VecDeque<BytesMut>,
    tx_frames: u64,
    tx_bytes: u64,
    /// `spec.peer_mac`, `spec.mac`: a departing frame's destination and
    /// source.
    rewrite: [EthernetAddress; 2],
    rx_frames: u64,
    rx_bytes: u64,
    /// `spec.mtu`.
    mtu: u16,
    /// `spec.mac`: what an arriving frame must be addressed to.
    mac: EthernetAddress,
    up: bool,
    timer_at: Option<Nanos>,
    pfc_pause_sent: u64,
    pfc_resume_sent: u64,
    pfc_received: u64,
    spec: PortSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Port(u16),
    PfcRefresh(u16, u8),
    Internal,
    Generator(u8),
    CpuWrites,
    CpuPortStatus(u16, bool),
    CpuPortRate(u16, BitRate),
    CpuAlarm(u64),
    /// A software target's ingress thread finishes its packet.
    SoftwarePipeline,
}

/// The input buffer and ingress thread of a software target
/// (`TargetProfile::software`).
#[derive(Debug)]
struct SoftwareIngress {
    model: weft_tofino::SoftwarePipeline,
    /// Frames in arrival order; the first is in service while `busy`.
    input: VecDeque<(PortId, BytesMut)>,
    busy: bool,
    /// Service-time draws, apart from the program's RNG so that the
    /// program sees the same random numbers on every target.
    rng: ChaCha8Rng,
}

impl SoftwareIngress {
    fn service_ns(&mut self) -> Nanos {
        let u: f64 = rand::Rng::random(&mut self.rng);
        self.model.service_ns(-(1.0 - u).ln())
    }
}

impl Port {
    fn new(spec: &PortSpec) -> Self {
        Port {
            serializer: Serializer::new(spec.rate),
            next_start: 0,
            packet_slot_ns: 0,
            mac_control: VecDeque::new(),
            tx_frames: 0,
            tx_bytes: 0,
            rewrite: [spec.peer_mac, spec.mac],
            rx_frames: 0,
            rx_bytes: 0,
            mtu: spec.mtu,
            mac: spec.mac,
            up: true,
            timer_at: None,
            pfc_pause_sent: 0,
            pfc_resume_sent: 0,
            pfc_received: 0,
            spec: spec.clone(),
        }
    }
    fn counters(&self) -> PortCounters {
        PortCounters {
            tx_frames: self.tx_frames,
            tx_bytes: self.tx_bytes,
            rx_frames: self.rx_frames,
            rx_bytes: self.rx_bytes,
            pfc_pause_sent: self.pfc_pause_sent,
            pfc_resume_sent: self.pfc_resume_sent,
            pfc_received: self.pfc_received,
        }
    }
    /// Takes over `old`'s counters (a restarted switch's port).
    fn carry_counters(&mut self, old: &Port) {
        self.tx_frames = old.tx_frames;
        self.tx_bytes = old.tx_bytes;
        self.rx_frames = old.rx_frames;
        self.rx_bytes = old.rx_bytes;
        self.pfc_pause_sent = old.pfc_pause_sent;
        self.pfc_resume_sent = old.pfc_resume_sent;
        self.pfc_received = old.pfc_received;
    }
    /// When the port can start its next frame.
    fn ready_at(&self) -> Nanos {
        self.serializer.busy_until().max(self.next_start)
    }
    fn is_busy(&self, now: Nanos) -> bool {
        self.ready_at() > now
    }
    fn set_packet_slot(&mut self, rated_in_packets: bool, rate: BitRate) {
        self.packet_slot_ns = if rated_in_packets { rate.serialization_ns(self.spec.mtu as usize + ethernet::HEADER_LEN) } else { 0 };
    }
}

/// Where a packet is admitted, and the metadata that travels with it
/// through the traffic manager to the egress pipeline (on the
/// recirculation port: the original port and pass count, see
/// `Switch::recirculate`).
#[derive(Debug, Clone, Copy)]
struct Admission {
    port: PortId,
    queue: QueueId,
    /// The front-panel port and ingress CoS it is accounted to for PFC.
    arrival: Option<Arrival>,
    bridged: u32,
}

impl Admission {
    /// A packet the switch or the program made: no ingress port, nothing
    /// bridged.
    fn plain(port: PortId, queue: QueueId) -> Self {
        Admission { port, queue, arrival: None, bridged: 0 }
    }
}

/// A control-plane write waiting for the control-plane latency.
#[derive(Debug, Clone, Copy)]
enum CpuWrite {
    Register(weft_tofino::RegisterId, u32, u64),
    Table(TableId, u64, Option<u64>),
}

/// What the switch CPU handles.
enum CpuEvent<'f> {
    Packet(&'f [u8]),
    PortStatus(PortId, bool),
    PortRate(PortId, BitRate),
    Timer(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InternalKind {
    Recirculate { original: PortId, pass: u8 },
    Cpu,
}

#[derive(Debug, Default)]
struct PortSnapshot {
    taken_at: Option<Nanos>,
    queues: Vec<u64>,
    cells: Vec<u64>,
    total: u64,
}

/// What the front end admitted to the ingress pipeline.
struct Admitted<'i> {
    /// The parse, where `FrameInfo::parse` returned it (a copy would read
    /// 16 bytes at a time what the parse wrote a field at a time, which
    /// the CPU cannot forward from its store buffer).
    info: &'i FrameInfo,
    /// The front-panel port it entered on (or, recirculated, first
    /// entered on).
    in_port: Option<PortId>,
    /// IPv4 to the switch's own address that the program claimed.
    for_switch: bool,
    /// Claimed by the program (`for_switch`, or another ethertype).
    claimed: bool,
    /// The route: equal-cost group and the program's route data.
    route: Option<(GroupId, Option<u32>)>,
}

struct DepthSnapshot<'a> {
    tm: &'a TrafficManager,
    now: Nanos,
    period: Nanos,
    ports: &'a RefCell<Vec<PortSnapshot>>,
}

impl DepthSnapshot<'_> {
    fn with_port<R>(&self, port: PortId, f: impl FnOnce(&PortSnapshot) -> R) -> R {
        let mut ports = self.ports.borrow_mut();
        let Some(s) = ports.get_mut(port.index()) else {
            return f(&PortSnapshot::default());
        };
        let stale = match s.taken_at {
            None => true,
            Some(t) => self.now.saturating_sub(t) >= self.period,
        };
        if stale {
            s.total = self.tm.snapshot_port(port, &mut s.queues, &mut s.cells);
            s.taken_at = Some(self.now);
        }
        f(s)
    }
}

impl QueueDepths for DepthSnapshot<'_> {
    fn queue_bytes(&self, port: PortId, queue: QueueId) -> u64 {
        self.with_port(port, |s| s.queues.get(queue.0 as usize).copied().unwrap_or(0))
    }
    fn port_bytes(&self, port: PortId) -> u64 {
        self.with_port(port, |s| s.total)
    }
    fn queue_cells(&self, port: PortId, queue: QueueId) -> u64 {
        self.with_port(port, |s| s.cells.get(queue.0 as usize).copied().unwrap_or(0))
    }
}

pub use weft_tofino::program::GENERATOR_ETHERTYPE;

/// A sans-IO switch. See the module documentation for the call order.
///
/// Laid out by what a packet reads (`repr(C)`, fields in this order): the
/// first three cache lines hold every field a hop through the switch reads
/// apart from its counters, traffic manager, routes and RNG, which follow;
/// the rest is read when the switch is configured or reports. (In the
/// compiler's order those fields were spread over about a dozen lines of
/// the switch's 43, each a first-level cache miss on most packets: a
/// switch's state leaves that cache between two of its packets.)
#[repr(C)]
pub struct Switch {
    ports: Vec<Port>,
    port_up: Vec<bool>,
    pass_serial: u64,
    address: Ipv4Address,
    hash_seed: u32,
    timers: BinaryHeap<Reverse<(Nanos, Timer)>>,
    pfc_scratch: Vec<PfcTransition>,
    program: Box<dyn Program>,
    /// Line rate per port now (what [`IngressCx::port_rates`] shows).
    port_rates: Vec<BitRate>,
    tables: TableFile,
    /// A software target's packet-at-a-time ingress (`None`: an ASIC).
    software: Option<Box<SoftwareIngress>>,
    /// `cfg.snapshot_period_ns`.
    snapshot_period_ns: Nanos,
    /// Wire time of control frames, when not their length (`SwitchSpec::control_frame_bytes`).
    control_frame_bytes: ControlFrameBytes,
    /// The program's [`Program::has_egress`]: without it, a departing
    /// packet goes to the wire with no egress pass built.
    program_egress: bool,
    snapshot: RefCell<Vec<PortSnapshot>>,
    regs: RegisterFile,
    counters: SwitchCounters,
    tm: TrafficManager,
    routes: RouteTable,
    rng: ChaCha8Rng,
    id: NodeId,
    name: String,
    cfg: SwitchConfig,
    port_down: Option<PortDownGenerator>,
    port_status_to_cpu: bool,
    usage: ResourceUsage,
    generators: Vec<PacketGenerator>,
    internal: VecDeque<(Nanos, InternalKind, BytesMut)>,
    internal_busy_until: [Nanos; 2],
    cpu_writes: VecDeque<(Nanos, CpuWrite)>,
    last_program_error: Option<ProgramError>,
    /// What [`Switch::restart`] builds the switch again from (`None`: a
    /// program given by the caller).
    boot_image: Option<Box<BootImage>>,
    /// The PFC frames received, when a driver asked ([`Switch::pfc_log_mut`]).
    pfc_log: crate::pfc_log::PfcLog,
}

/// What a switch boots from: its fabric spec and its settings before the
/// program configured the traffic manager.
#[derive(Debug, Clone)]
struct BootImage {
    node: NodeSpec,
    cfg: SwitchConfig,
}

impl std::fmt::Debug for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switch").field("name", &self.name).field("program", &self.program.name()).finish()
    }
}

impl Switch {
    /// Builds the switch of fabric node `node` (id `id`) with its scheme.
    pub fn from_spec(id: NodeId, node: &NodeSpec, cfg: SwitchConfig) -> Result<Self, SwitchError> {
        let spec = node.as_switch().ok_or_else(|| SwitchError::NotASwitch(node.name.clone()))?;
        let program = schemes::build(&spec.scheme, &spec.effective_params(), spec.time_scale)
            .map_err(|source| SwitchError::Scheme { switch: node.name.clone(), source })?;
        let image = BootImage { node: node.clone(), cfg: cfg.clone() };
        let mut s = Self::with_program(id, node, cfg, program)?;
        s.boot_image = Some(Box::new(image));
        Ok(s)
    }

    /// Replaces the routing table with `routes` (a control plane's routing
    /// update after a link change elsewhere, [`crate::fabric::NodeAction::Routes`]);
    /// the program gives each route its data again. A restart boots with the
    /// topology's routes.
    pub fn install_routes(&mut self, routes: &[weft_tofino::l3::Route]) {
        self.routes = RouteTable::with_data(routes, |r| self.program.route_data(r));
        self.counters.route_updates += 1;
    }

    /// Restarts the switch at `now`, as a rebooted ASIC: the program is
    /// loaded again and the control plane writes its initial entries, so
    /// every register, table entry the data plane learned, meter, timer
    /// and queued frame is gone (frames in the queues are counted in
    /// `drop_restart`). What the switch does not lose: the ports' link
    /// state (a port that is down stays down, a degraded one keeps its
    /// rate, and a program that listens to port status hears of both after
    /// the control-plane latency, as a booting control plane tells it), a
    /// frame already on the wire (the serializers go on), and weft's
    /// counters, which observe the switch rather than live in it
    /// (`restarts` counts the restarts). A program that detects failures
    /// with the port-down packet generator gets its packet for every port
    /// that is down, as for a port that just failed. The restarted
    /// switch's random numbers start again from its seed, as its
    /// configuration does.
    ///
    /// A driver that models the reboot's downtime takes the switch's links
    /// down before and up after (`weft node SWITCH restart BOOT`).
    pub fn restart(&mut self, now: Nanos, out: &mut Vec<Transmit>) -> Result<(), SwitchError> {
        let Some(image) = self.boot_image.take() else { return Err(SwitchError::NotRestartable(self.name.clone())) };
        let mut fresh = match Self::from_spec(self.id, &image.node, image.cfg.clone()) {
            Ok(s) => s,
            Err(e) => {
                self.boot_image = Some(image);
                return Err(e);
            }
        };
        let mut lost = 0;
        let mut pfc = Vec::new();
        for p in 0..self.ports.len() + 2 {
            lost += self.tm.flush_port(now, PortId(p as u16), &mut pfc);
        }
        lost += self.software.as_ref().map_or(0, |s| s.input.len() as u64);
        fresh.counters = self.counters;
        fresh.pfc_log = std::mem::take(&mut self.pfc_log);
        fresh.counters.restarts += 1;
        fresh.counters.drop_restart += lost;
        for (i, (new, old)) in fresh.ports.iter_mut().zip(self.ports.drain(..)).enumerate() {
            new.serializer = old.serializer;
            new.next_start = old.next_start;
            new.set_packet_slot(new.packet_slot_ns > 0, self.port_rates[i]);
            new.carry_counters(&old);
            new.up = old.up;
            fresh.port_up[i] = old.up;
            fresh.port_rates[i] = self.port_rates[i];
            if fresh.port_status_to_cpu {
                if !old.up {
                    fresh.timers.push(Reverse((now + fresh.cfg.cpu_latency_ns, Timer::CpuPortStatus(i as u16, false))));
                }
                if self.port_rates[i] != new.spec.rate {
                    fresh.timers.push(Reverse((now + fresh.cfg.cpu_latency_ns, Timer::CpuPortRate(i as u16, self.port_rates[i]))));
                }
            }
        }
        // The packet generators start again from now, not from time 0.
        let timers = std::mem::take(&mut fresh.timers);
        fresh.timers = timers
            .into_iter()
            .map(|Reverse((t, timer))| match timer {
                Timer::Generator(_) => Reverse((now + t, timer)),
                _ => Reverse((t, timer)),
            })
            .collect();
        *self = fresh;
        if let Some(g) = self.port_down {
            let down: Vec<usize> = (0..self.ports.len()).filter(|&p| !self.port_up[p]).collect();
            for port in down {
                let mut f = Self::generator_frame(g.id, g.frame_len.max(ethernet::HEADER_LEN as u16 + 3));
                f[15..17].copy_from_slice(&(port as u16).to_be_bytes());
                self.counters.generated += 1;
                self.ingress(now, PacketSource::Generator(g.id), f, out);
            }
        }
        Ok(())
    }

    /// Builds the switch of `node` with an explicit program (tests, custom schemes).
    pub fn with_program(id: NodeId, node: &NodeSpec, mut cfg: SwitchConfig, mut program: Box<dyn Program>) -> Result<Self, SwitchError> {
        let routes_spec = node.as_switch().map(|s| s.routes.clone()).unwrap_or_default();
        let mut decl = declarations_of(program.as_mut());
        program.configure_traffic_manager(&mut cfg.tm);
        let sw = node.as_switch();
        let address = switch_address(id);
        let view = SwitchView {
            address,
            role: sw.map_or(SwitchRole::Other, |s| s.role),
            leaf_index: sw.and_then(|s| s.leaf_index),
            leaves: sw.map_or(0, |s| s.leaves),
            upper_fanout: sw.map_or(1, |s| s.upper_fanout.max(1)),
            host_facing: node.ports.iter().map(|p| p.gateway.is_some()).collect(),
            rates: node.ports.iter().map(|p| p.rate).collect(),
            mtus: node.ports.iter().map(|p| p.mtu).collect(),
            queues_per_port: cfg.tm.queues_per_port,
            pfc: cfg.tm.pfc.is_some(),
            routes: routes_spec.clone(),
            tier_position: sw.and_then(|s| s.tier_position),
            hosts_per_leaf: sw.map_or(0, |s| s.hosts_per_leaf),
            leaf_addresses: sw.map_or_else(Vec::new, |s| s.leaf_addresses.clone()),
        };
        program.attach(&view);
        program.check_fabric(&view).map_err(|why| SwitchError::Unsupported { switch: node.name.clone(), scheme: program.name(), why })?;
        declare_l3_tables(&mut decl, routes_spec.len() as u32);
        let Declared { usage, generators, port_down, port_status, published } = decl.into_parts();
        usage.check(&cfg.target).map_err(|source| SwitchError::Resources { switch: node.name.clone(), source })?;
        let mut regs = RegisterFile::new(&usage.registers).with_meters(&usage.meters);
        for id in published {
            regs.mark_published(id).map_err(|source| SwitchError::Program { switch: node.name.clone(), source })?;
        }
        let mut tables = TableFile::new(&usage.tables);
        let init = program.control_plane_init();
        let program_err = |source| SwitchError::Program { switch: node.name.clone(), source };
        for (m, i, c) in init.meters {
            regs.configure_meter(m, i, c).map_err(program_err)?;
        }
        for (t, k, d) in init.tables {
            tables.cpu_write(t, k, Some(d)).map_err(program_err)?;
        }
        for (r, i, v) in init.registers {
            regs.cpu_write(r, i, v).map_err(program_err)?;
        }
        let routes = RouteTable::with_data(&routes_spec, |r| program.route_data(r));
        let nports = node.ports.len();
        let rated_in_packets = sw.is_some_and(|s| s.queue_rate_packets);
        let ports: Vec<Port> = node
            .ports
            .iter()
            .map(|p| {
                let mut port = Port::new(p);
                port.set_packet_slot(rated_in_packets, p.rate);
                port
            })
            .collect();
        let software = cfg.target.software.map(|model| {
            Box::new(SoftwareIngress { model, input: VecDeque::new(), busy: false, rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_b3f2) })
        });
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let hash_seed = rand::Rng::random::<u32>(&mut rng);
        let mut timers = BinaryHeap::new();
        for (i, g) in generators.iter().enumerate() {
            timers.push(Reverse((g.period_ns, Timer::Generator(i as u8))));
        }
        let mut tm = TrafficManager::new(cfg.tm.clone(), nports + 2);
        // The recirculation port (index nports, see `recirc_port`) keeps a
        // guaranteed minimum in its queue (`recirculation_queue`): a timer
        // packet is never dropped for a full shared buffer.
        tm.set_guaranteed_min(PortId(nports as u16), cfg.tm.control_queue(), cfg.target.recirculation_min_cells);
        Ok(Switch {
            id,
            name: node.name.clone(),
            port_up: vec![true; nports],
            port_rates: node.ports.iter().map(|p| p.rate).collect(),
            ports,
            tm,
            program_egress: program.has_egress(),
            program,
            regs,
            tables,
            address,
            port_down,
            port_status_to_cpu: port_status,
            usage,
            routes,
            rng,
            hash_seed,
            timers,
            pass_serial: 0,
            snapshot: RefCell::new((0..nports + 2).map(|_| PortSnapshot::default()).collect()),
            generators,
            internal: VecDeque::new(),
            internal_busy_until: [0; 2],
            cpu_writes: VecDeque::new(),
            pfc_scratch: Vec::new(),
            counters: SwitchCounters::default(),
            last_program_error: None,
            boot_image: None,
            software,
            pfc_log: Default::default(),
            control_frame_bytes: node.as_switch().map_or_else(ControlFrameBytes::default, |s| s.control_frame_bytes),
            snapshot_period_ns: cfg.snapshot_period_ns,
            cfg,
        })
    }

    fn recirc_port(&self) -> PortId {
        PortId(self.ports.len() as u16)
    }
    /// Recirculated packets (the programs' timers) ride the recirculation
    /// port's control queue: strict priority, and outside the ns-3 buffer
    /// model's accounting, whose timers are simulator events, not packets.
    fn recirculation_queue(&self) -> QueueId {
        QueueId(self.tm.config().queues_per_port.saturating_sub(1))
    }

    fn cpu_port(&self) -> PortId {
        PortId(self.ports.len() as u16 + 1)
    }

    /// Whether [`Switch::restart`] can load the switch's program again (it
    /// was built from its spec).
    pub fn can_restart(&self) -> bool {
        self.boot_image.is_some()
    }

    /// Node id.
    pub fn id(&self) -> NodeId {
        self.id
    }
    /// Name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The loaded program's name.
    pub fn program_name(&self) -> &'static str {
        self.program.name()
    }
    /// The program's scheme counters.
    pub fn scheme_counters(&self) -> Vec<(&'static str, u64)> {
        self.program.counters()
    }
    /// The program's sampled distributions.
    pub fn scheme_distributions(&self) -> Vec<(&'static str, std::collections::BTreeMap<u64, u64>)> {
        self.program.distributions()
    }
    /// The program's live per-port gauges at `now`.
    pub fn scheme_port_gauges(&self, now: Nanos) -> Vec<(&'static str, PortId, f64)> {
        self.program.port_gauges(&self.scrape_view(now))
    }
    /// The program's live per-switch gauges at `now`.
    pub fn scheme_gauges(&self, now: Nanos) -> Vec<(&'static str, f64)> {
        self.program.gauges(&self.scrape_view(now))
    }
    /// The in-band telemetry the program holds as an INT sink at `now`.
    pub fn path_telemetry(&self, now: Nanos) -> Vec<weft_tofino::program::PathTelemetry> {
        self.program.path_telemetry(&self.scrape_view(now))
    }
    fn scrape_view(&self, now: Nanos) -> ScrapeView<'_> {
        ScrapeView { now, registers: &self.regs, tables: &self.tables, port_rates: &self.port_rates }
    }
    /// The resource report of the loaded program against the target.
    pub fn resource_report(&self) -> weft_tofino::ResourceReport {
        self.usage.report(self.program.name(), &self.cfg.target)
    }
    /// Declared resources (program + L3 tables).
    pub fn resources(&self) -> &ResourceUsage {
        &self.usage
    }
    /// The PFC frames this switch received (empty unless enabled).
    pub fn pfc_log(&self) -> &crate::pfc_log::PfcLog {
        &self.pfc_log
    }
    /// The PFC log, to enable it.
    pub fn pfc_log_mut(&mut self) -> &mut crate::pfc_log::PfcLog {
        &mut self.pfc_log
    }
    /// Switch counters.
    pub fn counters(&self) -> &SwitchCounters {
        &self.counters
    }
    /// The last program error, if any.
    pub fn last_program_error(&self) -> Option<&ProgramError> {
        self.last_program_error.as_ref()
    }
    /// Number of front-panel ports.
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }
    /// Counters of a port.
    pub fn port_counters(&self, port: PortId) -> PortCounters {
        self.ports.get(port.index()).map(Port::counters).unwrap_or_default()
    }
    /// Counters of a queue.
    pub fn queue_stats(&self, port: PortId, queue: QueueId) -> QueueStats {
        self.tm.queue_stats(port, queue)
    }
    /// The traffic manager (read-only).
    pub fn traffic_manager(&self) -> &TrafficManager {
        &self.tm
    }
    /// The traffic manager (tests and control plane).
    pub fn traffic_manager_mut(&mut self) -> &mut TrafficManager {
        &mut self.tm
    }
    /// The entries of the program's table `name` (key, action data),
    /// sorted; `None` if the program declared no such table.
    pub fn table_entries(&self, name: &str) -> Option<Vec<(u64, u64)>> {
        let i = self.usage.tables.iter().position(|t| t.name == name)?;
        Some(self.tables.entries(weft_tofino::TableId(i as u16)))
    }

    /// Entry `index` of the program's register `name` as the control plane
    /// reads it; `None` if there is no such register or entry.
    pub fn register_value(&self, name: &str, index: u32) -> Option<u64> {
        let i = self.usage.registers.iter().position(|r| r.name == name)?;
        self.regs.cpu_read(weft_tofino::RegisterId(i as u16), index)
    }

    /// Register file (control-plane reads).
    pub fn registers(&self) -> &RegisterFile {
        &self.regs
    }
    /// Whether a port's link is up.
    pub fn port_is_up(&self, port: PortId) -> bool {
        self.port_up.get(port.index()).copied().unwrap_or(false)
    }
    /// The rate a port drains at.
    pub fn port_rate(&self, port: PortId) -> Option<BitRate> {
        self.ports.get(port.index()).map(|p| p.serializer.rate())
    }

    /// The earliest time [`Switch::handle_timeout`] must be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    fn arm(&mut self, port: PortId, at: Nanos) {
        let p = &mut self.ports[port.index()];
        if let Some(t) = p.timer_at {
            if t <= at {
                return;
            }
        }
        p.timer_at = Some(at);
        self.timers.push(Reverse((at, Timer::Port(port.0))));
    }

    /// Whether the program declared periodic packet generators (traffic
    /// of the switch's own that never ends).
    pub fn has_periodic_generators(&self) -> bool {
        !self.generators.is_empty()
    }

    /// A link went up or down. Going down drops what is queued for it.
    pub fn set_port_up(&mut self, now: Nanos, port: PortId, up: bool, out: &mut Vec<Transmit>) {
        let Some(p) = self.ports.get_mut(port.index()) else { return };
        let changed = p.up != up;
        p.up = up;
        self.port_up[port.index()] = up;
        if !up {
            p.mac_control.clear();
            let mut pfc = std::mem::take(&mut self.pfc_scratch);
            self.counters.drop_link_down += self.tm.flush_port(now, port, &mut pfc);
            for c in 0..8 {
                self.tm.pfc_receive(now, port, c, 0);
            }
            self.emit_pfc(now, &mut pfc, out);
            self.pfc_scratch = pfc;
        }
        if changed && self.port_status_to_cpu {
            self.timers.push(Reverse((now + self.cfg.cpu_latency_ns, Timer::CpuPortStatus(port.0, up))));
        }
        if changed && !up {
            if let Some(g) = self.port_down {
                let mut f = Self::generator_frame(g.id, g.frame_len.max(ethernet::HEADER_LEN as u16 + 3));
                f[15..17].copy_from_slice(&port.0.to_be_bytes());
                self.counters.generated += 1;
                self.ingress(now, PacketSource::Generator(g.id), f, out);
            }
        }
    }

    /// A packet-generator frame of `len` bytes (at least the Ethernet
    /// header and one byte): generator ethertype, `id` in the first payload
    /// byte.
    fn generator_frame(id: u8, len: u16) -> BytesMut {
        let mut f = BytesMut::zeroed((len as usize).max(ethernet::HEADER_LEN + 1));
        f[12..14].copy_from_slice(&GENERATOR_ETHERTYPE.to_be_bytes());
        f[14] = id;
        f
    }

    /// A link's rate changed (degrade/restore); a program that asked for
    /// port status hears of a change after the control-plane latency.
    pub fn set_port_rate(&mut self, now: Nanos, port: PortId, rate: BitRate) {
        if let Some(p) = self.ports.get_mut(port.index()) {
            p.serializer.set_rate(now, rate);
            p.set_packet_slot(p.packet_slot_ns > 0, rate);
            let changed = self.port_rates[port.index()] != rate;
            self.port_rates[port.index()] = rate;
            if changed && self.port_status_to_cpu {
                self.timers.push(Reverse((now + self.cfg.cpu_latency_ns, Timer::CpuPortRate(port.0, rate))));
            }
        }
    }

    /// Handles timers due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos, out: &mut Vec<Transmit>) {
        while let Some(Reverse((t, timer))) = self.timers.peek().copied() {
            if t > now {
                break;
            }
            self.timers.pop();
            match timer {
                Timer::Port(p) => {
                    let port = PortId(p);
                    if self.ports[port.index()].timer_at == Some(t) {
                        self.ports[port.index()].timer_at = None;
                        self.kick(now, port, out);
                    }
                }
                Timer::PfcRefresh(p, class) => {
                    let port = PortId(p);
                    if self.tm.xoff_asserted(port, class) && self.port_up[port.index()] {
                        self.send_pfc(now, port, class, true, out);
                    }
                }
                Timer::Internal => self.deliver_internal(now, out),
                Timer::Generator(i) => {
                    if let Some(g) = self.generators.get(i as usize).copied() {
                        self.timers.push(Reverse((t + g.period_ns.max(1), Timer::Generator(i))));
                        let f = Self::generator_frame(g.id, g.frame_len);
                        self.counters.generated += 1;
                        self.ingress(now, PacketSource::Generator(g.id), f, out);
                    }
                }
                Timer::CpuWrites => {
                    while let Some(&(at, w)) = self.cpu_writes.front() {
                        if at > now {
                            break;
                        }
                        self.cpu_writes.pop_front();
                        let r = match w {
                            CpuWrite::Register(reg, idx, v) => self.regs.cpu_write(reg, idx, v),
                            CpuWrite::Table(t, k, d) => self.tables.cpu_write(t, k, d),
                        };
                        if let Err(e) = r {
                            self.program_error(e);
                        }
                    }
                }
                Timer::CpuPortStatus(p, up) => self.run_cpu(now, CpuEvent::PortStatus(PortId(p), up), out),
                Timer::CpuPortRate(p, rate) => self.run_cpu(now, CpuEvent::PortRate(PortId(p), rate), out),
                Timer::CpuAlarm(token) => self.run_cpu(now, CpuEvent::Timer(token), out),
                Timer::SoftwarePipeline => self.serve_software_ingress(now, out),
            }
        }
    }

    /// Handles a frame fully received on `port` at `now`.
    pub fn handle_frame(&mut self, now: Nanos, port: PortId, frame: BytesMut, out: &mut Vec<Transmit>) {
        let Some(p) = self.ports.get_mut(port.index()) else {
            self.counters.drop_malformed += 1;
            return;
        };
        self.counters.rx_frames += 1;
        p.rx_frames += 1;
        p.rx_bytes += frame.len() as u64;
        if frame.len() > p.mtu as usize + ethernet::TAGGED_HEADER_LEN {
            self.counters.drop_oversize += 1;
            return;
        }
        if let Some(sw) = &mut self.software {
            let waiting = sw.input.len() - usize::from(sw.busy);
            if waiting >= sw.model.input_buffer_packets as usize {
                self.counters.drop_input_buffer += 1;
                return;
            }
            sw.input.push_back((port, frame));
            if !sw.busy {
                sw.busy = true;
                let t = now + sw.service_ns();
                self.timers.push(Reverse((t, Timer::SoftwarePipeline)));
            }
            return;
        }
        self.ingress(now, PacketSource::Port(port), frame, out);
    }

    /// A software target's ingress thread is done with the first frame of
    /// its input buffer: the frame goes through the pipeline now, and the
    /// next one, if any, starts its service.
    fn serve_software_ingress(&mut self, now: Nanos, out: &mut Vec<Transmit>) {
        let Some(sw) = &mut self.software else { return };
        let Some((port, frame)) = sw.input.pop_front() else {
            sw.busy = false;
            return;
        };
        if sw.input.is_empty() {
            sw.busy = false;
        } else {
            let t = now + sw.service_ns();
            self.timers.push(Reverse((t, Timer::SoftwarePipeline)));
        }
        self.ingress(now, PacketSource::Port(port), frame, out);
    }

    /// One pass through the ingress pipeline: the fixed front end
    /// ([`Switch::admit`]), the program ([`Switch::run_ingress`]), then its
    /// verdict ([`Switch::apply`]).
    fn ingress(&mut self, now: Nanos, source: PacketSource, mut frame: BytesMut, out: &mut Vec<Transmit>) {
        let parsed = FrameInfo::parse(&frame);
        let Ok(info) = &parsed else {
            self.counters.drop_malformed += 1;
            return;
        };
        let Some(admitted) = self.admit(now, source, info, &frame, out) else { return };
        // The program writes its decision here and `apply` reads it here:
        // moving the whole struct would read 16 bytes at a time what the
        // program wrote a field at a time, which the CPU cannot forward
        // from its store buffer (a stall on every packet).
        let mut decision = IngressDecision::default();
        if self.run_ingress(now, source, &mut frame, &admitted, &mut decision) {
            self.apply(now, source, frame, &admitted, &mut decision, out);
        }
    }

    /// The fixed front end on a parsed frame: answers PFC and ARP, hands other
    /// ethertypes and IPv4 to the switch's own address to the program only
    /// if it claims them, checks the destination MAC and TTL, looks the
    /// route up. `None`: the frame ends here (counted).
    fn admit<'i>(
        &mut self,
        now: Nanos,
        source: PacketSource,
        info: &'i FrameInfo,
        frame: &BytesMut,
        out: &mut Vec<Transmit>,
    ) -> Option<Admitted<'i>> {
        let in_port = match source {
            PacketSource::Port(p) => Some(p),
            PacketSource::Recirculated { original, .. } => Some(original),
            _ => None,
        };
        // Generator and program-made internal frames (e.g. ConWeave's
        // resume-timer packets) enter from the generator or recirculation;
        // any other frame of another ethertype is foreign.
        let foreign = match info.kind {
            FrameKind::Other(t) => {
                !(t == GENERATOR_ETHERTYPE && matches!(source, PacketSource::Generator(_) | PacketSource::Recirculated { .. }))
            }
            _ => false,
        };
        match info.kind {
            FrameKind::Pfc => {
                if let (PacketSource::Port(p), Some(r)) = (source, info.pfc(frame)) {
                    self.receive_pfc(now, p, r, out);
                }
                return None;
            }
            FrameKind::Arp => {
                if let PacketSource::Port(p) = source {
                    self.answer_arp(now, p, frame, out);
                }
                return None;
            }
            // Another ethertype reaches the program only if it claims it.
            FrameKind::Other(_) if foreign && !self.program.claim(info, false) => {
                self.counters.drop_unknown_ethertype += 1;
                return None;
            }
            _ => {}
        }
        // IPv4 to the switch's own address reaches the program if it claims
        // it (its control messages), with no route, no TTL check.
        let for_switch = info.ip.is_some_and(|ip| ip.dst == self.address) && self.program.claim(info, true);
        if let (Some(ip), PacketSource::Port(p)) = (info.ip, source) {
            let dst_mac = ethernet::Frame::new_unchecked(&frame[..]).dst_addr();
            if dst_mac != self.ports[p.index()].mac {
                self.counters.drop_not_for_us += 1;
                return None;
            }
            if ip.ttl <= 1 && !for_switch {
                self.counters.drop_ttl += 1;
                return None;
            }
        }
        let mut route = None;
        if let (Some(ip), false) = (info.ip, for_switch) {
            match self.routes.lookup_group(ip.dst) {
                Some(r) => route = Some(r),
                None => {
                    self.counters.drop_no_route += 1;
                    return None;
                }
            }
        }
        Some(Admitted { info, in_port, for_switch, claimed: for_switch || foreign, route })
    }

    /// Runs the program's ingress on an admitted frame, its decision into
    /// `decision`; `false` if the program broke a pipeline rule (counted,
    /// the packet dropped).
    fn run_ingress(
        &mut self,
        now: Nanos,
        source: PacketSource,
        frame: &mut BytesMut,
        a: &Admitted,
        decision: &mut IngressDecision,
    ) -> bool {
        self.counters.pipeline_passes += 1;
        self.pass_serial += 1;
        let snapshot = DepthSnapshot { tm: &self.tm, now, period: self.snapshot_period_ns, ports: &self.snapshot };
        let (group, route_data) = match a.route {
            Some((g, data)) => (self.routes.group(g), data),
            None => (&[][..], None),
        };
        // The context is dropped where it was built (its scope ends): a
        // `drop(cx)` moved its 232 bytes first (memcpy, 2 % of a RoCE run).
        let result = {
            let mut cx = IngressCx {
                now,
                frame,
                info: a.info,
                source,
                group,
                port_up: &self.port_up,
                port_rates: &self.port_rates,
                depths: &snapshot,
                rng: &mut self.rng,
                hash_seed: self.hash_seed,
                route_data,
                claimed: a.claimed,
                decision,
                routes: &self.routes,
                registers: PassRegisters::new(&mut self.regs, PassState::new(self.pass_serial, Gress::Ingress)),
                tables: &self.tables,
            };
            self.program.ingress(&mut cx)
        };
        match result {
            Ok(()) => true,
            Err(e) => {
                self.program_error(e);
                false
            }
        }
    }

    /// Carries out the program's decision: queue pause/resume, emitted and
    /// mirrored frames, then the verdict (one routed hop: TTL and MACs
    /// rewritten, into the traffic manager).
    fn apply(
        &mut self,
        now: Nanos,
        source: PacketSource,
        mut frame: BytesMut,
        a: &Admitted,
        decision: &mut IngressDecision,
        out: &mut Vec<Transmit>,
    ) {
        for fc in &decision.flow_control {
            if fc.pause {
                self.tm.pause_queue(fc.port, fc.queue);
            } else {
                self.resume_queue(now, fc.port, fc.queue, out);
                if fc.port.index() < self.ports.len() {
                    self.kick(now, fc.port, out);
                }
            }
        }
        if !decision.emit.is_empty() {
            self.emit_frames(now, std::mem::take(&mut decision.emit), a.in_port, out);
        }
        if let Some(m) = decision.mirror.take() {
            self.mirror(now, &frame, m, out);
        }
        match decision.verdict {
            Verdict::Consume => self.counters.consumed_by_program += 1,
            Verdict::Drop | Verdict::Undecided => self.counters.drop_program += 1,
            Verdict::Recirculate => {
                let (original, pass) = match source {
                    PacketSource::Recirculated { original, pass } => (original, pass.saturating_add(1)),
                    PacketSource::Port(p) => (p, 1),
                    _ => (PortId(u16::MAX), 1),
                };
                self.recirculate(now, frame, original, pass, out);
            }
            Verdict::ToCpu => {
                self.counters.to_cpu += 1;
                let cp = self.cpu_port();
                self.enqueue(now, Admission::plain(cp, QueueId(0)), frame, out);
            }
            Verdict::Forward(egress) if egress.index() >= self.ports.len() => self.counters.drop_program += 1,
            Verdict::Forward(egress) => {
                // One routed hop: TTL - 1 (checksum updated incrementally).
                // Only for routed packets from a front-panel port, so
                // recirculation costs no TTL.
                if a.info.ip.is_some() && matches!(source, PacketSource::Port(_)) && !a.for_switch {
                    ipv4::Packet::new_unchecked(&mut frame[a.info.l3_offset as usize..]).decrement_ttl();
                }
                Self::rewrite_l2(&self.ports[egress.index()], &mut frame);
                let tc = Self::traffic_class(a.info);
                let queue = decision.queue.unwrap_or_else(|| self.default_queue(tc));
                let arrival = a.in_port.filter(|p| p.index() < self.ports.len()).map(|port| Arrival { port, cos: self.ingress_cos(tc) });
                self.enqueue(now, Admission { port: egress, queue, arrival, bridged: decision.bridged }, frame, out);
            }
        }
    }

    /// Sends frames a pipeline made ([`EmittedFrame`]) to their targets.
    fn emit_frames(&mut self, now: Nanos, frames: Vec<EmittedFrame>, in_port: Option<PortId>, out: &mut Vec<Transmit>) {
        for e in frames {
            self.counters.mirrored += 1;
            match e.target {
                EmitTarget::Port(p, q) if p.index() < self.ports.len() => {
                    let mut f = e.frame;
                    Self::rewrite_l2(&self.ports[p.index()], &mut f);
                    self.enqueue(now, Admission::plain(p, q), f, out);
                }
                EmitTarget::Port(..) => self.counters.drop_program += 1,
                EmitTarget::Cpu => {
                    let (cpu, cq) = (self.cpu_port(), self.tm.config().control_queue());
                    self.enqueue(now, Admission::plain(cpu, cq), e.frame, out);
                }
                EmitTarget::Recirculate => self.recirculate(now, e.frame, in_port.unwrap_or(PortId(u16::MAX)), 1, out),
            }
        }
    }

    /// A mirrored copy of `frame` (truncated as asked) to a port or the CPU.
    fn mirror(&mut self, now: Nanos, frame: &[u8], m: MirrorRequest, out: &mut Vec<Transmit>) {
        let mut copy = BytesMut::from(&frame[..m.truncate.map_or(frame.len(), |t| (t as usize).min(frame.len()))]);
        let target = m.port.unwrap_or(self.cpu_port());
        if target.index() < self.ports.len() {
            Self::rewrite_l2(&self.ports[target.index()], &mut copy);
        }
        self.counters.mirrored += 1;
        self.enqueue(now, Admission::plain(target, m.queue), copy, out);
    }

    /// Addresses `frame` from `port` to its peer.
    fn rewrite_l2(port: &Port, frame: &mut BytesMut) {
        if frame.len() >= ethernet::HEADER_LEN {
            let [peer, own] = port.rewrite;
            frame[0..6].copy_from_slice(&peer.0);
            frame[6..12].copy_from_slice(&own.0);
        }
    }

    /// A packet's traffic class: DSCP >> 3, or the 802.1Q PCP.
    fn traffic_class(info: &FrameInfo) -> u8 {
        info.ip.map(|i| i.dscp >> 3).or(info.pcp).unwrap_or(0)
    }

    /// Queue of traffic class `tc`: queue `tc`; CS6/CS7 go to the control queue.
    fn default_queue(&self, tc: u8) -> QueueId {
        let n = self.tm.config().queues_per_port;
        if tc >= weft_tofino::CONTROL_TRAFFIC_CLASS {
            self.tm.config().control_queue()
        } else {
            QueueId(tc.min(n.saturating_sub(2)))
        }
    }

    /// The ingress CoS of a packet of traffic class `tc`: the PFC class
    /// that the queue of that class has in the standard layout (CS6/CS7:
    /// the control class 7), which is the priority its sender pauses when
    /// asked. It does not depend on the queue the program chose or on how
    /// the program configured its queues: a pause must name the priority the
    /// upstream port sends the packet with.
    fn ingress_cos(&self, tc: u8) -> u8 {
        TmConfig::standard_pfc_class(self.tm.config().queues_per_port, self.default_queue(tc))
    }

    /// Admits `frame` as `a` says (through the cut-through fast path when
    /// the port is idle).
    fn enqueue(&mut self, now: Nanos, a: Admission, frame: BytesMut, out: &mut Vec<Transmit>) {
        let Admission { port, queue, arrival, bridged } = a;
        if port.index() < self.ports.len() && !self.port_up[port.index()] {
            self.counters.drop_link_down += 1;
            return;
        }
        // Cut-through fast path: an idle front-panel port with nothing queued
        // sends the packet at once; the TM accounts it as enqueued and
        // dequeued (same counters, same RED decision) without buffering it.
        // With the ns-3 buffer model, which queues every packet, the same
        // port takes it through the ns-3 accounting without the queue
        // ([`Switch::enqueue_idle`]), unless it came in on that port (its
        // pauses would go out ahead of it).
        if port.index() < self.ports.len() && !self.ports[port.index()].is_busy(now) && self.ports[port.index()].mac_control.is_empty() {
            if !self.tm.may_pass_through() {
                if arrival.is_none_or(|a| a.port != port) {
                    return self.enqueue_idle(now, a, frame, out);
                }
                return self.enqueue_slow(now, a, frame, out);
            }
            // Matched in place: moving the packet out of the result copies
            // it 16 bytes at a time right after the traffic manager wrote
            // it a field at a time (a store the CPU cannot forward).
            match &mut self.tm.pass_through(now, port, queue, frame, arrival, bridged, &mut self.rng) {
                Ok(d) => {
                    self.depart(now, port, d, out);
                    return;
                }
                Err(PassThrough::Queued(f)) => return self.enqueue_slow(now, a, std::mem::take(f), out),
                Err(PassThrough::Dropped(_)) => {
                    self.counters.drop_tm += 1;
                    return;
                }
            }
        }
        self.enqueue_slow(now, a, frame, out);
    }

    /// With the ns-3 buffer model, a packet for an idle front-panel port
    /// (nothing queued or being sent, no pause frame waiting; not the port
    /// it came in on): what [`Switch::enqueue_slow`] and [`Switch::kick`]
    /// do with it, in their order, without storing it
    /// ([`TrafficManager::arrive_idle`]): accounted as queued, the pauses
    /// that caused sent (out of its ingress port, so this port stays idle
    /// and the packet is the one a dequeue would take), then accounted as
    /// dequeued, sent, and the resumes its departure caused sent.
    fn enqueue_idle(&mut self, now: Nanos, a: Admission, frame: BytesMut, out: &mut Vec<Transmit>) {
        let Admission { port, queue, arrival, bridged } = a;
        let mut pfc = std::mem::take(&mut self.pfc_scratch);
        match self.tm.arrive_idle(now, port, queue, frame, arrival, bridged, &mut pfc) {
            Ok(IdleArrival::Accepted(idle)) => {
                self.emit_pfc(now, &mut pfc, out);
                let mut d = self.tm.depart_idle(now, port, idle, &mut self.rng, &mut pfc);
                self.depart(now, port, &mut d, out);
                self.emit_pfc(now, &mut pfc, out);
            }
            Ok(IdleArrival::Dropped(..)) => self.counters.drop_tm += 1,
            Err(frame) => {
                self.pfc_scratch = pfc;
                return self.enqueue_slow(now, a, frame, out);
            }
        }
        self.pfc_scratch = pfc;
    }

    /// Admits `frame` to the traffic manager and kicks the port.
    fn enqueue_slow(&mut self, now: Nanos, a: Admission, frame: BytesMut, out: &mut Vec<Transmit>) {
        let Admission { port, queue, arrival, bridged } = a;
        let mut pfc = std::mem::take(&mut self.pfc_scratch);
        match self.tm.enqueue_bridged(now, port, queue, frame, arrival, bridged, &mut pfc) {
            Ok(()) => {}
            Err(_) if port == self.recirc_port() => self.counters.drop_recirculation += 1,
            Err(_) => self.counters.drop_tm += 1,
        }
        self.emit_pfc(now, &mut pfc, out);
        self.pfc_scratch = pfc;
        self.kick_any(now, port, out);
    }

    /// Sends `frame` around the recirculation port. Its original ingress port
    /// and pass count travel with it through the traffic manager (bridged
    /// metadata), so a recirculated packet dropped there takes them along.
    fn recirculate(&mut self, now: Nanos, frame: BytesMut, original: PortId, pass: u8, out: &mut Vec<Transmit>) {
        self.counters.recirculations += 1;
        let bridged = original.0 as u32 | (pass as u32) << 16;
        let a = Admission { port: self.recirc_port(), queue: self.recirculation_queue(), arrival: None, bridged };
        self.enqueue_slow(now, a, frame, out);
    }

    /// Resumes a pipeline-paused queue; with the ns-3 buffer model its held
    /// packets are admitted now (drops counted, pauses sent).
    fn resume_queue(&mut self, now: Nanos, port: PortId, queue: QueueId, out: &mut Vec<Transmit>) {
        let mut pfc = Vec::new();
        self.counters.drop_tm += self.tm.resume_queue(now, port, queue, &mut pfc);
        self.emit_pfc(now, &mut pfc, out);
    }

    fn kick_any(&mut self, now: Nanos, port: PortId, out: &mut Vec<Transmit>) {
        if port.index() < self.ports.len() {
            self.kick(now, port, out);
        } else {
            self.kick_internal(now, port);
        }
    }

    fn emit_pfc(&mut self, now: Nanos, pfc: &mut Vec<PfcTransition>, out: &mut Vec<Transmit>) {
        for t in pfc.drain(..) {
            if t.port.index() < self.ports.len() && self.port_up[t.port.index()] {
                self.send_pfc(now, t.port, t.class, t.pause, out);
            }
        }
    }

    fn send_pfc(&mut self, now: Nanos, port: PortId, class: u8, pause: bool, out: &mut Vec<Transmit>) {
        let p = &mut self.ports[port.index()];
        let quanta = self.tm.config().pfc.map_or(0xffff, |c| c.pause_quanta_at(p.serializer.rate()));
        let mut f = BytesMut::zeroed(pfc::FRAME_LEN);
        ethernet::Repr { dst: EthernetAddress::MAC_CONTROL, src: p.spec.mac, vlan_tci: None, ethertype: EtherType::MacControl }
            .emit(&mut f);
        pfc::Repr::for_priority(class, if pause { quanta } else { 0 }).emit(&mut f[ethernet::HEADER_LEN..]);
        p.mac_control.push_back(f);
        if pause {
            p.pfc_pause_sent += 1;
            let hold = pfc::quanta_to_ns(quanta, p.serializer.rate());
            self.tm.pfc_pause_sent(port, class, now + hold);
            if self.tm.refreshes_pause() {
                self.timers.push(Reverse((now + (hold / 2).max(1), Timer::PfcRefresh(port.0, class))));
            }
        } else {
            p.pfc_resume_sent += 1;
        }
        self.kick(now, port, out);
    }

    fn receive_pfc(&mut self, now: Nanos, port: PortId, r: pfc::Repr, out: &mut Vec<Transmit>) {
        self.ports[port.index()].pfc_received += 1;
        self.pfc_log.record(now, port, r.class_enable, &r.quanta);
        let rate = self.ports[port.index()].serializer.rate();
        for c in 0..8u8 {
            if r.class_enable & (1 << c) != 0 {
                let q = r.quanta[c as usize];
                let until = if q == 0 { 0 } else { now + pfc::quanta_to_ns(q, rate) };
                self.tm.pfc_receive(now, port, c, until);
            }
        }
        self.kick(now, port, out);
    }

    fn answer_arp(&mut self, now: Nanos, port: PortId, frame: &[u8], out: &mut Vec<Transmit>) {
        let l3 = ethernet::Frame::new_unchecked(frame).header_len();
        let Ok(a) = arp::Packet::new_checked(&frame[l3..]) else {
            self.counters.drop_malformed += 1;
            return;
        };
        let req = arp::Repr::parse(&a);
        let Some(gw) = self.ports[port.index()].spec.gateway else { return };
        // The gateway address, and proxy ARP for any other routed address
        // (an L3 ToR: a host that thinks a peer of its /24 is on-link
        // reaches it through the switch, like real TAP hosts do).
        let proxied = req.target_ip != gw && req.target_ip != req.sender_ip && self.routes.lookup(req.target_ip).is_some();
        if req.operation != arp::Operation::Request || (req.target_ip != gw && !proxied) {
            return;
        }
        let mac = self.ports[port.index()].spec.mac;
        let mut f = BytesMut::zeroed(ethernet::HEADER_LEN + arp::PACKET_LEN);
        ethernet::Repr { dst: req.sender_hw, src: mac, vlan_tci: None, ethertype: EtherType::Arp }.emit(&mut f);
        arp::Repr {
            operation: arp::Operation::Reply,
            sender_hw: mac,
            sender_ip: req.target_ip,
            target_hw: req.sender_hw,
            target_ip: req.sender_ip,
        }
        .emit(&mut f[ethernet::HEADER_LEN..]);
        self.counters.arp_replies += 1;
        let cq = self.tm.config().control_queue();
        self.enqueue(now, Admission::plain(port, cq), f, out);
    }

    /// Starts a transmission on an idle port, or arms its timer.
    fn kick(&mut self, now: Nanos, port: PortId, out: &mut Vec<Transmit>) {
        let pi = port.index();
        if !self.port_up[pi] {
            return;
        }
        if self.ports[pi].is_busy(now) {
            let t = self.ports[pi].ready_at();
            self.arm(port, t);
            return;
        }
        if let Some(f) = self.ports[pi].mac_control.pop_front() {
            self.transmit(now, port, f, out);
            return;
        }
        let mut pfc = std::mem::take(&mut self.pfc_scratch);
        loop {
            let Some(mut d) = self.tm.dequeue(now, port, &mut self.rng, &mut pfc) else {
                if let Some(t) = self.tm.pfc_wakeup(now, port) {
                    self.arm(port, t);
                }
                break;
            };
            // A frame charged no wire time (`--frame-bytes cnp=0`) leaves
            // the port free: the next one departs in this pass, not through
            // a timer armed for this same instant (which would order it
            // after the instant's other events).
            if self.depart(now, port, &mut d, out) && self.ports[pi].is_busy(now) {
                break;
            }
        }
        self.emit_pfc(now, &mut pfc, out);
        self.pfc_scratch = pfc;
    }

    /// Runs the egress pipeline on a dequeued packet, marks ECN and sends it.
    /// Returns whether it was sent (the egress program may drop it). The
    /// packet is the caller's, in place (a move of its 128 bytes stalled,
    /// see [`Switch::enqueue`]): a sent frame is taken out of it, a dropped
    /// one is freed with it.
    fn depart(&mut self, now: Nanos, port: PortId, d: &mut Dequeued, out: &mut Vec<Transmit>) -> bool {
        self.pass_serial += 1;
        let emit = if self.program_egress {
            match self.egress(now, port, d, out) {
                Some(emit) => emit,
                None => return false,
            }
        } else {
            Vec::new()
        };
        if d.mark_ce && mark_ce(&mut d.pkt.frame) {
            self.counters.ecn_marks += 1;
            self.tm.count_mark(port, d.queue);
        }
        let in_port = d.pkt.ingress_port;
        self.transmit(now, port, std::mem::take(&mut d.pkt.frame), out);
        // Frames egress made leave after this packet (the port is busy now,
        // so one emitted to this port queues behind it).
        if !emit.is_empty() {
            self.emit_frames(now, emit, in_port, out);
        }
        true
    }

    /// The program's egress pass on a departing packet (this pass's
    /// `pass_serial` already counted): the frames it emitted, to leave
    /// after the packet, or `None` when the packet ends here (dropped or
    /// consumed, counted, its emitted frames sent; or a program error).
    fn egress(&mut self, now: Nanos, port: PortId, d: &mut Dequeued, out: &mut Vec<Transmit>) -> Option<Vec<EmittedFrame>> {
        let port_rate = self.ports[port.index()].serializer.rate();
        let mut cx = EgressCx {
            now,
            frame: &mut d.pkt.frame,
            in_port: d.pkt.ingress_port,
            bridged: d.pkt.bridged,
            rng: &mut self.rng,
            port,
            port_rate,
            queue: d.queue,
            enq_ts: d.pkt.enq_ts,
            enq_depth: d.pkt.enq_depth,
            deq_depth: d.deq_depth,
            depths: &self.tm,
            drop: false,
            consume: false,
            flow_control: Vec::new(),
            registers: PassRegisters::new(&mut self.regs, PassState::new(self.pass_serial, Gress::Egress)),
            tables: &self.tables,
            emit: Vec::new(),
            mirror: None,
        };
        let r = self.program.egress(&mut cx);
        // The lists are taken only when the program filled them: taking an
        // empty one copies 16 bytes at a time what was written 8 at a time
        // just before, a store the CPU cannot forward (a stall a packet).
        let (dropped, consumed, mirror) = (cx.drop, cx.consume, cx.mirror.take());
        let fcs = if cx.flow_control.is_empty() { Vec::new() } else { std::mem::take(&mut cx.flow_control) };
        let emit = if cx.emit.is_empty() { Vec::new() } else { std::mem::take(&mut cx.emit) };
        for fc in fcs {
            if fc.pause {
                self.tm.pause_queue(fc.port, fc.queue);
            } else {
                self.resume_queue(now, fc.port, fc.queue, out);
            }
        }
        if let Err(e) = r {
            self.program_error(e);
            return None;
        }
        if let Some(m) = mirror {
            self.mirror(now, &d.pkt.frame, m, out);
        }
        if dropped || consumed {
            if dropped {
                self.counters.drop_program += 1;
            } else {
                self.counters.consumed_by_program += 1;
            }
            self.emit_frames(now, emit, d.pkt.ingress_port, out);
            return None;
        }
        Some(emit)
    }

    fn transmit(&mut self, now: Nanos, port: PortId, frame: BytesMut, out: &mut Vec<Transmit>) {
        let p = &mut self.ports[port.index()];
        let end = p.serializer.start(now, self.control_frame_bytes.charged_len(&frame));
        if p.packet_slot_ns > 0 {
            p.next_start = now + p.packet_slot_ns;
        }
        let ready = p.ready_at();
        p.tx_frames += 1;
        p.tx_bytes += frame.len() as u64;
        let more = !p.mac_control.is_empty() || self.tm.has_eligible(ready, port) || self.tm.pfc_wakeup(now, port).is_some();
        out.push(Transmit { port, frame, start: now, end });
        if more {
            self.arm(port, ready);
        }
    }

    /// Internal ports (recirculation, CPU) drain at their rate into a
    /// loop-back: a serial FIFO whose departures are spaced by serialization.
    fn kick_internal(&mut self, now: Nanos, port: PortId) {
        let recirc = port == self.recirc_port();
        let (rate, latency, slot) = if recirc {
            (self.cfg.target.recirculation_rate, self.cfg.target.recirculation_latency_ns, 0)
        } else {
            (self.cfg.target.cpu_port_rate, self.cfg.cpu_latency_ns, 1)
        };
        let mut pfc = Vec::new();
        while let Some(d) = self.tm.dequeue(now, port, &mut self.rng, &mut pfc) {
            let start = self.internal_busy_until[slot].max(now);
            let done = start + rate.serialization_ns(d.pkt.frame.len());
            self.internal_busy_until[slot] = done;
            let kind = if recirc {
                let b = d.pkt.bridged;
                InternalKind::Recirculate { original: PortId(b as u16), pass: (b >> 16) as u8 }
            } else {
                InternalKind::Cpu
            };
            let at = done + latency;
            let pos = self.internal.partition_point(|(t, _, _)| *t <= at);
            self.internal.insert(pos, (at, kind, d.pkt.frame));
            self.timers.push(Reverse((at, Timer::Internal)));
        }
    }

    fn deliver_internal(&mut self, now: Nanos, out: &mut Vec<Transmit>) {
        while let Some((at, _, _)) = self.internal.front() {
            if *at > now {
                break;
            }
            let Some((_, kind, frame)) = self.internal.pop_front() else { break };
            match kind {
                InternalKind::Recirculate { original, pass } => {
                    self.ingress(now, PacketSource::Recirculated { original, pass }, frame, out);
                }
                InternalKind::Cpu => self.run_cpu(now, CpuEvent::Packet(&frame), out),
            }
        }
    }

    /// The switch CPU handles one event: the program's CPU hook runs with
    /// a view of registers, tables, ports and queues; its register and
    /// table writes apply after the control-plane latency (in order), its
    /// timers are armed, its frames leave at once in the control queue.
    fn run_cpu(&mut self, now: Nanos, event: CpuEvent<'_>, out: &mut Vec<Transmit>) {
        let port_stats: Vec<PortStats> = self
            .ports
            .iter()
            .map(|p| PortStats { rx_frames: p.rx_frames, rx_bytes: p.rx_bytes, tx_frames: p.tx_frames, tx_bytes: p.tx_bytes })
            .collect();
        let mut cx = CpuCx {
            now,
            register_writes: Vec::new(),
            table_writes: Vec::new(),
            timers: Vec::new(),
            send: Vec::new(),
            regs: &self.regs,
            tables: &self.tables,
            port_up: &self.port_up,
            port_stats: &port_stats,
            depths: &self.tm,
        };
        match event {
            CpuEvent::Packet(frame) => self.program.cpu_receive(&mut cx, frame),
            CpuEvent::PortStatus(port, up) => self.program.cpu_port_status(&mut cx, port, up),
            CpuEvent::PortRate(port, rate) => self.program.cpu_port_rate(&mut cx, port, rate),
            CpuEvent::Timer(token) => self.program.cpu_timer(&mut cx, token),
        }
        let CpuCx { register_writes, table_writes, timers, send, .. } = cx;
        let at = now + self.cfg.cpu_latency_ns;
        let writes = register_writes.len() + table_writes.len();
        self.cpu_writes.extend(register_writes.into_iter().map(|(r, i, v)| (at, CpuWrite::Register(r, i, v))));
        self.cpu_writes.extend(table_writes.into_iter().map(|(t, k, d)| (at, CpuWrite::Table(t, k, d))));
        if writes > 0 {
            self.timers.push(Reverse((at, Timer::CpuWrites)));
        }
        for (t, token) in timers {
            self.timers.push(Reverse((t.max(now), Timer::CpuAlarm(token))));
        }
        for (p, f) in send {
            if p.index() < self.ports.len() {
                let cq = self.tm.config().control_queue();
                self.enqueue(now, Admission::plain(p, cq), f, out);
            }
        }
    }

    fn program_error(&mut self, e: ProgramError) {
        self.counters.program_errors += 1;
        if self.cfg.strict {
            panic!("switch `{}`: program `{}` error: {e}", self.name, self.program.name());
        }
        self.last_program_error = Some(e);
    }
}

/// Sets CE on an ECN-capable IPv4 frame; returns whether it marked.
fn mark_ce(frame: &mut BytesMut) -> bool {
    let Ok(eth) = ethernet::Frame::new_checked(&frame[..]) else { return false };
    if eth.ethertype() != EtherType::Ipv4 {
        return false;
    }
    let l3 = eth.header_len();
    let Ok(mut ip) = ipv4::Packet::new_checked(&mut frame[l3..]) else { return false };
    match ip.ecn() {
        ipv4::Ecn::Ect0 | ipv4::Ecn::Ect1 => {
            ip.set_ecn(ipv4::Ecn::Ce);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{ControlFrameBytes, Port, Switch, TableFile};
    use std::mem::{align_of, offset_of, size_of};

    /// The layout the hot path counts on: a departure touches the first
    /// two lines of its port, an arrival the third.
    #[test]
    fn a_departure_touches_two_port_lines_an_arrival_one() {
        assert_eq!(align_of::<Port>(), 64);
        let line = |offset: usize, len: usize| {
            let (first, last) = (offset / 64, (offset + len - 1) / 64);
            assert_eq!(first, last, "a field at {offset} ({len} bytes) spans two lines");
            first
        };
        let departure = [
            line(offset_of!(Port, serializer), size_of::<crate::serializer::Serializer>()),
            line(offset_of!(Port, next_start), 8),
            line(offset_of!(Port, packet_slot_ns), 8),
            line(offset_of!(Port, mac_control), 32),
            line(offset_of!(Port, tx_frames), 8),
            line(offset_of!(Port, tx_bytes), 8),
            line(offset_of!(Port, rewrite), 12),
        ];
        assert_eq!(departure, [0, 0, 0, 1, 1, 1, 1]);
        let arrival = [
            line(offset_of!(Port, rx_frames), 8),
            line(offset_of!(Port, rx_bytes), 8),
            line(offset_of!(Port, mtu), 2),
            line(offset_of!(Port, mac), 6),
        ];
        assert_eq!(arrival, [2; 4]);
    }

    /// What a hop reads of the switch itself, apart from its counters,
    /// traffic manager, routes and RNG, lies on its first four lines.
    #[test]
    fn a_hop_reads_the_first_four_lines_of_the_switch() {
        let ends = [
            offset_of!(Switch, ports) + 24,
            offset_of!(Switch, port_up) + 24,
            offset_of!(Switch, pass_serial) + 8,
            offset_of!(Switch, address) + 4,
            offset_of!(Switch, hash_seed) + 4,
            offset_of!(Switch, timers) + 24,
            offset_of!(Switch, pfc_scratch) + 24,
            offset_of!(Switch, program) + 16,
            offset_of!(Switch, port_rates) + 24,
            offset_of!(Switch, tables) + size_of::<TableFile>(),
            offset_of!(Switch, software) + 8,
            offset_of!(Switch, snapshot_period_ns) + 8,
            offset_of!(Switch, control_frame_bytes) + size_of::<ControlFrameBytes>(),
            offset_of!(Switch, program_egress) + 1,
        ];
        assert!(ends.iter().all(|&e| e <= 4 * 64), "{ends:?}");
        assert!(offset_of!(Switch, counters) < 5 * 64);
    }
}
