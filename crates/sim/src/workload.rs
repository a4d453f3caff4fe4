//! Datacenter workloads: flow-size distributions and Poisson flow arrivals
//! (docs/HOSTS.md; ConWeave paper §4.1).
//!
//! [`FlowSizeCdf`] holds a piecewise-linear CDF (`size percent` rows) and
//! samples by inverse transform with linear interpolation, as the ConWeave
//! and HPCC traffic generators do. [`PoissonArrivals`] draws, per host,
//! exponential inter-arrival times with mean
//! `mean_size / (host_link_rate x host_load / 8)` and a destination uniform
//! over the other hosts.
//!
//! Load convention (ConWeave §4.1): `--load` is the average load of the
//! fabric core; with oversubscription `o` each host link carries
//! `load / o` ([`host_link_load`]). Randomness comes from the caller's seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use weft_wire::time::{BitRate, Nanos};

/// The shipped workloads: (name, file text).
pub const SHIPPED: &[(&str, &str)] = &[
    ("alistorage", include_str!("../workloads/AliStorage2019.txt")),
    ("fbhdp", include_str!("../workloads/FbHdp2015.txt")),
    ("solar", include_str!("../workloads/Solar2022.txt")),
    ("websearch", include_str!("../workloads/WebSearch.txt")),
    ("fbhdp-hpcc", include_str!("../workloads/FbHdp-hpcc.txt")),
    ("googlerpc", include_str!("../workloads/GoogleRPC2008.txt")),
    ("int-table1", include_str!("../workloads/INT-TableI.txt")),
];

/// Why a CDF file or a flow list is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}: {message}")]
pub struct WorkloadFileError {
    /// File or workload name.
    pub source_name: String,
    /// 1-based line (0 = the file as a whole).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// A flow-size CDF.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowSizeCdf {
    /// Name (workload or file).
    pub name: String,
    /// (size in bytes, cumulative fraction 0..=1), both non-decreasing,
    /// last fraction exactly 1.
    pub points: Vec<(f64, f64)>,
}

impl FlowSizeCdf {
    /// A shipped workload by name.
    pub fn named(name: &str) -> Option<FlowSizeCdf> {
        let (_, text) = SHIPPED.iter().find(|(n, _)| *n == name.to_ascii_lowercase())?;
        Self::parse(name, text).ok()
    }

    /// Parses `size percent` rows (blank lines and `#` comments ignored).
    pub fn parse(source_name: &str, text: &str) -> Result<FlowSizeCdf, WorkloadFileError> {
        let err = |line, message: String| WorkloadFileError { source_name: source_name.into(), line, message };
        let mut points: Vec<(f64, f64)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let l = raw.split('#').next().unwrap_or("").trim();
            if l.is_empty() {
                continue;
            }
            let mut it = l.split_whitespace();
            let (Some(a), Some(b), None) = (it.next(), it.next(), it.next()) else {
                return Err(err(i + 1, format!("expected `size percent`, got `{l}`")));
            };
            let size: f64 = a.parse().map_err(|_| err(i + 1, format!("size `{a}` is not a number")))?;
            let pct: f64 = b.parse().map_err(|_| err(i + 1, format!("percent `{b}` is not a number")))?;
            if !size.is_finite() || size < 0.0 || !(0.0..=100.0).contains(&pct) {
                return Err(err(i + 1, format!("size must be >= 0 and percent in 0..=100 (got {size} {pct})")));
            }
            if let Some(&(ps, pp)) = points.last() {
                if size < ps || pct / 100.0 < pp {
                    return Err(err(i + 1, format!("the CDF is not monotone: {size} {pct} after {ps} {}", pp * 100.0)));
                }
            }
            points.push((size, pct / 100.0));
        }
        match points.last() {
            None => Err(err(0, "no `size percent` rows".into())),
            Some(&(_, p)) if (p - 1.0).abs() > 1e-9 => Err(err(0, format!("the CDF ends at {}%, not 100%", p * 100.0))),
            Some(_) if points.iter().all(|&(s, _)| s == 0.0) => Err(err(0, "every size is 0".into())),
            Some(_) => Ok(FlowSizeCdf { name: source_name.into(), points }),
        }
    }

    /// Inverse CDF at `u` in [0, 1]: linear interpolation between rows.
    pub fn quantile(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        let i = self.points.partition_point(|&(_, p)| p < u);
        if i == 0 {
            return self.points[0].0;
        }
        let Some(&(s1, p1)) = self.points.get(i) else {
            return self.points[self.points.len() - 1].0;
        };
        let (s0, p0) = self.points[i - 1];
        if p1 <= p0 {
            s1
        } else {
            s0 + (s1 - s0) * (u - p0) / (p1 - p0)
        }
    }

    /// CDF at `size` (linear between rows).
    pub fn cdf(&self, size: f64) -> f64 {
        let i = self.points.partition_point(|&(s, _)| s < size);
        if i == 0 {
            return if size >= self.points[0].0 { self.points[0].1 } else { 0.0 };
        }
        let Some(&(s1, p1)) = self.points.get(i) else { return 1.0 };
        let (s0, p0) = self.points[i - 1];
        if s1 <= s0 {
            p1
        } else {
            p0 + (p1 - p0) * (size - s0) / (s1 - s0)
        }
    }

    /// Draws a flow size in bytes (at least 1).
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        (self.quantile(rng.random::<f64>()).round() as u64).max(1)
    }

    /// Mean flow size in bytes (exact for the piecewise-linear CDF).
    pub fn mean(&self) -> f64 {
        self.points.windows(2).map(|w| (w[1].1 - w[0].1) * (w[0].0 + w[1].0) / 2.0).sum::<f64>() + self.points[0].0 * self.points[0].1
    }
}

/// Host-link load for a fabric-core `load` with `oversubscription` (ConWeave
/// convention: 50 % network load at 2:1 = 25 % on each host link).
pub fn host_link_load(load: f64, oversubscription: f64) -> f64 {
    load / oversubscription.max(1.0)
}

/// A generated flow: source/destination host indices, size, start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlowArrival {
    /// Source host index.
    pub src: usize,
    /// Destination host index (≠ src).
    pub dst: usize,
    /// Size in bytes.
    pub size: u64,
    /// Start time.
    pub start: Nanos,
}

/// A flow of an explicit flow list (`--flows-file`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ListedFlow {
    /// The flow.
    pub flow: FlowArrival,
    /// Priority class (the ns-3 generator's `pg`).
    pub priority: u8,
    /// weft's optional sixth column: the mean gap between the flow's
    /// packet departures (UDP flows paced as a Poisson process, as D-ITG's
    /// `-E`); `None`: as fast as the transport sends.
    pub mean_gap: Option<Nanos>,
    /// weft's optional seventh column: the flow's L4 source port (default:
    /// 49152 + its position in the list), to replay a trace's 5-tuples or
    /// to place a flow on a path of a hash-routed fabric.
    pub src_port: Option<u16>,
    /// Optional `dscp=N` field: the DSCP of the flow's packets (0..=63),
    /// overriding `priority << 3` (P4TE's classes are TOS 0x10 and 0x08,
    /// DSCP 4 and 2, which no priority gives).
    pub dscp: Option<u8>,
    /// Optional `rate_bps=N` field: TCP flows' application rate in bit/s
    /// (iperf3's `-b`).
    pub app_rate: Option<BitRate>,
    /// Optional `window_bytes=N` field: TCP flows' socket window in bytes
    /// (iperf3's `-w`).
    pub socket_window: Option<u64>,
}

impl ListedFlow {
    /// The DSCP of the flow's packets.
    pub fn dscp(&self) -> u8 {
        self.dscp.unwrap_or(self.priority << 3)
    }
}

/// Parses a flow list in the format of the ConWeave authors' ns-3 traffic
/// generator: the first line is the flow count, then one flow per line:
/// `src dst priority size_bytes start_seconds` (host indices from 0), and
/// in weft optional columns `mean_gap_seconds` (`-` for none, see
/// [`ListedFlow::mean_gap`]) and `src_port` ([`ListedFlow::src_port`]),
/// then optional `key=value` fields in any order: `dscp=N`,
/// `rate_bps=N`, `window_bytes=N` (see [`ListedFlow`]); `-` in a column means its default. `hosts` is the
/// number of hosts of the topology the list is replayed on.
pub fn parse_flow_list(source_name: &str, text: &str, hosts: usize) -> Result<Vec<ListedFlow>, WorkloadFileError> {
    let err = |line, message: String| WorkloadFileError { source_name: source_name.into(), line, message };
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some((n0, first)) = lines.next() else { return Err(err(0, "empty flow list".into())) };
    let count: usize =
        first.trim().parse().map_err(|_| err(n0 + 1, format!("first line must be the flow count, got `{}`", first.trim())))?;
    let mut flows = Vec::with_capacity(count.min(1 << 20));
    for (i, l) in lines {
        let (f, fields): (Vec<&str>, Vec<&str>) = l.split_whitespace().partition(|t| !t.contains('='));
        let (mut dscp, mut app_rate, mut socket_window) = (None, None, None);
        for kv in fields {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let n = v.parse::<u64>().ok().filter(|&n| n > 0 || k == "dscp");
            match (k, n) {
                ("dscp", Some(n)) if n < 64 => dscp = Some(n as u8),
                ("rate_bps", Some(n)) => app_rate = Some(BitRate(n)),
                ("window_bytes", Some(n)) => socket_window = Some(n),
                ("dscp" | "rate_bps" | "window_bytes", _) => {
                    return Err(err(i + 1, format!("`{kv}`: dscp is 0..=63, rate_bps and window_bytes positive whole numbers")))
                }
                _ => return Err(err(i + 1, format!("unknown field `{kv}` (known: dscp=, rate_bps=, window_bytes=)"))),
            }
        }
        let (src, dst, pg, size, start, gap, sport) = match f[..] {
            [src, dst, pg, size, start] => (src, dst, pg, size, start, None, None),
            [src, dst, pg, size, start, gap] => (src, dst, pg, size, start, Some(gap), None),
            [src, dst, pg, size, start, gap, sport] => (src, dst, pg, size, start, Some(gap), Some(sport)),
            _ => {
                return Err(err(
                    i + 1,
                    format!("expected `src dst priority size start_seconds [mean_gap_seconds|- [src_port]]`, got `{}`", l.trim()),
                ))
            }
        };
        let src_port = match sport.filter(|&p| p != "-").map(|p| p.parse::<u16>()) {
            None => None,
            Some(Ok(p)) if p > 0 => Some(p),
            Some(_) => return Err(err(i + 1, format!("source port `{}` is not a port number (1..=65535)", sport.unwrap_or("")))),
        };
        let mean_gap = match gap {
            None | Some("-") => None,
            Some(g) => match g.parse::<f64>() {
                Ok(s) if s > 0.0 && s < 1e3 => Some((s * 1e9).round().max(1.0) as Nanos),
                _ => return Err(err(i + 1, format!("mean gap `{g}` is not a positive number of seconds (below 1000)"))),
            },
        };
        let num = |v: &str, what: &str| v.parse::<u64>().map_err(|_| err(i + 1, format!("{what} `{v}` is not a whole number")));
        let (src, dst, pg, size) =
            (num(src, "source")? as usize, num(dst, "destination")? as usize, num(pg, "priority")?, num(size, "size")?);
        let start_s: f64 = start.parse().map_err(|_| err(i + 1, format!("start `{start}` is not a number of seconds")))?;
        if src >= hosts || dst >= hosts {
            return Err(err(i + 1, format!("host index {} is out of range: the topology has {hosts} hosts", src.max(dst))));
        }
        if src == dst {
            return Err(err(i + 1, format!("flow from host {src} to itself")));
        }
        if pg > 7 || size == 0 || !(0.0..1e6).contains(&start_s) {
            return Err(err(i + 1, "priority must be 0..=7, size > 0 and start >= 0".into()));
        }
        let start = (start_s * 1e9).round() as Nanos;
        flows.push(ListedFlow {
            flow: FlowArrival { src, dst, size, start },
            priority: pg as u8,
            mean_gap,
            src_port,
            dscp,
            app_rate,
            socket_window,
        });
    }
    if flows.len() != count {
        return Err(err(1, format!("the first line announces {count} flows but the file has {}", flows.len())));
    }
    Ok(flows)
}

/// Poisson flow arrivals at every host (merged in time order).
#[derive(Debug)]
pub struct PoissonArrivals {
    cdf: FlowSizeCdf,
    hosts: usize,
    mean_gap_ns: f64,
    /// Each host's next arrival, ns.
    next: Vec<f64>,
    /// The hosts by next arrival, earliest first, the lower host first
    /// among equal times: (the time's [`f64::total_cmp`] key, host).
    order: std::collections::BinaryHeap<std::cmp::Reverse<(i64, usize)>>,
    rng: ChaCha8Rng,
}

/// A key whose integer order is [`f64::total_cmp`]'s order of `x`.
fn total_order_key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

impl PoissonArrivals {
    /// Arrivals for `hosts` hosts whose links run at `rate` and carry
    /// `host_load` (0..=1) on average, starting at `start`.
    pub fn new(cdf: FlowSizeCdf, hosts: usize, rate: BitRate, host_load: f64, start: Nanos, seed: u64) -> Self {
        let mean_gap_ns = cdf.mean() * 8.0 * 1e9 / (rate.bps() as f64 * host_load.max(1e-9));
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0070_6f69_7373_6f6e);
        let next: Vec<f64> = (0..hosts).map(|_| start as f64 + exp(&mut rng, mean_gap_ns)).collect();
        let order = next.iter().enumerate().map(|(h, &t)| std::cmp::Reverse((total_order_key(t), h))).collect();
        PoissonArrivals { cdf, hosts, mean_gap_ns, next, order, rng }
    }

    /// Mean gap between two flows of one host, ns.
    pub fn mean_gap_ns(&self) -> f64 {
        self.mean_gap_ns
    }
}

fn exp(rng: &mut ChaCha8Rng, mean: f64) -> f64 {
    let u: f64 = rng.random::<f64>();
    -mean * (1.0 - u).ln()
}

impl Iterator for PoissonArrivals {
    type Item = FlowArrival;
    fn next(&mut self) -> Option<FlowArrival> {
        if self.hosts < 2 {
            return None;
        }
        let std::cmp::Reverse((_, src)) = self.order.pop()?;
        let t = self.next[src];
        let mut dst = self.rng.random_range(0..self.hosts - 1);
        if dst >= src {
            dst += 1;
        }
        let size = self.cdf.sample(&mut self.rng);
        self.next[src] = t + exp(&mut self.rng, self.mean_gap_ns);
        self.order.push(std::cmp::Reverse((total_order_key(self.next[src]), src)));
        Some(FlowArrival { src, dst, size, start: t.round() as Nanos })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_workload_parses() {
        for (name, _) in SHIPPED {
            let c = FlowSizeCdf::named(name).unwrap();
            assert!(c.mean() > 0.0, "{name}");
        }
        // AliStorage: mean of the piecewise-linear CDF, computed by hand from the file.
        let ali = FlowSizeCdf::named("alistorage").unwrap();
        assert_eq!(ali.quantile(1.0), 2_000_000.0);
        assert!((ali.cdf(8000.0) - 0.6921).abs() < 1e-12);
    }

    #[test]
    fn arrivals_come_in_time_order_lower_host_first() {
        let xs = [-1.5, -0.0, 0.0, 1e-300, 1.0, 1.0 + f64::EPSILON, 3e9, f64::INFINITY];
        for a in xs {
            for b in xs {
                assert_eq!(total_order_key(a).cmp(&total_order_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
        // Against a scan of every host for the earliest (the first host among equals).
        let cdf = FlowSizeCdf::named("alistorage").unwrap();
        let mut a = PoissonArrivals::new(cdf.clone(), 37, BitRate::gbps(100), 0.5, 1000, 3);
        let mut b = PoissonArrivals::new(cdf, 37, BitRate::gbps(100), 0.5, 1000, 3);
        b.next[5] = b.next[9]; // a tie, as the scan breaks it
        a.next[5] = a.next[9];
        a.order = a.next.iter().enumerate().map(|(h, &t)| std::cmp::Reverse((total_order_key(t), h))).collect();
        for _ in 0..5000 {
            let (src, &t) = b.next.iter().enumerate().min_by(|x, y| x.1.total_cmp(y.1)).unwrap();
            let mut dst = b.rng.random_range(0..b.hosts - 1);
            if dst >= src {
                dst += 1;
            }
            let size = b.cdf.sample(&mut b.rng);
            b.next[src] = t + exp(&mut b.rng, b.mean_gap_ns);
            assert_eq!(a.next(), Some(FlowArrival { src, dst, size, start: t.round() as Nanos }));
        }
    }

    #[test]
    fn sampling_matches_the_file_ks_test() {
        for name in ["alistorage", "websearch", "int-table1"] {
            let c = FlowSizeCdf::named(name).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(11);
            let n = 200_000;
            let mut xs: Vec<f64> = (0..n).map(|_| c.quantile(rng.random::<f64>())).collect();
            xs.sort_by(|a, b| a.total_cmp(b));
            // Kolmogorov–Smirnov statistic against the file's CDF.
            let d = xs
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let f = c.cdf(x);
                    (f - i as f64 / n as f64).abs().max(((i + 1) as f64 / n as f64 - f).abs())
                })
                .fold(0.0, f64::max);
            let critical = 1.63 / (n as f64).sqrt(); // alpha = 0.01
            assert!(d < critical, "{name}: KS D = {d:.5} >= {critical:.5}");
            let mean: f64 = xs.iter().sum::<f64>() / n as f64;
            assert!((mean - c.mean()).abs() / c.mean() < 0.02, "{name}: sample mean {mean} vs {}", c.mean());
        }
    }

    #[test]
    fn poisson_arrivals_hit_the_requested_load_within_3_percent() {
        let cdf = FlowSizeCdf::named("alistorage").unwrap();
        let rate = BitRate::gbps(100);
        let hosts = 16;
        let load = host_link_load(0.8, 2.0);
        let horizon: Nanos = 50_000_000;
        let mut bytes = vec![0u64; hosts];
        let mut flows = 0;
        for f in PoissonArrivals::new(cdf, hosts, rate, load, 0, 5).take_while(|f| f.start < horizon) {
            assert_ne!(f.src, f.dst);
            bytes[f.src] += f.size;
            flows += 1;
        }
        let offered = bytes.iter().sum::<u64>() as f64 * 8.0 / (horizon as f64 / 1e9) / (rate.bps() as f64 * hosts as f64);
        assert!((offered - load).abs() / load < 0.03, "offered host-link load {offered:.4}, wanted {load} ({flows} flows)");
    }

    #[test]
    fn ns3_flow_lists_parse_and_bad_ones_name_the_line() {
        let text = "3\n0 5 3 1000 2.0\n5 0 3 64000 2.000001\n7 1 3 2000000 2.5\n";
        let f = parse_flow_list("flows.txt", text, 8).unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(f[1].flow, FlowArrival { src: 5, dst: 0, size: 64_000, start: 2_000_001_000 });
        assert_eq!(f[2].priority, 3);
        let e = parse_flow_list("flows.txt", "2\n0 1 3 100 0.1\n", 8).unwrap_err();
        assert_eq!(e.to_string(), "flows.txt:1: the first line announces 2 flows but the file has 1");
        let e = parse_flow_list("flows.txt", "1\n0 9 3 100 0.1\n", 8).unwrap_err();
        assert_eq!(e.to_string(), "flows.txt:2: host index 9 is out of range: the topology has 8 hosts");
        assert!(parse_flow_list("f", "1\n0 1 3 100\n", 8)
            .unwrap_err()
            .to_string()
            .contains("expected `src dst priority size start_seconds"));
        assert!(parse_flow_list("f", "x\n", 8).is_err());
        // The sixth column: a mean gap for Poisson-paced UDP.
        let f = parse_flow_list("f", "2\n0 1 0 100 0.1 0.0042\n1 0 0 100 0.2\n", 8).unwrap();
        assert_eq!((f[0].mean_gap, f[1].mean_gap), (Some(4_200_000), None));
        let e = parse_flow_list("f", "1\n0 1 0 100 0.1 -3\n", 8).unwrap_err();
        assert!(e.to_string().contains("mean gap `-3` is not a positive number"), "{e}");
        let f = parse_flow_list("f", "1\n0 1 0 100 0.1 - 40000\n", 8).unwrap();
        assert_eq!((f[0].mean_gap, f[0].src_port), (None, Some(40000)));
        assert!(parse_flow_list("f", "1\n0 1 0 100 0.1 - 70000\n", 8).is_err());
    }

    #[test]
    fn bad_cdf_files_are_errors() {
        let e = FlowSizeCdf::parse("x.txt", "0 0\n100 50\n50 60\n200 100\n").unwrap_err();
        assert_eq!(e.to_string(), "x.txt:3: the CDF is not monotone: 50 60 after 100 50");
        let e = FlowSizeCdf::parse("x.txt", "0 0\n100 50\n200 90\n").unwrap_err();
        assert_eq!(e.to_string(), "x.txt:0: the CDF ends at 90%, not 100%");
        assert!(FlowSizeCdf::parse("x.txt", "0 0\n100 fifty\n").unwrap_err().to_string().contains("percent `fifty`"));
        assert!(FlowSizeCdf::parse("x.txt", "0 0\n100 150\n").is_err());
        assert!(FlowSizeCdf::parse("x.txt", "").is_err());
    }
}
