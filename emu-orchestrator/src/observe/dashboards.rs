//! Checking Grafana dashboards against a real Prometheus (docs/RESULTS.md:
//! "every panel query must return data against a real Prometheus scraping
//! a live fabric").
//!
//! [`load`] reads every `*.json` dashboard of a directory and collects the
//! PromQL of every panel target and every `label_values(...)` variable
//! query; [`check`] substitutes Grafana's variables (`$__rate_interval`,
//! `$time_scale`, and `.*` for selection variables, which the dashboards
//! only use with `=~`) and evaluates each through Prometheus's HTTP API.
//! An expression passes when no Prometheus answers with an error and at
//! least one returns a series (scheme panels have data where their scheme
//! runs).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Errors of loading or checking dashboards.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// The directory cannot be read.
    #[error("cannot read the dashboards directory {0}: {1}")]
    Dir(String, std::io::Error),
    /// A file cannot be read.
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// A file is not valid JSON.
    #[error("{file} is not valid JSON (line {line}, column {column}): {msg}")]
    Json {
        /// The file.
        file: String,
        /// Line.
        line: usize,
        /// Column.
        column: usize,
        /// What is wrong.
        msg: String,
    },
    /// A file is JSON but not a dashboard.
    #[error("{0} is not a Grafana dashboard (no `panels` array)")]
    NotADashboard(String),
    /// No dashboard found.
    #[error("no *.json dashboard in {0}")]
    Empty(String),
}

/// One query of a dashboard.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Dashboard file.
    pub file: String,
    /// Panel (or variable) title.
    pub panel: String,
    /// The query as written.
    pub expr: String,
    /// A `label_values(selector, label)` variable query: (selector, label).
    pub label_values: Option<(String, String)>,
}

/// Reads every dashboard in `dir` and returns its queries.
pub fn load(dir: &Path) -> Result<Vec<Query>, DashboardError> {
    let rd = std::fs::read_dir(dir).map_err(|e| DashboardError::Dir(dir.display().to_string(), e))?;
    let mut files: Vec<PathBuf> =
        rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    files.sort();
    if files.is_empty() {
        return Err(DashboardError::Empty(dir.display().to_string()));
    }
    let mut out = Vec::new();
    for f in files {
        let name = f.display().to_string();
        let text = std::fs::read_to_string(&f).map_err(|e| DashboardError::Read(name.clone(), e))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| DashboardError::Json {
            file: name.clone(),
            line: e.line(),
            column: e.column(),
            msg: e.to_string(),
        })?;
        let Some(panels) = v.get("panels").and_then(|p| p.as_array()) else { return Err(DashboardError::NotADashboard(name)) };
        let mut stack: Vec<&serde_json::Value> = panels.iter().collect();
        while let Some(p) = stack.pop() {
            if let Some(inner) = p.get("panels").and_then(|x| x.as_array()) {
                stack.extend(inner.iter());
            }
            let title = p.get("title").and_then(|t| t.as_str()).unwrap_or("(untitled)").to_string();
            for t in p.get("targets").and_then(|t| t.as_array()).into_iter().flatten() {
                if let Some(e) = t.get("expr").and_then(|e| e.as_str()) {
                    out.push(Query { file: name.clone(), panel: title.clone(), expr: e.to_string(), label_values: None });
                }
            }
        }
        for var in v.pointer("/templating/list").and_then(|l| l.as_array()).into_iter().flatten() {
            if var.get("type").and_then(|t| t.as_str()) != Some("query") {
                continue;
            }
            let q = var.pointer("/query/query").or_else(|| var.get("query")).and_then(|q| q.as_str()).unwrap_or_default();
            let title = format!("variable ${}", var.get("name").and_then(|n| n.as_str()).unwrap_or("?"));
            out.push(Query { file: name.clone(), panel: title, expr: q.to_string(), label_values: parse_label_values(q) });
        }
    }
    Ok(out)
}

/// `label_values(selector, label)` → (selector, label).
fn parse_label_values(q: &str) -> Option<(String, String)> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (sel, label) = inner.rsplit_once(',')?;
    Some((sel.trim().to_string(), label.trim().to_string()))
}

/// Replaces Grafana variables: `$__rate_interval`/`$__interval` by
/// `rate_interval`, `$time_scale` by 1, any other `$name`/`${name}` by `.*`.
pub fn substitute(expr: &str, rate_interval: &str) -> String {
    let mut s = expr.replace("$__rate_interval", rate_interval).replace("${__rate_interval}", rate_interval);
    s = s.replace("$__interval", rate_interval).replace("$time_scale", "1").replace("${time_scale}", "1");
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'{') {
            for d in chars.by_ref() {
                if d == '}' {
                    break;
                }
            }
        } else {
            while chars.peek().is_some_and(|d| d.is_ascii_alphanumeric() || *d == '_') {
                chars.next();
            }
        }
        out.push_str(".*");
    }
    out
}

/// The outcome of one query.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The query.
    pub query: Query,
    /// What was sent.
    pub promql: String,
    /// Series returned (sum over the servers).
    pub series: usize,
    /// Errors, per server.
    pub errors: Vec<String>,
}

impl Checked {
    /// Passed: no error, at least one series.
    pub fn ok(&self) -> bool {
        self.errors.is_empty() && self.series > 0
    }
}

/// How long a query may take before it counts as failed. Prometheus ends
/// a query itself after its `--query.timeout` (2 min by default); a
/// histogram quantile over every queue of two live fabrics took more than
/// 10 s (the bound before) on a loaded 2-core machine.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Evaluates an instant query; returns the result's series (as JSON).
pub fn instant_query(prometheus: &str, promql: &str) -> Result<Vec<serde_json::Value>, String> {
    let agent = ureq::Agent::config_builder().timeout_global(Some(QUERY_TIMEOUT)).http_status_as_error(false).build().new_agent();
    let url = format!("{}/api/v1/query", prometheus.trim_end_matches('/'));
    let mut resp = agent.get(&url).query("query", promql).call().map_err(|e| format!("{url}: {e}"))?;
    let body = resp.body_mut().read_to_string().map_err(|e| format!("{url}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{url}: not JSON ({e}): {body}"))?;
    if v.get("status").and_then(|s| s.as_str()) != Some("success") {
        return Err(format!(
            "{}: {}",
            v.get("errorType").and_then(|s| s.as_str()).unwrap_or("error"),
            v.get("error").and_then(|s| s.as_str()).unwrap_or(&body)
        ));
    }
    let result = v.pointer("/data/result");
    Ok(match result {
        Some(serde_json::Value::Array(a)) => a.clone(),
        Some(other) if !other.is_null() => vec![other.clone()],
        _ => Vec::new(),
    })
}

/// Evaluates every query on every server.
pub fn check(queries: &[Query], servers: &[String], rate_interval: &str) -> Vec<Checked> {
    queries
        .iter()
        .map(|q| {
            let (promql, label) = match &q.label_values {
                Some((sel, label)) => (substitute(sel, rate_interval), Some(label.clone())),
                None => (substitute(&q.expr, rate_interval), None),
            };
            let mut series = 0;
            let mut errors = Vec::new();
            if q.label_values.is_none() && q.expr.trim_start().starts_with("label_values") {
                errors.push("a label_values() query that cannot be parsed".into());
            }
            for s in servers {
                match instant_query(s, &promql) {
                    Ok(r) => {
                        series += match &label {
                            Some(l) => r.iter().filter(|x| x.pointer(&format!("/metric/{l}")).is_some()).count(),
                            None => r.len(),
                        }
                    }
                    Err(e) => errors.push(format!("{s}: {e}")),
                }
            }
            Checked { query: q.clone(), promql, series, errors }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_become_regexes_and_intervals() {
        assert_eq!(
            substitute(r#"rate(x{switch=~"$switch", host=~"${host}"}[$__rate_interval]) * $time_scale"#, "15s"),
            r#"rate(x{switch=~".*", host=~".*"}[15s]) * 1"#
        );
        assert_eq!(parse_label_values("label_values(weft_x{a=~\"$f\"}, switch)"), Some(("weft_x{a=~\"$f\"}".into(), "switch".into())));
    }

    #[test]
    fn the_shipped_dashboards_load_and_every_panel_has_a_query() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards");
        let q = load(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(q.len() > 40, "{} queries", q.len());
        for x in &q {
            let s = substitute(&x.expr, "15s");
            assert!(!s.contains('$'), "{}: {}", x.panel, s);
        }
    }

    #[test]
    fn invalid_json_is_named_with_its_position() {
        let dir = std::env::temp_dir().join(format!("weft-dash-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join("bad.json"), "{\n  \"panels\": [\n    {\"title\": \"x\",}\n  ]\n}\n");
        let e = load(&dir).err().map(|e| e.to_string()).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.contains("bad.json is not valid JSON (line 3, column"), "{e}");
    }
}
