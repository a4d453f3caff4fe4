//! # weft-testkit — shared test fixtures (a dev-dependency only)
//!
//! What the tests and benchmarks of several crates build the same way: the
//! two-leaf fabric most mechanism tests run on ([`leaf_pair`]), frames as
//! they enter a switch port with the addresses a real host would use
//! ([`Entering`], [`udp()`], [`roce_write`]), and running a switch's timers up
//! to a time ([`drain`]). Design choice: fixtures are plain functions over
//! the public APIs of `weft-core` and `weft-wire`, so a test reads like a
//! user of those crates. No production crate may depend on this one.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use bytes::BytesMut;
pub use weft_core::fabric::SwitchRole;
use weft_core::fabric::{host_mac, FabricSpec, HostKind, HostSpec, NodeKind, SwitchSpec};
use weft_core::switch::{Switch, Transmit};
use weft_wire::roce::{self, BthRepr, Opcode};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::{ethernet, ipv4, udp, EtherType, EthernetAddress, Ipv4Address};

/// The tiny fabric scheme tests and benchmarks use: `leaf0` (node 0) with
/// `hosts` hosts `h<i>` (10.0.0.(i+2), ports 0..hosts) and one uplink to
/// each of `spines` spines (ports hosts..); `leaf1` (node 1) behind the same
/// spines with one host `far` (10.0.1.2). All links at `rate`, 1 µs, MTU
/// 1500; routes computed.
pub fn leaf_pair(hosts: usize, spines: usize, rate: BitRate) -> FabricSpec {
    let mut f = FabricSpec::default();
    let host =
        |ip: Ipv4Address, gw| NodeKind::Host(HostSpec { kind: HostKind::Synthetic, ip, prefix_len: 24, mac: host_mac(ip), gateway: gw });
    let leaf = f.add_node("leaf0", NodeKind::Switch(SwitchSpec::new(SwitchRole::Leaf, "ecmp")));
    let far_leaf = f.add_node("leaf1", NodeKind::Switch(SwitchSpec::new(SwitchRole::Leaf, "ecmp")));
    for i in 0..hosts {
        let h = f.add_node(format!("h{i}"), host(Ipv4Address::new(10, 0, 0, 2 + i as u8), Ipv4Address::new(10, 0, 0, 1)));
        f.connect(format!("h{i}-leaf0"), h, leaf, rate, 1000, 1500);
    }
    for u in 0..spines {
        let s = f.add_node(format!("spine{u}"), NodeKind::Switch(SwitchSpec::new(SwitchRole::Spine, "ecmp")));
        f.connect(format!("leaf0-spine{u}"), leaf, s, rate, 1000, 1500);
        f.connect(format!("leaf1-spine{u}"), far_leaf, s, rate, 1000, 1500);
    }
    let h = f.add_node("far", host(Ipv4Address::new(10, 0, 1, 2), Ipv4Address::new(10, 0, 1, 1)));
    f.connect("far-leaf1", h, far_leaf, rate, 1000, 1500);
    f.compute_routes();
    f
}

/// A k = 4 fat-tree as the orchestrator's generator lays it out (for the
/// crates below it): `core<i>` (4), per pod `p` `agg<p>_<a>` and
/// `edge<p>_<e>` (2 each), 2 hosts per edge, host `j` of edge `e` in pod
/// `p` at 10.p.e.(j+2); an edge's ports are its hosts then its
/// aggregation switches, an aggregation switch's its edges then its cores
/// (core `2a + c` is its `c`-th). All links at `rate`, 1 µs, MTU 1500;
/// routes computed.
pub fn fat_tree4(rate: BitRate) -> FabricSpec {
    let mut f = FabricSpec::default();
    let sw = |role| NodeKind::Switch(SwitchSpec::new(role, "ecmp"));
    let cores: Vec<_> = (0..4).map(|c| f.add_node(format!("core{c}"), sw(SwitchRole::Core))).collect();
    for p in 0..4u8 {
        let aggs: Vec<_> = (0..2).map(|a| f.add_node(format!("agg{p}_{a}"), sw(SwitchRole::Spine))).collect();
        let edges: Vec<_> = (0..2).map(|e| f.add_node(format!("edge{p}_{e}"), sw(SwitchRole::Leaf))).collect();
        for (e, &edge) in edges.iter().enumerate() {
            for j in 0..2u8 {
                let ip = Ipv4Address::new(10, p, e as u8, j + 2);
                let gw = Ipv4Address::new(10, p, e as u8, 1);
                let h = f.add_node(
                    format!("h{}", (p as usize * 2 + e) * 2 + j as usize),
                    NodeKind::Host(HostSpec { kind: HostKind::Synthetic, ip, prefix_len: 24, mac: host_mac(ip), gateway: gw }),
                );
                f.connect(format!("h{}-edge{p}_{e}", (p as usize * 2 + e) * 2 + j as usize), h, edge, rate, 1000, 1500);
            }
        }
        for (a, &agg) in aggs.iter().enumerate() {
            for (e, &edge) in edges.iter().enumerate() {
                f.connect(format!("edge{p}_{e}-agg{p}_{a}"), edge, agg, rate, 1000, 1500);
            }
        }
        for (a, &agg) in aggs.iter().enumerate() {
            for c in 0..2 {
                f.connect(format!("agg{p}_{a}-core{}", 2 * a + c), agg, cores[2 * a + c], rate, 1000, 1500);
            }
        }
    }
    f.compute_routes();
    f
}

/// `h0` of a [`leaf_pair`] fabric.
pub const H0: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
/// `far` of a [`leaf_pair`] fabric.
pub const FAR: Ipv4Address = Ipv4Address::new(10, 0, 1, 2);

/// The Ethernet and IPv4 addresses of a frame entering port `port` of node
/// `node`: from the port's peer MAC to the port's own MAC (what the
/// attached host or switch writes), `src` → `dst`, with `dscp`.
#[derive(Debug, Clone, Copy)]
pub struct Entering {
    /// Destination MAC (the switch port's).
    pub dst_mac: EthernetAddress,
    /// Source MAC (the peer's).
    pub src_mac: EthernetAddress,
    /// Source address.
    pub src: Ipv4Address,
    /// Destination address.
    pub dst: Ipv4Address,
    /// DSCP (ECN is ECT(0)).
    pub dscp: u8,
}

impl Entering {
    /// A frame `src` → `dst` entering `port` of node `node` of `f`.
    ///
    /// # Panics
    /// If the node or port does not exist (a broken test).
    pub fn port(f: &FabricSpec, node: usize, port: usize, src: Ipv4Address, dst: Ipv4Address) -> Self {
        let p = &f.nodes[node].ports[port];
        Entering { dst_mac: p.mac, src_mac: p.peer_mac, src, dst, dscp: 0 }
    }
    /// The same with DSCP `dscp`.
    pub fn dscp(self, dscp: u8) -> Self {
        Entering { dscp, ..self }
    }
    /// Ethernet and IPv4 headers of a frame of `len` bytes carrying UDP.
    fn headers(&self, len: usize) -> BytesMut {
        let mut b = BytesMut::zeroed(len.max(42));
        let len = b.len();
        ethernet::Repr { dst: self.dst_mac, src: self.src_mac, vlan_tci: None, ethertype: EtherType::Ipv4 }.emit(&mut b);
        ipv4::Repr {
            src: self.src,
            dst: self.dst,
            protocol: ipv4::Protocol::Udp,
            dscp: self.dscp,
            ecn: ipv4::Ecn::Ect0,
            ident: 0,
            ttl: 64,
            payload_len: len - 34,
        }
        .emit(&mut b[14..]);
        b
    }
}

/// A UDP frame of `len` bytes in all (at least 42), zero payload.
pub fn udp(at: Entering, sport: u16, dport: u16, len: usize) -> BytesMut {
    let mut b = at.headers(len);
    let len = b.len();
    udp::Repr { src_port: sport, dst_port: dport, payload_len: len - 42 }.emit(&mut b[34..]);
    b
}

/// A UDP frame of `len` bytes from `h0` to `far` (ECN-capable, destination
/// port `dport`) as it enters `leaf0` of a [`leaf_pair`] fabric on host
/// port 0: the frame scheme tests and benchmarks feed the switch.
pub fn leaf_pair_udp_frame(f: &FabricSpec, sport: u16, dport: u16, len: usize) -> BytesMut {
    udp(Entering::port(f, 0, 0, H0, FAR), sport, dport, len)
}

/// A RoCEv2 frame (`opcode`, queue pair `qp`, `psn`, ACK requested) with
/// `payload` bytes whose first byte is the PSN's low byte, from UDP source
/// port `sport`, ICRC filled.
pub fn roce(at: Entering, sport: u16, opcode: Opcode, qp: u32, psn: u32, payload: usize) -> BytesMut {
    let len = 14 + 20 + 8 + roce::BTH_LEN + payload + roce::ICRC_LEN;
    let mut b = at.headers(len);
    udp::Repr { src_port: sport, dst_port: udp::ROCEV2_PORT, payload_len: len - 42 }.emit(&mut b[34..]);
    BthRepr { opcode, solicited: false, pad: 0, pkey: 0xffff, dest_qp: qp, ack_req: true, psn, reserved15: 0 }.emit(&mut b[42..]);
    if payload > 0 {
        b[42 + roce::BTH_LEN] = psn as u8;
    }
    // The buffer was sized for the headers just written: filling cannot fail.
    let _ = roce::fill_icrc(&mut b[14..]);
    b
}

/// A RoCEv2 WRITE Middle frame (see [`roce()`]).
pub fn roce_write(at: Entering, sport: u16, qp: u32, psn: u32, payload: usize) -> BytesMut {
    roce(at, sport, Opcode::WriteMiddle, qp, psn, payload)
}

/// Runs the switch's timers due up to `until` (each at its own time),
/// appending what it sends to `out`.
pub fn drain(s: &mut Switch, until: Nanos, out: &mut Vec<Transmit>) {
    while let Some(t) = s.poll_timeout() {
        if t > until {
            break;
        }
        s.handle_timeout(t, out);
    }
}

/// A real host as the edge guard knows it: its MAC and address, its
/// gateway's MAC (its ToR port), another host's address, its link's MTU.
#[derive(Debug, Clone, Copy)]
pub struct RealHostAddrs {
    /// The host's MAC.
    pub mac: EthernetAddress,
    /// The host's address.
    pub ip: Ipv4Address,
    /// The ToR port's MAC.
    pub gateway_mac: EthernetAddress,
    /// Another host's address.
    pub peer: Ipv4Address,
    /// The access link's MTU.
    pub mtu: u16,
}

impl RealHostAddrs {
    fn entering(&self) -> Entering {
        Entering { dst_mac: self.gateway_mac, src_mac: self.mac, src: self.ip, dst: self.peer, dscp: 0 }
    }
}

/// Frames the edge guard must let through: UDP, RoCEv2 with its ICRC, an
/// ARP request for the gateway.
pub fn benign_host_frames(h: &RealHostAddrs) -> Vec<BytesMut> {
    let mut arp = BytesMut::zeroed(60);
    ethernet::Repr { dst: EthernetAddress([0xff; 6]), src: h.mac, vlan_tci: None, ethertype: EtherType::Arp }.emit(&mut arp);
    weft_wire::arp::Repr {
        operation: weft_wire::arp::Operation::Request,
        sender_hw: h.mac,
        sender_ip: h.ip,
        target_hw: EthernetAddress([0; 6]),
        target_ip: h.peer,
    }
    .emit(&mut arp[14..]);
    vec![udp(h.entering(), 40_000, 5_001, 200), roce_write(h.entering(), 49_152, 0x11, 7, 256), arp]
}

/// One frame (or several) of each kind a hostile or broken host may send,
/// each with the cause the edge guard must give (see `weft_core::edge`).
pub fn hostile_host_frames(h: &RealHostAddrs) -> Vec<(weft_core::edge::Rejection, BytesMut)> {
    use weft_core::edge::Rejection as R;
    use weft_wire::{int, lbsp, p4te, pfc};
    let at = h.entering();
    let fix_ip = |b: &mut BytesMut| ipv4::Packet::new_unchecked(&mut b[14..]).fill_checksum();
    let mut out = Vec::new();
    // Truncated: an Ethernet header and half an IPv4 header; an IPv4 total
    // length beyond the frame.
    out.push((R::Malformed, udp(at, 1, 2, 100).split_to(24)));
    let mut long = udp(at, 1, 2, 100);
    long[16..18].copy_from_slice(&400u16.to_be_bytes());
    fix_ip(&mut long);
    out.push((R::Malformed, long));
    let mut ttl = udp(at, 1, 2, 100);
    ttl[14 + 8] ^= 0x10;
    out.push((R::BadIpv4Checksum, ttl));
    let mut icrc = roce_write(at, 49_152, 0x11, 8, 256);
    let n = icrc.len();
    icrc[n - 1] ^= 0xff;
    out.push((R::BadIcrc, icrc));
    out.push((R::Oversize, udp(at, 1, 2, h.mtu as usize + 14 + 100)));
    let mut v6 = udp(at, 1, 2, 100);
    v6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    out.push((R::UnknownEthertype, v6));
    let mut pause = BytesMut::zeroed(pfc::FRAME_LEN);
    ethernet::Repr { dst: EthernetAddress([0x01, 0x80, 0xc2, 0, 0, 1]), src: h.mac, vlan_tci: None, ethertype: EtherType::MacControl }
        .emit(&mut pause);
    pfc::Repr::for_priority(3, 0xffff).emit(&mut pause[14..]);
    out.push((R::Pfc, pause));
    let other = Ipv4Address(h.ip.0 ^ 0x0000_0040);
    out.push((R::SpoofedSource, udp(Entering { src: other, ..at }, 1, 2, 100)));
    out.push((R::SpoofedSource, udp(Entering { src_mac: EthernetAddress([2, 0, 0, 0, 0x66, 0x66]), ..at }, 1, 2, 100)));
    // The fabric's control plane: LBSP, P4TE feedback, a ConWeave timer
    // (generator EtherType), an INT probe, IPv4 to a switch address, a
    // VXLAN (CONGA overlay) datagram, a P4TE hop option, ConWeave BTH bits.
    let with_src = |mut f: BytesMut| {
        f[6..12].copy_from_slice(&h.mac.0);
        f[..6].copy_from_slice(&h.gateway_mac.0);
        f
    };
    let lbsp_msg = lbsp::Repr {
        kind: lbsp::Kind::Failure,
        value: 1,
        position: None,
        origin: Ipv4Address::new(169, 254, 0, 1),
        origin_port: 3,
        in_port: 0,
        prefix: Ipv4Address::new(10, 0, 0, 0),
        prefix_len: 24,
        tier: 1,
        seq: 99,
    };
    out.push((R::FabricControl, with_src(lbsp_msg.frame())));
    let fb = p4te::Feedback {
        kind: p4te::FeedbackKind::Neighbour,
        port: 1,
        delay: p4te::Event::Increase,
        queue: p4te::Event::Increase,
        util: p4te::Event::Increase,
        color: 2,
        delay_ns: 1_000_000,
        queue_bytes: 1 << 20,
    };
    out.push((R::FabricControl, with_src(fb.frame())));
    let mut timer = BytesMut::zeroed(60);
    timer[12..14].copy_from_slice(&weft_tofino::program::GENERATOR_ETHERTYPE.to_be_bytes());
    out.push((R::FabricControl, with_src(timer)));
    let probe = int::probe_frame(h.ip, h.peer, &int::Probe { flow: 1, origin_leaf: 0, uplink: 1, seq: 5 });
    out.push((R::FabricControl, with_src(probe)));
    out.push((R::FabricControl, udp(Entering { dst: Ipv4Address::new(169, 254, 0, 1), ..at }, 1, 2, 100)));
    out.push((R::FabricControl, udp(at, 49_152, udp::VXLAN_PORT, 100)));
    let mut opt = udp(at, 1, 2, 100);
    let hop = p4te::Hop { flags: p4te::flags::FACK, port: 1, t_source: 0 };
    if p4te::insert(&mut opt, 14, &hop).is_ok() {
        out.push((R::FabricControl, opt));
    }
    let mut notify = roce_write(at, 49_152, 0x11, 9, 64);
    roce::BthPacket::new_unchecked(&mut notify[42..]).set_reserved15(0x7f << 4);
    let _ = roce::fill_icrc(&mut notify[14..]);
    out.push((R::FabricControl, notify));
    out
}
