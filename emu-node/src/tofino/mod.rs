//! A software model of an Intel Tofino switch ASIC (DESIGN §4).
//!
//! - [`target`]: the budgets of `tofino2`, `tofino1` and `unlimited`;
//! - [`resources`]: program declarations, the load-time budget check and the
//!   resource report;
//! - [`registers`]: register arrays with the one-access-per-pass and
//!   stage-order rules enforced at run time;
//! - [`program`]: the [`Program`] trait schemes implement and the
//!   ingress/egress/CPU contexts;
//! - [`tm`]: the traffic manager (queues, shared buffer, scheduler, ECN, PFC);
//! - [`depth_histogram`]: queue depth seen by arriving packets.
//!
//! The port serializer, recirculation, mirroring, the packet generator and
//! the CPU port are driven by [`crate::switch::Switch`], which owns a model
//! instance. Nothing here does I/O or reads a clock.

pub mod depth_histogram;
pub mod program;
pub mod registers;
pub mod resources;
pub mod target;
pub mod tm;

pub use program::{Declarations, EgressCx, IngressCx, PacketSource, Program};
pub use registers::{ProgramError, RegisterFile, RegisterId};
pub use resources::{Gress, ResourceError, ResourceReport, ResourceUsage, TableKind};
pub use target::TargetProfile;
pub use tm::{BufferModel, BufferRules, Ns3Mmu, PfcConfig, QueueConfig, RedConfig, TmConfig, TrafficManager, CONTROL_TRAFFIC_CLASS};
