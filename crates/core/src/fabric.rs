//! The resolved description of a fabric: nodes, their ports, links,
//! addresses, routes and the link-event schedule.
//!
//! The orchestrator builds a [`FabricSpec`] from a topology file; drivers
//! (virtual time, real time) instantiate switches and hosts from it. It is
//! plain serde data so it can be shipped to emu-node processes.
//!
//! Invariants (checked by [`FabricSpec::validate`]): every port belongs to
//! exactly one link and its peer fields mirror the link; MACs are unique;
//! host IPs are unique; routes only name existing ports.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use weft_schemes::{Params, TimeScale};
pub use weft_tofino::l3::Route;
pub use weft_tofino::SwitchRole;
use weft_tofino::{BufferRules, RedConfig};
use weft_wire::ids::{LinkId, NodeId, PortId};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::{EthernetAddress, Ipv4Address};

/// Kind of host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostKind {
    /// A sans-IO synthetic endpoint.
    Synthetic,
    /// A Linux network namespace behind a TAP device (real time).
    Tap,
    /// A soft-RoCE host: a qemu micro-VM whose kernel has `rdma_rxe`, its
    /// NIC a port of the fabric (real time, `weft_rt::vm`).
    Rxe,
}

/// A port of a node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortSpec {
    /// Link it belongs to.
    pub link: LinkId,
    /// MAC of this port.
    pub mac: EthernetAddress,
    /// Node at the other end.
    pub peer: NodeId,
    /// Port at the other end.
    pub peer_port: PortId,
    /// MAC at the other end.
    pub peer_mac: EthernetAddress,
    /// Line rate.
    pub rate: BitRate,
    /// MTU (IP bytes).
    pub mtu: u16,
    /// For a leaf port facing a host: the gateway address it answers ARP for.
    pub gateway: Option<Ipv4Address>,
}

/// Switch-specific settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SwitchSpec {
    /// Role.
    pub role: SwitchRole,
    /// Target profile name.
    pub target: String,
    /// Scheme name.
    pub scheme: String,
    /// Scheme parameter overrides.
    pub params: Params,
    /// Parameters that apply only while the switch runs the named scheme
    /// (a topology's `[switches.params.SCHEME]`), under [`SwitchSpec::params`].
    #[serde(default)]
    pub scheme_params: BTreeMap<String, Params>,
    /// Shared buffer (bytes); `None` = the target's.
    pub buffer_bytes: Option<u64>,
    /// Queues per port; `None` = the target's.
    pub queues_per_port: Option<u8>,
    /// Drop-tail limit of every data queue in packets (ns-2's DropTail
    /// `limit`); `None`: only the shared buffer's dynamic threshold.
    #[serde(default)]
    pub queue_limit_packets: Option<u32>,
    /// The switch CPU's control-plane latency (its table and register
    /// writes take effect this long after it handles an event); `None`:
    /// the run's default (10 µs).
    #[serde(default)]
    pub cpu_latency_ns: Option<Nanos>,
    /// A software target's mean per-packet pipeline time, instead of the
    /// target's (`packet_time` in a topology; `SoftwarePipeline`).
    #[serde(default)]
    pub packet_time_ns: Option<Nanos>,
    /// A software target's per-packet time spread (coefficient of
    /// variation, 0 to 1), instead of the target's.
    #[serde(default)]
    pub packet_jitter: Option<f64>,
    /// Egress ports are rated in packets, as BMv2's `set_queue_rate`: every
    /// frame holds its port for the time of a full-size frame (MTU +
    /// Ethernet header) at the link's rate, whatever its own size
    /// (`queue_rate = "packets"` in a topology).
    #[serde(default)]
    pub queue_rate_packets: bool,
    /// PFC enabled (lossless).
    pub pfc: bool,
    /// ECN marking on data queues.
    pub ecn: Option<RedConfig>,
    /// Buffer-sharing, PFC and ECN rules of the traffic manager.
    #[serde(default)]
    pub buffer_rules: BufferRules,
    /// Packets held in pipeline-paused queues enter the ingress PFC
    /// accounting only when their queue resumes (`TmConfig::held_outside_pfc`).
    #[serde(default)]
    pub held_outside_pfc: bool,
    /// A PFC watchdog on every port (`TmConfig::pfc_watchdog`).
    #[serde(default)]
    pub pfc_watchdog: Option<weft_tofino::tm::PfcWatchdog>,
    /// How long a pause frame pauses, when not the default 977 quanta
    /// (`PfcConfig::pause_ns`).
    #[serde(default)]
    pub pfc_pause_ns: Option<Nanos>,
    /// Wire time of the control frames its ports send, when not their
    /// length (calibration, `weft run --frame-bytes`).
    #[serde(default)]
    pub control_frame_bytes: weft_wire::frame::ControlFrameBytes,
    /// Routing table.
    pub routes: Vec<Route>,
    /// For a leaf (a switch hosts attach to): its index among the fabric's
    /// leaves (0-based, by node order). Computed with the routes.
    #[serde(default)]
    pub leaf_index: Option<u16>,
    /// Number of leaves in the fabric. Computed with the routes.
    #[serde(default)]
    pub leaves: u16,
    /// For a leaf: the largest number of equal-cost upward next hops at the
    /// switches one hop above it (1 in a leaf-spine, k/2 in a fat-tree), so a
    /// source-routing scheme can name every path by (own uplink, next-tier
    /// uplink). Computed with the routes.
    #[serde(default)]
    pub upper_fanout: u16,
    /// For a spine, aggregation or core switch: its position among the
    /// upward ports (in port order) of the switches one tier below it,
    /// where they all agree. Computed with the routes.
    #[serde(default)]
    pub tier_position: Option<u16>,
    /// The largest number of hosts on one leaf. Computed with the routes.
    #[serde(default)]
    pub hosts_per_leaf: u16,
    /// Per leaf index: the address of its first host (an address routed to
    /// that leaf, what a program sends its own packets for the leaf to).
    /// Computed with the routes.
    #[serde(default)]
    pub leaf_addresses: Vec<Ipv4Address>,
    /// Multiplier of the scheme's time parameters (docs/SCHEMES.md#parameter-scaling): 1 unless
    /// the run scales them to its link rate.
    #[serde(default)]
    pub time_scale: TimeScale,
}

impl SwitchSpec {
    /// The parameters its scheme gets: those for that scheme, overridden by
    /// the plain ones.
    pub fn effective_params(&self) -> Params {
        let mut p = self.scheme_params.get(&self.scheme).cloned().unwrap_or_default();
        p.extend(self.params.iter().map(|(k, v)| (k.clone(), v.clone())));
        p
    }
    /// A switch running `scheme` on `tofino2` with the target's buffer, no
    /// PFC, no ECN, and routes still to be computed.
    pub fn new(role: SwitchRole, scheme: &str) -> Self {
        SwitchSpec {
            role,
            target: "tofino2".into(),
            scheme: scheme.into(),
            params: Params::new(),
            scheme_params: BTreeMap::new(),
            buffer_bytes: None,
            queues_per_port: None,
            pfc: false,
            ecn: None,
            buffer_rules: BufferRules::Tofino,
            held_outside_pfc: false,
            pfc_watchdog: None,
            pfc_pause_ns: None,
            control_frame_bytes: Default::default(),
            routes: Vec::new(),
            leaf_index: None,
            leaves: 0,
            upper_fanout: 0,
            queue_limit_packets: None,
            cpu_latency_ns: None,
            packet_time_ns: None,
            packet_jitter: None,
            queue_rate_packets: false,
            tier_position: None,
            hosts_per_leaf: 0,
            leaf_addresses: Vec::new(),
            time_scale: TimeScale::ONE,
        }
    }
}

/// Host-specific settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HostSpec {
    /// Kind.
    pub kind: HostKind,
    /// Address.
    pub ip: Ipv4Address,
    /// Prefix length of its subnet.
    pub prefix_len: u8,
    /// MAC.
    pub mac: EthernetAddress,
    /// Default gateway (its leaf).
    pub gateway: Ipv4Address,
}

/// What a node is.
// A fabric spec is built once per run and holds at most thousands of
// nodes: the host variant's unused bytes cost nothing worth a Box on every
// switch access.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum NodeKind {
    /// A switch.
    Switch(SwitchSpec),
    /// A host.
    Host(HostSpec),
}

/// A node of the fabric.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeSpec {
    /// Unique name.
    pub name: String,
    /// Kind.
    pub kind: NodeKind,
    /// Ports (index = [`PortId`]).
    pub ports: Vec<PortSpec>,
    /// emu-node process this node is placed on (0 when unplaced).
    pub placement: u32,
}

impl NodeSpec {
    /// The switch spec, if a switch.
    pub fn as_switch(&self) -> Option<&SwitchSpec> {
        match &self.kind {
            NodeKind::Switch(s) => Some(s),
            NodeKind::Host(_) => None,
        }
    }
    /// The host spec, if a host.
    pub fn as_host(&self) -> Option<&HostSpec> {
        match &self.kind {
            NodeKind::Host(h) => Some(h),
            NodeKind::Switch(_) => None,
        }
    }
}

/// A point-to-point link.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LinkSpec {
    /// Unique name (`a-b` for generated topologies).
    pub name: String,
    /// One end.
    pub a: (NodeId, PortId),
    /// Other end.
    pub b: (NodeId, PortId),
    /// Rate.
    pub rate: BitRate,
    /// One-way propagation delay.
    pub delay: Nanos,
    /// MTU (IP bytes).
    pub mtu: u16,
}

/// A scheduled change of a link.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LinkAction {
    /// The link fails (both directions).
    Down,
    /// The link recovers.
    Up,
    /// The link runs at a lower rate.
    Degrade(BitRate),
    /// Each direction loses frames at random with this probability, in
    /// parts per million ([`crate::link_loss`]; 0 ends the loss).
    Loss(u32),
}

/// A link event at a time.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct LinkEvent {
    /// When.
    pub at: Nanos,
    /// Which link.
    pub link: LinkId,
    /// What happens.
    pub action: LinkAction,
}

/// A scheduled change of a switch. A switch going down or up is every
/// link of it going down or up ([`LinkEvent`]s); what only a node has is
/// its restart.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NodeAction {
    /// The switch reboots and loses its register state
    /// ([`crate::switch::Switch::restart`]). Its links go down and up
    /// around it as separate link events when the reboot takes time.
    Restart,
    /// The switch installs routing table `k` of [`FabricSpec::route_updates`]:
    /// what a control plane computed after a link went down or up
    /// ([`FabricSpec::add_routing_updates`]).
    Routes(u32),
}

/// A node event at a time.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeEvent {
    /// When.
    pub at: Nanos,
    /// Which switch.
    pub node: NodeId,
    /// What happens.
    pub action: NodeAction,
}

/// A whole fabric.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct FabricSpec {
    /// Name (from the topology file).
    pub name: String,
    /// Nodes.
    pub nodes: Vec<NodeSpec>,
    /// Links.
    pub links: Vec<LinkSpec>,
    /// Link events.
    pub schedule: Vec<LinkEvent>,
    /// Node events (restarts), in time order. At one instant, link events
    /// come first.
    #[serde(default)]
    pub node_schedule: Vec<NodeEvent>,
    /// Routing tables the node events [`NodeAction::Routes`] install (empty
    /// unless [`FabricSpec::add_routing_updates`]).
    #[serde(default)]
    pub route_updates: Vec<Vec<Route>>,
}

/// Every switch's equal-cost routes over a set of links, and the leaves
/// they were computed for (`FabricSpec::routing`).
struct Routing {
    leaf_hosts: BTreeMap<NodeId, Vec<(NodeId, PortId)>>,
    leaf_index: BTreeMap<NodeId, u16>,
    tables: Vec<(NodeId, Vec<Route>)>,
}

/// The own IPv4 address of switch `node`: 169.254.n.n (link-local, so no
/// host of a fabric has it), what the switch's control messages carry.
pub fn switch_address(node: NodeId) -> Ipv4Address {
    let n = (node.0 as u16).to_be_bytes();
    Ipv4Address::new(169, 254, n[0], n[1])
}

/// The largest MTU a link takes (jumbo frames).
pub const MAX_MTU: u16 = 9216;

/// The default MTU of a switch-to-switch link whose hosts' links have
/// `host_mtu`: that plus the overlay header (outer Ethernet, IPv4, UDP,
/// VXLAN: 50 bytes), so that a scheme with an overlay (CONGA) can
/// encapsulate every host frame, as VXLAN fabrics raise their underlay MTU
/// (RFC 7348 §4.3). Capped at [`MAX_MTU`]. Schemes without an overlay never
/// see a frame larger than the hosts' MTU, so for them it changes nothing.
pub fn switch_link_mtu(host_mtu: u16) -> u16 {
    (host_mtu as usize + weft_wire::vxlan::OVERLAY_LEN).min(MAX_MTU as usize) as u16
}

/// The most nodes a fabric may have: switch MACs ([`switch_port_mac`]) and
/// addresses ([`switch_address`]) carry a 16-bit node id.
pub const MAX_NODES: usize = 1 << 16;

/// MAC of port `port` of switch `node`: 02:57:nn:nn:pp:pp.
pub fn switch_port_mac(node: NodeId, port: PortId) -> EthernetAddress {
    let n = node.0.to_be_bytes();
    let p = port.0.to_be_bytes();
    EthernetAddress([0x02, 0x57, n[2], n[3], p[0], p[1]])
}

/// MAC of a host: 02:00 followed by its IPv4 address.
pub fn host_mac(ip: Ipv4Address) -> EthernetAddress {
    let o = ip.octets();
    EthernetAddress([0x02, 0x00, o[0], o[1], o[2], o[3]])
}

/// A fabric-level inconsistency.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FabricError(pub String);

impl FabricSpec {
    /// Adds a node without ports; returns its id.
    pub fn add_node(&mut self, name: impl Into<String>, kind: NodeKind) -> NodeId {
        self.nodes.push(NodeSpec { name: name.into(), kind, ports: Vec::new(), placement: 0 });
        NodeId((self.nodes.len() - 1) as u32)
    }

    /// Connects `a` and `b` with a new link, creating one port on each.
    pub fn connect(&mut self, name: impl Into<String>, a: NodeId, b: NodeId, rate: BitRate, delay: Nanos, mtu: u16) -> LinkId {
        let link = LinkId(self.links.len() as u32);
        let pa = PortId(self.nodes[a.index()].ports.len() as u16);
        let pb = PortId(self.nodes[b.index()].ports.len() as u16);
        let mac_of = |s: &Self, n: NodeId, p: PortId| match &s.nodes[n.index()].kind {
            NodeKind::Host(h) => h.mac,
            NodeKind::Switch(_) => switch_port_mac(n, p),
        };
        let ma = mac_of(self, a, pa);
        let mb = mac_of(self, b, pb);
        // A switch port facing a host answers ARP for the host's gateway.
        let gw_a = self.nodes[b.index()].as_host().map(|h| h.gateway).filter(|_| self.nodes[a.index()].as_switch().is_some());
        let gw_b = self.nodes[a.index()].as_host().map(|h| h.gateway).filter(|_| self.nodes[b.index()].as_switch().is_some());
        self.nodes[a.index()].ports.push(PortSpec { link, mac: ma, peer: b, peer_port: pb, peer_mac: mb, rate, mtu, gateway: gw_a });
        self.nodes[b.index()].ports.push(PortSpec { link, mac: mb, peer: a, peer_port: pa, peer_mac: ma, rate, mtu, gateway: gw_b });
        self.links.push(LinkSpec { name: name.into(), a: (a, pa), b: (b, pb), rate, delay, mtu });
        link
    }

    /// Node id by name.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().position(|n| n.name == name).map(|i| NodeId(i as u32))
    }

    /// Link id by name (also accepts `b-a` for a link named `a-b`).
    pub fn link_by_name(&self, name: &str) -> Option<LinkId> {
        if let Some(i) = self.links.iter().position(|l| l.name == name) {
            return Some(LinkId(i as u32));
        }
        let (x, y) = name.split_once('-')?;
        let (a, b) = (self.node_by_name(x)?, self.node_by_name(y)?);
        self.links.iter().position(|l| (l.a.0 == a && l.b.0 == b) || (l.a.0 == b && l.b.0 == a)).map(|i| LinkId(i as u32))
    }

    /// Host node ids in order.
    pub fn hosts(&self) -> Vec<NodeId> {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].as_host().is_some()).map(|i| NodeId(i as u32)).collect()
    }

    /// Switch node ids in order.
    pub fn switches(&self) -> Vec<NodeId> {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].as_switch().is_some()).map(|i| NodeId(i as u32)).collect()
    }

    /// The switch a host is attached to, and the port on it.
    pub fn attachment(&self, host: NodeId) -> Option<(NodeId, PortId)> {
        let p = self.nodes.get(host.index())?.ports.first()?;
        Some((p.peer, p.peer_port))
    }

    /// Shortest-path equal-cost routes of every switch over the links not in
    /// `down`: a /32 per local host on its leaf, and one route per leaf
    /// subnet (its hosts' common /24, or /32 per host when they do not share
    /// one) elsewhere; a prefix no path reaches has no route.
    fn routing(&self, down: &std::collections::BTreeSet<LinkId>) -> Routing {
        let n = self.nodes.len();
        // Leaves and their hosts.
        let mut leaf_hosts: BTreeMap<NodeId, Vec<(NodeId, PortId)>> = BTreeMap::new();
        for h in self.hosts() {
            if let Some((sw, port)) = self.attachment(h) {
                leaf_hosts.entry(sw).or_default().push((h, port));
            }
        }
        // Destination prefixes per leaf.
        let mut prefixes: Vec<(NodeId, Ipv4Address, u8)> = Vec::new();
        let mut subnet_owner: BTreeMap<u32, Vec<NodeId>> = BTreeMap::new();
        for (leaf, hosts) in &leaf_hosts {
            for (h, _) in hosts {
                if let Some(hs) = self.nodes[h.index()].as_host() {
                    subnet_owner.entry(hs.ip.0 & 0xffff_ff00).or_default().push(*leaf);
                }
            }
        }
        for (leaf, hosts) in &leaf_hosts {
            let ips: Vec<Ipv4Address> = hosts.iter().filter_map(|(h, _)| self.nodes[h.index()].as_host().map(|x| x.ip)).collect();
            let net = ips[0].0 & 0xffff_ff00;
            let shared =
                ips.iter().all(|ip| ip.0 & 0xffff_ff00 == net) && subnet_owner.get(&net).is_some_and(|o| o.iter().all(|l| l == leaf));
            if shared {
                prefixes.push((*leaf, Ipv4Address(net), 24));
            } else {
                prefixes.extend(ips.iter().map(|ip| (*leaf, *ip, 32)));
            }
        }
        let leaf_index: BTreeMap<NodeId, u16> = leaf_hosts.keys().enumerate().map(|(i, l)| (*l, i as u16)).collect();
        // BFS distances over switch-switch links from every leaf.
        let is_switch: Vec<bool> = self.nodes.iter().map(|x| x.as_switch().is_some()).collect();
        let mut dist_from: BTreeMap<NodeId, Vec<u32>> = BTreeMap::new();
        for leaf in leaf_hosts.keys() {
            let mut dist = vec![u32::MAX; n];
            let mut q = VecDeque::new();
            dist[leaf.index()] = 0;
            q.push_back(*leaf);
            while let Some(u) = q.pop_front() {
                for p in &self.nodes[u.index()].ports {
                    let v = p.peer;
                    if is_switch[v.index()] && dist[v.index()] == u32::MAX && !down.contains(&p.link) {
                        dist[v.index()] = dist[u.index()] + 1;
                        q.push_back(v);
                    }
                }
            }
            dist_from.insert(*leaf, dist);
        }
        let mut tables = Vec::new();
        for s in self.switches() {
            let mut routes = Vec::new();
            if let Some(hosts) = leaf_hosts.get(&s) {
                for (h, port) in hosts {
                    if let Some(hs) = self.nodes[h.index()].as_host() {
                        routes.push(Route { prefix: hs.ip, len: 32, ports: vec![*port], dst_leaf: leaf_index.get(&s).copied() });
                    }
                }
            }
            for (leaf, prefix, len) in &prefixes {
                if *leaf == s {
                    continue;
                }
                let dist = &dist_from[leaf];
                let d = dist[s.index()];
                if d == u32::MAX {
                    continue;
                }
                let ports: Vec<PortId> = self.nodes[s.index()]
                    .ports
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| is_switch[p.peer.index()] && !down.contains(&p.link) && dist[p.peer.index()].wrapping_add(1) == d)
                    .map(|(i, _)| PortId(i as u16))
                    .collect();
                if !ports.is_empty() {
                    routes.push(Route { prefix: *prefix, len: *len, ports, dst_leaf: leaf_index.get(leaf).copied() });
                }
            }
            tables.push((s, routes));
        }
        Routing { leaf_hosts, leaf_index, tables }
    }

    /// Adds the routing updates a control plane makes after every link of
    /// the schedule that goes down or comes up: each switch whose
    /// equal-cost routes change (computed as at the start, over the links up
    /// then) installs its new ones `per_hop` × (1 + its distance in switch
    /// hops from the nearer end of the link) after the change, as a failure
    /// learnt hop by hop (BGP-like; the link's own ends still skip a down
    /// port at once, as without updates). A switch applies the updates of
    /// successive changes in their order. Off unless called
    /// (`weft run --routing-update`): by default a switch knows only its
    /// own ports' state, and a failure elsewhere black-holes what hashes
    /// onto it.
    pub fn add_routing_updates(&mut self, per_hop: Nanos) {
        let mut changes: Vec<(Nanos, LinkId, bool)> = self
            .schedule
            .iter()
            .filter_map(|e| match e.action {
                LinkAction::Down => Some((e.at, e.link, true)),
                LinkAction::Up => Some((e.at, e.link, false)),
                _ => None,
            })
            .collect();
        changes.sort_by_key(|c| c.0);
        let mut down = std::collections::BTreeSet::new();
        let mut current: BTreeMap<NodeId, Vec<Route>> = self
            .switches()
            .into_iter()
            .map(|s| (s, self.nodes[s.index()].as_switch().map(|x| x.routes.clone()).unwrap_or_default()))
            .collect();
        let mut last: BTreeMap<NodeId, Nanos> = BTreeMap::new();
        for (at, link, goes_down) in changes {
            let changed = if goes_down { down.insert(link) } else { down.remove(&link) };
            if !changed {
                continue;
            }
            let hops = self.switch_hops_from(link, &down);
            let far = hops.iter().filter(|&&h| h != u32::MAX).max().copied().unwrap_or(0) + 1;
            for (s, routes) in self.routing(&down).tables {
                if current.get(&s) == Some(&routes) {
                    continue;
                }
                let d = hops.get(s.index()).copied().filter(|&h| h != u32::MAX).unwrap_or(far);
                let when = (at + per_hop * (1 + d as u64)).max(last.get(&s).copied().unwrap_or(0));
                last.insert(s, when);
                self.node_schedule.push(NodeEvent { at: when, node: s, action: NodeAction::Routes(self.route_updates.len() as u32) });
                self.route_updates.push(routes.clone());
                current.insert(s, routes);
            }
        }
        self.node_schedule.sort_by_key(|e| e.at);
    }

    /// Switch hops from the nearer end of `link` to every node, over the
    /// switch links not in `down` (`u32::MAX`: not reached).
    fn switch_hops_from(&self, link: LinkId, down: &std::collections::BTreeSet<LinkId>) -> Vec<u32> {
        let mut dist = vec![u32::MAX; self.nodes.len()];
        let mut q = VecDeque::new();
        if let Some(l) = self.links.get(link.index()) {
            for end in [l.a.0, l.b.0] {
                if self.nodes[end.index()].as_switch().is_some() {
                    dist[end.index()] = 0;
                    q.push_back(end);
                }
            }
        }
        while let Some(u) = q.pop_front() {
            for p in &self.nodes[u.index()].ports {
                if self.nodes[p.peer.index()].as_switch().is_some() && dist[p.peer.index()] == u32::MAX && !down.contains(&p.link) {
                    dist[p.peer.index()] = dist[u.index()] + 1;
                    q.push_back(p.peer);
                }
            }
        }
        dist
    }

    /// Computes shortest-path equal-cost routes on every switch (`FabricSpec::routing`
    /// over every link) and what the schemes derive from them.
    pub fn compute_routes(&mut self) {
        let Routing { leaf_hosts, leaf_index, tables } = self.routing(&Default::default());
        for (s, routes) in tables {
            if let NodeKind::Switch(sw) = &mut self.nodes[s.index()].kind {
                sw.routes = routes;
                sw.leaf_index = leaf_index.get(&s).copied();
                sw.leaves = leaf_index.len() as u16;
            }
        }
        // Upward fan-out one tier above each leaf: the widest group of a
        // neighbouring switch towards another leaf (its upward choices).
        for (leaf, li) in &leaf_index {
            let mut fanout = 1u16;
            for p in &self.nodes[leaf.index()].ports {
                if let Some(up) = self.nodes[p.peer.index()].as_switch() {
                    for r in &up.routes {
                        if r.dst_leaf.is_some_and(|d| d != *li) {
                            fanout = fanout.max(r.ports.len() as u16);
                        }
                    }
                }
            }
            if let NodeKind::Switch(sw) = &mut self.nodes[leaf.index()].kind {
                sw.upper_fanout = fanout;
            }
        }
        // Tier positions: a switch's position among the upward ports of
        // each switch one tier below (leaf -> spine -> core), if they agree.
        let role = |id: NodeId| self.nodes[id.index()].as_switch().map(|s| s.role);
        let mut position: BTreeMap<NodeId, Option<u16>> = BTreeMap::new();
        for s in self.switches() {
            let above = match role(s) {
                Some(SwitchRole::Leaf) => SwitchRole::Spine,
                Some(SwitchRole::Spine) => SwitchRole::Core,
                _ => continue,
            };
            let ups = self.nodes[s.index()].ports.iter().filter(|p| role(p.peer) == Some(above));
            for (i, p) in ups.enumerate() {
                let e = position.entry(p.peer).or_insert(Some(i as u16));
                if *e != Some(i as u16) {
                    *e = None;
                }
            }
        }
        let hosts_per_leaf = leaf_hosts.values().map(|h| h.len() as u16).max().unwrap_or(0);
        let leaf_addresses: Vec<Ipv4Address> = leaf_hosts
            .values()
            .map(|h| h.first().and_then(|(h, _)| self.nodes[h.index()].as_host()).map_or(Ipv4Address(0), |x| x.ip))
            .collect();
        for s in self.switches() {
            if let NodeKind::Switch(sw) = &mut self.nodes[s.index()].kind {
                sw.tier_position = position.get(&s).copied().flatten();
                sw.hosts_per_leaf = hosts_per_leaf;
                sw.leaf_addresses = leaf_addresses.clone();
            }
        }
    }

    /// Checks the invariants of the module doc.
    pub fn validate(&self) -> Result<(), FabricError> {
        if self.nodes.len() > MAX_NODES {
            return Err(FabricError(format!(
                "{} nodes: at most {MAX_NODES} (switch MACs and addresses carry a 16-bit node id)",
                self.nodes.len()
            )));
        }
        let mut macs = BTreeMap::new();
        let mut ips = BTreeMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            for (pi, p) in node.ports.iter().enumerate() {
                if let Some(prev) = macs.insert(p.mac, (i, pi)) {
                    if self.nodes[prev.0].as_host().is_none() || node.as_host().is_none() || prev.0 != i {
                        return Err(FabricError(format!("MAC {} used twice ({} and {})", p.mac, self.nodes[prev.0].name, node.name)));
                    }
                }
                let l = self.links.get(p.link.index()).ok_or_else(|| FabricError(format!("{} port {pi}: unknown link", node.name)))?;
                let me = (NodeId(i as u32), PortId(pi as u16));
                if l.a != me && l.b != me {
                    return Err(FabricError(format!("{} port {pi} is not an end of link {}", node.name, l.name)));
                }
            }
            if let NodeKind::Host(h) = &node.kind {
                if node.ports.len() != 1 {
                    return Err(FabricError(format!("host {} has {} links; a host has exactly one", node.name, node.ports.len())));
                }
                if let Some(prev) = ips.insert(h.ip, i) {
                    return Err(FabricError(format!("address {} used by both {} and {}", h.ip, self.nodes[prev].name, node.name)));
                }
            }
            if let NodeKind::Switch(s) = &node.kind {
                for r in &s.routes {
                    if r.ports.iter().any(|p| p.index() >= node.ports.len()) {
                        return Err(FabricError(format!("{}: route {}/{} names a missing port", node.name, r.prefix, r.len)));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fabric_of_more_nodes_than_a_16_bit_id_is_refused() {
        let mut f = FabricSpec::default();
        let sw = || NodeKind::Switch(SwitchSpec::new(SwitchRole::Leaf, "ecmp"));
        for i in 0..MAX_NODES {
            f.add_node(format!("s{i}"), sw());
        }
        assert!(f.validate().is_ok());
        f.add_node("one-too-many", sw());
        assert!(f.validate().is_err_and(|e| e.0.contains("65537 nodes: at most 65536")));
    }
}
