//! Baseline for BENCHMARKS.md: the bare userspace TAP-to-TAP bridge that
//! weft's real-time path is compared with. Two network namespaces
//! (`tbA`, `tbB`, 10.99.0.1/2 /24), each with a TAP `eth0`; two blocking
//! threads copy frames A→B and B→A (read → write), nothing else.
//! Runs until killed; deletes the namespaces on SIGINT/SIGTERM.
//! `--offload`: the TAPs carry virtio-net headers with checksum and TSO
//! offload, and the bridge passes super-frames through whole (the upper
//! bound of what a userspace path with offloads can reach).
//!
//! `sudo target/release/examples/tap_bridge [--offload]` (see
//! scripts/bench-realtime).

use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::Arc;

fn sh(args: &[&str]) {
    let ok = Command::new(args[0]).args(&args[1..]).status().map(|s| s.success()).unwrap_or(false);
    if !ok {
        eprintln!("failed: {}", args.join(" "));
    }
}

fn make(ns: &str, dev: &str, ip: &str, mac: &str, offload: bool) -> Arc<tun_rs::SyncDevice> {
    sh(&["ip", "netns", "add", ns]);
    let tun = match tun_rs::DeviceBuilder::new().name(dev).layer(tun_rs::Layer::L2).mtu(1500).offload(offload).build_sync() {
        Ok(t) => t,
        Err(_) => {
            eprintln!("error: cannot create TAP device {dev} (needs root and /dev/net/tun)");
            sh(&["ip", "netns", "del", ns]);
            std::process::exit(1);
        }
    };
    sh(&["ip", "link", "set", dev, "netns", ns]);
    sh(&["ip", "-n", ns, "link", "set", dev, "name", "eth0"]);
    sh(&["ip", "-n", ns, "link", "set", "eth0", "address", mac, "up"]);
    sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    sh(&["ip", "-n", ns, "addr", "add", ip, "dev", "eth0"]);
    // Blocking reads and writes, as a plain bridge would do.
    let fd = tun.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    Arc::new(tun)
}

fn pump(from: Arc<tun_rs::SyncDevice>, to: Arc<tun_rs::SyncDevice>) {
    let mut buf = vec![0u8; 65536 + 10];
    loop {
        // SAFETY: reading into / writing from a valid buffer on our descriptors.
        let n = unsafe { libc::read(from.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            continue;
        }
        unsafe { libc::write(to.as_raw_fd(), buf.as_ptr().cast(), n as usize) };
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    let _guard = rt.enter();
    let offload = std::env::args().any(|a| a == "--offload");
    let a = make("tbA", "tbtapA", "10.99.0.1/24", "02:00:00:00:99:01", offload);
    let b = make("tbB", "tbtapB", "10.99.0.2/24", "02:00:00:00:99:02", offload);
    let (a2, b2) = (a.clone(), b.clone());
    std::thread::spawn(move || pump(a2, b2));
    std::thread::spawn(move || pump(b, a));
    println!("bridge up: tbA 10.99.0.1 <-> tbB 10.99.0.2 (offload {})", if offload { "on" } else { "off" });
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    });
    sh(&["ip", "netns", "del", "tbA"]);
    sh(&["ip", "netns", "del", "tbB"]);
}
