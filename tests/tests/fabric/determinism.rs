//! Same seed ⇒ byte-identical summary; another seed ⇒ different choices.

use crate::{run, shipped};
use emu_node::traffic::Pattern;
use emu_orchestrator::experiment::RunOptions;

#[test]
fn same_seed_gives_byte_identical_summaries() {
    let opts = RunOptions { traffic: Pattern::AllToAll, flow_size: 20_000, seed: 42, ..RunOptions::default() };
    let a = run(shipped("leaf-spine-2x4"), &opts).summary.to_json();
    let b = run(shipped("leaf-spine-2x4"), &opts).summary.to_json();
    assert_eq!(a, b);
    let c = run(shipped("leaf-spine-2x4"), &RunOptions { seed: 43, ..opts }).summary.to_json();
    assert_ne!(a, c, "the seed changes hashing and marking");
}

#[test]
fn every_host_resolves_its_gateway_with_arp() {
    let opts = RunOptions { traffic: Pattern::Permutation, flow_size: 10_000, ..RunOptions::default() };
    let s = run(shipped("fat-tree-k4"), &opts).summary;
    let replies: u64 = s.switches.iter().map(|w| w.counters.arp_replies).sum();
    assert_eq!(replies, 16);
    assert!(s.flows.iter().all(|f| f.bytes_delivered == 10_000));
    // 3-tier paths: 5 switch hops between pods, 3 within a pod, 1 under one edge.
    assert!(s.totals.packet_hops > 0);
}

#[test]
fn uplink_imbalance_of_one_flow_on_four_uplinks_is_four() {
    // ECMP pins the flow to one of leaf0's 4 uplinks: (max - min) / mean =
    // x / (x / 4) = 4 in every interval with traffic.
    let opts = RunOptions { traffic: Pattern::Pair(0, 15), flow_size: 2_000_000, ..RunOptions::default() };
    let s = run(shipped("leaf-spine-2x4"), &opts).summary;
    let im = s.uplink_imbalance.unwrap();
    assert!(im.samples >= 6, "{} samples", im.samples);
    assert_eq!((im.p50, im.p99), (4.0, 4.0));
    // A permutation of 16 flows spreads better on average.
    let opts = RunOptions { traffic: Pattern::AllToAll, flow_size: 200_000, ..RunOptions::default() };
    let im = run(shipped("leaf-spine-2x4"), &opts).summary.uplink_imbalance.unwrap();
    assert!(im.p50 < 2.0, "all-to-all median imbalance {}", im.p50);
}
