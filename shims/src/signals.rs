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

/// The installed handlers and their pipe; dropping it restores the previous handlers.
pub(crate) struct SignalPipe {
    read: OwnedFd,
    _write: OwnedFd,
    previous: Vec<(i32, SavedAction)>,
}

impl SignalPipe {
    /// Installs the handlers (one run at a time: callers serialise runs).
    pub(crate) fn install() -> io::Result<Self> {
        let (read, write) = sys::pipe_nonblocking()?;
        sys::set_signal_pipe(write.as_raw_fd());
        let mut previous = Vec::new();
        for signal in HANDLED {
            match sys::install_pipe_handler(signal) {
                Ok(old) => previous.push((signal, old)),
                Err(e) => {
                    sys::set_signal_pipe(-1);
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

    /// Waits until a signal arrives or `timeout` passes.
    pub(crate) fn wait(&self, timeout: Duration) {
        sys::poll_readable(self.read.as_raw_fd(), timeout);
    }
}

impl Drop for SignalPipe {
    fn drop(&mut self) {
        sys::set_signal_pipe(-1);
        for (signal, old) in &self.previous {
            sys::restore_handler(*signal, old);
        }
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
        let before = sys::install_pipe_handler(libc::SIGHUP).unwrap();
        sys::restore_handler(libc::SIGHUP, &before);
        let pipe = SignalPipe::install().unwrap();
        sys::raise(libc::SIGHUP);
        pipe.wait(Duration::from_secs(5));
        assert_eq!(pipe.drain(), [libc::SIGHUP]);
        assert!(pipe.drain().is_empty());
        drop(pipe);
        assert_eq!(sys::signal_pipe(), -1);
    }
}
