//! The weft link header: what a frame carries across a process boundary
//! besides its own wire bytes (docs/REALTIME.md).
//!
//! ```text
//!  0      2    3    4          8          12                 20                 28                 36
//! +------+----+----+----------+----------+------------------+------------------+------------------+-----------
//! | 'WF' | v3 |dir | fabric   | link id  | sequence (u64)   | due (u64, ns)    | sent (u64, ns)   | Ethernet
//! +------+----+----+----------+----------+------------------+------------------+------------------+ frame...
//! ```
//!
//! `dir` is 0 for frames from the link's `a` end to its `b` end, 1 for the
//! reverse; on the wire its bit 7 says the datagram ends with the loopback
//! token instead of a seal ([`super::auth::LOOPBACK_FLAG`], cleared by the
//! receiver once it has checked the token). `fabric` is a tag derived from the fabric token, so datagrams
//! from another fabric (or anyone else) are dropped. `sequence` counts
//! frames per link direction from 0, so the receiver tells transport loss
//! and reordering apart from drops the emulated fabric makes. `due` is the
//! fabric time (see [`crate::clock`]) at which the frame's last bit reaches
//! the far end: departure + serialization + propagation delay, computed by
//! the sending port. `sent` is the fabric time the sender handed the
//! datagram to the network, so the receiver measures the underlay's
//! one-way latency (arrival − sent) of every frame. All fields big-endian. The view checks its length
//! before any access (smoltcp style); nothing here panics on bad input.
//! On the wire every datagram ends with the tag (or loopback token) of [`super::auth`] (not part
//! of what [`LinkHeader::parse`] sees: the receiver strips it once it has
//! checked it). Version 3: version 2 had no `sent`, version 1 no tag.

/// Length of the header.
pub const HEADER_LEN: usize = 36;
/// Magic bytes "WF".
pub const MAGIC: u16 = 0x5746;
/// Version.
pub const VERSION: u8 = 3;

/// Why a datagram is not a weft link frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Shorter than the header plus an Ethernet header.
    #[error("datagram of {0} bytes is too short")]
    Truncated(usize),
    /// Not "WF" v3.
    #[error("not a weft v3 link frame")]
    BadMagic,
}

/// The decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkHeader {
    /// Direction (0: a→b, 1: b→a).
    pub dir: u8,
    /// Fabric tag.
    pub fabric: u32,
    /// Link id.
    pub link: u32,
    /// Sequence number in this link direction.
    pub seq: u64,
    /// Fabric time the frame is due at the far end.
    pub due: u64,
    /// Fabric time the sender handed it to the network.
    pub sent: u64,
}

impl LinkHeader {
    /// Parses a datagram; returns the header and the frame.
    pub fn parse(buf: &[u8]) -> Result<(LinkHeader, &[u8]), HeaderError> {
        if buf.len() < HEADER_LEN + 14 {
            return Err(HeaderError::Truncated(buf.len()));
        }
        let u32_at = |o: usize| u32::from_be_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
        let u64_at = |o: usize| (u32_at(o) as u64) << 32 | u32_at(o + 4) as u64;
        if u16::from_be_bytes([buf[0], buf[1]]) != MAGIC || buf[2] != VERSION {
            return Err(HeaderError::BadMagic);
        }
        let h = LinkHeader { dir: buf[3], fabric: u32_at(4), link: u32_at(8), seq: u64_at(12), due: u64_at(20), sent: u64_at(28) };
        Ok((h, &buf[HEADER_LEN..]))
    }

    /// Writes the header followed by `frame` into `out` (cleared first).
    pub fn emit(&self, frame: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(HEADER_LEN + frame.len());
        out.extend_from_slice(&MAGIC.to_be_bytes());
        out.push(VERSION);
        out.push(self.dir);
        out.extend_from_slice(&self.fabric.to_be_bytes());
        out.extend_from_slice(&self.link.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.due.to_be_bytes());
        out.extend_from_slice(&self.sent.to_be_bytes());
        out.extend_from_slice(frame);
    }
}

/// Per link direction: what the transport (not the emulated fabric) lost or
/// reordered, from the sequence numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SequenceTracker {
    /// Highest sequence number seen + 1.
    pub next: u64,
    /// Frames received.
    pub received: u64,
    /// Frames missing (a later one arrived and they have not).
    pub lost: u64,
    /// Frames that arrived after a later one.
    pub reordered: u64,
}

impl SequenceTracker {
    /// Accounts for frame `seq`. Saturating: a sender counts from 0 and
    /// never reaches `u64::MAX`, but a datagram claiming it must not
    /// overflow (fuzz finding: `seq + 1` panicked in a debug build).
    pub fn observe(&mut self, seq: u64) {
        self.received = self.received.saturating_add(1);
        if seq >= self.next {
            self.lost = self.lost.saturating_add(seq - self.next);
            self.next = seq.saturating_add(1);
        } else {
            self.reordered += 1;
            self.lost = self.lost.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_number_at_the_end_of_its_range_does_not_overflow() {
        let mut t = SequenceTracker::default();
        t.observe(u64::MAX);
        t.observe(u64::MAX);
        t.observe(3);
        assert_eq!((t.received, t.next), (3, u64::MAX));
    }

    #[test]
    fn round_trip_and_rejects() {
        let h = LinkHeader { dir: 1, fabric: 0xdead_beef, link: 7, seq: u64::MAX - 1, due: 123_456_789_012, sent: 123_456_000_000 };
        let frame = [0xaau8; 60];
        let mut buf = Vec::new();
        h.emit(&frame, &mut buf);
        assert_eq!(buf.len(), HEADER_LEN + 60);
        let (p, f) = LinkHeader::parse(&buf).unwrap();
        assert_eq!(p, h);
        assert_eq!(f, &frame[..]);
        assert_eq!(LinkHeader::parse(&buf[..30]), Err(HeaderError::Truncated(30)));
        buf[0] = 0;
        assert_eq!(LinkHeader::parse(&buf), Err(HeaderError::BadMagic));
        for n in 0..buf.len() {
            let _ = LinkHeader::parse(&buf[..n]);
        }
    }

    #[test]
    fn loss_and_reordering_are_told_apart() {
        let mut t = SequenceTracker::default();
        for s in [0, 1, 3, 2, 4, 7] {
            t.observe(s);
        }
        // 2 arrived late (reordered), 5 and 6 are missing.
        assert_eq!((t.received, t.lost, t.reordered), (6, 2, 1));
    }
}
