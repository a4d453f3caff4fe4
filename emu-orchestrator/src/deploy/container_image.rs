//! The container image the Kubernetes manifests name (`weft
//! container-image build`), built without a registry from Debian packages.
//!
//! How: `debootstrap --variant=minbase` of Debian bookworm with the
//! packages the emu-node's TAP hosts and a user's checks need (iproute2,
//! iperf3, iputils-ping), this weft's `weft` and `emu-node` copied into
//! `/usr/local/bin` (debug sections stripped when `strip` is there), apt's
//! caches emptied, and the tree imported as an image with `podman import`.
//! `Containerfile` at the repository's root describes the same image for
//! a registry build (`podman build -f Containerfile .` from
//! `debian:bookworm-slim`).
//!
//! Invariants: nothing but Debian's archive (through debootstrap) and this
//! weft's own binaries goes into the image; the work directory is removed
//! whether the build succeeds or not; the image is tagged only when it is
//! complete.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Debian packages on top of the minimal base.
pub const PACKAGES: &[&str] = &["iproute2", "iperf3", "iputils-ping"];
/// The Debian release.
pub const SUITE: &str = "bookworm";

/// A build failed.
#[derive(Debug, thiserror::Error)]
pub enum ContainerImageError {
    /// A tool is missing.
    #[error("`{tool}` is not installed: apt-get install {package}")]
    Missing {
        /// The program.
        tool: &'static str,
        /// Its Debian package.
        package: &'static str,
    },
    /// debootstrap needs root.
    #[error("building the image needs root (debootstrap creates device nodes and chroots): run it with sudo")]
    NotRoot,
    /// A command failed.
    #[error("`{cmd}` failed: {detail}")]
    Command {
        /// The command.
        cmd: String,
        /// Its last error line.
        detail: String,
    },
    /// I/O.
    #[error("{what}: {source}")]
    Io {
        /// What.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ContainerImageError {
    let what = what.into();
    move |source| ContainerImageError::Io { what, source }
}

fn have(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        || ["/usr/sbin", "/sbin"].iter().any(|d| Path::new(d).join(tool).is_file())
}

fn run(cmd: &mut Command) -> Result<String, ContainerImageError> {
    let shown = format!(
        "{} {}",
        cmd.get_program().to_string_lossy(),
        cmd.get_args().next().map_or(String::new(), |a| a.to_string_lossy().into_owned())
    );
    let out = cmd.output().map_err(|e| ContainerImageError::Command { cmd: shown.clone(), detail: e.to_string() })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(ContainerImageError::Command {
            cmd: shown,
            detail: err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What a build made.
#[derive(Debug, Clone)]
pub struct ContainerImage {
    /// Its tag.
    pub tag: String,
    /// Its size as podman reports it, bytes.
    pub size: u64,
}

/// Builds the image `tag` with `weft` and `emu_node` in it, working in
/// `work` (removed afterwards); `progress` gets one line per step.
pub fn build(
    tag: &str,
    weft: &Path,
    emu_node: &Path,
    work: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<ContainerImage, ContainerImageError> {
    for (tool, package) in [("debootstrap", "debootstrap"), ("podman", "podman"), ("tar", "tar")] {
        if !have(tool) {
            return Err(ContainerImageError::Missing { tool, package });
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(ContainerImageError::NotRoot);
    }
    for b in [weft, emu_node] {
        if !b.is_file() {
            return Err(ContainerImageError::Io {
                what: format!("{}", b.display()),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not built (cargo build --release --workspace --bins)"),
            });
        }
    }
    let _ = std::fs::remove_dir_all(work);
    let result = build_in(tag, weft, emu_node, work, progress);
    let _ = std::fs::remove_dir_all(work);
    result
}

fn build_in(
    tag: &str,
    weft: &Path,
    emu_node: &Path,
    work: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<ContainerImage, ContainerImageError> {
    let root = work.join("root");
    std::fs::create_dir_all(work).map_err(io(format!("creating {}", work.display())))?;
    progress(&format!("debootstrap --variant=minbase {SUITE} with {} (Debian's archive, about 30 s)", PACKAGES.join(", ")));
    run(Command::new("debootstrap").args(["--variant=minbase", &format!("--include={}", PACKAGES.join(",")), SUITE]).arg(&root))?;
    let bin = root.join("usr/local/bin");
    std::fs::create_dir_all(&bin).map_err(io(format!("creating {}", bin.display())))?;
    for b in [weft, emu_node] {
        let name = b.file_name().unwrap_or_default();
        let to = bin.join(name);
        std::fs::copy(b, &to).map_err(io(format!("copying {}", b.display())))?;
        if have("strip") {
            run(Command::new("strip").arg("--strip-debug").arg(&to))?;
        }
    }
    progress("copied weft and emu-node into /usr/local/bin; emptying apt's caches");
    for d in ["var/cache/apt/archives", "var/lib/apt/lists"] {
        for e in std::fs::read_dir(root.join(d)).map_err(io(format!("reading {d}")))?.flatten() {
            if e.path().is_file() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    progress(&format!("podman import as {tag}"));
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .args(["--numeric-owner", "-c", "."])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io("starting tar"))?;
    let tar_out = tar.stdout.take().ok_or_else(|| ContainerImageError::Command { cmd: "tar".into(), detail: "no output".into() })?;
    let import = Command::new("podman")
        .args(["import", "--change", r#"CMD ["weft", "--help"]"#, "-", tag])
        .stdin(tar_out)
        .output()
        .map_err(io("running podman import"))?;
    let tar_status = tar.wait().map_err(io("tar"))?;
    if !tar_status.success() || !import.status.success() {
        let err = String::from_utf8_lossy(&import.stderr);
        return Err(ContainerImageError::Command {
            cmd: "podman import".into(),
            detail: err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("tar failed").to_string(),
        });
    }
    let size = run(Command::new("podman").args(["image", "inspect", "--format", "{{.Size}}", tag]))?.trim().parse().unwrap_or(0);
    Ok(ContainerImage { tag: tag.to_string(), size })
}

/// The `podman run` options a container of the image needs for an
/// emu-node: the host's network (its links and control channel, as a pod's
/// IP would be), privileged (TAP hosts need network namespaces and
/// /dev/net/tun), and resource limits no higher than this process's own
/// (podman's defaults raise them, which a sandboxed host may refuse).
pub fn emu_node_run_options() -> Vec<String> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    let nofile = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur.min(65_536) } else { 1024 };
    ["--network", "host", "--privileged", "--ulimit", &format!("nofile={nofile}:{nofile}"), "--ulimit", "nproc=4096:4096"]
        .map(String::from)
        .to_vec()
}

/// Where the build works unless told: under the system's temporary
/// directory.
pub fn default_work_dir() -> PathBuf {
    std::env::temp_dir().join(format!("weft-container-image-{}", std::process::id()))
}
