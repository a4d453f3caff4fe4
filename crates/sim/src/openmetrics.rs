//! A virtual-time run's metrics as one OpenMetrics file (docs/RESULTS.md):
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

use prometheus::proto::MetricType;
use std::collections::BTreeMap;
use weft_metrics::families::{fmt_f64, openmetrics_header, series_labels, FamilySet};
use weft_wire::time::Nanos;

/// The points of one series: sample indices and their values (one value
/// per point, or for a histogram the cumulative bucket counts, then the
/// sum and the count).
#[derive(Debug, Default)]
struct SeriesPoints {
    at: Vec<u32>,
    values: Vec<f64>,
}

#[derive(Debug)]
struct FamilyPoints {
    header: String,
    kind: MetricType,
    /// Histogram bucket bounds (empty otherwise).
    bounds: Vec<f64>,
    series: BTreeMap<String, SeriesPoints>,
}

/// Accumulates samples (values only: about 12 bytes per counter or gauge
/// point) and writes them grouped by family and series.
#[derive(Debug)]
pub struct OpenMetricsRecorder {
    epoch_ms: u64,
    time_scale: u64,
    families: BTreeMap<String, FamilyPoints>,
    /// Timestamp (ms) of each sample.
    stamps: Vec<u64>,
    constant: Vec<(String, String)>,
}

impl OpenMetricsRecorder {
    /// A recorder whose timestamps are `epoch_ms + fabric time ×
    /// time_scale` (milliseconds).
    pub fn new(epoch_ms: u64, time_scale: u64) -> Self {
        OpenMetricsRecorder { epoch_ms, time_scale: time_scale.max(1), families: BTreeMap::new(), stamps: Vec::new(), constant: Vec::new() }
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
    /// timestamp (ms) equals the previous one replaces it (the later state
    /// wins, e.g. the final sample of a run that ends just after a periodic
    /// one); an earlier one is ignored.
    pub fn record(&mut self, now: Nanos, set: &FamilySet) {
        let ts_ms = self.timestamp_ms(now);
        let k = match self.stamps.last() {
            Some(l) if ts_ms < *l => return,
            Some(l) if ts_ms == *l => (self.stamps.len() - 1) as u32,
            _ => {
                self.stamps.push(ts_ms);
                (self.stamps.len() - 1) as u32
            }
        };
        for f in set.families() {
            let fam = self.families.entry(f.name().to_string()).or_insert_with(|| FamilyPoints {
                header: openmetrics_header(f),
                kind: f.get_field_type(),
                bounds: f
                    .get_metric()
                    .first()
                    .map(|m| m.get_histogram().get_bucket().iter().map(|b| b.upper_bound()).collect())
                    .unwrap_or_default(),
                series: BTreeMap::new(),
            });
            let stride = if fam.kind == MetricType::HISTOGRAM { fam.bounds.len() + 2 } else { 1 };
            for m in f.get_metric() {
                let labels = series_labels(m, &self.constant);
                let sp = fam.series.entry(labels).or_default();
                if sp.at.last() == Some(&k) {
                    // Replacing this sample: drop the older values.
                    sp.at.pop();
                    sp.values.truncate(sp.values.len() - stride);
                }
                sp.at.push(k);
                match fam.kind {
                    MetricType::COUNTER => sp.values.push(m.get_counter().get_value()),
                    MetricType::GAUGE => sp.values.push(m.get_gauge().get_value()),
                    MetricType::HISTOGRAM => {
                        let h = m.get_histogram();
                        // Same bounds for every series of a family (the
                        // catalogue fixes them).
                        for i in 0..fam.bounds.len() {
                            sp.values.push(h.get_bucket().get(i).map_or(h.get_sample_count(), |b| b.cumulative_count()) as f64);
                        }
                        sp.values.push(h.get_sample_sum());
                        sp.values.push(h.get_sample_count() as f64);
                    }
                    _ => sp.values.push(0.0),
                }
            }
        }
    }

    /// Samples recorded.
    pub fn samples(&self) -> u64 {
        self.stamps.len() as u64
    }

    /// Writes the file.
    pub fn write(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut line = String::new();
        for (name, fam) in &self.families {
            w.write_all(fam.header.as_bytes())?;
            let le: Vec<String> = fam.bounds.iter().map(|b| fmt_f64(*b)).collect();
            let stride = if fam.kind == MetricType::HISTOGRAM { fam.bounds.len() + 2 } else { 1 };
            for (labels, sp) in &fam.series {
                let (open, close) = if labels.is_empty() { ("", "") } else { ("{", "}") };
                let sep = if labels.is_empty() { "" } else { "," };
                for (p, at) in sp.at.iter().enumerate() {
                    let ms = self.stamps.get(*at as usize).copied().unwrap_or(0);
                    let ts = format!("{}.{:03}", ms / 1000, ms % 1000);
                    let v = &sp.values[p * stride..(p + 1) * stride];
                    line.clear();
                    use std::fmt::Write;
                    if fam.kind == MetricType::HISTOGRAM {
                        for (i, b) in le.iter().enumerate() {
                            let _ = writeln!(line, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {} {ts}", fmt_f64(v[i]));
                        }
                        let n = fam.bounds.len();
                        let _ = writeln!(line, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {} {ts}", fmt_f64(v[n + 1]));
                        let _ = writeln!(line, "{name}_sum{open}{labels}{close} {} {ts}", fmt_f64(v[n]));
                        let _ = writeln!(line, "{name}_count{open}{labels}{close} {} {ts}", fmt_f64(v[n + 1]));
                    } else {
                        let _ = writeln!(line, "{name}{open}{labels}{close} {} {ts}", fmt_f64(v[0]));
                    }
                    w.write_all(line.as_bytes())?;
                }
            }
        }
        w.write_all(b"# EOF\n")
    }
}

/// Samples every node of a virtual-time engine into a recorder.
#[derive(Debug)]
pub struct EngineMetrics {
    collectors: Vec<weft_metrics::NodeMetrics>,
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
    pub fn sample(&mut self, fabric: &weft_core::fabric::FabricSpec, engine: &crate::engine::Engine, at: Nanos) {
        let nodes = engine.nodes();
        if self.collectors.len() < nodes.len() {
            self.collectors.resize_with(nodes.len(), weft_metrics::NodeMetrics::new);
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
        // A later state in the same millisecond replaces the last point.
        let mut s = FamilySet::new();
        s.counter("weft_port_tx_bytes_total", &[("switch", "a")], 6);
        s.histogram("weft_host_fct_seconds", &[("host", "h")], &[1.0], &[1, 1], 3.0);
        r.record(100_500, &s);
        let mut s = FamilySet::new();
        s.counter("weft_port_tx_bytes_total", &[("switch", "a")], 7);
        s.histogram("weft_host_fct_seconds", &[("host", "h")], &[1.0], &[2, 1], 4.0);
        r.record(100_900, &s);
        r.record(50_000, &s);
        let mut out = Vec::new();
        r.write(&mut out).unwrap_or_default();
        let text = String::from_utf8(out).unwrap_or_default();
        assert!(text.contains("weft_port_tx_bytes_total{switch=\"a\"} 7 1000.100\n"), "{text}");
        assert!(!text.contains("} 6 1000.100"), "{text}");
        assert_eq!(text.matches("weft_host_fct_seconds_count{host=\"h\"}").count(), 1, "{text}");
        assert!(text.contains("weft_host_fct_seconds_count{host=\"h\"} 3 1000.100"), "{text}");
        assert_eq!(r.samples(), 2);
    }
}
