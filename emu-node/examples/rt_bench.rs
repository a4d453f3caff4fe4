//! Real-time driver benchmarks for BENCHMARKS.md (no root needed):
//!
//! 1. forwarding rate: one switch actor (ECMP, Tofino2 model) on the
//!    single-threaded runtime, fed 1500 B frames over an in-process link
//!    as fast as it takes them, forwarding to a sink actor over in-process
//!    links (8 uplinks at 400 Gbit/s, so the model's rate limit is not the
//!    bottleneck); frames per second.
//! 2. pacing at 1 Gbit/s: the same switch with 1 Gbit/s uplinks, offered
//!    2 Gbit/s for 50 ms (a port overloaded 2x); the sink records how late
//!    each frame arrives versus its due time (departure + serialization +
//!    delay), and the achieved rate (wall clock, first to last arrival).
//! 3. CPU overload and the bounded-lag policy: the 400 Gbit/s switch of 1.
//!    offered twice the frames per second it forwarded in 1. for 200 ms,
//!    without a bound and with `max_lag` 1 ms and 10 ms (the sink applies
//!    the same rule): how late the switch and the sink handle frames, and
//!    how many each dropped as overload.
//!
//! 4. frames/s over links to another process: the switch of 1. whose 8
//!    uplinks are UDP links, then QUIC-datagram links, to a receiver with
//!    its own runtime, deadline scheduler and sink on a thread of its own
//!    (what a second emu-node process runs), fed as fast as the receiver
//!    takes frames; frames/s at the receiver and frames the transport lost.
//!
//! With `WEFT_BENCH_SCRAPE_MS=N`, the forwarding run also gathers the
//! switch's Prometheus metrics every N ms and encodes them as text (what a
//! scrape of `/metrics` does), to measure the metrics' cost on forwarding.
//!
//! `cargo run --release -p emu-node --example rt_bench`

use bytes::BytesMut;
use emu_node::actor::{Egress, NodeActor, NodeActorArgs, NodeHandle, NodeMsg, PortBinding};
use emu_node::clock::{FabricClock, SchedulerTask};
use emu_node::fabric::FabricSpec;
use emu_node::ids::{NodeId, PortId};
use emu_node::inbox::Inbox;
use emu_node::lag::LagHistogram;
use emu_node::node::Node;
use emu_node::schemes::ecmp::Ecmp;
use emu_node::switch::{Switch, SwitchConfig};
use emu_node::time::BitRate;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn frame(f: &FabricSpec, sport: u16) -> BytesMut {
    weft_testkit::leaf_pair_udp_frame(f, sport, 4791, 1500)
}

#[derive(Default)]
struct SinkStats {
    frames: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    lag: LagHistogram,
    /// Frames later than `max_lag`, dropped as a node actor would.
    overload_drops: u64,
    max_lag: u64,
}

struct Sink;
impl Actor for Sink {
    type Msg = NodeMsg;
    type State = (Arc<Mutex<SinkStats>>, emu_node::clock::DeadlineScheduler, Arc<Inbox>);
    type Arguments = (Arc<Mutex<SinkStats>>, emu_node::clock::DeadlineScheduler, Arc<Inbox>);
    async fn pre_start(&self, _me: ActorRef<NodeMsg>, a: Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        Ok(a)
    }
    async fn handle(&self, _me: ActorRef<NodeMsg>, msg: NodeMsg, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        if let NodeMsg::Drain = msg {
            let now = st.1.now();
            while let Some((_, _, due)) = st.2.pop() {
                if let Ok(mut s) = st.0.lock() {
                    if s.max_lag > 0 && now.saturating_sub(due) > s.max_lag {
                        s.overload_drops += 1;
                        continue;
                    }
                    s.frames += 1;
                    s.lag.record(due, now);
                    let t = Instant::now();
                    s.first.get_or_insert(t);
                    s.last = Some(t);
                }
            }
        }
        Ok(())
    }
}

async fn setup(rate: BitRate, spin_us: u64, max_lag: u64) -> (SchedulerTask, NodeHandle, Arc<Mutex<SinkStats>>, FabricSpec) {
    let f = weft_testkit::leaf_pair(1, 8, rate);
    let cfg = SwitchConfig::tofino2(1, false);
    let sw = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(Ecmp::default())).expect("switch");
    let task = SchedulerTask::start(FabricClock::starting_now(), Duration::from_micros(spin_us)).expect("scheduler");
    let sched = task.scheduler();
    let stats = Arc::new(Mutex::new(SinkStats { max_lag, ..SinkStats::default() }));
    let sink_inbox = Arc::new(Inbox::default());
    let (sink, _) = Actor::spawn(None, Sink, (stats.clone(), sched.clone(), sink_inbox.clone())).await.expect("sink");
    let sink = NodeHandle::new(sink, sink_inbox);
    let inbox = Arc::new(Inbox::default());
    let args = NodeActorArgs {
        node: Box::new(Node::Switch(Box::new(sw))),
        scheduler: sched.clone(),
        inbox: inbox.clone(),
        max_lag,
        late_after: 1_000,
    };
    let (sw_ref, _) = Actor::spawn(None, NodeActor, args).await.expect("switch actor");
    let sw_ref = NodeHandle::new(sw_ref, inbox);
    let ports = f.nodes[0]
        .ports
        .iter()
        .map(|p| PortBinding::new(Egress::Local { peer: sink.frames.clone(), port: PortId(0) }, p.link, 0, 1000))
        .collect();
    let _ = sw_ref.actor.cast(NodeMsg::Bind(ports));
    (task, sw_ref, stats, f)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    rt.block_on(async {
        // 1. Forwarding rate.
        let (task, sw, stats, f) = setup(BitRate::gbps(400), 20, 0).await;
        let frames: Vec<BytesMut> = (0..4096).map(|i| frame(&f, 49152 + i as u16)).collect();
        let sched = task.scheduler();
        let start = Instant::now();
        let mut sent = 0u64;
        let scrape_every = std::env::var("WEFT_BENCH_SCRAPE_MS").ok().and_then(|v| v.parse::<u64>().ok()).map(Duration::from_millis);
        // Scrapes run in their own task, as the HTTP endpoint's do, so the
        // feeder keeps going while one waits for the switch's answer.
        let scraped = Arc::new(Mutex::new((0u64, 0usize, Duration::ZERO)));
        let scraper = scrape_every.map(|every| {
            let (fabric, actor, scraped) = (Arc::new(f.clone()), sw.actor.clone(), scraped.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    let fabric = fabric.clone();
                    let t = Instant::now();
                    if let Ok(Ok(set)) =
                        actor.call(|reply| NodeMsg::Metrics { fabric, index: 0, reply }, None).await.map(|r| r.success_or(()))
                    {
                        let text = set.to_text();
                        if let Ok(mut s) = scraped.lock() {
                            *s = (s.0 + 1, text.len(), s.2 + t.elapsed());
                        }
                    }
                }
            })
        });
        while start.elapsed() < Duration::from_secs(3) {
            for fr in frames.iter().take(256) {
                let now = sched.now();
                sw.frames.deliver(PortId(0), fr.clone(), now);
                sent += 1;
            }
            tokio::task::yield_now().await;
            // Keep the mailbox bounded: wait while the sink lags far behind.
            while sent.saturating_sub(stats.lock().map(|s| s.frames).unwrap_or(0)) > 20_000 {
                tokio::task::yield_now().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let s = stats.lock().map(|s| (s.frames, s.first, s.last)).unwrap_or((0, None, None));
        let secs = match (s.1, s.2) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 1.0,
        };
        let capacity = s.0 as f64 / secs;
        println!("forwarding: one ECMP switch actor, in-process links, 1500 B: {:.3} M frames/s ({} frames)", capacity / 1e6, s.0);
        if let Some(t) = scraper {
            t.abort();
            let (n, bytes, took) = scraped.lock().map(|s| *s).unwrap_or_default();
            println!(
                "  with {n} metric scrapes of {bytes} B of text each, {:.0} us each from request to text",
                took.as_secs_f64() * 1e6 / n.max(1) as f64
            );
        }
        drop(task);

        // 2. Pacing at 1 Gbit/s: frames offered at 2 Gbit/s for 50 ms into
        // one flow (one 1 Gbit/s uplink); the port sends back to back.
        let (task, sw, stats, f) = setup(BitRate::gbps(1), 20, 0).await;
        let fr = frame(&f, 50000);
        let sched = task.scheduler();
        // Far enough ahead that scheduling the 8333 arrivals (a few ms)
        // ends before the first is due: otherwise the first frames are
        // late by the set-up itself (what an earlier version measured as
        // a 12-13 ms p99).
        let t0 = sched.now() + 30_000_000;
        for k in 0..8333u64 {
            let (sw, fr) = (sw.clone(), fr.clone());
            let due = t0 + k * 6_000;
            sched.at(
                due,
                Box::new(move |_| {
                    sw.frames.deliver(PortId(0), fr, due);
                }),
            );
        }
        tokio::time::sleep(Duration::from_millis(180)).await;
        let s = stats.lock().map(|s| (s.frames, s.lag.summary(), s.first, s.last)).expect("stats");
        let secs = match (s.2, s.3) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 1.0,
        };
        let rate = (s.0.saturating_sub(1)) as f64 * 1500.0 * 8.0 / secs;
        println!(
            "pacing at 1 Gbit/s (12 us/frame): {} frames, wall rate {:.4} Gbit/s, lateness vs due p50 {:.1} us p99 {:.1} us max {:.1} us",
            s.0,
            rate / 1e9,
            s.1.p50_ns as f64 / 1e3,
            s.1.p99_ns as f64 / 1e3,
            s.1.max_ns as f64 / 1e3
        );
        let (fired, spin, sleeps) = sched.stats();
        println!(
            "scheduler: {fired} deadlines, {:.1} ms spinning over {:.0} ms, {sleeps} sleeps",
            spin as f64 / 1e6,
            (sched.now() - t0) as f64 / 1e6
        );
        drop(task);

        // 3. CPU overload: twice the forwarding capacity of 1., in 1 ms
        // bursts for 200 ms, without a lag bound and with 1 ms.
        for max_lag in [0u64, 1_000_000, 10_000_000] {
            let (task, sw, stats, f) = setup(BitRate::gbps(400), 20, max_lag).await;
            let frames: Vec<BytesMut> = (0..4096).map(|i| frame(&f, 49152 + i as u16)).collect();
            let sched = task.scheduler();
            let per_ms = (2.0 * capacity / 1000.0) as usize;
            let start = Instant::now();
            let mut k = 0usize;
            for ms in 0..200u64 {
                // Each burst is due at its millisecond; a feeder that is
                // itself late hands them over late (counted as lag).
                let due = sched.now().max(ms * 1_000_000 + sched.now() - start.elapsed().as_nanos() as u64);
                for _ in 0..per_ms {
                    sw.frames.deliver(PortId(0), frames[k % frames.len()].clone(), due);
                    k += 1;
                }
                tokio::task::yield_now().await;
                let next = Duration::from_millis(ms + 1);
                if let Some(wait) = next.checked_sub(start.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
            // Let the switch drain what it can.
            let until = Instant::now() + Duration::from_secs(5);
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let r = sw.actor.call(NodeMsg::Report, None).await.ok().and_then(|r| r.success_or(()).ok());
                let done = r.as_ref().is_some_and(|r| r.rx_frames as usize >= k);
                if done || Instant::now() > until {
                    let s = stats.lock().map(|s| (s.frames, s.lag.summary(), s.overload_drops)).expect("stats");
                    let (rx, dropped, lag) = r.map_or((0, 0, Default::default()), |r| (r.rx_frames, r.overload_drops, r.lag));
                    let us = |ns: u64| ns as f64 / 1e3;
                    println!(
                        "CPU overload, {k} frames offered (2x capacity, 200 ms), max_lag {}:\n  switch: {rx} received, {dropped} dropped as overload, lateness of what it handled p50 {:.1} us p99 {:.1} us max {:.1} us\n  sink:   {} received, {} dropped as overload, lateness p50 {:.1} us p99 {:.1} us max {:.1} us",
                        if max_lag == 0 { "none".to_string() } else { format!("{} ms", max_lag / 1_000_000) },
                        us(lag.p50_ns),
                        us(lag.p99_ns),
                        us(lag.max_ns),
                        s.0,
                        s.2,
                        us(s.1.p50_ns),
                        us(s.1.p99_ns),
                        us(s.1.max_ns)
                    );
                    break;
                }
            }
            drop(task);
        }

        // 4. Forwarding over links to another process.
        for quic in [false, true] {
            let (fps, received, lost, offered, sent, refused) = over_links(quic).await;
            println!(
                "forwarding over {} links to another runtime (8 uplinks, 1500 B): {:.3} M frames/s ({offered} offered, {sent} sent by the switch, {refused} refused by the transport, {received} received, {lost} lost in transit)",
                if quic { "QUIC-datagram" } else { "UDP" },
                fps / 1e6
            );
        }
    });
}

/// Socket buffers as the runtime's link sockets have them (16 MiB, forced
/// when root).
fn big_buffers(s: &std::net::UdpSocket) {
    use std::os::fd::AsRawFd;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        let v: libc::c_int = 16 << 20;
        // SAFETY: setsockopt with a valid fd and a c_int value of the right size.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}

/// Scenario 4: (frames/s received, frames received, frames lost, frames
/// offered, frames the switch sent, sends the transport refused).
async fn over_links(quic: bool) -> (f64, u64, u64, u64, u64, u64) {
    use emu_node::link::quic::{endpoint_config, link_transport};
    use emu_node::link::remote::{run_quic_receiver, run_udp_receiver, InboundTable, RemoteSender};
    const TAG: u32 = 0x5eed;

    /// The link key both ends of the benchmark share (datagrams are signed as
    /// in a fabric).
    fn link_key() -> emu_node::link::auth::LinkKey {
        emu_node::link::auth::LinkKey::new(&emu_node::link::auth::LinkSecret([7; 32]))
    }
    let f = weft_testkit::leaf_pair(1, 8, BitRate::gbps(400));
    let epoch = emu_node::clock::monotonic_ns();
    let identity = emu_node::tls::FabricIdentity::generate().expect("identity");
    let server = identity.quic_server(link_transport()).expect("server config");
    let stats = Arc::new(Mutex::new(SinkStats::default()));
    let links: Vec<u32> = f.nodes[0].ports.iter().map(|p| p.link.0).collect();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<(std::net::SocketAddr, Arc<InboundTable>)>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (rx_stats, rx_links) = (stats.clone(), links.clone());
    let receiver = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
        rt.block_on(async move {
            let task = SchedulerTask::start(FabricClock::with_epoch(epoch), Duration::from_micros(20)).expect("scheduler");
            let sched = task.scheduler();
            let inbox = Arc::new(Inbox::default());
            let (sink, _) = Actor::spawn(None, Sink, (rx_stats, sched.clone(), inbox.clone())).await.expect("sink");
            let sink = NodeHandle::new(sink, inbox);
            let mut table = InboundTable::new(TAG, link_key());
            for &l in &rx_links {
                table.insert(l, 0, sink.frames.clone(), PortId(0));
            }
            let table = Arc::new(table);
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
            big_buffers(&sock);
            let addr = sock.local_addr().expect("address");
            if quic {
                let ep = quinn::Endpoint::new(endpoint_config(), Some(server), sock, Arc::new(quinn::TokioRuntime)).expect("endpoint");
                let _ = ready_tx.send((addr, table.clone()));
                let conn = ep.accept().await.expect("incoming").await.expect("handshake");
                tokio::spawn(run_quic_receiver(conn, table, sched.clone()));
                let _ = stop_rx.await;
                drop(ep);
            } else {
                sock.set_nonblocking(true).expect("non-blocking");
                let sock = Arc::new(tokio::net::UdpSocket::from_std(sock).expect("tokio socket"));
                let _ = ready_tx.send((addr, table.clone()));
                tokio::spawn(run_udp_receiver(sock, table, sched.clone()));
                let _ = stop_rx.await;
            }
            drop(task);
        });
    });
    let (addr, table) = ready_rx.recv().expect("receiver ready");
    let task = SchedulerTask::start(FabricClock::with_epoch(epoch), Duration::from_micros(20)).expect("scheduler");
    let sched = task.scheduler();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    big_buffers(&sock);
    let mut endpoint = None;
    let senders: Vec<RemoteSender> = if quic {
        let ep = quinn::Endpoint::new(endpoint_config(), None, sock, Arc::new(quinn::TokioRuntime)).expect("endpoint");
        let client = emu_node::tls::quic_client(&identity.pin(), link_transport()).expect("client config");
        let conn = ep.connect_with(client, addr, emu_node::tls::SERVER_NAME).expect("connect").await.expect("handshake");
        endpoint = Some(ep);
        links.iter().map(|_| RemoteSender::quic(TAG, link_key(), conn.clone())).collect()
    } else {
        sock.set_nonblocking(true).expect("non-blocking");
        let sock = Arc::new(tokio::net::UdpSocket::from_std(sock).expect("tokio socket"));
        links.iter().map(|_| RemoteSender::udp(TAG, link_key(), sock.clone(), addr)).collect()
    };
    let cfg = SwitchConfig::tofino2(1, false);
    let sw = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(Ecmp::default())).expect("switch");
    let inbox = Arc::new(Inbox::default());
    let args = NodeActorArgs {
        node: Box::new(Node::Switch(Box::new(sw))),
        scheduler: sched.clone(),
        inbox: inbox.clone(),
        max_lag: 0,
        late_after: 1_000,
    };
    let (sw_ref, _) = Actor::spawn(None, NodeActor, args).await.expect("switch actor");
    let sw = NodeHandle::new(sw_ref, inbox);
    let ports = f.nodes[0].ports.iter().zip(senders).map(|(p, r)| PortBinding::new(Egress::Remote(r), p.link, 0, 1000)).collect();
    let _ = sw.actor.cast(NodeMsg::Bind(ports));
    let frames: Vec<BytesMut> = (0..4096).map(|i| frame(&f, 49152 + i as u16)).collect();
    let lost = || table.report().iter().map(|r| r.seq.lost).sum::<u64>();
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < Duration::from_secs(3) {
        for fr in frames.iter().take(256) {
            sw.frames.deliver(PortId(0), fr.clone(), sched.now());
            sent += 1;
        }
        tokio::task::yield_now().await;
        // Keep the queues bounded: wait while the receiver lags far behind
        // (what the transport lost never arrives).
        let waiting = Instant::now();
        while sent.saturating_sub(stats.lock().map(|s| s.frames).unwrap_or(0) + lost()) > 20_000
            && waiting.elapsed() < Duration::from_millis(200)
        {
            tokio::task::yield_now().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let s = stats.lock().map(|s| (s.frames, s.first, s.last)).unwrap_or((0, None, None));
    let secs = match (s.1, s.2) {
        (Some(a), Some(b)) => (b - a).as_secs_f64(),
        _ => 1.0,
    };
    let lost = lost();
    let report = sw.actor.call(NodeMsg::Report, None).await.ok().and_then(|r| r.success_or(()).ok()).unwrap_or_default();
    let _ = stop_tx.send(());
    drop(endpoint);
    drop(task);
    let _ = receiver.join();
    (s.0 as f64 / secs, s.0, lost, sent, report.tx_frames, report.send_errors)
}
