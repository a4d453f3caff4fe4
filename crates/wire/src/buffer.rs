//! Frame buffers with room for the headers a switch inserts on the way.
//!
//! A scheme's source switch inserts its own header into a host's frame
//! (ConWeave's timestamp header after the BTH, [`crate::conweave::insert_ts`])
//! and the destination switch strips it again. A buffer allocated to the
//! frame's exact length must be reallocated and copied for the insertion;
//! [`zeroed`] leaves [`INSERT_ROOM`] bytes of spare capacity after the
//! frame so the insertion ([`open_gap`]) only moves the bytes behind the
//! new header. The strip ([`close_gap`]) moves them back, so that the
//! buffer keeps its start and its room, and a [`FramePool`] takes it for
//! the next frame of the size (one that advanced the frame's start over
//! the header instead left the buffer short of the room, and every such
//! frame was built in a new allocation).
//!
//! A host that receives frames and sends others keeps the buffers it has
//! finished with in a [`FramePool`] and builds its next frames in them, so
//! a packet's buffer is allocated once and then goes round between hosts
//! instead of being freed by its receiver and allocated again by a sender
//! (on another thread, in a parallel run).
//!
//! A host's own pool gets back from its peers the kind of buffer they
//! built: the sender of a RoCE or TCP flow receives ACKs, whose short
//! buffers it must extend (writing a kilobyte of zeros, cold) for its
//! next data frame, while its receiver's pool fills with data buffers it
//! builds only ACKs in. A driver that runs many hosts on one thread can
//! instead lend them, call by call, one [`FramePool::shared`] pool: a data
//! buffer a receiver finished with then serves the next data frame of
//! whichever host sends one, an ACK's buffer the next ACK.
//!
//! A data frame of a synthetic host is headers and a zero payload: of a
//! 1 KiB RoCE frame only the first two cache lines carry anything. Writing
//! the zero payload again each time a buffer is reused was most of the
//! cost of building a frame (the stores miss: a buffer kept is as cold as
//! a new one by the time it is reused), and a check that a returned
//! buffer's payload is still zero costs more (it reads the same cold
//! lines). Where every writer of every frame a host can receive is known,
//! the driver says so with [`TailPolicy::Trust`]: the pool then takes a
//! returned buffer to be zero from byte [`ZERO_TAIL_FROM`] on and writes
//! only the bytes before it (and any bytes beyond the returned frame's
//! length). The virtual-time driver does, for weft's own hosts and
//! programs: hosts write headers only (a UDP host its 16-byte sequence
//! record right after its UDP header), programs insert, rewrite and strip
//! headers, and the largest stack of them ends well before byte 128.
//! [`TailPolicy::Check`] counts the returned frames that break the
//! promise, which is how the tests prove it for every scheme and
//! transport. A real-time driver keeps [`TailPolicy::Write`]: frames from
//! a TAP or a VM carry payloads.
//!
//! Invariant: the spare capacity is never part of the frame (`len()` is the
//! frame's length); a buffer from [`zeroed`] or [`FramePool::zeroed`] is
//! byte for byte the same frame as `BytesMut::zeroed(len)` (under
//! [`TailPolicy::Trust`], as long as every buffer given back is zero from
//! [`ZERO_TAIL_FROM`] to its length).

use bytes::BytesMut;

/// Spare capacity after a host's frame: room for the largest header a
/// scheme inserts in flight (the INT shim's 16 bytes; ConWeave's timestamp
/// header takes 4, P4TE's IPv4 option 12).
pub const INSERT_ROOM: usize = 16;

/// Under [`TailPolicy::Trust`], the offset from which a buffer given back
/// to a [`FramePool`] is taken to be zero: two cache lines, room for every
/// header stack weft builds (Ethernet, a VLAN tag, IPv4 with the P4TE
/// option, the INT shim, UDP, BTH, RETH and ConWeave's header: 106 bytes).
pub const ZERO_TAIL_FROM: usize = 128;

/// What a [`FramePool`] assumes of the buffers given back to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TailPolicy {
    /// Nothing: a reused buffer is written zero whole.
    #[default]
    Write,
    /// Every buffer given back is zero from [`ZERO_TAIL_FROM`] to its
    /// length: a reused buffer is written zero before that offset only.
    Trust,
    /// As [`TailPolicy::Write`], and each buffer given back is checked
    /// against the promise of [`TailPolicy::Trust`] (counted in
    /// [`FramePool::tail_checks`]); for tests.
    Check,
}

/// A zeroed frame buffer of `len` bytes with [`INSERT_ROOM`] bytes of spare
/// capacity.
pub fn zeroed(len: usize) -> BytesMut {
    let mut b = BytesMut::with_capacity(len + INSERT_ROOM);
    b.resize(len, 0);
    b
}

/// Opens `n` bytes at `at` in `frame` for a header inserted in flight:
/// the bytes from `at` on move back by `n`, into the buffer's spare room
/// ([`INSERT_ROOM`]) when it has it. `at` must be within the frame.
pub fn open_gap(frame: &mut BytesMut, at: usize, n: usize) {
    let len = frame.len();
    frame.resize(len + n, 0);
    frame.copy_within(at..len, at + n);
}

/// Removes the `n` bytes at `at` from `frame` (a header stripped in
/// flight): the bytes behind them move forward, so that the frame keeps
/// the start and the capacity of its buffer, and a [`FramePool`] takes it
/// back for the next frame of the size. `at + n` must be within the frame.
pub fn close_gap(frame: &mut BytesMut, at: usize, n: usize) {
    let len = frame.len();
    frame.copy_within(at + n..len, at);
    frame.truncate(len - n);
}

/// Frame buffers a host has finished with, kept for the frames it builds
/// next. Bounded: at most [`FramePool::KEPT`] buffers ([`FramePool::SHARED_KEPT`]
/// for a shared pool, or twice its hosts: [`FramePool::shared_for`]), each with capacity
/// between [`FramePool::MIN_CAPACITY`] and [`FramePool::MAX_CAPACITY`]
/// (a small buffer could not hold a data frame, a huge one would hold
/// memory a data frame does not need). A frame cut from a larger received
/// batch (a real-time link's read) keeps that batch alive while it is
/// kept; it is reused only if its own capacity holds the next frame.
#[derive(Debug)]
pub struct FramePool {
    free: Vec<BytesMut>,
    /// Buffers kept at most ([`FramePool::KEPT`], or [`FramePool::SHARED_KEPT`]).
    kept: usize,
    policy: TailPolicy,
    /// Under [`TailPolicy::Check`]: buffers checked, and of those, buffers
    /// with a byte other than zero from [`ZERO_TAIL_FROM`] on.
    checked: u64,
    broken: u64,
}

impl Default for FramePool {
    fn default() -> Self {
        FramePool { free: Vec::new(), kept: Self::KEPT, policy: TailPolicy::default(), checked: 0, broken: 0 }
    }
}

impl FramePool {
    /// Buffers a host's own pool keeps at most.
    pub const KEPT: usize = 16;
    /// Buffers a [`FramePool::shared`] pool keeps at most (the least a
    /// [`FramePool::shared_for`] pool keeps at most).
    pub const SHARED_KEPT: usize = 1024;
    /// Under [`TailPolicy::Trust`], how many of the most recent kept
    /// buffers a frame looks through for one that keeps its zero tail.
    const SEARCHED: usize = 16;
    /// Smallest capacity kept (an ACK's buffer is not worth keeping).
    pub const MIN_CAPACITY: usize = 256;
    /// Largest capacity kept (a jumbo frame's).
    pub const MAX_CAPACITY: usize = 16 * 1024;

    /// A pool for many hosts to share (one thread's, lent to each of its
    /// hosts for the length of a call), keeping up to
    /// [`FramePool::SHARED_KEPT`] buffers, under `policy`.
    pub fn shared(policy: TailPolicy) -> Self {
        FramePool { kept: Self::SHARED_KEPT, policy, ..Self::default() }
    }

    /// [`FramePool::shared`] for `hosts` hosts, keeping up to twice as many
    /// buffers as hosts if that is more: hosts that send in step (every
    /// host of a permutation a frame at the same instant, the frames
    /// delivered in step too) take and give back a burst of a frame each,
    /// and a pool smaller than the burst frees half of it to allocate it
    /// again (half the frames of fat-tree-k16's 2 048-host permutation).
    pub fn shared_for(policy: TailPolicy, hosts: usize) -> Self {
        FramePool { kept: Self::SHARED_KEPT.max(2 * hosts), ..Self::shared(policy) }
    }

    /// A zeroed frame buffer of `len` bytes with at least [`INSERT_ROOM`]
    /// bytes of spare capacity: a kept buffer if the last one kept is large
    /// enough, else a new one.
    pub fn zeroed(&mut self, len: usize) -> BytesMut {
        if self.policy == TailPolicy::Trust {
            return self.zeroed_trusting(len);
        }
        match self.free.pop() {
            Some(mut b) if b.capacity() >= len + INSERT_ROOM => {
                b.clear();
                b.resize(len, 0);
                b
            }
            _ => zeroed(len),
        }
    }

    /// [`FramePool::zeroed`] under [`TailPolicy::Trust`]. A kept buffer is
    /// zero from [`ZERO_TAIL_FROM`] to its length, so only the bytes before
    /// that and beyond its length are written; a frame shorter than the
    /// head (an ACK, a CNP) would leave that zero tail behind its length,
    /// so the buffer is chosen to keep tails for the frames that need
    /// them: the most recent kept buffer at least `len` long for a long
    /// frame, the most recent one already short for a short frame, else
    /// the most recent one (of the [`FramePool::SEARCHED`] most recent).
    fn zeroed_trusting(&mut self, len: usize) -> BytesMut {
        let fits = |b: &BytesMut| b.capacity() >= len + INSERT_ROOM;
        let from = self.free.len().saturating_sub(Self::SEARCHED);
        let recent = &self.free[from..];
        let best = if len < ZERO_TAIL_FROM {
            recent.iter().rposition(|b| b.len() <= ZERO_TAIL_FROM && fits(b))
        } else {
            recent.iter().rposition(|b| b.len() >= len && fits(b))
        }
        .map(|i| from + i);
        let taken = match best {
            Some(i) => Some(self.free.remove(i)),
            None => self.free.pop().filter(fits),
        };
        let Some(mut b) = taken else { return zeroed(len) };
        let head = len.min(ZERO_TAIL_FROM).min(b.len());
        b[..head].fill(0);
        if b.len() >= len {
            b.truncate(len);
        } else {
            b.resize(len, 0);
        }
        b
    }

    /// Swaps the kept buffers (and the bound on them) of two pools of the
    /// same policy: a driver lends its [`FramePool::shared`] pool's buffers
    /// to a host for one call and takes them back after it with a second
    /// swap. Cheaper than swapping the pools whole, which a driver does
    /// around every call of every host; the tail-check counters stay where
    /// they are (their sum over the pools is what they count).
    #[inline]
    pub fn swap_buffers(&mut self, other: &mut FramePool) {
        debug_assert_eq!(self.policy, other.policy, "pools lend buffers only under one policy");
        std::mem::swap(&mut self.free, &mut other.free);
        std::mem::swap(&mut self.kept, &mut other.kept);
    }

    /// Keeps `frame`'s buffer for a later frame (or drops it: pool full,
    /// capacity out of range).
    pub fn give(&mut self, frame: BytesMut) {
        let cap = frame.capacity();
        if self.free.len() < self.kept && (Self::MIN_CAPACITY..=Self::MAX_CAPACITY).contains(&cap) {
            if self.policy == TailPolicy::Check {
                self.checked += 1;
                self.broken += frame.get(ZERO_TAIL_FROM..).is_some_and(|t| t.iter().any(|&b| b != 0)) as u64;
            }
            self.free.push(frame);
        }
    }

    /// Sets what the pool assumes of the buffers given back from now on.
    pub fn set_policy(&mut self, policy: TailPolicy) {
        self.policy = policy;
    }

    /// What the pool assumes of the buffers given back.
    pub fn policy(&self) -> TailPolicy {
        self.policy
    }

    /// Under [`TailPolicy::Check`]: (buffers checked, buffers that were not
    /// zero from [`ZERO_TAIL_FROM`] on).
    pub fn tail_checks(&self) -> (u64, u64) {
        (self.checked, self.broken)
    }

    /// Buffers kept now.
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// Whether no buffer is kept.
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_buffer_comes_back_zeroed_with_room() {
        let mut pool = FramePool::default();
        let mut f = pool.zeroed(1058);
        f[..].fill(0xab);
        let ptr = f.as_ptr();
        pool.give(f);
        assert_eq!(pool.len(), 1);
        let g = pool.zeroed(1000);
        assert_eq!(g.as_ptr(), ptr, "the kept buffer is reused");
        assert_eq!(&g[..], &[0u8; 1000][..]);
        assert!(g.capacity() >= 1000 + INSERT_ROOM);
        assert!(pool.is_empty());
    }

    #[test]
    fn small_huge_and_surplus_buffers_are_not_kept() {
        let mut pool = FramePool::default();
        pool.give(zeroed(60));
        pool.give(BytesMut::with_capacity(FramePool::MAX_CAPACITY + 1));
        assert!(pool.is_empty());
        for _ in 0..FramePool::KEPT + 3 {
            pool.give(zeroed(1500));
        }
        assert_eq!(pool.len(), FramePool::KEPT);
        // A kept buffer too small for the frame asked for is dropped.
        let mut pool = FramePool::default();
        pool.give(zeroed(300));
        let big = pool.zeroed(1500);
        assert_eq!(&big[..], &[0u8; 1500][..]);
        assert!(pool.is_empty());
    }

    #[test]
    fn a_trusted_pool_writes_only_the_head_and_gives_the_frames_of_a_new_buffer() {
        // Frames zero from ZERO_TAIL_FROM on, reused for frames of every
        // length relation: shorter, equal, longer, shorter than the head.
        for (first, next) in [(1058, 1000), (1058, 1058), (300, 1058), (1058, 60), (100, 90), (100, 200), (200, 100)] {
            let mut pool = FramePool::default();
            pool.set_policy(TailPolicy::Trust);
            let mut f = BytesMut::with_capacity(2048);
            f.resize(first, 0);
            let head = first.min(ZERO_TAIL_FROM);
            f[..head].fill(0xab);
            let ptr = f.as_ptr();
            pool.give(f);
            let g = pool.zeroed(next);
            assert_eq!(g.as_ptr(), ptr, "{first} -> {next}: the kept buffer is reused");
            assert_eq!(&g[..], &vec![0u8; next][..], "{first} -> {next}");
            assert!(g.capacity() >= next + INSERT_ROOM);
        }
    }

    #[test]
    fn a_trusted_pool_builds_short_frames_in_short_buffers_and_long_ones_in_long_ones() {
        let mut pool = FramePool::default();
        pool.set_policy(TailPolicy::Trust);
        let (data, mut ack) = (zeroed(1058), zeroed(1058));
        ack.truncate(62);
        ack.fill(0x5a);
        let (data_ptr, ack_ptr) = (data.as_ptr(), ack.as_ptr());
        // The short one is the most recent: a data frame still takes the long one ...
        pool.give(data);
        pool.give(ack);
        let d = pool.zeroed(1000);
        assert_eq!((d.as_ptr(), &d[..]), (data_ptr, &[0u8; 1000][..]));
        pool.give(d);
        // ... and an ACK the short one, though the long one is more recent.
        let a = pool.zeroed(58);
        assert_eq!((a.as_ptr(), &a[..]), (ack_ptr, &[0u8; 58][..]));
        // With only a short one kept, a long frame takes it, written zero.
        let mut pool = FramePool::default();
        pool.set_policy(TailPolicy::Trust);
        pool.give(a);
        let d = pool.zeroed(1000);
        assert_eq!((d.as_ptr(), &d[..]), (ack_ptr, &[0u8; 1000][..]));
        assert!(pool.is_empty());
    }

    #[test]
    fn a_shared_pool_keeps_more_and_looks_only_at_its_most_recent_buffers() {
        let mut pool = FramePool::shared(TailPolicy::Trust);
        assert_eq!(pool.policy(), TailPolicy::Trust);
        for _ in 0..FramePool::SHARED_KEPT + 3 {
            pool.give(zeroed(1058));
        }
        assert_eq!(pool.len(), FramePool::SHARED_KEPT);
        // For many hosts, twice as many buffers as hosts; for few, as many
        // as any shared pool.
        for (hosts, kept) in [(10, FramePool::SHARED_KEPT), (2048, 4096)] {
            let mut pool = FramePool::shared_for(TailPolicy::Trust, hosts);
            for _ in 0..kept + 3 {
                pool.give(zeroed(1058));
            }
            assert_eq!(pool.len(), kept, "{hosts} hosts");
        }
        // One short buffer deep below the most recent long ones: an ACK
        // does not search that far, so it takes the most recent buffer.
        let mut pool = FramePool::shared(TailPolicy::Trust);
        let mut ack = zeroed(1058);
        ack.truncate(62);
        let ack_ptr = ack.as_ptr();
        pool.give(ack);
        for _ in 0..FramePool::SEARCHED {
            pool.give(zeroed(1058));
        }
        let a = pool.zeroed(58);
        assert_ne!(a.as_ptr(), ack_ptr);
        assert_eq!(&a[..], &[0u8; 58][..]);
        // Within reach, it is found.
        let mut pool2 = FramePool::shared(TailPolicy::Trust);
        let mut ack = zeroed(1058);
        ack.truncate(62);
        let ack_ptr = ack.as_ptr();
        pool2.give(ack);
        for _ in 0..FramePool::SEARCHED - 1 {
            pool2.give(zeroed(1058));
        }
        let a = pool2.zeroed(58);
        assert_eq!((a.as_ptr(), &a[..]), (ack_ptr, &[0u8; 58][..]));
    }

    #[test]
    fn swapped_buffers_serve_the_borrower_and_come_back_with_what_it_gave() {
        let mut shared = FramePool::shared(TailPolicy::Trust);
        let mut own = FramePool::default();
        own.set_policy(TailPolicy::Trust);
        let kept = zeroed(1058);
        let kept_ptr = kept.as_ptr();
        shared.give(kept);
        own.swap_buffers(&mut shared);
        // The host builds in the shared buffer, and keeps as many as the
        // shared pool would.
        let f = own.zeroed(1000);
        assert_eq!((f.as_ptr(), &f[..]), (kept_ptr, &[0u8; 1000][..]));
        for _ in 0..FramePool::KEPT + 1 {
            own.give(zeroed(1058));
        }
        assert_eq!((own.len(), shared.len()), (FramePool::KEPT + 1, 0));
        own.swap_buffers(&mut shared);
        assert_eq!((own.len(), shared.len()), (0, FramePool::KEPT + 1));
        // The bounds went back with the buffers.
        for _ in 0..FramePool::KEPT + 1 {
            own.give(zeroed(1058));
        }
        assert_eq!(own.len(), FramePool::KEPT);
    }

    #[test]
    fn a_checking_pool_counts_the_buffers_with_a_payload() {
        let mut pool = FramePool::default();
        pool.set_policy(TailPolicy::Check);
        let mut headers_only = zeroed(1000);
        headers_only[..ZERO_TAIL_FROM].fill(0xff);
        pool.give(headers_only);
        let mut payload = zeroed(1000);
        payload[999] = 1;
        pool.give(payload);
        let mut first_tail_byte = zeroed(300);
        first_tail_byte[ZERO_TAIL_FROM] = 1;
        pool.give(first_tail_byte);
        // Too small to keep: not kept, so not checked.
        let mut small = zeroed(ZERO_TAIL_FROM + 2);
        small[ZERO_TAIL_FROM] = 1;
        pool.give(small);
        assert_eq!(pool.tail_checks(), (3, 2));
        // It zeroes a reused buffer whole, as the default policy does.
        let g = pool.zeroed(1000);
        assert_eq!(&g[..], &[0u8; 1000][..]);
    }

    #[test]
    fn spare_room_is_capacity_not_frame() {
        let b = zeroed(100);
        assert_eq!(&b[..], &[0u8; 100][..]);
        assert!(b.capacity() >= 100 + INSERT_ROOM);
    }
}
