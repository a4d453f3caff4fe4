//! Real time for the real-time driver: the fabric clock and the one
//! deadline scheduler of a process.
//!
//! [`FabricClock`] reads `CLOCK_MONOTONIC`, which every process of one
//! machine shares, relative to a fabric epoch chosen by the orchestrator; so
//! a deadline written by one emu-node process (a frame's delivery time in
//! the link header) means the same instant in another. It is the only
//! place that reads the monotonic clock for fabric time (captures stamp calendar
//! time, the metrics endpoint times its scrape); sans-IO state machines get `now`
//! from their driver.
//!
//! [`DeadlineScheduler`] runs closures at deadlines with µs precision
//! without burning a core: tokio's timer wheel has a 1 ms granularity, and
//! a thread spinning per port would starve the very traffic it paces on a
//! 2-core machine. It is one tokio task per process, on the same
//! single-threaded runtime as the process's actors and I/O, so a due frame
//! reaches its actor without any cross-thread wake-up. Until `spin` before
//! the earliest deadline the task sleeps on a `timerfd` armed with the
//! absolute deadline (ns resolution, woken through the runtime's epoll);
//! for the last `spin` it yields in a loop, which lets the actors and I/O
//! run while it waits. Deadlines already due run at once, in deadline
//! order, ties in submission order. Invariants: a closure never runs before
//! its deadline, nor before the fabric epoch; submitting never blocks.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;
use weft_wire::time::Nanos;

/// Nanoseconds of `CLOCK_MONOTONIC` (shared by all processes of a machine;
/// not between machines: the orchestrator measures each machine's offset,
/// see [`ClockSample`]), plus the test offset, if one was set.
pub fn monotonic_ns() -> u64 {
    kernel_monotonic_ns().wrapping_add_signed(TEST_OFFSET_NS.load(Ordering::Relaxed))
}

fn kernel_monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time this process has used so far (every thread, user and
/// system), ns: what a faithfulness report compares with wall time.
pub fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_PROCESS_CPUTIME_ID always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

static TEST_OFFSET_NS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// For tests of the clock-offset estimation only: this process's clock
/// runs `ns` ahead of the machine's (as another machine's clock would).
/// emu-node sets it from `WEFT_TEST_CLOCK_OFFSET_NS` before anything reads
/// the clock.
pub fn set_test_offset(ns: i64) {
    TEST_OFFSET_NS.store(ns, Ordering::Relaxed);
}

/// One exchange of the clock-offset estimation (NTP's on-wire idea, over
/// the control channel): the orchestrator sends at `sent` and receives the
/// answer at `received` (its clock); the emu-node read `remote` (its clock)
/// in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// Orchestrator clock when the probe left.
    pub sent: u64,
    /// emu-node clock when it answered.
    pub remote: u64,
    /// Orchestrator clock when the answer arrived.
    pub received: u64,
}

/// The emu-node's clock minus the orchestrator's (ns) and its uncertainty
/// (half the round trip, ns), from the sample with the smallest round trip
/// (the one least delayed by queues; NTP's minimum filter). `None` without
/// a valid sample.
pub fn estimate_offset(samples: &[ClockSample]) -> Option<(i64, u64)> {
    let best = samples.iter().filter(|s| s.received >= s.sent).min_by_key(|s| s.received - s.sent)?;
    let mid = best.sent as i128 + (best.received - best.sent) as i128 / 2;
    Some(((best.remote as i128 - mid) as i64, (best.received - best.sent) / 2))
}

/// When the clock-offset estimation has probed enough. A probe's round
/// trip is its error bound, and on a loaded machine every probe of a short
/// burst can wait behind the same busy core (a burst of 16 on a CI machine
/// starting three emu-nodes on two cores: a best round trip of 211 us where
/// 90 us was usual). So after a burst of [`CLOCK_PROBE_BURST`] the
/// orchestrator keeps probing, one probe a millisecond, until the best round
/// trip is short ([`CLOCK_GOOD_ROUND_TRIP_NS`]), or has not improved by a
/// tenth for [`CLOCK_SETTLE_NS`], or [`CLOCK_PROBING_MAX_NS`] have passed.
pub fn probing_done(samples: &[ClockSample]) -> bool {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else { return false };
    if samples.len() < CLOCK_PROBE_BURST {
        return false;
    }
    if last.received.saturating_sub(first.sent) >= CLOCK_PROBING_MAX_NS {
        return true;
    }
    let valid = || samples.iter().filter(|s| s.received >= s.sent);
    let Some(best) = valid().map(|s| s.received - s.sent).min() else { return false };
    // The first probe already within a tenth of the best: since then, no
    // improvement worth waiting for.
    let settled_at = valid().find(|s| (s.received - s.sent) * 10 <= best * 11).map_or(last.received, |s| s.received);
    best <= CLOCK_GOOD_ROUND_TRIP_NS || last.received.saturating_sub(settled_at) >= CLOCK_SETTLE_NS
}

/// Probes sent back to back before [`probing_done`] is asked.
pub const CLOCK_PROBE_BURST: usize = 16;
/// A round trip short enough to stop probing at once (an offset within 20 us).
pub const CLOCK_GOOD_ROUND_TRIP_NS: u64 = 40_000;
/// How long the best round trip must stay within a tenth to stop probing.
pub const CLOCK_SETTLE_NS: u64 = 50_000_000;
/// Probing stops after this long, whatever the round trips.
pub const CLOCK_PROBING_MAX_NS: u64 = 250_000_000;

/// The fabric's time: monotonic nanoseconds since the fabric epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FabricClock {
    epoch: u64,
}

impl FabricClock {
    /// A clock whose zero is `epoch` (a [`monotonic_ns`] value).
    pub fn with_epoch(epoch: u64) -> Self {
        FabricClock { epoch }
    }
    /// A clock whose zero is now.
    pub fn starting_now() -> Self {
        FabricClock { epoch: monotonic_ns() }
    }
    /// The epoch (to hand to other processes).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
    /// Fabric time now (0 before the epoch).
    pub fn now(&self) -> Nanos {
        monotonic_ns().saturating_sub(self.epoch)
    }
    /// Whether fabric time has started.
    pub fn started(&self) -> bool {
        monotonic_ns() >= self.epoch
    }
}

/// Work that runs at a deadline, on the runtime thread (keep it short:
/// cast a message, write a frame).
pub type Deferred = Box<dyn FnOnce(Nanos) + Send>;

struct Entry {
    at: Nanos,
    seq: u64,
    work: Deferred,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Counters of the scheduler.
#[derive(Debug, Default)]
struct Stats {
    fired: AtomicU64,
    spin_ns: AtomicU64,
    sleeps: AtomicU64,
}

struct Queue {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    /// Deadline the driver sleeps toward (`u64::MAX`: none / idle).
    sleeping_until: u64,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Notify,
    stats: Stats,
}

/// A handle to submit deadlines to the process's scheduler.
#[derive(Clone)]
pub struct DeadlineScheduler {
    shared: Arc<Shared>,
    clock: FabricClock,
}

impl std::fmt::Debug for DeadlineScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlineScheduler").field("clock", &self.clock).finish()
    }
}

/// Owns the scheduler task; dropping it stops the task.
pub struct SchedulerTask {
    task: tokio::task::JoinHandle<()>,
    scheduler: DeadlineScheduler,
}

impl SchedulerTask {
    /// Starts the scheduler on the current tokio runtime. `spin` is how long
    /// before a deadline it stops sleeping and yields in a loop (0: never;
    /// precision is then the kernel's wake-up latency).
    pub fn start(clock: FabricClock, spin: Duration) -> std::io::Result<Self> {
        let timer = TimerFd::new()?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { heap: BinaryHeap::new(), seq: 0, sleeping_until: u64::MAX }),
            wake: Notify::new(),
            stats: Stats::default(),
        });
        let scheduler = DeadlineScheduler { shared: shared.clone(), clock };
        let task = tokio::spawn(drive(clock, shared, timer, spin.as_nanos() as u64));
        Ok(SchedulerTask { task, scheduler })
    }
    /// A handle for submitting deadlines.
    pub fn scheduler(&self) -> DeadlineScheduler {
        self.scheduler.clone()
    }
}

impl Drop for SchedulerTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DeadlineScheduler {
    /// The clock deadlines are expressed in.
    pub fn clock(&self) -> FabricClock {
        self.clock
    }
    /// Fabric time now.
    pub fn now(&self) -> Nanos {
        self.clock.now()
    }
    /// Deadlines run, ns spent spinning, sleeps.
    pub fn stats(&self) -> (u64, u64, u64) {
        let s = &self.shared.stats;
        (s.fired.load(Ordering::Relaxed), s.spin_ns.load(Ordering::Relaxed), s.sleeps.load(Ordering::Relaxed))
    }
    /// Deadlines waiting to run.
    pub fn pending(&self) -> usize {
        self.shared.queue.lock().map_or(0, |q| q.heap.len())
    }
    /// Runs `work(now)` at `at` (fabric time), or as soon as possible if
    /// `at` has passed.
    pub fn at(&self, at: Nanos, work: Deferred) {
        let wake = {
            let Ok(mut q) = self.shared.queue.lock() else { return };
            q.seq += 1;
            let seq = q.seq;
            q.heap.push(Reverse(Entry { at, seq, work }));
            if at < q.sleeping_until {
                q.sleeping_until = 0;
                true
            } else {
                false
            }
        };
        if wake {
            self.shared.wake.notify_one();
        }
    }
}

/// The frames of one link direction on their way through the scheduler:
/// [`DeadlineScheduler::in_lane`] runs a frame's work at once when it is
/// already due and no earlier frame of the lane is still held, and holds
/// it until its deadline otherwise. Late frames so skip the scheduler's
/// queue (a lock, a heap entry and a boxed closure each: BENCHMARKS.md,
/// "Late frames straight to their node") without overtaking one another.
///
/// Invariants: one submitter per lane (the sender of the link direction);
/// work never runs before its deadline; work run at once never overtakes
/// work of its lane still held (held work runs in deadline order, as
/// [`DeadlineScheduler::at`] runs it).
#[derive(Debug, Clone, Default)]
pub struct Lane(Arc<AtomicU64>);

impl DeadlineScheduler {
    /// Runs `work(now)` at `at` as [`DeadlineScheduler::at`] does, but at
    /// once, on the caller's thread, when `at` is not after `now` and
    /// nothing of `lane` is held (see [`Lane`]).
    pub fn in_lane<F: FnOnce(Nanos) + Send + 'static>(&self, lane: &Lane, at: Nanos, now: Nanos, work: F) {
        if at <= now && lane.0.load(Ordering::Acquire) == 0 {
            work(now);
            return;
        }
        let held = lane.0.clone();
        held.fetch_add(1, Ordering::AcqRel);
        self.at(
            at,
            Box::new(move |t| {
                work(t);
                held.fetch_sub(1, Ordering::Release);
            }),
        );
    }
}

/// A non-blocking `timerfd` on `CLOCK_MONOTONIC`.
struct TimerFd(AsyncFd<OwnedFd>);

impl TimerFd {
    fn new() -> std::io::Result<Self> {
        // SAFETY: timerfd_create has no memory preconditions; the result is checked.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created descriptor we own.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the OwnedFd moves into the AsyncFd, which deregisters it before closing it.
        let afd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }.map_err(|e| e.into_parts().1)?;
        Ok(TimerFd(afd))
    }
    /// Arms the timer for absolute monotonic time `at_mono` (ns).
    fn arm(&self, at_mono: u64) {
        // The kernel's clock: without the test offset.
        let at_mono = at_mono.wrapping_add_signed(-TEST_OFFSET_NS.load(Ordering::Relaxed));
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: (at_mono / 1_000_000_000) as i64, tv_nsec: (at_mono % 1_000_000_000) as i64 },
        };
        // SAFETY: valid fd and itimerspec; a null old-value pointer is allowed.
        unsafe { libc::timerfd_settime(self.0.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
    }
    async fn wait(&self) {
        if let Ok(mut g) = self.0.readable().await {
            let mut buf = [0u8; 8];
            // SAFETY: reading 8 bytes into a valid buffer from our fd.
            let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
            if n < 0 {
                g.clear_ready();
            }
        }
    }
}

async fn drive(clock: FabricClock, shared: Arc<Shared>, timer: TimerFd, spin_ns: u64) {
    // Nothing runs before fabric time 0: processes that share an epoch in
    // the future start together.
    if !clock.started() {
        timer.arm(clock.epoch());
        timer.wait().await;
    }
    let mut spinning_since: Option<u64> = None;
    loop {
        let now = clock.now();
        // Run everything due.
        let mut ran = false;
        loop {
            let e = {
                let Ok(mut q) = shared.queue.lock() else { return };
                match q.heap.peek() {
                    Some(Reverse(e)) if e.at <= now => q.heap.pop().map(|Reverse(e)| e),
                    _ => None,
                }
            };
            let Some(e) = e else { break };
            (e.work)(now);
            shared.stats.fired.fetch_add(1, Ordering::Relaxed);
            ran = true;
        }
        if ran {
            if let Some(s) = spinning_since.take() {
                shared.stats.spin_ns.fetch_add(now.saturating_sub(s), Ordering::Relaxed);
            }
            tokio::task::yield_now().await;
            continue;
        }
        let next = {
            let Ok(mut q) = shared.queue.lock() else { return };
            let next = q.heap.peek().map(|Reverse(e)| e.at);
            match next {
                Some(at) if at - now <= spin_ns => {}
                Some(at) => q.sleeping_until = at,
                None => q.sleeping_until = u64::MAX,
            }
            next
        };
        match next {
            Some(at) if at - now <= spin_ns => {
                spinning_since.get_or_insert(now);
                tokio::task::yield_now().await;
            }
            _ => {
                if let Some(s) = spinning_since.take() {
                    shared.stats.spin_ns.fetch_add(now.saturating_sub(s), Ordering::Relaxed);
                }
                shared.stats.sleeps.fetch_add(1, Ordering::Relaxed);
                match next {
                    Some(at) => {
                        timer.arm(clock.epoch() + at - spin_ns);
                        tokio::select! {
                            _ = timer.wait() => {}
                            _ = shared.wake.notified() => {}
                        }
                    }
                    None => shared.wake.notified().await,
                }
                if let Ok(mut q) = shared.queue.lock() {
                    q.sleeping_until = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_comes_from_the_sample_with_the_shortest_round_trip() {
        // The emu-node's clock runs 5 s ahead; one sample was delayed on
        // the way back (asymmetric: it would err by 400 us).
        let ahead = 5_000_000_000u64;
        let samples = [
            ClockSample { sent: 1_000_000, remote: 1_000_100 + ahead, received: 1_000_900 },
            ClockSample { sent: 2_000_000, remote: 2_000_050 + ahead, received: 2_000_100 },
        ];
        assert_eq!(estimate_offset(&samples), Some((5_000_000_000, 50)));
        assert_eq!(estimate_offset(&[]), None);
        // A clock behind gives a negative offset.
        assert_eq!(estimate_offset(&[ClockSample { sent: 10_000, remote: 4_000, received: 10_020 }]), Some((-6_010, 10)));
    }

    #[test]
    fn probing_goes_on_while_the_best_round_trip_keeps_improving() {
        let ms = 1_000_000u64;
        // A sample at `t` ms with round trip `rtt` ns.
        let at = |t: u64, rtt: u64| ClockSample { sent: t * ms, remote: 0, received: t * ms + rtt };
        // A loaded burst: 16 round trips of 200 us.
        let mut samples: Vec<_> = (0..16).map(|i| at(i / 4, 200_000)).collect();
        assert!(!probing_done(&samples[..15]), "never fewer than a burst");
        assert!(!probing_done(&samples), "200 us, just measured: go on");
        // The load passes: 90 us at 10 ms, then nothing better.
        samples.push(at(10, 90_000));
        for t in 11..60 {
            samples.push(at(t, 95_000));
            assert!(!probing_done(&samples), "{t} ms: not settled yet");
        }
        samples.push(at(60, 95_000));
        assert!(probing_done(&samples), "50 ms within a tenth of the best");
        // A short round trip ends it at once.
        let mut quiet: Vec<_> = (0..15).map(|i| at(i, 100_000)).collect();
        quiet.push(at(15, 30_000));
        assert!(probing_done(&quiet));
        // Improving for ever (an improvement of a tenth every 40 ms) still
        // ends at the cap.
        let mut drifting: Vec<_> = (0..16).map(|_| at(0, 1_000_000)).collect();
        let mut rtt = 1_000_000u64;
        for t in 1..=250 {
            if t % 40 == 0 {
                rtt = rtt * 8 / 10;
            }
            assert!(!probing_done(&drifting), "{t} ms");
            drifting.push(at(t, rtt));
        }
        assert!(probing_done(&drifting), "the cap");
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn runs_in_deadline_order_never_early() {
        rt().block_on(async {
            let t = SchedulerTask::start(FabricClock::starting_now(), Duration::from_micros(20)).unwrap();
            let s = t.scheduler();
            let log = Arc::new(Mutex::new(Vec::new()));
            let base = s.now() + 2_000_000;
            for (i, off) in [300_000u64, 100_000, 200_000, 100_000].into_iter().enumerate() {
                let log = log.clone();
                let at = base + off;
                s.at(at, Box::new(move |now| log.lock().unwrap().push((i, at, now))));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let log = log.lock().unwrap();
            let order: Vec<usize> = log.iter().map(|e| e.0).collect();
            assert_eq!(order, vec![1, 3, 2, 0]);
            for &(_, at, now) in log.iter() {
                assert!(now >= at, "ran {} ns early", at - now);
            }
        });
    }

    #[test]
    fn past_deadlines_run_at_once_and_idle_sleeps() {
        rt().block_on(async {
            let t = SchedulerTask::start(FabricClock::starting_now(), Duration::ZERO).unwrap();
            let s = t.scheduler();
            let (tx, rx) = tokio::sync::oneshot::channel();
            s.at(0, Box::new(move |now| tx.send(now).unwrap()));
            assert!(tokio::time::timeout(Duration::from_secs(1), rx).await.is_ok());
            // A deadline 5 ms ahead is met by sleeping, not spinning.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let at = s.now() + 5_000_000;
            s.at(at, Box::new(move |now| tx.send(now).unwrap()));
            let fired = tokio::time::timeout(Duration::from_secs(1), rx).await.unwrap().unwrap();
            assert!(fired >= at);
            assert_eq!(s.stats().1, 0, "spin window 0 never spins");
            assert!(s.stats().2 >= 1);
        });
    }

    #[test]
    fn a_lane_runs_due_work_at_once_but_never_ahead_of_its_held_work() {
        rt().block_on(async {
            let t = SchedulerTask::start(FabricClock::starting_now(), Duration::from_micros(20)).unwrap();
            let s = t.scheduler();
            let (lane, other) = (Lane::default(), Lane::default());
            let log = Arc::new(Mutex::new(Vec::new()));
            let push = |i: u32| {
                let log = log.clone();
                move |now: Nanos| log.lock().unwrap().push((i, now))
            };
            let order = || log.lock().unwrap().iter().map(|e| e.0).collect::<Vec<_>>();
            let now = s.now();
            s.in_lane(&lane, now, now, push(0));
            assert_eq!(order(), vec![0], "due and nothing held: at once");
            let d1 = s.now() + 100_000;
            s.in_lane(&lane, d1, s.now(), push(1));
            // The runtime thread is held up past d1, so the scheduler has
            // not run 1 yet when 2, due after it, comes late.
            std::thread::sleep(Duration::from_millis(1));
            let now = s.now();
            assert!(now > d1 + 50_000);
            s.in_lane(&lane, d1 + 50_000, now, push(2));
            s.in_lane(&other, d1 + 50_000, now, push(3));
            assert_eq!(order(), vec![0, 3], "2 waits behind 1; another lane does not");
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(order(), vec![0, 3, 1, 2]);
            let ran = log.lock().unwrap().clone();
            assert!(ran[2].1 >= d1, "held work never runs early");
            let now = s.now();
            s.in_lane(&lane, now, now, push(4));
            assert_eq!(order().last(), Some(&4), "the lane is free again");
        });
    }
}
