//! Fuzzes the values users type on the command line and in topology
//! fields: rates, durations, sizes, loss probabilities (`weft link ... rate
//! 10%`, `loss 1%`, `--duration`),
//! P4TE traffic classes, and a VM guest's answers to `weft exec`.
#![no_main]

use emu_orchestrator::config::units::{parse_duration, parse_probability, parse_rate, parse_size};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = parse_rate(s);
        let _ = parse_duration(s);
        let _ = parse_size(s);
        if let Ok(ppm) = parse_probability(s) {
            assert!(ppm <= 1_000_000);
        }
        let _ = weft_schemes::p4te::parse_classes(s);
    }
    let mut out = Vec::new();
    let _ = weft_rt::vm::read_exec_answer(&mut &data[..], "7", &mut out);
});
