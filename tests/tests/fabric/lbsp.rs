//! LBSP's control plane on the paper's 8-ary fat-tree (Lim 2021, §3.3,
//! §5.1), exact: which switches install which failure entries after a
//! failure of each Table 2 type, that recovery removes them, that a silent
//! neighbour is found by its missing hellos, that aggregation partners
//! change state together, and that fabrics LBSP cannot use are refused.

use emu_node::engine::Engine;
use emu_node::node::{build_nodes, Node, NodeConfig};
use emu_node::switch::{Switch, Transmit};
use emu_node::time::Nanos;
use emu_orchestrator::config::topology::Topology;
use emu_orchestrator::experiment::{self, RunOptions};

/// The paper's §4 fabric: k = 8, 4 hosts per edge, 1 Gbit/s, 50 µs links,
/// every switch running LBSP, with `events` appended.
fn paper_k8(events: &str) -> Topology {
    let text = format!(
        "[generator]\nkind = \"fat-tree\"\nk = 8\nhost_link = {{ rate = \"1Gbps\", delay = \"50us\" }}\n\
         [switches]\nscheme = \"lbsp\"\n{events}"
    );
    Topology::parse("paper-k8.toml", &text).expect("topology")
}

fn event(at: &str, link: &str, action: &str) -> String {
    format!("[[events]]\nat = \"{at}\"\nlink = \"{link}\"\naction = \"{action}\"\n")
}

fn engine(topo: &Topology) -> Engine {
    Engine::new(&topo.fabric, &NodeConfig { strict: true, ..NodeConfig::default() }).expect("engine")
}

fn switch<'e>(e: &'e Engine, topo: &Topology, name: &str) -> &'e Switch {
    let i = topo.fabric.nodes.iter().position(|n| n.name == name).unwrap_or_else(|| panic!("no node {name}"));
    match &e.nodes()[i] {
        Node::Switch(s) => s,
        _ => panic!("{name} is not a switch"),
    }
}

/// Every non-empty avoid table of every switch.
fn avoid_entries(e: &Engine, topo: &Topology) -> Entries {
    let mut v = Vec::new();
    for n in &topo.fabric.nodes {
        if n.as_switch().is_none() {
            continue;
        }
        let s = switch(e, topo, &n.name);
        for t in ["lbsp_avoid_edge", "lbsp_avoid_pod", "lbsp_avoid_all"] {
            let entries = s.table_entries(t).expect("lbsp tables");
            if !entries.is_empty() {
                v.push((n.name.clone(), t, entries));
            }
        }
    }
    v
}

/// Non-empty avoid tables: (switch, table, its entries).
type Entries = Vec<(String, &'static str, Vec<(u64, u64)>)>;

fn edge_key(pod: u64, edge: u64) -> u64 {
    (10 << 16) | (pod << 8) | edge
}

fn pod_key(pod: u64) -> u64 {
    (10 << 8) | pod
}

/// Runs to `t` and returns the avoid tables then.
fn at(e: &mut Engine, topo: &Topology, t: Nanos) -> Entries {
    e.run_until(t, u64::MAX);
    avoid_entries(e, topo)
}

#[test]
fn fig5_link_a31_c15_down_changes_the_odd_aggregation_switches_only() {
    // A31 is pod 7's aggregation switch 3, C15 the last core: in weft's
    // names agg7_3 and core15 (core 15 = 4 x 3 + 3, position 3 at agg7_3).
    let topo = paper_k8(&(event("5ms", "agg7_3-core15", "down") + &event("20ms", "agg7_3-core15", "up")));
    let mut e = engine(&topo);
    assert_eq!(at(&mut e, &topo, 4_900_000), vec![], "no entries before the failure");
    // The port-status callback after 10 µs, then the CPU's writes after
    // another 10 µs: nothing is in force 15 µs after the failure.
    assert_eq!(at(&mut e, &topo, 5_015_000), vec![]);
    let after = at(&mut e, &topo, 6_000_000);
    let mut expected = Vec::new();
    for pod in 0..7 {
        for agg in [1, 3] {
            // Type 3: pod 7's range [112 ... 127] = 10.7.0.0/16 must avoid
            // link group 1 (mask bit 1) at the odd aggregation switches.
            expected.push((format!("agg{pod}_{agg}"), "lbsp_avoid_pod", vec![(pod_key(7), 0b10)]));
        }
    }
    // A31 itself lost an uplink of group 1: no destination through it.
    expected.push(("agg7_3".to_string(), "lbsp_avoid_all", vec![(0, 0b10)]));
    let mut got = after.clone();
    got.sort();
    expected.sort();
    assert_eq!(got, expected, "exactly the switches §3.3.2 names (every pod's A1 and A3), no ToR, no core");
    // Recovery: the link is up at 20 ms, hellos resume within one interval.
    assert_eq!(at(&mut e, &topo, 19_000_000), after, "entries stay while the failure lasts");
    assert_eq!(at(&mut e, &topo, 23_000_000), vec![], "recovery restores the default");
    let found: u64 = topo
        .fabric
        .nodes
        .iter()
        .filter(|n| n.as_switch().is_some())
        .map(|n| switch(&e, &topo, &n.name).scheme_counters().iter().find(|(k, _)| *k == "lbsp_failures_detected").map_or(0, |c| c.1))
        .sum();
    assert_eq!(found, 2, "both ends of the link found it failed");
}

#[test]
fn the_topologys_control_plane_latency_delays_every_cpu_step() {
    // cpu_latency = 100 µs: the port-status callback, each CPU's handling
    // of a flooded message and its table writes each wait that long.
    let events = event("5ms", "agg7_3-core15", "down");
    let topo = Topology::parse(
        "slow-cpu.toml",
        &format!(
            "[generator]\nkind = \"fat-tree\"\nk = 8\nhost_link = {{ rate = \"1Gbps\", delay = \"50us\" }}\n\
             [switches]\nscheme = \"lbsp\"\ncpu_latency = \"100us\"\n{events}"
        ),
    )
    .expect("topology");
    let mut e = engine(&topo);
    assert_eq!(at(&mut e, &topo, 5_150_000), vec![], "the callback alone takes 100 µs, the write another 100");
    let first = at(&mut e, &topo, 5_210_000);
    assert!(first.iter().any(|(s, _, _)| s == "agg7_3"), "agg7_3's own entry after 2 x 100 µs: {first:?}");
    assert!(first.len() < 15, "the flooded messages need more CPU steps");
    assert_eq!(at(&mut e, &topo, 6_500_000).len(), 15, "all of Fig. 5's entries (14 + agg7_3's)");
}

/// The entries a failure of ToR–aggregation link `edge7_3-agg7_<agg>`
/// makes: every other ToR avoids the aggregation switch's link group for
/// T31's hosts (Table 2 type 0 or 1), T31 avoids it for every host.
fn tor_agg_expected(agg: u64) -> Entries {
    let group = 1 << (agg & 1);
    let mut v = Vec::new();
    for pod in 0..8 {
        for edge in 0..4 {
            if (pod, edge) != (7, 3) {
                v.push((format!("edge{pod}_{edge}"), "lbsp_avoid_edge", vec![(edge_key(7, 3), group)]));
            }
        }
    }
    v.push(("edge7_3".to_string(), "lbsp_avoid_all", vec![(0, group)]));
    v.sort();
    v
}

#[test]
fn tor_aggregation_failures_of_type_0_and_1_move_the_edge_range_at_every_tor() {
    for agg in [2u64, 3] {
        let link = format!("edge7_3-agg7_{agg}");
        let topo = paper_k8(&(event("2ms", &link, "down") + &event("6ms", &link, "up")));
        let mut e = engine(&topo);
        let mut got = at(&mut e, &topo, 3_000_000);
        got.sort();
        assert_eq!(got, tor_agg_expected(agg), "{link} down: type {}", agg & 1);
        assert_eq!(at(&mut e, &topo, 9_000_000), vec![], "{link} up again");
    }
}

#[test]
fn aggregation_core_failure_of_type_2_moves_the_even_aggregation_switches() {
    // agg7_2's uplinks are cores 8..11; core 8 is its position 0: type 2.
    let topo = paper_k8(&event("2ms", "agg7_2-core8", "down"));
    let mut e = engine(&topo);
    let mut got = at(&mut e, &topo, 3_000_000);
    got.sort();
    let mut expected: Vec<_> = (0..7)
        .flat_map(|pod| [0, 2].map(|agg| (format!("agg{pod}_{agg}"), "lbsp_avoid_pod", vec![(pod_key(7), 0b01)])))
        .chain([("agg7_2".to_string(), "lbsp_avoid_all", vec![(0, 0b01)])])
        .collect();
    expected.sort();
    assert_eq!(got, expected);
}

#[test]
fn a_degraded_link_counts_as_failed_until_its_rate_comes_back() {
    let topo = paper_k8(
        &("[[events]]\nat = \"2ms\"\nlink = \"edge7_3-agg7_3\"\naction = \"degrade\"\nrate = \"100Mbps\"\n".to_string()
            + &event("6ms", "edge7_3-agg7_3", "up")),
    );
    let mut e = engine(&topo);
    let mut got = at(&mut e, &topo, 3_000_000);
    got.sort();
    assert_eq!(got, tor_agg_expected(3), "100 Mbit/s of 1 Gbit/s is below degraded_below = 0.5");
    assert_eq!(at(&mut e, &topo, 7_000_000), vec![], "restored");
}

#[test]
fn an_aggregation_switch_down_moves_its_pods_ranges_off_its_link_group() {
    // A node failure is all its links failing at once (paper §4).
    let mut events = String::new();
    for edge in 0..4 {
        events += &event("2ms", &format!("edge7_{edge}-agg7_3"), "down");
    }
    for core in 12..16 {
        events += &event("2ms", &format!("agg7_3-core{core}"), "down");
    }
    let topo = paper_k8(&events);
    let mut e = engine(&topo);
    let got = at(&mut e, &topo, 3_000_000);
    // Every ToR outside pod 7 avoids link group 1 for all four edges of pod 7.
    let pod7: Vec<(u64, u64)> = (0..4).map(|edge| (edge_key(7, edge), 0b10)).collect();
    for pod in 0..7 {
        for edge in 0..4 {
            let name = format!("edge{pod}_{edge}");
            assert!(got.contains(&(name.clone(), "lbsp_avoid_edge", pod7.clone())), "{name}: {got:?}");
        }
    }
    // And traffic still gets through: a TCP permutation across the fabric
    // with agg7_3 dead loses nothing for good.
    let opts = RunOptions {
        scheme: Some("lbsp".into()),
        transport: experiment::Transport::Tcp,
        flow_size: 200_000,
        seed: 3,
        until: 200_000_000,
        ..RunOptions::default()
    };
    let topo = paper_k8(&events.replace("\"2ms\"", "\"0ms\""));
    let s = experiment::run(&topo, &opts, &mut |_, _| {}).expect("run").summary;
    assert!(s.flows.iter().all(|f| f.bytes_delivered == 200_000), "every flow completes around the dead switch");
}

#[test]
fn a_silent_neighbour_is_found_by_its_missing_hellos_and_heard_again() {
    // One aggregation switch of a k = 4 fat-tree alone: hellos arrive on
    // its first core port every 1 ms, then stop, then resume.
    let topo = Topology::parse(
        "k4.toml",
        "[generator]\nkind = \"fat-tree\"\nk = 4\nhost_link = { rate = \"1Gbps\", delay = \"50us\" }\n[switches]\nscheme = \"lbsp\"\n",
    )
    .expect("topology");
    let i = topo.fabric.nodes.iter().position(|n| n.name == "agg0_0").expect("agg0_0");
    let node = &topo.fabric.nodes[i];
    let core_port = node.ports.iter().position(|p| topo.fabric.nodes[p.peer.index()].name.starts_with("core")).expect("an uplink");
    let mut nodes = build_nodes(&topo.fabric, &NodeConfig { strict: true, ..NodeConfig::default() }).expect("nodes");
    let Node::Switch(mut s) = nodes.swap_remove(i) else { panic!("agg0_0 is a switch") };
    let hello = |seq: u32| {
        emu_node::wire::lbsp::Repr {
            kind: emu_node::wire::lbsp::Kind::Hello,
            value: 0,
            position: Some(0),
            origin: emu_node::wire::Ipv4Address::new(169, 254, 0, 1),
            origin_port: 0,
            in_port: 0,
            prefix: emu_node::wire::Ipv4Address(0),
            prefix_len: 0,
            tier: 2,
            seq,
        }
        .frame()
    };
    let port = emu_node::ids::PortId(core_port as u16);
    let mut out: Vec<Transmit> = Vec::new();
    let counter = |s: &Switch, k: &str| s.scheme_counters().iter().find(|(n, _)| *n == k).map_or(0, |c| c.1);
    let run_to = |s: &mut Switch, t: Nanos, out: &mut Vec<Transmit>| {
        while let Some(d) = s.poll_timeout().filter(|d| *d <= t) {
            s.handle_timeout(d, out);
        }
        out.clear();
    };
    for ms in 1..=5u64 {
        run_to(&mut s, ms * 1_000_000 - 500_000, &mut out);
        s.handle_frame(ms * 1_000_000 - 500_000, port, hello(ms as u32), &mut out);
    }
    run_to(&mut s, 6_000_000, &mut out);
    assert_eq!(counter(&s, "lbsp_failures_detected"), 0, "hellos every 1 ms: alive");
    // Silent from 4.5 ms on: failed once more than 3 intervals passed.
    run_to(&mut s, 9_000_000, &mut out);
    assert_eq!(counter(&s, "lbsp_failures_detected"), 1);
    // The first core port is position 0 of the uplinks: link group 0.
    assert_eq!(s.table_entries("lbsp_avoid_all"), Some(vec![(0, 0b01)]), "its uplink avoided for all hosts");
    s.handle_frame(9_500_000, port, hello(10), &mut out);
    run_to(&mut s, 10_000_000, &mut out);
    assert_eq!(counter(&s, "lbsp_recoveries_detected"), 1, "heard again");
    assert_eq!(s.table_entries("lbsp_avoid_all"), Some(vec![]));
}

#[test]
fn aggregation_partners_change_state_together() {
    // agg0_0's uplink to core0 runs at 100 Mbit/s (not counted as failed:
    // degraded_below = 0.01), so its link group 0 queues up under a
    // permutation at 500 Mbit/s per host: agg0_0 proposes state 1, and its
    // partner agg0_2 (same parity) takes it at the same time.
    let topo = paper_k8("[[events]]\nat = \"0ms\"\nlink = \"agg0_0-core0\"\naction = \"degrade\"\nrate = \"100Mbps\"\n");
    let mut opts = RunOptions {
        scheme: Some("lbsp".into()),
        rate: Some(emu_node::time::BitRate::mbps(500)),
        duration: 20_000_000,
        seed: 5,
        ..RunOptions::default()
    };
    opts.scheme_params.entry("lbsp".into()).or_default().insert("degraded_below".into(), "0.01".into());
    let mut e = experiment::prepare(&topo, &opts).expect("prepare").engine(experiment::Threads::Exactly(1)).expect("engine");
    let state = |e: &Engine, name: &str| switch(e, &topo, name).register_value("lbsp_state", 0).expect("lbsp_state");
    let (mut samples, mut differ, mut moved) = (0, 0, 0);
    for step in 1..=400u64 {
        e.run_until(step * 50_000, u64::MAX);
        let (a, b) = (state(&e, "agg0_0"), state(&e, "agg0_2"));
        samples += 1;
        differ += (a != b) as u32;
        moved += (a != 0) as u32;
    }
    let counter = |name: &str, k: &str| switch(&e, &topo, name).scheme_counters().iter().find(|(n, _)| *n == k).map_or(0, |c| c.1);
    assert!(counter("agg0_0", "lbsp_pair_messages") > 0, "agg0_0 proposed a state");
    assert!(moved > 0, "the pair left state 0 in {moved} of {samples} samples");
    assert_eq!(differ, 0, "agg0_0 and agg0_2 in different states in {differ} of {samples} samples");
    assert_eq!(counter("agg0_0", "lbsp_state_changes"), counter("agg0_2", "lbsp_state_changes"), "the same transitions");
    for n in topo.fabric.nodes.iter().filter(|n| n.as_switch().is_some()) {
        assert_eq!(
            switch(&e, &topo, &n.name).counters().program_errors,
            0,
            "{}: {:?}",
            n.name,
            switch(&e, &topo, &n.name).last_program_error()
        );
    }
    eprintln!("pair in state != 0 in {moved} of {samples} samples, {} transitions", counter("agg0_0", "lbsp_state_changes"));
}

#[test]
fn a_tor_sends_by_the_destination_lsb_round_robin_inside_the_group() {
    // h0 -> h16 (10.1.0.2: pod 1, leaf 4, host number 16, LSB 0, second
    // LSB 0) and h1 -> h17 (number 17: LSB 1). States off, so only the
    // address decides: edge0_0 alternates flow 1 over agg0_0 and agg0_2
    // (link group 0) and flow 2 over agg0_1 and agg0_3.
    for (dst, group) in [(16, [0, 2]), (17, [1, 3])] {
        let mut opts = RunOptions {
            scheme: Some("lbsp".into()),
            traffic: emu_node::traffic::Pattern::Pair(dst - 16, dst),
            flow_size: 100 * 1458,
            ..RunOptions::default()
        };
        opts.scheme_params.entry("lbsp".into()).or_default().insert("states".into(), "false".into());
        let s = experiment::run(&paper_k8(""), &opts, &mut |_, _| {}).expect("run").summary;
        let edge = s.switches.iter().find(|w| w.name == "edge0_0").expect("edge0_0");
        let up = |i: usize| edge.ports.iter().find(|p| p.peer == format!("agg0_{i}")).map_or(0, |p| p.counters.tx_frames);
        let hellos = |i: usize| {
            // Hellos go out of every uplink: the test counts data frames.
            let t = s.simulated_ns / 1_000_000;
            up(i) - t.min(up(i))
        };
        let (a, b) = (hellos(group[0]), hellos(group[1]));
        let others: u64 = (0..4).filter(|i| !group.contains(i)).map(hellos).sum();
        assert_eq!(others, 0, "h{dst}: nothing outside link group {:?}", group);
        assert!(a.abs_diff(b) <= 1 && a + b >= 100, "h{dst}: round robin {a} / {b}");
    }
}

#[test]
fn lbsp_refuses_fabrics_that_are_not_fat_trees() {
    let leaf_spine = crate::leaf_spine(2, 2, 4, r#"{ rate = "10Gbps", delay = "1us" }"#, "[switches]\nscheme = \"lbsp\"\n");
    let topo = Topology::parse("ls.toml", &leaf_spine).expect("topology");
    let err = experiment::run(&topo, &RunOptions::default(), &mut |_, _| {}).expect_err("a leaf-spine is refused");
    let text = format!("{err}");
    assert!(text.contains("lbsp") && text.contains("three-tier fat-tree"), "{text}");
    let explicit = Topology::load("explicit-example").expect("shipped");
    let opts = RunOptions { scheme: Some("lbsp".into()), ..RunOptions::default() };
    // An explicit fabric whose addressing plan is not the generator's.
    let text = format!("{}", experiment::run(&explicit, &opts, &mut |_, _| {}).expect_err("an explicit fabric is refused"));
    assert!(text.contains("cannot run on this fabric") && text.contains("are not numbered .2, .3"), "{text}");
}
