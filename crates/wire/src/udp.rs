//! UDP (RFC 768). The checksum is optional over IPv4; RoCEv2 sends 0.

use super::{be16, checksum, put16, Error, Ipv4Address, Result};

/// Header length.
pub const HEADER_LEN: usize = 8;
/// The RoCEv2 destination port.
pub const ROCEV2_PORT: u16 = 4791;
/// The VXLAN destination port.
pub const VXLAN_PORT: u16 = 4789;

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct Packet<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> Packet<B> {
    /// Wraps without checking.
    pub fn new_unchecked(buf: B) -> Self {
        Packet { buf }
    }
    /// Wraps and checks header and length field.
    pub fn new_checked(buf: B) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("udp"));
        }
        let len = be16(b, 4) as usize;
        if len < HEADER_LEN {
            return Err(Error::Malformed("udp"));
        }
        if b.len() < len {
            return Err(Error::Truncated("udp"));
        }
        Ok(Packet { buf })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }
    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }
    /// Whether the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        self.len() as usize == HEADER_LEN
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 6)
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..self.len() as usize]
    }
    /// Verifies the checksum with the IPv4 pseudo-header (0 = not computed, valid).
    pub fn verify_checksum(&self, src: Ipv4Address, dst: Ipv4Address) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let data = &self.buf.as_ref()[..self.len() as usize];
        checksum::fold(pseudo_sum(src, dst, 17, data.len()) + checksum::sum(data)) == 0xffff
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = self.len() as usize;
        &mut self.buf.as_mut()[HEADER_LEN..l]
    }
    /// Sets the source port (checksum must be refilled if used).
    pub fn set_src_port(&mut self, p: u16) {
        put16(self.buf.as_mut(), 0, p)
    }
    /// Computes and writes the checksum.
    pub fn fill_checksum(&mut self, src: Ipv4Address, dst: Ipv4Address) {
        let l = self.len() as usize;
        let b = self.buf.as_mut();
        put16(b, 6, 0);
        let mut c = !checksum::fold(pseudo_sum(src, dst, 17, l) + checksum::sum(&b[..l]));
        if c == 0 {
            c = 0xffff;
        }
        put16(b, 6, c);
    }
}

/// Sum of the IPv4 pseudo-header.
pub(crate) fn pseudo_sum(src: Ipv4Address, dst: Ipv4Address, proto: u8, len: usize) -> u32 {
    let s = src.0;
    let d = dst.0;
    (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + proto as u32 + len as u32
}

/// The meaning of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length.
    pub payload_len: usize,
}

impl Repr {
    /// Parses a checked datagram.
    pub fn parse<B: AsRef<[u8]>>(p: &Packet<B>) -> Self {
        Repr { src_port: p.src_port(), dst_port: p.dst_port(), payload_len: p.len() as usize - HEADER_LEN }
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header with a zero checksum.
    pub fn emit(&self, buf: &mut [u8]) {
        put16(buf, 0, self.src_port);
        put16(buf, 2, self.dst_port);
        put16(buf, 4, (HEADER_LEN + self.payload_len) as u16);
        put16(buf, 6, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_etherparse() {
        let src = Ipv4Address::new(10, 0, 0, 2);
        let dst = Ipv4Address::new(10, 0, 1, 2);
        let mut buf = vec![0u8; 8 + 13];
        Repr { src_port: 49152, dst_port: 4791, payload_len: 13 }.emit(&mut buf);
        buf[8..].copy_from_slice(b"hello, world!");
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum(src, dst);
        assert!(p.verify_checksum(src, dst));
        let ours = p.checksum();
        let ep = etherparse::UdpHeader::from_slice(&buf).unwrap().0;
        let ip = etherparse::Ipv4Header::new(21, 64, etherparse::IpNumber::UDP, src.octets(), dst.octets()).unwrap();
        assert_eq!(ep.calc_checksum_ipv4(&ip, b"hello, world!").unwrap(), ours);
    }

    #[test]
    fn bad_length_is_an_error() {
        let mut buf = [0u8; 8];
        Repr { src_port: 1, dst_port: 2, payload_len: 10 }.emit(&mut buf);
        assert_eq!(Packet::new_checked(&buf[..]).unwrap_err(), Error::Truncated("udp"));
        buf[5] = 3;
        assert_eq!(Packet::new_checked(&buf[..]).unwrap_err(), Error::Malformed("udp"));
    }
}
