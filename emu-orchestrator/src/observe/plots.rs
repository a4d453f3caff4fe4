//! SVG plots of experiment results (docs/RESULTS.md), drawn with plotters:
//!
//! - `slowdown-cdf.svg`: CDF of FCT slowdown (log x), one line per scheme;
//! - `slowdown-by-size.svg`: average and p99 slowdown per flow-size bin
//!   (half-decade bins, log-log), the ConWeave paper's Fig. 12 layout;
//! - `imbalance-cdf.svg`: CDF of the per-leaf uplink throughput imbalance
//!   (max − min) / mean per 100 µs (ConWeave Fig. 14);
//! - `queue-depth.svg`: bytes queued over time at the most loaded switch
//!   port of each run.
//!
//! `weft run` writes one set for its scheme, `weft compare` one set per
//! transport × load with a line per scheme. Series are data prepared from
//! `summary.json` only, so a plot can be redrawn from saved results.

use emu_node::results::Summary;
use plotters::coord::combinators::BindKeyPoints;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Errors of drawing.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// plotters failed.
    #[error("cannot draw {0}: {1}")]
    Draw(String, #[source] DrawError),
    /// The output directory.
    #[error("cannot create {0}: {1}")]
    Dir(String, std::io::Error),
}

/// What drawing an SVG fails with (the SVG backend's errors are I/O).
pub type DrawError = DrawingAreaErrorKind<std::io::Error>;

/// Points (x, y) of a line.
pub type Points = Vec<(f64, f64)>;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points (x, y), in x order.
    pub points: Vec<(f64, f64)>,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Axis settings of one panel.
#[derive(Debug, Clone, Copy)]
struct Axes<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    x_log: bool,
    y_log: bool,
}

fn range(series: &[Series], pick: fn(&(f64, f64)) -> f64, log: bool) -> (f64, f64) {
    let vals = series.iter().flat_map(|s| s.points.iter().map(pick)).filter(|v| v.is_finite() && (!log || *v > 0.0));
    let (mut lo, mut hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    if !lo.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        // 30 % of margin, and at least one decade around the data.
        lo /= 1.3;
        hi *= 1.3;
        if hi / lo < 10.0 {
            let c = (lo * hi).sqrt();
            lo = c / 10f64.sqrt();
            hi = c * 10f64.sqrt();
        }
    } else {
        let pad = ((hi - lo) * 0.05).max(1e-9);
        lo = if lo >= 0.0 { 0.0 } else { lo - pad };
        hi += pad;
    }
    (lo, hi)
}

/// Tick values of a log axis from `lo` to `hi`: 1, 2 and 5 times each
/// power of ten inside, or only the powers of ten when that would be more
/// than 10 ticks.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && lo.is_finite() && hi.is_finite()) {
        return vec![1.0, 10.0];
    }
    let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let inside = |ms: &[f64]| -> Vec<f64> {
        (k0..=k1)
            .flat_map(|k| ms.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|v| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9))
            .collect()
    };
    let all = inside(&[1.0, 2.0, 5.0]);
    if all.len() > 10 {
        inside(&[1.0])
    } else {
        all
    }
}

fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e9 {
        format!("{}G", trim(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}K", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Draws one panel of lines on `area`.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    ax: Axes,
    series: &[Series],
    legend: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (x0, x1) = range(series, |p| p.0, ax.x_log);
    let (y0, y1) = range(series, |p| p.1, ax.y_log);
    let mut b = ChartBuilder::on(area);
    b.caption(ax.title, ("sans-serif", 20)).margin(12).x_label_area_size(48).y_label_area_size(64);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart?;
            chart
                .configure_mesh()
                .x_desc(ax.x_desc)
                .y_desc(ax.y_desc)
                .x_label_formatter(&|v| fmt_tick(*v))
                .y_label_formatter(&|v| fmt_tick(*v))
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 15))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()?;
            for (i, s) in series.iter().enumerate() {
                let c = PALETTE[i % PALETTE.len()];
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite() && (!ax.x_log || *x > 0.0) && (!ax.y_log || *y > 0.0))
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
                if pts.len() <= 30 {
                    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))?;
                }
            }
            if series.len() > 0 {
                chart
                    .configure_series_labels()
                    .position(legend)
                    .background_style(WHITE.mix(0.85))
                    .border_style(RGBColor(180, 180, 180))
                    .label_font(("sans-serif", 14))
                    .draw()?;
            }
        }};
    }
    // Log axes get their ticks from `log_ticks` (1, 2, 5 x 10^k): plotters'
    // own pick labels a 9 next to a 10, or a single tick on a short range.
    let (xl, xk) = (x0..x1, log_ticks(x0, x1));
    let (yl, yk) = (y0..y1, log_ticks(y0, y1));
    match (ax.x_log, ax.y_log) {
        (true, true) => draw!(b.build_cartesian_2d(xl.log_scale().with_key_points(xk), yl.log_scale().with_key_points(yk))),
        (true, false) => draw!(b.build_cartesian_2d(xl.log_scale().with_key_points(xk), y0..y1)),
        (false, true) => draw!(b.build_cartesian_2d(x0..x1, yl.log_scale().with_key_points(yk))),
        (false, false) => draw!(b.build_cartesian_2d(x0..x1, y0..y1)),
    }
    Ok(())
}

fn draw_one(path: &Path, ax: Axes, series: &[Series], legend: SeriesLabelPosition) -> Result<(), PlotError> {
    let err = |e: DrawError| PlotError::Draw(path.display().to_string(), e);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    panel(&root, ax, series, legend).map_err(err)?;
    root.present().map_err(err)
}

/// CDF of the FCT slowdown of the counted flows (complete, started after
/// the warm-up), at most 400 points.
pub fn slowdown_cdf(s: &Summary) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> =
        s.flows.iter().filter(|f| f.start >= s.slowdown.warmup_ns).filter_map(|f| f.slowdown_by(s.slowdown.definition)).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(400).max(1);
    let mut pts: Vec<(f64, f64)> = (0..n).step_by(step).map(|i| (v[i], (i + 1) as f64 / n as f64)).collect();
    pts.push((v[n - 1], 1.0));
    pts
}

/// Average and p99 slowdown per flow-size bin: half-decade bins (…1 KB,
/// 1–3.16 KB, 3.16–10 KB, …), x = the median flow size in the bin; bins
/// with fewer than `min_flows` flows are left out.
pub fn slowdown_by_size(s: &Summary, min_flows: usize) -> (Points, Points) {
    let mut bins: std::collections::BTreeMap<i64, Vec<(u64, f64)>> = std::collections::BTreeMap::new();
    for (size, sd) in
        s.flows.iter().filter(|f| f.start >= s.slowdown.warmup_ns).filter_map(|f| f.size.zip(f.slowdown_by(s.slowdown.definition)))
    {
        // Bin k holds sizes in (10^(k/2), 10^((k+1)/2)].
        let k = ((size.max(1) as f64).log10() * 2.0 - 1e-9).floor() as i64;
        bins.entry(k).or_default().push((size, sd));
    }
    let (mut avg, mut p99) = (Vec::new(), Vec::new());
    for (_, mut d) in bins {
        if d.len() < min_flows.max(1) {
            continue;
        }
        d.sort_by_key(|x| x.0);
        let x = d[d.len() / 2].0 as f64;
        let mut v: Vec<f64> = d.iter().map(|x| x.1).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        avg.push((x, v.iter().sum::<f64>() / v.len() as f64));
        p99.push((x, v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1]));
    }
    (avg, p99)
}

/// One run (or one scheme of a comparison) to plot.
pub struct Labelled<'a> {
    /// Legend name.
    pub name: String,
    /// Its results.
    pub summary: &'a Summary,
}

/// Writes the four plots for `runs` into `dir` with file names prefixed by
/// `prefix` (e.g. "" or "roce-irn-load0.5-"); returns the files written.
pub fn write_plots(dir: &Path, prefix: &str, title: &str, runs: &[Labelled]) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(dir).map_err(|e| PlotError::Dir(dir.display().to_string(), e))?;
    let mut written = Vec::new();
    let file = |n: &str| dir.join(format!("{prefix}{n}"));
    let cdf: Vec<Series> = runs.iter().map(|r| Series { name: r.name.clone(), points: slowdown_cdf(r.summary) }).collect();
    let p = file("slowdown-cdf.svg");
    let definition = runs.first().map_or(emu_node::fct::SlowdownDefinition::default(), |r| r.summary.slowdown.definition);
    let x_desc = format!("FCT slowdown ({}, log)", definition.describe());
    draw_one(
        &p,
        Axes { title: &format!("FCT slowdown CDF — {title}"), x_desc: &x_desc, y_desc: "fraction of flows", x_log: true, y_log: false },
        &cdf,
        SeriesLabelPosition::LowerRight,
    )?;
    written.push(p);

    let by: Vec<(String, (Points, Points))> = runs.iter().map(|r| (r.name.clone(), slowdown_by_size(r.summary, 10))).collect();
    let p = file("slowdown-by-size.svg");
    {
        let err = |e: DrawError| PlotError::Draw(p.display().to_string(), e);
        let root = SVGBackend::new(&p, (1400, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let body = root.titled(&format!("FCT slowdown by flow size — {title}"), ("sans-serif", 22)).map_err(err)?;
        let (l, r) = body.split_horizontally(700);
        let avg: Vec<Series> = by.iter().map(|(n, (a, _))| Series { name: n.clone(), points: a.clone() }).collect();
        let p99: Vec<Series> = by.iter().map(|(n, (_, q))| Series { name: n.clone(), points: q.clone() }).collect();
        let (t1, t2) = ("average", "99th percentile");
        panel(
            &l,
            Axes {
                title: t1,
                x_desc: "flow size (bytes, log; median of each half-decade bin of ≥ 10 flows)",
                y_desc: "average slowdown (log)",
                x_log: true,
                y_log: true,
            },
            &avg,
            SeriesLabelPosition::UpperLeft,
        )
        .map_err(err)?;
        panel(
            &r,
            Axes {
                title: t2,
                x_desc: "flow size (bytes, log; median of each half-decade bin of ≥ 10 flows)",
                y_desc: "p99 slowdown (log)",
                x_log: true,
                y_log: true,
            },
            &p99,
            SeriesLabelPosition::UpperLeft,
        )
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    written.push(p);

    let imb: Vec<Series> = runs
        .iter()
        .filter_map(|r| r.summary.uplink_imbalance.as_ref().map(|i| Series { name: r.name.clone(), points: i.cdf.clone() }))
        .filter(|s| !s.points.is_empty())
        .collect();
    if !imb.is_empty() {
        let p = file("imbalance-cdf.svg");
        draw_one(
            &p,
            Axes {
                title: &format!("Uplink throughput imbalance CDF — {title}"),
                x_desc: "(max − min) / mean of a leaf's uplink bytes per 100 µs",
                y_desc: "fraction of samples",
                x_log: false,
                y_log: false,
            },
            &imb,
            SeriesLabelPosition::LowerRight,
        )?;
        written.push(p);
    }

    let q: Vec<Series> = runs
        .iter()
        .filter_map(|r| {
            r.summary.queue_trace.as_ref().map(|t| Series {
                name: format!("{} ({}:{} {})", r.name, t.switch, t.port, t.link),
                points: t
                    .bytes
                    .iter()
                    .enumerate()
                    .map(|(i, b)| ((i as u64 + 1) as f64 * t.interval_ns as f64 / 1e6, *b as f64 / 1e3))
                    .collect(),
            })
        })
        .collect();
    if !q.is_empty() {
        let p = file("queue-depth.svg");
        draw_one(
            &p,
            Axes {
                title: &format!("Queue depth of the most loaded port — {title}"),
                x_desc: "simulated time (ms)",
                y_desc: "bytes queued at the port (KB)",
                x_log: false,
                y_log: false,
            },
            &q,
            SeriesLabelPosition::UpperRight,
        )?;
        written.push(p);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use emu_node::results::FlowResult;

    fn summary() -> Summary {
        let mut s = Summary::default();
        for i in 0..1000u64 {
            s.flows.push(FlowResult {
                size: Some(1000 + i * 997 % 100_000),
                slowdown_ns3: Some(1.0 + (i % 50) as f64),
                ..FlowResult::default()
            });
        }
        s
    }

    #[test]
    fn cdf_ends_at_one_and_groups_cover_every_flow() {
        let s = summary();
        let c = slowdown_cdf(&s);
        assert_eq!(c.last().map(|p| p.1), Some(1.0));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let (avg, p99) = slowdown_by_size(&s, 1);
        // Sizes 1 000 … 100 999: 1 000 in (10^2.5, 10^3], then half decades up to (10^5, 10^5.5].
        assert_eq!(avg.len(), 6, "{avg:?}");
        assert!(avg.iter().zip(&p99).all(|(a, q)| a.0 == q.0 && q.1 >= a.1));
    }

    #[test]
    fn plots_are_svg_files_with_axes_and_legend() {
        let s = summary();
        let dir = std::env::temp_dir().join(format!("weft-plots-{}", std::process::id()));
        let files = write_plots(&dir, "t-", "test", &[Labelled { name: "ecmp".into(), summary: &s }]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(files.len(), 2, "no imbalance or queue trace in this summary");
        for f in &files {
            let svg = std::fs::read_to_string(f).unwrap_or_default();
            assert!(
                svg.starts_with("<svg") && svg.contains("FCT slowdown") && svg.contains("ecmp"),
                "{}:\n{}",
                f.display(),
                &svg[..svg.len().min(3000)]
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn log_axes_tick_at_one_two_five_and_never_crowd() {
        assert_eq!(log_ticks(0.8, 21.0), [1.0, 2.0, 5.0, 10.0, 20.0]);
        assert_eq!(log_ticks(1.8, 18.0), [2.0, 5.0, 10.0]);
        assert_eq!(log_ticks(10.0, 1e7), [10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7]);
        assert_eq!(log_ticks(0.0, 1.0), [1.0, 10.0]);
        assert_eq!(fmt_tick(20_000.0), "20K");
    }
}
