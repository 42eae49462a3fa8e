//! `linux-bwrap`: a plan run under bubblewrap ([`palisade_shims::bwrap`] builds its argv), with
//! `palisade-init` as the sandbox's PID 1, the observed seccomp filter and masks, supervised and
//! reaped.

use std::ffi::OsString;
use std::path::PathBuf;

use palisade_shims::plan::LaunchPlan;

use super::init::SandboxInitBinary;
use super::outcome::{
    Failed, MaskAccount, ObserverAccount, Outcome, Pid1, SetupRetried, budget_denials, exit_byte,
    not_executed, resolve_command, supervised,
};
use super::rundir::{EmptyDir, open_run_lock_for_record};
use super::{ExecuteOptions, LaunchError, Launched};

/// Launches `plan` under bwrap; a sandbox that failed to set up (the command never started) is
/// set up once more.
pub(super) fn execute(
    plan: &LaunchPlan,
    options: &ExecuteOptions,
) -> Result<Launched, LaunchError> {
    match launch_bwrap(plan, options) {
        // The command never started (no start byte), so trying again runs it at most once.
        // Seen under load: bwrap loses a race with mounts another sandbox or a container
        // makes at the same moment ("Unable to apply mount flags").
        Err(LaunchError::Setup(first)) => {
            say!(
                "palisade: {first}; the command did not start, so palisade sets the sandbox up once more"
            );
            let mut launched = launch_bwrap(plan, options)?;
            launched.record.setup_retried = Some(SetupRetried {
                first_attempt: first,
            });
            Ok(launched)
        }
        other => other,
    }
}

/// The fd on which the sandbox says it is about to exec the command (see [`exec_signal`]).
const EXEC_SIGNAL_FD: i32 = 4;

/// The command wrapped so that it writes one byte to [`EXEC_SIGNAL_FD`], closes it, and execs
/// the command in its own place. bwrap reports its own setup failures (a mountpoint it cannot
/// create, say) with status 1, exactly like a command's; the byte is how the launcher tells "the
/// sandbox was set up and the command started" from "nothing ran". The command never sees the
/// descriptor.
fn exec_signal(command: &[OsString]) -> Vec<OsString> {
    let mut wrapped: Vec<OsString> = [
        "/bin/sh",
        "-c",
        "printf x >&4 && exec 4>&- && exec \"$@\"",
        "sh",
    ]
    .map(OsString::from)
    .to_vec();
    wrapped.extend(command.iter().cloned());
    wrapped
}

/// One bwrap launch of `plan`: the sandbox set up, the command supervised, the tree reaped.
fn launch_bwrap(plan: &LaunchPlan, options: &ExecuteOptions) -> Result<Launched, LaunchError> {
    match launch_bwrap_with(plan, options, true) {
        // bwrap's parent could not mount the masks in namespaces of its own (nothing ran):
        // mount them here instead (or keep them mute), as on a host where it never could.
        Err(LaunchError::MasksInNamespace(why)) => {
            let mut launched = launch_bwrap_with(plan, options, false)?;
            launched.record.masks_in_namespace = Some(Failed { error: why });
            Ok(launched)
        }
        other => other,
    }
}

/// One bwrap launch; `namespace_masks`: bwrap's parent mounts the observed masks in a mount
/// namespace of its own (for a user other than root, in a user namespace too: no
/// `fusermount3`), where this host lets it (`/dev/fuse` usable by the user). Nothing is then
/// mounted on the host: nothing to unmount, and nothing in the host's mount table for another
/// run's bwrap to meet while it binds `/` (a mount that went meanwhile failed that bwrap).
fn launch_bwrap_with(
    plan: &LaunchPlan,
    options: &ExecuteOptions,
    namespace_masks: bool,
) -> Result<Launched, LaunchError> {
    use palisade_shims::{bwrap, fsfacts, placeholder, seccomp, supervise};
    let prepare = |e: &dyn std::fmt::Display| LaunchError::Prepare(e.to_string());
    let supervise_options = supervise::SuperviseOptions::default();
    let program = options.bwrap.clone().ok_or(LaunchError::NoBwrap)?;
    // bwrap reports a failed exec as status 1, like any command's; resolve the command
    // here (the sandbox sees the same read-only root) to answer 127/126 as `env` does.
    let mut plan = plan.clone();
    match resolve_command(&plan) {
        Ok(path) => {
            if let Some(first) = plan.command.first_mut() {
                *first = path.into_os_string();
            }
        }
        Err(status) => return Ok(not_executed(status, &plan)),
    }
    let (mut started, signal) = std::io::pipe().map_err(|e| prepare(&e))?;
    // The seccomp stub reports the start itself when it execs the command directly;
    // with a network bridge in between (or no filter), a shell step does.
    let stub_signals = plan.syscall_filter && plan.network.bridge().is_none();
    if !stub_signals {
        plan.command = exec_signal(&plan.command);
    }
    let plan = &plan;
    let facts = fsfacts::measure(plan).map_err(|e| prepare(&e))?;
    let mut fds = vec![supervise::PassFd {
        fd: signal.into(),
        target: EXEC_SIGNAL_FD,
    }];
    // The init binary, read-only in the sandbox: its PID 1 (not dumpable, instead of bwrap's
    // reaper) and the stub that installs the filter.
    let init_binary = SandboxInitBinary::choose(
        options.sandbox_init.as_deref(),
        std::env::current_exe().map_err(|e| prepare(&e))?,
    );
    let exe = init_binary.path.clone();
    // The filter is installed by Palisade's stub in the sandbox, observed: the calls
    // it refuses are answered (with the filter's errno) and recorded by this process.
    let (seccomp_rules, stub, observer_end) = if plan.syscall_filter {
        let profile = seccomp::Profile::for_plan(plan);
        // The record's count only: the stub in the sandbox builds the filter it installs.
        let instructions = seccomp::instruction_count(&profile).map_err(|e| prepare(&e))?;
        let (ours, theirs) = seccomp::observe::channel().map_err(|e| prepare(&e))?;
        fds.push(supervise::PassFd {
            fd: theirs,
            target: bwrap::OBSERVE_FD,
        });
        let stub = bwrap::SandboxExec {
            exe: exe.clone(),
            reach: profile.reach,
            started_fd: stub_signals.then_some(EXEC_SIGNAL_FD),
        };
        (Some(instructions), Some(stub), Some((ours, profile)))
    } else {
        (None, None, None)
    };
    // The denied paths are served by observed masks when this host can mount them (a FUSE
    // node that refuses and records every access), else by the mute ones; the outcome's
    // `fileObserver` says which.
    let masks_at = plan.beside_run_temp_dir(".masks");
    let mut args = bwrap::argv_observed(plan, &facts, Some(&exe), stub.as_ref(), Some(&masks_at))
        .map_err(|e| prepare(&e))?;
    let in_namespace = namespace_masks
        && !args.denied_masks.is_empty()
        && crate::probe::masks_in_namespace().is_ok();
    let mut mask_mount = None;
    let mut mask_dir = None;
    let (mask_server, mask_error) = if args.denied_masks.is_empty() {
        (None, None)
    } else if in_namespace {
        let dir = EmptyDir::create(&masks_at).map_err(|e| prepare(&e))?;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(|e| prepare(&e))?;
        let server =
            palisade_shims::fusemask::MaskServer::serve_sent(ours.into(), &args.denied_masks)
                .map_err(|e| prepare(&e))?;
        mask_mount = Some(supervise::MaskMount {
            mountpoint: dir.path().to_path_buf(),
            socket: theirs.into(),
        });
        mask_dir = Some(dir);
        (Some(server), None)
    } else {
        match palisade_shims::fusemask::MaskServer::mount(&masks_at, &args.denied_masks) {
            Ok(server) => (Some(server), None),
            Err(err) => {
                args = bwrap::argv(plan, &facts, Some(&exe), stub.as_ref())
                    .map_err(|e| prepare(&e))?;
                (None, Some(err.to_string()))
            }
        }
    };
    let observer = match observer_end {
        Some((ours, profile)) => {
            // Connections the sandbox will refuse are recorded too: IP off its own loopback
            // (a namespace of its own), and host sockets the sandbox's view hides.
            let watch =
                seccomp::observe::Watch::for_reach(profile.reach, facts.host_sockets.clone());
            let arch = seccomp::Arch::native().map_err(|e| prepare(&e))?;
            Some(
                seccomp::observe::Observer::start(
                    seccomp::observe::Channel::Connected(ours),
                    arch,
                    profile,
                    watch,
                )
                .map_err(|e| prepare(&e))?,
            )
        }
        None => None,
    };
    // bwrap binds them, so they exist before it starts; a failure below releases them.
    let placeholders = placeholder::hold(&args.placeholders).map_err(|e| prepare(&e))?;
    let launch = supervise::Launch {
        program,
        args: args.args,
        env: Vec::new(),
        cwd: Some(PathBuf::from("/")),
        fds,
        kind: supervise::LaunchKind::Bwrap,
        // The supervisor notes when the byte arrives; it is read here after the run.
        started: started.try_clone().ok().map(std::os::fd::OwnedFd::from),
        // bwrap's child can outlive a killed supervisor (bubblewrap#633): the next run's sweep
        // finds it by what the supervisor writes into this run's lock.
        pid_record: open_run_lock_for_record(&plan.run_temp_dir),
        mask_namespace: mask_mount,
    };
    let outcome = supervise::run(launch, &plan.budgets, &supervise_options);
    if let Err(supervise::SuperviseError::Spawn { step, source, .. }) = &outcome
        && [supervise::MASK_NAMESPACE_STEP, supervise::MASK_MOUNT_STEP].contains(step)
    {
        return Err(LaunchError::MasksInNamespace(format!("{step}: {source}")));
    }
    // Mountpoints bwrap had to create in writable roots go, whatever happened.
    let left = fsfacts::cleanup_created(&args.created_mountpoints);
    let observed = observer.map(seccomp::observe::Observer::finish);
    // After the tree: a survivor would find its masks refusing with ENOTCONN, still closed.
    let masks_seen = mask_server.map(palisade_shims::fusemask::MaskServer::finish);
    // Their mountpoint, when bwrap's parent mounted them: empty on the host all along.
    drop(mask_dir);
    // Placeholders only once no process of the sandbox can have them mounted: removing
    // one would take its mount away from a survivor.
    let placeholders_left = match &outcome {
        Err(supervise::SuperviseError::TreeNotEmpty { .. }) => placeholders.keep(),
        _ => placeholders.release().left,
    };
    let outcome = match supervised(outcome, plan) {
        Err(LaunchError::TreeNotEmpty {
            remaining,
            mut record,
        }) => {
            // The survivors keep them mounted; the record says they are still there.
            record.placeholders_left = placeholders_left;
            return Err(LaunchError::TreeNotEmpty { remaining, record });
        }
        other => other?,
    };
    // Every writer is gone with the tree: one byte, or end of file when nothing ran.
    let mut byte = [0u8; 1];
    if !matches!(std::io::Read::read(&mut started, &mut byte), Ok(1)) {
        // The supervisor forwarded an interrupt and bwrap ended of it during setup:
        // the run was stopped, not broken.
        if let supervise::EndReason::Signal(signal) = outcome.ended_by {
            return Err(LaunchError::Stopped(signal));
        }
        return Err(LaunchError::Setup(format!(
            "bwrap could not set up the sandbox (status {}; its message is above)",
            outcome.exit_code()
        )));
    }
    let exit_code = exit_byte(outcome.exit_code());
    let mut denials = budget_denials(&outcome, plan);
    let marks = outcome.marks;
    let mut record = Outcome::supervised(outcome, plan);
    record.seccomp_instructions = Some(seccomp_rules);
    record.pid1 = Some(Pid1::init(init_binary.name));
    record.mountpoints_left = left;
    record.placeholders_left = placeholders_left;
    if let Some(observed) = &observed {
        denials.extend(crate::denials::syscall_denials(observed));
        record.seccomp_observer = Some(ObserverAccount::of(observed));
    }
    if let Some(seen) = &masks_seen {
        denials.extend(crate::denials::file_denials(
            seen,
            &args.denied_masks,
            &plan.denied_read_paths,
        ));
    }
    if !args.denied_masks.is_empty() {
        record.file_observer = Some(MaskAccount::of(masks_seen.as_ref(), mask_error.as_deref()));
    }
    Ok(Launched {
        exit_code,
        record,
        denials,
        dropped: observed.map_or(0, |o| o.dropped)
            + masks_seen.as_ref().map_or(0, |seen| seen.dropped),
        marks,
    })
}
