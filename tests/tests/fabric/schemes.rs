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
    // ConWeave reorders in the destination ToR: the Go-Back-N receivers see
    // nothing out of order and send no NAK.
    let ooo = |s: &Summary| s.flows.iter().map(|f| f.out_of_order).sum::<u64>();
    let naks = |s: &Summary| s.flows.iter().map(|f| f.naks).sum::<u64>();
    assert!(counter(&cw, "conweave_held_packets") > 0, "the reroutes overtook their TAILs");
    assert_eq!(ooo(&cw), 0);
    assert_eq!(naks(&cw), 0);
    // DRILL sprays packets: reordering reaches the hosts and Go-Back-N pays.
    assert!(ooo(&drill) > 0 && naks(&drill) > 0, "DRILL: {} out of order, {} NAKs", ooo(&drill), naks(&drill));
    let avg = |s: &Summary| s.flows.iter().map(|f| f.fct.unwrap() as f64).sum::<f64>() / s.flows.len() as f64;
    assert!(avg(&cw) < avg(&ecmp), "ConWeave avg FCT {} vs ECMP {}", avg(&cw), avg(&ecmp));
}
