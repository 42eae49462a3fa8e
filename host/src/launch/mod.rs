//! Launching a plan: the host's side of `palisade run` once [`crate::translate`] has turned the
//! decision into the shims' `LaunchPlan`. This module only dispatches; each mechanism's launch is
//! in its own file, read the same way for every backend: `probe/X.rs` (what this host can do) →
//! `launch/X.rs` (plan → mechanism) → `palisade_shims::X` (the mechanism). [`outcome`] is the
//! account every launch gives of its run, [`rundir`] the run's private temp dir, its lock and the
//! sweep of dead runs.

use std::path::PathBuf;

use palisade_shims::plan::{LaunchPlan, Mechanism};

#[cfg(target_os = "linux")]
mod bwrap;
#[cfg(target_os = "linux")]
mod docker;
#[cfg(target_os = "linux")]
mod init;
#[cfg(target_os = "linux")]
mod landlock;
pub(crate) mod outcome;
pub mod rundir;
#[cfg(target_os = "macos")]
mod seatbelt;

#[cfg(target_os = "linux")]
pub use init::{INIT_BINARY, locate_sandbox_init};
pub use outcome::{Ending, Outcome};
pub use rundir::{RunTempDir, new_run_id};

/// Why a decision cannot be launched.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("bubblewrap is not installed (it was when probed); nothing was run")]
    NoBwrap,
    #[error("cannot prepare the sandbox: {0}")]
    Prepare(String),
    #[error("the supervisor failed: {0}")]
    Supervise(String),
    /// The command ran, but the tree could not be emptied: the worst failure a launcher can
    /// have, reported loudly with the outcome for the audit record.
    #[error("{remaining} processes of the run survived the cleanup")]
    TreeNotEmpty {
        remaining: usize,
        record: Box<outcome::Outcome>,
    },
    /// The docker daemon did not confirm that the run's container is gone (it was restarting,
    /// or did not answer in time): the reaper keeps removing it, and the next docker run of
    /// this user removes it once this run is over.
    #[error("the docker daemon did not confirm that container {container} is gone ({detail})")]
    ContainerNotRemoved {
        container: String,
        detail: String,
        record: Box<outcome::Outcome>,
    },
    #[error("sandbox setup failed inside the launcher; the command did not run: {0}")]
    Setup(String),
    /// bwrap's parent could not mount the observed masks in namespaces of its own; nothing
    /// ran ([`launch_bwrap`] tries again with the masks mounted another way).
    #[error("the observed masks could not be mounted in namespaces of the sandbox's own: {0}")]
    MasksInNamespace(String),
    /// A forwarded SIGINT, SIGTERM or SIGHUP ended the sandbox while it was being set up.
    #[error("stopped by signal {0} before the command started; nothing ran")]
    Stopped(i32),
    #[error("the decision has no launchable plan: {0}")]
    Plan(String),
    #[error("backend `{0}` cannot launch commands yet; nothing was run")]
    Unsupported(String),
    #[error("invalid {what} `{value}`: {reason}")]
    Flag {
        what: &'static str,
        value: String,
        reason: String,
    },
}

/// What `execute` needs besides the plan: the programs `run` located while measuring.
#[derive(Clone, Debug, Default)]
pub struct ExecuteOptions {
    /// The `bwrap` binary the probe trialled.
    pub bwrap: Option<PathBuf>,
    /// `palisade-init` beside this binary, if installed (else this binary runs the init).
    pub sandbox_init: Option<PathBuf>,
    /// The daemon, CLI and checked image a `docker` plan runs with.
    pub docker: Option<palisade_shims::docker::DockerSpec>,
}

/// A finished run: the status to exit with, the account for the audit record, and what the
/// launch itself saw denied (the budget that ended the run).
#[derive(Debug)]
pub struct Launched {
    pub exit_code: u8,
    pub record: outcome::Outcome,
    pub denials: Vec<crate::denials::Denial>,
    /// Denials an observer counted but did not keep.
    pub dropped: u64,
    /// When the supervisor saw the launch's steps (for the run's phase timings); all `None`
    /// when nothing was launched.
    pub marks: palisade_shims::supervise::Marks,
}

/// Launches the plan under its mechanism, supervises it, reaps the tree and reports.
///
/// A mechanism this OS does not have (Linux namespaces on macOS, Seatbelt on Linux) is
/// [`LaunchError::Unsupported`] before anything runs; the probes should never have offered it.
pub fn execute(plan: &LaunchPlan, options: &ExecuteOptions) -> Result<Launched, LaunchError> {
    match plan.mechanism {
        #[cfg(target_os = "linux")]
        Mechanism::Bwrap => bwrap::execute(plan, options),
        #[cfg(target_os = "linux")]
        Mechanism::Landlock(_) | Mechanism::Direct => {
            landlock::execute(plan, options.sandbox_init.as_deref())
        }
        #[cfg(target_os = "linux")]
        Mechanism::Docker => match &options.docker {
            Some(spec) => docker::execute(plan, spec),
            None => Err(LaunchError::Unsupported("docker".into())),
        },
        #[cfg(target_os = "macos")]
        Mechanism::Seatbelt => {
            let _ = options;
            seatbelt::execute(plan)
        }
        #[allow(
            unreachable_patterns,
            reason = "every mechanism is reachable on some OS"
        )]
        other => Err(LaunchError::Unsupported(backend_name(other).to_owned())),
    }
}

/// The backend name a mechanism launches, as the engine spells it.
fn backend_name(mechanism: Mechanism) -> &'static str {
    match mechanism {
        Mechanism::Bwrap => "linux-bwrap",
        Mechanism::Landlock(_) => "linux-landlock",
        Mechanism::Direct => "direct-dedicated",
        Mechanism::Seatbelt => "macos-seatbelt",
        Mechanism::Docker => "docker",
    }
}
