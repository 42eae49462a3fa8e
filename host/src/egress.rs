//! Filtered egress for `palisade run`: the host half of a domain allowlist, and the in-sandbox
//! bridge's entry point.
//!
//! When a decision's plan carries a `domainAllowlist`, the sandbox gets its own network
//! namespace (only loopback) and exactly one way out: the filtering proxy
//! ([`palisade_proxy::Proxy`]) listening on a Unix socket in a private directory of the host.
//! bwrap mounts that socket into the sandbox, and `palisade __proxy-bridge` (this binary, mounted
//! read-only next to it) listens on the sandbox's `127.0.0.1:3128`, forwarding each connection
//! to the socket before it execs the command. The command's proxy variables point at the bridge.
//!
//! Why the proxy admits only descendants of this process: the socket is reachable by path to any
//! process of the same user on the host. The supervisor runs one command tree at a time and is
//! its subreaper, so "a descendant of this process" is exactly "inside this run's sandbox".

use std::ffi::OsString;
use std::net::IpAddr;

use crate::launch::LaunchError;

#[cfg(target_os = "linux")]
pub use linux::{EgressSession, bridge_main};

/// Elsewhere filtered egress is never planned (no probe claims it); starting one refuses.
#[cfg(not(target_os = "linux"))]
pub enum EgressSession {}

#[cfg(not(target_os = "linux"))]
impl EgressSession {
    pub fn start(
        _run_id: &str,
        _allowlist: &[String],
        _overrides: &[(String, IpAddr)],
    ) -> Result<EgressSession, LaunchError> {
        Err(LaunchError::Unsupported(
            "filtered egress (allowedDomains) outside linux-bwrap".into(),
        ))
    }
    pub fn plan(&self) -> Result<palisade_shims::plan::EgressProxy, LaunchError> {
        match *self {}
    }
    pub fn finish(self) -> serde_json::Value {
        match self {}
    }
}

/// The bridge exists on Linux only.
#[cfg(not(target_os = "linux"))]
pub fn bridge_main(_port: u16, _socket: &std::path::Path, _command: &[OsString]) -> String {
    String::from("the egress bridge needs linux")
}

/// The sandbox-loopback port the bridge listens on (the sandbox's own network namespace, so it
/// cannot collide with anything on the host).
pub const BRIDGE_PORT: u16 = 3128;

/// The proxy variables the command gets: every common spelling, pointing at the bridge, with
/// the sandbox's own loopback excluded (`NO_PROXY`), so local test servers keep working.
pub fn proxy_env(port: u16) -> Vec<(OsString, OsString)> {
    let url = format!("http://127.0.0.1:{port}");
    let no_proxy = "localhost,127.0.0.1,::1";
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((OsString::from(name), OsString::from(&url)));
        env.push((
            OsString::from(name.to_ascii_lowercase()),
            OsString::from(&url),
        ));
    }
    env.push((OsString::from("NO_PROXY"), OsString::from(no_proxy)));
    env.push((OsString::from("no_proxy"), OsString::from(no_proxy)));
    env
}

/// Parses `--proxy-resolve NAME=ADDR`.
pub fn parse_resolve(text: &str) -> Result<(String, IpAddr), LaunchError> {
    let error = |reason: &str| LaunchError::Flag {
        what: "--proxy-resolve",
        value: text.to_owned(),
        reason: reason.to_owned(),
    };
    let (name, address) = text
        .split_once('=')
        .ok_or_else(|| error("expected NAME=ADDR"))?;
    let address = address
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .map_err(|_| error("ADDR is not an IP address"))?;
    if name.is_empty() {
        return Err(error("NAME is empty"));
    }
    Ok((name.to_ascii_lowercase(), address))
}

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::{CString, OsString};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;
    use std::time::Duration;

    use palisade_proxy::{Allowlist, PeerInfo, Proxy, ProxyConfig, ProxyHandle, Resolver};
    use palisade_shims::plan::EgressProxy;
    use serde::Serialize;

    use super::BRIDGE_PORT;
    use crate::launch::{LaunchError, RunTempDir};

    /// How long the proxy may take to finish its connections' records after the run.
    const SHUTDOWN_BOUND: Duration = Duration::from_secs(2);

    /// A running proxy for one run.
    pub struct EgressSession {
        handle: ProxyHandle,
        socket: PathBuf,
        allowlist: Vec<String>,
        overrides: Vec<(String, IpAddr)>,
        /// Removed (with the socket) when the session ends.
        _dir: RunTempDir,
    }

    /// What the audit outcome records about filtered egress.
    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct EgressRecord {
        pub allowlist: Vec<String>,
        pub bridge: String,
        /// `--proxy-resolve` overrides in force.
        pub resolve_overrides: Vec<String>,
        pub connections: Vec<palisade_proxy::ConnectionRecord>,
        pub dropped_records: u64,
        pub unfinished_connections: usize,
    }

    impl EgressSession {
        /// Starts the proxy for `allowlist` on a fresh socket in a private directory.
        pub fn start(
            run_id: &str,
            allowlist: &[String],
            overrides: &[(String, IpAddr)],
        ) -> Result<EgressSession, LaunchError> {
            let prepare = |what: &str, e: &dyn std::fmt::Display| {
                LaunchError::Prepare(format!("filtered egress: {what}: {e}"))
            };
            let parsed = Allowlist::parse(allowlist).map_err(|e| prepare("allowlist", &e))?;
            let mut resolver = Resolver::system();
            for (name, address) in overrides {
                resolver
                    .add_override(name, [*address])
                    .map_err(|e| prepare("--proxy-resolve", &e))?;
            }
            let dir = RunTempDir::create(&format!("{run_id}-egress"))
                .map_err(|e| prepare("private directory", &e))?;
            let socket = dir.path().join("proxy.sock");
            let listener = bind_long(&socket).map_err(|e| prepare("socket", &e))?;
            let mut config = ProxyConfig::new(parsed, resolver);
            let supervisor = std::process::id();
            config.client_check = Box::new(move |peer| match peer {
                PeerInfo::Unix { pid, .. } => is_descendant(*pid, supervisor),
                PeerInfo::Tcp { .. } | PeerInfo::Unknown => false,
            });
            let handle = Proxy::start(config, listener).map_err(|e| prepare("proxy", &e))?;
            Ok(EgressSession {
                handle,
                socket,
                allowlist: allowlist.to_vec(),
                overrides: overrides.to_vec(),
                _dir: dir,
            })
        }

        /// The shim's side of the session: the socket, and this binary as the bridge.
        pub fn plan(&self) -> Result<EgressProxy, LaunchError> {
            let bridge_program = std::env::current_exe().map_err(|e| {
                LaunchError::Prepare(format!("filtered egress: cannot find this binary: {e}"))
            })?;
            Ok(EgressProxy {
                socket: self.socket.clone(),
                bridge_program,
                bridge_port: BRIDGE_PORT,
            })
        }

        /// Stops the proxy and returns its account of every connection, for the audit outcome.
        pub fn finish(self) -> serde_json::Value {
            let report = self.handle.shutdown(SHUTDOWN_BOUND);
            let record = EgressRecord {
                allowlist: self.allowlist,
                bridge: SocketAddr::from((Ipv4Addr::LOCALHOST, BRIDGE_PORT)).to_string(),
                resolve_overrides: self
                    .overrides
                    .iter()
                    .map(|(name, address)| format!("{name}={address}"))
                    .collect(),
                connections: report.records,
                dropped_records: report.dropped_records,
                unfinished_connections: report.unfinished_connections,
            };
            serde_json::to_value(record).unwrap_or_default()
        }
    }

    /// Binds a Unix socket at `path` even when it is longer than `sun_path` (108 bytes; a deep
    /// `XDG_RUNTIME_DIR` or temp dir reaches that): through `/proc/self/fd/N/<name>` of the
    /// directory, which the kernel resolves to the same place.
    fn bind_long(path: &std::path::Path) -> std::io::Result<UnixListener> {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(std::io::Error::other("socket path has no directory"));
        };
        let dir = std::fs::File::open(dir)?;
        let short = PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&dir)
        ))
        .join(name);
        UnixListener::bind(short)
    }

    /// Whether `pid` is `ancestor` or one of its descendants, by walking parent ids in `/proc`.
    /// A process that exits mid-walk is not admitted.
    pub(super) fn is_descendant(pid: i32, ancestor: u32) -> bool {
        let mut current = pid;
        for _ in 0..128 {
            if current <= 1 {
                return false;
            }
            if u32::try_from(current) == Ok(ancestor) {
                return true;
            }
            match parent_of(current) {
                Some(parent) => current = parent,
                None => return false,
            }
        }
        false
    }

    /// The parent pid from `/proc/<pid>/stat` (the field after the command name's last `)`).
    fn parent_of(pid: i32) -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after = stat.get(stat.rfind(')')? + 1..)?;
        let mut fields = after.split_whitespace();
        let _state = fields.next()?;
        fields.next()?.parse().ok()
    }

    /// `palisade __proxy-bridge --port N --socket PATH -- CMD...`: runs inside the sandbox. Binds
    /// the bridge on the sandbox's loopback, detaches it, and execs the command (already resolved
    /// to an absolute path by the launcher) with this process's environment. Returns only on
    /// failure, with a message.
    pub fn bridge_main(port: u16, socket: &std::path::Path, command: &[OsString]) -> String {
        let Some(program) = command.first() else {
            return String::from("no command after `--`");
        };
        let to_c = |bytes: &[u8]| CString::new(bytes.to_vec()).ok();
        let Some(program_c) = to_c(program.as_bytes()) else {
            return String::from("the command contains a NUL byte");
        };
        let argv: Option<Vec<CString>> = command.iter().map(|a| to_c(a.as_bytes())).collect();
        let env: Option<Vec<CString>> = std::env::vars_os()
            .map(|(name, value)| {
                let mut pair = name.as_bytes().to_vec();
                pair.push(b'=');
                pair.extend_from_slice(value.as_bytes());
                to_c(&pair)
            })
            .collect();
        let (Some(argv), Some(env)) = (argv, env) else {
            return String::from("an argument or variable contains a NUL byte");
        };
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let error = palisade_proxy::bridge::start_detached_then_exec(
            listen, socket, &program_c, &argv, &env,
        );
        format!(
            "cannot start `{}` behind the egress bridge: {error}",
            program.to_string_lossy()
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    #[test]
    fn resolve_flags_parse_and_fail_loudly() {
        assert_eq!(
            parse_resolve("Allowed.Test=127.0.0.2").unwrap(),
            ("allowed.test".to_owned(), "127.0.0.2".parse().unwrap())
        );
        assert_eq!(
            parse_resolve("v6.test=[::1]").unwrap().1,
            "::1".parse::<IpAddr>().unwrap()
        );
        for bad in ["x", "=127.0.0.1", "a.test=localhost", "a.test=999.1.1.1"] {
            assert!(parse_resolve(bad).is_err(), "{bad}");
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn descendants_are_recognised() {
        use super::linux::is_descendant;
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        assert!(is_descendant(pid, me));
        assert!(!is_descendant(1, me));
        assert!(!is_descendant(i32::try_from(me).unwrap(), 1));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_descendant(pid, me), "a reaped child is not admitted");
    }

    #[test]
    fn proxy_env_covers_every_spelling() {
        let env = proxy_env(3128);
        let names: Vec<String> = env
            .iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect();
        for name in ["HTTP_PROXY", "https_proxy", "ALL_PROXY", "no_proxy"] {
            assert!(names.contains(&name.to_owned()), "{name}");
        }
    }
}
