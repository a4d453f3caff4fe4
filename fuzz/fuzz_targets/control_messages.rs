//! Fuzzes the control-channel codec (docs/REALTIME.md): message bodies from an
//! emu-node or an orchestrator (a TLS peer with the fabric's certificate,
//! or a replayed/garbled message) must decode or fail, never panic or
//! allocate without bound; what decodes re-encodes to a message that
//! decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_rt::control::{decode, encode, ToNode, ToOrchestrator};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode::<ToNode>(data) {
        let again = encode(&m).expect("a decoded message encodes");
        let back: ToNode = decode(&again[4..]).expect("re-encoded message decodes");
        assert_eq!(format!("{back:?}"), format!("{m:?}"));
    }
    if let Ok(m) = decode::<ToOrchestrator>(data) {
        let again = encode(&m).expect("a decoded message encodes");
        let back: ToOrchestrator = decode(&again[4..]).expect("re-encoded message decodes");
        assert_eq!(format!("{back:?}"), format!("{m:?}"));
    }
});
