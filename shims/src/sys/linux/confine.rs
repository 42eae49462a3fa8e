//! Confinement: capabilities, Landlock, seccomp.

#[allow(unused_imports, reason = "the Linux calls share one import list")]
use super::*;
use crate::sys::check;
use crate::sys::sock_filter::Instruction;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

// ---------------------------------------------------------------------------------------------
// Confinement: capabilities, Landlock, seccomp.

/// Empties the bounding, ambient, inheritable, permitted and effective capability sets and locks
/// `SECBIT_NOROOT`, so neither this process nor anything it executes (uid 0 included) holds a
/// capability. Only raw syscalls: this runs between fork and exec.
pub(crate) fn drop_all_capabilities() -> io::Result<()> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let check = |result: libc::c_int| {
        if result == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // The highest capability this kernel knows, from /proc would allocate; probe instead.
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only; EINVAL past the last capability.
        let result = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if result != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            // Without CAP_SETPCAP (not root) the bounding set cannot be changed; there is
            // nothing in the permitted set to lose either, checked below.
            if error.raw_os_error() == Some(libc::EPERM) {
                break;
            }
            return Err(error);
        }
    }
    // SAFETY: prctl with integer arguments only.
    check(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: prctl with integer arguments only. Fails with EPERM without CAP_SETPCAP, in
    // which case the process has no capabilities to regain anyway (checked below).
    let _ = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) };
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and data are valid for the v3 ABI (two data structs).
    check(unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) as libc::c_int })?;
    // Verify: nothing left in the permitted set.
    let mut now = [Data {
        effective: 1,
        permitted: 1,
        inheritable: 1,
    }; 2];
    // SAFETY: as above, capget writes two data structs.
    check(unsafe {
        libc::syscall(libc::SYS_capget, &mut header, now.as_mut_ptr()) as libc::c_int
    })?;
    if now
        .iter()
        .any(|d| d.permitted != 0 || d.effective != 0 || d.inheritable != 0)
    {
        return Err(io::Error::other("capabilities remain after capset"));
    }
    Ok(())
}

/// The running kernel's Landlock ABI version (`landlock_create_ruleset(NULL, 0, VERSION)`): the
/// raw non-negative answer, or the kernel's error.
pub(crate) fn landlock_abi_version() -> io::Result<libc::c_long> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with the VERSION flag the kernel reads no attribute (NULL pointer, size 0) and
    // only returns the ABI version or an error; no memory is shared.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(version)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`. Allocates nothing.
pub(crate) fn set_no_new_privs() -> io::Result<()> {
    let one: libc::c_ulong = 1;
    let zero: libc::c_ulong = 0;
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, zero, zero, zero) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

// `Instruction` must be the kernel's `struct sock_filter` (u16, u8, u8, u32) for the cast below.
const _: () = assert!(
    size_of::<Instruction>() == size_of::<libc::sock_filter>()
        && align_of::<Instruction>() == align_of::<libc::sock_filter>()
);

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, program)` on the calling thread. Allocates nothing.
pub(crate) fn seccomp_set_mode_filter(instructions: &[Instruction]) -> io::Result<()> {
    let len = u16::try_from(instructions.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fprog = libc::sock_fprog {
        len,
        // The kernel only reads through this pointer (`sock_fprog` is not const-correct).
        filter: instructions.as_ptr().cast::<libc::sock_filter>().cast_mut(),
    };
    let flags: libc::c_ulong = 0;
    // SAFETY: `Instruction` is `#[repr(C)]` with the same fields, sizes and order as the
    // kernel's `struct sock_filter` (u16, u8, u8, u32; size and alignment asserted above),
    // `fprog.filter` points at `len` of them, and both outlive the call, during which the
    // kernel copies the program.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            std::ptr::from_ref(&fprog),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, program)`: installs the
/// filter and returns its notification listener (close-on-exec). Allocates nothing.
pub(crate) fn seccomp_set_mode_filter_listener(
    instructions: &[Instruction],
) -> io::Result<OwnedFd> {
    let len = u16::try_from(instructions.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fprog = libc::sock_fprog {
        len,
        filter: instructions.as_ptr().cast::<libc::sock_filter>().cast_mut(),
    };
    // SAFETY: as in `seccomp_set_mode_filter`; with NEW_LISTENER the kernel returns a new
    // descriptor, which nothing else owns.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            std::ptr::from_ref(&fprog),
        )
    };
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One seccomp user notification: a call the filter stopped, waiting for its answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SeccompNotif {
    pub(crate) id: u64,
    pub(crate) pid: u32,
    pub(crate) nr: i32,
    pub(crate) arch: u32,
    pub(crate) args: [u64; 6],
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_RECV)`: the next stopped call (blocks unless the listener polled
/// readable).
pub(crate) fn seccomp_notif_recv(listener: &OwnedFd) -> io::Result<SeccompNotif> {
    // SAFETY: an all-zero `seccomp_notif` is valid (plain integers), and the kernel requires
    // the buffer zeroed.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl writes one `seccomp_notif` (its size is encoded in the request) into
    // the buffer, which outlives the call.
    check(unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            std::ptr::from_mut(&mut notif),
        )
    })?;
    Ok(SeccompNotif {
        id: notif.id,
        pid: notif.pid,
        nr: notif.data.nr,
        arch: notif.data.arch,
        args: notif.data.args,
    })
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_SEND)` answering call `id` with `-errno`. Never with
/// `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: this wrapper cannot let a stopped call run.
pub(crate) fn seccomp_notif_send_error(listener: &OwnedFd, id: u64, errno: i32) -> io::Result<()> {
    seccomp_notif_send(
        listener,
        libc::seccomp_notif_resp {
            id,
            val: 0,
            error: -errno.abs(),
            flags: 0,
        },
    )
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_SEND)` letting call `id` run (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`).
/// Only for calls the plain program allows and the observed one stops just to look at
/// ([`crate::seccomp::Action::Observe`]): the kernel then runs the call as if no filter had
/// stopped it, and every later check (the network namespace, the mounts) still applies.
pub(crate) fn seccomp_notif_continue(listener: &OwnedFd, id: u64) -> io::Result<()> {
    seccomp_notif_send(
        listener,
        libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        },
    )
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_SEND)` with `response`.
pub(super) fn seccomp_notif_send(
    listener: &OwnedFd,
    mut response: libc::seccomp_notif_resp,
) -> io::Result<()> {
    // SAFETY: the kernel reads one `seccomp_notif_resp` from the buffer, which outlives the call.
    check(unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            std::ptr::from_mut(&mut response),
        )
    })?;
    Ok(())
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_ID_VALID)`: whether call `id` is still waiting for an answer (so
/// the process memory read for it since was the caller's, not a recycled pid's).
pub(crate) fn seccomp_notif_id_valid(listener: &OwnedFd, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the kernel reads one `u64` from the pointer, which outlives the call.
    let status = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            std::ptr::from_mut(&mut id),
        )
    };
    status == 0
}

/// What is at `path` (absolute) in process `pid`'s own view of the filesystem: resolved inside
/// `/proc/<pid>/root` (`openat2` with `RESOLVE_IN_ROOT`, so its symlinks stay in that root and
/// no magic link is followed), the last component followed as `connect` follows it. `Ok(None)`
/// when nothing is there.
pub(crate) fn file_type_in_view_of(pid: u32, path: &Path) -> io::Result<Option<std::fs::FileType>> {
    let root = std::fs::File::open(format!("/proc/{pid}/root"))?;
    let relative = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // `struct open_how` (libc's is non-exhaustive, so it cannot be built here).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a NUL-terminated path and one `open_how` of the size passed, both outliving the
    // call; the kernel returns a new descriptor or an error.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            relative.as_ptr(),
            &raw const how,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = match i32::try_from(fd) {
        // SAFETY: a descriptor the kernel just returned, owned by nobody else.
        Ok(fd) if fd >= 0 => unsafe { OwnedFd::from_raw_fd(fd) },
        _ => {
            let error = io::Error::last_os_error();
            return match error.raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => Ok(None),
                _ => Err(error),
            };
        }
    };
    Ok(Some(std::fs::File::from(fd).metadata()?.file_type()))
}

/// Reads `buf.len()` bytes at `address` in process `pid` (`process_vm_readv`); returns how many
/// were read. Needs the right to trace it: the observer is the sandbox's ancestor, same user.
pub(crate) fn read_process_memory(pid: u32, address: u64, buf: &mut [u8]) -> io::Result<usize> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: address as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local iovec over `buf` (writable, outlives the call); the remote one is only
    // an address in the other process, which the kernel checks.
    let read = unsafe { libc::process_vm_readv(pid, &raw const local, 1, &raw const remote, 1, 0) };
    usize::try_from(read).map_err(|_| io::Error::last_os_error())
}

/// Sends `fd` over the Unix socket `socket` (`SCM_RIGHTS`, one byte of data). Allocates
/// nothing, so it may run between `fork` and `exec`.
pub(crate) fn send_fd(socket: RawFd, fd: RawFd) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one `int` of ancillary data, aligned as `cmsghdr` requires.
    let mut space = [0u64; 4];
    // SAFETY: a zeroed `msghdr` is valid; every pointer set below points at locals that outlive
    // the call; CMSG_* macros compute offsets within `space`, which is large enough for one
    // `cmsghdr` carrying one `int` (checked against CMSG_SPACE).
    unsafe {
        let cmsg_space = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize;
        if cmsg_space > size_of_val(&space) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = cmsg_space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        if cmsg.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        loop {
            let sent = libc::sendmsg(socket, &raw const msg, libc::MSG_NOSIGNAL);
            if sent >= 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// Receives one descriptor sent by [`send_fd`] (close-on-exec); `None` at end of file (the
/// sender closed without sending).
pub(crate) fn recv_fd(socket: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u64; 4];
    // SAFETY: as in `send_fd`; the kernel writes at most `msg_controllen` bytes into `space`,
    // and a received descriptor is new to this process, owned by nothing else.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&space) as _;
        let received = loop {
            let n = libc::recvmsg(socket.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 {
                break n;
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        };
        if received == 0 {
            return Ok(None);
        }
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other("no descriptor came with the message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(Some(OwnedFd::from_raw_fd(fd)))
    }
}

/// A connected pair of Unix stream sockets, close-on-exec.
pub(crate) fn socketpair_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: the kernel writes two descriptors into `fds`, which nothing else owns.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: two new descriptors, owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
