//! The in-sandbox bridge: the sandbox's network namespace has only loopback, so programs reach the
//! proxy through a TCP listener on that loopback which relays every connection, byte for byte, to
//! the proxy's Unix socket (bind-mounted into the sandbox). The bridge applies no policy; the
//! proxy on the host side of the socket does, and it sees the bridge as its client.

use std::ffi::{CStr, CString};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
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
