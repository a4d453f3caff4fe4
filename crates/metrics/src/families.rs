//! A set of Prometheus metric families being filled at scrape time, and its
//! encodings: the text exposition format (the `prometheus` crate's
//! `TextEncoder`) and OpenMetrics with timestamps (written here: the crate
//! has no OpenMetrics encoder).
//!
//! Invariants: one family per name, its HELP and TYPE from the
//! [`crate::catalogue`]; within a family, series keep their insertion
//! order; histogram buckets are cumulative with a final `+Inf`.

use crate::catalogue::{self, Kind};
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use std::collections::BTreeMap;

/// Label pairs of one series.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

/// Metric families keyed by name.
#[derive(Debug, Default, Clone)]
pub struct FamilySet {
    families: BTreeMap<String, MetricFamily>,
}

fn label_pairs(labels: Labels) -> Vec<LabelPair> {
    labels
        .iter()
        .map(|(k, v)| {
            let mut p = LabelPair::default();
            p.set_name((*k).to_string());
            p.set_value((*v).to_string());
            p
        })
        .collect()
}

impl FamilySet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    fn family(&mut self, name: &str, kind: Kind) -> &mut MetricFamily {
        self.families.entry(name.to_string()).or_insert_with(|| {
            let mut f = MetricFamily::default();
            f.set_name(name.to_string());
            let help = catalogue::describe(name).map_or_else(|| name.to_string(), |(h, _)| h);
            f.set_help(help);
            f.set_field_type(match kind {
                Kind::Counter => MetricType::COUNTER,
                Kind::Gauge => MetricType::GAUGE,
                Kind::Histogram => MetricType::HISTOGRAM,
            });
            f
        })
    }

    /// Adds a counter sample.
    pub fn counter(&mut self, name: &str, labels: Labels, value: u64) {
        self.counter_f64(name, labels, value as f64);
    }

    /// Adds a counter sample with a fractional value (e.g. seconds).
    pub fn counter_f64(&mut self, name: &str, labels: Labels, value: f64) {
        let mut c = proto::Counter::default();
        c.set_value(value);
        let mut m = proto::Metric::from_label(label_pairs(labels));
        m.set_counter(c);
        self.family(name, Kind::Counter).mut_metric().push(m);
    }

    /// Adds a gauge sample.
    pub fn gauge(&mut self, name: &str, labels: Labels, value: f64) {
        let mut g = proto::Gauge::default();
        g.set_value(value);
        let mut m = proto::Metric::from_label(label_pairs(labels));
        m.set_gauge(g);
        self.family(name, Kind::Gauge).mut_metric().push(m);
    }

    /// Adds a histogram: `counts[i]` observations fell at or below
    /// `bounds[i]` and above the previous bound (non-cumulative); the
    /// last count, if `counts` is longer than `bounds`, is `+Inf`.
    pub fn histogram(&mut self, name: &str, labels: Labels, bounds: &[f64], counts: &[u64], sum: f64) {
        let mut h = proto::Histogram::default();
        let mut cum = 0u64;
        let mut buckets = Vec::with_capacity(bounds.len());
        for (i, b) in bounds.iter().enumerate() {
            cum += counts.get(i).copied().unwrap_or(0);
            let mut k = proto::Bucket::default();
            k.set_upper_bound(*b);
            k.set_cumulative_count(cum);
            buckets.push(k);
        }
        let total = cum + counts.iter().skip(bounds.len()).sum::<u64>();
        h.set_bucket(buckets);
        h.set_sample_count(total);
        h.set_sample_sum(sum);
        let mut m = proto::Metric::from_label(label_pairs(labels));
        m.set_histogram(h);
        self.family(name, Kind::Histogram).mut_metric().push(m);
    }

    /// Number of families.
    pub fn len(&self) -> usize {
        self.families.len()
    }

    /// Whether no family was added.
    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// The families, by name.
    pub fn families(&self) -> impl Iterator<Item = &MetricFamily> {
        self.families.values()
    }

    /// Merges another set into this one (series of equal families are
    /// concatenated).
    pub fn extend(&mut self, other: FamilySet) {
        for (name, f) in other.families {
            match self.families.get_mut(&name) {
                Some(mine) => mine.mut_metric().extend(f.get_metric().iter().cloned()),
                None => {
                    self.families.insert(name, f);
                }
            }
        }
    }

    /// The Prometheus text exposition format (version 0.0.4).
    pub fn to_text(&self) -> String {
        use prometheus::Encoder;
        let fams: Vec<MetricFamily> = self.families.values().cloned().collect();
        let mut buf = Vec::new();
        // The encoder fails only on a family without samples or a write
        // error, neither of which can happen into a Vec from this set.
        let _ = prometheus::TextEncoder::new().encode(&fams, &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Escapes a label value for the text formats.
fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    if v.contains(['\\', '"', '\n']) {
        v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").into()
    } else {
        v.into()
    }
}

/// A sample value as the text formats write it (integers without a
/// fraction, `+Inf`).
pub fn fmt_f64(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The label pairs of series `m` plus `constant`, as `a="x",b="y"` (no
/// braces): its key in OpenMetrics, written once per point.
pub fn series_labels(m: &prometheus::proto::Metric, constant: &[(String, String)]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for p in m.get_label() {
        let _ = write!(s, "{}{}=\"{}\"", if s.is_empty() { "" } else { "," }, p.name(), escape(p.value()));
    }
    for (k, v) in constant {
        let _ = write!(s, "{}{k}=\"{}\"", if s.is_empty() { "" } else { "," }, escape(v));
    }
    s
}

/// The OpenMetrics `# TYPE`/`# HELP` lines of a family. OpenMetrics names a
/// counter family without its `_total` suffix.
pub fn openmetrics_header(f: &MetricFamily) -> String {
    let (family, kind) = match f.get_field_type() {
        MetricType::COUNTER => (f.name().strip_suffix("_total").unwrap_or(f.name()), "counter"),
        MetricType::GAUGE => (f.name(), "gauge"),
        MetricType::HISTOGRAM => (f.name(), "histogram"),
        _ => (f.name(), "unknown"),
    };
    format!("# TYPE {family} {kind}\n# HELP {family} {}\n", f.help().replace('\\', "\\\\").replace('\n', "\\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_exposition_has_help_type_and_cumulative_buckets() {
        let mut s = FamilySet::new();
        s.counter("weft_port_tx_bytes_total", &[("switch", "leaf0"), ("port", "1"), ("link", "leaf0-spine0")], 1500);
        s.histogram("weft_host_fct_seconds", &[("host", "h0")], &[1e-6, 1e-3], &[1, 2, 3], 0.5);
        let t = s.to_text();
        assert!(t.contains("# TYPE weft_port_tx_bytes_total counter"), "{t}");
        assert!(t.contains("weft_port_tx_bytes_total{switch=\"leaf0\",port=\"1\",link=\"leaf0-spine0\"} 1500"), "{t}");
        assert!(t.contains("weft_host_fct_seconds_bucket{host=\"h0\",le=\"0.001\"} 3"), "{t}");
        assert!(t.contains("weft_host_fct_seconds_bucket{host=\"h0\",le=\"+Inf\"} 6"), "{t}");
        assert!(t.contains("weft_host_fct_seconds_count{host=\"h0\"} 6"), "{t}");
    }

    #[test]
    fn openmetrics_counter_family_drops_total_and_labels_are_escaped() {
        let mut s = FamilySet::new();
        s.counter("weft_port_tx_bytes_total", &[("switch", "a\"b")], 7);
        let f = s.families().next().cloned().unwrap_or_default();
        assert!(openmetrics_header(&f).starts_with("# TYPE weft_port_tx_bytes counter\n"));
        let m = &f.get_metric()[0];
        assert_eq!(series_labels(m, &[("fabric".into(), "x".into())]), "switch=\"a\\\"b\",fabric=\"x\"");
    }
}
