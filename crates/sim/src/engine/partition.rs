//! Splitting a fabric into the partitions of a parallel run.
//!
//! A partition is run by one thread; a link between two partitions costs a
//! mailbox hand-over, and the smallest delay of such a link is the length of
//! a round (the lookahead), so the cut follows the fabric's structure:
//!
//! 1. units: each host stays with its ToR; below the top tier (the core
//!    switches of a fat-tree, else the spines of a leaf-spine, else every
//!    switch–switch link of an explicit topology) the switches of a pod stay
//!    together; links with no delay are never cut (they would leave no
//!    lookahead); each top-tier switch is a unit of its own;
//! 2. weights: a unit weighs the ports of its nodes (a proxy for the frames
//!    it handles);
//! 3. assignment: largest unit first, each to the lightest partition (ties:
//!    the lower index), so the same fabric always gives the same partitions.
//!
//! [`auto_threads`] chooses the count when the user leaves it to weft: one
//! thread per unit that holds hosts, at most the cores.
//!
//! Invariants: every node is in exactly one partition; no partition is
//! empty (fewer units than threads gives fewer partitions); a link of delay
//! 0 never joins two partitions, so the lookahead is at least 1 ns.

use weft_core::fabric::FabricSpec;
use weft_tofino::SwitchRole;
use weft_wire::time::Nanos;

/// The partitions of a fabric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitioning {
    /// Partition of each node.
    pub part_of: Vec<u32>,
    /// Number of partitions (at least 1).
    pub parts: u32,
    /// Smallest delay of a link between two partitions (`Nanos::MAX` when
    /// none joins two).
    pub lookahead: Nanos,
}

/// Union-find over node indices.
struct Units(Vec<usize>);

impl Units {
    fn find(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }
    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        // The smaller index is the root, so roots do not depend on the
        // order of joins.
        let (lo, hi) = (a.min(b), a.max(b));
        self.0[hi] = lo;
    }
}

/// The units of `fabric` (module doc, step 1).
fn units(fabric: &FabricSpec) -> Units {
    let n = fabric.nodes.len();
    let role = |i: usize| fabric.nodes[i].as_switch().map(|s| s.role);
    let has = |r: SwitchRole| (0..n).any(|i| role(i) == Some(r));
    let top = if has(SwitchRole::Core) {
        Some(SwitchRole::Core)
    } else if has(SwitchRole::Spine) {
        Some(SwitchRole::Spine)
    } else {
        None
    };
    let mut units = Units((0..n).collect());
    for l in &fabric.links {
        let (a, b) = (l.a.0.index(), l.b.0.index());
        if a >= n || b >= n {
            continue;
        }
        let host_link = role(a).is_none() || role(b).is_none();
        let below_top = top.is_some_and(|t| role(a) != Some(t) && role(b) != Some(t));
        if host_link || below_top || l.delay == 0 {
            units.join(a, b);
        }
    }
    units
}

/// The thread count of `--threads auto`: one per unit that holds hosts (a
/// leaf or a pod with its hosts), at most `cores`, at least 1. A spine or
/// core switch joins one of those partitions instead of taking a thread of
/// its own: it handles a fraction of a leaf's frames, and every thread
/// more is one more party to wait for at every round.
pub fn auto_threads(fabric: &FabricSpec, cores: usize) -> usize {
    let mut units = units(fabric);
    let mut with_hosts: Vec<usize> =
        (0..fabric.nodes.len()).filter(|&i| fabric.nodes[i].as_switch().is_none()).map(|i| units.find(i)).collect();
    with_hosts.sort_unstable();
    with_hosts.dedup();
    with_hosts.len().min(cores).max(1)
}

/// The most partitions a fabric is split into (a channel names the
/// partition of its receiver in 16 bits).
pub const MAX_PARTS: usize = 1 << 16;

/// Splits `fabric` into at most `threads` partitions, and at most
/// [`MAX_PARTS`] (see the module doc).
pub fn partition(fabric: &FabricSpec, threads: usize) -> Partitioning {
    let threads = threads.min(MAX_PARTS);
    let n = fabric.nodes.len();
    let one = Partitioning { part_of: vec![0; n], parts: 1, lookahead: Nanos::MAX };
    if threads <= 1 || n == 0 {
        return one;
    }
    let mut units = units(fabric);
    // Units in order of their root (the smallest node index), with weights.
    let mut weight = vec![0u64; n];
    for i in 0..n {
        let r = units.find(i);
        weight[r] += fabric.nodes[i].ports.len().max(1) as u64;
    }
    let mut roots: Vec<usize> = (0..n).filter(|&i| units.find(i) == i).collect();
    let parts = threads.min(roots.len()).max(1);
    if parts == 1 {
        return one;
    }
    roots.sort_by_key(|&r| (std::cmp::Reverse(weight[r]), r));
    let mut load = vec![0u64; parts];
    let mut part_of_root = vec![0u32; n];
    for &r in &roots {
        let lightest = (0..parts).min_by_key(|&p| (load[p], p)).unwrap_or(0);
        load[lightest] += weight[r];
        part_of_root[r] = lightest as u32;
    }
    let part_of: Vec<u32> = (0..n).map(|i| part_of_root[units.find(i)]).collect();
    let lookahead = fabric
        .links
        .iter()
        .filter(|l| part_of.get(l.a.0.index()) != part_of.get(l.b.0.index()))
        .map(|l| l.delay)
        .min()
        .unwrap_or(Nanos::MAX);
    Partitioning { part_of, parts: parts as u32, lookahead }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_testkit::leaf_pair;
    use weft_wire::time::BitRate;

    #[test]
    fn hosts_stay_with_their_leaf_and_spines_balance_the_weights() {
        // leaf0 + 4 hosts (weight 8 + 4), leaf1 + far (5 + 1), 4 spines (2 each).
        let f = leaf_pair(4, 4, BitRate::gbps(100));
        let p = partition(&f, 2);
        assert_eq!(p.parts, 2);
        let part = |name: &str| p.part_of[f.nodes.iter().position(|n| n.name == name).expect(name)];
        for h in ["h0", "h1", "h2", "h3"] {
            assert_eq!(part(h), part("leaf0"));
        }
        assert_eq!(part("far"), part("leaf1"));
        assert_ne!(part("leaf0"), part("leaf1"), "the two heaviest units go to different partitions");
        let load = |q: u32| (0..f.nodes.len()).filter(|&i| p.part_of[i] == q).map(|i| f.nodes[i].ports.len() as u64).sum::<u64>();
        // Largest first, each to the lightest: leaf0 (12) and leaf1 (6), three
        // spines to leaf1's side (12 and 12), the last on the tie to 0.
        assert_eq!((load(0), load(1)), (14, 12));
        assert_eq!(p.lookahead, 1000, "the links between partitions are 1 us");
    }

    #[test]
    fn one_thread_or_fewer_units_than_threads() {
        let f = leaf_pair(2, 1, BitRate::gbps(10));
        assert_eq!(partition(&f, 1).parts, 1);
        // 3 units (two leaves with their hosts, one spine): at most 3 partitions.
        let p = partition(&f, 8);
        assert_eq!(p.parts, 3);
        assert!((0..3).all(|q| p.part_of.contains(&q)), "no partition is empty");
    }

    #[test]
    fn auto_takes_one_thread_per_leaf_with_hosts_at_most_the_cores() {
        // Two leaves with hosts and four spines: two units hold hosts.
        let f = leaf_pair(4, 4, BitRate::gbps(100));
        assert_eq!(auto_threads(&f, 16), 2);
        assert_eq!(auto_threads(&f, 1), 1);
        assert_eq!(auto_threads(&f, 0), 1, "at least one thread");
        let mut joined = f.clone();
        for l in &mut joined.links {
            l.delay = 0;
        }
        assert_eq!(auto_threads(&joined, 16), 1, "zero-delay links join everything into one unit");
    }

    #[test]
    fn a_link_without_delay_is_never_cut() {
        let mut f = leaf_pair(2, 2, BitRate::gbps(10));
        for l in &mut f.links {
            l.delay = 0;
        }
        let p = partition(&f, 2);
        assert_eq!(p.parts, 1, "everything is joined by zero-delay links");
    }
}
