//! Fuzzes what the orchestrator reads that a user or another machine wrote:
//! a fabric token file (`weft up --external` identity directories), and the
//! `compare.json` and `summary.json` another machine's `weft compare` sends
//! back. Any bytes must give a value or an error, never a panic.
#![no_main]

use emu_orchestrator::config::identity::{fabric_tag, parse_token};
use emu_orchestrator::experiment::report::CompareReport;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(token) = parse_token(data) {
        assert!(token.len() >= 16);
        assert!(fabric_tag(&token) != 0);
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = fabric_tag(text);
    if let Ok(r) = CompareReport::from_json(text) {
        for run in &r.runs {
            let _ = run.wall();
        }
    }
    let _ = weft_sim::results::Summary::from_json(text);
});
