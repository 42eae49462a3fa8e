//! Process-tree cleanup, budgets and signals of `shims::supervise` and `shims::init`, for real.
//!
//! Every cleanup case runs in four modes: the command launched directly (`Plain`) or through
//! the sandbox init (`Init`, the `direct-dedicated` path: PID namespace), each with and without
//! the per-run cgroup. Without cgroups (and when not root) the rlimit/poll path is used; the
//! suite passes as root and as an unprivileged user (`setpriv --reuid 65534 --regid 65534
//! --clear-groups <test binary>`), asserting the mechanism each situation must use.
//!
//! Leftover processes are recognised by a unique marker in their argv (`sleep 100000.<n>`);
//! every test kills its marked processes when it ends, even on failure. Tests run one at a time
//! (the supervisor reaps with `wait4(-1)` and is a subreaper: process-wide state), and timing
//! assertions are lower bounds or generous upper bounds (the machine is shared).

// Linux kernel mechanisms; the macOS type-check (`--target aarch64-apple-darwin`) skips them.
#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    unsafe_code,
    reason = "tests: failures should panic; fd setup for the descriptor test needs libc"
)]

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use palisade_shims::init::{self, Confinement, InitReport, InitSpec};
use palisade_shims::plan::Budgets;
use palisade_shims::supervise::{
    self, Budget, Cleanup, EndReason, Enforcer, ExitStatus, Launch, LaunchKind, Outcome, PassFd,
    SuperviseError, SuperviseOptions,
};

const HELPER: &str = env!("CARGO_BIN_EXE_palisade-shims-helper");
const MIB: u64 = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Harness.

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Plain,
    Init,
}

#[derive(Clone, Copy, Debug)]
struct Mode {
    via: Via,
    cgroups: bool,
}

const MODES: [Mode; 4] = [
    Mode {
        via: Via::Plain,
        cgroups: true,
    },
    Mode {
        via: Via::Plain,
        cgroups: false,
    },
    Mode {
        via: Via::Init,
        cgroups: true,
    },
    Mode {
        via: Via::Init,
        cgroups: false,
    },
];

impl Mode {
    /// Whether this mode really gets a cgroup (requested, and root) when a budget needs one.
    fn cgroup(self) -> bool {
        self.cgroups && is_root()
    }

    /// Whether a run under `budgets` gets a cgroup: through the init (a PID namespace) only
    /// when a budget needs a controller; launched directly, always.
    fn cgroup_for(self, budgets: &Budgets) -> bool {
        let needed = budgets.memory_bytes.is_some()
            || budgets.max_processes.is_some()
            || budgets.cpu_seconds.is_some();
        self.cgroup() && (self.via == Via::Plain || needed)
    }

    fn options(self, grace: Duration) -> SuperviseOptions {
        SuperviseOptions {
            use_cgroups: self.cgroups,
            grace,
            poll_interval: Duration::from_millis(50),
            foreground_tty: false,
            cleanup_timeout: Duration::from_secs(20),
        }
    }

    fn helper_flags(self) -> Vec<&'static str> {
        let mut flags = Vec::new();
        if self.via == Via::Init {
            flags.push("--init");
        }
        if !self.cgroups {
            flags.push("--no-cgroups");
        }
        flags
    }
}

/// A unique `sleep` argument that marks the test's processes.
/// Writes `dir/go` when dropped: the scripts that wait for it then end even when the test
/// panics first, so a failed assertion fails the test instead of leaving its run (and the
/// supervisor lock it holds) waiting forever.
struct GoOnDrop(PathBuf);

impl Drop for GoOnDrop {
    fn drop(&mut self) {
        let _ = fs::write(self.0.join("go"), "");
        if thread::panicking() {
            // The test's temp dir goes right after this guard, and with it the `go` the
            // script looks for in it: give the script time to see it first.
            thread::sleep(Duration::from_secs(2));
        }
    }
}

struct Marker {
    value: String,
}

static MARKERS: AtomicU64 = AtomicU64::new(0);

impl Marker {
    fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Marker {
            value: format!(
                "100000.{}{:03}{:09}",
                std::process::id(),
                MARKERS.fetch_add(1, Ordering::Relaxed),
                nanos
            ),
        }
    }

    /// `sleep <marker>`.
    fn sleep(&self) -> String {
        format!("sleep {}", self.value)
    }

    /// Live (non-zombie) processes whose argv contains the marker.
    fn pids(&self) -> Vec<i32> {
        let mut out = Vec::new();
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            if cmdline
                .split(|b| *b == 0)
                .any(|arg| arg == self.value.as_bytes())
                && state(pid).is_some_and(|s| s != 'Z')
            {
                out.push(pid);
            }
        }
        out
    }

    fn wait_for(&self, count: usize) -> Vec<i32> {
        let found = wait_until(Duration::from_secs(30), || self.pids().len() >= count);
        let pids = self.pids();
        assert!(found, "expected {count} marked processes, found {pids:?}");
        pids
    }

    fn wait_gone(&self, within: Duration) -> bool {
        wait_until(within, || self.pids().is_empty())
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        for pid in self.pids() {
            // SAFETY: kill has no memory-safety preconditions; the pid carries our marker.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Field `n` (1-based, as in proc(5)) of `/proc/<pid>/stat`.
fn stat_field(pid: i32, n: usize) -> Option<i64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(n - 3)?
        .parse()
        .ok()
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn env() -> Vec<(OsString, OsString)> {
    vec![(
        OsString::from("PATH"),
        OsString::from("/usr/local/bin:/usr/bin:/bin"),
    )]
}

/// `program args` in `cwd`, launched directly: no descriptors passed, no masks.
fn plain_launch(program: &str, args: Vec<OsString>, cwd: PathBuf) -> Launch {
    Launch {
        program: PathBuf::from(program),
        args,
        env: env(),
        cwd: Some(cwd),
        fds: Vec::new(),
        kind: LaunchKind::Plain,
        started: None,
        pid_record: None,
        mask_namespace: None,
    }
}

/// `sh -c script` in `dir`, directly or through the sandbox init.
fn launch(mode: Mode, script: &str, dir: &Path) -> (Launch, Option<InitReport>) {
    match mode.via {
        Via::Plain => (
            plain_launch("sh", vec!["-c".into(), script.into()], dir.to_path_buf()),
            None,
        ),
        Via::Init => {
            let spec = init_spec(vec!["sh".into(), "-c".into(), script.into()], dir);
            let (launch, report) = init::launch(&spec, Path::new(HELPER)).unwrap();
            (launch, Some(report))
        }
    }
}

fn init_spec(command: Vec<OsString>, dir: &Path) -> InitSpec {
    InitSpec {
        command,
        env: env(),
        cwd: dir.to_path_buf(),
        rlimits: Vec::new(),
        confinement: Confinement::None,
        report_fd: None,
        observe_fd: None,
        started_fd: None,
        masks: None,
        masks_fd: None,
        build: None,
    }
}

/// Runs to completion and requires a verified-empty tree.
fn run(mode: Mode, script: &str, dir: &Path, budgets: &Budgets, grace: Duration) -> Outcome {
    let (launch, report) = launch(mode, script, dir);
    let outcome = supervise::run(launch, budgets, &mode.options(grace))
        .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    check_common(mode, budgets, &outcome);
    if let Some(report) = report {
        let report = report.collect();
        assert_eq!(
            report.error, None,
            "{mode:?}: init reported a setup failure"
        );
    }
    outcome
}

/// Runs on a thread, so the test can watch the tree while the run is in progress.
fn spawn_run(
    mode: Mode,
    script: String,
    dir: PathBuf,
    budgets: Budgets,
    grace: Duration,
) -> thread::JoinHandle<Outcome> {
    thread::spawn(move || run(mode, &script, &dir, &budgets, grace))
}

fn check_common(mode: Mode, budgets: &Budgets, outcome: &Outcome) {
    assert!(outcome.tree_empty, "{mode:?}: tree not empty: {outcome:?}");
    let cleanup = &outcome.cleanup_mechanisms;
    assert_eq!(
        cleanup.contains(&Cleanup::PidNamespace),
        mode.via == Via::Init,
        "{mode:?}: {cleanup:?}"
    );
    assert_eq!(
        cleanup.contains(&Cleanup::CgroupFreezer),
        mode.cgroup_for(budgets),
        "{mode:?}: {cleanup:?} {:?}",
        outcome.notes
    );
    if mode.cgroup() && !mode.cgroup_for(budgets) {
        assert!(
            outcome
                .notes
                .contains(&supervise::NO_CGROUP_NEEDED.to_owned()),
            "{mode:?}: {:?}",
            outcome.notes
        );
    }
    assert!(cleanup.contains(&Cleanup::SubreaperKillLoop));
    if mode.cgroups && !is_root() {
        assert!(
            outcome
                .notes
                .iter()
                .any(|n| n.starts_with("cgroup not used")),
            "{mode:?}: the fallback must be recorded: {:?}",
            outcome.notes
        );
    }
}

/// The mechanisms that must enforce `budget` in `mode`.
fn expected_enforcers(mode: Mode, budget: Budget) -> Vec<Enforcer> {
    match (budget, mode.cgroup()) {
        (Budget::WallClock, _) => vec![Enforcer::Timer],
        (_, true) => vec![Enforcer::Cgroup],
        (Budget::Memory | Budget::Cpu, false) => vec![Enforcer::Rlimit, Enforcer::Poll],
        (Budget::Processes, false) => vec![Enforcer::Poll],
    }
}

fn enforcers(outcome: &Outcome, budget: Budget) -> Vec<Enforcer> {
    outcome
        .enforcement
        .iter()
        .filter(|e| e.budget == budget)
        .map(|e| e.by)
        .collect()
}

fn tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    // The unprivileged run and the sandbox's user namespace must be able to write here.
    fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    dir
}

/// Spawns `palisade-shims-helper supervise` (a supervisor in its own process).
fn helper(flags: &[&str], script: &str, dir: &Path) -> std::process::Child {
    Command::new(HELPER)
        .arg("supervise")
        .args(flags)
        .args(["--", "sh", "-c", script])
        .current_dir(dir)
        .env_clear()
        .envs(env())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Kills a helper on drop (test failure).
struct HelperGuard(std::process::Child);

impl Drop for HelperGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn helper_outcome(child: &mut std::process::Child) -> (Outcome, i32) {
    let status = child.wait().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let outcome: Outcome = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("helper printed no outcome ({e}): {out:?}"));
    (outcome, status.code().unwrap_or(-1))
}

// ---------------------------------------------------------------------------------------------
// Process-tree cleanup.

#[test]
fn double_forked_setsid_daemon_is_gone_after_the_run() {
    let _serial = serial();
    for mode in MODES {
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!(
            "(setsid {} &) & while [ ! -e go ]; do sleep 0.02; done",
            marker.sleep()
        );
        let run = spawn_run(
            mode,
            script,
            dir.path().into(),
            Budgets::default(),
            Duration::from_secs(1),
        );
        let _go = GoOnDrop(dir.path().to_path_buf());
        marker.wait_for(1);
        // Proof that the escape happened: the daemon leads its own session and is not a
        // descendant of the command (its parent is the subreaper, or the namespace's init).
        // `setsid`'s own argv carries the marker before it has called setsid(2): wait for that.
        let leads_its_session = |pid: i32| stat_field(pid, 6) == Some(i64::from(pid));
        let mut daemon = None;
        wait_until(Duration::from_secs(30), || {
            daemon = marker
                .pids()
                .into_iter()
                .find(|pid| leads_its_session(*pid));
            daemon.is_some()
        });
        assert!(
            daemon.is_some(),
            "{mode:?}: no session leader among {:?}",
            marker.pids()
        );
        fs::write(dir.path().join("go"), "").unwrap();
        let outcome = run.join().unwrap();
        assert_eq!(outcome.status, ExitStatus::Exit(0), "{mode:?}");
        assert_eq!(outcome.ended_by, EndReason::CommandExited, "{mode:?}");
        assert!(
            marker.pids().is_empty(),
            "{mode:?}: daemon survived: {:?}",
            marker.pids()
        );
    }
}

#[test]
fn setpgid_escape_is_gone_after_the_run() {
    let _serial = serial();
    for mode in MODES {
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!(
            "perl -e 'setpgrp(0, 0); exec \"sleep\", \"{}\"' & while [ ! -e go ]; do sleep 0.02; done",
            marker.value
        );
        let run = spawn_run(
            mode,
            script,
            dir.path().into(),
            Budgets::default(),
            Duration::from_secs(1),
        );
        let _go = GoOnDrop(dir.path().to_path_buf());
        let escaped = marker.wait_for(1)[0];
        // Proof: the process left the command's process group for one of its own.
        assert_eq!(
            stat_field(escaped, 5),
            Some(i64::from(escaped)),
            "{mode:?}: no own group"
        );
        fs::write(dir.path().join("go"), "").unwrap();
        let outcome = run.join().unwrap();
        assert_eq!(outcome.status, ExitStatus::Exit(0), "{mode:?}");
        assert!(marker.pids().is_empty(), "{mode:?}: escapee survived");
    }
}

#[test]
fn process_ignoring_sigterm_is_killed_after_the_grace_period() {
    let _serial = serial();
    let wall = Duration::from_millis(800);
    let grace = Duration::from_millis(700);
    for mode in MODES {
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!("trap '' TERM; {} & wait; wait; wait", marker.sleep());
        let budgets = Budgets {
            wall_clock: Some(wall),
            ..Budgets::default()
        };
        let run = spawn_run(mode, script, dir.path().into(), budgets, grace);
        let sleeper = marker.wait_for(1)[0];
        // Proof: the sleeper ignores SIGTERM (bit 15 of SigIgn).
        let status = fs::read_to_string(format!("/proc/{sleeper}/status")).unwrap();
        let ignored = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
            .unwrap();
        assert_ne!(
            ignored & (1 << (libc::SIGTERM - 1)),
            0,
            "{mode:?}: TERM not ignored"
        );
        let outcome = run.join().unwrap();
        assert_eq!(outcome.ended_by, EndReason::WallClock, "{mode:?}");
        assert_eq!(
            outcome.status,
            ExitStatus::Signal(libc::SIGKILL),
            "{mode:?}: {outcome:?}"
        );
        assert!(
            outcome.duration >= wall + grace,
            "{mode:?}: killed before the grace ended"
        );
        assert!(outcome.processes_killed >= 1, "{mode:?}");
        assert!(
            marker.pids().is_empty(),
            "{mode:?}: TERM-ignoring sleeper survived"
        );
    }
}

#[test]
fn child_still_running_when_the_command_exits_is_killed() {
    let _serial = serial();
    for mode in MODES {
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!(
            "{} & while [ ! -e go ]; do sleep 0.02; done; exit 3",
            marker.sleep()
        );
        let run = spawn_run(
            mode,
            script,
            dir.path().into(),
            Budgets::default(),
            Duration::from_secs(1),
        );
        let _go = GoOnDrop(dir.path().to_path_buf());
        marker.wait_for(1);
        fs::write(dir.path().join("go"), "").unwrap();
        let outcome = run.join().unwrap();
        assert_eq!(outcome.status, ExitStatus::Exit(3), "{mode:?}");
        assert_eq!(outcome.ended_by, EndReason::CommandExited, "{mode:?}");
        assert!(marker.pids().is_empty(), "{mode:?}: child survived");
        if mode.via == Via::Plain {
            // The supervisor reaped the command and the orphaned sleeper itself.
            assert!(outcome.processes_reaped >= 2, "{mode:?}: {outcome:?}");
        }
    }
}

#[test]
fn sigkill_of_the_supervisor_takes_the_whole_tree_down() {
    let _serial = serial();
    for cgroups in [true, false] {
        let mode = Mode {
            via: Via::Init,
            cgroups,
        };
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!("(setsid {} &) & {} & wait", marker.sleep(), marker.sleep());
        let mut guard = HelperGuard(helper(&mode.helper_flags(), &script, dir.path()));
        marker.wait_for(2);
        guard.0.kill().unwrap();
        guard.0.wait().unwrap();
        assert!(
            marker.wait_gone(Duration::from_secs(20)),
            "{mode:?}: processes survived the supervisor's SIGKILL: {:?}",
            marker.pids()
        );
        if mode.cgroup() {
            // The dead supervisor's cgroup is swept by the next run.
            let stale =
                Path::new("/sys/fs/cgroup/pids/palisade").join(format!("run-{}-0", guard.0.id()));
            // The sweep removes *empty* leftovers; the dead run's last tasks may still be
            // exiting after the markers are gone (seen once in CI under load), so wait for the
            // kernel to empty it first (a precondition, not a timing assertion).
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while std::fs::read_to_string(stale.join("cgroup.procs"))
                .is_ok_and(|procs| !procs.trim().is_empty())
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            run(
                mode,
                "true",
                dir.path(),
                &Budgets::default(),
                Duration::from_secs(1),
            );
            assert!(
                !stale.exists(),
                "stale cgroup `{}` was not swept",
                stale.display()
            );
        }
    }
}

/// A dead supervisor's cgroup is swept by the next run even when that run needs no cgroup of
/// its own (a launch in a PID namespace without a budget): otherwise a host running only such
/// launches would keep every killed run's cgroup, and whatever is left in it, for good.
#[test]
fn a_run_without_a_cgroup_still_sweeps_dead_runs_cgroups() {
    let _serial = serial();
    if !is_root() {
        return;
    }
    // A pid that no process has: a child's, once reaped.
    let mut child = Command::new("true").spawn().unwrap();
    child.wait().unwrap();
    let dead = child.id();
    let stale = Path::new("/sys/fs/cgroup/pids/palisade").join(format!("run-{dead}-0"));
    fs::create_dir_all(&stale).unwrap();
    let mode = Mode {
        via: Via::Init,
        cgroups: true,
    };
    let dir = tempdir();
    let outcome = run(
        mode,
        "true",
        dir.path(),
        &Budgets::default(),
        Duration::from_secs(1),
    );
    assert!(
        outcome
            .notes
            .iter()
            .any(|n| n == supervise::NO_CGROUP_NEEDED),
        "{outcome:?}"
    );
    let swept = !stale.exists();
    let _ = fs::remove_dir(&stale);
    assert!(swept, "stale cgroup `{}` was not swept", stale.display());
}

/// The control for the test above: launched directly (no PID namespace), a setsid daemon
/// outlives a SIGKILLed supervisor — which is why `direct-dedicated` launches through init, and
/// proves the marker scan sees survivors.
#[test]
fn without_the_pid_namespace_a_killed_supervisor_leaves_the_daemon_behind() {
    let _serial = serial();
    let mode = Mode {
        via: Via::Plain,
        cgroups: false,
    };
    let dir = tempdir();
    let marker = Marker::new();
    let script = format!("(setsid {} &) & {} & wait", marker.sleep(), marker.sleep());
    let mut guard = HelperGuard(helper(&mode.helper_flags(), &script, dir.path()));
    marker.wait_for(2);
    guard.0.kill().unwrap();
    guard.0.wait().unwrap();
    thread::sleep(Duration::from_millis(500));
    assert!(!marker.pids().is_empty(), "the control lost its daemon");
}

/// The `linux-bwrap` process shape (bwrap's monitor outside, its PID 1 and the command inside a
/// new session): leftovers are reaped, a forwarded SIGTERM reaches the command without taking
/// bwrap down first, and a SIGKILLed supervisor takes the sandbox with it.
#[test]
fn bwrap_launches_are_reaped_and_signalled() {
    let _serial = serial();
    assert!(
        Path::new("/usr/bin/bwrap").exists(),
        "bubblewrap is not installed (apt-get install bubblewrap)"
    );
    for cgroups in [true, false] {
        let mut flags = vec!["--bwrap", "--grace-ms", "10000"];
        if cgroups {
            // A budget that needs a controller: bwrap's PID namespace alone gets no cgroup.
            flags.extend(["--procs", "10000"]);
        } else {
            flags.push("--no-cgroups");
        }
        // A setsid daemon inside the sandbox is gone after the run.
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!(
            "(setsid {} &) & while [ ! -e go ]; do sleep 0.02; done",
            marker.sleep()
        );
        let mut guard = HelperGuard(helper(&flags, &script, dir.path()));
        marker.wait_for(1);
        fs::write(dir.path().join("go"), "").unwrap();
        let (outcome, code) = helper_outcome(&mut guard.0);
        assert_eq!(
            (code, outcome.ended_by),
            (0, EndReason::CommandExited),
            "{outcome:?}"
        );
        assert!(
            outcome.tree_empty && marker.pids().is_empty(),
            "cgroups {cgroups}: {outcome:?}"
        );

        // SIGTERM to the supervisor reaches the command's trap inside the sandbox.
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!(
            "trap 'echo term > got-term; exit 7' TERM; {} & echo > ready; wait",
            marker.sleep()
        );
        let mut guard = HelperGuard(helper(&flags, &script, dir.path()));
        marker.wait_for(1);
        assert!(wait_until(Duration::from_secs(10), || dir
            .path()
            .join("ready")
            .exists()));
        // SAFETY: kill has no memory-safety preconditions; the pid is our helper.
        unsafe { libc::kill(guard.0.id() as i32, libc::SIGTERM) };
        let (outcome, code) = helper_outcome(&mut guard.0);
        assert!(
            dir.path().join("got-term").exists(),
            "cgroups {cgroups}: trap did not run"
        );
        assert_eq!(code, 7, "cgroups {cgroups}: {outcome:?}");
        assert_eq!(outcome.ended_by, EndReason::Signal(libc::SIGTERM));
        assert!(outcome.tree_empty && marker.pids().is_empty());

        // SIGKILL of the supervisor: bwrap dies (parent-death signal) and takes the namespace.
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!("(setsid {} &) & {} & wait", marker.sleep(), marker.sleep());
        let mut guard = HelperGuard(helper(&flags, &script, dir.path()));
        marker.wait_for(2);
        guard.0.kill().unwrap();
        guard.0.wait().unwrap();
        assert!(
            marker.wait_gone(Duration::from_secs(20)),
            "cgroups {cgroups}: bwrap tree survived the supervisor: {:?}",
            marker.pids()
        );
        if cgroups && is_root() {
            // The next run sweeps the dead supervisor's cgroup once it is empty: bwrap and its
            // PID 1 may still be exiting when the command's processes are gone.
            let stale =
                Path::new("/sys/fs/cgroup/pids/palisade").join(format!("run-{}-0", guard.0.id()));
            assert!(
                wait_until(Duration::from_secs(20), || fs::read_to_string(
                    stale.join("cgroup.procs")
                )
                .unwrap_or_default()
                .trim()
                .is_empty()),
                "the dead supervisor's cgroup did not empty"
            );
            let mode = Mode {
                via: Via::Plain,
                cgroups: true,
            };
            run(
                mode,
                "true",
                dir.path(),
                &Budgets::default(),
                Duration::from_secs(1),
            );
            assert!(
                !stale.exists(),
                "stale cgroup `{}` was not swept",
                stale.display()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Budgets.

#[test]
fn wall_clock_budget_ends_the_run() {
    let _serial = serial();
    for mode in MODES {
        let dir = tempdir();
        let marker = Marker::new();
        let budgets = Budgets {
            wall_clock: Some(Duration::from_secs(1)),
            ..Budgets::default()
        };
        let outcome = run(
            mode,
            &marker.sleep(),
            dir.path(),
            &budgets,
            Duration::from_secs(2),
        );
        assert_eq!(outcome.ended_by, EndReason::WallClock, "{mode:?}");
        assert_eq!(
            outcome.status,
            ExitStatus::Signal(libc::SIGTERM),
            "{mode:?}"
        );
        assert_eq!(outcome.exit_code(), 128 + libc::SIGTERM);
        assert!(outcome.duration >= Duration::from_secs(1), "{mode:?}");
        assert!(outcome.duration < Duration::from_secs(30), "{mode:?}");
        assert_eq!(enforcers(&outcome, Budget::WallClock), [Enforcer::Timer]);
        assert!(marker.pids().is_empty());
    }
}

#[test]
fn cpu_budget_ends_a_busy_loop() {
    let _serial = serial();
    for mode in MODES {
        let dir = tempdir();
        let budgets = Budgets {
            cpu_seconds: Some(1),
            wall_clock: Some(Duration::from_secs(120)),
            ..Budgets::default()
        };
        let outcome = run(
            mode,
            "while :; do :; done",
            dir.path(),
            &budgets,
            Duration::from_secs(1),
        );
        assert_eq!(outcome.ended_by, EndReason::Cpu, "{mode:?}: {outcome:?}");
        assert_ne!(outcome.status, ExitStatus::Exit(0), "{mode:?}");
        // RLIMIT_CPU judges by tick-sampled time, rusage reports scheduler runtime; on a loaded
        // virtual machine they differ by a few hundred milliseconds.
        assert!(
            outcome.usage.cpu_ms.unwrap() >= 500,
            "{mode:?}: {:?}",
            outcome.usage
        );
        assert_eq!(
            enforcers(&outcome, Budget::Cpu),
            expected_enforcers(mode, Budget::Cpu),
            "{mode:?}"
        );
    }
}

#[test]
fn process_budget_ends_a_fork_storm() {
    let _serial = serial();
    for mode in MODES {
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!(
            "i=0; while [ $i -lt 200 ]; do {} & i=$((i+1)); done; wait",
            marker.sleep()
        );
        let budgets = Budgets {
            max_processes: Some(20),
            wall_clock: Some(Duration::from_secs(120)),
            ..Budgets::default()
        };
        let outcome = run(mode, &script, dir.path(), &budgets, Duration::from_secs(1));
        assert_eq!(
            outcome.ended_by,
            EndReason::Processes,
            "{mode:?}: {outcome:?}"
        );
        assert_eq!(
            enforcers(&outcome, Budget::Processes),
            expected_enforcers(mode, Budget::Processes),
            "{mode:?}"
        );
        if mode.cgroup() {
            // The kernel held the tree at the limit (plus init's two processes).
            let peak = outcome.usage.peak_processes.unwrap();
            assert!(peak <= 22, "{mode:?}: peak {peak}");
        }
        assert!(marker.pids().is_empty(), "{mode:?}: sleepers survived");
    }
}

#[test]
fn memory_budget_stops_a_512_mib_allocation() {
    let _serial = serial();
    let script = "head -c 512M /dev/zero | tail > /dev/null && echo done > allocated";
    // Control: without a budget the allocation succeeds, so its failure below is the budget's.
    {
        let dir = tempdir();
        let mode = MODES[0];
        let outcome = run(
            mode,
            script,
            dir.path(),
            &Budgets::default(),
            Duration::from_secs(1),
        );
        assert_eq!(outcome.status, ExitStatus::Exit(0));
        assert!(
            dir.path().join("allocated").exists(),
            "control allocation failed"
        );
    }
    for mode in MODES {
        let dir = tempdir();
        let budgets = Budgets {
            memory_bytes: Some(64 * MIB),
            wall_clock: Some(Duration::from_secs(120)),
            ..Budgets::default()
        };
        let outcome = run(mode, script, dir.path(), &budgets, Duration::from_secs(1));
        assert!(
            !dir.path().join("allocated").exists(),
            "{mode:?}: allocated past the budget"
        );
        assert_eq!(
            enforcers(&outcome, Budget::Memory),
            expected_enforcers(mode, Budget::Memory),
            "{mode:?}"
        );
        if mode.cgroup() {
            assert_eq!(outcome.ended_by, EndReason::Memory, "{mode:?}: {outcome:?}");
            assert!(outcome.usage.peak_memory_bytes.unwrap() <= 64 * MIB);
        } else {
            // RLIMIT_AS makes the allocation fail inside the command, which then exits on its
            // own (`tail: memory exhausted`): the supervisor cannot see an rlimit hit.
            assert!(
                outcome.ended_by == EndReason::Memory
                    || (outcome.ended_by == EndReason::CommandExited
                        && outcome.status != ExitStatus::Exit(0)),
                "{mode:?}: {outcome:?}"
            );
        }
    }
}

#[test]
fn polled_memory_budget_catches_a_tree_over_the_limit() {
    // Per-process rlimits do not bound a tree: eight 16 MiB processes stay under a 64 MiB
    // RLIMIT_AS each, but the polled total ends the run.
    let _serial = serial();
    let mode = Mode {
        via: Via::Plain,
        cgroups: false,
    };
    let dir = tempdir();
    let marker = Marker::new();
    let script = format!(
        "for i in 1 2 3 4 5 6 7 8; do ((head -c 16M /dev/zero; {}) | tail > /dev/null) & done; wait",
        marker.sleep()
    );
    let budgets = Budgets {
        memory_bytes: Some(64 * MIB),
        wall_clock: Some(Duration::from_secs(120)),
        ..Budgets::default()
    };
    let outcome = run(mode, &script, dir.path(), &budgets, Duration::from_secs(1));
    assert_eq!(outcome.ended_by, EndReason::Memory, "{outcome:?}");
    assert!(outcome.usage.peak_memory_bytes.unwrap() > 64 * MIB);
    assert!(marker.pids().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Signals and the terminal.

#[test]
fn forwarded_sigterm_reaches_the_command() {
    let _serial = serial();
    for mode in MODES {
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!(
            "trap 'echo term > got-term; exit 7' TERM; {} & echo > ready; wait",
            marker.sleep()
        );
        let mut flags = mode.helper_flags();
        flags.extend(["--grace-ms", "10000"]);
        let mut guard = HelperGuard(helper(&flags, &script, dir.path()));
        marker.wait_for(1);
        assert!(wait_until(Duration::from_secs(10), || dir
            .path()
            .join("ready")
            .exists()));
        // SAFETY: kill has no memory-safety preconditions; the pid is our helper.
        unsafe { libc::kill(guard.0.id() as i32, libc::SIGTERM) };
        let (outcome, code) = helper_outcome(&mut guard.0);
        assert_eq!(
            fs::read_to_string(dir.path().join("got-term"))
                .ok()
                .as_deref(),
            Some("term\n"),
            "{mode:?}: the command's trap did not run"
        );
        assert_eq!(
            outcome.ended_by,
            EndReason::Signal(libc::SIGTERM),
            "{mode:?}"
        );
        assert_eq!(outcome.status, ExitStatus::Exit(7), "{mode:?}");
        assert_eq!(code, 7, "{mode:?}");
        // The command exited within the grace period: the run did not wait it out.
        assert!(
            outcome.duration < Duration::from_secs(9),
            "{mode:?}: {outcome:?}"
        );
        assert!(outcome.tree_empty);
        assert!(marker.pids().is_empty());
    }
}

#[test]
fn sigint_to_a_command_that_ignores_it_ends_after_the_grace_period() {
    let _serial = serial();
    let mode = Mode {
        via: Via::Init,
        cgroups: true,
    };
    let dir = tempdir();
    let marker = Marker::new();
    let script = format!("trap '' INT; echo > ready; {}", marker.sleep());
    let mut flags = mode.helper_flags();
    flags.extend(["--grace-ms", "500"]);
    let mut guard = HelperGuard(helper(&flags, &script, dir.path()));
    marker.wait_for(1);
    // SAFETY: as above.
    unsafe { libc::kill(guard.0.id() as i32, libc::SIGINT) };
    let (outcome, code) = helper_outcome(&mut guard.0);
    assert_eq!(outcome.ended_by, EndReason::Signal(libc::SIGINT));
    assert_eq!(outcome.status, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(code, 128 + libc::SIGKILL);
    assert!(marker.pids().is_empty());
}

/// An interactive `bash` on a fresh pseudo-terminal (its controlling terminal, job control on).
struct Pty {
    master: fs::File,
    child: std::process::Child,
    output: std::sync::Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    fn bash() -> Pty {
        use std::os::fd::FromRawFd;
        use std::os::unix::process::CommandExt;
        // SAFETY: posix_openpt returns a new descriptor we own; grantpt/unlockpt/ptsname_r
        // operate on it and a stack buffer of the stated size.
        let (master, slave_path) = unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(fd >= 0, "posix_openpt failed");
            assert_eq!(libc::grantpt(fd), 0);
            assert_eq!(libc::unlockpt(fd), 0);
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
            let path = std::ffi::CStr::from_ptr(name.as_ptr())
                .to_str()
                .unwrap()
                .to_string();
            (fs::File::from_raw_fd(fd), path)
        };
        let slave = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&slave_path)
            .unwrap();
        let mut command = Command::new("bash");
        command
            .args(["--norc", "--noprofile", "-i"])
            .env_clear()
            .envs(env())
            .env("TERM", "dumb")
            .env("PS1", "$ ")
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: setsid and ioctl are async-signal-safe; this makes the terminal on stdin the
        // new session's controlling terminal, as a terminal emulator does.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        let output = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = output.clone();
        thread::spawn(move || {
            let mut buf = [0_u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Pty {
            master,
            child,
            output,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.master.write_all(bytes).unwrap();
    }

    /// Waits until `needle` appears in the output after `from`; returns the position after it.
    fn expect(&self, needle: &str, from: usize) -> usize {
        let mut found = None;
        let ok = wait_until(Duration::from_secs(30), || {
            let out = self.output.lock().unwrap();
            found = out[from.min(out.len())..]
                .windows(needle.len())
                .position(|w| w == needle.as_bytes())
                .map(|p| from + p + needle.len());
            found.is_some()
        });
        let text = String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned();
        assert!(ok, "expected {needle:?} on the terminal, got:\n{text}");
        found.unwrap()
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The command owns the terminal while it runs: it reads from it, Ctrl-C reaches it directly,
/// and Ctrl-Z stops the whole job until `fg` (the supervisor stops with it and hands the
/// terminal back on resume). Without the hand-over, a command reading the terminal would be
/// stopped by SIGTTIN.
#[test]
fn the_command_owns_the_terminal_with_job_control() {
    let _serial = serial();
    for flags in ["", "--init"] {
        let mut pty = Pty::bash();
        let mut at = pty.expect("$ ", 0);
        // Tokens the command prints are split in the command line, so the terminal's echo of
        // the line does not match them.
        pty.send(
            format!("{HELPER} supervise {flags} -- sh -c 'echo rea\"\"dy; read x; echo got:$x'\n")
                .as_bytes(),
        );
        at = pty.expect("ready", at);
        pty.send(b"\x1a");
        at = pty.expect("Stopped", at);
        pty.send(b"fg\n");
        thread::sleep(Duration::from_millis(300));
        pty.send(b"hello\n");
        at = pty.expect("got:hello", at);
        at = pty.expect("\"endedBy\":\"command-exited\"", at);

        let trap =
            "trap \"echo got-\"\"int; exit 5\" INT; echo rea\"\"dy; while :; do sleep 0.1; done";
        pty.send(format!("{HELPER} supervise {flags} -- sh -c '{trap}'\n").as_bytes());
        at = pty.expect("ready", at);
        pty.send(b"\x03");
        at = pty.expect("got-int", at);
        // The terminal signalled the command's group directly; the supervisor saw a normal exit.
        at = pty.expect(
            "{\"status\":{\"exit\":5},\"endedBy\":\"command-exited\"",
            at,
        );

        // Control: without the hand-over the reading command is stopped (SIGTTIN) until the
        // wall clock ends the run.
        pty.send(format!("{HELPER} supervise {flags} --no-foreground --wall-ms 1500 --grace-ms 200 -- sh -c 'read x; echo got:$x'\n").as_bytes());
        pty.expect("\"endedBy\":\"wall-clock\"", at);
        pty.send(b"exit\n");
    }
}

// ---------------------------------------------------------------------------------------------
// Launch details.

#[test]
fn only_stdio_and_passed_descriptors_reach_the_command() {
    let _serial = serial();
    let dir = tempdir();
    fs::write(dir.path().join("data"), "passed\n").unwrap();
    // An inheritable descriptor (no close-on-exec) at 47, as a careless host might leave.
    let file = fs::File::open(dir.path().join("data")).unwrap();
    // SAFETY: dup2 onto an unused number; closed at the end of the test.
    assert_eq!(unsafe { libc::dup2(file.as_raw_fd(), 47) }, 47);
    let check = "for fd in 3 4 5 6 7 8 9 47; do if [ -e /proc/self/fd/$fd ]; then exit $fd; fi; done; exit 0";

    // Control: an ordinary spawn leaks fd 47 into the child.
    let leaked = Command::new("sh").args(["-c", check]).status().unwrap();
    assert_eq!(leaked.code(), Some(47), "the control did not inherit fd 47");

    for mode in MODES {
        let outcome = run(
            mode,
            check,
            dir.path(),
            &Budgets::default(),
            Duration::from_secs(1),
        );
        assert_eq!(
            outcome.status,
            ExitStatus::Exit(0),
            "{mode:?}: descriptor leaked"
        );
    }

    // A passed descriptor arrives at its number and nothing else does.
    let passed = fs::File::open(dir.path().join("data")).unwrap();
    let launch = Launch {
        fds: vec![PassFd {
            fd: passed.into(),
            target: 5,
        }],
        ..plain_launch(
            "sh",
            vec![
                "-c".into(),
                "read line <&5 && [ \"$line\" = passed ] && [ ! -e /proc/self/fd/47 ]".into(),
            ],
            dir.path().into(),
        )
    };
    let outcome = supervise::run(
        launch,
        &Budgets::default(),
        &MODES[1].options(Duration::from_secs(1)),
    )
    .unwrap();
    assert_eq!(outcome.status, ExitStatus::Exit(0));
    // SAFETY: closing the descriptor this test created.
    unsafe { libc::close(47) };
}

/// The child runs in the supervisor's memory until it executes (`CLONE_VFORK`) while other
/// threads of the process go on allocating and freeing: every launch still runs its own
/// program with its own arguments, and every failing one still reports its step.
#[test]
fn launches_while_other_threads_allocate() {
    let _serial = serial();
    let dir = tempdir();
    let options = MODES[1].options(Duration::from_secs(1));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churners: Vec<_> = (0..2)
        .map(|seed| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut kept: Vec<Vec<u8>> = Vec::new();
                let mut n: usize = seed;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    kept.push(vec![(n % 251) as u8; 64 + n % 65_536]);
                    if kept.len() > 64 {
                        kept.swap_remove(n % kept.len());
                    }
                }
            })
        })
        .collect();
    for i in 0..60 {
        let (args, cwd, expected) = if i % 3 == 2 {
            (Vec::new(), dir.path().join("missing"), None)
        } else {
            let code = i % 7;
            (
                vec!["-c".into(), format!("exit {code}").into()],
                dir.path().to_path_buf(),
                Some(code),
            )
        };
        let launch = plain_launch("sh", args, cwd);
        match (
            supervise::run(launch, &Budgets::default(), &options),
            expected,
        ) {
            (Ok(outcome), Some(code)) => {
                assert_eq!(outcome.status, ExitStatus::Exit(code), "launch {i}");
            }
            (Err(SuperviseError::Spawn { step: "chdir", .. }), None) => {}
            (other, _) => panic!("launch {i}: {other:?}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for churner in churners {
        churner.join().unwrap();
    }
}

#[test]
fn launch_failures_are_errors_and_nothing_runs() {
    let _serial = serial();
    let dir = tempdir();
    let options = MODES[1].options(Duration::from_secs(1));
    let plain = |program: &str, cwd: PathBuf| plain_launch(program, Vec::new(), cwd);
    let err = supervise::run(
        plain("no-such-program-palisade", dir.path().into()),
        &Budgets::default(),
        &options,
    )
    .unwrap_err();
    assert!(matches!(err, SuperviseError::ProgramNotFound(_)), "{err}");
    let err = supervise::run(
        plain("true", dir.path().join("missing")),
        &Budgets::default(),
        &options,
    )
    .unwrap_err();
    assert!(
        matches!(&err, SuperviseError::Spawn { step: "chdir", .. }),
        "{err}"
    );
}

#[test]
fn init_reports_missing_and_unexecutable_commands_like_env() {
    let _serial = serial();
    let dir = tempdir();
    fs::write(dir.path().join("not-executable"), "#!/bin/sh\n").unwrap();
    let cases: [(Vec<OsString>, PathBuf, i32, bool); 3] = [
        (
            vec!["no-such-program-palisade".into()],
            dir.path().into(),
            127,
            false,
        ),
        (
            vec!["./not-executable".into()],
            dir.path().into(),
            126,
            false,
        ),
        (vec!["true".into()], dir.path().join("missing"), 125, true),
    ];
    for (command, cwd, code, setup_error) in cases {
        let spec = init_spec(command.clone(), &cwd);
        let (launch, report) = init::launch(&spec, Path::new(HELPER)).unwrap();
        let outcome = supervise::run(
            launch,
            &Budgets::default(),
            &MODES[3].options(Duration::from_secs(1)),
        )
        .unwrap();
        assert_eq!(outcome.status, ExitStatus::Exit(code), "{command:?}");
        let report = report.collect();
        assert_eq!(
            report.error.is_some(),
            setup_error,
            "{command:?}: {report:?}"
        );
    }
}

#[test]
fn init_passes_a_signal_death_through() {
    let _serial = serial();
    for mode in [MODES[2], MODES[3]] {
        let dir = tempdir();
        let outcome = run(
            mode,
            "kill -USR1 $$",
            dir.path(),
            &Budgets::default(),
            Duration::from_secs(1),
        );
        assert_eq!(
            outcome.status,
            ExitStatus::Signal(libc::SIGUSR1),
            "{mode:?}"
        );
        assert_eq!(outcome.ended_by, EndReason::CommandExited);
        assert_eq!(outcome.exit_code(), 128 + libc::SIGUSR1);
    }
}

#[test]
fn init_runs_the_command_as_pid_2_of_its_own_namespace() {
    let _serial = serial();
    for mode in [MODES[2], MODES[3]] {
        let dir = tempdir();
        let outcome = run(
            mode,
            "[ $$ = 2 ]",
            dir.path(),
            &Budgets::default(),
            Duration::from_secs(1),
        );
        assert_eq!(outcome.status, ExitStatus::Exit(0), "{mode:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement.

/// Time to reap a tree of 1,000 sleeping processes, per mode (`cargo test -- --ignored
/// --nocapture reap_1000`). Cleanup = from the command's exit until the tree is empty; for
/// `Init` the kernel's namespace teardown happens before init exits, so the command writes the
/// time it finished spawning and the whole tail is measured too.
#[test]
#[ignore = "measurement; run explicitly"]
fn reap_1000_sleeping_processes() {
    let _serial = serial();
    for mode in MODES {
        let dir = tempdir();
        let marker = Marker::new();
        let script = format!(
            "i=0; while [ $i -lt 1000 ]; do {} & i=$((i+1)); done; date +%s%N > spawned",
            marker.sleep()
        );
        let outcome = run(
            mode,
            &script,
            dir.path(),
            &Budgets::default(),
            Duration::from_secs(1),
        );
        let end = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let spawned: u128 = fs::read_to_string(dir.path().join("spawned"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let tail = Duration::from_nanos(u64::try_from(end.saturating_sub(spawned)).unwrap());
        println!(
            "{mode:?}: spawn+run {:?}, command exit -> tree empty (cleanup) {:?}, last spawn -> run returned {:?}, reaped {}, killed {}",
            outcome.duration,
            outcome.cleanup,
            tail,
            outcome.processes_reaped,
            outcome.processes_killed
        );
        assert!(marker.pids().is_empty());
    }
}

#[test]
fn the_outcome_marks_spawn_start_exit_and_verification_in_order() {
    let _serial = serial();
    let dir = tempdir();
    for mode in MODES {
        // The init writes the start byte itself; a plain command is given the pipe.
        let script = match mode.via {
            Via::Plain => "printf x >&5; sleep 0.05",
            Via::Init => "sleep 0.05",
        };
        let (mut launch, _report) = launch(mode, script, dir.path());
        let read = match mode.via {
            Via::Plain => {
                let (read, write) = std::io::pipe().unwrap();
                launch.fds.push(PassFd {
                    fd: write.into(),
                    target: 5,
                });
                launch.started = Some(read.try_clone().unwrap().into());
                Some(read)
            }
            Via::Init => None,
        };
        let outcome = supervise::run(
            launch,
            &Budgets::default(),
            &mode.options(Duration::from_secs(1)),
        )
        .unwrap();
        let marks = outcome.marks;
        let (Some(spawned), Some(started), Some(exited), Some(verified)) =
            (marks.spawned, marks.started, marks.exited, marks.verified)
        else {
            panic!("{mode:?}: {marks:?}");
        };
        assert!(
            spawned <= started && started <= exited && exited <= verified,
            "{mode:?}"
        );
        // The supervisor only looked: the byte is still there for the launcher.
        if let Some(mut read) = read {
            let mut byte = [0_u8; 1];
            assert_eq!(read.read(&mut byte).unwrap(), 1, "{mode:?}");
        }
    }

    // No start signal: the start is not marked, everything else is.
    let (launch, _) = launch(MODES[1], "true", dir.path());
    let outcome = supervise::run(
        launch,
        &Budgets::default(),
        &MODES[1].options(Duration::from_secs(1)),
    )
    .unwrap();
    assert_eq!(outcome.marks.started, None);
    assert!(outcome.marks.spawned.is_some() && outcome.marks.verified.is_some());
}

/// A launch whose child mounts observed masks in user and mount namespaces of its own (an
/// unprivileged bwrap's): the program sees the masks' filesystem on the mountpoint and every
/// access is refused and recorded by the server that received the device; the host never sees
/// the mount. A child that cannot mount them fails at its mask step, and nothing runs.
#[test]
fn a_launch_mounts_observed_masks_in_namespaces_of_its_own() {
    use palisade_shims::bwrap::DeniedMask;
    use palisade_shims::fusemask::{FileOp, MaskServer};
    use palisade_shims::supervise::{MASK_MOUNT_STEP, MaskMount};
    let _serial = serial();
    if fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_err()
    {
        eprintln!("skipped: /dev/fuse is not usable by this user");
        return;
    }
    let dir = tempdir();
    let masks_at = dir.path().join("masks");
    fs::create_dir(&masks_at).unwrap();
    let nodes = [DeniedMask {
        target: PathBuf::from("/home/dev/.aws"),
        dir: true,
        denied: Vec::new(),
    }];
    let mounted_here = |path: &Path| {
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|line| line.contains(path.to_str().unwrap()))
    };
    let launch = |mountpoint: &Path, script: String| {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let server = MaskServer::serve_sent(ours.into(), &nodes).unwrap();
        let launch = Launch {
            mask_namespace: Some(MaskMount {
                mountpoint: mountpoint.to_path_buf(),
                socket: theirs.into(),
            }),
            ..plain_launch("sh", vec!["-c".into(), script.into()], dir.path().into())
        };
        let outcome = supervise::run(
            launch,
            &Budgets::default(),
            &MODES[1].options(Duration::from_secs(1)),
        );
        (outcome, server.finish())
    };
    let node = masks_at.join("0");
    let (outcome, seen) = launch(
        &masks_at,
        format!(
            "stat -c %a {node} > {out}/mode; cat {node}/credentials 2> {out}/err; \
             grep -c palisade-mask /proc/self/mountinfo > {out}/mounts",
            node = node.display(),
            out = dir.path().display()
        ),
    );
    assert_eq!(outcome.unwrap().status, ExitStatus::Exit(0));
    let read = |name: &str| fs::read_to_string(dir.path().join(name)).unwrap();
    assert_eq!(read("mode").trim(), "0");
    assert!(read("err").contains("Permission denied"), "{}", read("err"));
    assert_eq!(read("mounts").trim(), "1");
    assert!(
        seen.events.iter().any(|e| e.op == FileOp::Read
            && e.path == Path::new("/home/dev/.aws/credentials")
            && e.command == "cat"),
        "{seen:?}"
    );
    assert!(seen.error.is_none(), "{seen:?}");
    assert!(!mounted_here(&masks_at), "the host sees the masks' mount");

    // No mountpoint: the child fails at its mask step, before `execve`.
    let marker = dir.path().join("ran");
    let (outcome, _) = launch(
        &dir.path().join("missing"),
        format!("touch {}", marker.display()),
    );
    match outcome {
        Err(SuperviseError::Spawn { step, .. }) => assert_eq!(step, MASK_MOUNT_STEP),
        other => panic!("{other:?}"),
    }
    assert!(!marker.exists());
}
