//! Process-group supervision: the supervisor for backends without a PID namespace, cgroups or
//! a child subreaper — `macos-seatbelt` (`sandbox-exec` execs the command in place).
//!
//! [`run`] honours the same contract as [`crate::supervise::run`] (same [`Launch`],
//! [`Budgets`], [`SuperviseOptions`], [`Outcome`] and errors) with the mechanisms every Unix
//! has:
//! - the command starts as the leader of its own process group (and gets the terminal's
//!   foreground when the supervisor has it, as under a shell);
//! - SIGINT, SIGTERM and SIGHUP the supervisor receives are forwarded to the group; a budget
//!   expiry sends SIGTERM to the group, and SIGKILL after the grace period;
//! - budgets: wall clock by the supervisor's timer, CPU time by `RLIMIT_CPU` in each process,
//!   memory (resident, summed over the group) and process count by polling the group's members
//!   every `poll_interval`;
//! - cleanup: once the command has exited, SIGKILL to the group until no process is left in it
//!   (the *process-group kill loop*), then the group is verified empty;
//! - then, when the caller gives a [`Members`] finder, the *membership sweep*: SIGKILL to every
//!   process the finder names, until it names none. A process can leave the group (`setsid`,
//!   `setpgid`: a double-forked daemon) but not its Seatbelt sandbox, so on macOS the finder is
//!   `seatbelt::SandboxMembers` (macOS only), which recognises the run's processes by how their
//!   sandbox answers the run's canary paths.
//!
//! It is portable Unix code (`/proc` on Linux, libproc on macOS list a group's members), so the
//! tests exercise it on Linux although only macOS launches use it; the sweep loop is tested on
//! Linux with a finder that matches a command-line marker. The macOS finder itself
//! (`sandbox_check`, `proc_listallpids`) is type-checked for `aarch64-apple-darwin` but has
//! never run here.
//!
//! Known limits, recorded in every outcome's notes: without a finder, a process that leaves
//! the group is not tracked; with one, such a process is killed at cleanup but is not counted
//! by the memory and process budgets nor sent the group's SIGTERM first. Nothing kills anything
//! if the supervisor itself is SIGKILLed (no parent-death signal outside Linux).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::plan::Budgets;
use crate::signals::SignalPipe;
use crate::supervise::{
    Budget, Cleanup, EndReason, Ending, Enforcement, Enforcer, ExitStatus, Launch, LaunchKind,
    Marks, Outcome, StartWatch, SuperviseError, SuperviseOptions, Supervised, Usage,
    supervise_until_exit,
};
use crate::sys;

/// The notes every outcome of this supervisor carries without a [`Members`] finder: what it
/// cannot do.
pub const LIMITATION_NOTES: [&str; 2] = [
    "cleanup covers the command's process group: a process that left it (setsid, setpgid) is not tracked",
    NO_PARENT_DEATH_NOTE,
];

/// The notes every outcome carries when cleanup includes the membership sweep.
pub const SWEEP_LIMITATION_NOTES: [&str; 2] = [
    "a process that left the command's process group (setsid, setpgid) is killed by the membership sweep at cleanup, but budgets count and signal only the group",
    NO_PARENT_DEATH_NOTE,
];

const NO_PARENT_DEATH_NOTE: &str =
    "no parent-death signal: if the supervisor is killed, the command's processes are not";

/// Finds the run's processes wherever they are in the process tree (a process can leave the
/// group; on macOS it cannot leave its sandbox).
pub trait Members {
    /// The pids of the run's live processes (not zombies; never the supervisor itself). Must
    /// name only processes that certainly belong to the run: each one is SIGKILLed.
    fn find(&self) -> Vec<libc::pid_t>;
}

/// Launches `launch` as a new process group, supervises it under `budgets`, and returns once
/// the group is empty and, when `members` is given, once it finds no process left. See the
/// module documentation.
pub fn run(
    mut launch: Launch,
    budgets: &Budgets,
    options: &SuperviseOptions,
    members: Option<&dyn Members>,
) -> Result<Outcome, SuperviseError> {
    let _guard = crate::supervise::RUN_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if launch.kind != LaunchKind::Plain {
        return Err(SuperviseError::InvalidLaunch(format!(
            "the process-group supervisor launches plain commands, not {:?}",
            launch.kind
        )));
    }
    if !launch.fds.is_empty() {
        return Err(SuperviseError::InvalidLaunch(
            "the process-group supervisor passes no descriptors besides stdio".into(),
        ));
    }
    if launch.program.as_os_str().is_empty() {
        return Err(SuperviseError::InvalidLaunch("empty program".into()));
    }

    let mut enforcement = Vec::new();
    let mut add = |budget, by| enforcement.push(Enforcement::as_given(budget, by));
    if budgets.wall_clock.is_some() {
        add(Budget::WallClock, Enforcer::Timer);
    }
    if budgets.memory_bytes.is_some() {
        add(Budget::Memory, Enforcer::Poll);
    }
    if budgets.max_processes.is_some() {
        add(Budget::Processes, Enforcer::Poll);
    }
    let cpu_limit = budgets.cpu_seconds.map(|s| s.max(1));
    if cpu_limit.is_some() {
        add(Budget::Cpu, Enforcer::Rlimit);
    }

    let signals = SignalPipe::install().map_err(|source| SuperviseError::Setup {
        what: "signal handlers",
        source,
    })?;
    let tty = if options.foreground_tty {
        sys::foreground_tty()
    } else {
        None
    };

    let mut command = Command::new(&launch.program);
    command
        .args(&launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .process_group(0);
    if let Some(dir) = &launch.cwd {
        command.current_dir(dir);
    }
    // The CPU rlimit, no inherited descriptors, the terminal: set in the child before exec.
    sys::group_leader_pre_exec(&mut command, cpu_limit, sys::open_max_clamped(), tty);

    let start = Instant::now();
    let child = command.spawn().map_err(|source| {
        // The child may have taken the terminal before its exec failed.
        if let Some(fd) = tty {
            sys::give_tty(fd, sys::getpgrp());
        }
        if source.kind() == io::ErrorKind::NotFound {
            SuperviseError::ProgramNotFound(launch.program.clone())
        } else {
            SuperviseError::Spawn {
                program: launch.program.clone(),
                step: "execve",
                source,
            }
        }
    })?;
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| SuperviseError::InvalidLaunch(format!("pid {} out of range", child.id())))?;
    // Shells give the terminal from both sides, so neither order of parent and child loses it.
    if let Some(fd) = tty {
        sys::give_tty(fd, pid);
    }
    let spawned = Instant::now();
    // `child` is dropped without waiting: the loop below reaps the pid itself (with its rusage).
    drop(child);

    let mut sup = Supervisor {
        pid,
        budgets: budgets.clone(),
        options: options.clone(),
        signals,
        start,
        start_watch: StartWatch::new(launch.started.take()),
        exited_at: None,
        status: None,
        ending: Ending::new(options.grace),
        killed: std::collections::BTreeSet::new(),
        cpu: None,
        peak_memory: None,
        peak_processes: None,
        notes: if members.is_some() {
            &SWEEP_LIMITATION_NOTES
        } else {
            &LIMITATION_NOTES
        }
        .iter()
        .map(|n| (*n).to_owned())
        .collect(),
    };
    supervise_until_exit(&mut sup);
    let exited = Instant::now();
    let mut remaining = sup.kill_loop();
    let mut cleanup_mechanisms = vec![Cleanup::ProcessGroupKillLoop];
    if let Some(members) = members {
        cleanup_mechanisms.push(Cleanup::MembershipSweep);
        remaining = remaining.saturating_add(sup.sweep(members));
    }
    if let Some(fd) = tty {
        sys::give_tty(fd, sys::getpgrp());
    }
    let end = Instant::now();
    let raw = sup.status.unwrap_or(0);
    let status = ExitStatus::from_raw(raw);
    let ended_by = match (sup.ending.reason, status) {
        (Some(reason), _) => reason,
        (None, ExitStatus::Signal(libc::SIGXCPU)) if cpu_limit.is_some() => EndReason::Cpu,
        (None, _) => EndReason::CommandExited,
    };
    let outcome = Outcome {
        status,
        ended_by,
        duration: end.saturating_duration_since(sup.start),
        processes_reaped: 1,
        processes_killed: u64::try_from(sup.killed.len()).unwrap_or(u64::MAX),
        grace_expired: sup.ending.escalated,
        tree_empty: remaining == 0,
        enforcement,
        cleanup_mechanisms,
        cleanup: end.saturating_duration_since(exited),
        usage: Usage {
            cpu_ms: sup
                .cpu
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            peak_memory_bytes: sup.peak_memory,
            peak_processes: sup.peak_processes,
        },
        notes: sup.notes,
        marks: Marks {
            spawned: Some(spawned),
            started: sup.start_watch.at,
            exited: sup.exited_at,
            verified: Some(end),
        },
    };
    if remaining > 0 {
        return Err(SuperviseError::TreeNotEmpty {
            remaining,
            outcome: Box::new(outcome),
        });
    }
    Ok(outcome)
}

struct Supervisor {
    /// The command: leader of the group, whose id is the same number.
    pid: libc::pid_t,
    budgets: Budgets,
    options: SuperviseOptions,
    signals: SignalPipe,
    start: Instant,
    start_watch: StartWatch,
    /// When the command was reaped.
    exited_at: Option<Instant>,
    status: Option<i32>,
    ending: Ending,
    killed: std::collections::BTreeSet<libc::pid_t>,
    cpu: Option<Duration>,
    peak_memory: Option<u64>,
    peak_processes: Option<u64>,
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
        if self.status.is_some() {
            return;
        }
        if let Some((status, cpu)) = sys::wait_nohang(self.pid) {
            self.status = Some(status);
            self.exited_at = Some(Instant::now());
            self.cpu = Some(cpu);
        }
    }

    fn exited(&self) -> bool {
        self.status.is_some()
    }

    fn forward(&mut self, signal: i32) {
        let _ = sys::killpg(self.pid, signal);
    }

    fn check_budgets(&mut self, now: Instant) -> Option<EndReason> {
        self.exhausted_budget(now)
    }

    fn terminate(&mut self) {
        let _ = sys::killpg(self.pid, libc::SIGTERM);
    }

    fn kill_all(&mut self) {
        self.kill_group();
    }
}

impl Supervisor {
    fn polls(&self) -> bool {
        self.budgets.memory_bytes.is_some() || self.budgets.max_processes.is_some()
    }

    /// The budget that is exhausted, if any: the wall clock, or the group's polled usage.
    fn exhausted_budget(&mut self, now: Instant) -> Option<EndReason> {
        if let Some(limit) = self.budgets.wall_clock
            && now.saturating_duration_since(self.start) >= limit
        {
            return Some(EndReason::WallClock);
        }
        if !self.polls() {
            return None;
        }
        let members = group_members(self.pid);
        let count = u64::try_from(members.len()).unwrap_or(u64::MAX);
        let memory = members
            .iter()
            .map(|m| m.resident_bytes)
            .fold(0_u64, u64::saturating_add);
        self.peak_processes = Some(self.peak_processes.unwrap_or(0).max(count));
        self.peak_memory = Some(self.peak_memory.unwrap_or(0).max(memory));
        if self.budgets.max_processes.is_some_and(|max| count > max) {
            return Some(EndReason::Processes);
        }
        if self.budgets.memory_bytes.is_some_and(|max| memory > max) {
            return Some(EndReason::Memory);
        }
        None
    }

    /// SIGKILL to every member of the group (recorded), then to the group as a whole.
    fn kill_group(&mut self) {
        for member in group_members(self.pid) {
            if sys::kill(member.pid, libc::SIGKILL).is_ok() {
                self.killed.insert(member.pid);
            }
        }
        let _ = sys::killpg(self.pid, libc::SIGKILL);
    }

    /// After the command exited: SIGKILL the group until nothing is left in it, or until
    /// `cleanup_timeout`. Returns how many processes remain (0 = the group is empty).
    fn kill_loop(&mut self) -> usize {
        let deadline = Instant::now() + self.options.cleanup_timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            self.kill_group();
            self.reap();
            // ESRCH: no process (not even a zombie awaiting its new parent) is in the group.
            if group_is_empty(self.pid) {
                return 0;
            }
            if Instant::now() >= deadline {
                let left = group_members(self.pid).len();
                self.notes.push(format!(
                    "{left} processes of the group survived SIGKILL for {:?}",
                    self.options.cleanup_timeout
                ));
                return left.max(1);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// After the kill loop: SIGKILL whatever `members` finds (processes that left the group)
    /// until it finds nothing, or until `cleanup_timeout`. Records how many it killed in the
    /// notes; returns how many remain (0 = none found).
    fn sweep(&mut self, members: &dyn Members) -> usize {
        let deadline = Instant::now() + self.options.cleanup_timeout;
        let mut pause = Duration::from_millis(1);
        let mut swept = std::collections::BTreeSet::new();
        let left = loop {
            // A fresh listing each pass: a member may fork while its siblings are killed.
            let found = members.find();
            if found.is_empty() {
                break 0;
            }
            if Instant::now() >= deadline {
                self.notes.push(format!(
                    "{} processes found by the membership sweep survived SIGKILL for {:?}",
                    found.len(),
                    self.options.cleanup_timeout
                ));
                break found.len();
            }
            for pid in found {
                if sys::kill(pid, libc::SIGKILL).is_ok() {
                    self.killed.insert(pid);
                    swept.insert(pid);
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        };
        if !swept.is_empty() {
            self.notes.push(format!(
                "membership sweep killed {} processes outside the command's process group",
                swept.len()
            ));
        }
        left
    }
}

/// One member of a process group, as listed by the OS.
#[derive(Clone, Copy, Debug)]
struct Member {
    pid: libc::pid_t,
    resident_bytes: u64,
}

/// Whether no process (zombies included) is left in group `pgid`: signal 0 to the group finds
/// nobody (`ESRCH`).
fn group_is_empty(pgid: libc::pid_t) -> bool {
    sys::killpg(pgid, 0).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH))
}

/// The members of process group `pgid`, from `/proc` (field 5 of `stat` is the group).
#[cfg(target_os = "linux")]
fn group_members(pgid: libc::pid_t) -> Vec<Member> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let page = sys::page_size();
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The name may contain spaces and parentheses: count fields from the last `)`.
        let Some(close) = stat.iter().rposition(|b| *b == b')') else {
            continue;
        };
        let rest = String::from_utf8_lossy(stat.get(close.saturating_add(1)..).unwrap_or_default());
        // After the name: state (field 3), ppid (4), pgrp (5).
        let group = rest.split_whitespace().nth(2).and_then(|f| f.parse().ok());
        if group != Some(pgid) {
            continue;
        }
        let resident = std::fs::read_to_string(format!("/proc/{pid}/statm"))
            .ok()
            .and_then(|t| {
                t.split_whitespace()
                    .nth(1)
                    .and_then(|f| f.parse::<u64>().ok())
            })
            .unwrap_or(0);
        out.push(Member {
            pid,
            resident_bytes: resident.saturating_mul(page),
        });
    }
    out
}

/// The members of process group `pgid`, from libproc.
#[cfg(target_os = "macos")]
fn group_members(pgid: libc::pid_t) -> Vec<Member> {
    sys::macos::group_members(pgid)
        .into_iter()
        .map(|(pid, resident_bytes)| Member {
            pid,
            resident_bytes,
        })
        .collect()
}

/// Other Unixes: no listing; budgets that poll see an empty group and the kill loop relies on
/// `killpg` alone.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn group_members(_pgid: libc::pid_t) -> Vec<Member> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]
    use std::path::PathBuf;

    use super::*;

    fn sh(script: &str) -> Launch {
        Launch {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: Some(PathBuf::from("/")),
            fds: Vec::new(),
            kind: LaunchKind::Plain,
            started: None,
            pid_record: None,
            mask_namespace: None,
        }
    }

    fn options() -> SuperviseOptions {
        SuperviseOptions {
            use_cgroups: false,
            grace: Duration::from_millis(300),
            poll_interval: Duration::from_millis(20),
            foreground_tty: false,
            cleanup_timeout: Duration::from_secs(10),
        }
    }

    /// Whether a process whose command line contains `marker` is still alive (a zombie counts
    /// as gone).
    fn alive(marker: &str) -> bool {
        std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
            let dir = entry.path();
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&cmdline).contains(marker)
        })
    }

    #[test]
    fn exit_status_passes_through_and_the_group_is_emptied() {
        // A background child that would outlive the command: the kill loop removes it.
        let marker = "9871";
        let outcome = run(
            sh(&format!("sleep {marker} & exit 3")),
            &Budgets::default(),
            &options(),
            None,
        )
        .unwrap();
        assert_eq!(outcome.status, ExitStatus::Exit(3));
        assert_eq!(outcome.ended_by, EndReason::CommandExited);
        assert!(outcome.tree_empty);
        assert_eq!(
            outcome.cleanup_mechanisms,
            vec![Cleanup::ProcessGroupKillLoop]
        );
        assert!(outcome.processes_killed >= 1, "{outcome:?}");
        assert!(outcome.notes.iter().any(|n| n.contains("setsid")));
        assert!(!alive(&format!("sleep {marker}")));
    }

    /// A stand-in for the macOS sandbox finder: live processes whose argv is exactly `argv`
    /// (what the sandbox is to macOS, an unforgeable mark, a command line is to this test).
    struct ByArgv(Vec<&'static str>);

    impl Members for ByArgv {
        fn find(&self) -> Vec<libc::pid_t> {
            let wanted: Vec<u8> = self
                .0
                .iter()
                .flat_map(|a| [a.as_bytes(), b"\0"].concat())
                .collect();
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|entry| {
                    let pid = entry.file_name().to_str()?.parse::<libc::pid_t>().ok()?;
                    let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                    let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                    let zombie = stat
                        .rsplit_once(')')
                        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
                    (cmdline == wanted && !zombie).then_some(pid)
                })
                .collect()
        }
    }

    #[test]
    fn a_process_that_left_the_group_is_not_killed_without_a_finder() {
        // The gap the sweep closes: `setsid` takes the sleep out of the group.
        let daemon = ByArgv(vec!["sleep", "9875"]);
        let tmp = tempfile::tempdir().unwrap();
        let mut launch = sh("setsid sh -c 'touch left; exec sleep 9875' & \
             until [ -e left ]; do sleep 0.01; done");
        launch.cwd = Some(tmp.path().to_path_buf());
        let outcome = run(launch, &Budgets::default(), &options(), None).unwrap();
        assert!(outcome.tree_empty, "the group itself is empty");
        let left = daemon.find();
        for pid in &left {
            sys::kill(*pid, libc::SIGKILL).unwrap();
        }
        assert_eq!(left.len(), 1, "the daemon outlived the run");
        assert!(outcome.notes.iter().any(|n| n.contains("is not tracked")));
    }

    #[test]
    fn the_membership_sweep_kills_processes_that_left_the_group() {
        let finder = ByArgv(vec!["sleep", "9876"]);
        // Two daemons: one that left with setsid, one that made its own group with setpgid
        // (as a shell's job control does for a background job); and an ordinary child.
        // Each daemon marks that it has left before it becomes `sleep 9876`, and the command
        // exits only then, so neither is still in the group when the kill loop runs.
        let tmp = tempfile::tempdir().unwrap();
        let mut launch = sh("setsid sh -c 'touch a; exec sleep 9876' & \
             perl -e 'setpgrp(0, 0); open(F, \">b\"); close(F); exec \"sleep\", \"9876\"' & \
             sleep 9877 & \
             until [ -e a ] && [ -e b ]; do sleep 0.01; done; exit 4");
        launch.cwd = Some(tmp.path().to_path_buf());
        let outcome = run(launch, &Budgets::default(), &options(), Some(&finder)).unwrap();
        assert_eq!(outcome.status, ExitStatus::Exit(4));
        assert!(outcome.tree_empty, "{outcome:?}");
        assert!(finder.find().is_empty(), "a daemon survived");
        assert!(!alive("sleep 9877"));
        assert_eq!(
            outcome.cleanup_mechanisms,
            vec![Cleanup::ProcessGroupKillLoop, Cleanup::MembershipSweep]
        );
        assert!(
            outcome
                .notes
                .iter()
                .any(|n| n
                    == "membership sweep killed 2 processes outside the command's process group"),
            "{outcome:?}"
        );
        assert!(outcome.processes_killed >= 3, "{outcome:?}");
        assert!(!outcome.notes.iter().any(|n| n.contains("is not tracked")));
    }

    #[test]
    fn a_sweep_that_never_ends_is_bounded_and_reported() {
        // A zombie child of the test: SIGKILL "succeeds" and it stays, as a process the sweep
        // cannot remove would.
        let mut zombie = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = libc::pid_t::try_from(zombie.id()).unwrap();
        struct Always(libc::pid_t);
        impl Members for Always {
            fn find(&self) -> Vec<libc::pid_t> {
                vec![self.0]
            }
        }
        let mut opts = options();
        opts.cleanup_timeout = Duration::from_millis(200);
        let result = run(sh("exit 0"), &Budgets::default(), &opts, Some(&Always(pid)));
        zombie.wait().unwrap();
        let Err(SuperviseError::TreeNotEmpty { remaining, outcome }) = result else {
            panic!("expected TreeNotEmpty, got {result:?}");
        };
        assert_eq!(remaining, 1);
        assert!(!outcome.tree_empty);
        assert!(
            outcome
                .notes
                .iter()
                .any(|n| n.contains("found by the membership sweep survived SIGKILL")),
            "{outcome:?}"
        );
    }

    #[test]
    fn wall_clock_ends_the_whole_group() {
        let outcome = run(
            sh("sleep 9872 & sleep 9873"),
            &Budgets {
                wall_clock: Some(Duration::from_millis(200)),
                ..Budgets::default()
            },
            &options(),
            None,
        )
        .unwrap();
        assert_eq!(outcome.ended_by, EndReason::WallClock);
        assert_eq!(outcome.status, ExitStatus::Signal(libc::SIGTERM));
        assert!(outcome.tree_empty);
        assert!(!alive("sleep 9872"));
        assert!(
            outcome
                .enforcement
                .contains(&Enforcement::as_given(Budget::WallClock, Enforcer::Timer))
        );
    }

    #[test]
    fn process_budget_is_polled() {
        let outcome = run(
            sh("for i in 1 2 3 4 5 6; do sleep 9874 & done; wait"),
            &Budgets {
                max_processes: Some(3),
                wall_clock: Some(Duration::from_secs(60)),
                ..Budgets::default()
            },
            &options(),
            None,
        )
        .unwrap();
        assert_eq!(outcome.ended_by, EndReason::Processes);
        assert!(outcome.usage.peak_processes.unwrap() > 3);
        assert!(outcome.tree_empty);
        assert!(!alive("sleep 9874"));
    }

    #[test]
    fn cpu_budget_is_an_rlimit() {
        let outcome = run(
            sh("while :; do :; done"),
            &Budgets {
                cpu_seconds: Some(1),
                wall_clock: Some(Duration::from_secs(60)),
                ..Budgets::default()
            },
            &options(),
            None,
        )
        .unwrap();
        assert_eq!(outcome.ended_by, EndReason::Cpu);
        assert!(outcome.usage.cpu_ms.unwrap() >= 900, "{outcome:?}");
    }

    #[test]
    fn environment_and_directory_are_exactly_the_launch() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let mut launch = sh(&format!(
            "env > '{}'; pwd >> '{}'",
            out.display(),
            out.display()
        ));
        launch.env.push(("ONLY".into(), "this".into()));
        launch.cwd = Some(tmp.path().to_path_buf());
        run(launch, &Budgets::default(), &options(), None).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("ONLY=this"));
        assert!(!text.contains("CARGO"), "{text}");
        assert!(text.contains(&tmp.path().display().to_string()));
    }

    #[test]
    fn refusals() {
        let mut bwrap = sh("true");
        bwrap.kind = LaunchKind::Bwrap;
        assert!(matches!(
            run(bwrap, &Budgets::default(), &options(), None),
            Err(SuperviseError::InvalidLaunch(_))
        ));
        let mut missing = sh("true");
        missing.program = PathBuf::from("/nonexistent/palisade-program");
        assert!(matches!(
            run(missing, &Budgets::default(), &options(), None),
            Err(SuperviseError::ProgramNotFound(_))
        ));
    }
}
