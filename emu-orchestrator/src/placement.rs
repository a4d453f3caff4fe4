//! Placement: which emu-node process runs each node of a fabric, and on
//! which machine each process runs.
//!
//! Automatic placement keeps every host with its ToR and, where it can,
//! whole leaves in one process, so that the links between processes (and
//! machines) are the fewest and the hosts' links never cross.
//!
//! Invariants: pure (no process, socket or file); every node gets exactly
//! one process in `0..n`.

use crate::config::machines::Machine;
use emu_node::fabric::FabricSpec;

/// Automatic placement on `n` processes: every switch on the process with
/// the least work so far, the busiest switches first, and every host with
/// its ToR. A switch's work is the sum of its ports' rates, a port to a
/// host counted twice (a host's frame also costs its TAP or VM I/O);
/// among equals the lower process and the earlier switch come first.
///
/// So the switches with hosts spread over the processes first, one each
/// while there are processes left, and the others fill the processes
/// with the least work: on `leaf-spine-2x4-rt` and 3 processes, a leaf
/// each on two and the 4 spines on the third; on `leaf-spine-8x8-rt` and
/// 8, a leaf and a spine on each (the spines, a third of the frames on
/// the fabric's paths, would saturate one process of their own).
pub fn auto_place(f: &mut FabricSpec, n: u32) {
    let n = n.max(1) as usize;
    let work = |i: usize| -> u64 {
        f.nodes[i]
            .ports
            .iter()
            .map(|p| {
                let to_host = f.nodes.get(p.peer.index()).is_some_and(|n| n.as_host().is_some());
                p.rate.bps() * if to_host { 2 } else { 1 }
            })
            .sum()
    };
    let mut switches: Vec<(u64, usize)> = (0..f.nodes.len()).filter(|&i| f.nodes[i].as_switch().is_some()).map(|i| (work(i), i)).collect();
    switches.sort_by_key(|&(w, i)| (std::cmp::Reverse(w), i));
    let mut load = vec![0u64; n];
    for (w, i) in switches {
        let p = (0..n).min_by_key(|&p| (load[p], p)).unwrap_or(0);
        load[p] += w;
        f.nodes[i].placement = p as u32;
    }
    place_hosts_with_tor(f);
}

/// The number of emu-node processes `--nodes auto` runs `f` in on a
/// machine with `cores` cores: one fewer than the cores, one per switch
/// at most, at least one. Every emu-node's runtime thread keeps a core
/// busy under load, and the real hosts' kernel stacks (TCP, iperf3, the
/// TAP writes) took about a fifth of the CPU in the runs measured
/// (BENCHMARKS.md, "Sixteen cores": 8 iperf3 pairs on `leaf-spine-8x8-rt`,
/// 16 cores, 8 processes 69 % of the offered rate with every runtime
/// thread at one core and the machine 66 % busy, 16 processes 89 %; on 2
/// cores one process carries TCP fastest, "Late frames keep their
/// spacing").
#[must_use]
pub fn auto_node_count(f: &FabricSpec, cores: usize) -> u32 {
    let switches = f.nodes.iter().filter(|n| n.as_switch().is_some()).count();
    cores.saturating_sub(1).min(switches).max(1) as u32
}

pub(crate) fn place_hosts_with_tor(f: &mut FabricSpec) {
    for i in 0..f.nodes.len() {
        if f.nodes[i].as_host().is_some() {
            if let Some(tor) = f.nodes[i].ports.first().map(|p| p.peer) {
                f.nodes[i].placement = f.nodes[tor.index()].placement;
            }
        }
    }
}

/// The placement of `f` over `machines`: process p runs on machine p.
/// Leaves stay whole with their hosts ([`crate::placement::auto_place`]);
/// returns the links that cross machines (the cut).
pub fn place(f: &mut FabricSpec, slots: &[Machine]) -> Vec<String> {
    crate::placement::auto_place(f, slots.len() as u32);
    cut(f, slots)
}

/// The links whose ends run on different machines (`slots`: the machine of
/// each process, [`process_slots`](crate::config::machines::process_slots)).
pub fn cut(f: &FabricSpec, slots: &[Machine]) -> Vec<String> {
    let machine = |n: emu_node::ids::NodeId| slots.get(f.nodes[n.index()].placement as usize).map(|m| m.name.as_str());
    f.links.iter().filter(|l| machine(l.a.0) != machine(l.b.0)).map(|l| l.name.clone()).collect()
}

/// One line per machine: its processes and what they run (`slots`: the
/// machine of each process).
pub fn describe(f: &FabricSpec, slots: &[Machine]) -> Vec<String> {
    let mut lines: Vec<(String, Vec<String>)> = Vec::new();
    for (p, m) in slots.iter().enumerate() {
        let on: Vec<&emu_node::fabric::NodeSpec> = f.nodes.iter().filter(|n| n.placement == p as u32).collect();
        let switches: Vec<&str> = on.iter().filter(|n| n.as_switch().is_some()).map(|n| n.name.as_str()).collect();
        let hosts = on.iter().filter(|n| n.as_host().is_some()).count();
        let part = format!("emu-node {p}: {} and {hosts} hosts", switches.join(" "));
        match lines.iter_mut().find(|(n, _)| *n == m.name) {
            Some((_, v)) => v.push(part),
            None => lines.push((m.name.clone(), vec![part])),
        }
    }
    lines
        .into_iter()
        .map(|(name, parts)| {
            let m = slots.iter().find(|m| m.name == name).map_or((String::new(), String::new()), |m| (m.ssh.clone(), m.bind.to_string()));
            format!("{name} ({}, links on {}): {}", m.0, m.1, parts.join("; "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::machines::{parse, process_slots, THREE};

    #[test]
    fn placement_over_three_machines_keeps_leaves_whole_and_reports_the_cut() {
        let topo = crate::config::topology::Topology::load("leaf-spine-2x4-rt").unwrap();
        let mut f = topo.fabric;
        let m = parse("t", THREE).unwrap();
        let cut = place(&mut f, &m);
        // Two leaves on m1 and m2 with their hosts, the spines on m3: the
        // 8 leaf-spine links cross machines, no host link does.
        assert_eq!(cut.len(), 8, "{cut:?}");
        assert!(cut.iter().all(|l| l.contains("spine")));
        let lines = describe(&f, &m);
        assert!(lines[0].starts_with("m1 (10.77.0.1, links on 10.77.0.1): emu-node 0: leaf0 and 8 hosts"), "{lines:?}");
        assert!(lines[2].contains("emu-node 2: spine0 spine1 spine2 spine3 and 0 hosts"), "{lines:?}");
        // Capacity 2 on m3: two emu-nodes share the spines there; the cut
        // counts machines, not processes.
        let m = parse("t", &THREE.replace("emu_node = \"/opt/weft/emu-node\"", "emu_node = \"/opt/weft/emu-node\"\ncapacity = 2")).unwrap();
        let slots = process_slots(&m);
        assert_eq!(slots.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["m1", "m2", "m3", "m3"]);
        let mut f = crate::config::topology::Topology::load("leaf-spine-2x4-rt").unwrap().fabric;
        assert_eq!(place(&mut f, &slots).len(), 8);
        let lines = describe(&f, &slots);
        assert_eq!(lines.len(), 3);
        assert!(lines[2].contains("emu-node 2: spine0 spine2 and 0 hosts; emu-node 3: spine1 spine3 and 0 hosts"), "{lines:?}");
        assert!(parse("t", &THREE.replace("port = 2222", "port = 2222\ncapacity = 0"))
            .unwrap_err()
            .to_string()
            .contains("capacity must be 1 to 64"));
    }

    #[test]
    fn auto_placement_balances_the_switches_work() {
        let count = |f: &FabricSpec, p: u32, prefix: &str| {
            f.nodes.iter().filter(|n| n.placement == p && n.as_switch().is_some() && n.name.starts_with(prefix)).count()
        };
        let topo = crate::config::topology::Topology::load("leaf-spine-8x8-rt").unwrap();
        for (n, per) in [(8, 1), (4, 2), (2, 4)] {
            let mut f = topo.fabric.clone();
            auto_place(&mut f, n);
            for p in 0..n {
                assert_eq!((count(&f, p, "leaf"), count(&f, p, "spine")), (per, per), "{n} processes, process {p}");
            }
            // Hosts run with their ToR.
            assert!(f.nodes.iter().filter(|h| h.as_host().is_some()).all(|h| h.placement == f.nodes[h.ports[0].peer.index()].placement));
        }
        // The 2x4 fabric on 3: a leaf each on two, the spines' little work on the third.
        let mut f = crate::config::topology::Topology::load("leaf-spine-2x4-rt").unwrap().fabric;
        auto_place(&mut f, 3);
        assert_eq!([count(&f, 0, "leaf"), count(&f, 1, "leaf"), count(&f, 2, "spine")], [1, 1, 4]);
    }

    #[test]
    fn auto_node_count_leaves_a_core_for_the_hosts_within_one_process_per_switch() {
        let f = crate::config::topology::Topology::load("leaf-spine-2x4-rt").unwrap().fabric;
        // Two leaves and four spines: at most 6 processes.
        assert_eq!(auto_node_count(&f, 1), 1);
        assert_eq!(auto_node_count(&f, 2), 1);
        assert_eq!(auto_node_count(&f, 4), 3);
        assert_eq!(auto_node_count(&f, 16), 6);
        let f = crate::config::topology::Topology::load("leaf-spine-8x8-rt").unwrap().fabric;
        assert_eq!(auto_node_count(&f, 16), 15);
        assert_eq!(auto_node_count(&f, 64), 16);
    }
}
