//! The engine's output: a decision or a refusal, its canonical JSON and that JSON's digest.
//!
//! The JSON is written from the `Report` structs below with every object's keys sorted and no
//! whitespace ([`crate::canonical`]). That string is the canonical form; its lower-case hex
//! SHA-256 is the digest. Every runtime that loads the
//! component must produce these exact bytes.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::{Backend, Capability, ExecutionMode, NetworkMode};

/// The version of the decision JSON schema. Bump it when the shape of `Report` changes.
pub const SCHEMA_VERSION: &str = "palisade.decision/v3";

/// The closed set of reasons a decision can be refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RefusalCode {
    SandboxPolicyInvalid,
    SandboxBackendUnavailable,
    SandboxCapabilityInsufficient,
    HostFactsInvalid,
    /// The launcher asked for an execution mode the host forbids (`workspace`).
    ExecutionModeForbidden,
    /// A writable root (the workspace included) is `/`, the home directory or an ancestor of
    /// it: no containment at all.
    SandboxWritableRootUnsafe,
    /// A host Unix socket the policy allows cannot be granted: nothing or no socket is there, it
    /// lies inside a denied read path, or it grants root (a container daemon's) and the host
    /// configuration does not allow it.
    SandboxUnixSocketRefused,
}

impl RefusalCode {
    /// Every code, in declaration order (the match in [`RefusalCode::as_str`] keeps it whole).
    pub const ALL: [RefusalCode; 7] = [
        RefusalCode::SandboxPolicyInvalid,
        RefusalCode::SandboxBackendUnavailable,
        RefusalCode::SandboxCapabilityInsufficient,
        RefusalCode::HostFactsInvalid,
        RefusalCode::ExecutionModeForbidden,
        RefusalCode::SandboxWritableRootUnsafe,
        RefusalCode::SandboxUnixSocketRefused,
    ];

    /// The machine-readable code printed by the CLI and stored in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::SandboxPolicyInvalid => "SANDBOX_POLICY_INVALID",
            RefusalCode::SandboxBackendUnavailable => "SANDBOX_BACKEND_UNAVAILABLE",
            RefusalCode::SandboxCapabilityInsufficient => "SANDBOX_CAPABILITY_INSUFFICIENT",
            RefusalCode::HostFactsInvalid => "HOST_FACTS_INVALID",
            RefusalCode::ExecutionModeForbidden => "EXECUTION_MODE_FORBIDDEN",
            RefusalCode::SandboxWritableRootUnsafe => "SANDBOX_WRITABLE_ROOT_UNSAFE",
            RefusalCode::SandboxUnixSocketRefused => "SANDBOX_UNIX_SOCKET_REFUSED",
        }
    }
}

/// The typed outcome (what the WIT `result` carries besides the JSON). Built from the same
/// [`Report`] as the canonical JSON, so the two cannot disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The plan the launcher applies, exactly as the JSON's `plan`.
    Decision(Box<ConfinementPlan>),
    Refusal {
        code: RefusalCode,
        message: String,
        /// Every offending field, as the JSON's `errors`.
        errors: Vec<FieldError>,
        /// Each candidate's verdict, as the JSON's `trace`.
        trace: Vec<CandidateTrace>,
    },
}

/// One decision or refusal with its canonical JSON and digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub verdict: Verdict,
    pub canonical_json: String,
    pub digest: String,
}

/// Where the effective policy came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicySource {
    /// `spec.sandbox` was present in the document.
    Declared,
    /// No `spec.sandbox`, `GITHUB_ACTIONS=true`: the dedicated-runner default.
    GithubActionsDefault,
    /// No `spec.sandbox` outside Actions: fail-closed negotiation over OS sandboxes.
    OmittedDefault,
}

/// Where one setting or requirement came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Written in `spec.sandbox` (wins when also implied).
    Declared,
    /// Implied by another setting so that nothing is silently downgraded.
    Implied,
    /// A default of the policy source (declared-policy default, Actions, omitted policy).
    Default,
    /// The host's configuration (default backend order).
    Host,
    /// The launcher's command line (`--allow-domain`), which may only narrow the policy.
    Launcher,
    /// The launcher's policy flags (`policyFlags`: `--network`, `--backend`, ...), which form
    /// an omitted policy and may only tighten a declared one.
    Flag,
}

/// A capability the chosen backend must provide, with why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Requirement {
    pub capability: Capability,
    pub origin: Origin,
    pub reason: String,
}

/// Resource budgets from `spec.budgets`; absent fields are `null` (no limit from the policy).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Budgets {
    pub timeout_seconds: Option<u64>,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    pub max_processes: Option<u64>,
    pub cpu_seconds: Option<u64>,
}

/// A task contract as the decision records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContractEnvelope {
    /// Where the document came from.
    pub document_name: String,
    /// Its `metadata.name`.
    pub name: String,
    /// Its `spec.budgets`, as declared.
    pub budgets: Budgets,
}

/// Where a denied read path came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeniedOrigin {
    /// The policy's `spec.sandbox.deniedReadPaths` (wins when also built in or the host's).
    Declared,
    /// The host configuration's `deniedReadPaths`.
    Host,
    /// A credential store every policy denies ([`crate::resolve::BUILT_IN_DENIED_READ_PATHS`]).
    BuiltIn,
    /// The launcher's `--deny-read` (`policyFlags.deniedReadPaths`).
    Flag,
}

/// One denied read path and its origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeniedPath {
    pub path: String,
    pub origin: DeniedOrigin,
}

/// A built-in denied path that is not applied, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DroppedDeniedPath {
    pub path: String,
    pub reason: String,
}

/// Where a protected path came from. Only built-ins today: a policy cannot name its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProtectedOrigin {
    /// Built in ([`crate::protected`]): the seed's four and git's execution surface.
    BuiltIn,
}

/// One protected path of the policy: resolved, with the built-in rule that put it there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyProtectedPath {
    pub path: String,
    /// The built-in's name (`AGENTS.md`, `.git/hooks`): what a host configuration's
    /// `exemptProtectedPaths` names, and what a denial cites.
    pub rule: String,
    pub origin: ProtectedOrigin,
}

/// A built-in protected path that is not applied, and why (the host configuration exempted
/// its rule).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DroppedProtectedPath {
    pub path: String,
    pub rule: String,
    pub reason: String,
}

/// The effective policy after defaults and implications.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectivePolicy {
    pub source: PolicySource,
    pub document_name: String,
    /// `metadata.name`, when a document was given.
    pub taskpack_name: Option<String>,
    /// Other `spec` sections, which belong to the rest of the Taskpack; sorted.
    pub ignored_spec_sections: Vec<String>,
    pub preferred_backends: Vec<Backend>,
    pub preferred_backends_origin: Origin,
    pub network_mode: NetworkMode,
    pub network_mode_origin: Origin,
    /// Sorted by capability (canonical order).
    pub requirements: Vec<Requirement>,
    /// Every path made unreadable where the backend can (resolved absolute, normalised, sorted
    /// by path): the policy's own, the built-in credential stores and the host's, each with
    /// where it came from. Only the policy's own imply `filesystemReadContainment`.
    pub denied_read_paths: Vec<DeniedPath>,
    /// Built-in denied paths left out, each with why (the host exempted it, or it contains the
    /// workspace or a writable root). Never silent: the launcher says so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped_denied_read_paths: Vec<DroppedDeniedPath>,
    /// Built-in protected paths, resolved (the seed's four in the workspace, git's execution
    /// surface in the git directories the host measured), in built-in order, each with its rule.
    pub protected_paths: Vec<PolicyProtectedPath>,
    /// Built-in protected paths the host configuration exempted. Never silent: the launcher
    /// says so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped_protected_paths: Vec<DroppedProtectedPath>,
    pub allow_dedicated_direct_override: bool,
    /// `spec.budgets` as declared (the launcher may only tighten them).
    pub budgets: Budgets,
    /// The task contract whose `spec.budgets` is the envelope, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_contract: Option<ContractEnvelope>,
    /// The host loopback ports the sandbox may reach under `loopback-only` (sorted): every other
    /// host port, address and socket stays out of reach.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loopback_ports: Vec<u16>,
    /// The effective domain allowlist (canonical entries, sorted): the policy's, or the
    /// launcher's narrower one. Absent when neither names one (the network mode is in charge),
    /// which keeps such decisions byte-identical to those of engines without allowlists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_domains: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_domains_origin: Option<Origin>,
    /// `--writable`: the only writable places of the workspace (in the order given). Absent:
    /// the whole workspace is writable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writable_roots: Option<Vec<String>>,
    /// `--pass-env`: the only variables the command sees (sorted). Absent: the host's or the
    /// default allowlist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass_environment: Option<Vec<String>>,
    /// Host pathname Unix sockets the command may connect to (resolved, sorted): the policy's
    /// `allowedUnixSockets`, or the launcher's `--allow-unix-socket`. Every other host socket
    /// stays out of reach.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_unix_sockets: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_unix_sockets_origin: Option<Origin>,
    /// Who set `loopbackPorts`: the policy (`declared`) or `--allow-host-port` (`flag`).
    /// Absent when no port is listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loopback_ports_origin: Option<Origin>,
}

impl EffectivePolicy {
    /// The allowlist the host's filtering proxy must enforce, when egress is filtered: a list
    /// other than `*` with `allow-outbound` (even an empty one, which refuses every
    /// connection), or a non-empty list with `loopback-only`. `[]` with `none` or
    /// `loopback-only` needs no proxy: the mode already allows no outbound traffic.
    pub fn filtered_egress(&self) -> Option<&[String]> {
        let list = self.allowed_domains.as_deref()?;
        if list.len() == 1 && list.first().is_some_and(|entry| entry == "*") {
            return None;
        }
        match self.network_mode {
            NetworkMode::AllowOutbound => Some(list),
            NetworkMode::LoopbackOnly if !list.is_empty() => Some(list),
            _ => None,
        }
    }
}

/// What happened to one candidate backend during negotiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CandidateVerdict {
    Selected,
    /// The probe said unavailable, or no probe was recorded.
    Unavailable,
    /// Available, but the host forbids it (turnkey Docker, `direct-dedicated` without opt-in).
    Blocked,
    /// Available, but missing a required capability or the network mode.
    Insufficient,
    /// An earlier candidate was selected.
    NotConsidered,
}

impl CandidateVerdict {
    /// The verdict's name in the JSON (`selected`, `not-considered`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            CandidateVerdict::Selected => "selected",
            CandidateVerdict::Unavailable => "unavailable",
            CandidateVerdict::Blocked => "blocked",
            CandidateVerdict::Insufficient => "insufficient",
            CandidateVerdict::NotConsidered => "not-considered",
        }
    }
}

/// One candidate's verdict and the reason for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateTrace {
    pub backend: Backend,
    pub verdict: CandidateVerdict,
    pub reason: String,
    /// Required capabilities the probe lacks (sorted), for `insufficient`.
    pub missing_capabilities: Vec<Capability>,
}

/// What the launcher applies, with nothing left to interpret: resolved absolute paths, the
/// network as it will be applied, the budgets it will enforce, the environment allowlist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfinementPlan {
    pub backend: Backend,
    /// `sandbox`, or `workspace` (unsandboxed by request; the backend is `direct-dedicated`).
    pub execution_mode: ExecutionMode,
    pub network: PlanNetwork,
    pub workspace_dir: String,
    /// The workspace first, then the host's writable roots (deduplicated, in host order).
    pub writable_roots: Vec<String>,
    /// Whether everything outside the writable roots is read-only.
    pub read_only_root: bool,
    /// Paths made unreadable (empty when the backend applies no filesystem masks).
    pub denied_read_paths: Vec<String>,
    /// The policy's protected paths, each marked enforced (read-only, existing or not) or not
    /// (the backend cannot mask it, and the launcher says so before the command starts).
    pub protected_paths: Vec<ProtectedPath>,
    /// Whether a seccomp/container syscall filter is applied.
    pub syscall_filter: bool,
    /// Whether the whole process tree is reaped when the step ends.
    pub process_tree_cleanup: bool,
    /// The budgets the launcher enforces.
    pub budgets: EffectiveBudgets,
    /// `linux-landlock`: the `/proc` the sandbox gets, from the chosen probe; init applies it
    /// or refuses to start the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_proc: Option<crate::model::LandlockProc>,
    /// The environment allowlist the launcher applies to its own environment.
    pub environment: EnvironmentPolicy,
    /// Host pathname Unix sockets the command may connect to, each bound into the sandbox at
    /// its path (sorted by path); every other host socket stays out of reach. Omitted when
    /// empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unix_sockets: Vec<UnixSocketGrant>,
    /// What the launcher says on stderr before the command starts, one line each: every budget
    /// request that was clamped, protections this backend does not apply (protected or denied
    /// paths), credential stores left readable, and an unsandboxed run. Empty: nothing to say.
    pub warnings: Vec<String>,
}

/// One host Unix socket the command may connect to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnixSocketGrant {
    /// Where the command connects: the allowed path, resolved.
    pub path: String,
    /// The socket the host measured there (every symlink resolved): what is bound at `path`.
    pub target: String,
    /// Why the socket grants root, when it does and the host configuration allowed it anyway
    /// (`allowRootGrantingSockets`). Omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grants_root: Option<String>,
}

/// The network as the launcher applies it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum PlanNetwork {
    /// No network at all.
    None,
    /// The sandbox's own network namespace, where these ports of the host's loopback
    /// (127.0.0.1 and ::1) are reachable and nothing else of the host or beyond.
    LoopbackOnly {
        #[serde(rename = "hostPorts")]
        host_ports: Vec<u16>,
    },
    /// `loopback-only` on a backend without network namespaces (`macos-seatbelt`): the host's
    /// own loopback (127.0.0.1 and ::1), every port of it, and nothing else. The sandbox has
    /// no loopback of its own to keep apart from the host's; the plan's warnings say so (and a
    /// policy listing `loopbackPorts` is refused there: they could not be narrowed to).
    HostLoopback,
    /// Unrestricted outbound traffic.
    AllowOutbound,
    /// The sandbox's own network namespace, whose only way out is the host's filtering proxy,
    /// allowing exactly these entries (`host`, `*.suffix`, IP literals, optional `:port`;
    /// empty: every connection is refused), plus these host loopback ports (`loopback-only`
    /// with domains).
    Filtered {
        allowlist: Vec<String>,
        #[serde(rename = "hostPorts")]
        host_ports: Vec<u16>,
    },
}

impl PlanNetwork {
    /// The mode's name in the JSON (`none`, `loopback-only`, `host-loopback`,
    /// `allow-outbound`, `filtered`).
    pub fn as_str(&self) -> &'static str {
        match self {
            PlanNetwork::None => "none",
            PlanNetwork::LoopbackOnly { .. } => "loopback-only",
            PlanNetwork::HostLoopback => "host-loopback",
            PlanNetwork::AllowOutbound => "allow-outbound",
            PlanNetwork::Filtered { .. } => "filtered",
        }
    }
}

/// A protected path and whether the chosen backend keeps it read-only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedPath {
    pub path: String,
    pub enforced: bool,
}

/// Who set an effective budget or asked for one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetOrigin {
    /// The policy's `spec.budgets`.
    Policy,
    /// The launcher's flag (`--timeout`, `--memory`, `--max-procs`, `--cpu-seconds`).
    Flag,
    /// The task contract's `spec.budgets` (part of the envelope).
    TaskContract,
    /// The runtime profile's budgets (part of the envelope).
    RuntimeProfile,
    /// The host configuration's ceiling.
    HostCeiling,
}

impl BudgetOrigin {
    /// Whether this source caps the others (the envelope and the ceiling) rather than asks.
    pub fn is_cap(self) -> bool {
        matches!(
            self,
            BudgetOrigin::TaskContract | BudgetOrigin::RuntimeProfile | BudgetOrigin::HostCeiling
        )
    }
}

/// Which budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetKind {
    Timeout,
    Memory,
    MaxProcesses,
    Cpu,
}

/// One effective budget: the limit enforced and who set it (the tightest of the policy, the
/// launcher's flag, the task contract, the runtime profile and the host's ceiling; on a tie,
/// the first of those).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetLimit {
    pub value: u64,
    pub origin: BudgetOrigin,
}

/// A budget asked for and not granted: a looser value than the one enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetClamp {
    pub budget: BudgetKind,
    /// What was asked for, in the budget's unit.
    pub requested: u64,
    pub requested_by: BudgetOrigin,
    /// What is enforced instead.
    pub limit: u64,
    pub limited_by: BudgetOrigin,
}

/// The budgets the launcher enforces on the whole process tree; `null` means no limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveBudgets {
    pub timeout_millis: Option<BudgetLimit>,
    pub memory_bytes: Option<BudgetLimit>,
    pub max_processes: Option<BudgetLimit>,
    pub cpu_seconds: Option<BudgetLimit>,
    /// Processes of Palisade's own that run inside the tree (the egress bridge), allowed on top
    /// of `maxProcesses` so the command keeps the number it was given.
    pub helper_processes: u32,
    /// Processes of the launcher's own at the top of the tree (bwrap's monitor and PID 1;
    /// init's outer process and PID 1; docker-init), which count in it: allowed on top of
    /// `maxProcesses` too. Decided from the backend, so that the limit the kernel applies is
    /// the plan's.
    pub launcher_processes: u32,
    /// Every request that was not granted, in budget order (policy before flag).
    pub clamped: Vec<BudgetClamp>,
}

/// The environment allowlist the launcher applies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentPolicy {
    /// The entries: exact names and `PREFIX*` patterns (the host's, in its order, or the
    /// built-in default list). A pattern never passes a secret-looking name.
    pub allowlist: Vec<String>,
    /// Exact entries that look like secrets (sorted): each reaches the command only because the
    /// host named it, which is why the decision says so.
    pub explicit_secrets: Vec<String>,
    pub origin: EnvironmentOrigin,
}

/// Where the environment allowlist came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnvironmentOrigin {
    /// The built-in default list.
    Default,
    /// The host configuration's list.
    Host,
    /// The launcher's `--pass-env` (`policyFlags.passEnvironment`), narrower than the host's
    /// or the default list.
    Flag,
}

/// A run without a sandbox, by explicit request. Present only for `workspace` decisions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionModeReport {
    pub mode: ExecutionMode,
    /// Always `false` here: nothing confines the command's files, network or syscalls.
    pub sandboxed: bool,
    /// `default` (no host configuration forbids the mode) or `host` (the host allows it).
    pub permitted_by: Origin,
    pub reason: String,
}

/// A field-level problem in the policy or host facts.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldError {
    /// `spec.sandbox.preferredBackends[3]`, `host.workspaceDir`, or `document` for the whole text.
    pub path: String,
    pub message: String,
}

/// The full output document. Fields that do not apply to an outcome are omitted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub schema_version: &'static str,
    pub engine_version: &'static str,
    /// SHA-256 of the canonical JSON of the input, binding this output to what produced it.
    pub input_digest: String,
    /// `decision` or `refusal`.
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<RefusalCode>,
    pub message: String,
    /// Every offending field (policy or host facts invalid); otherwise empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// Present once the policy has been resolved (decisions and negotiation refusals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<EffectivePolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// The chosen probe's capabilities, sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provided_capabilities: Option<Vec<Capability>>,
    /// The chosen probe's limitations, as recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limitations: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<ConfinementPlan>,
    /// One entry per candidate, in preference order; empty when the policy never resolved.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<CandidateTrace>,
    /// `workspace` decisions: unsandboxed by request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_mode: Option<ExecutionModeReport>,
}

/// Canonical JSON of any serializable value: sorted keys, no whitespace.
pub fn canonical_json<T: Serialize>(value: &T) -> String {
    // Serialization of these types cannot fail: no maps with non-string keys.
    match crate::canonical::to_string(value) {
        Ok(text) => text,
        Err(error) => format!("{{\"canonicalizationError\":{:?}}}", error.to_string()),
    }
}

/// Lower-case hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for nibble in digest.iter().flat_map(|byte| [byte >> 4, byte & 0xf]) {
        // A nibble is always a hex digit; `from_digit` gives it lower-case.
        hex.extend(char::from_digit(u32::from(nibble), 16));
    }
    hex
}

#[cfg(test)]
mod refusal_code_tests {
    use super::RefusalCode;

    /// Python and Node read the WIT enum's case name and upper-snake it (`sandbox-policy-invalid`
    /// → `SANDBOX_POLICY_INVALID`); that must give exactly the code the Rust host prints.
    #[test]
    fn wit_case_names_spell_the_codes() {
        let wit = include_str!("../../wit/palisade.wit");
        let block = wit
            .split("enum refusal-code {")
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .unwrap_or_default();
        let from_wit: Vec<String> = block
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with("//"))
            .map(|case| case.trim_end_matches(',').to_uppercase().replace('-', "_"))
            .collect();
        let from_engine: Vec<&str> = RefusalCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(from_wit, from_engine);
        for code in RefusalCode::ALL {
            let json = serde_json::to_string(&code).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }
}
