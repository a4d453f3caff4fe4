//! Machines of a fabric spread over several hosts (`weft up --machines
//! FILE`, issue 18): the machines file, its validation, the placement of a
//! fabric over the machines, and how an emu-node is started on one over
//! OpenSSH.
//!
//! Why the system `ssh` client and not a Rust SSH crate: it is what the
//! user already configured and trusts (`~/.ssh/config`, agents, jump hosts,
//! known_hosts, hardware keys), it is what MaxiNet and Distrinet use, and
//! weft needs nothing from the session but a process with stdin and an exit
//! code. The fabric token travels on the ssh session's standard input
//! (`emu-node --token-stdin`), never on a command line that `ps` shows on
//! either machine.
//!
//! Invariants: machine names and link addresses are unique; every process
//! of the placement runs on exactly one machine (process p on machine p);
//! a machine is checked (reachable, same emu-node version) before anything
//! is started on any machine.

use emu_node::fabric::FabricSpec;
use emu_node::results::Summary;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A machines file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum MachinesError {
    /// The file could not be read.
    #[error("cannot read machines file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("machines file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The file names no machine.
    #[error("machines file {0} names no machine ([[machine]] tables)")]
    Empty(String),
    /// Two machines share a name or a link address.
    #[error("machines file {path}: {what} `{value}` is named twice (machines {first} and {second})")]
    Duplicate {
        /// The file.
        path: String,
        /// "name" or "bind address".
        what: &'static str,
        /// The value.
        value: String,
        /// The machines.
        first: String,
        /// See `first`.
        second: String,
    },
    /// ssh could not run a command on a machine.
    #[error("machine {machine} ({dest}): ssh failed: {detail}")]
    Ssh {
        /// Machine name.
        machine: String,
        /// ssh destination.
        dest: String,
        /// ssh's last line of error output, or why ssh did not start.
        detail: String,
    },
    /// The machine's emu-node is another version.
    #[error("machine {machine}: its emu-node ({path}) is {theirs}, this weft is {ours}; install the same version there")]
    Version {
        /// Machine name.
        machine: String,
        /// emu-node path on the machine.
        path: String,
        /// What it said.
        theirs: String,
        /// Our version line.
        ours: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    machine: Vec<Machine>,
}

/// One machine of a machines file.
///
/// ```toml
/// [[machine]]
/// name = "m1"                 # how weft names it
/// ssh = "10.0.0.11"           # ssh destination (host or alias of ~/.ssh/config)
/// user = "root"               # optional: ssh -l
/// port = 22                   # optional: ssh -p
/// identity = "~/.ssh/weft"    # optional: ssh -i
/// known_hosts = "hosts"       # optional: only these host keys are accepted
/// bind = "10.0.0.11"          # the address its fabric links bind on
/// emu_node = "/usr/local/bin/emu-node"  # optional: default, this emu-node's path
/// ```
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// Name (unique).
    pub name: String,
    /// ssh destination.
    pub ssh: String,
    /// Login user.
    #[serde(default)]
    pub user: Option<String>,
    /// ssh port.
    #[serde(default)]
    pub port: Option<u16>,
    /// Private key file.
    #[serde(default)]
    pub identity: Option<PathBuf>,
    /// A known_hosts file holding the machine's host key
    /// (StrictHostKeyChecking=yes against it).
    #[serde(default)]
    pub known_hosts: Option<PathBuf>,
    /// The address the machine's emu-node binds its link sockets on and
    /// announces to the other machines.
    pub bind: IpAddr,
    /// The emu-node binary on the machine.
    #[serde(default)]
    pub emu_node: Option<String>,
    /// The weft binary on the machine (`weft compare --machines`; default:
    /// this weft's path).
    #[serde(default)]
    pub weft: Option<String>,
    /// emu-node processes it runs (`weft up`) or runs it takes at once
    /// (`weft compare`); default 1.
    #[serde(default = "one")]
    pub capacity: u32,
}

fn one() -> u32 {
    1
}

/// The process slots of `machines`: each machine `capacity` times, in file
/// order; process p of a placement runs on slot p.
pub fn process_slots(machines: &[Machine]) -> Vec<Machine> {
    machines.iter().flat_map(|m| std::iter::repeat_n(m.clone(), m.capacity.max(1) as usize)).collect()
}

/// Reads and validates a machines file.
pub fn load(path: &Path) -> Result<Vec<Machine>, MachinesError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| MachinesError::Read { path: p.clone(), source })?;
    parse(&p, &text)
}

/// Parses and validates the text of a machines file named `path`.
pub fn parse(path: &str, text: &str) -> Result<Vec<Machine>, MachinesError> {
    let f: File = toml::from_str(text).map_err(|e| MachinesError::Parse { path: path.into(), message: e.message().to_string() })?;
    if f.machine.is_empty() {
        return Err(MachinesError::Empty(path.into()));
    }
    for (i, m) in f.machine.iter().enumerate() {
        if m.name.trim().is_empty() || m.ssh.trim().is_empty() {
            return Err(MachinesError::Parse {
                path: path.into(),
                message: format!("machine {} needs a name and an ssh destination", i + 1),
            });
        }
        if m.capacity == 0 || m.capacity > 64 {
            return Err(MachinesError::Parse { path: path.into(), message: format!("machine {}: capacity must be 1 to 64", m.name) });
        }
        for earlier in &f.machine[..i] {
            let dup = if earlier.name == m.name {
                Some(("name", m.name.clone()))
            } else if earlier.bind == m.bind {
                Some(("bind address", m.bind.to_string()))
            } else {
                None
            };
            if let Some((what, value)) = dup {
                return Err(MachinesError::Duplicate {
                    path: path.into(),
                    what,
                    value,
                    first: earlier.name.clone(),
                    second: m.name.clone(),
                });
            }
        }
    }
    Ok(f.machine)
}

impl Machine {
    /// The emu-node path on this machine (`local`: this weft's emu-node).
    pub fn emu_node_path(&self, local: &Path) -> String {
        self.emu_node.clone().unwrap_or_else(|| local.display().to_string())
    }

    /// `ssh` and its options to run a command on this machine (without the
    /// command): no password prompts, a 5 s connection timeout, keep-alives
    /// so a lost machine is noticed.
    pub fn ssh_command(&self) -> Command {
        let mut c = Command::new("ssh");
        c.args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=3"]);
        if let Some(u) = &self.user {
            c.args(["-l", u]);
        }
        if let Some(p) = self.port {
            c.args(["-p", &p.to_string()]);
        }
        if let Some(i) = &self.identity {
            c.arg("-i").arg(i).args(["-o", "IdentitiesOnly=yes"]);
        }
        if let Some(k) = &self.known_hosts {
            c.arg("-o").arg(format!("UserKnownHostsFile={}", k.display())).args(["-o", "StrictHostKeyChecking=yes"]);
        }
        c.arg(&self.ssh).arg("--");
        c
    }

    /// Copies this weft's emu-node (`local`) to the machine, to its
    /// `emu_node` path or else `/tmp/weft-emu-node-VERSION` (which then
    /// becomes its path), over the ssh session's stdin.
    pub fn copy_emu_node(&mut self, local: &Path) -> Result<(), MachinesError> {
        let path = self.emu_node.clone().unwrap_or_else(|| format!("/tmp/weft-emu-node-{}", env!("CARGO_PKG_VERSION")));
        let fail = |detail: String| MachinesError::Ssh { machine: self.name.clone(), dest: self.ssh.clone(), detail };
        let file = std::fs::File::open(local).map_err(|e| fail(format!("cannot read {}: {e}", local.display())))?;
        // Written aside and renamed: a running emu-node's file is never
        // overwritten in place.
        let tmp = format!("{path}.weft-copy");
        let script = format!("'cat > {tmp} && chmod 755 {tmp} && mv -f {tmp} {path}'");
        let out = self
            .ssh_command()
            .args(["sh", "-c", &script])
            .stdin(file)
            .output()
            .map_err(|e| fail(format!("cannot run ssh ({e}); is openssh-client installed?")))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(fail(format!("copying emu-node to {path}: {}", err.lines().last().unwrap_or("").trim())));
        }
        self.emu_node = Some(path);
        Ok(())
    }

    /// Checks the machine before anything starts: ssh works and its
    /// emu-node is this version.
    pub fn preflight(&self, local_emu: &Path) -> Result<(), MachinesError> {
        self.check_version(&self.emu_node_path(local_emu), "emu-node")
    }

    /// Checks that ssh works and the machine's weft is this version.
    pub fn preflight_weft(&self, local_weft: &Path) -> Result<(), MachinesError> {
        self.check_version(&self.weft.clone().unwrap_or_else(|| local_weft.display().to_string()), "weft")
    }

    fn check_version(&self, path: &str, program: &str) -> Result<(), MachinesError> {
        let path = path.to_string();
        let out = self.ssh_command().arg(&path).arg("--version").output().map_err(|e| MachinesError::Ssh {
            machine: self.name.clone(),
            dest: self.ssh.clone(),
            detail: format!("cannot run ssh ({e}); is openssh-client installed?"),
        })?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
        if out.status.code() == Some(255) {
            return Err(MachinesError::Ssh { machine: self.name.clone(), dest: self.ssh.clone(), detail: last });
        }
        let theirs = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let ours = format!("{program} {}", env!("CARGO_PKG_VERSION"));
        if !out.status.success() || theirs != ours {
            let theirs = if theirs.is_empty() { format!("not runnable ({last})") } else { theirs };
            return Err(MachinesError::Version { machine: self.name.clone(), path, theirs, ours });
        }
        Ok(())
    }
}

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
    pub fn run_compare_cell(&self, local_weft: &Path, args: &[RemoteArg], cell: &RemoteCell) -> Result<(Summary, f64), String> {
        let weft = self.weft.clone().unwrap_or_else(|| local_weft.display().to_string());
        let mut script = String::from("set -e\nD=$(mktemp -d /tmp/weft-compare.XXXXXX)\ntrap 'rm -rf \"$D\"' EXIT\n");
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
            // summary.json says so ("incomplete": "stalled: ...").
            "rc=0; {} >\"$D/log\" 2>&1 || rc=$?\n\
             [ $rc = 0 ] || [ $rc = 3 ] || {{ tail -n 3 \"$D/log\" >&2; exit 1; }}\n\
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
            .spawn()
            .map_err(|e| format!("machine {}: cannot run ssh ({e})", self.name))?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            stdin.write_all(script.as_bytes()).map_err(|e| format!("machine {}: {e}", self.name))?;
        }
        let out = child.wait_with_output().map_err(|e| format!("machine {}: {e}", self.name))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("machine {}: {}", self.name, err.trim().lines().collect::<Vec<_>>().join(" | ")));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut files = std::collections::BTreeMap::new();
        for part in text.split(FILE_MARK).skip(1) {
            let (name, body) = part.split_once('\n').unwrap_or((part, ""));
            files.insert(name.trim().to_string(), body.to_string());
        }
        let bad = |what: &str| format!("machine {}: its weft compare wrote no readable {what}", self.name);
        let summary = Summary::from_json(files.get("summary.json").ok_or_else(|| bad("summary.json"))?)
            .map_err(|e| format!("{}: {e}", bad("summary.json")))?;
        let compare: serde_json::Value =
            serde_json::from_str(files.get("compare.json").ok_or_else(|| bad("compare.json"))?).map_err(|_| bad("compare.json"))?;
        let wall = compare["runs"][0]["wall_s"].as_f64().unwrap_or(0.0);
        Ok((summary, wall))
    }
}

/// Runs the cells of a comparison matrix on `machines`, each machine one
/// cell at a time, and returns the cells in the order of `cells`.
pub fn compare_on(
    machines: &[Machine],
    local_weft: &Path,
    args: &[RemoteArg],
    cells: &[RemoteCell],
) -> Vec<crate::experiment::CompareCell> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<crate::experiment::CompareCell>>> =
        std::sync::Mutex::new((0..cells.len()).map(|_| None).collect());
    let slots = process_slots(machines);
    std::thread::scope(|scope| {
        for m in &slots {
            let (next, results) = (&next, &results);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(c) = cells.get(i) else { break };
                let outcome = m
                    .run_compare_cell(local_weft, args, c)
                    .map(|(summary, wall)| crate::experiment::RunOutcome {
                        truncated: summary.incomplete.is_some(),
                        summary,
                        wall: std::time::Duration::from_secs_f64(wall.max(0.0)),
                        threads: 1,
                        // A remote cell's stall is in its summary's `incomplete`.
                        stalled: None,
                    })
                    .map_err(crate::experiment::RunError::Remote);
                if let Ok(mut r) = results.lock() {
                    r[i] = Some(crate::experiment::CompareCell { scheme: c.scheme.clone(), load: c.load, outcome });
                }
            });
        }
    });
    results.into_inner().unwrap_or_default().into_iter().flatten().collect()
}

/// Starts, over ssh, the clean-up of what a fabric left on `m`: kills its
/// emu-node `pid` (if it still runs) and deletes the namespaces `netns`
/// (those that exist); its stderr is piped. Why not, if ssh cannot start.
pub fn spawn_cleanup(m: &Machine, pid: u32, netns: &[String]) -> Result<std::process::Child, String> {
    // The remote shell sees one string: only names of safe characters go
    // into it (weft's own names always are).
    let safe = |n: &&String| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let mut script = String::new();
    if pid > 0 {
        script.push_str(&format!("kill -9 {pid} 2>/dev/null; "));
    }
    for n in netns.iter().filter(safe) {
        script.push_str(&format!("ip netns del {n} 2>/dev/null; "));
    }
    script.push_str("true");
    m.ssh_command()
        .args(["sh", "-c", &format!("'{script}'")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run ssh ({e}); is openssh-client installed?"))
}

/// The placement of `f` over `machines`: process p runs on machine p.
/// Leaves stay whole with their hosts ([`crate::live::auto_place`]);
/// returns the links that cross machines (the cut).
pub fn place(f: &mut FabricSpec, slots: &[Machine]) -> Vec<String> {
    crate::live::auto_place(f, slots.len() as u32);
    cut(f, slots)
}

/// The links whose ends run on different machines (`slots`: the machine of
/// each process, [`process_slots`]).
pub fn cut(f: &FabricSpec, slots: &[Machine]) -> Vec<String> {
    let machine = |n: emu_node::ids::NodeId| slots.get(f.nodes[n.index()].placement as usize).map(|m| m.name.as_str());
    f.links.iter().filter(|l| machine(l.a.0) != machine(l.b.0)).map(|l| l.name.clone()).collect()
}

/// One line per machine: its processes and what they run (`slots`: the
/// machine of each process).
pub fn describe(f: &FabricSpec, slots: &[Machine]) -> Vec<String> {
    let mut lines: Vec<(String, Vec<String>)> = Vec::new();
    for (p, m) in slots.iter().enumerate() {
        let on: Vec<&emu_node::fabric::NodeSpec> = f.nodes.iter().filter(|n| n.placement == p as u32).collect();
        let switches: Vec<&str> = on.iter().filter(|n| n.as_switch().is_some()).map(|n| n.name.as_str()).collect();
        let hosts = on.iter().filter(|n| n.as_host().is_some()).count();
        let part = format!("emu-node {p}: {} and {hosts} hosts", switches.join(" "));
        match lines.iter_mut().find(|(n, _)| *n == m.name) {
            Some((_, v)) => v.push(part),
            None => lines.push((m.name.clone(), vec![part])),
        }
    }
    lines
        .into_iter()
        .map(|(name, parts)| {
            let m = slots.iter().find(|m| m.name == name).map_or((String::new(), String::new()), |m| (m.ssh.clone(), m.bind.to_string()));
            format!("{name} ({}, links on {}): {}", m.0, m.1, parts.join("; "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE: &str = r#"
[[machine]]
name = "m1"
ssh = "10.77.0.1"
user = "root"
bind = "10.77.0.1"
[[machine]]
name = "m2"
ssh = "10.77.0.2"
port = 2222
bind = "10.77.0.2"
[[machine]]
name = "m3"
ssh = "m3.example"
identity = "/k"
known_hosts = "/kh"
bind = "10.77.0.3"
emu_node = "/opt/weft/emu-node"
"#;

    #[test]
    fn a_machines_file_parses_with_its_options() {
        let m = parse("t", THREE).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].port, Some(2222));
        assert_eq!(m[2].emu_node_path(Path::new("/x/emu-node")), "/opt/weft/emu-node");
        assert_eq!(m[0].emu_node_path(Path::new("/x/emu-node")), "/x/emu-node");
        let c = m[2].ssh_command();
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let s = args.join(" ");
        assert!(s.contains("-i /k") && s.contains("UserKnownHostsFile=/kh") && s.contains("StrictHostKeyChecking=yes"), "{s}");
        assert!(s.ends_with("m3.example --"), "{s}");
    }

    #[test]
    fn bad_machines_files_get_one_clear_error() {
        let twice = THREE.replace("bind = \"10.77.0.2\"", "bind = \"10.77.0.1\"");
        let e = parse("t", &twice).unwrap_err().to_string();
        assert!(e.contains("bind address `10.77.0.1` is named twice (machines m1 and m2)"), "{e}");
        let e = parse("t", &THREE.replace("name = \"m2\"", "name = \"m1\"")).unwrap_err().to_string();
        assert!(e.contains("name `m1` is named twice"), "{e}");
        assert!(parse("t", "").unwrap_err().to_string().contains("names no machine"));
        let e = parse("t", "[[machine]]\nname = \"a\"\nssh = \"a\"\nbind = \"nope\"\n").unwrap_err().to_string();
        assert!(e.contains("machines file t:"), "{e}");
        let e = parse("t", "[[machine]]\nname = \"a\"\nssh = \"a\"\nbind = \"10.0.0.1\"\ncolour = 1\n").unwrap_err().to_string();
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn placement_over_three_machines_keeps_leaves_whole_and_reports_the_cut() {
        let topo = crate::topology::Topology::load("leaf-spine-2x4-rt").unwrap();
        let mut f = topo.fabric;
        let m = parse("t", THREE).unwrap();
        let cut = place(&mut f, &m);
        // Two leaves on m1 and m2 with their hosts, the spines on m3: the
        // 8 leaf-spine links cross machines, no host link does.
        assert_eq!(cut.len(), 8, "{cut:?}");
        assert!(cut.iter().all(|l| l.contains("spine")));
        let lines = describe(&f, &m);
        assert!(lines[0].starts_with("m1 (10.77.0.1, links on 10.77.0.1): emu-node 0: leaf0 and 8 hosts"), "{lines:?}");
        assert!(lines[2].contains("emu-node 2: spine0 spine1 spine2 spine3 and 0 hosts"), "{lines:?}");
        // Capacity 2 on m3: two emu-nodes share the spines there; the cut
        // counts machines, not processes.
        let m = parse("t", &THREE.replace("emu_node = \"/opt/weft/emu-node\"", "emu_node = \"/opt/weft/emu-node\"\ncapacity = 2")).unwrap();
        let slots = process_slots(&m);
        assert_eq!(slots.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["m1", "m2", "m3", "m3"]);
        let mut f = crate::topology::Topology::load("leaf-spine-2x4-rt").unwrap().fabric;
        assert_eq!(place(&mut f, &slots).len(), 8);
        let lines = describe(&f, &slots);
        assert_eq!(lines.len(), 3);
        assert!(lines[2].contains("emu-node 2: spine0 spine2 and 0 hosts; emu-node 3: spine1 spine3 and 0 hosts"), "{lines:?}");
        assert!(parse("t", &THREE.replace("port = 2222", "port = 2222\ncapacity = 0"))
            .unwrap_err()
            .to_string()
            .contains("capacity must be 1 to 64"));
    }
}

#[cfg(test)]
mod summary_tests {
    /// Runs gathered from other machines come back as summary.json text:
    /// reading it must give back the very same summary (floats included).
    #[test]
    fn a_summary_read_back_from_its_json_is_the_same_summary() {
        let topo = crate::topology::Topology::load("leaf-spine-2x4").unwrap();
        let opts = crate::experiment::RunOptions { flow_size: 100_000, ..Default::default() };
        let s = crate::experiment::run(&topo, &opts, &mut |_, _| {}).unwrap().summary;
        let json = s.to_json();
        let back = emu_node::results::Summary::from_json(&json).unwrap();
        assert_eq!(back.to_json(), json);
        assert_eq!(back.flows_csv(), s.flows_csv());
        assert!(emu_node::results::Summary::from_json(&json.replace("weft.summary/1", "weft.summary/9")).is_err());
    }
}
