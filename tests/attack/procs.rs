//! Process attacks: signal, ptrace, read the memory, environment or command line of a process
//! the test spawned on the host (the victim, or the `palisade` supervisor itself), and signal,
//! ptrace, open the memory of or read the environment of the sandbox's own PID 1.
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

/// `--pid N --marker M`: read the victim's command line from `/proc/N/cmdline` (read-only). It
/// is world-readable in any procfs that shows the process (secrets passed as arguments), so only
/// a `/proc` of the sandbox's own, or a rule denying it, keeps it out.
pub fn cmdline(args: &Args) -> Attack {
    let pid: i32 = args.num("pid")?;
    let marker = args.get("marker")?;
    let path = format!("/proc/{pid}/cmdline");
    Ok(match std::fs::read(&path) {
        Ok(bytes) if String::from_utf8_lossy(&bytes).contains(marker) => {
            Outcome::succeeded(format!("read the victim's command line from `{path}`"))
        }
        Ok(bytes) => Outcome::blocked(format!(
            "`{path}`: {} bytes without the marker",
            bytes.len()
        )),
        Err(error) => Outcome::blocked(io_detail(&format!("read `{path}`"), &error)),
    })
}

/// Proceed only against the sandbox's own PID 1, never the host's init: inside a PID namespace
/// of our own, and with our parent being that namespace's PID 1 (`getppid() == 1`).
fn child_of_sandbox_init(args: &Args) -> Result<(), Outcome> {
    guard::outside_host(args, &[Ns::Pid])?;
    let parent = std::os::unix::process::parent_id();
    if parent != 1 {
        return Err(Outcome::error(format!(
            "the parent (pid {parent}) is not the namespace's PID 1"
        )));
    }
    Ok(())
}

/// PID 1's directory as the mounted procfs numbers it (`/proc/self/stat`'s parent pid): `1` in
/// a procfs of our own PID namespace, the host's number in the host's procfs.
fn sandbox_init_dir() -> Result<String, Outcome> {
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(|error| {
        Outcome::blocked(io_detail(
            "read `/proc/self/stat` (to name PID 1 in this /proc)",
            &error,
        ))
    })?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so split after the last `)`.
    let ppid = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|field| field.parse::<u32>().ok())
        .ok_or_else(|| Outcome::error(format!("cannot parse `/proc/self/stat`: `{stat}`")))?;
    Ok(format!("/proc/{ppid}"))
}

/// Open the sandbox's PID 1's memory read-write (nothing is written): whoever can, can rewrite
/// the process that reaps the sandbox.
pub fn open_init_mem(args: &Args) -> Attack {
    child_of_sandbox_init(args)?;
    let path = format!("{}/mem", sandbox_init_dir()?);
    Ok(
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(_) => {
                Outcome::succeeded(format!("opened `{path}` (the sandbox's PID 1) read-write"))
            }
            Err(error) => Outcome::blocked(io_detail(&format!("open `{path}` read-write"), &error)),
        },
    )
}

/// Read the sandbox's PID 1's environment (any content counts: it is another process's).
pub fn read_init_environ(args: &Args) -> Attack {
    child_of_sandbox_init(args)?;
    let path = format!("{}/environ", sandbox_init_dir()?);
    Ok(match std::fs::read(&path) {
        Ok(bytes) => Outcome::succeeded(format!(
            "read `{path}` (the sandbox's PID 1): {} bytes",
            bytes.len()
        )),
        Err(error) => Outcome::blocked(io_detail(&format!("read `{path}`"), &error)),
    })
}

/// Signal the sandbox's PID 1 with everything that could stop or end it, then check it still
/// runs. Catchable signals are ignored here first, so an init that forwards them to its child
/// (docker-init) does not end this attack instead. Should PID 1 die, the kernel kills this
/// process with it and no verdict is printed (the battery counts that as broken, not blocked).
pub fn signal_init(args: &Args) -> Attack {
    child_of_sandbox_init(args)?;
    const SIGNALS: [(libc::c_int, &str); 10] = [
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTSTP, "SIGTSTP"),
        (libc::SIGSTOP, "SIGSTOP"),
        (libc::SIGKILL, "SIGKILL"),
    ];
    let mut sent = Vec::new();
    let mut refused = Vec::new();
    for (signal, name) in SIGNALS {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            let _ = sys::ignore_signal(signal);
        }
        match sys::kill(1, signal) {
            Ok(()) => sent.push(name),
            Err(error) => refused.push(format!("{name}: {error}")),
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    // A stopped init reaps nothing; say so, then let it go on.
    let state = sandbox_init_dir()
        .ok()
        .and_then(|dir| std::fs::read_to_string(format!("{dir}/stat")).ok())
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_owned))
        });
    if let Some(state) = state.as_deref().filter(|s| *s == "T" || *s == "t") {
        let _ = sys::kill(1, libc::SIGCONT);
        return Ok(Outcome::succeeded(format!(
            "PID 1 is stopped (state {state}) after {}",
            sent.join(", ")
        )));
    }
    Ok(match sys::kill(1, 0) {
        Err(error) if error.raw_os_error() == Some(libc::ESRCH) => {
            Outcome::succeeded(format!("PID 1 is gone after {}", sent.join(", ")))
        }
        _ if sent.is_empty() => {
            Outcome::blocked(format!("every signal refused: {}", refused.join("; ")))
        }
        _ => Outcome::blocked(format!(
            "PID 1 still runs (state {}) after {}{}",
            state.as_deref().unwrap_or("unreadable"),
            sent.join(", "),
            if refused.is_empty() {
                String::new()
            } else {
                format!("; refused: {}", refused.join("; "))
            }
        )),
    })
}
