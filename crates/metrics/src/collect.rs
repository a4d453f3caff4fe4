//! Folding a node's state into metric families at scrape time (docs/RESULTS.md).
//!
//! The data path only increments plain integer counters inside the state
//! machines (and one histogram bucket per enqueued packet in the traffic
//! manager); everything else — sums over QPs, FCT and slowdown histograms,
//! resource gauges — is computed here, when a scrape or a virtual-time
//! sample asks. [`NodeMetrics`] keeps what must persist between scrapes:
//! which flows were already counted in the FCT histograms, and cached base
//! FCTs.
//!
//! Invariant: counters only grow between two collections of the same node
//! (histogram observations are added once per completed flow).

use crate::catalogue::{scheme_distributions, FCT_BOUNDS, LAG_BOUNDS, SLOWDOWN_BOUNDS};
use crate::families::FamilySet;
use rustc_hash::FxHashMap;
use weft_core::fabric::FabricSpec;
use weft_core::fct;
use weft_core::node::Node;
use weft_core::switch::Switch;
use weft_tofino::depth_histogram::DEPTH_BOUNDS;
use weft_wire::ids::{PortId, QueueId};
use weft_wire::time::Nanos;

/// A histogram being filled (non-cumulative counts, last bucket +Inf).
#[derive(Debug, Clone)]
struct Hist {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
}

impl Hist {
    fn new(bounds: &'static [f64]) -> Self {
        Hist { bounds, counts: vec![0; bounds.len() + 1], sum: 0.0 }
    }
    fn observe(&mut self, v: f64) {
        let i = self.bounds.iter().position(|b| v <= *b).unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
    }
}

/// Per-node state kept between collections.
#[derive(Debug, Clone)]
pub struct NodeMetrics {
    /// Send flows (by index) already observed as complete.
    counted: Vec<bool>,
    /// Flows before this index are all complete and counted.
    done_prefix: usize,
    fct: Hist,
    slowdown: Hist,
    /// Base FCT by destination address and flow size.
    base: FxHashMap<(u32, u64), Option<Nanos>>,
    /// Path to each destination address (flows of many sizes share one).
    paths: FxHashMap<u32, Option<Vec<fct::PathLink>>>,
    completed: u64,
    resources: Option<Vec<(String, u64, u64)>>,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        NodeMetrics {
            counted: Vec::new(),
            done_prefix: 0,
            fct: Hist::new(FCT_BOUNDS),
            slowdown: Hist::new(SLOWDOWN_BOUNDS),
            base: FxHashMap::default(),
            paths: FxHashMap::default(),
            completed: 0,
            resources: None,
        }
    }
}

/// One sender flow as the host-metric fold sees it.
struct SendView {
    dst: u32,
    size: u64,
    first_sent: Option<Nanos>,
    done_at: Option<Nanos>,
}

impl NodeMetrics {
    /// A fresh collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the metrics of node `index` of `fabric` at fabric time `now`.
    pub fn collect(&mut self, fabric: &FabricSpec, index: usize, node: &Node, now: Nanos, out: &mut FamilySet) {
        match node {
            Node::Switch(s) => self.collect_switch(fabric, s, now, out),
            Node::RoceHost(h) => {
                let (qps, payload) = (h.send_qps(), h.config().payload);
                self.fold_flows(
                    fabric,
                    index,
                    qps.len(),
                    |i| SendView {
                        dst: qps[i].flow.dst.0,
                        size: qps[i].flow.size,
                        first_sent: qps[i].first_sent,
                        done_at: qps[i].acked_at.filter(|_| qps[i].snd_una >= qps[i].packets),
                    },
                    |size, path| fct::base_fct(fct::roce_frames(size, payload), path),
                );
                let l = [("host", h.name())];
                let started = qps.iter().filter(|q| q.first_sent.is_some()).count() as u64;
                self.host_common(out, &l, h.counters(), started);
                let (mut retx, mut naks_rx, mut cnps) = (0, 0, 0);
                for q in qps {
                    retx += q.retransmits;
                    naks_rx += q.naks;
                    cnps += q.cnps;
                }
                let (mut ooo, mut naks_tx, mut ecn) = (0, 0, 0);
                for r in h.recv_qps().values() {
                    ooo += r.out_of_order;
                    naks_tx += r.naks;
                    ecn += r.ecn_marks;
                }
                out.counter("weft_host_retransmits_total", &l, retx);
                out.counter("weft_host_naks_received_total", &l, naks_rx);
                out.counter("weft_host_naks_sent_total", &l, naks_tx);
                out.counter("weft_host_cnps_received_total", &l, cnps);
                out.counter("weft_host_out_of_order_total", &l, ooo);
                out.counter("weft_host_ecn_marked_total", &l, ecn);
            }
            Node::TcpHost(h) => {
                let (senders, mss) = (h.senders(), h.config().mss);
                self.fold_flows(
                    fabric,
                    index,
                    senders.len(),
                    |i| SendView {
                        dst: senders[i].flow.dst.0,
                        size: senders[i].flow.size,
                        first_sent: senders[i].first_sent,
                        done_at: senders[i].acked_at.filter(|_| senders[i].snd_una >= senders[i].flow.size),
                    },
                    |size, path| fct::base_fct(fct::tcp_frames(size, mss), path),
                );
                let l = [("host", h.name())];
                let started = senders.iter().filter(|s| s.first_sent.is_some()).count() as u64;
                self.host_common(out, &l, h.counters(), started);
                out.counter("weft_host_retransmits_total", &l, senders.iter().map(|s| s.retransmits).sum());
                out.counter("weft_host_timeouts_total", &l, senders.iter().map(|s| s.timeouts).sum());
                out.counter("weft_host_out_of_order_total", &l, h.receivers().values().map(|r| r.out_of_order).sum());
                out.counter("weft_host_ecn_marked_total", &l, h.receivers().values().map(|r| r.ecn_marks).sum());
            }
            Node::UdpHost(h) => {
                let l = [("host", h.name())];
                let started = h.tx_flows().iter().filter(|f| f.first_sent.is_some()).count() as u64;
                self.host_common(out, &l, h.counters(), started);
                out.counter("weft_host_out_of_order_total", &l, h.rx_flows().values().map(|r| r.out_of_order).sum());
                out.counter("weft_host_ecn_marked_total", &l, h.rx_flows().values().map(|r| r.ecn_marks).sum());
            }
        }
    }

    /// What every kind of host exports: NIC counters, flows, FCT and
    /// slowdown histograms.
    fn host_common(&self, out: &mut FamilySet, l: &[(&str, &str)], c: &weft_core::host::HostCounters, started: u64) {
        out.counter("weft_host_tx_frames_total", l, c.tx_frames);
        out.counter("weft_host_tx_bytes_total", l, c.tx_bytes);
        out.counter("weft_host_rx_frames_total", l, c.rx_frames);
        out.counter("weft_host_rx_malformed_total", l, c.rx_malformed);
        out.counter("weft_host_pfc_received_total", l, c.pfc_received);
        out.counter("weft_host_flows_started_total", l, started);
        out.counter("weft_host_flows_completed_total", l, self.completed);
        out.histogram("weft_host_fct_seconds", l, self.fct.bounds, &self.fct.counts, self.fct.sum);
        out.histogram("weft_host_fct_slowdown", l, self.slowdown.bounds, &self.slowdown.counts, self.slowdown.sum);
    }

    /// Observes flows that completed since the last collection.
    fn fold_flows(
        &mut self,
        fabric: &FabricSpec,
        index: usize,
        n: usize,
        flow: impl Fn(usize) -> SendView,
        base_of: impl Fn(u64, &[fct::PathLink]) -> Nanos,
    ) {
        if self.counted.len() < n {
            self.counted.resize(n, false);
        }
        for i in self.done_prefix..n {
            if self.counted[i] {
                continue;
            }
            let f = flow(i);
            let (Some(first), Some(done)) = (f.first_sent, f.done_at) else { continue };
            self.counted[i] = true;
            self.completed += 1;
            let fct_ns = done.saturating_sub(first);
            self.fct.observe(fct_ns as f64 * 1e-9);
            let paths = &mut self.paths;
            let base = *self.base.entry((f.dst, f.size)).or_insert_with(|| {
                let path = paths.entry(f.dst).or_insert_with(|| {
                    let d = fabric.nodes.iter().position(|x| x.as_host().is_some_and(|h| h.ip.0 == f.dst))?;
                    fct::path(fabric, weft_wire::ids::NodeId(index as u32), weft_wire::ids::NodeId(d as u32))
                });
                Some(base_of(f.size, path.as_deref()?))
            });
            if let Some(b) = base.filter(|b| *b > 0) {
                self.slowdown.observe(fct_ns as f64 / b as f64);
            }
        }
        while self.done_prefix < self.counted.len() && self.counted[self.done_prefix] {
            self.done_prefix += 1;
        }
    }

    fn collect_switch(&mut self, fabric: &FabricSpec, s: &Switch, now: Nanos, out: &mut FamilySet) {
        let name = s.name();
        let scheme = s.program_name();
        let tm = s.traffic_manager();
        let spec = fabric.nodes.iter().find(|n| n.name == name);
        let link_of = |p: usize| -> &str {
            spec.and_then(|n| n.ports.get(p)).and_then(|ps| fabric.links.get(ps.link.index())).map_or("", |l| l.name.as_str())
        };
        let cell = tm.config().cell_bytes as f64;
        for p in 0..s.port_count() {
            let port = PortId(p as u16);
            let ps = p.to_string();
            let l = [("switch", name), ("port", ps.as_str()), ("link", link_of(p))];
            let c = s.port_counters(port);
            out.counter("weft_port_tx_bytes_total", &l, c.tx_bytes);
            out.counter("weft_port_tx_frames_total", &l, c.tx_frames);
            out.counter("weft_port_rx_bytes_total", &l, c.rx_bytes);
            out.counter("weft_port_rx_frames_total", &l, c.rx_frames);
            out.counter("weft_port_pfc_pause_sent_total", &l, c.pfc_pause_sent);
            out.counter("weft_port_pfc_resume_sent_total", &l, c.pfc_resume_sent);
            out.counter("weft_port_pfc_received_total", &l, c.pfc_received);
            out.gauge("weft_port_up", &l, if s.port_is_up(port) { 1.0 } else { 0.0 });
            out.gauge("weft_port_line_rate_bytes_per_second", &l, s.port_rate(port).map_or(0.0, |r| r.bps() as f64 / 8.0));
            out.gauge("weft_port_queued_bytes", &l, tm.port_bytes(port) as f64);
            for (qi, qc) in tm.config().queues.iter().enumerate() {
                let q = QueueId(qi as u8);
                let st = tm.queue_stats(port, q);
                let depth = tm.queue_bytes(port, q);
                let paused = tm.is_paused(port, q);
                // Only queues that have carried traffic: bounded by 32 per
                // port, but most are never used.
                if st.enq_packets == 0 && depth == 0 && !paused && st.drops_threshold + st.drops_buffer_full + st.pfc_watchdog_drops == 0 {
                    continue;
                }
                let qs = qi.to_string();
                let ql = [("switch", name), ("port", ps.as_str()), ("link", link_of(p)), ("queue", qs.as_str())];
                out.counter("weft_queue_enqueued_frames_total", &ql, st.enq_packets);
                out.counter("weft_queue_tx_bytes_total", &ql, st.tx_bytes);
                out.counter("weft_queue_tx_frames_total", &ql, st.tx_packets);
                for (cause, n) in [
                    ("dynamic_threshold", st.drops_threshold),
                    ("buffer_full", st.drops_buffer_full),
                    ("pfc_watchdog", st.pfc_watchdog_drops),
                ] {
                    let dl = [("switch", name), ("port", ps.as_str()), ("link", link_of(p)), ("queue", qs.as_str()), ("cause", cause)];
                    out.counter("weft_queue_drops_total", &dl, n);
                }
                out.counter("weft_queue_ecn_marks_total", &ql, st.ecn_marks);
                out.gauge("weft_queue_depth_bytes", &ql, depth as f64);
                out.gauge("weft_queue_peak_depth_bytes", &ql, st.max_depth_bytes as f64);
                out.gauge("weft_queue_paused", &ql, if paused { 1.0 } else { 0.0 });
                out.gauge("weft_queue_pfc_paused", &ql, if tm.pfc_paused(now, port, qc.pfc_class) { 1.0 } else { 0.0 });
                out.counter("weft_queue_pfc_watchdog_storms_total", &ql, st.pfc_watchdog_storms);
                out.counter("weft_queue_pfc_watchdog_forwarded_frames_total", &ql, st.pfc_watchdog_forwarded);
                if let Some(h) = tm.queue_depth_histogram(port, q) {
                    let bounds: Vec<f64> = DEPTH_BOUNDS.iter().map(|b| *b as f64).collect();
                    out.histogram("weft_queue_depth_at_enqueue_bytes", &ql, &bounds, &h.counts, h.sum as f64);
                }
            }
        }
        let l = [("switch", name), ("scheme", scheme)];
        let c = s.counters();
        out.counter("weft_switch_rx_frames_total", &l, c.rx_frames);
        out.counter("weft_switch_pipeline_passes_total", &l, c.pipeline_passes);
        out.counter("weft_switch_recirculations_total", &l, c.recirculations);
        out.counter("weft_switch_mirrored_total", &l, c.mirrored);
        out.counter("weft_switch_generated_total", &l, c.generated);
        out.counter("weft_switch_to_cpu_total", &l, c.to_cpu);
        out.counter("weft_switch_ecn_marks_total", &l, c.ecn_marks);
        out.counter("weft_switch_program_errors_total", &l, c.program_errors);
        out.counter("weft_switch_consumed_by_program_total", &l, c.consumed_by_program);
        out.counter("weft_switch_restarts_total", &l, c.restarts);
        for (cause, n) in [
            ("malformed", c.drop_malformed),
            ("oversize", c.drop_oversize),
            ("unknown_ethertype", c.drop_unknown_ethertype),
            ("not_for_us", c.drop_not_for_us),
            ("ttl", c.drop_ttl),
            ("no_route", c.drop_no_route),
            ("program", c.drop_program),
            ("tm", c.drop_tm),
            ("link_down", c.drop_link_down),
            ("restart", c.drop_restart),
            ("recirculation", c.drop_recirculation),
        ] {
            out.counter("weft_switch_drops_total", &[("switch", name), ("scheme", scheme), ("cause", cause)], n);
        }
        out.gauge("weft_switch_buffer_used_bytes", &l, tm.used_cells() as f64 * cell);
        out.gauge("weft_switch_buffer_peak_bytes", &l, tm.max_used_bytes() as f64);
        out.gauge("weft_switch_buffer_size_bytes", &l, tm.total_cells() as f64 * cell);
        let rows =
            self.resources.get_or_insert_with(|| s.resource_report().rows.into_iter().map(|r| (r.resource, r.used, r.available)).collect());
        for (r, used, avail) in rows.iter() {
            let rl = [("switch", name), ("scheme", scheme), ("resource", r.as_str())];
            out.gauge("weft_switch_resource_used", &rl, *used as f64);
            out.gauge("weft_switch_resource_available", &rl, *avail as f64);
        }
        for (n, v) in s.scheme_counters() {
            out.counter(&format!("weft_scheme_{n}_total"), &l, v);
        }
        for (n, v) in s.scheme_gauges(now) {
            out.gauge(&format!("weft_scheme_{n}"), &l, v);
        }
        for (n, p, v) in s.scheme_port_gauges(now) {
            let ps = p.0.to_string();
            out.gauge(&format!("weft_scheme_{n}"), &[("switch", name), ("scheme", scheme), ("port", ps.as_str())], v);
        }
        let paths = s.path_telemetry(now);
        if !paths.is_empty() {
            let leaf_name = |i: u16| {
                fabric
                    .nodes
                    .iter()
                    .find(|n| n.as_switch().is_some_and(|x| x.leaf_index == Some(i)))
                    .map_or_else(|| i.to_string(), |n| n.name.clone())
            };
            for t in paths {
                let (src, ps) = (leaf_name(t.source_leaf), t.port.to_string());
                let l = [("switch", name), ("source_leaf", src.as_str()), ("port", ps.as_str()), ("link", link_of(t.port as usize))];
                out.gauge("weft_int_path_hop_latency_seconds", &l, t.hop_latency_ns as f64 * 1e-9);
                out.gauge("weft_int_path_queue_bytes", &l, t.queue_bytes as f64);
                out.gauge("weft_int_path_utilization", &l, t.utilization as f64);
                out.gauge("weft_int_path_congestion", &l, t.congestion);
                out.gauge("weft_int_path_best", &l, if t.best { 1.0 } else { 0.0 });
                out.counter("weft_int_path_reports_total", &l, t.reports);
            }
        }
        for (n, dist) in s.scheme_distributions() {
            let Some((_, _, _, bounds)) = scheme_distributions().find(|(d, ..)| *d == n) else { continue };
            let mut h = Hist::new(bounds);
            for (v, k) in dist {
                let i = bounds.iter().position(|b| v as f64 <= *b).unwrap_or(bounds.len());
                h.counts[i] += k;
                h.sum += v as f64 * k as f64;
            }
            out.histogram(&format!("weft_scheme_{n}"), &l, bounds, &h.counts, h.sum);
        }
    }
}

/// Adds an actor's deadline-lag histogram.
pub fn actor_lag(out: &mut FamilySet, actor: &str, lag: &crate::lag::LagHistogram) {
    let ns: Vec<u64> = LAG_BOUNDS.iter().map(|b| (b * 1e9).round() as u64).collect();
    let mut counts = Vec::with_capacity(ns.len() + 1);
    let mut prev = 0;
    for b in &ns {
        let c = lag.count_at_most(*b);
        counts.push(c - prev);
        prev = c;
    }
    counts.push(lag.count() - prev);
    out.histogram("weft_actor_deadline_lag_seconds", &[("actor", actor)], LAG_BOUNDS, &counts, lag.sum_ns() as f64 * 1e-9);
}
