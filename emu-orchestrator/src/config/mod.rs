//! What a user writes, read and checked: topology files, quantities with
//! units, `--set` parameters, machines files, the fabric token. Pure: no
//! process, socket or clock; the lowest layer of the orchestrator.

pub mod identity;
pub mod machines;
pub mod params;
pub mod topology;
/// Quantities with units (`25Gbps`, `1.5ms`, `9MB`), shared with `weft-flowgen`.
pub use emu_node::units;
