//! Thin system-call wrappers, each with the reason it is sound. Everything unsafe in the crate is
//! here.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn check_size(r: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// `SO_PEERCRED` of a connected Unix socket: (pid, uid, gid) as of `connect`, translated into
/// the caller's namespaces by the kernel.
#[allow(unsafe_code)]
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<(i32, u32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `cred` is a valid ucred and `len` its size; the kernel writes at most `len` bytes.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok((cred.pid, cred.uid, cred.gid))
}

/// Waits until `fds[i]` is readable; returns the readiness of each (`POLLIN`/`POLLHUP`/`POLLERR`).
#[allow(unsafe_code)]
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let n = libc::nfds_t::try_from(pfds.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    loop {
        // SAFETY: `pfds` is a valid array of `n` pollfd structs that outlives the call.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), n, timeout_ms) };
        match check(r) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

/// A close-on-exec pipe (read end, write end), enlarged to `size` bytes where the kernel allows.
#[allow(unsafe_code)]
pub fn pipe(size: usize) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    let [read, write] = fds;
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let pair = unsafe { (OwnedFd::from_raw_fd(read), OwnedFd::from_raw_fd(write)) };
    let size = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    // SAFETY: F_SETPIPE_SZ takes an int; failure (over the unprivileged limit) is harmless: the
    // pipe keeps its default size.
    let _ = unsafe { libc::fcntl(pair.1.as_raw_fd(), libc::F_SETPIPE_SZ, size) };
    Ok(pair)
}

/// `splice(2)` without offsets: moves up to `len` bytes from `from` to `to` (one must be a pipe).
#[allow(unsafe_code)]
pub fn splice(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    // SAFETY: null offsets are allowed for pipes and sockets; the descriptors are borrowed, so
    // they stay open for the call.
    check_size(unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE,
        )
    })
}

#[allow(unsafe_code)]
pub fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: fork has no memory-safety preconditions. Callers fork only while single-threaded
    // (documented on `bridge::start_detached_then_exec`), so the child may run ordinary code.
    check(unsafe { libc::fork() })
}

/// Waits for a specific child; returns its raw wait status.
#[allow(unsafe_code)]
pub fn waitpid(pid: libc::pid_t) -> io::Result<libc::c_int> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid int for the kernel to fill.
        match check(unsafe { libc::waitpid(pid, &mut status, 0) }) {
            Ok(_) => return Ok(status),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Exits the process immediately, without running atexit handlers or unwinding (for the
/// intermediate child of a double fork, which must not flush the parent's buffers twice).
#[allow(unsafe_code)]
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and does not return.
    unsafe { libc::_exit(code) }
}

/// Sets `signal` to be ignored.
#[allow(unsafe_code)]
pub fn ignore_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: SIG_IGN is a valid disposition; no handler code is installed.
    if unsafe { libc::signal(signal, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Starts a new session (so terminal job-control signals aimed at the command's process group
/// miss the bridge). Failing is harmless: the signals are ignored anyway.
#[allow(unsafe_code)]
pub fn setsid() {
    // SAFETY: no preconditions; fails only when already a group leader.
    let _ = unsafe { libc::setsid() };
}

/// Points fds 0, 1 and 2 at `/dev/null`, so a detached process holds none of the command's pipes
/// open (a reader waiting for EOF on the command's output would wait for the bridge too).
#[allow(unsafe_code)]
pub fn stdio_to_dev_null() -> io::Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for target in 0..3 {
        // SAFETY: dup2 onto a standard descriptor number; `null` stays open for the call. The
        // previous fds 0-2 are replaced, which is the point: nothing in this process owns them as
        // Rust objects.
        check(unsafe { libc::dup2(null.as_raw_fd(), target) })?;
    }
    Ok(())
}

/// Closes every descriptor from 3 up except `keep` (for a detached process that must not hold
/// the command's inherited descriptors open).
#[allow(unsafe_code)]
pub fn close_other_fds(keep: &[RawFd]) {
    let mut keep: Vec<libc::c_uint> = keep
        .iter()
        .filter_map(|fd| libc::c_uint::try_from(*fd).ok())
        .filter(|fd| *fd >= 3)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    // The gaps between the kept descriptors, from 3 to the highest possible.
    let mut ranges = Vec::with_capacity(keep.len() + 1);
    let mut first: libc::c_uint = 3;
    for fd in keep {
        if fd > first {
            ranges.push((first, fd - 1));
        }
        first = fd.saturating_add(1);
    }
    ranges.push((first, libc::c_uint::MAX));
    for (first, last) in ranges {
        if first > last {
            continue;
        }
        // SAFETY: close_range only closes descriptors; the caller is single-threaded and owns no
        // Rust objects for them except those in `keep`, which are excluded.
        let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
        if r != 0 {
            // Kernels before 5.9: close the range by hand, bounded.
            for fd in first..last.min(65_536) {
                // SAFETY: as above.
                let _ = unsafe { libc::close(fd as libc::c_int) };
            }
        }
    }
}

/// `execve(2)`; returns only on failure.
#[allow(unsafe_code)]
pub fn execve(program: &CStr, argv: &[CString], env: &[CString]) -> io::Error {
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    // SAFETY: all pointers come from CStrings that outlive the call; both arrays are
    // null-terminated.
    unsafe { libc::execve(program.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr()) };
    io::Error::last_os_error()
}
