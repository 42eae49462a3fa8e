//! The shims' input: what to launch and exactly how to confine it.
//!
//! These types are the shims' own, deliberately independent of the engine's JSON: the host
//! translates a decision into a `LaunchPlan`, and each shim turns a plan into its mechanism
//! (bwrap argv, Landlock ruleset plus seccomp filter, SBPL profile, plain supervised exec,
//! `docker run` argv). Every path is absolute and already resolved by the host.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The isolation mechanism a plan is launched under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mechanism {
    /// bubblewrap: user, PID, IPC, UTS, cgroup (and network) namespaces, seccomp.
    Bwrap,
    /// Landlock ruleset plus seccomp in a private PID namespace; no mount namespace.
    Landlock,
    /// No filesystem or network masks; supervision, budgets and cleanup only.
    Direct,
    /// macOS Seatbelt: `sandbox-exec` with a generated SBPL profile ([`crate::seatbelt`]),
    /// supervised as a process group ([`crate::pgroup`]).
    Seatbelt,
    /// A container of a pinned image, run by the Docker daemon ([`crate::docker`]).
    Docker,
}

/// The network policy the mechanism must enforce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Network {
    /// No network at all (no route, no host sockets).
    None,
    /// The sandbox's own loopback only.
    LoopbackOnly,
    /// Unrestricted outbound traffic.
    AllowOutbound,
}

/// Filtered egress: the sandbox keeps its own network namespace (`network` is
/// [`Network::LoopbackOnly`]) and its only way out is the host's filtering proxy, reached
/// through a bridge of Palisade's own on the sandbox's loopback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressProxy {
    /// The proxy's Unix socket on the host, in a private directory.
    pub socket: PathBuf,
    /// The `palisade` binary that runs the bridge (`palisade __proxy-bridge`) in the sandbox.
    pub bridge_program: PathBuf,
    /// The sandbox-loopback port the bridge listens on (`127.0.0.1:<port>`).
    pub bridge_port: u16,
}

/// Resource budgets for the whole process tree. `None` = unlimited.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Budgets {
    /// Wall-clock time from launch until the tree is reaped.
    pub wall_clock: Option<Duration>,
    /// Memory for the whole tree (cgroup) or per process (rlimit fallback), in bytes.
    pub memory_bytes: Option<u64>,
    /// Number of processes (and threads) alive at once in the tree.
    pub max_processes: Option<u64>,
    /// CPU time consumed by the tree, in seconds.
    pub cpu_seconds: Option<u64>,
}

/// Everything a shim needs to launch one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchPlan {
    pub mechanism: Mechanism,
    pub network: Network,
    /// The workspace; the command's working directory.
    pub workspace: PathBuf,
    /// Read-write paths: the workspace first, then further roots (results dir, run temp dir).
    pub writable_roots: Vec<PathBuf>,
    /// Whether everything outside `writable_roots` is read-only.
    pub read_only_root: bool,
    /// Paths that must be unreadable (existing or not).
    pub denied_read_paths: Vec<PathBuf>,
    /// Paths that must be read-only, including ones that do not exist yet.
    pub protected_paths: Vec<PathBuf>,
    /// Whether to install Palisade's seccomp filter.
    pub syscall_filter: bool,
    /// The command and its arguments; `command[0]` is looked up in the sandbox's `PATH`.
    pub command: Vec<OsString>,
    /// The command's complete environment (nothing else is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// A private, per-run temporary directory (the sandbox's `TMPDIR`), already created.
    pub run_temp_dir: PathBuf,
    pub budgets: Budgets,
    /// When present, the only way out of the sandbox (bwrap only; other mechanisms refuse).
    pub egress_proxy: Option<EgressProxy>,
}
