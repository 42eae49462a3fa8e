// Types of the palisade-engine package.
//
// `Decision` and `EngineInfo` are the package's own. Everything under them is the engine's
// canonical JSON as `JSON.parse` gives it, keys as in `docs/contract.md`; the input types are the
// JSON form `palisade decide --input` reads. Integers are plain numbers: the contract's are
// bounded well below 2^53.
//
// INVARIANT: these interfaces declare the same keys as the Python package's TypedDicts
// (`packages/python/palisade_engine/_types.py`); the corpus run (`tests/xruntime/run.sh`) checks
// both against each other, and the Python ones against every decision of the corpus.

// --- Names (closed sets, spelt as in the JSON) ---------------------------------------------

export type Backend = 'macos-seatbelt' | 'linux-bwrap' | 'linux-landlock' | 'docker' | 'direct-dedicated';
export type NetworkMode = 'none' | 'loopback-only' | 'allow-outbound';
export type Capability =
  | 'filesystemReadContainment'
  | 'filesystemWriteContainment'
  | 'protectedPathReadOnlyMask'
  | 'networkIsolation'
  | 'processTreeCleanup'
  | 'syscallFiltering';
export type SessionKind = 'turnkey' | 'cli' | 'managed';
export type ExecutionMode = 'sandbox' | 'workspace';
export type RefusalCode =
  | 'SANDBOX_POLICY_INVALID'
  | 'SANDBOX_BACKEND_UNAVAILABLE'
  | 'SANDBOX_CAPABILITY_INSUFFICIENT'
  | 'HOST_FACTS_INVALID'
  | 'EXECUTION_MODE_FORBIDDEN'
  | 'SANDBOX_WRITABLE_ROOT_UNSAFE'
  | 'SANDBOX_UNIX_SOCKET_REFUSED';
export type UnixSocketKind = 'socket' | 'missing' | 'not-socket';
export type CandidateVerdict = 'selected' | 'unavailable' | 'blocked' | 'insufficient' | 'not-considered';
export type BudgetOrigin = 'policy' | 'flag' | 'task-contract' | 'runtime-profile' | 'host-ceiling';
export type BudgetKind = 'timeout' | 'memory' | 'max-processes' | 'cpu';
export type PlanNetworkMode = 'none' | 'loopback-only' | 'host-loopback' | 'allow-outbound' | 'filtered';
export type EnvironmentOrigin = 'default' | 'host' | 'flag';

// --- The decision input (the JSON form of `palisade decide --input`) -----------------------

/** Budget limits in the contract's units; an absent key sets no limit. */
export interface BudgetLimits {
  timeoutMillis?: number;
  memoryBytes?: number;
  maxProcesses?: number;
  cpuSeconds?: number;
}

/** What the host measured about one backend. */
export interface BackendProbe {
  backend: Backend;
  available: boolean;
  reason: string;
  capabilities: Capability[];
  networkModes: NetworkMode[];
  networkBridge: boolean;
  version: string;
  limitations: string[];
  /** `linux-landlock`: the `/proc` its sandbox gets, as the host's trial found it. */
  landlockProc?: LandlockProc;
}

/** The `/proc` of a `linux-landlock` sandbox: its PID namespace's own, or the host's with every process directory denied. */
export type LandlockProc = 'own' | 'host-processes-denied';

/**
 * Facts about the host (`palisade doctor --json` measures them); the optional ones come from the
 * host configuration and the Docker runtime profile, omitted when not set.
 */
export interface HostFacts {
  os: string;
  arch: string;
  sessionKind: SessionKind;
  githubActions: boolean;
  allowDirectDedicated: boolean;
  homeDir: string;
  workspaceDir: string;
  writableRoots: string[];
  defaultBackendOrder: Backend[];
  environmentAllowlist?: string[];
  allowWorkspaceMode?: boolean;
  budgetCeilings?: BudgetLimits;
  deniedReadPaths?: string[];
  exemptDeniedReadPaths?: string[];
  runtimeProfileBudgets?: BudgetLimits;
  loopbackPorts?: number[];
  allowHomeWritable?: boolean;
  unixSockets?: UnixSocketFact[];
  allowRootGrantingSockets?: string[];
  sshAuthSock?: string;
  /** The git directories of the repository holding the workspace; `[]`: none. Absent: `.git` in the workspace is assumed. */
  gitDirs?: string[];
  /** Git's protected-path rules the host configuration exempts (`.git`, `.git/hooks`, `.git/config`, `.git/config.worktree`). */
  exemptProtectedPaths?: string[];
  /** Palisade's own state as the host measured it; masked where a writable root holds it. */
  statePaths?: string[];
  /** The directories that hold Palisade's signing keys: denied in every sandbox. */
  keyPaths?: string[];
}

/** What the host measured at one allowed host Unix socket (symlinks followed). */
export interface UnixSocketFact {
  path: string;
  kind: UnixSocketKind;
  /** Where the socket really is; empty unless `kind` is `socket`. */
  target: string;
  ownerUid: number;
  group: string;
  /** Permission bits. */
  mode: number;
  callerInGroup: boolean;
}

/** A document's name (recorded, never opened) and its text. */
export interface NamedDocument {
  name: string;
  text: string;
}

/**
 * The launcher's policy flags (`--network`, `--deny-read`, ...): they form an omitted policy and
 * may only tighten a declared one; an absent key is a flag not given.
 */
export interface PolicyFlags {
  networkMode?: NetworkMode;
  allowedDomains?: string[];
  deniedReadPaths?: string[];
  writableRoots?: string[];
  preferredBackends?: Backend[];
  requiredCapabilities?: Capability[];
  passEnvironment?: string[];
  allowedUnixSockets?: string[];
  loopbackPorts?: number[];
}

/** Everything one decision depends on; the optional keys are the launcher's inputs. */
export interface DecisionInput {
  document: string | null;
  documentName: string;
  host: HostFacts;
  probes: BackendProbe[];
  narrowAllowedDomains?: string[];
  executionMode?: ExecutionMode;
  budgetFlags?: BudgetLimits;
  taskContract?: NamedDocument;
  policyFlags?: PolicyFlags;
}

// --- The decision's JSON (schema `palisade.decision/v3`) -----------------------------------

/** One effective budget and who set it. */
export interface BudgetLimit {
  value: number;
  origin: BudgetOrigin;
}

/** A budget asked for and not granted. */
export interface BudgetClamp {
  budget: BudgetKind;
  requested: number;
  requestedBy: BudgetOrigin;
  limit: number;
  limitedBy: BudgetOrigin;
}

/** The budgets the launcher enforces; `null` means no limit. */
export interface EffectiveBudgets {
  timeoutMillis: BudgetLimit | null;
  memoryBytes: BudgetLimit | null;
  maxProcesses: BudgetLimit | null;
  cpuSeconds: BudgetLimit | null;
  helperProcesses: number;
  /** Processes of the launcher's own at the top of the tree (bwrap, init, docker-init), allowed on top of `maxProcesses`. */
  launcherProcesses: number;
  clamped: BudgetClamp[];
}

/** The network as applied: `hostPorts` for `loopback-only` and `filtered`, `allowlist` for `filtered`. */
export interface Network {
  mode: PlanNetworkMode;
  hostPorts?: number[];
  allowlist?: string[];
}

/** A protected path, and whether the chosen backend keeps it read-only. */
export interface ProtectedPath {
  path: string;
  enforced: boolean;
}

/** The environment allowlist the launcher applies. */
export interface EnvironmentPolicy {
  allowlist: string[];
  explicitSecrets: string[];
  origin: EnvironmentOrigin;
}

/** What the launcher applies, with nothing left to interpret (`docs/contract.md`). */
export interface Plan {
  backend: Backend;
  executionMode: ExecutionMode;
  network: Network;
  workspaceDir: string;
  writableRoots: string[];
  readOnlyRoot: boolean;
  deniedReadPaths: string[];
  protectedPaths: ProtectedPath[];
  syscallFilter: boolean;
  processTreeCleanup: boolean;
  budgets: EffectiveBudgets;
  /** `linux-landlock`: the `/proc` the sandbox gets; omitted for every other backend. */
  landlockProc?: LandlockProc;
  environment: EnvironmentPolicy;
  /** Host Unix sockets the command may connect to; omitted when none is allowed. */
  unixSockets?: UnixSocketGrant[];
  warnings: string[];
}

/** A host Unix socket the command may connect to, bound at `path`. */
export interface UnixSocketGrant {
  path: string;
  target: string;
  /** Why it grants root, when the host configuration allowed one that does. */
  grantsRoot?: string;
}

/** One offending field of the policy, the launcher's input or the host facts. */
export interface FieldError {
  path: string;
  message: string;
}

/** One candidate backend's verdict and why. */
export interface CandidateTrace {
  backend: Backend;
  verdict: CandidateVerdict;
  reason: string;
  missingCapabilities: Capability[];
}

// --- The package's own values --------------------------------------------------------------

/**
 * One decision or refusal, exactly as the engine component returned it (frozen).
 *
 * `canonicalJson` is the engine's own text and `digest` its SHA-256 (checked against the text
 * when the decision is made); every other field is read from that text. Compare or store
 * `canonicalJson` and `digest`, never a re-serialized `report`: only they are the decision's bytes.
 */
export interface Decision {
  /** `'decision'` (a backend was chosen) or `'refusal'` (nothing may be launched). */
  readonly outcome: 'decision' | 'refusal';
  /** Whether a backend was chosen. */
  readonly ok: boolean;
  /** The decision as canonical JSON (sorted keys, no whitespace): the exact bytes. */
  readonly canonicalJson: string;
  /** Lower-case hex SHA-256 of `canonicalJson` (UTF-8). */
  readonly digest: string;
  /** One line saying what was decided, or what went wrong. */
  readonly message: string;
  /** SHA-256 of the engine's canonical form of the input (of the raw text, if it did not parse). */
  readonly inputDigest: string;
  readonly engineVersion: string;
  readonly schemaVersion: string;
  /** The chosen backend; `null` for a refusal. */
  readonly backend: Backend | null;
  /** What the launcher applies; `null` for a refusal. */
  readonly plan: Plan | null;
  /** The plan's warnings (empty for a refusal). */
  readonly warnings: string[];
  /** Why nothing was chosen; `null` for a decision. */
  readonly code: RefusalCode | null;
  /** Every offending field (the first 100); empty for a decision. */
  readonly errors: FieldError[];
  /** Each candidate's verdict, in preference order (absent from some refusals: empty). */
  readonly trace: CandidateTrace[];
  /** The whole canonical JSON, parsed (`policy`, `providedCapabilities`, `limitations`, ...). */
  readonly report: Record<string, unknown>;
}

/** The engine's identity, as audit records carry it, and the component's digest. */
export interface EngineInfo {
  readonly engineVersion: string;
  readonly witVersion: string;
  readonly schemaVersion: string;
  /** SHA-256 of the component this package was built from. */
  readonly componentSha256: string;
}

/** SHA-256 of the engine component this package was built from (its version's `+sha256.` part). */
export const COMPONENT_SHA256: string;
/** This package's version: `<base>+sha256.<the component's first 12 hex digits>`. */
export const VERSION: string;
/** The interface every function lives in: `palisade:engine/decision@0.8.0`. */
export const INTERFACE: string;

/**
 * Decides how the input's command may be sandboxed: a decision or a refusal (never thrown).
 * `input` is the decision input as an object (serialized with `JSON.stringify`), or its JSON text
 * (a string, or UTF-8 bytes) passed verbatim. Throws `EngineError` only if the engine cannot run.
 */
export function decide(input: DecisionInput | string | Uint8Array): Decision;

/** The engine's identity and the component's digest. */
export function info(): EngineInfo;

/** A transpiled file is not the one this package was built with (thrown on import; never run). */
export class ComponentMismatchError extends Error {}

/** The component could not be run, or answered what the contract rules out. */
export class EngineError extends Error {}
