//! DRILL(d, m): per-packet choice of the least-loaded egress port among `d`
//! random members of the equal-cost group and the `m` best of the previous
//! decision (DRILL, SIGCOMM 2017; evaluated as DRILL(2,1) in ConWeave §4.1:
//! "choosing a new output port with the smallest queue among 2 random
//! samples and 1 current port").
//!
//! The load of a port is the bytes queued at it (docs/HOSTS.md#reference-parameters: "metric =
//! bytes in egress queue"), read from the ingress pipeline's recent snapshot
//! of queue depths, as a Tofino ingress sees them. The remembered best port
//! is kept per destination leaf (per equal-cost group) in a register. Ties
//! keep the remembered port. Packets of one flow spread over paths, so
//! RDMA receivers see reordering: this is DRILL's weakness that ConWeave's
//! evaluation shows.
//!
//! Invariant: the chosen port is an up member of the group with the least
//! queued bytes among the samples and the remembered port.
//!
//! Tofino resources: the `drill_best` register (stage 2, one entry per
//! destination leaf), two random numbers, queue-depth reads.
//!
//! Counters: `drill_decisions`, `drill_path_changes` (decisions that moved
//! away from the remembered port).

use super::{param_in, ParamInfo, Params, SchemeError, SchemeInfo};
use weft_tofino::program::Declarations;
use weft_tofino::{Gress, IngressCx, Program, ProgramError, RegisterId};
use weft_wire::ids::PortId;

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: "drill",
        source: "DRILL (SIGCOMM'17) as evaluated in ConWeave §4.1",
        summary: "per packet: the shortest egress queue among 2 random ports and the last best (DRILL(2,1))",
        reference_rate: None,
        params: vec![
            ParamInfo { name: "samples", default: "2", unit: "ports", doc: "random samples per packet (d)" },
            ParamInfo { name: "memory", default: "1", unit: "0 or 1", doc: "remember the last best port (m)" },
        ],
    }
}

/// Entries of the remembered-best register.
const BEST_ENTRIES: u32 = 1024;

/// The DRILL program.
#[derive(Debug, Clone)]
pub struct Drill {
    samples: u32,
    memory: bool,
    best: Option<RegisterId>,
    decisions: u64,
    path_changes: u64,
}

impl Drill {
    /// Builds from parameters.
    pub fn from_params(p: &Params) -> Result<Self, SchemeError> {
        let samples = param_in("drill", p, "samples", "number of ports (1..=8)", 2u32, |s| (1..=8).contains(s))?;
        let memory = param_in("drill", p, "memory", "0 or 1", 1u32, |m| *m <= 1)?;
        Ok(Drill { samples, memory: memory == 1, best: None, decisions: 0, path_changes: 0 })
    }
}

impl Program for Drill {
    fn has_egress(&self) -> bool {
        false
    }
    /// The destination's leaf index (per-destination-ToR state).
    fn route_data(&self, route: &weft_tofino::l3::Route) -> Option<u32> {
        crate::leaf_of_route(route)
    }
    fn name(&self) -> &'static str {
        "drill"
    }

    fn declare(&mut self, d: &mut Declarations) {
        self.best = Some(d.register("drill_best", Gress::Ingress, 2, BEST_ENTRIES, 16));
        d.metadata_bits(3 * 16 + 3 * 24);
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let up = |cx: &IngressCx<'_>, p: PortId| cx.port_up.get(p.index()).copied().unwrap_or(false);
        if cx.group.len() <= 1 {
            cx.forward_to(cx.group.first().copied().filter(|p| up(cx, *p)));
            return Ok(());
        }
        let (Some(best_reg), true) = (self.best, cx.info.ip.is_some()) else { return Ok(()) };
        let mut candidates: [Option<PortId>; 9] = [None; 9];
        for c in candidates.iter_mut().take(self.samples as usize) {
            let k = rand::Rng::random_range(cx.rng, 0..cx.group.len());
            let p = cx.group[k];
            *c = up(cx, p).then_some(p);
        }
        let key = cx.route_data.unwrap_or(0) % BEST_ENTRIES;
        let memory = self.memory;
        let group = cx.group;
        let port_up = cx.port_up;
        let depths = cx.depths;
        let (chosen, moved) = cx.register(best_reg, key, |old| {
            let remembered = (memory && old != 0)
                .then(|| PortId((old - 1) as u16))
                .filter(|p| group.contains(p) && port_up.get(p.index()).copied().unwrap_or(false));
            let mut best = remembered;
            for p in candidates.iter().flatten() {
                if best.is_none_or(|b| depths.port_bytes(*p) < depths.port_bytes(b)) {
                    best = Some(*p);
                }
            }
            let moved = remembered.is_some() && best != remembered;
            (best.map_or(old, |b| b.0 as u64 + 1), (best, moved))
        })?;
        let chosen = match chosen {
            Some(p) => Some(p),
            None => cx.group.iter().copied().find(|p| up(cx, *p)),
        };
        self.decisions += 1;
        self.path_changes += moved as u64;
        cx.forward_to(chosen);
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("drill_decisions", self.decisions), ("drill_path_changes", self.path_changes)]
    }
}

/// The registry entry of `drill` (see [`crate::REGISTRY`]).
pub const SCHEME: crate::Scheme = crate::Scheme {
    info,
    build: |p, _| Ok(Box::new(Drill::from_params(p)?)),
    metrics: crate::SchemeMetrics {
        counters: &[
            ("drill_decisions", "Per-packet DRILL decisions (2 samples + remembered best)."),
            ("drill_path_changes", "Decisions that chose another port than the remembered best."),
        ],
        gauges: &[],
        port_gauges: &[],
        distributions: &[],
    },
};
