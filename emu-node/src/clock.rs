//! Real time for the real-time driver: the fabric clock and the one
//! deadline scheduler of a process.
//!
//! [`FabricClock`] reads `CLOCK_MONOTONIC`, which every process of one
//! machine shares, relative to a fabric epoch chosen by the orchestrator; so
//! a deadline written by one emu-node process (a frame's delivery time in
//! the link header) means the same instant in another. It is the only
//! place in emu-node that reads a clock; sans-IO state machines get `now`
//! from their driver.
//!
//! [`DeadlineScheduler`] is one thread per process that runs closures at
//! deadlines with µs precision without burning a core: tokio's timer wheel
//! has a 1 ms granularity, and a thread spinning per port would starve the
//! very traffic it paces on a 2-core machine. The thread sleeps (futex with
//! 1 ns timer slack) until `spin` before the earliest deadline, then spins
//! (`spin_loop`) for the rest. Deadlines already due run at once, in
//! deadline order, ties in submission order. Invariants: a closure never
//! runs before its deadline; submitting never blocks.

use crate::time::Nanos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

/// Nanoseconds of `CLOCK_MONOTONIC` (shared by all processes of a machine).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

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
    /// Fabric time now.
    pub fn now(&self) -> Nanos {
        monotonic_ns().saturating_sub(self.epoch)
    }
}

/// Work that runs at a deadline, on the scheduler thread (keep it short:
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

/// Counters of the scheduler thread.
#[derive(Debug, Default)]
pub struct SchedulerStats {
    /// Closures run.
    pub fired: AtomicU64,
    /// Nanoseconds spent spinning.
    pub spin_ns: AtomicU64,
    /// Times the thread went to sleep.
    pub sleeps: AtomicU64,
}

struct Shared {
    /// Deadline the thread sleeps toward (`u64::MAX` while awake/idle-forever).
    sleeping_until: AtomicU64,
    stop: AtomicBool,
    stats: SchedulerStats,
}

/// A handle to submit deadlines to the process's scheduler thread.
#[derive(Clone)]
pub struct DeadlineScheduler {
    tx: Sender<Entry>,
    thread: Thread,
    shared: Arc<Shared>,
    clock: FabricClock,
}

impl std::fmt::Debug for DeadlineScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlineScheduler").field("clock", &self.clock).finish()
    }
}

/// Owns the scheduler thread; dropping it stops the thread.
pub struct SchedulerThread {
    handle: Option<JoinHandle<()>>,
    scheduler: DeadlineScheduler,
}

impl SchedulerThread {
    /// Starts the thread. `spin` is how long before a deadline the thread
    /// stops sleeping and spins (0: never spin; precision is then the
    /// kernel's wake-up latency).
    pub fn start(clock: FabricClock, spin: Duration) -> std::io::Result<Self> {
        let (tx, rx) = channel::<Entry>();
        let shared = Arc::new(Shared { sleeping_until: AtomicU64::new(u64::MAX), stop: AtomicBool::new(false), stats: Default::default() });
        let sh = shared.clone();
        let spin_ns = spin.as_nanos() as u64;
        let handle = thread::Builder::new().name("weft-deadlines".into()).spawn(move || run(clock, rx, sh, spin_ns))?;
        let scheduler = DeadlineScheduler { tx, thread: handle.thread().clone(), shared, clock };
        Ok(SchedulerThread { handle: Some(handle), scheduler })
    }
    /// A handle for submitting deadlines.
    pub fn scheduler(&self) -> DeadlineScheduler {
        self.scheduler.clone()
    }
}

impl Drop for SchedulerThread {
    fn drop(&mut self) {
        self.scheduler.shared.stop.store(true, Ordering::SeqCst);
        self.scheduler.thread.unpark();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
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
    /// Thread counters.
    pub fn stats(&self) -> (u64, u64, u64) {
        let s = &self.shared.stats;
        (s.fired.load(Ordering::Relaxed), s.spin_ns.load(Ordering::Relaxed), s.sleeps.load(Ordering::Relaxed))
    }
    /// Runs `work(now)` on the scheduler thread at `at` (fabric time), or as
    /// soon as possible if `at` has passed.
    pub fn at(&self, at: Nanos, work: Deferred) {
        // seq is assigned by the thread (submission order = channel order).
        if self.tx.send(Entry { at, seq: 0, work }).is_ok() && at < self.shared.sleeping_until.load(Ordering::SeqCst) {
            self.thread.unpark();
        }
    }
}

fn set_timer_slack_1ns() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong);
    }
}

fn run(clock: FabricClock, rx: Receiver<Entry>, shared: Arc<Shared>, spin_ns: u64) {
    set_timer_slack_1ns();
    let mut heap: BinaryHeap<Reverse<Entry>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut spinning_since: Option<u64> = None;
    loop {
        while let Ok(mut e) = rx.try_recv() {
            seq += 1;
            e.seq = seq;
            heap.push(Reverse(e));
        }
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let now = clock.now();
        let next = heap.peek().map(|Reverse(e)| e.at);
        match next {
            Some(at) if at <= now => {
                if let Some(s) = spinning_since.take() {
                    shared.stats.spin_ns.fetch_add(now.saturating_sub(s), Ordering::Relaxed);
                }
                if let Some(Reverse(e)) = heap.pop() {
                    (e.work)(now);
                    shared.stats.fired.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some(at) if at - now <= spin_ns => {
                if spinning_since.is_none() {
                    spinning_since = Some(now);
                }
                std::hint::spin_loop();
            }
            _ => {
                if let Some(s) = spinning_since.take() {
                    shared.stats.spin_ns.fetch_add(now.saturating_sub(s), Ordering::Relaxed);
                }
                let wake = next.map(|at| at - spin_ns).unwrap_or(u64::MAX);
                shared.sleeping_until.store(next.unwrap_or(u64::MAX), Ordering::SeqCst);
                // Re-check the channel after publishing: a sender that saw the
                // old value did not unpark us.
                if let Ok(mut e) = rx.try_recv() {
                    shared.sleeping_until.store(0, Ordering::SeqCst);
                    seq += 1;
                    e.seq = seq;
                    heap.push(Reverse(e));
                    continue;
                }
                shared.stats.sleeps.fetch_add(1, Ordering::Relaxed);
                if wake == u64::MAX {
                    thread::park();
                } else {
                    thread::park_timeout(Duration::from_nanos(wake.saturating_sub(clock.now())));
                }
                shared.sleeping_until.store(0, Ordering::SeqCst);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn runs_in_deadline_order_never_early() {
        let t = SchedulerThread::start(FabricClock::starting_now(), Duration::from_micros(20)).unwrap();
        let s = t.scheduler();
        let log = Arc::new(Mutex::new(Vec::new()));
        let base = s.now() + 2_000_000;
        for (i, off) in [300_000u64, 100_000, 200_000, 100_000].into_iter().enumerate() {
            let log = log.clone();
            let at = base + off;
            s.at(at, Box::new(move |now| log.lock().unwrap().push((i, at, now))));
        }
        std::thread::sleep(Duration::from_millis(50));
        let log = log.lock().unwrap();
        let order: Vec<usize> = log.iter().map(|e| e.0).collect();
        assert_eq!(order, vec![1, 3, 2, 0]);
        for &(_, at, now) in log.iter() {
            assert!(now >= at, "ran {} ns early", at - now);
        }
    }

    #[test]
    fn past_deadlines_run_at_once() {
        let t = SchedulerThread::start(FabricClock::starting_now(), Duration::ZERO).unwrap();
        let s = t.scheduler();
        let (tx, rx) = std::sync::mpsc::channel();
        s.at(0, Box::new(move |now| tx.send(now).unwrap()));
        assert!(rx.recv_timeout(Duration::from_secs(1)).is_ok());
    }
}
