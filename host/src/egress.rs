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
//!
//! Under docker the same holds with two substitutions ([`RunSite::Container`]): the container's
//! processes are the daemon's children, not ours, so the proxy admits exactly the processes in
//! the run's container's cgroup; and the image need not be able to run the host's `palisade`,
//! so the bridge is the statically linked `palisade-bridge` the runtime profile file names.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;

use crate::launch::LaunchError;

#[cfg(target_os = "linux")]
pub use linux::{EgressSession, bridge_main};

/// Where the run's processes live: who may use the proxy, and which bridge program runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunSite {
    /// bwrap: this supervisor's descendants; the bridge is this `palisade` binary.
    Sandbox,
    /// docker: the container `name` on the daemon at `socket`; the bridge is `bridge`, the
    /// static `palisade-bridge`.
    Container {
        socket: PathBuf,
        name: String,
        bridge: PathBuf,
    },
}

/// Elsewhere filtered egress is never planned (no probe claims it); starting one refuses.
#[cfg(not(target_os = "linux"))]
pub enum EgressSession {}

#[cfg(not(target_os = "linux"))]
impl EgressSession {
    pub fn start(
        _run_id: &str,
        _allowlist: &[String],
        _overrides: &[(String, IpAddr)],
        _site: RunSite,
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

/// Where the proxy's socket and the bridge program appear inside the sandbox: on its private
/// `/run` tmpfs, so nothing of the host's is covered.
pub const SANDBOX_SOCKET: &str = "/run/palisade-egress/proxy.sock";
/// See [`SANDBOX_SOCKET`].
pub const SANDBOX_BRIDGE: &str = "/run/palisade-egress/palisade";

/// The shims' view of filtered egress: `socket` (the proxy's, on the host) and `bridge` (the
/// program, on the host) bound read-only at [`SANDBOX_SOCKET`] and [`SANDBOX_BRIDGE`], and the
/// bridge's argv, which the command's argv follows.
#[cfg(target_os = "linux")]
pub fn egress_proxy(socket: PathBuf, bridge: PathBuf) -> palisade_shims::plan::EgressProxy {
    use palisade_shims::plan::{EgressProxy, ReadOnlyBind};
    EgressProxy {
        binds: vec![
            ReadOnlyBind {
                source: socket,
                target: PathBuf::from(SANDBOX_SOCKET),
            },
            ReadOnlyBind {
                source: bridge,
                target: PathBuf::from(SANDBOX_BRIDGE),
            },
        ],
        bridge_argv: [
            SANDBOX_BRIDGE,
            palisade_proxy::bridge::SUBCOMMAND,
            "--port",
            &BRIDGE_PORT.to_string(),
            "--socket",
            SANDBOX_SOCKET,
            "--",
        ]
        .map(OsString::from)
        .to_vec(),
    }
}

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
    use std::ffi::OsString;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    use palisade_proxy::{Allowlist, PeerInfo, Proxy, ProxyConfig, ProxyHandle, Resolver};
    use palisade_shims::plan::EgressProxy;
    use serde::Serialize;

    use super::{BRIDGE_PORT, RunSite};
    use crate::launch::{LaunchError, RunTempDir};

    /// How long the proxy may take to finish its connections' records after the run.
    const SHUTDOWN_BOUND: Duration = Duration::from_secs(2);

    /// A running proxy for one run.
    pub struct EgressSession {
        handle: ProxyHandle,
        socket: PathBuf,
        allowlist: Vec<String>,
        overrides: Vec<(String, IpAddr)>,
        site: RunSite,
        /// Removed (with the socket) when the session ends.
        _dir: RunTempDir,
    }

    /// What the audit outcome records about filtered egress.
    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct EgressRecord {
        pub allowlist: Vec<String>,
        pub bridge: String,
        /// The bridge program that ran in the sandbox.
        pub bridge_program: String,
        /// Whom the proxy admitted: the supervisor's descendants, or one container's cgroup.
        pub admitted: String,
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
            site: RunSite,
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
            config.client_check = match &site {
                RunSite::Sandbox => {
                    let supervisor = std::process::id();
                    Box::new(move |peer| match peer {
                        PeerInfo::Unix { pid, .. } => is_descendant(*pid, supervisor),
                        PeerInfo::Tcp { .. } | PeerInfo::Unknown => false,
                    })
                }
                RunSite::Container { socket, name, .. } => {
                    let container = ContainerCgroup {
                        socket: socket.clone(),
                        name: name.clone(),
                        known: OnceLock::new(),
                    };
                    Box::new(move |peer| match peer {
                        PeerInfo::Unix { pid, .. } => container.admits(*pid),
                        PeerInfo::Tcp { .. } | PeerInfo::Unknown => false,
                    })
                }
            };
            let handle = Proxy::start(config, listener).map_err(|e| prepare("proxy", &e))?;
            Ok(EgressSession {
                handle,
                socket,
                allowlist: allowlist.to_vec(),
                overrides: overrides.to_vec(),
                site,
                _dir: dir,
            })
        }

        /// The shim's side of the session: the socket and the bridge program (this binary, or
        /// the static bridge for a container) bound into the sandbox's private `/run`, and the
        /// bridge's argv there.
        pub fn plan(&self) -> Result<EgressProxy, LaunchError> {
            let bridge_program = match &self.site {
                RunSite::Sandbox => std::env::current_exe().map_err(|e| {
                    LaunchError::Prepare(format!("filtered egress: cannot find this binary: {e}"))
                })?,
                RunSite::Container { bridge, .. } => bridge.clone(),
            };
            Ok(super::egress_proxy(self.socket.clone(), bridge_program))
        }

        /// Stops the proxy and returns its account of every connection, for the audit outcome.
        pub fn finish(self) -> serde_json::Value {
            let report = self.handle.shutdown(SHUTDOWN_BOUND);
            let (bridge_program, admitted) = match &self.site {
                RunSite::Sandbox => (
                    std::env::current_exe()
                        .map(|exe| exe.display().to_string())
                        .unwrap_or_default(),
                    format!("descendants of the supervisor (pid {})", std::process::id()),
                ),
                RunSite::Container { name, bridge, .. } => (
                    bridge.display().to_string(),
                    format!("processes in container `{name}`'s cgroup"),
                ),
            };
            let record = EgressRecord {
                allowlist: self.allowlist,
                bridge: SocketAddr::from((Ipv4Addr::LOCALHOST, BRIDGE_PORT)).to_string(),
                bridge_program,
                admitted,
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

    /// Admits the processes of one container: those whose cgroup is the container's. The
    /// container exists only once the run started, so its cgroup is looked up (over the daemon's
    /// API, by the run's container name, which nothing in the run can choose) on the first
    /// connection and kept; a failed lookup admits nobody and is retried next time.
    struct ContainerCgroup {
        socket: PathBuf,
        name: String,
        known: OnceLock<String>,
    }

    impl ContainerCgroup {
        fn admits(&self, pid: i32) -> bool {
            let Some(container) = self.cgroup() else {
                return false;
            };
            cgroup_of(pid).is_some_and(|cgroup| cgroup == *container)
        }

        fn cgroup(&self) -> Option<&String> {
            if let Some(known) = self.known.get() {
                return Some(known);
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            let (id, pid) =
                crate::probe::docker::container_process(&self.socket, &self.name, deadline)?;
            let cgroup = cgroup_of(pid)?;
            // The container's own cgroup names its full ID (`/docker/<id>` or
            // `…/docker-<id>.scope`); anything else (a pid reused since, the host's root) is
            // not the container's.
            if !container_owns(&cgroup, &id) {
                return None;
            }
            Some(self.known.get_or_init(|| cgroup))
        }
    }

    /// `/proc/<pid>/cgroup`, as this (the host's) cgroup namespace sees it.
    fn cgroup_of(pid: i32) -> Option<String> {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()
    }

    /// Whether every line of a `/proc/<pid>/cgroup` names the container with ID `id` (64 hex
    /// digits): the path's last component contains the ID.
    pub(super) fn container_owns(cgroup: &str, id: &str) -> bool {
        id.len() == 64
            && id.bytes().all(|b| b.is_ascii_hexdigit())
            && cgroup.lines().count() > 0
            && cgroup.lines().all(|line| {
                line.rsplit_once(':')
                    .and_then(|(_, path)| path.rsplit('/').next())
                    .is_some_and(|leaf| leaf.contains(id))
            })
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
        palisade_proxy::bridge::exec_main(port, socket, command).message
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
    #[cfg(target_os = "linux")]
    fn only_the_containers_own_cgroup_is_admitted() {
        use super::linux::container_owns;
        let id = "0123456789abcdef".repeat(4);
        assert!(container_owns(&format!("0::/docker/{id}\n"), &id));
        assert!(container_owns(
            &format!("0::/system.slice/docker-{id}.scope\n"),
            &id
        ));
        assert!(container_owns(
            &format!("12:pids:/docker/{id}\n1:name=systemd:/docker/{id}\n"),
            &id
        ));
        for other in [
            "0::/\n".to_owned(),
            "0::/user.slice/user-0.slice/session-1.scope\n".to_owned(),
            format!("0::/docker/{id}/child\n"),
            format!("0::/docker/{id}\n1:cpu:/\n"),
            String::new(),
        ] {
            assert!(!container_owns(&other, &id), "{other:?}");
        }
        assert!(
            !container_owns("0::/docker/\n", ""),
            "an empty id matches nothing"
        );
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
