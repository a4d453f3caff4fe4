//! # emu-orchestrator — the library behind the `weft` command
//!
//! Layers, lowest first. A module may use the layers below it and never one
//! above it, and no two files import each other, even through others (the
//! tests in `layers.rs` read every file and fail on an upward `crate::`
//! path or an import circle):
//!
//! 1. [`config`] — what a user writes: topology files, quantities with
//!    units, `--set` parameters and their tables, machines files, the
//!    fabric token. Pure: no processes, no sockets.
//! 2. [`placement`] — which emu-node process (and machine) runs each node.
//!    Pure.
//! 3. [`observe`] — Prometheus configuration and process, the dashboards'
//!    check, SVG plots.
//! 4. [`deploy`] — artefacts others run: Kubernetes manifests, the
//!    soft-RoCE VM image.
//! 5. [`cluster`] — emu-node processes: launched here, over ssh or as
//!    external pods, authenticated, recorded in the state file, torn down.
//! 6. [`experiment`] — runs with a result: prepare, virtual time, real time
//!    on one or many processes, comparison matrices (also on other
//!    machines).
//! 7. [`live`] — `weft up`'s control server: a fabric that runs until
//!    `weft down` and answers requests meanwhile.
//!
//! Modules and not crates: every layer is small, they share one error
//! style and one dependency set, and one crate keeps the build to one
//! compilation unit; the layering is checked by a test instead of by
//! Cargo. `weft-flowgen`, which runs on hosts, is its own package and
//! builds none of this.
//!
//! The `weft` binary (`src/main.rs` and its `*_cli.rs` modules) parses
//! arguments, calls one function of a layer and prints.
#![deny(missing_docs)]

pub mod cluster;
pub mod config;
pub mod deploy;
pub mod experiment;
pub mod live;
pub mod observe;
pub mod placement;

#[cfg(test)]
mod layers;
