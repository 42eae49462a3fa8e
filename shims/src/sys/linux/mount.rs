//! Mounts, in a mount namespace of the sandbox's own.

#[allow(unused_imports, reason = "the Linux calls share one import list")]
use super::*;
use crate::sys::check;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

// ---------------------------------------------------------------------------------------------
// Mounts (in a mount namespace of the sandbox's own).

/// `mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL)`: from now on no mount made in this
/// namespace propagates back to the one it was copied from (the host's, whose mounts are often
/// shared), while the host's later mounts still show here.
pub(crate) fn make_mounts_slave() -> io::Result<()> {
    // SAFETY: constant NUL-terminated target, null source, type and data.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// `mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)`: a fresh procfs for
/// the caller's PID namespace over the one inherited.
pub(crate) fn mount_proc() -> io::Result<()> {
    // SAFETY: constant NUL-terminated strings, no data.
    check(unsafe {
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// `mount("palisade-mask", target, "fuse.palisade-mask", MS_NOSUID | MS_NODEV, options)`: a
/// FUSE filesystem served through the `/dev/fuse` descriptor `options` names (`fd=N,…`).
/// Needs `CAP_SYS_ADMIN` (root); others go through `fusermount3`.
pub(crate) fn mount_fuse(target: &Path, options: &str) -> io::Result<()> {
    let target = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let options = CString::new(options).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: NUL-terminated strings that outlive the call.
    check(unsafe {
        libc::mount(
            c"palisade-mask".as_ptr(),
            target.as_ptr(),
            c"fuse.palisade-mask".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    })
    .map(drop)
}

/// `mount(source, target, NULL, MS_BIND, NULL)`: `source` (not recursively) also at
/// `target`, in the caller's mount namespace.
pub(crate) fn bind_mount(source: &Path, target: &Path) -> io::Result<()> {
    let c = |path: &Path| {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    };
    let (source, target) = (c(source)?, c(target)?);
    // SAFETY: NUL-terminated strings that outlive the call; no filesystem type or data.
    check(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// `umount2(target, MNT_DETACH | UMOUNT_NOFOLLOW)`: the mount leaves the tree now and goes
/// once nothing uses it.
pub(crate) fn unmount_detach(target: &Path) -> io::Result<()> {
    let target = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path that outlives the call.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) })
        .map(drop)
}
