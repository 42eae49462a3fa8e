//! Test-owned upstream servers, a proxy builder, and a minimal proxy client. Everything binds
//! loopback addresses; names reach them only through resolver overrides.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use palisade_proxy::{Allowlist, Proxy, ProxyConfig, ProxyHandle, Resolver};

/// How a test upstream treats a connection.
#[derive(Clone, Copy)]
pub enum Behavior {
    /// Echoes everything back until EOF, then closes its write side.
    Echo,
    /// Reads one request head, answers `200` with body `hello`, closes its write side, then reads
    /// (and records) whatever else arrives until EOF.
    Http,
    /// Reads until EOF, then answers `got N` and closes (an HTTP/1.0-style "read to EOF" peer).
    Drain,
}

/// A test upstream: counts connections and keeps every connection's received bytes.
pub struct Upstream {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Upstream {
    pub fn start(ip: &str, behavior: Behavior) -> Upstream {
        let listener = TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (acc, rec) = (Arc::clone(&accepted), Arc::clone(&received));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                acc.fetch_add(1, Ordering::SeqCst);
                let rec = Arc::clone(&rec);
                std::thread::spawn(move || {
                    let got = serve(stream, behavior);
                    rec.lock().unwrap().push(got);
                });
            }
        });
        Upstream {
            addr,
            accepted,
            received,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Waits (bounded, as a hang guard) until `n` connections have finished; returns all
    /// received byte strings.
    pub fn wait_finished(&self, n: usize) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.received.lock().unwrap().clone();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "upstream: {n} connections never finished"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn serve(mut stream: TcpStream, behavior: Behavior) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0_u8; 64 * 1024];
    match behavior {
        Behavior::Echo => loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                    return got;
                }
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    if stream.write_all(&buf[..n]).is_err() {
                        return got;
                    }
                }
            }
        },
        Behavior::Http => {
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return got,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
            let _ = stream.shutdown(std::net::Shutdown::Write);
            read_rest(&mut stream, &mut got);
            got
        }
        Behavior::Drain => {
            read_rest(&mut stream, &mut got);
            let _ = stream.write_all(format!("got {}", got.len()).as_bytes());
            got
        }
    }
}

fn read_rest(stream: &mut TcpStream, got: &mut Vec<u8>) {
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A listener nobody accepts on: after the proxy has shut down (all its connection threads done),
/// `assert_untouched` proves the proxy never connected to it.
pub struct Sentinel {
    listener: TcpListener,
}

impl Sentinel {
    pub fn start(ip: &str) -> Sentinel {
        let listener = TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        Sentinel { listener }
    }

    pub fn port(&self) -> u16 {
        self.listener.local_addr().unwrap().port()
    }

    pub fn assert_untouched(&self) {
        match self.listener.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Ok((_, from)) => panic!("sentinel was connected to from {from}"),
            Err(e) => panic!("sentinel accept failed: {e}"),
        }
    }
}

/// A resolver with only the given overrides.
pub fn resolver(hosts: &[(&str, &str)]) -> Resolver {
    let mut r = Resolver::overrides_only();
    for (name, ip) in hosts {
        r.add_override(name, [ip.parse().unwrap()]).unwrap();
    }
    r
}

pub fn allowlist(entries: &[&str]) -> Allowlist {
    Allowlist::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

pub fn config(allow: &[&str], hosts: &[(&str, &str)]) -> ProxyConfig {
    let mut config = ProxyConfig::new(allowlist(allow), resolver(hosts));
    config.connect_timeout = Duration::from_secs(5);
    config
}

/// A proxy on a loopback TCP port.
pub fn tcp_proxy(config: ProxyConfig) -> (ProxyHandle, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let handle = Proxy::start(config, listener).unwrap();
    let addr = handle.local_addr().unwrap();
    (handle, addr)
}

/// A response head read byte by byte (so no tunnel bytes are consumed).
pub struct Head {
    pub status: u16,
    pub text: String,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<String> {
        self.text.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

pub fn read_head(stream: &mut impl Read) -> Head {
    let mut buf = Vec::new();
    let mut byte = [0_u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).unwrap();
        assert_eq!(n, 1, "connection closed inside a response head: {buf:?}");
        buf.push(byte[0]);
    }
    let text = String::from_utf8(buf).unwrap();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {text:?}"));
    Head { status, text }
}

pub fn read_to_end(stream: &mut impl Read) -> Vec<u8> {
    let mut out = Vec::new();
    stream.read_to_end(&mut out).unwrap();
    out
}

/// Sends `CONNECT target` (plus `extra` in the same write) and reads the response head.
pub fn connect<S: Read + Write>(stream: &mut S, target: &str, extra: &[u8]) -> Head {
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes();
    req.extend_from_slice(extra);
    stream.write_all(&req).unwrap();
    read_head(stream)
}

pub fn dial(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}
