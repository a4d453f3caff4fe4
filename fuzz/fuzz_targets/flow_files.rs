//! Fuzzes the two flow file formats: flow-size CDFs (`size percent` rows)
//! and flow lists (the ns-3 generator's format with weft's columns).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_sim::workload::{parse_flow_list, FlowSizeCdf};

fuzz_target!(|data: &[u8]| {
    let Some((&hosts, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    if let Ok(cdf) = FlowSizeCdf::parse("fuzz.cdf", text) {
        let _ = cdf.mean();
    }
    let _ = parse_flow_list("fuzz.flows", text, hosts as usize);
});
