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
