//! Segmentation offload at a host's NIC: the virtio-net header
//! a TAP device opened with `IFF_VNET_HDR` puts before every frame, the
//! segmentation of the super-frames a host's kernel hands its NIC (TSO for
//! TCP, USO for UDP), and the coalescing of in-order TCP segments toward a
//! host (GRO).
//!
//! A real NIC with TSO receives one 64 KB TCP packet from the kernel and
//! puts MTU-sized frames on the wire; one with GRO/LRO hands the kernel one
//! large packet for a run of in-order segments. weft's TAP hosts do the
//! same, so the fabric (every scheme, counter and capture) only ever sees
//! MTU frames with correct headers and checksums, while the host kernels
//! and the TAP read/write path handle one packet per 64 KB.
//!
//! References (read, not copied):
//! - the header: `struct virtio_net_hdr` in Linux
//!   include/uapi/linux/virtio_net.h — the legacy 10-byte layout a TAP uses
//!   unless TUNSETVNETHDRSZ changes it, fields in the host's byte order (a
//!   TAP without TUNSETVNETLE/BE on a little-endian host);
//! - segmentation: Linux net/ipv4/tcp_offload.c `tcp_gso_segment` and
//!   net/ipv4/af_inet.c `inet_gso_segment`: every segment carries the
//!   super-frame's headers with its own IPv4 total length, identification
//!   (+1 per segment) and header checksum, the TCP sequence number advanced
//!   by the payload before it, CWR only on the first segment, FIN and PSH
//!   only on the last, and a complete TCP checksum; UDP segments
//!   (`__udp_gso_segment`) each get their own UDP length and checksum;
//! - coalescing: `tcp_gro_receive` in the same file: segments merge when
//!   their addresses, ports, ToS, TTL, acknowledgment number, TCP header
//!   options and flags (other than PSH) are equal, the sequence numbers are
//!   contiguous, every segment but the last has the first one's payload
//!   size, and nothing after a PSH or a shorter segment joins. The merged
//!   packet is handed to the kernel as a GSO packet with a partial checksum
//!   (`VIRTIO_NET_HDR_F_NEEDS_CSUM`), as virtio-net does.
//!
//! Invariants: no segment is longer than the super-frame's headers plus
//! `gso_size`; a run of segments coalesced here segments back into the same
//! frames; a segment whose TCP checksum is wrong is never merged (merging
//! would give the corrupt data a fresh, valid checksum).

use crate::tcp::flags::{ACK as TCP_ACK, CWR as TCP_CWR, FIN as TCP_FIN, PSH as TCP_PSH};
use crate::{be16, be32, checksum, put16, put32, udp::pseudo_sum, Error, EtherType, Ipv4Address, Result};

/// Length of the virtio-net header before every frame of an
/// `IFF_VNET_HDR` TAP.
pub const VNET_HDR_LEN: usize = 10;

/// `flags`: the checksum from `csum_start` to the end is still to be
/// computed and stored at `csum_start + csum_offset`.
pub const F_NEEDS_CSUM: u8 = 1;

/// `gso_type` values.
pub mod gso_type {
    /// A single frame.
    pub const NONE: u8 = 0;
    /// IPv4 TCP segmentation.
    pub const TCPV4: u8 = 1;
    /// IPv6 TCP segmentation.
    pub const TCPV6: u8 = 4;
    /// UDP segmentation (USO, IPv4 or IPv6).
    pub const UDP_L4: u8 = 5;
    /// The ECN bit: segments of a packet with CWR set.
    pub const ECN: u8 = 0x80;
}

const ETH_LEN: usize = 14;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// The virtio-net header (`struct virtio_net_hdr`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `F_NEEDS_CSUM` and others.
    pub flags: u8,
    /// One of [`gso_type`].
    pub gso_type: u8,
    /// Length of the headers (Ethernet to L4).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the partial checksum starts.
    pub csum_start: u16,
    /// Where, after `csum_start`, the checksum goes.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Parses the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < VNET_HDR_LEN {
            return Err(Error::Truncated("virtio-net"));
        }
        let ne = |at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
        Ok(VnetHdr { flags: b[0], gso_type: b[1], hdr_len: ne(2), gso_size: ne(4), csum_start: ne(6), csum_offset: ne(8) })
    }
    /// The header's bytes.
    pub fn emit(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        for (i, v) in [self.hdr_len, self.gso_size, self.csum_start, self.csum_offset].into_iter().enumerate() {
            b[2 + 2 * i..4 + 2 * i].copy_from_slice(&v.to_ne_bytes());
        }
        b
    }
}

/// Offsets of an Ethernet/IPv4/L4 frame without VLAN tag.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Start of the L4 header.
    l4: usize,
    /// End of the L4 header (start of the payload).
    payload: usize,
    /// End of the IPv4 packet (frame length without Ethernet padding).
    end: usize,
    proto: u8,
}

fn layout(f: &[u8]) -> Result<Layout> {
    if f.len() < ETH_LEN + 20 || EtherType::from(be16(f, 12)) != EtherType::Ipv4 || f[ETH_LEN] >> 4 != 4 {
        return Err(Error::Malformed("offload: not Ethernet/IPv4"));
    }
    let ihl = ((f[ETH_LEN] & 0xf) as usize) * 4;
    let tot = be16(f, ETH_LEN + 2) as usize;
    let l4 = ETH_LEN + ihl;
    // A super-frame's total length may be 0 (larger than 64 KiB) or
    // exceed the frame: the frame's own length counts then.
    let end = if tot >= ihl && ETH_LEN + tot <= f.len() { ETH_LEN + tot } else { f.len() };
    if ihl < 20 || end < l4 {
        return Err(Error::Malformed("offload: IPv4 header"));
    }
    let proto = f[ETH_LEN + 9];
    let l4_len = match proto {
        PROTO_TCP if end >= l4 + 20 => ((f[l4 + 12] >> 4) as usize) * 4,
        PROTO_UDP => 8,
        _ => return Err(Error::Malformed("offload: not TCP or UDP")),
    };
    // A TCP header is at least 20 bytes whatever its data offset says
    // (fuzz finding: an offset of 2 words made `segment` write the flags
    // past a short segment).
    let min = if proto == PROTO_TCP { 20 } else { 8 };
    if l4_len < min || end < l4 + l4_len {
        return Err(Error::Truncated("offload: L4"));
    }
    Ok(Layout { l4, payload: l4 + l4_len, end, proto })
}

fn addrs(f: &[u8]) -> (Ipv4Address, Ipv4Address) {
    (Ipv4Address(be32(f, ETH_LEN + 12)), Ipv4Address(be32(f, ETH_LEN + 16)))
}

/// Completes a partial checksum (`F_NEEDS_CSUM`): the field at
/// `start + offset` holds the pseudo-header sum; the sum from `start` to the
/// end, complemented, replaces it.
pub fn complete_checksum(frame: &mut [u8], start: usize, offset: usize) -> Result<()> {
    let at = start.checked_add(offset).filter(|at| at + 2 <= frame.len()).ok_or(Error::Malformed("offload: checksum offsets"))?;
    let c = !checksum::fold(checksum::sum(&frame[start..]));
    put16(frame, at, c);
    Ok(())
}

/// What a host's NIC puts on the wire for one frame `frame` the kernel
/// handed it with header `h`: the frame itself with its checksum completed,
/// or the MTU segments of a TCP/UDP super-frame, each passed to `out` in
/// order. Returns the number of frames. A frame that cannot be segmented
/// (not IPv4, an unknown GSO type, offsets outside the frame) is an error
/// and yields nothing.
pub fn segment(h: &VnetHdr, frame: &mut [u8], out: &mut impl FnMut(&[u8])) -> Result<usize> {
    let kind = h.gso_type & !gso_type::ECN;
    if kind == gso_type::NONE {
        if h.flags & F_NEEDS_CSUM != 0 {
            complete_checksum(frame, h.csum_start as usize, h.csum_offset as usize)?;
        }
        out(frame);
        return Ok(1);
    }
    if kind != gso_type::TCPV4 && kind != gso_type::UDP_L4 {
        return Err(Error::Malformed("offload: GSO type"));
    }
    let l = layout(frame)?;
    if (kind == gso_type::TCPV4) != (l.proto == PROTO_TCP) {
        return Err(Error::Malformed("offload: GSO type does not match the protocol"));
    }
    let mss = h.gso_size as usize;
    if mss == 0 {
        return Err(Error::Malformed("offload: gso_size 0"));
    }
    let (src, dst) = addrs(frame);
    let payload_len = l.end - l.payload;
    if payload_len <= mss {
        // Nothing to cut: only the checksum.
        let len = l.end;
        let f = &mut frame[..len];
        put16(f, ETH_LEN + 2, (len - ETH_LEN) as u16);
        fill_ip_checksum(f, l.l4);
        fill_l4_checksum(f, l, src, dst);
        out(f);
        return Ok(1);
    }
    let id0 = be16(frame, ETH_LEN + 4);
    let seq0 = if l.proto == PROTO_TCP { be32(frame, l.l4 + 4) } else { 0 };
    let flags0 = if l.proto == PROTO_TCP { frame[l.l4 + 13] } else { 0 };
    let mut seg = Vec::with_capacity(l.payload + mss);
    let mut n = 0;
    let mut off = l.payload;
    while off < l.end {
        let take = mss.min(l.end - off);
        let last = off + take == l.end;
        seg.clear();
        seg.extend_from_slice(&frame[..l.payload]);
        seg.extend_from_slice(&frame[off..off + take]);
        let len = seg.len();
        put16(&mut seg, ETH_LEN + 2, (len - ETH_LEN) as u16);
        put16(&mut seg, ETH_LEN + 4, id0.wrapping_add(n as u16));
        fill_ip_checksum(&mut seg, l.l4);
        if l.proto == PROTO_TCP {
            put32(&mut seg, l.l4 + 4, seq0.wrapping_add((off - l.payload) as u32));
            let mut fl = flags0;
            if n > 0 {
                fl &= !TCP_CWR;
            }
            if !last {
                fl &= !(TCP_FIN | TCP_PSH);
            }
            seg[l.l4 + 13] = fl;
        }
        fill_l4_checksum(&mut seg, l, src, dst);
        out(&seg);
        n += 1;
        off += take;
    }
    Ok(n)
}

fn fill_ip_checksum(f: &mut [u8], l4: usize) {
    put16(f, ETH_LEN + 10, 0);
    let c = checksum::of(&f[ETH_LEN..l4]);
    put16(f, ETH_LEN + 10, c);
}

fn fill_l4_checksum(f: &mut [u8], l: Layout, src: Ipv4Address, dst: Ipv4Address) {
    let seg_end = f.len();
    let at = if l.proto == PROTO_TCP { l.l4 + 16 } else { l.l4 + 6 };
    if l.proto == PROTO_UDP {
        put16(f, l.l4 + 4, (seg_end - l.l4) as u16);
    }
    put16(f, at, 0);
    let mut c = !checksum::fold(pseudo_sum(src, dst, l.proto, seg_end - l.l4) + checksum::sum(&f[l.l4..seg_end]));
    if c == 0 && l.proto == PROTO_UDP {
        c = 0xffff;
    }
    put16(f, at, c);
}

/// The flow of a TCP segment that may join a coalesced packet, and what
/// must stay equal across it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FlowKey {
    addrs: (u32, u32),
    ports: u32,
    tos: u8,
    ttl: u8,
    df: bool,
    ack: u32,
    window: u16,
    tcp_hdr_len: usize,
}

/// Coalesces in-order TCP segments of one flow into one packet for a
/// host's kernel (GRO), one frame at a time.
///
/// [`Coalescer::push`] either appends a frame to the packet being built or
/// returns `false`, in which case the caller flushes ([`Coalescer::take`])
/// and pushes again (a frame that cannot merge with anything then starts a
/// packet of its own).
#[derive(Debug, Default)]
pub struct Coalescer {
    buf: Vec<u8>,
    key: Option<FlowKey>,
    layout: Option<Layout>,
    /// Payload size of the first segment (the GSO size).
    mss: usize,
    next_seq: u32,
    segments: usize,
    closed: bool,
    max_len: usize,
}

impl Coalescer {
    /// A coalescer whose packets stay at most `max_len` bytes (Ethernet
    /// header included; at most 64 KiB of IPv4).
    pub fn new(max_len: usize) -> Self {
        Coalescer { max_len: max_len.min(ETH_LEN + 65_535), ..Default::default() }
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Adds `frame`; `false` if it does not continue the held packet (held
    /// unchanged then).
    pub fn push(&mut self, frame: &[u8]) -> bool {
        if self.buf.is_empty() {
            self.start(frame);
            return true;
        }
        let (Some(key), Some(l)) = (self.key, self.layout) else { return false };
        if self.closed {
            return false;
        }
        let Some((k2, l2)) = mergeable(frame) else { return false };
        let payload = &frame[l2.payload..l2.end];
        if k2 != key
            || frame[..l2.payload].len() != l.payload
            || frame[l.l4 + 20..l.payload] != self.buf[l.l4 + 20..l.payload]
            || be32(frame, l.l4 + 4) != self.next_seq
            || payload.len() > self.mss
            || self.buf.len() + payload.len() > self.max_len
        {
            return false;
        }
        self.buf.extend_from_slice(payload);
        self.next_seq = self.next_seq.wrapping_add(payload.len() as u32);
        self.segments += 1;
        let fl = frame[l.l4 + 13];
        if fl & TCP_PSH != 0 {
            self.buf[l.l4 + 13] |= TCP_PSH;
        }
        self.closed = payload.len() < self.mss || fl & TCP_PSH != 0;
        true
    }

    fn start(&mut self, frame: &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(frame);
        self.segments = 1;
        self.key = None;
        self.layout = None;
        if let Some((k, l)) = mergeable(frame) {
            let payload = l.end - l.payload;
            self.buf.truncate(l.end);
            self.key = Some(k);
            self.layout = Some(l);
            self.mss = payload;
            self.next_seq = be32(frame, l.l4 + 4).wrapping_add(payload as u32);
            self.closed = frame[l.l4 + 13] & TCP_PSH != 0;
        }
    }

    /// The held packet with its virtio-net header, and the number of
    /// segments in it; empties the coalescer. A single frame goes out
    /// unchanged with an empty header.
    pub fn take(&mut self) -> Option<(VnetHdr, Vec<u8>, usize)> {
        if self.buf.is_empty() {
            return None;
        }
        let mut buf = std::mem::take(&mut self.buf);
        let segments = std::mem::take(&mut self.segments);
        let (key, layout) = (self.key.take(), self.layout.take());
        let (Some(_), Some(l), true) = (key, layout, segments > 1) else {
            return Some((VnetHdr::default(), buf, segments));
        };
        let len = buf.len();
        put16(&mut buf, ETH_LEN + 2, (len - ETH_LEN) as u16);
        fill_ip_checksum(&mut buf, l.l4);
        // Partial checksum: the pseudo-header sum, folded, not complemented;
        // the kernel completes it (it trusts the segments, which were checked).
        let (src, dst) = addrs(&buf);
        let pseudo = checksum::fold(pseudo_sum(src, dst, PROTO_TCP, len - l.l4));
        put16(&mut buf, l.l4 + 16, pseudo);
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: gso_type::TCPV4,
            hdr_len: l.payload as u16,
            gso_size: self.mss as u16,
            csum_start: l.l4 as u16,
            csum_offset: 16,
        };
        Some((h, buf, segments))
    }
}

/// The flow key and layout of a TCP segment that may be coalesced: IPv4
/// without fragmentation, TCP with payload, only ACK (and PSH) set, a
/// correct TCP checksum.
fn mergeable(f: &[u8]) -> Option<(FlowKey, Layout)> {
    let l = layout(f).ok()?;
    if l.proto != PROTO_TCP || l.end == l.payload {
        return None;
    }
    let frag = be16(f, ETH_LEN + 6);
    if frag & 0x3fff != 0 {
        return None;
    }
    let fl = f[l.l4 + 13];
    if fl & !(TCP_ACK | TCP_PSH) != 0 || fl & TCP_ACK == 0 {
        return None;
    }
    let (src, dst) = addrs(f);
    let seg = &f[l.l4..l.end];
    if checksum::fold(pseudo_sum(src, dst, PROTO_TCP, seg.len()) + checksum::sum(seg)) != 0xffff {
        return None;
    }
    let key = FlowKey {
        addrs: (src.0, dst.0),
        ports: be32(f, l.l4),
        tos: f[ETH_LEN + 1],
        ttl: f[ETH_LEN + 8],
        df: frag & 0x4000 != 0,
        ack: be32(f, l.l4 + 8),
        window: be16(f, l.l4 + 14),
        tcp_hdr_len: l.payload - l.l4,
    };
    Some((key, l))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tcp_header_shorter_than_20_bytes_is_refused_not_overrun() {
        // Fuzz finding (wire_headers): virtio-net header (TCPv4, gso_size 8)
        // then a TCP header whose data offset says 8 bytes.
        let input: &[u8] = &[
            0x00, 0x01, 0x00, 0x00, 0x03, 0x00, 0x09, 0xff, 0xff, 0xff, 0xff, 0x27, 0x01, 0x00, 0x03, 0x00, 0x00, 0x03, 0x00, 0x01, 0x00,
            0x00, 0x08, 0x00, 0x4d, 0x01, 0x03, 0x00, 0x4a, 0x00, 0x01, 0x01, 0x00, 0x06, 0x00, 0x00, 0x00, 0x26, 0x29, 0x4a, 0x00, 0x01,
            0x00, 0x00, 0x03, 0x00, 0x4a, 0x00, 0x00, 0x3b, 0x00, 0x00, 0x00, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc,
            0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xaf, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x22, 0x03, 0xe3, 0xff,
            0x00, 0xff, 0xff, 0x51, 0x2e, 0x81, 0x81, 0x81, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00,
        ];
        let h = super::VnetHdr::parse(input).unwrap();
        let mut frame = input[super::VNET_HDR_LEN..].to_vec();
        let mut n = 0;
        let r = super::segment(&h, &mut frame, &mut |_s: &[u8]| n += 1);
        assert!(r.is_err() && n == 0, "{r:?}");
    }

    use super::*;
    use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

    /// A TCP super-frame as the kernel hands a TSO NIC: `len` payload bytes,
    /// IPv4 total length set, TCP checksum holding the pseudo-header sum.
    fn super_frame(len: usize, flags: u8) -> Vec<u8> {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 1, 1], 64)
            .tcp(40000, 5201, 1_000_000, 512)
            .ack(77)
            .options(&[etherparse::TcpOptionElement::Timestamp(5, 6)])
            .unwrap();
        let b = if flags & TCP_PSH != 0 { b.psh() } else { b };
        let mut f = Vec::new();
        b.write(&mut f, &payload).unwrap();
        if flags & TCP_CWR != 0 {
            f[ETH_LEN + 20 + 13] |= TCP_CWR;
        }
        // As the kernel leaves it: the pseudo-header sum in the checksum field.
        let l = layout(&f).unwrap();
        let (s, d) = addrs(&f);
        let p = checksum::fold(pseudo_sum(s, d, PROTO_TCP, l.end - l.l4));
        put16(&mut f, l.l4 + 16, p);
        f
    }

    fn tso(mss: u16) -> VnetHdr {
        VnetHdr { flags: F_NEEDS_CSUM, gso_type: gso_type::TCPV4, hdr_len: 66, gso_size: mss, csum_start: 34, csum_offset: 16 }
    }

    fn segments(h: &VnetHdr, f: &mut [u8]) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        segment(h, f, &mut |s| v.push(s.to_vec())).unwrap();
        v
    }

    #[test]
    fn the_header_round_trips() {
        let h = tso(1448);
        assert_eq!(VnetHdr::parse(&h.emit()), Ok(h));
        assert!(VnetHdr::parse(&[0; 9]).is_err());
    }

    #[test]
    fn a_tso_super_frame_becomes_mtu_segments_with_valid_headers() {
        let mss = 1448;
        let mut f = super_frame(10 * mss + 100, TCP_PSH | TCP_CWR);
        let segs = segments(&tso(mss as u16), &mut f);
        assert_eq!(segs.len(), 11);
        let mut seq = 1_000_000u32;
        for (i, s) in segs.iter().enumerate() {
            assert!(s.len() <= 14 + 20 + 32 + mss, "segment {i} is {} bytes", s.len());
            let p = SlicedPacket::from_ethernet(s).unwrap();
            let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else { panic!() };
            assert_eq!(ip.header().total_len() as usize, s.len() - 14);
            assert_eq!(ip.header().identification(), i as u16);
            let h = ip.header().to_header();
            assert_eq!(h.calc_header_checksum(), h.header_checksum, "ip checksum of {i}");
            let Some(TransportSlice::Tcp(t)) = &p.transport else { panic!() };
            assert_eq!(t.sequence_number(), seq);
            assert_eq!(t.cwr(), i == 0);
            assert_eq!(t.psh(), i == 10);
            let c = t.to_header().calc_checksum_ipv4(&h, t.payload()).unwrap();
            assert_eq!(c, t.checksum(), "tcp checksum of {i}");
            seq += t.payload().len() as u32;
        }
        assert_eq!(seq, 1_000_000 + 10 * mss as u32 + 100);
    }

    #[test]
    fn a_single_frame_gets_its_checksum_completed() {
        let mut f = super_frame(500, 0);
        let h = VnetHdr { flags: F_NEEDS_CSUM, csum_start: 34, csum_offset: 16, ..Default::default() };
        let segs = segments(&h, &mut f);
        assert_eq!(segs.len(), 1);
        let p = SlicedPacket::from_ethernet(&segs[0]).unwrap();
        let (Some(etherparse::NetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(t))) = (&p.net, &p.transport) else { panic!() };
        assert_eq!(t.to_header().calc_checksum_ipv4(&ip.header().to_header(), t.payload()).unwrap(), t.checksum());
        // Offsets outside the frame are refused, not a panic.
        let bad = VnetHdr { flags: F_NEEDS_CSUM, csum_start: 600, csum_offset: 16, ..Default::default() };
        assert!(segment(&bad, &mut f, &mut |_| {}).is_err());
    }

    #[test]
    fn udp_super_frames_are_cut_into_datagrams() {
        let payload = vec![9u8; 3000];
        let mut f = Vec::new();
        PacketBuilder::ethernet2([2; 6], [3; 6]).ipv4([10, 0, 0, 1], [10, 0, 1, 1], 64).udp(1, 2).write(&mut f, &payload).unwrap();
        let h = VnetHdr { gso_type: gso_type::UDP_L4, gso_size: 1200, ..Default::default() };
        let segs = segments(&h, &mut f);
        assert_eq!(segs.iter().map(|s| s.len() - 42).collect::<Vec<_>>(), vec![1200, 1200, 600]);
        for s in &segs {
            let p = SlicedPacket::from_ethernet(s).unwrap();
            let (Some(etherparse::NetSlice::Ipv4(ip)), Some(TransportSlice::Udp(u))) = (&p.net, &p.transport) else { panic!() };
            assert_eq!(u.length() as usize, s.len() - 34);
            assert_eq!(u.to_header().calc_checksum_ipv4(&ip.header().to_header(), u.payload()).unwrap(), u.checksum());
        }
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        let h = tso(1000);
        for len in [0, 13, 14, 30, 34, 40, 54] {
            let mut f = vec![0x45u8; len];
            assert!(segment(&h, &mut f, &mut |_| {}).is_err());
        }
        assert!(segment(&VnetHdr { gso_type: 3, ..tso(100) }, &mut super_frame(500, 0), &mut |_| {}).is_err());
        assert!(segment(&tso(0), &mut super_frame(5000, 0), &mut |_| {}).is_err());
    }

    #[test]
    fn in_order_segments_coalesce_and_segment_back_into_the_same_frames() {
        let mss = 1448;
        let mut f = super_frame(20 * mss + 5, TCP_PSH);
        let segs = segments(&tso(mss as u16), &mut f);
        let mut c = Coalescer::new(65_536);
        for s in &segs {
            assert!(c.push(s));
        }
        let (h, mut merged, n) = c.take().unwrap();
        assert_eq!(n, 21);
        assert_eq!(h.gso_size as usize, mss);
        assert_eq!(merged.len(), f.len());
        assert!(c.is_empty());
        assert_eq!(segments(&h, &mut merged), segs);
    }

    #[test]
    fn segments_that_must_not_merge_are_kept_apart() {
        let mss = 1000;
        let segs = segments(&tso(mss as u16), &mut super_frame(3 * mss, 0));
        // Out of order.
        let mut c = Coalescer::new(65_536);
        assert!(c.push(&segs[0]));
        assert!(!c.push(&segs[2]));
        // A corrupt checksum.
        let mut bad = segs[1].clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(!c.push(&bad));
        // Another flow (ToS differs: an ECN mark must not be merged away).
        let mut ce = segs[1].clone();
        ce[ETH_LEN + 1] |= 3;
        assert!(!c.push(&ce));
        assert!(c.push(&segs[1]));
        let (h, _, n) = c.take().unwrap();
        assert_eq!((n, h.gso_type), (2, gso_type::TCPV4));
        // A lone frame goes out unchanged with an empty header.
        assert!(c.push(&segs[2]));
        let (h, f, n) = c.take().unwrap();
        assert_eq!((h, n), (VnetHdr::default(), 1));
        assert_eq!(f, segs[2]);
        // Nothing joins after a shorter segment or a PSH.
        let short = segments(&tso(mss as u16), &mut super_frame(mss + 10, TCP_PSH));
        let mut c = Coalescer::new(65_536);
        assert!(c.push(&short[0]) && c.push(&short[1]));
        assert!(!c.push(&segs[0]));
        // The size bound.
        let mut c = Coalescer::new(66 + 2 * mss - 1);
        assert!(c.push(&segs[0]) && !c.push(&segs[1]));
    }
}
