//! P4TE's headers (`../shared/papers/p4te-techreport.txt` §6.1.2, §6.1.3,
//! §6.4): the hop-timestamp header switches carry between them, the
//! feedback packets that report monitoring events, and the fake
//! acknowledgment (FACK) a switch sends a TCP sender.
//!
//! The paper gives fields, not bytes (the authors' P4 code, headers.p4,
//! carries them in IPv6 extension headers); this is weft's IPv4 layout.
//!
//! **Hop header** — an IPv4 option of RFC 4727's experimental type 30
//! (copy flag 0, class 0), [`OPTION_LEN`] bytes right after the fixed IPv4
//! header. An option, not a shim, so every switch's parser still finds the
//! L4 ports (the IHL covers it) and the TCP checksum is untouched; the leaf
//! inserts it on packets from hosts and strips it before a host, so hosts
//! never see it. Big endian:
//!
//! ```text
//!  0  type      u8   30
//!  1  length    u8   12
//!  2  flags     u8   bit 0 timestamp valid, bit 1 rate control blocked
//!                    (the source leaf: within B bytes of the last one),
//!                    bit 2 rate control applied (a switch sent a FACK for
//!                    this packet), bit 3 the packet is a FACK
//!  3  reserved  u8   0
//!  4  port      u16  the previous switch's egress port (T^Source's port)
//!  6  T^Source  u48  the previous switch's ingress timestamp, ns
//! ```
//!
//! **Feedback** — an Ethernet frame of EtherType [`ETHERTYPE`] (0x88b6,
//! IEEE local experimental 2; LBSP's messages use it too, a fabric runs
//! one scheme and the first byte [`FEEDBACK_TAG`] tells them apart), padded
//! to 60 bytes, body:
//!
//! ```text
//!  0  tag          u8   0x50 ('P')
//!  1  kind         u8   1 local (egress → CPU), 2 from the next hop
//!                       (Alg. 2 delay event), 3 recirculated utilisation
//!  2  port         u16  the port the events are about
//!  4  delay event  u8   0 none, 1 increase, 2 decrease
//!  5  queue event  u8
//!  6  util event   u8
//!  7  colour       u8   the port's new utilisation colour (0 green,
//!                       1 yellow, 2 red)
//!  8  delay        u32  hop-to-hop delay, ns (saturating)
//! 12  queue depth  u32  bytes
//! ```
//!
//! Invariants: [`insert`] then [`strip`] gives back the frame byte for
//! byte; every write keeps the IPv4 header checksum valid; a [`fack`] is a
//! valid TCP/IPv4 frame (both checksums) from the data packet's receiver
//! to its sender.

use super::{be16, be32, ethernet, ipv4, put16, put32, tcp, Error, Result};
use bytes::BytesMut;

/// IPv4 option type of the hop header (RFC 4727 experimental, not copied).
pub const OPTION_TYPE: u8 = 30;
/// Its length in bytes.
pub const OPTION_LEN: usize = 12;
/// EtherType of feedback frames.
pub const ETHERTYPE: u16 = 0x88b6;
/// First body byte of a P4TE feedback frame.
pub const FEEDBACK_TAG: u8 = 0x50;
/// Length of a feedback body.
pub const FEEDBACK_LEN: usize = 16;

/// Hop-header flags.
pub mod flags {
    /// `T^Source` and `port` were written by the previous switch.
    pub const TIMESTAMP: u8 = 1;
    /// The source leaf blocks rate control on this packet (§6.4.1).
    pub const RATE_CONTROL_BLOCKED: u8 = 2;
    /// A switch on the path applied rate control (sent a FACK) for it.
    pub const RATE_CONTROL_APPLIED: u8 = 4;
    /// The packet is a FACK.
    pub const FACK: u8 = 8;
}

/// The hop header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hop {
    /// [`flags`].
    pub flags: u8,
    /// The previous switch's egress port.
    pub port: u16,
    /// The previous switch's ingress timestamp, ns (48 bits kept).
    pub t_source: u64,
}

const T_MASK: u64 = (1 << 48) - 1;

impl Hop {
    fn parse(b: &[u8]) -> Self {
        let t = ((be16(b, 6) as u64) << 32) | be32(b, 8) as u64;
        Hop { flags: b[2], port: be16(b, 4), t_source: t }
    }
    fn emit(&self, b: &mut [u8]) {
        b[0] = OPTION_TYPE;
        b[1] = OPTION_LEN as u8;
        b[2] = self.flags;
        b[3] = 0;
        put16(b, 4, self.port);
        let t = self.t_source & T_MASK;
        put16(b, 6, (t >> 32) as u16);
        put32(b, 8, t as u32);
    }
    /// `now − t_source` on the 48-bit clock.
    pub fn delay_until(&self, now: u64) -> u64 {
        (now & T_MASK).wrapping_sub(self.t_source) & T_MASK
    }
}

/// The offset of the hop header in the IPv4 packet at `l3`, if it has one.
pub fn find(frame: &[u8], l3: usize) -> Option<usize> {
    let ihl = ((frame.get(l3)? & 0xf) as usize) * 4;
    let at = l3 + ipv4::HEADER_LEN;
    (ihl == ipv4::HEADER_LEN + OPTION_LEN && frame.get(at) == Some(&OPTION_TYPE) && frame.get(at + 1) == Some(&(OPTION_LEN as u8)))
        .then_some(at)
}

/// The hop header at `at` (from [`find`]).
pub fn read(frame: &[u8], at: usize) -> Option<Hop> {
    frame.get(at..at + OPTION_LEN).map(Hop::parse)
}

/// Rewrites the hop header at `at` of the IPv4 packet at `l3`, keeping the
/// IPv4 header checksum valid.
pub fn write(frame: &mut [u8], l3: usize, at: usize, hop: &Hop) -> Result<()> {
    let b = frame.get_mut(at..at + OPTION_LEN).ok_or(Error::Truncated("p4te"))?;
    hop.emit(b);
    let ip = frame.get_mut(l3..).ok_or(Error::Truncated("ipv4"))?;
    ipv4::Packet::new_checked(ip)?.fill_checksum();
    Ok(())
}

/// What a leaf does to a packet from a host: inserts the hop header after
/// the IPv4 header at `l3` (which must have no options).
pub fn insert(frame: &mut BytesMut, l3: usize, hop: &Hop) -> Result<()> {
    let (hl, total) = {
        let ip = ipv4::Packet::new_checked(frame.get(l3..).ok_or(Error::Truncated("ipv4"))?)?;
        (ip.header_len(), ip.total_len() as usize)
    };
    if hl != ipv4::HEADER_LEN {
        return Err(Error::Malformed("ipv4 options"));
    }
    let total = u16::try_from(total + OPTION_LEN).map_err(|_| Error::Malformed("ipv4"))?;
    let at = l3 + hl;
    crate::buffer::open_gap(frame, at, OPTION_LEN);
    hop.emit(&mut frame[at..at + OPTION_LEN]);
    let ip = &mut frame[l3..];
    ip[0] = 0x40 | ((ipv4::HEADER_LEN + OPTION_LEN) / 4) as u8;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ipv4::Packet::new_unchecked(ip).fill_checksum();
    Ok(())
}

/// What a leaf does before a host: removes the hop header of the IPv4
/// packet at `l3` and returns it.
pub fn strip(frame: &mut BytesMut, l3: usize) -> Result<Hop> {
    let at = find(frame, l3).ok_or(Error::Malformed("p4te"))?;
    let hop = read(frame, at).ok_or(Error::Truncated("p4te"))?;
    let total = ipv4::Packet::new_checked(frame.get(l3..).ok_or(Error::Truncated("ipv4"))?)?.total_len() as usize;
    let total = (total - OPTION_LEN) as u16;
    {
        let ip = &mut frame[l3..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
    }
    crate::buffer::close_gap(frame, at, OPTION_LEN);
    ipv4::Packet::new_unchecked(&mut frame[l3..]).fill_checksum();
    Ok(hop)
}

/// A monitoring event's direction (Alg. 1, 2: `*_INCREASE`, `*_DECREASE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Event {
    /// No event.
    #[default]
    None = 0,
    /// The metric grew by Δ (or the colour rose).
    Increase = 1,
    /// The metric fell by more than Δ (or the colour fell).
    Decrease = 2,
}

impl Event {
    fn from_u8(v: u8) -> Result<Self> {
        match v {
            0 => Ok(Event::None),
            1 => Ok(Event::Increase),
            2 => Ok(Event::Decrease),
            _ => Err(Error::Malformed("p4te event")),
        }
    }
}

/// Where a feedback frame comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedbackKind {
    /// This switch's egress (Alg. 1) to its CPU.
    Local = 1,
    /// The next hop's ingress (Alg. 2) to this switch.
    Neighbour = 2,
    /// The recirculated copy of a utilisation event (§6.1.3) to ingress.
    Utilization = 3,
}

/// A feedback frame's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feedback {
    /// Origin.
    pub kind: FeedbackKind,
    /// The port the events are about (at the switch that receives it).
    pub port: u16,
    /// Hop-to-hop delay event.
    pub delay: Event,
    /// Egress queue depth event.
    pub queue: Event,
    /// Link utilisation event.
    pub util: Event,
    /// The port's utilisation colour after the event (0 green, 1 yellow,
    /// 2 red).
    pub color: u8,
    /// Hop-to-hop delay, ns.
    pub delay_ns: u32,
    /// Queue depth, bytes.
    pub queue_bytes: u32,
}

impl Feedback {
    /// The whole frame (MACs zero: the switch writes them for its port).
    pub fn frame(&self) -> BytesMut {
        let mut f = BytesMut::zeroed(60);
        put16(&mut f, 12, ETHERTYPE);
        let b = &mut f[ethernet::HEADER_LEN..];
        b[0] = FEEDBACK_TAG;
        b[1] = self.kind as u8;
        put16(b, 2, self.port);
        b[4] = self.delay as u8;
        b[5] = self.queue as u8;
        b[6] = self.util as u8;
        b[7] = self.color;
        put32(b, 8, self.delay_ns);
        put32(b, 12, self.queue_bytes);
        f
    }

    /// Parses a feedback frame.
    pub fn parse(frame: &[u8]) -> Result<Self> {
        if frame.len() < ethernet::HEADER_LEN + FEEDBACK_LEN {
            return Err(Error::Truncated("p4te feedback"));
        }
        if be16(frame, 12) != ETHERTYPE {
            return Err(Error::Malformed("p4te feedback"));
        }
        let b = &frame[ethernet::HEADER_LEN..];
        if b[0] != FEEDBACK_TAG {
            return Err(Error::Malformed("p4te feedback"));
        }
        let kind = match b[1] {
            1 => FeedbackKind::Local,
            2 => FeedbackKind::Neighbour,
            3 => FeedbackKind::Utilization,
            _ => return Err(Error::Malformed("p4te feedback")),
        };
        if b[7] > 2 {
            return Err(Error::Malformed("p4te feedback"));
        }
        Ok(Feedback {
            kind,
            port: be16(b, 2),
            delay: Event::from_u8(b[4])?,
            queue: Event::from_u8(b[5])?,
            util: Event::from_u8(b[6])?,
            color: b[7],
            delay_ns: be32(b, 8),
            queue_bytes: be32(b, 12),
        })
    }
}

/// Whether a frame is a P4TE feedback frame (EtherType and tag).
pub fn is_feedback(frame: &[u8]) -> bool {
    frame.len() > ethernet::HEADER_LEN && be16(frame, 12) == ETHERTYPE && frame[ethernet::HEADER_LEN] == FEEDBACK_TAG
}

/// The fields of a FACK taken from the data packet that triggers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FackOf {
    /// The data packet's source (the FACK's destination).
    pub sender: ipv4::Ipv4Address,
    /// The data packet's destination (the FACK's source).
    pub receiver: ipv4::Ipv4Address,
    /// The data packet's TCP source port.
    pub sender_port: u16,
    /// The data packet's TCP destination port.
    pub receiver_port: u16,
    /// The FACK's sequence number (the data packet's acknowledgment).
    pub seq: u32,
    /// The FACK's acknowledgment number.
    pub ack: u32,
    /// The FACK's window.
    pub window: u16,
    /// DSCP of the flow.
    pub dscp: u8,
}

/// A FACK (§6.4): a pure TCP ACK from the receiver to the sender with the
/// hop header (flags FACK | rate control applied), so the sender's leaf
/// recognises it; both checksums valid; MACs zero.
pub fn fack(f: &FackOf) -> BytesMut {
    let l3 = ethernet::HEADER_LEN;
    let ip_len = ipv4::HEADER_LEN + OPTION_LEN;
    let mut b = BytesMut::zeroed(l3 + ip_len + tcp::HEADER_LEN);
    put16(&mut b, 12, ethernet::EtherType::Ipv4.into());
    ipv4::Repr {
        src: f.receiver,
        dst: f.sender,
        protocol: ipv4::Protocol::Tcp,
        dscp: f.dscp,
        ecn: ipv4::Ecn::NotEct,
        ident: 0,
        ttl: 64,
        payload_len: tcp::HEADER_LEN,
    }
    .emit(&mut b[l3..]);
    // Grow the header by the option (the Repr writes none).
    let seg =
        tcp::Repr { src_port: f.receiver_port, dst_port: f.sender_port, seq: f.seq, ack: f.ack, flags: tcp::flags::ACK, window: f.window };
    let at = l3 + ipv4::HEADER_LEN;
    Hop { flags: flags::FACK | flags::RATE_CONTROL_APPLIED, port: 0, t_source: 0 }.emit(&mut b[at..at + OPTION_LEN]);
    {
        let ip = &mut b[l3..];
        ip[0] = 0x40 | (ip_len / 4) as u8;
        put16(ip, 2, (ip_len + tcp::HEADER_LEN) as u16);
        ipv4::Packet::new_unchecked(ip).fill_checksum();
    }
    let t = l3 + ip_len;
    seg.emit(&mut b[t..]);
    tcp::Packet::new_unchecked(&mut b[t..]).fill_checksum(f.receiver, f.sender);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameInfo;

    fn tcp_frame() -> BytesMut {
        let l3 = ethernet::HEADER_LEN;
        let mut b = BytesMut::zeroed(l3 + ipv4::HEADER_LEN + tcp::HEADER_LEN + 100);
        put16(&mut b, 12, ethernet::EtherType::Ipv4.into());
        let (src, dst) = (ipv4::Ipv4Address::new(10, 0, 0, 1), ipv4::Ipv4Address::new(10, 0, 1, 1));
        ipv4::Repr { src, dst, protocol: ipv4::Protocol::Tcp, dscp: 4, ecn: ipv4::Ecn::NotEct, ident: 7, ttl: 64, payload_len: 120 }
            .emit(&mut b[l3..]);
        let t = l3 + ipv4::HEADER_LEN;
        tcp::Repr { src_port: 40000, dst_port: 5201, seq: 1000, ack: 77, flags: tcp::flags::ACK, window: 512 }.emit(&mut b[t..]);
        tcp::Packet::new_unchecked(&mut b[t..]).fill_checksum(src, dst);
        b
    }

    #[test]
    fn insert_write_strip_round_trip_keeps_checksums_and_ports() {
        let original = tcp_frame();
        let mut f = crate::buffer::zeroed(original.len());
        f.copy_from_slice(&original);
        let room = f.capacity();
        insert(&mut f, 14, &Hop { flags: flags::TIMESTAMP, port: 3, t_source: 123_456_789_012 }).unwrap();
        assert_eq!(f.len(), original.len() + OPTION_LEN);
        let info = FrameInfo::parse(&f).unwrap();
        let ip = info.ip.unwrap();
        assert_eq!((ip.src_port, ip.dst_port, ip.l4_offset as usize), (40000, 5201, 14 + 32), "parsers find the ports past the option");
        assert!(ipv4::Packet::new_checked(&f[14..]).unwrap().verify_checksum());
        let at = find(&f, 14).unwrap();
        let mut hop = read(&f, at).unwrap();
        assert_eq!(hop, Hop { flags: flags::TIMESTAMP, port: 3, t_source: 123_456_789_012 });
        assert_eq!(hop.delay_until(123_456_789_512), 500);
        hop.flags |= flags::RATE_CONTROL_BLOCKED;
        write(&mut f, 14, at, &hop).unwrap();
        assert!(ipv4::Packet::new_checked(&f[14..]).unwrap().verify_checksum());
        assert_eq!(strip(&mut f, 14).unwrap().flags, flags::TIMESTAMP | flags::RATE_CONTROL_BLOCKED);
        assert_eq!(&f[..], &original[..], "the host gets the sender's bytes");
        assert_eq!(f.capacity(), room, "the buffer keeps its start and its room for the next frame of the size");
        assert_eq!(find(&f, 14), None);
        assert!(strip(&mut f, 14).is_err());
    }

    #[test]
    fn feedback_frames_round_trip_and_bad_ones_are_refused() {
        let fb = Feedback {
            kind: FeedbackKind::Neighbour,
            port: 5,
            delay: Event::Increase,
            queue: Event::None,
            util: Event::Decrease,
            color: 1,
            delay_ns: 15_000_000,
            queue_bytes: 3000,
        };
        let f = fb.frame();
        assert!(is_feedback(&f));
        assert_eq!(Feedback::parse(&f), Ok(fb));
        let mut bad = f.clone();
        bad[14 + 4] = 9;
        assert!(Feedback::parse(&bad).is_err());
        assert!(Feedback::parse(&f[..20]).is_err());
        let mut other = f.clone();
        other[14] = 0;
        assert!(!is_feedback(&other) && Feedback::parse(&other).is_err());
    }

    #[test]
    fn a_fack_is_a_valid_ack_from_the_receiver() {
        let (sender, receiver) = (ipv4::Ipv4Address::new(10, 0, 0, 1), ipv4::Ipv4Address::new(10, 0, 1, 1));
        let f = fack(&FackOf { sender, receiver, sender_port: 40000, receiver_port: 5201, seq: 77, ack: 1000, window: 384, dscp: 4 });
        let info = FrameInfo::parse(&f).unwrap();
        let ip = info.ip.unwrap();
        assert_eq!((ip.src, ip.dst, ip.src_port, ip.dst_port), (receiver, sender, 5201, 40000));
        assert!(ipv4::Packet::new_checked(&f[14..]).unwrap().verify_checksum());
        let seg = tcp::Packet::new_checked(&f[ip.l4_offset as usize..]).unwrap();
        assert!(seg.verify_checksum(receiver, sender));
        assert_eq!((seg.seq(), seg.ack(), seg.window(), seg.flags()), (77, 1000, 384, tcp::flags::ACK));
        let hop = read(&f, find(&f, 14).unwrap()).unwrap();
        assert_eq!(hop.flags, flags::FACK | flags::RATE_CONTROL_APPLIED);
    }
}
