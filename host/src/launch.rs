//! Launching a plan: the host's side of `palisade run` once [`crate::translate`] has turned the
//! decision into the shims' `LaunchPlan` — running it under its mechanism, supervising it,
//! reaping the tree and accounting for it — plus the run's private temp dir and the parsers for
//! the budget flags.

#[cfg(target_os = "linux")]
use std::ffi::OsString;
use std::path::PathBuf;

use palisade_shims::plan::{LaunchPlan, Mechanism};

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
        record: serde_json::Value,
    },
    /// The docker daemon did not confirm that the run's container is gone (it was restarting,
    /// or did not answer in time): the reaper keeps removing it, and the next docker run of
    /// this user removes it once this run is over.
    #[error("the docker daemon did not confirm that container {container} is gone ({detail})")]
    ContainerNotRemoved {
        container: String,
        detail: String,
        record: serde_json::Value,
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

/// What `execute` needs besides the plan.
#[derive(Clone, Debug, Default)]
pub struct ExecuteOptions {
    /// The `bwrap` binary the probe trialled.
    pub bwrap: Option<PathBuf>,
    /// The daemon, CLI and checked image a `docker` plan runs with.
    pub docker: Option<palisade_shims::docker::DockerSpec>,
}

/// A finished run: the status to exit with, the account for the audit record, and what the
/// launch itself saw denied (the budget that ended the run).
#[derive(Clone, Debug)]
pub struct Launched {
    pub exit_code: u8,
    pub record: serde_json::Value,
    pub denials: Vec<crate::denials::Denial>,
    /// Denials an observer counted but did not keep.
    pub dropped: u64,
    /// When the supervisor saw the launch's steps (for the run's phase timings); all `None`
    /// when nothing was launched.
    pub marks: palisade_shims::supervise::Marks,
}

/// The fd on which the sandbox says it is about to exec the command (see [`exec_signal`]).
#[cfg(target_os = "linux")]
const EXEC_SIGNAL_FD: i32 = 4;

/// The command wrapped so that it writes one byte to [`EXEC_SIGNAL_FD`], closes it, and execs
/// the command in its own place. bwrap reports its own setup failures (a mountpoint it cannot
/// create, say) with status 1, exactly like a command's; the byte is how the launcher tells "the
/// sandbox was set up and the command started" from "nothing ran". The command never sees the
/// descriptor.
#[cfg(target_os = "linux")]
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

/// Launches the plan under its mechanism, supervises it, reaps the tree and reports.
///
/// A mechanism this OS does not have (Linux namespaces on macOS, Seatbelt on Linux) is
/// [`LaunchError::Unsupported`] before anything runs; the probes should never have offered it.
pub fn execute(plan: &LaunchPlan, options: &ExecuteOptions) -> Result<Launched, LaunchError> {
    match plan.mechanism {
        #[cfg(target_os = "linux")]
        Mechanism::Bwrap | Mechanism::Landlock(_) | Mechanism::Direct | Mechanism::Docker => {
            execute_linux(plan, options)
        }
        #[cfg(target_os = "macos")]
        Mechanism::Seatbelt => {
            let _ = options;
            execute_seatbelt(plan)
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

/// `macos-seatbelt`: resolve the command, measure the plan's paths, build the SBPL profile and
/// run `sandbox-exec -p PROFILE -- CMD…` as a supervised process group, whose cleanup also
/// sweeps every process carrying the run's sandbox (type-checked here, never run: no Mac).
#[cfg(target_os = "macos")]
fn execute_seatbelt(plan: &LaunchPlan) -> Result<Launched, LaunchError> {
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
    let mut record = outcome_record(&outcome, plan)?;
    let digest = sha2::Sha256::digest(profile.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    set(&mut record, "seatbeltProfileSha256", serde_json::json!(hex));
    Ok(Launched {
        exit_code: exit_byte(outcome.exit_code()),
        record,
        denials: budget_denials(&outcome, plan),
        dropped: 0,
        marks: outcome.marks,
    })
}

/// One bwrap launch of `plan`: the sandbox set up, the command supervised, the tree reaped.
#[cfg(target_os = "linux")]
fn launch_bwrap(plan: &LaunchPlan, options: &ExecuteOptions) -> Result<Launched, LaunchError> {
    match launch_bwrap_with(plan, options, true) {
        // bwrap's parent could not mount the masks in namespaces of its own (nothing ran):
        // mount them here instead (or keep them mute), as on a host where it never could.
        Err(LaunchError::MasksInNamespace(why)) => {
            let mut launched = launch_bwrap_with(plan, options, false)?;
            set(
                &mut launched.record,
                "masksInNamespace",
                serde_json::json!({"error": why}),
            );
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
#[cfg(target_os = "linux")]
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
    let init_binary = std::env::current_exe()
        .and_then(SandboxInitBinary::find)
        .map_err(|e| prepare(&e))?;
    let exe = init_binary.path.clone();
    // The filter is installed by Palisade's stub in the sandbox, observed: the calls
    // it refuses are answered (with the filter's errno) and recorded by this process.
    let (seccomp_rules, stub, observer_end) = if plan.syscall_filter {
        let profile = seccomp::Profile::for_plan(plan);
        let program = seccomp::build(&profile).map_err(|e| prepare(&e))?;
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
        (Some(program.len()), Some(stub), Some((ours, profile)))
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
            if !placeholders_left.is_empty() {
                set(
                    &mut record,
                    "placeholdersLeft",
                    serde_json::json!(placeholders_left),
                );
            }
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
    let mut record = outcome_record(&outcome, plan)?;
    set(
        &mut record,
        "seccompInstructions",
        serde_json::json!(seccomp_rules),
    );
    set(
        &mut record,
        "pid1",
        serde_json::json!({"init": init_binary.name, "dumpable": false}),
    );
    if !left.is_empty() {
        set(&mut record, "mountpointsLeft", serde_json::json!(left));
    }
    if !placeholders_left.is_empty() {
        set(
            &mut record,
            "placeholdersLeft",
            serde_json::json!(placeholders_left),
        );
    }
    let mut denials = budget_denials(&outcome, plan);
    if let Some(observed) = &observed {
        denials.extend(crate::denials::syscall_denials(observed));
        set(&mut record, "seccompObserver", observer_account(observed));
    }
    if let Some(seen) = &masks_seen {
        denials.extend(crate::denials::file_denials(
            seen,
            &args.denied_masks,
            &plan.denied_read_paths,
        ));
    }
    if !args.denied_masks.is_empty() {
        set(
            &mut record,
            "fileObserver",
            mask_account(masks_seen.as_ref(), mask_error.as_deref()),
        );
    }
    Ok(Launched {
        exit_code: exit_byte(outcome.exit_code()),
        record,
        denials,
        dropped: observed.map_or(0, |o| o.dropped)
            + masks_seen.as_ref().map_or(0, |seen| seen.dropped),
        marks: outcome.marks,
    })
}

/// The Linux mechanisms: bwrap, `palisade __sandbox-init` (Landlock, direct), or a container.
#[cfg(target_os = "linux")]
fn execute_linux(plan: &LaunchPlan, options: &ExecuteOptions) -> Result<Launched, LaunchError> {
    use palisade_shims::{init, supervise};
    let prepare = |e: &dyn std::fmt::Display| LaunchError::Prepare(e.to_string());
    let supervise_options = supervise::SuperviseOptions::default();
    match plan.mechanism {
        Mechanism::Bwrap => match launch_bwrap(plan, options) {
            // The command never started (no start byte), so trying again runs it at most once.
            // Seen under load: bwrap loses a race with mounts another sandbox or a container
            // makes at the same moment ("Unable to apply mount flags").
            Err(LaunchError::Setup(first)) => {
                say!(
                    "palisade: {first}; the command did not start, so palisade sets the sandbox up once more"
                );
                let mut launched = launch_bwrap(plan, options)?;
                set(
                    &mut launched.record,
                    "setupRetried",
                    serde_json::json!({"firstAttempt": first}),
                );
                Ok(launched)
            }
            other => other,
        },
        Mechanism::Seatbelt => Err(LaunchError::Unsupported(
            backend_name(plan.mechanism).to_owned(),
        )),
        Mechanism::Docker => match &options.docker {
            Some(spec) => crate::docker::execute(plan, spec),
            None => Err(LaunchError::Unsupported("docker".into())),
        },
        Mechanism::Landlock(_) | Mechanism::Direct => {
            let landlock = matches!(plan.mechanism, Mechanism::Landlock(_));
            let facts = if landlock {
                Some(
                    palisade_shims::landlock::ListingFacts::measure(plan)
                        .map_err(|e| prepare(&e))?,
                )
            } else {
                None
            };
            let mut spec = init::spec_for(plan, facts.as_ref()).map_err(|e| prepare(&e))?;
            // The denied paths are observed when this host can mount their masks: init binds
            // them, and the ruleset lets each through to its server, which refuses and records
            // every access (`fileObserver` says whether it happened).
            let masks = match &facts {
                Some(facts) => palisade_shims::landlock::observed_masks(plan, facts)
                    .map_err(|e| prepare(&e))?,
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
            let init_binary =
                SandboxInitBinary::find("/proc/self/exe".into()).map_err(|e| prepare(&e))?;
            let (launch, report) =
                init::launch(&spec, &init_binary.path).map_err(|e| prepare(&e))?;
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
            let mut record = outcome_record(&outcome, plan)?;
            set(
                &mut record,
                "pid1",
                serde_json::json!({"init": init_binary.name, "dumpable": false}),
            );
            // What the sandbox's `/proc` was: init applied the plan's or refused (above).
            if let Mechanism::Landlock(proc) = plan.mechanism {
                set(
                    &mut record,
                    "proc",
                    serde_json::to_value(proc).unwrap_or_default(),
                );
            }
            if let Some(status) = setup.landlock {
                set(
                    &mut record,
                    "landlock",
                    serde_json::to_value(status).unwrap_or_default(),
                );
            }
            let mut denials = budget_denials(&outcome, plan);
            if let Some(observed) = &setup.observed {
                denials.extend(crate::denials::syscall_denials(observed));
                set(&mut record, "seccompObserver", observer_account(observed));
            }
            if let Some(seen) = &masks_seen {
                denials.extend(crate::denials::file_denials(
                    seen,
                    &masks,
                    &plan.denied_read_paths,
                ));
            }
            if !masks.is_empty() {
                set(
                    &mut record,
                    "fileObserver",
                    mask_account(masks_seen.as_ref(), mask_error.as_deref()),
                );
            }
            Ok(Launched {
                exit_code: exit_byte(outcome.exit_code()),
                record,
                denials,
                dropped: setup.observed.map_or(0, |o| o.dropped)
                    + masks_seen.as_ref().map_or(0, |seen| seen.dropped),
                marks: outcome.marks,
            })
        }
    }
}

/// An empty directory of this run's (mode 0700), removed when dropped: the mountpoint a
/// Landlock sandbox's init mounts the observed masks on, in its own mount namespace.
#[cfg(target_os = "linux")]
struct EmptyDir(PathBuf);

#[cfg(target_os = "linux")]
impl EmptyDir {
    fn create(path: &std::path::Path) -> std::io::Result<EmptyDir> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(path)?;
        Ok(EmptyDir(path.to_path_buf()))
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

#[cfg(target_os = "linux")]
impl Drop for EmptyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Finds `plan.command[0]` the way `execvp` would ([`palisade_shims::path`]), in the absolute
/// entries of the plan's `PATH` (else the default), a relative path taken in the workspace: the
/// path, or the status `env` uses when it cannot run it (127 not found, 126 found but not
/// executable).
fn resolve_command(plan: &LaunchPlan) -> Result<PathBuf, u8> {
    use palisade_shims::path::{self, NotRunnable, Search};
    let Some(name) = plan.command.first() else {
        return Err(127);
    };
    let search_path = plan
        .env
        .iter()
        .find(|(key, _)| key == "PATH")
        .map_or(std::ffi::OsStr::new(path::DEFAULT_PATH), |(_, value)| {
            value.as_os_str()
        });
    let search = Search::absolute_entries(search_path).names_relative_to(&plan.workspace);
    let found = path::find_program(name, &search).map_err(NotRunnable::exit_status)?;
    // A name with a `/` is taken as it is: check it as `execve` would.
    path::runnable(&found).map_err(NotRunnable::exit_status)?;
    Ok(found)
}

/// The account of a command that was never executed because it could not be found or run.
fn not_executed(status: u8, plan: &LaunchPlan) -> Launched {
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
fn supervised(
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

fn outcome_record(
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
fn exit_byte(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(125)
}

/// A fresh id for one run: time and pid, unique on this host.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{nanos:x}-{}", std::process::id())
}

/// The run's private temporary directory (the sandbox's `TMPDIR`), removed when dropped.
///
/// It lives in `$XDG_RUNTIME_DIR` or the system temp dir, under a per-user `palisade-<uid>`
/// directory that must be ours, a real directory and closed to others — a directory another user
/// planted there (or a symlink) is refused rather than used.
///
/// A supervisor killed outright (SIGKILL, a power cut) cannot remove its directory, so each run
/// holds an exclusive `flock` on `run-<id>.lock` beside it for as long as it lives, and every
/// new run first removes the directories whose lock is free: the kernel drops a lock with its
/// holder, however it died, so a live run is never swept.
#[derive(Debug)]
pub struct RunTempDir {
    path: PathBuf,
    lock_path: PathBuf,
    /// Held for the run's lifetime (close-on-exec: no sandboxed process inherits it).
    _lock: std::fs::File,
}

impl RunTempDir {
    /// Creates `<base>/palisade-<uid>/run-<id>` with mode 0700, after sweeping the directories
    /// of runs that died without removing theirs.
    pub fn create(run_id: &str) -> Result<RunTempDir, std::io::Error> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
        let base = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
            None => std::env::temp_dir(),
            Some(dir) if dir.is_absolute() && dir.is_dir() => dir,
            // Set but unusable: said, rather than quietly putting the run somewhere else.
            Some(dir) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "XDG_RUNTIME_DIR `{}` is not an absolute path to a directory; fix or unset it",
                        dir.display()
                    ),
                ));
            }
        };
        let uid = crate::facts::current_uid();
        let parent = base.join(format!("palisade-{uid}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&parent) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = std::fs::symlink_metadata(&parent)?;
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
            return Err(std::io::Error::other(format!(
                "`{}` is not a private directory of this user; refusing to use it",
                parent.display()
            )));
        }
        sweep_dead_runs(&parent);
        // The lock is taken under a name sweepers ignore and then renamed into place (the lock
        // goes with the file): a `run-<id>.lock` a sweeper can lock is a dead run's, so it must
        // never be visible unlocked -- a concurrent run's sweep would take it for one and remove
        // it between its creation and its lock.
        let lock_path = run_lock_path(&parent.join(format!("run-{run_id}")));
        let pending = parent.join(format!("{PENDING_LOCK_PREFIX}{run_id}.lock"));
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&pending)?;
        if let Err(e) = lock
            .try_lock()
            .map_err(std::io::Error::from)
            .and_then(|()| std::fs::rename(&pending, &lock_path))
        {
            let _ = std::fs::remove_file(&pending);
            return Err(std::io::Error::other(format!(
                "cannot lock `{}`: {e}",
                lock_path.display()
            )));
        }
        let path = parent.join(format!("run-{run_id}"));
        let created = std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .and_then(|()| std::fs::canonicalize(&path));
        match created {
            Ok(path) => Ok(RunTempDir {
                path,
                lock_path,
                _lock: lock,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&lock_path);
                Err(e)
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for RunTempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// The lock of the run whose temp dir is `dir`: `run-<id>.lock` beside `run-<id>`.
fn run_lock_path(dir: &std::path::Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    dir.with_file_name(name)
}

/// The lock of the run whose temp dir is `dir`, opened for the supervisor to record its
/// launch in ([`palisade_shims::supervise::Launch::pid_record`]); `None` when the run has none (a temp dir
/// that is not a [`RunTempDir`]).
#[cfg(target_os = "linux")]
fn open_run_lock_for_record(dir: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(run_lock_path(dir))
        .ok()
}

/// How a run's lock file is named until it is locked ([`RunTempDir::create`]).
const PENDING_LOCK_PREFIX: &str = ".pending-run-";

/// Removes what dead runs left in `parent`: `run-<id>` and its siblings `run-<id>.<suffix>`
/// (the docker backend's bound files) when `run-<id>.lock` is there and nobody holds it (its
/// supervisor is gone), or when there is no lock file at all (made by a palisade before these
/// locks) and the supervisor pid, the id's second part, no longer exists. Best effort: what
/// cannot be removed now is tried again by the next run.
fn sweep_dead_runs(parent: &std::path::Path) {
    use std::collections::BTreeMap;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    // id → the entries named after it.
    let mut runs: BTreeMap<String, Vec<std::fs::DirEntry>> = BTreeMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_str().unwrap_or_default();
        // A lock not yet renamed into place: its run is starting, unless its supervisor died
        // in that instant.
        if let Some(id) = name
            .strip_prefix(PENDING_LOCK_PREFIX)
            .and_then(|rest| rest.strip_suffix(".lock"))
        {
            if supervisor_gone(id) {
                let _ = std::fs::remove_file(entry.path());
            }
            continue;
        }
        let id = name
            .strip_prefix("run-")
            .map(|rest| rest.split('.').next().unwrap_or(rest).to_owned());
        if let Some(id) = id {
            runs.entry(id).or_default().push(entry);
        }
    }
    for (id, entries) in runs {
        let lock_path = parent.join(format!("run-{id}.lock"));
        // Held until the entries are gone, so a sweeper that starts now waits out this one.
        let lock = if entries.iter().any(|e| e.path() == lock_path) {
            let Ok(Some(lock)) = take_free_lock(&lock_path) else {
                continue;
            };
            kill_leftovers(&id, &lock);
            Some(lock)
        } else {
            if !supervisor_gone(&id) {
                continue;
            }
            None
        };
        for entry in entries.iter().filter(|e| e.path() != lock_path) {
            // The dead run's observed masks: unmounted before their mountpoint can go.
            #[cfg(target_os = "linux")]
            if entry.file_name().to_string_lossy().ends_with(".masks") {
                palisade_shims::fusemask::unmount_stale(&entry.path());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir_all(entry.path());
            } else {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        if lock.is_some() {
            let _ = std::fs::remove_file(&lock_path);
        }
    }
}

/// Kills what the launch recorded in dead run `id`'s lock left running (bwrap's child orphaned
/// in setup, [`palisade_shims::supervise::kill_group_leftovers`]), and says so.
fn kill_leftovers(id: &str, mut lock: &std::fs::File) {
    let mut record = String::new();
    if std::io::Read::read_to_string(&mut lock, &mut record).is_err() || record.is_empty() {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let killed = palisade_shims::supervise::kill_group_leftovers(&record, run_start_ticks(id));
        if killed > 0 {
            say!(
                "palisade: killed {killed} process{} left by run {id}, whose supervisor was killed while bwrap set the sandbox up",
                if killed == 1 { "" } else { "es" }
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = id;
}

/// Whether run `id`, whose temp dir would be in `parent`, is over: its lock is there and
/// nobody holds it, or there is no lock (a sweep removed it, or the run kept it elsewhere) and
/// its supervisor is gone. What outlives a run (a container) may then be removed.
#[cfg(target_os = "linux")]
pub(crate) fn run_is_over(parent: &std::path::Path, id: &str) -> bool {
    match take_free_lock(&parent.join(format!("run-{id}.lock"))) {
        Ok(free) => free.is_some(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => supervisor_gone(id),
        Err(_) => false,
    }
}

/// A run's lock, locked, if nobody holds it (its run is over); `Ok(None)` while its run holds
/// it. The lock stays taken as long as the file is open.
fn take_free_lock(lock_path: &std::path::Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(lock_path)?;
    Ok(lock.try_lock().is_ok().then_some(lock))
}

/// Whether the supervisor of run `<nanos hex>-<pid>[-…]` is gone: no process has its pid, or
/// the one that has it started after the run did (the pid was reused). An id in another form
/// is never judged gone.
fn supervisor_gone(id: &str) -> bool {
    let Some(Ok(pid)) = id.split('-').nth(1).map(str::parse::<u32>) else {
        return false;
    };
    let Some(run_secs) = run_started_secs(id) else {
        return false;
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return pid > 0;
    };
    // Field 22, counted after the command name's closing parenthesis: start time in clock
    // ticks after boot.
    let ticks = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .and_then(|t| t.parse::<u64>().ok());
    let (Some(ticks), Some(boot)) = (ticks, boot_time_secs()) else {
        return false;
    };
    let hz = crate::facts::clock_ticks_per_second().max(1);
    let started_secs = boot.saturating_add(ticks / hz);
    // Whole seconds on both sides: a process started two seconds after the run is another.
    started_secs > run_secs.saturating_add(1)
}

/// When run `<nanos hex>-<pid>[-…]` started, in clock ticks after boot, less a second (the
/// clocks' whole seconds): no process of the run started before it.
#[cfg(target_os = "linux")]
fn run_start_ticks(id: &str) -> Option<u64> {
    let hz = crate::facts::clock_ticks_per_second().max(1);
    Some(
        run_started_secs(id)?
            .checked_sub(boot_time_secs()?)?
            .saturating_sub(1)
            .saturating_mul(hz),
    )
}

/// The run id's own clock: the whole second (since the epoch) in which run
/// `<nanos hex>-<pid>[-…]` started.
fn run_started_secs(id: &str) -> Option<u64> {
    let nanos = u128::from_str_radix(id.split('-').next()?, 16).ok()?;
    u64::try_from(nanos / 1_000_000_000).ok()
}

/// When the machine booted, in seconds since the epoch (`btime` of `/proc/stat`).
fn boot_time_secs() -> Option<u64> {
    std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|t| t.trim().parse::<u64>().ok())
    })
}

/// The file name of the init binary installed beside `palisade` (`src/init_main.rs`).
#[cfg(target_os = "linux")]
pub const INIT_BINARY: &str = "palisade-init";

/// The binary that runs the sandbox's init, PID 1 and seccomp stub: `palisade-init` beside this
/// binary when it is there (no WebAssembly runtime in it: each run starts it about a
/// millisecond sooner), else this binary itself, which has the same subcommands from the same
/// code. Either refuses a launcher of another build ([`palisade_shims::BUILD`]), so an init
/// left from another install fails the run instead of applying its own rules.
#[cfg(target_os = "linux")]
struct SandboxInitBinary {
    path: std::path::PathBuf,
    /// What the outcome's `pid1.init` records: `palisade-init` or `palisade`.
    name: &'static str,
}

#[cfg(target_os = "linux")]
impl SandboxInitBinary {
    /// `palisade-init` beside this binary, else `own`: how the launched program names this
    /// binary (bwrap binds a path of the host; init can exec `/proc/self/exe`, which stays this
    /// very version even if an upgrade replaces the file meanwhile).
    fn find(own: std::path::PathBuf) -> std::io::Result<SandboxInitBinary> {
        use std::os::unix::fs::PermissionsExt as _;
        let exe = std::env::current_exe()?;
        let beside = exe.with_file_name(INIT_BINARY);
        match std::fs::metadata(&beside) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                Ok(SandboxInitBinary {
                    path: beside,
                    name: INIT_BINARY,
                })
            }
            _ => Ok(SandboxInitBinary {
                path: own,
                name: "palisade",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    /// A run's lock is visible only once it is held, so a concurrent run's sweep never takes a
    /// starting run for a dead one; a pending lock left by a supervisor that died at that very
    /// instant is swept by the pid check.
    #[test]
    fn a_starting_runs_lock_is_never_swept_and_a_dead_ones_pending_lock_is() {
        let base = tempfile::tempdir().unwrap();
        let parent = base.path();
        // A dead run's pending lock: its pid does not exist.
        let dead = parent.join(format!("{PENDING_LOCK_PREFIX}1-2147483646.lock"));
        std::fs::write(&dead, b"").unwrap();
        // A live one's: this process.
        let live = parent.join(format!("{PENDING_LOCK_PREFIX}{}.lock", new_run_id()));
        std::fs::write(&live, b"").unwrap();
        // A run's held lock, as `create` leaves it.
        let held = parent.join("run-2-1.lock");
        let file = std::fs::File::create(&held).unwrap();
        file.try_lock().unwrap();
        sweep_dead_runs(parent);
        assert!(!dead.exists());
        assert!(live.exists());
        assert!(held.exists());
        drop(file);
        sweep_dead_runs(parent);
        assert!(!held.exists(), "a lock nobody holds is a dead run's");
    }

    /// Start time of `pid` in clock ticks after boot (`/proc/<pid>/stat` field 22).
    #[cfg(target_os = "linux")]
    fn start_ticks(pid: u32) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let (_, rest) = stat.rsplit_once(')').unwrap();
        rest.split_whitespace().nth(19).unwrap().parse().unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_dead_runs_orphaned_bwrap_child_is_killed_by_the_next_sweep_and_nothing_else() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        use std::process::Command;
        let base = tempfile::tempdir().unwrap();
        let parent = base.path().join("runs");
        std::fs::create_dir(&parent).unwrap();
        // The kernel names a process after the path it was executed by: stand-ins for bwrap.
        let bwrap = base.path().join("bwrap");
        std::os::unix::fs::symlink("/bin/sleep", &bwrap).unwrap();
        let spawn = |program: &std::path::Path, group: i32| {
            Command::new(program)
                .arg("60")
                .process_group(group)
                .spawn()
                .unwrap()
        };
        // A dead run: its launch (the group's leader, bwrap) and bwrap's child left in the
        // group, next to a process of another name in the group and a bwrap in another group.
        let mut launched = spawn(&bwrap, 0);
        let group = i32::try_from(launched.id()).unwrap();
        let mut orphan = spawn(&bwrap, group);
        let mut other_name = spawn(std::path::Path::new("/bin/sleep"), group);
        let mut other_group = spawn(&bwrap, 0);
        let record = format!("{group} {}", start_ticks(launched.id()));
        std::fs::write(parent.join("run-1-2147483646.lock"), &record).unwrap();
        // A live run with the same record (its lock held), and a dead one whose launch
        // started after these processes did.
        let held = parent.join("run-2-1.lock");
        std::fs::write(&held, &record).unwrap();
        let lock = std::fs::File::open(&held).unwrap();
        lock.try_lock().unwrap();
        sweep_dead_runs(&parent);
        assert_eq!(launched.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert_eq!(orphan.wait().unwrap().signal(), Some(libc::SIGKILL));
        for survivor in [&mut other_name, &mut other_group] {
            assert!(survivor.try_wait().unwrap().is_none());
        }
        let mut later = spawn(&bwrap, 0);
        let later_group = i32::try_from(later.id()).unwrap();
        let after = start_ticks(later.id()) + 1_000_000;
        std::fs::write(
            parent.join("run-3-2147483646.lock"),
            format!("{later_group} {after}"),
        )
        .unwrap();
        sweep_dead_runs(&parent);
        assert!(later.try_wait().unwrap().is_none());
        assert!(held.exists());
        // A supervisor killed right after the exec wrote no start time, only the child's pid:
        // the run id's clock bounds the start instead (a run of the future finds nothing).
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let future = now + 3_600_000_000_000;
        std::fs::write(
            parent.join(format!("run-{future:x}-2147483646.lock")),
            later_group.to_string(),
        )
        .unwrap();
        sweep_dead_runs(&parent);
        assert!(later.try_wait().unwrap().is_none());
        std::fs::write(
            parent.join(format!("run-{now:x}-2147483646.lock")),
            later_group.to_string(),
        )
        .unwrap();
        sweep_dead_runs(&parent);
        assert_eq!(later.wait().unwrap().signal(), Some(libc::SIGKILL));
        for mut process in [other_name, other_group] {
            process.kill().unwrap();
            process.wait().unwrap();
        }
        drop(lock);
    }
}
