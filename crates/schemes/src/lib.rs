//! # weft-schemes — load-balancing schemes, each a program for the Tofino model
//!
//! The scheme layer (DESIGN §3: wire → chip model → schemes → core →
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
pub mod rps;

use std::collections::BTreeMap;
use weft_tofino::Program;

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

/// A scheme in the catalog.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SchemeInfo {
    /// Name for `--scheme`.
    pub name: &'static str,
    /// Source paper / section.
    pub source: &'static str,
    /// One-line description.
    pub summary: &'static str,
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

/// What a scheme exports besides the switch's own metrics (DESIGN §9),
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

/// One scheme: everything the rest of weft knows of it. Adding a scheme is
/// its module plus one line in [`REGISTRY`].
#[derive(Debug, Clone, Copy)]
pub struct Scheme {
    /// Name, source, summary and parameters (`weft schemes`).
    pub info: fn() -> SchemeInfo,
    /// Builds the program from parameters already checked against `info`.
    pub build: fn(&Params) -> Result<Box<dyn Program>, SchemeError>,
    /// Its metrics.
    pub metrics: SchemeMetrics,
}

/// Every scheme weft has.
pub const REGISTRY: &[Scheme] =
    &[ecmp::SCHEME, rps::SCHEME, letflow::SCHEME, drill::SCHEME, conga::SCHEME, conweave::SCHEME, lbsp::SCHEME, int_nexthop::SCHEME];

/// Every scheme's information, in registry order.
pub fn catalog() -> Vec<SchemeInfo> {
    REGISTRY.iter().map(|s| (s.info)()).collect()
}

/// Builds scheme `name` with `params` (unknown parameters are errors).
pub fn build(name: &str, params: &Params) -> Result<Box<dyn Program>, SchemeError> {
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
    (scheme.build)(params)
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
