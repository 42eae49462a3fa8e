//! The one HTTP/1.x request head the proxy reads per client connection: bounded in size, line
//! count and time, parsed strictly (CRLF only, no obs-fold, no whitespace before a colon), and
//! for absolute-form requests rewritten to origin-form for the upstream.

use std::io::{self, Read};
use std::time::{Duration, Instant};

use crate::host::{self, Host};
use crate::record::{Refusal, RefusalCode};
use crate::relay::Stream;

/// The largest request head accepted, terminator included.
pub const MAX_HEAD: usize = 64 * 1024;
/// The most header lines accepted.
pub const MAX_HEADERS: usize = 128;

/// Why no head was read.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The client closed before sending a byte (a port probe, a health check): nothing to answer.
    ClosedEarly,
    /// The client went silent (idle timeout) or the whole head took too long.
    TimedOut,
    /// The head is over [`MAX_HEAD`].
    TooLarge,
    /// The client closed mid-head.
    Truncated,
    Io(io::Error),
}

/// The time a client has to send what the proxy reads before relaying (an HTTP head, a SOCKS5
/// greeting and request): a bound on any single silence and one on the whole.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadBudget {
    deadline: Instant,
    idle: Duration,
}

impl ReadBudget {
    pub(crate) fn new(idle: Duration, total: Duration) -> ReadBudget {
        ReadBudget {
            deadline: Instant::now() + total,
            idle,
        }
    }

    /// Appends what one read returns (at most 8 KiB) to `buf`; `Ok(0)` when the client closed.
    pub(crate) fn read_more(&self, stream: &Stream, buf: &mut Vec<u8>) -> Result<usize, HeadError> {
        let mut chunk = [0_u8; 8192];
        let mut reader = stream;
        loop {
            let Some(left) = self
                .deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                return Err(HeadError::TimedOut);
            };
            stream
                .set_read_timeout(Some(left.min(self.idle)))
                .map_err(HeadError::Io)?;
            match reader.read(&mut chunk) {
                Ok(n) => {
                    buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(HeadError::TimedOut);
                }
                Err(e) => return Err(HeadError::Io(e)),
            }
        }
    }
}

/// Reads up to and including the blank line ending the head, after the bytes already in `buf`.
/// Returns the head and any bytes the client sent after it (a pipelined request, a TLS
/// ClientHello sent ahead of the 200).
pub(crate) fn read_head(
    stream: &Stream,
    budget: &ReadBudget,
    mut buf: Vec<u8>,
) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    let mut search_from = 0;
    loop {
        if let Some(pos) = find(buf.get(search_from..).unwrap_or_default(), b"\r\n\r\n") {
            let end = search_from + pos + 4;
            if end > MAX_HEAD {
                return Err(HeadError::TooLarge);
            }
            let leftover = buf.split_off(end);
            stream.set_read_timeout(None).map_err(HeadError::Io)?;
            return Ok((buf, leftover));
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        search_from = buf.len().saturating_sub(3);
        match budget.read_more(stream, &mut buf)? {
            0 if buf.is_empty() => return Err(HeadError::ClosedEarly),
            0 => return Err(HeadError::Truncated),
            _ => {}
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What the client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port`.
    Connect { host: Host, port: u16 },
    /// `METHOD http://authority/path`: `authority` is what the upstream's `Host` header gets.
    Http {
        host: Host,
        port: u16,
        authority: String,
        path: String,
    },
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub target: Target,
    pub version: &'static str,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Request {
    pub fn host_port(&self) -> (&Host, u16) {
        match &self.target {
            Target::Connect { host, port } | Target::Http { host, port, .. } => (host, *port),
        }
    }
}

/// The method and host:port of a head, when the request line gets that far, for records of
/// requests refused as unsupported.
#[derive(Debug, Clone, Default)]
pub struct Partial {
    pub method: Option<String>,
}

fn malformed(why: impl Into<String>) -> Refusal {
    Refusal::new(RefusalCode::MalformedRequest, why)
}

fn unsupported(why: impl Into<String>) -> Refusal {
    Refusal::new(RefusalCode::UnsupportedRequest, why)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parses a head read by [`read_head`]. On refusal, `partial` says what was understood.
pub fn parse(head: &[u8], partial: &mut Partial) -> Result<Request, Refusal> {
    // Keep the last line's CR so that every line, the request line included, ends in CR.
    let body = head
        .strip_suffix(b"\n\r\n")
        .ok_or_else(|| malformed("request head does not end with CRLF CRLF"))?;
    let mut lines = body.split(|&b| b == b'\n');
    let request_line = lines
        .next()
        .and_then(|l| l.strip_suffix(b"\r"))
        .ok_or_else(|| malformed("request line does not end with CRLF"))?;
    let request_line = std::str::from_utf8(request_line)
        .ok()
        .filter(|l| l.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
        .ok_or_else(|| malformed("request line has bytes outside visible ASCII"))?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed(
            "request line is not `METHOD target HTTP/1.x` with single spaces",
        ));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(malformed("request method is not a token"));
    }
    partial.method = Some(method.to_owned());
    let version = match version {
        "HTTP/1.1" => "HTTP/1.1",
        "HTTP/1.0" => "HTTP/1.0",
        _ => return Err(malformed("request version is not HTTP/1.0 or HTTP/1.1")),
    };

    let mut headers = Vec::new();
    for line in lines {
        let line = line
            .strip_suffix(b"\r")
            .ok_or_else(|| malformed("header line does not end with CRLF"))?;
        if headers.len() >= MAX_HEADERS {
            return Err(malformed(format!("more than {MAX_HEADERS} header lines")));
        }
        if line.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
            return Err(malformed("obsolete header line folding"));
        }
        let colon = line
            .iter()
            .position(|b| *b == b':')
            .ok_or_else(|| malformed("header line without a colon"))?;
        let (name, value) = line.split_at(colon);
        let value = value.get(1..).unwrap_or_default();
        if name.is_empty() || !name.iter().all(|b| is_tchar(*b)) {
            return Err(malformed("header name is not a token"));
        }
        if value
            .iter()
            .any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f || *b == b'\r')
        {
            return Err(malformed("header value has control characters"));
        }
        let value = value.trim_ascii();
        let name = String::from_utf8_lossy(name).into_owned();
        headers.push((name, value.to_vec()));
    }

    let target = if method == "CONNECT" {
        let (host, port) = parse_authority(target, None)?;
        Target::Connect { host, port }
    } else {
        parse_absolute(target)?
    };
    Ok(Request {
        method: method.to_owned(),
        target,
        version,
        headers,
    })
}

/// `host:port` (port required unless `default_port` is given); `[v6]` for IPv6.
fn parse_authority(text: &str, default_port: Option<u16>) -> Result<(Host, u16), Refusal> {
    if text.contains('@') {
        return Err(malformed(format!(
            "target authority `{text}` has userinfo, which the proxy refuses"
        )));
    }
    let (host_text, port_text) = host::split_host_port(text);
    // A bare IPv6 address has no room for a port; authorities must bracket it.
    if !host_text.starts_with('[') && host_text.contains(':') {
        return Err(malformed(format!(
            "target authority `{text}`: bracket IPv6 addresses"
        )));
    }
    let port = match (port_text, default_port) {
        (Some(p), _) => host::parse_port(p)
            .ok_or_else(|| malformed(format!("target authority `{text}` has a bad port")))?,
        (None, Some(p)) => p,
        (None, None) => {
            return Err(malformed(format!(
                "CONNECT target `{text}` is not `host:port`"
            )));
        }
    };
    let host =
        Host::parse(host_text).map_err(|e| malformed(format!("target authority `{text}`: {e}")))?;
    Ok((host, port))
}

fn parse_absolute(target: &str) -> Result<Target, Refusal> {
    if target.starts_with('/') {
        return Err(unsupported(format!(
            "`{target}` is an origin-form request; this is a proxy: send absolute-form `http://host/path` or CONNECT"
        )));
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(unsupported(format!(
            "request target `{target}` is not absolute-form `http://host/path`"
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme == "https" {
        return Err(unsupported(format!(
            "`{target}`: use CONNECT for https (the proxy does not originate TLS)"
        )));
    }
    if scheme != "http" {
        return Err(unsupported(format!(
            "`{target}`: scheme `{scheme}` is not proxied; only http absolute-form and CONNECT"
        )));
    }
    if target.contains('#') {
        return Err(malformed(format!(
            "request target `{target}` has a fragment"
        )));
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let (host, port) = parse_authority(authority, Some(80))?;
    let explicit_port = host::split_host_port(authority).1.is_some();
    let authority = if explicit_port {
        format!("{}:{port}", host.to_authority())
    } else {
        host.to_authority()
    };
    let path = if path.is_empty() {
        "/".to_owned()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    Ok(Target::Http {
        host,
        port,
        authority,
        path,
    })
}

/// Headers never forwarded: they are between the client and this proxy, or would let the client
/// steer the upstream connection (`Host` is replaced by the URI authority, RFC 9112 §3.2.2).
fn is_hop_by_hop(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == "host"
        || lower == "connection"
        || lower == "keep-alive"
        || lower == "te"
        || lower == "upgrade"
        || lower.starts_with("proxy-")
}

/// Headers that frame the body; kept even if `Connection` lists them, since the body that follows
/// is relayed as-is and the upstream must frame it the way the client did.
fn is_framing(name: &str) -> bool {
    name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding")
}

/// The origin-form head sent upstream for an absolute-form request.
pub fn rewrite_for_upstream(request: &Request) -> Vec<u8> {
    let (authority, path) = match &request.target {
        Target::Http {
            authority, path, ..
        } => (authority.as_str(), path.as_str()),
        Target::Connect { .. } => ("", ""),
    };
    let listed: Vec<String> = request
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(
        format!(
            "{} {path} {}\r\nHost: {authority}\r\n",
            request.method, request.version
        )
        .as_bytes(),
    );
    for (name, value) in &request.headers {
        let lower = name.to_ascii_lowercase();
        if is_hop_by_hop(name) || (listed.contains(&lower) && !is_framing(name)) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse_ok(head: &str) -> Request {
        parse(head.as_bytes(), &mut Partial::default()).unwrap()
    }

    fn code(head: &str) -> RefusalCode {
        parse(head.as_bytes(), &mut Partial::default())
            .unwrap_err()
            .code
    }

    #[test]
    fn connect_targets() {
        let r = parse_ok("CONNECT github.com:443 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            r.target,
            Target::Connect {
                host: Host::Name("github.com".into()),
                port: 443
            }
        );
        let r = parse_ok("CONNECT [::1]:8080 HTTP/1.1\r\n\r\n");
        assert_eq!(r.host_port().1, 8080);
        assert_eq!(
            code("CONNECT github.com HTTP/1.1\r\n\r\n"),
            RefusalCode::MalformedRequest
        );
        assert_eq!(
            code("CONNECT a@github.com:443 HTTP/1.1\r\n\r\n"),
            RefusalCode::MalformedRequest
        );
        assert_eq!(
            code("CONNECT ::1:443 HTTP/1.1\r\n\r\n"),
            RefusalCode::MalformedRequest
        );
    }

    #[test]
    fn absolute_form_is_rewritten() {
        let r = parse_ok(
            "GET http://Allowed.Test:8080?q=1 HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: x\r\nConnection: keep-alive, X-Secret, Content-Length\r\nX-Secret: 1\r\nContent-Length: 3\r\nAccept: */*\r\n\r\n",
        );
        let out = String::from_utf8(rewrite_for_upstream(&r)).unwrap();
        assert_eq!(
            out,
            "GET /?q=1 HTTP/1.1\r\nHost: allowed.test:8080\r\nContent-Length: 3\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = parse_ok("POST http://a.test HTTP/1.0\r\n\r\n");
        assert_eq!(
            String::from_utf8(rewrite_for_upstream(&r)).unwrap(),
            "POST / HTTP/1.0\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn refusals() {
        for (head, want) in [
            (
                "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
                RefusalCode::UnsupportedRequest,
            ),
            (
                "GET https://a.test/ HTTP/1.1\r\n\r\n",
                RefusalCode::UnsupportedRequest,
            ),
            (
                "GET ftp://a.test/ HTTP/1.1\r\n\r\n",
                RefusalCode::UnsupportedRequest,
            ),
            ("GET * HTTP/1.1\r\n\r\n", RefusalCode::UnsupportedRequest),
            (
                "GET http://u:p@a.test/ HTTP/1.1\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "GET http://a.test/#x HTTP/1.1\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "GET http://a.test/ HTTP/2.0\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "GET  http://a.test/ HTTP/1.1\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "GET http://a.test/ HTTP/1.1\nHost: a\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "GET http://a.test/ HTTP/1.1\r\nHost : a\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "GET http://a.test/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "GET http://a.test/ HTTP/1.1\r\nX: a\0b\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "GET http://a.test:0/ HTTP/1.1\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "GET http://2130706433/ HTTP/1.1\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
            (
                "G(T http://a.test/ HTTP/1.1\r\n\r\n",
                RefusalCode::MalformedRequest,
            ),
        ] {
            assert_eq!(code(head), want, "{head:?}");
        }
        let many = format!(
            "GET http://a.test/ HTTP/1.1\r\n{}\r\n",
            "X: y\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(code(&many), RefusalCode::MalformedRequest);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;
    use proptest::test_runner::FileFailurePersistence;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            // Failures are saved next to this file (`http.proptest-regressions`) and committed.
            failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
                "proptest-regressions",
            ))),
            ..ProptestConfig::default()
        })]

        // Client bytes never panic the parser, and a parsed head always names a host and port.
        #[test]
        fn arbitrary_heads_parse_or_refuse(
            method in "(CONNECT|GET|POST|[A-Z(]{1,6})",
            target in prop_oneof![
                "http://[a-zA-Z0-9.\\[\\]:@-]{0,16}(:[0-9]{0,6})?[/?][ -~]{0,20}",
                "[a-zA-Z0-9.\\[\\]:-]{0,16}:[0-9]{0,6}",
                "[ -~]{0,40}",
            ],
            headers in proptest::collection::vec("[ -~\t]{0,30}", 0..6),
            junk in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut head = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
            for h in &headers {
                head.extend_from_slice(h.as_bytes());
                head.extend_from_slice(b"\r\n");
            }
            head.extend_from_slice(&junk);
            head.extend_from_slice(b"\r\n\r\n");
            if let Ok(request) = parse(&head, &mut Partial::default()) {
                let (_, port) = request.host_port();
                prop_assert!(port != 0);
                let rewritten = rewrite_for_upstream(&request);
                prop_assert!(rewritten.ends_with(b"Connection: close\r\n\r\n"));
            }
        }

        #[test]
        fn arbitrary_allowlist_entries_parse_or_refuse(entry in "[ -~]{0,40}") {
            let _ = crate::Allowlist::parse(std::slice::from_ref(&entry));
            let _ = Host::parse(&entry);
        }
    }
}
