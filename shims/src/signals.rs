//! The signals a supervisor waits for, as bytes on a pipe: SIGINT, SIGTERM and SIGHUP (to
//! forward to the command) and SIGCHLD (a child changed state), written by an
//! async-signal-safe handler to a non-blocking self-pipe, so the supervision loop can sleep in
//! `poll(2)` until a signal or its next deadline. Portable Unix: shared by the Linux supervisor
//! ([`crate::supervise`]) and the process-group supervisor ([`crate::pgroup`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The signals the pipe reports.
const HANDLED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD];

/// The write end of the current run's pipe, for the handler; -1 between runs.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// The installed handlers and their pipe; dropping it restores the previous handlers.
pub(crate) struct SignalPipe {
    read: OwnedFd,
    _write: OwnedFd,
    previous: Vec<(i32, libc::sigaction)>,
}

impl SignalPipe {
    /// Installs the handlers (one run at a time: callers serialise runs).
    pub(crate) fn install() -> io::Result<Self> {
        let (read, write) = pipe_nonblocking()?;
        SIGNAL_PIPE.store(write.as_raw_fd(), Ordering::SeqCst);
        let mut previous = Vec::new();
        for signal in HANDLED {
            match install_handler(signal) {
                Ok(old) => previous.push((signal, old)),
                Err(e) => {
                    SIGNAL_PIPE.store(-1, Ordering::SeqCst);
                    for (signal, old) in &previous {
                        restore_handler(*signal, old);
                    }
                    return Err(e);
                }
            }
        }
        Ok(SignalPipe {
            read,
            _write: write,
            previous,
        })
    }

    /// Signals received since the last call, in order.
    pub(crate) fn drain(&self) -> Vec<i32> {
        let mut out = Vec::new();
        let mut buf = [0_u8; 64];
        while let Some(n) = read_nonblocking(self.read.as_raw_fd(), &mut buf) {
            out.extend(buf.iter().take(n).map(|b| i32::from(*b)));
        }
        out
    }

    /// Waits until a signal arrives or `timeout` passes.
    pub(crate) fn wait(&self, timeout: Duration) {
        poll_readable(self.read.as_raw_fd(), timeout);
    }
}

impl Drop for SignalPipe {
    fn drop(&mut self) {
        SIGNAL_PIPE.store(-1, Ordering::SeqCst);
        for (signal, old) in &self.previous {
            restore_handler(*signal, old);
        }
    }
}

/// A libc return value as a `Result`: negative means `errno` says why. Shared by the
/// supervisors' system-call wrappers.
pub(crate) fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

#[allow(unsafe_code)]
fn pipe_nonblocking() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: pipe writes two descriptors into the array.
    check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
    // SAFETY: both descriptors were just created by pipe and are owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
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

#[allow(unsafe_code)]
fn read_nonblocking(fd: RawFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: the buffer is valid for buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).ok().filter(|n| *n > 0)
}

#[allow(unsafe_code)]
fn poll_readable(fd: RawFd, timeout: Duration) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // Round up so a sub-millisecond remainder does not spin.
    let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
    // SAFETY: one valid pollfd; a signal interrupting poll (EINTR) is simply a wake-up.
    unsafe { libc::poll(&mut pfd, 1, ms) };
}

/// Writes the signal number to the run's pipe. Async-signal-safe: an atomic load and
/// write(2); errno is saved and restored around it.
extern "C" fn on_signal(signal: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = u8::try_from(signal).unwrap_or(0);
        let saved = errno();
        #[allow(unsafe_code)]
        // SAFETY: write(2) of one byte from the stack to a non-blocking pipe.
        unsafe {
            libc::write(fd, std::ptr::from_ref(&byte).cast(), 1);
        }
        set_errno(saved);
    }
}

#[allow(unsafe_code)]
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

#[allow(unsafe_code)]
fn errno() -> libc::c_int {
    // SAFETY: the thread's errno slot is always valid.
    unsafe { *errno_location() }
}

#[allow(unsafe_code)]
fn set_errno(value: libc::c_int) {
    // SAFETY: the thread's errno slot is always valid.
    unsafe { *errno_location() = value }
}

/// Installs [`on_signal`] for `signal` (restarting interrupted system calls; for SIGCHLD, no
/// report when a child merely stops or continues: the supervisors find stops by waiting).
#[allow(unsafe_code)]
fn install_handler(signal: i32) -> io::Result<libc::sigaction> {
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
        Ok(old)
    }
}

#[allow(unsafe_code)]
fn restore_handler(signal: i32, old: &libc::sigaction) {
    // SAFETY: restores an action sigaction returned earlier.
    unsafe {
        libc::sigaction(signal, old, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_signal_arrives_as_its_number_and_handlers_are_restored() {
        // Handlers are process-wide: not while a supervisor in another test has its own.
        let _guard = crate::supervise::RUN_LOCK
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // SIGHUP to ourselves: harmless while the pipe's handler is installed.
        let before = install_handler(libc::SIGHUP).unwrap();
        restore_handler(libc::SIGHUP, &before);
        let pipe = SignalPipe::install().unwrap();
        #[allow(unsafe_code)]
        // SAFETY: raise(3) with a handled signal.
        unsafe {
            libc::raise(libc::SIGHUP);
        }
        pipe.wait(Duration::from_secs(5));
        assert_eq!(pipe.drain(), [libc::SIGHUP]);
        assert!(pipe.drain().is_empty());
        drop(pipe);
        assert_eq!(SIGNAL_PIPE.load(Ordering::SeqCst), -1);
    }
}
