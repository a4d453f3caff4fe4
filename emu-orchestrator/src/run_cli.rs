//! `weft run`, with its arguments in two stages (STYLE §4): [`RunArgs`] as
//! clap parses them, a [`RunPlan`] once validated (units parsed, files
//! read, combinations of flags checked, nothing run yet); then the run in
//! the chosen clock, its files (summary.json, flows.csv, plots) and the
//! printed summary.

use anyhow::{bail, Context, Result};
use emu_node::metrics::openmetrics::{EngineMetrics, OpenMetricsRecorder};
use emu_node::time::{format_duration, Nanos};
use emu_orchestrator::config::topology::{Topology, DEFAULT};
use emu_orchestrator::config::units::{parse_duration, parse_rate, parse_size};
use emu_orchestrator::experiment::{self, RealTimeOptions, RunOptions, RunOutcome, Threads, WorkloadOptions};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Topology file or shipped name (default: the embedded leaf-spine-2x4).
    topology: Option<String>,
    /// Scheme for every switch (default: as in the topology).
    #[arg(long)]
    scheme: Option<String>,
    /// Host transport: udp, roce-lossless (Go-Back-N + PFC), roce-irn (selective repeat, BDP flow control, no PFC), tcp (NewReno; --set tcp.cc=dctcp).
    #[arg(long, default_value = "udp")]
    transport: String,
    /// Traffic pattern: permutation, incast:N, all-to-all, pair:A:B.
    #[arg(long, default_value = "permutation")]
    traffic: String,
    /// Bytes per flow (e.g. 1MB, 64KiB).
    #[arg(long, default_value = "1MB")]
    flow_size: String,
    /// Send each flow at a constant rate instead (e.g. 10Gbps); see --duration.
    #[arg(long)]
    rate: Option<String>,
    /// How long constant-rate flows send.
    #[arg(long, default_value = "1ms")]
    duration: String,
    /// UDP payload bytes per packet (default: MTU-sized).
    #[arg(long)]
    payload: Option<u16>,
    /// DSCP of the flows (priority = DSCP >> 3).
    #[arg(long, default_value_t = 0)]
    dscp: u8,
    /// Send packets that are not ECN-capable.
    #[arg(long)]
    no_ecn: bool,
    /// Enable PFC (lossless) on every switch.
    #[arg(long, conflicts_with = "no_pfc")]
    pfc: bool,
    /// Disable PFC on every switch.
    #[arg(long)]
    no_pfc: bool,
    /// Run seed (same seed, same results).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Clock: virtual (discrete events, deterministic) or real (actors on the
    /// fabric clock in this process; use a real-time-rate topology such as
    /// leaf-spine-2x4-rt-synthetic).
    #[arg(long, default_value = "virtual")]
    clock: String,
    /// Real time: capture a link into a pcap, LINK=FILE (first 1000 frames).
    #[arg(long, value_name = "LINK=FILE")]
    capture: Option<String>,
    /// Real time: the bounded-lag policy. A frame that reaches a switch or
    /// host more than this after it was due (the emulator could not keep
    /// up) is dropped and counted (`weft status` "overload drops",
    /// weft_actor_overload_drops_total), as a NIC drops at a full receive
    /// ring, instead of every later deadline running later still. 0 (the
    /// default): no bound, the fabric runs late as a whole.
    #[arg(long, value_name = "DURATION")]
    max_lag: Option<String>,
    /// Real time: µs before a deadline the scheduler stops sleeping and spins.
    #[arg(long, default_value_t = 20)]
    spin_us: u32,
    /// Real time: keep time parameters as given instead of scaling them to
    /// the run's rates (docs/SCHEMES.md#parameter-scaling; see --scale-params).
    #[arg(long, conflicts_with = "scale_params")]
    no_scale_params: bool,
    /// Scale time parameters to the run's rates (default in real time):
    /// the transports' (RTOs, NAK/CNP intervals, DCQCN timers) by
    /// 100 Gbit/s / host link rate, each scheme's (flowlet gaps, DRE
    /// periods, ConWeave thresholds, ...) by its reference rate (`weft
    /// schemes`) / the fabric's slowest switch-to-switch link. Applies to
    /// default and --set values alike; stderr lists the values used.
    #[arg(long)]
    scale_params: bool,
    /// Real time: run the switches in N emu-node processes (hosts stay in
    /// this process; every host link crosses processes over UDP). 0: all
    /// in this process.
    #[arg(long, default_value_t = 0)]
    nodes: u32,
    /// Scheme or transport parameter (repeatable): --set ecmp.use_ports=false,
    /// --set dcqcn.rp_timer=55us, --set roce.payload=4000, --set irn.bdp=50KB
    /// (see `weft schemes`).
    #[arg(long = "set", value_name = "SCHEME.PARAM=VALUE")]
    set: Vec<String>,
    /// Stop at this simulated time at the latest (flows still running then
    /// count as incomplete: the drain phase ends here). With --flows-file it
    /// counts from the trace origin (the first start, rounded down to a
    /// millisecond: 2 s for the ConWeave generator's files).
    #[arg(long, default_value = "1s")]
    until: String,
    /// Virtual time: stop when flows are unfinished but none has moved (no
    /// flow completed, no byte delivered or acknowledged) for this span of
    /// simulated time, print what holds the fabric (PFC pauses, the
    /// fullest queues, queues the programs paused), write the results
    /// marked incomplete and exit with status 3. `auto`: 10× the RoCE
    /// retransmission timeout (10ms at 100 Gbit/s), 120s for TCP (twice
    /// its RTO ceiling), 1s for UDP (bytes sent count as progress); `off`:
    /// never. E.g. --stall-timeout 2ms
    #[arg(long, default_value = "auto", value_name = "DURATION|auto|off")]
    stall_timeout: String,
    /// Virtual time: write pfc.csv, every PFC frame a switch port or host
    /// received (time, node, port, the peer that sent it, priority, pause or
    /// resume): the ConWeave authors' pfc.txt, with names.
    #[arg(long)]
    pfc_trace: bool,
    /// Do not count flows that start before this in the slowdown statistics
    /// (the ConWeave setup uses 5ms with long runs).
    #[arg(long, default_value = "0ns")]
    warmup: String,
    /// FCT slowdown of the statistics, tables and plots: ns3 (the ConWeave
    /// authors' simulator: sender FCT / (base RTT + wire bytes /
    /// bottleneck), at least 1; what the ConWeave paper reports) or weft
    /// (receiver FCT / one-way idle-path FCT). flows.csv has both.
    #[arg(long, default_value = "ns3")]
    slowdown: String,
    /// Poisson flows with sizes from a CDF: a shipped name (alistorage, fbhdp,
    /// solar, websearch, fbhdp-hpcc, googlerpc, int-table1) or a file.
    #[arg(long, conflicts_with_all = ["rate"])]
    workload: Option<String>,
    /// Average load of the fabric core for --workload (host links carry
    /// load / oversubscription), in (0, 1].
    #[arg(long, default_value_t = 0.5)]
    load: f64,
    /// Number of workload flows (default: all arrivals within --duration).
    #[arg(long)]
    flows: Option<usize>,
    /// Replay an explicit flow list in the ConWeave ns-3 generator's format
    /// (first line: count; then `src dst priority size start_seconds`, and optionally `mean_gap_seconds` (or `-`), which paces a UDP flow as a Poisson process, D-ITG style, and `src_port` (or `-`); then optional fields `dscp=N`, and for TCP `rate_bps=N` (iperf3 -b) and `window_bytes=N` (iperf3 -w)).
    #[arg(long, conflicts_with_all = ["workload", "rate"])]
    flows_file: Option<PathBuf>,
    /// Add an event to the topology's schedule (repeatable):
    /// AT,TARGET,ACTION with ACTION down, up, degrade=RATE, loss=P (1% or
    /// 0.01), flap=PERIOD:UNTIL (a link) or restart[=BOOT] (a switch
    /// reboots and loses its register state; its links are down for BOOT,
    /// default 0); TARGET a link (`edge7_3-agg7_3`) or a switch (all its
    /// links: a node failure). E.g. --event 5ms,spine1,restart=1ms
    #[arg(long, value_name = "AT,TARGET,ACTION")]
    event: Vec<String>,
    /// Model a routing protocol for ECMP and RPS: after each link of the
    /// schedule goes down or comes up, every switch whose equal-cost routes
    /// change installs the new ones DELAY × (1 + its switch hops from the
    /// link) later, as a failure learnt hop by hop. Off by default: a
    /// switch knows only its own ports, so a failure elsewhere black-holes
    /// what hashes onto it. E.g. --routing-update 1ms
    #[arg(long, value_name = "DELAY")]
    routing_update: Option<String>,
    /// Wire time of control frames, in bytes, instead of their length, for
    /// calibrating against a simulator whose control packets are smaller
    /// than real frames: a comma-separated list of KIND=BYTES, KIND one of
    /// ack (RoCEv2 ACK and NAK), cnp (RoCEv2 CNP), pfc (PAUSE and PFC).
    /// Every switch port and RoCE host charges them so; other frames take
    /// their length. E.g. --frame-bytes ack=49,cnp=0,pfc=32 (what
    /// scripts/compare-ns3 passes: the ConWeave authors' packet sizes)
    #[arg(long, value_name = "KIND=BYTES,...")]
    frame_bytes: Option<String>,
    /// Real time: serve Prometheus /metrics here while the run lasts
    /// (emu-node p on port + p with --nodes; port 0: any free port) and
    /// write OUT/prometheus/targets.json (file SD) and prometheus.yml.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Virtual time: write every metric of the /metrics catalogue as
    /// OpenMetrics with timestamps to FILE, sampled every
    /// --metrics-period of simulated time (for `promtool tsdb
    /// create-blocks-from openmetrics FILE DIR`).
    #[arg(long, value_name = "FILE")]
    metrics_out: Option<PathBuf>,
    /// Sampling period of --metrics-out, in simulated time.
    #[arg(long, default_value = "100us")]
    metrics_period: String,
    /// --metrics-out timestamps are START + simulated time × SCALE (the
    /// TSDB keeps milliseconds: the default 1000 maps 1 µs to 1 ms).
    #[arg(long, default_value_t = 1000)]
    metrics_time_scale: u64,
    /// --metrics-out timestamp of simulated time 0, Unix seconds (default:
    /// the run's start).
    #[arg(long, value_name = "SECONDS")]
    metrics_start: Option<u64>,
    /// Virtual time: run the fabric on N threads (partitions by leaf or
    /// pod, synchronised every smallest link delay between them; the
    /// results are the same for every N). `auto`: one thread per leaf or
    /// pod with hosts, at most the cores this process may use. Given twice,
    /// the last one counts.
    #[arg(long, default_value = "auto", value_name = "N|auto", overrides_with = "threads")]
    threads: Threads,
    /// Output directory for summary.json.
    #[arg(long, default_value = "weft-out")]
    out: PathBuf,
    /// Print the summary.json path only (no table).
    #[arg(long)]
    quiet: bool,
}

/// `--metrics-out`: the OpenMetrics file of a virtual-time run.
struct MetricsOut {
    path: PathBuf,
    period: Nanos,
    /// Unix seconds of simulated time 0.
    start_s: u64,
    time_scale: u64,
}

/// Which clock drives the run, with what only that clock takes.
enum Clock {
    Virtual { metrics_out: Option<MetricsOut> },
    Real(RealTimeOptions),
}

/// A validated `weft run`.
struct RunPlan {
    topo: Topology,
    opts: RunOptions,
    clock: Clock,
    out: PathBuf,
    quiet: bool,
}

impl RunPlan {
    /// Parses every value and checks every combination of `a`.
    fn from_args(a: RunArgs) -> Result<Self> {
        let mut topo = Topology::load(a.topology.as_deref().unwrap_or(DEFAULT))?;
        for e in &a.event {
            topo.add_event(e).map_err(anyhow::Error::msg)?;
        }
        let emu_orchestrator::config::params::Sets { scheme_params, transport_params } = crate::split_sets(&a.set)?;
        let opts = RunOptions {
            scheme: a.scheme.clone(),
            scheme_params,
            traffic: a.traffic.parse()?,
            flow_size: parse_size(&a.flow_size).context("--flow-size")?,
            rate: a.rate.as_deref().map(parse_rate).transpose().context("--rate")?,
            duration: parse_duration(&a.duration).context("--duration")?,
            payload: a.payload,
            dscp: a.dscp.min(63),
            ecn_capable: !a.no_ecn,
            pfc: if a.pfc {
                Some(true)
            } else if a.no_pfc {
                Some(false)
            } else {
                None
            },
            seed: a.seed,
            until: parse_duration(&a.until).context("--until")?,
            warmup: parse_duration(&a.warmup).context("--warmup")?,
            slowdown: a.slowdown.parse().map_err(anyhow::Error::msg).context("--slowdown")?,
            flow_list: match &a.flows_file {
                None => None,
                Some(p) => Some((
                    p.display().to_string(),
                    std::fs::read_to_string(p).with_context(|| format!("cannot read --flows-file {}", p.display()))?,
                )),
            },
            transport: a.transport.parse().map_err(anyhow::Error::msg)?,
            threads: a.threads,
            interrupt: None,
            stall_timeout: a.stall_timeout.parse().map_err(anyhow::Error::msg).context("--stall-timeout")?,
            routing_update: a.routing_update.as_deref().map(parse_duration).transpose().context("--routing-update")?,
            control_frame_bytes: a
                .frame_bytes
                .as_deref()
                .map(emu_orchestrator::config::params::parse_frame_bytes)
                .transpose()
                .map_err(anyhow::Error::msg)
                .context("--frame-bytes")?
                .unwrap_or_default(),
            pfc_trace: a.pfc_trace,
            transport_params,
            scale_time_params: a.scale_params || (a.clock == "real" && !a.no_scale_params),
            workload: match &a.workload {
                None => None,
                Some(w) => Some(WorkloadOptions {
                    cdf: crate::load_cdf(w)?,
                    load: a.load,
                    flows: a.flows,
                    duration: if a.flows.is_some() { Nanos::MAX } else { parse_duration(&a.duration).context("--duration")? },
                }),
            },
        };
        if opts.flow_size == 0 && opts.rate.is_none() {
            bail!("--flow-size must be larger than 0");
        }
        let clock = match a.clock.as_str() {
            "virtual" => Self::virtual_clock(&a)?,
            "real" => Self::real_clock(&a)?,
            other => bail!("--clock must be `virtual` or `real`, got `{other}`"),
        };
        Ok(RunPlan { topo, opts, clock, out: a.out, quiet: a.quiet })
    }

    fn virtual_clock(a: &RunArgs) -> Result<Clock> {
        if a.nodes > 0 {
            bail!("--nodes needs --clock real");
        }
        if a.max_lag.is_some() {
            bail!("--max-lag bounds how late a real-time run may fall behind; virtual time is never late");
        }
        if a.metrics.is_some() {
            bail!("--metrics serves a live run: use it with --clock real (a virtual-time run writes --metrics-out FILE instead)");
        }
        if a.capture.is_some() {
            bail!("--capture needs --clock real (or `weft capture` on a live fabric)");
        }
        let Some(path) = &a.metrics_out else { return Ok(Clock::Virtual { metrics_out: None }) };
        let period = parse_duration(&a.metrics_period).context("--metrics-period")?;
        if period == 0 {
            bail!("--metrics-period must be positive");
        }
        if a.metrics_time_scale == 0 {
            bail!("--metrics-time-scale must be at least 1");
        }
        if period as u128 * a.metrics_time_scale as u128 / 1_000_000 == 0 {
            bail!(
                "--metrics-period {} × --metrics-time-scale {} is under 1 ms: Prometheus keeps millisecond timestamps, so samples would collide; raise either",
                a.metrics_period,
                a.metrics_time_scale
            );
        }
        let start_s = match a.metrics_start {
            Some(s) => s,
            None => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        };
        Ok(Clock::Virtual { metrics_out: Some(MetricsOut { path: path.clone(), period, start_s, time_scale: a.metrics_time_scale }) })
    }

    fn real_clock(a: &RunArgs) -> Result<Clock> {
        if matches!(a.threads, Threads::Exactly(n) if n != 1) {
            bail!("--threads runs a virtual-time fabric on several threads; in real time every node is an actor already (use --nodes N for processes)");
        }
        if a.metrics_out.is_some() {
            bail!("--metrics-out samples a virtual-time run; a real-time run serves live metrics with --metrics ADDR");
        }
        if a.pfc_trace {
            bail!("--pfc-trace records a virtual-time run; in real time, `weft capture` a link and read its PFC frames");
        }
        let capture = match &a.capture {
            None => None,
            Some(c) => {
                let Some((link, file)) = c.split_once('=') else { bail!("--capture takes LINK=FILE, got `{c}`") };
                Some((link.to_string(), PathBuf::from(file), 1000))
            }
        };
        let max_lag = crate::parse_max_lag(a.max_lag.as_deref().unwrap_or(crate::DEFAULT_MAX_LAG))?;
        Ok(Clock::Real(RealTimeOptions {
            spin_us: a.spin_us,
            capture,
            nodes: a.nodes,
            metrics: a.metrics.map(|m| (m, a.out.clone())),
            max_lag,
        }))
    }

    /// Says on stderr what the run will do that the user may not expect.
    fn announce(&self) {
        if self.opts.scale_time_params {
            let f = &self.topo.fabric;
            if let Some(r) = f.hosts().first().and_then(|h| f.nodes[h.index()].ports.first()).map(|p| p.rate) {
                eprintln!(
                    "transport time parameters (RTOs, NAK/CNP intervals, DCQCN timers) scaled x{:.0} for {} host links ({} reference, docs/SCHEMES.md#parameter-scaling; --no-scale-params keeps them)",
                    emu_node::host::REFERENCE_RATE.bps() as f64 / r.bps().max(1) as f64,
                    r,
                    emu_node::host::REFERENCE_RATE
                );
            }
            for line in scheme_scaling_report(&experiment::configured_fabric(&self.topo, &self.opts)) {
                eprintln!("{line}");
            }
        }
        if let Clock::Real(RealTimeOptions { metrics: Some((m, out)), nodes, .. }) = &self.clock {
            eprintln!(
                "metrics: /metrics on {m}{} while the run lasts; file-SD {} and {} list the endpoints once they are bound",
                if *nodes > 0 { " (emu-node p on the port + p)" } else { "" },
                out.join("prometheus/targets.json").display(),
                out.join("prometheus/prometheus.yml").display()
            );
        }
    }
}

/// What `--scale-params` does to each scheme of `fabric`: one line per
/// distinct (scheme, scale, parameters), naming every time parameter's
/// value as given and as used.
pub(crate) fn scheme_scaling_report(fabric: &emu_node::fabric::FabricSpec) -> Vec<String> {
    let rate = experiment::fabric_rate(fabric);
    let mut seen = std::collections::BTreeSet::new();
    let mut lines = Vec::new();
    for s in fabric.nodes.iter().filter_map(|n| n.as_switch()) {
        let Some(sc) = experiment::scheme_time_scale(&s.scheme, rate) else { continue };
        let params = s.effective_params();
        let report = experiment::scaled_param_report(&s.scheme, &params, s.time_scale);
        if seen.insert((s.scheme.clone(), report.clone())) {
            lines.push(format!(
                "{} time parameters scaled x{} ({} reference / {} fabric links, docs/SCHEMES.md#parameter-scaling): {}",
                s.scheme,
                s.time_scale.factor(),
                sc.reference,
                sc.rate,
                report.join(", ")
            ));
        }
    }
    lines
}

/// `weft run`.
pub(crate) fn run(a: RunArgs) -> Result<()> {
    let plan = RunPlan::from_args(a)?;
    plan.announce();
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let started = std::time::Instant::now();
    let mut plan = plan;
    if matches!(plan.clock, Clock::Virtual { .. }) {
        plan.opts.interrupt = Some(crate::stop_on_ctrl_c()?);
    }
    let outcome = match &plan.clock {
        Clock::Virtual { metrics_out } => {
            let mut metrics = metrics_out.as_ref().map(|m| {
                let rec = OpenMetricsRecorder::new(m.start_s * 1000, m.time_scale).with_label("fabric", &plan.topo.fabric.name);
                EngineMetrics::new(rec, m.period)
            });
            let outcome = experiment::run_with_metrics(&plan.topo, &plan.opts, metrics.as_mut(), &mut |sim, events| {
                bar.set_message(format!(
                    "simulated {} | {} events | {:.1}s wall",
                    format_duration(sim),
                    events,
                    started.elapsed().as_secs_f64()
                ));
                bar.tick();
            })?;
            if let (Some(m), Some(out)) = (&metrics, metrics_out) {
                write_metrics(m, out, plan.quiet)?;
            }
            outcome
        }
        Clock::Real(rt) => experiment::run_real(&plan.topo, &plan.opts, rt, &mut |now, frames| {
            bar.set_message(format!("real time {} | {} frames received by actors", format_duration(now), frames));
            bar.tick();
        })?,
    };
    bar.finish_and_clear();
    let (summary, csv, plots) = write_outputs(&plan.out, &outcome)?;
    if let Some(report) = &outcome.stalled {
        eprintln!("error: the fabric stalled; stopped by the progress watchdog (--stall-timeout)");
        eprintln!("{report}");
        eprintln!(
            "wrote what the run has to {} (marked \"incomplete\"); the depth of the most loaded port over time is its \"queue_trace\" and {}",
            summary.display(),
            plan.out.join("plots").join("queue-depth.svg").display()
        );
        std::process::exit(crate::STALLED_EXIT);
    }
    if let Some(why) = &outcome.summary.incomplete {
        eprintln!("{why}; wrote what the run has to {} (marked \"incomplete\")", summary.display());
        std::process::exit(crate::INTERRUPTED_EXIT);
    }
    if plan.quiet {
        println!("{}", summary.display());
        return Ok(());
    }
    crate::print_summary(&outcome.summary, outcome.wall, outcome.threads);
    if outcome.truncated {
        let until = format_duration(plan.opts.until);
        println!("note: stopped at --until {until} with events still pending");
        if let Some(first) = outcome.summary.flows.iter().map(|f| f.start).min() {
            if outcome.summary.flows.iter().all(|f| f.first_sent.is_none()) {
                println!(
                    "note: no flow started: the first starts at {} of simulated time; raise --until (now {until})",
                    format_duration(first)
                );
            }
        }
    }
    println!("wrote {}, {} and {plots} plots in {}", summary.display(), csv.display(), plan.out.join("plots").display());
    if let Some(f) = &outcome.faithfulness {
        match &f.warning {
            Some(w) => println!("warning: {w}"),
            None => println!("timing: every node's p99 lateness stayed within the smallest link delay"),
        }
        println!("faithfulness report: {}", plan.out.join("faithfulness.json").display());
    }
    Ok(())
}

/// Writes the `--metrics-out` file.
fn write_metrics(m: &EngineMetrics, out: &MetricsOut, quiet: bool) -> Result<()> {
    let f = std::fs::File::create(&out.path).with_context(|| format!("cannot create {}", out.path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    m.recorder.write(&mut w).and_then(|_| std::io::Write::flush(&mut w)).with_context(|| format!("cannot write {}", out.path.display()))?;
    if !quiet {
        eprintln!(
            "metrics: {} samples every {} of simulated time in {} (timestamps from {} s, 1 simulated s = {} s)",
            m.recorder.samples(),
            format_duration(out.period),
            out.path.display(),
            m.recorder.timestamp_ms(0) / 1000,
            out.time_scale
        );
    }
    Ok(())
}

/// Writes summary.json, flows.csv and the plots into `out`; returns the
/// first two paths and the number of plots. A run given two threads or
/// more writes summary.json (the largest: about 650 bytes a flow) on a
/// second thread while this one writes the rest; a run of one thread
/// stays on one core (its wall time compares core for core).
fn write_outputs(out: &Path, outcome: &RunOutcome) -> Result<(PathBuf, PathBuf, usize)> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create output directory {}", out.display()))?;
    let path = out.join("summary.json");
    let write_summary = || -> Result<()> {
        create(&path).and_then(|f| outcome.summary.write_json(f)).with_context(|| format!("cannot write {}", path.display()))
    };
    let (summary, rest) = if outcome.threads >= 2 {
        std::thread::scope(|scope| {
            let summary = scope.spawn(write_summary);
            let rest = write_the_rest(out, outcome);
            (summary.join().unwrap_or_else(|_| Err(anyhow::anyhow!("writing {} panicked", path.display()))), rest)
        })
    } else {
        (write_summary(), write_the_rest(out, outcome))
    };
    summary?;
    let (csv, plots) = rest?;
    Ok((path, csv, plots))
}

/// A new file at `p`, buffered.
fn create(p: &Path) -> std::io::Result<std::io::BufWriter<std::fs::File>> {
    std::fs::File::create(p).map(std::io::BufWriter::new)
}

/// [`write_outputs`] but summary.json: flows.csv, what the run recorded
/// beside (faithfulness, PFC events) and the plots; returns the path of
/// flows.csv and the number of plots.
fn write_the_rest(out: &Path, outcome: &RunOutcome) -> Result<(PathBuf, usize)> {
    let csv = out.join("flows.csv");
    create(&csv).and_then(|f| outcome.summary.write_flows_csv(f)).with_context(|| format!("cannot write {}", csv.display()))?;
    if let Some(f) = &outcome.faithfulness {
        let p = out.join("faithfulness.json");
        std::fs::write(&p, serde_json::to_string_pretty(f)? + "\n").with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(events) = &outcome.pfc_events {
        let p = out.join("pfc.csv");
        std::fs::write(&p, emu_orchestrator::experiment::pfc_csv(events)).with_context(|| format!("cannot write {}", p.display()))?;
    }
    let s = &outcome.summary;
    let title = format!("{} {} on {}", s.scheme, s.traffic.split(" (").next().unwrap_or(""), s.topology);
    let plots = emu_orchestrator::observe::plots::write_plots(
        &out.join("plots"),
        "",
        &title,
        &[emu_orchestrator::observe::plots::Labelled { name: s.scheme.clone(), summary: s }],
    )?;
    Ok((csv, plots.len()))
}
