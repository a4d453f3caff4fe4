//! Argument handling and printing of the live-fabric commands (`weft up`,
//! `status`, `link`, `down`, `capture`); the work is in
//! `emu_orchestrator::live`.

use anyhow::{bail, Context, Result};
use emu_node::link::{InterProcess, LinkChange};
use emu_orchestrator::config::topology::Topology;
use emu_orchestrator::config::units::{parse_duration, parse_rate};
use emu_orchestrator::live::{self, Request, UpOptions};
use std::path::PathBuf;

/// `weft up --nodes`: a number of processes, or `auto`.
#[derive(Debug, Clone, Copy)]
pub enum NodeCount {
    /// Chosen from the cores and the fabric
    /// ([`emu_orchestrator::placement::auto_node_count`]).
    Auto,
    /// This many.
    Fixed(u32),
}

fn parse_node_count(s: &str) -> Result<NodeCount, String> {
    match s {
        "auto" => Ok(NodeCount::Auto),
        n => n.parse().map(NodeCount::Fixed).map_err(|_| format!("expected a number of processes or `auto`, got `{n}`")),
    }
}

#[derive(clap::Args)]
pub struct UpArgs {
    /// Topology file or shipped name (e.g. leaf-spine-2x4-rt).
    pub topology: String,
    /// Number of local emu-node processes, or `auto`: one fewer than the
    /// machine's cores (that one is for the real hosts' kernel stacks), at
    /// most one per switch, at least 1.
    #[arg(long, default_value = "1", value_parser = parse_node_count)]
    pub nodes: NodeCount,
    /// Spread the fabric over the machines of FILE (TOML, `[[machine]]`
    /// tables with name, ssh destination, optional user/port/identity/
    /// known_hosts, the address links bind on): one emu-node per machine,
    /// started over ssh after checking each machine runs this version;
    /// leaves stay whole and the links between machines are listed.
    #[arg(long, value_name = "FILE", conflicts_with = "nodes")]
    pub machines: Option<PathBuf>,
    /// With --machines: copy this weft's emu-node to every machine first
    /// (to its emu_node path, or /tmp/weft-emu-node-VERSION).
    #[arg(long, requires = "machines")]
    pub copy_emu_node: bool,
    /// Start no emu-node: wait for N of them to connect by themselves (the
    /// pods of `weft k8s render`), with the identity and token of
    /// --identity-dir, on --control-listen.
    #[arg(long, value_name = "N", conflicts_with_all = ["nodes", "machines"], requires = "identity_dir")]
    pub external_nodes: Option<u32>,
    /// With --external-nodes: where the control endpoint listens.
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:7400")]
    pub control_listen: std::net::SocketAddr,
    /// With --external-nodes: a directory with cert.der, key.der and token
    /// (the fabric's Kubernetes Secret, mounted).
    #[arg(long, value_name = "DIR")]
    pub identity_dir: Option<PathBuf>,
    /// With --external-nodes: how long to wait for every emu-node.
    #[arg(long, value_name = "DURATION", default_value = "600s")]
    pub wait_nodes: String,
    /// A TOML file whose [placement] table (`node0 = ["leaf0", "spine0"]`,
    /// one list of switches per process; hosts run with their ToR) replaces
    /// the automatic placement. A topology's own [placement] table is used
    /// without this option.
    #[arg(long, value_name = "FILE")]
    pub placement: Option<PathBuf>,
    /// Transport between emu-node processes: quic (TLS 1.3, fabric
    /// certificate) or udp (plain datagrams). Either way each datagram is
    /// sealed with the fabric's link key, or carries its loopback token
    /// between processes of one machine.
    #[arg(long, default_value = "quic")]
    pub links: String,
    /// Scheme for every switch (default: as in the topology).
    #[arg(long)]
    pub scheme: Option<String>,
    /// Scheme parameter (repeatable), as in `weft run`: --set
    /// int-nexthop.flowlet_timeout_us=50000. Time parameters are scaled to
    /// the fabric's rate unless --no-scale-params (stderr lists the values
    /// used).
    #[arg(long = "set", value_name = "SCHEME.PARAM=VALUE")]
    pub set: Vec<String>,
    /// Keep the schemes' time parameters as given instead of scaling them
    /// by their reference rate / the fabric's slowest switch-to-switch link
    /// (docs/SCHEMES.md#parameter-scaling).
    #[arg(long)]
    pub no_scale_params: bool,
    /// The bounded-lag policy. A frame that reaches a switch or
    /// host more than this after it was due (the emulator could not keep
    /// up) is dropped and counted (`weft status` "overload drops",
    /// weft_actor_overload_drops_total), as a NIC drops at a full receive
    /// ring, instead of every later deadline running later still. 0 (the
    /// default): no bound, the fabric runs late as a whole.
    #[arg(long, value_name = "DURATION", default_value = crate::DEFAULT_MAX_LAG)]
    pub max_lag: String,
    /// TAP hosts without segmentation offload: their kernels then hand
    /// over MTU frames one by one (by default a host's kernel sends TCP
    /// super-frames of up to 64 KB that its NIC model cuts into MTU frames,
    /// and in-order segments toward it are coalesced, as a NIC's TSO and
    /// GRO do; the fabric sees MTU frames either way).
    #[arg(long)]
    pub no_tap_offload: bool,
    /// Microseconds before a deadline the timing thread stops sleeping and spins.
    #[arg(long, default_value_t = 20)]
    pub spin_us: u32,
    /// Prefix of the network namespace names (default: the host names themselves).
    #[arg(long, default_value = "")]
    pub netns_prefix: String,
    /// Return once the fabric runs, leaving the orchestrator in the background.
    #[arg(long)]
    pub detach: bool,
    /// Prometheus /metrics of emu-node 0; emu-node p listens on port + p
    /// (port 0: each picks a free port; `weft status` lists them). On a
    /// non-loopback address, HTTPS with the fabric's certificate, answering
    /// only bearers of the fabric token (docs/METRICS.md).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub metrics: std::net::SocketAddr,
    /// Every emu-node's /metrics over HTTPS with the fabric token, also on
    /// loopback (what the Kubernetes manifests use).
    #[arg(long)]
    pub metrics_tls: bool,
    /// Memory of each soft-RoCE VM host (`kind = "rxe"`), MiB.
    #[arg(long, value_name = "MIB", default_value_t = emu_node::vm::DEFAULT_MEMORY_MIB)]
    pub vm_memory: u32,
    /// How VM hosts run: kvm, tcg (software emulation) or auto (KVM if it
    /// boots the guest on this machine, else TCG; `weft status` says which).
    #[arg(long, value_name = "ACCEL", default_value = "auto", value_parser = ["auto", "kvm", "tcg"])]
    pub vm_accel: String,
    /// The VM image's directory (built there from Debian packages on first
    /// use; default ~/.cache/weft/vm-image).
    #[arg(long, value_name = "DIR")]
    pub vm_image: Option<std::path::PathBuf>,
    /// Start a Prometheus server (the Debian `prometheus` package) scraping
    /// every emu-node through the file-SD file weft writes; `weft down`
    /// stops it.
    #[arg(long)]
    pub prometheus: bool,
    /// Where --prometheus listens (port 0: a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9090")]
    pub prometheus_listen: std::net::SocketAddr,
    /// The Prometheus binary (name in PATH or path).
    #[arg(long, default_value = "prometheus")]
    pub prometheus_bin: String,
    /// Scrape interval written to prometheus.yml (e.g. 1s).
    #[arg(long, default_value = "1s")]
    pub scrape_interval: String,
    /// Run seed: every switch's hash seed and RNG derive from it, as in
    /// `weft run --seed` (same seed, same ECMP paths).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Live traffic: the synthetic hosts send Poisson flows with sizes from
    /// this CDF, exactly as `weft run --workload` would (a shipped name:
    /// alistorage, fbhdp, solar, websearch, fbhdp-hpcc, googlerpc,
    /// int-table1; or a file), so the dashboards show FCTs, queues, drops,
    /// ECN, PFC and scheme activity. For synthetic hosts only: TAP hosts run
    /// their own programs.
    #[arg(long)]
    pub workload: Option<String>,
    /// --workload: average load of the fabric core, in (0, 1] (host links
    /// carry load / oversubscription). Real time is bounded by the CPU: a
    /// 2-core machine keeps up with about 1-2 Gbit/s of fabric traffic in
    /// all (`weft status` shows how late the actors run).
    #[arg(long, default_value_t = 0.1, requires = "workload")]
    pub load: f64,
    /// --workload: the hosts' transport: roce-lossless (Go-Back-N, PFC on
    /// every switch), roce-irn, tcp or udp. Transport parameters as in
    /// `weft run`: --set dcqcn.rp_timer=..., --set tcp.cc=dctcp.
    #[arg(long, default_value = "roce-lossless", requires = "workload")]
    pub transport: String,
    /// --workload: this many flows (instead of --duration).
    #[arg(long, requires = "workload", conflicts_with = "duration")]
    pub flows: Option<usize>,
    /// --workload: flows start during this long from the fabric's start
    /// (the fabric stays up after the last one ends, until `weft down`).
    #[arg(long, default_value = "60s", requires = "workload")]
    pub duration: String,
}

#[derive(clap::Args)]
pub struct LinkArgs {
    /// Link name, as in `weft status` (e.g. leaf0-spine1; either order).
    pub link: String,
    /// down | up | rate <RATE> | rate <P>% (of the topology rate) | delay <DELAY> | loss <P>% (random loss per direction; 0 ends it) | flap <PERIOD> (down PERIOD, up PERIOD, ... until the next change; `flap off` ends it)
    #[arg(num_args = 1..=2, required = true)]
    pub change: Vec<String>,
}

#[derive(clap::Args)]
pub struct NodeArgs {
    /// Switch name, as in the topology (e.g. spine0).
    pub switch: String,
    /// down | up | restart [BOOT] (the reboot loses the switch's register state; its links stay down for BOOT, default 0)
    #[arg(num_args = 1..=2, required = true)]
    pub change: Vec<String>,
}

#[derive(clap::Args)]
pub struct CaptureArgs {
    /// Link name (either order of the ends).
    pub link: String,
    /// Output pcap file.
    #[arg(long)]
    pub pcap: PathBuf,
    /// Frames to capture (both directions).
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Wait until the capture is complete or this long (e.g. 5s). A side
    /// captured on another machine is fetched once complete, or after this
    /// long (at least 10 s).
    #[arg(long, default_value = "0s")]
    pub wait: String,
}

pub fn up(a: UpArgs) -> Result<()> {
    let mut topo = Topology::load(&a.topology)?;
    if let Some(p) = &a.placement {
        let text = std::fs::read_to_string(p).with_context(|| format!("cannot read placement file {}", p.display()))?;
        topo.apply_placement(&p.display().to_string(), &text)?;
    }
    if let Some(s) = &a.scheme {
        // An unknown --scheme says so without naming a switch.
        emu_node::schemes::build(s, &Default::default(), Default::default())?;
    }
    let emu_orchestrator::config::params::Sets { scheme_params, transport_params } = crate::split_sets(&a.set)?;
    if a.workload.is_none() {
        if let Some(k) = transport_params.keys().next() {
            bail!("--set {k}: transport parameters are for --workload (without it the hosts send nothing of weft's; a switch's traffic manager follows the topology)");
        }
    }
    let rate = emu_orchestrator::experiment::fabric_rate(&topo.fabric);
    if let Some(s) = &a.scheme {
        for n in &mut topo.fabric.nodes {
            if let emu_node::fabric::NodeKind::Switch(sw) = &mut n.kind {
                sw.scheme = s.clone();
            }
        }
    }
    emu_orchestrator::config::params::check_schemes_run(&topo.fabric, &scheme_params)?;
    emu_orchestrator::config::params::apply_scheme_params(&mut topo.fabric, &scheme_params);
    for n in &mut topo.fabric.nodes {
        if let emu_node::fabric::NodeKind::Switch(sw) = &mut n.kind {
            emu_node::schemes::build(&sw.scheme, &sw.effective_params(), Default::default())
                .with_context(|| format!("switch {}", n.name))?;
            if !a.no_scale_params {
                if let Some(sc) = emu_orchestrator::experiment::scheme_time_scale(&sw.scheme, rate) {
                    sw.time_scale = sc.scale;
                }
            }
        }
    }
    let workload = match &a.workload {
        None => None,
        Some(w) => Some(live_workload(&mut topo, &a, w, scheme_params.clone(), transport_params)?),
    };
    if !a.detach {
        // (A detached start prints its background run's log, which has them.)
        for line in crate::run_cli::scheme_scaling_report(&topo.fabric) {
            eprintln!("{line}");
        }
    }
    let inter: InterProcess = a.links.parse().map_err(anyhow::Error::msg)?;
    let external = match (a.external_nodes, &a.identity_dir) {
        (Some(_), Some(dir)) => Some(emu_orchestrator::cluster::launch::ExternalNodes {
            listen: a.control_listen,
            identity_dir: dir.clone(),
            wait: std::time::Duration::from_nanos(parse_duration(&a.wait_nodes).context("--wait-nodes")?),
        }),
        _ => None,
    };
    let opts = UpOptions {
        external,
        nodes: match (a.external_nodes, a.nodes) {
            (Some(n), _) | (None, NodeCount::Fixed(n)) => n.max(1),
            (None, NodeCount::Auto) => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                let n = emu_orchestrator::placement::auto_node_count(&topo.fabric, cores);
                if !a.detach {
                    // (A detached start prints its background run's log.)
                    eprintln!("--nodes auto: {n} emu-node process(es) for {cores} cores");
                }
                n
            }
        },
        inter,
        spin_us: a.spin_us,
        netns_prefix: a.netns_prefix.clone(),
        explicit_placement: topo.placed,
        state_dir: emu_orchestrator::cluster::state::default_state_dir(),
        metrics: a.metrics,
        metrics_tls: a.metrics_tls,
        seed: a.seed,
        workload,
        max_lag: crate::parse_max_lag(&a.max_lag)?,
        tap_offload: !a.no_tap_offload,
        vm_memory_mib: a.vm_memory,
        vm_accel: match a.vm_accel.as_str() {
            "kvm" => emu_node::vm::AccelChoice::Kvm,
            "tcg" => emu_node::vm::AccelChoice::Tcg,
            _ => emu_node::vm::AccelChoice::Auto,
        },
        vm_image: a.vm_image.clone().unwrap_or_else(emu_orchestrator::deploy::vm_image::default_dir),
        copy_emu_node: a.copy_emu_node,
        machines: match &a.machines {
            Some(p) => emu_orchestrator::config::machines::load(p)?,
            None => Vec::new(),
        },
        prometheus: if a.prometheus {
            let every = parse_duration(&a.scrape_interval)?;
            if every < 100_000_000 {
                bail!("--scrape-interval must be at least 100ms, got {}", a.scrape_interval);
            }
            Some(live::PrometheusOptions {
                bin: a.prometheus_bin.clone(),
                listen: a.prometheus_listen,
                scrape_interval: std::time::Duration::from_nanos(every),
            })
        } else {
            None
        },
    };
    if let Some(p) = &opts.prometheus {
        // Before anything starts: a missing binary is one clear line.
        emu_orchestrator::observe::prometheus::find_binary(&p.bin)?;
    }
    let vms = topo.fabric.nodes.iter().filter(|n| n.as_host().is_some_and(|h| h.kind == emu_node::fabric::HostKind::Rxe)).count();
    if a.detach {
        if vms > 0 {
            // Checks and the first-time image build in the foreground.
            live::preflight(&topo, &opts)?;
            emu_orchestrator::deploy::vm_image::ensure(&opts.vm_image, &mut |line| eprintln!("{line}"))?;
        }
        return detach(&opts, std::time::Duration::from_secs(60 + 40 * vms as u64));
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let name = topo.fabric.name.clone();
    rt.block_on(live::up(&topo, &opts, |hosts| {
        if opts.machines.is_empty() {
            println!("fabric {name} is up on {} emu-node process(es), {} links between processes", opts.nodes, inter);
        } else {
            let names: Vec<&str> = opts.machines.iter().map(|m| m.name.as_str()).collect();
            println!(
                "fabric {name} is up on {} machines ({}), {} emu-nodes, {} links between them",
                names.len(),
                names.join(", "),
                opts.machines.iter().map(|m| m.capacity).sum::<u32>(),
                inter
            );
        }
        if let Some((_, t)) = &opts.workload {
            println!("traffic: {t}");
        }
        println!("hosts:");
        for h in hosts {
            println!("  {h}");
        }
        if let Some(st) = emu_orchestrator::cluster::state::read_state(&opts.state_dir) {
            for (p, url) in &st.metrics {
                println!("metrics: {url} (emu-node {p})");
            }
            if let Some((sd, yml)) = &st.prometheus_config {
                println!("prometheus file-SD: {sd}\nprometheus config:  {yml}");
            }
            if let Some((pid, url)) = &st.prometheus {
                println!("prometheus: {url} (pid {pid}); dashboards: see dashboards/README.md");
            }
        }
        println!("`weft status` shows nodes, links and lag; `weft down` (or Ctrl-C) stops it.");
    }))?;
    println!("fabric {name} is down");
    Ok(())
}

/// The synthetic hosts' traffic for `weft up --workload`: prepared exactly
/// as `weft run` prepares it (the same flows for the same options and
/// seed), and the fabric configured for its transport (PFC for lossless
/// RoCE, as `weft run` does).
fn live_workload(
    topo: &mut Topology,
    a: &UpArgs,
    cdf: &str,
    scheme_params: std::collections::BTreeMap<String, emu_node::schemes::Params>,
    transport_params: std::collections::BTreeMap<String, String>,
) -> Result<(emu_node::node::HostWorkload, String)> {
    use emu_orchestrator::experiment::{self, RunOptions, WorkloadOptions};
    if let Some(n) = topo.fabric.nodes.iter().find(|n| n.as_host().is_some_and(|h| h.kind != emu_node::fabric::HostKind::Synthetic)) {
        bail!(
            "--workload drives synthetic hosts, and host `{}` of {} is a real host (kind \"tap\"/\"rxe\"): it runs its own programs (iperf3, weft-flowgen); use a topology with synthetic hosts such as leaf-spine-2x4-rt-synthetic",
            n.name,
            topo.fabric.name
        );
    }
    let opts = RunOptions {
        scheme: a.scheme.clone(),
        scheme_params,
        transport: a.transport.parse().map_err(anyhow::Error::msg).context("--transport")?,
        transport_params,
        seed: a.seed,
        scale_time_params: !a.no_scale_params,
        workload: Some(WorkloadOptions {
            cdf: crate::load_cdf(cdf)?,
            load: a.load,
            flows: a.flows,
            duration: if a.flows.is_some() { emu_node::time::Nanos::MAX } else { parse_duration(&a.duration).context("--duration")? },
        }),
        ..RunOptions::default()
    };
    let prepared = experiment::prepare(topo, &opts)?;
    if prepared.flows.is_empty() {
        bail!("--workload {cdf} at load {} gives no flow within --duration {}: raise either", a.load, a.duration);
    }
    let words = match a.flows {
        Some(_) => format!("{}, {}", prepared.traffic, a.transport),
        None => format!("{}, {}, arrivals during {}", prepared.traffic, a.transport, a.duration),
    };
    topo.fabric = prepared.fabric;
    Ok((emu_node::node::HostWorkload { transport: prepared.node_config.transport, flows: prepared.flows }, words))
}

fn detach(opts: &UpOptions, wait: std::time::Duration) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--detach").collect();
    std::fs::create_dir_all(&opts.state_dir).with_context(|| format!("state directory {}", opts.state_dir.display()))?;
    let log_path = opts.state_dir.join("weft-up.log");
    let log = std::fs::File::create(&log_path)?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the background orchestrator")?;
    let until = std::time::Instant::now() + wait;
    loop {
        if let Some(st) = emu_orchestrator::cluster::state::read_state(&opts.state_dir) {
            if st.phase == "running" && st.orchestrator == child.id() {
                print!("{}", std::fs::read_to_string(&log_path).unwrap_or_default());
                println!("(orchestrator pid {} in the background; log {})", child.id(), log_path.display());
                return Ok(());
            }
        }
        if let Some(status) = child.try_wait()? {
            bail!("the fabric did not come up ({status}):\n{}", std::fs::read_to_string(&log_path).unwrap_or_default().trim());
        }
        if std::time::Instant::now() > until {
            bail!("the fabric did not come up within {} s; see {}", wait.as_secs(), log_path.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

pub fn status(json: bool) -> Result<()> {
    let dir = emu_orchestrator::cluster::state::default_state_dir();
    let r = live::request(&dir, &Request::Status)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let st = emu_orchestrator::cluster::state::read_state(&dir);
    println!(
        "fabric {} (orchestrator pid {})",
        st.as_ref().map_or("?", |s| s.topology.as_str()),
        st.as_ref().map_or(0, |s| s.orchestrator)
    );
    if let Some(t) = st.as_ref().and_then(|s| s.traffic.as_ref()) {
        println!("traffic: {t}");
    }
    println!(
        "{:<8} {:>7} {:<8} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "process", "pid", "state", "actors", "lag p50", "lag p99", "lag max", "tx lost", "tx reord"
    );
    let machine_of = |p: u32| {
        let s = st.as_ref()?;
        let clock = s.clocks.get(&p).map(|c| {
            format!("clock {:+.1} us +- {:.1} us from the orchestrator's", c.offset_ns as f64 / 1e3, c.uncertainty_ns as f64 / 1e3)
        });
        match (s.machines.get(&p), clock) {
            (Some(r), c) => Some(format!(
                "on machine {}, emu-node pid {} there, {} (pid here: its ssh session)",
                r.machine.name,
                r.pid,
                c.unwrap_or_default()
            )),
            (None, Some(c)) => Some(c),
            (None, None) => None,
        }
    };
    for p in &r.processes {
        let (n, p50, p99, max, lost, reord) = p.report.as_ref().map_or((0, 0, 0, 0, 0, 0), |rep| {
            let l = |f: fn(&emu_node::lag::LagSummary) -> u64| rep.actors.iter().map(|a| f(&a.lag)).max().unwrap_or(0);
            (
                rep.actors.len(),
                l(|s| s.p50_ns),
                l(|s| s.p99_ns),
                l(|s| s.max_ns),
                rep.transport.iter().map(|t| t.seq.lost).sum::<u64>(),
                rep.transport.iter().map(|t| t.seq.reordered).sum::<u64>(),
            )
        });
        let us = |ns: u64| format!("{:.1}us", ns as f64 / 1000.0);
        println!(
            "{:<8} {:>7} {:<8} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}{}",
            p.process,
            p.pid,
            p.state,
            n,
            us(p50),
            us(p99),
            us(max),
            lost,
            reord,
            machine_of(p.process).map_or(String::new(), |m| format!("  {m}"))
        );
    }
    for w in st.iter().flat_map(|s| &s.clock_warnings) {
        println!("warning: {w}");
    }
    println!("actors (lag = how late deadlines are handled; overload drops = frames later than --max-lag, dropped):");
    for p in &r.processes {
        for a in p.report.iter().flat_map(|r| &r.actors) {
            println!(
                "  {:<10} p50 {:>7.1}us p99 {:>7.1}us max {:>8.1}us  rx {:>9} tx {:>9} drops {:>7} link-down drops {} overload drops {}",
                a.name,
                a.lag.p50_ns as f64 / 1e3,
                a.lag.p99_ns as f64 / 1e3,
                a.lag.max_ns as f64 / 1e3,
                a.rx_frames,
                a.tx_frames,
                a.switch_drops,
                a.link_down_drops,
                a.overload_drops
            );
        }
        let vms = p.report.iter().flat_map(|r| &r.vms);
        for (name, rx, qd, ld, sf) in p.report.iter().flat_map(|r| &r.taps) {
            if let Some(v) = vms.clone().find(|v| v.host == *name) {
                println!(
                    "  {name:<10} VM host (qemu pid {}, {} MiB, {}): booted to rxe ready in {:.1} s; {rx} frames sent into the fabric, {qd} NIC-queue drops, {ld} link-down drops, {} receive-ring drops",
                    v.pid, v.memory_mib, v.accel, v.boot_s, v.rx_ring_drops
                );
                continue;
            }
            println!(
                "  {name:<10} TAP host: {rx} frames sent into the fabric ({sf} super-frames cut at its NIC), {qd} NIC-queue drops, {ld} link-down drops"
            );
        }
    }
    if let Some(f) = &r.faithfulness {
        print!("{}", f.render());
    }
    println!("links: {}", r.links.join(" "));
    if !r.cut_links.is_empty() {
        println!(
            "links cut between processes (one-way delay since the start: configured, the underlay's smallest/mean, achieved on average):"
        );
        let us = |ns: u64| format!("{:.1}us", ns as f64 / 1e3);
        for c in &r.cut_links {
            let underlay = match (c.underlay_min_ns, c.underlay_mean_ns) {
                (Some(min), Some(mean)) => format!("{}/{}", us(min), us(mean)),
                _ => "-".into(),
            };
            println!(
                "  {:<14} {:<16} {} -> {}: configured {}, underlay {underlay}, achieved {}, {} of {} frames late",
                c.link,
                c.direction,
                c.from,
                c.to,
                us(c.configured_ns),
                us(c.achieved_mean_ns),
                c.late,
                c.frames
            );
        }
        for w in r.cut_links.iter().filter_map(|c| c.warning()) {
            println!("warning: {w}");
        }
    }
    if let Some(st) = &st {
        for (p, url) in &st.metrics {
            println!("metrics: {url} (emu-node {p})");
        }
        if let Some((pid, url)) = &st.prometheus {
            println!("prometheus: {url} (pid {pid})");
        }
    }
    for e in &r.events {
        println!("event: {e}");
    }
    Ok(())
}

pub fn link(a: LinkArgs) -> Result<()> {
    let change = match (a.change[0].as_str(), a.change.get(1)) {
        ("down", None) => LinkChange::Down,
        ("up", None) => LinkChange::Up,
        ("rate", Some(r)) if r.ends_with('%') => {
            let percent: f64 = r
                .trim_end_matches('%')
                .parse()
                .ok()
                .filter(|p: &f64| *p > 0.0 && *p <= 100.0)
                .ok_or_else(|| anyhow::anyhow!("rate `{r}`: a percentage of the link's topology rate in (0, 100], e.g. 10%"))?;
            let req = Request::LinkRatePercent { link: a.link, percent };
            let r = live::request(&emu_orchestrator::cluster::state::default_state_dir(), &req)?;
            if !r.ok {
                bail!("{}", r.message);
            }
            println!("{}", r.message);
            return Ok(());
        }
        ("rate", Some(r)) => LinkChange::Rate(parse_rate(r)?),
        ("delay", Some(d)) => LinkChange::Delay(parse_duration(d)?),
        ("loss", Some(p)) => LinkChange::Loss(emu_orchestrator::config::units::parse_probability(p).context("loss")?),
        ("flap", Some(p)) => {
            let period_ns = if p == "off" { 0 } else { parse_duration(p)? };
            if period_ns != 0 && period_ns < 1_000_000 {
                bail!("flap {p}: the period must be at least 1ms (or `off`)");
            }
            let r = live::request(&emu_orchestrator::cluster::state::default_state_dir(), &Request::LinkFlap { link: a.link, period_ns })?;
            if !r.ok {
                bail!("{}", r.message);
            }
            println!("{}", r.message);
            return Ok(());
        }
        _ => bail!(
            "expected `down`, `up`, `rate <RATE|P%>`, `delay <DELAY>`, `loss <P%|P>` or `flap <PERIOD|off>`, got `{}`",
            a.change.join(" ")
        ),
    };
    let r = live::request(&emu_orchestrator::cluster::state::default_state_dir(), &Request::Link { link: a.link, change })?;
    if !r.ok {
        bail!("{}", r.message);
    }
    println!("{}", r.message);
    Ok(())
}

pub fn node(a: NodeArgs) -> Result<()> {
    let change = match (a.change[0].as_str(), a.change.get(1)) {
        ("down", None) => live::NodeChange::Down,
        ("up", None) => live::NodeChange::Up,
        ("restart", boot) => live::NodeChange::Restart { boot_ns: boot.map(|b| parse_duration(b)).transpose()?.unwrap_or(0) },
        _ => bail!("expected `down`, `up` or `restart [BOOT]`, got `{}`", a.change.join(" ")),
    };
    let r = live::request(&emu_orchestrator::cluster::state::default_state_dir(), &Request::Node { switch: a.switch, change })?;
    if !r.ok {
        bail!("{}", r.message);
    }
    println!("{}", r.message);
    Ok(())
}

/// `weft down`.
#[derive(clap::Args, Debug)]
pub struct DownArgs {
    /// Where to write the faithfulness report (JSON); default
    /// faithfulness.json in the state directory (/run/weft as root), kept
    /// until the next `weft down`.
    #[arg(long, value_name = "FILE")]
    report: Option<std::path::PathBuf>,
}

pub fn down(a: DownArgs) -> Result<()> {
    let dir = emu_orchestrator::cluster::state::default_state_dir();
    match live::request(&dir, &Request::Down) {
        Ok(r) if !r.ok => bail!("{}", r.message),
        Ok(r) => {
            println!("{}", r.message);
            if let Some(f) = &r.faithfulness {
                print!("{}", f.render());
                let path = a.report.unwrap_or_else(|| dir.join("faithfulness.json"));
                std::fs::write(&path, serde_json::to_string_pretty(f)? + "\n")
                    .with_context(|| format!("cannot write the faithfulness report to {}", path.display()))?;
                println!("faithfulness report: {}", path.display());
            }
            Ok(())
        }
        Err(emu_orchestrator::cluster::FabricError::NotUp(_)) => {
            println!("no fabric is up");
            Ok(())
        }
        Err(_) => {
            let removed = emu_orchestrator::cluster::state::remove_leftovers(&dir)?;
            if removed.is_empty() {
                println!("no fabric is up; nothing left to remove");
            }
            for r in removed {
                println!("removed leftover {r}");
            }
            Ok(())
        }
    }
}

pub fn capture(a: CaptureArgs) -> Result<()> {
    let path = std::path::absolute(&a.pcap)?;
    let dir = emu_orchestrator::cluster::state::default_state_dir();
    let r = live::request(&dir, &Request::Capture { link: a.link, path: path.display().to_string(), count: a.count })?;
    if !r.ok {
        bail!("{}", r.message);
    }
    println!("{}", r.message);
    let wait = std::time::Duration::from_nanos(parse_duration(&a.wait)?);
    // The capture writes the pcap header at once, then a record (16 bytes
    // and the frame) per frame.
    let want = 24 + a.count * 16;
    let until = std::time::Instant::now() + wait;
    let st = emu_orchestrator::cluster::state::read_state(&dir);
    let machine = |p: u32| st.as_ref().and_then(|s| s.machines.get(&p)).map(|r| r.machine.clone());
    for c in &r.captures {
        match machine(c.process) {
            None => {
                while std::time::Instant::now() < until && std::fs::metadata(&c.path).map_or(0, |m| m.len()) < want {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
            Some(m) => {
                // Fetched once complete, or after --wait (at least 10 s).
                let until = until.max(std::time::Instant::now() + std::time::Duration::from_secs(10));
                let quoted = emu_node::vm::shell_quote(std::slice::from_ref(&c.written));
                loop {
                    let size = m
                        .ssh_command()
                        .arg(format!("stat -c %s {quoted}"))
                        .output()
                        .ok()
                        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<u64>().ok());
                    if size.unwrap_or(0) >= want || std::time::Instant::now() >= until {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
                let out = m
                    .ssh_command()
                    .arg(format!("cat {quoted} && rm -f {quoted}"))
                    .output()
                    .with_context(|| format!("ssh to machine {}", m.name))?;
                if !out.status.success() {
                    bail!(
                        "fetching {} from machine {}: {}",
                        c.written,
                        m.name,
                        String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").trim()
                    );
                }
                std::fs::write(&c.path, &out.stdout).with_context(|| format!("writing {}", c.path))?;
                println!("{}: fetched from machine {} ({} bytes)", c.path, m.name, out.stdout.len());
            }
        }
    }
    Ok(())
}

/// `weft exec HOST -- CMD...`: runs a command in a real host of the live
/// fabric (a namespace or a VM); returns its exit status.
pub fn exec(host: &str, argv: &[String]) -> Result<i32> {
    use emu_orchestrator::cluster::state::HostAccess;
    let dir = emu_orchestrator::cluster::state::default_state_dir();
    let Some(st) = emu_orchestrator::cluster::state::read_state(&dir) else { bail!("no fabric is up (no state in {})", dir.display()) };
    let Some(access) = st.real_hosts.get(host) else {
        let known: Vec<&str> = st.real_hosts.keys().map(String::as_str).collect();
        if st.hosts.iter().any(|l| l.split_whitespace().next() == Some(host)) {
            bail!("host `{host}` is synthetic: it is a state machine inside an emu-node, no command runs there");
        }
        bail!(
            "no host `{host}` in fabric {} (real hosts: {})",
            st.topology,
            if known.is_empty() { "none".into() } else { known.join(" ") }
        );
    };
    let remote = |p: &u32| st.machines.get(p).map(|r| r.machine.clone());
    match access {
        HostAccess::Netns { netns, process } => {
            let status = match remote(process) {
                None => std::process::Command::new("ip")
                    .args(["netns", "exec", netns])
                    .args(argv)
                    .status()
                    .context("cannot run `ip netns exec`")?,
                Some(m) => {
                    let mut line = vec!["ip".to_string(), "netns".into(), "exec".into(), netns.clone()];
                    line.extend(argv.iter().cloned());
                    m.ssh_command().arg(emu_node::vm::shell_quote(&line)).status().with_context(|| format!("ssh to machine {}", m.name))?
                }
            };
            Ok(status.code().unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)))
        }
        HostAccess::Vm { dir, process } => {
            if let Some(m) = remote(process) {
                // The machine's emu-node talks to the VM's exec sockets there.
                let emu = m.emu_node_path(&std::env::current_exe()?.with_file_name("emu-node"));
                let mut line = vec![emu, "--vm-exec".into(), dir.clone(), "--".into()];
                line.extend(argv.iter().cloned());
                let status =
                    m.ssh_command().arg(emu_node::vm::shell_quote(&line)).status().with_context(|| format!("ssh to machine {}", m.name))?;
                return Ok(status.code().unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)));
            }
            let mut out = std::io::stdout();
            Ok(emu_node::vm::exec(std::path::Path::new(dir), argv, &mut out)?)
        }
    }
}
