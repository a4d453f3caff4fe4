//! `weft compare`: its arguments, checked and turned into a
//! [`Matrix`], and the paper-style table it prints per transport.

use anyhow::{bail, Context, Result};
use emu_node::time::{format_duration, Nanos};
use emu_orchestrator::config::topology::Topology;
use emu_orchestrator::config::units::parse_duration;
use emu_orchestrator::experiment::compare::{Matrix, TransportCells};
use emu_orchestrator::experiment::{RunOptions, StallTimeout, Transport, WorkloadOptions};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct CompareArgs {
    /// Topology file or shipped name.
    pub topology: String,
    /// Comma-separated schemes (see `weft schemes`).
    #[arg(long, value_delimiter = ',', required = true)]
    pub schemes: Vec<String>,
    /// Comma-separated fabric-core loads in (0, 1].
    #[arg(long, value_delimiter = ',', required = true)]
    pub loads: Vec<f64>,
    /// Flow-size distribution: shipped name or CDF file.
    #[arg(long, default_value = "alistorage")]
    pub workload: String,
    /// Flows per run.
    #[arg(long, default_value_t = 2000)]
    pub flows: usize,
    /// Comma-separated host transports: udp, roce-lossless, roce-irn, tcp.
    #[arg(long, value_delimiter = ',', default_value = "roce-irn")]
    pub transport: Vec<String>,
    /// Do not count flows that start before this in the slowdown statistics
    /// (the ConWeave setup drops the first 5 ms).
    #[arg(long, default_value = "0ns")]
    pub warmup: String,
    /// Transport or scheme parameter (as for `weft run`; a scheme's
    /// parameters apply to that scheme's runs only).
    #[arg(long = "set", value_name = "NAME.PARAM=VALUE")]
    pub set: Vec<String>,
    /// Run seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Parallel runs (default: the number of cores / --threads). Runs and
    /// threads multiply: jobs × threads busy threads; keep it at most the
    /// number of cores (more only adds waiting at each round's barrier).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Threads per run (virtual time; results do not depend on it). Many
    /// runs are best spread with --jobs; --threads shortens each run, for
    /// matrices with fewer cells than cores or one long cell.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,
    /// FCT slowdown of the statistics, tables and plots: ns3 (the ConWeave
    /// authors' simulator: sender FCT / (base RTT + wire bytes /
    /// bottleneck), at least 1; what the ConWeave paper reports) or weft
    /// (receiver FCT / one-way idle-path FCT). flows.csv has both.
    #[arg(long, default_value = "ns3")]
    pub slowdown: String,
    /// Output directory (one sub-directory per run, and compare.json).
    #[arg(long, default_value = "weft-compare")]
    pub out: PathBuf,
    /// Run the matrix on the machines of FILE (as for `weft up
    /// --machines`; each machine runs one cell at a time with its own
    /// `weft`, which must be this version): the same results as here,
    /// gathered into the same compare.json.
    #[arg(long, value_name = "FILE")]
    pub machines: Option<PathBuf>,
    /// Stop a run whose flows stopped moving for this span of simulated
    /// time (as for `weft run`); the comparison writes every result and
    /// exits with status 3, printing what held each stalled fabric.
    #[arg(long, default_value = "auto", value_name = "DURATION|auto|off")]
    pub stall_timeout: String,
}

/// Runs `weft compare`.
pub fn compare(a: CompareArgs) -> Result<()> {
    let topo = Topology::load(&a.topology)?;
    let emu_orchestrator::config::params::Sets { scheme_params, transport_params } = crate::split_sets(&a.set)?;
    for s in &a.schemes {
        emu_node::schemes::build(s, scheme_params.get(s).unwrap_or(&Default::default()), Default::default())?;
    }
    if let Some((s, p)) = scheme_params.iter().find(|(s, _)| !a.schemes.contains(s)) {
        let p = p.keys().next().map_or("", String::as_str);
        bail!("--set {s}.{p}: {s} is not one of --schemes {} (add it, or drop the setting)", a.schemes.join(","));
    }
    if let Some(l) = a.loads.iter().find(|l| !(**l > 0.0 && **l <= 1.0)) {
        bail!("--loads: {l} is not in (0, 1]");
    }
    let warmup = parse_duration(&a.warmup).context("--warmup")?;
    let slowdown: emu_node::fct::SlowdownDefinition = a.slowdown.parse().map_err(anyhow::Error::msg).context("--slowdown")?;
    let stall_timeout: StallTimeout = a.stall_timeout.parse().map_err(anyhow::Error::msg).context("--stall-timeout")?;
    let transports: Vec<(String, Transport)> =
        a.transport.iter().map(|t| Ok((t.clone(), t.parse().map_err(anyhow::Error::msg)?))).collect::<Result<_>>()?;
    if a.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let machines = match &a.machines {
        Some(p) => emu_orchestrator::config::machines::load(p)?,
        None => Vec::new(),
    };
    let weft_exe = std::env::current_exe().context("this weft's path")?;
    for m in &machines {
        m.preflight_weft(&weft_exe)?;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = if machines.is_empty() { a.jobs.unwrap_or_else(|| (cores / a.threads).max(1)) } else { machines.len() };
    let n = a.schemes.len() * a.loads.len() * transports.len();
    let per_run = if a.threads > 1 { format!(", {} threads per run", a.threads) } else { String::new() };
    let on = if machines.is_empty() { String::new() } else { format!(" on {} machines", machines.len()) };
    eprintln!("running {n} experiments ({} flows each) {jobs} at a time{per_run}{on}...", a.flows);
    let base = RunOptions {
        interrupt: Some(crate::stop_on_ctrl_c()?),
        seed: a.seed,
        transport_params,
        scale_time_params: false,
        threads: emu_orchestrator::experiment::Threads::Exactly(a.threads),
        warmup,
        slowdown,
        workload: Some(WorkloadOptions { cdf: crate::load_cdf(&a.workload)?, load: 0.5, flows: Some(a.flows), duration: Nanos::MAX }),
        stall_timeout,
        ..RunOptions::default()
    };
    let matrix = Matrix {
        remote_args: remote_args(&a),
        topo,
        base,
        schemes: a.schemes.clone(),
        loads: a.loads.clone(),
        transports,
        scheme_params,
        jobs,
        machines,
        weft_exe,
        workload: a.workload.clone(),
        flows: a.flows,
        set: a.set.clone(),
        out: a.out.clone(),
    };
    let started = std::time::Instant::now();
    let header = |t: &str| {
        format!(
            "{} | {t} | {} | {} flows per run | warm-up {} | seed {} | FCT slowdown ({}) avg / p99",
            matrix.topo.fabric.name,
            a.workload,
            a.flows,
            format_duration(warmup),
            a.seed,
            slowdown.describe()
        )
    };
    let outcome = matrix.run(&mut |t: &TransportCells| print_table(&header(&t.transport), t))?;
    if outcome.interrupted {
        eprintln!(
            "interrupted (Ctrl-C): wrote the {} runs there are to {} (marked \"incomplete\")",
            outcome.report.runs.len(),
            outcome.path.display()
        );
        std::process::exit(crate::INTERRUPTED_EXIT);
    }
    println!(
        "({} runs in {:.1}s; results in {}, plots in {})",
        n,
        started.elapsed().as_secs_f64(),
        a.out.display(),
        a.out.join("plots").display()
    );
    if !outcome.stalled.is_empty() {
        for (cell, r) in &outcome.stalled {
            eprintln!("error: {cell} stalled; stopped by the progress watchdog (--stall-timeout)\n{r}");
        }
        std::process::exit(crate::STALLED_EXIT);
    }
    Ok(())
}

/// What every remote run gets besides its cell (files go along).
fn remote_args(a: &CompareArgs) -> Vec<emu_orchestrator::experiment::remote::RemoteArg> {
    use emu_orchestrator::experiment::remote::RemoteArg::{File, Lit};
    let file_or_name = |s: &str| if std::path::Path::new(s).is_file() { File(PathBuf::from(s)) } else { Lit(s.to_string()) };
    let mut v = vec![file_or_name(&a.topology), Lit("--workload".into()), file_or_name(&a.workload)];
    for (k, val) in [
        ("--flows", a.flows.to_string()),
        ("--warmup", a.warmup.clone()),
        ("--seed", a.seed.to_string()),
        ("--threads", a.threads.to_string()),
        ("--slowdown", a.slowdown.clone()),
        ("--stall-timeout", a.stall_timeout.clone()),
    ] {
        v.push(Lit(k.into()));
        v.push(Lit(val));
    }
    for s in &a.set {
        v.push(Lit("--set".into()));
        v.push(Lit(s.clone()));
    }
    v
}

/// One transport's table: FCT slowdown avg / p99 per cell, overall, below
/// and above one BDP, and by flow size.
fn print_table(header: &str, t: &TransportCells) {
    println!("{header}");
    println!(
        "{:<10} {:>5} | {:>15} | {:>15} | {:>15} | by size: <=10KB, 10-100KB, 100KB-1MB, >1MB",
        "scheme", "load", "overall", "<1 BDP", ">=1 BDP"
    );
    let cell = |x: &emu_node::results::SlowdownStats| if x.flows == 0 { "-".to_string() } else { format!("{:.2} / {:.2}", x.avg, x.p99) };
    for c in &t.cells {
        let Ok(o) = &c.outcome else { continue };
        let s = &o.summary.slowdown;
        let sizes: Vec<String> = s.by_size.iter().map(|(_, x)| cell(x)).collect();
        println!(
            "{:<10} {:>5} | {:>15} | {:>15} | {:>15} | {}",
            c.scheme,
            c.load,
            cell(&s.overall),
            cell(&s.below_bdp),
            cell(&s.above_bdp),
            sizes.join(", ")
        );
        if let Some(why) = &o.summary.incomplete {
            println!("{:<10} {:>5} | {why}", "", "");
        }
    }
    println!("({} runs in {:.1}s)", t.cells.len(), t.wall.as_secs_f64());
}
