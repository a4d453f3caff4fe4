use super::*;

fn err(text: &str) -> TopologyError {
    Topology::parse("t.toml", text).unwrap_err()
}

const LS: &str = r#"
[generator]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 2
host_link = { rate = "10Gbps", delay = "1us" }
"#;

#[test]
fn every_shipped_topology_validates() {
    for (name, _) in SHIPPED {
        let t = Topology::load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!t.fabric.hosts().is_empty(), "{name}");
    }
}

#[test]
fn leaf_spine_8x8_matches_the_conweave_setup() {
    let t = Topology::load("leaf-spine-8x8").unwrap();
    let f = &t.fabric;
    assert_eq!(f.hosts().len(), 128);
    assert_eq!(f.switches().len(), 16);
    assert_eq!(t.oversubscription(), Some(2.0));
    assert!(f.links.iter().all(|l| l.rate == BitRate::gbps(100) && l.delay == 1000));
    let sw = f.nodes[0].as_switch().unwrap();
    assert_eq!(sw.buffer_bytes, Some(9_000_000));
    // Every leaf has 8 equal-cost uplinks to every other leaf's /24.
    let r = sw.routes.iter().find(|r| r.prefix == Ipv4Address::new(10, 0, 3, 0)).unwrap();
    assert_eq!((r.len, r.ports.len()), (24, 8));
}

#[test]
fn fat_tree_k4_routes_are_up_down_shortest_paths() {
    let t = Topology::load("fat-tree-k4").unwrap();
    let f = &t.fabric;
    assert_eq!((f.switches().len(), f.hosts().len(), f.links.len()), (20, 16, 48));
    let edge = f.node_by_name("edge0_0").unwrap();
    let sw = f.nodes[edge.index()].as_switch().unwrap();
    // To another pod: both aggregation uplinks.
    let r = sw.routes.iter().find(|r| r.prefix == Ipv4Address::new(10, 3, 1, 0)).unwrap();
    assert_eq!(r.ports.len(), 2);
    // Aggregation switch toward another pod: both its cores.
    let agg = f.node_by_name("agg0_0").unwrap();
    let r = f.nodes[agg.index()].as_switch().unwrap().routes.iter().find(|r| r.prefix == Ipv4Address::new(10, 3, 1, 0)).unwrap();
    assert_eq!(r.ports.len(), 2);
    // Toward its own pod's other edge: one down port.
    let r = f.nodes[agg.index()].as_switch().unwrap().routes.iter().find(|r| r.prefix == Ipv4Address::new(10, 0, 1, 0)).unwrap();
    assert_eq!(r.ports.len(), 1);
}

#[test]
fn addressing_plan_is_hierarchical() {
    let t = Topology::load("fat-tree-k4").unwrap();
    let f = &t.fabric;
    let h = f.nodes[f.node_by_name("h5").unwrap().index()].as_host().unwrap();
    // h5 = pod 1, edge 0, host 1.
    assert_eq!(h.ip, Ipv4Address::new(10, 1, 0, 3));
    assert_eq!(h.gateway, Ipv4Address::new(10, 1, 0, 1));
    assert_eq!(h.mac.0, [2, 0, 10, 1, 0, 3]);
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let e = err(&format!("{LS}\n[switches]\nschemee = \"ecmp\"\n"));
    assert_eq!(e.file, "t.toml");
    assert_eq!(e.line, Some(10));
    assert!(e.message.contains("unknown field `schemee`"), "{e}");
}

#[test]
fn rate_without_unit_is_an_error_with_its_line() {
    let e = err(&LS.replace("\"10Gbps\"", "\"10000\""));
    assert_eq!(e.line, Some(7));
    assert!(e.message.contains("has no unit"), "{e}");
}

#[test]
fn link_to_a_missing_node() {
    let text = r#"
[[switch]]
name = "s"
[[host]]
name = "h"
[[link]]
a = "h"
b = "s"
rate = "1Gbps"
[[link]]
a = "s"
b = "ghost"
rate = "1Gbps"
"#;
    let e = err(text);
    assert_eq!(e.line, Some(12));
    assert!(e.message.contains("link end `ghost` is not a defined switch or host"), "{e}");
}

#[test]
fn host_with_two_addresses() {
    let text = r#"
[[switch]]
name = "s"
[[host]]
name = "h"
ip = ["10.0.0.2", "10.0.0.3"]
[[link]]
a = "h"
b = "s"
rate = "1Gbps"
"#;
    let e = err(text);
    assert_eq!(e.line, Some(6));
    assert!(e.message.contains("has 2 addresses"), "{e}");
}

#[test]
fn other_errors_are_specific() {
    // The fuzzer's k = 64: 70 656 nodes, refused before anything is built
    // (it took 9.5 s and 1.8 GB to fail on a duplicate MAC).
    let big = |k: u32, over: &str| format!("[generator]\nkind = \"fat-tree\"\nk = {k}\n{over}host_link = {{ rate = \"1Gbps\" }}\n");
    let refusal = |text: &str| Topology::parse("t.toml", text).err().map(|e| e.message).unwrap_or_default();
    let t = std::time::Instant::now();
    let e = refusal(&big(64, ""));
    assert!(e.contains("k = 64 with 32 hosts per edge switch makes 70656 nodes: at most 65536"), "{e}");
    let e = refusal(&big(32, "oversubscription = 10.0\n"));
    assert!(e.contains("160 hosts per edge switch makes 83200 nodes"), "{e}");
    assert!(t.elapsed() < std::time::Duration::from_secs(1), "refused before building");
    assert!(err(&LS.replace("leaf-spine", "leaf-spin")).message.contains("unknown generator `leaf-spin`"));
    assert!(err(&format!("{LS}[switches]\nscheme = \"magic\"\n")).message.contains("unknown scheme `magic`"));
    assert!(err(&format!("{LS}[[events]]\nat = \"1ms\"\nlink = \"leaf0-spine9\"\naction = \"down\"\n")).message.contains("does not exist"));
    assert!(err(&format!("{LS}[[events]]\nat = \"1ms\"\nlink = \"leaf0-spine1\"\naction = \"degrade\"\n"))
        .message
        .contains("needs a `rate`"));
    assert!(err("name = \"x\"\n").message.contains("empty topology"));
    assert!(err(&LS.replace("spines = 2", "spines = 0")).message.contains("spines = 0"));
    assert!(err("[generator\n").line.is_some());
    let dup = "[[switch]]\nname = \"s\"\n[[switch]]\nname = \"s\"\n";
    assert!(err(dup).message.contains("defined twice (first on line 2)"));
}

#[test]
fn ecn_takes_a_ramp_or_a_step() {
    let ecn = |kmin: &str, kmax: &str| format!("{LS}[switches]\necn = {{ kmin = \"{kmin}\", kmax = \"{kmax}\", pmax = 0.2 }}\n");
    let red = |text: &str| {
        let t = Topology::parse("t.toml", text).unwrap();
        let f = &t.fabric;
        f.nodes[f.node_by_name("leaf0").unwrap().index()].as_switch().unwrap().ecn.unwrap()
    };
    let step = red(&ecn("400KB", "400KB"));
    assert_eq!((step.kmin_bytes, step.kmax_bytes), (400_000, 400_000));
    assert_eq!((step.probability(400_000), step.probability(400_001)), (0.0, 1.0), "every packet above 400 KB");
    let ramp = red(&ecn("100KB", "400KB"));
    assert!((ramp.probability(250_000) - 0.1).abs() < 1e-12, "half way up the ramp: pmax / 2");
    assert!(err(&ecn("400KB", "100KB")).message.contains("ecn needs kmin <= kmax"));
}

#[test]
fn events_and_overrides_apply() {
    let text = format!(
        "{LS}[overrides.spine1]\nbuffer = \"1MB\"\npfc = true\n[[events]]\nat = \"2ms\"\nlink = \"spine1-leaf0\"\naction = \"degrade\"\nrate = \"1Gbps\"\n"
    );
    let t = Topology::parse("t.toml", &text).unwrap();
    let f = &t.fabric;
    let s1 = f.nodes[f.node_by_name("spine1").unwrap().index()].as_switch().unwrap();
    assert_eq!((s1.buffer_bytes, s1.pfc), (Some(1_000_000), true));
    assert_eq!(f.schedule.len(), 1);
    assert_eq!(f.schedule[0].action, LinkAction::Degrade(BitRate::gbps(1)));
    assert_eq!(f.links[f.schedule[0].link.index()].name, "leaf0-spine1");
}

#[test]
fn loss_events_take_a_probability_and_nothing_else_does() {
    let ev = |action: &str, extra: &str| format!("{LS}[[events]]\nat = \"1ms\"\nlink = \"leaf0-spine1\"\naction = \"{action}\"\n{extra}");
    let t = Topology::parse("t.toml", &ev("loss", "loss = \"2.5%\"\n")).unwrap();
    assert_eq!(t.fabric.schedule[0].action, LinkAction::Loss(25_000));
    let t = Topology::parse("t.toml", &ev("loss", "loss = \"0.001\"\n")).unwrap();
    assert_eq!(t.fabric.schedule[0].action, LinkAction::Loss(1_000));
    for (text, want) in [
        (ev("loss", ""), "needs a `loss`"),
        (ev("loss", "loss = \"150%\"\n"), "out of range"),
        (ev("loss", "loss = \"1 Gbps\"\n"), "unknown unit"),
        (ev("down", "loss = \"1%\"\n"), "only `loss` events take a `loss`"),
        (ev("loss", "loss = \"1%\"\nrate = \"1Gbps\"\n"), "only `degrade` events take a `rate`"),
    ] {
        let e = Topology::parse("t.toml", &text).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("t.toml:"), "{e}");
    }
    let mut t = Topology::parse("t.toml", LS).unwrap();
    t.add_event("3ms,leaf0-spine1,loss=1%").unwrap();
    assert_eq!(t.fabric.schedule[0].action, LinkAction::Loss(10_000));
    assert!(t.add_event("3ms,leaf0-spine1,loss=x").is_err());
}

#[test]
fn a_flap_event_expands_to_downs_and_ups_ending_up() {
    let text = format!("{LS}[[events]]\nat = \"1ms\"\nlink = \"leaf0-spine1\"\naction = \"flap\"\nperiod = \"2ms\"\nuntil = \"8ms\"\n");
    let t = Topology::parse("t.toml", &text).unwrap();
    let got: Vec<_> = t.fabric.schedule.iter().map(|e| (e.at / 1_000_000, e.action)).collect();
    use LinkAction::{Down, Up};
    assert_eq!(got, vec![(1, Down), (3, Up), (5, Down), (7, Up), (8, Up)]);
    let bad = format!("{LS}[[events]]\nat = \"1ms\"\nlink = \"leaf0-spine1\"\naction = \"flap\"\nperiod = \"1ns\"\nuntil = \"1s\"\n");
    assert!(Topology::parse("t.toml", &bad).unwrap_err().to_string().contains("at most 100000"));
    let missing = format!("{LS}[[events]]\nat = \"1ms\"\nlink = \"leaf0-spine1\"\naction = \"flap\"\n");
    assert!(Topology::parse("t.toml", &missing).unwrap_err().to_string().contains("needs a `period` and an `until`"));
    let mut t = Topology::parse("t.toml", LS).unwrap();
    t.add_event("0ms,leaf0-spine1,flap=1ms:3ms").unwrap();
    assert_eq!(t.fabric.schedule.len(), 4);
    assert!(t.add_event("0ms,leaf0,flap=1ms:3ms").is_err(), "a switch cannot flap");
}

#[test]
fn switch_events_take_every_link_down_or_up_or_restart_the_switch() {
    let ev =
        |node: &str, action: &str, extra: &str| format!("{LS}[[events]]\nat = \"1ms\"\nnode = \"{node}\"\naction = \"{action}\"\n{extra}");
    // spine1 has a link to each of the 2 leaves.
    let t = Topology::parse("t.toml", &ev("spine1", "down", "")).unwrap();
    assert_eq!(t.fabric.schedule.len(), 2);
    assert!(t.fabric.schedule.iter().all(|e| e.action == LinkAction::Down && e.at == 1_000_000));
    assert!(t.fabric.node_schedule.is_empty());
    let t = Topology::parse("t.toml", &ev("leaf0", "restart", "boot = \"250us\"\n")).unwrap();
    let leaf0 = t.fabric.node_by_name("leaf0").unwrap();
    assert_eq!(t.fabric.node_schedule, vec![NodeEvent { at: 1_000_000, node: leaf0, action: NodeAction::Restart }]);
    // leaf0: 2 hosts and 2 spines, up again after the boot.
    assert_eq!(t.fabric.schedule.len(), 4);
    assert!(t.fabric.schedule.iter().all(|e| e.action == LinkAction::Up && e.at == 1_250_000));
    assert!(t.describe().contains("4 scheduled link events, 1 switch restarts"), "{}", t.describe());
    for (text, want) in [
        (ev("h0", "restart", ""), "is a host"),
        (ev("spine9", "down", ""), "does not exist"),
        (ev("spine1", "degrade", ""), "unknown switch action `degrade`"),
        (ev("spine1", "down", "boot = \"1ms\"\n"), "only a `restart` takes a `boot`"),
        (ev("spine1", "restart", "rate = \"1Gbps\"\n"), "takes only"),
        (ev("spine1", "restart", "link = \"leaf0-spine1\"\n"), "either a `link` or a `node`"),
        (
            format!("{LS}[[events]]\nat = \"1ms\"\nlink = \"leaf0-spine1\"\naction = \"down\"\nboot = \"1ms\"\n"),
            "only a switch's `restart`",
        ),
    ] {
        let e = Topology::parse("t.toml", &text).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("t.toml:"), "{want}: {e}");
    }
    let mut t = Topology::parse("t.toml", LS).unwrap();
    t.add_event("2ms,spine0,restart").unwrap();
    t.add_event("3ms,spine1,restart=1ms").unwrap();
    assert_eq!(t.fabric.node_schedule.len(), 2);
    let ups: Vec<_> = t.fabric.schedule.iter().map(|e| (e.at / 1_000_000, e.action)).collect();
    assert_eq!(ups, vec![(2, LinkAction::Up), (2, LinkAction::Up), (4, LinkAction::Up), (4, LinkAction::Up)]);
    assert!(t.add_event("0ms,leaf0-spine1,restart").unwrap_err().contains("restart takes a switch"));
    assert!(t.add_event("0ms,h0,restart").is_err());
}

#[test]
fn explicit_example_plans_addresses_and_placement() {
    let t = Topology::load("explicit-example").unwrap();
    let f = &t.fabric;
    let a1 = f.nodes[f.node_by_name("a1").unwrap().index()].as_host().unwrap();
    assert_eq!(a1.ip, Ipv4Address::new(10, 0, 0, 3));
    let b0 = f.nodes[f.node_by_name("b0").unwrap().index()].as_host().unwrap();
    assert_eq!(b0.ip, Ipv4Address::new(10, 0, 1, 10));
    assert_eq!(f.nodes[f.node_by_name("s1").unwrap().index()].placement, 1);
    assert_eq!(f.schedule.len(), 2);
}

#[test]
fn switch_links_make_room_for_an_overlay_unless_told_otherwise() {
    let mtu_of = |t: &Topology, name: &str| t.fabric.links.iter().find(|l| l.name == name).map(|l| l.mtu);
    // Generated: host links 1500 (default) or as given, switch links + 50.
    let t = Topology::parse("t.toml", LS).unwrap();
    assert_eq!((mtu_of(&t, "h0-leaf0"), mtu_of(&t, "leaf0-spine1")), (Some(1500), Some(1550)));
    let jumbo = LS.replace("delay = \"1us\" }", "delay = \"1us\", mtu = 9000 }");
    let t = Topology::parse("t.toml", &jumbo).unwrap();
    assert_eq!((mtu_of(&t, "h0-leaf0"), mtu_of(&t, "leaf0-spine1")), (Some(9000), Some(9050)));
    // Capped at the largest MTU a link takes.
    let t = Topology::parse("t.toml", &LS.replace("delay = \"1us\" }", "delay = \"1us\", mtu = 9200 }")).unwrap();
    assert_eq!(mtu_of(&t, "leaf0-spine1"), Some(MAX_MTU));
    // An explicit fabric_link mtu wins.
    let given = format!("{LS}fabric_link = {{ rate = \"10Gbps\", mtu = 1500 }}\n");
    let t = Topology::parse("t.toml", &given).unwrap();
    assert_eq!(mtu_of(&t, "leaf0-spine1"), Some(1500));
    // Explicit fabrics: 1500 to a host, 1550 between switches.
    let t = Topology::load("explicit-example").unwrap();
    let (host, switch): (Vec<_>, Vec<_>) = t
        .fabric
        .links
        .iter()
        .partition(|l| t.fabric.nodes[l.a.0.index()].as_host().is_some() || t.fabric.nodes[l.b.0.index()].as_host().is_some());
    assert!(host.iter().all(|l| l.mtu == 1500) && !host.is_empty());
    assert!(switch.iter().all(|l| l.mtu == 1550) && !switch.is_empty());
}

#[test]
fn fat_tree_core_links_can_be_slower_than_the_rest() {
    // The LBSP paper's 8:1 16-ary fat-tree (§4): 1 Gbit/s everywhere but
    // the aggregation-core links, 50 µs links.
    let text = r#"
[generator]
kind = "fat-tree"
k = 4
host_link = { rate = "1Gbps", delay = "50us" }
fabric_link = { rate = "1Gbps", delay = "50us" }
core_link = { rate = "125Mbps" }
"#;
    let t = Topology::parse("t.toml", text).unwrap();
    let f = &t.fabric;
    for l in &f.links {
        let core = l.name.contains("core");
        assert_eq!(l.rate, if core { BitRate::mbps(125) } else { BitRate::gbps(1) }, "{}", l.name);
        assert_eq!(l.delay, 50_000, "{}: the fabric's delay unless core_link gives one", l.name);
    }
    let e = err(&LS.replace("host_link", "core_link = { rate = \"1Gbps\" }\nhost_link"));
    assert!(e.message.contains("`core_link` is a fat-tree parameter"), "{e}");
}

#[test]
fn command_line_events_name_a_link_or_a_whole_switch() {
    let mut t = Topology::load("fat-tree-k4").unwrap();
    t.add_event("2ms,edge0_0-agg0_1,degrade=100Mbps").unwrap();
    t.add_event("1ms,agg1_0,down").unwrap();
    let s = &t.fabric.schedule;
    // agg1_0 has 2 edge and 2 core links; sorted by time.
    assert_eq!(s.len(), 5);
    assert!(s[..4].iter().all(|e| e.at == 1_000_000 && e.action == LinkAction::Down));
    assert_eq!((s[4].at, s[4].action), (2_000_000, LinkAction::Degrade(BitRate::mbps(100))));
    assert_eq!(t.fabric.links[s[4].link.index()].name, "edge0_0-agg0_1");
    for (bad, why) in [
        ("1ms,h0,down", "is a host"),
        ("1ms,nowhere,down", "no link or switch"),
        ("1ms,agg1_0,melt", "unknown action"),
        ("1ms,agg1_0", "three comma-separated fields"),
        ("soon,agg1_0,down", "time"),
    ] {
        let e = t.add_event(bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn per_scheme_parameters_apply_only_to_their_scheme() {
    let text = format!(
        "{LS}[switches]\nscheme = \"int-nexthop\"\n[switches.params]\nseed = 7\n\
         [switches.params.int-nexthop]\nprobe_interval_us = 500\n"
    );
    let t = Topology::parse("t.toml", &text).unwrap();
    let leaf = t.fabric.nodes.iter().find_map(|n| n.as_switch()).unwrap();
    assert_eq!(leaf.scheme_params["int-nexthop"]["probe_interval_us"], "500");
    let p = leaf.effective_params();
    assert_eq!((p.get("probe_interval_us").map(String::as_str), p.get("seed").map(String::as_str)), (Some("500"), Some("7")));
    // Another scheme (as `--scheme ecmp` makes it) does not get them.
    let mut other = leaf.clone();
    other.scheme = "ecmp".into();
    assert_eq!(other.effective_params().get("probe_interval_us"), None);
    // The shipped INT topologies run under ECMP too.
    for name in ["leaf-spine-int", "fat-tree-int"] {
        let t = Topology::load(name).unwrap();
        for n in &t.fabric.nodes {
            if let Some(s) = n.as_switch() {
                let mut s = s.clone();
                s.scheme = "ecmp".into();
                assert!(emu_node::schemes::build("ecmp", &s.effective_params(), Default::default()).is_ok(), "{name}");
            }
        }
    }
    let e = err(&format!("{LS}[switches.params.no-such-scheme]\nx = 1\n"));
    assert!(e.to_string().contains("params.no-such-scheme: a table of parameters is named after a scheme"), "{e}");
}
