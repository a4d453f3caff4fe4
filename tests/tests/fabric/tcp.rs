//! TCP hosts end to end: line rate alone, the receive window is honoured,
//! DCTCP keeps an incast loss-free where NewReno drops.

use crate::{leaf_spine, run, shipped};
use emu_node::traffic::Pattern;
use emu_orchestrator::experiment::{RunOptions, Transport};

fn opts(cc: &str, traffic: Pattern, size: u64) -> RunOptions {
    let mut o = RunOptions { transport: Transport::Tcp, traffic, flow_size: size, ..RunOptions::default() };
    o.transport_params.insert("tcp.cc".into(), cc.into());
    o
}

#[test]
fn one_tcp_flow_alone_is_within_10_percent_of_its_base_fct() {
    for name in ["leaf-spine-2x4", "leaf-spine-8x8"] {
        for cc in ["newreno", "dctcp"] {
            let s = run(shipped(name), &opts(cc, Pattern::Pair(0, 15), 4_000_000)).summary;
            let f = &s.flows[0];
            assert_eq!(f.bytes_delivered, 4_000_000);
            let sd = f.slowdown.unwrap();
            assert!((1.0..=1.10).contains(&sd), "{name} {cc}: slowdown {sd}");
            assert_eq!(f.retransmits, 0);
        }
    }
}

#[test]
fn the_receive_window_limits_what_is_in_flight() {
    let mut o = opts("newreno", Pattern::Pair(0, 15), 2_000_000);
    o.transport_params.insert("tcp.rcv_buffer".into(), "16KiB".into());
    let s = run(shipped("leaf-spine-2x4"), &o).summary;
    let f = &s.flows[0];
    assert!(f.max_in_flight <= 16 * 1024, "{} B in flight", f.max_in_flight);
    assert!(f.slowdown.unwrap() > 1.5, "window-limited: {}", f.slowdown.unwrap());
}

#[test]
fn dctcp_keeps_an_incast_lossless_where_newreno_drops() {
    let topo = leaf_spine(
        1,
        1,
        9,
        r#"{ rate = "10Gbps", delay = "1us" }"#,
        "[switches]
buffer = \"400KB\"
ecn = { kmin = \"30KB\", kmax = \"31KB\", pmax = 1.0 }
",
    );
    let reno = run(&topo, &opts("newreno", Pattern::Incast(8), 1_000_000)).summary;
    let dctcp = run(&topo, &opts("dctcp", Pattern::Incast(8), 1_000_000)).summary;
    let lost = |s: &emu_node::results::Summary| s.switches.iter().map(|w| w.counters.drop_tm).sum::<u64>();
    assert!(lost(&reno) > 0, "NewReno fills the buffer");
    assert_eq!(lost(&dctcp), 0, "DCTCP reacts to ECN before the buffer fills");
    assert!(dctcp.flows.iter().all(|f| f.ecn_marks > 0 && f.fct.is_some()));
    assert!(reno.flows.iter().all(|f| f.fct.is_some()), "NewReno recovers its losses");
}

#[test]
fn an_arp_reply_slower_than_the_retry_does_not_stall_a_host_with_a_later_flow() {
    // 50 µs links: the gateway's ARP reply takes longer than the 100 µs
    // retry. h126 first receives (its ACKs ask ARP), and its own flow only
    // starts later: the due retry once woke it in the past forever.
    let flows = "2\n113 126 3 32000 0.005032780\n126 32 3 32000 0.005514379\n";
    let mut o = opts("newreno", Pattern::Permutation, 0);
    o.scheme = Some("ecmp".into());
    o.until = 50_000_000;
    o.flow_list = Some(("two.txt".into(), flows.into()));
    let s = run(shipped("fat-tree-k8-lbsp"), &o).summary;
    assert!(s.flows.iter().all(|f| f.bytes_delivered == 32_000), "both flows delivered");
    assert!(s.simulated_ns < 10_000_000, "ended when the flows did: {} ns", s.simulated_ns);
}
