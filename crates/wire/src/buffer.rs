//! Frame buffers with room for the headers a switch inserts on the way.
//!
//! A scheme's source switch inserts its own header into a host's frame
//! (ConWeave's timestamp header after the BTH, [`crate::conweave::insert_ts`])
//! and the destination switch strips it again. A buffer allocated to the
//! frame's exact length must be reallocated and copied for the insertion;
//! [`zeroed`] leaves [`INSERT_ROOM`] bytes of spare capacity after the
//! frame so the insertion only moves the bytes behind the new header.
//!
//! Invariant: the spare capacity is never part of the frame (`len()` is the
//! frame's length); a buffer from [`zeroed`] is byte for byte the same frame
//! as `BytesMut::zeroed(len)`.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_room_is_capacity_not_frame() {
        let b = zeroed(100);
        assert_eq!(&b[..], &[0u8; 100][..]);
        assert!(b.capacity() >= 100 + INSERT_ROOM);
    }
}
