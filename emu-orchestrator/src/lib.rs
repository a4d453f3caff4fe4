//! # emu-orchestrator — topologies, experiments and the `weft` command
//!
//! The library behind the `weft` binary: [`topology`] parses and validates
//! topology files into a [`emu_node::fabric::FabricSpec`]; [`experiment`]
//! runs a workload on a fabric in virtual time and collects the results;
//! [`units`] parses quantities with units. The binary (`src/main.rs`) only
//! handles arguments and printing.
#![deny(missing_docs)]

pub mod dashboards;
pub mod experiment;
pub mod k8s;
pub mod live;
pub mod machines;
pub mod params;
pub mod plots;
pub mod prometheus;
pub mod topology;
pub mod units;
pub mod vm_image;
