//! `macos-seatbelt`: `/usr/bin/sandbox-exec` and a trial profile, on macOS only.

use std::path::Path;
use std::time::Instant;

use palisade_engine::model::{Backend, BackendProbe, Capability, NetworkMode};

use super::command::{self, RunError};
use super::{Inputs, first_line, timed_out, unavailable};

/// Where macOS ships the Seatbelt front end; it is never searched for elsewhere.
pub(crate) const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The trial: the most permissive profile, so a failure means Seatbelt itself is unusable.
const TRIAL_PROFILE: &str = "(version 1)(allow default)";

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
    let args = [
        "-p".to_owned(),
        TRIAL_PROFILE.to_owned(),
        "/usr/bin/true".to_owned(),
    ];
    match command::run(path, &args, deadline) {
        Ok(done) if done.status.success() => available(path),
        Ok(done) => {
            let line = first_line(&done.stderr);
            let line = if line.is_empty() {
                format!("sandbox-exec exited with {}", done.status)
            } else {
                line
            };
            unavailable(Backend::MacosSeatbelt, format!("trial failed: {line}"))
        }
        Err(RunError::TimedOut) => unavailable(Backend::MacosSeatbelt, timed_out(inputs.timeout())),
        Err(RunError::Spawn(err) | RunError::Wait(err)) => unavailable(
            Backend::MacosSeatbelt,
            format!("trial failed: cannot run `{}`: {err}", path.display()),
        ),
    }
}

fn available(path: &Path) -> BackendProbe {
    BackendProbe {
        backend: Backend::MacosSeatbelt,
        available: true,
        reason: format!("trial profile ran under `{}`", path.display()),
        capabilities: Capability::ALL
            .into_iter()
            .filter(|c| *c != Capability::SyscallFiltering)
            .collect(),
        network_modes: NetworkMode::ALL.to_vec(),
        domain_filtering: false,
        version: "sandbox-exec".to_owned(),
        limitations: vec![
            "no syscall filtering: seatbelt filters operations, not syscalls".to_owned(),
        ],
    }
}
