//! # weft-rt — the real-time driver
//!
//! Runs the sans-IO nodes of `weft-core` against the wall clock, in the
//! spirit of `quinn` over `quinn-proto`: one `ractor` actor per switch or
//! synthetic host owns its state machine; links move frames between actors
//! of one process, between processes (UDP, QUIC) and to real Linux hosts
//! behind TAP devices (docs/ARCHITECTURE.md; docs/REALTIME.md; docs/HOSTS.md). Design choice: every deadline of
//! a process (timers, frames due at a peer) goes to one deadline scheduler
//! on a `timerfd`, never to tokio's 1 ms timer, and every handled deadline
//! records how late it ran, so a user sees when real time stops being
//! faithful. It depends on the sans-IO crates and `weft-metrics` and must
//! never depend on the virtual-time driver (`weft-sim`) or the orchestrator.
//!
//! Modules, one concept each, in dependency order (none imports a module
//! listed after it except [`runtime`] and [`control`], which assemble):
//! - [`clock`]: the fabric clock and the per-process deadline scheduler;
//! - [`inbox`]: a node's frame inbox and the sender side transports hold;
//! - [`link`]: link transports (in-process, UDP, QUIC), the link header and
//!   receivers of remote links;
//! - [`tap`]: real Linux hosts in network namespaces behind TAP devices;
//! - [`vm`]: soft-RoCE hosts as qemu micro-VMs, their NIC a socket here;
//! - [`actor`]: the node actor, its ports' egresses and captures;
//! - [`tls`]: the fabric certificate and pinning;
//! - [`metrics`]: gathering a live process's metrics, the `/metrics`
//!   endpoint;
//! - [`runtime`]: assembles actors, links and hosts of one process;
//! - [`control`]: the orchestrator ↔ emu-node control protocol.
#![deny(missing_docs)]

pub mod actor;
pub mod clock;
pub mod control;
pub mod inbox;
pub mod link;
pub mod metrics;
pub mod runtime;
pub mod tap;
pub mod tls;
pub mod vm;
