//! INT best-nexthop load balancing (`../shared/papers/int-best-nexthop-lb.txt`,
//! §III): the arithmetic of the routing-decision and monitoring phases.
//!
//! - **Degree of congestion** (§III, routing decision phase): "the sum of
//!   each metric with min-max normalization", each metric minus the lower
//!   bound of its range divided by the range's size. Values outside the
//!   range are clamped to it, so one metric weighs at most 1.
//! - **Link utilisation by DRE** (§IV, after CONGA, its ref. 12): +1 for every
//!   packet sent on the port, halved every period (50 ms in the paper).
//!   On a Tofino the halving cannot run on a timer over the whole array;
//!   the register keeps the value with the period it was last touched in
//!   and the access halves it once per period that passed (`value >> n`),
//!   which gives the same value the paper's periodic halving gives at
//!   every packet.
//!
//! Invariants: a degree of congestion lies in [0, 3]; a DRE value never
//! grows without a packet and halves exactly once per elapsed period.
//!
//! - **Monitoring** (§III). A leaf inserts the INT shim (`weft_wire::int`)
//!   into every IPv4 packet from a host; every switch's egress towards
//!   another switch writes the larger of its measurement and the header's
//!   (hop latency = dequeue − enqueue time, queue occupancy = the queue's
//!   depth at enqueue, link utilisation = the port's DRE after this
//!   packet); the leaf that sends the packet to its host strips the shim
//!   (the host gets the sender's bytes).
//! - **Bottleneck and best-port registers** (§III, Fig. 3). A packet from
//!   source S that reached this leaf through uplink P carries the
//!   congestion of the path between S's leaf and here through P: the sink
//!   leaf stores the three values under (S's leaf, P) and keeps, per
//!   source leaf, the least degree of congestion and its port (replaced by
//!   a lower one, refreshed by a new value of the same port). One array
//!   cannot be written by this telemetry and read for forwarding in one
//!   pass, so the update runs in egress and reaches ingress through an
//!   egress-to-ingress array, as CONGA's DRE does.
//! - **Flowlets** (§III). At a leaf, a packet that starts a new flowlet
//!   (gap over `flowlet_timeout_us` since its flow's last packet; the
//!   last-time and flowlet-port registers of [`crate::flowlet`]) takes the
//!   best port towards its destination's leaf; inside a flowlet it keeps
//!   its port. Without telemetry for the destination, and at aggregation
//!   and core switches ("basic routing", §IV), the 5-tuple hash (ECMP).
//!
//! - **Probes** (§III assumption 2, "each link has at least one packet to
//!   forward"; §IV: the program parses a "probe packet protocol"). Every
//!   `probe_interval_us` a leaf's packet generator sends one probe
//!   (`weft_wire::int::probe_frame`) out of every up uplink, in the queue
//!   of DSCP 0 traffic, to the next other leaf in turn; transit switches
//!   merge into its shim as into a data packet's and hash it on a field
//!   that changes per probe, so probes cover the equal-cost paths beyond
//!   the first hop too; the destination leaf updates its registers from it
//!   as from a data packet and consumes it in egress.
//! - **INT collector** (§III, Fig. 2). The sink "sends network information
//!   to INTCollector": weft's collector is the program's report memory
//!   beside the pipeline, one entry per (source leaf, port) with the last
//!   report, read at scrape time ([`Program::path_telemetry`]: the
//!   `weft_int_path_*` series and `summary.json`).
//! - Hosts cannot forge telemetry: an IPv4 packet with the shim's protocol
//!   from a host-facing port is dropped and counted (`int_host_shim_drops`).
//!
//! Time parameters (DRE period, flowlet timeout, probe interval, hop-latency
//! range) default to the paper's values for its leaf-spine testbed, whose
//! 8 Mbit/s uplinks are the scheme's reference rate: a run that scales
//! parameters (docs/SCHEMES.md#parameter-scaling, [`TimeScale`]) multiplies them by 8 Mbit/s /
//! its fabric rate. The paper kept 50 ms also on its 10 Mbit/s fat-tree,
//! so there a scaled run uses 40 ms.

use super::flowlet::FlowletTable;
use super::{ecmp, param_in, param_us, ParamInfo, Params, SchemeError, SchemeInfo, TimeScale};
use weft_tofino::program::{Declarations, EmitTarget, PacketGenerator, PacketSource, PathTelemetry, ScrapeView, SwitchView};
use weft_tofino::{EgressCx, Gress, IngressCx, Program, ProgramError, RegisterId};
use weft_wire::ids::{PortId, QueueId};
use weft_wire::int::{self as shim, Header, Metric, Probe};
use weft_wire::ipv4::Ipv4Address;
use weft_wire::time::{BitRate, Nanos};

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: "int-nexthop",
        source: "INT best-nexthop (int-best-nexthop-lb) §III, §IV",
        summary: "INT headers with path maxima, bottleneck and best-port registers per source leaf, flowlets to the least congested uplink",
        reference_rate: Some(BitRate::mbps(8)),
        params: vec![
            ParamInfo {
                name: "dre_period_us",
                default: "50000",
                unit: "µs",
                doc: "the DRE halves every port's utilisation this often (§IV: 50 ms)",
            },
            ParamInfo {
                name: "flowlet_timeout_us",
                default: "50000",
                unit: "µs",
                doc: "a gap this long starts a new flowlet (§III: 50 ms)",
            },
            ParamInfo {
                name: "latency_range_us",
                default: "0,50000",
                unit: "min,max µs",
                doc: "hop latency range of the min-max normalisation",
            },
            ParamInfo {
                name: "queue_range_bytes",
                default: "0,150000",
                unit: "min,max bytes",
                doc: "queue occupancy range of the normalisation",
            },
            ParamInfo { name: "util_range", default: "0,100", unit: "min,max", doc: "DRE utilisation range of the normalisation" },
            ParamInfo { name: "flowlet_entries", default: "4096", unit: "entries", doc: "flowlet table size" },
            ParamInfo {
                name: "probe_interval_us",
                default: "10000",
                unit: "µs",
                doc: "each leaf sends a probe out of every uplink this often (§III assumption 2); 0 = no probes",
            },
        ],
    }
}

/// Largest number of leaves the per-leaf registers hold.
const MAX_LEAVES: u32 = 256;
/// Largest number of ports the per-(leaf, port) registers hold.
const MAX_PORTS: u32 = 64;
/// Fixed-point scale of a degree of congestion in a register.
const DEGREE_SCALE: f64 = 1_000_000.0;
/// Generator id of the probe timer.
const PROBE_GENERATOR: u8 = 1;

/// A `min,max` parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bounds(f64, f64);

impl std::str::FromStr for Bounds {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        let (a, b) = s.split_once(',').ok_or(())?;
        Ok(Bounds(a.trim().parse().map_err(|_| ())?, b.trim().parse().map_err(|_| ())?))
    }
}

impl std::fmt::Display for Bounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.0, self.1)
    }
}

/// The known range of one metric (§III assumption 3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricRange {
    /// Lower bound.
    pub min: f64,
    /// Upper bound.
    pub max: f64,
}

impl MetricRange {
    /// A range `min..max`; `min >= max` (or a bound that is not finite)
    /// is an error naming the parameter.
    pub fn new(param: &str, min: f64, max: f64) -> Result<Self, SchemeError> {
        if min.is_finite() && max.is_finite() && min < max {
            Ok(MetricRange { min, max })
        } else {
            Err(SchemeError::BadValue {
                scheme: "int-nexthop".into(),
                param: param.into(),
                value: format!("{min}..{max}"),
                unit: "range with min < max".into(),
            })
        }
    }

    /// Min-max normalisation of `v`, clamped to [0, 1].
    pub fn normalise(&self, v: f64) -> f64 {
        ((v - self.min) / (self.max - self.min)).clamp(0.0, 1.0)
    }
}

/// The degree of congestion of a path from its three bottleneck values
/// (hop latency, queue occupancy, link utilisation) and their ranges.
pub fn degree_of_congestion(values: [u32; 3], ranges: &[MetricRange; 3]) -> f64 {
    values.iter().zip(ranges).map(|(v, r)| r.normalise(*v as f64)).sum()
}

/// One packet sent on a port whose DRE register holds `stored` (value in
/// the low 32 bits, the period it was last touched in above): the new
/// register content and the port's utilisation value after the packet.
pub fn dre_on_packet(stored: u64, now: Nanos, period: Nanos) -> (u64, u32) {
    let (value, at) = dre_now(stored, now, period);
    let value = value.saturating_add(1);
    (((at as u64) << 32) | value as u64, value)
}

/// The port's utilisation value at `now` without a packet (what a read
/// sees), and the current period.
pub fn dre_now(stored: u64, now: Nanos, period: Nanos) -> (u32, u32) {
    let epoch = (now / period.max(1)) as u32;
    let (value, last) = (stored as u32, (stored >> 32) as u32);
    let halvings = epoch.saturating_sub(last);
    (if halvings >= 32 { 0 } else { value >> halvings }, epoch)
}

/// The registers of the program.
#[derive(Debug, Clone, Copy)]
struct Regs {
    /// Per egress port: DRE value | period (egress).
    dre: RegisterId,
    /// Per (source leaf, port): the three bottleneck values (egress).
    bottleneck: [RegisterId; 3],
    /// Per source leaf: degree (fixed point) << 16 | port + 1 (egress).
    best: RegisterId,
    /// The same, published to ingress.
    best_to_ingress: RegisterId,
    /// The next probe's number (ingress; with probes).
    probe_next: Option<RegisterId>,
}

/// The collector's last report of one path.
#[derive(Debug, Clone, Copy, Default)]
struct Report {
    values: [u32; 3],
    degree: f64,
    reports: u64,
}

/// Where a leaf sends probes.
#[derive(Debug, Clone, Default)]
struct ProbePlan {
    /// The leaf's own address (the probes' source).
    address: Ipv4Address,
    /// Its index among the leaves.
    leaf: u16,
    /// Per leaf: an address routed to it (none for this leaf).
    to_leaf: Vec<Option<Ipv4Address>>,
    /// The leaf's ports towards other switches.
    uplinks: Vec<PortId>,
}

/// The INT best-nexthop program.
#[derive(Debug, Clone)]
pub struct IntNexthop {
    dre_period: Nanos,
    ranges: [MetricRange; 3],
    flowlet_timeout: Nanos,
    probe_interval: Nanos,
    entries: u32,
    leaf: bool,
    host_facing: Vec<bool>,
    plan: ProbePlan,
    regs: Option<Regs>,
    flowlets: Option<FlowletTable>,
    /// The INT collector: per (source leaf, port) the last report.
    collector: Vec<Option<Report>>,
    c: Counters,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    inserted: u64,
    stripped: u64,
    best_changes: u64,
    new_flowlets: u64,
    best_choices: u64,
    probes_sent: u64,
    probes_received: u64,
    host_shim_drops: u64,
}

impl IntNexthop {
    /// Builds from parameters.
    pub fn from_params(p: &Params) -> Result<Self, SchemeError> {
        let range = |k: &str, d: Bounds, scale: f64| -> Result<MetricRange, SchemeError> {
            let b = param_in("int-nexthop", p, k, "min,max", d, |_| true)?;
            MetricRange::new(k, b.0 * scale, b.1 * scale)
        };
        Ok(IntNexthop {
            dre_period: param_us("int-nexthop", p, "dre_period_us", 50_000.0, true)?,
            flowlet_timeout: param_us("int-nexthop", p, "flowlet_timeout_us", 50_000.0, true)?,
            ranges: [
                range("latency_range_us", Bounds(0.0, 50_000.0), 1_000.0)?,
                range("queue_range_bytes", Bounds(0.0, 150_000.0), 1.0)?,
                range("util_range", Bounds(0.0, 100.0), 1.0)?,
            ],
            probe_interval: param_us("int-nexthop", p, "probe_interval_us", 10_000.0, false)?,
            entries: param_in("int-nexthop", p, "flowlet_entries", "entries (1..=65536)", 4096u32, |v| (1..=65536).contains(v))?,
            leaf: false,
            host_facing: Vec::new(),
            plan: ProbePlan::default(),
            regs: None,
            flowlets: None,
            collector: Vec::new(),
            c: Counters::default(),
        })
    }

    /// Its DRE period, flowlet timeout, probe interval and hop-latency range
    /// multiplied by `s` (docs/SCHEMES.md#parameter-scaling).
    pub fn time_scaled(mut self, s: TimeScale) -> Self {
        self.dre_period = s.ns(self.dre_period);
        self.flowlet_timeout = s.ns(self.flowlet_timeout);
        self.probe_interval = s.ns(self.probe_interval);
        let latency = &mut self.ranges[Metric::HopLatency as usize];
        (latency.min, latency.max) = (latency.min * s.factor(), latency.max * s.factor());
        self
    }

    fn faces_host(&self, p: PortId) -> bool {
        self.host_facing.get(p.index()).copied().unwrap_or(false)
    }

    /// The flow's 5-tuple hash; under the INT shim the L4 ports follow it.
    fn flow_hash(cx: &IngressCx<'_>) -> u32 {
        let Some(ip) = cx.info.ip else { return 0 };
        let (proto, ports_at) = if ip.protocol == shim::PROTOCOL {
            let at = ip.l4_offset as usize;
            (cx.frame.get(at).copied().unwrap_or(0), at + shim::SHIM_LEN)
        } else {
            (ip.protocol, ip.l4_offset as usize)
        };
        let port = |o: usize| cx.frame.get(ports_at + o..ports_at + o + 2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        ecmp::flow_hash(cx.hash_seed, (ip.src.0, ip.dst.0, proto, port(0), port(2)), true)
    }

    /// The generator fired: one probe out of every up uplink to the next
    /// other leaf in turn.
    fn send_probes(&mut self, cx: &mut IngressCx<'_>, reg: RegisterId) -> Result<(), ProgramError> {
        let others = self.plan.to_leaf.len().saturating_sub(1) as u32;
        if !self.leaf || others == 0 {
            return Ok(());
        }
        let k = cx.register(reg, 0, |c| ((c + 1) & 0xffff_ffff, c as u32))?;
        let t = (k % others) as u16;
        let dst_leaf = if t >= self.plan.leaf { t + 1 } else { t };
        let Some(dst) = self.plan.to_leaf.get(dst_leaf as usize).copied().flatten() else { return Ok(()) };
        for &p in &self.plan.uplinks {
            if !cx.port_up.get(p.index()).copied().unwrap_or(false) {
                continue;
            }
            let probe = Probe {
                flow: (k as u16).wrapping_mul(40_503).wrapping_add(p.0.wrapping_mul(257)),
                origin_leaf: self.plan.leaf,
                uplink: p.0,
                seq: self.c.probes_sent as u32,
            };
            cx.emit(EmitTarget::Port(p, QueueId(0)), shim::probe_frame(self.plan.address, dst, &probe));
            self.c.probes_sent += 1;
        }
        Ok(())
    }

    /// A probe from `port` at a leaf: for this leaf, to a host port's
    /// egress (the sink), which updates the registers and consumes it.
    fn probe_arrived(&mut self, cx: &mut IngressCx<'_>, port: PortId, at: usize) {
        let mine = self.leaf && cx.route_data == Some(self.plan.leaf as u32);
        match cx.frame.get(at + shim::SHIM_LEN..).map(Probe::parse) {
            Some(Ok(p)) if mine => {
                cx.bridge(((p.origin_leaf as u32 + 1) << 16) | port.0 as u32);
                cx.forward_to(cx.group.first().copied());
            }
            _ => cx.drop_packet(),
        }
    }

    /// The collector's entry of (source leaf, port).
    fn report_slot(&mut self, leaf: u32, port: u32) -> Option<&mut Option<Report>> {
        self.collector.get_mut((leaf * MAX_PORTS + port % MAX_PORTS) as usize)
    }
}

impl Program for IntNexthop {
    fn name(&self) -> &'static str {
        "int-nexthop"
    }

    fn declare(&mut self, d: &mut Declarations) {
        d.hash("int_5tuple_crc32", Gress::Ingress, 0, 32);
        self.flowlets = Some(FlowletTable::declare(d, "int", self.entries, self.flowlet_timeout, 1, 3));
        let e = Gress::Egress;
        let per_path = MAX_LEAVES * MAX_PORTS;
        self.regs = Some(Regs {
            dre: d.register("int_dre", e, 0, MAX_PORTS, 64),
            bottleneck: [
                d.register("int_bottleneck_hop_latency", e, 1, per_path, 32),
                d.register("int_bottleneck_queue_occupancy", e, 2, per_path, 32),
                d.register("int_bottleneck_link_utilization", e, 3, per_path, 32),
            ],
            best: d.register("int_best_port", e, 4, MAX_LEAVES, 64),
            best_to_ingress: d.egress_to_ingress("int_best_port_to_ingress", 2, MAX_LEAVES, 64),
            probe_next: (self.probe_interval > 0).then(|| d.register("int_probe_next", Gress::Ingress, 0, 1, 32)),
        });
        if self.probe_interval > 0 {
            d.packet_generator(PacketGenerator { id: PROBE_GENERATOR, period_ns: self.probe_interval, frame_len: 64 });
        }
        d.metadata_bits(32 + 16 + 16);
    }

    fn attach(&mut self, view: &SwitchView) {
        self.leaf = view.leaf_index.is_some();
        self.host_facing = view.host_facing.clone();
        let leaves = (view.leaves as u32).min(MAX_LEAVES) as usize;
        let to_leaf = (0..leaves)
            .map(|l| Some(l as u16).filter(|l| Some(*l) != view.leaf_index).and_then(|l| view.leaf_addresses.get(l as usize).copied()))
            .collect();
        self.plan = ProbePlan { address: view.address, leaf: view.leaf_index.unwrap_or(0), to_leaf, uplinks: view.fabric_ports() };
        if self.leaf {
            self.collector = vec![None; leaves * MAX_PORTS as usize];
        }
    }

    fn route_data(&self, route: &weft_tofino::l3::Route) -> Option<u32> {
        super::leaf_of_route(route)
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let (Some(regs), Some(flowlets)) = (self.regs, self.flowlets.clone()) else { return Ok(()) };
        let up = |cx: &IngressCx<'_>, p: PortId| cx.port_up.get(p.index()).copied().unwrap_or(false);
        let in_port = match cx.source {
            PacketSource::Port(p) => Some(p),
            _ => None,
        };
        if let PacketSource::Generator(PROBE_GENERATOR) = cx.source {
            if let Some(reg) = regs.probe_next {
                self.send_probes(cx, reg)?;
            }
            cx.consume();
            return Ok(());
        }
        let Some(ip) = cx.info.ip else {
            cx.forward_to(cx.group.first().copied());
            return Ok(());
        };
        if ip.protocol == shim::PROTOCOL {
            if let Some(p) = in_port {
                if self.faces_host(p) {
                    // A host cannot speak for the switches' telemetry.
                    self.c.host_shim_drops += 1;
                    cx.drop_packet();
                    return Ok(());
                }
                let at = ip.l4_offset as usize;
                if cx.frame.get(at).copied() == Some(shim::PROBE_PROTOCOL) && self.leaf {
                    self.probe_arrived(cx, p, at);
                    return Ok(());
                }
            }
        }
        let hash = Self::flow_hash(cx);
        // Telemetry for egress: the source's leaf and the port it came in on.
        if let (Some(p), true) = (in_port, ip.protocol == shim::PROTOCOL) {
            if let Some(src_leaf) = cx.route_data_of(ip.src) {
                cx.bridge(((src_leaf + 1) << 16) | p.0 as u32);
            }
        }
        // Monitoring: a leaf marks every packet from a host.
        if self.leaf && in_port.is_some_and(|p| self.faces_host(p)) && ip.protocol != shim::PROTOCOL {
            let l3 = cx.info.l3_offset as usize;
            if shim::insert(cx.frame, l3).is_ok() {
                self.c.inserted += 1;
            }
        }
        if cx.group.len() <= 1 {
            cx.forward_to(cx.group.first().copied().filter(|p| up(cx, *p)));
            return Ok(());
        }
        if !self.leaf {
            // Basic routing (§IV): the 5-tuple hash.
            let (port, _) = ecmp::select_resilient(cx.group, cx.port_up, hash);
            cx.forward_to(port);
            return Ok(());
        }
        let dst_leaf = cx.route_data.unwrap_or(0) % MAX_LEAVES;
        let mut took_best = false;
        let d = flowlets.lookup(cx, hash, |cx| {
            let word = cx.snapshot(regs.best_to_ingress, dst_leaf)?;
            let best = (word & 0xffff) as u16;
            let port = (best != 0).then(|| PortId(best - 1)).filter(|p| cx.group.contains(p) && up(cx, *p));
            took_best = port.is_some();
            Ok(port.or_else(|| ecmp::select_resilient(cx.group, cx.port_up, hash).0))
        })?;
        if d.new_flowlet {
            self.c.new_flowlets += 1;
            self.c.best_choices += took_best as u64;
        }
        cx.forward_to(d.port);
        Ok(())
    }

    fn egress(&mut self, cx: &mut EgressCx<'_>) -> Result<(), ProgramError> {
        let Some(regs) = self.regs else { return Ok(()) };
        let (now, period) = (cx.now, self.dre_period);
        let util = cx.register(regs.dre, cx.port.0 as u32 % MAX_PORTS, |v| dre_on_packet(v, now, period))?;
        let Some(info) = cx.info() else { return Ok(()) };
        let Some(ip) = info.ip.filter(|i| i.protocol == shim::PROTOCOL) else { return Ok(()) };
        let (l3, at) = (info.l3_offset as usize, ip.l4_offset as usize);
        if !self.faces_host(cx.port) {
            // Transit: the larger of this hop's measurement and the header's.
            let latency = now.saturating_sub(cx.enq_ts).min(u32::MAX as u64) as u32;
            if let Ok(mut h) = Header::new_checked(&mut cx.frame[at..]) {
                h.merge_max(Metric::HopLatency, latency);
                h.merge_max(Metric::QueueOccupancy, cx.enq_depth.min(u32::MAX as u64) as u32);
                h.merge_max(Metric::LinkUtilization, util);
            }
            return Ok(());
        }
        // Sink: the host gets its bytes back; the telemetry updates the
        // registers of the path to the source's leaf through the port the
        // packet came in on.
        let Ok(t) = shim::strip(cx.frame, l3) else { return Ok(()) };
        if t.next_protocol == shim::PROBE_PROTOCOL {
            self.c.probes_received += 1;
            cx.consume = true;
        } else {
            self.c.stripped += 1;
        }
        let (src_leaf, in_port) = (cx.bridged >> 16, cx.bridged & 0xffff);
        if src_leaf == 0 {
            return Ok(());
        }
        let leaf = (src_leaf - 1) % MAX_LEAVES;
        let values = [t.hop_latency.unwrap_or(0), t.queue_occupancy.unwrap_or(0), t.link_utilization.unwrap_or(0)];
        let index = leaf * MAX_PORTS + in_port % MAX_PORTS;
        for (reg, v) in regs.bottleneck.iter().zip(values) {
            cx.register(*reg, index, |_| (v as u64, ()))?;
        }
        let congestion = degree_of_congestion(values, &self.ranges);
        if let Some(slot) = self.report_slot(leaf, in_port) {
            let reports = slot.map_or(0, |r| r.reports) + 1;
            *slot = Some(Report { values, degree: congestion, reports });
        }
        let degree = (congestion * DEGREE_SCALE) as u64;
        let port = in_port as u64 + 1;
        let (word, changed) = cx.register(regs.best, leaf, |old| {
            let (old_degree, old_port) = (old >> 16, old & 0xffff);
            if old_port == 0 || old_port == port || degree < old_degree {
                let new = (degree << 16) | port;
                (new, (new, old_port != port))
            } else {
                (old, (old, false))
            }
        })?;
        self.c.best_changes += changed as u64;
        cx.publish(regs.best_to_ingress, leaf, word)?;
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("int_inserted", self.c.inserted),
            ("int_stripped", self.c.stripped),
            ("int_best_changes", self.c.best_changes),
            ("int_new_flowlets", self.c.new_flowlets),
            ("int_best_choices", self.c.best_choices),
            ("int_probes_sent", self.c.probes_sent),
            ("int_probes_received", self.c.probes_received),
            ("int_host_shim_drops", self.c.host_shim_drops),
        ]
    }

    fn path_telemetry(&self, view: &ScrapeView<'_>) -> Vec<PathTelemetry> {
        let Some(regs) = self.regs else { return Vec::new() };
        let mut out = Vec::new();
        for (i, r) in self.collector.iter().enumerate() {
            let Some(r) = r else { continue };
            let (leaf, port) = (i as u32 / MAX_PORTS, i as u32 % MAX_PORTS);
            let best = view.registers.cpu_read(regs.best, leaf).unwrap_or(0) & 0xffff;
            out.push(PathTelemetry {
                source_leaf: leaf as u16,
                port: port as u16,
                hop_latency_ns: r.values[0],
                queue_bytes: r.values[1],
                utilization: r.values[2],
                congestion: r.degree,
                reports: r.reports,
                best: best == port as u64 + 1,
            });
        }
        out
    }
}

/// The registry entry of `int-nexthop` (see [`crate::REGISTRY`]).
pub const SCHEME: crate::Scheme = crate::Scheme {
    info,
    build: |p, s| Ok(Box::new(IntNexthop::from_params(p)?.time_scaled(s))),
    metrics: crate::SchemeMetrics {
        counters: &[
            ("int_inserted", "Packets from hosts a leaf gave the INT shim (§III, source switch)."),
            ("int_stripped", "Packets whose INT shim a leaf removed before the host (sink switch)."),
            ("int_best_changes", "Times a leaf's best port towards a source leaf changed."),
            ("int_new_flowlets", "Flowlets started at a leaf (gap over the flowlet timeout)."),
            ("int_best_choices", "New flowlets that took the best port (the others: no telemetry yet, ECMP)."),
            ("int_probes_sent", "Probes a leaf's packet generator sent out of its uplinks (§III assumption 2)."),
            ("int_probes_received", "Probes a leaf took as their sink (registers updated, probe consumed)."),
            (
                "int_host_shim_drops",
                "Packets from hosts that already carried the INT shim's protocol (dropped: hosts cannot forge telemetry).",
            ),
        ],
        gauges: &[],
        port_gauges: &[],
        distributions: &[],
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_degree_of_congestion_is_the_sum_of_min_max_normalised_metrics() {
        let r = [
            MetricRange::new("latency", 0.0, 1000.0).unwrap(),
            MetricRange::new("queue", 1000.0, 5000.0).unwrap(),
            MetricRange::new("util", 0.0, 100.0).unwrap(),
        ];
        // 250/1000 + (3000-1000)/4000 + 10/100 = 0.25 + 0.5 + 0.1
        assert!((degree_of_congestion([250, 3000, 10], &r) - 0.85).abs() < 1e-12);
        // Out of range: clamped, each metric at most 1.
        assert_eq!(degree_of_congestion([5000, 0, 1000], &r), 2.0);
        assert!(MetricRange::new("queue", 5.0, 5.0).is_err());
        let e = MetricRange::new("queue_range", 9.0, 1.0).unwrap_err();
        assert!(e.to_string().contains("queue_range"), "{e}");
    }

    #[test]
    fn dre_adds_one_per_packet_and_halves_once_per_period() {
        let period = 50_000_000;
        let mut reg = 0u64;
        for i in 0..10 {
            let (r, v) = dre_on_packet(reg, 1_000_000 * i, period);
            reg = r;
            assert_eq!(v, i as u32 + 1);
        }
        // 10 in period 0; one period later 5, then 2 (integer halving), 0.
        assert_eq!(dre_now(reg, 50_000_000, period).0, 5);
        assert_eq!(dre_now(reg, 120_000_000, period).0, 2);
        assert_eq!(dre_now(reg, 10 * period, period).0, 0);
        // A packet in period 2 finds 10 >> 2 = 2 and makes 3.
        assert_eq!(dre_on_packet(reg, 2 * period + 1, period).1, 3);
    }
}
