//! Frame buffers with room for the headers a switch inserts on the way.
//!
//! A scheme's source switch inserts its own header into a host's frame
//! (ConWeave's timestamp header after the BTH, [`crate::conweave::insert_ts`])
//! and the destination switch strips it again. A buffer allocated to the
//! frame's exact length must be reallocated and copied for the insertion;
//! [`zeroed`] leaves [`INSERT_ROOM`] bytes of spare capacity after the
//! frame so the insertion only moves the bytes behind the new header.
//!
//! A host that receives frames and sends others keeps the buffers it has
//! finished with in a [`FramePool`] and builds its next frames in them, so
//! a packet's buffer is allocated once and then goes round between hosts
//! instead of being freed by its receiver and allocated again by a sender
//! (on another thread, in a parallel run).
//!
//! Invariant: the spare capacity is never part of the frame (`len()` is the
//! frame's length); a buffer from [`zeroed`] or [`FramePool::zeroed`] is
//! byte for byte the same frame as `BytesMut::zeroed(len)`.

use bytes::BytesMut;

/// Spare capacity after a host's frame: room for the largest header a
/// scheme inserts in flight (ConWeave's 4-byte timestamp header today).
pub const INSERT_ROOM: usize = 16;

/// A zeroed frame buffer of `len` bytes with [`INSERT_ROOM`] bytes of spare
/// capacity.
pub fn zeroed(len: usize) -> BytesMut {
    let mut b = BytesMut::with_capacity(len + INSERT_ROOM);
    b.resize(len, 0);
    b
}

/// Frame buffers a host has finished with, kept for the frames it builds
/// next. Bounded: at most [`FramePool::KEPT`] buffers, each with capacity
/// between [`FramePool::MIN_CAPACITY`] and [`FramePool::MAX_CAPACITY`]
/// (a small buffer could not hold a data frame, a huge one would hold
/// memory a data frame does not need). A frame cut from a larger received
/// batch (a real-time link's read) keeps that batch alive while it is
/// kept; it is reused only if its own capacity holds the next frame.
#[derive(Debug, Default)]
pub struct FramePool {
    free: Vec<BytesMut>,
}

impl FramePool {
    /// Buffers kept at most.
    pub const KEPT: usize = 16;
    /// Smallest capacity kept (an ACK's buffer is not worth keeping).
    pub const MIN_CAPACITY: usize = 256;
    /// Largest capacity kept (a jumbo frame's).
    pub const MAX_CAPACITY: usize = 16 * 1024;

    /// A zeroed frame buffer of `len` bytes with at least [`INSERT_ROOM`]
    /// bytes of spare capacity: a kept buffer if the last one kept is large
    /// enough, else a new one.
    pub fn zeroed(&mut self, len: usize) -> BytesMut {
        match self.free.pop() {
            Some(mut b) if b.capacity() >= len + INSERT_ROOM => {
                b.clear();
                b.resize(len, 0);
                b
            }
            _ => zeroed(len),
        }
    }

    /// Keeps `frame`'s buffer for a later frame (or drops it: pool full,
    /// capacity out of range).
    pub fn give(&mut self, frame: BytesMut) {
        let cap = frame.capacity();
        if self.free.len() < Self::KEPT && (Self::MIN_CAPACITY..=Self::MAX_CAPACITY).contains(&cap) {
            self.free.push(frame);
        }
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
    fn spare_room_is_capacity_not_frame() {
        let b = zeroed(100);
        assert_eq!(&b[..], &[0u8; 100][..]);
        assert!(b.capacity() >= 100 + INSERT_ROOM);
    }
}
