//! What every node emits: a frame leaving one of its ports, with the
//! instants its first and last bit are on the wire (the drivers deliver it
//! at `end` + the link's delay). Switches and hosts both produce it; neither
//! depends on the other for it.

use bytes::BytesMut;
use weft_wire::ids::PortId;
use weft_wire::time::Nanos;

/// A frame leaving a port.
#[derive(Debug)]
pub struct Transmit {
    /// Egress port.
    pub port: PortId,
    /// The frame.
    pub frame: BytesMut,
    /// First bit on the wire.
    pub start: Nanos,
    /// Last bit on the wire.
    pub end: Nanos,
}
