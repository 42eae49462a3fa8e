//! `palisade __sandbox-exec`: the first program bubblewrap runs in the sandbox, and under docker
//! the first the container's init runs (from the static `palisade-bridge`, which carries it).
//! Under `allow-outbound` (the host's network namespace) it first scopes the sandbox out of the
//! host's abstract Unix sockets with Landlock
//! ([`crate::landlock::scope_abstract_unix_sockets`]). It installs Palisade's seccomp filter in
//! its observed form ([`crate::seccomp::Program::observed`]), sends the filter's listener to the
//! supervisor's observer — over [`bwrap::OBSERVE_FD`] under bwrap, over the Unix socket
//! `--observe-socket` names under docker (bound into the container from the host) — closes that
//! descriptor and execs the rest of its arguments (the network bridge, or the command).
//!
//! Why not `bwrap --seccomp FD`, or the container runtime's profile alone: both install the
//! program without a listener, so the calls it refuses could not be observed. The stub installs
//! the very same program at the very same point (after the sandbox's setup, before anything of
//! the command runs), under `no_new_privs`, and a failure to install it exits 125 before the
//! command starts, so the launcher reports a setup failure and nothing ran. Under docker the
//! runtime's own profile then leaves those refusals to this program
//! ([`crate::seccomp::oci_profile_beneath_observer`]).
//!
//! Usage (built by [`bwrap::SandboxExec::prefix`] and [`crate::docker::argv`]):
//! `palisade __sandbox-exec --reach REACH [--mechanism bwrap|docker] [--observe-socket PATH]
//! [--started-fd N] -- PROGRAM ARGS…`. With `--started-fd`, the stub writes one byte there just
//! before it execs the command, the launcher's sign that the sandbox was set up and the command
//! started (when a network bridge runs between the stub and the command, the bridge's own
//! wrapper does that instead).

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
    let Parsed {
        reach,
        mechanism,
        observe_socket,
        started_fd,
        command,
    } = match parse(args) {
        Ok(parsed) => parsed,
        Err(message) => fail(EXIT_SETUP_FAILED, message),
    };
    let socket = match &observe_socket {
        None => sys::take_inherited_fd(bwrap::OBSERVE_FD),
        Some(path) => std::os::unix::net::UnixStream::connect(path).map(std::os::fd::OwnedFd::from),
    };
    let socket = match socket {
        Ok(fd) => fd,
        Err(e) => fail(EXIT_SETUP_FAILED, format!("no observer socket: {e}")),
    };
    // Sharing the host's network namespace (bwrap's `allow-outbound`, docker's `--network
    // host`), the sandbox would share its abstract Unix sockets too (a session bus, a container
    // runtime's): Landlock scopes them where the kernel can (the probes list it where not).
    if reach == Reach::Everything
        && let Err(e) = crate::landlock::scope_abstract_unix_sockets()
    {
        fail(EXIT_SETUP_FAILED, format!("landlock scope: {e}"));
    }
    let profile = seccomp::Profile { mechanism, reach };
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

/// The stub's arguments.
struct Parsed {
    reach: Reach,
    mechanism: Mechanism,
    /// The observer's Unix socket to connect to; `None`: the inherited [`bwrap::OBSERVE_FD`].
    observe_socket: Option<std::path::PathBuf>,
    started_fd: Option<i32>,
    command: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<Parsed, String> {
    const USAGE: &str = "usage: --reach REACH [--mechanism bwrap|docker] [--observe-socket PATH] [--started-fd N] -- PROGRAM ARGS…";
    let mut reach = None;
    let mut mechanism = Mechanism::Bwrap;
    let mut observe_socket = None;
    let mut started_fd = None;
    let mut rest = args;
    let command = loop {
        match rest {
            [dashes, command @ ..] if dashes == "--" => break command,
            [flag, value, more @ ..] => {
                let text = value.to_string_lossy();
                match flag.to_str() {
                    Some("--reach") => {
                        reach = Some(
                            bwrap::reach_from_name(&text)
                                .ok_or_else(|| format!("unknown reach `{text}`"))?,
                        );
                    }
                    Some("--mechanism") => {
                        mechanism = match &*text {
                            "bwrap" => Mechanism::Bwrap,
                            "docker" => Mechanism::Docker,
                            _ => return Err(format!("unknown mechanism `{text}`")),
                        };
                    }
                    Some("--observe-socket") => {
                        let path = std::path::PathBuf::from(value);
                        if !path.is_absolute() {
                            return Err(format!("--observe-socket `{text}` is not absolute"));
                        }
                        observe_socket = Some(path);
                    }
                    Some("--started-fd") => {
                        let fd = text
                            .parse()
                            .ok()
                            .filter(|fd| *fd > 2)
                            .ok_or_else(|| format!("bad --started-fd `{text}`"))?;
                        started_fd = Some(fd);
                    }
                    _ => return Err(USAGE.to_owned()),
                }
                rest = more;
            }
            _ => return Err(USAGE.to_owned()),
        }
    };
    let reach = reach.ok_or_else(|| USAGE.to_owned())?;
    if command.is_empty() {
        return Err("no command".to_owned());
    }
    Ok(Parsed {
        reach,
        mechanism,
        observe_socket,
        started_fd,
        command: command.to_vec(),
    })
}
