//! How far behind its deadlines an actor runs: a fixed-bucket histogram of
//! lateness (time handled − time due), with p50/p99/max.
//!
//! Buckets are 1 µs wide up to 1 ms, then 100 µs wide up to 100 ms; the
//! maximum is exact. Recording is O(1) and allocation-free. A real-time
//! emulation is faithful while p99 lag stays below the smallest time the
//! experiment cares about (one serialization time of the fastest link).

use serde::{Deserialize, Serialize};
use weft_wire::time::Nanos;

const FINE: usize = 1000; // 1 µs buckets: 0..1 ms
const COARSE: usize = 1000; // 100 µs buckets: 1..101 ms

/// Lateness histogram.
#[derive(Debug, Clone)]
pub struct LagHistogram {
    buckets: Vec<u64>,
    count: u64,
    max: Nanos,
    sum: u128,
}

impl Default for LagHistogram {
    fn default() -> Self {
        LagHistogram { buckets: vec![0; FINE + COARSE + 1], count: 0, max: 0, sum: 0 }
    }
}

/// Summary of a [`LagHistogram`].
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct LagSummary {
    /// Deadlines handled.
    pub count: u64,
    /// Median lateness, ns (bucket upper bound).
    pub p50_ns: Nanos,
    /// 99th percentile, ns (bucket upper bound).
    pub p99_ns: Nanos,
    /// Largest lateness, ns (exact).
    pub max_ns: Nanos,
    /// Mean lateness, ns.
    pub mean_ns: Nanos,
}

impl LagHistogram {
    /// Records that something due at `due` was handled at `now`.
    pub fn record(&mut self, due: Nanos, now: Nanos) {
        let lag = now.saturating_sub(due);
        let us = (lag / 1000) as usize;
        let b = if us < FINE { us } else { (FINE + (us - FINE) / 100).min(FINE + COARSE) };
        self.buckets[b] += 1;
        self.count += 1;
        self.max = self.max.max(lag);
        self.sum += lag as u128;
    }

    fn upper(b: usize) -> Nanos {
        if b < FINE {
            (b as u64 + 1) * 1000
        } else {
            (FINE as u64 + (b - FINE) as u64 * 100 + 100) * 1000
        }
    }

    fn quantile(&self, q: f64) -> Nanos {
        if self.count == 0 {
            return 0;
        }
        let rank = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::upper(b).min(self.max);
            }
        }
        self.max
    }

    /// Deadlines recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of all lateness, ns.
    pub fn sum_ns(&self) -> u128 {
        self.sum
    }

    /// Deadlines handled at most `ns` late (exact at bucket bounds: 1 µs
    /// steps below 1 ms, 100 µs steps above; otherwise rounded down to a
    /// bucket bound).
    pub fn count_at_most(&self, ns: Nanos) -> u64 {
        if ns >= self.max {
            return self.count;
        }
        self.buckets.iter().enumerate().take_while(|(b, _)| Self::upper(*b) <= ns).map(|(_, n)| *n).sum()
    }

    /// p50/p99/max.
    pub fn summary(&self) -> LagSummary {
        LagSummary {
            count: self.count,
            p50_ns: self.quantile(0.5),
            p99_ns: self.quantile(0.99),
            max_ns: self.max,
            mean_ns: if self.count == 0 { 0 } else { (self.sum / self.count as u128) as u64 },
        }
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, o: &LagHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.count += o.count;
        self.max = self.max.max(o.max);
        self.sum += o.sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_max() {
        let mut h = LagHistogram::default();
        for i in 0..99 {
            h.record(0, 500 + i); // < 1 µs
        }
        h.record(0, 2_500_000); // 2.5 ms
        let s = h.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_ns, 1000);
        assert_eq!(s.p99_ns, 1000);
        assert_eq!(s.max_ns, 2_500_000);
        h.record(10, 5); // early counts as 0
        assert_eq!(h.summary().count, 101);
    }
}
