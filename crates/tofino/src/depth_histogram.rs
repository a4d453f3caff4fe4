//! Queue depth seen by arriving packets, as a fixed-bucket histogram
//! (exported as `weft_queue_depth_at_enqueue_bytes`, docs/RESULTS.md).
//!
//! Buckets: an empty queue, then powers of two from 1 KiB to 8 MiB (a
//! Tofino2 queue cannot hold more than its 64 MB buffer, and the deepest
//! queues weft's experiments see are a few MB), then +Inf. Recording is one
//! `leading_zeros` and one increment, for every buffered packet; packets
//! that cut through an empty port are not recorded (the traffic manager
//! adds them to the depth-0 bucket when asked).
//!
//! Invariant: `counts` sums to the number of recorded packets and `sum` to
//! the sum of their depths.

/// Upper bounds (bytes, inclusive) of the finite buckets.
pub const DEPTH_BOUNDS: [u64; 15] = {
    let mut b = [0u64; 15];
    let mut i = 1;
    while i < 15 {
        b[i] = 1024 << (i - 1);
        i += 1;
    }
    b
};

/// Histogram of queue depths at enqueue. The sum comes first and the
/// histogram starts a cache line, so that a record of a depth of at most
/// 32 KiB (the first seven buckets) writes one line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct DepthHistogram {
    /// Sum of recorded depths, bytes.
    pub sum: u64,
    /// Non-cumulative counts; the last bucket is +Inf.
    pub counts: [u64; 16],
}

impl DepthHistogram {
    /// Records a packet that found `depth` bytes ahead of it.
    #[inline]
    pub fn record(&mut self, depth: u64) {
        let i = if depth == 0 { 0 } else { (65 - ((depth - 1) >> 10).leading_zeros() as usize).min(15) };
        self.counts[i] += 1;
        self.sum += depth;
    }

    /// Packets recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depths_fall_in_the_bucket_whose_bound_is_the_first_not_below_them() {
        for (depth, bucket) in
            [(0, 0), (1, 1), (1024, 1), (1025, 2), (2048, 2), (2049, 3), (8 << 20, 14), ((8 << 20) + 1, 15), (u64::MAX, 15)]
        {
            let mut h = DepthHistogram::default();
            h.record(depth);
            assert_eq!(h.counts[bucket], 1, "depth {depth}");
            if bucket < 15 {
                assert!(depth <= DEPTH_BOUNDS[bucket]);
            }
            if bucket > 0 {
                assert!(depth > DEPTH_BOUNDS[bucket - 1]);
            }
        }
    }
}
