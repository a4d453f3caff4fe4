//! Random packet spraying (RPS): every packet independently to a uniformly
//! random up member of the equal-cost group. It is the "original packet
//! scatter" scheme the LBSP paper compares against (Lim, Appl. Sci. 2021,
//! §2.3 and §4, after Dixit et al., INFOCOM 2013: "packets of every flow
//! are randomly assigned to one of the available shortest paths").
//!
//! In a symmetric fat-tree the packets of a flow see almost the same queues
//! on every path and arrive nearly in order; a failed or degraded link
//! breaks that symmetry and the receiver sees reordering (LBSP paper §2.3,
//! Fig. 1): the behaviour LBSP's path groups are built to avoid.
//!
//! Invariant: the chosen port is an up member of the group; with every
//! member down the packet is not forwarded (dropped as undecided, as every
//! scheme of weft does without a route). Downward hops (one-member groups)
//! are deterministic.
//!
//! Tofino resources: one random number per packet (the switch's seeded RNG,
//! as the hardware's random-number extern), 8 bits of metadata.
//!
//! Counters: `rps_decisions` (packets sprayed over more than one port).

use super::{ParamInfo, Params, SchemeError, SchemeInfo};
use weft_tofino::program::Declarations;
use weft_tofino::{IngressCx, Program, ProgramError};

/// Catalog entry.
pub fn info() -> SchemeInfo {
    let params: Vec<ParamInfo> = Vec::new();
    SchemeInfo {
        name: "rps",
        source: "LBSP paper (Appl. Sci. 2021) §2.3, §4: the original packet scatter (Dixit et al., INFOCOM 2013)",
        summary: "per packet: a uniformly random up port among all equal-cost next hops",
        reference_rate: None,
        params,
    }
}

/// The RPS program.
#[derive(Debug, Clone, Default)]
pub struct Rps {
    decisions: u64,
}

impl Rps {
    /// Builds from parameters (RPS has none).
    pub fn from_params(_p: &Params) -> Result<Self, SchemeError> {
        Ok(Rps::default())
    }
}

impl Program for Rps {
    fn has_egress(&self) -> bool {
        false
    }
    fn name(&self) -> &'static str {
        "rps"
    }

    fn declare(&mut self, d: &mut Declarations) {
        d.metadata_bits(8);
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let up = |p: &weft_wire::ids::PortId| cx.port_up.get(p.index()).copied().unwrap_or(false);
        let alive = cx.group.iter().filter(|p| up(p)).count();
        let chosen = match alive {
            0 => None,
            1 => cx.group.iter().copied().find(|p| up(p)),
            n => {
                self.decisions += 1;
                let k = rand::Rng::random_range(cx.rng, 0..n);
                cx.group.iter().copied().filter(|p| up(p)).nth(k)
            }
        };
        cx.forward_to(chosen);
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("rps_decisions", self.decisions)]
    }
}

/// The registry entry of `rps` (see [`crate::REGISTRY`]).
pub const SCHEME: crate::Scheme = crate::Scheme {
    info,
    build: |p, _| Ok(Box::new(Rps::from_params(p)?)),
    metrics: crate::SchemeMetrics {
        counters: &[("rps_decisions", "Packets sprayed to a random port of an equal-cost group of two or more up ports.")],
        gauges: &[],
        port_gauges: &[],
        distributions: &[],
    },
};
