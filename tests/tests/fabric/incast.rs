//! 8-to-1 incast at line rate: PFC makes it lossless and pauses the senders.

use crate::{leaf_spine, run};
use emu_node::traffic::Pattern;
use emu_orchestrator::experiment::RunOptions;

/// 8 of 9 hosts on one leaf (10 Gbit/s, 1 MB buffer) send 500 KB to the ninth.
fn incast(pfc: bool) -> emu_node::results::Summary {
    incast_with(pfc, &[])
}

fn incast_with(pfc: bool, sets: &[(&str, &str)]) -> emu_node::results::Summary {
    let transport_params = sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let opts =
        RunOptions { traffic: Pattern::Incast(8), flow_size: 500_000, pfc: Some(pfc), seed: 3, transport_params, ..RunOptions::default() };
    run(&leaf_spine(1, 1, 9, r#"{ rate = "10Gbps", delay = "1us" }"#, "[switches]\nbuffer = \"1MB\"\n"), &opts).summary
}

/// The ConWeave authors' switch MMU (`--set tm.buffer=ns3`) reaches the
/// switches and keeps the incast lossless within its pool.
#[test]
fn incast_with_the_ns3_buffer_model_is_lossless_within_its_pool() {
    let tofino = incast(true);
    let s = incast_with(true, &[("tm.buffer", "ns3")]);
    for f in &s.flows {
        assert_eq!(f.bytes_delivered, 500_000, "flow {} lost data with PFC on", f.id);
    }
    let leaf = &s.switches[0];
    assert_eq!(leaf.counters.drop_tm, 0);
    let pauses = |s: &emu_node::results::Summary| s.switches[0].ports.iter().map(|p| p.counters.pfc_pause_sent).sum::<u64>();
    // The rules themselves are unit-tested in tofino::tm; here: they are the ones in force.
    assert!(pauses(&s) >= 8 && pauses(&s) != pauses(&tofino), "pauses: {} (tofino model {})", pauses(&s), pauses(&tofino));
    assert_eq!(s.hosts.iter().filter(|h| h.counters.pfc_received > 0).count(), 8);
    // Its threshold leaves 1/16 of the pool minus the headroom of 10 ports
    // (2 x 10 Gbit/s x 1 us + 2 x 1048 B each) and 10 x 8 x 1048 B.
    let pool = 1_000_000.0 - 10.0 * (2.0 * 1250.0 + 2096.0) - 10.0 * 8.0 * 1048.0;
    assert!((leaf.max_buffer_bytes as f64) < pool, "peak buffer {} B", leaf.max_buffer_bytes);
    let last = s.flows.iter().filter_map(|f| f.last_arrival).max().unwrap();
    let ideal = 8 * 500_000 * 8 / 10;
    assert!(last >= ideal && (last as f64) < ideal as f64 * 1.1, "incast finished at {last} ns, ideal {ideal} ns");
}

/// `--set tm.held_pfc=outside`, `--set tm.buffer_bytes=` and `--set
/// tm.pfc_pause=` reach every switch (the rules themselves are unit-tested
/// in tofino::tm and the switch tests); the default keeps held packets
/// counted, the topology's buffer and 977-quanta pauses.
#[test]
fn the_held_packet_accounting_and_buffer_size_options_reach_every_switch() {
    use emu_node::fabric::NodeKind;
    let topo = emu_orchestrator::config::topology::Topology::parse("t.toml", &leaf_spine(2, 2, 2, r#"{ rate = "10Gbps" }"#, ""))
        .expect("topology");
    let switches = |sets: &[(&str, &str)]| -> Vec<emu_node::fabric::SwitchSpec> {
        let transport_params = sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let f = emu_orchestrator::experiment::configured_fabric(&topo, &RunOptions { transport_params, ..RunOptions::default() });
        f.nodes.iter().filter_map(|n| if let NodeKind::Switch(s) = &n.kind { Some(s.clone()) } else { None }).collect()
    };
    let held = |sets: &[(&str, &str)]| -> Vec<bool> { switches(sets).iter().map(|s| s.held_outside_pfc).collect() };
    let buffers = |sets: &[(&str, &str)]| -> Vec<Option<u64>> { switches(sets).iter().map(|s| s.buffer_bytes).collect() };
    assert_eq!(held(&[]), vec![false; 4]);
    assert_eq!(held(&[("tm.held_pfc", "outside")]), vec![true; 4]);
    assert_eq!(held(&[("tm.buffer", "ns3"), ("tm.held_pfc", "outside")]), vec![true; 4]);
    assert_eq!(buffers(&[]), vec![None; 4]);
    assert_eq!(buffers(&[("tm.buffer_bytes", "9437184")]), vec![Some(9_437_184); 4]);
    let pauses = |sets: &[(&str, &str)]| -> Vec<Option<u64>> { switches(sets).iter().map(|s| s.pfc_pause_ns).collect() };
    assert_eq!(pauses(&[]), vec![None; 4]);
    assert_eq!(pauses(&[("tm.pfc_pause", "5us")]), vec![Some(5_000); 4]);
}

#[test]
fn incast_with_pfc_drops_nothing_and_pauses_upstream() {
    let s = incast(true);
    assert_eq!(s.flows.len(), 8);
    for f in &s.flows {
        assert_eq!(f.bytes_delivered, 500_000, "flow {} lost data with PFC on", f.id);
        assert_eq!(f.drops, 0);
    }
    let leaf = &s.switches[0];
    assert_eq!(leaf.counters.drop_tm, 0);
    let pauses: u64 = leaf.ports.iter().map(|p| p.counters.pfc_pause_sent).sum();
    let resumes: u64 = leaf.ports.iter().map(|p| p.counters.pfc_resume_sent).sum();
    assert!(pauses >= 8, "every sender's port is paused at least once: {pauses}");
    assert!(resumes >= 8, "and resumed: {resumes}");
    // The pause frames really arrive at the senders (upstream).
    let paused_hosts = s.hosts.iter().filter(|h| h.counters.pfc_received > 0).count();
    assert_eq!(paused_hosts, 8);
    // The receiver's link is the bottleneck: the incast takes ~ 8 x 500 KB at 10 Gbit/s.
    let last = s.flows.iter().filter_map(|f| f.last_arrival).max().unwrap();
    let ideal = 8 * 500_000 * 8 / 10; // ns
    assert!(last >= ideal && (last as f64) < ideal as f64 * 1.1, "incast finished at {last} ns, ideal {ideal} ns");
}

#[test]
fn incast_without_pfc_tail_drops() {
    let s = incast(false);
    let lost: u64 = s.flows.iter().map(|f| f.drops).sum();
    let leaf = &s.switches[0];
    assert!(lost > 0, "a 4 MB burst into a 1 MB buffer must drop");
    assert_eq!(leaf.counters.drop_tm, lost, "every lost packet is a traffic-manager drop");
    assert_eq!(leaf.ports.iter().map(|p| p.counters.pfc_pause_sent).sum::<u64>(), 0);
    assert!(s.hosts.iter().all(|h| h.counters.pfc_received == 0));
    // The queue never held more than the buffer.
    assert!(leaf.max_buffer_bytes <= 1_000_000);
}
