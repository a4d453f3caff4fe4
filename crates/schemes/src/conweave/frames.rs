//! Frames the ConWeave ToRs make: control packets (RTT_REPLY, CLEAR,
//! NOTIFY), truncated to their headers, and the destination ToR's
//! resume-timer packets that circle the recirculation port (paper §3.4:
//! "we mirror and modify" the triggering packet; "we realize the resume
//! timer by mirroring the first out-of-order packet with payload
//! truncation, then appending the specific connection information").
//!
//! A control packet is a valid RoCEv2 frame (Ethernet / IPv4 / UDP 4791 /
//! BTH with the ConWeave bits / timestamp header / ICRC placeholder), DSCP
//! CS6 so every switch puts it in the strict-priority control queue, not
//! ECN-capable. It goes from the destination ToR towards the data's source
//! host; the source ToR consumes it.

use bytes::BytesMut;
use weft_wire::conweave::{self, CwBits};
use weft_wire::{ethernet, ipv4, roce, udp, EtherType, EthernetAddress, Ipv4Address};

/// DSCP of control packets (CS6: the control queue).
pub const CONTROL_DSCP: u8 = 48;
/// Length of a control packet.
pub const CONTROL_LEN: usize =
    ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN + roce::BTH_LEN + conweave::TS_HEADER_LEN + roce::ICRC_LEN;

/// The connection a control or timer packet is about (the data direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// Data source host.
    pub src: Ipv4Address,
    /// Data destination host.
    pub dst: Ipv4Address,
    /// UDP source port (the QP's).
    pub sport: u16,
    /// Destination QP (kept so tools decode the BTH).
    pub dest_qp: u32,
}

/// A control packet about `conn`, from the destination ToR to the source.
pub fn control(conn: Connection, bits: CwBits, tx: u16) -> BytesMut {
    let mut f = BytesMut::zeroed(CONTROL_LEN);
    ethernet::Repr { dst: EthernetAddress([0; 6]), src: EthernetAddress([0; 6]), vlan_tci: None, ethertype: EtherType::Ipv4 }.emit(&mut f);
    let l3 = ethernet::HEADER_LEN;
    let ip_len = CONTROL_LEN - l3;
    ipv4::Repr {
        src: conn.dst,
        dst: conn.src,
        protocol: ipv4::Protocol::Udp,
        payload_len: ip_len - ipv4::HEADER_LEN,
        ttl: 64,
        dscp: CONTROL_DSCP,
        ecn: ipv4::Ecn::NotEct,
        ident: 0,
    }
    .emit(&mut f[l3..]);
    let u = l3 + ipv4::HEADER_LEN;
    f[u..u + 2].copy_from_slice(&conn.sport.to_be_bytes());
    f[u + 2..u + 4].copy_from_slice(&udp::ROCEV2_PORT.to_be_bytes());
    f[u + 4..u + 6].copy_from_slice(&((ip_len - ipv4::HEADER_LEN) as u16).to_be_bytes());
    let bth = u + udp::HEADER_LEN;
    roce::BthRepr {
        opcode: roce::Opcode::SendOnly,
        solicited: false,
        pad: 0,
        pkey: roce::DEFAULT_PKEY,
        dest_qp: conn.dest_qp,
        ack_req: false,
        psn: 0,
        reserved15: 0,
    }
    .emit(&mut f[bth..]);
    let _ = bits.write(&mut f, bth);
    let _ = conweave::write_ts(&mut f, bth, tx, 0);
    f
}

/// EtherType-tagged internal frame: the first payload byte.
pub const TIMER_MAGIC: u8 = 0xc7;
/// Length of a timer packet (truncated mirror + connection info).
pub const TIMER_LEN: usize = ethernet::HEADER_LEN + 24;

/// What a resume-timer packet carries around the recirculation loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerInfo {
    /// Egress port of the held queue.
    pub port: u16,
    /// The held queue.
    pub queue: u8,
    /// Connection signature (owner check).
    pub sig: u16,
    /// Epoch of the reordering.
    pub epoch: u8,
    /// Path id of the rerouted packets (for the CLEAR).
    pub path: u8,
    /// The connection (for the CLEAR).
    pub conn: Connection,
}

/// Builds a timer packet.
pub fn timer(t: TimerInfo) -> BytesMut {
    let mut f = BytesMut::zeroed(TIMER_LEN);
    f[12..14].copy_from_slice(&weft_tofino::program::GENERATOR_ETHERTYPE.to_be_bytes());
    let p = &mut f[ethernet::HEADER_LEN..];
    p[0] = TIMER_MAGIC;
    p[1..3].copy_from_slice(&t.port.to_be_bytes());
    p[3] = t.queue;
    p[4..6].copy_from_slice(&t.sig.to_be_bytes());
    p[6] = t.epoch;
    p[7] = t.path;
    p[8..12].copy_from_slice(&t.conn.src.0.to_be_bytes());
    p[12..16].copy_from_slice(&t.conn.dst.0.to_be_bytes());
    p[16..18].copy_from_slice(&t.conn.sport.to_be_bytes());
    p[18..22].copy_from_slice(&t.conn.dest_qp.to_be_bytes());
    f
}

/// Parses a timer packet; `None` if it is not one.
pub fn parse_timer(f: &[u8]) -> Option<TimerInfo> {
    let p = f.get(ethernet::HEADER_LEN..ethernet::HEADER_LEN + 22)?;
    if f.get(12..14)? != weft_tofino::program::GENERATOR_ETHERTYPE.to_be_bytes() || p[0] != TIMER_MAGIC {
        return None;
    }
    let u32at = |i: usize| u32::from_be_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
    Some(TimerInfo {
        port: u16::from_be_bytes([p[1], p[2]]),
        queue: p[3],
        sig: u16::from_be_bytes([p[4], p[5]]),
        epoch: p[6],
        path: p[7],
        conn: Connection {
            src: Ipv4Address(u32at(8)),
            dst: Ipv4Address(u32at(12)),
            sport: u16::from_be_bytes([p[16], p[17]]),
            dest_qp: u32at(18),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_wire::conweave::CwOpcode;
    use weft_wire::frame::FrameInfo;

    #[test]
    fn control_packets_parse_as_rocev2_control_traffic() {
        let conn = Connection { src: Ipv4Address::new(10, 0, 0, 1), dst: Ipv4Address::new(10, 0, 1, 1), sport: 49_000, dest_qp: 7 };
        let bits = CwBits { path: 3, opcode: CwOpcode::Notify, epoch: 2, rerouted: false, tail: false };
        let f = control(conn, bits, 77);
        let info = FrameInfo::parse(&f).unwrap();
        let ip = info.ip.unwrap();
        assert_eq!((ip.src, ip.dst, ip.src_port, ip.dscp), (conn.dst, conn.src, 49_000, CONTROL_DSCP));
        let bth = ip.bth_offset.unwrap() as usize;
        assert_eq!(CwBits::read(&f, bth), Some(bits));
        assert_eq!(conweave::read_ts(&f, bth), Some((77, 0)));
    }

    #[test]
    fn timer_packets_round_trip() {
        let t = TimerInfo {
            port: 3,
            queue: 17,
            sig: 0xbeef,
            epoch: 1,
            path: 9,
            conn: Connection { src: Ipv4Address::new(10, 0, 0, 1), dst: Ipv4Address::new(10, 0, 1, 1), sport: 5, dest_qp: 9 },
        };
        assert_eq!(parse_timer(&timer(t)), Some(t));
        assert_eq!(parse_timer(&[0u8; 10]), None);
    }
}
