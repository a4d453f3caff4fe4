//! Links of the real-time driver (docs/REALTIME.md): where a frame goes when a
//! node's port sends it, and how frames arrive from other processes.
//!
//! - in-process: the peer actor gets the frame when it is due (held by the
//!   process's [`crate::clock::DeadlineScheduler`]);
//! - TAP: the frame is written to the host's TAP device when due;
//! - UDP and QUIC (quinn datagrams) between emu-node processes: the frame
//!   leaves at once with a [`header::LinkHeader`] carrying its due time; the
//!   receiving process holds it until then (all processes of a machine share
//!   `CLOCK_MONOTONIC`), so transport latency below the link's own
//!   serialization + delay does not add to the emulated delay.
//!
//! The rate is enforced by the sending port's serializer in the Tofino
//! model (or the TAP host's NIC model), never by the transport. QUIC runs
//! with [`quic::Unthrottled`] congestion control so quinn cannot throttle an
//! emulated link. Invariants: frames of one link direction keep their order
//! on in-process and TAP links; across processes, loss and reordering by the
//! transport are counted per direction ([`header::SequenceTracker`]) apart
//! from drops made by the emulated fabric.

pub mod auth;
pub mod header;
pub mod quic;
pub mod remote;

use serde::{Deserialize, Serialize};
use weft_wire::time::{BitRate, Nanos};

/// A runtime change of a link (`weft link`, topology schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkChange {
    /// Fails both directions.
    Down,
    /// Restores both directions.
    Up,
    /// Sets the rate.
    Rate(BitRate),
    /// Sets the one-way propagation delay.
    Delay(Nanos),
    /// Each direction loses frames at random with this probability, in
    /// parts per million (0: no loss; `weft_core::link_loss`).
    Loss(u32),
}

/// Which transport connects emu-node processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum InterProcess {
    /// QUIC datagrams (quinn), TLS with the fabric certificate.
    #[default]
    Quic,
    /// Plain UDP datagrams (fabric tag checked).
    Udp,
}

impl std::str::FromStr for InterProcess {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "quic" => Ok(InterProcess::Quic),
            "udp" => Ok(InterProcess::Udp),
            o => Err(format!("unknown link transport `{o}` (quic, udp)")),
        }
    }
}

impl std::fmt::Display for InterProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InterProcess::Quic => "quic",
            InterProcess::Udp => "udp",
        })
    }
}
