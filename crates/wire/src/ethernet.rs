//! Ethernet II frames with an optional 802.1Q tag.
//!
//! Layout: destination MAC (6), source MAC (6), [TPID 0x8100 (2), TCI (2)],
//! EtherType (2), payload. The view reports the payload offset so both
//! tagged and untagged frames parse with one call.

use super::{be16, put16, Error, Result};
use core::fmt;
use serde::{Deserialize, Serialize};

/// A 48-bit MAC address.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// The broadcast address.
    pub const BROADCAST: Self = EthernetAddress([0xff; 6]);
    /// The 802.1Qbb / 802.3x MAC-control multicast address.
    pub const MAC_CONTROL: Self = EthernetAddress([0x01, 0x80, 0xc2, 0, 0, 1]);
    /// Whether this is a broadcast address.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }
    /// Whether the group bit is set.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

/// EtherType values weft knows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EtherType {
    /// IPv4 (0x0800).
    Ipv4,
    /// ARP (0x0806).
    Arp,
    /// 802.1Q VLAN tag (0x8100).
    Vlan,
    /// MAC control, i.e. PAUSE / PFC (0x8808).
    MacControl,
    /// IPv6 (0x86dd), forwarded opaquely.
    Ipv6,
    /// Anything else.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            0x8808 => EtherType::MacControl,
            0x86dd => EtherType::Ipv6,
            n => EtherType::Unknown(n),
        }
    }
}
impl From<EtherType> for u16 {
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::MacControl => 0x8808,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Unknown(n) => n,
        }
    }
}

mod field {
    pub const DST: core::ops::Range<usize> = 0..6;
    pub const SRC: core::ops::Range<usize> = 6..12;
    pub const TYPE: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_TYPE: usize = 16;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = 14;
/// Length of an 802.1Q-tagged Ethernet header.
pub const TAGGED_HEADER_LEN: usize = 18;

/// A view of an Ethernet frame.
#[derive(Debug, Clone)]
pub struct Frame<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> Frame<B> {
    /// Wraps without checking (only for buffers sized by the caller).
    pub fn new_unchecked(buf: B) -> Self {
        Frame { buf }
    }
    /// Wraps and checks that the (possibly tagged) header fits.
    pub fn new_checked(buf: B) -> Result<Self> {
        let f = Frame { buf };
        let b = f.buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("ethernet"));
        }
        if be16(b, field::TYPE) == 0x8100 && b.len() < TAGGED_HEADER_LEN {
            return Err(Error::Truncated("802.1q"));
        }
        Ok(f)
    }
    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> B {
        self.buf
    }
    /// Destination MAC.
    pub fn dst_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buf.as_ref()[field::DST]);
        EthernetAddress(a)
    }
    /// Source MAC.
    pub fn src_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buf.as_ref()[field::SRC]);
        EthernetAddress(a)
    }
    /// Whether an 802.1Q tag is present.
    pub fn is_tagged(&self) -> bool {
        be16(self.buf.as_ref(), field::TYPE) == 0x8100
    }
    /// The VLAN tag control information (PCP 3 | DEI 1 | VID 12), if tagged.
    pub fn tci(&self) -> Option<u16> {
        self.is_tagged().then(|| be16(self.buf.as_ref(), field::TCI))
    }
    /// The priority code point of the tag, if tagged.
    pub fn pcp(&self) -> Option<u8> {
        self.tci().map(|t| (t >> 13) as u8)
    }
    /// The EtherType of the payload (after the tag, if any).
    pub fn ethertype(&self) -> EtherType {
        let b = self.buf.as_ref();
        if self.is_tagged() {
            be16(b, field::INNER_TYPE).into()
        } else {
            be16(b, field::TYPE).into()
        }
    }
    /// Offset of the payload.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            TAGGED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len()..]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Frame<B> {
    /// Sets the destination MAC.
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buf.as_mut()[field::DST].copy_from_slice(&a.0);
    }
    /// Sets the source MAC.
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buf.as_mut()[field::SRC].copy_from_slice(&a.0);
    }
    /// Sets the EtherType of an untagged frame.
    pub fn set_ethertype(&mut self, t: EtherType) {
        put16(self.buf.as_mut(), field::TYPE, t.into());
    }
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buf.as_mut()[h..]
    }
}

/// The meaning of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Destination MAC.
    pub dst: EthernetAddress,
    /// Source MAC.
    pub src: EthernetAddress,
    /// 802.1Q TCI if tagged.
    pub vlan_tci: Option<u16>,
    /// Payload EtherType.
    pub ethertype: EtherType,
}

impl Repr {
    /// Parses a checked frame.
    pub fn parse<B: AsRef<[u8]>>(f: &Frame<B>) -> Self {
        Repr { dst: f.dst_addr(), src: f.src_addr(), vlan_tci: f.tci(), ethertype: f.ethertype() }
    }
    /// Header length on the wire.
    pub fn buffer_len(&self) -> usize {
        if self.vlan_tci.is_some() {
            TAGGED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }
    /// Writes the header at the start of `buf` (at least `buffer_len` bytes).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[field::DST].copy_from_slice(&self.dst.0);
        buf[field::SRC].copy_from_slice(&self.src.0);
        match self.vlan_tci {
            Some(tci) => {
                put16(buf, field::TYPE, 0x8100);
                put16(buf, field::TCI, tci);
                put16(buf, field::INNER_TYPE, self.ethertype.into());
            }
            None => put16(buf, field::TYPE, self.ethertype.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAGGED: [u8; 20] = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x81, 0x00, 0xa0, 0x05, 0x08, 0x00, 0xaa, 0xbb];

    #[test]
    fn parses_tagged_frame() {
        let f = Frame::new_checked(&TAGGED[..]).unwrap();
        assert!(f.dst_addr().is_broadcast());
        assert_eq!(f.pcp(), Some(5));
        assert_eq!(f.tci(), Some(0xa005));
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn emit_round_trips_over_poison() {
        let r = Repr::parse(&Frame::new_checked(&TAGGED[..]).unwrap());
        let mut buf = [0xa5u8; 18];
        r.emit(&mut buf);
        assert_eq!(&buf[..], &TAGGED[..18]);
    }

    #[test]
    fn truncated_is_an_error() {
        assert_eq!(Frame::new_checked(&TAGGED[..13]).unwrap_err(), Error::Truncated("ethernet"));
        assert_eq!(Frame::new_checked(&TAGGED[..16]).unwrap_err(), Error::Truncated("802.1q"));
    }
}
