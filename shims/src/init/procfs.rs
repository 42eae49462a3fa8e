//! The `/proc` of a `linux-landlock` sandbox: its own where the host allows it, otherwise the
//! host's with every process directory denied — and the probe's trial of which one this host
//! gives.
//!
//! Landlock has no mount namespace. For [`LandlockProc::Own`], init gives the sandbox one for
//! `/proc` alone: after the PID namespace (and, as non-root, the user namespace it needs) it
//! unshares a mount namespace and makes every mount in it a slave, so nothing mounted there
//! propagates back to the host (whose mounts are usually shared) while the host's later mounts
//! still show. PID 1, the first process of the new PID namespace, then mounts a fresh procfs on
//! `/proc` (a procfs lists the PID namespace of the process that mounts it) and checks that
//! `/proc/self` is `1`. The command sees only the sandbox's processes; nothing else of the
//! filesystem changes, so the Landlock ruleset (its rules follow inodes) means what it meant
//! without the namespace, and its rule on `/proc` is opened after the mount, on the sandbox's
//! procfs.
//!
//! The mount namespace gives the command nothing to use: it cannot unmount the procfs to find
//! the host's beneath, nor mount anything — it has no capability, seccomp denies `mount`,
//! `umount2`, `unshare`, `setns` and the new mount API, and Landlock refuses every mount
//! operation to a restricted process.
//!
//! Where the host refuses (an AppArmor policy that takes the capabilities of unprivileged user
//! namespaces; a host `/proc` with parts hidden under other mounts, as in most containers, which
//! the kernel then will not mount afresh in a user namespace), the sandbox shares the host's
//! `/proc` ([`LandlockProc::HostProcessesDenied`]): its ruleset denies every process directory
//! ([`crate::landlock::ruleset_plan`]), the command's own included.
//!
//! Which one a run gets is not init's choice: the probe runs [`trial_main`] (the same steps, in
//! a throwaway process tree) and states the outcome in its limitations
//! ([`LandlockProc::limitation`]), the decision records it, and init applies exactly that one —
//! failing closed, with nothing executed, if the host no longer gives the sandbox its own.

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::plan::LandlockProc;
use crate::sys;

/// The hidden subcommand that runs [`trial_main`].
pub const TRIAL_SUBCOMMAND: &str = "__sandbox-proc-trial";

/// What [`trial_main`] found, as one JSON line on its stdout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "proc", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TrialOutcome {
    /// A Landlock sandbox gets a `/proc` of its own here.
    Own,
    /// A Landlock sandbox shares the host's `/proc` here, for this reason.
    Host { reason: String },
    /// Not even the PID namespace could be made: every Landlock launch would fail the same way.
    NoPidNamespace { reason: String },
}

impl TrialOutcome {
    /// The outcome in the trial's stdout, if it printed one.
    pub fn parse(stdout: &[u8]) -> Option<TrialOutcome> {
        let text = std::str::from_utf8(stdout).ok()?;
        serde_json::from_str(text.lines().next()?).ok()
    }
}

/// Unshares a mount namespace and makes it a slave of the one it was copied from. An error
/// leaves nothing to undo: without the slave step nothing may be mounted (it could show on the
/// host), and the caller then mounts nothing.
pub(super) fn private_mount_namespace() -> Result<(), String> {
    sys::unshare(libc::CLONE_NEWNS).map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
    sys::make_mounts_slave().map_err(|e| format!("making the new mount namespace a slave: {e}"))
}

/// In PID 1, after [`private_mount_namespace`]: a fresh procfs on `/proc`, checked to be this
/// namespace's.
pub(super) fn mount_private_proc() -> Result<(), String> {
    sys::mount_proc().map_err(|e| format!("mounting a procfs on /proc: {e}"))?;
    match std::fs::read_link("/proc/self") {
        Ok(link) if link == Path::new("1") => Ok(()),
        Ok(link) => Err(format!(
            "the new /proc names PID 1 `{}`, not `1`",
            link.display()
        )),
        Err(e) => Err(format!("reading /proc/self in the new /proc: {e}")),
    }
}

/// `palisade __sandbox-proc-trial`: the namespaces a Landlock sandbox's init makes, then the
/// procfs mount in PID 1, in a throwaway process tree; prints one [`TrialOutcome`] and exits 0.
/// Run by the probe (time-boxed, its own process group), never inside a sandbox.
pub fn trial_main() -> ! {
    let outcome = trial();
    let line = serde_json::to_string(&outcome).unwrap_or_default();
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
    sys::exit_now(0)
}

/// The steps of `init::outer` and `init::pid1_main` for a `/proc` of the sandbox's own.
fn trial() -> TrialOutcome {
    if let Err(e) = super::enter_pid_namespace(super::LANDLOCK_NAMESPACES) {
        return TrialOutcome::NoPidNamespace {
            reason: e.to_string(),
        };
    }
    if let Err(reason) = private_mount_namespace() {
        return TrialOutcome::Host { reason };
    }
    let (read, write) = match sys::pipe_cloexec() {
        Ok(pipe) => pipe,
        Err(e) => {
            return TrialOutcome::Host {
                reason: format!("pipe: {e}"),
            };
        }
    };
    match sys::fork() {
        Ok(0) => {
            // PID 1: the mount, and its error (nothing on success) back through the pipe.
            drop(read);
            let error = mount_private_proc().err().unwrap_or_default();
            let _ = std::fs::File::from(write).write_all(error.as_bytes());
            sys::exit_now(0)
        }
        Ok(pid) => {
            drop(write);
            let mut error = Vec::new();
            let read_all = std::fs::File::from(read).read_to_end(&mut error);
            let waited = sys::wait_pid(pid);
            match (read_all, waited) {
                (Ok(_), Ok(status))
                    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 =>
                {
                    if error.is_empty() {
                        TrialOutcome::Own
                    } else {
                        TrialOutcome::Host {
                            reason: String::from_utf8_lossy(&error).into_owned(),
                        }
                    }
                }
                _ => TrialOutcome::Host {
                    reason: "PID 1 of the trial did not finish".into(),
                },
            }
        }
        Err(e) => TrialOutcome::Host {
            reason: format!("fork: {e}"),
        },
    }
}
