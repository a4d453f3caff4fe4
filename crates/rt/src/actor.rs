//! The real-time driver's node actor: one `ractor` actor per switch or
//! synthetic host, owning its sans-IO state machine (docs/ARCHITECTURE.md).
//!
//! The actor turns messages into calls of the state machine with `now`
//! from the [`FabricClock`](crate::clock::FabricClock), and the state machine's outputs into frames
//! on its ports' [`Egress`]es. Deadlines (its next timer, frames due at a
//! peer) go to the process's one [`DeadlineScheduler`], never to tokio's
//! 1 ms timer; a frame already due when it is sent (an actor running late)
//! goes at once, behind any frame of its link direction still held there
//! ([`Lane`]). Every message that was due at some time (a timer, a frame's
//! arrival) records how late it is handled in the actor's [`LagHistogram`],
//! so users see when the emulation stops being faithful.
//!
//! Time: the state machine is called with the time the message was due
//! (never later than the wall clock), and its own deadlines that fall
//! before an arriving frame run first, at their time, as in virtual time;
//! so lag shows up as wall-clock delay but not as lost link capacity.
//!
//! A host's time never goes back: a message that reaches it after a later
//! one is handled at the later time. A switch instead handles every frame
//! and timer at its own due time even when it already handled a later one
//! (per-port time): its egress ports keep their own time (a port busy
//! until t sends its next frame at t, never earlier), so frames that reach
//! it late from a process that was held back keep their spacing on the
//! port they leave by, instead of landing at one instant behind a frame
//! that came in on time on another port (a TAP host's ACK, a neighbour in
//! the same process) and overflowing that port's queue: a fabric that runs
//! late shifts as a whole. State shared by all ports (the shared buffer,
//! the program's registers) sees the frames in the order they are handled.
//!
//! Bounded lag (the overload policy, `max_lag`; 0, the default: no bound).
//! When the process has more work than CPU, actors fall behind their
//! deadlines. Unbounded, the whole fabric runs late alike (slow motion:
//! relative timing holds, which suits synthetic hosts; real hosts see the
//! lag). With a bound, a switch drops a frame that reaches it more than
//! `max_lag` after it was due, before the pipeline sees it, and counts it
//! (`overload_drops`, `weft_actor_overload_drops_total`), as a NIC whose
//! host cannot keep up drops at its receive ring: what it forwards keeps
//! its timing and the loss is visible, never silent. Hosts never drop (a
//! late synthetic host is a source that sends late, which throttles it);
//! timers and link changes are never dropped. BENCHMARKS.md ("Bounded
//! lag") measures both.
//!
//! Invariants: the state machine is touched only by its actor; at most one
//! timer is outstanding per actor for its earliest deadline (stale ones only
//! cause a harmless extra `handle_timeout`); a frame sent on a port that is
//! down is counted and dropped.

use crate::clock::{DeadlineScheduler, Lane};
use crate::inbox::{Inbox, InboxSender};
use crate::link::header::LinkHeader;
use crate::link::remote::RemoteSender;
use crate::link::LinkChange;
use bytes::BytesMut;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use weft_core::fabric::FabricSpec;
use weft_core::link_loss::LinkLoss;
use weft_core::node::Node;
use weft_core::switch::Transmit;
use weft_metrics::lag::{LagHistogram, LagSummary};
use weft_metrics::{collect, FamilySet, NodeMetrics};
use weft_wire::ids::{LinkId, PortId};
use weft_wire::time::Nanos;

/// How to reach a node actor: its reference (control messages) and the
/// sending side of its frame inbox.
#[derive(Clone)]
pub struct NodeHandle {
    /// The actor (control messages).
    pub actor: ActorRef<NodeMsg>,
    /// Its frames.
    pub frames: InboxSender,
}

impl std::fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHandle").field("actor", &self.actor.get_id()).finish()
    }
}

impl NodeHandle {
    /// A handle for `actor`, whose frames go through `inbox` (a frame into
    /// an empty inbox casts one [`NodeMsg::Drain`]).
    pub fn new(actor: ActorRef<NodeMsg>, inbox: Arc<Inbox>) -> Self {
        let me = actor.clone();
        let frames = InboxSender::new(
            inbox,
            Arc::new(move || {
                let _ = me.cast(NodeMsg::Drain);
            }),
        );
        NodeHandle { actor, frames }
    }
}

/// Where a port's frames go.
#[derive(Clone)]
pub enum Egress {
    /// Nowhere (the peer is not part of this run).
    Unconnected,
    /// An actor of this process.
    Local {
        /// The peer's inbox.
        peer: InboxSender,
        /// Its port.
        port: PortId,
    },
    /// A host's TAP device in this process, written by the process's writer thread.
    Tap(Arc<crate::tap::TapDevice>, crate::tap::TapWriter),
    /// A VM host's NIC in this process.
    Vm(Arc<crate::vm::VmNic>),
    /// Another emu-node process.
    Remote(RemoteSender),
}

/// A packet capture attached to a port (both directions).
pub struct Capture {
    writer: Option<pcap_file::pcap::PcapWriter<std::io::BufWriter<std::fs::File>>>,
    left: u64,
    /// Frames written.
    pub written: u64,
}

impl Capture {
    /// Captures at most `count` frames into `file`.
    pub fn create(path: &std::path::Path, count: u64) -> std::io::Result<Self> {
        let f = std::io::BufWriter::new(std::fs::File::create(path)?);
        let w = pcap_file::pcap::PcapWriter::new(f).map_err(std::io::Error::other)?;
        Ok(Capture { writer: Some(w), left: count, written: 0 })
    }
    /// Writes one frame (wall-clock timestamp); closes the file at `count`.
    pub fn record(&mut self, frame: &[u8]) {
        let Some(w) = self.writer.as_mut() else { return };
        let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        if w.write_packet(&pcap_file::pcap::PcapPacket::new(ts, frame.len() as u32, frame)).is_ok() {
            self.written += 1;
        }
        self.left = self.left.saturating_sub(1);
        if self.left == 0 {
            self.finish();
        }
    }
    /// Flushes and closes the file.
    pub fn finish(&mut self) {
        if let Some(w) = self.writer.take() {
            let mut inner = w.into_writer();
            let _ = std::io::Write::flush(&mut inner);
        }
    }
    /// Whether the capture is complete.
    pub fn is_done(&self) -> bool {
        self.writer.is_none()
    }
}

/// A shared capture handle.
pub type CaptureHandle = Arc<Mutex<Capture>>;

/// A port of an actor: where frames go, and the link's live state.
#[derive(Clone)]
pub struct PortBinding {
    /// Destination.
    pub egress: Egress,
    /// Link id.
    pub link: LinkId,
    /// Direction on the link (0: this is the `a` end).
    pub dir: u8,
    /// One-way propagation delay.
    pub delay: Nanos,
    /// Whether the link is up.
    pub up: bool,
    /// Capture, if one is running.
    pub capture: Option<CaptureHandle>,
    /// Random loss of the direction this port sends ([`LinkChange::Loss`]).
    pub loss: LinkLoss,
    /// The frames this port sends on their way through the scheduler.
    lane: Lane,
}

impl PortBinding {
    /// A port sending on direction `dir` of `link` through `egress`, up,
    /// without loss or capture.
    pub fn new(egress: Egress, link: LinkId, dir: u8, delay: Nanos) -> Self {
        PortBinding { egress, link, dir, delay, up: true, capture: None, loss: LinkLoss::new(link.0, dir), lane: Lane::default() }
    }
    /// An unconnected port.
    pub fn unconnected(link: LinkId) -> Self {
        PortBinding::new(Egress::Unconnected, link, 0, 0)
    }
}

/// Messages of a node actor.
pub enum NodeMsg {
    /// Binds the ports (index = port id).
    Bind(Vec<PortBinding>),
    /// A frame arrives on `port`; it was due at `due`.
    Frame {
        /// Port.
        port: PortId,
        /// The frame.
        frame: BytesMut,
        /// When it was due.
        due: Nanos,
    },
    /// Frames are waiting in the actor's [`Inbox`].
    Drain,
    /// A timer armed for `due`.
    Timer {
        /// When it was due.
        due: Nanos,
    },
    /// A link of this node changed.
    Link {
        /// Port.
        port: PortId,
        /// Change.
        change: LinkChange,
    },
    /// The switch restarts and loses its register state
    /// ([`weft_core::node::Node::restart`]).
    Restart,
    /// Install a routing update (the switch's new routes).
    Routes(Vec<weft_core::fabric::Route>),
    /// Starts (or replaces) a capture on a port.
    Capture {
        /// Port.
        port: PortId,
        /// Capture (shared with the other end when it is local).
        capture: CaptureHandle,
    },
    /// Asks for a report.
    Report(RpcReplyPort<ActorReport>),
    /// Stops processing; replies with the state machine.
    Finish(RpcReplyPort<Option<Box<Node>>>),
    /// Asks for the node's metrics (node `index` of `fabric`).
    Metrics {
        /// The fabric (link names, base FCTs).
        fabric: Arc<FabricSpec>,
        /// The node's index.
        index: usize,
        /// Reply.
        reply: RpcReplyPort<FamilySet>,
    },
}

/// What an actor reports (`weft status`, metrics).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ActorReport {
    /// Node name.
    pub name: String,
    /// Lateness of handled deadlines.
    pub lag: LagSummary,
    /// Frames received.
    pub rx_frames: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Frames dropped at a down link.
    pub link_down_drops: u64,
    /// Frames lost at random on a link with loss ([`LinkChange::Loss`]).
    #[serde(default)]
    pub link_loss_drops: u64,
    /// Frames the transport could not send.
    pub send_errors: u64,
    /// Whether the state machine has no pending deadline.
    pub idle: bool,
    /// Frames the switch dropped (buffer, no route, malformed, ...).
    pub switch_drops: u64,
    /// Frames dropped because they reached the actor more than the
    /// process's `max_lag` after they were due (the overload policy).
    #[serde(default)]
    pub overload_drops: u64,
    /// Frames handled later than the fabric's smallest link delay after
    /// they were due: more late than any link of the fabric is long, so
    /// their timing may differ from the fabric's on time (the faithfulness
    /// report).
    #[serde(default)]
    pub late_frames: u64,
}

/// The actor.
pub struct NodeActor;

/// Arguments of [`NodeActor`].
pub struct NodeActorArgs {
    /// The state machine.
    pub node: Box<Node>,
    /// The process's scheduler.
    pub scheduler: DeadlineScheduler,
    /// The actor's frame inbox (shared with its [`NodeHandle`]s).
    pub inbox: Arc<Inbox>,
    /// Drop frames that arrive more than this after their due time (0: no
    /// bound; see the module doc).
    pub max_lag: Nanos,
    /// A frame handled more than this after it was due counts as late
    /// ([`ActorReport::late_frames`]): the fabric's smallest link delay.
    pub late_after: Nanos,
}

/// State of [`NodeActor`].
pub struct NodeActorState {
    node: Option<Box<Node>>,
    name: String,
    ports: Vec<PortBinding>,
    sched: DeadlineScheduler,
    armed: Option<Nanos>,
    lag: LagHistogram,
    out: Vec<Transmit>,
    report: ActorReport,
    /// UDP link datagrams sent when the message is handled.
    udp_batch: crate::link::remote::UdpBatch,
    /// The latest time handed to the state machine (a host's time never
    /// goes back; a switch's frames and timers run at their own due time).
    last: Nanos,
    /// Whether frames and timers run at their own due time even after a
    /// later one (a switch: see the module doc), not at `last`.
    per_port_time: bool,
    /// Frames later than this are dropped (0: no bound).
    max_lag: Nanos,
    /// Frames later than this are counted as late.
    late_after: Nanos,
    inbox: Arc<Inbox>,
    metrics: NodeMetrics,
}

fn node_name(n: &Node) -> String {
    match n {
        Node::Switch(s) => s.name().to_string(),
        Node::UdpHost(h) => h.name().to_string(),
        Node::RoceHost(h) => h.name().to_string(),
        Node::TcpHost(h) => h.name().to_string(),
    }
}

impl NodeActorState {
    fn on_frame(&mut self, wall: Nanos, port: PortId, frame: BytesMut, due: Nanos) {
        let now = if self.per_port_time { due.min(wall) } else { due.min(wall).max(self.last) };
        self.report.rx_frames += 1;
        if wall.saturating_sub(due) > self.late_after {
            self.report.late_frames += 1;
        }
        if self.max_lag > 0 && wall.saturating_sub(due) > self.max_lag && matches!(self.node.as_deref(), Some(Node::Switch(_))) {
            self.report.overload_drops += 1;
            return;
        }
        self.lag.record(due, wall);
        if let Some(p) = self.ports.get(port.index()) {
            if !p.up {
                self.report.link_down_drops += 1;
                return;
            }
            if let Some(c) = &p.capture {
                if let Ok(mut c) = c.lock() {
                    c.record(&frame);
                }
            }
        }
        if let Some(n) = self.node.as_mut() {
            // Virtual-time order: deadlines of the state machine that fall
            // before this frame run first, at their own time (a port that
            // became free at t starts its next frame at t).
            let mut prev = None;
            while let Some(t) = n.poll_timeout() {
                if t > now || prev == Some(t) {
                    break;
                }
                prev = Some(t);
                self.last = self.last.max(t);
                n.handle_timeout(if self.per_port_time { t } else { self.last }, &mut self.out);
            }
            n.handle_frame(now, port, frame, &mut self.out);
        }
        self.last = self.last.max(now);
    }

    fn flush(&mut self, me: &ActorRef<NodeMsg>) {
        let mut out = std::mem::take(&mut self.out);
        let wall = if out.is_empty() { 0 } else { self.sched.now() };
        for t in out.drain(..) {
            self.send(t, wall);
        }
        self.out = out;
        if let Some(t) = self.node.as_ref().and_then(|n| n.poll_timeout()) {
            if self.armed.is_none_or(|a| t < a) {
                self.armed = Some(t);
                let me = me.clone();
                self.sched.at(
                    t,
                    Box::new(move |_| {
                        let _ = me.cast(NodeMsg::Timer { due: t });
                    }),
                );
            }
        }
    }

    /// Sends `t` on its port; `wall` is the fabric time read once for the
    /// whole flush (a frame due by then goes at once, see [`Lane`]).
    fn send(&mut self, t: Transmit, wall: Nanos) {
        let Some(p) = self.ports.get_mut(t.port.index()) else { return };
        if !p.up {
            self.report.link_down_drops += 1;
            return;
        }
        if p.loss.lose() {
            self.report.link_loss_drops += 1;
            return;
        }
        self.report.tx_frames += 1;
        if let Some(c) = &p.capture {
            if let Ok(mut c) = c.lock() {
                c.record(&t.frame);
            }
        }
        let due = t.end + p.delay;
        match &mut p.egress {
            Egress::Unconnected => {}
            // Held by the scheduler until due; a frame already due goes at
            // once unless an earlier one of the link direction is still
            // held (the lane keeps the direction FIFO).
            Egress::Local { peer, port } => {
                let (peer, port, frame) = (peer.clone(), *port, t.frame);
                self.sched.in_lane(&p.lane, due, wall, move |_| peer.deliver(port, frame, due));
            }
            Egress::Tap(tap, writer) => {
                let (tap, writer) = (tap.clone(), writer.clone());
                let frame = t.frame;
                self.sched.in_lane(&p.lane, due, wall, move |_| writer.write(&tap, frame));
            }
            Egress::Vm(nic) => {
                let (nic, frame) = (nic.clone(), t.frame);
                self.sched.in_lane(&p.lane, due, wall, move |_| nic.write(frame));
            }
            Egress::Remote(r) => {
                let h = LinkHeader { dir: p.dir, fabric: 0, link: p.link.0, seq: 0, due, sent: wall };
                if r.send_batched(h, &t.frame, &mut self.udp_batch).is_err() {
                    self.report.send_errors += 1;
                }
            }
        }
    }
}

impl Actor for NodeActor {
    type Msg = NodeMsg;
    type State = NodeActorState;
    type Arguments = NodeActorArgs;

    async fn pre_start(&self, _me: ActorRef<NodeMsg>, args: NodeActorArgs) -> Result<NodeActorState, ActorProcessingErr> {
        let name = node_name(&args.node);
        let per_port_time = matches!(*args.node, Node::Switch(_));
        Ok(NodeActorState {
            per_port_time,
            report: ActorReport { name: name.clone(), ..Default::default() },
            node: Some(args.node),
            name,
            ports: Vec::new(),
            sched: args.scheduler,
            armed: None,
            lag: LagHistogram::default(),
            out: Vec::new(),
            udp_batch: Default::default(),
            last: 0,
            max_lag: args.max_lag,
            late_after: args.late_after,
            inbox: args.inbox,
            metrics: NodeMetrics::new(),
        })
    }

    async fn handle(&self, me: ActorRef<NodeMsg>, msg: NodeMsg, st: &mut NodeActorState) -> Result<(), ActorProcessingErr> {
        let wall = st.sched.now();
        // A frame or timer is handled as of the time it was due (if the
        // actor runs late, the state machine still sees the instant the
        // event belongs to, so a late wake-up does not stretch the gap
        // between two frames a port sends: rates stay exact and lag does not
        // accumulate).
        let now = match &msg {
            NodeMsg::Timer { due } if st.per_port_time => (*due).min(wall),
            NodeMsg::Timer { due } => (*due).min(wall).max(st.last),
            _ => wall.max(st.last),
        };
        match msg {
            NodeMsg::Bind(ports) => st.ports = ports,
            NodeMsg::Frame { port, frame, due } => st.on_frame(wall, port, frame, due),
            NodeMsg::Drain => {
                // Each frame's output leaves before the next is handled, as
                // if each had come in its own message.
                while let Some((port, frame, due)) = st.inbox.pop() {
                    st.on_frame(wall, port, frame, due);
                    st.flush(&me);
                }
            }
            NodeMsg::Timer { due } => {
                if st.armed == Some(due) {
                    st.armed = None;
                    st.lag.record(due, wall);
                }
                if let Some(n) = st.node.as_mut() {
                    n.handle_timeout(now, &mut st.out);
                }
                st.last = st.last.max(now);
            }
            NodeMsg::Link { port, change } => {
                st.last = now;
                if let Some(p) = st.ports.get_mut(port.index()) {
                    match change {
                        LinkChange::Down | LinkChange::Up => {
                            p.up = change == LinkChange::Up;
                            if let Some(n) = st.node.as_mut() {
                                n.set_port_up(now, port, p.up, &mut st.out);
                            }
                        }
                        LinkChange::Rate(r) => {
                            if let Some(n) = st.node.as_mut() {
                                n.set_port_rate(now, port, r);
                            }
                        }
                        LinkChange::Delay(d) => p.delay = d,
                        LinkChange::Loss(ppm) => p.loss.set(ppm),
                    }
                }
            }
            NodeMsg::Routes(routes) => {
                if let Some(n) = st.node.as_mut() {
                    n.install_routes(&routes);
                }
            }
            NodeMsg::Restart => {
                st.last = now;
                // Only a host or a switch with a program from outside its
                // spec refuses, and the orchestrator sends restarts to
                // switches of a topology only: the counters say whether it
                // happened (`weft_switch_restarts_total`).
                if let Some(n) = st.node.as_mut() {
                    let _ = n.restart(now, &mut st.out);
                }
            }
            NodeMsg::Capture { port, capture } => {
                if let Some(p) = st.ports.get_mut(port.index()) {
                    p.capture = Some(capture);
                }
            }
            NodeMsg::Report(reply) => {
                st.report.lag = st.lag.summary();
                st.report.name = st.name.clone();
                // A switch that sends hellos forever counts as idle: the
                // hosts' traffic decides when a run is over.
                st.report.idle = st.node.as_ref().is_none_or(|n| n.poll_timeout().is_none() || n.has_background_traffic());
                if let Some(Node::Switch(sw)) = st.node.as_deref() {
                    let c = sw.counters();
                    st.report.switch_drops = c.drops();
                }
                let _ = reply.send(st.report.clone());
                return Ok(());
            }
            NodeMsg::Metrics { fabric, index, reply } => {
                let mut set = FamilySet::new();
                if let Some(n) = st.node.as_deref() {
                    st.metrics.collect(&fabric, index, n, now, &mut set);
                }
                collect::actor_lag(&mut set, &st.name, &st.lag);
                set.counter("weft_actor_link_down_drops_total", &[("actor", &st.name)], st.report.link_down_drops);
                set.counter("weft_actor_link_loss_drops_total", &[("actor", &st.name)], st.report.link_loss_drops);
                set.counter("weft_actor_send_errors_total", &[("actor", &st.name)], st.report.send_errors);
                set.counter("weft_actor_overload_drops_total", &[("actor", &st.name)], st.report.overload_drops);
                set.counter("weft_actor_late_frames_total", &[("actor", &st.name)], st.report.late_frames);
                let _ = reply.send(set);
                return Ok(());
            }
            NodeMsg::Finish(reply) => {
                let _ = reply.send(st.node.take());
                me.stop(None);
                return Ok(());
            }
        }
        st.flush(&me);
        st.report.send_errors += st.udp_batch.flush();
        Ok(())
    }
}
