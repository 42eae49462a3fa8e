//! Processes and waiting for them: fork, namespaces, the subreaper, pidfds, `wait4` with `__WALL`.

#[allow(unused_imports, reason = "the Linux calls share one import list")]
use super::*;
use crate::sys::check;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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

pub(super) fn wait4_any(flags: libc::c_int) -> Option<Reaped> {
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
