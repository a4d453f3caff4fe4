//! The threads that run the partitions of a parallel run, kept from one
//! [`super::Engine::run_until`] call to the next.
//!
//! A run advances in calls of a few simulated microseconds (the caller
//! samples queue depths every 10 µs: 1 420 calls in a 100 000-flow run),
//! and starting a thread per partition for every call (the spawn, and the
//! wake-up of an idle core) cost about 3 % of a 2-thread run's wall time
//! on a 2-core VM (BENCHMARKS.md). Each worker owns one
//! partition for the duration of a call: the engine moves the partition in
//! with the call's bounds, the worker runs [`super::run_part`] and moves it
//! back with its event count. Between calls a worker spins, then yields,
//! then sleeps on a condition variable, so a short pause between calls
//! costs no wake-up and a long one (the results phase) costs no core.
//!
//! Invariants: a worker holds a partition only between [`Worker::start`]
//! and [`Worker::finish`]; the engine calls `finish` on every started
//! worker before it returns, so a partition is never lost. A panic in a
//! worker poisons the round barrier (every partition then stops at its next
//! barrier) and is raised again in the caller by `finish`. Dropping the
//! workers stops and joins their threads.

use super::{run_part, Layout, Part, Rounds};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use weft_wire::time::Nanos;

/// Spins before a waiting thread starts yielding, then yields before a
/// worker sleeps (a few milliseconds with nothing else runnable).
const SPINS: u32 = 2_000;
const YIELDS: u32 = 20_000;

/// One call's work for a worker.
pub(super) struct Job {
    pub part: Part,
    pub layout: Arc<Layout>,
    pub shared: Arc<Rounds>,
    pub lookahead: Nanos,
    pub until: Nanos,
    pub budget: u64,
}

type Outcome = (Part, Result<u64, Box<dyn Any + Send>>);

#[derive(Default)]
struct SlotState {
    job: Option<Job>,
    outcome: Option<Outcome>,
    sleeping: bool,
    stop: bool,
}

/// What the engine and one worker thread share.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    wake: Condvar,
    /// A job waits in `state` (read without the lock while spinning).
    posted: AtomicBool,
    /// An outcome waits in `state`.
    done: AtomicBool,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        // The state stays consistent through a panic (plain moves), so a
        // poisoned lock is used as it is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The worker's side: the next job, or `None` when told to stop.
    fn next_job(&self) -> Option<Job> {
        let mut waited = 0u32;
        loop {
            if self.posted.load(Ordering::Acquire) {
                let mut s = self.lock();
                if let Some(job) = s.job.take() {
                    self.posted.store(false, Ordering::Relaxed);
                    return Some(job);
                }
            }
            if waited < SPINS {
                std::hint::spin_loop();
            } else if waited < SPINS + YIELDS {
                std::thread::yield_now();
            } else {
                let mut s = self.lock();
                while s.job.is_none() && !s.stop {
                    s.sleeping = true;
                    s = self.wake.wait(s).unwrap_or_else(|p| p.into_inner());
                    s.sleeping = false;
                }
                if s.stop {
                    return None;
                }
                waited = 0;
                continue;
            }
            waited += 1;
            if waited.is_multiple_of(1024) && self.lock().stop {
                return None;
            }
        }
    }
}

/// One worker thread.
struct Worker {
    slot: Arc<Slot>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    fn spawn(index: usize) -> std::io::Result<Self> {
        let slot = Arc::new(Slot::default());
        let mine = Arc::clone(&slot);
        let thread = std::thread::Builder::new().name(format!("weft-partition-{index}")).spawn(move || {
            while let Some(mut job) = mine.next_job() {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    run_part(&mut job.part, &job.layout, &job.shared, job.lookahead, job.until, job.budget)
                }));
                if r.is_err() {
                    job.shared.barrier.poison();
                }
                let mut s = mine.lock();
                s.outcome = Some((job.part, r));
                mine.done.store(true, Ordering::Release);
            }
        })?;
        Ok(Worker { slot, thread: Some(thread) })
    }

    /// Hands `job` to the worker.
    fn start(&self, job: Job) {
        let sleeping = {
            let mut s = self.slot.lock();
            s.job = Some(job);
            self.slot.posted.store(true, Ordering::Release);
            s.sleeping
        };
        if sleeping {
            self.slot.wake.notify_one();
        }
    }

    /// Waits for the job's partition and event count.
    fn finish(&self) -> Outcome {
        let mut waited = 0u32;
        loop {
            if self.slot.done.load(Ordering::Acquire) {
                let mut s = self.slot.lock();
                if let Some(o) = s.outcome.take() {
                    self.slot.done.store(false, Ordering::Relaxed);
                    return o;
                }
            }
            if waited < SPINS {
                waited += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.slot.lock().stop = true;
        self.slot.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The worker threads of an engine (one per partition but the first, which
/// the calling thread runs).
pub(super) struct Workers(Vec<Worker>);

impl Workers {
    pub fn spawn(n: usize) -> std::io::Result<Self> {
        (1..=n).map(Worker::spawn).collect::<std::io::Result<Vec<_>>>().map(Workers)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Starts `jobs` on the workers, runs `mine` on this thread, and
    /// returns every partition (this thread's first, then the workers' in
    /// order) with the sum of their events; a panic in any of them is
    /// raised here after all have stopped.
    pub fn run(&self, jobs: Vec<Job>, mine: impl FnOnce() -> u64, shared: &Rounds) -> (Vec<Part>, u64) {
        debug_assert!(jobs.len() <= self.0.len(), "one worker per job");
        let started = jobs.len();
        for (w, job) in self.0.iter().zip(jobs) {
            w.start(job);
        }
        let mine = catch_unwind(AssertUnwindSafe(mine));
        if mine.is_err() {
            shared.barrier.poison();
        }
        let mut parts = Vec::with_capacity(started);
        let mut events = 0;
        let mut worker_panic = None;
        for w in self.0.iter().take(started) {
            let (part, r) = w.finish();
            parts.push(part);
            match r {
                Ok(n) => events += n,
                Err(p) => {
                    worker_panic.get_or_insert(p);
                }
            }
        }
        match (mine, worker_panic) {
            (Err(p), _) | (Ok(_), Some(p)) => std::panic::resume_unwind(p),
            (Ok(n), None) => (parts, events + n),
        }
    }
}
