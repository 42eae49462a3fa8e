//! The safety rail for destructive attacks: act only outside the host's namespaces.
//!
//! The test measures its own (the host's) namespace inodes and passes them as
//! `--expect-outside-ns mnt=N,pid=N,user=N`. A mount attack run unconfined as root could mount
//! over the host's `/tmp`; a kill or ptrace attack handed a wrong pid could hit a stranger. So
//! before acting, an attack compares `/proc/self/ns/<kind>` with the host's for the kinds that
//! make it safe, and refuses (`unsafe-refused`) when none differs or when it cannot tell.

use std::os::unix::fs::MetadataExt;

use crate::{Args, Outcome};

/// A namespace kind, named as in `/proc/self/ns/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ns {
    Mnt,
    Pid,
    User,
}

impl Ns {
    fn name(self) -> &'static str {
        match self {
            Ns::Mnt => "mnt",
            Ns::Pid => "pid",
            Ns::User => "user",
        }
    }
}

/// Proceed only if this process is outside the host's namespace of at least one of `any_of`.
///
/// - mount, umount, pivot_root: `[Mnt]` — a mount in the host's mount namespace is a mount on
///   the host.
/// - chroot, mknod (in a test-owned directory), unshare: `[Mnt, Pid, User]` — they change only
///   the calling process or the test's own files.
/// - kill, ptrace, process_vm_readv of a test-named pid: `[Mnt, Pid, User]`, plus the marker
///   check of [`pid_is_victim`].
/// - the sandbox's own PID 1: `[Pid]` — never the host's init.
pub fn outside_host(args: &Args, any_of: &[Ns]) -> Result<(), Outcome> {
    let Some(spec) = args.opt("expect-outside-ns") else {
        return Err(Outcome::error(
            "destructive attack: `--expect-outside-ns mnt=N,pid=N,user=N` is required",
        ));
    };
    let mut differs = Vec::new();
    for kind in any_of {
        let host = host_inode(spec, *kind)?;
        let path = format!("/proc/self/ns/{}", kind.name());
        let mine = match std::fs::metadata(&path) {
            Ok(meta) => meta.ino(),
            Err(error) => {
                return Err(Outcome::refused(format!(
                    "cannot read `{path}` to verify the namespace: {error}"
                )));
            }
        };
        if mine != host {
            differs.push(kind.name());
        }
    }
    if differs.is_empty() {
        let kinds: Vec<&str> = any_of.iter().map(|k| k.name()).collect();
        return Err(Outcome::refused(format!(
            "in the host's {} namespace: refusing to act",
            kinds.join("/")
        )));
    }
    Ok(())
}

fn host_inode(spec: &str, kind: Ns) -> Result<u64, Outcome> {
    for item in spec.split(',') {
        if let Some((name, value)) = item.split_once('=')
            && name == kind.name()
        {
            return value.parse().map_err(|_| {
                Outcome::error(format!(
                    "`--expect-outside-ns`: `{value}` is not an inode number"
                ))
            });
        }
    }
    Err(Outcome::error(format!(
        "`--expect-outside-ns` lacks the host's `{}` namespace",
        kind.name()
    )))
}

/// Whether `pid`'s command line (as this process sees `/proc`) is the test's victim.
///
/// `Ok(true)`: it carries the marker. `Ok(false)`: no such process is visible here, so acting
/// on the number reaches nothing the test did not name (a kill would get ESRCH). `Err`: the pid
/// is visible and is somebody else — the caller must not act.
pub fn pid_is_victim(pid: i32, marker: &str) -> Result<bool, Outcome> {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => {
            if String::from_utf8_lossy(&cmdline).contains(marker) {
                Ok(true)
            } else {
                Err(Outcome::blocked(format!(
                    "pid {pid} here is not the test's victim (no marker in its command line): not touching it"
                )))
            }
        }
        Err(_) => Ok(false),
    }
}
