//! `weft-flowgen` on loopback: a receiver, Poisson-paced UDP flows and TCP
//! flows from a size CDF, and the per-flow JSON both ends write.

use std::process::{Command, Stdio};

fn flowgen() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft-flowgen"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("output file")).expect("JSON")
}

#[test]
fn udp_and_tcp_flows_reach_the_receiver_and_each_end_reports_them() {
    let dir = std::env::temp_dir().join(format!("weft-flowgen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let (recv_out, udp_out, tcp_out) = (dir.join("recv.json"), dir.join("udp.json"), dir.join("tcp.json"));
    let mut recv = flowgen()
        .args(["recv", "--listen", &addr, "--idle", "1s", "--max", "60s", "--out"])
        .arg(&recv_out)
        .stderr(Stdio::null())
        .spawn()
        .expect("start recv");
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Two flows of 150 000 IP bytes = 100 packets of 1500 B, mean gap 200 µs.
    let o = flowgen()
        .args(["udp", &addr, "--bytes", "150KB", "--packet", "1500", "--mean-gap", "200us", "--flows", "2", "--first-id", "7", "--out"])
        .arg(&udp_out)
        .output()
        .expect("udp");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = flowgen()
        .args(["tcp", &addr, "--flows", "20", "--cdf", "int-table1", "--mean-gap", "2ms", "--seed", "3", "--out"])
        .arg(&tcp_out)
        .output()
        .expect("tcp");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let status = recv.wait().expect("recv ends after 1 s idle");
    assert!(status.success());

    let sent = json(&udp_out);
    let sent = sent["flows"].as_array().expect("flows");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["packets"], 100);
    assert_eq!(sent[1]["flow"], 8);
    let got = json(&recv_out);
    let flows = got["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 2, "{got}");
    for f in flows {
        // Loopback loses nothing; every datagram is 1500 IP bytes.
        assert_eq!((f["packets"].as_u64(), f["lost"].as_u64(), f["bytes"].as_u64()), (Some(100), Some(0), Some(150_000)), "{f}");
        let (thr, fct) = (f["throughput_bps"].as_f64().unwrap_or(0.0), f["fct_seconds"].as_f64().unwrap_or(0.0));
        // 99 Poisson gaps of mean 200 µs: ~20 ms (not a timing assertion,
        // a sanity bound that catches a unit error by orders of magnitude).
        assert!(fct > 0.002 && fct < 2.0, "{fct}");
        assert!(thr > 0.0);
    }
    assert_eq!(got["foreign_datagrams"], 0);
    let tcp = json(&tcp_out);
    let tcp = tcp["flows"].as_array().expect("flows");
    assert_eq!(tcp.len(), 20);
    for f in tcp {
        assert!(f.get("error").is_none(), "{f}");
        assert!(f["fct_seconds"].as_f64().is_some_and(|x| x > 0.0), "{f}");
        assert!(f["bytes"].as_u64().is_some_and(|b| b >= 1), "{f}");
    }
    // Sizes come from Table I: not all equal.
    let sizes: std::collections::BTreeSet<u64> = tcp.iter().filter_map(|f| f["bytes"].as_u64()).collect();
    assert!(sizes.len() > 5, "{sizes:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_get_one_clear_error() {
    for (args, needle) in [
        (&["udp", "127.0.0.1", "--bytes", "1KB"][..], "give --mean-gap or --rate"),
        (&["udp", "127.0.0.1", "--bytes", "1KB", "--rate", "1Mbps", "--packet", "20"][..], "--packet must be"),
        (&["tcp", "127.0.0.1", "--flows", "3", "--size", "1KB"][..], "give --mean-gap, or --load with --rate"),
        (&["tcp", "127.0.0.1", "--flows", "3", "--cdf", "/nonexistent", "--mean-gap", "1ms"][..], "neither a shipped workload"),
    ] {
        let o = flowgen().args(args).output().expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn a_receiver_stopped_by_sigterm_writes_what_it_measured() {
    let out = std::env::temp_dir().join(format!("weft-flowgen-term-{}.json", std::process::id()));
    let port = free_port();
    let mut recv = flowgen()
        .args(["recv", "--listen", &format!("127.0.0.1:{port}"), "--out"])
        .arg(&out)
        .stderr(Stdio::null())
        .spawn()
        .expect("start recv");
    // Ready once its UDP socket is bound (its signal handlers come first):
    // a fixed wait lost the race on a loaded CI machine. Read from the
    // kernel's socket table, so that the check never holds the port itself.
    let bound = || {
        let local = format!("0100007F:{port:04X}");
        std::fs::read_to_string("/proc/net/udp").unwrap_or_default().lines().any(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
    };
    let t0 = std::time::Instant::now();
    while !bound() {
        assert!(t0.elapsed() < std::time::Duration::from_secs(20), "recv never bound 127.0.0.1:{port}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let st = Command::new("kill").args(["-TERM", &recv.id().to_string()]).status().expect("kill");
    assert!(st.success());
    assert!(recv.wait().expect("recv ends").success());
    assert_eq!(json(&out)["flows"].as_array().map(Vec::len), Some(0));
    let _ = std::fs::remove_file(&out);
}
