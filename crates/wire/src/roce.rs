//! RoCEv2 transport headers: BTH, RETH, AETH, CNP, and the invariant CRC.
//!
//! RoCEv2 = Ethernet / IPv4 / UDP (dst port 4791) / BTH [/ RETH | AETH] /
//! payload / ICRC (4 bytes). Layouts from the InfiniBand Architecture
//! Specification vol. 1 §9.2–9.3 and the RoCEv2 annex A17.
//!
//! BTH (12 bytes): opcode (8) | SE M Pad(2) TVer(4) | P_Key (16) |
//! resv8a (8; F/B bits in IB, reserved in RoCEv2) | DestQP (24) |
//! A resv7 | PSN (24). ConWeave (paper §3.4, Fig. 10) carries its 15-bit
//! header in resv8a (8 bits) and resv7 (7 bits): see
//! [`BthPacket::reserved15`].
//!
//! ICRC: CRC-32 (IEEE 802.3 polynomial, as Ethernet's FCS) over 8 bytes of
//! 0xff (the masked LRH), then the IPv4 header with TOS, TTL and checksum
//! set to all ones, the UDP header with checksum all ones, the BTH with
//! resv8a all ones, the rest of the transport headers and the payload. It is
//! appended least-significant byte first, as the Linux `rxe` driver and
//! RNICs do, so Wireshark's ICRC check accepts it.

use super::{be24, be32, put24, put32, Error, Result};

/// BTH length.
pub const BTH_LEN: usize = 12;
/// RETH length.
pub const RETH_LEN: usize = 16;
/// AETH length.
pub const AETH_LEN: usize = 4;
/// CNP payload after the BTH (16 reserved bytes).
pub const CNP_PAYLOAD_LEN: usize = 16;
/// ICRC length.
pub const ICRC_LEN: usize = 4;
/// The default P_Key.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// BTH opcodes of the Reliable Connection service (and the RoCEv2 CNP).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// RC SEND First.
    SendFirst,
    /// RC SEND Middle.
    SendMiddle,
    /// RC SEND Last.
    SendLast,
    /// RC SEND Only.
    SendOnly,
    /// RC RDMA WRITE First (carries a RETH).
    WriteFirst,
    /// RC RDMA WRITE Middle.
    WriteMiddle,
    /// RC RDMA WRITE Last.
    WriteLast,
    /// RC RDMA WRITE Only (carries a RETH).
    WriteOnly,
    /// RC Acknowledge (carries an AETH).
    Acknowledge,
    /// RoCEv2 Congestion Notification Packet.
    Cnp,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Opcode {
    fn from(v: u8) -> Self {
        match v {
            0x00 => Opcode::SendFirst,
            0x01 => Opcode::SendMiddle,
            0x02 => Opcode::SendLast,
            0x04 => Opcode::SendOnly,
            0x06 => Opcode::WriteFirst,
            0x07 => Opcode::WriteMiddle,
            0x08 => Opcode::WriteLast,
            0x0a => Opcode::WriteOnly,
            0x11 => Opcode::Acknowledge,
            0x81 => Opcode::Cnp,
            n => Opcode::Unknown(n),
        }
    }
}
impl From<Opcode> for u8 {
    fn from(o: Opcode) -> u8 {
        match o {
            Opcode::SendFirst => 0x00,
            Opcode::SendMiddle => 0x01,
            Opcode::SendLast => 0x02,
            Opcode::SendOnly => 0x04,
            Opcode::WriteFirst => 0x06,
            Opcode::WriteMiddle => 0x07,
            Opcode::WriteLast => 0x08,
            Opcode::WriteOnly => 0x0a,
            Opcode::Acknowledge => 0x11,
            Opcode::Cnp => 0x81,
            Opcode::Unknown(n) => n,
        }
    }
}
impl Opcode {
    /// Whether a RETH follows the BTH.
    pub fn has_reth(self) -> bool {
        matches!(self, Opcode::WriteFirst | Opcode::WriteOnly)
    }
    /// Whether an AETH follows the BTH.
    pub fn has_aeth(self) -> bool {
        matches!(self, Opcode::Acknowledge)
    }
    /// Length of the extended transport headers after the BTH.
    pub fn ext_header_len(self) -> usize {
        if self.has_reth() {
            RETH_LEN
        } else if self.has_aeth() {
            AETH_LEN
        } else {
            0
        }
    }
}

/// A view of a Base Transport Header.
#[derive(Debug, Clone)]
pub struct BthPacket<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> BthPacket<B> {
    /// Wraps without checking.
    pub fn new_unchecked(buf: B) -> Self {
        BthPacket { buf }
    }
    /// Wraps and checks the length of the BTH and its extended header.
    pub fn new_checked(buf: B) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < BTH_LEN {
            return Err(Error::Truncated("bth"));
        }
        let op = Opcode::from(b[0]);
        if b.len() < BTH_LEN + op.ext_header_len() {
            return Err(Error::Truncated("bth extended header"));
        }
        Ok(BthPacket { buf })
    }
    /// Opcode.
    pub fn opcode(&self) -> Opcode {
        self.buf.as_ref()[0].into()
    }
    /// Solicited event bit.
    pub fn solicited(&self) -> bool {
        self.buf.as_ref()[1] & 0x80 != 0
    }
    /// Pad count (0–3 bytes).
    pub fn pad(&self) -> u8 {
        (self.buf.as_ref()[1] >> 4) & 3
    }
    /// P_Key.
    pub fn pkey(&self) -> u16 {
        super::be16(self.buf.as_ref(), 2)
    }
    /// Destination QP.
    pub fn dest_qp(&self) -> u32 {
        be24(self.buf.as_ref(), 5)
    }
    /// Ack-request bit.
    pub fn ack_req(&self) -> bool {
        self.buf.as_ref()[8] & 0x80 != 0
    }
    /// Packet sequence number (24 bits).
    pub fn psn(&self) -> u32 {
        be24(self.buf.as_ref(), 9)
    }
    /// The 15 reserved bits ConWeave uses: resv8a (bits 14..7) and resv7 (bits 6..0).
    pub fn reserved15(&self) -> u16 {
        let b = self.buf.as_ref();
        ((b[4] as u16) << 7) | (b[8] & 0x7f) as u16
    }
    /// The extended transport header bytes (RETH or AETH), if any.
    pub fn ext_header(&self) -> &[u8] {
        let l = self.opcode().ext_header_len();
        &self.buf.as_ref()[BTH_LEN..BTH_LEN + l]
    }
    /// The RETH, for WRITE First/Only.
    pub fn reth(&self) -> Option<Reth> {
        self.opcode().has_reth().then(|| Reth::parse(self.ext_header()))
    }
    /// The AETH, for Acknowledge.
    pub fn aeth(&self) -> Option<Aeth> {
        self.opcode().has_aeth().then(|| Aeth::parse(self.ext_header()))
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> BthPacket<B> {
    /// Writes the 15 reserved bits (ConWeave header). resv8a is masked in the
    /// ICRC; resv7 is not, so a ToR that sets it must clear it before the
    /// packet reaches the host (ConWeave's destination ToR does).
    pub fn set_reserved15(&mut self, v: u16) {
        let b = self.buf.as_mut();
        b[4] = (v >> 7) as u8;
        b[8] = (b[8] & 0x80) | (v & 0x7f) as u8;
    }
    /// Sets the PSN.
    pub fn set_psn(&mut self, psn: u32) {
        put24(self.buf.as_mut(), 9, psn & 0x00ff_ffff);
    }
}

/// The meaning of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Pad count.
    pub pad: u8,
    /// P_Key.
    pub pkey: u16,
    /// Destination QP.
    pub dest_qp: u32,
    /// Ack request.
    pub ack_req: bool,
    /// PSN.
    pub psn: u32,
    /// The 15 reserved bits.
    pub reserved15: u16,
}

impl BthRepr {
    /// Parses a checked BTH.
    pub fn parse<B: AsRef<[u8]>>(p: &BthPacket<B>) -> Self {
        BthRepr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            pad: p.pad(),
            pkey: p.pkey(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
            reserved15: p.reserved15(),
        }
    }
    /// BTH length.
    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }
    /// Writes the BTH (transport version 0): three 32-bit words, each
    /// assembled in a register and stored once (byte by byte, with a bounds
    /// check each, it cost a RoCE host 60 instructions a frame).
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..BTH_LEN];
        let opcode: u8 = self.opcode.into();
        let flags = ((self.solicited as u8) << 7) | ((self.pad & 3) << 4);
        let w0 = u32::from_be_bytes([opcode, flags, (self.pkey >> 8) as u8, self.pkey as u8]);
        let w1 = u32::from((self.reserved15 >> 7) as u8) << 24 | (self.dest_qp & 0x00ff_ffff);
        let w2 = u32::from(((self.ack_req as u8) << 7) | (self.reserved15 & 0x7f) as u8) << 24 | (self.psn & 0x00ff_ffff);
        b[0..4].copy_from_slice(&w0.to_be_bytes());
        b[4..8].copy_from_slice(&w1.to_be_bytes());
        b[8..12].copy_from_slice(&w2.to_be_bytes());
    }
}

/// RDMA Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reth {
    /// Remote virtual address.
    pub virtual_addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length of the whole message.
    pub dma_len: u32,
}

impl Reth {
    /// Parses 16 bytes (caller guarantees the length).
    pub fn parse(b: &[u8]) -> Self {
        Reth { virtual_addr: ((be32(b, 0) as u64) << 32) | be32(b, 4) as u64, rkey: be32(b, 8), dma_len: be32(b, 12) }
    }
    /// Writes 16 bytes.
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, (self.virtual_addr >> 32) as u32);
        put32(b, 4, self.virtual_addr as u32);
        put32(b, 8, self.rkey);
        put32(b, 12, self.dma_len);
    }
}

/// What an AETH acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AethKind {
    /// Positive ACK with a credit count (5 bits).
    Ack {
        /// Credit count.
        credits: u8,
    },
    /// Receiver not ready, with a timer code.
    RnrNak(u8),
    /// NAK: 0 = PSN sequence error, 1 invalid request, 2 remote access, 3 remote op.
    Nak(u8),
    /// Reserved syndrome.
    Reserved(u8),
}

/// ACK Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    /// Syndrome meaning.
    pub kind: AethKind,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// NAK code for a PSN sequence error.
    pub const NAK_PSN_SEQUENCE_ERROR: u8 = 0;
    /// Parses 4 bytes.
    pub fn parse(b: &[u8]) -> Self {
        let s = b[0];
        let kind = match s >> 5 {
            0 => AethKind::Ack { credits: s & 0x1f },
            1 => AethKind::RnrNak(s & 0x1f),
            3 => AethKind::Nak(s & 0x1f),
            _ => AethKind::Reserved(s),
        };
        Aeth { kind, msn: be24(b, 1) }
    }
    /// Writes 4 bytes.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = match self.kind {
            AethKind::Ack { credits } => credits & 0x1f,
            AethKind::RnrNak(t) => 0x20 | (t & 0x1f),
            AethKind::Nak(c) => 0x60 | (c & 0x1f),
            AethKind::Reserved(s) => s,
        };
        put24(b, 1, self.msn & 0x00ff_ffff);
    }
}

/// The masked prefix standing for the LRH of native InfiniBand.
const MASKED_LRH: [u8; 8] = [0xff; 8];

/// Computes the ICRC of a RoCEv2 packet given as the IPv4 packet that
/// carries it (IPv4 header .. payload, **including** the 4 trailing ICRC
/// bytes, whose content is ignored). Returns the 4 bytes to place there.
pub fn icrc(ipv4_packet: &[u8]) -> Result<[u8; 4]> {
    let ip = super::ipv4::Packet::new_checked(ipv4_packet)?;
    let ihl = ip.header_len();
    let total = ip.total_len() as usize;
    if total < ihl + super::udp::HEADER_LEN + BTH_LEN + ICRC_LEN {
        return Err(Error::Truncated("rocev2"));
    }
    let body = &ipv4_packet[..total - ICRC_LEN];
    let mut h = crc32fast::Hasher::new();
    h.update(&MASKED_LRH);
    let mut ip_hdr = [0u8; 60];
    ip_hdr[..ihl].copy_from_slice(&body[..ihl]);
    ip_hdr[1] = 0xff; // TOS (DSCP + ECN)
    ip_hdr[8] = 0xff; // TTL
    ip_hdr[10] = 0xff; // header checksum
    ip_hdr[11] = 0xff;
    h.update(&ip_hdr[..ihl]);
    let mut udp_bth = [0u8; super::udp::HEADER_LEN + BTH_LEN];
    udp_bth.copy_from_slice(&body[ihl..ihl + super::udp::HEADER_LEN + BTH_LEN]);
    udp_bth[6] = 0xff; // UDP checksum
    udp_bth[7] = 0xff;
    udp_bth[super::udp::HEADER_LEN + 4] = 0xff; // BTH resv8a
    h.update(&udp_bth);
    h.update(&body[ihl + super::udp::HEADER_LEN + BTH_LEN..]);
    Ok(h.finalize().to_le_bytes())
}

/// Writes the ICRC into the last 4 bytes of `ipv4_packet`.
pub fn fill_icrc(ipv4_packet: &mut [u8]) -> Result<()> {
    let c = icrc(ipv4_packet)?;
    let total = super::ipv4::Packet::new_checked(&*ipv4_packet)?.total_len() as usize;
    ipv4_packet[total - ICRC_LEN..total].copy_from_slice(&c);
    Ok(())
}

/// Whether the ICRC in the last 4 bytes is valid.
pub fn verify_icrc(ipv4_packet: &[u8]) -> Result<bool> {
    let c = icrc(ipv4_packet)?;
    let total = super::ipv4::Packet::new_checked(ipv4_packet)?.total_len() as usize;
    Ok(ipv4_packet[total - ICRC_LEN..total] == c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ipv4, udp, Ipv4Address};

    fn roce_packet(payload: &[u8], opcode: Opcode) -> Vec<u8> {
        let ext = opcode.ext_header_len();
        let l4 = udp::HEADER_LEN + BTH_LEN + ext + payload.len() + ICRC_LEN;
        let mut buf = vec![0xa5u8; ipv4::HEADER_LEN + l4];
        ipv4::Repr {
            src: Ipv4Address::new(10, 0, 0, 2),
            dst: Ipv4Address::new(10, 0, 1, 2),
            protocol: ipv4::Protocol::Udp,
            dscp: 26,
            ecn: ipv4::Ecn::Ect0,
            ident: 1,
            ttl: 64,
            payload_len: l4,
        }
        .emit(&mut buf);
        udp::Repr { src_port: 0xc000, dst_port: udp::ROCEV2_PORT, payload_len: l4 - 8 }.emit(&mut buf[20..]);
        BthRepr { opcode, solicited: false, pad: 0, pkey: DEFAULT_PKEY, dest_qp: 0x11, ack_req: true, psn: 0x123456, reserved15: 0 }
            .emit(&mut buf[28..]);
        if opcode.has_reth() {
            Reth { virtual_addr: 0x1000, rkey: 7, dma_len: payload.len() as u32 }.emit(&mut buf[40..56]);
        }
        let p = 28 + BTH_LEN + ext;
        buf[p..p + payload.len()].copy_from_slice(payload);
        fill_icrc(&mut buf).unwrap();
        buf
    }

    #[test]
    fn linux_rxe_seed_is_crc_of_masked_lrh() {
        // rxe_icrc.c starts from 0xdebb20e3: "the result of computing a CRC
        // with a seed of 0xffffffff and 8 bytes of 0xff representing a masked
        // LRH". Our hasher over the same 8 bytes must reach that state.
        let mut h = crc32fast::Hasher::new();
        h.update(&MASKED_LRH);
        assert_eq!(!h.finalize(), 0xdebb20e3);
    }

    #[test]
    fn icrc_matches_bitwise_reference_and_ignores_mutable_fields() {
        let buf = roce_packet(b"0123456789abcdef", Opcode::WriteOnly);
        assert!(verify_icrc(&buf).unwrap());
        // Independent bitwise CRC-32 (reflected 0xEDB88320) over the masked bytes.
        let mut masked = vec![0xffu8; 8];
        let mut body = buf[..buf.len() - 4].to_vec();
        body[1] = 0xff;
        body[8] = 0xff;
        body[10] = 0xff;
        body[11] = 0xff;
        body[26] = 0xff;
        body[27] = 0xff;
        body[32] = 0xff;
        masked.extend_from_slice(&body);
        let mut crc: u32 = 0xffff_ffff;
        for byte in masked {
            crc ^= byte as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
            }
        }
        assert_eq!(buf[buf.len() - 4..], (!crc).to_le_bytes());
        // Switches may change ECN, TTL, the IP checksum, resv8a: ICRC stays valid.
        let mut hop = buf.clone();
        let mut ip = ipv4::Packet::new_checked(&mut hop[..]).unwrap();
        ip.set_ecn(ipv4::Ecn::Ce);
        ip.decrement_ttl();
        hop[32] = 0x5a;
        assert!(verify_icrc(&hop).unwrap());
        // But not the payload.
        hop[60] ^= 1;
        assert!(!verify_icrc(&hop).unwrap());
    }

    #[test]
    fn bth_round_trip_and_reserved_bits() {
        let buf = roce_packet(b"xyz!", Opcode::WriteFirst);
        let mut bth = BthPacket::new_checked(buf[28..].to_vec()).unwrap();
        assert_eq!(bth.opcode(), Opcode::WriteFirst);
        assert_eq!(bth.psn(), 0x123456);
        assert_eq!(bth.dest_qp(), 0x11);
        assert_eq!(bth.reth().unwrap().dma_len, 4);
        bth.set_reserved15(0x7fff);
        assert_eq!(bth.reserved15(), 0x7fff);
        assert!(bth.ack_req(), "setting resv7 must not touch the A bit");
        bth.set_reserved15(0x2a5);
        let r = BthRepr::parse(&bth);
        assert_eq!(r.reserved15, 0x2a5);
        let mut out = [0xa5u8; BTH_LEN];
        r.emit(&mut out);
        assert_eq!(&out[..], &bth.into_inner_for_test()[..BTH_LEN]);
    }

    /// The BTH written a word at a time parses back to every field it was
    /// given, over poison, with nothing written past its 12 bytes.
    #[test]
    fn bth_emit_writes_every_field_and_nothing_else() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = BthRepr {
                opcode: Opcode::from(x as u8),
                solicited: x & (1 << 8) != 0,
                pad: (x >> 9) as u8 & 3,
                pkey: (x >> 11) as u16,
                dest_qp: (x >> 27) as u32 & 0x00ff_ffff,
                ack_req: x & (1 << 51) != 0,
                psn: (x >> 20) as u32 & 0x00ff_ffff,
                reserved15: (x >> 49) as u16 & 0x7fff,
            };
            let mut buf = [0xa5u8; BTH_LEN + RETH_LEN];
            r.emit(&mut buf);
            assert_eq!(BthRepr::parse(&BthPacket::new_checked(&buf[..]).unwrap()), r);
            assert_eq!(buf[BTH_LEN..], [0xa5; RETH_LEN]);
            // Transport version 0 in the low nibble of byte 1.
            assert_eq!(buf[1] & 0x0f, 0);
        }
    }

    #[test]
    fn cnp_is_a_bth_with_16_reserved_bytes_and_a_valid_icrc() {
        let buf = roce_packet(&[0u8; CNP_PAYLOAD_LEN], Opcode::Cnp);
        let bth = BthPacket::new_checked(&buf[28..]).unwrap();
        assert_eq!(bth.opcode(), Opcode::Cnp);
        assert_eq!(u8::from(bth.opcode()), 0x81);
        assert_eq!(bth.ext_header().len(), 0);
        assert_eq!(buf.len(), 20 + 8 + BTH_LEN + CNP_PAYLOAD_LEN + ICRC_LEN);
        assert!(verify_icrc(&buf).unwrap());
    }

    #[test]
    fn aeth_kinds() {
        for kind in [AethKind::Ack { credits: 31 }, AethKind::Nak(0), AethKind::RnrNak(3)] {
            let a = Aeth { kind, msn: 0xabcdef };
            let mut b = [0u8; 4];
            a.emit(&mut b);
            assert_eq!(Aeth::parse(&b), a);
        }
        assert_eq!(Aeth::parse(&[0x60, 0, 0, 1]).kind, AethKind::Nak(Aeth::NAK_PSN_SEQUENCE_ERROR));
    }

    #[test]
    fn truncated_transport_headers_are_errors() {
        let buf = roce_packet(b"", Opcode::WriteOnly);
        assert_eq!(BthPacket::new_checked(&buf[28..38]).unwrap_err(), Error::Truncated("bth"));
        assert_eq!(BthPacket::new_checked(&buf[28..45]).unwrap_err(), Error::Truncated("bth extended header"));
        assert!(icrc(&buf[..30]).is_err());
    }

    impl<B: AsRef<[u8]>> BthPacket<B> {
        fn into_inner_for_test(self) -> B {
            self.buf
        }
    }
}
