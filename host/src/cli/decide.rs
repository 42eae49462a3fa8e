//! `palisade decide`: gather the input (probed, `--facts` or `--input`), decide, record, and
//! print the canonical JSON or a summary of the plan.

use palisade_engine::output::{
    BudgetKind, BudgetOrigin, ConfinementPlan, EnvironmentOrigin, PlanNetwork,
};
use palisade_engine::{Backend, DecisionInput, ExecutionMode, Outcome, RecordedFacts, Verdict};
use serde_json::Value;

use crate::audit;
use crate::execmode;
use crate::exit::Exit;
use crate::facts;
use crate::hostconfig::HostConfig;
use crate::probe;
use crate::report::{ErrorCode, Failure};

use super::args::DecideArgs;
use super::engine::{decide_recorded, refusal_failure};
use super::inputs::{
    budget_flags, execution, policy_flags, read_document, read_input, read_json_file,
    read_task_contract,
};
use super::setup::{facts_failure, host_setup, probe_options};
use super::{CommandResult, write_stdout};

/// Where the decision input came from, for the audit context.
pub(super) struct GatheredInput {
    input: DecisionInput,
    probe_source: &'static str,
    /// The host configuration, when the facts were measured here (not `--facts`/`--input`).
    host_config: Option<HostConfig>,
}

pub(super) fn gather_input(args: &DecideArgs) -> Result<GatheredInput, Failure> {
    if let Some(source) = &args.input {
        let input = read_input(source)?;
        if args.exec.execution_mode != "sandbox" {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                "`--execution-mode` does not apply to `--input`, which carries its own `executionMode`",
            ));
        }
        if budget_flags(&args.budgets)?.is_some() || args.budgets.task_contract.is_some() {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                "budget flags and `--task-contract` do not apply to `--input`, which carries its own `budgetFlags` and `taskContract`",
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
        let bytes = read_json_file(path, "facts file")?;
        let recorded: RecordedFacts =
            super::inputs::parse_json(&bytes).map_err(|e| {
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
                narrow_allowed_domains: None,
                execution_mode: execmode::input_field(execution(&args.exec)?.0),
                budget_flags: budget_flags(&args.budgets)?,
                task_contract: read_task_contract(&args.budgets)?,
                policy_flags: policy_flags(&args.policy)?,
            },
            probe_source: "facts-file",
            host_config: None,
        });
    }

    let setup = host_setup(&args.host)?;
    let host = facts::gather(&setup.facts).map_err(facts_failure)?;
    let probes = probe::probe_all(&probe_options(&args.host, &setup, !args.no_cache)?);
    if let Some(problem) = &probes.cache_error {
        say!("warning: probe cache not used: {problem}");
    }
    let mut input = DecisionInput {
        document,
        document_name,
        host,
        probes: probes.probes,
        narrow_allowed_domains: None,
        execution_mode: execmode::input_field(execution(&args.exec)?.0),
        budget_flags: budget_flags(&args.budgets)?,
        task_contract: read_task_contract(&args.budgets)?,
        policy_flags: policy_flags(&args.policy)?,
    };
    crate::unix_sockets::measure_into(&mut input);
    Ok(GatheredInput {
        input,
        probe_source: if probes.from_cache { "cache" } else { "fresh" },
        host_config: Some(setup.config),
    })
}

/// The decision `decide` reports, recorded when asked; a failure before there is one.
fn decided(args: &DecideArgs) -> Result<Outcome, Failure> {
    let gathered = gather_input(args)?;
    let mut context = audit::context_now("decide", gathered.probe_source);
    context.host_config = gathered.host_config.as_ref().map(HostConfig::record);
    context.requested_by = execution(&args.exec)?
        .1
        .map(|requester| serde_json::to_value(requester).unwrap_or_default());
    let cache = super::setup::cache_path()?;
    decide_recorded(
        &gathered.input,
        args.record.as_deref(),
        args.checkpoint.as_deref(),
        context,
        cache.as_deref(),
        !args.no_cache,
    )
    .map(|recorded| recorded.outcome)
}

/// `palisade decide`.
pub fn decide(args: &DecideArgs) -> CommandResult {
    let outcome = match decided(args) {
        Ok(outcome) => outcome,
        Err(failure) => {
            // With `--json`, stdout carries data in every case: an error that stopped the
            // decision is JSON there too (the line on stderr stays).
            if args.json {
                let mut text = failure.to_json().to_string();
                text.push('\n');
                write_stdout(text.as_bytes())?;
            }
            return Err(failure);
        }
    };
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

/// A string field of a JSON object, or `?` when it is missing (for human summaries only).
pub(super) fn str_field<'v>(value: &'v Value, key: &str) -> &'v str {
    value.get(key).and_then(Value::as_str).unwrap_or("?")
}

/// A human summary of a decision: the plan as the launcher applies it, and from the canonical
/// JSON the policy's source, requirements and the negotiation trace.
pub(super) fn summarize(outcome: &Outcome, plan: &ConfinementPlan) -> String {
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
    } else if plan.backend == Backend::DirectDedicated {
        out.push_str(
            "mode      UNCONFINED: direct-dedicated runs the command as you, without filesystem or network isolation (supervised, its tree reaped)\n",
        );
    }
    // Neither enforces writable roots or requirements beyond process-tree cleanup: the
    // summary must not read as if they did.
    let unconfined =
        plan.execution_mode == ExecutionMode::Workspace || plan.backend == Backend::DirectDedicated;
    out.push_str(&format!("backend   {}\n", plan.backend.as_str()));
    match &plan.network {
        PlanNetwork::Filtered {
            allowlist,
            host_ports,
        } => out.push_str(&format!(
            "network   filtered: own loopback{}, egress only via the filtering proxy to: {}\n",
            host_port_list(host_ports),
            list(allowlist)
        )),
        PlanNetwork::LoopbackOnly { host_ports } => out.push_str(&format!(
            "network   loopback-only: own loopback{}\n",
            host_port_list(host_ports)
        )),
        PlanNetwork::HostLoopback => out.push_str(
            "network   loopback-only: the host's own loopback, every port (no network namespace)\n",
        ),
        other => out.push_str(&format!("network   {}\n", other.as_str())),
    }
    out.push_str(&format!(
        "policy    {} ({}){}\n",
        text("/policy/source"),
        text("/policy/documentName"),
        if shaped_by_flags(&report) {
            ", with policy flags"
        } else {
            ""
        }
    ));
    if let Some(requirements) = report
        .pointer("/policy/requirements")
        .and_then(Value::as_array)
    {
        for (index, requirement) in requirements.iter().enumerate() {
            let capability = str_field(requirement, "capability");
            let unenforced = unconfined && capability != "processTreeCleanup";
            out.push_str(&format!(
                "{}  {} [{}]{}\n",
                if index == 0 { "requires" } else { "        " },
                capability,
                str_field(requirement, "origin"),
                if unenforced { " (NOT enforced)" } else { "" },
            ));
        }
    }
    if unconfined {
        out.push_str("writable  everything this user can write (no write containment)\n");
    } else {
        out.push_str(&format!("writable  {}\n", list(&plan.writable_roots)));
    }
    out.push_str(&format!("denied    {}\n", list(&plan.denied_read_paths)));
    if !plan.unix_sockets.is_empty() {
        let sockets: Vec<String> = plan
            .unix_sockets
            .iter()
            .map(|s| match (&s.grants_root, s.path == s.target) {
                (Some(_), _) => format!("{} (GRANTS ROOT: allowed by the host)", s.path),
                (None, true) => s.path.clone(),
                (None, false) => format!("{} -> {}", s.path, s.target),
            })
            .collect();
        out.push_str(&format!("sockets   {}\n", sockets.join(", ")));
    }
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
    for (index, line) in plan.warnings.iter().enumerate() {
        let head = if index == 0 { "warning  " } else { "         " };
        out.push_str(&format!("{head} {line}\n"));
    }
    let environment = &plan.environment;
    out.push_str(&format!(
        "env       {} allowlist: {}\n",
        match environment.origin {
            EnvironmentOrigin::Default => "default",
            EnvironmentOrigin::Host => "host",
            EnvironmentOrigin::Flag => "--pass-env",
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

/// Whether the launcher's policy flags set anything of the policy (some origin `flag`, or the
/// narrowed writable places or environment).
fn shaped_by_flags(report: &Value) -> bool {
    let Some(policy) = report.get("policy") else {
        return false;
    };
    let flag = Value::from("flag");
    let origin_flag = |item: &Value| item.get("origin") == Some(&flag);
    [
        "networkModeOrigin",
        "preferredBackendsOrigin",
        "allowedDomainsOrigin",
    ]
    .iter()
    .any(|key| policy.get(*key) == Some(&flag))
        || ["requirements", "deniedReadPaths"].iter().any(|key| {
            policy
                .get(*key)
                .and_then(Value::as_array)
                .is_some_and(|items| items.iter().any(origin_flag))
        })
        || policy.get("writableRoots").is_some()
        || policy.get("passEnvironment").is_some()
}

/// `, host loopback ports 8080, 5432`, or nothing.
fn host_port_list(ports: &[u16]) -> String {
    if ports.is_empty() {
        String::new()
    } else {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        format!(", host loopback ports {}", ports.join(", "))
    }
}

/// `timeout 10m [policy], memory 512 MiB [host-ceiling]`, or `none`.
pub(super) fn budget_summary(plan: &ConfinementPlan) -> String {
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
                BudgetOrigin::TaskContract => "task contract",
                BudgetOrigin::RuntimeProfile => "runtime profile",
                BudgetOrigin::HostCeiling => "host ceiling",
            };
            format!(
                "{name} {} [{origin}]",
                palisade_engine::budgets::show(kind, limit.value)
            )
        })
    })
    .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}
