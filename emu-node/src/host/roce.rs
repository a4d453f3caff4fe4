//! A synthetic RoCEv2 RC endpoint (sans-IO): queue pairs sending RDMA WRITE
//! messages as real RoCEv2 frames, with DCQCN congestion control and the
//! two loss-recovery modes of the ConWeave paper (§4.1).
//!
//! Frames: Ethernet / IPv4 (DSCP of the flow, ECT(0)) / UDP (source port
//! from the QP, destination 4791) / BTH (WRITE First/Middle/Last/Only, PSN,
//! ack-request) [/ RETH on the first packet] / payload (1000 B default) /
//! ICRC (valid RoCEv2 invariant CRC). The receiver acknowledges every packet
//! (BTH Acknowledge + AETH), sends NAKs (AETH NAK "PSN sequence error")
//! and CNPs (opcode 0x81) in the control priority (DSCP 48).
//!
//! Recovery ([`Recovery`]):
//! - `GoBackN` (`roce-lossless`, with PFC in the switches): an
//!   out-of-sequence packet is dropped and answered with a NAK carrying the
//!   expected PSN (at most one per `nak_interval` per QP); the sender goes
//!   back to that PSN and resends everything from there. This is what a
//!   ConnectX NIC does and why reordering hurts RDMA (ConWeave §1, Fig. 3).
//! - `Irn` (`roce-irn`, no PFC): the receiver keeps out-of-order packets and
//!   NAKs with the expected PSN plus the PSN that arrived (in the AETH MSN
//!   field); the sender retransmits only the missing packet (selective
//!   repeat), keeps at most one BDP in flight, and retransmits on a timeout
//!   (`rto_low` when at most 3 packets are in flight, else `rto_high`).
//!
//! DCQCN ([`DcqcnConfig`], DESIGN §8.1): the receiver sends a CNP for an
//! ECN-marked packet (at most one per `cnp_interval` per QP) and for an
//! out-of-order NAK; the sender cuts its rate to `rate x (1 - alpha/2)` (at
//! most once per `decrease_interval`) and raises alpha by `g`; alpha decays
//! by `(1 - g)` per `alpha_interval` without CNPs; every `rp_timer` the rate
//! recovers: `fast_recovery_stages` halvings towards the target rate, then
//! one additive (`rai`) and then hyper (`rhai`) increases of the target, as
//! in the ConWeave/HPCC ns-3 RNIC model (timer only, no byte counter). Updates are
//! applied lazily when the QP is next looked at, which is exact for timer-only
//! increases. Pacing: a QP sends its next packet `wire bytes x 8 / rate`
//! after the previous one.
//!
//! Go-Back-N also resends from the oldest unacknowledged packet after
//! `gbn_timeout` (1 ms) without progress, so a tail lost on a failed link
//! does not hang the QP.
//!
//! Completion: a flow completes when its receiver has every byte in order
//! (one-way, the base FCT's convention in [`crate::fct`]).

use super::nic::{HostError, Nic};
use super::SizedFlow;
use crate::fabric::NodeSpec;
use crate::ids::{NodeId, PortId};
use crate::switch::Transmit;
use crate::time::{BitRate, Nanos, MICROS};
use crate::wire::frame::FrameInfo;
use crate::wire::roce::{self, Aeth, AethKind, BthPacket, BthRepr, Opcode, Reth};
use crate::wire::{ethernet, ipv4, udp, EtherType, EthernetAddress, Ipv4Address};
use bytes::BytesMut;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Bytes of headers on every data packet: Ethernet 14, IPv4 20, UDP 8,
/// BTH 12, ICRC 4 (the first packet adds a 16-byte RETH).
pub const DATA_OVERHEAD: usize = 14 + 20 + 8 + roce::BTH_LEN + roce::ICRC_LEN;
/// DSCP of ACK/NAK/CNP (CS6: the switches' control queue).
pub const CONTROL_DSCP: u8 = 48;

/// Loss recovery.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Recovery {
    /// Go-Back-N (lossless RoCE with PFC).
    GoBackN,
    /// IRN: selective repeat + BDP flow control.
    Irn {
        /// In-flight bytes allowed.
        bdp_bytes: u64,
        /// Timeout with at most 3 packets in flight.
        rto_low: Nanos,
        /// Timeout otherwise.
        rto_high: Nanos,
    },
}

/// DCQCN parameters (defaults: the ConWeave setup at 100 Gbit/s, DESIGN §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DcqcnConfig {
    /// Enabled.
    pub enabled: bool,
    /// alpha gain g.
    pub g: f64,
    /// alpha decay interval without CNP.
    pub alpha_interval: Nanos,
    /// Minimum time between two rate decreases.
    pub decrease_interval: Nanos,
    /// Rate-increase timer.
    pub rp_timer: Nanos,
    /// Fast-recovery stages before additive increase.
    pub fast_recovery_stages: u32,
    /// Additive increase.
    pub rai: BitRate,
    /// Hyper increase.
    pub rhai: BitRate,
    /// Minimum rate.
    pub min_rate: BitRate,
    /// Receiver: minimum time between two CNPs of a QP.
    pub cnp_interval: Nanos,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            enabled: true,
            g: 1.0 / 256.0,
            alpha_interval: MICROS,
            decrease_interval: 4 * MICROS,
            rp_timer: 300 * MICROS,
            fast_recovery_stages: 1,
            rai: BitRate::mbps(40),
            rhai: BitRate::mbps(100),
            min_rate: BitRate::mbps(100),
            cnp_interval: 4 * MICROS,
        }
    }
}

/// RoCE endpoint configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RoceConfig {
    /// Payload bytes per packet.
    pub payload: u16,
    /// Loss recovery.
    pub recovery: Recovery,
    /// Receiver: minimum time between two NAKs of a QP.
    pub nak_interval: Nanos,
    /// Go-Back-N: resend from the oldest unacknowledged packet when nothing
    /// was acknowledged for this long (losses only happen on link failures
    /// in lossless mode; without a timeout a lost tail would hang the QP).
    pub gbn_timeout: Nanos,
    /// Congestion control.
    pub dcqcn: DcqcnConfig,
}

impl RoceConfig {
    /// Lossless RoCE (Go-Back-N) with the ConWeave defaults.
    pub fn lossless() -> Self {
        RoceConfig {
            payload: 1000,
            recovery: Recovery::GoBackN,
            nak_interval: 4 * MICROS,
            gbn_timeout: 1_000 * MICROS,
            dcqcn: DcqcnConfig::default(),
        }
    }
    /// IRN with BDP flow control for `bdp_bytes` (104 000 B on leaf-spine at 100G).
    pub fn irn(bdp_bytes: u64) -> Self {
        RoceConfig { recovery: Recovery::Irn { bdp_bytes, rto_low: 100 * MICROS, rto_high: 320 * MICROS }, ..Self::lossless() }
    }
}

/// Sender-side state and counters of a QP.
#[derive(Debug, Clone, Serialize)]
pub struct SendQp {
    /// The flow.
    pub flow: SizedFlow,
    /// Packets in the message.
    pub packets: u32,
    /// Lowest unacknowledged PSN.
    pub snd_una: u32,
    /// Next new PSN.
    pub snd_nxt: u32,
    /// Current rate.
    pub rate: f64,
    /// Packets sent again (go-back or selective).
    pub retransmits: u64,
    /// NAKs received.
    pub naks: u64,
    /// CNPs received.
    pub cnps: u64,
    /// Largest in-flight bytes seen.
    pub max_in_flight: u64,
    /// First packet sent.
    pub first_sent: Option<Nanos>,
    /// Last acknowledgment received.
    pub acked_at: Option<Nanos>,
    #[serde(skip)]
    cc: Dcqcn,
    #[serde(skip)]
    next_send: Nanos,
    #[serde(skip)]
    retx: std::collections::BTreeSet<u32>,
    #[serde(skip)]
    sacked: Vec<bool>,
    #[serde(skip)]
    resent: std::collections::BTreeSet<u32>,
    #[serde(skip)]
    last_progress: Nanos,
}

/// Receiver-side state and counters of a QP.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecvQp {
    /// Expected PSN.
    pub epsn: u32,
    /// Message length from the RETH (0 until the first packet arrived).
    pub length: u64,
    /// Packets received (incl. duplicates and out-of-order).
    pub packets: u64,
    /// Bytes delivered in order.
    pub bytes: u64,
    /// Packets that arrived out of order.
    pub out_of_order: u64,
    /// NAKs sent.
    pub naks: u64,
    /// CNPs sent.
    pub cnps: u64,
    /// ECN-marked packets.
    pub ecn_marks: u64,
    /// First arrival.
    pub first_arrival: Option<Nanos>,
    /// When every byte had arrived in order.
    pub completed: Option<Nanos>,
    #[serde(skip)]
    held: Vec<bool>,
    #[serde(skip)]
    last_nak: Option<(Nanos, u32)>,
    #[serde(skip)]
    last_cnp: Option<Nanos>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Dcqcn {
    target: f64,
    alpha: f64,
    last_decrease: Option<Nanos>,
    alpha_at: Nanos,
    increase_at: Nanos,
    stage: u32,
}

/// A synthetic RoCEv2 host. Call order as [`crate::switch::Switch`].
#[derive(Debug)]
pub struct RoceHost {
    id: NodeId,
    name: String,
    nic: Nic,
    cfg: RoceConfig,
    send: Vec<SendQp>,
    /// Indices of QPs not yet fully acknowledged (the only ones a wake-up looks at).
    active: Vec<usize>,
    rr: usize,
    recv: FxHashMap<u32, RecvQp>,
    timer: Option<Nanos>,
}

super::host_common!(RoceHost);

impl RoceHost {
    /// The host of fabric node `node`.
    pub fn from_spec(id: NodeId, node: &NodeSpec, cfg: RoceConfig) -> Result<Self, HostError> {
        Ok(RoceHost {
            id,
            name: node.name.clone(),
            nic: Nic::from_spec(node)?,
            cfg,
            send: Vec::new(),
            active: Vec::new(),
            rr: 0,
            recv: FxHashMap::default(),
            timer: None,
        })
    }
    /// Sending QPs.
    pub fn send_qps(&self) -> &[SendQp] {
        &self.send
    }
    /// Receiving QPs by QP number.
    pub fn recv_qps(&self) -> &FxHashMap<u32, RecvQp> {
        &self.recv
    }
    /// The configuration.
    pub fn config(&self) -> &RoceConfig {
        &self.cfg
    }

    /// Adds a message to send.
    pub fn add_flow(&mut self, flow: SizedFlow) {
        let p = self.cfg.payload.max(1) as u64;
        let packets = flow.size.div_ceil(p).max(1) as u32;
        let line = self.nic.rate().bps() as f64;
        let cc = Dcqcn {
            target: line,
            alpha: 1.0,
            last_decrease: None,
            alpha_at: flow.start,
            increase_at: flow.start + self.cfg.dcqcn.rp_timer,
            stage: 0,
        };
        self.send.push(SendQp {
            flow,
            packets,
            snd_una: 0,
            snd_nxt: 0,
            rate: line,
            retransmits: 0,
            naks: 0,
            cnps: 0,
            max_in_flight: 0,
            first_sent: None,
            acked_at: None,
            cc,
            next_send: flow.start,
            retx: Default::default(),
            sacked: Vec::new(),
            resent: Default::default(),
            last_progress: flow.start,
        });
        self.active.push(self.send.len() - 1);
        self.timer = Some(self.timer.map_or(flow.start, |t| t.min(flow.start)));
    }

    fn wire_len(&self, qp: &SendQp, psn: u32) -> usize {
        let p = self.cfg.payload as u64;
        let payload = if psn + 1 == qp.packets { qp.flow.size - p * psn as u64 } else { p } as usize;
        DATA_OVERHEAD + payload + if psn == 0 { roce::RETH_LEN } else { 0 }
    }

    fn in_flight_bytes(&self, qp: &SendQp) -> u64 {
        let full = (self.cfg.payload as usize + DATA_OVERHEAD) as u64;
        qp.snd_nxt.saturating_sub(qp.snd_una) as u64 * full
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
            match info.ip.and_then(|ip| ip.bth_offset.map(|b| (ip, b))) {
                Some((ip, bth)) if ip.dst == self.nic.ip => {
                    let Ok(b) = BthPacket::new_checked(&frame[bth as usize..]) else {
                        self.nic.counters.rx_malformed += 1;
                        return;
                    };
                    match b.opcode() {
                        Opcode::Acknowledge => self.on_ack(now, b.dest_qp(), b.psn(), b.aeth()),
                        Opcode::Cnp => self.on_cnp(now, b.dest_qp()),
                        Opcode::WriteFirst | Opcode::WriteMiddle | Opcode::WriteLast | Opcode::WriteOnly => {
                            let payload = frame.len() - bth as usize - roce::BTH_LEN - b.opcode().ext_header_len() - roce::ICRC_LEN;
                            let reth = b.reth();
                            self.on_data(now, ip.src, ip.ecn == ipv4::Ecn::Ce, b.dest_qp(), b.psn(), payload as u64, reth);
                        }
                        _ => self.nic.counters.rx_ignored += 1,
                    }
                }
                _ => self.nic.counters.rx_ignored += 1,
            }
        }
        self.pump(now, out);
    }

    fn qp_index(&self, qpn: u32) -> Option<usize> {
        let i = self.send.partition_point(|q| q.flow.id.0 + 1 < qpn);
        (self.send.get(i)?.flow.id.0 + 1 == qpn).then_some(i)
    }

    fn on_ack(&mut self, now: Nanos, qpn: u32, psn: u32, aeth: Option<Aeth>) {
        let Some(i) = self.qp_index(qpn) else { return };
        let irn = matches!(self.cfg.recovery, Recovery::Irn { .. });
        let qp = &mut self.send[i];
        match aeth.map(|a| a.kind) {
            Some(AethKind::Nak(_)) => {
                qp.naks += 1;
                // psn = the receiver's expected PSN: everything below arrived.
                if psn > qp.snd_una {
                    qp.snd_una = psn.min(qp.packets);
                    qp.last_progress = now;
                }
                if irn {
                    let sack = aeth.map_or(0, |a| a.msn);
                    if qp.sacked.len() < qp.packets as usize {
                        qp.sacked.resize(qp.packets as usize, false);
                    }
                    if let Some(s) = qp.sacked.get_mut(sack as usize) {
                        *s = true;
                    }
                    // Selective repeat: resend the missing packet once (a lost
                    // retransmission is recovered by the timeout).
                    if psn < qp.snd_nxt && !qp.resent.contains(&psn) {
                        qp.retx.insert(psn);
                    }
                } else if psn < qp.snd_nxt {
                    qp.retransmits += (qp.snd_nxt - psn) as u64;
                    qp.snd_nxt = psn;
                }
            }
            _ => {
                if psn + 1 > qp.snd_una {
                    qp.snd_una = (psn + 1).min(qp.packets);
                    qp.last_progress = now;
                }
            }
        }
        // Late ACKs of packets sent before a go-back may pass snd_nxt.
        qp.snd_nxt = qp.snd_nxt.max(qp.snd_una);
        let una = qp.snd_una;
        qp.retx.retain(|&p| p >= una);
        qp.resent.retain(|&p| p >= una);
        if qp.snd_una >= qp.packets && qp.acked_at.is_none() {
            qp.acked_at = Some(now);
        }
    }

    fn on_cnp(&mut self, now: Nanos, qpn: u32) {
        let cfg = self.cfg.dcqcn;
        let Some(i) = self.qp_index(qpn) else { return };
        let line = self.nic.rate().bps() as f64;
        let qp = &mut self.send[i];
        qp.cnps += 1;
        if !cfg.enabled {
            return;
        }
        Self::cc_advance(&cfg, qp, now, line);
        if qp.cc.last_decrease.is_none_or(|t| now >= t + cfg.decrease_interval) {
            qp.cc.target = qp.rate;
            qp.rate = (qp.rate * (1.0 - qp.cc.alpha / 2.0)).max(cfg.min_rate.bps() as f64);
            qp.cc.alpha = (1.0 - cfg.g) * qp.cc.alpha + cfg.g;
            qp.cc.last_decrease = Some(now);
            qp.cc.alpha_at = now;
            qp.cc.stage = 0;
            qp.cc.increase_at = now + cfg.rp_timer;
        }
    }

    /// Applies alpha decay and timer-driven rate increases up to `now`.
    fn cc_advance(cfg: &DcqcnConfig, qp: &mut SendQp, now: Nanos, line: f64) {
        if !cfg.enabled {
            return;
        }
        if now > qp.cc.alpha_at && cfg.alpha_interval > 0 {
            let k = (now - qp.cc.alpha_at) / cfg.alpha_interval;
            if k > 0 {
                qp.cc.alpha *= (1.0 - cfg.g).powi(k.min(1 << 20) as i32);
                qp.cc.alpha_at += k * cfg.alpha_interval;
            }
        }
        // Timer-driven increase, staged as in the ConWeave/HPCC ns-3 RNIC
        // model: stages below F are fast recovery, stage F additive, later
        // stages hyper increase.
        while cfg.rp_timer > 0 && now >= qp.cc.increase_at && qp.rate < line {
            let stage = qp.cc.stage;
            qp.cc.stage += 1;
            if stage == cfg.fast_recovery_stages {
                qp.cc.target = (qp.cc.target + cfg.rai.bps() as f64).min(line);
            } else if stage > cfg.fast_recovery_stages {
                qp.cc.target = (qp.cc.target + cfg.rhai.bps() as f64).min(line);
            }
            qp.rate = ((qp.rate + qp.cc.target) / 2.0).min(line);
            qp.cc.increase_at += cfg.rp_timer;
        }
        if qp.rate >= line {
            qp.cc.increase_at = qp.cc.increase_at.max(now);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_data(&mut self, now: Nanos, src: Ipv4Address, ce: bool, qpn: u32, psn: u32, payload: u64, reth: Option<Reth>) {
        let irn = matches!(self.cfg.recovery, Recovery::Irn { .. });
        let (nak_interval, cnp_interval) = (self.cfg.nak_interval, self.cfg.dcqcn.cnp_interval);
        let p = self.cfg.payload as u64;
        let r = self.recv.entry(qpn).or_default();
        r.packets += 1;
        r.first_arrival.get_or_insert(now);
        if let Some(reth) = reth {
            r.length = reth.dma_len as u64;
        }
        let mut cnp = false;
        if ce {
            r.ecn_marks += 1;
            cnp = r.last_cnp.is_none_or(|t| now >= t + cnp_interval);
        }
        let mut reply = None;
        if psn == r.epsn {
            r.bytes += payload;
            r.epsn += 1;
            if irn {
                while r.held.get(r.epsn as usize).copied().unwrap_or(false) {
                    r.bytes += p.min(r.length.saturating_sub(r.bytes));
                    r.epsn += 1;
                }
            }
            reply = Some((AethKind::Ack { credits: 31 }, r.epsn - 1, 0));
        } else if psn > r.epsn {
            r.out_of_order += 1;
            if irn {
                if r.held.len() <= psn as usize {
                    r.held.resize(psn as usize + 1, false);
                }
                r.held[psn as usize] = true;
                reply = Some((AethKind::Nak(Aeth::NAK_PSN_SEQUENCE_ERROR), r.epsn, psn));
                r.naks += 1;
                cnp = true;
            } else if r.last_nak.is_none_or(|(t, e)| e != r.epsn || now >= t + nak_interval) {
                // A NAK per sequence error, repeated after `nak_interval` (as
                // the ConWeave/HPCC ns-3 RNIC model does).
                r.last_nak = Some((now, r.epsn));
                r.naks += 1;
                reply = Some((AethKind::Nak(Aeth::NAK_PSN_SEQUENCE_ERROR), r.epsn, 0));
                cnp = true;
            }
        } else {
            reply = Some((AethKind::Ack { credits: 31 }, r.epsn.saturating_sub(1), 0));
        }
        if r.length > 0 && r.bytes >= r.length && r.completed.is_none() {
            r.completed = Some(now);
        }
        if cnp && self.cfg.dcqcn.enabled {
            r.cnps += 1;
            r.last_cnp = Some(now);
        }
        let gw = EthernetAddress::default(); // filled in by the NIC
        if let Some((kind, apsn, msn)) = reply {
            let f = self.control_frame(gw, src, qpn, Opcode::Acknowledge, apsn, Some(Aeth { kind, msn }));
            self.nic.push_routed(now, f);
        }
        if cnp && self.cfg.dcqcn.enabled {
            let f = self.control_frame(gw, src, qpn, Opcode::Cnp, 0, None);
            self.nic.push_routed(now, f);
        }
    }

    fn control_frame(&self, gw: EthernetAddress, dst: Ipv4Address, qpn: u32, opcode: Opcode, psn: u32, aeth: Option<Aeth>) -> BytesMut {
        let ext = if aeth.is_some() { roce::AETH_LEN } else { roce::CNP_PAYLOAD_LEN };
        let l4 = udp::HEADER_LEN + roce::BTH_LEN + ext + roce::ICRC_LEN;
        let mut b = BytesMut::zeroed(ethernet::HEADER_LEN + ipv4::HEADER_LEN + l4);
        self.headers(&mut b, gw, dst, CONTROL_DSCP, false, 0xc000 ^ (qpn as u16), l4);
        let o = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;
        BthRepr { opcode, solicited: false, pad: 0, pkey: roce::DEFAULT_PKEY, dest_qp: qpn, ack_req: false, psn, reserved15: 0 }
            .emit(&mut b[o..]);
        if let Some(a) = aeth {
            a.emit(&mut b[o + roce::BTH_LEN..]);
        }
        let _ = roce::fill_icrc(&mut b[ethernet::HEADER_LEN..]);
        b
    }

    #[allow(clippy::too_many_arguments)]
    fn headers(&self, b: &mut [u8], gw: EthernetAddress, dst: Ipv4Address, dscp: u8, ect: bool, sport: u16, l4: usize) {
        ethernet::Repr { dst: gw, src: self.nic.mac, vlan_tci: None, ethertype: EtherType::Ipv4 }.emit(b);
        ipv4::Repr {
            src: self.nic.ip,
            dst,
            protocol: ipv4::Protocol::Udp,
            dscp,
            ecn: if ect { ipv4::Ecn::Ect0 } else { ipv4::Ecn::NotEct },
            ident: 0,
            ttl: 64,
            payload_len: l4,
        }
        .emit(&mut b[ethernet::HEADER_LEN..]);
        udp::Repr { src_port: sport, dst_port: udp::ROCEV2_PORT, payload_len: l4 - udp::HEADER_LEN }
            .emit(&mut b[ethernet::HEADER_LEN + ipv4::HEADER_LEN..]);
    }

    fn data_frame(&self, gw: EthernetAddress, qp: &SendQp, psn: u32) -> BytesMut {
        let len = self.wire_len(qp, psn);
        let l4 = len - ethernet::HEADER_LEN - ipv4::HEADER_LEN;
        let mut b = BytesMut::zeroed(len);
        self.headers(&mut b, gw, qp.flow.dst, qp.flow.dscp, true, qp.flow.src_port, l4);
        let opcode = match (psn == 0, psn + 1 == qp.packets) {
            (true, true) => Opcode::WriteOnly,
            (true, false) => Opcode::WriteFirst,
            (false, true) => Opcode::WriteLast,
            (false, false) => Opcode::WriteMiddle,
        };
        let o = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;
        let qpn = qp.flow.id.0 + 1;
        BthRepr { opcode, solicited: false, pad: 0, pkey: roce::DEFAULT_PKEY, dest_qp: qpn, ack_req: true, psn, reserved15: 0 }
            .emit(&mut b[o..]);
        if opcode.has_reth() {
            Reth { virtual_addr: 0x1000, rkey: qpn, dma_len: qp.flow.size.min(u32::MAX as u64) as u32 }.emit(&mut b[o + roce::BTH_LEN..]);
        }
        let _ = roce::fill_icrc(&mut b[ethernet::HEADER_LEN..]);
        b
    }

    /// What QP `i` would send next at `now`, if anything: (psn, is retransmission).
    fn next_packet(&self, i: usize, now: Nanos) -> Option<(u32, bool)> {
        let qp = &self.send[i];
        if qp.flow.start > now || qp.next_send > now || qp.snd_una >= qp.packets {
            return None;
        }
        if self.nic.paused_until(qp.flow.dscp >> 3) > now {
            return None;
        }
        if let Some(&p) = qp.retx.iter().next() {
            return Some((p, true));
        }
        if qp.snd_nxt >= qp.packets {
            return None;
        }
        if let Recovery::Irn { bdp_bytes, .. } = self.cfg.recovery {
            let next = self.wire_len(qp, qp.snd_nxt) as u64;
            if self.in_flight_bytes(qp) + next > bdp_bytes {
                return None;
            }
        }
        Some((qp.snd_nxt, false))
    }

    fn pump(&mut self, now: Nanos, out: &mut Vec<Transmit>) {
        let send = &self.send;
        self.active.retain(|&i| send[i].snd_una < send[i].packets);
        // Go-Back-N timeout.
        if self.cfg.recovery == Recovery::GoBackN {
            let rto = self.cfg.gbn_timeout;
            for &i in &self.active {
                let qp = &mut self.send[i];
                if qp.snd_una < qp.snd_nxt && now >= qp.last_progress + rto {
                    qp.retransmits += (qp.snd_nxt - qp.snd_una) as u64;
                    qp.snd_nxt = qp.snd_una;
                    qp.last_progress = now;
                }
            }
        }
        // IRN retransmission timeouts.
        if let Recovery::Irn { rto_low, rto_high, .. } = self.cfg.recovery {
            for &i in &self.active {
                let qp = &mut self.send[i];
                if qp.snd_una < qp.snd_nxt {
                    let rto = if qp.snd_nxt - qp.snd_una <= 3 { rto_low } else { rto_high };
                    if now >= qp.last_progress + rto {
                        let una = qp.snd_una;
                        if qp.sacked.len() < qp.snd_nxt as usize {
                            qp.sacked.resize(qp.snd_nxt as usize, false);
                        }
                        for p in una..qp.snd_nxt {
                            if !qp.sacked[p as usize] {
                                qp.retx.insert(p);
                            }
                        }
                        qp.resent.clear();
                        qp.last_progress = now;
                    }
                }
            }
        }
        if !self.nic.send_control(now, out) && !self.nic.is_busy(now) {
            let line = self.nic.rate().bps() as f64;
            let n = self.active.len();
            let ready = (0..n).map(|k| self.active[(self.rr + k) % n.max(1)]).find(|&i| self.next_packet(i, now).is_some());
            if let Some(i) = ready {
                match self.nic.gateway_mac(now) {
                    None => {
                        self.nic.send_control(now, out);
                    }
                    Some(gw) => {
                        let cfg = self.cfg.dcqcn;
                        Self::cc_advance(&cfg, &mut self.send[i], now, line);
                        if let Some((psn, retx)) = self.next_packet(i, now) {
                            let f = self.data_frame(gw, &self.send[i], psn);
                            let len = f.len();
                            self.nic.transmit(now, f, out);
                            let in_flight = self.in_flight_bytes(&self.send[i]);
                            let qp = &mut self.send[i];
                            if retx {
                                qp.retx.remove(&psn);
                                qp.resent.insert(psn);
                                qp.retransmits += 1;
                            } else {
                                qp.snd_nxt += 1;
                            }
                            qp.first_sent.get_or_insert(now);
                            if qp.snd_una == qp.snd_nxt.saturating_sub(1) && !retx {
                                qp.last_progress = now;
                            }
                            qp.max_in_flight = qp.max_in_flight.max(in_flight + if retx { 0 } else { len as u64 });
                            qp.next_send = now + BitRate(qp.rate.max(1.0) as u64).serialization_ns(len);
                            self.rr = (self.active.iter().position(|&a| a == i).unwrap_or(0) + 1) % n.max(1);
                        }
                    }
                }
            }
        }
        // Next wakeup.
        let mut next: Option<Nanos> = None;
        let mut consider = |t: Nanos| next = Some(next.map_or(t, |x: Nanos| x.min(t)));
        if self.nic.is_busy(now) || self.nic.has_control() {
            consider(self.nic.busy_until().max(now + if self.nic.is_busy(now) { 0 } else { 1 }));
        }
        if let Some(t) = self.nic.arp_retry_at() {
            if !self.active.is_empty() {
                consider(t);
            }
        }
        let irn_rto = match self.cfg.recovery {
            Recovery::Irn { rto_low, rto_high, .. } => Some((rto_low, rto_high)),
            Recovery::GoBackN => None,
        };
        for &i in &self.active {
            let qp = &self.send[i];
            let class = qp.flow.dscp >> 3;
            let mut t = qp.next_send.max(qp.flow.start).max(now.min(self.nic.busy_until()));
            if self.nic.paused_until(class) > t {
                t = self.nic.paused_until(class);
            }
            let has_work = !qp.retx.is_empty() || qp.snd_nxt < qp.packets;
            if has_work && t > now {
                consider(t);
            } else if has_work && !self.nic.is_busy(now) {
                // Blocked by the BDP window: an ACK or the RTO wakes it.
            }
            if qp.snd_una < qp.snd_nxt {
                match irn_rto {
                    Some((lo, hi)) => consider(qp.last_progress + if qp.snd_nxt - qp.snd_una <= 3 { lo } else { hi }),
                    None => consider(qp.last_progress + self.cfg.gbn_timeout),
                }
            }
        }
        if self.nic.is_busy(now) && !self.active.is_empty() {
            consider(self.nic.busy_until());
        }
        self.timer = next;
    }
}
