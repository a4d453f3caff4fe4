//! Fuzzes the topology file parser (TOML, docs/ARCHITECTURE.md#topologies): any text must give
//! a topology or an error with a file/line, never a panic or a hang. A
//! topology that parses is also summarised, as `weft validate` does.
//!
//! Generated fabrics of more than [`MAX_FUZZED_NODES`] nodes are skipped:
//! building one takes seconds under ASan (routes grow with switches ×
//! leaves), which is slow, not wrong, and would stop a run at its
//! per-input time limit. Their limits (k <= 64, 65 536 nodes) have unit
//! tests (`topology::tests::other_errors_are_specific`).
#![no_main]

use emu_orchestrator::config::topology::Topology;
use libfuzzer_sys::fuzz_target;

/// The largest generated fabric the target builds (k = 24: 4 176 nodes).
const MAX_FUZZED_NODES: f64 = 5_000.0;

/// Whether `text` asks a generator for more than [`MAX_FUZZED_NODES`]
/// nodes (an estimate from its parameters; out-of-range values count as
/// large only if they are within what the generators accept).
fn too_large(text: &str) -> bool {
    let Ok(t) = text.parse::<toml::Table>() else { return false };
    let Some(g) = t.get("generator").and_then(|g| g.as_table()) else { return false };
    let int = |key: &str| g.get(key).and_then(|v| v.as_integer()).unwrap_or(0).clamp(0, 1_000) as f64;
    let over = g.get("oversubscription").and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64))).unwrap_or(1.0);
    let over = if over.is_finite() { over.clamp(0.0, 1_000.0) } else { 1.0 };
    let k = int("k");
    let nodes = 1.25 * k * k + k * k * k / 4.0 * over + int("leaves") * (int("hosts_per_leaf") + 1.0) + int("spines");
    nodes > MAX_FUZZED_NODES
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if too_large(text) {
        return;
    }
    if let Ok(t) = Topology::parse("fuzz.toml", text) {
        let _ = t.describe();
    }
});
