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
    /// Landlock ruleset plus seccomp in a private PID namespace, with the `/proc` its probe
    /// stated.
    Landlock(LandlockProc),
    /// No filesystem or network masks; supervision, budgets and cleanup only.
    Direct,
    /// macOS Seatbelt: `sandbox-exec` with a generated SBPL profile ([`crate::seatbelt`]),
    /// supervised as a process group ([`crate::pgroup`]).
    Seatbelt,
    /// A container of a pinned image, run by the Docker daemon ([`crate::docker`]).
    Docker,
}

impl Mechanism {
    /// The mechanism's name in records (`bwrap`, `landlock`, …).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Bwrap => "bwrap",
            Mechanism::Landlock(_) => "landlock",
            Mechanism::Direct => "direct",
            Mechanism::Seatbelt => "seatbelt",
            Mechanism::Docker => "docker",
        }
    }
}

/// The `/proc` of a `linux-landlock` sandbox. Landlock itself has no mount namespace, so the
/// sandbox gets a procfs of its own only where the host lets init mount one; the probe tries
/// it (`palisade __sandbox-proc-trial`) and records the outcome (the probe's `landlockProc`,
/// and one line of its limitations for people, [`LandlockProc::limitation`]); the engine puts
/// it in the plan (`plan.landlockProc`), and the launcher applies that and nothing else: init
/// fails closed if it cannot.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum LandlockProc {
    /// A procfs of the sandbox's PID namespace, mounted in a mount namespace of its own: the
    /// command sees only the sandbox's processes.
    Own,
    /// The host's procfs, every process directory of it denied by the ruleset (the command's
    /// own included: a process started later has no rule).
    HostProcessesDenied,
}

impl LandlockProc {
    /// The probe's limitation line for [`LandlockProc::Own`].
    pub const OWN: &'static str =
        "/proc is the sandbox's own (its PID namespace's procfs): no other process is visible";
    /// How the probe's line for [`LandlockProc::HostProcessesDenied`] starts.
    pub const HOST_PREFIX: &'static str = "/proc is the host's (";

    /// The probe's limitation line; `reason` says why the host gives no procfs of the
    /// sandbox's own (ignored for [`LandlockProc::Own`]).
    #[must_use]
    pub fn limitation(self, reason: &str) -> String {
        match self {
            LandlockProc::Own => Self::OWN.to_owned(),
            LandlockProc::HostProcessesDenied => format!(
                "{}no procfs of the sandbox's own here: {reason}): every process directory is \
                 unreadable, the command's own included",
                Self::HOST_PREFIX,
            ),
        }
    }
}

/// The network the mechanism gives the command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Network {
    /// No network at all (no route, no host sockets, no IP socket).
    None,
    /// A network namespace of the sandbox's own, with only its loopback. With a [`Bridge`], the
    /// bridge's routes are the ways out: to listed ports of the host's loopback (`loopback-only`
    /// with `loopbackPorts`) and to the host's filtering proxy (a domain allowlist).
    OwnLoopback(Option<Bridge>),
    /// The host's own loopback, every port, and nothing else (Seatbelt: no network namespace).
    HostLoopback,
    /// Unrestricted outbound traffic.
    AllowOutbound,
}

impl Network {
    /// What the command's sockets can reach, whichever way the mechanism arranges it.
    #[must_use]
    pub fn reach(&self) -> Reach {
        match self {
            Network::None => Reach::Nothing,
            // The bridge listens on the sandbox's own loopback; what lies beyond it is the
            // host side's to admit.
            Network::OwnLoopback(_) => Reach::OwnLoopback,
            Network::HostLoopback => Reach::HostLoopback,
            Network::AllowOutbound => Reach::Everything,
        }
    }

    /// The bridge in front of the command, if the network has one.
    #[must_use]
    pub fn bridge(&self) -> Option<&Bridge> {
        match self {
            Network::OwnLoopback(bridge) => bridge.as_ref(),
            Network::None | Network::HostLoopback | Network::AllowOutbound => None,
        }
    }
}

/// What a sandbox's sockets can reach: the part of [`Network`] a syscall filter enforces.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Reach {
    /// No network at all.
    Nothing,
    /// The sandbox's own loopback (a network namespace of its own).
    OwnLoopback,
    /// The host's loopback (no network namespace).
    HostLoopback,
    /// The host's network.
    Everything,
}

/// A bridge of Palisade's own in front of the command: it listens on the sandbox's loopback and
/// relays each connection to a Unix socket on the host side (bound into the sandbox's private
/// `/run`), then execs the command. The host's end of each socket decides what lies beyond.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bridge {
    /// The Unix sockets and the bridge program, bound read-only (a read-only bind still
    /// accepts `connect`) at paths under the sandbox's private `/run`.
    pub binds: Vec<ReadOnlyBind>,
    /// The bridge's argv, its program as seen inside the sandbox first; the command's argv
    /// follows it, and the bridge execs the command once it listens.
    pub argv: Vec<OsString>,
}

/// A host file bound read-only into the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOnlyBind {
    /// The path on the host.
    pub source: PathBuf,
    /// The path inside the sandbox.
    pub target: PathBuf,
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
    /// Processes of the launcher's own at the top of the tree, which count in it (the plan's
    /// `budgets.launcherProcesses`: bwrap's monitor and PID 1, init's outer process and PID 1,
    /// docker-init): the process limit the kernel applies is `max_processes` plus these, and
    /// the outcome records it as applied.
    pub launcher_processes: u64,
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
    /// Host pathname Unix sockets the command may connect to, each bound at its path; every
    /// other host socket stays out of reach. Only bwrap and Docker take them (the engine never
    /// plans them for another backend, and those shims refuse a plan that has them).
    pub unix_sockets: Vec<HostSocket>,
}

/// One host Unix socket the command may connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSocket {
    /// Where the command connects (absolute, normalised).
    pub path: PathBuf,
    /// The socket itself, every symlink resolved, as the host measured it: what is bound at
    /// `path`.
    pub target: PathBuf,
}

impl LaunchPlan {
    /// `run-<id>` + `suffix`: an entry beside the run's temporary directory (the sandbox sees
    /// that directory as a writable root, never its siblings), swept with the run's other
    /// entries once the run is dead.
    pub fn beside_run_temp_dir(&self, suffix: &str) -> PathBuf {
        let mut name = self.run_temp_dir.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }
}
