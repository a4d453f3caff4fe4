//! The edge guard: what a fabric admits from a real host (docs/ARCHITECTURE.md#input-from-outside).
//!
//! Synthetic hosts are weft's own code; a real host (a TAP device in a
//! network namespace, a soft-RoCE VM) runs whatever its user runs, buggy or
//! hostile. Every frame such a host sends passes [`EdgeGuard::check`]
//! before it reaches its ToR's port, and a frame that fails is counted
//! under its [`Rejection`] cause and never enters the fabric:
//!
//! - **malformed**: truncated or inconsistent headers ([`FrameInfo::parse`]
//!   fails, e.g. an IPv4 total length beyond the frame), a bad IPv4 header
//!   checksum, a RoCEv2 packet whose ICRC does not match (a real host's
//!   frames have no FCS here; the ICRC is the integrity check its RNIC
//!   computed, and a switch would drop a frame whose FCS failed);
//! - **oversize**: longer than the access link's MTU (plus the Ethernet
//!   header and one VLAN tag);
//! - **unknown EtherType** (neither IPv4 nor ARP) and **PFC**: a real
//!   host's NIC model has no PFC, so a host cannot pause its ToR's port;
//! - **spoofed source**: a source MAC, IPv4 source or ARP sender that is
//!   not the host's own (from the plan);
//! - **fabric control**: anything a switch would take for traffic of the
//!   fabric itself rather than of a host. This is how the edge keeps hosts
//!   from forging control packets of the schemes:
//!   the control EtherTypes (LBSP messages and P4TE feedback, 0x88b6; the
//!   packet generator's, 0x88b5, which ConWeave's resume timers use); IPv4
//!   to a switch's own address (169.254.0.0/16, where programs take their
//!   control messages, e.g. CONGA's overlay); the INT shim's protocol
//!   (253, INT best-nexthop's probes and telemetry); an IPv4 option of
//!   P4TE's hop header (type 30: its FACKs and hop timestamps); a VXLAN
//!   datagram (UDP 4789, CONGA's overlay with its congestion feedback);
//!   and a RoCEv2 packet with any of the 15 reserved BTH bits set (the
//!   ConWeave header: RTT_REQUEST/REPLY, NOTIFY, CLEAR, TAIL, reroute
//!   marks; a real RNIC sends them as zero, IBTA vol. 1 §9.2).
//!
//! Invariant: a frame that passes is a plain IPv4 or ARP frame of the host
//! itself that no switch program treats as control-plane traffic; the
//! check never panics on any input and reads the frame only.

use crate::fabric::HostSpec;
use weft_wire::frame::{FrameInfo, FrameKind};
use weft_wire::{arp, ethernet, int, ipv4, lbsp, p4te, roce, udp, EthernetAddress, Ipv4Address};

/// Why a real host's frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rejection {
    /// Truncated or inconsistent headers.
    Malformed,
    /// IPv4 header checksum wrong.
    BadIpv4Checksum,
    /// RoCEv2 ICRC wrong.
    BadIcrc,
    /// Longer than the access link's MTU.
    Oversize,
    /// Neither IPv4 nor ARP (nor a control EtherType of the fabric).
    UnknownEthertype,
    /// A PFC (MAC control) frame.
    Pfc,
    /// Source MAC, IPv4 source or ARP sender not the host's.
    SpoofedSource,
    /// A frame of the fabric's own control plane (see the module doc).
    FabricControl,
}

impl Rejection {
    /// Every cause, in the order of [`Rejection::index`].
    pub const ALL: [Rejection; 8] = [
        Rejection::Malformed,
        Rejection::BadIpv4Checksum,
        Rejection::BadIcrc,
        Rejection::Oversize,
        Rejection::UnknownEthertype,
        Rejection::Pfc,
        Rejection::SpoofedSource,
        Rejection::FabricControl,
    ];

    /// Position in [`Rejection::ALL`] (for counter arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The cause's label in metrics.
    pub fn label(self) -> &'static str {
        match self {
            Rejection::Malformed => "malformed",
            Rejection::BadIpv4Checksum => "bad_ipv4_checksum",
            Rejection::BadIcrc => "bad_icrc",
            Rejection::Oversize => "oversize",
            Rejection::UnknownEthertype => "unknown_ethertype",
            Rejection::Pfc => "pfc",
            Rejection::SpoofedSource => "spoofed_source",
            Rejection::FabricControl => "fabric_control",
        }
    }
}

/// The generator EtherType (ConWeave's timer packets).
const GENERATOR_ETHERTYPE: u16 = weft_tofino::program::GENERATOR_ETHERTYPE;
/// The first octets of switch addresses ([`crate::fabric::switch_address`]).
const SWITCH_NET: [u8; 2] = [169, 254];

/// The edge check of one real host.
#[derive(Debug, Clone, Copy)]
pub struct EdgeGuard {
    ip: Ipv4Address,
    mac: EthernetAddress,
    max_len: usize,
}

impl EdgeGuard {
    /// The guard of host `spec` on an access link of `mtu` bytes.
    pub fn new(spec: &HostSpec, mtu: u16) -> Self {
        EdgeGuard { ip: spec.ip, mac: spec.mac, max_len: mtu as usize + ethernet::TAGGED_HEADER_LEN }
    }

    /// Whether the fabric admits `frame` from this host.
    pub fn check(&self, frame: &[u8]) -> Result<(), Rejection> {
        if frame.len() > self.max_len {
            return Err(Rejection::Oversize);
        }
        let eth = ethernet::Frame::new_checked(frame).map_err(|_| Rejection::Malformed)?;
        let ethertype = u16::from(eth.ethertype());
        if ethertype == lbsp::ETHERTYPE || ethertype == p4te::ETHERTYPE || ethertype == GENERATOR_ETHERTYPE {
            return Err(Rejection::FabricControl);
        }
        let info = match FrameInfo::parse(frame) {
            Ok(i) => i,
            Err(weft_wire::Error::Checksum(_)) => return Err(Rejection::BadIpv4Checksum),
            Err(_) => return Err(Rejection::Malformed),
        };
        if eth.src_addr() != self.mac {
            return Err(Rejection::SpoofedSource);
        }
        let l3 = info.l3_offset as usize;
        match info.kind {
            FrameKind::Pfc => Err(Rejection::Pfc),
            FrameKind::Other(_) => Err(Rejection::UnknownEthertype),
            FrameKind::Arp => {
                let a = arp::Repr::parse(&arp::Packet::new_checked(&frame[l3..]).map_err(|_| Rejection::Malformed)?);
                if a.sender_hw != self.mac || a.sender_ip != self.ip {
                    return Err(Rejection::SpoofedSource);
                }
                Ok(())
            }
            FrameKind::Ipv4 => {
                let Some(ip) = info.ip else { return Err(Rejection::Malformed) };
                if ip.src != self.ip {
                    return Err(Rejection::SpoofedSource);
                }
                let dst = ip.dst.0.to_be_bytes();
                let to_switch = dst[..2] == SWITCH_NET;
                let p4te_option = p4te::find(frame, l3).is_some();
                let vxlan = ip.protocol == u8::from(ipv4::Protocol::Udp) && ip.dst_port == udp::VXLAN_PORT;
                if to_switch || ip.protocol == int::PROTOCOL || p4te_option || vxlan {
                    return Err(Rejection::FabricControl);
                }
                if let Some(bth) = ip.bth_offset {
                    let b = roce::BthPacket::new_checked(&frame[bth as usize..]).map_err(|_| Rejection::Malformed)?;
                    if b.reserved15() != 0 {
                        return Err(Rejection::FabricControl);
                    }
                    if !roce::verify_icrc(&frame[l3..]).map_err(|_| Rejection::Malformed)? {
                        return Err(Rejection::BadIcrc);
                    }
                }
                Ok(())
            }
        }
    }
}

// Tests: crates/core/tests/edge.rs (with the hostile frames of weft-testkit).
