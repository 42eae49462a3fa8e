//! `palisade`: decide, reproducibly, how an untrusted command may be isolated on this host.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use palisade::exit::Exit;

mod commands;

#[derive(Parser)]
#[command(
    name = "palisade",
    version,
    about = "Sandbox policy engine and launcher: decide how a command may be isolated, fail closed",
    after_help = EXIT_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const EXIT_HELP: &str = "Exit status: 0 success; 1 palisade failed; 2 usage; \
3 SANDBOX_POLICY_INVALID; 4 SANDBOX_BACKEND_UNAVAILABLE or SANDBOX_CAPABILITY_INSUFFICIENT; \
5 replay diverged. `palisade run` exits with the command's status (128+N for signal N), \
or 125 when palisade failed or refused and nothing was launched.";

#[derive(Subcommand)]
enum Command {
    /// Probe every backend afresh and show what this host can enforce.
    Doctor(DoctorArgs),
    /// Decide how a command would be sandboxed here; launch nothing.
    Decide(DecideArgs),
    /// Decide, then run a command under the chosen backend, supervise it and reap its tree.
    Run(RunArgs),
    /// Re-run recorded decisions through the engine and compare the exact bytes.
    Replay(ReplayArgs),
    /// Write the engine component (WebAssembly) for other runtimes.
    Component(ComponentArgs),
    /// Print the engine's WIT contract.
    Wit,
    /// Internal: the init process of a Landlock or direct-dedicated sandbox.
    #[command(name = "__sandbox-init", hide = true)]
    SandboxInit,
}

#[derive(Args)]
pub struct DoctorArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: HostArgs,
}

/// Flags that describe the host (shared by `doctor`, `decide` and later `run`).
#[derive(Args, Clone)]
pub struct HostArgs {
    /// The workspace the command runs in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// An extra writable root (results dir, task temp dir); repeatable.
    #[arg(long = "writable-root", value_name = "DIR")]
    writable_roots: Vec<PathBuf>,
    /// The kind of host session deciding.
    #[arg(long, value_name = "KIND", value_parser = ["turnkey", "cli", "managed"], default_value = "cli")]
    session_kind: String,
    /// Opt this host in to the `direct-dedicated` backend (no filesystem or network masks).
    #[arg(long)]
    allow_direct_dedicated: bool,
    /// The docker socket to probe (default: `$DOCKER_HOST` or /var/run/docker.sock).
    #[arg(long, value_name = "PATH")]
    docker_socket: Option<PathBuf>,
    /// A docker image to probe; without a runtime profile pinning it, docker stays unavailable.
    #[arg(long, value_name = "IMAGE", conflicts_with = "runtime_profiles")]
    docker_image: Option<String>,
    /// Runtime profiles (kind `TrustedRegistry`): the pinned images the docker backend may run.
    #[arg(long, value_name = "FILE")]
    runtime_profiles: Option<PathBuf>,
    /// The profile to use from `--runtime-profiles` (default: the file's only profile).
    #[arg(long, value_name = "NAME", requires = "runtime_profiles")]
    runtime_profile: Option<String>,
}

#[derive(Args)]
pub struct DecideArgs {
    /// The Taskpack (default: `<workspace>/.loopwright/taskpack.yaml` when it exists, else no policy).
    #[arg(long, value_name = "FILE")]
    taskpack: Option<PathBuf>,
    /// Use recorded host facts and probes (JSON) instead of probing this host.
    #[arg(long, value_name = "FILE", conflicts_with = "input")]
    facts: Option<PathBuf>,
    /// The whole decision input (document and facts) as JSON; `-` reads stdin.
    #[arg(long, value_name = "FILE|-", conflicts_with_all = ["taskpack", "facts"])]
    input: Option<String>,
    /// Print the canonical decision JSON instead of a summary.
    #[arg(long)]
    json: bool,
    /// Append an audit record (JSON Lines) to this file.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Probe afresh instead of using the probe cache.
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    host: HostArgs,
}

#[derive(Args)]
pub struct RunArgs {
    /// The Taskpack (default: `<workspace>/.loopwright/taskpack.yaml` when it exists, else no policy).
    #[arg(long, value_name = "FILE")]
    taskpack: Option<PathBuf>,
    /// Append the decision (before launching) and the run's outcome (after) to this file.
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Wall-clock budget: `90s`, `5m`, `1h` (may only tighten the Taskpack's).
    #[arg(long, value_name = "DUR")]
    timeout: Option<String>,
    /// Memory budget for the whole tree: `512M`, `2G` (may only tighten the Taskpack's).
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Most processes alive at once in the tree (may only tighten the Taskpack's).
    #[arg(long, value_name = "N")]
    max_procs: Option<u64>,
    /// CPU-time budget for the tree, in seconds (may only tighten the Taskpack's).
    #[arg(long, value_name = "N")]
    cpu_seconds: Option<u64>,
    /// Probe afresh instead of using the probe cache.
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    host: HostArgs,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<std::ffi::OsString>,
}

#[derive(Args)]
pub struct ReplayArgs {
    /// The audit file (JSON Lines) to replay.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Replay with this engine component instead of the embedded one.
    #[arg(long, value_name = "FILE")]
    component: Option<PathBuf>,
    /// Print one JSON object per record instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ComponentArgs {
    /// Where to write the component (default: stdout).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // clap prints help/version to stdout and usage errors to stderr.
            let _ = error.print();
            return if error.use_stderr() {
                Exit::Usage.into()
            } else {
                Exit::Success.into()
            };
        }
    };
    let is_run = matches!(cli.command, Command::Run(_));
    let result = match cli.command {
        Command::Doctor(args) => commands::doctor(&args),
        Command::Decide(args) => commands::decide(&args),
        Command::Run(args) => commands::run(&args),
        Command::SandboxInit => palisade_shims::init::main(),
        Command::Replay(args) => commands::replay(&args),
        Command::Component(args) => commands::component(&args),
        Command::Wit => commands::wit(),
    };
    match result {
        Ok(exit) => exit.into(),
        Err(failure) => {
            let _ = std::io::stderr().write_all(failure.render().as_bytes());
            // `run` keeps the command's statuses for the command: any failure of Palisade's
            // own, refusals included, is 125 and means nothing was launched.
            if is_run {
                Exit::NotLaunched.into()
            } else {
                failure.code.exit().into()
            }
        }
    }
}
