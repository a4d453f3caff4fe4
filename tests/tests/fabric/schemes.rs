//! Load-balancing schemes end to end (ConWeave §4, Fig. 6/9): one congested
//! spine in a 2-leaf 4-spine fabric; ConWeave moves flows away from it and
//! hides the reordering, DRILL spreads packets and the receivers see it.

use crate::{leaf_spine, run};
use emu_node::results::Summary;
use emu_orchestrator::experiment::{RunOptions, Transport};

/// 8 flows of 2 MB from leaf0's 4 hosts to leaf1's 4 hosts over 4 spines;
/// the leaf0-spine0 link runs at 25 Gbit/s (a quarter) from the start.
/// Switches mark ECN as in the ConWeave setup (DCQCN).
fn congested_spine(scheme: &str, transport: Transport) -> Summary {
    let degrade = "[switches]\nbuffer = \"9MB\"\necn = { kmin = \"100KB\", kmax = \"400KB\", pmax = 0.2 }\n\
                   [[events]]\nat = \"1ns\"\nlink = \"leaf0-spine0\"\naction = \"degrade\"\nrate = \"25Gbps\"\n";
    let text = leaf_spine(2, 4, 4, r#"{ rate = "100Gbps", delay = "1us" }"#, degrade);
    let mut list = String::from("8\n");
    for i in 0..8 {
        list += &format!("{} {} 0 2000000 {}\n", i % 4, 4 + (i + 1) % 4, i as f64 * 2e-6);
    }
    let opts = RunOptions {
        transport,
        scheme: Some(scheme.into()),
        seed: 5,
        flow_list: Some(("congested.txt".into(), list)),
        ..RunOptions::default()
    };
    run(&text, &opts).summary
}

fn uplink_bytes(s: &Summary, spine: &str) -> u64 {
    let leaf0 = s.switches.iter().find(|w| w.name == "leaf0").unwrap();
    leaf0.ports.iter().find(|p| p.peer == spine).unwrap().counters.tx_bytes
}

fn counter(s: &Summary, name: &str) -> u64 {
    s.switches.iter().filter_map(|w| w.scheme_counters.get(name)).sum()
}

#[test]
fn conweave_moves_flows_off_a_congested_spine_without_reordering_at_the_hosts() {
    let ecmp = congested_spine("ecmp", Transport::RoceLossless);
    let cw = congested_spine("conweave", Transport::RoceLossless);
    let drill = congested_spine("drill", Transport::RoceLossless);
    for s in [&ecmp, &cw, &drill] {
        assert!(s.flows.iter().all(|f| f.fct.is_some()), "{}: every flow completes", s.scheme);
    }
    // Flows move away from spine0.
    assert!(counter(&cw, "conweave_reroutes") > 0);
    let share = |s: &Summary| {
        uplink_bytes(s, "spine0") as f64 / ["spine0", "spine1", "spine2", "spine3"].iter().map(|p| uplink_bytes(s, p)).sum::<u64>() as f64
    };
    assert!(share(&cw) < share(&ecmp), "spine0 carries {:.3} of the bytes with ConWeave, {:.3} with ECMP", share(&cw), share(&ecmp));
    let ooo = |s: &Summary| s.flows.iter().map(|f| f.out_of_order).sum::<u64>();
    let naks = |s: &Summary| s.flows.iter().map(|f| f.naks).sum::<u64>();
    assert!(counter(&cw, "conweave_held_packets") > 0, "the reroutes overtook their TAILs");
    // ConWeave reorders in the destination ToR: the Go-Back-N receivers see
    // nothing out of order and send no NAK, unless a reorder queue was
    // released by T_resume before its TAIL came (Appendix A: rare).
    if counter(&cw, "conweave_resume_expiries") == 0 {
        assert_eq!((ooo(&cw), naks(&cw)), (0, 0));
    }
    assert!(ooo(&cw) * 10 < ooo(&drill), "ConWeave {} vs DRILL {} packets out of order", ooo(&cw), ooo(&drill));
    // DRILL sprays packets: reordering reaches the hosts and Go-Back-N pays.
    assert!(ooo(&drill) > 0 && naks(&drill) > 0, "DRILL: {} out of order, {} NAKs", ooo(&drill), naks(&drill));
    let avg = |s: &Summary| s.flows.iter().map(|f| f.fct.unwrap() as f64).sum::<f64>() / s.flows.len() as f64;
    assert!(avg(&cw) < avg(&ecmp), "ConWeave avg FCT {} vs ECMP {}", avg(&cw), avg(&ecmp));
}

/// CONGA paper Fig. 2: leaf0 sends 100 Gbit/s of short flows to leaf1 over
/// two 100 Gbit/s spines; the (spine1, leaf1) link runs at 50 Gbit/s, so the
/// paths carry 100 and 50: a capacity-proportional split sends 1/3 via spine1.
/// RoCE (IRN) flows: their ACKs carry CONGA's feedback back to leaf0.
/// Returns the share of leaf0's uplink bytes that went to spine1.
fn asymmetric_split(scheme: &str, params: &[(&str, &str)]) -> f64 {
    let degrade = "[switches]\nbuffer = \"9MB\"\necn = { kmin = \"100KB\", kmax = \"400KB\", pmax = 0.2 }\n[[events]]\nat = \"1ns\"\nlink = \"leaf1-spine1\"\naction = \"degrade\"\nrate = \"50Gbps\"\n";
    let links = "{ rate = \"25Gbps\", delay = \"1us\" }\nfabric_link = { rate = \"100Gbps\", delay = \"1us\" }";
    let text = leaf_spine(2, 2, 6, links, degrade);
    // 3000 flows of 50 KB, Poisson arrivals at 100 Gbit/s in total.
    let (n, size) = (3000, 50_000u64);
    let mean_gap = size as f64 * 8.0 / 100e9;
    let mut state = 12345u64;
    let mut uniform = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut t = 0.0;
    let mut list = format!("{n}\n");
    for i in 0..n {
        t += -mean_gap * uniform().ln();
        list += &format!("{} {} 0 {size} {t:.9}\n", i % 6, 6 + (i * 5 + i / 6) % 6);
    }
    let opts = RunOptions {
        scheme: Some(scheme.into()),
        transport: Transport::RoceIrn,
        seed: 9,
        flow_list: Some(("fig2.txt".into(), list)),
        scheme_params: [(scheme.to_string(), params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())].into(),
        ..RunOptions::default()
    };
    let s = run(&text, &opts).summary;
    uplink_bytes(&s, "spine1") as f64 / (uplink_bytes(&s, "spine0") + uplink_bytes(&s, "spine1")) as f64
}

#[test]
fn conga_splits_traffic_in_proportion_to_capacity_where_local_schemes_do_not() {
    let conga = asymmetric_split("conga", &[]);
    let local = asymmetric_split("conga", &[("use_remote", "false")]);
    let ecmp = asymmetric_split("ecmp", &[]);
    // Capacity-proportional: spine1's path has 50 of 150 Gbit/s.
    assert!((conga - 1.0 / 3.0).abs() < 0.07, "CONGA sends {conga:.3} via spine1, want ~0.333");
    // Blind to the remote bottleneck, these split evenly (ECMP's share also
    // counts the retransmissions of what the 50 Gbit/s link dropped).
    for (name, share) in [("local-only", local), ("ECMP", ecmp)] {
        assert!(share > 0.45, "{name} sends {share:.3} via spine1: at least half was expected");
    }
}
