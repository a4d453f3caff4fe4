//! `emu-node`: one process of a real-time weft fabric. Started by the
//! orchestrator (`weft up`), never by hand: it connects to the
//! orchestrator's control endpoint (QUIC, pinned certificate), proves the
//! fabric token (environment variable `WEFT_TOKEN`, or standard input with
//! `--token-stdin` when started over ssh; never on the command line),
//! receives its share of the fabric, runs it, reports health every
//! 500 ms, and on `Stop`, SIGTERM, SIGINT or loss of the control channel
//! stops its actors and deletes the namespaces it created.

use anyhow::{anyhow, bail, Context as _};
use emu_node::control::{self, ToNode, ToOrchestrator, PROTOCOL_VERSION};
use emu_node::link::quic;
use emu_node::node::{build_nodes, NodeConfig};
use emu_node::runtime::ProcessRuntime;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// One process of a real-time weft fabric (started by `weft up` / `weft run
/// --clock real`; the fabric token comes in the environment variable
/// WEFT_TOKEN).
#[derive(clap::Parser)]
#[command(name = "emu-node", version)]
struct Args {
    /// The orchestrator's control endpoint (QUIC): an address, or a host
    /// name (a Kubernetes Service) and port.
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "vm_exec")]
    control: Option<String>,
    /// SHA-256 (hex) of the fabric certificate the orchestrator presents.
    #[arg(long, value_name = "SHA256", required_unless_present = "vm_exec")]
    pin: Option<String>,
    /// This process's index in the fabric's placement.
    #[arg(long, value_name = "N", required_unless_present = "vm_exec")]
    process: Option<u32>,
    /// The address this process's link sockets bind on and announce to the
    /// other processes (default: the address of the control endpoint's
    /// side, right for one machine).
    #[arg(long, value_name = "IP")]
    bind: Option<std::net::IpAddr>,
    /// Read the fabric token from the first line of standard input instead
    /// of WEFT_TOKEN (what `weft up --machines` does over ssh, so the token
    /// never appears on a command line).
    #[arg(long)]
    token_stdin: bool,
    /// Read the fabric token from this file (a mounted Kubernetes Secret).
    #[arg(long, value_name = "FILE", conflicts_with = "token_stdin")]
    token_file: Option<std::path::PathBuf>,
    /// Run the command after `--` in the VM host whose directory is DIR
    /// (through its exec sockets) and exit with its status: what `weft
    /// exec` runs over ssh for a VM host on another machine.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["control", "pin", "process"])]
    vm_exec: Option<std::path::PathBuf>,
    /// The command of --vm-exec.
    #[arg(last = true, requires = "vm_exec")]
    command: Vec<String>,
}

/// The arguments with the control endpoint resolved.
struct ResolvedArgs {
    control: SocketAddr,
    pin: String,
    process: u32,
    bind: Option<std::net::IpAddr>,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    if let Some(dir) = &args.vm_exec {
        if args.command.is_empty() {
            eprintln!("error: --vm-exec {}: no command after `--`", dir.display());
            return ExitCode::FAILURE;
        }
        return match emu_node::vm::exec(dir, &args.command, &mut std::io::stdout()) {
            Ok(rc) => ExitCode::from(u8::try_from(rc).unwrap_or(255)),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // Tests of the clock-offset estimation make this process's clock run
    // ahead, as another machine's would.
    if let Some(ns) = std::env::var("WEFT_TEST_CLOCK_OFFSET_NS").ok().and_then(|v| v.parse::<i64>().ok()) {
        emu_node::clock::set_test_offset(ns);
    }
    // Tests of the underlay measurement delay every link datagram this
    // process receives, as a slower network would.
    if let Some(ns) = std::env::var("WEFT_TEST_UNDERLAY_DELAY_NS").ok().and_then(|v| v.parse::<u64>().ok()) {
        emu_node::link::remote::set_test_underlay_delay(ns);
    }
    let token = if args.token_stdin {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        line.trim().to_string()
    } else if let Some(f) = &args.token_file {
        match std::fs::read_to_string(f) {
            Ok(t) => t.trim().to_string(),
            Err(e) => {
                eprintln!("error: cannot read the token file {}: {e}", f.display());
                return ExitCode::FAILURE;
            }
        }
    } else {
        std::env::var("WEFT_TOKEN").unwrap_or_default()
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args, token)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args, token: String) -> anyhow::Result<()> {
    let (Some(endpoint), Some(pin), Some(process)) = (args.control, args.pin, args.process) else {
        bail!("--control, --pin and --process are required");
    };
    let control: SocketAddr = tokio::net::lookup_host(&endpoint)
        .await
        .with_context(|| format!("control endpoint `{endpoint}`"))?
        .next()
        .with_context(|| format!("control endpoint `{endpoint}` resolves to no address"))?;
    let args = ResolvedArgs { control, pin, process, bind: args.bind };
    let client = emu_node::tls::quic_client(&args.pin, quic::control_transport()).context("control channel TLS")?;
    let bind = SocketAddr::new(
        match (args.bind, args.control.ip().is_loopback()) {
            (Some(ip), _) => ip,
            (None, true) if args.control.is_ipv6() => std::net::Ipv6Addr::LOCALHOST.into(),
            (None, true) => std::net::Ipv4Addr::LOCALHOST.into(),
            (None, false) if args.control.is_ipv6() => std::net::Ipv6Addr::UNSPECIFIED.into(),
            (None, false) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        },
        0,
    );
    let ep = quinn::Endpoint::client(bind).context("control endpoint")?;
    let conn = ep
        .connect_with(client, args.control, emu_node::tls::SERVER_NAME)
        .context("control connection")?
        .await
        .with_context(|| format!("control connection to {} refused", args.control))?;
    let (mut tx, mut rx) = conn.open_bi().await.context("control stream")?;
    let hello = ToOrchestrator::Hello { token, process: args.process, pid: std::process::id(), version: PROTOCOL_VERSION };
    control::send(&mut tx, &hello).await.context("sending hello")?;
    let plan = loop {
        match control::recv::<ToNode>(&mut rx).await {
            Ok(ToNode::Plan(p)) => break *p,
            Ok(ToNode::ClockProbe { sent }) => {
                let echo = ToOrchestrator::ClockEcho { sent, remote: emu_node::clock::monotonic_ns() };
                control::send(&mut tx, &echo).await.context("answering a clock probe")?;
            }
            Ok(ToNode::Refused(why)) => bail!("the orchestrator refused this node: {why}"),
            Ok(other) => bail!("unexpected first message {other:?}"),
            Err(e) => return Err(anyhow!(e).context("the orchestrator closed the control channel")),
        }
    };
    let bind_ip = args.bind.unwrap_or(args.control.ip());
    // Build every node, keep ours (building is cheap; it keeps the seeds and
    // addressing identical to a virtual-time run of the same fabric).
    // Synthetic hosts run the workload's transport and flows (`weft up
    // --workload`), else they are idle UDP hosts.
    let mut cfg = NodeConfig { seed: plan.seed, ..NodeConfig::default() };
    if let Some(w) = &plan.workload {
        cfg.transport = w.transport;
    }
    let nodes = build_nodes(&plan.fabric, &cfg).context("building the nodes")?;
    let mut nodes: Vec<_> = nodes.into_iter().map(Some).collect();
    if let Some(w) = &plan.workload {
        w.add_to(&mut nodes);
    }
    let (mut runtime, addrs) = match ProcessRuntime::bind(plan, nodes, bind_ip).await {
        Ok(x) => x,
        Err(e) => {
            let _ = control::send(&mut tx, &ToOrchestrator::Failed(e.to_string())).await;
            let _ = tx.finish();
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Err(e.into());
        }
    };
    let result = serve(&mut runtime, addrs, &mut tx, rx).await;
    runtime.shutdown().await;
    if let Err(e) = &result {
        let _ = control::send(&mut tx, &ToOrchestrator::Failed(format!("{e:#}"))).await;
        // Let the message leave before the connection closes.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = tx.finish();
    conn.close(0u32.into(), b"bye");
    ep.wait_idle().await;
    result
}

async fn serve(
    runtime: &mut ProcessRuntime,
    addrs: emu_node::runtime::LinkAddrs,
    tx: &mut quinn::SendStream,
    mut rx: quinn::RecvStream,
) -> anyhow::Result<()> {
    control::send(tx, &ToOrchestrator::Bound(addrs)).await.context("sending link addresses")?;
    let peers = match control::recv::<ToNode>(&mut rx).await {
        Ok(ToNode::Peers(p)) => p,
        Ok(ToNode::Stop) => return Ok(()),
        Ok(other) => bail!("expected peers, got {other:?}"),
        Err(e) => return Err(anyhow!(e).context("control channel lost")),
    };
    runtime.connect(&peers).await.context("connecting the links")?;
    runtime.schedule_events(0);
    control::send(tx, &ToOrchestrator::Running).await.context("sending running")?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("SIGTERM handler")?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).context("SIGINT handler")?;
    // Periodic reports (weft up); a run asks for them instead, so nobody
    // has to read a stream of them.
    let every = runtime.plan().report_every_ms;
    let mut tick = tokio::time::interval(Duration::from_millis(every.max(1) as u64));
    // A reader task, so a half-read message is never dropped by select!.
    let (msg_tx, mut msgs) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let m = control::recv::<ToNode>(&mut rx).await;
            let end = m.is_err();
            if msg_tx.send(m).await.is_err() || end {
                break;
            }
        }
    });
    loop {
        tokio::select! {
            Some(m) = msgs.recv() => match m {
                Ok(ToNode::SetLink { link, change }) => runtime.apply(link, change),
                Ok(ToNode::RestartNode { node }) => {
                    runtime.restart(node);
                }
                Ok(ToNode::Capture { link, path, count }) => {
                    let answer = match runtime.capture(link, std::path::Path::new(&path), count) {
                        Ok(started) => ToOrchestrator::CaptureStarted(started),
                        Err(e) => ToOrchestrator::CaptureRefused(e.to_string()),
                    };
                    control::send(tx, &answer).await.context("control channel lost")?;
                }
                Ok(ToNode::ReportNow) => {
                    let r = runtime.report().await;
                    control::send(tx, &ToOrchestrator::Report(Box::new(r))).await.context("control channel lost")?;
                }
                Ok(ToNode::Stop) => return Ok(()),
                Ok(ToNode::Finish) => {
                    let fabric = runtime.fabric().clone();
                    let nodes = runtime.shutdown().await;
                    let results: Vec<emu_node::results::SwitchResult> = nodes
                        .iter()
                        .filter_map(|(id, n)| match n {
                            emu_node::node::Node::Switch(s) => Some(emu_node::results::switch_result(&fabric, id.index(), s)),
                            _ => None,
                        })
                        .collect();
                    let json = serde_json::to_string(&results).context("encoding the switch results")?;
                    control::send(tx, &ToOrchestrator::Finished(json)).await.context("control channel lost")?;
                    // Closing the connection would discard unsent stream
                    // data: wait until the orchestrator closes it.
                    let _ = tokio::time::timeout(Duration::from_secs(3), async {
                        while let Some(Ok(_)) = msgs.recv().await {}
                    })
                    .await;
                    return Ok(());
                }
                Ok(other) => bail!("unexpected message {other:?}"),
                Err(e) => return Err(anyhow!(e).context("control channel lost; stopping")),
            },
            _ = tick.tick(), if every > 0 => {
                let r = runtime.report().await;
                control::send(tx, &ToOrchestrator::Report(Box::new(r))).await.context("control channel lost; stopping")?;
            }
            _ = sigterm.recv() => return Ok(()),
            _ = sigint.recv() => return Ok(()),
        }
    }
}
