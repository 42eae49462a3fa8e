//! The account every launch gives of its run: the supervisor's outcome as the audit record's
//! JSON, the budget that ended it, what the observers did, and the account of a command that was
//! never executed.

use std::path::PathBuf;

use palisade_shims::plan::LaunchPlan;

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
        record: serde_json::json!({
            "exitCode": status,
            "endedBy": "not-executed",
            "detail": format!("`{name}`: {why}"),
            "treeEmpty": true,
        }),
        denials: Vec::new(),
        dropped: 0,
        marks: palisade_shims::supervise::Marks::default(),
    }
}

/// What the seccomp observer did, beside the denials it explained: whether it received the
/// filter's listener, and why it stopped early if it did.
#[cfg(target_os = "linux")]
pub(crate) fn observer_account(
    observed: &palisade_shims::seccomp::observe::Observed,
) -> serde_json::Value {
    serde_json::json!({
        "listening": observed.listening,
        "refused": observed.total,
        "error": observed.error,
    })
}

/// What the observed masks of the denied paths did: whether they were mounted (else the mute
/// masks served, and why), how many accesses they refused, and why they stopped early if they
/// did.
#[cfg(target_os = "linux")]
pub(crate) fn mask_account(
    seen: Option<&palisade_shims::fusemask::Seen>,
    mount_error: Option<&str>,
) -> serde_json::Value {
    match seen {
        Some(seen) => serde_json::json!({
            "mounted": true,
            "refused": seen.total,
            "error": seen.error,
        }),
        None => serde_json::json!({
            "mounted": false,
            "error": mount_error,
        }),
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

/// Adds a field to a JSON object (a no-op for anything else: the records built here are objects).
pub(crate) fn set(record: &mut serde_json::Value, key: &str, value: serde_json::Value) {
    if let Some(object) = record.as_object_mut() {
        object.insert(key.to_owned(), value);
    }
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
                record: outcome_record(&outcome, plan)?,
            })
        }
        Err(other) => Err(LaunchError::Supervise(other.to_string())),
    }
}

pub(crate) fn outcome_record(
    outcome: &palisade_shims::supervise::Outcome,
    plan: &LaunchPlan,
) -> Result<serde_json::Value, LaunchError> {
    let mut record =
        serde_json::to_value(outcome).map_err(|e| LaunchError::Supervise(e.to_string()))?;
    set(
        &mut record,
        "exitCode",
        serde_json::json!(outcome.exit_code()),
    );
    set(
        &mut record,
        "mechanism",
        serde_json::json!(plan.mechanism.name()),
    );
    Ok(record)
}

/// A process exit status byte: 0..=255 as is, anything else (never expected) as 125.
pub(crate) fn exit_byte(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(125)
}
