//! The engine's event queue: a 4-ary min-heap of 16-byte events.
//!
//! Ordering is by `(at, tag)`; the engine makes tags unique among the
//! events queued at once, so the order is total and does not depend on the
//! order of insertion.
//! Four children of 16 bytes fill one 64-byte cache line, so a sift-down
//! touches one line per level and the tree is half as deep as a binary
//! heap's (BENCHMARKS.md has the comparison).

use weft_wire::time::Nanos;

/// An event: when, and a unique tag (sequence number + what).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Time.
    pub at: Nanos,
    /// What happens; unique among the events queued at once.
    pub tag: u64,
}

impl Event {
    #[inline(always)]
    fn key(&self) -> u128 {
        ((self.at as u128) << 64) | self.tag as u128
    }
}

/// A 4-ary min-heap of events.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: Vec<Event>,
}

impl EventQueue {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
    /// The earliest event.
    #[inline]
    pub fn peek(&self) -> Option<&Event> {
        self.heap.first()
    }
    /// Adds an event.
    #[inline]
    pub fn push(&mut self, e: Event) {
        let mut i = self.heap.len();
        self.heap.push(e);
        let k = e.key();
        while i > 0 {
            let parent = (i - 1) / 4;
            if self.heap[parent].key() <= k {
                break;
            }
            self.heap[i] = self.heap[parent];
            i = parent;
        }
        self.heap[i] = e;
    }
    /// Removes and returns the earliest event.
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        let last = self.heap.pop()?;
        let n = self.heap.len();
        if n == 0 {
            return Some(last);
        }
        let top = self.heap[0];
        let k = last.key();
        let mut i = 0;
        loop {
            let first = 4 * i + 1;
            if first >= n {
                break;
            }
            let (best, bk) = if first + 4 <= n {
                // A full group (all but the last): the smallest of four
                // without branches (two pairs, then their winners). Keys
                // are random against each other, so the branches a plain
                // loop takes are mispredicted about half of the time.
                let h = &self.heap[first..first + 4];
                let (k0, k1, k2, k3) = (h[0].key(), h[1].key(), h[2].key(), h[3].key());
                let b01 = usize::from(k1 < k0);
                let k01 = k0.min(k1);
                let b23 = 2 + usize::from(k3 < k2);
                let k23 = k2.min(k3);
                let right = k23 < k01;
                (first + if right { b23 } else { b01 }, k01.min(k23))
            } else {
                let mut best = first;
                let mut bk = self.heap[first].key();
                for c in first + 1..n {
                    let ck = self.heap[c].key();
                    if ck < bk {
                        best = c;
                        bk = ck;
                    }
                }
                (best, bk)
            };
            if k <= bk {
                break;
            }
            self.heap[i] = self.heap[best];
            i = best;
        }
        self.heap[i] = last;
        Some(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_tag_order() {
        let mut q = EventQueue::default();
        let mut x: u64 = 7;
        let mut all = Vec::new();
        for tag in 0..5000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let e = Event { at: (x >> 33) % 100, tag };
            q.push(e);
            all.push(e);
            if tag % 3 == 0 {
                // Interleave pops to exercise both directions.
                let p = q.pop().unwrap();
                all.retain(|y| *y != p);
                assert!(all.iter().all(|y| (y.at, y.tag) >= (p.at, p.tag)));
            }
        }
        let mut last = (0, 0);
        while let Some(e) = q.pop() {
            assert!((e.at, e.tag) > last || last == (0, 0));
            last = (e.at, e.tag);
        }
    }
}
