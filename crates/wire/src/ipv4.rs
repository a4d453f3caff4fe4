//! IPv4 (RFC 791) with the ECN bits (RFC 3168) and header checksum.
//!
//! `new_checked` validates version, IHL, total length against the buffer;
//! `verify_checksum` is separate so a switch can count bad checksums.
//! Setters that change a header word keep the checksum valid incrementally
//! (RFC 1624), as a switch's deparser does.

use super::{be16, checksum, put16, Error, Result};
use core::fmt;
use serde::{Deserialize, Serialize};

/// An IPv4 address.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Ipv4Address(pub u32);

impl Ipv4Address {
    /// From four octets.
    pub const fn new(a: u8, b: u8, c: u8, d: u8) -> Self {
        Ipv4Address(u32::from_be_bytes([a, b, c, d]))
    }
    /// From a 4-byte slice (caller guarantees the length).
    pub fn from_bytes(b: &[u8]) -> Self {
        Ipv4Address(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// The four octets.
    pub const fn octets(self) -> [u8; 4] {
        self.0.to_be_bytes()
    }
}
impl fmt::Debug for Ipv4Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
impl fmt::Display for Ipv4Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = self.octets();
        write!(f, "{}.{}.{}.{}", o[0], o[1], o[2], o[3])
    }
}
impl core::str::FromStr for Ipv4Address {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let a: core::net::Ipv4Addr = s.parse().map_err(|_| Error::Malformed("ipv4 address"))?;
        Ok(Ipv4Address(u32::from(a)))
    }
}

/// IP protocol numbers weft knows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// ICMP (1).
    Icmp,
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// Anything else.
    Unknown(u8),
}
impl From<u8> for Protocol {
    fn from(v: u8) -> Self {
        match v {
            1 => Protocol::Icmp,
            6 => Protocol::Tcp,
            17 => Protocol::Udp,
            n => Protocol::Unknown(n),
        }
    }
}
impl From<Protocol> for u8 {
    fn from(p: Protocol) -> u8 {
        match p {
            Protocol::Icmp => 1,
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Unknown(n) => n,
        }
    }
}

/// ECN codepoints (RFC 3168).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Ecn {
    /// 00: not ECN-capable.
    NotEct,
    /// 10: ECT(0).
    Ect0,
    /// 01: ECT(1).
    Ect1,
    /// 11: congestion experienced.
    Ce,
}
impl Ecn {
    /// From the two low bits of the TOS byte.
    pub fn from_bits(b: u8) -> Self {
        match b & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
    /// The two bits.
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }
}

/// Minimum header length.
pub const HEADER_LEN: usize = 20;

mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTO: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> Packet<B> {
    /// Wraps without checking.
    pub fn new_unchecked(buf: B) -> Self {
        Packet { buf }
    }
    /// Wraps and validates version, IHL and total length.
    pub fn new_checked(buf: B) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("ipv4"));
        }
        if b[0] >> 4 != 4 {
            return Err(Error::Malformed("ipv4"));
        }
        let ihl = ((b[0] & 0xf) as usize) * 4;
        let total = be16(b, field::LEN) as usize;
        if ihl < HEADER_LEN || total < ihl {
            return Err(Error::Malformed("ipv4"));
        }
        if b.len() < ihl || b.len() < total {
            return Err(Error::Truncated("ipv4"));
        }
        Ok(Packet { buf })
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        ((self.buf.as_ref()[field::VER_IHL] & 0xf) as usize) * 4
    }
    /// DSCP (6 bits).
    pub fn dscp(&self) -> u8 {
        self.buf.as_ref()[field::TOS] >> 2
    }
    /// ECN codepoint.
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.buf.as_ref()[field::TOS])
    }
    /// Total length field.
    pub fn total_len(&self) -> u16 {
        be16(self.buf.as_ref(), field::LEN)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buf.as_ref(), field::IDENT)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.buf.as_ref()[field::FLG_OFF] & 0x40 != 0
    }
    /// TTL.
    pub fn ttl(&self) -> u8 {
        self.buf.as_ref()[field::TTL]
    }
    /// Protocol.
    pub fn protocol(&self) -> Protocol {
        self.buf.as_ref()[field::PROTO].into()
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.buf.as_ref()[field::SRC..])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.buf.as_ref()[field::DST..])
    }
    /// Whether the header checksum is valid.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(&self.buf.as_ref()[..self.header_len()])) == 0xffff
    }
    /// The payload (up to total length).
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len()..self.total_len() as usize]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    fn set_word_keep_checksum(&mut self, at: usize, new: u16) {
        let old = be16(self.buf.as_ref(), at);
        let c = checksum::update(self.checksum(), old, new);
        let b = self.buf.as_mut();
        put16(b, at, new);
        put16(b, field::CHECKSUM, c);
    }
    /// Sets the ECN bits, updating the checksum.
    pub fn set_ecn(&mut self, e: Ecn) {
        let w = be16(self.buf.as_ref(), 0);
        self.set_word_keep_checksum(0, (w & !3) | e.bits() as u16);
    }
    /// Sets the DSCP, updating the checksum.
    pub fn set_dscp(&mut self, dscp: u8) {
        let w = be16(self.buf.as_ref(), 0);
        self.set_word_keep_checksum(0, (w & 0xff03) | (((dscp & 0x3f) as u16) << 2));
    }
    /// Decrements the TTL, updating the checksum. Returns the new TTL.
    pub fn decrement_ttl(&mut self) -> u8 {
        let w = be16(self.buf.as_ref(), field::TTL);
        let ttl = (w >> 8) as u8;
        let new_ttl = ttl.saturating_sub(1);
        self.set_word_keep_checksum(field::TTL, ((new_ttl as u16) << 8) | (w & 0xff));
        new_ttl
    }
    /// Recomputes the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buf.as_mut();
        put16(b, field::CHECKSUM, 0);
        let c = checksum::of(&b[..hl]);
        put16(b, field::CHECKSUM, c);
    }
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), self.total_len() as usize);
        &mut self.buf.as_mut()[h..t]
    }
}

/// The meaning of an IPv4 header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source.
    pub src: Ipv4Address,
    /// Destination.
    pub dst: Ipv4Address,
    /// Protocol.
    pub protocol: Protocol,
    /// DSCP.
    pub dscp: u8,
    /// ECN.
    pub ecn: Ecn,
    /// Identification.
    pub ident: u16,
    /// TTL.
    pub ttl: u8,
    /// Payload length.
    pub payload_len: usize,
}

impl Repr {
    /// Parses a checked packet, verifying the checksum.
    pub fn parse<B: AsRef<[u8]>>(p: &Packet<B>) -> Result<Self> {
        if !p.verify_checksum() {
            return Err(Error::Checksum("ipv4"));
        }
        Ok(Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            protocol: p.protocol(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            ttl: p.ttl(),
            payload_len: p.total_len() as usize - p.header_len(),
        })
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header (with DF set and a valid checksum) into `buf`.
    ///
    /// The checksum is summed from the fields' values, not read back from
    /// the bytes just written: a 16-bit load of two bytes stored apart
    /// cannot be forwarded from the store buffer and waits for both stores
    /// to reach the cache, ten times per header (three quarters of this
    /// function's time when it read them back).
    pub fn emit(&self, buf: &mut [u8]) {
        let tos = (self.dscp << 2) | self.ecn.bits();
        let len = (HEADER_LEN + self.payload_len) as u16;
        let proto: u8 = self.protocol.into();
        let (src, dst) = (self.src.octets(), self.dst.octets());
        buf[0] = 0x45;
        buf[1] = tos;
        put16(buf, field::LEN, len);
        put16(buf, field::IDENT, self.ident);
        put16(buf, field::FLG_OFF, 0x4000);
        buf[field::TTL] = self.ttl;
        buf[field::PROTO] = proto;
        buf[field::SRC..field::SRC + 4].copy_from_slice(&src);
        buf[field::DST..field::DST + 4].copy_from_slice(&dst);
        let words = [
            u16::from_be_bytes([0x45, tos]),
            len,
            self.ident,
            0x4000,
            u16::from_be_bytes([self.ttl, proto]),
            u16::from_be_bytes([src[0], src[1]]),
            u16::from_be_bytes([src[2], src[3]]),
            u16::from_be_bytes([dst[0], dst[1]]),
            u16::from_be_bytes([dst[2], dst[3]]),
        ];
        let c = !checksum::fold(words.iter().map(|&w| u32::from(w)).sum());
        put16(buf, field::CHECKSUM, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Repr {
        Repr {
            src: Ipv4Address::new(10, 0, 1, 2),
            dst: Ipv4Address::new(10, 0, 3, 4),
            protocol: Protocol::Udp,
            dscp: 26,
            ecn: Ecn::Ect0,
            ident: 0x1234,
            ttl: 64,
            payload_len: 100,
        }
    }

    #[test]
    fn checksum_matches_etherparse() {
        let r = sample();
        let mut buf = vec![0xa5u8; 120];
        r.emit(&mut buf);
        let (ep, _) = etherparse::Ipv4Header::from_slice(&buf).unwrap();
        assert_eq!(ep.header_checksum, ep.calc_header_checksum());
        assert_eq!(ep.dscp.value(), 26);
        assert_eq!(ep.ecn.value(), 2);
        assert_eq!(ep.time_to_live, 64);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn the_checksum_summed_from_the_fields_is_the_bytes_checksum() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..10_000 {
            let r = next();
            let repr = Repr {
                src: Ipv4Address(r as u32),
                dst: Ipv4Address((r >> 32) as u32),
                protocol: Protocol::from(next() as u8),
                dscp: next() as u8 & 0x3f,
                ecn: Ecn::from_bits(next() as u8 & 3),
                ident: next() as u16,
                ttl: next() as u8,
                payload_len: (next() % 65_000) as usize,
            };
            let mut b = [0u8; HEADER_LEN];
            repr.emit(&mut b);
            let mut zeroed = b;
            zeroed[field::CHECKSUM] = 0;
            zeroed[field::CHECKSUM + 1] = 0;
            assert_eq!(u16::from_be_bytes([b[10], b[11]]), checksum::of(&zeroed), "{repr:?}");
            assert_eq!(checksum::of(&b), 0, "a header with its checksum sums to all ones");
        }
    }

    #[test]
    fn known_bytes() {
        // A header computed independently (Wikipedia's IPv4 checksum example).
        let bytes =
            [0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7];
        let mut buf = bytes.to_vec();
        buf.resize(0x73, 0);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.dst_addr(), Ipv4Address::new(192, 168, 0, 199));
    }

    #[test]
    fn incremental_updates_keep_checksum_valid() {
        let mut buf = vec![0u8; 120];
        sample().emit(&mut buf);
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_ecn(Ecn::Ce);
        assert_eq!(p.decrement_ttl(), 63);
        p.set_dscp(3);
        assert!(p.verify_checksum());
        let (ep, _) = etherparse::Ipv4Header::from_slice(&buf).unwrap();
        assert_eq!(ep.header_checksum, ep.calc_header_checksum());
        assert_eq!(ep.ecn.value(), 3);
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let mut buf = vec![0u8; 120];
        sample().emit(&mut buf);
        assert_eq!(Packet::new_checked(&buf[..50]).unwrap_err(), Error::Truncated("ipv4"));
        buf[0] = 0x43;
        assert_eq!(Packet::new_checked(&buf[..]).unwrap_err(), Error::Malformed("ipv4"));
        buf[0] = 0x45;
        buf[8] ^= 1;
        assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap_err(), Error::Checksum("ipv4"));
    }
}
