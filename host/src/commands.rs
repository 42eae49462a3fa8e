//! The subcommands. Each returns the exit status or a `Failure` to report; stdout gets data only.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use palisade::audit::{self, AuditRecord, EngineIdentity, RecordContext};
use palisade::docker;
use palisade::egress;
use palisade::envpolicy;
use palisade::execmode;
use palisade::exit::Exit;
use palisade::facts::{self, FactOptions};
use palisade::hostconfig::{self, HostConfig};
use palisade::launch;
use palisade::probe::{self, ProbeOptions};
use palisade::replay::{self, EngineChoice, Engines, ReplayStatus};
use palisade::report::{ErrorCode, Failure};
use palisade::runtime::{self, EngineRuntime, LoadOptions};
use palisade::store::ComponentStore;
use palisade::translate;
use palisade_engine::model::BudgetLimits;
use palisade_engine::output::{
    BudgetKind, BudgetOrigin, ConfinementPlan, EnvironmentOrigin, PlanNetwork,
};
use palisade_engine::{
    Backend, DecisionInput, ExecutionMode, Outcome, RecordedFacts, SessionKind, Verdict,
};
use serde_json::Value;

use crate::{
    BudgetArgs, ComponentArgs, DecideArgs, DoctorArgs, ExecArgs, HostArgs, ReplayArgs, RunArgs,
};

type CommandResult = Result<Exit, Failure>;

/// The per-user cache directory: `$PALISADE_CACHE_DIR`, else the platform default.
fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("PALISADE_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(runtime::default_cache_dir)
}

fn probe_options(
    host: &HostArgs,
    config: &HostConfig,
    use_cache: bool,
) -> Result<ProbeOptions, Failure> {
    let profile = runtime_profile(host, config)?;
    // clap refuses `--docker-image` with `--runtime-profiles`; a file the host configuration
    // names is refused the same way rather than silently winning.
    if let (Some(image), Some(profile)) = (&host.docker_image, &profile) {
        return Err(Failure::new(
            ErrorCode::HostConfigForbidden,
            format!(
                "--docker-image {image} conflicts with the host configuration's dockerRuntimeProfiles (profile `{}`, image `{}`)",
                profile.name, profile.image
            ),
        )
        .hint("drop --docker-image; the runtime profile names the image"));
    }
    Ok(ProbeOptions {
        docker_socket: host.docker_socket.clone(),
        docker_image: match &profile {
            Some(profile) => Some(profile.image.clone()),
            None => host.docker_image.clone(),
        },
        docker_image_pin: profile.as_ref().map(|profile| profile.pin.clone()),
        docker_egress_bridge: profile.and_then(|profile| profile.egress_bridge),
        timeout: Duration::from_secs(2),
        cache_dir: cache_dir(),
        use_cache,
        ..ProbeOptions::default()
    })
}

/// The runtime profile file: the host configuration's `dockerRuntimeProfiles`, or
/// `--runtime-profiles` where the configuration names none. A flag naming another file than the
/// configuration's is refused: flags may only tighten the host configuration.
fn runtime_profiles_file(host: &HostArgs, config: &HostConfig) -> Result<Option<PathBuf>, Failure> {
    let configured = config
        .effective
        .docker_runtime_profiles
        .value
        .as_ref()
        .map(PathBuf::from);
    match (&host.runtime_profiles, configured) {
        (Some(flag), Some(configured)) if *flag != configured => Err(Failure::new(
            ErrorCode::HostConfigForbidden,
            format!(
                "--runtime-profiles {} differs from the host configuration's dockerRuntimeProfiles {}",
                flag.display(),
                configured.display()
            ),
        )
        .hint("drop the flag or change the host configuration; `palisade doctor` shows it")),
        (Some(flag), _) => Ok(Some(flag.clone())),
        (None, configured) => Ok(configured),
    }
}

/// The runtime profile the host configuration or `--runtime-profiles`, and `--runtime-profile`,
/// choose, if any.
fn runtime_profile(
    host: &HostArgs,
    config: &HostConfig,
) -> Result<Option<docker::RuntimeProfile>, Failure> {
    let Some(path) = runtime_profiles_file(host, config)? else {
        if host.runtime_profile.is_some() {
            return Err(Failure::new(
                ErrorCode::DockerProfileInvalid,
                "--runtime-profile names a profile, but no runtime profile file is configured",
            )
            .hint("pass `--runtime-profiles FILE` or set dockerRuntimeProfiles in the host configuration"));
        }
        return Ok(None);
    };
    docker::load(&path, host.runtime_profile.as_deref())
        .map(Some)
        .map_err(|e| {
            let mut failure = Failure::new(e.code(), e.to_string());
            for field in e.field_errors() {
                failure = failure.detail(format!("{}: {}", field.path, field.message));
            }
            failure.hint("docs/docker.md describes the runtime profile file")
        })
}

/// Everything a docker run needs: the CLI and daemon the probe used, and the pinned image,
/// checked again now (a tag may have moved since it was probed or cached).
fn docker_spec(
    host: &HostArgs,
    config: &HostConfig,
    probe_opts: &ProbeOptions,
    run_id: &str,
) -> Result<(palisade_shims::docker::DockerSpec, Option<PathBuf>), Failure> {
    let profile = runtime_profile(host, config)?.ok_or_else(|| {
        Failure::new(
            ErrorCode::DockerImageUnpinned,
            "the docker backend needs a runtime profile that pins its image",
        )
        .hint("pass `--runtime-profiles FILE` (docs/docker.md)")
    })?;
    let socket = probe::docker_socket(probe_opts)
        .map_err(|e| Failure::new(ErrorCode::DockerDaemonUnavailable, e))?;
    let cli = probe::locate_docker(probe_opts).ok_or_else(|| {
        Failure::new(
            ErrorCode::DockerDaemonUnavailable,
            "the docker cli is not installed (it was when probed); nothing was run",
        )
    })?;
    let image_id = docker::verify_image(&socket, &profile, probe_opts.timeout)
        .map_err(|e| Failure::new(e.code(), e.to_string()))?;
    let spec = palisade_shims::docker::DockerSpec {
        cli,
        socket,
        image_id,
        run_id: run_id.to_owned(),
        read_only_binds: profile.read_only_paths,
    };
    Ok((spec, profile.egress_bridge))
}

/// The docker run's static egress bridge, checked again now (like the image: it runs inside
/// the container); the resolved path is what gets mounted.
fn verified_bridge(configured: Option<&Path>) -> Result<PathBuf, Failure> {
    let refused = |why: String| {
        Failure::new(ErrorCode::SandboxCapabilityInsufficient, why)
            .hint("nothing was run; `palisade doctor` shows the docker probe")
    };
    let bridge = configured.ok_or_else(|| {
        refused(
            "filtered egress under docker needs the runtime profiles' `spec.egressBridge` (it was there when probed)".into(),
        )
    })?;
    probe::docker::check_egress_bridge(bridge, probe::user_ids().1).map_err(refused)
}

/// The host configuration in force (system file, then the per-user file or `--host-config`)
/// and the fact options it and the host flags give; the flags may only tighten it.
fn host_setup(host: &HostArgs) -> Result<(HostConfig, FactOptions), Failure> {
    let config = hostconfig::load(&hostconfig::Locations::standard(host.host_config.clone()))
        .and_then(|config| config.check_directories().map(|()| config))
        .map_err(host_config_failure)?;
    let flags = hostconfig::HostFlags {
        session_kind: host.session_kind.as_deref().map(|kind| match kind {
            "turnkey" => SessionKind::Turnkey,
            "managed" => SessionKind::Managed,
            _ => SessionKind::Cli,
        }),
        allow_direct_dedicated: host.allow_direct_dedicated,
    };
    let options = hostconfig::fact_options(
        &config,
        &flags,
        host.workspace.clone(),
        &host.writable_roots,
    )
    .map_err(|e| {
        Failure::new(ErrorCode::HostConfigForbidden, e.to_string())
            .hint("drop the flag or change the host configuration; `palisade doctor` shows it")
    })?;
    Ok((config, options))
}

fn host_config_failure(error: hostconfig::HostConfigError) -> Failure {
    let mut failure = Failure::new(ErrorCode::HostConfigInvalid, error.to_string());
    for field in error.field_errors() {
        failure = failure.detail(format!("{}: {}", field.path, field.message));
    }
    failure.hint("fix the listed fields; docs/host-configuration.md describes the file")
}

/// `--execution-mode`, and the audit's requester entry for a `workspace` request.
fn execution(exec: &ExecArgs) -> (ExecutionMode, Option<Value>) {
    let mode = execmode::parse(&exec.execution_mode).unwrap_or(ExecutionMode::Sandbox);
    let requester = (mode == ExecutionMode::Workspace).then(|| {
        serde_json::to_value(execmode::requester(exec.requested_by.as_deref())).unwrap_or_default()
    });
    (mode, requester)
}

fn facts_failure(error: facts::FactsError) -> Failure {
    Failure::new(ErrorCode::InputInvalid, error.to_string())
        .hint("pass an existing directory with `--workspace DIR` / `--writable-root DIR`")
}

fn load_runtime(component: Option<Vec<u8>>) -> Result<EngineRuntime, Failure> {
    EngineRuntime::load(&LoadOptions {
        component,
        cache_dir: cache_dir(),
        ..LoadOptions::default()
    })
    .map_err(|error| {
        Failure::new(
            ErrorCode::Internal,
            format!("cannot load the engine: {error}"),
        )
    })
}

// ---------------------------------------------------------------------------------------------
// doctor

pub fn doctor(args: &DoctorArgs) -> CommandResult {
    let (config, options) = host_setup(&args.host)?;
    let host = facts::gather(&options).map_err(facts_failure)?;
    // Doctor always probes afresh (and refreshes the cache for later `decide`/`run`).
    let probes = probe::probe_all(&probe_options(&args.host, &config, false)?);
    let engine = load_runtime(None).ok();
    let mut out = String::new();
    if args.json {
        let value = serde_json::json!({
            "host": host,
            "probes": probes.probes,
            "probeMillis": u64::try_from(probes.elapsed.as_millis()).unwrap_or(u64::MAX),
            "hostConfig": config.record(),
            "engine": engine.as_ref().map(|e| serde_json::json!({
                "componentSha256": e.component_sha256(),
                "determinism": e.settings(),
            })),
        });
        out.push_str(&value.to_string());
        out.push('\n');
    } else {
        out.push_str(&format!(
            "host      {} {}, session {}, uid {}, workspace {}\n",
            host.os,
            host.arch,
            host.session_kind.as_str(),
            facts::current_uid(),
            host.workspace_dir
        ));
        out.push_str(&config.render_text());
        if let Some(engine) = &engine {
            out.push_str(&format!(
                "engine    component sha256:{} on wasmtime {}\n",
                engine.component_sha256(),
                engine.settings().wasmtime_version
            ));
        }
        out.push_str(&format!(
            "probed    {} backends in {} ms\n\n",
            probes.probes.len(),
            probes.elapsed.as_millis()
        ));
        out.push_str(&format!(
            "{:<17} {:<10} {:<22} {:<44} {}\n",
            "BACKEND", "AVAILABLE", "VERSION", "NETWORK MODES", "CAPABILITIES / REASON"
        ));
        for p in &probes.probes {
            let mut modes: Vec<&str> = p.network_modes.iter().map(|m| m.as_str()).collect();
            if p.domain_filtering {
                modes.push("domains");
            }
            let caps: Vec<&str> = p.capabilities.iter().map(|c| c.as_str()).collect();
            let detail = if p.available {
                caps.join(", ")
            } else {
                p.reason.clone()
            };
            out.push_str(&format!(
                "{:<17} {:<10} {:<22} {:<44} {}\n",
                p.backend.as_str(),
                if p.available { "yes" } else { "no" },
                if p.version.is_empty() {
                    "-"
                } else {
                    p.version.as_str()
                },
                if p.available {
                    modes.join(", ")
                } else {
                    "-".to_owned()
                },
                detail
            ));
            for limitation in &p.limitations {
                out.push_str(&format!(
                    "{:<17} {:<10} {:<22} {:<44} limit: {limitation}\n",
                    "", "", "", ""
                ));
            }
        }
    }
    write_stdout(out.as_bytes())?;
    Ok(Exit::Success)
}

// ---------------------------------------------------------------------------------------------
// decide

/// Where the decision input came from, for the audit context.
struct GatheredInput {
    input: DecisionInput,
    probe_source: &'static str,
    /// The host configuration, when the facts were measured here (not `--facts`/`--input`).
    host_config: Option<HostConfig>,
}

fn read_file_limited(path: &Path, what: &str) -> Result<Vec<u8>, Failure> {
    // Generous cap: the engine refuses documents above 1 MiB itself (and records that refusal);
    // this only keeps a runaway file from exhausting memory.
    const READ_LIMIT: u64 = 64 * 1024 * 1024;
    let file = std::fs::File::open(path).map_err(|e| {
        Failure::new(
            ErrorCode::InputInvalid,
            format!("cannot read {what} `{}`: {e}", path.display()),
        )
    })?;
    let mut bytes = Vec::new();
    file.take(READ_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            Failure::new(
                ErrorCode::InputInvalid,
                format!("cannot read {what} `{}`: {e}", path.display()),
            )
        })?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > READ_LIMIT {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            format!(
                "{what} `{}` is larger than {READ_LIMIT} bytes",
                path.display()
            ),
        ));
    }
    Ok(bytes)
}

fn read_json_source(source: &str) -> Result<Vec<u8>, Failure> {
    if source == "-" {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).map_err(|e| {
            Failure::new(ErrorCode::InputInvalid, format!("cannot read stdin: {e}"))
        })?;
        Ok(bytes)
    } else {
        read_file_limited(Path::new(source), "input")
    }
}

fn gather_input(args: &DecideArgs) -> Result<GatheredInput, Failure> {
    if let Some(source) = &args.input {
        let bytes = read_json_source(source)?;
        let input: DecisionInput = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::new(ErrorCode::InputInvalid, format!("input `{source}` is not a decision input: {e}"))
                .hint("the input is JSON with `document`, `documentName`, `host` and `probes`; see docs/contract.md")
        })?;
        if args.exec.execution_mode != "sandbox" {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                "`--execution-mode` does not apply to `--input`, which carries its own `executionMode`",
            ));
        }
        if budget_flags(&args.budgets)?.is_some() {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                "budget flags do not apply to `--input`, which carries its own `budgetFlags`",
            ));
        }
        return Ok(GatheredInput {
            input,
            probe_source: "input-file",
            host_config: None,
        });
    }

    let (document, document_name) = read_document(&args.taskpack, &args.host)?;
    if let Some(path) = &args.facts {
        let bytes = read_file_limited(path, "facts file")?;
        let recorded: RecordedFacts =
            serde_json::from_slice(&bytes).map_err(|e| {
                Failure::new(
                ErrorCode::InputInvalid,
                format!("facts file `{}` is not recorded host facts: {e}", path.display()),
            )
            .hint("the facts file is JSON with `host` and `probes`, as in an audit record's input")
            })?;
        return Ok(GatheredInput {
            input: DecisionInput {
                document,
                document_name,
                host: recorded.host,
                probes: recorded.probes,
                narrow_allowed_domains: narrowing(&args.allow_domains),
                execution_mode: execmode::input_field(execution(&args.exec).0),
                budget_flags: budget_flags(&args.budgets)?,
            },
            probe_source: "facts-file",
            host_config: None,
        });
    }

    let (config, options) = host_setup(&args.host)?;
    let host = facts::gather(&options).map_err(facts_failure)?;
    let probes = probe::probe_all(&probe_options(&args.host, &config, !args.no_cache)?);
    if let Some(problem) = &probes.cache_error {
        eprintln!("warning: probe cache not used: {problem}");
    }
    Ok(GatheredInput {
        input: DecisionInput {
            document,
            document_name,
            host,
            probes: probes.probes,
            narrow_allowed_domains: narrowing(&args.allow_domains),
            execution_mode: execmode::input_field(execution(&args.exec).0),
            budget_flags: budget_flags(&args.budgets)?,
        },
        probe_source: if probes.from_cache { "cache" } else { "fresh" },
        host_config: Some(config),
    })
}

/// `--allow-domain` entries as the engine's narrowing list (absent when none were given).
fn narrowing(entries: &[String]) -> Option<Vec<String>> {
    (!entries.is_empty()).then(|| entries.to_vec())
}

/// The policy document: `--taskpack`, else the workspace's `.loopwright/taskpack.yaml` if it
/// exists, else none (the omitted-policy defaults apply).
fn read_document(
    taskpack: &Option<PathBuf>,
    host: &HostArgs,
) -> Result<(Option<String>, String), Failure> {
    let path = match taskpack {
        Some(path) => path.clone(),
        None => {
            let workspace = match &host.workspace {
                Some(dir) => dir.clone(),
                None => std::env::current_dir().map_err(|e| {
                    Failure::new(
                        ErrorCode::Internal,
                        format!("cannot read the current directory: {e}"),
                    )
                })?,
            };
            let default = workspace.join(".loopwright").join("taskpack.yaml");
            if !default.exists() {
                return Ok((None, "<none>".to_owned()));
            }
            default
        }
    };
    let bytes = read_file_limited(&path, "taskpack")?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Failure::new(
            ErrorCode::SandboxPolicyInvalid,
            format!(
                "taskpack `{}` is not valid utf-8 (byte {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    Ok((Some(text), path.display().to_string()))
}

pub fn decide(args: &DecideArgs) -> CommandResult {
    let gathered = gather_input(args)?;
    let mut context = RecordContext::now("decide", gathered.probe_source);
    context.host_config = gathered.host_config.as_ref().map(HostConfig::record);
    context.requested_by = execution(&args.exec).1;
    let outcome = decide_recorded(&gathered.input, args.record.as_deref(), context)?;

    if args.json {
        let mut text = outcome.canonical_json.clone();
        text.push('\n');
        write_stdout(text.as_bytes())?;
    } else if let Verdict::Decision(plan) = &outcome.verdict {
        write_stdout(summarize(&outcome, plan).as_bytes())?;
    }
    match refusal_failure(&outcome) {
        None => Ok(Exit::Success),
        Some(failure) => Err(failure),
    }
}

/// Runs the input through a fresh instance of the embedded component and, when `audit` is
/// given, appends the record (synced) before returning: `decide` and `run` share this path, so a
/// run's decision is exactly what `decide` would have recorded.
fn decide_recorded(
    input: &DecisionInput,
    audit: Option<&Path>,
    context: RecordContext,
) -> Result<Outcome, Failure> {
    let engine_failed = |e: runtime::RuntimeError| {
        Failure::new(ErrorCode::Internal, format!("the engine failed: {e}"))
    };
    let engine = load_runtime(None)?;
    let mut instance = engine.instantiate().map_err(engine_failed)?;
    let outcome = instance.decide(input).map_err(engine_failed)?;
    if let Some(path) = audit {
        let info = instance.info().map_err(engine_failed)?;
        let record = AuditRecord {
            schema_version: audit::AUDIT_SCHEMA_VERSION.to_owned(),
            engine: EngineIdentity::new(engine.component_sha256(), &info, engine.settings()),
            input: input.clone(),
            output: outcome.canonical_json.clone(),
            output_digest: outcome.digest.clone(),
            context,
        };
        audit::append(path, &record)
            .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;
    }
    Ok(outcome)
}

/// The failure to report for a refusal, or `None` for a decision.
fn refusal_failure(outcome: &Outcome) -> Option<Failure> {
    let Verdict::Refusal {
        code,
        message,
        errors,
        trace,
    } = &outcome.verdict
    else {
        return None;
    };
    let code = ErrorCode::from_refusal(*code);
    let mut failure = Failure::new(code, message.clone());
    for error in errors {
        failure = failure.detail(format!("{}: {}", error.path, error.message));
    }
    for candidate in trace {
        failure = failure.detail(format!(
            "{}: {} ({})",
            candidate.backend.as_str(),
            candidate.verdict.as_str(),
            candidate.reason
        ));
    }
    failure = match code {
        ErrorCode::SandboxPolicyInvalid => {
            failure.hint("fix the listed fields; `palisade decide --json` prints them as data")
        }
        ErrorCode::SandboxBackendUnavailable => {
            failure.hint("run `palisade doctor` to see why each backend is unavailable")
        }
        ErrorCode::SandboxCapabilityInsufficient => failure.hint(
            "drop a requirement or prefer a backend that provides it; `palisade doctor` lists capabilities",
        ),
        ErrorCode::ExecutionModeForbidden => failure.hint(
            "the host configuration sets `allowWorkspaceMode: false`; `palisade doctor` shows which file",
        ),
        _ => failure,
    };
    Some(failure.detail(format!("digest sha256:{}", outcome.digest)))
}

/// A string field of a JSON object, or `?` when it is missing (for human summaries only).
fn str_field<'v>(value: &'v Value, key: &str) -> &'v str {
    value.get(key).and_then(Value::as_str).unwrap_or("?")
}

/// A human summary of a decision: the plan as the launcher applies it, and from the canonical
/// JSON the policy's source, requirements and the negotiation trace.
fn summarize(outcome: &Outcome, plan: &ConfinementPlan) -> String {
    let report: Value = serde_json::from_str(&outcome.canonical_json).unwrap_or(Value::Null);
    let text = |pointer: &str| {
        report
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned()
    };
    let list = |items: &[String]| {
        if items.is_empty() {
            "-".to_owned()
        } else {
            items.join(", ")
        }
    };
    let mut out = String::new();
    if plan.execution_mode == ExecutionMode::Workspace {
        out.push_str(
            "mode      workspace: UNSANDBOXED by request (no isolation; supervised only)\n",
        );
    }
    out.push_str(&format!("backend   {}\n", plan.backend.as_str()));
    match &plan.network {
        PlanNetwork::Filtered { allowlist } => out.push_str(&format!(
            "network   filtered: own loopback, egress only via the filtering proxy to: {}\n",
            list(allowlist)
        )),
        other => out.push_str(&format!("network   {}\n", other.as_str())),
    }
    out.push_str(&format!(
        "policy    {} ({})\n",
        text("/policy/source"),
        text("/policy/documentName")
    ));
    if let Some(requirements) = report
        .pointer("/policy/requirements")
        .and_then(Value::as_array)
    {
        for (index, requirement) in requirements.iter().enumerate() {
            out.push_str(&format!(
                "{}  {} [{}]\n",
                if index == 0 { "requires" } else { "        " },
                str_field(requirement, "capability"),
                str_field(requirement, "origin"),
            ));
        }
    }
    out.push_str(&format!("writable  {}\n", list(&plan.writable_roots)));
    out.push_str(&format!("denied    {}\n", list(&plan.denied_read_paths)));
    let protected: Vec<String> = plan
        .protected_paths
        .iter()
        .map(|p| {
            if p.enforced {
                p.path.clone()
            } else {
                format!("{} (NOT enforced)", p.path)
            }
        })
        .collect();
    out.push_str(&format!("protected {}\n", list(&protected)));
    out.push_str(&format!("budgets   {}\n", budget_summary(plan)));
    for line in translate::notices(plan)
        .iter()
        .filter(|line| line.contains("clamped"))
    {
        out.push_str(&format!("          {line}\n"));
    }
    let environment = &plan.environment;
    out.push_str(&format!(
        "env       {} allowlist: {}\n",
        match environment.origin {
            EnvironmentOrigin::Default => "default",
            EnvironmentOrigin::Host => "host",
        },
        list(&environment.allowlist)
    ));
    if !environment.explicit_secrets.is_empty() {
        out.push_str(&format!(
            "          secret-looking, passed because named: {}\n",
            list(&environment.explicit_secrets)
        ));
    }
    if let Some(trace) = report.get("trace").and_then(Value::as_array) {
        for (index, candidate) in trace.iter().enumerate() {
            out.push_str(&format!(
                "{} {:<17} {:<15} {}\n",
                if index == 0 { "trace    " } else { "         " },
                str_field(candidate, "backend"),
                str_field(candidate, "verdict"),
                str_field(candidate, "reason"),
            ));
        }
    }
    out.push_str(&format!("digest    sha256:{}\n", outcome.digest));
    out
}

/// `timeout 10m [policy], memory 512 MiB [host-ceiling]`, or `none`.
fn budget_summary(plan: &ConfinementPlan) -> String {
    let b = &plan.budgets;
    let parts: Vec<String> = [
        ("timeout", BudgetKind::Timeout, b.timeout_millis),
        ("memory", BudgetKind::Memory, b.memory_bytes),
        ("processes", BudgetKind::MaxProcesses, b.max_processes),
        ("cpu", BudgetKind::Cpu, b.cpu_seconds),
    ]
    .into_iter()
    .filter_map(|(name, kind, limit)| {
        limit.map(|limit| {
            let origin = match limit.origin {
                BudgetOrigin::Policy => "policy",
                BudgetOrigin::Flag => "flag",
                BudgetOrigin::HostCeiling => "host ceiling",
            };
            format!("{name} {} [{origin}]", translate::show(kind, limit.value))
        })
    })
    .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

// ---------------------------------------------------------------------------------------------
// run

pub fn run(args: &RunArgs) -> CommandResult {
    // First, while single-threaded: what the command is denied, Palisade itself still holds;
    // keep it out of `/proc/<pid>/environ` (see envpolicy).
    let scrubbed = envpolicy::scrub_own_environ();
    let (config, mut fact_opts) = host_setup(&args.host)?;
    let (mode, requester) = execution(&args.exec);
    let budget_flags = budget_flags(&args.budgets)?;
    let overrides = args
        .proxy_resolve
        .iter()
        .map(|text| egress::parse_resolve(text))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::new(ErrorCode::InputInvalid, e.to_string()))?;
    let run_id = launch::new_run_id();
    // The run's private temp dir is a writable root of the decision, so the audit shows it.
    let temp = launch::RunTempDir::create(&run_id)
        .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;

    let (document, document_name) = read_document(&args.taskpack, &args.host)?;
    fact_opts.writable_roots.push(temp.path().to_path_buf());
    let host = facts::gather(&fact_opts).map_err(facts_failure)?;
    let probe_opts = probe_options(&args.host, &config, !args.no_cache)?;
    let probes = probe::probe_all(&probe_opts);
    if let Some(problem) = &probes.cache_error {
        eprintln!("warning: probe cache not used: {problem}");
    }
    let input = DecisionInput {
        document,
        document_name,
        host,
        probes: probes.probes,
        narrow_allowed_domains: narrowing(&args.allow_domains),
        execution_mode: execmode::input_field(mode),
        budget_flags,
    };
    let probe_source = if probes.from_cache { "cache" } else { "fresh" };

    // The decision is on disk before anything is launched.
    let mut context = RecordContext::now("run", probe_source);
    context.run_id = Some(run_id.clone());
    context.host_config = Some(config.record());
    context.requested_by = requester.clone();
    let outcome = decide_recorded(&input, args.audit.as_deref(), context)?;
    let plan = match &outcome.verdict {
        Verdict::Decision(plan) => plan,
        Verdict::Refusal { .. } => {
            return Err(refusal_failure(&outcome).unwrap_or_else(|| {
                Failure::new(ErrorCode::Internal, "the engine refused without a reason")
            }));
        }
    };

    let internal = |e: launch::LaunchError| Failure::new(ErrorCode::Internal, e.to_string());
    // The image is checked against its pin right before the launch, and before the proxy
    // starts: a docker run's proxy admits that container.
    let docker = match plan.backend {
        Backend::Docker => Some(docker_spec(&args.host, &config, &probe_opts, &run_id)?),
        Backend::LinuxBwrap
        | Backend::LinuxLandlock
        | Backend::MacosSeatbelt
        | Backend::DirectDedicated => None,
    };
    // Filtered egress: the proxy listens before the sandbox exists.
    let egress = match &plan.network {
        PlanNetwork::Filtered { allowlist } => {
            let site = match &docker {
                None => egress::RunSite::Sandbox,
                Some((spec, bridge)) => egress::RunSite::Container {
                    socket: spec.socket.clone(),
                    name: spec.container_name(),
                    bridge: verified_bridge(bridge.as_deref())?,
                },
            };
            Some(
                egress::EgressSession::start(&run_id, allowlist, &overrides, site)
                    .map_err(internal)?,
            )
        }
        PlanNetwork::None | PlanNetwork::LoopbackOnly | PlanNetwork::AllowOutbound => {
            if !overrides.is_empty() {
                return Err(Failure::new(
                    ErrorCode::InputInvalid,
                    "`--proxy-resolve` applies only to a run with filtered egress (allowedDomains)",
                ));
            }
            None
        }
    };
    let (launch_plan, mut environment) = translate::launch_plan(
        plan,
        translate::HostSide {
            command: args.command.clone(),
            vars: std::env::vars_os(),
            home: input.host.home_dir.clone(),
            run_temp_dir: temp.path().to_path_buf(),
            egress: egress
                .as_ref()
                .map(egress::EgressSession::plan)
                .transpose()
                .map_err(internal)?,
        },
    )
    .map_err(internal)?;
    environment.supervisor_environ =
        envpolicy::concealment(&scrubbed, envpolicy::make_undumpable());
    // Tell the user what the decision clamped or leaves unenforced, before the command starts.
    for line in translate::notices(plan) {
        eprintln!("palisade: {line}");
    }
    if plan.execution_mode == ExecutionMode::Workspace {
        eprintln!(
            "palisade: running UNSANDBOXED by request (execution mode `workspace`): supervised, no isolation"
        );
    }
    let mut result = launch::execute(
        &launch_plan,
        &launch::ExecuteOptions {
            bwrap: probe::locate_bwrap(&probe_opts),
            docker: docker.map(|(spec, _)| spec),
        },
    );
    // Host-side facts of the run: the proxy's account, the environment's names, who asked.
    let record = match &mut result {
        Ok(launched) => Some(&mut launched.record),
        Err(launch::LaunchError::TreeNotEmpty { record, .. }) => Some(record),
        Err(_) => None,
    };
    let egress_account = egress.map(egress::EgressSession::finish);
    if let Some(Value::Object(map)) = record {
        if let Some(account) = egress_account {
            map.insert("egress".to_owned(), account);
        }
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
    let record_outcome = |record: &Value| {
        if let Some(path) = &args.audit {
            let line = audit::OutcomeRecord {
                schema_version: audit::OUTCOME_SCHEMA_VERSION.to_owned(),
                run_id: run_id.clone(),
                decision_digest: outcome.digest.clone(),
                time: audit::utc_now_rfc3339(),
                outcome: record.clone(),
            };
            // The command already ran: a failure to record is reported, not its status.
            if let Err(error) = audit::append_outcome(path, &line) {
                eprintln!("warning: {error}");
            }
        }
    };
    match result {
        Ok(launched) => {
            record_outcome(&launched.record);
            drop(temp);
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
        Err(error) => Err(Failure::new(ErrorCode::Internal, error.to_string())
            .hint("nothing was left running; `palisade doctor` shows what this host can enforce")),
    }
}

/// The budget flags as the engine's input, in its units (`None` when no flag was given).
/// Only the spelling is checked here; bounds are the engine's (`budgetFlags.*`).
fn budget_flags(args: &BudgetArgs) -> Result<Option<BudgetLimits>, Failure> {
    let usage = |e: launch::LaunchError| Failure::new(ErrorCode::InputInvalid, e.to_string());
    let limits = BudgetLimits {
        timeout_millis: args
            .timeout
            .as_deref()
            .map(launch::parse_duration)
            .transpose()
            .map_err(usage)?
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        memory_bytes: args
            .memory
            .as_deref()
            .map(launch::parse_size)
            .transpose()
            .map_err(usage)?,
        max_processes: args.max_procs,
        cpu_seconds: args.cpu_seconds,
    };
    Ok((limits != BudgetLimits::default()).then_some(limits))
}

// ---------------------------------------------------------------------------------------------
// replay

pub fn replay(args: &ReplayArgs) -> CommandResult {
    let choice = if let Some(path) = &args.component {
        EngineChoice::Component(read_file_limited(path, "component")?)
    } else if let Some(dir) = &args.component_store {
        if !dir.is_dir() {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                format!("component store `{}` is not a directory", dir.display()),
            )
            .hint("fill one with `palisade component --archive DIR`"));
        }
        EngineChoice::Store(ComponentStore::new(dir))
    } else {
        EngineChoice::Embedded
    };
    let mut engines = Engines::new(choice, cache_dir());
    engines
        .preload()
        .map_err(|reason| Failure::new(ErrorCode::Internal, reason))?;
    let lines = audit::read_lines(&args.file)
        .map_err(|e| Failure::new(ErrorCode::InputInvalid, e.to_string()))?;
    if lines.is_empty() {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            format!(
                "{} `{}` holds no {}",
                if args.in_toto {
                    "statement file"
                } else {
                    "audit file"
                },
                args.file.display(),
                if args.in_toto {
                    "statements"
                } else {
                    "records"
                }
            ),
        ));
    }
    let mut out = String::new();
    let mut failed = 0usize;
    let mut replayed = 0usize;
    let mut digests_seen = Vec::new();
    let mut statements = String::new();
    let mut exported = 0usize;
    for (line, text) in &lines {
        let result = if args.in_toto {
            replay::verify_statement(&mut engines, *line, text)
        } else {
            let record = match audit::parse_line(text) {
                audit::AuditLine::Decision(record) => record,
                audit::AuditLine::Outcome(outcome) => {
                    // Outcomes are not decisions: nothing to replay, but each must follow the
                    // decision it claims to have been launched under.
                    if !digests_seen.contains(&outcome.decision_digest) {
                        failed += 1;
                        out.push_str(&format!(
                            "{:<10} line {line} run outcome for unknown decision sha256:{}\n",
                            ReplayStatus::Invalid.as_str(),
                            outcome.decision_digest
                        ));
                    }
                    continue;
                }
            };
            let result = replay::replay_line(&mut engines, *line, &record);
            if let Ok(record) = record.as_ref() {
                digests_seen.push(record.output_digest.clone());
                if args.export_in_toto.is_some() && result.status == ReplayStatus::Reproduced {
                    let statement = replay::statement_for(text, record).map_err(|reason| {
                        Failure::new(
                            ErrorCode::Internal,
                            format!("cannot export line {line}: {reason}"),
                        )
                    })?;
                    statements.push_str(&statement);
                    statements.push('\n');
                    exported += 1;
                }
            }
            result
        };
        replayed += 1;
        if result.status != ReplayStatus::Reproduced {
            failed += 1;
        }
        if args.json {
            out.push_str(&serde_json::to_string(&result).unwrap_or_default());
            out.push('\n');
        } else {
            out.push_str(&format!(
                "{:<10} line {} sha256:{}\n",
                result.status.as_str(),
                result.line,
                result.recorded_digest.as_deref().unwrap_or("-")
            ));
            if let Some(note) = &result.engine_note {
                out.push_str(&format!("  note: {note}\n"));
            }
            for detail in &result.details {
                out.push_str(&format!("  {detail}\n"));
            }
        }
    }
    if let Some(path) = &args.export_in_toto {
        std::fs::write(path, statements.as_bytes()).map_err(|e| {
            Failure::new(
                ErrorCode::Internal,
                format!("cannot write `{}`: {e}", path.display()),
            )
        })?;
    }
    write_stdout(out.as_bytes())?;
    let what = if args.in_toto {
        "statements"
    } else {
        "decisions"
    };
    if failed == 0 {
        Ok(Exit::Success)
    } else {
        let mut failure = Failure::new(
            ErrorCode::ReplayDiverged,
            format!(
                "{failed} of {} lines did not reproduce ({replayed} {what} replayed)",
                lines.len()
            ),
        );
        if let Some(path) = &args.export_in_toto {
            failure = failure.detail(format!(
                "{exported} statements for the reproduced records were written to `{}`",
                path.display()
            ));
        }
        Err(failure)
    }
}

// ---------------------------------------------------------------------------------------------
// component, wit

pub fn component(args: &ComponentArgs) -> CommandResult {
    let bytes = runtime::embedded_component();
    if let Some(dir) = &args.archive {
        let stored = ComponentStore::new(dir)
            .put(bytes)
            .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;
        // The store's entry is what replay will run: say where it is and what it is.
        write_stdout(format!("sha256:{} {}\n", stored.digest, stored.path.display()).as_bytes())?;
    }
    match &args.out {
        Some(path) => std::fs::write(path, bytes).map_err(|e| {
            Failure::new(
                ErrorCode::Internal,
                format!("cannot write `{}`: {e}", path.display()),
            )
        })?,
        None if args.archive.is_some() => {}
        None => write_stdout(bytes)?,
    }
    Ok(Exit::Success)
}

pub fn wit() -> CommandResult {
    write_stdout(palisade::WIT_TEXT.as_bytes())?;
    Ok(Exit::Success)
}

/// Writes data to stdout; a closed pipe (`palisade … | head`) is not an error.
fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::new(
            ErrorCode::Internal,
            format!("cannot write to stdout: {e}"),
        )),
    }
}
