//! Random loss on a link direction, on purpose (fault injection:
//! `weft link LINK loss P`, a topology event `action = "loss"`).
//!
//! Each frame a link direction carries is lost with probability
//! `ppm / 1 000 000`, drawn from the direction's own RNG (ChaCha8 seeded
//! from the link and direction), so a virtual-time run loses the same
//! frames every time, whatever the partitioning: only the sending end of a
//! direction draws. The frame has taken its time on the wire when it is
//! lost (it was sent and never arrived), and drivers count it apart from
//! every other drop. Invariant: at `ppm == 0` no number is drawn.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Parts per million of a probability.
pub const PPM: u32 = 1_000_000;

/// The loss of one link direction.
#[derive(Debug, Clone)]
pub struct LinkLoss {
    ppm: u32,
    rng: ChaCha8Rng,
}

impl LinkLoss {
    /// No loss yet; the RNG of direction `dir` of link `link`.
    pub fn new(link: u32, dir: u8) -> Self {
        let seed = 0x6c6f_7373_0000_0000 ^ (u64::from(link) << 8) ^ u64::from(dir);
        LinkLoss { ppm: 0, rng: ChaCha8Rng::seed_from_u64(seed) }
    }
    /// Sets the probability, in parts per million (capped at 1).
    pub fn set(&mut self, ppm: u32) {
        self.ppm = ppm.min(PPM);
    }
    /// The probability, in parts per million.
    pub fn ppm(&self) -> u32 {
        self.ppm
    }
    /// Whether the next frame is lost.
    pub fn lose(&mut self) -> bool {
        self.ppm > 0 && self.rng.random_range(0..PPM) < self.ppm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loses_about_the_set_share_and_the_same_frames_each_time() {
        let mut a = LinkLoss::new(3, 1);
        assert!((0..1000).all(|_| !a.lose()), "no loss by default");
        a.set(50_000);
        let lost: Vec<bool> = (0..100_000).map(|_| a.lose()).collect();
        let n = lost.iter().filter(|l| **l).count();
        assert!((4_500..5_500).contains(&n), "5 % of 100 000: {n}");
        let mut b = LinkLoss::new(3, 1);
        b.set(50_000);
        assert_eq!(lost, (0..100_000).map(|_| b.lose()).collect::<Vec<_>>(), "deterministic");
        b.set(2 * PPM);
        assert!((0..100).all(|_| b.lose()), "capped at 1");
    }
}
