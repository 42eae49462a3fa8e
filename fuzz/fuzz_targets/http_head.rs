//! The filtering proxy's request head (`palisade_proxy::http::parse`): CONNECT and absolute-form
//! HTTP, and the head rewritten for the upstream.
//!
//! Asserts: no panic; a refused head gets a machine code (`malformed-request` or
//! `unsupported-request`, both 400) and a one-line reason, and its HTTP response is well formed
//! (status line, the code in `X-Palisade-Refusal`, a `Content-Length` that is the body's); an
//! accepted head names a host and a non-zero port, CONNECT only with an explicit port, and its
//! upstream rewrite is origin-form with exactly one `Host` (the target's authority), no
//! hop-by-hop header, every line ending in CRLF with no bare CR or LF inside, and `Connection:
//! close` last. Heads longer than the proxy reads (64 KiB) are not tried.
#![no_main]

use libfuzzer_sys::fuzz_target;
use palisade_fuzz::{one_line, write_seeds};
use palisade_proxy::RefusalCode;
use palisade_proxy::http::{MAX_HEAD, Partial, Target, parse, rewrite_for_upstream};

const SEEDS: [&str; 6] = [
    "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    "GET http://example.com/path?q=1 HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nProxy-Authorization: Basic eA==\r\n\r\n",
    "POST http://[::1]:8080 HTTP/1.0\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
    "GET /origin HTTP/1.1\r\n\r\n",
    "CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n",
    "GET https://example.com/ HTTP/1.1\r\n\r\n",
];

fuzz_target!(
    init: {
        write_seeds(SEEDS.iter().map(|s| s.as_bytes().to_vec()));
    },
    |data: &[u8]| {
        if data.len() > MAX_HEAD {
            return;
        }
        let mut partial = Partial::default();
        match parse(data, &mut partial) {
            Err(refusal) => {
                assert!(matches!(
                    refusal.code,
                    RefusalCode::MalformedRequest | RefusalCode::UnsupportedRequest
                ));
                one_line(&refusal.reason);
                let response = refusal.http_response();
                let text = String::from_utf8(response).expect("a response is text");
                let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
                assert!(head.starts_with("HTTP/1.1 400 "));
                assert!(head.contains(&format!("\r\nX-Palisade-Refusal: {}\r\n", refusal.code)));
                assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
                assert_eq!(body.matches('\n').count(), 1);
            }
            Ok(request) => {
                let (host, port) = request.host_port();
                assert_ne!(port, 0);
                assert!(!host.to_authority().is_empty());
                let Target::Http { authority, path, .. } = &request.target else {
                    assert_eq!(request.method, "CONNECT");
                    return;
                };
                assert!(path.starts_with('/'));
                let rewritten = rewrite_for_upstream(&request);
                assert!(rewritten.ends_with(b"Connection: close\r\n\r\n"));
                let body = &rewritten[..rewritten.len() - 2];
                let mut lines = body.split(|b| *b == b'\n');
                let first = lines.next().expect("a request line");
                assert_eq!(
                    first,
                    format!("{} {path} {}\r", request.method, request.version).as_bytes()
                );
                let mut hosts = 0;
                for line in lines.filter(|l| !l.is_empty()) {
                    let line = line.strip_suffix(b"\r").expect("every line ends in CRLF");
                    assert!(!line.contains(&b'\r'), "a bare CR in a forwarded header");
                    let name = line.split(|b| *b == b':').next().unwrap_or_default();
                    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
                    if name == "host" {
                        hosts += 1;
                        assert_eq!(line, format!("Host: {authority}").as_bytes());
                    }
                    assert!(!name.starts_with("proxy-") && name != "keep-alive" && name != "upgrade" && name != "te");
                }
                assert_eq!(hosts, 1);
            }
        }
    }
);
