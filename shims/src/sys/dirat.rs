//! Calls relative to a directory descriptor the caller holds (`mknodat`, `fstatat`,
//! `unlinkat`): the placeholders of [`crate::placeholder`] are made, checked and removed in the
//! very directory whose lock the run holds, whatever its path names meanwhile; and the one
//! `dup` that hands that lock to a child.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::check;

/// What `fstatat` says about one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryStat {
    /// `st_mode`: the type and permission bits.
    pub(crate) mode: u32,
}

/// `mknodat(dir, name, S_IFSOCK, 0)`: an unbound Unix-socket node with no permission bits (the
/// umask cannot add any); fails with `EEXIST` when `name` exists, whatever it is.
pub(crate) fn mknod_socket_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call; a socket node
    // needs no device number; a wrong descriptor is EBADF, never memory unsafety.
    check(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), libc::S_IFSOCK, 0) })?;
    Ok(())
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: the entry itself, never a symlink's target.
pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<EntryStat> {
    // SAFETY: an all-zero `stat` is a valid value of a plain C struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated and `stat` a valid, writable struct; both outlive the
    // call.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut stat,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(EntryStat { mode: stat.st_mode })
}

/// `unlinkat(dir, name, 0)`: removes a non-directory entry.
pub(crate) fn unlink_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })?;
    Ok(())
}

/// `fcntl(fd, F_DUPFD, 3)`: another descriptor of the same open file description (so of any
/// `flock` taken through it), *without* close-on-exec, so the next child spawned inherits it.
pub(crate) fn dup_inheritable(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD only reads `fd`; the result is a new descriptor we own.
    let new = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD, 3) })?;
    // SAFETY: `new` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}
