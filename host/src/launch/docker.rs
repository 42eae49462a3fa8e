//! `docker`: a plan run as a container from the image the runtime profile pinned and the host
//! checked right before ([`crate::docker`]), through [`palisade_shims::docker`]; the container
//! removed, its account and denials as the other launches give them.

use palisade_shims::docker as shim;
use palisade_shims::docker::{DockerSpec, Removal};
use palisade_shims::plan::LaunchPlan;
use palisade_shims::supervise;

use super::outcome::{DockerAccount, MaskAccount, ObserverAccount, Outcome, Pid1};
use super::{LaunchError, Launched};

/// Removes the containers of this user's earlier runs that are over but still exist, and says
/// so: a run killed while the daemon restarts can leave its container `Created` after the
/// reaper has given up (the create request finished after the reaper found nothing to remove).
/// Best effort: a daemon that does not answer now is the launch's problem, reported there.
fn sweep_orphaned_containers(plan: &LaunchPlan, spec: &DockerSpec) -> Vec<String> {
    let Some(runs) = plan.run_temp_dir.parent() else {
        return Vec::new();
    };
    let uid = crate::probe::user_ids().0;
    let Ok(containers) = shim::labelled(&spec.socket, uid) else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for container in containers {
        if container.run_id == spec.run_id || !super::rundir::run_is_over(runs, &container.run_id) {
            continue;
        }
        if matches!(
            shim::remove(&spec.socket, &container.name),
            Removal::Removed | Removal::AlreadyGone
        ) {
            say!(
                "palisade: removed container {} ({}), left by run {}, which is over",
                container.name,
                container.state,
                container.run_id
            );
            swept.push(container.name);
        }
    }
    swept
}

/// Runs the plan in a container (see [`palisade_shims::docker`]) and accounts for it (Linux:
/// the supervisor is Linux's).
pub fn execute(plan: &LaunchPlan, spec: &DockerSpec) -> Result<Launched, LaunchError> {
    let swept = sweep_orphaned_containers(plan, spec);
    let options = supervise::SuperviseOptions::default();
    let done = match shim::run(plan, spec, &options) {
        Ok(done) => done,
        Err(shim::DockerError::Supervise(supervise::SuperviseError::TreeNotEmpty {
            remaining,
            outcome,
        })) => {
            let record = Box::new(Outcome::supervised(*outcome, plan));
            return Err(LaunchError::TreeNotEmpty { remaining, record });
        }
        Err(shim::DockerError::Supervise(other)) => {
            return Err(LaunchError::Supervise(other.to_string()));
        }
        Err(other) => return Err(LaunchError::Prepare(other.to_string())),
    };
    let gone = matches!(done.removal, Removal::AlreadyGone | Removal::Removed);
    let exit_code = super::outcome::exit_byte(done.outcome.exit_code());
    // The client's supervisor enforces only the wall clock; the container's own budgets are its
    // cgroup's (a limitation the probe lists).
    let mut denials = super::outcome::budget_denials(&done.outcome, plan);
    let marks = done.outcome.marks;
    let mut outcome = done.outcome;
    // The client's tree is the supervisor's; the container's processes are gone only if the
    // container is.
    outcome.tree_empty = outcome.tree_empty && gone;
    let mut record = Outcome::supervised(outcome, plan);
    record.docker = Some(DockerAccount {
        container: done.container.clone(),
        image_id: spec.image_id.clone(),
        removal: done.removal.clone(),
        limits: done.limits,
        seccomp_rules: done.seccomp_rules,
    });
    record.containers_swept = swept;
    record.pid1 = Some(Pid1 {
        copy_of: Some(spec.init.clone()),
        ..Pid1::init("docker-init")
    });
    record.mountpoints_left = done.mountpoints_left;
    record.placeholders_left = done.placeholders_left;
    if let Removal::Failed(detail) = done.removal {
        record.removal_error = Some(detail.clone());
        return Err(LaunchError::ContainerNotRemoved {
            container: done.container,
            detail,
            record: Box::new(record),
        });
    }
    if let Some(observed) = &done.observed {
        denials.extend(crate::denials::syscall_denials(observed));
        record.seccomp_observer = Some(ObserverAccount::of(observed));
    }
    if let Some(seen) = &done.masks_seen {
        denials.extend(crate::denials::file_denials(
            seen,
            &done.denied_masks,
            &plan.denied_read_paths,
        ));
    }
    if !done.denied_masks.is_empty() {
        record.file_observer = Some(MaskAccount::of(
            done.masks_seen.as_ref(),
            done.mask_error.as_deref(),
        ));
    }
    Ok(Launched {
        exit_code,
        record,
        denials,
        dropped: done.observed.as_ref().map_or(0, |o| o.dropped)
            + done.masks_seen.as_ref().map_or(0, |seen| seen.dropped),
        // No start signal through `docker run`: the container's setup counts in `command`.
        marks,
    })
}
