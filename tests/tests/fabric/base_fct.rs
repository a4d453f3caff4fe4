//! The analytical base FCT equals a single-flow simulation on every shipped
//! topology (same serializer, store-and-forward, propagation, headers).

use crate::run;
use emu_node::traffic::Pattern;
use emu_orchestrator::config::topology::SHIPPED;
use emu_orchestrator::experiment::RunOptions;

#[test]
fn base_fct_matches_a_single_flow_simulation_on_each_shipped_topology() {
    for (name, text) in SHIPPED {
        let hosts = emu_orchestrator::config::topology::Topology::parse(name, text).unwrap().fabric.hosts().len();
        for (dst, size) in [(hosts - 1, 1_000_000), (1, 64_000), (hosts / 2, 1_000)] {
            let slower_uplinks = name.ends_with("to1") || name.starts_with("leaf-spine-int") || name.starts_with("p4te-");
            if slower_uplinks && size == 1_000_000 {
                // Links slower than the host's with drop-tail queues (LBSP's
                // 4:1 and 8:1 cores, 250 packets; the INT paper's 8 Mbit/s
                // uplinks under 25 Mbit/s hosts, 64 packets; P4TE's 4:2
                // host:leaf-spine rates, 40 packets): 1 MB of UDP at
                // the host rate overflows the slower link's queue, so it
                // never completes; the shorter flows fit.
                continue;
            }
            // ECMP everywhere: the formula is the fabric's; LBSP's hellos
            // (the *-lbsp topologies' scheme) share the links and may
            // delay a packet by one hello frame per hop.
            let opts = RunOptions {
                traffic: Pattern::Pair(0, dst),
                flow_size: size,
                seed: 1,
                scheme: Some("ecmp".into()),
                ..RunOptions::default()
            };
            let s = run(text, &opts).summary;
            let f = &s.flows[0];
            let (Some(fct), Some(base)) = (f.fct, f.base_fct) else { panic!("{name}: h0 -> h{dst}: no FCT ({f:?})") };
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

#[test]
fn the_ns3_ideal_fct_of_a_roce_flow_is_the_authors_formula_by_hand() {
    // leaf-spine-8x8: 100G links of 1 us, 16 hosts per leaf. h0 -> h1 stays
    // under leaf0 (2 links), h0 -> h16 crosses a spine (4 links).
    let text = crate::shipped("leaf-spine-8x8");
    for (dst, links) in [(1, 2u64), (16, 4)] {
        let size = 10_500; // 11 packets: 10 of 1000 B, one of 500 B
        let opts = RunOptions {
            traffic: Pattern::Pair(0, dst),
            flow_size: size,
            transport: emu_orchestrator::experiment::Transport::RoceLossless,
            ..RunOptions::default()
        };
        let s = run(text, &opts).summary;
        let f = &s.flows[0];
        // base RTT = 2 x links x 1 us + links x (1000 B at 100G = 80 ns);
        // wire bytes = payload + 58 B per packet + a 16 B RETH on the first.
        let wire = size + 11 * 58 + 16;
        let hand = 2 * links * 1_000 + links * 80 + wire * 8 / 100;
        assert_eq!(f.ideal_fct, Some(hand), "h0 -> h{dst}");
        // The sender's FCT is the last ACK's arrival after the flow's start.
        let sender = f.sender_fct.unwrap();
        assert!(sender > f.fct.unwrap(), "the last ACK comes after the last byte arrives");
        let sd = f.slowdown_ns3.unwrap();
        assert_eq!(sd, (sender as f64 / hand as f64).max(1.0));
    }
}
