//! The one client of the Docker daemon's API: HTTP/1.0 over its Unix socket, one request per
//! connection, every write and read bounded by the caller's deadline and the response by size
//! (headers within [`MAX_HEAD`], the whole within [`MAX_RESPONSE`]). Spawning the `docker` CLI
//! would cost tens of milliseconds and hang with a hung daemon.
//!
//! Callers: the run's container removal ([`super::remove`], [`super::exists`]) and the host's
//! probe (ping, version, image inspect) and egress setup (container inspect, [`inspect_container`],
//! also read for the out-of-memory verdict). Targets are
//! written into the request line as given: callers pass names they validated.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Responses larger than this are not a daemon we understand.
pub const MAX_RESPONSE: usize = 1024 * 1024;

/// The status line and headers must end within this many bytes.
pub const MAX_HEAD: usize = 64 * 1024;

/// What `GET /containers/{name}/json` says of a container, as far as Palisade reads it: the one
/// place its answer is parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerState {
    /// The container's full ID.
    pub id: String,
    pub running: bool,
    /// Its init process's pid in this pid namespace (0 when not running).
    pub pid: i32,
    /// Whether the kernel's out-of-memory killer acted in its cgroup (`State.OOMKilled`).
    pub oom_killed: bool,
}

/// Inspects container `name` (a name the caller validated): `Ok(None)` when the daemon does not
/// have it (404), `Err` when it did not answer or answered something else.
pub fn inspect_container(
    socket: &Path,
    name: &str,
    deadline: Instant,
) -> Result<Option<ContainerState>, ApiError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Container {
        id: String,
        state: State,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct State {
        #[serde(default)]
        running: bool,
        #[serde(default)]
        pid: i32,
        #[serde(rename = "OOMKilled", default)]
        oom_killed: bool,
    }
    let response = get(socket, &format!("/containers/{name}/json"), deadline)?;
    match response.status {
        200 => {}
        404 => return Ok(None),
        _ => {
            return Err(ApiError::Malformed(
                "an unexpected status for a container inspect",
            ));
        }
    }
    let container: Container = serde_json::from_slice(&response.body)
        .map_err(|_| ApiError::Malformed("a container description palisade cannot read"))?;
    Ok(Some(ContainerState {
        id: container.id,
        running: container.state.running,
        pid: container.state.pid,
        oom_killed: container.state.oom_killed,
    }))
}

/// A complete response: the status code and the body (as sent; the daemon's JSON is not
/// chunked under HTTP/1.0).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a request got no response.
#[derive(Debug)]
pub enum ApiError {
    /// The deadline passed (before connecting, or while writing or reading).
    TimedOut,
    /// Connecting, writing or reading failed.
    Io(io::Error),
    /// The answer is not an HTTP response within the limits.
    Malformed(&'static str),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::TimedOut => f.write_str("timed out"),
            ApiError::Io(err) => err.fmt(f),
            ApiError::Malformed(what) => {
                write!(f, "not an http response from the docker daemon ({what})")
            }
        }
    }
}

impl std::error::Error for ApiError {}

impl From<io::Error> for ApiError {
    fn from(err: io::Error) -> Self {
        match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ApiError::TimedOut,
            _ => ApiError::Io(err),
        }
    }
}

/// `GET target` on the socket, finished by `deadline`.
pub fn get(socket: &Path, target: &str, deadline: Instant) -> Result<Response, ApiError> {
    request(socket, "GET", target, deadline)
}

/// `method target` on the socket, finished by `deadline`: the whole response, read until the
/// daemon closes the connection.
pub fn request(
    socket: &Path,
    method: &str,
    target: &str,
    deadline: Instant,
) -> Result<Response, ApiError> {
    let remaining = || -> Result<Duration, ApiError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(ApiError::TimedOut)
        } else {
            Ok(left)
        }
    };
    remaining()?;
    let mut stream = UnixStream::connect(socket)?;
    stream.set_write_timeout(Some(remaining()?))?;
    let request =
        format!("{method} {target} HTTP/1.0\r\nHost: docker\r\nUser-Agent: palisade\r\n\r\n");
    stream.write_all(request.as_bytes())?;

    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        stream.set_read_timeout(Some(remaining()?))?;
        let read = match stream.read(&mut chunk) {
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err.into()),
        };
        if read == 0 {
            break;
        }
        raw.extend_from_slice(chunk.get(..read).unwrap_or_default());
        if raw.len() > MAX_RESPONSE {
            return Err(ApiError::Malformed("response too large"));
        }
    }
    parse_response(&raw)
}

/// Splits a raw response into its status and body.
pub(crate) fn parse_response(raw: &[u8]) -> Result<Response, ApiError> {
    let split = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or(ApiError::Malformed("no end of headers"))?;
    if split > MAX_HEAD {
        return Err(ApiError::Malformed("headers too large"));
    }
    let head = raw.get(..split).unwrap_or_default();
    let body = raw.get(split + 4..).unwrap_or_default().to_vec();
    let head = std::str::from_utf8(head).map_err(|_| ApiError::Malformed("headers not utf-8"))?;
    let status_line = head.lines().next().unwrap_or("");
    let mut parts = status_line.split(' ');
    let protocol = parts.next().unwrap_or("");
    if !protocol.starts_with("HTTP/1.") {
        return Err(ApiError::Malformed("bad status line"));
    }
    let status = parts
        .next()
        .and_then(|code| code.parse::<u16>().ok())
        .filter(|code| (100..600).contains(code))
        .ok_or(ApiError::Malformed("bad status code"))?;
    Ok(Response { status, body })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    #[test]
    fn parses_a_response() {
        let response = parse_response(b"HTTP/1.0 200 OK\r\nApi-Version: 1.43\r\n\r\nOK").unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.body, b"OK");
        assert!(matches!(
            parse_response(b"garbage"),
            Err(ApiError::Malformed(_))
        ));
        assert!(matches!(
            parse_response(b"SSH-2.0\r\n\r\n"),
            Err(ApiError::Malformed(_))
        ));
        let mut huge = b"HTTP/1.0 200 OK\r\nX: ".to_vec();
        huge.resize(MAX_HEAD + 1, b'a');
        huge.extend_from_slice(b"\r\n\r\n");
        assert!(matches!(
            parse_response(&huge),
            Err(ApiError::Malformed("headers too large"))
        ));
    }

    #[test]
    fn a_past_deadline_is_a_timeout_before_connecting() {
        let dir = tempfile::tempdir().unwrap();
        let result = get(&dir.path().join("no.sock"), "/_ping", Instant::now());
        assert!(matches!(result, Err(ApiError::TimedOut)), "{result:?}");
    }
}
