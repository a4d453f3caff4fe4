//! Comparison matrices (`weft compare`): every scheme x load (x transport)
//! run with one seed, on threads here or on other machines, written to
//! `compare.json` (schema `weft.compare/1`,
//! [`crate::experiment::report::CompareReport`]) and one directory per run.
//!
//! Invariants: the matrix is deterministic whatever the parallelism (each
//! run is independent and seeded by the base seed); compare.json is
//! written from and read back into the same typed structs.

use crate::config::topology::Topology;
use crate::experiment::report::{CompareCell, CompareReport, CompareRun, COMPARE_SCHEMA};
use crate::experiment::{interrupted, run, RunOptions};
use emu_node::schemes::Params;

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

/// A comparison matrix as `weft compare` runs it: every transport, then
/// within it every scheme x load, here on threads or on other machines.
pub struct Matrix {
    /// The topology.
    pub topo: Topology,
    /// What every run shares (workload, seed, warm-up, transport
    /// parameters, threads, Ctrl-C flag); its scheme, load and transport are
    /// each cell's.
    pub base: RunOptions,
    /// Schemes (rows).
    pub schemes: Vec<String>,
    /// Loads (columns).
    pub loads: Vec<f64>,
    /// Transports, by the name given and parsed, run one after the other.
    pub transports: Vec<(String, crate::experiment::Transport)>,
    /// Scheme parameters, each for its scheme's runs only.
    pub scheme_params: std::collections::BTreeMap<String, Params>,
    /// Runs at once (here), or ignored on machines (one per slot there).
    pub jobs: usize,
    /// Run the cells on these machines instead of here.
    pub machines: Vec<crate::config::machines::Machine>,
    /// This weft (the machines' default path to theirs).
    pub weft_exe: std::path::PathBuf,
    /// The arguments every remote cell gets besides its scheme, load and
    /// transport (files travel along).
    pub remote_args: Vec<crate::experiment::remote::RemoteArg>,
    /// The workload's name as given (for the report and plot titles).
    pub workload: String,
    /// Flows per run.
    pub flows: usize,
    /// The `--set` arguments as given (for the report).
    pub set: Vec<String>,
    /// Output directory.
    pub out: std::path::PathBuf,
}

/// The cells of one transport of a [`Matrix`], in scheme x load order.
pub struct TransportCells {
    /// The transport's name as given.
    pub transport: String,
    /// The cells.
    pub cells: Vec<CompareCell>,
    /// Wall time of this transport's cells.
    pub wall: std::time::Duration,
}

/// What a [`Matrix`] run left.
pub struct MatrixOutcome {
    /// compare.json's content.
    pub report: CompareReport,
    /// Where compare.json is.
    pub path: std::path::PathBuf,
    /// Cells the progress watchdog stopped: (cell, what held the fabric).
    pub stalled: Vec<(String, String)>,
    /// Ctrl-C stopped the matrix.
    pub interrupted: bool,
}

/// A matrix that could not run or be written.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A cell failed.
    #[error("{scheme} at load {load} ({transport}): {why}")]
    Cell {
        /// Its scheme.
        scheme: String,
        /// Its load.
        load: f64,
        /// Its transport.
        transport: String,
        /// Why (the run's error).
        why: String,
    },
    /// An output could not be written.
    #[error("cannot write {0}: {1}")]
    Write(String, std::io::Error),
    /// A plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] crate::observe::plots::PlotError),
    /// compare.json could not be serialised.
    #[error("compare.json: {0}")]
    Json(#[from] serde_json::Error),
}

impl Matrix {
    /// Runs the matrix: each transport's cells, then their results into
    /// `out` (a directory per run with summary.json and flows.csv, plots per
    /// load under `out/plots`), then `done` with them (the command prints
    /// its table); at the end compare.json. A failed cell stops the matrix;
    /// Ctrl-C (the base's interrupt flag) stops it after the transport under
    /// way, and compare.json says so.
    pub fn run(&self, done: &mut dyn FnMut(&TransportCells)) -> Result<MatrixOutcome, CompareError> {
        let started = std::time::Instant::now();
        let mut runs = Vec::new();
        let mut stalled = Vec::new();
        for (tname, transport) in &self.transports {
            if interrupted(&self.base.interrupt) {
                break;
            }
            let base = RunOptions { transport: *transport, ..self.base.clone() };
            let t0 = std::time::Instant::now();
            let cells = if self.machines.is_empty() {
                compare(&self.topo, &base, &self.schemes, &self.scheme_params, &self.loads, self.jobs)
            } else {
                let cells: Vec<crate::experiment::remote::RemoteCell> = self
                    .schemes
                    .iter()
                    .flat_map(|s| {
                        self.loads.iter().map(move |l| crate::experiment::remote::RemoteCell {
                            scheme: s.clone(),
                            load: *l,
                            transport: tname.clone(),
                        })
                    })
                    .collect();
                crate::experiment::remote::compare_on(
                    &self.machines,
                    &self.weft_exe,
                    &self.remote_args,
                    &cells,
                    self.base.interrupt.as_deref(),
                )
            };
            let t = TransportCells { transport: tname.clone(), cells, wall: t0.elapsed() };
            for c in &t.cells {
                // A cell cut short by Ctrl-C before it had results is left out.
                if c.outcome.is_err() && interrupted(&self.base.interrupt) {
                    continue;
                }
                let o = c.outcome.as_ref().map_err(|e| CompareError::Cell {
                    scheme: c.scheme.clone(),
                    load: c.load,
                    transport: tname.clone(),
                    why: e.to_string(),
                })?;
                let cell = format!("{} at load {} ({tname})", c.scheme, c.load);
                match (&o.stalled, &o.summary.incomplete) {
                    (Some(r), _) => stalled.push((cell, r.to_string())),
                    // A cell run on another machine: its summary says it stalled.
                    (None, Some(why)) if why.starts_with("stalled") => stalled.push((cell, why.clone())),
                    _ => {}
                }
                let dir = self.out.join(tname).join(format!("{}-load{}", c.scheme, c.load));
                let stream = |name: &str, put: &dyn Fn(std::io::BufWriter<std::fs::File>) -> std::io::Result<()>| {
                    std::fs::create_dir_all(&dir)
                        .and_then(|()| std::fs::File::create(dir.join(name)))
                        .and_then(|f| put(std::io::BufWriter::new(f)))
                        .map_err(|e| CompareError::Write(dir.join(name).display().to_string(), e))
                };
                stream("summary.json", &|f| o.summary.write_json(f))?;
                stream("flows.csv", &|f| o.summary.write_flows_csv(f))?;
                runs.push(CompareRun::of(tname, &c.scheme, c.load, o));
            }
            done(&t);
            for load in &self.loads {
                let labelled: Vec<crate::observe::plots::Labelled> = t
                    .cells
                    .iter()
                    .filter(|c| c.load == *load)
                    .filter_map(|c| {
                        c.outcome.as_ref().ok().map(|o| crate::observe::plots::Labelled { name: c.scheme.clone(), summary: &o.summary })
                    })
                    .collect();
                let title = format!("{tname}, {} load {load}", self.workload);
                crate::observe::plots::write_plots(&self.out.join("plots"), &format!("{tname}-load{load}-"), &title, &labelled)?;
            }
        }
        let stopped = interrupted(&self.base.interrupt);
        let n = self.schemes.len() * self.loads.len() * self.transports.len();
        let report = CompareReport {
            schema: COMPARE_SCHEMA.into(),
            incomplete: stopped
                .then(|| format!("interrupted (Ctrl-C): {} of {n} runs, some cut short (see each run's \"incomplete\")", runs.len())),
            topology: self.topo.fabric.name.clone(),
            workload: self.workload.clone(),
            flows: self.flows,
            seed: self.base.seed,
            warmup_ns: self.base.warmup,
            slowdown_definition: self.base.slowdown,
            set: self.set.clone(),
            wall_s: started.elapsed().as_secs_f64(),
            runs,
        };
        let path = self.out.join("compare.json");
        std::fs::create_dir_all(&self.out)
            .and_then(|()| std::fs::write(&path, report.to_json().map_err(std::io::Error::other)?))
            .map_err(|e| CompareError::Write(path.display().to_string(), e))?;
        Ok(MatrixOutcome { report, path, stalled, interrupted: stopped })
    }
}
