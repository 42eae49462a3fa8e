//! Process-tree cleanup: leave processes behind in every way a command can, and the helper
//! modes the battery spawns.
//!
//! Each leftover is a `palisade-attack linger --marker M` process whose command line carries the
//! test's unique marker, so the harness can look for survivors in the host's `/proc` after
//! `palisade run` returns. Lingerers exit by themselves after `--seconds` (SIGALRM, which they
//! never ignore), so a failed cleanup cannot leave anything behind for long.
//!
//! Helper modes (no verdict line):
//! - `victim --marker M`: a host process for the process attacks to aim at. Keeps the marker
//!   in memory, prints `ready <address-of-marker>`, and lives until stdin closes (or 300 s).
//! - `linger --marker M [--seconds N] [--ignore-term 1]`: sleep; optionally ignore SIGTERM,
//!   SIGINT and SIGHUP.
//! - `__daemonize --marker M [--seconds N]`: start a lingerer in a new session and exit at
//!   once — with the attack waiting for it, the classic double fork.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{Args, Attack, Outcome, emit, io_detail, sys};

const DEFAULT_SECONDS: u32 = 30;

fn options(rest: &[String]) -> Option<Args> {
    Args::parse(rest).ok()
}

fn seconds(args: &Args) -> u32 {
    args.opt("seconds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SECONDS)
}

/// A lingerer command: this binary, `linger`, the marker, nothing on stdio.
fn linger_command(args: &Args, ignore_term: bool) -> Result<Command, Outcome> {
    let marker = args.get("marker")?;
    let exe = std::env::current_exe().map_err(|e| Outcome::error(io_detail("current_exe", &e)))?;
    let mut command = Command::new(exe);
    command
        .args([
            "linger",
            "--marker",
            marker,
            "--seconds",
            &seconds(args).to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if ignore_term {
        command.args(["--ignore-term", "1"]);
    }
    Ok(command)
}

fn spawn_and_forget(mut command: Command, what: &str) -> Attack {
    match command.spawn() {
        // Dropping a `Child` neither waits for nor kills it: it outlives us.
        Ok(child) => Ok(Outcome::succeeded(format!(
            "planted {what} (pid {} here)",
            child.id()
        ))),
        Err(error) => Ok(Outcome::blocked(io_detail(
            &format!("spawn {what}"),
            &error,
        ))),
    }
}

/// Double fork into a new session: the lingerer is a daemon with no parent to reap it.
pub fn daemon(args: &Args) -> Attack {
    let marker = args.get("marker")?;
    let exe = std::env::current_exe().map_err(|e| Outcome::error(io_detail("current_exe", &e)))?;
    let status = Command::new(exe)
        .args([
            "__daemonize",
            "--marker",
            marker,
            "--seconds",
            &seconds(args).to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| Outcome::blocked(io_detail("spawn the intermediate", &e)))?;
    Ok(if status.success() {
        Outcome::succeeded("planted a double-forked setsid daemon")
    } else {
        Outcome::blocked(format!("the intermediate failed: {status}"))
    })
}

/// A lingerer in its own process group.
pub fn setpgid(args: &Args) -> Attack {
    let mut command = linger_command(args, false)?;
    command.process_group(0);
    spawn_and_forget(command, "a lingerer in its own process group")
}

/// A lingerer that ignores SIGTERM.
pub fn ignore_term(args: &Args) -> Attack {
    spawn_and_forget(linger_command(args, true)?, "a SIGTERM-ignoring lingerer")
}

/// A plain child still running when we exit.
pub fn child_running(args: &Args) -> Attack {
    spawn_and_forget(
        linger_command(args, false)?,
        "a child still running at exit",
    )
}

/// A lingerer, then stay alive ourselves: the test SIGKILLs the `palisade` supervisor while
/// we run and checks that the whole tree dies with it. Prints the verdict line first.
pub fn stay(args: &Args) -> Attack {
    let planted = spawn_and_forget(linger_command(args, false)?, "a lingerer; staying alive")?;
    emit("cleanup.stay", &planted);
    std::thread::sleep(Duration::from_secs(u64::from(seconds(args))));
    std::process::exit(0);
}

/// Helper: `victim --marker M`.
pub fn victim(rest: &[String]) {
    sys::alarm(300);
    let Some(args) = options(rest) else { return };
    let Ok(marker) = args.get("marker") else {
        return;
    };
    let kept: &'static [u8] = Box::leak(marker.as_bytes().to_vec().into_boxed_slice());
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "ready {:#x}", kept.as_ptr() as usize);
    let _ = stdout.flush();
    drop(stdout);
    // Live until the test closes our stdin.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::hint::black_box(kept);
}

/// Helper: `linger --marker M [--seconds N] [--ignore-term 1]`.
pub fn linger(rest: &[String]) {
    let args = options(rest);
    let seconds = args.as_ref().map_or(DEFAULT_SECONDS, seconds);
    if args.as_ref().and_then(|a| a.opt("ignore-term")).is_some() {
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            let _ = sys::ignore_signal(signal);
        }
    }
    sys::alarm(seconds);
    std::thread::sleep(Duration::from_secs(u64::from(seconds) + 5));
}

/// Helper: `__daemonize --marker M [--seconds N]`: start a lingerer in a new session, exit.
pub fn daemonize(rest: &[String]) {
    let Some(args) = options(rest) else { return };
    let Ok(mut command) = linger_command(&args, false) else {
        return;
    };
    let _ = sys::spawn_in_new_session(&mut command);
}
