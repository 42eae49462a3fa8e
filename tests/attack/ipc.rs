//! IPC attacks: the host's pathname and abstract Unix sockets, terminal injection, keyrings —
//! plus `socketpair`, which must keep working inside.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixStream};
use std::path::Path;
use std::time::Duration;

use crate::net::read_banner;
use crate::{Args, Attack, Outcome, io_detail, sys};

const TIMEOUT: Duration = Duration::from_secs(3);

/// `--path P --marker M`: connect to a pathname Unix socket and read its banner.
pub fn unix_connect(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    let mut stream = UnixStream::connect(path)
        .map_err(|e| Outcome::blocked(io_detail(&format!("connect `{}`", path.display()), &e)))?;
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    Ok(read_banner(
        &mut stream,
        args.get("marker")?,
        &format!("unix `{}`", path.display()),
    ))
}

/// `--name N --marker M`: connect to the abstract Unix socket `@N` and read its banner.
pub fn unix_abstract(args: &Args) -> Attack {
    let name = args.get("name")?;
    let addr = SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| Outcome::error(io_detail("abstract address", &e)))?;
    let mut stream = UnixStream::connect_addr(&addr)
        .map_err(|e| Outcome::blocked(io_detail(&format!("connect `@{name}`"), &e)))?;
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    Ok(read_banner(
        &mut stream,
        args.get("marker")?,
        &format!("unix `@{name}`"),
    ))
}

/// `--path P --marker M`: send the marker to a pathname datagram socket (the harness checks
/// on the host that it arrived, as journald or syslog would receive it).
pub fn unix_dgram(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    let socket =
        UnixDatagram::unbound().map_err(|e| Outcome::blocked(io_detail("datagram socket", &e)))?;
    Ok(match socket.send_to(args.get("marker")?.as_bytes(), path) {
        Ok(n) => Outcome::succeeded(format!("sent {n} bytes to `{}`", path.display())),
        Err(error) => Outcome::blocked(io_detail(&format!("send to `{}`", path.display()), &error)),
    })
}

/// A connected pair of Unix sockets must work inside every sandbox (not an attack).
pub fn socketpair(_args: &Args) -> Attack {
    let (mut a, mut b) =
        UnixStream::pair().map_err(|e| Outcome::blocked(io_detail("socketpair", &e)))?;
    a.write_all(b"pair")
        .map_err(|e| Outcome::blocked(io_detail("write", &e)))?;
    let _ = b.set_read_timeout(Some(TIMEOUT));
    let mut buf = [0u8; 4];
    b.read_exact(&mut buf)
        .map_err(|e| Outcome::blocked(io_detail("read", &e)))?;
    Ok(Outcome::succeeded("socketpair works"))
}

/// `--tty-rdev R --marker M`: push `M\n` into the input queue of the terminal on stdin with
/// TIOCSTI — only if stdin is the pty the test created (its device number is `R`), so a real
/// terminal is never typed into.
pub fn tiocsti(args: &Args) -> Attack {
    let want: u64 = args.num("tty-rdev")?;
    let marker = args.get("marker")?;
    let stdin = std::io::stdin();
    let stat =
        sys::fstat(stdin.as_fd()).map_err(|e| Outcome::error(io_detail("fstat stdin", &e)))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFCHR {
        // A pipe or file on stdin (Docker attaches stdin through the daemon): the terminal
        // was never handed to the sandbox, so there is nothing to inject into.
        return Err(Outcome::blocked(format!(
            "stdin is not a terminal (mode {:o}): the test's pty is out of reach",
            stat.st_mode
        )));
    }
    if stat.st_rdev != want {
        return Err(Outcome::error(format!(
            "stdin is not the test's pty (rdev {} mode {:o}, want rdev {want}): refusing to inject",
            stat.st_rdev, stat.st_mode
        )));
    }
    for byte in marker.bytes().chain(std::iter::once(b'\n')) {
        sys::tiocsti(stdin.as_fd(), byte)
            .map_err(|e| Outcome::blocked(io_detail("ioctl(TIOCSTI)", &e)))?;
    }
    Ok(Outcome::succeeded(
        "injected the marker into the terminal's input queue",
    ))
}

/// `--desc D`: add a key to the session keyring.
pub fn keyring_add(args: &Args) -> Attack {
    let desc = args.get("desc")?;
    Ok(
        match sys::add_session_key(desc, b"palisade escape battery") {
            Ok(serial) => Outcome::succeeded(format!("added key {serial} to the session keyring")),
            Err(error) => Outcome::blocked(io_detail("add_key to @s", &error)),
        },
    )
}

/// `--desc D --marker M`: find the key `D` the test put in the inherited session keyring and
/// read its payload.
pub fn keyring_read(args: &Args) -> Attack {
    let desc = args.get("desc")?;
    let marker = args.get("marker")?;
    Ok(match sys::read_session_key(desc) {
        Ok(payload) if String::from_utf8_lossy(&payload).contains(marker) => {
            Outcome::succeeded("read the test's secret key from the inherited session keyring")
        }
        Ok(payload) => Outcome::blocked(format!("read {} bytes without the marker", payload.len())),
        Err(error) => Outcome::blocked(io_detail(&format!("keyctl search/read `{desc}`"), &error)),
    })
}
