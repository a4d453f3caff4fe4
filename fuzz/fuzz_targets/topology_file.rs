//! Fuzzes the topology file parser (TOML, DESIGN §5): any text must give
//! a topology or an error with a file/line, never a panic or a hang. A
//! topology that parses is also summarised, as `weft validate` does.
#![no_main]

use emu_orchestrator::topology::Topology;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(t) = Topology::parse("fuzz.toml", text) {
        let _ = t.describe();
    }
});
