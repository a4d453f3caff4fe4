//! Starting a fabric's emu-node processes: here as children, on other
//! machines over ssh, or (for Kubernetes) waiting for external ones; each
//! authenticated over the QUIC control channel (pinned fabric certificate
//! and the fabric token), given its plan and asked for its link addresses.
//!
//! Invariants: a connection that does not show the token, or comes after
//! the fabric is complete, is refused and logged; every process's plan is
//! sent only over its authenticated control channel.

use crate::cluster::state::{write_state, ClockEstimate, FabricState, RemoteProcess};
use crate::cluster::{io, FabricError};
use crate::config::identity::{fabric_tag, new_token, parse_token};
use emu_node::control::{self, ToNode, ToOrchestrator, PROTOCOL_VERSION};
use emu_node::fabric::{FabricSpec, HostKind};
use emu_node::link::auth::LinkSecret;
use emu_node::link::{quic, InterProcess};
use emu_node::runtime::{LinkAddrs, ProcessPlan};
use emu_node::tls::FabricIdentity;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Links between processes whose ends' clock offsets are together less
/// certain than the link's delay: a frame's due time, written by one end's
/// clock and read by the other's, may then be off by more than the delay.
pub(crate) fn clock_warnings(f: &FabricSpec, st: &FabricState) -> Vec<String> {
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

/// This machine's address on the route toward `peer` (a UDP socket
/// "connected" to it sends nothing but learns the source address).
fn local_addr_toward(peer: std::net::IpAddr) -> Option<std::net::IpAddr> {
    let any: std::net::IpAddr =
        if peer.is_ipv6() { std::net::Ipv6Addr::UNSPECIFIED.into() } else { std::net::Ipv4Addr::UNSPECIFIED.into() };
    let s = std::net::UdpSocket::bind((any, 0)).ok()?;
    s.connect((peer, 9)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// Refuses an emu-node that connects once the fabric is complete, and
/// logs why (with what the client sent: a replayed or garbled message, a
/// wrong token, nothing at all).
pub(crate) async fn refuse_latecomer(inc: quinn::Incoming, token: String, events: Arc<std::sync::Mutex<Vec<String>>>) {
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
        ToOrchestrator::CaptureRefused(_) => "CaptureRefused",
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

/// Control connections by process index.
pub(crate) type Conns = BTreeMap<u32, (quinn::Connection, quinn::SendStream, quinn::RecvStream)>;

/// Waits until every emu-node reports that its links are connected.
pub(crate) async fn await_running(conns: &mut Conns, dir: &Path) -> Result<(), FabricError> {
    let procs = conns.keys().max().map_or(0, |m| m + 1);
    for (&p, (_, _, rx)) in conns.iter_mut() {
        match control::recv::<ToOrchestrator>(rx).await {
            Ok(ToOrchestrator::Running) => {}
            Ok(ToOrchestrator::Failed(e)) => return Err(FabricError::Node(p, e)),
            Ok(o) => return Err(FabricError::Unexpected(p, format!("{o:?}"))),
            Err(source) => return Err(FabricError::NodeLost { process: p, what: "connecting links", source, logs: tail_logs(dir, procs) }),
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
    /// Serve every process's `/metrics` over HTTPS to bearers of the fabric
    /// token (`weft up --metrics-tls`), as one on another machine or on a
    /// non-loopback address always is.
    pub metrics_tls: bool,
    /// Traffic of the synthetic hosts (`weft up --workload`).
    pub workload: Option<emu_node::node::HostWorkload>,
    /// The bounded-lag policy's bound (0: none).
    pub max_lag: emu_node::time::Nanos,
    /// TAP hosts get segmentation offload.
    pub tap_offload: bool,
    /// Process p runs on machine p over ssh (empty: all local).
    pub machines: Vec<crate::config::machines::Machine>,
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
    /// The processes whose `/metrics` is HTTPS with the fabric token.
    pub secure_metrics: std::collections::BTreeSet<u32>,
}

/// Starts one emu-node per index in `procs`, authenticates each (pinned
/// certificate, token), sends its plan and waits for its link addresses.
pub async fn launch(emu: &Path, dir: &Path, procs: &[u32], base: &PlanBase, state: &mut FabricState) -> Result<Launched, FabricError> {
    let (identity, token) = match &base.external {
        Some(x) => load_identity(&x.identity_dir)?,
        None => (FabricIdentity::generate()?, new_token()),
    };
    let fabric_tag = fabric_tag(&token);
    let launch_events = std::sync::Mutex::new(Vec::new());
    // Link datagrams are signed with a secret that travels only in the
    // plans, over the TLS control channel (docs/REALTIME.md).
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
                let mut cmd: tokio::process::Command = m.ssh_command_lasting(emu_node::link::quic::OUTAGE_GRACE).into();
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
    // A process on another machine serves /metrics on that machine's
    // address; over HTTPS with the fabric's certificate, to bearers of the
    // fabric token, as does every process with --metrics-tls or a
    // non-loopback address. One here on loopback: plain HTTP.
    let remote_bind: BTreeMap<u32, std::net::IpAddr> = state.machines.iter().map(|(p, r)| (*p, r.machine.bind)).collect();
    let remote_machine: BTreeMap<u32, crate::config::machines::Machine> =
        state.machines.iter().map(|(p, r)| (*p, r.machine.clone())).collect();
    let metrics_of = |process: u32| {
        base.metrics.map(|a| {
            let mut a = metrics_addr_of(a, process);
            if let Some(ip) = remote_bind.get(&process) {
                a.set_ip(*ip);
            }
            a
        })
    };
    // HTTPS and the token wherever /metrics is reachable from elsewhere.
    let metrics_secure =
        |process: u32| metrics_of(process).is_some_and(|a| base.metrics_tls || remote_bind.contains_key(&process) || !a.ip().is_loopback());
    let secure_metrics: std::collections::BTreeSet<u32> = procs.iter().copied().filter(|&p| metrics_secure(p)).collect();
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
        metrics: metrics_of(process),
        metrics_token: metrics_secure(process).then(|| token.clone()),
        max_lag_ns: base.max_lag,
        // Only the flows of the hosts this process runs.
        workload: base.workload.as_ref().map(|w| emu_node::node::HostWorkload {
            transport: w.transport,
            flows: w.flows.iter().filter(|f| base.fabric.nodes.get(f.0.index()).is_some_and(|n| n.placement == process)).copied().collect(),
        }),
        // A machine's VM image may live elsewhere there.
        vm: base.vm.clone().map(|mut v| {
            if let Some(m) = remote_machine.get(&process) {
                v.image = m.vm_image_path(&v.image).into();
            }
            v
        }),
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
            return Err(FabricError::ConnectTimeout(logs));
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
            Ok(ToOrchestrator::Failed(e)) => return Err(FabricError::Node(p, e)),
            Ok(o) => return Err(FabricError::Unexpected(p, format!("{o:?}"))),
            Err(source) => {
                return Err(FabricError::NodeLost { process: p, what: "binding links", source, logs: tail_logs(dir, max_proc + 1) })
            }
        }
    }
    let events = launch_events.into_inner().unwrap_or_default();
    let identity_plan = plan_for(0);
    Ok(Launched { ep, token, children, conns, addrs, identity_plan, events, secure_metrics })
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

/// Reads `cert.der`, `key.der` and `token` from `dir`.
fn load_identity(dir: &Path) -> Result<(FabricIdentity, String), FabricError> {
    let read = |name: &str| std::fs::read(dir.join(name)).map_err(io(format!("{}", dir.join(name).display())));
    let identity = FabricIdentity { cert_der: read("cert.der")?, key_der: read("key.der")? };
    let path = dir.join("token");
    let token = parse_token(&read("token")?).map_err(|why| FabricError::Token(path.display().to_string(), why))?;
    Ok((identity, token))
}

/// Estimates an emu-node's clock offset over its control stream
/// ([`emu_node::clock::estimate_offset`] of the exchanges, a burst and then
/// one a millisecond until [`emu_node::clock::probing_done`]).
async fn estimate_clock_offset(tx: &mut quinn::SendStream, rx: &mut quinn::RecvStream) -> Result<(i64, u64), FabricError> {
    let mut samples = Vec::with_capacity(emu_node::clock::CLOCK_PROBE_BURST);
    while !emu_node::clock::probing_done(&samples) {
        if samples.len() >= emu_node::clock::CLOCK_PROBE_BURST {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let sent = emu_node::clock::monotonic_ns();
        control::send(tx, &ToNode::ClockProbe { sent }).await?;
        match control::recv::<ToOrchestrator>(rx).await? {
            ToOrchestrator::ClockEcho { sent: s, remote } if s == sent => {
                samples.push(emu_node::clock::ClockSample { sent, remote, received: emu_node::clock::monotonic_ns() });
            }
            other => return Err(FabricError::Unexpected(u32::MAX, format!("{other:?} instead of a clock echo"))),
        }
    }
    emu_node::clock::estimate_offset(&samples).ok_or_else(|| FabricError::Unexpected(u32::MAX, "no clock sample".into()))
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
