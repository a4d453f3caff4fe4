//! Meters: the chip's colour-marking token buckets (docs/ARCHITECTURE.md#the-tofino2-model; Tofino's
//! meter ALUs, P4's `meter`/`direct_meter` externs).
//!
//! Two kinds, both colour-blind as the P4 externs are:
//! - [`MeterKind::SingleRate`]: the single-rate three-colour marker of
//!   RFC 2697 (srTCM). Buckets C (size CBS) and E (size EBS) both fill at
//!   CIR; tokens go to C until it is full, then to E. A packet of B bytes is
//!   green if C holds B (C −= B), else yellow if E holds B (E −= B), else
//!   red. With EBS = 0 it is a one-rate two-colour marker (green/red), what
//!   P4TE §6.1.4 uses per traffic class.
//! - [`MeterKind::TwoRate`]: the two-rate three-colour marker of RFC 2698
//!   (trTCM). Bucket P (size PBS) fills at PIR, bucket C (size CBS) at CIR.
//!   A packet is red if P holds fewer than B, else yellow if C holds fewer
//!   than B (P −= B), else green (P −= B, C −= B). P4TE §6.1.3 uses one per
//!   egress port.
//!
//! Both buckets start full (RFC 2697 §3, RFC 2698 §3). Token arithmetic is
//! exact: tokens are counted in nanobits (bits × 10⁻⁹), so `rate (bit/s) ×
//! elapsed (ns)` is an integer; no rounding ever adds or loses a token.
//!
//! A meter array is declared like a register array (one per stage, entries
//! × 128 bits of SRAM, one of the stage's four meter/stateful ALUs) and is
//! executed at most once per pass, in stage order, as a register is
//! ([`crate::RegisterFile::execute_meter`]). An entry the control plane has
//! not configured marks every packet green, as an unconfigured P4 meter
//! does.

use serde::{Deserialize, Serialize};
use weft_wire::time::{BitRate, Nanos};

/// Handle of a declared meter array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct MeterId(pub u16);

/// Which marker a meter array implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MeterKind {
    /// RFC 2697 single-rate three-colour marker.
    SingleRate,
    /// RFC 2698 two-rate three-colour marker.
    TwoRate,
}

/// A packet's colour. Ordered: green < yellow < red.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Color {
    /// Within the committed rate.
    Green = 0,
    /// Over the committed rate (srTCM: burst; trTCM: under the peak rate).
    Yellow = 1,
    /// Over the peak rate (srTCM: beyond both buckets).
    Red = 2,
}

impl Color {
    /// The colour of a 2-bit code (0 green, 1 yellow, anything else red).
    pub fn from_bits(b: u64) -> Color {
        match b & 3 {
            0 => Color::Green,
            1 => Color::Yellow,
            _ => Color::Red,
        }
    }
}

/// One meter entry's configuration, as the control plane writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeterConfig {
    /// Committed information rate.
    pub cir: BitRate,
    /// Committed burst size, bytes.
    pub cbs: u64,
    /// Peak information rate (trTCM); ignored by srTCM.
    pub pir: BitRate,
    /// Peak burst size (trTCM) or excess burst size (srTCM), bytes.
    pub pbs: u64,
}

impl MeterConfig {
    /// A trTCM configuration.
    pub fn two_rate(cir: BitRate, cbs: u64, pir: BitRate, pbs: u64) -> Self {
        MeterConfig { cir, cbs, pir, pbs }
    }
    /// An srTCM configuration (`ebs` = 0: green/red only).
    pub fn single_rate(cir: BitRate, cbs: u64, ebs: u64) -> Self {
        MeterConfig { cir, cbs, pir: cir, pbs: ebs }
    }
}

/// Nanobits per byte.
const NANOBITS_PER_BYTE: u128 = 8 * 1_000_000_000;

/// One meter entry's buckets.
#[derive(Debug, Clone, Copy, Default)]
pub struct MeterState {
    /// Tokens of C, nanobits.
    c: u128,
    /// Tokens of P (trTCM) or E (srTCM), nanobits.
    p: u128,
    /// Time of the last update.
    last: Nanos,
    /// The buckets were filled once (they start full).
    started: bool,
}

impl MeterState {
    /// Meters one packet of `bytes` at `now` (colour-blind).
    pub fn execute(&mut self, kind: MeterKind, cfg: &MeterConfig, now: Nanos, bytes: u64) -> Color {
        let (cbs, pbs) = (cfg.cbs as u128 * NANOBITS_PER_BYTE, cfg.pbs as u128 * NANOBITS_PER_BYTE);
        if !self.started {
            (self.c, self.p, self.last, self.started) = (cbs, pbs, now, true);
        }
        let dt = now.saturating_sub(self.last) as u128;
        self.last = self.last.max(now);
        let b = bytes as u128 * NANOBITS_PER_BYTE;
        match kind {
            MeterKind::TwoRate => {
                self.c = (self.c + cfg.cir.bps() as u128 * dt).min(cbs);
                self.p = (self.p + cfg.pir.bps() as u128 * dt).min(pbs);
                if self.p < b {
                    Color::Red
                } else if self.c < b {
                    self.p -= b;
                    Color::Yellow
                } else {
                    self.p -= b;
                    self.c -= b;
                    Color::Green
                }
            }
            MeterKind::SingleRate => {
                let fill = cfg.cir.bps() as u128 * dt;
                let to_c = fill.min(cbs - self.c.min(cbs));
                self.c += to_c;
                self.p = (self.p + (fill - to_c)).min(pbs);
                if self.c >= b {
                    self.c -= b;
                    Color::Green
                } else if self.p >= b {
                    self.p -= b;
                    Color::Yellow
                } else {
                    Color::Red
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn a_two_rate_meter_is_green_to_cir_yellow_to_pir_red_beyond() {
        // CIR 8 Mbit/s = 1000 B/ms, PIR 16 Mbit/s = 2000 B/ms, bursts of
        // one 1000 B packet each.
        let cfg = MeterConfig::two_rate(BitRate::mbps(8), 1000, BitRate::mbps(16), 1000);
        let colours = |gap: Nanos, n: usize| {
            let mut m = MeterState::default();
            (0..n).map(|i| m.execute(MeterKind::TwoRate, &cfg, i as Nanos * gap, 1000)).collect::<Vec<_>>()
        };
        // At CIR exactly (one packet per ms) every packet is green.
        assert!(colours(MS, 20).iter().all(|c| *c == Color::Green));
        // At 4/3 x CIR (under PIR), with a 4-packet C bucket: the bucket
        // drains by a quarter packet per packet, then one packet in four
        // finds it short (3/4 of the packets, CIR's share, are green).
        let cfg4 = MeterConfig::two_rate(BitRate::mbps(8), 4000, BitRate::mbps(16), 1000);
        let mut m = MeterState::default();
        let c: Vec<Color> = (0..30).map(|i| m.execute(MeterKind::TwoRate, &cfg4, i * 750_000, 1000)).collect();
        assert!(c.iter().all(|c| *c != Color::Red), "under PIR nothing is red: {c:?}");
        assert!(c[..13].iter().all(|c| *c == Color::Green), "{c:?}");
        assert_eq!(&c[13..17], &[Color::Yellow, Color::Green, Color::Green, Color::Green]);
        assert_eq!(c.iter().filter(|c| **c == Color::Green).count(), 25);
        // At 4 x CIR (2 x PIR): half the packets find P empty.
        let c = colours(MS / 4, 41);
        let red = c.iter().filter(|c| **c == Color::Red).count();
        assert_eq!(red, 20, "{c:?}");
    }

    #[test]
    fn bursts_let_a_back_to_back_burst_of_cbs_through_green() {
        let cfg = MeterConfig::two_rate(BitRate::mbps(8), 5000, BitRate::mbps(16), 8000);
        let mut m = MeterState::default();
        let c: Vec<Color> = (0..10).map(|_| m.execute(MeterKind::TwoRate, &cfg, 0, 1000)).collect();
        use Color::*;
        assert_eq!(c, vec![Green, Green, Green, Green, Green, Yellow, Yellow, Yellow, Red, Red]);
    }

    #[test]
    fn a_single_rate_meter_without_excess_burst_is_two_colour() {
        let cfg = MeterConfig::single_rate(BitRate::mbps(8), 2000, 0);
        let mut m = MeterState::default();
        let c: Vec<Color> = (0..6).map(|i| m.execute(MeterKind::SingleRate, &cfg, i * MS / 2, 1000)).collect();
        use Color::*;
        // 2 packets of burst, then one packet per ms refills: every other is red.
        assert_eq!(c, vec![Green, Green, Green, Red, Green, Red]);
        // With an excess bucket, the overflow of C goes to E: yellow before red.
        let cfg = MeterConfig::single_rate(BitRate::mbps(8), 1000, 1000);
        let mut m = MeterState::default();
        let c: Vec<Color> = (0..3).map(|_| m.execute(MeterKind::SingleRate, &cfg, 0, 1000)).collect();
        assert_eq!(c, vec![Green, Yellow, Red]);
        // After 2 ms idle, C is full and the overflow filled E again.
        assert_eq!(m.execute(MeterKind::SingleRate, &cfg, 2 * MS, 1000), Green);
        assert_eq!(m.execute(MeterKind::SingleRate, &cfg, 2 * MS, 1000), Yellow);
    }
}
