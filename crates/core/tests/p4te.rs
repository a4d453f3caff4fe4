//! The P4TE program (p4te-techreport §6), exact: Algorithm 1's queue-depth
//! events and Algorithm 4's regrouping replayed on the paper's Fig. 5;
//! Algorithm 3's table per traffic class; FACKs (§6.4) with valid
//! checksums and the window the paper gives; and, inside a whole switch,
//! regrouping only after the control-plane latency with every port in
//! exactly one group at every instant.

use bytes::BytesMut;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use weft_core::switch::{Switch, SwitchConfig, Transmit};
use weft_schemes::p4te::P4te;
use weft_schemes::Params;
use weft_testkit::{drain, leaf_pair, Entering, FAR, H0};
use weft_tofino::l3::{Route, RouteTable};
use weft_tofino::program::{
    declarations_of, CpuCx, EgressCx, EmitTarget, EmittedFrame, IngressCx, IngressDecision, PacketSource, PassRegisters, QueueDepths,
    SwitchView,
};
use weft_tofino::registers::PassState;
use weft_tofino::{Gress, Program, RegisterFile, RegisterId, SwitchRole, TableFile, TableId};
use weft_wire::frame::FrameInfo;
use weft_wire::ids::{NodeId, PortId, QueueId};
use weft_wire::p4te::{self as hdr, Event, Feedback, FeedbackKind};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::{ethernet, ipv4, tcp, Ipv4Address};

struct NoDepths;
impl QueueDepths for NoDepths {
    fn queue_bytes(&self, _: PortId, _: QueueId) -> u64 {
        0
    }
    fn port_bytes(&self, _: PortId) -> u64 {
        0
    }
    fn queue_cells(&self, _: PortId, _: QueueId) -> u64 {
        0
    }
}

/// A leaf with one host (port 0) and four uplinks (ports 1–4) to 10.0.1.0/24.
fn view() -> SwitchView {
    SwitchView {
        address: Ipv4Address::new(10, 255, 0, 1),
        role: SwitchRole::Leaf,
        leaf_index: Some(0),
        leaves: 2,
        upper_fanout: 1,
        host_facing: vec![true, false, false, false, false],
        rates: vec![BitRate::gbps(10); 5],
        mtus: vec![1500; 5],
        queues_per_port: 32,
        pfc: false,
        routes: vec![
            Route { prefix: Ipv4Address::new(10, 0, 0, 0), len: 24, ports: vec![PortId(0)], dst_leaf: Some(0) },
            Route { prefix: Ipv4Address::new(10, 0, 1, 0), len: 24, ports: (1..=4).map(PortId).collect(), dst_leaf: Some(1) },
        ],
        tier_position: None,
        hosts_per_leaf: 1,
        leaf_addresses: vec![Ipv4Address::new(10, 0, 0, 2), Ipv4Address::new(10, 0, 1, 2)],
    }
}

/// The program on [`view`] with its registers and tables as the switch
/// loads them (meters and tables from its control-plane initialisation;
/// `with_meters` false leaves the meters unconfigured: every packet green).
struct Loaded {
    p: P4te,
    regs: RegisterFile,
    tables: TableFile,
    routes: RouteTable,
    reg_names: Vec<String>,
    table_names: Vec<String>,
    serial: u64,
}

impl Loaded {
    fn new(set: &[(&str, &str)], with_meters: bool) -> Self {
        let params: Params = set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut p = P4te::from_params(&params).expect("parameters");
        let d = declarations_of(&mut p);
        let v = view();
        p.attach(&v);
        let usage = d.into_parts().usage;
        let mut regs = RegisterFile::new(&usage.registers).with_meters(&usage.meters);
        let mut tables = TableFile::new(&usage.tables);
        let init = p.control_plane_init();
        if with_meters {
            for (m, i, c) in init.meters {
                regs.configure_meter(m, i, c).expect("meter");
            }
        }
        for (t, k, d) in init.tables {
            tables.cpu_write(t, k, Some(d)).expect("table");
        }
        Loaded {
            p,
            regs,
            tables,
            routes: RouteTable::with_data(&v.routes, |_| None),
            reg_names: usage.registers.iter().map(|r| r.name.clone()).collect(),
            table_names: usage.tables.iter().map(|t| t.name.clone()).collect(),
            serial: 0,
        }
    }
    fn reg(&self, name: &str) -> RegisterId {
        RegisterId(self.reg_names.iter().position(|n| n == name).expect("register") as u16)
    }
    fn table(&self, name: &str) -> TableId {
        TableId(self.table_names.iter().position(|n| n == name).expect("table") as u16)
    }
    /// Group → member ports of a metric's table.
    fn groups(&self, metric: &str) -> Vec<(u64, Vec<u16>)> {
        let t = self.table(&format!("p4te_up_{metric}"));
        self.tables.entries(t).into_iter().map(|(g, m)| (g, (0..64).filter(|p| m & (1 << p) != 0).collect())).collect()
    }

    /// One packet through egress on `port` seeing queue depth `depth`;
    /// returns what egress emitted.
    fn egress(&mut self, now: Nanos, port: u16, depth: u64) -> Vec<EmittedFrame> {
        self.serial += 1;
        let mut frame = weft_testkit::udp(Entering::port(&leaf_pair(1, 4, BitRate::gbps(10)), 0, 0, H0, FAR), 7, 5000, 1000);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut cx = EgressCx {
            now,
            frame: &mut frame,
            in_port: Some(PortId(0)),
            bridged: 0,
            rng: &mut rng,
            port: PortId(port),
            port_rate: BitRate::gbps(10),
            queue: QueueId(0),
            enq_ts: now,
            enq_depth: depth,
            deq_depth: depth,
            depths: &NoDepths,
            drop: false,
            consume: false,
            flow_control: Vec::new(),
            registers: PassRegisters::new(&mut self.regs, PassState::new(self.serial, Gress::Egress)),
            tables: &self.tables,
            emit: Vec::new(),
            mirror: None,
        };
        self.p.egress(&mut cx).expect("egress");
        cx.emit
    }

    /// The CPU handles `frame`; its table writes are applied (as the switch
    /// does after the control-plane latency); returns how many there were.
    fn cpu(&mut self, frame: &[u8]) -> usize {
        let mut cx = CpuCx {
            now: 0,
            register_writes: Vec::new(),
            table_writes: Vec::new(),
            timers: Vec::new(),
            send: Vec::new(),
            regs: &self.regs,
            tables: &self.tables,
            port_up: &[true; 5],
            port_stats: &[],
            depths: &NoDepths,
        };
        self.p.cpu_receive(&mut cx, frame);
        let writes = cx.table_writes;
        for (t, k, d) in &writes {
            self.tables.cpu_write(*t, *k, *d).expect("write");
        }
        writes.len()
    }

    /// One packet through ingress from `port`; returns the decision.
    fn ingress(&mut self, now: Nanos, port: u16, frame: &mut BytesMut) -> IngressDecision {
        self.serial += 1;
        let info = FrameInfo::parse(frame).expect("frame");
        let group: Vec<PortId> = self.routes.lookup(info.ip.expect("ip").dst).map(|g| g.to_vec()).unwrap_or_default();
        let mut rng = ChaCha8Rng::seed_from_u64(self.serial);
        let mut decision = IngressDecision::default();
        let mut cx = IngressCx {
            now,
            frame,
            info: &info,
            source: PacketSource::Port(PortId(port)),
            group: &group,
            port_up: &[true; 5],
            port_rates: &[BitRate::gbps(10); 5],
            depths: &NoDepths,
            rng: &mut rng,
            hash_seed: 1,
            route_data: Some(1),
            claimed: false,
            decision: &mut decision,
            routes: &self.routes,
            registers: PassRegisters::new(&mut self.regs, PassState::new(self.serial, Gress::Ingress)),
            tables: &self.tables,
        };
        self.p.ingress(&mut cx).expect("ingress");
        decision
    }
}

fn cpu_feedback(emitted: &[EmittedFrame]) -> Vec<Feedback> {
    emitted.iter().filter(|e| e.target == EmitTarget::Cpu).map(|e| Feedback::parse(&e.frame).expect("feedback")).collect()
}

#[test]
fn figure_5_queue_depth_events_and_regrouping_replayed_exactly() {
    // Fig. 5: upward ports 3 and 4, Δ = 10 (depths in packets here; the
    // rule does not care about the unit), three routing groups.
    let mut l = Loaded::new(&[("queue_delta_bytes", "10"), ("groups", "3")], false);
    // The state before Fig. 5-a, built with the algorithm itself: port 3
    // last reported 30 (an increase from 0), port 4 last reported 45.
    let pre3 = cpu_feedback(&l.egress(1_000, 3, 30));
    let pre4 = cpu_feedback(&l.egress(2_000, 4, 45));
    assert_eq!((pre3.len(), pre4.len()), (1, 1));
    assert_eq!((pre3[0].queue, pre3[0].queue_bytes, pre4[0].queue), (Event::Increase, 30, Event::Increase));
    l.cpu(&pre3[0].frame());
    l.cpu(&pre4[0].frame());
    assert_eq!(l.groups("queue_depth"), vec![(0, vec![1, 2]), (1, vec![3, 4])], "each increase moved its port one group down");
    // Fig. 5-b: P1 at port 3 sees 39 (no event: 39 < 30 + 10), P2 at port
    // 3 sees 40 (increase), P3 at port 4 sees 30 (decrease: 30 < 45 - 10).
    assert!(cpu_feedback(&l.egress(3_000, 3, 39)).is_empty(), "no feedback between ±Δ");
    let p2 = cpu_feedback(&l.egress(3_100, 3, 40));
    let p3 = cpu_feedback(&l.egress(3_200, 4, 30));
    assert_eq!(p2, vec![Feedback { kind: FeedbackKind::Local, port: 3, queue: Event::Increase, queue_bytes: 40, ..p2[0] }]);
    assert_eq!(p3, vec![Feedback { kind: FeedbackKind::Local, port: 4, queue: Event::Decrease, queue_bytes: 30, ..p3[0] }]);
    assert_eq!((p2[0].util, p3[0].util), (Event::None, Event::None), "unconfigured meters stay green");
    assert_eq!(l.regs.cpu_read(l.reg("p4te_old_queue_depths"), 3), Some(40));
    assert_eq!(l.regs.cpu_read(l.reg("p4te_old_queue_depths"), 4), Some(30));
    // One feedback per Δ: 41..49 at port 3 report nothing.
    for d in 41..50 {
        assert!(cpu_feedback(&l.egress(4_000 + d, 3, d)).is_empty(), "depth {d}");
    }
    // Fig. 5-e/f: port 3 moves down to the lowest-priority group, port 4
    // back up to the highest; each move is two entries written in one batch.
    assert_eq!(l.cpu(&p2[0].frame()), 2);
    assert_eq!(l.cpu(&p3[0].frame()), 2);
    assert_eq!(l.groups("queue_depth"), vec![(0, vec![1, 2, 4]), (2, vec![3])], "group 1 is empty and removed");
    // The other metrics' tables are untouched.
    assert_eq!(l.groups("delay"), vec![(0, vec![1, 2, 3, 4])]);
    // At the bound nothing moves: another increase of port 3 writes nothing.
    let more = cpu_feedback(&l.egress(5_000, 3, 60));
    assert_eq!(l.cpu(&more[0].frame()), 0);
}

/// A TCP data segment h0 → far with TOS `tos` entering the leaf on port 0.
fn tcp_segment(tos: u8, sport: u16, seq: u32, window: u16) -> BytesMut {
    let f = leaf_pair(1, 4, BitRate::gbps(10));
    let at = Entering::port(&f, 0, 0, H0, FAR);
    let mut b = weft_testkit::udp(at, sport, 5201, 14 + 20 + 20 + 1000);
    let l3 = ethernet::HEADER_LEN;
    ipv4::Repr {
        src: H0,
        dst: FAR,
        protocol: ipv4::Protocol::Tcp,
        dscp: tos >> 2,
        ecn: ipv4::Ecn::Ect0,
        ident: 1,
        ttl: 64,
        payload_len: 1020,
    }
    .emit(&mut b[l3..]);
    tcp::Repr { src_port: sport, dst_port: 5201, seq, ack: 9, flags: tcp::flags::ACK, window }.emit(&mut b[l3 + 20..]);
    tcp::Packet::new_unchecked(&mut b[l3 + 20..]).fill_checksum(H0, FAR);
    b
}

#[test]
fn algorithm_3_takes_each_class_from_its_table_and_colour() {
    let mut l = Loaded::new(&[], false);
    // The CPU has spread the tables: delay's best group {1}, queue depth's
    // {2}, utilisation's {3}.
    for (m, port) in [("delay", 1u16), ("queue_depth", 2), ("utilization", 3)] {
        let t = l.table(&format!("p4te_up_{m}"));
        l.tables.cpu_write(t, 0, Some(1 << port)).unwrap();
        l.tables.cpu_write(t, 1, Some(0b11110 & !(1 << port))).unwrap();
    }
    let colours = l.reg("p4te_port_utilizations");
    let pick = |l: &mut Loaded, tos: u8, sport: u16| {
        l.ingress(10_000 * sport as u64, 0, &mut tcp_segment(tos, sport, 1, 512)).verdict.forward_port()
    };
    // All ports green: short (0x10) → the low-delay port, large (0x08) →
    // the low-utilisation port, unclassified → the low-queue-depth port.
    assert_eq!(pick(&mut l, 0x10, 1), Some(PortId(1)));
    assert_eq!(pick(&mut l, 0x08, 2), Some(PortId(3)));
    assert_eq!(pick(&mut l, 0x00, 3), Some(PortId(2)));
    // The low-delay port turns yellow: a new short flowlet takes the
    // low-queue-depth port; red: the low-utilisation port.
    l.regs.cpu_write(colours, 0, 1 << 2).unwrap();
    assert_eq!(pick(&mut l, 0x10, 4), Some(PortId(2)));
    l.regs.cpu_write(colours, 0, 2 << 2).unwrap();
    assert_eq!(pick(&mut l, 0x10, 5), Some(PortId(3)));
    // The low-utilisation port red: a new large flowlet takes low delay.
    l.regs.cpu_write(colours, 0, 2 << 6).unwrap();
    assert_eq!(pick(&mut l, 0x08, 6), Some(PortId(1)));
    // Inside its flowlet a flow keeps its port whatever the colours.
    l.regs.cpu_write(colours, 0, 0).unwrap();
    assert_eq!(l.ingress(60_001, 0, &mut tcp_segment(0x08, 6, 2, 512)).verdict.forward_port(), Some(PortId(1)));
}

/// The receiver's ACK far → h0 (`ack`), entering the leaf from uplink 1
/// with a hop header, as the fabric carries it.
fn receiver_ack(ack: u32) -> BytesMut {
    let mut b = tcp_segment(0x00, 5201, 9, 1024);
    let l3 = 14;
    ipv4::Repr { src: FAR, dst: H0, protocol: ipv4::Protocol::Tcp, dscp: 0, ecn: ipv4::Ecn::NotEct, ident: 2, ttl: 63, payload_len: 20 }
        .emit(&mut b[l3..]);
    b.truncate(14 + 40);
    tcp::Repr { src_port: 5201, dst_port: 40000, seq: 9, ack, flags: tcp::flags::ACK, window: 1024 }.emit(&mut b[34..]);
    tcp::Packet::new_unchecked(&mut b[34..]).fill_checksum(FAR, H0);
    hdr::insert(&mut b, l3, &hdr::Hop::default()).expect("insert");
    b
}

#[test]
fn a_class_over_its_safe_rate_gets_a_fack_with_the_papers_window_and_valid_checksums() {
    // Safe rate of the large class: 1 % of 10 Gbit/s = 100 Mbit/s, burst
    // one frame: back-to-back 1 KB segments exceed it from the second on.
    let mut l = Loaded::new(&[("classes", "short:0x10:65,large:0x08:1"), ("meter_burst_us", "1")], true);
    let colours = l.reg("p4te_port_utilizations");
    let first = l.ingress(1_000, 0, &mut tcp_segment(0x08, 40000, 1000, 1024));
    assert!(first.emit.is_empty(), "under the safe rate: no rate control");
    // Over the safe rate, but the leaf has seen no ACK of the flow yet: a
    // FACK would acknowledge data the receiver may lack, so none is sent.
    let d = l.ingress(1_001, 0, &mut tcp_segment(0x08, 40000, 2000, 1024));
    assert!(d.emit.is_empty());
    // The receiver's ACK (ack 1500) goes down to the host: the leaf keeps it.
    let d = l.ingress(1_002, 1, &mut receiver_ack(1500));
    assert_eq!(d.verdict.forward_port(), Some(PortId(0)));
    // Over the safe rate, port green: a window increase of 1/256.
    let d = l.ingress(1_003, 0, &mut tcp_segment(0x08, 40000, 3000, 1024));
    let port = d.verdict.forward_port().expect("forwarded");
    let fack = d.emit.iter().find(|e| e.target == EmitTarget::Port(PortId(0), QueueId(0))).expect("a FACK to the sender");
    let check = |f: &BytesMut, window: u16, ack: u32| {
        let info = FrameInfo::parse(f).expect("frame");
        let ip = info.ip.expect("ip");
        assert_eq!((ip.src, ip.dst, ip.src_port, ip.dst_port), (FAR, H0, 5201, 40000), "from the receiver to the sender");
        assert!(hdr::find(f, 14).is_none(), "the sender's own leaf hands it over without the hop header");
        assert!(ipv4::Packet::new_checked(&f[14..]).unwrap().verify_checksum());
        let seg = tcp::Packet::new_checked(&f[ip.l4_offset as usize..]).unwrap();
        assert!(seg.verify_checksum(FAR, H0), "TCP checksum valid");
        assert_eq!((seg.window(), seg.ack(), seg.seq(), seg.flags()), (window, ack, 9, tcp::flags::ACK));
    };
    check(&fack.frame, 1024 + 4, 1500);
    // Within B = 5000 bytes of that rate control the leaf blocks another.
    let d = l.ingress(1_004, 0, &mut tcp_segment(0x08, 40000, 4000, 1024));
    assert!(d.emit.is_empty());
    // The chosen port turns yellow; past B: a window decrease of 1/4 and
    // an ECN mark; the FACK acknowledges the receiver's last ACK.
    let mut ack = receiver_ack(6500);
    let d = l.ingress(1_005, 1, &mut ack);
    assert_eq!(d.verdict.forward_port(), Some(PortId(0)));
    assert!(hdr::find(&ack, 14).is_none(), "stripped before the host");
    l.regs.cpu_write(colours, 0, 1 << (2 * port.0)).unwrap();
    let mut data = tcp_segment(0x08, 40000, 8000, 1024);
    let d = l.ingress(1_006, 0, &mut data);
    let fack = d.emit.iter().find(|e| matches!(e.target, EmitTarget::Port(..))).expect("a FACK");
    check(&fack.frame, 768, 6500);
    let ip = ipv4::Packet::new_checked(&data[14..]).unwrap();
    assert_eq!(ip.ecn(), ipv4::Ecn::Ce, "the data packet is ECN-marked");
    assert!(ip.verify_checksum());
    let hop = hdr::read(&data, hdr::find(&data, 14).unwrap()).unwrap();
    assert_ne!(hop.flags & hdr::flags::RATE_CONTROL_APPLIED, 0, "no later switch acts on it");
}

#[test]
fn the_cpu_regroups_after_its_latency_and_the_data_plane_never_sees_a_half_updated_group() {
    // A whole switch: leaf0 with 4 uplinks at 1 Gbit/s; a burst of one
    // short flow builds a queue on its uplink, which reports queue-depth
    // events; the CPU moves the port after the control-plane latency.
    let f = leaf_pair(1, 4, BitRate::gbps(1));
    let latency: Nanos = 50_000;
    let cfg = SwitchConfig { snapshot_period_ns: 0, cpu_latency_ns: latency, ..SwitchConfig::tofino2(5, true) };
    let params: Params = [("queue_delta_bytes", "3000")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(P4te::from_params(&params).unwrap())).unwrap();
    let upward: u64 = 0b11110;
    let groups = |s: &Switch| s.table_entries("p4te_up_queue_depth").expect("table");
    let initial = groups(&s);
    assert_eq!(initial, vec![(0, upward)], "Alg. 4 initialisation: every upward port in the highest-priority group");
    let mut out: Vec<Transmit> = Vec::new();
    for i in 0..40u32 {
        s.handle_frame(1_000, PortId(0), tcp_segment(0x10, 7, 1 + i * 1000, 1024), &mut out);
    }
    let (mut first_event, mut first_change) = (None, None);
    let mut t = 1_000;
    while t < 2_000_000 {
        t += 500;
        drain(&mut s, t, &mut out);
        let g = groups(&s);
        // Every upward port in exactly one group at every instant.
        let union = g.iter().fold(0u64, |a, (_, m)| a | m);
        let total: u32 = g.iter().map(|(_, m)| m.count_ones()).sum();
        assert_eq!((union, total), (upward, 4), "at {t} ns: {g:?}");
        let events = s.scheme_counters().into_iter().find(|(k, _)| *k == "p4te_queue_events").map_or(0, |(_, v)| v);
        if events > 0 && first_event.is_none() {
            first_event = Some(t);
        }
        if g != initial && first_change.is_none() {
            first_change = Some(t);
        }
    }
    let (ev, ch) = (first_event.expect("queue events"), first_change.expect("a regrouping"));
    // Punting to the CPU and applying its writes each take the latency.
    assert!(ch >= ev + 2 * latency - 500, "event at {ev} ns, tables changed at {ch} ns");
    assert!(ch <= ev + 2 * latency + 20_000, "event at {ev} ns, tables changed at {ch} ns");
    assert!(s.counters().program_errors == 0, "{:?}", s.last_program_error());
}
