//! The ConWeave header (paper §3.4, Fig. 10): 15 bits in the RoCEv2 BTH's
//! reserved fields plus a separate 4-byte timestamp header.
//!
//! BTH reserved bits (see [`roce::BthPacket::reserved15`]), most significant
//! first: path id (8) | opcode (3) | epoch (2) | REROUTED (1) | TAIL (1).
//! Opcode 0 means "no ConWeave header" (traffic the ToRs did not take in,
//! e.g. ECMP fallback); 1 is a data packet, 2 RTT_REQUEST (a data packet
//! so marked), 3 RTT_REPLY, 4 CLEAR, 5 NOTIFY.
//!
//! The timestamp header ([`TS_HEADER_LEN`] bytes right after the BTH, before
//! RETH/AETH/payload) carries TX_TSTAMP and TAIL_TX_TSTAMP, each 16 bits in
//! units of 1.024 µs (ns >> 10, the authors' Tofino2 resolution), compared
//! with wrapping arithmetic (valid while differences stay under ±33 ms).
//! Every packet with a non-zero opcode carries it. The source ToR inserts
//! it (IPv4 total length, IPv4 checksum and UDP length grow by 4; a
//! non-zero UDP checksum is cleared, RoCEv2 allows 0) and the destination
//! ToR removes it and clears the reserved bits, so the host receives the
//! packet byte for byte as its peer sent it (the ICRC is valid again).
//!
//! All functions check lengths and return `None`/`Err` on malformed input.

use super::{be16, ipv4, put16, roce, udp, Error, Result};
use bytes::BytesMut;

/// Length of the timestamp header.
pub const TS_HEADER_LEN: usize = 4;

/// ConWeave packet types (3-bit opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CwOpcode {
    /// No ConWeave header.
    None,
    /// A data packet.
    Data,
    /// A data packet that asks the destination ToR for an RTT_REPLY.
    RttRequest,
    /// The destination ToR's reply (control).
    RttReply,
    /// All OLD-path packets of the epoch arrived (control).
    Clear,
    /// A path is congested (control).
    Notify,
}

impl CwOpcode {
    fn from_bits(b: u16) -> Option<Self> {
        Some(match b {
            0 => CwOpcode::None,
            1 => CwOpcode::Data,
            2 => CwOpcode::RttRequest,
            3 => CwOpcode::RttReply,
            4 => CwOpcode::Clear,
            5 => CwOpcode::Notify,
            _ => return None,
        })
    }
    fn bits(self) -> u16 {
        match self {
            CwOpcode::None => 0,
            CwOpcode::Data => 1,
            CwOpcode::RttRequest => 2,
            CwOpcode::RttReply => 3,
            CwOpcode::Clear => 4,
            CwOpcode::Notify => 5,
        }
    }
    /// Control packets (sent by the destination ToR to the source ToR).
    pub fn is_control(self) -> bool {
        matches!(self, CwOpcode::RttReply | CwOpcode::Clear | CwOpcode::Notify)
    }
    /// Data packets (sent by the source ToR).
    pub fn is_data(self) -> bool {
        matches!(self, CwOpcode::Data | CwOpcode::RttRequest)
    }
}

/// The 15 bits in the BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CwBits {
    /// Path id (source routing).
    pub path: u8,
    /// Packet type.
    pub opcode: CwOpcode,
    /// Epoch (2 bits).
    pub epoch: u8,
    /// Sent on the NEW path after a reroute.
    pub rerouted: bool,
    /// The last packet on the OLD path.
    pub tail: bool,
}

impl CwBits {
    /// Decodes the 15 reserved bits; `None` for an unknown opcode.
    pub fn from_reserved15(v: u16) -> Option<Self> {
        Some(CwBits {
            path: (v >> 7) as u8,
            opcode: CwOpcode::from_bits((v >> 4) & 7)?,
            epoch: ((v >> 2) & 3) as u8,
            rerouted: v & 2 != 0,
            tail: v & 1 != 0,
        })
    }
    /// Encodes into 15 bits.
    pub fn to_reserved15(self) -> u16 {
        ((self.path as u16) << 7)
            | (self.opcode.bits() << 4)
            | (((self.epoch & 3) as u16) << 2)
            | ((self.rerouted as u16) << 1)
            | self.tail as u16
    }
    /// Reads the bits of the BTH at `bth`; `None` if truncated or unknown.
    pub fn read(frame: &[u8], bth: usize) -> Option<Self> {
        let b = roce::BthPacket::new_checked(frame.get(bth..)?).ok()?;
        Self::from_reserved15(b.reserved15())
    }
    /// Writes the bits into the BTH at `bth`.
    pub fn write(self, frame: &mut [u8], bth: usize) -> Result<()> {
        let mut b = roce::BthPacket::new_checked(frame.get_mut(bth..).ok_or(Error::Truncated("bth"))?)?;
        b.set_reserved15(self.to_reserved15());
        Ok(())
    }
}

/// The ConWeave 16-bit time of `ns` (units of 1.024 µs).
#[inline]
pub fn ts16(ns: u64) -> u16 {
    (ns >> 10) as u16
}

/// `a - b` in ns for 16-bit ConWeave times, with wrap-around.
#[inline]
pub fn ts16_diff_ns(a: u16, b: u16) -> i64 {
    (a.wrapping_sub(b) as i16 as i64) << 10
}

/// (TX_TSTAMP, TAIL_TX_TSTAMP) of the timestamp header after the BTH at `bth`.
pub fn read_ts(frame: &[u8], bth: usize) -> Option<(u16, u16)> {
    let at = bth + roce::BTH_LEN;
    let b = frame.get(at..at + TS_HEADER_LEN)?;
    Some((be16(b, 0), be16(b, 2)))
}

/// Overwrites the timestamp header after the BTH at `bth`.
pub fn write_ts(frame: &mut [u8], bth: usize, tx: u16, tail: u16) -> Result<()> {
    let at = bth + roce::BTH_LEN;
    let b = frame.get_mut(at..at + TS_HEADER_LEN).ok_or(Error::Truncated("conweave"))?;
    put16(b, 0, tx);
    put16(b, 2, tail);
    Ok(())
}

fn adjust_lengths(frame: &mut [u8], l3: usize, delta: i32) -> Result<()> {
    let (ihl, total) = {
        let ip = ipv4::Packet::new_checked(frame.get(l3..).ok_or(Error::Truncated("ipv4"))?)?;
        (ip.header_len(), ip.total_len() as i32)
    };
    let new_total = total + delta;
    if !(0..=u16::MAX as i32).contains(&new_total) {
        return Err(Error::Malformed("ipv4"));
    }
    put16(frame, l3 + 2, new_total as u16);
    ipv4::Packet::new_unchecked(&mut frame[l3..]).fill_checksum();
    let u = l3 + ihl;
    let ulen = be16(frame.get(u..u + udp::HEADER_LEN).ok_or(Error::Truncated("udp"))?, 4) as i32 + delta;
    put16(frame, u + 4, ulen.clamp(0, u16::MAX as i32) as u16);
    put16(frame, u + 6, 0);
    Ok(())
}

/// Inserts the timestamp header after the BTH at `bth` (IPv4 at `l3`).
pub fn insert_ts(frame: &mut BytesMut, l3: usize, bth: usize, tx: u16, tail: u16) -> Result<()> {
    let at = bth + roce::BTH_LEN;
    if frame.len() < at {
        return Err(Error::Truncated("bth"));
    }
    adjust_lengths(frame, l3, TS_HEADER_LEN as i32)?;
    crate::buffer::open_gap(frame, at, TS_HEADER_LEN);
    write_ts(frame, bth, tx, tail)
}

/// Removes the timestamp header after the BTH at `bth` and clears the
/// reserved BTH bits: the packet is again what the sending host emitted.
pub fn strip(frame: &mut BytesMut, l3: usize, bth: usize) -> Result<()> {
    let at = bth + roce::BTH_LEN;
    if frame.len() < at + TS_HEADER_LEN {
        return Err(Error::Truncated("conweave"));
    }
    adjust_lengths(frame, l3, -(TS_HEADER_LEN as i32))?;
    crate::buffer::close_gap(frame, at, TS_HEADER_LEN);
    roce::BthPacket::new_checked(&mut frame[bth..])?.set_reserved15(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip() {
        for opcode in [CwOpcode::None, CwOpcode::Data, CwOpcode::RttRequest, CwOpcode::RttReply, CwOpcode::Clear, CwOpcode::Notify] {
            let b = CwBits { path: 0xa5, opcode, epoch: 3, rerouted: true, tail: false };
            assert_eq!(CwBits::from_reserved15(b.to_reserved15()), Some(b));
            assert!(b.to_reserved15() < 1 << 15);
        }
        assert_eq!(CwBits::from_reserved15(7 << 4), None);
    }

    #[test]
    fn timestamps_wrap() {
        let a = ts16(5 << 10);
        let b = ts16(((1u64 << 16) - 3) << 10);
        assert_eq!(ts16_diff_ns(a, b), 8 << 10, "5 is 8 units after 65533 across the wrap");
        assert_eq!(ts16_diff_ns(b, a), -(8 << 10));
    }

    /// A RoCEv2 WRITE-middle frame with `payload` bytes, as a host sends it.
    fn roce_frame(payload: usize) -> BytesMut {
        let v = crate::test_frames::udp_frame(udp::ROCEV2_PORT, roce::BTH_LEN + payload + roce::ICRC_LEN);
        let mut f = crate::buffer::zeroed(v.len());
        f.copy_from_slice(&v);
        let bth = 42;
        roce::BthRepr {
            opcode: roce::Opcode::WriteMiddle,
            solicited: false,
            pad: 0,
            pkey: roce::DEFAULT_PKEY,
            dest_qp: 7,
            ack_req: true,
            psn: 9,
            reserved15: 0,
        }
        .emit(&mut f[bth..]);
        for (i, b) in f[bth + roce::BTH_LEN..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    #[test]
    fn insert_then_strip_gives_back_the_hosts_frame() {
        let original = roce_frame(1000);
        let (l3, bth) = (14, 42);
        let mut f = crate::buffer::zeroed(original.len());
        f.copy_from_slice(&original);
        let room = f.capacity();
        insert_ts(&mut f, l3, bth, 0x1234, 0x8005).unwrap();
        assert_eq!(f.capacity(), room, "inserted in the buffer's spare room");
        assert_eq!(f.len(), original.len() + TS_HEADER_LEN);
        assert_eq!(read_ts(&f, bth), Some((0x1234, 0x8005)));
        assert_eq!(&f[bth + roce::BTH_LEN + TS_HEADER_LEN..], &original[bth + roce::BTH_LEN..], "payload moved behind the header");
        let ip = ipv4::Packet::new_checked(&f[l3..]).unwrap();
        assert_eq!(ip.total_len() as usize, original.len() - l3 + TS_HEADER_LEN);
        assert!(ip.verify_checksum());
        CwBits { path: 3, opcode: CwOpcode::Data, epoch: 1, rerouted: true, tail: false }.write(&mut f, bth).unwrap();
        strip(&mut f, l3, bth).unwrap();
        assert_eq!(&f[..], &original[..]);
        assert_eq!(f.capacity(), room, "the buffer keeps its start and its room for the next frame of the size");
    }

    #[test]
    fn truncated_frames_are_errors() {
        let mut f = BytesMut::from(&[0u8; 20][..]);
        assert!(insert_ts(&mut f, 14, 42, 1, 2).is_err());
        assert!(strip(&mut f, 14, 42).is_err());
        assert_eq!(read_ts(&f, 42), None);
        assert_eq!(CwBits::read(&f, 14), None);
    }
}
