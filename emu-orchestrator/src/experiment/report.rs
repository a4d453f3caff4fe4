//! What a comparison matrix gives: each cell's outcome, and `compare.json`
//! (schema `weft.compare/1`) with one entry per run.
//!
//! Invariants: compare.json is written from and read back into these
//! typed structs, its keys in alphabetical order; reading one that another
//! machine sent never panics, whatever it holds.

#[cfg(test)]
use crate::config::topology::Topology;
#[cfg(test)]
use crate::experiment::{run, RunOptions};
use crate::experiment::{RunError, RunOutcome};

/// One cell of a comparison matrix.
#[derive(Debug)]
pub struct CompareCell {
    /// Scheme.
    pub scheme: String,
    /// Load.
    pub load: f64,
    /// The run, or why it failed.
    pub outcome: Result<RunOutcome, RunError>,
}

/// The schema name of `compare.json`.
pub const COMPARE_SCHEMA: &str = "weft.compare/1";

/// `compare.json`: the matrix's settings and one [`CompareRun`] per cell.
///
/// Written through a `serde_json::Value`, so every object's keys are in
/// alphabetical order whatever the order of the fields here.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CompareReport {
    /// [`COMPARE_SCHEMA`].
    pub schema: String,
    /// Why the matrix is not complete (Ctrl-C), if it is not.
    pub incomplete: Option<String>,
    /// The topology's name.
    pub topology: String,
    /// The workload (a shipped name or a file).
    pub workload: String,
    /// Flows per run.
    pub flows: usize,
    /// The seed of every run.
    pub seed: u64,
    /// The warm-up excluded from the statistics, ns.
    pub warmup_ns: emu_node::time::Nanos,
    /// How a flow's slowdown is computed.
    pub slowdown_definition: emu_node::fct::SlowdownDefinition,
    /// The `--set` arguments as given.
    pub set: Vec<String>,
    /// Wall time of the whole matrix, s.
    pub wall_s: f64,
    /// One per cell that ran.
    pub runs: Vec<CompareRun>,
}

/// One cell of `compare.json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CompareRun {
    /// Transport name as given to `--transport`.
    pub transport: String,
    /// Scheme.
    pub scheme: String,
    /// Offered load.
    pub load: f64,
    /// FCT slowdown statistics.
    pub slowdown: emu_node::results::SlowdownReport,
    /// Uplink imbalance, where sampled.
    pub uplink_imbalance: Option<emu_node::results::ImbalanceStats>,
    /// The scheme's counters summed over the switches.
    pub scheme_totals: emu_node::results::SchemeTotals,
    /// The fabric's counters summed.
    pub network: emu_node::results::NetworkTotals,
    /// Packets delivered out of order, summed over the flows.
    pub out_of_order: u64,
    /// Simulated time, ns.
    pub simulated_ns: emu_node::time::Nanos,
    /// Packet-hops.
    pub packet_hops: u64,
    /// Engine events.
    pub events: u64,
    /// Why the run is not complete, if it is not.
    pub incomplete: Option<String>,
    /// Wall time of the run, s.
    pub wall_s: f64,
}

impl CompareRun {
    /// The cell of `transport`, `scheme` at `load` from its outcome.
    pub fn of(transport: &str, scheme: &str, load: f64, o: &RunOutcome) -> Self {
        let s = &o.summary;
        CompareRun {
            transport: transport.to_string(),
            scheme: scheme.to_string(),
            load,
            slowdown: s.slowdown.clone(),
            uplink_imbalance: s.uplink_imbalance.clone(),
            scheme_totals: s.scheme_totals.clone(),
            network: s.network,
            out_of_order: s.flows.iter().map(|f| f.out_of_order).sum(),
            simulated_ns: s.simulated_ns,
            packet_hops: s.totals.packet_hops,
            events: s.totals.events,
            incomplete: s.incomplete.clone(),
            wall_s: o.wall.as_secs_f64(),
        }
    }

    /// The run's wall time; zero for a value that is not a duration (a
    /// report from another machine is not trusted to be well formed).
    pub fn wall(&self) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(self.wall_s).unwrap_or_default()
    }
}

impl CompareReport {
    /// The report as `compare.json` text (keys sorted, a final newline).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        Ok(serde_json::to_string_pretty(&serde_json::to_value(self)?)? + "\n")
    }

    /// Reads `compare.json` text; an error for another schema.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let r: CompareReport = serde_json::from_str(text).map_err(|e| format!("compare.json: {e}"))?;
        if r.schema != COMPARE_SCHEMA {
            return Err(format!("compare.json: schema `{}`, expected `{COMPARE_SCHEMA}`", r.schema));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// compare.json is read back into the very report that wrote it, and
    /// no text at all (truncated, wrong types, absurd wall times) panics.
    #[test]
    fn a_report_reads_back_typed_and_malformed_text_is_an_error_not_a_panic() {
        let topo = Topology::load("leaf-spine-2x4").unwrap();
        let o = run(&topo, &RunOptions { flow_size: 50_000, ..Default::default() }, &mut |_, _| {}).unwrap();
        let report = CompareReport {
            schema: COMPARE_SCHEMA.into(),
            incomplete: None,
            topology: "leaf-spine-2x4".into(),
            workload: "alistorage".into(),
            flows: 10,
            seed: 1,
            warmup_ns: 0,
            slowdown_definition: Default::default(),
            set: vec!["conga.flowlet_gap_us=100".into()],
            wall_s: 1.5,
            runs: vec![CompareRun::of("roce-irn", "ecmp", 0.5, &o)],
        };
        let text = report.to_json().unwrap();
        assert_eq!(CompareReport::from_json(&text).unwrap(), report);
        // Every prefix of it, and values of the wrong kind, are errors.
        for cut in (0..text.len()).step_by(97) {
            assert!(CompareReport::from_json(&text[..cut]).is_err());
        }
        assert!(CompareReport::from_json(&text.replace(COMPARE_SCHEMA, "weft.compare/9")).is_err());
        assert!(CompareReport::from_json(&text.replacen("\"wall_s\": 1.5", "\"wall_s\": \"soon\"", 1)).is_err());
        for wall in [f64::NAN, -1.0, f64::INFINITY, 1e300] {
            let r = CompareRun { wall_s: wall, ..report.runs[0].clone() };
            assert_eq!(r.wall(), std::time::Duration::ZERO, "{wall}");
        }
    }
}
