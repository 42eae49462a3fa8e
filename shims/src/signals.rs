//! The signals a supervisor waits for, as bytes on a pipe: SIGINT, SIGTERM and SIGHUP (to
//! forward to the command) and SIGCHLD (a child changed state), written by an
//! async-signal-safe handler to a non-blocking self-pipe, so the supervision loop can sleep in
//! `poll(2)` until a signal or its next deadline. Portable Unix: shared by the Linux supervisor
//! ([`crate::supervise`]) and the process-group supervisor ([`crate::pgroup`]). The handler
//! itself is [`crate::sys`]'s.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use crate::sys::{self, SavedAction};

/// The signals the pipe reports.
const HANDLED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD];

/// The installed handlers and their pipe; dropping it restores the previous handlers and the
/// previous pipe (an [`Interrupts`] the supervisor ran inside of keeps receiving).
pub(crate) struct SignalPipe {
    read: OwnedFd,
    _write: OwnedFd,
    previous: Vec<(i32, SavedAction)>,
    previous_pipe: std::os::fd::RawFd,
}

impl SignalPipe {
    /// Installs the handlers (one run at a time: callers serialise runs).
    pub(crate) fn install() -> io::Result<Self> {
        let (read, write) = sys::pipe_nonblocking()?;
        let previous_pipe = sys::signal_pipe();
        sys::set_signal_pipe(write.as_raw_fd());
        let mut previous = Vec::new();
        for signal in HANDLED {
            match sys::install_pipe_handler(signal) {
                Ok(old) => previous.push((signal, old)),
                Err(e) => {
                    sys::set_signal_pipe(previous_pipe);
                    for (signal, old) in &previous {
                        sys::restore_handler(*signal, old);
                    }
                    return Err(e);
                }
            }
        }
        Ok(SignalPipe {
            read,
            _write: write,
            previous,
            previous_pipe,
        })
    }

    /// Signals received since the last call, in order.
    pub(crate) fn drain(&self) -> Vec<i32> {
        let mut out = Vec::new();
        let mut buf = [0_u8; 64];
        while let Some(n) = sys::read_nonblocking(&self.read, &mut buf) {
            out.extend(buf.iter().take(n).map(|b| i32::from(*b)));
        }
        out
    }

    /// Waits until a signal arrives, `also` (when given) is readable or hung up, or `timeout`
    /// passes.
    pub(crate) fn wait(&self, timeout: Duration, also: Option<std::os::fd::RawFd>) {
        match also {
            None => {
                sys::poll_readable(self.read.as_raw_fd(), timeout);
            }
            Some(fd) => sys::poll_either(self.read.as_raw_fd(), fd, timeout),
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP received by a launcher before (and after) its supervisor takes
/// over: instead of dying of the signal mid-setup (leaving its temp directory, a decision
/// without an outcome), the launcher checks [`Interrupts::received`] at its safe points and
/// stops there, cleanly. While a supervisor runs, its own handlers take the signals and forward
/// them to the command; this pipe receives again once the supervisor is done.
pub struct Interrupts {
    pipe: SignalPipe,
    seen: Option<i32>,
}

impl Interrupts {
    /// Installs the handlers.
    ///
    /// # Errors
    /// The pipe or a handler could not be set up.
    pub fn install() -> io::Result<Interrupts> {
        Ok(Interrupts {
            pipe: SignalPipe::install()?,
            seen: None,
        })
    }

    /// The first interrupt received so far (SIGINT, SIGTERM or SIGHUP), if any.
    pub fn received(&mut self) -> Option<i32> {
        if self.seen.is_none() {
            self.seen = self
                .pipe
                .drain()
                .into_iter()
                .find(|s| matches!(*s, libc::SIGINT | libc::SIGTERM | libc::SIGHUP));
        }
        self.seen
    }
}

impl Drop for SignalPipe {
    fn drop(&mut self) {
        sys::set_signal_pipe(self.previous_pipe);
        for (signal, old) in &self.previous {
            sys::restore_handler(*signal, old);
        }
    }
}

/// Sends SIGKILL to every process in group `pgid` (a helper the launcher started in a group of
/// its own, such as `run --approve-with`'s approver). Refuses group ids below 2, which would
/// name the caller's own group or every process it may signal.
pub fn kill_process_group(pgid: i32) -> io::Result<()> {
    if pgid < 2 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    sys::killpg(pgid, libc::SIGKILL)
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
        let before = sys::install_pipe_handler(libc::SIGHUP).unwrap();
        sys::restore_handler(libc::SIGHUP, &before);
        let pipe = SignalPipe::install().unwrap();
        sys::raise(libc::SIGHUP);
        pipe.wait(Duration::from_secs(5), None);
        assert_eq!(pipe.drain(), [libc::SIGHUP]);
        assert!(pipe.drain().is_empty());
        drop(pipe);
        assert_eq!(sys::signal_pipe(), -1);
    }
}
