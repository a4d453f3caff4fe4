//! # emu-node — weft's drivers, and the crates below them under one roof
//!
//! The sans-IO layers are their own crates (wire → chip model → schemes →
//! core, DESIGN §3), re-exported here under the paths they always had. This
//! crate holds what drives them: the virtual-time engine and its results,
//! traffic and workloads, and the real-time driver (actors, links, TAP
//! hosts, TLS, the control channel, metrics). The state machines never read
//! a clock, a socket or a global random number generator; the drivers move
//! frames and time (the order of calls: [`node`]).
//!
//! Re-exported crates:
//! - [`wire`] (`weft-wire`, with [`time`] and [`ids`]): zero-copy typed
//!   views of the headers weft forwards;
//! - [`tofino`] (`weft-tofino`): the Intel Tofino model (pipeline budgets,
//!   registers, traffic manager, PFC, the L3 table);
//! - [`schemes`] (`weft-schemes`): load-balancing schemes, each a Tofino
//!   [`tofino::Program`];
//! - [`node`], [`switch`], [`host`], [`transmit`], [`fabric`],
//!   [`serializer`], [`fct`] (`weft-core`): the sans-IO switch and hosts,
//!   the fabric description, FCT baselines and the node factory.
//!
//! Modules of this crate, one concept each:
//! - [`traffic`]: traffic patterns (which host sends what to whom);
//! - [`workload`]: flow-size CDFs and Poisson arrivals;
//! - [`engine`]: the virtual-time discrete-event driver;
//! - [`results`]: the `summary.json` document;
//! - [`clock`]: the fabric clock and the per-process deadline scheduler
//!   (real time);
//! - [`lag`]: how late an actor handles its deadlines;
//! - [`actor`]: the real-time driver's node actor (ractor);
//! - [`metrics`]: Prometheus metrics (catalogue, scrape-time folding,
//!   OpenMetrics for virtual-time runs, the `/metrics` endpoint);
//! - [`link`]: link transports (in-process, TAP, UDP, QUIC) and the link
//!   header;
//! - [`tap`]: real Linux hosts in network namespaces behind TAP devices;
//! - [`tls`]: the fabric certificate and pinning;
//! - [`control`]: the orchestrator ↔ emu-node control protocol;
//! - [`runtime`]: assembles actors, links and hosts of one process.
#![deny(missing_docs)]

pub use weft_core::{fabric, fct, host, node, serializer, switch, transmit};
pub use weft_schemes as schemes;
pub use weft_tofino as tofino;
pub use weft_wire as wire;
pub use weft_wire::{ids, time};

pub mod actor;
pub mod clock;
pub mod control;
pub mod engine;
pub mod lag;
pub mod link;
pub mod metrics;
pub mod results;
pub mod runtime;
pub mod tap;
pub mod tls;
pub mod traffic;
pub mod workload;
