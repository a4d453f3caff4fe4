//! Observability against the real components (docs/RESULTS.md): live `/metrics`
//! endpoints checked by `promtool check metrics`, a real Prometheus
//! scraping live fabrics and answering every query of every shipped
//! dashboard, `weft up --prometheus` / `weft down`, a virtual-time run's
//! OpenMetrics backfilled with `promtool tsdb create-blocks-from
//! openmetrics` and queried, and the clear errors for bad input.
//!
//! Needs the Debian `prometheus` package (prometheus, promtool) and the
//! emu-node binary: those tests are `#[ignore]` with the reason, and
//! `scripts/test` runs them (`--include-ignored`) as root or in CI. In CI
//! (`CI=true`) a missing prerequisite fails the test; elsewhere, when
//! included, it prints why it skips. Tests run one at a time
//! (the machine has two cores). Everything listens on 127.0.0.1 only, and
//! every process and directory a test starts is removed on drop, also on
//! failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn weft_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weft"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn in_path(t: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(t).is_file()))
}

/// Whether prometheus, promtool and emu-node exist; panics in CI when not.
fn prerequisites() -> bool {
    let mut missing: Vec<String> = ["prometheus", "promtool"].iter().filter(|t| !in_path(t)).map(|t| t.to_string()).collect();
    if !weft_bin().with_file_name("emu-node").exists() {
        missing.push("the emu-node binary next to weft (cargo build --release)".into());
    }
    if missing.is_empty() {
        return true;
    }
    // As root (or in CI) the test could run: scripts/test installs
    // prometheus and builds emu-node, so a missing one fails the test.
    // SAFETY: geteuid has no preconditions.
    if std::env::var("CI").is_ok_and(|v| v == "true") || unsafe { libc::geteuid() } == 0 {
        panic!("observability test prerequisites missing: {} (scripts/test installs them as root)", missing.join(", "));
    }
    eprintln!(
        "SKIPPED {}: missing {} (apt-get install prometheus)",
        std::thread::current().name().unwrap_or("observability test"),
        missing.join(", ")
    );
    false
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("weft-obs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        Scratch(d)
    }
    fn path(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed (whole process group) on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < until, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn query(prom: &str, q: &str) -> Vec<serde_json::Value> {
    emu_orchestrator::observe::dashboards::instant_query(prom, q).unwrap_or_else(|e| panic!("{q}: {e}"))
}

fn value(v: &serde_json::Value) -> f64 {
    v.pointer("/value/1").and_then(|x| x.as_str()).and_then(|x| x.parse().ok()).unwrap_or(f64::NAN)
}

/// Targets of a file-SD file.
fn sd_targets(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g.get("targets").and_then(|t| t.as_array()).cloned().unwrap_or_default())
        .filter_map(|t| t.as_str().map(String::from))
        .collect()
}

/// `promtool check metrics` on a live scrape of `target`.
fn promtool_check_live_scrape(target: &str) -> String {
    let body = ureq::get(&format!("http://{target}/metrics"))
        .call()
        .and_then(|mut r| r.body_mut().read_to_string())
        .unwrap_or_else(|e| panic!("scrape {target}: {e}"));
    assert!(
        body.contains("# TYPE weft_actor_deadline_lag_seconds histogram"),
        "{target} serves no weft metrics:\n{}",
        &body[..body.len().min(500)]
    );
    let mut c = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("promtool: {e}"));
    if let Some(mut i) = c.stdin.take() {
        use std::io::Write;
        let _ = i.write_all(body.as_bytes());
    }
    let out = c.wait_with_output().unwrap_or_else(|e| panic!("promtool: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.trim().is_empty(), "promtool check metrics on {target}: {text}");
    body
}

/// A live fabric a user starts with `weft up --workload --detach`, in a
/// state directory of its own; `weft down` on drop (also on failure).
struct LiveFabric(PathBuf);

impl Drop for LiveFabric {
    fn drop(&mut self) {
        let _ = Command::new(weft_bin()).arg("down").env("WEFT_STATE_DIR", &self.0).output();
    }
}

/// `weft up` of `scheme` on 2 emu-nodes with live RoCE traffic (the
/// synthetic hosts' `--workload`) for 30 s, serving /metrics; returns the
/// fabric and its file-SD file.
fn live_fabric(dir: &Scratch, scheme: &str) -> (LiveFabric, PathBuf) {
    let state = dir.path(&format!("{scheme}-state"));
    let out = Command::new(weft_bin())
        .args(["up", "leaf-spine-2x4-rt-synthetic", "--nodes", "2", "--links", "udp", "--scheme", scheme, "--detach"])
        .args(["--workload", "alistorage", "--load", "0.1", "--transport", "roce-lossless", "--duration", "30s"])
        .args(["--metrics", "127.0.0.1:0"])
        .env("WEFT_STATE_DIR", &state)
        .output()
        .unwrap_or_else(|e| panic!("weft up: {e}"));
    let fabric = LiveFabric(state.clone());
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "weft up --workload failed: {said}");
    assert!(said.contains("traffic: alistorage at load 0.1"), "{said}");
    (fabric, state.join("prometheus/targets.json"))
}

#[test]
#[ignore = "needs prometheus and promtool (Debian package prometheus): scripts/test runs it (as root, --include-ignored)"]
fn every_dashboard_query_returns_data_from_a_real_prometheus_scraping_live_fabrics() {
    let _g = serial();
    if !prerequisites() {
        return;
    }
    let dir = Scratch::new("dash");
    // Two live fabrics as a user starts them, `weft up --workload`:
    // ConWeave and CONGA (the scheme panels have data where their scheme
    // runs), each on two emu-nodes, so leaf-spine links cross processes
    // over UDP.
    let (_a, sd_a) = live_fabric(&dir, "conweave");
    let (_b, sd_b) = live_fabric(&dir, "conga");
    for sd in [&sd_a, &sd_b] {
        wait_for(&format!("{}", sd.display()), Duration::from_secs(30), || sd_targets(sd).len() == 2);
    }
    let targets: Vec<String> = sd_targets(&sd_a).into_iter().chain(sd_targets(&sd_b)).collect();
    // promtool accepts a live scrape of every endpoint.
    for t in &targets {
        promtool_check_live_scrape(t);
    }
    let pdir = dir.path("prom");
    std::fs::create_dir_all(pdir.join("prometheus")).unwrap_or_else(|e| panic!("{e}"));
    let yml = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: weft\n    file_sd_configs: [{{files: ['{}', '{}']}}]\n",
        sd_a.display(),
        sd_b.display()
    );
    std::fs::write(pdir.join("prometheus/prometheus.yml"), yml).unwrap_or_else(|e| panic!("{e}"));
    let (child, addr) =
        emu_orchestrator::observe::prometheus::start(&pdir, "prometheus", "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    let _prom = Proc(child);
    let url = format!("http://{addr}");
    // Two scrapes of every target.
    wait_for("two scrapes of all 4 targets", Duration::from_secs(40), || {
        let r = emu_orchestrator::observe::dashboards::instant_query(&url, "count_over_time(up{job=\"weft\"}[1m]) >= 2 and up == 1")
            .unwrap_or_default();
        r.len() == targets.len()
    });
    std::thread::sleep(Duration::from_secs(2));
    let out = Command::new(weft_bin())
        .args(["dashboards", "--dir", repo().join("dashboards").to_str().unwrap_or_default(), "--prometheus", &url])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "dashboard queries without data:\n{}\n{}", text, String::from_utf8_lossy(&out.stderr));
    let n = text.lines().filter(|l| l.starts_with("ok ")).count();
    let all = emu_orchestrator::observe::dashboards::load(&repo().join("dashboards")).unwrap_or_else(|e| panic!("{e}")).len();
    assert_eq!(n, all, "{text}");
    // The data is live: RoCE flows completed and were counted.
    let done = query(&url, "sum(weft_host_flows_completed_total)");
    assert!(done.first().map(value).unwrap_or(0.0) > 0.0, "no completed flows: {done:?}");
}

#[test]
#[ignore = "needs prometheus and promtool (Debian package prometheus): scripts/test runs it (as root, --include-ignored)"]
fn weft_up_prometheus_scrapes_every_emu_node_and_weft_down_stops_it() {
    let _g = serial();
    if !prerequisites() {
        return;
    }
    let dir = Scratch::new("up");
    let state = dir.path("state");
    let weft = |args: &[&str]| Command::new(weft_bin()).args(args).env("WEFT_STATE_DIR", &state).output().unwrap_or_else(|e| panic!("{e}"));
    struct Down<'a>(&'a dyn Fn(&[&str]) -> std::process::Output);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = (self.0)(&["down"]);
        }
    }
    let up = weft(&["up", "leaf-spine-2x4-rt-synthetic", "--nodes", "2", "--detach", "--prometheus", "--prometheus-listen", "127.0.0.1:0"]);
    let _down = Down(&weft);
    let said = format!("{}{}", String::from_utf8_lossy(&up.stdout), String::from_utf8_lossy(&up.stderr));
    assert!(up.status.success(), "weft up failed: {said}");
    assert!(said.contains("prometheus: http://127.0.0.1:"), "{said}");
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.join("fabric.json")).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
    let pid = st.pointer("/prometheus/0").and_then(|p| p.as_u64()).unwrap_or(0) as u32;
    let url = st.pointer("/prometheus/1").and_then(|p| p.as_str()).unwrap_or_default().to_string();
    assert!(pid > 0 && url.starts_with("http://127.0.0.1:"), "{st}");
    // The file-SD file lists both emu-nodes, and Prometheus scrapes them.
    let sd = sd_targets(&state.join("prometheus/targets.json"));
    assert_eq!(sd.len(), 2, "{sd:?}");
    wait_for("both emu-nodes up in Prometheus", Duration::from_secs(30), || {
        emu_orchestrator::observe::dashboards::instant_query(&url, "up{job=\"weft\"} == 1").unwrap_or_default().len() == 2
    });
    let switches = query(&url, "count(weft_switch_rx_frames_total)");
    assert_eq!(switches.first().map(value), Some(6.0), "2 leaves + 4 spines: {switches:?}");
    for t in &sd {
        promtool_check_live_scrape(t);
    }
    let down = weft(&["down"]);
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    wait_for("prometheus to stop", Duration::from_secs(10), || {
        // SAFETY: kill(pid, 0) only checks for existence.
        let gone = unsafe { libc::kill(pid as i32, 0) } != 0;
        gone || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
    });
    assert!(!state.join("fabric.json").exists());
}

#[test]
#[ignore = "needs prometheus and promtool (Debian package prometheus): scripts/test runs it (as root, --include-ignored)"]
fn virtual_time_metrics_backfill_into_a_tsdb_that_answers_the_dashboards() {
    let _g = serial();
    if !prerequisites() {
        return;
    }
    let dir = Scratch::new("backfill");
    let om = dir.path("run.om");
    // Timestamps end a little before now (1 simulated µs = 1 ms), so the
    // dashboards' instant queries see the run.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let start = (now - 60).to_string();
    let out = Command::new(weft_bin())
        .args(["run", "--scheme", "conweave", "--transport", "roce-irn", "--workload", "alistorage", "--flows", "400", "--quiet"])
        .args([
            "--metrics-out",
            om.to_str().unwrap_or_default(),
            "--metrics-start",
            &start,
            "--out",
            dir.path("out").to_str().unwrap_or_default(),
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path("out/summary.json")).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
    let flows = summary.pointer("/flows").and_then(|f| f.as_array()).map_or(0, |f| f.len());
    let completed = summary
        .pointer("/flows")
        .and_then(|f| f.as_array())
        .map_or(0, |f| f.iter().filter(|x| x.get("fct").is_some_and(|v| !v.is_null())).count());
    assert!(flows >= 400 && completed == flows, "{flows} flows, {completed} completed");
    let simulated = summary.pointer("/simulated_ns").and_then(|s| s.as_u64()).unwrap_or(0);
    assert!(simulated > 1_000_000 && simulated < 50_000_000, "simulated {simulated} ns");
    // Backfill.
    let tsdb = dir.path("prom/prometheus/data");
    let bf = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics", om.to_str().unwrap_or_default(), tsdb.to_str().unwrap_or_default()])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(bf.status.success(), "promtool backfill: {}{}", String::from_utf8_lossy(&bf.stdout), String::from_utf8_lossy(&bf.stderr));
    // Prometheus on that TSDB, scraping nothing.
    std::fs::write(dir.path("prom/prometheus/prometheus.yml"), "global: {scrape_interval: 1m}\nscrape_configs: []\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let (child, addr) = emu_orchestrator::observe::prometheus::start(
        &dir.path("prom"),
        "prometheus",
        "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let _prom = Proc(child);
    let url = format!("http://{addr}");
    // Every flow completed, at the last sample; the first sample had none.
    let end_ts = (now - 60) as f64 + simulated as f64 * 1e-6;
    let at = |q: &str, t: f64| -> f64 {
        let agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(10))).build().new_agent();
        let body = agent
            .get(&format!("{url}/api/v1/query"))
            .query("query", q)
            .query("time", format!("{t:.3}"))
            .call()
            .and_then(|mut r| r.body_mut().read_to_string())
            .unwrap_or_else(|e| panic!("{q}: {e}"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v.pointer("/data/result/0").map(value).unwrap_or(f64::NAN)
    };
    assert_eq!(at("sum(weft_host_flows_completed_total)", end_ts + 0.5), completed as f64);
    assert_eq!(at("sum(weft_host_flows_completed_total)", (now - 60) as f64 + 0.05), 0.0);
    assert_eq!(at("sum(weft_host_fct_seconds_count)", end_ts + 0.5), completed as f64);
    let samples = at("count_over_time(weft_switch_rx_frames_total{switch=\"leaf0\"}[10m])", end_ts + 0.5);
    assert!(samples >= (simulated / 100_000) as f64, "{samples} samples for {simulated} ns at 100 us");
    // The same dashboards browse it: every query answers, except those on
    // metrics only a live process has (actors, inter-process links,
    // scrapes) and on CONGA, which did not run.
    let out = Command::new(weft_bin())
        .args([
            "dashboards",
            "--dir",
            repo().join("dashboards").to_str().unwrap_or_default(),
            "--prometheus",
            &url,
            "--rate-interval",
            "5m",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let live_only = ["weft_actor_", "weft_link_", "weft_process_", "weft_scheme_conga_"];
    let mut ok = 0;
    for l in text.lines() {
        if l.starts_with("ok ") {
            ok += 1;
        } else if l.starts_with("FAIL") {
            assert!(live_only.iter().any(|m| l.contains(m)), "a virtual-time query without data: {l}");
        }
    }
    assert!(ok >= 60, "only {ok} queries answered:\n{text}");
}

#[test]
fn bad_input_gets_one_clear_error() {
    let _g = serial();
    let dir = Scratch::new("bad");
    // An occupied metrics port.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = taken.local_addr().map(|a| a.port()).unwrap_or(0);
    let out = Command::new(weft_bin())
        .args(["run", "leaf-spine-2x4-rt-synthetic", "--clock", "real", "--flow-size", "10KB", "--metrics", &format!("127.0.0.1:{port}")])
        .args(["--out", dir.path("o").to_str().unwrap_or_default()])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("127.0.0.1:{port} is already in use")), "{err}");
    // A Prometheus binary that is not there: refused before anything starts.
    let out = Command::new(weft_bin())
        .args(["up", "leaf-spine-2x4-rt-synthetic", "--prometheus", "--prometheus-bin", "/nonexistent/prometheus"])
        .env("WEFT_STATE_DIR", dir.path("state"))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("`/nonexistent/prometheus` was not found") && err.contains("apt-get install prometheus"),
        "{err}"
    );
    assert!(!dir.path("state/fabric.json").exists());
    // A dashboard that is not JSON.
    let d = dir.path("dash");
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(d.join("broken.json"), "{\"panels\": [}\n").unwrap_or_else(|e| panic!("{e}"));
    let out =
        Command::new(weft_bin()).args(["dashboards", "--dir", d.to_str().unwrap_or_default()]).output().unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("broken.json is not valid JSON (line 1, column"), "{err}");
    // --metrics-out with a period the TSDB cannot resolve.
    let out = Command::new(weft_bin())
        .args([
            "run",
            "--metrics-out",
            dir.path("x.om").to_str().unwrap_or_default(),
            "--metrics-period",
            "100us",
            "--metrics-time-scale",
            "1",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("under 1 ms"), "{err}");
}
