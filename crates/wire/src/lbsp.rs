//! LBSP's switch-to-switch messages (Lim, Appl. Sci. 2021, §3.3.1 and
//! §5.1): hellos between neighbours, failure and recovery messages
//! (Table 2's failure type and the affected address range), and the
//! state messages an aggregation switch sends its partners.
//!
//! The paper defines what the messages say, not their bytes; this is
//! weft's layout. An Ethernet frame of EtherType [`ETHERTYPE`] (IEEE local
//! experimental, next to the packet generator's 0x88b5) to the broadcast
//! address, payload (big endian, [`PAYLOAD_LEN`] bytes, the frame padded
//! to 60):
//!
//! ```text
//!  0  kind         0 hello, 1 failure, 2 recovery, 3 pair state
//!  1  value        failure/recovery: Table 2 type 0..3; pair state: state 0..2
//!  2  position     u16: hello: the sender's tier position; failure of an
//!                  aggregation-core link: the position parity (0/1) of
//!                  the aggregation switches that apply it; 0xffff: none
//!  4  origin       u32: the address of the switch that made the message
//!  8  origin port  u16: its port the message is about (with origin and
//!                  type it names a failure, so a recovery matches it)
//! 10  in port      u16: the port the last switch received it on (written
//!                  by that switch's ingress before it punts the message)
//! 12  prefix       u32: the affected address range's network address
//! 16  prefix len   u8:  24 one edge's hosts, 16 one pod's, 0 all hosts
//! 17  tier         u8:  the sender's tier (0 ToR, 1 aggregation, 2 core)
//! 18  reserved     u16
//! 20  seq          u32: per origin, increasing (flooding stops at a
//!                  switch that has seen it)
//! ```
//!
//! Invariant: [`Repr::parse`] accepts exactly what [`Repr::emit`] writes
//! (kinds 0–3, types 0–3, states 0–2, prefix lengths 0–32).

use super::{be16, be32, put16, put32, Error, Ipv4Address, Result};

/// EtherType of LBSP's messages.
pub const ETHERTYPE: u16 = 0x88b6;
/// Payload length (after the EtherType).
pub const PAYLOAD_LEN: usize = 24;
/// Frame length (Ethernet minimum, without FCS).
pub const FRAME_LEN: usize = 60;
/// Offset of the in-port field in the frame.
pub const IN_PORT_OFFSET: usize = 14 + 10;
/// `position` when there is none.
pub const NO_POSITION: u16 = 0xffff;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A neighbour says it is alive (§3.3.1).
    Hello,
    /// A link failed (Table 2).
    Failure,
    /// A failed link works again.
    Recovery,
    /// An aggregation switch's new state, for its partners (§5.1).
    PairState,
}

/// The meaning of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Kind.
    pub kind: Kind,
    /// Failure type (0–3) or pair state (0–2); 0 in a hello.
    pub value: u8,
    /// Tier position or parity filter (see the module doc).
    pub position: Option<u16>,
    /// The switch that made it.
    pub origin: Ipv4Address,
    /// Its port the message is about.
    pub origin_port: u16,
    /// The port the last switch received it on.
    pub in_port: u16,
    /// Affected range: network address.
    pub prefix: Ipv4Address,
    /// Affected range: prefix length.
    pub prefix_len: u8,
    /// The sender's tier (0 ToR, 1 aggregation, 2 core).
    pub tier: u8,
    /// Sequence number per origin.
    pub seq: u32,
}

impl Repr {
    /// Parses the payload (after the EtherType).
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < PAYLOAD_LEN {
            return Err(Error::Truncated("lbsp"));
        }
        let kind = match b[0] {
            0 => Kind::Hello,
            1 => Kind::Failure,
            2 => Kind::Recovery,
            3 => Kind::PairState,
            _ => return Err(Error::Malformed("lbsp")),
        };
        let value = b[1];
        let bad_value = match kind {
            Kind::Hello => false,
            Kind::Failure | Kind::Recovery => value > 3,
            Kind::PairState => value > 2,
        };
        if bad_value || b[16] > 32 || b[17] > 2 {
            return Err(Error::Malformed("lbsp"));
        }
        let position = be16(b, 2);
        Ok(Repr {
            kind,
            value,
            position: (position != NO_POSITION).then_some(position),
            origin: Ipv4Address(be32(b, 4)),
            origin_port: be16(b, 8),
            in_port: be16(b, 10),
            prefix: Ipv4Address(be32(b, 12)),
            prefix_len: b[16],
            tier: b[17],
            seq: be32(b, 20),
        })
    }

    /// Writes the payload.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = match self.kind {
            Kind::Hello => 0,
            Kind::Failure => 1,
            Kind::Recovery => 2,
            Kind::PairState => 3,
        };
        b[1] = self.value;
        put16(b, 2, self.position.unwrap_or(NO_POSITION));
        put32(b, 4, self.origin.0);
        put16(b, 8, self.origin_port);
        put16(b, 10, self.in_port);
        put32(b, 12, self.prefix.0);
        b[16] = self.prefix_len;
        b[17] = self.tier;
        put16(b, 18, 0);
        put32(b, 20, self.seq);
    }

    /// The whole frame: broadcast destination, zero source (the switch
    /// writes its port's MAC), [`ETHERTYPE`], the payload, padding.
    pub fn frame(&self) -> bytes::BytesMut {
        let mut f = bytes::BytesMut::zeroed(FRAME_LEN);
        f[..6].copy_from_slice(&[0xff; 6]);
        put16(&mut f, 12, ETHERTYPE);
        self.emit(&mut f[14..14 + PAYLOAD_LEN]);
        f
    }

    /// Parses a whole frame (Ethernet header, then the payload).
    pub fn parse_frame(f: &[u8]) -> Result<Self> {
        if f.len() < 14 {
            return Err(Error::Truncated("lbsp"));
        }
        if be16(f, 12) != ETHERTYPE {
            return Err(Error::Malformed("lbsp"));
        }
        Self::parse(&f[14..])
    }
}

/// Writes the in-port field of a whole frame (what a receiving switch's
/// ingress does before it punts the message to its CPU).
pub fn set_in_port(f: &mut [u8], port: u16) {
    if f.len() >= IN_PORT_OFFSET + 2 {
        put16(f, IN_PORT_OFFSET, port);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Repr {
        Repr {
            kind: Kind::Failure,
            value: 3,
            position: Some(1),
            origin: Ipv4Address::new(169, 254, 0, 15),
            origin_port: 7,
            in_port: 0,
            prefix: Ipv4Address::new(10, 7, 0, 0),
            prefix_len: 16,
            tier: 2,
            seq: 42,
        }
    }

    #[test]
    fn round_trip_and_known_bytes() {
        let r = failure();
        let mut f = r.frame();
        assert_eq!(f.len(), FRAME_LEN);
        assert_eq!(&f[12..14], &[0x88, 0xb6]);
        assert_eq!(&f[14..18], &[1, 3, 0, 1]);
        assert_eq!(&f[26..31], &[10, 7, 0, 0, 16]);
        assert_eq!(Repr::parse_frame(&f).unwrap(), r);
        set_in_port(&mut f, 5);
        assert_eq!(Repr::parse_frame(&f).unwrap().in_port, 5);
        let hello = Repr { kind: Kind::Hello, value: 0, position: None, ..r };
        assert_eq!(Repr::parse_frame(&hello.frame()).unwrap(), hello);
    }

    #[test]
    fn errors() {
        let f = failure().frame();
        assert_eq!(Repr::parse_frame(&f[..20]).unwrap_err(), Error::Truncated("lbsp"));
        for (at, v) in [(14, 4u8), (15, 4), (30, 33), (31, 3)] {
            let mut g = f.clone();
            g[at] = v;
            assert_eq!(Repr::parse_frame(&g).unwrap_err(), Error::Malformed("lbsp"), "byte {at} = {v}");
        }
        let mut pair = Repr { kind: Kind::PairState, value: 2, ..failure() }.frame();
        assert!(Repr::parse_frame(&pair).is_ok());
        pair[15] = 3;
        assert!(Repr::parse_frame(&pair).is_err(), "state 3 does not exist");
    }
}
