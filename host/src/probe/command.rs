//! Running a probe's child process inside a time box.
//!
//! The child gets its own process group so that, at the deadline, it and everything it started
//! (a shell script's `sleep`, say) are killed together. The group is only signalled while its
//! leader is still unreaped, so its id cannot have been reused.

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The most output kept per stream; the rest is read and dropped so the child never blocks.
const MAX_OUTPUT: u64 = 64 * 1024;

/// How long to wait for the output readers once the child has exited.
const DRAIN_WAIT: Duration = Duration::from_millis(100);

/// A child that ran to completion.
#[derive(Debug)]
pub(crate) struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

#[derive(Debug)]
pub(crate) enum RunError {
    /// The program could not be started.
    Spawn(io::Error),
    /// Waiting for the child failed.
    Wait(io::Error),
    /// The deadline passed; the child's process group was killed.
    TimedOut,
}

/// Runs `program args…` with a clean environment and no stdin, until it exits or `deadline`.
pub(crate) fn run(
    program: &Path,
    args: &[String],
    deadline: Instant,
) -> Result<Finished, RunError> {
    let mut child = spawn(program, args, deadline)?;
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);

    let mut pause = Duration::from_micros(200);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(err) => {
                kill_group(&mut child);
                return Err(RunError::Wait(err));
            }
        }
        let now = Instant::now();
        if now >= deadline {
            kill_group(&mut child);
            return Err(RunError::TimedOut);
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(4));
    };

    let collect_until = Instant::now() + DRAIN_WAIT;
    Ok(Finished {
        status,
        stdout: collect(stdout, collect_until),
        stderr: collect(stderr, collect_until),
    })
}

fn spawn(program: &Path, args: &[String], deadline: Instant) -> Result<Child, RunError> {
    loop {
        let spawned = Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", palisade_shims::path::DEFAULT_PATH)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(child) => return Ok(child),
            // "Text file busy": another thread is between fork and exec holding a write handle
            // on the program (a freshly written script, a package upgrade). It passes.
            Err(err) if err.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(2));
            }
            Err(err) => return Err(RunError::Spawn(err)),
        }
    }
}

/// SIGKILLs the child's whole process group, then reaps the child.
fn kill_group(child: &mut Child) {
    match i32::try_from(child.id()) {
        Ok(pid) if pid > 0 => crate::sys::kill_group(pid),
        _ => {}
    }
    // Also covers a group that could not be signalled; an error means it is already gone.
    let _ = child.kill();
    let _ = child.wait();
}

fn drain<R: Read + Send + 'static>(stream: R) -> mpsc::Receiver<Vec<u8>> {
    let (sender, receiver) = mpsc::channel();
    let spawned = thread::Builder::new()
        .name("probe-output".to_owned())
        .spawn(move || {
            let mut kept = Vec::new();
            let mut stream = stream;
            let _ = (&mut stream).take(MAX_OUTPUT).read_to_end(&mut kept);
            let _ = io::copy(&mut stream, &mut io::sink());
            let _ = sender.send(kept);
        });
    // Without a reader thread the stream is dropped and the child sees EPIPE; that is fine.
    drop(spawned);
    receiver
}

/// The output, if its reader finished by `until` (a straggler holding the pipe gets nothing).
fn collect(receiver: Option<mpsc::Receiver<Vec<u8>>>, until: Instant) -> Vec<u8> {
    receiver
        .and_then(|receiver| {
            receiver
                .recv_timeout(until.saturating_duration_since(Instant::now()))
                .ok()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    #[test]
    fn captures_output_and_status() {
        let args = ["-c".to_owned(), "echo out; echo err >&2; exit 3".to_owned()];
        let done = run(
            Path::new("/bin/sh"),
            &args,
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(done.status.code(), Some(3));
        assert_eq!(done.stdout, b"out\n");
        assert_eq!(done.stderr, b"err\n");
    }

    #[test]
    fn kills_at_the_deadline() {
        let args = ["-c".to_owned(), "sleep 30; true".to_owned()];
        let start = Instant::now();
        let result = run(
            Path::new("/bin/sh"),
            &args,
            start + Duration::from_millis(200),
        );
        assert!(matches!(result, Err(RunError::TimedOut)));
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let result = run(
            Path::new("/nonexistent/prog"),
            &[],
            Instant::now() + Duration::from_secs(1),
        );
        assert!(matches!(result, Err(RunError::Spawn(_))));
    }
}
