//! VXLAN (RFC 7348) with CONGA's overlay fields (CONGA paper §3.1).
//!
//! Layout (8 bytes): flags (8; I = 0x08) | reserved (24) | VNI (24) |
//! reserved (8). CONGA's fields live in the first reserved field:
//! byte 1 = LBTag (4) | CE (3) | 0, byte 2 = FB_LBTag (4) | FB_Metric (3) | 0,
//! and byte 3 bit 7 marks that the feedback fields are valid.

use super::{be24, put24, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 8;

/// What encapsulation adds to a frame: outer Ethernet (14), IPv4 (20),
/// UDP (8) and VXLAN (8) headers (RFC 7348 §5).
pub const OVERLAY_LEN: usize = super::ethernet::HEADER_LEN + super::ipv4::HEADER_LEN + super::udp::HEADER_LEN + HEADER_LEN;

/// A view of a VXLAN header.
#[derive(Debug, Clone)]
pub struct Packet<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> Packet<B> {
    /// Wraps and checks the length and the I flag.
    pub fn new_checked(buf: B) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("vxlan"));
        }
        if b[0] & 0x08 == 0 {
            return Err(Error::Malformed("vxlan"));
        }
        Ok(Packet { buf })
    }
    /// VXLAN network identifier.
    pub fn vni(&self) -> u32 {
        be24(self.buf.as_ref(), 4)
    }
    /// CONGA LBTag (4 bits).
    pub fn lb_tag(&self) -> u8 {
        self.buf.as_ref()[1] >> 4
    }
    /// CONGA CE (3 bits).
    pub fn ce(&self) -> u8 {
        (self.buf.as_ref()[1] >> 1) & 7
    }
    /// CONGA FB_LBTag (4 bits).
    pub fn fb_lb_tag(&self) -> u8 {
        self.buf.as_ref()[2] >> 4
    }
    /// CONGA FB_Metric (3 bits).
    pub fn fb_metric(&self) -> u8 {
        (self.buf.as_ref()[2] >> 1) & 7
    }
    /// Whether the feedback fields carry a value.
    pub fn fb_valid(&self) -> bool {
        self.buf.as_ref()[3] & 0x80 != 0
    }
    /// The encapsulated frame.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    /// Sets LBTag and CE.
    pub fn set_lb_tag_ce(&mut self, tag: u8, ce: u8) {
        self.buf.as_mut()[1] = ((tag & 0xf) << 4) | ((ce & 7) << 1);
    }
    /// Raises CE to `ce` if larger (what every hop does).
    pub fn raise_ce(&mut self, ce: u8) {
        if ce > self.ce() {
            let t = self.lb_tag();
            self.set_lb_tag_ce(t, ce);
        }
    }
    /// Sets the feedback fields (and marks them valid).
    pub fn set_feedback(&mut self, tag: u8, metric: u8) {
        let b = self.buf.as_mut();
        b[2] = ((tag & 0xf) << 4) | ((metric & 7) << 1);
        b[3] |= 0x80;
    }
}

/// The meaning of a VXLAN header with CONGA fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// VNI.
    pub vni: u32,
    /// LBTag.
    pub lb_tag: u8,
    /// CE.
    pub ce: u8,
    /// Feedback (FB_LBTag, FB_Metric), if any.
    pub feedback: Option<(u8, u8)>,
}

impl Repr {
    /// Parses a checked header.
    pub fn parse<B: AsRef<[u8]>>(p: &Packet<B>) -> Self {
        Repr { vni: p.vni(), lb_tag: p.lb_tag(), ce: p.ce(), feedback: p.fb_valid().then(|| (p.fb_lb_tag(), p.fb_metric())) }
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = 0x08;
        b[1] = ((self.lb_tag & 0xf) << 4) | ((self.ce & 7) << 1);
        match self.feedback {
            Some((t, m)) => {
                b[2] = ((t & 0xf) << 4) | ((m & 7) << 1);
                b[3] = 0x80;
            }
            None => {
                b[2] = 0;
                b[3] = 0;
            }
        }
        put24(b, 4, self.vni);
        b[7] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conga_fields_round_trip() {
        let r = Repr { vni: 0x123456, lb_tag: 11, ce: 5, feedback: Some((3, 7)) };
        let mut b = [0xa5u8; 8];
        r.emit(&mut b);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(Repr::parse(&p), r);
        p.raise_ce(2);
        assert_eq!(p.ce(), 5);
        p.raise_ce(6);
        assert_eq!(p.ce(), 6);
        assert_eq!(p.lb_tag(), 11);
        // etherparse reads the same VNI.
        let mut udp = vec![0u8; 8];
        udp.extend_from_slice(&b);
        let _ = udp;
        assert_eq!(be24(&b, 4), 0x123456);
    }

    #[test]
    fn errors() {
        assert_eq!(Packet::new_checked(&[8u8; 4][..]).unwrap_err(), Error::Truncated("vxlan"));
        assert_eq!(Packet::new_checked(&[0u8; 8][..]).unwrap_err(), Error::Malformed("vxlan"));
    }
}
