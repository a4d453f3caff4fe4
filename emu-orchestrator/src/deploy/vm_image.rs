//! The soft-RoCE VM image of `kind = "rxe"` hosts (`weft vm-image build`):
//! Debian's kernel (its package ships `rdma_rxe.ko`) and an
//! initramfs assembled from Debian packages, booted by qemu.
//!
//! How it is made, from Debian's archive only (apt's sources as configured
//! on this machine, with package lists of its own: `apt-get update` into
//! the work directory first, which needs no root and makes the build
//! independent of how stale, or missing, this machine's own lists are):
//! the package closure of busybox-static, the rdma-core user space
//! (libibverbs with the rxe provider, ibverbs-utils, rdmacm-utils),
//! perftest, iproute2 and iperf3 (`apt-cache depends --recurse`, without
//! recommends) plus the kernel image package is downloaded with `apt-get
//! download` into the cache directory and unpacked with `dpkg-deb -x`; only
//! the kernel modules the guest needs (virtio PCI/net/console, the CRC32
//! the rxe ICRC uses, and rdma_rxe with their dependencies, read from each
//! module's `depends=`) are kept, and documentation and Perl (a dependency
//! of debconf, never run in the guest) are dropped. The init
//! script loads those modules in dependency order, sets the address and
//! route given on the kernel command line (`weft.ip=`, `weft.gw=`), adds
//! `rxe0` on `eth0` and prints `weft: rxe ready`. The initramfs is an
//! uncompressed newc cpio archive written here.
//!
//! Invariants: nothing is fetched from outside apt's sources; a build
//! starts from an empty work directory and replaces the image only when it
//! is complete.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Packages whose closure goes into the image (the kernel comes on top).
pub const PACKAGES: &[&str] =
    &["busybox-static", "ibverbs-utils", "ibverbs-providers", "rdmacm-utils", "perftest", "iproute2", "iperf3", "kmod"];

/// Kernel modules the guest loads (with their dependencies), in this order.
pub const MODULES: &[&str] = &["virtio_pci", "virtio_net", "virtio_console", "crc32_generic", "rdma_rxe"];

/// Line the guest prints when rxe0 is up.
pub const READY: &str = emu_node::vm::READY;

/// Version of what weft puts into the image (the init script, the
/// modules); an image of another version is rebuilt on first use.
pub const IMAGE_FORMAT: &str = "2";

/// The image's files in the order a copy writes them: the kernel and the
/// initramfs first, the files that say what the image is last, so a copy
/// cut short is never taken for a complete one. (`accel-verdict`, this
/// machine's KVM probe, is not part of the image.)
pub const IMAGE_FILES: [&str; 5] = ["vmlinuz", "initrd.cpio", "packages.txt", "release", "format"];

/// A shell command printing what identifies the image in `dir` (format,
/// kernel release, package list, file sizes): run here and on another
/// machine, equal output means the same image.
pub fn identity_command(dir: &str) -> String {
    let d = emu_node::vm::shell_quote(&[dir.to_string()]);
    format!("cd {d} 2>/dev/null && cat format release packages.txt && stat -c %s vmlinuz initrd.cpio")
}

/// Where the image goes unless told: `$XDG_CACHE_HOME/weft/vm-image`, else
/// `~/.cache/weft/vm-image` (a cache: it survives reboots, unlike the
/// state directory under /run, and `weft down` never removes it).
pub fn default_dir() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    cache.join("weft").join("vm-image")
}

/// The image in `dir`, built first if there is none or it is of another
/// [`IMAGE_FORMAT`] (`progress` gets the first-time message and the steps).
pub fn ensure(dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<VmImage, VmImageError> {
    if let Some(image) = existing(dir) {
        return Ok(image);
    }
    let why = if dir.join("release").exists() { "the VM image there is from another weft version" } else { "first use" };
    progress(&format!(
        "building the soft-RoCE VM image of kind = \"rxe\" hosts into {} ({why}): about 90 MB of Debian packages through apt, \
         about a minute, a 45 MB initramfs; later runs reuse it (`weft vm-image build` rebuilds it)",
        dir.display()
    ));
    build(dir, progress)
}

/// A build failed.
#[derive(Debug, thiserror::Error)]
pub enum VmImageError {
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
    /// Something expected is not in the packages.
    #[error("{0}")]
    Missing(String),
    /// Debian's archive could not be reached.
    #[error("cannot fetch Debian's package lists ({0}): the VM image is built from Debian packages; check the network, a proxy in apt's configuration, or apt's sources (/etc/apt/sources.list*)")]
    NoArchive(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> VmImageError {
    let what = what.into();
    move |source| VmImageError::Io { what, source }
}

fn run(cmd: &mut Command) -> Result<String, VmImageError> {
    let shown = shown(cmd);
    let out = cmd.output().map_err(|e| VmImageError::Command { cmd: shown.clone(), detail: e.to_string() })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(VmImageError::Command {
            cmd: shown,
            detail: err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A command as an error shows it: the program and its first arguments,
/// then how many more (a download names some 80 packages).
fn shown(cmd: &Command) -> String {
    let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in args.iter().take(4) {
        s += " ";
        s += a;
    }
    if args.len() > 4 {
        s += &format!(" ... ({} more arguments)", args.len() - 4);
    }
    s
}

/// apt with package lists and a cache of its own in the image's work
/// directory: fresh lists without root, whatever the state of this
/// machine's (stale ones fail with "Can't find a source to download
/// version", missing ones with "No packages found").
struct Apt {
    options: Vec<String>,
}

impl Apt {
    fn new(work: &Path) -> Result<Apt, VmImageError> {
        let (lists, cache) = (work.join("apt/lists"), work.join("apt/cache"));
        for d in [lists.join("partial"), cache.join("archives/partial")] {
            std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
        }
        let options = [
            format!("Dir::State::Lists={}", lists.display()),
            format!("Dir::Cache={}", cache.display()),
            "Dir::Cache::pkgcache=".into(),
            "Dir::Cache::srcpkgcache=".into(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect();
        Ok(Apt { options })
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.args(&self.options);
        c
    }

    /// `apt-get update` into the own lists; an archive it could not reach
    /// is an error (apt itself only warns and exits 0).
    fn update(&self) -> Result<(), VmImageError> {
        let mut c = self.command("apt-get");
        c.args(["update", "-qq"]);
        let out = c.output().map_err(|e| VmImageError::Command { cmd: shown(&c), detail: e.to_string() })?;
        let err = String::from_utf8_lossy(&out.stderr);
        match unreachable_archive(&err) {
            Some(line) => Err(VmImageError::NoArchive(line)),
            None if !out.status.success() => Err(VmImageError::Command {
                cmd: shown(&c),
                detail: err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string(),
            }),
            None => Ok(()),
        }
    }
}

/// The line of `apt-get update`'s errors that says an archive could not be
/// reached, shortened to the cause.
fn unreachable_archive(stderr: &str) -> Option<String> {
    let line =
        stderr.lines().find(|l| l.contains("Failed to fetch") || l.contains("Could not resolve") || l.contains("Unable to connect"))?;
    // "W: Failed to fetch URL  CAUSE": the cause is after the URL.
    let line = line.trim_start_matches(['W', 'E', ':', ' ']);
    Some(line.split_once("  ").map_or(line, |(_, cause)| cause).trim().to_string())
}

/// What a build made.
#[derive(Debug, Clone)]
pub struct VmImage {
    /// The kernel.
    pub kernel: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// Kernel release.
    pub release: String,
    /// Packages in it.
    pub packages: usize,
}

/// The image in `dir`, if a build completed there.
pub fn existing(dir: &Path) -> Option<VmImage> {
    let release = std::fs::read_to_string(dir.join("release")).ok()?.trim().to_string();
    let (kernel, initrd) = (dir.join(emu_node::vm::KERNEL_FILE), dir.join(emu_node::vm::INITRD_FILE));
    let format = std::fs::read_to_string(dir.join("format")).unwrap_or_default();
    (kernel.is_file() && initrd.is_file() && format.trim() == IMAGE_FORMAT).then_some(VmImage { kernel, initrd, release, packages: 0 })
}

/// Builds the image into `dir` (`progress` gets one line per step).
pub fn build(dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<VmImage, VmImageError> {
    let work = dir.join("work");
    let _ = std::fs::remove_dir_all(&work);
    let (debs, root) = (work.join("debs"), work.join("root"));
    std::fs::create_dir_all(&debs).map_err(io(format!("creating {}", debs.display())))?;
    std::fs::create_dir_all(&root).map_err(io(format!("creating {}", root.display())))?;
    progress("fetching Debian's package lists into the work directory (apt-get update)");
    let apt = Apt::new(&work)?;
    apt.update()?;
    // The kernel package behind the linux-image-amd64 meta-package.
    let meta = run(apt.command("apt-cache").args(["depends", "linux-image-amd64"]))?;
    let kernel_pkg = meta
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-") && p.chars().nth(12).is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .ok_or_else(|| {
            VmImageError::Missing("apt knows no linux-image-amd64 kernel package (is Debian's main archive in apt's sources?)".into())
        })?;
    let release = kernel_pkg.trim_start_matches("linux-image-").to_string();
    let closure = run(apt
        .command("apt-cache")
        .args([
            "depends",
            "--recurse",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
        ])
        .args(PACKAGES))?;
    let mut pkgs: Vec<String> =
        closure.lines().filter(|l| l.starts_with(|c: char| c.is_ascii_alphanumeric())).map(str::to_string).collect();
    pkgs.sort();
    pkgs.dedup();
    pkgs.push(kernel_pkg.clone());
    progress(&format!("downloading {} Debian packages (about 90 MB) with apt-get download", pkgs.len()));
    run(apt.command("apt-get").arg("download").args(&pkgs).current_dir(&debs))?;
    progress("unpacking them with dpkg-deb -x");
    let mut n = 0;
    for e in std::fs::read_dir(&debs).map_err(io("reading the downloaded packages"))?.flatten() {
        if e.path().extension().is_some_and(|x| x == "deb") {
            run(Command::new("dpkg-deb").arg("-x").arg(e.path()).arg(&root))?;
            n += 1;
        }
    }
    let moddir = root.join("lib/modules").join(&release);
    let order = module_order(&moddir, MODULES)?;
    progress(&format!(
        "keeping {} kernel modules of {release}: {}",
        order.len(),
        order.iter().map(|m| m.0.as_str()).collect::<Vec<_>>().join(" ")
    ));
    prune(&root, &moddir, &order)?;
    let kernel = root.join("boot").join(format!("vmlinuz-{release}"));
    std::fs::copy(&kernel, work.join("vmlinuz")).map_err(io(format!("copying {}", kernel.display())))?;
    let _ = std::fs::remove_dir_all(root.join("boot"));
    let init = init_script(&release, &order);
    std::fs::write(root.join("init"), init).map_err(io("writing /init"))?;
    let cpio = newc_archive(&root)?;
    std::fs::write(work.join("initrd.cpio"), &cpio).map_err(io("writing the initramfs"))?;
    // Complete: replace the previous image.
    for f in ["vmlinuz", "initrd.cpio"] {
        std::fs::rename(work.join(f), dir.join(f)).map_err(io(format!("installing {f}")))?;
    }
    std::fs::write(dir.join("release"), &release).map_err(io("writing the release"))?;
    std::fs::write(dir.join("format"), IMAGE_FORMAT).map_err(io("writing the format"))?;
    // A new image may boot differently under KVM: probe again.
    let _ = std::fs::remove_file(dir.join("accel-verdict"));
    std::fs::write(dir.join("packages.txt"), pkgs.join("\n") + "\n").map_err(io("writing the package list"))?;
    let _ = std::fs::remove_dir_all(&work);
    progress(&format!("image ready: {} (kernel {release}), initramfs {:.1} MB", dir.display(), cpio.len() as f64 / 1e6));
    Ok(VmImage { kernel: dir.join("vmlinuz"), initrd: dir.join("initrd.cpio"), release, packages: n })
}

/// `depends=` of a kernel module file (its .modinfo section holds
/// NUL-separated `key=value` strings).
fn module_depends(ko: &[u8]) -> Vec<String> {
    let key = b"depends=";
    ko.windows(key.len())
        .position(|w| w == key)
        .map(|at| {
            let rest = &ko[at + key.len()..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).split(',').filter(|s| !s.is_empty()).map(str::to_string).collect()
        })
        .unwrap_or_default()
}

/// Every `.ko` under `moddir` by module name (`-` and `_` are the same).
fn module_files(moddir: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![moddir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(name) = p.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".ko")) {
                out.insert(name.replace('-', "_"), p);
            }
        }
    }
    out
}

/// The modules `wanted` and their dependencies, dependencies first:
/// (name, path relative to `moddir`).
fn module_order(moddir: &Path, wanted: &[&str]) -> Result<Vec<(String, PathBuf)>, VmImageError> {
    let files = module_files(moddir);
    let mut order: Vec<(String, PathBuf)> = Vec::new();
    fn visit(
        name: &str,
        files: &BTreeMap<String, PathBuf>,
        moddir: &Path,
        order: &mut Vec<(String, PathBuf)>,
        depth: usize,
    ) -> Result<(), VmImageError> {
        let name = name.replace('-', "_");
        if order.iter().any(|(n, _)| *n == name) || depth > 32 {
            return Ok(());
        }
        let path = files.get(&name).ok_or_else(|| VmImageError::Missing(format!("kernel module {name} is not in the kernel package")))?;
        let bytes = std::fs::read(path).map_err(io(format!("reading {}", path.display())))?;
        for d in module_depends(&bytes) {
            visit(&d, files, moddir, order, depth + 1)?;
        }
        if !order.iter().any(|(n, _)| *n == name) {
            order.push((name, path.strip_prefix(moddir).unwrap_or(path).to_path_buf()));
        }
        Ok(())
    }
    for w in wanted {
        visit(w, &files, moddir, &mut order, 0)?;
    }
    Ok(order)
}

/// Drops every module but `keep`, and documentation.
fn prune(root: &Path, moddir: &Path, keep: &[(String, PathBuf)]) -> Result<(), VmImageError> {
    let kept = root.join("weft-kept-modules");
    for (_, rel) in keep {
        let to = kept.join(rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io("keeping modules"))?;
        }
        std::fs::rename(moddir.join(rel), &to).map_err(io(format!("keeping {}", rel.display())))?;
    }
    std::fs::remove_dir_all(moddir).map_err(io("dropping the other modules"))?;
    std::fs::rename(&kept, moddir).map_err(io("keeping modules"))?;
    for d in [
        "usr/share/doc",
        "usr/share/man",
        "usr/share/locale",
        "usr/share/info",
        "usr/share/lintian",
        "usr/share/bug",
        "usr/lib/x86_64-linux-gnu/gconv",
    ] {
        let _ = std::fs::remove_dir_all(root.join(d));
    }
    // Perl comes in through debconf (iproute2's maintainer scripts); nothing
    // the guest runs needs it: about 60 of the initramfs's MB, and the
    // kernel unpacks every one of them at boot.
    for dir in ["usr/share", "usr/lib/x86_64-linux-gnu", "usr/bin"] {
        for e in std::fs::read_dir(root.join(dir)).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("perl") || name.starts_with("libperl") {
                let p = e.path();
                let _ = if p.is_dir() && !p.is_symlink() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
            }
        }
    }
    Ok(())
}

/// The guest's /init: configuration from the kernel command line
/// (`weft.name=`, `weft.ip=`, `weft.gw=`, `weft.mtu=`; `weft.probe=1`
/// only prints its first line and powers off, for the KVM probe), modules,
/// `eth0`, the exec agents on the virtio-serial ports, `rxe0`.
fn init_script(release: &str, modules: &[(String, PathBuf)]) -> String {
    use emu_node::vm::{FAILED, INIT};
    let mut s = String::from(
        "#!/bin/busybox sh\n\
         # weft's soft-RoCE host (weft vm-image build): modules, address, rxe0.\n\
         /bin/busybox mkdir -p /proc /sys /dev /tmp /run /root\n\
         /bin/busybox mount -t proc proc /proc\n\
         /bin/busybox mount -t sysfs sys /sys\n\
         /bin/busybox mount -t devtmpfs dev /dev\n\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root\n\
         for a in $(cat /proc/cmdline); do case $a in weft.ip=*) IP=${a#weft.ip=};; weft.gw=*) GW=${a#weft.gw=};; \
         weft.mtu=*) MTU=${a#weft.mtu=};; weft.name=*) NAME=${a#weft.name=};; weft.probe=*) PROBE=1;; esac; done\n",
    );
    s.push_str(&format!("echo \"{INIT}\"\n[ -n \"$PROBE\" ] && /bin/busybox poweroff -f\n"));
    s.push_str(
        "[ -n \"$NAME\" ] && hostname \"$NAME\"\n\
         # The fabric is IPv4: no router solicitations or DAD from eth0.\n\
         echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6\n\
         echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6\n",
    );
    for (name, rel) in modules {
        s.push_str(&format!("/bin/busybox insmod /lib/modules/{release}/{} || echo \"weft: module {name} failed\"\n", rel.display()));
    }
    s.push_str(emu_node::vm::GUEST_EXEC_AGENT);
    s.push_str(&format!(
        "ip link set lo up\n\
         [ -n \"$MTU\" ] && ip link set eth0 mtu \"$MTU\"\n\
         ip link set eth0 up\n\
         [ -n \"$IP\" ] && ip addr add \"$IP\" dev eth0\n\
         [ -n \"$GW\" ] && ip route add default via \"$GW\"\n\
         for p in /dev/vport*p*; do [ -e \"$p\" ] && weft_exec_agent \"$p\" & done\n\
         if rdma link add rxe0 type rxe netdev eth0; then echo \"{READY}\"; else echo \"{FAILED}\"; fi\n\
         # The user-space verbs stack sees the device (rdma-core's rxe provider).\n\
         ibv_devices | sed 's/^/weft: ibv_devices: /'\n\
         while :; do sleep 3600; done\n"
    ));
    s
}

/// An uncompressed newc cpio archive of `root` (what the kernel unpacks
/// as its initramfs): directories, files with their modes, symlinks.
fn newc_archive(root: &Path) -> Result<Vec<u8>, VmImageError> {
    use std::os::unix::fs::MetadataExt as _;
    let mut out = Vec::new();
    let mut entries = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(io(format!("reading {}", d.display())))?.flatten() {
            let p = e.path();
            let md = std::fs::symlink_metadata(&p).map_err(io(format!("reading {}", p.display())))?;
            if md.is_dir() {
                stack.push(p.clone());
            }
            entries.push((p, md));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut ino = 1u32;
    let mut push = |name: &str, mode: u32, data: &[u8], out: &mut Vec<u8>| {
        let name_z = name.len() + 1;
        let header = format!(
            "070701{ino:08x}{mode:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{name_z:08x}{:08x}",
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            0
        );
        ino += 1;
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
        out.extend_from_slice(data);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
    };
    for (p, md) in &entries {
        let name = p.strip_prefix(root).unwrap_or(p).to_string_lossy().into_owned();
        let mode = md.mode();
        if md.file_type().is_symlink() {
            let target = std::fs::read_link(p).map_err(io(format!("reading {}", p.display())))?;
            push(&name, mode, target.to_string_lossy().as_bytes(), &mut out);
        } else if md.is_file() {
            let data = std::fs::read(p).map_err(io(format!("reading {}", p.display())))?;
            let mode = if name == "init" { 0o100755 } else { mode };
            push(&name, mode, &data, &mut out);
        } else if md.is_dir() {
            push(&name, mode, &[], &mut out);
        }
    }
    push("TRAILER!!!", 0, &[], &mut out);
    Ok(out)
}

/// Boots `image` under qemu (KVM when `kvm`, else TCG) with a user-mode
/// NIC, waits up to `timeout` for [`READY`] on the serial console and
/// returns the seconds it took and the console text.
pub fn boot_check(image: &VmImage, kvm: bool, timeout: std::time::Duration) -> Result<(f64, String), VmImageError> {
    let log = std::env::temp_dir().join(format!("weft-vm-boot-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).map_err(io("console log"))?;
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-M", "q35", "-m", "512", "-nographic", "-no-reboot", "-kernel"])
        .arg(&image.kernel)
        .arg("-initrd")
        .arg(&image.initrd)
        .args(["-append", "console=ttyS0 quiet weft.ip=10.0.0.2/24"])
        .args(["-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0"])
        .stdin(std::process::Stdio::null())
        .stdout(file.try_clone().map_err(io("console log"))?)
        .stderr(file);
    if kvm {
        cmd.args(["-enable-kvm", "-cpu", "host"]);
    }
    let t0 = std::time::Instant::now();
    let mut child = cmd.spawn().map_err(|e| VmImageError::Command { cmd: "qemu-system-x86_64".into(), detail: e.to_string() })?;
    let mut text = String::new();
    while t0.elapsed() < timeout {
        text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
        let done = text.contains("weft: rxe failed") || text.lines().any(|l| l.starts_with("weft: ibv_devices:") && l.contains("rxe0"));
        if done || matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let took = t0.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&log);
    Ok((took, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_depends_of_a_module_are_read_from_its_modinfo() {
        let ko = b"\x7fELF....license=GPL\0depends=ib_core,ip6_udp_tunnel,udp_tunnel\0name=rdma_rxe\0";
        assert_eq!(module_depends(ko), ["ib_core", "ip6_udp_tunnel", "udp_tunnel"]);
        assert!(module_depends(b"depends=\0name=x\0").is_empty());
        assert!(module_depends(b"nothing").is_empty());
    }

    #[test]
    fn a_newc_archive_holds_files_directories_and_symlinks() {
        let d = std::env::temp_dir().join(format!("weft-cpio-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("bin")).unwrap();
        std::fs::write(d.join("init"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("busybox", d.join("bin/sh")).unwrap();
        let a = newc_archive(&d).unwrap();
        let _ = std::fs::remove_dir_all(&d);
        assert!(a.starts_with(b"070701"));
        assert!(a.len().is_multiple_of(4));
        let text = String::from_utf8_lossy(&a);
        for name in ["bin\0", "bin/sh\0", "init\0", "TRAILER!!!\0", "#!/bin/sh\n", "busybox"] {
            assert!(text.contains(name), "{name:?} missing");
        }
        // /init is executable whatever its mode on disk.
        let at = text.find("init\0").unwrap();
        let header = &text[at - 110..at];
        assert_eq!(&header[14..22], "000081ed", "{header}");
    }

    #[test]
    fn an_unreachable_archive_is_told_in_one_line_and_a_long_command_is_shown_short() {
        let stderr =
            "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'deb.debian.org'\n\
                      W: Some index files failed to download. They have been ignored, or old ones used instead.\n";
        let cause = unreachable_archive(stderr).expect("unreachable");
        assert_eq!(cause, "Temporary failure resolving 'deb.debian.org'");
        let e = VmImageError::NoArchive(cause).to_string();
        assert!(!e.contains('\n') && e.contains("check the network"), "{e}");
        assert_eq!(unreachable_archive("W: Download is performed unsandboxed as root\n"), None);
        let mut c = Command::new("apt-get");
        c.arg("download").args((0..84).map(|i| format!("pkg{i}")));
        assert_eq!(shown(&c), "apt-get download pkg0 pkg1 pkg2 ... (81 more arguments)");
    }
}
