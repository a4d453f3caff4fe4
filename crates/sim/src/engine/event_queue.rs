//! The engine's event queue: an 8-ary min-heap of 16-byte entries ordered
//! by one 64-bit key.
//!
//! Ordering is by time, then by what happens (the tag's high
//! [`64 - GEN_BITS`](GEN_BITS) bits); the generation in a tag's low bits
//! does not order. The engine queues at most one live event per (time,
//! what): a channel has one delivery event at a time, a link or node event
//! is queued once, a node one armed timer; only a timer's stale events can
//! share a live one's time and node, and popping a stale event changes
//! nothing, so the order among them does not change a run. The order is
//! otherwise total and does not depend on the order of insertion.
//!
//! The key packs the time (below [`KEY_TIME_LIMIT`], 2^40 ns = 18.3
//! simulated minutes) above the 24 bits of what happens, so a comparison is
//! one 64-bit compare (a `(time, tag)` pair took two, and the smallest of
//! four children twice as many instructions). Events due from
//! `KEY_TIME_LIMIT` on wait in an ordered set behind the heap: every event
//! in the heap is earlier than any of them.
//!
//! A sift-down is a chain of dependent loads (each level's children are
//! found from the last level's winner), so its cost is the depth: eight
//! children per node (two cache lines of entries, the smallest found in a
//! branch-free tournament of seven comparisons) make the tree a third
//! shallower than a 4-ary one's. With the 128-bit keys before, the 4-ary
//! heap was as fast; with one-word keys the 8-ary one is faster
//! (BENCHMARKS.md has both comparisons). A calendar of 16 ns buckets in
//! front of the heap ran fewer instructions and more slowly: the same few
//! hundred events spread over a hundred buckets' buffers miss the caches
//! that the heap's few kilobytes stay in (BENCHMARKS.md, "A calendar
//! queue, a front slot and one-line channels").

use std::collections::BTreeSet;

use weft_wire::time::Nanos;

/// Bits of an event tag below what happens (the engine's timer generation).
pub const GEN_BITS: u32 = 40;
/// Events due at or after this time (2^40 ns) are kept out of the heap.
pub const KEY_TIME_LIMIT: Nanos = 1 << GEN_BITS;

/// An event: when, and a unique tag (sequence number + what).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Time.
    pub at: Nanos,
    /// What happens (high bits) and a generation (low [`GEN_BITS`] bits).
    pub tag: u64,
}

/// A heap entry: the order key (time above what happens) and the tag.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u64,
    tag: u64,
}

impl Entry {
    #[inline(always)]
    fn of(e: Event) -> Entry {
        debug_assert!(e.at < KEY_TIME_LIMIT);
        Entry { key: (e.at << (64 - GEN_BITS)) | (e.tag >> GEN_BITS), tag: e.tag }
    }
    #[inline(always)]
    fn event(self) -> Event {
        Event { at: self.key >> (64 - GEN_BITS), tag: self.tag }
    }
}

/// The engine's event queue (see the module documentation).
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: Vec<Entry>,
    /// Events due at or after [`KEY_TIME_LIMIT`], in `(at, tag)` order.
    late: BTreeSet<(Nanos, u64)>,
}

impl EventQueue {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.heap.len() + self.late.len()
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The earliest event.
    #[inline]
    pub fn peek(&self) -> Option<Event> {
        match self.heap.first() {
            Some(e) => Some(e.event()),
            None => self.late.first().map(|&(at, tag)| Event { at, tag }),
        }
    }
    /// Adds an event.
    #[inline]
    pub fn push(&mut self, e: Event) {
        if e.at >= KEY_TIME_LIMIT {
            self.late.insert((e.at, e.tag));
            return;
        }
        let e = Entry::of(e);
        let mut i = self.heap.len();
        self.heap.push(e);
        let k = e.key;
        while i > 0 {
            let parent = (i - 1) / 8;
            if self.heap[parent].key <= k {
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
        let Some(last) = self.heap.pop() else {
            let (at, tag) = self.late.pop_first()?;
            return Some(Event { at, tag });
        };
        let n = self.heap.len();
        if n == 0 {
            return Some(last.event());
        }
        let top = self.heap[0];
        let k = last.key;
        let mut i = 0;
        loop {
            let first = 8 * i + 1;
            if first >= n {
                break;
            }
            let (best, bk) = if first + 8 <= n {
                // A full group (all but the last): the smallest of eight
                // without branches (pairs, then their winners). Keys are
                // random against each other, so the branches a plain loop
                // takes are mispredicted about half of the time.
                let h = &self.heap[first..first + 8];
                let m = |(ia, ka): (usize, u64), (ib, kb): (usize, u64)| if kb < ka { (ib, kb) } else { (ia, ka) };
                let a = m((0, h[0].key), (1, h[1].key));
                let b = m((2, h[2].key), (3, h[3].key));
                let c = m((4, h[4].key), (5, h[5].key));
                let d = m((6, h[6].key), (7, h[7].key));
                let (bi, bk) = m(m(a, b), m(c, d));
                (first + bi, bk)
            } else {
                let mut best = first;
                let mut bk = self.heap[first].key;
                for c in first + 1..n {
                    let ck = self.heap[c].key;
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
        Some(top.event())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(what: u64, generation: u64) -> u64 {
        (what << GEN_BITS) | generation
    }

    #[test]
    fn pops_in_time_then_what_order() {
        let mut q = EventQueue::default();
        let mut x: u64 = 7;
        let mut all = Vec::new();
        for n in 0..5000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Unique (time, what) pairs, a generation that does not order.
            let e = Event { at: (x >> 33) % 100, tag: tag(n, x >> 60) };
            q.push(e);
            all.push(e);
            if n % 3 == 0 {
                // Interleave pops to exercise both directions.
                let p = q.pop().unwrap();
                all.retain(|y| *y != p);
                assert!(all.iter().all(|y| (y.at, y.tag) >= (p.at, p.tag)));
                assert_eq!(q.peek().as_ref(), all.iter().min_by_key(|y| (y.at, y.tag)));
            }
        }
        let mut last = None;
        while let Some(e) = q.pop() {
            assert!(last.is_none_or(|l| (e.at, e.tag) > l));
            last = Some((e.at, e.tag));
        }
    }

    /// Pushes and pops against an ordered set: events a few
    /// nanoseconds to minutes apart and late ones, pushed after the last
    /// popped time (as the engine does) and anywhere.
    #[test]
    fn pops_as_an_ordered_set_over_every_distance() {
        for spread in [20u64, 1_000, 40_000, 5_000_000, KEY_TIME_LIMIT + 1_000] {
            let mut q = EventQueue::default();
            let mut all = std::collections::BTreeSet::new();
            let mut x: u64 = spread;
            let mut now = 0u64;
            for n in 0..20_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let d = (x >> 20) % spread;
                // Mostly after the last popped time, sometimes before it.
                let at = if x >> 62 == 0 { d } else { now.saturating_add(d) };
                let e = Event { at, tag: tag(n, 0) };
                q.push(e);
                all.insert((e.at, e.tag));
                assert_eq!(q.len(), all.len());
                if (x >> 40) % 5 < 2 {
                    let p = q.pop().unwrap();
                    assert_eq!(Some((p.at, p.tag)), all.pop_first());
                    now = p.at;
                }
                assert_eq!(q.peek().map(|e| (e.at, e.tag)), all.first().copied());
            }
            while let Some(p) = q.pop() {
                assert_eq!(Some((p.at, p.tag)), all.pop_first());
            }
            assert!(all.is_empty() && q.is_empty());
        }
    }

    #[test]
    fn late_events_come_after_the_heap_in_time_order() {
        let mut q = EventQueue::default();
        let late = [KEY_TIME_LIMIT + 5, KEY_TIME_LIMIT, u64::MAX, KEY_TIME_LIMIT + 5];
        for (n, &at) in late.iter().enumerate() {
            q.push(Event { at, tag: tag(n as u64, 0) });
        }
        assert_eq!(q.peek().map(|e| e.at), Some(KEY_TIME_LIMIT));
        q.push(Event { at: KEY_TIME_LIMIT - 1, tag: tag(9, 0) });
        q.push(Event { at: 3, tag: tag(8, 0) });
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|e| (e.at, e.tag >> GEN_BITS)).collect();
        assert_eq!(
            order,
            [(3, 8), (KEY_TIME_LIMIT - 1, 9), (KEY_TIME_LIMIT, 1), (KEY_TIME_LIMIT + 5, 0), (KEY_TIME_LIMIT + 5, 3), (u64::MAX, 2)]
        );
        assert!(q.is_empty() && q.peek().is_none());
    }
}
