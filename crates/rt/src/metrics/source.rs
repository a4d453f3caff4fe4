//! Gathering the metrics of a live process (real time): every actor folds
//! its node's counters when asked, and the process adds its transport
//! counters per incoming link direction.
//!
//! A [`MetricsSource`] is a cheap clone of the handles it needs, so the
//! HTTP server can hold one while the runtime goes on.
//!
//! A scrape has a deadline (Prometheus says its scrape timeout in a
//! header): an actor that has not answered by then, because its mailbox is
//! long on a loaded machine, is served from its last answer and counted in
//! `weft_process_metrics_stale_nodes`, so one busy actor never fails the
//! scrape of the whole process.

use crate::actor::NodeMsg;
use crate::link::remote::InboundTable;
use ractor::ActorRef;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
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
    /// Each actor's last answer, served when it misses a scrape's deadline.
    pub last_answers: Arc<Mutex<HashMap<usize, FamilySet>>>,
}

impl MetricsSource {
    /// Asks every actor for its families and adds the process's own; an
    /// actor that has not answered within `deadline` is served from its
    /// last answer.
    pub async fn gather(&self, deadline: Duration) -> FamilySet {
        let started = std::time::Instant::now();
        let mut set = FamilySet::new();
        // Every actor folds its node at once (each answers after the frames
        // already in its mailbox); merged in node order.
        let mut calls = tokio::task::JoinSet::new();
        for (index, actor) in &self.actors {
            let (fabric, index, actor) = (self.fabric.clone(), *index, actor.clone());
            calls.spawn(async move {
                let r = actor.call(|reply| NodeMsg::Metrics { fabric, index, reply }, Some(deadline)).await;
                (index, r.ok().and_then(|r| r.success_or(()).ok()))
            });
        }
        let mut fresh: HashMap<usize, FamilySet> = HashMap::new();
        let _ = tokio::time::timeout(deadline, async {
            while let Some(done) = calls.join_next().await {
                if let Ok((index, Some(s))) = done {
                    fresh.insert(index, s);
                }
            }
        })
        .await;
        calls.abort_all();
        let mut stale = 0usize;
        {
            let mut last = self.last_answers.lock().unwrap_or_else(|e| e.into_inner());
            let mut order: Vec<usize> = self.actors.iter().map(|(i, _)| *i).collect();
            order.sort_unstable();
            for index in &order {
                match fresh.remove(index) {
                    Some(s) => {
                        last.insert(*index, s.clone());
                        set.extend(s);
                    }
                    None => {
                        stale += 1;
                        if let Some(s) = last.get(index) {
                            set.extend(s.clone());
                        }
                    }
                }
            }
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
        set.gauge("weft_process_metrics_stale_nodes", &pl, stale as f64);
        set.gauge("weft_process_scrape_duration_seconds", &pl, started.elapsed().as_secs_f64());
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::auth::{LinkKey, LinkSecret};
    use ractor::{Actor, ActorProcessingErr};
    use std::sync::atomic::{AtomicBool, AtomicU64};

    /// Answers `Metrics` with one counter that counts the answers, after
    /// a long wait while `slow` is set.
    struct StandIn {
        slow: Arc<AtomicBool>,
        answers: Arc<AtomicU64>,
    }

    impl Actor for StandIn {
        type Msg = NodeMsg;
        type State = ();
        type Arguments = ();

        async fn pre_start(&self, _: ActorRef<NodeMsg>, _: ()) -> Result<(), ActorProcessingErr> {
            Ok(())
        }

        async fn handle(&self, _: ActorRef<NodeMsg>, msg: NodeMsg, _: &mut ()) -> Result<(), ActorProcessingErr> {
            if let NodeMsg::Metrics { reply, .. } = msg {
                if self.slow.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(600)).await;
                }
                let n = self.answers.fetch_add(1, Ordering::Relaxed) + 1;
                let mut set = FamilySet::new();
                set.counter("weft_actor_late_frames_total", &[("actor", "s0")], n);
                let _ = reply.send(set);
            }
            Ok(())
        }
    }

    fn value(text: &str, name: &str) -> Option<f64> {
        text.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
    }

    #[tokio::test]
    async fn an_actor_past_the_deadline_is_served_from_its_last_answer_and_counted() {
        let slow = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(AtomicU64::new(0));
        let (actor, handle) = Actor::spawn(None, StandIn { slow: slow.clone(), answers: answers.clone() }, ()).await.expect("spawn");
        let secret = LinkSecret::generate().expect("random");
        let source = MetricsSource {
            actors: vec![(0, actor.clone())],
            inbound: Arc::new(InboundTable::new(1, LinkKey::new(&secret))),
            fabric: Arc::new(Default::default()),
            process: 1,
            taps: vec![],
            last_answers: Default::default(),
        };
        let first = source.gather(Duration::from_millis(200)).await.to_text();
        assert_eq!(value(&first, "weft_actor_late_frames_total"), Some(1.0), "{first}");
        assert_eq!(value(&first, "weft_process_metrics_stale_nodes"), Some(0.0), "{first}");
        slow.store(true, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let second = source.gather(Duration::from_millis(200)).await.to_text();
        assert!(started.elapsed() < Duration::from_millis(500), "the scrape keeps its deadline: {:?}", started.elapsed());
        assert_eq!(value(&second, "weft_actor_late_frames_total"), Some(1.0), "the last answer: {second}");
        assert_eq!(value(&second, "weft_process_metrics_stale_nodes"), Some(1.0), "{second}");
        actor.stop(None);
        let _ = handle.await;
    }
}
