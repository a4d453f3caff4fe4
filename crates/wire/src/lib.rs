//! # weft-wire — the wire formats weft forwards, and the units it counts in
//!
//! The lowest layer of weft (docs/ARCHITECTURE.md: wire → chip model → schemes → core →
//! runtime → orchestrator). It depends on no other weft crate and must never
//! do so: the chip model, the schemes, the hosts and every driver build on
//! it, and the fuzz targets compile it alone. Design choice: zero-copy typed
//! views of the headers weft forwards, in the style of `smoltcp::wire`, plus
//! the two vocabularies every layer shares: [`time`] (integer nanoseconds and
//! bit rates) and [`ids`] (node, port and queue identifiers).
//!
//! Contract (the same as smoltcp's): a view `Xxx<B: AsRef<[u8]>>` wraps a
//! buffer. `Xxx::new_checked(buf)` validates the length (and, where the
//! header has one, the length field) once; after that no accessor can panic.
//! `new_unchecked` is only for emitting into a buffer the caller sized with
//! `Repr::buffer_len`. Getters need `AsRef<[u8]>`, setters `AsMut<[u8]>`
//! too. A `Repr` is the validated meaning of a header (`parse`,
//! `buffer_len`, `emit`). Protocol number enums keep an `Unknown(n)` variant
//! so unknown traffic is forwarded, not rejected.
//!
//! Malformed input yields [`Error`], never a panic; `fuzz/` holds a
//! cargo-fuzz target for [`frame::FrameInfo::parse`].
//!
//! Also here, because every hot path above shares it: [`hint::prefetch`],
//! a cache hint that changes no result.
//!
//! This crate does no I/O, reads no clock and draws no random numbers.
#![deny(unsafe_code)] // one exception: the prefetch hint (`hint`)
#![deny(missing_docs)]

pub mod ids;
pub mod time;
pub mod units;

pub mod arp;
pub mod buffer;
pub mod conweave;
pub mod ethernet;
pub mod frame;
pub mod gso;
pub mod hint;
pub mod int;
pub mod ipv4;
pub mod lbsp;
pub mod p4te;
pub mod pfc;
pub mod roce;
pub mod tcp;
pub mod template;
pub mod udp;
pub mod vxlan;

pub use ethernet::{EtherType, EthernetAddress};
pub use ipv4::Ipv4Address;

/// Why a buffer is not a valid header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header (or than its length field says).
    #[error("truncated {0} header")]
    Truncated(&'static str),
    /// A field holds a value the format does not allow.
    #[error("malformed {0} header")]
    Malformed(&'static str),
    /// The checksum does not match.
    #[error("bad {0} checksum")]
    Checksum(&'static str),
}

/// Result of parsing a header.
pub type Result<T> = core::result::Result<T, Error>;

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}
#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
#[inline]
pub(crate) fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

/// The Internet checksum (RFC 1071) helpers.
pub mod checksum {
    /// One's-complement sum of `data` folded into 32 bits (not yet complemented).
    pub fn sum(data: &[u8]) -> u32 {
        let mut acc: u32 = 0;
        let mut chunks = data.chunks_exact(2);
        for c in &mut chunks {
            acc = acc.wrapping_add(u16::from_be_bytes([c[0], c[1]]) as u32);
        }
        if let [last] = chunks.remainder() {
            acc = acc.wrapping_add((*last as u32) << 8);
        }
        acc
    }
    /// Folds a 32-bit sum into 16 bits: two end-around carries always
    /// suffice (the first leaves at most 0xffff + 0xffff = 0x1fffe, the
    /// second at most 0xfffe + 1), and a third would change nothing, so
    /// this is the fold "until no carry is left" without its branch.
    #[inline]
    pub fn fold(acc: u32) -> u16 {
        let acc = (acc & 0xffff) + (acc >> 16);
        let acc = (acc & 0xffff) + (acc >> 16);
        acc as u16
    }
    /// Folds a sum of 32-bit words (up to 2^32 of them) into 16 bits: the
    /// same one's complement sum as [`sum`] of the same bytes, whose word
    /// size does not matter (RFC 1071), byte-swapped when the words were
    /// read little-endian.
    pub fn fold64(acc: u64) -> u16 {
        let acc = (acc & 0xffff_ffff) + (acc >> 32);
        let acc = (acc & 0xffff_ffff) + (acc >> 32);
        fold(acc as u32)
    }
    /// Checksum of `data`: complement of the folded sum.
    pub fn of(data: &[u8]) -> u16 {
        !fold(sum(data))
    }
    /// Incremental update (RFC 1624, eqn. 3) when a 16-bit word changes
    /// from `old` to `new`.
    pub fn update(check: u16, old: u16, new: u16) -> u16 {
        let s = (!check as u32) + (!old as u32 & 0xffff) + new as u32;
        !fold(s)
    }

    #[cfg(test)]
    mod tests {
        /// The two-carry fold is the fold that carries until no carry is
        /// left, on the edges and on a spread of sums.
        #[test]
        fn fold_is_the_carry_until_none_fold() {
            let looped = |mut acc: u32| {
                while acc >> 16 != 0 {
                    acc = (acc & 0xffff) + (acc >> 16);
                }
                acc as u16
            };
            let edges = [0, 1, 0xfffe, 0xffff, 0x1_0000, 0x1_fffe, 0x1_ffff, 0xffff_0000, 0xfffe_ffff, 0xffff_fffe, u32::MAX];
            let spread = (0..1_000_000u32).map(|k| k.wrapping_mul(0x9e37_79b9) ^ (k << 7));
            for acc in edges.into_iter().chain(spread) {
                assert_eq!(super::fold(acc), looped(acc), "{acc:#x}");
            }
        }
    }
}

/// Frames for the unit tests of this crate.
#[cfg(test)]
pub(crate) mod test_frames {
    use crate::{ethernet, ipv4, udp, EtherType, EthernetAddress, Ipv4Address};

    /// An Ethernet/IPv4/UDP frame 10.0.0.2:1234 → 10.0.1.2:`dport` with
    /// `payload` zero bytes.
    pub(crate) fn udp_frame(dport: u16, payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + payload];
        ethernet::Repr {
            dst: EthernetAddress([2, 0, 0, 0, 0, 1]),
            src: EthernetAddress([2, 0, 0, 0, 0, 2]),
            vlan_tci: None,
            ethertype: EtherType::Ipv4,
        }
        .emit(&mut f);
        ipv4::Repr {
            src: Ipv4Address::new(10, 0, 0, 2),
            dst: Ipv4Address::new(10, 0, 1, 2),
            protocol: ipv4::Protocol::Udp,
            dscp: 0,
            ecn: ipv4::Ecn::Ect0,
            ident: 0,
            ttl: 64,
            payload_len: 8 + payload,
        }
        .emit(&mut f[14..]);
        udp::Repr { src_port: 1234, dst_port: dport, payload_len: payload }.emit(&mut f[34..]);
        f
    }
}
