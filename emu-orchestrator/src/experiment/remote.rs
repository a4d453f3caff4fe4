//! Cells of a comparison matrix run on other machines (`weft compare
//! --machines`): each cell is `weft compare` there, over ssh, with the
//! input files sent along; its summary.json and compare.json come back on
//! the session's standard output and are read typed.
//!
//! Invariants: a machine runs one cell at a time per capacity slot; a cell
//! that failed there is an error of that cell, never of the matrix; no
//! answer from a machine, however malformed, panics.

use crate::config::machines::{process_slots, Machine};
use emu_node::results::Summary;
use std::path::{Path, PathBuf};

/// One cell of a comparison matrix to run on a machine: `weft compare`
/// with one scheme, load and transport, the rest of the arguments as given.
#[derive(Debug, Clone)]
pub struct RemoteCell {
    /// Scheme.
    pub scheme: String,
    /// Load.
    pub load: f64,
    /// Transport name.
    pub transport: String,
}

/// An argument of a remote `weft compare`: literal, or a file weft sends
/// along (its text) and names by its path in the run's directory there.
#[derive(Debug, Clone)]
pub enum RemoteArg {
    /// Passed as is.
    Lit(String),
    /// A local file: sent, and replaced by its path there.
    File(PathBuf),
}

/// Marks the start of each file in a remote run's output.
const FILE_MARK: &str = "@@weft-compare-file@@";

/// Quotes `s` for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Machine {
    /// Runs `weft compare <args> --schemes S --loads L --transport T --jobs 1
    /// --out DIR` on this machine (one process there, in a directory of its
    /// own that is removed afterwards) and returns the run's summary and its
    /// wall time in seconds. The script goes to `sh -s` on ssh's stdin, with
    /// the files of `args` in it as here-documents.
    ///
    /// When `interrupt` is set meanwhile (Ctrl-C here), the remote `weft
    /// compare` gets SIGINT too and returns what it has, marked incomplete,
    /// so nothing keeps running there. ssh runs in a process group of its
    /// own: a terminal's Ctrl-C reaches this process, not the session.
    pub fn run_compare_cell(
        &self,
        local_weft: &Path,
        args: &[RemoteArg],
        cell: &RemoteCell,
        interrupt: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<(Summary, std::time::Duration), String> {
        use std::os::unix::process::CommandExt;
        let weft = self.weft.clone().unwrap_or_else(|| local_weft.display().to_string());
        // The cell's directory there, named so that its processes can be found.
        let tag: String = {
            use rand::Rng;
            let mut r = rand::rng();
            (0..8).map(|_| format!("{:02x}", r.random::<u8>())).collect()
        };
        let mut script = format!("set -e\nD=/tmp/weft-compare.{tag}\nmkdir -m 700 \"$D\"\ntrap 'rm -rf \"$D\"' EXIT\n");
        let mut line = vec![sh_quote(&weft), "compare".to_string()];
        for (i, a) in args.iter().enumerate() {
            match a {
                RemoteArg::Lit(s) => line.push(sh_quote(s)),
                RemoteArg::File(p) => {
                    let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                    let name = format!("input{i}.{}", p.extension().and_then(|e| e.to_str()).unwrap_or("txt"));
                    script.push_str(&format!("cat > \"$D/{name}\" <<'WEFT_INPUT_EOF'\n{text}\nWEFT_INPUT_EOF\n"));
                    line.push(format!("\"$D/{name}\""));
                }
            }
        }
        for (k, v) in [("--schemes", cell.scheme.clone()), ("--loads", cell.load.to_string()), ("--transport", cell.transport.clone())] {
            line.push(k.to_string());
            line.push(sh_quote(&v));
        }
        line.extend(["--jobs".into(), "1".into(), "--out".into(), "\"$D/out\"".into()]);
        script.push_str(&format!(
            // Status 3: a cell the progress watchdog stopped; its
            // summary.json says so ("incomplete": "stalled: ..."). 130: a
            // cell interrupted from here, with what it had.
            "rc=0; {} >\"$D/log\" 2>&1 || rc=$?\n\
             [ $rc = 0 ] || [ $rc = 3 ] || [ $rc = 130 ] || {{ tail -n 3 \"$D/log\" >&2; exit 1; }}\n\
             for f in \"$D\"/out/*/*/summary.json; do echo '{FILE_MARK} summary.json'; cat \"$f\"; done\n\
             echo '{FILE_MARK} compare.json'; cat \"$D/out/compare.json\"\n",
            line.join(" ")
        ));
        let mut child = self
            .ssh_command()
            .args(["sh", "-s"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("machine {}: cannot run ssh ({e})", self.name))?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            stdin.write_all(script.as_bytes()).map_err(|e| format!("machine {}: {e}", self.name))?;
        }
        // Read both pipes while waiting (a summary is larger than a pipe).
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut buf);
                }
                buf
            })
        };
        let out_reader = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let err_reader = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let mut signalled = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {}
                Err(e) => return Err(format!("machine {}: {e}", self.name)),
            }
            if !signalled && interrupt.is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed)) {
                signalled = true;
                // `[.]`: the pattern does not match the shell that runs pkill.
                let _ = self
                    .ssh_command()
                    .arg(format!("pkill -INT -f 'weft-compare[.]{tag}'"))
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .process_group(0)
                    .status();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let (stdout, stderr) = (out_reader.join().unwrap_or_default(), err_reader.join().unwrap_or_default());
        if !status.success() {
            let err = String::from_utf8_lossy(&stderr);
            return Err(format!("machine {}: {}", self.name, err.trim().lines().collect::<Vec<_>>().join(" | ")));
        }
        let text = String::from_utf8_lossy(&stdout);
        let mut files = std::collections::BTreeMap::new();
        for part in text.split(FILE_MARK).skip(1) {
            let (name, body) = part.split_once('\n').unwrap_or((part, ""));
            files.insert(name.trim().to_string(), body.to_string());
        }
        let bad = |what: &str| format!("machine {}: its weft compare wrote no readable {what}", self.name);
        let summary = Summary::from_json(files.get("summary.json").ok_or_else(|| bad("summary.json"))?)
            .map_err(|e| format!("{}: {e}", bad("summary.json")))?;
        let compare = crate::experiment::report::CompareReport::from_json(files.get("compare.json").ok_or_else(|| bad("compare.json"))?)
            .map_err(|e| format!("machine {}: {e}", self.name))?;
        let wall = compare.runs.first().map(|r| r.wall()).unwrap_or_default();
        Ok((summary, wall))
    }
}

/// Runs the cells of a comparison matrix on `machines`, each machine one
/// cell at a time, and returns the cells in the order of `cells`.
/// Once `interrupt` is set no cell starts, and the running ones return
/// what they have.
pub fn compare_on(
    machines: &[Machine],
    local_weft: &Path,
    args: &[RemoteArg],
    cells: &[RemoteCell],
    interrupt: Option<&std::sync::atomic::AtomicBool>,
) -> Vec<crate::experiment::report::CompareCell> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<crate::experiment::report::CompareCell>>> =
        std::sync::Mutex::new((0..cells.len()).map(|_| None).collect());
    let slots = process_slots(machines);
    std::thread::scope(|scope| {
        for m in &slots {
            let (next, results) = (&next, &results);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(c) = cells.get(i) else { break };
                if interrupt.is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed)) {
                    break;
                }
                let outcome = m
                    .run_compare_cell(local_weft, args, c, interrupt)
                    .map(|(summary, wall)| crate::experiment::RunOutcome {
                        truncated: summary.incomplete.is_some(),
                        summary,
                        wall,
                        threads: 1,
                        // A remote cell's stall is in its summary's `incomplete`.
                        stalled: None,
                        pfc_events: None,
                        faithfulness: None,
                    })
                    .map_err(crate::experiment::RunError::Remote);
                if let Ok(mut r) = results.lock() {
                    r[i] = Some(crate::experiment::report::CompareCell { scheme: c.scheme.clone(), load: c.load, outcome });
                }
            });
        }
    });
    results.into_inner().unwrap_or_default().into_iter().flatten().collect()
}

#[cfg(test)]
mod summary_tests {
    /// Runs gathered from other machines come back as summary.json text:
    /// reading it must give back the very same summary (floats included).
    #[test]
    fn a_summary_read_back_from_its_json_is_the_same_summary() {
        let topo = crate::config::topology::Topology::load("leaf-spine-2x4").unwrap();
        let opts = crate::experiment::RunOptions { flow_size: 100_000, ..Default::default() };
        let s = crate::experiment::run(&topo, &opts, &mut |_, _| {}).unwrap().summary;
        let json = s.to_json();
        let back = emu_node::results::Summary::from_json(&json).unwrap();
        assert_eq!(back.to_json(), json);
        assert_eq!(back.flows_csv(), s.flows_csv());
        assert!(emu_node::results::Summary::from_json(&json.replace("weft.summary/1", "weft.summary/9")).is_err());
    }
}
