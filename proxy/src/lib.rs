//! Palisade's filtering proxy and network bridge: the only ways out of a sandbox with a network
//! namespace of its own (a domain allowlist, listed host loopback ports).
//!
//! Two halves around one Unix socket. On the host, [`server::Proxy`] accepts HTTP `CONNECT`,
//! absolute-form HTTP requests and SOCKS5 `CONNECT` ([`socks`]) on the same listener (the first
//! byte tells them apart), checks the requested name and port against the [`allowlist::Allowlist`],
//! resolves it itself with a [`resolve::Resolver`], refuses names whose addresses are loopback,
//! private, link-local or metadata ([`address`]) unless an IP-literal entry allows that address,
//! connects only to the addresses it checked, relays bytes, and records every connection
//! ([`record::ConnectionRecord`]). The same server also serves *forward* routes
//! ([`server::Route::Forward`]): a Unix socket whose every connection is relayed, byte for byte,
//! to one fixed address (a listed port of the host's loopback). Inside the sandbox, which has its
//! own network namespace and no route out, [`bridge`] listens on loopback and relays each
//! connection to the matching socket; its `connect` mode is ssh's `ProxyCommand` there.
//!
//! Key design decision: the crate knows nothing of policies, the engine or the launcher. Its input
//! is an already-decided allowlist and a listener; its output is a stream of records. The launcher
//! owns where the socket lives, who may connect (the client check), and what goes into the audit.
//! Everything here runs on loopback and Unix sockets, so it is tested end to end without a network.
//!
//! Blocking I/O and threads, not async: a sandbox makes few connections, and per-connection
//! threads keep each relay a straight-line loop with `splice(2)` in the middle.

pub mod address;
pub mod allowlist;
pub mod bridge;
mod connection;
pub mod host;
/// Public for its tests from outside (the `http_head` fuzz target): the head parser and the
/// upstream rewrite, with the limits they keep.
pub mod http;
pub mod record;
mod relay;
pub mod resolve;
pub mod server;
/// Public for its tests from outside (the `socks_request` fuzz target) and for the bridge's
/// `connect` mode: the SOCKS5 parsers, replies and client half.
pub mod socks;
mod sys;

pub use allowlist::{Allowlist, AllowlistError};
pub use record::{
    Approval, ApprovalAnswer, ConnectionRecord, Refusal, RefusalCode, RouteKind, Verdict,
};
pub use resolve::{HostsError, Resolver};
pub use server::{
    ApprovalRequest, Approver, ClientCheck, Listener, PeerInfo, Proxy, ProxyConfig, ProxyError,
    ProxyHandle, ProxyReport, Route,
};
