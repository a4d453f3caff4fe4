//! Comparison matrices (`weft compare`): every scheme x load (x transport)
//! run with one seed, on threads here or on other machines, written to
//! `compare.json` (schema `weft.compare/1`, [`CompareReport`]) and one
//! directory per run.
//!
//! Invariants: the matrix is deterministic whatever the parallelism (each
//! run is independent and seeded by the base seed); compare.json is
//! written from and read back into the same typed structs.

use crate::config::topology::Topology;
use crate::experiment::{interrupted, run, RunError, RunOptions, RunOutcome};
use emu_node::schemes::Params;

/// One cell of a comparison matrix.
#[derive(Debug)]
pub struct CompareCell {
    /// Scheme.
    pub scheme: String,
    /// Load.
    pub load: f64,
    /// The run, or why it failed.
    pub outcome: Result<RunOutcome, RunError>,
}

/// Runs `base` for every scheme x load (the workload's load is replaced;
/// each scheme gets its own parameters from `params`, none when absent), on up to `jobs` threads. Each run is independent and seeded by
/// `base.seed`, so the matrix is deterministic whatever `jobs` is.
pub fn compare(
    topo: &Topology,
    base: &RunOptions,
    schemes: &[String],
    params: &std::collections::BTreeMap<String, Params>,
    loads: &[f64],
    jobs: usize,
) -> Vec<CompareCell> {
    let cells: Vec<(String, f64)> = schemes.iter().flat_map(|s| loads.iter().map(move |l| (s.clone(), *l))).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<CompareCell>>> = std::sync::Mutex::new((0..cells.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, cells.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((scheme, load)) = cells.get(i) else { break };
                if interrupted(&base.interrupt) {
                    break;
                }
                let mut opts = base.clone();
                opts.scheme = Some(scheme.clone());
                opts.scheme_params = params.get(scheme).map(|p| [(scheme.clone(), p.clone())].into()).unwrap_or_default();
                if let Some(w) = &mut opts.workload {
                    w.load = *load;
                }
                let outcome = run(topo, &opts, &mut |_, _| {});
                if let Ok(mut r) = results.lock() {
                    r[i] = Some(CompareCell { scheme: scheme.clone(), load: *load, outcome });
                }
            });
        }
    });
    results.into_inner().unwrap_or_default().into_iter().flatten().collect()
}
