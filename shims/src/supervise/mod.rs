//! Launch one command, enforce its budgets, forward signals, and leave nothing behind.
//!
//! [`run`] spawns a [`Launch`] (bwrap, `palisade __sandbox-init`, or a plain program), then
//! supervises the whole process tree until the launched process exits, and finally kills and
//! reaps whatever is left and checks the tree is empty. The [`Outcome`] says how the command
//! ended, why, and which mechanism enforced each budget, for the audit record.
//!
//! Key design decisions:
//! - The supervisor is a child subreaper, so orphans (double-forked `setsid` daemons) re-parent
//!   to it instead of to the host's init, and the final kill loop can find and reap them.
//! - As root, a run gets its own cgroup ([`crate::cgroup`]): `pids.max` and the memory limit
//!   are enforced by the kernel, CPU time is read from `cpuacct`, and the final kill is done with
//!   the tree frozen. A launch with a PID namespace gets only the controllers its budgets use,
//!   and no cgroup when none does: the namespace removes its tree. Otherwise budgets fall back
//!   to rlimits set in the child plus polling the tree through `/proc`, and the kill to a loop
//!   over the supervisor's descendants. The outcome records which mechanism enforced what.
//! - Between `fork` and `execve` the child only makes async-signal-safe system calls on data
//!   prepared before the fork (no allocation, no locks): the host process is multi-threaded.
//! - Signal handlers only write the signal number to a self-pipe; the supervisor loop polls it.
//! - Only one run supervises at a time per process ([`run`] holds a lock), because reaping with
//!   `wait4(-1)` and the subreaper flag are process-wide. A process that calls [`run`] must not
//!   rely on reaping other children of its own while a run is in progress.
//!
//! This module holds what every supervisor shares: the [`Launch`], the [`Outcome`], the errors
//! and the supervision loop (`supervise_until_exit`), which the process-group supervisor of
//! [`crate::pgroup`] (macOS) drives too. The Linux supervisor is in `linux`, the child's exec
//! preparation in `child`, the reading of `/proc` in `procfs`; their system calls are
//! the crate's `sys` module's.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::signals::SignalPipe;

#[cfg(target_os = "linux")]
mod child;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod procfs;

#[cfg(target_os = "linux")]
pub use linux::{NO_CGROUP_NEEDED, data_fd, run};
#[cfg(target_os = "linux")]
pub use procfs::kill_group_leftovers;

/// What to start: a program, its arguments, environment, working directory and the file
/// descriptors it gets besides stdin, stdout and stderr.
#[derive(Debug)]
pub struct Launch {
    /// An absolute path, or a name looked up in the `PATH` of `env` (else the supervisor's own).
    pub program: PathBuf,
    /// Arguments after `argv[0]` (which is `program` as given).
    pub args: Vec<OsString>,
    /// The complete environment of the launched program; nothing else is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory of the launched program; `None` keeps the supervisor's.
    pub cwd: Option<PathBuf>,
    /// Descriptors passed at fixed numbers (e.g. bwrap's `--seccomp 3`, init's spec on fd 3).
    /// Every other descriptor above 2 is closed in the child.
    pub fds: Vec<PassFd>,
    /// What kind of process this is, which decides how signals reach the command.
    pub kind: LaunchKind,
    /// The read end of the launch's start signal, when it has one: a pipe the sandbox writes
    /// one byte to just before it execs the command (bwrap's stub or shell step, the Landlock
    /// init's command child). The supervisor only polls it, to note when the command started
    /// ([`Marks::started`]); it never reads the byte, which stays for the launcher.
    pub started: Option<OwnedFd>,
    /// A file the launched process's identity goes to: its pid, written by the child itself
    /// before it execs (so it is there however soon the supervisor dies), then ` <start time in
    /// clock ticks>` from the supervisor once spawned. The pid is also its process group's id.
    /// A later run finds what this one left by it should the supervisor be killed
    /// ([`kill_group_leftovers`]).
    pub pid_record: Option<std::fs::File>,
    /// Observed masks the launched program's child mounts in namespaces of its own before it
    /// execs (Linux; bwrap's, see [`MaskMount`]).
    pub mask_namespace: Option<MaskMount>,
}

/// Where a launched program's child mounts observed masks before `execve`: the FUSE
/// filesystem on `mountpoint` (an empty directory), in a mount namespace slave to the host's
/// (for a user other than root, in a user namespace that maps only the caller's uid and gid
/// first), with the `/dev/fuse`
/// descriptor sent over `socket` to a [`crate::fusemask::MaskServer::serve_sent`]. If the
/// child cannot, it fails before `execve` at step [`MASK_NAMESPACE_STEP`] or
/// [`MASK_MOUNT_STEP`] ([`SuperviseError::Spawn`]): nothing ran, and the launcher may try
/// another way.
#[derive(Debug)]
pub struct MaskMount {
    pub mountpoint: PathBuf,
    pub socket: OwnedFd,
}

/// [`SuperviseError::Spawn`]'s steps when the child could not make the namespaces of a
/// [`MaskMount`] or mount it: named where the child reports its steps (`sys::child`), so the
/// system-call layer imports nothing from the supervisor.
pub use crate::sys::child::{MASK_MOUNT_STEP, MASK_NAMESPACE_STEP};

/// A descriptor handed to the launched program as number `target`.
#[derive(Debug)]
pub struct PassFd {
    pub fd: OwnedFd,
    pub target: RawFd,
}

/// The launched program's role, which decides how signals and the terminal reach the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LaunchKind {
    /// The command itself. Forwarded signals go to its process group; it gets the terminal.
    Plain,
    /// `palisade __sandbox-init` ([`crate::init`]): a PID-namespace init that ignores
    /// SIGINT/SIGTERM/SIGHUP and passes the command's status through. Same routing as `Plain`
    /// (the command stays in the launched process group).
    SandboxInit,
    /// bubblewrap with `--unshare-pid --new-session --die-with-parent`: the command runs in its
    /// own session, and signalling bwrap itself would tear the sandbox down at once. Forwarded
    /// signals go to every process in the tree except the launched bwrap; the terminal's
    /// foreground is not handed over (the command is not in the terminal's session).
    Bwrap,
}

impl LaunchKind {
    #[cfg(target_os = "linux")]
    pub(crate) fn pid_namespace(self) -> bool {
        !matches!(self, LaunchKind::Plain)
    }

    #[cfg(target_os = "linux")]
    pub(crate) fn signal_launched(self) -> bool {
        !matches!(self, LaunchKind::Bwrap)
    }
}

/// How the supervisor behaves (not what it enforces: that is [`Budgets`](crate::plan::Budgets)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuperviseOptions {
    /// Use a per-run cgroup when possible (root). `false` forces the rlimit/poll path.
    pub use_cgroups: bool,
    /// Time between SIGTERM (budget expiry, forwarded signal) and SIGKILL of the whole tree.
    pub grace: Duration,
    /// How often budgets are checked.
    pub poll_interval: Duration,
    /// Hand the terminal's foreground to the command's process group when the supervisor owns
    /// it (so the command can read the TTY and gets Ctrl-C directly, as under a shell).
    pub foreground_tty: bool,
    /// How long the final kill-and-reap may take before the tree is declared not empty.
    pub cleanup_timeout: Duration,
}

impl Default for SuperviseOptions {
    fn default() -> Self {
        SuperviseOptions {
            use_cgroups: true,
            grace: Duration::from_secs(2),
            poll_interval: Duration::from_millis(100),
            foreground_tty: true,
            cleanup_timeout: Duration::from_secs(10),
        }
    }
}

/// How the launched process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExitStatus {
    Exit(i32),
    Signal(i32),
}

impl ExitStatus {
    /// The shell convention: the exit code, or 128 + the signal number.
    pub fn exit_code(self) -> i32 {
        match self {
            ExitStatus::Exit(code) => code,
            ExitStatus::Signal(signal) => 128_i32.saturating_add(signal),
        }
    }

    pub(crate) fn from_raw(status: i32) -> Self {
        if libc::WIFSIGNALED(status) {
            ExitStatus::Signal(libc::WTERMSIG(status))
        } else {
            ExitStatus::Exit(libc::WEXITSTATUS(status))
        }
    }
}

/// Why the run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// The launched process exited on its own.
    CommandExited,
    WallClock,
    Memory,
    Processes,
    Cpu,
    /// The supervisor received this signal (SIGINT, SIGTERM, SIGHUP) and forwarded it.
    Signal(i32),
}

/// How a run is being ended: the first reason, and when SIGKILL is due. Every supervisor
/// follows the same rules: a budget or a forwarded interrupt starts the grace period after
/// SIGTERM, and a second interrupt ends it at once.
#[derive(Debug)]
pub(crate) struct Ending {
    pub(crate) reason: Option<EndReason>,
    /// When the grace period ends and SIGKILL is due.
    pub(crate) kill_at: Option<Instant>,
    /// SIGKILL was sent because the grace ran out (or a second interrupt cut it short).
    pub(crate) escalated: bool,
    grace: Duration,
}

impl Ending {
    pub(crate) fn new(grace: Duration) -> Self {
        Ending {
            reason: None,
            kill_at: None,
            escalated: false,
            grace,
        }
    }

    /// A signal the supervisor received; whether it is an interrupt to forward to the command.
    fn interrupted(&mut self, signal: i32, now: Instant) -> bool {
        if !matches!(signal, libc::SIGINT | libc::SIGTERM | libc::SIGHUP) {
            return false;
        }
        match self.reason {
            None => {
                self.reason = Some(EndReason::Signal(signal));
                self.kill_at = Some(now + self.grace);
            }
            // A second interrupt while ending: no more grace.
            Some(EndReason::Signal(_)) => self.kill_at = Some(now),
            Some(_) => {}
        }
        true
    }

    /// Ends the run for `reason` (the caller sends SIGTERM); SIGKILL is due after the grace.
    fn begin(&mut self, reason: EndReason, now: Instant) {
        self.reason = Some(reason);
        self.kill_at = Some(now + self.grace);
    }
}

/// What one supervisor does at each step; [`supervise_until_exit`] is the loop they share (the
/// Linux supervisor here, the process-group supervisor in [`crate::pgroup`]).
pub(crate) trait Supervised {
    fn ending(&mut self) -> &mut Ending;
    fn signals(&self) -> &SignalPipe;
    fn start_watch(&mut self) -> &mut StartWatch;
    fn poll_interval(&self) -> Duration;
    /// When the wall-clock budget runs out, if there is one.
    fn wall_clock_end(&self) -> Option<Instant>;
    /// Reaps whatever exited, without blocking.
    fn reap(&mut self);
    /// Whether the launched process has exited and been reaped.
    fn exited(&self) -> bool;
    /// Passes an interrupt the supervisor received on to the command.
    fn forward(&mut self, signal: i32);
    /// The budget that is exhausted, if any (polling the tree's usage where it must).
    fn check_budgets(&mut self, now: Instant) -> Option<EndReason>;
    /// SIGTERM to the whole tree.
    fn terminate(&mut self);
    /// SIGKILL to the whole tree.
    fn kill_all(&mut self);
}

/// Runs until the launched process has exited: forwards interrupts, ends the run when a budget
/// is exhausted, and sleeps until a signal, the next poll or the next deadline.
pub(crate) fn supervise_until_exit(s: &mut impl Supervised) {
    loop {
        // Before reaping: a start and an exit seen at one wake-up are noted in that order.
        s.start_watch().check();
        s.reap();
        if s.exited() {
            return;
        }
        let now = Instant::now();
        for signal in s.signals().drain() {
            if s.ending().interrupted(signal, now) {
                s.forward(signal);
            }
        }
        if s.ending().reason.is_none()
            && let Some(reason) = s.check_budgets(now)
        {
            s.ending().begin(reason, now);
            s.terminate();
        }
        if s.ending().kill_at.is_some_and(|at| now >= at) {
            s.ending().escalated = true;
            s.kill_all();
        }
        s.start_watch().check();
        s.reap();
        if s.exited() {
            return;
        }
        let mut timeout = s.poll_interval();
        let wall = match s.ending().reason {
            None => s.wall_clock_end(),
            Some(_) => None,
        };
        for deadline in [s.ending().kill_at, wall].into_iter().flatten() {
            timeout = timeout.min(deadline.saturating_duration_since(Instant::now()));
        }
        let started = s.start_watch().pending();
        s.signals().wait(timeout, started);
    }
}

/// A budget of [`Budgets`](crate::plan::Budgets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Budget {
    WallClock,
    Memory,
    Processes,
    Cpu,
}

/// What enforced a budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcer {
    /// The supervisor's monotonic timer.
    Timer,
    /// A kernel limit or counter of the run's cgroup.
    Cgroup,
    /// A per-process rlimit set in the child (inherited by the whole tree, counted per process).
    Rlimit,
    /// The supervisor polling the tree through `/proc` every `poll_interval`.
    Poll,
    /// The container's own limits, which the Docker daemon sets (its cgroup, its rlimits).
    Container,
}

/// One budget and one mechanism enforcing it (a budget may have several).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Enforcement {
    pub budget: Budget,
    pub by: Enforcer,
    /// The limit this mechanism really applies, where it is not the plan's budget as given
    /// (what was applied is what is recorded): e.g. a process limit of 64 applied as 66.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<u64>,
    /// Why `applied` differs from the plan's budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub because: Option<AppliedBecause>,
}

impl Enforcement {
    /// The plan's budget, applied as given.
    pub fn as_given(budget: Budget, by: Enforcer) -> Enforcement {
        Enforcement {
            budget,
            by,
            applied: None,
            because: None,
        }
    }
}

/// Why a mechanism applies another limit than the plan's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AppliedBecause {
    /// The launcher's own processes run in the tree and count (bwrap's monitor and PID 1, or
    /// init's outer process and PID 1): the limit is raised by them, so that the command keeps
    /// the number it was given.
    LauncherProcesses,
    /// docker-init is PID 1 of the container and counts: the limit is raised by one.
    DockerInit,
}

/// How leftover processes were removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cleanup {
    /// The launched init is PID 1 of a namespace: when it exits the kernel kills the rest, and
    /// the kernel kills it when the supervisor dies (parent-death signal).
    PidNamespace,
    /// cgroup v1 freezer: freeze, SIGKILL every member, thaw, until empty.
    CgroupFreezer,
    /// cgroup v2 `cgroup.kill`.
    CgroupKill,
    /// cgroup v2 `cgroup.freeze`, then SIGKILL every member.
    CgroupFreeze,
    /// SIGKILL every member listed in `cgroup.procs` (no freezer).
    CgroupProcs,
    /// The supervisor is a child subreaper and SIGKILLs its descendants until `wait4` reports
    /// no children.
    SubreaperKillLoop,
    /// SIGKILL to the command's process group until no member is left ([`crate::pgroup`]:
    /// macOS, where there is no subreaper, PID namespace or cgroup).
    ProcessGroupKillLoop,
    /// After the process-group kill loop: SIGKILL every process a [`crate::pgroup::Members`]
    /// finder names (on macOS, every process carrying the run's Seatbelt sandbox, wherever it
    /// went), until it finds none.
    MembershipSweep,
}

/// Resource use measured by the supervisor (`None` when the mechanism cannot tell).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// CPU time of the tree, in milliseconds.
    pub cpu_ms: Option<u64>,
    /// Highest memory use of the tree (cgroup), or the highest polled sum of private resident
    /// memory, in bytes.
    pub peak_memory_bytes: Option<u64>,
    /// Highest number of tasks alive at once (cgroup `pids.peak`, or the polled maximum).
    pub peak_processes: Option<u64>,
}

/// The result of a supervised run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// How the launched process ended.
    pub status: ExitStatus,
    /// Why the run ended.
    pub ended_by: EndReason,
    /// From spawn until the tree was reaped.
    #[serde(rename = "durationMs", with = "millis")]
    pub duration: Duration,
    /// Processes the supervisor reaped itself: the launched process and every orphan that
    /// re-parented to it. Processes inside a PID namespace are reaped by its init instead.
    pub processes_reaped: u64,
    /// Processes the supervisor SIGKILLed while ending the run and cleaning up.
    pub processes_killed: u64,
    /// The run was being ended (a budget, a forwarded interrupt) and the command had not
    /// exited when the grace after SIGTERM ran out (or a second interrupt cut it short), so
    /// the tree was SIGKILLed. Absent from the record when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grace_expired: bool,
    /// Whether the tree was verified empty afterwards (cgroup empty, no child left).
    pub tree_empty: bool,
    /// Which mechanism enforced each budget that was set.
    pub enforcement: Vec<Enforcement>,
    /// How leftovers were removed, strongest first.
    pub cleanup_mechanisms: Vec<Cleanup>,
    /// From the launched process's exit until the tree was empty.
    #[serde(rename = "cleanupMs", with = "millis")]
    pub cleanup: Duration,
    pub usage: Usage,
    /// Why a stronger mechanism was not used (e.g. cgroups unavailable as non-root).
    pub notes: Vec<String>,
    /// When the supervisor saw each step, for the launcher's phase timings. Instants of this
    /// process's monotonic clock: not part of the record (the launcher records durations).
    #[serde(skip)]
    pub marks: Marks,
}

/// When a supervised run reached each step, as the supervisor saw it (`None`: not reached, or
/// not observable by this launch). In order: spawned ≤ started ≤ exited ≤ verified.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// `execve` of the launched program (bwrap, init, the command) succeeded.
    pub spawned: Option<Instant>,
    /// The launch's start signal ([`Launch::started`]) arrived: the sandbox is set up and the
    /// command is being executed. Noted when the supervisor wakes for it (no later than the
    /// launched process's exit is noted).
    pub started: Option<Instant>,
    /// The launched process was reaped.
    pub exited: Option<Instant>,
    /// The final kill-and-reap ended: the tree verified empty (or the cleanup gave up).
    pub verified: Option<Instant>,
}

/// Watches a launch's start signal ([`Launch::started`]) until it arrives or can no longer.
#[derive(Debug, Default)]
pub(crate) struct StartWatch {
    fd: Option<OwnedFd>,
    pub(crate) at: Option<Instant>,
}

impl StartWatch {
    pub(crate) fn new(fd: Option<OwnedFd>) -> Self {
        StartWatch { fd, at: None }
    }

    /// The descriptor to wait on while the start has not been seen.
    pub(crate) fn pending(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Notes the start when its byte is there (without reading it). A hang-up without a byte
    /// means nothing will start: the watch ends either way.
    pub(crate) fn check(&mut self) {
        let Some(fd) = self.pending() else {
            return;
        };
        let events = crate::sys::poll_events(fd, Duration::ZERO);
        if events & libc::POLLIN != 0 {
            self.at = Some(Instant::now());
            self.fd = None;
        } else if events != 0 {
            self.fd = None;
        }
    }
}

impl Outcome {
    /// The status to exit with: the command's exit code, or 128 + the signal number.
    pub fn exit_code(&self) -> i32 {
        self.status.exit_code()
    }
}

/// Why a run could not be started, or did not end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("program `{0}` not found")]
    ProgramNotFound(PathBuf),
    #[error("invalid launch: {0}")]
    InvalidLaunch(String),
    #[error("cannot prepare the launch: {what}: {source}")]
    Setup {
        what: &'static str,
        source: io::Error,
    },
    /// The child failed before `execve` (nothing was launched).
    #[error("cannot launch `{program}`: {step}: {source}")]
    Spawn {
        program: PathBuf,
        step: &'static str,
        source: io::Error,
    },
    /// The command ran, but processes were still alive after the cleanup. The outcome is
    /// complete otherwise and belongs in the audit record.
    #[error("{remaining} processes of the run survived the cleanup")]
    TreeNotEmpty {
        remaining: usize,
        outcome: Box<Outcome>,
    },
}

/// One run at a time per process: `wait4(-1)`, the subreaper flag and the signal handlers are
/// process-wide.
pub(crate) static RUN_LOCK: Mutex<()> = Mutex::new(());

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests;
