//! Denials: what the sandbox refused the command during a run, each observed where it
//! happened and tied to the rule of the decision that caused it.
//!
//! Key design decision: an event is only ever made from something that saw the refusal — the
//! filtering proxy's or the bridge's connection record, the supervisor's own budget accounting
//! (its timer, the cgroup's `memory.events` / `pids.events` counters) — never guessed from an
//! exit status. A kind of denial a backend cannot observe is listed in its probe's
//! limitations instead, so silence is never mistaken for "nothing was blocked".
//!
//! The account is bounded: at most [`MAX_EVENTS`] distinct events (the same operation on the
//! same target under the same rule is one event with a count), and everything past that is
//! counted in `dropped`, so a command that triggers millions of denials costs a counter.

#[cfg(target_os = "linux")]
use palisade_proxy::{ConnectionRecord, RefusalCode, RouteKind, Verdict};
use palisade_shims::plan::Budgets;
use palisade_shims::supervise::{EndReason, Outcome};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Distinct events kept in the account; the rest are counted in [`Denials::dropped`].
pub const MAX_EVENTS: usize = 64;

/// The rule of a `connect` to a host socket the sandbox masks: built in, in every network mode.
pub const MASKED_HOST_SOCKETS: &str = "builtin.maskedHostSockets";

/// The rule of a raw socket the kernel refuses: the sandbox holds no capability (every backend
/// drops them all), and `SOCK_RAW` needs `CAP_NET_RAW`.
pub const NO_CAPABILITIES: &str = "builtin.noCapabilities";

/// Events `run` prints on stderr after the command ends (the summary line counts them all).
pub const SHOWN_ON_STDERR: usize = 5;

/// What was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DenialKind {
    /// A connection or name the network mode or the allowlist refused.
    Network,
    /// A budget that ended the run.
    Budget,
    /// A syscall the filter refused.
    Syscall,
    /// An access to a denied path, refused by its observed mask.
    File,
}

/// What saw the denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Observer {
    /// The host's filtering proxy, which refused the request.
    Proxy,
    /// The host end of a forwarded loopback port, which refused the client.
    Bridge,
    /// The supervisor's budget accounting (its timer, polling, or the run cgroup's counters).
    Supervisor,
    /// The seccomp filter's listener: the kernel stopped the call and the observer answered it
    /// with the filter's own errno.
    Seccomp,
    /// The observed mask of a denied path (a FUSE node that refuses every access), which the
    /// kernel asked.
    Mask,
}

/// One denial (or several of the same: `count`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Denial {
    pub kind: DenialKind,
    /// The operation refused: `connect`, `get`, … for the network; the budget's name
    /// (`wall-clock`, `memory`, `processes`, `cpu`) for a budget.
    pub operation: String,
    /// What it was refused on: `host:port`, or the budget's field of the plan.
    pub target: String,
    /// The field of the decision that caused it (`plan.network.allowlist`,
    /// `plan.budgets.timeoutMillis`, …), so `palisade explain` can name the change that would
    /// allow it.
    pub rule: String,
    /// One line: why, in the observer's words.
    pub reason: String,
    pub observed_by: Observer,
    /// A budget's limit and the value measured when it ended the run, in `unit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// How many times it happened.
    pub count: u64,
}

impl Denial {
    fn same_as(&self, other: &Denial) -> bool {
        self.kind == other.kind
            && self.operation == other.operation
            && self.target == other.target
            && self.rule == other.rule
    }

    /// One line for a person: `network: CONNECT example.org:443 refused by plan.network.allowlist (…)`.
    pub fn line(&self) -> String {
        let times = if self.count > 1 {
            format!(" ({} times)", self.count)
        } else {
            String::new()
        };
        match self.kind {
            DenialKind::Network => format!(
                "network: {} {} refused by `{}`{times}: {}",
                self.operation, self.target, self.rule, self.reason
            ),
            DenialKind::Syscall => format!(
                "syscall: {} ({}) refused by `{}`{times}: {}",
                self.operation, self.target, self.rule, self.reason
            ),
            DenialKind::File => format!(
                "file: {} {} refused by `{}`{times}: {}",
                self.operation, self.target, self.rule, self.reason
            ),
            DenialKind::Budget => {
                let unit = self.unit.as_deref().unwrap_or("");
                let amount = |value: Option<u64>| {
                    value.map_or_else(|| "unknown".to_owned(), |v| format!("{v} {unit}"))
                };
                format!(
                    "budget: the {} limit of {} ended the run (measured {}; `{}`)",
                    self.operation,
                    amount(self.limit),
                    amount(self.measured),
                    self.rule
                )
            }
        }
    }
}

/// Every denial of a run: the outcome's `denials`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Denials {
    /// Every denial observed, kept or not.
    pub total: u64,
    /// Denials not kept once [`MAX_EVENTS`] distinct events were.
    pub dropped: u64,
    pub events: Vec<Denial>,
}

impl Denials {
    /// Adds one event, merging it into an equal one (same operation, target and rule).
    pub fn add(&mut self, denial: Denial) {
        self.total = self.total.saturating_add(denial.count);
        if let Some(same) = self.events.iter_mut().find(|e| e.same_as(&denial)) {
            same.count = same.count.saturating_add(denial.count);
        } else if self.events.len() < MAX_EVENTS {
            self.events.push(denial);
        } else {
            self.dropped = self.dropped.saturating_add(denial.count);
        }
    }

    /// Counts denials an observer saw but did not keep.
    pub fn add_dropped(&mut self, count: u64) {
        self.total = self.total.saturating_add(count);
        self.dropped = self.dropped.saturating_add(count);
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// What `run` prints on stderr after the command ends: one summary line and the first
    /// [`SHOWN_ON_STDERR`] events, or nothing when nothing was denied.
    pub fn stderr_lines(&self, run_id: &str, audit: Option<&std::path::Path>) -> Vec<String> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut lines = vec![format!(
            "palisade: the sandbox refused {} operation{} in run {run_id}:",
            self.total,
            if self.total == 1 { "" } else { "s" },
        )];
        for denial in self.events.iter().take(SHOWN_ON_STDERR) {
            lines.push(format!("palisade:   {}", denial.line()));
        }
        let hidden = self.events.len().saturating_sub(SHOWN_ON_STDERR);
        if hidden > 0 || self.dropped > 0 {
            lines.push(format!(
                "palisade:   … and {} more",
                (hidden as u64).saturating_add(self.dropped)
            ));
        }
        if let Some(audit) = audit {
            lines.push(format!(
                "palisade: `palisade explain {} --run {run_id}` says what would allow each",
                audit.display()
            ));
        }
        lines
    }
}

/// The budget that ended the run, if one did: from the supervisor's own account of why it
/// ended the run (`Outcome::ended_by`), with the limit and what it measured.
pub fn budget_denial(outcome: &Outcome, budgets: &Budgets) -> Option<Denial> {
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let (operation, field, limit, measured, unit, reason) = match outcome.ended_by {
        EndReason::WallClock => {
            let limit = budgets.wall_clock.map(millis);
            (
                "wall-clock",
                "timeoutMillis",
                limit,
                Some(millis(outcome.duration)),
                "ms",
                "the run outlived its wall-clock budget; the supervisor sent SIGTERM (and SIGKILL if the command was still running when the grace ran out)".to_owned(),
            )
        }
        EndReason::Memory => (
            "memory",
            "memoryBytes",
            budgets.memory_bytes,
            outcome.usage.peak_memory_bytes,
            "bytes",
            "the tree reached its memory budget (the kernel's out-of-memory killer acted in the run's cgroup, or the polled total passed it)".to_owned(),
        ),
        EndReason::Processes => (
            "processes",
            "maxProcesses",
            budgets.max_processes,
            outcome.usage.peak_processes,
            "processes",
            "the tree tried to exceed its process budget (a fork or clone was refused: \"Cannot fork\", EAGAIN)".to_owned(),
        ),
        EndReason::Cpu => (
            "cpu",
            "cpuSeconds",
            budgets.cpu_seconds.map(|s| s.saturating_mul(1000)),
            outcome.usage.cpu_ms,
            "ms",
            "the tree used up its CPU-time budget".to_owned(),
        ),
        EndReason::CommandExited | EndReason::Signal(_) => return None,
    };
    Some(Denial {
        kind: DenialKind::Budget,
        operation: operation.to_owned(),
        target: field.to_owned(),
        rule: format!("plan.budgets.{field}"),
        reason,
        observed_by: Observer::Supervisor,
        limit,
        measured,
        unit: Some(unit.to_owned()),
        count: 1,
    })
}

#[cfg(target_os = "linux")]
/// The connections the filtering proxy or a forwarded loopback port refused because of the
/// decision. Failures of the outside world (a name that does not resolve, an upstream that does
/// not answer) are the connection's account, not a denial.
pub fn network_denials(connections: &[ConnectionRecord]) -> Vec<Denial> {
    connections
        .iter()
        .filter(|c| c.verdict == Verdict::Refused)
        .filter_map(|c| {
            let code = c.code?;
            let rule = match (c.route, code) {
                (
                    RouteKind::Proxy,
                    RefusalCode::DomainNotAllowed | RefusalCode::AddressNotAllowed,
                ) => "plan.network.allowlist",
                (
                    RouteKind::Proxy,
                    RefusalCode::MalformedRequest | RefusalCode::UnsupportedRequest,
                ) => "plan.network.mode",
                (_, RefusalCode::ClientNotAllowed | RefusalCode::TooManyConnections) => {
                    "plan.network.mode"
                }
                (RouteKind::LoopbackPort, _) => "plan.network.hostPorts",
                (
                    RouteKind::Proxy,
                    RefusalCode::ResolutionFailed
                    | RefusalCode::UpstreamUnreachable
                    | RefusalCode::ProxyUnreachable,
                ) => return None,
            };
            let target = match (&c.host, c.port) {
                (Some(host), Some(port)) => format!("{host}:{port}"),
                (Some(host), None) => host.clone(),
                _ => c.peer.clone().unwrap_or_else(|| "(no target)".to_owned()),
            };
            Some(Denial {
                kind: DenialKind::Network,
                operation: c.method.clone().unwrap_or_else(|| "connect".to_owned()),
                target,
                rule: rule.to_owned(),
                reason: format!(
                    "{code}: {}",
                    c.reason.clone().unwrap_or_else(|| code.as_str().to_owned())
                ),
                observed_by: match c.route {
                    RouteKind::Proxy => Observer::Proxy,
                    RouteKind::LoopbackPort => Observer::Bridge,
                },
                limit: None,
                measured: None,
                unit: None,
                count: 1,
            })
        })
        .collect()
}

/// The accesses to denied paths their observed masks refused: each tied to the entry of the
/// plan's `deniedReadPaths` that asked for the mask (`plan.deniedReadPaths[i]`, the decision's
/// order, which the launch plan keeps). `masks` are the launch's, in node order.
#[cfg(target_os = "linux")]
pub fn file_denials(
    seen: &palisade_shims::fusemask::Seen,
    masks: &[palisade_shims::bwrap::DeniedMask],
    denied_read_paths: &[std::path::PathBuf],
) -> Vec<Denial> {
    seen.events
        .iter()
        .map(|event| {
            let entry = masks.get(event.mask).and_then(|mask| {
                mask.denied
                    .iter()
                    .find_map(|d| denied_read_paths.iter().position(|p| p == d))
            });
            let rule = entry.map_or_else(
                || "plan.deniedReadPaths".to_owned(),
                |i| format!("plan.deniedReadPaths[{i}]"),
            );
            let denied = entry.and_then(|i| denied_read_paths.get(i)).map_or_else(
                || "a denied path".to_owned(),
                |p| format!("`{}`", p.display()),
            );
            let who = if event.command.is_empty() {
                format!("pid {}", event.pid)
            } else {
                format!("`{}` (pid {})", event.command, event.pid)
            };
            let mut reason = format!("EACCES for {who}; {denied} is denied to the sandbox");
            // The usual way to meet a denied file in a workspace: `git add -A` indexes every
            // untracked file it is not told to ignore, and stops at one it cannot read.
            if event.command == "git"
                && event.op == palisade_shims::fusemask::FileOp::Read
                && masks.get(event.mask).is_some_and(|mask| !mask.dir)
            {
                reason.push_str(
                    "; git stops at a file it cannot index: list it in `.gitignore` (or `.git/info/exclude`) and git skips it",
                );
            }
            Denial {
                kind: DenialKind::File,
                operation: event.op.as_str().to_owned(),
                target: event.path.display().to_string(),
                rule,
                reason,
                observed_by: Observer::Mask,
                limit: None,
                measured: None,
                unit: None,
                count: event.count,
            }
        })
        .collect()
}

/// The calls the seccomp filter refused, as its observer answered them: a `socket` is a
/// network denial (of the network mode's socket rule, or the filter's vsock rule), and so is a
/// `connect` the observer saw the sandbox refuse (an address off the network namespace's
/// loopback: the mode; a masked host socket: the built-in mask); anything else is a syscall
/// denial of the filter.
#[cfg(target_os = "linux")]
pub fn syscall_denials(observed: &palisade_shims::seccomp::observe::Observed) -> Vec<Denial> {
    observed
        .calls
        .iter()
        .map(|call| {
            let who = if call.command.is_empty() {
                format!("pid {}", call.pid)
            } else {
                format!("`{}` (pid {})", call.command, call.pid)
            };
            let reason = format!(
                "{} for {who}; the rule closes {}",
                errno_name(call.errno),
                call.closes
            );
            let (kind, target, rule) = match (&call.target, &call.socket_family) {
                (Some(address), Some(_)) => (
                    DenialKind::Network,
                    address.clone(),
                    connect_rule(&call.condition),
                ),
                (_, Some(family)) => (
                    DenialKind::Network,
                    family.clone(),
                    if call.network_rule {
                        "plan.network.mode"
                    } else {
                        "plan.syscallFilter"
                    },
                ),
                (_, None) => (
                    DenialKind::Syscall,
                    call.condition.clone(),
                    "plan.syscallFilter",
                ),
            };
            Denial {
                kind,
                operation: call.syscall.clone(),
                target,
                rule: rule.to_owned(),
                reason,
                observed_by: Observer::Seccomp,
                limit: None,
                measured: None,
                unit: None,
                count: call.count,
            }
        })
        .collect()
}

/// The rule of a `connect` the observer saw the sandbox refuse, by its condition.
#[cfg(target_os = "linux")]
fn connect_rule(condition: &str) -> &'static str {
    use palisade_shims::seccomp::observe;
    match condition {
        observe::HOST_LOOPBACK_PORT => "plan.network.hostPorts",
        observe::MASKED_SOCKET | observe::PRIVATE_SOCKET | observe::HOST_ABSTRACT_SOCKET => {
            MASKED_HOST_SOCKETS
        }
        observe::RAW_SOCKET => NO_CAPABILITIES,
        _ => "plan.network.mode",
    }
}

/// `EPERM`, `ENOSYS`, … for the errnos the filter answers with.
#[cfg(target_os = "linux")]
fn errno_name(errno: i32) -> String {
    match errno {
        libc::EPERM => "EPERM".to_owned(),
        libc::ENOSYS => "ENOSYS".to_owned(),
        libc::EACCES => "EACCES".to_owned(),
        libc::EAFNOSUPPORT => "EAFNOSUPPORT".to_owned(),
        libc::ENETUNREACH => "ENETUNREACH".to_owned(),
        libc::ECONNREFUSED => "ECONNREFUSED".to_owned(),
        libc::ENOENT => "ENOENT".to_owned(),
        // A datagram the call sent to a port nothing of the sandbox's listens on.
        0 => "sent, and dropped,".to_owned(),
        other => format!("errno {other}"),
    }
}

/// The smallest change to the policy (or the flags, or the host configuration) that would
/// have allowed `denial`, given the decision it was made under (its canonical JSON).
pub fn suggestion(denial: &Denial, decision: &Value) -> String {
    match denial.kind {
        DenialKind::Network => network_suggestion(denial, decision),
        DenialKind::Budget => budget_suggestion(denial, decision),
        DenialKind::Syscall => syscall_suggestion(denial),
        DenialKind::File => file_suggestion(denial, decision),
    }
}

/// Where the denied path came from decides who can lift it: the policy's own list, a
/// `--deny-read` flag, the host configuration's list, or the built-in credential stores (which
/// only the host configuration can exempt).
fn file_suggestion(denial: &Denial, decision: &Value) -> String {
    let entry = denial
        .rule
        .strip_prefix("plan.deniedReadPaths[")
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|i| i.parse::<usize>().ok());
    let Some(path) =
        entry.and_then(|i| at(decision, &format!("/plan/deniedReadPaths/{i}")).as_str())
    else {
        return "not allowed by the decision's denied read paths".to_owned();
    };
    let origin = at(decision, "/policy/deniedReadPaths")
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| at(d, "/path") == path)
        .and_then(|d| at(d, "/origin").as_str())
        .unwrap_or("");
    match origin {
        "declared" => {
            format!("remove `{path}` from `spec.sandbox.deniedReadPaths` in the Taskpack")
        }
        "flag" => format!("drop `--deny-read {path}`"),
        "host" => format!(
            "the host configuration's `deniedReadPaths` lists `{path}`; only the host's configuration lifts it"
        ),
        // Palisade's signing key (`palisade key init`): never readable inside, whatever the
        // configuration.
        "built-in" if path.ends_with("/palisade/keys") => format!(
            "not allowed by any policy or configuration: `{path}` holds Palisade's audit-signing key, which no sandbox may read"
        ),
        "built-in" => format!(
            "`{path}` is a built-in credential store, denied to every sandbox; only the host configuration's `exemptDeniedReadPaths` exempts it"
        ),
        _ => format!("`{path}` is denied by the decision"),
    }
}

fn network_suggestion(denial: &Denial, decision: &Value) -> String {
    let host = denial
        .target
        .rsplit_once(':')
        .map_or(denial.target.as_str(), |(host, _)| host);
    match denial.rule.as_str() {
        "plan.network.allowlist" if denial.reason.starts_with("address-not-allowed") => format!(
            "`{host}` resolves to a private or special-purpose address, which a name never reaches; add that address itself to `spec.sandbox.allowedDomains` if the destination is meant"
        ),
        "plan.network.allowlist" => {
            let narrowed = at(decision, "/policy/allowedDomainsOrigin") == "launcher";
            // A host the list already names with another port needs this port named too.
            let listed_with_port = at(decision, "/plan/network/allowlist")
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .any(|entry| entry.rsplit_once(':').is_some_and(|(h, _)| h == host));
            let entry = if listed_with_port {
                denial.target.as_str()
            } else {
                host
            };
            // Who formed the list says where the entry goes: the Taskpack, or the flags alone.
            match at(decision, "/policy/allowedDomainsOrigin").as_str() {
                Some("flag") => format!(
                    "pass `--allow-domain {entry}` as well (the `--allow-domain` flags formed the list)"
                ),
                _ if narrowed => format!(
                    "add `{entry}` to `spec.sandbox.allowedDomains` and pass `--allow-domain {entry}` too (the flags narrowed the list)"
                ),
                _ => format!(
                    "add `{entry}` to `spec.sandbox.allowedDomains` in the Taskpack (without one, `--allow-domain {entry}`)"
                ),
            }
        }
        "plan.network.mode" if matches!(denial.operation.as_str(), "connect" | "sendto") => {
            let mode = at(decision, "/plan/network/mode").as_str().unwrap_or("none");
            let filtered = at(decision, "/plan/network/allowlist").is_array();
            if filtered {
                format!(
                    "the command connected to `{}` directly; in this run only the proxy the environment names (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`) leads out, to the names in `spec.sandbox.allowedDomains`: make the tool use it, and add the destination's name to `allowedDomains` if it is missing",
                    denial.target
                )
            } else {
                format!(
                    "the network mode `{mode}` reaches only the sandbox's own loopback; ask for `spec.sandbox.networkMode: allow-outbound` (with `allowedDomains` to filter it) to reach `{}`",
                    denial.target
                )
            }
        }
        // An abstract socket has no path to allow: only a shared network namespace reaches it.
        MASKED_HOST_SOCKETS if denial.target.starts_with('@') => format!(
            "not allowed by a built-in mask, whatever the policy: every host Unix socket (`{}` here) is masked in every network mode",
            denial.target
        ),
        MASKED_HOST_SOCKETS => format!(
            "not allowed by a built-in mask unless the policy names the socket: allow `{0}` with `spec.sandbox.allowedUnixSockets: [{0}]` or `--allow-unix-socket {0}` (under linux-bwrap or docker)",
            denial.target
        ),
        NO_CAPABILITIES => format!(
            "not allowed by any policy: the sandbox holds no capability, and a `{}` socket needs CAP_NET_RAW; for `ping`, an ICMP datagram socket (`SOCK_DGRAM`) needs none where the host's `net.ipv4.ping_group_range` admits the user",
            denial.target
        ),
        "plan.network.mode" if denial.operation == "socket" => {
            let mode = at(decision, "/plan/network/mode").as_str().unwrap_or("none");
            format!(
                "the network mode `{mode}` allows no `{}` socket; ask for `spec.sandbox.networkMode: loopback-only` (the sandbox's own loopback) or `allow-outbound` (with `allowedDomains` to filter it)",
                denial.target
            )
        }
        "plan.syscallFilter" if denial.operation == "socket" => format!(
            "not allowed in any mode: `{}` sockets reach past every network namespace",
            denial.target
        ),
        "plan.network.hostPorts" if denial.observed_by == Observer::Seccomp => {
            let port = denial.target.rsplit_once(':').map_or("", |(_, port)| port);
            // bwrap's bridge cannot listen below 1024 (the engine refuses such a port there).
            let privileged = if port.parse::<u16>().is_ok_and(|p| p < 1024) {
                " — a port below 1024 only under the docker backend, whose container may bind it"
            } else {
                ""
            };
            format!(
                "the sandbox's loopback is its own; to reach the host's port {port} (TCP only), add it to `spec.sandbox.loopbackPorts` (with `networkMode: loopback-only`), or pass `--allow-host-port {port}` (without a Taskpack, or one that lists it){privileged}"
            )
        }
        "plan.network.hostPorts" => format!(
            "only the run's own processes may use a forwarded host port; `{}` came from elsewhere",
            denial.target
        ),
        _ => "the network bridge admits only HTTP CONNECT, plain HTTP or SOCKS5 CONNECT from the run's own processes; use the proxy the environment names (`HTTPS_PROXY`, `ALL_PROXY`)".to_owned(),
    }
}

fn syscall_suggestion(denial: &Denial) -> String {
    format!(
        "not allowed by the sandbox's syscall filter, whatever the policy: `{}` is refused on every backend that filters syscalls",
        denial.operation
    )
}

fn budget_suggestion(denial: &Denial, decision: &Value) -> String {
    let field = denial.target.as_str();
    let (policy_field, flag, kind) = match field {
        "timeoutMillis" => ("timeoutSeconds", "--timeout", "timeout"),
        "memoryBytes" => ("memoryMiB", "--memory", "memory"),
        "maxProcesses" => ("maxProcesses", "--max-procs", "max-processes"),
        _ => ("cpuSeconds", "--cpu-seconds", "cpu"),
    };
    let budget = at(decision, &format!("/plan/budgets/{field}"));
    let clamped = at(decision, "/plan/budgets/clamped")
        .as_array()
        .is_some_and(|list| list.iter().any(|c| at(c, "/budget") == kind));
    let origin = at(budget, "/origin").as_str().unwrap_or("unknown");
    let raise = match origin {
        "flag" => format!("raise `{flag}`"),
        "policy" => format!("raise `spec.budgets.{policy_field}` in the Taskpack"),
        "task-contract" => format!(
            "the TaskContract's `spec.budgets.{policy_field}` caps it; only a new TaskContract raises it"
        ),
        "runtime-profile" => {
            "the runtime profile's budgets cap it; only the runtime profile raises it".to_owned()
        }
        "host-ceiling" => format!(
            "the host configuration's ceiling for `{policy_field}` caps it; only the host's configuration raises it"
        ),
        _ => format!("set `spec.budgets.{policy_field}` or `{flag}`"),
    };
    if clamped {
        format!("{raise} (the asked-for budget was clamped to this limit)")
    } else {
        raise
    }
}

/// The value at a JSON pointer, or `null`.
pub(crate) fn at<'a>(value: &'a Value, pointer: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    value.pointer(pointer).unwrap_or(&NULL)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    fn event(target: &str) -> Denial {
        Denial {
            kind: DenialKind::Network,
            operation: "CONNECT".into(),
            target: target.into(),
            rule: "plan.network.allowlist".into(),
            reason: "domain-not-allowed: no entry".into(),
            observed_by: Observer::Proxy,
            limit: None,
            measured: None,
            unit: None,
            count: 1,
        }
    }

    #[test]
    fn equal_events_merge_and_the_account_is_bounded() {
        let mut denials = Denials::default();
        for _ in 0..3 {
            denials.add(event("a.example:443"));
        }
        for i in 0..(MAX_EVENTS + 10) {
            denials.add(event(&format!("h{i}.example:443")));
        }
        assert_eq!(denials.total, 3 + MAX_EVENTS as u64 + 10);
        assert_eq!(denials.events.len(), MAX_EVENTS);
        assert_eq!(denials.events[0].count, 3);
        // The first kept 63 others; 11 came after the account was full.
        assert_eq!(denials.dropped, 11);
        let lines = denials.stderr_lines("run-1", None);
        assert_eq!(lines.len(), 1 + SHOWN_ON_STDERR + 1);
        assert!(lines[1].contains("a.example:443 refused by `plan.network.allowlist` (3 times)"));
        assert!(lines.last().unwrap().contains("… and 70 more"));
    }

    /// Every kind of denial, with every rule that can cause it, names its fix — a flag or a
    /// policy field to change, or who alone can lift it — or says that no policy allows it.
    #[test]
    fn every_denial_names_its_fix_or_says_nothing_allows_it() {
        let denial = |kind, operation: &str, target: &str, rule: &str, reason: &str, by| Denial {
            kind,
            operation: operation.into(),
            target: target.into(),
            rule: rule.into(),
            reason: reason.into(),
            observed_by: by,
            limit: None,
            measured: None,
            unit: None,
            count: 1,
        };
        let declared = serde_json::json!({
            "plan": {"network": {"mode": "filtered", "allowlist": ["pypi.org"]},
                     "deniedReadPaths": ["/h/.ssh", "/h/x", "/h/y", "/h/.aws", "/h/.config/palisade/keys"],
                     "budgets": {"clamped": [], "maxProcesses": {"origin": "flag", "value": 4}}},
            "policy": {"allowedDomainsOrigin": "declared",
                       "deniedReadPaths": [
                           {"path": "/h/.ssh", "origin": "built-in"},
                           {"path": "/h/x", "origin": "declared"},
                           {"path": "/h/y", "origin": "flag"},
                           {"path": "/h/.aws", "origin": "host"},
                           {"path": "/h/.config/palisade/keys", "origin": "built-in"}]}
        });
        let flags = serde_json::json!({
            "plan": {"network": {"mode": "filtered", "allowlist": ["pypi.org"]}},
            "policy": {"allowedDomainsOrigin": "flag"}
        });
        let loopback =
            serde_json::json!({"plan": {"network": {"mode": "loopback-only", "hostPorts": []}}});
        let no_network = serde_json::json!({"plan": {"network": {"mode": "none"}}});
        use DenialKind::{Budget, File, Network, Syscall};
        let cases: Vec<(Denial, &Value, &[&str])> = vec![
            (
                denial(
                    Network,
                    "CONNECT",
                    "evil.example:443",
                    "plan.network.allowlist",
                    "domain-not-allowed",
                    Observer::Proxy,
                ),
                &declared,
                &["spec.sandbox.allowedDomains", "--allow-domain evil.example"],
            ),
            (
                denial(
                    Network,
                    "CONNECT",
                    "evil.example:443",
                    "plan.network.allowlist",
                    "domain-not-allowed",
                    Observer::Proxy,
                ),
                &flags,
                &["--allow-domain evil.example"],
            ),
            (
                denial(
                    Network,
                    "CONNECT",
                    "intra.example:443",
                    "plan.network.allowlist",
                    "address-not-allowed",
                    Observer::Proxy,
                ),
                &declared,
                &["allowedDomains"],
            ),
            (
                denial(
                    Network,
                    "connect",
                    "1.2.3.4:443",
                    "plan.network.mode",
                    "",
                    Observer::Seccomp,
                ),
                &loopback,
                &["networkMode: allow-outbound"],
            ),
            (
                denial(
                    Network,
                    "connect",
                    "1.2.3.4:443",
                    "plan.network.mode",
                    "",
                    Observer::Seccomp,
                ),
                &declared,
                &["HTTPS_PROXY", "allowedDomains"],
            ),
            (
                denial(
                    Network,
                    "socket",
                    "AF_INET",
                    "plan.network.mode",
                    "",
                    Observer::Seccomp,
                ),
                &no_network,
                &["networkMode: loopback-only"],
            ),
            (
                denial(
                    Network,
                    "connect",
                    "127.0.0.1:18555",
                    "plan.network.hostPorts",
                    "",
                    Observer::Seccomp,
                ),
                &loopback,
                &["loopbackPorts", "--allow-host-port 18555"],
            ),
            (
                denial(
                    Network,
                    "connect",
                    "/run/agent.sock",
                    MASKED_HOST_SOCKETS,
                    "",
                    Observer::Seccomp,
                ),
                &loopback,
                &["--allow-unix-socket /run/agent.sock", "allowedUnixSockets"],
            ),
            (
                denial(
                    Network,
                    "connect",
                    "@abstract",
                    MASKED_HOST_SOCKETS,
                    "",
                    Observer::Seccomp,
                ),
                &loopback,
                &["whatever the policy"],
            ),
            (
                denial(
                    Network,
                    "socket",
                    "SOCK_RAW",
                    NO_CAPABILITIES,
                    "",
                    Observer::Seccomp,
                ),
                &loopback,
                &["not allowed by any policy"],
            ),
            (
                denial(
                    Network,
                    "socket",
                    "AF_NETLINK",
                    "plan.syscallFilter",
                    "",
                    Observer::Seccomp,
                ),
                &loopback,
                &["not allowed in any mode"],
            ),
            (
                denial(
                    Syscall,
                    "ptrace",
                    "",
                    "plan.syscallFilter",
                    "",
                    Observer::Seccomp,
                ),
                &loopback,
                &["whatever the policy"],
            ),
            (
                denial(
                    Budget,
                    "processes",
                    "maxProcesses",
                    "plan.budgets.maxProcesses",
                    "",
                    Observer::Supervisor,
                ),
                &declared,
                &["--max-procs"],
            ),
            (
                denial(
                    File,
                    "open",
                    "/h/x/a",
                    "plan.deniedReadPaths[1]",
                    "",
                    Observer::Mask,
                ),
                &declared,
                &["spec.sandbox.deniedReadPaths"],
            ),
            (
                denial(
                    File,
                    "open",
                    "/h/y/a",
                    "plan.deniedReadPaths[2]",
                    "",
                    Observer::Mask,
                ),
                &declared,
                &["--deny-read /h/y"],
            ),
            (
                denial(
                    File,
                    "open",
                    "/h/.aws/c",
                    "plan.deniedReadPaths[3]",
                    "",
                    Observer::Mask,
                ),
                &declared,
                &["host configuration"],
            ),
            (
                denial(
                    File,
                    "open",
                    "/h/.ssh/id",
                    "plan.deniedReadPaths[0]",
                    "",
                    Observer::Mask,
                ),
                &declared,
                &["exemptDeniedReadPaths"],
            ),
            (
                denial(
                    File,
                    "open",
                    "/h/.config/palisade/keys/k",
                    "plan.deniedReadPaths[4]",
                    "",
                    Observer::Mask,
                ),
                &declared,
                &["not allowed by any policy"],
            ),
        ];
        for (denial, decision, expected) in cases {
            let line = suggestion(&denial, decision);
            for part in expected {
                assert!(
                    line.contains(part),
                    "{} {}: `{line}` lacks `{part}`",
                    denial.rule,
                    denial.target
                );
            }
        }
    }

    #[test]
    fn nothing_denied_prints_nothing() {
        assert!(Denials::default().stderr_lines("r", None).is_empty());
    }

    #[test]
    fn budget_suggestions_follow_the_origin() {
        let denial = Denial {
            kind: DenialKind::Budget,
            operation: "wall-clock".into(),
            target: "timeoutMillis".into(),
            rule: "plan.budgets.timeoutMillis".into(),
            reason: String::new(),
            observed_by: Observer::Supervisor,
            limit: Some(1000),
            measured: Some(1004),
            unit: Some("ms".into()),
            count: 1,
        };
        let decision = |origin: &str| serde_json::json!({"plan": {"budgets": {"clamped": [], "timeoutMillis": {"origin": origin, "value": 1000}}}});
        assert_eq!(suggestion(&denial, &decision("flag")), "raise `--timeout`");
        assert!(suggestion(&denial, &decision("policy")).contains("spec.budgets.timeoutSeconds"));
        assert!(suggestion(&denial, &decision("host-ceiling")).contains("host's configuration"));
    }
}
