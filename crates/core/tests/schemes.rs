//! Mechanism tests shared by the schemes: flowlets (LetFlow), DRILL's
//! choice, RPS's spraying, and the Tofino2 fit of every scheme in the catalog.

use bytes::BytesMut;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use weft_core::switch::{Switch, SwitchConfig, Transmit};
use weft_schemes::{build, catalog, drill, Params, TimeScale};
use weft_testkit::leaf_pair;
use weft_tofino::l3::RouteTable;
use weft_tofino::program::{declarations_of, declare_l3_tables, IngressCx, IngressDecision, PacketSource, PassRegisters, QueueDepths};
use weft_tofino::registers::PassState;
use weft_tofino::{Gress, Program, RegisterFile, TargetProfile};
use weft_wire::frame::FrameInfo;
use weft_wire::ids::{NodeId, PortId, QueueId};
use weft_wire::time::{BitRate, Nanos};

fn switch(scheme: &str, uplinks: usize, params: &[(&str, &str)]) -> (weft_core::fabric::FabricSpec, Switch) {
    let f = leaf_pair(1, uplinks, BitRate::gbps(100));
    let cfg = SwitchConfig { snapshot_period_ns: 0, ..SwitchConfig::tofino2(11, true) };
    let p: Params = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let s = Switch::with_program(NodeId(0), &f.nodes[0], cfg, build(scheme, &p, TimeScale::ONE).unwrap()).unwrap();
    (f, s)
}

/// A UDP frame h0 → 10.0.1.2 entering leaf0 on its host port.
fn udp_frame(f: &weft_core::fabric::FabricSpec, sport: u16) -> BytesMut {
    weft_testkit::leaf_pair_udp_frame(f, sport, 5000, 1000)
}

/// Sends one packet of flow `sport` at `t`; returns the uplink it took.
fn send(f: &weft_core::fabric::FabricSpec, s: &mut Switch, t: Nanos, sport: u16) -> PortId {
    let mut out: Vec<Transmit> = vec![];
    weft_testkit::drain(s, t, &mut out);
    out.clear();
    s.handle_frame(t, PortId(0), udp_frame(f, sport), &mut out);
    out.first().map(|x| x.port).expect("forwarded")
}

fn counter(s: &Switch, name: &str) -> u64 {
    s.scheme_counters().into_iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| v)
}

#[test]
fn flowlets_never_move_within_the_gap_and_may_move_after_it() {
    let (f, mut s) = switch("letflow", 4, &[]);
    // 300 packets 50 µs apart (< 100 µs gap): one flowlet, one port.
    let first = send(&f, &mut s, 1_000, 7);
    let mut t = 1_000;
    for _ in 0..300 {
        t += 50_000;
        assert_eq!(send(&f, &mut s, t, 7), first, "a packet inside the flowlet gap changed port");
    }
    assert_eq!(counter(&s, "letflow_flowlets"), 1);
    // Now gaps of 100 µs and more: each packet starts a flowlet, which takes
    // a random uplink: over 100 flowlets all four uplinks are used.
    let mut ports = std::collections::BTreeSet::new();
    for i in 0..100u64 {
        t += 100_000 + i * 1_000;
        ports.insert(send(&f, &mut s, t, 7));
    }
    assert_eq!(ports.len(), 4, "new flowlets pick uplinks at random");
    assert_eq!(counter(&s, "letflow_flowlets"), 101);
    assert!(counter(&s, "letflow_path_changes") > 50);
}

struct Depths(Vec<u64>);
impl QueueDepths for Depths {
    fn queue_bytes(&self, port: PortId, _q: QueueId) -> u64 {
        self.0[port.index()]
    }
    fn port_bytes(&self, port: PortId) -> u64 {
        self.0[port.index()]
    }
    fn queue_cells(&self, port: PortId, _q: QueueId) -> u64 {
        self.0[port.index()] / 176
    }
}

#[test]
fn drill_picks_the_shortest_queue_among_its_samples_and_the_last_best() {
    let mut prog = drill::Drill::from_params(&Params::new()).unwrap();
    let d = declarations_of(&mut prog);
    let mut regs = RegisterFile::new(&d.usage().registers);
    let routes = RouteTable::default();
    let tables = weft_tofino::tables::TableFile::new(&d.usage().tables);
    let f = leaf_pair(1, 4, BitRate::gbps(100));
    let mut frame = udp_frame(&f, 9);
    let info = FrameInfo::parse(&frame).unwrap();
    let group = [PortId(1), PortId(2), PortId(3), PortId(4)];
    let up = [true; 5];
    let mut world = ChaCha8Rng::seed_from_u64(3);
    let mut last_best: Option<PortId> = None;
    let mut moved_to_shorter = 0;
    for trial in 0..2_000u64 {
        let depths = Depths((0..5).map(|_| world.random_range(0..100) * 1000).collect());
        let mut rng = ChaCha8Rng::seed_from_u64(trial);
        let mut replay = rng.clone();
        let samples: Vec<PortId> = (0..2).map(|_| group[replay.random_range(0..group.len())]).collect();
        let mut decision = IngressDecision::default();
        let mut cx = IngressCx {
            now: trial * 1000,
            frame: &mut frame,
            info: &info,
            source: PacketSource::Port(PortId(0)),
            group: &group,
            port_up: &up,
            port_rates: &[BitRate::gbps(100); 5],
            depths: &depths,
            rng: &mut rng,
            hash_seed: 1,
            route_data: Some(1),
            claimed: false,
            decision: &mut decision,
            routes: &routes,
            registers: PassRegisters::new(&mut regs, PassState::new(trial + 1, Gress::Ingress)),
            tables: &tables,
        };
        prog.ingress(&mut cx).unwrap();
        let chosen = cx.decision.verdict.forward_port().unwrap();
        let candidates: Vec<PortId> = samples.iter().copied().chain(last_best).collect();
        let min = candidates.iter().map(|p| depths.port_bytes(*p)).min().unwrap();
        assert!(candidates.contains(&chosen), "trial {trial}: {chosen:?} not among {candidates:?}");
        assert_eq!(depths.port_bytes(chosen), min, "trial {trial}: not the shortest of {candidates:?}");
        if last_best.is_some_and(|b| b != chosen) {
            moved_to_shorter += 1;
        }
        last_best = Some(chosen);
    }
    assert!(moved_to_shorter > 100);
}

#[test]
fn rps_sprays_one_flow_uniformly_over_the_up_uplinks() {
    let (f, mut s) = switch("rps", 4, &[]);
    let mut per_port = std::collections::BTreeMap::<PortId, u32>::new();
    // Packets 20 µs apart: every queue is empty again, so cut-through
    // forwards each at once and the choice is visible in `out`.
    for i in 0..4_000u64 {
        *per_port.entry(send(&f, &mut s, 1_000 + i * 20_000, 7)).or_default() += 1;
    }
    assert_eq!(per_port.len(), 4, "one flow uses every uplink: {per_port:?}");
    for (p, n) in &per_port {
        assert!((850..=1150).contains(n), "uplink {p:?} got {n} of 4000 packets (expected ~1000)");
    }
    assert_eq!(counter(&s, "rps_decisions"), 4_000);
    // One uplink down: the rest share the flow, the down one gets nothing.
    let mut out = vec![];
    let down = *per_port.keys().next().unwrap();
    s.set_port_up(100_000_000, down, false, &mut out);
    let mut after = std::collections::BTreeMap::<PortId, u32>::new();
    for i in 0..3_000u64 {
        *after.entry(send(&f, &mut s, 200_000_000 + i * 20_000, 7)).or_default() += 1;
    }
    assert!(!after.contains_key(&down), "sprayed onto the down uplink: {after:?}");
    assert_eq!(after.len(), 3);
    assert!(after.values().all(|n| (850..=1150).contains(n)), "{after:?}");
}

#[test]
fn every_scheme_fits_tofino2_with_the_l3_tables() {
    let target = TargetProfile::tofino2();
    for info in catalog() {
        let mut p = build(info.name, &Params::new(), TimeScale::ONE).unwrap();
        let mut d = declarations_of(p.as_mut());
        declare_l3_tables(&mut d, 64);
        d.usage().check(&target).unwrap_or_else(|e| panic!("{}: {e}", info.name));
        let (_, s) = switch(info.name, 4, &[]);
        assert_eq!(s.program_name(), info.name);
    }
}

#[test]
fn bad_parameters_are_named() {
    for (scheme, key, value) in [("letflow", "flowlet_gap_us", "0"), ("drill", "samples", "9"), ("conweave", "theta_reply_us", "-1")] {
        let p: Params = [(key.to_string(), value.to_string())].into_iter().collect();
        let e = build(scheme, &p, TimeScale::ONE).err().unwrap().to_string();
        assert!(e.contains(key), "{scheme}: {e}");
    }
}
