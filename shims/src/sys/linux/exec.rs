//! Executing the command, and the terminal.

#[allow(unused_imports, reason = "the Linux calls share one import list")]
use super::*;
use crate::sys::check;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;

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
    crate::sys::give_tty(fd, crate::sys::getpgrp());
}
