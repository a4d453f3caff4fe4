//! The Program API that LBSP, INT best-nexthop and P4TE are written on,
//! each part proven by a small test program on a whole switch:
//! frames a program claims, port-status events, the switch CPU
//! with tables, timers and a view of ports and queues, the egress context,
//! program-defined route data, the verdict's precedence, and state egress
//! publishes to ingress in a declared array.

use bytes::BytesMut;
use std::sync::{Arc, Mutex};
use weft_core::fabric::{switch_address, FabricSpec};
use weft_core::switch::{Switch, SwitchConfig, Transmit};
use weft_testkit::{drain, leaf_pair, Entering, FAR, H0};
use weft_tofino::l3::Route;
use weft_tofino::program::{
    port_down_port, CpuCx, Declarations, EgressCx, EmitTarget, IngressCx, PacketSource, PortDownGenerator, SwitchView, Verdict,
};
use weft_tofino::resources::TableDecl;
use weft_tofino::tables::TableId;
use weft_tofino::{Gress, Program, ProgramError, TableKind};
use weft_wire::frame::FrameInfo;
use weft_wire::ids::{NodeId, PortId, QueueId};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::{ethernet, EtherType};

const LATENCY: Nanos = 5_000;
const HELLO: u16 = 0x88b6;

fn switch(f: &FabricSpec, program: impl Program + 'static) -> Switch {
    let cfg = SwitchConfig { cpu_latency_ns: LATENCY, snapshot_period_ns: 0, ..SwitchConfig::tofino2(1, true) };
    Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(program)).unwrap()
}

/// What a test program saw, shared with the test.
#[derive(Default, Debug)]
struct Seen {
    events: Vec<String>,
}

type Log = Arc<Mutex<Seen>>;

fn log(l: &Log, s: String) {
    l.lock().unwrap().events.push(s);
}

fn events(l: &Log) -> Vec<String> {
    l.lock().unwrap().events.clone()
}

/// A switch-to-switch hello frame (its own ethertype) entering `port`.
fn hello(f: &FabricSpec, port: usize) -> BytesMut {
    let p = &f.nodes[0].ports[port];
    let mut b = BytesMut::zeroed(64);
    ethernet::Repr { dst: p.mac, src: p.peer_mac, vlan_tci: None, ethertype: EtherType::Unknown(HELLO) }.emit(&mut b);
    b
}

/// (a) Claims hello frames and IPv4 to the switch's own address.
struct Claimer {
    log: Log,
    address: Option<weft_wire::Ipv4Address>,
}

impl Program for Claimer {
    fn name(&self) -> &'static str {
        "claimer"
    }
    fn declare(&mut self, _d: &mut Declarations) {}
    fn attach(&mut self, view: &SwitchView) {
        self.address = Some(view.address);
    }
    fn claim(&self, info: &FrameInfo, for_switch: bool) -> bool {
        for_switch || matches!(info.kind, weft_wire::frame::FrameKind::Other(HELLO))
    }
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let to = cx.info.ip.map(|i| i.dst);
        log(&self.log, format!("{:?} claimed={} to_me={} group={}", cx.source, cx.claimed, to == self.address, cx.group.len()));
        if cx.claimed {
            cx.consume();
        } else {
            cx.forward(cx.group[0]);
        }
        Ok(())
    }
}

#[test]
fn a_program_receives_the_frames_it_claims_and_only_those() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let l = Log::default();
    let mut s = switch(&f, Claimer { log: l.clone(), address: None });
    let mut out: Vec<Transmit> = Vec::new();
    s.handle_frame(0, PortId(1), hello(&f, 1), &mut out);
    // IPv4 addressed to the switch itself (TTL 1: still delivered).
    let mut to_me = weft_testkit::udp(Entering::port(&f, 0, 0, H0, switch_address(NodeId(0))), 7, 7, 100);
    let mut ip = weft_wire::ipv4::Packet::new_unchecked(&mut to_me[14..]);
    while ip.ttl() > 1 {
        ip.decrement_ttl();
    }
    s.handle_frame(10, PortId(0), to_me, &mut out);
    s.handle_frame(20, PortId(0), weft_testkit::udp(Entering::port(&f, 0, 0, H0, FAR), 7, 7, 100), &mut out);
    assert_eq!(
        events(&l),
        vec![
            "Port(PortId(1)) claimed=true to_me=false group=0",
            "Port(PortId(0)) claimed=true to_me=true group=0",
            "Port(PortId(0)) claimed=false to_me=false group=2"
        ]
    );
    let c = s.counters();
    assert_eq!((c.consumed_by_program, c.drop_unknown_ethertype, c.drop_ttl, c.drop_no_route), (2, 0, 0, 0));
    assert_eq!(out.len(), 1, "the routed frame is forwarded");

    // Without the claim the front end drops both kinds, as before.
    struct Silent;
    impl Program for Silent {
        fn name(&self) -> &'static str {
            "silent"
        }
        fn declare(&mut self, _d: &mut Declarations) {}
        fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
            cx.forward(cx.group[0]);
            Ok(())
        }
    }
    let mut s = switch(&f, Silent);
    s.handle_frame(0, PortId(1), hello(&f, 1), &mut out);
    s.handle_frame(10, PortId(0), weft_testkit::udp(Entering::port(&f, 0, 0, H0, switch_address(NodeId(0))), 7, 7, 100), &mut out);
    let c = s.counters();
    assert_eq!((c.drop_unknown_ethertype, c.drop_no_route, c.consumed_by_program), (1, 1, 0));
}

/// (b) + (c): port-down packets from the generator, port status and timers
/// on the CPU, CPU table writes after the control-plane latency, table
/// lookups in the pipeline, the CPU's view of ports and queues.
struct FailOver {
    log: Log,
    failed: Option<TableId>,
}

impl Program for FailOver {
    fn name(&self) -> &'static str {
        "fail-over"
    }
    fn declare(&mut self, d: &mut Declarations) {
        self.failed = Some(d.table(TableDecl {
            name: "failed_ports".into(),
            gress: Gress::Ingress,
            stage: 2,
            kind: TableKind::Exact,
            entries: 64,
            key_bits: 16,
            action_bits: 16,
        }));
        d.port_down_generator(PortDownGenerator { id: 9, frame_len: 64 });
        d.port_status_to_cpu();
    }
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let Some(failed) = self.failed else { return Ok(()) };
        if let PacketSource::Generator(9) = cx.source {
            log(&self.log, format!("{} generator: port {:?} down", cx.now, port_down_port(cx.frame)));
            cx.consume();
            return Ok(());
        }
        // The first uplink unless the CPU listed it as failed.
        let first = cx.group[0];
        let port = match cx.table(failed, first.0 as u64)? {
            Some(alt) => PortId(alt as u16),
            None => first,
        };
        cx.forward(port);
        Ok(())
    }
    fn cpu_port_status(&mut self, cx: &mut CpuCx<'_>, port: PortId, up: bool) {
        let Some(failed) = self.failed else { return };
        log(&self.log, format!("{} cpu: port {} up={up} (sees up={})", cx.now, port.0, cx.port_up[port.index()]));
        // Route around it: the other uplink of a two-spine leaf.
        let other = if port.0 == 1 { 2 } else { 1 };
        cx.write_table(failed, port.0 as u64, (!up).then_some(other));
        cx.timer(cx.now + 100_000, port.0 as u64);
    }
    fn cpu_timer(&mut self, cx: &mut CpuCx<'_>, token: u64) {
        let s = cx.port_stats[2];
        log(
            &self.log,
            format!(
                "{} cpu timer {token}: port 2 sent {} frames, queue 0 holds {} B",
                cx.now,
                s.tx_frames,
                cx.depths.queue_bytes(PortId(2), QueueId(0))
            ),
        );
    }
}

#[test]
fn port_down_reaches_the_generator_and_the_cpu_whose_table_writes_apply_after_the_latency() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let l = Log::default();
    let mut s = switch(&f, FailOver { log: l.clone(), failed: None });
    let mut out: Vec<Transmit> = Vec::new();
    let frame = |sport| weft_testkit::udp(Entering::port(&f, 0, 0, H0, FAR), sport, 7, 200);
    s.handle_frame(0, PortId(0), frame(1), &mut out);
    assert_eq!(out.last().map(|t| t.port), Some(PortId(1)));
    s.set_port_up(1_000, PortId(1), false, &mut out);
    // The CPU hears of it after the control-plane latency, and its table
    // write takes effect one latency later: until then the packet goes to
    // the down port and is counted there.
    let applied = 1_000 + 2 * LATENCY;
    drain(&mut s, applied - 1, &mut out);
    s.handle_frame(applied - 1, PortId(0), frame(2), &mut out);
    assert_eq!(s.counters().drop_link_down, 1);
    drain(&mut s, applied, &mut out);
    out.clear();
    s.handle_frame(applied, PortId(0), frame(3), &mut out);
    assert_eq!(out.last().map(|t| t.port), Some(PortId(2)), "the CPU's table entry moves the traffic");
    drain(&mut s, 200_000, &mut out);
    s.set_port_up(200_000, PortId(1), true, &mut out);
    drain(&mut s, 200_000 + 2 * LATENCY, &mut out);
    out.clear();
    s.handle_frame(200_000 + 2 * LATENCY, PortId(0), frame(4), &mut out);
    assert_eq!(out.last().map(|t| t.port), Some(PortId(1)), "back after recovery");
    drain(&mut s, 400_000, &mut out);
    assert_eq!(
        events(&l),
        vec![
            "1000 generator: port Some(PortId(1)) down",
            "6000 cpu: port 1 up=false (sees up=false)",
            "106000 cpu timer 1: port 2 sent 1 frames, queue 0 holds 0 B",
            "205000 cpu: port 1 up=true (sees up=true)",
            "305000 cpu timer 1: port 2 sent 1 frames, queue 0 holds 0 B",
        ]
    );
}

/// (d) The egress context: ingress port, bridged metadata, the parsed
/// frame, the RNG, and frames emitted at egress.
struct Bridge {
    log: Log,
}

impl Program for Bridge {
    fn name(&self) -> &'static str {
        "bridge"
    }
    fn declare(&mut self, _d: &mut Declarations) {}
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        cx.bridge(0xbeef);
        cx.forward(cx.group[0]);
        Ok(())
    }
    fn egress(&mut self, cx: &mut EgressCx<'_>) -> Result<(), ProgramError> {
        let sport = cx.info().and_then(|i| i.five_tuple()).map(|t| t.3);
        let draw = rand::Rng::random_range(cx.rng, 0..1000u32) < 1000;
        log(&self.log, format!("{:?} {:#x} {:?} {} enq={}", cx.in_port, cx.bridged, sport, draw, cx.enq_ts));
        if cx.in_port.is_some() {
            // A telemetry copy to the other uplink (in the control queue).
            let copy = BytesMut::from(&cx.frame[..64]);
            cx.emit(EmitTarget::Port(PortId(2), QueueId(31)), copy);
        }
        Ok(())
    }
}

#[test]
fn egress_sees_the_ingress_port_bridged_metadata_and_the_frame_and_may_emit() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let l = Log::default();
    let mut s = switch(&f, Bridge { log: l.clone() });
    let mut out: Vec<Transmit> = Vec::new();
    // Two back to back: the first cuts through, the second waits in the queue.
    s.handle_frame(100, PortId(0), weft_testkit::udp(Entering::port(&f, 0, 0, H0, FAR), 11, 7, 1000), &mut out);
    s.handle_frame(100, PortId(0), weft_testkit::udp(Entering::port(&f, 0, 0, H0, FAR), 12, 7, 1000), &mut out);
    drain(&mut s, 10_000, &mut out);
    let ports: Vec<(u16, usize)> = out.iter().map(|t| (t.port.0, t.frame.len())).collect();
    assert_eq!(ports, vec![(1, 1000), (2, 64), (1, 1000), (2, 64)]);
    assert_eq!(
        events(&l),
        vec![
            "Some(PortId(0)) 0xbeef Some(11) true enq=100",
            "None 0x0 None true enq=100",
            "Some(PortId(0)) 0xbeef Some(12) true enq=100",
            "None 0x0 None true enq=180",
        ]
    );
}

/// A program that says it has no egress (`Program::has_egress`) gets no
/// egress pass: the same program's dropping egress runs only when it says
/// it has one.
struct DropsAtEgress {
    egress: bool,
    log: Log,
}

impl Program for DropsAtEgress {
    fn name(&self) -> &'static str {
        "drops-at-egress"
    }
    fn declare(&mut self, _d: &mut Declarations) {}
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        cx.forward(cx.group[0]);
        Ok(())
    }
    fn egress(&mut self, cx: &mut EgressCx<'_>) -> Result<(), ProgramError> {
        log(&self.log, "egress".into());
        cx.drop = true;
        Ok(())
    }
    fn has_egress(&self) -> bool {
        self.egress
    }
}

#[test]
fn a_program_without_egress_gets_no_egress_pass() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    for egress in [true, false] {
        let l = Log::default();
        let mut s = switch(&f, DropsAtEgress { egress, log: l.clone() });
        let mut out: Vec<Transmit> = Vec::new();
        for sport in [11, 12] {
            s.handle_frame(100, PortId(0), weft_testkit::udp(Entering::port(&f, 0, 0, H0, FAR), sport, 7, 1000), &mut out);
        }
        drain(&mut s, 10_000, &mut out);
        let (passes, sent, dropped) = (events(&l).len(), out.len(), s.counters().drop_program);
        assert_eq!((passes, sent, dropped), if egress { (2, 0, 2) } else { (0, 2, 0) }, "has_egress {egress}");
    }
}

/// (e) Route data the program defines: here the prefix length and the
/// group size, computed once per route at load.
struct RouteTags {
    log: Log,
}

impl Program for RouteTags {
    fn name(&self) -> &'static str {
        "route-tags"
    }
    fn declare(&mut self, _d: &mut Declarations) {}
    fn route_data(&self, route: &Route) -> Option<u32> {
        Some(route.len as u32 * 100 + route.ports.len() as u32)
    }
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        log(&self.log, format!("{:?} {:?}", cx.route_data, cx.route_data_of(H0)));
        cx.forward(cx.group[0]);
        Ok(())
    }
}

#[test]
fn ingress_gets_the_route_data_the_program_defined() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let l = Log::default();
    let mut s = switch(&f, RouteTags { log: l.clone() });
    let mut out: Vec<Transmit> = Vec::new();
    s.handle_frame(0, PortId(0), weft_testkit::udp(Entering::port(&f, 0, 0, H0, FAR), 1, 7, 200), &mut out);
    // far: a /24 behind 2 uplinks; h0: a /32 on one host port.
    assert_eq!(events(&l), vec!["Some(2402) Some(3201)"]);
}

/// (f) Verdicts meet by precedence, whatever order the program sets them.
struct Both;

impl Program for Both {
    fn name(&self) -> &'static str {
        "both"
    }
    fn declare(&mut self, _d: &mut Declarations) {}
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        cx.to_cpu();
        cx.forward(cx.group[0]);
        assert_eq!(cx.decision.verdict, Verdict::ToCpu);
        Ok(())
    }
}

#[test]
fn a_higher_verdict_wins_over_a_later_lower_one() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let mut s = switch(&f, Both);
    let mut out: Vec<Transmit> = Vec::new();
    s.handle_frame(0, PortId(0), weft_testkit::udp(Entering::port(&f, 0, 0, H0, FAR), 1, 7, 200), &mut out);
    assert_eq!(s.counters().to_cpu, 1);
    assert!(out.is_empty());
    let mut v = Verdict::Undecided;
    for (next, expect) in [
        (Verdict::Forward(PortId(3)), Verdict::Forward(PortId(3))),
        (Verdict::Forward(PortId(4)), Verdict::Forward(PortId(4))),
        (Verdict::Recirculate, Verdict::Recirculate),
        (Verdict::ToCpu, Verdict::Recirculate),
        (Verdict::Consume, Verdict::Consume),
        (Verdict::Drop, Verdict::Consume),
    ] {
        v.merge(next);
        assert_eq!(v, expect);
    }
}

/// (g) State egress measures and ingress decides on lives in a declared
/// egress-to-ingress array the resource check sees: here bytes sent per
/// port, read by ingress for every uplink.
struct BytesPerPort {
    log: Log,
    sent: Option<weft_tofino::RegisterId>,
    to_ingress: Option<weft_tofino::RegisterId>,
}

impl Program for BytesPerPort {
    fn name(&self) -> &'static str {
        "bytes-per-port"
    }
    fn declare(&mut self, d: &mut Declarations) {
        self.sent = Some(d.register("sent", Gress::Egress, 0, 8, 64));
        self.to_ingress = Some(d.egress_to_ingress("sent_to_ingress", 1, 8, 64));
    }
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let (Some(sent), Some(to_ingress)) = (self.sent, self.to_ingress) else { return Ok(()) };
        // Both uplinks read in one pass; egress's own array is out of reach.
        let seen = (cx.snapshot(to_ingress, 1)?, cx.snapshot(to_ingress, 2)?);
        log(&self.log, format!("{seen:?} {:?}", cx.snapshot(sent, 1).err()));
        // The least-loaded uplink.
        cx.forward(if seen.0 <= seen.1 { PortId(1) } else { PortId(2) });
        Ok(())
    }
    fn egress(&mut self, cx: &mut EgressCx<'_>) -> Result<(), ProgramError> {
        let (Some(sent), Some(to_ingress)) = (self.sent, self.to_ingress) else { return Ok(()) };
        let len = cx.frame.len() as u64;
        let total = cx.register(sent, cx.port.0 as u32, |v| (v + len, v + len))?;
        cx.publish(to_ingress, cx.port.0 as u32, total)
    }
}

#[test]
fn egress_publishes_state_that_ingress_reads_for_every_port_and_the_resource_check_counts() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let l = Log::default();
    let mut s = switch(&f, BytesPerPort { log: l.clone(), sent: None, to_ingress: None });
    let mut out: Vec<Transmit> = Vec::new();
    for (t, len) in [(0, 1000), (1_000, 600), (2_000, 300), (3_000, 100)] {
        s.handle_frame(t, PortId(0), weft_testkit::udp(Entering::port(&f, 0, 0, H0, FAR), 1, 7, len), &mut out);
        drain(&mut s, t + 900, &mut out);
    }
    let ports: Vec<u16> = out.iter().map(|t| t.port.0).collect();
    assert_eq!(ports, vec![1, 2, 2, 2]);
    assert_eq!(
        events(&l),
        vec![
            "(0, 0) Some(NotPublished(\"sent\"))",
            "(1000, 0) Some(NotPublished(\"sent\"))",
            "(1000, 600) Some(NotPublished(\"sent\"))",
            "(1000, 900) Some(NotPublished(\"sent\"))",
        ]
    );
    let r = s.resources().registers.iter().find(|r| r.name == "sent_to_ingress").map(|r| (r.gress, r.stage, r.entries));
    assert_eq!(r, Some((Gress::Ingress, 1, 8)));
}
