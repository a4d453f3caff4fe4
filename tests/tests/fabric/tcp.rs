//! TCP hosts end to end: line rate alone, the receive window is honoured,
//! DCTCP keeps an incast loss-free where NewReno drops.

use crate::{leaf_spine, run, shipped};
use emu_node::traffic::Pattern;
use emu_orchestrator::experiment::{RunOptions, Transport};

fn opts(cc: &str, traffic: Pattern, size: u64) -> RunOptions {
    let mut o = RunOptions { transport: Transport::Tcp, traffic, flow_size: size, ..RunOptions::default() };
    o.transport_params.insert("tcp.cc".into(), cc.into());
    o
}

/// NewReno hosts running the flows of a flow list (`--flows-file`'s
/// format; `name` is the file name errors give).
fn flow_list(name: &str, flows: &str) -> RunOptions {
    let mut o = opts("newreno", Pattern::Permutation, 0);
    o.flow_list = Some((name.into(), flows.into()));
    o
}

#[test]
fn one_tcp_flow_alone_is_within_10_percent_of_its_base_fct() {
    for name in ["leaf-spine-2x4", "leaf-spine-8x8"] {
        for cc in ["newreno", "dctcp"] {
            let s = run(shipped(name), &opts(cc, Pattern::Pair(0, 15), 4_000_000)).summary;
            let f = &s.flows[0];
            assert_eq!(f.bytes_delivered, 4_000_000);
            let sd = f.slowdown.unwrap();
            assert!((1.0..=1.10).contains(&sd), "{name} {cc}: slowdown {sd}");
            assert_eq!(f.retransmits, 0);
        }
    }
}

#[test]
fn the_receive_window_limits_what_is_in_flight() {
    let mut o = opts("newreno", Pattern::Pair(0, 15), 2_000_000);
    o.transport_params.insert("tcp.rcv_buffer".into(), "16KiB".into());
    let s = run(shipped("leaf-spine-2x4"), &o).summary;
    let f = &s.flows[0];
    assert!(f.max_in_flight <= 16 * 1024, "{} B in flight", f.max_in_flight);
    assert!(f.slowdown.unwrap() > 1.5, "window-limited: {}", f.slowdown.unwrap());
}

#[test]
fn dctcp_keeps_an_incast_lossless_where_newreno_drops() {
    let topo = leaf_spine(
        1,
        1,
        9,
        r#"{ rate = "10Gbps", delay = "1us" }"#,
        "[switches]
buffer = \"400KB\"
ecn = { kmin = \"30KB\", kmax = \"31KB\", pmax = 1.0 }
",
    );
    let reno = run(&topo, &opts("newreno", Pattern::Incast(8), 1_000_000)).summary;
    let dctcp = run(&topo, &opts("dctcp", Pattern::Incast(8), 1_000_000)).summary;
    let lost = |s: &emu_node::results::Summary| s.switches.iter().map(|w| w.counters.drop_tm).sum::<u64>();
    assert!(lost(&reno) > 0, "NewReno fills the buffer");
    assert_eq!(lost(&dctcp), 0, "DCTCP reacts to ECN before the buffer fills");
    assert!(dctcp.flows.iter().all(|f| f.ecn_marks > 0 && f.fct.is_some()));
    assert!(reno.flows.iter().all(|f| f.fct.is_some()), "NewReno recovers its losses");
}

#[test]
fn an_arp_reply_slower_than_the_retry_does_not_stall_a_host_with_a_later_flow() {
    // 50 µs links: the gateway's ARP reply takes longer than the 100 µs
    // retry. h126 first receives (its ACKs ask ARP), and its own flow only
    // starts later: the due retry once woke it in the past forever.
    let flows = "2\n113 126 3 32000 0.005032780\n126 32 3 32000 0.005514379\n";
    let mut o = flow_list("two.txt", flows);
    o.scheme = Some("ecmp".into());
    o.until = 50_000_000;
    let s = run(shipped("fat-tree-k8-lbsp"), &o).summary;
    assert!(s.flows.iter().all(|f| f.bytes_delivered == 32_000), "both flows delivered");
    assert!(s.simulated_ns < 10_000_000, "ended when the flows did: {} ns", s.simulated_ns);
}

/// A TCP host wakes for what it can send, not for the end of every frame
/// it put on the wire: h0's flow is held by a 16 KiB socket window while
/// h0 acknowledges h15's flow segment by segment, and the end of each of
/// those ACKs is no reason to wake (before, h0 woke at every one: 4 433
/// timer events in all, against 3 550 since; a run is deterministic).
#[test]
fn a_window_bound_sender_does_not_wake_at_the_end_of_each_ack_it_sends() {
    let o = flow_list("two.txt", "2\n0 15 0 1000000 0 window_bytes=16384\n15 0 0 1000000 0\n");
    let s = run(shipped("leaf-spine-2x4"), &o).summary;
    assert!(s.flows.iter().all(|f| f.bytes_delivered == 1_000_000), "both flows delivered");
    let (t, timers) = (&s.totals, crate::timer_events(&s));
    assert!(timers < 3_800, "{timers} timer events ({} events, {} hops, {} deliveries)", t.events, t.packet_hops, t.host_deliveries);
}

#[test]
fn an_application_rate_and_a_socket_window_bound_a_flow_as_iperf3s_b_and_w() {
    // leaf-spine-2x4: 100 Gbit/s hosts. One 1 MB flow written at 1 Gbit/s
    // (iperf3 -b 1G) takes size / rate; one with a 16 KiB socket window
    // (-w 16K) never has more in flight; DSCP from the flow list.
    let mut o = flow_list("iperf.txt", "2\n0 15 0 1000000 0 - - rate_bps=1000000000 dscp=4\n1 14 0 1000000 0 window_bytes=16384\n");
    let s = run(shipped("leaf-spine-2x4"), &o).summary;
    let (paced, windowed) = (&s.flows[0], &s.flows[1]);
    let at_rate = 1_000_000 * 8; // ns at 1 Gbit/s
    let fct = paced.fct.unwrap();
    // (The FCT counts from the first segment, written after 11.7 us.)
    assert!(fct.abs_diff(at_rate) < at_rate / 100, "paced: {fct} ns for {at_rate} ns of writing");
    assert!(paced.max_in_flight < 20_000, "paced at a hundredth of the link: {} B in flight", paced.max_in_flight);
    assert!(windowed.max_in_flight <= 16_384, "{} B in flight", windowed.max_in_flight);
    assert!(windowed.slowdown.unwrap() > 1.5, "window-limited: {}", windowed.slowdown.unwrap());
    // Bad fields: one clear error each.
    for bad in ["0 15 0 1000 0 rate_bps=0", "0 15 0 1000 0 dscp=64", "0 15 0 1000 0 speed=1"] {
        o.flow_list = Some(("bad.txt".into(), format!("1\n{bad}\n")));
        let topo = emu_orchestrator::config::topology::Topology::parse("l", shipped("leaf-spine-2x4")).unwrap();
        let e = emu_orchestrator::experiment::run(&topo, &o, &mut |_, _| {}).err().unwrap_or_else(|| panic!("`{bad}` accepted"));
        assert!(e.to_string().contains("bad.txt"), "{e}");
    }
}

#[test]
fn a_fack_sets_the_synthetic_senders_window_a_smaller_one_stops_new_data_and_it_is_no_duplicate_ack() {
    use emu_node::engine::Engine;
    use emu_node::host::{SizedFlow, TcpConfig, TcpHost};
    use emu_node::ids::{FlowId, PortId};
    use emu_node::node::{HostTransport, Node, NodeConfig};
    use emu_node::wire::p4te::{fack, FackOf};
    let fabric = emu_orchestrator::config::topology::Topology::parse(
        "two.toml",
        "[generator]\nkind = \"leaf-spine\"\nleaves = 2\nspines = 1\nhosts_per_leaf = 1\nhost_link = { rate = \"10Gbps\", delay = \"2us\" }\n",
    )
    .unwrap()
    .fabric;
    let tc = TcpConfig::default();
    let cfg = NodeConfig { seed: 1, transport: HostTransport::Tcp(tc), ..NodeConfig::default() };
    let nodes =
        crate::nodes_with(&fabric, &cfg, |id, n| n.as_host().map(|_| Node::TcpHost(Box::new(TcpHost::from_spec(id, n, tc).unwrap()))));
    let mut e = Engine::with_nodes(&fabric, nodes).unwrap();
    let (h0, h1) = (fabric.node_by_name("h0").unwrap(), fabric.node_by_name("h1").unwrap());
    let (src, dst) = (fabric.nodes[h0.index()].as_host().unwrap().ip, fabric.nodes[h1.index()].as_host().unwrap().ip);
    let Some(Node::TcpHost(h)) = e.node_mut(h0) else { panic!("h0 is a TCP host") };
    h.add_flow(SizedFlow::new(FlowId(0), dst, 2_000_000, 0, 40000, 2 << 2));
    e.refresh(h0);
    // Some round trips in: the window has grown past 64 KB.
    e.run_until(100_000, u64::MAX);
    let now = e.now();
    let Some(Node::TcpHost(h)) = e.node_mut(h0) else { panic!() };
    let s = &h.senders()[0];
    let (una, nxt) = (s.snd_una, s.snd_nxt);
    assert!(nxt - una > 16_384 && una > 0, "in flight {} B, acked {una}", nxt - una);
    // A FACK "from the receiver" acknowledging what the sender already
    // had acknowledged, window 64 (x 2^7 = 8 KiB): no new data may leave
    // while more than that is in flight.
    let of = |window| FackOf {
        sender: src,
        receiver: dst,
        sender_port: 40000,
        receiver_port: TcpHost::port_of(FlowId(0)),
        seq: 0,
        ack: una as u32,
        window,
        dscp: 0,
    };
    let mut out = Vec::new();
    h.handle_frame(now, PortId(0), fack(&of(64)), &mut out);
    let s = &h.senders()[0];
    assert_eq!(s.window(), 64 << emu_node::host::tcp::WINDOW_SHIFT);
    assert_eq!(s.snd_nxt, nxt, "nothing new sent over the FACK's window");
    assert!(out.is_empty());
    // FACKs repeat the last ACK number with a new window: window updates,
    // not duplicate ACKs (RFC 5681 §2 (e)), so however many arrive, no
    // fast retransmit; three with an unchanged window are duplicates.
    let fast = h.senders()[0].fast_retransmits;
    for w in [65, 66, 67, 68] {
        h.handle_frame(now, PortId(0), fack(&of(w)), &mut out);
    }
    assert_eq!(h.senders()[0].fast_retransmits, fast, "FACKs with changing windows are not duplicate ACKs");
    for _ in 0..3 {
        h.handle_frame(now, PortId(0), fack(&of(68)), &mut out);
    }
    assert_eq!(h.senders()[0].fast_retransmits, fast + 1, "three same-window repeats are duplicate ACKs");
    assert_eq!(h.senders()[0].window(), 68 << emu_node::host::tcp::WINDOW_SHIFT);
    // A larger FACK window lets the congestion window rule again.
    out.clear();
    h.handle_frame(now, PortId(0), fack(&of(0xffff)), &mut out);
    assert_eq!(h.senders()[0].window(), (h.senders()[0].cwnd as u64).min(0xffff << emu_node::host::tcp::WINDOW_SHIFT));
    // The flow then completes.
    e.refresh(h0);
    e.run_until(u64::MAX, u64::MAX);
    let Some(Node::TcpHost(h)) = e.node_mut(h0) else { panic!() };
    assert_eq!(h.senders()[0].snd_una, 2_000_000);
}

#[test]
fn linuxs_rto_rule_keeps_min_rto_above_a_steady_rtt_where_rfc_6298s_floor_does_not() {
    use emu_node::engine::Engine;
    use emu_node::host::{RtoRule, SizedFlow, TcpConfig, TcpHost};
    use emu_node::ids::FlowId;
    use emu_node::node::{HostTransport, Node, NodeConfig};
    use emu_node::time::BitRate;
    let fabric = emu_orchestrator::config::topology::Topology::parse(
        "two.toml",
        "[generator]\nkind = \"leaf-spine\"\nleaves = 2\nspines = 1\nhosts_per_leaf = 1\nhost_link = { rate = \"10Gbps\", delay = \"2us\" }\n",
    )
    .unwrap()
    .fabric;
    let min_rto = 50_000;
    let rto_of = |rule| {
        let tc = TcpConfig { min_rto, rto_rule: rule, ..TcpConfig::default() };
        let cfg = NodeConfig { seed: 1, transport: HostTransport::Tcp(tc), ..NodeConfig::default() };
        let nodes =
            crate::nodes_with(&fabric, &cfg, |id, n| n.as_host().map(|_| Node::TcpHost(Box::new(TcpHost::from_spec(id, n, tc).unwrap()))));
        let mut e = Engine::with_nodes(&fabric, nodes).unwrap();
        let (h0, h1) = (fabric.node_by_name("h0").unwrap(), fabric.node_by_name("h1").unwrap());
        let dst = fabric.nodes[h1.index()].as_host().unwrap().ip;
        let Some(Node::TcpHost(h)) = e.node_mut(h0) else { panic!("h0 is a TCP host") };
        // Application-limited (1 Gbit/s on a 10 Gbit/s path): one segment
        // at a time, no queue, the same RTT every round trip.
        let mut f = SizedFlow::new(FlowId(0), dst, 1_000_000, 0, 40000, 0);
        f.app_rate = Some(BitRate::gbps(1));
        h.add_flow(f);
        e.refresh(h0);
        e.run_until(2_000_000, u64::MAX);
        let Some(Node::TcpHost(h)) = e.node_mut(h0) else { panic!() };
        let s = &h.senders()[0];
        (s.rto(), s.srtt().expect("RTT sampled"), s.timeouts)
    };
    let (rfc, srtt, _) = rto_of(RtoRule::Rfc6298);
    assert!(srtt < min_rto, "the path's RTT {srtt} ns is below min_rto");
    assert_eq!(rfc, min_rto, "RFC 6298: max(min_rto, SRTT + 4 RTTVAR) = min_rto, {} ns above the RTT", min_rto - srtt);
    let (linux, srtt_l, timeouts) = rto_of(RtoRule::Linux);
    assert!(linux >= srtt_l + min_rto && linux <= srtt_l + min_rto + 1_000, "Linux: SRTT {srtt_l} + min_rto, got {linux}");
    assert_eq!(timeouts, 0);
    // Chosen by name; anything else is one clear error.
    let mut o = opts("newreno", Pattern::Pair(0, 15), 10_000);
    o.transport_params.insert("tcp.rto".into(), "linux".into());
    assert_eq!(run(shipped("leaf-spine-2x4"), &o).summary.flows[0].bytes_delivered, 10_000);
    o.transport_params.insert("tcp.rto".into(), "bsd".into());
    let topo = emu_orchestrator::config::topology::Topology::parse("l", shipped("leaf-spine-2x4")).unwrap();
    let e = emu_orchestrator::experiment::run(&topo, &o, &mut |_, _| {}).err().unwrap_or_else(|| panic!("tcp.rto=bsd accepted"));
    assert!(e.to_string().contains("tcp.rto=bsd") && e.to_string().contains("rfc6298 or linux"), "{e}");
}
