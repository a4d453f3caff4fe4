//! ARP for IPv4 over Ethernet (RFC 826). Only the Ethernet/IPv4 form is
//! accepted; anything else is [`Error::Malformed`].

use super::{be16, put16, Error, EthernetAddress, Ipv4Address, Result};

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// ARP operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Who-has.
    Request,
    /// Is-at.
    Reply,
    /// Any other opcode.
    Unknown(u16),
}

/// A view of an ARP packet.
#[derive(Debug, Clone)]
pub struct Packet<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> Packet<B> {
    /// Wraps and checks length and hardware/protocol types.
    pub fn new_checked(buf: B) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < PACKET_LEN {
            return Err(Error::Truncated("arp"));
        }
        if be16(b, 0) != 1 || be16(b, 2) != 0x0800 || b[4] != 6 || b[5] != 4 {
            return Err(Error::Malformed("arp"));
        }
        Ok(Packet { buf })
    }
    /// Operation.
    pub fn operation(&self) -> Operation {
        match be16(self.buf.as_ref(), 6) {
            1 => Operation::Request,
            2 => Operation::Reply,
            n => Operation::Unknown(n),
        }
    }
    /// Sender MAC.
    pub fn sender_hw(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buf.as_ref()[8..14]);
        EthernetAddress(a)
    }
    /// Sender IPv4.
    pub fn sender_ip(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.buf.as_ref()[14..18])
    }
    /// Target MAC.
    pub fn target_hw(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buf.as_ref()[18..24]);
        EthernetAddress(a)
    }
    /// Target IPv4.
    pub fn target_ip(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.buf.as_ref()[24..28])
    }
}

/// The meaning of an ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Operation.
    pub operation: Operation,
    /// Sender MAC.
    pub sender_hw: EthernetAddress,
    /// Sender IPv4.
    pub sender_ip: Ipv4Address,
    /// Target MAC.
    pub target_hw: EthernetAddress,
    /// Target IPv4.
    pub target_ip: Ipv4Address,
}

impl Repr {
    /// Parses a checked packet.
    pub fn parse<B: AsRef<[u8]>>(p: &Packet<B>) -> Self {
        Repr {
            operation: p.operation(),
            sender_hw: p.sender_hw(),
            sender_ip: p.sender_ip(),
            target_hw: p.target_hw(),
            target_ip: p.target_ip(),
        }
    }
    /// Bytes on the wire.
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }
    /// Writes the packet into `buf` (at least [`PACKET_LEN`] bytes).
    pub fn emit(&self, buf: &mut [u8]) {
        put16(buf, 0, 1);
        put16(buf, 2, 0x0800);
        buf[4] = 6;
        buf[5] = 4;
        put16(
            buf,
            6,
            match self.operation {
                Operation::Request => 1,
                Operation::Reply => 2,
                Operation::Unknown(n) => n,
            },
        );
        buf[8..14].copy_from_slice(&self.sender_hw.0);
        buf[14..18].copy_from_slice(&self.sender_ip.octets());
        buf[18..24].copy_from_slice(&self.target_hw.0);
        buf[24..28].copy_from_slice(&self.target_ip.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_against_etherparse() {
        let r = Repr {
            operation: Operation::Request,
            sender_hw: EthernetAddress([2, 0, 10, 0, 0, 2]),
            sender_ip: Ipv4Address::new(10, 0, 0, 2),
            target_hw: EthernetAddress([0; 6]),
            target_ip: Ipv4Address::new(10, 0, 0, 1),
        };
        let mut buf = [0x5au8; PACKET_LEN];
        r.emit(&mut buf);
        let ep = etherparse::ArpPacketSlice::from_slice(&buf).unwrap();
        assert_eq!(ep.operation(), etherparse::ArpOperation::REQUEST);
        assert_eq!(ep.sender_protocol_addr(), &[10, 0, 0, 2]);
        assert_eq!(ep.target_protocol_addr(), &[10, 0, 0, 1]);
        assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()), r);
    }

    #[test]
    fn rejects_non_ethernet_ipv4() {
        let mut buf = [0u8; PACKET_LEN];
        buf[1] = 6; // hardware type 6 (IEEE 802)
        assert_eq!(Packet::new_checked(&buf[..]).unwrap_err(), Error::Malformed("arp"));
        assert_eq!(Packet::new_checked(&buf[..10]).unwrap_err(), Error::Truncated("arp"));
    }
}
