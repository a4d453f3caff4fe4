//! The promise virtual time makes to the hosts' frame pools
//! (`weft_wire::buffer::TailPolicy::Trust`): every frame a host receives is
//! zero from `ZERO_TAIL_FROM` on, so a reused buffer's payload need not be
//! written again. Checked here for every scheme and every host transport,
//! each frame a host keeps looked at whole.

use emu_node::wire::buffer::TailPolicy;
use emu_orchestrator::config::topology::Topology;
use emu_orchestrator::experiment::{self, RunOptions, Threads, Transport, WorkloadOptions};

#[test]
fn every_frame_a_host_keeps_is_zero_beyond_its_headers_for_every_scheme_and_transport() {
    let cdf = emu_node::workload::FlowSizeCdf::named("alistorage").expect("shipped workload");
    let schemes = [
        ("ecmp", "leaf-spine-2x4"),
        ("rps", "leaf-spine-2x4"),
        ("letflow", "leaf-spine-2x4"),
        ("drill", "leaf-spine-2x4"),
        ("conga", "leaf-spine-2x4"),
        ("conweave", "leaf-spine-2x4"),
        ("int-nexthop", "leaf-spine-2x4"),
        ("p4te", "leaf-spine-2x4"),
        ("lbsp", "fat-tree-k4"),
    ];
    for (scheme, topology) in schemes {
        let topo = Topology::load(topology).expect("shipped topology");
        for transport in [Transport::Udp, Transport::Tcp, Transport::RoceLossless, Transport::RoceIrn] {
            let opts = RunOptions {
                scheme: Some(scheme.to_string()),
                transport,
                seed: 3,
                workload: Some(WorkloadOptions { cdf: cdf.clone(), load: 0.5, flows: Some(200), duration: u64::MAX }),
                ..RunOptions::default()
            };
            let mut prepared = experiment::prepare(&topo, &opts).expect("prepare");
            assert_eq!(prepared.node_config.frame_tails, TailPolicy::Trust, "virtual time trusts the tails");
            let real_time = prepared.nodes().expect("nodes");
            assert!(
                real_time.iter().filter_map(|n| n.frame_pool()).all(|p| p.policy() == TailPolicy::Write),
                "real time writes every reused buffer whole"
            );
            prepared.node_config.frame_tails = TailPolicy::Check;
            let mut engine = prepared.engine(Threads::Exactly(1)).expect("engine");
            engine.run_until(50_000_000, u64::MAX);
            assert!(engine.nodes().iter().filter_map(|n| n.frame_pool()).all(|p| p.policy() == TailPolicy::Check));
            let (checked, broken) = engine.frame_tail_checks();
            eprintln!("{scheme} {transport:?}: {checked} frames kept and checked, {broken} with bytes beyond their headers");
            assert!(checked > 1000, "{scheme} {transport:?}: the hosts kept frames ({checked})");
            assert_eq!(broken, 0, "{scheme} {transport:?}: frames with bytes beyond their headers reached a host");
        }
    }
}
