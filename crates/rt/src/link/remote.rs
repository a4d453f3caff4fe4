//! Links between emu-node processes: sending frames with a
//! [`LinkHeader`] over UDP or QUIC datagrams, and handing received frames
//! to the local actor when they are due. An actor's UDP datagrams wait in a
//! [`UdpBatch`] while it handles one message and leave together (one
//! `sendmmsg`, each run of equal datagrams to one peer as one UDP GSO
//! message that the kernel cuts into the same datagrams, and that a
//! receiver with UDP GRO reads in one call); QUIC datagrams are batched by
//! quinn.
//!
//! Invariants: sequence numbers count per link direction from 0; every
//! datagram carries the tag of the fabric's [`LinkKey`], or its loopback
//! token when the peer is a loopback address ([`super::auth`]); a datagram
//! with a bad header, another fabric tag, a tag or token that does not
//! verify, an unknown link or a sequence number already delivered is
//! counted and dropped, never delivered; a frame is never delivered before
//! its due time.

use super::auth::{LinkKey, Protection, ReplayWindow};
use super::header::{LinkHeader, SequenceTracker};
use crate::clock::{DeadlineScheduler, Lane};
use crate::inbox::InboxSender;
use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use weft_wire::ids::PortId;

/// A frame could not be handed to the transport.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// UDP socket error (e.g. buffer full).
    #[error("udp: {0}")]
    Udp(#[from] std::io::Error),
    /// QUIC datagram error.
    #[error("quic: {0}")]
    Quic(#[from] quinn::SendDatagramError),
}

#[derive(Debug)]
enum Path {
    Udp { socket: Arc<tokio::net::UdpSocket>, peer: SocketAddr },
    Quic(quinn::Connection),
}

#[derive(Debug)]
struct SenderInner {
    seq: AtomicU64,
    fabric: u32,
    key: LinkKey,
    /// Sealed, or the loopback token for a peer on this machine.
    how: Protection,
    path: Path,
}

/// The sending side of one link direction to another process.
#[derive(Debug, Clone)]
pub struct RemoteSender {
    inner: Arc<SenderInner>,
}

impl RemoteSender {
    /// Over UDP from `socket` to `peer`, protected with `key` (sealed, or
    /// the loopback token when `peer` is a loopback address).
    pub fn udp(fabric: u32, key: LinkKey, socket: Arc<tokio::net::UdpSocket>, peer: SocketAddr) -> Self {
        Self::udp_protected(fabric, key, socket, peer, Protection::towards(peer.ip()))
    }
    /// Over UDP as [`RemoteSender::udp`], protected as `how` says (tests
    /// seal datagrams to a loopback address this way).
    pub fn udp_protected(fabric: u32, key: LinkKey, socket: Arc<tokio::net::UdpSocket>, peer: SocketAddr, how: Protection) -> Self {
        RemoteSender { inner: Arc::new(SenderInner { seq: AtomicU64::new(0), fabric, key, how, path: Path::Udp { socket, peer } }) }
    }
    /// Over datagrams of a QUIC connection, protected with `key` as over
    /// UDP (QUIC protects them on the wire, but its server does not
    /// authenticate clients; the tag keeps one check for every path).
    pub fn quic(fabric: u32, key: LinkKey, conn: quinn::Connection) -> Self {
        let how = Protection::towards(conn.remote_address().ip());
        RemoteSender { inner: Arc::new(SenderInner { seq: AtomicU64::new(0), fabric, key, how, path: Path::Quic(conn) }) }
    }
    /// How this sender's datagrams are protected.
    pub fn protection(&self) -> Protection {
        self.inner.how
    }
    /// Sends `frame` with header `h` (fabric tag and sequence filled in);
    /// `buf` is scratch space.
    pub fn send(&self, mut h: LinkHeader, frame: &[u8], buf: &mut Vec<u8>) -> Result<(), SendError> {
        h.fabric = self.inner.fabric;
        h.seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        match &self.inner.path {
            Path::Udp { socket, peer } => {
                h.emit(frame, buf);
                self.inner.key.protect(buf, self.inner.how);
                socket.try_send_to(buf, *peer)?;
            }
            Path::Quic(c) => {
                let mut v = Vec::new();
                h.emit(frame, &mut v);
                self.inner.key.protect(&mut v, self.inner.how);
                c.send_datagram(Bytes::from(v))?;
            }
        }
        Ok(())
    }
}

impl RemoteSender {
    /// Like [`RemoteSender::send`], but a UDP datagram waits in `batch`
    /// until [`UdpBatch::flush`] (QUIC datagrams go at once: quinn batches
    /// them itself). Sequence numbers are taken now, so the order of the
    /// calls is the order on the link.
    pub fn send_batched(&self, mut h: LinkHeader, frame: &[u8], batch: &mut UdpBatch) -> Result<(), SendError> {
        match &self.inner.path {
            Path::Udp { socket, peer } => {
                h.fabric = self.inner.fabric;
                h.seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
                let (key, how) = (&self.inner.key, self.inner.how);
                match batch.push(socket, *peer, |buf| {
                    h.emit(frame, buf);
                    key.protect(buf, how);
                }) {
                    0 => Ok(()),
                    _ => Err(SendError::Udp(std::io::ErrorKind::WouldBlock.into())),
                }
            }
            Path::Quic(_) => {
                let mut scratch = Vec::new();
                self.send(h, frame, &mut scratch)
            }
        }
    }
}

/// UDP datagrams an actor sends while it handles one message, sent
/// together with one `sendmmsg` (Linux) when it is done: a switch that
/// forwards a burst pays one system call for it, not one per frame.
/// Sending a little later does not change what the fabric does: every
/// datagram carries its due time, and the receiver holds it until then.
#[derive(Debug, Default)]
pub struct UdpBatch {
    socket: Option<Arc<tokio::net::UdpSocket>>,
    /// The datagrams, back to back.
    bytes: Vec<u8>,
    /// (end offset in `bytes`, destination) per datagram.
    items: Vec<(usize, socket2::SockAddr)>,
    scratch: Vec<u8>,
}

/// Messages per `sendmmsg` call.
const SEND_BATCH: usize = 64;
/// Datagrams per UDP GSO message (the kernel's limit, `UDP_MAX_SEGMENTS`).
const GSO_SEGMENTS: usize = 64;
/// Bytes per UDP GSO message (a UDP datagram's payload at most).
const GSO_BYTES: usize = 65_000;
/// Set when the kernel refused a UDP GSO message: datagrams go one by one.
static GSO_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl UdpBatch {
    fn push(&mut self, socket: &Arc<tokio::net::UdpSocket>, peer: SocketAddr, emit: impl FnOnce(&mut Vec<u8>)) -> u64 {
        let mut errors = 0;
        if self.socket.as_ref().is_some_and(|s| !Arc::ptr_eq(s, socket)) {
            errors = self.flush();
        }
        self.socket.get_or_insert_with(|| socket.clone());
        emit(&mut self.scratch);
        self.bytes.extend_from_slice(&self.scratch);
        self.items.push((self.bytes.len(), peer.into()));
        errors
    }

    /// Datagrams waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Sends what waits; returns how many datagrams the socket refused
    /// (full buffer), which are dropped as `try_send_to` would drop them.
    pub fn flush(&mut self) -> u64 {
        let Some(socket) = self.socket.take() else { return 0 };
        if let [(end, addr)] = &self.items[..] {
            // One datagram (the usual case at a shaped port): a plain send.
            let refused = addr.as_socket().is_none_or(|a| socket.try_send_to(&self.bytes[..*end], a).is_err());
            self.items.clear();
            self.bytes.clear();
            return u64::from(refused);
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&*socket);
        let gso = !GSO_REFUSED.load(Ordering::Relaxed);
        // Messages: runs of datagrams to one peer of one size (the last may
        // be shorter) go as one UDP GSO message (the kernel cuts it into
        // the datagrams: one pass through the UDP/IP stack instead of one
        // per datagram); the rest one per message.
        let mut msgs: Vec<(usize, usize, usize, usize)> = Vec::new(); // (item index, items, bytes from, segment size)
        let mut from = 0usize;
        let mut i = 0usize;
        while i < self.items.len() {
            let seg = self.items[i].0 - from;
            let mut k = 1;
            let mut end = self.items[i].0;
            while gso && i + k < self.items.len() && k < GSO_SEGMENTS {
                let (e, a) = &self.items[i + k];
                let len = e - end;
                if a != &self.items[i].1 || len > seg || e - from > GSO_BYTES {
                    break;
                }
                end = *e;
                k += 1;
                if len < seg {
                    break;
                }
            }
            msgs.push((i, k, from, seg));
            from = end;
            i += k;
        }
        let mut errors = 0u64;
        for chunk in msgs.chunks(SEND_BATCH) {
            let mut iovs: Vec<libc::iovec> = chunk
                .iter()
                .map(|&(i, k, from, _)| libc::iovec {
                    iov_base: self.bytes[from..self.items[i + k - 1].0].as_ptr() as *mut libc::c_void,
                    iov_len: self.items[i + k - 1].0 - from,
                })
                .collect();
            // One UDP_SEGMENT control message per GSO message.
            let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
            let mut control = vec![0u8; space * chunk.len()];
            // SAFETY: zeroed mmsghdr is a valid "empty" header; every
            // pointer set below refers to `iovs`, `control` or
            // `self.items`, which outlive the call, and the kernel only
            // reads them. Each control buffer is CMSG_SPACE bytes, aligned
            // as the Vec's start plus a multiple of CMSG_SPACE.
            let mut hdrs: Vec<libc::mmsghdr> = chunk
                .iter()
                .zip(iovs.iter_mut())
                .zip(control.chunks_mut(space))
                .map(|((&(i, k, _, seg), iov), ctl)| {
                    let addr = &self.items[i].1;
                    let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                    h.msg_hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
                    h.msg_hdr.msg_namelen = addr.len();
                    h.msg_hdr.msg_iov = iov as *mut libc::iovec;
                    h.msg_hdr.msg_iovlen = 1;
                    if k > 1 {
                        h.msg_hdr.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
                        h.msg_hdr.msg_controllen = space as _;
                        unsafe {
                            let c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                            (*c).cmsg_level = libc::SOL_UDP;
                            (*c).cmsg_type = libc::UDP_SEGMENT;
                            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg as u16);
                        }
                    }
                    h
                })
                .collect();
            let mut sent = 0usize;
            while sent < hdrs.len() {
                // SAFETY: `hdrs[sent..]` are valid, initialised headers (see above).
                let n = unsafe { libc::sendmmsg(fd, hdrs[sent..].as_mut_ptr(), (hdrs.len() - sent) as libc::c_uint, 0) };
                if n > 0 {
                    sent += n as usize;
                    continue;
                }
                let (i, k, _, _) = chunk[sent];
                let err = std::io::Error::last_os_error().raw_os_error();
                if k > 1 && matches!(err, Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT | libc::EOPNOTSUPP)) {
                    // No UDP GSO here (old kernel, a device without
                    // checksum offload): never again, and these one by one.
                    GSO_REFUSED.store(true, Ordering::Relaxed);
                    let mut from = chunk[sent].2;
                    for (end, addr) in &self.items[i..i + k] {
                        errors += u64::from(addr.as_socket().is_none_or(|a| socket.try_send_to(&self.bytes[from..*end], a).is_err()));
                        from = *end;
                    }
                } else {
                    // Buffer full (EAGAIN) or another error: the first
                    // waiting message is refused; try the rest.
                    errors += k as u64;
                }
                sent += 1;
            }
        }
        self.items.clear();
        self.bytes.clear();
        errors
    }
}

/// Where frames of one incoming link direction go.
#[derive(Debug)]
pub struct Inbound {
    /// Inbox of the node owning the receiving port.
    pub inbox: InboxSender,
    /// The port.
    pub port: PortId,
    /// Transport loss/reordering of this direction, and the sequence
    /// numbers delivered (replays refused).
    pub seq: Mutex<(SequenceTracker, ReplayWindow)>,
    /// Frames that arrived after their due time, and by how much in sum.
    pub late: (AtomicU64, AtomicU64),
    /// The underlay's one-way latency (arrival − the header's `sent`):
    /// smallest and sum over the frames received, ns.
    pub transit: (AtomicU64, AtomicU64),
    /// The direction's frames on their way through the scheduler.
    pub lane: Lane,
}

/// Transport health of one link direction (`weft status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportReport {
    /// Link id.
    pub link: u32,
    /// Direction.
    pub dir: u8,
    /// Counters.
    pub seq: SequenceTracker,
    /// Frames that arrived after their due time.
    pub late: u64,
    /// Sum of their lateness, ns.
    pub late_ns: u64,
    /// The underlay's one-way latency, smallest over the frames received
    /// (`u64::MAX`: none yet), ns.
    #[serde(default)]
    pub transit_min_ns: u64,
    /// Its sum over the frames received (`seq.received`), ns.
    #[serde(default)]
    pub transit_sum_ns: u64,
}

impl TransportReport {
    /// The underlay's one-way latency of this direction: (smallest, mean),
    /// ns, once a frame crossed.
    pub fn underlay_ns(&self) -> Option<(u64, u64)> {
        (self.seq.received > 0 && self.transit_min_ns != u64::MAX).then(|| (self.transit_min_ns, self.transit_sum_ns / self.seq.received))
    }
    /// The delay frames of this direction achieved on average, given the
    /// configured one: a frame is held until its due time, or handed on at
    /// once when it arrived later, ns.
    pub fn achieved_delay_ns(&self, configured_ns: u64) -> u64 {
        configured_ns + self.late_ns.checked_div(self.seq.received).unwrap_or(0)
    }
}

/// All incoming link directions of a process.
#[derive(Debug, Default)]
pub struct InboundTable {
    fabric: u32,
    key: Option<LinkKey>,
    map: FxHashMap<(u32, u8), Inbound>,
    /// Datagrams that were not weft link frames.
    pub malformed: AtomicU64,
    /// Datagrams whose tag did not verify (forged, corrupted, or signed
    /// with another fabric's key).
    pub forged: AtomicU64,
    /// Datagrams whose sequence number was delivered before (replayed) or
    /// is older than the replay window.
    pub replayed: AtomicU64,
    /// Datagrams of another fabric.
    pub foreign: AtomicU64,
    /// Datagrams for a link this process does not hold.
    pub unknown_link: AtomicU64,
    /// Frames that arrived after their due time (transport too slow).
    pub late: AtomicU64,
}

impl InboundTable {
    /// An empty table for fabric tag `fabric`, checking tags with `key`.
    pub fn new(fabric: u32, key: LinkKey) -> Self {
        InboundTable { fabric, key: Some(key), ..Default::default() }
    }
    /// Registers an incoming direction.
    pub fn insert(&mut self, link: u32, dir: u8, inbox: InboxSender, port: PortId) {
        let transit = (AtomicU64::new(u64::MAX), AtomicU64::new(0));
        self.map
            .insert((link, dir), Inbound { inbox, port, seq: Mutex::default(), late: Default::default(), transit, lane: Lane::default() });
    }
    /// Handles one received datagram: header, fabric tag, the seal (opened
    /// in place), link, replay, then delivery when due.
    pub fn deliver(&self, sched: &DeadlineScheduler, datagram: &mut [u8]) {
        let Ok((h, _)) = LinkHeader::parse(datagram) else {
            self.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if h.fabric != self.fabric {
            self.foreign.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(body) = self.key.as_ref().and_then(|k| k.open(datagram)) else {
            self.forged.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Ok((h, frame)) = LinkHeader::parse(body) else {
            self.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(inb) = self.map.get(&(h.link, h.dir)) else {
            self.unknown_link.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if let Ok(mut s) = inb.seq.lock() {
            if !s.1.accept(h.seq) {
                drop(s);
                self.replayed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            s.0.observe(h.seq);
        }
        let (inbox, port, due) = (inb.inbox.clone(), inb.port, h.due);
        let frame = BytesMut::from(frame);
        let now = sched.now();
        // Clocks are synchronised within the offset estimate's uncertainty:
        // a frame seemingly received before it was sent counts as 0.
        let transit = now.saturating_sub(h.sent);
        inb.transit.0.fetch_min(transit, Ordering::Relaxed);
        inb.transit.1.fetch_add(transit, Ordering::Relaxed);
        if due <= now {
            self.late.fetch_add(1, Ordering::Relaxed);
            inb.late.0.fetch_add(1, Ordering::Relaxed);
            inb.late.1.fetch_add(now - due, Ordering::Relaxed);
        }
        // Held until due; a late frame goes to its node at once unless an
        // earlier one of its direction is still held (it must not overtake).
        sched.in_lane(&inb.lane, due, now, move |_| inbox.deliver(port, frame, due));
    }
    /// Datagrams refused, by cause: `malformed`, `foreign` (another
    /// fabric's tag), `forged` (tag does not verify), `replayed`,
    /// `unknown_link`.
    pub fn rejected(&self) -> [(&'static str, u64); 5] {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("malformed", l(&self.malformed)),
            ("foreign", l(&self.foreign)),
            ("forged", l(&self.forged)),
            ("replayed", l(&self.replayed)),
            ("unknown_link", l(&self.unknown_link)),
        ]
    }
    /// Per-direction transport counters.
    pub fn report(&self) -> Vec<TransportReport> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .map(|(&(link, dir), i)| TransportReport {
                link,
                dir,
                seq: i.seq.lock().map(|s| s.0).unwrap_or_default(),
                late: i.late.0.load(Ordering::Relaxed),
                late_ns: i.late.1.load(Ordering::Relaxed),
                transit_min_ns: i.transit.0.load(Ordering::Relaxed),
                transit_sum_ns: i.transit.1.load(Ordering::Relaxed),
            })
            .collect();
        v.sort_by_key(|r| (r.link, r.dir));
        v
    }
}

static TEST_UNDERLAY_NS: AtomicU64 = AtomicU64::new(0);

/// For tests of the underlay measurement only: every link datagram this
/// process receives is handed over `ns` later, as a slower network would
/// (where the kernel has no `netem` qdisc to delay the test machines'
/// network). emu-node sets it from `WEFT_TEST_UNDERLAY_DELAY_NS`.
pub fn set_test_underlay_delay(ns: u64) {
    TEST_UNDERLAY_NS.store(ns, Ordering::Relaxed);
}

/// Hands a received datagram to `table`, after the test-only underlay
/// delay when one is set.
fn receive(table: &Arc<InboundTable>, sched: &DeadlineScheduler, datagram: &mut [u8]) {
    let extra = TEST_UNDERLAY_NS.load(Ordering::Relaxed);
    if extra == 0 {
        table.deliver(sched, datagram);
        return;
    }
    let (table, s, mut d) = (table.clone(), sched.clone(), datagram.to_vec());
    sched.at(sched.now() + extra, Box::new(move |_| table.deliver(&s, &mut d)));
}

/// Receives datagrams on a UDP socket until it fails.
///
/// With UDP GRO (Linux 5.0 and later) the kernel hands a run of equal
/// datagrams from one sender (a GSO message of [`UdpBatch`]) over in one
/// read, with their size: one pass through the stack instead of one per
/// datagram; each is then opened and delivered on its own, as if read alone.
pub async fn run_udp_receiver(socket: Arc<tokio::net::UdpSocket>, table: Arc<InboundTable>, sched: DeadlineScheduler) {
    let mut buf = vec![0u8; 65536];
    let fd = std::os::fd::AsRawFd::as_raw_fd(&*socket);
    if !enable_udp_gro(fd) {
        while let Ok((n, _)) = socket.recv_from(&mut buf).await {
            receive(&table, &sched, &mut buf[..n]);
        }
        return;
    }
    while let Ok((n, segment)) = socket.async_io(tokio::io::Interest::READABLE, || recv_segments(fd, &mut buf)).await {
        if segment == 0 || segment >= n {
            receive(&table, &sched, &mut buf[..n]);
        } else {
            for d in buf[..n].chunks_mut(segment) {
                receive(&table, &sched, d);
            }
        }
    }
}

/// Asks the kernel to coalesce runs of datagrams for the socket `fd` (UDP
/// GRO); whether it agreed.
fn enable_udp_gro(fd: std::os::fd::RawFd) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: a socket descriptor and a c_int option value that outlives the call.
    unsafe {
        libc::setsockopt(fd, libc::SOL_UDP, libc::UDP_GRO, (&on as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as u32)
            == 0
    }
}

/// One `recvmsg` into `buf`: the bytes read and the size of the datagrams
/// they hold (UDP GRO's control message; 0 when it is one datagram).
fn recv_segments(fd: std::os::fd::RawFd, buf: &mut [u8]) -> std::io::Result<(usize, usize)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // Room for a few control messages, aligned as `cmsghdr` needs.
    let mut control = [0u64; 16];
    // SAFETY: zeroed msghdr is valid; its pointers refer to `iov`, `buf` and
    // `control`, which outlive the call; the kernel writes at most
    // `msg_controllen` bytes of control messages, read back below through
    // the CMSG macros within that length.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = libc::recvmsg(fd, &mut msg, 0);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut segment = 0usize;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                segment = if (*c).cmsg_len as usize >= libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize {
                    std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int).max(0) as usize
                } else {
                    std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const u16) as usize
                };
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        Ok((n as usize, segment))
    }
}

/// Receives datagrams on a QUIC connection until it closes.
pub async fn run_quic_receiver(conn: quinn::Connection, table: Arc<InboundTable>, sched: DeadlineScheduler) {
    while let Ok(d) = conn.read_datagram().await {
        // quinn's datagrams are shared buffers: opened in a copy.
        receive(&table, &sched, &mut d.to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_sends_every_datagram_in_order_with_one_flush() {
        let rx = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let tx = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let key = LinkKey::new(&crate::link::auth::LinkSecret([3; 32]));
        let sender = RemoteSender::udp(7, key.clone(), tx.clone(), rx.local_addr().unwrap());
        let mut batch = UdpBatch::default();
        // More than one sendmmsg call's worth, of different sizes.
        let frames: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 60 + i as usize]).collect();
        for f in &frames {
            let h = LinkHeader { dir: 1, fabric: 0, link: 3, seq: 0, due: 1000, sent: 0 };
            sender.send_batched(h, f, &mut batch).unwrap();
        }
        assert_eq!(batch.len(), 100);
        assert_eq!(batch.flush(), 0);
        assert!(batch.is_empty());
        let mut buf = vec![0u8; 2048];
        for (i, f) in frames.iter().enumerate() {
            let n = rx.recv(&mut buf).await.unwrap();
            let (h, frame) = LinkHeader::parse(key.open(&mut buf[..n]).unwrap()).unwrap();
            assert_eq!((h.fabric, h.link, h.dir, h.seq), (7, 3, 1, i as u64));
            assert_eq!(frame, &f[..]);
        }
        // A lone datagram takes the plain path.
        sender.send_batched(LinkHeader { dir: 0, fabric: 0, link: 1, seq: 0, due: 5, sent: 0 }, &[9u8; 64], &mut batch).unwrap();
        assert_eq!(batch.flush(), 0);
        let n = rx.recv(&mut buf).await.unwrap();
        assert_eq!(LinkHeader::parse(key.open(&mut buf[..n]).unwrap()).unwrap().1, &[9u8; 64][..]);
    }

    /// Runs of equal datagrams go as UDP GSO messages (64 at most, the
    /// last of a run may be shorter); the receiver gets every datagram, in
    /// order, as if each had been sent alone.
    #[tokio::test]
    async fn runs_of_equal_datagrams_arrive_one_by_one_in_order() {
        let rx = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket2::SockRef::from(&rx).set_recv_buffer_size(4 << 20).unwrap();
        let tx = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let key = LinkKey::new(&crate::link::auth::LinkSecret([5; 32]));
        let sender = RemoteSender::udp(2, key.clone(), tx.clone(), rx.local_addr().unwrap());
        let mut batch = UdpBatch::default();
        let sizes = std::iter::repeat_n(1400, 100).chain([700]).chain(std::iter::repeat_n(1400, 20)).chain(std::iter::repeat_n(100, 5));
        let frames: Vec<Vec<u8>> = sizes.enumerate().map(|(i, n)| vec![i as u8; n]).collect();
        for f in &frames {
            sender.send_batched(LinkHeader { dir: 0, fabric: 0, link: 4, seq: 0, due: 1, sent: 0 }, f, &mut batch).unwrap();
        }
        assert_eq!(batch.flush(), 0);
        assert!(!GSO_REFUSED.load(Ordering::Relaxed), "this kernel refused UDP GSO (Linux 4.18 or later has it)");
        let mut buf = vec![0u8; 65536];
        for (i, f) in frames.iter().enumerate() {
            let n = rx.recv(&mut buf).await.unwrap();
            let (h, frame) = LinkHeader::parse(key.open(&mut buf[..n]).unwrap()).unwrap();
            assert_eq!(h.seq, i as u64);
            assert_eq!(frame, &f[..], "datagram {i}");
        }
    }

    /// With UDP GRO on, a run of equal datagrams can arrive in one read:
    /// `recv_segments` says the size, and cutting by it gives the datagrams.
    #[tokio::test]
    async fn a_gro_read_is_cut_into_the_datagrams_that_were_sent() {
        let rx = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&rx);
        assert!(enable_udp_gro(fd), "UDP_GRO (Linux 5.0 or later)");
        let tx = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let key = LinkKey::new(&crate::link::auth::LinkSecret([6; 32]));
        let sender = RemoteSender::udp(2, key.clone(), tx.clone(), rx.local_addr().unwrap());
        let mut batch = UdpBatch::default();
        let frames: Vec<Vec<u8>> = (0..30).map(|i| vec![i as u8; if i == 29 { 300 } else { 1200 }]).collect();
        for f in &frames {
            sender.send_batched(LinkHeader { dir: 0, fabric: 0, link: 4, seq: 0, due: 1, sent: 0 }, f, &mut batch).unwrap();
        }
        assert_eq!(batch.flush(), 0);
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        while got.len() < frames.len() {
            let (n, seg) = rx.async_io(tokio::io::Interest::READABLE, || recv_segments(fd, &mut buf)).await.unwrap();
            let seg = if seg == 0 { n } else { seg };
            for d in buf[..n].chunks_mut(seg) {
                let (h, frame) = LinkHeader::parse(key.open(d).unwrap()).unwrap();
                got.push((h.seq, frame.to_vec()));
            }
        }
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(got[i], (i as u64, f.clone()), "datagram {i}");
        }
    }

    /// A UDP link receiver of fabric 9 for link 4, direction 0, on a
    /// loopback socket, delivering to port 2 of `inbox`.
    struct TestReceiver {
        table: Arc<InboundTable>,
        inbox: Arc<crate::inbox::Inbox>,
        to: SocketAddr,
        task: tokio::task::JoinHandle<()>,
        _sched: crate::clock::SchedulerTask,
    }

    impl TestReceiver {
        async fn start(key: &LinkKey) -> Self {
            use crate::clock::{FabricClock, SchedulerTask};
            let sched = SchedulerTask::start(FabricClock::starting_now(), std::time::Duration::ZERO).unwrap();
            let inbox = Arc::new(crate::inbox::Inbox::default());
            let mut table = InboundTable::new(9, key.clone());
            table.insert(4, 0, InboxSender::new(inbox.clone(), Arc::new(|| {})), PortId(2));
            let table = Arc::new(table);
            let rx = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
            let to = rx.local_addr().unwrap();
            let task = tokio::spawn(run_udp_receiver(rx, table.clone(), sched.scheduler()));
            TestReceiver { table, inbox, to, task, _sched: sched }
        }

        /// The refusals by cause, once `n` were counted (or 5 s passed).
        async fn rejected(&self, n: u64) -> std::collections::BTreeMap<&'static str, u64> {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let counts = || self.table.rejected().into_iter().collect::<std::collections::BTreeMap<_, _>>();
            while counts().values().sum::<u64>() < n && std::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            counts()
        }

        /// How many frames reached port 2, each checked to be `frame`.
        async fn delivered(&self, frame: &[u8]) -> usize {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let mut delivered = 0;
            while let Some((port, f, _)) = self.inbox.pop() {
                assert_eq!((port, &f[..]), (PortId(2), frame));
                delivered += 1;
            }
            self.task.abort();
            delivered
        }
    }

    /// A datagram with the fabric's tag but a forged MAC, one
    /// signed with another fabric's key, a captured one sent again and a
    /// truncated one are refused and counted by cause; the genuine ones
    /// arrive once each.
    #[tokio::test]
    async fn forged_replayed_and_foreign_key_datagrams_are_refused_and_counted() {
        use crate::link::auth::LinkSecret;
        use crate::link::header::HEADER_LEN;
        let key = LinkKey::new(&LinkSecret([5; 32]));
        let r = TestReceiver::start(&key).await;
        let to = r.to;
        // A genuine sender, and a tap on the wire: the attacker's socket
        // gets a copy of each genuine datagram to replay. Sealed, as on a
        // network (to a loopback address a sender would use the token).
        let tap = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let tx = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let genuine = RemoteSender::udp_protected(9, key.clone(), tx.clone(), to, Protection::Sealed);
        let copy = RemoteSender::udp_protected(9, key.clone(), tx.clone(), tap.local_addr().unwrap(), Protection::Sealed);
        let frame = [0xabu8; 60];
        let h = LinkHeader { dir: 0, fabric: 0, link: 4, seq: 0, due: 0, sent: 0 };
        let mut scratch = Vec::new();
        for _ in 0..3 {
            tx.writable().await.unwrap();
            genuine.send(h, &frame, &mut scratch).unwrap();
            tx.writable().await.unwrap();
            copy.send(h, &frame, &mut scratch).unwrap();
        }
        let attacker = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut captured = vec![0u8; 2048];
        let n = tap.recv(&mut captured).await.unwrap();
        captured.truncate(n);
        attacker.send_to(&captured, to).await.unwrap(); // replayed (seq 0)
        let mut forged = captured.clone();
        forged[HEADER_LEN + 5] ^= 1; // a frame byte changed, tag kept
        attacker.send_to(&forged, to).await.unwrap();
        let mut seq_bumped = captured.clone();
        seq_bumped[19] = 77; // a fresh sequence number, tag kept
        attacker.send_to(&seq_bumped, to).await.unwrap();
        let mut other = Vec::new();
        LinkHeader { dir: 0, fabric: 9, link: 4, seq: 50, due: 0, sent: 0 }.emit(&frame, &mut other);
        LinkKey::new(&LinkSecret([6; 32])).seal(&mut other);
        attacker.send_to(&other, to).await.unwrap(); // another fabric's key
        attacker.send_to(&captured[..HEADER_LEN + 3], to).await.unwrap(); // truncated
        let c = r.rejected(5).await;
        assert_eq!((c["replayed"], c["forged"], c["malformed"]), (1, 3, 1), "{c:?}");
        assert_eq!(r.delivered(&frame).await, 3, "each genuine frame once");
        assert_eq!(r.table.report()[0].seq.received, 3);
    }

    /// Over loopback the datagrams carry the fabric's loopback token
    /// instead of a seal; one without it, with another fabric's token or
    /// sealed under another key is refused as forged, and the genuine ones
    /// arrive once each, their frames unchanged.
    #[tokio::test]
    async fn loopback_datagrams_without_the_token_are_refused_and_counted() {
        use crate::link::auth::{LinkSecret, LOOPBACK_FLAG, TAG_LEN};
        let key = LinkKey::new(&LinkSecret([5; 32]));
        let r = TestReceiver::start(&key).await;
        let to = r.to;
        let tx = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let genuine = RemoteSender::udp(9, key.clone(), tx.clone(), to);
        assert_eq!(genuine.protection(), Protection::Loopback);
        let frame = [0xabu8; 60];
        let mut scratch = Vec::new();
        for _ in 0..3 {
            tx.writable().await.unwrap();
            genuine.send(LinkHeader { dir: 0, fabric: 0, link: 4, seq: 0, due: 0, sent: 0 }, &frame, &mut scratch).unwrap();
        }
        let attacker = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let datagram = |dir: u8, seq: u64| {
            let mut d = Vec::new();
            LinkHeader { dir, fabric: 9, link: 4, seq, due: 0, sent: 0 }.emit(&frame, &mut d);
            d
        };
        let mut other_token = datagram(0, 50);
        LinkKey::new(&LinkSecret([6; 32])).protect(&mut other_token, Protection::Loopback);
        attacker.send_to(&other_token, to).await.unwrap();
        let mut other_seal = datagram(0, 51);
        LinkKey::new(&LinkSecret([6; 32])).protect(&mut other_seal, Protection::Sealed);
        attacker.send_to(&other_seal, to).await.unwrap();
        let mut guessed = datagram(LOOPBACK_FLAG, 52);
        guessed.extend_from_slice(&[0u8; TAG_LEN]);
        attacker.send_to(&guessed, to).await.unwrap();
        attacker.send_to(&datagram(0, 53), to).await.unwrap(); // neither tag nor token
        let c = r.rejected(4).await;
        assert_eq!((c["forged"], c["replayed"], c["malformed"]), (4, 0, 0), "{c:?}");
        assert_eq!(r.delivered(&frame).await, 3, "each genuine frame once");
    }
}
