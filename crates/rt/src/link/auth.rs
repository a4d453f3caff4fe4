//! Authentication of link datagrams (docs/REALTIME.md): only the processes of a
//! fabric can put frames onto its links.
//!
//! The orchestrator draws a 256-bit [`LinkSecret`] per fabric and hands it
//! to every emu-node in its plan, over the TLS control channel (so it never
//! crosses the network in the clear, and the fabric token that emu-nodes
//! get on their command line or environment is not enough to forge a
//! frame). Each datagram is sealed with AES-256-GCM (`ring`): the link
//! header travels in the clear as associated data, the frame encrypted, and
//! a [`TAG_LEN`]-byte tag ends the datagram. The 96-bit nonce is the
//! datagram's own (link id, direction, sequence number): a link direction
//! has one sender, whose sequence numbers never repeat for the life of the
//! fabric (a new fabric draws a new secret), so a nonce is never used twice
//! with a key. Chosen by measurement (BENCHMARKS.md, "Link datagram
//! authentication"): HMAC-SHA-256 over header and frame cost 1.4 µs per
//! 1500-byte frame on each side and a third of the 3-process TCP
//! throughput; GMAC over the same bytes as associated data still 0.87 µs
//! (ring hashes associated data a block at a time); sealing the frame runs
//! ring's stitched AES-GCM code and costs least, and links get
//! confidentiality for free (captures are taken at the ports, in clear).
//! The receiver opens the datagram before it trusts anything in the header
//! beyond the nonce, then checks the sequence number against a
//! [`ReplayWindow`] of its link direction, so a datagram captured on the
//! network and sent again is refused as a replay.
//!
//!
//! Between processes of one machine the seal buys nothing and costs most of
//! a link's CPU (BENCHMARKS.md, "Loopback links without the seal"): a
//! datagram sent to a loopback address never leaves the machine, and only
//! root can read the loopback device, so no one who lacks the secret can
//! see it or change it in flight. Such a datagram ([`Protection::Loopback`])
//! ends with a [`TAG_LEN`]-byte loopback token instead of the tag (an HMAC
//! of the secret, so the token does not reveal the key, and is as hard to
//! guess as a tag), its frame in clear, and bit
//! [`LOOPBACK_FLAG`] of its direction byte set. A sender uses it only
//! towards a loopback address, so the token never crosses a network; a
//! receiver accepts either kind and checks each as its flag says.
//!
//! Invariants: a datagram whose tag or token does not verify is never
//! delivered and never changes any state but a counter; each sequence
//! number of a link direction is delivered at most once; the comparison of
//! tags and tokens takes the same time whatever the bytes; the loopback
//! token is only ever sent to a loopback address.

use super::header::HEADER_LEN;
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

/// Bit of the header's direction byte that marks a datagram ending with
/// the loopback token rather than a seal's tag.
pub const LOOPBACK_FLAG: u8 = 0x80;

/// How a datagram is protected on its way to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// AES-256-GCM: frame encrypted, header and frame authenticated.
    Sealed,
    /// The loopback token appended, frame in clear: only towards a
    /// loopback address (see the module doc).
    Loopback,
}

impl Protection {
    /// What a datagram to `peer` needs: [`Protection::Loopback`] for a
    /// loopback address (IPv4-mapped ones included), else sealed.
    pub fn towards(peer: std::net::IpAddr) -> Self {
        if peer.to_canonical().is_loopback() {
            Protection::Loopback
        } else {
            Protection::Sealed
        }
    }
}

/// The key that signs and checks datagrams, and the loopback token derived
/// from the same secret.
#[derive(Clone)]
pub struct LinkKey(std::sync::Arc<Keys>);

struct Keys {
    aead: ring::aead::LessSafeKey,
    loopback_token: [u8; TAG_LEN],
}

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

/// The nonce of a datagram: link id, direction, the low 56 bits of the
/// sequence number (unique per key, see the module doc).
fn nonce(link: u32, dir: u8, seq: u64) -> ring::aead::Nonce {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&link.to_be_bytes());
    n[4..].copy_from_slice(&((u64::from(dir) << 56) | (seq & ((1 << 56) - 1))).to_be_bytes());
    ring::aead::Nonce::assume_unique_for_key(n)
}

/// Link id, direction and sequence number of a datagram's header (the
/// nonce's parts), if it is long enough to have one.
fn nonce_of(datagram: &[u8]) -> Option<ring::aead::Nonce> {
    let h = datagram.get(..HEADER_LEN)?;
    let link = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
    let seq = u64::from_be_bytes([h[12], h[13], h[14], h[15], h[16], h[17], h[18], h[19]]);
    Some(nonce(link, h[3], seq))
}

impl LinkKey {
    /// The key of `secret`.
    pub fn new(secret: &LinkSecret) -> Self {
        // A 32-byte key is what AES-256-GCM takes: this cannot fail.
        let unbound = ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, &secret.0)
            .unwrap_or_else(|_| unreachable!("AES-256-GCM takes a 32-byte key"));
        let mac = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret.0), b"weft link loopback token");
        let mut token = [0u8; TAG_LEN];
        token.copy_from_slice(&mac.as_ref()[..TAG_LEN]);
        LinkKey(std::sync::Arc::new(Keys { aead: ring::aead::LessSafeKey::new(unbound), loopback_token: token }))
    }

    /// Protects a datagram (a link header and a frame) as `how` says: seals
    /// it, or marks it and appends the loopback token. A datagram without a
    /// whole header is left as it is (a receiver refuses it).
    pub fn protect(&self, datagram: &mut Vec<u8>, how: Protection) {
        match how {
            Protection::Sealed => self.seal(datagram),
            Protection::Loopback => {
                if datagram.len() < HEADER_LEN {
                    return;
                }
                datagram[3] |= LOOPBACK_FLAG;
                datagram.extend_from_slice(&self.0.loopback_token);
            }
        }
    }

    /// Seals a datagram (a link header and a frame): encrypts the frame in
    /// place and appends the tag. A datagram without a whole header is left
    /// as it is (a receiver refuses it).
    pub fn seal(&self, datagram: &mut Vec<u8>) {
        let Some(n) = nonce_of(datagram) else { return };
        let (header, frame) = datagram.split_at_mut(HEADER_LEN);
        // Sealing cannot fail below GCM's 64 GiB limit.
        if let Ok(tag) = self.0.aead.seal_in_place_separate_tag(n, ring::aead::Aad::from(&header[..]), frame) {
            datagram.extend_from_slice(tag.as_ref());
        }
    }

    /// Opens a datagram in place, sealed or with the loopback token as its
    /// flag says: the link header (flag cleared) and the frame in clear,
    /// the tag or token cut off; `None` if it does not verify (checked in
    /// constant time, by `ring` for a tag).
    pub fn open<'a>(&self, datagram: &'a mut [u8]) -> Option<&'a mut [u8]> {
        let len = datagram.len().checked_sub(TAG_LEN).filter(|l| *l >= HEADER_LEN)?;
        if datagram[3] & LOOPBACK_FLAG != 0 {
            if !constant_time_eq(&datagram[len..], &self.0.loopback_token) {
                return None;
            }
            datagram[3] &= !LOOPBACK_FLAG;
            return Some(&mut datagram[..len]);
        }
        let n = nonce_of(datagram)?;
        let (header, sealed) = datagram.split_at_mut(HEADER_LEN);
        self.0.aead.open_in_place(n, ring::aead::Aad::from(&header[..]), sealed).ok()?;
        Some(&mut datagram[..len])
    }
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths
/// only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && std::hint::black_box(a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y))) == 0
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
    fn a_sealed_datagram_opens_and_any_change_or_another_key_does_not() {
        let mut d = Vec::new();
        crate::link::header::LinkHeader { dir: 1, fabric: 9, link: 4, seq: 77, due: 5, sent: 0 }.emit(b"a frame of some bytes", &mut d);
        let clear = d.clone();
        key(1).seal(&mut d);
        assert_eq!(d.len(), clear.len() + TAG_LEN);
        assert_eq!(d[..HEADER_LEN], clear[..HEADER_LEN], "the header travels in clear");
        assert_ne!(d[HEADER_LEN..clear.len()], clear[HEADER_LEN..], "the frame does not");
        assert_eq!(key(1).open(&mut d.clone()).map(|b| b.to_vec()), Some(clear.clone()));
        assert_eq!(key(2).open(&mut d.clone()), None, "another fabric's key");
        for i in 0..d.len() {
            let mut x = d.clone();
            x[i] ^= 1;
            assert_eq!(key(1).open(&mut x), None, "bit flipped at {i}");
        }
        assert_eq!(key(1).open(&mut d[..TAG_LEN - 1].to_vec()), None);
        assert_eq!(key(1).open(&mut d[..d.len() - 1].to_vec()), None);
        let mut short = b"no header".to_vec();
        key(1).seal(&mut short);
        assert_eq!(short, b"no header", "nothing to seal without a header");
    }

    #[test]
    fn a_loopback_datagram_opens_with_its_token_only() {
        let mut d = Vec::new();
        crate::link::header::LinkHeader { dir: 1, fabric: 9, link: 4, seq: 77, due: 5, sent: 0 }.emit(b"a frame of some bytes", &mut d);
        let clear = d.clone();
        key(1).protect(&mut d, Protection::Loopback);
        assert_eq!(d.len(), clear.len() + TAG_LEN);
        assert_eq!(d[3], 1 | LOOPBACK_FLAG, "the flag is set on the direction byte");
        assert_eq!(d[HEADER_LEN..clear.len()], clear[HEADER_LEN..], "the frame travels in clear");
        assert_eq!(key(1).open(&mut d.clone()).map(|b| b.to_vec()), Some(clear.clone()), "the flag is cleared again");
        assert_eq!(key(2).open(&mut d.clone()), None, "another fabric's token");
        for i in clear.len()..d.len() {
            let mut x = d.clone();
            x[i] ^= 1;
            assert_eq!(key(1).open(&mut x), None, "token bit flipped at {i}");
        }
        let mut unflagged = d.clone();
        unflagged[3] &= !LOOPBACK_FLAG;
        assert_eq!(key(1).open(&mut unflagged), None, "a token is not a seal's tag");
        let mut sealed = clear.clone();
        key(1).protect(&mut sealed, Protection::Sealed);
        sealed[3] |= LOOPBACK_FLAG;
        assert_eq!(key(1).open(&mut sealed), None, "a seal's tag is not the token");
        assert_ne!(&d[clear.len()..], &LinkSecret([1; 32]).0[..TAG_LEN], "the token is not the secret");
        let mut short = b"no header".to_vec();
        key(1).protect(&mut short, Protection::Loopback);
        assert_eq!(short, b"no header");
    }

    #[test]
    fn only_a_loopback_peer_gets_the_token() {
        use std::net::IpAddr;
        for (ip, how) in [
            ("127.0.0.1", Protection::Loopback),
            ("127.3.2.1", Protection::Loopback),
            ("::1", Protection::Loopback),
            ("::ffff:127.0.0.1", Protection::Loopback),
            ("10.0.0.2", Protection::Sealed),
            ("192.168.1.1", Protection::Sealed),
            ("0.0.0.0", Protection::Sealed),
            ("::ffff:10.0.0.2", Protection::Sealed),
            ("fe80::1", Protection::Sealed),
        ] {
            assert_eq!(Protection::towards(ip.parse::<IpAddr>().unwrap()), how, "{ip}");
        }
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
