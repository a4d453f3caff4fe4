//! Synthetic endpoints: sans-IO hosts with the same shape as the switch
//! (`handle_frame`, `handle_timeout`, `poll_timeout`, outputs into a
//! caller-owned buffer). No clock, no socket, no global RNG.
//!
//! - [`nic`]: the interface every host has (serializer, ARP, PFC, control
//!   frames);
//! - [`roce`]: RoCEv2 RC queue pairs with DCQCN, Go-Back-N or IRN;
//! - [`tcp`]: TCP NewReno / DCTCP;
//! - [`udp`]: UDP flows (fixed size or constant bit rate) with a probe
//!   header, used to exercise forwarding, queues, ECN and PFC.

/// The link rate the transports' default parameters are given for (docs/SCHEMES.md#parameter-scaling; docs/HOSTS.md:
/// the ConWeave evaluation's 100 Gbit/s hosts). Runs on other
/// rates scale rates by `rate / REFERENCE_RATE` and, where asked, times by
/// its inverse.
pub const REFERENCE_RATE: weft_wire::time::BitRate = weft_wire::time::BitRate::gbps(100);

/// The accessors and timer plumbing every synthetic host shares. A host
/// type has the fields `id`, `name`, `nic` and `timer` and a method
/// `pump(&mut self, now, out)` that sends what it can and re-arms `timer`.
macro_rules! host_common {
    ($host:ty) => {
        impl $host {
            /// Node id.
            pub fn id(&self) -> weft_wire::ids::NodeId {
                self.id
            }
            /// Name.
            pub fn name(&self) -> &str {
                &self.name
            }
            /// Address.
            pub fn ip(&self) -> weft_wire::Ipv4Address {
                self.nic.ip
            }
            /// NIC line rate.
            pub fn rate(&self) -> weft_wire::time::BitRate {
                self.nic.rate()
            }
            /// Counters.
            pub fn counters(&self) -> &$crate::host::HostCounters {
                &self.nic.counters
            }
            /// The PFC frames the NIC received (empty unless enabled).
            pub fn pfc_log(&self) -> &$crate::pfc_log::PfcLog {
                &self.nic.pfc_log
            }
            /// The PFC log, to enable it.
            pub fn pfc_log_mut(&mut self) -> &mut $crate::pfc_log::PfcLog {
                &mut self.nic.pfc_log
            }
            /// The buffers of the frames received, kept for the frames
            /// sent next.
            pub fn frame_pool(&self) -> &weft_wire::buffer::FramePool {
                &self.nic.frames
            }
            /// The frame pool, to set its tail policy before a run.
            pub fn frame_pool_mut(&mut self) -> &mut weft_wire::buffer::FramePool {
                &mut self.nic.frames
            }
            /// The next time `handle_timeout` must be called.
            #[must_use]
            pub fn poll_timeout(&self) -> Option<weft_wire::time::Nanos> {
                self.timer
            }
            /// Timers due at `now`.
            pub fn handle_timeout(&mut self, now: weft_wire::time::Nanos, out: &mut Vec<$crate::transmit::Transmit>) {
                self.pump(now, out);
            }
            /// The link's rate changed (degraded or restored).
            pub fn set_port_rate(&mut self, now: weft_wire::time::Nanos, rate: weft_wire::time::BitRate) {
                self.nic.set_rate(now, rate);
            }
        }
    };
}
pub(crate) use host_common;

/// TTL of every frame a synthetic host sends.
pub(crate) const TTL: u8 = 64;

pub mod nic;
pub mod rank_set;
pub mod roce;
pub mod tcp;
pub mod udp;

pub use nic::{HostCounters, HostError, Nic};
pub use roce::{RoceConfig, RoceHost};
pub use tcp::{CongestionControl, RtoRule, TcpConfig, TcpHost};

/// A fixed-size transfer for a transport host (RoCEv2 message or TCP
/// stream). RoCE: the QP number is `id + 1` on both ends and `src_port` is
/// the UDP source port an RNIC derives from the QP. TCP: the destination
/// port is `10000 + id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SizedFlow {
    /// Run-wide flow id.
    pub id: weft_wire::ids::FlowId,
    /// Destination.
    pub dst: weft_wire::Ipv4Address,
    /// Bytes to transfer.
    pub size: u64,
    /// Start time.
    pub start: weft_wire::time::Nanos,
    /// Source port.
    pub src_port: u16,
    /// DSCP of data packets.
    pub dscp: u8,
    /// TCP: the application writes the flow's bytes at this rate (iperf3
    /// `-b`): the sender never sends bytes not yet written. `None`: all
    /// at the start.
    pub app_rate: Option<weft_wire::time::BitRate>,
    /// TCP: the socket buffer (iperf3 `-w`): bytes in flight never exceed
    /// it, whatever the windows. `None`: only cwnd and the receive window.
    pub socket_window: Option<u64>,
}

impl SizedFlow {
    /// A flow of `size` bytes to `dst` from `start`, sent as fast as the
    /// transport allows (no application rate, no socket window).
    pub fn new(
        id: weft_wire::ids::FlowId,
        dst: weft_wire::Ipv4Address,
        size: u64,
        start: weft_wire::time::Nanos,
        src_port: u16,
        dscp: u8,
    ) -> Self {
        SizedFlow { id, dst, size, start, src_port, dscp, app_rate: None, socket_window: None }
    }

    /// Bytes the application has written by `now` (all of them without an
    /// application rate).
    pub fn written_by(&self, now: weft_wire::time::Nanos) -> u64 {
        match self.app_rate {
            None => self.size,
            Some(r) => {
                let bits = r.bps() as u128 * now.saturating_sub(self.start) as u128 / 1_000_000_000;
                ((bits / 8) as u64).min(self.size)
            }
        }
    }

    /// The first time at which at least `bytes` are written.
    pub fn written_at(&self, bytes: u64) -> weft_wire::time::Nanos {
        match self.app_rate {
            Some(r) if r.bps() > 0 => {
                let ns = (bytes.min(self.size) as u128 * 8 * 1_000_000_000).div_ceil(r.bps() as u128);
                self.start.saturating_add(ns.min(u64::MAX as u128) as u64)
            }
            _ => self.start,
        }
    }
}
pub use udp::{FlowStats, UdpFlow, UdpHost, UdpMode};
