//! Seeing a fabric: the Prometheus configuration weft writes and the
//! Prometheus it starts, the check that the shipped dashboards query what
//! the emu-nodes export, the SVG plots of a run's results, and the
//! faithfulness report of a real-time run.

pub mod dashboards;
pub mod faithfulness;
pub mod plots;
pub mod prometheus;
