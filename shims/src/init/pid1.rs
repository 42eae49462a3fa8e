//! `palisade-init __sandbox-pid1 --build B -- CMD [ARGS…]`: PID 1 of a `linux-bwrap` sandbox.
//!
//! bwrap's own PID-1 reaper runs as the command's uid with no capabilities and stays dumpable,
//! so the command could open `/proc/1/mem` read-write (and read `/proc/1/environ`) and rewrite
//! the process that reaps it. bwrap therefore runs with `--as-pid-1` and execs this as PID 1,
//! from the palisade binary where the sandbox's read-only root shows it, or else bound read-only
//! on the sandbox's private `/run` ([`crate::bwrap::SANDBOX_EXEC_PATH`]; the seccomp stub runs
//! from the same place), and this:
//!
//! 1. checks it is PID 1 and marks itself not dumpable: its `/proc/1` entries that need ptrace
//!    access (`mem`, `environ`, `fd`, `maps`, …) and ptrace itself are then closed to every
//!    process without `CAP_SYS_PTRACE`, and bwrap's command has no capability at all;
//! 2. holds SIGINT, SIGTERM, SIGHUP and SIGQUIT (the supervisor sends those to every process
//!    of the tree but bwrap, and a wall-clock budget its SIGTERM) until the command child
//!    exists: blocked, with a handler that never runs, so the kernel keeps them pending instead
//!    of dropping them as it does for a PID 1 without one;
//! 3. forks the command child, which restores every signal (one sent to it meanwhile is then
//!    delivered) and execs `CMD` (an absolute path: the stub's, the bridge's, or the command's,
//!    which the host resolved) with the environment bwrap set and every descriptor bwrap
//!    passed. PID 1 passes each signal it held to the child, then ignores those four (from now
//!    on the supervisor reaches the command directly) and handles no signal at all, so none
//!    from inside the sandbox reaches it (the kernel drops the rest, SIGKILL and SIGSTOP
//!    included); and it closes the run's descriptors (it holds nothing of the run's);
//! 4. reaps every process of the namespace and, when the command child exits, exits with its
//!    code, or 128 + the signal that killed it (as bwrap's own init reports it; a PID 1 cannot
//!    re-raise a signal on itself).
//!
//! PID 1 is not under the seccomp filter (the stub installs it in the command child, observed):
//! it runs none of the command's code, and nothing of the command's can reach it. When the
//! command is the stub (`SANDBOX_EXEC_PATH __sandbox-exec …`, this binary), the child runs the
//! stub's code directly rather than executing the binary a second time.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use super::{EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_SETUP_FAILED, supervise_exit_code};
use crate::sys;

/// The hidden subcommand that runs [`main`] (bwrap's argv names it).
pub const SUBCOMMAND: &str = crate::bwrap::SUBCOMMAND_SANDBOX_PID1;

/// The signals the supervisor sends the tree (forwarded ones, and a budget's SIGTERM).
const HELD: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// PID 1 of a bwrap sandbox; `command` is `CMD [ARGS…]`, `launcher_build` the launcher's
/// [`crate::BUILD`] (PID 1 refuses to run for a launcher of another build). Never returns.
pub fn main(launcher_build: &str, command: &[OsString]) -> ! {
    // First: a signal meant for the command that arrives before it exists must not be lost.
    let mask = match sys::block_all_signals() {
        Ok(mask) => mask,
        Err(e) => fail(&format!("blocking signals: {e}")),
    };
    for signal in HELD {
        if let Err(e) = sys::install_pipe_handler(signal) {
            fail(&format!("holding signal {signal}: {e}"));
        }
    }
    if launcher_build != crate::BUILD {
        fail(&super::other_build(Some(launcher_build)));
    }
    match prepare(command) {
        Ok((argv, envp)) => run(&argv, &envp, &mask),
        Err(message) => fail(&message),
    }
}

fn fail(message: &str) -> ! {
    say!("palisade: sandbox pid 1: {message}");
    sys::exit_now(EXIT_SETUP_FAILED)
}

type Prepared = (Vec<CString>, Vec<CString>);

/// Everything the child needs, before any fork; then the checks and settings of steps 1 and 2.
fn prepare(command: &[OsString]) -> Result<Prepared, String> {
    if sys::getpid() != 1 {
        return Err("not PID 1 of a PID namespace".into());
    }
    let argv = command
        .iter()
        .map(|arg| CString::new(arg.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "an argument contains a NUL byte".to_string())?;
    if argv.is_empty() {
        return Err("no command".into());
    }
    let envp = std::env::vars_os()
        .map(|(key, value)| {
            let mut pair = key.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            CString::new(pair)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "an environment entry contains a NUL byte".to_string())?;
    sys::set_dumpable(false).map_err(|e| format!("PR_SET_DUMPABLE: {e}"))?;
    Ok((argv, envp))
}

fn run(argv: &[CString], envp: &[CString], mask: &libc::sigset_t) -> ! {
    let command = match sys::fork() {
        Ok(0) => exec(argv, envp),
        Ok(pid) => pid,
        Err(e) => fail(&format!("fork: {e}")),
    };
    // What reached PID 1 before the child existed goes to the child; ignoring a signal
    // discards its pending instance, so nothing is delivered twice to PID 1 itself.
    for signal in HELD {
        if sys::signal_pending(signal) {
            let _ = sys::kill(command, signal);
        }
        sys::set_disposition(signal, true);
    }
    sys::restore_signal_mask(mask);
    // The child has the run's descriptors (the observer's socket, the exec signal); PID 1
    // keeps none of them open for the rest of the run.
    let _ = sys::close_from(3);
    loop {
        match sys::wait_any(false) {
            Some(child) if child.pid == command => {
                sys::exit_now(supervise_exit_code(child.status));
            }
            Some(_) => {}
            None => sys::exit_now(EXIT_SETUP_FAILED),
        }
    }
}

/// The command child: signals as a fresh process has them, then `execve`.
fn exec(argv: &[CString], envp: &[CString]) -> ! {
    sys::reset_all_signals();
    let Some(path) = argv.first() else {
        sys::exit_now(EXIT_SETUP_FAILED)
    };
    // The seccomp stub is this very binary: it runs here, in the child, instead of in a second
    // exec of it (about 1.7 ms of loading a 20 MB binary). Forking a single-threaded PID 1
    // leaves the child free to run any code; the stub ends in the command's `execve`, which
    // makes it dumpable again as an exec of the stub would have. The stub names the path PID 1
    // was executed from (its own, or where bwrap bound it): this binary, as bwrap found it.
    let pid1_path = std::env::args_os().next();
    let is_self = path.as_bytes() == crate::bwrap::SANDBOX_EXEC_PATH.as_bytes()
        || pid1_path.is_some_and(|own| own.as_bytes() == path.as_bytes());
    if is_self
        && argv.get(1).is_some_and(|subcommand| {
            subcommand.as_bytes() == crate::bwrap::SUBCOMMAND_SANDBOX_EXEC.as_bytes()
        })
    {
        let args: Vec<OsString> = argv
            .iter()
            .skip(2)
            .map(|arg| OsString::from(std::ffi::OsStr::from_bytes(arg.as_bytes())))
            .collect();
        crate::sandbox_exec::main(&args);
    }
    let error = sys::execve(path, argv, envp);
    say!(
        "palisade: `{}`: {error}",
        String::from_utf8_lossy(path.as_bytes())
    );
    sys::exit_now(match error.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => EXIT_NOT_FOUND,
        _ => EXIT_CANNOT_EXECUTE,
    })
}
