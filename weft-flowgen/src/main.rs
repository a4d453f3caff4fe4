//! `weft-flowgen`: the traffic generator for real hosts
//! — what D-ITG and the empirical traffic generator did in the INT
//! best-nexthop paper (§IV), with nothing outside Debian and weft.
//!
//! - `udp`: flows of a given total size in packets of a given IP size with
//!   exponential (Poisson-process) inter-departure times, D-ITG's
//!   `-E`/`-c`/`-k` (the paper: 12 800 KB flows, 1500-byte packets, mean
//!   gap 4.2 ms). Every datagram carries a small header (flow, sequence,
//!   packets in the flow, send time), so the receiver measures per flow
//!   what D-ITG's decoder reports: packets and bytes received, lost, the
//!   throughput over first-to-last arrival and the completion time from the
//!   first departure to the last arrival.
//! - `tcp`: flows over TCP, one connection each, with sizes from a CDF
//!   (weft's workload files, e.g. `int-table1`) or fixed, starting as a
//!   Poisson process (mean gap, or a load of the sender's link), to one or
//!   more receivers picked at random — the empirical traffic generator's
//!   client. The completion time runs from `connect` to the receiver's
//!   one-byte confirmation that it read the whole flow (so it includes the
//!   handshake, as the paper's request-response generator's does).
//! - `recv`: the receiver of both, on one port number (TCP and UDP),
//!   writing the UDP flows' JSON when it stops (Ctrl-C, SIGTERM, `--idle`
//!   seconds without traffic, or `--max`).
//!
//! Why not iperf3 (in Debian): it has no Poisson departures (`-b` paces at
//! a constant rate) and runs one test per server and control connection,
//! so 10 000 short flows would be 10 000 sequential tests with their
//! control handshakes, not concurrent flows. Times are the system's
//! realtime clock: sender and receiver must share it, as network
//! namespaces on one machine do (D-ITG has the same requirement).
//!
//! Output is JSON (`--out FILE`, else stdout): `{"flows": [...]}` with one
//! object per flow; the sender's for TCP, the receiver's for UDP.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weft_core::host::udp::poisson_gap;
use weft_wire::units::{parse_duration, parse_rate, parse_size};

/// First bytes of every generator datagram ("WFG1").
const MAGIC: u32 = 0x5746_4731;
/// The datagram header: magic, flow, sequence, packets in the flow (u32
/// each), send time (u64 ns since the Unix epoch).
const HEADER: usize = 24;
/// IPv4 + UDP header bytes: `--packet` is the IP packet size.
const IP_UDP: usize = 28;
/// The default port of `recv` and of destinations without one.
const PORT: u16 = 5001;

#[derive(Parser)]
#[command(
    name = "weft-flowgen",
    version,
    about = "Traffic generator for weft's real hosts: Poisson-paced UDP flows (D-ITG style) and TCP flows from a size CDF, per-flow throughput and FCT as JSON",
    after_help = "Examples (inside the hosts' namespaces of `weft up`):\n  \
        ip netns exec h7 weft-flowgen recv --idle 10s --out h7.json &\n  \
        ip netns exec h0 weft-flowgen udp 10.1.1.3 --bytes 12800KB --packet 1500 --mean-gap 4.2ms --flows 10 --every 40s\n  \
        ip netns exec h0 weft-flowgen tcp 10.0.2.2,10.0.3.2 --flows 5000 --cdf int-table1 --load 0.8 --rate 10Mbps --out h0.json"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Receive: TCP flows (confirmed to their sender) and UDP flows (measured here) on one port.
    Recv(RecvArgs),
    /// Send UDP flows with Poisson departures.
    Udp(UdpArgs),
    /// Send TCP flows (one connection each) with Poisson arrivals.
    Tcp(TcpArgs),
}

#[derive(clap::Args)]
struct RecvArgs {
    /// Address and port to listen on (TCP and UDP).
    #[arg(long, default_value = "0.0.0.0:5001")]
    listen: SocketAddr,
    /// Stop after this long without a datagram or connection, once one came (e.g. 10s; 0: never).
    #[arg(long, default_value = "0s")]
    idle: String,
    /// Stop after this long in any case (0: never).
    #[arg(long, default_value = "0s")]
    max: String,
    /// Write the UDP flows' JSON here (default: stdout).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct UdpArgs {
    /// Receiver, ADDR or ADDR:PORT (port 5001 by default).
    dst: String,
    /// Bytes of each flow (IP bytes, as D-ITG counts), e.g. 12800KB.
    #[arg(long)]
    bytes: String,
    /// IP packet size in bytes (UDP payload = packet - 28).
    #[arg(long, default_value_t = 1500)]
    packet: usize,
    /// Mean inter-departure time of the Poisson process (e.g. 4.2ms).
    #[arg(long, conflicts_with = "rate")]
    mean_gap: Option<String>,
    /// Or a mean rate (e.g. 9Mbps): mean gap = packet / rate.
    #[arg(long)]
    rate: Option<String>,
    /// Constant gaps instead of exponential ones.
    #[arg(long)]
    constant: bool,
    /// Number of flows, one after the other.
    #[arg(long, default_value_t = 1)]
    flows: u32,
    /// Start a flow this long after the previous one started (0: when it ends).
    #[arg(long, default_value = "0s")]
    every: String,
    /// Source port of the first flow; flow i uses sport + i, so each flow
    /// hashes on its own as D-ITG's flows do (0: an ephemeral port per flow).
    #[arg(long, default_value_t = 0)]
    sport: u16,
    /// Number of the first flow (flow ids identify flows at the receiver).
    #[arg(long, default_value_t = 0)]
    first_id: u32,
    /// Seed of the departure process.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the sender's JSON here (default: stdout).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct TcpArgs {
    /// Receivers, comma-separated ADDR or ADDR:PORT; each flow picks one at random.
    dst: String,
    /// Number of flows.
    #[arg(long)]
    flows: u32,
    /// Flow size CDF: a shipped workload (int-table1, alistorage, ...) or a file.
    #[arg(long, conflicts_with = "size")]
    cdf: Option<String>,
    /// Or one size for every flow (e.g. 100KB).
    #[arg(long)]
    size: Option<String>,
    /// Mean gap between flow starts (Poisson arrivals).
    #[arg(long, conflicts_with = "load")]
    mean_gap: Option<String>,
    /// Or the load these flows put on the sender's link (needs --rate): mean gap = mean size / (load x rate).
    #[arg(long, requires = "rate")]
    load: Option<f64>,
    /// The sender's link rate for --load (e.g. 10Mbps).
    #[arg(long)]
    rate: Option<String>,
    /// Give up on a flow after this long.
    #[arg(long, default_value = "600s")]
    timeout: String,
    /// Seed of sizes, destinations and arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the flows' JSON here (default: stdout).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Recv(a) => recv(a),
        Command::Udp(a) => udp(a),
        Command::Tcp(a) => tcp(a),
    };
    if let Err(e) = r {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// A duration argument in ns.
fn duration(name: &str, s: &str) -> Result<u64> {
    parse_duration(s).with_context(|| format!("--{name} `{s}`"))
}

fn destination(s: &str) -> Result<SocketAddr> {
    let with_port = if s.contains(':') { s.to_string() } else { format!("{s}:{PORT}") };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("destination `{s}`"))?
        .next()
        .with_context(|| format!("destination `{s}`: no address"))
}

fn write_json(out: &Option<std::path::PathBuf>, v: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    match out {
        Some(p) => std::fs::write(p, text + "\n").with_context(|| format!("cannot write {}", p.display())),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}

/// Exponential gaps of mean `mean_ns` (or constant ones): the
/// inter-departure times of a Poisson process, the n-th drawn by the
/// synthetic UDP host's [`poisson_gap`] for stream `key` (what a virtual-time
/// flow list's `mean_gap_seconds` uses).
struct Gaps {
    key: u32,
    n: u32,
    mean_ns: u64,
    constant: bool,
}

impl Gaps {
    fn new(key: u32, mean_ns: f64, constant: bool) -> Self {
        Gaps { key, n: 0, mean_ns: mean_ns.round() as u64, constant }
    }
    fn next_ns(&mut self) -> u64 {
        if self.constant {
            return self.mean_ns;
        }
        self.n = self.n.wrapping_add(1);
        poisson_gap(self.key, self.n, self.mean_ns)
    }
}

/// The gap stream of flow `flow` of a sender seeded `seed`.
fn stream_key(seed: u64, flow: u32) -> u32 {
    (seed as u32).wrapping_mul(0x9e37_79b9) ^ flow
}

/// Sleeps until `deadline` (coarse sleep, then a short spin: departures
/// keep their Poisson times to tens of µs).
fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::hint::spin_loop();
        }
    }
}

// ---------------------------------------------------------------- UDP ---

#[derive(Serialize)]
struct UdpSent {
    flow: u32,
    dst: String,
    packets: u32,
    bytes: u64,
    /// Send time of the first packet, ns since the Unix epoch.
    start_ns: u64,
    /// First to last departure.
    send_seconds: f64,
    send_errors: u64,
}

fn udp(a: UdpArgs) -> Result<()> {
    if a.packet < IP_UDP + HEADER || a.packet > 65_535 {
        bail!("--packet must be {}..=65535 bytes (IP size), got {}", IP_UDP + HEADER, a.packet);
    }
    let bytes = parse_size(&a.bytes).with_context(|| format!("--bytes `{}`", a.bytes))?;
    let packets = bytes.div_ceil(a.packet as u64);
    let packets = u32::try_from(packets).ok().filter(|&p| p > 0).with_context(|| format!("--bytes {bytes}: 1 to 2^32 packets"))?;
    let mean_ns = match (&a.mean_gap, &a.rate) {
        (Some(g), None) => duration("mean-gap", g)? as f64,
        (None, Some(r)) => {
            let r = parse_rate(r).with_context(|| format!("--rate `{r}`"))?;
            if r.bps() == 0 {
                bail!("--rate must be positive");
            }
            a.packet as f64 * 8.0 * 1e9 / r.bps() as f64
        }
        _ => bail!("give --mean-gap or --rate"),
    };
    let every = duration("every", &a.every)?;
    let dst = destination(&a.dst)?;
    if a.sport > 0 && a.sport as u32 + a.flows > 65_536 {
        bail!("--sport {} + {} flows runs past port 65535", a.sport, a.flows);
    }
    let mut buf = vec![0u8; a.packet - IP_UDP];
    let mut sent = Vec::new();
    let t0 = Instant::now();
    for i in 0..a.flows {
        let flow = a.first_id + i;
        let sport = if a.sport == 0 { 0 } else { a.sport + i as u16 };
        let bind: SocketAddr = if dst.is_ipv4() { ([0, 0, 0, 0], sport).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, sport).into() };
        let sock = UdpSocket::bind(bind).with_context(|| format!("bind UDP source port {sport}"))?;
        sock.connect(dst).with_context(|| format!("UDP to {dst}"))?;
        let flow_start = if every > 0 { t0 + Duration::from_nanos(every * i as u64) } else { Instant::now() };
        sleep_until(flow_start);
        let (mut at, start_ns, first) = (Instant::now(), now_ns(), Instant::now());
        let mut errors = 0;
        let mut gaps = Gaps::new(stream_key(a.seed, flow), mean_ns, a.constant);
        for seq in 0..packets {
            sleep_until(at);
            buf[0..4].copy_from_slice(&MAGIC.to_be_bytes());
            buf[4..8].copy_from_slice(&flow.to_be_bytes());
            buf[8..12].copy_from_slice(&seq.to_be_bytes());
            buf[12..16].copy_from_slice(&packets.to_be_bytes());
            buf[16..24].copy_from_slice(&now_ns().to_be_bytes());
            // A full socket buffer (ENOBUFS) or an ICMP error: counted, as
            // D-ITG counts them; the flow goes on.
            if sock.send(&buf).is_err() {
                errors += 1;
            }
            at += Duration::from_nanos(gaps.next_ns());
        }
        sent.push(UdpSent {
            flow,
            dst: dst.to_string(),
            packets,
            bytes: packets as u64 * a.packet as u64,
            start_ns,
            send_seconds: first.elapsed().as_secs_f64(),
            send_errors: errors,
        });
        eprintln!("flow {flow}: {packets} packets to {dst} in {:.2} s", first.elapsed().as_secs_f64());
    }
    write_json(&a.out, &serde_json::json!({ "flows": sent }))
}

/// What the receiver knows of one UDP flow.
#[derive(Debug, Clone, Serialize)]
struct UdpReceived {
    src: String,
    flow: u32,
    /// Packets the sender sent (from the header).
    packets_sent: u32,
    packets: u32,
    /// IP bytes received.
    bytes: u64,
    lost: u32,
    /// Arrivals with a sequence number below the highest seen.
    reordered: u32,
    first_tx_ns: u64,
    first_rx_ns: u64,
    last_rx_ns: u64,
    /// Received bits over first-to-last arrival (0 with one packet).
    throughput_bps: f64,
    /// First departure to last arrival.
    fct_seconds: f64,
    /// Mean one-way delay (same clock at both ends).
    mean_delay_seconds: f64,
    #[serde(skip)]
    max_seq: u32,
    #[serde(skip)]
    delay_sum_ns: f64,
}

impl UdpReceived {
    fn finish(&mut self) {
        self.lost = self.packets_sent.saturating_sub(self.packets);
        let span = self.last_rx_ns.saturating_sub(self.first_rx_ns);
        self.throughput_bps = if span > 0 { self.bytes as f64 * 8e9 / span as f64 } else { 0.0 };
        self.fct_seconds = self.last_rx_ns.saturating_sub(self.first_tx_ns) as f64 / 1e9;
        self.mean_delay_seconds = if self.packets > 0 { self.delay_sum_ns / self.packets as f64 / 1e9 } else { 0.0 };
    }
}

/// Accounts one datagram; `None` when it is not a generator datagram
/// (counted by the caller as foreign).
fn account(flows: &mut BTreeMap<(SocketAddr, u32), UdpReceived>, from: SocketAddr, d: &[u8], rx_ns: u64) -> Option<()> {
    let word = |at: usize| d.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
    if word(0)? != MAGIC {
        return None;
    }
    let (flow, seq, count) = (word(4)?, word(8)?, word(12)?);
    let tx_ns = u64::from_be_bytes(d.get(16..24)?.try_into().ok()?);
    let f = flows.entry((from, flow)).or_insert_with(|| UdpReceived {
        src: from.to_string(),
        flow,
        packets_sent: count,
        packets: 0,
        bytes: 0,
        lost: 0,
        reordered: 0,
        first_tx_ns: tx_ns,
        first_rx_ns: rx_ns,
        last_rx_ns: rx_ns,
        throughput_bps: 0.0,
        fct_seconds: 0.0,
        mean_delay_seconds: 0.0,
        max_seq: seq,
        delay_sum_ns: 0.0,
    });
    f.packets += 1;
    f.bytes += (d.len() + IP_UDP) as u64;
    f.first_tx_ns = f.first_tx_ns.min(tx_ns);
    f.last_rx_ns = rx_ns;
    if seq < f.max_seq {
        f.reordered += 1;
    }
    f.max_seq = f.max_seq.max(seq);
    f.delay_sum_ns += rx_ns.saturating_sub(tx_ns) as f64;
    Some(())
}

// ---------------------------------------------------------------- TCP ---

/// One TCP flow's request: size (u64) then flow id (u32), then the bytes.
const TCP_HEADER: usize = 12;

fn serve_tcp(mut s: TcpStream) -> std::io::Result<()> {
    let mut h = [0u8; TCP_HEADER];
    s.read_exact(&mut h)?;
    let mut left = u64::from_be_bytes(h[0..8].try_into().unwrap_or_default());
    let mut buf = vec![0u8; 64 * 1024];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = s.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        left -= n as u64;
    }
    s.write_all(&[1])
}

#[derive(Serialize)]
struct TcpFlow {
    flow: u32,
    dst: String,
    bytes: u64,
    /// Planned start after the first flow's, seconds.
    start_seconds: f64,
    /// `connect` to the receiver's confirmation; absent when it failed.
    fct_seconds: Option<f64>,
    /// bytes x 8 / FCT.
    throughput_bps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn send_tcp(dst: SocketAddr, flow: u32, bytes: u64, timeout: Duration) -> Result<f64> {
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&dst, timeout).with_context(|| format!("connect {dst}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut h = [0u8; TCP_HEADER];
    h[0..8].copy_from_slice(&bytes.to_be_bytes());
    h[8..12].copy_from_slice(&flow.to_be_bytes());
    s.write_all(&h)?;
    let chunk = vec![0u8; 64 * 1024];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        s.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).context("no confirmation from the receiver")?;
    Ok(t.elapsed().as_secs_f64())
}

fn tcp(a: TcpArgs) -> Result<()> {
    let dsts = a.dst.split(',').map(destination).collect::<Result<Vec<_>>>()?;
    if a.flows == 0 {
        bail!("--flows must be at least 1");
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
    let (sizes, mean_size): (Vec<u64>, f64) = match (&a.cdf, &a.size) {
        (Some(c), None) => {
            let cdf = match weft_sim::workload::FlowSizeCdf::named(c) {
                Some(cdf) => cdf,
                None => {
                    let text = std::fs::read_to_string(c)
                        .with_context(|| format!("--cdf `{c}`: neither a shipped workload nor a readable file"))?;
                    weft_sim::workload::FlowSizeCdf::parse(c, &text)?
                }
            };
            ((0..a.flows).map(|_| cdf.sample(&mut rng)).collect(), cdf.mean())
        }
        (None, Some(s)) => {
            let b = parse_size(s).with_context(|| format!("--size `{s}`"))?.max(1);
            (vec![b; a.flows as usize], b as f64)
        }
        _ => bail!("give --cdf or --size"),
    };
    let mean_gap_ns = match (&a.mean_gap, a.load, &a.rate) {
        (Some(g), None, _) => duration("mean-gap", g)? as f64,
        (None, Some(load), Some(r)) => {
            let r = parse_rate(r).with_context(|| format!("--rate `{r}`"))?;
            if !(load > 0.0 && load.is_finite()) || r.bps() == 0 {
                bail!("--load must be positive and --rate non-zero");
            }
            mean_size * 8.0 * 1e9 / (load * r.bps() as f64)
        }
        _ => bail!("give --mean-gap, or --load with --rate"),
    };
    let timeout = Duration::from_nanos(duration("timeout", &a.timeout)?.max(1));
    let mut gaps = Gaps::new(stream_key(a.seed, u32::MAX), mean_gap_ns, false);
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    let mut at = 0u64;
    let progress = indicatif::ProgressBar::new(a.flows as u64);
    for (i, &bytes) in sizes.iter().enumerate() {
        let dst = dsts[rng.random_range(0..dsts.len())];
        sleep_until(t0 + Duration::from_nanos(at));
        let tx = tx.clone();
        let start_seconds = at as f64 / 1e9;
        let flow = i as u32;
        std::thread::Builder::new()
            .name(format!("flow{flow}"))
            .spawn(move || {
                let r = send_tcp(dst, flow, bytes, timeout);
                let (fct, error) = match r {
                    Ok(f) => (Some(f), None),
                    Err(e) => (None, Some(format!("{e:#}"))),
                };
                let _ = tx.send(TcpFlow {
                    flow,
                    dst: dst.to_string(),
                    bytes,
                    start_seconds,
                    fct_seconds: fct,
                    throughput_bps: fct.map(|f| bytes as f64 * 8.0 / f.max(1e-9)),
                    error,
                });
            })
            .context("cannot start a flow thread")?;
        progress.inc(1);
        at += gaps.next_ns();
    }
    drop(tx);
    let mut flows: Vec<TcpFlow> = rx.iter().collect();
    progress.finish_and_clear();
    flows.sort_by_key(|f| f.flow);
    let failed = flows.iter().filter(|f| f.error.is_some()).count();
    let done: Vec<f64> = flows.iter().filter_map(|f| f.fct_seconds).collect();
    let avg = done.iter().sum::<f64>() / done.len().max(1) as f64;
    eprintln!("{} flows, {failed} failed, average FCT {:.1} ms, in {:.1} s", flows.len(), avg * 1e3, t0.elapsed().as_secs_f64());
    write_json(&a.out, &serde_json::json!({ "flows": flows }))
}

// -------------------------------------------------------------- recv ---

fn recv(a: RecvArgs) -> Result<()> {
    let idle = duration("idle", &a.idle)?;
    let max = duration("max", &a.max)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("signal handler")?;
    }
    let listener = TcpListener::bind(a.listen).with_context(|| format!("TCP listen on {}", a.listen))?;
    listener.set_nonblocking(true)?;
    let sock = UdpSocket::bind(a.listen).with_context(|| format!("UDP bind {}", a.listen))?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let last_activity = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let touch = |m: &std::sync::Mutex<Option<Instant>>| {
        if let Ok(mut g) = m.lock() {
            *g = Some(Instant::now());
        }
    };
    // TCP: accept in its own thread, one thread per connection; the run is
    // not idle while a connection is open.
    let active = Arc::new(AtomicUsize::new(0));
    let (tcp_stop, tcp_seen, tcp_active) = (stop.clone(), last_activity.clone(), active.clone());
    let acceptor = std::thread::spawn(move || {
        let mut errors = 0u64;
        while !tcp_stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => {
                    touch(&tcp_seen);
                    let (seen, active) = (tcp_seen.clone(), tcp_active.clone());
                    active.fetch_add(1, Ordering::Relaxed);
                    let _ = s.set_nonblocking(false);
                    std::thread::spawn(move || {
                        // A failed flow shows at its sender (no confirmation).
                        let _ = serve_tcp(s);
                        touch(&seen);
                        active.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => errors += 1,
            }
        }
        errors
    });
    let started = Instant::now();
    let mut flows: BTreeMap<(SocketAddr, u32), UdpReceived> = BTreeMap::new();
    let mut foreign = 0u64;
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                touch(&last_activity);
                if account(&mut flows, from, &buf[..n], now_ns()).is_none() {
                    foreign += 1;
                }
            }
            // A timeout, or a signal (Ctrl-C, SIGTERM: the loop condition ends it).
            Err(e)
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => {}
            Err(e) => return Err(e).context("UDP receive"),
        }
        let last = last_activity.lock().map(|g| *g).unwrap_or(None);
        if idle > 0 && active.load(Ordering::Relaxed) == 0 && last.is_some_and(|t| t.elapsed() >= Duration::from_nanos(idle)) {
            break;
        }
        if max > 0 && started.elapsed() >= Duration::from_nanos(max) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let tcp_accept_errors = acceptor.join().unwrap_or(0);
    let mut out: Vec<UdpReceived> = flows.into_values().collect();
    for f in &mut out {
        f.finish();
    }
    eprintln!("{} UDP flows, {foreign} foreign datagrams", out.len());
    write_json(&a.out, &serde_json::json!({ "flows": out, "foreign_datagrams": foreign, "tcp_accept_errors": tcp_accept_errors }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_exponential_with_the_given_mean() {
        let mut g = Gaps::new(7, 4_200_000.0, false);
        let v: Vec<f64> = (0..100_000).map(|_| g.next_ns() as f64).collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!((mean / 4.2e6 - 1.0).abs() < 0.01, "mean {mean}");
        // Exponential: standard deviation = mean; P(gap > mean) = 1/e.
        assert!((var.sqrt() / mean - 1.0).abs() < 0.02, "sd {}", var.sqrt());
        let above = v.iter().filter(|&&x| x > 4.2e6).count() as f64 / v.len() as f64;
        assert!((above - (-1f64).exp()).abs() < 0.01, "{above}");
        let mut c = Gaps::new(7, 1000.0, true);
        assert_eq!(c.next_ns(), 1000);
    }

    #[test]
    fn the_receiver_counts_loss_reordering_and_throughput_per_flow() {
        let from: SocketAddr = "10.0.0.2:4000".parse().expect("addr");
        let mut flows = BTreeMap::new();
        let dgram = |flow: u32, seq: u32, tx: u64| {
            let mut d = vec![0u8; 1472];
            d[0..4].copy_from_slice(&MAGIC.to_be_bytes());
            d[4..8].copy_from_slice(&flow.to_be_bytes());
            d[8..12].copy_from_slice(&seq.to_be_bytes());
            d[12..16].copy_from_slice(&5u32.to_be_bytes());
            d[16..24].copy_from_slice(&tx.to_be_bytes());
            d
        };
        // Five sent, seq 2 lost, 4 before 3; 1 ms apart, 100 µs one way.
        for (seq, rx) in [(0, 1_100_000), (1, 2_100_000), (4, 5_100_000), (3, 5_200_000)] {
            account(&mut flows, from, &dgram(1, seq, 1_000_000 * (seq as u64 + 1)), rx).expect("ours");
        }
        assert!(account(&mut flows, from, b"not ours", 0).is_none());
        let mut f = flows.remove(&(from, 1)).expect("flow 1");
        f.finish();
        assert_eq!((f.packets, f.lost, f.reordered, f.bytes), (4, 1, 1, 6000));
        assert!((f.throughput_bps - 6000.0 * 8.0 / 4.1e-3).abs() < 1e-6);
        assert!((f.fct_seconds - 4.2e-3).abs() < 1e-12, "first departure 1 ms to last arrival 5.2 ms");
    }
}
