//! A panic in one partition of a parallel run reaches the caller of
//! `run_until`, whichever thread it happened on, instead of leaving the
//! other partitions waiting at the round barrier for ever; the engine's
//! worker threads are stopped with it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;
use weft_core::host::udp::{UdpFlow, UdpMode};
use weft_core::node::{build_nodes, HostTransport, Node, NodeConfig};
use weft_core::switch::{Switch, SwitchConfig};
use weft_sim::engine::Engine;
use weft_testkit::{leaf_pair, FAR};
use weft_tofino::program::{Declarations, IngressCx};
use weft_tofino::{Program, ProgramError};
use weft_wire::ids::{FlowId, NodeId};
use weft_wire::time::BitRate;

const MESSAGE: &str = "the program under test panics";

struct Panics;

impl Program for Panics {
    fn name(&self) -> &'static str {
        "panics"
    }
    fn declare(&mut self, _d: &mut Declarations) {}
    fn ingress(&mut self, _cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        panic!("{MESSAGE}");
    }
}

/// Runs h0 → far over a 2-thread engine whose switch `node` panics on its
/// first packet; returns the panic's message (or why there was none).
fn panic_of(node: usize) -> Result<String, String> {
    let f = leaf_pair(1, 2, BitRate::gbps(100));
    let mut nodes = build_nodes(&f, &NodeConfig { transport: HostTransport::Udp, ..NodeConfig::default() }).map_err(|e| e.to_string())?;
    let sw = Switch::with_program(NodeId(node as u32), &f.nodes[node], SwitchConfig::tofino2(1, true), Box::new(Panics))
        .map_err(|e| e.to_string())?;
    nodes[node] = Node::Switch(Box::new(sw));
    let h0 = f.nodes.iter().position(|n| n.name == "h0").ok_or("no h0")?;
    let Node::UdpHost(h) = &mut nodes[h0] else { return Err("h0 is not a UDP host".into()) };
    h.add_flow(UdpFlow {
        id: FlowId(0),
        dst: FAR,
        src_port: 1000,
        dst_port: 2000,
        dscp: 0,
        ecn_capable: false,
        payload_len: 1000,
        start: 1_000,
        mode: UdpMode::Bytes(10_000),
    });
    let mut engine = Engine::with_threads(&f, nodes, 2).map_err(|e| e.to_string())?;
    if engine.threads() != 2 {
        return Err(format!("{} threads", engine.threads()));
    }
    let r = catch_unwind(AssertUnwindSafe(|| engine.run_until(1_000_000, u64::MAX)));
    drop(engine);
    match r {
        Ok(n) => Err(format!("no panic after {n} events")),
        Err(p) => Ok(p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()),
    }
}

/// `panic_of(node)` on a thread of its own, failing the test if it hangs.
fn panics_within_a_minute(node: usize) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(panic_of(node));
    });
    let r = rx.recv_timeout(Duration::from_secs(60)).expect("the parallel run hung after a partition panicked");
    let msg = r.unwrap_or_else(|e| panic!("node {node}: {e}"));
    assert!(msg.contains(MESSAGE), "node {node}: the caller saw {msg:?}");
}

#[test]
fn a_panic_in_either_partition_reaches_the_caller() {
    // leaf0 (node 0, with h0) and leaf1 (node 1, with far) are the two
    // heaviest units, so they run in different partitions: one on the
    // calling thread, one on a worker.
    panics_within_a_minute(0);
    panics_within_a_minute(1);
}
