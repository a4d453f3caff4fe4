//! # weft-schemes — load-balancing schemes, each a program for the Tofino model
//!
//! The scheme layer (docs/ARCHITECTURE.md: wire → chip model → schemes → core →
//! runtime → orchestrator). Every scheme is a [`Program`]
//! of `weft-tofino` and sees the switch only through the program interface
//! (its contexts, [`SwitchView`](weft_tofino::SwitchView), the L3 table): it
//! depends on `weft-wire` and `weft-tofino` and must never depend on the
//! core, a driver or the orchestrator. Design choice: one module per scheme,
//! whose doc cites the paper section it follows; all scheme state lives in
//! declared registers or plain counters; no scheme reads a clock, a socket
//! or a global random number generator (randomness comes from the switch's
//! seeded RNG in the context). The mechanism tests that run a scheme inside
//! a whole switch live with the switch in the core (weft-core,
//! `tests/schemes.rs`, `tests/conweave.rs`).
//!
//! [`catalog`] lists every scheme with its parameters and defaults (what
//! `weft schemes` prints); [`build`] instantiates one by name with
//! `--set scheme.param=value` overrides. Adding a scheme = a module here,
//! one entry in [`catalog`] and one arm in [`build`].
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod conga;
pub mod conweave;
pub mod drill;
pub mod ecmp;
pub mod flowlet;
pub mod int_nexthop;
pub mod lbsp;
pub mod letflow;
pub mod p4te;
pub mod rps;

use std::collections::BTreeMap;
use weft_tofino::Program;
use weft_wire::time::{BitRate, Nanos};

/// One documented parameter of a scheme.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ParamInfo {
    /// Name (as in `--set <scheme>.<name>=...`).
    pub name: &'static str,
    /// Default value, as text.
    pub default: &'static str,
    /// Unit or type.
    pub unit: &'static str,
    /// Meaning.
    pub doc: &'static str,
}

impl ParamInfo {
    /// A time parameter (its unit is µs): scaled with the link rate
    /// (docs/SCHEMES.md#parameter-scaling, [`TimeScale`]).
    pub fn is_time(&self) -> bool {
        self.unit.ends_with("µs")
    }
}

/// The factor a scheme's time parameters are multiplied by (docs/SCHEMES.md#parameter-scaling):
/// `reference_rate / actual_rate`, where the reference is the link rate the
/// scheme's defaults are given for ([`SchemeInfo::reference_rate`]) and the
/// actual rate the fabric's (the orchestrator chooses it: its slowest link
/// between two switches). It applies to every time parameter, default or
/// set, and to the defaults a scheme derives from the topology (ConWeave's
/// 3-tier values). Invariant: finite and positive.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct TimeScale(f64);

impl TryFrom<f64> for TimeScale {
    type Error = String;
    fn try_from(f: f64) -> Result<Self, String> {
        TimeScale::new(f).ok_or_else(|| format!("time scale {f} is not a positive number"))
    }
}

impl From<TimeScale> for f64 {
    fn from(s: TimeScale) -> f64 {
        s.0
    }
}

impl TimeScale {
    /// No scaling.
    pub const ONE: TimeScale = TimeScale(1.0);

    /// `reference / actual` (1 when either is zero).
    pub fn for_rates(reference: BitRate, actual: BitRate) -> Self {
        if reference.bps() == 0 || actual.bps() == 0 {
            return TimeScale::ONE;
        }
        TimeScale(reference.bps() as f64 / actual.bps() as f64)
    }

    /// A factor given directly; `None` unless finite and positive.
    pub fn new(factor: f64) -> Option<Self> {
        (factor.is_finite() && factor > 0.0).then_some(TimeScale(factor))
    }

    /// The factor.
    pub fn factor(self) -> f64 {
        self.0
    }

    /// `ns` scaled, rounded to the nanosecond (0 stays 0; a positive time
    /// stays at least 1 ns).
    pub fn ns(self, ns: Nanos) -> Nanos {
        if self.0 == 1.0 || ns == 0 {
            return ns;
        }
        ((ns as f64 * self.0).round() as Nanos).max(1)
    }
}

impl Default for TimeScale {
    fn default() -> Self {
        TimeScale::ONE
    }
}

/// A scheme in the catalog.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SchemeInfo {
    /// Name for `--scheme`.
    pub name: &'static str,
    /// Source paper / section.
    pub source: &'static str,
    /// One-line description.
    pub summary: &'static str,
    /// The link rate its time parameters' defaults are given for (docs/SCHEMES.md,
    /// "Parameter scaling"); `None`: it has no time parameters.
    pub reference_rate: Option<BitRate>,
    /// Parameters.
    pub params: Vec<ParamInfo>,
}

/// Why a scheme could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemeError {
    /// No scheme of that name.
    #[error("unknown scheme `{name}` (known: {known})")]
    Unknown {
        /// Requested name.
        name: String,
        /// Known names.
        known: String,
    },
    /// A parameter the scheme does not have.
    #[error("scheme `{scheme}` has no parameter `{param}` (parameters: {known})")]
    UnknownParam {
        /// Scheme.
        scheme: String,
        /// Parameter.
        param: String,
        /// Known parameters.
        known: String,
    },
    /// A parameter value that does not parse.
    #[error("scheme `{scheme}`: parameter `{param}` = `{value}` is not a valid {unit}")]
    BadValue {
        /// Scheme.
        scheme: String,
        /// Parameter.
        param: String,
        /// Value given.
        value: String,
        /// Expected unit/type.
        unit: String,
    },
}

/// Raw parameter overrides: name → value text.
pub type Params = BTreeMap<String, String>;

/// What a scheme exports besides the switch's own metrics (docs/RESULTS.md),
/// names without their `weft_scheme_` prefix, each with its help text.
#[derive(Debug, Clone, Copy)]
pub struct SchemeMetrics {
    /// Counters (name, help): `weft_scheme_<name>_total{switch, scheme}`.
    pub counters: &'static [(&'static str, &'static str)],
    /// Per-switch gauges (name, unit, help).
    pub gauges: &'static [(&'static str, &'static str, &'static str)],
    /// Per-port gauges (name, unit, help).
    pub port_gauges: &'static [(&'static str, &'static str, &'static str)],
    /// Sampled distributions (name, unit, help, histogram bounds).
    pub distributions: &'static [(&'static str, &'static str, &'static str, &'static [f64])],
}

/// How a scheme is built: from parameters already checked against its
/// catalog entry, its time parameters multiplied by the scale.
pub type BuildFn = fn(&Params, TimeScale) -> Result<Box<dyn Program>, SchemeError>;

/// One scheme: everything the rest of weft knows of it. Adding a scheme is
/// its module plus one line in [`REGISTRY`].
#[derive(Debug, Clone, Copy)]
pub struct Scheme {
    /// Name, source, summary and parameters (`weft schemes`).
    pub info: fn() -> SchemeInfo,
    /// Builds the program from parameters already checked against `info`,
    /// its time parameters multiplied by the scale.
    pub build: BuildFn,
    /// Its metrics.
    pub metrics: SchemeMetrics,
}

/// Every scheme weft has.
pub const REGISTRY: &[Scheme] = &[
    ecmp::SCHEME,
    rps::SCHEME,
    letflow::SCHEME,
    drill::SCHEME,
    conga::SCHEME,
    conweave::SCHEME,
    lbsp::SCHEME,
    int_nexthop::SCHEME,
    p4te::SCHEME,
];

/// Every scheme's information, in registry order.
pub fn catalog() -> Vec<SchemeInfo> {
    REGISTRY.iter().map(|s| (s.info)()).collect()
}

/// Builds scheme `name` with `params` (unknown parameters are errors), its
/// time parameters multiplied by `scale`.
pub fn build(name: &str, params: &Params, scale: TimeScale) -> Result<Box<dyn Program>, SchemeError> {
    let Some((scheme, info)) = REGISTRY.iter().map(|s| (s, (s.info)())).find(|(_, i)| i.name == name) else {
        return Err(SchemeError::Unknown { name: name.into(), known: catalog().iter().map(|s| s.name).collect::<Vec<_>>().join(", ") });
    };
    for k in params.keys() {
        if !info.params.iter().any(|p| p.name == k) {
            return Err(SchemeError::UnknownParam {
                scheme: name.into(),
                param: k.clone(),
                known: info.params.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
            });
        }
    }
    (scheme.build)(params, scale)
}

/// The catalog entry of scheme `name`.
pub fn info(name: &str) -> Option<SchemeInfo> {
    REGISTRY.iter().map(|s| (s.info)()).find(|i| i.name == name)
}

/// Parses parameter `key` of `scheme` from `params`, or returns `default`.
pub(crate) fn param<T: std::str::FromStr>(scheme: &str, params: &Params, key: &str, unit: &str, default: T) -> Result<T, SchemeError> {
    match params.get(key) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| SchemeError::BadValue {
            scheme: scheme.into(),
            param: key.into(),
            value: v.clone(),
            unit: unit.into(),
        }),
    }
}

/// [`param`] that also rejects values outside `valid` (e.g. zero table
/// sizes, negative times), naming the parameter and the accepted range.
pub(crate) fn param_in<T: std::str::FromStr + ToString>(
    scheme: &str,
    params: &Params,
    key: &str,
    unit: &str,
    default: T,
    valid: impl Fn(&T) -> bool,
) -> Result<T, SchemeError> {
    let v = param(scheme, params, key, unit, default)?;
    if valid(&v) {
        Ok(v)
    } else {
        Err(SchemeError::BadValue { scheme: scheme.into(), param: key.into(), value: v.to_string(), unit: unit.into() })
    }
}

/// A finite number of microseconds at least `min`, in ns.
pub(crate) fn param_us(scheme: &str, params: &Params, key: &str, default: f64, positive: bool) -> Result<u64, SchemeError> {
    let unit = if positive { "positive number of µs" } else { "non-negative number of µs" };
    let v = param_in(scheme, params, key, unit, default, |v: &f64| v.is_finite() && if positive { *v > 0.0 } else { *v >= 0.0 })?;
    Ok((v * 1000.0) as u64)
}

/// The route data of schemes that keep per-destination-leaf state (CONGA's
/// tables, ConWeave's path status, DRILL's best-port memory): the index of
/// the leaf the route's hosts attach to, as the fabric's control plane
/// installs it.
pub fn leaf_of_route(route: &weft_tofino::l3::Route) -> Option<u32> {
    route.dst_leaf.map(u32::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_scale_is_the_rate_ratio_and_rounds_to_the_nanosecond() {
        let s = TimeScale::for_rates(BitRate::gbps(100), BitRate::gbps(25));
        assert_eq!(s.factor(), 4.0);
        assert_eq!(s.ns(100_000), 400_000);
        let tiny = TimeScale::new(1e-6).expect("positive");
        assert_eq!(tiny.ns(0), 0, "zero (off) stays off");
        assert_eq!(tiny.ns(10), 1, "a positive time stays positive");
        assert_eq!(TimeScale::for_rates(BitRate::gbps(1), BitRate(0)), TimeScale::ONE);
        assert!(TimeScale::new(0.0).is_none() && TimeScale::new(f64::NAN).is_none());
        assert!(TimeScale::try_from(-1.0).is_err(), "the wire form is checked too");
    }

    #[test]
    fn time_parameters_are_the_microsecond_ones_and_every_scheme_that_has_one_has_a_reference_rate() {
        for s in catalog() {
            let has_time = s.params.iter().any(ParamInfo::is_time);
            assert_eq!(has_time, s.reference_rate.is_some(), "{}", s.name);
        }
    }
}
