//! Synthetic endpoints: sans-IO hosts with the same shape as the switch
//! (`handle_frame`, `handle_timeout`, `poll_timeout`, outputs into a
//! caller-owned buffer). No clock, no socket, no global RNG.
//!
//! - [`udp`]: UDP flows (fixed size or constant bit rate) with a probe
//!   header, used to exercise forwarding, queues, ECN and PFC.

pub mod udp;

pub use udp::{FlowStats, UdpFlow, UdpHost, UdpMode};
