//! Switch-level tests: forwarding, the pipeline rules, the port serializer,
//! recirculation, mirroring, the packet generator, the CPU port, ECMP.

use bytes::BytesMut;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use weft_core::fabric::FabricSpec;
use weft_core::switch::*;
use weft_schemes::ecmp::Ecmp;
use weft_testkit::{drain, Entering};
use weft_tofino::program::{CpuCx, IngressCx, PacketSource};
use weft_tofino::program::{Declarations, MirrorRequest, PacketGenerator};
use weft_tofino::{Gress, Program, ProgramError, TargetProfile, TmConfig};
use weft_tofino::{RegisterId, TableKind};
use weft_wire::frame::FrameInfo;
use weft_wire::ids::{NodeId, PortId, QueueId};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::Ipv4Address;
use weft_wire::{arp, ethernet, ipv4, EtherType, EthernetAddress};

fn fabric(hosts: usize, uplinks: usize, rate: BitRate) -> FabricSpec {
    let f = weft_testkit::leaf_pair(hosts, uplinks, rate);
    f.validate().unwrap();
    f
}

fn config() -> SwitchConfig {
    let target = TargetProfile::tofino2();
    SwitchConfig {
        tm: TmConfig::standard(32, 9_000_000, target.cell_bytes, None),
        target,
        snapshot_period_ns: 1000,
        cpu_latency_ns: 5000,
        seed: 42,
        strict: false,
    }
}

fn leaf(f: &FabricSpec, program: Box<dyn Program>) -> Switch {
    Switch::with_program(NodeId(0), &f.nodes[0], config(), program).unwrap()
}

/// A UDP frame from host port `from` of `f` to `dst`.
fn udp_frame(f: &FabricSpec, from: usize, dst: Ipv4Address, sport: u16, len: usize) -> BytesMut {
    let src = f.nodes[f.nodes[0].ports[from].peer.index()].as_host().unwrap().ip;
    weft_testkit::udp(Entering::port(f, 0, from, src, dst), sport, 5000, len)
}

const FAR: Ipv4Address = Ipv4Address::new(10, 0, 1, 2);

#[test]
fn forwards_with_ttl_and_mac_rewrite() {
    let f = fabric(2, 2, BitRate::gbps(100));
    let mut s = leaf(&f, Box::new(Ecmp::default()));
    let mut out = vec![];
    s.handle_frame(0, PortId(0), udp_frame(&f, 0, Ipv4Address::new(10, 0, 0, 3), 1, 200), &mut out);
    assert_eq!(out.len(), 1);
    let t = &out[0];
    assert_eq!(t.port, PortId(1));
    let info = FrameInfo::parse(&t.frame).unwrap();
    assert_eq!(info.ip.unwrap().ttl, 63);
    let eth = ethernet::Frame::new_checked(&t.frame[..]).unwrap();
    assert_eq!(eth.src_addr(), f.nodes[0].ports[1].mac);
    assert_eq!(eth.dst_addr(), f.nodes[0].ports[1].peer_mac);
}

#[test]
fn answers_arp_for_the_gateway_only() {
    let f = fabric(1, 1, BitRate::gbps(100));
    let mut s = leaf(&f, Box::new(Ecmp::default()));
    let host_mac_ = f.nodes[0].ports[0].peer_mac;
    let mk = |target| {
        let mut b = BytesMut::zeroed(42);
        ethernet::Repr { dst: EthernetAddress::BROADCAST, src: host_mac_, vlan_tci: None, ethertype: EtherType::Arp }.emit(&mut b);
        arp::Repr {
            operation: arp::Operation::Request,
            sender_hw: host_mac_,
            sender_ip: Ipv4Address::new(10, 0, 0, 2),
            target_hw: EthernetAddress::default(),
            target_ip: target,
        }
        .emit(&mut b[14..]);
        b
    };
    let mut out = vec![];
    s.handle_frame(0, PortId(0), mk(Ipv4Address::new(10, 0, 0, 9)), &mut out);
    assert!(out.is_empty());
    s.handle_frame(0, PortId(0), mk(Ipv4Address::new(10, 0, 0, 1)), &mut out);
    assert_eq!(out.len(), 1);
    let r = arp::Repr::parse(&arp::Packet::new_checked(&out[0].frame[14..]).unwrap());
    assert_eq!(r.operation, arp::Operation::Reply);
    assert_eq!(r.sender_hw, f.nodes[0].ports[0].mac);
    assert_eq!(r.target_hw, host_mac_);
}

#[test]
fn bad_frames_are_counted_and_dropped() {
    let f = fabric(2, 1, BitRate::gbps(100));
    let mut s = leaf(&f, Box::new(Ecmp::default()));
    let mut out = vec![];
    let good = udp_frame(&f, 0, FAR, 1, 100);
    let mut bad_csum = good.clone();
    bad_csum[14 + 8] = 3; // TTL changed without checksum update
    s.handle_frame(0, PortId(0), bad_csum, &mut out);
    s.handle_frame(0, PortId(0), BytesMut::from(&good[..20]), &mut out);
    s.handle_frame(0, PortId(0), BytesMut::zeroed(1600), &mut out);
    let mut other = good.clone();
    other[12..14].copy_from_slice(&0x1234u16.to_be_bytes());
    s.handle_frame(0, PortId(0), other, &mut out);
    let mut ttl1 = udp_frame(&f, 0, FAR, 1, 100);
    ipv4::Packet::new_unchecked(&mut ttl1[14..]).decrement_ttl();
    for _ in 0..62 {
        ipv4::Packet::new_unchecked(&mut ttl1[14..]).decrement_ttl();
    }
    s.handle_frame(0, PortId(0), ttl1, &mut out);
    let mut wrong_mac = good.clone();
    wrong_mac[0] = 0x0a;
    s.handle_frame(0, PortId(0), wrong_mac, &mut out);
    s.handle_frame(0, PortId(0), udp_frame(&f, 0, Ipv4Address::new(192, 0, 2, 1), 1, 100), &mut out);
    let c = s.counters();
    assert_eq!(
        (c.drop_malformed, c.drop_oversize, c.drop_unknown_ethertype, c.drop_ttl, c.drop_not_for_us, c.drop_no_route),
        (2, 1, 1, 1, 1, 1)
    );
    assert!(out.is_empty());
    // A random byte soup never panics.
    let mut x = 0x1234_5678_9abc_def0u64;
    for _ in 0..5000 {
        let mut g = good.clone();
        for _ in 0..3 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = x as usize % g.len();
            g[i] = (x >> 40) as u8;
        }
        s.handle_frame(0, PortId(0), g, &mut out);
    }
}

#[test]
fn port_drains_at_line_rate_exactly() {
    let f = fabric(2, 1, BitRate::gbps(100));
    let mut s = leaf(&f, Box::new(Ecmp::default()));
    let mut out = vec![];
    for i in 0..100 {
        s.handle_frame(0, PortId(0), udp_frame(&f, 0, Ipv4Address::new(10, 0, 0, 3), i, 1500), &mut out);
    }
    drain(&mut s, u64::MAX, &mut out);
    assert_eq!(out.len(), 100);
    assert_eq!(out[0].end - out[0].start, 120, "1500 B at 100 Gbit/s is 120 ns");
    for w in out.windows(2) {
        assert_eq!(w[1].start, w[0].end, "back to back, never earlier");
    }
    assert_eq!(out[99].end, 100 * 120);
}

struct DoubleAccess {
    reg: Option<RegisterId>,
}
impl Program for DoubleAccess {
    fn name(&self) -> &'static str {
        "double-access"
    }
    fn declare(&mut self, d: &mut Declarations) {
        self.reg = Some(d.register("counter", Gress::Ingress, 2, 16, 32));
    }
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let r = self.reg.unwrap_or(RegisterId(0));
        cx.register(r, 0, |v| (v + 1, ()))?;
        cx.register(r, 1, |v| (v + 1, ()))?;
        cx.forward(cx.group[0]);
        Ok(())
    }
}

#[test]
fn a_double_register_access_in_one_pass_is_a_program_error() {
    let f = fabric(2, 1, BitRate::gbps(100));
    let mut s = leaf(&f, Box::new(DoubleAccess { reg: None }));
    let mut out = vec![];
    s.handle_frame(0, PortId(0), udp_frame(&f, 0, FAR, 1, 100), &mut out);
    assert!(out.is_empty(), "the packet is dropped");
    assert_eq!(s.counters().program_errors, 1);
    assert!(matches!(s.last_program_error(), Some(ProgramError::DoubleAccess { stage: 2, .. })));
}

#[test]
#[should_panic(expected = "accessed twice in one pass")]
fn strict_switches_fail_loudly_on_program_errors() {
    let f = fabric(2, 1, BitRate::gbps(100));
    let mut cfg = config();
    cfg.strict = true;
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(DoubleAccess { reg: None })).unwrap();
    s.handle_frame(0, PortId(0), udp_frame(&f, 0, FAR, 1, 100), &mut vec![]);
}

struct Greedy;
impl Program for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn declare(&mut self, d: &mut Declarations) {
        for i in 0..5 {
            d.register(&format!("r{i}"), Gress::Ingress, 3, 1024, 32);
        }
    }
    fn ingress(&mut self, _cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        Ok(())
    }
}

struct BigTable;
impl Program for BigTable {
    fn name(&self) -> &'static str {
        "big-table"
    }
    fn declare(&mut self, d: &mut Declarations) {
        d.table(weft_tofino::resources::TableDecl {
            name: "huge".into(),
            gress: Gress::Egress,
            stage: 5,
            kind: TableKind::Ternary,
            entries: 20_000,
            key_bits: 100,
            action_bits: 32,
        });
    }
    fn ingress(&mut self, _cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        Ok(())
    }
}

#[test]
fn programs_over_budget_are_rejected_with_the_resource_named() {
    let f = fabric(1, 1, BitRate::gbps(100));
    let e = Switch::with_program(NodeId(0), &f.nodes[0], config(), Box::new(Greedy)).unwrap_err().to_string();
    assert!(e.contains("ingress stage 3 needs 5 stateful ALUs, the target has 4"), "{e}");
    assert!(e.contains("r0, r1, r2, r3, r4"), "{e}");
    let e = Switch::with_program(NodeId(0), &f.nodes[0], config(), Box::new(BigTable)).unwrap_err().to_string();
    assert!(e.contains("egress stage 5 needs 120 TCAM blocks, the target has 24"), "{e}");
    // The same program fits the unlimited target.
    let mut cfg = config();
    cfg.target = TargetProfile::unlimited();
    assert!(Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(Greedy)).is_ok());
    // And a 12-stage Tofino1 rejects a stage-15 register.
    struct Deep;
    impl Program for Deep {
        fn name(&self) -> &'static str {
            "deep"
        }
        fn declare(&mut self, d: &mut Declarations) {
            d.register("late", Gress::Ingress, 15, 16, 32);
        }
        fn ingress(&mut self, _cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
            Ok(())
        }
    }
    let mut cfg = config();
    cfg.target = TargetProfile::tofino1();
    let e = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(Deep)).unwrap_err().to_string();
    assert!(e.contains("pipeline stages") && e.contains("register `late`"), "{e}");
}

/// Recirculates every packet once, mirrors a truncated copy to the CPU, and
/// counts generator packets.
#[derive(Default, Clone)]
struct Features {
    seen: std::sync::Arc<std::sync::Mutex<FeatureLog>>,
}
#[derive(Default, Debug)]
struct FeatureLog {
    generated: u64,
    cpu_frames: Vec<usize>,
    second_pass_at: Vec<Nanos>,
}
impl Program for Features {
    fn name(&self) -> &'static str {
        "features"
    }
    fn declare(&mut self, d: &mut Declarations) {
        d.packet_generator(PacketGenerator { id: 7, period_ns: 1000, frame_len: 64 });
    }
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        match cx.source {
            PacketSource::Generator(7) => {
                self.seen.lock().unwrap().generated += 1;
                cx.drop_packet();
            }
            PacketSource::Port(_) => {
                cx.recirculate();
                cx.decision.mirror = Some(MirrorRequest { port: None, queue: QueueId(0), truncate: Some(64) });
            }
            PacketSource::Recirculated { pass, .. } => {
                assert_eq!(pass, 1);
                self.seen.lock().unwrap().second_pass_at.push(cx.now);
                cx.forward(cx.group[0]);
            }
            _ => {}
        }
        Ok(())
    }
    fn cpu_receive(&mut self, _cx: &mut CpuCx<'_>, frame: &[u8]) {
        self.seen.lock().unwrap().cpu_frames.push(frame.len());
    }
}

#[test]
fn recirculation_mirroring_generator_and_cpu_port() {
    let f = fabric(2, 1, BitRate::gbps(100));
    let features = Features::default();
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], config(), Box::new(features.clone())).unwrap();
    let mut out = vec![];
    s.handle_frame(0, PortId(0), udp_frame(&f, 0, Ipv4Address::new(10, 0, 0, 3), 9, 1000), &mut out);
    assert!(out.is_empty(), "first pass recirculates");
    drain(&mut s, 10_500, &mut out);
    assert_eq!(out.len(), 1, "delivered after the second pass");
    // 1000 B at 400 Gbit/s = 20 ns, plus 1 us recirculation latency.
    assert_eq!(out[0].start, 1_020);
    let c = *s.counters();
    assert_eq!((c.recirculations, c.mirrored, c.to_cpu), (1, 1, 0));
    assert_eq!(c.generated, 10, "one generator packet per microsecond");
    let log = features.seen.lock().unwrap();
    assert_eq!(log.generated, 10);
    assert_eq!(log.second_pass_at, vec![1_020]);
    // The mirrored copy reached the CPU truncated to 64 B (25 Gbit/s PCIe + 5 us latency).
    assert_eq!(log.cpu_frames, vec![64]);
}

#[test]
fn ecmp_spreads_10000_flows_over_8_uplinks_within_10_percent() {
    let f = fabric(1, 8, BitRate::gbps(100));
    let mut s = leaf(&f, Box::new(Ecmp::default()));
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut per_port = [0u32; 16];
    let mut first_port = Vec::new();
    let mut out = vec![];
    for i in 0..10_000u32 {
        let dst = Ipv4Address::new(10, 0, 1, rand::Rng::random_range(&mut rng, 2..200));
        let sport = rand::Rng::random::<u16>(&mut rng);
        let mut fr = udp_frame(&f, 0, dst, sport, 100);
        // Random source address too.
        let src = Ipv4Address::new(10, 0, 0, rand::Rng::random_range(&mut rng, 2..250));
        fr[26..30].copy_from_slice(&src.octets());
        ipv4::Packet::new_unchecked(&mut fr[14..]).fill_checksum();
        s.handle_frame(i as u64 * 1000, PortId(0), fr.clone(), &mut out);
        let t = out.pop().unwrap();
        per_port[t.port.index()] += 1;
        first_port.push((fr, t.port));
    }
    let mean = 10_000.0 / 8.0;
    for (p, &n) in per_port.iter().enumerate().skip(1).take(8) {
        let dev = (n as f64 - mean).abs() / mean;
        assert!(dev <= 0.10, "uplink {p}: {n} flows, {:.1}% from the mean", dev * 100.0);
    }
    // All packets of a flow take one path.
    for (i, (fr, port)) in first_port.iter().take(500).enumerate() {
        for k in 0..5 {
            s.handle_frame(20_000_000 + (i as u64 * 5 + k) * 1000, PortId(0), fr.clone(), &mut out);
            assert_eq!(out.pop().unwrap().port, *port);
        }
    }
    // A failed uplink's flows move to the remaining ones; the others stay.
    s.set_port_up(30_000_000, PortId(3), false, &mut out);
    let mut moved = 0;
    for (i, (fr, port)) in first_port.iter().enumerate() {
        s.handle_frame(30_000_000 + i as u64 * 1000, PortId(0), fr.clone(), &mut out);
        let now_port = out.pop().unwrap().port;
        if *port == PortId(3) {
            assert_ne!(now_port, PortId(3));
            moved += 1;
        } else {
            assert_eq!(now_port, *port);
        }
    }
    assert_eq!(moved, per_port[3]);
}

#[test]
fn ingress_sees_a_queue_depth_snapshot_egress_the_exact_depth() {
    struct Probe {
        seen: std::sync::Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
    }
    impl Program for Probe {
        fn name(&self) -> &'static str {
            "probe"
        }
        fn declare(&mut self, _d: &mut Declarations) {}
        fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
            let p = cx.group[0];
            self.seen.lock().unwrap().push((cx.now, cx.depths.port_bytes(p)));
            // Cells as the hardware reports them: 1000 B frames are 6 cells of 176 B.
            assert_eq!(cx.depths.queue_cells(p, QueueId(0)) * 1000, cx.depths.queue_bytes(p, QueueId(0)) * 6);
            cx.forward(p);
            Ok(())
        }
    }
    let f = fabric(2, 1, BitRate::gbps(1));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], config(), Box::new(Probe { seen: seen.clone() })).unwrap();
    let mut out = vec![];
    for i in 0..5u64 {
        s.handle_frame(i * 100, PortId(0), udp_frame(&f, 0, Ipv4Address::new(10, 0, 0, 3), 1, 1000), &mut out);
    }
    s.handle_frame(1_500, PortId(0), udp_frame(&f, 0, Ipv4Address::new(10, 0, 0, 3), 1, 1000), &mut out);
    // Exact depth now: 4 frames queued behind the one on the wire.
    assert_eq!(s.traffic_manager().port_bytes(PortId(1)), 5000);
    let seen = seen.lock().unwrap();
    // The snapshot is refreshed at most every microsecond: within the first
    // microsecond ingress keeps seeing the depth of t = 0 (empty).
    assert_eq!(seen[..5].iter().map(|x| x.1).collect::<Vec<_>>(), vec![0, 0, 0, 0, 0]);
    assert_eq!(seen[5], (1_500, 4000));
}

/// Punts every packet to the CPU; the control plane writes a register,
/// which the data plane sees only after the control-plane latency.
#[derive(Default)]
struct ControlPlane {
    reg: Option<RegisterId>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(Nanos, u64)>>>,
}
impl Program for ControlPlane {
    fn name(&self) -> &'static str {
        "control-plane"
    }
    fn declare(&mut self, d: &mut Declarations) {
        self.reg = Some(d.register("route_version", Gress::Ingress, 0, 1, 32));
    }
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let r = self.reg.unwrap_or(RegisterId(0));
        let v = cx.register(r, 0, |v| (v, v))?;
        self.seen.lock().unwrap().push((cx.now, v));
        if v == 0 {
            cx.to_cpu();
        }
        cx.forward(cx.group[0]);
        Ok(())
    }
    fn cpu_receive(&mut self, cx: &mut CpuCx<'_>, _frame: &[u8]) {
        cx.register_writes.push((self.reg.unwrap_or(RegisterId(0)), 0, 7));
    }
}

#[test]
fn cpu_port_and_control_plane_register_writes_take_the_configured_latency() {
    let f = fabric(2, 1, BitRate::gbps(100));
    let cp = ControlPlane::default();
    let seen = cp.seen.clone();
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], config(), Box::new(cp)).unwrap();
    let mut out = vec![];
    s.handle_frame(0, PortId(0), udp_frame(&f, 0, FAR, 1, 100), &mut out);
    assert!(out.is_empty(), "punted to the CPU, not forwarded");
    // The CPU gets it after the CPU port (25 Gbit/s) + 5 us latency and
    // writes the register 5 us later.
    s.handle_frame(9_000, PortId(0), udp_frame(&f, 0, FAR, 1, 100), &mut out);
    drain(&mut s, 12_000, &mut out);
    s.handle_frame(12_000, PortId(0), udp_frame(&f, 0, FAR, 1, 100), &mut out);
    assert_eq!(s.counters().to_cpu, 2);
    assert_eq!(s.registers().cpu_read(RegisterId(0), 0), Some(7));
    assert_eq!(*seen.lock().unwrap(), vec![(0, 0), (9_000, 0), (12_000, 7)]);
    assert_eq!(out.len(), 1, "the third packet is forwarded");
}

/// Pauses queue 5 of the egress port on the first packet and resumes it on
/// the fourth (ConWeave's use of Tofino2 advanced flow control).
struct Holder {
    n: u32,
}
impl Program for Holder {
    fn name(&self) -> &'static str {
        "holder"
    }
    fn declare(&mut self, _d: &mut Declarations) {}
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let out = cx.group[0];
        self.n += 1;
        match self.n {
            1 => cx.pause_queue(out, QueueId(5)),
            4 => cx.resume_queue(out, QueueId(5)),
            _ => {}
        }
        cx.forward(out);
        cx.decision.queue = Some(if self.n == 4 { QueueId(0) } else { QueueId(5) });
        Ok(())
    }
}

#[test]
fn the_pipeline_pauses_and_resumes_a_queue() {
    let f = fabric(2, 1, BitRate::gbps(100));
    let mut cfg = config();
    cfg.tm.pause_leak_packets = 0;
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(Holder { n: 0 })).unwrap();
    let mut out = vec![];
    for i in 0..3u16 {
        s.handle_frame(i as u64 * 1000, PortId(0), udp_frame(&f, 0, FAR, 100 + i, 200), &mut out);
    }
    drain(&mut s, 10_000, &mut out);
    assert!(out.is_empty(), "queue 5 is paused: nothing leaves");
    assert_eq!(s.traffic_manager().queue_len(PortId(2), QueueId(5)), 3);
    s.handle_frame(10_000, PortId(0), udp_frame(&f, 0, FAR, 103, 200), &mut out);
    drain(&mut s, 20_000, &mut out);
    let sports: Vec<u16> = out.iter().map(|t| FrameInfo::parse(&t.frame).unwrap().ip.unwrap().src_port).collect();
    assert_eq!(sports.len(), 4);
    // The resume frees queue 5 at once (100 leaves first); 103 in queue 0
    // then shares the port with queue 5 by DWRR. Held packets keep their order.
    assert_eq!(sports, vec![100, 103, 101, 102]);
}

/// Recirculates every packet from a port once and logs what the second pass
/// is told about it.
#[derive(Default, Clone)]
struct RecirculationLog {
    second_passes: std::sync::Arc<std::sync::Mutex<Vec<(PortId, u8)>>>,
}
impl Program for RecirculationLog {
    fn name(&self) -> &'static str {
        "recirculation-log"
    }
    fn declare(&mut self, _d: &mut Declarations) {}
    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        match cx.source {
            PacketSource::Port(_) => cx.recirculate(),
            PacketSource::Recirculated { original, pass } => {
                self.second_passes.lock().unwrap().push((original, pass));
                cx.forward(cx.group[0]);
            }
            _ => {}
        }
        Ok(())
    }
}

#[test]
fn a_recirculated_packet_dropped_in_the_traffic_manager_takes_its_metadata_along() {
    // A 1000 B buffer and no guaranteed minimum for the recirculation
    // queue: the 1400 B frame from port 1 cannot enter it; the 100 B frames
    // from ports 0 and 2 can.
    let f = fabric(3, 1, BitRate::gbps(100));
    let mut cfg = config();
    cfg.tm = TmConfig::standard(32, 1_000, cfg.target.cell_bytes, None);
    cfg.target.recirculation_min_cells = 0;
    let log = RecirculationLog::default();
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(log.clone())).unwrap();
    let mut out = vec![];
    for (port, len) in [(0, 100), (1, 1400), (2, 100)] {
        s.handle_frame(0, PortId(port), udp_frame(&f, port as usize, FAR, 9, len), &mut out);
    }
    drain(&mut s, 100_000, &mut out);
    assert_eq!(s.counters().recirculations, 3);
    assert_eq!(s.counters().drop_recirculation, 1, "the 1400 B frame is dropped at the recirculation port");
    assert_eq!(s.counters().drop_tm, 0);
    // Each surviving packet learns its own ingress port (a side queue of
    // metadata shifted the third packet's onto the dropped one's: port 1).
    assert_eq!(*log.second_passes.lock().unwrap(), vec![(PortId(0), 1), (PortId(2), 1)]);
}

/// A leaf of `f` on the `bmv2` target with a fixed per-packet time.
fn bmv2_leaf(f: &FabricSpec, per_packet_ns: Nanos, jitter: f64, input_buffer: u32) -> Switch {
    let mut target = TargetProfile::bmv2();
    let sw = target.software.as_mut().unwrap();
    sw.per_packet_ns = per_packet_ns;
    sw.jitter = jitter;
    sw.input_buffer_packets = input_buffer;
    let cfg = SwitchConfig { tm: TmConfig::standard(8, 1 << 30, target.cell_bytes, None), target, ..config() };
    Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(Ecmp::default())).unwrap()
}

#[test]
fn a_software_target_serves_one_packet_at_a_time_across_ports() {
    // 6 frames arrive at once on two ports; the one ingress thread takes
    // 100 µs for each, so they leave at 100, 200, ... 600 µs, in arrival
    // order, whatever port they came in on (the links are fast).
    let f = fabric(2, 2, BitRate::gbps(100));
    let mut s = bmv2_leaf(&f, 100_000, 0.0, 1024);
    let mut out = vec![];
    for i in 0..6u16 {
        s.handle_frame(0, PortId(i % 2), udp_frame(&f, (i % 2) as usize, FAR, 100 + i, 200), &mut out);
    }
    assert!(out.is_empty(), "nothing leaves before the pipeline served it");
    drain(&mut s, 10_000_000, &mut out);
    let starts: Vec<Nanos> = out.iter().map(|t| t.start).collect();
    assert_eq!(starts, vec![100_000, 200_000, 300_000, 400_000, 500_000, 600_000]);
    let sports: Vec<u16> = out.iter().map(|t| FrameInfo::parse(&t.frame).unwrap().ip.unwrap().src_port).collect();
    assert_eq!(sports, (100..106).collect::<Vec<u16>>());
}

#[test]
fn a_software_target_drops_what_its_full_input_buffer_cannot_hold() {
    // One frame in service and 3 waiting fill a 3-packet buffer: of 10
    // frames at once, 4 go through and 6 are counted as input-buffer drops.
    let f = fabric(2, 2, BitRate::gbps(100));
    let mut s = bmv2_leaf(&f, 50_000, 0.0, 3);
    let mut out = vec![];
    for i in 0..10u16 {
        s.handle_frame(0, PortId(0), udp_frame(&f, 0, FAR, 100 + i, 200), &mut out);
    }
    drain(&mut s, 10_000_000, &mut out);
    assert_eq!(out.len(), 4);
    assert_eq!(s.counters().drop_input_buffer, 6);
    assert_eq!(s.counters().drops(), 6);
}

#[test]
fn a_software_targets_jitter_keeps_the_mean_per_packet_time() {
    // 2 000 frames queued at once under exponential service (jitter 1):
    // the last leaves after about 2 000 x 100 µs (within 5 %), and the gaps
    // vary (not all equal).
    let f = fabric(2, 2, BitRate::gbps(100));
    let mut s = bmv2_leaf(&f, 100_000, 1.0, 4096);
    let mut out = vec![];
    for i in 0..2000u16 {
        s.handle_frame(0, PortId(0), udp_frame(&f, 0, FAR, i, 100), &mut out);
    }
    drain(&mut s, u64::MAX / 2, &mut out);
    assert_eq!(out.len(), 2000);
    let last = out.last().unwrap().start as f64;
    assert!((last / 200_000_000.0 - 1.0).abs() < 0.05, "last departure {last} ns");
    let gaps: Vec<Nanos> = out.windows(2).map(|w| w[1].start - w[0].start).collect();
    assert!(gaps.iter().any(|&g| g < 50_000) && gaps.iter().any(|&g| g > 200_000), "exponential gaps spread");
}

#[test]
fn a_port_rated_in_packets_holds_every_frame_for_a_full_size_frames_time() {
    // BMv2's queue rates count packets: at 12 Mbit/s a 1 514-byte frame
    // takes 1 009.3 µs, and so does the slot of a 100-byte one.
    let mut f = fabric(2, 2, BitRate::mbps(12));
    if let weft_core::fabric::NodeKind::Switch(sw) = &mut f.nodes[0].kind {
        sw.queue_rate_packets = true;
    }
    let target = TargetProfile::tofino2();
    let cfg = SwitchConfig { tm: TmConfig::standard(32, 9_000_000, target.cell_bytes, None), target, ..config() };
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(Ecmp::default())).unwrap();
    let mut out = vec![];
    for i in 0..3u16 {
        s.handle_frame(0, PortId(0), udp_frame(&f, 0, Ipv4Address::new(10, 0, 0, 3), i, 100), &mut out);
    }
    drain(&mut s, 1_000_000_000, &mut out);
    let slot = BitRate::mbps(12).serialization_ns(1514);
    let starts: Vec<Nanos> = out.iter().map(|t| t.start).collect();
    assert_eq!(starts, vec![0, slot, 2 * slot]);
    // The frame itself is on the wire for its own length only.
    assert_eq!(out[0].end - out[0].start, BitRate::mbps(12).serialization_ns(out[0].frame.len()));
}

/// A pause of a set duration (`PfcConfig::pause_ns`, `--set tm.pfc_pause`)
/// goes out as the quanta that last that long at the port's own rate; the
/// default is a fixed 977 quanta.
#[test]
fn a_pause_frame_carries_the_quanta_of_its_duration_at_the_ports_rate() {
    use weft_tofino::tm::PfcConfig;
    use weft_wire::pfc;
    for (rate, pause_ns, quanta) in [
        (BitRate::gbps(25), None, 977),
        (BitRate::gbps(100), Some(5_000), 977),
        (BitRate::gbps(25), Some(5_000), 244),
        (BitRate(102_123_552_123), Some(5_000), 997),
    ] {
        let f = fabric(2, 1, rate);
        let mut cfg = config();
        cfg.tm = TmConfig::standard(32, 100_000, cfg.target.cell_bytes, None);
        cfg.tm.pfc = Some(PfcConfig { pause_ns, ..PfcConfig::default() });
        let mut s = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(Ecmp::default())).unwrap();
        let mut out = vec![];
        // Two hosts at line rate into one uplink of the same rate: 200 KB
        // into a 100 KB buffer.
        for i in 0..100u16 {
            for port in 0..2 {
                s.handle_frame(i as u64 * 10, PortId(port), udp_frame(&f, port as usize, FAR, 100 + i, 1000), &mut out);
            }
        }
        drain(&mut s, 100_000, &mut out);
        let sent: Vec<u16> = out
            .iter()
            .filter(|t| ethernet::Frame::new_checked(&t.frame[..]).unwrap().ethertype() == EtherType::MacControl)
            .filter_map(|t| pfc::Repr::parse(&t.frame[ethernet::HEADER_LEN..]).ok())
            .flat_map(|r| r.quanta.into_iter().filter(|&q| q != 0))
            .collect();
        assert!(!sent.is_empty(), "{rate:?}: the overfull buffer sends pauses");
        assert!(sent.iter().all(|&q| q == quanta), "{rate:?} {pause_ns:?}: pauses of {sent:?} quanta, expected {quanta}");
    }
}

/// `SwitchSpec::control_frame_bytes` (`weft run --frame-bytes`): a port
/// charges a RoCEv2 ACK the set bytes of wire time, any other frame its
/// length.
#[test]
fn a_port_charges_a_control_frame_its_set_bytes_of_wire_time() {
    let mut f = fabric(2, 1, BitRate::gbps(100));
    if let weft_core::fabric::NodeKind::Switch(s) = &mut f.nodes[0].kind {
        s.control_frame_bytes = weft_wire::frame::ControlFrameBytes { ack: Some(50), ..Default::default() };
    }
    let src = f.nodes[f.nodes[0].ports[0].peer.index()].as_host().unwrap().ip;
    let rocev2 = |opcode: u8| {
        let mut frame = weft_testkit::udp(Entering::port(&f, 0, 0, src, FAR), 7, weft_wire::udp::ROCEV2_PORT, 100);
        frame[42] = opcode;
        frame
    };
    for (opcode, charged) in [(0x11, Some(50)), (0x04, None)] {
        let frame = rocev2(opcode);
        let wire_bytes = charged.unwrap_or(frame.len());
        let mut s = leaf(&f, Box::new(Ecmp::default()));
        let mut out = vec![];
        s.handle_frame(0, PortId(0), frame, &mut out);
        drain(&mut s, 10_000, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].end - out[0].start, BitRate::gbps(100).serialization_ns(wire_bytes), "opcode {opcode:#x}");
    }
}
