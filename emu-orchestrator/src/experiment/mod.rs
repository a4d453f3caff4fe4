//! One virtual-time experiment: a topology, a scheme, a traffic pattern and
//! a seed in; `summary.json` and a human summary out.
//!
//! Flows of a pattern get distinct UDP source ports (49152 + flow id) so
//! ECMP spreads them; pattern flows start at t = 0 (after ARP), workload
//! flows at their Poisson arrival times. (Synthetic UDP hosts send each flow
//! at line rate; `--transport` picks RoCEv2 or TCP hosts with congestion control.) A run ends when no
//! event is left (every flow delivered or lost) or at `until` simulated
//! time, whichever comes first.

pub mod compare;
pub mod distributed;
pub mod remote;
pub mod report;

use crate::config::params::{tm_settings, TRANSPORT_PARAMS};
use crate::config::topology::Topology;
use emu_node::engine::{Engine, EngineError};
use emu_node::fabric::{FabricSpec, NodeKind};
use emu_node::fct::SlowdownDefinition;
use emu_node::host::roce::{IrnResend, Recovery};
use emu_node::host::{CongestionControl, RoceConfig, RtoRule, SizedFlow, TcpConfig, REFERENCE_RATE};
use emu_node::host::{UdpFlow, UdpMode};
use emu_node::ids::{FlowId, NodeId};
use emu_node::node::{build_nodes, HostTransport, Node, NodeConfig};
use emu_node::results::{ImbalanceSampler, Summary};
use emu_node::schemes::{self, Params, SchemeError, TimeScale};
use emu_node::time::{BitRate, Nanos};
use emu_node::traffic::{Pattern, PatternError};
use emu_node::watchdog::{ProgressWatchdog, StallReport};
use emu_node::wire::buffer::TailPolicy;
use emu_node::workload::{host_link_load, parse_flow_list, FlowSizeCdf, PoissonArrivals};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many threads a virtual-time run uses (`--threads N|auto`). The
/// results are the same for every count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// One per leaf or pod with hosts, at most the cores this process may
    /// use ([`emu_node::engine::partition::auto_threads`]).
    Auto,
    /// Up to this many (the engine may use fewer: [`Engine::with_threads`]).
    Exactly(usize),
}

impl Threads {
    /// The count for `fabric`.
    pub fn count(self, fabric: &FabricSpec) -> usize {
        match self {
            Threads::Exactly(n) => n,
            Threads::Auto => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                emu_node::engine::partition::auto_threads(fabric, cores)
            }
        }
    }
}

impl std::str::FromStr for Threads {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Threads::Auto),
            _ => match s.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Threads::Exactly(n)),
                _ => Err(format!("`{s}` is not a thread count: give a number of at least 1, or `auto`")),
            },
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Scheme for every switch (`None`: as in the topology).
    pub scheme: Option<String>,
    /// Scheme parameter overrides by scheme (`--set scheme.param=value`):
    /// each reaches only the switches that run its scheme, and a scheme no
    /// switch runs is an error ([`crate::config::params`]).
    pub scheme_params: std::collections::BTreeMap<String, Params>,
    /// Traffic pattern.
    pub traffic: Pattern,
    /// Bytes per flow (when `rate` is `None`).
    pub flow_size: u64,
    /// Constant bit rate per flow instead of a fixed size.
    pub rate: Option<BitRate>,
    /// How long constant-rate flows send.
    pub duration: Nanos,
    /// UDP payload bytes per packet (`None`: MTU-sized).
    pub payload: Option<u16>,
    /// DSCP of the flows.
    pub dscp: u8,
    /// Send ECN-capable packets.
    pub ecn_capable: bool,
    /// Force PFC on (`Some(true)`) or off on every switch.
    pub pfc: Option<bool>,
    /// Run seed.
    pub seed: u64,
    /// Stop at this simulated time at the latest (counted from the trace
    /// origin of a flow list, see [`trace_origin`]).
    pub until: Nanos,
    /// Slowdown statistics ignore flows that started before this (the
    /// ConWeave setup drops the first 5 ms; counted from the trace origin).
    pub warmup: Nanos,
    /// Which FCT slowdown the summary's statistics are of.
    pub slowdown: SlowdownDefinition,
    /// Poisson arrivals from a flow-size CDF instead of `traffic`.
    pub workload: Option<WorkloadOptions>,
    /// What the hosts run.
    pub transport: Transport,
    /// Transport parameters (`dcqcn.g` → `0.004`, ...), see [`TRANSPORT_PARAMS`].
    pub transport_params: std::collections::BTreeMap<String, String>,
    /// Scale the transports' time parameters (given for 100 Gbit/s) by
    /// 100 Gbit/s / host rate (docs/SCHEMES.md#parameter-scaling; on by default in real time,
    /// where wall-clock lag would otherwise fire µs timeouts spuriously).
    pub scale_time_params: bool,
    /// An explicit flow list (name, text) in the ns-3 generator's format
    /// instead of `traffic` (see [`emu_node::workload::parse_flow_list`]).
    pub flow_list: Option<(String, String)>,
    /// Virtual time: threads the fabric runs on (the engine may use fewer,
    /// see [`Engine::with_threads`]); results do not depend on it.
    pub threads: Threads,
    /// Virtual time: once this is set (Ctrl-C), the run stops at its next
    /// progress step and returns what it has, marked incomplete
    /// ([`Summary::incomplete`]); a comparison starts no further run.
    pub interrupt: Option<Arc<AtomicBool>>,
    /// Virtual time: stop a run whose flows stopped moving
    /// ([`emu_node::watchdog`], `--stall-timeout`).
    pub stall_timeout: StallTimeout,
    /// Routing updates after the schedule's link changes, learnt this long
    /// per switch hop (`--routing-update`; `None`: switches know only their
    /// own ports, the default). ECMP and RPS only.
    pub routing_update: Option<Nanos>,
    /// Virtual time: record every PFC frame a switch port or host receives
    /// ([`RunOutcome::pfc_events`], `weft run --pfc-trace`).
    pub pfc_trace: bool,
    /// Wire time of control frames at every switch port and RoCE host,
    /// when not their length (`weft run --frame-bytes`).
    pub control_frame_bytes: emu_node::wire::frame::ControlFrameBytes,
}

/// How long a virtual-time run may go without progress (no flow completes,
/// no byte is delivered or acknowledged) while flows are unfinished before
/// it stops with a report ([`RunOutcome::stalled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StallTimeout {
    /// A span the hosts' own timers cannot reach ([`StallTimeout::span`]).
    #[default]
    Auto,
    /// Never stop.
    Off,
    /// This span of simulated time.
    After(Nanos),
}

impl StallTimeout {
    /// The span for hosts running `transport`, `None` when off. Auto: 10×
    /// the longest RoCE retransmission timeout (Go-Back-N's, IRN's high
    /// RTO; 10 ms at 100 Gbit/s, scaled with the rate like the timeouts);
    /// TCP 120 s, twice the 60 s ceiling of its backed-off RTO, so that a
    /// flow waiting out its back-off is never taken for a stall; UDP 1 s
    /// (its senders' bytes count as progress: only senders held by PFC
    /// stop).
    pub fn span(self, transport: &HostTransport) -> Option<Nanos> {
        match self {
            StallTimeout::Off => None,
            StallTimeout::After(t) => Some(t),
            StallTimeout::Auto => Some(match transport {
                HostTransport::Roce(rc) => {
                    let rto = match rc.recovery {
                        Recovery::Irn { rto_high, .. } => rto_high,
                        Recovery::GoBackN => 0,
                    };
                    10 * rc.gbn_timeout.max(rto)
                }
                HostTransport::Tcp(_) => 2 * emu_node::host::tcp::MAX_RTO,
                HostTransport::Udp => 1_000_000_000,
            }),
        }
    }
}

impl std::str::FromStr for StallTimeout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(StallTimeout::Auto),
            "off" => Ok(StallTimeout::Off),
            d => match crate::config::units::parse_duration(d) {
                Ok(0) => Err("a stall timeout of 0 would stop every run: give a duration, `auto` or `off`".into()),
                Ok(t) => Ok(StallTimeout::After(t)),
                Err(e) => Err(format!("`{d}`: {e} (or `auto`, `off`)")),
            },
        }
    }
}

/// Whether `flag` is set.
pub(crate) fn interrupted(flag: &Option<Arc<AtomicBool>>) -> bool {
    flag.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// The transport of the synthetic hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP flows at line rate, no congestion control.
    Udp,
    /// RoCEv2 with DCQCN, Go-Back-N; PFC on in every switch.
    RoceLossless,
    /// RoCEv2 with DCQCN, IRN (selective repeat, BDP flow control), no PFC.
    RoceIrn,
    /// TCP NewReno (or DCTCP with `--set tcp.cc=dctcp`).
    Tcp,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "udp" => Ok(Transport::Udp),
            "roce-lossless" => Ok(Transport::RoceLossless),
            "roce-irn" => Ok(Transport::RoceIrn),
            "tcp" => Ok(Transport::Tcp),
            other => Err(format!("unknown transport `{other}` (udp, roce-lossless, roce-irn, tcp)")),
        }
    }
}

/// How long a run whose switches send periodic messages (hellos) goes on
/// after every host's traffic is over, so that what is still in flight
/// (UDP's last packets) arrives.
pub const DRAIN_AFTER_TRAFFIC: Nanos = 10_000_000;

fn apply_tcp_params(tc: &mut TcpConfig, params: &std::collections::BTreeMap<String, String>) -> Result<(), RunError> {
    use crate::config::units::{parse_duration, parse_size};
    for (k, v) in params.iter().filter(|(k, _)| !k.starts_with("tm.")) {
        let bad = |e: String| RunError::Transport(format!("--set {k}={v}: {e}"));
        let unit = |source| RunError::SetUnit { key: k.clone(), value: v.clone(), source };
        match k.as_str() {
            "tcp.cc" => {
                tc.cc = match v.as_str() {
                    "newreno" => CongestionControl::NewReno,
                    "dctcp" => CongestionControl::Dctcp,
                    _ => return Err(bad("expected newreno or dctcp".into())),
                }
            }
            "tcp.mss" => {
                tc.mss = v.parse::<u16>().ok().filter(|m| (64..=9000).contains(m)).ok_or_else(|| bad("not an MSS in 64..=9000".into()))?
            }
            "tcp.min_rto" => tc.min_rto = parse_duration(v).map_err(unit)?,
            "tcp.initial_rto" => tc.initial_rto = parse_duration(v).map_err(unit)?,
            "tcp.rto" => {
                tc.rto_rule = match v.as_str() {
                    "rfc6298" => RtoRule::Rfc6298,
                    "linux" => RtoRule::Linux,
                    _ => return Err(bad("expected rfc6298 or linux".into())),
                }
            }
            "tcp.rcv_buffer" => tc.rcv_buffer = parse_size(v).map_err(unit)?,
            "tcp.dctcp_g" => {
                tc.dctcp_g = v.parse::<f64>().ok().filter(|g| *g > 0.0 && *g < 1.0).ok_or_else(|| bad("not a fraction in (0, 1)".into()))?
            }
            _ if !k.starts_with("tcp.") => {
                return Err(RunError::Transport(format!("--set {k}: RoCE parameters need --transport roce-lossless or roce-irn")))
            }
            _ => {
                let known: Vec<&str> = TRANSPORT_PARAMS.iter().map(|p| p.0).filter(|p| p.starts_with("tcp.")).collect();
                return Err(RunError::Transport(format!("--set {k}: unknown TCP parameter (known: {})", known.join(", "))));
            }
        }
    }
    Ok(())
}

fn apply_transport_params(rc: &mut RoceConfig, params: &std::collections::BTreeMap<String, String>) -> Result<(), RunError> {
    use crate::config::units::{parse_duration, parse_rate, parse_size};
    for (k, v) in params.iter().filter(|(k, _)| !k.starts_with("tm.")) {
        let bad = |e: String| RunError::Transport(format!("--set {k}={v}: {e}"));
        let unit = |source| RunError::SetUnit { key: k.clone(), value: v.clone(), source };
        let dur = || parse_duration(v).map_err(unit);
        let rate = || parse_rate(v).map_err(unit);
        match k.as_str() {
            "roce.payload" => {
                rc.payload = v
                    .parse::<u16>()
                    .ok()
                    .filter(|p| (64..=9000).contains(p))
                    .ok_or_else(|| bad("not a payload size in 64..=9000".into()))?
            }
            "roce.nak_interval" => rc.nak_interval = dur()?,
            "roce.arp" => {
                rc.static_arp = match v.as_str() {
                    "static" => true,
                    "resolve" => false,
                    _ => return Err(bad("expected resolve or static".into())),
                }
            }
            "roce.gbn_timeout" => rc.gbn_timeout = dur()?,
            "irn.bdp" | "irn.rto_low" | "irn.rto_high" | "irn.resend" => match &mut rc.recovery {
                Recovery::Irn { bdp_bytes, rto_low, rto_high, resend } => match k.as_str() {
                    "irn.bdp" => *bdp_bytes = parse_size(v).map_err(unit)?,
                    "irn.rto_low" => *rto_low = dur()?,
                    "irn.resend" => {
                        *resend = match v.as_str() {
                            "selective" => IrnResend::Selective,
                            "from-unacked" => IrnResend::FromUnacked,
                            _ => return Err(bad("expected selective or from-unacked".into())),
                        }
                    }
                    _ => *rto_high = dur()?,
                },
                Recovery::GoBackN => return Err(bad("IRN parameters need --transport roce-irn".into())),
            },
            "dcqcn.enabled" => rc.dcqcn.enabled = v.parse().map_err(|_| bad("not true/false".into()))?,
            "dcqcn.g" => {
                rc.dcqcn.g = v.parse::<f64>().ok().filter(|g| *g > 0.0 && *g < 1.0).ok_or_else(|| bad("not a fraction in (0, 1)".into()))?
            }
            "dcqcn.alpha_interval" => rc.dcqcn.alpha_interval = dur()?,
            "dcqcn.decrease_interval" => rc.dcqcn.decrease_interval = dur()?,
            "dcqcn.rp_timer" => rc.dcqcn.rp_timer = dur()?,
            "dcqcn.fast_recovery_stages" => rc.dcqcn.fast_recovery_stages = v.parse().map_err(|_| bad("not a count".into()))?,
            "dcqcn.rai" => rc.dcqcn.rai = rate()?,
            "dcqcn.rhai" => rc.dcqcn.rhai = rate()?,
            "dcqcn.min_rate" => rc.dcqcn.min_rate = rate()?,
            "dcqcn.cnp_interval" => rc.dcqcn.cnp_interval = dur()?,
            "dcqcn.clamp_target_rate" => rc.dcqcn.clamp_target_rate = v.parse().map_err(|_| bad("not true/false".into()))?,
            "dcqcn.rate_on_first_cnp" => {
                rc.dcqcn.rate_on_first_cnp =
                    v.parse::<f64>().ok().filter(|f| *f > 0.0 && *f <= 1.0).ok_or_else(|| bad("not a fraction in (0, 1]".into()))?
            }
            _ if k.starts_with("tcp.") => return Err(RunError::Transport(format!("--set {k}: TCP parameters need --transport tcp"))),
            _ => {
                let known: Vec<&str> = TRANSPORT_PARAMS.iter().map(|p| p.0).collect();
                return Err(RunError::Transport(format!("--set {k}: unknown transport parameter (known: {})", known.join(", "))));
            }
        }
    }
    Ok(())
}

/// A Poisson workload (ConWeave §4.1 convention for `load`).
#[derive(Debug, Clone)]
pub struct WorkloadOptions {
    /// Flow sizes.
    pub cdf: FlowSizeCdf,
    /// Average load of the fabric core, in (0, 1].
    pub load: f64,
    /// Stop generating after this many flows...
    pub flows: Option<usize>,
    /// ...or when arrivals pass this time.
    pub duration: Nanos,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            scheme: None,
            scheme_params: Default::default(),
            traffic: Pattern::Permutation,
            flow_size: 1_000_000,
            rate: None,
            duration: 1_000_000,
            payload: None,
            dscp: 0,
            ecn_capable: true,
            pfc: None,
            seed: 1,
            until: 1_000_000_000,
            warmup: 0,
            slowdown: SlowdownDefinition::default(),
            workload: None,
            flow_list: None,
            threads: Threads::Exactly(1),
            interrupt: None,
            stall_timeout: StallTimeout::Auto,
            routing_update: None,
            pfc_trace: false,
            control_frame_bytes: Default::default(),
            transport: Transport::Udp,
            transport_params: Default::default(),
            scale_time_params: false,
        }
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Scheme problem.
    #[error(transparent)]
    Scheme(#[from] SchemeError),
    /// A `--set` that cannot be applied.
    #[error(transparent)]
    Set(#[from] crate::config::params::SetError),
    /// A flow list that does not parse or does not fit the topology.
    #[error(transparent)]
    FlowList(#[from] emu_node::workload::WorkloadFileError),
    /// A combination the transport cannot do.
    #[error("{0}")]
    Transport(String),
    /// A `--set` value whose unit does not parse.
    #[error("--set {key}={value}: {source}")]
    SetUnit {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// Cause.
        #[source]
        source: crate::config::units::UnitError,
    },
    /// A load outside (0, 1].
    #[error("--load {0} must be in (0, 1]")]
    Load(f64),
    /// A run on another machine failed (`weft compare --machines`).
    #[error("{0}")]
    Remote(String),
    /// Pattern problem.
    #[error(transparent)]
    Pattern(#[from] PatternError),
    /// Engine could not be built.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// `--capture` names a link the topology does not have.
    #[error("--capture: no link `{0}`")]
    NoSuchLink(String),
    /// The real-time driver of this process failed.
    #[error("real-time run: {0}")]
    Runtime(#[from] emu_node::runtime::RuntimeError),
    /// The distributed real-time run failed.
    #[error("real-time run: {0}")]
    Live(#[from] crate::cluster::FabricError),
    /// The fabric certificate.
    #[error("real-time run: {0}")]
    Tls(#[from] emu_node::tls::TlsError),
    /// The Prometheus configuration for the run.
    #[error("real-time run: {0}")]
    Prometheus(#[from] crate::observe::prometheus::PrometheusError),
    /// The async runtime could not start.
    #[error("real-time run: cannot start the async runtime: {0}")]
    AsyncRuntime(std::io::Error),
}

/// A finished run.
#[derive(Debug)]
pub struct RunOutcome {
    /// The results.
    pub summary: Summary,
    /// Wall-clock time of the event loop.
    pub wall: Duration,
    /// Whether the run stopped at `until` with events left.
    pub truncated: bool,
    /// Threads the engine ran on (1 in real time).
    pub threads: usize,
    /// The progress watchdog stopped the run: what held the fabric.
    pub stalled: Option<StallReport>,
    /// With [`RunOptions::pfc_trace`]: every PFC frame received, by time
    /// (`None` without it).
    pub pfc_events: Option<Vec<PfcRecord>>,
    /// A real-time run in this process: how faithful its timing was
    /// (`faithfulness.json`; docs/REALTIME.md#faithfulness).
    pub faithfulness: Option<crate::observe::faithfulness::Faithfulness>,
}

/// One priority of one PFC frame a node received (`pfc.csv`): the ConWeave
/// authors' `pfc.txt` with names for their node and interface numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfcRecord {
    /// When it was received.
    pub at: Nanos,
    /// The node that received it (the one told to pause).
    pub node: String,
    /// The node at the other end of that port (the one that sent it).
    pub peer: String,
    /// The port it came in on.
    pub port: u16,
    /// The priority.
    pub class: u8,
    /// Pause, or resume.
    pub pause: bool,
}

/// The PFC logs of every node of `engine`, in time order (ties by node).
fn pfc_records(fabric: &emu_node::fabric::FabricSpec, nodes: &[Node]) -> Vec<PfcRecord> {
    let mut out = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let Some(spec) = fabric.nodes.get(i) else { continue };
        for e in n.pfc_log().events() {
            let peer = spec.ports.get(e.port.index()).and_then(|p| fabric.nodes.get(p.peer.index())).map_or("", |p| p.name.as_str());
            out.push(PfcRecord {
                at: e.at,
                node: spec.name.clone(),
                peer: peer.to_string(),
                port: e.port.0,
                class: e.class,
                pause: e.pause,
            });
        }
    }
    out.sort_by_key(|r| r.at);
    out
}

/// `pfc.csv`: one line per received priority, in time order.
pub fn pfc_csv(records: &[PfcRecord]) -> String {
    let mut s = String::from("time_ns,node,port,peer,priority,event\n");
    for r in records {
        s += &format!("{},{},{},{},{},{}\n", r.at, r.node, r.port, r.peer, r.class, if r.pause { "pause" } else { "resume" });
    }
    s
}

/// Progress callback: (simulated ns, events so far).
pub type Progress<'a> = &'a mut dyn FnMut(Nanos, u64);

/// The topology's fabric with the run's scheme, scheme parameters and PFC
/// setting applied to every switch (what [`prepare`] builds, and what the
/// emu-nodes of a distributed real-time run build their switches from).
pub fn configured_fabric(topo: &Topology, opts: &RunOptions) -> emu_node::fabric::FabricSpec {
    let mut fabric = topo.fabric.clone();
    let rate = fabric_rate(&fabric);
    // prepare() has rejected a bad value already.
    let tm = tm_settings(&opts.transport_params).unwrap_or_default();
    for n in &mut fabric.nodes {
        if let NodeKind::Switch(s) = &mut n.kind {
            if let Some(sc) = &opts.scheme {
                s.scheme = sc.clone();
            }
            if opts.scale_time_params {
                s.time_scale = scheme_time_scale(&s.scheme, rate).map_or(TimeScale::ONE, |t| t.scale);
            }
            (s.buffer_rules, s.held_outside_pfc, s.pfc_watchdog) = (tm.rules, tm.held_outside_pfc, tm.pfc_watchdog);
            s.pfc_pause_ns = tm.pfc_pause_ns;
            s.control_frame_bytes = opts.control_frame_bytes;
            if tm.buffer_bytes.is_some() {
                s.buffer_bytes = tm.buffer_bytes;
            }
            match (opts.pfc, opts.transport) {
                (Some(p), _) => s.pfc = p,
                (None, Transport::RoceLossless) => s.pfc = true,
                (None, Transport::RoceIrn) => s.pfc = false,
                (None, Transport::Udp | Transport::Tcp) => {}
            }
        }
    }
    crate::config::params::apply_scheme_params(&mut fabric, &opts.scheme_params);
    if let Some(per_hop) = opts.routing_update {
        fabric.add_routing_updates(per_hop);
    }
    fabric
}

/// The rate a scheme's time parameters are scaled to (docs/SCHEMES.md#parameter-scaling): the
/// fabric's slowest link between two switches (where its queues build, what
/// a flowlet gap, a DRE period or a telemetry range is measured against), or
/// the slowest host link when no two switches are linked. `None`: no links.
pub fn fabric_rate(f: &FabricSpec) -> Option<BitRate> {
    let is_switch = |n: NodeId| f.nodes.get(n.index()).is_some_and(|n| n.as_switch().is_some());
    let links = f.nodes.iter().filter(|n| n.as_switch().is_some()).flat_map(|n| n.ports.iter());
    let between_switches = links.clone().filter(|p| is_switch(p.peer)).map(|p| p.rate).min();
    between_switches.or_else(|| links.map(|p| p.rate).min())
}

/// How a scheme's time parameters are scaled in a run (docs/SCHEMES.md#parameter-scaling).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchemeScaling {
    /// The rate its defaults are given for.
    pub reference: BitRate,
    /// The fabric's rate ([`fabric_rate`]).
    pub rate: BitRate,
    /// `reference / rate`.
    pub scale: TimeScale,
}

/// The scaling of `scheme` at fabric rate `rate`; `None` for a scheme
/// without time parameters (or an unknown one, or no rate).
pub fn scheme_time_scale(scheme: &str, rate: Option<BitRate>) -> Option<SchemeScaling> {
    let reference = schemes::info(scheme)?.reference_rate?;
    let rate = rate?;
    Some(SchemeScaling { reference, rate, scale: TimeScale::for_rates(reference, rate) })
}

/// One line per scaled time parameter of `scheme`: `name default → used`
/// (µs), the value set in `params` where there is one.
pub fn scaled_param_report(scheme: &str, params: &Params, scale: TimeScale) -> Vec<String> {
    let Some(info) = schemes::info(scheme) else { return Vec::new() };
    let f = scale.factor();
    let number = |x: &str| x.trim().parse::<f64>().ok().map(|n| format!("{}", (n * f * 1000.0).round() / 1000.0));
    // "8", "0,50000" or "8 (3-tier: 16)" (a default the scheme picks by topology).
    let scaled = |v: &str| -> String {
        if let Some((head, rest)) = v.split_once('(') {
            if let Some((label, n)) = rest.trim_end_matches(')').split_once(':') {
                if let (Some(h), Some(n)) = (number(head), number(n)) {
                    return format!("{h} ({label}: {n})");
                }
            }
            return v.to_string();
        }
        v.split(',').map(|x| number(x).unwrap_or_else(|| x.to_string())).collect::<Vec<_>>().join(",")
    };
    info.params
        .iter()
        .filter(|p| p.is_time())
        .map(|p| {
            let v = params.get(p.name).map_or(p.default, String::as_str);
            format!("{} {} → {}", p.name, v, scaled(v))
        })
        .collect()
}

/// The time origin of a flow list: its first start rounded down to a whole
/// millisecond. The ConWeave authors' generator starts its arrivals at a
/// base time of 2 s (`traffic_gen.py`, `base_t`); a replay runs the list
/// shifted by the origin, so `--warmup` and `--until` count from it, as the
/// authors' analysis counts from its `FLOWGEN_START_TIME`.
pub fn trace_origin(starts: impl IntoIterator<Item = Nanos>) -> Nanos {
    starts.into_iter().min().map_or(0, |t| t / 1_000_000 * 1_000_000)
}

/// An engine ready to run: fabric with overrides applied, flows added.
pub struct Prepared {
    /// The fabric with the run's overrides applied.
    pub fabric: FabricSpec,
    /// How its nodes are built.
    pub node_config: NodeConfig,
    /// The flows, in plan order: source host, its UDP form and its sized
    /// form (the host's transport takes the one it runs).
    pub flows: Vec<(NodeId, UdpFlow, SizedFlow)>,
    /// The schemes, `/`-separated.
    pub scheme: String,
    /// What the traffic is, in words.
    pub traffic: String,
    /// Where the flows' times start ([`trace_origin`]; 0 unless a flow list
    /// starts later): every start was shifted back by it.
    pub time_origin: Nanos,
}

impl Prepared {
    /// The virtual-time engine on up to `threads` threads with every flow
    /// added (in plan order, each source host re-armed after its flow).
    /// Virtual time leaves the RoCE ICRC out ([`RoceConfig::icrc`]): no
    /// consumer outside weft sees these frames.
    pub fn engine(&self, threads: Threads) -> Result<Engine, RunError> {
        let threads = threads.count(&self.fabric);
        let mut cfg = self.node_config.clone();
        if let HostTransport::Roce(rc) = &mut cfg.transport {
            rc.icrc = false;
        }
        let mut nodes = build_nodes(&self.fabric, &cfg).map_err(EngineError::from)?;
        self.reserve_flows(&mut nodes);
        let mut engine = Engine::with_threads(&self.fabric, nodes, threads)?;
        for (src, flow, sized) in &self.flows {
            if let Some(n) = engine.node_mut(*src) {
                n.add_flow(flow, sized);
            }
            engine.refresh(*src);
        }
        Ok(engine)
    }

    /// Gives each source host (index = node id) room for exactly the
    /// flows it will send.
    fn reserve_flows(&self, nodes: &mut [Node]) {
        let mut count = vec![0usize; nodes.len()];
        for (src, _, _) in &self.flows {
            if let Some(c) = count.get_mut(src.index()) {
                *c += 1;
            }
        }
        for (node, n) in nodes.iter_mut().zip(count) {
            node.reserve_flows(n);
        }
    }

    /// The nodes with every flow added, for a real-time driver (no engine).
    /// Their frame pools write every reused buffer whole
    /// ([`TailPolicy::Write`]): in real time a host may receive a frame
    /// from outside weft (a TAP host's, a VM's) that carries a payload.
    pub fn nodes(&self) -> Result<Vec<Node>, RunError> {
        let cfg = NodeConfig { frame_tails: TailPolicy::Write, ..self.node_config.clone() };
        let mut nodes = build_nodes(&self.fabric, &cfg).map_err(EngineError::from)?;
        self.reserve_flows(&mut nodes);
        for (src, flow, sized) in &self.flows {
            if let Some(n) = nodes.get_mut(src.index()) {
                n.add_flow(flow, sized);
            }
        }
        Ok(nodes)
    }
}

/// The schemes that forward on the routing table's equal-cost groups alone,
/// which `--routing-update` changes.
pub const ROUTED_SCHEMES: [&str; 2] = ["ecmp", "rps"];

/// Prepares a run (fabric with overrides applied, the nodes' configuration,
/// the flows); [`Prepared::engine`] and [`Prepared::nodes`] build from it.
pub fn prepare(topo: &Topology, opts: &RunOptions) -> Result<Prepared, RunError> {
    tm_settings(&opts.transport_params)?;
    let fabric = configured_fabric(topo, opts);
    let scheme_names: std::collections::BTreeSet<String> =
        fabric.nodes.iter().filter_map(|n| n.as_switch()).map(|s| s.scheme.clone()).collect();
    crate::config::params::check_schemes_run(&fabric, &opts.scheme_params)?;
    if opts.routing_update.is_some() {
        if let Some(s) = scheme_names.iter().find(|s| !ROUTED_SCHEMES.contains(&s.as_str())) {
            return Err(RunError::Transport(format!(
                "--routing-update models the routers of {}: {s} keeps its own view of the paths (choose --scheme ecmp or rps)",
                ROUTED_SCHEMES.join(" and ")
            )));
        }
    }
    for s in &scheme_names {
        schemes::build(s, opts.scheme_params.get(s).unwrap_or(&Params::new()), Default::default())?;
    }
    let hosts = fabric.hosts();
    let mut dscp_of: Vec<u8> = Vec::new();
    let mut gap_of: Vec<Option<Nanos>> = Vec::new();
    let mut sport_of: Vec<Option<u16>> = Vec::new();
    let mut limits_of: Vec<(Option<BitRate>, Option<u64>)> = Vec::new();
    let mut time_origin = 0;
    let plan: Vec<(usize, usize, Option<u64>, Nanos)> = match (&opts.workload, &opts.flow_list) {
        (_, Some((name, text))) => {
            let list = parse_flow_list(name, text, hosts.len())?;
            dscp_of = list.iter().map(|f| f.dscp()).collect();
            limits_of = list.iter().map(|f| (f.app_rate, f.socket_window)).collect();
            if opts.transport != Transport::Tcp && limits_of.iter().any(|l| *l != (None, None)) {
                return Err(RunError::Transport(format!(
                    "{name}: rate_bps= and window_bytes= (iperf3's -b and -w) are for TCP flows; this run's transport is {}",
                    format!("{:?}", opts.transport).to_lowercase()
                )));
            }
            gap_of = list.iter().map(|f| f.mean_gap).collect();
            sport_of = list.iter().map(|f| f.src_port).collect();
            if opts.transport != Transport::Udp && gap_of.iter().any(|g| g.is_some()) {
                return Err(RunError::Transport(format!(
                    "{name}: a mean gap (sixth column) paces UDP flows only; this run's transport is {}",
                    format!("{:?}", opts.transport).to_lowercase()
                )));
            }
            time_origin = trace_origin(list.iter().map(|f| f.flow.start));
            list.into_iter().map(|f| (f.flow.src, f.flow.dst, Some(f.flow.size), f.flow.start - time_origin)).collect()
        }
        (None, None) => opts.traffic.plan(hosts.len(), opts.seed, 0)?.into_iter().map(|f| (f.src, f.dst, None, f.start)).collect(),
        (Some(w), None) => {
            if !(w.load > 0.0 && w.load <= 1.0) {
                return Err(RunError::Load(w.load));
            }
            let rate = hosts.first().and_then(|h| fabric.nodes[h.index()].ports.first()).map_or(BitRate::gbps(1), |p| p.rate);
            let host_load = host_link_load(w.load, topo.oversubscription().unwrap_or(1.0));
            PoissonArrivals::new(w.cdf.clone(), hosts.len(), rate, host_load, 0, opts.seed)
                .take_while(|f| f.start < w.duration)
                .take(w.flows.unwrap_or(usize::MAX))
                .map(|f| (f.src, f.dst, Some(f.size), f.start))
                .collect()
        }
    };
    let host_rate = hosts.first().and_then(|h| fabric.nodes[h.index()].ports.first()).map_or(REFERENCE_RATE, |p| p.rate);
    let host_transport = match opts.transport {
        Transport::Udp if opts.transport_params.keys().any(|k| !k.starts_with("tm.")) => {
            return Err(RunError::Transport(
                "RoCE/DCQCN parameters (--set roce.*, irn.*, dcqcn.*) need --transport roce-lossless or roce-irn".into(),
            ))
        }
        Transport::Udp => HostTransport::Udp,
        Transport::Tcp => {
            if opts.rate.is_some() {
                return Err(RunError::Transport("--rate (constant bit rate) is for UDP hosts; TCP flows have a size".into()));
            }
            let mut tc = TcpConfig::default();
            if opts.scale_time_params {
                let k = REFERENCE_RATE.bps() as f64 / host_rate.bps().max(1) as f64;
                tc.min_rto = (tc.min_rto as f64 * k) as Nanos;
                tc.initial_rto = (tc.initial_rto as f64 * k) as Nanos;
            }
            apply_tcp_params(&mut tc, &opts.transport_params)?;
            HostTransport::Tcp(tc)
        }
        t => {
            if opts.rate.is_some() {
                return Err(RunError::Transport("--rate (constant bit rate) is for UDP hosts; RoCE flows have a size".into()));
            }
            // docs/HOSTS.md#reference-parameters at the reference rate, scaled to the host link rate.
            let scale = host_rate.bps() as f64 / REFERENCE_RATE.bps() as f64;
            let scaled = |r: BitRate| BitRate(((r.bps() as f64) * scale).round().max(1.0) as u64);
            let mut rc = if t == Transport::RoceIrn { RoceConfig::irn(emu_node::fct::bdp_bytes(&fabric)) } else { RoceConfig::lossless() };
            if opts.scale_time_params {
                scale_roce_times(&mut rc, 1.0 / scale);
            }
            rc.dcqcn.rai = scaled(rc.dcqcn.rai);
            rc.dcqcn.rhai = scaled(rc.dcqcn.rhai);
            rc.dcqcn.min_rate = scaled(rc.dcqcn.min_rate);
            apply_transport_params(&mut rc, &opts.transport_params)?;
            rc.control_frame_bytes = opts.control_frame_bytes;
            HostTransport::Roce(rc)
        }
    };
    // Virtual time: every frame a host receives was built by weft's own
    // hosts and programs, zero beyond their headers, so the hosts' pools
    // need not write a reused buffer's zero payload again (`nodes` puts
    // the default back for real time).
    let node_config = NodeConfig { seed: opts.seed, transport: host_transport, frame_tails: TailPolicy::Trust, ..NodeConfig::default() };
    let mut flows = Vec::with_capacity(plan.len());
    for (i, &(src_i, dst_i, size, start)) in plan.iter().enumerate() {
        let src = hosts[src_i];
        let dst_ip = fabric.nodes[hosts[dst_i].index()].as_host().map(|h| h.ip).unwrap_or_default();
        let mtu = fabric.nodes[src.index()].ports.first().map_or(1500, |p| p.mtu);
        let flow = UdpFlow {
            id: FlowId(i as u32),
            dst: dst_ip,
            src_port: sport_of.get(i).copied().flatten().unwrap_or(49152 + (i % 16384) as u16),
            dst_port: 5000,
            dscp: dscp_of.get(i).copied().unwrap_or(opts.dscp),
            ecn_capable: opts.ecn_capable,
            payload_len: opts.payload.unwrap_or(mtu.saturating_sub(28)),
            start,
            mode: match (size, opts.rate) {
                (Some(bytes), _) if gap_of.get(i).copied().flatten().is_some() => {
                    UdpMode::Poisson { bytes, mean_gap: gap_of[i].unwrap_or(1) }
                }
                (Some(size), _) => UdpMode::Bytes(size),
                (None, Some(rate)) => UdpMode::Rate { rate, until: start + opts.duration },
                (None, None) => UdpMode::Bytes(opts.flow_size),
            },
        };
        let (app_rate, socket_window) = limits_of.get(i).copied().unwrap_or((None, None));
        let sized = SizedFlow {
            app_rate,
            socket_window,
            ..SizedFlow::new(flow.id, flow.dst, size.unwrap_or(opts.flow_size), start, flow.src_port, flow.dscp)
        };
        flows.push((src, flow, sized));
    }
    let scheme = scheme_names.into_iter().collect::<Vec<_>>().join("/");
    let traffic = match (&opts.workload, opts.rate) {
        _ if opts.flow_list.is_some() => {
            let origin =
                if time_origin > 0 { format!(", times from {}", emu_node::time::format_duration(time_origin)) } else { String::new() };
            format!("{} flows from {}{origin}", plan.len(), opts.flow_list.as_ref().map_or("", |f| f.0.as_str()))
        }
        (Some(w), _) => format!("{} at load {} ({} Poisson flows)", w.cdf.name, w.load, plan.len()),
        (None, Some(r)) => format!("{} at {} for {}", opts.traffic, r, emu_node::time::format_duration(opts.duration)),
        (None, None) => format!("{} of {} B", opts.traffic, opts.flow_size),
    };
    Ok(Prepared { fabric, node_config, flows, scheme, traffic, time_origin })
}

/// Runs `opts` on `topo`, calling `progress` every million events.
pub fn run(topo: &Topology, opts: &RunOptions, progress: Progress<'_>) -> Result<RunOutcome, RunError> {
    run_with_metrics(topo, opts, None, progress)
}

/// [`run`], also sampling every metric of the `/metrics` catalogue into
/// `metrics` every `metrics.period` of simulated time (`weft run
/// --metrics-out`).
pub fn run_with_metrics(
    topo: &Topology,
    opts: &RunOptions,
    mut metrics: Option<&mut emu_node::metrics::openmetrics::EngineMetrics>,
    progress: Progress<'_>,
) -> Result<RunOutcome, RunError> {
    let prepared = prepare(topo, opts)?;
    let mut engine = prepared.engine(opts.threads)?;
    if opts.pfc_trace {
        for i in 0..prepared.fabric.nodes.len() {
            if let Some(n) = engine.node_mut(emu_node::ids::NodeId(i as u32)) {
                n.pfc_log_mut().enable();
            }
        }
    }
    let mut watchdog = opts.stall_timeout.span(&prepared.node_config.transport).map(|s| ProgressWatchdog::new(s, &prepared.fabric));
    let mut next_check = watchdog.as_ref().map_or(Nanos::MAX, ProgressWatchdog::check_every);
    let mut stalled = None;
    let Prepared { scheme, traffic, time_origin, flows, .. } = prepared;
    // The hosts hold their flows now: the plan's copy is not needed again.
    drop(flows);
    let start = Instant::now();
    // Advance in sampling steps: uplink counters are read every 100 us of
    // simulated time (ConWeave Fig. 14), progress is reported in between.
    let mut sampler = ImbalanceSampler::new(&topo.fabric, 100_000);
    let mut depths = emu_node::results::QueueDepthSampler::new(&topo.fabric);
    let mut next_sample = sampler.interval();
    let mut next_metrics = 0;
    if let Some(m) = metrics.as_deref_mut() {
        m.sample(&topo.fabric, &engine, 0);
        next_metrics = m.period;
    }
    let mut stopped = false;
    // Switches that send hello messages forever (LBSP) never let the
    // fabric go idle: such a run ends DRAIN_AFTER_TRAFFIC after every
    // host's traffic is over.
    let background = engine.nodes().iter().any(Node::has_background_traffic);
    let mut traffic_over_at: Option<Nanos> = None;
    loop {
        let step_end = if metrics.is_some() { next_sample.min(next_metrics) } else { next_sample }
            .min(depths.next_at())
            .min(next_check)
            .min(opts.until);
        engine.run_until(step_end, 1_000_000);
        progress(engine.now(), engine.totals().events);
        if interrupted(&opts.interrupt) {
            stopped = true;
            break;
        }
        if engine.next_event_time().is_none_or(|t| t > step_end) {
            if step_end == next_sample {
                sampler.sample(&engine);
                next_sample += sampler.interval();
            }
            if step_end == depths.next_at() {
                depths.sample(&engine);
            }
            if let Some(w) = watchdog.as_mut().filter(|_| step_end == next_check) {
                next_check += w.check_every();
                if let Some(since) = w.check(&engine, step_end) {
                    stalled = Some(StallReport::collect(&topo.fabric, &engine, step_end, since));
                    break;
                }
            }
            if let Some(m) = metrics.as_deref_mut() {
                if step_end == next_metrics {
                    m.sample(&topo.fabric, &engine, next_metrics);
                    next_metrics += m.period;
                }
            }
            if engine.is_idle() || step_end >= opts.until {
                break;
            }
            if background {
                match traffic_over_at {
                    Some(t) if step_end >= t + DRAIN_AFTER_TRAFFIC => break,
                    Some(_) => {}
                    None if engine.nodes().iter().all(Node::traffic_finished) => traffic_over_at = Some(step_end),
                    None => {}
                }
            }
        }
    }
    if let Some(m) = metrics {
        // The final state, so the last point carries every completion.
        let end = engine.now();
        m.sample(&topo.fabric, &engine, end);
    }
    let wall = start.elapsed();
    let truncated = !engine.is_idle() && traffic_over_at.is_none();
    let mut summary = Summary::collect_after(&topo.fabric, &engine, &scheme, &traffic, opts.seed, opts.warmup, opts.slowdown);
    summary.time_origin_ns = time_origin;
    summary.uplink_imbalance = Some(sampler.finish());
    summary.queue_trace = depths.finish(&topo.fabric);
    if stopped && truncated {
        summary.incomplete = Some(format!(
            "interrupted (Ctrl-C) at {} of simulated time: flows still running count as incomplete",
            emu_node::time::format_duration(engine.now())
        ));
    }
    if let Some(r) = &stalled {
        summary.incomplete = Some(format!(
            "stalled: no flow moved from {} to {} of simulated time (the progress watchdog, --stall-timeout): flows still running count as incomplete",
            emu_node::time::format_duration(r.since),
            emu_node::time::format_duration(r.at)
        ));
    }
    let pfc_events = opts.pfc_trace.then(|| pfc_records(&topo.fabric, engine.nodes()));
    Ok(RunOutcome { summary, wall, truncated, threads: engine.threads(), stalled, pfc_events, faithfulness: None })
}

/// Multiplies every time parameter of a RoCE configuration by `k`
/// (docs/SCHEMES.md#parameter-scaling: they are given for [`REFERENCE_RATE`]).
pub fn scale_roce_times(rc: &mut RoceConfig, k: f64) {
    let s = |t: &mut Nanos| *t = (*t as f64 * k).round() as Nanos;
    s(&mut rc.nak_interval);
    s(&mut rc.gbn_timeout);
    s(&mut rc.dcqcn.alpha_interval);
    s(&mut rc.dcqcn.decrease_interval);
    s(&mut rc.dcqcn.rp_timer);
    s(&mut rc.dcqcn.cnp_interval);
    if let Recovery::Irn { rto_low, rto_high, .. } = &mut rc.recovery {
        s(rto_low);
        s(rto_high);
    }
}

/// Options of a real-time run (`weft run --clock real`).
#[derive(Debug, Clone, Default)]
pub struct RealTimeOptions {
    /// Scheduler spin window, µs.
    pub spin_us: u32,
    /// Capture a link into a pcap: (link name, file, frames).
    pub capture: Option<(String, std::path::PathBuf, u64)>,
    /// emu-node processes for the switches (0: everything in this process).
    pub nodes: u32,
    /// Serve Prometheus `/metrics` while the run lasts (emu-node p on the
    /// port plus p), and write the file-SD file and `prometheus.yml`
    /// listing them into `<dir>/prometheus/`.
    pub metrics: Option<(std::net::SocketAddr, std::path::PathBuf)>,
    /// Frames that reach a node more than this after they were due are
    /// dropped and counted (the bounded-lag policy; 0: no bound).
    pub max_lag: Nanos,
}

/// Runs `opts` on `topo` in real time, all nodes as actors in this process
/// (docs/ARCHITECTURE.md: the same state machines as [`run`], driven by the fabric
/// clock). Every host runs synthetic (TAP hosts need `weft up`). Stops when
/// every actor is idle and no frame is in flight, or at `until` of wall
/// time. Results are collected exactly as in virtual time.
pub fn run_real(topo: &Topology, opts: &RunOptions, rt_opts: &RealTimeOptions, progress: Progress<'_>) -> Result<RunOutcome, RunError> {
    use emu_node::fabric::HostKind;
    use emu_node::runtime::{ProcessPlan, ProcessRuntime};
    let prepared = prepare(topo, opts)?;
    let nodes = prepared.nodes()?;
    let (scheme, traffic, time_origin) = (prepared.scheme.clone(), prepared.traffic.clone(), prepared.time_origin);
    let mut fabric = prepared.fabric.clone();
    for n in &mut fabric.nodes {
        n.placement = 0;
        if let NodeKind::Host(h) = &mut n.kind {
            h.kind = HostKind::Synthetic;
        }
    }
    let capture_link = match &rt_opts.capture {
        Some((name, _, _)) => Some(
            fabric
                .links
                .iter()
                .position(|l| &l.name == name || l.name.split_once('-').is_some_and(|(a, b)| format!("{b}-{a}") == *name))
                .ok_or_else(|| RunError::NoSuchLink(name.clone()))?,
        ),
        None => None,
    };
    let nodes: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    let identity = emu_node::tls::FabricIdentity::generate()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(RunError::AsyncRuntime)?;
    let start = Instant::now();
    if rt_opts.nodes > 0 {
        let until = opts.until;
        let capture = capture_link.zip(rt_opts.capture.clone()).map(|(i, (_, path, count))| (emu_node::ids::LinkId(i as u32), path, count));
        let mut all = nodes;
        let run = rt.block_on(crate::experiment::distributed::run_distributed(
            &fabric,
            all.iter_mut().map(Option::take).collect(),
            rt_opts.nodes,
            opts.seed,
            rt_opts.spin_us,
            until,
            rt_opts.max_lag,
            capture,
            rt_opts.metrics.clone(),
            progress,
        ))?;
        // Switch state machines stay the prepared (unused) ones; their
        // results come from the emu-nodes that ran them.
        let mut merged: Vec<Node> = prepared.nodes()?;
        for (id, n) in run.hosts {
            merged[id.index()] = n;
        }
        let wall = start.elapsed();
        let engine = Engine::with_nodes(&topo.fabric, merged)?;
        let mut summary = Summary::collect_after(&topo.fabric, &engine, &scheme, &traffic, opts.seed, opts.warmup, opts.slowdown);
        summary.time_origin_ns = time_origin;
        summary.set_switches(run.switches);
        summary.simulated_ns = run.end;
        summary.traffic = format!(
            "{traffic} (real time over {} emu-node processes, {} of fabric time, {} frames lost by the inter-process transport)",
            rt_opts.nodes,
            emu_node::time::format_duration(run.end),
            run.transport_lost
        );
        return Ok(RunOutcome {
            summary,
            wall,
            truncated: run.truncated,
            threads: 1,
            stalled: None,
            pfc_events: None,
            faithfulness: Some(run.faithfulness),
        });
    }
    let start = Instant::now();
    let (nodes, truncated, sim_end, report) = rt.block_on(async {
        // Fabric time 0 a little ahead, so set-up does not eat into the run.
        let epoch = emu_node::clock::monotonic_ns() + 50_000_000;
        let plan = ProcessPlan {
            process: 0,
            fabric: fabric.clone(),
            epoch,
            clock_offset_ns: 0,
            fabric_tag: 1,
            link_secret: emu_node::link::auth::LinkSecret::generate()
                .map_err(|_| RunError::Transport("no random source for the link secret".into()))?,
            inter: emu_node::link::InterProcess::Udp,
            spin_us: rt_opts.spin_us,
            tap_queue_ns: 1_000_000,
            tap_offload: true,
            netns_prefix: String::new(),
            identity,
            seed: opts.seed,
            report_every_ms: 0,
            metrics: rt_opts.metrics.as_ref().map(|m| m.0),
            metrics_token: None,
            max_lag_ns: rt_opts.max_lag,
            workload: None,
            vm: None,
        };
        let (mut p, addrs) = ProcessRuntime::bind(plan, nodes, std::net::Ipv4Addr::LOCALHOST.into()).await?;
        if let (Some(m), Some((_, dir))) = (addrs.metrics, &rt_opts.metrics) {
            let t = [crate::observe::prometheus::Target { addr: m, process: 0, secure: false }];
            crate::observe::prometheus::write_config(dir, &fabric.name, &t, Duration::from_secs(1), None)?;
        }
        p.connect(&[]).await?;
        p.schedule_events(0);
        if let (Some(i), Some((_, path, count))) = (capture_link, &rt_opts.capture) {
            p.capture(emu_node::ids::LinkId(i as u32), path, *count)?;
        }
        let truncated = crate::experiment::distributed::run_until_idle(&p, opts.until, progress).await;
        let end = p.scheduler().now();
        let report = p.report().await;
        let mut nodes = p.shutdown().await;
        nodes.sort_by_key(|(id, _)| *id);
        Ok::<_, RunError>((nodes.into_iter().map(|(_, n)| n).collect::<Vec<_>>(), truncated, end, report))
    })?;
    let faithfulness = crate::observe::faithfulness::Faithfulness::of(
        emu_node::runtime::smallest_link_delay(&fabric),
        &std::iter::once((0, report)).collect(),
    );
    let wall = start.elapsed();
    let engine = Engine::with_nodes(&topo.fabric, nodes)?;
    let mut summary = Summary::collect_after(&topo.fabric, &engine, &scheme, &traffic, opts.seed, opts.warmup, opts.slowdown);
    summary.time_origin_ns = time_origin;
    summary.simulated_ns = sim_end;
    summary.traffic = format!("{traffic} (real time, {} of fabric time)", emu_node::time::format_duration(sim_end));
    Ok(RunOutcome { summary, wall, truncated, threads: 1, stalled: None, pfc_events: None, faithfulness: Some(faithfulness) })
}
