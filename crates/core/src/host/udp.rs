//! A synthetic UDP host: sends UDP flows (a fixed number of bytes at line
//! rate, or a constant bit rate for a duration) and counts what it
//! receives.
//!
//! Every UDP payload starts with a 16-byte probe header: flow id (u32),
//! sequence number (u32), transmit time (u64 ns). The receiver uses it for
//! per-flow bytes, ECN CE marks, first/last arrival and out-of-order counts.
//!
//! Behaviour: resolves its gateway's MAC with ARP before sending (retry
//! every 100 µs); answers ARP for its own address; honours 802.1Qbb pause
//! frames per priority (a flow's priority is its DSCP >> 3); sends ready
//! flows round-robin, one frame at a time, at the NIC's line rate, or
//! paced: at a constant rate, or with exponentially distributed gaps
//! between departures (a Poisson process, what D-ITG's `-E` does; the gap
//! after packet n is drawn from a counter-based generator keyed by the
//! flow id and n, so a run is reproducible without RNG state).
//!
//! Invariants: a flow never sends before its start time; a paused priority
//! sends nothing while paused; payload bytes sent = flow size for
//! [`UdpMode::Bytes`].

use super::nic::{HostError, Nic};
use crate::fabric::NodeSpec;
use crate::transmit::Transmit;
use bytes::BytesMut;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use weft_wire::frame::FrameInfo;
use weft_wire::ids::{FlowId, NodeId, PortId};
use weft_wire::template::{UdpFields, UdpHeaders};
use weft_wire::time::{BitRate, Nanos};
use weft_wire::{ethernet, ipv4, udp, EthernetAddress, Ipv4Address};

/// Length of the probe header at the start of every UDP payload.
pub const PROBE_LEN: usize = 16;

/// How much a flow sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UdpMode {
    /// This many payload bytes, as fast as the NIC allows.
    Bytes(u64),
    /// This rate until `until`.
    Rate {
        /// Sending rate (IP bytes).
        rate: BitRate,
        /// Stop time.
        until: Nanos,
    },
    /// This many payload bytes, departures a Poisson process: the gap from
    /// one packet's departure to the next is exponential with this mean
    /// (never shorter than the NIC takes to send the packet).
    Poisson {
        /// Payload bytes.
        bytes: u64,
        /// Mean gap between departures, ns.
        mean_gap: Nanos,
    },
}

/// The gap after packet `seq` of flow `flow` for a mean of `mean` ns:
/// exponential, from SplitMix64 of (flow, seq) (Steele et al. 2014).
pub fn poisson_gap(flow: u32, seq: u32, mean: Nanos) -> Nanos {
    let mut z = ((flow as u64) << 32 | seq as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    // u in (0, 1]: -ln(u) is exponential with mean 1.
    let u = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    (-(u.ln()) * mean as f64).round() as Nanos
}

/// A UDP flow to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpFlow {
    /// Run-wide flow id.
    pub id: FlowId,
    /// Destination address.
    pub dst: Ipv4Address,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// DSCP (priority = DSCP >> 3).
    pub dscp: u8,
    /// Send as ECN-capable (ECT(0)).
    pub ecn_capable: bool,
    /// UDP payload bytes per full packet (≥ 16).
    pub payload_len: u16,
    /// Start time.
    pub start: Nanos,
    /// Amount.
    pub mode: UdpMode,
}

/// What a receiver saw of one flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FlowStats {
    /// Payload bytes received.
    pub bytes: u64,
    /// Packets received.
    pub packets: u64,
    /// Packets that arrived with CE.
    pub ecn_marks: u64,
    /// Packets with a sequence number below the highest seen.
    pub out_of_order: u64,
    /// First arrival.
    pub first_arrival: Option<Nanos>,
    /// Last arrival.
    pub last_arrival: Option<Nanos>,
    /// Highest sequence number + 1.
    pub next_seq: u32,
}

/// Sender-side state of a flow.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TxState {
    /// The flow.
    pub flow: UdpFlow,
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Packets sent.
    pub packets_sent: u64,
    /// First packet sent at.
    pub first_sent: Option<Nanos>,
    /// Last packet sent at.
    pub last_sent: Option<Nanos>,
    next_send: Nanos,
    seq: u32,
}

/// A synthetic UDP host. Call order as [`crate::node`] says.
#[derive(Debug)]
pub struct UdpHost {
    id: NodeId,
    name: String,
    nic: Nic,
    flows: Vec<TxState>,
    waiting: BinaryHeap<Reverse<(Nanos, u32)>>,
    ready: VecDeque<u32>,
    paused_flows: [Vec<u32>; 8],
    /// Bit `c` set: `paused_flows[c]` holds flows (most pumps find none).
    paused_classes: u8,
    rx: FxHashMap<u32, FlowStats>,
    /// Its frames' Ethernet, IPv4 and UDP headers, the host's own fields
    /// in place.
    headers: UdpHeaders,
    timer: Option<Nanos>,
}

super::host_common!(UdpHost);

impl UdpHost {
    /// The host of fabric node `node`.
    pub fn from_spec(id: NodeId, node: &NodeSpec) -> Result<Self, HostError> {
        let nic = Nic::from_spec(node)?;
        Ok(UdpHost {
            id,
            name: node.name.clone(),
            headers: UdpHeaders::new(nic.mac, nic.ip, super::TTL),
            nic,
            flows: Vec::new(),
            waiting: BinaryHeap::new(),
            ready: VecDeque::new(),
            paused_flows: Default::default(),
            paused_classes: 0,
            rx: FxHashMap::default(),
            timer: None,
        })
    }

    /// Sender-side state of its flows.
    pub fn tx_flows(&self) -> &[TxState] {
        &self.flows
    }
    /// Receiver-side stats by flow id.
    pub fn rx_flows(&self) -> &FxHashMap<u32, FlowStats> {
        &self.rx
    }

    /// Room for `n` more flows, allocated exactly.
    pub fn reserve_flows(&mut self, n: usize) {
        self.flows.reserve_exact(n);
    }

    /// Adds a flow to send. Call before the run or at any time ≤ its start.
    pub fn add_flow(&mut self, flow: UdpFlow) {
        let i = self.flows.len() as u32;
        let mut f = flow;
        f.payload_len = f.payload_len.clamp(PROBE_LEN as u16, self.nic.mtu.saturating_sub(28).max(PROBE_LEN as u16));
        self.flows.push(TxState { flow: f, bytes_sent: 0, packets_sent: 0, first_sent: None, last_sent: None, next_send: f.start, seq: 0 });
        self.waiting.push(Reverse((f.start, i)));
        self.timer = Some(self.timer.map_or(f.start, |t| t.min(f.start)));
    }

    /// A frame received at `now`.
    pub fn handle_frame(&mut self, now: Nanos, _port: PortId, frame: BytesMut, out: &mut Vec<Transmit>) {
        self.nic.counters.rx_frames += 1;
        let info = match FrameInfo::parse(&frame) {
            Ok(i) => i,
            Err(_) => {
                self.nic.counters.rx_malformed += 1;
                return;
            }
        };
        if self.nic.handle_control(now, &info, &frame) {
            self.pump(now, out);
            return;
        }
        let Some(ip) = info.ip.filter(|ip| ip.dst == self.nic.ip && ip.protocol == 17) else {
            self.nic.counters.rx_ignored += 1;
            return;
        };
        let l4 = ip.l4_offset as usize;
        let payload = &frame[l4 + udp::HEADER_LEN..];
        if payload.len() < PROBE_LEN {
            self.nic.counters.rx_malformed += 1;
            return;
        }
        let flow = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        let seq = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
        let udp_len = u16::from_be_bytes([frame[l4 + 4], frame[l4 + 5]]) as u64;
        let s = self.rx.entry(flow).or_default();
        s.bytes += udp_len.saturating_sub(udp::HEADER_LEN as u64);
        s.packets += 1;
        s.ecn_marks += (ip.ecn == ipv4::Ecn::Ce) as u64;
        if seq < s.next_seq {
            s.out_of_order += 1;
        } else {
            s.next_seq = seq + 1;
        }
        s.first_arrival.get_or_insert(now);
        s.last_arrival = Some(now);
        self.nic.frames.give(frame);
    }

    fn build_packet(&mut self, i: usize, gw: EthernetAddress, now: Nanos) -> BytesMut {
        let st = &mut self.flows[i];
        let f = st.flow;
        let payload = match f.mode {
            UdpMode::Bytes(total) | UdpMode::Poisson { bytes: total, .. } => {
                (total - st.bytes_sent).min(f.payload_len as u64).max(PROBE_LEN as u64) as usize
            }
            UdpMode::Rate { .. } => f.payload_len as usize,
        };
        let ip_len = ipv4::HEADER_LEN + udp::HEADER_LEN + payload;
        let mut b = self.nic.frames.zeroed(ethernet::HEADER_LEN + ip_len);
        let fields = UdpFields {
            dst_mac: gw,
            dst: f.dst,
            dscp: f.dscp,
            ecn: if f.ecn_capable { ipv4::Ecn::Ect0 } else { ipv4::Ecn::NotEct },
            ident: st.seq as u16,
            src_port: f.src_port,
            dst_port: f.dst_port,
            payload_len: payload,
        };
        self.headers.write(&mut b, &fields);
        let l4 = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
        let p = l4 + udp::HEADER_LEN;
        b[p..p + 4].copy_from_slice(&f.id.0.to_be_bytes());
        b[p + 4..p + 8].copy_from_slice(&st.seq.to_be_bytes());
        b[p + 8..p + 16].copy_from_slice(&now.to_be_bytes());
        st.seq += 1;
        st.packets_sent += 1;
        st.bytes_sent += payload as u64;
        st.first_sent.get_or_insert(now);
        st.last_sent = Some(now);
        match f.mode {
            UdpMode::Rate { rate, .. } => {
                st.next_send = st.next_send.max(now.saturating_sub(rate.serialization_ns(ip_len))) + rate.serialization_ns(ip_len);
            }
            UdpMode::Poisson { mean_gap, .. } => st.next_send = now + poisson_gap(f.id.0, st.seq - 1, mean_gap),
            UdpMode::Bytes(_) => {}
        }
        b
    }

    /// Whether a flow has sent all it will send.
    pub fn flow_done(st: &TxState) -> bool {
        match st.flow.mode {
            UdpMode::Bytes(total) | UdpMode::Poisson { bytes: total, .. } => st.bytes_sent >= total,
            UdpMode::Rate { until, .. } => st.next_send >= until,
        }
    }

    /// Sends the next frame if the NIC is idle; re-arms the timer.
    fn pump(&mut self, now: Nanos, out: &mut Vec<Transmit>) {
        while let Some(&Reverse((t, i))) = self.waiting.peek() {
            if t > now {
                break;
            }
            self.waiting.pop();
            self.ready.push_back(i);
        }
        let mut held = self.paused_classes;
        while held != 0 {
            let c = held.trailing_zeros() as u8;
            held &= held - 1;
            if self.nic.paused_until(c) <= now {
                let v = std::mem::take(&mut self.paused_flows[c as usize]);
                self.ready.extend(v);
                self.paused_classes &= !(1 << c);
            }
        }
        if !self.nic.send_control(now, out) && !self.nic.is_busy(now) && !self.ready.is_empty() {
            match self.nic.gateway_mac(now) {
                Some(gw) => self.send_data(now, gw, out),
                None => {
                    self.nic.send_control(now, out);
                }
            }
        }
        // Next wakeup.
        let mut next: Option<Nanos> = None;
        let mut consider = |t: Nanos| next = Some(next.map_or(t, |n: Nanos| n.min(t)));
        if self.nic.is_busy(now) && (self.nic.has_control() || !self.ready.is_empty()) {
            consider(self.nic.busy_until());
        }
        if !self.ready.is_empty() {
            if let Some(t) = self.nic.arp_retry_at() {
                consider(t);
            }
        }
        if let Some(&Reverse((t, _))) = self.waiting.peek() {
            consider(t.max(self.nic.busy_until()));
        }
        let mut held = self.paused_classes;
        while held != 0 {
            consider(self.nic.paused_until(held.trailing_zeros() as u8));
            held &= held - 1;
        }
        self.timer = next;
    }

    fn send_data(&mut self, now: Nanos, gw: EthernetAddress, out: &mut Vec<Transmit>) {
        while let Some(i) = self.ready.pop_front() {
            let st = &self.flows[i as usize];
            if Self::flow_done(st) {
                continue;
            }
            let class = (st.flow.dscp >> 3) & 7;
            if self.nic.paused_until(class) > now {
                self.paused_flows[class as usize].push(i);
                self.paused_classes |= 1 << class;
                continue;
            }
            if st.next_send > now {
                self.waiting.push(Reverse((st.next_send, i)));
                continue;
            }
            let f = self.build_packet(i as usize, gw, now);
            self.nic.transmit(now, f, out);
            let st = &self.flows[i as usize];
            if !Self::flow_done(st) {
                if st.next_send > now {
                    self.waiting.push(Reverse((st.next_send, i)));
                } else {
                    self.ready.push_back(i);
                }
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::poisson_gap;

    #[test]
    fn poisson_gaps_are_exponential_with_the_mean_asked_for() {
        let mean = 4_200_000;
        let gaps: Vec<f64> = (0..200_000).map(|n| poisson_gap(7, n, mean) as f64).collect();
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        assert!((m / mean as f64 - 1.0).abs() < 0.01, "mean {m}");
        // Exponential: P(gap > mean) = 1/e, and the standard deviation is the mean.
        let over = gaps.iter().filter(|g| **g > mean as f64).count() as f64 / gaps.len() as f64;
        assert!((over - (-1f64).exp()).abs() < 0.005, "P(gap > mean) = {over}");
        let sd = (gaps.iter().map(|g| (g - m).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((sd / m - 1.0).abs() < 0.02, "sd {sd}");
        // Reproducible, and flows differ.
        assert_eq!(poisson_gap(7, 3, mean), poisson_gap(7, 3, mean));
        assert_ne!(poisson_gap(7, 3, mean), poisson_gap(8, 3, mean));
    }
}
