//! Signal masks and dispositions.

#[allow(unused_imports, reason = "the Linux calls share one import list")]
use super::*;
use crate::sys::set_rlimit;
use std::io;

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
