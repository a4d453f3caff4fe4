//! A live real-time fabric (`weft up`, `status`, `link`, `down`,
//! `capture`): the orchestrator side of docs/REALTIME.md; EXPERIMENTS.md.
//!
//! `weft up` places the fabric's nodes on N local emu-node processes
//! (automatic placement keeps every host with its ToR and, where it can,
//! whole leaves in one process), starts them, authenticates each over the
//! QUIC control channel (pinned fabric certificate + per-fabric token),
//! hands out the plans and the link addresses, and then serves requests on
//! a Unix socket in the state directory. The state file there lists every
//! process and namespace of the fabric, so `weft down` (or the next `weft
//! up`) removes the leftovers of an orchestrator that was killed.
//!
//! Invariants: at most one fabric per state directory; the state file is
//! written before any process or namespace is created and removed only
//! after all of them are gone; an emu-node that dies is reported with its
//! links within 2 s.

pub mod cut_links;

use crate::cluster::launch::{await_running, launch, refuse_latecomer, Conns, ExternalNodes, Launched, PlanBase};
use crate::cluster::state::{alive, read_state, remove_leftovers, socket_file, teardown_async, write_state, FabricState, HostAccess};
use crate::cluster::{io, FabricError};
use crate::config::topology::Topology;
use crate::placement::{auto_place, place_hosts_with_tor};
use emu_node::control::{self, ToNode, ToOrchestrator};
use emu_node::fabric::{FabricSpec, HostKind};
use emu_node::ids::LinkId;
use emu_node::link::{InterProcess, LinkChange};
use emu_node::runtime::ProcessReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Options of `weft up`.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// emu-node processes.
    pub nodes: u32,
    /// Transport between processes.
    pub inter: InterProcess,
    /// Scheduler spin window (µs).
    pub spin_us: u32,
    /// Prefix of namespace names.
    pub netns_prefix: String,
    /// Use the topology's `[placement]` instead of the automatic one.
    pub explicit_placement: bool,
    /// State directory.
    pub state_dir: PathBuf,
    /// `/metrics` of emu-node 0 (process p: port + p; port 0: any free port).
    pub metrics: std::net::SocketAddr,
    /// Every `/metrics` over HTTPS with the fabric token, also on loopback.
    pub metrics_tls: bool,
    /// Start a Prometheus server scraping the fabric.
    pub prometheus: Option<PrometheusOptions>,
    /// Run seed (per-node RNG seeds derive from it, as in `weft run`).
    pub seed: u64,
    /// Traffic of the synthetic hosts (`--workload`), and what it is in words.
    pub workload: Option<(emu_node::node::HostWorkload, String)>,
    /// Frames later than this at a node are dropped and counted (0: none).
    pub max_lag: emu_node::time::Nanos,
    /// TAP hosts get segmentation offload (TSO at their NIC, GRO toward them).
    pub tap_offload: bool,
    /// Machines to spread the fabric over (`--machines`; empty: all
    /// processes on this machine).
    pub machines: Vec<crate::config::machines::Machine>,
    /// Copy this weft's emu-node to every machine first.
    pub copy_emu_node: bool,
    /// The emu-nodes start by themselves (`--external-nodes`).
    pub external: Option<ExternalNodes>,
    /// Memory of each VM host (`kind = "rxe"`), MiB.
    pub vm_memory_mib: u32,
    /// KVM, TCG or automatic, for VM hosts.
    pub vm_accel: emu_node::vm::AccelChoice,
    /// The VM image's directory (built there on first use).
    pub vm_image: PathBuf,
}

/// How `weft up --prometheus` runs Prometheus.
#[derive(Debug, Clone)]
pub struct PrometheusOptions {
    /// The binary (name in PATH or path).
    pub bin: String,
    /// Listen address (port 0: any free port).
    pub listen: std::net::SocketAddr,
    /// Scrape interval.
    pub scrape_interval: Duration,
}

/// Requests on the control socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// Status of nodes and links.
    Status,
    /// Change a link.
    Link {
        /// Link name.
        link: String,
        /// Change.
        change: LinkChange,
    },
    /// Flap a link: down for `period_ns`, up for `period_ns`, again and
    /// again, until the next change of the link (0: stop flapping, up).
    LinkFlap {
        /// Link name.
        link: String,
        /// Half the cycle, ns (0 stops).
        period_ns: u64,
    },
    /// Set a link's rate to a percentage of its topology rate.
    LinkRatePercent {
        /// Link name.
        link: String,
        /// Percent of the nominal rate, in (0, 100].
        percent: f64,
    },
    /// Take a switch down or up, or restart it.
    Node {
        /// Switch name.
        switch: String,
        /// Change.
        change: NodeChange,
    },
    /// Capture a link.
    Capture {
        /// Link name.
        link: String,
        /// Output path (absolute).
        path: String,
        /// Frames.
        count: u64,
    },
    /// Tear the fabric down.
    Down,
}

/// A change of a switch (`weft node`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NodeChange {
    /// Every link of the switch down.
    Down,
    /// Every link of the switch up.
    Up,
    /// The switch reboots: its links go down, it loses its register
    /// state, its links come up `boot_ns` later.
    Restart {
        /// How long its links stay down.
        boot_ns: u64,
    },
}

/// Status of one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessStatus {
    /// Index.
    pub process: u32,
    /// pid.
    pub pid: u32,
    /// running | dead.
    pub state: String,
    /// Last report.
    pub report: Option<ProcessReport>,
}

/// Answer to a request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    /// Success.
    pub ok: bool,
    /// Message (error or confirmation).
    pub message: String,
    /// Processes (status).
    pub processes: Vec<ProcessStatus>,
    /// Link names by id (status).
    pub links: Vec<String>,
    /// Events so far (deaths).
    pub events: Vec<String>,
    /// Links cut between processes: configured, underlay and achieved
    /// delay per direction (status).
    #[serde(default)]
    pub cut_links: Vec<cut_links::CutLinkStatus>,
    /// The pcap files a capture writes, one per side of a cut link
    /// (capture).
    #[serde(default)]
    pub captures: Vec<CaptureFile>,
    /// How faithful the fabric's timing was (status, down).
    #[serde(default)]
    pub faithfulness: Option<crate::observe::faithfulness::Faithfulness>,
}

/// One pcap file of `weft capture`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureFile {
    /// The switch (or host) end it is taken at.
    pub node: String,
    /// The process that writes it.
    pub process: u32,
    /// Where that process writes it (on its machine).
    pub written: String,
    /// Where it belongs on this machine (the same as `written` for a local
    /// process; `weft capture` fetches it from a machine).
    pub path: String,
}

/// Sends a request to the running orchestrator.
pub fn request(dir: &Path, req: &Request) -> Result<Response, FabricError> {
    use std::io::{BufRead, Write};
    let sock = socket_file(dir);
    let mut s = std::os::unix::net::UnixStream::connect(&sock).map_err(|_| {
        if read_state(dir).is_some() {
            FabricError::NotAnswering(sock.display().to_string())
        } else {
            FabricError::NotUp(dir.display().to_string())
        }
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30))).map_err(io("control socket"))?;
    let mut line = serde_json::to_string(req).unwrap_or_default();
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(io("control socket"))?;
    let mut r = std::io::BufReader::new(s);
    let mut answer = String::new();
    r.read_line(&mut answer).map_err(io("control socket"))?;
    serde_json::from_str(&answer).map_err(FabricError::BadAnswer)
}

struct NodeConn {
    pid: u32,
    tx: tokio::sync::Mutex<quinn::SendStream>,
    report: Mutex<Option<ProcessReport>>,
    /// When the last report came (every 500 ms while the node answers).
    last_report: Mutex<std::time::Instant>,
    dead: Mutex<Option<String>>,
    capture: tokio::sync::Mutex<Option<tokio::sync::oneshot::Sender<Result<bool, String>>>>,
}

pub(crate) struct Live {
    fabric: FabricSpec,
    nodes: BTreeMap<u32, Arc<NodeConn>>,
    events: Arc<Mutex<Vec<String>>>,
    /// Links flapping now (`weft link LINK flap PERIOD`), by link.
    flaps: Mutex<BTreeMap<LinkId, tokio::task::JoinHandle<()>>>,
    /// Link delays changed since the start (`weft link LINK delay`), ns.
    delays: Mutex<BTreeMap<LinkId, u64>>,
    /// The machine each process on another machine runs on, by name.
    machines: BTreeMap<u32, String>,
}

/// What `weft up` prints once the fabric runs.
pub fn describe_hosts(f: &FabricSpec, prefix: &str) -> Vec<String> {
    f.nodes
        .iter()
        .filter_map(|n| n.as_host().map(|h| (n, h)))
        .map(|(n, h)| match h.kind {
            HostKind::Synthetic => format!("{:<8} {:<15} synthetic (emu-node {})", n.name, h.ip.to_string(), n.placement),
            HostKind::Rxe => format!("{:<8} {:<15} VM with rxe0: weft exec {} -- <command>", n.name, h.ip.to_string(), n.name),
            _ => format!("{:<8} {:<15} ip netns exec {}{} <command>", n.name, h.ip.to_string(), prefix, n.name),
        })
        .collect()
}

/// Checks that `weft up` can work here, before anything is created.
pub fn preflight(topo: &Topology, opts: &UpOptions) -> Result<PathBuf, FabricError> {
    let f = &topo.fabric;
    let taps: Vec<_> = f.nodes.iter().filter(|n| n.as_host().is_some_and(|h| h.kind == HostKind::Tap)).collect();
    if let Some(n) = f.nodes.iter().find(|n| n.as_host().is_some_and(|h| h.kind == HostKind::Rxe)) {
        if opts.vm_memory_mib < emu_node::vm::MIN_MEMORY_MIB {
            return Err(FabricError::VmMemory(opts.vm_memory_mib));
        }
        // VMs on this machine need qemu here (other machines' emu-nodes
        // say so themselves).
        if opts.machines.is_empty() && opts.external.is_none() && !emu_node::vm::have_qemu() {
            return Err(emu_node::vm::VmError::NoQemu(n.name.clone()).into());
        }
    }
    // SAFETY: geteuid has no preconditions.
    if !taps.is_empty() && unsafe { libc::geteuid() } != 0 {
        return Err(FabricError::NotRoot);
    }
    let exe = std::env::current_exe().map_err(io("current executable"))?;
    let emu = exe.with_file_name("emu-node");
    if !emu.exists() {
        return Err(FabricError::NoEmuNode(emu.display().to_string()));
    }
    let removed = remove_leftovers(&opts.state_dir)?;
    for r in removed {
        eprintln!("removed leftover of a killed fabric: {r}");
    }
    let existing = emu_node::tap::list_netns();
    for n in &taps {
        let ns = format!("{}{}", opts.netns_prefix, n.name);
        if existing.contains(&ns) {
            return Err(FabricError::NetnsTaken(ns));
        }
    }
    Ok(emu)
}

/// What `weft up` checks and prepares before it starts anything: the
/// emu-node binary, the VM image, every machine. Blocking.
fn prepare_up(
    topo: &Topology,
    opts: &UpOptions,
) -> Result<(PathBuf, Option<emu_node::vm::VmOptions>, Vec<crate::config::machines::Machine>), FabricError> {
    let emu = preflight(topo, opts)?;
    let has_vms = topo.fabric.nodes.iter().any(|n| n.as_host().is_some_and(|h| h.kind == HostKind::Rxe));
    let vm = if has_vms {
        let image = crate::deploy::vm_image::ensure(&opts.vm_image, &mut |line| eprintln!("{line}"))?;
        let dir = opts.state_dir.join("vm");
        Some(emu_node::vm::VmOptions {
            image: image.kernel.parent().map_or_else(|| opts.vm_image.clone(), Path::to_path_buf),
            dir,
            memory_mib: opts.vm_memory_mib,
            accel: opts.vm_accel,
        })
    } else {
        None
    };
    // Every machine answers and runs this emu-node version before anything
    // starts anywhere.
    let mut machines = opts.machines.clone();
    for m in &mut machines {
        if opts.copy_emu_node {
            m.copy_emu_node(&emu)?;
        }
        m.preflight(&emu)?;
        if let Some(v) = &vm {
            m.ensure_vm_image(&v.image, &mut |line| eprintln!("{line}"))?;
        }
    }
    Ok((emu, vm, machines))
}

/// Brings the fabric up and serves until `weft down`, Ctrl-C or SIGTERM.
/// `ready` is called with the host lines once everything runs.
pub async fn up(topo: &Topology, opts: &UpOptions, ready: impl FnOnce(&[String])) -> Result<(), FabricError> {
    // The checks and preparations block (ssh, image builds, removing a
    // killed fabric's leftovers): on a blocking thread.
    let (t, o) = (topo.clone(), opts.clone());
    let (emu, vm, machines) = tokio::task::spawn_blocking(move || prepare_up(&t, &o)).await??;
    // From here on, `machines` holds a machine per process.
    let opts = &UpOptions { machines: crate::config::machines::process_slots(&machines), ..opts.clone() };
    let mut fabric = topo.fabric.clone();
    if !opts.explicit_placement {
        if opts.machines.is_empty() {
            auto_place(&mut fabric, opts.nodes);
        } else {
            let cut = crate::placement::place(&mut fabric, &opts.machines);
            for line in crate::placement::describe(&fabric, &opts.machines) {
                eprintln!("machine {line}");
            }
            eprintln!("{} links cross machines: {}", cut.len(), cut.join(" "));
        }
    } else {
        place_hosts_with_tor(&mut fabric);
    }
    let procs = fabric.nodes.iter().map(|n| n.placement).max().unwrap_or(0) + 1;
    if !opts.machines.is_empty() && procs as usize > opts.machines.len() {
        return Err(FabricError::Placement(format!(
            "the placement uses {procs} processes but the machines file has room for {} (one emu-node per machine, or its capacity)",
            opts.machines.len()
        )));
    }
    let dir = opts.state_dir.clone();
    let netns: Vec<String> = fabric
        .nodes
        .iter()
        .filter(|n| n.as_host().is_some_and(|h| h.kind == HostKind::Tap))
        .map(|n| format!("{}{}", opts.netns_prefix, n.name))
        .collect();
    let real_hosts = fabric
        .nodes
        .iter()
        .filter_map(|n| {
            let access = match n.as_host()?.kind {
                HostKind::Synthetic => return None,
                HostKind::Tap => HostAccess::Netns { netns: format!("{}{}", opts.netns_prefix, n.name), process: n.placement },
                HostKind::Rxe => HostAccess::Vm {
                    dir: vm.as_ref().map(|v| emu_node::vm::vm_dir(&v.dir, &n.name).display().to_string()).unwrap_or_default(),
                    process: n.placement,
                },
            };
            Some((n.name.clone(), access))
        })
        .collect();
    let mut state = FabricState {
        topology: fabric.name.clone(),
        orchestrator: std::process::id(),
        processes: BTreeMap::new(),
        netns: netns.clone(),
        phase: "starting".into(),
        hosts: describe_hosts(&fabric, &opts.netns_prefix),
        traffic: opts.workload.as_ref().map(|w| w.1.clone()),
        control: String::new(),
        pin: String::new(),
        real_hosts,
        vm_dir: vm.as_ref().map(|v| v.dir.display().to_string()),
        ..Default::default()
    };
    write_state(&dir, &state)?;
    let result = run_fabric(&emu, fabric, opts, vm, procs, &mut state, ready).await;
    // Teardown whatever happened; only then is `weft down` answered (a new
    // fabric may start right after it).
    let torn_down = teardown_async(&dir, &state).await;
    match result {
        Ok(Some(ack)) => {
            let _ = ack.send(torn_down.as_ref().map(|_| ()).map_err(|e| e.to_string()));
            // Let the request's task write the answer before the runtime
            // (and with it that task) ends.
            tokio::time::sleep(Duration::from_millis(100)).await;
            torn_down
        }
        Ok(None) => torn_down,
        Err(e) => {
            if let Err(t) = torn_down {
                eprintln!("weft: {t}");
            }
            Err(e)
        }
    }
}

async fn run_fabric(
    emu: &Path,
    fabric: FabricSpec,
    opts: &UpOptions,
    vm: Option<emu_node::vm::VmOptions>,
    procs: u32,
    state: &mut FabricState,
    ready: impl FnOnce(&[String]),
) -> Result<Option<DownAck>, FabricError> {
    let dir = opts.state_dir.clone();
    let base = PlanBase {
        fabric: fabric.clone(),
        inter: opts.inter,
        spin_us: opts.spin_us,
        netns_prefix: opts.netns_prefix.clone(),
        seed: opts.seed,
        // A workload's first flows start at fabric time 0: every process
        // must be connected by then (as for `weft run --clock real`).
        start_delay: if opts.workload.is_some() { Duration::from_secs(2) } else { Duration::ZERO },
        report_every_ms: 500,
        metrics: Some(opts.metrics),
        metrics_tls: opts.metrics_tls,
        workload: opts.workload.as_ref().map(|w| w.0.clone()),
        max_lag: opts.max_lag,
        tap_offload: opts.tap_offload,
        machines: opts.machines.clone(),
        external: opts.external.clone(),
        vm,
    };
    let Launched { ep, token, children, mut conns, addrs, events: launched_events, identity_plan, secure_metrics } =
        launch(emu, &dir, &(0..procs).collect::<Vec<_>>(), &base, state).await?;
    for (_, tx, _) in conns.values_mut() {
        control::send(tx, &ToNode::Peers(addrs.clone())).await?;
    }
    await_running(&mut conns, &dir).await?;
    let targets: Vec<crate::observe::prometheus::Target> = addrs
        .iter()
        .filter_map(|a| {
            let secure = secure_metrics.contains(&a.process);
            a.metrics.map(|m| crate::observe::prometheus::Target { addr: m, process: a.process, secure })
        })
        .collect();
    // Endpoints on other machines (or off loopback, or --metrics-tls):
    // HTTPS with the fabric's certificate, the fabric token as bearer
    // credential.
    let secure = (!secure_metrics.is_empty())
        .then(|| crate::observe::prometheus::SecureScrape { cert_pem: identity_plan.identity.cert_pem(), token: token.clone() });
    let interval = opts.prometheus.as_ref().map_or(Duration::from_secs(1), |p| p.scrape_interval);
    // Kept (not waited for) so that the child is not reaped behind the
    // state file's back; teardown stops it by pid.
    let _prometheus_child = configure_prometheus(opts, &fabric.name, &targets, interval, secure.as_ref(), state).await?;
    let mut targets = targets;
    let (dead_tx, mut dead_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let live = Arc::new(Live {
        nodes: watch_nodes(conns, children, state, &dead_tx),
        fabric,
        events: Arc::new(Mutex::new(launched_events)),
        flaps: Mutex::default(),
        delays: Mutex::default(),
        machines: state.machines.iter().map(|(&p, r)| (p, r.machine.name.clone())).collect(),
    });
    let sock = socket_file(&dir);
    let _ = std::fs::remove_file(&sock);
    let listener = tokio::net::UnixListener::bind(&sock).map_err(io(format!("control socket {}", sock.display())))?;
    // The handlers are in place before anyone can read "running": a Ctrl-C
    // from then on is held by them and stops the fabric cleanly.
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(io("signals"))?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).map_err(io("signals"))?;
    // `ready` prints what the user needs (hosts, metrics URLs read back
    // from the state file) before the state says "running": `weft up
    // --detach` shows the background orchestrator's log once it reads
    // "running", and must find those lines in it.
    write_state(&dir, state)?;
    ready(&state.hosts);
    state.phase = "running".into();
    write_state(&dir, state)?;
    let (down_tx, mut down_rx) = tokio::sync::mpsc::unbounded_channel::<DownAck>();
    let mut reported_dead = std::collections::BTreeSet::new();
    let mut silent = SilenceWatch::default();
    let mut silence_tick = tokio::time::interval(Duration::from_millis(250));
    let mut down_ack = None;
    loop {
        tokio::select! {
            _ = silence_tick.tick() => {
                for msg in silent.check(&live, &reported_dead) {
                    eprintln!("weft: {msg}");
                    if let Ok(mut ev) = live.events.lock() { ev.push(msg); }
                }
            }
            a = listener.accept() => {
                if let Ok((s, _)) = a {
                    let live = live.clone();
                    let down_tx = down_tx.clone();
                    tokio::spawn(async move { let _ = serve_client(s, live, down_tx).await; });
                }
            }
            Some(p) = dead_rx.recv() => {
                if reported_dead.insert(p) {
                    let msg = death_message(&live, p);
                    eprintln!("weft: {msg}");
                    if let Ok(mut ev) = live.events.lock() { ev.push(msg.clone()); }
                    if let Some(n) = live.nodes.get(&p) { if let Ok(mut d) = n.dead.lock() { d.get_or_insert(msg); } }
                    // The file-SD lists live nodes only.
                    targets.retain(|t| t.process != p);
                    let _ = crate::observe::prometheus::write_config(&dir, &live.fabric.name, &targets, interval, secure.as_ref());
                }
            }
            Some(ack) = down_rx.recv() => { down_ack = Some(ack); break; }
            // The fabric is complete: whoever connects now is refused.
            inc = ep.accept() => if let Some(inc) = inc { tokio::spawn(refuse_latecomer(inc, token.clone(), live.events.clone())); },
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        }
    }
    stop_nodes(&live).await;
    let _ = std::fs::remove_file(&sock);
    ep.close(0u32.into(), b"down");
    Ok(down_ack)
}

/// Writes the Prometheus file-SD and configuration for `targets` and, if
/// asked, starts Prometheus (its child process is returned, to be kept).
async fn configure_prometheus(
    opts: &UpOptions,
    fabric: &str,
    targets: &[crate::observe::prometheus::Target],
    interval: Duration,
    secure: Option<&crate::observe::prometheus::SecureScrape>,
    state: &mut FabricState,
) -> Result<Option<std::process::Child>, FabricError> {
    let dir = &opts.state_dir;
    state.metrics = targets.iter().map(|t| (t.process, t.url())).collect();
    let (sd, yml) = crate::observe::prometheus::write_config(dir, fabric, targets, interval, secure)?;
    state.prometheus_config = Some((sd.display().to_string(), yml.display().to_string()));
    let Some(p) = &opts.prometheus else { return Ok(None) };
    let (d, bin, listen) = (dir.clone(), p.bin.clone(), p.listen);
    let (child, addr) = tokio::task::spawn_blocking(move || crate::observe::prometheus::start(&d, &bin, listen)).await??;
    state.prometheus = Some((child.id(), format!("http://{addr}")));
    write_state(dir, state)?;
    Ok(Some(child))
}

/// Serves every emu-node's control channel: a task per node keeps its
/// latest report, answers capture requests and records its failure; it
/// and a child-exit watcher (faster than the QUIC idle timeout) send the
/// process index on `dead_tx` when the node is gone.
fn watch_nodes(
    conns: Conns,
    children: Vec<tokio::process::Child>,
    state: &FabricState,
    dead_tx: &tokio::sync::mpsc::UnboundedSender<u32>,
) -> BTreeMap<u32, Arc<NodeConn>> {
    let mut nodes = BTreeMap::new();
    for (p, (conn, tx, mut rx)) in conns {
        let nc = Arc::new(NodeConn {
            pid: state.processes.get(&p).copied().unwrap_or(0),
            tx: tokio::sync::Mutex::new(tx),
            report: Mutex::new(None),
            last_report: Mutex::new(std::time::Instant::now()),
            dead: Mutex::new(None),
            capture: tokio::sync::Mutex::new(None),
        });
        nodes.insert(p, nc.clone());
        let dead_tx = dead_tx.clone();
        tokio::spawn(async move {
            loop {
                match control::recv::<ToOrchestrator>(&mut rx).await {
                    Ok(ToOrchestrator::Report(r)) => {
                        if let Ok(mut g) = nc.report.lock() {
                            *g = Some(*r);
                        }
                        if let Ok(mut t) = nc.last_report.lock() {
                            *t = std::time::Instant::now();
                        }
                    }
                    Ok(ToOrchestrator::CaptureStarted(b)) => {
                        if let Some(s) = nc.capture.lock().await.take() {
                            let _ = s.send(Ok(b));
                        }
                    }
                    Ok(ToOrchestrator::CaptureRefused(why)) => {
                        if let Some(s) = nc.capture.lock().await.take() {
                            let _ = s.send(Err(why));
                        }
                    }
                    Ok(ToOrchestrator::Failed(e)) => {
                        if let Ok(mut d) = nc.dead.lock() {
                            *d = Some(e);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            drop(conn);
            let _ = dead_tx.send(p);
        });
    }
    // Child exit watcher (faster than the QUIC idle timeout).
    {
        let dead_tx = dead_tx.clone();
        tokio::spawn(async move {
            let mut kids: Vec<(u32, tokio::process::Child)> = children.into_iter().enumerate().map(|(i, c)| (i as u32, c)).collect();
            loop {
                kids.retain_mut(|(p, c)| match c.try_wait() {
                    Ok(Some(_)) => {
                        let _ = dead_tx.send(*p);
                        false
                    }
                    _ => true,
                });
                if kids.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
    nodes
}

/// A node silent longer than this (it reports every 500 ms) is reported.
const SILENT_AFTER: Duration = Duration::from_secs(2);

/// Nodes that stopped reporting without dying: their machine, or the
/// network to it, does not answer. Reported once when they fall silent and
/// once when they answer again; the QUIC connections and ssh sessions last
/// [`emu_node::link::quic::OUTAGE_GRACE`], so an outage shorter than that
/// is survived and the fabric goes on.
#[derive(Default)]
struct SilenceWatch {
    /// Silent nodes and when their last report came.
    since: BTreeMap<u32, std::time::Instant>,
}

impl Live {
    /// The machine process `p` runs on, when not this one.
    fn machine_of(&self, p: u32) -> Option<&str> {
        self.machines.get(&p).map(String::as_str)
    }
}

impl SilenceWatch {
    fn check(&mut self, live: &Live, dead: &std::collections::BTreeSet<u32>) -> Vec<String> {
        let mut events = Vec::new();
        for (&p, n) in &live.nodes {
            let Ok(last) = n.last_report.lock().map(|t| *t) else { continue };
            let place = live.machine_of(p).map_or(String::new(), |m| format!(" (machine {m})"));
            match self.since.get(&p).copied() {
                None if !dead.contains(&p) && last.elapsed() > SILENT_AFTER => {
                    self.since.insert(p, last);
                    events.push(format!(
                        "emu-node {p}{place} silent: no report for {} s; its machine or the network to it does not answer, and its links carry nothing meanwhile (given up after {} s)",
                        SILENT_AFTER.as_secs(),
                        emu_node::link::quic::OUTAGE_GRACE.as_secs()
                    ));
                }
                Some(before) if last > before => {
                    self.since.remove(&p);
                    events.push(format!(
                        "emu-node {p}{place} answers again after {:.1} s of silence",
                        last.duration_since(before).as_secs_f64()
                    ));
                }
                _ => {}
            }
        }
        events
    }
}

/// Orderly stop: asks every node to stop and gives them 3 s (the caller
/// then tears down what is left).
async fn stop_nodes(live: &Live) {
    if let Ok(mut f) = live.flaps.lock() {
        for (_, t) in std::mem::take(&mut *f) {
            t.abort();
        }
    }
    for n in live.nodes.values() {
        let mut tx = n.tx.lock().await;
        let _ = control::send(&mut tx, &ToNode::Stop).await;
    }
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < until && live.nodes.values().any(|n| alive(n.pid)) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn death_message(live: &Live, p: u32) -> String {
    let f = &live.fabric;
    let on = |n: emu_node::ids::NodeId| f.nodes[n.index()].placement == p;
    let links: Vec<&str> = f.links.iter().filter(|l| on(l.a.0) != on(l.b.0)).map(|l| l.name.as_str()).collect();
    let nodes: Vec<&str> = f.nodes.iter().filter(|n| n.placement == p && n.as_switch().is_some()).map(|n| n.name.as_str()).collect();
    let pid = live.nodes.get(&p).map_or(0, |n| n.pid);
    format!(
        "emu-node {p} (pid {pid}) died: switches {} are gone; links to other processes down: {}",
        nodes.join(", "),
        if links.is_empty() { "none".to_string() } else { links.join(", ") }
    )
}

/// Answers a `weft down` once the teardown is over: what it left, if anything.
type DownAck = tokio::sync::oneshot::Sender<Result<(), String>>;

async fn serve_client(
    s: tokio::net::UnixStream,
    live: Arc<Live>,
    down: tokio::sync::mpsc::UnboundedSender<DownAck>,
) -> std::io::Result<()> {
    let (r, mut w) = s.into_split();
    let mut lines = BufReader::new(r).lines();
    while let Some(line) = lines.next_line().await? {
        let resp = match serde_json::from_str::<Request>(&line) {
            Err(e) => fail(format!("bad request: {e}")),
            Ok(Request::Down) => {
                // The processes' last reports, before they stop.
                let report = faithfulness_of(&live);
                let (tx, rx) = tokio::sync::oneshot::channel();
                let _ = down.send(tx);
                match rx.await {
                    Ok(Err(left)) => fail(left),
                    _ => Response { faithfulness: Some(report), ..ok("fabric is down".into()) },
                }
            }
            Ok(req) => handle(&live, req).await,
        };
        let mut out = serde_json::to_string(&resp).unwrap_or_default();
        out.push('\n');
        w.write_all(out.as_bytes()).await?;
    }
    Ok(())
}

pub(crate) fn ok(message: String) -> Response {
    Response {
        ok: true,
        message,
        processes: vec![],
        links: vec![],
        events: vec![],
        cut_links: vec![],
        captures: vec![],
        faithfulness: None,
    }
}

pub(crate) fn fail(message: String) -> Response {
    Response { ok: false, ..ok(message) }
}

/// The faithfulness report from the processes' latest reports.
fn faithfulness_of(live: &Live) -> crate::observe::faithfulness::Faithfulness {
    let reports: BTreeMap<u32, ProcessReport> =
        live.nodes.iter().filter_map(|(&p, n)| Some((p, n.report.lock().ok().and_then(|r| r.clone())?))).collect();
    crate::observe::faithfulness::Faithfulness::of(emu_node::runtime::smallest_link_delay(&live.fabric), &reports)
}

pub(crate) fn link_by_name(f: &FabricSpec, name: &str) -> Option<LinkId> {
    f.links.iter().position(|l| l.name == name || reversed(&l.name) == name).map(|i| LinkId(i as u32))
}

fn reversed(name: &str) -> String {
    match name.split_once('-') {
        Some((a, b)) => format!("{b}-{a}"),
        None => name.to_string(),
    }
}

/// `weft link`: a change, or (`Err(percent)`) a rate as a percentage of
/// the link's topology rate, sent to the emu-nodes of both ends.
/// Stops the flapping of link `id`, if it flaps; whether it did.
fn stop_flapping(live: &Live, id: LinkId) -> bool {
    let task = live.flaps.lock().ok().and_then(|mut f| f.remove(&id));
    task.map(|t| t.abort()).is_some()
}

/// `weft link LINK flap PERIOD`: a task that takes the link down and up
/// every `period_ns` until stopped ([`stop_flapping`]).
async fn flap_link(live: &Arc<Live>, link: String, period_ns: u64) -> Response {
    let Some(id) = link_by_name(&live.fabric, &link) else {
        return fail(format!("no link `{link}` (see `weft status` for the names)"));
    };
    let name = live.fabric.links[id.index()].name.clone();
    let was = stop_flapping(live, id);
    if period_ns == 0 {
        let r = set_link(&live.fabric, live, link, Ok(LinkChange::Up)).await;
        return if r.ok { ok(format!("{name}: {} (up)", if was { "flapping stopped" } else { "was not flapping" })) } else { r };
    }
    let period = Duration::from_nanos(period_ns);
    let l2 = live.clone();
    let task = tokio::spawn(async move {
        loop {
            for change in [LinkChange::Down, LinkChange::Up] {
                let r = push_link_change(&l2, id, change).await;
                if let Err(e) = r {
                    if let Ok(mut ev) = l2.events.lock() {
                        ev.push(format!("flapping of {} stopped: {e}", l2.fabric.links[id.index()].name));
                    }
                    return;
                }
                tokio::time::sleep(period).await;
            }
        }
    });
    if let Ok(mut f) = live.flaps.lock() {
        f.insert(id, task);
    }
    let msg =
        format!("{name}: flapping, down {0} then up {0}, until the next change of the link", emu_node::time::format_duration(period_ns));
    if let Ok(mut ev) = live.events.lock() {
        ev.push(msg.clone());
    }
    ok(msg)
}

/// Sends `change` of link `id` to the processes that hold its ends.
async fn push_link_change(live: &Live, id: LinkId, change: LinkChange) -> Result<(), String> {
    let f = &live.fabric;
    let l = &f.links[id.index()];
    let procs: std::collections::BTreeSet<u32> = [l.a.0, l.b.0].iter().map(|n| f.nodes[n.index()].placement).collect();
    for p in procs {
        if let Some(n) = live.nodes.get(&p) {
            let mut tx = n.tx.lock().await;
            control::send(&mut tx, &ToNode::SetLink { link: id, change }).await.map_err(|e| format!("emu-node {p}: {e}"))?;
        }
    }
    if let (LinkChange::Delay(d), Ok(mut delays)) = (change, live.delays.lock()) {
        delays.insert(id, d);
    }
    Ok(())
}

async fn set_link(f: &FabricSpec, live: &Live, link: String, change: Result<LinkChange, f64>) -> Response {
    let Some(id) = link_by_name(f, &link) else {
        return fail(format!("no link `{link}` (see `weft status` for the names)"));
    };
    // Any other change of a flapping link ends the flapping.
    stop_flapping(live, id);
    let l = &f.links[id.index()];
    let change = change.unwrap_or_else(|percent| {
        LinkChange::Rate(emu_node::time::BitRate(((l.rate.bps() as f64) * percent / 100.0).round().max(1.0) as u64))
    });
    if let Err(e) = push_link_change(live, id, change).await {
        return fail(e);
    }
    ok(format!("{}: {}", l.name, describe_change(change)))
}

/// `weft node SWITCH down|up|restart [BOOT]`: the change of every link of
/// the switch, and for a restart the switch's process restarts it between
/// its links going down and (after the boot time) up.
async fn change_node(live: &Arc<Live>, switch: String, change: NodeChange) -> Response {
    let f = &live.fabric;
    let node = match f.node_by_name(&switch) {
        Some(id) if f.nodes[id.index()].as_switch().is_some() => id,
        Some(_) => return fail(format!("`{switch}` is a host: change its link with `weft link`")),
        None => return fail(format!("no switch `{switch}` (see the topology for the names)")),
    };
    let links: Vec<LinkId> = f.nodes[node.index()].ports.iter().map(|p| p.link).collect();
    for &l in &links {
        stop_flapping(live, l);
    }
    let all = |change| {
        let links = links.clone();
        async move {
            for l in links {
                push_link_change(live, l, change).await?;
            }
            Ok::<_, String>(())
        }
    };
    let described = match change {
        NodeChange::Down | NodeChange::Up => {
            let c = if change == NodeChange::Down { LinkChange::Down } else { LinkChange::Up };
            if let Err(e) = all(c).await {
                return fail(e);
            }
            format!("{switch}: {} ({} links)", describe_change(c), links.len())
        }
        NodeChange::Restart { boot_ns } => {
            // The emu-nodes of the switch's neighbours take their ends
            // down; the switch's own restarts it.
            let procs: std::collections::BTreeSet<u32> = std::iter::once(node)
                .chain(links.iter().flat_map(|l| [f.links[l.index()].a.0, f.links[l.index()].b.0]))
                .map(|n| f.nodes[n.index()].placement)
                .collect();
            for p in procs {
                if let Some(n) = live.nodes.get(&p) {
                    let mut tx = n.tx.lock().await;
                    if let Err(e) = control::send(&mut tx, &ToNode::RestartNode { node }).await {
                        return fail(format!("emu-node {p}: {e}"));
                    }
                }
            }
            let boot = emu_node::time::format_duration(boot_ns);
            if boot_ns == 0 {
                if let Err(e) = all(LinkChange::Up).await {
                    return fail(e);
                }
                format!("{switch}: restarted (register state lost; links up again at once)")
            } else {
                // The request returns now; the links come up after the boot.
                let (l2, links, name) = (live.clone(), links.clone(), switch.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_nanos(boot_ns)).await;
                    let mut msg = format!("{name}: booted, links up");
                    for l in links {
                        if let Err(e) = push_link_change(&l2, l, LinkChange::Up).await {
                            msg = format!("{name}: its links could not come up after the boot: {e}");
                        }
                    }
                    if let Ok(mut ev) = l2.events.lock() {
                        ev.push(msg);
                    }
                });
                format!("{switch}: restarting (register state lost; links down, up in {boot})")
            }
        }
    };
    if let Ok(mut ev) = live.events.lock() {
        ev.push(described.clone());
    }
    ok(described)
}

async fn handle(live: &Arc<Live>, req: Request) -> Response {
    let f = &live.fabric;
    match req {
        Request::Status => {
            let processes = live
                .nodes
                .iter()
                .map(|(&p, n)| {
                    let dead = n.dead.lock().ok().and_then(|d| d.clone());
                    ProcessStatus {
                        process: p,
                        pid: n.pid,
                        state: if dead.is_some() || (n.pid != 0 && !alive(n.pid)) { "dead".into() } else { "running".into() },
                        report: n.report.lock().ok().and_then(|r| r.clone()),
                    }
                })
                .collect::<Vec<_>>();
            let reports: BTreeMap<u32, ProcessReport> =
                processes.iter().filter_map(|p: &ProcessStatus| Some((p.process, p.report.clone()?))).collect();
            let delays = live.delays.lock().map(|d| d.clone()).unwrap_or_default();
            let place = |p: u32| live.machine_of(p).map_or_else(|| format!("emu-node {p}"), String::from);
            Response {
                ok: true,
                message: String::new(),
                faithfulness: Some(crate::observe::faithfulness::Faithfulness::of(emu_node::runtime::smallest_link_delay(f), &reports)),
                cut_links: cut_links::cut_links(f, &reports, &delays, place),
                captures: vec![],
                processes,
                links: f.links.iter().map(|l| l.name.clone()).collect(),
                events: live.events.lock().map(|e| e.clone()).unwrap_or_default(),
            }
        }
        Request::Link { link, change } => set_link(f, live, link, Ok(change)).await,
        Request::LinkRatePercent { link, percent } => set_link(f, live, link, Err(percent)).await,
        Request::LinkFlap { link, period_ns } => flap_link(live, link, period_ns).await,
        Request::Node { switch, change } => change_node(live, switch, change).await,
        Request::Capture { link, path, count } => capture(live, &link, &path, count).await,
        Request::Down => ok(String::new()),
    }
}

/// `weft capture LINK --pcap PATH`: a capture at the link's switch end, or
/// for a link cut between processes one at each end (`PATH` with the end's
/// node before the extension: `x.leaf0.pcap`, `x.spine0.pcap`). A process
/// on another machine writes into its `/tmp`; the answer says where, and
/// `weft capture` fetches the file.
async fn capture(live: &Live, link: &str, path: &str, count: u64) -> Response {
    let f = &live.fabric;
    let Some(id) = link_by_name(f, link) else {
        return fail(format!("no link `{link}` (see `weft status` for the names)"));
    };
    let l = &f.links[id.index()];
    let (pa, pb) = (f.nodes[l.a.0.index()].placement, f.nodes[l.b.0.index()].placement);
    let sides: Vec<(u32, &str)> = if pa == pb {
        // The emu-node picks the switch end.
        let switch = [l.a.0, l.b.0].into_iter().find(|n| f.nodes[n.index()].as_switch().is_some()).unwrap_or(l.a.0);
        vec![(pa, f.nodes[switch.index()].name.as_str())]
    } else {
        vec![(pa, f.nodes[l.a.0.index()].name.as_str()), (pb, f.nodes[l.b.0.index()].name.as_str())]
    };
    let mut files = Vec::new();
    for (p, node) in sides {
        let Some(n) = live.nodes.get(&p) else { return fail(format!("emu-node {p}, which runs {node}, is not connected")) };
        let here = if pa == pb { path.to_string() } else { side_path(path, node) };
        let written = if live.machine_of(p).is_some() {
            let name = Path::new(&here).file_name().map_or("capture.pcap".into(), |n| n.to_string_lossy().into_owned());
            format!("/tmp/weft-capture.{}.{name}", std::process::id())
        } else {
            here.clone()
        };
        let (tx_done, rx_done) = tokio::sync::oneshot::channel();
        *n.capture.lock().await = Some(tx_done);
        {
            let mut tx = n.tx.lock().await;
            if let Err(e) = control::send(&mut tx, &ToNode::Capture { link: id, path: written.clone(), count }).await {
                return fail(format!("emu-node {p}: {e}"));
            }
        }
        match tokio::time::timeout(Duration::from_secs(5), rx_done).await {
            Ok(Ok(Ok(true))) => files.push(CaptureFile { node: node.to_string(), process: p, written, path: here }),
            Ok(Ok(Err(why))) => return fail(format!("emu-node {p} cannot capture {} at {node}: {why}", l.name)),
            _ => return fail(format!("emu-node {p} did not start the capture of {} at {node}", l.name)),
        }
    }
    let list: Vec<String> = files.iter().map(|c| format!("{} (at {})", c.path, c.node)).collect();
    let mut r = ok(format!("capturing {count} frames of {} into {}", l.name, list.join(" and ")));
    r.captures = files;
    r
}

/// `x.pcap` for the end at `node`: `x.node.pcap`.
fn side_path(path: &str, node: &str) -> String {
    let p = Path::new(path);
    let stem = p.file_stem().map_or(String::from("capture"), |s| s.to_string_lossy().into_owned());
    let ext = p.extension().map_or(String::from("pcap"), |e| e.to_string_lossy().into_owned());
    p.with_file_name(format!("{stem}.{node}.{ext}")).display().to_string()
}

/// Human form of a link change.
pub fn describe_change(c: LinkChange) -> String {
    match c {
        LinkChange::Down => "down".into(),
        LinkChange::Up => "up".into(),
        LinkChange::Rate(r) => format!("rate {r}"),
        LinkChange::Delay(d) => format!("delay {}", emu_node::time::format_duration(d)),
        LinkChange::Loss(ppm) => format!("loss {}%", f64::from(ppm) / 1e4),
    }
}
