//! Fuzzes the machines (placement) file parser of `weft up --machines`.
#![no_main]

use emu_orchestrator::config::machines;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = machines::parse("fuzz.toml", text);
});
