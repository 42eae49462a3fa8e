//! Thin system-call wrappers, each with the reason it is sound. Everything unsafe in the crate is
//! here: every other module is compiled with `forbid(unsafe_code)` (see the crate root).
//!
//! This file holds what every Unix has (process ids, signals, pipes, `poll`, rlimits, the
//! terminal's foreground, `access`) and the signal handler of the supervisors' self-pipe;
//! [`linux`] holds the Linux-only calls (prctl, pidfds, `wait4` with `__WALL`, memfds,
//! namespaces, capabilities, Landlock, seccomp), `dirat` the calls relative to a held directory
//! (the workspace placeholders'), [`child`] the code that runs in a forked child before
//! `execve`, and `macos` libproc and `sandbox_check`.
//!
//! A wrapper takes and returns owned or borrowed Rust values where it can; where it takes a raw
//! descriptor number, passing a wrong one is a logic error (`EBADF`, or acting on another
//! descriptor of this process), never undefined behaviour. The one exception is
//! `take_inherited_fd`, which takes ownership of a descriptor number: its caller (init, for the
//! descriptors its parent passed at agreed numbers) vouches that nothing else owns it, as its
//! comment says.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

pub(crate) mod child;
#[cfg(target_os = "linux")]
mod dirat;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "macos")]
pub(crate) mod macos;
pub(crate) mod sandbox_check;
pub(crate) mod sock_filter;

pub(crate) use child::*;
#[cfg(target_os = "linux")]
pub(crate) use dirat::*;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;

/// A libc return value as a `Result`: negative means `errno` says why.
pub(crate) fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The `resource` argument of `setrlimit` (glibc declares its own enum type).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) type RlimitResource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) type RlimitResource = libc::c_int;

// ---------------------------------------------------------------------------------------------
// Process ids.

pub(crate) fn getpid() -> libc::pid_t {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() }
}

pub(crate) fn getpgrp() -> libc::pid_t {
    // SAFETY: no preconditions.
    unsafe { libc::getpgrp() }
}

pub(crate) fn getuid() -> libc::uid_t {
    // SAFETY: getuid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::getuid() }
}

pub(crate) fn getgid() -> libc::gid_t {
    // SAFETY: getgid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::getgid() }
}

/// Whether this process has `gid` as its effective group or one of its supplementary groups.
pub(crate) fn in_group(gid: libc::gid_t) -> bool {
    // SAFETY: getegid takes no arguments, touches no memory and cannot fail.
    if unsafe { libc::getegid() } == gid {
        return true;
    }
    // NGROUPS_MAX is 65536 on Linux; ask how many first.
    // SAFETY: a size of 0 asks for the count only; the pointer is not written.
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let Ok(len) = usize::try_from(count) else {
        return false;
    };
    let mut groups: Vec<libc::gid_t> = vec![0; len];
    // SAFETY: the buffer holds `count` gid_t values; getgroups writes at most that many.
    let got = unsafe { libc::getgroups(count, groups.as_mut_ptr()) };
    usize::try_from(got).is_ok_and(|got| groups.iter().take(got).any(|&g| g == gid))
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
pub(crate) fn geteuid() -> libc::uid_t {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

// ---------------------------------------------------------------------------------------------
// Signals and waiting.

/// `kill(pid, signal)` for one process: never a broadcast (`pid` -1) or a signal to a group
/// (`pid` <= 0), which are refused with `EINVAL`.
pub(crate) fn kill(pid: libc::pid_t, signal: i32) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill has no memory-safety preconditions; pid > 0 targets one process.
    check(unsafe { libc::kill(pid, signal) }).map(drop)
}

/// `killpg(pgid, signal)` for one process group other than init's (`pgid` <= 1 is refused with
/// `EINVAL`).
pub(crate) fn killpg(pgid: libc::pid_t, signal: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: killpg has no memory-safety preconditions; pgid > 1 is one group.
    check(unsafe { libc::killpg(pgid, signal) }).map(drop)
}

/// `raise(signal)`: the signal to the calling thread, delivered before this returns.
#[cfg(test)]
pub(crate) fn raise(signal: i32) {
    // SAFETY: raise(3) takes a signal number only.
    unsafe {
        libc::raise(signal);
    }
}

/// Reaps `pid` if it has exited: its raw wait status and the CPU time it (and the children it
/// reaped) used.
pub(crate) fn wait_nohang(pid: libc::pid_t) -> Option<(i32, Duration)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 writes into both locals.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals; WNOHANG never blocks; pid > 0 names our child.
    let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    if r != pid {
        return None;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    Some((status, tv(usage.ru_utime) + tv(usage.ru_stime)))
}

// ---------------------------------------------------------------------------------------------
// The signal self-pipe: the handler writes the signal number to a non-blocking pipe.

/// The write end of the current run's pipe, for the handler; -1 between runs.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// Where [`install_pipe_handler`]'s handler writes from now on (-1: nowhere).
pub(crate) fn set_signal_pipe(fd: RawFd) {
    SIGNAL_PIPE.store(fd, Ordering::SeqCst);
}

/// Where the handler writes now (-1: nowhere).
pub(crate) fn signal_pipe() -> RawFd {
    SIGNAL_PIPE.load(Ordering::SeqCst)
}

/// Writes the signal number to the run's pipe. Async-signal-safe: an atomic load and
/// write(2); errno is saved and restored around it.
extern "C" fn on_signal(signal: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = u8::try_from(signal).unwrap_or(0);
        let saved = errno();
        // SAFETY: write(2) of one byte from the stack to a non-blocking pipe.
        unsafe {
            libc::write(fd, std::ptr::from_ref(&byte).cast(), 1);
        }
        set_errno(saved);
    }
}

fn errno_location() -> *mut libc::c_int {
    // SAFETY: returns the calling thread's errno slot; no preconditions.
    #[cfg(target_vendor = "apple")]
    unsafe {
        libc::__error()
    }
    // SAFETY: as above.
    #[cfg(not(target_vendor = "apple"))]
    unsafe {
        libc::__errno_location()
    }
}

/// The calling thread's `errno`. Async-signal-safe.
pub(crate) fn errno() -> libc::c_int {
    // SAFETY: the thread's errno slot is always valid.
    unsafe { *errno_location() }
}

/// Sets the calling thread's `errno`. Async-signal-safe.
pub(crate) fn set_errno(value: libc::c_int) {
    // SAFETY: the thread's errno slot is always valid.
    unsafe { *errno_location() = value }
}

/// A signal's previous action, as [`install_pipe_handler`] found it: only ever handed back to
/// [`restore_handler`], never built elsewhere (so no arbitrary handler address is installed).
pub(crate) struct SavedAction(libc::sigaction);

/// Installs the self-pipe handler for `signal` (restarting interrupted system calls; for
/// SIGCHLD, no report when a child merely stops or continues: the supervisors find stops by
/// waiting). Returns the previous action.
pub(crate) fn install_pipe_handler(signal: i32) -> io::Result<SavedAction> {
    // SAFETY: a zeroed sigaction with an empty mask and a handler that only makes
    // async-signal-safe calls; the old action is written into a local.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART
            | if signal == libc::SIGCHLD {
                libc::SA_NOCLDSTOP
            } else {
                0
            };
        libc::sigemptyset(&mut action.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        check(libc::sigaction(signal, &action, &mut old))?;
        Ok(SavedAction(old))
    }
}

/// Puts back the action [`install_pipe_handler`] replaced.
pub(crate) fn restore_handler(signal: i32, old: &SavedAction) {
    // SAFETY: restores an action sigaction returned earlier.
    unsafe {
        libc::sigaction(signal, &old.0, std::ptr::null_mut());
    }
}

/// A close-on-exec, non-blocking pipe (read end, write end), made with calls every Unix has.
pub(crate) fn pipe_nonblocking() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: pipe writes two descriptors into the array.
    check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
    let [read, write] = fds;
    // SAFETY: both descriptors were just created by pipe and are owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(read), OwnedFd::from_raw_fd(write)) };
    for fd in [read.as_raw_fd(), write.as_raw_fd()] {
        // SAFETY: fcntl on descriptors we own, with integer arguments.
        unsafe {
            let flags = check(libc::fcntl(fd, libc::F_GETFL))?;
            check(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK))?;
            check(libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC))?;
        }
    }
    Ok((read, write))
}

/// One `read` into `buf`: how many bytes, or `None` at end of file, on error or when a
/// non-blocking descriptor has nothing.
pub(crate) fn read_nonblocking(fd: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: the buffer is valid for buf.len() bytes.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).ok().filter(|n| *n > 0)
}

/// Waits until `fd` is readable (or at end of file) or `timeout` passes; whether it is. A
/// signal interrupting the wait (`EINTR`) is simply a wake-up.
pub(crate) fn poll_readable(fd: RawFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, poll_millis(timeout)) };
    r > 0 && pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}

/// The `revents` of `fd` (`POLLIN`, `POLLHUP`, `POLLERR`) once it has an event, or 0 when
/// `timeout` passes first (or a signal interrupts the wait).
pub(crate) fn poll_events(fd: RawFd, timeout: Duration) -> libc::c_short {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, poll_millis(timeout)) };
    if r > 0 { pfd.revents } else { 0 }
}

/// Waits until `first` or `second` is readable (or at end of file) or `timeout` passes. A
/// signal interrupting the wait is simply a wake-up.
pub(crate) fn poll_either(first: RawFd, second: RawFd, timeout: Duration) {
    let mut pfds = [first, second].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    // SAFETY: two valid pollfds.
    unsafe { libc::poll(pfds.as_mut_ptr(), 2, poll_millis(timeout)) };
}

/// A poll timeout in milliseconds, rounded up so a sub-millisecond remainder does not spin.
fn poll_millis(timeout: Duration) -> libc::c_int {
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    if ms == 0 && !timeout.is_zero() { 1 } else { ms }
}

#[cfg(target_os = "linux")]
/// Waits without a timeout until `first` or `second` has an event; their `revents` (`POLLIN`,
/// `POLLHUP`, `POLLERR`). A signal interrupting the wait is retried.
pub(crate) fn poll_two(first: RawFd, second: RawFd) -> (libc::c_short, libc::c_short) {
    let mut pfds = [
        libc::pollfd {
            fd: first,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: second,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: two valid pollfds.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), 2, -1) };
        if r > 0 {
            let [a, b] = pfds;
            return (a.revents, b.revents);
        }
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // POLLNVAL-like failure: report both as ended rather than spin.
            return (libc::POLLERR, libc::POLLERR);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Limits and descriptors.

/// `setrlimit(resource, soft, hard)`. Async-signal-safe.
pub(crate) fn set_rlimit(resource: RlimitResource, soft: u64, hard: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: a valid rlimit on the stack.
    check(unsafe { libc::setrlimit(resource, &limit) }).map(drop)
}

/// The highest descriptor number worth walking to mark descriptors close-on-exec one by one
/// (`sysconf(_SC_OPEN_MAX)`, clamped to 256..=65536: the limit may be huge).
pub(crate) fn open_max_clamped() -> libc::c_int {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
    libc::c_int::try_from(n.clamp(256, 65_536)).unwrap_or(65_536)
}

/// Marks every descriptor from 3 below `limit` close-on-exec. Async-signal-safe.
pub(crate) fn cloexec_above_stdio(limit: libc::c_int) {
    for fd in 3..limit {
        // SAFETY: fcntl on a descriptor number; EBADF for unused numbers is ignored.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The terminal.

/// The first of stdin/stdout/stderr that is the supervisor's controlling terminal with the
/// supervisor's process group in the foreground.
pub(crate) fn foreground_tty() -> Option<RawFd> {
    (0..=2).find(|fd| {
        // SAFETY: isatty/tcgetpgrp/getpgrp only read state.
        unsafe { libc::isatty(*fd) == 1 && libc::tcgetpgrp(*fd) == libc::getpgrp() }
    })
}

/// Makes process group `pgid` the terminal's foreground, SIGTTOU blocked around it as shells
/// do (so a background process group may move the foreground). Async-signal-safe (used between
/// fork and exec).
pub(crate) fn give_tty(fd: RawFd, pgid: libc::pid_t) {
    // SAFETY: sigset manipulation on locals and tcsetpgrp with integers; SIGTTOU is blocked in
    // this thread only around tcsetpgrp.
    unsafe {
        let mut ttou: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut ttou);
        libc::sigaddset(&mut ttou, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &ttou, &mut old);
        libc::tcsetpgrp(fd, pgid);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

// ---------------------------------------------------------------------------------------------
// Files.

/// Whether `path` is a regular file this process may execute (`access(X_OK)`, following
/// symlinks, as `execve` does); `access`'s error when it refuses, so that a caller can tell
/// nothing there (`ENOENT`, `ENOTDIR`) without asking again.
pub(crate) fn is_executable_file(path: &Path) -> Result<bool, io::Error> {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return Ok(false);
    };
    // SAFETY: a valid NUL-terminated path that outlives the call.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(path.is_file())
}
