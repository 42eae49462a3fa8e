//! What runs in a launched child before `execve`: only async-signal-safe system calls on data
//! prepared before the fork (no allocation, no locks, no panics), because the process that
//! forked may have other threads, and the child may share its memory (`CLONE_VFORK`).
//!
//! [`fork_exec`] is the Linux supervisor's child ([`ChildExec`], prepared by
//! `supervise::child`); [`group_leader_pre_exec`] is the process-group supervisor's hook for
//! [`std::process::Command`].

use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::{cloexec_above_stdio, getpid, give_tty, set_rlimit};

/// The child's step when it could not make the namespaces of an observed mask's mount.
pub const MASK_NAMESPACE_STEP: &str = "mask namespaces";
/// The child's step when it could not mount an observed mask.
pub const MASK_MOUNT_STEP: &str = "mask mount";

/// The process-group supervisor's child, after `fork` and before `execve` (std makes it the
/// leader of a new process group): the CPU rlimit (soft: SIGXCPU; hard, one second later:
/// SIGKILL), every descriptor above 2 close-on-exec (descriptors the host inherited without
/// close-on-exec stay out of the sandbox), and the terminal's foreground when given.
pub(crate) fn group_leader_pre_exec(
    command: &mut Command,
    cpu_limit: Option<u64>,
    fd_limit: libc::c_int,
    tty: Option<RawFd>,
) {
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (setrlimit, fcntl, sigprocmask, tcsetpgrp, getpid) on
    // values captured by copy; it allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || {
            if let Some(seconds) = cpu_limit {
                set_rlimit(libc::RLIMIT_CPU, seconds, seconds.saturating_add(1))?;
            }
            cloexec_above_stdio(fd_limit);
            if let Some(fd) = tty {
                give_tty(fd, getpid());
            }
            Ok(())
        });
    }
}

#[cfg(target_os = "linux")]
pub(crate) use linux::*;

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::CString;
    use std::io;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};

    use super::super::{RlimitResource, errno, fork, null_terminated, set_errno};

    /// Owned NUL-terminated strings and the NULL-terminated pointer array `execve` takes,
    /// built before the fork. The pointers stay valid when the value moves: they point into
    /// the strings' own heap buffers.
    pub(crate) struct ExecStrings {
        _strings: Vec<CString>,
        pointers: Vec<*const libc::c_char>,
    }

    impl ExecStrings {
        pub(crate) fn new(strings: Vec<CString>) -> Self {
            let pointers = null_terminated(&strings);
            ExecStrings {
                _strings: strings,
                pointers,
            }
        }
    }

    /// The steps the child reports when it fails before `execve`, by index.
    pub(crate) const CHILD_STEPS: [&str; 10] = [
        "setpgid",
        "parent-death signal",
        "parent exited",
        "join cgroup",
        "setrlimit",
        "pass descriptors",
        "chdir",
        "execve",
        super::MASK_NAMESPACE_STEP,
        super::MASK_MOUNT_STEP,
    ];

    /// Observed masks the child mounts itself before `execve` (an unprivileged bwrap's
    /// masks): it enters a user namespace mapping only its own uid and gid and a mount
    /// namespace slave to the host's, opens `/dev/fuse` there onto `device_fd`, mounts the
    /// masks' FUSE filesystem on `mountpoint`, and sends the descriptor over `socket` to the
    /// supervisor's mask server. The program then runs in those namespaces and sees the mount;
    /// the host does not, and nothing needs unmounting.
    pub(crate) struct MaskNamespace {
        /// Whether to make a user namespace first (a user other than root, who needs one to
        /// mount); root makes only the mount namespace.
        pub user_namespace: bool,
        /// `"<uid> <uid> 1\n"`, `"<gid> <gid> 1\n"`.
        pub uid_map: Vec<u8>,
        pub gid_map: Vec<u8>,
        pub mountpoint: CString,
        /// The mount options, `fd=<device_fd>,…`.
        pub options: CString,
        /// A descriptor number the child owns (a close-on-exec duplicate), replaced by the
        /// `/dev/fuse` descriptor.
        pub device_fd: RawFd,
        /// Close-on-exec: the program never holds it.
        pub socket: RawFd,
    }

    /// Everything the supervisor's child does between `fork` and `execve`, prepared before the
    /// fork.
    pub(crate) struct ChildExec {
        pub program: CString,
        pub argv: ExecStrings,
        pub envp: ExecStrings,
        pub cwd: Option<CString>,
        /// `cgroup.procs` files to write the child's pid to.
        pub cgroup_procs: Vec<RawFd>,
        pub rlimits: Vec<(RlimitResource, u64, u64)>,
        /// (high duplicate, target) pairs to `dup2`.
        pub moves: Vec<(RawFd, RawFd)>,
        /// Inclusive descriptor ranges to mark close-on-exec (everything above 2 but the
        /// targets).
        pub cloexec: Vec<(u32, u32)>,
        /// Highest descriptor to walk when `close_range` is unavailable.
        pub fd_limit: i32,
        /// The supervisor: the child gives up if its parent is no longer this process.
        pub parent: libc::pid_t,
        /// The terminal whose foreground the child takes.
        pub tty: Option<RawFd>,
        /// Observed masks to mount in namespaces of the child's own first.
        pub mask_namespace: Option<MaskNamespace>,
    }

    /// Starts the child, which runs `exec` and never returns (it reports a failing step on
    /// `err` as the step's index in [`CHILD_STEPS`] and the errno, then exits 127). Returns the
    /// child's pid in the parent. Call with every signal blocked (the child unblocks them just
    /// before `execve`).
    ///
    /// The child shares the parent's memory until `execve` ([`vfork_exec`]) when it can; it
    /// gets a copy ([`fork`]) when it enters a user namespace for the masks or takes the
    /// terminal's foreground (see [`ChildExec::may_share_memory`]).
    pub(crate) fn fork_exec(exec: &ChildExec, err: &OwnedFd) -> io::Result<libc::pid_t> {
        if exec.may_share_memory() {
            return vfork_exec(exec, err.as_raw_fd());
        }
        let forked = fork();
        if let Ok(0) = forked {
            exec.run(err.as_raw_fd());
        }
        forked
    }

    /// The stack the memory-sharing child runs on (it cannot use the parent's, which the
    /// parent's frames still occupy): anonymous memory with a guard page below it, unmapped
    /// once the child has executed or exited.
    struct ChildStack {
        base: *mut libc::c_void,
        len: usize,
    }

    impl ChildStack {
        /// The child calls a few system-call wrappers from one frame; 256 KiB is ample.
        const LEN: usize = 256 * 1024;
        const GUARD: usize = 4096;

        fn new() -> io::Result<ChildStack> {
            let len = Self::LEN + Self::GUARD;
            // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = ChildStack { base, len };
            // The lowest page faults instead of letting an overflow write below the stack.
            // SAFETY: the first page of the mapping made above.
            if unsafe { libc::mprotect(base, Self::GUARD, libc::PROT_NONE) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }

        /// The highest address, where a downward-growing stack starts (page-aligned, so
        /// 16-byte aligned as the ABI wants).
        fn top(&self) -> *mut libc::c_void {
            self.base.wrapping_byte_add(self.len)
        }
    }

    impl Drop for ChildStack {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, which nothing uses any more: the child that
            // ran on it has executed or exited before `clone` returned (CLONE_VFORK).
            unsafe {
                libc::munmap(self.base, self.len);
            }
        }
    }

    /// What the memory-sharing child gets: its plan and the error pipe.
    struct VforkArgs<'a> {
        exec: &'a ChildExec,
        err: RawFd,
    }

    extern "C" fn vfork_child(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `VforkArgs` that `vfork_exec` keeps alive on its stack until
        // `clone` returns, which is after this child executed or exited.
        let args = unsafe { &*arg.cast::<VforkArgs<'_>>() };
        args.exec.run(args.err)
    }

    /// `clone(CLONE_VM | CLONE_VFORK)`: the child runs in the parent's memory, on a stack of
    /// its own, and the calling thread waits until the child executed or exited. Unlike
    /// `fork`, nothing of the parent's page tables is copied and no page becomes
    /// copy-on-write: a launcher that has loaded the WebAssembly runtime paid for that on
    /// every `fork` and in faults after it (0.4–0.65 ms of a bwrap run, measured here).
    ///
    /// The child's steps are fit for it: system calls on data prepared before (no allocation,
    /// no lock), which change only the child's own kernel state (its descriptor table and
    /// signal dispositions are copies: no CLONE_FILES, no CLONE_SIGHAND), never the shared
    /// memory.
    fn vfork_exec(exec: &ChildExec, err: RawFd) -> io::Result<libc::pid_t> {
        let stack = ChildStack::new()?;
        let args = VforkArgs { exec, err };
        // SAFETY: the child runs `vfork_child` on `stack` with `args`, both alive until
        // `clone` returns; CLONE_VFORK holds this thread until the child has executed or
        // exited, and the child writes nothing of the shared memory but its own stack.
        let pid = unsafe {
            libc::clone(
                vfork_child,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                std::ptr::from_ref(&args).cast_mut().cast(),
            )
        };
        // The errno first: unmapping the stack could overwrite it.
        let started = if pid < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(pid)
        };
        drop(stack);
        started
    }

    impl ChildExec {
        /// Whether the child may run in the parent's memory until `execve` ([`vfork_exec`]).
        /// Not when it enters a user namespace for the masks: `unshare(CLONE_NEWUSER)` refuses
        /// a process that shares its memory, and `PR_SET_DUMPABLE` would change the parent's
        /// too (root's mount namespace alone is fine). Not when it takes the terminal's
        /// foreground: a Ctrl-Z in the instant between unblocking signals and `execve` would
        /// stop it there, and the parent, held until the child executes, could not continue
        /// it ([`fork`]'s parent does).
        pub(crate) fn may_share_memory(&self) -> bool {
            let user_namespace = self
                .mask_namespace
                .as_ref()
                .is_some_and(|masks| masks.user_namespace);
            !user_namespace && self.tty.is_none()
        }

        /// The child between `fork` and `execve`. Only async-signal-safe system calls on data
        /// prepared before the fork: no allocation, no locks, no panics.
        fn run(&self, err_fd: RawFd) -> ! {
            let fail = |step: u32| -> ! {
                let errno = errno();
                let mut buf = [0_u8; 8];
                let (a, b) = buf.split_at_mut(4);
                a.copy_from_slice(&step.to_ne_bytes());
                b.copy_from_slice(&errno.to_ne_bytes());
                // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is on the
                // stack.
                unsafe {
                    libc::write(err_fd, buf.as_ptr().cast(), buf.len());
                    libc::_exit(127)
                }
            };
            // SAFETY: every call below is an async-signal-safe system call wrapper; pointers
            // come from CStrings and vectors owned by `self`, which stay alive until execve or
            // _exit (in the forked child's copy of memory, or in the parent's, held by
            // CLONE_VFORK). Only the child runs this ([`fork_exec`]), with a descriptor table
            // of its own, so replacing descriptors with dup2 cannot pull one from under a Rust
            // object that keeps using it.
            unsafe {
                // Signals stay blocked (inherited mask) until just before execve; dispositions
                // the supervisor changed go back to the default (execve keeps ignored signals
                // ignored).
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
                    set_errno(libc::ESRCH);
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
                if let Some(masks) = &self.mask_namespace
                    && let Err(step) = enter_mask_namespace(masks, self.parent)
                {
                    fail(step);
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
                    self.argv.pointers.as_ptr(),
                    self.envp.pointers.as_ptr(),
                );
                fail(7)
            }
        }
    }

    /// The child's [`MaskNamespace`] steps; `Err` is the index of the step that failed (in
    /// [`CHILD_STEPS`]), with `errno` still set.
    ///
    /// # Safety
    /// Only in the forked child, before `execve`: async-signal-safe system calls on `masks`,
    /// which the child's copy of memory keeps alive.
    unsafe fn enter_mask_namespace(masks: &MaskNamespace, parent: libc::pid_t) -> Result<(), u32> {
        const NAMESPACES: u32 = 8;
        const MOUNT: u32 = 9;
        let write_file = |path: &std::ffi::CStr, bytes: &[u8]| -> bool {
            // SAFETY: a NUL-terminated path and a buffer that outlive the calls.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return false;
                }
                let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
                libc::close(fd);
                usize::try_from(written) == Ok(bytes.len())
            }
        };
        // SAFETY: system calls on NUL-terminated strings and descriptors owned by `masks`.
        unsafe {
            // A process that is not dumpable (the supervisor is not) finds its `/proc/self`
            // files owned by root and cannot write its maps: dumpable for those three writes
            // only, then not again until `execve` (which sets it as for any program).
            if !masks.user_namespace {
                // Root mounts in a mount namespace of its own: nothing of this run's masks is
                // in the host's mount table, where another run's bwrap, binding `/` with every
                // mount under it, would meet it and could fail should it go meanwhile.
                if libc::unshare(libc::CLONE_NEWNS) != 0 {
                    return Err(NAMESPACES);
                }
            } else if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0
                || libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0
                || !write_file(c"/proc/self/setgroups", b"deny")
                || !write_file(c"/proc/self/uid_map", &masks.uid_map)
                || !write_file(c"/proc/self/gid_map", &masks.gid_map)
                || libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0
            {
                return Err(NAMESPACES);
            }
            // A new user namespace may clear the parent-death signal: arm it again, and check
            // the supervisor did not go meanwhile.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
                || libc::getppid() != parent
            {
                return Err(NAMESPACES);
            }
            // Nothing mounted here may reach the host's mounts (usually shared).
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ) != 0
            {
                return Err(NAMESPACES);
            }
            let device = libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if device < 0 {
                return Err(MOUNT);
            }
            if libc::dup3(device, masks.device_fd, libc::O_CLOEXEC) < 0 {
                return Err(MOUNT);
            }
            libc::close(device);
            if libc::mount(
                c"palisade-mask".as_ptr(),
                masks.mountpoint.as_ptr(),
                c"fuse.palisade-mask".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                masks.options.as_ptr().cast(),
            ) != 0
            {
                return Err(MOUNT);
            }
            if super::super::send_fd(masks.socket, masks.device_fd).is_err() {
                return Err(MOUNT);
            }
        }
        Ok(())
    }

    /// Writes `n` in decimal into `buf` (no allocation; async-signal-safe) and returns the
    /// length.
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

    #[cfg(test)]
    mod tests {
        #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
        use super::*;

        fn exec(tty: Option<RawFd>, user_namespace: Option<bool>) -> ChildExec {
            ChildExec {
                program: c"/bin/true".into(),
                argv: ExecStrings::new(vec![c"true".into()]),
                envp: ExecStrings::new(Vec::new()),
                cwd: None,
                cgroup_procs: Vec::new(),
                rlimits: Vec::new(),
                moves: Vec::new(),
                cloexec: Vec::new(),
                fd_limit: 1024,
                parent: 1,
                tty,
                mask_namespace: user_namespace.map(|user_namespace| MaskNamespace {
                    user_namespace,
                    uid_map: Vec::new(),
                    gid_map: Vec::new(),
                    mountpoint: c"/m".into(),
                    options: c"fd=9".into(),
                    device_fd: 9,
                    socket: 10,
                }),
            }
        }

        #[test]
        fn the_child_shares_memory_unless_it_enters_a_user_namespace_or_takes_the_terminal() {
            assert!(exec(None, None).may_share_memory());
            // Root's masks: a mount namespace alone.
            assert!(exec(None, Some(false)).may_share_memory());
            assert!(!exec(None, Some(true)).may_share_memory());
            assert!(!exec(Some(0), None).may_share_memory());
            assert!(!exec(Some(0), Some(false)).may_share_memory());
        }

        #[test]
        fn decimal_formatting_without_allocation() {
            let mut buf = [0_u8; 16];
            for n in [0_u32, 7, 10, 4_194_304, u32::MAX] {
                let len = format_decimal(n, &mut buf);
                assert_eq!(std::str::from_utf8(&buf[..len]).unwrap(), n.to_string());
            }
        }
    }
}
