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
        let path = self.emu_node_path(local_emu);
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
        let ours = format!("emu-node {}", env!("CARGO_PKG_VERSION"));
        if !out.status.success() || theirs != ours {
            let theirs = if theirs.is_empty() { format!("not runnable ({last})") } else { theirs };
            return Err(MachinesError::Version { machine: self.name.clone(), path, theirs, ours });
        }
        Ok(())
    }
}

/// Starts, over ssh, the clean-up of what a fabric left on `m`: kills its
/// emu-node `pid` (if it still runs) and deletes the namespaces `netns`
/// (those that exist). `None` if ssh cannot start.
pub fn spawn_cleanup(m: &Machine, pid: u32, netns: &[String]) -> Option<std::process::Child> {
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
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}

/// The placement of `f` over `machines`: process p runs on machine p.
/// Leaves stay whole with their hosts ([`crate::live::auto_place`]);
/// returns the links that cross machines (the cut).
pub fn place(f: &mut FabricSpec, machines: &[Machine]) -> Vec<String> {
    crate::live::auto_place(f, machines.len() as u32);
    f.links.iter().filter(|l| f.nodes[l.a.0.index()].placement != f.nodes[l.b.0.index()].placement).map(|l| l.name.clone()).collect()
}

/// One line per machine: what runs there.
pub fn describe(f: &FabricSpec, machines: &[Machine]) -> Vec<String> {
    machines
        .iter()
        .enumerate()
        .map(|(p, m)| {
            let on: Vec<&emu_node::fabric::NodeSpec> = f.nodes.iter().filter(|n| n.placement == p as u32).collect();
            let switches: Vec<&str> = on.iter().filter(|n| n.as_switch().is_some()).map(|n| n.name.as_str()).collect();
            let hosts = on.iter().filter(|n| n.as_host().is_some()).count();
            format!("{} ({}, links on {}): {} and {hosts} hosts", m.name, m.ssh, m.bind, switches.join(" "))
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
        assert!(lines[0].starts_with("m1 (10.77.0.1, links on 10.77.0.1): leaf0 and 8 hosts"), "{lines:?}");
        assert!(lines[2].contains("spine0 spine1 spine2 spine3 and 0 hosts"), "{lines:?}");
    }
}
