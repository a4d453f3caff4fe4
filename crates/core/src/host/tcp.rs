//! A synthetic TCP endpoint (sans-IO): NewReno (RFC 6582) or DCTCP (RFC
//! 8257) senders over real TCP/IPv4 segments, for the LBSP, INT and P4TE
//! experiments (docs/HOSTS.md).
//!
//! Simplifications, all documented: connections start established (no
//! handshake, so the FCT has no extra RTT); both ends use a window scale of
//! [`WINDOW_SHIFT`] as if negotiated (the 16-bit window field is what P4TE
//! rewrites); the receiver acknowledges every segment (no delayed ACKs), so
//! DCTCP's ECE echoes each CE mark exactly.
//!
//! Sender: slow start from 10 MSS, congestion avoidance, 3-dupACK fast
//! retransmit (a duplicate ACK as RFC 5681 §2 defines it: same ACK number,
//! no data, *same advertised window*) and NewReno fast recovery with partial ACKs, retransmission
//! timeout (RFC 6298 estimator, `min_rto` as RFC 6298's floor or as Linux's
//! least variance term, [`RtoRule`], exponential back-off), and
//! the in-flight bytes limited by `min(cwnd, receive window)` of the last
//! ACK (and by the flow's socket window, iperf3's `-w`, where given). A
//! flow with an application rate (iperf3's `-b`) sends only bytes already
//! written, in full segments. DCTCP: `alpha = (1 - g) alpha + g F` once per window of data, and
//! `cwnd = cwnd (1 - alpha / 2)` at most once per window on ECE.
//!
//! Wake-ups: the host's timer is the earliest instant at which a segment
//! or a control frame could leave with the wire free, a flow starts or
//! has its next segment written, a pause ends, or a retransmission timer
//! fires; never the end of a frame on the wire alone (a receiver's ACKs
//! would wake it for nothing at the end of each).

use super::nic::{HostError, Nic};
use super::SizedFlow;
use crate::fabric::NodeSpec;
use crate::transmit::Transmit;
use bytes::BytesMut;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use weft_wire::frame::FrameInfo;
use weft_wire::ids::{FlowId, NodeId, PortId};
use weft_wire::tcp::{self, flags};
use weft_wire::time::{Nanos, MICROS};
use weft_wire::{ethernet, ipv4, EtherType, EthernetAddress, Ipv4Address};

/// The ceiling of the backed-off retransmission timeout (RFC 6298 §2.5
/// allows a maximum of at least 60 s).
pub const MAX_RTO: Nanos = 60_000_000_000;

/// Window scale both ends use (as if negotiated in the SYN exchange).
pub const WINDOW_SHIFT: u32 = 7;
/// Headers of a data segment on the wire: Ethernet 14, IPv4 20, TCP 20.
pub const SEGMENT_OVERHEAD: usize = 14 + 20 + 20;

/// Congestion control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CongestionControl {
    /// NewReno (RFC 6582).
    NewReno,
    /// DCTCP (RFC 8257).
    Dctcp,
}

/// How the retransmission timeout follows from the RTT estimator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RtoRule {
    /// RFC 6298 §2: `SRTT + 4 RTTVAR`, then at least `min_rto` (the RFC's
    /// floor, 1 s there; ns-3's TcpSocketBase does the same).
    Rfc6298,
    /// Linux (`tcp_rtt_estimator`/`__tcp_set_rto`): the variance term is at
    /// least `min_rto`, so `SRTT + max(4 RTTVAR, min_rto)`: an
    /// application-limited flow with a steady RTT keeps a margin of
    /// `min_rto` over it, where RFC 6298's floor leaves none once the RTT
    /// nears `min_rto`.
    Linux,
}

/// TCP configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpConfig {
    /// Congestion control.
    pub cc: CongestionControl,
    /// Maximum segment size (payload bytes).
    pub mss: u16,
    /// Minimum retransmission timeout.
    pub min_rto: Nanos,
    /// Initial RTO before an RTT sample.
    pub initial_rto: Nanos,
    /// How `min_rto` bounds the RTO.
    pub rto_rule: RtoRule,
    /// Receive buffer advertised by receivers, bytes.
    pub rcv_buffer: u64,
    /// DCTCP gain g.
    pub dctcp_g: f64,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            cc: CongestionControl::NewReno,
            mss: 1460,
            min_rto: 1_000 * MICROS,
            initial_rto: 1_000 * MICROS,
            rto_rule: RtoRule::Rfc6298,
            rcv_buffer: 4 << 20,
            dctcp_g: 1.0 / 16.0,
        }
    }
}

/// Sender state and counters.
#[derive(Debug, Clone, Serialize)]
pub struct TcpSender {
    /// The flow.
    pub flow: SizedFlow,
    /// Lowest unacknowledged byte.
    pub snd_una: u64,
    /// Next byte to send.
    pub snd_nxt: u64,
    /// Congestion window, bytes.
    pub cwnd: f64,
    /// Slow-start threshold.
    pub ssthresh: f64,
    /// Segments sent again.
    pub retransmits: u64,
    /// Fast retransmits.
    pub fast_retransmits: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// DCTCP alpha.
    pub alpha: f64,
    /// First segment sent.
    pub first_sent: Option<Nanos>,
    /// Largest bytes in flight.
    pub max_in_flight: u64,
    /// Last acknowledgment that advanced `snd_una`.
    pub acked_at: Option<Nanos>,
    #[serde(skip)]
    rwnd: u64,
    #[serde(skip)]
    dupacks: u32,
    #[serde(skip)]
    recover: Option<u64>,
    #[serde(skip)]
    srtt: Option<f64>,
    #[serde(skip)]
    rttvar: f64,
    #[serde(skip)]
    rto: Nanos,
    #[serde(skip)]
    rto_at: Option<Nanos>,
    #[serde(skip)]
    timed: Option<(u64, Nanos)>,
    #[serde(skip)]
    window_end: u64,
    #[serde(skip)]
    acked_in_window: u64,
    #[serde(skip)]
    marked_in_window: u64,
    #[serde(skip)]
    cut_until: u64,
    /// A segment to resend next (fast retransmit / partial ACK).
    #[serde(skip)]
    rtx: Option<u64>,
    /// Highest byte ever sent (for Karn's rule and retransmission counts).
    pub max_sent: u64,
}

/// Receiver state and counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TcpReceiver {
    /// Next expected byte.
    pub rcv_nxt: u64,
    /// Segments received.
    pub segments: u64,
    /// Segments that arrived out of order.
    pub out_of_order: u64,
    /// CE-marked segments.
    pub ecn_marks: u64,
    /// First arrival.
    pub first_arrival: Option<Nanos>,
    /// Last in-order byte arrival.
    pub last_arrival: Option<Nanos>,
    #[serde(skip)]
    ooo: BTreeMap<u64, u64>,
}

/// A synthetic TCP host. Call order as [`crate::node`] says.
#[derive(Debug)]
pub struct TcpHost {
    id: NodeId,
    name: String,
    nic: Nic,
    cfg: TcpConfig,
    send: Vec<TcpSender>,
    /// Started, unfinished senders, in index order.
    active: Vec<usize>,
    /// Senders not started yet, by start time (so a pump walks only the
    /// started ones: hosts with thousands of flows in a run).
    pending: BinaryHeap<Reverse<(Nanos, usize)>>,
    rr: usize,
    recv: FxHashMap<(u32, u16), TcpReceiver>,
    timer: Option<Nanos>,
}

super::host_common!(TcpHost);

impl TcpHost {
    /// The host of fabric node `node`.
    pub fn from_spec(id: NodeId, node: &NodeSpec, cfg: TcpConfig) -> Result<Self, HostError> {
        Ok(TcpHost {
            id,
            name: node.name.clone(),
            nic: Nic::from_spec(node)?,
            cfg,
            send: Vec::new(),
            active: Vec::new(),
            pending: BinaryHeap::new(),
            rr: 0,
            recv: FxHashMap::default(),
            timer: None,
        })
    }
    /// Senders.
    pub fn senders(&self) -> &[TcpSender] {
        &self.send
    }
    /// Receivers by (source address, destination port).
    pub fn receivers(&self) -> &FxHashMap<(u32, u16), TcpReceiver> {
        &self.recv
    }
    /// Configuration.
    pub fn config(&self) -> &TcpConfig {
        &self.cfg
    }

    /// Destination port of flow `id`.
    pub fn port_of(id: FlowId) -> u16 {
        10_000u16.wrapping_add(id.0 as u16)
    }

    /// Room for `n` more flows, allocated exactly.
    pub fn reserve_flows(&mut self, n: usize) {
        self.send.reserve_exact(n);
    }

    /// Adds a flow to send.
    pub fn add_flow(&mut self, flow: SizedFlow) {
        let mss = self.cfg.mss as f64;
        self.send.push(TcpSender {
            flow,
            snd_una: 0,
            snd_nxt: 0,
            cwnd: 10.0 * mss,
            ssthresh: f64::INFINITY,
            retransmits: 0,
            fast_retransmits: 0,
            timeouts: 0,
            alpha: 1.0,
            first_sent: None,
            max_in_flight: 0,
            acked_at: None,
            rwnd: self.cfg.rcv_buffer,
            dupacks: 0,
            recover: None,
            srtt: None,
            rttvar: 0.0,
            rto: self.cfg.initial_rto,
            rto_at: None,
            timed: None,
            window_end: 0,
            acked_in_window: 0,
            marked_in_window: 0,
            cut_until: 0,
            rtx: None,
            max_sent: 0,
        });
        self.pending.push(Reverse((flow.start, self.send.len() - 1)));
        self.timer = Some(self.timer.map_or(flow.start, |t| t.min(flow.start)));
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
        if !self.nic.handle_control(now, &info, &frame) {
            match info.ip.filter(|ip| ip.dst == self.nic.ip && ip.protocol == 6) {
                Some(ip) => match tcp::Packet::new_checked(&frame[ip.l4_offset as usize..]) {
                    Ok(seg) => {
                        let payload = seg.payload().len() as u64;
                        let (sp, dp, seqn, ackn, fl, win) =
                            (seg.src_port(), seg.dst_port(), seg.seq(), seg.ack(), seg.flags(), seg.window());
                        if payload > 0 {
                            self.on_data(now, ip.src, sp, dp, seqn, payload, ip.ecn == ipv4::Ecn::Ce);
                        } else if fl & flags::ACK != 0 {
                            self.on_ack(now, dp, sp, ackn, fl & flags::ECE != 0, win);
                        }
                    }
                    Err(_) => self.nic.counters.rx_malformed += 1,
                },
                None => self.nic.counters.rx_ignored += 1,
            }
        }
        self.nic.frames.give(frame);
        self.pump(now, out);
    }

    /// Unwraps a 32-bit sequence number near `reference` into 64 bits.
    fn unwrap_seq(reference: u64, s: u32) -> u64 {
        let base = reference & !0xffff_ffff;
        let cands = [base.wrapping_sub(1 << 32), base, base + (1 << 32)].map(|b| b.wrapping_add(s as u64));
        cands.into_iter().min_by_key(|c| c.abs_diff(reference)).unwrap_or(s as u64)
    }

    #[allow(clippy::too_many_arguments)]
    fn on_data(&mut self, now: Nanos, src: Ipv4Address, sport: u16, dport: u16, seq32: u32, len: u64, ce: bool) {
        let r = self.recv.entry((src.0, dport)).or_default();
        r.segments += 1;
        r.first_arrival.get_or_insert(now);
        r.ecn_marks += ce as u64;
        let seq = Self::unwrap_seq(r.rcv_nxt, seq32);
        if seq == r.rcv_nxt {
            r.rcv_nxt += len;
            while let Some((&s, &l)) = r.ooo.first_key_value() {
                if s > r.rcv_nxt {
                    break;
                }
                r.ooo.pop_first();
                r.rcv_nxt = r.rcv_nxt.max(s + l);
            }
            r.last_arrival = Some(now);
        } else if seq > r.rcv_nxt {
            r.out_of_order += 1;
            r.ooo.insert(seq, len);
        }
        let ack = r.rcv_nxt;
        let window = ((self.cfg.rcv_buffer >> WINDOW_SHIFT).min(0xffff)) as u16;
        let f = self.segment(
            EthernetAddress::default(),
            src,
            dport,
            sport,
            0,
            ack as u32,
            flags::ACK | if ce { flags::ECE } else { 0 },
            window,
            0,
            48,
        );
        self.nic.push_routed(now, f);
    }

    fn on_ack(&mut self, now: Nanos, sport: u16, dport: u16, ack32: u32, ece: bool, window: u16) {
        let mss = self.cfg.mss as f64;
        let (cc, g, min_rto, rto_rule) = (self.cfg.cc, self.cfg.dctcp_g, self.cfg.min_rto, self.cfg.rto_rule);
        let Some(s) = self.send.iter_mut().find(|s| s.flow.src_port == sport && TcpHost::port_of(s.flow.id) == dport) else { return };
        let rwnd = (window as u64) << WINDOW_SHIFT;
        // RFC 5681 §2 (e): an ACK that changes the advertised window is a
        // window update, not a duplicate ACK (Linux: FLAG_WIN_UPDATE is in
        // FLAG_NOT_DUP). P4TE's FACKs repeat the last ACK number with a new
        // window; counted as duplicates, three of them would fake a loss.
        let window_update = rwnd != s.rwnd;
        s.rwnd = rwnd;
        let ack = Self::unwrap_seq(s.snd_una, ack32);
        if ack > s.max_sent {
            return; // acknowledges data never sent
        }
        // After a timeout rewound snd_nxt, the receiver may acknowledge data
        // it already held out of order: skip what it has.
        s.snd_nxt = s.snd_nxt.max(ack);
        let newly = ack.saturating_sub(s.snd_una);
        if cc == CongestionControl::Dctcp {
            s.acked_in_window += newly.max(1);
            if ece {
                s.marked_in_window += newly.max(1);
            }
            if ack >= s.window_end {
                let f = if s.acked_in_window > 0 { s.marked_in_window as f64 / s.acked_in_window as f64 } else { 0.0 };
                s.alpha = (1.0 - g) * s.alpha + g * f;
                s.acked_in_window = 0;
                s.marked_in_window = 0;
                s.window_end = s.snd_nxt;
            }
            if ece && ack >= s.cut_until {
                s.cwnd = (s.cwnd * (1.0 - s.alpha / 2.0)).max(2.0 * mss);
                s.ssthresh = s.cwnd;
                s.cut_until = s.snd_nxt;
            }
        }
        if newly > 0 {
            if let Some((seq, at)) = s.timed {
                if ack > seq {
                    let sample = (now - at) as f64;
                    match s.srtt {
                        None => {
                            s.srtt = Some(sample);
                            s.rttvar = sample / 2.0;
                        }
                        Some(srtt) => {
                            s.rttvar = 0.75 * s.rttvar + 0.25 * (srtt - sample).abs();
                            s.srtt = Some(0.875 * srtt + 0.125 * sample);
                        }
                    }
                    let srtt = s.srtt.unwrap_or(sample);
                    s.rto = match rto_rule {
                        RtoRule::Rfc6298 => ((srtt + 4.0 * s.rttvar) as Nanos).max(min_rto),
                        RtoRule::Linux => (srtt + (4.0 * s.rttvar).max(min_rto as f64)) as Nanos,
                    };
                    s.timed = None;
                }
            }
            s.snd_una = ack;
            s.acked_at = Some(now);
            s.dupacks = 0;
            match s.recover {
                Some(r) if ack < r => {
                    // Partial ACK: resend the next hole, deflate.
                    s.snd_nxt = s.snd_nxt.max(ack);
                    s.retransmits += 1;
                    s.cwnd = (s.cwnd - newly as f64 + mss).max(mss);
                    s.timed = None;
                    resend_at(s, ack);
                }
                Some(_) => {
                    s.recover = None;
                    s.cwnd = s.ssthresh.max(2.0 * mss);
                }
                None => {
                    if s.cwnd < s.ssthresh {
                        s.cwnd += newly as f64;
                    } else {
                        s.cwnd += mss * newly as f64 / s.cwnd;
                    }
                }
            }
            s.rto_at = (s.snd_una < s.snd_nxt).then_some(now + s.rto);
        } else if ack == s.snd_una && s.snd_una < s.snd_nxt && !window_update {
            s.dupacks += 1;
            if s.recover.is_none() && s.dupacks == 3 {
                let flight = (s.snd_nxt - s.snd_una) as f64;
                s.ssthresh = (flight / 2.0).max(2.0 * mss);
                s.cwnd = s.ssthresh + 3.0 * mss;
                s.recover = Some(s.snd_nxt);
                s.fast_retransmits += 1;
                s.retransmits += 1;
                s.timed = None;
                resend_at(s, s.snd_una);
            } else if s.recover.is_some() {
                s.cwnd += mss;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn segment(
        &mut self,
        gw: EthernetAddress,
        dst: Ipv4Address,
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        fl: u8,
        window: u16,
        payload: usize,
        dscp: u8,
    ) -> BytesMut {
        let mut b = self.nic.frames.zeroed(SEGMENT_OVERHEAD + payload);
        ethernet::Repr { dst: gw, src: self.nic.mac, vlan_tci: None, ethertype: EtherType::Ipv4 }.emit(&mut b);
        let ect = self.cfg.cc == CongestionControl::Dctcp && payload > 0;
        ipv4::Repr {
            src: self.nic.ip,
            dst,
            protocol: ipv4::Protocol::Tcp,
            dscp,
            ecn: if ect { ipv4::Ecn::Ect0 } else { ipv4::Ecn::NotEct },
            ident: 0,
            ttl: super::TTL,
            payload_len: tcp::HEADER_LEN + payload,
        }
        .emit(&mut b[14..]);
        tcp::Repr { src_port: sport, dst_port: dport, seq, ack, flags: fl, window }.emit(&mut b[34..]);
        let (src_ip, l4) = (self.nic.ip, 34);
        tcp::Packet::new_unchecked(&mut b[l4..]).fill_checksum(src_ip, dst);
        b
    }

    fn pump(&mut self, now: Nanos, out: &mut Vec<Transmit>) {
        while let Some(&Reverse((start, i))) = self.pending.peek() {
            if start > now {
                break;
            }
            self.pending.pop();
            let at = self.active.partition_point(|&a| a < i);
            self.active.insert(at, i);
        }
        let send = &self.send;
        self.active.retain(|&i| send[i].snd_una < send[i].flow.size);
        let unfinished = !self.active.is_empty() || !self.pending.is_empty();
        // Retransmission timeouts.
        let mss = self.cfg.mss as f64;
        for &i in &self.active {
            let s = &mut self.send[i];
            if s.rto_at.is_some_and(|t| now >= t) {
                let flight = (s.snd_nxt - s.snd_una) as f64;
                s.ssthresh = (flight / 2.0).max(2.0 * mss);
                s.cwnd = mss;
                s.snd_nxt = s.snd_una;
                s.recover = None;
                s.dupacks = 0;
                s.timeouts += 1;
                s.timed = None;
                s.rto = (s.rto * 2).min(MAX_RTO);
                s.rto_at = Some(now + s.rto);
            }
        }
        if !self.nic.send_control(now, out) && !self.nic.is_busy(now) {
            // Round robin over the senders in index order, the ones not
            // started yet (`pending`, all after the started ones) counted
            // as ineligible places: `rr` is a place in that whole list, as
            // when every sender sat in it.
            let (n, total) = (self.active.len(), self.active.len() + self.pending.len());
            let mss_u = self.cfg.mss as u64;
            let can = |s: &TcpSender| s.can_send(now, self.nic.paused_until(s.flow.dscp >> 3), mss_u);
            let from = (self.rr % total.max(1)).min(n);
            if let Some(i) = (from..n).chain(0..from).map(|p| self.active[p]).find(|&i| can(&self.send[i])) {
                match self.nic.gateway_mac(now) {
                    None => {
                        self.nic.send_control(now, out);
                    }
                    Some(gw) => {
                        let s = &self.send[i];
                        let from = s.rtx.unwrap_or(s.snd_nxt);
                        let len = (s.flow.size - from).min(mss_u) as usize;
                        let (dst, sport, dport, dscp) = (s.flow.dst, s.flow.src_port, TcpHost::port_of(s.flow.id), s.flow.dscp);
                        let f = self.segment(gw, dst, sport, dport, from as u32, 0, flags::ACK | flags::PSH, 0xffff, len, dscp);
                        self.nic.transmit(now, f, out);
                        let s = &mut self.send[i];
                        if s.rtx.take().is_none() {
                            if from < s.max_sent {
                                s.retransmits += 1; // resent after a timeout
                            } else if s.timed.is_none() {
                                s.timed = Some((from, now)); // Karn: time only new data
                            }
                            s.snd_nxt += len as u64;
                            s.max_sent = s.max_sent.max(s.snd_nxt);
                        }
                        s.first_sent.get_or_insert(now);
                        s.max_in_flight = s.max_in_flight.max(s.snd_nxt - s.snd_una);
                        if s.rto_at.is_none() {
                            s.rto_at = Some(now + s.rto);
                        }
                        self.rr = (self.active.iter().position(|&a| a == i).unwrap_or(0) + 1) % total.max(1);
                    }
                }
            }
        }
        if unfinished && self.nic.arp_retry_at().is_some_and(|t| t <= now) {
            // An ARP retry is due but no segment may go now (none asked
            // for the gateway): ask again here, or the due time would be
            // a wakeup in the past forever (links slower than the retry).
            let _ = self.nic.gateway_mac(now);
            self.nic.send_control(now, out);
        }
        let mss_u = self.cfg.mss as u64;
        let mut next: Option<Nanos> = None;
        let mut consider = |t: Nanos| next = Some(next.map_or(t, |x: Nanos| x.min(t)));
        // Nothing leaves before the frame on the wire has: a wake-up for a
        // segment is at the wire's end at the earliest, and one for the
        // wire's end is made only when something could leave then (a
        // receiver sending ACKs would wake for nothing at the end of each).
        let busy = self.nic.is_busy(now);
        let free_at = if busy { self.nic.busy_until() } else { now };
        if busy
            && (self.nic.has_control()
                || self.active.iter().any(|&i| {
                    let s = &self.send[i];
                    s.can_send(free_at, self.nic.paused_until(s.flow.dscp >> 3), mss_u)
                }))
        {
            consider(free_at);
        }
        if let Some(t) = self.nic.arp_retry_at() {
            if unfinished {
                consider(t);
            }
        }
        if let Some(&Reverse((start, _))) = self.pending.peek() {
            consider(start.max(free_at));
        }
        for &i in &self.active {
            let s = &self.send[i];
            if let Some(t) = s.rto_at {
                consider(t);
            }
            // An application-rate-limited sender: when its next full
            // segment is written (Nagle: no partial segment while more
            // is to come).
            let next_segment = s.flow.size.min(s.snd_nxt + mss_u);
            if s.snd_nxt < s.flow.size && s.flow.written_by(now) < next_segment {
                consider(s.flow.written_at(next_segment).max(free_at));
            }
            let p = self.nic.paused_until(s.flow.dscp >> 3);
            if p > now {
                consider(p.max(free_at));
            }
        }
        self.timer = next;
    }
}

impl TcpSender {
    /// Whether a segment of this sender may leave at `t` (its class paused
    /// until `paused_until`): started, not paused, and a retransmission
    /// queued or a full segment (or the flow's last bytes) written and
    /// inside the window.
    fn can_send(&self, t: Nanos, paused_until: Nanos, mss: u64) -> bool {
        self.flow.start <= t
            && paused_until <= t
            && (self.rtx.is_some()
                || (self.snd_nxt < self.flow.size
                    && self.flow.written_by(t) >= self.flow.size.min(self.snd_nxt + mss)
                    && (self.snd_nxt - self.snd_una) + (self.flow.size - self.snd_nxt).min(mss) <= self.window().max(mss)))
    }

    /// The retransmission timeout in force (before back-off doubles it).
    pub fn rto(&self) -> Nanos {
        self.rto
    }

    /// The smoothed RTT, once a sample was taken.
    pub fn srtt(&self) -> Option<Nanos> {
        self.srtt.map(|s| s as Nanos)
    }

    /// Bytes the sender may have in flight: the congestion window, the
    /// receiver's advertised window and the flow's socket window, whichever
    /// is smallest.
    pub fn window(&self) -> u64 {
        let w = (self.cwnd as u64).min(self.rwnd);
        self.flow.socket_window.map_or(w, |b| w.min(b))
    }
}

/// Queues the segment at `seq` to be resent next; new data then continues
/// from `snd_nxt` (no go-back).
fn resend_at(s: &mut TcpSender, seq: u64) {
    s.rtx = Some(seq);
}
