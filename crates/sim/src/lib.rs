//! # weft-sim — the virtual-time driver
//!
//! Runs a fabric of sans-IO nodes (`weft-core`) in virtual time, as a
//! discrete-event simulation: deterministic for a seed, as fast as the CPU
//! allows, the same switch and host code as the real-time driver (docs/ARCHITECTURE.md). Design choice: events are ordered by (time, source, generation), a
//! key that depends only on the fabric, so that equal-time events run in a
//! fixed order and a run's `summary.json` and `flows.csv` are
//! byte-identical for a seed, on one thread or on several. It depends
//! on the sans-IO crates and `weft-metrics` and must never depend on the
//! real-time driver (`weft-rt`), an async runtime, a socket or the wall
//! clock.
//!
//! - [`traffic`]: traffic patterns (which host sends what to whom);
//! - [`workload`]: flow-size CDFs (shipped under `workloads/`), Poisson
//!   arrivals, flow files;
//! - [`engine`]: the discrete-event engine;
//! - [`results`]: the `summary.json` document of a run (docs/ARCHITECTURE.md#input-from-outside);
//! - [`openmetrics`]: samples of every node every period of fabric time,
//!   written as one OpenMetrics file for Prometheus' backfill;
//! - [`watchdog`]: stops a run whose flows have stopped moving, with a
//!   report of what holds the fabric.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod engine;
pub mod openmetrics;
pub mod results;
pub mod traffic;
pub mod watchdog;
pub mod workload;
