//! The decision pipeline and its public entry points.
//!
//! Five steps, each of which may end the pipeline: (1) validate host facts, (2) parse and
//! validate the policy document, (3) resolve the effective policy, (4) negotiate a backend,
//! (5) build the confinement plan. Whatever the step, the result is one [`Report`], turned into
//! canonical JSON and hashed here, so that the typed verdict and the bytes can never disagree.
//!
//! Why `decide_json` goes through `decide`: the JSON entry point exists for controllers that
//! hold a `SandboxPolicyInput` document; routing it through the typed path guarantees the same
//! input gives the same bytes either way.

use crate::model::{Backend, Capability, DecisionInput, ExecutionMode};
use crate::output::{
    CandidateTrace, CandidateVerdict, ContractEnvelope, EffectivePolicy, ExecutionModeReport,
    FieldError, Origin, Outcome, RefusalCode, Report, SCHEMA_VERSION, UnixSocketGrant, Verdict,
    canonical_json, sha256_hex,
};
use crate::{budgets, flags, host, negotiate, plan, policy, resolve, sockets};

/// Decides how the input's command may be sandboxed: a decision or a refusal, with its
/// canonical JSON and digest. Never panics; the same input always gives the same bytes.
pub fn decide(input: &DecisionInput) -> Outcome {
    let input_digest = sha256_hex(canonical_json(input).as_bytes());
    finish(run(input, input_digest))
}

/// Decides from a JSON `SandboxPolicyInput`. A document that does not parse into a
/// [`DecisionInput`] (unknown fields included, or longer than [`crate::MAX_INPUT_BYTES`]) is
/// refused with `HOST_FACTS_INVALID` at path `input`; that refusal's `inputDigest` is the
/// SHA-256 of the raw text, since no canonical form exists.
pub fn decide_json(input: &str) -> Outcome {
    let parsed = if input.len() > crate::MAX_INPUT_BYTES {
        Err(format!(
            "the text is larger than {} bytes",
            crate::MAX_INPUT_BYTES
        ))
    } else {
        serde_json::from_str::<DecisionInput>(input).map_err(|e| e.to_string())
    };
    match parsed {
        Ok(parsed) => decide(&parsed),
        Err(error) => {
            let detail = crate::text::one_line(&error);
            let mut report = refusal(
                sha256_hex(input.as_bytes()),
                RefusalCode::HostFactsInvalid,
                format!("decision input is not a valid SandboxPolicyInput: {detail}"),
            );
            report.errors = vec![FieldError {
                path: String::from("input"),
                message: detail,
            }];
            finish(report)
        }
    }
}

/// Runs the pipeline to a report.
fn run(input: &DecisionInput, input_digest: String) -> Report {
    // (1) Host facts.
    let host_errors = host::validate(input);
    if !host_errors.is_empty() {
        let message = format!("host facts are invalid: {}", host_errors.summary());
        let mut report = refusal(input_digest, RefusalCode::HostFactsInvalid, message);
        report.errors = host_errors.into_listed();
        return report;
    }

    // (1b) The execution mode. A mode the host forbids is refused before the document is read:
    // whatever the policy says, the host said no.
    let workspace = input.execution_mode == Some(ExecutionMode::Workspace);
    if workspace && input.host.allow_workspace_mode == Some(false) {
        let mut report = refusal(
            input_digest,
            RefusalCode::ExecutionModeForbidden,
            String::from(
                "execution mode `workspace` (no sandbox) is forbidden by the host configuration",
            ),
        );
        report.errors = vec![FieldError {
            path: String::from("executionMode"),
            message: String::from("`workspace` is forbidden: host.allowWorkspaceMode is false"),
        }];
        return report;
    }

    // (1b') Writable roots that contain nothing: the decision would report write containment
    // that does not exist. Unsandboxed runs confine nothing anyway.
    if !workspace {
        let errors = host::unsafe_writable_roots(input);
        if !errors.is_empty() {
            let message = format!("a writable root is no containment: {}", errors.summary());
            let mut report = refusal(
                input_digest,
                RefusalCode::SandboxWritableRootUnsafe,
                message,
            );
            report.errors = errors.into_listed();
            return report;
        }
    }

    // (1c) The launcher's budget flags: its own input, checked like the policy's budgets.
    if let Some(flags) = &input.budget_flags {
        let mut errors = crate::text::Errors::default();
        budgets::validate_limits(flags, "budgetFlags", &mut errors);
        if !errors.is_empty() {
            let message = format!("policy is invalid: {}", errors.summary());
            let mut report = refusal(input_digest, RefusalCode::SandboxPolicyInvalid, message);
            report.errors = errors.into_listed();
            return report;
        }
    }

    // (2) The document.
    let taskpack = match &input.document {
        None => None,
        Some(document) => match policy::parse_taskpack(document, &input.host) {
            Ok(taskpack) => Some(taskpack),
            Err(errors) => {
                let message = format!("policy is invalid: {}", errors.summary());
                let mut report = refusal(input_digest, RefusalCode::SandboxPolicyInvalid, message);
                report.errors = errors.into_listed();
                return report;
            }
        },
    };

    // (2b) The task contract, whose budgets are the envelope.
    let contract = match &input.task_contract {
        None => None,
        Some(document) => match policy::parse_task_contract(&document.text, "taskContract") {
            Ok(contract) => Some(ContractEnvelope {
                document_name: document.name.clone(),
                name: contract.name,
                budgets: contract.budgets,
            }),
            Err(errors) => {
                let message = format!("task contract is invalid: {}", errors.summary());
                let mut report = refusal(input_digest, RefusalCode::SandboxPolicyInvalid, message);
                report.errors = errors.into_listed();
                return report;
            }
        },
    };

    // (2c) The launcher's policy flags, checked on their own.
    let flags = match &input.policy_flags {
        None => None,
        Some(flags) => {
            let errors = if workspace {
                flags::unenforceable_in_workspace(flags)
            } else {
                crate::text::Errors::default()
            };
            match flags::check(flags, &input.host) {
                Ok(checked) if errors.is_empty() => Some(checked),
                Ok(_) => return invalid(input_digest, errors),
                Err(errors) => return invalid(input_digest, errors),
            }
        }
    };

    // (3) Resolution, with the launcher's policy flags and narrowing of the allowlist.
    let mut effective = resolve::resolve(input, taskpack.as_ref());
    effective.task_contract = contract;
    if let Some(flags) = &flags
        && let Err(errors) = flags::apply(&mut effective, flags)
    {
        return invalid(input_digest, errors);
    }
    if workspace && input.narrow_allowed_domains.is_some() {
        // `--allow-domain` asks for filtered egress, which only a sandbox can enforce.
        let mut errors = crate::text::Errors::default();
        errors.push(
            "narrowAllowedDomains",
            "filtered egress cannot be enforced in execution mode `workspace` (no sandbox)",
        );
        let message = format!("policy is invalid: {}", errors.summary());
        let mut report = refusal(input_digest, RefusalCode::SandboxPolicyInvalid, message);
        report.errors = errors.into_listed();
        return report;
    }
    if let Err(errors) = resolve::narrow_and_imply(
        &mut effective,
        input.narrow_allowed_domains.as_deref(),
        &input.host,
    ) {
        let message = format!("policy is invalid: {}", errors.summary());
        let mut report = refusal(input_digest, RefusalCode::SandboxPolicyInvalid, message);
        report.errors = errors.into_listed();
        return report;
    }
    // (3b) The host Unix sockets the policy allows: granted from the host's facts, or no
    // decision at all.
    let sockets = match sockets::grant(&effective, &input.host) {
        Ok(grants) => grants,
        Err(sockets::Refused::Unmeasured(errors)) => {
            let message = format!("host facts are invalid: {}", errors.summary());
            let mut report = refusal(input_digest, RefusalCode::HostFactsInvalid, message);
            report.errors = errors.into_listed();
            return report;
        }
        Err(sockets::Refused::Forbidden(errors)) => {
            let message = format!("a host Unix socket is refused: {}", errors.summary());
            let mut report = refusal(input_digest, RefusalCode::SandboxUnixSocketRefused, message);
            report.errors = errors.into_listed();
            report.policy = Some(effective);
            return report;
        }
    };
    if workspace {
        return workspace_decision(input, effective, input_digest, sockets);
    }

    // (4) Negotiation.
    let negotiation = negotiate::negotiate(&effective, &input.host, &input.probes);
    let Some(probe) = negotiation.selected else {
        let (code, message) = negotiation.refusal();
        let mut report = refusal(input_digest, code, message);
        report.trace = negotiation.trace;
        report.policy = Some(effective);
        return report;
    };

    // (5) The plan.
    let confinement = plan::plan(&effective, input, probe, sockets);
    Report {
        schema_version: SCHEMA_VERSION,
        engine_version: crate::ENGINE_VERSION,
        input_digest,
        outcome: "decision",
        code: None,
        message: match effective.filtered_egress() {
            None => format!(
                "selected `{}` for networkMode `{}`",
                probe.backend.as_str(),
                effective.network_mode.as_str()
            ),
            Some(list) => format!(
                "selected `{}` for networkMode `{}`, egress filtered to {}",
                probe.backend.as_str(),
                effective.network_mode.as_str(),
                crate::text::count(list.len(), "allowed entry", "allowed entries")
            ),
        },
        errors: Vec::new(),
        backend: Some(probe.backend),
        provided_capabilities: Some(plan::provided_capabilities(probe)),
        limitations: Some(probe.limitations.clone()),
        plan: Some(confinement),
        trace: negotiation.trace,
        policy: Some(effective),
        execution_mode: None,
    }
}

/// The decision for an explicit `workspace` request the host permits: no backend is negotiated
/// and nothing is confined. The launcher runs it the way it runs `direct-dedicated` (no masks;
/// supervision, budgets, tree cleanup and the environment allowlist), so the plan names that
/// backend; `executionMode` says why, and the policy is still resolved and shown (its budgets
/// apply; its isolation settings do not).
fn workspace_decision(
    input: &DecisionInput,
    effective: EffectivePolicy,
    input_digest: String,
    sockets: Vec<UnixSocketGrant>,
) -> Report {
    let host = &input.host;
    let confinement = plan::workspace_plan(&effective, input, sockets);
    let trace = effective
        .preferred_backends
        .iter()
        .map(|&backend| CandidateTrace {
            backend,
            verdict: CandidateVerdict::NotConsidered,
            reason: String::from("execution mode `workspace`: no sandbox backend is used"),
            missing_capabilities: Vec::new(),
        })
        .collect();
    Report {
        schema_version: SCHEMA_VERSION,
        engine_version: crate::ENGINE_VERSION,
        input_digest,
        outcome: "decision",
        code: None,
        message: String::from(
            "unsandboxed by request: execution mode `workspace` runs the command without isolation (supervised: budgets, tree cleanup, environment allowlist)",
        ),
        errors: Vec::new(),
        backend: Some(Backend::DirectDedicated),
        provided_capabilities: Some(vec![Capability::ProcessTreeCleanup]),
        limitations: Some(vec![String::from(
            "unsandboxed by request: no filesystem, network or syscall confinement",
        )]),
        plan: Some(confinement),
        trace,
        policy: Some(effective),
        execution_mode: Some(ExecutionModeReport {
            mode: ExecutionMode::Workspace,
            sandboxed: false,
            permitted_by: if host.allow_workspace_mode == Some(true) {
                Origin::Host
            } else {
                Origin::Default
            },
            reason: String::from("unsandboxed by request"),
        }),
    }
}

/// `SANDBOX_POLICY_INVALID` with every offending field.
fn invalid(input_digest: String, errors: crate::text::Errors) -> Report {
    let message = format!("policy is invalid: {}", errors.summary());
    let mut report = refusal(input_digest, RefusalCode::SandboxPolicyInvalid, message);
    report.errors = errors.into_listed();
    report
}

/// A refusal report with nothing but its code and message filled in.
fn refusal(input_digest: String, code: RefusalCode, message: String) -> Report {
    Report {
        schema_version: SCHEMA_VERSION,
        engine_version: crate::ENGINE_VERSION,
        input_digest,
        outcome: "refusal",
        code: Some(code),
        message,
        errors: Vec::new(),
        policy: None,
        backend: None,
        provided_capabilities: None,
        limitations: None,
        plan: None,
        trace: Vec::new(),
        execution_mode: None,
    }
}

/// Serialises the report, hashes it, and derives the typed verdict from the same report.
fn finish(report: Report) -> Outcome {
    let refused = |code| Verdict::Refusal {
        code,
        message: report.message.clone(),
        errors: report.errors.clone(),
        trace: report.trace.clone(),
    };
    let verdict = match (report.code, &report.plan) {
        (Some(code), _) => refused(code),
        (None, Some(plan)) => Verdict::Decision(Box::new(plan.clone())),
        // Unreachable by construction: a report without a code always has a plan.
        (None, None) => refused(RefusalCode::HostFactsInvalid),
    };
    let canonical_json = canonical_json(&report);
    let digest = sha256_hex(canonical_json.as_bytes());
    Outcome {
        verdict,
        canonical_json,
        digest,
    }
}
