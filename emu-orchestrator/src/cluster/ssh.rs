//! emu-nodes on other machines over the system OpenSSH client.
//!
//! Why the system `ssh` client and not a Rust SSH crate: it is what the
//! user already configured and trusts (`~/.ssh/config`, agents, jump hosts,
//! known_hosts, hardware keys), it is what MaxiNet and Distrinet use, and
//! weft needs nothing from the session but a process with stdin and an exit
//! code. The fabric token travels on the ssh session's standard input
//! (`emu-node --token-stdin`), never on a command line that `ps` shows on
//! either machine.

use crate::config::machines::{Machine, MachinesError};
use std::path::Path;
use std::process::Command;

impl Machine {
    /// The emu-node path on this machine (`local`: this weft's emu-node).
    pub fn emu_node_path(&self, local: &Path) -> String {
        self.emu_node.clone().unwrap_or_else(|| local.display().to_string())
    }

    /// `ssh` and its options to run a command on this machine (without the
    /// command): no password prompts, a 5 s connection timeout, keep-alives
    /// so a lost machine is noticed within 3 s.
    pub fn ssh_command(&self) -> Command {
        self.ssh_command_lasting(std::time::Duration::from_secs(3))
    }

    /// [`Machine::ssh_command`] for a session that survives `grace` of
    /// silence from the machine (an emu-node's session: an underlay outage
    /// shorter than the fabric's grace does not end it).
    pub fn ssh_command_lasting(&self, grace: std::time::Duration) -> Command {
        let mut c = Command::new("ssh");
        let count = format!("ServerAliveCountMax={}", grace.as_secs().max(1));
        c.args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=1", "-o", &count]);
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
