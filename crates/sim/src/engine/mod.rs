//! The virtual-time driver: one process, all nodes of a fabric, one event
//! queue.
//!
//! Events are ordered by `(time, sequence number)` so events at equal times
//! run in the order they were scheduled (as turmoil and nexosim do); the
//! engine never schedules in the past. A frame a node transmits with its
//! last bit at `end` is delivered to the peer port at `end + link delay`
//! (store-and-forward). A link direction is a FIFO channel (frames leave in
//! order and share one delay), so only each channel's head frame sits in the
//! event queue: the queue stays as small as the number of links, not of
//! frames in flight. Each node has at most one live timer event, armed
//! from its `poll_timeout()` after every input and cancelled lazily (an
//! event whose sequence number is not the node's armed one is skipped). Link events of the topology schedule take links down,
//! up, or change their rate at the given times.
//!
//! Determinism: no wall clock and no global RNG are read; node RNGs are
//! seeded from the run seed and node id, so the same seed gives the same
//! event sequence and byte-identical results.

use bytes::BytesMut;
use event_queue::{Event, EventQueue};
use std::collections::VecDeque;
use weft_core::fabric::{FabricSpec, LinkAction, LinkEvent};
use weft_core::node::{build_nodes, Node, NodeConfig, NodeError};
use weft_core::switch::Transmit;
use weft_wire::ids::{LinkId, NodeId, PortId};
use weft_wire::time::{BitRate, Nanos};

pub mod event_queue;

/// An [`Event`]'s `tag` packs the sequence number (high 40 bits) and what
/// happens (low 24 bits: a channel id, `timer_base + node`, or `link_base +
/// schedule index`). Sequence numbers are unique, so ordering by
/// `(at, tag)` is ordering by `(at, seq)`, and a timer event is live only if
/// its tag is the one its node armed (lazy cancellation).
const ID_BITS: u32 = 24;
const ID_MASK: u64 = (1 << ID_BITS) - 1;

/// One direction of a link: frames in flight, in departure order.
///
/// It carries a copy of its link's state (`up`, `delay`) so that sending a
/// frame touches one structure, not two (the hot path is memory-bound).
struct Channel {
    to: (NodeId, PortId),
    link: LinkId,
    up: bool,
    delay: Nanos,
    in_flight: VecDeque<(Event, BytesMut)>,
}

#[derive(Debug, Clone)]
struct LinkState {
    up: bool,
    rate: BitRate,
    nominal_rate: BitRate,
    drops: u64,
}

/// Run-wide counters.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, PartialEq, Eq)]
pub struct EngineTotals {
    /// Events processed (deliveries, live timers, link events).
    pub events: u64,
    /// Frames handled by a switch (one frame through one switch).
    pub packet_hops: u64,
    /// Frames delivered to hosts.
    pub host_deliveries: u64,
    /// Frames lost because their link was down when sent.
    pub link_down_drops: u64,
}

/// Errors building an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A node could not be built.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// More ports + nodes + link events than the event encoding holds.
    #[error("fabric too large for one engine: {ids} channels, nodes and link events (at most {max})")]
    TooLarge {
        /// Needed ids.
        ids: u64,
        /// Limit.
        max: u64,
    },
}

/// Hints the CPU to load the cache line at `p` (no effect on results).
/// The crate's one `unsafe` block.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The discrete-event engine.
pub struct Engine {
    now: Nanos,
    seq: u64,
    queue: EventQueue,
    nodes: Vec<Node>,
    /// Channel id of (node, egress port).
    channel_of: Vec<Vec<u32>>,
    channels: Vec<Channel>,
    links: Vec<LinkState>,
    ends: Vec<[(NodeId, PortId); 2]>,
    schedule: Vec<LinkEvent>,
    timer_base: u64,
    link_base: u64,
    /// Sequence number of each node's live timer event.
    armed: Vec<Option<(Nanos, u64)>>,
    out: Vec<Transmit>,
    totals: EngineTotals,
}

impl Engine {
    /// Builds every node of `fabric` with [`build_nodes`] (switches with
    /// their schemes, hosts with the configured transport) and schedules the
    /// topology's link events.
    pub fn new(fabric: &FabricSpec, cfg: &NodeConfig) -> Result<Self, EngineError> {
        Self::with_nodes(fabric, build_nodes(fabric, cfg)?)
    }

    /// Builds an engine from already-built nodes (tests with custom programs).
    pub fn with_nodes(fabric: &FabricSpec, nodes: Vec<Node>) -> Result<Self, EngineError> {
        let mut channels = Vec::new();
        let channel_of = fabric
            .nodes
            .iter()
            .map(|n| {
                n.ports
                    .iter()
                    .map(|p| {
                        let delay = fabric.links.get(p.link.index()).map_or(0, |l| l.delay);
                        channels.push(Channel { to: (p.peer, p.peer_port), link: p.link, up: true, delay, in_flight: VecDeque::new() });
                        (channels.len() - 1) as u32
                    })
                    .collect()
            })
            .collect();
        let links = fabric.links.iter().map(|l| LinkState { up: true, rate: l.rate, nominal_rate: l.rate, drops: 0 }).collect();
        let ends = fabric.links.iter().map(|l| [l.a, l.b]).collect();
        let n = nodes.len();
        let timer_base = channels.len() as u64;
        let link_base = timer_base + n as u64;
        if link_base + fabric.schedule.len() as u64 > ID_MASK {
            return Err(EngineError::TooLarge { ids: link_base + fabric.schedule.len() as u64, max: ID_MASK });
        }
        let mut e = Engine {
            now: 0,
            seq: 0,
            queue: EventQueue::default(),
            nodes,
            channel_of,
            channels,
            links,
            ends,
            schedule: fabric.schedule.clone(),
            timer_base,
            link_base,
            armed: vec![None; n],
            out: Vec::new(),
            totals: EngineTotals::default(),
        };
        for (i, ev) in fabric.schedule.iter().enumerate() {
            let tag = e.next_tag(link_base + i as u64);
            e.queue.push(Event { at: ev.at, tag });
        }
        for i in 0..n {
            e.rearm(NodeId(i as u32));
        }
        Ok(e)
    }

    #[inline]
    fn next_tag(&mut self, id: u64) -> u64 {
        self.seq += 1;
        (self.seq << ID_BITS) | id
    }

    fn rearm(&mut self, node: NodeId) {
        let Some(t) = self.nodes[node.index()].poll_timeout() else {
            // Nothing to wait for: an armed event becomes stale.
            self.armed[node.index()] = None;
            return;
        };
        if let Some((at, _)) = self.armed[node.index()] {
            if at <= t {
                return;
            }
        }
        let at = t.max(self.now);
        let tag = self.next_tag(self.timer_base + node.0 as u64);
        self.armed[node.index()] = Some((t, tag));
        self.queue.push(Event { at, tag });
    }

    fn flush(&mut self, node: NodeId) {
        let mut out = std::mem::take(&mut self.out);
        let chans = &self.channel_of[node.index()];
        for t in out.drain(..) {
            let Some(&c) = chans.get(t.port.index()) else { continue };
            let ch = &mut self.channels[c as usize];
            if !ch.up {
                self.links[ch.link.index()].drops += 1;
                self.totals.link_down_drops += 1;
                continue;
            }
            let at = t.end + ch.delay;
            self.seq += 1;
            let ev = Event { at, tag: (self.seq << ID_BITS) | c as u64 };
            debug_assert!(ch.in_flight.back().is_none_or(|b| b.0.at <= at), "a channel delivers in order");
            ch.in_flight.push_back((ev, t.frame));
            if ch.in_flight.len() == 1 {
                self.queue.push(ev);
            }
        }
        self.out = out;
        self.rearm(node);
    }

    /// Current simulated time.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Run-wide counters.
    pub fn totals(&self) -> EngineTotals {
        self.totals
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// A node, mutable (to add flows before the run).
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.nodes.get_mut(id.index())
    }

    /// Re-arms a node's timer after it was changed from outside (flows added).
    pub fn refresh(&mut self, id: NodeId) {
        self.rearm(id);
    }

    /// Frames lost on each link because it was down.
    pub fn link_drops(&self) -> Vec<u64> {
        self.links.iter().map(|l| l.drops).collect()
    }

    /// Whether events remain.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty()
    }

    /// Time of the next event.
    pub fn next_event_time(&self) -> Option<Nanos> {
        self.queue.peek().map(|e| e.at)
    }

    /// Processes events with time ≤ `until`; returns the number processed.
    /// Stops early (returning) after `budget` events so callers can report
    /// progress.
    pub fn run_until(&mut self, until: Nanos, budget: u64) -> u64 {
        let mut n = 0;
        while n < budget {
            match self.queue.peek() {
                Some(e) if e.at <= until => {}
                _ => break,
            }
            let Some(ev) = self.queue.pop() else { break };
            // The next frame's header is almost always cold (it waited in a
            // queue or on a link while thousands of events ran): start
            // loading it now, while this event is processed.
            if let Some(next) = self.queue.peek() {
                if let Some((_, f)) = self.channels.get((next.tag & ID_MASK) as usize).and_then(|c| c.in_flight.front()) {
                    prefetch(f.as_ptr());
                }
            }
            let id = ev.tag & ID_MASK;
            if (self.timer_base..self.link_base).contains(&id)
                && self.armed[(id - self.timer_base) as usize].map(|(_, tag)| tag) != Some(ev.tag)
            {
                continue; // stale timer: does not advance time
            }
            self.now = ev.at;
            if id < self.timer_base {
                let ch = &mut self.channels[id as usize];
                let Some((_, frame)) = ch.in_flight.pop_front() else { continue };
                let (node, port) = ch.to;
                if let Some(&(next, _)) = ch.in_flight.front() {
                    self.queue.push(next);
                }
                n += 1;
                match &mut self.nodes[node.index()] {
                    Node::Switch(s) => {
                        self.totals.packet_hops += 1;
                        s.handle_frame(ev.at, port, frame, &mut self.out);
                    }
                    h => {
                        self.totals.host_deliveries += 1;
                        h.handle_frame(ev.at, port, frame, &mut self.out);
                    }
                }
                self.flush(node);
            } else if id < self.link_base {
                let node = NodeId((id - self.timer_base) as u32);
                n += 1;
                self.armed[node.index()] = None;
                self.nodes[node.index()].handle_timeout(ev.at, &mut self.out);
                self.flush(node);
            } else {
                n += 1;
                let le = self.schedule[(id - self.link_base) as usize];
                self.apply_link_event(le);
            }
        }
        self.totals.events += n;
        n
    }

    fn apply_link_event(&mut self, le: LinkEvent) {
        let Some(l) = self.links.get_mut(le.link.index()) else { return };
        let now = self.now;
        match le.action {
            LinkAction::Down => l.up = false,
            LinkAction::Up => {
                l.up = true;
                l.rate = l.nominal_rate;
            }
            LinkAction::Degrade(r) => l.rate = r,
        }
        let (up, rate) = (l.up, l.rate);
        for ch in self.channels.iter_mut().filter(|c| c.link == le.link) {
            ch.up = up;
        }
        for (node, port) in self.ends[le.link.index()] {
            match &mut self.nodes[node.index()] {
                Node::Switch(s) => {
                    s.set_port_up(now, port, up, &mut self.out);
                    s.set_port_rate(now, port, rate);
                }
                Node::UdpHost(h) => h.set_port_rate(now, rate),
                Node::RoceHost(h) => h.set_port_rate(now, rate),
                Node::TcpHost(h) => h.set_port_rate(now, rate),
            }
            self.flush(node);
        }
    }
}
