//! Topology files: TOML, with generators (`leaf-spine`, `fat-tree`) or an
//! explicit list of switches, hosts and links (docs/ARCHITECTURE.md#topologies).
//!
//! TOML was chosen over YAML (`serde_yaml` is unmaintained) and because
//! `toml` reports byte spans, so every error names the file, the line and
//! the cause. Loading is all-or-nothing: a file either resolves into a
//! complete, validated [`emu_node::fabric::FabricSpec`] or yields one
//! [`TopologyError`]; nothing is half-built.
//!
//! Addressing plan (hierarchical, so LBSP's destination-LSB groups and
//! P4TE's prefixes work): host `j` of leaf/edge `e` in pod `p` is
//! `10.p.e.(j+2)/24`, its gateway (the leaf) `10.p.e.1`; leaf-spine is pod 0.
//! MACs: hosts `02:00:<ip>`, switch ports `02:57:<node>:<port>`.
//!
//! Names: `leaf<i>`, `spine<i>`, fat-tree `edge<p>_<i>`, `agg<p>_<i>`,
//! `core<i>`, hosts `h<i>` in leaf order; links `<a>-<b>` (lower tier first,
//! hosts first).
//!
//! See `topologies/README.md` for the full format with examples.

use crate::config::units::{parse_duration, parse_rate, parse_size};
use emu_node::fabric::{
    host_mac, switch_link_mtu, FabricSpec, HostKind, HostSpec, LinkAction, LinkEvent, NodeAction, NodeEvent, NodeKind, SwitchRole,
    SwitchSpec, MAX_MTU, MAX_NODES,
};
use emu_node::ids::{LinkId, NodeId};
use emu_node::schemes::Params;
use emu_node::time::{BitRate, Nanos};
use emu_node::tofino::{RedConfig, TargetProfile};
use emu_node::wire::Ipv4Address;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use toml::Spanned;

/// A topology error: file, line (when known) and cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct TopologyError {
    /// File name.
    pub file: String,
    /// 1-based line.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// Topologies shipped in `topologies/`, embedded so names work anywhere.
pub const SHIPPED: &[(&str, &str)] = &[
    ("leaf-spine-2x4", include_str!("../../../topologies/leaf-spine-2x4.toml")),
    ("leaf-spine-8x8", include_str!("../../../topologies/leaf-spine-8x8.toml")),
    ("fat-tree-k4", include_str!("../../../topologies/fat-tree-k4.toml")),
    ("fat-tree-k8", include_str!("../../../topologies/fat-tree-k8.toml")),
    ("leaf-spine-2x4-rt", include_str!("../../../topologies/leaf-spine-2x4-rt.toml")),
    ("leaf-spine-8x8-rt", include_str!("../../../topologies/leaf-spine-8x8-rt.toml")),
    ("leaf-spine-rxe", include_str!("../../../topologies/leaf-spine-rxe.toml")),
    ("leaf-spine-2x4-rt-synthetic", include_str!("../../../topologies/leaf-spine-2x4-rt-synthetic.toml")),
    ("fat-tree-k4-rt", include_str!("../../../topologies/fat-tree-k4-rt.toml")),
    ("fat-tree-k4-rt-tap", include_str!("../../../topologies/fat-tree-k4-rt-tap.toml")),
    ("fat-tree-k8-lbsp", include_str!("../../../topologies/fat-tree-k8-lbsp.toml")),
    ("fat-tree-k16-lbsp", include_str!("../../../topologies/fat-tree-k16-lbsp.toml")),
    ("fat-tree-k16-lbsp-4to1", include_str!("../../../topologies/fat-tree-k16-lbsp-4to1.toml")),
    ("fat-tree-k16-lbsp-8to1", include_str!("../../../topologies/fat-tree-k16-lbsp-8to1.toml")),
    ("leaf-spine-int", include_str!("../../../topologies/leaf-spine-int.toml")),
    ("leaf-spine-int-tap", include_str!("../../../topologies/leaf-spine-int-tap.toml")),
    ("fat-tree-int", include_str!("../../../topologies/fat-tree-int.toml")),
    ("fat-tree-int-tap", include_str!("../../../topologies/fat-tree-int-tap.toml")),
    ("p4te-leaf-spine", include_str!("../../../topologies/p4te-leaf-spine.toml")),
    ("p4te-leaf-spine-tap", include_str!("../../../topologies/p4te-leaf-spine-tap.toml")),
    ("explicit-example", include_str!("../../../topologies/explicit-example.toml")),
];

/// The embedded default topology (`weft run` without a topology).
pub const DEFAULT: &str = "leaf-spine-2x4";

/// A loaded topology.
#[derive(Debug, Clone)]
pub struct Topology {
    /// The fabric.
    pub fabric: FabricSpec,
    /// Free-text description.
    pub description: String,
    /// Where it came from.
    pub source: String,
    /// Whether the file had a `[placement]` table.
    pub placed: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    name: Option<String>,
    description: Option<String>,
    generator: Option<Spanned<RawGenerator>>,
    switches: Option<Spanned<RawSwitchSettings>>,
    hosts: Option<RawHostSettings>,
    #[serde(default)]
    overrides: BTreeMap<String, Spanned<RawSwitchSettings>>,
    #[serde(default)]
    switch: Vec<Spanned<RawSwitchSettings>>,
    #[serde(default)]
    host: Vec<Spanned<RawHost>>,
    #[serde(default)]
    link: Vec<Spanned<RawLink>>,
    #[serde(default)]
    events: Vec<Spanned<RawEvent>>,
    #[serde(default)]
    placement: BTreeMap<String, Vec<Spanned<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGenerator {
    kind: Spanned<String>,
    leaves: Option<Spanned<u32>>,
    spines: Option<Spanned<u32>>,
    hosts_per_leaf: Option<Spanned<u32>>,
    k: Option<Spanned<u32>>,
    oversubscription: Option<Spanned<f64>>,
    host_link: Spanned<RawLinkParams>,
    fabric_link: Option<Spanned<RawLinkParams>>,
    core_link: Option<Spanned<RawLinkParams>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLinkParams {
    rate: Option<Spanned<String>>,
    delay: Option<Spanned<String>>,
    mtu: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct RawSwitchSettings {
    /// A `[[switch]]` entry's name (not in `[switches]` or `[overrides]`).
    name: Option<Spanned<String>>,
    /// A `[[switch]]` entry's role.
    role: Option<Spanned<String>>,
    target: Option<Spanned<String>>,
    scheme: Option<Spanned<String>>,
    #[serde(default)]
    params: BTreeMap<String, Spanned<toml::Value>>,
    buffer: Option<Spanned<String>>,
    pfc: Option<bool>,
    ecn: Option<Spanned<RawEcn>>,
    queues: Option<Spanned<u32>>,
    queue_limit: Option<Spanned<u32>>,
    cpu_latency: Option<Spanned<String>>,
    /// A software target's mean per-packet pipeline time (`300us`).
    packet_time: Option<Spanned<String>>,
    /// A software target's per-packet time spread, 0 to 1.
    packet_jitter: Option<Spanned<f64>>,
    /// `bits` (the link's rate, the default) or `packets` (every frame
    /// holds the port for a full-size frame's time, as BMv2's queue rates).
    queue_rate: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawEcn {
    kmin: Spanned<String>,
    kmax: Spanned<String>,
    pmax: Spanned<f64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHostSettings {
    kind: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    name: Spanned<String>,
    kind: Option<Spanned<String>>,
    ip: Option<Spanned<toml::Value>>,
    gateway: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    name: Option<Spanned<String>>,
    a: Spanned<String>,
    b: Spanned<String>,
    rate: Option<Spanned<String>>,
    delay: Option<Spanned<String>>,
    mtu: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at: Spanned<String>,
    /// What changes: a link, or (`node`) a switch.
    link: Option<Spanned<String>>,
    /// A switch: `down`, `up` (every link of it) or `restart`.
    node: Option<Spanned<String>>,
    action: Spanned<String>,
    /// Of a `restart`: how long the switch's links stay down (default 0).
    boot: Option<Spanned<String>>,
    rate: Option<Spanned<String>>,
    /// Of a `loss` event: `1%` or `0.01`.
    loss: Option<Spanned<String>>,
    /// Of a `flap` event: down this long, up this long, ...
    period: Option<Spanned<String>>,
    /// Of a `flap` event: when the flapping ends (the link up).
    until: Option<Spanned<String>>,
}

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())].bytes().filter(|&b| b == b'\n').count() + 1
    }
    fn err<T>(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> Result<T, TopologyError> {
        Err(TopologyError { file: self.file.into(), line: Some(self.line_of(span.start)), message: message.into() })
    }
    fn at<T>(&self, s: &Spanned<T>) -> std::ops::Range<usize> {
        s.span()
    }
    fn rate(&self, s: &Spanned<String>) -> Result<BitRate, TopologyError> {
        parse_rate(s.get_ref()).or_else(|e| self.err(s.span(), format!("rate {e}")))
    }
    fn duration(&self, s: &Spanned<String>) -> Result<Nanos, TopologyError> {
        parse_duration(s.get_ref()).or_else(|e| self.err(s.span(), format!("duration {e}")))
    }
    fn size(&self, s: &Spanned<String>) -> Result<u64, TopologyError> {
        parse_size(s.get_ref()).or_else(|e| self.err(s.span(), format!("size {e}")))
    }
}

#[derive(Clone)]
struct SwitchSettings {
    target: String,
    scheme: String,
    params: Params,
    scheme_params: BTreeMap<String, Params>,
    buffer: Option<u64>,
    pfc: bool,
    ecn: Option<RedConfig>,
    queues: Option<u8>,
    queue_limit: Option<u32>,
    cpu_latency: Option<Nanos>,
    packet_time: Option<Nanos>,
    packet_jitter: Option<f64>,
    queue_rate_packets: bool,
}

impl SwitchSettings {
    fn defaults() -> Self {
        SwitchSettings {
            target: "tofino2".into(),
            scheme: "ecmp".into(),
            params: Params::new(),
            scheme_params: BTreeMap::new(),
            buffer: None,
            pfc: false,
            ecn: None,
            queues: None,
            queue_limit: None,
            cpu_latency: None,
            packet_time: None,
            packet_jitter: None,
            queue_rate_packets: false,
        }
    }
    fn apply(&mut self, cx: &Ctx, raw: &RawSwitchSettings) -> Result<(), TopologyError> {
        self.apply_settings(cx, raw, false)
    }
    /// `entry`: the settings of one `[[switch]]` (which has a name and a
    /// role), not of `[switches]` or `[overrides.NAME]`.
    fn apply_settings(&mut self, cx: &Ctx, raw: &RawSwitchSettings, entry: bool) -> Result<(), TopologyError> {
        if let (false, Some(k)) = (entry, raw.name.as_ref().or(raw.role.as_ref())) {
            return cx.err(cx.at(k), "`name` and `role` belong to a [[switch]] entry, not to [switches] or [overrides]");
        }
        if let Some(t) = &raw.target {
            if TargetProfile::by_name(t.get_ref()).is_none() {
                return cx.err(cx.at(t), format!("unknown target `{}` (known: {})", t.get_ref(), TargetProfile::NAMES.join(", ")));
            }
            self.target = t.get_ref().clone();
        }
        if let Some(s) = &raw.scheme {
            if !emu_node::schemes::catalog().iter().any(|c| c.name == s.get_ref()) {
                let known: Vec<_> = emu_node::schemes::catalog().iter().map(|c| c.name).collect();
                return cx.err(cx.at(s), format!("unknown scheme `{}` (known: {})", s.get_ref(), known.join(", ")));
            }
            self.scheme = s.get_ref().clone();
        }
        let text = |v: &toml::Value| match v {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        for (k, sv) in &raw.params {
            match sv.get_ref() {
                // `[switches.params.SCHEME]`: only while running SCHEME.
                toml::Value::Table(t) => {
                    if !emu_node::schemes::catalog().iter().any(|c| c.name == k) {
                        let known: Vec<_> = emu_node::schemes::catalog().iter().map(|c| c.name).collect();
                        return cx.err(
                            cx.at(sv),
                            format!("params.{k}: a table of parameters is named after a scheme (known: {})", known.join(", ")),
                        );
                    }
                    let p = self.scheme_params.entry(k.clone()).or_default();
                    for (pk, pv) in t {
                        p.insert(pk.clone(), text(pv));
                    }
                }
                v => {
                    self.params.insert(k.clone(), text(v));
                }
            }
        }
        if let Some(b) = &raw.buffer {
            self.buffer = Some(cx.size(b)?);
        }
        if let Some(p) = raw.pfc {
            self.pfc = p;
        }
        if let Some(e) = &raw.ecn {
            let r = e.get_ref();
            let (kmin, kmax) = (cx.size(&r.kmin)?, cx.size(&r.kmax)?);
            let pmax = *r.pmax.get_ref();
            // kmin = kmax is step marking (every packet at or above it).
            if kmin > kmax || !(0.0..=1.0).contains(&pmax) {
                return cx.err(cx.at(e), "ecn needs kmin <= kmax and 0 <= pmax <= 1");
            }
            self.ecn = Some(RedConfig { kmin_bytes: kmin, kmax_bytes: kmax, pmax });
        }
        if let Some(q) = &raw.queues {
            let n = *q.get_ref();
            if !(2..=128).contains(&n) {
                return cx.err(cx.at(q), format!("queues = {n}: a port has 2 to 128 queues"));
            }
            self.queues = Some(n as u8);
        }
        if let Some(q) = &raw.queue_limit {
            if *q.get_ref() == 0 {
                return cx.err(cx.at(q), "queue_limit = 0: a queue holds at least one packet");
            }
            self.queue_limit = Some(*q.get_ref());
        }
        if let Some(d) = &raw.cpu_latency {
            self.cpu_latency = Some(cx.duration(d)?);
        }
        if let Some(d) = &raw.packet_time {
            let t = cx.duration(d)?;
            if t == 0 {
                return cx.err(cx.at(d), "packet_time = 0: a software pipeline takes some time per packet (or use an ASIC target)");
            }
            self.packet_time = Some(t);
        }
        if let Some(j) = &raw.packet_jitter {
            if !(0.0..=1.0).contains(j.get_ref()) {
                return cx.err(cx.at(j), "packet_jitter is a coefficient of variation from 0 (none) to 1 (exponential)");
            }
            self.packet_jitter = Some(*j.get_ref());
        }
        if let Some(q) = &raw.queue_rate {
            self.queue_rate_packets = match q.get_ref().as_str() {
                "bits" => false,
                "packets" => true,
                other => return cx.err(cx.at(q), format!("queue_rate = \"{other}\": expected \"bits\" or \"packets\"")),
            };
        }
        if (raw.packet_time.is_some() || raw.packet_jitter.is_some())
            && TargetProfile::by_name(&self.target).is_some_and(|t| t.software.is_none())
        {
            let at = raw.packet_time.as_ref().map(|d| cx.at(d)).or(raw.packet_jitter.as_ref().map(|j| cx.at(j))).unwrap_or(0..0);
            return cx.err(
                at,
                format!(
                    "packet_time and packet_jitter are for a software target (bmv2, bmv2-opt); this switch's target is `{}`",
                    self.target
                ),
            );
        }
        Ok(())
    }
    fn spec(&self, role: SwitchRole) -> NodeKind {
        NodeKind::Switch(SwitchSpec {
            role,
            target: self.target.clone(),
            scheme: self.scheme.clone(),
            params: self.params.clone(),
            scheme_params: self.scheme_params.clone(),
            buffer_bytes: self.buffer,
            queues_per_port: self.queues,
            queue_limit_packets: self.queue_limit,
            cpu_latency_ns: self.cpu_latency,
            packet_time_ns: self.packet_time,
            packet_jitter: self.packet_jitter,
            queue_rate_packets: self.queue_rate_packets,
            pfc: self.pfc,
            ecn: self.ecn,
            buffer_rules: Default::default(),
            held_outside_pfc: false,
            pfc_watchdog: None,
            pfc_pause_ns: None,
            control_frame_bytes: Default::default(),
            routes: Vec::new(),
            leaf_index: None,
            leaves: 0,
            upper_fanout: 0,
            tier_position: None,
            hosts_per_leaf: 0,
            leaf_addresses: Vec::new(),
            time_scale: Default::default(),
        })
    }
}

fn host_kind(cx: &Ctx, s: &Spanned<String>) -> Result<HostKind, TopologyError> {
    match s.get_ref().as_str() {
        "synthetic" => Ok(HostKind::Synthetic),
        "tap" => Ok(HostKind::Tap),
        "rxe" => Ok(HostKind::Rxe),
        other => cx.err(s.span(), format!("unknown host kind `{other}` (synthetic, tap, rxe)")),
    }
}

#[derive(Debug, Clone, Copy)]
struct LinkParams {
    rate: BitRate,
    delay: Nanos,
    mtu: u16,
}

fn link_params(
    cx: &Ctx,
    raw: &Spanned<RawLinkParams>,
    default_rate: Option<BitRate>,
    default_mtu: u16,
) -> Result<LinkParams, TopologyError> {
    let r = raw.get_ref();
    let rate = match (&r.rate, default_rate) {
        (Some(s), _) => cx.rate(s)?,
        (None, Some(d)) => d,
        (None, None) => return cx.err(raw.span(), "link parameters need a `rate` (e.g. rate = \"25Gbps\")"),
    };
    let delay = match &r.delay {
        Some(d) => cx.duration(d)?,
        None => 1_000,
    };
    let mtu = mtu_of(cx, r.mtu.as_ref(), default_mtu)?;
    Ok(LinkParams { rate, delay, mtu })
}

/// An `[[events]]` entry with a `node`: a switch goes `down` or `up`
/// (every link of it) or restarts (it loses its register state; its links
/// are down for `boot`, default 0).
fn switch_event(cx: &Ctx, f: &mut FabricSpec, ev: &Spanned<RawEvent>, n: &Spanned<String>, at: Nanos) -> Result<(), TopologyError> {
    let e = ev.get_ref();
    let node = match f.node_by_name(n.get_ref()) {
        Some(id) if f.nodes[id.index()].as_switch().is_some() => id,
        Some(_) => return cx.err(n.span(), format!("`{}` is a host: an event names its link instead", n.get_ref())),
        None => return cx.err(n.span(), format!("event names switch `{}`, which does not exist", n.get_ref())),
    };
    if let Some(x) = e.rate.as_ref().or(e.loss.as_ref()).or(e.period.as_ref()).or(e.until.as_ref()) {
        return cx.err(x.span(), "a switch's event takes only `at`, `node`, `action` and (restart) `boot`");
    }
    let action = match e.action.get_ref().as_str() {
        "down" => LinkAction::Down,
        "up" => LinkAction::Up,
        "restart" => {
            let boot = match &e.boot {
                Some(b) => cx.duration(b)?,
                None => 0,
            };
            restart_events(f, node, at, boot);
            return Ok(());
        }
        other => return cx.err(e.action.span(), format!("unknown switch action `{other}` (down, up, restart)")),
    };
    if let Some(b) = &e.boot {
        return cx.err(b.span(), "only a `restart` takes a `boot`");
    }
    let links: Vec<LinkId> = f.nodes[node.index()].ports.iter().map(|p| p.link).collect();
    f.schedule.extend(links.into_iter().map(|link| LinkEvent { at, link, action }));
    Ok(())
}

/// The MTU of a host link when none is given.
const HOST_MTU: u16 = 1500;

fn mtu_of(cx: &Ctx, m: Option<&Spanned<u32>>, default: u16) -> Result<u16, TopologyError> {
    match m {
        None => Ok(default),
        Some(m) if (68..=MAX_MTU as u32).contains(m.get_ref()) => Ok(*m.get_ref() as u16),
        Some(m) => cx.err(m.span(), format!("mtu = {}: must be between 68 and {MAX_MTU}", m.get_ref())),
    }
}

fn host_node(kind: HostKind, ip: Ipv4Address, gateway: Ipv4Address) -> NodeKind {
    NodeKind::Host(HostSpec { kind, ip, prefix_len: 24, mac: host_mac(ip), gateway })
}

/// Most link events one `flap` may expand into.
const MAX_FLAP_EVENTS: u64 = 100_000;

/// A flapping link as events: down at `at`, up at `at + period`, down
/// again at `at + 2 period`, ..., and up at `until`.
fn flap_events(at: Nanos, period: Nanos, until: Nanos, link: LinkId) -> Result<Vec<LinkEvent>, String> {
    if period == 0 || until <= at {
        return Err("a flap needs a period above 0 and an end after its start".into());
    }
    let n = (until - at).div_ceil(period);
    if n > MAX_FLAP_EVENTS {
        return Err(format!("a flap of {n} changes: at most {MAX_FLAP_EVENTS} (a longer period or an earlier end)"));
    }
    let mut v: Vec<LinkEvent> = (0..n)
        .map(|i| LinkEvent { at: at + i * period, link, action: if i % 2 == 0 { LinkAction::Down } else { LinkAction::Up } })
        .collect();
    v.push(LinkEvent { at: until, link, action: LinkAction::Up });
    Ok(v)
}

/// A switch's restart as events: its node event at `at` (its links go
/// down, it loses its state) and every link of it up at `at + boot`.
fn restart_events(f: &mut FabricSpec, node: NodeId, at: Nanos, boot: Nanos) {
    f.node_schedule.push(NodeEvent { at, node, action: NodeAction::Restart });
    f.node_schedule.sort_by_key(|e| e.at);
    let links: Vec<LinkId> = f.nodes[node.index()].ports.iter().map(|p| p.link).collect();
    f.schedule.extend(links.into_iter().map(|link| LinkEvent { at: at + boot, link, action: LinkAction::Up }));
}

impl Topology {
    /// Adds link events from the command line (`weft run --event`):
    /// `AT,TARGET,ACTION` with ACTION `down`, `up`, `degrade=RATE`,
    /// `loss=P` (`1%` or `0.01`), `flap=PERIOD:UNTIL` (a link only) or
    /// `restart[=BOOT]` (a switch only: it loses its register state, its
    /// links down for BOOT, default 0); TARGET a link name (either order of
    /// its ends) or a switch name, which means every link of the switch (a
    /// node failure is all its links failing at once, as the LBSP paper
    /// models it).
    pub fn add_event(&mut self, text: &str) -> Result<(), String> {
        let bad = |why: &str| {
            format!(
                "--event `{text}`: {why} (AT,LINK-OR-SWITCH,down|up|degrade=RATE|loss=P|flap=PERIOD:UNTIL|restart[=BOOT], e.g. 5ms,edge7_3-agg7_3,down)"
            )
        };
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let [at, target, action] = parts[..] else { return Err(bad("three comma-separated fields")) };
        let at = parse_duration(at).map_err(|e| bad(&format!("time {e}")))?;
        if action == "restart" || action.starts_with("restart=") {
            let boot = match action.strip_prefix("restart=") {
                Some(b) => parse_duration(b).map_err(|e| bad(&format!("boot time {e}")))?,
                None => 0,
            };
            let f = &mut self.fabric;
            let node = match f.node_by_name(target) {
                Some(n) if f.nodes[n.index()].as_switch().is_some() => n,
                _ => return Err(bad(&format!("no switch named `{target}` (restart takes a switch)"))),
            };
            restart_events(f, node, at, boot);
            f.schedule.sort_by_key(|e| e.at);
            return Ok(());
        }
        let action = match action.split_once('=') {
            None if action == "down" => LinkAction::Down,
            None if action == "up" => LinkAction::Up,
            Some(("degrade", rate)) => LinkAction::Degrade(parse_rate(rate).map_err(|e| bad(&format!("rate {e}")))?),
            Some(("loss", p)) => LinkAction::Loss(crate::config::units::parse_probability(p).map_err(|e| bad(&format!("loss {e}")))?),
            Some(("flap", spec)) => {
                let Some((p, u)) = spec.split_once(':') else { return Err(bad("flap=PERIOD:UNTIL, e.g. flap=1ms:10ms")) };
                let p = parse_duration(p).map_err(|e| bad(&format!("flap period {e}")))?;
                let u = parse_duration(u).map_err(|e| bad(&format!("flap end {e}")))?;
                let f = &mut self.fabric;
                let Some(link) = f.link_by_name(target) else { return Err(bad(&format!("no link named `{target}` (flap takes a link)"))) };
                f.schedule.extend(flap_events(at, p, u, link).map_err(|why| bad(&why))?);
                f.schedule.sort_by_key(|e| e.at);
                return Ok(());
            }
            _ => return Err(bad(&format!("unknown action `{action}`"))),
        };
        let f = &mut self.fabric;
        let links: Vec<LinkId> = match (f.link_by_name(target), f.node_by_name(target)) {
            (Some(l), _) => vec![l],
            (None, Some(n)) if f.nodes[n.index()].as_switch().is_some() => f.nodes[n.index()].ports.iter().map(|p| p.link).collect(),
            (None, Some(_)) => return Err(bad(&format!("`{target}` is a host: name its link instead"))),
            (None, None) => return Err(bad(&format!("no link or switch named `{target}`"))),
        };
        f.schedule.extend(links.into_iter().map(|link| LinkEvent { at, link, action }));
        f.schedule.sort_by_key(|e| e.at);
        Ok(())
    }
    /// Loads a topology by path, or by the name of a shipped topology.
    pub fn load(path_or_name: &str) -> Result<Topology, TopologyError> {
        let p = Path::new(path_or_name);
        if p.exists() {
            let text = std::fs::read_to_string(p).map_err(|e| TopologyError {
                file: path_or_name.into(),
                line: None,
                message: format!("cannot read: {e}"),
            })?;
            return Self::parse(path_or_name, &text);
        }
        let stem = path_or_name.trim_start_matches("topologies/").trim_end_matches(".toml");
        if let Some((name, text)) = SHIPPED.iter().find(|(n, _)| *n == stem) {
            return Self::parse(&format!("topologies/{name}.toml"), text);
        }
        let known: Vec<_> = SHIPPED.iter().map(|(n, _)| *n).collect();
        Err(TopologyError {
            file: path_or_name.into(),
            line: None,
            message: format!("no such file, and not a shipped topology (shipped: {})", known.join(", ")),
        })
    }

    /// Parses topology `text` (named `file` in errors).
    pub fn parse(file: &str, text: &str) -> Result<Topology, TopologyError> {
        let cx = Ctx { file, text };
        let raw: RawTopology = toml::from_str(text).map_err(|e| TopologyError {
            file: file.into(),
            line: e.span().map(|s| cx.line_of(s.start)),
            message: e.message().trim().to_string(),
        })?;
        let mut defaults = SwitchSettings::defaults();
        if let Some(s) = &raw.switches {
            defaults.apply(&cx, s.get_ref())?;
        }
        let hkind = match raw.hosts.as_ref().and_then(|h| h.kind.as_ref()) {
            Some(k) => host_kind(&cx, k)?,
            None => HostKind::Synthetic,
        };
        let name =
            raw.name.clone().unwrap_or_else(|| Path::new(file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default());
        let mut fabric = FabricSpec { name, ..Default::default() };
        let explicit = !raw.switch.is_empty() || !raw.host.is_empty() || !raw.link.is_empty();
        match (&raw.generator, explicit) {
            (Some(g), true) => {
                return cx.err(g.span(), "a topology has either a [generator] or explicit [[switch]]/[[host]]/[[link]] entries, not both")
            }
            (Some(g), false) => generate(&cx, g, &defaults, hkind, &mut fabric)?,
            (None, true) => explicit_form(&cx, &raw, &defaults, hkind, &mut fabric)?,
            (None, false) => {
                return Err(TopologyError {
                    file: file.into(),
                    line: None,
                    message: "empty topology: add a [generator] or [[switch]], [[host]] and [[link]] entries".into(),
                })
            }
        }
        // Per-switch overrides.
        for (sw, o) in &raw.overrides {
            let Some(id) = fabric.node_by_name(sw) else {
                return cx.err(o.span(), format!("[overrides.{sw}]: no switch named `{sw}`"));
            };
            let NodeKind::Switch(spec) = &fabric.nodes[id.index()].kind else {
                return cx.err(o.span(), format!("[overrides.{sw}]: `{sw}` is a host, not a switch"));
            };
            let mut s = SwitchSettings {
                target: spec.target.clone(),
                scheme: spec.scheme.clone(),
                params: spec.params.clone(),
                scheme_params: spec.scheme_params.clone(),
                buffer: spec.buffer_bytes,
                pfc: spec.pfc,
                ecn: spec.ecn,
                queues: spec.queues_per_port,
                queue_limit: spec.queue_limit_packets,
                cpu_latency: spec.cpu_latency_ns,
                packet_time: spec.packet_time_ns,
                packet_jitter: spec.packet_jitter,
                queue_rate_packets: spec.queue_rate_packets,
            };
            s.apply(&cx, o.get_ref())?;
            let role = spec.role;
            fabric.nodes[id.index()].kind = s.spec(role);
        }
        // Events.
        for ev in &raw.events {
            let e = ev.get_ref();
            let at = cx.duration(&e.at)?;
            let link_name = match (&e.link, &e.node) {
                (Some(l), None) => l,
                (None, Some(n)) => {
                    switch_event(&cx, &mut fabric, ev, n, at)?;
                    continue;
                }
                _ => return cx.err(ev.span(), "an event names either a `link` or a `node` (a switch)"),
            };
            if let Some(b) = &e.boot {
                return cx.err(b.span(), "only a switch's `restart` takes a `boot`");
            }
            let Some(link) = fabric.link_by_name(link_name.get_ref()) else {
                return cx.err(link_name.span(), format!("event names link `{}`, which does not exist", link_name.get_ref()));
            };
            if let (Some(l), false) = (&e.loss, e.action.get_ref() == "loss") {
                return cx.err(l.span(), "only `loss` events take a `loss`");
            }
            if e.action.get_ref() == "flap" {
                let (Some(period), Some(until)) = (&e.period, &e.until) else {
                    return cx.err(ev.span(), "a `flap` event needs a `period` and an `until` (e.g. period = \"1ms\", until = \"10ms\")");
                };
                let (p, u) = (cx.duration(period)?, cx.duration(until)?);
                match flap_events(at, p, u, link) {
                    Ok(evs) => fabric.schedule.extend(evs),
                    Err(why) => return cx.err(ev.span(), why),
                }
                continue;
            }
            if let Some(x) = e.period.as_ref().or(e.until.as_ref()) {
                return cx.err(x.span(), "only `flap` events take a `period` and an `until`");
            }
            let action = match (e.action.get_ref().as_str(), &e.rate) {
                ("down", None) => LinkAction::Down,
                ("up", None) => LinkAction::Up,
                ("degrade", Some(r)) => LinkAction::Degrade(cx.rate(r)?),
                ("degrade", None) => return cx.err(ev.span(), "a `degrade` event needs a `rate`"),
                ("loss", None) => match &e.loss {
                    Some(l) => match crate::config::units::parse_probability(l.get_ref()) {
                        Ok(ppm) => LinkAction::Loss(ppm),
                        Err(err) => return cx.err(l.span(), format!("loss {err} (a probability: 1% or 0.01; 0 ends the loss)")),
                    },
                    None => return cx.err(ev.span(), "a `loss` event needs a `loss` (e.g. loss = \"1%\")"),
                },
                ("down" | "up" | "loss", Some(r)) => return cx.err(r.span(), "only `degrade` events take a `rate`"),
                (other, _) => return cx.err(e.action.span(), format!("unknown link action `{other}` (down, up, degrade, loss, flap)")),
            };
            fabric.schedule.push(LinkEvent { at, link, action });
        }
        fabric.schedule.sort_by_key(|e| e.at);
        fabric.node_schedule.sort_by_key(|e| e.at);
        // Placement.
        let mut placed = BTreeSet::new();
        for (i, (_proc, names)) in raw.placement.iter().enumerate() {
            for n in names {
                let Some(id) = fabric.node_by_name(n.get_ref()) else {
                    return cx.err(n.span(), format!("placement names `{}`, which is not a node", n.get_ref()));
                };
                if !placed.insert(id) {
                    return cx.err(n.span(), format!("`{}` is placed twice", n.get_ref()));
                }
                fabric.nodes[id.index()].placement = i as u32;
            }
        }
        fabric.compute_routes();
        fabric.validate().map_err(|e| TopologyError { file: file.into(), line: None, message: e.0 })?;
        let placed = !raw.placement.is_empty();
        Ok(Topology { fabric, description: raw.description.unwrap_or_default(), source: file.into(), placed })
    }

    /// Applies a placement file: a `[placement]` table (or top-level keys)
    /// mapping process names to node lists, e.g. `node0 = ["leaf0", "spine0"]`.
    pub fn apply_placement(&mut self, file: &str, text: &str) -> Result<(), TopologyError> {
        let err = |m: String| TopologyError { file: file.into(), line: None, message: m };
        let table: toml::Table = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let t = match table.get("placement") {
            Some(toml::Value::Table(t)) => t.clone(),
            _ => table,
        };
        for n in &mut self.fabric.nodes {
            n.placement = 0;
        }
        for (i, (proc_, names)) in t.iter().enumerate() {
            let Some(list) = names.as_array() else { return Err(err(format!("`{proc_}` must be a list of node names"))) };
            for v in list {
                let Some(name) = v.as_str() else { return Err(err(format!("`{proc_}` must be a list of node names"))) };
                let Some(id) = self.fabric.node_by_name(name) else {
                    return Err(err(format!("placement names `{name}`, which is not a node")));
                };
                self.fabric.nodes[id.index()].placement = i as u32;
            }
        }
        self.placed = true;
        Ok(())
    }

    /// A one-paragraph description for `weft validate`.
    pub fn describe(&self) -> String {
        let f = &self.fabric;
        let hosts = f.hosts().len();
        let switches = f.switches();
        let mut roles: BTreeMap<String, usize> = BTreeMap::new();
        for s in &switches {
            if let Some(sw) = f.nodes[s.index()].as_switch() {
                *roles.entry(format!("{:?}", sw.role).to_lowercase()).or_default() += 1;
            }
        }
        let roles: Vec<String> = roles.iter().map(|(r, n)| format!("{n} {r}")).collect();
        let schemes: BTreeSet<&str> = switches.iter().filter_map(|s| f.nodes[s.index()].as_switch()).map(|s| s.scheme.as_str()).collect();
        let mut rates: BTreeMap<BitRate, usize> = BTreeMap::new();
        for l in &f.links {
            *rates.entry(l.rate).or_default() += 1;
        }
        let rates: Vec<String> = rates.iter().map(|(r, n)| format!("{n} x {r}")).collect();
        let mut s = format!(
            "{}: {} switches ({}), {} hosts, {} links ({}), scheme {}, {} scheduled link events",
            f.name,
            switches.len(),
            roles.join(", "),
            hosts,
            f.links.len(),
            rates.join(", "),
            schemes.into_iter().collect::<Vec<_>>().join("/"),
            f.schedule.len()
        );
        if !f.node_schedule.is_empty() {
            s.push_str(&format!(", {} switch restarts", f.node_schedule.len()));
        }
        if let Some(o) = self.oversubscription() {
            s.push_str(&format!(", leaf oversubscription {o:.2}:1"));
        }
        s
    }

    /// Host-facing capacity / uplink capacity of the first leaf.
    pub fn oversubscription(&self) -> Option<f64> {
        let f = &self.fabric;
        let leaf = f.switches().into_iter().find(|s| f.nodes[s.index()].as_switch().is_some_and(|x| x.role == SwitchRole::Leaf))?;
        let (mut down, mut up) = (0u128, 0u128);
        for p in &f.nodes[leaf.index()].ports {
            if f.nodes[p.peer.index()].as_host().is_some() {
                down += p.rate.bps() as u128;
            } else {
                up += p.rate.bps() as u128;
            }
        }
        (up > 0).then(|| down as f64 / up as f64)
    }
}

fn need(cx: &Ctx, g: &Spanned<RawGenerator>, v: &Option<Spanned<u32>>, field: &str, min: u32, max: u32) -> Result<u32, TopologyError> {
    match v {
        None => cx.err(g.span(), format!("generator `{}` needs `{field}`", g.get_ref().kind.get_ref())),
        Some(x) if !(min..=max).contains(x.get_ref()) => {
            cx.err(x.span(), format!("{field} = {}: must be between {min} and {max}", x.get_ref()))
        }
        Some(x) => Ok(*x.get_ref()),
    }
}

fn generate(cx: &Ctx, g: &Spanned<RawGenerator>, sw: &SwitchSettings, hkind: HostKind, f: &mut FabricSpec) -> Result<(), TopologyError> {
    let r = g.get_ref();
    let host = link_params(cx, &r.host_link, None, HOST_MTU)?;
    let over = match &r.oversubscription {
        Some(o) if *o.get_ref() > 0.0 && o.get_ref().is_finite() => Some(*o.get_ref()),
        Some(o) => return cx.err(o.span(), "oversubscription must be a positive number (e.g. 2.0 for 2:1)"),
        None => None,
    };
    match r.kind.get_ref().as_str() {
        "leaf-spine" => {
            for (fname, v) in [("k", &r.k)] {
                if let Some(x) = v {
                    return cx.err(x.span(), format!("`{fname}` is a fat-tree parameter; leaf-spine takes leaves, spines, hosts_per_leaf"));
                }
            }
            if let Some(c) = &r.core_link {
                return cx.err(c.span(), "`core_link` is a fat-tree parameter (aggregation-core links); leaf-spine takes fabric_link");
            }
            let leaves = need(cx, g, &r.leaves, "leaves", 1, 255)?;
            let spines = need(cx, g, &r.spines, "spines", 1, 255)?;
            let hpl = need(cx, g, &r.hosts_per_leaf, "hosts_per_leaf", 1, 250)?;
            // Uplink rate: given, or derived so that down/up = oversubscription.
            let derived = over.map(|o| BitRate((hpl as f64 * host.rate.bps() as f64 / (spines as f64 * o)).round() as u64));
            let fabric = match &r.fabric_link {
                Some(fl) => link_params(cx, fl, derived.or(Some(host.rate)), switch_link_mtu(host.mtu))?,
                None => LinkParams { rate: derived.unwrap_or(host.rate), delay: host.delay, mtu: switch_link_mtu(host.mtu) },
            };
            let leaf_ids: Vec<NodeId> = (0..leaves).map(|i| f.add_node(format!("leaf{i}"), sw.spec(SwitchRole::Leaf))).collect();
            let spine_ids: Vec<NodeId> = (0..spines).map(|i| f.add_node(format!("spine{i}"), sw.spec(SwitchRole::Spine))).collect();
            let mut h = 0;
            for (li, &leaf) in leaf_ids.iter().enumerate() {
                for j in 0..hpl {
                    let ip = Ipv4Address::new(10, 0, li as u8, (j + 2) as u8);
                    let hid = f.add_node(format!("h{h}"), host_node(hkind, ip, Ipv4Address::new(10, 0, li as u8, 1)));
                    f.connect(format!("h{h}-leaf{li}"), hid, leaf, host.rate, host.delay, host.mtu);
                    h += 1;
                }
                for (si, &spine) in spine_ids.iter().enumerate() {
                    f.connect(format!("leaf{li}-spine{si}"), leaf, spine, fabric.rate, fabric.delay, fabric.mtu);
                }
            }
        }
        "fat-tree" => {
            for (fname, v) in [("leaves", &r.leaves), ("spines", &r.spines), ("hosts_per_leaf", &r.hosts_per_leaf)] {
                if let Some(x) = v {
                    return cx.err(x.span(), format!("`{fname}` is a leaf-spine parameter; fat-tree takes k and oversubscription"));
                }
            }
            let k = need(cx, g, &r.k, "k", 2, 64)?;
            if k % 2 != 0 {
                return cx.err(r.k.as_ref().map(|x| x.span()).unwrap_or(g.span()), format!("k = {k}: a fat-tree needs an even k"));
            }
            let half = k / 2;
            let hpe = (half as f64 * over.unwrap_or(1.0)).round() as u32;
            if hpe == 0 || hpe > 250 {
                return cx.err(
                    g.span(),
                    format!("k = {k} with oversubscription {} gives {hpe} hosts per edge switch (1..250)", over.unwrap_or(1.0)),
                );
            }
            // Checked before anything is built: a fabric over the limit
            // would take seconds and gigabytes to build and then fail.
            let nodes = (half * half + k * k + k * half * hpe) as usize;
            if nodes > MAX_NODES {
                return cx.err(
                    g.span(),
                    format!(
                        "k = {k} with {hpe} hosts per edge switch makes {nodes} nodes: at most {MAX_NODES} (switch MACs and addresses carry a 16-bit node id)"
                    ),
                );
            }
            let fabric = match &r.fabric_link {
                Some(fl) => link_params(cx, fl, Some(host.rate), switch_link_mtu(host.mtu))?,
                None => LinkParams { rate: host.rate, delay: host.delay, mtu: switch_link_mtu(host.mtu) },
            };
            // Aggregation-core links: as the fabric's unless given (the LBSP
            // paper's 4:1 and 8:1 fat-trees cut only their rate, §4).
            let core = match &r.core_link {
                Some(cl) => {
                    let c = link_params(cx, cl, Some(fabric.rate), fabric.mtu)?;
                    LinkParams { delay: if cl.get_ref().delay.is_some() { c.delay } else { fabric.delay }, ..c }
                }
                None => fabric,
            };
            let cores: Vec<NodeId> = (0..half * half).map(|i| f.add_node(format!("core{i}"), sw.spec(SwitchRole::Core))).collect();
            let mut h = 0;
            for p in 0..k {
                let aggs: Vec<NodeId> = (0..half).map(|i| f.add_node(format!("agg{p}_{i}"), sw.spec(SwitchRole::Spine))).collect();
                let edges: Vec<NodeId> = (0..half).map(|i| f.add_node(format!("edge{p}_{i}"), sw.spec(SwitchRole::Leaf))).collect();
                for (ei, &e) in edges.iter().enumerate() {
                    for j in 0..hpe {
                        let ip = Ipv4Address::new(10, p as u8, ei as u8, (j + 2) as u8);
                        let hid = f.add_node(format!("h{h}"), host_node(hkind, ip, Ipv4Address::new(10, p as u8, ei as u8, 1)));
                        f.connect(format!("h{h}-edge{p}_{ei}"), hid, e, host.rate, host.delay, host.mtu);
                        h += 1;
                    }
                    for (ai, &a) in aggs.iter().enumerate() {
                        f.connect(format!("edge{p}_{ei}-agg{p}_{ai}"), e, a, fabric.rate, fabric.delay, fabric.mtu);
                    }
                }
                for (ai, &a) in aggs.iter().enumerate() {
                    for c in 0..half {
                        let ci = ai as u32 * half + c;
                        f.connect(format!("agg{p}_{ai}-core{ci}"), a, cores[ci as usize], core.rate, core.delay, core.mtu);
                    }
                }
            }
        }
        other => return cx.err(r.kind.span(), format!("unknown generator `{other}` (leaf-spine, fat-tree)")),
    }
    Ok(())
}

fn explicit_form(cx: &Ctx, raw: &RawTopology, defaults: &SwitchSettings, hkind: HostKind, f: &mut FabricSpec) -> Result<(), TopologyError> {
    let mut seen: BTreeMap<String, std::ops::Range<usize>> = BTreeMap::new();
    let mut check_name = |n: &Spanned<String>| -> Result<(), TopologyError> {
        let name = n.get_ref();
        if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '-') {
            return cx.err(n.span(), format!("node name `{name}` must be non-empty, without spaces or '-'"));
        }
        if let Some(prev) = seen.insert(name.clone(), n.span()) {
            return cx.err(n.span(), format!("node `{name}` is defined twice (first on line {})", cx.line_of(prev.start)));
        }
        Ok(())
    };
    for s in &raw.switch {
        let r = s.get_ref();
        let Some(name) = &r.name else { return cx.err(s.span(), "a [[switch]] needs a `name`") };
        check_name(name)?;
        let mut settings = defaults.clone();
        settings.apply_settings(cx, r, true)?;
        let role = match r.role.as_ref().map(|x| x.get_ref().as_str()) {
            None => SwitchRole::Other,
            Some("leaf" | "tor" | "edge") => SwitchRole::Leaf,
            Some("spine" | "agg" | "aggregation") => SwitchRole::Spine,
            Some("core") => SwitchRole::Core,
            Some("other") => SwitchRole::Other,
            Some(o) => {
                return cx
                    .err(r.role.as_ref().map(|x| x.span()).unwrap_or(s.span()), format!("unknown role `{o}` (leaf, spine, core, other)"))
            }
        };
        f.add_node(name.get_ref().clone(), settings.spec(role));
    }
    // Hosts: addresses are resolved after links (the plan needs the leaf).
    let mut host_raw = Vec::new();
    for h in &raw.host {
        let r = h.get_ref();
        check_name(&r.name)?;
        let kind = match &r.kind {
            Some(k) => host_kind(cx, k)?,
            None => hkind,
        };
        let ip = match &r.ip {
            None => None,
            Some(v) => match v.get_ref() {
                toml::Value::String(s) => {
                    Some(s.parse::<Ipv4Address>().or_else(|_| cx.err(v.span(), format!("`{s}` is not an IPv4 address")))?)
                }
                toml::Value::Array(a) => {
                    return cx.err(v.span(), format!("host `{}` has {} addresses; a host has exactly one", r.name.get_ref(), a.len()))
                }
                _ => return cx.err(v.span(), "ip must be a string like \"10.0.0.2\""),
            },
        };
        let gw = match &r.gateway {
            None => None,
            Some(g) => Some(
                g.get_ref().parse::<Ipv4Address>().or_else(|_| cx.err(g.span(), format!("`{}` is not an IPv4 address", g.get_ref())))?,
            ),
        };
        let id = f.add_node(r.name.get_ref().clone(), host_node(kind, ip.unwrap_or_default(), gw.unwrap_or_default()));
        host_raw.push((id, h, ip, gw));
    }
    // Links: hosts must come first in their links for the gateway to be known,
    // so links are added after host addresses are planned.
    let mut pending = Vec::new();
    for l in &raw.link {
        let r = l.get_ref();
        let a = f
            .node_by_name(r.a.get_ref())
            .map_or_else(|| cx.err(r.a.span(), format!("link end `{}` is not a defined switch or host", r.a.get_ref())), Ok)?;
        let b = f
            .node_by_name(r.b.get_ref())
            .map_or_else(|| cx.err(r.b.span(), format!("link end `{}` is not a defined switch or host", r.b.get_ref())), Ok)?;
        if a == b {
            return cx.err(l.span(), format!("link from `{}` to itself", r.a.get_ref()));
        }
        let rate = match &r.rate {
            Some(x) => cx.rate(x)?,
            None => return cx.err(l.span(), "link needs a `rate` (e.g. rate = \"10Gbps\")"),
        };
        let delay = match &r.delay {
            Some(x) => cx.duration(x)?,
            None => 1_000,
        };
        // Switch-to-switch links make room for an overlay by default.
        let between_switches = f.nodes[a.index()].as_switch().is_some() && f.nodes[b.index()].as_switch().is_some();
        let mtu = mtu_of(cx, r.mtu.as_ref(), if between_switches { switch_link_mtu(HOST_MTU) } else { HOST_MTU })?;
        let name = r.name.as_ref().map(|n| n.get_ref().clone()).unwrap_or_else(|| format!("{}-{}", r.a.get_ref(), r.b.get_ref()));
        pending.push((l, a, b, rate, delay, mtu, name));
    }
    // Plan host addresses: 10.0.<leaf index>.<n+2> on the switch they attach to.
    let switch_index: BTreeMap<NodeId, usize> = f.switches().into_iter().enumerate().map(|(i, s)| (s, i)).collect();
    let mut per_leaf: BTreeMap<NodeId, u32> = BTreeMap::new();
    for (id, h, ip, gw) in &host_raw {
        let attached: Vec<NodeId> = pending
            .iter()
            .filter_map(|(_, a, b, ..)| {
                if a == id {
                    Some(*b)
                } else if b == id {
                    Some(*a)
                } else {
                    None
                }
            })
            .collect();
        let name = h.get_ref().name.get_ref();
        if attached.len() != 1 {
            return cx.err(h.span(), format!("host `{name}` has {} links; a host has exactly one link to a switch", attached.len()));
        }
        let leaf = attached[0];
        let Some(&li) = switch_index.get(&leaf) else {
            return cx.err(h.span(), format!("host `{name}` is linked to another host; hosts attach to switches"));
        };
        if li > 255 {
            return cx.err(h.span(), "too many switches for the 10.0.<switch>.0/24 address plan; give hosts explicit `ip`s");
        }
        let n = per_leaf.entry(leaf).or_insert(0);
        let ip = ip.unwrap_or(Ipv4Address::new(10, 0, li as u8, (*n + 2).min(254) as u8));
        *n += 1;
        let gw = gw.unwrap_or(Ipv4Address((ip.0 & 0xffff_ff00) | 1));
        if gw == ip {
            return cx.err(h.span(), format!("host `{name}` uses its gateway's address {ip}"));
        }
        if let NodeKind::Host(hs) = &mut f.nodes[id.index()].kind {
            hs.ip = ip;
            hs.mac = host_mac(ip);
            hs.gateway = gw;
        }
    }
    for (l, a, b, rate, delay, mtu, name) in pending {
        if f.links.iter().any(|x| x.name == name) {
            return cx.err(l.span(), format!("two links named `{name}`"));
        }
        f.connect(name, a, b, rate, delay, mtu);
    }
    Ok(())
}

#[cfg(test)]
#[path = "topology/tests.rs"]
mod tests;
