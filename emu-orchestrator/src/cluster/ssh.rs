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

    fn ssh_error(&self, detail: String) -> MachinesError {
        MachinesError::Ssh { machine: self.name.clone(), dest: self.ssh.clone(), detail }
    }

    /// Copies this weft's emu-node (`local`) to the machine, to its
    /// `emu_node` path or else `/tmp/weft-emu-node-VERSION` (which then
    /// becomes its path), over the ssh session's stdin.
    pub fn copy_emu_node(&mut self, local: &Path) -> Result<(), MachinesError> {
        let path = self.emu_node.clone().unwrap_or_else(|| format!("/tmp/weft-emu-node-{}", env!("CARGO_PKG_VERSION")));
        self.copy_file(local, &path, "755")?;
        self.emu_node = Some(path);
        Ok(())
    }

    /// Copies the file `local` to `path` on the machine (mode `mode`), over
    /// the ssh session's stdin; written aside and renamed, so a file in use
    /// there (a running emu-node) is never overwritten in place.
    fn copy_file(&self, local: &Path, path: &str, mode: &str) -> Result<(), MachinesError> {
        let file = std::fs::File::open(local).map_err(|e| self.ssh_error(format!("cannot read {}: {e}", local.display())))?;
        let (q, tmp) = (quote(path), quote(&format!("{path}.weft-copy")));
        let script = format!("cat > {tmp} && chmod {mode} {tmp} && mv -f {tmp} {q}");
        let out = self
            .ssh_command()
            .arg(script)
            .stdin(file)
            .output()
            .map_err(|e| self.ssh_error(format!("cannot run ssh ({e}); is openssh-client installed?")))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(self.ssh_error(format!("copying {} to {path}: {}", local.display(), err.lines().last().unwrap_or("").trim())));
        }
        Ok(())
    }

    /// The VM image's directory on the machine: its `vm_image`, else
    /// `local`'s path.
    pub fn vm_image_path(&self, local: &Path) -> String {
        self.vm_image.clone().unwrap_or_else(|| local.display().to_string())
    }

    /// Makes the machine's VM image the same as this machine's (in
    /// `local`), checked like the emu-node's version: the format, kernel
    /// release, package list and file sizes there against here; copied
    /// when they differ or there is none. Returns whether it copied.
    pub fn ensure_vm_image(&self, local: &Path, progress: &mut dyn FnMut(&str)) -> Result<bool, MachinesError> {
        use crate::deploy::vm_image::{identity_command, IMAGE_FILES};
        let there = self.vm_image_path(local);
        let here = Command::new("sh")
            .args(["-c", &identity_command(&local.display().to_string())])
            .output()
            .map_err(|e| self.ssh_error(format!("cannot run sh: {e}")))?;
        if !here.status.success() {
            return Err(self.ssh_error(format!("no VM image in {} to copy", local.display())));
        }
        let remote = self
            .ssh_command()
            .arg(identity_command(&there))
            .output()
            .map_err(|e| self.ssh_error(format!("cannot run ssh ({e}); is openssh-client installed?")))?;
        if remote.status.success() && remote.stdout == here.stdout {
            return Ok(false);
        }
        let size: u64 = IMAGE_FILES.iter().filter_map(|f| std::fs::metadata(local.join(f)).ok()).map(|m| m.len()).sum();
        progress(&format!("VM image: copying {} MB to machine {} ({there})", size >> 20, self.name));
        let out = self
            .ssh_command()
            .arg(format!("mkdir -p {}", quote(&there)))
            .output()
            .map_err(|e| self.ssh_error(format!("cannot run ssh ({e})")))?;
        if !out.status.success() {
            return Err(self.ssh_error(format!("cannot create {there}: {}", String::from_utf8_lossy(&out.stderr).trim())));
        }
        for f in IMAGE_FILES {
            self.copy_file(&local.join(f), &format!("{}/{f}", there.trim_end_matches('/')), "644")?;
        }
        Ok(true)
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

/// `s` quoted for the remote shell.
fn quote(s: &str) -> String {
    emu_node::vm::shell_quote(&[s.to_string()])
}
