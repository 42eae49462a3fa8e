//! The in-sandbox bridge: the sandbox's network namespace has only loopback, so programs reach the
//! proxy through a TCP listener on that loopback which relays every connection, byte for byte, to
//! the proxy's Unix socket (bind-mounted into the sandbox). The bridge applies no policy; the
//! proxy on the host side of the socket does, and it sees the bridge as its client.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::record::{Refusal, RefusalCode};
use crate::relay::{self, Stream};
use crate::sys;

/// Accepts TCP connections forever and relays each to a new connection on the Unix socket at
/// `socket`, on its own threads. Returns only when the listener itself fails; transient accept
/// errors (descriptor exhaustion, aborted connections) are waited out.
pub fn serve(listener: TcpListener, socket: PathBuf) -> io::Error {
    loop {
        match listener.accept() {
            Ok((client, _)) => {
                let _ = client.set_nodelay(true);
                let socket = socket.clone();
                let spawned = std::thread::Builder::new()
                    .name("palisade-bridge-conn".into())
                    .spawn(move || bridge_one(Stream::Tcp(client), &socket));
                if spawned.is_err() {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            Err(e) => match e.raw_os_error() {
                Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP) => return e,
                _ => std::thread::sleep(Duration::from_millis(10)),
            },
        }
    }
}

fn bridge_one(client: Stream, socket: &Path) {
    match UnixStream::connect(socket) {
        Ok(proxy) => {
            let _ = relay::relay(client, Stream::Unix(proxy), &[]);
        }
        Err(e) => {
            // The client is almost certainly speaking HTTP to a proxy; tell it why in kind.
            let refusal = Refusal::new(
                RefusalCode::ProxyUnreachable,
                format!(
                    "the bridge cannot reach the proxy socket `{}`: {e}",
                    socket.display()
                ),
            );
            let _ = client.set_write_timeout(Some(Duration::from_secs(5)));
            let _ = (&client).write_all(&refusal.http_response());
        }
    }
}

/// Binds `listen`, starts a detached bridge process serving it, then execs `program`.
///
/// Order matters: the listener exists before the command starts (no race for the command's first
/// connection), and the bridge is a grandchild, not a child, of the command (double fork: the
/// intermediate child exits at once and is reaped here), so a command that waits for all its
/// children (`wait(-1)`) never waits for the bridge. The bridge starts a new session, ignores
/// SIGINT/SIGTERM/SIGHUP/SIGPIPE, points stdio at `/dev/null` and closes every other inherited
/// descriptor, so it holds none of the command's pipes open; it serves until its PID namespace
/// ends (in `linux-bwrap`, when the sandbox does).
///
/// `program` must already be resolved (no `PATH` search); `argv` includes `argv[0]`; `env` is the
/// complete environment. Call this while the process is single-threaded: the bridge child runs
/// ordinary Rust code after `fork`. Returns only on failure (bind, fork, bridge set-up, execve);
/// after an execve failure the bridge is already running.
pub fn start_detached_then_exec(
    listen: SocketAddr,
    socket: &Path,
    program: &CStr,
    argv: &[CString],
    env: &[CString],
) -> io::Error {
    let listener = match TcpListener::bind(listen) {
        Ok(l) => l,
        Err(e) => return e,
    };
    let socket = socket.to_path_buf();
    let child = match sys::fork() {
        Ok(pid) => pid,
        Err(e) => return e,
    };
    if child == 0 {
        // Intermediate child: set up everything the bridge inherits, fork it, exit.
        let set_up = (|| -> io::Result<()> {
            sys::setsid();
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
                sys::ignore_signal(signal)?;
            }
            sys::stdio_to_dev_null()?;
            sys::close_other_fds(listener.as_raw_fd());
            Ok(())
        })();
        if set_up.is_err() {
            sys::exit_now(1);
        }
        match sys::fork() {
            Ok(0) => {
                let _ = serve(listener, socket);
                sys::exit_now(1)
            }
            Ok(_) => sys::exit_now(0),
            Err(_) => sys::exit_now(1),
        }
    }
    drop(listener);
    match sys::waitpid(child) {
        Ok(status) if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 => {}
        Ok(status) => {
            return io::Error::other(format!(
                "the bridge process failed to start (intermediate child wait status {status})"
            ));
        }
        Err(e) => return e,
    }
    sys::execve(program, argv, env)
}

/// The bridge's command line, shared by `palisade __proxy-bridge` (bwrap, where the host's own
/// binary runs in the sandbox) and the static `palisade-bridge` (Docker, where the image may have
/// no libc): `__proxy-bridge --port N --socket PATH -- PROGRAM ARGS…`. One spelling keeps the
/// launch plans of both backends alike.
pub const SUBCOMMAND: &str = "__proxy-bridge";

/// Why [`exec_main`] did not exec the command, with the exit status that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecFailure {
    /// 127 when the command was not found (a shell's status for that), else 125: nothing of
    /// the command ran.
    pub status: u8,
    pub message: String,
}

impl ExecFailure {
    fn not_launched(message: impl Into<String>) -> Self {
        ExecFailure {
            status: 125,
            message: message.into(),
        }
    }
}

/// Binds the bridge on `127.0.0.1:port`, detaches it and execs `command` with this process's
/// environment. A `command[0]` without `/` is looked up in this process's `PATH` (inside a
/// container that is the image's, which the launcher cannot resolve). Returns only on failure.
pub fn exec_main(port: u16, socket: &Path, command: &[OsString]) -> ExecFailure {
    let Some(program) = command.first() else {
        return ExecFailure::not_launched("no command after `--`");
    };
    let to_c = |bytes: &[u8]| CString::new(bytes.to_vec()).ok();
    let resolved = match resolve_program(program, std::env::var_os("PATH").as_deref()) {
        Ok(path) => path,
        Err(message) => {
            return ExecFailure {
                status: 127,
                message,
            };
        }
    };
    let Some(program_c) = to_c(resolved.as_os_str().as_bytes()) else {
        return ExecFailure::not_launched("the command contains a NUL byte");
    };
    let argv: Option<Vec<CString>> = command.iter().map(|a| to_c(a.as_bytes())).collect();
    let (Some(argv), Some(env)) = (argv, environ()) else {
        return ExecFailure::not_launched("an argument or variable contains a NUL byte");
    };
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let error = start_detached_then_exec(listen, socket, &program_c, &argv, &env);
    ExecFailure::not_launched(format!(
        "cannot start `{}` behind the egress bridge: {error}",
        program.to_string_lossy()
    ))
}

/// This process's environment as `NAME=value` strings for `execve`; `None` if one holds a NUL.
pub fn environ() -> Option<Vec<CString>> {
    std::env::vars_os()
        .map(|(name, value)| {
            let mut pair = name.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            CString::new(pair).ok()
        })
        .collect()
}

/// `program` itself when it names a path (has a `/`), else the first executable regular file
/// called `program` in `path` (`execvp`'s rule; empty entries mean the current directory), else
/// in [`palisade_shims::path::DEFAULT_PATH`] when there is no `PATH`: the workspace's one search.
pub fn resolve_program(program: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err(String::from("the command is empty"));
    }
    let search = path.unwrap_or(OsStr::new(palisade_shims::path::DEFAULT_PATH));
    palisade_shims::path::find_program(program, &palisade_shims::path::Search::execvp(search))
        .map_err(|_| {
            format!(
                "`{}` not found in PATH `{}`",
                program.to_string_lossy(),
                search.to_string_lossy()
            )
        })
}

/// Parses the bridge's arguments after [`SUBCOMMAND`]: `--port N --socket PATH -- COMMAND…`.
pub fn parse_args(args: &[OsString]) -> Result<(u16, PathBuf, Vec<OsString>), String> {
    let mut port = None;
    let mut socket = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.to_str() {
            Some("--port") => {
                let value = rest.next().and_then(|v| v.to_str()?.parse::<u16>().ok());
                port = Some(value.ok_or("--port needs a port number")?);
            }
            Some("--socket") => {
                socket = Some(PathBuf::from(rest.next().ok_or("--socket needs a path")?));
            }
            Some("--") => break,
            _ => return Err(format!("unexpected argument `{}`", arg.to_string_lossy())),
        }
    }
    let command: Vec<OsString> = rest.cloned().collect();
    match (port, socket) {
        (Some(port), Some(socket)) if !command.is_empty() => Ok((port, socket, command)),
        _ => Err(String::from(
            "usage: __proxy-bridge --port N --socket PATH -- COMMAND [ARGS…]",
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn arguments_parse_and_refuse_what_is_missing() {
        let args = |text: &str| -> Vec<OsString> { text.split(' ').map(OsString::from).collect() };
        let (port, socket, command) =
            parse_args(&args("--port 3128 --socket /run/s.sock -- ls -l --port")).unwrap();
        assert_eq!((port, socket), (3128, PathBuf::from("/run/s.sock")));
        assert_eq!(command, args("ls -l --port"));
        for bad in [
            "--port 3128 --socket /s --",
            "--socket /s -- ls",
            "--port x --socket /s -- ls",
            "--port 1 --socket /s --extra -- ls",
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn programs_resolve_like_execvp() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = OsString::from(format!("/nonexistent:{}", dir.path().display()));
        assert_eq!(
            resolve_program(OsStr::new("tool"), Some(&path)).unwrap(),
            tool
        );
        assert!(
            resolve_program(OsStr::new("plain"), Some(&path)).is_err(),
            "not executable"
        );
        assert!(resolve_program(OsStr::new("absent"), Some(&path)).is_err());
        assert_eq!(
            resolve_program(OsStr::new("./x"), Some(&path)).unwrap(),
            PathBuf::from("./x")
        );
        assert!(resolve_program(OsStr::new(""), Some(&path)).is_err());
    }
}
