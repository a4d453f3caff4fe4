//! TCP (RFC 9293) header view: ports, sequence numbers, flags (incl. ECE/CWR),
//! the receive window (P4TE rewrites it) and the checksum.

use super::{be16, be32, checksum, put16, put32, udp::pseudo_sum, Error, Ipv4Address, Result};

/// Minimum header length.
pub const HEADER_LEN: usize = 20;

/// TCP flag bits.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// ECN-Echo.
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced.
    pub const CWR: u8 = 0x80;
}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct Packet<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> Packet<B> {
    /// Wraps without checking.
    pub fn new_unchecked(buf: B) -> Self {
        Packet { buf }
    }
    /// Wraps and checks the data offset.
    pub fn new_checked(buf: B) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("tcp"));
        }
        let off = ((b[12] >> 4) as usize) * 4;
        if off < HEADER_LEN {
            return Err(Error::Malformed("tcp"));
        }
        if b.len() < off {
            return Err(Error::Truncated("tcp"));
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
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.buf.as_ref(), 4)
    }
    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        be32(self.buf.as_ref(), 8)
    }
    /// Header length.
    pub fn header_len(&self) -> usize {
        ((self.buf.as_ref()[12] >> 4) as usize) * 4
    }
    /// Flags byte.
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[13]
    }
    /// Receive window.
    pub fn window(&self) -> u16 {
        be16(self.buf.as_ref(), 14)
    }
    /// Checksum.
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 16)
    }
    /// Payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len()..]
    }
    /// Verifies the checksum over the whole buffer with the IPv4 pseudo-header.
    pub fn verify_checksum(&self, src: Ipv4Address, dst: Ipv4Address) -> bool {
        let d = self.buf.as_ref();
        checksum::fold(pseudo_sum(src, dst, 6, d.len()) + checksum::sum(d)) == 0xffff
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    /// Rewrites the receive window, keeping the checksum valid incrementally.
    pub fn set_window(&mut self, w: u16) {
        let old = self.window();
        let c = checksum::update(self.checksum(), old, w);
        let b = self.buf.as_mut();
        put16(b, 14, w);
        put16(b, 16, c);
    }
    /// Computes and writes the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, src: Ipv4Address, dst: Ipv4Address) {
        let b = self.buf.as_mut();
        put16(b, 16, 0);
        let c = !checksum::fold(pseudo_sum(src, dst, 6, b.len()) + checksum::sum(b));
        put16(b, 16, c);
    }
}

/// The meaning of a TCP header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flags.
    pub flags: u8,
    /// Receive window.
    pub window: u16,
}

impl Repr {
    /// Parses a checked segment.
    pub fn parse<B: AsRef<[u8]>>(p: &Packet<B>) -> Self {
        Repr { src_port: p.src_port(), dst_port: p.dst_port(), seq: p.seq(), ack: p.ack(), flags: p.flags(), window: p.window() }
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header with a zero checksum.
    pub fn emit(&self, buf: &mut [u8]) {
        put16(buf, 0, self.src_port);
        put16(buf, 2, self.dst_port);
        put32(buf, 4, self.seq);
        put32(buf, 8, self.ack);
        buf[12] = 5 << 4;
        buf[13] = self.flags;
        put16(buf, 14, self.window);
        put16(buf, 16, 0);
        put16(buf, 18, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_and_window_rewrite_match_etherparse() {
        let src = Ipv4Address::new(10, 1, 0, 2);
        let dst = Ipv4Address::new(10, 2, 0, 2);
        let r = Repr { src_port: 5001, dst_port: 40000, seq: 7, ack: 99, flags: flags::ACK | flags::ECE, window: 65535 };
        let mut buf = vec![0xa5u8; 20 + 5];
        r.emit(&mut buf);
        buf[20..].copy_from_slice(b"abcde");
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum(src, dst);
        p.set_window(1024);
        assert!(p.verify_checksum(src, dst));
        assert_eq!(Repr::parse(&p), Repr { window: 1024, ..r });
        let (ep, _) = etherparse::TcpHeader::from_slice(&buf).unwrap();
        assert_eq!(ep.window_size, 1024);
        assert!(ep.ece);
        assert_eq!(ep.calc_checksum_ipv4_raw(src.octets(), dst.octets(), b"abcde").unwrap(), ep.checksum);
    }

    #[test]
    fn bad_offset_is_an_error() {
        let mut buf = [0u8; 20];
        buf[12] = 0x40;
        assert_eq!(Packet::new_checked(&buf[..]).unwrap_err(), Error::Malformed("tcp"));
        buf[12] = 0x60;
        assert_eq!(Packet::new_checked(&buf[..]).unwrap_err(), Error::Truncated("tcp"));
    }
}
