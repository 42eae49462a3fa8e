//! `macos-seatbelt`: `/usr/bin/sandbox-exec` and trial profiles, on macOS only.

use std::path::Path;
use std::time::Instant;

use palisade_engine::model::{Backend, BackendProbe, Capability, NetworkMode};

use super::command::{self, RunError};
use super::{Inputs, first_line, timed_out, unavailable};

/// Where macOS ships the Seatbelt front end; it is never searched for elsewhere.
pub(crate) const SANDBOX_EXEC: &str = palisade_shims::seatbelt::SANDBOX_EXEC;

/// The program each trial runs: on every Mac, and allowed by every generated profile.
const TRIAL_PROGRAM: &str = "/usr/bin/true";

/// Runs `sandbox-exec -p TRIAL /usr/bin/true` for each of the shim's trial profiles (one per
/// network mode, `(deny default)` plus every kind of rule a launch uses), so a macOS whose
/// Seatbelt rejects an operation or filter the shim emits is reported here, not at launch.
pub(crate) fn probe(inputs: &Inputs, deadline: Instant) -> BackendProbe {
    if !cfg!(target_os = "macos") {
        return unavailable(Backend::MacosSeatbelt, "seatbelt needs macos".to_owned());
    }
    let Some(path) = inputs.sandbox_exec.usable() else {
        return unavailable(
            Backend::MacosSeatbelt,
            format!("sandbox-exec not found at `{SANDBOX_EXEC}`"),
        );
    };
    let trials = match palisade_shims::seatbelt::trial_profiles() {
        Ok(trials) => trials,
        Err(e) => {
            return unavailable(
                Backend::MacosSeatbelt,
                format!("cannot build the trial profile: {e}"),
            );
        }
    };
    for trial in trials {
        let args = [
            "-p".to_owned(),
            trial,
            "--".to_owned(),
            TRIAL_PROGRAM.to_owned(),
        ];
        match command::run(path, &args, deadline) {
            Ok(done) if done.status.success() => {}
            Ok(done) => {
                let line = first_line(&done.stderr);
                let line = if line.is_empty() {
                    format!("sandbox-exec exited with {}", done.status)
                } else {
                    line
                };
                return unavailable(Backend::MacosSeatbelt, format!("trial failed: {line}"));
            }
            Err(RunError::TimedOut) => {
                return unavailable(Backend::MacosSeatbelt, timed_out(inputs.timeout()));
            }
            Err(RunError::Spawn(err) | RunError::Wait(err)) => {
                return unavailable(
                    Backend::MacosSeatbelt,
                    format!("trial failed: cannot run `{}`: {err}", path.display()),
                );
            }
        }
    }
    available(path)
}

fn available(path: &Path) -> BackendProbe {
    BackendProbe {
        landlock_proc: None,
        backend: Backend::MacosSeatbelt,
        available: true,
        reason: format!("deny-default trial profiles ran under `{}`", path.display()),
        capabilities: Capability::ALL
            .into_iter()
            .filter(|c| *c != Capability::SyscallFiltering)
            .collect(),
        network_modes: NetworkMode::ALL.to_vec(),
        network_bridge: false,
        version: "sandbox-exec".to_owned(),
        limitations: vec![
            "no syscall filtering: seatbelt filters operations, not syscalls".to_owned(),
            "loopback-only is the host's loopback: macOS has no network namespaces".to_owned(),
            "process-tree cleanup kills the command's process group, then every process carrying the run's sandbox (found by sandbox_check on run-unique canary paths), also ones that left the group; that sweep is type-checked, not yet run on a Mac".to_owned(),
            "processes that left the group are killed only at cleanup: budgets count and signal the group".to_owned(),
            "no parent-death signal: if palisade is killed, the command's processes are not".to_owned(),
            "no filtered egress (allowedDomains): without a network namespace the proxy bridge's port would be open to every local process".to_owned(),
        ],
    }
}
