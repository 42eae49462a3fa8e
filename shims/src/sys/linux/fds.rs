//! Descriptors: pipes, `close_range`, close-on-exec, memfds, `O_PATH` opens.

#[allow(unused_imports, reason = "the Linux calls share one import list")]
use super::*;
use crate::sys::check;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

// ---------------------------------------------------------------------------------------------
// Descriptors.

pub(super) fn pipe_with(flags: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
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
    open_path_with(path, 0)
}

/// An `O_PATH` descriptor for `path` only if it is itself a directory: with `O_NOFOLLOW` a
/// symlink opens as itself, which `O_DIRECTORY` then refuses like any other non-directory
/// (`ENOTDIR`), so the kind is checked by the open alone, with no `stat` after it.
pub(crate) fn open_dir_path_nofollow(path: &Path) -> io::Result<OwnedFd> {
    open_path_with(path, libc::O_DIRECTORY)
}

/// `fstat(fd).st_mode & S_IFMT` (an `O_PATH` descriptor will do): what kind of file `fd` is,
/// for one `fstat` where std's `metadata` asks `statx` for every field.
pub(crate) fn file_format(fd: BorrowedFd<'_>) -> io::Result<libc::mode_t> {
    // SAFETY: an all-zero `stat` is a valid value of a plain C struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` is a valid, writable struct that outlives the call; a wrong descriptor is
    // EBADF, never memory unsafety.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &raw mut stat) })?;
    Ok(stat.st_mode & libc::S_IFMT)
}

fn open_path_with(path: &Path, extra_flags: libc::c_int) -> io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call; these
        // flags take no mode argument.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC | extra_flags,
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
