//! The one time type of weft: integer nanoseconds, and link-rate arithmetic.
//!
//! Invariant: every timestamp and duration in the data plane is a [`Nanos`]
//! (`u64` ns since the start of the run). Serialization times are computed
//! exactly with 128-bit intermediates so no rate/size combination overflows.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Nanoseconds (timestamps since the run started, or durations).
pub type Nanos = u64;

/// One microsecond in [`Nanos`].
pub const MICROS: Nanos = 1_000;
/// One millisecond in [`Nanos`].
pub const MILLIS: Nanos = 1_000_000;
/// One second in [`Nanos`].
pub const SECONDS: Nanos = 1_000_000_000;

/// A link or port rate in bits per second.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BitRate(pub u64);

impl BitRate {
    /// `n` Gbit/s.
    pub const fn gbps(n: u64) -> Self {
        BitRate(n * 1_000_000_000)
    }
    /// `n` Mbit/s.
    pub const fn mbps(n: u64) -> Self {
        BitRate(n * 1_000_000)
    }
    /// Bits per second.
    pub const fn bps(self) -> u64 {
        self.0
    }
    /// Time to serialize `bits` at this rate, rounded up to the next ns
    /// (so a port never exceeds its rate). A zero rate never finishes.
    pub fn serialization_ns_bits(self, bits: u128) -> Nanos {
        if self.0 == 0 {
            return Nanos::MAX;
        }
        // A frame's bits × 10^9 fit in 64 bits (up to 2.3 GB): a 64-bit
        // division, where the 128-bit one is a call into a slow routine
        // on every packet a port or a host paces. The same value.
        if let Ok(bits) = u64::try_from(bits) {
            if let Some(num) = bits.checked_mul(1_000_000_000) {
                return num.div_ceil(self.0);
            }
        }
        let num = bits * 1_000_000_000u128;
        let rate = self.0 as u128;
        num.div_ceil(rate).min(Nanos::MAX as u128) as Nanos
    }
    /// Time to serialize `bytes` at this rate, rounded up to the ns.
    pub fn serialization_ns(self, bytes: usize) -> Nanos {
        self.serialization_ns_bits(bytes as u128 * 8)
    }
    /// Bytes that this rate carries in `ns` (rounded down).
    pub fn bytes_in(self, ns: Nanos) -> u64 {
        ((self.0 as u128 * ns as u128) / 8_000_000_000u128) as u64
    }
}

impl fmt::Display for BitRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1_000_000_000 && b.is_multiple_of(1_000_000_000) {
            write!(f, "{}Gbps", b / 1_000_000_000)
        } else if b >= 1_000_000 && b.is_multiple_of(1_000_000) {
            write!(f, "{}Mbps", b / 1_000_000)
        } else if b >= 1_000 && b.is_multiple_of(1_000) {
            write!(f, "{}Kbps", b / 1_000)
        } else {
            write!(f, "{b}bps")
        }
    }
}

/// Formats a duration in ns with a readable unit (`1.5us`, `3ms`).
pub fn format_duration(ns: Nanos) -> String {
    if ns >= SECONDS {
        format!("{:.3}s", ns as f64 / SECONDS as f64)
    } else if ns >= MILLIS {
        format!("{:.3}ms", ns as f64 / MILLIS as f64)
    } else if ns >= MICROS {
        format!("{:.3}us", ns as f64 / MICROS as f64)
    } else {
        format!("{ns}ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_of_1500_bytes_at_100g_is_120ns() {
        assert_eq!(BitRate::gbps(100).serialization_ns(1500), 120);
    }

    #[test]
    fn serialization_rounds_up() {
        // 1 byte at 3 bit/s = 8/3 s -> rounded up.
        assert_eq!(BitRate(3).serialization_ns(1), 2_666_666_667);
        assert_eq!(BitRate::gbps(25).serialization_ns(1048), 336); // 335.36 -> 336
    }

    #[test]
    fn the_64_bit_path_gives_the_128_bit_value() {
        let wide = |r: BitRate, bits: u128| (bits * 1_000_000_000).div_ceil(r.0 as u128).min(Nanos::MAX as u128) as Nanos;
        let mut x: u64 = 7;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let rate = BitRate((x >> 20) % 400_000_000_000 + 1);
            let bits = ((x >> 7) % 200_000) as u128;
            assert_eq!(rate.serialization_ns_bits(bits), wide(rate, bits), "{bits} bits at {} bit/s", rate.0);
        }
        // Around the edge of the 64-bit path, and beyond it.
        for bits in [u64::MAX as u128 / 1_000_000_000, u64::MAX as u128 / 1_000_000_000 + 1, u64::MAX as u128, 1u128 << 80] {
            for rate in [BitRate(1), BitRate::gbps(100), BitRate(u64::MAX)] {
                assert_eq!(rate.serialization_ns_bits(bits), wide(rate, bits));
            }
        }
    }
}
