//! # weft-tofino — a software model of an Intel Tofino switch ASIC (docs/ARCHITECTURE.md#the-tofino2-model)
//!
//! The chip-model layer (docs/ARCHITECTURE.md: wire → chip model → schemes → core →
//! runtime → orchestrator). It depends only on `weft-wire` and must never
//! depend on anything above it: it knows nothing of fabrics, schemes, hosts
//! or drivers. What a program may learn of the fabric (its switch's role,
//! which ports face hosts, its uplinks) reaches it through [`SwitchView`],
//! and the routes it is loaded with through the [`l3`] table. Design choice:
//! the model enforces the hardware's rules where a program touches state
//! (register access per pass and stage, resource budgets at load time), so a
//! scheme that runs here fits the chip.
//!
//! - [`target`]: the budgets of `tofino2`, `tofino1` and `unlimited`, and the
//!   software pipeline of `bmv2` and `bmv2-opt`;
//! - [`resources`]: program declarations, the load-time budget check and the
//!   resource report;
//! - [`registers`]: register arrays with the one-access-per-pass and
//!   stage-order rules enforced at run time;
//! - [`program`]: the [`Program`] trait schemes implement and the
//!   ingress/egress/CPU contexts;
//! - [`meters`]: RFC 2697/2698 colour markers (srTCM, trTCM) executed
//!   with the register access rules;
//! - [`tables`]: exact-match tables the switch CPU writes and the
//!   pipelines look up;
//! - [`tm`]: the traffic manager (queues, shared buffer, scheduler, ECN, PFC);
//! - [`l3`]: the L3 table every program is loaded with (LPM → equal-cost
//!   group of egress ports);
//! - [`depth_histogram`]: queue depth seen by arriving packets.
//!
//! The port serializer, recirculation, mirroring, the packet generator and
//! the CPU port are driven by the switch of the core (weft-core's
//! `switch::Switch`), which owns a model instance. Nothing here does I/O,
//! reads a clock or draws from a global random number generator.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod depth_histogram;
pub mod l3;
pub mod meters;
pub mod program;
pub mod registers;
pub mod resources;
pub mod tables;
pub mod target;
pub mod tm;

pub use meters::{Color, MeterConfig, MeterId, MeterKind};
pub use program::{Declarations, EgressCx, IngressCx, PacketSource, Program, SwitchRole, SwitchView, Verdict};
pub use registers::{ProgramError, RegisterFile, RegisterId};
pub use resources::{Gress, ResourceError, ResourceReport, ResourceUsage, TableKind};
pub use tables::{TableFile, TableId};
pub use target::{SoftwarePipeline, TargetProfile};
pub use tm::{BufferModel, BufferRules, Ns3Mmu, PfcConfig, QueueConfig, RedConfig, TmConfig, TrafficManager, CONTROL_TRAFFIC_CLASS};
