//! The metrics of a live process (docs/RESULTS.md): what the node actors fold on
//! request (with `weft-metrics`), plus the process's transport and TAP
//! counters, served over HTTP.
//!
//! - [`source`]: gathering a live process's families from its actors;
//! - [`server`]: the `/metrics` HTTP endpoint (axum).

pub mod server;
pub mod source;
