//! Seeing a fabric: the Prometheus configuration weft writes and the
//! Prometheus it starts, the check that the shipped dashboards query what
//! the emu-nodes export, and the SVG plots of a run's results.

pub mod dashboards;
pub mod plots;
pub mod prometheus;
