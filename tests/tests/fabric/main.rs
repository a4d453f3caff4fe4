//! End-to-end tests across crates: topology file → fabric → virtual-time
//! engine with switches and hosts → summary. One binary, a module per area.

mod base_fct;
mod determinism;
mod failures;
mod incast;
mod roce;
mod tcp;

use emu_orchestrator::experiment::{self, RunOptions, RunOutcome};
use emu_orchestrator::topology::Topology;

pub fn run(topology_text: &str, opts: &RunOptions) -> RunOutcome {
    let topo = Topology::parse("test.toml", topology_text).expect("topology");
    experiment::run(&topo, opts, &mut |_, _| {}).expect("run")
}
