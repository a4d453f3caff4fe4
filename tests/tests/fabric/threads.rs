//! A fabric on several threads gives the results of one thread
//! (`--threads N`): `summary.json` and `flows.csv` are
//! byte-identical for N = 1, 2, 3 on leaf-spine-8x8 and fat-tree-k8, each
//! with RoCE (lossless with PFC, IRN), TCP and UDP hosts, with a link
//! that goes down and up between partitions during the run, and with
//! switches restarting.

use crate::{link_down, shipped};
use emu_orchestrator::config::topology::Topology;
use emu_orchestrator::experiment::{self, RunOptions, Threads, Transport, WorkloadOptions};

/// Runs `opts` on `topology` on `threads` threads; returns the outputs and
/// the threads the engine used.
fn outputs(topology: &str, opts: &RunOptions, threads: usize) -> (String, String, usize) {
    let topo = Topology::parse("test.toml", topology).expect("topology");
    let opts = RunOptions { threads: Threads::Exactly(threads), ..opts.clone() };
    let o = experiment::run(&topo, &opts, &mut |_, _| {}).expect("run");
    crate::check_invariants(&opts, &o);
    (o.summary.to_json(), o.summary.flows_csv(), o.threads)
}

/// Checks the outputs are the same on 1, 2 and 3 threads; returns
/// `summary.json`.
fn same_for_1_2_3_threads(name: &str, topology: &str, scheme: &str, transport: Transport, flows: usize) -> String {
    let cdf = emu_node::workload::FlowSizeCdf::named("alistorage").expect("shipped workload");
    let opts = RunOptions {
        scheme: Some(scheme.into()),
        transport,
        seed: 11,
        workload: Some(WorkloadOptions { cdf, load: 0.6, flows: Some(flows), duration: u64::MAX }),
        ..RunOptions::default()
    };
    let (summary, csv, used) = outputs(topology, &opts, 1);
    assert_eq!(used, 1);
    let completed = csv.lines().skip(1).filter(|l| l.split(',').nth(6).is_some_and(|fct| !fct.is_empty())).count();
    assert!(completed > flows / 2, "{name}: {completed} of {flows} flows complete");
    for threads in [2, 3] {
        let (s, c, used) = outputs(topology, &opts, threads);
        assert_eq!(used, threads, "{name}: the engine used {used} threads, not {threads}");
        assert!(s == summary, "{name}: summary.json on {threads} threads differs from 1 thread");
        assert!(c == csv, "{name}: flows.csv on {threads} threads differs from 1 thread");
    }
    summary
}

#[test]
fn leaf_spine_8x8_roce_lossless_conweave() {
    same_for_1_2_3_threads("leaf-spine-8x8 RoCE", shipped("leaf-spine-8x8"), "conweave", Transport::RoceLossless, 800);
}

#[test]
fn leaf_spine_8x8_tcp_letflow_with_a_link_down_and_up() {
    let topo = format!("{}\n{}", shipped("leaf-spine-8x8"), link_down("leaf0-spine3", "100us", Some("400us")));
    same_for_1_2_3_threads("leaf-spine-8x8 TCP", &topo, "letflow", Transport::Tcp, 600);
}

/// A spine restart (its links down for 100 µs across partitions, its
/// state lost) and a leaf restart in no time, from a topology file's
/// `[[events]]`.
#[test]
fn leaf_spine_8x8_roce_irn_conweave_with_switches_restarting() {
    let events = "[[events]]\nat = \"200us\"\nnode = \"spine3\"\naction = \"restart\"\nboot = \"100us\"\n\
                  [[events]]\nat = \"500us\"\nnode = \"leaf2\"\naction = \"restart\"\n";
    let topo = format!("{}\n{events}", shipped("leaf-spine-8x8"));
    let summary = same_for_1_2_3_threads("leaf-spine-8x8 RoCE IRN, restarts", &topo, "conweave", Transport::RoceIrn, 600);
    assert!(summary.contains("\"node_restarts\": 2"), "both switches restarted");
}

#[test]
fn leaf_spine_8x8_udp_conga() {
    same_for_1_2_3_threads("leaf-spine-8x8 UDP", shipped("leaf-spine-8x8"), "conga", Transport::Udp, 800);
}

#[test]
fn fat_tree_k8_udp_ecmp_and_roce_irn_drill() {
    same_for_1_2_3_threads("fat-tree-k8 UDP", shipped("fat-tree-k8"), "ecmp", Transport::Udp, 800);
    same_for_1_2_3_threads("fat-tree-k8 RoCE IRN", shipped("fat-tree-k8"), "drill", Transport::RoceIrn, 800);
}

#[test]
fn fat_tree_k8_tcp_ecmp() {
    same_for_1_2_3_threads("fat-tree-k8 TCP", shipped("fat-tree-k8"), "ecmp", Transport::Tcp, 600);
}

#[test]
fn a_fabric_without_cuttable_links_runs_on_one_thread() {
    // Two hosts on one switch: one unit, so one partition whatever is asked.
    let topo = "[[switch]]\nname = \"s\"\nrole = \"leaf\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n\
                [[link]]\na = \"a\"\nb = \"s\"\nrate = \"10Gbps\"\ndelay = \"1us\"\n\
                [[link]]\na = \"b\"\nb = \"s\"\nrate = \"10Gbps\"\ndelay = \"1us\"\n";
    let topo = Topology::parse("one.toml", topo).expect("topology");
    let opts = RunOptions { flow_size: 50_000, threads: Threads::Exactly(4), ..RunOptions::default() };
    let o = experiment::run(&topo, &opts, &mut |_, _| {}).expect("run");
    assert_eq!(o.threads, 1);
    assert!(o.summary.flows.iter().all(|f| f.bytes_delivered == 50_000), "both flows delivered");
}
