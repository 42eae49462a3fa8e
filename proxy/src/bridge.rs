//! The in-sandbox bridge: the sandbox's network namespace has only loopback, so programs reach the
//! host through TCP listeners on that loopback, each relaying every connection, byte for byte,
//! to a Unix socket bind-mounted into the sandbox. Two kinds of route: the filtering proxy
//! (`--proxy`: a refusal to connect is answered in HTTP, which its clients speak) and a listed
//! port of the host's loopback (`--forward`: a refusal is a plain close). The bridge applies no
//! policy; the host side of each socket does, and it sees the bridge as its client.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::record::{Refusal, RefusalCode, RouteKind};
use crate::relay::{self, Stream};
use crate::sys;

/// One listener of the bridge: where it listens in the sandbox, the Unix socket its
/// connections are relayed to, and what kind of route that is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeRoute {
    pub listen: SocketAddr,
    pub socket: PathBuf,
    pub kind: RouteKind,
}

impl BridgeRoute {
    /// The route as its command-line option: `--proxy ADDR=SOCKET` or `--forward ADDR=SOCKET`.
    pub fn to_args(&self) -> [OsString; 2] {
        let flag = match self.kind {
            RouteKind::Proxy => "--proxy",
            RouteKind::LoopbackPort => "--forward",
        };
        let mut value = OsString::from(format!("{}=", self.listen));
        value.push(self.socket.as_os_str());
        [OsString::from(flag), value]
    }
}

/// Accepts TCP connections forever and relays each to a new connection on the Unix socket at
/// `socket`, on its own threads. Returns only when the listener itself fails; transient accept
/// errors (descriptor exhaustion, aborted connections) are waited out.
pub fn serve(listener: TcpListener, socket: PathBuf) -> io::Error {
    serve_route(listener, socket, RouteKind::Proxy)
}

fn serve_route(listener: TcpListener, socket: PathBuf, kind: RouteKind) -> io::Error {
    loop {
        match listener.accept() {
            Ok((client, _)) => {
                let _ = client.set_nodelay(true);
                let socket = socket.clone();
                let spawned = std::thread::Builder::new()
                    .name("palisade-bridge-conn".into())
                    .spawn(move || bridge_one(Stream::Tcp(client), &socket, kind));
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

fn bridge_one(client: Stream, socket: &Path, kind: RouteKind) {
    match UnixStream::connect(socket) {
        Ok(host_side) => {
            let _ = relay::relay(client, Stream::Unix(host_side), &[]);
        }
        Err(e) => match kind {
            // The client is almost certainly speaking HTTP to a proxy; tell it why in kind.
            RouteKind::Proxy => {
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
            // A forwarded port speaks its own protocol: closing is the only honest answer.
            RouteKind::LoopbackPort => {}
        },
    }
}

/// Binds every route, starts a detached bridge process serving them, then execs `program`.
///
/// Order matters: the listeners exist before the command starts (no race for the command's
/// first connection), and the bridge is a grandchild, not a child, of the command (double fork:
/// the intermediate child exits at once and is reaped here), so a command that waits for all
/// its children (`wait(-1)`) never waits for the bridge. The bridge starts a new session,
/// ignores SIGINT/SIGTERM/SIGHUP/SIGPIPE, points stdio at `/dev/null` and closes every other
/// inherited descriptor, so it holds none of the command's pipes open; it serves until its PID
/// namespace ends (in `linux-bwrap`, when the sandbox does).
///
/// A forwarded route on `::1` is skipped when the sandbox has no IPv6 loopback to bind
/// (`EADDRNOTAVAIL`): nothing inside can connect to `::1` then either. Any other bind failure
/// fails the launch.
///
/// `program` must already be resolved (no `PATH` search); `argv` includes `argv[0]`; `env` is the
/// complete environment. Call this while the process is single-threaded: the bridge child runs
/// ordinary Rust code after `fork`. Returns only on failure (bind, fork, bridge set-up, execve);
/// after an execve failure the bridge is already running.
pub fn start_detached_then_exec(
    routes: &[BridgeRoute],
    program: &CStr,
    argv: &[CString],
    env: &[CString],
) -> io::Error {
    let mut listeners = Vec::new();
    for route in routes {
        match TcpListener::bind(route.listen) {
            Ok(listener) => listeners.push((listener, route.socket.clone(), route.kind)),
            Err(e)
                if route.kind == RouteKind::LoopbackPort
                    && route.listen.is_ipv6()
                    && e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {}
            Err(e) => {
                return io::Error::new(e.kind(), format!("cannot listen on {}: {e}", route.listen));
            }
        }
    }
    let keep: Vec<RawFd> = listeners.iter().map(|(l, _, _)| l.as_raw_fd()).collect();
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
            sys::close_other_fds(&keep);
            Ok(())
        })();
        if set_up.is_err() {
            sys::exit_now(1);
        }
        match sys::fork() {
            Ok(0) => serve_all(listeners),
            Ok(_) => sys::exit_now(0),
            Err(_) => sys::exit_now(1),
        }
    }
    drop(listeners);
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

/// The bridge process: one accept thread per route; exits when every listener has failed.
fn serve_all(listeners: Vec<(TcpListener, PathBuf, RouteKind)>) -> ! {
    let threads: Vec<_> = listeners
        .into_iter()
        .filter_map(|(listener, socket, kind)| {
            std::thread::Builder::new()
                .name("palisade-bridge-accept".into())
                .spawn(move || serve_route(listener, socket, kind))
                .ok()
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    sys::exit_now(1)
}

/// The bridge's command line, shared by `palisade __bridge` (bwrap, where the host's own binary
/// runs in the sandbox) and the static `palisade-bridge` (Docker, where the image may have no
/// libc): `__bridge [--proxy ADDR=SOCKET] [--forward ADDR=SOCKET]… -- PROGRAM ARGS…`. One
/// spelling keeps the launch plans of both backends alike.
pub const SUBCOMMAND: &str = "__bridge";

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

/// The whole bridge after [`SUBCOMMAND`]: parses `args`, binds every route, detaches the
/// bridge and execs the command. Returns only on failure.
pub fn main(args: &[OsString]) -> ExecFailure {
    match parse_args(args) {
        Ok((routes, command)) => exec_main(&routes, &command),
        Err(usage) => ExecFailure::not_launched(usage),
    }
}

/// Binds the routes, detaches the bridge and execs `command` with this process's environment.
/// A `command[0]` without `/` is looked up in this process's `PATH` (inside a container that is
/// the image's, which the launcher cannot resolve). Returns only on failure.
pub fn exec_main(routes: &[BridgeRoute], command: &[OsString]) -> ExecFailure {
    let Some(program) = command.first() else {
        return ExecFailure::not_launched("no command after `--`");
    };
    let to_c = |bytes: &[u8]| CString::new(bytes.to_vec()).ok();
    let resolved = match resolve_program(program, &palisade_shims::path::of_process()) {
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
    let error = start_detached_then_exec(routes, &program_c, &argv, &env);
    ExecFailure::not_launched(format!(
        "cannot start `{}` behind the network bridge: {error}",
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
/// called `program` in `path` (`execvp`'s rule; empty entries mean the current directory): the
/// workspace's one search, in the path [`palisade_shims::path::of_process`] chose.
pub fn resolve_program(program: &OsStr, path: &OsStr) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err(String::from("the command is empty"));
    }
    palisade_shims::path::find_program(program, &palisade_shims::path::Search::execvp(path))
        .map_err(|_| {
            format!(
                "`{}` not found in PATH `{}`",
                program.to_string_lossy(),
                path.to_string_lossy()
            )
        })
}

/// The bridge's second mode, `__bridge connect [--via ADDR] HOST PORT`: one connection through
/// the filtering proxy for a program that speaks no proxy protocol itself, on stdin and stdout.
/// ssh's `ProxyCommand` is the user: Palisade's `GIT_SSH_COMMAND` runs
/// `ssh -o ProxyCommand='… __bridge connect --via 127.0.0.1:3128 %h %p'`.
pub const CONNECT: &str = "connect";

/// How long the proxy may take to answer the SOCKS5 greeting and request (it connects upstream
/// before it replies, with its own 10 s bound per address).
const CONNECT_ANSWER_BOUND: Duration = Duration::from_secs(60);

/// `connect [--via ADDR] HOST PORT` (after [`CONNECT`]): asks the proxy at `ADDR` (a loopback
/// address; default `127.0.0.1:3128`, the bridge's proxy listener) for `HOST:PORT` over SOCKS5,
/// then relays stdin to the connection and the connection to stdout until the connection ends.
/// The proxy applies the policy; a refusal is its SOCKS5 reply, and the run's record says why.
pub fn connect_main(args: &[OsString]) -> Result<(), String> {
    let (via, host, port) = parse_connect_args(args)?;
    let mut stream = std::net::TcpStream::connect_timeout(&via, Duration::from_secs(10))
        .map_err(|e| format!("cannot reach the proxy at {via}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(CONNECT_ANSWER_BOUND));
    crate::socks::client_connect(&mut stream, &host, port)
        .map_err(|e| format!("{e} (the run's audit outcome, `network.connections`, says why)"))?;
    let _ = stream.set_read_timeout(None);
    let mut upstream = stream
        .try_clone()
        .map_err(|e| format!("cannot relay: {e}"))?;
    // stdin → connection on its own thread; when stdin ends, the connection's write half does.
    let _ = std::thread::Builder::new()
        .name("palisade-connect-up".into())
        .spawn(move || {
            let _ = io::copy(&mut io::stdin().lock(), &mut upstream);
            let _ = upstream.shutdown(std::net::Shutdown::Write);
        })
        .map_err(|e| format!("cannot relay: {e}"))?;
    // Flushed after every read: stdout is line-buffered, and ssh's packets are not lines.
    let mut stdout = io::stdout().lock();
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("relaying from the proxy failed: {e}")),
        };
        stdout
            .write_all(buf.get(..n).unwrap_or_default())
            .and_then(|()| stdout.flush())
            .map_err(|e| format!("relaying to stdout failed: {e}"))?;
    }
}

/// Parses `[--via ADDR] HOST PORT`: a loopback proxy address, a host as an HTTP authority
/// spells it (name, IPv4, `[v6]` or bare IPv6), a port `1..=65535`.
pub fn parse_connect_args(
    args: &[OsString],
) -> Result<(SocketAddr, crate::host::Host, u16), String> {
    const CONNECT_USAGE: &str = "usage: __bridge connect [--via ADDR] HOST PORT";
    let text: Option<Vec<&str>> = args.iter().map(|a| a.to_str()).collect();
    let Some(text) = text else {
        return Err(format!("{CONNECT_USAGE} (arguments are not UTF-8)"));
    };
    let (via, rest) = match text.as_slice() {
        ["--via", via, rest @ ..] => {
            let via: SocketAddr = via
                .parse()
                .map_err(|_| format!("`{}` is not a socket address", via.escape_debug()))?;
            if !via.ip().is_loopback() {
                return Err(format!("the proxy is on loopback, not {via}"));
            }
            (via, rest)
        }
        rest => (SocketAddr::from(([127, 0, 0, 1], 3128)), rest),
    };
    let [host, port] = rest else {
        return Err(CONNECT_USAGE.to_owned());
    };
    let host =
        crate::host::Host::parse(host).map_err(|e| format!("`{}`: {e}", host.escape_debug()))?;
    let port = crate::host::parse_port(port)
        .ok_or_else(|| format!("`{}` is not a port", port.escape_debug()))?;
    Ok((via, host, port))
}

const USAGE: &str =
    "usage: __bridge [--proxy ADDR=SOCKET] [--forward ADDR=SOCKET]... -- COMMAND [ARGS...]";

/// Parses the bridge's arguments after [`SUBCOMMAND`]: at least one route, then `--` and the
/// command.
pub fn parse_args(args: &[OsString]) -> Result<(Vec<BridgeRoute>, Vec<OsString>), String> {
    let mut routes = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let kind = match arg.to_str() {
            Some("--proxy") => RouteKind::Proxy,
            Some("--forward") => RouteKind::LoopbackPort,
            Some("--") => break,
            _ => return Err(format!("unexpected argument `{}`", shown(arg))),
        };
        let value = rest
            .next()
            .ok_or_else(|| format!("{} needs ADDR=SOCKET", shown(arg)))?;
        routes.push(parse_route(value, kind)?);
    }
    let command: Vec<OsString> = rest.cloned().collect();
    if routes.is_empty() || command.is_empty() {
        return Err(String::from(USAGE));
    }
    Ok((routes, command))
}

/// An argument as a message quotes it: one line, control characters escaped (argv may hold any
/// bytes, and the message goes to a log line).
fn shown(arg: &OsStr) -> String {
    arg.to_string_lossy().escape_debug().to_string()
}

/// `ADDR=SOCKET`: a loopback socket address (the bridge never listens elsewhere) and an
/// absolute socket path.
fn parse_route(value: &OsStr, kind: RouteKind) -> Result<BridgeRoute, String> {
    let bytes = value.as_bytes();
    let bad = || format!("`{}` is not ADDR=SOCKET", shown(value));
    let mut halves = bytes.splitn(2, |b| *b == b'=');
    let (Some(addr), Some(socket)) = (halves.next(), halves.next()) else {
        return Err(bad());
    };
    let listen: SocketAddr = std::str::from_utf8(addr)
        .ok()
        .and_then(|a| a.parse().ok())
        .ok_or_else(bad)?;
    if !listen.ip().is_loopback() {
        return Err(format!("the bridge listens on loopback only, not {listen}"));
    }
    let socket = PathBuf::from(OsStr::from_bytes(socket));
    if !socket.is_absolute() {
        return Err(bad());
    }
    Ok(BridgeRoute {
        listen,
        socket,
        kind,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn arguments_parse_and_refuse_what_is_missing() {
        let args = |text: &str| -> Vec<OsString> { text.split(' ').map(OsString::from).collect() };
        let (routes, command) = parse_args(&args(
            "--proxy 127.0.0.1:3128=/run/b/proxy.sock --forward [::1]:8080=/run/b/v6=8080.sock -- ls -l --proxy",
        ))
        .unwrap();
        assert_eq!(
            routes,
            [
                BridgeRoute {
                    listen: "127.0.0.1:3128".parse().unwrap(),
                    socket: PathBuf::from("/run/b/proxy.sock"),
                    kind: RouteKind::Proxy,
                },
                BridgeRoute {
                    listen: "[::1]:8080".parse().unwrap(),
                    socket: PathBuf::from("/run/b/v6=8080.sock"),
                    kind: RouteKind::LoopbackPort,
                },
            ]
        );
        assert_eq!(command, args("ls -l --proxy"));
        for route in &routes {
            let [flag, value] = route.to_args();
            let (again, _) = parse_args(&[flag, value, "--".into(), "x".into()]).unwrap();
            assert_eq!(again, std::slice::from_ref(route));
        }
        for bad in [
            "--proxy 127.0.0.1:3128=/s --",
            "-- ls",
            "--proxy 127.0.0.1:3128 -- ls",
            "--proxy 10.0.0.1:3128=/s -- ls",
            "--forward 127.0.0.1:80=relative -- ls",
            "--forward 127.0.0.1=/s -- ls",
            "--proxy 127.0.0.1:1=/s --extra -- ls",
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad}");
        }
    }

    /// Found by the `bridge_args` fuzz target: an argument with a control character was quoted
    /// raw, so the error was not one line (a newline in argv could forge log lines).
    #[test]
    fn refusals_quote_arguments_on_one_line() {
        use std::os::unix::ffi::OsStringExt;
        for args in [
            vec![OsString::from("--p:3128=/run/palisa$e\u{15}")],
            vec![OsString::from("--proxy\nforged")],
            vec![
                OsString::from("--proxy"),
                OsString::from("127.0.0.1:1=/s\nforged"),
            ],
            vec![OsString::from("--proxy"), OsString::from("x\ny=/s")],
            vec![OsString::from_vec(b"--\xff\n".to_vec())],
        ] {
            let error = parse_args(&args).unwrap_err();
            assert!(!error.chars().any(char::is_control), "{error:?}");
        }
        let error = parse_args(&[OsString::from("--p\u{15}")]).unwrap_err();
        assert_eq!(error, "unexpected argument `--p\\u{15}`");
    }

    #[test]
    fn connect_arguments() {
        let args = |text: &str| -> Vec<OsString> { text.split(' ').map(OsString::from).collect() };
        let (via, host, port) = parse_connect_args(&args("Git.Test 22")).unwrap();
        assert_eq!(via, "127.0.0.1:3128".parse().unwrap());
        assert_eq!(host, crate::host::Host::Name("git.test".into()));
        assert_eq!(port, 22);
        let (via, host, _) = parse_connect_args(&args("--via [::1]:9 ::1 2222")).unwrap();
        assert_eq!(via, "[::1]:9".parse().unwrap());
        assert_eq!(host.to_authority(), "[::1]");
        for bad in [
            "git.test",
            "git.test 0",
            "git.test 22 extra",
            "--via 10.0.0.1:3128 git.test 22",
            "--via nowhere git.test 22",
            "bad..name 22",
        ] {
            assert!(parse_connect_args(&args(bad)).is_err(), "{bad}");
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
        assert_eq!(resolve_program(OsStr::new("tool"), &path).unwrap(), tool);
        assert!(
            resolve_program(OsStr::new("plain"), &path).is_err(),
            "not executable"
        );
        assert!(resolve_program(OsStr::new("absent"), &path).is_err());
        assert_eq!(
            resolve_program(OsStr::new("./x"), &path).unwrap(),
            PathBuf::from("./x")
        );
        assert!(resolve_program(OsStr::new(""), &path).is_err());
    }
}
