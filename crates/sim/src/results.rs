//! `summary.json`: the results of a run (schema `weft.summary/1`).
//!
//! The document is deterministic: it holds no wall-clock figure, and every
//! list is in node/port/queue/flow order, so the same seed gives the same
//! bytes. Schema (all times in ns, all sizes in bytes):
//!
//! ```text
//! schema            "weft.summary/1"
//! topology, scheme, traffic, seed
//! simulated_ns      simulated time at the end of the run
//! time_origin_ns    trace time of simulated 0 (a replayed flow list that
//!                   starts at 2 s runs shifted by 2 s; flow times are
//!                   simulated times)
//! totals            events, packet_hops, host_deliveries, link_down_drops,
//!                   link_loss_drops
//! flows[]           id, src, dst, bytes_sent, bytes_delivered, packets_sent,
//!                   packets_delivered, drops (= sent - delivered packets),
//!                   ecn_marks, out_of_order, first_arrival, last_arrival,
//!                   size (fixed-size flows), start, first_sent, fct (first
//!                   packet sent to last byte received, complete flows),
//!                   base_fct (alone on its path, see `fct`), slowdown
//!                   (fct / base_fct), sender_fct (start to the last
//!                   acknowledgment at the sender), ideal_fct (the ConWeave
//!                   authors' ideal FCT), slowdown_ns3 (sender_fct /
//!                   ideal_fct, at least 1); only the flows that had
//!                   started by simulated_ns
//! flows_not_started flows of the workload whose start the run never
//!                   reached (a run cut short; absent when 0)
//! switches[]        name, scheme, counters{...}, scheme_counters{...},
//!                   scheme_distributions{name: {value: samples}},
//!                   max_buffer_bytes, ports[]: port, peer, counters{tx/rx,
//!                   pfc_pause_sent, pfc_resume_sent, pfc_received},
//!                   queues[] (only queues that carried traffic): queue,
//!                   tx_packets, tx_bytes, max_depth_bytes, drops_threshold,
//!                   drops_buffer_full, ecn_marks (and, only when non-zero,
//!                   pfc_watchdog_storms, pfc_watchdog_drops,
//!                   pfc_watchdog_forwarded)
//! hosts[]           name, ip, counters{...}
//! network           pfc_pauses, drops, drops_buffer, ecn_marks (all switches;
//!                   pfc_watchdog_drops when non-zero, part of drops)
//! scheme_totals     counters{...} summed over switches, distributions{name:
//!                   samples, avg, p50, p99, p999, max} merged over switches
//!                   (ConWeave: reorder queues per host port and reorder
//!                   buffer bytes per switch, sampled every 10 us)
//! uplink_imbalance  interval_ns, samples, avg, p50, p90, p99, cdf[] of
//!                   (max - min) / mean of each leaf's uplink bytes per
//!                   interval (ConWeave Fig. 14), or null
//! slowdown          definition ("ns3" or "weft", see `fct`), bdp_bytes,
//!                   warmup_ns, incomplete (counted flows that
//!                   did not finish), overall / below_bdp / above_bdp / by_size[]
//!                   (<=10KB, 10KB-100KB, 100KB-1MB, >1MB): flows, avg,
//!                   p50, p95, p99, p999 of the complete flows' slowdowns
//! ```

use crate::engine::{Engine, EngineTotals};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use weft_core::fabric::FabricSpec;
use weft_core::fct::{self, Paths};
use weft_core::host::roce::RecvQp;
use weft_core::host::tcp::TcpReceiver;
use weft_core::host::udp::PROBE_LEN;
use weft_core::host::{FlowStats, RoceHost, TcpHost, UdpHost, UdpMode};
use weft_core::node::Node;
use weft_core::switch::{PortCounters, SwitchCounters};
use weft_tofino::tm::QueueStats;
use weft_wire::ids::{PortId, QueueId};
use weft_wire::time::Nanos;

/// Schema identifier.
pub const SCHEMA: &str = "weft.summary/1";

/// Reads the schema id of a `summary.json` (only [`SCHEMA`] is read).
fn schema_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::borrow::Cow<'static, str>, D::Error> {
    let s = <String as serde::Deserialize>::deserialize(d)?;
    if s == SCHEMA {
        Ok(SCHEMA.into())
    } else {
        Err(serde::de::Error::custom(format!("schema `{s}`, expected `{SCHEMA}`")))
    }
}

impl Summary {
    /// Reads a `summary.json` written by [`Summary::to_json`] (of this
    /// version: `weft compare --machines` gathers runs made elsewhere).
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// Results of one flow.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct FlowResult {
    /// Flow id.
    pub id: u32,
    /// Source host.
    pub src: Arc<str>,
    /// Destination host.
    pub dst: Arc<str>,
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Payload bytes delivered.
    pub bytes_delivered: u64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets delivered.
    pub packets_delivered: u64,
    /// Packets lost.
    pub drops: u64,
    /// Packets delivered with CE.
    pub ecn_marks: u64,
    /// Packets delivered out of order.
    pub out_of_order: u64,
    /// First arrival.
    pub first_arrival: Option<Nanos>,
    /// Last arrival.
    pub last_arrival: Option<Nanos>,
    /// Flow size (fixed-size flows).
    pub size: Option<u64>,
    /// Scheduled start.
    pub start: Nanos,
    /// First packet sent (after ARP, pauses).
    pub first_sent: Option<Nanos>,
    /// Completion time: first packet sent to last byte received, for a
    /// fixed-size flow whose every byte arrived.
    pub fct: Option<Nanos>,
    /// The same flow alone on its path in the idle fabric ([`weft_core::fct`]).
    pub base_fct: Option<Nanos>,
    /// `fct / base_fct`.
    pub slowdown: Option<f64>,
    /// Completion at the sender: from the scheduled start to the last
    /// acknowledgment (RoCE, TCP) or to the last byte received (UDP).
    pub sender_fct: Option<Nanos>,
    /// The ConWeave authors' ideal FCT ([`fct::ns3_ideal_fct`]).
    pub ideal_fct: Option<Nanos>,
    /// `max(1, sender_fct / ideal_fct)` (the authors' definition).
    pub slowdown_ns3: Option<f64>,
    /// Packets sent again (RoCE).
    pub retransmits: u64,
    /// NAKs the receiver sent (RoCE).
    pub naks: u64,
    /// CNPs the receiver sent (RoCE).
    pub cnps: u64,
    /// Largest number of bytes in flight at the sender (RoCE).
    pub max_in_flight: u64,
}

impl FlowResult {
    /// The slowdown under `definition`.
    pub fn slowdown_by(&self, definition: fct::SlowdownDefinition) -> Option<f64> {
        match definition {
            fct::SlowdownDefinition::Weft => self.slowdown,
            fct::SlowdownDefinition::Ns3 => self.slowdown_ns3,
        }
    }

    /// Sets `sender_fct`, `ideal_fct` and `slowdown_ns3`.
    fn with_ns3(mut self, sender_fct: Option<Nanos>, ideal_fct: Option<Nanos>) -> Self {
        self.sender_fct = sender_fct;
        self.ideal_fct = ideal_fct;
        self.slowdown_ns3 = sender_fct.zip(ideal_fct).filter(|(_, i)| *i > 0).map(|(f, i)| (f as f64 / i as f64).max(1.0));
        self
    }
}

/// A queue's results.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct QueueResult {
    /// Queue id.
    pub queue: u8,
    /// Counters.
    #[serde(flatten)]
    pub stats: QueueStats,
}

/// A port's results.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct PortResult {
    /// Port id.
    pub port: u16,
    /// Node at the other end.
    pub peer: String,
    /// Counters.
    pub counters: PortCounters,
    /// Queues that carried or dropped traffic.
    pub queues: Vec<QueueResult>,
}

impl NetworkTotals {
    /// Totals over the switches' counters.
    pub fn of(switches: &[SwitchResult]) -> NetworkTotals {
        let mut network = NetworkTotals::default();
        for w in switches {
            let c = &w.counters;
            network.pfc_pauses += w.ports.iter().map(|p| p.counters.pfc_pause_sent).sum::<u64>();
            network.drops += c.drops();
            network.drops_buffer += c.drop_tm;
            network.ecn_marks += c.ecn_marks;
            let wd: u64 = w.ports.iter().flat_map(|p| p.queues.iter()).map(|q| q.stats.pfc_watchdog_drops).sum();
            network.pfc_watchdog_drops += wd;
            network.drops += wd;
        }
        network
    }
}

/// The results of switch `fabric.nodes[i]`.
pub fn switch_result(fabric: &FabricSpec, i: usize, s: &weft_core::switch::Switch) -> SwitchResult {
    let name_of = |n: weft_wire::ids::NodeId| fabric.nodes.get(n.index()).map(|x| x.name.clone()).unwrap_or_default();
    let spec = &fabric.nodes[i];
    let nq = s.traffic_manager().config().queues_per_port;
    let ports = (0..s.port_count())
        .map(|p| {
            let port = PortId(p as u16);
            let queues = (0..nq)
                .filter_map(|q| {
                    let st = s.queue_stats(port, QueueId(q));
                    (st != QueueStats::default()).then_some(QueueResult { queue: q, stats: st })
                })
                .collect();
            PortResult { port: p as u16, peer: name_of(spec.ports[p].peer), counters: s.port_counters(port), queues }
        })
        .collect();
    SwitchResult {
        name: s.name().to_string(),
        scheme: s.program_name().to_string(),
        counters: *s.counters(),
        scheme_counters: s.scheme_counters().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        scheme_distributions: s.scheme_distributions().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        max_buffer_bytes: s.traffic_manager().max_used_bytes(),
        ports,
        int_paths: s.path_telemetry(0),
    }
}

/// A switch's results.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct SwitchResult {
    /// Name.
    pub name: String,
    /// Scheme.
    pub scheme: String,
    /// Counters.
    pub counters: SwitchCounters,
    /// Scheme counters.
    pub scheme_counters: BTreeMap<String, u64>,
    /// Scheme samples: name → (value → number of samples).
    #[serde(default)]
    pub scheme_distributions: BTreeMap<String, BTreeMap<u64, u64>>,
    /// Largest buffer use.
    pub max_buffer_bytes: u64,
    /// Ports.
    pub ports: Vec<PortResult>,
    /// What the switch holds as an INT sink at the end (int-nexthop: per
    /// source leaf and port, the path's last reported bottleneck values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub int_paths: Vec<weft_tofino::program::PathTelemetry>,
}

/// A host's results.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct HostResult {
    /// Name.
    pub name: String,
    /// Address.
    pub ip: String,
    /// Counters.
    pub counters: weft_core::host::HostCounters,
}

/// The whole `summary.json`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct Summary {
    /// Schema id.
    #[serde(deserialize_with = "schema_id")]
    pub schema: std::borrow::Cow<'static, str>,
    /// Topology name.
    pub topology: String,
    /// Scheme.
    pub scheme: String,
    /// Traffic description.
    pub traffic: String,
    /// Seed.
    pub seed: u64,
    /// Simulated time.
    pub simulated_ns: Nanos,
    /// Why the run stopped before its end, if it did (Ctrl-C): the results
    /// are the fabric's at that moment, with flows still running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// Trace time of simulated time 0 (see the module doc).
    pub time_origin_ns: Nanos,
    /// Engine counters.
    pub totals: EngineTotals,
    /// Flows that had started by the end of the run (all of them, unless
    /// the run was cut short: Ctrl-C, `--until`, the progress watchdog).
    pub flows: Vec<FlowResult>,
    /// Flows of the workload whose start time the run never reached (cut
    /// short): left out of `flows`, the slowdowns and `flows.csv`, as
    /// they had not begun (absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flows_not_started: u64,
    /// Switches.
    pub switches: Vec<SwitchResult>,
    /// Hosts.
    pub hosts: Vec<HostResult>,
    /// FCT slowdown statistics of complete fixed-size flows.
    pub slowdown: SlowdownReport,
    /// Fabric-wide totals of the switches' counters.
    pub network: NetworkTotals,
    /// Throughput imbalance across each leaf's uplinks (set by the driver
    /// that sampled it, see [`ImbalanceSampler`]).
    pub uplink_imbalance: Option<ImbalanceStats>,
    /// Depth over time of the most loaded switch port (set by the driver
    /// that sampled it, see [`QueueDepthSampler`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_trace: Option<QueueTrace>,
    /// The scheme's counters summed over switches, and its sampled
    /// distributions merged over switches.
    pub scheme_totals: SchemeTotals,
}

/// Fabric-wide scheme figures (docs/SCHEMES.md for ConWeave; flowlets and path
/// changes for the flowlet schemes).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct SchemeTotals {
    /// Each counter summed over the switches.
    pub counters: BTreeMap<String, u64>,
    /// Each distribution merged over the switches.
    pub distributions: BTreeMap<String, DistributionStats>,
}

/// Statistics of a sampled integer distribution.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct DistributionStats {
    /// Number of samples.
    pub samples: u64,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest sample.
    pub max: u64,
}

impl DistributionStats {
    /// Statistics of a histogram (value → count), nearest rank.
    pub fn of(hist: &BTreeMap<u64, u64>) -> Self {
        let samples: u64 = hist.values().sum();
        if samples == 0 {
            return DistributionStats::default();
        }
        let sum: f64 = hist.iter().map(|(v, c)| *v as f64 * *c as f64).sum();
        let rank = |q: f64| {
            let want = ((q * samples as f64).ceil() as u64).clamp(1, samples);
            let mut seen = 0;
            for (v, c) in hist {
                seen += c;
                if seen >= want {
                    return *v;
                }
            }
            0
        };
        DistributionStats {
            samples,
            avg: sum / samples as f64,
            p50: rank(0.5),
            p99: rank(0.99),
            p999: rank(0.999),
            max: hist.keys().next_back().copied().unwrap_or(0),
        }
    }
}

impl SchemeTotals {
    /// Sums and merges over `switches`.
    pub fn of(switches: &[SwitchResult]) -> Self {
        let mut counters = BTreeMap::new();
        let mut hists: BTreeMap<String, BTreeMap<u64, u64>> = BTreeMap::new();
        for w in switches {
            for (k, v) in &w.scheme_counters {
                *counters.entry(k.clone()).or_insert(0) += v;
            }
            for (k, h) in &w.scheme_distributions {
                let m = hists.entry(k.clone()).or_default();
                for (v, c) in h {
                    *m.entry(*v).or_insert(0) += c;
                }
            }
        }
        SchemeTotals { counters, distributions: hists.iter().map(|(k, h)| (k.clone(), DistributionStats::of(h))).collect() }
    }
}

/// Fabric-wide totals.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq, Eq, Default)]
pub struct NetworkTotals {
    /// PFC pause frames sent by switches (incl. refreshes).
    pub pfc_pauses: u64,
    /// Frames dropped by switches for any reason.
    pub drops: u64,
    /// ... of which by the traffic manager (buffer/threshold).
    pub drops_buffer: u64,
    /// Frames marked CE.
    pub ecn_marks: u64,
    /// ... of `drops`, by a PFC watchdog in a storm (`TmConfig::pfc_watchdog`;
    /// written only when non-zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pfc_watchdog_drops: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Distribution of (max - min) / mean of the bytes each leaf sent on its
/// uplinks per sampling interval (ConWeave Fig. 14).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct ImbalanceStats {
    /// Sampling interval.
    pub interval_ns: Nanos,
    /// Samples (leaf x interval with traffic on its uplinks).
    pub samples: usize,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// CDF points (value, cumulative fraction) at every 1 %.
    pub cdf: Vec<(f64, f64)>,
}

/// Samples each leaf's uplink transmit counters at a fixed interval.
#[derive(Debug)]
pub struct ImbalanceSampler {
    interval: Nanos,
    /// (switch node, uplink ports).
    leaves: Vec<(usize, Vec<PortId>)>,
    last: Vec<Vec<u64>>,
    values: Vec<f64>,
}

impl ImbalanceSampler {
    /// A sampler for the leaves (role `leaf` with at least two switch
    /// neighbours) of `fabric`.
    pub fn new(fabric: &FabricSpec, interval: Nanos) -> Self {
        let leaves: Vec<(usize, Vec<PortId>)> = fabric
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.as_switch().is_some_and(|s| s.role == weft_core::fabric::SwitchRole::Leaf))
            .map(|(i, n)| {
                let ups = n
                    .ports
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| fabric.nodes[p.peer.index()].as_switch().is_some())
                    .map(|(k, _)| PortId(k as u16))
                    .collect::<Vec<_>>();
                (i, ups)
            })
            .filter(|(_, ups)| ups.len() >= 2)
            .collect();
        let last = leaves.iter().map(|(_, u)| vec![0; u.len()]).collect();
        ImbalanceSampler { interval: interval.max(1), leaves, last, values: Vec::new() }
    }

    /// The sampling interval.
    pub fn interval(&self) -> Nanos {
        self.interval
    }

    /// Takes one sample of `engine`'s counters.
    pub fn sample(&mut self, engine: &Engine) {
        for (k, (node, ups)) in self.leaves.iter().enumerate() {
            let Some(Node::Switch(sw)) = engine.nodes().get(*node) else { continue };
            let now: Vec<u64> = ups.iter().map(|p| sw.port_counters(*p).tx_bytes).collect();
            let delta: Vec<f64> = now.iter().zip(&self.last[k]).map(|(n, l)| n.saturating_sub(*l) as f64).collect();
            self.last[k] = now;
            let mean = delta.iter().sum::<f64>() / delta.len() as f64;
            if mean > 0.0 {
                let max = delta.iter().copied().fold(f64::MIN, f64::max);
                let min = delta.iter().copied().fold(f64::MAX, f64::min);
                self.values.push((max - min) / mean);
            }
        }
    }

    /// The distribution of the samples.
    pub fn finish(mut self) -> ImbalanceStats {
        let n = self.values.len();
        if n == 0 {
            return ImbalanceStats { interval_ns: self.interval, ..Default::default() };
        }
        self.values.sort_by(|a, b| a.total_cmp(b));
        let v = &self.values;
        let q = |p: f64| v[((n as f64 * p).ceil() as usize).clamp(1, n) - 1];
        ImbalanceStats {
            interval_ns: self.interval,
            samples: n,
            avg: v.iter().sum::<f64>() / n as f64,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            cdf: (1..=100).map(|k| (q(k as f64 / 100.0), k as f64 / 100.0)).collect(),
        }
    }
}

/// Bytes queued at one switch port over time.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct QueueTrace {
    /// Switch name.
    pub switch: String,
    /// Port index.
    pub port: u16,
    /// The port's link.
    pub link: String,
    /// Sampling interval.
    pub interval_ns: Nanos,
    /// Bytes queued at the port (all queues) at each sample.
    pub bytes: Vec<u64>,
}

/// Samples the bytes queued at every switch port and keeps the trace of
/// the most loaded one (largest mean depth). Starts every 10 µs; when a
/// trace reaches [`QueueDepthSampler::MAX_SAMPLES`], adjacent samples are
/// merged (their maximum) and the interval doubles, so memory stays bounded
/// and a short run is still drawn in detail.
#[derive(Debug)]
pub struct QueueDepthSampler {
    interval: Nanos,
    /// (switch node, port) per series.
    ports: Vec<(usize, PortId)>,
    series: Vec<Vec<u32>>,
    /// When the next sample is due.
    next_at: Nanos,
}

impl QueueDepthSampler {
    /// Samples per port before the interval doubles.
    pub const MAX_SAMPLES: usize = 4096;

    /// A sampler for every switch port of `fabric`.
    pub fn new(fabric: &FabricSpec) -> Self {
        let ports: Vec<(usize, PortId)> = fabric
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.as_switch().is_some())
            .flat_map(|(i, n)| (0..n.ports.len()).map(move |p| (i, PortId(p as u16))))
            .collect();
        let series = vec![Vec::new(); ports.len()];
        QueueDepthSampler { interval: 10_000, ports, series, next_at: 10_000 }
    }

    /// When the next sample is due.
    pub fn next_at(&self) -> Nanos {
        self.next_at
    }

    /// Takes the sample due at [`QueueDepthSampler::next_at`] of `engine`
    /// (which has run every event up to then).
    pub fn sample(&mut self, engine: &Engine) {
        for ((node, port), s) in self.ports.iter().zip(self.series.iter_mut()) {
            if let Some(Node::Switch(sw)) = engine.nodes().get(*node) {
                s.push(sw.traffic_manager().port_bytes(*port).min(u32::MAX as u64) as u32);
            }
        }
        if self.series.first().is_some_and(|s| s.len() >= Self::MAX_SAMPLES) {
            for s in &mut self.series {
                *s = s.chunks(2).map(|c| c.iter().copied().max().unwrap_or(0)).collect();
            }
            self.interval *= 2;
            // Sample k (1-based) now covers times up to k × interval.
            let k = self.series.first().map_or(0, |s| s.len()) as u64;
            self.next_at = (k + 1) * self.interval;
        } else {
            self.next_at += self.interval;
        }
    }

    /// The most loaded port's trace (None before any sample).
    pub fn finish(self, fabric: &FabricSpec) -> Option<QueueTrace> {
        let best = (0..self.series.len()).max_by_key(|&k| self.series[k].iter().map(|&b| b as u64).sum::<u64>())?;
        let (node, port) = self.ports[best];
        let spec = &fabric.nodes[node];
        let link = spec.ports.get(port.index()).and_then(|p| fabric.links.get(p.link.index())).map_or(String::new(), |l| l.name.clone());
        let bytes: Vec<u64> = self.series[best].iter().map(|&b| b as u64).collect();
        (!bytes.is_empty()).then(|| QueueTrace { switch: spec.name.clone(), port: port.0, link, interval_ns: self.interval, bytes })
    }
}

/// Statistics of a set of slowdowns.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct SlowdownStats {
    /// Number of flows.
    pub flows: usize,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl SlowdownStats {
    /// Statistics of `v` (nearest-rank percentiles).
    pub fn of(v: &mut [f64]) -> SlowdownStats {
        if v.is_empty() {
            return SlowdownStats::default();
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| v[(((v.len() as f64) * p).ceil() as usize).clamp(1, v.len()) - 1];
        SlowdownStats {
            flows: v.len(),
            avg: v.iter().sum::<f64>() / v.len() as f64,
            p50: q(0.5),
            p95: q(0.95),
            p99: q(0.99),
            p999: q(0.999),
        }
    }
}

/// Flow-size buckets by size (lower bound exclusive, upper inclusive).
pub const SIZE_BUCKETS: [(&str, u64, u64); 4] =
    [("<=10KB", 0, 10_000), ("10KB-100KB", 10_000, 100_000), ("100KB-1MB", 100_000, 1_000_000), (">1MB", 1_000_000, u64::MAX)];

/// Slowdown statistics overall and per flow-size bucket.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct SlowdownReport {
    /// Which slowdown the statistics are of.
    pub definition: fct::SlowdownDefinition,
    /// The fabric's BDP in bytes (see [`weft_core::fct::bdp_bytes`]).
    pub bdp_bytes: u64,
    /// Flows that started before this time are not counted (warm-up).
    pub warmup_ns: Nanos,
    /// Flows that started after the warm-up but did not complete.
    pub incomplete: usize,
    /// All complete flows.
    pub overall: SlowdownStats,
    /// Flows smaller than one BDP.
    pub below_bdp: SlowdownStats,
    /// Flows of at least one BDP.
    pub above_bdp: SlowdownStats,
    /// By size: (bucket name, stats) for [`SIZE_BUCKETS`].
    pub by_size: Vec<(String, SlowdownStats)>,
}

impl SlowdownReport {
    /// The report of the `definition` slowdowns of `flows` on a fabric with
    /// `bdp_bytes`, counting the complete fixed-size flows that started at
    /// or after `warmup_ns`.
    pub fn of(flows: &[FlowResult], bdp_bytes: u64, warmup_ns: Nanos, definition: fct::SlowdownDefinition) -> SlowdownReport {
        let counted = || flows.iter().filter(|x| x.start >= warmup_ns);
        let pick = |f: &dyn Fn(u64) -> bool| -> SlowdownStats {
            let mut v: Vec<f64> =
                counted().filter_map(|x| x.slowdown_by(definition).zip(x.size)).filter(|(_, s)| f(*s)).map(|(d, _)| d).collect();
            SlowdownStats::of(&mut v)
        };
        SlowdownReport {
            definition,
            bdp_bytes,
            warmup_ns,
            incomplete: counted().filter(|x| x.size.is_some() && x.fct.is_none()).count(),
            overall: pick(&|_| true),
            below_bdp: pick(&|s| s < bdp_bytes),
            above_bdp: pick(&|s| s >= bdp_bytes),
            by_size: SIZE_BUCKETS.iter().map(|(n, lo, hi)| (n.to_string(), pick(&|s| (s > *lo || *lo == 0) && s <= *hi))).collect(),
        }
    }
}

/// The name of the host with address `dst`, and the base FCT
/// ([`fct::base_fct`]) and the authors' ideal FCT ([`fct::ns3_ideal_fct`])
/// of the frames `frames()` yields, sent from host node `src` to it.
pub(crate) fn dst_and_ideals<I: Iterator<Item = usize> + Clone>(
    paths: &mut Paths<'_>,
    names: &[Arc<str>],
    src: usize,
    dst: weft_wire::Ipv4Address,
    frames: Option<impl Fn() -> I>,
) -> (Arc<str>, Option<Nanos>, Option<Nanos>) {
    let Some(d) = paths.host(dst) else {
        return (dst.to_string().into(), None, None);
    };
    let name = names.get(d.index()).cloned().unwrap_or_else(|| paths.fabric().nodes[d.index()].name.as_str().into());
    let path = frames.and_then(|f| Some((f, paths.get(weft_wire::ids::NodeId(src as u32), d)?)));
    let (base, ideal) = path.map_or((None, None), |(f, p)| (Some(fct::base_fct(f(), p)), Some(fct::ns3_ideal_fct(f(), p))));
    (name, base, ideal)
}

/// Sorts `flows` by id as a stable sort would (flows of equal id keep
/// their order), without the stable sort's buffer of half the flows (for a
/// million flows, 150 MB): the order is found on (id, position) pairs and
/// applied in place.
fn sort_by_id(flows: &mut [FlowResult]) {
    let mut keys: Vec<(u32, u32)> = flows.iter().enumerate().map(|(i, f)| (f.id, i as u32)).collect();
    keys.sort_unstable();
    // order[k]: the position the flow that belongs at k is at now.
    let mut order: Vec<u32> = keys.into_iter().map(|(_, i)| i).collect();
    for i in 0..order.len() {
        // Follow the cycle through i: position `cur` holds the flow that
        // was at i until the cycle closes where that flow belongs.
        let mut cur = i;
        while order[cur] as usize != i {
            let next = order[cur] as usize;
            flows.swap(cur, next);
            order[cur] = cur as u32;
            cur = next;
        }
        order[cur] = cur as u32;
    }
}

/// `fct / base`, when both are known.
fn slowdown(fct: Option<Nanos>, base: Option<Nanos>) -> Option<f64> {
    fct.zip(base).filter(|(_, b)| *b > 0).map(|(f, b)| f as f64 / b as f64)
}

/// The receiving side of every flow, keyed as its sender knows it (UDP:
/// flow id; RoCE: the receiving QP, flow id + 1; TCP: source address,
/// source port, destination address).
struct Receivers<'a> {
    /// Every node's name, shared by the flows' results (one allocation per
    /// node, not two per flow).
    names: Vec<Arc<str>>,
    udp: BTreeMap<u32, FlowStats>,
    roce: BTreeMap<u32, &'a RecvQp>,
    tcp: BTreeMap<(u32, u16, u32), &'a TcpReceiver>,
}

impl<'a> Receivers<'a> {
    /// The shared name of node `i`.
    fn name(&self, i: usize) -> Arc<str> {
        self.names.get(i).cloned().unwrap_or_else(|| Arc::from(""))
    }

    fn of(fabric: &FabricSpec, nodes: &'a [Node]) -> Self {
        let names = fabric.nodes.iter().map(|n| Arc::from(n.name.as_str())).collect();
        let mut r = Receivers { names, udp: BTreeMap::new(), roce: BTreeMap::new(), tcp: BTreeMap::new() };
        for n in nodes {
            match n {
                Node::UdpHost(h) => r.udp.extend(h.rx_flows().iter().map(|(id, s)| (*id, *s))),
                Node::RoceHost(h) => r.roce.extend(h.recv_qps().iter().map(|(qpn, q)| (*qpn, q))),
                Node::TcpHost(h) => r.tcp.extend(h.receivers().iter().map(|(key, q)| ((key.0, key.1, h.ip().0), q))),
                Node::Switch(_) => {}
            }
        }
        r
    }
}

/// The results of the UDP flows host `h` (node `i`) sent.
fn udp_flows(paths: &mut Paths<'_>, i: usize, h: &UdpHost, receivers: &Receivers<'_>, flows: &mut Vec<FlowResult>) {
    for tx in h.tx_flows() {
        let r = receivers.udp.get(&tx.flow.id.0).copied().unwrap_or_default();
        let size = match tx.flow.mode {
            UdpMode::Bytes(b) | UdpMode::Poisson { bytes: b, .. } => Some(b),
            UdpMode::Rate { .. } => None,
        };
        let (dst, base, ideal) = dst_and_ideals(
            paths,
            &receivers.names,
            i,
            tx.flow.dst,
            size.map(|b| move || fct::udp_frames(b, tx.flow.payload_len, PROBE_LEN as u16)),
        );
        let done = size.is_some_and(|b| r.bytes >= b);
        let fct_ns = match (done, tx.first_sent, r.last_arrival) {
            (true, Some(f), Some(l)) => Some(l.saturating_sub(f)),
            _ => None,
        };
        flows.push(
            FlowResult {
                id: tx.flow.id.0,
                src: receivers.name(i),
                dst,
                bytes_sent: tx.bytes_sent,
                bytes_delivered: r.bytes,
                packets_sent: tx.packets_sent,
                packets_delivered: r.packets,
                drops: tx.packets_sent.saturating_sub(r.packets),
                ecn_marks: r.ecn_marks,
                out_of_order: r.out_of_order,
                first_arrival: r.first_arrival,
                last_arrival: r.last_arrival,
                size,
                start: tx.flow.start,
                first_sent: tx.first_sent,
                fct: fct_ns,
                base_fct: base,
                slowdown: slowdown(fct_ns, base),
                ..FlowResult::default()
            }
            .with_ns3(r.last_arrival.filter(|_| done).map(|l| l.saturating_sub(tx.flow.start)), ideal),
        );
    }
}

/// The results of the TCP flows host `h` (node `i`) sent.
fn tcp_flows(paths: &mut Paths<'_>, i: usize, h: &TcpHost, receivers: &Receivers<'_>, flows: &mut Vec<FlowResult>) {
    let mss = h.config().mss;
    let none = TcpReceiver::default();
    for s in h.senders() {
        let key = (h.ip().0, TcpHost::port_of(s.flow.id), s.flow.dst.0);
        let r = receivers.tcp.get(&key).copied().unwrap_or(&none);
        let (dst, base, ideal) = dst_and_ideals(paths, &receivers.names, i, s.flow.dst, Some(|| fct::tcp_frames(s.flow.size, mss)));
        let done = r.rcv_nxt >= s.flow.size;
        let fct_ns = if done { r.last_arrival.zip(s.first_sent).map(|(l, f)| l.saturating_sub(f)) } else { None };
        let sent = s.max_sent.div_ceil(mss as u64) + s.retransmits;
        flows.push(
            FlowResult {
                id: s.flow.id.0,
                src: receivers.name(i),
                dst,
                bytes_sent: s.flow.size,
                bytes_delivered: r.rcv_nxt.min(s.flow.size),
                packets_sent: sent,
                packets_delivered: r.segments,
                drops: sent.saturating_sub(r.segments),
                ecn_marks: r.ecn_marks,
                out_of_order: r.out_of_order,
                first_arrival: r.first_arrival,
                last_arrival: r.last_arrival,
                size: Some(s.flow.size),
                start: s.flow.start,
                first_sent: s.first_sent,
                fct: fct_ns,
                base_fct: base,
                slowdown: slowdown(fct_ns, base),
                retransmits: s.retransmits,
                max_in_flight: s.max_in_flight,
                ..FlowResult::default()
            }
            .with_ns3(s.acked_at.filter(|_| done).map(|a| a.saturating_sub(s.flow.start)), ideal),
        );
    }
}

/// The results of the RoCEv2 flows (send QPs) of host `h` (node `i`).
fn roce_flows(paths: &mut Paths<'_>, i: usize, h: &RoceHost, receivers: &Receivers<'_>, flows: &mut Vec<FlowResult>) {
    let payload = h.config().payload;
    let none = RecvQp::default();
    for qp in h.send_qps() {
        let r = receivers.roce.get(&(qp.flow.id.0 + 1)).copied().unwrap_or(&none);
        let (dst, base, ideal) = dst_and_ideals(paths, &receivers.names, i, qp.flow.dst, Some(|| fct::roce_frames(qp.flow.size, payload)));
        let fct_ns = r.completed.zip(qp.first_sent).map(|(c, f)| c.saturating_sub(f));
        let sent = qp.snd_nxt as u64 + qp.retransmits;
        flows.push(
            FlowResult {
                id: qp.flow.id.0,
                src: receivers.name(i),
                dst,
                bytes_sent: qp.flow.size,
                bytes_delivered: r.bytes,
                packets_sent: sent,
                packets_delivered: r.packets,
                drops: sent.saturating_sub(r.packets),
                ecn_marks: r.ecn_marks,
                out_of_order: r.out_of_order,
                first_arrival: r.first_arrival,
                last_arrival: r.completed,
                size: Some(qp.flow.size),
                start: qp.flow.start,
                first_sent: qp.first_sent,
                fct: fct_ns,
                base_fct: base,
                slowdown: slowdown(fct_ns, base),
                retransmits: qp.retransmits,
                naks: r.naks,
                cnps: r.cnps,
                max_in_flight: qp.max_in_flight,
                ..FlowResult::default()
            }
            .with_ns3(qp.acked_at.map(|a| a.saturating_sub(qp.flow.start)), ideal),
        );
    }
}

impl Summary {
    /// Collects the results of `engine` running `fabric` (slowdowns of the
    /// default definition, every flow counted).
    pub fn collect(fabric: &FabricSpec, engine: &Engine, scheme: &str, traffic: &str, seed: u64) -> Summary {
        Self::collect_after(fabric, engine, scheme, traffic, seed, 0, fct::SlowdownDefinition::default())
    }

    /// As [`Summary::collect`], counting slowdowns of `definition` only of
    /// flows that started at or after `warmup_ns`.
    pub fn collect_after(
        fabric: &FabricSpec,
        engine: &Engine,
        scheme: &str,
        traffic: &str,
        seed: u64,
        warmup_ns: Nanos,
        definition: fct::SlowdownDefinition,
    ) -> Summary {
        let receivers = Receivers::of(fabric, engine.nodes());
        let mut paths = Paths::new(fabric);
        let mut flows = Vec::with_capacity(engine.nodes().iter().map(Node::flow_count).sum());
        let mut switches = Vec::new();
        let mut hosts = Vec::new();
        for (i, n) in engine.nodes().iter().enumerate() {
            let (name, ip, counters) = match n {
                Node::UdpHost(h) => {
                    udp_flows(&mut paths, i, h, &receivers, &mut flows);
                    (h.name(), h.ip(), *h.counters())
                }
                Node::TcpHost(h) => {
                    tcp_flows(&mut paths, i, h, &receivers, &mut flows);
                    (h.name(), h.ip(), *h.counters())
                }
                Node::RoceHost(h) => {
                    roce_flows(&mut paths, i, h, &receivers, &mut flows);
                    (h.name(), h.ip(), *h.counters())
                }
                Node::Switch(s) => {
                    switches.push(switch_result(fabric, i, s));
                    continue;
                }
            };
            hosts.push(HostResult { name: name.to_string(), ip: ip.to_string(), counters });
        }
        // A run cut short leaves the flows it never started out: they are
        // not running, and a million of them would fill gigabytes of text.
        let all = flows.len();
        flows.retain(|f| f.start <= engine.now());
        let flows_not_started = (all - flows.len()) as u64;
        sort_by_id(&mut flows);
        let slowdown = SlowdownReport::of(&flows, fct::bdp_bytes(fabric), warmup_ns, definition);
        let network = NetworkTotals::of(&switches);
        let scheme_totals = SchemeTotals::of(&switches);
        Summary {
            schema: SCHEMA.into(),
            topology: fabric.name.clone(),
            scheme: scheme.to_string(),
            traffic: traffic.to_string(),
            seed,
            simulated_ns: engine.now(),
            time_origin_ns: 0,
            totals: engine.totals(),
            flows,
            flows_not_started,
            switches,
            hosts,
            slowdown,
            network,
            uplink_imbalance: None,
            queue_trace: None,
            incomplete: None,
            scheme_totals,
        }
    }

    /// Replaces the switch results (switches that ran in other processes)
    /// and recomputes the network totals from them.
    pub fn set_switches(&mut self, switches: Vec<SwitchResult>) {
        self.network = NetworkTotals::of(&switches);
        self.scheme_totals = SchemeTotals::of(&switches);
        self.switches = switches;
    }

    /// `flows.csv`: one row per flow.
    pub fn flows_csv(&self) -> String {
        let mut out = Vec::new();
        // Writing into memory does not fail.
        let _ = self.write_flows_csv(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// Writes `flows.csv` to `w` row by row (a run of a million flows
    /// never holds the whole text).
    pub fn write_flows_csv(&self, mut w: impl std::io::Write) -> std::io::Result<()> {
        let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
        w.write_all(
            b"id,src,dst,size,start_ns,first_sent_ns,fct_ns,base_fct_ns,slowdown,sender_fct_ns,ideal_fct_ns,slowdown_ns3,bytes_sent,bytes_delivered,drops,ecn_marks,out_of_order,retransmits\n",
        )?;
        for f in &self.flows {
            writeln!(
                w,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                f.id,
                f.src,
                f.dst,
                opt(f.size),
                f.start,
                opt(f.first_sent),
                opt(f.fct),
                opt(f.base_fct),
                f.slowdown.map(|x| format!("{x:.6}")).unwrap_or_default(),
                opt(f.sender_fct),
                opt(f.ideal_fct),
                f.slowdown_ns3.map(|x| format!("{x:.6}")).unwrap_or_default(),
                f.bytes_sent,
                f.bytes_delivered,
                f.drops,
                f.ecn_marks,
                f.out_of_order,
                f.retransmits
            )?;
        }
        w.flush()
    }

    /// Writes `summary.json` to `w`: [`Summary::to_json`]'s text and a
    /// newline, streamed (the text of a million flows is about 650 MB).
    pub fn write_json(&self, mut w: impl std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut w, self).map_err(std::io::Error::other)?;
        w.write_all(b"\n")?;
        w.flush()
    }

    /// Pretty JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_sort_by_id_as_a_stable_sort_does() {
        let mut x: u64 = 11;
        let mut flows: Vec<FlowResult> = (0..2000)
            .map(|k| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                FlowResult { id: (x >> 40) as u32 % 500, bytes_sent: k, ..FlowResult::default() }
            })
            .collect();
        let mut stable: Vec<(u32, u64)> = flows.iter().map(|f| (f.id, f.bytes_sent)).collect();
        stable.sort_by_key(|f| f.0);
        sort_by_id(&mut flows);
        assert_eq!(flows.iter().map(|f| (f.id, f.bytes_sent)).collect::<Vec<_>>(), stable);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=1000).map(|x| x as f64).collect();
        let s = SlowdownStats::of(&mut v);
        assert_eq!((s.flows, s.p50, s.p95, s.p99, s.p999), (1000, 500.0, 950.0, 990.0, 999.0));
        assert!((s.avg - 500.5).abs() < 1e-9);
        assert_eq!(SlowdownStats::of(&mut []), SlowdownStats::default());
    }

    #[test]
    fn warm_up_flows_are_not_counted_and_incomplete_ones_are_reported() {
        let flow = |start, size, slowdown: Option<f64>| FlowResult {
            id: 0,
            src: "a".into(),
            dst: "b".into(),
            bytes_sent: 0,
            bytes_delivered: 0,
            packets_sent: 0,
            packets_delivered: 0,
            drops: 0,
            ecn_marks: 0,
            out_of_order: 0,
            first_arrival: None,
            last_arrival: None,
            size: Some(size),
            start,
            first_sent: None,
            fct: slowdown.map(|_| 1),
            base_fct: Some(1),
            slowdown,
            ..FlowResult::default()
        };
        let flows = vec![flow(0, 1000, Some(9.0)), flow(10, 1000, Some(1.0)), flow(20, 200_000, Some(3.0)), flow(30, 5000, None)];
        let r = SlowdownReport::of(&flows, 100_000, 5, fct::SlowdownDefinition::Weft);
        assert_eq!((r.overall.flows, r.incomplete), (2, 1));
        assert_eq!((r.below_bdp.flows, r.below_bdp.avg), (1, 1.0));
        assert_eq!((r.above_bdp.flows, r.above_bdp.avg), (1, 3.0));
        assert_eq!(r.by_size[0].1.flows, 1);
        assert_eq!(r.by_size[2].1.flows, 1);
    }
}
