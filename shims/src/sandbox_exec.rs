//! `palisade __sandbox-exec`: the first program bubblewrap runs in the sandbox. Under
//! `allow-outbound` (the host's network namespace) it first scopes the sandbox out of the host's
//! abstract Unix sockets with Landlock ([`crate::landlock::scope_abstract_unix_sockets`]). It
//! installs Palisade's seccomp filter in its observed form ([`crate::seccomp::Program::observed`]),
//! sends the filter's listener to the supervisor's observer over [`bwrap::OBSERVE_FD`], closes
//! that descriptor and execs the rest of its arguments (the network bridge, or the command).
//!
//! Why not `bwrap --seccomp FD`: bubblewrap installs the program without a listener, so the
//! calls it refuses could not be observed. The stub installs the very same program at the
//! very same point (after bubblewrap's setup, before anything of the command runs), under
//! `no_new_privs`, and a failure to install it exits 125 before the command starts, so the
//! launcher reports a setup failure and nothing ran.
//!
//! Usage (built by [`bwrap::SandboxExec::prefix`]):
//! `palisade __sandbox-exec --reach REACH [--started-fd N] -- PROGRAM ARGS…`. With
//! `--started-fd`, the stub writes one byte there just before it execs the command, the
//! launcher's sign that the sandbox was set up and the command started (when a network bridge
//! runs between the stub and the command, the bridge's own wrapper does that instead).

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;

use crate::bwrap::{self, SUBCOMMAND_SANDBOX_EXEC};
use crate::plan::{Mechanism, Reach};
use crate::seccomp;
use crate::sys;

/// Status when the stub itself failed: nothing of the command ran.
const EXIT_SETUP_FAILED: i32 = 125;

/// Runs the stub with its arguments (after the subcommand). Never returns: execs, or exits.
pub fn main(args: &[OsString]) -> ! {
    let fail = |status: i32, message: String| -> ! {
        say!("palisade: {SUBCOMMAND_SANDBOX_EXEC}: {message}");
        std::process::exit(status)
    };
    let (reach, started_fd, command) = match parse(args) {
        Ok(parsed) => parsed,
        Err(message) => fail(EXIT_SETUP_FAILED, message),
    };
    let socket = match sys::take_inherited_fd(bwrap::OBSERVE_FD) {
        Ok(fd) => fd,
        Err(e) => fail(EXIT_SETUP_FAILED, format!("no observer socket: {e}")),
    };
    // Sharing the host's network namespace, the sandbox would share its abstract Unix sockets
    // too (a session bus, a container runtime's): Landlock scopes them where the kernel can.
    if reach == Reach::Everything
        && let Err(e) = crate::landlock::scope_abstract_unix_sockets()
    {
        fail(EXIT_SETUP_FAILED, format!("landlock scope: {e}"));
    }
    let profile = seccomp::Profile {
        mechanism: Mechanism::Bwrap,
        reach,
    };
    let program = match seccomp::build(&profile) {
        Ok(program) => program.observed(),
        Err(e) => fail(EXIT_SETUP_FAILED, format!("seccomp: {e}")),
    };
    if let Err(e) = seccomp::install_observed(&program, socket.as_raw_fd()) {
        fail(EXIT_SETUP_FAILED, format!("seccomp: {e}"));
    }
    drop(socket);
    if let Some(fd) = started_fd {
        // The launcher's sign that the sandbox is set up and the command starts now.
        match sys::take_inherited_fd(fd) {
            Ok(fd) => {
                let mut started = std::fs::File::from(fd);
                if let Err(e) = std::io::Write::write_all(&mut started, b"x") {
                    fail(EXIT_SETUP_FAILED, format!("cannot report the start: {e}"));
                }
            }
            Err(e) => fail(EXIT_SETUP_FAILED, format!("no start descriptor: {e}")),
        }
    }
    let Some((program, rest)) = command.split_first() else {
        fail(EXIT_SETUP_FAILED, "no command".to_owned())
    };
    let error = std::process::Command::new(program).args(rest).exec();
    let status = if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    fail(
        status,
        format!("cannot execute `{}`: {error}", program.display()),
    )
}

type Parsed = (crate::plan::Reach, Option<i32>, Vec<OsString>);

fn parse(args: &[OsString]) -> Result<Parsed, String> {
    const USAGE: &str = "usage: --reach REACH [--started-fd N] -- PROGRAM ARGS…";
    let (reach, started, command) = match args {
        [flag, reach, dashes, command @ ..] if flag == "--reach" && dashes == "--" => {
            (reach, None, command)
        }
        [flag, reach, started_flag, fd, dashes, command @ ..]
            if flag == "--reach" && started_flag == "--started-fd" && dashes == "--" =>
        {
            let fd: i32 = fd
                .to_str()
                .and_then(|fd| fd.parse().ok())
                .filter(|fd| *fd > 2)
                .ok_or_else(|| format!("bad --started-fd `{}`", fd.display()))?;
            (reach, Some(fd), command)
        }
        _ => return Err(USAGE.to_owned()),
    };
    let reach = bwrap::reach_from_name(&reach.to_string_lossy())
        .ok_or_else(|| format!("unknown reach `{}`", reach.display()))?;
    if command.is_empty() {
        return Err("no command".to_owned());
    }
    Ok((reach, started, command.to_vec()))
}
