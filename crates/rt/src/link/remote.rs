//! Links between emu-node processes: sending frames with a
//! [`LinkHeader`] over UDP or QUIC datagrams, and handing received frames
//! to the local actor when they are due.
//!
//! Invariants: sequence numbers count per link direction from 0; a
//! datagram with another fabric tag, a bad header or an unknown link is
//! counted and dropped, never delivered; a frame is never delivered before
//! its due time.

use super::header::{LinkHeader, SequenceTracker};
use crate::clock::DeadlineScheduler;
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
    path: Path,
}

/// The sending side of one link direction to another process.
#[derive(Debug, Clone)]
pub struct RemoteSender {
    inner: Arc<SenderInner>,
}

impl RemoteSender {
    /// Over UDP from `socket` to `peer`.
    pub fn udp(fabric: u32, socket: Arc<tokio::net::UdpSocket>, peer: SocketAddr) -> Self {
        RemoteSender { inner: Arc::new(SenderInner { seq: AtomicU64::new(0), fabric, path: Path::Udp { socket, peer } }) }
    }
    /// Over datagrams of a QUIC connection.
    pub fn quic(fabric: u32, conn: quinn::Connection) -> Self {
        RemoteSender { inner: Arc::new(SenderInner { seq: AtomicU64::new(0), fabric, path: Path::Quic(conn) }) }
    }
    /// Sends `frame` with header `h` (fabric tag and sequence filled in);
    /// `buf` is scratch space.
    pub fn send(&self, mut h: LinkHeader, frame: &[u8], buf: &mut Vec<u8>) -> Result<(), SendError> {
        h.fabric = self.inner.fabric;
        h.seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        match &self.inner.path {
            Path::Udp { socket, peer } => {
                h.emit(frame, buf);
                socket.try_send_to(buf, *peer)?;
            }
            Path::Quic(c) => {
                let mut v = Vec::new();
                h.emit(frame, &mut v);
                c.send_datagram(Bytes::from(v))?;
            }
        }
        Ok(())
    }
}

/// Where frames of one incoming link direction go.
#[derive(Debug)]
pub struct Inbound {
    /// Inbox of the node owning the receiving port.
    pub inbox: InboxSender,
    /// The port.
    pub port: PortId,
    /// Transport loss/reordering of this direction.
    pub seq: Mutex<SequenceTracker>,
    /// Frames that arrived after their due time, and by how much in sum.
    pub late: (AtomicU64, AtomicU64),
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
}

/// All incoming link directions of a process.
#[derive(Debug, Default)]
pub struct InboundTable {
    fabric: u32,
    map: FxHashMap<(u32, u8), Inbound>,
    /// Datagrams that were not weft link frames.
    pub malformed: AtomicU64,
    /// Datagrams of another fabric.
    pub foreign: AtomicU64,
    /// Datagrams for a link this process does not hold.
    pub unknown_link: AtomicU64,
    /// Frames that arrived after their due time (transport too slow).
    pub late: AtomicU64,
}

impl InboundTable {
    /// An empty table for fabric tag `fabric`.
    pub fn new(fabric: u32) -> Self {
        InboundTable { fabric, ..Default::default() }
    }
    /// Registers an incoming direction.
    pub fn insert(&mut self, link: u32, dir: u8, inbox: InboxSender, port: PortId) {
        self.map.insert((link, dir), Inbound { inbox, port, seq: Mutex::new(SequenceTracker::default()), late: Default::default() });
    }
    /// Handles one received datagram.
    pub fn deliver(&self, sched: &DeadlineScheduler, datagram: &[u8]) {
        let Ok((h, frame)) = LinkHeader::parse(datagram) else {
            self.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if h.fabric != self.fabric {
            self.foreign.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(inb) = self.map.get(&(h.link, h.dir)) else {
            self.unknown_link.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if let Ok(mut s) = inb.seq.lock() {
            s.observe(h.seq);
        }
        let (inbox, port, due) = (inb.inbox.clone(), inb.port, h.due);
        let frame = BytesMut::from(frame);
        let now = sched.now();
        if due <= now {
            self.late.fetch_add(1, Ordering::Relaxed);
            inb.late.0.fetch_add(1, Ordering::Relaxed);
            inb.late.1.fetch_add(now - due, Ordering::Relaxed);
        }
        // Through the scheduler even when late: it orders by due time, so
        // an earlier frame still held there is not overtaken.
        sched.at(
            due,
            Box::new(move |_| {
                inbox.deliver(port, frame, due);
            }),
        );
    }
    /// Per-direction transport counters.
    pub fn report(&self) -> Vec<TransportReport> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .map(|(&(link, dir), i)| TransportReport {
                link,
                dir,
                seq: i.seq.lock().map(|s| *s).unwrap_or_default(),
                late: i.late.0.load(Ordering::Relaxed),
                late_ns: i.late.1.load(Ordering::Relaxed),
            })
            .collect();
        v.sort_by_key(|r| (r.link, r.dir));
        v
    }
}

/// Receives datagrams on a UDP socket until it fails.
pub async fn run_udp_receiver(socket: Arc<tokio::net::UdpSocket>, table: Arc<InboundTable>, sched: DeadlineScheduler) {
    let mut buf = vec![0u8; 65536];
    while let Ok((n, _)) = socket.recv_from(&mut buf).await {
        table.deliver(&sched, &buf[..n]);
    }
}

/// Receives datagrams on a QUIC connection until it closes.
pub async fn run_quic_receiver(conn: quinn::Connection, table: Arc<InboundTable>, sched: DeadlineScheduler) {
    while let Ok(d) = conn.read_datagram().await {
        table.deliver(&sched, &d);
    }
}
