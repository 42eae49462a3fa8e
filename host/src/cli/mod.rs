//! The `palisade` command line: [`args`] (what clap reads) and one module per subcommand, each
//! returning the exit status or a [`Failure`] to report. stdout carries data only; failures go
//! to stderr as one line with a code, then detail and `hint:` lines.
//!
//! The modules shared by the subcommands: [`setup`] (the host configuration, flags and probe
//! options), [`inputs`] (the taskpack and the launcher's own inputs), [`engine`] (running the
//! embedded engine, recording first). [`main`] is the whole of the binary.

pub mod args;
mod claims;
mod component;
mod decide;
mod doctor;
mod engine;
mod explain;
mod inputs;
mod key;
mod replay;
mod run;
mod setup;
pub mod units;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::exit::Exit;
use crate::report::{ErrorCode, Failure};

pub use args::Cli;
pub use component::{component, wit};
pub use decide::decide;
pub use doctor::doctor;
pub use explain::explain;
pub use replay::replay;
pub use run::run;

/// What a subcommand returns.
pub type CommandResult = Result<Exit, Failure>;

/// Parses the command line, runs the subcommand and turns its result into the exit status.
pub fn main() -> ExitCode {
    crate::timings::mark_main();
    let cli = match Cli::parse_alone(std::env::args_os()).map_or_else(Cli::try_parse, Ok) {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => {
            // Help and version, on stdout.
            let _ = error.print();
            return Exit::Success.into();
        }
        Err(error) => {
            // A usage error is reported like every other failure, with its code; under `run`
            // it is 125 like them, so the command's own statuses stay the command's.
            let text = error.render().to_string();
            let mut lines = text.lines().filter(|l| !l.trim().is_empty());
            let first = lines.next().unwrap_or("the command line does not parse");
            let mut failure = Failure::new(
                ErrorCode::UsageInvalid,
                first.strip_prefix("error: ").unwrap_or(first),
            );
            for line in lines {
                failure = failure.detail(line.trim());
            }
            let _ = std::io::stderr().write_all(failure.render().as_bytes());
            let is_run = std::env::args_os().nth(1).is_some_and(|a| a == "run");
            return if is_run {
                Exit::NotLaunched.into()
            } else {
                Exit::Usage.into()
            };
        }
    };
    dispatch(cli.command)
}

/// Runs one subcommand.
pub fn dispatch(command: args::Command) -> ExitCode {
    use args::Command;
    let is_run = matches!(command, Command::Run(_));
    let result = match command {
        Command::Doctor(args) => doctor(&args),
        Command::Decide(args) => decide(&args),
        Command::Run(args) => run(&args),
        #[cfg(target_os = "linux")]
        Command::SandboxInit => palisade_shims::init::main(),
        #[cfg(target_os = "linux")]
        Command::SandboxPid1(args) => palisade_shims::init::pid1::main(&args.build, &args.command),
        #[cfg(target_os = "linux")]
        Command::SandboxProcTrial => palisade_shims::init::procfs::trial_main(),
        // The PID-namespace inits exist on Linux only; nothing launches them elsewhere.
        #[cfg(not(target_os = "linux"))]
        Command::SandboxInit | Command::SandboxPid1(_) | Command::SandboxProcTrial => {
            let _ = std::io::stderr().write_all(b"palisade: sandbox inits need linux\n");
            return Exit::NotLaunched.into();
        }
        #[cfg(target_os = "linux")]
        Command::SandboxExec(args) => palisade_shims::sandbox_exec::main(&args.args),
        #[cfg(not(target_os = "linux"))]
        Command::SandboxExec(_) => {
            let _ = std::io::stderr().write_all(b"palisade: __sandbox-exec needs linux\n");
            return Exit::NotLaunched.into();
        }
        Command::Bridge(args) => {
            // `__bridge connect HOST PORT`: ssh's ProxyCommand inside the sandbox.
            #[cfg(target_os = "linux")]
            if let Some((mode, rest)) = args.args.split_first()
                && mode == palisade_proxy::bridge::CONNECT
            {
                return match palisade_proxy::bridge::connect_main(rest) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(message) => {
                        let _ = writeln!(std::io::stderr(), "palisade: {message}");
                        ExitCode::from(1)
                    }
                };
            }
            let message = crate::network::bridge_main(&args.args);
            let _ = writeln!(std::io::stderr(), "palisade: network bridge: {message}");
            return Exit::NotLaunched.into();
        }
        Command::Replay(args) => replay(&args),
        Command::Explain(args) => explain(&args),
        Command::Component(args) => component(&args),
        Command::Key(args) => key::key(&args),
        Command::Wit => wit(),
        Command::Completions(args) => completions(args.shell),
        Command::Man => man(),
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

/// `palisade completions SHELL`: the completion script, from the same definitions as the parser.
fn completions(shell: clap_complete::Shell) -> CommandResult {
    use clap::CommandFactory;
    // The sandbox-internal subcommands are hidden from help and are not offered either.
    let full = args::Cli::command();
    let mut visible = clap::Command::new("palisade")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut visible, "palisade", &mut script);
    write_stdout(&script)?;
    Ok(Exit::Success)
}

/// `palisade man`: the manual page, from the same definitions as the parser.
fn man() -> CommandResult {
    use clap::CommandFactory;
    let mut page = Vec::new();
    clap_mangen::Man::new(args::Cli::command())
        .render(&mut page)
        .map_err(|e| {
            Failure::new(
                ErrorCode::Internal,
                format!("cannot render the manual: {e}"),
            )
        })?;
    write_stdout(&page)?;
    Ok(Exit::Success)
}

/// Writes data to stdout; a closed pipe (`palisade … | head`) is not an error.
fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::new(
            ErrorCode::Internal,
            format!("cannot write to stdout: {e}"),
        )),
    }
}
