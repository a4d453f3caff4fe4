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
use emu_node::time::Nanos;
use emu_node::tofino::BufferRules;
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
    /// A value that is not one the parameter takes.
    #[error("{0}")]
    Value(String),
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

/// Traffic-manager parameters of every switch: (name, unit, meaning).
pub const TM_PARAMS: [(&str, &str, &str); 6] = [
    (
        "tm.buffer",
        "tofino|ns3",
        "buffer sharing, PFC and ECN rules: weft's Tofino2 model (tofino), or the ConWeave authors' ns-3 switch MMU (ns3: switch-mmu.cc, counted in bytes, see docs/CALIBRATION.md)",
    ),
    (
        "tm.held_pfc",
        "counted|outside",
        "packets held in a paused reorder queue (ConWeave) count against their ingress port's PFC threshold from arrival, as any buffered packet (counted), or only once their queue resumes, as the authors' VOQs (outside; with tm.buffer=ns3 they stay outside the whole buffer)",
    ),
    (
        "tm.buffer_bytes",
        "bytes",
        "every switch's shared buffer, instead of the topology's or the target's (the authors' simulator: 9 MiB = 9437184)",
    ),
    (
        "tm.pfc_pause",
        "duration",
        "how long each PFC pause frame pauses its priority, converted to the nearest quanta (512 bit times) at each port's rate; default 977 quanta, 5 us at 100 Gbit/s (compare-ns3 sets 5us, the authors' PAUSE_TIME, at any rate)",
    ),
    (
        "tm.pfc_watchdog",
        "duration|off",
        "a PFC watchdog on every switch port, as data-center switches offer (off by default): a priority paused without a break this long is a storm, until no pause for it arrived for as long again; see tm.pfc_watchdog_action",
    ),
    (
        "tm.pfc_watchdog_action",
        "drop|forward",
        "what a port does for a priority in a PFC storm: drop its queued and arriving packets (drop, the default) or ignore its pauses and send (forward); counted per queue",
    ),
];

/// What the `tm.*` parameters of `--set` ask of every switch's traffic manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TmSettings {
    /// `tm.buffer`: the buffer, PFC and ECN rules.
    pub rules: BufferRules,
    /// `tm.held_pfc=outside`: held packets outside the PFC accounting.
    pub held_outside_pfc: bool,
    /// `tm.buffer_bytes`: the buffer size.
    pub buffer_bytes: Option<u64>,
    /// `tm.pfc_watchdog` and `tm.pfc_watchdog_action`.
    pub pfc_watchdog: Option<emu_node::tofino::tm::PfcWatchdog>,
    /// `tm.pfc_pause`: how long a pause frame pauses, in ns.
    pub pfc_pause_ns: Option<Nanos>,
}

/// Reads the `tm.*` parameters of `--set`.
pub fn tm_settings(params: &std::collections::BTreeMap<String, String>) -> Result<TmSettings, SetError> {
    let (mut rules, mut held, mut buffer_bytes, mut pfc_pause_ns) = (BufferRules::Tofino, None, None, None);
    let (mut watchdog, mut action): (Option<Nanos>, Option<emu_node::tofino::tm::PfcWatchdogAction>) = (None, None);
    for (k, v) in params.iter().filter(|(k, _)| k.starts_with("tm.")) {
        let bad = |e: &str| SetError::Value(format!("--set {k}={v}: {e}"));
        match k.as_str() {
            "tm.buffer" => rules = v.parse().map_err(|e: String| bad(&e))?,
            "tm.held_pfc" => {
                held = Some(match v.as_str() {
                    "counted" => false,
                    "outside" => true,
                    _ => return Err(bad("expected counted or outside")),
                })
            }
            "tm.buffer_bytes" => {
                let b: u64 = v.parse().map_err(|_| bad("expected a number of bytes"))?;
                if !(10_000..=1 << 40).contains(&b) {
                    return Err(bad("expected 10000 to 2^40 bytes"));
                }
                buffer_bytes = Some(b);
            }
            "tm.pfc_watchdog" if v == "off" => watchdog = None,
            "tm.pfc_watchdog" => match crate::config::units::parse_duration(v) {
                Ok(d) if d > 0 => watchdog = Some(d),
                Ok(_) => return Err(bad("a detection time of 0 would drop every paused packet: give a duration or off")),
                Err(e) => return Err(bad(&format!("{e} (a duration such as 200us, or off)"))),
            },
            "tm.pfc_watchdog_action" => action = Some(v.parse().map_err(|e: String| bad(&e))?),
            "tm.pfc_pause" => match crate::config::units::parse_duration(v) {
                // A frame carries at most 0xffff quanta: 83.9 us at 400 Gbit/s.
                Ok(d) if (1..=80_000).contains(&d) => pfc_pause_ns = Some(d),
                Ok(_) => {
                    return Err(bad("expected a pause from 1ns to 80us (a frame carries at most 65535 quanta, 83.9 us at 400 Gbit/s)"))
                }
                Err(e) => return Err(bad(&format!("{e} (a duration such as 5us)"))),
            },
            _ => {
                let known: Vec<&str> = TM_PARAMS.iter().map(|p| p.0).collect();
                return Err(SetError::Value(format!("--set {k}: unknown traffic-manager parameter (known: {})", known.join(", "))));
            }
        }
    }
    if rules == BufferRules::Ns3 && held == Some(false) {
        return Err(SetError::Value(
            "--set tm.held_pfc=counted: the ns3 buffer rules always keep held packets outside (use tm.buffer=tofino)".into(),
        ));
    }
    if action.is_some() && watchdog.is_none() {
        return Err(SetError::Value("--set tm.pfc_watchdog_action needs --set tm.pfc_watchdog=DURATION".into()));
    }
    let pfc_watchdog =
        watchdog.map(|d| emu_node::tofino::tm::PfcWatchdog { detect_ns: d, restore_ns: d, action: action.unwrap_or_default() });
    Ok(TmSettings { rules, held_outside_pfc: held.unwrap_or(false), buffer_bytes, pfc_watchdog, pfc_pause_ns })
}

/// Reads `--frame-bytes`: `KIND=BYTES` pairs separated by commas, KIND
/// one of `ack`, `cnp`, `pfc`, BYTES 0 to 9000.
pub fn parse_frame_bytes(s: &str) -> Result<emu_node::wire::frame::ControlFrameBytes, String> {
    let mut c = emu_node::wire::frame::ControlFrameBytes::default();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (kind, bytes) = item.split_once('=').ok_or_else(|| format!("`{item}`: expected KIND=BYTES, e.g. ack=49"))?;
        let b: u16 = bytes.trim().parse().ok().filter(|&b| b <= 9000).ok_or_else(|| format!("`{item}`: expected 0 to 9000 bytes"))?;
        let slot = match kind.trim() {
            "ack" => &mut c.ack,
            "cnp" => &mut c.cnp,
            "pfc" => &mut c.pfc,
            k => return Err(format!("`{item}`: unknown frame kind `{k}` (ack, cnp, pfc)")),
        };
        *slot = Some(b);
    }
    if c.is_none() {
        return Err(format!("`{s}`: expected at least one KIND=BYTES (ack, cnp, pfc)"));
    }
    Ok(c)
}

/// Every transport parameter: (name, unit, meaning). Defaults: docs/HOSTS.md#reference-parameters.
pub const TRANSPORT_PARAMS: [(&str, &str, &str); 27] = [
    ("roce.gbn_timeout", "duration", "Go-Back-N: resend after this long without progress (1ms)"),
    ("tcp.cc", "newreno|dctcp", "TCP congestion control (newreno)"),
    ("tcp.mss", "bytes", "maximum segment size (1460)"),
    ("tcp.min_rto", "duration", "minimum retransmission timeout (1ms)"),
    ("tcp.initial_rto", "duration", "retransmission timeout before the first RTT sample (1ms)"),
    (
        "tcp.rto",
        "rfc6298|linux",
        "RTO rule: max(min_rto, SRTT + 4 RTTVAR) as RFC 6298 (rfc6298), or SRTT + max(4 RTTVAR, min_rto) as Linux (linux) (rfc6298)",
    ),
    ("tcp.rcv_buffer", "size", "receive window advertised by receivers (4MiB)"),
    ("tcp.dctcp_g", "fraction", "DCTCP gain g (1/16)"),
    ("roce.payload", "bytes", "payload per packet (1000)"),
    ("roce.nak_interval", "duration", "receiver: at most one NAK per QP per interval (4us)"),
    (
        "roce.arp",
        "resolve|static",
        "the gateway's MAC: asked for with ARP before a host's first frame (resolve), or known from the start (static, as the ConWeave authors' simulator, which has no ARP) (resolve)",
    ),
    ("irn.bdp", "size", "IRN in-flight limit (default: the fabric's BDP)"),
    ("irn.rto_low", "duration", "IRN timeout with <= 3 packets in flight (100us)"),
    ("irn.rto_high", "duration", "IRN timeout otherwise (320us)"),
    ("irn.resend", "selective|from-unacked", "what a NAK resends: the missing packet (selective, the IRN paper) or every unreported packet from the oldest unacknowledged on (from-unacked, the ConWeave authors' simulator)"),
    ("dcqcn.enabled", "bool", "DCQCN on/off (true)"),
    ("dcqcn.g", "fraction", "alpha gain (1/256)"),
    ("dcqcn.alpha_interval", "duration", "period of the alpha update from the CNP-arrived bit (1us)"),
    ("dcqcn.decrease_interval", "duration", "period of the rate-decrease check, a cut only if a CNP arrived (4us)"),
    ("dcqcn.rp_timer", "duration", "rate-increase timer (300us)"),
    ("dcqcn.fast_recovery_stages", "count", "fast-recovery stages (1)"),
    ("dcqcn.rai", "rate", "additive increase (40Mbps at 100G, scaled)"),
    ("dcqcn.rhai", "rate", "hyper increase (100Mbps at 100G, scaled)"),
    ("dcqcn.min_rate", "rate", "minimum rate (100Mbps at 100G, scaled)"),
    (
        "dcqcn.cnp_interval",
        "duration",
        "receiver: at most one CNP per QP per interval (0: one per ECN-marked packet, as the ConWeave authors' simulator)",
    ),
    (
        "dcqcn.clamp_target_rate",
        "bool",
        "set the target to the current rate on every cut (false: not while the increase stage is 0, the authors' CLAMP_TARGET_RATE 0)",
    ),
    ("dcqcn.rate_on_first_cnp", "fraction", "fraction of the rate kept on a QP's first CNP (1.0)"),
];

/// Every scheme with its parameters, and every transport and
/// traffic-manager parameter, as the Markdown of `docs/SCHEMES.md`
/// (`weft schemes --markdown`; a test keeps the file current).
pub fn reference_markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from("## Schemes\n\n");
    for s in schemes::catalog() {
        out += &format!("### `{}`\n\n{}\n\nSource: {}.\n\n", s.name, s.summary, s.source);
        if let Some(r) = s.reference_rate {
            out += &format!("Time parameters (µs) are given for {r} links and scaled to the fabric's (see \"Parameter scaling\").\n\n");
        }
        if s.params.is_empty() {
            out += "No parameters.\n\n";
            continue;
        }
        out += "| `--set` | default | unit | meaning |\n|---|---|---|---|\n";
        for p in &s.params {
            out += &format!("| `{}.{}` | {} | {} | {} |\n", s.name, p.name, cell(p.default), cell(p.unit), cell(p.doc));
        }
        out += "\n";
    }
    for (title, table) in [("Transport parameters", &TRANSPORT_PARAMS[..]), ("Traffic-manager parameters", &TM_PARAMS[..])] {
        out += &format!("## {title}\n\n| `--set` | unit | meaning (default) |\n|---|---|---|\n");
        for (name, unit, doc) in table {
            out += &format!("| `{name}` | {} | {} |\n", cell(unit), cell(doc));
        }
        out += "\n";
    }
    out
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
        let mut f = crate::config::topology::Topology::load("leaf-spine-2x4").unwrap().fabric;
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

    #[test]
    fn docs_schemes_md_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/SCHEMES.md");
        let doc = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(doc.contains(&reference_markdown()), "docs/SCHEMES.md is stale: regenerate its tables with `weft schemes --markdown`");
    }
    #[test]
    fn frame_bytes_read_each_kind_and_reject_the_rest() {
        use emu_node::wire::frame::ControlFrameBytes;
        assert_eq!(parse_frame_bytes("ack=49,cnp=0, pfc=32"), Ok(ControlFrameBytes { ack: Some(49), cnp: Some(0), pfc: Some(32) }));
        assert_eq!(parse_frame_bytes("ack=49"), Ok(ControlFrameBytes { ack: Some(49), ..Default::default() }));
        for (bad, says) in [
            ("", "at least one"),
            ("ack", "KIND=BYTES"),
            ("syn=3", "unknown frame kind `syn`"),
            ("ack=-1", "0 to 9000"),
            ("pfc=9001", "0 to 9000"),
        ] {
            let e = parse_frame_bytes(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
