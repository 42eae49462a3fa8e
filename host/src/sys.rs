//! Every system call of the host crate that needs `unsafe`, each with the reason it is sound;
//! the modules above call these and hold no `unsafe` of their own. (The sandbox's calls are
//! `palisade_shims::sys`'s.)
#![allow(unsafe_code, reason = "this module is where the host's unsafe lives")]

#[cfg(all(target_os = "linux", target_env = "gnu"))]
use std::ffi::OsString;

/// The real user id of this process.
pub fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The kernel's clock ticks per second (`/proc/<pid>/stat` times), 100 if it cannot be read.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&hz| hz > 0).unwrap_or(100)
}

/// The CPU time this process has used so far (`CLOCK_PROCESS_CPUTIME_ID`; across `execve`, so
/// at `main` it is what exec, dynamic loading and the runtime's start took), `None` if the
/// clock cannot be read.
pub fn process_cpu_time() -> Option<std::time::Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid, exclusively borrowed pointer.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    let secs = u64::try_from(now.tv_sec).ok()?;
    let nanos = u32::try_from(now.tv_nsec).ok()?;
    (status == 0).then(|| std::time::Duration::new(secs, nanos))
}

/// The real and effective user ids of this process.
pub fn user_ids() -> (u32, u32) {
    // SAFETY: getuid(2) and geteuid(2) take no arguments, always succeed and touch no memory.
    unsafe { (libc::getuid(), libc::geteuid()) }
}

/// SIGKILL to the process group `pgid` (a probe child that leads its own group).
pub fn kill_group(pgid: i32) {
    // SAFETY: kill(2) with a negative pid only sends a signal; it touches no memory. The child
    // leads this group (process_group(0)) and is not yet reaped, so the id is still ours.
    let _ = unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

#[cfg(target_os = "linux")]
/// `landlock_create_ruleset(NULL, 0, flags)`: with `LANDLOCK_CREATE_RULESET_VERSION`, the ABI
/// version, or -1 (errno set).
pub fn landlock_abi_query(flags: libc::c_uint) -> i64 {
    // SAFETY: with a NULL attribute pointer, size 0 and only the VERSION flag, the kernel reads
    // no user memory, creates no file descriptor and just returns the ABI version (or -1 and
    // errno). No Rust memory is involved.
    let result = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            flags,
        )
    };
    #[allow(clippy::useless_conversion, reason = "c_long is i32 on 32-bit targets")]
    i64::from(result)
}

#[cfg(target_os = "linux")]
/// Whether `PR_GET_SECCOMP` answers (this process could install seccomp filters).
pub fn seccomp_mode_readable() -> bool {
    // SAFETY: PR_GET_SECCOMP only reads this thread's seccomp mode; the extra arguments are
    // ignored zeros and no memory is passed. (In strict mode it would kill us, but then we
    // could not be running this code.)
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    mode >= 0
}

#[cfg(not(target_os = "linux"))]
/// Elsewhere there is no seccomp.
pub fn seccomp_mode_readable() -> bool {
    false
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
/// Moves this process's environment off the block the kernel placed on its initial stack and
/// zeroes that block (`crate::envpolicy::scrub_own_environ` says why). Only while the process
/// has one thread.
pub fn scrub_initial_environ() -> Result<(), String> {
    let vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (name, value) in &vars {
        if name.is_empty() {
            continue;
        }
        // SAFETY: `palisade run` calls this before it starts any thread, so no other thread
        // reads or writes the environment meanwhile (what `set_var` requires). Names and values
        // come from the environment itself: no `=` in a name, no NUL anywhere.
        unsafe { std::env::set_var(name, value) };
    }
    let (start, end) = initial_environment_range()?;
    let mut entry;
    // SAFETY: reading libc's `environ` pointer; single-threaded, as above.
    unsafe {
        entry = libc::environ;
    }
    if entry.is_null() {
        return Err("the process has no environ array".into());
    }
    loop {
        let item;
        // SAFETY: `environ` is a NULL-terminated array of pointers maintained by libc; `entry`
        // walks it from the start and stops at the terminator.
        unsafe {
            item = *entry;
        }
        if item.is_null() {
            break;
        }
        let address = item as usize;
        if (start..end).contains(&address) {
            return Err("an environment string still lives in the initial block".into());
        }
        // SAFETY: `item` was not the terminator, so the next slot exists.
        unsafe {
            entry = entry.add(1);
        }
    }
    // SAFETY: `start..end` is this process's initial environment block, which the kernel placed
    // on the (read-write) initial stack and reports in `/proc/self/stat`. After the loop above
    // no pointer in `environ` refers to it, and nothing else in Palisade keeps one (every read
    // of the environment goes through `environ`). Writing zeros changes what
    // `/proc/<pid>/environ` shows, not any live data.
    unsafe {
        std::ptr::write_bytes(start as *mut u8, 0, end - start);
    }
    Ok(())
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
/// `env_start` and `env_end` of this process (fields 50 and 51 of `/proc/self/stat`).
pub(crate) fn initial_environment_range() -> Result<(usize, usize), String> {
    let stat =
        palisade_shims::procfile::read_to_string("/proc/self/stat").map_err(|e| e.to_string())?;
    // Fields after the command name, which may itself hold spaces and `)`: field 3 is index 0.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("malformed /proc/self/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<usize, String> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<usize>().ok())
            .ok_or_else(|| format!("/proc/self/stat has no field {n}"))
    };
    let (start, end) = (field(50)?, field(51)?);
    if start == 0 || end < start {
        return Err(format!(
            "implausible environment range {start:#x}..{end:#x}"
        ));
    }
    Ok((start, end))
}

/// `PR_SET_DUMPABLE 0` on this process; whether it took (`false` where there is no such flag).
pub fn set_undumpable() -> bool {
    #[cfg(target_os = "linux")]
    {
        let zero: libc::c_ulong = 0;
        // SAFETY: prctl with PR_SET_DUMPABLE takes plain integers (passed at the width the
        // kernel reads) and changes only this process's dumpable flag.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, zero, zero, zero, zero) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Loads a compiled component from `path` (a `/proc/self/fd` path of a file `runtime::cache`
/// opened and verified: its identity, its name binding it to the component digest and engine,
/// and its SHA-256). Only that caller, only after those checks.
pub(crate) fn deserialize_verified_component(
    engine: &wasmtime::Engine,
    path: std::path::PathBuf,
) -> wasmtime::Result<wasmtime::component::Component> {
    // SAFETY: wasmtime maps the file as native code; the caller verified that it is the
    // artefact this engine wrote (see the doc above and `runtime::cache::load_component`), and
    // wasmtime rejects artefacts of another version or configuration.
    unsafe { wasmtime::component::Component::deserialize_file(engine, path) }
}

/// The effective user id of this process.
pub fn geteuid() -> u32 {
    // SAFETY: `geteuid` takes no arguments, touches no memory and cannot fail.
    unsafe { libc::geteuid() }
}
