//! The INT best-nexthop program inside a switch (paper §III), exact: the
//! source leaf inserts the shim and its egress writes its measurement,
//! the sink leaf strips it (the host frame is the sender's) and keeps the
//! path's bottleneck values and the best port per source leaf; a new
//! flowlet takes the best port, a packet inside a flowlet keeps its port;
//! probes leave every uplink on the generator's period and refresh a path
//! no data takes.

use bytes::BytesMut;
use weft_core::fabric::FabricSpec;
use weft_core::switch::{Switch, SwitchConfig, Transmit};
use weft_schemes::int_nexthop::{degree_of_congestion, IntNexthop, MetricRange};
use weft_schemes::Params;
use weft_testkit::{drain, leaf_pair, udp, Entering, FAR, H0};
use weft_wire::ids::{NodeId, PortId};
use weft_wire::int::{self as shim, Header, Metric};
use weft_wire::time::BitRate;

/// Leaf `node` of `f` running int-nexthop with the paper's defaults and no
/// probes (only the scripted packets teach the registers).
fn switch(f: &FabricSpec, node: usize) -> Switch {
    switch_with(f, node, &[("probe_interval_us", "0")])
}

fn switch_with(f: &FabricSpec, node: usize, set: &[(&str, &str)]) -> Switch {
    let cfg = SwitchConfig { snapshot_period_ns: 0, ..SwitchConfig::tofino2(3, true) };
    let mut params = Params::new();
    for (k, v) in set {
        params.insert(k.to_string(), v.to_string());
    }
    let program = IntNexthop::from_params(&params).expect("parameters");
    Switch::with_program(NodeId(node as u32), &f.nodes[node], cfg, Box::new(program)).expect("fits")
}

fn counter(s: &Switch, name: &str) -> u64 {
    s.scheme_counters().into_iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| v)
}

/// The sender's frame h0 -> far as it enters leaf0 (port 0).
fn from_h0(f: &FabricSpec, sport: u16) -> BytesMut {
    udp(Entering::port(f, 0, 0, H0, FAR), sport, 5000, 1000)
}

#[test]
fn the_source_leaf_inserts_the_shim_and_writes_its_measurements() {
    let f = leaf_pair(1, 2, BitRate::gbps(10));
    let mut s = switch(&f, 0);
    let mut out: Vec<Transmit> = Vec::new();
    // Three packets of one flow at once: the first goes straight to the
    // wire, the second waits in an empty queue, the third behind it.
    for _ in 0..3 {
        s.handle_frame(1_000, PortId(0), from_h0(&f, 7), &mut out);
    }
    drain(&mut s, 1_000_000, &mut out);
    assert_eq!(out.len(), 3);
    assert_eq!(counter(&s, "int_inserted"), 3);
    let original = from_h0(&f, 7);
    for (i, t) in out.iter().enumerate() {
        assert_eq!(t.frame.len(), original.len() + shim::SHIM_LEN);
        let h = Header::new_checked(&t.frame[34..]).expect("shim after the IPv4 header");
        assert_eq!(h.next_protocol(), 17);
        // DRE: one more packet on the port each time; queue: what was
        // queued ahead at enqueue (the second packet, for the third).
        assert_eq!(h.get(Metric::LinkUtilization), Some(i as u32 + 1));
        let queued = if i == 2 { out[1].frame.len() as u32 } else { 0 };
        assert_eq!(h.get(Metric::QueueOccupancy), Some(queued), "packet {i}");
        assert!(h.get(Metric::HopLatency).is_some());
    }
}

#[test]
fn the_sink_strips_the_shim_and_keeps_the_paths_bottleneck_and_best_port() {
    let f = leaf_pair(1, 2, BitRate::gbps(10));
    // What leaf0 sent through spine 1: a shim with the path's maxima.
    let mut sent = from_h0(&f, 9);
    shim::insert(&mut sent, 14).expect("insert");
    {
        let mut h = Header::new_checked(&mut sent[34..]).expect("shim");
        h.merge_max(Metric::HopLatency, 20_000);
        h.merge_max(Metric::QueueOccupancy, 30_000);
        h.merge_max(Metric::LinkUtilization, 40);
    }
    // It enters leaf1 on its port from spine 1 (leaf1's ports: spines first).
    let mut arriving = sent.clone();
    let e = Entering::port(&f, 1, 1, H0, FAR);
    arriving[..6].copy_from_slice(&e.dst_mac.0);
    arriving[6..12].copy_from_slice(&e.src_mac.0);
    let mut s = switch(&f, 1);
    let mut out: Vec<Transmit> = Vec::new();
    s.handle_frame(5_000, PortId(1), arriving, &mut out);
    drain(&mut s, 1_000_000, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(counter(&s, "int_stripped"), 1);
    // The host's frame is the sender's but for the MACs and one routed hop.
    let got = &out[0].frame;
    let mut want = from_h0(&f, 9);
    want[..12].copy_from_slice(&got[..12]);
    {
        let mut ip = weft_wire::ipv4::Packet::new_checked(&mut want[14..]).expect("ipv4");
        ip.decrement_ttl();
    }
    assert_eq!(&got[..], &want[..], "byte-identical but for the MACs and TTL");
    assert!(weft_wire::ipv4::Packet::new_checked(&got[14..]).expect("ipv4").verify_checksum());
    // Registers: (leaf 0, port 1) hold the path's values; the best port to
    // leaf 0 is port 1 with its degree of congestion.
    let index = 1; // leaf 0 * 64 ports + port 1
    assert_eq!(s.register_value("int_bottleneck_hop_latency", index), Some(20_000));
    assert_eq!(s.register_value("int_bottleneck_queue_occupancy", index), Some(30_000));
    assert_eq!(s.register_value("int_bottleneck_link_utilization", index), Some(40));
    let ranges = [
        MetricRange::new("l", 0.0, 50_000_000.0).unwrap(),
        MetricRange::new("q", 0.0, 150_000.0).unwrap(),
        MetricRange::new("u", 0.0, 100.0).unwrap(),
    ];
    // 20 µs / 50 ms + 30 000 / 150 000 + 40 / 100 = 0.0004 + 0.2 + 0.4
    let degree = (degree_of_congestion([20_000, 30_000, 40], &ranges) * 1e6) as u64;
    assert_eq!(degree, 600_400);
    assert_eq!(s.register_value("int_best_port", 0), Some((degree << 16) | 2));
    assert_eq!(counter(&s, "int_best_changes"), 1);
}

#[test]
fn a_new_flowlet_takes_the_best_port_and_a_flowlet_keeps_its_port() {
    // leaf0 with uplinks 1 and 2 (ports after its one host). Teach it that
    // the path to leaf 1 through port 2 is the least congested: a packet
    // from `far` arrives through port 2 with an empty-ish shim, and one
    // through port 1 with a congested one.
    let f = leaf_pair(1, 2, BitRate::gbps(10));
    let mut s = switch(&f, 0);
    let mut out: Vec<Transmit> = Vec::new();
    let from_far = |port: usize, util: u32, sport: u16| {
        let mut fr = udp(Entering::port(&f, 0, port, FAR, H0), sport, 5000, 200);
        shim::insert(&mut fr, 14).expect("insert");
        Header::new_checked(&mut fr[34..]).expect("shim").merge_max(Metric::LinkUtilization, util);
        fr
    };
    s.handle_frame(1_000, PortId(1), from_far(1, 90, 1), &mut out);
    s.handle_frame(2_000, PortId(2), from_far(2, 5, 2), &mut out);
    drain(&mut s, 10_000, &mut out);
    out.clear();
    // A new flow from h0 to far: a new flowlet, the best port (2).
    s.handle_frame(20_000, PortId(0), from_h0(&f, 33), &mut out);
    assert_eq!(out.first().map(|t| t.port), Some(PortId(2)), "new flowlet on the best port");
    // Now port 1 becomes the better one; the flowlet stays on port 2.
    s.handle_frame(30_000, PortId(1), from_far(1, 0, 3), &mut out);
    drain(&mut s, 40_000, &mut out);
    out.clear();
    s.handle_frame(50_000, PortId(0), from_h0(&f, 33), &mut out);
    assert_eq!(out.first().map(|t| t.port), Some(PortId(2)), "inside the flowlet (gap < 50 ms)");
    // After the flowlet timeout the flow moves to the new best port.
    drain(&mut s, 60_000_000, &mut out);
    out.clear();
    s.handle_frame(60_000_000, PortId(0), from_h0(&f, 33), &mut out);
    assert_eq!(out.first().map(|t| t.port), Some(PortId(1)), "new flowlet after the timeout");
    assert_eq!(counter(&s, "int_best_choices"), 2);
}

#[test]
fn every_probe_period_a_leaf_sends_one_probe_per_uplink_to_the_other_leaf() {
    let f = leaf_pair(1, 2, BitRate::gbps(10));
    let mut s = switch_with(&f, 0, &[("probe_interval_us", "1000")]);
    let mut out: Vec<Transmit> = Vec::new();
    drain(&mut s, 3_500_000, &mut out);
    // Generator ticks at 1, 2 and 3 ms: two uplinks (ports 1, 2) each.
    assert_eq!(out.len(), 6, "{:?}", out.iter().map(|t| (t.port, t.start)).collect::<Vec<_>>());
    assert_eq!(counter(&s, "int_probes_sent"), 6);
    let leaf0 = f.nodes[0].as_switch().expect("switch");
    for (i, t) in out.iter().enumerate() {
        assert_eq!(t.port, PortId(1 + (i % 2) as u16));
        let info = weft_wire::frame::FrameInfo::parse(&t.frame).expect("parses");
        let ip = info.ip.expect("ipv4");
        assert_eq!(ip.dst, leaf0.leaf_addresses[1], "to the address routed to leaf 1");
        assert_eq!(ip.dst, FAR);
        let at = ip.l4_offset as usize;
        let h = Header::new_checked(&t.frame[at..]).expect("shim");
        assert_eq!(h.next_protocol(), shim::PROBE_PROTOCOL);
        // The source leaf's own egress measurement: the first packet on
        // the port in this DRE period has utilisation i/2 + 1.
        assert_eq!(h.get(Metric::LinkUtilization), Some(i as u32 / 2 + 1));
        assert_eq!(h.get(Metric::QueueOccupancy), Some(0));
        let p = shim::Probe::parse(&t.frame[at + shim::SHIM_LEN..]).expect("probe body");
        assert_eq!((p.origin_leaf, p.uplink), (0, t.port.0));
    }
    // The flow field differs between the probes of one tick and between
    // ticks, so transit hashes spread them.
    let flows: std::collections::BTreeSet<u16> =
        out.iter().map(|t| shim::Probe::parse(&t.frame[34 + shim::SHIM_LEN..]).expect("probe").flow).collect();
    assert_eq!(flows.len(), 6);
}

#[test]
fn a_probe_refreshes_a_path_no_data_takes_and_ends_at_the_sink() {
    // leaf1 (ports: spine 0, spine 1, host) hears of the path to leaf 0
    // through port 1 only from data, with a congested value: that port is
    // best because it is the only one known. A probe through the idle
    // port 0 then makes port 0 best.
    let f = leaf_pair(1, 2, BitRate::gbps(10));
    let mut s = switch(&f, 1);
    let mut out: Vec<Transmit> = Vec::new();
    let mut data = from_h0(&f, 9);
    shim::insert(&mut data, 14).expect("insert");
    Header::new_checked(&mut data[34..]).expect("shim").merge_max(Metric::LinkUtilization, 90);
    let e = Entering::port(&f, 1, 1, H0, FAR);
    data[..6].copy_from_slice(&e.dst_mac.0);
    data[6..12].copy_from_slice(&e.src_mac.0);
    s.handle_frame(1_000, PortId(1), data, &mut out);
    drain(&mut s, 100_000, &mut out);
    assert_eq!(s.register_value("int_best_port", 0).map(|w| w & 0xffff), Some(2), "port 1 (+1)");
    out.clear();
    let leaf0 = f.nodes[0].as_switch().expect("switch");
    let mut probe = shim::probe_frame(
        weft_wire::ipv4::Ipv4Address::new(10, 0, 0, 1),
        leaf0.leaf_addresses[1],
        &shim::Probe { flow: 5, origin_leaf: 0, uplink: 2, seq: 0 },
    );
    Header::new_checked(&mut probe[34..]).expect("shim").merge_max(Metric::LinkUtilization, 3);
    let e = Entering::port(&f, 1, 0, H0, FAR);
    probe[..6].copy_from_slice(&e.dst_mac.0);
    probe[6..12].copy_from_slice(&e.src_mac.0);
    s.handle_frame(200_000, PortId(0), probe, &mut out);
    drain(&mut s, 300_000, &mut out);
    assert!(out.is_empty(), "the probe never reaches the host: {out:?}");
    assert_eq!(counter(&s, "int_probes_received"), 1, "{:?} {:?}", s.counters(), s.scheme_counters());
    assert_eq!(s.counters().consumed_by_program, 1);
    assert_eq!(s.counters().drop_program, 0);
    assert_eq!(s.register_value("int_bottleneck_link_utilization", 0), Some(3));
    assert_eq!(s.register_value("int_best_port", 0).map(|w| w & 0xffff), Some(1), "port 0 (+1) now");
    // The collector holds both paths; port 0 is the best.
    let t = s.path_telemetry(300_000);
    let got: Vec<(u16, u16, u32, u64, bool)> = t.iter().map(|p| (p.source_leaf, p.port, p.utilization, p.reports, p.best)).collect();
    assert_eq!(got, vec![(0, 0, 3, 1, true), (0, 1, 90, 1, false)]);
}

#[test]
fn a_host_cannot_send_telemetry() {
    let f = leaf_pair(1, 2, BitRate::gbps(10));
    let mut s = switch(&f, 0);
    let mut out: Vec<Transmit> = Vec::new();
    let mut forged = from_h0(&f, 7);
    shim::insert(&mut forged, 14).expect("insert");
    s.handle_frame(1_000, PortId(0), forged, &mut out);
    drain(&mut s, 100_000, &mut out);
    assert!(out.is_empty());
    assert_eq!(counter(&s, "int_host_shim_drops"), 1);
    assert_eq!(s.counters().drop_program, 1);
}

#[test]
fn a_time_scale_shortens_the_probe_period_and_the_flowlet_timeout() {
    // docs/SCHEMES.md#parameter-scaling: the fabric's spec carries the run's scale; the switch
    // builds its scheme with it. x0.001: probes every 10 µs (default
    // 10 ms), flowlets end after 50 µs of silence (default 50 ms).
    let mut f = leaf_pair(1, 2, BitRate::gbps(10));
    if let weft_core::fabric::NodeKind::Switch(s) = &mut f.nodes[0].kind {
        s.scheme = "int-nexthop".into();
        s.time_scale = weft_schemes::TimeScale::new(0.001).expect("positive");
    }
    let cfg = SwitchConfig { snapshot_period_ns: 0, ..SwitchConfig::tofino2(3, true) };
    let mut s = Switch::from_spec(NodeId(0), &f.nodes[0], cfg).expect("builds");
    let mut out: Vec<Transmit> = Vec::new();
    drain(&mut s, 35_000, &mut out);
    assert_eq!(counter(&s, "int_probes_sent"), 6, "ticks at 10, 20 and 30 µs, two uplinks each");
    // A flow's packets 40 µs apart stay one flowlet; 60 µs apart, two.
    let before = counter(&s, "int_new_flowlets");
    for t in [100_000, 140_000, 180_000, 240_000] {
        s.handle_frame(t, PortId(0), from_h0(&f, 9), &mut out);
        drain(&mut s, t + 1_000, &mut out);
    }
    assert_eq!(counter(&s, "int_new_flowlets") - before, 2);
}
