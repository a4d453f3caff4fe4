//! ConWeave mechanism tests on the two-leaf fabric of
//! [`leaf_pair`](weft_testkit::leaf_pair) (moved here from weft-schemes: they need a whole switch), with hand-made RoCEv2 frames and
//! exact expected outcomes (paper Fig. 8/9, Appendix A).

use bytes::BytesMut;
use weft_core::fabric::FabricSpec;
use weft_core::switch::{Switch, SwitchConfig, Transmit};
use weft_schemes::conweave::frames::{self, Connection};
use weft_schemes::conweave::ConWeave;
use weft_schemes::Params;
use weft_testkit::{leaf_pair, Entering};
use weft_tofino::TargetProfile;
use weft_wire::conweave::{self as cwire, ts16, CwBits, CwOpcode};
use weft_wire::frame::FrameInfo;
use weft_wire::ids::{NodeId, PortId, QueueId};
use weft_wire::roce::{self, BthPacket};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::{ipv4, Ipv4Address};

const H0: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
const FAR: Ipv4Address = Ipv4Address::new(10, 0, 1, 2);
const SPORT: u16 = 49_152;
const PAYLOAD: usize = 1000;

fn switch(f: &FabricSpec, node: usize, params: &[(&str, &str)]) -> Switch {
    let cfg = SwitchConfig { snapshot_period_ns: 0, ..SwitchConfig::tofino2(7, true) };
    let p: Params = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Switch::with_program(NodeId(node as u32), &f.nodes[node], cfg, Box::new(ConWeave::from_params(&p).unwrap())).unwrap()
}

/// A RoCEv2 WRITE Middle frame h0 → far arriving on `port` of switch `node`.
fn data(f: &FabricSpec, node: usize, port: u16, psn: u32) -> BytesMut {
    roce_write(f, node, port, (H0, FAR), 0, psn)
}

/// A RoCEv2 WRITE Middle frame `src` → `dst` with `dscp` arriving on `port` of switch `node`.
fn roce_write(f: &FabricSpec, node: usize, port: u16, (src, dst): (Ipv4Address, Ipv4Address), dscp: u8, psn: u32) -> BytesMut {
    weft_testkit::roce_write(Entering::port(f, node, port as usize, src, dst).dscp(dscp), SPORT, 17, psn, PAYLOAD)
}

const BTH: usize = 42;

/// `data` as the source ToR would have marked it.
fn marked(f: &FabricSpec, node: usize, port: u16, psn: u32, bits: CwBits, tx_ns: u64, tail_tx_ns: u64) -> BytesMut {
    let mut b = data(f, node, port, psn);
    cwire::insert_ts(&mut b, 14, BTH, ts16(tx_ns), ts16(tail_tx_ns)).unwrap();
    bits.write(&mut b, BTH).unwrap();
    b
}

fn bits(path: u8, epoch: u8, rerouted: bool, tail: bool) -> CwBits {
    CwBits { path, opcode: CwOpcode::Data, epoch, rerouted, tail }
}

fn run(s: &mut Switch, until: Nanos, out: &mut Vec<Transmit>) {
    while let Some(t) = s.poll_timeout() {
        if t > until {
            break;
        }
        s.handle_timeout(t, out);
    }
}

fn psn(f: &[u8]) -> u32 {
    BthPacket::new_checked(&f[BTH..]).unwrap().psn()
}

fn counter(s: &Switch, name: &str) -> u64 {
    s.scheme_counters().into_iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| v)
}

/// Control packets a switch sent, as (opcode, epoch, path).
fn controls(out: &[Transmit]) -> Vec<(CwOpcode, u8, u8)> {
    out.iter()
        .filter_map(|t| {
            let info = FrameInfo::parse(&t.frame).ok()?;
            let b = CwBits::read(&t.frame, info.ip?.bth_offset? as usize)?;
            b.opcode.is_control().then_some((b.opcode, b.epoch, b.path))
        })
        .collect()
}

// ---------------------------------------------------------------- DstToR

#[test]
fn data_inside_the_rack_shares_the_default_queue_with_conweave_traffic_and_control_keeps_its_queue() {
    // leaf0 with h0 (port 0) and h1 (port 1): RoCE data h1 → h0 in the RoCE
    // class (DSCP 26, class 3) would go to queue 3 by class, which this
    // program made a strict-priority reorder queue (paper §3.3: Q_0 is
    // common for all flows).
    let f = leaf_pair(2, 2, BitRate::gbps(100));
    let mut s = switch(&f, 0, &[]);
    let mut out = vec![];
    let h1 = Ipv4Address::new(10, 0, 0, 3);
    for n in 0..3 {
        s.handle_frame(n * 100, PortId(1), roce_write(&f, 0, 1, (h1, H0), 26, n as u32), &mut out);
    }
    // An ACK-class frame (DSCP 48) stays in the control queue.
    s.handle_frame(400, PortId(1), roce_write(&f, 0, 1, (h1, H0), 48, 9), &mut out);
    run(&mut s, 100_000, &mut out);
    let enq = |q: u8| s.queue_stats(PortId(0), QueueId(q)).enq_packets;
    assert_eq!(enq(0), 3, "data inside the rack goes to Q_0");
    assert_eq!((1..31).map(enq).sum::<u64>(), 0, "no data in a reorder queue");
    assert_eq!(enq(31), 1, "control stays in the control queue");
    assert_eq!(out.iter().filter(|t| t.port == PortId(0)).count(), 4);
}

/// leaf1: uplinks on ports 0 and 1, host `far` on port 2.
const HOST_PORT: PortId = PortId(2);

#[test]
fn rerouted_packets_that_overtake_the_tail_are_held_and_delivered_after_it_in_order() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let mut s = switch(&f, 1, &[]);
    let mut out = vec![];
    // OLD path via port 0: psn 0, 1. NEW path via port 1: REROUTED 3, 4
    // overtake the TAIL (psn 2); 5 comes after the TAIL.
    let arrivals = [
        (0, 0, 0, bits(0, 0, false, false)),
        (1_000, 0, 1, bits(0, 0, false, false)),
        (2_000, 1, 3, bits(1, 0, true, false)),
        (3_000, 1, 4, bits(1, 0, true, false)),
        (5_000, 0, 2, bits(0, 0, false, true)),
        (6_000, 1, 5, bits(1, 0, true, false)),
    ];
    let mut paused_seen = false;
    for (t, port, n, b) in arrivals {
        run(&mut s, t, &mut out);
        s.handle_frame(t, PortId(port), marked(&f, 1, port, n, b, t.saturating_sub(3_000), 1_500), &mut out);
        if n == 4 {
            let held: Vec<u8> = (1..31).filter(|q| s.traffic_manager().is_paused(HOST_PORT, QueueId(*q))).collect();
            assert_eq!(held.len(), 1, "one paused reorder queue for the connection");
            assert_eq!(s.traffic_manager().queue_len(HOST_PORT, QueueId(held[0])), 2, "3 and 4 are held");
            paused_seen = true;
        }
    }
    run(&mut s, 100_000, &mut out);
    assert!(paused_seen);
    let to_host: Vec<&Transmit> = out.iter().filter(|t| t.port == HOST_PORT).collect();
    assert_eq!(to_host.iter().map(|t| psn(&t.frame)).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4, 5]);
    // The TAIL leaves before the held packets (strictly after it).
    let tail_end = to_host[2].end;
    assert!(to_host[3].start >= tail_end && to_host[4].start >= to_host[3].end);
    // The host gets exactly what the sender emitted: no ConWeave header,
    // reserved bits zero, ICRC valid.
    for t in &to_host {
        let orig = data(&f, 1, 0, psn(&t.frame));
        assert_eq!(t.frame.len(), orig.len());
        assert_eq!(&t.frame[BTH..], &orig[BTH..], "psn {}", psn(&t.frame));
        assert!(roce::verify_icrc(&t.frame[14..]).unwrap());
    }
    // CLEAR for epoch 0 goes back towards h0 on an uplink.
    let up: Vec<Transmit> = out.into_iter().filter(|t| t.port != HOST_PORT).collect();
    assert_eq!(controls(&up), vec![(CwOpcode::Clear, 0, 0)]);
    assert_eq!(counter(&s, "conweave_resume_on_tail"), 1);
    assert_eq!(counter(&s, "conweave_held_packets"), 2);
    assert_eq!(counter(&s, "conweave_resume_expiries"), 0);
}

/// Loses the TAIL: the held packets leave when T_resume expires, and the
/// estimate follows Appendix A.
/// (time the held packet left, expected T_resume, PSNs at the host, controls sent).
type LostTail = (Nanos, Nanos, Vec<u32>, Vec<(CwOpcode, u8, u8)>);

fn lost_tail(update: bool) -> LostTail {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let mut s = switch(&f, 1, &[]);
    let mut out = vec![];
    // OLD psn 0 sent at 0 arrives at 0; psn 1 sent at 1024 arrives at 1000.
    // The TAIL was sent at 2048 and is lost. REROUTED psn 3 arrives at 3000.
    s.handle_frame(0, PortId(0), marked(&f, 1, 0, 0, bits(0, 0, false, false), 0, 0), &mut out);
    s.handle_frame(1_000, PortId(0), marked(&f, 1, 0, 1, bits(0, 0, false, false), 1_024, 0), &mut out);
    run(&mut s, 3_000, &mut out);
    s.handle_frame(3_000, PortId(1), marked(&f, 1, 1, 3, bits(1, 0, true, false), 4_096, 2_048), &mut out);
    let mut expected = 1_000 + 1_024 + 16_000;
    if update {
        // A later OLD packet (sent at 2048 - 1024, arriving at 6000)
        // re-estimates: 6000 + (2048 - 1024) + 16 µs.
        run(&mut s, 6_000, &mut out);
        s.handle_frame(6_000, PortId(0), marked(&f, 1, 0, 2, bits(0, 0, false, false), 1_024, 0), &mut out);
        expected = 6_000 + 1_024 + 16_000;
    }
    run(&mut s, 1_000_000, &mut out);
    let held = out.iter().find(|t| t.port == HOST_PORT && psn(&t.frame) == 3).expect("psn 3 delivered").start;
    let order = out.iter().filter(|t| t.port == HOST_PORT).map(|t| psn(&t.frame)).collect();
    assert_eq!(counter(&s, "conweave_resume_expiries"), 1);
    (held, expected, order, controls(&out))
}

#[test]
fn losing_the_tail_flushes_the_queue_at_t_resume() {
    for update in [false, true] {
        let (left, t_resume, order, ctl) = lost_tail(update);
        // The timer packet circles every ~1 µs: the queue resumes at the first
        // pass at or after T_resume.
        assert!(left >= t_resume && left < t_resume + 1_200, "update {update}: left at {left}, T_resume {t_resume}");
        let want: Vec<u32> = if update { vec![0, 1, 2, 3] } else { vec![0, 1, 3] };
        assert_eq!(order, want);
        assert_eq!(ctl, vec![(CwOpcode::Clear, 0, 1)], "the expiry sends CLEAR");
    }
}

/// A REROUTED packet that opens its epoch at the DstToR has no OLD packet
/// of that epoch to estimate T_resume from, though the previous epoch's
/// were seen: it waits θ_resume_default + θ_resume_extra (the authors'
/// phase-0 cache is reset by a new epoch's phase-1 packet,
/// conweave-routing.cc `RouteInput`). With the previous epoch's reference it
/// would expire at 1000 + (2048 − 1024) + 16 µs, long before its TAIL.
#[test]
fn a_rerouted_packet_opening_its_epoch_waits_the_default_t_resume() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let mut s = switch(&f, 1, &[("theta_resume_extra_us", "16"), ("theta_resume_default_us", "200")]);
    let mut out = vec![];
    // Epoch 0: OLD psn 0 and 1.
    s.handle_frame(0, PortId(0), marked(&f, 1, 0, 0, bits(0, 0, false, false), 0, 0), &mut out);
    s.handle_frame(1_000, PortId(0), marked(&f, 1, 0, 1, bits(0, 0, false, false), 1_024, 0), &mut out);
    run(&mut s, 3_000, &mut out);
    // Epoch 1 opens with REROUTED psn 3 (its TAIL, sent at 2048, is lost).
    s.handle_frame(3_000, PortId(1), marked(&f, 1, 1, 3, bits(1, 1, true, false), 4_096, 2_048), &mut out);
    run(&mut s, 1_000_000, &mut out);
    let left = out.iter().find(|t| t.port == HOST_PORT && psn(&t.frame) == 3).expect("psn 3 delivered").start;
    let t_resume = 3_000 + 200_000 + 16_000;
    assert!(left >= t_resume && left < t_resume + 1_200, "left at {left}, T_resume {t_resume}");
    assert_eq!(counter(&s, "conweave_resume_expiries"), 1);
}

#[test]
fn rtt_request_and_ecn_marks_are_answered_with_reply_and_notify() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let mut s = switch(&f, 1, &[]);
    let mut out = vec![];
    let mut req = bits(1, 2, false, false);
    req.opcode = CwOpcode::RttRequest;
    s.handle_frame(0, PortId(1), marked(&f, 1, 1, 0, req, 0, 0), &mut out);
    let mut ce = marked(&f, 1, 1, 1, bits(1, 2, false, false), 0, 0);
    ipv4::Packet::new_unchecked(&mut ce[14..]).set_ecn(ipv4::Ecn::Ce);
    s.handle_frame(1_000, PortId(1), ce, &mut out);
    run(&mut s, 10_000, &mut out);
    assert_eq!(controls(&out), vec![(CwOpcode::RttReply, 2, 1), (CwOpcode::Notify, 2, 1)]);
    // Control packets are truncated and in the control queue.
    for t in out.iter().filter(|t| t.port != HOST_PORT) {
        assert_eq!(t.frame.len(), frames::CONTROL_LEN);
        assert_eq!(FrameInfo::parse(&t.frame).unwrap().ip.unwrap().dscp, frames::CONTROL_DSCP);
    }
}

// ---------------------------------------------------------------- SrcToR

/// leaf0: host h0 on port 0, uplinks on ports 1 and 2.
struct Src {
    f: FabricSpec,
    s: Switch,
}

impl Src {
    fn new(params: &[(&str, &str)]) -> Self {
        let f = leaf_pair(1, 2, BitRate::gbps(100));
        let s = switch(&f, 0, params);
        Src { f, s }
    }
    /// Sends data psn `n` from h0 at `t`: (uplink, ConWeave bits, TAIL_TX).
    fn send(&mut self, t: Nanos, n: u32) -> (PortId, CwBits, u16) {
        let mut out = vec![];
        run(&mut self.s, t, &mut out);
        out.clear();
        self.s.handle_frame(t, PortId(0), data(&self.f, 0, 0, n), &mut out);
        let tx = out.into_iter().find(|x| x.port != PortId(0)).expect("forwarded");
        let b = CwBits::read(&tx.frame, BTH).expect("ConWeave bits");
        let (_, tail) = cwire::read_ts(&tx.frame, BTH).unwrap();
        assert_eq!(tx.frame.len(), data(&self.f, 0, 0, n).len() + cwire::TS_HEADER_LEN);
        (tx.port, b, tail)
    }
    /// A control packet from leaf1 arriving on uplink port 1 at `t`.
    fn control(&mut self, t: Nanos, opcode: CwOpcode, epoch: u8, path: u8) {
        let conn = Connection { src: H0, dst: FAR, sport: SPORT, dest_qp: 17 };
        let mut f = frames::control(conn, CwBits { path, opcode, epoch, rerouted: false, tail: false }, 0);
        let p = &self.f.nodes[0].ports[1];
        f[0..6].copy_from_slice(&p.mac.0);
        f[6..12].copy_from_slice(&p.peer_mac.0);
        let mut out = vec![];
        run(&mut self.s, t, &mut out);
        self.s.handle_frame(t, PortId(1), f, &mut out);
        assert!(out.is_empty(), "control packets are consumed by the source ToR");
    }
}

fn other(p: PortId) -> PortId {
    if p == PortId(1) {
        PortId(2)
    } else {
        PortId(1)
    }
}

#[test]
fn reply_timeout_reroutes_once_and_clear_starts_the_next_epoch() {
    let mut x = Src::new(&[]);
    let (p0, b0, _) = x.send(0, 0);
    assert_eq!((b0.opcode, b0.epoch, b0.rerouted, b0.tail), (CwOpcode::RttRequest, 0, false, false));
    // An RTT_REPLY in time starts epoch 1 (and a new request).
    x.control(3_000, CwOpcode::RttReply, 0, b0.path);
    let (p, b, _) = x.send(4_000, 1);
    assert_eq!((p, b.opcode, b.epoch), (p0, CwOpcode::RttRequest, 1));
    // No reply within θ_reply = 8 µs: this packet is the TAIL on the OLD path…
    let (p, b, _) = x.send(12_500, 2);
    assert_eq!((p, b.opcode, b.tail, b.rerouted, b.epoch), (p0, CwOpcode::Data, true, false, 1));
    // …and the next ones are REROUTED on the other path, with TAIL_TX.
    let (p1, b, tail_tx) = x.send(13_000, 3);
    assert_eq!((p1, b.rerouted, b.tail, b.epoch), (other(p0), true, false, 1));
    assert_eq!(tail_tx, ts16(12_500));
    // Two paths in flight: no second reroute until CLEAR, however old the request.
    for (i, t) in [40_000, 80_000, 120_000].into_iter().enumerate() {
        let (p, b, _) = x.send(t, 4 + i as u32);
        assert_eq!((p, b.rerouted, b.tail, b.opcode), (p1, true, false, CwOpcode::Data));
    }
    assert_eq!(counter(&x.s, "conweave_reroutes"), 1);
    // A CLEAR of another epoch is ignored; CLEAR of epoch 1 starts epoch 2 on the new path.
    x.control(121_000, CwOpcode::Clear, 0, b.path);
    let (_, b, _) = x.send(122_000, 8);
    assert!(b.rerouted);
    x.control(123_000, CwOpcode::Clear, 1, b.path);
    let (p, b, _) = x.send(124_000, 9);
    assert_eq!((p, b.opcode, b.epoch, b.rerouted, b.tail), (p1, CwOpcode::RttRequest, 2, false, false));
    assert_eq!(counter(&x.s, "conweave_clear_received"), 2);
}

#[test]
fn theta_inactive_starts_an_epoch_without_clear() {
    let mut x = Src::new(&[]);
    let (p0, _, _) = x.send(0, 0);
    let (_, b, _) = x.send(9_000, 1);
    assert!(b.tail);
    let (p1, b, _) = x.send(10_000, 2);
    assert!(b.rerouted && p1 != p0);
    // 299 µs of silence: still the rerouted epoch.
    let (_, b, _) = x.send(10_000 + 299_000, 3);
    assert!(b.rerouted);
    // 300 µs: a new epoch, monitoring restarts on the new path.
    let (p, b, _) = x.send(309_000 + 300_000, 4);
    assert_eq!((p, b.opcode, b.epoch, b.rerouted), (p1, CwOpcode::RttRequest, 1, false));
    assert_eq!(counter(&x.s, "conweave_epochs_by_inactivity"), 1);
}

#[test]
fn notify_makes_a_path_unusable_for_theta_path_busy() {
    let mut x = Src::new(&[]);
    let (p0, b0, _) = x.send(0, 0);
    // Path ids on a leaf-spine are the uplink index in the group.
    let alt_path = 1 - b0.path;
    x.control(5_000, CwOpcode::Notify, 0, alt_path);
    // Reply timeout at 10 µs, but the only other path is busy until 13 µs:
    // no reroute, monitoring restarts.
    let (p, b, _) = x.send(10_000, 1);
    assert_eq!((p, b.tail, b.opcode), (p0, false, CwOpcode::RttRequest));
    assert_eq!(counter(&x.s, "conweave_reroute_aborted_all_busy"), 1);
    // The next timeout (18 µs) finds the path free again: reroute.
    let (p, b, _) = x.send(18_500, 2);
    assert_eq!((p, b.tail), (p0, true));
    let (p, b, _) = x.send(19_000, 3);
    assert_eq!((p, b.rerouted, b.path), (other(p0), true, alt_path));
}

#[test]
fn acks_and_other_racks_traffic_bypass_conweave() {
    let mut x = Src::new(&[]);
    let mut ack = data(&x.f, 0, 0, 0);
    ack[BTH] = 0x11; // Acknowledge
    let mut out = vec![];
    x.s.handle_frame(0, PortId(0), ack, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(CwBits::read(&out[0].frame, BTH).unwrap().opcode, CwOpcode::None);
    assert_eq!(out[0].frame.len(), data(&x.f, 0, 0, 0).len());
}

#[test]
fn resources_fit_tofino2_and_are_reported() {
    let mut p = ConWeave::from_params(&Params::new()).unwrap();
    let d = weft_tofino::program::declarations_of(&mut p);
    let target = TargetProfile::tofino2();
    d.usage().check(&target).unwrap();
    let r = d.usage().report("conweave", &target);
    let text = format!("{r}");
    assert!(text.contains("SALU"), "{text}");
}

/// The destination ToR of `lost_tail` with a shared buffer of exactly the
/// cells one held data packet takes, and the recirculation queue's
/// guaranteed minimum set to `recirculation_min_cells`.
fn switch_with_a_full_buffer(f: &FabricSpec, recirculation_min_cells: u32) -> Switch {
    let held_len = marked(f, 1, 1, 3, bits(1, 0, true, false), 4_096, 2_048).len() as u64;
    let mut cfg = SwitchConfig { snapshot_period_ns: 0, ..SwitchConfig::tofino2(7, true) };
    let cell = cfg.target.cell_bytes as u64;
    cfg.tm.buffer_bytes = held_len.div_ceil(cell) * cell;
    cfg.target.recirculation_min_cells = recirculation_min_cells;
    Switch::with_program(NodeId(1), &f.nodes[1], cfg, Box::new(ConWeave::from_params(&Params::new()).unwrap())).unwrap()
}

/// OLD psn 0 and 1 (to the host at once), then REROUTED psn 3 held in a
/// paused reorder queue, where it fills the whole shared buffer.
fn hold_one_packet_in_a_full_buffer(f: &FabricSpec, s: &mut Switch, out: &mut Vec<Transmit>) {
    s.handle_frame(0, PortId(0), marked(f, 1, 0, 0, bits(0, 0, false, false), 0, 0), out);
    s.handle_frame(1_000, PortId(0), marked(f, 1, 0, 1, bits(0, 0, false, false), 1_024, 0), out);
    run(s, 3_000, out);
    s.handle_frame(3_000, PortId(1), marked(f, 1, 1, 3, bits(1, 0, true, false), 4_096, 2_048), out);
    assert_eq!(s.traffic_manager().used_cells(), s.traffic_manager().total_cells(), "the held packet fills the buffer");
}

fn delivered_at(out: &[Transmit], psn_wanted: u32) -> Option<Nanos> {
    out.iter().find(|t| t.port == HOST_PORT && psn(&t.frame) == psn_wanted).map(|t| t.start)
}

/// The T_resume timer packet circles the recirculation port while its
/// queue holds packets. With the held packets filling the shared buffer,
/// the recirculation queue's guaranteed minimum is what keeps it alive:
/// without one the timer is dropped at its next pass and the queue never
/// resumes (the lossless AliStorage 80 % run froze that way).
#[test]
fn the_resume_timer_survives_a_full_buffer_through_the_recirculation_minimum() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let mut s = switch_with_a_full_buffer(&f, TargetProfile::tofino2().recirculation_min_cells);
    let mut out = vec![];
    hold_one_packet_in_a_full_buffer(&f, &mut s, &mut out);
    run(&mut s, 1_000_000, &mut out);
    let t_resume = 1_000 + 1_024 + 16_000;
    let left = delivered_at(&out, 3).expect("the timer resumed the queue");
    assert!(left >= t_resume && left < t_resume + 1_200, "left at {left}, T_resume {t_resume}");
    assert_eq!(s.counters().drop_recirculation, 0);
    assert_eq!(counter(&s, "conweave_resume_expiries"), 1);
    assert_eq!(s.counters().recirculations, counter(&s, "conweave_timer_passes"), "every timer pass came back");
    assert!(s.poll_timeout().is_none(), "nothing left circling");

    // Without the minimum the same timer is lost and the packet stays.
    let mut s = switch_with_a_full_buffer(&f, 0);
    let mut out = vec![];
    hold_one_packet_in_a_full_buffer(&f, &mut s, &mut out);
    run(&mut s, 1_000_000, &mut out);
    assert!(s.counters().drop_recirculation > 0);
    assert_eq!(delivered_at(&out, 3), None);
    let tm = s.traffic_manager();
    let paused: Vec<u8> = (1..31).filter(|q| tm.is_paused(HOST_PORT, QueueId(*q))).collect();
    assert_eq!(paused.len(), 1, "the reorder queue stays paused");
    assert_eq!(tm.queue_len(HOST_PORT, QueueId(paused[0])), 1, "holding psn 3");
}

/// The TAIL resumes its held queue when it leaves egress. A TAIL that the
/// traffic manager drops after ingress classified it (a lossy fabric with
/// a full buffer) never leaves: the timer then resumes the queue
/// θ_resume_default + θ_resume_extra after the TAIL's arrival.
#[test]
fn a_tail_dropped_inside_the_switch_lets_the_timer_resume_its_queue() {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let mut s = switch_with_a_full_buffer(&f, TargetProfile::tofino2().recirculation_min_cells);
    let mut out = vec![];
    hold_one_packet_in_a_full_buffer(&f, &mut s, &mut out);
    run(&mut s, 5_000, &mut out);
    s.handle_frame(5_000, PortId(0), marked(&f, 1, 0, 2, bits(0, 0, false, true), 2_048, 0), &mut out);
    // The TAIL, and the CLEAR it sent towards the source ToR (which then
    // starts its next epoch after θ_inactive), found the buffer full.
    assert_eq!(s.counters().drop_tm, 2);
    assert_eq!(controls(&out), vec![]);
    run(&mut s, 1_000_000, &mut out);
    let deadline = 5_000 + 200_000 + 16_000;
    let left = delivered_at(&out, 3).expect("the timer resumed the queue");
    assert!(left >= deadline && left < deadline + 1_200, "left at {left}, deadline {deadline}");
    assert_eq!(counter(&s, "conweave_resume_after_tail_deadline"), 1);
    assert_eq!(counter(&s, "conweave_resume_expiries"), 0, "a TAIL arrived: T_resume does not expire the queue");
    assert!(s.poll_timeout().is_none(), "the queue emptied, its timer retired");
}
