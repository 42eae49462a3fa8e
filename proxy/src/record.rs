//! What the proxy reports about each client connection, for the run's audit outcome.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which of the proxy's routes a connection came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouteKind {
    /// The filtering proxy (an HTTP request head or a SOCKS5 request checked against the
    /// allowlist).
    Proxy,
    /// A forwarded port of the host's loopback (`host` and `port` name it).
    LoopbackPort,
}

/// Whether the proxy relayed the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allowed,
    Refused,
}

/// Why a connection was refused: a closed set, sent to the client in `X-Palisade-Refusal` and
/// recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalCode {
    /// 403: no allowlist entry matches the requested host and port.
    DomainNotAllowed,
    /// 403: the host resolved to (or is) an address outside public unicast space that no
    /// IP-literal entry allows.
    AddressNotAllowed,
    /// 403: the client's credentials failed the configured check.
    ClientNotAllowed,
    /// 502: the name has no addresses (or overrides-only and no override, or lookup timed out).
    ResolutionFailed,
    /// 502: no checked address accepted a connection in time.
    UpstreamUnreachable,
    /// 400: the request head is not a well-formed, bounded HTTP/1.x head.
    MalformedRequest,
    /// 400: a well-formed request the proxy does not forward (origin-form, `https://` or another
    /// scheme in absolute-form: use CONNECT; SOCKS5 `BIND`, `UDP ASSOCIATE`, an authentication
    /// method other than none, an unknown address type).
    UnsupportedRequest,
    /// 503: too many connections in flight.
    TooManyConnections,
    /// 502, from the in-sandbox bridge: the proxy's socket did not accept a connection.
    ProxyUnreachable,
}

impl RefusalCode {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::DomainNotAllowed => "domain-not-allowed",
            RefusalCode::AddressNotAllowed => "address-not-allowed",
            RefusalCode::ClientNotAllowed => "client-not-allowed",
            RefusalCode::ResolutionFailed => "resolution-failed",
            RefusalCode::UpstreamUnreachable => "upstream-unreachable",
            RefusalCode::MalformedRequest => "malformed-request",
            RefusalCode::UnsupportedRequest => "unsupported-request",
            RefusalCode::TooManyConnections => "too-many-connections",
            RefusalCode::ProxyUnreachable => "proxy-unreachable",
        }
    }

    /// The HTTP status line sent with this refusal.
    pub fn status_line(self) -> &'static str {
        match self {
            RefusalCode::DomainNotAllowed
            | RefusalCode::AddressNotAllowed
            | RefusalCode::ClientNotAllowed => "HTTP/1.1 403 Forbidden",
            RefusalCode::ResolutionFailed
            | RefusalCode::UpstreamUnreachable
            | RefusalCode::ProxyUnreachable => "HTTP/1.1 502 Bad Gateway",
            RefusalCode::MalformedRequest | RefusalCode::UnsupportedRequest => {
                "HTTP/1.1 400 Bad Request"
            }
            RefusalCode::TooManyConnections => "HTTP/1.1 503 Service Unavailable",
        }
    }
}

impl fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: its code and a one-line reason naming the target and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: RefusalCode,
    pub reason: String,
}

impl Refusal {
    pub fn new(code: RefusalCode, reason: impl Into<String>) -> Refusal {
        // One line, always: reasons quote client input, and a newline there would let a client
        // forge lines in the response body or in logs.
        let reason: String = reason
            .into()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        Refusal { code, reason }
    }

    /// The complete HTTP response for this refusal: status, `X-Palisade-Refusal: <code>`, and a
    /// one-line text body.
    pub fn http_response(&self) -> Vec<u8> {
        let body = format!("palisade proxy refused: {}\n", self.reason);
        format!(
            "{}\r\nX-Palisade-Refusal: {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.code.status_line(),
            self.code,
            body.len()
        )
        .into_bytes()
    }
}

/// One client connection as the audit sees it.
///
/// `method`, `host` and `port` are `None` when the proxy never got that far (a refused client, a
/// malformed head). `address` is the upstream socket address actually connected to. Bytes are
/// payload relayed: `bytes_up` client→upstream (for absolute-form HTTP including the rewritten
/// request head), `bytes_down` upstream→client (not counting the proxy's own responses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectionRecord {
    /// Accept order, from 0; records are kept sorted by it.
    pub id: u64,
    /// The route the connection came through.
    pub route: RouteKind,
    pub method: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub verdict: Verdict,
    pub code: Option<RefusalCode>,
    pub reason: Option<String>,
    pub address: Option<String>,
    /// The client as the proxy saw it: `pid=.. uid=.. gid=..` for Unix peers, `ip:port` for TCP.
    pub peer: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// What the run's approver answered for this name and port, outside the allowlist
    /// (`palisade run --approve-with`); absent for names on the list and without an approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// An approver's answer for a name outside the allowlist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalAnswer {
    /// This connection only.
    Once,
    /// This connection and every later one to the same name and port, for the rest of the run.
    Run,
    /// Refused as without an approver; also every answer that is not one of the three, an
    /// approver that fails, and one that does not answer in time.
    Deny,
}

impl ApprovalAnswer {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalAnswer::Once => "once",
            ApprovalAnswer::Run => "run",
            ApprovalAnswer::Deny => "deny",
        }
    }
}

/// One connection's approval, as the audit sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Approval {
    pub answer: ApprovalAnswer,
    /// `false`: an earlier `run` answer for the same name and port covered this connection.
    pub asked: bool,
    /// How the answer came about: `answered once`, `approver timed out after 30 s`, …
    pub detail: String,
    /// How long the connection was held for the answer.
    pub waited_ms: u64,
}
