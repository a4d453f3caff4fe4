//! A real Prometheus server for a live fabric (docs/RESULTS.md): the
//! file-service-discovery file listing every live node's `/metrics`
//! endpoint, a ready `prometheus.yml` using it, and starting/stopping the
//! Debian `prometheus` binary with that configuration.
//!
//! Layout under the fabric's state directory: `prometheus/targets.json`
//! (file SD, rewritten when the set of live nodes changes),
//! `prometheus/prometheus.yml`, `prometheus/data/` (the TSDB) and
//! `prometheus/prometheus.log`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Errors of the Prometheus integration.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// The binary is missing.
    #[error("cannot run Prometheus: `{0}` was not found (install the Debian package with `apt-get install prometheus`, or pass --prometheus-bin PATH)")]
    NotInstalled(String),
    /// Its listen address is taken.
    #[error("cannot start Prometheus: {0} is already in use (another Prometheus? the Debian package starts one on :9090); choose another with --prometheus-listen")]
    PortInUse(SocketAddr),
    /// It exited or did not become ready.
    #[error("Prometheus did not become ready on {addr}: {why}; log {log}:\n{tail}")]
    NotReady {
        /// Where it should listen.
        addr: SocketAddr,
        /// What happened.
        why: String,
        /// Log path.
        log: String,
        /// The log's last lines.
        tail: String,
    },
    /// File I/O.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// One scrape target.
#[derive(Debug, Clone)]
pub struct Target {
    /// host:port of a `/metrics` endpoint.
    pub addr: SocketAddr,
    /// emu-node process index.
    pub process: u32,
}

/// The directory of the Prometheus files of a fabric.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("prometheus")
}

/// Writes `targets.json` (file SD) and `prometheus.yml`; returns their paths.
pub fn write_config(
    state_dir: &Path,
    fabric: &str,
    targets: &[Target],
    scrape_interval: Duration,
) -> Result<(PathBuf, PathBuf), PrometheusError> {
    let d = dir(state_dir);
    std::fs::create_dir_all(&d).map_err(|e| PrometheusError::Io(format!("creating {}", d.display()), e))?;
    let sd: Vec<serde_json::Value> = targets
        .iter()
        .map(|t| {
            serde_json::json!({
                "targets": [t.addr.to_string()],
                "labels": { "fabric": fabric, "process": t.process.to_string(), "job": "weft" },
            })
        })
        .collect();
    let sd_path = d.join("targets.json");
    let tmp = d.join("targets.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&sd).unwrap_or_default())
        .map_err(|e| PrometheusError::Io(format!("writing {}", tmp.display()), e))?;
    // Prometheus watches the file: replace it atomically.
    std::fs::rename(&tmp, &sd_path).map_err(|e| PrometheusError::Io(format!("writing {}", sd_path.display()), e))?;
    let secs = scrape_interval.as_secs_f64();
    let yml = format!(
        "# Written by `weft up`: scrapes every emu-node of fabric {fabric}.\n\
         global:\n  scrape_interval: {secs}s\n  evaluation_interval: {secs}s\n\
         scrape_configs:\n  - job_name: weft\n    file_sd_configs:\n      - files: ['{}']\n        refresh_interval: 5s\n",
        sd_path.display()
    );
    let yml_path = d.join("prometheus.yml");
    std::fs::write(&yml_path, yml).map_err(|e| PrometheusError::Io(format!("writing {}", yml_path.display()), e))?;
    Ok((sd_path, yml_path))
}

/// Finds `bin` (a path, or a name looked up in PATH).
pub fn find_binary(bin: &str) -> Result<PathBuf, PrometheusError> {
    let p = Path::new(bin);
    if p.components().count() > 1 {
        return if p.is_file() { Ok(p.to_path_buf()) } else { Err(PrometheusError::NotInstalled(bin.into())) };
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|v| std::env::split_paths(&v).collect::<Vec<_>>())
        .map(|d| d.join(bin))
        .find(|c| c.is_file())
        .ok_or_else(|| PrometheusError::NotInstalled(bin.into()))
}

/// Starts Prometheus with the fabric's `prometheus.yml`, listening on
/// `listen` (port 0: a free port is chosen), and waits until it is ready.
/// Returns the child and the address it listens on.
pub fn start(state_dir: &Path, bin: &str, listen: SocketAddr) -> Result<(std::process::Child, SocketAddr), PrometheusError> {
    let exe = find_binary(bin)?;
    let addr = if listen.port() == 0 {
        let l =
            std::net::TcpListener::bind(listen).map_err(|e| PrometheusError::Io(format!("finding a free port on {}", listen.ip()), e))?;
        l.local_addr().map_err(|e| PrometheusError::Io("finding a free port".into(), e))?
    } else {
        match std::net::TcpListener::bind(listen) {
            Ok(_) => listen,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => return Err(PrometheusError::PortInUse(listen)),
            Err(e) => return Err(PrometheusError::Io(format!("checking {listen}"), e)),
        }
    };
    let d = dir(state_dir);
    let log_path = d.join("prometheus.log");
    let log = std::fs::File::create(&log_path).map_err(|e| PrometheusError::Io(format!("creating {}", log_path.display()), e))?;
    let log2 = log.try_clone().map_err(|e| PrometheusError::Io("log".into(), e))?;
    let mut child = std::process::Command::new(&exe)
        .arg(format!("--config.file={}", d.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", d.join("data").display()))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--storage.tsdb.retention.time=1d")
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|e| PrometheusError::Io(format!("starting {}", exe.display()), e))?;
    let tail = || {
        let t = std::fs::read_to_string(&log_path).unwrap_or_default();
        t.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    };
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(PrometheusError::NotReady {
                addr,
                why: format!("it exited ({status})"),
                log: log_path.display().to_string(),
                tail: tail(),
            });
        }
        if ready(addr) {
            return Ok((child, addr));
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PrometheusError::NotReady {
                addr,
                why: "not ready within 30 s".into(),
                log: log_path.display().to_string(),
                tail: tail(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether Prometheus at `addr` answers `/-/ready`.
pub fn ready(addr: SocketAddr) -> bool {
    let agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(1))).build().new_agent();
    agent.get(&format!("http://{addr}/-/ready")).call().is_ok_and(|r| r.status() == 200)
}
