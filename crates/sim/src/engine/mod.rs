//! The virtual-time driver: all nodes of a fabric in one process, on one or
//! several threads.
//!
//! Events are ordered by `(time, what)`: *what* is a fixed number per
//! event source (a link event of the schedule, a link direction, a node's
//! timer), so the order of events never depends on when they were
//! scheduled, only on the fabric. That is what lets a fabric run on several
//! threads with the results of one ([`partition`]). The engine never
//! schedules in the past. A frame a node transmits with its last bit at
//! `end` is delivered to the peer port at `end + link delay`
//! (store-and-forward). A link direction is a FIFO channel (frames leave in
//! order and share one delay), so only each channel's head frame sits in
//! the event queue: the queue stays as small as the number of links, not of
//! frames in flight. Each node has at most one live timer event, armed from
//! its `poll_timeout()` after every input and cancelled lazily (a timer
//! event whose time is not the node's armed one is skipped; two of the
//! armed time are one event to the order, and the first fires it). Link
//! events of the topology schedule take links down, up, or change their
//! rate or loss at the given times; its node events restart switches
//! ([`weft_core::switch::Switch::restart`]: the switch's links go down and
//! it loses its state), before the link events of the same instant (their
//! numbers come first), so that a restart whose links come up at the same
//! instant reboots in no time.
//!
//! Parallel runs (conservative synchronisation in windows, as in YAWNS /
//! the "bounded lag" family): the nodes are split into partitions
//! ([`partition::partition`]: hosts stay with their ToR, pods or leaves
//! stay whole), each with its own event queue, run by its own thread. The
//! lookahead `L` is the smallest delay of a link between two partitions.
//! Round by round, every partition publishes a bound on its next event (the
//! earliest of its queue and of the frames it just sent), all meet at one
//! barrier, take the minimum `T` and process their events with time
//! `< T + L`; frames for another partition go to a mailbox and are merged
//! after the barrier. A frame sent in the round leaves at or after `T` and
//! arrives at least `L` later, so it is never due inside the round that
//! sent it. The partitions are built at construction
//! ([`Engine::with_threads`]); the nodes are lent to them for each
//! [`Engine::run_until`] and come back after, so callers see one fabric.
//! The calling thread runs the first partition and the engine's worker
//! threads (`workers`, kept from call to call) the others; a panic in any
//! partition poisons the round barrier and reaches the caller.
//!
//! Determinism: no wall clock and no global RNG are read; node RNGs are
//! seeded from the run seed and node id. Each node sees its events in
//! `(time, what)` order whatever the partitions are (an event
//! from another partition is due at least `L` after the event that made
//! it, so it is known before the round it falls in), hence a seed gives
//! byte-identical results for every thread count.

use bytes::BytesMut;
use event_queue::{Event, EventQueue, WHAT_LIMIT};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use weft_core::fabric::{FabricSpec, LinkAction, LinkEvent, NodeAction, NodeEvent};
use weft_core::link_loss::LinkLoss;
use weft_core::node::{build_nodes, Node, NodeConfig, NodeError};
use weft_core::switch::Transmit;
use weft_wire::buffer::{FramePool, TailPolicy};
use weft_wire::hint::prefetch;
use weft_wire::ids::{LinkId, NodeId, PortId};
use weft_wire::time::{BitRate, Nanos};

pub mod event_queue;
pub mod partition;
mod workers;

/// What an [`Event`] is: a node event of the schedule (below `link_base`),
/// a link event (`link_base + k`), a channel's delivery
/// (`channel_base + channel`) or a node's timer (`timer_base + node`), all
/// below this. A timer event is live only if its time is the one its node
/// armed (lazy cancellation).
const ID_LIMIT: u64 = WHAT_LIMIT;

/// A frame on a channel and when it arrives (the delivery event's what is
/// the channel's own, so it is not kept).
///
/// `repr(C)` with the frame first: the compiler builds an element on the
/// stack and copies it into the ring in 16-byte moves; laid out so, each
/// move reads what one store wrote. With the time first (or a 16-byte
/// event), a move read half of one store and half of another, which the
/// CPU cannot forward, and `Part::flush` stalled on it (a third of its
/// samples).
#[derive(Clone)]
#[repr(C)]
struct InFlight {
    frame: BytesMut,
    at: Nanos,
}

/// One direction of a link: frames in flight, in departure order.
///
/// It carries a copy of its link's state (`up`, `delay`) so that sending a
/// frame touches one structure, not two (the hot path is memory-bound).
/// Every partition has a copy of every channel: the sender's copy is the
/// one whose `up` counts, the receiver's holds the frames in flight.
///
/// One cache line: a frame sent or delivered reads one line of its
/// channel besides the ring's slot.
#[derive(Clone)]
#[repr(C, align(64))]
struct Channel {
    in_flight: VecDeque<InFlight>,
    delay: Nanos,
    /// Random loss of this direction, once a loss event set one (drawn by
    /// the sender's copy only). Boxed: the RNG is large and the channel is
    /// on the hot path.
    loss: Option<Box<LinkLoss>>,
    to: (NodeId, PortId),
    link: LinkId,
    /// Partition of the receiving node (fewer than
    /// [`partition::MAX_PARTS`]).
    to_part: u16,
    up: bool,
    /// Direction on the link (0: from its `a` end).
    dir: u8,
}

const _: () = assert!(std::mem::size_of::<Channel>() == 64);
const _: () = assert!(partition::MAX_PARTS <= u16::MAX as usize + 1);

#[derive(Debug, Clone)]
struct LinkState {
    up: bool,
    rate: BitRate,
    nominal_rate: BitRate,
    drops: u64,
}

/// Run-wide counters.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct EngineTotals {
    /// Events processed (deliveries, live timers, link events).
    pub events: u64,
    /// Frames handled by a switch (one frame through one switch).
    pub packet_hops: u64,
    /// Frames delivered to hosts.
    pub host_deliveries: u64,
    /// Frames lost because their link was down when sent.
    pub link_down_drops: u64,
    /// Frames lost at random on a link with a loss event
    /// ([`weft_core::link_loss`]). Absent from `summary.json` when 0, so a
    /// run without loss events writes what it wrote before they existed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub link_loss_drops: u64,
    /// Switches restarted by node events of the schedule.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub node_restarts: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl EngineTotals {
    fn add(&mut self, o: &EngineTotals) {
        self.events += o.events;
        self.packet_hops += o.packet_hops;
        self.host_deliveries += o.host_deliveries;
        self.link_down_drops += o.link_down_drops;
        self.link_loss_drops += o.link_loss_drops;
        self.node_restarts += o.node_restarts;
    }
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
    /// A node event names a node that cannot restart (a host, or a switch
    /// whose program was built outside its spec).
    #[error("node `{0}` cannot restart: only a switch built from its topology spec can")]
    CannotRestart(String),
}

/// Bytes of the headers every switch reads at the front of a frame:
/// Ethernet (14), IPv4 (20), and UDP (8) with the RoCEv2 BTH (12) or TCP
/// (20).
const HEADER_END: usize = 54;

/// What every partition reads and no one changes during a run.
struct Layout {
    /// Where each node is and where its output goes.
    place: Vec<Place>,
    /// The two ends of each link.
    ends: Vec<[(NodeId, PortId); 2]>,
    schedule: Vec<LinkEvent>,
    /// Node events, each with the links of its node; their numbers come
    /// before the link events' (`link_base`).
    node_schedule: Vec<(NodeEvent, Vec<LinkId>)>,
    /// The routing tables of [`NodeAction::Routes`] events.
    route_updates: Vec<Vec<weft_core::fabric::Route>>,
    link_base: u64,
    channel_base: u64,
    timer_base: u64,
}

/// Where a node is and where its output goes: one entry per node, read
/// for every event the node has (its output's channels with its place, so
/// that sending reads no line of its own).
#[derive(Debug, Clone, Copy, Default)]
struct Place {
    /// Its partition.
    part: u32,
    /// Its index in the partition.
    local: u32,
    /// The channel of its port 0; port p's is `first_channel + p`.
    first_channel: u32,
    /// Its number of ports (of channels).
    ports: u32,
}

/// A frame for another partition: its channel, its delivery event, itself.
type Mail = (u32, Event, BytesMut);

/// One partition: its nodes' events, run by one thread.
struct Part {
    index: u32,
    now: Nanos,
    queue: EventQueue,
    /// Global ids of its nodes, in local order.
    members: Vec<NodeId>,
    /// Its nodes while a run is in progress (moved back to the engine
    /// between runs, so the engine can lend them out).
    nodes: Vec<Node>,
    channels: Vec<Channel>,
    /// Per channel, the address of its head frame's bytes (0: none), kept
    /// apart from the channels so that prefetching the next event's frame
    /// loads one hot word instead of the channel and its ring first. An
    /// address only: never dereferenced.
    heads: Vec<usize>,
    links: Vec<LinkState>,
    /// Each local node's armed timer: the time it asked for and its
    /// event's (the later of that and the time it was armed).
    armed: Vec<Option<(Nanos, Nanos)>>,
    out: Vec<Transmit>,
    /// The frame buffers its hosts have finished with, lent to each host
    /// for the length of each call ([`FramePool::shared`]: a receiver's
    /// data buffer serves the next data frame any of them sends, where a
    /// host's own pool would get back ACK buffers for its data frames).
    pool: FramePool,
    /// Frames for each other partition, sent this round.
    outbox: Vec<Vec<Mail>>,
    totals: EngineTotals,
}

/// Swaps the buffers of a host's own frame pool with the partition's
/// shared one's ([`FramePool::swap_buffers`]: a call between two swaps
/// builds its frames in the shared pool's buffers and gives its finished
/// ones to them); nothing for a switch.
#[inline]
fn lend_pool(node: &mut Node, pool: &mut FramePool) {
    if let Some(own) = node.frame_pool_mut() {
        own.swap_buffers(pool);
    }
}

/// Puts a frame on its channel's ring, its delivery `ev`; an empty
/// channel's delivery event goes into the queue and its frame's address
/// into `head`. Inlined, so that the frame goes from the caller's transmit
/// into the ring without a detour through the stack (a call, even an
/// inlined one of a method on the whole partition, measured 1.3 % slower
/// on the light UDP permutation, 6 of 6 pairs).
#[inline(always)]
fn push_in_flight(ch: &mut Channel, head: &mut usize, queue: &mut EventQueue, ev: Event, frame: BytesMut) {
    debug_assert!(ch.in_flight.back().is_none_or(|b| b.at <= ev.at), "a channel delivers in order");
    let addr = frame.as_ptr() as usize;
    ch.in_flight.push_back(InFlight { frame, at: ev.at });
    if ch.in_flight.len() == 1 {
        *head = addr;
        queue.push(ev);
    }
}

/// What a node's output goes to: its channels, borrowed apart from the
/// rest of its partition for the length of one [`Part::flush`].
struct Wire<'a> {
    /// The channel of the node's port 0 (port p's is `first_channel + p`).
    first_channel: u32,
    /// The node's number of ports.
    ports: u32,
    channel_base: u64,
    channels: &'a mut [Channel],
    links: &'a mut [LinkState],
    totals: &'a mut EngineTotals,
    heads: &'a mut [usize],
    queue: &'a mut EventQueue,
    outbox: &'a mut [Vec<Mail>],
    index: u32,
    now: Nanos,
}

impl Wire<'_> {
    /// Puts one transmitted frame on its channel: in this partition's ring
    /// (and the event queue, if the channel was empty), or in the mailbox
    /// of the receiver's partition; counted and dropped on a link that is
    /// down or loses it.
    #[inline(always)]
    fn send(&mut self, Transmit { port, frame, end, .. }: Transmit) {
        debug_assert!(end >= self.now, "a frame leaves after it is sent");
        if port.index() >= self.ports as usize {
            return;
        }
        let c = self.first_channel + u32::from(port.0);
        let ch = &mut self.channels[c as usize];
        if !ch.up {
            self.links[ch.link.index()].drops += 1;
            self.totals.link_down_drops += 1;
            return;
        }
        if ch.loss.as_mut().is_some_and(|l| l.lose()) {
            self.links[ch.link.index()].drops += 1;
            self.totals.link_loss_drops += 1;
            return;
        }
        let ev = Event { at: end + ch.delay, what: (self.channel_base + u64::from(c)) as u32 };
        if u32::from(ch.to_part) == self.index {
            push_in_flight(ch, &mut self.heads[c as usize], self.queue, ev, frame);
        } else {
            self.outbox[ch.to_part as usize].push((c, ev, frame));
        }
    }
}

impl Part {
    #[inline]
    fn local(&self, l: &Layout, node: NodeId) -> usize {
        l.place[node.index()].local as usize
    }

    /// Arms the timer of `node` (local index `i`) for its
    /// `poll_timeout()`. The caller passes the local index it already
    /// looked up for the node's input.
    #[inline]
    fn rearm(&mut self, l: &Layout, node: NodeId, i: usize) {
        let t = self.nodes[i].poll_timeout();
        self.arm(l, node, i, t);
    }

    /// Arms `node`'s timer (local index `i`) for `t` (its
    /// `poll_timeout()`), unless an earlier one is armed.
    #[inline]
    fn arm(&mut self, l: &Layout, node: NodeId, i: usize, t: Option<Nanos>) {
        let Some(t) = t else {
            // Nothing to wait for: an armed event becomes stale.
            self.armed[i] = None;
            return;
        };
        if let Some((at, _)) = self.armed[i] {
            if at <= t {
                return;
            }
        }
        let at = t.max(self.now);
        self.armed[i] = Some((t, at));
        self.queue.push(Event { at, what: (l.timer_base + node.0 as u64) as u32 });
    }

    /// Queues a frame on its (local) channel.
    #[inline]
    fn enqueue(&mut self, c: u32, ev: Event, frame: BytesMut) {
        push_in_flight(&mut self.channels[c as usize], &mut self.heads[c as usize], &mut self.queue, ev, frame);
    }

    /// Sends what the node's last input output and re-arms its timer
    /// (`i`: the node's local index).
    /// Inlined into the event loop: as a call, its register saves and
    /// restores were 15 instructions an event.
    #[inline(always)]
    fn flush(&mut self, l: &Layout, node: NodeId, i: usize) {
        // Many inputs send nothing (a frame queued behind a busy port, a
        // host's delivery): no drain of an empty output.
        if self.out.is_empty() {
            self.rearm(l, node, i);
            return;
        }
        // The output is sent in place (the fields borrowed apart), not
        // taken out of `self` and put back.
        let Part { out, channels, links, totals, heads, queue, outbox, index, now, .. } = self;
        let place = l.place[node.index()];
        let mut wire = Wire {
            first_channel: place.first_channel,
            ports: place.ports,
            channel_base: l.channel_base,
            channels,
            links,
            totals,
            heads,
            queue,
            outbox,
            index: *index,
            now: *now,
        };
        // Most inputs send one frame (a switch forwards one, a host sends
        // one or acknowledges one): popped, with no drain built and dropped.
        if out.len() == 1 {
            if let Some(t) = out.pop() {
                wire.send(t);
            }
        } else {
            for t in out.drain(..) {
                wire.send(t);
            }
        }
        self.rearm(l, node, i);
    }

    /// Time of the next event.
    fn next_time(&self) -> Option<Nanos> {
        self.queue.peek().map(|e| e.at)
    }

    /// Processes events with time ≤ `until`, at most `budget` of them;
    /// returns the number processed.
    fn run_until(&mut self, l: &Layout, until: Nanos, budget: u64) -> u64 {
        let mut n = 0;
        while n < budget {
            match self.queue.peek() {
                Some(e) if e.at <= until => {}
                _ => break,
            }
            let Some(ev) = self.queue.pop() else { break };
            // The next frame's header is almost always cold (it waited in a
            // queue or on a link while thousands of events ran): start
            // loading it now, while this event is processed. A frame buffer
            // is only 16-byte aligned (the allocator's), so the headers every
            // switch reads span two cache lines unless the buffer starts on
            // a line: load both.
            if let Some(next) = self.queue.peek() {
                let c = u64::from(next.what).wrapping_sub(l.channel_base) as usize;
                if let Some(&f) = self.heads.get(c).filter(|&&f| f != 0) {
                    prefetch(f as *const u8);
                    prefetch((f + HEADER_END - 1) as *const u8);
                    // And the channel it comes off (its ring's state; one line).
                    if let Some(ch) = self.channels.get(c) {
                        prefetch(ch as *const Channel);
                    }
                }
            }
            let id = u64::from(ev.what);
            if id >= l.timer_base {
                let node = NodeId((id - l.timer_base) as u32);
                let i = self.local(l, node);
                if self.armed[i].map(|(_, at)| at) != Some(ev.at) {
                    continue; // stale timer: does not advance time
                }
                self.now = ev.at;
                n += 1;
                self.armed[i] = None;
                let n = &mut self.nodes[i];
                lend_pool(n, &mut self.pool);
                n.handle_timeout(ev.at, &mut self.out);
                lend_pool(n, &mut self.pool);
                self.flush(l, node, i);
            } else if id >= l.channel_base {
                self.now = ev.at;
                let c = (id - l.channel_base) as usize;
                let ch = &mut self.channels[c];
                let Some(InFlight { frame, .. }) = ch.in_flight.pop_front() else { continue };
                let (node, port) = ch.to;
                if let Some(next) = ch.in_flight.front() {
                    self.heads[c] = next.frame.as_ptr() as usize;
                    self.queue.push(Event { at: next.at, what: ev.what });
                } else {
                    self.heads[c] = 0;
                }
                n += 1;
                let i = self.local(l, node);
                match &mut self.nodes[i] {
                    Node::Switch(s) => {
                        self.totals.packet_hops += 1;
                        s.handle_frame(ev.at, port, frame, &mut self.out);
                    }
                    h => {
                        self.totals.host_deliveries += 1;
                        lend_pool(h, &mut self.pool);
                        h.handle_frame(ev.at, port, frame, &mut self.out);
                        lend_pool(h, &mut self.pool);
                    }
                }
                self.flush(l, node, i);
            } else if id < l.link_base {
                self.now = ev.at;
                let (ne, _) = &l.node_schedule[id as usize];
                // Its partition and its neighbours' apply it; its own counts it.
                if l.place[ne.node.index()].part == self.index {
                    n += 1;
                }
                self.apply_node_event(l, id as usize);
            } else {
                self.now = ev.at;
                let le = l.schedule[(id - l.link_base) as usize];
                // Both ends' partitions apply it; the first end's counts it.
                if l.place[l.ends[le.link.index()][0].0.index()].part == self.index {
                    n += 1;
                }
                self.apply_link_event(l, le);
            }
        }
        self.totals.events += n;
        n
    }

    /// Applies node event `k` to the ends here of the node's links and,
    /// in the node's own partition, to the node (the engine checked at
    /// construction that it can restart). A restart takes every link of
    /// the switch down (the link events of its reboot bring them up).
    fn apply_node_event(&mut self, lay: &Layout, k: usize) {
        let (ne, links) = &lay.node_schedule[k];
        match ne.action {
            NodeAction::Restart => {
                for &link in links {
                    self.apply_link_event(lay, LinkEvent { at: ne.at, link, action: LinkAction::Down });
                }
                if lay.place[ne.node.index()].part == self.index {
                    let i = self.local(lay, ne.node);
                    if self.nodes[i].restart(self.now, &mut self.out).is_ok() {
                        self.totals.node_restarts += 1;
                    }
                    self.flush(lay, ne.node, i);
                }
            }
            NodeAction::Routes(k) => {
                if lay.place[ne.node.index()].part == self.index {
                    if let Some(routes) = lay.route_updates.get(k as usize) {
                        let i = self.local(lay, ne.node);
                        self.nodes[i].install_routes(routes);
                    }
                }
            }
        }
    }

    fn apply_link_event(&mut self, lay: &Layout, le: LinkEvent) {
        let Some(l) = self.links.get_mut(le.link.index()) else { return };
        let now = self.now;
        match le.action {
            LinkAction::Down => l.up = false,
            LinkAction::Up => {
                l.up = true;
                l.rate = l.nominal_rate;
            }
            LinkAction::Degrade(r) => l.rate = r,
            LinkAction::Loss(ppm) => {
                for ch in self.channels.iter_mut().filter(|c| c.link == le.link) {
                    // Kept once made, so that its RNG goes on where it was.
                    let (link, dir) = (ch.link.0, ch.dir);
                    ch.loss.get_or_insert_with(|| Box::new(LinkLoss::new(link, dir))).set(ppm);
                }
                return;
            }
        }
        let (up, rate) = (l.up, l.rate);
        for ch in self.channels.iter_mut().filter(|c| c.link == le.link) {
            ch.up = up;
        }
        for (node, port) in lay.ends[le.link.index()] {
            if lay.place[node.index()].part != self.index {
                continue;
            }
            let i = self.local(lay, node);
            match &mut self.nodes[i] {
                Node::Switch(s) => {
                    s.set_port_up(now, port, up, &mut self.out);
                    s.set_port_rate(now, port, rate);
                }
                Node::UdpHost(h) => h.set_port_rate(now, rate),
                Node::RoceHost(h) => h.set_port_rate(now, rate),
                Node::TcpHost(h) => h.set_port_rate(now, rate),
            }
            self.flush(lay, node, i);
        }
    }
}

/// A barrier for the rounds of a parallel run: it spins briefly (rounds
/// are short), then yields the CPU (more threads than cores, e.g. `weft
/// compare --jobs` with `--threads`).
struct RoundBarrier {
    waiting: AtomicUsize,
    round: AtomicUsize,
    threads: usize,
    /// A partition's thread panicked: no one waits for it any more.
    poisoned: AtomicBool,
}

impl RoundBarrier {
    fn new(threads: usize) -> Self {
        RoundBarrier { waiting: AtomicUsize::new(0), round: AtomicUsize::new(0), threads, poisoned: AtomicBool::new(false) }
    }

    /// Waits for every partition; `false` if the barrier is poisoned.
    fn wait(&self) -> bool {
        let round = self.round.load(Ordering::Acquire);
        if self.waiting.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            self.waiting.store(0, Ordering::Relaxed);
            self.round.store(round.wrapping_add(1), Ordering::Release);
            return !self.poisoned.load(Ordering::Acquire);
        }
        let mut spins = 0u32;
        while self.round.load(Ordering::Acquire) == round {
            if self.poisoned.load(Ordering::Relaxed) {
                return false;
            }
            if spins < 2_000 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        !self.poisoned.load(Ordering::Acquire)
    }

    /// Releases every waiting partition for good (a thread panicked).
    fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }
}

/// What the threads of one parallel `run_until` share. The per-partition
/// figures are double-buffered by round parity: a partition writes those of
/// round `k + 1` while a slower one may still read those of round `k`, and
/// cannot write those of `k + 2` before everyone has passed the barrier
/// that ends round `k`'s reading.
struct Rounds {
    barrier: RoundBarrier,
    /// Each partition's bound on its next event (`u64::MAX`: none): the
    /// earliest of its queue and of the frames it sent in the round.
    next: [Vec<AtomicU64>; 2],
    /// Each partition's events so far in this call.
    events: [Vec<AtomicU64>; 2],
    /// Frames from partition `i` to partition `j` at `i * parts + j`.
    mail: Vec<Mutex<Vec<Mail>>>,
}

/// The discrete-event engine.
pub struct Engine {
    nodes: Vec<Node>,
    parts: Vec<Part>,
    layout: Arc<Layout>,
    lookahead: Nanos,
    /// The threads of the partitions after the first, from the first
    /// parallel call on.
    workers: Option<workers::Workers>,
}

impl Engine {
    /// Builds every node of `fabric` with [`build_nodes`] (switches with
    /// their schemes, hosts with the configured transport) and schedules the
    /// topology's link events; one thread.
    pub fn new(fabric: &FabricSpec, cfg: &NodeConfig) -> Result<Self, EngineError> {
        Self::with_threads(fabric, build_nodes(fabric, cfg)?, 1)
    }

    /// Builds an engine from already-built nodes (tests with custom
    /// programs); one thread.
    pub fn with_nodes(fabric: &FabricSpec, nodes: Vec<Node>) -> Result<Self, EngineError> {
        Self::with_threads(fabric, nodes, 1)
    }

    /// Builds an engine that runs `nodes` on up to `threads` threads
    /// ([`partition::partition`] chooses the partitions and may use fewer:
    /// [`Engine::threads`] says how many). Results are the same for every
    /// thread count.
    pub fn with_threads(fabric: &FabricSpec, nodes: Vec<Node>, threads: usize) -> Result<Self, EngineError> {
        let plan = partition::partition(fabric, threads);
        let parts_n = plan.parts as usize;
        let n = nodes.len();
        let mut place = vec![Place::default(); n];
        let mut members: Vec<Vec<NodeId>> = vec![Vec::new(); parts_n];
        for (i, p) in place.iter_mut().enumerate() {
            let part = plan.part_of.get(i).copied().unwrap_or(0) as usize;
            p.part = part as u32;
            p.local = members[part].len() as u32;
            members[part].push(NodeId(i as u32));
        }
        // Channels are numbered node by node, port by port.
        let mut channels = Vec::new();
        for (i, node) in fabric.nodes.iter().enumerate() {
            if let Some(pl) = place.get_mut(i) {
                pl.first_channel = channels.len() as u32;
                pl.ports = node.ports.len() as u32;
            }
            for p in &node.ports {
                let delay = fabric.links.get(p.link.index()).map_or(0, |l| l.delay);
                let dir = u8::from(fabric.links.get(p.link.index()).is_some_and(|l| l.a.0 .0 != i as u32));
                // Below MAX_PARTS (the partitioning's bound).
                let to_part = place.get(p.peer.index()).map_or(0, |pl| pl.part as u16);
                channels.push(Channel {
                    to: (p.peer, p.peer_port),
                    link: p.link,
                    up: true,
                    delay,
                    to_part,
                    in_flight: VecDeque::new(),
                    dir,
                    loss: None,
                });
            }
        }
        let links: Vec<LinkState> =
            fabric.links.iter().map(|l| LinkState { up: true, rate: l.rate, nominal_rate: l.rate, drops: 0 }).collect();
        let ends: Vec<_> = fabric.links.iter().map(|l| [l.a, l.b]).collect();
        for ne in fabric.node_schedule.iter().filter(|ne| ne.action == NodeAction::Restart) {
            match nodes.get(ne.node.index()) {
                Some(n) if n.can_restart() => {}
                _ => {
                    let name = fabric.nodes.get(ne.node.index()).map_or_else(|| ne.node.0.to_string(), |n| n.name.clone());
                    return Err(EngineError::CannotRestart(name));
                }
            }
        }
        let link_base = fabric.node_schedule.len() as u64;
        let channel_base = link_base + fabric.schedule.len() as u64;
        let timer_base = channel_base + channels.len() as u64;
        if timer_base + n as u64 > ID_LIMIT {
            return Err(EngineError::TooLarge { ids: timer_base + n as u64, max: ID_LIMIT });
        }
        let layout = Layout {
            place,
            ends,
            schedule: fabric.schedule.clone(),
            node_schedule: fabric
                .node_schedule
                .iter()
                .map(|ne| {
                    // A restart takes the switch's links down (their ends'
                    // partitions apply it); a routing update is the switch's own.
                    let links = match ne.action {
                        NodeAction::Restart => {
                            fabric.nodes.get(ne.node.index()).map_or_else(Vec::new, |n| n.ports.iter().map(|p| p.link).collect())
                        }
                        NodeAction::Routes(_) => Vec::new(),
                    };
                    (*ne, links)
                })
                .collect(),
            route_updates: fabric.route_updates.clone(),
            link_base,
            channel_base,
            timer_base,
        };
        // The hosts' pools say what may be assumed of the buffers given
        // back (the node configuration's), and so does each shared one.
        let pool_policy = nodes.iter().find_map(Node::frame_pool).map_or(TailPolicy::default(), FramePool::policy);
        let parts = members
            .into_iter()
            .enumerate()
            .map(|(index, members)| {
                let hosts = members.iter().filter(|m| nodes.get(m.index()).is_some_and(|n| n.frame_pool().is_some())).count();
                Part {
                    index: index as u32,
                    now: 0,
                    queue: EventQueue::default(),
                    nodes: Vec::new(),
                    heads: vec![0; channels.len()],
                    channels: channels.clone(),
                    links: links.clone(),
                    armed: vec![None; members.len()],
                    members,
                    out: Vec::new(),
                    pool: FramePool::shared_for(pool_policy, hosts),
                    outbox: (0..parts_n).map(|_| Vec::new()).collect(),
                    totals: EngineTotals::default(),
                }
            })
            .collect();
        let mut e = Engine { nodes, parts, layout: Arc::new(layout), lookahead: plan.lookahead, workers: None };
        for (i, ev) in fabric.schedule.iter().enumerate() {
            let ev = Event { at: ev.at, what: (link_base + i as u64) as u32 };
            let mut parts_of_ends: Vec<u32> = e.layout.ends[fabric.schedule[i].link.index()]
                .iter()
                .filter_map(|(node, _)| e.layout.place.get(node.index()).map(|p| p.part))
                .collect();
            parts_of_ends.dedup();
            for p in parts_of_ends {
                e.parts[p as usize].queue.push(ev);
            }
        }
        for (i, (ne, links)) in e.layout.node_schedule.iter().enumerate() {
            let ev = Event { at: ne.at, what: i as u32 };
            let mut parts: Vec<u32> = std::iter::once(ne.node)
                .chain(links.iter().flat_map(|l| e.layout.ends[l.index()].map(|(n, _)| n)))
                .filter_map(|n| e.layout.place.get(n.index()).map(|p| p.part))
                .collect();
            parts.sort_unstable();
            parts.dedup();
            for p in parts {
                e.parts[p as usize].queue.push(ev);
            }
        }
        for i in 0..n {
            e.refresh(NodeId(i as u32));
        }
        Ok(e)
    }

    /// Threads (partitions) the engine runs on.
    pub fn threads(&self) -> usize {
        self.parts.len()
    }

    /// The smallest delay of a link between two partitions (the length of a
    /// round); `None` on one thread.
    pub fn lookahead(&self) -> Option<Nanos> {
        (self.parts.len() > 1).then_some(self.lookahead)
    }

    /// Current simulated time: that of the last event processed.
    pub fn now(&self) -> Nanos {
        self.parts.iter().map(|p| p.now).max().unwrap_or(0)
    }

    /// Run-wide counters.
    pub fn totals(&self) -> EngineTotals {
        let mut t = EngineTotals::default();
        for p in &self.parts {
            t.add(&p.totals);
        }
        t
    }

    /// Under [`TailPolicy::Check`]: (buffers checked, buffers not zero
    /// beyond their headers) of every frame pool, the hosts' own and the
    /// partitions' shared ones ([`FramePool::tail_checks`]).
    pub fn frame_tail_checks(&self) -> (u64, u64) {
        let own = self.nodes.iter().filter_map(Node::frame_pool);
        own.chain(self.parts.iter().map(|p| &p.pool)).map(FramePool::tail_checks).fold((0, 0), |(c, b), (c2, b2)| (c + c2, b + b2))
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
        let (Some(&Place { part: p, local: i, .. }), Some(node)) = (self.layout.place.get(id.index()), self.nodes.get(id.index())) else {
            return;
        };
        let t = node.poll_timeout();
        self.parts[p as usize].arm(&self.layout, id, i as usize, t);
    }

    /// Frames lost on each link because it was down.
    pub fn link_drops(&self) -> Vec<u64> {
        let mut drops = vec![0; self.layout.ends.len()];
        for p in &self.parts {
            for (d, l) in drops.iter_mut().zip(&p.links) {
                *d += l.drops;
            }
        }
        drops
    }

    /// Whether events remain.
    pub fn is_idle(&self) -> bool {
        self.parts.iter().all(|p| p.queue.is_empty())
    }

    /// Time of the next event.
    pub fn next_event_time(&self) -> Option<Nanos> {
        self.parts.iter().filter_map(Part::next_time).min()
    }

    /// Processes events with time ≤ `until`; returns the number processed.
    /// Stops early (returning) after `budget` events (on several threads:
    /// at the end of the round in which the budget ran out) so callers can
    /// report progress.
    pub fn run_until(&mut self, until: Nanos, budget: u64) -> u64 {
        // Lend the nodes to their partitions for the call.
        let mut slots: Vec<Option<Node>> = std::mem::take(&mut self.nodes).into_iter().map(Some).collect();
        for p in &mut self.parts {
            p.nodes = p.members.iter().filter_map(|m| slots[m.index()].take()).collect();
        }
        let n = if self.parts.len() == 1 { self.parts[0].run_until(&self.layout, until, budget) } else { self.run_rounds(until, budget) };
        // And take them back.
        let mut back: Vec<Option<Node>> = (0..self.layout.place.len()).map(|_| None).collect();
        for p in &mut self.parts {
            for (m, node) in p.members.iter().zip(p.nodes.drain(..)) {
                back[m.index()] = Some(node);
            }
        }
        self.nodes = back.into_iter().flatten().collect();
        n
    }

    /// [`Engine::run_until`] on one thread per partition, round by round:
    /// the first partition on the calling thread, the others on the
    /// engine's worker threads (started on the first call).
    fn run_rounds(&mut self, until: Nanos, budget: u64) -> u64 {
        let parts_n = self.parts.len();
        let slots = || (0..parts_n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        let shared = Arc::new(Rounds {
            barrier: RoundBarrier::new(parts_n),
            next: [slots(), slots()],
            events: [slots(), slots()],
            mail: (0..parts_n * parts_n).map(|_| Mutex::new(Vec::new())).collect(),
        });
        if self.workers.as_ref().is_none_or(|w| w.len() + 1 != parts_n) {
            // A thread that cannot be started leaves nothing to run on.
            self.workers = Some(workers::Workers::spawn(parts_n - 1).unwrap_or_else(|e| panic!("cannot start the partition threads: {e}")));
        }
        let Some(pool) = self.workers.as_ref() else { return 0 };
        let mut parts = std::mem::take(&mut self.parts).into_iter();
        let Some(mut first) = parts.next() else { return 0 };
        let (layout, lookahead) = (&self.layout, self.lookahead);
        let jobs = parts
            .map(|part| workers::Job { part, layout: Arc::clone(layout), shared: Arc::clone(&shared), lookahead, until, budget })
            .collect();
        let (others, events) = pool.run(jobs, || run_part(&mut first, layout, &shared, lookahead, until, budget), &shared);
        self.parts.push(first);
        self.parts.extend(others);
        events
    }
}

/// One partition's side of [`Engine::run_rounds`]; returns the events it
/// processed.
///
/// A round: after the barrier, every partition reads the same figures, so
/// all take the same start `T` (the earliest bound) and the same decision
/// to stop; it merges the frames sent to it, runs its events before
/// `T + lookahead`, hands over the frames it sent, and publishes its
/// figures for the next round. Frames handed over after the barrier by a
/// faster partition may be merged a round early: they are due at or after
/// the next round's `T + lookahead`, so they wait in the queue as any
/// event does.
fn run_part(part: &mut Part, l: &Layout, shared: &Rounds, lookahead: Nanos, until: Nanos, budget: u64) -> u64 {
    let parts_n = shared.barrier.threads;
    let me = part.index as usize;
    let mut done = 0u64;
    let mut round = 0usize;
    shared.next[0][me].store(part.next_time().unwrap_or(u64::MAX), Ordering::Release);
    shared.events[0][me].store(0, Ordering::Release);
    loop {
        if !shared.barrier.wait() {
            break;
        }
        let slot = round % 2;
        let start = shared.next[slot].iter().map(|n| n.load(Ordering::Acquire)).min().unwrap_or(u64::MAX);
        let events: u64 = shared.events[slot].iter().map(|n| n.load(Ordering::Acquire)).sum();
        for from in 0..parts_n {
            let mut inbox = shared.mail[from * parts_n + me].lock().unwrap_or_else(|p| p.into_inner());
            for (c, ev, frame) in inbox.drain(..) {
                part.enqueue(c, ev, frame);
            }
        }
        if start > until || events >= budget {
            break;
        }
        let end = start.saturating_add(lookahead - 1).min(until);
        done += part.run_until(l, end, u64::MAX);
        let mut sent = u64::MAX;
        for (to, out) in part.outbox.iter_mut().enumerate() {
            if let Some(first) = out.iter().map(|m| m.1.at).min() {
                sent = sent.min(first);
                let mut slot = shared.mail[me * parts_n + to].lock().unwrap_or_else(|p| p.into_inner());
                slot.append(out);
            }
        }
        round += 1;
        let slot = round % 2;
        shared.next[slot][me].store(part.next_time().unwrap_or(u64::MAX).min(sent), Ordering::Release);
        shared.events[slot][me].store(done, Ordering::Release);
    }
    done
}
