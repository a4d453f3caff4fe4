//! INT best-nexthop load balancing (`../shared/papers/int-best-nexthop-lb.txt`,
//! §III): the arithmetic of the routing-decision and monitoring phases.
//!
//! - **Degree of congestion** (§III, routing decision phase): "the sum of
//!   each metric with min-max normalization", each metric minus the lower
//!   bound of its range divided by the range's size. Values outside the
//!   range are clamped to it, so one metric weighs at most 1.
//! - **Link utilisation by DRE** (§IV, after CONGA [12]): +1 for every
//!   packet sent on the port, halved every period (50 ms in the paper).
//!   On a Tofino the halving cannot run on a timer over the whole array;
//!   the register keeps the value with the period it was last touched in
//!   and the access halves it once per period that passed (`value >> n`),
//!   which gives the same value the paper's periodic halving gives at
//!   every packet.
//!
//! Invariants: a degree of congestion lies in [0, 3]; a DRE value never
//! grows without a packet and halves exactly once per elapsed period.
//!
//! Status (issue 15): the scheme's arithmetic only; the program (INT shim
//! insertion, max-merge and stripping with `weft_wire::int`, bottleneck and
//! best-port registers, flowlets, probes) and its registry entry come next.

use super::SchemeError;
use weft_wire::time::Nanos;

/// The known range of one metric (§III assumption 3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricRange {
    /// Lower bound.
    pub min: f64,
    /// Upper bound.
    pub max: f64,
}

impl MetricRange {
    /// A range `min..max`; `min >= max` (or a bound that is not finite)
    /// is an error naming the parameter.
    pub fn new(param: &str, min: f64, max: f64) -> Result<Self, SchemeError> {
        if min.is_finite() && max.is_finite() && min < max {
            Ok(MetricRange { min, max })
        } else {
            Err(SchemeError::BadValue {
                scheme: "int-nexthop".into(),
                param: param.into(),
                value: format!("{min}..{max}"),
                unit: "range with min < max".into(),
            })
        }
    }

    /// Min-max normalisation of `v`, clamped to [0, 1].
    pub fn normalise(&self, v: f64) -> f64 {
        ((v - self.min) / (self.max - self.min)).clamp(0.0, 1.0)
    }
}

/// The degree of congestion of a path from its three bottleneck values
/// (hop latency, queue occupancy, link utilisation) and their ranges.
pub fn degree_of_congestion(values: [u32; 3], ranges: &[MetricRange; 3]) -> f64 {
    values.iter().zip(ranges).map(|(v, r)| r.normalise(*v as f64)).sum()
}

/// One packet sent on a port whose DRE register holds `stored` (value in
/// the low 32 bits, the period it was last touched in above): the new
/// register content and the port's utilisation value after the packet.
pub fn dre_on_packet(stored: u64, now: Nanos, period: Nanos) -> (u64, u32) {
    let (value, at) = dre_now(stored, now, period);
    let value = value.saturating_add(1);
    (((at as u64) << 32) | value as u64, value)
}

/// The port's utilisation value at `now` without a packet (what a read
/// sees), and the current period.
pub fn dre_now(stored: u64, now: Nanos, period: Nanos) -> (u32, u32) {
    let epoch = (now / period.max(1)) as u32;
    let (value, last) = (stored as u32, (stored >> 32) as u32);
    let halvings = epoch.saturating_sub(last);
    (if halvings >= 32 { 0 } else { value >> halvings }, epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_degree_of_congestion_is_the_sum_of_min_max_normalised_metrics() {
        let r = [
            MetricRange::new("latency", 0.0, 1000.0).unwrap(),
            MetricRange::new("queue", 1000.0, 5000.0).unwrap(),
            MetricRange::new("util", 0.0, 100.0).unwrap(),
        ];
        // 250/1000 + (3000-1000)/4000 + 10/100 = 0.25 + 0.5 + 0.1
        assert!((degree_of_congestion([250, 3000, 10], &r) - 0.85).abs() < 1e-12);
        // Out of range: clamped, each metric at most 1.
        assert_eq!(degree_of_congestion([5000, 0, 1000], &r), 2.0);
        assert!(MetricRange::new("queue", 5.0, 5.0).is_err());
        let e = MetricRange::new("queue_range", 9.0, 1.0).unwrap_err();
        assert!(e.to_string().contains("queue_range"), "{e}");
    }

    #[test]
    fn dre_adds_one_per_packet_and_halves_once_per_period() {
        let period = 50_000_000;
        let mut reg = 0u64;
        for i in 0..10 {
            let (r, v) = dre_on_packet(reg, 1_000_000 * i, period);
            reg = r;
            assert_eq!(v, i as u32 + 1);
        }
        // 10 in period 0; one period later 5, then 2 (integer halving), 0.
        assert_eq!(dre_now(reg, 50_000_000, period).0, 5);
        assert_eq!(dre_now(reg, 120_000_000, period).0, 2);
        assert_eq!(dre_now(reg, 10 * period, period).0, 0);
        // A packet in period 2 finds 10 >> 2 = 2 and makes 3.
        assert_eq!(dre_on_packet(reg, 2 * period + 1, period).1, 3);
    }
}
