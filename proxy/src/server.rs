//! The filtering proxy: one thread per client connection, one request head (or SOCKS5 greeting
//! and request) per connection, one upstream per connection.
//!
//! Flow per connection: client check → first byte (`0x05`: SOCKS5, else HTTP) → bounded head or
//! SOCKS5 messages → parse → allowlist (name and port) → resolve and check every address →
//! connect (bounded) → `200 Connection established` (CONNECT), the rewritten head (absolute-form)
//! or the SOCKS5 success reply → raw relay until both directions end → one [`ConnectionRecord`].
//! Because the proxy never parses anything after the first request, whatever a client sends later
//! (a second pipelined request, a CONNECT inside the tunnel) can only reach the upstream it was
//! already allowed to reach.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::allowlist::Allowlist;
use crate::host::Host;
use crate::http::{self, HeadError, Partial, ReadBudget, Target};
use crate::record::{
    Approval, ApprovalAnswer, ConnectionRecord, Refusal, RefusalCode, RouteKind, Verdict,
};
use crate::relay::{self, Stream};
use crate::resolve::Resolver;
use crate::socks::{self, Parsed, Reply, SocksError};
use crate::sys;

/// Who connected to the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerInfo {
    /// A Unix-socket peer's `SO_PEERCRED`, in the proxy's PID and user namespaces.
    Unix { pid: i32, uid: u32, gid: u32 },
    /// A TCP peer's address.
    Tcp { addr: SocketAddr },
    /// The kernel did not say (credentials unavailable). Checks should refuse it.
    Unknown,
}

impl fmt::Display for PeerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerInfo::Unix { pid, uid, gid } => write!(f, "pid={pid} uid={uid} gid={gid}"),
            PeerInfo::Tcp { addr } => write!(f, "{addr}"),
            PeerInfo::Unknown => f.write_str("unknown"),
        }
    }
}

/// Decides whether a client may use the proxy at all.
pub type ClientCheck = Box<dyn Fn(&PeerInfo) -> bool + Send + Sync>;

/// Everything the proxy needs. Build with [`ProxyConfig::new`] and adjust fields.
pub struct ProxyConfig {
    pub allowlist: Allowlist,
    pub resolver: Resolver,
    /// Bound on one upstream connect attempt (per address).
    pub connect_timeout: Duration,
    /// Bound on any single silence while reading the request head.
    pub head_idle_timeout: Duration,
    /// Bound on reading the whole request head (slow-drip clients).
    pub head_total_timeout: Duration,
    /// Runs first on every connection; `false` answers 403 `client-not-allowed`.
    pub client_check: ClientCheck,
    /// Records kept; later ones are counted in `dropped_records` instead.
    pub max_records: usize,
    /// Connections in flight; more are answered 503 `too-many-connections`.
    pub max_connections: usize,
    /// Asked about a name and port outside the allowlist while the connection waits; `None`:
    /// such a connection is refused at once (`domain-not-allowed`).
    pub approver: Option<Arc<dyn Approver>>,
}

/// What an approver is asked about: a name (or address) and port outside the allowlist, the
/// protocol that asked for it, and the client as the proxy saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    pub host: String,
    pub port: u16,
    pub method: String,
    pub peer: String,
}

/// Answers for names outside the allowlist, one connection at a time, within a bound of its
/// own: an answer that does not come in time is a deny. The answer and how it came about (the
/// detail recorded with it).
pub trait Approver: Send + Sync {
    fn ask(&self, request: &ApprovalRequest) -> (ApprovalAnswer, String);
}

impl ProxyConfig {
    /// Defaults: 10 s connect, 10 s head idle, 30 s head total, 10 000 records, 256 connections,
    /// and a client check that admits every peer — set [`ProxyConfig::client_check`] when the
    /// listener is reachable by anything but the sandbox.
    pub fn new(allowlist: Allowlist, resolver: Resolver) -> ProxyConfig {
        ProxyConfig {
            allowlist,
            resolver,
            connect_timeout: Duration::from_secs(10),
            head_idle_timeout: Duration::from_secs(10),
            head_total_timeout: Duration::from_secs(30),
            client_check: Box::new(|_| true),
            max_records: 10_000,
            max_connections: 256,
            approver: None,
        }
    }
}

impl fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("allowlist", &self.allowlist)
            .field("resolver", &self.resolver)
            .field("connect_timeout", &self.connect_timeout)
            .field("head_idle_timeout", &self.head_idle_timeout)
            .field("head_total_timeout", &self.head_total_timeout)
            .field("max_records", &self.max_records)
            .field("max_connections", &self.max_connections)
            .field("approver", &self.approver.is_some())
            .finish_non_exhaustive()
    }
}

/// Where the proxy listens: a Unix socket (what the sandbox gets) or loopback TCP.
#[derive(Debug)]
pub enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl From<UnixListener> for Listener {
    fn from(l: UnixListener) -> Self {
        Listener::Unix(l)
    }
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Listener::Tcp(l)
    }
}

/// What one listener's connections are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The filtering proxy: one HTTP `CONNECT` or absolute-form request head, or one SOCKS5
    /// `CONNECT`, per connection, checked against the allowlist.
    Filter,
    /// Every byte to one fixed address, with no protocol of its own: a port of the host's
    /// loopback that the decision lists (`loopbackPorts`). The client check still applies.
    Forward(SocketAddr),
}

/// Why the proxy did not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot prepare the proxy listener: {0}")]
    Listener(io::Error),
    #[error("cannot start the proxy accept thread: {0}")]
    Thread(io::Error),
}

/// What a stopped proxy hands back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProxyReport {
    /// In accept order.
    pub records: Vec<ConnectionRecord>,
    /// Records not kept because `max_records` was reached.
    pub dropped_records: u64,
    /// Connections still in flight when the shutdown bound ran out (not in `records`).
    pub unfinished_connections: usize,
}

/// The proxy.
pub struct Proxy;

impl Proxy {
    /// Starts accepting on `listener` (already bound and listening) on a background thread.
    pub fn start(
        config: ProxyConfig,
        listener: impl Into<Listener>,
    ) -> Result<ProxyHandle, ProxyError> {
        Proxy::start_routes(config, vec![(listener.into(), Route::Filter)])
    }

    /// Starts accepting on every listener (already bound and listening) on one background
    /// thread; each connection is served by its listener's [`Route`]. `local_addr` is the
    /// first TCP listener's.
    pub fn start_routes(
        config: ProxyConfig,
        listeners: Vec<(Listener, Route)>,
    ) -> Result<ProxyHandle, ProxyError> {
        let mut local_addr = None;
        for (listener, _) in &listeners {
            match listener {
                Listener::Tcp(l) => {
                    l.set_nonblocking(true).map_err(ProxyError::Listener)?;
                    if local_addr.is_none() {
                        local_addr = Some(l.local_addr().map_err(ProxyError::Listener)?);
                    }
                }
                Listener::Unix(l) => l.set_nonblocking(true).map_err(ProxyError::Listener)?,
            }
        }
        let (wake_rx, wake_tx) = UnixStream::pair().map_err(ProxyError::Listener)?;
        let shared = Arc::new(Shared {
            config,
            stopping: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            log: Mutex::new(Log::default()),
            active: Mutex::new(BTreeMap::new()),
            idle: Condvar::new(),
            approved_for_run: Mutex::new(BTreeSet::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("palisade-proxy-accept".into())
            .spawn(move || accept_loop(&accept_shared, &listeners, &wake_rx))
            .map_err(ProxyError::Thread)?;
        Ok(ProxyHandle {
            shared,
            accept: Some(accept),
            wake: wake_tx,
            local_addr,
        })
    }
}

/// A running proxy. Dropping it stops accepting and closes every connection without waiting;
/// [`ProxyHandle::shutdown`] also waits (bounded) and returns the records.
pub struct ProxyHandle {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    wake: UnixStream,
    local_addr: Option<SocketAddr>,
}

impl ProxyHandle {
    /// The TCP listener's address (`None` for a Unix listener).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// A snapshot of the finished connections' records, in accept order.
    pub fn records(&self) -> Vec<ConnectionRecord> {
        let mut records = self.shared.log().records.clone();
        records.sort_by_key(|r| r.id);
        records
    }

    /// Records not kept because `max_records` was reached.
    pub fn dropped_records(&self) -> u64 {
        self.shared.log().dropped
    }

    /// Stops accepting, closes every client and upstream connection, waits up to `bound` for the
    /// connection threads to record and exit, and returns all records. The Unix socket file (if
    /// any) is the caller's to remove.
    pub fn shutdown(mut self, bound: Duration) -> ProxyReport {
        self.stop();
        let deadline = Instant::now() + bound;
        let mut active = self.shared.active();
        while !active.is_empty() {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            active = match self.shared.idle.wait_timeout(active, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        let unfinished_connections = active.len();
        drop(active);
        let log = self.shared.log();
        let mut records = log.records.clone();
        records.sort_by_key(|r| r.id);
        ProxyReport {
            records,
            dropped_records: log.dropped,
            unfinished_connections,
        }
    }

    fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = (&self.wake).write_all(b"x");
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for streams in self.shared.active().values() {
            for s in streams {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        if self.accept.is_some() {
            self.stop();
        }
    }
}

#[derive(Default)]
struct Log {
    records: Vec<ConnectionRecord>,
    dropped: u64,
}

struct Shared {
    config: ProxyConfig,
    stopping: AtomicBool,
    next_id: AtomicU64,
    log: Mutex<Log>,
    /// Clones of each live connection's streams, so shutdown can unblock them.
    active: Mutex<BTreeMap<u64, Vec<Stream>>>,
    idle: Condvar,
    /// Names and ports the approver allowed for the rest of the run (`run` answers).
    approved_for_run: Mutex<BTreeSet<(String, u16)>>,
}

impl Shared {
    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn active(&self) -> MutexGuard<'_, BTreeMap<u64, Vec<Stream>>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, record: ConnectionRecord) {
        let mut log = self.log();
        if log.records.len() < self.config.max_records {
            log.records.push(record);
        } else {
            log.dropped += 1;
        }
    }

    /// Adds a stream to connection `id`'s shutdown set; `false` if the proxy is stopping (the
    /// caller must give up: a shutdown sweep may already have run).
    fn register(&self, id: u64, stream: &Stream) -> bool {
        let mut active = self.active();
        if self.stopping.load(Ordering::SeqCst) {
            return false;
        }
        if let Ok(clone) = stream.try_clone() {
            active.entry(id).or_default().push(clone);
        }
        true
    }

    fn finish(&self, id: u64) {
        let mut active = self.active();
        active.remove(&id);
        if active.is_empty() {
            self.idle.notify_all();
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, listeners: &[(Listener, Route)], wake: &UnixStream) {
    loop {
        let mut fds: Vec<_> = listeners
            .iter()
            .map(|(listener, _)| match listener {
                Listener::Tcp(l) => l.as_fd(),
                Listener::Unix(l) => l.as_fd(),
            })
            .collect();
        fds.push(wake.as_fd());
        if sys::poll_readable(&fds, -1).is_err() {
            std::thread::sleep(Duration::from_millis(10));
        }
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        for (listener, route) in listeners {
            accept_ready(shared, listener, *route);
        }
    }
}

/// Accepts every connection waiting on `listener` (non-blocking) and admits each.
fn accept_ready(shared: &Arc<Shared>, listener: &Listener, route: Route) {
    loop {
        let accepted = match listener {
            Listener::Tcp(l) => l.accept().map(|(s, addr)| {
                let _ = s.set_nodelay(true);
                (Stream::Tcp(s), PeerInfo::Tcp { addr })
            }),
            Listener::Unix(l) => l.accept().map(|(s, _)| {
                let peer = match sys::peer_cred(s.as_fd()) {
                    Ok((pid, uid, gid)) => PeerInfo::Unix { pid, uid, gid },
                    Err(_) => PeerInfo::Unknown,
                };
                (Stream::Unix(s), peer)
            }),
        };
        match accepted {
            Ok((stream, peer)) => admit(shared, stream, peer, route),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                // EMFILE and friends: back off instead of spinning on a readable listener.
                std::thread::sleep(Duration::from_millis(10));
                return;
            }
        }
    }
}

/// Registers and starts one connection, or refuses it when too many are in flight.
fn admit(shared: &Arc<Shared>, stream: Stream, peer: PeerInfo, route: Route) {
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let _ = set_blocking(&stream);
    let record = RecordDraft::new(id, &peer, route);
    let in_flight = shared.active().len();
    if in_flight >= shared.config.max_connections {
        let refusal = Refusal::new(
            RefusalCode::TooManyConnections,
            format!("{in_flight} connections already in flight"),
        );
        refuse(&stream, &refusal, false, Answer::for_route(route));
        shared.push(record.refused(refusal));
        return;
    }
    if !shared.register(id, &stream) {
        return;
    }
    let conn_shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("palisade-proxy-conn".into())
        .spawn(move || {
            let record = match route {
                Route::Filter => serve_connection(&conn_shared, id, stream, &peer),
                Route::Forward(target) => Some(forward(&conn_shared, id, stream, &peer, target)),
            };
            if let Some(record) = record {
                conn_shared.push(record);
            }
            conn_shared.finish(id);
        });
    if let Err(e) = spawned {
        shared.finish(id);
        shared.push(record.refused(Refusal::new(
            RefusalCode::TooManyConnections,
            format!("cannot start a connection thread: {e}"),
        )));
    }
}

fn set_blocking(stream: &Stream) -> io::Result<()> {
    match stream {
        Stream::Tcp(s) => s.set_nonblocking(false),
        Stream::Unix(s) => s.set_nonblocking(false),
    }
}

/// A record being filled in as the connection progresses.
struct RecordDraft {
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
    fn new(id: u64, peer: &PeerInfo, route: Route) -> RecordDraft {
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

    fn finish(
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

    fn refused(self, refusal: Refusal) -> ConnectionRecord {
        self.finish(Verdict::Refused, Some(refusal), 0, 0)
    }
}

/// Handles one client connection; returns its record (`None` for a client that closed without
/// sending anything). The first byte says the protocol: `0x05` is SOCKS5 (no HTTP method starts
/// with it), anything else an HTTP head; both get the same allowlist, address checks and record.
fn serve_connection(
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
fn head_refusal(error: HeadError) -> Option<Refusal> {
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
fn open_upstream(
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
fn approve(shared: &Shared, host: &Host, port: u16, record: &RecordDraft) -> Option<Approval> {
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
fn serve_socks(
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
fn read_socks(
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
fn forward(
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
enum Answer {
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
    fn for_route(route: Route) -> Answer {
        match route {
            Route::Filter => Answer::Http,
            Route::Forward(_) => Answer::Close,
        }
    }
}

/// Answers a refusal and closes. With `drain`, unread client bytes are read (bounded) after the
/// answer, so the close does not turn into a reset that destroys the answer in flight.
fn refuse(client: &Stream, refusal: &Refusal, drain: bool, answer: Answer) {
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
