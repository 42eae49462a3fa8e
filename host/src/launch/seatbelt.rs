//! `macos-seatbelt`: a plan run under `sandbox-exec` with the profile
//! [`palisade_shims::seatbelt`] builds.

use std::path::PathBuf;

use palisade_shims::plan::LaunchPlan;

use super::outcome::{
    Outcome, budget_denials, exit_byte, not_executed, resolve_command, supervised,
};
use super::{LaunchError, Launched};

/// `macos-seatbelt`: resolve the command, measure the plan's paths, build the SBPL profile and
/// run `sandbox-exec -p PROFILE -- CMD…` as a supervised process group, whose cleanup also
/// sweeps every process carrying the run's sandbox (type-checked here, never run: no Mac).
#[cfg(target_os = "macos")]
pub(super) fn execute(plan: &LaunchPlan) -> Result<Launched, LaunchError> {
    use palisade_shims::{pgroup, seatbelt, supervise};
    use sha2::Digest;
    let prepare = |e: &dyn std::fmt::Display| LaunchError::Prepare(e.to_string());
    // sandbox-exec reports a failed exec with its own status; resolve the command here (the
    // sandbox reads the same filesystem) to answer 127/126 as `env` does.
    let mut plan = plan.clone();
    match resolve_command(&plan) {
        Ok(path) => {
            if let Some(first) = plan.command.first_mut() {
                *first = path.into_os_string();
            }
        }
        Err(status) => return Ok(not_executed(status, &plan)),
    }
    let plan = &plan;
    let facts = seatbelt::measure(plan).map_err(|e| prepare(&e))?;
    // A fresh token per run names the profile's membership canaries, by which the cleanup
    // sweep recognises the run's processes after they left the process group.
    let token = seatbelt::RunToken::random().map_err(|e| prepare(&e))?;
    let profile = seatbelt::profile(plan, &facts, &token).map_err(|e| prepare(&e))?;
    let canary = seatbelt::canary(plan, &facts, &token).map_err(|e| prepare(&e))?;
    let members = seatbelt::SandboxMembers::new(&canary).map_err(|e| prepare(&e))?;
    let args = seatbelt::argv(&profile, plan).map_err(|e| prepare(&e))?;
    let launch = supervise::Launch {
        program: PathBuf::from(seatbelt::SANDBOX_EXEC),
        args,
        env: plan.env.clone(),
        cwd: Some(plan.workspace.clone()),
        fds: Vec::new(),
        kind: supervise::LaunchKind::Plain,
        started: None,
        pid_record: None,
        mask_namespace: None,
    };
    let outcome = supervised(
        pgroup::run(
            launch,
            &plan.budgets,
            &supervise::SuperviseOptions::default(),
            Some(&members),
        ),
        plan,
    )?;
    let exit_code = exit_byte(outcome.exit_code());
    let denials = budget_denials(&outcome, plan);
    let marks = outcome.marks;
    let mut record = Outcome::supervised(outcome, plan);
    let digest = sha2::Sha256::digest(profile.as_bytes());
    record.seatbelt_profile_sha256 = Some(digest.iter().map(|b| format!("{b:02x}")).collect());
    Ok(Launched {
        exit_code,
        record,
        denials,
        dropped: 0,
        marks,
    })
}
