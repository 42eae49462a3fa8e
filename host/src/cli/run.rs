//! `palisade run`: decide (recorded before anything launches), start what the plan needs (the
//! docker image check, the egress proxy), translate the plan once, say what was clamped or
//! is unenforced, launch, and record the outcome.

use palisade_engine::output::PlanNetwork;
use palisade_engine::{Backend, DecisionInput, ExecutionMode, Verdict};
use palisade_shims::plan::LandlockProc;
use serde_json::Value;

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
use crate::timings::{Clock, Phase, Timings};
use crate::translate;

use super::CommandResult;
use super::args::RunArgs;
use super::engine::{decide_recorded, refusal_failure};
use super::inputs::{
    budget_flags, execution, policy_flags, read_document, read_input, read_task_contract,
};
use super::setup::{docker_spec, facts_failure, host_setup, probe_options, verified_bridge};

/// A managed controller's decision input may not claim more than this host measured: the same
/// OS and architecture, existing directories at their real paths, and for every backend no
/// availability, capability, network mode or network bridge this host's own probe lacks.
/// Otherwise the launch would rest on isolation nobody measured here.
fn confirm_claims(
    input: &DecisionInput,
    measured: &palisade_engine::HostFacts,
    probes: &[palisade_engine::BackendProbe],
) -> Result<(), Failure> {
    let mut problems = Vec::new();
    for (field, claimed, here) in [
        ("host.os", &input.host.os, &measured.os),
        ("host.arch", &input.host.arch, &measured.arch),
    ] {
        if claimed != here {
            problems.push(format!("{field}: `{claimed}`, but this host is `{here}`"));
        }
    }
    // `--writable` places too: the shim binds a writable root at its real path, so a symlink
    // spelt inside the workspace would make its target writable.
    let flagged = input
        .policy_flags
        .iter()
        .flat_map(|flags| flags.writable_roots.iter().enumerate())
        .map(|(i, root)| (format!("policyFlags.writableRoots[{i}]"), root));
    let dirs = std::iter::once(("host.workspaceDir".to_owned(), &input.host.workspace_dir))
        .chain(
            input
                .host
                .writable_roots
                .iter()
                .enumerate()
                .map(|(i, root)| (format!("host.writableRoots[{i}]"), root)),
        )
        .chain(flagged);
    for (field, dir) in dirs {
        let real = std::fs::canonicalize(dir);
        if !real
            .as_ref()
            .is_ok_and(|real| real.is_dir() && real == std::path::Path::new(dir))
        {
            problems.push(format!(
                "{field}: `{dir}` is not an existing directory at its real path here"
            ));
        }
    }
    problems.extend(looser_host_facts(&input.host, measured));
    problems.extend(crate::unix_sockets::claims_differ(&input.host, measured));
    for (index, claim) in input.probes.iter().enumerate() {
        let name = claim.backend.as_str();
        let Some(here) = probes.iter().find(|p| p.backend == claim.backend) else {
            problems.push(format!("probes[{index}]: `{name}` was not probed here"));
            continue;
        };
        if claim.available && !here.available {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed available, but here: {}",
                here.reason
            ));
            continue;
        }
        if !claim.available {
            continue;
        }
        for capability in claim
            .capabilities
            .iter()
            .filter(|c| !here.capabilities.contains(c))
        {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed to provide `{}`, which this host's probe does not",
                capability.as_str()
            ));
        }
        for mode in claim
            .network_modes
            .iter()
            .filter(|m| !here.network_modes.contains(m))
        {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed to enforce network mode `{}`, which this host's probe does not",
                mode.as_str()
            ));
        }
        if claim.network_bridge && !here.network_bridge {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed to have the network bridge (filtered egress, host loopback ports), which this host's probe does not"
            ));
        }
        // Sharing the host's `/proc` (every process directory denied) needs nothing of the
        // host; a `/proc` of the sandbox's own does.
        if claim.backend == Backend::LinuxLandlock
            && LandlockProc::from_limitations(&claim.limitations) == Some(LandlockProc::Own)
            && LandlockProc::from_limitations(&here.limitations) != Some(LandlockProc::Own)
        {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed to give the sandbox a /proc of its own, which this host's probe does not"
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let mut failure = Failure::new(
        ErrorCode::HostFactsMismatch,
        format!(
            "the decision input claims more than this host measured ({} {})",
            problems.len(),
            if problems.len() == 1 {
                "claim"
            } else {
                "claims"
            }
        ),
    );
    for problem in problems {
        failure = failure.detail(problem);
    }
    Err(failure.hint("nothing was run; `palisade doctor --json` shows what this host measures"))
}

/// What the input's host facts loosen against this host's own (its configuration and flags): a
/// managed controller decides the policy, but not past the limits the host's administrator set.
fn looser_host_facts(
    claimed: &palisade_engine::HostFacts,
    here: &palisade_engine::HostFacts,
) -> Vec<String> {
    use palisade_engine::SessionKind;
    let mut problems = Vec::new();
    let mut looser = |field: &str, what: String| {
        problems.push(format!("host.{field}: {what}, looser than this host"));
    };
    if claimed.home_dir != here.home_dir {
        // Denied `~/` paths resolve against it.
        looser(
            "homeDir",
            format!(
                "`{}`, but the home here is `{}`",
                claimed.home_dir, here.home_dir
            ),
        );
    }
    if here.session_kind == SessionKind::Turnkey && claimed.session_kind != SessionKind::Turnkey {
        looser(
            "sessionKind",
            format!("`{}`", claimed.session_kind.as_str()),
        );
    }
    if claimed.allow_direct_dedicated && !here.allow_direct_dedicated {
        looser("allowDirectDedicated", "`true`".into());
    }
    if here.allow_workspace_mode == Some(false) && claimed.allow_workspace_mode != Some(false) {
        looser("allowWorkspaceMode", "not `false`".into());
    }
    if claimed.allow_home_writable == Some(true) && here.allow_home_writable != Some(true) {
        looser("allowHomeWritable", "`true`".into());
    }
    match (&claimed.environment_allowlist, &here.environment_allowlist) {
        (None, _) => {}
        (Some(list), Some(allowed)) if list.iter().all(|entry| allowed.contains(entry)) => {}
        (Some(_), _) => looser(
            "environmentAllowlist",
            "passes variables this host's allowlist does not".into(),
        ),
    }
    let here_denied = here.denied_read_paths.as_deref().unwrap_or_default();
    let claimed_denied = claimed.denied_read_paths.as_deref().unwrap_or_default();
    if here_denied
        .iter()
        .any(|path| !claimed_denied.contains(path))
    {
        looser("deniedReadPaths", "drops paths this host denies".into());
    }
    // The repository is measured here: a claim of other git directories (or none) would move
    // the protection of git's hooks and configuration away from the ones this run can write.
    if claimed.git_dirs.is_some() && claimed.git_dirs != here.git_dirs {
        looser(
            "gitDirs",
            format!(
                "{:?}, but this workspace's git directories are {:?}",
                claimed.git_dirs.as_deref().unwrap_or_default(),
                here.git_dirs.as_deref().unwrap_or_default()
            ),
        );
    }
    // Palisade's own state is masked where the run could write it: a claim without some of it
    // would leave it writable.
    let claimed_state = claimed.state_paths.as_deref().unwrap_or_default();
    if here
        .state_paths
        .iter()
        .flatten()
        .any(|path| !claimed_state.contains(path))
    {
        looser(
            "statePaths",
            "leaves out Palisade's own state that this host measured".into(),
        );
    }
    // A signing key is denied in every sandbox: a claim without it would hand the command it.
    let claimed_keys = claimed.key_paths.as_deref().unwrap_or_default();
    if here
        .key_paths
        .iter()
        .flatten()
        .any(|path| !claimed_keys.contains(path))
    {
        looser(
            "keyPaths",
            "leaves out a Palisade signing key that this host holds".into(),
        );
    }
    let here_rules = here.exempt_protected_paths.as_deref().unwrap_or_default();
    if claimed
        .exempt_protected_paths
        .iter()
        .flatten()
        .any(|rule| !here_rules.contains(rule))
    {
        looser(
            "exemptProtectedPaths",
            "exempts protected paths this host does not".into(),
        );
    }
    let here_exempt = here.exempt_denied_read_paths.as_deref().unwrap_or_default();
    let claimed_exempt = claimed
        .exempt_denied_read_paths
        .as_deref()
        .unwrap_or_default();
    if claimed_exempt
        .iter()
        .any(|path| !here_exempt.contains(path))
    {
        looser(
            "exemptDeniedReadPaths",
            "exempts credential stores this host does not".into(),
        );
    }
    for (field, claimed_caps, here_caps) in [
        (
            "budgetCeilings",
            &claimed.budget_ceilings,
            &here.budget_ceilings,
        ),
        (
            "runtimeProfileBudgets",
            &claimed.runtime_profile_budgets,
            &here.runtime_profile_budgets,
        ),
    ] {
        let Some(here_caps) = here_caps else {
            continue;
        };
        let claimed_caps = claimed_caps.clone().unwrap_or_default();
        let pairs = [
            (here_caps.timeout_millis, claimed_caps.timeout_millis),
            (here_caps.memory_bytes, claimed_caps.memory_bytes),
            (here_caps.max_processes, claimed_caps.max_processes),
            (here_caps.cpu_seconds, claimed_caps.cpu_seconds),
        ];
        let lifted = pairs
            .iter()
            .any(|(cap, claim)| cap.is_some_and(|cap| claim.is_none_or(|claim| claim > cap)));
        if lifted {
            looser(field, "lifts or raises a cap this host sets".into());
        }
    }
    problems
}

/// The audit file must not be where the command can write: it could rewrite the record of its
/// own run. Refused before anything is decided or written.
fn audit_outside_writable_roots(
    audit: &std::path::Path,
    host: &palisade_engine::HostFacts,
    what: &str,
) -> Result<(), Failure> {
    // The file may not exist yet: resolve its directory (symlinks included) and add its name. A
    // symlink that leads nowhere yet would be followed by the first write: refused.
    let resolved = match std::fs::canonicalize(audit) {
        Ok(path) => path,
        Err(_) if std::fs::symlink_metadata(audit).is_ok() => {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                format!(
                    "{what} `{}` is a symlink to a path that does not exist",
                    audit.display()
                ),
            ));
        }
        Err(_) => {
            let parent = match audit.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                _ => std::path::PathBuf::from("."),
            };
            let parent = std::fs::canonicalize(&parent).map_err(|e| {
                Failure::new(
                    ErrorCode::InputInvalid,
                    format!("{what} `{}`: {e}", audit.display()),
                )
            })?;
            parent.join(audit.file_name().unwrap_or_default())
        }
    };
    if resolved.exists() && !resolved.is_file() {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            format!("{what} `{}` is not a regular file", audit.display()),
        ));
    }
    let roots = std::iter::once(&host.workspace_dir).chain(&host.writable_roots);
    for root in roots {
        if resolved.starts_with(root) {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                format!(
                    "{what} `{}` is inside writable root `{root}`: the command could rewrite the record of its own run",
                    resolved.display()
                ),
            )
            .hint("keep the audit file outside the workspace and every writable root, e.g. `--audit ~/.local/state/palisade/audit.jsonl`"));
        }
    }
    Ok(())
}

/// The caches hold compiled native code and the probes the decision trusts: where the command
/// can write, it could make the next run execute its code or choose weaker isolation. A cache
/// named by `PALISADE_CACHE_DIR` inside the workspace or a writable root is refused; the
/// default one there is not used for this run, and that is said.
fn cache_outside_writable_roots(setup: &mut super::setup::HostSetup) -> Result<(), Failure> {
    let Some(cache) = &setup.cache else {
        return Ok(());
    };
    // The deepest part that exists, resolved, and the rest as named.
    let resolved = crate::facts::resolve_deepest(&cache.path);
    let workspace = match &setup.facts.workspace {
        Some(dir) => Some(dir.clone()),
        None => std::env::current_dir().ok(),
    };
    // `/` and the directories above the home are never writable roots (the engine refuses them
    // with their own code); every other root is checked.
    let home = crate::facts::home_dir().ok().map(std::path::PathBuf::from);
    let roots = workspace.iter().chain(&setup.facts.writable_roots);
    for root in roots {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
        let above_home = home
            .as_ref()
            .is_some_and(|home| home.starts_with(&root) && *home != root);
        if !resolved.starts_with(&root) || root.parent().is_none() || above_home {
            continue;
        }
        let problem = format!(
            "cache directory `{}` is inside writable root `{}`: the command could rewrite the compiled engine or the probes the next run trusts",
            resolved.display(),
            root.display()
        );
        if cache.explicit {
            return Err(Failure::new(ErrorCode::InputInvalid, problem)
                .hint("set PALISADE_CACHE_DIR outside the workspace and every writable root"));
        }
        say!("palisade: {problem}; this run uses no cache");
        setup.cache = None;
        return Ok(());
    }
    Ok(())
}

/// `palisade run`.
pub fn run(args: &RunArgs) -> CommandResult {
    let mut clock = Clock::start();
    // First, while single-threaded: what the command is denied, Palisade itself still holds;
    // keep it out of `/proc/<pid>/environ` (see envpolicy).
    let scrubbed = envpolicy::scrub_own_environ();
    // From here on, SIGINT, SIGTERM and SIGHUP stop the run at the next safe point instead of
    // killing Palisade mid-setup (which would leave its temp dir, and a decision without an
    // outcome); once the command runs, the supervisor forwards them to it.
    let mut interrupts = palisade_shims::signals::Interrupts::install()
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
    // The run's private temp dir is a writable root of the decision, so the audit shows it.
    let temp = launch::RunTempDir::create(&run_id).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::InvalidInput {
            ErrorCode::InputInvalid
        } else {
            ErrorCode::Internal
        };
        Failure::new(code, e.to_string())
    })?;

    let probe_opts = probe_options(&args.host, &setup, !args.no_cache)?;
    clock.end(Phase::Configuration);
    let probes = probe::probe_all(&probe_opts);
    clock.end(Phase::Probes);
    if let Some(signal) = interrupts.received() {
        say!("palisade: stopped by signal {signal} before anything was decided; nothing ran");
        return Ok(Exit::Command(exit_for_signal(signal)));
    }
    if let Some(problem) = &probes.cache_error {
        say!("warning: probe cache not used: {problem}");
    }
    let (input, probe_source) = match &args.input {
        Some(source) => {
            if budget_flags.is_some()
                || args.budgets.task_contract.is_some()
                || mode != ExecutionMode::Sandbox
            {
                return Err(Failure::new(
                    ErrorCode::InputInvalid,
                    "budget flags, `--task-contract` and `--execution-mode` do not apply to `--input`, which carries its own",
                ));
            }
            let mut input = read_input(source)?;
            let measured = facts::gather(&setup.facts).map_err(facts_failure)?;
            confirm_claims(&input, &measured, &probes.probes)?;
            // The run's private temp dir is a writable root like any other, and recorded.
            input
                .host
                .writable_roots
                .push(temp.path().display().to_string());
            (input, "input-file")
        }
        None => {
            let (document, document_name) = read_document(&args.taskpack, &args.host)?;
            setup.facts.writable_roots.push(temp.path().to_path_buf());
            let host = facts::gather(&setup.facts).map_err(facts_failure)?;
            let mut input = DecisionInput {
                document,
                document_name,
                host,
                probes: probes.probes,
                narrow_allowed_domains: None,
                execution_mode: execmode::input_field(mode),
                budget_flags,
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
    // Opened now, before anything runs: a destination that cannot be written is refused
    // before the command starts, and the command cannot swap a link in under it.
    let mut json_out = args
        .json
        .as_deref()
        .map(open_json_destination)
        .transpose()?;

    // The decision is on disk before anything is launched.
    let mut context = audit::context_now("run", probe_source);
    context.run_id = Some(run_id.clone());
    context.host_config = Some(setup.config.record());
    context.requested_by = requester.clone();
    let recorded = decide_recorded(
        &input,
        args.audit.as_deref(),
        args.checkpoint.as_deref(),
        context,
        setup.cache.as_ref().map(|c| c.path.as_path()),
    )?;
    clock.end_at(Phase::ComponentLoad, Some(recorded.loaded));
    clock.end_at(Phase::Decide, Some(recorded.decided));
    clock.end_at(Phase::AuditWrite, Some(recorded.recorded));
    let outcome = recorded.outcome;
    let stopped = |signal: i32, json_out: &mut Option<std::fs::File>, clock: &mut Clock| {
        say!("palisade: stopped by signal {signal} before the command started; nothing ran");
        let record = serde_json::json!({
            "endedBy": "not-launched",
            "exitCode": exit_for_signal(signal),
            "error": format!("stopped by signal {signal} before the command started"),
            "signal": signal,
            "denials": Denials::default(),
        });
        let written = write_outcome(args, &run_id, &outcome.digest, json_out, &record, clock);
        print_timings(args, &written);
        Ok(Exit::Command(exit_for_signal(signal)))
    };
    if let Some(signal) = interrupts.received() {
        return stopped(signal, &mut json_out, &mut clock);
    }
    let plan = match &outcome.verdict {
        Verdict::Decision(plan) => plan,
        Verdict::Refusal { .. } => {
            return Err(refusal_failure(&outcome).unwrap_or_else(|| {
                Failure::new(ErrorCode::Internal, "the engine refused without a reason")
            }));
        }
    };

    let internal = |e: launch::LaunchError| Failure::new(ErrorCode::Internal, e.to_string());
    // Everything between the decision and the launch that can fail: a failure gets a
    // `not-launched` outcome, so no decision in the audit file is left without one.
    let prepared = (|| -> Result<_, Failure> {
        // The image is checked against its pin right before the launch, and before the proxy
        // starts: a docker run's proxy admits that container.
        let docker = match plan.backend {
            Backend::Docker => Some(docker_spec(&setup, &probe_opts, &run_id)?),
            Backend::LinuxBwrap
            | Backend::LinuxLandlock
            | Backend::MacosSeatbelt
            | Backend::DirectDedicated => None,
        };
        // The network bridge (filtered egress, forwarded host loopback ports): its routes listen
        // before the sandbox exists.
        let routes = network::routes_for(&plan.network, &overrides);
        if !overrides.is_empty() && !matches!(plan.network, PlanNetwork::Filtered { .. }) {
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
                run_id.clone(),
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
                    network::BridgeSession::start(&run_id, routes, site, approver)
                        .map_err(internal)?,
                )
            }
            None => None,
        };
        // The chosen probe's limitations, which the decision carries (the engine copies them).
        let limitations = input
            .probes
            .iter()
            .find(|probe| probe.backend == plan.backend)
            .map_or(&[][..], |probe| probe.limitations.as_slice());
        let (launch_plan, environment) = translate::launch_plan(
            plan,
            limitations,
            translate::HostSide {
                command: args.command.clone(),
                vars: std::env::vars_os(),
                home: input.host.home_dir.clone(),
                run_temp_dir: temp.path().to_path_buf(),
                bridge: bridge
                    .as_ref()
                    .map(network::BridgeSession::plan)
                    .transpose()
                    .map_err(internal)?,
            },
        )
        .map_err(internal)?;
        Ok((docker, bridge, launch_plan, environment))
    })();
    let (docker, bridge, launch_plan, mut environment) = match prepared {
        Ok(prepared) => prepared,
        Err(failure) => {
            let record = serde_json::json!({
                "endedBy": "not-launched",
                "exitCode": 125,
                "error": failure.message,
                "denials": Denials::default(),
            });
            let written = write_outcome(
                args,
                &run_id,
                &outcome.digest,
                &mut json_out,
                &record,
                &mut clock,
            );
            print_timings(args, &written);
            return Err(failure);
        }
    };
    environment.supervisor_environ =
        envpolicy::concealment(&scrubbed, envpolicy::make_undumpable());
    // Tell the user what the decision clamped or leaves unenforced, before the command starts.
    for line in &plan.warnings {
        say!("palisade: {line}");
    }
    if let Some(signal) = interrupts.received() {
        if let Some(session) = bridge {
            drop(network::BridgeSession::finish(session));
        }
        return stopped(signal, &mut json_out, &mut clock);
    }
    clock.end(Phase::Plan);
    let started = std::time::SystemTime::now();
    let mut result = launch::execute(
        &launch_plan,
        &launch::ExecuteOptions {
            bwrap: probe::locate_bwrap(&probe_opts),
            docker: docker.map(|(spec, _)| spec),
        },
    );
    if let Ok(launched) = &result {
        clock.end_at(Phase::Spawn, launched.marks.spawned);
        clock.end_at(Phase::SandboxSetup, launched.marks.started);
        clock.end_at(Phase::Command, launched.marks.exited);
        clock.end_at(Phase::ReapAndVerify, launched.marks.verified);
    }
    // What the sandbox refused, as the supervisor and the network bridge saw it.
    let bridge_account = bridge.map(network::BridgeSession::finish);
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
    // A launch that failed before the command ran still gets an outcome, so no decision in the
    // audit file is left without one.
    let mut failed_record = match &result {
        Ok(_)
        | Err(
            launch::LaunchError::TreeNotEmpty { .. }
            | launch::LaunchError::ContainerNotRemoved { .. },
        ) => None,
        Err(launch::LaunchError::Stopped(signal)) => Some(serde_json::json!({
            "endedBy": "not-launched",
            "exitCode": exit_for_signal(*signal),
            "error": format!("stopped by signal {signal} before the command started"),
            "signal": signal,
        })),
        Err(error) => Some(serde_json::json!({
            "endedBy": "not-launched",
            "exitCode": 125,
            "error": error.to_string(),
        })),
    };
    let failed_record_is_none = failed_record.is_none();
    // Host-side facts of the run: the proxy's account, the environment's names, who asked.
    let record = match &mut result {
        Ok(launched) => Some(&mut launched.record),
        Err(
            launch::LaunchError::TreeNotEmpty { record, .. }
            | launch::LaunchError::ContainerNotRemoved { record, .. },
        ) => Some(record),
        Err(_) => failed_record.as_mut(),
    };
    // What the command left for the host's git to run later, where no mount protected it.
    let scan = if record.is_some() && failed_record_is_none {
        crate::gitplanted::scan(
            &plan.writable_roots,
            &enforced_git_dirs(plan, &input.host),
            started,
        )
    } else {
        crate::gitplanted::Scan {
            complete: true,
            ..Default::default()
        }
    };
    if let Some(Value::Object(map)) = record {
        if !scan.planted.is_empty() {
            map.insert(
                "gitPlanted".to_owned(),
                serde_json::to_value(&scan.planted).unwrap_or_default(),
            );
        }
        if !scan.complete {
            map.insert(
                "gitPlantedScan".to_owned(),
                serde_json::json!({"complete": false, "directories": scan.directories}),
            );
        }
        if let Some((account, _)) = bridge_account {
            map.insert("network".to_owned(), account);
        }
        map.insert(
            "denials".to_owned(),
            serde_json::to_value(&denials).unwrap_or_default(),
        );
        map.insert(
            "environment".to_owned(),
            serde_json::to_value(&environment).unwrap_or_default(),
        );
        if let Some(requester) = &requester {
            map.insert(
                "executionMode".to_owned(),
                serde_json::json!({"mode": "workspace", "sandboxed": false, "requestedBy": requester}),
            );
        }
    }
    let mut record_outcome = |record: &Value| {
        let written = write_outcome(
            args,
            &run_id,
            &outcome.digest,
            &mut json_out,
            record,
            &mut clock,
        );
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
    };
    match result {
        Ok(launched) => {
            // Removed before the outcome is written, so that its time is in the record.
            drop(temp);
            record_outcome(&launched.record);
            Ok(Exit::Command(launched.exit_code))
        }
        Err(launch::LaunchError::TreeNotEmpty { remaining, record }) => {
            record_outcome(&record);
            Err(Failure::new(
                ErrorCode::Internal,
                format!("{remaining} processes of the run survived the cleanup"),
            )
            .hint("the outcome is in the audit record; report this as a bug"))
        }
        Err(launch::LaunchError::ContainerNotRemoved {
            container,
            detail,
            record,
        }) => {
            record_outcome(&record);
            Err(Failure::new(
                ErrorCode::DockerDaemonUnavailable,
                format!(
                    "the docker daemon did not confirm that container {container} is gone ({detail})"
                ),
            )
            .hint("a reaper keeps removing it, and the next docker run of this user removes it once this run is over"))
        }
        Err(launch::LaunchError::Stopped(signal)) => {
            if let Some(record) = &failed_record {
                record_outcome(record);
            }
            say!("palisade: stopped by signal {signal} before the command started; nothing ran");
            Ok(Exit::Command(exit_for_signal(signal)))
        }
        Err(error) => {
            if let Some(record) = &failed_record {
                record_outcome(record);
            }
            Err(Failure::new(ErrorCode::Internal, error.to_string()).hint(
                "nothing was left running; `palisade doctor` shows what this host can enforce",
            ))
        }
    }
}

/// One line per connection the approver allowed (`--approve-with`), from the outcome's
/// `network.approvals`; connections an earlier `run` answer covered are counted, not repeated.
/// Its denies are refusals, which the denials' lines say with the approver's reason.
fn approval_lines(record: &Value) -> Vec<String> {
    let Some(events) = record
        .pointer("/network/approvals")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    let mut covered = 0;
    for event in events {
        if event.get("asked") != Some(&Value::Bool(true)) {
            covered += 1;
            continue;
        }
        let field = |name: &str| event.get(name).cloned().unwrap_or_default();
        let target = format!(
            "{}:{}",
            field("host").as_str().unwrap_or("?"),
            field("port").as_u64().unwrap_or(0)
        );
        let waited = field("waitedMs").as_u64().unwrap_or(0);
        lines.push(match field("answer").as_str() {
            Some("once") => format!(
                "palisade: the approver allowed {target} once (after {waited} ms)"
            ),
            Some("run") => format!(
                "palisade: the approver allowed {target} for the rest of the run (after {waited} ms)"
            ),
            // A deny is a refused connection: the denials' lines above say it, with the
            // approver's reason.
            _ => continue,
        });
    }
    if covered > 0 {
        lines.push(format!(
            "palisade: {covered} more connection{} went through on an earlier `run` answer",
            if covered == 1 { "" } else { "s" }
        ));
    }
    lines
}

/// What `run` says when ending the run took SIGKILL (the record's `graceExpired`): the command
/// was sent SIGTERM (or the interrupt palisade received) and was still running when the grace
/// ran out, so a status of 137 is palisade's doing, not the command's.
fn escalation_line(record: &Value) -> Option<String> {
    if record.get("graceExpired") != Some(&Value::Bool(true)) {
        return None;
    }
    let grace = palisade_shims::supervise::SuperviseOptions::default().grace;
    let why = match record.get("endedBy") {
        Some(Value::Object(map)) => match map.get("signal").and_then(Value::as_i64) {
            Some(signal) => format!("palisade received signal {signal} and passed it on"),
            None => "the run was being ended".to_owned(),
        },
        Some(Value::String(budget)) => format!("the {budget} budget ran out"),
        _ => "the run was being ended".to_owned(),
    };
    Some(format!(
        "palisade: {why}; the command had not exited {} s later (or a second interrupt came), so its process tree was killed with SIGKILL",
        grace.as_secs()
    ))
}

/// The status for a run stopped by `signal`: what a shell reports for a process it killed.
fn exit_for_signal(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(125)
}

/// An outcome as written: the run's timings in it, and how long writing it took.
struct Written {
    timings: Timings,
    write: std::time::Duration,
}

/// Appends the run's outcome line to the audit file and writes it to `--json`'s destination.
/// The command already ran (or never will): a failure to record is reported, not its status.
/// The run's last phase (cleanup) ends here, and its timings go into the outcome as `timings`.
fn write_outcome(
    args: &RunArgs,
    run_id: &str,
    decision_digest: &str,
    json_out: &mut Option<std::fs::File>,
    record: &Value,
    clock: &mut Clock,
) -> Written {
    clock.end(Phase::Cleanup);
    let timings = clock.timings();
    let mut outcome = record.clone();
    if let Value::Object(map) = &mut outcome {
        map.insert(
            "timings".to_owned(),
            serde_json::to_value(&timings).unwrap_or_default(),
        );
    }
    let mut line = audit::OutcomeRecord {
        schema_version: audit::OUTCOME_SCHEMA_VERSION.to_owned(),
        run_id: run_id.to_owned(),
        decision_digest: decision_digest.to_owned(),
        time: audit::utc_now_rfc3339(),
        outcome,
        chain: None,
    };
    let writing = std::time::Instant::now();
    if let Some(path) = &args.audit
        && let Err(error) = audit::append_outcome(
            path,
            &mut line,
            args.checkpoint.as_deref(),
            super::engine::audit_signer().ok().flatten(),
        )
    {
        say!("warning: {error}");
    }
    if let Some(out) = json_out.take()
        && let Err(error) = write_json_outcome(out, &line)
    {
        say!("warning: cannot write the outcome to `--json`: {error}");
    }
    Written {
        timings,
        write: writing.elapsed(),
    }
}

/// With `--timings`, the phase table on stderr: the last thing the run prints (even with
/// `--quiet`, which silences only the denial summary).
fn print_timings(args: &RunArgs, written: &Written) {
    if args.timings {
        for line in written.timings.table(Some(written.write)) {
            say!("{line}");
        }
    }
}

/// Opens `--json`'s destination: `fd:N`, a descriptor the caller left open (reopened through
/// `/proc/self/fd`, so the launcher never takes ownership of a raw number), or a file, created
/// or truncated, never through a symbolic link.
fn open_json_destination(dest: &str) -> Result<std::fs::File, Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let refuse =
        |why: String| Failure::new(ErrorCode::InputInvalid, format!("`--json {dest}`: {why}"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    let path = match dest.strip_prefix("fd:") {
        Some(number) => {
            let fd: u32 = number
                .parse()
                .map_err(|_| refuse("expected `fd:N` with a descriptor number".to_owned()))?;
            if fd <= 2 {
                return Err(refuse(
                    "stdin, stdout and stderr belong to the command; name another descriptor"
                        .to_owned(),
                ));
            }
            options.append(true);
            std::path::PathBuf::from(format!("/dev/fd/{fd}"))
        }
        None => {
            options
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_NOFOLLOW);
            std::path::PathBuf::from(dest)
        }
    };
    options
        .open(&path)
        .map_err(|e| refuse(format!("cannot open it: {e}")))
}

/// Writes the outcome record as one JSON document and a newline.
fn write_json_outcome(mut out: std::fs::File, line: &audit::OutcomeRecord) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
    text.push('\n');
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The note when the denied paths were masked mute because their observed masks could not be
/// mounted: still denied, but what the command tried there is not in the run's denials.
fn unobserved_masks_line(record: &Value) -> Option<String> {
    let observer = record.get("fileObserver")?;
    if observer.get("mounted")?.as_bool()? {
        return None;
    }
    let why = observer
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    Some(format!(
        "palisade: note: the denied paths were masked but not observed in this run ({why}); accesses to them are refused and not listed"
    ))
}

/// The git directories whose hooks and configuration the plan kept read-only: the scan after
/// the run leaves them out (nothing can have been planted there).
fn enforced_git_dirs(
    plan: &palisade_engine::output::ConfinementPlan,
    host: &palisade_engine::HostFacts,
) -> Vec<String> {
    let assumed = [format!("{}/.git", host.workspace_dir.trim_end_matches('/'))];
    let dirs = host.git_dirs.as_deref().unwrap_or(&assumed);
    dirs.iter()
        .filter(|dir| {
            ["hooks", "config"].iter().all(|name| {
                let path = format!("{dir}/{name}");
                plan.protected_paths
                    .iter()
                    .any(|p| p.path == path && p.enforced)
            })
        })
        .cloned()
        .collect()
}
