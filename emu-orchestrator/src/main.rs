//! `weft`: validate topologies, inspect schemes and their Tofino resources,
//! and run experiments in virtual time. Argument handling and printing only;
//! the work is in the `emu_orchestrator` and `emu_node` libraries.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use emu_node::results::Summary;
use emu_node::schemes;
use emu_node::time::format_duration;
use emu_node::time::Nanos;
use emu_node::tofino::program::{declarations_of, declare_l3_tables};
use emu_node::tofino::TargetProfile;
use emu_node::workload::FlowSizeCdf;
use emu_orchestrator::config::topology::{Topology, SHIPPED};
use std::path::PathBuf;

mod compare_cli;
mod huge_pages;
mod live_cli;
mod run_cli;

use run_cli::RunArgs;

#[derive(Parser)]
#[command(name = "weft", version, about = "weft: a data-center fabric emulator with a Tofino2 model", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a topology file and print what it describes.
    #[command(
        after_help = "Examples:\n  weft validate topologies/leaf-spine-8x8.toml\n  weft validate fat-tree-k4        # a shipped topology by name"
    )]
    Validate {
        /// Topology file, or the name of a shipped topology.
        topology: String,
    },
    /// Print the Tofino resource report of a scheme.
    #[command(after_help = "Examples:\n  weft resources --scheme ecmp\n  weft resources --scheme ecmp --target tofino1 --json")]
    Resources {
        /// Scheme name (see `weft schemes`).
        #[arg(long)]
        scheme: String,
        /// Target profile: tofino2, tofino1, unlimited.
        #[arg(long, default_value = "tofino2")]
        target: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the load-balancing schemes, their parameters and defaults,
    /// and every transport and traffic-manager parameter.
    Schemes {
        /// Print the tables of docs/SCHEMES.md (Markdown) instead.
        #[arg(long)]
        markdown: bool,
    },
    /// List the shipped topologies.
    Topologies,
    /// Run traffic on a topology in virtual time and write summary.json.
    #[command(
        after_help = "Examples:\n  weft run                                     # embedded default: leaf-spine-2x4, permutation\n  weft run leaf-spine-8x8 --traffic all-to-all --flow-size 100KB\n  weft run fat-tree-k4 --traffic incast:8 --pfc --flow-size 2MB\n  weft run leaf-spine-2x4 --traffic permutation --rate 10Gbps --duration 2ms\n  weft run my.toml --scheme ecmp --set ecmp.use_ports=false --seed 7 --out results/\n  weft run leaf-spine-8x8 --workload alistorage --load 0.5 --flows 2000\n  weft run fat-tree-k8 --workload alistorage --flows 20000 --threads 1   # one core; default auto: a thread per pod, the same results"
    )]
    Run(Box<RunArgs>),
    /// Run a workload for several schemes x loads and print the paper-style table.
    #[command(
        after_help = "Examples:\n  weft compare leaf-spine-8x8 --schemes ecmp --loads 0.5,0.8 --workload alistorage --flows 5000\n  weft compare leaf-spine-2x4 --schemes ecmp --loads 0.3,0.5,0.7 --workload solar --flows 2000 --out cmp/\n  weft compare leaf-spine-8x8 --schemes ecmp,conweave --loads 0.5,0.8 --flows 100000 --jobs 2 --threads 2"
    )]
    Compare(Box<compare_cli::CompareArgs>),
    /// Start a real-time fabric: emu-node processes, links, TAP hosts in network namespaces, soft-RoCE VM hosts.
    #[command(
        after_help = "Examples:\n  sudo weft up leaf-spine-2x4-rt --nodes 3          # hosts h0..h15 in namespaces\n  sudo ip netns exec h8 iperf3 -s -D && sudo ip netns exec h0 iperf3 -c 10.0.1.2\n  sudo weft up leaf-spine-2x4-rt --nodes 3 --links udp --detach\n  weft up leaf-spine-2x4-rt-synthetic --nodes 2     # synthetic hosts, no root needed\n  weft up leaf-spine-2x4-rt-synthetic --workload alistorage --load 0.1 --prometheus --detach\n                                                    # live RoCE traffic for the dashboards\n  weft up leaf-spine-2x4-rt-synthetic --workload websearch --transport tcp --set tcp.cc=dctcp\n  sudo weft up leaf-spine-2x4-rt --machines machines.toml --links udp   # one emu-node per machine, over ssh (docs/MACHINES.md)\n  sudo weft up leaf-spine-rxe --detach               # soft-RoCE VM hosts (image built on first use)\n  sudo weft exec h0 -- ibv_devices                  # a command in a VM or namespace host"
    )]
    Up(Box<live_cli::UpArgs>),
    /// Show the live fabric: processes, actors' deadline lag, transport loss, links.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Change a link of the live fabric.
    #[command(
        after_help = "Examples:\n  weft link leaf0-spine1 down\n  weft link leaf0-spine1 up\n  weft link h0-leaf0 rate 100Mbps\n  weft link edge0_0-agg0_1 rate 10%       # of its topology rate\n  weft link leaf1-spine0 delay 200us\n  weft link leaf0-spine2 loss 1%          # each direction loses 1 % of its frames at random\n  weft link leaf0-spine2 loss 0\n  weft link leaf0-spine3 flap 500ms        # down 500 ms, up 500 ms, ... until `flap off` or another change"
    )]
    Link(live_cli::LinkArgs),
    /// Take a switch of the live fabric down or up, or restart it.
    #[command(
        after_help = "A switch going down or up is every link of it going down or up. A restart reboots the switch as an ASIC reboots: its links go down, the program is loaded again and every register, learned table entry, meter, timer and queued frame is lost (weft_switch_restarts_total, weft_switch_drops_total{cause=\"restart\"}); its links come up BOOT later (default at once).\n\nExamples:\n  weft node spine0 down\n  weft node spine0 up\n  weft node leaf1 restart\n  weft node leaf1 restart 2s        # links down for 2 s while it boots"
    )]
    Node(live_cli::NodeArgs),
    /// Stop the live fabric (also removes what a killed `weft up` left),
    /// print how faithful its timing was and write that report as JSON.
    #[command(
        after_help = "The faithfulness report: per emu-node its CPU time, the lateness of what its nodes handled (p50, p99, max), the frames handled later than the fabric's smallest link delay, the frames dropped for lateness (--max-lag) and at real hosts' NIC queues and receive rings; per node that ran late, the same; a warning line when some node's p99 lateness exceeded the smallest link delay (docs/REALTIME.md#faithfulness). `weft status` shows it while the fabric runs.

Examples:
  weft down
  weft down --report run3/faithfulness.json"
    )]
    Down(live_cli::DownArgs),
    /// Run a command in a real host of the live fabric: a TAP host's
    /// network namespace or a soft-RoCE VM; prints its output (a VM's
    /// stdout and stderr together) and exits with its exit status.
    #[command(after_help = "Examples:
  weft exec h0 -- ip addr show eth0
  weft exec h8 -- ibv_rc_pingpong -d rxe0 -g 1 &          # server in VM h8
  weft exec h0 -- ibv_rc_pingpong -d rxe0 -g 1 10.0.1.2   # client in VM h0
  weft exec h8 -- ib_write_bw -d rxe0 -x 1 -D 5 &
  weft exec h0 -- ib_write_bw -d rxe0 -x 1 -D 5 10.0.1.2")]
    Exec {
        /// Host name (as `weft up` lists them).
        host: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<String>,
    },
    /// Write a pcap of a live link (both directions), readable by tshark/Wireshark. A link cut between two emu-nodes (processes or machines) gives a pcap per end, named after the end's node (x.leaf0.pcap, x.spine0.pcap); one written on another machine is fetched here.
    #[command(
        after_help = "Examples:\n  weft capture leaf0-spine0 --pcap spine0.pcap --count 200 --wait 5s\n  tshark -r spine0.pcap -V -Y infiniband\n  weft capture leaf0-spine0 --pcap cut.pcap --count 50   # cut link: cut.leaf0.pcap, cut.spine0.pcap"
    )]
    Capture(live_cli::CaptureArgs),
    /// Print the metric catalogue (every metric /metrics serves) as Markdown.
    Metrics,
    /// Check Grafana dashboards: valid JSON, and (with --prometheus) every
    /// panel's PromQL answers with data.
    #[command(after_help = "Examples:
  weft dashboards                                  # parse dashboards/*.json, list the queries
  weft up leaf-spine-2x4-rt-synthetic --prometheus --detach
  weft dashboards --prometheus http://127.0.0.1:9090
  weft dashboards --dir my-dashboards --prometheus http://a:9090 --prometheus http://b:9090")]
    Dashboards {
        /// Directory of dashboard JSON files.
        #[arg(long, default_value = "dashboards")]
        dir: PathBuf,
        /// Prometheus base URL to evaluate every query on (repeatable: a
        /// query passes if no server errs and one returns series).
        #[arg(long, value_name = "URL")]
        prometheus: Vec<String>,
        /// Range used for $__rate_interval.
        #[arg(long, default_value = "15s")]
        rate_interval: String,
    },
    /// Kubernetes: write the manifests that run a fabric on a cluster.
    #[command(subcommand)]
    K8s(K8sCommand),
    /// The soft-RoCE VM image of `kind = "rxe"` hosts.
    #[command(subcommand)]
    VmImage(VmImageCommand),
    /// The container image of `weft k8s render` (weft, emu-node, iproute2).
    #[command(subcommand)]
    ContainerImage(ContainerImageCommand),
}

#[derive(Subcommand)]
enum ContainerImageCommand {
    /// Build the image without a registry, from Debian packages:
    /// debootstrap of a minimal Debian bookworm with iproute2, iperf3 and
    /// ping, this weft's weft and emu-node in /usr/local/bin, imported
    /// with `podman import` (needs root, debootstrap and podman; about
    /// 35 s). `Containerfile` at the repository's root builds the same
    /// image from a registry's debian:bookworm-slim.
    #[command(after_help = "Examples:
  sudo weft container-image build                       # tagged weft:VERSION
  sudo podman save weft:0.1.0 | ssh node1 sudo podman load   # to a cluster node without a registry
  weft k8s render leaf-spine-2x4-rt --image localhost/weft:0.1.0")]
    Build {
        /// The image's tag.
        #[arg(long, default_value = concat!("weft:", env!("CARGO_PKG_VERSION")))]
        tag: String,
    },
}

#[derive(Subcommand)]
enum VmImageCommand {
    /// Build the image from Debian packages (apt-get download, dpkg-deb
    /// -x): Debian's kernel with rdma_rxe and an initramfs with busybox,
    /// rdma-core's rxe provider, ibverbs-utils, rdmacm-utils, perftest,
    /// iproute2 and iperf3 (about 90 MB downloaded, a 50 MB initramfs).
    #[command(after_help = "Examples:
  weft vm-image build                 # into ~/.cache/weft/vm-image
  weft vm-image build --check         # and boot it under qemu until rxe0 is up")]
    Build {
        /// Where the image goes.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Then boot it (qemu-system-x86_64; KVM if it works, else TCG)
        /// until the guest has added rxe0.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Subcommand)]
enum K8sCommand {
    /// Write the manifests (JSON, for `kubectl apply -f DIR`): a namespace,
    /// the fabric's identity and token as a Secret, the plan as a
    /// ConfigMap, the orchestrator pod and its Service, one privileged pod
    /// per emu-node, a Service for their /metrics (HTTPS, fabric token), a
    /// Prometheus pod scraping them and its Service (docs/KUBERNETES.md).
    #[command(after_help = "Examples:
  weft k8s render leaf-spine-2x4-rt --nodes 3 --image registry.example/weft:0.1.0 --out weft-k8s
  kubectl apply -f weft-k8s/
  kubectl -n weft-leaf-spine-2x4-rt exec weft-orchestrator -- weft status")]
    Render {
        /// Topology file or shipped name.
        topology: String,
        /// emu-node pods.
        #[arg(long, default_value_t = 3)]
        nodes: u32,
        /// Container image with `weft` and `emu-node` on its PATH.
        #[arg(long, default_value = concat!("weft:", env!("CARGO_PKG_VERSION")))]
        image: String,
        /// Container image of the Prometheus pod (`prometheus` on its PATH).
        #[arg(long, default_value = emu_orchestrator::deploy::k8s::PROMETHEUS_IMAGE)]
        prometheus_image: String,
        /// Namespace (default: weft-<topology name>).
        #[arg(long)]
        namespace: Option<String>,
        /// Transport between the emu-node pods: udp or quic.
        #[arg(long, default_value = "udp")]
        links: String,
        /// Output directory (one JSON file per object).
        #[arg(long, default_value = "weft-k8s")]
        out: PathBuf,
    },
}

/// Exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
pub(crate) const INTERRUPTED_EXIT: i32 = 130;
/// Exit status of a virtual-time run the progress watchdog stopped.
pub(crate) const STALLED_EXIT: i32 = 3;

/// A flag the first Ctrl-C sets (a virtual-time run then stops at its next
/// progress step and writes what it has); a second Ctrl-C exits at once.
pub(crate) fn stop_on_ctrl_c() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use signal_hook::consts::SIGINT;
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Registered first, so it sees the flag before the second handler sets it.
    signal_hook::flag::register_conditional_shutdown(SIGINT, INTERRUPTED_EXIT, flag.clone()).context("Ctrl-C handler")?;
    signal_hook::flag::register(SIGINT, flag.clone()).context("Ctrl-C handler")?;
    Ok(flag)
}

fn main() {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Run(_) | Command::Compare(_)) {
        huge_pages::heap_in_huge_pages();
    }
    if let Err(e) = real_main(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Validate { topology } => {
            let t = Topology::load(&topology)?;
            println!("ok: {}", t.describe());
            if !t.description.is_empty() {
                println!("    {}", t.description);
            }
            Ok(())
        }
        Command::Resources { scheme, target, json } => {
            let t = TargetProfile::by_name(&target)
                .with_context(|| format!("unknown target `{target}` (known: {})", TargetProfile::NAMES.join(", ")))?;
            let mut p = schemes::build(&scheme, &Default::default(), Default::default())?;
            let mut d = declarations_of(p.as_mut());
            declare_l3_tables(&mut d, 512);
            let report = d.usage().report(&scheme, &t);
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            if report.fits.is_some() {
                std::process::exit(2);
            }
            Ok(())
        }
        Command::Metrics => {
            print!("{}", emu_node::metrics::catalogue::markdown());
            Ok(())
        }
        Command::ContainerImage(ContainerImageCommand::Build { tag }) => {
            let exe = std::env::current_exe()?;
            let t0 = std::time::Instant::now();
            eprintln!("building the container image {tag} from Debian packages");
            let work = emu_orchestrator::deploy::container_image::default_work_dir();
            let image = emu_orchestrator::deploy::container_image::build(&tag, &exe, &exe.with_file_name("emu-node"), &work, &mut |l| {
                eprintln!("  {l}")
            })?;
            println!("built {} ({} MB) in {:.1} s", image.tag, image.size >> 20, t0.elapsed().as_secs_f64());
            Ok(())
        }
        Command::VmImage(VmImageCommand::Build { dir, check }) => {
            let dir = dir.unwrap_or_else(emu_orchestrator::deploy::vm_image::default_dir);
            let t0 = std::time::Instant::now();
            eprintln!("building the soft-RoCE VM image from Debian packages into {} (about a minute)", dir.display());
            let image = emu_orchestrator::deploy::vm_image::build(&dir, &mut |line| eprintln!("  {line}"))?;
            eprintln!("built in {:.1} s", t0.elapsed().as_secs_f64());
            if check {
                let kvm = std::path::Path::new("/dev/kvm").exists();
                let mut tries = vec![false];
                if kvm {
                    tries.insert(0, true);
                }
                let mut ok = false;
                for kvm in tries {
                    // A KVM boot takes seconds; one that hangs (as on some
                    // virtual machines) falls back to TCG.
                    let wait = std::time::Duration::from_secs(if kvm { 15 } else { 90 });
                    let (secs, text) = emu_orchestrator::deploy::vm_image::boot_check(&image, kvm, wait)?;
                    let how = if kvm { "KVM" } else { "TCG (software emulation)" };
                    let verbs = text.lines().any(|l| l.starts_with("weft: ibv_devices:") && l.contains("rxe0"));
                    if text.contains(emu_orchestrator::deploy::vm_image::READY) && verbs {
                        println!("booted under {how}: rxe0 up and listed by ibv_devices after {secs:.1} s");
                        ok = true;
                        break;
                    }
                    eprintln!("under {how}: no `{}` after {secs:.1} s", emu_orchestrator::deploy::vm_image::READY);
                }
                if !ok {
                    bail!("the image did not bring rxe0 up under qemu");
                }
            }
            Ok(())
        }
        Command::K8s(K8sCommand::Render { topology, nodes, image, prometheus_image, namespace, links, out }) => {
            let topo = Topology::load(&topology)?;
            let _: emu_node::link::InterProcess = links.parse().map_err(anyhow::Error::msg)?;
            if nodes == 0 {
                bail!("--nodes must be at least 1");
            }
            let text = match emu_orchestrator::config::topology::SHIPPED.iter().find(|(n, _)| *n == topology) {
                Some((_, t)) => t.to_string(),
                None => std::fs::read_to_string(&topology).with_context(|| format!("cannot read {topology}"))?,
            };
            let namespace = namespace.unwrap_or_else(|| format!("weft-{}", topo.fabric.name));
            let o = emu_orchestrator::deploy::k8s::RenderOptions { namespace: namespace.clone(), image, prometheus_image, nodes, links };
            let manifests = emu_orchestrator::deploy::k8s::render(&topo, &text, &o)?;
            std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
            for (name, v) in &manifests {
                let path = out.join(name);
                std::fs::write(&path, serde_json::to_string_pretty(v)? + "\n")
                    .with_context(|| format!("cannot write {}", path.display()))?;
                if name.contains("secret") {
                    use std::os::unix::fs::PermissionsExt as _;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                        .with_context(|| format!("cannot restrict {}", path.display()))?;
                }
            }
            println!(
                "wrote {} objects to {} (namespace {namespace}); apply with: kubectl apply -f {}",
                manifests.len(),
                out.display(),
                out.display()
            );
            println!("the Secret in 01-secret.json holds the fabric's private key and token: keep the directory private");
            Ok(())
        }
        Command::Dashboards { dir, prometheus, rate_interval } => dashboards(&dir, &prometheus, &rate_interval),
        Command::Schemes { markdown: true } => {
            print!("{}", emu_orchestrator::config::params::reference_markdown());
            Ok(())
        }
        Command::Schemes { markdown: false } => {
            println!("Transport parameters (--set, for --transport roce-*):");
            for (name, unit, doc) in emu_orchestrator::config::params::TRANSPORT_PARAMS {
                println!("  {name:<24} ({unit}) {doc}");
            }
            println!();
            println!("Traffic-manager parameters (--set, every switch):");
            for (name, unit, doc) in emu_orchestrator::config::params::TM_PARAMS {
                println!("  {name:<24} ({unit}) {doc}");
            }
            println!();
            for s in schemes::catalog() {
                println!("{} — {}\n  source: {}", s.name, s.summary, s.source);
                if let Some(r) = s.reference_rate {
                    println!(
                        "  time parameters (µs) are given for {r} links; --scale-params (default in real time) scales them to the fabric's"
                    );
                }
                let width = s.params.iter().map(|p| s.name.len() + 1 + p.name.len()).max().unwrap_or(0).max(19);
                for p in &s.params {
                    let key = format!("{}.{}", s.name, p.name);
                    println!("  {key:<width$} default {:<12} ({}) {}", p.default, p.unit, p.doc);
                }
                println!();
            }
            Ok(())
        }
        Command::Topologies => {
            for (name, _) in SHIPPED {
                let t = Topology::load(name)?;
                println!("{name:<20} {}", t.description);
            }
            Ok(())
        }
        Command::Run(a) => run_cli::run(*a),
        Command::Compare(a) => compare_cli::compare(*a),
        Command::Up(a) => live_cli::up(*a),
        Command::Status { json } => live_cli::status(json),
        Command::Link(a) => live_cli::link(a),
        Command::Node(a) => live_cli::node(a),
        Command::Down(a) => live_cli::down(a),
        Command::Exec { host, command } => {
            let rc = live_cli::exec(&host, &command)?;
            std::process::exit(rc);
        }
        Command::Capture(a) => live_cli::capture(a),
    }
}

/// Splits `--set` arguments into per-scheme parameters and transport parameters.
/// Sorts `--set` arguments by group (scheme or transport).
pub(crate) fn split_sets(sets: &[String]) -> Result<emu_orchestrator::config::params::Sets> {
    Ok(emu_orchestrator::config::params::parse_sets(sets)?)
}

/// The bounded-lag policy's default (`--max-lag`): no bound. An overloaded
/// fabric then runs late as a whole (counted as lag), which keeps a run of
/// synthetic hosts complete; a bound trades lag for counted drops
/// (BENCHMARKS.md, "Bounded lag").
const DEFAULT_MAX_LAG: &str = "0";

/// `--max-lag`: a duration, 0 for no bound.
fn parse_max_lag(s: &str) -> Result<Nanos> {
    if s.trim() == "0" {
        return Ok(0);
    }
    emu_orchestrator::config::units::parse_duration(s).with_context(|| format!("--max-lag {s}"))
}

pub(crate) fn load_cdf(w: &str) -> Result<FlowSizeCdf> {
    if let Some(c) = FlowSizeCdf::named(w) {
        return Ok(c);
    }
    let names: Vec<&str> = emu_node::workload::SHIPPED.iter().map(|(n, _)| *n).collect();
    let text = std::fs::read_to_string(w)
        .with_context(|| format!("--workload `{w}` is neither a shipped workload ({}) nor a readable file", names.join(", ")))?;
    Ok(FlowSizeCdf::parse(w, &text)?)
}

fn print_summary(s: &Summary, wall: std::time::Duration, threads: usize) {
    let flows = s.flows.len();
    let sent: u64 = s.flows.iter().map(|f| f.bytes_sent).sum();
    let delivered: u64 = s.flows.iter().map(|f| f.bytes_delivered).sum();
    let drops: u64 = s.flows.iter().map(|f| f.drops).sum();
    let marks: u64 = s.flows.iter().map(|f| f.ecn_marks).sum();
    let ooo: u64 = s.flows.iter().map(|f| f.out_of_order).sum();
    let pauses: u64 = s.switches.iter().flat_map(|w| w.ports.iter()).map(|p| p.counters.pfc_pause_sent).sum();
    let mut fct: Vec<u64> = s.flows.iter().filter_map(|f| f.last_arrival).collect();
    fct.sort_unstable();
    let pct = |q: f64| fct.get(((fct.len() as f64 - 1.0) * q).round() as usize).copied().map(format_duration).unwrap_or_else(|| "-".into());
    let maxq = s
        .switches
        .iter()
        .flat_map(|w| w.ports.iter().flat_map(move |p| p.queues.iter().map(move |q| (q.stats.max_depth_bytes, &w.name, p.port))))
        .max();
    println!("{} | scheme {} | {} | seed {}", s.topology, s.scheme, s.traffic, s.seed);
    println!("  flows               {flows}");
    println!(
        "  delivered           {delivered} of {sent} payload bytes ({:.2}%)",
        if sent > 0 { 100.0 * delivered as f64 / sent as f64 } else { 0.0 }
    );
    println!("  packets lost        {drops}");
    println!("  ECN-marked packets  {marks}");
    println!("  out-of-order pkts   {ooo}");
    println!("  PFC pauses sent     {pauses}");
    println!("  flow finish (last arrival) p50 {} p99 {} max {}", pct(0.5), pct(0.99), pct(1.0));
    let definition = s.slowdown.definition;
    let mut sd: Vec<f64> = s.flows.iter().filter_map(|f| f.slowdown_by(definition)).collect();
    sd.sort_by(|a, b| a.total_cmp(b));
    if !sd.is_empty() {
        let q = |p: f64| sd[((sd.len() as f64 - 1.0) * p).round() as usize];
        println!(
            "  FCT slowdown ({})  avg {:.3} p50 {:.3} p99 {:.3} ({} complete flows; {} counted after the warm-up, {} of those incomplete)",
            definition.name(),
            sd.iter().sum::<f64>() / sd.len() as f64,
            q(0.5),
            q(0.99),
            sd.len(),
            s.slowdown.overall.flows,
            s.slowdown.incomplete
        );
    }
    if let Some(im) = s.uplink_imbalance.as_ref().filter(|i| i.samples > 0) {
        println!(
            "  uplink imbalance    avg {:.3} p50 {:.3} p99 {:.3} ((max-min)/mean per leaf per {}, {} samples)",
            im.avg,
            im.p50,
            im.p99,
            format_duration(im.interval_ns),
            im.samples
        );
    }
    if let Some((d, sw, p)) = maxq {
        println!("  deepest queue       {d} B at {sw} port {p}");
    }
    let st = &s.scheme_totals;
    let c = |k: &str| st.counters.get(k).copied().unwrap_or(0);
    match s.scheme.as_str() {
        "conweave" => {
            println!(
                "  conweave            {} reroutes ({} aborted: paths busy), {} epochs, {} NOTIFY, {} CLEAR, {} held pkts, {} T_resume expiries, {} fallback pkts",
                c("conweave_reroutes"),
                c("conweave_reroute_aborted_all_busy"),
                c("conweave_epochs"),
                c("conweave_notify_sent"),
                c("conweave_clear_sent"),
                c("conweave_held_packets"),
                c("conweave_resume_expiries"),
                c("conweave_fallback_packets")
            );
            if let (Some(q), Some(b)) =
                (st.distributions.get("conweave_reorder_queues_per_port"), st.distributions.get("conweave_reorder_buffer_bytes_per_switch"))
            {
                println!(
                    "  reorder queues/port avg {:.3} p99 {} max {}; reorder buffer/switch avg {:.0} B p99 {} B max {} B",
                    q.avg, q.p99, q.max, b.avg, b.p99, b.max
                );
            }
        }
        "letflow" | "conga" => {
            let n = s.scheme.as_str();
            println!("  {n:<19} {} flowlets, {} path changes", c(&format!("{n}_flowlets")), c(&format!("{n}_path_changes")));
        }
        "drill" => {
            println!("  drill               {} decisions, {} moves to a shorter queue", c("drill_decisions"), c("drill_path_changes"))
        }
        "rps" => println!("  rps                 {} packets sprayed", c("rps_decisions")),
        "int-nexthop" => println!(
            "  int-nexthop         {} INT shims inserted, {} stripped; {} flowlets, {} on the best port; {} best-port changes",
            c("int_inserted"),
            c("int_stripped"),
            c("int_new_flowlets"),
            c("int_best_choices"),
            c("int_best_changes")
        ),
        "p4te" => println!(
            "  p4te                {} events (delay {}, queue {}, utilisation {}), {} ports regrouped; {} flowlets, {} upward packets without a group; FACKs {} down / {} up, {} blocked within B",
            c("p4te_delay_events") + c("p4te_queue_events") + c("p4te_util_events"),
            c("p4te_delay_events"),
            c("p4te_queue_events"),
            c("p4te_util_events"),
            c("p4te_regroups"),
            c("p4te_new_flowlets"),
            c("p4te_no_group"),
            c("p4te_facks_decrease"),
            c("p4te_facks_increase"),
            c("p4te_rate_control_blocked")
        ),
        "lbsp" => {
            println!(
                "  lbsp                {} packets up, {} moved by failure entries, {} by states ({} state changes); {} link failures and {} recoveries found, {} table writes",
                c("lbsp_up_decisions"),
                c("lbsp_failure_avoided"),
                c("lbsp_state_moves"),
                c("lbsp_state_changes"),
                c("lbsp_failures_detected"),
                c("lbsp_recoveries_detected"),
                c("lbsp_table_writes")
            )
        }
        _ => {}
    }
    let secs = wall.as_secs_f64().max(1e-9);
    println!(
        "  simulated {} in {:.3}s wall{}: {} events ({:.2} M/s), {} packet-hops ({:.2} M/s)",
        format_duration(s.simulated_ns),
        secs,
        if threads > 1 { format!(" on {threads} threads") } else { String::new() },
        s.totals.events,
        s.totals.events as f64 / secs / 1e6,
        s.totals.packet_hops,
        s.totals.packet_hops as f64 / secs / 1e6
    );
}

fn dashboards(dir: &std::path::Path, servers: &[String], rate_interval: &str) -> Result<()> {
    use emu_orchestrator::observe::dashboards;
    let queries = dashboards::load(dir)?;
    if servers.is_empty() {
        for q in &queries {
            println!("{}  [{}]  {}", q.file, q.panel, q.expr);
        }
        println!("{} queries in valid dashboards; pass --prometheus URL to evaluate them", queries.len());
        return Ok(());
    }
    let checked = dashboards::check(&queries, servers, rate_interval);
    let mut failed = 0;
    for c in &checked {
        let status = if c.ok() { "ok" } else { "FAIL" };
        println!("{status:<4} {:>4} series  {}  [{}]  {}", c.series, c.query.file, c.query.panel, c.promql);
        for e in &c.errors {
            println!("       error: {e}");
        }
        failed += usize::from(!c.ok());
    }
    if failed > 0 {
        bail!("{failed} of {} dashboard queries returned an error or no series", checked.len());
    }
    println!("all {} dashboard queries returned data", checked.len());
    Ok(())
}
