//! The state file of a fabric (`fabric.json` in the state directory) and
//! the teardown it makes possible.
//!
//! The state file lists every process, namespace, VM directory and remote
//! process of the fabric, so `weft down` (or the next `weft up`) removes
//! the leftovers of an orchestrator that was killed.
//!
//! Invariants: the state file is written before any process or namespace
//! is created and removed only after all of them are gone; when something
//! cannot be removed the file stays and the error names what is left, so a
//! later `weft down` retries.

use crate::cluster::{io, FabricError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// An emu-node started on another machine: what `weft down` (or the next
/// `weft up` after a killed orchestrator) needs to clean up there.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteProcess {
    /// The machine.
    pub machine: crate::config::machines::Machine,
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

fn state_file(dir: &Path) -> PathBuf {
    dir.join("fabric.json")
}

pub(crate) fn socket_file(dir: &Path) -> PathBuf {
    dir.join("control.sock")
}

/// Reads the state file, if any.
pub fn read_state(dir: &Path) -> Option<FabricState> {
    std::fs::read_to_string(state_file(dir)).ok().and_then(|s| serde_json::from_str(&s).ok())
}

pub(crate) fn write_state(dir: &Path, s: &FabricState) -> Result<(), FabricError> {
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

pub(crate) fn kill(pid: u32, sig: i32) {
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
/// it stays, [`FabricError::Leftovers`] names what is left, and a later call
/// retries. Fails if the orchestrator is still alive.
///
/// Blocking (up to seconds: Prometheus's orderly stop, ssh to other
/// machines); async code runs it with `spawn_blocking`.
pub fn remove_leftovers(dir: &Path) -> Result<Vec<String>, FabricError> {
    let Some(st) = read_state(dir) else { return Ok(vec![]) };
    if st.orchestrator != std::process::id() && alive(st.orchestrator) {
        return Err(FabricError::AlreadyUp(st.orchestrator));
    }
    let t = teardown(&st, Owner::Unknown);
    finish_teardown(dir, t.left)?;
    Ok(t.removed)
}

/// Whose processes the state's pids are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// This orchestrator started them: every pid is its child.
    This,
    /// A dead orchestrator's: a pid may have been reused since, so only
    /// processes that are recognisably the fabric's are killed.
    Unknown,
}

/// Removes the fabric of `st` (processes here and on other machines,
/// Prometheus, namespaces, VM directories), reporting what it removed and
/// what it could not. Blocking; the state file is not touched.
pub(crate) fn teardown(st: &FabricState, owner: Owner) -> Teardown {
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
fn finish_teardown(dir: &Path, left: Vec<String>) -> Result<(), FabricError> {
    let _ = std::fs::remove_file(socket_file(dir));
    if !left.is_empty() {
        return Err(FabricError::Leftovers { state: state_file(dir).display().to_string(), left });
    }
    match std::fs::remove_file(state_file(dir)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing the state file")(e)),
        _ => Ok(()),
    }
}

/// Tears down the fabric of `st` from async code (on a blocking thread)
/// and then removes or keeps its state file as [`finish_teardown`] says.
pub(crate) async fn teardown_async(dir: &Path, st: &FabricState) -> Result<(), FabricError> {
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
        st.machines.iter().map(|(&i, r)| (what(i, r), crate::cluster::ssh::spawn_cleanup(&r.machine, r.pid, &r.netns))).collect();
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
