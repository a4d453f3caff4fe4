//! The fabric token: the shared secret every emu-node of a fabric shows
//! the orchestrator over the pinned-certificate control channel.
//!
//! Invariants: a token is at least 16 printable ASCII characters; reading
//! one from a file never panics, whatever the file holds.

/// A fresh fabric token (32 random bytes, hex).
pub fn new_token() -> String {
    use rand::Rng;
    let mut r = rand::rng();
    (0..32).map(|_| format!("{:02x}", r.random::<u8>())).collect()
}

/// A fabric token read from a file: its text without surrounding
/// whitespace, at least 16 printable ASCII characters (weft writes 64 hex
/// digits); why not otherwise.
pub fn parse_token(bytes: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?.trim();
    if let Some(c) = text.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!("the token has a character {c:?} that is not printable ASCII"));
    }
    if text.len() < 16 {
        return Err(format!("the token is too short ({} characters, at least 16)", text.len()));
    }
    Ok(text.to_string())
}

/// The fabric's tag in its link datagrams and TAP device names: the
/// token's first 8 hex digits (weft's own tokens), else a hash of it;
/// never 0.
pub fn fabric_tag(token: &str) -> u32 {
    let tag = token.get(..8).and_then(|h| u32::from_str_radix(h, 16).ok()).unwrap_or_else(|| {
        // FNV-1a: stable across builds and platforms.
        token.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
    });
    tag.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn weft_tokens_parse_and_keep_their_tag() {
        let t = new_token();
        assert_eq!(parse_token(format!("{t}\n").as_bytes()).as_deref(), Ok(t.as_str()));
        assert_eq!(fabric_tag(&t), u32::from_str_radix(&t[..8], 16).unwrap().max(1));
    }

    /// Property: no byte string is a panic, whatever characters straddle
    /// byte 8 (where the tag was once sliced) or the 16-character minimum.
    #[test]
    fn no_token_file_panics() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let pieces = ["a", "Z", "0", "é", "€", "𝄞", " ", "\n", "\u{0}", "\u{7f}", "ff", "\u{a0}"];
        for _ in 0..20_000 {
            let n = rng.random_range(0..40);
            let mut s: String = (0..n).map(|_| pieces[rng.random_range(0..pieces.len())]).collect();
            if rng.random_bool(0.1) {
                s = format!("deadbee{s}");
            }
            let _ = fabric_tag(&s);
            if let Ok(t) = parse_token(s.as_bytes()) {
                assert!(t.len() >= 16 && t.chars().all(|c| c.is_ascii_graphic()), "{t:?}");
                assert_ne!(fabric_tag(&t), 0);
            }
            let mut bytes = s.into_bytes();
            if !bytes.is_empty() {
                let i = rng.random_range(0..bytes.len());
                bytes[i] = rng.random();
            }
            let _ = parse_token(&bytes);
        }
        // The input that used to panic: a multi-byte character at byte 8.
        assert!(parse_token("1234567é9abcdefghij".as_bytes()).is_err());
        let _ = fabric_tag("1234567é9abcdefghij");
    }
}
