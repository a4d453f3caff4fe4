//! How faithful a real-time fabric's timing was: the faithfulness report
//! of `weft status` and `weft down` (docs/REALTIME.md#faithfulness).
//!
//! A real-time run is only as good as its timing. Every node actor records
//! how late it handles what was due (a frame's arrival, a timer); a frame
//! handled later than the fabric's smallest link delay is late by more
//! than any link is long, so the fabric on time might have treated it
//! differently (queued it with other frames, marked or dropped it). The
//! report gives, per emu-node and per node, the lateness (p50, p99, max),
//! those late frames, the frames dropped for lateness (`--max-lag`), the
//! real hosts' NIC-queue and receive-ring drops, and the CPU the process
//! used; and one warning line when some node's p99 lateness exceeded the
//! smallest link delay.
//!
//! Invariant: computed from the emu-nodes' latest reports alone (every
//! 500 ms); a process without a report yet is listed with no numbers.

use emu_node::runtime::ProcessReport;
use emu_node::time::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One emu-node process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessFaithfulness {
    /// Process index.
    pub process: u32,
    /// CPU time it used (every thread), s.
    pub cpu_s: f64,
    /// Wall time since the fabric's epoch at its report, s.
    pub wall_s: f64,
    /// The largest p50 / p99 / max lateness of its nodes, ns.
    pub lag_p50_ns: Nanos,
    /// See `lag_p50_ns`.
    pub lag_p99_ns: Nanos,
    /// See `lag_p50_ns`.
    pub lag_max_ns: Nanos,
    /// Frames its nodes handled later than the smallest link delay.
    pub late_frames: u64,
    /// Frames its switches dropped for arriving later than `--max-lag`.
    pub overload_drops: u64,
    /// Frames its real hosts' NIC queues dropped (TAP and VM hosts).
    pub nic_queue_drops: u64,
    /// Frames toward its VM hosts dropped at their full receive rings.
    pub ring_drops: u64,
}

/// One switch or synthetic host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFaithfulness {
    /// Node name.
    pub name: String,
    /// The process it runs in.
    pub process: u32,
    /// Frames it received.
    pub frames: u64,
    /// Lateness of what it handled (p50, p99, max), ns.
    pub lag_p50_ns: Nanos,
    /// See `lag_p50_ns`.
    pub lag_p99_ns: Nanos,
    /// See `lag_p50_ns`.
    pub lag_max_ns: Nanos,
    /// Frames it handled later than the smallest link delay.
    pub late_frames: u64,
    /// Frames it dropped for arriving later than `--max-lag`.
    pub overload_drops: u64,
}

/// The report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Faithfulness {
    /// The fabric's smallest link delay, ns: the lateness above which a
    /// frame counts as late.
    pub smallest_link_delay_ns: Nanos,
    /// Per emu-node.
    pub processes: Vec<ProcessFaithfulness>,
    /// Per switch and synthetic host.
    pub nodes: Vec<NodeFaithfulness>,
    /// One line when some node's p99 lateness exceeded the smallest link
    /// delay ("results may be distorted: ...").
    pub warning: Option<String>,
}

impl Faithfulness {
    /// The report from the processes' latest reports.
    pub fn of(smallest_link_delay_ns: Nanos, reports: &BTreeMap<u32, ProcessReport>) -> Self {
        let mut processes = Vec::new();
        let mut nodes = Vec::new();
        for (&process, r) in reports {
            let max = |f: fn(&emu_node::lag::LagSummary) -> u64| r.actors.iter().map(|a| f(&a.lag)).max().unwrap_or(0);
            processes.push(ProcessFaithfulness {
                process,
                cpu_s: r.cpu_ns as f64 / 1e9,
                wall_s: r.wall_ns as f64 / 1e9,
                lag_p50_ns: max(|l| l.p50_ns),
                lag_p99_ns: max(|l| l.p99_ns),
                lag_max_ns: max(|l| l.max_ns),
                late_frames: r.actors.iter().map(|a| a.late_frames).sum(),
                overload_drops: r.actors.iter().map(|a| a.overload_drops).sum(),
                nic_queue_drops: r.taps.iter().map(|t| t.2).sum(),
                ring_drops: r.vms.iter().map(|v| v.rx_ring_drops).sum(),
            });
            for a in &r.actors {
                nodes.push(NodeFaithfulness {
                    name: a.name.clone(),
                    process,
                    frames: a.rx_frames,
                    lag_p50_ns: a.lag.p50_ns,
                    lag_p99_ns: a.lag.p99_ns,
                    lag_max_ns: a.lag.max_ns,
                    late_frames: a.late_frames,
                    overload_drops: a.overload_drops,
                });
            }
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let over: Vec<&NodeFaithfulness> = nodes.iter().filter(|n| n.lag_p99_ns > smallest_link_delay_ns).collect();
        let warning = over.iter().max_by_key(|n| n.lag_p99_ns).map(|worst| {
            let late: u64 = nodes.iter().map(|n| n.late_frames).sum();
            let frames: u64 = nodes.iter().map(|n| n.frames).sum();
            format!(
                "results may be distorted: the p99 lateness of {} of {} nodes exceeded the smallest link delay ({}; worst {} at {}), and {late} of {frames} frames were handled later than it: each emu-node process needs a core of its own, and one busy process holds back the fabric (`weft up --nodes auto`: one fewer than the cores; or slower links) (docs/REALTIME.md#faithfulness)",
                over.len(),
                nodes.len(),
                us(smallest_link_delay_ns),
                worst.name,
                us(worst.lag_p99_ns),
            )
        });
        Faithfulness { smallest_link_delay_ns, processes, nodes, warning }
    }

    /// The report as `weft status` and `weft down` print it.
    pub fn render(&self) -> String {
        let mut s = format!(
            "faithfulness (lateness of what each node handled; late = later than the smallest link delay, {}):\n",
            us(self.smallest_link_delay_ns)
        );
        s += &format!(
            "  {:<8} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}\n",
            "process", "CPU s", "wall s", "lag p50", "lag p99", "lag max", "late", "overload", "NIC drop", "ring drop"
        );
        for p in &self.processes {
            s += &format!(
                "  {:<8} {:>9.2} {:>9.2} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}\n",
                p.process,
                p.cpu_s,
                p.wall_s,
                us(p.lag_p50_ns),
                us(p.lag_p99_ns),
                us(p.lag_max_ns),
                p.late_frames,
                p.overload_drops,
                p.nic_queue_drops,
                p.ring_drops
            );
        }
        for n in self.nodes.iter().filter(|n| n.late_frames > 0 || n.lag_p99_ns > self.smallest_link_delay_ns) {
            s += &format!(
                "  {:<10} (emu-node {}) p50 {} p99 {} max {}: {} of {} frames late, {} dropped for lateness\n",
                n.name,
                n.process,
                us(n.lag_p50_ns),
                us(n.lag_p99_ns),
                us(n.lag_max_ns),
                n.late_frames,
                n.frames,
                n.overload_drops
            );
        }
        match &self.warning {
            Some(w) => s += &format!("warning: {w}\n"),
            None => s += "every node's p99 lateness stayed within the smallest link delay\n",
        }
        s
    }
}

fn us(ns: Nanos) -> String {
    format!("{:.1}us", ns as f64 / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use emu_node::actor::ActorReport;
    use emu_node::lag::LagSummary;

    fn actor(name: &str, p99_ns: u64, late: u64) -> ActorReport {
        ActorReport {
            name: name.into(),
            lag: LagSummary { count: 100, p50_ns: 1_000, p99_ns, max_ns: p99_ns * 2, mean_ns: 2_000 },
            rx_frames: 100,
            late_frames: late,
            ..Default::default()
        }
    }

    #[test]
    fn warns_when_a_p99_exceeds_the_smallest_link_delay() {
        let mut reports = BTreeMap::new();
        reports.insert(
            0,
            ProcessReport {
                process: 0,
                actors: vec![actor("leaf0", 4_000, 0), actor("spine0", 9_000, 3)],
                cpu_ns: 2_000_000_000,
                wall_ns: 4_000_000_000,
                ..Default::default()
            },
        );
        reports.insert(1, ProcessReport { process: 1, actors: vec![actor("leaf1", 30_000, 12)], ..Default::default() });
        let f = Faithfulness::of(10_000, &reports);
        assert_eq!(f.processes.len(), 2);
        assert_eq!((f.processes[0].cpu_s, f.processes[0].lag_p99_ns, f.processes[0].late_frames), (2.0, 9_000, 3));
        let w = f.warning.as_deref().unwrap();
        assert!(w.starts_with("results may be distorted: the p99 lateness of 1 of 3 nodes"), "{w}");
        assert!(w.contains("worst leaf1 at 30.0us") && w.contains("15 of 300 frames"), "{w}");
        assert!(f.render().contains("leaf1      (emu-node 1) p50 1.0us p99 30.0us"), "{}", f.render());
        // Within the smallest delay everywhere: no warning.
        let f = Faithfulness::of(50_000, &reports);
        assert!(f.warning.is_none());
        assert!(f.render().contains("stayed within the smallest link delay"));
    }
}
