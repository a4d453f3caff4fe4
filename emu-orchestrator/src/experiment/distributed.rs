//! A real-time run over several emu-node processes on this machine: the
//! orchestrator launches them ([`crate::cluster::launch`]), gives each its
//! part of the fabric and the synthetic hosts' flows, waits for the end of
//! the traffic and gathers every process's results into one summary.

use crate::cluster::launch::{await_running, launch, Launched, PlanBase};
use crate::cluster::state::FabricState;
use crate::cluster::{io, FabricError};
use crate::placement::auto_place;
use emu_node::control::{self, ToNode, ToOrchestrator};
use emu_node::fabric::FabricSpec;
use emu_node::ids::LinkId;
use emu_node::link::InterProcess;
use emu_node::runtime::ProcessReport;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

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
    /// How faithful the run's timing was: this process (the hosts) and
    /// every emu-node, from their last reports.
    pub faithfulness: crate::observe::faithfulness::Faithfulness,
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
) -> Result<DistributedRun, FabricError> {
    use emu_node::runtime::ProcessRuntime;
    let exe = std::env::current_exe().map_err(io("current executable"))?;
    let emu = exe.with_file_name("emu-node");
    if !emu.exists() {
        return Err(FabricError::NoEmuNode(emu.display().to_string()));
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
        metrics_tls: false,
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
        let t: Vec<crate::observe::prometheus::Target> = addrs
            .iter()
            .filter_map(|a| a.metrics.map(|m| crate::observe::prometheus::Target { addr: m, process: a.process, secure: false }))
            .collect();
        crate::observe::prometheus::write_config(sd_dir, &f.name, &t, Duration::from_secs(1), None)?;
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
    let truncated = run_until_idle(&rt, until, progress).await;
    let end = rt.scheduler().now();
    let local = rt.report().await;
    let mut transport_lost: u64 = local.transport.iter().map(|t| t.seq.lost).sum();
    let mut switches = Vec::new();
    let mut last_reports: BTreeMap<u32, Box<ProcessReport>> = BTreeMap::new();
    for (&p, (conn, tx, rx)) in conns.iter_mut() {
        let lost = |source| FabricError::NodeLost { process: p, what: "finishing", source, logs: String::new() };
        control::send(tx, &ToNode::ReportNow).await.map_err(lost)?;
        control::send(tx, &ToNode::Finish).await.map_err(lost)?;
        loop {
            match control::recv::<ToOrchestrator>(rx).await {
                Ok(ToOrchestrator::Finished(json)) => {
                    let r: Vec<emu_node::results::SwitchResult> =
                        serde_json::from_str(&json).map_err(|source| FabricError::BadResults { process: p, source })?;
                    switches.extend(r);
                    conn.close(0u32.into(), b"done");
                    break;
                }
                Ok(ToOrchestrator::Failed(e)) => return Err(FabricError::Node(p, e)),
                Ok(ToOrchestrator::Report(r)) => {
                    last_reports.insert(p, r);
                }
                Ok(_) => {}
                Err(source) => {
                    return Err(FabricError::NodeLost { process: p, what: "lost before sending results", source, logs: String::new() })
                }
            }
        }
    }
    transport_lost += last_reports.values().map(|r| r.transport.iter().map(|t| t.seq.lost).sum::<u64>()).sum::<u64>();
    let mut reports: BTreeMap<u32, ProcessReport> = last_reports.into_iter().map(|(p, r)| (p, *r)).collect();
    reports.insert(0, local);
    let faithfulness = crate::observe::faithfulness::Faithfulness::of(emu_node::runtime::smallest_link_delay(&f), &reports);
    let order: BTreeMap<&str, usize> = f.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    switches.sort_by_key(|s| order.get(s.name.as_str()).copied().unwrap_or(usize::MAX));
    let hosts = rt.shutdown().await;
    for mut c in children {
        let _ = tokio::time::timeout(Duration::from_secs(3), c.wait()).await;
        let _ = c.start_kill();
    }
    ep.close(0u32.into(), b"done");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(DistributedRun { hosts, switches, truncated, end, transport_lost, faithfulness })
}

/// Waits while the real-time fabric of `rt` runs, reporting progress every
/// 20 ms: until three reports in a row find every actor idle and no timer
/// pending (`false`), or the fabric clock reaches `until` (`true`:
/// truncated).
pub(crate) async fn run_until_idle(
    rt: &emu_node::runtime::ProcessRuntime,
    until: emu_node::time::Nanos,
    progress: &mut dyn FnMut(emu_node::time::Nanos, u64),
) -> bool {
    let mut idle_rounds = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = rt.scheduler().now();
        let r = rt.report().await;
        progress(now, r.actors.iter().map(|a| a.rx_frames).sum());
        let idle = now > 0 && r.actors.iter().all(|a| a.idle) && rt.scheduler().pending() == 0;
        idle_rounds = if idle { idle_rounds + 1 } else { 0 };
        if idle_rounds >= 3 {
            return false;
        }
        if now >= until {
            return true;
        }
    }
}
