"""The package's types: the `Decision` it returns, and the JSON shapes it reads and writes.

`Decision` and `EngineInfo` are the package's own (attributes in snake_case). Everything under
them is the engine's canonical JSON as `json.loads` gives it, typed here with `TypedDict`s whose
keys are the JSON's own (camelCase, as in `docs/contract.md`), so a key reads the same in Python,
in Node (`index.d.ts` declares the same interfaces) and in an audit record. The input types are
the JSON form `palisade decide --input` reads.

INVARIANT: these types mirror `engine/src/output.rs` and `engine/src/model.rs`. The corpus run
(`tests/xruntime/run.sh`) checks every decision of the conformance corpus against them, and
checks that `index.d.ts` declares the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, TypedDict

# --- Names (closed sets, spelt as in the JSON) ---------------------------------------------

Backend = Literal["macos-seatbelt", "linux-bwrap", "linux-landlock", "docker", "direct-dedicated"]
NetworkMode = Literal["none", "loopback-only", "allow-outbound"]
Capability = Literal[
    "filesystemReadContainment",
    "filesystemWriteContainment",
    "protectedPathReadOnlyMask",
    "networkIsolation",
    "processTreeCleanup",
    "syscallFiltering",
]
SessionKind = Literal["turnkey", "cli", "managed"]
ExecutionMode = Literal["sandbox", "workspace"]
#: The `/proc` of a `linux-landlock` sandbox: its PID namespace's own, or the host's with every
#: process directory denied.
LandlockProc = Literal["own", "host-processes-denied"]
RefusalCode = Literal[
    "SANDBOX_POLICY_INVALID",
    "SANDBOX_BACKEND_UNAVAILABLE",
    "SANDBOX_CAPABILITY_INSUFFICIENT",
    "HOST_FACTS_INVALID",
    "EXECUTION_MODE_FORBIDDEN",
    "SANDBOX_WRITABLE_ROOT_UNSAFE",
    "SANDBOX_UNIX_SOCKET_REFUSED",
]
UnixSocketKind = Literal["socket", "missing", "not-socket"]
CandidateVerdict = Literal["selected", "unavailable", "blocked", "insufficient", "not-considered"]
BudgetOrigin = Literal["policy", "flag", "task-contract", "runtime-profile", "host-ceiling"]
BudgetKind = Literal["timeout", "memory", "max-processes", "cpu"]
PlanNetworkMode = Literal["none", "loopback-only", "host-loopback", "allow-outbound", "filtered"]
EnvironmentOrigin = Literal["default", "host", "flag"]

# --- The decision input (the JSON form of `palisade decide --input`) -----------------------


class BudgetLimits(TypedDict, total=False):
    """Budget limits in the contract's units; an absent key sets no limit."""

    timeoutMillis: int
    memoryBytes: int
    maxProcesses: int
    cpuSeconds: int


class _BackendProbeRequired(TypedDict):
    """What the host measured about one backend."""

    backend: Backend
    available: bool
    reason: str
    capabilities: List[Capability]
    networkModes: List[NetworkMode]
    networkBridge: bool
    version: str
    limitations: List[str]


class BackendProbe(_BackendProbeRequired, total=False):
    """What the host measured about one backend; `landlockProc` only for `linux-landlock`."""

    landlockProc: LandlockProc


class UnixSocketFact(TypedDict):
    """What the host measured at one allowed host Unix socket (symlinks followed)."""

    path: str
    kind: UnixSocketKind
    #: Where the socket really is; empty unless `kind` is `socket`.
    target: str
    ownerUid: int
    group: str
    #: Permission bits.
    mode: int
    callerInGroup: bool


class _HostFactsRequired(TypedDict):
    os: str
    arch: str
    sessionKind: SessionKind
    githubActions: bool
    allowDirectDedicated: bool
    homeDir: str
    workspaceDir: str
    writableRoots: List[str]
    defaultBackendOrder: List[Backend]


class HostFacts(_HostFactsRequired, total=False):
    """Facts about the host (`palisade doctor --json` measures them); the optional ones come
    from the host configuration and the Docker runtime profile, omitted when not set."""

    environmentAllowlist: List[str]
    allowWorkspaceMode: bool
    budgetCeilings: BudgetLimits
    deniedReadPaths: List[str]
    exemptDeniedReadPaths: List[str]
    runtimeProfileBudgets: BudgetLimits
    loopbackPorts: List[int]
    allowHomeWritable: bool
    unixSockets: List[UnixSocketFact]
    allowRootGrantingSockets: List[str]
    sshAuthSock: str
    gitDirs: List[str]
    exemptProtectedPaths: List[str]
    statePaths: List[str]
    keyPaths: List[str]


class NamedDocument(TypedDict):
    """A document's name (recorded, never opened) and its text."""

    name: str
    text: str


class PolicyFlags(TypedDict, total=False):
    """The launcher's policy flags (`--network`, `--deny-read`, ...): they form an omitted
    policy and may only tighten a declared one; an absent key is a flag not given."""

    networkMode: NetworkMode
    allowedDomains: List[str]
    deniedReadPaths: List[str]
    writableRoots: List[str]
    preferredBackends: List[Backend]
    requiredCapabilities: List[Capability]
    passEnvironment: List[str]
    allowedUnixSockets: List[str]
    loopbackPorts: List[int]


class _DecisionInputRequired(TypedDict):
    document: Optional[str]
    documentName: str
    host: HostFacts
    probes: List[BackendProbe]


class DecisionInput(_DecisionInputRequired, total=False):
    """Everything one decision depends on; the optional keys are the launcher's inputs."""

    narrowAllowedDomains: List[str]
    executionMode: ExecutionMode
    budgetFlags: BudgetLimits
    taskContract: NamedDocument
    policyFlags: PolicyFlags


# --- The decision's JSON (schema `palisade.decision/v3`) -----------------------------------


class BudgetLimit(TypedDict):
    """One effective budget and who set it."""

    value: int
    origin: BudgetOrigin


class BudgetClamp(TypedDict):
    """A budget asked for and not granted."""

    budget: BudgetKind
    requested: int
    requestedBy: BudgetOrigin
    limit: int
    limitedBy: BudgetOrigin


class EffectiveBudgets(TypedDict):
    """The budgets the launcher enforces; `None` means no limit."""

    timeoutMillis: Optional[BudgetLimit]
    memoryBytes: Optional[BudgetLimit]
    maxProcesses: Optional[BudgetLimit]
    cpuSeconds: Optional[BudgetLimit]
    helperProcesses: int
    launcherProcesses: int
    clamped: List[BudgetClamp]


class _NetworkRequired(TypedDict):
    mode: PlanNetworkMode


class Network(_NetworkRequired, total=False):
    """The network as applied: `hostPorts` for `loopback-only` and `filtered`, `allowlist` for
    `filtered`."""

    hostPorts: List[int]
    allowlist: List[str]


class ProtectedPath(TypedDict):
    """A protected path, and whether the chosen backend keeps it read-only."""

    path: str
    enforced: bool


class EnvironmentPolicy(TypedDict):
    """The environment allowlist the launcher applies."""

    allowlist: List[str]
    explicitSecrets: List[str]
    origin: EnvironmentOrigin


class _UnixSocketGrantRequired(TypedDict):
    path: str
    target: str


class UnixSocketGrant(_UnixSocketGrantRequired, total=False):
    """A host Unix socket the command may connect to, bound at `path`; `grantsRoot` says why
    it grants root when the host configuration allowed one that does."""

    grantsRoot: str


class _PlanRequired(TypedDict):
    """What the launcher applies, with nothing left to interpret (`docs/contract.md`)."""

    backend: Backend
    executionMode: ExecutionMode
    network: Network
    workspaceDir: str
    writableRoots: List[str]
    readOnlyRoot: bool
    deniedReadPaths: List[str]
    protectedPaths: List[ProtectedPath]
    syscallFilter: bool
    processTreeCleanup: bool
    budgets: EffectiveBudgets
    environment: EnvironmentPolicy
    warnings: List[str]


class Plan(_PlanRequired, total=False):
    """What the launcher applies; `unixSockets` is omitted when no host socket is allowed,
    `landlockProc` but for `linux-landlock`."""

    unixSockets: List[UnixSocketGrant]
    landlockProc: LandlockProc


class FieldError(TypedDict):
    """One offending field of the policy, the launcher's input or the host facts."""

    path: str
    message: str


class CandidateTrace(TypedDict):
    """One candidate backend's verdict and why."""

    backend: Backend
    verdict: CandidateVerdict
    reason: str
    missingCapabilities: List[Capability]


# --- The package's own values --------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """One decision or refusal, exactly as the engine component returned it.

    `canonical_json` is the engine's own text and `digest` its SHA-256 (checked against the
    text when the decision is made); every other attribute is read from that text, so none can
    disagree with it. Compare or store `canonical_json` and `digest`, never a re-serialized
    `report`: only they are the decision's bytes.
    """

    #: `"decision"` (a backend was chosen) or `"refusal"` (nothing may be launched).
    outcome: Literal["decision", "refusal"]
    #: The decision as canonical JSON (sorted keys, no whitespace): the exact bytes.
    canonical_json: str
    #: Lower-case hex SHA-256 of `canonical_json` (UTF-8).
    digest: str
    #: One line saying what was decided, or what went wrong.
    message: str
    #: SHA-256 of the engine's canonical form of the input (of the raw text, if it did not parse).
    input_digest: str
    engine_version: str
    schema_version: str
    #: The chosen backend; `None` for a refusal.
    backend: Optional[Backend]
    #: What the launcher applies; `None` for a refusal.
    plan: Optional[Plan]
    #: The plan's warnings (empty for a refusal).
    warnings: List[str]
    #: Why nothing was chosen (`SANDBOX_POLICY_INVALID`, ...); `None` for a decision.
    code: Optional[RefusalCode]
    #: Every offending field (the first 100); empty for a decision.
    errors: List[FieldError]
    #: Each candidate's verdict, in preference order (absent from some refusals: empty).
    trace: List[CandidateTrace]
    #: The whole canonical JSON, parsed (`policy`, `providedCapabilities`, `limitations`, ...).
    report: Dict[str, Any] = field(repr=False)

    @property
    def ok(self) -> bool:
        """Whether a backend was chosen."""
        return self.outcome == "decision"


@dataclass(frozen=True)
class EngineInfo:
    """The engine's identity, as audit records carry it, and the component's digest."""

    engine_version: str
    wit_version: str
    schema_version: str
    #: SHA-256 of the component this package ships (checked when it loads).
    component_sha256: str
