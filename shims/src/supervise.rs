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
//! - As root, every run gets its own cgroup ([`crate::cgroup`]): `pids.max` and the memory limit
//!   are enforced by the kernel, CPU time is read from `cpuacct`, and the final kill is done with
//!   the tree frozen. Otherwise budgets fall back to rlimits set in the child plus polling the
//!   tree through `/proc`, and the kill to a loop over the supervisor's descendants. The
//!   outcome records which mechanism enforced what.
//! - Between `fork` and `execve` the child only makes async-signal-safe system calls on data
//!   prepared before the fork (no allocation, no locks): the host process is multi-threaded.
//! - Signal handlers only write the signal number to a self-pipe; the supervisor loop polls it.
//! - Only one run supervises at a time per process ([`run`] holds a lock), because reaping with
//!   `wait4(-1)` and the subreaper flag are process-wide. A process that calls [`run`] must not
//!   rely on reaping other children of its own while a run is in progress.

use std::ffi::OsString;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

// The Linux supervisor's own imports (the types above are shared with `crate::pgroup`).
#[cfg(target_os = "linux")]
use std::collections::{BTreeMap, BTreeSet};
#[cfg(target_os = "linux")]
use std::ffi::{CString, OsStr};
#[cfg(target_os = "linux")]
use std::fs;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
#[cfg(target_os = "linux")]
use std::os::unix::ffi::OsStrExt;
#[cfg(target_os = "linux")]
use std::path::Path;
#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(target_os = "linux")]
use std::thread;
use std::time::Instant;

#[cfg(target_os = "linux")]
use crate::cgroup::{self, Controller, RunCgroup};
#[cfg(target_os = "linux")]
use crate::plan::Budgets;
use crate::signals::SignalPipe;

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
}

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
    /// Processes the launcher itself keeps alive next to the command (added to the process
    /// budget): init's outer process and PID 1, bwrap's monitor and PID 1.
    pub fn helper_processes(self) -> u64 {
        match self {
            LaunchKind::Plain => 0,
            LaunchKind::SandboxInit | LaunchKind::Bwrap => 2,
        }
    }

    #[cfg(target_os = "linux")]
    fn pid_namespace(self) -> bool {
        !matches!(self, LaunchKind::Plain)
    }

    #[cfg(target_os = "linux")]
    fn signal_launched(self) -> bool {
        !matches!(self, LaunchKind::Bwrap)
    }
}

/// How the supervisor behaves (not what it enforces: that is [`Budgets`]).
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
    grace: Duration,
}

impl Ending {
    pub(crate) fn new(grace: Duration) -> Self {
        Ending {
            reason: None,
            kill_at: None,
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
            s.kill_all();
        }
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
        s.signals().wait(timeout);
    }
}

/// A budget of [`Budgets`].
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
}

/// One budget and one mechanism enforcing it (a budget may have several).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Enforcement {
    pub budget: Budget,
    pub by: Enforcer,
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

/// Launches `launch`, supervises it under `budgets`, and returns once every process of the
/// tree has been reaped. See the module documentation.
#[cfg(target_os = "linux")]
pub fn run(
    launch: Launch,
    budgets: &Budgets,
    options: &SuperviseOptions,
) -> Result<Outcome, SuperviseError> {
    let _guard = RUN_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let program = resolve_program(&launch.program, &launch.env)?;
    let mut notes = Vec::new();

    // Cgroup first: the child joins it before it execs.
    let cgroup = if options.use_cgroups {
        match create_cgroup(budgets, launch.kind) {
            Ok(cg) => Some(cg),
            Err(e) => {
                notes.push(format!("cgroup not used: {e}"));
                None
            }
        }
    } else {
        notes.push("cgroup not used: disabled by the caller".to_string());
        None
    };
    let plan = Enforcing::new(budgets, cgroup.as_ref());

    let subreaper = Subreaper::enable().map_err(|source| SuperviseError::Setup {
        what: "PR_SET_CHILD_SUBREAPER",
        source,
    })?;
    let signals = SignalPipe::install().map_err(|source| SuperviseError::Setup {
        what: "signal handlers",
        source,
    })?;

    let cgroup_files = match &cgroup {
        Some(cg) => cg.open_procs().map_err(|e| SuperviseError::Setup {
            what: "cgroup.procs",
            source: io::Error::other(e.to_string()),
        })?,
        None => Vec::new(),
    };
    let tty = if options.foreground_tty && launch.kind != LaunchKind::Bwrap {
        sys::foreground_tty()
    } else {
        None
    };
    let child = ChildPlan::new(
        &program,
        &launch,
        cgroup_files.iter().map(AsRawFd::as_raw_fd).collect(),
        plan.rlimits.clone(),
        tty,
    )?;

    let start = Instant::now();
    let pid = child.spawn(&program)?;
    drop(cgroup_files);
    drop(launch);

    let mut sup = Supervisor {
        pid,
        tty,
        kind: child.kind,
        budgets: budgets.clone(),
        options: options.clone(),
        cgroup,
        enforcing: plan,
        signals,
        start,
        status: None,
        ending: Ending::new(options.grace),
        reaped: 0,
        killed: BTreeSet::new(),
        reaped_cpu_ticks: 0,
        peak_memory: None,
        peak_tasks: None,
        last_cpu: None,
        saw_sigxcpu: false,
        notes,
    };
    supervise_until_exit(&mut sup);
    if let Some(fd) = sup.tty {
        sys::reclaim_tty(fd);
    }
    let outcome = sup.finish();
    drop(subreaper);
    outcome
}

/// A close-on-exec memory file holding `bytes`, positioned at the start: for a
/// [`PassFd`] that the launched program reads (bwrap's `--seccomp FD`, init's spec).
#[cfg(target_os = "linux")]
pub fn data_fd(name: &str, bytes: &[u8]) -> io::Result<OwnedFd> {
    use std::io::{Seek, Write};
    let name = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut file = fs::File::from(sys::memfd_create(&name)?);
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(OwnedFd::from(file))
}

/// One run at a time per process: `wait4(-1)`, the subreaper flag and the signal handlers are
/// process-wide.
pub(crate) static RUN_LOCK: Mutex<()> = Mutex::new(());
/// Distinguishes the cgroups of successive runs of one supervisor process.
#[cfg(target_os = "linux")]
static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

#[cfg(target_os = "linux")]
fn create_cgroup(budgets: &Budgets, kind: LaunchKind) -> Result<RunCgroup, cgroup::CgroupError> {
    let hierarchy = cgroup::detect()?;
    let name = format!(
        "run-{}-{}",
        std::process::id(),
        RUN_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let limits = cgroup::Limits {
        memory_bytes: budgets.memory_bytes,
        max_tasks: budgets
            .max_processes
            .map(|n| n.saturating_add(kind.helper_processes())),
    };
    let cg = RunCgroup::create(&hierarchy, &name, &limits)?;
    // Without the pids controller the tree cannot be listed reliably; without cpuacct a CPU
    // budget cannot be read. Use the cgroup anyway (freezer, memory) — the checks below pick
    // the poll path per budget.
    if !cg.has(Controller::Pids) && !cg.has(Controller::Freezer) {
        return Err(cgroup::CgroupError::Unavailable(
            "neither the pids nor the freezer controller is available".into(),
        ));
    }
    Ok(cg)
}

/// Which mechanism enforces each budget, and the rlimits the child sets.
#[derive(Clone, Debug, Default)]
#[cfg(target_os = "linux")]
struct Enforcing {
    list: Vec<Enforcement>,
    rlimits: Vec<(RlimitResource, u64, u64)>,
    poll_memory: bool,
    poll_processes: bool,
    poll_cpu: bool,
}

#[cfg(target_os = "linux")]
impl Enforcing {
    fn new(budgets: &Budgets, cgroup: Option<&RunCgroup>) -> Self {
        let mut e = Enforcing::default();
        let has = |c| cgroup.is_some_and(|cg| cg.has(c));
        if budgets.wall_clock.is_some() {
            e.add(Budget::WallClock, Enforcer::Timer);
        }
        if let Some(bytes) = budgets.memory_bytes {
            if has(Controller::Memory) {
                e.add(Budget::Memory, Enforcer::Cgroup);
            } else {
                e.add(Budget::Memory, Enforcer::Rlimit);
                e.add(Budget::Memory, Enforcer::Poll);
                e.rlimits.push((libc::RLIMIT_AS, bytes, bytes));
                e.poll_memory = true;
            }
        }
        if budgets.max_processes.is_some() {
            if has(Controller::Pids) {
                e.add(Budget::Processes, Enforcer::Cgroup);
            } else {
                e.add(Budget::Processes, Enforcer::Poll);
                e.poll_processes = true;
            }
        }
        if let Some(seconds) = budgets.cpu_seconds {
            if has(Controller::Cpuacct) {
                e.add(Budget::Cpu, Enforcer::Cgroup);
            } else {
                e.add(Budget::Cpu, Enforcer::Rlimit);
                e.add(Budget::Cpu, Enforcer::Poll);
                // Soft limit: SIGXCPU; hard limit one second later: SIGKILL.
                e.rlimits.push((
                    libc::RLIMIT_CPU,
                    seconds.max(1),
                    seconds.max(1).saturating_add(1),
                ));
                e.poll_cpu = true;
            }
        }
        e
    }

    fn add(&mut self, budget: Budget, by: Enforcer) {
        self.list.push(Enforcement { budget, by });
    }

    fn polls_tree(&self) -> bool {
        self.poll_memory || self.poll_processes || self.poll_cpu
    }
}

#[cfg(target_os = "linux")]
struct Supervisor {
    pid: libc::pid_t,
    /// The terminal handed to the command's process group, to take back at the end.
    tty: Option<RawFd>,
    kind: LaunchKind,
    budgets: Budgets,
    options: SuperviseOptions,
    cgroup: Option<RunCgroup>,
    enforcing: Enforcing,
    signals: SignalPipe,
    start: Instant,
    /// The launched process's raw wait status once reaped.
    status: Option<i32>,
    ending: Ending,
    reaped: u64,
    /// Pids the supervisor sent SIGKILL to.
    killed: BTreeSet<i32>,
    /// CPU ticks of processes the supervisor reaped (their own and their reaped children's).
    reaped_cpu_ticks: u64,
    peak_memory: Option<u64>,
    peak_tasks: Option<u64>,
    last_cpu: Option<Duration>,
    /// A process the supervisor reaped was killed by SIGXCPU: an `RLIMIT_CPU` hit.
    saw_sigxcpu: bool,
    notes: Vec<String>,
}

#[cfg(target_os = "linux")]
impl Supervised for Supervisor {
    fn ending(&mut self) -> &mut Ending {
        &mut self.ending
    }

    fn signals(&self) -> &SignalPipe {
        &self.signals
    }

    fn poll_interval(&self) -> Duration {
        self.options.poll_interval
    }

    fn wall_clock_end(&self) -> Option<Instant> {
        self.budgets.wall_clock.map(|d| self.start + d)
    }

    fn reap(&mut self) {
        self.reap_nonblocking();
    }

    fn exited(&self) -> bool {
        self.status.is_some()
    }

    /// To the launched process group (the command is in it, init ignores it), or for bwrap to
    /// every process of the tree but bwrap itself.
    fn forward(&mut self, signal: i32) {
        if self.kind.signal_launched() {
            let _ = sys::killpg(self.pid, signal);
        } else {
            self.signal_tree(signal);
        }
    }

    fn check_budgets(&mut self, now: Instant) -> Option<EndReason> {
        self.exhausted_budget(now)
    }

    fn terminate(&mut self) {
        self.signal_tree(libc::SIGTERM);
    }

    fn kill_all(&mut self) {
        self.kill_everything();
    }
}

#[cfg(target_os = "linux")]
impl Supervisor {
    /// Sends `signal` once to every process of the tree (cgroup members and descendants),
    /// except the launched one when it must not be signalled (bwrap).
    fn signal_tree(&mut self, signal: i32) {
        let mut done = BTreeSet::new();
        if !self.kind.signal_launched() {
            done.insert(self.pid);
        }
        if let Some(cg) = &self.cgroup {
            for pid in cg.pids() {
                if done.insert(pid) {
                    let _ = sys::kill(pid, signal);
                }
            }
        }
        for p in proc_tree() {
            if done.insert(p.pid) {
                p.signal(signal);
            }
        }
    }

    /// SIGKILL to everything, by the strongest mechanism available.
    fn kill_everything(&mut self) {
        if let Some(cg) = &self.cgroup {
            match cg.kill_all(Duration::from_secs(1)) {
                Ok(pids) => self.killed.extend(pids),
                Err(e) => self.note(format!("cgroup kill: {e}")),
            }
        }
        for p in proc_tree() {
            if p.signal(libc::SIGKILL) {
                self.killed.insert(p.pid);
            }
        }
    }

    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// Reaps every child that has exited: the launched process and orphans.
    fn reap_nonblocking(&mut self) {
        while let Some(child) = sys::wait_any_or_stopped() {
            if libc::WIFSTOPPED(child.status) {
                if child.pid == self.pid
                    && let Some(fd) = self.tty
                {
                    self.job_control_stop(fd);
                }
                continue;
            }
            self.account_reaped(&child);
        }
    }

    /// The command was stopped from the terminal (Ctrl-Z) while it owned it: take the terminal
    /// back and stop the supervisor too, so the user's shell sees the job stopped; when the
    /// shell continues us in the foreground (`fg`), hand the terminal back and continue the
    /// command. (Continued in the background, `bg`, the command continues without it.)
    fn job_control_stop(&mut self, fd: RawFd) {
        sys::reclaim_tty(fd);
        let _ = sys::kill(sys::getpid(), libc::SIGSTOP);
        if sys::owns_tty(fd) {
            sys::give_tty(fd, self.pid);
        }
        let _ = sys::killpg(self.pid, libc::SIGCONT);
    }

    fn account_reaped(&mut self, child: &sys::Reaped) {
        self.reaped = self.reaped.saturating_add(1);
        self.reaped_cpu_ticks = self.reaped_cpu_ticks.saturating_add(child.cpu_ticks);
        if libc::WIFSIGNALED(child.status) && libc::WTERMSIG(child.status) == libc::SIGXCPU {
            self.saw_sigxcpu = true;
        }
        if child.pid == self.pid {
            self.status = Some(child.status);
        }
    }

    /// The budget that is exhausted, if any.
    fn exhausted_budget(&mut self, now: Instant) -> Option<EndReason> {
        if let Some(deadline) = self.wall_clock_end()
            && now >= deadline
        {
            return Some(EndReason::WallClock);
        }
        self.check_counters(false)
    }

    /// Budgets measured by cgroup counters or by polling the tree. `final_check` is the check
    /// after the command exited (the tree may already be gone; only counters are reliable).
    fn check_counters(&mut self, final_check: bool) -> Option<EndReason> {
        let mut over = None;
        if let Some(cg) = &self.cgroup {
            if self.budgets.memory_bytes.is_some() && cg.oom_kills().unwrap_or(0) > 0 {
                over.get_or_insert(EndReason::Memory);
            }
            if self.budgets.max_processes.is_some() && cg.pids_limit_hits().unwrap_or(0) > 0 {
                over.get_or_insert(EndReason::Processes);
            }
            if !self.enforcing.poll_cpu
                && let Some(cpu) = cg.cpu_usage()
            {
                self.last_cpu = Some(cpu);
                if self
                    .budgets
                    .cpu_seconds
                    .is_some_and(|s| cpu >= Duration::from_secs(s))
                {
                    over.get_or_insert(EndReason::Cpu);
                }
            }
        }
        if self.enforcing.polls_tree() {
            let tree = proc_tree();
            let ticks: u64 = tree
                .iter()
                .map(|p| p.cpu_ticks)
                .fold(self.reaped_cpu_ticks, u64::saturating_add);
            let tasks: u64 = tree.iter().map(|p| p.threads).sum();
            if !final_check {
                self.peak_tasks = Some(self.peak_tasks.unwrap_or(0).max(tasks));
            }
            if self.enforcing.poll_cpu {
                let cpu = ticks_to_duration(ticks);
                self.last_cpu = Some(cpu);
                // The kernel's RLIMIT_CPU check is finer than the tick-rounded times of
                // `/proc` and rusage: a SIGXCPU death is the rlimit's verdict.
                if self.saw_sigxcpu
                    || self
                        .budgets
                        .cpu_seconds
                        .is_some_and(|s| cpu >= Duration::from_secs(s))
                {
                    over.get_or_insert(EndReason::Cpu);
                }
            }
            if self.enforcing.poll_processes
                && !final_check
                && let Some(max) = self.budgets.max_processes
                && tasks > max.saturating_add(self.kind.helper_processes())
            {
                over.get_or_insert(EndReason::Processes);
            }
            if self.enforcing.poll_memory && !final_check {
                let bytes: u64 = tree.iter().map(|p| p.private_bytes()).sum();
                self.peak_memory = Some(self.peak_memory.unwrap_or(0).max(bytes));
                if self.budgets.memory_bytes.is_some_and(|max| bytes > max) {
                    over.get_or_insert(EndReason::Memory);
                }
            }
        }
        over
    }

    /// After the launched process exited: kill and reap the rest, verify, build the outcome.
    fn finish(mut self) -> Result<Outcome, SuperviseError> {
        let exited_at = Instant::now();
        let ended_by = match self.ending.reason {
            Some(reason) => reason,
            None => self
                .check_counters(true)
                .unwrap_or(EndReason::CommandExited),
        };
        let mut cleanup = Vec::new();
        if self.kind.pid_namespace() {
            cleanup.push(Cleanup::PidNamespace);
        }
        if let Some(cg) = &self.cgroup {
            cleanup.push(match cg.kill_mechanism() {
                "cgroup-kill" => Cleanup::CgroupKill,
                "cgroup-freeze" => Cleanup::CgroupFreeze,
                "cgroup-freezer" => Cleanup::CgroupFreezer,
                _ => Cleanup::CgroupProcs,
            });
        }
        cleanup.push(Cleanup::SubreaperKillLoop);

        let remaining = self.kill_and_reap(exited_at + self.options.cleanup_timeout);
        let cleanup_time = exited_at.elapsed();
        let duration = self.start.elapsed();

        let mut usage = Usage {
            cpu_ms: None,
            peak_memory_bytes: self.peak_memory,
            peak_processes: self.peak_tasks,
        };
        if let Some(cg) = &self.cgroup {
            if let Some(cpu) = cg.cpu_usage() {
                self.last_cpu = Some(cpu);
            }
            usage.peak_memory_bytes = cg.peak_memory().or(usage.peak_memory_bytes);
            usage.peak_processes = cg.peak_tasks().or(usage.peak_processes);
        }
        if self.cgroup.is_none()
            || !self
                .cgroup
                .as_ref()
                .is_some_and(|c| c.has(Controller::Cpuacct))
        {
            // Everything was reaped by now, so the reaped total is the whole tree's (minus
            // processes reaped inside a PID namespace, which their init's totals include).
            self.last_cpu = Some(ticks_to_duration(self.reaped_cpu_ticks));
        }
        usage.cpu_ms = self
            .last_cpu
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));

        if let Some(cg) = self.cgroup.take()
            && let Err(e) = cg.remove()
        {
            self.note(format!("cgroup removal: {e}"));
        }

        let outcome = Outcome {
            status: ExitStatus::from_raw(self.status.unwrap_or(0)),
            ended_by,
            duration,
            processes_reaped: self.reaped,
            processes_killed: self.killed.len() as u64,
            tree_empty: remaining == 0,
            enforcement: self.enforcing.list.clone(),
            cleanup_mechanisms: cleanup,
            cleanup: cleanup_time,
            usage,
            notes: std::mem::take(&mut self.notes),
        };
        if remaining == 0 {
            Ok(outcome)
        } else {
            Err(SuperviseError::TreeNotEmpty {
                remaining,
                outcome: Box::new(outcome),
            })
        }
    }

    /// Kills every remaining process and reaps every child until none is left or `deadline`
    /// passes; returns how many processes are still alive (0 = verified empty).
    fn kill_and_reap(&mut self, deadline: Instant) -> usize {
        let mut pause = Duration::from_micros(200);
        loop {
            if let Some(cg) = &self.cgroup {
                let remaining = deadline.saturating_duration_since(Instant::now());
                match cg.kill_all(remaining.min(Duration::from_secs(2))) {
                    Ok(pids) => self.killed.extend(pids),
                    Err(e) => self.note(format!("cgroup kill: {e}")),
                }
            }
            // Every descendant, not only children: a process outside the cgroup (moved out by a
            // root command) is still found by its ancestry.
            for p in proc_tree() {
                if p.signal(libc::SIGKILL) {
                    self.killed.insert(p.pid);
                }
            }
            self.reap_nonblocking();
            let no_children = sys::has_no_children();
            let cgroup_empty = self.cgroup.as_ref().is_none_or(|cg| cg.pids().is_empty());
            if no_children && cgroup_empty && proc_tree().is_empty() {
                return 0;
            }
            if Instant::now() >= deadline {
                let mut left: BTreeSet<i32> = proc_tree().iter().map(|p| p.pid).collect();
                if let Some(cg) = &self.cgroup {
                    left.extend(cg.pids());
                }
                return left.len().max(usize::from(!no_children));
            }
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

#[cfg(target_os = "linux")]
fn ticks_to_duration(ticks: u64) -> Duration {
    let hz = sys::clock_ticks_per_second().max(1);
    Duration::from_micros(ticks.saturating_mul(1_000_000) / hz)
}

/// Finds `program` like `execvp`, in the `PATH` of the launch environment (else the
/// supervisor's, else the default).
#[cfg(target_os = "linux")]
fn resolve_program(
    program: &Path,
    env: &[(OsString, OsString)],
) -> Result<PathBuf, SuperviseError> {
    if program.as_os_str().is_empty() {
        return Err(SuperviseError::InvalidLaunch("empty program".into()));
    }
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_else(|| OsString::from(DEFAULT_PATH));
    find_in_path(program.as_os_str(), &path)
        .ok_or_else(|| SuperviseError::ProgramNotFound(program.to_path_buf()))
}

/// `PATH` when none is set (the value `env`, `sudo` and systemd use).
#[cfg(target_os = "linux")]
pub(crate) const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The first executable regular file named `name` in `path`.
#[cfg(target_os = "linux")]
pub(crate) fn find_in_path(name: &OsStr, path: &OsStr) -> Option<PathBuf> {
    path.as_bytes()
        .split(|b| *b == b':')
        .map(|dir| {
            if dir.is_empty() {
                PathBuf::from(".")
            } else {
                PathBuf::from(OsStr::from_bytes(dir))
            }
        })
        .map(|dir| dir.join(name))
        .find(|candidate| sys::is_executable_file(candidate))
}

/// The launched child's setup, prepared before `fork` so the child only makes system calls.
#[cfg(target_os = "linux")]
struct ChildPlan {
    kind: LaunchKind,
    program: CString,
    _argv: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    cgroup_procs: Vec<RawFd>,
    rlimits: Vec<(RlimitResource, u64, u64)>,
    /// (high duplicate, target) pairs to `dup2` in the child.
    moves: Vec<(RawFd, RawFd)>,
    /// Keeps the high duplicates open until the child has been spawned.
    _high: Vec<OwnedFd>,
    /// Inclusive descriptor ranges to mark close-on-exec (everything above 2 but the targets).
    cloexec: Vec<(u32, u32)>,
    /// Highest descriptor to walk when `close_range` is unavailable.
    fd_limit: i32,
    parent: libc::pid_t,
    tty: Option<RawFd>,
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) type RlimitResource = libc::__rlimit_resource_t;
#[cfg(all(target_os = "linux", not(target_env = "gnu")))]
pub(crate) type RlimitResource = libc::c_int;

/// The steps the child reports when it fails before `execve`.
#[cfg(target_os = "linux")]
const CHILD_STEPS: [&str; 8] = [
    "setpgid",
    "parent-death signal",
    "parent exited",
    "join cgroup",
    "setrlimit",
    "pass descriptors",
    "chdir",
    "execve",
];

#[cfg(target_os = "linux")]
impl ChildPlan {
    fn new(
        program: &Path,
        launch: &Launch,
        cgroup_procs: Vec<RawFd>,
        rlimits: Vec<(RlimitResource, u64, u64)>,
        tty: Option<RawFd>,
    ) -> Result<Self, SuperviseError> {
        let cstr = |s: &OsStr, what: &str| {
            CString::new(s.as_bytes()).map_err(|_| {
                SuperviseError::InvalidLaunch(format!("{what} `{}` contains NUL", s.display()))
            })
        };
        let mut argv_owned = vec![cstr(launch.program.as_os_str(), "program")?];
        for arg in &launch.args {
            argv_owned.push(cstr(arg, "argument")?);
        }
        let mut envp_owned = Vec::new();
        for (key, value) in &launch.env {
            if key.is_empty() || key.as_bytes().contains(&b'=') {
                return Err(SuperviseError::InvalidLaunch(format!(
                    "environment name `{}` is invalid",
                    key.display()
                )));
            }
            let mut pair = key.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            envp_owned.push(cstr(OsStr::from_bytes(&pair), "environment entry")?);
        }
        let argv = null_terminated(&argv_owned);
        let envp = null_terminated(&envp_owned);
        let cwd = launch
            .cwd
            .as_ref()
            .map(|d| cstr(d.as_os_str(), "directory"))
            .transpose()?;

        let mut targets: Vec<RawFd> = launch.fds.iter().map(|p| p.target).collect();
        targets.sort_unstable();
        if targets.windows(2).any(|w| w.first() == w.get(1)) || targets.iter().any(|t| *t < 0) {
            return Err(SuperviseError::InvalidLaunch(format!(
                "descriptor targets {targets:?} must be distinct and non-negative"
            )));
        }
        let above = targets.last().map_or(3, |t| t.saturating_add(1).max(3));
        let mut high = Vec::new();
        let mut moves = Vec::new();
        for pass in &launch.fds {
            let dup = sys::dup_cloexec_at_least(pass.fd.as_raw_fd(), above).map_err(|source| {
                SuperviseError::Setup {
                    what: "duplicate a passed descriptor",
                    source,
                }
            })?;
            moves.push((dup.as_raw_fd(), pass.target));
            high.push(dup);
        }
        let mut cloexec = Vec::new();
        let mut next: u32 = 3;
        for target in targets.iter().filter(|t| **t >= 3) {
            let t = u32::try_from(*target).unwrap_or(u32::MAX);
            if t > next {
                cloexec.push((next, t - 1));
            }
            next = t.saturating_add(1);
        }
        cloexec.push((next, u32::MAX));

        Ok(ChildPlan {
            kind: launch.kind,
            program: cstr(program.as_os_str(), "program")?,
            _argv: argv_owned,
            argv,
            _envp: envp_owned,
            envp,
            cwd,
            cgroup_procs,
            rlimits,
            moves,
            _high: high,
            cloexec,
            fd_limit: sys::fd_limit(),
            parent: sys::getpid(),
            tty,
        })
    }

    /// Forks and execs; returns the child's pid once `execve` succeeded.
    fn spawn(&self, program: &Path) -> Result<libc::pid_t, SuperviseError> {
        let setup = |what| move |source| SuperviseError::Setup { what, source };
        let (err_read, err_write) = sys::pipe_cloexec().map_err(setup("error pipe"))?;
        let mask = sys::block_all_signals().map_err(setup("block signals"))?;
        let forked = sys::fork();
        if let Ok(0) = forked {
            self.exec_child(err_write.as_raw_fd());
        }
        sys::restore_signal_mask(&mask);
        let pid = forked.map_err(setup("fork"))?;
        drop(err_write);
        // Wait for execve (EOF) or a failure report. A job-control stop delivered when the child
        // unblocks signals (Ctrl-Z in that instant, SIGSTOP) would leave it stopped before
        // execve and this read blocked forever: continue such a child.
        while !sys::poll_readable(err_read.as_raw_fd(), Duration::from_millis(100)) {
            if sys::take_stop_report(pid) {
                let _ = sys::kill(pid, libc::SIGCONT);
            }
        }
        match sys::read_child_error(err_read.as_raw_fd()) {
            None => Ok(pid),
            Some((step, errno)) => {
                let _ = sys::wait_pid(pid);
                Err(SuperviseError::Spawn {
                    program: program.to_path_buf(),
                    step: CHILD_STEPS.get(step as usize).copied().unwrap_or("setup"),
                    source: io::Error::from_raw_os_error(errno),
                })
            }
        }
    }

    /// The child between `fork` and `execve`. Only async-signal-safe system calls on data
    /// prepared by [`ChildPlan::new`]: no allocation, no locks, no panics.
    #[allow(unsafe_code)]
    fn exec_child(&self, err_fd: RawFd) -> ! {
        let fail = |step: u32| -> ! {
            // SAFETY: errno location is thread-local and valid; write(2) and _exit(2) are
            // async-signal-safe; the buffer is on the stack.
            unsafe {
                let errno = *libc::__errno_location();
                let mut buf = [0_u8; 8];
                let (a, b) = buf.split_at_mut(4);
                a.copy_from_slice(&step.to_ne_bytes());
                b.copy_from_slice(&errno.to_ne_bytes());
                libc::write(err_fd, buf.as_ptr().cast(), buf.len());
                libc::_exit(127)
            }
        };
        // SAFETY: every call below is an async-signal-safe system call wrapper; pointers come
        // from CStrings and vectors owned by `self`, which the forked child's copy of memory
        // keeps alive until execve or _exit.
        unsafe {
            // Signals stay blocked (inherited mask) until just before execve; dispositions the
            // supervisor changed go back to the default (execve keeps ignored signals ignored).
            for signal in [
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGHUP,
                libc::SIGCHLD,
                libc::SIGPIPE,
                libc::SIGQUIT,
                libc::SIGTTOU,
                libc::SIGTTIN,
                libc::SIGTSTP,
            ] {
                libc::signal(signal, libc::SIG_DFL);
            }
            if libc::setpgid(0, 0) != 0 {
                fail(0);
            }
            if let Some(fd) = self.tty {
                // Best effort: a terminal that went away is not a reason to fail.
                libc::tcsetpgrp(fd, libc::getpid());
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                fail(1);
            }
            if libc::getppid() != self.parent {
                *libc::__errno_location() = libc::ESRCH;
                fail(2);
            }
            if !self.cgroup_procs.is_empty() {
                let mut buf = [0_u8; 16];
                let len = format_decimal(libc::getpid().unsigned_abs(), &mut buf);
                for fd in &self.cgroup_procs {
                    if libc::write(*fd, buf.as_ptr().cast(), len) < 0 {
                        fail(3);
                    }
                }
            }
            for (resource, soft, hard) in &self.rlimits {
                let limit = libc::rlimit {
                    rlim_cur: *soft as libc::rlim_t,
                    rlim_max: *hard as libc::rlim_t,
                };
                if libc::setrlimit(*resource, &limit) != 0 {
                    fail(4);
                }
            }
            for (from, to) in &self.moves {
                if libc::dup2(*from, *to) < 0 {
                    fail(5);
                }
            }
            for (first, last) in &self.cloexec {
                let r = libc::syscall(
                    libc::SYS_close_range,
                    *first,
                    *last,
                    libc::CLOSE_RANGE_CLOEXEC,
                );
                if r != 0 {
                    // Kernels before 5.11: walk the descriptor table instead.
                    let last = (*last).min(self.fd_limit.unsigned_abs());
                    let mut fd = *first;
                    while fd <= last {
                        libc::fcntl(fd as libc::c_int, libc::F_SETFD, libc::FD_CLOEXEC);
                        fd += 1;
                    }
                }
            }
            if let Some(dir) = &self.cwd
                && libc::chdir(dir.as_ptr()) != 0
            {
                fail(6);
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::execve(
                self.program.as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            );
            fail(7)
        }
    }
}

#[cfg(target_os = "linux")]
fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Writes `n` in decimal into `buf` (no allocation; async-signal-safe) and returns the length.
#[cfg(target_os = "linux")]
pub(crate) fn format_decimal(mut n: u32, buf: &mut [u8; 16]) -> usize {
    let mut digits = [0_u8; 10];
    let mut len = 0;
    loop {
        if let Some(slot) = digits.get_mut(len) {
            *slot = b'0' + (n % 10) as u8;
        }
        len += 1;
        n /= 10;
        if n == 0 || len >= digits.len() {
            break;
        }
    }
    for i in 0..len {
        if let (Some(out), Some(d)) = (buf.get_mut(i), digits.get(len - 1 - i)) {
            *out = *d;
        }
    }
    len
}

/// One process of the supervised tree, from `/proc/<pid>/stat`.
#[derive(Clone, Copy, Debug)]
#[cfg(target_os = "linux")]
struct ProcStat {
    pid: i32,
    ppid: i32,
    /// Start time in clock ticks since boot: with the pid, the process's identity.
    start: u64,
    /// utime + stime + cutime + cstime.
    cpu_ticks: u64,
    threads: u64,
}

#[cfg(target_os = "linux")]
impl ProcStat {
    /// Sends `signal` if `pid` is still the process that was scanned (pidfd + start time, so a
    /// recycled pid is never signalled). Returns whether it was sent.
    fn signal(&self, signal: i32) -> bool {
        // A child of the supervisor cannot be reaped (and its pid recycled) by anyone else, and
        // the supervisor does not reap between scanning and signalling.
        if self.ppid == sys::getpid() {
            return sys::kill(self.pid, signal).is_ok();
        }
        match sys::pidfd_open(self.pid) {
            Ok(fd) => {
                if read_stat(self.pid).is_some_and(|now| now.start == self.start) {
                    sys::pidfd_send_signal(&fd, signal).is_ok()
                } else {
                    false
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                read_stat(self.pid).is_some_and(|now| now.start == self.start)
                    && sys::kill(self.pid, signal).is_ok()
            }
            Err(_) => false,
        }
    }

    /// Resident memory not shared with files (`resident - shared` of `statm`), in bytes.
    fn private_bytes(&self) -> u64 {
        let Ok(text) = fs::read_to_string(format!("/proc/{}/statm", self.pid)) else {
            return 0;
        };
        let mut fields = text
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse::<u64>().ok());
        match (fields.next().flatten(), fields.next().flatten()) {
            (Some(resident), Some(shared)) => resident
                .saturating_sub(shared)
                .saturating_mul(sys::page_size()),
            _ => 0,
        }
    }
}

#[cfg(target_os = "linux")]
fn read_stat(pid: i32) -> Option<ProcStat> {
    let bytes = fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&bytes)
}

/// Parses `/proc/<pid>/stat`. The command name may contain spaces and parentheses, so fields
/// are counted from the last `)`.
#[cfg(target_os = "linux")]
fn parse_stat(bytes: &[u8]) -> Option<ProcStat> {
    let open = bytes.iter().position(|b| *b == b'(')?;
    let close = bytes.iter().rposition(|b| *b == b')')?;
    let pid = std::str::from_utf8(bytes.get(..open)?)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let rest = std::str::from_utf8(bytes.get(close.checked_add(1)?..)?).ok()?;
    // After the name: field 3 (state) is index 0.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |field: usize| -> Option<u64> { fields.get(field.checked_sub(3)?)?.parse().ok() };
    let ppid = i32::try_from(num(4)?).ok()?;
    let cpu_ticks = [14, 15, 16, 17]
        .into_iter()
        .map(|f| num(f).unwrap_or(0))
        .fold(0_u64, u64::saturating_add);
    Some(ProcStat {
        pid,
        ppid,
        start: num(22)?,
        cpu_ticks,
        threads: num(20).unwrap_or(1),
    })
}

/// Every descendant of the supervisor, found by walking parent links of all of `/proc`
/// (kernels without `CONFIG_PROC_CHILDREN` have no `children` files).
#[cfg(target_os = "linux")]
fn proc_tree() -> Vec<ProcStat> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut by_parent: BTreeMap<i32, Vec<ProcStat>> = BTreeMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            by_parent.entry(stat.ppid).or_default().push(stat);
        }
    }
    let mut tree = Vec::new();
    let mut queue = vec![sys::getpid()];
    while let Some(parent) = queue.pop() {
        if let Some(children) = by_parent.remove(&parent) {
            for child in children {
                queue.push(child.pid);
                tree.push(child);
            }
        }
    }
    tree
}

/// The supervisor as child subreaper for the duration of a run.
#[cfg(target_os = "linux")]
struct Subreaper {
    was: bool,
}

#[cfg(target_os = "linux")]
impl Subreaper {
    fn enable() -> io::Result<Self> {
        let was = sys::child_subreaper()?;
        sys::set_child_subreaper(true)?;
        Ok(Subreaper { was })
    }
}

#[cfg(target_os = "linux")]
impl Drop for Subreaper {
    fn drop(&mut self) {
        if !self.was {
            let _ = sys::set_child_subreaper(false);
        }
    }
}

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

/// Thin system-call wrappers, each with the reason it is sound. Shared with [`crate::init`].
#[cfg(target_os = "linux")]
pub(crate) mod sys {
    use std::ffi::CString;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::time::Duration;

    use crate::signals::check;

    /// Forks. In the child (returns 0) only async-signal-safe calls may follow when the
    /// process has other threads.
    #[allow(unsafe_code)]
    pub fn fork() -> io::Result<libc::pid_t> {
        // SAFETY: fork has no memory-safety preconditions; callers restrict the child to
        // async-signal-safe calls (or are single-threaded).
        check(unsafe { libc::fork() })
    }

    #[allow(unsafe_code)]
    pub fn getpid() -> libc::pid_t {
        // SAFETY: no preconditions.
        unsafe { libc::getpid() }
    }

    #[allow(unsafe_code)]
    pub fn getppid() -> libc::pid_t {
        // SAFETY: no preconditions.
        unsafe { libc::getppid() }
    }

    #[allow(unsafe_code)]
    pub fn geteuid() -> libc::uid_t {
        // SAFETY: no preconditions.
        unsafe { libc::geteuid() }
    }

    #[allow(unsafe_code)]
    fn pipe_with(flags: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
        check(unsafe { libc::pipe2(fds.as_mut_ptr(), flags) })?;
        let [read, write] = fds;
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        Ok(unsafe { (OwnedFd::from_raw_fd(read), OwnedFd::from_raw_fd(write)) })
    }

    pub fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
        pipe_with(libc::O_CLOEXEC)
    }

    #[allow(unsafe_code)]
    pub fn dup_cloexec_at_least(fd: RawFd, min: RawFd) -> io::Result<OwnedFd> {
        // SAFETY: F_DUPFD_CLOEXEC only reads `fd`; the result is a new descriptor we own.
        let new = check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) })?;
        // SAFETY: `new` was just returned by the kernel and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(new) })
    }

    /// The soft descriptor limit (for the close-on-exec fallback walk), capped at 2^20.
    #[allow(unsafe_code)]
    pub fn fd_limit() -> i32 {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is a valid rlimit for the kernel to fill.
        let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        if r != 0 {
            return 1 << 16;
        }
        i32::try_from(limit.rlim_cur.min(1 << 20)).unwrap_or(1 << 20)
    }

    #[allow(unsafe_code)]
    pub fn child_subreaper() -> io::Result<bool> {
        let mut value: libc::c_int = 0;
        // SAFETY: PR_GET_CHILD_SUBREAPER writes one int to the pointer.
        check(unsafe {
            libc::prctl(
                libc::PR_GET_CHILD_SUBREAPER,
                &mut value as *mut libc::c_int as libc::c_ulong,
                0,
                0,
                0,
            )
        })?;
        Ok(value != 0)
    }

    #[allow(unsafe_code)]
    pub fn set_child_subreaper(on: bool) -> io::Result<()> {
        // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag.
        check(unsafe {
            libc::prctl(
                libc::PR_SET_CHILD_SUBREAPER,
                libc::c_ulong::from(on),
                0,
                0,
                0,
            )
        })
        .map(drop)
    }

    /// Asks for `signal` when the parent thread dies.
    #[allow(unsafe_code)]
    pub fn set_parent_death_signal(signal: i32) -> io::Result<()> {
        // SAFETY: PR_SET_PDEATHSIG takes a signal number.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) })
            .map(drop)
    }

    #[allow(unsafe_code)]
    pub fn kill(pid: libc::pid_t, signal: i32) -> io::Result<()> {
        if pid <= 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: kill has no memory-safety preconditions; pid > 0 targets one process.
        check(unsafe { libc::kill(pid, signal) }).map(drop)
    }

    #[allow(unsafe_code)]
    pub fn killpg(pgid: libc::pid_t, signal: i32) -> io::Result<()> {
        if pgid <= 1 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: killpg has no memory-safety preconditions; pgid > 1 is one group.
        check(unsafe { libc::killpg(pgid, signal) }).map(drop)
    }

    #[allow(unsafe_code)]
    pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        // SAFETY: the kernel just returned this descriptor; nobody else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    #[allow(unsafe_code)]
    pub fn pidfd_send_signal(fd: &OwnedFd, signal: i32) -> io::Result<()> {
        // SAFETY: a valid pidfd, a signal number, a null siginfo (kill semantics), no flags.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// A child reaped by [`wait_any`].
    #[derive(Clone, Copy, Debug)]
    pub struct Reaped {
        pub pid: libc::pid_t,
        pub status: i32,
        /// User + system time of the child and of its reaped descendants, in clock ticks.
        pub cpu_ticks: u64,
    }

    /// `wait4(-1)`: a reaped child, or `None` when none has exited (`nohang`) or none exists.
    pub fn wait_any(nohang: bool) -> Option<Reaped> {
        wait4_any(if nohang { libc::WNOHANG } else { 0 })
    }

    /// Non-blocking `wait4(-1, WUNTRACED)`: a reaped child, or a stopped one (`WIFSTOPPED`
    /// status, not reaped), or `None`.
    pub fn wait_any_or_stopped() -> Option<Reaped> {
        wait4_any(libc::WNOHANG | libc::WUNTRACED)
    }

    #[allow(unsafe_code)]
    fn wait4_any(flags: libc::c_int) -> Option<Reaped> {
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid value of a plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: valid pointers to a status int and an rusage struct.
            let pid = unsafe { libc::wait4(-1, &mut status, flags | libc::__WALL, &mut usage) };
            if pid > 0 {
                let micros = |t: libc::timeval| {
                    u64::try_from(t.tv_sec)
                        .unwrap_or(0)
                        .saturating_mul(1_000_000)
                        .saturating_add(u64::try_from(t.tv_usec).unwrap_or(0))
                };
                let total = micros(usage.ru_utime).saturating_add(micros(usage.ru_stime));
                let hz = clock_ticks_per_second().max(1);
                return Some(Reaped {
                    pid,
                    status,
                    cpu_ticks: total.saturating_mul(hz) / 1_000_000,
                });
            }
            if pid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
    }

    /// Whether the calling process has no child at all (`wait4` would fail with `ECHILD`).
    #[allow(unsafe_code)]
    pub fn has_no_children() -> bool {
        // SAFETY: zeroed siginfo is a valid value of a plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is valid for the kernel to fill; WNOWAIT leaves any child reapable.
        let r = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL,
            )
        };
        r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
    }

    /// Blocking `waitpid` for one child (retrying on `EINTR`); its raw status.
    #[allow(unsafe_code)]
    pub fn wait_pid(pid: libc::pid_t) -> io::Result<i32> {
        let mut status = 0;
        loop {
            // SAFETY: a valid pointer to a status int.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
            if r >= 0 {
                return Ok(status);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    #[allow(unsafe_code)]
    pub fn clock_ticks_per_second() -> u64 {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        u64::try_from(hz).unwrap_or(100)
    }

    #[allow(unsafe_code)]
    pub fn page_size() -> u64 {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(size).unwrap_or(4096)
    }

    #[allow(unsafe_code)]
    pub fn is_executable_file(path: &Path) -> bool {
        let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: a valid NUL-terminated path.
        let executable = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
        executable && path.is_file()
    }

    /// Reads the child's pre-exec failure report: `None` on EOF (execve succeeded).
    #[allow(unsafe_code)]
    pub fn read_child_error(fd: RawFd) -> Option<(u32, i32)> {
        let mut buf = [0_u8; 8];
        let mut got = 0;
        while got < buf.len() {
            let rest = buf.get_mut(got..)?;
            // SAFETY: `rest` is a valid writable buffer of its length.
            let n = unsafe { libc::read(fd, rest.as_mut_ptr().cast(), rest.len()) };
            if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if n <= 0 {
                break;
            }
            got += n.unsigned_abs();
        }
        if got < buf.len() {
            return None;
        }
        let (a, b) = buf.split_at(4);
        Some((
            u32::from_ne_bytes(a.try_into().ok()?),
            i32::from_ne_bytes(b.try_into().ok()?),
        ))
    }

    /// Waits until `fd` is readable (or at end of file) or `timeout` passes; whether it is.
    #[allow(unsafe_code)]
    pub fn poll_readable(fd: RawFd, timeout: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // Round up so a sub-millisecond remainder does not spin.
        let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        r > 0 && pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// Consumes a pending "stopped" report of child `pid`; whether there was one.
    #[allow(unsafe_code)]
    pub fn take_stop_report(pid: libc::pid_t) -> bool {
        // SAFETY: zeroed siginfo is a valid value of a plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is valid for the kernel to fill; only stop reports are consumed.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid.unsigned_abs(),
                &mut info,
                libc::WSTOPPED | libc::WNOHANG | libc::__WALL,
            )
        };
        // SAFETY: si_pid is valid for the CLD_* reports waitid fills in.
        r == 0 && unsafe { info.si_pid() } == pid
    }

    /// Blocks every signal in the calling thread; returns the previous mask.
    #[allow(unsafe_code)]
    pub fn block_all_signals() -> io::Result<libc::sigset_t> {
        // SAFETY: zeroed sigset_t values are then initialised by sigfillset / the kernel.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let r = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            if r != 0 {
                return Err(io::Error::from_raw_os_error(r));
            }
            Ok(old)
        }
    }

    #[allow(unsafe_code)]
    pub fn restore_signal_mask(mask: &libc::sigset_t) {
        // SAFETY: `mask` came from pthread_sigmask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
    }

    /// Sets `signal`'s disposition to ignore or default.
    #[allow(unsafe_code)]
    pub fn set_disposition(signal: i32, ignore: bool) {
        let handler = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
        // SAFETY: SIG_IGN / SIG_DFL are valid dispositions.
        unsafe { libc::signal(signal, handler) };
    }

    /// A standard descriptor that is the supervisor's controlling terminal with the
    /// supervisor's process group in the foreground.
    #[allow(unsafe_code)]
    pub fn foreground_tty() -> Option<RawFd> {
        (0..=2).find(|fd| {
            // SAFETY: isatty/tcgetpgrp/getpgrp only read state.
            unsafe { libc::isatty(*fd) == 1 && libc::tcgetpgrp(*fd) == libc::getpgrp() }
        })
    }

    /// `_exit`: ends the process without running exit handlers or flushing stdio buffers a
    /// forked child shares with its parent.
    #[allow(unsafe_code)]
    pub fn exit_now(code: i32) -> ! {
        // SAFETY: _exit has no preconditions and does not return.
        unsafe { libc::_exit(code) }
    }

    #[allow(unsafe_code)]
    pub fn getuid() -> libc::uid_t {
        // SAFETY: no preconditions.
        unsafe { libc::getuid() }
    }

    #[allow(unsafe_code)]
    pub fn getgid() -> libc::gid_t {
        // SAFETY: no preconditions.
        unsafe { libc::getgid() }
    }

    #[allow(unsafe_code)]
    pub fn unshare(flags: libc::c_int) -> io::Result<()> {
        // SAFETY: unshare takes flags only.
        check(unsafe { libc::unshare(flags) }).map(drop)
    }

    /// Whether every write end of the pipe `read` is closed (the peer is gone).
    #[allow(unsafe_code)]
    pub fn peer_closed(read: &OwnedFd) -> bool {
        let mut pfd = libc::pollfd {
            fd: read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let r = unsafe { libc::poll(&mut pfd, 1, 0) };
        r > 0 && pfd.revents & libc::POLLHUP != 0
    }

    /// Re-raises `signal` on the calling process with its default action (core dumps off).
    #[allow(unsafe_code)]
    pub fn raise_default(signal: i32) {
        let _ = set_rlimit(libc::RLIMIT_CORE, 0, 0);
        set_disposition(signal, false);
        // SAFETY: plain sigset manipulation and signal syscalls on this process.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
    }

    /// Every catchable signal back to its default disposition, and an empty mask.
    #[allow(unsafe_code)]
    pub fn reset_all_signals() {
        for signal in 1..=64 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                // SAFETY: SIG_DFL is always a valid disposition; invalid numbers fail harmlessly.
                unsafe { libc::signal(signal, libc::SIG_DFL) };
            }
        }
        // SAFETY: an initialised empty set.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        }
    }

    /// Marks every descriptor from `first` up close-on-exec.
    #[allow(unsafe_code)]
    pub fn cloexec_from(first: u32) -> io::Result<()> {
        // SAFETY: close_range with CLOEXEC only changes descriptor flags.
        let r = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                first,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        if r == 0 {
            return Ok(());
        }
        for fd in first..fd_limit().unsigned_abs() {
            // SAFETY: F_SETFD on a possibly closed descriptor fails harmlessly with EBADF.
            unsafe { libc::fcntl(fd as libc::c_int, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        Ok(())
    }

    #[allow(unsafe_code)]
    pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
        // SAFETY: F_SETFD only changes descriptor flags; EBADF if `fd` is not open.
        check(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) }).map(drop)
    }

    /// Takes ownership of an inherited descriptor the caller checked is open and unowned.
    #[allow(unsafe_code)]
    pub fn own_fd(fd: RawFd) -> OwnedFd {
        // SAFETY: callers pass a descriptor they verified is open (set_cloexec succeeded) and
        // that nothing else in the process owns (an inherited number from the spec).
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    #[allow(unsafe_code)]
    pub fn memfd_create(name: &CString) -> io::Result<OwnedFd> {
        // SAFETY: a valid NUL-terminated name and flags.
        let fd = check(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
        // SAFETY: the kernel just returned this descriptor.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    #[allow(unsafe_code)]
    pub fn set_rlimit(resource: super::RlimitResource, soft: u64, hard: u64) -> io::Result<()> {
        let limit = libc::rlimit {
            rlim_cur: soft as libc::rlim_t,
            rlim_max: hard as libc::rlim_t,
        };
        // SAFETY: a valid rlimit struct.
        check(unsafe { libc::setrlimit(resource, &limit) }).map(drop)
    }

    #[allow(unsafe_code)]
    pub fn chdir(dir: &CString) -> io::Result<()> {
        // SAFETY: a valid NUL-terminated path.
        check(unsafe { libc::chdir(dir.as_ptr()) }).map(drop)
    }

    /// `execve`; returns only on failure, with the error.
    #[allow(unsafe_code)]
    pub fn execve(path: &CString, argv: &[CString], envp: &[CString]) -> io::Error {
        let argv = super::null_terminated(argv);
        let envp = super::null_terminated(envp);
        // SAFETY: NUL-terminated strings and NULL-terminated pointer arrays that outlive the
        // call (execve copies them into the new image).
        unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        io::Error::last_os_error()
    }

    /// Whether the supervisor's process group is the terminal's foreground.
    #[allow(unsafe_code)]
    pub fn owns_tty(fd: RawFd) -> bool {
        // SAFETY: tcgetpgrp/getpgrp only read state.
        unsafe { libc::tcgetpgrp(fd) == libc::getpgrp() }
    }

    /// Makes process group `pgid` the terminal's foreground (SIGTTOU blocked, as shells do).
    #[allow(unsafe_code)]
    pub fn give_tty(fd: RawFd, pgid: libc::pid_t) {
        // SAFETY: plain sigset manipulation; SIGTTOU is blocked in this thread around
        // tcsetpgrp, as shells do, so a background process group may move the foreground.
        unsafe {
            let mut ttou: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut ttou);
            libc::sigaddset(&mut ttou, libc::SIGTTOU);
            libc::pthread_sigmask(libc::SIG_BLOCK, &ttou, &mut old);
            libc::tcsetpgrp(fd, pgid);
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
    }

    /// Puts the supervisor's process group back in the terminal's foreground.
    pub fn reclaim_tty(fd: RawFd) {
        give_tty(fd, getpgrp());
    }

    #[allow(unsafe_code)]
    pub fn getpgrp() -> libc::pid_t {
        // SAFETY: no preconditions.
        unsafe { libc::getpgrp() }
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]
    use super::*;

    #[test]
    fn decimal_formatting_without_allocation() {
        let mut buf = [0_u8; 16];
        for n in [0_u32, 7, 10, 4_194_304, u32::MAX] {
            let len = format_decimal(n, &mut buf);
            assert_eq!(std::str::from_utf8(&buf[..len]).unwrap(), n.to_string());
        }
    }

    #[test]
    fn stat_parses_names_with_spaces_and_parentheses() {
        let line =
            b"4242 (a) b (c)) S 17 4242 4242 0 -1 4194304 100 0 0 0 5 7 11 13 20 0 3 0 999 1000 50";
        let s = parse_stat(line).unwrap();
        assert_eq!(
            (s.pid, s.ppid, s.cpu_ticks, s.threads, s.start),
            (4242, 17, 36, 3, 999)
        );
    }

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(ExitStatus::Exit(3).exit_code(), 3);
        assert_eq!(ExitStatus::Signal(9).exit_code(), 137);
    }

    #[test]
    fn outcome_serializes_for_the_audit_record() {
        let outcome = Outcome {
            status: ExitStatus::Signal(15),
            ended_by: EndReason::Signal(15),
            duration: Duration::from_millis(1500),
            processes_reaped: 3,
            processes_killed: 1,
            tree_empty: true,
            enforcement: vec![Enforcement {
                budget: Budget::Memory,
                by: Enforcer::Cgroup,
            }],
            cleanup_mechanisms: vec![Cleanup::PidNamespace, Cleanup::CgroupFreezer],
            cleanup: Duration::from_millis(4),
            usage: Usage::default(),
            notes: vec![],
        };
        let json = serde_json::to_string(&outcome).unwrap();
        assert_eq!(
            json,
            r#"{"status":{"signal":15},"endedBy":{"signal":15},"durationMs":1500,"processesReaped":3,"processesKilled":1,"treeEmpty":true,"enforcement":[{"budget":"memory","by":"cgroup"}],"cleanupMechanisms":["pid-namespace","cgroup-freezer"],"cleanupMs":4,"usage":{"cpuMs":null,"peakMemoryBytes":null,"peakProcesses":null},"notes":[]}"#
        );
        let back: Outcome = serde_json::from_str(&json).unwrap();
        assert_eq!(back, outcome);
        let exited: EndReason = serde_json::from_str(r#""command-exited""#).unwrap();
        assert_eq!(exited, EndReason::CommandExited);
    }

    #[test]
    fn path_search_finds_sh() {
        let found = find_in_path(OsStr::new("sh"), OsStr::new("/nonexistent:/bin:/usr/bin"));
        assert!(found.is_some_and(|p| p.ends_with("sh")));
        assert!(find_in_path(OsStr::new("no-such-program-xyz"), OsStr::new("/bin")).is_none());
    }
}
