//! The engine's input types: the decision input, host facts and backend probes.
//!
//! These mirror `wit/palisade.wit` one to one. Their JSON form (camelCase fields, kebab-case
//! backend and network-mode names, camelCase capability names) is the `SandboxPolicyInput` that
//! `palisade decide --input`, `--facts`, audit records and the conformance corpus use. Unknown
//! fields are rejected: a host that records a fact the engine ignores would make replay lie.

use serde::{Deserialize, Serialize};

/// A sandbox backend. Declaration order is the canonical order used when sorting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    MacosSeatbelt,
    LinuxBwrap,
    LinuxLandlock,
    Docker,
    DirectDedicated,
}

impl Backend {
    /// Every backend, in canonical order.
    pub const ALL: [Backend; 5] = [
        Backend::MacosSeatbelt,
        Backend::LinuxBwrap,
        Backend::LinuxLandlock,
        Backend::Docker,
        Backend::DirectDedicated,
    ];

    /// The name used in policies, JSON and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::MacosSeatbelt => "macos-seatbelt",
            Backend::LinuxBwrap => "linux-bwrap",
            Backend::LinuxLandlock => "linux-landlock",
            Backend::Docker => "docker",
            Backend::DirectDedicated => "direct-dedicated",
        }
    }

    /// Parses a policy name; exact case only.
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.as_str() == name)
    }
}

/// The socket policy enforced at the OS or container boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    None,
    LoopbackOnly,
    AllowOutbound,
}

impl NetworkMode {
    /// Every mode, in canonical order.
    pub const ALL: [NetworkMode; 3] = [
        NetworkMode::None,
        NetworkMode::LoopbackOnly,
        NetworkMode::AllowOutbound,
    ];

    /// The name used in policies, JSON and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::LoopbackOnly => "loopback-only",
            NetworkMode::AllowOutbound => "allow-outbound",
        }
    }

    /// Parses a policy name; exact case only.
    pub fn from_name(name: &str) -> Option<NetworkMode> {
        NetworkMode::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

/// An isolation guarantee. Declaration order is the canonical order used when sorting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Capability {
    FilesystemReadContainment,
    FilesystemWriteContainment,
    ProtectedPathReadOnlyMask,
    NetworkIsolation,
    ProcessTreeCleanup,
    SyscallFiltering,
}

impl Capability {
    /// Every capability, in canonical order.
    pub const ALL: [Capability; 6] = [
        Capability::FilesystemReadContainment,
        Capability::FilesystemWriteContainment,
        Capability::ProtectedPathReadOnlyMask,
        Capability::NetworkIsolation,
        Capability::ProcessTreeCleanup,
        Capability::SyscallFiltering,
    ];

    /// The name used in policies, JSON and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::FilesystemReadContainment => "filesystemReadContainment",
            Capability::FilesystemWriteContainment => "filesystemWriteContainment",
            Capability::ProtectedPathReadOnlyMask => "protectedPathReadOnlyMask",
            Capability::NetworkIsolation => "networkIsolation",
            Capability::ProcessTreeCleanup => "processTreeCleanup",
            Capability::SyscallFiltering => "syscallFiltering",
        }
    }

    /// Parses a policy name; exact case only.
    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// The kind of host session deciding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionKind {
    Turnkey,
    Cli,
    Managed,
}

impl SessionKind {
    /// The name used in JSON and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::Turnkey => "turnkey",
            SessionKind::Cli => "cli",
            SessionKind::Managed => "managed",
        }
    }
}

/// How the command is to be run. Absent from an input means `sandbox`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutionMode {
    /// Under the negotiated sandbox backend.
    Sandbox,
    /// Without isolation, by explicit request (Skep's trusted `workspace` mode): supervised,
    /// with budgets, tree cleanup and the environment allowlist, and nothing else.
    Workspace,
}

impl ExecutionMode {
    /// The name used in JSON and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionMode::Sandbox => "sandbox",
            ExecutionMode::Workspace => "workspace",
        }
    }
}

/// Budget limits in the contract's units: a launcher's flags ([`DecisionInput::budget_flags`]),
/// or a host's ceilings ([`HostFacts::budget_ceilings`]). Absent fields set no limit; absent
/// fields are omitted from the JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetLimits {
    /// Wall-clock time, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_millis: Option<u64>,
    /// Memory for the whole process tree, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Processes (and threads) alive at once in the tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<u64>,
    /// CPU time of the whole tree, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
}

/// What the host measured about one backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendProbe {
    pub backend: Backend,
    pub available: bool,
    pub reason: String,
    pub capabilities: Vec<Capability>,
    pub network_modes: Vec<NetworkMode>,
    /// Whether the backend can put Palisade's network bridge in front of the command (filtered
    /// egress and listed host loopback ports need it).
    pub network_bridge: bool,
    pub version: String,
    pub limitations: Vec<String>,
    /// `linux-landlock`: the `/proc` its sandbox gets, as the host's trial found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_proc: Option<LandlockProc>,
}

/// The `/proc` of a `linux-landlock` sandbox (Landlock has no mount namespace of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LandlockProc {
    /// A procfs of the sandbox's PID namespace: no other process is visible.
    Own,
    /// The host's procfs, every process directory of it denied by the ruleset.
    HostProcessesDenied,
}

/// Facts about the host, measured by the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostFacts {
    pub os: String,
    pub arch: String,
    pub session_kind: SessionKind,
    pub github_actions: bool,
    pub allow_direct_dedicated: bool,
    pub home_dir: String,
    pub workspace_dir: String,
    pub writable_roots: Vec<String>,
    pub default_backend_order: Vec<Backend>,
    /// The host configuration's environment allowlist (exact names and `PREFIX*` patterns).
    /// Absent: the built-in [`crate::environment::DEFAULT_ALLOWLIST`]. Omitted from the JSON
    /// when absent, like every field added after the first release, so older inputs keep their
    /// canonical form and digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_allowlist: Option<Vec<String>>,
    /// Whether the host permits the `workspace` execution mode. Absent: permitted (no host
    /// configuration says otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_workspace_mode: Option<bool>,
    /// The host configuration's budget ceilings: no run's budget is above these, whatever the
    /// policy or the launcher asks. Absent: no ceilings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_ceilings: Option<BudgetLimits>,
    /// The host configuration's own denied read paths (absolute or `~/`), added to every
    /// policy's. Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied_read_paths: Option<Vec<String>>,
    /// Built-in denied read paths the host configuration exempts, spelled as the built-in list
    /// spells them (`~/.npmrc`). Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exempt_denied_read_paths: Option<Vec<String>>,
    /// The selected runtime profile's budgets: part of the envelope the taskpack and the flags
    /// may only tighten within. Absent: no runtime profile, or one without budgets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_profile_budgets: Option<BudgetLimits>,
    /// The host loopback ports a policy may make reachable under `loopback-only`. Absent: any
    /// the policy lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loopback_ports: Option<Vec<u16>>,
    /// Whether the host configuration lets the home directory itself be a writable root.
    /// Absent: it may not. `/` and the home's ancestors never may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_home_writable: Option<bool>,
    /// What the host measured at each host Unix socket the policy or the flags allow (every
    /// such path, resolved; sorted by path). Absent: none allowed, none measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_sockets: Option<Vec<UnixSocketFact>>,
    /// The host configuration's `allowRootGrantingSockets`: sockets that grant root (a
    /// container daemon's) a policy may still allow, by path (absolute, normalised). Absent:
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_root_granting_sockets: Option<Vec<String>>,
    /// The value of `SSH_AUTH_SOCK` in the launcher's environment, measured when a policy
    /// allows host Unix sockets: the variable passes only when it names one of them. Absent:
    /// unset, or not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth_sock: Option<String>,
    /// The git directories of the repository that holds the workspace, as the host found them
    /// the way git does (absolute, normalised): its git directory, the common directory a
    /// linked worktree's points to, and each submodule's under `modules/`. Empty: the
    /// workspace is in no repository. Absent: not measured, and the engine assumes `.git` at
    /// the workspace's root. See [`crate::protected`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_dirs: Option<Vec<String>>,
    /// Built-in protected-path rules the host configuration exempts, by name
    /// ([`crate::protected::EXEMPTABLE_RULES`]: `.git/hooks`, ...). Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exempt_protected_paths: Option<Vec<String>>,
    /// Palisade's own state as the host measured it (absolute, normalised, existing or not):
    /// its host configuration files and directories, its caches, the runtime-profile file —
    /// what a later run trusts. Inside a writable root each is masked read-only; a writable
    /// root inside one is refused. Absent: not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_paths: Option<Vec<String>>,
    /// Palisade's audit-signing keys as the host found them (each directory that holds one):
    /// denied read paths in every sandbox, never exempted; they imply read containment.
    /// Absent or empty: no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_paths: Option<Vec<String>>,
}

/// What is at a path the policy allows as a host Unix socket, symlinks followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnixSocketKind {
    /// A socket.
    Socket,
    /// Nothing (or a dangling symlink).
    Missing,
    /// Something other than a socket.
    NotSocket,
}

impl UnixSocketKind {
    /// The kind's name in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            UnixSocketKind::Socket => "socket",
            UnixSocketKind::Missing => "missing",
            UnixSocketKind::NotSocket => "not-socket",
        }
    }
}

/// What the host measured at one allowed host Unix socket. Trusted as recorded: the engine
/// decides from it whether the socket grants root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnixSocketFact {
    /// The path as allowed, resolved (`~/` expanded, normalised).
    pub path: String,
    pub kind: UnixSocketKind,
    /// Where the socket really is (every symlink resolved); empty unless `socket`.
    pub target: String,
    /// The socket's owner.
    pub owner_uid: u32,
    /// The socket's group, by name (its number when it has none).
    pub group: String,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Whether the invoking user is in that group (primary or supplementary).
    pub caller_in_group: bool,
}

impl HostFacts {
    /// A Linux (x86-64) CLI host with home `home_dir` and workspace `workspace_dir`, bwrap
    /// first, and nothing else configured: no writable roots, no host configuration, direct
    /// runs not allowed. What tests and tools start from, changing only what they are about.
    pub fn linux_cli(home_dir: impl Into<String>, workspace_dir: impl Into<String>) -> Self {
        HostFacts {
            os: "linux".into(),
            arch: "x86_64".into(),
            session_kind: SessionKind::Cli,
            github_actions: false,
            allow_direct_dedicated: false,
            home_dir: home_dir.into(),
            workspace_dir: workspace_dir.into(),
            writable_roots: vec![],
            default_backend_order: vec![Backend::LinuxBwrap],
            environment_allowlist: None,
            allow_workspace_mode: None,
            budget_ceilings: None,
            denied_read_paths: None,
            exempt_denied_read_paths: None,
            allow_home_writable: None,
            runtime_profile_budgets: None,
            loopback_ports: None,
            unix_sockets: None,
            allow_root_granting_sockets: None,
            ssh_auth_sock: None,
            git_dirs: None,
            exempt_protected_paths: None,
            state_paths: None,
            key_paths: None,
        }
    }
}

/// Everything one decision depends on (the seed's `SandboxPolicyInput`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionInput {
    pub document: Option<String>,
    pub document_name: String,
    pub host: HostFacts,
    pub probes: Vec<BackendProbe>,
    /// The launcher's `--allow-domain` entries, which may only narrow the policy's
    /// `allowedDomains`. Omitted from the JSON when absent, so inputs without it keep the
    /// canonical form (and digest) they had before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub narrow_allowed_domains: Option<Vec<String>>,
    /// The launcher's requested execution mode. Absent: `sandbox` (and omitted from the JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_mode: Option<ExecutionMode>,
    /// The launcher's budget flags (`--timeout`, `--memory`, ...), which may only tighten the
    /// policy's `spec.budgets`. Absent: none given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_flags: Option<BudgetLimits>,
    /// A Loopwright `TaskContract` document, whose `spec.budgets` is the envelope the taskpack
    /// and the flags may only tighten within. Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_contract: Option<NamedDocument>,
    /// The launcher's policy flags (`--network`, `--deny-read`, ...): without a declared
    /// `spec.sandbox` they form the policy over the omitted-policy defaults; with one they may
    /// only tighten it. Absent: none given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_flags: Option<PolicyFlags>,
}

/// The launcher's policy flags, named as `spec.sandbox` names its fields (so a field error's
/// path, `policyFlags.deniedReadPaths[0]`, reads like the policy's own). An empty list, or an
/// absent mode, is a flag not given; empty lists are omitted from the JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFlags {
    /// `--network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_mode: Option<NetworkMode>,
    /// `--allow-domain`, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_domains: Vec<String>,
    /// `--deny-read` (absolute or `~/`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_read_paths: Vec<String>,
    /// `--writable`: the only writable places of the workspace (absolute, normalised, inside
    /// it); the host's own writable roots stay writable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_roots: Vec<String>,
    /// `--backend`, in preference order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_backends: Vec<Backend>,
    /// `--require`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_capabilities: Vec<Capability>,
    /// `--pass-env`: exact variable names, each passed by the host's (or the default)
    /// environment allowlist; the command sees these and no others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_environment: Vec<String>,
    /// `--allow-unix-socket`: host Unix sockets (absolute or `~/`) the command may connect to;
    /// with a declared `spec.sandbox`, each must be one it allows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_unix_sockets: Vec<String>,
    /// `--allow-host-port`: host loopback ports the command may reach (`loopbackPorts`):
    /// without a declared `spec.sandbox` they form the list, and the network is
    /// `loopback-only` unless `--network` names a mode; with one, each must be one it lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loopback_ports: Vec<u16>,
}

impl PolicyFlags {
    /// Whether no flag was given.
    pub fn is_empty(&self) -> bool {
        *self == PolicyFlags::default()
    }
}

/// A document's text and where it came from (recorded, never opened).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamedDocument {
    pub name: String,
    pub text: String,
}

/// Host facts and probes without a document: the `--facts` file format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordedFacts {
    pub host: HostFacts,
    pub probes: Vec<BackendProbe>,
}
