//! Fuzzes the link header of inter-process datagrams (what any host on the
//! network can send to a link socket) and the transport sequence
//! accounting fed by it: nothing may panic, a parsed header re-emits to
//! the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_rt::link::header::{LinkHeader, SequenceTracker, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok((h, frame)) = LinkHeader::parse(data) {
        let mut out = Vec::new();
        h.emit(frame, &mut out);
        assert_eq!(&out[..], &data[..HEADER_LEN + frame.len()]);
    }
    // Sequence numbers as a hostile sender would choose them.
    let mut t = SequenceTracker::default();
    for c in data.chunks_exact(8) {
        t.observe(u64::from_be_bytes(c.try_into().unwrap_or_default()));
    }
    assert!(t.received as usize == data.len() / 8);
});
