//! Traffic patterns: which host sends how much to whom, when.
//!
//! A [`Pattern`] expands, for a list of hosts and a seed, into [`FlowPlan`]s
//! (source, destination, bytes or rate, start). Patterns: `permutation`
//! (every host sends to one other, a random derangement), `incast:N` (N
//! random senders to one random receiver), `all-to-all` (every ordered
//! pair), `pair:A:B` (one flow, host index A to host index B). Randomness
//! comes from the seed only.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use weft_wire::time::Nanos;

/// A scripted traffic pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pattern {
    /// Random derangement: host i sends to host p(i) ≠ i.
    Permutation,
    /// `n` senders to one receiver.
    Incast(usize),
    /// Every host to every other host.
    AllToAll,
    /// One flow between two host indices.
    Pair(usize, usize),
}

/// Why a pattern cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Unknown name or bad syntax.
    #[error("unknown traffic pattern `{0}` (use permutation, incast:N, all-to-all or pair:A:B)")]
    Unknown(String),
    /// The pattern needs more hosts than the topology has.
    #[error("pattern `{pattern}` needs {needed} hosts but the topology has {hosts}")]
    TooFewHosts {
        /// Pattern text.
        pattern: String,
        /// Needed.
        needed: usize,
        /// Available.
        hosts: usize,
    },
}

impl FromStr for Pattern {
    type Err = PatternError;
    fn from_str(s: &str) -> Result<Self, PatternError> {
        let bad = || PatternError::Unknown(s.to_string());
        match s {
            "permutation" => Ok(Pattern::Permutation),
            "all-to-all" => Ok(Pattern::AllToAll),
            _ => {
                if let Some(n) = s.strip_prefix("incast:") {
                    let n: usize = n.parse().map_err(|_| bad())?;
                    if n == 0 {
                        return Err(bad());
                    }
                    Ok(Pattern::Incast(n))
                } else if let Some(r) = s.strip_prefix("pair:") {
                    let (a, b) = r.split_once(':').ok_or_else(bad)?;
                    Ok(Pattern::Pair(a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?))
                } else {
                    Err(bad())
                }
            }
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Permutation => write!(f, "permutation"),
            Pattern::Incast(n) => write!(f, "incast:{n}"),
            Pattern::AllToAll => write!(f, "all-to-all"),
            Pattern::Pair(a, b) => write!(f, "pair:{a}:{b}"),
        }
    }
}

/// One planned flow between host indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlowPlan {
    /// Source host index.
    pub src: usize,
    /// Destination host index.
    pub dst: usize,
    /// Start time.
    pub start: Nanos,
}

impl Pattern {
    /// Hosts the pattern needs.
    pub fn hosts_needed(&self) -> usize {
        match *self {
            Pattern::Permutation | Pattern::AllToAll => 2,
            Pattern::Incast(n) => n + 1,
            Pattern::Pair(a, b) => a.max(b) + 1,
        }
    }

    /// Expands the pattern over `hosts` hosts.
    pub fn plan(&self, hosts: usize, seed: u64, start: Nanos) -> Result<Vec<FlowPlan>, PatternError> {
        let needed = self.hosts_needed();
        if hosts < needed || matches!(self, Pattern::Pair(a, b) if a == b) {
            return Err(PatternError::TooFewHosts { pattern: self.to_string(), needed, hosts });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0074_7261_6666_6963);
        let fp = |src, dst| FlowPlan { src, dst, start };
        Ok(match *self {
            Pattern::Permutation => {
                // Sattolo's algorithm: a uniformly random cyclic permutation (no fixed point).
                let mut p: Vec<usize> = (0..hosts).collect();
                for i in (1..hosts).rev() {
                    let j = rand::Rng::random_range(&mut rng, 0..i);
                    p.swap(i, j);
                }
                (0..hosts).map(|i| fp(i, p[i])).collect()
            }
            Pattern::Incast(n) => {
                let mut idx: Vec<usize> = (0..hosts).collect();
                idx.shuffle(&mut rng);
                let dst = idx[0];
                idx[1..=n].iter().map(|&s| fp(s, dst)).collect()
            }
            Pattern::AllToAll => (0..hosts).flat_map(|s| (0..hosts).filter(move |&d| d != s).map(move |d| fp(s, d))).collect(),
            Pattern::Pair(a, b) => vec![fp(a, b)],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_has_no_fixed_point_and_is_a_bijection() {
        let p = Pattern::Permutation.plan(16, 3, 0).unwrap();
        let mut dsts: Vec<usize> = p.iter().map(|f| f.dst).collect();
        assert!(p.iter().all(|f| f.src != f.dst));
        dsts.sort();
        assert_eq!(dsts, (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn incast_larger_than_the_host_count_is_an_error() {
        assert_eq!("incast:8".parse::<Pattern>().unwrap(), Pattern::Incast(8));
        let e = Pattern::Incast(16).plan(16, 1, 0).unwrap_err();
        assert_eq!(e.to_string(), "pattern `incast:16` needs 17 hosts but the topology has 16");
        assert!("incast:x".parse::<Pattern>().is_err());
        assert!("ring".parse::<Pattern>().is_err());
    }
}
