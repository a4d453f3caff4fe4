//! One process's share of a real-time fabric: its node actors, its TAP
//! hosts, its link transports and its deadline scheduler (docs/ARCHITECTURE.md; docs/REALTIME.md).
//!
//! Used by the `emu-node` binary (one per process, driven by the
//! orchestrator over the control channel) and directly by `weft run
//! --clock real` (all nodes in one process). Start-up has two phases so
//! processes can exchange addresses: [`ProcessRuntime::bind`] spawns the
//! actors, creates the TAP hosts and binds the sockets; then
//! [`ProcessRuntime::connect`] opens the links to the other processes and
//! binds every port.
//!
//! Invariants: every node of the fabric whose `placement` is this process
//! runs here, hosts always with their ToR (the orchestrator places them so);
//! a link change reaches both ends that live here; [`ProcessRuntime::shutdown`]
//! deletes every namespace this process created.

use crate::actor::{ActorReport, Capture, Egress, NodeActor, NodeActorArgs, NodeHandle, NodeMsg, PortBinding};
use crate::clock::{DeadlineScheduler, FabricClock, SchedulerTask};
use crate::inbox::Inbox;
use crate::link::auth::{LinkKey, LinkSecret};
use crate::link::quic;
use crate::link::remote::{run_quic_receiver, run_udp_receiver, InboundTable, RemoteSender, TransportReport};
use crate::link::{InterProcess, LinkChange};
use crate::tap::{create_tap_host, delete_netns, run_tap_reader, TapCounters, TapError, TapHost, TapNic};
use crate::tls::FabricIdentity;
use ractor::{Actor, ActorRef};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_core::edge::EdgeGuard;
use weft_core::fabric::{FabricSpec, HostKind, LinkAction, NodeAction};
use weft_core::node::Node;
use weft_wire::ids::{LinkId, NodeId, PortId};
use weft_wire::time::Nanos;

/// What a process runs (sent by the orchestrator).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessPlan {
    /// This process's index.
    pub process: u32,
    /// The fabric (placement decides what runs here).
    pub fabric: FabricSpec,
    /// Fabric epoch ([`crate::clock::monotonic_ns`] value of fabric time 0,
    /// on the orchestrator's clock).
    pub epoch: u64,
    /// This process's clock minus the orchestrator's, as the orchestrator
    /// estimated it (0 on the orchestrator's machine): the process's epoch
    /// is `epoch + clock_offset_ns` on its own clock.
    #[serde(default)]
    pub clock_offset_ns: i64,
    /// Tag in every link header of this fabric.
    pub fabric_tag: u32,
    /// The secret link datagrams are signed with ([`crate::link::auth`]).
    pub link_secret: LinkSecret,
    /// Transport between processes.
    pub inter: InterProcess,
    /// Spin window of the deadline scheduler, µs.
    pub spin_us: u32,
    /// How long a TAP host's NIC queue may be, ns.
    pub tap_queue_ns: Nanos,
    /// TAP hosts get segmentation offload (super-frames cut at their NIC,
    /// segments coalesced toward them: [`crate::tap`]).
    #[serde(default = "offload_default")]
    pub tap_offload: bool,
    /// Prefix of namespace names ("" = the host name itself).
    pub netns_prefix: String,
    /// The fabric identity (QUIC links).
    pub identity: FabricIdentity,
    /// Run seed (node RNG seeds derive from it).
    pub seed: u64,
    /// Send a health report this often, ms (0: only when asked).
    pub report_every_ms: u32,
    /// Serve Prometheus `/metrics` here (port 0: any free port).
    #[serde(default)]
    pub metrics: Option<SocketAddr>,
    /// The endpoint is reachable from other machines: serve it over HTTPS
    /// with [`ProcessPlan::identity`] and require this bearer credential
    /// (the fabric token). `None`: plain HTTP (loopback).
    #[serde(default)]
    pub metrics_token: Option<String>,
    /// Frames that reach a node more than this after they were due are
    /// dropped and counted (the bounded-lag policy, [`crate::actor`]); 0:
    /// no bound.
    #[serde(default)]
    pub max_lag_ns: Nanos,
    /// Traffic for the synthetic hosts placed here (`weft up --workload`):
    /// their transport and the flows they send. `None`: idle UDP hosts.
    #[serde(default)]
    pub workload: Option<weft_core::node::HostWorkload>,
    /// How VM hosts (`kind = "rxe"`) run here ([`crate::vm`]); `None` if
    /// the fabric has none.
    #[serde(default)]
    pub vm: Option<crate::vm::VmOptions>,
}

fn offload_default() -> bool {
    true
}

/// Addresses a process listens on for links.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct LinkAddrs {
    /// Process index.
    pub process: u32,
    /// UDP link socket.
    pub udp: SocketAddr,
    /// QUIC link endpoint.
    pub quic: SocketAddr,
    /// The `/metrics` endpoint, if the plan asked for one.
    pub metrics: Option<SocketAddr>,
}

/// Errors of the runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// I/O.
    #[error("{what}: {source}")]
    Io {
        /// What failed.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
    /// TAP host set-up.
    #[error(transparent)]
    Tap(#[from] TapError),
    /// A VM host.
    #[error(transparent)]
    Vm(#[from] crate::vm::VmError),
    /// The network between machines cannot carry this fabric's frames in
    /// QUIC datagrams.
    #[error("QUIC links need datagrams of {need} B for this fabric's {frame} B frames, but {dev} (the interface of {ip}) has MTU {mtu}: raise that network's MTU to at least {need} (jumbo frames, as VXLAN underlays do), or use --links udp (IP fragments the datagrams)")]
    UnderlayMtu {
        /// The bind address.
        ip: std::net::IpAddr,
        /// Its interface.
        dev: String,
        /// The interface's MTU.
        mtu: u32,
        /// The largest Ethernet frame of a link between processes.
        frame: usize,
        /// The IP MTU a QUIC datagram carrying it needs.
        need: usize,
    },
    /// TLS.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// Actor spawn.
    #[error("cannot start actor for `{node}`: {source}")]
    Spawn {
        /// The node.
        node: String,
        /// Cause.
        #[source]
        source: ractor::SpawnErr,
    },
    /// A QUIC link connection could not be started.
    #[error("QUIC link connection to process {process}: {source}")]
    Connect {
        /// The peer process.
        process: u32,
        /// Cause.
        #[source]
        source: quinn::ConnectError,
    },
    /// A QUIC link handshake failed (`process`: `None` for an incoming one).
    #[error("QUIC link {} failed: {source}", process.map_or("from a peer process".to_string(), |p| format!("to process {p}")))]
    Handshake {
        /// The peer process, if we connected.
        process: Option<u32>,
        /// Cause.
        #[source]
        source: quinn::ConnectionError,
    },
    /// A peer process whose link addresses were not given.
    #[error("no link address for process {0}")]
    NoPeerAddress(u32),
    /// A task of the runtime panicked or was cancelled.
    #[error("runtime task: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A misplaced node.
    #[error("{0}")]
    Placement(String),
    /// The metrics endpoint.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::server::MetricsServerError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Io { what, source }
}

/// QUIC's overhead on a link datagram: IPv4 (20) + UDP (8) + a short
/// header (1 + up to 20 B connection id + 4 B packet number) + the AEAD tag
/// (16) + the DATAGRAM frame's type and length (1 + 2), rounded up.
pub const QUIC_DATAGRAM_OVERHEAD: usize = 80;

/// The UDP payload of this process's QUIC link packets. QUIC datagrams are
/// never fragmented (quinn sets DF): between machines the interface of
/// `bind_ip` must carry the largest frame of a link to another process,
/// with weft's link header and QUIC's overhead (else an error), and packets
/// are sized to its MTU. Loopback (one machine) and an unknown interface
/// keep [`quic::LINK_UDP_PAYLOAD`].
fn quic_link_payload(plan: &ProcessPlan, bind_ip: std::net::IpAddr) -> Result<u16, RuntimeError> {
    if bind_ip.is_loopback() || bind_ip.is_unspecified() {
        return Ok(quic::LINK_UDP_PAYLOAD);
    }
    let Some((dev, mtu)) = interface_mtu(bind_ip) else { return Ok(quic::LINK_UDP_PAYLOAD) };
    let payload = mtu.saturating_sub(28).min(u16::MAX as u32) as u16;
    let f = &plan.fabric;
    let on = |n: NodeId| f.nodes.get(n.index()).map(|s| s.placement);
    let frame = f
        .links
        .iter()
        .filter(|l| on(l.a.0) != on(l.b.0) && (on(l.a.0) == Some(plan.process) || on(l.b.0) == Some(plan.process)))
        .map(|l| l.mtu as usize + 18)
        .max();
    let Some(frame) = frame else { return Ok(payload) };
    let need = frame + crate::link::header::HEADER_LEN + QUIC_DATAGRAM_OVERHEAD;
    if (mtu as usize) < need {
        return Err(RuntimeError::UnderlayMtu { ip: bind_ip, dev, mtu, frame, need });
    }
    Ok(payload)
}

/// The interface holding `ip` and its MTU (`ip -o addr show to IP`, then
/// `ip -o link show dev DEV`: netlink, so right inside any network
/// namespace, unlike /sys/class/net of another namespace's mount).
fn interface_mtu(ip: std::net::IpAddr) -> Option<(String, u32)> {
    let ip_o = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("ip").arg("-o").args(args).output().ok()?;
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let addr = ip_o(&["addr", "show", "to", &ip.to_string()])?;
    let dev = addr.split_whitespace().nth(1)?.trim_end_matches(':').split('@').next()?.to_string();
    let link = ip_o(&["link", "show", "dev", &dev])?;
    let mut words = link.split_whitespace();
    words.find(|w| *w == "mtu")?;
    Some((dev, words.next()?.parse().ok()?))
}

/// Socket buffers of link sockets: a burst of frames must wait in the
/// kernel while the process's one thread is busy, not be lost.
pub const LINK_SOCKET_BUFFER: usize = 16 << 20;

/// A non-blocking UDP socket on `ip` with [`LINK_SOCKET_BUFFER`]-sized
/// buffers (forced past `rmem_max` when running as root).
fn big_buffer_socket(ip: std::net::IpAddr) -> Result<std::net::UdpSocket, RuntimeError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let addr = SocketAddr::new(ip, 0);
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(io("link socket"))?;
    for (force, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        let v = LINK_SOCKET_BUFFER as libc::c_int;
        // SAFETY: setsockopt with a valid fd and a c_int value of the right size.
        let ok = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::SOL_SOCKET,
                force,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        if !ok {
            let _ = if plain == libc::SO_RCVBUF {
                s.set_recv_buffer_size(LINK_SOCKET_BUFFER)
            } else {
                s.set_send_buffer_size(LINK_SOCKET_BUFFER)
            };
        }
    }
    s.set_nonblocking(true).map_err(io("link socket"))?;
    s.bind(&addr.into()).map_err(io("link socket"))?;
    Ok(s.into())
}

/// A real host: a namespace with a TAP, or a VM.
enum RealHost {
    Tap(TapHost),
    Vm(crate::vm::VmHost),
}

struct TapEnd {
    /// Its namespace (TAP host) or host name (VM host).
    name: String,
    host: RealHost,
    nic: Arc<Mutex<TapNic>>,
    counters: Arc<TapCounters>,
    node: NodeId,
}

/// Health of a process (`weft status`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProcessReport {
    /// Process index.
    pub process: u32,
    /// One report per actor.
    pub actors: Vec<ActorReport>,
    /// Transport counters per incoming link direction.
    pub transport: Vec<TransportReport>,
    /// Datagrams refused (malformed, foreign, forged, replayed, unknown link).
    pub transport_rejected: u64,
    /// Frames that arrived from another process after their due time.
    pub transport_late: u64,
    /// TAP hosts: (name, frames sent into the fabric, queue drops,
    /// link-down drops, super-frames cut into MTU frames).
    pub taps: Vec<(String, u64, u64, u64, u64)>,
    /// VM hosts (`kind = "rxe"`).
    #[serde(default)]
    pub vms: Vec<VmReport>,
    /// Scheduler: deadlines run, ns spent spinning, sleeps.
    pub scheduler: (u64, u64, u64),
    /// CPU time the process has used (every thread), ns.
    #[serde(default)]
    pub cpu_ns: u64,
    /// Wall time since the fabric's epoch when the report was made, ns.
    #[serde(default)]
    pub wall_ns: u64,
}

/// The fabric's smallest link delay (at least 1 ns): a frame handled later
/// than this after it was due is late by more than any link is long.
pub fn smallest_link_delay(fabric: &FabricSpec) -> Nanos {
    fabric.links.iter().map(|l| l.delay).min().unwrap_or(1).max(1)
}

/// A VM host in a [`ProcessReport`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VmReport {
    /// Host name.
    pub host: String,
    /// qemu's pid.
    pub pid: u32,
    /// The accelerator and why (KVM or TCG).
    pub accel: String,
    /// Seconds from start to rxe ready.
    pub boot_s: f64,
    /// Memory, MiB.
    pub memory_mib: u32,
    /// Frames toward it dropped at its full receive ring.
    pub rx_ring_drops: u64,
    /// Its directory (console log, exec sockets).
    pub dir: String,
}

/// The ends of one link that live in this process.
#[derive(Default)]
struct LinkEnds {
    actors: Vec<(ActorRef<NodeMsg>, PortId)>,
    nics: Vec<Arc<Mutex<TapNic>>>,
}

impl LinkEnds {
    fn apply(&self, now: Nanos, change: LinkChange) {
        for (a, port) in &self.actors {
            let _ = a.cast(NodeMsg::Link { port: *port, change });
        }
        for n in &self.nics {
            if let Ok(mut nic) = n.lock() {
                nic.apply(now, change);
            }
        }
    }
}

/// One process's running share of a fabric.
pub struct ProcessRuntime {
    plan: ProcessPlan,
    _scheduler: SchedulerTask,
    sched: DeadlineScheduler,
    actors: BTreeMap<NodeId, NodeHandle>,
    taps: Vec<TapEnd>,
    udp: Arc<tokio::net::UdpSocket>,
    quic: quinn::Endpoint,
    inbound: Arc<InboundTable>,
    incoming: Option<tokio::sync::oneshot::Receiver<Vec<quinn::Connection>>>,
    tap_writer: crate::tap::TapWriter,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The `/metrics` socket, bound in [`ProcessRuntime::bind`] (so that a
    /// taken address fails early), served once the links are connected.
    metrics_listener: Option<tokio::net::TcpListener>,
    metrics_server: Option<crate::metrics::server::MetricsServer>,
    /// Largest UDP payload of a QUIC link packet (the network's MTU - 28).
    link_payload: u16,
}

impl ProcessRuntime {
    /// Phase 1: spawns the actors for `nodes` (the state machines of the
    /// nodes placed here; `None` elsewhere and for TAP hosts), creates the
    /// TAP hosts placed here, binds link sockets on `bind_ip`.
    pub async fn bind(
        plan: ProcessPlan,
        mut nodes: Vec<Option<Node>>,
        bind_ip: std::net::IpAddr,
    ) -> Result<(Self, LinkAddrs), RuntimeError> {
        // QUIC packets as large as the network between machines carries.
        let link_payload = if plan.inter == InterProcess::Quic { quic_link_payload(&plan, bind_ip)? } else { quic::LINK_UDP_PAYLOAD };
        let clock = FabricClock::with_epoch(plan.epoch.wrapping_add_signed(plan.clock_offset_ns));
        let thread = SchedulerTask::start(clock, Duration::from_micros(plan.spin_us as u64)).map_err(io("deadline timer"))?;
        let sched = thread.scheduler();
        // Sockets and the writer thread first: failing here leaves nothing
        // to clean up.
        let metrics_listener = match plan.metrics {
            Some(a) => Some(crate::metrics::server::bind(a).await?),
            None => None,
        };
        let udp = Arc::new(tokio::net::UdpSocket::from_std(big_buffer_socket(bind_ip)?).map_err(io("UDP link socket"))?);
        let server = plan.identity.quic_server(quic::link_transport_for(link_payload))?;
        let quic = quinn::Endpoint::new(quic::endpoint_config(), Some(server), big_buffer_socket(bind_ip)?, Arc::new(quinn::TokioRuntime))
            .map_err(io("QUIC endpoint"))?;
        let tap_writer = crate::tap::TapWriter::spawn().map_err(io("TAP writer thread"))?;
        let f = &plan.fabric;
        let mut actors = BTreeMap::new();
        let mut taps: Vec<TapEnd> = Vec::new();
        let mut rt_err = None;
        let mut vm_accel: Option<crate::vm::Accel> = None;
        for (i, spec) in f.nodes.iter().enumerate() {
            if spec.placement != plan.process {
                continue;
            }
            let id = NodeId(i as u32);
            let tap_kind = spec.as_host().map(|h| h.kind).filter(|k| *k != HostKind::Synthetic);
            if let Some(kind) = tap_kind {
                let (Some(h), Some(port)) = (spec.as_host(), spec.ports.first()) else { continue };
                if f.nodes.get(port.peer.index()).is_none_or(|p| p.placement != plan.process) {
                    rt_err = Some(RuntimeError::Placement(format!("host `{}` must be placed with its ToR", spec.name)));
                    break;
                }
                let delay = f.links.get(port.link.index()).map_or(0, |l| l.delay);
                let nic = Arc::new(Mutex::new(TapNic::new(port.rate, delay, plan.tap_queue_ns)));
                let made: Result<(String, RealHost, Arc<TapCounters>), RuntimeError> = if kind == HostKind::Rxe {
                    // A VM, started from this thread (see crate::vm).
                    let Some(opts) = &plan.vm else {
                        rt_err = Some(RuntimeError::Placement(format!("host `{}` is a VM host but the plan has no VM options", spec.name)));
                        break;
                    };
                    let accel = match &vm_accel {
                        Some(a) => a,
                        None => {
                            let o = opts.clone();
                            let a = tokio::task::spawn_blocking(move || crate::vm::decide_accel(&o))
                                .await
                                .unwrap_or(crate::vm::Accel { kvm: false, why: "the KVM probe failed".into() });
                            vm_accel.insert(a)
                        }
                    };
                    crate::vm::launch(&spec.name, h, port.mtu, opts, accel)
                        .map(|vm| {
                            let counters = vm.nic.counters.clone();
                            (spec.name.clone(), RealHost::Vm(vm), counters)
                        })
                        .map_err(Into::into)
                } else {
                    let netns = format!("{}{}", plan.netns_prefix, spec.name);
                    let dev = format!("wt{:x}{:04x}", plan.fabric_tag & 0xffff, i);
                    // `ip` commands block for tens of ms each: run them off the
                    // runtime thread so QUIC keep-alives continue meanwhile.
                    let (h2, mtu, rate, offload) = (h.clone(), port.mtu, port.rate, plan.tap_offload);
                    let made = tokio::task::spawn_blocking(move || create_tap_host(&netns, &dev, &h2, mtu, rate, offload)).await;
                    made.unwrap_or_else(|e| Err(TapError::Spawn { cmd: "ip".into(), source: std::io::Error::other(e) }))
                        .map(|host| {
                            let counters = host.tun.counters.clone();
                            (host.netns.clone(), RealHost::Tap(host), counters)
                        })
                        .map_err(Into::into)
                };
                match made {
                    Ok((name, host, counters)) => taps.push(TapEnd { name, host, nic, counters, node: id }),
                    Err(e) => {
                        rt_err = Some(e);
                        break;
                    }
                }
                continue;
            }
            let Some(node) = nodes.get_mut(i).and_then(Option::take) else { continue };
            let inbox = Arc::new(Inbox::default());
            match Actor::spawn(
                None,
                NodeActor,
                NodeActorArgs {
                    node: Box::new(node),
                    scheduler: sched.clone(),
                    inbox: inbox.clone(),
                    max_lag: plan.max_lag_ns,
                    late_after: smallest_link_delay(&plan.fabric),
                },
            )
            .await
            {
                Ok((a, _)) => {
                    actors.insert(id, NodeHandle::new(a, inbox));
                }
                Err(e) => {
                    rt_err = Some(RuntimeError::Spawn { node: spec.name.clone(), source: e });
                    break;
                }
            }
        }
        // The VMs boot together; the fabric starts once all are ready.
        if rt_err.is_none() {
            let mut vms: Vec<&mut crate::vm::VmHost> = taps
                .iter_mut()
                .filter_map(|t| match &mut t.host {
                    RealHost::Vm(v) => Some(v),
                    RealHost::Tap(_) => None,
                })
                .collect();
            if !vms.is_empty() {
                let timeout = Duration::from_secs(90 + 30 * vms.len() as u64);
                if let Err(e) = crate::vm::wait_ready(&mut vms, timeout).await {
                    rt_err = Some(e.into());
                }
            }
        }
        let inbound = Arc::new(InboundTable::new(plan.fabric_tag, LinkKey::new(&plan.link_secret)));
        let mut rt = ProcessRuntime {
            plan,
            _scheduler: thread,
            sched,
            actors,
            taps,
            udp,
            quic,
            inbound,
            incoming: None,
            tap_writer,
            link_payload,
            tasks: Vec::new(),
            metrics_listener,
            metrics_server: None,
        };
        if let Some(e) = rt_err {
            rt.shutdown().await;
            return Err(e);
        }
        let metrics = match &rt.metrics_listener {
            Some(l) => Some(l.local_addr().map_err(io("metrics socket"))?),
            None => None,
        };
        let addrs = LinkAddrs {
            metrics,
            process: rt.plan.process,
            udp: rt.udp.local_addr().map_err(io("UDP link socket"))?,
            quic: rt.quic.local_addr().map_err(io("QUIC link socket"))?,
        };
        Ok((rt, addrs))
    }

    /// Phase 2: connects to the other processes, binds every port, starts
    /// the receivers, the TAP readers and the topology's link schedule.
    pub async fn connect(&mut self, peers: &[LinkAddrs]) -> Result<(), RuntimeError> {
        let me = self.plan.process;
        let f = self.plan.fabric.clone();
        let here = |n: NodeId| f.nodes.get(n.index()).is_some_and(|s| s.placement == me);
        // Outgoing connections: one per peer process we have links to.
        let mut senders_to: BTreeMap<u32, Option<quinn::Connection>> = BTreeMap::new();
        for l in &f.links {
            for (x, y) in [(l.a.0, l.b.0), (l.b.0, l.a.0)] {
                if here(x) && !here(y) {
                    senders_to.insert(f.nodes[y.index()].placement, None);
                }
            }
        }
        // completes a handshake only once the server accepts it).
        let mut acceptor = None;
        if self.plan.inter == InterProcess::Quic {
            let incoming_expected = senders_to.len(); // links are symmetric: whoever we send to sends to us
            let ep = self.quic.clone();
            let (tx_conns, rx_conns) = tokio::sync::oneshot::channel();
            acceptor = Some(tokio::spawn(async move {
                let mut conns = Vec::new();
                for _ in 0..incoming_expected {
                    let Some(inc) = ep.accept().await else { break };
                    conns.push(inc.await.map_err(|source| RuntimeError::Handshake { process: None, source })?);
                }
                let _ = tx_conns.send(conns);
                Ok::<(), RuntimeError>(())
            }));
            self.incoming = Some(rx_conns);
        }
        if self.plan.inter == InterProcess::Quic {
            let client = crate::tls::quic_client(&self.plan.identity.pin(), quic::link_transport_for(self.link_payload))?;
            for (p, conn) in senders_to.iter_mut() {
                let Some(addr) = peers.iter().find(|a| a.process == *p) else {
                    return Err(RuntimeError::NoPeerAddress(*p));
                };
                let c = self
                    .quic
                    .connect_with(client.clone(), addr.quic, crate::tls::SERVER_NAME)
                    .map_err(|source| RuntimeError::Connect { process: *p, source })?
                    .await
                    .map_err(|source| RuntimeError::Handshake { process: Some(*p), source })?;
                *conn = Some(c);
            }
        }
        // Inbound table, then port bindings.
        let mut table = InboundTable::new(self.plan.fabric_tag, LinkKey::new(&self.plan.link_secret));
        for (&id, actor) in &self.actors {
            let spec = &f.nodes[id.index()];
            let mut ports = Vec::with_capacity(spec.ports.len());
            for (pi, p) in spec.ports.iter().enumerate() {
                let Some(l) = f.links.get(p.link.index()) else {
                    ports.push(PortBinding::unconnected(p.link));
                    continue;
                };
                let dir = if l.a == (id, PortId(pi as u16)) { 0 } else { 1 };
                let egress = if let Some(peer) = self.actors.get(&p.peer) {
                    Egress::Local { peer: peer.frames.clone(), port: p.peer_port }
                } else if let Some(t) = self.taps.iter().find(|t| t.node == p.peer) {
                    match &t.host {
                        RealHost::Tap(h) => Egress::Tap(h.tun.clone(), self.tap_writer.clone()),
                        RealHost::Vm(v) => Egress::Vm(v.nic.clone()),
                    }
                } else if here(p.peer) {
                    Egress::Unconnected
                } else {
                    table.insert(p.link.0, 1 - dir, actor.frames.clone(), PortId(pi as u16));
                    let proc_ = f.nodes[p.peer.index()].placement;
                    match (self.plan.inter, senders_to.get(&proc_)) {
                        (InterProcess::Quic, Some(Some(c))) => {
                            Egress::Remote(RemoteSender::quic(self.plan.fabric_tag, LinkKey::new(&self.plan.link_secret), c.clone()))
                        }
                        _ => {
                            let Some(addr) = peers.iter().find(|a| a.process == proc_) else {
                                return Err(RuntimeError::NoPeerAddress(proc_));
                            };
                            Egress::Remote(RemoteSender::udp(
                                self.plan.fabric_tag,
                                LinkKey::new(&self.plan.link_secret),
                                self.udp.clone(),
                                addr.udp,
                            ))
                        }
                    }
                };
                ports.push(PortBinding::new(egress, p.link, dir, l.delay));
            }
            let _ = actor.actor.cast(NodeMsg::Bind(ports));
        }
        self.inbound = Arc::new(table);
        if let Some(l) = self.metrics_listener.take() {
            let access = self
                .plan
                .metrics_token
                .clone()
                .map(|token| crate::metrics::server::MetricsAccess { identity: self.plan.identity.clone(), token });
            self.metrics_server = Some(crate::metrics::server::serve(l, self.metrics_source(), access)?);
        }
        // Receivers.
        self.tasks.push(tokio::spawn(run_udp_receiver(self.udp.clone(), self.inbound.clone(), self.sched.clone())));
        if let Some(acc) = acceptor {
            acc.await??;
            if let Some(rx) = self.incoming.take() {
                for conn in rx.await.unwrap_or_default() {
                    self.tasks.push(tokio::spawn(run_quic_receiver(conn, self.inbound.clone(), self.sched.clone())));
                }
            }
        }
        // TAP readers.
        for t in &self.taps {
            let port = &f.nodes[t.node.index()].ports[0];
            let Some(tor) = self.actors.get(&port.peer) else {
                return Err(RuntimeError::Placement(format!("ToR of `{}` is not in this process", t.name)));
            };
            let Some(spec) = f.nodes[t.node.index()].as_host() else { continue };
            let guard = EdgeGuard::new(spec, port.mtu);
            let (nic, counters, tor, port, sched) =
                (t.nic.clone(), t.counters.clone(), tor.frames.clone(), port.peer_port, self.sched.clone());
            self.tasks.push(match &t.host {
                RealHost::Tap(h) => tokio::spawn(run_tap_reader(h.tun.clone(), guard, nic, counters, tor, port, sched)),
                RealHost::Vm(v) => tokio::spawn(run_tap_reader(v.nic.clone(), guard, nic, counters, tor, port, sched)),
            });
        }
        Ok(())
    }

    /// The topology's node and link schedule, relative to fabric time
    /// `start`. Node events are scheduled first, so that at one instant
    /// they come before the link events, as in virtual time.
    pub fn schedule_events(&self, start: Nanos) {
        for ev in &self.plan.fabric.node_schedule {
            let restart = self.restart_action(ev.node);
            match ev.action {
                NodeAction::Restart => self.sched.at(start + ev.at, Box::new(restart)),
                NodeAction::Routes(k) => {
                    let (Some(a), Some(routes)) = (self.actors.get(&ev.node), self.plan.fabric.route_updates.get(k as usize)) else {
                        continue;
                    };
                    let (actor, routes) = (a.actor.clone(), routes.clone());
                    self.sched.at(start + ev.at, Box::new(move |_| drop(actor.cast(NodeMsg::Routes(routes.clone())))));
                }
            }
        }
        for ev in &self.plan.fabric.schedule {
            let change = match ev.action {
                LinkAction::Down => LinkChange::Down,
                LinkAction::Up => LinkChange::Up,
                LinkAction::Degrade(r) => LinkChange::Rate(r),
                LinkAction::Loss(ppm) => LinkChange::Loss(ppm),
            };
            let ends = self.link_ends(ev.link);
            let sched = self.sched.clone();
            self.sched.at(start + ev.at, Box::new(move |_| ends.apply(sched.now(), change)));
        }
    }

    /// What a restart of switch `node` does here: the ends here of its
    /// links go down, and the switch, if it runs here, restarts (it loses
    /// its register state). Its links come up by link changes after.
    fn restart_action(&self, node: NodeId) -> impl Fn(Nanos) + Send + 'static {
        let links: Vec<LinkEnds> =
            self.plan.fabric.nodes.get(node.index()).map_or_else(Vec::new, |n| n.ports.iter().map(|p| self.link_ends(p.link)).collect());
        let actor = self.actors.get(&node).map(|a| a.actor.clone());
        move |now| {
            for ends in &links {
                ends.apply(now, LinkChange::Down);
            }
            if let Some(a) = &actor {
                let _ = a.cast(NodeMsg::Restart);
            }
        }
    }

    /// Restarts switch `node` (`weft node SWITCH restart`): takes the ends
    /// here of its links down and restarts it if it runs here; bring the
    /// links up with [`ProcessRuntime::apply`] after.
    pub fn restart(&self, node: NodeId) {
        self.restart_action(node)(self.sched.now());
    }

    fn link_ends(&self, link: LinkId) -> LinkEnds {
        let mut ends = LinkEnds::default();
        if let Some(l) = self.plan.fabric.links.get(link.index()) {
            for (node, port) in [l.a, l.b] {
                if let Some(a) = self.actors.get(&node) {
                    ends.actors.push((a.actor.clone(), port));
                } else if let Some(t) = self.taps.iter().find(|t| t.node == node) {
                    ends.nics.push(t.nic.clone());
                }
            }
        }
        ends
    }

    /// The plan this process runs.
    pub fn plan(&self) -> &ProcessPlan {
        &self.plan
    }

    /// The fabric this process runs a share of.
    pub fn fabric(&self) -> &FabricSpec {
        &self.plan.fabric
    }

    /// The deadline scheduler (fabric clock).
    pub fn scheduler(&self) -> &DeadlineScheduler {
        &self.sched
    }

    /// Applies a link change to the ends of `link` that live here.
    pub fn apply(&self, link: LinkId, change: LinkChange) {
        self.link_ends(link).apply(self.sched.now(), change);
    }

    /// Starts a capture of `link` (both directions) at a switch end that
    /// lives here; returns false if neither end is an actor of this process.
    pub fn capture(&self, link: LinkId, path: &std::path::Path, count: u64) -> Result<bool, RuntimeError> {
        let f = &self.plan.fabric;
        let Some(l) = f.links.get(link.index()) else { return Ok(false) };
        let end = [l.a, l.b].into_iter().find(|(n, _)| f.nodes[n.index()].as_switch().is_some() && self.actors.contains_key(n));
        let Some((node, port)) = end.or_else(|| [l.a, l.b].into_iter().find(|(n, _)| self.actors.contains_key(n))) else {
            return Ok(false);
        };
        let cap = Capture::create(path, count).map_err(io(format!("capture file {}", path.display())))?;
        if let Some(a) = self.actors.get(&node) {
            let _ = a.actor.cast(NodeMsg::Capture { port, capture: Arc::new(Mutex::new(cap)) });
        }
        Ok(true)
    }

    /// Reports of every actor, the transports and the TAP hosts.
    pub async fn report(&self) -> ProcessReport {
        let mut actors = Vec::new();
        for a in self.actors.values() {
            if let Ok(r) = a.actor.call(NodeMsg::Report, Some(Duration::from_secs(1))).await {
                if let Ok(r) = r.success_or(()) {
                    actors.push(r);
                }
            }
        }
        let inb = &self.inbound;
        ProcessReport {
            process: self.plan.process,
            actors,
            transport: inb.report(),
            transport_rejected: inb.rejected().iter().map(|(_, n)| n).sum(),
            transport_late: inb.late.load(Ordering::Relaxed),
            taps: self
                .taps
                .iter()
                .map(|t| {
                    let c = &t.counters;
                    (
                        t.name.clone(),
                        c.rx_frames.load(Ordering::Relaxed),
                        c.queue_drops.load(Ordering::Relaxed),
                        c.link_down_drops.load(Ordering::Relaxed),
                        c.super_frames.load(Ordering::Relaxed),
                    )
                })
                .collect(),
            vms: self
                .taps
                .iter()
                .filter_map(|t| match &t.host {
                    RealHost::Vm(v) => Some(VmReport {
                        host: v.name.clone(),
                        pid: v.pid(),
                        accel: v.accel.to_string(),
                        boot_s: v.boot_s.unwrap_or(0.0),
                        memory_mib: self.plan.vm.as_ref().map_or(0, |o| o.memory_mib),
                        rx_ring_drops: t.counters.rx_ring_drops.load(Ordering::Relaxed),
                        dir: v.dir.display().to_string(),
                    }),
                    RealHost::Tap(_) => None,
                })
                .collect(),
            scheduler: self.sched.stats(),
            cpu_ns: crate::clock::process_cpu_ns(),
            wall_ns: self.sched.now(),
        }
    }

    /// Handles for gathering this process's metrics (`/metrics`).
    pub fn metrics_source(&self) -> crate::metrics::source::MetricsSource {
        crate::metrics::source::MetricsSource {
            actors: self.actors.iter().map(|(id, h)| (id.index(), h.actor.clone())).collect(),
            inbound: self.inbound.clone(),
            fabric: Arc::new(self.plan.fabric.clone()),
            process: self.plan.process,
            taps: self
                .taps
                .iter()
                .map(|t| (self.plan.fabric.nodes.get(t.node.index()).map_or_else(String::new, |n| n.name.clone()), t.counters.clone()))
                .collect(),
            last_answers: Default::default(),
        }
    }

    /// Stops every actor (returning their state machines by node id),
    /// closes the transports and deletes the namespaces created here.
    pub async fn shutdown(&mut self) -> Vec<(NodeId, Node)> {
        self.metrics_server = None;
        self.metrics_listener = None;
        let mut nodes = Vec::new();
        for (&id, a) in &self.actors {
            if let Ok(r) = a.actor.call(NodeMsg::Finish, Some(Duration::from_secs(2))).await {
                if let Ok(Some(n)) = r.success_or(()) {
                    nodes.push((id, *n));
                }
            }
        }
        self.actors.clear();
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.quic.close(0u32.into(), b"shutdown");
        for t in self.taps.drain(..) {
            match t.host {
                RealHost::Tap(h) => {
                    let _ = delete_netns(&h.netns);
                }
                // Dropping it stops qemu and removes its directory.
                RealHost::Vm(v) => drop(v),
            }
        }
        nodes
    }

    /// Names of the namespaces this process created.
    pub fn netns(&self) -> Vec<String> {
        self.taps.iter().filter(|t| matches!(t.host, RealHost::Tap(_))).map(|t| t.name.clone()).collect()
    }
}
