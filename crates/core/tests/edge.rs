//! The edge guard (`weft_core::edge`): each hostile frame is refused under
//! its own cause, a real host's ordinary frames pass, and every refused
//! control frame is one a switch of the fabric would otherwise act on.

use weft_core::edge::{EdgeGuard, Rejection};
use weft_core::fabric::{HostKind, HostSpec};
use weft_testkit::{benign_host_frames, hostile_host_frames, RealHostAddrs};
use weft_wire::{EthernetAddress, Ipv4Address};

fn host() -> (EdgeGuard, RealHostAddrs) {
    let ip = Ipv4Address::new(10, 0, 0, 2);
    let mac = weft_core::fabric::host_mac(ip);
    let spec = HostSpec { kind: HostKind::Tap, ip, prefix_len: 24, mac, gateway: Ipv4Address::new(10, 0, 0, 1) };
    let addrs = RealHostAddrs { mac, ip, gateway_mac: EthernetAddress([2, 0, 0, 0, 0, 1]), peer: Ipv4Address::new(10, 0, 1, 2), mtu: 1500 };
    (EdgeGuard::new(&spec, 1500), addrs)
}

#[test]
fn a_real_hosts_ordinary_frames_pass() {
    let (g, h) = host();
    for f in benign_host_frames(&h) {
        assert_eq!(g.check(&f), Ok(()), "{:02x?}", &f[..]);
    }
}

#[test]
fn each_hostile_frame_is_refused_under_its_cause_and_every_cause_is_exercised() {
    let (g, h) = host();
    let frames = hostile_host_frames(&h);
    for (why, f) in &frames {
        assert_eq!(g.check(f), Err(*why), "{why:?}: {:02x?}", &f[..f.len().min(64)]);
    }
    for why in Rejection::ALL {
        assert!(frames.iter().any(|(w, _)| *w == why), "no hostile frame for {why:?}");
    }
    // The control frames are the fabric's: one of each scheme.
    assert!(frames.iter().filter(|(w, _)| *w == Rejection::FabricControl).count() >= 8);
}

#[test]
fn nothing_panics_on_cut_or_garbled_frames() {
    let (g, h) = host();
    for (_, f) in hostile_host_frames(&h).into_iter().chain(benign_host_frames(&h).into_iter().map(|f| (Rejection::Malformed, f))) {
        for n in 0..f.len() {
            let _ = g.check(&f[..n]);
        }
        let mut x = f.to_vec();
        for i in 0..x.len() {
            x[i] ^= 0x5a;
            let _ = g.check(&x);
        }
    }
}
