//! The proxy and bridge end to end on loopback: test-owned upstreams on 127.0.0.x, names mapped by
//! resolver overrides only (nothing queries real DNS), every refusal checked on the wire, in the
//! records, and at the upstream that must not have been reached.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod util;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use palisade_proxy::{
    ConnectionRecord, Listener, PeerInfo, Proxy, ProxyReport, RefusalCode, Route, RouteKind,
    Verdict, bridge,
};
use util::*;

const BOUND: Duration = Duration::from_secs(10);

fn only(report: &ProxyReport) -> &ConnectionRecord {
    assert_eq!(report.records.len(), 1, "{:#?}", report.records);
    assert_eq!(report.unfinished_connections, 0);
    &report.records[0]
}

fn assert_refused(head: &Head, status: u16, code: RefusalCode) {
    assert_eq!(head.status, status, "{}", head.text);
    assert_eq!(
        head.header("X-Palisade-Refusal").as_deref(),
        Some(code.as_str()),
        "{}",
        head.text
    );
}

#[test]
fn allowed_connect_relays_both_ways_and_counts_bytes() {
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let (proxy, addr) = tcp_proxy(config(
        &["echo.test", "127.0.0.2"],
        &[("echo.test", "127.0.0.2")],
    ));
    let mut client = dial(addr);
    // Bytes sent right behind the CONNECT head (as TLS clients do) must reach the upstream too.
    let head = connect(&mut client, &format!("echo.test:{}", echo.port()), b"early");
    assert_eq!(head.status, 200, "{}", head.text);
    let payload: Vec<u8> = (0..1_000_000_u32).map(|i| (i % 251) as u8).collect();
    let mut writer = client.try_clone().unwrap();
    let sent = payload.clone();
    let w = std::thread::spawn(move || {
        writer.write_all(&sent).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let back = read_to_end(&mut client);
    w.join().unwrap();
    assert_eq!(&back[..5], b"early");
    assert!(back[5..] == payload[..], "echoed payload differs");

    let report = proxy.shutdown(BOUND);
    let r = only(&report);
    assert_eq!(r.method.as_deref(), Some("CONNECT"));
    assert_eq!(r.host.as_deref(), Some("echo.test"));
    assert_eq!(r.port, Some(echo.port()));
    assert_eq!(r.verdict, Verdict::Allowed);
    assert_eq!(r.code, None);
    assert_eq!(r.address.as_deref(), Some("127.0.0.2"));
    assert_eq!(r.bytes_up, 1_000_005);
    assert_eq!(r.bytes_down, 1_000_005);
    assert_eq!(echo.wait_finished(1)[0].len(), 1_000_005);
}

#[test]
fn half_close_reaches_a_read_to_eof_upstream() {
    let drain = Upstream::start("127.0.0.2", Behavior::Drain);
    let (proxy, addr) = tcp_proxy(config(
        &["drain.test", "127.0.0.2"],
        &[("drain.test", "127.0.0.2")],
    ));
    let mut client = dial(addr);
    let head = connect(&mut client, &format!("drain.test:{}", drain.port()), b"");
    assert_eq!(head.status, 200);
    client.write_all(&[7_u8; 300_000]).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), b"got 300000");
    let report = proxy.shutdown(BOUND);
    let r = only(&report);
    assert_eq!((r.bytes_up, r.bytes_down), (300_000, 10));
}

#[test]
fn denied_name_gets_403_and_a_record_and_nothing_is_connected() {
    let sentinel = Sentinel::start("127.0.0.3");
    let (proxy, addr) = tcp_proxy(config(
        &["other.test", "127.0.0.3"],
        &[("denied.test", "127.0.0.3")],
    ));
    let mut client = dial(addr);
    let target = format!("denied.test:{}", sentinel.port());
    let head = connect(&mut client, &target, b"");
    assert_refused(&head, 403, RefusalCode::DomainNotAllowed);
    let body = String::from_utf8(read_to_end(&mut client)).unwrap();
    assert!(body.contains(&target), "{body}");
    assert_eq!(body.lines().count(), 1, "{body}");

    let report = proxy.shutdown(BOUND);
    let r = only(&report);
    assert_eq!(r.verdict, Verdict::Refused);
    assert_eq!(r.code, Some(RefusalCode::DomainNotAllowed));
    assert_eq!(r.host.as_deref(), Some("denied.test"));
    assert_eq!(r.address, None);
    assert_eq!((r.bytes_up, r.bytes_down), (0, 0));
    sentinel.assert_untouched();
}

#[test]
fn wildcard_matches_subdomains_not_the_bare_suffix_or_look_alikes() {
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let names = [
        ("a.allowed.test", 200),
        ("a.b.allowed.test", 200),
        ("A.Allowed.Test.", 200),
        ("allowed.test", 403),
        ("evilallowed.test", 403),
        ("allowed.test.evil.test", 403),
    ];
    let hosts: Vec<(&str, &str)> = names.iter().map(|(n, _)| (*n, "127.0.0.2")).collect();
    let (proxy, addr) = tcp_proxy(config(&["*.allowed.test", "127.0.0.2"], &hosts));
    for (name, want) in names {
        let mut client = dial(addr);
        let head = connect(&mut client, &format!("{name}:{}", echo.port()), b"");
        assert_eq!(head.status, want, "{name}: {}", head.text);
    }
    let report = proxy.shutdown(BOUND);
    let codes: Vec<_> = report.records.iter().map(|r| r.code).collect();
    assert_eq!(
        codes,
        [
            None,
            None,
            None,
            Some(RefusalCode::DomainNotAllowed),
            Some(RefusalCode::DomainNotAllowed),
            Some(RefusalCode::DomainNotAllowed)
        ]
    );
}

#[test]
fn port_entries_allow_only_their_port() {
    let a = Upstream::start("127.0.0.2", Behavior::Echo);
    let b = Upstream::start("127.0.0.2", Behavior::Echo);
    let hosts = [("svc.test", "127.0.0.2")];

    let name_port = format!("svc.test:{}", a.port());
    let (proxy, addr) = tcp_proxy(config(&[&name_port, "127.0.0.2"], &hosts));
    assert_eq!(connect(&mut dial(addr), &name_port, b"").status, 200);
    let other = format!("svc.test:{}", b.port());
    assert_refused(
        &connect(&mut dial(addr), &other, b""),
        403,
        RefusalCode::DomainNotAllowed,
    );
    drop(proxy);

    // The port on an IP-literal entry narrows which address:port it vouches for.
    let ip_port = format!("127.0.0.2:{}", a.port());
    let (proxy, addr) = tcp_proxy(config(&["svc.test", &ip_port], &hosts));
    assert_eq!(connect(&mut dial(addr), &name_port, b"").status, 200);
    assert_refused(
        &connect(&mut dial(addr), &other, b""),
        403,
        RefusalCode::AddressNotAllowed,
    );
    drop(proxy);
}

#[test]
fn allowed_name_resolving_to_loopback_is_refused_unless_the_address_is_listed() {
    let echo = Upstream::start("127.0.0.1", Behavior::Echo);
    let target = format!("loop.test:{}", echo.port());
    let hosts = [("loop.test", "127.0.0.1")];

    let (proxy, addr) = tcp_proxy(config(&["loop.test"], &hosts));
    let mut client = dial(addr);
    let head = connect(&mut client, &target, b"");
    assert_refused(&head, 403, RefusalCode::AddressNotAllowed);
    let body = String::from_utf8(read_to_end(&mut client)).unwrap();
    assert!(
        body.contains("127.0.0.1") && body.contains("loopback"),
        "{body}"
    );
    let report = proxy.shutdown(BOUND);
    assert_eq!(only(&report).code, Some(RefusalCode::AddressNotAllowed));
    assert_eq!(echo.accepted(), 0);

    for extra in ["127.0.0.1", &format!("127.0.0.1:{}", echo.port())] {
        let (proxy, addr) = tcp_proxy(config(&["loop.test", extra], &hosts));
        assert_eq!(
            connect(&mut dial(addr), &target, b"").status,
            200,
            "{extra}"
        );
        drop(proxy);
    }

    // `*` allows every name but vouches for no address.
    let (proxy, addr) = tcp_proxy(config(&["*"], &hosts));
    assert_refused(
        &connect(&mut dial(addr), &target, b""),
        403,
        RefusalCode::AddressNotAllowed,
    );
    assert_refused(
        &connect(&mut dial(addr), &format!("127.0.0.1:{}", echo.port()), b""),
        403,
        RefusalCode::AddressNotAllowed,
    );
    drop(proxy);
}

#[test]
fn metadata_address_is_refused_by_name_and_as_a_literal() {
    let (proxy, addr) = tcp_proxy(config(
        &["*"],
        &[
            ("meta.test", "169.254.169.254"),
            ("meta6.test", "fd00:ec2::254"),
            ("mapped.test", "::ffff:169.254.169.254"),
        ],
    ));
    for target in [
        "meta.test:80",
        "meta6.test:80",
        "mapped.test:80",
        "169.254.169.254:80",
        "[::ffff:a9fe:a9fe]:80",
    ] {
        let mut client = dial(addr);
        let head = connect(&mut client, target, b"");
        assert_refused(&head, 403, RefusalCode::AddressNotAllowed);
        let body = String::from_utf8(read_to_end(&mut client)).unwrap();
        assert!(body.contains("cloud metadata"), "{target}: {body}");
    }
    let report = proxy.shutdown(BOUND);
    assert_eq!(report.records.len(), 5);
    assert!(report.records.iter().all(|r| r.address.is_none()));
}

#[test]
fn a_name_with_one_public_and_one_private_address_is_refused() {
    // The private address comes first: a proxy that connected before checking every address
    // would reach the sentinel (and never the public address).
    let sentinel = Sentinel::start("127.0.0.3");
    let mut resolver = resolver(&[]);
    resolver
        .add_override(
            "mixed.test",
            ["127.0.0.3".parse().unwrap(), "1.1.1.1".parse().unwrap()],
        )
        .unwrap();
    let mut cfg = config(&["mixed.test"], &[]);
    cfg.resolver = resolver;
    let (proxy, addr) = tcp_proxy(cfg);
    let head = connect(
        &mut dial(addr),
        &format!("mixed.test:{}", sentinel.port()),
        b"",
    );
    assert_refused(&head, 403, RefusalCode::AddressNotAllowed);
    proxy.shutdown(BOUND);
    sentinel.assert_untouched();
}

#[test]
fn absolute_form_get_is_rewritten_to_origin_form_with_the_uri_host() {
    let web = Upstream::start("127.0.0.2", Behavior::Http);
    let (proxy, addr) = tcp_proxy(config(
        &["web.test", "127.0.0.2"],
        &[("web.test", "127.0.0.2")],
    ));
    let mut client = dial(addr);
    let request = format!(
        "GET http://Web.Test:{}/path?x=1 HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: X-Hop\r\nX-Hop: 1\r\nUser-Agent: t\r\n\r\n",
        web.port()
    );
    client.write_all(request.as_bytes()).unwrap();
    let head = read_head(&mut client);
    assert_eq!(head.status, 200, "{}", head.text);
    assert_eq!(read_to_end(&mut client), b"hello");
    drop(client);

    let got = String::from_utf8(web.wait_finished(1).remove(0)).unwrap();
    assert_eq!(
        got,
        format!(
            "GET /path?x=1 HTTP/1.1\r\nHost: web.test:{}\r\nUser-Agent: t\r\nConnection: close\r\n\r\n",
            web.port()
        )
    );
    let report = proxy.shutdown(BOUND);
    let r = only(&report);
    assert_eq!(r.method.as_deref(), Some("GET"));
    assert_eq!(r.verdict, Verdict::Allowed);
    assert_eq!(r.bytes_up, got.len() as u64);
    assert_eq!(
        r.bytes_down,
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".len() as u64
    );
}

#[test]
fn absolute_form_to_a_denied_host_is_refused_and_the_host_receives_nothing() {
    let sentinel = Sentinel::start("127.0.0.3");
    let (proxy, addr) = tcp_proxy(config(
        &["web.test", "127.0.0.3"],
        &[("denied.test", "127.0.0.3")],
    ));
    let mut client = dial(addr);
    let request = format!(
        "POST http://denied.test:{}/upload HTTP/1.1\r\nHost: web.test\r\nContent-Length: 4\r\n\r\ndata",
        sentinel.port()
    );
    client.write_all(request.as_bytes()).unwrap();
    assert_refused(&read_head(&mut client), 403, RefusalCode::DomainNotAllowed);
    let report = proxy.shutdown(BOUND);
    assert_eq!(only(&report).method.as_deref(), Some("POST"));
    sentinel.assert_untouched();
}

#[test]
fn a_pipelined_request_to_a_denied_host_only_reaches_the_first_upstream() {
    let web = Upstream::start("127.0.0.2", Behavior::Http);
    let sentinel = Sentinel::start("127.0.0.3");
    let (proxy, addr) = tcp_proxy(config(
        &["web.test", "127.0.0.2", "127.0.0.3"],
        &[("web.test", "127.0.0.2"), ("denied.test", "127.0.0.3")],
    ));
    let mut client = dial(addr);
    let second = format!(
        "GET http://denied.test:{}/ HTTP/1.1\r\nHost: denied.test\r\n\r\n",
        sentinel.port()
    );
    let both = format!(
        "GET http://web.test:{}/ HTTP/1.1\r\nHost: web.test\r\n\r\n{second}",
        web.port()
    );
    client.write_all(both.as_bytes()).unwrap();
    assert_eq!(read_head(&mut client).status, 200);
    assert_eq!(read_to_end(&mut client), b"hello");
    drop(client);
    let got = String::from_utf8(web.wait_finished(1).remove(0)).unwrap();
    assert!(
        got.ends_with(&second),
        "the second request went elsewhere: {got:?}"
    );
    let report = proxy.shutdown(BOUND);
    assert_eq!(only(&report).host.as_deref(), Some("web.test"));
    sentinel.assert_untouched();
}

#[test]
fn a_connect_inside_a_tunnel_stays_inside_the_tunnel() {
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let sentinel = Sentinel::start("127.0.0.3");
    let (proxy, addr) = tcp_proxy(config(
        &["echo.test", "127.0.0.2", "127.0.0.3"],
        &[("echo.test", "127.0.0.2"), ("denied.test", "127.0.0.3")],
    ));
    let mut client = dial(addr);
    assert_eq!(
        connect(&mut client, &format!("echo.test:{}", echo.port()), b"").status,
        200
    );
    let inner = format!(
        "CONNECT denied.test:{0} HTTP/1.1\r\nHost: denied.test:{0}\r\n\r\n",
        sentinel.port()
    );
    client.write_all(inner.as_bytes()).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), inner.as_bytes());
    let report = proxy.shutdown(BOUND);
    assert_eq!(only(&report).host.as_deref(), Some("echo.test"));
    sentinel.assert_untouched();
}

#[test]
fn malformed_unsupported_and_oversized_heads_get_400() {
    let (proxy, addr) = tcp_proxy(config(&["*"], &[]));
    let oversized = format!(
        "GET http://a.test/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70 * 1024)
    );
    let many_lines = format!(
        "GET http://a.test/ HTTP/1.1\r\n{}\r\n",
        "X: y\r\n".repeat(200)
    );
    let cases: Vec<(Vec<u8>, RefusalCode)> = vec![
        (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(),
            RefusalCode::MalformedRequest,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            RefusalCode::UnsupportedRequest,
        ),
        (
            b"GET https://a.test/ HTTP/1.1\r\n\r\n".to_vec(),
            RefusalCode::UnsupportedRequest,
        ),
        (
            b"CONNECT a.test HTTP/1.1\r\n\r\n".to_vec(),
            RefusalCode::MalformedRequest,
        ),
        (
            b"CONNECT a.test:99999 HTTP/1.1\r\n\r\n".to_vec(),
            RefusalCode::MalformedRequest,
        ),
        (
            b"GET http://a.test/ HTTP/1.1\nHost: a\n\n\r\n\r\n".to_vec(),
            RefusalCode::MalformedRequest,
        ),
        (
            b"GET http://a.test/ HTTP/1.1\r\nX: \xff\x00\r\n\r\n".to_vec(),
            RefusalCode::MalformedRequest,
        ),
        (oversized.into_bytes(), RefusalCode::MalformedRequest),
        (many_lines.into_bytes(), RefusalCode::MalformedRequest),
    ];
    for (bytes, code) in &cases {
        let mut client = dial(addr);
        client.write_all(bytes).unwrap();
        let head = read_head(&mut client);
        assert_refused(&head, 400, *code);
    }
    // A head cut off by the client: answered and recorded as malformed.
    let mut client = dial(addr);
    client
        .write_all(b"GET http://a.test/ HTTP/1.1\r\nHost:")
        .unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_refused(&read_head(&mut client), 400, RefusalCode::MalformedRequest);
    // A client that connects and leaves without a byte is not a request: no record.
    drop(dial(addr));

    let report = proxy.shutdown(BOUND);
    assert_eq!(
        report.records.len(),
        cases.len() + 1,
        "{:#?}",
        report.records
    );
    assert!(report.records.iter().all(|r| r.verdict == Verdict::Refused));
}

#[test]
fn a_silent_client_times_out_with_400() {
    let mut cfg = config(&["*"], &[]);
    cfg.head_idle_timeout = Duration::from_millis(200);
    let (proxy, addr) = tcp_proxy(cfg);
    let mut client = dial(addr);
    client
        .write_all(b"GET http://a.test/ HTTP/1.1\r\n")
        .unwrap();
    assert_refused(&read_head(&mut client), 400, RefusalCode::MalformedRequest);
    let report = proxy.shutdown(BOUND);
    assert!(only(&report).reason.as_deref().unwrap().contains("in time"));
}

#[test]
fn unresolvable_and_unreachable_upstreams_get_502() {
    let free_port = {
        let l = TcpListener::bind("127.0.0.2:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (proxy, addr) = tcp_proxy(config(&["*", "127.0.0.2"], &[("closed.test", "127.0.0.2")]));
    assert_refused(
        &connect(&mut dial(addr), "nowhere.test:443", b""),
        502,
        RefusalCode::ResolutionFailed,
    );
    assert_refused(
        &connect(&mut dial(addr), &format!("closed.test:{free_port}"), b""),
        502,
        RefusalCode::UpstreamUnreachable,
    );
    let report = proxy.shutdown(BOUND);
    assert_eq!(report.records.len(), 2);
}

#[test]
fn client_check_refuses_a_unix_peer_and_admits_the_right_one() {
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let dir = tempfile::tempdir().unwrap();
    let hosts = [("echo.test", "127.0.0.2")];
    let target = format!("echo.test:{}", echo.port());

    let socket = dir.path().join("refusing.sock");
    let mut cfg = config(&["echo.test", "127.0.0.2"], &hosts);
    cfg.client_check = Box::new(|peer| matches!(peer, PeerInfo::Unix { pid: 1, .. }));
    let proxy = Proxy::start(cfg, UnixListener::bind(&socket).unwrap()).unwrap();
    let mut client = UnixStream::connect(&socket).unwrap();
    let head = connect(&mut client, &target, b"");
    assert_refused(&head, 403, RefusalCode::ClientNotAllowed);
    let report = proxy.shutdown(BOUND);
    let r = only(&report);
    assert_eq!(r.code, Some(RefusalCode::ClientNotAllowed));
    let me = format!("pid={} ", std::process::id());
    assert!(r.peer.as_deref().unwrap().starts_with(&me), "{r:?}");
    assert_eq!(echo.accepted(), 0);

    let socket = dir.path().join("admitting.sock");
    let mut cfg = config(&["echo.test", "127.0.0.2"], &hosts);
    let pid = std::process::id() as i32;
    cfg.client_check =
        Box::new(move |peer| matches!(peer, PeerInfo::Unix { pid: p, .. } if *p == pid));
    let proxy = Proxy::start(cfg, UnixListener::bind(&socket).unwrap()).unwrap();
    let mut client = UnixStream::connect(&socket).unwrap();
    assert_eq!(connect(&mut client, &target, b"").status, 200);
    client.write_all(b"via unix").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), b"via unix");
    let report = proxy.shutdown(BOUND);
    assert_eq!(only(&report).verdict, Verdict::Allowed);
}

#[test]
fn a_forward_route_relays_bytes_to_its_one_target_and_nothing_else() {
    // Two upstreams on the loopback; the route names one. Whatever the client sends (an HTTP
    // CONNECT to the other one included) goes to the named target as plain bytes.
    let target = Upstream::start("127.0.0.1", Behavior::Echo);
    let other = Upstream::start("127.0.0.2", Behavior::Echo);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("loopback-v4.sock");
    let filter_socket = dir.path().join("proxy.sock");
    let pid = std::process::id() as i32;
    let mut cfg = config(&[], &[]);
    cfg.client_check =
        Box::new(move |peer| matches!(peer, PeerInfo::Unix { pid: p, .. } if *p == pid));
    let proxy = Proxy::start_routes(
        cfg,
        vec![
            (
                Listener::Unix(UnixListener::bind(&filter_socket).unwrap()),
                Route::Filter,
            ),
            (
                Listener::Unix(UnixListener::bind(&socket).unwrap()),
                Route::Forward(target.addr),
            ),
        ],
    )
    .unwrap();
    let mut client = UnixStream::connect(&socket).unwrap();
    let smuggle = format!("CONNECT 127.0.0.2:{} HTTP/1.1\r\n\r\n", other.port());
    client.write_all(smuggle.as_bytes()).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), smuggle.as_bytes());
    // The filtering route still filters (its allowlist is empty).
    let denied = connect(
        &mut UnixStream::connect(&filter_socket).unwrap(),
        "x.test:80",
        b"",
    );
    assert_refused(&denied, 403, RefusalCode::DomainNotAllowed);

    let report = proxy.shutdown(BOUND);
    assert_eq!(report.records.len(), 2, "{:#?}", report.records);
    let forwarded = &report.records[0];
    assert_eq!(forwarded.route, RouteKind::LoopbackPort);
    assert_eq!(forwarded.verdict, Verdict::Allowed);
    assert_eq!(forwarded.host.as_deref(), Some("127.0.0.1"));
    assert_eq!(forwarded.port, Some(target.port()));
    assert_eq!(forwarded.method, None);
    assert_eq!(forwarded.bytes_up, smuggle.len() as u64);
    assert_eq!(report.records[1].route, RouteKind::Proxy);
    assert_eq!(target.wait_finished(1)[0], smuggle.as_bytes());
    assert_eq!(other.accepted(), 0, "the other upstream was never reached");
}

/// What a refused forward client reads: nothing, then EOF (or a reset, when the refusal closed
/// the socket with the client's bytes unread).
fn closed_or_reset(stream: &mut UnixStream) -> Vec<u8> {
    let mut out = Vec::new();
    match stream.read_to_end(&mut out) {
        Ok(_) => out,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => out,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_forward_route_refuses_other_clients_and_records_an_unreachable_target() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then closed.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let echo = Upstream::start("127.0.0.1", Behavior::Echo);
    let refusing = dir.path().join("refusing.sock");
    let unreachable = dir.path().join("unreachable.sock");
    let mut cfg = config(&[], &[]);
    let pid = std::process::id() as i32;
    // Admits this process on the second socket only: stands in for "another run's sandbox".
    cfg.client_check =
        Box::new(move |peer| matches!(peer, PeerInfo::Unix { pid: p, .. } if *p == pid));
    let proxy = Proxy::start_routes(
        cfg,
        vec![(
            Listener::Unix(UnixListener::bind(&unreachable).unwrap()),
            Route::Forward(closed),
        )],
    )
    .unwrap();
    let mut client = UnixStream::connect(&unreachable).unwrap();
    // The proxy may already have closed (the target refused at once): a broken pipe here is
    // the behaviour under test, not a failure.
    let _ = client.write_all(b"hello");
    assert_eq!(
        closed_or_reset(&mut client),
        b"",
        "a plain close, no HTTP answer"
    );
    let report = proxy.shutdown(BOUND);
    let r = only(&report);
    assert_eq!(r.verdict, Verdict::Refused);
    assert_eq!(r.code, Some(RefusalCode::UpstreamUnreachable));
    assert_eq!(r.port, Some(closed.port()));

    let mut cfg = config(&[], &[]);
    cfg.client_check = Box::new(|peer| matches!(peer, PeerInfo::Unix { pid: 1, .. }));
    let proxy = Proxy::start_routes(
        cfg,
        vec![(
            Listener::Unix(UnixListener::bind(&refusing).unwrap()),
            Route::Forward(echo.addr),
        )],
    )
    .unwrap();
    let mut client = UnixStream::connect(&refusing).unwrap();
    let _ = client.write_all(b"hello");
    assert_eq!(closed_or_reset(&mut client), b"");
    let report = proxy.shutdown(BOUND);
    assert_eq!(only(&report).code, Some(RefusalCode::ClientNotAllowed));
    assert_eq!(echo.accepted(), 0, "a refused client reaches nothing");
}

#[test]
fn bridge_relays_tcp_to_the_proxy_socket_end_to_end() {
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let proxy = Proxy::start(
        config(&["echo.test", "127.0.0.2"], &[("echo.test", "127.0.0.2")]),
        UnixListener::bind(&socket).unwrap(),
    )
    .unwrap();
    let bridge_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let bridge_addr = bridge_listener.local_addr().unwrap();
    let bridge_socket = socket.clone();
    std::thread::spawn(move || bridge::serve(bridge_listener, bridge_socket));

    let mut client = dial(bridge_addr);
    assert_eq!(
        connect(&mut client, &format!("echo.test:{}", echo.port()), b"").status,
        200
    );
    client.write_all(b"through the bridge").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), b"through the bridge");
    let denied = connect(&mut dial(bridge_addr), "denied.test:80", b"");
    assert_refused(&denied, 403, RefusalCode::DomainNotAllowed);

    let report = proxy.shutdown(BOUND);
    assert_eq!(report.records.len(), 2);
    assert_eq!(report.records[0].bytes_up, 18);
    assert!(
        report.records[0]
            .peer
            .as_deref()
            .unwrap()
            .starts_with(&format!("pid={} ", std::process::id()))
    );

    // With the proxy gone, the bridge answers in HTTP rather than just hanging up.
    drop(std::fs::remove_file(&socket));
    let gone = connect(&mut dial(bridge_addr), "echo.test:80", b"");
    assert_refused(&gone, 502, RefusalCode::ProxyUnreachable);
}

#[test]
fn the_exec_bridge_is_detached_from_the_command() {
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let proxy = Proxy::start(
        config(&["echo.test", "127.0.0.2"], &[("echo.test", "127.0.0.2")]),
        UnixListener::bind(&socket).unwrap(),
    )
    .unwrap();
    let free = TcpListener::bind("127.0.0.4:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let helper = env!("CARGO_BIN_EXE_palisade-proxy-helper");
    // reaper → bridge-exec (bind, double fork, exec) → client. The client connects at once
    // (the listener must already exist), checks it has no children, and the reaper (a child
    // subreaper) reports and kills the orphaned bridge.
    let mut child = Command::new(helper)
        .args(["reaper", helper, "bridge-exec"])
        .arg(free.to_string())
        .arg(&socket)
        .args([helper, "client"])
        .arg(free.to_string())
        .arg(format!("echo.test:{}", echo.port()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        let _ = tx.send(out);
    });
    // If the bridge kept the command's stdout open, this would never see EOF.
    let out = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("helper output never reached EOF");
        });
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "reaper did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}\n{out}\n{err}");
    for want in [
        "status=200",
        "echo=ping",
        "children=none",
        "command-exit=0",
        "bridge-orphans=1",
    ] {
        assert!(
            out.lines().any(|l| l == want),
            "missing {want}:\n{out}\n{err}"
        );
    }
    let report = proxy.shutdown(BOUND);
    assert_eq!(only(&report).verdict, Verdict::Allowed);
}

#[test]
fn shutdown_closes_open_tunnels_and_returns_their_records() {
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let (proxy, addr) = tcp_proxy(config(
        &["echo.test", "127.0.0.2"],
        &[("echo.test", "127.0.0.2")],
    ));
    let mut client = dial(addr);
    assert_eq!(
        connect(&mut client, &format!("echo.test:{}", echo.port()), b"").status,
        200
    );
    client.write_all(b"abc").unwrap();
    let mut three = [0_u8; 3];
    client.read_exact(&mut three).unwrap();
    // An idle second client that never sends a head.
    let _idle = dial(addr);
    std::thread::sleep(Duration::from_millis(50));
    let report = proxy.shutdown(BOUND);
    assert_eq!(report.unfinished_connections, 0);
    assert_eq!(report.records.len(), 1, "{:#?}", report.records);
    assert_eq!(report.records[0].bytes_up, 3);
    assert_eq!(read_to_end(&mut client), b"");
    // Not accepting any more.
    assert!(std::net::TcpStream::connect(addr).is_err());
}

#[test]
fn records_beyond_the_limit_are_counted_and_serialize_in_camel_case() {
    let mut cfg = config(&[], &[]);
    cfg.max_records = 2;
    let (proxy, addr) = tcp_proxy(cfg);
    for _ in 0..4 {
        let head = connect(&mut dial(addr), "github.com:443", b"");
        assert_refused(&head, 403, RefusalCode::DomainNotAllowed);
    }
    let report = proxy.shutdown(BOUND);
    assert_eq!(report.records.len(), 2);
    assert_eq!(report.dropped_records, 2);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["droppedRecords"], 2);
    let r = &json["records"][0];
    assert_eq!(r["verdict"], "refused");
    assert_eq!(r["code"], "domain-not-allowed");
    assert_eq!(r["host"], "github.com");
    assert_eq!(r["port"], 443);
    assert_eq!(r["bytesUp"], 0);
    assert_eq!(r["address"], serde_json::Value::Null);
    let back: ProxyReport = serde_json::from_value(json).unwrap();
    assert_eq!(back, report);
}

#[test]
fn ipv6_loopback_literals_and_names() {
    let echo = Upstream::start("::1", Behavior::Echo);
    let literal = format!("[::1]:{}", echo.port());
    let hosts = [("v6.test", "::1")];

    // Allowed by name but ::1 is loopback: refused until the literal is listed.
    let (proxy, addr) = tcp_proxy(config(&["v6.test"], &hosts));
    assert_refused(
        &connect(&mut dial(addr), &format!("v6.test:{}", echo.port()), b""),
        403,
        RefusalCode::AddressNotAllowed,
    );
    assert_refused(
        &connect(&mut dial(addr), &literal, b""),
        403,
        RefusalCode::DomainNotAllowed,
    );
    drop(proxy);

    let (proxy, addr) = tcp_proxy(config(&["v6.test", "[::1]"], &hosts));
    for target in [format!("v6.test:{}", echo.port()), literal] {
        let mut client = dial(addr);
        assert_eq!(connect(&mut client, &target, b"").status, 200, "{target}");
        client.write_all(b"six").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_to_end(&mut client), b"six");
    }
    let report = proxy.shutdown(BOUND);
    assert_eq!(report.records.len(), 2);
    assert!(
        report
            .records
            .iter()
            .all(|r| r.address.as_deref() == Some("::1"))
    );
    assert_eq!(report.records[1].host.as_deref(), Some("[::1]"));
}

// ---------------------------------------------------------------------------------------------
// SOCKS5 on the same listener
// ---------------------------------------------------------------------------------------------

/// Greeting (no authentication) and a CONNECT by name, in one write with `extra` behind them;
/// returns the method selection and the reply code.
fn socks_connect(client: &mut TcpStream, name: &str, port: u16, extra: &[u8]) -> ([u8; 2], u8) {
    let mut wire = vec![5, 1, 0, 5, 1, 0, 3, u8::try_from(name.len()).unwrap()];
    wire.extend_from_slice(name.as_bytes());
    wire.extend_from_slice(&port.to_be_bytes());
    wire.extend_from_slice(extra);
    socks_raw(client, &wire)
}

/// Sends `wire` (a greeting and what follows) and reads the method selection and, when the
/// method was accepted, the 10-byte reply.
fn socks_raw(client: &mut TcpStream, wire: &[u8]) -> ([u8; 2], u8) {
    client.write_all(wire).unwrap();
    let mut selection = [0_u8; 2];
    client.read_exact(&mut selection).unwrap();
    if selection != [5, 0] {
        return (selection, 0xff);
    }
    let mut reply = [0_u8; 10];
    client.read_exact(&mut reply).unwrap();
    assert_eq!(
        (reply[0], reply[3], &reply[4..]),
        (5, 1, &[0_u8; 6][..]),
        "{reply:?}"
    );
    (selection, reply[1])
}

#[test]
fn socks5_by_name_relays_early_bytes_and_is_recorded_like_connect() {
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let entry = format!("git.test:{}", echo.port());
    let (proxy, addr) = tcp_proxy(config(
        &[&entry, &format!("127.0.0.2:{}", echo.port())],
        &[("git.test", "127.0.0.2")],
    ));
    let mut client = dial(addr);
    // Everything in one write, data included: the client need not wait for the answers.
    let (selection, reply) = socks_connect(&mut client, "Git.Test.", echo.port(), b"SSH-2.0-x\r\n");
    assert_eq!((selection, reply), ([5, 0], 0));
    let mut echoed = [0_u8; 11];
    client.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"SSH-2.0-x\r\n");
    client.write_all(b"more").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), b"more");

    // The library's client half, which the bridge's `connect` mode uses.
    let mut client = dial(addr);
    palisade_proxy::socks::client_connect(
        &mut client,
        &palisade_proxy::host::Host::Name("git.test".into()),
        echo.port(),
    )
    .unwrap();
    client.write_all(b"ping").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), b"ping");

    let report = proxy.shutdown(BOUND);
    assert_eq!(report.records.len(), 2, "{:#?}", report.records);
    let r = &report.records[0];
    assert_eq!(r.route, RouteKind::Proxy);
    assert_eq!(r.method.as_deref(), Some("SOCKS5 CONNECT"));
    assert_eq!(r.host.as_deref(), Some("git.test"));
    assert_eq!(r.port, Some(echo.port()));
    assert_eq!(r.verdict, Verdict::Allowed);
    assert_eq!(r.address.as_deref(), Some("127.0.0.2"));
    assert_eq!((r.bytes_up, r.bytes_down), (15, 15));
}

#[test]
fn socks5_refusals_get_their_reply_codes_and_records_and_reach_nothing() {
    let sentinel = Sentinel::start("127.0.0.3");
    let loopback = Sentinel::start("127.0.0.1");
    let sp = sentinel.port();
    let (proxy, addr) = tcp_proxy(config(
        &[
            &format!("allowed.test:{sp}"),
            &format!("loop.test:{}", loopback.port()),
            "nowhere.test",
            "*.meta.test",
        ],
        &[
            ("allowed.test", "127.0.0.3"),
            ("denied.test", "127.0.0.3"),
            ("loop.test", "127.0.0.1"),
            ("a.meta.test", "169.254.169.254"),
        ],
    ));
    let by_name = |name: &str, port: u16| {
        let mut client = dial(addr);
        socks_connect(&mut client, name, port, b"").1
    };
    // Not on the list; on the list with another port; a name whose address is private (the
    // rebinding guard) or the metadata address; a name that does not resolve.
    assert_eq!(by_name("denied.test", sp), 2);
    assert_eq!(by_name("allowed.test", sp + 1), 2);
    assert_eq!(by_name("loop.test", loopback.port()), 2);
    assert_eq!(by_name("a.meta.test", 80), 2);
    assert_eq!(by_name("nowhere.test", 22), 4);
    // Literals get the same checks as `CONNECT 127.0.0.3:P`: no IP-literal entry, no address.
    let mut v4 = vec![5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 3];
    v4.extend_from_slice(&sp.to_be_bytes());
    assert_eq!(socks_raw(&mut dial(addr), &v4).1, 2);
    let mut v6 = vec![5, 1, 0, 5, 1, 0, 4];
    v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    v6.extend_from_slice(&sp.to_be_bytes());
    assert_eq!(socks_raw(&mut dial(addr), &v6).1, 2);
    // BIND and UDP ASSOCIATE are refused even for an allowed target; an unknown address type
    // has its own code; a client without "no authentication" gets 0xFF.
    for command in [2, 3] {
        let mut wire = vec![5, 1, 0, 5, command, 0, 3, 12];
        wire.extend_from_slice(b"allowed.test");
        wire.extend_from_slice(&sp.to_be_bytes());
        assert_eq!(socks_raw(&mut dial(addr), &wire).1, 7, "{command}");
    }
    assert_eq!(socks_raw(&mut dial(addr), &[5, 1, 0, 5, 1, 0, 2, 0]).1, 8);
    let mut client = dial(addr);
    assert_eq!(socks_raw(&mut client, &[5, 2, 1, 2]).0, [5, 0xff]);
    assert!(read_to_end(&mut client).is_empty());

    let report = proxy.shutdown(BOUND);
    let seen: Vec<(Option<&str>, Option<RefusalCode>, Option<String>)> = report
        .records
        .iter()
        .map(|r| {
            assert_eq!(r.verdict, Verdict::Refused, "{r:?}");
            assert_eq!(r.address, None, "{r:?}");
            (
                r.method.as_deref(),
                r.code,
                r.host.as_ref().map(|h| format!("{h}:{}", r.port.unwrap())),
            )
        })
        .collect();
    let connect = Some("SOCKS5 CONNECT");
    let lp = loopback.port();
    assert_eq!(
        seen,
        [
            (
                connect,
                Some(RefusalCode::DomainNotAllowed),
                Some(format!("denied.test:{sp}"))
            ),
            (
                connect,
                Some(RefusalCode::DomainNotAllowed),
                Some(format!("allowed.test:{}", sp + 1))
            ),
            (
                connect,
                Some(RefusalCode::AddressNotAllowed),
                Some(format!("loop.test:{lp}"))
            ),
            (
                connect,
                Some(RefusalCode::AddressNotAllowed),
                Some("a.meta.test:80".into())
            ),
            (
                connect,
                Some(RefusalCode::ResolutionFailed),
                Some("nowhere.test:22".into())
            ),
            (
                connect,
                Some(RefusalCode::DomainNotAllowed),
                Some(format!("127.0.0.3:{sp}"))
            ),
            (
                connect,
                Some(RefusalCode::DomainNotAllowed),
                Some(format!("[::1]:{sp}"))
            ),
            (
                Some("SOCKS5 BIND"),
                Some(RefusalCode::UnsupportedRequest),
                Some(format!("allowed.test:{sp}"))
            ),
            (
                Some("SOCKS5 UDP-ASSOCIATE"),
                Some(RefusalCode::UnsupportedRequest),
                Some(format!("allowed.test:{sp}"))
            ),
            (Some("SOCKS5"), Some(RefusalCode::UnsupportedRequest), None),
            (None, Some(RefusalCode::UnsupportedRequest), None),
        ]
    );
    sentinel.assert_untouched();
    loopback.assert_untouched();
}

#[test]
fn socks5_literal_allowed_by_an_ip_entry_and_truncated_or_silent_clients() {
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let mut cfg = config(&[&format!("127.0.0.2:{}", echo.port())], &[]);
    cfg.head_idle_timeout = Duration::from_millis(300);
    let (proxy, addr) = tcp_proxy(cfg);
    let mut v4 = vec![5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 2];
    v4.extend_from_slice(&echo.port().to_be_bytes());
    let mut client = dial(addr);
    assert_eq!(socks_raw(&mut client, &v4).1, 0);
    client.write_all(b"x").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), b"x");
    // Silent after the greeting: a timeout, no reply; half a greeting, then a close.
    let mut client = dial(addr);
    client.write_all(&[5, 1, 0, 5, 1, 0, 3]).unwrap();
    let mut selection = [0_u8; 2];
    client.read_exact(&mut selection).unwrap();
    assert_eq!(selection, [5, 0]);
    assert!(read_to_end(&mut client).is_empty());
    let mut client = dial(addr);
    client.write_all(&[5, 3, 0]).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert!(read_to_end(&mut client).is_empty());

    let report = proxy.shutdown(BOUND);
    let reasons: Vec<_> = report
        .records
        .iter()
        .map(|r| (r.code, r.reason.clone().unwrap_or_default()))
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert_eq!(reasons[0].0, None);
    assert_eq!(reasons[1].0, Some(RefusalCode::MalformedRequest));
    assert!(
        reasons[1].1.contains("SOCKS5 request in time"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].1.contains("middle of the SOCKS5 greeting"),
        "{reasons:?}"
    );
}

/// An approver that answers by `host:port` from a fixed table (anything else: deny) and keeps
/// its questions.
struct TableApprover {
    answers: Vec<(String, palisade_proxy::ApprovalAnswer)>,
    asked: std::sync::Mutex<Vec<String>>,
}

impl palisade_proxy::Approver for TableApprover {
    fn ask(
        &self,
        request: &palisade_proxy::ApprovalRequest,
    ) -> (palisade_proxy::ApprovalAnswer, String) {
        self.asked.lock().unwrap().push(request.host.clone());
        let answer = self
            .answers
            .iter()
            .find(|(target, _)| *target == format!("{}:{}", request.host, request.port))
            .map_or(palisade_proxy::ApprovalAnswer::Deny, |(_, a)| *a);
        (answer, format!("answered {}", answer.as_str()))
    }
}

/// A name outside the allowlist goes to the approver: `once` lets one connection through and
/// asks again next time, `run` is remembered for the name and port only, `deny` refuses as
/// without an approver. An approved name still meets the address guard: a name resolving to a
/// loopback address that no IP-literal entry allows is refused however it was approved, and
/// its upstream sees nothing.
#[test]
fn approvals_open_names_one_connection_or_the_run_but_never_an_unlisted_private_address() {
    use palisade_proxy::ApprovalAnswer;
    let echo = Upstream::start("127.0.0.2", Behavior::Echo);
    let guarded = Sentinel::start("127.0.0.4");
    let hosts = [
        ("once.test", "127.0.0.2"),
        ("run.test", "127.0.0.2"),
        ("deny.test", "127.0.0.2"),
        ("private.test", "127.0.0.4"),
    ];
    let port = echo.port();
    let approver = std::sync::Arc::new(TableApprover {
        answers: vec![
            (format!("once.test:{port}"), ApprovalAnswer::Once),
            (format!("run.test:{port}"), ApprovalAnswer::Run),
            (
                format!("private.test:{}", guarded.port()),
                ApprovalAnswer::Run,
            ),
        ],
        asked: std::sync::Mutex::default(),
    });
    // 127.0.0.2 is listed as an address (so loopback upstreams can be approved at all); none
    // of the names is.
    let mut config = config(&["127.0.0.2"], &hosts);
    config.approver = Some(approver.clone());
    let (proxy, addr) = tcp_proxy(config);
    let status = |name: &str, port: u16| connect(&mut dial(addr), &format!("{name}:{port}"), b"");
    assert_eq!(status("once.test", port).status, 200);
    assert_eq!(status("once.test", port).status, 200);
    assert_eq!(status("run.test", port).status, 200);
    assert_eq!(status("run.test", port).status, 200);
    // `run` covers its port only: another port is a question of its own (here denied).
    assert_refused(
        &status("run.test", port.wrapping_add(1)),
        403,
        RefusalCode::DomainNotAllowed,
    );
    assert_refused(
        &status("deny.test", port),
        403,
        RefusalCode::DomainNotAllowed,
    );
    assert_refused(
        &status("private.test", guarded.port()),
        403,
        RefusalCode::AddressNotAllowed,
    );
    let report = proxy.shutdown(BOUND);
    guarded.assert_untouched();
    assert_eq!(echo.wait_finished(4).len(), 4);
    assert_eq!(
        *approver.asked.lock().unwrap(),
        [
            "once.test",
            "once.test",
            "run.test",
            "run.test",
            "deny.test",
            "private.test"
        ],
        "the second run.test connection on its port is not asked again"
    );
    let answers: Vec<(&str, ApprovalAnswer, bool)> = report
        .records
        .iter()
        .map(|r| {
            let approval = r.approval.as_ref().unwrap();
            (r.host.as_deref().unwrap(), approval.answer, approval.asked)
        })
        .collect();
    assert_eq!(
        answers,
        [
            ("once.test", ApprovalAnswer::Once, true),
            ("once.test", ApprovalAnswer::Once, true),
            ("run.test", ApprovalAnswer::Run, true),
            ("run.test", ApprovalAnswer::Run, false),
            ("run.test", ApprovalAnswer::Deny, true),
            ("deny.test", ApprovalAnswer::Deny, true),
            ("private.test", ApprovalAnswer::Run, true),
        ]
    );
    let denied = &report.records[5];
    assert!(
        denied
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("(the approver: answered deny)")),
        "{denied:?}"
    );
}
