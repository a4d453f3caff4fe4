//! Real Linux hosts (docs/HOSTS.md): a network namespace per host with a TAP
//! device whose other end this process holds, and the host's NIC model.
//!
//! Set-up, in this order (each step with `ip`, so a user can reproduce and
//! inspect it): `ip netns add <host>`; a TAP device (tun-rs) created in
//! the root namespace and moved into the host's namespace, renamed `eth0`,
//! given the host's MAC from the addressing plan, the link MTU, its IPv4
//! address and a default route via its ToR; `lo` up; IPv6 off (the
//! emulated fabric is IPv4). The TAP fd stays valid across the move.
//!
//! [`TapNic`] is the host side of the access link: frames the kernel sends
//! leave at the link rate (a serializer, like every port) and reach the ToR
//! `delay` after their last bit. Invariant: the frames a host sends never
//! exceed its link rate over any window.
//!
//! Back-pressure, as a real NIC gives it: a NIC never drops what
//! the kernel hands it; when its ring is full the kernel's qdisc holds the
//! packets and TCP's small-queue limit holds the sender. Two parts: the
//! host's `eth0` gets a token-bucket qdisc (`tc ... tbf`) at the link rate
//! (burst two frames or 1 ms, queue 20 ms or 32 frames), so the kernel
//! hands frames to the TAP no faster than the link takes them and keeps the
//! rest in its own queue (a full qdisc refuses the packet to TCP, which
//! retries it: a local drop, not a loss in the network; `eth0`'s
//! `gso_max_size` is the bucket, so tbf never has to cut a GSO packet and
//! drop part of it, see [`host_gso_max_size`]); and the reader
//! stops reading the TAP while more than `queue_ns` of frames wait in the
//! NIC model (the TAP's ring then holds them), instead of dropping. A TAP
//! alone gives no back-pressure: the kernel's tun driver drops when its
//! ring is full, so the qdisc is what makes the kernel wait.
//!
//! Segmentation offload (on by default, `--tap-offload off`
//! turns it off): the TAP is opened with `IFF_VNET_HDR` and offers the
//! kernel checksum and TCPv4 segmentation offload (TUNSETOFFLOAD), so a
//! host's kernel hands over TCP super-frames of up to `gso_max_size` bytes
//! with one virtio-net header each, as it would to a NIC with TSO. The
//! reader cuts them into MTU frames ([`weft_wire::gso::segment`]) before
//! the NIC model paces them onto the access link, so the ToR and everything
//! behind it see only MTU frames with complete checksums; a super-frame is
//! taken whole or not at all (a NIC's ring holds its descriptors). Toward
//! a host, the writer thread coalesces the in-order segments of a flow that
//! are due together into one packet ([`weft_wire::gso::Coalescer`], what a
//! NIC's GRO/LRO does); it never holds a frame back to wait for more.
//!
//! Hostile hosts: every frame a real host sends passes its
//! [`EdgeGuard`] (`weft_core::edge`) after segmentation; refused frames are
//! counted per cause (`weft_tap_rejected_total`) and never reach the ToR.

use crate::clock::DeadlineScheduler;
use crate::inbox::InboxSender;
use crate::link::LinkChange;
use bytes::BytesMut;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use weft_core::edge::{EdgeGuard, Rejection};
use weft_core::fabric::HostSpec;
use weft_core::link_loss::LinkLoss;
use weft_core::serializer::Serializer;
use weft_wire::gso::{self, Coalescer, VnetHdr, VNET_HDR_LEN};
use weft_wire::ids::PortId;
use weft_wire::time::{BitRate, Nanos};

/// Errors setting up a TAP host.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// A command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed.
        stderr: String,
    },
    /// The command could not be started.
    #[error("cannot run `{cmd}` ({source}); is iproute2 installed?")]
    Spawn {
        /// The program (`ip` or `tc`).
        cmd: String,
        /// Why.
        source: std::io::Error,
    },
    /// The namespace exists already (another fabric or a leftover).
    #[error("network namespace `{0}` exists already (another fabric runs, or a killed one left it: `weft down` removes weft's leftovers)")]
    Exists(String),
    /// TAP creation failed.
    #[error("cannot create TAP device `{dev}`: {source} (needs root and /dev/net/tun)")]
    Tun {
        /// Device name.
        dev: String,
        /// Cause.
        source: std::io::Error,
    },
}

fn run(args: &[&str]) -> Result<(), TapError> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|source| TapError::Spawn { cmd: args[0].to_string(), source })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TapError::Command { cmd: args.join(" "), stderr: String::from_utf8_lossy(&out.stderr).trim().to_string() })
    }
}

/// Names of the network namespaces that exist.
pub fn list_netns() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// Deletes a network namespace (ignores one that does not exist).
pub fn delete_netns(name: &str) -> Result<(), TapError> {
    if list_netns().iter().any(|n| n == name) {
        run(&["ip", "netns", "del", name])?;
    }
    Ok(())
}

/// Our end of a host's TAP device.
pub struct TapDevice {
    dev: tun_rs::AsyncDevice,
    /// Frames carry a virtio-net header and may be super-frames.
    offload: bool,
    /// The host's counters (the writer counts what it writes here).
    pub counters: Arc<TapCounters>,
}

/// Where a host NIC model ([`run_tap_reader`]) reads the frames a real
/// host sends: a TAP device, or a VM's socket ([`crate::vm::VmNic`]).
pub trait HostFrameSource: Send + Sync + 'static {
    /// The next frame (with a virtio-net header first if [`Self::offload`]).
    fn recv(&self, buf: &mut [u8]) -> impl std::future::Future<Output = std::io::Result<usize>> + Send;
    /// Whether frames carry a virtio-net header and may be super-frames.
    fn offload(&self) -> bool;
}

impl HostFrameSource for TapDevice {
    async fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.dev.recv(buf).await
    }
    fn offload(&self) -> bool {
        self.offload
    }
}

/// A host namespace with its TAP device.
pub struct TapHost {
    /// Namespace (= host name).
    pub netns: String,
    /// Our end of the TAP device.
    pub tun: Arc<TapDevice>,
}

/// Creates the namespace `netns` and its TAP-backed `eth0` configured from
/// `spec`, with segmentation offload if `offload`. Must run inside a tokio
/// runtime.
pub fn create_tap_host(netns: &str, dev: &str, spec: &HostSpec, mtu: u16, rate: BitRate, offload: bool) -> Result<TapHost, TapError> {
    if list_netns().iter().any(|n| n == netns) {
        return Err(TapError::Exists(netns.to_string()));
    }
    run(&["ip", "netns", "add", netns])?;
    // A namespace of the same name deleted a moment ago may still be
    // unmounting: wait until the new one answers.
    for _ in 0..50 {
        if run(&["ip", "-n", netns, "link", "show", "lo"]).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let made = (|| {
        let tun = tun_rs::DeviceBuilder::new()
            .name(dev)
            .layer(tun_rs::Layer::L2)
            .mtu(mtu)
            .offload(offload)
            .build_async()
            .map_err(|source| TapError::Tun { dev: dev.to_string(), source })?;
        let tun = TapDevice { dev: tun, offload, counters: Default::default() };
        let qdisc = host_qdisc(rate, mtu);
        let mac = spec.mac.to_string();
        let mtu = mtu.to_string();
        let addr = format!("{}/{}", spec.ip, spec.prefix_len);
        let gw = spec.gateway.to_string();
        run(&["ip", "link", "set", dev, "netns", netns])?;
        run(&["ip", "-n", netns, "link", "set", dev, "name", "eth0"])?;
        run(&["ip", "-n", netns, "link", "set", "eth0", "address", &mac, "mtu", &mtu])?;
        run(&["ip", "netns", "exec", netns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
        run(&["ip", "netns", "exec", netns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"])?;
        run(&["ip", "-n", netns, "addr", "add", &addr, "dev", "eth0"])?;
        run(&["ip", "-n", netns, "link", "set", "eth0", "up"])?;
        run(&["ip", "-n", netns, "link", "set", "lo", "up"])?;
        run(&["ip", "-n", netns, "route", "add", "default", "via", &gw])?;
        let (rate, burst, limit) = qdisc;
        let (rate, burst, limit) = (format!("{rate}bit"), burst.to_string(), limit.to_string());
        run(&["tc", "-n", netns, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", &rate, "burst", &burst, "limit", &limit])?;
        let gso = host_gso_max_size(qdisc.1).to_string();
        run(&["ip", "-n", netns, "link", "set", "dev", "eth0", "gso_max_size", &gso])?;
        Ok(Arc::new(tun))
    })();
    match made {
        Ok(tun) => Ok(TapHost { netns: netns.to_string(), tun }),
        Err(e) => {
            let _ = delete_netns(netns);
            Err(e)
        }
    }
}

/// The host's qdisc at link `rate` (bits/s, bucket bytes, queue bytes): a
/// token bucket at the link rate whose bucket holds two frames or 1 ms of
/// the rate, and whose queue holds 20 ms of it or 32 frames.
pub fn host_qdisc(rate: BitRate, mtu: u16) -> (u64, u64, u64) {
    let frame = mtu as u64 + 14;
    let per_ms = rate.bps() / 8 / 1000;
    (rate.bps().max(8), (2 * frame).max(per_ms), (32 * frame).max(20 * per_ms))
}

/// The largest GSO packet the host's stack may hand its qdisc: the token
/// bucket (`burst` bytes), at most the kernel's 64 KiB. A GSO packet larger
/// than tbf's bucket is cut into segments inside tbf (`tbf_segment`), and
/// those that find its queue full are dropped *after* TCP counted the
/// packet as sent — a loss TCP must retransmit (measured: 0.5-0.8 % of
/// segments at 10 Mbit/s). A packet that fits is refused whole, which TCP
/// retries locally without a retransmission.
pub fn host_gso_max_size(burst: u64) -> u64 {
    burst.min(65_536)
}

/// Writes frames into TAP devices from a thread of its own.
///
/// Writing a frame into a TAP runs the receiving host's kernel stack (IP,
/// TCP, waking the reader) in the writer's context: about half of the
/// per-frame CPU of a one-hop path. A dedicated thread takes that off the
/// thread that runs the actors and the deadlines. Frames are written in
/// the order they were handed over, per device; with offload, the
/// in-order segments of a flow that wait together are written as one
/// packet (GRO).
#[derive(Clone)]
pub struct TapWriter {
    tx: std::sync::mpsc::Sender<(Arc<TapDevice>, BytesMut)>,
    errors: Arc<AtomicU64>,
}

/// Frames the writer takes from its queue at once.
const WRITE_BATCH: usize = 64;

impl TapWriter {
    /// Starts the writer thread (it ends when every handle is dropped).
    pub fn spawn() -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<(Arc<TapDevice>, BytesMut)>();
        let errors = Arc::new(AtomicU64::new(0));
        let e = errors.clone();
        std::thread::Builder::new().name("weft-tap-writer".into()).spawn(move || {
            let mut batch = Vec::with_capacity(WRITE_BATCH);
            let mut gro = Coalescer::new(65_536);
            while let Ok(first) = rx.recv() {
                batch.push(first);
                while batch.len() < WRITE_BATCH {
                    match rx.try_recv() {
                        Ok(x) => batch.push(x),
                        Err(_) => break,
                    }
                }
                // Per device, in order (a stable sort keeps each device's order).
                batch.sort_by_key(|(d, _)| Arc::as_ptr(d) as usize);
                let mut i = 0;
                while i < batch.len() {
                    let dev = batch[i].0.clone();
                    let mut j = i;
                    while j < batch.len() && Arc::ptr_eq(&batch[j].0, &dev) {
                        j += 1;
                    }
                    let errs = write_frames(&dev, batch[i..j].iter().map(|(_, f)| &f[..]), &mut gro);
                    e.fetch_add(errs, Ordering::Relaxed);
                    i = j;
                }
                batch.clear();
            }
        })?;
        Ok(TapWriter { tx, errors })
    }
    /// Queues `frame` for `tun`.
    pub fn write(&self, tun: &Arc<TapDevice>, frame: BytesMut) {
        let _ = self.tx.send((tun.clone(), frame));
    }
    /// Frames the kernel refused.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// Writes `frames` into `dev` (coalescing them with `gro` when the device
/// has offload); returns the number of failed writes.
fn write_frames<'a>(dev: &TapDevice, frames: impl Iterator<Item = &'a [u8]>, gro: &mut Coalescer) -> u64 {
    let mut errors = 0;
    if !dev.offload {
        for f in frames {
            dev.counters.tx_packets.fetch_add(1, Ordering::Relaxed);
            errors += u64::from(dev.dev.try_send(f).is_err());
        }
        return errors;
    }
    let mut flush = |gro: &mut Coalescer| {
        if let Some((h, buf, segments)) = gro.take() {
            dev.counters.tx_packets.fetch_add(1, Ordering::Relaxed);
            if segments > 1 {
                dev.counters.coalesced_packets.fetch_add(1, Ordering::Relaxed);
                dev.counters.coalesced_segments.fetch_add(segments as u64, Ordering::Relaxed);
            }
            let hdr = h.emit();
            let bufs = [std::io::IoSlice::new(&hdr), std::io::IoSlice::new(&buf)];
            errors += u64::from(dev.dev.try_send_vectored(&bufs).is_err());
        }
    };
    for f in frames {
        if !gro.push(f) {
            flush(gro);
            gro.push(f);
        }
    }
    flush(gro);
    errors
}

/// Live state of the host side of an access link.
#[derive(Debug)]
pub struct TapNic {
    serializer: Serializer,
    up: bool,
    delay: Nanos,
    queue_ns: Nanos,
    /// Random loss of the host -> ToR direction.
    loss: LinkLoss,
}

/// Counters of a [`TapNic`].
#[derive(Debug, Default)]
pub struct TapCounters {
    /// Frames read from the TAP.
    pub rx_frames: AtomicU64,
    /// Frames dropped because the NIC queue was full (only when its rate
    /// drops under a full queue: the reader waits rather than drop).
    pub queue_drops: AtomicU64,
    /// Times the reader stopped reading because the NIC queue was full.
    pub pauses: AtomicU64,
    /// Frames dropped because the link was down.
    pub link_down_drops: AtomicU64,
    /// Super-frames (TSO/USO) read and cut into MTU frames.
    pub super_frames: AtomicU64,
    /// Frames with a virtio-net header that could not be segmented
    /// (dropped).
    pub offload_errors: AtomicU64,
    /// Packets written into the TAP toward the host.
    pub tx_packets: AtomicU64,
    /// Of these, packets that coalesce several in-order segments (GRO),
    /// and the segments in them.
    pub coalesced_packets: AtomicU64,
    /// See `coalesced_packets`.
    pub coalesced_segments: AtomicU64,
    /// Frames toward a VM host dropped because its NIC's receive ring was
    /// full (the guest took no frames).
    pub rx_ring_drops: AtomicU64,
    /// Frames lost at random on the host -> ToR direction (link loss).
    pub loss_drops: AtomicU64,
    /// Frames the edge guard refused, by [`Rejection::index`] (they took
    /// their time on the host's link, then went no further).
    pub rejected: [AtomicU64; Rejection::ALL.len()],
}

impl TapNic {
    /// A NIC at `rate` with `delay` to its ToR, queueing at most `queue_ns`.
    pub fn new(rate: BitRate, delay: Nanos, queue_ns: Nanos) -> Self {
        TapNic { serializer: Serializer::new(rate), up: true, delay, queue_ns, loss: LinkLoss::new(u32::MAX, 0) }
    }
    /// Whether the frame that just departed is lost on the link
    /// ([`LinkChange::Loss`]).
    pub fn lose(&mut self) -> bool {
        self.loss.lose()
    }
    /// When a frame of `len` bytes sent at `now` reaches the ToR, or `None`
    /// if it is dropped.
    pub fn depart(&mut self, now: Nanos, len: usize) -> Option<Nanos> {
        if !self.up || self.serializer.busy_until().saturating_sub(now) > self.queue_ns {
            return None;
        }
        Some(self.serializer.start(now, len) + self.delay)
    }
    /// When a further segment of a super-frame [`TapNic::depart`] took
    /// reaches the ToR: the NIC took the super-frame whole, so only a down
    /// link drops it.
    pub fn depart_segment(&mut self, now: Nanos, len: usize) -> Option<Nanos> {
        self.up.then(|| self.serializer.start(now, len) + self.delay)
    }
    /// Applies a link change.
    pub fn apply(&mut self, now: Nanos, change: LinkChange) {
        match change {
            LinkChange::Down => self.up = false,
            LinkChange::Up => self.up = true,
            LinkChange::Rate(r) => self.serializer.set_rate(now, r),
            LinkChange::Delay(d) => self.delay = d,
            LinkChange::Loss(ppm) => self.loss.set(ppm),
        }
    }
    /// Whether the link is up.
    pub fn is_up(&self) -> bool {
        self.up
    }
    /// When the NIC queue will hold no more than `queue_ns` of frames again,
    /// if it holds more at `now` (the reader waits until then).
    pub fn full_until(&self, now: Nanos) -> Option<Nanos> {
        let until = self.serializer.busy_until().checked_sub(self.queue_ns)?;
        (self.up && until > now).then_some(until)
    }
}

/// Reads frames the host sends (from its TAP or its VM's socket) and
/// delivers them to its ToR's port when due (super-frames cut into MTU
/// frames first). Each frame must pass the host's [`EdgeGuard`]; one that
/// fails still takes its time on the host's link (a flood of garbage is
/// paced like any traffic) and is counted by cause, not delivered.
pub async fn run_tap_reader<S: HostFrameSource>(
    tun: Arc<S>,
    guard: EdgeGuard,
    nic: Arc<Mutex<TapNic>>,
    counters: Arc<TapCounters>,
    tor: InboxSender,
    tor_port: PortId,
    sched: DeadlineScheduler,
) {
    let mut buf = vec![0u8; VNET_HDR_LEN + 65_536];
    // When the NIC queue, full after the last frame, has room again.
    let mut full: Option<Nanos> = None;
    loop {
        // Back-pressure: while the NIC queue is full, leave the frames in
        // the TAP's ring (and the host's qdisc) instead of dropping them.
        if let Some(until) = full.take() {
            counters.pauses.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            sched.at(
                until,
                Box::new(move |_| {
                    let _ = tx.send(());
                }),
            );
            let _ = rx.await;
        }
        let Ok(n) = tun.recv(&mut buf).await else { break };
        let now = sched.now();
        let Ok(mut g) = nic.lock() else { break };
        let up = g.is_up();
        let mut first = true;
        let mut send = |seg: &[u8]| {
            let due = if std::mem::take(&mut first) { g.depart(now, seg.len()) } else { g.depart_segment(now, seg.len()) };
            counters.rx_frames.fetch_add(1, Ordering::Relaxed);
            let Some(due) = due else {
                let c = if up { &counters.queue_drops } else { &counters.link_down_drops };
                c.fetch_add(1, Ordering::Relaxed);
                return;
            };
            if g.lose() {
                counters.loss_drops.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if let Err(why) = guard.check(seg) {
                counters.rejected[why.index()].fetch_add(1, Ordering::Relaxed);
                return;
            }
            let frame = BytesMut::from(seg);
            let tor = tor.clone();
            sched.at(
                due,
                Box::new(move |_| {
                    tor.deliver(tor_port, frame, due);
                }),
            );
        };
        if !tun.offload() {
            send(&buf[..n]);
        } else {
            let (hdr, frame) = buf[..n].split_at_mut(VNET_HDR_LEN.min(n));
            let cut = VnetHdr::parse(hdr).and_then(|h| gso::segment(&h, frame, &mut send));
            match cut {
                Ok(k) if k > 1 => {
                    counters.super_frames.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(_) => {
                    counters.offload_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        full = g.full_until(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nic_paces_at_link_rate_and_bounds_its_queue() {
        let mut nic = TapNic::new(BitRate::gbps(1), 10_000, 110_000);
        // 1500 B at 1 Gbit/s = 12 us; ten frames at once leave back to back.
        let dues: Vec<_> = (0..10).map(|_| nic.depart(0, 1500).unwrap()).collect();
        assert_eq!(dues[0], 12_000 + 10_000);
        assert_eq!(dues[9], 120_000 + 10_000);
        // A frame may wait at most 110 us: the 11th (behind 120 us) is dropped.
        assert_eq!(nic.depart(0, 1500), None);
        nic.apply(200_000, LinkChange::Down);
        assert_eq!(nic.depart(200_000, 1500), None);
    }

    #[test]
    fn a_full_nic_queue_says_until_when_the_reader_waits() {
        let mut nic = TapNic::new(BitRate::mbps(10), 0, 1_000_000);
        // 1500 B at 10 Mbit/s = 1.2 ms: one frame fills the 1 ms queue.
        assert_eq!(nic.full_until(0), None);
        assert_eq!(nic.depart(0, 1500), Some(1_200_000));
        assert_eq!(nic.full_until(0), Some(200_000), "until 1 ms of the frame is left");
        assert_eq!(nic.full_until(200_000), None);
        nic.apply(0, LinkChange::Down);
        assert_eq!(nic.full_until(0), None, "a down link drops, it does not hold");
    }

    #[test]
    fn the_host_qdisc_shapes_at_the_link_rate_with_room_for_two_frames() {
        assert_eq!(host_qdisc(BitRate::mbps(10), 1500), (10_000_000, 3028, 48_448));
        // 1 Gbit/s: 1 ms = 125 kB of bucket, 20 ms = 2.5 MB of queue.
        assert_eq!(host_qdisc(BitRate::gbps(1), 1500), (1_000_000_000, 125_000, 2_500_000));
        // GSO packets fit the bucket: tbf never cuts one up.
        assert_eq!(host_gso_max_size(host_qdisc(BitRate::mbps(10), 1500).1), 3028);
        assert_eq!(host_gso_max_size(host_qdisc(BitRate::mbps(100), 1500).1), 12_500);
        assert_eq!(host_gso_max_size(host_qdisc(BitRate::gbps(1), 1500).1), 65_536);
    }
}
