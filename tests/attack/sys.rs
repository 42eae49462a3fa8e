//! Safe wrappers over the raw system calls the attacks make.
//!
//! Every `unsafe` block in the attack binary outside `uring.rs` lives here, one small function
//! per call, each with the invariant that makes it sound. The wrappers return `io::Error` built
//! from `errno`, so the verdict details carry the kernel's own answer.

use std::ffi::{CString, c_long};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_long(ret: c_long) -> io::Result<c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Wrap a descriptor a successful system call just returned.
#[allow(unsafe_code)]
fn owned(fd: c_long) -> io::Result<OwnedFd> {
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: `fd` was just returned by the kernel as a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[allow(unsafe_code)]
pub fn mknod_char(path: &Path, major: u32, minor: u32) -> io::Result<()> {
    let path = cstring(path)?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    check(unsafe {
        libc::mknod(
            path.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    })
    .map(drop)
}

#[allow(unsafe_code)]
pub fn mount(
    source: &str,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
) -> io::Result<()> {
    let source = CString::new(source).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let target = cstring(target)?;
    let fstype = fstype
        .map(CString::new)
        .transpose()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let fstype_ptr = fstype.as_ref().map_or(std::ptr::null(), |f| f.as_ptr());
    // SAFETY: every pointer is NUL-terminated or null and outlives the call; no data argument.
    check(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype_ptr,
            flags,
            std::ptr::null(),
        )
    })
    .map(drop)
}

#[allow(unsafe_code)]
pub fn umount2(target: &Path, flags: libc::c_int) -> io::Result<()> {
    let target = cstring(target)?;
    // SAFETY: `target` is NUL-terminated and outlives the call.
    check(unsafe { libc::umount2(target.as_ptr(), flags) }).map(drop)
}

#[allow(unsafe_code)]
pub fn chroot(dir: &Path) -> io::Result<()> {
    let dir = cstring(dir)?;
    // SAFETY: `dir` is NUL-terminated and outlives the call.
    check(unsafe { libc::chroot(dir.as_ptr()) }).map(drop)
}

#[allow(unsafe_code)]
pub fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    let new_root = cstring(new_root)?;
    let put_old = cstring(put_old)?;
    // SAFETY: both strings are NUL-terminated and outlive the call.
    check_long(unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) })
        .map(drop)
}

#[allow(unsafe_code)]
pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes no pointers; the process is single-threaded when attacks call it.
    check(unsafe { libc::unshare(flags) }).map(drop)
}

#[allow(unsafe_code)]
pub fn socket(domain: libc::c_int, ty: libc::c_int, protocol: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket takes no pointers.
    let fd = check(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) })?;
    owned(c_long::from(fd))
}

/// `ioctl(fd, TIOCSTI, &byte)`: push one byte into the terminal's input queue.
#[allow(unsafe_code)]
pub fn tiocsti(fd: BorrowedFd<'_>, byte: u8) -> io::Result<()> {
    let byte = byte as libc::c_char;
    // SAFETY: TIOCSTI reads one `char` through the pointer, which points at a live local.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSTI, &byte as *const libc::c_char) })
        .map(drop)
}

/// `fstat(fd)`.
#[allow(unsafe_code)]
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` is a live, writable `struct stat`.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) })?;
    Ok(stat)
}

/// `fstat` of a descriptor number that may not be open (`EBADF` then).
#[allow(unsafe_code)]
pub fn fstat_raw(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` is a live, writable `struct stat`; a closed `fd` only yields EBADF.
    check(unsafe { libc::fstat(fd, &mut stat) })?;
    Ok(stat)
}

/// `pread(fd, buf, offset)` on a raw descriptor number (which may not be open).
#[allow(unsafe_code)]
pub fn pread_raw(fd: RawFd, buf: &mut [u8], offset: i64) -> io::Result<usize> {
    // SAFETY: `buf` is valid for `buf.len()` writable bytes; a closed `fd` only yields EBADF.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
const KEYCTL_SEARCH: libc::c_long = 10;
const KEYCTL_READ: libc::c_long = 11;

/// `add_key("user", desc, payload, @s)`.
#[allow(unsafe_code)]
pub fn add_session_key(desc: &str, payload: &[u8]) -> io::Result<i64> {
    let ty = c"user";
    let desc = CString::new(desc).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the strings are NUL-terminated, `payload` is valid for its length; all outlive
    // the call.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_add_key,
            ty.as_ptr(),
            desc.as_ptr(),
            payload.as_ptr(),
            payload.len(),
            KEY_SPEC_SESSION_KEYRING,
        )
    })
}

/// `keyctl(KEYCTL_SEARCH, @s, "user", desc, 0)` then `keyctl(KEYCTL_READ, …)`.
#[allow(unsafe_code)]
pub fn read_session_key(desc: &str) -> io::Result<Vec<u8>> {
    let ty = c"user";
    let desc = CString::new(desc).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the strings are NUL-terminated and outlive the call.
    let serial = check_long(unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_SEARCH,
            KEY_SPEC_SESSION_KEYRING,
            ty.as_ptr(),
            desc.as_ptr(),
            0,
        )
    })?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is valid for `buf.len()` writable bytes.
    let n = check_long(unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_READ,
            serial,
            buf.as_mut_ptr(),
            buf.len(),
        )
    })?;
    buf.truncate(usize::try_from(n).unwrap_or(0).min(4096));
    Ok(buf)
}

#[allow(unsafe_code)]
pub fn kill(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes no pointers. Callers pass only pids the test named and verified.
    check(unsafe { libc::kill(pid, signal) }).map(drop)
}

/// `ptrace(PTRACE_SEIZE, pid)`: attach without stopping; the kernel detaches when we exit.
#[allow(unsafe_code)]
pub fn ptrace_seize(pid: libc::pid_t) -> io::Result<()> {
    // SAFETY: PTRACE_SEIZE with null addr/data takes no pointers.
    check_long(unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_SEIZE, pid, 0usize, 0usize) })
        .map(drop)
}

/// `process_vm_readv(pid, …)`: read `len` bytes at `addr` in another process.
#[allow(unsafe_code)]
pub fn process_vm_read(pid: libc::pid_t, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` describes `buf`, live and writable for its length; the remote address is
    // only interpreted by the kernel in the other process.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    buf.truncate(n);
    Ok(buf)
}

/// `bpf(cmd, attr, size)`.
#[allow(unsafe_code)]
pub fn bpf(cmd: libc::c_long, attr: &mut [u8]) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is valid for reads and writes of `attr.len()` bytes; pointers inside it
    // were set by the caller to buffers that outlive this call.
    let fd =
        check_long(unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) })?;
    owned(fd)
}

/// `perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)`.
#[allow(unsafe_code)]
pub fn perf_event_open(attr: &mut [u8], pid: libc::pid_t, cpu: libc::c_int) -> io::Result<OwnedFd> {
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: `attr` is valid for `attr.len()` bytes and its size field says so.
    let fd = check_long(unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_mut_ptr(),
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    })?;
    owned(fd)
}

#[allow(unsafe_code)]
pub fn userfaultfd(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: userfaultfd takes no pointers.
    let fd = check_long(unsafe { libc::syscall(libc::SYS_userfaultfd, flags) })?;
    owned(fd)
}

/// Ignore a signal (for the `linger --ignore-term` helper).
#[allow(unsafe_code)]
pub fn ignore_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: installing SIG_IGN runs no Rust code in signal context.
    if unsafe { libc::signal(signal, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `setsid()`, for use in `pre_exec` (async-signal-safe).
#[allow(unsafe_code)]
pub fn setsid() -> io::Result<()> {
    // SAFETY: setsid takes no arguments.
    check(unsafe { libc::setsid() }).map(drop)
}

/// `alarm(seconds)`: a safety net so helper processes never outlive the battery for long.
#[allow(unsafe_code)]
pub fn alarm(seconds: u32) {
    // SAFETY: alarm takes no pointers; SIGALRM's default action terminates the process.
    unsafe { libc::alarm(seconds) };
}

/// Spawn `command` in a new session (`setsid` between fork and exec).
#[allow(unsafe_code)]
pub fn spawn_in_new_session(
    command: &mut std::process::Command,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure calls only setsid, which is async-signal-safe, between fork and exec.
    unsafe { command.pre_exec(setsid) };
    command.spawn()
}
