//! Machines of a fabric spread over several hosts (`weft up --machines
//! FILE`): the machines file, its validation, the placement of a
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

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

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
pub(crate) struct File {
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
/// vm_image = "/var/cache/weft/vm-image"  # optional: default, this machine's image path
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
    /// Where the soft-RoCE VM image lives on the machine (default: the
    /// same path as on this machine). `weft up` copies this machine's image
    /// there on first use, and again whenever the two differ.
    #[serde(default)]
    pub vm_image: Option<String>,
    /// emu-node processes it runs (`weft up`) or runs it takes at once
    /// (`weft compare`); default 1.
    #[serde(default = "one")]
    pub capacity: u32,
}

pub(crate) fn one() -> u32 {
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

/// Three machines, as the tests of this file and of placement use them.
#[cfg(test)]
pub(crate) const THREE: &str = r#"
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

#[cfg(test)]
mod tests {
    use super::*;

    use super::THREE;

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
}
