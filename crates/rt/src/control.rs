//! The control protocol between the orchestrator (`weft`) and emu-node
//! processes (docs/REALTIME.md): messages, and the one codec module.
//!
//! Transport: one bidirectional QUIC stream per emu-node, TLS 1.3 with the
//! fabric certificate pinned by the emu-node ([`crate::tls`]); the first
//! message must be a [`ToOrchestrator::Hello`] with the per-fabric token,
//! or the orchestrator answers [`ToNode::Refused`] and closes. Messages are
//! serde + bincode 2 (standard configuration), each prefixed with its
//! length (u32, big-endian, at most [`MAX_MESSAGE`]). Only [`encode`] and
//! [`decode`] know the codec, so it can be swapped (e.g. for postcard)
//! without touching callers.

use crate::link::LinkChange;
use crate::runtime::{LinkAddrs, ProcessPlan, ProcessReport};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use weft_wire::ids::{LinkId, NodeId};

/// Largest accepted message.
pub const MAX_MESSAGE: usize = 64 << 20;
/// Largest accepted first message (a [`ToOrchestrator::Hello`]): before a
/// client has shown the token, it may not make the orchestrator allocate
/// more than this.
pub const MAX_HELLO: usize = 4 << 10;
/// How long a new control connection may take to send its Hello.
pub const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Protocol version (Hello carries it).
pub const PROTOCOL_VERSION: u32 = 4;

/// Control-channel errors.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Encoding failed.
    #[error("encode: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    /// Decoding failed.
    #[error("malformed control message: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// Oversized message.
    #[error("control message of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// A frame with bytes after its message.
    #[error("malformed control message: {used} of its {len} bytes make a message")]
    Trailing {
        /// Bytes the message took.
        used: usize,
        /// Bytes of the frame.
        len: usize,
    },
    /// Stream read failed.
    #[error("control stream: {0}")]
    Read(#[from] quinn::ReadExactError),
    /// Stream write failed.
    #[error("control stream: {0}")]
    Write(#[from] quinn::WriteError),
    /// No first message in time.
    #[error("no Hello within {} s", HELLO_TIMEOUT.as_secs())]
    Timeout,
}

/// Messages from an emu-node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToOrchestrator {
    /// First message: who I am, and the fabric token.
    Hello {
        /// Per-fabric token.
        token: String,
        /// Process index the orchestrator gave on the command line.
        process: u32,
        /// OS process id.
        pid: u32,
        /// [`PROTOCOL_VERSION`].
        version: u32,
    },
    /// Actors, TAP hosts and link sockets are ready.
    Bound(LinkAddrs),
    /// Links connected; the process runs.
    Running,
    /// A health report.
    Report(Box<ProcessReport>),
    /// A capture started (true) or no end of the link is here (false).
    CaptureStarted(bool),
    /// Something failed; the process stops.
    Failed(String),
    /// Answer to [`ToNode::ClockProbe`], sent at once: the probe's time and
    /// this process's clock ([`crate::clock::monotonic_ns`]).
    ClockEcho {
        /// The probe's `sent`.
        sent: u64,
        /// This process's clock when it answered.
        remote: u64,
    },
    /// Answer to [`ToNode::Finish`]: the results of the switches run here,
    /// as the JSON of `summary.json`'s `switches` (that schema flattens
    /// queue counters, which bincode cannot encode).
    Finished(String),
    /// A capture could not start (e.g. its file cannot be created); the
    /// process goes on.
    CaptureRefused(String),
}

/// Messages to an emu-node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToNode {
    /// Bad token or version.
    Refused(String),
    /// Clock-offset estimation (before the plan, only for processes on
    /// other machines): answer with [`ToOrchestrator::ClockEcho`] at once.
    ClockProbe {
        /// The orchestrator's clock when it sent this.
        sent: u64,
    },
    /// What to run.
    Plan(Box<ProcessPlan>),
    /// Link addresses of every process.
    Peers(Vec<LinkAddrs>),
    /// Change a link.
    SetLink {
        /// Link.
        link: LinkId,
        /// Change.
        change: LinkChange,
    },
    /// Restart a switch that runs here (it loses its register state).
    RestartNode {
        /// The switch.
        node: NodeId,
    },
    /// Capture a link into a pcap file.
    Capture {
        /// Link.
        link: LinkId,
        /// Output path.
        path: String,
        /// Frames to capture.
        count: u64,
    },
    /// Send a report now.
    ReportNow,
    /// Stop: clean up and exit.
    Stop,
    /// Stop, send the switches' results, exit.
    Finish,
}

/// Encodes `msg` as one length-prefixed frame.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ControlError> {
    let body = bincode::serde::encode_to_vec(msg, bincode::config::standard())?;
    if body.len() > MAX_MESSAGE {
        return Err(ControlError::TooLarge(body.len()));
    }
    let mut v = Vec::with_capacity(4 + body.len());
    v.extend_from_slice(&(body.len() as u32).to_be_bytes());
    v.extend_from_slice(&body);
    Ok(v)
}

/// Decodes one message body (without the length prefix). The decoder may
/// claim at most [`MAX_MESSAGE`] bytes for the collections a message
/// announces: without that limit six bytes announcing a 4 GiB vector make
/// it allocate 4 GiB (found by the `control_messages` fuzz target). A body
/// with bytes after its message is refused: a frame holds one message.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ControlError> {
    let config = bincode::config::standard().with_limit::<MAX_MESSAGE>();
    let (v, used) = bincode::serde::decode_from_slice(body, config)?;
    if used != body.len() {
        return Err(ControlError::Trailing { used, len: body.len() });
    }
    Ok(v)
}

/// Writes one message to a QUIC stream.
pub async fn send<T: Serialize>(s: &mut quinn::SendStream, msg: &T) -> Result<(), ControlError> {
    s.write_all(&encode(msg)?).await?;
    Ok(())
}

/// Reads one message from a QUIC stream.
pub async fn recv<T: DeserializeOwned>(r: &mut quinn::RecvStream) -> Result<T, ControlError> {
    recv_at_most(r, MAX_MESSAGE).await
}

/// Reads the first message of a new connection: at most [`MAX_HELLO`]
/// bytes within [`HELLO_TIMEOUT`] (a client that sends nothing, or
/// announces a huge message, is refused without holding anything).
pub async fn recv_hello(r: &mut quinn::RecvStream) -> Result<ToOrchestrator, ControlError> {
    tokio::time::timeout(HELLO_TIMEOUT, recv_at_most(r, MAX_HELLO)).await.map_err(|_| ControlError::Timeout)?
}

async fn recv_at_most<T: DeserializeOwned>(r: &mut quinn::RecvStream, max: usize) -> Result<T, ControlError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let n = u32::from_be_bytes(len) as usize;
    if n > max {
        return Err(ControlError::TooLarge(n));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).await?;
    decode(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let m = ToNode::SetLink { link: LinkId(3), change: LinkChange::Rate(weft_wire::time::BitRate::mbps(100)) };
        let bytes = encode(&m).unwrap();
        let back: ToNode = decode(&bytes[4..]).unwrap();
        assert!(
            matches!(back, ToNode::SetLink { link: LinkId(3), change: LinkChange::Rate(r) } if r == weft_wire::time::BitRate::mbps(100))
        );
        assert!(decode::<ToNode>(&[0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn a_message_announcing_a_huge_collection_is_refused_without_allocating_it() {
        // Fuzz finding: six bytes whose string claims ~4 G bytes (it was a
        // `Capture` path when `Capture` was variant 5). Built from the
        // variant's own encoding, so that new variants do not move it: a
        // `Capture` of link 3 whose path length says 0xf000_0000.
        let capture = encode(&ToNode::Capture { link: LinkId(3), path: String::new(), count: 0 }).unwrap();
        let body = [capture[4], 0x03, 0xfc, 0x00, 0x00, 0x00, 0xf0];
        let refused = decode::<ToNode>(&body);
        assert!(matches!(refused, Err(ControlError::Decode(bincode::error::DecodeError::LimitExceeded))), "{refused:?}");
    }

    #[test]
    fn a_frame_with_bytes_after_its_message_is_refused() {
        let mut ok = encode(&ToNode::ReportNow).unwrap();
        assert!(matches!(decode::<ToNode>(&ok[4..]), Ok(ToNode::ReportNow)));
        ok.push(0);
        assert!(matches!(decode::<ToNode>(&ok[4..]), Err(ControlError::Trailing { used: 1, len: 2 })));
    }
}
