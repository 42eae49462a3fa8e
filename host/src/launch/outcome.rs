//! The account every launch gives of its run: [`Outcome`], the outcome half of the audit record
//! as one type (the supervisor's account, what the mechanism set up, what the observers did),
//! the budget that ended the run, and the account of a command that was never executed.

use std::path::PathBuf;

use palisade_shims::plan::LaunchPlan;
use serde::Serialize;

use super::{LaunchError, Launched};

/// Finds `plan.command[0]` the way `execvp` would ([`palisade_shims::path`]), in the absolute
/// entries of the plan's `PATH` (else the default), a relative path taken in the workspace: the
/// path, or the status `env` uses when it cannot run it (127 not found, 126 found but not
/// executable).
pub(crate) fn resolve_command(plan: &LaunchPlan) -> Result<PathBuf, u8> {
    use palisade_shims::path::{self, NotRunnable, Search};
    let Some(name) = plan.command.first() else {
        return Err(127);
    };
    let search =
        Search::absolute_entries(path::of_env(&plan.env)).names_relative_to(&plan.workspace);
    let found = path::find_program(name, &search).map_err(NotRunnable::exit_status)?;
    // A name with a `/` is taken as it is: check it as `execve` would.
    path::runnable(&found).map_err(NotRunnable::exit_status)?;
    Ok(found)
}

/// The account of a command that was never executed because it could not be found or run.
pub(crate) fn not_executed(status: u8, plan: &LaunchPlan) -> Launched {
    let name = plan
        .command
        .first()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let why = if status == 127 {
        "command not found"
    } else {
        "permission denied"
    };
    say!("palisade: {name}: {why}");
    Launched {
        exit_code: status,
        record: Outcome::new(
            Ending::NotExecuted {
                ended_by: "not-executed",
                detail: format!("`{name}`: {why}"),
                tree_empty: true,
            },
            i32::from(status),
        ),
        denials: Vec::new(),
        dropped: 0,
        marks: palisade_shims::supervise::Marks::default(),
    }
}

/// The outcome half of a run's audit record: one type for every mechanism and every way a run
/// ends, serialized once when it is written ([`crate::audit`] keeps its keys sorted, so the
/// order of the fields here is not the order of the bytes). Each launch fills in what its
/// mechanism set up and saw; `run`'s report adds the host's side (denials, the environment, the
/// network's account, what was planted) and the writer the timings.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// How the run ended: the supervisor's account, or why nothing (or nothing of the
    /// command) ran.
    #[serde(flatten)]
    pub ended: Ending,
    /// The status `palisade run` exits with.
    pub exit_code: i32,
    /// The mechanism that ran the command (`bwrap`, `landlock`, `docker`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<&'static str>,
    /// The sandbox's PID 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid1: Option<Pid1>,
    /// The length of the seccomp program bwrap's sandbox installed (`null` under bwrap
    /// without a filter; absent under other mechanisms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_instructions: Option<Option<usize>>,
    /// The `/proc` a Landlock sandbox got (init applied the plan's or refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc: Option<palisade_shims::plan::LandlockProc>,
    /// What the Landlock ruleset enforced.
    #[cfg(target_os = "linux")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landlock: Option<palisade_shims::landlock::Status>,
    /// The SHA-256 of the Seatbelt profile the command ran under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seatbelt_profile_sha256: Option<String>,
    /// The container's account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerAccount>,
    /// Containers of dead runs this run removed first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub containers_swept: Vec<String>,
    /// Why the daemon did not confirm the container gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removal_error: Option<String>,
    /// The first setup failed before the command started, and the sandbox was set up again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup_retried: Option<SetupRetried>,
    /// bwrap's parent could not mount the observed masks in namespaces of its own; the
    /// launcher mounted them instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub masks_in_namespace: Option<Failed>,
    /// Mountpoints created in writable roots that could not be removed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mountpoints_left: Vec<PathBuf>,
    /// Placeholders of denied paths still in place (a survivor holds them mounted).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placeholders_left: Vec<PathBuf>,
    /// What the seccomp observer did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_observer: Option<ObserverAccount>,
    /// What the observed masks of the denied paths did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_observer: Option<MaskAccount>,
    /// Repositories the command left hooks or command-running configuration in.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub git_planted: Vec<crate::gitplanted::Planted>,
    /// The look for them stopped early.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_planted_scan: Option<PlantedScan>,
    /// The network bridge's account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::network::BridgeRecord>,
    /// What the sandbox refused, every observer's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denials: Option<crate::denials::Denials>,
    /// The environment the command got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::envpolicy::EnvRecord>,
    /// Where the decision came from: `hit`, `miss`, `off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision_cache: Option<&'static str>,
    /// A `workspace` run: no isolation, by whose request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_mode: Option<ExecutionMode>,
    /// Where the run's time went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<crate::timings::Timings>,
}

/// How a run ended.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Ending {
    /// The command ran, under the supervisor, which accounts for it.
    Supervised(Box<palisade_shims::supervise::Outcome>),
    /// The command could not be found or run: nothing was launched.
    #[serde(rename_all = "camelCase")]
    NotExecuted {
        /// `not-executed`.
        ended_by: &'static str,
        detail: String,
        tree_empty: bool,
    },
    /// The launch failed, or a signal stopped it, before the command started.
    #[serde(rename_all = "camelCase")]
    NotLaunched {
        /// `not-launched`.
        ended_by: &'static str,
        error: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
}

impl Ending {
    /// A launch that failed before the command started.
    pub fn not_launched(error: String, signal: Option<i32>) -> Ending {
        Ending::NotLaunched {
            ended_by: "not-launched",
            error,
            signal,
        }
    }
}

/// The sandbox's PID 1: which init, that it is not dumpable, and for docker-init the file it
/// is a copy of.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pid1 {
    pub init: &'static str,
    pub dumpable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_of: Option<PathBuf>,
}

impl Pid1 {
    /// An init that is not dumpable (every init Palisade starts).
    pub fn init(name: &'static str) -> Pid1 {
        Pid1 {
            init: name,
            dumpable: false,
            copy_of: None,
        }
    }
}

/// The container of a docker run.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DockerAccount {
    pub container: String,
    pub image_id: String,
    pub removal: palisade_shims::docker::Removal,
    pub limits: palisade_shims::docker::Limits,
    pub seccomp_rules: Option<usize>,
}

/// The first attempt's failure, when the sandbox was set up again.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetupRetried {
    pub first_attempt: String,
}

/// Why a step did not go as planned.
#[derive(Debug, Serialize)]
pub struct Failed {
    pub error: String,
}

/// The look for what the command planted for git stopped after `directories`.
#[derive(Debug, Serialize)]
pub struct PlantedScan {
    pub complete: bool,
    pub directories: usize,
}

/// A run without isolation, by explicit request.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionMode {
    /// `workspace`.
    pub mode: &'static str,
    pub sandboxed: bool,
    pub requested_by: crate::execmode::Requester,
}

/// What the seccomp observer did, beside the denials it explained: whether it received the
/// filter's listener, and why it stopped early if it did.
#[derive(Debug, Serialize)]
pub struct ObserverAccount {
    pub listening: bool,
    pub refused: u64,
    pub error: Option<String>,
}

/// What the observed masks of the denied paths did: whether they were mounted (else the mute
/// masks served, and why), how many accesses they refused, and why they stopped early if they
/// did.
#[derive(Debug, Serialize)]
pub struct MaskAccount {
    pub mounted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<u64>,
    pub error: Option<String>,
}

impl Outcome {
    /// An outcome with nothing but how the run ended and its status; the launch and the report
    /// fill in the rest.
    pub fn new(ended: Ending, exit_code: i32) -> Outcome {
        Outcome {
            ended,
            exit_code,
            mechanism: None,
            pid1: None,
            seccomp_instructions: None,
            proc: None,
            #[cfg(target_os = "linux")]
            landlock: None,
            seatbelt_profile_sha256: None,
            docker: None,
            containers_swept: Vec::new(),
            removal_error: None,
            setup_retried: None,
            masks_in_namespace: None,
            mountpoints_left: Vec::new(),
            placeholders_left: Vec::new(),
            seccomp_observer: None,
            file_observer: None,
            git_planted: Vec::new(),
            git_planted_scan: None,
            network: None,
            denials: None,
            environment: None,
            decision_cache: None,
            execution_mode: None,
            timings: None,
        }
    }

    /// The supervisor's account of a command that ran under `plan`'s mechanism.
    pub fn supervised(outcome: palisade_shims::supervise::Outcome, plan: &LaunchPlan) -> Outcome {
        let exit_code = outcome.exit_code();
        Outcome {
            mechanism: Some(plan.mechanism.name()),
            ..Outcome::new(Ending::Supervised(Box::new(outcome)), exit_code)
        }
    }

    /// The whole record as JSON, for the audit line and `--json`.
    pub fn to_value(&self) -> serde_json::Value {
        // Every field is a plain struct, string, number or sequence: nothing here can fail
        // to serialize, and a failure would be a bug, not an outcome to hide.
        serde_json::to_value(self).unwrap_or_default()
    }
}

#[cfg(target_os = "linux")]
impl ObserverAccount {
    pub(crate) fn of(observed: &palisade_shims::seccomp::observe::Observed) -> ObserverAccount {
        ObserverAccount {
            listening: observed.listening,
            refused: observed.total,
            error: observed.error.clone(),
        }
    }
}

#[cfg(target_os = "linux")]
impl MaskAccount {
    pub(crate) fn of(
        seen: Option<&palisade_shims::fusemask::Seen>,
        mount_error: Option<&str>,
    ) -> MaskAccount {
        match seen {
            Some(seen) => MaskAccount {
                mounted: true,
                refused: Some(seen.total),
                error: seen.error.clone(),
            },
            None => MaskAccount {
                mounted: false,
                refused: None,
                error: mount_error.map(str::to_owned),
            },
        }
    }
}

/// The budget that ended the run, as the supervisor accounted for it.
pub(crate) fn budget_denials(
    outcome: &palisade_shims::supervise::Outcome,
    plan: &LaunchPlan,
) -> Vec<crate::denials::Denial> {
    crate::denials::budget_denial(outcome, &plan.budgets)
        .into_iter()
        .collect()
}

/// The supervisor's result, with a surviving tree turned into an error that keeps the record.
pub(crate) fn supervised(
    result: Result<palisade_shims::supervise::Outcome, palisade_shims::supervise::SuperviseError>,
    plan: &LaunchPlan,
) -> Result<palisade_shims::supervise::Outcome, LaunchError> {
    use palisade_shims::supervise::SuperviseError;
    match result {
        Ok(outcome) => Ok(outcome),
        Err(SuperviseError::TreeNotEmpty { remaining, outcome }) => {
            Err(LaunchError::TreeNotEmpty {
                remaining,
                record: Box::new(Outcome::supervised(*outcome, plan)),
            })
        }
        Err(other) => Err(LaunchError::Supervise(other.to_string())),
    }
}

/// A process exit status byte: 0..=255 as is, anything else (never expected) as 125.
pub(crate) fn exit_byte(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(125)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outcomes no real run in `tests/outcome-shapes/` makes: byte for byte what the
    /// records of runs stopped or failed before their command carried when they were JSON
    /// built by hand.
    #[test]
    fn outcomes_of_runs_that_never_started_keep_their_bytes() {
        let stopped = Outcome {
            denials: Some(crate::denials::Denials::default()),
            ..Outcome::new(
                Ending::not_launched(
                    "stopped by signal 2 before the command started".into(),
                    Some(2),
                ),
                130,
            )
        };
        assert_eq!(
            stopped.to_value().to_string(),
            r#"{"denials":{"dropped":0,"events":[],"total":0},"endedBy":"not-launched","error":"stopped by signal 2 before the command started","exitCode":130,"signal":2}"#
        );
        let failed = Outcome::new(Ending::not_launched("no bwrap".into(), None), 125);
        assert_eq!(
            failed.to_value().to_string(),
            r#"{"endedBy":"not-launched","error":"no bwrap","exitCode":125}"#
        );
    }

    #[test]
    fn an_unmounted_mask_account_has_no_count() {
        #[cfg(target_os = "linux")]
        let account = MaskAccount::of(None, Some("no /dev/fuse"));
        #[cfg(not(target_os = "linux"))]
        let account = MaskAccount {
            mounted: false,
            refused: None,
            error: Some("no /dev/fuse".into()),
        };
        assert_eq!(
            serde_json::to_string(&account).unwrap_or_default(),
            r#"{"mounted":false,"error":"no /dev/fuse"}"#
        );
    }
}
