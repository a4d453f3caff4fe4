//! # weft-metrics — what weft measures, and how a node's state becomes metrics
//!
//! The metric layer of docs/RESULTS.md, shared by both drivers: the virtual-time
//! engine samples it into an OpenMetrics file (`weft-sim`), the real-time
//! actors fold it on every scrape of `/metrics` (`weft-rt`). Design choice:
//! the data path of the state machines only increments plain integers;
//! everything else (sums, histograms, gauges) is computed here when a
//! collection asks, so measuring costs nothing between scrapes. It depends
//! on the sans-IO crates (`weft-core` and below) and must never depend on a
//! driver, an async runtime, a socket or a clock: callers pass fabric time.
//!
//! - [`catalogue`]: every metric weft exports (name, type, labels, unit,
//!   meaning), the source of `docs/METRICS.md`;
//! - [`families`]: the metric families of one collection, encoded as the
//!   Prometheus text format (with the `prometheus` crate) or as OpenMetrics
//!   with timestamps;
//! - [`collect`]: [`NodeMetrics`] folds a node's counters into families;
//! - [`lag`]: how late a real-time actor handles its deadlines (a
//!   fixed-bucket histogram the actors record into).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod catalogue;
pub mod collect;
pub mod families;
pub mod lag;

pub use collect::NodeMetrics;
pub use families::FamilySet;
