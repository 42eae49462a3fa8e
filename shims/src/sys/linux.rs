//! The Linux-only system calls: prctl, pidfds, `wait4`/`waitid` with `__WALL`, memfds,
//! `close_range`, namespaces, the sandbox's `/proc` mount, capabilities, Landlock's ABI query,
//! `O_PATH` opens and seccomp.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::sock_filter::Instruction;
use super::{check, set_rlimit};

// ---------------------------------------------------------------------------------------------
// Processes.

/// Forks. In the child (returns 0) only async-signal-safe calls may follow when the process has
/// other threads.
pub(crate) fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: fork has no memory-safety preconditions; callers restrict the child to
    // async-signal-safe calls (or are single-threaded).
    check(unsafe { libc::fork() })
}

pub(crate) fn getppid() -> libc::pid_t {
    // SAFETY: no preconditions.
    unsafe { libc::getppid() }
}

/// `_exit`: ends the process without running exit handlers or flushing stdio buffers a forked
/// child shares with its parent.
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and does not return.
    unsafe { libc::_exit(code) }
}

pub(crate) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes flags only.
    check(unsafe { libc::unshare(flags) }).map(drop)
}

/// `prctl(PR_SET_DUMPABLE, on)`. Not dumpable, a process's `/proc/<pid>` entries that need
/// ptrace access (`mem`, `environ`, `fd`, `maps`, …) and ptrace itself are closed to every
/// process without `CAP_SYS_PTRACE`, same uid included; `execve` of a readable file resets it.
pub(crate) fn set_dumpable(on: bool) -> io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes an integer flag.
    check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, libc::c_ulong::from(on), 0, 0, 0) }).map(drop)
}

pub(crate) fn child_subreaper() -> io::Result<bool> {
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

pub(crate) fn set_child_subreaper(on: bool) -> io::Result<()> {
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
pub(crate) fn set_parent_death_signal(signal: i32) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) })
        .map(drop)
}

pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this descriptor; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn pidfd_send_signal(fd: &OwnedFd, signal: i32) -> io::Result<()> {
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

// ---------------------------------------------------------------------------------------------
// Waiting.

/// A child reaped by [`wait_any`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reaped {
    pub pid: libc::pid_t,
    pub status: i32,
    /// User + system time of the child and of its reaped descendants, in clock ticks.
    pub cpu_ticks: u64,
}

/// `wait4(-1)`: a reaped child, or `None` when none has exited (`nohang`) or none exists.
pub(crate) fn wait_any(nohang: bool) -> Option<Reaped> {
    wait4_any(if nohang { libc::WNOHANG } else { 0 })
}

/// Non-blocking `wait4(-1, WUNTRACED)`: a reaped child, or a stopped one (`WIFSTOPPED` status,
/// not reaped), or `None`.
pub(crate) fn wait_any_or_stopped() -> Option<Reaped> {
    wait4_any(libc::WNOHANG | libc::WUNTRACED)
}

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
pub(crate) fn has_no_children() -> bool {
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
pub(crate) fn wait_pid(pid: libc::pid_t) -> io::Result<i32> {
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

/// Consumes a pending "stopped" report of child `pid`; whether there was one.
pub(crate) fn take_stop_report(pid: libc::pid_t) -> bool {
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

pub(crate) fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).unwrap_or(100)
}

pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

// ---------------------------------------------------------------------------------------------
// Signals.

/// Blocks every signal in the calling thread; returns the previous mask.
pub(crate) fn block_all_signals() -> io::Result<libc::sigset_t> {
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

/// Whether `signal` is pending for the calling thread (sent while blocked, not yet delivered).
pub(crate) fn signal_pending(signal: i32) -> bool {
    // SAFETY: the set is initialised by sigemptyset, filled by sigpending, read by sigismember.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigpending(&mut set) == 0 && libc::sigismember(&set, signal) == 1
    }
}

pub(crate) fn restore_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: `mask` is an initialised signal set (from pthread_sigmask).
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// Sets `signal`'s disposition to ignore or default.
pub(crate) fn set_disposition(signal: i32, ignore: bool) {
    let handler = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: SIG_IGN / SIG_DFL are valid dispositions.
    unsafe { libc::signal(signal, handler) };
}

/// Re-raises `signal` on the calling process with its default action (core dumps off).
pub(crate) fn raise_default(signal: i32) {
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
pub(crate) fn reset_all_signals() {
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

// ---------------------------------------------------------------------------------------------
// Descriptors.

fn pipe_with(flags: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), flags) })?;
    let [read, write] = fds;
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(read), OwnedFd::from_raw_fd(write)) })
}

pub(crate) fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    pipe_with(libc::O_CLOEXEC)
}

pub(crate) fn dup_cloexec_at_least(fd: RawFd, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC only reads `fd`; the result is a new descriptor we own.
    let new = check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) })?;
    // SAFETY: `new` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// The soft descriptor limit (for the close-on-exec fallback walk), capped at 2^20.
pub(crate) fn fd_limit() -> i32 {
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

/// Reads the child's pre-exec failure report: `None` on EOF (execve succeeded).
pub(crate) fn read_child_error(fd: RawFd) -> Option<(u32, i32)> {
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

/// Whether every write end of the pipe `read` is closed (the peer is gone).
pub(crate) fn peer_closed(read: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: read.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let r = unsafe { libc::poll(&mut pfd, 1, 0) };
    r > 0 && pfd.revents & libc::POLLHUP != 0
}

/// `close_range(first, ~0, 0)`: closes every descriptor from `first` up. The caller holds
/// none of them as an owned value.
pub(crate) fn close_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range only closes descriptors and takes no memory; the caller owns no
    // `OwnedFd` or `File` for these numbers, so none is closed twice.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Marks every descriptor from `first` up close-on-exec.
pub(crate) fn cloexec_from(first: u32) -> io::Result<()> {
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

/// Takes ownership of descriptor `fd`, inherited at a number agreed with the parent, after
/// checking it is open (by marking it close-on-exec, so the command never inherits it).
pub(crate) fn take_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_SETFD only changes descriptor flags; EBADF if `fd` is not open.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) })?;
    // SAFETY: the descriptor is open (F_SETFD succeeded), and nothing else in the process owns
    // it: it is a number the parent passed (init's spec and report descriptors), read once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn memfd_create(name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: a valid NUL-terminated name and flags.
    let fd = check(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: the kernel just returned this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC)`, retried on `EINTR`: a handle on the path
/// itself that never follows a symlink in its last component.
/// The FUSE filesystems' `f_type` (`FUSE_SUPER_MAGIC`).
pub(crate) const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// `fstatfs(fd).f_type`: which kind of filesystem `fd` (an `O_PATH` descriptor will do) is on.
pub(crate) fn filesystem_type(fd: BorrowedFd<'_>) -> io::Result<i64> {
    // SAFETY: an all-zero `statfs` is a valid value of a plain C struct.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` is a valid, writable struct that outlives the call; a wrong descriptor is
    // EBADF, never memory unsafety.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), &raw mut stat) })?;
    #[allow(
        clippy::cast_lossless,
        clippy::useless_conversion,
        reason = "c_long or i64 by target"
    )]
    Ok(i64::from(stat.f_type))
}

pub(crate) fn open_path_nofollow(path: &Path) -> io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call; these
        // flags take no mode argument.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by open(2), is valid and owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Mounts (in a mount namespace of the sandbox's own).

/// `mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL)`: from now on no mount made in this
/// namespace propagates back to the one it was copied from (the host's, whose mounts are often
/// shared), while the host's later mounts still show here.
pub(crate) fn make_mounts_slave() -> io::Result<()> {
    // SAFETY: constant NUL-terminated target, null source, type and data.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// `mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)`: a fresh procfs for
/// the caller's PID namespace over the one inherited.
pub(crate) fn mount_proc() -> io::Result<()> {
    // SAFETY: constant NUL-terminated strings, no data.
    check(unsafe {
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// `mount("palisade-mask", target, "fuse.palisade-mask", MS_NOSUID | MS_NODEV, options)`: a
/// FUSE filesystem served through the `/dev/fuse` descriptor `options` names (`fd=N,…`).
/// Needs `CAP_SYS_ADMIN` (root); others go through `fusermount3`.
pub(crate) fn mount_fuse(target: &Path, options: &str) -> io::Result<()> {
    let target = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let options = CString::new(options).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: NUL-terminated strings that outlive the call.
    check(unsafe {
        libc::mount(
            c"palisade-mask".as_ptr(),
            target.as_ptr(),
            c"fuse.palisade-mask".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    })
    .map(drop)
}

/// `mount(source, target, NULL, MS_BIND, NULL)`: `source` (not recursively) also at
/// `target`, in the caller's mount namespace.
pub(crate) fn bind_mount(source: &Path, target: &Path) -> io::Result<()> {
    let c = |path: &Path| {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    };
    let (source, target) = (c(source)?, c(target)?);
    // SAFETY: NUL-terminated strings that outlive the call; no filesystem type or data.
    check(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// `umount2(target, MNT_DETACH | UMOUNT_NOFOLLOW)`: the mount leaves the tree now and goes
/// once nothing uses it.
pub(crate) fn unmount_detach(target: &Path) -> io::Result<()> {
    let target = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path that outlives the call.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) })
        .map(drop)
}

// ---------------------------------------------------------------------------------------------
// Executing.

pub(crate) fn chdir(dir: &CStr) -> io::Result<()> {
    // SAFETY: a valid NUL-terminated path.
    check(unsafe { libc::chdir(dir.as_ptr()) }).map(drop)
}

/// `execve`; returns only on failure, with the error. Allocates (the pointer arrays): for a
/// single-threaded process, not between `fork` and `execve` of a multi-threaded one.
pub(crate) fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    let argv = null_terminated(argv);
    let envp = null_terminated(envp);
    // SAFETY: NUL-terminated strings and NULL-terminated pointer arrays that outlive the call
    // (execve copies them into the new image).
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    io::Error::last_os_error()
}

/// The NULL-terminated array of pointers into `strings` that `execve` takes; valid as long as
/// `strings` is.
pub(crate) fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The terminal.

/// Whether the supervisor's process group is the terminal's foreground.
pub(crate) fn owns_tty(fd: RawFd) -> bool {
    // SAFETY: tcgetpgrp/getpgrp only read state.
    unsafe { libc::tcgetpgrp(fd) == libc::getpgrp() }
}

/// Puts the supervisor's process group back in the terminal's foreground.
pub(crate) fn reclaim_tty(fd: RawFd) {
    super::give_tty(fd, super::getpgrp());
}

// ---------------------------------------------------------------------------------------------
// Confinement: capabilities, Landlock, seccomp.

/// Empties the bounding, ambient, inheritable, permitted and effective capability sets and locks
/// `SECBIT_NOROOT`, so neither this process nor anything it executes (uid 0 included) holds a
/// capability. Only raw syscalls: this runs between fork and exec.
pub(crate) fn drop_all_capabilities() -> io::Result<()> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let check = |result: libc::c_int| {
        if result == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // The highest capability this kernel knows, from /proc would allocate; probe instead.
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only; EINVAL past the last capability.
        let result = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if result != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            // Without CAP_SETPCAP (not root) the bounding set cannot be changed; there is
            // nothing in the permitted set to lose either, checked below.
            if error.raw_os_error() == Some(libc::EPERM) {
                break;
            }
            return Err(error);
        }
    }
    // SAFETY: prctl with integer arguments only.
    check(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: prctl with integer arguments only. Fails with EPERM without CAP_SETPCAP, in
    // which case the process has no capabilities to regain anyway (checked below).
    let _ = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) };
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and data are valid for the v3 ABI (two data structs).
    check(unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) as libc::c_int })?;
    // Verify: nothing left in the permitted set.
    let mut now = [Data {
        effective: 1,
        permitted: 1,
        inheritable: 1,
    }; 2];
    // SAFETY: as above, capget writes two data structs.
    check(unsafe {
        libc::syscall(libc::SYS_capget, &mut header, now.as_mut_ptr()) as libc::c_int
    })?;
    if now
        .iter()
        .any(|d| d.permitted != 0 || d.effective != 0 || d.inheritable != 0)
    {
        return Err(io::Error::other("capabilities remain after capset"));
    }
    Ok(())
}

/// The running kernel's Landlock ABI version (`landlock_create_ruleset(NULL, 0, VERSION)`): the
/// raw non-negative answer, or the kernel's error.
pub(crate) fn landlock_abi_version() -> io::Result<libc::c_long> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with the VERSION flag the kernel reads no attribute (NULL pointer, size 0) and
    // only returns the ABI version or an error; no memory is shared.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(version)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`. Allocates nothing.
pub(crate) fn set_no_new_privs() -> io::Result<()> {
    let one: libc::c_ulong = 1;
    let zero: libc::c_ulong = 0;
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, zero, zero, zero) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

// `Instruction` must be the kernel's `struct sock_filter` (u16, u8, u8, u32) for the cast below.
const _: () = assert!(
    size_of::<Instruction>() == size_of::<libc::sock_filter>()
        && align_of::<Instruction>() == align_of::<libc::sock_filter>()
);

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, program)` on the calling thread. Allocates nothing.
pub(crate) fn seccomp_set_mode_filter(instructions: &[Instruction]) -> io::Result<()> {
    let len = u16::try_from(instructions.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fprog = libc::sock_fprog {
        len,
        // The kernel only reads through this pointer (`sock_fprog` is not const-correct).
        filter: instructions.as_ptr().cast::<libc::sock_filter>().cast_mut(),
    };
    let flags: libc::c_ulong = 0;
    // SAFETY: `Instruction` is `#[repr(C)]` with the same fields, sizes and order as the
    // kernel's `struct sock_filter` (u16, u8, u8, u32; size and alignment asserted above),
    // `fprog.filter` points at `len` of them, and both outlive the call, during which the
    // kernel copies the program.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            std::ptr::from_ref(&fprog),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, program)`: installs the
/// filter and returns its notification listener (close-on-exec). Allocates nothing.
pub(crate) fn seccomp_set_mode_filter_listener(
    instructions: &[Instruction],
) -> io::Result<OwnedFd> {
    let len = u16::try_from(instructions.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fprog = libc::sock_fprog {
        len,
        filter: instructions.as_ptr().cast::<libc::sock_filter>().cast_mut(),
    };
    // SAFETY: as in `seccomp_set_mode_filter`; with NEW_LISTENER the kernel returns a new
    // descriptor, which nothing else owns.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            std::ptr::from_ref(&fprog),
        )
    };
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One seccomp user notification: a call the filter stopped, waiting for its answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SeccompNotif {
    pub(crate) id: u64,
    pub(crate) pid: u32,
    pub(crate) nr: i32,
    pub(crate) arch: u32,
    pub(crate) args: [u64; 6],
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_RECV)`: the next stopped call (blocks unless the listener polled
/// readable).
pub(crate) fn seccomp_notif_recv(listener: &OwnedFd) -> io::Result<SeccompNotif> {
    // SAFETY: an all-zero `seccomp_notif` is valid (plain integers), and the kernel requires
    // the buffer zeroed.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl writes one `seccomp_notif` (its size is encoded in the request) into
    // the buffer, which outlives the call.
    check(unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            std::ptr::from_mut(&mut notif),
        )
    })?;
    Ok(SeccompNotif {
        id: notif.id,
        pid: notif.pid,
        nr: notif.data.nr,
        arch: notif.data.arch,
        args: notif.data.args,
    })
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_SEND)` answering call `id` with `-errno`. Never with
/// `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: this wrapper cannot let a stopped call run.
pub(crate) fn seccomp_notif_send_error(listener: &OwnedFd, id: u64, errno: i32) -> io::Result<()> {
    seccomp_notif_send(
        listener,
        libc::seccomp_notif_resp {
            id,
            val: 0,
            error: -errno.abs(),
            flags: 0,
        },
    )
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_SEND)` letting call `id` run (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`).
/// Only for calls the plain program allows and the observed one stops just to look at
/// ([`crate::seccomp::Action::Observe`]): the kernel then runs the call as if no filter had
/// stopped it, and every later check (the network namespace, the mounts) still applies.
pub(crate) fn seccomp_notif_continue(listener: &OwnedFd, id: u64) -> io::Result<()> {
    seccomp_notif_send(
        listener,
        libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        },
    )
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_SEND)` with `response`.
fn seccomp_notif_send(
    listener: &OwnedFd,
    mut response: libc::seccomp_notif_resp,
) -> io::Result<()> {
    // SAFETY: the kernel reads one `seccomp_notif_resp` from the buffer, which outlives the call.
    check(unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            std::ptr::from_mut(&mut response),
        )
    })?;
    Ok(())
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_ID_VALID)`: whether call `id` is still waiting for an answer (so
/// the process memory read for it since was the caller's, not a recycled pid's).
pub(crate) fn seccomp_notif_id_valid(listener: &OwnedFd, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the kernel reads one `u64` from the pointer, which outlives the call.
    let status = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            std::ptr::from_mut(&mut id),
        )
    };
    status == 0
}

/// What is at `path` (absolute) in process `pid`'s own view of the filesystem: resolved inside
/// `/proc/<pid>/root` (`openat2` with `RESOLVE_IN_ROOT`, so its symlinks stay in that root and
/// no magic link is followed), the last component followed as `connect` follows it. `Ok(None)`
/// when nothing is there.
pub(crate) fn file_type_in_view_of(pid: u32, path: &Path) -> io::Result<Option<std::fs::FileType>> {
    let root = std::fs::File::open(format!("/proc/{pid}/root"))?;
    let relative = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // `struct open_how` (libc's is non-exhaustive, so it cannot be built here).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a NUL-terminated path and one `open_how` of the size passed, both outliving the
    // call; the kernel returns a new descriptor or an error.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            relative.as_ptr(),
            &raw const how,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = match i32::try_from(fd) {
        // SAFETY: a descriptor the kernel just returned, owned by nobody else.
        Ok(fd) if fd >= 0 => unsafe { OwnedFd::from_raw_fd(fd) },
        _ => {
            let error = io::Error::last_os_error();
            return match error.raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => Ok(None),
                _ => Err(error),
            };
        }
    };
    Ok(Some(std::fs::File::from(fd).metadata()?.file_type()))
}

/// Reads `buf.len()` bytes at `address` in process `pid` (`process_vm_readv`); returns how many
/// were read. Needs the right to trace it: the observer is the sandbox's ancestor, same user.
pub(crate) fn read_process_memory(pid: u32, address: u64, buf: &mut [u8]) -> io::Result<usize> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: address as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local iovec over `buf` (writable, outlives the call); the remote one is only
    // an address in the other process, which the kernel checks.
    let read = unsafe { libc::process_vm_readv(pid, &raw const local, 1, &raw const remote, 1, 0) };
    usize::try_from(read).map_err(|_| io::Error::last_os_error())
}

/// Sends `fd` over the Unix socket `socket` (`SCM_RIGHTS`, one byte of data). Allocates
/// nothing, so it may run between `fork` and `exec`.
pub(crate) fn send_fd(socket: RawFd, fd: RawFd) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one `int` of ancillary data, aligned as `cmsghdr` requires.
    let mut space = [0u64; 4];
    // SAFETY: a zeroed `msghdr` is valid; every pointer set below points at locals that outlive
    // the call; CMSG_* macros compute offsets within `space`, which is large enough for one
    // `cmsghdr` carrying one `int` (checked against CMSG_SPACE).
    unsafe {
        let cmsg_space = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize;
        if cmsg_space > size_of_val(&space) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = cmsg_space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        if cmsg.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        loop {
            let sent = libc::sendmsg(socket, &raw const msg, libc::MSG_NOSIGNAL);
            if sent >= 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// Receives one descriptor sent by [`send_fd`] (close-on-exec); `None` at end of file (the
/// sender closed without sending).
pub(crate) fn recv_fd(socket: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u64; 4];
    // SAFETY: as in `send_fd`; the kernel writes at most `msg_controllen` bytes into `space`,
    // and a received descriptor is new to this process, owned by nothing else.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&space) as _;
        let received = loop {
            let n = libc::recvmsg(socket.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 {
                break n;
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        };
        if received == 0 {
            return Ok(None);
        }
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other("no descriptor came with the message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(Some(OwnedFd::from_raw_fd(fd)))
    }
}

/// A connected pair of Unix stream sockets, close-on-exec.
pub(crate) fn socketpair_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: the kernel writes two descriptors into `fds`, which nothing else owns.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: two new descriptors, owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
