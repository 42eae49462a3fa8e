//! The Linux supervisor: a child subreaper that enforces budgets with a per-run cgroup when it
//! can (root) and with rlimits plus polling `/proc` otherwise, forwards signals, and kills and
//! reaps the whole tree at the end (see the [module documentation](super)).

use std::collections::BTreeSet;
use std::ffi::{CString, OsString};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::child::ChildPlan;
use super::procfs::proc_tree;
use super::{
    AppliedBecause, Budget, Cleanup, EndReason, Ending, Enforcement, Enforcer, ExitStatus, Launch,
    LaunchKind, Marks, Outcome, RUN_LOCK, StartWatch, SuperviseError, SuperviseOptions, Supervised,
    Usage, supervise_until_exit,
};
use crate::cgroup::{self, Controller, RunCgroup};
use crate::path;
use crate::plan::Budgets;
use crate::signals::SignalPipe;
use crate::sys::{self, RlimitResource};

/// Launches `launch`, supervises it under `budgets`, and returns once every process of the
/// tree has been reaped. See the [module documentation](super).
pub fn run(
    mut launch: Launch,
    budgets: &Budgets,
    options: &SuperviseOptions,
) -> Result<Outcome, SuperviseError> {
    let _guard = RUN_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let program = resolve_program(&launch.program, &launch.env)?;
    let mut notes = Vec::new();

    // This run's cgroup: the child joins it before it execs.
    let cgroup = match (
        options.use_cgroups,
        cgroup_controllers(budgets, launch.kind),
    ) {
        (false, _) => {
            notes.push("cgroup not used: disabled by the caller".to_string());
            None
        }
        (true, None) => {
            notes.push(NO_CGROUP_NEEDED.to_string());
            None
        }
        (true, Some(controllers)) => match create_cgroup(budgets, launch.kind, &controllers) {
            Ok(cg) => Some(cg),
            Err(e) => {
                notes.push(format!("cgroup not used: {e}"));
                None
            }
        },
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
    // The child writes its pid to each before it execs (the cgroup's `procs`, and the launch's
    // record: written by the child, it exists however soon after the exec this process dies).
    let child = ChildPlan::new(
        &program,
        &launch,
        cgroup_files
            .iter()
            .map(AsRawFd::as_raw_fd)
            .chain(launch.pid_record.as_ref().map(AsRawFd::as_raw_fd))
            .collect(),
        plan.rlimits.clone(),
        tty,
    )?;

    let start = Instant::now();
    let pid = child.spawn(&program)?;
    let spawned = Instant::now();
    drop(cgroup_files);
    if let Some(mut record) = launch.pid_record.take() {
        // After the pid the child wrote (same file offset): its start time, which narrows what a
        // later sweep takes for this launch's. Best effort: the sweep has a bound without it.
        if let Some(stat) = super::procfs::read_stat(pid) {
            let _ = io::Write::write_all(&mut record, format!(" {}", stat.start).as_bytes());
        }
    }
    // Dead runs' cgroups (only root can have made them), whether this run made one or not:
    // swept while the launched program sets up (bwrap's setup takes milliseconds), not before
    // the launch, where it cost every run about 0.2 ms. Nothing of this run depends on it: its
    // own cgroup is named after this live process, which no sweep takes for a dead run's.
    if options.use_cgroups && sys::geteuid() == 0 {
        cgroup::sweep_dead_runs();
    }
    let start_watch = StartWatch::new(launch.started.take());
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
        start_watch,
        marks: Marks {
            spawned: Some(spawned),
            ..Marks::default()
        },
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
/// [`PassFd`](super::PassFd) that the launched program reads (bwrap's `--seccomp FD`, init's spec).
pub fn data_fd(name: &str, bytes: &[u8]) -> io::Result<OwnedFd> {
    use std::io::{Seek, Write};
    let name = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut file = fs::File::from(sys::memfd_create(&name)?);
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(OwnedFd::from(file))
}

/// Distinguishes the cgroups of successive runs of one supervisor process.
static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Why a launch in a PID namespace without a budget that needs a controller has no cgroup.
pub const NO_CGROUP_NEEDED: &str =
    "cgroup not used: no budget needs one, and the PID namespace removes the tree";

/// The controllers a run's cgroup needs, or `None` when it needs none.
///
/// Without a PID namespace the cgroup is part of the cleanup (the kill with the tree frozen,
/// the members listed whatever their ancestry): every available controller, as always. In a
/// PID namespace the kernel kills every process of the namespace when its init dies (and the
/// init dies with the supervisor), so the tree's removal does not depend on a cgroup: only
/// the controllers a budget uses are created — the memory limit, `pids.max`, the CPU time —
/// with the freezer, so that ending a budget's run still kills the tree frozen. With no such
/// budget there is no cgroup at all (creating and removing one per controller is a few
/// directory operations in each hierarchy, on the critical path of every run); the outcome
/// then has no cgroup peaks (`peakMemoryBytes`, `peakProcesses` are null) and the CPU time is
/// the reaped processes' own accounting.
pub(super) fn cgroup_controllers(
    budgets: &Budgets,
    kind: LaunchKind,
) -> Option<BTreeSet<Controller>> {
    if !kind.pid_namespace() {
        return Some(Controller::ALL.into_iter().collect());
    }
    let used: BTreeSet<Controller> = [
        (budgets.memory_bytes.is_some(), Controller::Memory),
        (budgets.max_processes.is_some(), Controller::Pids),
        (budgets.cpu_seconds.is_some(), Controller::Cpuacct),
    ]
    .into_iter()
    .filter_map(|(used, controller)| used.then_some(controller))
    .collect();
    // bwrap's child can be left blocked forever with PPID 1 when the supervisor is SIGKILLed
    // while bwrap sets the sandbox up (bubblewrap#633). It needs no cgroup to be found: the
    // next run's sweep finds it by the process group recorded in the run's lock
    // (`kill_group_leftovers`), as root and without. Joining a cgroup v1 hierarchy costs the
    // spawn about 6 ms here (the migration waits out an RCU grace period).
    if used.is_empty() {
        return None;
    }
    Some(used.into_iter().chain([Controller::Freezer]).collect())
}

fn create_cgroup(
    budgets: &Budgets,
    kind: LaunchKind,
    controllers: &BTreeSet<Controller>,
) -> Result<RunCgroup, cgroup::CgroupError> {
    let hierarchy = cgroup::detect()?.restricted_to(controllers);
    let name = format!(
        "run-{}-{}",
        std::process::id(),
        RUN_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let limits = cgroup::Limits {
        memory_bytes: budgets.memory_bytes,
        max_tasks: budgets
            .max_processes
            .map(|n| n.saturating_add(budgets.launcher_processes)),
    };
    let cg = RunCgroup::create(&hierarchy, &name, &limits)?;
    // Without the pids controller the tree cannot be listed reliably; without cpuacct a CPU
    // budget cannot be read. Use the cgroup anyway (freezer, memory) — the checks below pick
    // the poll path per budget. (In a PID namespace the cgroup is not what removes the tree.)
    if !kind.pid_namespace() && !cg.has(Controller::Pids) && !cg.has(Controller::Freezer) {
        return Err(cgroup::CgroupError::Unavailable(
            "neither the pids nor the freezer controller is available".into(),
        ));
    }
    Ok(cg)
}

/// Which mechanism enforces each budget, and the rlimits the child sets.
#[derive(Clone, Debug, Default)]
struct Enforcing {
    list: Vec<Enforcement>,
    rlimits: Vec<(RlimitResource, u64, u64)>,
    poll_memory: bool,
    poll_processes: bool,
    poll_cpu: bool,
}

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
        if let Some(max) = budgets.max_processes {
            if has(Controller::Pids) {
                e.add_raised(
                    Budget::Processes,
                    Enforcer::Cgroup,
                    max,
                    budgets.launcher_processes,
                );
            } else {
                e.add_raised(
                    Budget::Processes,
                    Enforcer::Poll,
                    max,
                    budgets.launcher_processes,
                );
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
        self.list.push(Enforcement::as_given(budget, by));
    }

    /// A process limit, which the launcher's own processes (as the plan counts them) raise,
    /// recorded as applied.
    fn add_raised(&mut self, budget: Budget, by: Enforcer, max: u64, launcher_processes: u64) {
        let helpers = launcher_processes;
        self.list.push(Enforcement {
            applied: (helpers > 0).then(|| max.saturating_add(helpers)),
            because: (helpers > 0).then_some(AppliedBecause::LauncherProcesses),
            ..Enforcement::as_given(budget, by)
        });
    }

    fn polls_tree(&self) -> bool {
        self.poll_memory || self.poll_processes || self.poll_cpu
    }
}

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
    start_watch: StartWatch,
    marks: Marks,
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

impl Supervised for Supervisor {
    fn ending(&mut self) -> &mut Ending {
        &mut self.ending
    }

    fn signals(&self) -> &SignalPipe {
        &self.signals
    }

    fn start_watch(&mut self) -> &mut StartWatch {
        &mut self.start_watch
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
            self.marks.exited = Some(Instant::now());
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
                && tasks > max.saturating_add(self.budgets.launcher_processes)
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
        let verified = Instant::now();
        let cleanup_time = verified.saturating_duration_since(exited_at);
        let duration = verified.saturating_duration_since(self.start);

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
            grace_expired: self.ending.escalated,
            tree_empty: remaining == 0,
            enforcement: self.enforcing.list.clone(),
            cleanup_mechanisms: cleanup,
            cleanup: cleanup_time,
            usage,
            notes: std::mem::take(&mut self.notes),
            marks: Marks {
                started: self.start_watch.at,
                verified: Some(verified),
                ..self.marks
            },
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
        // Usually nothing is left by now (a PID namespace dies with its init): verified without
        // killing anything or scanning `/proc`.
        self.reap_nonblocking();
        if self.verified_empty() {
            return 0;
        }
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
            if self.verified_empty() {
                return 0;
            }
            if Instant::now() >= deadline {
                let mut left: BTreeSet<i32> = proc_tree().iter().map(|p| p.pid).collect();
                if let Some(cg) = &self.cgroup {
                    left.extend(cg.pids());
                }
                return left.len().max(usize::from(!sys::has_no_children()));
            }
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Whether the tree is verified empty: the supervisor has no child left, not even a zombie,
    /// and the run's cgroup (if any) has no member.
    ///
    /// INVARIANT: no child means no descendant, so this needs no scan of `/proc` (which reads
    /// every process of the host). A process's parent stays its parent until the process is
    /// reaped; when a parent exits first, its children re-parent — during that exit, before
    /// the exiting process can be reaped — to the nearest child subreaper among their
    /// ancestors (the supervisor, at the latest) or to the init of a PID namespace below the
    /// supervisor, which outlives every other member of its namespace. So every descendant
    /// hangs from a child of the supervisor, alive or a zombie, and `waitid` reports `ECHILD`
    /// only when there is none. The cgroup is checked besides: a member that is not a
    /// descendant is a survivor too.
    fn verified_empty(&self) -> bool {
        sys::has_no_children() && self.cgroup.as_ref().is_none_or(|cg| cg.pids().is_empty())
    }
}

fn ticks_to_duration(ticks: u64) -> Duration {
    let hz = sys::clock_ticks_per_second().max(1);
    Duration::from_micros(ticks.saturating_mul(1_000_000) / hz)
}

/// Finds `program` like `execvp` ([`crate::path`]), in the `PATH` of the launch environment
/// (else the supervisor's, else the default).
fn resolve_program(
    program: &Path,
    env: &[(OsString, OsString)],
) -> Result<PathBuf, SuperviseError> {
    if program.as_os_str().is_empty() {
        return Err(SuperviseError::InvalidLaunch("empty program".into()));
    }
    path::find_program(
        program.as_os_str(),
        &path::Search::execvp(path::of_env(env)),
    )
    .map_err(|_| SuperviseError::ProgramNotFound(program.to_path_buf()))
}

/// The supervisor as child subreaper for the duration of a run.
struct Subreaper {
    was: bool,
}

impl Subreaper {
    fn enable() -> io::Result<Self> {
        let was = sys::child_subreaper()?;
        sys::set_child_subreaper(true)?;
        Ok(Subreaper { was })
    }
}

impl Drop for Subreaper {
    fn drop(&mut self) {
        if !self.was {
            let _ = sys::set_child_subreaper(false);
        }
    }
}
