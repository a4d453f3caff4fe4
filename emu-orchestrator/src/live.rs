//! A live real-time fabric (`weft up`, `status`, `link`, `down`,
//! `capture`): the orchestrator side of DESIGN §7 and §10.
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

use crate::topology::Topology;
use emu_node::control::{self, ToNode, ToOrchestrator, PROTOCOL_VERSION};
use emu_node::fabric::{FabricSpec, HostKind};
use emu_node::ids::LinkId;
use emu_node::link::auth::LinkSecret;
use emu_node::link::{quic, InterProcess, LinkChange};
use emu_node::runtime::{LinkAddrs, ProcessPlan, ProcessReport};
use emu_node::tls::FabricIdentity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Errors of live-fabric commands.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A fabric is already up in this state directory.
    #[error("a fabric is already up (orchestrator pid {0}); run `weft down` first")]
    AlreadyUp(u32),
    /// No fabric is up.
    #[error("no fabric is up (no state in {0})")]
    NotUp(String),
    /// Needs root.
    #[error("real-time fabrics with TAP hosts need root (network namespaces, /dev/net/tun)")]
    NotRoot,
    /// A VM host cannot run (no qemu, no image).
    #[error(transparent)]
    Vm(#[from] emu_node::vm::VmError),
    /// The VM image could not be built.
    #[error(transparent)]
    VmImage(#[from] crate::vm_image::VmImageError),
    /// Too little memory for a VM host.
    #[error("--vm-memory {0} MiB is too small for a soft-RoCE VM host (the kernel, the 45 MB initramfs held in RAM and rxe need at least {min} MiB; the default is {def} MiB)", min = emu_node::vm::MIN_MEMORY_MIB, def = emu_node::vm::DEFAULT_MEMORY_MIB)]
    VmMemory(u32),
    /// The emu-node binary is missing.
    #[error("cannot find the emu-node binary next to weft ({0}); build it with `cargo build --release`")]
    NoEmuNode(String),
    /// A namespace with a host's name exists and is not ours.
    #[error("network namespace `{0}` exists and does not belong to a weft fabric; remove it or use --netns-prefix")]
    NetnsTaken(String),
    /// Placement.
    #[error("placement: {0}")]
    Placement(String),
    /// A machine of `--machines`.
    #[error(transparent)]
    Machines(#[from] crate::machines::MachinesError),
    /// An emu-node reported a failure (its own message).
    #[error("emu-node {0} failed: {1}")]
    Node(u32, String),
    /// An emu-node's control channel broke (`logs`: the tail of the
    /// emu-nodes' logs, or empty).
    #[error("emu-node {process}: {what}: {source}{logs}")]
    NodeLost {
        /// The process.
        process: u32,
        /// What was going on.
        what: &'static str,
        /// Cause.
        #[source]
        source: emu_node::control::ControlError,
        /// Log tails.
        logs: String,
    },
    /// An emu-node sent a message out of turn.
    #[error("emu-node {0} sent an unexpected message: {1}")]
    Unexpected(u32, String),
    /// An emu-node's switch results do not decode.
    #[error("emu-node {process}: malformed switch results: {source}")]
    BadResults {
        /// The process.
        process: u32,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// Not every emu-node connected in time.
    #[error("emu-nodes did not all connect within 20 s{0}")]
    ConnectTimeout(String),
    /// The orchestrator of a running fabric does not answer its socket.
    #[error("the orchestrator is not answering on {0} (killed?); `weft down` cleans up")]
    NotAnswering(String),
    /// The orchestrator's answer does not decode.
    #[error("bad answer from the orchestrator: {0}")]
    BadAnswer(#[source] serde_json::Error),
    /// A network namespace or TAP operation failed.
    #[error(transparent)]
    Tap(#[from] emu_node::tap::TapError),
    /// The control channel to an emu-node failed.
    #[error(transparent)]
    Control(#[from] emu_node::control::ControlError),
    /// The fabric certificate or the QUIC server could not be made.
    #[error(transparent)]
    Tls(#[from] emu_node::tls::TlsError),
    /// This process's part of the fabric (links, capture) failed.
    #[error(transparent)]
    Runtime(#[from] emu_node::runtime::RuntimeError),
    /// Prometheus could not be configured or started.
    #[error(transparent)]
    Prometheus(#[from] crate::prometheus::PrometheusError),
    /// A blocking task panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// A fabric token file that is not a token.
    #[error("{0}: {1}")]
    Token(String, String),
    /// A teardown left something it could not remove (the state file is
    /// kept, so a later `weft down` retries).
    #[error("teardown incomplete, kept {state} so that `weft down` can retry; left: {}", left.join("; "))]
    Leftovers {
        /// The state file kept.
        state: String,
        /// What is left, with why.
        left: Vec<String>,
    },
    /// I/O.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LiveError {
    let w = what.into();
    move |e| LiveError::Io(w, e)
}

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
    pub machines: Vec<crate::machines::Machine>,
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

/// The default state directory: `$WEFT_STATE_DIR`, else `/run/weft` as root,
/// else a per-user directory under the temp dir.
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WEFT_STATE_DIR") {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        PathBuf::from("/run/weft")
    } else {
        std::env::temp_dir().join(format!("weft-{}", unsafe { libc::geteuid() }))
    }
}

/// What `weft up` records for cleanup and for the other commands.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FabricState {
    /// Topology name.
    pub topology: String,
    /// Orchestrator pid.
    pub orchestrator: u32,
    /// emu-node pids by process index.
    pub processes: BTreeMap<u32, u32>,
    /// Namespaces of the fabric's TAP hosts.
    pub netns: Vec<String>,
    /// "running" once every process runs.
    pub phase: String,
    /// How to reach the hosts (printed by `weft up`).
    pub hosts: Vec<String>,
    /// Control endpoint (QUIC) the emu-nodes connect to.
    #[serde(default)]
    pub control: String,
    /// SHA-256 pin of the fabric certificate (public; the token is not stored).
    #[serde(default)]
    pub pin: String,
    /// `/metrics` endpoints by process index.
    #[serde(default)]
    pub metrics: BTreeMap<u32, String>,
    /// Prometheus file-SD file and configuration, once written.
    #[serde(default)]
    pub prometheus_config: Option<(String, String)>,
    /// Prometheus started by `weft up --prometheus`: (pid, URL).
    #[serde(default)]
    pub prometheus: Option<(u32, String)>,
    /// The synthetic hosts' traffic (`--workload`), in words.
    #[serde(default)]
    pub traffic: Option<String>,
    /// Processes started over ssh (`--machines`), by process index.
    #[serde(default)]
    pub machines: BTreeMap<u32, RemoteProcess>,
    /// Clocks of the processes on other machines or in pods, by process.
    #[serde(default)]
    pub clocks: BTreeMap<u32, ClockEstimate>,
    /// Links whose due times are less certain than their delay.
    #[serde(default)]
    pub clock_warnings: Vec<String>,
    /// How `weft exec` reaches each real host, by host name.
    #[serde(default)]
    pub real_hosts: BTreeMap<String, HostAccess>,
    /// Where the VM hosts' directories are (removed at teardown).
    #[serde(default)]
    pub vm_dir: Option<String>,
}

/// How to run a command in a real host (`weft exec`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum HostAccess {
    /// A network namespace (TAP host).
    Netns {
        /// Its name.
        netns: String,
        /// The emu-node that runs it.
        process: u32,
    },
    /// A VM (soft-RoCE host).
    Vm {
        /// Its directory (exec sockets).
        dir: String,
        /// The emu-node that runs it.
        process: u32,
    },
}

/// Links between processes whose ends' clock offsets are together less
/// certain than the link's delay: a frame's due time, written by one end's
/// clock and read by the other's, may then be off by more than the delay.
fn clock_warnings(f: &FabricSpec, st: &FabricState) -> Vec<String> {
    let unc = |n: emu_node::ids::NodeId| {
        let p = f.nodes[n.index()].placement;
        st.clocks.get(&p).map_or(0, |c| c.uncertainty_ns)
    };
    f.links
        .iter()
        .filter(|l| f.nodes[l.a.0.index()].placement != f.nodes[l.b.0.index()].placement)
        .filter_map(|l| {
            let u = unc(l.a.0) + unc(l.b.0);
            (u > l.delay).then(|| {
                format!(
                    "link {}: the clocks of its ends are known to +-{:.1} us, more than its delay of {:.1} us; its frames may be early or late by that much",
                    l.name,
                    u as f64 / 1e3,
                    l.delay as f64 / 1e3
                )
            })
        })
        .collect()
}

/// An emu-node started on another machine: what `weft down` (or the next
/// `weft up` after a killed orchestrator) needs to clean up there.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteProcess {
    /// The machine.
    pub machine: crate::machines::Machine,
    /// The emu-node's pid on it (0 until it said hello).
    pub pid: u32,
    /// Namespaces of the TAP hosts it runs.
    pub netns: Vec<String>,
}

/// A process's clock as the orchestrator estimated it at start.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct ClockEstimate {
    /// Its clock minus this machine's, ns.
    pub offset_ns: i64,
    /// The estimate's uncertainty (half the best round trip), ns.
    pub uncertainty_ns: u64,
}

/// This machine's address on the route toward `peer` (a UDP socket
/// "connected" to it sends nothing but learns the source address).
fn local_addr_toward(peer: std::net::IpAddr) -> Option<std::net::IpAddr> {
    let any: std::net::IpAddr =
        if peer.is_ipv6() { std::net::Ipv6Addr::UNSPECIFIED.into() } else { std::net::Ipv4Addr::UNSPECIFIED.into() };
    let s = std::net::UdpSocket::bind((any, 0)).ok()?;
    s.connect((peer, 9)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

fn state_file(dir: &Path) -> PathBuf {
    dir.join("fabric.json")
}
fn socket_file(dir: &Path) -> PathBuf {
    dir.join("control.sock")
}

/// Reads the state file, if any.
pub fn read_state(dir: &Path) -> Option<FabricState> {
    std::fs::read_to_string(state_file(dir)).ok().and_then(|s| serde_json::from_str(&s).ok())
}

fn write_state(dir: &Path, s: &FabricState) -> Result<(), LiveError> {
    std::fs::create_dir_all(dir).map_err(io(format!("state directory {}", dir.display())))?;
    let tmp = dir.join("fabric.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(s).unwrap_or_default()).map_err(io("state file"))?;
    std::fs::rename(&tmp, state_file(dir)).map_err(io("state file"))
}

/// Whether a process is alive.
pub fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence.
    pid != 0 && unsafe { libc::kill(pid as i32, 0) } == 0 && !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
}

fn kill(pid: u32, sig: i32) {
    if pid != 0 {
        // SAFETY: sending a signal has no memory-safety preconditions.
        unsafe { libc::kill(pid as i32, sig) };
    }
}

/// What a teardown did: what it removed and what it could not remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Teardown {
    /// What was removed, one line each.
    pub removed: Vec<String>,
    /// What is still there, one line each with the reason.
    pub left: Vec<String>,
}

/// Removes what a dead orchestrator left (processes, namespaces, VM
/// directories). The state file goes only when nothing is left: otherwise
/// it stays, [`LiveError::Leftovers`] names what is left, and a later call
/// retries. Fails if the orchestrator is still alive.
///
/// Blocking (up to seconds: Prometheus's orderly stop, ssh to other
/// machines); async code runs it with `spawn_blocking`.
pub fn remove_leftovers(dir: &Path) -> Result<Vec<String>, LiveError> {
    let Some(st) = read_state(dir) else { return Ok(vec![]) };
    if st.orchestrator != std::process::id() && alive(st.orchestrator) {
        return Err(LiveError::AlreadyUp(st.orchestrator));
    }
    let t = teardown(&st, Owner::Unknown);
    finish_teardown(dir, t.left)?;
    Ok(t.removed)
}

/// Whose processes the state's pids are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// This orchestrator started them: every pid is its child.
    This,
    /// A dead orchestrator's: a pid may have been reused since, so only
    /// processes that are recognisably the fabric's are killed.
    Unknown,
}

/// Removes the fabric of `st` (processes here and on other machines,
/// Prometheus, namespaces, VM directories), reporting what it removed and
/// what it could not. Blocking; the state file is not touched.
fn teardown(st: &FabricState, owner: Owner) -> Teardown {
    let mut t = Teardown::default();
    if let Some((pid, _)) = &st.prometheus {
        if alive(*pid) && (owner == Owner::This || is_prometheus(*pid)) {
            // SIGTERM: Prometheus flushes its head block and exits.
            kill(*pid, libc::SIGTERM);
            if !wait_gone(&[*pid], Duration::from_secs(5)) {
                kill(*pid, libc::SIGKILL);
            }
            t.removed.push(format!("prometheus (pid {pid})"));
        }
    }
    let mut killed = Vec::new();
    for (&i, &pid) in &st.processes {
        let remote = st.machines.contains_key(&i);
        // An ssh session to another machine is recognised by the fabric's
        // certificate pin on its command line.
        let ours = match (owner, remote) {
            (Owner::This, _) => true,
            (Owner::Unknown, false) => is_emu_node(pid),
            (Owner::Unknown, true) => {
                !st.pin.is_empty()
                    && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&st.pin))
            }
        };
        if alive(pid) && ours {
            kill(pid, libc::SIGKILL);
            killed.push(pid);
            if !remote {
                t.removed.push(format!("emu-node {i} (pid {pid})"));
            }
        }
    }
    if !wait_gone(&killed, Duration::from_secs(2)) {
        for (&i, &pid) in st.processes.iter().filter(|(_, p)| killed.contains(p) && alive(**p)) {
            t.left.push(format!("process {i} (pid {pid}) survived SIGKILL"));
        }
    }
    for (line, ok) in clean_machines(st) {
        if ok {
            t.removed.push(line);
        } else {
            t.left.push(line);
        }
    }
    let existing = emu_node::tap::list_netns();
    for ns in st.netns.iter().filter(|ns| existing.contains(ns)) {
        match emu_node::tap::delete_netns(ns) {
            Ok(()) => t.removed.push(format!("netns {ns}")),
            Err(e) => t.left.push(format!("netns {ns}: {e}")),
        }
    }
    if let Some(vm) = st.vm_dir.as_deref().filter(|vm| Path::new(vm).exists()) {
        match std::fs::remove_dir_all(vm) {
            Ok(()) => t.removed.push(format!("VM directories {vm}")),
            Err(e) => t.left.push(format!("VM directories {vm}: {e}")),
        }
    }
    t
}

/// Removes the state file and the control socket when nothing is `left`;
/// otherwise keeps the state file (a later `weft down` retries) and names
/// what is left.
fn finish_teardown(dir: &Path, left: Vec<String>) -> Result<(), LiveError> {
    let _ = std::fs::remove_file(socket_file(dir));
    if !left.is_empty() {
        return Err(LiveError::Leftovers { state: state_file(dir).display().to_string(), left });
    }
    match std::fs::remove_file(state_file(dir)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing the state file")(e)),
        _ => Ok(()),
    }
}

/// Tears down the fabric of `st` from async code (on a blocking thread)
/// and then removes or keeps its state file as [`finish_teardown`] says.
async fn teardown_async(dir: &Path, st: &FabricState) -> Result<(), LiveError> {
    let st = st.clone();
    let t = tokio::task::spawn_blocking(move || teardown(&st, Owner::This)).await?;
    finish_teardown(dir, t.left)
}

/// Waits up to `limit` for every process of `pids` to be gone; whether they are.
fn wait_gone(pids: &[u32], limit: Duration) -> bool {
    let until = std::time::Instant::now() + limit;
    loop {
        if !pids.iter().any(|&p| alive(p)) {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Cleans up, over ssh and in parallel, what the fabric of `st` left on
/// other machines (each at most 10 s): one line per machine process, with
/// whether its clean-up succeeded.
fn clean_machines(st: &FabricState) -> Vec<(String, bool)> {
    let what =
        |i: u32, r: &RemoteProcess| format!("emu-node {i} on machine {} (pid {} there) and its hosts' namespaces", r.machine.name, r.pid);
    let cleaners: Vec<_> =
        st.machines.iter().map(|(&i, r)| (what(i, r), crate::machines::spawn_cleanup(&r.machine, r.pid, &r.netns))).collect();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    cleaners
        .into_iter()
        .map(|(line, child)| {
            let mut c = match child {
                Ok(c) => c,
                Err(e) => return (format!("{line}: {e}"), false),
            };
            while matches!(c.try_wait(), Ok(None)) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            let status = c.try_wait();
            let _ = c.kill();
            let out = c.wait_with_output();
            let why = out
                .as_ref()
                .map(|o| String::from_utf8_lossy(&o.stderr).trim().lines().last().unwrap_or("").to_string())
                .unwrap_or_default();
            match status {
                Ok(Some(s)) if s.success() => (line, true),
                Ok(Some(s)) => {
                    (format!("{line}: ssh exited with {s}{}", if why.is_empty() { String::new() } else { format!(": {why}") }), false)
                }
                _ => (format!("{line}: ssh did not finish within 10 s"), false),
            }
        })
        .collect()
}

fn is_prometheus(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "prometheus")
}

fn is_emu_node(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "emu-node")
}

/// Automatic placement on `n` processes: hosts with their ToR; ToRs (and
/// their hosts) spread over the first processes, other switches over the
/// rest when there are processes left, else round-robin.
pub fn auto_place(f: &mut FabricSpec, n: u32) {
    let n = n.max(1);
    let edge: Vec<usize> = (0..f.nodes.len()).filter(|&i| f.nodes[i].as_switch().is_some() && has_host(f, i)).collect();
    let core: Vec<usize> = (0..f.nodes.len()).filter(|&i| f.nodes[i].as_switch().is_some() && !has_host(f, i)).collect();
    let edge_procs = if n >= 2 && !core.is_empty() { (n - 1).min(edge.len().max(1) as u32) } else { n };
    for (k, &i) in edge.iter().enumerate() {
        f.nodes[i].placement = k as u32 % edge_procs;
    }
    let core_procs = n - edge_procs;
    for (k, &i) in core.iter().enumerate() {
        f.nodes[i].placement = if core_procs == 0 { k as u32 % n } else { edge_procs + k as u32 % core_procs };
    }
    place_hosts_with_tor(f);
}

fn has_host(f: &FabricSpec, i: usize) -> bool {
    f.nodes[i].ports.iter().any(|p| f.nodes.get(p.peer.index()).is_some_and(|n| n.as_host().is_some()))
}

fn place_hosts_with_tor(f: &mut FabricSpec) {
    for i in 0..f.nodes.len() {
        if f.nodes[i].as_host().is_some() {
            if let Some(tor) = f.nodes[i].ports.first().map(|p| p.peer) {
                f.nodes[i].placement = f.nodes[tor.index()].placement;
            }
        }
    }
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
}

/// Sends a request to the running orchestrator.
pub fn request(dir: &Path, req: &Request) -> Result<Response, LiveError> {
    use std::io::{BufRead, Write};
    let sock = socket_file(dir);
    let mut s = std::os::unix::net::UnixStream::connect(&sock).map_err(|_| {
        if read_state(dir).is_some() {
            LiveError::NotAnswering(sock.display().to_string())
        } else {
            LiveError::NotUp(dir.display().to_string())
        }
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30))).map_err(io("control socket"))?;
    let mut line = serde_json::to_string(req).unwrap_or_default();
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(io("control socket"))?;
    let mut r = std::io::BufReader::new(s);
    let mut answer = String::new();
    r.read_line(&mut answer).map_err(io("control socket"))?;
    serde_json::from_str(&answer).map_err(LiveError::BadAnswer)
}

struct NodeConn {
    pid: u32,
    tx: tokio::sync::Mutex<quinn::SendStream>,
    report: Mutex<Option<ProcessReport>>,
    dead: Mutex<Option<String>>,
    capture: tokio::sync::Mutex<Option<tokio::sync::oneshot::Sender<bool>>>,
}

struct Live {
    fabric: FabricSpec,
    nodes: BTreeMap<u32, Arc<NodeConn>>,
    events: Arc<Mutex<Vec<String>>>,
    /// Links flapping now (`weft link LINK flap PERIOD`), by link.
    flaps: Mutex<BTreeMap<LinkId, tokio::task::JoinHandle<()>>>,
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
pub fn preflight(topo: &Topology, opts: &UpOptions) -> Result<PathBuf, LiveError> {
    let f = &topo.fabric;
    let taps: Vec<_> = f.nodes.iter().filter(|n| n.as_host().is_some_and(|h| h.kind == HostKind::Tap)).collect();
    if let Some(n) = f.nodes.iter().find(|n| n.as_host().is_some_and(|h| h.kind == HostKind::Rxe)) {
        if opts.vm_memory_mib < emu_node::vm::MIN_MEMORY_MIB {
            return Err(LiveError::VmMemory(opts.vm_memory_mib));
        }
        // VMs on this machine need qemu here (other machines' emu-nodes
        // say so themselves).
        if opts.machines.is_empty() && opts.external.is_none() && !emu_node::vm::have_qemu() {
            return Err(emu_node::vm::VmError::NoQemu(n.name.clone()).into());
        }
    }
    // SAFETY: geteuid has no preconditions.
    if !taps.is_empty() && unsafe { libc::geteuid() } != 0 {
        return Err(LiveError::NotRoot);
    }
    let exe = std::env::current_exe().map_err(io("current executable"))?;
    let emu = exe.with_file_name("emu-node");
    if !emu.exists() {
        return Err(LiveError::NoEmuNode(emu.display().to_string()));
    }
    let removed = remove_leftovers(&opts.state_dir)?;
    for r in removed {
        eprintln!("removed leftover of a killed fabric: {r}");
    }
    let existing = emu_node::tap::list_netns();
    for n in &taps {
        let ns = format!("{}{}", opts.netns_prefix, n.name);
        if existing.contains(&ns) {
            return Err(LiveError::NetnsTaken(ns));
        }
    }
    Ok(emu)
}

/// What `weft up` checks and prepares before it starts anything: the
/// emu-node binary, the VM image, every machine. Blocking.
fn prepare_up(
    topo: &Topology,
    opts: &UpOptions,
) -> Result<(PathBuf, Option<emu_node::vm::VmOptions>, Vec<crate::machines::Machine>), LiveError> {
    let emu = preflight(topo, opts)?;
    let has_vms = topo.fabric.nodes.iter().any(|n| n.as_host().is_some_and(|h| h.kind == HostKind::Rxe));
    let vm = if has_vms {
        let image = crate::vm_image::ensure(&opts.vm_image, &mut |line| eprintln!("{line}"))?;
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
    }
    Ok((emu, vm, machines))
}

/// Brings the fabric up and serves until `weft down`, Ctrl-C or SIGTERM.
/// `ready` is called with the host lines once everything runs.
pub async fn up(topo: &Topology, opts: &UpOptions, ready: impl FnOnce(&[String])) -> Result<(), LiveError> {
    // The checks and preparations block (ssh, image builds, removing a
    // killed fabric's leftovers): on a blocking thread.
    let (t, o) = (topo.clone(), opts.clone());
    let (emu, vm, machines) = tokio::task::spawn_blocking(move || prepare_up(&t, &o)).await??;
    // From here on, `machines` holds a machine per process.
    let opts = &UpOptions { machines: crate::machines::process_slots(&machines), ..opts.clone() };
    let mut fabric = topo.fabric.clone();
    if !opts.explicit_placement {
        if opts.machines.is_empty() {
            auto_place(&mut fabric, opts.nodes);
        } else {
            let cut = crate::machines::place(&mut fabric, &opts.machines);
            for line in crate::machines::describe(&fabric, &opts.machines) {
                eprintln!("machine {line}");
            }
            eprintln!("{} links cross machines: {}", cut.len(), cut.join(" "));
        }
    } else {
        place_hosts_with_tor(&mut fabric);
    }
    let procs = fabric.nodes.iter().map(|n| n.placement).max().unwrap_or(0) + 1;
    if !opts.machines.is_empty() && procs as usize > opts.machines.len() {
        return Err(LiveError::Placement(format!(
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
) -> Result<Option<DownAck>, LiveError> {
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
        workload: opts.workload.as_ref().map(|w| w.0.clone()),
        max_lag: opts.max_lag,
        tap_offload: opts.tap_offload,
        machines: opts.machines.clone(),
        external: opts.external.clone(),
        vm,
    };
    let Launched { ep, token, children, mut conns, addrs, events: launched_events, .. } =
        launch(emu, &dir, &(0..procs).collect::<Vec<_>>(), &base, state).await?;
    for (_, tx, _) in conns.values_mut() {
        control::send(tx, &ToNode::Peers(addrs.clone())).await?;
    }
    await_running(&mut conns, &dir).await?;
    let targets: Vec<crate::prometheus::Target> =
        addrs.iter().filter_map(|a| a.metrics.map(|m| crate::prometheus::Target { addr: m, process: a.process })).collect();
    let interval = opts.prometheus.as_ref().map_or(Duration::from_secs(1), |p| p.scrape_interval);
    // Kept (not waited for) so that the child is not reaped behind the
    // state file's back; teardown stops it by pid.
    let _prometheus_child = configure_prometheus(opts, &fabric.name, &targets, interval, state).await?;
    let mut targets = targets;
    let (dead_tx, mut dead_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let live = Arc::new(Live {
        nodes: watch_nodes(conns, children, state, &dead_tx),
        fabric,
        events: Arc::new(Mutex::new(launched_events)),
        flaps: Mutex::default(),
    });
    let sock = socket_file(&dir);
    let _ = std::fs::remove_file(&sock);
    let listener = tokio::net::UnixListener::bind(&sock).map_err(io(format!("control socket {}", sock.display())))?;
    state.phase = "running".into();
    write_state(&dir, state)?;
    ready(&state.hosts);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(io("signals"))?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).map_err(io("signals"))?;
    let (down_tx, mut down_rx) = tokio::sync::mpsc::unbounded_channel::<DownAck>();
    let mut reported_dead = std::collections::BTreeSet::new();
    let mut down_ack = None;
    loop {
        tokio::select! {
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
                    let _ = crate::prometheus::write_config(&dir, &live.fabric.name, &targets, interval);
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
    targets: &[crate::prometheus::Target],
    interval: Duration,
    state: &mut FabricState,
) -> Result<Option<std::process::Child>, LiveError> {
    let dir = &opts.state_dir;
    state.metrics = targets.iter().map(|t| (t.process, format!("http://{}/metrics", t.addr))).collect();
    let (sd, yml) = crate::prometheus::write_config(dir, fabric, targets, interval)?;
    state.prometheus_config = Some((sd.display().to_string(), yml.display().to_string()));
    let Some(p) = &opts.prometheus else { return Ok(None) };
    let (d, bin, listen) = (dir.clone(), p.bin.clone(), p.listen);
    let (child, addr) = tokio::task::spawn_blocking(move || crate::prometheus::start(&d, &bin, listen)).await??;
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
                    }
                    Ok(ToOrchestrator::CaptureStarted(b)) => {
                        if let Some(s) = nc.capture.lock().await.take() {
                            let _ = s.send(b);
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

/// Refuses an emu-node that connects once the fabric is complete, and
/// logs why (with what the client sent: a replayed or garbled message, a
/// wrong token, nothing at all).
async fn refuse_latecomer(inc: quinn::Incoming, token: String, events: Arc<std::sync::Mutex<Vec<String>>>) {
    let from = inc.remote_address();
    let Ok(conn) = inc.await else { return };
    let accepted = tokio::time::timeout(control::HELLO_TIMEOUT, conn.accept_bi()).await;
    let (why, tx) = match accepted {
        Ok(Ok((tx, mut rx))) => {
            let why = match control::recv_hello(&mut rx).await {
                Ok(ToOrchestrator::Hello { token: t, .. }) if t == token => "the fabric is complete (no process slot is free)".to_string(),
                got => refusal_reason(got),
            };
            (why, Some(tx))
        }
        _ => ("no control stream".to_string(), None),
    };
    log_refusal(&events, from, &why);
    if let Some(mut tx) = tx {
        let _ = control::send(&mut tx, &ToNode::Refused(why)).await;
        let _ = tx.finish();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    conn.close(1u32.into(), b"refused");
}

/// Why a first message is refused, for the log and the client.
fn refusal_reason(got: Result<ToOrchestrator, control::ControlError>) -> String {
    match got {
        Ok(ToOrchestrator::Hello { version, .. }) if version != PROTOCOL_VERSION => {
            format!("protocol version {version} (this weft speaks {PROTOCOL_VERSION})")
        }
        Ok(ToOrchestrator::Hello { .. }) => "bad token".into(),
        Ok(other) => format!("a {} message before any Hello (replayed?)", message_kind(&other)),
        Err(e) => format!("{e}"),
    }
}

/// The variant name of a message (never its content: it may hold a token).
fn message_kind(m: &ToOrchestrator) -> &'static str {
    match m {
        ToOrchestrator::Hello { .. } => "Hello",
        ToOrchestrator::Bound(_) => "Bound",
        ToOrchestrator::Running => "Running",
        ToOrchestrator::Report(_) => "Report",
        ToOrchestrator::CaptureStarted(_) => "CaptureStarted",
        ToOrchestrator::Failed(_) => "Failed",
        ToOrchestrator::ClockEcho { .. } => "ClockEcho",
        ToOrchestrator::Finished(_) => "Finished",
    }
}

/// Logs a refused control connection (orchestrator log and `weft status`).
fn log_refusal(events: &std::sync::Mutex<Vec<String>>, from: std::net::SocketAddr, why: &str) {
    let msg = format!("refused a control connection from {from}: {why}");
    eprintln!("weft: {msg}");
    if let Ok(mut ev) = events.lock() {
        ev.push(msg);
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

/// Control connections by process index.
type Conns = BTreeMap<u32, (quinn::Connection, quinn::SendStream, quinn::RecvStream)>;

/// Waits until every emu-node reports that its links are connected.
async fn await_running(conns: &mut Conns, dir: &Path) -> Result<(), LiveError> {
    let procs = conns.keys().max().map_or(0, |m| m + 1);
    for (&p, (_, _, rx)) in conns.iter_mut() {
        match control::recv::<ToOrchestrator>(rx).await {
            Ok(ToOrchestrator::Running) => {}
            Ok(ToOrchestrator::Failed(e)) => return Err(LiveError::Node(p, e)),
            Ok(o) => return Err(LiveError::Unexpected(p, format!("{o:?}"))),
            Err(source) => return Err(LiveError::NodeLost { process: p, what: "connecting links", source, logs: tail_logs(dir, procs) }),
        }
    }
    Ok(())
}

/// The `/metrics` address of process `p` given process 0's.
pub fn metrics_addr_of(base: std::net::SocketAddr, p: u32) -> std::net::SocketAddr {
    let mut a = base;
    if a.port() != 0 {
        a.set_port(a.port().saturating_add(p as u16));
    }
    a
}

/// What every process plan of a fabric shares.
pub struct PlanBase {
    /// The fabric (placement decides who runs what).
    pub fabric: FabricSpec,
    /// Transport between processes.
    pub inter: InterProcess,
    /// Scheduler spin window, µs.
    pub spin_us: u32,
    /// Namespace prefix.
    pub netns_prefix: String,
    /// Run seed (per-node RNG seeds derive from it).
    pub seed: u64,
    /// Fabric time 0 is this long after the launch (so that every process
    /// is connected before the first deadline of a workload).
    pub start_delay: Duration,
    /// Health reports every this many ms (0: only on request).
    pub report_every_ms: u32,
    /// `/metrics` of process 0; process p listens on port + p (port 0:
    /// every process picks a free port).
    pub metrics: Option<std::net::SocketAddr>,
    /// Traffic of the synthetic hosts (`weft up --workload`).
    pub workload: Option<emu_node::node::HostWorkload>,
    /// The bounded-lag policy's bound (0: none).
    pub max_lag: emu_node::time::Nanos,
    /// TAP hosts get segmentation offload.
    pub tap_offload: bool,
    /// Process p runs on machine p over ssh (empty: all local).
    pub machines: Vec<crate::machines::Machine>,
    /// The emu-nodes start by themselves and connect (Kubernetes).
    pub external: Option<ExternalNodes>,
    /// How VM hosts run (`None`: the fabric has none).
    pub vm: Option<emu_node::vm::VmOptions>,
}

/// emu-node processes that joined, were given their plans and bound their
/// link sockets.
pub struct Launched {
    /// The control endpoint (keep it open).
    pub ep: quinn::Endpoint,
    /// The fabric token.
    pub token: String,
    /// The processes.
    pub children: Vec<tokio::process::Child>,
    /// Control connections by process index.
    pub conns: Conns,
    /// Their link addresses.
    pub addrs: Vec<LinkAddrs>,
    /// The plan every process got (process 0's, for a local participant).
    pub identity_plan: ProcessPlan,
    /// Control connections refused while launching (logged).
    pub events: Vec<String>,
}

/// Starts one emu-node per index in `procs`, authenticates each (pinned
/// certificate, token), sends its plan and waits for its link addresses.
pub async fn launch(emu: &Path, dir: &Path, procs: &[u32], base: &PlanBase, state: &mut FabricState) -> Result<Launched, LiveError> {
    let (identity, token) = match &base.external {
        Some(x) => load_identity(&x.identity_dir)?,
        None => (FabricIdentity::generate()?, new_token()),
    };
    let fabric_tag = fabric_tag(&token);
    let launch_events = std::sync::Mutex::new(Vec::new());
    // Link datagrams are signed with a secret that travels only in the
    // plans, over the TLS control channel (DESIGN §7).
    let link_secret = LinkSecret::generate().map_err(|_| io("the link secret")(std::io::Error::other("no random source")))?;
    let server = identity.quic_server(quic::control_transport())?;
    // Other machines reach the control endpoint on this machine's address
    // toward them; one machine uses loopback only.
    let listen: std::net::IpAddr =
        if base.machines.is_empty() { std::net::Ipv4Addr::LOCALHOST.into() } else { std::net::Ipv4Addr::UNSPECIFIED.into() };
    let listen: std::net::SocketAddr = base.external.as_ref().map_or((listen, 0).into(), |x| x.listen);
    let ep = quinn::Endpoint::server(server, listen).map_err(io(format!("control endpoint {listen}")))?;
    let ctl_addr = ep.local_addr().map_err(io("control endpoint"))?;
    state.control = ctl_addr.to_string();
    state.pin = identity.pin();
    std::fs::create_dir_all(dir).map_err(io(format!("state directory {}", dir.display())))?;
    let mut children = Vec::new();
    // External emu-nodes (Kubernetes pods) start by themselves.
    let spawned: &[u32] = if base.external.is_some() { &[] } else { procs };
    for &p in spawned {
        let log = std::fs::File::create(dir.join(format!("emu-node-{p}.log"))).map_err(io("emu-node log"))?;
        let log2 = log.try_clone().map_err(io("emu-node log"))?;
        let child = match base.machines.get(p as usize) {
            None => tokio::process::Command::new(emu)
                .args(["--control", &ctl_addr.to_string(), "--pin", &identity.pin(), "--process", &p.to_string()])
                .env("WEFT_TOKEN", &token)
                .stdout(log)
                .stderr(log2)
                .process_group(0)
                .kill_on_drop(true)
                .spawn()
                .map_err(io(format!("starting {}", emu.display())))?,
            Some(m) => {
                // emu-node on the machine over ssh; the token on ssh's stdin.
                let ctl = std::net::SocketAddr::new(local_addr_toward(m.bind).unwrap_or(ctl_addr.ip()), ctl_addr.port());
                let mut cmd: tokio::process::Command = m.ssh_command().into();
                let mut child = cmd
                    .arg(m.emu_node_path(emu))
                    .args(["--control", &ctl.to_string(), "--pin", &identity.pin(), "--process", &p.to_string()])
                    .args(["--bind", &m.bind.to_string(), "--token-stdin"])
                    .stdin(std::process::Stdio::piped())
                    .stdout(log)
                    .stderr(log2)
                    .process_group(0)
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(io(format!("starting emu-node on machine {} over ssh", m.name)))?;
                if let Some(mut stdin) = child.stdin.take() {
                    use tokio::io::AsyncWriteExt as _;
                    stdin.write_all(format!("{token}\n").as_bytes()).await.map_err(io(format!("token to machine {}", m.name)))?;
                    // Kept open: closing ssh's stdin ends nothing, but some
                    // ssh servers close the session on EOF.
                    std::mem::forget(stdin);
                }
                let netns = base
                    .fabric
                    .nodes
                    .iter()
                    .filter(|n| n.placement == p && n.as_host().is_some_and(|h| h.kind != HostKind::Synthetic))
                    .map(|n| format!("{}{}", base.netns_prefix, n.name))
                    .collect();
                state.machines.insert(p, RemoteProcess { machine: m.clone(), pid: 0, netns });
                child
            }
        };
        state.processes.insert(p, child.id().unwrap_or(0));
        children.push(child);
    }
    write_state(dir, state)?;
    let epoch = emu_node::clock::monotonic_ns() + base.start_delay.as_nanos() as u64;
    let plan_for = |process: u32| ProcessPlan {
        process,
        fabric: base.fabric.clone(),
        epoch,
        clock_offset_ns: 0,
        fabric_tag,
        link_secret: link_secret.clone(),
        inter: base.inter,
        spin_us: base.spin_us,
        tap_queue_ns: 1_000_000,
        tap_offload: base.tap_offload,
        netns_prefix: base.netns_prefix.clone(),
        identity: identity.clone(),
        seed: base.seed,
        report_every_ms: base.report_every_ms,
        metrics: base.metrics.map(|a| metrics_addr_of(a, process)),
        max_lag_ns: base.max_lag,
        // Only the flows of the hosts this process runs.
        workload: base.workload.as_ref().map(|w| emu_node::node::HostWorkload {
            transport: w.transport,
            flows: w.flows.iter().filter(|f| base.fabric.nodes.get(f.0.index()).is_some_and(|n| n.placement == process)).copied().collect(),
        }),
        vm: base.vm.clone(),
    };
    let nprocs = procs.len();
    let max_proc = procs.iter().copied().max().unwrap_or(0);
    let mut conns: Conns = BTreeMap::new();
    let wait = base.external.as_ref().map_or(Duration::from_secs(20), |x| x.wait);
    if base.external.is_some() {
        eprintln!("waiting up to {} s for {} emu-nodes to connect to {listen}", wait.as_secs(), procs.len());
    }
    let deadline = tokio::time::Instant::now() + wait;
    while conns.len() < nprocs {
        let inc = tokio::select! {
            i = ep.accept() => i,
            _ = tokio::time::sleep_until(deadline) => None,
        };
        let Some(inc) = inc else {
            let logs = tail_logs(dir, max_proc + 1);
            return Err(LiveError::ConnectTimeout(logs));
        };
        let from = inc.remote_address();
        let Ok(conn) = inc.await else { continue };
        let Ok(Ok((mut tx, mut rx))) = tokio::time::timeout(control::HELLO_TIMEOUT, conn.accept_bi()).await else {
            log_refusal(&launch_events, from, "no control stream");
            continue;
        };
        match control::recv_hello(&mut rx).await {
            Ok(ToOrchestrator::Hello { token: t, process, version, pid })
                if t == token && version == PROTOCOL_VERSION && procs.contains(&process) && !conns.contains_key(&process) =>
            {
                let mut plan = plan_for(process);
                if let Some(r) = state.machines.get_mut(&process) {
                    r.pid = pid;
                }
                // Another machine (or a pod, maybe on another node): another
                // CLOCK_MONOTONIC.
                if state.machines.contains_key(&process) || base.external.is_some() {
                    let (offset_ns, uncertainty_ns) = estimate_clock_offset(&mut tx, &mut rx).await?;
                    state.clocks.insert(process, ClockEstimate { offset_ns, uncertainty_ns });
                    plan.clock_offset_ns = offset_ns;
                    write_state(dir, state)?;
                }
                control::send(&mut tx, &ToNode::Plan(Box::new(plan))).await?;
                conns.insert(process, (conn, tx, rx));
            }
            got => {
                let why = match got {
                    Ok(ToOrchestrator::Hello { process, .. }) if conns.contains_key(&process) => {
                        format!("process {process} is connected already (a replayed Hello?)")
                    }
                    got => refusal_reason(got),
                };
                log_refusal(&launch_events, from, &why);
                let _ = control::send(&mut tx, &ToNode::Refused(why)).await;
                let _ = tx.finish();
                tokio::time::sleep(Duration::from_millis(50)).await;
                conn.close(1u32.into(), b"refused");
            }
        }
    }
    state.clock_warnings = clock_warnings(&base.fabric, state);
    for w in &state.clock_warnings {
        eprintln!("warning: {w}");
    }
    write_state(dir, state)?;
    let mut addrs = Vec::new();
    for (&p, (_, _, rx)) in conns.iter_mut() {
        match control::recv::<ToOrchestrator>(rx).await {
            Ok(ToOrchestrator::Bound(a)) => addrs.push(a),
            Ok(ToOrchestrator::Failed(e)) => return Err(LiveError::Node(p, e)),
            Ok(o) => return Err(LiveError::Unexpected(p, format!("{o:?}"))),
            Err(source) => {
                return Err(LiveError::NodeLost { process: p, what: "binding links", source, logs: tail_logs(dir, max_proc + 1) })
            }
        }
    }
    let events = launch_events.into_inner().unwrap_or_default();
    Ok(Launched { ep, token, children, conns, addrs, identity_plan: plan_for(0), events })
}

/// emu-nodes that start by themselves (Kubernetes pods, `weft up
/// --external-nodes`) with an identity and token made beforehand.
#[derive(Debug, Clone)]
pub struct ExternalNodes {
    /// Where the control endpoint listens.
    pub listen: std::net::SocketAddr,
    /// `cert.der`, `key.der` and `token` (what `weft k8s render` puts in the
    /// fabric's Secret).
    pub identity_dir: PathBuf,
    /// How long to wait for every emu-node.
    pub wait: Duration,
}

/// A fresh fabric token (32 random bytes, hex).
pub fn new_token() -> String {
    use rand::Rng;
    let mut r = rand::rng();
    (0..32).map(|_| format!("{:02x}", r.random::<u8>())).collect()
}

/// Reads `cert.der`, `key.der` and `token` from `dir`.
fn load_identity(dir: &Path) -> Result<(FabricIdentity, String), LiveError> {
    let read = |name: &str| std::fs::read(dir.join(name)).map_err(io(format!("{}", dir.join(name).display())));
    let identity = FabricIdentity { cert_der: read("cert.der")?, key_der: read("key.der")? };
    let path = dir.join("token");
    let token = parse_token(&read("token")?).map_err(|why| LiveError::Token(path.display().to_string(), why))?;
    Ok((identity, token))
}

/// A fabric token read from a file: its text without surrounding
/// whitespace, at least 16 printable ASCII characters (weft writes 64 hex
/// digits); why not otherwise.
pub fn parse_token(bytes: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?.trim();
    if let Some(c) = text.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!("the token has a character {c:?} that is not printable ASCII"));
    }
    if text.len() < 16 {
        return Err(format!("the token is too short ({} characters, at least 16)", text.len()));
    }
    Ok(text.to_string())
}

/// The fabric's tag in its link datagrams and TAP device names: the
/// token's first 8 hex digits (weft's own tokens), else a hash of it;
/// never 0.
pub fn fabric_tag(token: &str) -> u32 {
    let tag = token.get(..8).and_then(|h| u32::from_str_radix(h, 16).ok()).unwrap_or_else(|| {
        // FNV-1a: stable across builds and platforms.
        token.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
    });
    tag.max(1)
}

/// Clock probes per process on another machine.
const CLOCK_PROBES: usize = 16;

/// Estimates an emu-node's clock offset over its control stream
/// ([`emu_node::clock::estimate_offset`] of [`CLOCK_PROBES`] exchanges).
async fn estimate_clock_offset(tx: &mut quinn::SendStream, rx: &mut quinn::RecvStream) -> Result<(i64, u64), LiveError> {
    let mut samples = Vec::with_capacity(CLOCK_PROBES);
    for _ in 0..CLOCK_PROBES {
        let sent = emu_node::clock::monotonic_ns();
        control::send(tx, &ToNode::ClockProbe { sent }).await?;
        match control::recv::<ToOrchestrator>(rx).await? {
            ToOrchestrator::ClockEcho { sent: s, remote } if s == sent => {
                samples.push(emu_node::clock::ClockSample { sent, remote, received: emu_node::clock::monotonic_ns() });
            }
            other => return Err(LiveError::Unexpected(u32::MAX, format!("{other:?} instead of a clock echo"))),
        }
    }
    emu_node::clock::estimate_offset(&samples).ok_or_else(|| LiveError::Unexpected(u32::MAX, "no clock sample".into()))
}

fn tail_logs(dir: &Path, procs: u32) -> String {
    let mut s = String::new();
    for p in 0..procs {
        if let Ok(t) = std::fs::read_to_string(dir.join(format!("emu-node-{p}.log"))) {
            let t = t.trim();
            if !t.is_empty() {
                s.push_str(&format!("\n  emu-node {p}: {}", t.lines().last().unwrap_or("")));
            }
        }
    }
    s
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
                let (tx, rx) = tokio::sync::oneshot::channel();
                let _ = down.send(tx);
                match rx.await {
                    Ok(Err(left)) => fail(left),
                    _ => ok("fabric is down".into()),
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

fn ok(message: String) -> Response {
    Response { ok: true, message, processes: vec![], links: vec![], events: vec![] }
}
fn fail(message: String) -> Response {
    Response { ok: false, message, processes: vec![], links: vec![], events: vec![] }
}

fn link_by_name(f: &FabricSpec, name: &str) -> Option<LinkId> {
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
                .collect();
            Response {
                ok: true,
                message: String::new(),
                processes,
                links: f.links.iter().map(|l| l.name.clone()).collect(),
                events: live.events.lock().map(|e| e.clone()).unwrap_or_default(),
            }
        }
        Request::Link { link, change } => set_link(f, live, link, Ok(change)).await,
        Request::LinkRatePercent { link, percent } => set_link(f, live, link, Err(percent)).await,
        Request::LinkFlap { link, period_ns } => flap_link(live, link, period_ns).await,
        Request::Node { switch, change } => change_node(live, switch, change).await,
        Request::Capture { link, path, count } => {
            let Some(id) = link_by_name(f, &link) else {
                return fail(format!("no link `{link}` (see `weft status` for the names)"));
            };
            let l = &f.links[id.index()];
            let procs: Vec<u32> = [l.a.0, l.b.0].iter().map(|n| f.nodes[n.index()].placement).collect();
            for p in procs {
                let Some(n) = live.nodes.get(&p) else { continue };
                let (tx_done, rx_done) = tokio::sync::oneshot::channel();
                *n.capture.lock().await = Some(tx_done);
                {
                    let mut tx = n.tx.lock().await;
                    if let Err(e) = control::send(&mut tx, &ToNode::Capture { link: id, path: path.clone(), count }).await {
                        return fail(format!("emu-node {p}: {e}"));
                    }
                }
                if let Ok(Ok(true)) = tokio::time::timeout(Duration::from_secs(5), rx_done).await {
                    return ok(format!("capturing {count} frames of {} into {path}", l.name));
                }
            }
            fail(format!("no emu-node could capture {}", l.name))
        }
        Request::Down => ok(String::new()),
    }
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

/// The outcome of [`run_distributed`].
pub struct DistributedRun {
    /// State machines of the hosts (run in this process), by node id.
    pub hosts: Vec<(emu_node::ids::NodeId, emu_node::node::Node)>,
    /// Results of the switches (run in the emu-node processes).
    pub switches: Vec<emu_node::results::SwitchResult>,
    /// Whether the run stopped at `until` with hosts still busy.
    pub truncated: bool,
    /// Fabric time at the end.
    pub end: emu_node::time::Nanos,
    /// Frames the inter-process transport lost (last reports).
    pub transport_lost: u64,
}

/// Runs a synthetic workload in real time over several processes: the
/// switches on `procs` emu-node processes (automatic placement), the hosts
/// (given as `nodes`, the prepared state machines of every node) in this
/// process, every host link crossing a process boundary over UDP. Stops
/// when every host is idle, or at fabric time `until`.
#[allow(clippy::too_many_arguments)]
pub async fn run_distributed(
    fabric: &FabricSpec,
    nodes: Vec<Option<emu_node::node::Node>>,
    procs: u32,
    seed: u64,
    spin_us: u32,
    until: emu_node::time::Nanos,
    max_lag: emu_node::time::Nanos,
    capture: Option<(LinkId, PathBuf, u64)>,
    metrics: Option<(std::net::SocketAddr, PathBuf)>,
    progress: &mut dyn FnMut(emu_node::time::Nanos, u64),
) -> Result<DistributedRun, LiveError> {
    use emu_node::runtime::ProcessRuntime;
    let exe = std::env::current_exe().map_err(io("current executable"))?;
    let emu = exe.with_file_name("emu-node");
    if !emu.exists() {
        return Err(LiveError::NoEmuNode(emu.display().to_string()));
    }
    let mut f = fabric.clone();
    auto_place(&mut f, procs.max(1));
    for n in &mut f.nodes {
        n.placement = if n.as_switch().is_some() { n.placement + 1 } else { 0 };
    }
    let dir = std::env::temp_dir().join(format!("weft-run-{}", std::process::id()));
    let mut state = FabricState { topology: f.name.clone(), orchestrator: std::process::id(), ..Default::default() };
    let base = PlanBase {
        fabric: f.clone(),
        inter: InterProcess::Udp,
        spin_us,
        netns_prefix: String::new(),
        seed,
        start_delay: Duration::from_secs(2),
        report_every_ms: 0,
        metrics: metrics.as_ref().map(|m| m.0),
        // The hosts run here, with their flows already added.
        workload: None,
        max_lag,
        tap_offload: true,
        machines: Vec::new(),
        external: None,
        vm: None,
    };
    let remote: Vec<u32> = (1..=procs.max(1)).collect();
    let Launched { ep, mut conns, mut addrs, identity_plan, children, .. } = launch(&emu, &dir, &remote, &base, &mut state).await?;
    let local_nodes: Vec<Option<emu_node::node::Node>> =
        nodes.into_iter().enumerate().map(|(i, n)| n.filter(|_| f.nodes[i].as_host().is_some())).collect();
    let (mut rt, mine) = ProcessRuntime::bind(identity_plan, local_nodes, std::net::Ipv4Addr::LOCALHOST.into()).await?;
    addrs.push(mine);
    if let Some((_, sd_dir)) = &metrics {
        let t: Vec<crate::prometheus::Target> =
            addrs.iter().filter_map(|a| a.metrics.map(|m| crate::prometheus::Target { addr: m, process: a.process })).collect();
        crate::prometheus::write_config(sd_dir, &f.name, &t, Duration::from_secs(1))?;
    }
    for (_, tx, _) in conns.values_mut() {
        control::send(tx, &ToNode::Peers(addrs.clone())).await?;
    }
    rt.connect(&addrs).await?;
    await_running(&mut conns, &dir).await?;
    rt.schedule_events(0);
    if let Some((link, path, count)) = &capture {
        rt.capture(*link, path, *count)?;
    }
    let mut idle_rounds = 0;
    let mut truncated = false;
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = rt.scheduler().now();
        let r = rt.report().await;
        progress(now, r.actors.iter().map(|a| a.rx_frames).sum());
        let idle = now > 0 && r.actors.iter().all(|a| a.idle) && rt.scheduler().pending() == 0;
        idle_rounds = if idle { idle_rounds + 1 } else { 0 };
        if idle_rounds >= 3 {
            break;
        }
        if now >= until {
            truncated = true;
            break;
        }
    }
    let end = rt.scheduler().now();
    let local = rt.report().await;
    let mut transport_lost: u64 = local.transport.iter().map(|t| t.seq.lost).sum();
    let mut switches = Vec::new();
    let mut last_reports: BTreeMap<u32, Box<ProcessReport>> = BTreeMap::new();
    for (&p, (conn, tx, rx)) in conns.iter_mut() {
        let lost = |source| LiveError::NodeLost { process: p, what: "finishing", source, logs: String::new() };
        control::send(tx, &ToNode::ReportNow).await.map_err(lost)?;
        control::send(tx, &ToNode::Finish).await.map_err(lost)?;
        loop {
            match control::recv::<ToOrchestrator>(rx).await {
                Ok(ToOrchestrator::Finished(json)) => {
                    let r: Vec<emu_node::results::SwitchResult> =
                        serde_json::from_str(&json).map_err(|source| LiveError::BadResults { process: p, source })?;
                    switches.extend(r);
                    conn.close(0u32.into(), b"done");
                    break;
                }
                Ok(ToOrchestrator::Failed(e)) => return Err(LiveError::Node(p, e)),
                Ok(ToOrchestrator::Report(r)) => {
                    last_reports.insert(p, r);
                }
                Ok(_) => {}
                Err(source) => {
                    return Err(LiveError::NodeLost { process: p, what: "lost before sending results", source, logs: String::new() })
                }
            }
        }
    }
    transport_lost += last_reports.values().map(|r| r.transport.iter().map(|t| t.seq.lost).sum::<u64>()).sum::<u64>();
    let order: BTreeMap<&str, usize> = f.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    switches.sort_by_key(|s| order.get(s.name.as_str()).copied().unwrap_or(usize::MAX));
    let hosts = rt.shutdown().await;
    for mut c in children {
        let _ = tokio::time::timeout(Duration::from_secs(3), c.wait()).await;
        let _ = c.start_kill();
    }
    ep.close(0u32.into(), b"done");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(DistributedRun { hosts, switches, truncated, end, transport_lost })
}
