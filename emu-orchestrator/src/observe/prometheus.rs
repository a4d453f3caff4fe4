//! A real Prometheus server for a live fabric (docs/RESULTS.md): the
//! file-service-discovery file listing every live node's `/metrics`
//! endpoint, a ready `prometheus.yml` using it, and starting/stopping the
//! Debian `prometheus` binary with that configuration.
//!
//! Layout under the fabric's state directory: `prometheus/targets.json`
//! (file SD of the endpoints on this machine, plain HTTP on loopback) and
//! `prometheus/targets-tls.json` (those on other machines: HTTPS with the
//! fabric's certificate, `prometheus/fabric-ca.pem`, and the fabric token
//! as bearer credential, `prometheus/token`, mode 0600), both rewritten
//! when the set of live nodes changes; `prometheus/prometheus.yml`,
//! `prometheus/data/` (the TSDB) and `prometheus/prometheus.log`.

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
    /// On another machine: HTTPS and the bearer credential.
    pub secure: bool,
}

impl Target {
    /// The endpoint's URL.
    pub fn url(&self) -> String {
        format!("{}://{}/metrics", if self.secure { "https" } else { "http" }, self.addr)
    }
}

/// How Prometheus reaches the endpoints on other machines.
#[derive(Debug, Clone)]
pub struct SecureScrape {
    /// The fabric's certificate, PEM (Prometheus trusts it as CA; its name
    /// is [`emu_node::tls::SERVER_NAME`]).
    pub cert_pem: String,
    /// The fabric token (the bearer credential).
    pub token: String,
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
    secure: Option<&SecureScrape>,
) -> Result<(PathBuf, PathBuf), PrometheusError> {
    let d = dir(state_dir);
    std::fs::create_dir_all(&d).map_err(|e| PrometheusError::Io(format!("creating {}", d.display()), e))?;
    let write = |name: &str, text: &str, mode: u32| -> Result<PathBuf, PrometheusError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = d.join(name);
        let tmp = d.join(format!("{name}.tmp"));
        let err = |e| PrometheusError::Io(format!("writing {}", path.display()), e);
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(err)?;
        std::io::Write::write_all(&mut f, text.as_bytes()).map_err(err)?;
        // Prometheus watches the file: replace it atomically.
        std::fs::rename(&tmp, &path).map_err(err)?;
        Ok(path)
    };
    let sd = |secure: bool| -> String {
        let groups: Vec<serde_json::Value> = targets
            .iter()
            .filter(|t| t.secure == secure)
            .map(|t| {
                serde_json::json!({
                    "targets": [t.addr.to_string()],
                    "labels": { "fabric": fabric, "process": t.process.to_string(), "job": "weft" },
                })
            })
            .collect();
        serde_json::to_string_pretty(&groups).unwrap_or_default()
    };
    let sd_path = write("targets.json", &sd(false), 0o644)?;
    let secs = scrape_interval.as_secs_f64();
    let mut yml = format!(
        "# Written by `weft up`: scrapes every emu-node of fabric {fabric}.\n\
         global:\n  scrape_interval: {secs}s\n  evaluation_interval: {secs}s\n\
         scrape_configs:\n  - job_name: weft\n    file_sd_configs:\n      - files: ['{}']\n        refresh_interval: 5s\n",
        sd_path.display()
    );
    if let Some(sec) = secure {
        let tls_path = write("targets-tls.json", &sd(true), 0o644)?;
        let ca = write("fabric-ca.pem", &sec.cert_pem, 0o644)?;
        let token = write("token", &sec.token, 0o600)?;
        yml += &format!(
            "  # emu-nodes on other machines: HTTPS with the fabric's certificate, the fabric token as bearer.\n\
             \x20 - job_name: weft-machines\n    scheme: https\n\
             \x20   tls_config:\n      ca_file: '{}'\n      server_name: '{}'\n\
             \x20   authorization:\n      type: Bearer\n      credentials_file: '{}'\n\
             \x20   file_sd_configs:\n      - files: ['{}']\n        refresh_interval: 5s\n",
            ca.display(),
            emu_node::tls::SERVER_NAME,
            token.display(),
            tls_path.display()
        );
    }
    let yml_path = write("prometheus.yml", &yml, 0o644)?;
    Ok((sd_path, yml_path))
}

/// A `prometheus.yml` for a Prometheus inside a Kubernetes cluster (the
/// manifests of `weft k8s render`): every emu-node pod by its DNS name and
/// port, over HTTPS with the fabric's certificate (`ca_file`) and the
/// fabric token (`token_file`) as bearer, labelled as `weft up`'s own
/// scrapes are (job `weft`, fabric, process), so the dashboards work alike.
pub fn cluster_config(fabric: &str, targets: &[(String, u32)], ca_file: &str, token_file: &str, scrape_interval: Duration) -> String {
    let secs = scrape_interval.as_secs_f64();
    let mut yml = [
        format!("# Written by `weft k8s render`: scrapes every emu-node pod of fabric {fabric}"),
        "# over HTTPS with the fabric's certificate, the fabric token as bearer.".into(),
        "global:".into(),
        format!("  scrape_interval: {secs}s"),
        format!("  evaluation_interval: {secs}s"),
        "scrape_configs:".into(),
        "  - job_name: weft-pods".into(),
        "    scheme: https".into(),
        "    tls_config:".into(),
        format!("      ca_file: '{ca_file}'"),
        format!("      server_name: '{}'", emu_node::tls::SERVER_NAME),
        "    authorization:".into(),
        "      type: Bearer".into(),
        format!("      credentials_file: '{token_file}'"),
        "    static_configs:".into(),
    ]
    .join("\n");
    yml.push('\n');
    for (target, process) in targets {
        yml += &format!("      - targets: ['{target}']\n        labels: {{ job: 'weft', fabric: '{fabric}', process: '{process}' }}\n");
    }
    yml
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Endpoints on other machines get a job of their own: HTTPS against
    /// the fabric's certificate under its name, the token file private;
    /// `promtool` accepts the configuration where it is installed (always
    /// in CI).
    #[test]
    fn endpoints_on_other_machines_are_scraped_over_tls_with_the_token() {
        let d = std::env::temp_dir().join(format!("weft-prom-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let targets = [
            Target { addr: "127.0.0.1:9100".parse().unwrap(), process: 0, secure: false },
            Target { addr: "10.77.0.2:9101".parse().unwrap(), process: 1, secure: true },
        ];
        let sec = SecureScrape { cert_pem: "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n".into(), token: "t0k3n".into() };
        let (sd, yml) = write_config(&d, "f", &targets, Duration::from_secs(1), Some(&sec)).unwrap();
        let plain = std::fs::read_to_string(&sd).unwrap();
        let tls = std::fs::read_to_string(dir(&d).join("targets-tls.json")).unwrap();
        assert!(plain.contains("127.0.0.1:9100") && !plain.contains("10.77.0.2"), "{plain}");
        assert!(tls.contains("10.77.0.2:9101") && !tls.contains("127.0.0.1"), "{tls}");
        let y = std::fs::read_to_string(&yml).unwrap();
        for needle in
            ["job_name: weft-machines", "scheme: https", "server_name: 'weft-fabric'", "type: Bearer", "credentials_file:", "ca_file:"]
        {
            assert!(y.contains(needle), "{needle}: {y}");
        }
        use std::os::unix::fs::PermissionsExt;
        let token = dir(&d).join("token");
        assert_eq!(std::fs::read_to_string(&token).unwrap(), "t0k3n");
        assert_eq!(std::fs::metadata(&token).unwrap().permissions().mode() & 0o777, 0o600);
        // Without endpoints elsewhere: one plain job, no token on disk.
        let d2 = d.join("local");
        let (_, yml2) = write_config(&d2, "f", &targets[..1], Duration::from_secs(1), None).unwrap();
        assert!(!std::fs::read_to_string(&yml2).unwrap().contains("weft-machines"));
        assert!(!dir(&d2).join("token").exists());
        match find_binary("promtool") {
            Ok(promtool) => {
                // promtool reads the CA file: give it a real certificate.
                let id = emu_node::tls::FabricIdentity::generate().unwrap();
                let sec = SecureScrape { cert_pem: id.cert_pem(), ..sec };
                write_config(&d, "f", &targets, Duration::from_secs(1), Some(&sec)).unwrap();
                let o = std::process::Command::new(promtool).args(["check", "config"]).arg(&yml).output().unwrap();
                assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            }
            Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("promtool missing in CI (apt-get install prometheus)"),
            Err(_) => eprintln!("SKIPPED the promtool check: promtool is not installed (apt-get install prometheus)"),
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
