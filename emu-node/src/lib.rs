//! # emu-node — the emu-node binary, and a facade over weft's crates
//!
//! The layers are their own crates (docs/ARCHITECTURE.md: wire → chip model → schemes
//! → core → drivers → orchestrator); this crate re-exports them under the
//! paths the orchestrator, the benchmarks and the end-to-end tests use, and
//! holds the `emu-node` binary (one process of a real-time fabric, driven
//! by the orchestrator over the control channel). It adds no code of its
//! own.
//!
//! - [`wire`] (`weft-wire`, with [`time`] and [`ids`]): zero-copy typed
//!   views of the headers weft forwards;
//! - [`tofino`] (`weft-tofino`): the Intel Tofino model (pipeline budgets,
//!   registers, traffic manager, PFC, the L3 table);
//! - [`schemes`] (`weft-schemes`): load-balancing schemes, each a Tofino
//!   [`tofino::Program`];
//! - [`node`], [`switch`], [`host`], [`transmit`], [`fabric`],
//!   [`serializer`], [`fct`] (`weft-core`): the sans-IO switch and hosts,
//!   the fabric description, FCT baselines and the node factory (the order
//!   of calls: [`node`]);
//! - [`metrics`] (`weft-metrics`, plus the drivers' metric modules) and
//!   [`lag`];
//! - [`engine`], [`results`], [`traffic`], [`workload`] (`weft-sim`): the
//!   virtual-time driver;
//! - [`actor`], [`clock`], [`control`], [`inbox`], [`link`], [`runtime`],
//!   [`tap`], [`tls`] (`weft-rt`): the real-time driver.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use weft_core::{fabric, fct, host, node, serializer, switch, transmit};
pub use weft_metrics::lag;
pub use weft_rt::{actor, clock, control, inbox, link, runtime, tap, tls, vm};
pub use weft_schemes as schemes;
pub use weft_sim::{engine, results, traffic, watchdog, workload};
pub use weft_tofino as tofino;
pub use weft_wire as wire;
pub use weft_wire::{ids, time, units};

/// Metrics: the catalogue, families and scrape-time folding
/// (`weft-metrics`), a virtual-time run's OpenMetrics samples (`weft-sim`)
/// and a live process's gathering and `/metrics` endpoint (`weft-rt`).
pub mod metrics {
    pub use weft_metrics::{catalogue, collect, families, FamilySet, NodeMetrics};
    pub use weft_rt::metrics::{server, source};
    pub use weft_sim::openmetrics;
}
