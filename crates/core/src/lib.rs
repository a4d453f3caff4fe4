//! # weft-core — the sans-IO core of weft: switches and hosts as state machines
//!
//! The core layer (docs/ARCHITECTURE.md: wire → chip model → schemes → core → runtime →
//! orchestrator), in the spirit of `quinn-proto`: every node of a fabric is
//! a state machine taking `(now, input)` and appending its effects to a
//! buffer the caller owns. It depends on `weft-wire`, `weft-tofino` and
//! `weft-schemes` and must never depend on a driver (the virtual-time engine,
//! the real-time actors, links, TAP, metrics) or the orchestrator. Nothing
//! here reads a clock, a socket or a global random number generator: time
//! is passed in, randomness comes from one seeded RNG per node.
//!
//! - [`node`]: the node factory both drivers share ([`node::Node`],
//!   [`node::build_nodes`]) and **the order of calls** every driver keeps;
//! - [`switch`]: a switch = the Tofino model + its loaded scheme + ports;
//! - [`host`]: synthetic endpoints (UDP, RoCEv2 with DCQCN/IRN, TCP);
//! - [`transmit`]: what a node emits (a frame leaving a port);
//! - [`edge`]: what the fabric admits from a real host (hostile frames
//!   refused by cause, control packets of the schemes never forged);
//! - [`fabric`]: the resolved description of a fabric (nodes, ports, links,
//!   addresses, routes, link events) that drivers instantiate;
//! - [`link_loss`]: random loss of a link direction (fault injection);
//! - [`pfc_log`]: the pause frames a node received, when a driver asks;
//! - [`serializer`]: the line-rate serializer of a port;
//! - [`fct`]: the analytical base and ideal FCT of a flow alone on its path.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod edge;
pub mod fabric;
pub mod fct;
pub mod host;
pub mod link_loss;
pub mod node;
pub mod pfc_log;
pub mod serializer;
pub mod switch;
pub mod transmit;

/// A small seeded generator for the randomized tests of this crate.
#[cfg(test)]
pub(crate) mod test_rand {
    /// `rand(m)`: a number below `m` (0 for `m` = 0), from a 64-bit LCG
    /// seeded with `seed` (its high bits, the good ones).
    pub(crate) fn below(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed;
        move |m| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m.max(1)
        }
    }
}
