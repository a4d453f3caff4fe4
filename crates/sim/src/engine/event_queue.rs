//! The engine's event queue: an 8-ary min-heap of one-word keys.
//!
//! An event is a time and *what* happens (a number below
//! [`WHAT_LIMIT`]: a link event, a channel's delivery, a node's timer). Its
//! key packs the time (below [`KEY_TIME_LIMIT`], 2^40 ns = 18.3 simulated
//! minutes) above what happens, so events are ordered by `(time, what)` in
//! one 64-bit compare, and a heap entry is its key and nothing else: eight
//! bytes, so eight children are 64 bytes. The engine queues at most one
//! live event per `(time, what)`; entries of one key are one event to the
//! order (a timer re-armed for the time it had leaves two, and either may
//! serve), so the order is total and does not depend on the order of
//! insertion. Events due from `KEY_TIME_LIMIT` on wait in an ordered set
//! behind the heap (which keeps one entry of a key, all the engine needs):
//! every event in the heap is earlier than any of them.
//!
//! A sift-down is a chain of dependent loads (each level's children are
//! found from the last level's winner), so its cost is the depth and the
//! lines each level reads: eight children per node make the tree a third
//! shallower than a 4-ary one's, and their smallest is found in a
//! branch-free tournament of seven comparisons, one or two cache lines.
//! (Entries of 16 bytes, the key and a tag that carried a timer
//! generation, read two or three lines a level; entries kept in
//! 64-byte-aligned lines so that a level reads
//! exactly one saved as many cache misses as plain eight-byte entries and
//! cost 2 % more instructions in its index arithmetic. A calendar of 16 ns
//! buckets in front of the heap ran fewer instructions and more slowly:
//! the same few hundred events spread over a hundred buckets' buffers miss
//! the caches that the heap's few kilobytes stay in. BENCHMARKS.md has each
//! comparison.)

use std::collections::BTreeSet;

use weft_wire::time::Nanos;

/// Bits of an event's key below its time: what happens.
pub const WHAT_BITS: u32 = 24;
/// Number of distinct *what*s (`2^WHAT_BITS`).
pub const WHAT_LIMIT: u64 = 1 << WHAT_BITS;
/// Events due at or after this time (2^40 ns) are kept out of the heap.
pub const KEY_TIME_LIMIT: Nanos = 1 << (64 - WHAT_BITS);

/// An event: when, and what happens (below [`WHAT_LIMIT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Event {
    /// Time.
    pub at: Nanos,
    /// What happens.
    pub what: u32,
}

impl Event {
    #[inline(always)]
    fn key(self) -> u64 {
        debug_assert!(self.at < KEY_TIME_LIMIT && u64::from(self.what) < WHAT_LIMIT);
        (self.at << WHAT_BITS) | u64::from(self.what)
    }
    #[inline(always)]
    fn of_key(key: u64) -> Event {
        Event { at: key >> WHAT_BITS, what: (key & (WHAT_LIMIT - 1)) as u32 }
    }
}

/// The engine's event queue (see the module documentation).
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: Vec<u64>,
    /// Events due at or after [`KEY_TIME_LIMIT`], in `(at, what)` order.
    late: BTreeSet<(Nanos, u32)>,
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
            Some(&k) => Some(Event::of_key(k)),
            None => self.late.first().map(|&(at, what)| Event { at, what }),
        }
    }
    /// Adds an event.
    #[inline(always)]
    pub fn push(&mut self, e: Event) {
        if e.at >= KEY_TIME_LIMIT {
            self.late.insert((e.at, e.what));
            return;
        }
        let k = e.key();
        let mut i = self.heap.len();
        self.heap.push(k);
        while i > 0 {
            let parent = (i - 1) / 8;
            let pk = self.heap[parent];
            if pk <= k {
                break;
            }
            self.heap[i] = pk;
            i = parent;
        }
        self.heap[i] = k;
    }
    /// Removes and returns the earliest event.
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        let Some(k) = self.heap.pop() else {
            let (at, what) = self.late.pop_first()?;
            return Some(Event { at, what });
        };
        let n = self.heap.len();
        if n == 0 {
            return Some(Event::of_key(k));
        }
        let top = self.heap[0];
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
                let a = m((0, h[0]), (1, h[1]));
                let b = m((2, h[2]), (3, h[3]));
                let c = m((4, h[4]), (5, h[5]));
                let d = m((6, h[6]), (7, h[7]));
                let (bi, bk) = m(m(a, b), m(c, d));
                (first + bi, bk)
            } else {
                let mut best = first;
                let mut bk = self.heap[first];
                for c in first + 1..n {
                    let ck = self.heap[c];
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
            self.heap[i] = bk;
            i = best;
        }
        self.heap[i] = k;
        Some(Event::of_key(top))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(e: &Event) -> (Nanos, u32) {
        (e.at, e.what)
    }

    #[test]
    fn pops_in_time_then_what_order() {
        let mut q = EventQueue::default();
        let mut x: u64 = 7;
        let mut all = Vec::new();
        for n in 0..5000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let e = Event { at: (x >> 33) % 100, what: n };
            q.push(e);
            all.push(e);
            if n % 3 == 0 {
                // Interleave pops to exercise both directions.
                let p = q.pop().unwrap();
                all.retain(|y| *y != p);
                assert!(all.iter().all(|y| key(y) >= key(&p)));
                assert_eq!(q.peek().as_ref(), all.iter().min_by_key(|y| key(y)));
            }
        }
        let mut last = None;
        while let Some(e) = q.pop() {
            assert!(last.is_none_or(|l| key(&e) > l));
            last = Some(key(&e));
        }
    }

    /// Pushes and pops against an ordered multiset: events a few
    /// nanoseconds to minutes apart and late ones, pushed after the last
    /// popped time (as the engine does) and anywhere, some of them twice.
    #[test]
    fn pops_as_an_ordered_multiset_over_every_distance() {
        for spread in [20u64, 1_000, 40_000, 5_000_000, KEY_TIME_LIMIT + 1_000] {
            let mut q = EventQueue::default();
            let mut all = std::collections::BTreeMap::<(Nanos, u32), usize>::new();
            let mut x: u64 = spread;
            let mut now = 0u64;
            for n in 0..20_000u32 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let d = (x >> 20) % spread;
                // Mostly after the last popped time, sometimes before it.
                let at = if x >> 62 == 0 { d } else { now.saturating_add(d) };
                // A few events of one what (a timer's), most of their own.
                let what = if (x >> 50).is_multiple_of(8) { (x >> 53) as u32 % 4 } else { n + 4 };
                let e = Event { at, what };
                // The late set keeps one entry of a key (entries of one
                // key are one event to the engine).
                if at < KEY_TIME_LIMIT || !all.contains_key(&key(&e)) {
                    q.push(e);
                    *all.entry(key(&e)).or_default() += 1;
                }
                assert_eq!(q.len(), all.values().sum::<usize>());
                if (x >> 40) % 5 < 2 {
                    let p = q.pop().unwrap();
                    let mut first = all.first_entry().unwrap();
                    assert_eq!(key(&p), *first.key());
                    *first.get_mut() -= 1;
                    if *first.get() == 0 {
                        first.remove();
                    }
                    now = p.at;
                }
                assert_eq!(q.peek().map(|e| key(&e)), all.first_key_value().map(|(k, _)| *k));
            }
            while let Some(p) = q.pop() {
                let mut first = all.first_entry().unwrap();
                assert_eq!(key(&p), *first.key());
                *first.get_mut() -= 1;
                if *first.get() == 0 {
                    first.remove();
                }
            }
            assert!(all.is_empty() && q.is_empty());
        }
    }

    /// Every size from empty to a few lines, filled and drained: the
    /// partial last group and the slots past the last entry.
    #[test]
    fn fills_and_drains_at_every_size() {
        for size in 0..80u32 {
            let mut q = EventQueue::default();
            for i in 0..size {
                q.push(Event { at: u64::from((i * 37) % 11), what: i });
            }
            let got: Vec<_> = std::iter::from_fn(|| q.pop()).map(|e| key(&e)).collect();
            let mut want = got.clone();
            want.sort_unstable();
            assert_eq!(got.len(), size as usize);
            assert_eq!(got, want);
            assert!(q.is_empty() && q.peek().is_none());
        }
    }

    #[test]
    fn late_events_come_after_the_heap_in_time_order() {
        let mut q = EventQueue::default();
        let late = [KEY_TIME_LIMIT + 5, KEY_TIME_LIMIT, u64::MAX, KEY_TIME_LIMIT + 5];
        for (n, &at) in late.iter().enumerate() {
            q.push(Event { at, what: n as u32 });
        }
        assert_eq!(q.peek().map(|e| e.at), Some(KEY_TIME_LIMIT));
        q.push(Event { at: KEY_TIME_LIMIT - 1, what: 9 });
        q.push(Event { at: 3, what: 8 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|e| key(&e)).collect();
        assert_eq!(
            order,
            [(3, 8), (KEY_TIME_LIMIT - 1, 9), (KEY_TIME_LIMIT, 1), (KEY_TIME_LIMIT + 5, 0), (KEY_TIME_LIMIT + 5, 3), (u64::MAX, 2)]
        );
        assert!(q.is_empty() && q.peek().is_none());
    }
}
