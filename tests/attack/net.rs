//! Network attacks: reach the test's listeners on the host's loopback (IPv4 and IPv6) and on the
//! host's own interface address, by TCP, UDP, a DNS query, bash's `/dev/tcp`, and raw ICMP.
//!
//! Every target is a listener the test opened on this machine; nothing is sent off-box. A TCP or
//! Unix stream attack succeeds only if it reads the listener's banner (which carries the
//! marker), so connecting to something else in the sandbox's own network namespace is a block.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use crate::{Args, Attack, Outcome, io_detail, sys};

const TIMEOUT: Duration = Duration::from_secs(3);

fn target(args: &Args) -> Result<SocketAddr, Outcome> {
    let addr: IpAddr = args
        .get("addr")?
        .parse()
        .map_err(|_| Outcome::error("option `--addr` is not an IP address"))?;
    Ok(SocketAddr::new(addr, args.num("port")?))
}

/// Read from a connected stream until the marker shows up, EOF, or the timeout.
pub fn read_banner(stream: &mut impl Read, marker: &str, what: &str) -> Outcome {
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                seen.extend_from_slice(&buf[..n]);
                if String::from_utf8_lossy(&seen).contains(marker) {
                    return Outcome::succeeded(format!(
                        "{what}: read the listener's marker banner"
                    ));
                }
            }
            Err(error) => {
                return Outcome::blocked(io_detail(
                    &format!("{what}: connected but reading failed"),
                    &error,
                ));
            }
        }
    }
    Outcome::blocked(format!(
        "{what}: connected but got {} bytes without the marker",
        seen.len()
    ))
}

/// `--addr A --port P --marker M`: TCP connect and read the banner.
pub fn tcp_connect(args: &Args) -> Attack {
    let target = target(args)?;
    let marker = args.get("marker")?;
    let mut stream = TcpStream::connect_timeout(&target, TIMEOUT)
        .map_err(|e| Outcome::blocked(io_detail(&format!("connect {target}"), &e)))?;
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    Ok(read_banner(&mut stream, marker, &format!("tcp {target}")))
}

/// `--addr A --port P --marker M`: send the marker by UDP and wait for the listener's echo.
pub fn udp_send(args: &Args) -> Attack {
    let target = target(args)?;
    let marker = args.get("marker")?;
    let bind: SocketAddr = if target.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    }
    .parse()
    .map_err(|_| Outcome::error("bad bind address"))?;
    let socket =
        UdpSocket::bind(bind).map_err(|e| Outcome::blocked(io_detail("udp socket", &e)))?;
    socket
        .send_to(marker.as_bytes(), target)
        .map_err(|e| Outcome::blocked(io_detail(&format!("udp send to {target}"), &e)))?;
    let _ = socket.set_read_timeout(Some(TIMEOUT));
    let mut buf = [0u8; 512];
    Ok(match socket.recv_from(&mut buf) {
        Ok((n, from)) if String::from_utf8_lossy(&buf[..n]).contains(marker) => Outcome::succeeded(
            format!("udp {target}: the listener echoed the marker from {from}"),
        ),
        Ok((n, from)) => Outcome::blocked(format!(
            "udp {target}: {n} bytes from {from} without the marker"
        )),
        Err(error) => Outcome::blocked(io_detail(&format!("udp {target}: sent, no echo"), &error)),
    })
}

/// `--addr A --port P --marker M`: send a DNS query for `<M>.escape.test` (type A) to the
/// test's resolver and accept a well-formed answer that names it.
pub fn dns_query(args: &Args) -> Attack {
    let target = target(args)?;
    let marker = args.get("marker")?;
    let name = format!("{marker}.escape.test");
    let mut query = vec![0x50, 0x4c, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        let len = u8::try_from(label.len()).map_err(|_| Outcome::error("dns label too long"))?;
        if len == 0 || len > 63 {
            return Err(Outcome::error("the marker does not make a valid DNS name"));
        }
        query.push(len);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    let bind: SocketAddr = if target.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    }
    .parse()
    .map_err(|_| Outcome::error("bad bind address"))?;
    let socket =
        UdpSocket::bind(bind).map_err(|e| Outcome::blocked(io_detail("udp socket", &e)))?;
    socket
        .send_to(&query, target)
        .map_err(|e| Outcome::blocked(io_detail(&format!("dns query to {target}"), &e)))?;
    let _ = socket.set_read_timeout(Some(TIMEOUT));
    let mut buf = [0u8; 1500];
    let n = socket
        .recv(&mut buf)
        .map_err(|e| Outcome::blocked(io_detail(&format!("dns {target}: no answer"), &e)))?;
    let reply = &buf[..n];
    let well_formed = n >= 12
        && reply[0] == 0x50
        && reply[1] == 0x4c
        && reply[2] & 0x80 != 0
        && u16::from_be_bytes([reply[6], reply[7]]) >= 1;
    Ok(
        if well_formed && String::from_utf8_lossy(reply).contains(marker) {
            Outcome::succeeded(format!("dns {target}: resolved `{name}`"))
        } else {
            Outcome::blocked(format!(
                "dns {target}: {n}-byte reply is not an answer for `{name}`"
            ))
        },
    )
}

/// Create a raw ICMP socket (needs CAP_NET_RAW); nothing is sent.
pub fn raw_icmp(_args: &Args) -> Attack {
    Ok(
        match sys::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) {
            Ok(_socket) => Outcome::succeeded("created a raw ICMP socket"),
            Err(error) => {
                Outcome::blocked(io_detail("socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)", &error))
            }
        },
    )
}

/// `--addr A --port P --marker M`: `bash -c 'exec 3<>/dev/tcp/A/P; read line <&3'`.
pub fn dev_tcp(args: &Args) -> Attack {
    let target = target(args)?;
    let marker = args.get("marker")?;
    let bash = ["/bin/bash", "/usr/bin/bash"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or_else(|| Outcome::error("bash is not installed: cannot try /dev/tcp"))?;
    let script = format!(
        "exec 3<>/dev/tcp/{}/{} || exit 3; read -r -t 3 line <&3; printf '%s' \"$line\"",
        target.ip(),
        target.port()
    );
    let output = std::process::Command::new(bash)
        .args(["-c", &script])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Outcome::error(io_detail("run bash", &e)))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    Ok(if stdout.contains(marker) {
        Outcome::succeeded(format!("bash /dev/tcp/{target}: read the marker banner"))
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Outcome::blocked(format!(
            "bash /dev/tcp/{target}: {} ({})",
            output.status,
            stderr.trim().lines().last().unwrap_or("no error output")
        ))
    })
}

/// The sandbox's own loopback: listen on 127.0.0.1:0 and talk to ourselves. Not an attack —
/// `loopback-only` must leave this working.
pub fn loopback_self(_args: &Args) -> Attack {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Outcome::blocked(io_detail("bind 127.0.0.1:0", &e)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Outcome::error(io_detail("local_addr", &e)))?;
    let mut client = TcpStream::connect_timeout(&addr, TIMEOUT)
        .map_err(|e| Outcome::blocked(io_detail(&format!("connect {addr}"), &e)))?;
    let (mut server, _) = listener
        .accept()
        .map_err(|e| Outcome::blocked(io_detail("accept", &e)))?;
    server
        .write_all(b"ping")
        .map_err(|e| Outcome::blocked(io_detail("write", &e)))?;
    let _ = client.set_read_timeout(Some(TIMEOUT));
    let mut buf = [0u8; 4];
    client
        .read_exact(&mut buf)
        .map_err(|e| Outcome::blocked(io_detail("read", &e)))?;
    Ok(Outcome::succeeded(format!("talked to itself over {addr}")))
}

/// `--family inet|inet6|vsock|unix --type stream|dgram`: create a socket, nothing else.
pub fn socket_create(args: &Args) -> Attack {
    let family = match args.get("family")? {
        "inet" => libc::AF_INET,
        "inet6" => libc::AF_INET6,
        "vsock" => libc::AF_VSOCK,
        "unix" => libc::AF_UNIX,
        other => return Err(Outcome::error(format!("unknown family `{other}`"))),
    };
    let ty = match args.get("type")? {
        "stream" => libc::SOCK_STREAM,
        "dgram" => libc::SOCK_DGRAM,
        other => return Err(Outcome::error(format!("unknown type `{other}`"))),
    };
    Ok(match sys::socket(family, ty, 0) {
        Ok(_socket) => Outcome::succeeded("created the socket"),
        Err(error) => Outcome::blocked(io_detail("socket", &error)),
    })
}
