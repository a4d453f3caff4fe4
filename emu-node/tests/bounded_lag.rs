//! The real-time node actor's bounded-lag policy (`max_lag`): a frame that
//! reaches an actor later than the bound after its due time is dropped
//! before the state machine sees it and counted; a timely one is forwarded.
//!
//! Robust to a busy machine: the bound (50 ms) is far above a scheduler's
//! delays and far below the late frame's lateness (1 s); the test waits for
//! the actor's own report of what it handled, never for a fixed sleep.

use emu_node::actor::{Egress, NodeActor, NodeActorArgs, NodeHandle, NodeMsg, PortBinding};
use emu_node::clock::{monotonic_ns, FabricClock, SchedulerTask};
use emu_node::ids::{NodeId, PortId};
use emu_node::inbox::Inbox;
use emu_node::node::Node;
use emu_node::schemes::ecmp::Ecmp;
use emu_node::switch::{Switch, SwitchConfig};
use emu_node::time::BitRate;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts the frames that reach it.
struct Sink;
impl Actor for Sink {
    type Msg = NodeMsg;
    type State = (Arc<AtomicU64>, Arc<Inbox>);
    type Arguments = (Arc<AtomicU64>, Arc<Inbox>);
    async fn pre_start(&self, _me: ActorRef<NodeMsg>, a: Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        Ok(a)
    }
    async fn handle(&self, _me: ActorRef<NodeMsg>, msg: NodeMsg, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        if let NodeMsg::Drain = msg {
            while st.1.pop().is_some() {
                st.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// The bound of the test's switch actor, ns.
const MAX_LAG: u64 = 50_000_000;

/// The switch actor's report once it has received `frames` frames (polled:
/// the actor's own count says when, whatever the machine's load).
async fn report_after(sw: &NodeHandle, frames: u64) -> emu_node::actor::ActorReport {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = sw.actor.call(NodeMsg::Report, None).await.expect("report").success_or(()).expect("report");
        if r.rx_frames >= frames || std::time::Instant::now() > until {
            assert_eq!(r.rx_frames, frames, "frames the actor received within 10 s");
            return r;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[test]
fn a_frame_later_than_max_lag_is_dropped_and_counted_and_a_timely_one_is_forwarded() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    rt.block_on(async {
        let f = weft_testkit::leaf_pair(1, 8, BitRate::gbps(400));
        let sw = Switch::with_program(NodeId(0), &f.nodes[0], SwitchConfig::tofino2(1, false), Box::new(Ecmp::default())).expect("switch");
        // Fabric time started a second ago, so "5 ms ago" is a time.
        let task =
            SchedulerTask::start(FabricClock::with_epoch(monotonic_ns() - 1_000_000_000), Duration::from_micros(20)).expect("scheduler");
        let sched = task.scheduler();
        let got = Arc::new(AtomicU64::new(0));
        let sink_inbox = Arc::new(Inbox::default());
        let (sink, _) = Actor::spawn(None, Sink, (got.clone(), sink_inbox.clone())).await.expect("sink");
        let sink = NodeHandle::new(sink, sink_inbox);
        let inbox = Arc::new(Inbox::default());
        let args = NodeActorArgs {
            node: Box::new(Node::Switch(Box::new(sw))),
            scheduler: sched.clone(),
            inbox: inbox.clone(),
            max_lag: MAX_LAG,
            late_after: 1_000,
        };
        let (actor, _) = Actor::spawn(None, NodeActor, args).await.expect("switch actor");
        let sw = NodeHandle::new(actor, inbox);
        let ports = f.nodes[0]
            .ports
            .iter()
            .map(|p| PortBinding::new(Egress::Local { peer: sink.frames.clone(), port: PortId(0) }, p.link, 0, 1000))
            .collect();
        let _ = sw.actor.cast(NodeMsg::Bind(ports));
        let frame = weft_testkit::leaf_pair_udp_frame(&f, 50000, 4791, 1500);
        // A second late: 20 times over the bound.
        sw.frames.deliver(PortId(0), frame.clone(), sched.now() - 1_000_000_000);
        let r = report_after(&sw, 1).await;
        assert_eq!(r.overload_drops, 1, "the late frame is dropped and counted");
        assert_eq!(r.tx_frames, 0);
        // On time by the fabric's clock.
        sw.frames.deliver(PortId(0), frame, sched.now());
        let r = report_after(&sw, 2).await;
        assert_eq!(r.overload_drops, 1, "the timely frame is not dropped");
        assert_eq!(r.tx_frames, 1);
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while got.load(Ordering::Relaxed) == 0 && std::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(got.load(Ordering::Relaxed), 1, "the timely frame is forwarded");
        assert!(r.lag.max_ns < MAX_LAG, "the dropped frame's lateness is not in the handled lag: {:?}", r.lag);
    });
}
