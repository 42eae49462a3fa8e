//! Test helper for `palisade-shims` (not shipped).
//!
//! - `palisade-shims-helper __sandbox-init`: [`palisade_shims::init::main`], exactly as the
//!   real `palisade __sandbox-init`.
//! - `palisade-shims-helper supervise [--init] [--no-cgroups] [--no-foreground] [--grace-ms N] [--wall-ms N]
//!   [--cpu-s N] [--memory N] [--procs N] -- PROGRAM [ARGS…]`: runs
//!   [`palisade_shims::supervise::run`] in this process (so a test can SIGKILL or signal the
//!   supervisor), prints the outcome as one JSON line on stdout and exits with the command's
//!   status. `--init` launches through this binary's `__sandbox-init` with `Confinement::None`
//!   (the `direct-dedicated` path); `--bwrap` launches through `/usr/bin/bwrap` with user and
//!   PID namespaces, `--new-session` and `--die-with-parent` (the `linux-bwrap` process shape).

#[cfg(target_os = "linux")]
use std::ffi::OsString;
#[cfg(target_os = "linux")]
use std::process::ExitCode;
#[cfg(target_os = "linux")]
use std::time::Duration;

#[cfg(target_os = "linux")]
use palisade_shims::init::{self, Confinement, InitSpec};
#[cfg(target_os = "linux")]
use palisade_shims::plan::Budgets;
#[cfg(target_os = "linux")]
use palisade_shims::supervise::{self, Launch, LaunchKind, SuperviseError, SuperviseOptions};

#[cfg(target_os = "linux")]
fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match args.first().and_then(|a| a.to_str()) {
        Some(init::SUBCOMMAND) => init::main(),
        Some("supervise") => match supervise_main(args.get(1..).unwrap_or_default()) {
            Ok(code) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(125)),
            Err(message) => {
                eprintln!("palisade-shims-helper: {message}");
                ExitCode::from(125)
            }
        },
        _ => {
            eprintln!(
                "usage: palisade-shims-helper (__sandbox-init | supervise [OPTIONS] -- CMD...)"
            );
            ExitCode::from(2)
        }
    }
}

#[cfg(target_os = "linux")]
fn supervise_main(args: &[OsString]) -> Result<i32, String> {
    let mut budgets = Budgets::default();
    let mut options = SuperviseOptions::default();
    let mut through_init = false;
    let mut through_bwrap = false;
    let mut rest = args.iter();
    let number = |value: Option<&OsString>, flag: &str| -> Result<u64, String> {
        value
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("`{flag}` needs a number"))
    };
    while let Some(arg) = rest.next() {
        match arg.to_str() {
            Some("--init") => through_init = true,
            Some("--bwrap") => through_bwrap = true,
            Some("--no-cgroups") => options.use_cgroups = false,
            Some("--no-foreground") => options.foreground_tty = false,
            Some("--grace-ms") => {
                options.grace = Duration::from_millis(number(rest.next(), "--grace-ms")?);
            }
            Some("--wall-ms") => {
                budgets.wall_clock = Some(Duration::from_millis(number(rest.next(), "--wall-ms")?));
            }
            Some("--cpu-s") => budgets.cpu_seconds = Some(number(rest.next(), "--cpu-s")?),
            Some("--memory") => budgets.memory_bytes = Some(number(rest.next(), "--memory")?),
            Some("--procs") => budgets.max_processes = Some(number(rest.next(), "--procs")?),
            Some("--") => break,
            _ => return Err(format!("unknown argument `{}`", arg.display())),
        }
    }
    let command: Vec<OsString> = rest.cloned().collect();
    let Some(program) = command.first() else {
        return Err("no command".into());
    };
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
    let launch = if through_init {
        let spec = InitSpec {
            command: command.clone(),
            env,
            cwd,
            rlimits: Vec::new(),
            confinement: Confinement::None,
            report_fd: None,
            observe_fd: None,
            started_fd: None,
            masks: None,
            masks_fd: None,
            build: None,
        };
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        init::launch(&spec, &exe).map_err(|e| e.to_string())?.0
    } else if through_bwrap {
        // A minimal sandbox shaped like the bwrap shim's: own user and PID namespaces, a new
        // session, death with the parent; the working directory stays writable.
        let mut args: Vec<OsString> = [
            "--unshare-user",
            "--unshare-pid",
            "--new-session",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        args.extend([
            OsString::from("--bind"),
            cwd.clone().into(),
            cwd.clone().into(),
            OsString::from("--chdir"),
            cwd.into(),
            OsString::from("--"),
        ]);
        args.extend(command.iter().cloned());
        Launch {
            program: "/usr/bin/bwrap".into(),
            args,
            env,
            cwd: None,
            fds: Vec::new(),
            kind: LaunchKind::Bwrap,
            started: None,
            pid_record: None,
            mask_namespace: None,
        }
    } else {
        Launch {
            program: program.into(),
            args: command.get(1..).unwrap_or_default().to_vec(),
            env,
            cwd: Some(cwd),
            fds: Vec::new(),
            kind: LaunchKind::Plain,
            started: None,
            pid_record: None,
            mask_namespace: None,
        }
    };
    let outcome = match supervise::run(launch, &budgets, &options) {
        Ok(outcome) => outcome,
        Err(SuperviseError::TreeNotEmpty { outcome, .. }) => *outcome,
        Err(e) => return Err(e.to_string()),
    };
    println!(
        "{}",
        serde_json::to_string(&outcome).map_err(|e| e.to_string())?
    );
    Ok(outcome.exit_code())
}

/// The helper drives Linux mechanisms (PID-namespace init, cgroups, bwrap) only.
#[cfg(not(target_os = "linux"))]
fn main() -> std::process::ExitCode {
    eprintln!("palisade-shims-helper: linux only");
    std::process::ExitCode::from(2)
}
