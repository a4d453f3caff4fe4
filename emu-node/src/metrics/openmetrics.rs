//! A virtual-time run's metrics as one OpenMetrics file (DESIGN §9):
//! samples of every node every `period` of fabric time, with timestamps,
//! for `promtool tsdb create-blocks-from openmetrics`.
//!
//! Prometheus stores millisecond timestamps, and the default period is
//! 100 µs of fabric time, so timestamps are `epoch + fabric time ×
//! time_scale` (default scale 1000: 1 µs of fabric time is 1 ms in the
//! TSDB). Rates read from such a TSDB are per scaled second: the dashboards
//! multiply them by their `time_scale` variable.
//!
//! Invariants: each family appears once, with its series contiguous and
//! their points in increasing time (OpenMetrics requires both); the file
//! ends with `# EOF`.

use super::families::{openmetrics_header, openmetrics_point, series_key, FamilySet};
use crate::time::Nanos;
use std::collections::BTreeMap;

/// Accumulates samples and writes them grouped by family and series.
#[derive(Debug)]
pub struct OpenMetricsRecorder {
    epoch_ms: u64,
    time_scale: u64,
    families: BTreeMap<String, (String, BTreeMap<String, String>)>,
    last_ts_ms: Option<u64>,
    samples: u64,
    constant: Vec<(String, String)>,
}

impl OpenMetricsRecorder {
    /// A recorder whose timestamps are `epoch_ms + fabric time ×
    /// time_scale` (milliseconds).
    pub fn new(epoch_ms: u64, time_scale: u64) -> Self {
        OpenMetricsRecorder {
            epoch_ms,
            time_scale: time_scale.max(1),
            families: BTreeMap::new(),
            last_ts_ms: None,
            samples: 0,
            constant: Vec::new(),
        }
    }

    /// Adds `name="value"` to every sample (e.g. `fabric`, as the file-SD
    /// of a live fabric does, so the dashboards' variables work alike).
    pub fn with_label(mut self, name: &str, value: &str) -> Self {
        self.constant.push((name.to_string(), value.to_string()));
        self
    }

    /// The timestamp (ms) of fabric time `now`.
    pub fn timestamp_ms(&self, now: Nanos) -> u64 {
        self.epoch_ms + (now as u128 * self.time_scale as u128 / 1_000_000) as u64
    }

    /// Records the families gathered at fabric time `now`. A sample whose
    /// timestamp (ms) equals the previous one is skipped (the period is
    /// too short for the time scale).
    pub fn record(&mut self, now: Nanos, set: &FamilySet) {
        let ts_ms = self.timestamp_ms(now);
        if self.last_ts_ms.is_some_and(|l| ts_ms <= l) {
            return;
        }
        self.last_ts_ms = Some(ts_ms);
        self.samples += 1;
        let ts = format!("{}.{:03}", ts_ms / 1000, ts_ms % 1000);
        for f in set.families() {
            let (_, series) = self.families.entry(f.name().to_string()).or_insert_with(|| (openmetrics_header(f), BTreeMap::new()));
            for m in f.get_metric() {
                let body = series.entry(series_key(m)).or_default();
                openmetrics_point(f, m, &self.constant, &ts, body);
            }
        }
    }

    /// Samples recorded.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Writes the file.
    pub fn write(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        for (header, series) in self.families.values() {
            w.write_all(header.as_bytes())?;
            for body in series.values() {
                w.write_all(body.as_bytes())?;
            }
        }
        w.write_all(b"# EOF\n")
    }
}

/// Samples every node of a virtual-time engine into a recorder.
#[derive(Debug)]
pub struct EngineMetrics {
    collectors: Vec<super::NodeMetrics>,
    /// The samples so far.
    pub recorder: OpenMetricsRecorder,
    /// Sampling period, fabric time.
    pub period: Nanos,
}

impl EngineMetrics {
    /// Samples every `period` into `recorder`.
    pub fn new(recorder: OpenMetricsRecorder, period: Nanos) -> Self {
        EngineMetrics { collectors: Vec::new(), recorder, period: period.max(1) }
    }

    /// Collects every node of `engine` as of fabric time `at` (the engine
    /// has run every event up to it).
    pub fn sample(&mut self, fabric: &crate::fabric::FabricSpec, engine: &crate::engine::Engine, at: Nanos) {
        let nodes = engine.nodes();
        if self.collectors.len() < nodes.len() {
            self.collectors.resize_with(nodes.len(), super::NodeMetrics::new);
        }
        let now = at.max(engine.now());
        let mut set = FamilySet::new();
        for (i, (n, c)) in nodes.iter().zip(self.collectors.iter_mut()).enumerate() {
            c.collect(fabric, i, n, now, &mut set);
        }
        self.recorder.record(now, &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_grouped_series_contiguous_and_time_scaled() {
        let mut r = OpenMetricsRecorder::new(1_000_000, 1000);
        for (t, v) in [(0u64, 1u64), (100_000, 5)] {
            let mut s = FamilySet::new();
            s.counter("weft_port_tx_bytes_total", &[("switch", "a")], v);
            s.counter("weft_port_tx_bytes_total", &[("switch", "b")], v * 2);
            s.gauge("weft_port_up", &[("switch", "a")], 1.0);
            r.record(t, &s);
        }
        let mut out = Vec::new();
        r.write(&mut out).unwrap_or_default();
        let text = String::from_utf8(out).unwrap_or_default();
        let expected = "# TYPE weft_port_tx_bytes counter\n";
        assert!(text.starts_with(expected), "{text}");
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("weft_port_tx_bytes_total")).collect();
        assert_eq!(
            lines,
            [
                "weft_port_tx_bytes_total{switch=\"a\"} 1 1000.000",
                "weft_port_tx_bytes_total{switch=\"a\"} 5 1000.100",
                "weft_port_tx_bytes_total{switch=\"b\"} 2 1000.000",
                "weft_port_tx_bytes_total{switch=\"b\"} 10 1000.100",
            ]
        );
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(r.samples(), 2);
    }
}
