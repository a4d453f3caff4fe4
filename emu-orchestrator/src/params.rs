//! `--set GROUP.PARAM=VALUE`: the parameters a run gives its schemes and its
//! transport, sorted by the group each names.
//!
//! A group is either a scheme (`conga.flowlet_gap_us=500`: only the switches
//! that run CONGA get it) or a transport or traffic-manager group (`roce`,
//! `irn`, `dcqcn`, `tcp`, `tm`: the hosts' transport and every switch's
//! traffic manager, read by the experiment).
//!
//! Invariants: a scheme parameter reaches exactly the switches that run its
//! scheme; a parameter for a scheme that no switch runs, or one its scheme
//! does not declare, is an error naming both, never silently dropped or
//! applied elsewhere.

use emu_node::fabric::FabricSpec;
use emu_node::schemes::{self, Params};
use std::collections::{BTreeMap, BTreeSet};

/// Prefixes of transport and traffic-manager parameters in `--set`.
pub const TRANSPORT_PARAM_GROUPS: [&str; 5] = ["roce", "irn", "dcqcn", "tcp", "tm"];

/// `--set` arguments sorted by group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sets {
    /// Scheme parameters, by scheme name (group prefix removed).
    pub scheme_params: BTreeMap<String, Params>,
    /// Transport and traffic-manager parameters, keys with their group
    /// (`dcqcn.rp_timer`).
    pub transport_params: BTreeMap<String, String>,
}

/// A `--set` argument that cannot be applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SetError {
    /// Not `GROUP.PARAM=VALUE`.
    #[error("--set `{0}`: expected GROUP.PARAM=VALUE (GROUP: a scheme or one of roce, irn, dcqcn, tcp, tm)")]
    Syntax(String),
    /// The group is neither a scheme nor a transport group.
    #[error("--set `{set}`: `{group}` is neither a scheme ({schemes}) nor one of {groups}")]
    UnknownGroup {
        /// The argument.
        set: String,
        /// Its group.
        group: String,
        /// Every scheme.
        schemes: String,
        /// Every transport group.
        groups: String,
    },
    /// A scheme parameter the scheme does not declare.
    #[error("--set {scheme}.{param}: {scheme} has no parameter `{param}` (its parameters: {known})")]
    UnknownParam {
        /// The scheme.
        scheme: String,
        /// The parameter.
        param: String,
        /// What the scheme declares.
        known: String,
    },
    /// Parameters for a scheme that no switch of the run runs.
    #[error("--set {scheme}.{param}: no switch runs {scheme} (the switches run {running}); choose it with --scheme {scheme} or drop the setting")]
    SchemeNotRun {
        /// The scheme.
        scheme: String,
        /// One of its parameters.
        param: String,
        /// The schemes the switches run.
        running: String,
    },
}

/// Sorts `--set` arguments by group; checks each scheme parameter against
/// its scheme's declared parameters.
pub fn parse_sets(sets: &[String]) -> Result<Sets, SetError> {
    let mut out = Sets::default();
    for s in sets {
        let (k, v) = s.split_once('=').ok_or_else(|| SetError::Syntax(s.clone()))?;
        let (group, param) = k.split_once('.').ok_or_else(|| SetError::Syntax(s.clone()))?;
        if group.is_empty() || param.is_empty() {
            return Err(SetError::Syntax(s.clone()));
        }
        if TRANSPORT_PARAM_GROUPS.contains(&group) {
            out.transport_params.insert(k.to_string(), v.to_string());
            continue;
        }
        let Some(info) = schemes::info(group) else {
            return Err(SetError::UnknownGroup {
                set: s.clone(),
                group: group.to_string(),
                schemes: schemes::catalog().iter().map(|c| c.name).collect::<Vec<_>>().join(", "),
                groups: TRANSPORT_PARAM_GROUPS.join(", "),
            });
        };
        if !info.params.iter().any(|p| p.name == param) {
            return Err(SetError::UnknownParam {
                scheme: group.to_string(),
                param: param.to_string(),
                known: info.params.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
            });
        }
        out.scheme_params.entry(group.to_string()).or_default().insert(param.to_string(), v.to_string());
    }
    Ok(out)
}

/// The schemes the switches of `fabric` run.
pub fn schemes_run(fabric: &FabricSpec) -> BTreeSet<String> {
    fabric.nodes.iter().filter_map(|n| n.as_switch()).map(|s| s.scheme.clone()).collect()
}

/// Checks that every scheme of `scheme_params` runs on some switch of
/// `fabric` (after any `--scheme` override).
pub fn check_schemes_run(fabric: &FabricSpec, scheme_params: &BTreeMap<String, Params>) -> Result<(), SetError> {
    let running = schemes_run(fabric);
    for (scheme, params) in scheme_params {
        if !running.contains(scheme) {
            return Err(SetError::SchemeNotRun {
                scheme: scheme.clone(),
                param: params.keys().next().cloned().unwrap_or_default(),
                running: running.iter().cloned().collect::<Vec<_>>().join(", "),
            });
        }
    }
    Ok(())
}

/// Gives every switch of `fabric` the parameters set for the scheme it
/// runs (they override the topology's).
pub fn apply_scheme_params(fabric: &mut FabricSpec, scheme_params: &BTreeMap<String, Params>) {
    for n in &mut fabric.nodes {
        if let emu_node::fabric::NodeKind::Switch(sw) = &mut n.kind {
            if let Some(p) = scheme_params.get(&sw.scheme) {
                sw.params.extend(p.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(s: &[&str]) -> Result<Sets, SetError> {
        parse_sets(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn a_scheme_parameter_keeps_its_scheme() {
        let s = sets(&["letflow.flowlet_gap_us=500", "conga.flowlet_gap_us=100", "dcqcn.rp_timer=55us"]).unwrap();
        assert_eq!(s.scheme_params["letflow"]["flowlet_gap_us"], "500");
        assert_eq!(s.scheme_params["conga"]["flowlet_gap_us"], "100");
        assert_eq!(s.transport_params["dcqcn.rp_timer"], "55us");
    }

    #[test]
    fn a_parameter_reaches_only_the_switches_of_its_scheme() {
        let mut f = crate::topology::Topology::load("leaf-spine-2x4").unwrap().fabric;
        for n in &mut f.nodes {
            if let emu_node::fabric::NodeKind::Switch(sw) = &mut n.kind {
                sw.scheme = "conga".into();
            }
        }
        let s = sets(&["letflow.flowlet_gap_us=500"]).unwrap();
        let err = check_schemes_run(&f, &s.scheme_params).unwrap_err();
        assert!(matches!(&err, SetError::SchemeNotRun { scheme, running, .. } if scheme == "letflow" && running == "conga"), "{err}");
        apply_scheme_params(&mut f, &s.scheme_params);
        assert!(f.nodes.iter().filter_map(|n| n.as_switch()).all(|sw| sw.params.is_empty()));
        let s = sets(&["conga.flowlet_gap_us=100"]).unwrap();
        check_schemes_run(&f, &s.scheme_params).unwrap();
        apply_scheme_params(&mut f, &s.scheme_params);
        assert!(f.nodes.iter().filter_map(|n| n.as_switch()).all(|sw| sw.params["flowlet_gap_us"] == "100"));
    }

    #[test]
    fn unknown_groups_parameters_and_syntax_are_errors() {
        assert!(matches!(sets(&["nosuch.x=1"]), Err(SetError::UnknownGroup { .. })));
        assert!(matches!(sets(&["conga.nosuch=1"]), Err(SetError::UnknownParam { .. })));
        for bad in ["conga", "conga=1", ".x=1", "conga.=1"] {
            assert!(matches!(sets(&[bad]), Err(SetError::Syntax(_))), "{bad}");
        }
    }
}
