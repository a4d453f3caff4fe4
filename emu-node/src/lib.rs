//! # emu-node — the data plane of weft
//!
//! Everything that touches a frame lives here, as **sans-IO state machines**
//! in the style of `quinn-proto` and `smoltcp`: no module below reads a
//! socket, a clock or a global random number generator. Time is passed in
//! (`now`, integer nanoseconds, [`time::Nanos`]), randomness comes from one
//! seeded RNG per node, and outputs are written into buffers the caller owns.
//! A driver — the virtual-time [`engine`] here, a real-time actor driver
//! later — only moves frames and time.
//!
//! Modules, one concept each:
//! - [`wire`] (the `weft-wire` crate, with [`time`] and [`ids`]): zero-copy
//!   typed views of the headers weft forwards;
//! - [`tofino`] (the `weft-tofino` crate): the Intel Tofino model (pipeline
//!   budgets, registers, traffic manager, PFC, the L3 table);
//! - [`schemes`] (the `weft-schemes` crate): load-balancing schemes, each a
//!   Tofino [`tofino::Program`];
//! - [`switch`]: a sans-IO switch = model + loaded program + ports;
//! - [`host`]: synthetic endpoints;
//! - [`fabric`]: the resolved description of a fabric (nodes, ports, links,
//!   addresses) that drivers instantiate;
//! - [`serializer`]: the line-rate serializer of a port;
//! - [`traffic`]: traffic patterns (which host sends what to whom);
//! - [`workload`]: flow-size CDFs and Poisson arrivals;
//! - [`fct`]: the analytical base FCT of a flow alone on its path;
//! - [`node`]: the node factory both drivers share ([`node::Node`], the
//!   order of calls of the sans-IO state machines);
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

pub use weft_schemes as schemes;
pub use weft_tofino as tofino;
pub use weft_wire as wire;
pub use weft_wire::{ids, time};

pub mod actor;
pub mod clock;
pub mod control;
pub mod engine;
pub mod fabric;
pub mod fct;
pub mod host;
pub mod lag;
pub mod link;
pub mod metrics;
pub mod node;
pub mod results;
pub mod runtime;
pub mod serializer;
pub mod switch;
pub mod tap;
pub mod tls;
pub mod traffic;
pub mod workload;
