//! A set of indices that answers "how many members are below i" and
//! "which is the k-th member" in O(log n): a bit per index, and a Fenwick
//! tree (binary indexed tree) of the members per 64-bit word.
//!
//! A RoCE host's round robin walks its unfinished QPs by position in the
//! sorted list of them; a sorted `Vec` answered the position with a binary
//! search but paid a move of every later entry for each QP that finished
//! (31 KB per finished flow with 7 800 flows per host, in a run of a
//! million flows). This set gives the same positions without the moves,
//! and its tree, one count per 64 indices (488 bytes for 7 800 QPs), stays
//! in a cache line or two.
//!
//! Invariants: members are indices below [`RankSet::capacity`], added in
//! increasing order by [`RankSet::push`] (each new index is the next one),
//! removed in any order; bit `i` of `bits` is set exactly when `i` is a
//! member; `tree[j - 1]` (j 1-based) counts the members in the words
//! `(j - lowbit(j), j]`.

/// A set of indices `0..capacity` with rank and select in O(log n).
#[derive(Debug, Clone, Default)]
pub struct RankSet {
    /// Membership, one bit per index.
    bits: Vec<u64>,
    /// Fenwick tree over the words of `bits`, 1-based: `tree[j - 1]`
    /// counts the members in words `(j - lowbit(j), j]`.
    tree: Vec<u32>,
    /// Indices pushed.
    cap: usize,
    /// Members.
    len: usize,
}

impl RankSet {
    /// Room for `n` more indices.
    pub fn reserve_exact(&mut self, n: usize) {
        let words = (self.cap + n).div_ceil(64).saturating_sub(self.bits.len());
        self.bits.reserve_exact(words);
        self.tree.reserve_exact(words);
    }

    /// Indices the set can hold (one past the last pushed).
    pub fn capacity(&self) -> usize {
        self.cap
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
        let i = self.cap;
        if i / 64 == self.bits.len() {
            // A new word: its tree node covers the words (j - lowbit(j), j],
            // all but itself already counted in other nodes.
            let j = self.bits.len() + 1;
            let low = j - lowbit(j);
            let mut count = 0u32;
            let mut k = j - 1;
            while k > low {
                count += self.tree[k - 1];
                k -= lowbit(k);
            }
            self.bits.push(0);
            self.tree.push(count);
        }
        self.cap += 1;
        self.bits[i / 64] |= 1 << (i % 64);
        self.add(i / 64, 1);
        self.len += 1;
    }

    /// Removes member `i` (no effect if `i` is not one).
    pub fn remove(&mut self, i: usize) {
        if !self.contains(i) {
            return;
        }
        self.bits[i / 64] &= !(1 << (i % 64));
        self.add(i / 64, -1);
        self.len -= 1;
    }

    /// Members below `i`: the position `i` has in the sorted members if it
    /// is one.
    pub fn rank(&self, i: usize) -> usize {
        let i = i.min(self.cap);
        let w = i / 64;
        let mut n = 0usize;
        let mut j = w;
        while j > 0 {
            n += self.tree[j - 1] as usize;
            j -= lowbit(j);
        }
        if let Some(word) = self.bits.get(w) {
            n += (word & ((1u64 << (i % 64)) - 1)).count_ones() as usize;
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
        // The word: descend from the highest power of two to the largest
        // j with (members in the first j words) <= k; the member is in
        // word j (0-based).
        let n = self.tree.len();
        let mut j = 0usize;
        let mut left = k as u32;
        let mut step = 1usize << (usize::BITS - 1 - n.leading_zeros());
        while step > 0 {
            let next = j + step;
            if next <= n && self.tree[next - 1] <= left {
                j = next;
                left -= self.tree[next - 1];
            }
            step >>= 1;
        }
        // Then the left-th set bit of that word.
        let mut word = *self.bits.get(j)?;
        for _ in 0..left {
            word &= word - 1;
        }
        Some(j * 64 + word.trailing_zeros() as usize)
    }

    /// Adds `delta` to word `w`'s count.
    fn add(&mut self, w: usize, delta: i32) {
        let mut j = w + 1;
        while j <= self.tree.len() {
            self.tree[j - 1] = self.tree[j - 1].wrapping_add_signed(delta);
            j += lowbit(j);
        }
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
        let mut below = crate::test_rand::below(11);
        let mut rand = |m: usize| below(m as u64) as usize;
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
