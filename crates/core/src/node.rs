//! The node factory shared by both drivers: a fabric node as a sans-IO
//! state machine ([`Node`]: a switch or a synthetic host) and how every node
//! of a [`FabricSpec`] is built from it ([`build_nodes`], [`NodeConfig`]).
//!
//! Order of calls (the contract every driver keeps, virtual or real time):
//! 1. [`build_nodes`] once; node `i` is fabric node `i`, its RNG seeded with
//!    [`node_seed`] of the run seed and `i`.
//! 2. For every frame that reaches a node: [`Node::handle_frame`] with the
//!    arrival time (the end of the frame's serialization plus the link
//!    delay) and the port; the node appends what it transmits to `out`.
//! 3. After every input, [`Node::poll_timeout`]; when that time comes,
//!    [`Node::handle_timeout`]. Calling it early is harmless; late calls
//!    are late events (real time measures that lag).
//! 4. Link changes: [`Node::set_port_up`], [`Node::set_port_rate`].
//! 5. A switch's restart (`weft node SWITCH restart`, a topology event):
//!    [`Node::restart`], then [`Node::poll_timeout`] again.
//!
//! Times never go backwards across calls to one node. No node reads a clock,
//! a socket or a global random number generator.

use crate::fabric::{FabricSpec, NodeKind};
use crate::host::{RoceConfig, RoceHost, SizedFlow, TcpConfig, TcpHost, UdpFlow, UdpHost};
use crate::switch::{Switch, SwitchConfig, SwitchError};
use crate::transmit::Transmit;
use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use weft_tofino::{BufferModel, BufferRules, Ns3Mmu, PfcConfig, TargetProfile, TmConfig};
use weft_wire::ids::{NodeId, PortId};
use weft_wire::time::{BitRate, Nanos};

/// A node of the fabric as a sans-IO state machine: a switch or a synthetic
/// host. Both drivers (the virtual-time engine and the real-time actors)
/// hold these and call them in the order of the module doc.
#[derive(Debug)]
pub enum Node {
    /// A switch.
    Switch(Box<Switch>),
    /// A synthetic UDP host.
    UdpHost(Box<UdpHost>),
    /// A synthetic RoCEv2 host.
    RoceHost(Box<RoceHost>),
    /// A synthetic TCP host.
    TcpHost(Box<TcpHost>),
}

impl Node {
    /// Flows a host node sends (0 for a switch).
    pub fn flow_count(&self) -> usize {
        match self {
            Node::UdpHost(h) => h.tx_flows().len(),
            Node::TcpHost(h) => h.senders().len(),
            Node::RoceHost(h) => h.send_qps().len(),
            Node::Switch(_) => 0,
        }
    }

    /// Room for `n` more flows of a host node, allocated exactly (call it
    /// before adding a known number of flows).
    pub fn reserve_flows(&mut self, n: usize) {
        match self {
            Node::UdpHost(h) => h.reserve_flows(n),
            Node::TcpHost(h) => h.reserve_flows(n),
            Node::RoceHost(h) => h.reserve_flows(n),
            Node::Switch(_) => {}
        }
    }

    /// Gives a flow to a host node in the form its transport runs (UDP
    /// hosts take `udp`, RoCE and TCP hosts `sized`); a switch ignores it.
    pub fn add_flow(&mut self, udp: &UdpFlow, sized: &SizedFlow) {
        match self {
            Node::UdpHost(h) => h.add_flow(*udp),
            Node::TcpHost(h) => h.add_flow(*sized),
            Node::RoceHost(h) => h.add_flow(*sized),
            Node::Switch(_) => {}
        }
    }

    /// Handles a frame received on `port` at `now`.
    pub fn handle_frame(&mut self, now: Nanos, port: PortId, frame: BytesMut, out: &mut Vec<Transmit>) {
        match self {
            Node::Switch(s) => s.handle_frame(now, port, frame, out),
            Node::UdpHost(h) => h.handle_frame(now, port, frame, out),
            Node::RoceHost(h) => h.handle_frame(now, port, frame, out),
            Node::TcpHost(h) => h.handle_frame(now, port, frame, out),
        }
    }
    /// Handles timers due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos, out: &mut Vec<Transmit>) {
        match self {
            Node::Switch(s) => s.handle_timeout(now, out),
            Node::UdpHost(h) => h.handle_timeout(now, out),
            Node::RoceHost(h) => h.handle_timeout(now, out),
            Node::TcpHost(h) => h.handle_timeout(now, out),
        }
    }
    /// A link of this node went up or down (hosts drop at the link instead).
    pub fn set_port_up(&mut self, now: Nanos, port: PortId, up: bool, out: &mut Vec<Transmit>) {
        if let Node::Switch(s) = self {
            s.set_port_up(now, port, up, out)
        }
    }
    /// Installs a routing update on a switch ([`Switch::install_routes`]);
    /// a host has no routes.
    pub fn install_routes(&mut self, routes: &[weft_tofino::l3::Route]) {
        if let Node::Switch(s) = self {
            s.install_routes(routes);
        }
    }
    /// Restarts a switch at `now` ([`Switch::restart`]: it loses its
    /// register state, as a rebooted ASIC); a host cannot restart.
    pub fn restart(&mut self, now: Nanos, out: &mut Vec<Transmit>) -> Result<(), NodeError> {
        match self {
            Node::Switch(s) => Ok(s.restart(now, out)?),
            Node::UdpHost(h) => Err(SwitchError::NotASwitch(h.name().to_string()).into()),
            Node::RoceHost(h) => Err(SwitchError::NotASwitch(h.name().to_string()).into()),
            Node::TcpHost(h) => Err(SwitchError::NotASwitch(h.name().to_string()).into()),
        }
    }
    /// Whether [`Node::restart`] can restart this node (a switch built
    /// from its spec).
    pub fn can_restart(&self) -> bool {
        matches!(self, Node::Switch(s) if s.can_restart())
    }
    /// A link of this node changed rate.
    pub fn set_port_rate(&mut self, now: Nanos, port: PortId, rate: BitRate) {
        match self {
            Node::Switch(s) => s.set_port_rate(now, port, rate),
            Node::UdpHost(h) => h.set_port_rate(now, rate),
            Node::RoceHost(h) => h.set_port_rate(now, rate),
            Node::TcpHost(h) => h.set_port_rate(now, rate),
        }
    }
    /// The PFC frames this node received (empty unless enabled with
    /// [`Node::pfc_log_mut`]).
    pub fn pfc_log(&self) -> &crate::pfc_log::PfcLog {
        match self {
            Node::Switch(s) => s.pfc_log(),
            Node::UdpHost(h) => h.pfc_log(),
            Node::RoceHost(h) => h.pfc_log(),
            Node::TcpHost(h) => h.pfc_log(),
        }
    }
    /// The PFC log, to enable it before a run.
    pub fn pfc_log_mut(&mut self) -> &mut crate::pfc_log::PfcLog {
        match self {
            Node::Switch(s) => s.pfc_log_mut(),
            Node::UdpHost(h) => h.pfc_log_mut(),
            Node::RoceHost(h) => h.pfc_log_mut(),
            Node::TcpHost(h) => h.pfc_log_mut(),
        }
    }
    /// A host's frame pool (`None` for a switch).
    pub fn frame_pool(&self) -> Option<&weft_wire::buffer::FramePool> {
        match self {
            Node::Switch(_) => None,
            Node::UdpHost(h) => Some(h.frame_pool()),
            Node::RoceHost(h) => Some(h.frame_pool()),
            Node::TcpHost(h) => Some(h.frame_pool()),
        }
    }
    /// A host's frame pool, to set its tail policy (`None` for a switch).
    pub fn frame_pool_mut(&mut self) -> Option<&mut weft_wire::buffer::FramePool> {
        match self {
            Node::Switch(_) => None,
            Node::UdpHost(h) => Some(h.frame_pool_mut()),
            Node::RoceHost(h) => Some(h.frame_pool_mut()),
            Node::TcpHost(h) => Some(h.frame_pool_mut()),
        }
    }
    /// Whether the node's own traffic is over: a host's flows all sent
    /// (TCP and RoCE: all acknowledged; UDP: the last byte sent); a switch
    /// always. A fabric whose switches run periodic packet generators
    /// (hello messages) is never idle, so its runs end when every host's
    /// traffic is over (see `weft_sim`).
    pub fn traffic_finished(&self) -> bool {
        match self {
            Node::Switch(_) => true,
            Node::UdpHost(h) => h.tx_flows().iter().all(UdpHost::flow_done),
            Node::RoceHost(h) => h.send_qps().iter().all(|q| q.snd_una >= q.packets),
            Node::TcpHost(h) => h.senders().iter().all(|s| s.snd_una >= s.flow.size),
        }
    }
    /// How far this host's flows have got at `now`, for a progress
    /// watchdog: a count that grows whenever one of its flows moves forward
    /// (payload bytes received in order, plus, for RoCE and TCP, bytes or
    /// packets its senders had acknowledged; UDP, which never resends,
    /// bytes its senders sent), and whether one of its flows has started
    /// and not finished. A switch: `(0, false)`.
    pub fn flow_progress(&self, now: Nanos) -> FlowProgress {
        let mut p = FlowProgress::default();
        match self {
            Node::Switch(_) => {}
            Node::UdpHost(h) => {
                p.count = h.rx_flows().values().map(|f| f.bytes).sum::<u64>() + h.tx_flows().iter().map(|t| t.bytes_sent).sum::<u64>();
                p.active = h.tx_flows().iter().any(|t| t.flow.start <= now && !UdpHost::flow_done(t));
            }
            Node::RoceHost(h) => {
                p.count = h.recv_qps().values().map(|q| q.bytes).sum::<u64>() + h.send_qps().iter().map(|q| q.snd_una as u64).sum::<u64>();
                p.active = h.send_qps().iter().any(|q| q.flow.start <= now && q.snd_una < q.packets);
            }
            Node::TcpHost(h) => {
                p.count = h.receivers().values().map(|r| r.rcv_nxt).sum::<u64>() + h.senders().iter().map(|s| s.snd_una).sum::<u64>();
                p.active = h.senders().iter().any(|s| s.flow.start <= now && s.snd_una < s.flow.size);
            }
        }
        p
    }
    /// The flows this host has started and not finished at `now`: (id,
    /// destination, share done in per mille), for a stall report.
    pub fn unfinished_flows(&self, now: Nanos) -> Vec<(weft_wire::ids::FlowId, weft_wire::Ipv4Address, u64)> {
        let permille = |done: u64, of: u64| done.saturating_mul(1000) / of.max(1);
        match self {
            Node::Switch(_) => Vec::new(),
            Node::UdpHost(h) => {
                h.tx_flows().iter().filter(|t| t.flow.start <= now && !UdpHost::flow_done(t)).map(|t| (t.flow.id, t.flow.dst, 0)).collect()
            }
            Node::RoceHost(h) => h
                .send_qps()
                .iter()
                .filter(|q| q.flow.start <= now && q.snd_una < q.packets)
                .map(|q| (q.flow.id, q.flow.dst, permille(q.snd_una as u64, q.packets as u64)))
                .collect(),
            Node::TcpHost(h) => h
                .senders()
                .iter()
                .filter(|s| s.flow.start <= now && s.snd_una < s.flow.size)
                .map(|s| (s.flow.id, s.flow.dst, permille(s.snd_una, s.flow.size)))
                .collect(),
        }
    }
    /// Whether the node generates traffic of its own forever (a switch
    /// whose program declared periodic packet generators).
    pub fn has_background_traffic(&self) -> bool {
        matches!(self, Node::Switch(s) if s.has_periodic_generators())
    }
    /// The earliest time [`Node::handle_timeout`] must be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Nanos> {
        match self {
            Node::Switch(s) => s.poll_timeout(),
            Node::UdpHost(h) => h.poll_timeout(),
            Node::RoceHost(h) => h.poll_timeout(),
            Node::TcpHost(h) => h.poll_timeout(),
        }
    }
}

/// [`Node::flow_progress`]: what a progress watchdog reads of a host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowProgress {
    /// Grows whenever a flow of the host moves forward (never shrinks).
    pub count: u64,
    /// A flow of the host has started and not finished.
    pub active: bool,
}

/// How to build the nodes of a fabric (both drivers use the same, so a
/// real-time process and a virtual-time run of one fabric and seed build
/// identical nodes).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Run seed.
    pub seed: u64,
    /// Panic on program errors (tests).
    pub strict: bool,
    /// Default ingress snapshot period.
    pub snapshot_period_ns: Nanos,
    /// Control-plane latency.
    pub cpu_latency_ns: Nanos,
    /// What the hosts run.
    pub transport: HostTransport,
    /// What the hosts' frame pools assume of the frames they receive
    /// ([`weft_wire::buffer::TailPolicy`]): `Trust` only where every frame
    /// a host can receive was built by weft's hosts and programs (virtual
    /// time), `Write` where frames come from outside weft.
    pub frame_tails: weft_wire::buffer::TailPolicy,
}

/// What synthetic hosts run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum HostTransport {
    /// UDP flows ([`UdpHost`]).
    Udp,
    /// RoCEv2 RC with DCQCN ([`RoceHost`]).
    Roce(RoceConfig),
    /// TCP NewReno / DCTCP ([`TcpHost`]).
    Tcp(TcpConfig),
}

/// Traffic the synthetic hosts of a live fabric send (`weft up
/// --workload`): their transport and the flows, each with its source host,
/// in both forms [`Node::add_flow`] takes. Built by the orchestrator exactly
/// as for `weft run`, so a live fabric and a run of the same options and
/// seed send the same flows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostWorkload {
    /// What the hosts run.
    pub transport: HostTransport,
    /// (source host, UDP form, sized form), in plan order.
    pub flows: Vec<(NodeId, UdpFlow, SizedFlow)>,
}

impl HostWorkload {
    /// Adds every flow whose source is among `nodes` (index = node id;
    /// `None`: not built here) to its host.
    pub fn add_to(&self, nodes: &mut [Option<Node>]) {
        for (src, udp, sized) in &self.flows {
            if let Some(Some(n)) = nodes.get_mut(src.index()) {
                n.add_flow(udp, sized);
            }
        }
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            seed: 1,
            strict: false,
            snapshot_period_ns: 1_000,
            cpu_latency_ns: 10_000,
            transport: HostTransport::Udp,
            frame_tails: weft_wire::buffer::TailPolicy::Write,
        }
    }
}

/// Errors building the nodes of a fabric.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A switch could not be built.
    #[error(transparent)]
    Switch(#[from] SwitchError),
    /// A host could not be built.
    #[error(transparent)]
    Host(#[from] crate::host::HostError),
    /// Unknown target profile.
    #[error("switch `{switch}`: unknown target `{target}` (known: tofino2, tofino1, unlimited, bmv2, bmv2-opt)")]
    UnknownTarget {
        /// Switch.
        switch: String,
        /// Target name.
        target: String,
    },
}

/// Derives a node's RNG seed from the run seed (SplitMix64 of both).
pub fn node_seed(run_seed: u64, node: NodeId) -> u64 {
    let mut z = run_seed ^ ((node.0 as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The switch configuration a fabric node asks for.
pub fn switch_config(fabric: &FabricSpec, node: NodeId, cfg: &NodeConfig) -> Result<SwitchConfig, NodeError> {
    let n = &fabric.nodes[node.index()];
    let Some(s) = n.as_switch() else {
        return Err(SwitchError::NotASwitch(n.name.clone()).into());
    };
    let mut target =
        TargetProfile::by_name(&s.target).ok_or_else(|| NodeError::UnknownTarget { switch: n.name.clone(), target: s.target.clone() })?;
    if let Some(sw) = &mut target.software {
        sw.per_packet_ns = s.packet_time_ns.unwrap_or(sw.per_packet_ns);
        sw.jitter = s.packet_jitter.unwrap_or(sw.jitter);
    }
    let queues = s.queues_per_port.unwrap_or(target.queues_per_port);
    let buffer = s.buffer_bytes.unwrap_or(target.buffer_bytes());
    let mut tm = TmConfig::standard(queues, buffer, target.cell_bytes, s.ecn);
    if s.pfc {
        tm.pfc = Some(PfcConfig { classes: 0x7f, pause_ns: s.pfc_pause_ns, ..PfcConfig::default() });
    }
    tm.held_outside_pfc = s.held_outside_pfc;
    tm.pfc_watchdog = s.pfc_watchdog;
    tm.queue_limit_packets = s.queue_limit_packets.or(target.software.map(|sw| sw.queue_packets));
    if s.buffer_rules == BufferRules::Ns3 {
        let headroom_bytes =
            n.ports.iter().map(|p| Ns3Mmu::headroom_for(p.rate.bps(), fabric.links.get(p.link.index()).map_or(0, |l| l.delay))).collect();
        tm.buffer_model = BufferModel::Ns3(Ns3Mmu { headroom_bytes });
    }
    Ok(SwitchConfig {
        target,
        tm,
        snapshot_period_ns: cfg.snapshot_period_ns,
        cpu_latency_ns: s.cpu_latency_ns.unwrap_or(cfg.cpu_latency_ns),
        seed: node_seed(cfg.seed, node),
        strict: cfg.strict,
    })
}

/// Builds every node of `fabric` (the node factory of both drivers).
pub fn build_nodes(fabric: &FabricSpec, cfg: &NodeConfig) -> Result<Vec<Node>, NodeError> {
    let mut nodes = Vec::with_capacity(fabric.nodes.len());
    for (i, n) in fabric.nodes.iter().enumerate() {
        let id = NodeId(i as u32);
        nodes.push(match &n.kind {
            NodeKind::Switch(_) => Node::Switch(Box::new(Switch::from_spec(id, n, switch_config(fabric, id, cfg)?)?)),
            NodeKind::Host(_) => match cfg.transport {
                HostTransport::Udp => Node::UdpHost(Box::new(UdpHost::from_spec(id, n)?)),
                HostTransport::Roce(rc) => Node::RoceHost(Box::new(RoceHost::from_spec(id, n, rc)?)),
                HostTransport::Tcp(tc) => Node::TcpHost(Box::new(TcpHost::from_spec(id, n, tc)?)),
            },
        });
        if let Some(pool) = nodes.last_mut().and_then(Node::frame_pool_mut) {
            pool.set_policy(cfg.frame_tails);
        }
    }
    Ok(nodes)
}
