//! In-band network telemetry of the INT best-nexthop scheme
//! (`../shared/papers/int-best-nexthop-lb.txt`, §III "network monitoring
//! phase"): the three INT headers a source switch inserts into a data
//! packet — hop latency, queue occupancy, link utilisation — each holding
//! the largest value measured along the path ("if the INT header is empty,
//! the transit switch inserts the measured value … otherwise … the bigger
//! value"), removed by the sink switch before the host.
//!
//! The paper does not give the bytes; this is weft's layout, an IPv4 shim
//! in the style of INT-MD over IP: right after the IPv4 header, with the
//! IPv4 protocol set to [`PROTOCOL`] (253, RFC 3692's experimental value)
//! and the original protocol kept in the shim, so the L4 header and its
//! checksum are untouched and stripping gives the host the sender's bytes.
//! [`SHIM_LEN`] bytes, big endian:
//!
//! ```text
//!  0  next protocol  u8   the packet's IPv4 protocol before insertion
//!  1  length         u8   the shim's length in 4-byte words (4)
//!  2  valid          u8   bit 0 hop latency, bit 1 queue occupancy,
//!                         bit 2 link utilisation: the header holds a value
//!  3  reserved       u8   0
//!  4  hop latency    u32  nanoseconds
//!  8  queue occup.   u32  bytes
//! 12  link util.     u32  the DRE value (packets, decayed)
//! ```
//!
//! **Probes** (§III assumption 2: "each link has at least one packet to
//! forward"; §IV: the program "parses … probe packet protocol"). A leaf's
//! packet generator sends them where data may not flow: IPv4 from the
//! leaf's address to an address behind the destination leaf, with the
//! shim (next protocol [`PROBE_PROTOCOL`]) and a [`PROBE_LEN`]-byte body,
//! big endian:
//!
//! ```text
//!  0  flow         u16  varies per probe; sits where a UDP source port
//!                       would, so transit switches' 5-tuple hashes spread
//!                       probes over their equal-cost ports
//!  2  reserved     u16  0 (where the destination port would be)
//!  4  origin leaf  u16  the sending leaf's index
//!  6  uplink       u16  the sending leaf's port the probe left on
//!  8  sequence     u32  the sender's probe count
//! ```
//!
//! Invariants: [`insert`] then [`strip`] gives back the frame byte for byte
//! (IPv4 total length and header checksum restored); a value only grows
//! along the path ([`Header::merge_max`]); a [`probe_frame`] is a valid
//! IPv4 frame of at least 60 bytes whose shim is empty.

use super::{be16, be32, ethernet, ipv4, put16, put32, Error, Result};
use bytes::BytesMut;

/// IPv4 protocol number of a packet carrying the INT shim (RFC 3692:
/// 253 and 254 are for experimentation).
pub const PROTOCOL: u8 = 253;
/// Shim length in bytes.
pub const SHIM_LEN: usize = 16;
/// IPv4 protocol under the shim of a probe (RFC 3692's other experimental
/// value).
pub const PROBE_PROTOCOL: u8 = 254;
/// Length of a probe's body.
pub const PROBE_LEN: usize = 12;

/// One of the three INT headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Time the packet spent in a switch (ingress to egress), ns.
    HopLatency,
    /// Queue depth the packet found at its egress queue, bytes.
    QueueOccupancy,
    /// The egress port's DRE utilisation value.
    LinkUtilization,
}

impl Metric {
    /// All three, in header order.
    pub const ALL: [Metric; 3] = [Metric::HopLatency, Metric::QueueOccupancy, Metric::LinkUtilization];

    fn index(self) -> usize {
        match self {
            Metric::HopLatency => 0,
            Metric::QueueOccupancy => 1,
            Metric::LinkUtilization => 2,
        }
    }
}

/// A view of the INT shim.
#[derive(Debug, Clone)]
pub struct Header<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> Header<B> {
    /// Wraps and checks the length field.
    pub fn new_checked(buf: B) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < SHIM_LEN {
            return Err(Error::Truncated("int"));
        }
        if b[1] as usize * 4 != SHIM_LEN || b[2] & !7 != 0 {
            return Err(Error::Malformed("int"));
        }
        Ok(Header { buf })
    }
    /// The IPv4 protocol of the packet under the shim.
    pub fn next_protocol(&self) -> u8 {
        self.buf.as_ref()[0]
    }
    /// The value of `m`, if a switch has written one.
    pub fn get(&self, m: Metric) -> Option<u32> {
        let b = self.buf.as_ref();
        (b[2] & (1 << m.index()) != 0).then(|| be32(b, 4 + 4 * m.index()))
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Header<B> {
    /// What a transit switch does (§III): writes `value` into an empty
    /// header, or the larger of it and the header's value.
    pub fn merge_max(&mut self, m: Metric, value: u32) {
        let now = self.get(m);
        if now.is_none_or(|v| value > v) {
            let b = self.buf.as_mut();
            put32(b, 4 + 4 * m.index(), value);
            b[2] |= 1 << m.index();
        }
    }
}

/// The meaning of the shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// The IPv4 protocol under the shim.
    pub next_protocol: u8,
    /// Hop latency (ns), if written.
    pub hop_latency: Option<u32>,
    /// Queue occupancy (bytes), if written.
    pub queue_occupancy: Option<u32>,
    /// Link utilisation (DRE value), if written.
    pub link_utilization: Option<u32>,
}

impl Repr {
    /// Parses a shim.
    pub fn parse<B: AsRef<[u8]>>(h: &Header<B>) -> Self {
        Repr {
            next_protocol: h.next_protocol(),
            hop_latency: h.get(Metric::HopLatency),
            queue_occupancy: h.get(Metric::QueueOccupancy),
            link_utilization: h.get(Metric::LinkUtilization),
        }
    }
    /// Writes the shim into `b` (at least [`SHIM_LEN`] bytes).
    pub fn emit(&self, b: &mut [u8]) {
        b[..SHIM_LEN].fill(0);
        b[0] = self.next_protocol;
        b[1] = (SHIM_LEN / 4) as u8;
        let mut h = Header { buf: &mut b[..SHIM_LEN] };
        for (m, v) in Metric::ALL.into_iter().zip([self.hop_latency, self.queue_occupancy, self.link_utilization]) {
            if let Some(v) = v {
                h.merge_max(m, v);
            }
        }
    }
}

/// Sets the IPv4 total length to `total` and the protocol to `protocol`,
/// with a fresh header checksum.
fn rewrite_ipv4(frame: &mut [u8], l3: usize, total: usize, protocol: u8) -> Result<()> {
    let total = u16::try_from(total).map_err(|_| Error::Malformed("ipv4"))?;
    let ip = frame.get_mut(l3..).ok_or(Error::Truncated("ipv4"))?;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[9] = protocol;
    ipv4::Packet::new_unchecked(ip).fill_checksum();
    Ok(())
}

/// What a source switch does: inserts an empty shim after the IPv4 header
/// at `l3` (the frame's Ethernet header before it).
pub fn insert(frame: &mut BytesMut, l3: usize) -> Result<()> {
    let (hl, total, proto) = {
        let ip = ipv4::Packet::new_checked(frame.get(l3..).ok_or(Error::Truncated("ipv4"))?)?;
        (ip.header_len(), ip.total_len() as usize, u8::from(ip.protocol()))
    };
    if proto == PROTOCOL {
        return Err(Error::Malformed("int"));
    }
    let at = l3 + hl;
    crate::buffer::open_gap(frame, at, SHIM_LEN);
    Repr { next_protocol: proto, ..Repr::default() }.emit(&mut frame[at..at + SHIM_LEN]);
    rewrite_ipv4(frame, l3, total + SHIM_LEN, PROTOCOL)
}

/// What a sink switch does: removes the shim after the IPv4 header at
/// `l3`, restores the IPv4 header, and returns the telemetry.
pub fn strip(frame: &mut BytesMut, l3: usize) -> Result<Repr> {
    let (hl, total, proto) = {
        let ip = ipv4::Packet::new_checked(frame.get(l3..).ok_or(Error::Truncated("ipv4"))?)?;
        (ip.header_len(), ip.total_len() as usize, u8::from(ip.protocol()))
    };
    if proto != PROTOCOL {
        return Err(Error::Malformed("int"));
    }
    let at = l3 + hl;
    let repr = Repr::parse(&Header::new_checked(frame.get(at..).ok_or(Error::Truncated("int"))?)?);
    if total < hl + SHIM_LEN {
        return Err(Error::Malformed("int"));
    }
    rewrite_ipv4(frame, l3, total - SHIM_LEN, repr.next_protocol)?;
    crate::buffer::close_gap(frame, at, SHIM_LEN);
    Ok(repr)
}

/// The body of a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Probe {
    /// Varies per probe (hashed as the L4 source port).
    pub flow: u16,
    /// Index of the leaf that sent it.
    pub origin_leaf: u16,
    /// The sending leaf's port it left on.
    pub uplink: u16,
    /// The sender's probe count.
    pub seq: u32,
}

impl Probe {
    /// Parses a probe body (the bytes after the shim).
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < PROBE_LEN {
            return Err(Error::Truncated("int probe"));
        }
        Ok(Probe { flow: be16(b, 0), origin_leaf: be16(b, 4), uplink: be16(b, 6), seq: be32(b, 8) })
    }
    /// Writes the body into `b` (at least [`PROBE_LEN`] bytes).
    pub fn emit(&self, b: &mut [u8]) {
        b[..PROBE_LEN].fill(0);
        put16(b, 0, self.flow);
        put16(b, 4, self.origin_leaf);
        put16(b, 6, self.uplink);
        put32(b, 8, self.seq);
    }
}

/// A whole probe frame from `src` to `dst` with an empty shim (MACs zero:
/// the switch writes them for the port it leaves on).
pub fn probe_frame(src: ipv4::Ipv4Address, dst: ipv4::Ipv4Address, probe: &Probe) -> BytesMut {
    let l3 = ethernet::HEADER_LEN;
    let mut f = BytesMut::zeroed(l3 + ipv4::HEADER_LEN + SHIM_LEN + PROBE_LEN);
    put16(&mut f, 12, ethernet::EtherType::Ipv4.into());
    ipv4::Repr {
        src,
        dst,
        protocol: ipv4::Protocol::from(PROTOCOL),
        dscp: 0,
        ecn: ipv4::Ecn::NotEct,
        ident: probe.seq as u16,
        ttl: 64,
        payload_len: SHIM_LEN + PROBE_LEN,
    }
    .emit(&mut f[l3..]);
    let at = l3 + ipv4::HEADER_LEN;
    Repr { next_protocol: PROBE_PROTOCOL, ..Repr::default() }.emit(&mut f[at..]);
    probe.emit(&mut f[at + SHIM_LEN..]);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_frame(payload: usize) -> BytesMut {
        BytesMut::from(&crate::test_frames::udp_frame(4791, payload)[..])
    }

    #[test]
    fn insert_then_strip_gives_the_senders_bytes_back() {
        let original = udp_frame(100);
        let mut f = crate::buffer::zeroed(original.len());
        f.copy_from_slice(&original);
        let room = f.capacity();
        insert(&mut f, 14).unwrap();
        assert_eq!(f.len(), original.len() + SHIM_LEN);
        let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(u8::from(ip.protocol()), PROTOCOL);
        assert_eq!(ip.total_len() as usize, original.len() - 14 + SHIM_LEN);
        let r = strip(&mut f, 14).unwrap();
        assert_eq!(r, Repr { next_protocol: 17, ..Repr::default() });
        assert_eq!(&f[..], &original[..], "byte-identical after the sink");
        assert_eq!(f.capacity(), room, "the buffer keeps its start and its room for the next frame of the size");
    }

    #[test]
    fn transit_switches_keep_the_largest_value() {
        let mut f = udp_frame(64);
        insert(&mut f, 14).unwrap();
        for (lat, q, util) in [(500, 3000, 7), (200, 9000, 2), (900, 0, 5)] {
            let mut h = Header::new_checked(&mut f[34..]).unwrap();
            h.merge_max(Metric::HopLatency, lat);
            h.merge_max(Metric::QueueOccupancy, q);
            h.merge_max(Metric::LinkUtilization, util);
        }
        let r = strip(&mut f, 14).unwrap();
        assert_eq!((r.hop_latency, r.queue_occupancy, r.link_utilization), (Some(900), Some(9000), Some(7)));
        // An empty header takes the first value, even 0.
        let mut g = udp_frame(64);
        insert(&mut g, 14).unwrap();
        Header::new_checked(&mut g[34..]).unwrap().merge_max(Metric::QueueOccupancy, 0);
        let r = strip(&mut g, 14).unwrap();
        assert_eq!((r.hop_latency, r.queue_occupancy), (None, Some(0)));
    }

    #[test]
    fn a_probe_frame_is_ipv4_with_an_empty_shim_and_its_body() {
        let p = Probe { flow: 0xabcd, origin_leaf: 3, uplink: 9, seq: 77 };
        let (src, dst) = (ipv4::Ipv4Address(0x0a00_0001), ipv4::Ipv4Address(0x0a01_0002));
        let f = probe_frame(src, dst, &p);
        assert!(f.len() >= 60, "an Ethernet frame's minimum");
        let info = crate::frame::FrameInfo::parse(&f).expect("parses");
        let ip = info.ip.expect("ipv4");
        assert_eq!((ip.src, ip.dst, ip.protocol), (src, dst, PROTOCOL));
        let h = Header::new_checked(&f[ip.l4_offset as usize..]).expect("shim");
        assert_eq!(Repr::parse(&h), Repr { next_protocol: PROBE_PROTOCOL, ..Repr::default() });
        assert_eq!(Probe::parse(&f[ip.l4_offset as usize + SHIM_LEN..]), Ok(p));
        assert_eq!(Probe::parse(&[0; 5]), Err(Error::Truncated("int probe")));
    }

    #[test]
    fn errors() {
        let mut f = udp_frame(64);
        assert_eq!(strip(&mut f, 14).unwrap_err(), Error::Malformed("int"), "no shim to strip");
        insert(&mut f, 14).unwrap();
        assert_eq!(insert(&mut f, 14).unwrap_err(), Error::Malformed("int"), "one shim per packet");
        let mut bad = f.clone();
        bad[35] = 5;
        assert_eq!(strip(&mut bad, 14).unwrap_err(), Error::Malformed("int"), "length field");
        assert_eq!(Header::new_checked(&f[34..40]).unwrap_err(), Error::Truncated("int"));
        let mut short = BytesMut::from(&f[..20]);
        assert_eq!(strip(&mut short, 14).unwrap_err(), Error::Truncated("ipv4"));
    }
}
