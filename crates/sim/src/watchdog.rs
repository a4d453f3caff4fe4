//! The progress watchdog of a virtual-time run: a run whose flows are
//! active but have stopped moving (no flow completes, no byte is delivered
//! or acknowledged) for a span of simulated time is stopped with a report of
//! what holds the fabric, instead of running for hours.
//!
//! A fabric can stop for good: a PFC pause loop, a queue that a program
//! paused and never resumes, flows black-holed by a failure nothing routes
//! around. Every event still runs (hosts time out and resend, pauses are
//! refreshed), so the engine never goes idle and a run without `--until`
//! never ends. [`ProgressWatchdog::check`] reads every host's
//! [`Node::flow_progress`]; [`StallReport::collect`] says, at the instant
//! it fired, which ports are paused by PFC and for which priority, which
//! queues hold the buffer, and which queues the switches' programs have
//! paused (ConWeave's held reorder queues).
//!
//! Invariants: the watchdog never fires while no started flow is
//! unfinished, nor while a scheduled link or node event is still ahead
//! (the fabric is about to change); the stall is counted from the latest
//! of the last progress and the last scheduled event. It only reads the
//! nodes, so a run it does not stop is unchanged byte for byte.

use crate::engine::Engine;
use std::fmt;
use weft_core::fabric::FabricSpec;
use weft_core::node::Node;
use weft_wire::ids::{FlowId, PortId, QueueId};
use weft_wire::time::Nanos;
use weft_wire::Ipv4Address;

/// Watches a run's progress. Call [`ProgressWatchdog::check`] at instants
/// where every event up to that instant has run.
#[derive(Debug, Clone)]
pub struct ProgressWatchdog {
    span: Nanos,
    /// Scheduled link and node events, in time order.
    events: Vec<Nanos>,
    last_count: u64,
    last_progress_at: Nanos,
}

impl ProgressWatchdog {
    /// A watchdog that fires after `span` of simulated time without
    /// progress on `fabric` (whose scheduled events it reads).
    pub fn new(span: Nanos, fabric: &FabricSpec) -> Self {
        let mut events: Vec<Nanos> = fabric.schedule.iter().map(|e| e.at).chain(fabric.node_schedule.iter().map(|e| e.at)).collect();
        events.sort_unstable();
        ProgressWatchdog { span: span.max(1), events, last_count: 0, last_progress_at: 0 }
    }

    /// The span without progress after which it fires.
    pub fn span(&self) -> Nanos {
        self.span
    }

    /// How often it is worth checking: a tenth of the span, at least 100 µs.
    pub fn check_every(&self) -> Nanos {
        (self.span / 10).max(100_000)
    }

    /// Checks at `now`: `Some(since)` when started flows are unfinished and
    /// nothing moved since `since`, at least the span ago.
    pub fn check(&mut self, engine: &Engine, now: Nanos) -> Option<Nanos> {
        let (mut count, mut active) = (0u64, false);
        for n in engine.nodes() {
            let p = n.flow_progress(now);
            count = count.wrapping_add(p.count);
            active |= p.active;
        }
        if count != self.last_count || !active {
            self.last_count = count;
            self.last_progress_at = now;
            return None;
        }
        if self.events.last().is_some_and(|&t| t > now) {
            return None;
        }
        let last_event = self.events.iter().rev().find(|&&t| t <= now).copied().unwrap_or(0);
        let since = self.last_progress_at.max(last_event);
        (now.saturating_sub(since) >= self.span).then_some(since)
    }
}

/// A queue that holds buffer when a run stalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldQueue {
    /// Switch name.
    pub switch: String,
    /// Egress port.
    pub port: PortId,
    /// The node at the other end of the port.
    pub peer: String,
    /// Queue.
    pub queue: QueueId,
    /// Bytes queued.
    pub bytes: u64,
    /// Packets queued.
    pub packets: usize,
    /// Paused by the switch's program (Tofino2 advanced flow control).
    pub paused_by_program: bool,
}

/// A PFC pause in force when a run stalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfcPause {
    /// Switch name.
    pub switch: String,
    /// Port.
    pub port: PortId,
    /// The node at the other end of the port.
    pub peer: String,
    /// Priority class.
    pub class: u8,
    /// `true`: the port's egress is paused by a pause frame its peer sent;
    /// `false`: the switch asserts XOFF towards its peer.
    pub received: bool,
}

/// What held the fabric when the watchdog fired.
#[derive(Debug, Clone, PartialEq)]
pub struct StallReport {
    /// When it fired.
    pub at: Nanos,
    /// The last progress (or the last scheduled event, if later).
    pub since: Nanos,
    /// Hosts with started, unfinished flows.
    pub hosts_waiting: usize,
    /// Unfinished flows (at most [`StallReport::TOP`]): id, source host,
    /// destination address, share acknowledged in per mille (UDP: 0).
    pub flows: Vec<(FlowId, String, Ipv4Address, u64)>,
    /// Unfinished flows in all.
    pub flows_waiting: usize,
    /// Pauses in force, by switch and port.
    pub pauses: Vec<PfcPause>,
    /// The queues holding the most buffer (at most [`StallReport::TOP`]).
    pub fullest: Vec<HeldQueue>,
    /// Every queue a program has paused that holds packets.
    pub paused_by_program: Vec<HeldQueue>,
    /// Shared buffer use per switch that holds any: (switch, bytes, of bytes).
    pub buffers: Vec<(String, u64, u64)>,
}

impl StallReport {
    /// Queues listed in [`StallReport::fullest`].
    pub const TOP: usize = 10;

    /// Reads the state of every switch of `engine` at `at`.
    pub fn collect(fabric: &FabricSpec, engine: &Engine, at: Nanos, since: Nanos) -> Self {
        let name = |id: weft_wire::ids::NodeId| fabric.nodes.get(id.index()).map_or_else(|| format!("node {}", id.0), |n| n.name.clone());
        let mut r = StallReport {
            at,
            since,
            hosts_waiting: engine.nodes().iter().filter(|n| n.flow_progress(at).active).count(),
            flows: Vec::new(),
            flows_waiting: 0,
            pauses: Vec::new(),
            fullest: Vec::new(),
            paused_by_program: Vec::new(),
            buffers: Vec::new(),
        };
        for (i, node) in engine.nodes().iter().enumerate() {
            let src = fabric.nodes.get(i).map_or_else(String::new, |n| n.name.clone());
            for (id, dst, permille) in node.unfinished_flows(at) {
                r.flows_waiting += 1;
                if r.flows.len() < Self::TOP {
                    r.flows.push((id, src.clone(), dst, permille));
                }
            }
        }
        let mut queues = Vec::new();
        for (i, node) in engine.nodes().iter().enumerate() {
            let (Node::Switch(s), Some(spec)) = (node, fabric.nodes.get(i)) else { continue };
            let tm = s.traffic_manager();
            let cell = tm.config().cell_bytes as u64;
            if tm.used_cells() > 0 {
                r.buffers.push((spec.name.clone(), tm.used_cells() * cell, tm.total_cells() * cell));
            }
            for (p, ps) in spec.ports.iter().enumerate() {
                let port = PortId(p as u16);
                let peer = name(ps.peer);
                for class in 0..8u8 {
                    for received in [true, false] {
                        let on = if received { tm.pfc_paused(at, port, class) } else { tm.xoff_asserted(port, class) };
                        if on {
                            r.pauses.push(PfcPause { switch: spec.name.clone(), port, peer: peer.clone(), class, received });
                        }
                    }
                }
                for q in 0..tm.config().queues_per_port {
                    let queue = QueueId(q);
                    let packets = tm.queue_len(port, queue);
                    if packets == 0 {
                        continue;
                    }
                    let h = HeldQueue {
                        switch: spec.name.clone(),
                        port,
                        peer: peer.clone(),
                        queue,
                        bytes: tm.queue_bytes(port, queue),
                        packets,
                        paused_by_program: tm.is_paused(port, queue),
                    };
                    if h.paused_by_program {
                        r.paused_by_program.push(h.clone());
                    }
                    queues.push(h);
                }
            }
        }
        queues.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| (&a.switch, a.port, a.queue).cmp(&(&b.switch, b.port, b.queue))));
        queues.truncate(Self::TOP);
        r.fullest = queues;
        r
    }
}

fn us(ns: Nanos) -> String {
    weft_wire::time::format_duration(ns)
}

impl fmt::Display for StallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "no progress from {} to {}: {} host(s) have unfinished flows, none completed or delivered a byte",
            us(self.since),
            us(self.at),
            self.hosts_waiting
        )?;
        writeln!(f, "  unfinished flows: {}", self.flows_waiting)?;
        for (id, src, dst, permille) in &self.flows {
            writeln!(f, "    flow {} {src} -> {dst}: {}.{} % acknowledged", id.0, permille / 10, permille % 10)?;
        }
        let (received, asserted): (Vec<&PfcPause>, Vec<&PfcPause>) = self.pauses.iter().partition(|p| p.received);
        writeln!(f, "  PFC: {} port/priority pairs paused by their peer, {} asserting XOFF", received.len(), asserted.len())?;
        for p in received.iter().take(12) {
            writeln!(f, "    {} port {} (to {}) may not send priority {}", p.switch, p.port.0, p.peer, p.class)?;
        }
        for p in asserted.iter().take(12) {
            writeln!(f, "    {} port {} pauses {} for priority {}", p.switch, p.port.0, p.peer, p.class)?;
        }
        if self.pauses.len() > 24 {
            writeln!(f, "    ({} more)", self.pauses.len() - received.len().min(12) - asserted.len().min(12))?;
        }
        writeln!(f, "  buffer in use:")?;
        for (s, used, of) in &self.buffers {
            writeln!(f, "    {s}: {used} of {of} B")?;
        }
        writeln!(f, "  fullest queues:")?;
        for q in &self.fullest {
            let held = if q.paused_by_program { ", paused by the program" } else { "" };
            writeln!(
                f,
                "    {} port {} (to {}) queue {}: {} B in {} packets{held}",
                q.switch, q.port.0, q.peer, q.queue.0, q.bytes, q.packets
            )?;
        }
        let held: u64 = self.paused_by_program.iter().map(|q| q.bytes).sum();
        write!(f, "  queues the programs paused (e.g. ConWeave's reorder queues): {} holding {held} B", self.paused_by_program.len())
    }
}
