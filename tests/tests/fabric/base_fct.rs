//! The analytical base FCT equals a single-flow simulation on every shipped
//! topology (same serializer, store-and-forward, propagation, headers).

use crate::run;
use emu_node::traffic::Pattern;
use emu_orchestrator::experiment::RunOptions;
use emu_orchestrator::topology::SHIPPED;

#[test]
fn base_fct_matches_a_single_flow_simulation_on_each_shipped_topology() {
    for (name, text) in SHIPPED {
        let hosts = emu_orchestrator::topology::Topology::parse(name, text).unwrap().fabric.hosts().len();
        for (dst, size) in [(hosts - 1, 1_000_000), (1, 64_000), (hosts / 2, 1_000)] {
            let opts = RunOptions { traffic: Pattern::Pair(0, dst), flow_size: size, seed: 1, ..RunOptions::default() };
            let s = run(text, &opts).summary;
            let f = &s.flows[0];
            let (fct, base) = (f.fct.unwrap(), f.base_fct.unwrap());
            if *name == "explicit-example" && dst == 2 {
                // Asymmetric: ECMP hashes this flow onto the half-rate path;
                // the base FCT is the ideal (full-rate) path's.
                assert!(fct > base * 19 / 10, "{name}: {fct} vs {base}");
                continue;
            }
            assert_eq!(fct, base, "{name}: h0 -> h{dst}, {size} B: simulated {fct} ns, analytic {base} ns");
            assert_eq!(f.slowdown, Some(1.0));
        }
    }
}
