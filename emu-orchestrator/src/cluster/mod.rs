//! The emu-node processes of a fabric: launched on this machine, over ssh
//! on others ([`ssh`]) or as external pods, authenticated (pinned fabric
//! certificate and token), recorded in a state file and torn down
//! ([`state`]). Used by the experiment runners and by `weft up`.

pub mod launch;
pub mod ssh;
pub mod state;

/// Errors of live-fabric commands.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// A fabric is already up in this state directory.
    #[error("a fabric is already up (orchestrator pid {0}); run `weft down` first")]
    AlreadyUp(u32),
    /// No fabric is up.
    #[error("no fabric is up (no state in {0})")]
    NotUp(String),
    /// Needs root.
    #[error("real-time fabrics with TAP hosts need root (network namespaces, /dev/net/tun)")]
    NotRoot,
    /// A VM host cannot run (no qemu, no image).
    #[error(transparent)]
    Vm(#[from] emu_node::vm::VmError),
    /// The VM image could not be built.
    #[error(transparent)]
    VmImage(#[from] crate::deploy::vm_image::VmImageError),
    /// Too little memory for a VM host.
    #[error("--vm-memory {0} MiB is too small for a soft-RoCE VM host (the kernel, the 45 MB initramfs held in RAM and rxe need at least {min} MiB; the default is {def} MiB)", min = emu_node::vm::MIN_MEMORY_MIB, def = emu_node::vm::DEFAULT_MEMORY_MIB)]
    VmMemory(u32),
    /// The emu-node binary is missing.
    #[error("cannot find the emu-node binary next to weft ({0}); build it with `cargo build --release`")]
    NoEmuNode(String),
    /// A namespace with a host's name exists and is not ours.
    #[error("network namespace `{0}` exists and does not belong to a weft fabric; remove it or use --netns-prefix")]
    NetnsTaken(String),
    /// Placement.
    #[error("placement: {0}")]
    Placement(String),
    /// A machine of `--machines`.
    #[error(transparent)]
    Machines(#[from] crate::config::machines::MachinesError),
    /// An emu-node reported a failure (its own message).
    #[error("emu-node {0} failed: {1}")]
    Node(u32, String),
    /// An emu-node's control channel broke (`logs`: the tail of the
    /// emu-nodes' logs, or empty).
    #[error("emu-node {process}: {what}: {source}{logs}")]
    NodeLost {
        /// The process.
        process: u32,
        /// What was going on.
        what: &'static str,
        /// Cause.
        #[source]
        source: emu_node::control::ControlError,
        /// Log tails.
        logs: String,
    },
    /// An emu-node sent a message out of turn.
    #[error("emu-node {0} sent an unexpected message: {1}")]
    Unexpected(u32, String),
    /// An emu-node's switch results do not decode.
    #[error("emu-node {process}: malformed switch results: {source}")]
    BadResults {
        /// The process.
        process: u32,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// Not every emu-node connected in time.
    #[error("emu-nodes did not all connect within 20 s{0}")]
    ConnectTimeout(String),
    /// The orchestrator of a running fabric does not answer its socket.
    #[error("the orchestrator is not answering on {0} (killed?); `weft down` cleans up")]
    NotAnswering(String),
    /// The orchestrator's answer does not decode.
    #[error("bad answer from the orchestrator: {0}")]
    BadAnswer(#[source] serde_json::Error),
    /// A network namespace or TAP operation failed.
    #[error(transparent)]
    Tap(#[from] emu_node::tap::TapError),
    /// The control channel to an emu-node failed.
    #[error(transparent)]
    Control(#[from] emu_node::control::ControlError),
    /// The fabric certificate or the QUIC server could not be made.
    #[error(transparent)]
    Tls(#[from] emu_node::tls::TlsError),
    /// This process's part of the fabric (links, capture) failed.
    #[error(transparent)]
    Runtime(#[from] emu_node::runtime::RuntimeError),
    /// Prometheus could not be configured or started.
    #[error(transparent)]
    Prometheus(#[from] crate::observe::prometheus::PrometheusError),
    /// A blocking task panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// A fabric token file that is not a token.
    #[error("{0}: {1}")]
    Token(String, String),
    /// A teardown left something it could not remove (the state file is
    /// kept, so a later `weft down` retries).
    #[error("teardown incomplete, kept {state} so that `weft down` can retry; left: {}", left.join("; "))]
    Leftovers {
        /// The state file kept.
        state: String,
        /// What is left, with why.
        left: Vec<String>,
    },
    /// I/O.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> FabricError {
    let w = what.into();
    move |e| FabricError::Io(w, e)
}
