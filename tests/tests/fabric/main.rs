//! End-to-end tests across crates: topology file → fabric → virtual-time
//! engine with switches and hosts → summary. One binary, a module per area.

mod base_fct;
mod determinism;
mod digests;
mod failures;
mod frame_tails;
mod incast;
mod int_nexthop;
mod lbsp;
mod roce;
mod schemes;
mod stall;
mod tcp;
mod threads;

use emu_orchestrator::config::topology::Topology;
use emu_orchestrator::experiment::{self, RunOptions, RunOutcome};

/// A generated leaf-spine topology with `host_link` (a TOML inline table)
/// and `extra` TOML (switch settings, link events) appended.
pub fn leaf_spine(leaves: u32, spines: u32, hosts_per_leaf: u32, host_link: &str, extra: &str) -> String {
    format!("[generator]\nkind = \"leaf-spine\"\nleaves = {leaves}\nspines = {spines}\nhosts_per_leaf = {hosts_per_leaf}\nhost_link = {host_link}\n{extra}")
}

/// The text of a shipped topology.
pub fn shipped(name: &str) -> &'static str {
    emu_orchestrator::config::topology::SHIPPED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("no shipped topology {name}"))
}

/// A link going down at `down` and (optionally) back up at `up`.
pub fn link_down(link: &str, down: &str, up: Option<&str>) -> String {
    let mut s = format!("[[events]]\nat = \"{down}\"\nlink = \"{link}\"\naction = \"down\"\n");
    if let Some(up) = up {
        s += &format!("[[events]]\nat = \"{up}\"\nlink = \"{link}\"\naction = \"up\"\n");
    }
    s
}

/// The timer events of a run without link or node events: every event
/// that was neither a frame through a switch nor a frame to a host.
pub fn timer_events(s: &emu_node::results::Summary) -> u64 {
    let t = &s.totals;
    t.events - t.packet_hops - t.host_deliveries
}

pub fn run(topology_text: &str, opts: &RunOptions) -> RunOutcome {
    let topo = Topology::parse("test.toml", topology_text).expect("topology");
    let outcome = experiment::run(&topo, opts, &mut |_, _| {}).expect("run");
    check_invariants(opts, &outcome);
    outcome
}

/// What holds in every run of these tests, so in every lossless test and
/// every digest run:
/// - a lossless fabric (PFC on, weft's Tofino2 traffic manager) drops no
///   packet for buffer (the ns-3 buffer model follows the authors' rules,
///   which drop beyond their pool);
/// - no switch drops a recirculated packet (a program's timer): ConWeave's
///   T_resume timer keeps circling while its reorder queue holds packets;
/// - a run that ended with nothing left to do (no `--until` cut, no switch
///   restart) got every ConWeave timer pass back: none was lost, none
///   circles a queue that never drains.
pub fn check_invariants(opts: &RunOptions, outcome: &RunOutcome) {
    use emu_orchestrator::experiment::Transport;
    let s = &outcome.summary;
    let tofino_rules = opts.transport_params.get("tm.buffer").is_none_or(|b| b == "tofino");
    let lossless = opts.pfc.unwrap_or(opts.transport == Transport::RoceLossless);
    if lossless && tofino_rules {
        assert_eq!(s.network.drops_buffer, 0, "a lossless fabric dropped packets for buffer");
    }
    for w in &s.switches {
        assert_eq!(w.counters.drop_recirculation, 0, "{}: recirculated (timer) packets dropped", w.name);
        let passes = w.scheme_counters.get("conweave_timer_passes");
        if let (Some(&passes), false, 0) = (passes, outcome.truncated, s.totals.node_restarts) {
            assert_eq!(w.counters.recirculations, passes, "{}: ConWeave timer packets lost or still circling", w.name);
        }
    }
}

/// The nodes of `fabric` for an engine: what `custom` returns for a node,
/// an ECMP switch configured by `cfg` where it returns `None` (hosts must
/// be given).
pub fn nodes_with(
    fabric: &emu_node::fabric::FabricSpec,
    cfg: &emu_node::node::NodeConfig,
    mut custom: impl FnMut(emu_node::ids::NodeId, &emu_node::fabric::NodeSpec) -> Option<emu_node::node::Node>,
) -> Vec<emu_node::node::Node> {
    use emu_node::node::{switch_config, Node};
    fabric
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let id = emu_node::ids::NodeId(i as u32);
            custom(id, n).unwrap_or_else(|| {
                let sc = switch_config(fabric, id, cfg).expect("switch config");
                let ecmp = Box::new(emu_node::schemes::ecmp::Ecmp::default());
                Node::Switch(Box::new(emu_node::switch::Switch::with_program(id, n, sc, ecmp).expect("switch")))
            })
        })
        .collect()
}
