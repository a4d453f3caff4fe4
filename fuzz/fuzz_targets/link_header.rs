//! Fuzzes the link header of inter-process datagrams (what any host on the
//! network can send to a link socket), their authentication tag check and
//! the sequence accounting and replay window fed by them: nothing may
//! panic, a parsed header re-emits to the same bytes, no datagram the
//! fuzzer makes carries a valid tag or loopback token.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_rt::link::auth::{LinkKey, LinkSecret, ReplayWindow};
use weft_rt::link::header::{LinkHeader, SequenceTracker, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok((h, frame)) = LinkHeader::parse(data) {
        let mut out = Vec::new();
        h.emit(frame, &mut out);
        assert_eq!(&out[..], &data[..HEADER_LEN + frame.len()]);
    }
    let key = LinkKey::new(&LinkSecret([0x42; 32]));
    assert!(key.open(&mut data.to_vec()).is_none(), "the fuzzer forged a seal");
    // Sequence numbers as a hostile sender would choose them.
    let mut t = SequenceTracker::default();
    let mut w = ReplayWindow::default();
    for c in data.chunks_exact(8) {
        let seq = u64::from_be_bytes(c.try_into().unwrap_or_default());
        t.observe(seq);
        let first = w.accept(seq);
        assert!(!(first && w.accept(seq)), "a sequence number accepted twice");
    }
    assert!(t.received as usize == data.len() / 8);
});
