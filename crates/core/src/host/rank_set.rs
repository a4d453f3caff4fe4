//! A set of indices that answers "how many members are below i" and
//! "which is the k-th member" in O(log n): a Fenwick tree (binary indexed
//! tree) of membership bits.
//!
//! A RoCE host's round robin walks its unfinished QPs by position in the
//! sorted list of them; a sorted `Vec` answered the position with a binary
//! search but paid a move of every later entry for each QP that finished
//! (31 KB per finished flow with 7 800 flows per host, in a run of a
//! million flows). This set gives the same positions without the moves.
//!
//! Invariants: members are indices below [`RankSet::capacity`], added in
//! increasing order by [`RankSet::push`] (each new index is the next one),
//! removed in any order; `tree[j]` (1-based) counts the members in
//! `(j - lowbit(j), j]`; bit `i` of `bits` is set exactly when `i` is a
//! member.

/// A set of indices `0..capacity` with rank and select in O(log n).
#[derive(Debug, Clone, Default)]
pub struct RankSet {
    /// Fenwick tree, 1-based: `tree[j - 1]` counts members in
    /// `(j - lowbit(j), j]`.
    tree: Vec<u32>,
    /// Membership, one bit per index (a point query without two prefix
    /// sums).
    bits: Vec<u64>,
    len: usize,
}

impl RankSet {
    /// Room for `n` more indices.
    pub fn reserve_exact(&mut self, n: usize) {
        self.tree.reserve_exact(n);
        self.bits.reserve_exact((self.tree.len() + n).div_ceil(64).saturating_sub(self.bits.len()));
    }

    /// Indices the set can hold (one past the last pushed).
    pub fn capacity(&self) -> usize {
        self.tree.len()
    }

    /// Members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no member.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds index [`RankSet::capacity`] (the next one) as a member.
    pub fn push(&mut self) {
        let j = self.tree.len() + 1;
        // tree[j] = 1 + the counts of the nodes that cover (j - lowbit(j), j).
        let low = j - lowbit(j);
        let mut count = 1u32;
        let mut k = j - 1;
        while k > low {
            count += self.tree[k - 1];
            k -= lowbit(k);
        }
        let i = j - 1;
        if i / 64 == self.bits.len() {
            self.bits.push(0);
        }
        self.bits[i / 64] |= 1 << (i % 64);
        self.tree.push(count);
        self.len += 1;
    }

    /// Removes member `i` (no effect if `i` is not one: the caller knows
    /// it is; [`RankSet::contains`] checks).
    pub fn remove(&mut self, i: usize) {
        if !self.contains(i) {
            return;
        }
        self.bits[i / 64] &= !(1 << (i % 64));
        let mut j = i + 1;
        while j <= self.tree.len() {
            self.tree[j - 1] -= 1;
            j += lowbit(j);
        }
        self.len -= 1;
    }

    /// Members below `i`: the position `i` has in the sorted members if it
    /// is one.
    pub fn rank(&self, i: usize) -> usize {
        let mut j = i.min(self.tree.len());
        let mut n = 0usize;
        while j > 0 {
            n += self.tree[j - 1] as usize;
            j -= lowbit(j);
        }
        n
    }

    /// Whether `i` is a member.
    pub fn contains(&self, i: usize) -> bool {
        self.bits.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// The member at position `k` of the sorted members (`None` if
    /// `k >= len`).
    pub fn select(&self, k: usize) -> Option<usize> {
        if k >= self.len {
            return None;
        }
        // Descend from the highest power of two: find the largest j with
        // prefix(j) <= k; the member is index j (0-based).
        let n = self.tree.len();
        let mut j = 0usize;
        let mut left = k as u32;
        let mut step = if n == 0 { 0 } else { 1usize << (usize::BITS - 1 - n.leading_zeros()) };
        while step > 0 {
            let next = j + step;
            if next <= n && self.tree[next - 1] <= left {
                j = next;
                left -= self.tree[next - 1];
            }
            step >>= 1;
        }
        Some(j)
    }
}

#[inline]
fn lowbit(j: usize) -> usize {
    j & j.wrapping_neg()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set against a sorted `Vec` (what it replaces) over random
    /// pushes and removals.
    #[test]
    fn ranks_and_selects_as_a_sorted_vec_does() {
        let mut set = RankSet::default();
        let mut vec: Vec<usize> = Vec::new();
        let mut x: u64 = 11;
        let mut rand = |m: usize| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) as usize) % m.max(1)
        };
        for step in 0..20_000 {
            if vec.is_empty() || rand(3) > 0 {
                vec.push(set.capacity());
                set.push();
            } else {
                let i = vec[rand(vec.len())];
                set.remove(i);
                vec.retain(|&v| v != i);
            }
            if step % 7 == 0 {
                assert_eq!(set.len(), vec.len());
                for _ in 0..4 {
                    let i = rand(set.capacity() + 2);
                    assert_eq!(set.rank(i), vec.partition_point(|&v| v < i), "rank({i})");
                    assert_eq!(set.contains(i), vec.binary_search(&i).is_ok(), "contains({i})");
                    let k = rand(vec.len() + 2);
                    assert_eq!(set.select(k), vec.get(k).copied(), "select({k})");
                }
            }
        }
        // Removing a non-member changes nothing.
        let before = (set.len(), set.rank(set.capacity()));
        let gone = (0..set.capacity()).find(|&i| !set.contains(i));
        if let Some(i) = gone {
            set.remove(i);
            assert_eq!((set.len(), set.rank(set.capacity())), before);
        }
    }

    #[test]
    fn empty_set() {
        let s = RankSet::default();
        assert!(s.is_empty());
        assert_eq!(s.select(0), None);
        assert_eq!(s.rank(5), 0);
        assert!(!s.contains(0));
    }
}
