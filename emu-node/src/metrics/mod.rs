//! Prometheus metrics of a fabric (DESIGN §9).
//!
//! - [`catalogue`]: every metric weft exports (name, type, labels, unit,
//!   meaning);
//! - [`families`]: the metric families of one scrape, encoded as the text
//!   exposition format (with the `prometheus` crate) or as OpenMetrics with
//!   timestamps;
//! - [`collect`]: [`NodeMetrics`] folds a node's counters into families at
//!   scrape time; the data path only increments plain integers;
//! - [`openmetrics`]: a virtual-time run's samples every period of fabric
//!   time, written as one OpenMetrics file for `promtool tsdb
//!   create-blocks-from openmetrics`;
//! - [`source`]: gathering a live process's families from its actors;
//! - [`server`]: the `/metrics` HTTP endpoint of a live process.
//!
//! Nothing but [`source`] and [`server`] does I/O, and nothing here reads
//! the fabric clock: callers pass fabric time.

pub mod catalogue;
pub mod collect;
pub mod families;
pub mod openmetrics;
pub mod server;
pub mod source;

pub use collect::NodeMetrics;
pub use families::FamilySet;
