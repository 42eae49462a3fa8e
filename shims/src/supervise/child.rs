//! The launched child's exec, prepared before `fork`: argv and environment as C strings,
//! the descriptors to pass at fixed numbers (duplicated above every target first, so no move
//! overwrites another), the close-on-exec ranges, the cgroup to join and the rlimits. The
//! child itself ([`sys::fork_exec`]) then only makes async-signal-safe system calls on this
//! data, and reports a failing step on a pipe, so [`ChildPlan::spawn`] returns only once
//! `execve` succeeded.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use super::{Launch, LaunchKind, SuperviseError};
use crate::sys::{self, CHILD_STEPS, ChildExec, ExecStrings, RlimitResource};

/// The launched child's setup, prepared before `fork` so the child only makes system calls.
pub(super) struct ChildPlan {
    pub(super) kind: LaunchKind,
    exec: ChildExec,
    /// Keeps the high duplicates open until the child has been spawned.
    _high: Vec<OwnedFd>,
}

impl ChildPlan {
    pub(super) fn new(
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
        let mask_namespace = match &launch.mask_namespace {
            Some(masks) => {
                // Close-on-exec duplicates above every target: the socket, and a number the
                // child replaces with its `/dev/fuse` descriptor (known now, for the options).
                let dup = |what| {
                    sys::dup_cloexec_at_least(masks.socket.as_raw_fd(), above)
                        .map_err(|source| SuperviseError::Setup { what, source })
                };
                let socket = dup("duplicate the masks' socket")?;
                let device = dup("reserve the masks' device descriptor")?;
                let (uid, gid) = (sys::getuid(), sys::getgid());
                let exec = sys::MaskNamespace {
                    user_namespace: uid != 0,
                    uid_map: format!("{uid} {uid} 1\n").into_bytes(),
                    gid_map: format!("{gid} {gid} 1\n").into_bytes(),
                    mountpoint: cstr(masks.mountpoint.as_os_str(), "masks' mountpoint")?,
                    options: CString::new(crate::fusemask::kernel_mount_options(
                        device.as_raw_fd(),
                        uid,
                        gid,
                    ))
                    .map_err(|_| SuperviseError::InvalidLaunch("mask options".into()))?,
                    device_fd: device.as_raw_fd(),
                    socket: socket.as_raw_fd(),
                };
                high.push(socket);
                high.push(device);
                Some(exec)
            }
            None => None,
        };

        Ok(ChildPlan {
            kind: launch.kind,
            exec: ChildExec {
                program: cstr(program.as_os_str(), "program")?,
                argv: ExecStrings::new(argv_owned),
                envp: ExecStrings::new(envp_owned),
                cwd,
                cgroup_procs,
                rlimits,
                moves,
                cloexec,
                fd_limit: sys::fd_limit(),
                parent: sys::getpid(),
                tty,
                mask_namespace,
            },
            _high: high,
        })
    }

    /// Forks and execs; returns the child's pid once `execve` succeeded.
    pub(super) fn spawn(&self, program: &Path) -> Result<libc::pid_t, SuperviseError> {
        let setup = |what| move |source| SuperviseError::Setup { what, source };
        let (err_read, err_write) = sys::pipe_cloexec().map_err(setup("error pipe"))?;
        let mask = sys::block_all_signals().map_err(setup("block signals"))?;
        let forked = sys::fork_exec(&self.exec, &err_write);
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
}
