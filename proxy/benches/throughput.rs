//! Bulk download and connection set-up through the in-sandbox path (TCP client → bridge → Unix
//! socket → proxy → upstream), asked by HTTP CONNECT and by SOCKS5, against the same transfer
//! direct on loopback TCP, in one run.
//!
//! Run with `cargo bench -p palisade-proxy --bench throughput`. The run first prints an
//! interleaved direct-vs-proxied comparison (`ratio` = proxied / direct throughput), then the
//! criterion groups. Under `cargo test --all-targets` each benchmark runs once on a small
//! transfer as a smoke test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "benchmarks fail loudly"
)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use palisade_proxy::{Allowlist, Proxy, ProxyConfig, ProxyHandle, Resolver, bridge};

/// A source upstream: reads an 8-byte big-endian length, writes that many bytes, closes.
fn start_source() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut len = [0_u8; 8];
                if stream.read_exact(&mut len).is_err() {
                    return;
                }
                let mut left = u64::from_be_bytes(len);
                let chunk = vec![0x5a_u8; 256 * 1024];
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if stream.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                let _ = stream.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

struct Path {
    /// Keeps the proxy (and its socket directory) alive for the bench.
    _proxy: ProxyHandle,
    _dir: tempfile::TempDir,
    bridge: SocketAddr,
    target: String,
}

/// Proxy on a Unix socket plus an in-process bridge on loopback TCP.
fn start_proxied(upstream: SocketAddr) -> Path {
    let dir = tempfile::tempdir().unwrap();
    let socket: PathBuf = dir.path().join("proxy.sock");
    let mut resolver = Resolver::overrides_only();
    resolver.add_override("bulk.test", [upstream.ip()]).unwrap();
    let allowlist =
        Allowlist::parse(&["bulk.test".to_string(), upstream.ip().to_string()]).unwrap();
    let proxy = Proxy::start(
        ProxyConfig::new(allowlist, resolver),
        UnixListener::bind(&socket).unwrap(),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let bridge_addr = listener.local_addr().unwrap();
    std::thread::spawn(move || bridge::serve(listener, socket));
    Path {
        _proxy: proxy,
        _dir: dir,
        bridge: bridge_addr,
        target: format!("bulk.test:{}", upstream.port()),
    }
}

fn open_direct(upstream: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(upstream).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn open_proxied(path: &Path) -> TcpStream {
    let mut s = TcpStream::connect(path.bridge).unwrap();
    s.set_nodelay(true).unwrap();
    let t = &path.target;
    s.write_all(format!("CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n").as_bytes())
        .unwrap();
    let mut head = Vec::with_capacity(64);
    let mut byte = [0_u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200 "), "{head:?}");
    s
}

/// The same path, asked over SOCKS5 (by name) instead of HTTP CONNECT.
fn open_socks(path: &Path) -> TcpStream {
    let mut s = TcpStream::connect(path.bridge).unwrap();
    s.set_nodelay(true).unwrap();
    let (host, port) = path.target.rsplit_once(':').unwrap();
    let host = palisade_proxy::host::Host::parse(host).unwrap();
    palisade_proxy::socks::client_connect(&mut s, &host, port.parse().unwrap()).unwrap();
    s
}

fn download(mut s: TcpStream, bytes: u64) {
    s.write_all(&bytes.to_be_bytes()).unwrap();
    let mut buf = vec![0_u8; 256 * 1024];
    let mut got = 0_u64;
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    assert_eq!(got, bytes);
}

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// This process's user+system CPU time in clock ticks (all threads: client, bridge, proxy and
/// upstream all run here), from `/proc/self/stat`.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Interleaved rounds of the same download direct and proxied; prints medians and the ratio,
/// and the CPU time each path costs (less sensitive than wall time to a busy machine).
fn print_ratio(
    upstream: SocketAddr,
    path: &Path,
    bytes: u64,
    rounds: usize,
    open: fn(&Path) -> TcpStream,
) {
    let mut direct = Vec::new();
    let mut proxied = Vec::new();
    let (mut direct_cpu, mut proxied_cpu) = (0, 0);
    for _ in 0..rounds {
        let (t, c) = (Instant::now(), cpu_ticks());
        download(open_direct(upstream), bytes);
        direct.push(t.elapsed());
        direct_cpu += cpu_ticks() - c;
        let (t, c) = (Instant::now(), cpu_ticks());
        download(open(path), bytes);
        proxied.push(t.elapsed());
        proxied_cpu += cpu_ticks() - c;
    }
    // Clock ticks are 1/100 s on Linux (USER_HZ).
    let per_gib =
        |ticks: u64| ticks as f64 * 10.0 / (rounds as f64 * bytes as f64 / f64::from(1 << 30));
    eprintln!(
        "cpu per GiB (all threads): direct {:.0} ms, bridge+proxy {:.0} ms",
        per_gib(direct_cpu),
        per_gib(proxied_cpu)
    );
    direct.sort();
    proxied.sort();
    let rate = |d: Duration| bytes as f64 / d.as_secs_f64() / (1024.0 * 1024.0);
    let (d, p) = (direct[rounds / 2], proxied[rounds / 2]);
    eprintln!(
        "bulk download {} MiB x {rounds} (median): direct {:.0} MiB/s, bridge+proxy {:.0} MiB/s, ratio {:.2}",
        bytes >> 20,
        rate(d),
        rate(p),
        d.as_secs_f64() / p.as_secs_f64()
    );
}

fn benches(c: &mut Criterion, upstream: SocketAddr, path: &Path) {
    let bytes: u64 = if bench_mode() { 256 << 20 } else { 1 << 20 };
    let mut group = c.benchmark_group("bulk_download");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function(BenchmarkId::new("direct", bytes >> 20), |b| {
        b.iter(|| download(open_direct(upstream), bytes))
    });
    group.bench_function(BenchmarkId::new("bridge_proxy", bytes >> 20), |b| {
        b.iter(|| download(open_proxied(path), bytes))
    });
    group.bench_function(BenchmarkId::new("bridge_socks5", bytes >> 20), |b| {
        b.iter(|| download(open_socks(path), bytes))
    });
    group.finish();

    // Connect until the upstream has answered once (a zero-length download: request, EOF), so
    // each iteration waits for the server side too and the two paths measure the same thing.
    let mut group = c.benchmark_group("connect_setup");
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("direct", |b| {
        b.iter(|| download(open_direct(upstream), 0));
    });
    group.bench_function("bridge_proxy", |b| {
        b.iter(|| download(open_proxied(path), 0));
    });
    group.bench_function("bridge_socks5", |b| {
        b.iter(|| download(open_socks(path), 0));
    });
    group.finish();
}

fn main() {
    let upstream = start_source();
    let path = start_proxied(upstream);
    if bench_mode() {
        eprintln!("HTTP CONNECT:");
        print_ratio(upstream, &path, 1 << 30, 5, open_proxied);
        eprintln!("SOCKS5:");
        print_ratio(upstream, &path, 1 << 30, 5, open_socks);
    }
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c, upstream, &path);
    c.final_summary();
}
