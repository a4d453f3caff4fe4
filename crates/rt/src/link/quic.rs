//! QUIC settings for weft links and the control channel.
//!
//! Emulated links must not be shaped by QUIC: [`Unthrottled`] is a
//! congestion controller with a fixed, huge window, so quinn neither
//! reduces its window on loss nor paces below line rate; the emulated
//! port's serializer is the only rate limit. Frames ride in QUIC datagrams
//! (unreliable, unordered: loss is counted, never retransmitted), so the
//! MTU is raised for loopback (a 1500 B IP MTU frame + headers must fit).
//! UDP segmentation offload is off: with it, quinn on loopback lost several
//! per cent of the datagrams under load (measured: 2 000–16 000 of ~100 000
//! frames per iperf3 run; none without it), and TCP through the fabric
//! collapsed.

use quinn::congestion::{Controller, ControllerFactory};
use std::sync::Arc;
use std::time::Duration;

/// Congestion window of [`Unthrottled`] (bytes).
pub const UNTHROTTLED_WINDOW: u64 = 1 << 30;

/// A congestion controller that never throttles.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unthrottled;

impl Controller for Unthrottled {
    fn on_congestion_event(&mut self, _now: std::time::Instant, _sent: std::time::Instant, _persistent: bool, _lost: u64) {}
    fn on_mtu_update(&mut self, _mtu: u16) {}
    fn window(&self) -> u64 {
        UNTHROTTLED_WINDOW
    }
    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(*self)
    }
    fn initial_window(&self) -> u64 {
        UNTHROTTLED_WINDOW
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

impl ControllerFactory for Unthrottled {
    fn build(self: Arc<Self>, _now: std::time::Instant, _mtu: u16) -> Box<dyn Controller> {
        Box::new(Unthrottled)
    }
}

/// UDP payload size used on loopback links (fits a 9000 B jumbo frame).
pub const LINK_UDP_PAYLOAD: u16 = 9200;

/// Transport settings of data links: datagrams, no congestion control,
/// large MTU, generous buffers, keep-alive.
pub fn link_transport() -> Arc<quinn::TransportConfig> {
    link_transport_for(LINK_UDP_PAYLOAD)
}

/// [`link_transport`] for a network whose datagrams carry at most
/// `udp_payload` bytes: quinn packs several DATAGRAM frames into one
/// packet, and a packet larger than the network's MTU is dropped whole
/// (quinn sets DF), so between machines the packet size follows the
/// interface's MTU (at most [`LINK_UDP_PAYLOAD`]).
pub fn link_transport_for(udp_payload: u16) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.congestion_controller_factory(Arc::new(Unthrottled));
    t.initial_mtu(udp_payload.clamp(1200, LINK_UDP_PAYLOAD));
    t.mtu_discovery_config(None);
    t.datagram_receive_buffer_size(Some(64 << 20));
    t.datagram_send_buffer_size(64 << 20);
    t.keep_alive_interval(Some(Duration::from_millis(500)));
    t.enable_segmentation_offload(false);
    t.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(OUTAGE_GRACE.as_millis() as u32))));
    Arc::new(t)
}

/// How long a peer may not answer at all before a QUIC connection to it (a
/// link's, the control channel's) ends: an underlay outage shorter than
/// this is survived, and the fabric goes on when the network comes back. A
/// dead process is noticed sooner by its exit (the orchestrator watches its
/// children and ssh sessions), and a silent one is reported after 2 s by
/// the orchestrator.
pub const OUTAGE_GRACE: Duration = Duration::from_secs(30);

/// Transport settings of the control channel (streams, defaults, keep-alive
/// every 300 ms, idle timeout [`OUTAGE_GRACE`]).
pub fn control_transport() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(Duration::from_millis(300)));
    t.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(OUTAGE_GRACE.as_millis() as u32))));
    Arc::new(t)
}

/// Endpoint settings allowing large UDP payloads.
pub fn endpoint_config() -> quinn::EndpointConfig {
    let mut e = quinn::EndpointConfig::default();
    let _ = e.max_udp_payload_size(LINK_UDP_PAYLOAD + 28);
    e
}
