//! The filtering proxy: one thread per client connection, one request head (or SOCKS5 greeting
//! and request) per connection, one upstream per connection.
//!
//! Flow per connection: client check → first byte (`0x05`: SOCKS5, else HTTP) → bounded head or
//! SOCKS5 messages → parse → allowlist (name and port) → resolve and check every address →
//! connect (bounded) → `200 Connection established` (CONNECT), the rewritten head (absolute-form)
//! or the SOCKS5 success reply → raw relay until both directions end → one [`ConnectionRecord`].
//! Because the proxy never parses anything after the first request, whatever a client sends later
//! (a second pipelined request, a CONNECT inside the tunnel) can only reach the upstream it was
//! already allowed to reach. This module configures, starts and stops the proxy and accepts
//! connections; `crate::connection` serves each one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::allowlist::Allowlist;
use crate::connection::{Answer, RecordDraft, forward, refuse, serve_connection};
use crate::record::{ApprovalAnswer, ConnectionRecord, Refusal, RefusalCode};
use crate::relay::Stream;
use crate::resolve::Resolver;
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
pub(crate) struct Log {
    records: Vec<ConnectionRecord>,
    dropped: u64,
}

pub(crate) struct Shared {
    pub(crate) config: ProxyConfig,
    pub(crate) stopping: AtomicBool,
    next_id: AtomicU64,
    log: Mutex<Log>,
    /// Clones of each live connection's streams, so shutdown can unblock them.
    active: Mutex<BTreeMap<u64, Vec<Stream>>>,
    idle: Condvar,
    /// Names and ports the approver allowed for the rest of the run (`run` answers).
    pub(crate) approved_for_run: Mutex<BTreeSet<(String, u16)>>,
}

impl Shared {
    pub(crate) fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn active(&self) -> MutexGuard<'_, BTreeMap<u64, Vec<Stream>>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn push(&self, record: ConnectionRecord) {
        let mut log = self.log();
        if log.records.len() < self.config.max_records {
            log.records.push(record);
        } else {
            log.dropped += 1;
        }
    }

    /// Adds a stream to connection `id`'s shutdown set; `false` if the proxy is stopping (the
    /// caller must give up: a shutdown sweep may already have run).
    pub(crate) fn register(&self, id: u64, stream: &Stream) -> bool {
        let mut active = self.active();
        if self.stopping.load(Ordering::SeqCst) {
            return false;
        }
        if let Ok(clone) = stream.try_clone() {
            active.entry(id).or_default().push(clone);
        }
        true
    }

    pub(crate) fn finish(&self, id: u64) {
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
