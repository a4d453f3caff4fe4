//! One-pass parse of a whole frame into the header offsets and fields a
//! switch pipeline needs (what a Tofino parser extracts into the PHV).
//!
//! [`FrameInfo::parse`] never panics on any input (fuzzed by
//! `fuzz/fuzz_targets/frame_parser.rs`); a malformed IPv4/UDP/TCP/BTH header
//! is an [`Error`], unknown EtherTypes and IP protocols parse as opaque.

use super::{arp, ethernet, ipv4, pfc, roce, tcp, udp, Error, EtherType, Ipv4Address, Result};

/// What the frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// IPv4 (see the `ip` field).
    Ipv4,
    /// ARP (validated).
    Arp,
    /// A PFC frame (validated; [`FrameInfo::pfc`] decodes it).
    Pfc,
    /// Any other EtherType, forwarded opaquely or dropped by the switch.
    Other(u16),
}

/// Transport fields of an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Info {
    /// Source address.
    pub src: Ipv4Address,
    /// Destination address.
    pub dst: Ipv4Address,
    /// IP protocol number.
    pub protocol: u8,
    /// DSCP.
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: ipv4::Ecn,
    /// TTL.
    pub ttl: u8,
    /// Offset of the L4 header in the frame.
    pub l4_offset: u16,
    /// L4 source port (0 if not TCP/UDP).
    pub src_port: u16,
    /// L4 destination port (0 if not TCP/UDP).
    pub dst_port: u16,
    /// For RoCEv2: offset of the BTH in the frame.
    pub bth_offset: Option<u16>,
}

/// Parsed header offsets and fields of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo {
    /// What the frame carries.
    pub kind: FrameKind,
    /// 802.1Q PCP, if tagged.
    pub pcp: Option<u8>,
    /// Offset of the L3 header.
    pub l3_offset: u16,
    /// IPv4 fields, for [`FrameKind::Ipv4`].
    pub ip: Option<Ipv4Info>,
}

impl FrameInfo {
    /// Parses `frame`, validating every header it recognises (including the
    /// IPv4 header checksum).
    ///
    /// Nearly every frame of a run is an untagged IPv4 packet without
    /// options carrying UDP (RoCEv2 or not) or TCP: a fast path reads such
    /// a frame from fixed offsets; anything else, or anything it finds
    /// wrong, goes through the general parse, which decides.
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<FrameInfo> {
        match Self::parse_plain(frame) {
            Some(info) => Ok(info),
            None => Self::parse_general(frame),
        }
    }

    /// [`FrameInfo::parse`] of a valid untagged IPv4 frame without options
    /// carrying UDP or TCP, with every check of the general parse made on
    /// fixed offsets (the header checksum summed in 32-bit words: the one's
    /// complement sum does not depend on the word size, RFC 1071); `None`
    /// for any other frame and for any frame the general parse would
    /// reject. Same result as the general parse wherever it returns one
    /// (tested on mutated frames).
    #[inline(always)]
    fn parse_plain(frame: &[u8]) -> Option<FrameInfo> {
        const L3: usize = ethernet::HEADER_LEN;
        const L4: usize = L3 + ipv4::HEADER_LEN;
        let h: &[u8; L4] = frame.first_chunk()?;
        // EtherType IPv4 (no 802.1Q tag), version 4 with a 20-byte header.
        if EtherType::from(u16::from_be_bytes([h[12], h[13]])) != EtherType::Ipv4 || h[L3] != 0x45 {
            return None;
        }
        let total = usize::from(u16::from_be_bytes([h[L3 + 2], h[L3 + 3]]));
        if total < ipv4::HEADER_LEN || frame.len() - L3 < total {
            return None;
        }
        let word = |k: usize| u64::from(u32::from_ne_bytes([h[L3 + k], h[L3 + k + 1], h[L3 + k + 2], h[L3 + k + 3]]));
        // 0xffff is its own byte swap: the words' byte order does not matter.
        if crate::checksum::fold64(word(0) + word(4) + word(8) + word(12) + word(16)) != 0xffff {
            return None;
        }
        let l4 = &frame[L4..L3 + total];
        let protocol = h[L3 + 9];
        let (src_port, dst_port, bth_offset) = match ipv4::Protocol::from(protocol) {
            ipv4::Protocol::Udp => {
                let u: &[u8; udp::HEADER_LEN] = l4.first_chunk()?;
                let len = usize::from(u16::from_be_bytes([u[4], u[5]]));
                if len < udp::HEADER_LEN || l4.len() < len {
                    return None;
                }
                let dst = u16::from_be_bytes([u[2], u[3]]);
                let bth = if dst == udp::ROCEV2_PORT {
                    let rest = &l4[udp::HEADER_LEN..len];
                    let opcode = roce::Opcode::from(*rest.first()?);
                    if rest.len() < roce::BTH_LEN + opcode.ext_header_len() || rest.len() < roce::BTH_LEN + roce::ICRC_LEN {
                        return None;
                    }
                    Some((L4 + udp::HEADER_LEN) as u16)
                } else {
                    None
                };
                (u16::from_be_bytes([u[0], u[1]]), dst, bth)
            }
            ipv4::Protocol::Tcp => {
                let t: &[u8; tcp::HEADER_LEN] = l4.first_chunk()?;
                let off = usize::from(t[12] >> 4) * 4;
                if off < tcp::HEADER_LEN || l4.len() < off {
                    return None;
                }
                (u16::from_be_bytes([t[0], t[1]]), u16::from_be_bytes([t[2], t[3]]), None)
            }
            _ => return None,
        };
        let tos = h[L3 + 1];
        Some(FrameInfo {
            kind: FrameKind::Ipv4,
            pcp: None,
            l3_offset: L3 as u16,
            ip: Some(Ipv4Info {
                src: Ipv4Address(u32::from_be_bytes([h[L3 + 12], h[L3 + 13], h[L3 + 14], h[L3 + 15]])),
                dst: Ipv4Address(u32::from_be_bytes([h[L3 + 16], h[L3 + 17], h[L3 + 18], h[L3 + 19]])),
                protocol,
                dscp: tos >> 2,
                ecn: ipv4::Ecn::from_bits(tos),
                ttl: h[L3 + 8],
                l4_offset: L4 as u16,
                src_port,
                dst_port,
                bth_offset,
            }),
        })
    }

    /// [`FrameInfo::parse`] of any frame, header by header.
    fn parse_general(frame: &[u8]) -> Result<FrameInfo> {
        let eth = ethernet::Frame::new_checked(frame)?;
        let l3 = eth.header_len();
        let pcp = eth.pcp();
        let payload = &frame[l3..];
        let (kind, ip) = match eth.ethertype() {
            EtherType::Ipv4 => (FrameKind::Ipv4, Some(parse_ipv4(payload, l3)?)),
            EtherType::Arp => {
                arp::Packet::new_checked(payload)?;
                (FrameKind::Arp, None)
            }
            EtherType::MacControl => {
                pfc::Repr::parse(payload)?;
                (FrameKind::Pfc, None)
            }
            other => (FrameKind::Other(other.into()), None),
        };
        Ok(FrameInfo { kind, pcp, l3_offset: l3 as u16, ip })
    }

    /// The pause times of a [`FrameKind::Pfc`] frame (`frame` is the frame
    /// this info was parsed from).
    pub fn pfc(&self, frame: &[u8]) -> Option<pfc::Repr> {
        match self.kind {
            FrameKind::Pfc => pfc::Repr::parse(frame.get(self.l3_offset as usize..)?).ok(),
            _ => None,
        }
    }

    /// The ECMP 5-tuple hash input: (src, dst, protocol, src port, dst port).
    pub fn five_tuple(&self) -> Option<(u32, u32, u8, u16, u16)> {
        self.ip.map(|i| (i.src.0, i.dst.0, i.protocol, i.src_port, i.dst_port))
    }
}

fn parse_ipv4(b: &[u8], l3: usize) -> Result<Ipv4Info> {
    let ip = ipv4::Packet::new_checked(b)?;
    if !ip.verify_checksum() {
        return Err(Error::Checksum("ipv4"));
    }
    let hl = ip.header_len();
    let l4 = &b[hl..ip.total_len() as usize];
    let proto = u8::from(ip.protocol());
    let (mut sp, mut dp, mut bth) = (0, 0, None);
    match ip.protocol() {
        ipv4::Protocol::Udp => {
            let u = udp::Packet::new_checked(l4)?;
            sp = u.src_port();
            dp = u.dst_port();
            if dp == udp::ROCEV2_PORT {
                let rest = &l4[udp::HEADER_LEN..u.len() as usize];
                roce::BthPacket::new_checked(rest)?;
                if rest.len() < roce::BTH_LEN + roce::ICRC_LEN {
                    return Err(Error::Truncated("rocev2"));
                }
                bth = Some((l3 + hl + udp::HEADER_LEN) as u16);
            }
        }
        ipv4::Protocol::Tcp => {
            let t = tcp::Packet::new_checked(l4)?;
            sp = t.src_port();
            dp = t.dst_port();
        }
        _ => {}
    }
    Ok(Ipv4Info {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        protocol: proto,
        dscp: ip.dscp(),
        ecn: ip.ecn(),
        ttl: ip.ttl(),
        l4_offset: (l3 + hl) as u16,
        src_port: sp,
        dst_port: dp,
        bth_offset: bth,
    })
}

/// A control frame whose wire time can be set apart from its length
/// ([`ControlFrameBytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlFrame {
    /// MAC control: PAUSE or PFC.
    Pfc,
    /// RoCEv2 Acknowledge: an ACK or a NAK.
    Ack,
    /// RoCEv2 congestion notification.
    Cnp,
}

impl ControlFrame {
    /// The longest frame that can be a control frame: an 802.1Q-tagged
    /// RoCEv2 CNP with the most IPv4 options (18 + 60 + UDP 8 + BTH 12 +
    /// 16 reserved bytes + ICRC 4). An Acknowledge carries only its AETH
    /// and a PFC frame is padded to the 60-byte minimum, both shorter. A
    /// longer frame is never one whatever its opcode, so a port tells a
    /// data frame by its length alone, without loading its bytes (they
    /// waited in a queue and are cold by the time it is sent).
    pub const MAX_LEN: usize = ethernet::TAGGED_HEADER_LEN + 60 + udp::HEADER_LEN + roce::BTH_LEN + roce::CNP_PAYLOAD_LEN + roce::ICRC_LEN;

    /// What kind of control frame `frame` is, if any ([`FrameInfo::parse`]:
    /// a PFC frame, or a RoCEv2 packet by its BTH opcode, at most
    /// [`ControlFrame::MAX_LEN`] bytes long); a malformed frame is none.
    pub fn of(frame: &[u8]) -> Option<ControlFrame> {
        if frame.len() > Self::MAX_LEN {
            return None;
        }
        let info = FrameInfo::parse(frame).ok()?;
        match info.kind {
            FrameKind::Pfc => Some(ControlFrame::Pfc),
            FrameKind::Ipv4 => match roce::Opcode::from(*frame.get(info.ip?.bth_offset? as usize)?) {
                roce::Opcode::Acknowledge => Some(ControlFrame::Ack),
                roce::Opcode::Cnp => Some(ControlFrame::Cnp),
                _ => None,
            },
            _ => None,
        }
    }

    /// [`ControlFrame::of`] a frame a port sends: every check of the parse
    /// on the headers that decide it, but the IPv4 header checksum's. A
    /// port sends only frames its node built or parsed on arrival (the
    /// checksum checked then), rewritten on the way with the checksum kept,
    /// so the answer is the same; a data frame is told by its length alone
    /// (its bytes waited in a queue and are cold), and an acknowledgment
    /// costs a few dozen instructions instead of a parse (the parse, on
    /// every frame a port sent, was 3.4 % of a RoCE run's instructions).
    /// The same as [`ControlFrame::of`] wherever the checksum is right
    /// (tested on mutated frames).
    #[inline]
    pub fn of_sent(frame: &[u8]) -> Option<ControlFrame> {
        if frame.len() > Self::MAX_LEN {
            return None;
        }
        let word = |at: usize| frame.get(at..at + 2).map(|w| u16::from_be_bytes([w[0], w[1]]));
        // The EtherType ends the header, after the 802.1Q tag if there is one.
        let (l3, ethertype) = match word(ethernet::HEADER_LEN - 2)? {
            0x8100 => (ethernet::TAGGED_HEADER_LEN, word(ethernet::TAGGED_HEADER_LEN - 2)?),
            t => (ethernet::HEADER_LEN, t),
        };
        match EtherType::from(ethertype) {
            EtherType::Ipv4 => {}
            EtherType::MacControl => {
                return (word(l3)? == pfc::OPCODE_PFC && frame.len() >= l3 + pfc::PAYLOAD_LEN).then_some(ControlFrame::Pfc);
            }
            _ => return None,
        }
        // IPv4 (`ipv4::Packet::new_checked`), then UDP to RoCEv2's port with
        // its length inside the packet, then a BTH with its extended header
        // and the ICRC inside the datagram, as the parse checks them.
        let ip = &frame[l3..];
        let ver_ihl = *ip.first()?;
        let ihl = usize::from(ver_ihl & 0xf) * 4;
        let total = usize::from(word(l3 + 2)?);
        if ver_ihl >> 4 != 4 || ihl < ipv4::HEADER_LEN || total < ihl || ip.len() < total {
            return None;
        }
        if ip[9] != u8::from(ipv4::Protocol::Udp) {
            return None;
        }
        let l4 = &ip[ihl..total];
        let u: &[u8; udp::HEADER_LEN] = l4.first_chunk()?;
        let len = usize::from(u16::from_be_bytes([u[4], u[5]]));
        if len < udp::HEADER_LEN || l4.len() < len || u16::from_be_bytes([u[2], u[3]]) != udp::ROCEV2_PORT {
            return None;
        }
        let rest = &l4[udp::HEADER_LEN..len];
        let opcode = roce::Opcode::from(*rest.first()?);
        if rest.len() < roce::BTH_LEN + opcode.ext_header_len() || rest.len() < roce::BTH_LEN + roce::ICRC_LEN {
            return None;
        }
        match opcode {
            roce::Opcode::Acknowledge => Some(ControlFrame::Ack),
            roce::Opcode::Cnp => Some(ControlFrame::Cnp),
            _ => None,
        }
    }
}

/// Bytes of wire time a port charges for control frames instead of their
/// length: for calibrating against a simulator whose control packets are
/// smaller than real frames (`weft run --frame-bytes`). Frames of a kind
/// left `None`, and every other frame, take their length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ControlFrameBytes {
    /// PAUSE and PFC frames.
    pub pfc: Option<u16>,
    /// RoCEv2 ACKs and NAKs.
    pub ack: Option<u16>,
    /// RoCEv2 CNPs.
    pub cnp: Option<u16>,
}

impl ControlFrameBytes {
    /// Whether every frame takes its length.
    #[inline(always)]
    pub fn is_none(&self) -> bool {
        self.pfc.is_none() && self.ack.is_none() && self.cnp.is_none()
    }

    /// The bytes of wire time `frame` takes ([`ControlFrame::of_sent`]:
    /// ports ask it of the frames they send). Every port asks it of every
    /// frame: with nothing set, or for a frame too long to be a control
    /// frame, it is a few tests, and the classification stays out of the
    /// caller.
    #[inline(always)]
    pub fn charged_len(&self, frame: &[u8]) -> usize {
        if self.is_none() || frame.len() > ControlFrame::MAX_LEN {
            return frame.len();
        }
        self.charged_len_of_any(frame)
    }

    #[inline(never)]
    fn charged_len_of_any(&self, frame: &[u8]) -> usize {
        let set = match ControlFrame::of_sent(frame) {
            Some(ControlFrame::Pfc) => self.pfc,
            Some(ControlFrame::Ack) => self.ack,
            Some(ControlFrame::Cnp) => self.cnp,
            None => None,
        };
        set.map_or(frame.len(), usize::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_frames::udp_frame;

    #[test]
    fn control_frames_are_pfc_and_rocev2_acknowledges_and_cnps() {
        for (opcode, kind) in [
            (roce::Opcode::Acknowledge, Some(ControlFrame::Ack)),
            (roce::Opcode::Cnp, Some(ControlFrame::Cnp)),
            (roce::Opcode::SendOnly, None),
        ] {
            let mut f = udp_frame(udp::ROCEV2_PORT, 40);
            f[42] = opcode.into();
            assert_eq!(ControlFrame::of(&f), kind, "{opcode:?}");
            assert_eq!(ControlFrame::of_sent(&f), kind, "{opcode:?}");
            // Truncated: never a control frame, never a panic.
            for len in 0..43 {
                assert_eq!(ControlFrame::of(&f[..len]), None);
                assert_eq!(ControlFrame::of_sent(&f[..len]), None);
            }
        }
        let mut data = udp_frame(5000, 40);
        data[42] = 0x11;
        assert_eq!(ControlFrame::of(&data), None, "not RoCEv2");
        assert_eq!(ControlFrame::of_sent(&data), None, "not RoCEv2");
        // A frame as long as a control frame can be is one; a longer one is
        // none whatever its opcode (an Acknowledge has no payload).
        let mut cnp = udp_frame(udp::ROCEV2_PORT, ControlFrame::MAX_LEN - 42);
        cnp[42] = roce::Opcode::Cnp.into();
        assert_eq!(ControlFrame::of(&cnp), Some(ControlFrame::Cnp), "as long as one can be");
        assert_eq!(ControlFrame::of_sent(&cnp), Some(ControlFrame::Cnp), "as long as one can be");
        let mut long = udp_frame(udp::ROCEV2_PORT, ControlFrame::MAX_LEN - 42 + 1);
        long[42] = roce::Opcode::Acknowledge.into();
        assert_eq!(ControlFrame::of(&long), None, "too long to be one");
        assert_eq!(ControlFrame::of_sent(&long), None, "too long to be one");
        let mut pfc = [0u8; pfc::FRAME_LEN];
        pfc[12..14].copy_from_slice(&[0x88, 0x08]);
        assert_eq!(ControlFrame::of(&pfc), None, "MAC control, but no PFC payload");
        assert_eq!(ControlFrame::of_sent(&pfc), None, "MAC control, but no PFC payload");
        pfc::Repr::for_priority(3, 100).emit(&mut pfc[ethernet::HEADER_LEN..]);
        assert_eq!(ControlFrame::of(&pfc), Some(ControlFrame::Pfc));
        assert_eq!(ControlFrame::of_sent(&pfc), Some(ControlFrame::Pfc));
    }

    /// Valid frames of every kind the switches see (RoCEv2 control and
    /// data, other UDP, TCP, PFC; untagged and 802.1Q-tagged; with and
    /// without IPv4 options), then each with one to three header bytes set
    /// at random, its IPv4 checksum made right again half the time (so that
    /// most still parse) and cut short now and then: `rounds` frames.
    fn mutated_frames(rounds: usize) -> impl Iterator<Item = Vec<u8>> {
        let mut seeds = Vec::new();
        for (opcode, len) in [(0x11u8, 20), (0x81, 20), (0x0a, 1000), (0x06, 40)] {
            let mut f = udp_frame(udp::ROCEV2_PORT, len);
            f[42] = opcode;
            seeds.push(f);
        }
        seeds.push(udp_frame(5000, 40));
        let mut tcp = udp_frame(5000, 40);
        tcp[23] = u8::from(ipv4::Protocol::Tcp);
        ipv4::Packet::new_unchecked(&mut tcp[14..]).fill_checksum();
        tcp[34 + 12] = 5 << 4;
        assert!(FrameInfo::parse_general(&tcp).is_ok_and(|i| i.ip.is_some_and(|ip| ip.protocol == 6)));
        seeds.push(tcp);
        let mut pfc = vec![0u8; pfc::FRAME_LEN];
        pfc[12..14].copy_from_slice(&[0x88, 0x08]);
        pfc::Repr::for_priority(3, 100).emit(&mut pfc[ethernet::HEADER_LEN..]);
        seeds.push(pfc);
        for f in seeds.clone().into_iter().filter(|f| f[12..14] == [0x08, 0x00]) {
            // With 4 bytes of IPv4 options: the L4 header moves.
            let mut o = f[..34].to_vec();
            o.extend_from_slice(&[1, 1, 1, 1]);
            o.extend_from_slice(&f[34..]);
            o[14] = 0x46;
            let total = u16::from_be_bytes([o[16], o[17]]) + 4;
            o[16..18].copy_from_slice(&total.to_be_bytes());
            ipv4::Packet::new_unchecked(&mut o[14..]).fill_checksum();
            assert!(FrameInfo::parse(&o).is_ok());
            seeds.push(o);
        }
        for f in seeds.clone() {
            let mut t = f[..12].to_vec();
            t.extend_from_slice(&[0x81, 0x00, 0x60, 0x00]);
            t.extend_from_slice(&f[12..]);
            seeds.push(t);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..rounds).map(move |round| {
            let mut f = seeds[round % seeds.len()].clone();
            let l3 = if f[12..14] == [0x81, 0x00] { 18 } else { 14 };
            for _ in 0..1 + next() % 3 {
                let at = (next() % 64) as usize % f.len();
                f[at] = next() as u8;
            }
            if next() % 2 == 0 && f.len() >= l3 + 20 && f[l3] >> 4 == 4 {
                let hl = usize::from(f[l3] & 0xf) * 4;
                if hl >= 20 && f.len() >= l3 + hl {
                    ipv4::Packet::new_unchecked(&mut f[l3..]).fill_checksum();
                }
            }
            if next() % 8 == 0 {
                let cut = (next() as usize) % (f.len() + 1);
                f.truncate(cut);
            }
            f
        })
    }

    #[test]
    fn a_sent_frame_is_classed_as_the_parse_classes_it_where_its_checksum_is_right() {
        let (mut found, mut checked, mut bad_checksum) = (0, 0, 0);
        for f in mutated_frames(200_000) {
            let want = ControlFrame::of(&f);
            let got = ControlFrame::of_sent(&f);
            if got != want {
                // Only the checksum, which a port does not check again, can
                // tell them apart: right again, the parse agrees.
                assert_eq!((want, FrameInfo::parse_general(&f)), (None, Err(Error::Checksum("ipv4"))), "{f:02x?}");
                let mut fixed = f.clone();
                let l3 = if f[12..14] == [0x81, 0x00] { 18 } else { 14 };
                ipv4::Packet::new_unchecked(&mut fixed[l3..]).fill_checksum();
                assert_eq!(ControlFrame::of(&fixed), got, "{f:02x?}");
                bad_checksum += 1;
            }
            found += usize::from(want.is_some());
            checked += 1;
        }
        // The mutations leave many control frames to find, and many not,
        // and some with a wrong checksum.
        assert!(found > checked / 10 && found < checked * 9 / 10, "{found} of {checked}");
        assert!(bad_checksum > checked / 100, "{bad_checksum} of {checked}");
    }

    #[test]
    fn the_fixed_offset_parse_agrees_with_the_general_parse() {
        let (mut plain, mut valid, mut checked) = (0, 0, 0);
        for f in mutated_frames(200_000) {
            let want = FrameInfo::parse_general(&f);
            let fast = FrameInfo::parse_plain(&f);
            if let Some(info) = fast {
                assert_eq!(Ok(info), want, "{f:02x?}");
                plain += 1;
            }
            assert_eq!(FrameInfo::parse(&f), want, "{f:02x?}");
            valid += usize::from(want.is_ok());
            checked += 1;
        }
        // A sixth of the seeds have the plain shape: many frames take the
        // fixed offsets, more parse only in general, many do not parse.
        assert!(plain > checked / 20 && valid > 2 * plain && valid < checked * 9 / 10, "{plain} plain, {valid} valid of {checked}");
    }

    #[test]
    fn a_control_frame_is_charged_its_set_bytes_and_any_other_frame_its_length() {
        let mut ack = udp_frame(udp::ROCEV2_PORT, 20);
        ack[42] = 0x11;
        let data = udp_frame(udp::ROCEV2_PORT, 1000);
        let none = ControlFrameBytes::default();
        assert!(none.is_none());
        assert_eq!((none.charged_len(&ack), none.charged_len(&data)), (ack.len(), data.len()));
        let set = ControlFrameBytes { ack: Some(49), cnp: Some(0), pfc: None };
        assert_eq!((set.charged_len(&ack), set.charged_len(&data)), (49, data.len()));
        ack[42] = 0x81;
        assert_eq!(set.charged_len(&ack), 0);
        let mut pfc = [0u8; pfc::FRAME_LEN];
        pfc[12..14].copy_from_slice(&[0x88, 0x08]);
        pfc::Repr::for_priority(3, 100).emit(&mut pfc[ethernet::HEADER_LEN..]);
        assert_eq!(set.charged_len(&pfc), pfc::FRAME_LEN, "pfc not set");
        assert_eq!(ControlFrameBytes { pfc: Some(32), ..set }.charged_len(&pfc), 32);
    }

    #[test]
    fn parses_udp_and_matches_etherparse() {
        let f = udp_frame(5000, 100);
        let info = FrameInfo::parse(&f).unwrap();
        let ip = info.ip.unwrap();
        assert_eq!(info.kind, FrameKind::Ipv4);
        assert_eq!((ip.src_port, ip.dst_port, ip.l4_offset), (1234, 5000, 34));
        let ep = etherparse::SlicedPacket::from_ethernet(&f).unwrap();
        match ep.transport {
            Some(etherparse::TransportSlice::Udp(u)) => assert_eq!(u.destination_port(), 5000),
            _ => panic!("etherparse disagrees"),
        }
    }

    #[test]
    fn rocev2_requires_a_bth() {
        let f = udp_frame(udp::ROCEV2_PORT, 4);
        assert_eq!(FrameInfo::parse(&f).unwrap_err(), Error::Truncated("bth"));
        let f = udp_frame(udp::ROCEV2_PORT, 16);
        assert_eq!(FrameInfo::parse(&f).unwrap().ip.unwrap().bth_offset, Some(42));
    }

    #[test]
    fn never_panics_on_any_prefix_or_bit_flip() {
        let f = udp_frame(udp::ROCEV2_PORT, 40);
        for len in 0..f.len() {
            let _ = FrameInfo::parse(&f[..len]);
        }
        // Deterministic pseudo-random corruption (a cheap stand-in for the fuzzer in CI).
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..20_000 {
            let mut g = f.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % g.len();
                g[i] = (x >> 32) as u8;
            }
            let _ = FrameInfo::parse(&g);
        }
    }

    #[test]
    fn bad_ip_checksum_is_reported() {
        let mut f = udp_frame(5000, 10);
        f[14 + 8] ^= 0x10; // TTL changed without checksum update
        assert_eq!(FrameInfo::parse(&f).unwrap_err(), Error::Checksum("ipv4"));
    }
}
