//! The network bridge for `palisade run`: the host half of every way a sandbox with a network
//! namespace of its own reaches the host, and the in-sandbox bridge's entry point.
//!
//! Two kinds of route, decided by the engine and applied here:
//! - **Filtered egress** (`allowedDomains`): the filtering proxy ([`palisade_proxy::Proxy`]) on a
//!   Unix socket; the bridge listens on the sandbox's `127.0.0.1:3128` and the command's proxy
//!   variables point at it.
//! - **Listed host loopback ports** (`loopback-only` with `loopbackPorts`): for each port, one
//!   Unix socket per address family; the bridge listens on the sandbox's `127.0.0.1:P` and
//!   `[::1]:P`, and the host side connects to the host's `127.0.0.1:P` or `[::1]:P`, byte for
//!   byte. Nothing else of the host is reachable: not its other ports, not its other
//!   addresses, not its Unix sockets.
//!
//! Why Palisade's own bridge and not `pasta` (passt): the sandbox already has a bridge for
//! filtered egress, so forwarded ports reuse its binary, its bind mounts and its admission check,
//! add no package to install, and work the same under bwrap and Docker (where the static
//! `palisade-bridge` runs in the image). `pasta` would forward every port it is told to at the
//! namespace level, but it is another process to supervise and another dependency whose absence
//! would have to be probed; the forwarding needed here is a few lines over the proxy's relay.
//!
//! The sockets live in a private directory of the host (mode 0700) and are bind-mounted
//! read-only into the sandbox's private `/run`. Why every route admits only this run's
//! processes: a socket is reachable by path to any process of the same user on the host, and
//! another run's sandbox must not borrow this one's routes. The supervisor runs one command tree
//! at a time and is its subreaper, so "a descendant of this process" is exactly "inside this
//! run's sandbox". Under docker the container's processes are the daemon's children, not ours,
//! so a route admits exactly the processes in the run's container's cgroup
//! ([`RunSite::Container`]), and the bridge is the statically linked `palisade-bridge` the
//! runtime profile names (the image need not be able to run the host's `palisade`).

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;

use palisade_engine::output::PlanNetwork;

use crate::launch::LaunchError;

#[cfg(target_os = "linux")]
pub use linux::{BridgeRecord, BridgeSession, bridge_main, bridge_plan};

/// The bridge's account in the outcome: there is no bridge outside Linux, so none is ever made
/// (a struct, not an empty enum: code after a session's `finish` stays reachable).
#[cfg(not(target_os = "linux"))]
#[derive(Debug, serde::Serialize)]
pub struct BridgeRecord;

/// Where the run's processes live: who may use the routes, and which bridge program runs.
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

/// What the bridge carries for one run: the filtering proxy's allowlist (with the launcher's
/// `--proxy-resolve` overrides), the listed host loopback ports, or both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    /// The proxy's allowlist; `None`: no filtering proxy.
    pub allowlist: Option<Vec<String>>,
    pub overrides: Vec<(String, IpAddr)>,
    /// The host loopback ports forwarded, each on 127.0.0.1 and ::1.
    pub host_ports: Vec<u16>,
}

/// The routes a plan's network needs the bridge for; `None`: no bridge (no route leads out of
/// the sandbox, or the network has no namespace of its own).
pub fn routes_for(network: &PlanNetwork, overrides: &[(String, IpAddr)]) -> Option<Routes> {
    match network {
        PlanNetwork::Filtered {
            allowlist,
            host_ports,
        } => Some(Routes {
            allowlist: Some(allowlist.clone()),
            overrides: overrides.to_vec(),
            host_ports: host_ports.clone(),
        }),
        PlanNetwork::LoopbackOnly { host_ports } if !host_ports.is_empty() => Some(Routes {
            allowlist: None,
            overrides: Vec::new(),
            host_ports: host_ports.clone(),
        }),
        PlanNetwork::None
        | PlanNetwork::LoopbackOnly { .. }
        | PlanNetwork::HostLoopback
        | PlanNetwork::AllowOutbound => None,
    }
}

/// Elsewhere a bridge is never planned (no probe claims a network namespace); starting one
/// refuses.
#[cfg(not(target_os = "linux"))]
pub enum BridgeSession {}

#[cfg(not(target_os = "linux"))]
impl BridgeSession {
    pub fn start(
        _run_id: &str,
        _routes: Routes,
        _site: RunSite,
        _approver: Option<crate::approve::CommandApprover>,
    ) -> Result<BridgeSession, LaunchError> {
        Err(LaunchError::Unsupported(
            "a network bridge (filtered egress, forwarded loopback ports) outside Linux".into(),
        ))
    }
    pub fn plan(&self) -> Result<palisade_shims::plan::Bridge, LaunchError> {
        match *self {}
    }
    pub fn finish(self) -> (BridgeRecord, Vec<crate::denials::Denial>) {
        match self {}
    }
}

/// The bridge exists on Linux only.
#[cfg(not(target_os = "linux"))]
pub fn bridge_main(_args: &[OsString]) -> String {
    String::from("the network bridge needs linux")
}

/// The sandbox-loopback port the bridge listens on for the proxy (the sandbox's own network
/// namespace, so it cannot collide with anything on the host).
pub const PROXY_PORT: u16 = 3128;

/// Where the bridge's sockets and program appear inside the sandbox: on its private `/run`
/// tmpfs, so nothing of the host's is covered.
pub const SANDBOX_DIR: &str = "/run/palisade-bridge";

/// The bridge program's path inside the sandbox (this `palisade` under bwrap, the static
/// `palisade-bridge` under docker), beside its sockets.
pub fn bridge_program_inside() -> PathBuf {
    PathBuf::from(SANDBOX_DIR).join("palisade")
}

/// The proxy variables the command gets: every common spelling, pointing at the bridge, with
/// the sandbox's own loopback excluded (`NO_PROXY`), so local test servers and forwarded host
/// ports keep working. `ALL_PROXY` names SOCKS5 with remote resolution (`socks5h`): the proxy
/// tells the protocols apart on the one port, and a client that reads `ALL_PROXY` (curl for a
/// scheme without its own variable, `git` over `ssh` via `ProxyCommand` tools) must not resolve
/// names itself — the sandbox has no DNS.
pub fn proxy_env(port: u16) -> Vec<(OsString, OsString)> {
    let url = format!("http://127.0.0.1:{port}");
    let socks = format!("socks5h://127.0.0.1:{port}");
    let no_proxy = "localhost,127.0.0.1,::1";
    let mut env = Vec::new();
    for (name, value) in [
        ("HTTP_PROXY", &url),
        ("HTTPS_PROXY", &url),
        ("ALL_PROXY", &socks),
    ] {
        env.push((OsString::from(name), OsString::from(value)));
        env.push((
            OsString::from(name.to_ascii_lowercase()),
            OsString::from(value),
        ));
    }
    env.push((OsString::from("NO_PROXY"), OsString::from(no_proxy)));
    env.push((OsString::from("no_proxy"), OsString::from(no_proxy)));
    env
}

/// `GIT_SSH_COMMAND` for filtered egress: `ssh` whose every connection goes through the proxy
/// (SOCKS5, by name) via the bridge's `connect` mode, so `git clone git@host:…` reaches an
/// allowed `host:22` (or the entry's port) with no configuration of the user's. Everything else
/// of ssh (keys, `known_hosts`, `~/.ssh/config`) stays the user's.
pub fn git_ssh_command(port: u16) -> OsString {
    let mut command = OsString::from("ssh -o ProxyCommand='");
    command.push(bridge_program_inside());
    command.push(format!(
        " {} {} --via 127.0.0.1:{port} %h %p'",
        BRIDGE_SUBCOMMAND, BRIDGE_CONNECT
    ));
    command
}

/// The command's environment for filtered egress, from the one the environment allowlist let
/// through: the proxy is the only way out, so every proxy variable (any case) points at the
/// bridge; and git over ssh goes through the proxy too, unless the policy passed the user's own
/// ssh command through (`GIT_SSH_COMMAND`, or `GIT_SSH`, which git reads only without it): that
/// is the user's choice, and pointing it at the proxy is theirs. Sorted by name.
pub fn apply_filtered_env(env: &mut Vec<(OsString, OsString)>) {
    env.retain(|(name, _)| !is_proxy_variable(name));
    env.extend(proxy_env(PROXY_PORT));
    if !env
        .iter()
        .any(|(name, _)| name == "GIT_SSH_COMMAND" || name == "GIT_SSH")
    {
        env.push((
            OsString::from("GIT_SSH_COMMAND"),
            git_ssh_command(PROXY_PORT),
        ));
    }
    env.sort();
}

/// Proxy variables (any case) the launcher sets itself for filtered egress.
fn is_proxy_variable(name: &std::ffi::OsStr) -> bool {
    let upper = name.to_string_lossy().to_ascii_uppercase();
    matches!(
        upper.as_str(),
        "HTTP_PROXY" | "HTTPS_PROXY" | "ALL_PROXY" | "NO_PROXY" | "FTP_PROXY"
    )
}

/// The bridge's subcommand and its `connect` mode, as `palisade_proxy::bridge` spells them (the
/// proxy crate is Linux-only; the spelling is checked against it in the tests).
const BRIDGE_SUBCOMMAND: &str = "__bridge";
const BRIDGE_CONNECT: &str = "connect";

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
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    use palisade_proxy::bridge::BridgeRoute;
    use palisade_proxy::{
        Allowlist, Listener, PeerInfo, Proxy, ProxyConfig, ProxyHandle, Resolver, Route, RouteKind,
    };
    use palisade_shims::plan::{Bridge, ReadOnlyBind};
    use serde::Serialize;

    use super::{PROXY_PORT, Routes, RunSite};
    use crate::launch::{LaunchError, RunTempDir};

    /// How long the proxy may take to finish its connections' records after the run.
    const SHUTDOWN_BOUND: Duration = Duration::from_secs(2);

    /// The routes of one run, served by one proxy instance.
    pub struct BridgeSession {
        handle: ProxyHandle,
        routes: Routes,
        site: RunSite,
        /// `--approve-with`'s approver, when the proxy asks one.
        approver: Option<std::sync::Arc<crate::approve::CommandApprover>>,
        /// Holds the sockets; removed with them when the session ends.
        dir: RunTempDir,
    }

    /// One route: its socket's file name in the private directory, the bridge's route to it
    /// (listening address, the socket's path inside the sandbox), and the host side's route.
    fn route_table(routes: &Routes) -> Vec<(String, BridgeRoute, Route)> {
        let mut table = Vec::new();
        let mut add = |name: String, listen: SocketAddr, route: Route| {
            let kind = match route {
                Route::Filter => RouteKind::Proxy,
                Route::Forward(_) => RouteKind::LoopbackPort,
            };
            let socket = PathBuf::from(super::SANDBOX_DIR).join(&name);
            table.push((
                name,
                BridgeRoute {
                    listen,
                    socket,
                    kind,
                },
                route,
            ));
        };
        if routes.allowlist.is_some() {
            add(
                "proxy.sock".to_owned(),
                SocketAddr::from((Ipv4Addr::LOCALHOST, PROXY_PORT)),
                Route::Filter,
            );
        }
        for port in &routes.host_ports {
            for (family, ip) in [
                ("v4", IpAddr::from(Ipv4Addr::LOCALHOST)),
                ("v6", IpAddr::from(Ipv6Addr::LOCALHOST)),
            ] {
                let address = SocketAddr::new(ip, *port);
                add(
                    format!("loopback-{family}-{port}.sock"),
                    address,
                    Route::Forward(address),
                );
            }
        }
        table
    }

    /// The shims' bridge for `routes` whose sockets are in `host_dir`: every socket and the
    /// bridge `program` (this binary, or the static bridge for a container) bound read-only
    /// into the sandbox's private `/run`, and the bridge's argv there.
    pub fn bridge_plan(host_dir: &Path, routes: &Routes, program: PathBuf) -> Bridge {
        let inside = super::bridge_program_inside();
        let table = route_table(routes);
        let mut binds: Vec<ReadOnlyBind> = table
            .iter()
            .map(|(name, route, _)| ReadOnlyBind {
                source: host_dir.join(name),
                target: route.socket.clone(),
            })
            .collect();
        binds.push(ReadOnlyBind {
            source: program,
            target: inside.clone(),
        });
        let mut argv = vec![
            inside.into_os_string(),
            OsString::from(palisade_proxy::bridge::SUBCOMMAND),
        ];
        for (_, route, _) in &table {
            argv.extend(route.to_args());
        }
        argv.push(OsString::from("--"));
        Bridge { binds, argv }
    }

    /// What the audit outcome records about the run's network bridge.
    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct BridgeRecord {
        /// The filtering proxy's allowlist (absent: no filtered egress).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub allowlist: Option<Vec<String>>,
        /// The host loopback ports forwarded.
        pub host_ports: Vec<u16>,
        /// Where the bridge listened in the sandbox: `proxy 127.0.0.1:3128`,
        /// `forward 127.0.0.1:8080`, …
        pub listeners: Vec<String>,
        /// The bridge program that ran in the sandbox.
        pub bridge_program: String,
        /// Whom the routes admitted: the supervisor's descendants, or one container's cgroup.
        pub admitted: String,
        /// `--proxy-resolve` overrides in force.
        pub resolve_overrides: Vec<String>,
        pub connections: Vec<palisade_proxy::ConnectionRecord>,
        pub dropped_records: u64,
        pub unfinished_connections: usize,
        /// The approver's command (`--approve-with`), when the proxy asked one about names
        /// outside the allowlist.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub approver: Option<String>,
        /// Every answer that decided a connection, in connection order (absent without an
        /// approver).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub approvals: Option<Vec<ApprovalEvent>>,
    }

    /// One connection the approver decided: the connection's id in `connections`, the name and
    /// port, and the answer.
    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ApprovalEvent {
        pub connection: u64,
        pub host: String,
        pub port: u16,
        #[serde(flatten)]
        pub approval: palisade_proxy::Approval,
    }

    impl BridgeSession {
        /// Binds every route's socket in a fresh private directory and starts serving them.
        pub fn start(
            run_id: &str,
            routes: Routes,
            site: RunSite,
            approver: Option<crate::approve::CommandApprover>,
        ) -> Result<BridgeSession, LaunchError> {
            let prepare = |what: &str, e: &dyn std::fmt::Display| {
                LaunchError::Prepare(format!("network bridge: {what}: {e}"))
            };
            let parsed = Allowlist::parse(routes.allowlist.as_deref().unwrap_or_default())
                .map_err(|e| prepare("allowlist", &e))?;
            let mut resolver = Resolver::system();
            for (name, address) in &routes.overrides {
                resolver
                    .add_override(name, [*address])
                    .map_err(|e| prepare("--proxy-resolve", &e))?;
            }
            let dir = RunTempDir::create(&format!("{run_id}-bridge"))
                .map_err(|e| prepare("private directory", &e))?;
            let mut listeners = Vec::new();
            for (name, _, route) in route_table(&routes) {
                let listener = palisade_shims::unix_socket::bind_listener(&dir.path().join(name))
                    .map_err(|e| prepare("socket", &e))?;
                listeners.push((Listener::Unix(listener), route));
            }
            let mut config = ProxyConfig::new(parsed, resolver);
            let approver = approver.map(std::sync::Arc::new);
            config.approver = approver
                .clone()
                .map(|a| a as std::sync::Arc<dyn palisade_proxy::Approver>);
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
            let handle =
                Proxy::start_routes(config, listeners).map_err(|e| prepare("proxy", &e))?;
            Ok(BridgeSession {
                handle,
                routes,
                site,
                approver,
                dir,
            })
        }

        fn bridge_program(&self) -> Result<PathBuf, LaunchError> {
            match &self.site {
                RunSite::Sandbox => std::env::current_exe().map_err(|e| {
                    LaunchError::Prepare(format!("network bridge: cannot find this binary: {e}"))
                }),
                RunSite::Container { bridge, .. } => Ok(bridge.clone()),
            }
        }

        /// The shim's side of the session (see [`bridge_plan`]).
        pub fn plan(&self) -> Result<Bridge, LaunchError> {
            Ok(bridge_plan(
                self.dir.path(),
                &self.routes,
                self.bridge_program()?,
            ))
        }

        /// Stops serving and returns the account of every connection, for the audit outcome,
        /// and the connections it refused because of the decision.
        pub fn finish(self) -> (BridgeRecord, Vec<crate::denials::Denial>) {
            let bridge_program = self
                .bridge_program()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            // The run is over: an approver still being asked answers nobody.
            if let Some(approver) = &self.approver {
                approver.stop_asking();
            }
            let report = self.handle.shutdown(SHUTDOWN_BOUND);
            let admitted = match &self.site {
                RunSite::Sandbox => {
                    format!("descendants of the supervisor (pid {})", std::process::id())
                }
                RunSite::Container { name, .. } => {
                    format!("processes in container `{name}`'s cgroup")
                }
            };
            let record = BridgeRecord {
                allowlist: self.routes.allowlist.clone(),
                host_ports: self.routes.host_ports.clone(),
                listeners: route_table(&self.routes)
                    .iter()
                    .map(|(_, route, _)| {
                        let kind = match route.kind {
                            RouteKind::Proxy => "proxy",
                            RouteKind::LoopbackPort => "forward",
                        };
                        format!("{kind} {}", route.listen)
                    })
                    .collect(),
                bridge_program,
                admitted,
                resolve_overrides: self
                    .routes
                    .overrides
                    .iter()
                    .map(|(name, address)| format!("{name}={address}"))
                    .collect(),
                approvals: self.approver.as_ref().map(|_| {
                    report
                        .records
                        .iter()
                        .filter_map(|c| {
                            Some(ApprovalEvent {
                                connection: c.id,
                                host: c.host.clone()?,
                                port: c.port?,
                                approval: c.approval.clone()?,
                            })
                        })
                        .collect()
                }),
                approver: self.approver.as_ref().map(|a| a.command.clone()),
                connections: report.records,
                dropped_records: report.dropped_records,
                unfinished_connections: report.unfinished_connections,
            };
            let denials = crate::denials::network_denials(&record.connections);
            (record, denials)
        }
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

    /// `palisade __bridge [--proxy ADDR=SOCKET] [--forward ADDR=SOCKET]… -- CMD…`: runs inside
    /// the sandbox. Binds the bridge on the sandbox's loopback, detaches it, and execs the
    /// command with this process's environment. Returns only on failure, with a message.
    pub fn bridge_main(args: &[OsString]) -> String {
        palisade_proxy::bridge::main(args).message
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
        let all = env.iter().find(|(n, _)| n == "all_proxy").unwrap();
        assert_eq!(all.1, "socks5h://127.0.0.1:3128");
    }

    #[test]
    fn filtered_env_replaces_proxies_and_keeps_the_users_ssh_command() {
        let pair = |n: &str, v: &str| (OsString::from(n), OsString::from(v));
        let mut env = vec![
            pair("PATH", "/bin"),
            pair("Https_Proxy", "http://corp:8080"),
            pair("FTP_PROXY", "x"),
        ];
        apply_filtered_env(&mut env);
        let names: Vec<_> = env.iter().map(|(n, _)| n.to_string_lossy()).collect();
        assert!(!names.contains(&"Https_Proxy".into()) && !names.contains(&"FTP_PROXY".into()));
        assert!(env.contains(&pair("HTTPS_PROXY", "http://127.0.0.1:3128")));
        assert!(env.contains(&(OsString::from("GIT_SSH_COMMAND"), git_ssh_command(3128))));
        assert!(env.is_sorted());
        for own in ["GIT_SSH_COMMAND", "GIT_SSH"] {
            let mut env = vec![pair(own, "ssh -i /keys/deploy")];
            apply_filtered_env(&mut env);
            assert!(env.contains(&pair(own, "ssh -i /keys/deploy")), "{own}");
            let ssh = env
                .iter()
                .filter(|(n, _)| n.to_string_lossy().starts_with("GIT_SSH"));
            assert_eq!(ssh.count(), 1, "{own}");
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn git_ssh_command_runs_the_bridges_connect_mode() {
        assert_eq!(BRIDGE_SUBCOMMAND, palisade_proxy::bridge::SUBCOMMAND);
        assert_eq!(BRIDGE_CONNECT, palisade_proxy::bridge::CONNECT);
        assert_eq!(
            git_ssh_command(3128),
            "ssh -o ProxyCommand='/run/palisade-bridge/palisade __bridge connect --via 127.0.0.1:3128 %h %p'"
        );
    }
}
