//! Soft-RoCE hosts as micro-VMs (docs/HOSTS.md): a `kind = "rxe"`
//! host is a qemu virtual machine that boots Debian's kernel (whose
//! package ships `rdma_rxe`) with weft's initramfs (`weft vm-image
//! build`); its one NIC is a port of the fabric.
//!
//! The NIC is qemu's `dgram` netdev on one end of a Unix datagram socket
//! pair this process creates and hands to qemu as a file descriptor
//! (`local.type=fd`): each datagram is one Ethernet frame, nothing to
//! configure in the kernel, nothing shared between the two processes but
//! the socket (a TAP could not be: the emu-node and qemu would both read
//! it). The choice is measured in BENCHMARKS.md ("Soft-RoCE VM hosts").
//! Frames the guest sends go through the same NIC model as a TAP host's
//! ([`crate::tap::TapNic`]: the access link's rate, delay and bounded queue); frames
//! toward the guest wait in a ring of [`RX_RING`] frames (a NIC's receive
//! ring) and leave as the socket takes them; a full ring drops and counts.
//! The ring is needed because a Unix datagram socket queues only
//! `net.unix.max_dgram_qlen` datagrams (10 by default) for its reader.
//!
//! The guest: the kernel command line carries the host's name, address,
//! gateway and MTU from the addressing plan (`weft.name=`, `weft.ip=`,
//! `weft.gw=`, `weft.mtu=`), the MAC is the virtio NIC's; its /init loads
//! the virtio and rxe modules, configures `eth0`, adds `rxe0` and prints
//! [`READY`] on the serial console (a file in the VM's directory).
//! Commands run in the guest over virtio-serial ports, [`EXEC_PORTS`] of
//! them, each a Unix socket in the VM's directory ([`exec`] has the
//! protocol, [`GUEST_EXEC_AGENT`] the guest's half).
//!
//! Accelerator: KVM when it boots the guest, otherwise TCG (software
//! emulation). Decided once per machine by booting the image under KVM
//! until its first line ([`INIT`]), at most [`KVM_PROBE`]; the verdict is
//! kept next to the image, keyed by qemu's version and the host kernel,
//! and reported by `weft status`.
//!
//! Invariants: qemu is killed when its [`VmHost`] is dropped and when the
//! emu-node dies (`PR_SET_PDEATHSIG`; the VM is started from the thread
//! that runs the process's runtime, which lives as long as the process);
//! the VM's directory is removed with it; the guest never sees a frame
//! that did not cross its access link's model.

use crate::tap::{HostFrameSource, TapCounters};
use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_core::fabric::HostSpec;

/// The qemu binary.
pub const QEMU: &str = "qemu-system-x86_64";
/// The Debian package that has it.
pub const QEMU_PACKAGE: &str = "qemu-system-x86";
/// The kernel in an image directory.
pub const KERNEL_FILE: &str = "vmlinuz";
/// The initramfs in an image directory.
pub const INITRD_FILE: &str = "initrd.cpio";
/// The guest's first line on its console.
pub const INIT: &str = "weft: init";
/// The guest's line once `rxe0` is up and its exec agents listen.
pub const READY: &str = "weft: rxe ready";
/// The guest's line if `rdma link add` failed.
pub const FAILED: &str = "weft: rxe failed";
/// virtio-serial ports for commands (as many commands at once per VM).
pub const EXEC_PORTS: usize = 4;
/// Frames that wait toward a guest (its NIC's receive ring).
pub const RX_RING: usize = 1024;
/// Memory of a VM unless told otherwise, MiB.
pub const DEFAULT_MEMORY_MIB: u32 = 512;
/// The least memory a VM is started with, MiB: the kernel, the unpacked
/// initramfs (about 45 MB, held in RAM) and rxe (measured under TCG: 192
/// MiB boots to rxe ready; with 160 `rdma link add` fails, with 128 the
/// kernel panics out of memory).
pub const MIN_MEMORY_MIB: u32 = 192;
/// How long the KVM probe waits for the guest's first line.
pub const KVM_PROBE: Duration = Duration::from_secs(10);

/// The guest's command agent, one per virtio-serial port (busybox sh; `$1`
/// is the port). Protocol, one command at a time per port: the host sends
/// `<id> <base64 of a shell script>\n`; the guest answers
/// `\x1e<id> start\n`, the script's output (stdout and stderr together),
/// then `\x1e<id> <exit status>\n`. While no host end is connected a read
/// of the port returns end-of-file at once, hence the short sleep.
pub const GUEST_EXEC_AGENT: &str = r#"weft_exec_agent() {
  exec 3<>"$1"
  while :; do
    if read -r id cmd <&3; then
      case "$id" in ''|*[!0-9a-f]*) continue;; esac
      printf '\036%s start\n' "$id" >&3
      printf '%s' "$cmd" | base64 -d > /tmp/weft-exec-$id
      (cd /root && exec sh /tmp/weft-exec-$id) </dev/null >&3 2>&3
      rc=$?
      rm -f /tmp/weft-exec-$id
      printf '\036%s %s\n' "$id" "$rc" >&3
    else
      sleep 0.1
    fi
  done
}
"#;

/// How this process runs VM hosts (part of its plan).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct VmOptions {
    /// Directory of the image ([`KERNEL_FILE`], [`INITRD_FILE`]).
    pub image: PathBuf,
    /// Each VM gets a directory here (console, exec sockets).
    pub dir: PathBuf,
    /// Memory per VM, MiB.
    pub memory_mib: u32,
    /// KVM, TCG, or whichever works.
    pub accel: AccelChoice,
}

/// What the user asked for (`weft up --vm-accel`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    /// KVM if it boots the guest, else TCG.
    #[default]
    Auto,
    /// KVM (fails if it does not work).
    Kvm,
    /// Software emulation.
    Tcg,
}

/// The accelerator the VMs of a process run under, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Accel {
    /// KVM (else TCG).
    pub kvm: bool,
    /// Why, in words.
    pub why: String,
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kvm {
            write!(f, "KVM ({})", self.why)
        } else {
            write!(f, "TCG, software emulation ({})", self.why)
        }
    }
}

/// Errors of VM hosts.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// No qemu here.
    #[error("host `{0}` is of kind rxe, which runs as a qemu virtual machine, but `{QEMU}` is not installed on this machine (Debian: apt install {QEMU_PACKAGE})")]
    NoQemu(String),
    /// No image.
    #[error("no soft-RoCE VM image in {0}: run `weft vm-image build` on this machine")]
    NoImage(String),
    /// I/O.
    #[error("{what}: {source}")]
    Io {
        /// What.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The guest did not come up.
    #[error("VM host `{host}` did not boot: {why}\n--- its console, last lines ---\n{console}")]
    Boot {
        /// Host.
        host: String,
        /// What happened.
        why: String,
        /// The console's tail.
        console: String,
    },
    /// A command could not be run in the guest.
    #[error("{0}")]
    Exec(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> VmError {
    let what = what.into();
    move |source| VmError::Io { what, source }
}

/// Whether qemu is installed (in `PATH`).
pub fn have_qemu() -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| std::fs::metadata(d.join(QEMU)).is_ok_and(|m| m.is_file())))
}

/// The directory of VM host `name` under `base`.
pub fn vm_dir(base: &Path, name: &str) -> PathBuf {
    base.join(name)
}

/// The exec socket of port `i` (1-based) of the VM in `dir`.
pub fn exec_socket(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("exec-{i}.sock"))
}

/// The serial console log of the VM in `dir`.
pub fn console_file(dir: &Path) -> PathBuf {
    dir.join("console.log")
}

/// The kernel command line of a VM host.
pub fn kernel_cmdline(name: &str, spec: &HostSpec, mtu: u16) -> String {
    format!("console=ttyS0 quiet panic=-1 weft.name={name} weft.ip={}/{} weft.gw={} weft.mtu={mtu}", spec.ip, spec.prefix_len, spec.gateway)
}

/// qemu's arguments for VM host `name` (its NIC on fd 3).
pub fn qemu_args(name: &str, spec: &HostSpec, mtu: u16, opts: &VmOptions, accel: &Accel, dir: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "-name".into(),
        format!("weft-{name}"),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-M".into(),
        "q35".into(),
        "-m".into(),
        opts.memory_mib.to_string(),
        "-smp".into(),
        "1".into(),
    ];
    if accel.kvm {
        a.extend(["-accel".into(), "kvm".into(), "-cpu".into(), "host".into()]);
    } else {
        a.extend(["-accel".into(), "tcg".into()]);
    }
    a.extend([
        "-kernel".into(),
        opts.image.join(KERNEL_FILE).display().to_string(),
        "-initrd".into(),
        opts.image.join(INITRD_FILE).display().to_string(),
        "-append".into(),
        kernel_cmdline(name, spec, mtu),
        "-serial".into(),
        format!("file:{}", console_file(dir).display()),
        "-netdev".into(),
        "dgram,id=fabric,local.type=fd,local.str=3".into(),
        "-device".into(),
        format!("virtio-net-pci,netdev=fabric,mac={},romfile=", spec.mac),
        "-device".into(),
        "virtio-serial-pci,id=vser".into(),
    ]);
    for i in 1..=EXEC_PORTS {
        a.extend([
            "-chardev".into(),
            format!("socket,id=exec{i},path={},server=on,wait=off", exec_socket(dir, i).display()),
            "-device".into(),
            format!("virtserialport,bus=vser.0,chardev=exec{i},name=weft.exec.{i}"),
        ]);
    }
    a
}

/// Our end of a VM's NIC.
pub struct VmNic {
    sock: tokio::net::UnixDatagram,
    ring: tokio::sync::mpsc::Sender<BytesMut>,
    /// The host's counters.
    pub counters: Arc<TapCounters>,
}

impl VmNic {
    /// Queues `frame` toward the guest (dropped and counted if the ring is
    /// full).
    pub fn write(&self, frame: BytesMut) {
        if self.ring.try_send(frame).is_err() {
            self.counters.rx_ring_drops.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl HostFrameSource for VmNic {
    async fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.sock.recv(buf).await
    }
    fn offload(&self) -> bool {
        false
    }
}

/// A running VM host.
pub struct VmHost {
    /// Host name.
    pub name: String,
    /// Its directory (console, exec sockets).
    pub dir: PathBuf,
    /// Our end of its NIC.
    pub nic: Arc<VmNic>,
    /// Accelerator.
    pub accel: Accel,
    /// Seconds from start to [`READY`], once booted.
    pub boot_s: Option<f64>,
    child: std::process::Child,
    started: Instant,
    writer: tokio::task::JoinHandle<()>,
}

impl VmHost {
    /// qemu's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for VmHost {
    fn drop(&mut self) {
        self.writer.abort();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts VM host `name` (returns once qemu runs; [`wait_ready`] waits for
/// the guest). Must run inside a tokio runtime, on a thread that lives as
/// long as the process (see the module's invariants).
pub fn launch(name: &str, spec: &HostSpec, mtu: u16, opts: &VmOptions, accel: &Accel) -> Result<VmHost, VmError> {
    if !have_qemu() {
        return Err(VmError::NoQemu(name.to_string()));
    }
    if !opts.image.join(KERNEL_FILE).is_file() || !opts.image.join(INITRD_FILE).is_file() {
        return Err(VmError::NoImage(opts.image.display().to_string()));
    }
    let dir = vm_dir(&opts.dir, name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(io(format!("VM directory {}", dir.display())))?;
    let (ours, theirs) = std::os::unix::net::UnixDatagram::pair().map_err(io("VM NIC socket pair"))?;
    for s in [&ours, &theirs] {
        let s = socket2::SockRef::from(s);
        let _ = s.set_send_buffer_size(4 << 20);
        let _ = s.set_recv_buffer_size(4 << 20);
    }
    ours.set_nonblocking(true).map_err(io("VM NIC socket"))?;
    let log = std::fs::File::create(dir.join("qemu.log")).map_err(io("qemu log"))?;
    let log2 = log.try_clone().map_err(io("qemu log"))?;
    let mut cmd = Command::new(QEMU);
    cmd.args(qemu_args(name, spec, mtu, opts, accel, &dir)).stdin(Stdio::null()).stdout(log).stderr(log2);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&theirs);
    // SAFETY: between fork and exec only async-signal-safe calls (dup2,
    // fcntl, prctl) on a file descriptor this process owns.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if fd == 3 {
                if libc::fcntl(3, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, 3) != 3 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(io(format!("starting {QEMU}")))?;
    drop(theirs);
    let sock = tokio::net::UnixDatagram::from_std(ours).map_err(io("VM NIC socket"))?;
    let (ring, mut rx) = tokio::sync::mpsc::channel::<BytesMut>(RX_RING);
    let nic = Arc::new(VmNic { sock, ring, counters: Default::default() });
    let n = Arc::downgrade(&nic);
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            let Some(nic) = n.upgrade() else { break };
            // Waits while qemu's queue is full (the guest has no receive
            // buffers): the ring holds the rest.
            match nic.sock.send(&frame).await {
                Ok(_) => nic.counters.tx_packets.fetch_add(1, Ordering::Relaxed),
                Err(_) => nic.counters.rx_ring_drops.fetch_add(1, Ordering::Relaxed),
            };
        }
    });
    Ok(VmHost { name: name.to_string(), dir, nic, accel: accel.clone(), boot_s: None, child, started: Instant::now(), writer })
}

/// The last `n` lines of a console log.
fn tail(path: &Path, n: usize) -> String {
    let text = String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Waits until every VM in `vms` printed [`READY`] (at most `timeout`),
/// recording their boot times.
pub async fn wait_ready(vms: &mut [&mut VmHost], timeout: Duration) -> Result<(), VmError> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut waiting = false;
        for vm in vms.iter_mut() {
            if vm.boot_s.is_some() {
                continue;
            }
            let console = console_file(&vm.dir);
            let text = String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned();
            let boot_err = |why: String| VmError::Boot { host: vm.name.clone(), why, console: tail(&console, 15) };
            if text.contains(READY) {
                vm.boot_s = Some(vm.started.elapsed().as_secs_f64());
            } else if text.contains(FAILED) {
                return Err(boot_err("the guest could not add rxe0".into()));
            } else if let Ok(Some(status)) = vm.child.try_wait() {
                let q = tail(&vm.dir.join("qemu.log"), 5);
                return Err(boot_err(format!("qemu exited ({status}): {q}")));
            } else if Instant::now() > deadline {
                return Err(boot_err(format!("no `{READY}` after {} s under {}", timeout.as_secs(), vm.accel)));
            } else {
                waiting = true;
            }
        }
        if !waiting {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn qemu_version() -> String {
    Command::new(QEMU)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").to_string())
        .unwrap_or_default()
}

fn host_kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The accelerator for `opts` on this machine (blocking: may boot a probe
/// VM for up to [`KVM_PROBE`] the first time).
pub fn decide_accel(opts: &VmOptions) -> Accel {
    let tcg = |why: &str| Accel { kvm: false, why: why.to_string() };
    match opts.accel {
        AccelChoice::Tcg => return tcg("--vm-accel tcg"),
        AccelChoice::Kvm => return Accel { kvm: true, why: "--vm-accel kvm".into() },
        AccelChoice::Auto => {}
    }
    if std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_err() {
        return tcg("no usable /dev/kvm");
    }
    let key = format!("{} | {}", qemu_version(), host_kernel());
    let cache = opts.image.join("accel-verdict");
    if let Ok(text) = std::fs::read_to_string(&cache) {
        let mut lines = text.lines();
        if lines.next() == Some(key.as_str()) {
            if let Some(v) = lines.next() {
                return match v.strip_prefix("tcg: ") {
                    Some(why) => tcg(&format!("{why}; probed before, delete {} to probe again", cache.display())),
                    None => Accel { kvm: true, why: "probed before".into() },
                };
            }
        }
    }
    let verdict = probe_kvm(opts);
    let line = match &verdict {
        Ok(()) => "kvm".to_string(),
        Err(why) => format!("tcg: {why}"),
    };
    let _ = std::fs::write(&cache, format!("{key}\n{line}\n"));
    match verdict {
        Ok(()) => Accel { kvm: true, why: "it booted the guest".into() },
        Err(why) => tcg(&why),
    }
}

/// Boots the image under KVM until the guest's first line.
fn probe_kvm(opts: &VmOptions) -> Result<(), String> {
    let dir = opts.dir.join(format!(".kvm-probe-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let console = console_file(&dir);
    let mut child = Command::new(QEMU)
        .args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-M", "q35", "-m"])
        .arg(opts.memory_mib.to_string())
        .args(["-accel", "kvm", "-cpu", "host", "-kernel"])
        .arg(opts.image.join(KERNEL_FILE))
        .arg("-initrd")
        .arg(opts.image.join(INITRD_FILE))
        .args(["-append", "console=ttyS0 quiet panic=-1 weft.probe=1", "-serial"])
        .arg(format!("file:{}", console.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {QEMU}: {e}"))?;
    let t0 = Instant::now();
    let result = loop {
        if std::fs::read_to_string(&console).is_ok_and(|t| t.contains(INIT)) {
            break Ok(());
        }
        if let Ok(Some(_)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let line = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
            break Err(format!("qemu with KVM exited: {line}"));
        }
        if t0.elapsed() > KVM_PROBE {
            break Err(format!("a KVM guest printed nothing in {} s", KVM_PROBE.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Quotes `argv` for a POSIX shell.
pub fn shell_quote(argv: &[String]) -> String {
    argv.iter().map(|a| format!("'{}'", a.replace('\'', r"'\''"))).collect::<Vec<_>>().join(" ")
}

/// Runs `argv` in the VM whose directory is `dir`, copying its output
/// (stdout and stderr together) to `out` as it comes; returns its exit
/// status. Waits for a free exec port if all are busy.
pub fn exec(dir: &Path, argv: &[String], out: &mut dyn std::io::Write) -> Result<i32, VmError> {
    use base64::Engine as _;
    let script = base64::engine::general_purpose::STANDARD.encode(shell_quote(argv));
    let id = format!("{:016x}", {
        use std::hash::{BuildHasher as _, Hasher as _};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id()));
        h.finish()
    });
    let until = Instant::now() + Duration::from_secs(600);
    loop {
        for i in 1..=EXEC_PORTS {
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(format!("exec-{i}.lock")))
                .map_err(io(format!("VM directory {}", dir.display())))?;
            // SAFETY: flock on a file descriptor we own.
            if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                continue;
            }
            let sock = exec_socket(dir, i);
            let mut s = std::os::unix::net::UnixStream::connect(&sock).map_err(io(format!("exec port {}", sock.display())))?;
            s.write_all(format!("{id} {script}\n").as_bytes()).map_err(io("exec port"))?;
            let rc = read_exec_answer(&mut s, &id, out)?;
            drop(lock);
            return Ok(rc);
        }
        if Instant::now() > until {
            return Err(VmError::Exec(format!("all {EXEC_PORTS} exec ports of the VM stay busy")));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads the guest's answer to command `id` (public for the fuzz target): output after its start
/// marker (anything before is a previous command's, whose client left)
/// up to its exit marker.
pub fn read_exec_answer(s: &mut impl std::io::Read, id: &str, out: &mut dyn std::io::Write) -> Result<i32, VmError> {
    let start = format!("\x1e{id} start\n");
    let end = format!("\x1e{id} ");
    let mut pending: Vec<u8> = Vec::new();
    let mut started = false;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = s.read(&mut buf).map_err(io("exec port"))?;
        if n == 0 {
            return Err(VmError::Exec("the VM closed the exec port before the command ended (it was stopped?)".into()));
        }
        pending.extend_from_slice(&buf[..n]);
        if !started {
            match find(&pending, start.as_bytes()) {
                Some(at) => {
                    pending.drain(..at + start.len());
                    started = true;
                }
                None => {
                    // Keep what could be the start of the marker.
                    let keep = pending.len().saturating_sub(start.len());
                    pending.drain(..keep);
                    continue;
                }
            }
        }
        if let Some(at) = find(&pending, end.as_bytes()) {
            let rest = &pending[at + end.len()..];
            if let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                out.write_all(&pending[..at]).map_err(io("output"))?;
                let _ = out.flush();
                let rc = String::from_utf8_lossy(&rest[..nl]).trim().parse().unwrap_or(255);
                return Ok(rc);
            }
            continue;
        }
        // Everything before the last marker byte is output.
        let safe = pending.iter().rposition(|&b| b == 0x1e).unwrap_or(pending.len());
        out.write_all(&pending[..safe]).map_err(io("output"))?;
        let _ = out.flush();
        pending.drain(..safe);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_wire::ethernet::EthernetAddress;
    use weft_wire::ipv4::Ipv4Address;

    fn spec() -> HostSpec {
        HostSpec {
            kind: weft_core::fabric::HostKind::Rxe,
            ip: Ipv4Address::new(10, 0, 1, 2),
            prefix_len: 24,
            mac: EthernetAddress([2, 0, 0, 0, 1, 2]),
            gateway: Ipv4Address::new(10, 0, 1, 1),
        }
    }

    #[test]
    fn the_guest_gets_its_address_gateway_mtu_and_mac_from_the_plan() {
        let opts = VmOptions { image: "/img".into(), dir: "/run/vm".into(), memory_mib: 384, accel: AccelChoice::Auto };
        let a = qemu_args("h8", &spec(), 9000, &opts, &Accel { kvm: false, why: String::new() }, Path::new("/run/vm/h8"));
        let line = a.join(" ");
        assert!(line.contains("weft.name=h8 weft.ip=10.0.1.2/24 weft.gw=10.0.1.1 weft.mtu=9000"), "{line}");
        assert!(line.contains("mac=02:00:00:00:01:02"), "{line}");
        assert!(line.contains("-m 384 "), "{line}");
        assert!(line.contains("dgram,id=fabric,local.type=fd,local.str=3"), "{line}");
        assert!(line.contains("-accel tcg"), "{line}");
        assert_eq!(a.iter().filter(|x| x.starts_with("virtserialport")).count(), EXEC_PORTS);
        let kvm = qemu_args("h8", &spec(), 1500, &opts, &Accel { kvm: true, why: String::new() }, Path::new("/x")).join(" ");
        assert!(kvm.contains("-accel kvm -cpu host"), "{kvm}");
    }

    #[test]
    fn arguments_reach_the_guest_shell_unchanged() {
        let argv: Vec<String> = ["sh", "-c", "echo 'a b' \"$x\"; it's"].iter().map(|s| s.to_string()).collect();
        let out = Command::new("sh").arg("-c").arg(format!("printf '%s\\n' {}", shell_quote(&argv))).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "sh\n-c\necho 'a b' \"$x\"; it's\n");
    }

    #[test]
    fn an_answer_is_the_output_between_its_markers() {
        let id = "00112233aabbccdd";
        // A previous command's leftovers, then ours, split anywhere.
        let wire = format!("old output\n\x1effff end 0\n\x1e{id} start\nhello\x1e world\n\x1e{id} 3\n");
        for chunk in [1, 2, 5, 1000] {
            struct Chunks<'a>(&'a [u8], usize);
            impl std::io::Read for Chunks<'_> {
                fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                    let n = self.0.len().min(self.1).min(b.len());
                    b[..n].copy_from_slice(&self.0[..n]);
                    self.0 = &self.0[n..];
                    Ok(n)
                }
            }
            let mut out = Vec::new();
            let rc = read_exec_answer(&mut Chunks(wire.as_bytes(), chunk), id, &mut out).unwrap();
            assert_eq!(rc, 3);
            assert_eq!(String::from_utf8_lossy(&out), "hello\x1e world\n", "chunk {chunk}");
        }
        let mut out = Vec::new();
        assert!(read_exec_answer(&mut &b"\x1e00 start\n"[..], id, &mut out).is_err(), "closed before the end");
    }
}
