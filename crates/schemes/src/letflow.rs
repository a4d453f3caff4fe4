//! LetFlow: flowlet switching with a random next hop per flowlet.
//!
//! As evaluated in the ConWeave paper (§4.1, "For Conga and Letflow, we
//! choose a flowlet time gap of 100 us"; LetFlow is Vanini et al., NSDI
//! 2017): a packet arriving more than `flowlet_gap_us` after the previous
//! packet of its flow entry starts a flowlet, which takes a uniformly random
//! up member of the equal-cost group; all packets of a flowlet take the
//! same port. No congestion signal is used: flowlets of congested paths are
//! smaller (packets back off), which is what balances the load.
//!
//! Tofino resources: a 32-bit CRC of the 5-tuple (stage 1), the flowlet
//! timestamp array (stage 2) and port array (stage 3) of
//! [`FlowletTable`], the random-number extern.
//!
//! Counters: `letflow_flowlets` (packets that started a flowlet),
//! `letflow_path_changes` (flowlets that took another port than the
//! previous flowlet of their entry).

use super::ecmp::flow_hash;
use super::flowlet::{random_up_port, FlowletTable};
use super::{param_in, param_us, ParamInfo, Params, SchemeError, SchemeInfo, TimeScale};
use weft_tofino::program::Declarations;
use weft_tofino::{Gress, IngressCx, Program, ProgramError};
use weft_wire::time::{BitRate, Nanos};

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: "letflow",
        source: "LetFlow (NSDI'17) as evaluated in ConWeave §4.1",
        summary: "flowlets (gap 100 µs), a random next hop per flowlet",
        reference_rate: Some(BitRate::gbps(100)),
        params: vec![
            ParamInfo { name: "flowlet_gap_us", default: "100", unit: "µs", doc: "inactivity gap that starts a new flowlet" },
            ParamInfo { name: "entries", default: "65536", unit: "entries", doc: "flowlet table size (hashed flows)" },
        ],
    }
}

/// The LetFlow program.
#[derive(Debug, Clone)]
pub struct LetFlow {
    gap_ns: Nanos,
    entries: u32,
    table: Option<FlowletTable>,
    flowlets: u64,
    path_changes: u64,
}

impl LetFlow {
    /// Builds from parameters.
    pub fn from_params(p: &Params) -> Result<Self, SchemeError> {
        let gap_ns = param_us("letflow", p, "flowlet_gap_us", 100.0, true)?;
        let entries = param_in("letflow", p, "entries", "u32 > 0", 65536u32, |e| *e > 0)?;
        Ok(LetFlow { gap_ns, entries, table: None, flowlets: 0, path_changes: 0 })
    }

    /// Its flowlet gap multiplied by `s` (docs/SCHEMES.md#parameter-scaling).
    pub fn time_scaled(mut self, s: TimeScale) -> Self {
        self.gap_ns = s.ns(self.gap_ns);
        self
    }
}

impl Program for LetFlow {
    fn has_egress(&self) -> bool {
        false
    }
    fn name(&self) -> &'static str {
        "letflow"
    }

    fn declare(&mut self, d: &mut Declarations) {
        d.hash("letflow_5tuple_crc32", Gress::Ingress, 1, 32);
        d.metadata_bits(32 + 16 + 1);
        self.table = Some(FlowletTable::declare(d, "letflow", self.entries, self.gap_ns, 2, 3));
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let Some(table) = &self.table else { return Ok(()) };
        let Some(t) = cx.info.five_tuple().filter(|_| cx.group.len() > 1) else {
            cx.forward_to(cx.group.first().copied().filter(|p| cx.port_up.get(p.index()).copied().unwrap_or(false)));
            return Ok(());
        };
        let h = flow_hash(cx.hash_seed, t, true);
        let d = table.lookup(cx, h, |cx| Ok(random_up_port(cx)))?;
        self.flowlets += d.new_flowlet as u64;
        self.path_changes += d.path_changed as u64;
        cx.forward_to(d.port);
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("letflow_flowlets", self.flowlets), ("letflow_path_changes", self.path_changes)]
    }
}

/// The registry entry of `letflow` (see [`crate::REGISTRY`]).
pub const SCHEME: crate::Scheme = crate::Scheme {
    info,
    build: |p, s| Ok(Box::new(LetFlow::from_params(p)?.time_scaled(s))),
    metrics: crate::SchemeMetrics {
        counters: &[
            ("letflow_flowlets", "Flowlets started (gap > flowlet timeout)."),
            ("letflow_path_changes", "Flowlets that took another uplink than the previous one."),
        ],
        gauges: &[],
        port_gauges: &[],
        distributions: &[],
    },
};
