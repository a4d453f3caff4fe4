//! A switch's restart (item 3: `weft node SWITCH restart`, a
//! restart event): it loses what a rebooted ASIC loses (registers, queued
//! frames, timers) and keeps what it does not (its ports' link state, the
//! frame on the wire, weft's counters).

use weft_core::fabric::{FabricSpec, NodeKind};
use weft_core::switch::{Switch, SwitchConfig, Transmit};
use weft_testkit::{drain, leaf_pair, leaf_pair_udp_frame, roce_write, Entering, FAR, H0};
use weft_wire::ids::{NodeId, PortId};
use weft_wire::time::{BitRate, Nanos};

/// `leaf_pair` with 4 uplinks, every switch running `scheme`.
fn fabric(scheme: &str, rate: BitRate) -> FabricSpec {
    let mut f = leaf_pair(1, 4, rate);
    for n in &mut f.nodes {
        if let NodeKind::Switch(s) = &mut n.kind {
            s.scheme = scheme.into();
        }
    }
    f
}

fn leaf0(f: &FabricSpec) -> Switch {
    let cfg = SwitchConfig { snapshot_period_ns: 0, ..SwitchConfig::tofino2(3, true) };
    Switch::from_spec(NodeId(0), &f.nodes[0], cfg).expect("switch from its spec")
}

fn registers(s: &Switch) -> Vec<(String, Vec<u64>)> {
    s.registers().contents().into_iter().map(|(n, v)| (n.to_string(), v.to_vec())).collect()
}

/// LetFlow learns a flowlet (its table registers) and ConWeave its
/// connection state from a few frames; after a restart both hold exactly
/// what a freshly loaded switch holds, and the switch forwards again.
#[test]
fn a_restart_loses_the_register_state_a_fresh_switch_does_not_have() {
    for scheme in ["letflow", "conweave", "drill", "conga"] {
        let f = fabric(scheme, BitRate::gbps(100));
        let fresh = registers(&leaf0(&f));
        let mut s = leaf0(&f);
        let mut out: Vec<Transmit> = Vec::new();
        let at = Entering::port(&f, 0, 0, H0, FAR);
        let mut now: Nanos = 1_000;
        for psn in 0..20 {
            s.handle_frame(now, PortId(0), roce_write(at, 49_152 + psn as u16, 17, psn, 1000), &mut out);
            s.handle_frame(now, PortId(0), leaf_pair_udp_frame(&f, 1000 + psn as u16, 7, 1000), &mut out);
            now += 1_000;
            drain(&mut s, now, &mut out);
        }
        drain(&mut s, now + 100_000, &mut out);
        now += 100_000;
        assert_ne!(registers(&s), fresh, "{scheme}: the frames left state in the registers");
        let forwarded = s.counters().rx_frames;
        s.restart(now, &mut out).expect("restart");
        assert_eq!(registers(&s), fresh, "{scheme}: a restart loses the register state");
        assert_eq!(s.counters().restarts, 1, "{scheme}");
        assert_eq!(s.counters().rx_frames, forwarded, "{scheme}: weft's counters survive");
        // The packet generators and timers start again from now.
        assert!(s.poll_timeout().is_none_or(|t| t >= now), "{scheme}: no timer in the past after the restart");
        let before = out.len();
        s.handle_frame(now + 1_000, PortId(0), leaf_pair_udp_frame(&f, 9_999, 7, 1000), &mut out);
        drain(&mut s, now + 200_000, &mut out);
        assert!(out[before..].iter().any(|t| t.port.index() >= 1), "{scheme}: the restarted switch forwards");
    }
}

/// Frames queued at a restart are lost and counted as such; a port that
/// was down stays down, and the frame on the wire at the restart still
/// ends before the next one starts.
#[test]
fn a_restart_drops_the_queues_and_keeps_the_link_state() {
    let f = fabric("ecmp", BitRate::gbps(1));
    let mut s = leaf0(&f);
    let mut out = Vec::new();
    s.set_port_up(0, PortId(2), false, &mut out);
    // 50 frames of 1500 bytes at 1 Gbit/s to one uplink: most wait in a queue.
    for _ in 0..50 {
        s.handle_frame(10, PortId(0), leaf_pair_udp_frame(&f, 1000, 7, 1500), &mut out);
    }
    let sent_before = out.len();
    let last_end = out.iter().map(|t| t.end).max().expect("a frame left");
    assert!(sent_before < 50);
    s.restart(20, &mut out).expect("restart");
    assert_eq!(s.counters().drop_restart as usize, 50 - sent_before, "every queued frame is counted as lost at the restart");
    assert!(!s.port_is_up(PortId(2)), "a down port stays down");
    s.handle_frame(30, PortId(0), leaf_pair_udp_frame(&f, 1000, 7, 1500), &mut out);
    drain(&mut s, 1_000_000, &mut out);
    let next = out[sent_before..].iter().filter(|t| t.port == out[0].port).map(|t| t.end).min().expect("the new frame left");
    assert!(
        next >= last_end + 12_000,
        "the restarted port waits for the frame on the wire ({next} ns, the last one ended at {last_end} ns)"
    );
}

/// A switch given its program by the caller cannot load it again.
#[test]
fn a_switch_with_a_program_from_outside_its_spec_refuses_to_restart() {
    let f = fabric("ecmp", BitRate::gbps(100));
    let cfg = SwitchConfig::tofino2(1, true);
    let program = weft_schemes::build("ecmp", &Default::default(), Default::default()).expect("ecmp");
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], cfg, program).expect("switch");
    assert!(!s.can_restart());
    assert!(s.restart(0, &mut Vec::new()).is_err());
}
