//! Gathering the metrics of a live process (real time): every actor folds
//! its node's counters when asked, and the process adds its transport
//! counters per incoming link direction.
//!
//! A [`MetricsSource`] is a cheap clone of the handles it needs, so the
//! HTTP server can hold one while the runtime goes on.

use crate::actor::NodeMsg;
use crate::link::remote::InboundTable;
use ractor::ActorRef;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use weft_core::edge::Rejection;
use weft_core::fabric::FabricSpec;
use weft_metrics::FamilySet;

/// Handles to a live process's actors and transport counters.
#[derive(Clone)]
pub struct MetricsSource {
    /// (node index, actor).
    pub actors: Vec<(usize, ActorRef<NodeMsg>)>,
    /// Incoming link directions.
    pub inbound: Arc<InboundTable>,
    /// The fabric.
    pub fabric: Arc<FabricSpec>,
    /// Process index.
    pub process: u32,
    /// Real hosts behind TAP devices: (host name, counters).
    pub taps: Vec<(String, Arc<crate::tap::TapCounters>)>,
}

impl MetricsSource {
    /// Asks every actor for its families and adds the process's own.
    pub async fn gather(&self) -> FamilySet {
        let started = std::time::Instant::now();
        let mut set = FamilySet::new();
        // Every actor folds its node at once (each answers after the frames
        // already in its mailbox); merged in node order.
        let mut calls = tokio::task::JoinSet::new();
        for (index, actor) in &self.actors {
            let (fabric, index, actor) = (self.fabric.clone(), *index, actor.clone());
            calls.spawn(async move {
                let r = actor.call(|reply| NodeMsg::Metrics { fabric, index, reply }, Some(Duration::from_secs(2))).await;
                (index, r.ok().and_then(|r| r.success_or(()).ok()))
            });
        }
        let mut parts: Vec<(usize, FamilySet)> = Vec::new();
        while let Some(done) = calls.join_next().await {
            if let Ok((index, Some(s))) = done {
                parts.push((index, s));
            }
        }
        parts.sort_by_key(|(i, _)| *i);
        for (_, s) in parts {
            set.extend(s);
        }
        for t in self.inbound.report() {
            let Some(l) = self.fabric.links.get(t.link as usize) else { continue };
            let name_of = |n: weft_wire::ids::NodeId| self.fabric.nodes.get(n.index()).map_or("?", |x| x.name.as_str());
            let (from, to) = if t.dir == 0 { (name_of(l.a.0), name_of(l.b.0)) } else { (name_of(l.b.0), name_of(l.a.0)) };
            let dir = format!("{from}->{to}");
            let lab = [("link", l.name.as_str()), ("direction", dir.as_str())];
            set.counter("weft_link_transport_received_total", &lab, t.seq.received);
            set.counter("weft_link_transport_lost_total", &lab, t.seq.lost);
            set.counter("weft_link_transport_reordered_total", &lab, t.seq.reordered);
            set.counter("weft_link_pacing_late_total", &lab, t.late);
            set.counter_f64("weft_link_pacing_lag_seconds_total", &lab, t.late_ns as f64 * 1e-9);
            set.counter_f64("weft_link_underlay_seconds_total", &lab, t.transit_sum_ns as f64 * 1e-9);
            if let Some((min, _)) = t.underlay_ns() {
                set.gauge("weft_link_underlay_min_seconds", &lab, min as f64 * 1e-9);
            }
        }
        for (host, c) in &self.taps {
            let l = [("host", host.as_str())];
            set.counter("weft_tap_rx_frames_total", &l, c.rx_frames.load(Ordering::Relaxed));
            set.counter("weft_tap_queue_drops_total", &l, c.queue_drops.load(Ordering::Relaxed));
            set.counter("weft_tap_reader_pauses_total", &l, c.pauses.load(Ordering::Relaxed));
            set.counter("weft_tap_link_down_drops_total", &l, c.link_down_drops.load(Ordering::Relaxed));
            set.counter("weft_tap_super_frames_total", &l, c.super_frames.load(Ordering::Relaxed));
            set.counter("weft_tap_offload_errors_total", &l, c.offload_errors.load(Ordering::Relaxed));
            set.counter("weft_tap_tx_packets_total", &l, c.tx_packets.load(Ordering::Relaxed));
            set.counter("weft_tap_coalesced_packets_total", &l, c.coalesced_packets.load(Ordering::Relaxed));
            set.counter("weft_tap_coalesced_segments_total", &l, c.coalesced_segments.load(Ordering::Relaxed));
            set.counter("weft_tap_rx_ring_drops_total", &l, c.rx_ring_drops.load(Ordering::Relaxed));
            set.counter("weft_tap_link_loss_drops_total", &l, c.loss_drops.load(Ordering::Relaxed));
            for why in Rejection::ALL {
                let lc = [("host", host.as_str()), ("cause", why.label())];
                set.counter("weft_tap_rejected_total", &lc, c.rejected[why.index()].load(Ordering::Relaxed));
            }
        }
        let p = self.process.to_string();
        let pl = [("process", p.as_str())];
        let inb = &self.inbound;
        for (cause, n) in inb.rejected() {
            let lc = [pl[0], ("cause", cause)];
            set.counter("weft_process_transport_rejected_total", &lc, n);
        }
        set.counter_f64("weft_process_cpu_seconds_total", &pl, crate::clock::process_cpu_ns() as f64 / 1e9);
        set.gauge("weft_process_scrape_duration_seconds", &pl, started.elapsed().as_secs_f64());
        set
    }
}
