//! Fuzzes the frame parser and every header view it dispatches to, and the
//! edge guard every real host's frame passes (`weft_core::edge`): nothing
//! may panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_core::edge::EdgeGuard;
use weft_core::fabric::{host_mac, HostKind, HostSpec};
use weft_wire::frame::FrameInfo;
use weft_wire::{arp, ethernet, ipv4, pfc, roce, tcp, udp, vxlan};

fuzz_target!(|data: &[u8]| {
    let _ = FrameInfo::parse(data);
    let ip = weft_wire::Ipv4Address::new(10, 0, 0, 2);
    let spec = HostSpec { kind: HostKind::Tap, ip, prefix_len: 24, mac: host_mac(ip), gateway: weft_wire::Ipv4Address::new(10, 0, 0, 1) };
    let _ = EdgeGuard::new(&spec, 1500).check(data);
    if let Ok(f) = ethernet::Frame::new_checked(data) {
        let p = f.payload();
        let _ = arp::Packet::new_checked(p).map(|a| arp::Repr::parse(&a));
        let _ = pfc::Repr::parse(p);
        if let Ok(ip) = ipv4::Packet::new_checked(p) {
            let _ = ipv4::Repr::parse(&ip);
            let _ = roce::icrc(p);
            let l4 = ip.payload();
            let _ = udp::Packet::new_checked(l4).map(|u| (udp::Repr::parse(&u), u.payload().len()));
            let _ = tcp::Packet::new_checked(l4).map(|t| tcp::Repr::parse(&t));
            if l4.len() > 8 {
                let _ = roce::BthPacket::new_checked(&l4[8..]).map(|b| (roce::BthRepr::parse(&b), b.reth(), b.aeth()));
                let _ = vxlan::Packet::new_checked(&l4[8..]).map(|v| vxlan::Repr::parse(&v));
            }
        }
    }
});
