//! The observer: the supervisor's side of an [`observed`](super::Program::observed) filter.
//!
//! The sandboxed process installs the observed program ([`super::install_observed`]) and sends
//! its listener here over a Unix socket. A thread then answers every call the program stopped
//! with exactly the errno the plain program returns ([`super::judge`]; `EPERM` for anything it
//! does not recognise) and counts it. It never lets a call run: its only answer is an error
//! (the `sys` wrapper cannot express `SECCOMP_USER_NOTIF_FLAG_CONTINUE`), and if the thread is
//! gone the kernel fails the call with `ENOSYS`. So the filter stays the enforcement; the
//! observer only learns of each refusal and picks the error the plain filter would have given.
//!
//! Bounded: at most [`MAX_CALLS`] distinct calls are kept (the same syscall under the same rule
//! is one entry with a count); the rest are only counted. A call costs one round trip to this
//! thread, and only calls the filter refuses are stopped; allowed calls never reach it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use super::{Action, Arch, Profile, judge};
use crate::sys;

/// Distinct calls kept; the rest are counted in [`Observed::dropped`].
pub const MAX_CALLS: usize = 64;

/// One kind of refused call: a syscall under one rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedCall {
    /// The syscall's name (`ptrace`, `socket`, …), or `nr N` for one no rule names (x32).
    pub syscall: String,
    /// The rule's condition (`always`, `arg0 in {AF_INET (0x2)}`, …).
    pub condition: String,
    /// What the rule closes, in the rule table's words.
    pub closes: String,
    /// The errno the call failed with.
    pub errno: i32,
    /// For `socket`: the family asked for.
    pub socket_family: Option<String>,
    /// Whether a socket rule of the network reach refused it (rather than a base rule).
    pub network_rule: bool,
    /// The first caller: its pid (as the supervisor sees it) and command name.
    pub pid: u32,
    pub command: String,
    pub count: u64,
}

/// Everything the observer saw during a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    /// Every refused call.
    pub total: u64,
    /// Calls not kept once [`MAX_CALLS`] distinct ones were.
    pub dropped: u64,
    pub calls: Vec<ObservedCall>,
    /// Why observing stopped early, if it did (the calls were still refused by the kernel).
    pub error: Option<String>,
    /// Whether a listener arrived (false: the command never got as far as its filter).
    pub listening: bool,
}

impl Observed {
    fn record(&mut self, notif: &sys::SeccompNotif, arch: Arch, profile: &Profile) -> i32 {
        // The program kills calls of another ABI before they can be stopped; be exact anyway.
        let judgement = (notif.arch == arch.audit_arch())
            .then(|| judge(arch, profile, notif.nr, &notif.args))
            .flatten();
        let errno = match judgement.as_ref().map(|j| j.action) {
            Some(Action::Errno(errno)) => i32::from(errno),
            // The program only stops calls it would fail; anything else is refused as well.
            _ => libc::EPERM,
        };
        self.total = self.total.saturating_add(1);
        let (syscall, condition) = match &judgement {
            Some(j) => (j.syscall.to_owned(), j.condition.clone()),
            None => (format!("nr {}", notif.nr), "x32 or unknown".to_owned()),
        };
        if let Some(same) = self
            .calls
            .iter_mut()
            .find(|c| c.syscall == syscall && c.condition == condition)
        {
            same.count = same.count.saturating_add(1);
        } else if self.calls.len() < MAX_CALLS {
            self.calls.push(ObservedCall {
                syscall,
                condition,
                closes: judgement
                    .as_ref()
                    .map_or("a syscall outside the filter's ABI", |j| j.closes)
                    .to_owned(),
                errno,
                socket_family: judgement.as_ref().and_then(|j| j.socket_family.clone()),
                network_rule: judgement.as_ref().is_some_and(|j| j.network_rule),
                pid: notif.pid,
                command: command_name(notif.pid),
                count: 1,
            });
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
        errno
    }
}

/// The command name of `pid` (`/proc/PID/comm`), read once per distinct call kept.
fn command_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|name| name.trim_end().to_owned())
        .unwrap_or_default()
}

/// A connected pair of Unix sockets for the listener: `(supervisor's end, sandbox's end)`,
/// both close-on-exec (pass the sandbox's end at an agreed descriptor number).
///
/// # Errors
/// The kernel's, from `socketpair`.
pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    sys::socketpair_cloexec()
}

/// A running observer; [`finish`](Self::finish) stops it and returns what it saw.
pub struct Observer {
    thread: JoinHandle<Observed>,
    stop: OwnedFd,
}

impl Observer {
    /// Starts the thread: it waits for the listener on `socket` (the end the sandbox does not
    /// hold), then answers every stopped call until the filter has no user left or
    /// [`finish`](Self::finish).
    ///
    /// # Errors
    /// The pipe or the thread could not be created.
    pub fn start(socket: OwnedFd, arch: Arch, profile: Profile) -> io::Result<Observer> {
        let (stop_read, stop) = sys::pipe_cloexec()?;
        let thread = std::thread::Builder::new()
            .name("seccomp-observer".to_owned())
            .spawn(move || serve(&socket, &stop_read, arch, &profile))?;
        Ok(Observer { thread, stop })
    }

    /// Stops observing (call it once the run's processes are gone) and returns the account.
    pub fn finish(self) -> Observed {
        drop(self.stop);
        self.thread.join().unwrap_or_else(|_| Observed {
            error: Some("the observer thread panicked".to_owned()),
            ..Observed::default()
        })
    }
}

fn serve(socket: &OwnedFd, stop: &OwnedFd, arch: Arch, profile: &Profile) -> Observed {
    let mut observed = Observed::default();
    let ended =
        |revents: libc::c_short| revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
    // First the listener, unless the run ends (or the sandbox closes its end) before sending.
    let (from_socket, from_stop) = sys::poll_two(socket.as_raw_fd(), stop.as_raw_fd());
    if ended(from_stop) && !ended(from_socket) {
        return observed;
    }
    let listener = match sys::recv_fd(socket) {
        Ok(Some(listener)) => listener,
        Ok(None) => return observed,
        Err(e) => {
            observed.error = Some(format!("receiving the listener: {e}"));
            return observed;
        }
    };
    observed.listening = true;
    loop {
        let (events, from_stop) = sys::poll_two(listener.as_raw_fd(), stop.as_raw_fd());
        if events & libc::POLLIN != 0 {
            match sys::seccomp_notif_recv(&listener) {
                Ok(notif) => {
                    let errno = observed.record(&notif, arch, profile);
                    // ENOENT: the caller died meanwhile; nothing to answer.
                    if let Err(e) = sys::seccomp_notif_send_error(&listener, notif.id, errno)
                        && e.raw_os_error() != Some(libc::ENOENT)
                    {
                        observed.error = Some(format!("answering a call: {e}"));
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    observed.error = Some(format!("receiving a call: {e}"));
                    return observed;
                }
            }
            continue;
        }
        // No task uses the filter any more, or the supervisor is done.
        if events & (libc::POLLHUP | libc::POLLERR) != 0 || ended(from_stop) {
            return observed;
        }
    }
}
