//! 802.1Qbb priority-based flow control (PFC) frames.
//!
//! A PFC frame is a MAC-control frame (EtherType 0x8808) sent to
//! 01:80:c2:00:00:01 with opcode 0x0101, a 16-bit class-enable vector (bit
//! i = priority i) and eight 16-bit pause times in quanta of 512 bit times
//! at the port's speed. A time of 0 for an enabled class resumes it (XON).
//! The frame is padded to the 60-byte Ethernet minimum.

use super::{be16, put16, Error, Result};

/// MAC-control opcode of PFC.
pub const OPCODE_PFC: u16 = 0x0101;
/// Length of the MAC-control payload (opcode + vector + 8 times).
pub const PAYLOAD_LEN: usize = 2 + 2 + 16;
/// Minimum frame length without FCS (header + payload + padding).
pub const FRAME_LEN: usize = 60;
/// Bit times per pause quantum.
pub const BITS_PER_QUANTUM: u64 = 512;

/// The meaning of a PFC frame payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Bit i set: the time for priority i is valid.
    pub class_enable: u8,
    /// Pause time per priority, in quanta.
    pub quanta: [u16; 8],
}

impl Repr {
    /// Parses the MAC-control payload (after the EtherType).
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < PAYLOAD_LEN {
            return Err(Error::Truncated("pfc"));
        }
        if be16(b, 0) != OPCODE_PFC {
            return Err(Error::Malformed("pfc"));
        }
        let mut quanta = [0u16; 8];
        for (i, q) in quanta.iter_mut().enumerate() {
            *q = be16(b, 4 + 2 * i);
        }
        Ok(Repr { class_enable: b[3], quanta })
    }
    /// Payload length.
    pub const fn buffer_len(&self) -> usize {
        PAYLOAD_LEN
    }
    /// Writes the payload.
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, 0, OPCODE_PFC);
        b[2] = 0;
        b[3] = self.class_enable;
        for (i, q) in self.quanta.iter().enumerate() {
            put16(b, 4 + 2 * i, *q);
        }
    }
    /// A pause (or, with `quanta == 0`, resume) for one priority.
    pub fn for_priority(priority: u8, quanta: u16) -> Self {
        let mut r = Repr { class_enable: 1 << (priority & 7), quanta: [0; 8] };
        r.quanta[(priority & 7) as usize] = quanta;
        r
    }
}

/// Duration of `quanta` pause quanta at `rate`, in ns.
pub fn quanta_to_ns(quanta: u16, rate: crate::time::BitRate) -> crate::time::Nanos {
    rate.serialization_ns_bits(quanta as u128 * BITS_PER_QUANTUM as u128)
}

/// The pause quanta nearest to `ns` at `rate` (at least 1, at most 0xffff,
/// the most a frame carries).
pub fn ns_to_quanta(ns: crate::time::Nanos, rate: crate::time::BitRate) -> u16 {
    let per_quantum = 1_000_000_000u128 * BITS_PER_QUANTUM as u128;
    let q = (ns as u128 * rate.bps() as u128 + per_quantum / 2) / per_quantum;
    q.clamp(1, 0xffff) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::BitRate;

    #[test]
    fn known_bytes() {
        // Pause priority 3 for 0xffff quanta.
        let r = Repr::for_priority(3, 0xffff);
        let mut b = [0xa5u8; PAYLOAD_LEN];
        r.emit(&mut b);
        assert_eq!(&b[..4], &[0x01, 0x01, 0x00, 0x08]);
        assert_eq!(&b[10..12], &[0xff, 0xff]);
        assert_eq!(Repr::parse(&b).unwrap(), r);
    }

    #[test]
    fn quantum_is_512_bit_times() {
        assert_eq!(quanta_to_ns(1, BitRate::gbps(100)), 6); // 5.12 ns, rounded up
        assert_eq!(quanta_to_ns(1000, BitRate::gbps(100)), 5120);
    }

    #[test]
    fn a_duration_becomes_the_nearest_quanta_at_the_rate() {
        assert_eq!(ns_to_quanta(5_000, BitRate::gbps(100)), 977); // 976.6
        assert_eq!(ns_to_quanta(5_000, BitRate(102_123_552_123)), 997); // 997.3
        assert_eq!(ns_to_quanta(0, BitRate::gbps(100)), 1);
        assert_eq!(ns_to_quanta(1_000_000_000, BitRate::gbps(100)), 0xffff);
    }

    #[test]
    fn errors() {
        assert_eq!(Repr::parse(&[1, 1, 0]).unwrap_err(), Error::Truncated("pfc"));
        assert_eq!(Repr::parse(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap_err(), Error::Malformed("pfc"));
    }
}
