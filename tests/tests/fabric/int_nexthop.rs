//! INT best-nexthop end to end (paper §III, §IV): a 2-leaf 4-spine fabric
//! at the paper's leaf-spine rates (25 Mbit/s hosts, 8 Mbit/s uplinks)
//! whose leaf0–spine0 link runs at a quarter; TCP flows both ways. The
//! telemetry a sink leaf collects describes the direction towards it and
//! steers its traffic back, so the congested link is seen from both
//! sides. int-nexthop moves new flowlets off spine0, ECMP keeps hashing
//! a quarter of the flows onto it.

use crate::{leaf_spine, run};
use emu_node::results::Summary;
use emu_orchestrator::experiment::{RunOptions, Transport};

fn congested_path(scheme: &str) -> Summary {
    let extra = "fabric_link = { rate = \"8Mbps\", delay = \"20us\" }\n\
                 [[events]]\nat = \"1ns\"\nlink = \"leaf0-spine0\"\naction = \"degrade\"\nrate = \"2Mbps\"\n";
    let text = leaf_spine(2, 4, 4, r#"{ rate = "25Mbps", delay = "20us" }"#, extra);
    // 120 flows of 30 kB, alternately leaf0 -> leaf1 and back, one every
    // 10 ms: about 12 Mbit/s each way against 26 Mbit/s of uplinks.
    let mut list = String::from("120\n");
    for i in 0..120 {
        let (a, b) = (i % 4, 4 + (i / 2 + 1) % 4);
        let (src, dst) = if i % 2 == 0 { (a, b) } else { (b, a) };
        list += &format!("{src} {dst} 0 30000 {}\n", i as f64 * 0.01);
    }
    let opts = RunOptions {
        transport: Transport::Tcp,
        scheme: Some(scheme.into()),
        seed: 3,
        flow_list: Some(("congested-path.txt".into(), list)),
        until: 10_000_000_000,
        ..RunOptions::default()
    };
    run(&text, &opts).summary
}

fn uplink_bytes(s: &Summary, leaf: &str, spine: &str) -> u64 {
    let l = s.switches.iter().find(|w| w.name == leaf).expect("leaf");
    l.ports.iter().find(|p| p.peer == spine).expect("uplink").counters.tx_bytes
}

/// Share of `leaf`'s uplink bytes that went to spine0.
fn spine0_share(s: &Summary, leaf: &str) -> f64 {
    let all: u64 = (0..4).map(|i| uplink_bytes(s, leaf, &format!("spine{i}"))).sum();
    uplink_bytes(s, leaf, "spine0") as f64 / all as f64
}

fn counter(s: &Summary, name: &str) -> u64 {
    s.switches.iter().filter_map(|w| w.scheme_counters.get(name)).sum()
}

#[test]
fn int_nexthop_moves_new_flowlets_off_a_congested_path_and_ecmp_does_not() {
    let ecmp = congested_path("ecmp");
    let int = congested_path("int-nexthop");
    for s in [&ecmp, &int] {
        assert!(s.flows.iter().all(|f| f.fct.is_some()), "{}: every flow completes", s.scheme);
    }
    let (e0, e1) = (spine0_share(&ecmp, "leaf0"), spine0_share(&ecmp, "leaf1"));
    let (i0, i1) = (spine0_share(&int, "leaf0"), spine0_share(&int, "leaf1"));
    eprintln!("spine0 share of uplink bytes: ecmp leaf0 {e0:.3} leaf1 {e1:.3}; int-nexthop leaf0 {i0:.3} leaf1 {i1:.3}");
    assert!(counter(&int, "int_best_choices") > 0);
    assert!(counter(&int, "int_probes_received") > 0);
    assert_eq!(counter(&int, "int_host_shim_drops"), 0);
    // Every frame the hosts got was stripped at its leaf (or an ARP reply),
    // and none was refused: the hosts never see the shim.
    let host_rx: u64 = int.hosts.iter().map(|h| h.counters.rx_frames).sum();
    let refused: u64 = int.hosts.iter().map(|h| h.counters.rx_ignored + h.counters.rx_malformed).sum();
    let arp: u64 = int.switches.iter().map(|w| w.counters.arp_replies).sum();
    assert_eq!((host_rx, refused), (counter(&int, "int_stripped") + arp, 0));
    assert!(counter(&int, "int_inserted") >= counter(&int, "int_stripped"));
    let leaf_paths: Vec<_> = int.switches.iter().filter(|w| !w.int_paths.is_empty()).map(|w| w.name.as_str()).collect();
    assert_eq!(leaf_paths, ["leaf0", "leaf1"], "the sinks' collectors hold paths");
    assert!(e0 > 0.1 && e1 > 0.1, "ECMP hashes flows onto spine0 regardless");
    assert!(i0 < e0 / 2.0 && i1 < e1 / 2.0, "int-nexthop keeps new flowlets off the congested path");
}
