//! The macOS-only calls: libproc (listing processes and a process group's members, a
//! process's owner and state) and libsystem_sandbox's `sandbox_check`, behind the Seatbelt
//! membership sweep and the process-group supervisor. Type-checked for `aarch64-apple-darwin`,
//! never run here: this repository has no Mac.

use std::ffi::{CStr, c_char, c_int};

use super::sandbox_check::MemberCheck;

// libsystem_sandbox, re-exported by libSystem (linked into every program): private API. Returns
// 1 when the operation is denied (or, with SANDBOX_FILTER_NONE and no operation, when the
// process is sandboxed), 0 when allowed, -1 on error. The filter argument follows `filter_type`.
// SAFETY: declared as WebKit, Chromium and LLVM's sanitizers declare it; each call below states
// why its arguments are valid.
unsafe extern "C" {
    fn sandbox_check(pid: libc::pid_t, operation: *const c_char, filter_type: c_int, ...) -> c_int;
}

/// `enum sandbox_filter_type`: no filter argument.
const SANDBOX_FILTER_NONE: c_int = 0;
/// `enum sandbox_filter_type`: the argument is a path (`const char *`).
const SANDBOX_FILTER_PATH: c_int = 1;
/// Or-ed into the filter type: do not log the (would-be) violation.
const SANDBOX_CHECK_NO_REPORT: c_int = 0x4000_0000;

/// Every pid on the system (a snapshot: processes come and go).
pub(crate) fn all_pids() -> Vec<libc::pid_t> {
    // SAFETY: a null buffer of size 0 asks only for the current count.
    let estimate = unsafe { libc::proc_listallpids(std::ptr::null_mut(), 0) };
    // Room for processes started between the two calls.
    let room = usize::try_from(estimate).unwrap_or(0).saturating_add(256);
    let mut pids: Vec<libc::pid_t> = vec![0; room];
    let bytes =
        c_int::try_from(room.saturating_mul(size_of::<libc::pid_t>())).unwrap_or(c_int::MAX);
    // SAFETY: the buffer holds `bytes` bytes; libproc writes at most that many and returns
    // how many pids (not bytes) it wrote.
    let count = unsafe { libc::proc_listallpids(pids.as_mut_ptr().cast(), bytes) };
    pids.truncate(usize::try_from(count).unwrap_or(0));
    pids
}

/// What the kernel says about `pid` for the Seatbelt membership sweep (see [`MemberCheck`]),
/// asking its sandbox about the run's two canary paths. A process that is gone, or whose
/// information cannot be read, is reported as neither same-uid nor sandboxed.
pub(crate) fn member_check(pid: libc::pid_t, deny: &CStr, allow: &CStr) -> MemberCheck {
    let gone = MemberCheck {
        same_uid: false,
        zombie: false,
        sandboxed: -1,
        deny_canary: -1,
        allow_canary: -1,
    };
    // SAFETY: an all-zero proc_bsdinfo is a valid value to be overwritten.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = c_int::try_from(size_of::<libc::proc_bsdinfo>()).unwrap_or(0);
    // SAFETY: `info` is `size` bytes; libproc fills it or returns <= 0.
    let r = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDTBSDINFO,
            0,
            std::ptr::from_mut(&mut info).cast(),
            size,
        )
    };
    if r != size {
        return gone;
    }
    let same_uid = info.pbi_uid == super::geteuid();
    let zombie = info.pbi_status == libc::SZOMB;
    if !same_uid || zombie {
        return MemberCheck {
            same_uid,
            zombie,
            ..gone
        };
    }
    let read_data = c"file-read-data";
    let path_check = |path: &CStr| {
        // SAFETY: both strings are NUL-terminated and outlive the call; with
        // SANDBOX_FILTER_PATH the one variadic argument is a `const char *`.
        unsafe {
            sandbox_check(
                pid,
                read_data.as_ptr(),
                SANDBOX_FILTER_PATH | SANDBOX_CHECK_NO_REPORT,
                path.as_ptr(),
            )
        }
    };
    MemberCheck {
        same_uid,
        zombie,
        // SAFETY: a null operation with SANDBOX_FILTER_NONE takes no further argument and
        // asks only whether `pid` is sandboxed.
        sandboxed: unsafe { sandbox_check(pid, std::ptr::null(), SANDBOX_FILTER_NONE) },
        deny_canary: path_check(deny),
        allow_canary: path_check(allow),
    }
}

/// The members of process group `pgid` with their resident memory in bytes (0 when libproc
/// does not say), from libproc.
pub(crate) fn group_members(pgid: libc::pid_t) -> Vec<(libc::pid_t, u64)> {
    let mut pids: Vec<libc::pid_t> = vec![0; 4096];
    let bytes = c_int::try_from(pids.len() * size_of::<libc::pid_t>()).unwrap_or(c_int::MAX);
    // SAFETY: the buffer holds `bytes` bytes; libproc writes at most that many and returns
    // how many pids (not bytes: libproc.c divides by sizeof(int)) it wrote.
    let count = unsafe { libc::proc_listpgrppids(pgid, pids.as_mut_ptr().cast(), bytes) };
    pids.truncate(usize::try_from(count).unwrap_or(0));
    pids.into_iter()
        .filter(|pid| *pid > 0)
        .map(|pid| {
            // SAFETY: an all-zero proc_taskinfo is a valid value to be overwritten.
            let mut info: libc::proc_taskinfo = unsafe { std::mem::zeroed() };
            let size = c_int::try_from(size_of::<libc::proc_taskinfo>()).unwrap_or(0);
            // SAFETY: `info` is `size` bytes; libproc fills it or returns <= 0.
            let r = unsafe {
                libc::proc_pidinfo(
                    pid,
                    libc::PROC_PIDTASKINFO,
                    0,
                    std::ptr::from_mut(&mut info).cast(),
                    size,
                )
            };
            (pid, if r == size { info.pti_resident_size } else { 0 })
        })
        .collect()
}
