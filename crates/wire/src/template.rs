//! The Ethernet, IPv4 and UDP headers of a host's frames, written from a
//! template of the host's own fields.
//!
//! A synthetic host sends every frame from one MAC and one IPv4 address
//! with the same TTL, over UDP: of the 42 bytes of those three headers,
//! about half never change from frame to frame. [`UdpHeaders`] keeps them
//! in place, with their share of the IPv4 header checksum summed once, so
//! a frame's headers are one 42-byte copy and a few stores of its own
//! fields (destination, TOS, lengths, identification, ports) and the
//! checksum finished from four more words. Written field by field through
//! [`ethernet::Repr::emit`], [`ipv4::Repr::emit`] and [`udp::Repr::emit`],
//! the same headers cost a RoCE host about 180 instructions a frame, every
//! ACK and every data packet.
//!
//! Invariant: [`UdpHeaders::write`] writes exactly the bytes those three
//! emits write for the same fields (DF set, UDP checksum zero; tested on
//! random fields), so a frame built either way is the same frame.

use crate::{ethernet, ipv4, udp, EtherType, EthernetAddress, Ipv4Address};

/// Bytes of the Ethernet (untagged), IPv4 (no options) and UDP headers.
pub const LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// Offsets in the template: the IPv4 header and the UDP header.
const L3: usize = ethernet::HEADER_LEN;
const L4: usize = L3 + ipv4::HEADER_LEN;

/// IPv4 flags and fragment offset of every frame: don't fragment.
const DONT_FRAGMENT: u16 = 0x4000;

/// What changes from frame to frame of a host: the fields of its
/// Ethernet, IPv4 and UDP headers that [`UdpHeaders`] does not fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFields {
    /// Destination MAC (the gateway's, or zero for a NIC to fill in).
    pub dst_mac: EthernetAddress,
    /// Destination address.
    pub dst: Ipv4Address,
    /// DSCP (six bits; higher bits are shifted out, as [`ipv4::Repr::emit`] does).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: ipv4::Ecn,
    /// IPv4 identification.
    pub ident: u16,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Bytes after the UDP header.
    pub payload_len: usize,
}

/// A host's template: its own header fields in place (see the module
/// documentation).
#[derive(Debug, Clone)]
pub struct UdpHeaders {
    bytes: [u8; LEN],
    /// One's-complement sum (unfolded) of the IPv4 header words the
    /// template fixes: flags, TTL and protocol, the source address.
    fixed_sum: u32,
}

impl UdpHeaders {
    /// The template of a host with MAC `src_mac` and address `src`,
    /// sending with TTL `ttl`.
    pub fn new(src_mac: EthernetAddress, src: Ipv4Address, ttl: u8) -> Self {
        let mut bytes = [0u8; LEN];
        ethernet::Repr { dst: EthernetAddress::default(), src: src_mac, vlan_tci: None, ethertype: EtherType::Ipv4 }.emit(&mut bytes);
        let proto: u8 = ipv4::Protocol::Udp.into();
        let s = src.octets();
        let ip = &mut bytes[L3..L4];
        ip[0] = 0x45;
        ip[6..8].copy_from_slice(&DONT_FRAGMENT.to_be_bytes());
        ip[8] = ttl;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&s);
        let fixed_sum = u32::from(DONT_FRAGMENT)
            + u32::from(u16::from_be_bytes([ttl, proto]))
            + u32::from(u16::from_be_bytes([s[0], s[1]]))
            + u32::from(u16::from_be_bytes([s[2], s[3]]));
        UdpHeaders { bytes, fixed_sum }
    }

    /// Writes the three headers of a frame with fields `f` into the first
    /// [`LEN`] bytes of `frame`; nothing if `frame` is shorter.
    #[inline]
    pub fn write(&self, frame: &mut [u8], f: &UdpFields) {
        let Some(h) = frame.first_chunk_mut::<LEN>() else { return };
        *h = self.bytes;
        let tos = (f.dscp << 2) | f.ecn.bits();
        let ip_len = (ipv4::HEADER_LEN + udp::HEADER_LEN + f.payload_len) as u16;
        let d = f.dst.octets();
        h[..6].copy_from_slice(&f.dst_mac.0);
        h[L3 + 1] = tos;
        h[L3 + 2..L3 + 4].copy_from_slice(&ip_len.to_be_bytes());
        h[L3 + 4..L3 + 6].copy_from_slice(&f.ident.to_be_bytes());
        h[L3 + 16..L3 + 20].copy_from_slice(&d);
        let sum = self.fixed_sum
            + u32::from(u16::from_be_bytes([0x45, tos]))
            + u32::from(ip_len)
            + u32::from(f.ident)
            + u32::from(u16::from_be_bytes([d[0], d[1]]))
            + u32::from(u16::from_be_bytes([d[2], d[3]]));
        h[L3 + 10..L3 + 12].copy_from_slice(&(!crate::checksum::fold(sum)).to_be_bytes());
        h[L4..L4 + 2].copy_from_slice(&f.src_port.to_be_bytes());
        h[L4 + 2..L4 + 4].copy_from_slice(&f.dst_port.to_be_bytes());
        h[L4 + 4..L4 + 6].copy_from_slice(&((udp::HEADER_LEN + f.payload_len) as u16).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three emits, field by field: what [`UdpHeaders::write`] must equal.
    fn emitted(src_mac: EthernetAddress, src: Ipv4Address, ttl: u8, f: &UdpFields, into: &mut [u8]) {
        ethernet::Repr { dst: f.dst_mac, src: src_mac, vlan_tci: None, ethertype: EtherType::Ipv4 }.emit(into);
        ipv4::Repr {
            src,
            dst: f.dst,
            protocol: ipv4::Protocol::Udp,
            dscp: f.dscp,
            ecn: f.ecn,
            ident: f.ident,
            ttl,
            payload_len: udp::HEADER_LEN + f.payload_len,
        }
        .emit(&mut into[L3..]);
        udp::Repr { src_port: f.src_port, dst_port: f.dst_port, payload_len: f.payload_len }.emit(&mut into[L4..]);
    }

    #[test]
    fn writes_what_the_three_emits_write_over_poison() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let ecns = [ipv4::Ecn::NotEct, ipv4::Ecn::Ect0, ipv4::Ecn::Ect1, ipv4::Ecn::Ce];
        for _ in 0..20_000 {
            let r = next();
            let mac =
                |v: u64| EthernetAddress([v as u8, (v >> 8) as u8, (v >> 16) as u8, (v >> 24) as u8, (v >> 32) as u8, (v >> 40) as u8]);
            let (src_mac, src, ttl) = (mac(r), Ipv4Address((r >> 16) as u32), (r >> 48) as u8);
            let r2 = next();
            let f = UdpFields {
                dst_mac: mac(r2 >> 8),
                dst: Ipv4Address(r2 as u32),
                dscp: (r2 >> 32) as u8,
                ecn: ecns[(r2 >> 40) as usize % 4],
                ident: (r2 >> 42) as u16,
                src_port: (r >> 8) as u16,
                dst_port: if r2 & 1 == 0 { udp::ROCEV2_PORT } else { (r2 >> 24) as u16 },
                payload_len: (r2 >> 50) as usize % 9_000,
            };
            let (mut want, mut got) = ([0xa5u8; LEN + 3], [0x5au8; LEN + 3]);
            want[LEN..].fill(0x5a);
            emitted(src_mac, src, ttl, &f, &mut want);
            UdpHeaders::new(src_mac, src, ttl).write(&mut got, &f);
            assert_eq!(want, got, "fields {f:?}");
        }
    }

    #[test]
    fn a_frame_shorter_than_the_headers_is_left_alone() {
        let t = UdpHeaders::new(EthernetAddress([2, 0, 0, 0, 0, 1]), Ipv4Address::new(10, 0, 0, 1), 64);
        let mut short = [7u8; LEN - 1];
        let f = UdpFields {
            dst_mac: EthernetAddress::default(),
            dst: Ipv4Address::new(10, 0, 0, 2),
            dscp: 0,
            ecn: ipv4::Ecn::NotEct,
            ident: 0,
            src_port: 1,
            dst_port: 2,
            payload_len: 0,
        };
        t.write(&mut short, &f);
        assert!(short.iter().all(|&b| b == 7));
    }
}
