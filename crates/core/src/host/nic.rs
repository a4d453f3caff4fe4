//! The network interface every synthetic host has: one port with a line-rate
//! serializer, ARP for the default gateway (retried after 100 µs, then
//! after twice as long each time up to Linux's 1 s), answers
//! to ARP for its own address, 802.1Qbb pause state per priority, and a
//! queue of control frames (ARP, ACK, NAK, CNP) that go out before data.
//!
//! No clock and no I/O: times are passed in; frames go to the caller's
//! output buffer.

use crate::fabric::NodeSpec;
use crate::serializer::Serializer;
use crate::transmit::Transmit;
use bytes::BytesMut;
use serde::Serialize;
use std::collections::VecDeque;
use weft_wire::frame::{FrameInfo, FrameKind};
use weft_wire::ids::PortId;
use weft_wire::time::{BitRate, Nanos, MICROS};
use weft_wire::{arp, ethernet, pfc, EtherType, EthernetAddress, Ipv4Address};

const ARP_RETRY: Nanos = 100 * MICROS;
/// The longest wait between ARP requests (Linux's `retrans_time`).
const ARP_RETRY_MAX: Nanos = 1_000_000 * MICROS;

/// How long after the `attempt`-th unanswered request (1-based) the next
/// one goes: 100 µs, 200 µs, 400 µs ... 1 s. A gateway slower than 100 µs
/// to answer (a software switch's pipeline, slow links) then sees a few
/// requests, not one every 100 µs queued in front of the data.
fn arp_retry_after(attempt: u32) -> Nanos {
    (ARP_RETRY << attempt.saturating_sub(1).min(14)).min(ARP_RETRY_MAX)
}

/// Host counters.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct HostCounters {
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent (frames).
    pub tx_bytes: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Malformed frames received.
    pub rx_malformed: u64,
    /// Frames not for this host.
    pub rx_ignored: u64,
    /// PFC frames received.
    pub pfc_received: u64,
    /// ARP requests sent.
    pub arp_requests: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arp {
    Unresolved,
    /// The last request's time and how many were sent.
    Requested(Nanos, u32),
    Resolved(EthernetAddress),
}

/// Why a host node could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The node is not a host or has no link.
    #[error("node `{0}` is not a host with one link")]
    NotAHost(String),
}

/// A host's network interface.
#[derive(Debug)]
pub struct Nic {
    /// Address.
    pub ip: Ipv4Address,
    /// MAC.
    pub mac: EthernetAddress,
    /// Default gateway.
    pub gateway: Ipv4Address,
    /// MTU (IP bytes).
    pub mtu: u16,
    arp: Arp,
    serializer: Serializer,
    pfc_paused_until: [Nanos; 8],
    control: VecDeque<BytesMut>,
    /// Routed control frames waiting for the gateway's MAC.
    awaiting_arp: VecDeque<BytesMut>,
    /// Counters.
    pub counters: HostCounters,
    /// The PFC frames received, when a driver asked.
    pub pfc_log: crate::pfc_log::PfcLog,
    /// Buffers of frames received and handled, for the frames sent next.
    pub frames: weft_wire::buffer::FramePool,
    /// Wire time of the control frames it sends, when not their length.
    pub control_frame_bytes: weft_wire::frame::ControlFrameBytes,
}

impl Nic {
    /// The interface of host node `node`.
    pub fn from_spec(node: &NodeSpec) -> Result<Nic, HostError> {
        let h = node.as_host().ok_or_else(|| HostError::NotAHost(node.name.clone()))?;
        let port = node.ports.first().ok_or_else(|| HostError::NotAHost(node.name.clone()))?;
        Ok(Nic {
            ip: h.ip,
            mac: h.mac,
            gateway: h.gateway,
            mtu: port.mtu,
            arp: Arp::Unresolved,
            serializer: Serializer::new(port.rate),
            pfc_paused_until: [0; 8],
            control: VecDeque::new(),
            awaiting_arp: VecDeque::new(),
            counters: HostCounters::default(),
            pfc_log: Default::default(),
            frames: Default::default(),
            control_frame_bytes: Default::default(),
        })
    }

    /// Starts with the gateway's MAC known: the MAC of the switch port at
    /// the other end of the host's link, the gateway's own (a fabric's
    /// hosts hang off their leaf). For calibration against simulators that
    /// have no ARP (the ConWeave authors' ns-3): otherwise each host's first
    /// frame waits one round trip to its leaf.
    pub fn resolve_gateway_statically(&mut self, node: &NodeSpec) {
        if let Some(port) = node.ports.first() {
            self.arp = Arp::Resolved(port.peer_mac);
        }
    }

    /// Line rate.
    pub fn rate(&self) -> BitRate {
        self.serializer.rate()
    }
    /// Changes the line rate (link degraded/restored).
    pub fn set_rate(&mut self, now: Nanos, rate: BitRate) {
        self.serializer.set_rate(now, rate);
    }
    /// Whether a frame is on the wire.
    pub fn is_busy(&self, now: Nanos) -> bool {
        self.serializer.is_busy(now)
    }
    /// When the frame on the wire ends.
    pub fn busy_until(&self) -> Nanos {
        self.serializer.busy_until()
    }
    /// Until when priority `class` is paused by the switch (≤ now: not paused).
    pub fn paused_until(&self, class: u8) -> Nanos {
        self.pfc_paused_until[(class & 7) as usize]
    }
    /// Queues a control frame (sent before data).
    pub fn push_control(&mut self, f: BytesMut) {
        self.control.push_back(f);
    }
    /// Queues a routed control frame (ACK, NAK, CNP) for the gateway: its
    /// destination MAC is filled in now, or once ARP has resolved it.
    pub fn push_routed(&mut self, now: Nanos, mut f: BytesMut) {
        match self.gateway_mac(now) {
            Some(gw) => {
                f[0..6].copy_from_slice(&gw.0);
                self.control.push_back(f);
            }
            None => self.awaiting_arp.push_back(f),
        }
    }

    /// Whether control frames wait.
    pub fn has_control(&self) -> bool {
        !self.control.is_empty()
    }

    /// Handles ARP and PFC frames; returns `true` if the frame was one.
    pub fn handle_control(&mut self, now: Nanos, info: &FrameInfo, frame: &[u8]) -> bool {
        match info.kind {
            FrameKind::Pfc => {
                self.counters.pfc_received += 1;
                if let Some(r) = info.pfc(frame) {
                    self.pfc_log.record(now, PortId(0), r.class_enable, &r.quanta);
                    for c in 0..8 {
                        if r.class_enable & (1 << c) != 0 {
                            let q = r.quanta[c];
                            self.pfc_paused_until[c] = if q == 0 { 0 } else { now + pfc::quanta_to_ns(q, self.serializer.rate()) };
                        }
                    }
                }
                true
            }
            FrameKind::Arp => {
                let Ok(p) = arp::Packet::new_checked(&frame[info.l3_offset as usize..]) else {
                    self.counters.rx_malformed += 1;
                    return true;
                };
                let r = arp::Repr::parse(&p);
                match r.operation {
                    arp::Operation::Reply if r.sender_ip == self.gateway => {
                        self.arp = Arp::Resolved(r.sender_hw);
                        while let Some(mut f) = self.awaiting_arp.pop_front() {
                            f[0..6].copy_from_slice(&r.sender_hw.0);
                            self.control.push_back(f);
                        }
                    }
                    arp::Operation::Request if r.target_ip == self.ip => {
                        let mut f = BytesMut::zeroed(ethernet::HEADER_LEN + arp::PACKET_LEN);
                        ethernet::Repr { dst: r.sender_hw, src: self.mac, vlan_tci: None, ethertype: EtherType::Arp }.emit(&mut f);
                        arp::Repr {
                            operation: arp::Operation::Reply,
                            sender_hw: self.mac,
                            sender_ip: self.ip,
                            target_hw: r.sender_hw,
                            target_ip: r.sender_ip,
                        }
                        .emit(&mut f[ethernet::HEADER_LEN..]);
                        self.control.push_back(f);
                    }
                    _ => {}
                }
                true
            }
            _ => false,
        }
    }

    /// The gateway's MAC, or `None` while ARP is in progress (a request is
    /// queued when needed).
    pub fn gateway_mac(&mut self, now: Nanos) -> Option<EthernetAddress> {
        match self.arp {
            Arp::Resolved(m) => Some(m),
            Arp::Requested(at, n) if now < at + arp_retry_after(n) => None,
            _ => {
                let n = if let Arp::Requested(_, n) = self.arp { n + 1 } else { 1 };
                self.arp = Arp::Requested(now, n);
                self.counters.arp_requests += 1;
                let mut f = BytesMut::zeroed(ethernet::HEADER_LEN + arp::PACKET_LEN);
                ethernet::Repr { dst: EthernetAddress::BROADCAST, src: self.mac, vlan_tci: None, ethertype: EtherType::Arp }.emit(&mut f);
                arp::Repr {
                    operation: arp::Operation::Request,
                    sender_hw: self.mac,
                    sender_ip: self.ip,
                    target_hw: EthernetAddress::default(),
                    target_ip: self.gateway,
                }
                .emit(&mut f[ethernet::HEADER_LEN..]);
                self.control.push_back(f);
                None
            }
        }
    }

    /// When an unanswered ARP request should be retried.
    pub fn arp_retry_at(&self) -> Option<Nanos> {
        match self.arp {
            Arp::Requested(at, n) => Some(at + arp_retry_after(n)),
            _ => None,
        }
    }

    /// Sends the next control frame if the wire is free; returns whether it did.
    pub fn send_control(&mut self, now: Nanos, out: &mut Vec<Transmit>) -> bool {
        if self.is_busy(now) {
            return false;
        }
        match self.control.pop_front() {
            Some(f) => {
                self.transmit(now, f, out);
                true
            }
            None => false,
        }
    }

    /// Puts `frame` on the wire at `now` (the wire must be free).
    pub fn transmit(&mut self, now: Nanos, frame: BytesMut, out: &mut Vec<Transmit>) {
        let end = self.serializer.start(now, self.control_frame_bytes.charged_len(&frame));
        self.counters.tx_frames += 1;
        self.counters.tx_bytes += frame.len() as u64;
        out.push(Transmit { port: PortId(0), frame, start: now, end });
    }
}
