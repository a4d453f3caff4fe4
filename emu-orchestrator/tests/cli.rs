//! The `weft` binary as a user runs it: outputs, exit codes, error lines.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn weft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft")).args(args).output().expect("run weft")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weft-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn run_twice_with_one_seed_writes_byte_identical_summaries() {
    let (a, b) = (tmp("det-a"), tmp("det-b"));
    for d in [&a, &b] {
        let o =
            weft(&["run", "leaf-spine-2x4", "--traffic", "all-to-all", "--flow-size", "50KB", "--seed", "9", "--out", d.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let sa = std::fs::read(a.join("summary.json")).unwrap();
    let sb = std::fs::read(b.join("summary.json")).unwrap();
    assert_eq!(sa, sb);
    let v: serde_json::Value = serde_json::from_slice(&sa).unwrap();
    assert_eq!(v["schema"], "weft.summary/1");
    assert_eq!(v["flows"].as_array().unwrap().len(), 16 * 15);
    assert!(v["totals"]["packet_hops"].as_u64().unwrap() > 0);
    for d in [a, b] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn default_run_uses_the_embedded_topology_and_prints_a_summary() {
    let d = tmp("default");
    let o = weft(&["run", "--out", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("leaf-spine-2x4 | scheme ecmp | permutation"), "{out}");
    assert!(out.contains("packet-hops"), "{out}");
    assert!(d.join("summary.json").exists());
    let _ = std::fs::remove_dir_all(d);
}

fn assert_one_line_error(o: &Output, needle: &str, out_dir: &Path) {
    assert!(!o.status.success());
    let e = stderr(o);
    assert_eq!(e.trim_end().lines().count(), 1, "one error line, got: {e}");
    assert!(e.starts_with("error: ") && e.contains(needle), "{e}");
    assert!(!out_dir.exists(), "nothing half-started: no output written");
}

#[test]
fn bad_input_gets_one_clear_error_line_and_a_nonzero_exit() {
    let d = tmp("bad");
    let ds = d.to_str().unwrap();
    let st = tmp("bad-up-state");
    let up = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weft")).arg("up").args(args).env("WEFT_STATE_DIR", &st).output().expect("run weft")
    };
    assert_one_line_error(&weft(&["run", "--scheme", "magic", "--out", ds]), "unknown scheme `magic`", &d);
    assert_one_line_error(&weft(&["run", "--traffic", "incast:16", "--out", ds]), "needs 17 hosts but the topology has 16", &d);
    assert_one_line_error(&weft(&["run", "--traffic", "ring", "--out", ds]), "unknown traffic pattern `ring`", &d);
    assert_one_line_error(&weft(&["run", "no-such-topology", "--out", ds]), "not a shipped topology", &d);
    assert_one_line_error(&weft(&["run", "--set", "ecmp.colour=red", "--out", ds]), "has no parameter `colour`", &d);
    assert_one_line_error(&weft(&["run", "--set", "ecmp.use_ports=maybe", "--out", ds]), "not a valid bool", &d);
    // A parameter of a scheme no switch runs (CONGA and LetFlow both declare
    // flowlet_gap_us) is refused, never applied to the scheme that runs.
    assert_one_line_error(
        &weft(&["run", "--scheme", "conga", "--set", "letflow.flowlet_gap_us=500", "--out", ds]),
        "letflow.flowlet_gap_us: no switch runs letflow (the switches run conga)",
        &d,
    );
    assert_one_line_error(
        &weft(&[
            "compare",
            "leaf-spine-2x4",
            "--schemes",
            "ecmp,conga",
            "--loads",
            "0.5",
            "--set",
            "letflow.flowlet_gap_us=500",
            "--out",
            ds,
        ]),
        "letflow is not one of --schemes ecmp,conga",
        &d,
    );
    assert_one_line_error(
        &up(&["leaf-spine-2x4-rt-synthetic", "--scheme", "conga", "--set", "letflow.flowlet_gap_us=500"]),
        "no switch runs letflow",
        &st,
    );
    assert_one_line_error(&weft(&["run", "--flow-size", "10", "--out", ds]), "has no unit", &d);
    assert_one_line_error(&weft(&["run", "--workload", "alistorage", "--load", "0", "--out", ds]), "--load 0 must be in (0, 1]", &d);
    assert_one_line_error(&weft(&["run", "--transport", "tcp-foo", "--out", ds]), "unknown transport `tcp-foo`", &d);
    assert_one_line_error(&weft(&["run", "--set", "dcqcn.g=0.1", "--out", ds]), "need --transport roce-lossless or roce-irn", &d);
    assert_one_line_error(&weft(&["run", "--transport", "roce-irn", "--set", "dcqcn.g=2", "--out", ds]), "not a fraction in (0, 1)", &d);
    assert_one_line_error(
        &weft(&["run", "--transport", "roce-lossless", "--set", "irn.bdp=20KB", "--out", ds]),
        "need --transport roce-irn",
        &d,
    );
    assert_one_line_error(
        &weft(&["run", "--transport", "roce-irn", "--set", "dcqcn.gee=1", "--out", ds]),
        "unknown transport parameter",
        &d,
    );
    assert_one_line_error(&weft(&["run", "--set", "tm.buffer=broadcom", "--out", ds]), "unknown buffer model `broadcom` (tofino, ns3)", &d);
    assert_one_line_error(&weft(&["run", "--set", "tm.alpha=1", "--out", ds]), "unknown traffic-manager parameter", &d);
    assert_one_line_error(&weft(&["run", "--set", "tm.held_pfc=maybe", "--out", ds]), "expected counted or outside", &d);
    assert_one_line_error(&weft(&["run", "--set", "tm.buffer_bytes=9MB", "--out", ds]), "expected a number of bytes", &d);
    assert_one_line_error(&weft(&["run", "--set", "tm.buffer_bytes=100", "--out", ds]), "expected 10000 to 2^40 bytes", &d);
    assert_one_line_error(
        &weft(&["run", "--set", "tm.buffer=ns3", "--set", "tm.held_pfc=counted", "--out", ds]),
        "always keep held packets outside",
        &d,
    );
    assert_one_line_error(&weft(&["run", "--workload", "nosuch", "--out", ds]), "neither a shipped workload", &d);
    let cdf = std::env::temp_dir().join(format!("weft-bad-{}.cdf", std::process::id()));
    std::fs::write(&cdf, "0 0\n1000 40\n2000 80\n").unwrap();
    assert_one_line_error(&weft(&["run", "--workload", cdf.to_str().unwrap(), "--out", ds]), "the CDF ends at 80%, not 100%", &d);
    let _ = std::fs::remove_file(cdf);
    let bad = std::env::temp_dir().join(format!("weft-bad-{}.toml", std::process::id()));
    std::fs::write(
        &bad,
        "[generator]\nkind = \"leaf-spine\"\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\nhost_link = { rate = \"10G\" }\n",
    )
    .unwrap();
    let o = weft(&["validate", bad.to_str().unwrap()]);
    assert_one_line_error(&o, ":6: rate `10G`: unknown unit", &d);
    let _ = std::fs::remove_file(bad);
    // `weft up --workload`: refused before anything starts (no state
    // directory is created).
    assert_one_line_error(&up(&["leaf-spine-2x4-rt", "--workload", "alistorage"]), "--workload drives synthetic hosts", &st);
    assert_one_line_error(
        &up(&["leaf-spine-2x4-rt-synthetic", "--workload", "alistorage", "--transport", "roce"]),
        "unknown transport `roce`",
        &st,
    );
    assert_one_line_error(&up(&["leaf-spine-2x4-rt-synthetic", "--set", "tcp.cc=dctcp"]), "transport parameters are for --workload", &st);
    assert_one_line_error(
        &up(&["leaf-spine-2x4-rt-synthetic", "--workload", "alistorage", "--transport", "udp", "--set", "dcqcn.g=0.1"]),
        "need --transport roce-lossless or roce-irn",
        &st,
    );
    assert_one_line_error(
        &up(&["leaf-spine-2x4-rt-synthetic", "--workload", "alistorage", "--load", "2"]),
        "--load 2 must be in (0, 1]",
        &st,
    );
    assert_one_line_error(&up(&["leaf-spine-2x4-rt-synthetic", "--max-lag", "5"]), "--max-lag 5", &st);
    assert_one_line_error(&weft(&["run", "--max-lag", "5ms", "--out", ds]), "virtual time is never late", &d);
    assert_one_line_error(&weft(&["run", "--stall-timeout", "0ms", "--out", ds]), "a stall timeout of 0 would stop every run", &d);
    assert_one_line_error(&weft(&["run", "--set", "tm.pfc_watchdog=0ms", "--out", ds]), "a detection time of 0", &d);
    assert_one_line_error(&weft(&["run", "--set", "tm.pfc_pause=1ms", "--out", ds]), "expected a pause from 1ns to 80us", &d);
    assert_one_line_error(&weft(&["run", "--set", "tm.pfc_pause=long", "--out", ds]), "tm.pfc_pause=long", &d);
    assert_one_line_error(&weft(&["run", "--frame-bytes", "syn=3", "--out", ds]), "unknown frame kind `syn` (ack, cnp, pfc)", &d);
    assert_one_line_error(&weft(&["run", "--set", "tm.pfc_watchdog=soon", "--out", ds]), "tm.pfc_watchdog=soon", &d);
    assert_one_line_error(&weft(&["run", "--set", "tm.pfc_watchdog_action=drop", "--out", ds]), "needs --set tm.pfc_watchdog=DURATION", &d);
    assert_one_line_error(
        &weft(&["run", "--set", "tm.pfc_watchdog=1ms", "--set", "tm.pfc_watchdog_action=pray", "--out", ds]),
        "unknown PFC watchdog action `pray` (drop, forward)",
        &d,
    );
    assert_one_line_error(&weft(&["run", "--stall-timeout", "soon", "--out", ds]), "--stall-timeout", &d);
}

/// A comparison whose fabric stops moving writes every result, prints what
/// held it and exits with status 3.
#[test]
fn a_comparison_with_a_stalled_cell_writes_its_results_and_exits_3() {
    let d = tmp("compare-stall");
    let topo = std::env::temp_dir().join(format!("weft-stall-{}.toml", std::process::id()));
    std::fs::write(
        &topo,
        "[generator]\nkind = \"leaf-spine\"\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\n\
         host_link = { rate = \"25Gbps\", delay = \"1us\" }\n\
         [[events]]\nat = \"1ns\"\nlink = \"h0-leaf0\"\naction = \"down\"\n",
    )
    .unwrap();
    let o = weft(&[
        "compare",
        topo.to_str().unwrap(),
        "--schemes",
        "ecmp",
        "--loads",
        "0.5",
        "--flows",
        "40",
        "--transport",
        "roce-lossless",
        "--out",
        d.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("ecmp at load 0.5 (roce-lossless) stalled") && e.contains("unfinished flows"), "{e}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("compare.json")).unwrap()).unwrap();
    assert!(v["runs"][0]["incomplete"].as_str().unwrap().starts_with("stalled"), "{}", v["runs"][0]["incomplete"]);
    let _ = std::fs::remove_file(topo);
    let _ = std::fs::remove_dir_all(d);
}

/// A fabric that stops moving (here h3's link fails for good, so its two
/// RoCE flows resend into it forever) ends with a report and status 3
/// instead of running on; the results are written, marked incomplete.
#[test]
fn a_stalled_run_stops_with_a_report_and_status_3() {
    let d = tmp("stall");
    let o = weft(&["run", "leaf-spine-2x4", "--transport", "roce-lossless", "--event", "20us,h3-leaf0,down", "--out", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let e = stderr(&o);
    for needle in ["the fabric stalled", "no progress from 2.000ms to 12.000ms", "unfinished flows: 2", "queue_trace", "queue-depth.svg"] {
        assert!(e.contains(needle), "`{needle}` missing from: {e}");
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap();
    assert!(v["incomplete"].as_str().unwrap().starts_with("stalled"), "{}", v["incomplete"]);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_poisson_workload_runs_and_delivers_every_flow() {
    let d = tmp("workload");
    let o = weft(&["run", "leaf-spine-2x4", "--workload", "solar", "--load", "0.3", "--flows", "300", "--out", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap();
    let flows = v["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 300);
    assert!(flows.iter().all(|f| f["bytes_delivered"] == f["bytes_sent"]));
    assert!(v["traffic"].as_str().unwrap().contains("solar at load 0.3"));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn an_ns3_flow_list_is_replayed_flow_by_flow() {
    let d = tmp("flowlist");
    let list = std::env::temp_dir().join(format!("weft-flows-{}.txt", std::process::id()));
    std::fs::write(&list, "3\n0 15 3 100000 0.000001\n15 0 3 20000 0.00001\n3 9 3 5000 0.0001\n").unwrap();
    let o = weft(&["run", "--flows-file", list.to_str().unwrap(), "--out", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap();
    let f = v["flows"].as_array().unwrap();
    let got: Vec<(String, String, u64)> = f
        .iter()
        .map(|x| (x["src"].as_str().unwrap().to_string(), x["dst"].as_str().unwrap().to_string(), x["bytes_delivered"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, vec![("h0".into(), "h15".into(), 100_000), ("h15".into(), "h0".into(), 20_000), ("h3".into(), "h9".into(), 5_000)]);
    // The first packet of flow 0 cannot arrive before its start (1 us).
    assert!(f[0]["first_arrival"].as_u64().unwrap() > 1_000);
    let bad = tmp("flowlist-bad");
    for (text, error) in [
        ("2\n0 99 3 100 0.1\n1 2 3 100 0.1\n", ":2: host index 99 is out of range"),
        ("2\n0 1 3 -100 0.1\n1 2 3 100 0.1\n", ":2: size `-100` is not a whole number"),
        ("2\n0 1 3 100 0.1\n1 2 three 100 0.1\n", ":3: priority `three` is not a whole number"),
        ("2\n0 1 3 100 0.1\n1 2 3\n", ":3: expected `src dst priority size start_seconds"),
    ] {
        std::fs::write(&list, text).unwrap();
        assert_one_line_error(&weft(&["run", "--flows-file", list.to_str().unwrap(), "--out", bad.to_str().unwrap()]), error, &bad);
    }
    let _ = std::fs::remove_file(list);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_flow_file_of_the_conweave_generator_starting_at_2s_runs_to_completion_with_default_flags() {
    // The authors' traffic_gen.py starts arrivals at its base time of 2 s.
    let d = tmp("flowlist-2s");
    let list = std::env::temp_dir().join(format!("weft-flows-2s-{}.txt", std::process::id()));
    std::fs::write(&list, "3\n0 15 3 100000 2.000000100\n15 0 3 20000 2.000010000\n3 9 3 5000 2.000100000\n").unwrap();
    let o = weft(&["run", "--flows-file", list.to_str().unwrap(), "--transport", "roce-lossless", "--out", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("times from 2.000s"), "{out}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap();
    assert_eq!(v["time_origin_ns"], 2_000_000_000u64);
    let f = v["flows"].as_array().unwrap();
    assert!(f.iter().all(|x| x["bytes_delivered"] == x["bytes_sent"] && x["sender_fct"].as_u64().is_some()), "every flow completes");
    assert_eq!(f[0]["start"], 100, "starts count from the trace origin");
    assert_eq!(v["slowdown"]["definition"], "ns3");
    assert_eq!(v["slowdown"]["overall"]["flows"], 3);
    let _ = std::fs::remove_file(list);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn compare_runs_the_matrix_deterministically_whatever_the_parallelism() {
    let (a, b) = (tmp("cmp-a"), tmp("cmp-b"));
    for (d, jobs) in [(&a, "1"), (&b, "2")] {
        let o = weft(&[
            "compare",
            "leaf-spine-2x4",
            "--schemes",
            "ecmp,conweave",
            "--loads",
            "0.3,0.6",
            "--workload",
            "solar",
            "--flows",
            "400",
            "--set",
            "conweave.theta_reply_us=12",
            "--jobs",
            jobs,
            "--out",
            d.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let table = String::from_utf8_lossy(&o.stdout);
        assert!(table.contains("ecmp") && table.contains("0.3") && table.contains("0.6") && table.contains("<1 BDP"), "{table}");
    }
    for cell in ["ecmp-load0.3", "ecmp-load0.6", "conweave-load0.3", "conweave-load0.6"] {
        let (x, y) = (a.join("roce-irn").join(cell).join("summary.json"), b.join("roce-irn").join(cell).join("summary.json"));
        assert_eq!(std::fs::read(x).unwrap(), std::fs::read(y).unwrap(), "{cell}");
    }
    // One machine-readable report with every run (a scheme's --set applies
    // to that scheme only: ECMP ran with the ConWeave parameter given).
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(a.join("compare.json")).unwrap()).unwrap();
    assert_eq!(report["runs"].as_array().unwrap().len(), 4);
    let o = weft(&["compare", "leaf-spine-2x4", "--schemes", "ecmp", "--loads", "1.5"]);
    assert!(!o.status.success() && stderr(&o).contains("1.5 is not in (0, 1]"));
    for d in [a, b] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn validate_resources_and_schemes() {
    let o = weft(&["validate", "leaf-spine-8x8"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("128 hosts"));
    let o = weft(&["resources", "--scheme", "ecmp", "--target", "tofino1"]);
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("target `tofino1`") && s.contains("stateful ALUs") && s.contains("fits: yes"), "{s}");
    let o = weft(&["resources", "--scheme", "ecmp", "--target", "tofino9"]);
    assert!(!o.status.success() && stderr(&o).contains("unknown target `tofino9`"));
    let o = weft(&["schemes"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("ecmp.use_ports"));
}

#[test]
fn ctrl_c_stops_a_run_on_two_threads_and_writes_partial_results_marked_incomplete() {
    let out = tmp("ctrl-c");
    // Long enough to be running when the signal comes (tens of seconds).
    let child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["run", "leaf-spine-8x8", "--transport", "roce-lossless", "--workload", "alistorage", "--flows", "200000", "--threads", "2"])
        .args(["--out", out.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start weft");
    // Flow generation and set-up take about a second; then it runs for a minute.
    std::thread::sleep(std::time::Duration::from_secs(4));
    // SAFETY: a signal to our own child process.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT)
    };
    let o = child.wait_with_output().expect("wait for weft");
    assert_eq!(o.status.code(), Some(130), "exit status 130 after Ctrl-C; stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("interrupted (Ctrl-C)"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).expect("summary.json")).unwrap();
    let why = v["incomplete"].as_str().expect("summary.json says it is incomplete");
    assert!(why.contains("interrupted"), "{why}");
    let flows = v["flows"].as_array().unwrap();
    let not_started = v["flows_not_started"].as_u64().expect("flows it never reached are counted");
    assert_eq!(flows.len() as u64 + not_started, 200_000, "every flow is listed or counted as not started");
    assert!(not_started > 0, "stopped seconds into a minute-long run");
    let end = v["simulated_ns"].as_u64().unwrap();
    assert!(flows.iter().all(|f| f["start"].as_u64().is_some_and(|s| s <= end)), "only flows that had started");
    let running = flows.iter().filter(|f| f["fct"].is_null()).count() as u64;
    assert!(running > 0, "some flows were still running");
    assert!(flows.iter().any(|f| !f["fct"].is_null()), "some had finished");
    assert!(v["slowdown"]["incomplete"].as_u64().is_some_and(|n| n <= running), "incomplete counts running flows only");
    assert!(std::fs::metadata(out.join("flows.csv")).is_ok());
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn scale_params_scales_every_time_parameter_of_the_scheme_to_the_fabric_rate_and_says_so() {
    // leaf-spine-2x4 has 25 Gbit/s links: LetFlow's 100 Gbit/s defaults x4,
    // a value given with --set alike.
    let o = weft(&[
        "run",
        "leaf-spine-2x4",
        "--scheme",
        "letflow",
        "--scale-params",
        "--set",
        "letflow.flowlet_gap_us=50",
        "--flow-size",
        "10KB",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("letflow time parameters scaled x4 (100Gbps reference / 25Gbps fabric links"), "{err}");
    assert!(err.contains("flowlet_gap_us 50 → 200"), "{err}");
    // What the switches get.
    use emu_orchestrator::experiment::{configured_fabric, fabric_rate, RunOptions};
    let topo = emu_orchestrator::config::topology::Topology::load("leaf-spine-int").expect("shipped");
    assert_eq!(fabric_rate(&topo.fabric).map(|r| r.bps()), Some(8_000_000), "the uplinks, not the 25 Mbit/s host links");
    let opts = |scale| RunOptions { scheme: Some("conweave".into()), scale_time_params: scale, ..RunOptions::default() };
    let scales = |scale| -> Vec<f64> {
        configured_fabric(&topo, &opts(scale)).nodes.iter().filter_map(|n| n.as_switch()).map(|s| s.time_scale.factor()).collect()
    };
    assert!(scales(true).iter().all(|&x| x == 12_500.0), "100 Gbit/s / 8 Mbit/s: {:?}", scales(true));
    assert!(scales(false).iter().all(|&x| x == 1.0));
    // No time parameters, no scale.
    let ecmp = RunOptions { scheme: Some("ecmp".into()), scale_time_params: true, ..RunOptions::default() };
    assert!(configured_fabric(&topo, &ecmp).nodes.iter().filter_map(|n| n.as_switch()).all(|s| s.time_scale.factor() == 1.0));
    let both = weft(&["run", "--scale-params", "--no-scale-params"]);
    assert!(!both.status.success());
}

/// Kills the processes it holds when dropped (also when a test fails).
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Item 5: no cluster is reachable here, so the pods of `weft k8s
/// render` run as processes, with exactly the commands of the manifests but
/// for what a cluster provides (the control Service's name and the pod IP
/// become 127.0.0.1, the mounted ConfigMap and Secret become directories
/// holding their data, the fixed ports become free ones): the orchestrator
/// waits, the three emu-nodes connect with the Secret's token and pin, and
/// the fabric runs on the ConfigMap's placement.
#[test]
fn the_k8s_manifests_bring_a_fabric_up_when_their_commands_run_as_the_pods_would() {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
    let emu = PathBuf::from(env!("CARGO_BIN_EXE_weft")).with_file_name("emu-node");
    if !emu.exists() {
        // It could run once built: fail, never pass unrun.
        panic!("emu-node is not built next to weft: run `cargo build --workspace --bins` with this profile first (scripts/test does)");
    }
    let d = tmp("k8s");
    let (m, plan, fabric, state) = (d.join("manifests"), d.join("plan"), d.join("fabric"), d.join("state"));
    let o = weft(&["k8s", "render", "leaf-spine-2x4-rt-synthetic", "--nodes", "3", "--out", m.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let read = |f: &str| std::fs::read_to_string(m.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let secret: Secret = serde_json::from_str(&read("01-secret.json")).expect("a Secret");
    let config: ConfigMap = serde_json::from_str(&read("02-plan.json")).expect("a ConfigMap");
    std::fs::create_dir_all(&fabric).unwrap();
    std::fs::create_dir_all(&plan).unwrap();
    for (k, v) in secret.data.unwrap_or_default() {
        std::fs::write(fabric.join(k), v.0).unwrap();
    }
    for (k, v) in config.data.unwrap_or_default() {
        std::fs::write(plan.join(k), v).unwrap();
    }
    // An independent check of every object against the current Kubernetes
    // API (PyPI's kubernetes-validate; scripts/test installs it).
    match Command::new("kubernetes-validate").arg("--strict").args(std::fs::read_dir(&m).unwrap().flatten().map(|e| e.path())).output() {
        Ok(v) => {
            let out = format!("{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
            assert!(v.status.success() && out.matches(" passed for resource ").count() == 13, "kubernetes-validate --strict: {out}");
        }
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("kubernetes-validate is missing in CI (scripts/test installs it)")
        }
        Err(_) => eprintln!("skipped: kubernetes-validate (pip install kubernetes-validate) is not on PATH"),
    }
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // Three consecutive free TCP ports for the emu-nodes' /metrics.
    let metrics_base = (20_000..60_000u16)
        .step_by(7)
        .find(|&b| (0..3).all(|i| std::net::TcpListener::bind(("127.0.0.1", b + i)).is_ok()))
        .expect("free ports");
    let prometheus_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (scrape, prom_dir) = (d.join("scrape"), d.join("prometheus"));
    let remap = |s: &String| {
        let mut s = s
            .replace("/weft/plan", plan.to_str().unwrap())
            .replace("/weft/fabric", fabric.to_str().unwrap())
            .replace("/weft/scrape", scrape.to_str().unwrap())
            .replace("/weft/prometheus", prom_dir.to_str().unwrap())
            .replace("--storage.tsdb.path=/prometheus", &format!("--storage.tsdb.path={}", prom_dir.join("data").display()))
            .replace("0.0.0.0:9090", &format!("127.0.0.1:{prometheus_port}"))
            .replace("weft-control.weft-leaf-spine-2x4-rt-synthetic.svc.cluster.local", "127.0.0.1")
            .replace("$(POD_IP)", "127.0.0.1")
            .replace("0.0.0.0:9100", &format!("127.0.0.1:{metrics_base}"))
            .replace("0.0.0.0:7400", &format!("127.0.0.1:{port}"))
            .replace(":7400", &format!(":{port}"));
        for p in 0..3u16 {
            s = s.replace(
                &format!("weft-emu-node-{p}.weft-metrics.weft-leaf-spine-2x4-rt-synthetic.svc.cluster.local:{}", 9100 + p),
                &format!("127.0.0.1:{}", metrics_base + p),
            );
        }
        s
    };
    let command = |file: &str| -> Vec<String> {
        let pod: Pod = serde_json::from_str(&read(file)).expect("a Pod");
        pod.spec.unwrap().containers[0].command.clone().unwrap().iter().map(remap).collect()
    };
    let mut kids = Children(Vec::new());
    let orch = command("10-orchestrator.json");
    assert_eq!(orch[0], "weft");
    kids.0.push(
        Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(&orch[1..])
            .env("WEFT_STATE_DIR", &state)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(d.join("orchestrator.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    for p in 0..3 {
        let cmd = command(&format!("20-emu-node-{p:04}.json"));
        assert_eq!(cmd[0], "emu-node");
        kids.0.push(
            Command::new(&emu).args(&cmd[1..]).stderr(std::fs::File::create(d.join(format!("emu-{p}.log"))).unwrap()).spawn().unwrap(),
        );
    }
    let status = || Command::new(env!("CARGO_BIN_EXE_weft")).args(["status", "--json"]).env("WEFT_STATE_DIR", &state).output().unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut running = 0;
    while std::time::Instant::now() < until && running < 3 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let s: serde_json::Value = serde_json::from_slice(&status().stdout).unwrap_or_default();
        running = s["processes"].as_array().map_or(0, |p| p.iter().filter(|p| p["state"] == "running").count());
    }
    let log = std::fs::read_to_string(d.join("orchestrator.log")).unwrap_or_default();
    assert_eq!(running, 3, "the three emu-node 'pods' run; orchestrator said: {log}");
    // Pods may sit on nodes with other clocks: each one's offset was
    // estimated (here they share one clock: about 0).
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(state.join("fabric.json")).unwrap()).unwrap();
    let offsets: Vec<i64> = (0..3).filter_map(|p| st["clocks"][p.to_string()]["offset_ns"].as_i64()).collect();
    assert!(offsets.len() == 3 && offsets.iter().all(|o| o.abs() < 1_000_000), "clock offsets {offsets:?}");
    // The pods' /metrics: HTTPS with the token only; plain HTTP gets none.
    let plain = ureq::get(&format!("http://127.0.0.1:{metrics_base}/metrics")).call();
    assert!(plain.is_err(), "no metrics over plain HTTP from an emu-node pod");
    // The Prometheus pod, run as the pod would, scrapes all three.
    if Command::new("prometheus").arg("--version").output().is_ok() {
        let scrape_secret: Secret = serde_json::from_str(&read("40-prometheus-scrape-secret.json")).expect("a Secret");
        std::fs::create_dir_all(&scrape).unwrap();
        for (k, v) in scrape_secret.data.unwrap_or_default() {
            std::fs::write(scrape.join(k), v.0).unwrap();
        }
        let prom_config: ConfigMap = serde_json::from_str(&read("41-prometheus-config.json")).expect("a ConfigMap");
        std::fs::create_dir_all(prom_dir.join("data")).unwrap();
        for (k, v) in prom_config.data.unwrap_or_default() {
            std::fs::write(prom_dir.join(k), remap(&v)).unwrap();
        }
        let cmd = command("42-prometheus.json");
        assert_eq!(cmd[0], "prometheus");
        kids.0.push(
            Command::new("prometheus")
                .args(&cmd[1..])
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(d.join("prometheus.log")).unwrap())
                .spawn()
                .unwrap(),
        );
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut up = 0;
        let mut last = String::new();
        while std::time::Instant::now() < until && up < 3 {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let url = format!("http://127.0.0.1:{prometheus_port}/api/v1/targets");
            last = ureq::get(&url).call().ok().and_then(|mut r| r.body_mut().read_to_string().ok()).unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&last).unwrap_or_default();
            up = v["data"]["activeTargets"].as_array().map_or(0, |t| t.iter().filter(|t| t["health"] == "up").count());
        }
        assert_eq!(up, 3, "the Prometheus pod scrapes the three emu-node pods over TLS with the token: {last}");
    } else if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("prometheus is missing in CI (scripts/test installs it)");
    } else {
        eprintln!("skipped: the Prometheus pod's scrape (no prometheus binary; apt install prometheus)");
    }
    let down = Command::new(env!("CARGO_BIN_EXE_weft")).arg("down").env("WEFT_STATE_DIR", &state).output().unwrap();
    assert!(down.status.success(), "{}", stderr(&down));
    let _ = std::fs::remove_dir_all(&d);
}

/// `weft down` after a killed orchestrator: when a leftover cannot be
/// removed (here: the machine of a remote emu-node does not answer ssh),
/// it exits non-zero naming it and keeps the state file; a later `weft
/// down` retries and, once the machine answers, removes the state file.
#[test]
fn down_keeps_the_state_file_while_a_leftover_remains_and_a_later_down_retries() {
    use std::os::unix::fs::PermissionsExt;
    let st = tmp("down-leftover");
    std::fs::create_dir_all(&st).unwrap();
    // A dead orchestrator: a process that has exited.
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let state = serde_json::json!({
        "topology": "leaf-spine-2x4-rt",
        "orchestrator": dead_pid,
        "processes": {},
        "netns": [],
        "phase": "running",
        "hosts": [],
        "machines": { "1": { "machine": { "name": "m1", "ssh": "m1.invalid", "bind": "127.0.0.2" }, "pid": 4242, "netns": [] } },
    });
    std::fs::write(st.join("fabric.json"), state.to_string()).unwrap();
    // The `ssh` weft runs: a stand-in that fails as an unreachable machine
    // does, then (after `reachable` appears) succeeds. No network traffic.
    let bin = st.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let ssh = bin.join("ssh");
    std::fs::write(
        &ssh,
        format!(
            "#!/bin/sh\necho \"$@\" >> {calls}\n[ -e {ok} ] && exit 0\necho 'ssh: connect to host m1.invalid port 22: Connection refused' >&2\nexit 255\n",
            calls = st.join("calls").display(),
            ok = st.join("reachable").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let down = || Command::new(env!("CARGO_BIN_EXE_weft")).arg("down").env("WEFT_STATE_DIR", &st).env("PATH", &path).output().unwrap();
    for attempt in 1..=2 {
        let o = down();
        let e = stderr(&o);
        assert!(!o.status.success(), "attempt {attempt}: {e}");
        assert!(e.contains("teardown incomplete") && e.contains("machine m1") && e.contains("Connection refused"), "{e}");
        assert!(st.join("fabric.json").exists(), "attempt {attempt}: the state file is kept");
    }
    let calls = std::fs::read_to_string(st.join("calls")).unwrap();
    assert_eq!(calls.lines().count(), 2, "each down retried the machine's clean-up: {calls}");
    assert!(calls.contains("kill -9 4242"), "{calls}");
    std::fs::write(st.join("reachable"), "").unwrap();
    let o = down();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("machine m1"), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(!st.join("fabric.json").exists(), "nothing left: the state file is gone");
    let _ = std::fs::remove_dir_all(&st);
}

/// `--threads` defaults to `auto`: one thread per leaf with hosts (8 on
/// leaf-spine-8x8), at most the cores; the results are the bytes of one
/// thread.
#[test]
fn threads_auto_is_the_default_and_gives_the_bytes_of_one_thread() {
    let d = tmp("threads-auto");
    let run = |extra: &[&str], out: &str| -> String {
        let out = d.join(out);
        let mut args = vec!["run", "leaf-spine-8x8", "--traffic", "permutation", "--rate", "10Gbps", "--duration", "200us"];
        args.extend_from_slice(&["--out", out.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let o = weft(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o)
    };
    let auto = run(&[], "auto");
    let one = run(&["--threads", "1"], "one");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let expected = cores.min(8);
    if expected > 1 {
        assert!(auto.contains(&format!("on {expected} threads")), "auto: {expected} threads on {cores} cores\n{auto}");
    }
    assert!(!one.contains(" threads:"), "{one}");
    for f in ["summary.json", "flows.csv"] {
        let (a, b) = (std::fs::read(d.join("auto").join(f)).unwrap(), std::fs::read(d.join("one").join(f)).unwrap());
        assert!(a == b, "{f}: the same bytes with auto and one thread");
    }
    let o = weft(&["run", "--threads", "0", "--out", d.join("zero").to_str().unwrap()]);
    assert!(!o.status.success() && stderr(&o).contains("give a number of at least 1, or `auto`"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// `--routing-update`: a link failure far from the senders (an edge's
/// uplink in the destination pod) black-holes the ECMP flows that hash onto
/// it, for good (TCP retransmits on the same 5-tuple); with routing updates
/// every switch whose routes change installs new ones after the per-hop
/// delay and every flow completes. The same bytes on one and two threads;
/// a scheme with its own view of the paths is refused.
#[test]
fn routing_updates_let_ecmp_route_around_a_remote_failure() {
    let d = tmp("routing-update");
    let run = |extra: &[&str], out: &str| -> serde_json::Value {
        let out = d.join(out);
        let mut args = vec!["run", "fat-tree-k4", "--transport", "tcp", "--traffic", "all-to-all", "--flow-size", "200KB"];
        args.extend_from_slice(&["--event", "0ns,edge3_1-agg3_1,down", "--until", "2s", "--stall-timeout", "off", "--quiet"]);
        args.extend_from_slice(&["--out", out.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let o = weft(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
    };
    let done = |s: &serde_json::Value| s["flows"].as_array().unwrap().iter().filter(|f| f["fct"].is_u64()).count();
    let updates = |s: &serde_json::Value| -> u64 {
        s["switches"].as_array().unwrap().iter().map(|sw| sw["counters"]["route_updates"].as_u64().unwrap_or(0)).sum()
    };
    let without = run(&[], "without");
    let with = run(&["--routing-update", "100us", "--threads", "1"], "with");
    let flows = with["flows"].as_array().unwrap().len();
    assert!(done(&without) < flows, "the failure black-holes some ECMP flows: {} of {flows} done", done(&without));
    assert_eq!(updates(&without), 0);
    assert_eq!(done(&with), flows, "with routing updates every flow completes");
    assert!(updates(&with) > 0, "switches installed routing updates");
    let two = run(&["--routing-update", "100us", "--threads", "2"], "two-threads");
    assert_eq!(updates(&two), updates(&with));
    let (a, b) = (std::fs::read(d.join("with/summary.json")).unwrap(), std::fs::read(d.join("two-threads/summary.json")).unwrap());
    assert!(a == b, "the same summary on two threads");
    let o = weft(&["run", "fat-tree-k4", "--scheme", "conga", "--routing-update", "1ms", "--out", d.join("x").to_str().unwrap()]);
    assert!(!o.status.success() && stderr(&o).contains("--routing-update models the routers of ecmp and rps"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_bmv2_target_serves_packets_at_its_per_packet_time() {
    // One 100-byte UDP packet h0 -> h3 crosses leaf0, a spine and leaf1.
    // On tofino2 that takes microseconds; on bmv2 with a fixed 1 ms per
    // packet, at least 3 ms, plus the host's ARP requests (after 0, 100,
    // 300 and 700 µs: the gateway answers only after 1 ms), which its
    // input buffer serves before the data.
    let dir = tmp("bmv2");
    std::fs::create_dir_all(&dir).unwrap();
    let topo = |target: &str, extra: &str| {
        format!(
            "name = \"bmv2-test\"\n[generator]\nkind = \"leaf-spine\"\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\n\
             host_link = {{ rate = \"100Mbps\", delay = \"10us\" }}\nfabric_link = {{ rate = \"100Mbps\", delay = \"10us\" }}\n\
             [switches]\ntarget = \"{target}\"\n{extra}"
        )
    };
    let flows = dir.join("flows.txt");
    std::fs::write(&flows, "1\n0 3 0 100 0\n").unwrap();
    let run = |name: &str, text: String| -> serde_json::Value {
        let t = dir.join(format!("{name}.toml"));
        std::fs::write(&t, text).unwrap();
        let out = dir.join(name);
        let o = weft(&["run", t.to_str().unwrap(), "--flows-file", flows.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
    };
    let asic = run("tofino2", topo("tofino2", ""));
    let soft = run("bmv2", topo("bmv2", "packet_time = \"1ms\"\npacket_jitter = 0\n"));
    let fct = |s: &serde_json::Value| s["flows"][0]["fct"].as_u64().unwrap();
    assert!(fct(&asic) < 100_000, "tofino2 fct {}", fct(&asic));
    // ARP requests 2-4 wait at leaf0 in front of the data: 3 + 3 packet times.
    assert!((6_000_000..6_200_000).contains(&fct(&soft)), "bmv2 fct {}", fct(&soft));
    assert_eq!(soft["hosts"][0]["counters"]["arp_requests"], 4);
    // A per-packet time is for a software target only.
    let t = dir.join("bad.toml");
    std::fs::write(&t, topo("tofino2", "packet_time = \"1ms\"\n")).unwrap();
    let o = weft(&["validate", t.to_str().unwrap()]);
    assert!(!o.status.success() && stderr(&o).contains("packet_time and packet_jitter are for a software target"), "{}", stderr(&o));
    // A `[[switch]]` entry takes the same keys for itself (a fabric of
    // software switches around an ASIC, as the INT paper's fat-tree).
    let t = dir.join("explicit.toml");
    std::fs::write(
        &t,
        "name = \"mixed\"\n[[switch]]\nname = \"s1\"\ntarget = \"bmv2\"\npacket_time = \"50us\"\nscheme = \"ecmp\"\n\
         [[switch]]\nname = \"s2\"\ntarget = \"tofino2\"\n[[host]]\nname = \"h1\"\n[[host]]\nname = \"h2\"\n\
         [[link]]\na = \"h1\"\nb = \"s1\"\nrate = \"1Gbps\"\n[[link]]\na = \"s1\"\nb = \"s2\"\nrate = \"1Gbps\"\n\
         [[link]]\na = \"h2\"\nb = \"s2\"\nrate = \"1Gbps\"\n",
    )
    .unwrap();
    let o = weft(&["validate", t.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&t, topo("bmv2", "role = \"spine\"\n")).unwrap();
    let o = weft(&["validate", t.to_str().unwrap()]);
    assert!(!o.status.success() && stderr(&o).contains("belong to a [[switch]] entry"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pfc_trace_lists_every_pause_received_and_changes_no_result() {
    // The calibration incast of docs/CALIBRATION.md (3c): two 1 MB flows
    // from each of leaves 1-8 to h0 over the one spine, lossless. The
    // spine pauses every sending leaf; the trace names them.
    let dir = tmp("pfc-trace");
    std::fs::create_dir_all(&dir).unwrap();
    let flows = dir.join("flows.txt");
    let mut text = String::from("16\n");
    for l in 1..=8 {
        for s in 0..2 {
            text += &format!("{} 0 3 1000000 2.0\n", 4 * l + s);
        }
    }
    std::fs::write(&flows, text).unwrap();
    let topo = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/calibration/leaf-spine-9x1.toml");
    let run = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        let mut args = vec!["run", topo, "--flows-file", flows.to_str().unwrap(), "--transport", "roce-lossless", "--set", "tm.buffer=ns3"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--out", out.to_str().unwrap()]);
        let o = weft(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        out
    };
    let plain = run("plain", &[]);
    let traced = run("traced", &["--pfc-trace"]);
    assert!(!plain.join("pfc.csv").exists());
    assert_eq!(std::fs::read(plain.join("summary.json")).unwrap(), std::fs::read(traced.join("summary.json")).unwrap());
    let csv = std::fs::read_to_string(traced.join("pfc.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("time_ns,node,port,peer,priority,event"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() > 100, "{} PFC frames", rows.len());
    let times: Vec<u64> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in time order");
    let paused: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[1]).collect();
    assert_eq!(paused, (1..=8).map(|l| format!("leaf{l}")).collect::<Vec<_>>().iter().map(String::as_str).collect());
    assert!(rows.iter().all(|r| r[3] == "spine0" && r[4] == "3" && (r[5] == "pause" || r[5] == "resume")));
    let o = weft(&["run", topo, "--clock", "real", "--pfc-trace"]);
    assert!(!o.status.success() && stderr(&o).contains("--pfc-trace records a virtual-time run"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The switch counters that a late fabric must not change: drops of every
/// cause and ECN marks, summed over the switches of a run's summary.
fn switch_drops_and_marks(dir: &Path) -> (u64, u64) {
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let (mut drops, mut marks) = (0, 0);
    for sw in s["switches"].as_array().unwrap() {
        for (k, v) in sw["counters"].as_object().unwrap() {
            let v = v.as_u64().unwrap_or(0);
            if k.starts_with("drop") {
                drops += v;
            } else if k == "ecn_marks" {
                marks += v;
            }
        }
    }
    (drops, marks)
}

/// The emu-node processes `weft run --nodes` started (children of `pid`)
/// whose command line names `--process <p>`.
fn emu_node_child(pid: u32, p: u32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let child: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let named = args.windows(2).any(|w| w[0] == b"--process" && w[1] == p.to_string().as_bytes());
        (ppid == pid && named).then_some(child)
    })
}

/// A switch process held back (SIGSTOP for 20 ms, again and again, as a
/// busy machine does to it) hands its frames on late and in a burst; the
/// next switch handles each at its own due time, so the flow through it
/// keeps its spacing: no drop and no ECN mark beyond the run nobody paused.
/// Before per-port time a single 20 ms stop made leaf1 mark ~2 000 packets
/// and drop 238 (the late frames landed at the instant of a frame that had
/// come in on time from a host in leaf1's own rack).
#[test]
fn a_paused_emu_node_makes_no_drop_or_mark_that_the_unpaused_run_does_not() {
    let d = tmp("sigstop");
    std::fs::create_dir_all(&d).unwrap();
    // h0 -> h9 crosses leaf0, a spine and leaf1 at 200 Mbit/s; h10 -> h11
    // keeps leaf1 busy on time (50 Mbit/s inside its rack). Both paced.
    let flows = d.join("flows.txt");
    std::fs::write(&flows, "2\n0 9 0 25000000 0 0.00006\n10 11 0 6250000 0 0.00024\n").unwrap();
    let run = |out: &Path| {
        Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["run", "leaf-spine-2x4-rt-synthetic", "--clock", "real", "--nodes", "3", "--until", "1500ms", "--quiet"])
            .arg("--flows-file")
            .arg(&flows)
            .arg("--out")
            .arg(out)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run weft")
    };
    let (calm, held) = (d.join("calm"), d.join("held"));
    let o = run(&calm).wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let mut child = run(&held);
    let mut stops = 0;
    while child.try_wait().unwrap().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(150));
        // Process 1 runs leaf0, the flow's first switch.
        if let Some(p) = emu_node_child(child.id(), 1) {
            // SAFETY: signals to a process this test's child started.
            unsafe { libc::kill(p, libc::SIGSTOP) };
            std::thread::sleep(std::time::Duration::from_millis(20));
            unsafe { libc::kill(p, libc::SIGCONT) };
            stops += 1;
        }
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // The flow lasts about 1 s of a run of 2-4 s: a stop every 170 ms
    // holds leaf0 back several times while it carries the flow.
    assert!(stops >= 8, "leaf0's process was stopped only {stops} times");
    // The faithfulness report covers this process (the hosts) and the
    // three emu-nodes.
    let f: serde_json::Value = serde_json::from_slice(&std::fs::read(held.join("faithfulness.json")).unwrap()).unwrap();
    assert_eq!(f["processes"].as_array().unwrap().len(), 4, "{f}");
    let (a, b) = (switch_drops_and_marks(&calm), switch_drops_and_marks(&held));
    assert!(b.0 <= a.0 && b.1 <= a.1, "paused {stops} times: drops and marks {b:?}, unpaused {a:?}");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn up_refuses_a_node_count_that_is_neither_a_number_nor_auto() {
    let o = weft(&["up", "leaf-spine-2x4-rt-synthetic", "--nodes", "lots"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("expected a number of processes or `auto`, got `lots`"), "{}", stderr(&o));
}

/// `scripts/build-pgo` trains its build on a fixed set of `weft run`s; each
/// of them must keep working as the command line changes (the PGO build
/// itself takes three release builds and is not part of the suite).
#[test]
fn pgo_training_runs_succeed() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-pgo");
    let o = Command::new("bash").arg(&script).args(["--train-with", env!("CARGO_BIN_EXE_weft")]).output().expect("run scripts/build-pgo");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    let runs = out.lines().filter(|l| l.trim_start().starts_with("run ")).count();
    assert!(runs >= 10, "the training set covers the schemes and transports: {runs} runs\n{out}");
    assert!(out.contains("every training run succeeded"), "{out}");
}
