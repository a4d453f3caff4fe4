//! Authentication of link datagrams (DESIGN §7): only the processes of a
//! fabric can put frames onto its links.
//!
//! The orchestrator draws a 256-bit [`LinkSecret`] per fabric and hands it
//! to every emu-node in its plan, over the TLS control channel (so it never
//! crosses the network in the clear, and the fabric token that emu-nodes
//! get on their command line or environment is not enough to forge a
//! frame). Each datagram ends with a [`TAG_LEN`]-byte tag: HMAC-SHA-256
//! (RFC 2104, `ring`) over the link header and the frame, truncated to 128
//! bits (RFC 2104 §5 allows truncation to at least half the output). The
//! receiver checks the tag before it looks at anything else in the header,
//! then the sequence number against a [`ReplayWindow`] of its link
//! direction, so a datagram captured on the network and sent again is
//! refused as a replay.
//!
//! Invariants: a datagram whose tag does not verify is never delivered and
//! never changes any state but a counter; each sequence number of a link
//! direction is delivered at most once; the comparison of tags takes the
//! same time whatever the bytes.

use serde::{Deserialize, Serialize};

/// Bytes of the tag at the end of every datagram.
pub const TAG_LEN: usize = 16;

/// The per-fabric secret the link keys derive from. Its `Debug` does not
/// print it.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LinkSecret(pub [u8; 32]);

impl std::fmt::Debug for LinkSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkSecret(..)")
    }
}

impl LinkSecret {
    /// A fresh secret from the operating system's generator.
    pub fn generate() -> Result<Self, ring::error::Unspecified> {
        let mut s = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut s)?;
        Ok(LinkSecret(s))
    }
}

/// The key that signs and checks datagrams.
#[derive(Clone, Debug)]
pub struct LinkKey(ring::hmac::Key);

impl LinkKey {
    /// The key of `secret`.
    pub fn new(secret: &LinkSecret) -> Self {
        LinkKey(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret.0))
    }

    fn tag(&self, body: &[u8]) -> [u8; TAG_LEN] {
        let full = ring::hmac::sign(&self.0, body);
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&full.as_ref()[..TAG_LEN]);
        t
    }

    /// Appends the tag of everything `datagram` holds.
    pub fn sign(&self, datagram: &mut Vec<u8>) {
        let t = self.tag(datagram);
        datagram.extend_from_slice(&t);
    }

    /// The datagram without its tag, if the tag is right.
    pub fn verify<'a>(&self, datagram: &'a [u8]) -> Option<&'a [u8]> {
        let split = datagram.len().checked_sub(TAG_LEN)?;
        let (body, tag) = datagram.split_at(split);
        let want = self.tag(body);
        // Constant time: fold every byte's difference.
        let diff = want.iter().zip(tag).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        (diff == 0).then_some(body)
    }
}

/// Which sequence numbers of one link direction were delivered, as IPsec's
/// anti-replay window (RFC 4303 §3.4.3): the highest seen and a bitmap of
/// the [`ReplayWindow::SIZE`] below it. A number below the window is
/// refused too (it is older than any reordering the transport does).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    /// Highest sequence number accepted.
    top: Option<u64>,
    /// Bit i: `top - i` was accepted.
    seen: u128,
}

impl ReplayWindow {
    /// Sequence numbers tracked, the highest included.
    pub const SIZE: u64 = 128;

    /// Whether `seq` is new (and from now on seen).
    pub fn accept(&mut self, seq: u64) -> bool {
        match self.top {
            Some(top) if seq <= top => {
                let age = top - seq;
                if age >= Self::SIZE || self.seen & (1 << age) != 0 {
                    return false;
                }
                self.seen |= 1 << age;
                true
            }
            _ => {
                let shift = self.top.map_or(Self::SIZE, |top| seq - top);
                self.seen = if shift >= Self::SIZE { 0 } else { self.seen << shift };
                self.seen |= 1;
                self.top = Some(seq);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> LinkKey {
        LinkKey::new(&LinkSecret([b; 32]))
    }

    #[test]
    fn a_signed_datagram_verifies_and_any_change_or_another_key_does_not() {
        let mut d = b"header and frame".to_vec();
        key(1).sign(&mut d);
        assert_eq!(d.len(), 16 + TAG_LEN);
        assert_eq!(key(1).verify(&d), Some(&b"header and frame"[..]));
        assert_eq!(key(2).verify(&d), None, "another fabric's key");
        for i in 0..d.len() {
            let mut x = d.clone();
            x[i] ^= 1;
            assert_eq!(key(1).verify(&x), None, "bit flipped at {i}");
        }
        assert_eq!(key(1).verify(&d[..TAG_LEN - 1]), None);
        assert_eq!(key(1).verify(&d[..d.len() - 1]), None);
    }

    #[test]
    fn the_replay_window_takes_each_number_once_in_any_order_within_it() {
        let mut w = ReplayWindow::default();
        assert!(w.accept(0));
        assert!(!w.accept(0), "replay of the first");
        assert!(w.accept(5));
        assert!(w.accept(3), "reordered, inside the window");
        assert!(!w.accept(3));
        assert!(!w.accept(5));
        assert!(w.accept(4) && w.accept(1) && w.accept(2));
        assert!(w.accept(1000));
        assert!(!w.accept(1000 - ReplayWindow::SIZE), "older than the window");
        assert!(!w.accept(0));
        assert!(w.accept(1000 - ReplayWindow::SIZE + 1));
        assert!(w.accept(u64::MAX) && !w.accept(u64::MAX));
    }

    #[test]
    fn the_secret_is_not_printed() {
        assert_eq!(format!("{:?}", LinkSecret([7; 32])), "LinkSecret(..)");
        assert_ne!(LinkSecret::generate().unwrap(), LinkSecret::generate().unwrap());
    }
}
