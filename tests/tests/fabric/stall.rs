//! The progress watchdog of virtual-time runs (`weft_sim::watchdog`): a
//! fabric whose flows stop moving is stopped with a report of what holds
//! it; a fabric that is only waiting for a scheduled change, or for flows
//! yet to start, is not.

use crate::{link_down, run, shipped};
use emu_node::engine::Engine;
use emu_node::fabric::{FabricSpec, NodeKind};
use emu_node::host::{RoceConfig, RoceHost, SizedFlow};
use emu_node::ids::{FlowId, PortId, QueueId};
use emu_node::node::{switch_config, HostTransport, Node, NodeConfig};
use emu_node::schemes::ecmp::Ecmp;
use emu_node::switch::Switch;
use emu_node::time::Nanos;
use emu_node::tofino::program::Declarations;
use emu_node::tofino::tm::{PfcWatchdog, PfcWatchdogAction};
use emu_node::tofino::{IngressCx, Program, ProgramError};
use emu_node::watchdog::{ProgressWatchdog, StallReport};
use emu_orchestrator::config::topology::Topology;
use emu_orchestrator::experiment::{RunOptions, StallTimeout, Transport};

/// RoCE, lossless, a 1 MB permutation on leaf-spine-2x4 (25 Gbit/s).
fn permutation(stall_timeout: StallTimeout) -> RunOptions {
    RunOptions { transport: Transport::RoceLossless, flow_size: 1_000_000, stall_timeout, ..RunOptions::default() }
}

#[test]
fn flows_black_holed_by_a_failure_stop_the_run_with_a_report() {
    // h3's link fails for good at 20 µs: its two flows (from and to h3)
    // never finish; Go-Back-N resends into the failed link forever.
    let topo = format!("{}\n{}", shipped("leaf-spine-2x4"), link_down("h3-leaf0", "20us", None));
    let out = run(&topo, &permutation(StallTimeout::Auto));
    let r = out.stalled.expect("the watchdog stopped the run");
    let last_done = out.summary.flows.iter().filter_map(|f| f.sender_fct.map(|fct| f.start + fct)).max().unwrap();
    assert!(r.since >= last_done && r.since <= last_done + 1_000_000, "stalled since {} (last completion {last_done})", r.since);
    assert!(r.at - r.since >= 10_000_000, "auto: 10x Go-Back-N's 1 ms");
    assert_eq!(r.flows_waiting, 2);
    assert_eq!(out.summary.flows.iter().filter(|f| f.fct.is_none()).count(), 2);
    assert!(out.summary.incomplete.as_deref().is_some_and(|w| w.starts_with("stalled")));
    let text = r.to_string();
    assert!(text.contains("unfinished flows: 2"), "{text}");

    // With the watchdog off, the same run goes on until --until.
    let opts = RunOptions { until: 30_000_000, ..permutation(StallTimeout::Off) };
    let out = run(&topo, &opts);
    assert!(out.stalled.is_none() && out.truncated);
    assert!(out.summary.simulated_ns > 29_000_000, "ran on to {} ns", out.summary.simulated_ns);
}

#[test]
fn a_failure_that_a_scheduled_event_repairs_is_not_a_stall() {
    // Down for 15 ms, more than the 10 ms span: the fabric waits for the
    // scheduled repair, then every flow completes.
    let topo = format!("{}\n{}", shipped("leaf-spine-2x4"), link_down("h3-leaf0", "20us", Some("15ms")));
    let out = run(&topo, &permutation(StallTimeout::Auto));
    assert!(out.stalled.is_none());
    assert!(out.summary.flows.iter().all(|f| f.fct.is_some()), "every flow completes after the repair");
    assert!(out.summary.incomplete.is_none());
}

#[test]
fn flows_that_have_not_started_are_not_a_stall() {
    // One flow at 0, one 30 ms later: nothing moves for 29 ms in between.
    let list = "2\n0 9 3 100000 0\n1 9 3 100000 0.03\n".to_string();
    let opts = RunOptions { flow_list: Some(("gap.txt".into(), list)), ..permutation(StallTimeout::After(2_000_000)) };
    let out = run(shipped("leaf-spine-2x4"), &opts);
    assert!(out.stalled.is_none());
    assert!(out.summary.flows.iter().all(|f| f.fct.is_some()));
}

/// ECMP, except that leaf1 pauses its queue 3 (priority 3's) towards h8 at
/// the first packet for it and never resumes it (a program bug of the kind a lost
/// ConWeave timer was).
#[derive(Debug, Clone, Default)]
struct NeverResumes(Ecmp);

impl Program for NeverResumes {
    fn name(&self) -> &'static str {
        "never-resumes"
    }
    fn declare(&mut self, d: &mut Declarations) {
        self.0.declare(d)
    }
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        self.0.ingress(cx)?;
        if let Some(port) = cx.decision.verdict.forward_port().filter(|p| p.0 == 0) {
            cx.pause_queue(port, QueueId(3));
        }
        Ok(())
    }
}

/// leaf-spine-2x4, lossless RoCE, leaf1 running [`NeverResumes`] and every
/// switch the PFC watchdog `watchdog`: eight 4 MB flows from leaf0's hosts
/// into h8, run until the progress watchdog (2 ms) fires or 20 ms pass.
fn never_resumes(watchdog: Option<PfcWatchdog>) -> (FabricSpec, Engine, Option<(Nanos, Nanos)>) {
    let mut fabric = Topology::parse("t.toml", shipped("leaf-spine-2x4")).unwrap().fabric;
    for n in &mut fabric.nodes {
        if let NodeKind::Switch(s) = &mut n.kind {
            s.pfc = true;
            s.pfc_watchdog = watchdog;
        }
    }
    let rc = RoceConfig::lossless();
    let cfg = NodeConfig { seed: 1, strict: true, transport: HostTransport::Roce(rc), ..NodeConfig::default() };
    let nodes = crate::nodes_with(&fabric, &cfg, |id, n| match n.as_host() {
        Some(_) => Some(Node::RoceHost(Box::new(RoceHost::from_spec(id, n, rc).unwrap()))),
        None if n.name == "leaf1" => {
            let sc = switch_config(&fabric, id, &cfg).unwrap();
            Some(Node::Switch(Box::new(Switch::with_program(id, n, sc, Box::new(NeverResumes::default())).unwrap())))
        }
        None => None,
    });
    let mut e = Engine::with_nodes(&fabric, nodes).unwrap();
    let h8 = fabric.node_by_name("h8").unwrap();
    let dst = fabric.nodes[h8.index()].as_host().unwrap().ip;
    for i in 0..8u32 {
        let src = fabric.node_by_name(&format!("h{i}")).unwrap();
        if let Some(Node::RoceHost(h)) = e.node_mut(src) {
            h.add_flow(SizedFlow::new(FlowId(i), dst, 4_000_000, 0, 49152, 24));
        }
        e.refresh(src);
    }
    let mut w = ProgressWatchdog::new(2_000_000, &fabric);
    let (mut t, mut stalled) = (0, None);
    while stalled.is_none() && t < 20_000_000 {
        t += w.check_every();
        e.run_until(t, u64::MAX);
        stalled = w.check(&e, t).map(|since| (since, t));
    }
    (fabric, e, stalled)
}

#[test]
fn a_queue_a_program_never_resumes_is_reported_with_the_pauses_it_causes() {
    let (fabric, e, stalled) = never_resumes(None);
    let (since, t) = stalled.expect("the watchdog fired");
    let r = StallReport::collect(&fabric, &e, t, since);
    assert_eq!(r.flows_waiting, 8);
    let held: Vec<_> = r.paused_by_program.iter().map(|q| (q.switch.as_str(), q.port.0, q.queue.0, q.peer.as_str())).collect();
    assert_eq!(held, vec![("leaf1", 0, 3, "h8")]);
    assert!(r.paused_by_program[0].bytes > 100_000, "it holds the flows' packets");
    assert!(r.fullest.iter().any(|q| q.switch == "leaf1" && q.paused_by_program), "the paused queue is among the fullest");
    assert!(r.pauses.iter().any(|p| p.switch == "leaf1" && !p.received && p.class == 3), "leaf1 asserts XOFF for priority 3");
    assert!(r.pauses.iter().any(|p| p.switch == "leaf0" && p.received), "the pause spread to leaf0's uplinks");
    let text = r.to_string();
    assert!(text.contains("leaf1 port 0 (to h8) queue 3") && text.contains("paused by the program"), "{text}");
}

/// The same with a PFC watchdog (drop after 1 ms) on every switch: the
/// spines that leaf1 pauses for good declare a storm and drop priority 3
/// towards it, so the pause stops spreading: no spine pauses leaf0. (The
/// program's queue itself is no PFC pause: its flows stay unfinished.)
#[test]
fn a_pfc_watchdog_stops_a_pause_that_never_ends_from_spreading() {
    let wd = PfcWatchdog { detect_ns: 1_000_000, restore_ns: 1_000_000, action: PfcWatchdogAction::Drop };
    let (fabric, e, stalled) = never_resumes(Some(wd));
    let (since, t) = stalled.expect("the h8 flows never finish");
    let r = StallReport::collect(&fabric, &e, t, since);
    let queue_stats = |switch: &str| -> (u64, u64) {
        let id = fabric.node_by_name(switch).unwrap();
        let Node::Switch(s) = &e.nodes()[id.index()] else { panic!("{switch} is a switch") };
        let tm = s.traffic_manager();
        let ports = fabric.nodes[id.index()].ports.len();
        (0..ports)
            .flat_map(|p| (0..tm.config().queues_per_port).map(move |q| tm.queue_stats(PortId(p as u16), QueueId(q))))
            .fold((0, 0), |(st, d), q| (st + q.pfc_watchdog_storms, d + q.pfc_watchdog_drops))
    };
    for spine in ["spine0", "spine1", "spine2", "spine3"] {
        let (storms, drops) = queue_stats(spine);
        assert!(storms >= 1 && drops > 0, "{spine}: {storms} storms, {drops} drops");
    }
    assert!(!r.pauses.iter().any(|p| p.switch == "leaf0" && p.received), "no spine pauses leaf0: {:?}", r.pauses);
    assert_eq!(r.flows_waiting, 8);
}
