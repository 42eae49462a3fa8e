//! One client connection of the filtering proxy, served: its request head (or SOCKS5 greeting and
//! request) read and parsed, checked against the allowlist (and, off it, the run-time approver),
//! the upstream opened, the client answered or refused, the bytes relayed, and its
//! [`ConnectionRecord`] filled in. [`crate::server`] accepts connections and hands each here.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::host::Host;
use crate::http::{self, HeadError, Partial, ReadBudget, Target};
use crate::record::{
    Approval, ApprovalAnswer, ConnectionRecord, Refusal, RefusalCode, RouteKind, Verdict,
};
use crate::relay::{self, Stream};
use crate::socks::{self, Parsed, Reply, SocksError};

use crate::server::{ApprovalRequest, PeerInfo, Route, Shared};

/// A record being filled in as the connection progresses.
pub(crate) struct RecordDraft {
    id: u64,
    route: RouteKind,
    peer: String,
    method: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    address: Option<String>,
    approval: Option<Approval>,
}

impl RecordDraft {
    pub(crate) fn new(id: u64, peer: &PeerInfo, route: Route) -> RecordDraft {
        let (route, host, port) = match route {
            Route::Filter => (RouteKind::Proxy, None, None),
            Route::Forward(target) => (
                RouteKind::LoopbackPort,
                Some(target.ip().to_string()),
                Some(target.port()),
            ),
        };
        RecordDraft {
            id,
            route,
            peer: peer.to_string(),
            method: None,
            host,
            port,
            address: None,
            approval: None,
        }
    }

    pub(crate) fn finish(
        self,
        verdict: Verdict,
        refusal: Option<Refusal>,
        bytes_up: u64,
        bytes_down: u64,
    ) -> ConnectionRecord {
        let (code, reason) = match refusal {
            Some(r) => (Some(r.code), Some(r.reason)),
            None => (None, None),
        };
        ConnectionRecord {
            id: self.id,
            route: self.route,
            method: self.method,
            host: self.host,
            port: self.port,
            verdict,
            code,
            reason,
            address: self.address,
            peer: Some(self.peer),
            bytes_up,
            bytes_down,
            approval: self.approval,
        }
    }

    pub(crate) fn refused(self, refusal: Refusal) -> ConnectionRecord {
        self.finish(Verdict::Refused, Some(refusal), 0, 0)
    }
}

/// Handles one client connection; returns its record (`None` for a client that closed without
/// sending anything). The first byte says the protocol: `0x05` is SOCKS5 (no HTTP method starts
/// with it), anything else an HTTP head; both get the same allowlist, address checks and record.
pub(crate) fn serve_connection(
    shared: &Shared,
    id: u64,
    client: Stream,
    peer: &PeerInfo,
) -> Option<ConnectionRecord> {
    let config = &shared.config;
    let mut record = RecordDraft::new(id, peer, Route::Filter);

    // Before reading anything: an unknown client's bytes are not parsed at all.
    if !(config.client_check)(peer) {
        let refusal = Refusal::new(
            RefusalCode::ClientNotAllowed,
            format!("client {peer} may not use this proxy"),
        );
        refuse(&client, &refusal, true, Answer::Http);
        return Some(record.refused(refusal));
    }

    let budget = ReadBudget::new(config.head_idle_timeout, config.head_total_timeout);
    let mut first = Vec::new();
    let read = budget
        .read_more(&client, &mut first)
        .and_then(|n| {
            if n == 0 {
                Err(HeadError::ClosedEarly)
            } else {
                Ok(())
            }
        })
        .and_then(|()| {
            if first.first() == Some(&socks::VERSION) {
                Ok(None)
            } else {
                http::read_head(&client, &budget, std::mem::take(&mut first)).map(Some)
            }
        });
    let (head, leftover) = match read {
        Ok(Some(read)) => read,
        Ok(None) => return Some(serve_socks(shared, client, record, &budget, first)),
        Err(e) => {
            let refusal = head_refusal(e)?;
            refuse(&client, &refusal, true, Answer::Http);
            return Some(record.refused(refusal));
        }
    };

    let mut partial = Partial::default();
    let request = match http::parse(&head, &mut partial) {
        Ok(request) => request,
        Err(refusal) => {
            record.method = partial.method;
            refuse(&client, &refusal, true, Answer::Http);
            return Some(record.refused(refusal));
        }
    };
    let (host, port) = request.host_port();
    record.method = Some(request.method.clone());
    record.host = Some(host.to_authority());
    record.port = Some(port);

    let (upstream, addr) = match open_upstream(shared, host, port, &mut record) {
        Ok(opened) => opened,
        Err(refusal) => {
            refuse(&client, &refusal, true, Answer::Http);
            return Some(record.refused(refusal));
        }
    };
    record.address = Some(addr.ip().to_string());
    let upstream = Stream::Tcp(upstream);
    if !shared.register(id, &upstream) {
        let _ = client.shutdown(Shutdown::Both);
        return Some(record.finish(Verdict::Allowed, None, 0, 0));
    }

    let first_up = match &request.target {
        Target::Connect { .. } => {
            if (&client)
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .is_err()
            {
                return Some(record.finish(Verdict::Allowed, None, 0, 0));
            }
            leftover
        }
        Target::Http { .. } => {
            let mut first = http::rewrite_for_upstream(&request);
            first.extend_from_slice(&leftover);
            first
        }
    };
    let (up, down) = relay::relay(client, upstream, &first_up);
    Some(record.finish(Verdict::Allowed, None, up, down))
}

/// The refusal for a head (or SOCKS5 message) that could not be read; `None` when the client
/// closed before sending anything (a port probe: nothing to answer or record).
pub(crate) fn head_refusal(error: HeadError) -> Option<Refusal> {
    let why = match error {
        HeadError::ClosedEarly => return None,
        HeadError::TimedOut => "no complete request head in time".to_owned(),
        HeadError::TooLarge => format!("request head is larger than {} bytes", http::MAX_HEAD),
        HeadError::Truncated => "client closed in the middle of the head".to_owned(),
        HeadError::Io(e) => format!("reading the request head failed: {e}"),
    };
    Some(Refusal::new(RefusalCode::MalformedRequest, why))
}

/// The one way to an upstream, for every protocol: the allowlist (name and port) or, outside
/// it, the approver's answer (noted in `record`); then the resolver's checked addresses
/// (private, loopback and metadata addresses only by an IP-literal entry, approved or not),
/// then a bounded connect to each in turn.
pub(crate) fn open_upstream(
    shared: &Shared,
    host: &Host,
    port: u16,
    record: &mut RecordDraft,
) -> Result<(TcpStream, SocketAddr), Refusal> {
    let config = &shared.config;
    if config.allowlist.matches_host(host, port).is_none() {
        let approval = approve(shared, host, port, record);
        let denied = approval
            .as_ref()
            .is_none_or(|a| a.answer == ApprovalAnswer::Deny);
        let why = match &approval {
            Some(a) if denied => format!(" (the approver: {})", a.detail),
            _ => String::new(),
        };
        record.approval = approval;
        if denied {
            return Err(Refusal::new(
                RefusalCode::DomainNotAllowed,
                format!(
                    "{}:{port} is not in the sandbox's network allowlist{why}",
                    host.to_authority()
                ),
            ));
        }
    }
    let addrs = config
        .resolver
        .resolve_checked(host, port, &config.allowlist)?;
    let mut last_error = None;
    for addr in &addrs {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        match TcpStream::connect_timeout(addr, config.connect_timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok((s, *addr));
            }
            Err(e) => last_error = Some(format!("{addr}: {e}")),
        }
    }
    Err(Refusal::new(
        RefusalCode::UpstreamUnreachable,
        format!(
            "{}:{port}: no address accepted a connection ({})",
            host.to_authority(),
            last_error.unwrap_or_else(|| "proxy stopping".to_owned())
        ),
    ))
}

/// The approver's answer for `host:port` outside the allowlist: an earlier `run` answer, else
/// asked now while the connection waits. `None` without an approver.
pub(crate) fn approve(
    shared: &Shared,
    host: &Host,
    port: u16,
    record: &RecordDraft,
) -> Option<Approval> {
    let approver = shared.config.approver.as_ref()?;
    let key = (host.to_authority(), port);
    let approved = || {
        shared
            .approved_for_run
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    };
    if approved().contains(&key) {
        return Some(Approval {
            answer: ApprovalAnswer::Run,
            asked: false,
            detail: "allowed for the run by an earlier answer".to_owned(),
            waited_ms: 0,
        });
    }
    let request = ApprovalRequest {
        host: key.0.clone(),
        port,
        method: record.method.clone().unwrap_or_default(),
        peer: record.peer.clone(),
    };
    let started = Instant::now();
    let (answer, detail) = approver.ask(&request);
    if answer == ApprovalAnswer::Run {
        approved().insert(key);
    }
    Some(Approval {
        answer,
        asked: true,
        detail,
        waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// One SOCKS5 connection after its first byte: greeting (no authentication only), one request
/// (`CONNECT` only), the same [`open_upstream`] as HTTP, the reply, then a raw relay. `buf` holds
/// what was read so far; every read is bounded by `budget`, and neither message can grow past
/// its structural maximum before it parses or is refused.
pub(crate) fn serve_socks(
    shared: &Shared,
    client: Stream,
    mut record: RecordDraft,
    budget: &ReadBudget,
    mut buf: Vec<u8>,
) -> ConnectionRecord {
    let id = record.id;
    let used = loop {
        match socks::parse_greeting(&buf) {
            Ok(Parsed::Done { used, .. }) => break used,
            Ok(Parsed::Incomplete) => {}
            Err(e) => {
                let answer = match e {
                    SocksError::NoAcceptableMethod(_) => Answer::SocksNoMethod,
                    _ => Answer::Close,
                };
                let refusal = e.refusal();
                refuse(&client, &refusal, true, answer);
                return record.refused(refusal);
            }
        }
        if let Err(refusal) = read_socks(budget, &client, &mut buf, "greeting") {
            refuse(&client, &refusal, false, Answer::Close);
            return record.refused(refusal);
        }
    };
    buf.drain(..used.min(buf.len()));
    record.method = Some("SOCKS5".to_owned());
    if (&client).write_all(&socks::method_selection(true)).is_err() {
        let refusal = Refusal::new(
            RefusalCode::MalformedRequest,
            "client closed after the SOCKS5 greeting",
        );
        return record.refused(refusal);
    }
    let (request, used) = loop {
        match socks::parse_request(&buf) {
            Ok(Parsed::Done { value, used }) => break (value, used),
            Ok(Parsed::Incomplete) => {}
            Err(e) => {
                let refusal = e.refusal();
                refuse(&client, &refusal, true, Answer::Socks(e.reply()));
                return record.refused(refusal);
            }
        }
        if let Err(refusal) = read_socks(budget, &client, &mut buf, "request") {
            refuse(&client, &refusal, false, Answer::Close);
            return record.refused(refusal);
        }
    };
    let leftover = buf.split_off(used.min(buf.len()));
    let _ = client.set_read_timeout(None);
    record.method = Some(request.command.record_name().to_owned());
    record.host = Some(request.host.to_authority());
    record.port = Some(request.port);
    if request.command != socks::Command::Connect {
        let refusal = Refusal::new(
            RefusalCode::UnsupportedRequest,
            format!(
                "{} {}:{} is not supported: the proxy only connects out (CONNECT)",
                request.command.record_name(),
                request.host.to_authority(),
                request.port
            ),
        );
        refuse(
            &client,
            &refusal,
            true,
            Answer::Socks(Reply::CommandNotSupported),
        );
        return record.refused(refusal);
    }

    let (upstream, addr) = match open_upstream(shared, &request.host, request.port, &mut record) {
        Ok(opened) => opened,
        Err(refusal) => {
            refuse(
                &client,
                &refusal,
                true,
                Answer::Socks(Reply::for_refusal(refusal.code)),
            );
            return record.refused(refusal);
        }
    };
    record.address = Some(addr.ip().to_string());
    let upstream = Stream::Tcp(upstream);
    if !shared.register(id, &upstream) {
        let _ = client.shutdown(Shutdown::Both);
        return record.finish(Verdict::Allowed, None, 0, 0);
    }
    if (&client).write_all(&Reply::Succeeded.message()).is_err() {
        return record.finish(Verdict::Allowed, None, 0, 0);
    }
    let (up, down) = relay::relay(client, upstream, &leftover);
    record.finish(Verdict::Allowed, None, up, down)
}

/// One bounded read of a SOCKS5 message; a close, a timeout or an error is a malformed request.
pub(crate) fn read_socks(
    budget: &ReadBudget,
    client: &Stream,
    buf: &mut Vec<u8>,
    what: &str,
) -> Result<(), Refusal> {
    let why = match budget.read_more(client, buf) {
        Ok(0) => format!("client closed in the middle of the SOCKS5 {what}"),
        Ok(_) => return Ok(()),
        Err(HeadError::TimedOut) => format!("no complete SOCKS5 {what} in time"),
        Err(HeadError::Io(e)) => format!("reading the SOCKS5 {what} failed: {e}"),
        Err(HeadError::ClosedEarly | HeadError::Truncated | HeadError::TooLarge) => {
            format!("bad SOCKS5 {what}")
        }
    };
    Err(Refusal::new(RefusalCode::MalformedRequest, why))
}

/// Relays one forwarded connection to `target` (a listed port of the host's loopback), byte
/// for byte; the client gets no protocol of Palisade's own, so a refusal is a plain close.
pub(crate) fn forward(
    shared: &Shared,
    id: u64,
    client: Stream,
    peer: &PeerInfo,
    target: SocketAddr,
) -> ConnectionRecord {
    let config = &shared.config;
    let route = Route::Forward(target);
    let record = RecordDraft::new(id, peer, route);
    if !(config.client_check)(peer) {
        let refusal = Refusal::new(
            RefusalCode::ClientNotAllowed,
            format!("client {peer} may not use this route"),
        );
        refuse(&client, &refusal, false, Answer::for_route(route));
        return record.refused(refusal);
    }
    let upstream = match TcpStream::connect_timeout(&target, config.connect_timeout) {
        Ok(upstream) => upstream,
        Err(e) => {
            let refusal = Refusal::new(
                RefusalCode::UpstreamUnreachable,
                format!("host loopback port {target}: {e}"),
            );
            refuse(&client, &refusal, false, Answer::for_route(route));
            return record.refused(refusal);
        }
    };
    let _ = upstream.set_nodelay(true);
    let mut record = record;
    record.address = Some(target.ip().to_string());
    let upstream = Stream::Tcp(upstream);
    if !shared.register(id, &upstream) {
        let _ = client.shutdown(Shutdown::Both);
        return record.finish(Verdict::Allowed, None, 0, 0);
    }
    let (up, down) = relay::relay(client, upstream, &[]);
    record.finish(Verdict::Allowed, None, up, down)
}

/// How a refusal is answered: in the client's protocol, or by a bare close.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer {
    /// An HTTP response (the filtering route's HTTP clients).
    Http,
    /// A SOCKS5 reply with this code.
    Socks(Reply),
    /// The SOCKS5 method selection "no acceptable methods".
    SocksNoMethod,
    /// Nothing: a forwarded port's client speaks its own protocol; a broken SOCKS5 greeting
    /// has no reply of its own.
    Close,
}

impl Answer {
    /// How connections of `route` are refused before their protocol is known.
    pub(crate) fn for_route(route: Route) -> Answer {
        match route {
            Route::Filter => Answer::Http,
            Route::Forward(_) => Answer::Close,
        }
    }
}

/// Answers a refusal and closes. With `drain`, unread client bytes are read (bounded) after the
/// answer, so the close does not turn into a reset that destroys the answer in flight.
pub(crate) fn refuse(client: &Stream, refusal: &Refusal, drain: bool, answer: Answer) {
    let response = match answer {
        Answer::Http => refusal.http_response(),
        Answer::Socks(reply) => reply.message().to_vec(),
        Answer::SocksNoMethod => socks::method_selection(false).to_vec(),
        Answer::Close => {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
    };
    let _ = client.set_write_timeout(Some(Duration::from_secs(5)));
    let mut writer = client;
    if writer.write_all(&response).is_err() {
        return;
    }
    let _ = client.shutdown(Shutdown::Write);
    if drain {
        let deadline = Instant::now() + Duration::from_millis(500);
        let _ = client.set_read_timeout(Some(Duration::from_millis(100)));
        let mut sink = [0_u8; 8192];
        let mut reader = client;
        let mut drained = 0_usize;
        while drained < 256 * 1024 && Instant::now() < deadline {
            match reader.read(&mut sink) {
                Ok(0) => break,
                Ok(n) => drained += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    }
}
