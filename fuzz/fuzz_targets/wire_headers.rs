//! Fuzzes every header view and Repr of `weft-wire`, the scheme headers
//! included (INT shim and probe, LBSP, P4TE hop option and feedback,
//! ConWeave BTH bits and timestamp header, the ConWeave timer packet), the
//! mutations switches apply to frames (insert/strip of the scheme headers)
//! and the TAP offload path (virtio-net header, segmentation, GRO): nothing
//! may panic, and every Repr that parses re-emits to the same meaning.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weft_wire::{arp, conweave, ethernet, gso, int, ipv4, lbsp, p4te, pfc, roce, tcp, udp, vxlan};

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the L3 header starts (a VLAN tag or a
    // bogus offset), the rest is the frame.
    let Some((&sel, frame)) = data.split_first() else { return };
    let l3 = match sel % 4 {
        0 | 1 => ethernet::HEADER_LEN,
        2 => ethernet::TAGGED_HEADER_LEN,
        _ => sel as usize % 64,
    };
    views(frame, l3);
    mutations(frame, l3, sel);
    offload(frame, sel);
});

fn views(frame: &[u8], l3: usize) {
    if let Ok(f) = ethernet::Frame::new_checked(frame) {
        let r = ethernet::Repr::parse(&f);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        assert_eq!(ethernet::Repr::parse(&ethernet::Frame::new_checked(&b[..]).unwrap()), r);
    }
    let Some(p) = frame.get(l3..) else { return };
    if let Ok(a) = arp::Packet::new_checked(p) {
        let r = arp::Repr::parse(&a);
        let mut b = vec![0u8; arp::PACKET_LEN];
        r.emit(&mut b);
        assert_eq!(arp::Repr::parse(&arp::Packet::new_checked(&b[..]).unwrap()), r);
    }
    if let Ok(r) = pfc::Repr::parse(p) {
        let mut b = vec![0u8; pfc::PAYLOAD_LEN];
        r.emit(&mut b);
        assert_eq!(pfc::Repr::parse(&b).unwrap(), r);
    }
    if let Ok(r) = lbsp::Repr::parse(p) {
        let mut b = vec![0u8; lbsp::PAYLOAD_LEN];
        r.emit(&mut b);
        assert_eq!(lbsp::Repr::parse(&b).unwrap(), r);
    }
    let _ = lbsp::Repr::parse_frame(frame);
    if let Ok(r) = p4te::Feedback::parse(frame) {
        assert_eq!(p4te::Feedback::parse(&r.frame()).unwrap(), r);
    }
    let _ = p4te::is_feedback(frame);
    if let Some(at) = p4te::find(frame, l3) {
        let _ = p4te::read(frame, at).map(|h| h.delay_until(u64::MAX));
    }
    if let Ok(h) = int::Header::new_checked(p) {
        let r = int::Repr::parse(&h);
        let mut b = vec![0u8; int::SHIM_LEN];
        r.emit(&mut b);
        assert_eq!(int::Repr::parse(&int::Header::new_checked(&b[..]).unwrap()), r);
    }
    if let Some(body) = p.get(int::SHIM_LEN..) {
        if let Ok(r) = int::Probe::parse(body) {
            let mut b = vec![0u8; int::PROBE_LEN];
            r.emit(&mut b);
            assert_eq!(int::Probe::parse(&b).unwrap(), r);
        }
    }
    let _ = weft_schemes::conweave::frames::parse_timer(frame);
    if let Ok(ip) = ipv4::Packet::new_checked(p) {
        let _ = ip.verify_checksum();
        if let Ok(r) = ipv4::Repr::parse(&ip) {
            let mut b = vec![0u8; ipv4::HEADER_LEN];
            r.emit(&mut b);
            let back = ipv4::Repr::parse(&ipv4::Packet::new_unchecked(&b[..]));
            assert_eq!(back.map(|x| (x.src, x.dst, x.protocol)).ok(), Some((r.src, r.dst, r.protocol)));
        }
        let _ = roce::icrc(p);
        let _ = roce::verify_icrc(p);
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let l4 = ip.payload();
        if let Ok(u) = udp::Packet::new_checked(l4) {
            let _ = (udp::Repr::parse(&u), u.verify_checksum(src, dst), u.payload().len());
        }
        if let Ok(t) = tcp::Packet::new_checked(l4) {
            let _ = (tcp::Repr::parse(&t), t.verify_checksum(src, dst));
        }
        if let Some(bth) = l4.get(udp::HEADER_LEN..) {
            if let Ok(b) = roce::BthPacket::new_checked(bth) {
                let r = roce::BthRepr::parse(&b);
                let _ = (b.reth(), b.aeth());
                // Emit over a copy, so the extended header the opcode
                // needs is there.
                let mut e = bth.to_vec();
                r.emit(&mut e);
                assert_eq!(roce::BthRepr::parse(&roce::BthPacket::new_checked(&e[..]).unwrap()), r);
            }
            if let Ok(v) = vxlan::Packet::new_checked(bth) {
                let _ = vxlan::Repr::parse(&v);
            }
        }
        let bth_at = l3 + ip.header_len() + udp::HEADER_LEN;
        if let Some(bits) = conweave::CwBits::read(frame, bth_at) {
            assert_eq!(conweave::CwBits::from_reserved15(bits.to_reserved15()), Some(bits));
        }
        let _ = conweave::read_ts(frame, bth_at);
    }
}

fn mutations(frame: &[u8], l3: usize, sel: u8) {
    let mut f = BytesMut::from(frame);
    let _ = int::insert(&mut f, l3);
    let _ = int::strip(&mut f, l3);
    let mut f = BytesMut::from(frame);
    let _ = int::strip(&mut f, l3);
    let hop = p4te::Hop { flags: sel, port: sel as u16, t_source: u64::from(sel) << 40 };
    let mut f = BytesMut::from(frame);
    let _ = p4te::insert(&mut f, l3, &hop);
    let _ = p4te::strip(&mut f, l3);
    let mut f = BytesMut::from(frame);
    let _ = p4te::strip(&mut f, l3);
    if let Some(at) = p4te::find(frame, l3) {
        let mut f = BytesMut::from(frame);
        let _ = p4te::write(&mut f, l3, at, &hop);
    }
    let bth = l3 + ipv4::HEADER_LEN + udp::HEADER_LEN;
    let mut f = BytesMut::from(frame);
    let _ = conweave::insert_ts(&mut f, l3, bth, sel as u16, !(sel as u16));
    let _ = conweave::strip(&mut f, l3, bth);
    let mut f = BytesMut::from(frame);
    let _ = conweave::strip(&mut f, l3, bth);
    let mut f = BytesMut::from(frame);
    let _ = conweave::write_ts(&mut f, bth, 1, 2);
    if let Some(bits) = conweave::CwBits::from_reserved15(sel as u16 * 131) {
        let _ = bits.write(&mut f, bth);
    }
    let mut f = BytesMut::from(frame);
    lbsp::set_in_port(&mut f, sel as u16);
}

fn offload(data: &[u8], sel: u8) {
    if let Ok(h) = gso::VnetHdr::parse(data) {
        assert_eq!(gso::VnetHdr::parse(&h.emit()).unwrap(), h);
        let mut frame = data[gso::VNET_HDR_LEN..].to_vec();
        let mut total = 0usize;
        let _ = gso::segment(&h, &mut frame, &mut |s: &[u8]| total += s.len());
    }
    // GRO: the data cut into frames at the lengths its bytes name.
    let mut gro = gso::Coalescer::new(1500 + 256 * sel as usize);
    let mut rest = data;
    while rest.len() > 2 {
        let n = (u16::from_be_bytes([rest[0], rest[1]]) as usize % 2048).min(rest.len() - 2);
        let f = &rest[2..2 + n];
        if !gro.push(f) {
            let _ = gro.take();
            let _ = gro.push(f);
        }
        rest = &rest[2 + n..];
    }
    while gro.take().is_some() {}
}
