//! `linux-landlock` and `direct-dedicated`: a plan run by `palisade-init` (or this binary as
//! `__sandbox-init`), which applies the Landlock ruleset and the seccomp filter (Landlock) or
//! only the process-tree and budget supervision (direct), supervised and reaped.

use std::path::Path;

use palisade_shims::plan::{LaunchPlan, Mechanism};

use super::init::SandboxInitBinary;
use super::outcome::{
    MaskAccount, ObserverAccount, Outcome, Pid1, budget_denials, exit_byte, supervised,
};
use super::rundir::EmptyDir;
use super::{LaunchError, Launched};

/// Launches a Landlock or direct plan under `palisade-init`.
pub(super) fn execute(
    plan: &LaunchPlan,
    sandbox_init: Option<&Path>,
) -> Result<Launched, LaunchError> {
    use palisade_shims::{init, supervise};
    let prepare = |e: &dyn std::fmt::Display| LaunchError::Prepare(e.to_string());
    let supervise_options = supervise::SuperviseOptions::default();
    let landlock = matches!(plan.mechanism, Mechanism::Landlock(_));
    let facts = if landlock {
        Some(palisade_shims::landlock::ListingFacts::measure(plan).map_err(|e| prepare(&e))?)
    } else {
        None
    };
    let mut spec = init::spec_for(plan, facts.as_ref()).map_err(|e| prepare(&e))?;
    // The denied paths are observed when this host can mount their masks: init binds
    // them, and the ruleset lets each through to its server, which refuses and records
    // every access (`fileObserver` says whether it happened).
    let masks = match &facts {
        Some(facts) => {
            palisade_shims::landlock::observed_masks(plan, facts).map_err(|e| prepare(&e))?
        }
        None => Vec::new(),
    };
    // Init mounts them in the sandbox's own namespaces (nothing on the host but their
    // empty mountpoint) and the mask server `init::launch` starts serves them.
    let masks_at = plan.beside_run_temp_dir(".masks");
    let mut mask_error = None;
    let mountpoint = if masks.is_empty() {
        None
    } else {
        match crate::probe::masks_in_namespace() {
            Ok(()) => Some(EmptyDir::create(&masks_at).map_err(|e| prepare(&e))?),
            Err(why) => {
                mask_error = Some(why);
                None
            }
        }
    };
    if let Some(dir) = &mountpoint {
        spec.masks = Some(init::MaskSpec {
            mountpoint: dir.path().to_path_buf(),
            nodes: masks
                .iter()
                .map(|mask| init::MaskNode {
                    target: mask.target.clone(),
                    dir: mask.dir,
                })
                .collect(),
        });
    }
    // Without `palisade-init`: the running binary itself, not its path (replaced or
    // removed on disk meanwhile, the path would run another version or nothing).
    let init_binary = SandboxInitBinary::choose(sandbox_init, "/proc/self/exe".into());
    let (launch, report) = init::launch(&spec, &init_binary.path).map_err(|e| prepare(&e))?;
    let outcome = supervised(
        supervise::run(launch, &plan.budgets, &supervise_options),
        plan,
    )?;
    let setup = report.collect();
    drop(mountpoint);
    let mut masks_seen = setup.masks_seen;
    if let Some(why) = &setup.masks_error {
        masks_seen = None;
        mask_error = Some(format!("sandbox init did not bind them: {why}"));
    }
    if let Some(error) = setup.error {
        // Init refused before executing anything (e.g. Landlock not fully enforced).
        return Err(LaunchError::Setup(error));
    }
    let exit_code = exit_byte(outcome.exit_code());
    let mut denials = budget_denials(&outcome, plan);
    let marks = outcome.marks;
    let mut record = Outcome::supervised(outcome, plan);
    record.pid1 = Some(Pid1::init(init_binary.name));
    // What the sandbox's `/proc` was: init applied the plan's or refused (above).
    if let Mechanism::Landlock(proc) = plan.mechanism {
        record.proc = Some(proc);
    }
    record.landlock = setup.landlock;
    if let Some(observed) = &setup.observed {
        denials.extend(crate::denials::syscall_denials(observed));
        record.seccomp_observer = Some(ObserverAccount::of(observed));
    }
    if let Some(seen) = &masks_seen {
        denials.extend(crate::denials::file_denials(
            seen,
            &masks,
            &plan.denied_read_paths,
        ));
    }
    if !masks.is_empty() {
        record.file_observer = Some(MaskAccount::of(masks_seen.as_ref(), mask_error.as_deref()));
    }
    Ok(Launched {
        exit_code,
        record,
        denials,
        dropped: setup.observed.map_or(0, |o| o.dropped)
            + masks_seen.as_ref().map_or(0, |seen| seen.dropped),
        marks,
    })
}
