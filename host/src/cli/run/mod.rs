//! `palisade run` as its phases: configure → measure (probes and facts) → decide (recorded
//! before anything launches) → prepare (the docker image check, the network bridge, the plan
//! translated once, what was clamped or is unenforced said) → launch and supervise → report (the
//! outcome recorded). Each phase takes what the one before settled. [`record`] is where the
//! outcome goes and what is said after the command; [`guards`] what must lie out of the
//! command's reach.

mod guards;
mod record;

use palisade_engine::output::{ConfinementPlan, PlanNetwork};
use palisade_engine::{Backend, DecisionInput, ExecutionMode, Outcome, Verdict};

use crate::audit;
use crate::denials::Denials;
use crate::envpolicy;
use crate::execmode;
use crate::exit::Exit;
use crate::facts;
use crate::launch;
use crate::network;
use crate::probe;
use crate::report::{ErrorCode, Failure};
use crate::timings::{Clock, Phase};
use crate::translate;

use crate::cli::CommandResult;
use crate::cli::args::RunArgs;
use crate::cli::claims::confirm_claims;
use crate::cli::engine::{DecisionSource, decide_recorded, refusal_failure};
use crate::cli::inputs::{
    budget_flags, execution, policy_flags, read_document, read_input, read_task_contract,
};
use crate::cli::setup::{facts_failure, host_setup, probe_options};
use crate::docker::{run_spec, verified_bridge};
use guards::{audit_outside_writable_roots, cache_outside_writable_roots, enforced_git_dirs};
use record::{
    Recorder, approval_lines, escalation_line, exit_for_signal, print_timings,
    unobserved_masks_line,
};

/// `palisade run`: its phases, each taking what the one before settled, as `--timings` prints
/// them. A phase that ends the run early (a refusal, a signal, a failure before the launch)
/// returns how it ended; every decision recorded gets its outcome.
pub fn run(args: &RunArgs) -> CommandResult {
    let ended = (|| -> Result<Exit, Ended> {
        let mut clock = Clock::start();
        let mut run = configure(args)?;
        clock.end(Phase::Configuration);
        let measured = measure(args, &mut run, &mut clock)?;
        let mut recorder = Recorder::open(args, &run.run_id)?;
        let (outcome, source) = decide(args, &mut run, &measured, &mut recorder, &mut clock)?;
        let plan = plan_of(&outcome)?;
        let digest = outcome.digest.as_str();
        let prepared = prepare(
            args,
            &mut run,
            &measured,
            digest,
            plan,
            &mut recorder,
            &mut clock,
        )?;
        let supervised = launch_and_supervise(&measured, prepared, &mut clock);
        let decided = Decided {
            digest,
            plan,
            source,
        };
        report(
            args,
            run,
            &measured,
            &decided,
            supervised,
            &mut recorder,
            &mut clock,
        )
    })();
    match ended {
        Ok(exit) | Err(Ended::Exit(exit)) => Ok(exit),
        Err(Ended::Failure(failure)) => Err(failure),
    }
}

/// How a phase ends the run before its last: with an exit status (a signal, the command's), or
/// a failure to report.
enum Ended {
    Exit(Exit),
    Failure(Failure),
}

impl From<Failure> for Ended {
    fn from(failure: Failure) -> Self {
        Ended::Failure(failure)
    }
}

/// Configuration: what the command line and the host configuration settle before anything is
/// measured.
struct Configured {
    /// Whether Palisade's own environment was scrubbed (see envpolicy), for the outcome.
    scrubbed: Result<(), String>,
    interrupts: palisade_shims::signals::Interrupts,
    setup: super::setup::HostSetup,
    mode: ExecutionMode,
    requester: Option<crate::execmode::Requester>,
    budget_flags: Option<palisade_engine::model::BudgetLimits>,
    overrides: Vec<(String, std::net::IpAddr)>,
    run_id: String,
    /// The run's private temp dir: a writable root of the decision, so the audit shows it.
    temp: launch::RunTempDir,
    probe_opts: probe::ProbeOptions,
}

fn configure(args: &RunArgs) -> Result<Configured, Failure> {
    // First, while single-threaded: what the command is denied, Palisade itself still holds;
    // keep it out of `/proc/<pid>/environ` (see envpolicy).
    let scrubbed = envpolicy::scrub_own_environ();
    // From here on, SIGINT, SIGTERM and SIGHUP stop the run at the next safe point instead of
    // killing Palisade mid-setup (which would leave its temp dir, and a decision without an
    // outcome); once the command runs, the supervisor forwards them to it.
    let interrupts = palisade_shims::signals::Interrupts::install()
        .map_err(|e| Failure::new(ErrorCode::Internal, format!("signal handlers: {e}")))?;
    let mut setup = host_setup(&args.host)?;
    cache_outside_writable_roots(&mut setup)?;
    let (mode, requester) = execution(&args.exec)?;
    let budget_flags = budget_flags(&args.budgets)?;
    let overrides = args
        .proxy_resolve
        .iter()
        .map(|text| network::parse_resolve(text))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::new(ErrorCode::InputInvalid, e.to_string()))?;
    let run_id = launch::new_run_id();
    let temp = launch::RunTempDir::in_slot(&run_id).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::InvalidInput {
            ErrorCode::InputInvalid
        } else {
            ErrorCode::Internal
        };
        Failure::new(code, e.to_string())
    })?;
    let probe_opts = probe_options(&args.host, &setup, !args.no_cache)?;
    Ok(Configured {
        scrubbed,
        interrupts,
        setup,
        mode,
        requester,
        budget_flags,
        overrides,
        run_id,
        temp,
        probe_opts,
    })
}

/// Measuring: the probes and the host facts, as the decision input.
struct Measured {
    input: DecisionInput,
    /// How the probes were had (`fresh`, `cache`, `input-file`), for the record.
    probe_source: &'static str,
    /// The programs a launch runs (bwrap, docker and docker-init, palisade-init), located once
    /// here: nothing is searched for again.
    programs: probe::Programs,
}

fn measure(args: &RunArgs, run: &mut Configured, clock: &mut Clock) -> Result<Measured, Ended> {
    let probes = probe::probe_all(&run.probe_opts);
    clock.end(Phase::Probes);
    if let Some(signal) = run.interrupts.received() {
        say!("palisade: stopped by signal {signal} before anything was decided; nothing ran");
        return Err(Ended::Exit(Exit::Command(exit_for_signal(signal))));
    }
    if let Some(problem) = &probes.cache_error {
        say!("warning: probe cache not used: {problem}");
    }
    let programs = probes.programs.clone();
    let (input, probe_source) = match &args.input {
        Some(source) => {
            if run.budget_flags.is_some()
                || args.budgets.task_contract.is_some()
                || run.mode != ExecutionMode::Sandbox
            {
                return Err(Failure::new(
                    ErrorCode::InputInvalid,
                    "budget flags, `--task-contract` and `--execution-mode` do not apply to `--input`, which carries its own",
                )
                .into());
            }
            let mut input = read_input(source)?;
            let measured = facts::gather(&run.setup.facts).map_err(facts_failure)?;
            confirm_claims(&input, &measured, &probes.probes)?;
            // The run's private temp dir is a writable root like any other, and recorded.
            input
                .host
                .writable_roots
                .push(run.temp.path().display().to_string());
            (input, "input-file")
        }
        None => {
            let (document, document_name) = read_document(&args.taskpack, &args.host)?;
            run.setup
                .facts
                .writable_roots
                .push(run.temp.path().to_path_buf());
            let host = facts::gather(&run.setup.facts).map_err(facts_failure)?;
            let mut input = DecisionInput {
                document,
                document_name,
                host,
                probes: probes.probes,
                narrow_allowed_domains: None,
                execution_mode: execmode::input_field(run.mode),
                budget_flags: run.budget_flags.clone(),
                task_contract: read_task_contract(&args.budgets)?,
                policy_flags: policy_flags(&args.policy)?,
            };
            crate::unix_sockets::measure_into(&mut input);
            (input, if probes.from_cache { "cache" } else { "fresh" })
        }
    };
    clock.end(Phase::FilesystemFacts);
    if let Some(audit) = &args.audit {
        audit_outside_writable_roots(audit, &input.host, "audit file")?;
        // A malformed key is refused now, before anything runs.
        super::engine::audit_signer()?;
        if let Some(checkpoint) = &args.checkpoint {
            audit_outside_writable_roots(checkpoint, &input.host, "checkpoint file")?;
        }
    }
    Ok(Measured {
        input,
        probe_source,
        programs,
    })
}

/// Deciding: the decision is on disk before anything is launched.
fn decide(
    args: &RunArgs,
    run: &mut Configured,
    measured: &Measured,
    recorder: &mut Recorder<'_>,
    clock: &mut Clock,
) -> Result<(Outcome, DecisionSource), Ended> {
    let mut context = audit::context_now("run", measured.probe_source);
    context.run_id = Some(run.run_id.clone());
    context.host_config = Some(run.setup.config.record());
    context.requested_by = run
        .requester
        .as_ref()
        .map(|requester| serde_json::to_value(requester).unwrap_or_default());
    let recorded = decide_recorded(
        &measured.input,
        args.audit.as_deref(),
        args.checkpoint.as_deref(),
        context,
        run.setup.cache.as_ref().map(|c| c.path.as_path()),
        !args.no_cache,
    )?;
    clock.end_at(Phase::ComponentLoad, Some(recorded.loaded));
    clock.end_at(Phase::Decide, Some(recorded.decided));
    clock.end_at(Phase::AuditWrite, Some(recorded.recorded));
    let outcome = recorded.outcome;
    if let Some(signal) = run.interrupts.received() {
        return Err(recorder.stopped(&outcome.digest, signal, clock));
    }
    Ok((outcome, recorded.source))
}

/// The decision a run launches: its digest (what the outcome names), its plan, and where it
/// came from (the decision cache or the engine).
struct Decided<'a> {
    digest: &'a str,
    plan: &'a ConfinementPlan,
    source: DecisionSource,
}

/// The plan of a decision; a refusal ends the run with its failure.
fn plan_of(outcome: &Outcome) -> Result<&ConfinementPlan, Failure> {
    match &outcome.verdict {
        Verdict::Decision(plan) => Ok(plan),
        Verdict::Refusal { .. } => Err(refusal_failure(outcome).unwrap_or_else(|| {
            Failure::new(ErrorCode::Internal, "the engine refused without a reason")
        })),
    }
}

/// Planning: what the launch needs besides the plan — the docker image checked against its pin,
/// the network bridge listening, the plan translated once, the command's environment.
struct Prepared {
    docker: Option<palisade_shims::docker::DockerSpec>,
    bridge: Option<network::BridgeSession>,
    launch_plan: palisade_shims::plan::LaunchPlan,
    environment: envpolicy::EnvRecord,
}

fn prepare(
    args: &RunArgs,
    run: &mut Configured,
    measured: &Measured,
    digest: &str,
    plan: &ConfinementPlan,
    recorder: &mut Recorder<'_>,
    clock: &mut Clock,
) -> Result<Prepared, Ended> {
    let mut prepared = match prepare_launch(args, run, measured, plan) {
        Ok(prepared) => prepared,
        Err(failure) => return Err(recorder.not_launched(digest, failure, clock)),
    };
    prepared.environment.supervisor_environ =
        envpolicy::concealment(&run.scrubbed, envpolicy::make_undumpable());
    // Tell the user what the decision clamped or leaves unenforced, before the command starts.
    for line in &plan.warnings {
        say!("palisade: {line}");
    }
    if let Some(signal) = run.interrupts.received() {
        if let Some(session) = prepared.bridge {
            drop(network::BridgeSession::finish(session));
        }
        return Err(recorder.stopped(digest, signal, clock));
    }
    clock.end(Phase::Plan);
    Ok(prepared)
}

/// Everything between the decision and the launch that can fail.
fn prepare_launch(
    args: &RunArgs,
    run: &Configured,
    measured: &Measured,
    plan: &ConfinementPlan,
) -> Result<Prepared, Failure> {
    let internal = |e: launch::LaunchError| Failure::new(ErrorCode::Internal, e.to_string());
    // The image is checked against its pin right before the launch, and before the proxy
    // starts: a docker run's proxy admits that container.
    let docker = match plan.backend {
        Backend::Docker => Some(run_spec(
            run.setup.profile.as_ref(),
            &run.probe_opts,
            &measured.programs,
            &run.run_id,
        )?),
        Backend::LinuxBwrap
        | Backend::LinuxLandlock
        | Backend::MacosSeatbelt
        | Backend::DirectDedicated => None,
    };
    // The network bridge (filtered egress, forwarded host loopback ports): its routes listen
    // before the sandbox exists.
    let routes = network::routes_for(&plan.network, &run.overrides);
    if !run.overrides.is_empty() && !matches!(plan.network, PlanNetwork::Filtered { .. }) {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            "`--proxy-resolve` applies only to a run with filtered egress (allowedDomains)",
        ));
    }
    if args.approve_with.is_some() && !matches!(plan.network, PlanNetwork::Filtered { .. }) {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            "`--approve-with` applies only to a run with filtered egress (allowedDomains): there is no proxy to ask it",
        ));
    }
    let approver = match &args.approve_with {
        Some(command) => Some(crate::approve::CommandApprover::new(
            command.clone(),
            run.run_id.clone(),
            args.command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            match &args.approve_timeout {
                Some(text) => super::units::parse_duration(text)
                    .map_err(|e| Failure::new(ErrorCode::UsageInvalid, e.to_string()))?,
                None => crate::approve::DEFAULT_TIMEOUT,
            },
        )),
        None => None,
    };
    let bridge = match routes {
        Some(routes) => {
            let site = match &docker {
                None => network::RunSite::Sandbox,
                Some((spec, bridge)) => network::RunSite::Container {
                    socket: spec.socket.clone(),
                    name: spec.container_name(),
                    bridge: verified_bridge(bridge.as_deref())?,
                },
            };
            Some(
                network::BridgeSession::start(&run.run_id, routes, site, approver)
                    .map_err(internal)?,
            )
        }
        None => None,
    };
    let (launch_plan, environment) = translate::launch_plan(
        plan,
        translate::HostSide {
            command: args.command.clone(),
            vars: std::env::vars_os(),
            home: measured.input.host.home_dir.clone(),
            run_temp_dir: run.temp.path().to_path_buf(),
            bridge: bridge
                .as_ref()
                .map(network::BridgeSession::plan)
                .transpose()
                .map_err(internal)?,
        },
    )
    .map_err(internal)?;
    Ok(Prepared {
        docker: docker.map(|(spec, _)| spec),
        bridge,
        launch_plan,
        environment,
    })
}

/// Launching and supervising: the command run under its mechanism, the tree reaped, and what
/// the sandbox refused as the supervisor and the network bridge saw it.
struct Supervised {
    result: Result<launch::Launched, launch::LaunchError>,
    bridge_account: Option<(network::BridgeRecord, Vec<crate::denials::Denial>)>,
    denials: Denials,
    environment: envpolicy::EnvRecord,
    /// When the launch began: what the command wrote after it is what the git scan looks at.
    started: std::time::SystemTime,
}

fn launch_and_supervise(measured: &Measured, prepared: Prepared, clock: &mut Clock) -> Supervised {
    let started = std::time::SystemTime::now();
    let result = launch::execute(
        &prepared.launch_plan,
        &launch::ExecuteOptions {
            bwrap: measured.programs.bwrap.clone(),
            sandbox_init: measured.programs.sandbox_init.clone(),
            docker: prepared.docker,
        },
    );
    if let Ok(launched) = &result {
        clock.end_at(Phase::Spawn, launched.marks.spawned);
        clock.end_at(Phase::SandboxSetup, launched.marks.started);
        clock.end_at(Phase::Command, launched.marks.exited);
        clock.end_at(Phase::ReapAndVerify, launched.marks.verified);
    }
    let bridge_account = prepared.bridge.map(network::BridgeSession::finish);
    let mut denials = Denials::default();
    if let Ok(launched) = &result {
        launched
            .denials
            .iter()
            .cloned()
            .for_each(|d| denials.add(d));
        denials.add_dropped(launched.dropped);
    }
    if let Some((_, refused)) = &bridge_account {
        refused.iter().cloned().for_each(|d| denials.add(d));
    }
    Supervised {
        result,
        bridge_account,
        denials,
        environment: prepared.environment,
        started,
    }
}

/// Reporting: the outcome recorded (the host-side facts of the run added to the supervisor's
/// account), what was refused said on stderr after the command's output, and the exit status.
#[allow(
    clippy::too_many_arguments,
    reason = "the phase's inputs are the earlier phases' outputs, each named"
)]
fn report(
    args: &RunArgs,
    run: Configured,
    measured: &Measured,
    decided: &Decided<'_>,
    supervised: Supervised,
    recorder: &mut Recorder<'_>,
    clock: &mut Clock,
) -> Result<Exit, Ended> {
    let Decided {
        digest,
        plan,
        source,
    } = *decided;
    let Supervised {
        mut result,
        bridge_account,
        denials,
        environment,
        started,
    } = supervised;
    // The signal handlers stay until the outcome is written (a SIGINT now must not kill
    // Palisade before it records the run); the temp dir goes before it, on success.
    let Configured {
        temp,
        interrupts: _handlers_until_recorded,
        requester,
        run_id,
        ..
    } = run;
    // A launch that failed before the command ran still gets an outcome, so no decision in the
    // audit file is left without one.
    let mut failed_record = match &result {
        Ok(_)
        | Err(
            launch::LaunchError::TreeNotEmpty { .. }
            | launch::LaunchError::ContainerNotRemoved { .. },
        ) => None,
        Err(launch::LaunchError::Stopped(signal)) => Some(launch::Outcome::new(
            launch::Ending::not_launched(
                format!("stopped by signal {signal} before the command started"),
                Some(*signal),
            ),
            i32::from(exit_for_signal(*signal)),
        )),
        Err(error) => Some(launch::Outcome::new(
            launch::Ending::not_launched(error.to_string(), None),
            125,
        )),
    };
    let failed_record_is_none = failed_record.is_none();
    // Host-side facts of the run: the proxy's account, the environment's names, who asked.
    let record = match &mut result {
        Ok(launched) => Some(&mut launched.record),
        Err(
            launch::LaunchError::TreeNotEmpty { record, .. }
            | launch::LaunchError::ContainerNotRemoved { record, .. },
        ) => Some(&mut **record),
        Err(_) => failed_record.as_mut(),
    };
    // What the command left for the host's git to run later, where no mount protected it.
    let scan = if record.is_some() && failed_record_is_none {
        crate::gitplanted::scan(
            &plan.writable_roots,
            &enforced_git_dirs(plan, &measured.input.host),
            started,
        )
    } else {
        crate::gitplanted::Scan {
            complete: true,
            ..Default::default()
        }
    };
    if let Some(record) = record {
        record.git_planted = scan.planted.clone();
        if !scan.complete {
            record.git_planted_scan = Some(launch::outcome::PlantedScan {
                complete: false,
                directories: scan.directories,
            });
        }
        record.network = bridge_account.map(|(account, _)| account);
        record.denials = Some(denials.clone());
        record.environment = Some(environment);
        record.decision_cache = Some(source.as_str());
        record.execution_mode =
            requester
                .as_ref()
                .map(|requester| launch::outcome::ExecutionMode {
                    mode: "workspace",
                    sandboxed: false,
                    requested_by: requester.clone(),
                });
    }
    let mut record_outcome = |record: launch::Outcome| {
        let (written, record) = recorder.write(digest, record, clock);
        let record = &record;
        // After the command, never interleaved with its output.
        if !args.quiet {
            if let Some(line) = escalation_line(record) {
                say!("{line}");
            }
            for line in denials.stderr_lines(&run_id, args.audit.as_deref()) {
                say!("{line}");
            }
            if let Some(line) = unobserved_masks_line(record) {
                say!("{line}");
            }
            for line in approval_lines(record) {
                say!("{line}");
            }
            for planted in &scan.planted {
                say!("{}", planted.line());
            }
            if !scan.complete {
                say!(
                    "palisade: note: the look for git hooks and configuration this run left stopped after {} directories of the writable roots' first two levels; a repository made beyond them was not checked",
                    scan.directories
                );
            }
        }
        print_timings(args, &written);
        if args.timings {
            say!(
                "  decision cache    {:>9}        the decision came from {}",
                source.as_str(),
                match source {
                    DecisionSource::Cache => "the cache: wasmtime was not started",
                    DecisionSource::EngineCacheMissed | DecisionSource::Engine => "the engine",
                }
            );
        }
    };
    match result {
        Ok(launched) => {
            // Removed before the outcome is written, so that its time is in the record.
            drop(temp);
            record_outcome(launched.record);
            Ok(Exit::Command(launched.exit_code))
        }
        Err(launch::LaunchError::TreeNotEmpty { remaining, record }) => {
            record_outcome(*record);
            Err(Failure::new(
                ErrorCode::Internal,
                format!("{remaining} processes of the run survived the cleanup"),
            )
            .hint("the outcome is in the audit record; report this as a bug")
            .into())
        }
        Err(launch::LaunchError::ContainerNotRemoved {
            container,
            detail,
            record,
        }) => {
            record_outcome(*record);
            Err(Failure::new(
                ErrorCode::DockerDaemonUnavailable,
                format!(
                    "the docker daemon did not confirm that container {container} is gone ({detail})"
                ),
            )
            .hint("a reaper keeps removing it, and the next docker run of this user removes it once this run is over")
            .into())
        }
        Err(launch::LaunchError::Stopped(signal)) => {
            if let Some(record) = failed_record {
                record_outcome(record);
            }
            say!("palisade: stopped by signal {signal} before the command started; nothing ran");
            Ok(Exit::Command(exit_for_signal(signal)))
        }
        Err(error) => {
            if let Some(record) = failed_record {
                record_outcome(record);
            }
            Err(Failure::new(ErrorCode::Internal, error.to_string())
                .hint(
                    "nothing was left running; `palisade doctor` shows what this host can enforce",
                )
                .into())
        }
    }
}
