//! Real-time fabrics through the `weft` binary: emu-node processes, QUIC and
//! UDP links, TAP hosts in network namespaces running iperf3 and ping,
//! runtime link changes, captures read by tshark, authentication of the
//! control channel, and cleanup.
//!
//! Needs root, /dev/net/tun, iproute2, iperf3, ping and tshark: those tests
//! are `#[ignore]` with the reason, so a plain `cargo test` lists them as
//! ignored, and `scripts/test` runs them (`--include-ignored`) as root or in
//! CI. In CI (`CI=true`) a missing prerequisite fails the test; elsewhere,
//! when included, it prints why it skips. Tests run one at a time (they share two cores and
//! measure rates). Every fabric uses its own state directory and namespace
//! prefix, and is torn down (and checked for leftovers) also on failure.
//! Traffic stays inside the namespaces the tests create and on loopback.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn weft_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weft"))
}

/// Whether the prerequisites exist; panics in CI when they do not.
fn prerequisites(tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        missing.push("root".to_string());
    }
    if !Path::new("/dev/net/tun").exists() {
        missing.push("/dev/net/tun".into());
    }
    for t in tools {
        let found = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(t).is_file())).unwrap_or(false);
        if !found {
            missing.push((*t).to_string());
        }
    }
    if !weft_bin().with_file_name("emu-node").exists() {
        missing.push("the emu-node binary next to weft (cargo build --release)".into());
    }
    if missing.is_empty() {
        return true;
    }
    // As root (or in CI) the test could run: scripts/test installs the
    // tools and builds emu-node, so a missing one fails the test instead of
    // passing it unrun.
    // SAFETY: geteuid has no preconditions.
    if std::env::var("CI").is_ok_and(|v| v == "true") || unsafe { libc::geteuid() } == 0 {
        panic!("real-time test prerequisites missing: {} (scripts/test installs them as root)", missing.join(", "));
    }
    eprintln!("SKIPPED {}: missing {}", std::thread::current().name().unwrap_or("real-time test"), missing.join(", "));
    false
}

fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("w{}{}{}-", std::process::id() % 10000, tag, N.fetch_add(1, Ordering::Relaxed))
}

/// A live fabric started with `weft up --detach`, torn down on drop.
struct Fabric {
    dir: PathBuf,
    prefix: String,
}

impl Fabric {
    fn weft(dir: &Path, args: &[&str]) -> Output {
        Command::new(weft_bin()).args(args).env("WEFT_STATE_DIR", dir).output().expect("run weft")
    }

    fn up(topology: &str, extra: &[&str]) -> Fabric {
        let prefix = unique("");
        let dir = std::env::temp_dir().join(format!("weft-test-{}", prefix.trim_end_matches('-')));
        let _ = std::fs::remove_dir_all(&dir);
        let mut args = vec!["up", topology, "--detach", "--netns-prefix", &prefix];
        args.extend_from_slice(extra);
        let out = Fabric::weft(&dir, &args);
        let f = Fabric { dir, prefix };
        assert!(out.status.success(), "weft up failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        f
    }

    fn run(&self, args: &[&str]) -> Output {
        Fabric::weft(&self.dir, args)
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "weft {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn ns(&self, host: &str) -> String {
        format!("{}{host}", self.prefix)
    }

    fn exec(&self, host: &str, cmd: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(host)]).args(cmd);
        c
    }

    fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).expect("status json")
    }

    fn pids(&self) -> Vec<u32> {
        let st: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(self.dir.join("fabric.json")).unwrap_or_default()).unwrap_or_default();
        let mut v: Vec<u32> =
            st["processes"].as_object().map(|m| m.values().filter_map(|p| p.as_u64()).map(|p| p as u32).collect()).unwrap_or_default();
        if let Some(o) = st["orchestrator"].as_u64() {
            v.push(o as u32);
        }
        v
    }

    /// Names of leftover namespaces of this fabric.
    fn leftover_netns(&self) -> Vec<String> {
        std::fs::read_dir("/run/netns")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&self.prefix))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = self.run(&["down"]);
        // Belt and braces if `weft down` itself failed.
        for ns in self.leftover_netns() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
}

fn assert_clean(pids: &[u32], prefix: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until && pids.iter().any(|&p| alive(p)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let live: Vec<_> = pids.iter().filter(|&&p| alive(p)).collect();
    assert!(live.is_empty(), "processes left: {live:?}");
    let ns: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(prefix)).collect())
        .unwrap_or_default();
    assert!(ns.is_empty(), "namespaces left: {ns:?}");
    let links = String::from_utf8_lossy(&Command::new("ip").args(["-o", "link"]).output().expect("ip link").stdout).into_owned();
    assert!(!links.contains(" wt"), "TAP devices left in the root namespace: {links}");
}

/// Starts `iperf3 -s -1` in `host` and returns the child.
fn iperf_server(f: &Fabric, host: &str, port: u16) -> std::process::Child {
    spawn_iperf_server(f, host, &["iperf3", "-s", "-1", "-p", &port.to_string()], Stdio::null())
}

/// Starts an iperf3 server for one test that prints its JSON result (the
/// receiver's side) when it ends: read it with [`receiver_seconds`].
fn iperf_json_server(f: &Fabric, host: &str, port: u16) -> std::process::Child {
    spawn_iperf_server(f, host, &["iperf3", "-s", "-1", "-J", "-p", &port.to_string()], Stdio::piped())
}

/// Runs `cmd` (an iperf3 server) in `host` and gives it 300 ms to listen.
fn spawn_iperf_server(f: &Fabric, host: &str, cmd: &[&str], stdout: Stdio) -> std::process::Child {
    let c = f.exec(host, cmd).stdout(stdout).stderr(Stdio::null()).spawn().expect("iperf3 -s");
    std::thread::sleep(Duration::from_millis(300));
    c
}

/// The receiver's per-second rates (bit/s) of an [`iperf_json_server`]
/// once its test ended.
fn receiver_seconds(srv: std::process::Child) -> Vec<f64> {
    let out = srv.wait_with_output().expect("iperf3 server");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["intervals"].as_array().map(|a| a.iter().filter_map(|i| i["sum"]["bits_per_second"].as_f64()).collect()).unwrap_or_default()
}

/// Runs an iperf3 client; returns the JSON result.
fn iperf_client(f: &Fabric, host: &str, args: &[&str]) -> serde_json::Value {
    let mut cmd = vec!["iperf3", "-J"];
    cmd.extend_from_slice(args);
    let o = f.exec(host, &cmd).output().expect("iperf3 -c");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert!(v.get("error").is_none() && o.status.success(), "iperf3 failed: {}", String::from_utf8_lossy(&o.stdout));
    v
}

fn received_bps(v: &serde_json::Value) -> f64 {
    v["end"]["sum_received"]["bits_per_second"].as_f64().or_else(|| v["end"]["sum"]["bits_per_second"].as_f64()).unwrap_or(0.0)
}

fn tcp_through_three_processes(links: &str) {
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "3", "--links", links]);
    let st = f.status();
    assert_eq!(st["processes"].as_array().map(|a| a.len()), Some(3));
    let mut srv = iperf_server(&f, "h8", 5201);
    let v = iperf_client(&f, "h0", &["-c", "10.0.1.2", "-t", "4"]);
    let _ = srv.wait();
    let bps = received_bps(&v);
    eprintln!("{links} links: iperf3 TCP h0 -> h8 across 3 emu-node processes: {:.1} Mbit/s", bps / 1e6);
    // Never above the 1 Gbit/s bottleneck (+1 %): the sending ports enforce
    // the rate, not the transport.
    assert!(bps <= 1.01e9, "{bps} bit/s exceeds the 1 Gbit/s bottleneck");
    // TCP works end to end across processes. The issue's goal of >= 90 % of
    // 1 Gbit/s is NOT reached on this 2-core machine (see BENCHMARKS.md,
    // "Real time"); this floor only checks that the path carries TCP.
    assert!(bps >= 150e6, "TCP across 3 processes only reached {bps} bit/s");
    // The transport lost nothing it could not count: per-direction counters exist.
    let st = f.status();
    let transports: usize =
        st["processes"].as_array().unwrap().iter().map(|p| p["report"]["transport"].as_array().map_or(0, |t| t.len())).sum();
    assert!(transports >= 16, "every cross-process link direction reports transport counters, got {transports}");
}

#[test]
#[ignore = "needs root, /dev/net/tun and ip, iperf3: scripts/test runs it (as root, --include-ignored)"]
fn iperf3_tcp_across_three_processes_over_quic_links() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "iperf3"]) {
        return;
    }
    tcp_through_three_processes("quic");
}

#[test]
#[ignore = "needs root, /dev/net/tun and ip, iperf3: scripts/test runs it (as root, --include-ignored)"]
fn iperf3_tcp_across_three_processes_over_udp_links() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "iperf3"]) {
        return;
    }
    tcp_through_three_processes("udp");
}

#[test]
#[ignore = "needs root, /dev/net/tun and ip, iperf3: scripts/test runs it (as root, --include-ignored)"]
fn shaped_100mbit_link_measured_with_iperf3_udp_is_within_1_percent() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "iperf3"]) {
        return;
    }
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "1"]);
    f.ok(&["link", "h8-leaf1", "rate", "100Mbps"]);
    // The receiver's per-second intervals, without the first and the last
    // (start-up and the queue draining after the sender stops).
    let srv = iperf_json_server(&f, "h8", 5202);
    iperf_client(&f, "h0", &["-c", "10.0.1.2", "-p", "5202", "-u", "-b", "130M", "-l", "1400", "-t", "6"]);
    let rates = receiver_seconds(srv);
    assert!(rates.len() >= 5, "receiver intervals: {rates:?}");
    eprintln!("receiver intervals (Mbit/s): {:?}", rates.iter().map(|r| (r / 1e5).round() / 10.0).collect::<Vec<_>>());
    let mut steady = rates[1..rates.len() - 1].to_vec();
    let mean = steady.iter().sum::<f64>() / steady.len() as f64;
    // The shaper's rate is the median second: a second in which the
    // 2-core machine held the process back (seen in CI: one 92.1 among
    // 97.1s) lowers the mean without saying anything of the shaper, whose
    // rate a slow shaper would lower in every second. The mean must still
    // be within 3 %.
    steady.sort_by(f64::total_cmp);
    let got = steady[steady.len() / 2];
    // iperf3 counts UDP payload: 1400 B of every 1442 B Ethernet frame.
    let want = 100e6 * 1400.0 / 1442.0;
    let err = (got - want) / want;
    eprintln!(
        "shaped 100 Mbit/s link: iperf3 UDP received {:.2} Mbit/s payload in the median second ({:.2} mean), expected {:.2} ({:+.2} %)",
        got / 1e6,
        mean / 1e6,
        want / 1e6,
        err * 100.0
    );
    assert!(err.abs() <= 0.01, "achieved {got} bit/s in the median second, expected {want} within 1 %");
    assert!((mean - want).abs() / want <= 0.03, "achieved {mean} bit/s on average, expected {want} within 3 %");
}

/// `ms` as ping prints it: iputils rounds an RTT to the nearest microsecond
/// below 1 ms, 10 us below 10 ms, 100 us below 100 ms and 1 ms above
/// (`ping_common.c`, the `time=` field). A ping that took the configured RTT
/// or more prints at least this, so "never below the configured RTT" is
/// judged against it: a 40.006 ms path that took 40.03 ms prints 40.0.
fn as_ping_prints(ms: f64) -> f64 {
    let unit = if ms < 1.0 {
        0.001
    } else if ms < 10.0 {
        0.01
    } else if ms < 100.0 {
        0.1
    } else {
        1.0
    };
    (ms / unit).round() * unit - unit * 1e-6
}

fn ping_rtts(f: &Fabric, from: &str, to: &str, n: usize) -> Vec<f64> {
    let o = f.exec(from, &["ping", "-n", "-c", &n.to_string(), "-i", "0.02", to]).output().expect("ping");
    let text = String::from_utf8_lossy(&o.stdout);
    let mut v: Vec<f64> = text.lines().filter_map(|l| l.split("time=").nth(1)).filter_map(|t| t.split(' ').next()?.parse().ok()).collect();
    assert!(v.len() >= n * 9 / 10, "ping lost too much: {text}");
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// Runs `round` (numbered from 1) until it says its measurement held, at
/// most `rounds` times, and returns the last one's result: the round to
/// judge. A shared CI machine can stall the emu-nodes for a whole round (CI
/// runs measured a 2.5 ms median RTT across machines and on one machine
/// with a 0.86 ms minimum, where this VM measures 0.7-1.3 ms, busy loops on
/// the cores included, and 6 of 40 frames on one cut link late by 2 ms); a
/// slowdown of weft's own fails every round.
fn until_a_round_holds<T>(rounds: usize, mut round: impl FnMut(usize) -> (T, bool)) -> T {
    let mut k = 1;
    loop {
        let (result, held) = round(k);
        if held || k >= rounds {
            return result;
        }
        k += 1;
    }
}

/// Rounds of 40 pings from h0 to `to` (`until_a_round_holds`, at most 3):
/// frames are held until due, so no round is faster than the configured
/// round trip `expected_ms`; the median of the last round must be within
/// 10 % + `RTT_CONSTANT_MS` of it (a stall of a shared CI machine lasts a
/// round, a slowdown of weft's own fails all three). Returns the last
/// round's RTTs, sorted.
fn ping_rounds_within(f: &Fabric, to: &str, expected_ms: f64, what: &str) -> Vec<f64> {
    let bound = expected_ms * 1.1 + RTT_CONSTANT_MS;
    let rtts = until_a_round_holds(3, |round| {
        let rtts = ping_rtts(f, "h0", to, 40);
        let median = rtts[rtts.len() / 2];
        eprintln!("round {round}: {what}: min {:.3} ms, median {median:.3} ms, configured {expected_ms:.3} ms", rtts[0]);
        assert!(rtts[0] >= as_ping_prints(expected_ms), "{what}: RTT {} ms below the configured {expected_ms} ms", rtts[0]);
        (rtts, median <= bound)
    });
    assert!(rtts[rtts.len() / 2] <= bound, "{what}: median RTT above {bound} ms in 3 rounds, the last {rtts:?}");
    rtts
}

/// Added round-trip latency of the emulation beyond configured delay and
/// serialization on this 2-core VM (kernel ping, TAP, wake-ups of the
/// emu-node processes); documented in README and BENCHMARKS.md.
const RTT_CONSTANT_MS: f64 = 2.0;

#[test]
#[ignore = "needs root, /dev/net/tun and ip, ping: scripts/test runs it (as root, --include-ignored)"]
fn ping_rtt_matches_configured_delay_and_serialization() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "ping"]) {
        return;
    }
    let topo = emu_orchestrator::config::topology::Topology::load("leaf-spine-2x4-rt").expect("topology");
    // h0 -> leaf0 -> spine -> leaf1 -> h8: 4 links each way, all at the same rate and delay.
    let link = &topo.fabric.links[0];
    let frame = 98; // 56 B ICMP payload + 8 ICMP + 20 IP + 14 Ethernet
    let per_hop_ms = (link.delay + link.rate.serialization_ns(frame)) as f64 / 1e6;
    let expected = 8.0 * per_hop_ms;
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "3"]);
    let base = ping_rounds_within(&f, "10.0.1.2", expected, "ping h0 -> h8");
    // A host of the same leaf and /24 (on-link for the kernel) answers too:
    // the ToR does proxy ARP and routes.
    let local = ping_rtts(&f, "h0", "10.0.0.3", 10);
    assert!(local[0] >= 4.0 * per_hop_ms, "same-leaf RTT {} ms", local[0]);
    // The emu-node holding h0 counts its frames in /metrics.
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap_or_default()).expect("state file");
    let tap_frames: f64 = st["metrics"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(|u| u.as_str())
        .filter_map(|u| ureq::get(u).call().ok().and_then(|mut r| r.body_mut().read_to_string().ok()))
        .flat_map(|text| {
            text.lines().filter(|l| l.starts_with("weft_tap_rx_frames_total{host=\"h0\"}")).map(String::from).collect::<Vec<_>>()
        })
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum();
    assert!(tap_frames >= 50.0, "weft_tap_rx_frames_total of h0: {tap_frames} after 50 pings");
    // +2 ms on one link of the path: the same bounds around a path 4 ms longer.
    f.ok(&["link", "h8-leaf1", "delay", "2010us"]);
    let slow = ping_rounds_within(&f, "10.0.1.2", expected + 4.0, "with +2 ms on h8-leaf1");
    eprintln!("added by minima {:.3} ms", slow[0] - base[0]);
    // The faithfulness report: per process, per late node, and a warning
    // exactly when a node's p99 lateness exceeded the smallest link delay
    // (whether it does depends on the machine: on this 2-core VM an idle
    // process wakes up 100-300 us late against 10 us links).
    let report = &f.status()["faithfulness"];
    let smallest = report["smallest_link_delay_ns"].as_u64().unwrap();
    assert_eq!(smallest, link.delay);
    let processes = report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 3, "{report}");
    assert!(processes.iter().all(|p| p["cpu_s"].as_f64().unwrap() > 0.0 && p["wall_s"].as_f64().unwrap() > 1.0), "{report}");
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 6, "the six switches: {report}");
    let over = nodes.iter().any(|n| n["lag_p99_ns"].as_u64().unwrap() > smallest);
    assert_eq!(report["warning"].as_str().is_some(), over, "{report}");
    assert!(metric_sum(&f, "weft_process_cpu_seconds_total", "process=") > 0.0);
    let late: u64 = nodes.iter().map(|n| n["late_frames"].as_u64().unwrap()).sum();
    assert!(metric_sum(&f, "weft_actor_late_frames_total", "actor=") as u64 >= late);
    let file = f.dir.join("report.json");
    let down = f.ok(&["down", "--report", file.to_str().unwrap()]);
    assert!(down.contains("fabric is down") && down.contains("faithfulness (lateness of what each node handled"), "{down}");
    assert_eq!(down.contains("warning: results may be distorted"), over, "{down}");
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["processes"].as_array().map(Vec::len), Some(3));
}

/// What iperf3 TCP h0 -> h15 (10.3.1.3, five switch hops) on
/// fat-tree-k4-rt-tap measured.
struct FiveHops {
    /// The receiver's rate over the whole run (Mbit/s).
    mbps: f64,
    /// The receiver's per-second rates (Mbit/s).
    seconds: Vec<f64>,
    retransmissions: u64,
    segments: u64,
    /// The fabric's faithfulness warning (`weft status`), if it gave one:
    /// a node's p99 lateness exceeded the smallest link delay.
    warning: Option<String>,
}

/// Runs iperf3 TCP over five hops with `nodes` emu-node processes.
fn iperf3_over_five_hops(nodes: &str) -> FiveHops {
    let f = Fabric::up("fat-tree-k4-rt-tap", &["--nodes", nodes]);
    let srv = iperf_json_server(&f, "h15", 5201);
    let v = iperf_client(&f, "h0", &["-c", "10.3.1.3", "-t", "6"]);
    let seconds: Vec<f64> = receiver_seconds(srv).iter().map(|r| r / 1e6).collect();
    assert!(seconds.len() >= 5, "receiver intervals: {seconds:?}");
    let sent = &v["end"]["sum_sent"];
    let retx = sent["retransmits"].as_u64().unwrap_or(u64::MAX);
    // Segments: bytes over the MSS the connection used.
    let mss = v["start"]["tcp_mss_default"].as_u64().filter(|&m| m > 0).unwrap_or(1448);
    let segments = sent["bytes"].as_u64().unwrap_or(0) / mss;
    let st = f.status();
    let taps: Vec<&serde_json::Value> =
        st["processes"].as_array().into_iter().flatten().flat_map(|p| p["report"]["taps"].as_array().into_iter().flatten()).collect();
    assert_eq!(taps.len(), 16, "every TAP host reports its counters");
    // (name, frames read, NIC-queue drops, link-down drops)
    let nic_drops: u64 = taps.iter().map(|t| t[2].as_u64().unwrap_or(u64::MAX)).sum();
    assert_eq!(nic_drops, 0, "a TAP host's NIC model dropped frames: the kernel must be held back instead");
    let warning = st["faithfulness"]["warning"].as_str().map(str::to_string);
    FiveHops { mbps: received_bps(&v) / 1e6, seconds, retransmissions: retx, segments, warning }
}

/// The goal for TAP hosts: a NIC of its link rate back-pressures
/// the kernel, so TCP through the fabric runs at the link rate without
/// loss at the host edge; on a machine too loaded for that, the fabric's
/// faithfulness report says so.
#[test]
#[ignore = "needs root, /dev/net/tun and ip, iperf3: scripts/test runs it (as root, --include-ignored)"]
fn iperf3_tcp_over_five_hops_at_100mbit_reaches_93_percent_or_warns_with_few_retransmissions() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "iperf3"]) {
        return;
    }
    for nodes in ["1", "3"] {
        let m = iperf3_over_five_hops(nodes);
        let (retx, segments) = (m.retransmissions, m.segments);
        eprintln!(
            "fat-tree-k4-rt-tap, {nodes} process(es): iperf3 TCP h0 -> h15 {:.1} Mbit/s (receiver's seconds {:?}), {retx} retransmissions of {segments} segments",
            m.mbps,
            m.seconds.iter().map(|r| (r * 10.0).round() / 10.0).collect::<Vec<_>>()
        );
        // TCP's ceiling at a 1500-byte MTU is 94.1-95.4 % of the link rate
        // (with and without preamble and gap); an idle 2-core machine
        // gives 91.4-95.1 Mbit/s. The host's qdisc and the NIC model pace
        // at the same rate, so link time the NIC model lost while its
        // reader waited for a core is never made up: in a CI run, with
        // the emu-nodes, both iperf3 ends and their kernel stacks on two
        // cores, 85.0 (BENCHMARKS.md, "TAP hosts as NICs of their link
        // rate"). The rate is then the machine's, and what weft owes is
        // to say so: below 93 Mbit/s the fabric's faithfulness report must
        // warn that results may be distorted, and the NIC model must
        // still keep the link mostly busy and lose nothing (the
        // retransmissions and the NIC's drops).
        eprintln!("faithfulness warning: {:?}", m.warning);
        assert!(m.mbps <= 101.0, "{nodes} process(es): {:.1} Mbit/s on 100 Mbit/s links", m.mbps);
        assert!(
            m.mbps >= 93.0 || (m.warning.is_some() && m.mbps >= 80.0),
            "{nodes} process(es): {:.1} Mbit/s on 100 Mbit/s links, faithfulness warning {:?}",
            m.mbps,
            m.warning
        );
        assert!(
            segments > 30_000 && retx * 1000 < segments,
            "{nodes} process(es): {retx} retransmissions of {segments} segments (>= 0.1 %)"
        );
    }
}

/// Item 1: with segmentation offload (the default) a host's
/// kernel hands its NIC 64 KB TCP super-frames; the fabric sees only MTU
/// frames (tshark on the access link), every switch counts one frame per
/// MTU segment, and 100 MB copied with a plain TCP connection arrive
/// byte-exact; with ECMP and with ConWeave.
#[test]
#[ignore = "needs root, /dev/net/tun and ip, nc, tshark: scripts/test runs it (as root, --include-ignored)"]
fn tap_offload_super_frames_reach_the_fabric_as_mtu_frames_and_data_arrive_byte_exact() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "nc", "tshark"]) {
        return;
    }
    const BYTES: usize = 100_000_000;
    for scheme in ["ecmp", "conweave"] {
        let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "1", "--scheme", scheme]);
        // Data no compressor or coincidence can fake: a xorshift stream.
        let (src, dst) = (f.dir.join("in.bin"), f.dir.join("out.bin"));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..BYTES / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect();
        std::fs::write(&src, &data).unwrap();
        let pcap = f.dir.join("h0.pcap");
        f.ok(&["capture", "h0-leaf0", "--pcap", pcap.to_str().unwrap(), "--count", "5000"]);
        let mut rx = f.exec("h8", &["nc", "-l", "5000"]).stdout(std::fs::File::create(&dst).unwrap()).spawn().expect("nc -l");
        std::thread::sleep(Duration::from_millis(300));
        let tx = f.exec("h0", &["timeout", "60", "nc", "-N", "10.0.1.2", "5000"]).stdin(std::fs::File::open(&src).unwrap()).status();
        let until = Instant::now() + Duration::from_secs(30);
        while rx.try_wait().ok().flatten().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = rx.kill();
        assert!(tx.is_ok_and(|s| s.success()), "{scheme}: the sending nc failed");
        let got = std::fs::read(&dst).unwrap_or_default();
        assert!(got.len() == data.len() && got == data, "{scheme}: received {} of {} bytes, or different bytes", got.len(), data.len());
        // The host sent super-frames; its NIC cut them. (Health reports
        // come every 500 ms: wait for one made after the transfer.)
        std::thread::sleep(Duration::from_millis(1200));
        let st = f.status();
        let taps: Vec<&serde_json::Value> =
            st["processes"].as_array().into_iter().flatten().flat_map(|p| p["report"]["taps"].as_array().into_iter().flatten()).collect();
        let tap = |h: &str| {
            taps.iter()
                .find(|t| t[0] == f.ns(h).as_str())
                .map(|t| (t[1].as_u64().unwrap_or(0), t[4].as_u64().unwrap_or(0)))
                .unwrap_or_default()
        };
        let ((h0_frames, h0_super), (h8_frames, _)) = (tap("h0"), tap("h8"));
        eprintln!("{scheme}: h0 sent {h0_frames} frames cut from {h0_super} super-frames; h8 sent {h8_frames}");
        assert!(h0_super > 100, "{scheme}: h0's kernel handed over only {h0_super} super-frames");
        // Every switch counted MTU segments, one each: the spines carried
        // every frame of h0 and h8 but their ARP requests (answered by the ToRs).
        assert!(h0_frames as usize >= BYTES / 1460, "{scheme}: {h0_frames} frames for {BYTES} bytes");
        let spines: u64 = st["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["report"]["actors"].as_array().into_iter().flatten())
            .filter(|a| a["name"].as_str().is_some_and(|n| n.starts_with("spine")))
            .map(|a| a["rx_frames"].as_u64().unwrap_or(0))
            .sum();
        let hosts = h0_frames + h8_frames;
        assert!(spines <= hosts && hosts - spines <= 8, "{scheme}: spines received {spines} frames, hosts sent {hosts}");
        // Only MTU frames on the wire.
        let t =
            Command::new("tshark").arg("-r").arg(&pcap).args(["-T", "fields", "-e", "frame.len"]).stderr(Stdio::null()).output().unwrap();
        let lens: Vec<usize> = String::from_utf8_lossy(&t.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect();
        let full = lens.iter().filter(|&&l| l == 1514).count();
        assert!(lens.len() >= 1000 && full >= 500, "{scheme}: capture of {} frames, {full} of 1514 bytes", lens.len());
        assert!(lens.iter().all(|&l| l <= 1514), "{scheme}: a frame longer than the MTU on h0-leaf0: {:?}", lens.iter().max());
    }
}

#[test]
#[ignore = "needs root, /dev/net/tun and ip, iperf3: scripts/test runs it (as root, --include-ignored)"]
fn link_down_moves_ecmp_traffic_and_iperf3_keeps_running() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "iperf3"]) {
        return;
    }
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "2"]);
    let spine_rx = |f: &Fabric| -> Vec<u64> {
        let st = f.status();
        let mut v = vec![0u64; 4];
        for p in st["processes"].as_array().unwrap() {
            for a in p["report"]["actors"].as_array().into_iter().flatten() {
                if let Some(i) = a["name"].as_str().and_then(|n| n.strip_prefix("spine")).and_then(|i| i.parse::<usize>().ok()) {
                    v[i] = a["rx_frames"].as_u64().unwrap_or(0);
                }
            }
        }
        v
    };
    // Two flows into h8 share its 1 Gbit/s downlink; ECMP spreads them over spines.
    let mut s1 = iperf_server(&f, "h8", 5203);
    let mut s2 = iperf_server(&f, "h8", 5204);
    let c1 = f.exec("h0", &["iperf3", "-J", "-c", "10.0.1.2", "-p", "5203", "-t", "6"]).stdout(Stdio::piped()).spawn().unwrap();
    let c2 = f
        .exec("h1", &["iperf3", "-J", "-c", "10.0.1.2", "-p", "5204", "-t", "6", "--cport", "40001"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let a = spine_rx(&f);
    std::thread::sleep(Duration::from_millis(500));
    let b = spine_rx(&f);
    let busy = (0..4).max_by_key(|&i| b[i] - a[i]).unwrap();
    assert!(b[busy] > a[busy], "some spine carries the flows: {a:?} -> {b:?}");
    let link = format!("leaf0-spine{busy}");
    f.ok(&["link", &link, "down"]);
    std::thread::sleep(Duration::from_millis(300));
    let c = spine_rx(&f);
    std::thread::sleep(Duration::from_millis(700));
    let d = spine_rx(&f);
    // Upstream frames leave leaf0 only on live uplinks; the downed spine only
    // still sees leaf1's (reverse) traffic if any, never leaf0's data.
    let moved: u64 = (0..4).filter(|&i| i != busy).map(|i| d[i] - c[i]).sum();
    assert!(moved > 0, "traffic moved to the other spines: {c:?} -> {d:?}");
    f.ok(&["link", &link, "up"]);
    let o1 = c1.wait_with_output().unwrap();
    let o2 = c2.wait_with_output().unwrap();
    let _ = (s1.wait(), s2.wait());
    for o in [&o1, &o2] {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        assert!(v.get("error").is_none(), "iperf3 kept running through the failure: {}", String::from_utf8_lossy(&o.stdout));
        let intervals = v["intervals"].as_array().map_or(0, |i| i.len());
        assert!(intervals >= 5, "iperf3 ran through: {intervals} intervals");
        let bps = received_bps(&v);
        assert!(bps > 10e6, "flow kept making progress: {bps}");
    }
    let sum = received_bps(&serde_json::from_slice(&o1.stdout).unwrap_or_default())
        + received_bps(&serde_json::from_slice(&o2.stdout).unwrap_or_default());
    assert!(sum <= 1.01e9, "two flows sharing h8's 1 Gbit/s link got {sum} bit/s together");
    // After `up` the link forwards again: 64 UDP datagrams from as many
    // source ports (bash picks a fresh one per redirect) hash over all four
    // uplinks; none on the restored spine has probability 0.75^64.
    let e = spine_rx(&f);
    let o = f.exec("h0", &["bash", "-c", "for i in $(seq 64); do printf x > /dev/udp/10.0.1.2/9; done"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::thread::sleep(Duration::from_millis(700));
    let g = spine_rx(&f);
    assert!(g[busy] > e[busy], "restored link carries traffic again: {e:?} -> {g:?}");
}

#[test]
#[ignore = "needs root, /dev/net/tun and tshark: scripts/test runs it (as root, --include-ignored)"]
fn capture_of_synthetic_roce_is_read_by_tshark_as_infiniband_bth() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["tshark"]) {
        return;
    }
    let dir = std::env::temp_dir().join(unique("cap"));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("l.pcap");
    // Runs a RoCE flow h0 -> h8 capturing `link`; returns tshark's BTH rows.
    let capture = |link: &str| -> String {
        let o = Command::new(weft_bin())
            .args(["run", "leaf-spine-2x4-rt-synthetic", "--clock", "real", "--transport", "roce-lossless", "--traffic", "pair:0:8"])
            .args(["--flow-size", "100KB", "--quiet", "--out"])
            .arg(&dir)
            .arg("--capture")
            .arg(format!("{link}={}", pcap.display()))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let t = Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .args([
                "-Y",
                "infiniband",
                "-T",
                "fields",
                "-e",
                "infiniband.bth.opcode",
                "-e",
                "infiniband.bth.psn",
                "-e",
                "infiniband.bth.destqp",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&t.stdout).into_owned()
    };
    // The flow may hash onto another spine: its first hop always carries it.
    let mut text = capture("leaf0-spine0");
    if text.trim().is_empty() {
        text = capture("h0-leaf0");
    }
    // A real-time run writes how faithful its timing was beside its results.
    let f: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("faithfulness.json")).unwrap()).unwrap();
    assert_eq!(f["processes"].as_array().map(Vec::len), Some(1), "{f}");
    assert!(f["nodes"].as_array().is_some_and(|n| n.iter().any(|n| n["name"] == "leaf0" && n["frames"].as_u64() > Some(50))), "{f}");
    let _ = std::fs::remove_dir_all(&dir);
    let rows: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    eprintln!("tshark decoded {} BTH frames, first: {:?}", rows.len(), rows.first());
    assert!(rows.len() >= 50, "tshark should decode the RoCEv2 frames as InfiniBand BTH: {text}");
    // Opcodes of RDMA WRITE First (6) / Middle (7) / Last (8) and ACK (17) appear.
    assert!(rows.iter().any(|r| r.starts_with("6\t") || r.starts_with("7\t") || r.starts_with("17\t")), "{text}");
}

#[test]
#[ignore = "needs root, /dev/net/tun and ip, tshark, bash: scripts/test runs it (as root, --include-ignored)"]
fn weft_capture_of_a_live_link_is_read_by_tshark_with_bth_fields() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "tshark", "bash"]) {
        return;
    }
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "2"]);
    // Outside the state directory, which `weft down` cleans.
    let pcap = std::env::temp_dir().join(format!("{}live.pcap", f.prefix));
    let out = f.ok(&["capture", "h0-leaf0", "--pcap", pcap.to_str().unwrap(), "--count", "40"]);
    assert!(out.contains("capturing 40 frames of h0-leaf0"), "{out}");
    // RoCEv2 WRITE Middle (BTH opcode 7, dest QP 0x11, PSN 7) with a valid
    // ICRC from inside h0 (the edge refuses a bad one), three times:
    // UDP port 4791 decodes as InfiniBand in tshark.
    let sent = hostile_host(&f, "h0", "10.0.1.2", &["--benign", "--repeat", "3"]);
    assert_eq!(sent["sent"]["benign"].as_u64(), Some(9), "{sent}");
    assert!(f.run(&["capture", "no-such-link", "--pcap", "/tmp/x.pcap"]).status.code() == Some(1), "an unknown link is an error");
    // Fewer than 40 frames crossed the link: `weft down` closes the pcap.
    std::thread::sleep(Duration::from_millis(500));
    f.ok(&["down"]);
    let out = tshark_infiniband(&pcap, &["infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn"]);
    let _ = std::fs::remove_file(&pcap);
    let rows: Vec<String> = out.lines().map(str::to_string).collect();
    assert!(rows.len() >= 3 && rows.iter().all(|r| r == "7\t0x000011\t7"), "tshark BTH fields: {rows:?}");
}

#[test]
fn synthetic_roce_in_real_time_delivers_the_same_bytes_as_virtual_time() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(unique("roce"));
    let run = |clock: &str, nodes: &str| -> serde_json::Value {
        let out = dir.join(format!("{clock}{nodes}"));
        let o = Command::new(weft_bin())
            .args(["run", "leaf-spine-2x4-rt-synthetic", "--clock", clock, "--transport", "roce-irn", "--traffic", "permutation"])
            .args(["--flow-size", "300KB", "--quiet", "--nodes", nodes, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
    };
    let v = run("virtual", "0");
    let r = run("real", "0");
    // Switches in three emu-node processes, hosts in weft's: every frame
    // crosses two to four process boundaries.
    let m = run("real", "3");
    let _ = std::fs::remove_dir_all(&dir);
    let bytes = |s: &serde_json::Value| -> Vec<(String, String, u64)> {
        let mut v: Vec<_> = s["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["src"].as_str().unwrap_or("").to_string(),
                    f["dst"].as_str().unwrap_or("").to_string(),
                    f["bytes_delivered"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        v.sort();
        v
    };
    let (bv, br, bm) = (bytes(&v), bytes(&r), bytes(&m));
    assert_eq!(bv.len(), 16);
    assert!(bv.iter().all(|f| f.2 == 300_000), "virtual time delivers every byte: {bv:?}");
    assert_eq!(bv, br, "real time delivers the same bytes per flow as virtual time");
    assert_eq!(bv, bm, "real time across processes delivers the same bytes per flow as virtual time");
    assert!(m["traffic"].as_str().unwrap_or("").contains("emu-node processes"), "{}", m["traffic"]);
    assert_eq!(m["switches"].as_array().map(|s| s.len()), Some(6), "switch results come back from the emu-node");
}

/// `weft run TOPO --clock CLOCK --nodes NODES` of a 4 MB UDP flow from
/// host 0 to host 1 for at most 400 ms of fabric time; its `summary.json`
/// (the output goes next to the topology file).
fn run_pair_flow(topo: &Path, clock: &str, nodes: &str) -> serde_json::Value {
    let out = topo.with_file_name(format!("{clock}{nodes}"));
    let o = Command::new(weft_bin())
        .arg("run")
        .arg(topo)
        .args(["--clock", clock, "--nodes", nodes, "--traffic", "pair:0:1", "--flow-size", "4MB", "--until", "400ms", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

/// A topology file in a fresh temporary directory: one switch `l0`
/// running `scheme` between hosts `a0` and `a1` on 1 Gbit/s links, and
/// `events`; returns its path.
fn one_path_topology(tag: &str, scheme: &str, events: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(tag));
    std::fs::create_dir_all(&dir).unwrap();
    let topo = dir.join("t.toml");
    let text = format!(
        "name = \"{tag}\"\n[switches]\nscheme = \"{scheme}\"\n[[switch]]\nname = \"l0\"\nrole = \"leaf\"\n\
         [[host]]\nname = \"a0\"\n[[host]]\nname = \"a1\"\n\
         [[link]]\na = \"a0\"\nb = \"l0\"\nrate = \"1Gbps\"\n[[link]]\na = \"l0\"\nb = \"a1\"\nrate = \"1Gbps\"\n{events}"
    );
    std::fs::write(&topo, text).unwrap();
    topo
}

#[test]
fn topology_link_schedule_applies_in_real_time() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // One path a0 - l0 - a1 at 1 Gbit/s; the l0-a1 link fails at 5 ms of
    // fabric time and comes back at 200 ms. A 4 MB UDP flow takes ~33 ms:
    // what is sent between 5 and 200 ms is lost.
    let topo = one_path_topology(
        "sched",
        "ecmp",
        "[[events]]\nat = \"5ms\"\nlink = \"l0-a1\"\naction = \"down\"\n[[events]]\nat = \"200ms\"\nlink = \"l0-a1\"\naction = \"up\"\n",
    );
    let dir = topo.parent().unwrap().to_path_buf();
    let v = run_pair_flow(&topo, "virtual", "0");
    let r = run_pair_flow(&topo, "real", "0");
    let _ = std::fs::remove_dir_all(&dir);
    let delivered = |s: &serde_json::Value| s["flows"][0]["bytes_delivered"].as_u64().unwrap_or(0);
    let (dv, dr) = (delivered(&v), delivered(&r));
    eprintln!("4 MB over a link down from 5 to 200 ms: delivered {dv} B (virtual), {dr} B (real)");
    // 5 ms at 1 Gbit/s is ~600 KB: both clocks lose the rest of the flow.
    assert!(dv < 1_000_000 && dr < 1_000_000, "virtual {dv}, real {dr}");
    assert!(dr > 300_000, "real time delivered what was sent before the failure: {dr}");
}

#[test]
#[ignore = "needs root, /dev/net/tun and ip: scripts/test runs it (as root, --include-ignored)"]
fn no_leftovers_after_down_sigint_and_kill_9_of_the_orchestrator() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip"]) {
        return;
    }
    // 1. weft down.
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "2"]);
    let (pids, prefix) = (f.pids(), f.prefix.clone());
    assert!(!f.leftover_netns().is_empty(), "namespaces exist while up");
    let out = f.ok(&["down"]);
    assert!(out.contains("fabric is down"), "weft down answers once the fabric is down: {out}");
    assert_clean(&pids, &prefix);
    drop(f);

    // 2. SIGINT to a foreground `weft up`.
    let prefix = unique("int");
    let dir = std::env::temp_dir().join(format!("weft-test-{}", prefix.trim_end_matches('-')));
    let mut child = Command::new(weft_bin())
        .args(["up", "leaf-spine-2x4-rt", "--nodes", "2", "--netns-prefix", &prefix])
        .env("WEFT_STATE_DIR", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    let mut pids = Vec::new();
    while Instant::now() < until {
        if let Ok(s) = std::fs::read_to_string(dir.join("fabric.json")) {
            let v: serde_json::Value = serde_json::from_str(&s).unwrap_or_default();
            if v["phase"] == "running" {
                pids = v["processes"].as_object().unwrap().values().filter_map(|p| p.as_u64()).map(|p| p as u32).collect();
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!pids.is_empty(), "foreground weft up came up");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(status.success(), "weft up exits cleanly on Ctrl-C: {status}");
    pids.push(child.id());
    assert_clean(&pids, &prefix);
    let _ = std::fs::remove_dir_all(&dir);

    // 3. kill -9 of the orchestrator, then `weft down`.
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "2"]);
    let (pids, prefix) = (f.pids(), f.prefix.clone());
    let orch = *pids.last().unwrap();
    // SAFETY: killing the orchestrator this test started.
    unsafe { libc::kill(orch as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(200));
    let out = f.ok(&["down"]);
    assert!(out.contains("removed leftover") || out.contains("no fabric"), "{out}");
    assert_clean(&pids, &prefix);
}

#[test]
fn killed_emu_node_is_reported_with_its_links_within_2_s() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Synthetic hosts: no namespaces needed.
    let f = Fabric::up("leaf-spine-2x4-rt-synthetic", &["--nodes", "3"]);
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap()).unwrap();
    let victim = st["processes"]["2"].as_u64().unwrap() as i32;
    let t0 = Instant::now();
    // SAFETY: killing an emu-node this test started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let mut reported = None;
    while t0.elapsed() < Duration::from_secs(2) {
        let s = f.status();
        if let Some(e) = s["events"].as_array().and_then(|e| e.first()).and_then(|e| e.as_str()) {
            reported = Some((t0.elapsed(), e.to_string(), s));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (after, event, s) = reported.expect("the death of emu-node 2 is reported within 2 s");
    eprintln!("reported after {after:?}: {event}");
    assert!(event.contains("emu-node 2") && event.contains("leaf0-spine0") && event.contains("spine0"), "{event}");
    let dead = s["processes"].as_array().unwrap().iter().find(|p| p["process"] == 2).unwrap();
    assert_eq!(dead["state"], "dead");
}

#[test]
fn control_channel_refuses_a_wrong_token_and_a_wrong_certificate() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fabric::up("leaf-spine-2x4-rt-synthetic", &["--nodes", "1"]);
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap()).unwrap();
    let (control, pin) = (st["control"].as_str().unwrap().to_string(), st["pin"].as_str().unwrap().to_string());
    let emu = weft_bin().with_file_name("emu-node");
    let node = |pin: &str, token: &str| {
        Command::new(&emu).args(["--control", &control, "--pin", pin, "--process", "0"]).env("WEFT_TOKEN", token).output().unwrap()
    };
    let o = node(&pin, "not-the-token");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("refused"), "a client without the token is refused: {err}");
    let other = "0".repeat(64);
    let o = node(&other, "whatever");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("certificate"), "a server with another certificate is refused: {err}");
    // The fabric is unaffected.
    let s = f.status();
    assert!(s["processes"].as_array().unwrap().iter().all(|p| p["state"] == "running"));
}

/// The VM image the rxe tests share: `weft up` builds it there on first use.
fn test_vm_image() -> String {
    std::env::temp_dir().join("weft-test-vm-image").display().to_string()
}

/// A weft command's combined output and exit status.
fn weft_in(f: &Fabric, args: &[&str]) -> (i32, String) {
    let o = f.run(args);
    (o.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// `weft exec HOST -- ARGS` in the background (a server).
fn weft_exec_bg(f: &Fabric, host: &str, args: &[&str]) -> std::process::Child {
    Command::new(weft_bin())
        .args(["exec", host, "--"])
        .args(args)
        .env("WEFT_STATE_DIR", &f.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weft exec")
}

/// The VM hosts' qemu pids from `weft status`.
fn qemu_pids(f: &Fabric) -> Vec<u32> {
    let s = f.status();
    s["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["report"]["vms"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v["pid"].as_u64())
        .map(|p| p as u32)
        .collect()
}

/// A counter of the receiving rxe (`rdma statistic`).
fn rxe_counter(f: &Fabric, host: &str, name: &str) -> u64 {
    let (rc, out) = weft_in(f, &["exec", host, "--", "rdma", "statistic", "show", "link", "rxe0/1"]);
    assert_eq!(rc, 0, "{out}");
    let words: Vec<&str> = out.split_whitespace().collect();
    words.windows(2).find(|w| w[0] == name).and_then(|w| w[1].parse().ok()).unwrap_or_else(|| panic!("no {name} in {out}"))
}

/// The InfiniBand frames of a pcap as tab-separated `fields` (tshark).
fn tshark_infiniband(pcap: &Path, fields: &[&str]) -> String {
    let mut c = Command::new("tshark");
    c.arg("-r").arg(pcap).args(["-Y", "infiniband", "-T", "fields"]);
    for f in fields {
        c.args(["-e", f]);
    }
    String::from_utf8_lossy(&c.output().expect("tshark").stdout).into_owned()
}

/// Runs the perftest or ibverbs `tool` between two VM hosts (server in
/// `server`, client in `client` toward `ip`); returns the client's output.
///
/// perftest calibrates the guest's CPU clock before it reports, by a linear
/// fit of cycles against time; in a guest that waits for a core (a loaded
/// 2-core CI machine) the fit can fall below its r² threshold and the tool
/// exits with "Can't produce a report" after a good transfer. Only that
/// failure is retried, at most twice; any other failure fails the test.
fn rdma_pair(f: &Fabric, server: &str, client: &str, ip: &str, tool: &[&str]) -> String {
    const CLOCK_CALIBRATION_FAILED: &str = "Correlation coefficient";
    for attempt in 1..=3 {
        let srv = weft_exec_bg(f, server, tool);
        // The server listens on its TCP port for the exchange of QP numbers.
        std::thread::sleep(Duration::from_millis(1500));
        let mut args = vec!["exec", client, "--"];
        args.extend_from_slice(tool);
        args.push(ip);
        let (rc, out) = weft_in(f, &args);
        let s = srv.wait_with_output().expect("server");
        let sout = String::from_utf8_lossy(&s.stdout);
        if rc == 0 && s.status.success() {
            return out;
        }
        let calibration = out.contains(CLOCK_CALIBRATION_FAILED) || sout.contains(CLOCK_CALIBRATION_FAILED);
        assert!(calibration && attempt < 3, "{tool:?}: client rc {rc}: {out}\nserver {}: {sout}", s.status);
        eprintln!("{tool:?}: perftest's guest clock calibration failed (attempt {attempt}), again: {out}");
    }
    unreachable!("the loop returns or fails on its last attempt")
}

/// Two soft-RoCE VM hosts on different leaves of a 1 Gbit/s fabric: they
/// boot from the image weft builds from Debian packages, get their address
/// from the plan, run real RDMA (ibv_rc_pingpong, ib_write_bw) through the
/// switches, tshark decodes the real RNIC's BTH on a fabric link, and
/// `weft down` after a `kill -9` of the orchestrator leaves no VM.
#[test]
#[ignore = "needs root, qemu-system-x86_64, apt (Debian's archive) and tshark: scripts/test runs it (as root, --include-ignored)"]
fn rxe_vm_hosts_on_two_leaves_run_rdma_through_the_fabric() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["qemu-system-x86_64", "apt-get", "dpkg-deb", "tshark"]) {
        return;
    }
    let img = test_vm_image();
    let f = Fabric::up("leaf-spine-rxe", &["--vm-image", &img]);
    let st = f.status();
    let vms: Vec<serde_json::Value> =
        st["processes"].as_array().unwrap().iter().flat_map(|p| p["report"]["vms"].as_array().cloned().unwrap()).collect();
    assert_eq!(vms.len(), 2, "{st}");
    for v in &vms {
        let accel = v["accel"].as_str().unwrap();
        assert!(accel.starts_with("KVM") || accel.starts_with("TCG"), "{accel}");
        assert!(v["boot_s"].as_f64().unwrap() > 0.0, "{v}");
    }
    assert!(f.ok(&["status"]).contains("VM host (qemu pid"), "weft status shows the VMs");
    // Address, MAC and MTU from the plan; exit codes come back.
    let (rc, out) = weft_in(&f, &["exec", "h1", "--", "ip", "-o", "addr", "show", "eth0"]);
    assert!(rc == 0 && out.contains("10.0.1.2/24"), "{out}");
    let (_, link) = weft_in(&f, &["exec", "h1", "--", "ip", "-o", "link", "show", "eth0"]);
    assert!(link.contains("mtu 1500") && link.contains("02:00:0a:00:01:02"), "{link}");
    // Arguments with spaces and quotes reach the guest unchanged.
    let (rc, out) = weft_in(&f, &["exec", "h0", "--", "sh", "-c", "printf '%s|%s\\n' \"$1\" \"$0\"; exit 7", "a b", "it's"]);
    assert_eq!((rc, out.trim()), (7, "it's|a b"));
    let (rc, out) = weft_in(&f, &["exec", "h0", "--", "rdma", "link"]);
    assert!(rc == 0 && out.contains("rxe0") && out.contains("ACTIVE") && out.contains("netdev eth0"), "{out}");

    // ibv_rc_pingpong: RC send/receive across the spines.
    let out = rdma_pair(&f, "h1", "h0", "10.0.1.2", &["ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "200"]);
    assert!(out.contains("409600 bytes in") || out.contains("bytes in"), "{out}");
    assert!(out.contains("GID ::ffff:10.0.1.2"), "RoCEv2 GID of the peer: {out}");

    // A short ib_write_bw while h0's access link is captured.
    let pcap = f.dir.join("rxe.pcap");
    let cap = f.ok(&["capture", "h0-leaf0", "--pcap", pcap.to_str().unwrap(), "--count", "400"]);
    assert!(cap.contains("capturing"), "{cap}");
    let out = rdma_pair(&f, "h1", "h0", "10.0.1.2", &["ib_write_bw", "-d", "rxe0", "-x", "1", "-D", "2"]);
    let bw: f64 = out
        .lines()
        .find(|l| l.trim_start().starts_with("65536"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no result line: {out}"));
    eprintln!("ib_write_bw h0 -> h1: {bw} MB/s");
    assert!(bw > 0.5, "{out}");
    std::thread::sleep(Duration::from_millis(500));
    let text = tshark_infiniband(&pcap, &["infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "udp.dstport"]);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert!(rows.len() > 100, "tshark decodes the rxe frames as InfiniBand: {} rows", rows.len());
    let opcodes: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[0]).collect();
    // RC RDMA WRITE First/Middle/Last from h0, Acknowledge from h1.
    for op in ["6", "7", "8", "17"] {
        assert!(opcodes.contains(op), "opcode {op} among {opcodes:?}");
    }
    assert!(rows.iter().all(|r| r.len() == 4 && r[3] == "4791"), "RoCEv2 UDP port");
    assert!(rows.iter().any(|r| r[1] != "0x00000000" && !r[1].is_empty()), "QPNs of the real RNIC");
    // PSNs of the writes rise by one (24-bit) per packet.
    let psns: Vec<u32> = rows.iter().filter(|r| ["6", "7", "8"].contains(&r[0])).filter_map(|r| r[2].parse().ok()).collect();
    assert!(psns.windows(2).filter(|w| w[1] == (w[0] + 1) & 0xff_ffff).count() * 10 >= psns.len() * 9, "consecutive PSNs: {psns:?}");

    // kill -9 of the orchestrator, then `weft down`: no qemu, no files.
    let mut pids = f.pids();
    let qemus = qemu_pids(&f);
    assert_eq!(qemus.len(), 2);
    let vm_dir = f.dir.join("vm");
    assert!(vm_dir.join("h0").join("exec-1.sock").exists());
    let orch = *pids.last().unwrap();
    // SAFETY: killing the orchestrator this test started.
    unsafe { libc::kill(orch as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(200));
    let out = f.ok(&["down"]);
    assert!(out.contains("removed leftover"), "{out}");
    pids.extend(qemus);
    assert_clean(&pids, &f.prefix);
    assert!(!vm_dir.exists(), "the VMs' directories are removed");
}

/// ConWeave with a real RNIC: while a spine is congested, rxe's RDMA
/// writes are rerouted, held in the destination ToR's reorder queues and
/// released on their TAIL; the receiving rxe sees out-of-sequence packets
/// only when a reorder queue was released on its timeout (before the TAIL).
/// rxe marks its packets ECT only with a traffic class (perftest
/// --tclass=2); CE marks on them produce no CNP (rxe has no DCQCN). A
/// SIGINT to the orchestrator (Ctrl-C) stops the VMs.
#[test]
#[ignore = "needs root, qemu-system-x86_64, apt (Debian's archive) and tshark: scripts/test runs it (as root, --include-ignored)"]
fn conweave_reorders_a_real_rnics_traffic_and_rxe_sends_no_cnp() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["qemu-system-x86_64", "apt-get", "dpkg-deb", "tshark"]) {
        return;
    }
    let img = test_vm_image();
    let f = Fabric::up("leaf-spine-rxe", &["--vm-image", &img, "--scheme", "conweave"]);
    f.ok(&["link", "leaf0-spine0", "rate", "20Mbps"]);
    f.ok(&["link", "leaf0-spine1", "rate", "20Mbps"]);
    let dir = f.dir.clone();
    let restore = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(3500));
        Fabric::weft(&dir, &["link", "leaf0-spine1", "rate", "1Gbps"])
    });
    rdma_pair(&f, "h1", "h0", "10.0.1.2", &["ib_write_bw", "-d", "rxe0", "-x", "1", "-D", "5"]);
    assert!(restore.join().unwrap().status.success());
    let m = |name: &str, sw: &str| metric_sum(&f, name, &format!("switch=\"{sw}\""));
    let reroutes = m("weft_scheme_conweave_reroutes_total", "leaf0");
    let held = m("weft_scheme_conweave_held_packets_total", "leaf1");
    let queues = m("weft_scheme_conweave_reorder_queues_allocated_total", "leaf1");
    let expiries = m("weft_scheme_conweave_resume_expiries_total", "leaf1");
    let ooo = rxe_counter(&f, "h1", "out_of_seq_request");
    eprintln!("conweave with rxe: {reroutes} reroutes, {queues} reorder queues, {held} packets held, {expiries} released on timeout; rxe out_of_seq_request {ooo}");
    assert!(reroutes > 0.0 && held > 0.0 && queues > 0.0, "rerouted and held");
    assert!(ooo == 0 || expiries > 0.0, "out-of-sequence packets at rxe ({ooo}) only after a reorder queue released on its timeout");
    assert_eq!(rxe_counter(&f, "h0", "retry_exceeded_err"), 0);

    // ECN: with --tclass=2 rxe sends ECT(0); the congested access link
    // marks CE; h1 answers with ACKs only, no CNP (opcode 129).
    f.ok(&["link", "h1-leaf1", "rate", "40Mbps"]);
    let pcap = f.dir.join("ecn.pcap");
    f.ok(&["capture", "h1-leaf1", "--pcap", pcap.to_str().unwrap(), "--count", "1500"]);
    rdma_pair(&f, "h1", "h0", "10.0.1.2", &["ib_write_bw", "-d", "rxe0", "-x", "1", "-D", "3", "--tclass=2"]);
    std::thread::sleep(Duration::from_millis(500));
    let text = tshark_infiniband(&pcap, &["ip.src", "infiniband.bth.opcode", "ip.dsfield.ecn"]);
    let ce = text.lines().filter(|l| l.starts_with("10.0.0.2\t") && l.ends_with("\t3")).count();
    let from_h1: Vec<&str> = text.lines().filter(|l| l.starts_with("10.0.1.2\t")).collect();
    eprintln!(
        "{ce} CE-marked packets to h1; h1 sent {} packets, opcodes {:?}",
        from_h1.len(),
        from_h1.iter().map(|l| l.split('\t').nth(1).unwrap_or("")).collect::<std::collections::BTreeSet<_>>()
    );
    assert!(ce > 0, "the fabric marks rxe's ECT packets: {text}");
    assert!(!from_h1.is_empty() && from_h1.iter().all(|l| l.split('\t').nth(1) != Some("129")), "rxe sends no CNP");

    // Ctrl-C (SIGINT) to the orchestrator stops everything.
    let mut pids = f.pids();
    let qemus = qemu_pids(&f);
    let orch = *pids.last().unwrap();
    // SAFETY: signalling the orchestrator this test started.
    unsafe { libc::kill(orch as i32, libc::SIGINT) };
    pids.extend(qemus);
    assert_clean(&pids, &f.prefix);
    assert!(!f.dir.join("vm").exists(), "the VMs' directories are removed");
}

/// Bad input for rxe hosts: no qemu, too little memory: one clear error
/// each, before anything starts.
#[test]
fn rxe_hosts_without_qemu_or_with_too_little_memory_are_refused_before_anything_starts() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(unique("rxe"));
    std::fs::create_dir_all(&dir).unwrap();
    let up = |path: &str, extra: &[&str]| {
        let o = Command::new(weft_bin())
            .args(["up", "leaf-spine-rxe", "--vm-image"])
            .arg(dir.join("img"))
            .args(extra)
            .env("WEFT_STATE_DIR", &dir)
            .env("PATH", path)
            .output()
            .unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (ok, err) = up("/nonexistent", &[]);
    assert!(!ok && err.contains("qemu-system-x86_64") && err.contains("apt install qemu-system-x86"), "{err}");
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
    let path = std::env::var("PATH").unwrap_or_default();
    let (ok, err) = up(&path, &["--vm-memory", "64"]);
    assert!(!ok && err.contains("--vm-memory 64 MiB is too small") && err.contains("at least"), "{err}");
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
    assert!(!dir.join("img").exists() && !dir.join("fabric.json").exists(), "nothing was built or started");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The sum of a Prometheus counter over the series whose labels contain
/// `label` (e.g. `switch="edge1_0"`), from every `/metrics` endpoint of
/// the fabric.
fn metric_sum(f: &Fabric, name: &str, label: &str) -> f64 {
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap_or_default()).unwrap_or_default();
    let mut sum = 0.0;
    for url in st["metrics"].as_object().into_iter().flat_map(|m| m.values()).filter_map(|u| u.as_str()) {
        let body = ureq::get(url).call().and_then(|mut r| r.body_mut().read_to_string()).unwrap_or_default();
        for l in body.lines().filter(|l| l.starts_with(name) && l.contains(label)) {
            sum += l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        }
    }
    sum
}

/// A kernel TCP counter of `host` (`nstat -az NAME`).
fn nstat(f: &Fabric, host: &str, name: &str) -> u64 {
    let o = f.exec(host, &["nstat", "-az", name]).output().expect("nstat");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Reordering the senders' kernels detected (Linux counts each time SACK,
/// timestamps or duplicate ACKs show a segment arrived out of order rather
/// than lost), and the DSACKs they got (segments resent needlessly).
const REORDER_COUNTERS: [&str; 4] = ["TcpExtTCPSACKReorder", "TcpExtTCPTSReorder", "TcpExtTCPRenoReorder", "TcpExtTCPDSACKRecv"];

/// Two iperf3 TCP flows from pod 0 into pod 1 of `fat-tree-k4-rt-tap`;
/// after 1.5 s the link edge0_0-agg0_0 drops to 10 % of its rate.
/// Returns (goodput bit/s of both, iperf3 retransmits, the senders'
/// reordering counters, the receivers' out-of-order queued segments, the
/// fabric for more checks).
fn degraded_link_run(scheme: &str) -> (f64, u64, [u64; 4], u64, Fabric) {
    let f = Fabric::up("fat-tree-k4-rt-tap", &["--scheme", scheme, "--nodes", "2", "--metrics", "127.0.0.1:0"]);
    let mut servers = [iperf_server(&f, "h4", 5301), iperf_server(&f, "h6", 5302)];
    let clients = [("h0", "10.1.0.2", "5301"), ("h1", "10.1.1.2", "5302")].map(|(h, dst, port)| {
        f.exec(h, &["iperf3", "-J", "-c", dst, "-p", port, "-t", "6"]).stdout(Stdio::piped()).spawn().expect("iperf3 -c")
    });
    std::thread::sleep(Duration::from_millis(1500));
    f.ok(&["link", "edge0_0-agg0_0", "rate", "10%"]);
    let (mut bps, mut rtx) = (0.0, 0u64);
    for c in clients {
        let o = c.wait_with_output().expect("iperf3 client");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        assert!(v.get("error").is_none(), "{scheme}: iperf3 failed: {}", String::from_utf8_lossy(&o.stdout));
        bps += received_bps(&v);
        rtx += v.pointer("/end/sum_sent/retransmits").and_then(|r| r.as_u64()).unwrap_or(0);
    }
    for s in &mut servers {
        let _ = s.wait();
    }
    let reorder = REORDER_COUNTERS.map(|c| nstat(&f, "h0", c) + nstat(&f, "h1", c));
    let ofo = nstat(&f, "h4", "TcpExtTCPOFOQueue") + nstat(&f, "h6", "TcpExtTCPOFOQueue");
    (bps, rtx, reorder, ofo, f)
}

#[test]
#[ignore = "needs root, /dev/net/tun and ip, iperf3, nstat: scripts/test runs it (as root, --include-ignored)"]
fn lbsp_moves_the_degraded_links_ranges_and_reorders_less_than_rps() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "iperf3", "nstat"]) {
        return;
    }
    let (rps_bps, rps_rtx, rps_reorder, rps_ofo, rps) = degraded_link_run("rps");
    drop(rps);
    let (lbsp_bps, lbsp_rtx, lbsp_reorder, lbsp_ofo, lbsp) = degraded_link_run("lbsp");
    eprintln!(
        "edge0_0-agg0_0 at 10 %: rps {:.1} Mbit/s, {rps_rtx} retransmits, reorder {REORDER_COUNTERS:?} = {rps_reorder:?}, receivers' OFO queue {rps_ofo}; \
         lbsp {:.1} Mbit/s, {lbsp_rtx} retransmits, reorder {lbsp_reorder:?}, OFO {lbsp_ofo}",
        rps_bps / 1e6,
        lbsp_bps / 1e6
    );
    // The receivers' out-of-order queue also counts every segment after a
    // loss (the TAP hosts' NIC model drops): the reordering
    // measure is the DSACKs, segments the senders resent needlessly
    // because they were only late.
    let (rps_dsack, lbsp_dsack) = (rps_reorder[3], lbsp_reorder[3]);
    // Both ends found the link degraded; agg0_0's message moved edge0_0's
    // range at the other ToRs; edge0_0 itself avoids the group.
    assert!(metric_sum(&lbsp, "weft_scheme_lbsp_failures_detected_total", "switch=\"agg0_0\"") >= 1.0, "agg0_0 found the degraded link");
    assert!(metric_sum(&lbsp, "weft_scheme_lbsp_failures_detected_total", "switch=\"edge0_0\"") >= 1.0, "edge0_0 found it");
    for tor in ["edge0_1", "edge1_0", "edge1_1", "edge2_0", "edge3_1"] {
        assert!(
            metric_sum(&lbsp, "weft_scheme_lbsp_table_writes_total", &format!("switch=\"{tor}\"")) >= 1.0,
            "{tor} applied the failure message"
        );
    }
    assert!(metric_sum(&lbsp, "weft_scheme_lbsp_failure_avoided_total", "switch=\"edge0_0\"") > 0.0, "edge0_0 moved packets off it");
    assert!(
        lbsp_dsack * 4 < rps_dsack,
        "LBSP reorders far less than RPS under the degraded link: {lbsp_dsack} vs {rps_dsack} needless retransmissions"
    );
}

/// Three "machines" for `weft up --machines`: network namespaces
/// on this machine, each with its own address on a bridge (10.77.0.1-3,
/// this machine 10.77.0.254; the network's MTU as given) and its own real
/// OpenSSH server, entered with
/// `nsenter --net` so that it shares this machine's mounts (`ip netns` of
/// the emu-nodes it starts must be visible here). Keys are made here; the
/// servers' host key is pinned in a test-only known_hosts. Everything is
/// removed on drop, also when the test fails.
struct Machines {
    dir: PathBuf,
    tag: String,
    mtu: u32,
}

impl Machines {
    fn new(mtu: u32) -> Machines {
        // Names unique per instance: the kernel removes a deleted
        // namespace's devices asynchronously, so the next test's
        // machines must not reuse the last one's names.
        static INSTANCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 10;
        let tag = format!("{}{n}", std::process::id() % 1000);
        let dir = std::env::temp_dir().join(format!("weft-machines-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("machines dir");
        let m = Machines { dir, tag, mtu };
        m.sh(
            r#"set -e
ip link add wmb$T type bridge; ip link set wmb$T mtu $MTU; ip addr add 10.77.0.254/24 dev wmb$T; ip link set wmb$T up
ssh-keygen -q -t ed25519 -N '' -f $D/client_key; ssh-keygen -q -t ed25519 -N '' -f $D/other_key
ssh-keygen -q -t ed25519 -N '' -f $D/host_key; cp $D/client_key.pub $D/authorized_keys
mkdir -p /run/sshd; : > $D/known_hosts
printf '#!/bin/sh\necho emu-node 0.0.0\n' > $D/old-emu-node; chmod +x $D/old-emu-node
for i in 1 2 3; do
  ip netns add wm${T}m$i
  ip link add wmv$T$i type veth peer name eth0 netns wm${T}m$i
  ip link set wmv$T$i mtu $MTU master wmb$T up; ip -n wm${T}m$i link set eth0 mtu $MTU
  ip -n wm${T}m$i addr add 10.77.0.$i/24 dev eth0; ip -n wm${T}m$i link set eth0 up; ip -n wm${T}m$i link set lo up
  printf 'ListenAddress 10.77.0.%s\nHostKey %s/host_key\nAuthorizedKeysFile %s/authorized_keys\nPermitRootLogin prohibit-password\nPidFile %s/sshd%s.pid\nStrictModes no\nUsePAM no\n' $i $D $D $D $i > $D/sshd$i.conf
  nsenter --net=/run/netns/wm${T}m$i /usr/sbin/sshd -f $D/sshd$i.conf
  echo "10.77.0.$i $(cut -d' ' -f1,2 $D/host_key.pub)" >> $D/known_hosts
done"#,
        );
        m
    }

    fn sh(&self, script: &str) {
        let o = Command::new("bash")
            .args(["-c", script])
            .env("T", &self.tag)
            .env("D", &self.dir)
            .env("MTU", self.mtu.to_string())
            .output()
            .expect("bash");
        assert!(o.status.success(), "machine set-up failed: {}", String::from_utf8_lossy(&o.stderr));
    }

    /// A machines file for the three machines, after `edit`.
    fn file(&self, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
        let d = self.dir.display();
        let text: String = (1..=3)
            .map(|i| {
                format!(
                    "[[machine]]\nname = \"m{i}\"\nssh = \"10.77.0.{i}\"\nuser = \"root\"\nidentity = \"{d}/client_key\"\nknown_hosts = \"{d}/known_hosts\"\nbind = \"10.77.0.{i}\"\n"
                )
            })
            .collect();
        let path = self.dir.join(name);
        std::fs::write(&path, edit(text)).expect("machines file");
        path
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        let script = r#"for i in 1 2 3; do [ -f $D/sshd$i.pid ] && kill $(cat $D/sshd$i.pid) 2>/dev/null; ip netns del wm${T}m$i 2>/dev/null; done
ip link del wmb$T 2>/dev/null; true"#;
        let _ = Command::new("bash").args(["-c", script]).env("T", &self.tag).env("D", &self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// emu-node processes (not ssh clients) whose command line holds `what`.
fn emu_nodes_with(what: &str) -> Vec<u32> {
    processes_with(what)
        .into_iter()
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim() == "emu-node")
        .collect()
}

/// One fabric over three machines through OpenSSH, on a network
/// with jumbo frames: leaves whole on two machines, the spines on the third
/// in two emu-nodes (its capacity is 2), QUIC links between them; machine
/// m2's clock runs 5 s ahead (a test-only offset its emu-node adds to its
/// clock) and the orchestrator's estimate is within 50 us of it; TCP and
/// ping between TAP hosts on different machines, with the delays within the
/// one-machine test's bounds; a killed emu-node on one machine reported
/// within 2 s; nothing left on any machine after `weft down`, nor after a
/// `kill -9` of the orchestrator and the next `weft down`.
#[test]
#[ignore = "needs root, ip, nsenter, sshd, ssh, ssh-keygen, iperf3, ping: scripts/test runs it (as root, --include-ignored)"]
fn a_fabric_over_three_machines_through_ssh_carries_tcp_and_reports_a_lost_machine() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "nsenter", "sshd", "ssh", "ssh-keygen", "iperf3", "ping"]) {
        return;
    }
    let m = Machines::new(9000);
    const AHEAD_NS: i64 = 5_000_000_000;
    let ahead = m.dir.join("emu-node-ahead");
    let emu = weft_bin().with_file_name("emu-node");
    std::fs::write(&ahead, format!("#!/bin/sh\nWEFT_TEST_CLOCK_OFFSET_NS={AHEAD_NS} exec {} \"$@\"\n", emu.display())).unwrap();
    m.sh(&format!("chmod +x {}", ahead.display()));
    let file = m.file("machines.toml", |t| {
        t.replace("bind = \"10.77.0.2\"", &format!("bind = \"10.77.0.2\"\nemu_node = \"{}\"", ahead.display()))
            .replace("bind = \"10.77.0.3\"", "bind = \"10.77.0.3\"\ncapacity = 2")
    });
    let f = Fabric::up("leaf-spine-2x4-rt", &["--machines", file.to_str().unwrap(), "--links", "quic"]);
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap()).unwrap();
    let remote: Vec<u32> = (0..4).map(|p| st["machines"][p.to_string()]["pid"].as_u64().unwrap_or(0) as u32).collect();
    assert!(remote.iter().all(|&p| p > 0 && alive(p)), "an emu-node per process, pids {remote:?}");
    assert_eq!(st["machines"]["2"]["machine"]["name"], "m3");
    assert_eq!(st["machines"]["3"]["machine"]["name"], "m3");
    for (p, truth) in [(0, 0), (1, AHEAD_NS), (2, 0), (3, 0)] {
        let r = &st["clocks"][p.to_string()];
        let (est, unc) = (r["offset_ns"].as_i64().unwrap_or(i64::MIN), r["uncertainty_ns"].as_u64().unwrap_or(u64::MAX));
        eprintln!("emu-node {p}: clock offset estimated {est} ns +- {unc} ns, true {truth} ns");
        assert!((est - truth).abs() <= 50_000, "emu-node {p}: estimated {est} ns, true {truth} ns");
    }
    // h0 (leaf0, m1) -> h8 (leaf1, m2) through a spine on m3.
    let mut srv = iperf_server(&f, "h8", 5201);
    let v = iperf_client(&f, "h0", &["-c", "10.0.1.2", "-t", "3"]);
    let _ = srv.wait();
    let bps = received_bps(&v);
    eprintln!("iperf3 TCP h0 (m1) -> h8 (m2) via m3: {:.1} Mbit/s", bps / 1e6);
    assert!(bps > 100e6 && bps <= 1.01e9, "{bps} bit/s across machines");
    // Delays as on one machine: never below the configured path, within the
    // one-machine test's bound above it.
    let topo = emu_orchestrator::config::topology::Topology::load("leaf-spine-2x4-rt").expect("topology");
    let link = &topo.fabric.links[0];
    let expected = 8.0 * (link.delay + link.rate.serialization_ns(98)) as f64 / 1e6;
    ping_rounds_within(&f, "10.0.1.2", expected, "ping h0 -> h8 across machines");
    // Kill the emu-node on m3 (the spines): reported within 2 s.
    let t0 = Instant::now();
    // SAFETY: killing an emu-node this test started.
    unsafe { libc::kill(remote[2] as i32, libc::SIGKILL) };
    let mut event = None;
    while t0.elapsed() < Duration::from_secs(2) && event.is_none() {
        event = f.status()["events"]
            .as_array()
            .and_then(|e| e.iter().filter_map(|e| e.as_str()).find(|e| !e.contains(" silent") && !e.contains("answers again")))
            .map(String::from);
        std::thread::sleep(Duration::from_millis(50));
    }
    let event = event.expect("the loss of machine m3's emu-node is reported within 2 s");
    eprintln!("reported after {:?}: {event}", t0.elapsed());
    assert!(
        event.contains("emu-node 2") && event.contains("spine0") && event.contains("leaf0-spine0") && !event.contains("spine1,"),
        "{event}"
    );
    let prefix = f.prefix.clone();
    drop(f);
    std::thread::sleep(Duration::from_millis(300));
    let left: Vec<_> = remote.iter().filter(|&&p| alive(p)).collect();
    assert!(left.is_empty(), "emu-nodes left on the machines: {left:?}");
    assert_clean(&[], &prefix);
    // kill -9 of the orchestrator: the next `weft down` cleans every machine.
    let f = Fabric::up("leaf-spine-2x4-rt", &["--machines", file.to_str().unwrap(), "--links", "quic"]);
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap()).unwrap();
    let remote: Vec<u32> = (0..4).map(|p| st["machines"][p.to_string()]["pid"].as_u64().unwrap_or(0) as u32).collect();
    let orchestrator = st["orchestrator"].as_u64().unwrap_or(0) as i32;
    // SAFETY: killing the orchestrator this test started.
    unsafe { libc::kill(orchestrator, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(300));
    let out = f.ok(&["down"]);
    assert!(out.contains("on machine m3"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    let left: Vec<_> = remote.iter().filter(|&&p| alive(p)).collect();
    assert!(left.is_empty(), "emu-nodes left on the machines after kill -9 and weft down: {left:?}");
    let prefix = f.prefix.clone();
    drop(f);
    assert_clean(&[], &prefix);
}

/// The underlay's latency taken out of the cut links: the three machines'
/// network made 300 us slower one way (each emu-node hands the link
/// datagrams it receives over 300 us late: this kernel has no `netem`
/// qdisc), links of 5 ms. Ping across machines keeps the configured RTT
/// (never below it, the median within the emulation's 2 ms); `weft status` shows each cut link's configured, underlay
/// and achieved delay; a configured delay below the underlay's (100 us) is
/// warned about, with the delay the link really has.
#[test]
#[ignore = "needs root, ip, nsenter, sshd, ssh, ssh-keygen, ping: scripts/test runs it (as root, --include-ignored)"]
fn cut_links_keep_their_configured_delay_over_a_slower_underlay_and_a_faster_configuration_is_warned() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "nsenter", "sshd", "ssh", "ssh-keygen", "ping"]) {
        return;
    }
    const UNDERLAY_NS: u64 = 300_000;
    let m = Machines::new(1500);
    let slow = m.dir.join("emu-node-slow-underlay");
    let emu = weft_bin().with_file_name("emu-node");
    std::fs::write(&slow, format!("#!/bin/sh\nWEFT_TEST_UNDERLAY_DELAY_NS={UNDERLAY_NS} exec {} \"$@\"\n", emu.display())).unwrap();
    m.sh(&format!("chmod +x {}", slow.display()));
    let file = m.file("machines.toml", |t| {
        (1..=3).fold(t, |t, i| {
            t.replace(&format!("bind = \"10.77.0.{i}\"\n"), &format!("bind = \"10.77.0.{i}\"\nemu_node = \"{}\"\n", slow.display()))
        })
    });
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topologies/leaf-spine-2x4-rt.toml");
    let text = std::fs::read_to_string(shipped).expect("shipped topology");
    assert!(text.contains("delay = \"10us\""), "the shipped topology's link delay");
    // Links of 5 ms: 4.7 ms of slack over the 300 us underlay, more than
    // the few ms a shared CI machine stalls its processes now and then
    // (with 1 ms links, 700 us of slack, CI runs had 4 to 9 of 40 frames a
    // link late in every round: stalls of the VM, not the holding).
    let topo = m.dir.join("leaf-spine-5ms.toml");
    std::fs::write(&topo, text.replace("delay = \"10us\"", "delay = \"5ms\"")).unwrap();
    let f = Fabric::up(topo.to_str().unwrap(), &["--machines", file.to_str().unwrap(), "--links", "udp"]);
    let t = emu_orchestrator::config::topology::Topology::load(topo.to_str().unwrap()).expect("topology");
    let link = &t.fabric.links[0];
    assert_eq!(link.delay, 5_000_000);
    // h0 (leaf0) -> h8 (leaf1): 8 link crossings per round trip, 4 of them
    // over cut links.
    let expected = 8.0 * (link.delay + link.rate.serialization_ns(98)) as f64 / 1e6;
    // Rounds of 40 pings (`until_a_round_holds`), each judged by its RTTs
    // and by what it added to the cut links' counters. Frames are held
    // until due: never below the configured RTT in any round.
    // (frames, late frames, their lateness in sum, ns) by link direction.
    let counters = |st: &serde_json::Value| -> std::collections::BTreeMap<String, (u64, u64, u64)> {
        st["cut_links"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (format!("{} {}", r["link"].as_str().unwrap_or("?"), r["direction"].as_str().unwrap_or("?")), {
                    let frames = r["frames"].as_u64().unwrap_or(0);
                    let lateness = r["achieved_mean_ns"].as_u64().unwrap_or(0).saturating_sub(r["configured_ns"].as_u64().unwrap_or(0));
                    (frames, r["late"].as_u64().unwrap_or(0), lateness * frames)
                })
            })
            .collect()
    };
    let mut before = counters(&f.status());
    let (st, median, crossed) = until_a_round_holds(3, |round| {
        let rtts = ping_rtts(&f, "h0", "10.0.1.2", 40);
        let median = rtts[rtts.len() / 2];
        eprintln!(
            "round {round}: ping h0 -> h8 over a 300 us underlay, 5 ms links: min {:.3} ms, median {median:.3} ms, configured {expected:.3} ms",
            rtts[0]
        );
        assert!(rtts[0] >= as_ping_prints(expected), "never below the configured RTT {expected} ms: {rtts:?}");
        std::thread::sleep(Duration::from_millis(1200));
        let st = f.status();
        let now = counters(&st);
        // (link and direction, frames, late) of this round's crossings.
        let crossed: Vec<(String, u64, u64)> = now
            .iter()
            .filter_map(|(k, &(frames, late, lateness))| {
                let (f0, l0, n0) = before.get(k).copied().unwrap_or((0, 0, 0));
                let (late, lateness) = (late.saturating_sub(l0), lateness.saturating_sub(n0));
                if frames > f0 && late > 0 {
                    eprintln!("round {round}: {k}: {late} of {} frames late, by {} us on average", frames - f0, lateness / late / 1000);
                }
                (frames > f0).then(|| (k.clone(), frames - f0, late))
            })
            .collect();
        eprintln!("round {round}: frames and late frames of the crossed links {crossed:?}");
        before = now;
        let held = median <= expected + RTT_CONSTANT_MS && crossed.iter().all(|&(_, frames, late)| late * 10 <= frames);
        ((st, median, crossed), held)
    });
    assert!(
        median <= expected + RTT_CONSTANT_MS,
        "median {median} ms more than {RTT_CONSTANT_MS} ms above the configured RTT {expected} ms in 3 rounds"
    );
    assert!(crossed.len() >= 4, "the ping crossed at least two cut links each way: {crossed:?}");
    // Held until due: on time but for the odd frame a loaded 2-core machine
    // hands over late (one of 40 in a CI run, by 2 ms).
    assert!(crossed.iter().all(|&(_, frames, late)| late * 10 <= frames), "late frames in 3 rounds, the last {crossed:?}");
    let rows = st["cut_links"].as_array().cloned().unwrap_or_default();
    assert!(!rows.is_empty(), "cut links listed: {st}");
    let crossed: Vec<_> = rows.iter().filter(|r| r["frames"].as_u64().unwrap_or(0) > 0).collect();
    assert!(crossed.len() >= 4, "the ping crossed at least two cut links each way: {rows:?}");
    // The underlay is measured on the fabric clock, which sender and
    // receiver share within their clock estimates' uncertainty (a CI run
    // measured 291 us of a 300 us underlay).
    let fabric: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap_or_default()).unwrap_or_default();
    let clocks = fabric["clocks"].as_object().cloned().unwrap_or_default();
    assert!(!clocks.is_empty(), "clock estimates in {fabric}");
    let uncertainty = clocks.values().map(|c| c["uncertainty_ns"].as_u64().unwrap_or(u64::MAX)).max().unwrap_or(u64::MAX);
    assert!(uncertainty <= 100_000, "clock estimates within 100 us: {clocks:?}");
    for r in &crossed {
        let (min, achieved) = (r["underlay_min_ns"].as_u64().unwrap_or(0), r["achieved_mean_ns"].as_u64().unwrap_or(u64::MAX));
        eprintln!(
            "{} {} {} -> {}: underlay {min} ns, achieved {achieved} ns (clocks +- {uncertainty} ns)",
            r["link"], r["direction"], r["from"], r["to"]
        );
        assert!((UNDERLAY_NS.saturating_sub(2 * uncertainty)..link.delay).contains(&min), "the underlay measured: {r}");
        assert!(achieved >= link.delay, "never faster than the configured delay: {r}");
    }
    let text = f.ok(&["status"]);
    assert!(text.contains("configured 5000.0us, underlay 3") && !text.contains("warning: link"), "{text}");
    // A capture of a cut link: a pcap per end, the remote ones fetched.
    let r = crossed[0];
    let (link_name, direction) = (r["link"].as_str().unwrap_or(""), r["direction"].as_str().unwrap_or(""));
    let (from, to) = direction.split_once("->").expect("direction");
    let pcap = m.dir.join("cut.pcap");
    let capture = Command::new(weft_bin())
        .args(["capture", link_name, "--pcap", pcap.to_str().unwrap(), "--count", "10", "--wait", "20s"])
        .env("WEFT_STATE_DIR", &f.dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("weft capture");
    std::thread::sleep(Duration::from_millis(500));
    ping_rtts(&f, "h0", "10.0.1.2", 12);
    let out = capture.wait_with_output().expect("weft capture");
    let out = String::from_utf8_lossy(&out.stdout);
    eprintln!("{out}");
    let side = |node: &str| m.dir.join(format!("cut.{node}.pcap"));
    let (a, b) = (pcap_frames(&side(from)), pcap_frames(&side(to)));
    assert!(a.len() >= 10 && b.len() >= 10, "a pcap per end with the frames: {} and {} frames; {out}", a.len(), b.len());
    let icmp = |v: &[Vec<u8>]| v.iter().filter(|fr| fr.len() > 34 && fr[12..14] == [8, 0] && fr[23] == 1).cloned().collect::<Vec<_>>();
    assert_eq!(icmp(&a)[..5], icmp(&b)[..5], "the two ends saw the same pings");
    assert!(out.contains("fetched from machine"), "{out}");
    assert!(
        !std::fs::read_dir("/tmp").unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with("weft-capture.")),
        "no file left on a machine"
    );
    // Cut links of 100 us: slower underlay than configuration, warned.
    let mut names: Vec<&str> = crossed.iter().filter_map(|r| r["link"].as_str()).collect();
    names.dedup();
    for n in &names {
        f.ok(&["link", n, "delay", "100us"]);
    }
    let rtts = ping_rtts(&f, "h0", "10.0.1.2", 20);
    eprintln!("with 100 us configured on the cut links: min {:.3} ms", rtts[0]);
    std::thread::sleep(Duration::from_millis(1200));
    let text = f.ok(&["status"]);
    eprintln!("{text}");
    assert!(text.contains("warning: link ") && text.contains("more than the configured delay 100.0 us"), "{text}");
    let prefix = f.prefix.clone();
    drop(f);
    assert_clean(&[], &prefix);
}

/// Soft-RoCE VM hosts on other machines: the VM image is copied to a
/// machine whose image path holds none (m2's `vm_image`) and not to one
/// whose image is the same (m1 shares this machine's path); `weft status`
/// lists both machines' VMs; `weft exec` runs commands in them over ssh
/// (`ibv_devices`, exit codes), RDMA works between them across the spines'
/// machine; Ctrl-C (SIGINT) of the orchestrator leaves no emu-node or VM on
/// any machine.
#[test]
#[ignore = "needs root, qemu-system-x86_64, apt (Debian's archive), ip, nsenter, sshd, ssh: scripts/test runs it (as root, --include-ignored)"]
fn vm_hosts_on_other_machines_get_the_image_and_answer_weft_exec() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["qemu-system-x86_64", "apt-get", "dpkg-deb", "ip", "nsenter", "sshd", "ssh", "ssh-keygen"]) {
        return;
    }
    // Built here on first use; then copied to m2.
    let img = test_vm_image();
    let m = Machines::new(1500);
    let m2_image = m.dir.join("m2-vm-image");
    let file = m.file("machines.toml", |t| {
        t.replace("bind = \"10.77.0.2\"\n", &format!("bind = \"10.77.0.2\"\nvm_image = \"{}\"\n", m2_image.display()))
    });
    let f = Fabric::up("leaf-spine-rxe", &["--vm-image", &img, "--machines", file.to_str().unwrap(), "--links", "udp"]);
    for name in ["vmlinuz", "initrd.cpio", "packages.txt", "release", "format"] {
        let (a, b) =
            (std::fs::read(Path::new(&img).join(name)).unwrap_or_default(), std::fs::read(m2_image.join(name)).unwrap_or_default());
        assert!(!a.is_empty() && a == b, "{name} copied to m2's image path");
    }
    let st = f.status();
    let on: Vec<(String, String)> = st["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| {
            let place = p["process"].to_string();
            p["report"]["vms"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |v| (place.clone(), v["host"].as_str().unwrap_or("").to_string()))
        })
        .collect();
    assert_eq!(on.len(), 2, "two VMs, one per leaf's machine: {on:?}");
    let text = f.ok(&["status"]);
    assert_eq!(text.matches("VM host (qemu pid").count(), 2, "{text}");
    assert!(text.contains("on machine m1") && text.contains("on machine m2"), "{text}");
    for host in ["h0", "h1"] {
        let (rc, out) = weft_in(&f, &["exec", host, "--", "ibv_devices"]);
        eprintln!("weft exec {host} -- ibv_devices: {out}");
        assert!(rc == 0 && out.contains("rxe0"), "{host}: rc {rc}: {out}");
    }
    let (rc, out) = weft_in(&f, &["exec", "h1", "--", "sh", "-c", "printf '%s|%s\\n' \"$1\" \"$0\"; exit 7", "a b", "it's"]);
    assert_eq!((rc, out.trim()), (7, "it's|a b"), "arguments and the exit code cross ssh unchanged");
    let out = rdma_pair(&f, "h1", "h0", "10.0.1.2", &["ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100"]);
    assert!(out.contains("bytes in"), "RDMA between the machines' VMs: {out}");
    let qemus = qemu_pids(&f);
    assert_eq!(qemus.len(), 2);
    // Ctrl-C (SIGINT) of the orchestrator stops every machine's emu-node
    // and VM, and removes the state.
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap()).unwrap();
    let (orchestrator, pin) = (st["orchestrator"].as_u64().unwrap_or(0) as i32, st["pin"].as_str().unwrap_or_default().to_string());
    assert!(orchestrator > 0 && emu_nodes_with(&pin).len() == 3, "{st}");
    // SAFETY: signalling the orchestrator this test started.
    unsafe { libc::kill(orchestrator, libc::SIGINT) };
    let t0 = Instant::now();
    while f.dir.join("fabric.json").exists() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!f.dir.join("fabric.json").exists(), "Ctrl-C removed the fabric within 30 s");
    std::thread::sleep(Duration::from_millis(500));
    assert!(qemus.iter().all(|&p| !alive(p)), "no VM left after Ctrl-C: {qemus:?}");
    assert!(emu_nodes_with(&pin).is_empty(), "no emu-node left after Ctrl-C: {:?}", emu_nodes_with(&pin));
    let prefix = f.prefix.clone();
    drop(f);
    assert_clean(&[], &prefix);
}

/// The container image of the Kubernetes manifests, built without a
/// registry (`weft container-image build`: debootstrap + podman import),
/// runs a fabric: the manifests' emu-node pods run as containers of it
/// (podman with runc, host network, privileged, as the pods are), the
/// orchestrator as the manifests' command with live traffic; every
/// emu-node reports running and carries frames over the links between the
/// containers; `weft down` stops them and no container is left.
#[test]
#[ignore = "needs root, podman, runc, debootstrap (Debian's archive): scripts/test runs it (as root, --include-ignored)"]
fn the_container_image_is_built_without_a_registry_and_runs_the_manifests_emu_nodes() {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["podman", "runc", "debootstrap", "tar"]) {
        return;
    }
    let tag = format!("localhost/weft-test:{}", std::process::id());
    let names: Vec<String> = (0..2).map(|p| format!("weft-test-emu-{}-{p}", std::process::id())).collect();
    struct Cleanup(String, Vec<String>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for n in &self.1 {
                let _ = Command::new("podman").args(["rm", "-f", n]).output();
            }
            let _ = Command::new("podman").args(["rmi", "-f", &self.0]).output();
        }
    }
    let _cleanup = Cleanup(tag.clone(), names.clone());
    let t0 = Instant::now();
    let o = Command::new(weft_bin()).args(["container-image", "build", "--tag", &tag]).output().expect("weft container-image build");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    eprintln!("{err}{out}built in {:?}", t0.elapsed());
    assert!(o.status.success() && out.contains("built"), "{err}{out}");
    let runtime = ["--runtime", "runc"];
    let opts = emu_orchestrator::deploy::container_image::emu_node_run_options();
    let v = Command::new("podman").args(runtime).args(["run", "--rm"]).args(&opts).arg(&tag).args(["weft", "--version"]).output().unwrap();
    assert!(String::from_utf8_lossy(&v.stdout).contains(env!("CARGO_PKG_VERSION")), "{}", String::from_utf8_lossy(&v.stderr));
    // The manifests, their Secret in a directory the containers mount.
    let d = std::env::temp_dir().join(format!("weft-container-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let (m, fabric, plan, state) = (d.join("manifests"), d.join("fabric"), d.join("plan"), d.join("state"));
    let r = Command::new(weft_bin())
        .args(["k8s", "render", "leaf-spine-2x4-rt-synthetic", "--nodes", "2", "--image", &tag, "--out", m.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let read = |f: &str| std::fs::read_to_string(m.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let secret: Secret = serde_json::from_str(&read("01-secret.json")).unwrap();
    let config: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_str(&read("02-plan.json")).unwrap();
    std::fs::create_dir_all(&fabric).unwrap();
    std::fs::create_dir_all(&plan).unwrap();
    for (k, v) in secret.data.unwrap_or_default() {
        std::fs::write(fabric.join(k), v.0).unwrap();
    }
    for (k, v) in config.data.unwrap_or_default() {
        std::fs::write(plan.join(k), v).unwrap();
    }
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let remap = |s: &String| {
        s.replace("/weft/plan", plan.to_str().unwrap())
            .replace("weft-control.weft-leaf-spine-2x4-rt-synthetic.svc.cluster.local", "127.0.0.1")
            .replace("$(POD_IP)", "127.0.0.1")
            .replace("0.0.0.0:9100", "127.0.0.1:0")
            .replace("0.0.0.0:7400", &format!("127.0.0.1:{port}"))
            .replace(":7400", &format!(":{port}"))
    };
    let command = |file: &str| -> Vec<String> {
        let pod: Pod = serde_json::from_str(&read(file)).expect("a Pod");
        pod.spec.unwrap().containers[0].command.clone().unwrap().iter().map(remap).collect()
    };
    // The orchestrator here, with live traffic between the containers.
    let mut orch = command("10-orchestrator.json");
    orch = orch.into_iter().map(|a| a.replace("/weft/fabric", fabric.to_str().unwrap())).collect();
    let mut orchestrator = Command::new(weft_bin())
        .args(&orch[1..])
        .args(["--workload", "alistorage", "--load", "0.05"])
        .env("WEFT_STATE_DIR", &state)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("orchestrator.log")).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    for (p, name) in names.iter().enumerate() {
        let cmd = command(&format!("20-emu-node-{p:04}.json"));
        assert_eq!(cmd[0], "emu-node");
        let o = Command::new("podman")
            .args(runtime)
            .args(["run", "-d", "--rm", "--name", name])
            .args(&opts)
            .arg("-v")
            .arg(format!("{}:/weft/fabric:ro", fabric.display()))
            .arg(&tag)
            .args(&cmd)
            .output()
            .unwrap();
        assert!(o.status.success(), "podman run: {}", String::from_utf8_lossy(&o.stderr));
    }
    let status = || -> serde_json::Value {
        let o = Command::new(weft_bin()).args(["status", "--json"]).env("WEFT_STATE_DIR", &state).output().unwrap();
        serde_json::from_slice(&o.stdout).unwrap_or_default()
    };
    let until = Instant::now() + Duration::from_secs(30);
    let mut st = serde_json::Value::Null;
    let mut carried = 0;
    while Instant::now() < until && carried == 0 {
        std::thread::sleep(Duration::from_millis(500));
        st = status();
        let running = st["processes"].as_array().map_or(0, |p| p.iter().filter(|p| p["state"] == "running").count());
        if running == 2 {
            carried = st["cut_links"].as_array().map_or(0, |c| c.iter().map(|r| r["frames"].as_u64().unwrap_or(0)).sum());
        }
    }
    let log = std::fs::read_to_string(d.join("orchestrator.log")).unwrap_or_default();
    assert!(carried > 0, "two emu-nodes in containers carry frames between them: {st}\norchestrator: {log}");
    eprintln!("{carried} frames crossed between the containers");
    // Inside containers: podman lists both, and their emu-nodes' cgroups are podman's.
    let ps = Command::new("podman").args(["ps", "--format", "{{.Names}}"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(names.iter().all(|n| ps.contains(n.as_str())), "{ps}");
    let down = Command::new(weft_bin()).arg("down").env("WEFT_STATE_DIR", &state).output().unwrap();
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    let _ = orchestrator.wait();
    let until = Instant::now() + Duration::from_secs(10);
    let mut left = String::new();
    while Instant::now() < until {
        let ps = Command::new("podman").args(["ps", "-a", "--format", "{{.Names}}"]).output().unwrap();
        left = String::from_utf8_lossy(&ps.stdout).lines().filter(|l| names.iter().any(|n| n == l)).collect::<Vec<_>>().join(" ");
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(left.is_empty(), "containers left after weft down: {left}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The frames of a pcap file (classic format, as `weft capture` writes).
fn pcap_frames(path: &Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_default();
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= d.len() {
        let len = u32::from_le_bytes([d[at + 8], d[at + 9], d[at + 10], d[at + 11]]) as usize;
        let Some(f) = d.get(at + 16..at + 16 + len) else { break };
        frames.push(f.to_vec());
        at += 16 + len;
    }
    frames
}

/// A machine whose network goes down for 5 s (its bridge port down: the
/// spines' machine, so no path between the leaves is left): reported as
/// silent within 3 s, as answering again when the network is back, and the
/// fabric recovers (QUIC links and control channels, ssh sessions last 30
/// s of silence): ping between the leaves works again, no emu-node is
/// lost, and `weft down` leaves nothing.
#[test]
#[ignore = "needs root, ip, nsenter, sshd, ssh, ssh-keygen, ping: scripts/test runs it (as root, --include-ignored)"]
fn a_machine_whose_network_is_down_for_5_s_is_reported_and_the_fabric_recovers() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "nsenter", "sshd", "ssh", "ssh-keygen", "ping"]) {
        return;
    }
    let m = Machines::new(9000);
    let file = m.file("machines.toml", |t| t);
    let f = Fabric::up("leaf-spine-2x4-rt", &["--machines", file.to_str().unwrap(), "--links", "quic"]);
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap()).unwrap();
    assert_eq!(st["machines"]["2"]["machine"]["name"], "m3", "the spines on m3: {st}");
    assert_eq!(ping_rtts(&f, "h0", "10.0.1.2", 10).len(), 10, "h0 (m1) reaches h8 (m2) through m3");
    let events = |f: &Fabric| -> Vec<String> {
        f.status()["events"].as_array().map(|e| e.iter().filter_map(|e| e.as_str().map(String::from)).collect()).unwrap_or_default()
    };
    let wait_for = |f: &Fabric, what: &str, within: Duration| -> (String, Duration) {
        let t0 = Instant::now();
        loop {
            if let Some(e) = events(f).into_iter().find(|e| e.contains(what)) {
                return (e, t0.elapsed());
            }
            assert!(t0.elapsed() < within, "no event with `{what}` within {within:?}: {:?}", events(f));
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    m.sh("ip link set wmv${T}3 down");
    let down = Instant::now();
    let (silent, after) = wait_for(&f, "silent", Duration::from_secs(4));
    eprintln!("after {after:?}: {silent}");
    assert!(silent.contains("emu-node 2 (machine m3)"), "{silent}");
    let lost = ping_loss(&f, "h0", "10.0.1.2", 20);
    assert!(lost > 0.9, "no path between the leaves while m3 is cut off: {lost}");
    std::thread::sleep(Duration::from_secs(5).saturating_sub(down.elapsed()));
    m.sh("ip link set wmv${T}3 up");
    let (back, after) = wait_for(&f, "answers again", Duration::from_secs(5));
    eprintln!("{after:?} after the network came back: {back}");
    assert!(back.contains("emu-node 2 (machine m3)"), "{back}");
    let rtts = ping_rtts(&f, "h0", "10.0.1.2", 10);
    assert_eq!(rtts.len(), 10, "h0 reaches h8 again");
    let st = f.status();
    let states: Vec<&str> = st["processes"].as_array().into_iter().flatten().filter_map(|p| p["state"].as_str()).collect();
    assert_eq!(states, ["running"; 3], "no emu-node lost: {:?}", events(&f));
    assert!(!events(&f).iter().any(|e| e.contains("lost") || e.contains("died")), "{:?}", events(&f));
    let prefix = f.prefix.clone();
    drop(f);
    assert_clean(&[], &prefix);
}

/// Bad input: an unreachable machine, a wrong key, another
/// emu-node version, a machines file naming an address twice, and QUIC
/// links over a network whose MTU cannot carry the frames: one clear error
/// each, and nothing left started on any machine. Then the version
/// mismatch fixed with `--copy-emu-node`.
#[test]
#[ignore = "needs root, ip, nsenter, sshd, ssh, ssh-keygen: scripts/test runs it (as root, --include-ignored)"]
fn bad_machines_get_one_clear_error_and_nothing_is_left_started() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "nsenter", "sshd", "ssh", "ssh-keygen"]) {
        return;
    }
    let m = Machines::new(1500);
    let d = m.dir.display().to_string();
    let cases: Vec<(&str, PathBuf, Vec<&str>, &str)> = vec![
        (
            "unreachable",
            m.file("unreachable.toml", |t| t.replace("ssh = \"10.77.0.3\"", "ssh = \"10.77.0.9\"")),
            vec!["--links", "udp"],
            "machine m3 (10.77.0.9): ssh failed",
        ),
        (
            "wrong key",
            m.file("key.toml", |t| t.replacen(&format!("{d}/client_key"), &format!("{d}/other_key"), 1)),
            vec!["--links", "udp"],
            "machine m1 (10.77.0.1): ssh failed: root@10.77.0.1: Permission denied",
        ),
        (
            "version",
            m.file("version.toml", |t| {
                t.replace("bind = \"10.77.0.2\"", &format!("bind = \"10.77.0.2\"\nemu_node = \"{d}/old-emu-node\""))
            }),
            vec!["--links", "udp"],
            "machine m2: its emu-node",
        ),
        (
            "address twice",
            m.file("twice.toml", |t| t.replace("bind = \"10.77.0.2\"", "bind = \"10.77.0.1\"")),
            vec!["--links", "udp"],
            "bind address `10.77.0.1` is named twice (machines m1 and m2)",
        ),
        ("underlay MTU", m.file("quic.toml", |t| t), vec!["--links", "quic"], "raise that network's MTU to at least"),
    ];
    for (what, file, extra, expect) in cases {
        let prefix = unique("bm");
        let dir = std::env::temp_dir().join(format!("weft-test-{}", prefix.trim_end_matches('-')));
        let mut args = vec!["up", "leaf-spine-2x4-rt", "--netns-prefix", &prefix, "--machines", file.to_str().unwrap()];
        args.extend(extra);
        let o = Fabric::weft(&dir, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        let error_lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
        eprintln!("{what}: {error_lines:?}");
        assert!(!o.status.success() && error_lines.len() == 1 && error_lines[0].contains(expect), "{what}: {err}");
        std::thread::sleep(Duration::from_millis(300));
        assert!(emu_nodes_with(&prefix).is_empty() && emu_nodes_with("--token-stdin").is_empty(), "{what}: an emu-node was left running");
        assert_clean(&[], &prefix);
        let _ = std::fs::remove_dir_all(&dir);
    }
    // The version mismatch, fixed by copying this weft's emu-node there.
    let version = m.dir.join("version.toml");
    let f = Fabric::up("leaf-spine-2x4-rt", &["--machines", version.to_str().unwrap(), "--links", "udp", "--copy-emu-node"]);
    let copied = std::fs::metadata(m.dir.join("old-emu-node")).map(|x| x.len()).unwrap_or(0);
    assert!(copied > 1_000_000, "--copy-emu-node put the emu-node binary in place of the old one ({copied} B)");
    assert_eq!(f.status()["processes"].as_array().map(|p| p.len()), Some(3));
}

/// All files under `dir`, relative path -> bytes.
fn files_under(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.insert(p.strip_prefix(dir).unwrap_or(&p).to_path_buf(), b);
            }
        }
    }
    out
}

/// Item 4: `weft compare --machines` spreads the runs of a
/// matrix over three machines (each one run at a time, with the topology
/// file sent along) and gathers byte-identical summaries, flow tables and
/// plots, and the same compare.json but for wall times, as a local run
/// with the same seed.
#[test]
#[ignore = "needs root, ip, nsenter, sshd, ssh, ssh-keygen: scripts/test runs it (as root, --include-ignored)"]
fn weft_compare_over_machines_gives_the_results_of_a_local_compare() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "nsenter", "sshd", "ssh", "ssh-keygen"]) {
        return;
    }
    let m = Machines::new(1500);
    let file = m.file("machines.toml", |t| t);
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topologies/leaf-spine-2x4.toml");
    let compare = |out: &Path, extra: &[&str]| {
        let mut c = Command::new(weft_bin());
        c.args(["compare", topo.to_str().unwrap(), "--schemes", "ecmp,conweave", "--loads", "0.3,0.6", "--flows", "300", "--seed", "7"])
            .arg("--out")
            .arg(out)
            .args(extra);
        let o = c.output().expect("weft compare");
        assert!(o.status.success(), "weft compare {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let (here, there) = (m.dir.join("here"), m.dir.join("there"));
    compare(&here, &[]);
    let said = compare(&there, &["--machines", file.to_str().unwrap()]);
    assert!(said.contains("on 3 machines"), "{said}");
    let (a, b) = (files_under(&here), files_under(&there));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "the same files");
    assert!(a.len() >= 9, "4 runs x (summary.json, flows.csv), compare.json and plots: {:?}", a.keys());
    for (k, v) in &a {
        if k != Path::new("compare.json") {
            assert!(&b[k] == v, "{} differs between the local and the machines' compare", k.display());
        }
    }
    let strip = |bytes: &[u8]| {
        let mut j: serde_json::Value = serde_json::from_slice(bytes).expect("compare.json");
        j.as_object_mut().map(|o| o.remove("wall_s"));
        for r in j["runs"].as_array_mut().into_iter().flatten() {
            r.as_object_mut().map(|o| o.remove("wall_s"));
        }
        j
    };
    assert_eq!(strip(&a[Path::new("compare.json")]), strip(&b[Path::new("compare.json")]), "compare.json (wall times aside)");
}

/// First part: `weft vm-image build --check` makes the soft-RoCE
/// host image from Debian packages only (Debian's kernel with rdma_rxe, an
/// initramfs with rdma-core's rxe provider, perftest, iproute2, iperf3)
/// and boots it under qemu (KVM if it works, else TCG) until the guest has
/// added rxe0 on its virtio NIC and its user-space verbs (ibv_devices, the
/// rxe provider) list it. This machine's apt package lists are made
/// useless for it (apt pointed at an empty lists directory, as on a fresh
/// machine before `apt-get update`): the build fetches lists of its own.
/// Without a network (a namespace of its own) the build fails with one
/// line that says so.
#[test]
#[ignore = "needs apt-get (Debian's archive), qemu-system-x86_64, ip: scripts/test runs it (as root, --include-ignored)"]
fn the_vm_image_is_built_from_debian_packages_and_boots_to_rxe_ready() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["apt-get", "apt-cache", "dpkg-deb", "qemu-system-x86_64", "ip"]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("weft-vm-image-{}", std::process::id()));
    let empty = std::env::temp_dir().join(format!("weft-empty-apt-lists-{}", std::process::id()));
    std::fs::create_dir_all(empty.join("partial")).unwrap();
    let apt_config = empty.join("apt.conf");
    std::fs::write(&apt_config, format!("Dir::State::Lists \"{}\";\n", empty.display())).unwrap();
    let stale =
        Command::new("apt-cache").args(["depends", "linux-image-amd64"]).env("APT_CONFIG", &apt_config).output().expect("apt-cache");
    assert!(!String::from_utf8_lossy(&stale.stdout).contains("Depends:"), "apt knows no package with the empty lists");
    // No network: one line.
    let ns = format!("weft-nonet-{}", std::process::id());
    assert!(Command::new("ip").args(["netns", "add", &ns]).status().expect("ip").success());
    let o = Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(weft_bin())
        .args(["vm-image", "build", "--dir"])
        .arg(&dir)
        .env("APT_CONFIG", &apt_config)
        .output()
        .expect("weft vm-image");
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    let err = String::from_utf8_lossy(&o.stderr);
    let error_lines: Vec<&str> = err.lines().filter(|l| l.starts_with("Error") || l.starts_with("error")).collect();
    eprintln!("without a network: {err}");
    assert!(!o.status.success() && error_lines.len() == 1 && error_lines[0].contains("check the network"), "{err}");
    let o = Command::new(weft_bin())
        .args(["vm-image", "build", "--check", "--dir"])
        .arg(&dir)
        .env("APT_CONFIG", &apt_config)
        .output()
        .expect("weft vm-image");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    eprintln!("{err}{out}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
    assert!(o.status.success() && out.contains("rxe0 up and listed by ibv_devices after"), "{err}{out}");
    assert!(err.contains("rdma_rxe") && err.contains("crc32_generic"), "the kept modules are listed: {err}");
}

/// The test tool that writes raw frames inside a host's namespace
/// (`tests/src/bin/weft-hostile-host.rs`), built next to weft.
fn hostile_host_bin() -> PathBuf {
    weft_bin().with_file_name("weft-hostile-host")
}

/// Kilobytes of resident memory of `pid`.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `weft-hostile-host` in `host`'s namespace with its addresses from the
/// namespace (its gateway's MAC learnt by a ping); returns what it sent.
fn hostile_host(f: &Fabric, host: &str, peer: &str, extra: &[&str]) -> serde_json::Value {
    let json = |args: &[&str]| -> serde_json::Value {
        let o = f.exec(host, args).output().expect("ip -j");
        serde_json::from_slice(&o.stdout).unwrap_or_default()
    };
    let mac = json(&["ip", "-j", "link", "show", "eth0"])[0]["address"].as_str().unwrap_or_default().to_string();
    let addr = json(&["ip", "-j", "-4", "addr", "show", "eth0"])[0]["addr_info"][0]["local"].as_str().unwrap_or_default().to_string();
    let gw = json(&["ip", "-j", "-4", "route", "show", "default"])[0]["gateway"].as_str().unwrap_or_default().to_string();
    let _ = f.exec(host, &["ping", "-n", "-c", "1", "-W", "2", &gw]).output();
    let gw_mac = json(&["ip", "-j", "neigh", "show", &gw])[0]["lladdr"].as_str().unwrap_or_default().to_string();
    assert!(!mac.is_empty() && !addr.is_empty() && !gw_mac.is_empty(), "addresses of {host}: {mac} {addr} {gw_mac}");
    let bin = hostile_host_bin();
    let mut args = vec![bin.to_str().unwrap_or_default(), "--mac", &mac, "--ip", &addr, "--gateway-mac", &gw_mac, "--peer", peer];
    args.extend_from_slice(extra);
    let o = f.exec(host, &args).output().expect("weft-hostile-host");
    assert!(o.status.success(), "weft-hostile-host: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("weft-hostile-host JSON")
}

/// iperf3 TCP from `client` to `server_ip` (server on `server`) for
/// `secs` s, in a thread; its received rate in bit/s.
fn iperf_in_background(f: &Fabric, client: &str, server: &str, server_ip: &str, port: u16, secs: u32) -> std::thread::JoinHandle<f64> {
    let mut s = iperf_server(f, server, port);
    let mut c = f.exec(client, &["iperf3", "-J", "-c", server_ip, "-p", &port.to_string(), "-t", &secs.to_string()]);
    std::thread::spawn(move || {
        let o = c.output().expect("iperf3 -c");
        let _ = s.kill();
        let _ = s.wait();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        received_bps(&v)
    })
}

/// Hostile hosts: a TAP host writes, past its kernel's stack,
/// truncated frames, bad IPv4 checksums and ICRCs, oversize and
/// unknown-EtherType frames, PFC pauses, spoofed sources and the fabric's
/// own control frames (LBSP, P4TE feedback and hop option, ConWeave BTH
/// bits and timer, INT probe, VXLAN, IPv4 to a switch): each is counted
/// under its cause at the edge and none reaches a switch, while another
/// host's TCP keeps its rate. Then it floods (valid frames of the MTU, then
/// the hostile ones) past its qdisc at the highest rate the kernel takes:
/// the other host's TCP through the same emu-node keeps most of its rate
/// and the emu-node's memory stays flat.
#[test]
#[ignore = "needs root, /dev/net/tun and ip, ping, iperf3: scripts/test runs it (as root, --include-ignored)"]
fn hostile_and_flooding_tap_hosts_are_refused_by_cause_and_starve_nobody() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "ping", "iperf3"]) {
        return;
    }
    assert!(hostile_host_bin().exists(), "weft-hostile-host not built (cargo build --workspace --release --bins)");
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "1"]);
    let node_pid = f.status()["processes"][0]["pid"].as_u64().expect("emu-node pid") as u32;
    let rejected = |cause: &str| metric_sum(&f, "weft_tap_rejected_total", &format!("host=\"h0\",cause=\"{cause}\""));
    let consumed = || metric_sum(&f, "weft_switch_consumed_by_program_total", "");
    let foreign = || metric_sum(&f, "weft_switch_drops_total", "cause=\"unknown_ethertype\"");
    // The victim: h1 (leaf0) -> h9 (leaf1) across the spines; h0's frames go
    // to h2 on its own leaf, so the two share only the emu-node.
    let victim = |secs| iperf_in_background(&f, "h1", "h9", "10.0.1.3", 5201, secs);
    let alone = victim(4).join().expect("iperf3 thread");
    eprintln!("victim alone: {:.0} Mbit/s", alone / 1e6);
    assert!(alone > 100e6, "victim TCP alone only {alone} bit/s");

    // 1. One of each hostile kind, 20 times, during the victim's flow.
    let (consumed0, foreign0) = (consumed(), foreign());
    let run = victim(4);
    std::thread::sleep(Duration::from_millis(500));
    // A host that is root in its namespace may raise its MTU past the
    // link's to send oversize frames.
    let o = f.exec("h0", &["ip", "link", "set", "eth0", "mtu", "9000"]).output().expect("ip link");
    assert!(o.status.success(), "mtu 9000: {}", String::from_utf8_lossy(&o.stderr));
    let sent = hostile_host(&f, "h0", "10.0.0.4", &["--repeat", "20"]);
    let with_hostile = run.join().expect("iperf3 thread");
    eprintln!("hostile frames sent: {sent}; victim meanwhile {:.0} Mbit/s", with_hostile / 1e6);
    assert!(sent["errors"].as_object().is_some_and(|e| e.is_empty()), "the kernel refused some: {sent}");
    for cause in ["malformed", "bad_ipv4_checksum", "bad_icrc", "oversize", "unknown_ethertype", "pfc", "spoofed_source", "fabric_control"]
    {
        let n = sent["sent"][cause].as_u64().unwrap_or(0);
        assert!(n >= 20, "{cause}: sent {n}");
        assert_eq!(rejected(cause), n as f64, "{cause}: every frame counted at the edge");
    }
    assert_eq!(consumed(), consumed0, "no hostile frame reached a switch program");
    assert_eq!(foreign(), foreign0, "no hostile frame reached a switch's parser");
    assert!(with_hostile > alone * 0.8, "victim {with_hostile} bit/s with hostile frames vs {alone} alone");
    assert_eq!(ping_rtts(&f, "h0", "10.0.1.2", 10).len(), 10, "h0's own traffic still flows");

    // 2. Floods past the qdisc while the victim runs; RSS sampled.
    for kind in ["valid", "hostile"] {
        let rss0 = rss_kib(node_pid);
        let run = victim(5);
        std::thread::sleep(Duration::from_millis(500));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut peak = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    peak = peak.max(rss_kib(node_pid));
                    std::thread::sleep(Duration::from_millis(100));
                }
                peak
            })
        };
        let flood = hostile_host(&f, "h0", "10.0.0.4", &["--flood-secs", "4", "--flood-kind", kind]);
        let during = run.join().expect("iperf3 thread");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let peak = sampler.join().unwrap_or(0);
        eprintln!(
            "flood of {kind} frames: {} written by h0 ({} refused by its kernel); victim {:.0} Mbit/s ({:.0} % of alone); emu-node RSS {} -> peak {} KiB",
            flood["sent"]["flood"],
            flood["errors"]["flood refused by the kernel"],
            during / 1e6,
            100.0 * during / alone,
            rss0,
            peak
        );
        assert!(flood["sent"]["flood"].as_u64().unwrap_or(0) > 10_000, "the flood wrote frames: {flood}");
        assert!(during > alone * 0.5, "{kind} flood starved the victim: {during} bit/s vs {alone} alone");
        assert!(peak < rss0 + 64 * 1024, "{kind} flood grew the emu-node from {rss0} KiB to {peak} KiB");
    }
    assert!(rejected("fabric_control") > 1000.0, "the hostile flood was refused at the edge");
    let s = f.status();
    assert!(s["processes"].as_array().is_some_and(|p| p.iter().all(|p| p["state"] == "running")), "the fabric runs on: {s}");
}

/// Clients with the fabric's certificate pin but no token that
/// send a replayed mid-session message, an oversized or a truncated or a
/// garbled message, or nothing at all, are each refused with the reason,
/// logged (`weft status` events), and the fabric keeps running.
#[test]
#[ignore = "needs root (weft up): scripts/test runs it (as root, --include-ignored)"]
fn control_channel_refuses_replayed_oversized_truncated_and_silent_clients_and_logs_them() {
    use emu_node::control::{self, ToNode, ToOrchestrator};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&[]) {
        return;
    }
    let f = Fabric::up("leaf-spine-2x4-rt-synthetic", &["--nodes", "1"]);
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap()).unwrap();
    let control_addr: std::net::SocketAddr = st["control"].as_str().unwrap().parse().unwrap();
    let pin = st["pin"].as_str().unwrap().to_string();
    let replayed = control::encode(&ToOrchestrator::Running).unwrap();
    let mut truncated = 100u32.to_be_bytes().to_vec();
    truncated.extend_from_slice(&[0u8; 10]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("replayed", replayed, "Running message before any Hello"),
        ("oversized", vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3], "exceeds the limit"),
        ("truncated", truncated, "control stream"),
        ("garbled", vec![0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff], "malformed control message"),
        ("silent", vec![], "no Hello within"),
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let answers: Vec<(String, String)> = rt.block_on(async {
        let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        ep.set_default_client_config(emu_node::tls::quic_client(&pin, emu_node::link::quic::control_transport()).unwrap());
        let tasks: Vec<_> = cases
            .iter()
            .map(|(name, bytes, _)| {
                let (ep, name, bytes) = (ep.clone(), name.to_string(), bytes.clone());
                tokio::spawn(async move {
                    let conn =
                        ep.connect(control_addr, emu_node::tls::SERVER_NAME).unwrap().await.expect("TLS with the pinned certificate");
                    let (mut tx, mut rx) = conn.open_bi().await.unwrap();
                    // A stream is announced to the peer by its first byte.
                    tx.write_all(if bytes.is_empty() { &[0u8][..] } else { &bytes }).await.unwrap();
                    if name == "truncated" {
                        let _ = tx.finish();
                    }
                    let answer = match tokio::time::timeout(Duration::from_secs(15), control::recv::<ToNode>(&mut rx)).await {
                        Ok(Ok(ToNode::Refused(why))) => why,
                        other => format!("no refusal: {other:?}"),
                    };
                    (name, answer)
                })
            })
            .collect();
        let mut v = Vec::new();
        for t in tasks {
            v.push(t.await.unwrap());
        }
        v
    });
    for ((name, answer), (_, _, want)) in answers.iter().zip(&cases) {
        eprintln!("{name}: refused: {answer}");
        // The silent client sent one byte of a length prefix, then nothing.
        assert!(answer.contains(want), "{name}: {answer}");
    }
    let s = f.status();
    let events: Vec<String> = s["events"].as_array().into_iter().flatten().filter_map(|e| e.as_str()).map(String::from).collect();
    let refused = events.iter().filter(|e| e.contains("refused a control connection from 127.0.0.1")).count();
    assert_eq!(refused, cases.len(), "each refusal logged: {events:?}");
    assert!(s["processes"].as_array().is_some_and(|p| p.iter().all(|p| p["state"] == "running")), "the fabric runs on: {s}");
}

/// The share of `n` pings from `host` to `to`, 10 ms apart, that got no
/// answer within 1 s.
fn ping_loss(f: &Fabric, host: &str, to: &str, n: usize) -> f64 {
    let o = f.exec(host, &["ping", "-n", "-q", "-c", &n.to_string(), "-i", "0.01", "-W", "1", to]).output().expect("ping");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let received: f64 = text.split(", ").find(|p| p.ends_with("received")).and_then(|p| p.split(' ').next()?.parse().ok()).unwrap_or(0.0);
    1.0 - received / n as f64
}

/// Fault injection: `weft link LINK loss P` makes both
/// directions of a live link lose frames at random (the host's NIC model
/// toward its ToR, the ToR's port toward the host), counted as such, and
/// `loss 0` ends it.
#[test]
#[ignore = "needs root, /dev/net/tun and ip, ping: scripts/test runs it (as root, --include-ignored)"]
fn weft_link_loss_drops_that_share_both_ways_and_counts_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "ping"]) {
        return;
    }
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "1"]);
    let lost = |n: usize| ping_loss(&f, "h0", "10.0.0.3", n);
    assert_eq!(lost(20), 0.0, "no loss before");
    let msg = f.ok(&["link", "h0-leaf0", "loss", "30%"]);
    assert!(msg.contains("loss 30%"), "{msg}");
    let lossy = lost(400);
    // A ping and its reply each cross the link once: 1 - 0.7^2 = 51 %.
    eprintln!("ping loss with 30 % per direction: {:.1} %", lossy * 100.0);
    assert!((0.40..0.62).contains(&lossy), "ping loss {lossy}");
    let up = metric_sum(&f, "weft_tap_link_loss_drops_total", "host=\"h0\"");
    let down = metric_sum(&f, "weft_actor_link_loss_drops_total", "actor=\"leaf0\"");
    eprintln!("lost h0->leaf0 {up}, leaf0->h0 {down}");
    assert!(up > 60.0 && down > 30.0, "both directions lost and counted: {up} {down}");
    f.ok(&["link", "h0-leaf0", "loss", "0"]);
    assert_eq!(lost(50), 0.0, "loss 0 ends it");
}

/// Fault injection: `weft link LINK flap PERIOD` takes a live
/// link down and up every PERIOD (pings through it are lost about half the
/// time), says so in `weft status`, and `flap off` leaves it up.
#[test]
#[ignore = "needs root, /dev/net/tun and ip, ping: scripts/test runs it (as root, --include-ignored)"]
fn weft_link_flap_takes_a_link_down_and_up_until_told_to_stop() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "ping"]) {
        return;
    }
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "1"]);
    let lost = |n: usize| ping_loss(&f, "h0", "10.0.0.3", n);
    let msg = f.ok(&["link", "h0-leaf0", "flap", "200ms"]);
    assert!(msg.contains("flapping"), "{msg}");
    // 300 pings 10 ms apart: 3 s, 7-8 flaps.
    let lossy = lost(300);
    eprintln!("ping loss through a link flapping every 200 ms: {:.1} %", lossy * 100.0);
    assert!((0.3..0.7).contains(&lossy), "about half lost: {lossy}");
    let events = f.status()["events"].to_string();
    assert!(events.contains("h0-leaf0: flapping"), "{events}");
    let off = f.ok(&["link", "h0-leaf0", "flap", "off"]);
    assert!(off.contains("flapping stopped"), "{off}");
    assert_eq!(lost(50), 0.0, "up for good after `flap off`");
    let o = f.run(&["link", "h0-leaf0", "flap", "10us"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("at least 1ms"));
}

/// `metric_sum` once it reaches `want`, polling for up to 3 s (what an
/// actor counts after a command returned).
fn metric_reaches(f: &Fabric, name: &str, label: &str, want: f64) -> f64 {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let v = metric_sum(f, name, label);
        if v >= want || Instant::now() > until {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Fault injection: `weft node SWITCH down|up|restart [BOOT]` on
/// a live fabric of 3 emu-nodes. A switch down is every link of it down
/// (pings through it are lost), up brings them back; a restart reboots the
/// switch (its register state is gone, `weft_switch_restarts_total`
/// counts it) and traffic flows again, at once or after the boot time,
/// also for a switch in another process than its neighbours.
#[test]
#[ignore = "needs root, /dev/net/tun and ip, ping: scripts/test runs it (as root, --include-ignored)"]
fn weft_node_takes_a_switch_down_and_up_and_restarts_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "ping"]) {
        return;
    }
    let f = Fabric::up("leaf-spine-2x4-rt", &["--nodes", "3"]);
    let (near, far) = ("10.0.0.3", "10.0.1.2");
    assert_eq!(ping_loss(&f, "h0", far, 20), 0.0, "through the spines before");
    let m = f.ok(&["node", "leaf0", "down"]);
    assert!(m.contains("leaf0: down (12 links)"), "{m}");
    assert_eq!(ping_loss(&f, "h0", near, 10), 1.0, "nothing passes a switch that is down");
    let m = f.ok(&["node", "leaf0", "up"]);
    assert!(m.contains("leaf0: up"), "{m}");
    assert_eq!(ping_loss(&f, "h0", near, 20), 0.0, "up again");
    // A restart in no time.
    let m = f.ok(&["node", "leaf0", "restart"]);
    assert!(m.contains("restarted (register state lost"), "{m}");
    assert_eq!(metric_reaches(&f, "weft_switch_restarts_total", "switch=\"leaf0\"", 1.0), 1.0);
    assert_eq!(ping_loss(&f, "h0", far, 20), 0.0, "the restarted leaf forwards");
    // A spine (not in the leaves' processes) that boots for 1 s.
    let m = f.ok(&["node", "spine1", "restart", "1s"]);
    assert!(m.contains("links down, up in 1.000s"), "{m}");
    assert_eq!(metric_reaches(&f, "weft_switch_restarts_total", "switch=\"spine1\"", 1.0), 1.0);
    std::thread::sleep(Duration::from_millis(1500));
    let events = f.status()["events"].to_string();
    assert!(events.contains("spine1: booted, links up"), "{events}");
    assert_eq!(ping_loss(&f, "h0", far, 50), 0.0, "every path works after the boot");
    assert_eq!(metric_sum(&f, "weft_switch_restarts_total", ""), 2.0, "no other switch restarted");
    for (args, why) in [(&["node", "h0", "restart"][..], "is a host"), (&["node", "spine9", "down"][..], "no switch `spine9`")] {
        let o = f.run(args);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains(why), "{args:?}: {o:?}");
    }
}

/// A switch restart in the topology schedule applies in both
/// clocks, in weft's process and in an emu-node: the only switch of a
/// path reboots at 5 ms of fabric time with its links down for 195 ms, so
/// a 4 MB UDP flow (~33 ms) loses what it sends after 5 ms, and the
/// switch's results count the restart.
#[test]
fn topology_restart_schedule_applies_in_both_clocks() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let topo = one_path_topology("restart", "letflow", "[[events]]\nat = \"5ms\"\nnode = \"l0\"\naction = \"restart\"\nboot = \"195ms\"\n");
    let dir = topo.parent().unwrap().to_path_buf();
    let runs = [("virtual", "0"), ("real", "0"), ("real", "1")].map(|(c, n)| (c, n, run_pair_flow(&topo, c, n)));
    let _ = std::fs::remove_dir_all(&dir);
    for (clock, nodes, s) in &runs {
        let delivered = s["flows"][0]["bytes_delivered"].as_u64().unwrap_or(0);
        let restarts = s["switches"][0]["counters"]["restarts"].as_u64().unwrap_or(0);
        let first_arrival = s["flows"][0]["first_arrival"].as_u64().unwrap_or(0);
        eprintln!("{clock} clock, {nodes} emu-nodes: delivered {delivered} B, restarts {restarts}, first arrival {first_arrival} ns");
        assert_eq!(restarts, 1, "{clock}/{nodes}: the switch restarted once");
        // Either the switch cut the flow, or it held the flow back until it
        // had booted at 200 ms: nothing arrives before then. A CI run across
        // processes delivered all 4 MB: a UDP host sends nothing before its
        // gateway's ARP reply, so on a loaded machine an ARP exchange still
        // on its way at 5 ms is cut by the restart, and the host's ARP retry
        // sends the whole flow after the boot.
        assert!(
            delivered < 1_000_000 || first_arrival >= 200_000_000,
            "{clock}/{nodes}: what was sent while the switch booted is lost: delivered {delivered} B, first at {first_arrival} ns"
        );
        // Across processes the first milliseconds of a run lag (frames due
        // before 5 ms still on their way when the restart applies at 5 ms
        // of wall-clock fabric time are lost too), so only one process
        // delivers a predictable share.
        if *nodes == "0" {
            assert!(delivered > 300_000, "{clock}: what was sent before the restart arrives: delivered {delivered} B");
        }
    }
}

/// Metrics from every machine: a fabric of synthetic hosts with live
/// traffic over the three machines, `weft up --prometheus`: the
/// orchestrator's Prometheus scrapes the emu-nodes on the other machines
/// over HTTPS (the fabric's certificate, the fabric token as bearer) and
/// every dashboard query but those of schemes the fabric does not run has
/// data; a scrape without the token, or with another, is refused.
#[test]
#[ignore = "needs root, ip, nsenter, sshd, ssh, ssh-keygen, prometheus: scripts/test runs it (as root, --include-ignored)"]
fn prometheus_scrapes_the_emu_nodes_of_every_machine_over_tls_with_the_token() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "nsenter", "sshd", "ssh", "ssh-keygen", "prometheus", "curl"]) {
        return;
    }
    let m = Machines::new(9000);
    let file = m.file("machines.toml", |t| t);
    let f = Fabric::up(
        "leaf-spine-2x4-rt-synthetic",
        &[
            "--machines",
            file.to_str().unwrap(),
            "--scheme",
            "conweave",
            "--workload",
            "alistorage",
            "--load",
            "0.2",
            "--prometheus",
            "--prometheus-listen",
            "127.0.0.1:0",
            // A scrape may take over a second on a loaded 2-core machine
            // (the timeout is the interval).
            "--scrape-interval",
            "2s",
        ],
    );
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.dir.join("fabric.json")).unwrap()).unwrap();
    let url = st.pointer("/prometheus/1").and_then(|p| p.as_str()).unwrap_or_default().to_string();
    let endpoints: Vec<String> =
        st["metrics"].as_object().map(|o| o.values().filter_map(|v| v.as_str().map(String::from)).collect()).unwrap_or_default();
    assert_eq!(endpoints.len(), 3, "{st}");
    assert!(
        endpoints.iter().all(|e| e.starts_with("https://10.77.0.")),
        "every emu-node on its machine's address, over TLS: {endpoints:?}"
    );
    // With the fabric's certificate under its name and the token: metrics;
    // without the token, with another, or without TLS: none.
    let prom = f.dir.join("prometheus");
    let hostport = endpoints[0].trim_start_matches("https://").trim_end_matches("/metrics").to_string();
    let (ip, port) = hostport.rsplit_once(':').unwrap();
    let curl = |extra: &[&str]| {
        let o = Command::new("curl")
            .args(["-s", "-m", "10", "-w", "\n%{http_code}", "--resolve", &format!("weft-fabric:{port}:{ip}"), "--cacert"])
            .arg(prom.join("fabric-ca.pem"))
            .args(extra)
            .arg(format!("https://weft-fabric:{port}/metrics"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let token = std::fs::read_to_string(prom.join("token")).unwrap();
    let good = curl(&["-H", &format!("Authorization: Bearer {token}")]);
    assert!(good.ends_with("200") && good.contains("weft_switch_rx_frames_total"), "{good}");
    for (extra, why) in [(vec![], "no token"), (vec!["-H", "Authorization: Bearer 00000000000000000000"], "a wrong token")] {
        let r = curl(&extra);
        assert!(r.ends_with("401") && !r.contains("weft_switch"), "{why}: {r}");
    }
    let plain = Command::new("curl").args(["-s", "-m", "5", &format!("http://{hostport}/metrics")]).output().unwrap();
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("weft_"), "plain HTTP gets no metrics");
    // Prometheus scrapes all three, twice.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let up = emu_orchestrator::observe::dashboards::instant_query(&url, "count_over_time(up{job=\"weft\"}[1m]) >= 2 and up == 1")
            .unwrap_or_default();
        if up.len() == 3 {
            break;
        }
        if std::time::Instant::now() >= deadline {
            // Why a target is down: Prometheus's own last error per target.
            let targets = Command::new("curl").args(["-s", "-m", "5", &format!("{url}/api/v1/targets")]).output().unwrap();
            panic!("Prometheus did not scrape the 3 emu-nodes: {up:?}\ntargets: {}", String::from_utf8_lossy(&targets.stdout));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(3));
    let out = Command::new(weft_bin())
        .args(["dashboards", "--dir", Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards").to_str().unwrap(), "--prometheus", &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = text.lines().filter(|l| l.starts_with("ok ")).count();
    // Panels of schemes this fabric does not run have no series, as on
    // one machine.
    let other_schemes = ["conga", "letflow", "drill", "lbsp", "p4te", "int_nexthop", "ecmp", "rps"];
    let missing: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .filter(|l| !other_schemes.iter().any(|s| l.contains(&format!("weft_scheme_{s}_"))))
        .collect();
    assert!(ok > 0 && missing.is_empty(), "dashboard queries without data over three machines:\n{}\n{text}", missing.join("\n"));
    f.ok(&["down"]);
}

/// Processes (any command) whose command line holds `what`.
fn processes_with(what: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).map(|c| String::from_utf8_lossy(&c).into_owned()).unwrap_or_default();
            cmd.contains(what) && !cmd.starts_with("pkill")
        })
        .collect()
}

/// Ctrl-C of `weft compare --machines` reaches the cells running on the
/// machines: each stops and returns what it has, the comparison exits with
/// 130 and writes compare.json marked incomplete, and no `weft compare`
/// keeps running on any machine.
#[test]
#[ignore = "needs root, ip, nsenter, sshd, ssh, ssh-keygen: scripts/test runs it (as root, --include-ignored)"]
fn ctrl_c_of_a_comparison_over_machines_stops_its_cells_there() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "nsenter", "sshd", "ssh", "ssh-keygen"]) {
        return;
    }
    let m = Machines::new(1500);
    let file = m.file("machines.toml", |t| t);
    let out = m.dir.join("cut");
    // Long cells: each would take minutes.
    let child = Command::new(weft_bin())
        .args(["compare", "leaf-spine-2x4", "--schemes", "ecmp,conweave", "--loads", "0.5", "--flows", "2000000", "--machines"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while processes_with("/tmp/weft-compare.").iter().filter(|p| **p != child.id()).count() < 2 {
        assert!(std::time::Instant::now() < deadline, "the two cells did not start on the machines");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t0 = std::time::Instant::now();
    let o = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{said}");
    assert!(t0.elapsed() < Duration::from_secs(30), "stopped in {:?}", t0.elapsed());
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    assert!(report["incomplete"].as_str().is_some_and(|s| s.starts_with("interrupted")), "{report}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !processes_with("/tmp/weft-compare.").is_empty() {
        assert!(std::time::Instant::now() < deadline, "still running on the machines: {:?}", processes_with("/tmp/weft-compare."));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Ctrl-C of `weft up --machines` (in the foreground, as a user runs it)
/// stops every emu-node on every machine, deletes their hosts' namespaces
/// there, and leaves no state behind.
#[test]
#[ignore = "needs root, ip, nsenter, sshd, ssh, ssh-keygen: scripts/test runs it (as root, --include-ignored)"]
fn ctrl_c_of_a_fabric_over_machines_leaves_nothing_on_any_machine() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites(&["ip", "nsenter", "sshd", "ssh", "ssh-keygen"]) {
        return;
    }
    let m = Machines::new(1500);
    let file = m.file("machines.toml", |t| t);
    let prefix = unique("");
    let dir = std::env::temp_dir().join(format!("weft-test-{}", prefix.trim_end_matches('-')));
    let _ = std::fs::remove_dir_all(&dir);
    let child = Command::new(weft_bin())
        .args(["up", "leaf-spine-2x4-rt", "--links", "udp", "--netns-prefix", &prefix, "--machines"])
        .arg(&file)
        .env("WEFT_STATE_DIR", &dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let state = loop {
        let st: Option<serde_json::Value> =
            std::fs::read_to_string(dir.join("fabric.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
        if let Some(st) = st.filter(|s| s["phase"] == "running") {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "the fabric did not come up");
        std::thread::sleep(Duration::from_millis(100));
    };
    let pin = state["pin"].as_str().unwrap_or_default().to_string();
    assert_eq!(emu_nodes_with(&pin).len(), 3, "three emu-nodes on the machines");
    let ours = || emu_node::tap::list_netns().into_iter().filter(|n| n.starts_with(&prefix)).count();
    assert_eq!(ours(), 16, "the TAP hosts' namespaces");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{said}");
    assert!(emu_nodes_with(&pin).is_empty(), "emu-nodes left: {:?}", emu_nodes_with(&pin));
    assert_eq!(ours(), 0, "namespaces left");
    assert!(!dir.join("fabric.json").exists(), "state left");
    let _ = std::fs::remove_dir_all(&dir);
}
