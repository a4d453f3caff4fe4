//! Link events from the topology schedule: down, up, degrade.

use crate::{leaf_spine, link_down, run};

const TEN_GIG: &str = r#"{ rate = "10Gbps", delay = "1us" }"#;
use emu_node::time::BitRate;
use emu_node::traffic::Pattern;
use emu_orchestrator::experiment::RunOptions;

#[test]
fn flows_move_off_a_failed_link() {
    // Every host sends 1 Gbit/s to every other host for 2 ms (32 flows cross the spines).
    let opts =
        RunOptions { traffic: Pattern::AllToAll, rate: Some(BitRate::gbps(1)), duration: 2_000_000, seed: 11, ..RunOptions::default() };
    let topo = leaf_spine(2, 2, 4, TEN_GIG, &link_down("leaf0-spine0", "500us", None));
    let s = run(&topo, &opts).summary;
    let leaf0 = s.switches.iter().find(|w| w.name == "leaf0").unwrap();
    let to_spine0 = leaf0.ports.iter().find(|p| p.peer == "spine0").unwrap();
    let to_spine1 = leaf0.ports.iter().find(|p| p.peer == "spine1").unwrap();
    // Before the failure some flows used spine0; afterwards all use spine1, so
    // spine1 carried more than its pre-failure share.
    assert!(to_spine0.counters.tx_bytes > 0);
    assert!(
        to_spine1.counters.tx_bytes > to_spine0.counters.tx_bytes * 2,
        "spine1 {} vs spine0 {}",
        to_spine1.counters.tx_bytes,
        to_spine0.counters.tx_bytes
    );
    // Flows from leaf0's hosts lose at most what was on or queued for the link.
    let from_leaf0 = |src: &str| ["h0", "h1", "h2", "h3"].contains(&src);
    let sent: u64 = s.flows.iter().filter(|f| from_leaf0(&f.src)).map(|f| f.packets_sent).sum();
    let lost: u64 = s.flows.iter().filter(|f| from_leaf0(&f.src)).map(|f| f.drops).sum();
    assert!(lost < sent / 100, "lost {lost} of {sent}");
    // ECMP only knows local link status: flows from leaf1 hashed to spine0
    // are black-holed at spine0 (no route around a remote failure without a
    // routing protocol or a scheme such as LBSP).
    let spine0 = s.switches.iter().find(|w| w.name == "spine0").unwrap();
    let blackholed: u64 = s.flows.iter().filter(|f| !from_leaf0(&f.src)).map(|f| f.drops).sum();
    assert!(blackholed > 0);
    assert_eq!(spine0.counters.drop_program, blackholed);
}

#[test]
fn a_degraded_link_carries_its_new_rate() {
    let degrade =
        "[switches]\nbuffer = \"1MB\"\n[[events]]\nat = \"1ms\"\nlink = \"leaf0-spine0\"\naction = \"degrade\"\nrate = \"5Gbps\"\n";
    let text = leaf_spine(2, 1, 1, TEN_GIG, degrade);
    let opts =
        RunOptions { traffic: Pattern::Pair(0, 1), rate: Some(BitRate::gbps(10)), duration: 2_000_000, seed: 1, ..RunOptions::default() };
    let s = run(&text, &opts).summary;
    let leaf0 = s.switches.iter().find(|w| w.name == "leaf0").unwrap();
    let up = leaf0.ports.iter().find(|p| p.peer == "spine0").unwrap();
    // 1 ms at 10 Gbit/s, 1 ms at 5 Gbit/s, then the standing queue drains at 5 Gbit/s.
    let bytes = up.counters.tx_bytes as f64;
    let queue = up.queues.iter().map(|q| q.stats.max_depth_bytes).max().unwrap() as f64;
    let expected = (10e9 * 1e-3 + 5e9 * 1e-3) / 8.0 + queue;
    assert!((bytes - expected).abs() / expected < 0.02, "uplink sent {bytes} B, expected {expected}");
    assert!(queue > 400_000.0, "the queue fills to its dynamic threshold (half the free buffer): {queue}");
    assert!(s.flows[0].drops > 0, "a 10G flow into a 5G link overflows the buffer");
}

#[test]
fn lossless_roce_recovers_packets_lost_on_a_failed_link() {
    let text = leaf_spine(2, 2, 2, TEN_GIG, &link_down("leaf0-spine0", "200us", Some("400us")));
    let opts = RunOptions {
        traffic: Pattern::AllToAll,
        flow_size: 2_000_000,
        transport: emu_orchestrator::experiment::Transport::RoceLossless,
        ..RunOptions::default()
    };
    let s = run(&text, &opts).summary;
    assert!(s.network.drops > 0, "the failure loses packets");
    assert!(s.flows.iter().any(|f| f.retransmits > 0));
    for f in &s.flows {
        assert_eq!(f.bytes_delivered, 2_000_000, "flow {} -> {} did not recover", f.src, f.dst);
        assert!(f.fct.is_some());
    }
}

/// A `loss` event makes a link lose that share of its frames at
/// random, counted apart (`totals.link_loss_drops`), the same frames in
/// every run of a seed; `loss = "0"` ends it.
#[test]
fn a_lossy_link_loses_its_share_of_frames_the_same_in_every_run() {
    let lossy = "[[events]]\nat = \"0ms\"\nlink = \"leaf0-spine0\"\naction = \"loss\"\nloss = \"10%\"\n\
                 [[events]]\nat = \"5ms\"\nlink = \"leaf0-spine0\"\naction = \"loss\"\nloss = \"0\"\n";
    let text = leaf_spine(2, 1, 1, TEN_GIG, lossy);
    let opts =
        RunOptions { traffic: Pattern::Pair(0, 1), rate: Some(BitRate::gbps(5)), duration: 10_000_000, seed: 3, ..RunOptions::default() };
    let a = run(&text, &opts).summary;
    let b = run(&text, &opts).summary;
    let lost = a.totals.link_loss_drops;
    let sent = a.flows[0].packets_sent;
    // The first 5 of the 10 ms at 10 %: about 5 % of all frames.
    assert!(lost as f64 > 0.04 * sent as f64 && (lost as f64) < 0.06 * sent as f64, "lost {lost} of {sent}");
    assert_eq!(a.flows[0].drops, lost, "the flow lost exactly the link's losses");
    assert_eq!(b.totals.link_loss_drops, lost, "same seed, same losses");
    assert_eq!(a.totals.link_down_drops, 0);
}

/// With 1 % random loss on two fabric links (each direction), with a
/// fabric link flapping (down 1 ms, up 1 ms, for 30 ms), and with two
/// switches restarting (a spine or aggregation switch whose links stay
/// down 1 ms while it boots, then a ToR down 200 µs; each loses its
/// register state and its queued frames), every flow of a WebSearch
/// workload completes over TCP and over RoCE with IRN (the transports
/// recover; no scheme's state is wedged by lost frames, a port that comes
/// and goes, or a switch that forgot everything).
#[test]
fn every_scheme_delivers_every_flow_through_lossy_and_flapping_links_and_restarting_switches() {
    use emu_orchestrator::experiment::{Transport, WorkloadOptions};
    let cdf = emu_node::workload::FlowSizeCdf::named("websearch").expect("shipped workload");
    /// Two links that lose or flap, two switches that restart.
    type Faulty<'a> = ([&'a str; 2], [&'a str; 2]);
    let leaf_spine = (["leaf0-spine0", "leaf1-spine2"], ["spine1", "leaf0"]);
    let runs: &[(&str, &str, Faulty)] = &[
        ("ecmp", "leaf-spine-2x4", leaf_spine),
        ("rps", "leaf-spine-2x4", leaf_spine),
        ("letflow", "leaf-spine-2x4", leaf_spine),
        ("drill", "leaf-spine-2x4", leaf_spine),
        ("conga", "leaf-spine-2x4", leaf_spine),
        ("conweave", "leaf-spine-2x4", leaf_spine),
        ("int-nexthop", "leaf-spine-2x4", leaf_spine),
        ("p4te", "leaf-spine-2x4", leaf_spine),
        ("lbsp", "fat-tree-k4", (["edge0_0-agg0_0", "agg1_1-core3"], ["agg0_0", "edge1_0"])),
    ];
    for (scheme, topology, (links, switches)) in runs {
        for fault in ["loss", "flap", "restart"] {
            let mut topo = emu_orchestrator::config::topology::Topology::load(topology).expect("shipped topology");
            match fault {
                "loss" => links.iter().for_each(|l| topo.add_event(&format!("0ms,{l},loss=1%")).expect("loss event")),
                "flap" => topo.add_event(&format!("0ms,{},flap=1ms:30ms", links[0])).expect("flap event"),
                _ => {
                    topo.add_event(&format!("2ms,{},restart=1ms", switches[0])).expect("restart event");
                    topo.add_event(&format!("6ms,{},restart=200us", switches[1])).expect("restart event");
                }
            }
            for transport in [Transport::Tcp, Transport::RoceIrn] {
                let opts = RunOptions {
                    scheme: Some(scheme.to_string()),
                    transport,
                    seed: 5,
                    workload: Some(WorkloadOptions { cdf: cdf.clone(), load: 0.3, flows: Some(150), duration: u64::MAX }),
                    ..RunOptions::default()
                };
                let s = emu_orchestrator::experiment::run(&topo, &opts, &mut |_, _| {}).expect("run").summary;
                let done = s.flows.iter().filter(|f| f.fct.is_some()).count();
                let retx: u64 = s.flows.iter().map(|f| f.retransmits).sum();
                let lost: u64 = s.flows.iter().map(|f| f.drops).sum();
                let restarted: Vec<&str> = s.switches.iter().filter(|w| w.counters.restarts > 0).map(|w| w.name.as_str()).collect();
                let restart_drops: u64 = s.switches.iter().map(|w| w.counters.drop_restart).sum();
                eprintln!(
                    "{scheme} {transport:?} {fault}: {done}/150 flows, {} frames lost at random, {lost} lost in all, {retx} retransmits, restarted {restarted:?} ({} frames lost at down links, {restart_drops} in the recirculation and CPU queues)",
                    s.totals.link_loss_drops,
                    s.totals.link_down_drops
                );
                match fault {
                    "loss" => assert!(s.totals.link_loss_drops > 0, "{scheme} {transport:?}: the links lost frames"),
                    "restart" => {
                        assert_eq!(s.totals.node_restarts, 2, "{scheme} {transport:?}: both restarts happened");
                        assert!(s.totals.link_down_drops > 0, "{scheme} {transport:?}: frames were lost while the switches booted");
                        assert_eq!(restarted, {
                            let mut v = switches.to_vec();
                            v.sort_by_key(|n| s.switches.iter().position(|w| w.name == *n));
                            v
                        });
                    }
                    _ => {}
                }
                assert_eq!(done, s.flows.len(), "{scheme} {transport:?} {fault}: every flow completes");
            }
        }
    }
}
