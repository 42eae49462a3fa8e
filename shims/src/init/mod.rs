//! `palisade __sandbox-init`: the sandbox's init for the `linux-landlock` and
//! `direct-dedicated` mechanisms; [`pid1`] is the PID 1 palisade gives `linux-bwrap` sandboxes,
//! and [`procfs`] the `/proc` of a Landlock sandbox.
//!
//! The host builds an [`InitSpec`] ([`spec_for`]) and a [`Launch`] ([`launch`]) that runs the
//! palisade binary with [`SUBCOMMAND`], the spec as JSON on fd [`SPEC_FD`] and a report pipe on
//! fd [`REPORT_FD`]; [`crate::supervise::run`] supervises it. [`main`] then:
//!
//! 1. reads the spec (JSON, `deny_unknown_fields`) and prepares everything the children need;
//! 2. enters a private PID namespace: `unshare(CLONE_NEWPID)` as root, otherwise
//!    `unshare(CLONE_NEWUSER | CLONE_NEWPID)` with `/proc/self/uid_map` `<uid> <uid> 1`,
//!    `setgroups` `deny` and `gid_map` `<gid> <gid> 1` (the process is single-threaded: a fresh
//!    exec), then, for a Landlock sandbox with a `/proc` of its own ([`LandlockProc::Own`]),
//!    unshares a mount namespace for it ([`procfs`]), re-arms its parent-death signal and
//!    checks the supervisor is still there. Then it marks itself not dumpable (PID 1, forked
//!    from it, inherits that): the command, same uid or not, can then neither open
//!    `/proc/<pid>/mem` or `environ` of either process nor trace them;
//! 3. ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT (the supervisor forwards those to the launched
//!    process group, which the command is in; init must survive them to pass the status on) and
//!    forks PID 1 of the new namespace, then waits for it and passes the command's status
//!    through: an exit code as the same exit code, a signal by re-raising it on itself (with
//!    core dumps off), so the supervisor sees exactly what the command did;
//! 4. PID 1 sets `PR_SET_PDEATHSIG(SIGKILL)` and checks (through a pipe whose write end only the
//!    outer process holds) that its parent did not die before that, mounts the sandbox's own
//!    procfs on `/proc` when the spec says so (failing closed if it cannot: the plan, and so
//!    the decision, said which `/proc` the sandbox gets), forks the command child,
//!    reaps every process of the namespace, and when the command child exits reports its raw
//!    status through a pipe and exits — the kernel then SIGKILLs whatever is left in the
//!    namespace. A SIGKILLed supervisor kills the outer process (parent-death signal set by the
//!    supervisor), which kills PID 1, which takes the namespace down;
//! 5. the command child resets every signal disposition and the mask, marks every descriptor
//!    above 2 close-on-exec, sets the rlimits, enters the working directory, applies the
//!    confinement, and execs the command, searching the `PATH` of the spec's environment: 127
//!    and one line on stderr when not found, 126 when found but not executable (as `env` and
//!    `docker run`).
//!
//! Confinement by mechanism:
//! - `Direct` ([`Confinement::None`]): nothing beyond the PID namespace — not even
//!   `no_new_privs`. `direct-dedicated` means "no masks, on a disposable dedicated runner", where
//!   CI steps legitimately use `sudo`, and `no_new_privs` would break setuid programs without
//!   being a boundary the backend claims. (As non-root the user namespace already stops setuid
//!   binaries from gaining privileges: their owner is not mapped.)
//! - `Landlock` ([`Confinement::Landlock`]): the observed masks of [`InitSpec::masks`] are
//!   mounted and bound over their denied paths by init, before PID 1 is forked, in a mount
//!   namespace of the sandbox's own (the `/proc` one, or one made for them, slave to the
//!   host's), their `/dev/fuse` descriptor sent to [`launch`]'s mask server ([`mount_masks`]);
//!   an error leaves them to Landlock, unobserved, and is reported as `masks:`. Then, in the command
//!   child, [`crate::landlock::restrict`] (sets
//!   `no_new_privs`, fails closed unless fully enforced; its ruleset was computed for the
//!   sandbox's `/proc`), then [`crate::seccomp::install`], then `execve`.
//!
//! Any setup failure before `execve` writes `error: <message>` to the report pipe and one line
//! to stderr, and exits 125; the host reads the report after the run ([`InitReport::collect`])
//! and so can tell "palisade refused" from "the command exited 125". The report also says what
//! Landlock enforced.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use crate::landlock::{self, RulesetPlan};
use crate::path;
use crate::plan::{LandlockProc, Mechanism};
use crate::seccomp;
use crate::sys::{self, RlimitResource};

mod host;
pub mod pid1;
pub mod procfs;

use self::host::io_err;
pub use self::host::{
    Confinement, EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_SETUP_FAILED, InitError, InitReport,
    InitSpec, MASKS_FD, MaskNode, MaskSpec, OBSERVE_FD, REPORT_FD, Resource, Rlimit, SPEC_FD,
    STARTED_FD, SUBCOMMAND, SetupReport, launch, other_build, spec_for,
};

/// The `palisade __sandbox-init` process. Never returns.
pub fn main() -> ! {
    let mut report = Reporter(None);
    match outer(&mut report) {
        Ok(never) => match never {},
        Err(e) => report.fail(&e.to_string()),
    }
}

enum Never {}

/// Writes `error:` and status lines to the report pipe; one line to stderr on failure.
struct Reporter(Option<File>);

impl Reporter {
    fn line(&mut self, line: &str) {
        if let Some(file) = &mut self.0 {
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }

    fn fail(&mut self, message: &str) -> ! {
        self.line(&format!("error: {message}"));
        say!("palisade: sandbox init: {message}");
        sys::exit_now(EXIT_SETUP_FAILED)
    }
}

fn outer(report: &mut Reporter) -> Result<Never, InitError> {
    let supervisor = sys::getppid();
    let spec = read_spec()?;
    if let Some(fd) = spec.report_fd {
        report.0 = Some(File::from(take_fd(fd)?));
    }
    if spec.build.as_deref() != Some(crate::BUILD) {
        return Err(InitError::Spec(other_build(spec.build.as_deref())));
    }
    let mut prepared = Prepared::new(&spec)?;
    prepared.started = spec.started_fd.map(take_fd).transpose()?.map(File::from);
    let landlock = prepared.landlock.is_some();
    enter_pid_namespace(if landlock { LANDLOCK_NAMESPACES } else { 0 })?;
    // The `/proc` the probe found and the decision records, or nothing: never the other one.
    let own_proc = prepared.proc == Some(LandlockProc::Own);
    if own_proc {
        procfs::private_mount_namespace().map_err(InitError::OwnProc)?;
    }
    if landlock && let (Some(masks), Some(fd)) = (&spec.masks, spec.masks_fd) {
        // Observation only: a mask that is not bound leaves its path to Landlock, which
        // refuses it unobserved; the report says why.
        let socket = take_fd(fd)?;
        match mount_masks(masks, &socket, own_proc) {
            Ok(device) => prepared.masks_device = Some(device),
            Err(why) => report.line(&format!("masks: {why}")),
        }
    }
    // Creating a user namespace changes credentials, which may clear the parent-death signal.
    sys::set_parent_death_signal(libc::SIGKILL).map_err(io_err("PR_SET_PDEATHSIG"))?;
    if sys::getppid() != supervisor {
        return Err(InitError::Spec("the supervisor exited".into()));
    }
    // After the uid map is written (a non-dumpable process's `/proc/self` belongs to root).
    // PID 1 inherits it; the command child loses it at `execve`.
    sys::set_dumpable(false).map_err(io_err("PR_SET_DUMPABLE"))?;
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        sys::set_disposition(signal, true);
    }
    let (alive_read, alive_write) = sys::pipe_cloexec().map_err(io_err("pipe"))?;
    let (status_read, status_write) = sys::pipe_cloexec().map_err(io_err("pipe"))?;
    let pid1 = sys::fork().map_err(io_err("fork"))?;
    if pid1 == 0 {
        drop(alive_write);
        drop(status_read);
        pid1_main(&prepared, &alive_read, status_write, report);
    }
    drop(alive_read);
    drop(status_write);
    let raw = sys::wait_pid(pid1).map_err(io_err("wait for pid 1"))?;
    let mut buf = [0_u8; 4];
    let status = match File::from(status_read).read_exact(&mut buf) {
        Ok(()) => i32::from_ne_bytes(buf),
        // PID 1 died without reporting (killed from outside): pass its own status on.
        Err(_) => raw,
    };
    drop(alive_write);
    pass_through(status)
}

/// Mounts the masks' FUSE filesystem, hands its `/dev/fuse` descriptor to the supervisor's
/// mask server over `socket`, and binds every node over its target — all in a mount namespace
/// of the sandbox's own (`have_one`: already made for `/proc`), slave to the host's, so the
/// host sees none of it and nothing needs unmounting: it goes with the namespace. Returns the
/// masks' device, which the ruleset's mask rules are checked against. The descriptor is opened
/// here, after the user namespace, because the kernel mounts FUSE only through a descriptor
/// opened in the namespace that mounts it. A mask left unbound by an error is harmless: its
/// rule is not added, and Landlock refuses its path unobserved.
fn mount_masks(masks: &MaskSpec, socket: &OwnedFd, have_one: bool) -> Result<u64, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    if !have_one {
        procfs::private_mount_namespace()?;
    }
    let device = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse: {e}"))?;
    let options =
        crate::fusemask::kernel_mount_options(device.as_raw_fd(), sys::getuid(), sys::getgid());
    sys::mount_fuse(&masks.mountpoint, &options)
        .map_err(|e| format!("mounting the masks' filesystem: {e}"))?;
    // The server answers from here on (the kernel queues requests until it does).
    sys::send_fd(socket.as_raw_fd(), device.as_raw_fd())
        .map_err(|e| format!("sending /dev/fuse to the supervisor: {e}"))?;
    drop(device);
    let mut device = None;
    for (i, node) in masks.nodes.iter().enumerate() {
        let source = masks.mountpoint.join(i.to_string());
        // Looking at a node is not refused (nor recorded); its device is the mount's.
        let dev = std::fs::symlink_metadata(&source)
            .map_err(|e| format!("`{}`: {e}", source.display()))?
            .dev();
        device.get_or_insert(dev);
        sys::bind_mount(&source, &node.target)
            .map_err(|e| format!("binding the mask over `{}`: {e}", node.target.display()))?;
    }
    // Only the binds stay: the sandbox finds the host's empty directory there.
    sys::unmount_detach(&masks.mountpoint)
        .map_err(|e| format!("detaching the masks' mount: {e}"))?;
    device.ok_or_else(|| "no masks".to_owned())
}

/// PID 1 of the namespace.
fn pid1_main(prepared: &Prepared, alive: &OwnedFd, status: OwnedFd, report: &mut Reporter) -> ! {
    if sys::set_parent_death_signal(libc::SIGKILL).is_err() || sys::peer_closed(alive) {
        sys::exit_now(EXIT_SETUP_FAILED);
    }
    // The first process of the PID namespace mounts its procfs (see `procfs`).
    if prepared.proc == Some(LandlockProc::Own)
        && let Err(e) = procfs::mount_private_proc()
    {
        report.fail(&InitError::OwnProc(e).to_string());
    }
    let command = match sys::fork() {
        Ok(0) => command_child(prepared, report),
        Ok(pid) => pid,
        Err(e) => report.fail(&format!("fork: {e}")),
    };
    loop {
        match sys::wait_any(false) {
            Some(child) if child.pid == command => {
                let _ = File::from(status).write_all(&child.status.to_ne_bytes());
                sys::exit_now(supervise_exit_code(child.status));
            }
            Some(_) => {}
            None => sys::exit_now(EXIT_SETUP_FAILED),
        }
    }
}

/// The status PID 1 exits with for the command's `status` (it cannot re-raise a signal on
/// itself): the exit code, or 128 + the signal.
fn supervise_exit_code(status: i32) -> i32 {
    if libc::WIFSIGNALED(status) {
        128_i32.saturating_add(libc::WTERMSIG(status))
    } else {
        libc::WEXITSTATUS(status)
    }
}

/// Exits like the command did: same exit code, or the same signal re-raised.
fn pass_through(status: i32) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        sys::raise_default(signal);
        sys::exit_now(128_i32.saturating_add(signal));
    }
    sys::exit_now(libc::WEXITSTATUS(status))
}

/// The command child: reset, limit, confine, exec.
fn command_child(prepared: &Prepared, report: &mut Reporter) -> ! {
    let _ = sys::set_parent_death_signal(libc::SIGKILL);
    sys::reset_all_signals();
    if let Err(e) = sys::cloexec_from(3) {
        report.fail(&format!("cannot close inherited descriptors: {e}"));
    }
    for (resource, soft, hard) in &prepared.rlimits {
        if let Err(e) = sys::set_rlimit(*resource, *soft, *hard) {
            report.fail(&format!("setrlimit: {e}"));
        }
    }
    if let Err(e) = sys::chdir(&prepared.cwd) {
        report.fail(&format!(
            "cannot enter `{}`: {e}",
            OsStr::from_bytes(prepared.cwd.as_bytes()).display()
        ));
    }
    if let Some(ruleset) = &prepared.landlock {
        // Root is not a boundary: a confined uid 0 must not keep capabilities (raw sockets,
        // file capabilities, CAP_SYS_ADMIN paths seccomp does not list), now or after exec.
        if let Err(e) = sys::drop_all_capabilities() {
            report.fail(&format!("cannot drop capabilities: {e}"));
        }
        match landlock::restrict(ruleset, prepared.masks_device) {
            Ok(status) => {
                if let Ok(json) = serde_json::to_string(&status) {
                    report.line(&format!("landlock: {json}"));
                }
            }
            Err(e) => report.fail(&e.to_string()),
        }
    }
    if let Some(program) = &prepared.seccomp {
        let installed = match prepared.observe_fd {
            Some(fd) => seccomp::install_observed(program, fd),
            None => seccomp::install(program),
        };
        if let Err(e) = installed {
            report.fail(&format!("seccomp: {e}"));
        }
    }
    if let Some(mut started) = prepared.started.as_ref() {
        // The supervisor's sign that the command starts now (for timings only: a failure to
        // write it changes nothing else). The exec closes it.
        let _ = started.write_all(b"x");
    }
    let code = prepared.exec();
    drop(report.0.take());
    sys::exit_now(code)
}

/// The spec turned into what the children need, before any fork.
struct Prepared {
    name: OsString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    /// Paths to try in order (`PATH` search done lazily by `execve` errors).
    candidates: Vec<CString>,
    cwd: CString,
    rlimits: Vec<(RlimitResource, u64, u64)>,
    landlock: Option<RulesetPlan>,
    /// A Landlock sandbox's `/proc`.
    proc: Option<LandlockProc>,
    seccomp: Option<seccomp::Program>,
    observe_fd: Option<RawFd>,
    /// The start signal's pipe ([`InitSpec::started_fd`]), close-on-exec.
    started: Option<File>,
    /// The device of the observed masks init bound ([`mount_masks`]).
    masks_device: Option<u64>,
}

impl Prepared {
    fn new(spec: &InitSpec) -> Result<Self, InitError> {
        let name = spec.command.first().ok_or(InitError::EmptyCommand)?.clone();
        if name.is_empty() {
            return Err(InitError::EmptyCommand);
        }
        let argv = spec
            .command
            .iter()
            .map(|a| cstring(a.as_bytes(), "argument"))
            .collect::<Result<Vec<_>, _>>()?;
        let mut envp = Vec::new();
        for (key, value) in &spec.env {
            if key.is_empty() || key.as_bytes().contains(&b'=') {
                return Err(InitError::Spec(format!(
                    "environment name `{}` is invalid",
                    key.display()
                )));
            }
            let mut pair = key.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            envp.push(cstring(&pair, "environment entry")?);
        }
        let candidates = if name.as_bytes().contains(&b'/') {
            vec![cstring(name.as_bytes(), "command")?]
        } else {
            path::Search::execvp(path::of_env(&spec.env))
                .candidates(&name)
                .map(|full| cstring(full.as_os_str().as_bytes(), "command path"))
                .collect::<Result<Vec<_>, _>>()?
        };
        let (landlock, proc, seccomp) = match &spec.confinement {
            Confinement::None => (None, None, None),
            Confinement::Landlock {
                ruleset,
                proc,
                seccomp,
            } => {
                let program = seccomp
                    .map(|reach| {
                        seccomp::build(&seccomp::Profile {
                            mechanism: Mechanism::Landlock(*proc),
                            reach,
                        })
                    })
                    .transpose()?
                    .map(|program| {
                        if spec.observe_fd.is_some() {
                            program.observed()
                        } else {
                            program
                        }
                    });
                (Some(ruleset.clone()), Some(*proc), program)
            }
        };
        Ok(Prepared {
            name,
            argv,
            envp,
            candidates,
            cwd: cstring(spec.cwd.as_os_str().as_bytes(), "directory")?,
            rlimits: spec
                .rlimits
                .iter()
                .map(|r| (r.resource.raw(), r.soft, r.hard))
                .collect(),
            landlock,
            proc,
            seccomp,
            observe_fd: spec.observe_fd,
            started: None,
            masks_device: None,
        })
    }

    /// Tries every candidate like `execvp`; returns the exit code when none could be executed
    /// (after one line on stderr).
    fn exec(&self) -> i32 {
        let mut denied = None;
        let mut last = None;
        for candidate in &self.candidates {
            let e = sys::execve(candidate, &self.argv, &self.envp);
            match e.raw_os_error() {
                Some(
                    libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENAMETOOLONG | libc::ELOOP,
                ) => {
                    last = Some(e);
                }
                Some(libc::EACCES) => {
                    denied = Some(e);
                }
                _ => {
                    say!("palisade: `{}`: {e}", self.name.display());
                    return EXIT_CANNOT_EXECUTE;
                }
            }
        }
        match denied {
            Some(e) => {
                say!("palisade: `{}`: {e}", self.name.display());
                EXIT_CANNOT_EXECUTE
            }
            None => {
                let _ = last;
                say!("palisade: `{}`: command not found", self.name.display());
                EXIT_NOT_FOUND
            }
        }
    }
}

fn cstring(bytes: &[u8], what: &'static str) -> Result<CString, InitError> {
    CString::new(bytes).map_err(|_| InitError::Nul {
        what,
        value: String::from_utf8_lossy(bytes).into_owned(),
    })
}

fn read_spec() -> Result<InitSpec, InitError> {
    let mut file = File::from(take_fd(SPEC_FD)?);
    let mut json = Vec::new();
    file.read_to_end(&mut json)
        .map_err(io_err("read the init spec"))?;
    serde_json::from_slice(&json).map_err(|e| {
        // A launcher of another build may write a spec this init cannot read at all (its shape
        // changes between builds): say that, not how the JSON differs.
        #[derive(serde::Deserialize)]
        struct BuildOnly {
            #[serde(default)]
            build: Option<String>,
        }
        match serde_json::from_slice::<BuildOnly>(&json) {
            Ok(other) if other.build.as_deref() != Some(crate::BUILD) => {
                InitError::Spec(other_build(other.build.as_deref()))
            }
            _ => InitError::Spec(e.to_string()),
        }
    })
}

/// Takes ownership of an inherited descriptor after checking it is open, and makes it
/// close-on-exec so the command never inherits it.
fn take_fd(fd: RawFd) -> Result<OwnedFd, InitError> {
    sys::take_inherited_fd(fd).map_err(|source| InitError::Io {
        what: "inherited descriptor",
        source,
    })
}

/// The namespaces a Landlock sandbox gets besides the PID (and user) namespace: its own System V
/// IPC and host name, which without a mount or network namespace would be the host's (shared
/// memory segments, message queues).
const LANDLOCK_NAMESPACES: libc::c_int = libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;

/// `unshare(CLONE_NEWPID | extra)` as root; otherwise, or when that is refused, a user
/// namespace mapping only the caller's uid and gid as well.
fn enter_pid_namespace(extra: libc::c_int) -> Result<(), InitError> {
    if sys::geteuid() == 0 && sys::unshare(libc::CLONE_NEWPID | extra).is_ok() {
        return Ok(());
    }
    let uid = sys::getuid();
    let gid = sys::getgid();
    sys::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID | extra)
        .map_err(io_err("unshare(CLONE_NEWUSER | CLONE_NEWPID)"))?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
        .map_err(io_err("write /proc/self/uid_map"))?;
    std::fs::write("/proc/self/setgroups", "deny").map_err(io_err("write /proc/self/setgroups"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
        .map_err(io_err("write /proc/self/gid_map"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]
    use super::*;
    use crate::plan::{Budgets, LaunchPlan, Network};
    use std::os::unix::ffi::OsStringExt;
    use std::path::PathBuf;

    fn plan(mechanism: Mechanism) -> LaunchPlan {
        LaunchPlan {
            mechanism,
            network: Network::AllowOutbound,
            workspace: PathBuf::from("/tmp"),
            writable_roots: vec![PathBuf::from("/tmp")],
            read_only_root: false,
            denied_read_paths: vec![],
            protected_paths: vec![],
            syscall_filter: false,
            command: vec![OsString::from("sh"), OsString::from_vec(vec![b'-', 0xff])],
            env: vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))],
            run_temp_dir: PathBuf::from("/tmp"),
            budgets: Budgets::default(),
            unix_sockets: Vec::new(),
        }
    }

    #[test]
    fn direct_spec_has_no_confinement_and_round_trips_non_utf8() {
        let spec = spec_for(&plan(Mechanism::Direct), None).unwrap();
        assert_eq!(spec.confinement, Confinement::None);
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(
            json,
            r#"{"command":["sh",[45,255]],"env":[["PATH","/usr/bin:/bin"]],"cwd":"/tmp","rlimits":[{"resource":"core","soft":0,"hard":0}],"confinement":{"kind":"none"},"report_fd":null,"observe_fd":null,"started_fd":null,"masks":null,"masks_fd":null,"build":null}"#
        );
        let back: InitSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn bwrap_plans_are_refused() {
        assert!(matches!(
            spec_for(&plan(Mechanism::Bwrap), None),
            Err(InitError::Mechanism(Mechanism::Bwrap))
        ));
        let mut empty = plan(Mechanism::Direct);
        empty.command.clear();
        assert!(matches!(
            spec_for(&empty, None),
            Err(InitError::EmptyCommand)
        ));
    }

    #[test]
    fn unknown_spec_fields_are_rejected() {
        let json = r#"{"command":["true"],"env":[],"cwd":"/","rlimits":[],"confinement":{"kind":"none"},"report_fd":null,"extra":1}"#;
        assert!(serde_json::from_str::<InitSpec>(json).is_err());
    }

    #[test]
    fn path_candidates_follow_the_spec_path() {
        let spec = spec_for(&plan(Mechanism::Direct), None).unwrap();
        let prepared = Prepared::new(&spec).unwrap();
        let names: Vec<_> = prepared
            .candidates
            .iter()
            .map(|c| c.to_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["/usr/bin/sh", "/bin/sh"]);
    }
}
