//! The command line, as clap reads it: every subcommand and flag. Kept in the library so the
//! subcommands can be driven (and tested) without a process, and so completions and a man page
//! can be generated from the same definitions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "palisade",
    version,
    about = "Sandbox policy engine and launcher: decide how a command may be isolated, fail closed",
    after_help = EXIT_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// `palisade run …` or `palisade decide …` read with the definition of that subcommand
    /// alone, or `None` for any other command line and for one that does not parse cleanly
    /// (help, a usage error): the caller then reads it with [`Cli`]'s whole definition, which
    /// renders help and errors as always.
    ///
    /// Why: building every subcommand's definition (their flags, help texts and value parsers)
    /// cost a cold process about 0.12 ms more than building one (0.46 against 0.34 ms), and
    /// `run` is the command an agent runner starts for every tool call (`decide`, for every one
    /// it only asks about). `Cli` has no arguments of its own, so the subcommand's matches are
    /// the same either way (a test compares them).
    pub fn parse_alone<I, T>(argv: I) -> Option<Cli>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let argv: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
        let word = argv.get(1)?.to_str()?.to_owned();
        let matches = alone(&word)?.try_get_matches_from(argv).ok()?;
        let matches = matches.subcommand_matches(&word)?;
        let command = match word.as_str() {
            "run" => Command::Run(clap::FromArgMatches::from_arg_matches(matches).ok()?),
            "decide" => Command::Decide(clap::FromArgMatches::from_arg_matches(matches).ok()?),
            _ => return None,
        };
        Some(Cli { command })
    }
}

/// `palisade` with subcommand `word` alone, for the subcommands [`Cli::parse_alone`] reads.
fn alone(word: &str) -> Option<clap::Command> {
    let subcommand = match word {
        "run" => RunArgs::augment_args(clap::Command::new("run")),
        "decide" => DecideArgs::augment_args(clap::Command::new("decide")),
        _ => return None,
    };
    Some(clap::Command::new("palisade").subcommand(subcommand))
}

/// The exit statuses with every code each can carry (a test checks that none is missing).
pub(crate) const EXIT_HELP: &str = "Exit status: 0 success; 1 palisade failed or an input is \
unusable (PALISADE_INTERNAL, PALISADE_INPUT_INVALID, HOST_FACTS_INVALID, HOST_CONFIG_INVALID, \
DOCKER_PROFILE_INVALID, DOCKER_IMAGE_UNPINNED, DOCKER_IMAGE_MISSING, DOCKER_IMAGE_MISMATCH, \
DOCKER_DAEMON_UNAVAILABLE); 2 usage (PALISADE_USAGE_INVALID); 3 SANDBOX_POLICY_INVALID; 4 refused \
(SANDBOX_BACKEND_UNAVAILABLE, SANDBOX_CAPABILITY_INSUFFICIENT, SANDBOX_WRITABLE_ROOT_UNSAFE, \
SANDBOX_UNIX_SOCKET_REFUSED, EXECUTION_MODE_FORBIDDEN, HOST_CONFIG_FORBIDDEN, HOST_FACTS_MISMATCH); 5 replay diverged or the audit chain broke \
(PALISADE_REPLAY_DIVERGED, PALISADE_AUDIT_CHAIN_BROKEN, PALISADE_AUDIT_SIGNATURE_INVALID). `palisade run` exits with the command's status (128+N for signal \
N), or 125 when palisade failed or refused and nothing was launched.";

const REPLAY_HELP: &str = "Each record is REPRODUCED (the engine it names, re-run on the \
recorded input, emitted exactly the recorded output bytes), DIVERGED (other bytes, or an engine \
other than the one it names) or INVALID (malformed, inconsistent with itself, or its engine \
cannot be had); exit 5 unless every record is REPRODUCED.\n\n\
Auditing across versions: run `palisade component --archive DIR` wherever palisade records \
decisions; later `palisade replay FILE --component-store DIR --export-in-toto OUT` replays each \
record with its own engine and writes an in-toto statement per reproduced record, and \
`palisade replay --in-toto OUT --component-store DIR` verifies such statements.";

#[derive(Subcommand)]
pub enum Command {
    /// Probe every backend afresh and show what this host can enforce.
    Doctor(DoctorArgs),
    /// Decide how a command would be sandboxed here; launch nothing.
    Decide(DecideArgs),
    /// Decide, then run a command under the chosen backend, supervise it and reap its tree.
    Run(RunArgs),
    /// Re-run recorded decisions through the engine and compare the exact bytes; export or
    /// verify them as in-toto statements.
    #[command(after_help = REPLAY_HELP)]
    Replay(ReplayArgs),
    /// Show what the sandbox denied in a recorded run, and what would allow each.
    Explain(ExplainArgs),
    /// Write the engine component (WebAssembly) for other runtimes, or archive it by digest.
    Component(ComponentArgs),
    /// Make or show the key that seals every audit line (`palisade replay --trusted-key`).
    Key(KeyArgs),
    /// Print the engine's WIT contract.
    Wit,
    /// Print a shell completion script: `palisade completions bash > /etc/bash_completion.d/palisade`.
    Completions(CompletionsArgs),
    /// Print the manual page (roff): `palisade man > palisade.1`.
    Man,
    /// Internal: the init process of a Landlock or direct-dedicated sandbox.
    #[command(name = "__sandbox-init", hide = true)]
    SandboxInit,
    /// Internal: the first program in a bubblewrap sandbox: installs the observed seccomp filter,
    /// hands its listener to the supervisor, execs the rest.
    #[command(name = "__sandbox-exec", hide = true)]
    SandboxExec(BridgeArgs),
    /// Internal: PID 1 of a bubblewrap sandbox, then CMD.
    #[command(name = "__sandbox-pid1", hide = true)]
    SandboxPid1(SandboxPid1Args),
    /// Internal: the probe's trial of a Landlock sandbox's namespaces and `/proc`.
    #[command(name = "__sandbox-proc-trial", hide = true)]
    SandboxProcTrial,
    /// Internal: inside a sandbox with a network bridge, listen on its loopback, exec CMD.
    #[command(name = "__bridge", hide = true)]
    Bridge(BridgeArgs),
}

#[derive(Args)]
pub struct SandboxPid1Args {
    /// The launcher's build (PID 1 refuses a launcher of another build).
    #[arg(long)]
    pub build: String,
    /// The command (absolute path) and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// The bridge's own arguments, parsed by the same parser as the static `palisade-bridge`
/// (`palisade_proxy::bridge::parse_args`), so both spell them alike.
#[derive(Args)]
pub struct BridgeArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub args: Vec<std::ffi::OsString>,
}

#[derive(Args)]
pub struct DoctorArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub host: HostArgs,
}

/// Flags that describe the host (shared by `doctor`, `decide` and later `run`).
#[derive(Args, Clone)]
pub struct HostArgs {
    /// The workspace the command runs in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// An extra writable root (results dir, task temp dir); repeatable.
    #[arg(long = "writable-root", value_name = "DIR")]
    pub writable_roots: Vec<PathBuf>,
    /// A tool's cache to make writable (created if missing): `cargo`, `npm`, `yarn`, `pip`,
    /// `uv`, `go`, `maven`, `gradle`, or an absolute directory; repeatable. The rest of the
    /// home stays read-only and its credential stores denied.
    #[arg(long = "cache", value_name = "TOOL|DIR")]
    pub caches: Vec<String>,
    /// The kind of host session deciding (default: the host configuration's, else `cli`); may
    /// only tighten a configured kind (to `turnkey`).
    #[arg(long, value_name = "KIND", value_parser = ["turnkey", "cli", "managed"])]
    pub session_kind: Option<String>,
    /// Opt this host in to the `direct-dedicated` backend (no filesystem or network masks);
    /// refused when the host configuration says `allowDirectDedicated: false`.
    #[arg(long)]
    pub allow_direct_dedicated: bool,
    /// Read this host configuration instead of the per-user one (the system file
    /// /etc/palisade/host.yaml still applies, and this file may only tighten it).
    #[arg(long = "host-config", value_name = "FILE")]
    pub host_config: Option<PathBuf>,
    /// The docker socket to probe (default: `$DOCKER_HOST` or /var/run/docker.sock).
    #[arg(long, value_name = "PATH")]
    pub docker_socket: Option<PathBuf>,
    /// A docker image to probe; without a runtime profile pinning it, docker stays unavailable.
    #[arg(long, value_name = "IMAGE", conflicts_with = "runtime_profiles")]
    pub docker_image: Option<String>,
    /// Runtime profiles (kind `TrustedRegistry`): the pinned images the docker backend may run.
    #[arg(long, value_name = "FILE")]
    pub runtime_profiles: Option<PathBuf>,
    /// The profile to use from the runtime profile file (default: the file's only profile).
    #[arg(long, value_name = "NAME")]
    pub runtime_profile: Option<String>,
}

/// `--execution-mode` and who asked (shared by `decide` and `run`).
#[derive(Args, Clone)]
pub struct ExecArgs {
    /// `sandbox`, or `workspace`: no isolation, by explicit request (still supervised: budgets,
    /// process-tree cleanup, the environment allowlist); a host configuration may forbid it.
    #[arg(long, value_name = "MODE", value_parser = ["sandbox", "workspace"], default_value = "sandbox")]
    pub execution_mode: String,
    /// Who asked for a `workspace` run, recorded in the audit next to the invoking user (one
    /// line of at most 256 characters; only with `--execution-mode workspace`).
    #[arg(long, value_name = "TEXT", value_parser = one_line_text)]
    pub requested_by: Option<String>,
}

/// Budget flags (shared by `decide` and `run`): decision inputs, which may only tighten the
/// Taskpack's `spec.budgets` (a looser one is clamped, and the decision says so).
#[derive(Args, Clone, Default)]
pub struct BudgetArgs {
    /// Wall-clock budget: `90s`, `1500ms`, `5m`, `1h` (may only tighten the Taskpack's).
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// Memory budget for the whole tree: `512M`, `2G` (may only tighten the Taskpack's).
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Most processes alive at once in the tree (may only tighten the Taskpack's).
    #[arg(long, value_name = "N")]
    pub max_procs: Option<u64>,
    /// CPU-time budget for the tree, in seconds (may only tighten the Taskpack's).
    #[arg(long, value_name = "N")]
    pub cpu_seconds: Option<u64>,
    /// A Loopwright TaskContract whose `spec.budgets` is the envelope the Taskpack and the
    /// flags may only tighten within.
    #[arg(long, value_name = "FILE")]
    pub task_contract: Option<PathBuf>,
}

/// Policy flags (shared by `decide` and `run`): decision inputs (`policyFlags`). Without a
/// Taskpack's `spec.sandbox` they form the policy over the omitted-policy defaults; with one they
/// may only tighten it. A whole `--input` carries its own, so none combines with it.
#[derive(Args, Clone, Default)]
pub struct PolicyArgs {
    /// The network: `none`, `loopback-only` or `allow-outbound` (with a Taskpack: the same or
    /// stricter, allow-outbound > loopback-only > none).
    #[arg(long, value_name = "MODE", value_parser = ["none", "loopback-only", "allow-outbound"], conflicts_with = "input")]
    pub network: Option<String>,
    /// Allow egress only to this domain (`host`, `*.suffix`, an IP, optional `:port`);
    /// repeatable. With a Taskpack, may only narrow its `allowedDomains`.
    #[arg(long = "allow-domain", value_name = "DOMAIN", conflicts_with = "input")]
    pub allow_domains: Vec<String>,
    /// Make this path unreadable (absolute or `~/`); repeatable.
    #[arg(long = "deny-read", value_name = "PATH", conflicts_with = "input")]
    pub deny_read: Vec<String>,
    /// Make only this directory of the workspace writable (the rest of it read-only);
    /// repeatable. Must exist inside the workspace.
    #[arg(long = "writable", value_name = "DIR", conflicts_with = "input")]
    pub writable: Vec<PathBuf>,
    /// A backend to negotiate, in order of preference; repeatable. With a Taskpack, only among
    /// its preferred backends.
    #[arg(long = "backend", value_name = "NAME", value_parser = BACKENDS, conflicts_with = "input")]
    pub backends: Vec<String>,
    /// A capability the backend must provide; repeatable.
    #[arg(long = "require", value_name = "CAPABILITY", value_parser = CAPABILITIES, conflicts_with = "input")]
    pub require: Vec<String>,
    /// Pass only this environment variable (one the environment allowlist passes);
    /// repeatable.
    #[arg(long = "pass-env", value_name = "NAME", conflicts_with = "input")]
    pub pass_env: Vec<String>,
    /// Let the command connect to this host Unix socket (absolute or `~/`; an SSH agent, a
    /// database); repeatable. Every other host socket stays out of reach. A socket that grants
    /// root (Docker's) needs the host configuration's `allowRootGrantingSockets`.
    #[arg(
        long = "allow-unix-socket",
        value_name = "PATH",
        conflicts_with = "input"
    )]
    pub allow_unix_sockets: Vec<String>,
    /// A host loopback port the command may reach (127.0.0.1 and ::1), repeatable: forms the
    /// policy's `loopbackPorts` (the network becomes `loopback-only` unless `--network` says
    /// otherwise), or, with a Taskpack, narrows its list.
    #[arg(
        long = "allow-host-port",
        value_name = "PORT",
        conflicts_with = "input"
    )]
    pub allow_host_ports: Vec<u16>,
}

/// Backend names as `--backend` takes them.
const BACKENDS: [&str; 5] = [
    "macos-seatbelt",
    "linux-bwrap",
    "linux-landlock",
    "docker",
    "direct-dedicated",
];

/// Capability names as `--require` takes them.
const CAPABILITIES: [&str; 6] = [
    "filesystemReadContainment",
    "filesystemWriteContainment",
    "protectedPathReadOnlyMask",
    "networkIsolation",
    "processTreeCleanup",
    "syscallFiltering",
];

#[derive(Args)]
pub struct DecideArgs {
    /// The Taskpack (default: `<workspace>/.loopwright/taskpack.yaml` when it exists, else no policy).
    #[arg(long, value_name = "FILE")]
    pub taskpack: Option<PathBuf>,
    /// Use recorded host facts and probes (JSON) instead of probing this host.
    #[arg(long, value_name = "FILE", conflicts_with = "input")]
    pub facts: Option<PathBuf>,
    /// The whole decision input (document and facts) as JSON; `-` reads stdin.
    #[arg(long, value_name = "FILE|-", conflicts_with_all = ["taskpack", "facts"])]
    pub input: Option<String>,
    /// Print the canonical decision JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Append an audit record (JSON Lines) to this file.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// After appending, write the head of the record file's hash chain to this file, kept
    /// apart from it: `replay --checkpoint FILE` then finds a cut-off tail.
    #[arg(long, value_name = "FILE", requires = "record")]
    pub checkpoint: Option<PathBuf>,
    /// Probe afresh and decide afresh: neither the probe cache nor the decision cache.
    #[arg(long)]
    pub no_cache: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub budgets: BudgetArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
    #[command(flatten)]
    pub host: HostArgs,
}

#[derive(Args)]
pub struct RunArgs {
    /// The Taskpack (default: `<workspace>/.loopwright/taskpack.yaml` when it exists, else no policy).
    #[arg(long, value_name = "FILE")]
    pub taskpack: Option<PathBuf>,
    /// Launch from a whole decision input (JSON, as `decide --input` takes; `-` reads stdin),
    /// as a managed controller passes it. This host's own probes must confirm every claim.
    #[arg(long, value_name = "FILE|-", conflicts_with = "taskpack")]
    pub input: Option<String>,
    /// Append the decision (before launching) and the run's outcome (after) to this file.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// After each append, write the head of the audit file's hash chain to this file, kept
    /// apart from it (outside every writable root): `replay --checkpoint FILE` then finds a
    /// cut-off tail.
    #[arg(long, value_name = "FILE", requires = "audit")]
    pub checkpoint: Option<PathBuf>,
    /// When the run ends, write its outcome (exit, budgets, denials) as one JSON document to
    /// this file, or to an open descriptor (`fd:3`), for the agent runner to read.
    #[arg(long, value_name = "FILE|fd:N")]
    pub json: Option<String>,
    /// Print nothing from Palisade after the command ends (the summary of what the sandbox
    /// denied); warnings before the command and errors still print.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// When the run ends, print where its time went (one line per phase, in µs) on stderr.
    /// The outcome record carries the same figures as `timings` with or without this flag.
    #[arg(long)]
    pub timings: bool,
    #[command(flatten)]
    pub budgets: BudgetArgs,
    /// Probe afresh and decide afresh: neither the probe cache nor the decision cache.
    #[arg(long)]
    pub no_cache: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Resolve NAME to ADDR in the filtering proxy instead of asking DNS (like curl's
    /// `--resolve`); repeatable. The proxy still applies its address checks.
    #[arg(long = "proxy-resolve", value_name = "NAME=ADDR")]
    pub proxy_resolve: Vec<String>,
    /// Ask this command (`/bin/sh -c CMD`, on the host) about a name the filtering proxy meets
    /// outside the allowlist, while the connection waits: it reads one JSON request on stdin
    /// and answers `once`, `run` or `deny` on its first line of stdout. Only with filtered
    /// egress (allowedDomains); every answer is recorded in the outcome. The decision does not
    /// change.
    #[arg(long = "approve-with", value_name = "CMD")]
    pub approve_with: Option<String>,
    /// How long a connection waits for the approver's answer before it is a deny (and the
    /// approver is killed): `30s` (the default), `1500ms`, `2m`.
    #[arg(
        long = "approve-timeout",
        value_name = "DUR",
        requires = "approve_with"
    )]
    pub approve_timeout: Option<String>,
    #[command(flatten)]
    pub exec: ExecArgs,
    #[command(flatten)]
    pub host: HostArgs,
    /// The command and its arguments; everything from the first argument that is not one of
    /// Palisade's options on is the command's (`--` before it is optional).
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Args)]
pub struct ReplayArgs {
    /// The audit file (JSON Lines) to replay, or with `--in-toto` the statements to verify.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Also check the file against this checkpoint (`run --checkpoint`): a file whose tail was
    /// cut off, or whose last checkpointed line changed, is CHAIN_BROKEN.
    #[arg(long, value_name = "FILE", conflicts_with = "in_toto")]
    pub checkpoint: Option<PathBuf>,
    /// Replay every record with this engine component instead of the embedded one.
    #[arg(long, value_name = "FILE", conflicts_with = "component_store")]
    pub component: Option<PathBuf>,
    /// Replay each record with the engine it names, from this content-addressed store
    /// (`DIR/sha256/<hex>.wasm`, filled by `palisade component --archive DIR`).
    #[arg(long, value_name = "DIR")]
    pub component_store: Option<PathBuf>,
    /// FILE holds in-toto statements (as `--export-in-toto` writes them): verify each one.
    #[arg(long, conflicts_with = "export_in_toto")]
    pub in_toto: bool,
    /// Write an in-toto Statement v1 (JSON Lines) for every record that reproduced to OUT.
    #[arg(long, value_name = "OUT")]
    pub export_in_toto: Option<PathBuf>,
    /// Check every line's seal against this public key (`palisade key init` prints where it is;
    /// repeatable): a line without a seal, sealed by another key, or whose seal does not verify
    /// is reported, and the replay fails.
    #[arg(long, value_name = "PUB")]
    pub trusted_key: Vec<PathBuf>,
    /// Print one JSON object per record instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ExplainArgs {
    /// The audit file `palisade run --audit` wrote.
    #[arg(value_name = "AUDIT")]
    pub file: PathBuf,
    /// The run to explain (its `runId`; default: the file's last run).
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Print only the smallest change that would have allowed what the run was denied: the
    /// flags to add or drop (`add flags:`, `drop flags:`, ready to paste), or the Taskpack's
    /// `spec.sandbox` lists as they would read; then what only the host configuration changes,
    /// and what no policy allows.
    #[arg(long)]
    pub suggest: bool,
}

#[derive(Args)]
pub struct ComponentArgs {
    /// Where to write the component (default: stdout, unless `--archive` is given).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Store the component in this content-addressed store as `DIR/sha256/<hex>.wasm`, for
    /// `palisade replay --component-store DIR`.
    #[arg(long, value_name = "DIR")]
    pub archive: Option<PathBuf>,
}

#[derive(Args)]
pub struct KeyArgs {
    #[command(subcommand)]
    pub action: KeyAction,
}

#[derive(clap::Subcommand)]
pub enum KeyAction {
    /// Make an Ed25519 key: every audit line this user's palisade appends is then sealed with
    /// it, and no sandbox can read it. Prints the public key file to pass to `--trusted-key`.
    Init(KeyInitArgs),
    /// Show which key seals this user's audit lines, and its public key file.
    Show,
}

#[derive(Args)]
pub struct KeyInitArgs {
    /// Make the system-wide key of a fleet host (/etc/palisade/keys), used by every user who
    /// has none of their own and can read it.
    #[arg(long)]
    pub system: bool,
    /// Replace an existing key (records it sealed then verify only with its public half).
    #[arg(long)]
    pub force: bool,
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// A short free text that goes into records and reports: one line, printable, at most 256
/// characters (a line break could forge lines of a report that prints it).
fn one_line_text(text: &str) -> Result<String, String> {
    if text.chars().any(char::is_control) {
        return Err("must be one line without control characters".to_owned());
    }
    if text.chars().count() > 256 {
        return Err("must be at most 256 characters".to_owned());
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::panic,
        clippy::unwrap_used,
        clippy::indexing_slicing,
        reason = "tests"
    )]
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_exit_help_names_every_code_under_its_status() {
        use crate::report::ErrorCode;
        for code in ErrorCode::ALL {
            let status = code.exit().code();
            // Each status's part of the text: from "<status> " to the next ';'.
            let part = EXIT_HELP
                .split("; ")
                .find(|part| {
                    part.trim_start_matches("Exit status: ")
                        .starts_with(&format!("{status} "))
                })
                .unwrap_or_else(|| panic!("no exit status {status} in the help"));
            assert!(
                part.contains(code.as_str()),
                "{} is not under {status}",
                code.as_str()
            );
        }
    }

    #[test]
    fn the_definitions_are_consistent() {
        // clap's own checks: no two flags with one name, every conflict names a real argument.
        Cli::command().debug_assert();
    }

    #[test]
    fn a_run_needs_its_command_after_the_separator() {
        let run =
            Cli::try_parse_from(["palisade", "run", "--timeout", "5s", "--", "sh", "-c", "x"]);
        let Ok(Cli {
            command: Command::Run(args),
        }) = run
        else {
            panic!("`run -- sh -c x` did not parse");
        };
        assert_eq!(args.command, ["sh", "-c", "x"]);
        assert_eq!(args.budgets.timeout.as_deref(), Some("5s"));
    }

    #[test]
    fn alone_reads_a_run_or_a_decide_as_the_whole_definition_does() {
        let lines: [&[&str]; 10] = [
            &["palisade", "run", "--", "true"],
            &[
                "palisade",
                "run",
                "--timeout",
                "5s",
                "--",
                "sh",
                "-c",
                "x --y",
            ],
            &[
                "palisade",
                "run",
                "--taskpack",
                "t.yaml",
                "--timings",
                "--no-cache",
                "--",
                "ls",
                "-la",
            ],
            &[
                "palisade",
                "run",
                "--network",
                "loopback-only",
                "--allow-host-port",
                "18555",
                "--",
                "curl",
                "-v",
            ],
            &[
                "palisade", "run", "--audit", "a.jsonl", "--quiet", "--", "git", "status",
            ],
            &["palisade", "run", "--input", "-", "--", "true"],
            &[
                "palisade",
                "run",
                "--execution-mode",
                "sandbox",
                "--",
                "--not-a-flag",
            ],
            &["palisade", "decide", "--json"],
            &[
                "palisade",
                "decide",
                "--taskpack",
                "t.yaml",
                "--no-cache",
                "--network",
                "none",
            ],
            &[
                "palisade",
                "decide",
                "--input",
                "-",
                "--record",
                "r.jsonl",
                "--checkpoint",
                "c",
            ],
        ];
        for line in lines {
            let word = line[1];
            let whole = Cli::command().try_get_matches_from(line);
            let one = alone(word).unwrap().try_get_matches_from(line);
            let (Ok(whole), Ok(one)) = (whole, one) else {
                panic!("{line:?} did not parse both ways");
            };
            assert_eq!(
                whole.subcommand_matches(word),
                one.subcommand_matches(word),
                "{line:?}"
            );
            assert!(Cli::parse_alone(line).is_some(), "{line:?}");
        }
    }

    #[test]
    fn alone_leaves_help_errors_and_other_commands_to_the_whole_definition() {
        for line in [
            &["palisade", "run", "--help"][..],
            &["palisade", "run", "--no-such-flag", "--", "true"],
            &[
                "palisade",
                "run",
                "--taskpack",
                "a",
                "--input",
                "b",
                "--",
                "true",
            ],
            &["palisade", "decide", "--help"],
            &["palisade", "decide", "--facts", "f", "--input", "-"],
            &["palisade", "replay", "audit.jsonl"],
            &["palisade", "--version"],
            &["palisade"],
        ] {
            assert!(Cli::parse_alone(line).is_none(), "{line:?}");
        }
    }
}
