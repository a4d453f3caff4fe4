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

/// The schema name of `compare.json`.
pub const COMPARE_SCHEMA: &str = "weft.compare/1";

/// `compare.json`: the matrix's settings and one [`CompareRun`] per cell.
///
/// Written through a `serde_json::Value`, so every object's keys are in
/// alphabetical order whatever the order of the fields here.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CompareReport {
    /// [`COMPARE_SCHEMA`].
    pub schema: String,
    /// Why the matrix is not complete (Ctrl-C), if it is not.
    pub incomplete: Option<String>,
    /// The topology's name.
    pub topology: String,
    /// The workload (a shipped name or a file).
    pub workload: String,
    /// Flows per run.
    pub flows: usize,
    /// The seed of every run.
    pub seed: u64,
    /// The warm-up excluded from the statistics, ns.
    pub warmup_ns: emu_node::time::Nanos,
    /// How a flow's slowdown is computed.
    pub slowdown_definition: emu_node::fct::SlowdownDefinition,
    /// The `--set` arguments as given.
    pub set: Vec<String>,
    /// Wall time of the whole matrix, s.
    pub wall_s: f64,
    /// One per cell that ran.
    pub runs: Vec<CompareRun>,
}

/// One cell of `compare.json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CompareRun {
    /// Transport name as given to `--transport`.
    pub transport: String,
    /// Scheme.
    pub scheme: String,
    /// Offered load.
    pub load: f64,
    /// FCT slowdown statistics.
    pub slowdown: emu_node::results::SlowdownReport,
    /// Uplink imbalance, where sampled.
    pub uplink_imbalance: Option<emu_node::results::ImbalanceStats>,
    /// The scheme's counters summed over the switches.
    pub scheme_totals: emu_node::results::SchemeTotals,
    /// The fabric's counters summed.
    pub network: emu_node::results::NetworkTotals,
    /// Packets delivered out of order, summed over the flows.
    pub out_of_order: u64,
    /// Simulated time, ns.
    pub simulated_ns: emu_node::time::Nanos,
    /// Packet-hops.
    pub packet_hops: u64,
    /// Engine events.
    pub events: u64,
    /// Why the run is not complete, if it is not.
    pub incomplete: Option<String>,
    /// Wall time of the run, s.
    pub wall_s: f64,
}

impl CompareRun {
    /// The cell of `transport`, `scheme` at `load` from its outcome.
    pub fn of(transport: &str, scheme: &str, load: f64, o: &RunOutcome) -> Self {
        let s = &o.summary;
        CompareRun {
            transport: transport.to_string(),
            scheme: scheme.to_string(),
            load,
            slowdown: s.slowdown.clone(),
            uplink_imbalance: s.uplink_imbalance.clone(),
            scheme_totals: s.scheme_totals.clone(),
            network: s.network,
            out_of_order: s.flows.iter().map(|f| f.out_of_order).sum(),
            simulated_ns: s.simulated_ns,
            packet_hops: s.totals.packet_hops,
            events: s.totals.events,
            incomplete: s.incomplete.clone(),
            wall_s: o.wall.as_secs_f64(),
        }
    }

    /// The run's wall time; zero for a value that is not a duration (a
    /// report from another machine is not trusted to be well formed).
    pub fn wall(&self) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(self.wall_s).unwrap_or_default()
    }
}

impl CompareReport {
    /// The report as `compare.json` text (keys sorted, a final newline).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        Ok(serde_json::to_string_pretty(&serde_json::to_value(self)?)? + "\n")
    }

    /// Reads `compare.json` text; an error for another schema.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let r: CompareReport = serde_json::from_str(text).map_err(|e| format!("compare.json: {e}"))?;
        if r.schema != COMPARE_SCHEMA {
            return Err(format!("compare.json: schema `{}`, expected `{COMPARE_SCHEMA}`", r.schema));
        }
        Ok(r)
    }
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
                crate::experiment::remote::compare_on(&self.machines, &self.weft_exe, &self.remote_args, &cells)
            };
            let t = TransportCells { transport: tname.clone(), cells, wall: t0.elapsed() };
            for c in &t.cells {
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
                let write = |name: &str, text: String| {
                    std::fs::create_dir_all(&dir)
                        .and_then(|()| std::fs::write(dir.join(name), text))
                        .map_err(|e| CompareError::Write(dir.join(name).display().to_string(), e))
                };
                write("summary.json", o.summary.to_json() + "\n")?;
                write("flows.csv", o.summary.flows_csv())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// compare.json is read back into the very report that wrote it, and
    /// no text at all (truncated, wrong types, absurd wall times) panics.
    #[test]
    fn a_report_reads_back_typed_and_malformed_text_is_an_error_not_a_panic() {
        let topo = Topology::load("leaf-spine-2x4").unwrap();
        let o = run(&topo, &RunOptions { flow_size: 50_000, ..Default::default() }, &mut |_, _| {}).unwrap();
        let report = CompareReport {
            schema: COMPARE_SCHEMA.into(),
            incomplete: None,
            topology: "leaf-spine-2x4".into(),
            workload: "alistorage".into(),
            flows: 10,
            seed: 1,
            warmup_ns: 0,
            slowdown_definition: Default::default(),
            set: vec!["conga.flowlet_gap_us=100".into()],
            wall_s: 1.5,
            runs: vec![CompareRun::of("roce-irn", "ecmp", 0.5, &o)],
        };
        let text = report.to_json().unwrap();
        assert_eq!(CompareReport::from_json(&text).unwrap(), report);
        // Every prefix of it, and values of the wrong kind, are errors.
        for cut in (0..text.len()).step_by(97) {
            assert!(CompareReport::from_json(&text[..cut]).is_err());
        }
        assert!(CompareReport::from_json(&text.replace(COMPARE_SCHEMA, "weft.compare/9")).is_err());
        assert!(CompareReport::from_json(&text.replacen("\"wall_s\": 1.5", "\"wall_s\": \"soon\"", 1)).is_err());
        for wall in [f64::NAN, -1.0, f64::INFINITY, 1e300] {
            let r = CompareRun { wall_s: wall, ..report.runs[0].clone() };
            assert_eq!(r.wall(), std::time::Duration::ZERO, "{wall}");
        }
    }
}
