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

pub mod nic;
pub mod roce;
pub mod tcp;
pub mod udp;

pub use nic::{HostCounters, HostError, Nic};
pub use roce::{RoceConfig, RoceFlow, RoceHost};
pub use tcp::{CongestionControl, TcpConfig, TcpFlow, TcpHost};
pub use udp::{FlowStats, UdpFlow, UdpHost, UdpMode};
