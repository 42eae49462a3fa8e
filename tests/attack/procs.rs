//! Process attacks: signal, ptrace, read the memory or environment of a process the test
//! spawned on the host (the victim, or the `palisade` supervisor itself), and of the sandbox's
//! own PID 1.
//!
//! Before acting on a pid, an attack checks the namespace guard (it must be outside one of the
//! host's namespaces) and that the pid's command line carries the test's marker, so a wrong
//! number can never reach a stranger. (Outside, only a new mount namespace keeps the tracer in
//! the victim's user namespace, where the kernel allows ptrace at all.)

use std::path::Path;
use std::time::{Duration, Instant};

use crate::guard::{self, Ns};
use crate::{Args, Attack, Outcome, io_detail, sys};

/// `--pid N` or `--pid-file F` (waits up to 10 s for the test to write it).
fn target_pid(args: &Args) -> Result<i32, Outcome> {
    if args.opt("pid").is_some() {
        return args.num("pid");
    }
    let file = Path::new(args.get("pid-file")?);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(pid) = text.trim().parse()
        {
            return Ok(pid);
        }
        if Instant::now() > deadline {
            return Err(Outcome::error(format!(
                "no pid in `{}` after 10 s",
                file.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The guard plus the marker check; `Ok(pid)` means acting is safe.
fn checked_target(args: &Args) -> Result<i32, Outcome> {
    guard::outside_host(args, &[Ns::Mnt, Ns::Pid, Ns::User])?;
    let pid = target_pid(args)?;
    if pid <= 1 {
        return Err(Outcome::error(format!(
            "refusing pid {pid}: not a test victim"
        )));
    }
    guard::pid_is_victim(pid, args.get("marker")?)?;
    Ok(pid)
}

/// `--pid N --marker M`: SIGKILL the victim (the harness checks on the host that it lives).
pub fn kill(args: &Args) -> Attack {
    let pid = checked_target(args)?;
    Ok(match sys::kill(pid, libc::SIGKILL) {
        Ok(()) => Outcome::succeeded(format!("sent SIGKILL to pid {pid}")),
        Err(error) => Outcome::blocked(io_detail(&format!("kill({pid}, SIGKILL)"), &error)),
    })
}

/// `--pid N | --pid-file F --marker M`: signal 0 (the permission check alone, no delivery).
pub fn signal(args: &Args) -> Attack {
    let pid = checked_target(args)?;
    Ok(match sys::kill(pid, 0) {
        Ok(()) => Outcome::succeeded(format!("may signal pid {pid} (kill(pid, 0) succeeded)")),
        Err(error) => Outcome::blocked(io_detail(&format!("kill({pid}, 0)"), &error)),
    })
}

/// `--pid N | --pid-file F --marker M`: `PTRACE_SEIZE` (no stop; detached when we exit).
pub fn ptrace(args: &Args) -> Attack {
    let pid = checked_target(args)?;
    Ok(match sys::ptrace_seize(pid) {
        Ok(()) => Outcome::succeeded(format!("ptrace-seized pid {pid}")),
        Err(error) => Outcome::blocked(io_detail(&format!("ptrace(PTRACE_SEIZE, {pid})"), &error)),
    })
}

/// `--pid N --addr A --marker M`: `process_vm_readv` the marker the victim keeps at `A`.
pub fn vm_read(args: &Args) -> Attack {
    let pid = checked_target(args)?;
    let addr: u64 = args.num("addr")?;
    let marker = args.get("marker")?;
    Ok(match sys::process_vm_read(pid, addr, marker.len()) {
        Ok(bytes) if bytes == marker.as_bytes() => {
            Outcome::succeeded(format!("read the victim's memory at {addr:#x}"))
        }
        Ok(bytes) => Outcome::blocked(format!(
            "read {} bytes that are not the marker",
            bytes.len()
        )),
        Err(error) => Outcome::blocked(io_detail(&format!("process_vm_readv({pid})"), &error)),
    })
}

/// `PTRACE_SEIZE` of PID 1 — only inside a PID namespace of our own, never the host's init.
pub fn ptrace_init(args: &Args) -> Attack {
    guard::outside_host(args, &[Ns::Pid])?;
    Ok(match sys::ptrace_seize(1) {
        Ok(()) => Outcome::succeeded("ptrace-seized the namespace's PID 1"),
        Err(error) => Outcome::blocked(io_detail("ptrace(PTRACE_SEIZE, 1)", &error)),
    })
}

/// `process_vm_readv` of PID 1 — only inside a PID namespace of our own. The address is the
/// start of PID 1's first mapping when `/proc/1/maps` is readable; otherwise a fixed one, where
/// EFAULT still proves the access check passed.
pub fn vm_read_init(args: &Args) -> Attack {
    guard::outside_host(args, &[Ns::Pid])?;
    let addr = std::fs::read_to_string("/proc/1/maps")
        .ok()
        .and_then(|maps| {
            let first = maps.lines().next()?.split('-').next()?.to_string();
            u64::from_str_radix(&first, 16).ok()
        });
    let (addr, known) = match addr {
        Some(addr) => (addr, true),
        None => (0x1000, false),
    };
    Ok(match sys::process_vm_read(1, addr, 16) {
        Ok(bytes) if !bytes.is_empty() => Outcome::succeeded(format!(
            "read {} bytes of PID 1's memory at {addr:#x}",
            bytes.len()
        )),
        Ok(_) => Outcome::blocked("process_vm_readv(1) read nothing"),
        Err(error) if !known && error.raw_os_error() == Some(libc::EFAULT) => Outcome::succeeded(
            "process_vm_readv(1) passed the access check (EFAULT at a guessed address)",
        ),
        Err(error) => Outcome::blocked(io_detail("process_vm_readv(1)", &error)),
    })
}

/// `--pid N --marker M`: read the victim's environment from `/proc/N/environ` (read-only).
pub fn environ(args: &Args) -> Attack {
    let pid: i32 = args.num("pid")?;
    let marker = args.get("marker")?;
    let path = format!("/proc/{pid}/environ");
    Ok(match std::fs::read(&path) {
        Ok(bytes) if String::from_utf8_lossy(&bytes).contains(marker) => {
            Outcome::succeeded(format!("read the victim's secret from `{path}`"))
        }
        Ok(bytes) => Outcome::blocked(format!(
            "`{path}`: {} bytes without the marker",
            bytes.len()
        )),
        Err(error) => Outcome::blocked(io_detail(&format!("read `{path}`"), &error)),
    })
}
