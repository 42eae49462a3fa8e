//! Conversions between the engine crate's model types and the wasmtime bindings' WIT types.

use palisade_engine::model::{BudgetLimits, PolicyFlags};
use palisade_engine::output::{
    BudgetClamp, BudgetKind, BudgetLimit, BudgetOrigin, CandidateTrace, CandidateVerdict,
    ConfinementPlan, EffectiveBudgets, EnvironmentOrigin, EnvironmentPolicy, FieldError,
    PlanNetwork, ProtectedPath, UnixSocketGrant,
};
use palisade_engine::{
    Backend, BackendProbe, Capability, DecisionInput, ExecutionMode, HostFacts, LandlockProc,
    NetworkMode, Outcome, RefusalCode, SessionKind, UnixSocketKind, Verdict,
};

use super::{RecordedOutput, RuntimeError, wit};

pub(super) fn to_wit_input(input: &DecisionInput) -> wit::DecisionInput {
    wit::DecisionInput {
        document: input.document.clone(),
        document_name: input.document_name.clone(),
        host: to_wit_host(&input.host),
        probes: input.probes.iter().map(to_wit_probe).collect(),
        narrow_allowed_domains: input.narrow_allowed_domains.clone(),
        execution_mode: input.execution_mode.map(|mode| match mode {
            ExecutionMode::Sandbox => wit::ExecutionMode::Sandbox,
            ExecutionMode::Workspace => wit::ExecutionMode::Workspace,
        }),
        budget_flags: input.budget_flags.as_ref().map(to_wit_limits),
        task_contract: input.task_contract.as_ref().map(|d| wit::NamedDocument {
            name: d.name.clone(),
            text: d.text.clone(),
        }),
        policy_flags: input.policy_flags.as_ref().map(to_wit_flags),
    }
}

fn to_wit_flags(flags: &PolicyFlags) -> wit::PolicyFlags {
    wit::PolicyFlags {
        network_mode: flags.network_mode.map(to_wit_network_mode),
        allowed_domains: flags.allowed_domains.clone(),
        denied_read_paths: flags.denied_read_paths.clone(),
        writable_roots: flags.writable_roots.clone(),
        preferred_backends: flags
            .preferred_backends
            .iter()
            .copied()
            .map(to_wit_backend)
            .collect(),
        required_capabilities: flags
            .required_capabilities
            .iter()
            .copied()
            .map(to_wit_capability)
            .collect(),
        pass_environment: flags.pass_environment.clone(),
        allowed_unix_sockets: flags.allowed_unix_sockets.clone(),
        loopback_ports: flags.loopback_ports.clone(),
    }
}

fn to_wit_limits(limits: &BudgetLimits) -> wit::BudgetLimits {
    wit::BudgetLimits {
        timeout_millis: limits.timeout_millis,
        memory_bytes: limits.memory_bytes,
        max_processes: limits.max_processes,
        cpu_seconds: limits.cpu_seconds,
    }
}

fn to_wit_host(host: &HostFacts) -> wit::HostFacts {
    wit::HostFacts {
        os: host.os.clone(),
        arch: host.arch.clone(),
        session_kind: match host.session_kind {
            SessionKind::Turnkey => wit::SessionKind::Turnkey,
            SessionKind::Cli => wit::SessionKind::Cli,
            SessionKind::Managed => wit::SessionKind::Managed,
        },
        github_actions: host.github_actions,
        allow_direct_dedicated: host.allow_direct_dedicated,
        home_dir: host.home_dir.clone(),
        workspace_dir: host.workspace_dir.clone(),
        writable_roots: host.writable_roots.clone(),
        default_backend_order: host
            .default_backend_order
            .iter()
            .copied()
            .map(to_wit_backend)
            .collect(),
        environment_allowlist: host.environment_allowlist.clone(),
        allow_workspace_mode: host.allow_workspace_mode,
        budget_ceilings: host.budget_ceilings.as_ref().map(to_wit_limits),
        denied_read_paths: host.denied_read_paths.clone(),
        exempt_denied_read_paths: host.exempt_denied_read_paths.clone(),
        allow_home_writable: host.allow_home_writable,
        runtime_profile_budgets: host.runtime_profile_budgets.as_ref().map(to_wit_limits),
        loopback_ports: host.loopback_ports.clone(),
        unix_sockets: host.unix_sockets.as_ref().map(|facts| {
            facts
                .iter()
                .map(|fact| wit::UnixSocketFact {
                    path: fact.path.clone(),
                    kind: match fact.kind {
                        UnixSocketKind::Socket => wit::UnixSocketKind::Socket,
                        UnixSocketKind::Missing => wit::UnixSocketKind::Missing,
                        UnixSocketKind::NotSocket => wit::UnixSocketKind::NotSocket,
                    },
                    target: fact.target.clone(),
                    owner_uid: fact.owner_uid,
                    group: fact.group.clone(),
                    mode: fact.mode,
                    caller_in_group: fact.caller_in_group,
                })
                .collect()
        }),
        allow_root_granting_sockets: host.allow_root_granting_sockets.clone(),
        ssh_auth_sock: host.ssh_auth_sock.clone(),
        git_dirs: host.git_dirs.clone(),
        state_paths: host.state_paths.clone(),
        key_paths: host.key_paths.clone(),
        exempt_protected_paths: host.exempt_protected_paths.clone(),
    }
}

fn to_wit_probe(probe: &BackendProbe) -> wit::BackendProbe {
    wit::BackendProbe {
        backend: to_wit_backend(probe.backend),
        available: probe.available,
        reason: probe.reason.clone(),
        capabilities: probe
            .capabilities
            .iter()
            .copied()
            .map(to_wit_capability)
            .collect(),
        network_modes: probe
            .network_modes
            .iter()
            .copied()
            .map(to_wit_network_mode)
            .collect(),
        network_bridge: probe.network_bridge,
        version: probe.version.clone(),
        limitations: probe.limitations.clone(),
        landlock_proc: probe.landlock_proc.map(|proc| match proc {
            LandlockProc::Own => wit::LandlockProc::Own,
            LandlockProc::HostProcessesDenied => wit::LandlockProc::HostProcessesDenied,
        }),
    }
}

fn to_wit_backend(backend: Backend) -> wit::Backend {
    match backend {
        Backend::MacosSeatbelt => wit::Backend::MacosSeatbelt,
        Backend::LinuxBwrap => wit::Backend::LinuxBwrap,
        Backend::LinuxLandlock => wit::Backend::LinuxLandlock,
        Backend::Docker => wit::Backend::Docker,
        Backend::DirectDedicated => wit::Backend::DirectDedicated,
    }
}

fn from_wit_backend(backend: wit::Backend) -> Backend {
    match backend {
        wit::Backend::MacosSeatbelt => Backend::MacosSeatbelt,
        wit::Backend::LinuxBwrap => Backend::LinuxBwrap,
        wit::Backend::LinuxLandlock => Backend::LinuxLandlock,
        wit::Backend::Docker => Backend::Docker,
        wit::Backend::DirectDedicated => Backend::DirectDedicated,
    }
}

fn to_wit_network_mode(mode: NetworkMode) -> wit::NetworkMode {
    match mode {
        NetworkMode::None => wit::NetworkMode::None,
        NetworkMode::LoopbackOnly => wit::NetworkMode::LoopbackOnly,
        NetworkMode::AllowOutbound => wit::NetworkMode::AllowOutbound,
    }
}

fn to_wit_capability(capability: Capability) -> wit::Capability {
    match capability {
        Capability::FilesystemReadContainment => wit::Capability::FilesystemReadContainment,
        Capability::FilesystemWriteContainment => wit::Capability::FilesystemWriteContainment,
        Capability::ProtectedPathReadOnlyMask => wit::Capability::ProtectedPathReadOnlyMask,
        Capability::NetworkIsolation => wit::Capability::NetworkIsolation,
        Capability::ProcessTreeCleanup => wit::Capability::ProcessTreeCleanup,
        Capability::SyscallFiltering => wit::Capability::SyscallFiltering,
    }
}

fn from_wit_capability(capability: wit::Capability) -> Capability {
    match capability {
        wit::Capability::FilesystemReadContainment => Capability::FilesystemReadContainment,
        wit::Capability::FilesystemWriteContainment => Capability::FilesystemWriteContainment,
        wit::Capability::ProtectedPathReadOnlyMask => Capability::ProtectedPathReadOnlyMask,
        wit::Capability::NetworkIsolation => Capability::NetworkIsolation,
        wit::Capability::ProcessTreeCleanup => Capability::ProcessTreeCleanup,
        wit::Capability::SyscallFiltering => Capability::SyscallFiltering,
    }
}

fn from_wit_plan(plan: wit::ConfinementPlan) -> ConfinementPlan {
    ConfinementPlan {
        backend: from_wit_backend(plan.backend),
        execution_mode: match plan.execution_mode {
            wit::ExecutionMode::Sandbox => ExecutionMode::Sandbox,
            wit::ExecutionMode::Workspace => ExecutionMode::Workspace,
        },
        network: match plan.network {
            wit::Network::None => PlanNetwork::None,
            wit::Network::LoopbackOnly(host_ports) => PlanNetwork::LoopbackOnly { host_ports },
            wit::Network::HostLoopback => PlanNetwork::HostLoopback,
            wit::Network::AllowOutbound => PlanNetwork::AllowOutbound,
            wit::Network::Filtered(filtered) => PlanNetwork::Filtered {
                allowlist: filtered.allowlist,
                host_ports: filtered.host_ports,
            },
        },
        workspace_dir: plan.workspace_dir,
        writable_roots: plan.writable_roots,
        read_only_root: plan.read_only_root,
        denied_read_paths: plan.denied_read_paths,
        protected_paths: plan
            .protected_paths
            .into_iter()
            .map(|p| ProtectedPath {
                path: p.path,
                enforced: p.enforced,
            })
            .collect(),
        syscall_filter: plan.syscall_filter,
        process_tree_cleanup: plan.process_tree_cleanup,
        budgets: from_wit_budgets(plan.budgets),
        landlock_proc: plan.landlock_proc.map(|proc| match proc {
            wit::LandlockProc::Own => LandlockProc::Own,
            wit::LandlockProc::HostProcessesDenied => LandlockProc::HostProcessesDenied,
        }),
        environment: EnvironmentPolicy {
            allowlist: plan.environment.allowlist,
            explicit_secrets: plan.environment.explicit_secrets,
            origin: match plan.environment.origin {
                wit::EnvironmentOrigin::Default => EnvironmentOrigin::Default,
                wit::EnvironmentOrigin::Host => EnvironmentOrigin::Host,
                wit::EnvironmentOrigin::Flag => EnvironmentOrigin::Flag,
            },
        },
        unix_sockets: plan
            .unix_sockets
            .into_iter()
            .map(|s| UnixSocketGrant {
                path: s.path,
                target: s.target,
                grants_root: s.grants_root,
            })
            .collect(),
        warnings: plan.warnings,
    }
}

fn from_wit_budgets(budgets: wit::EffectiveBudgets) -> EffectiveBudgets {
    let limit = |limit: Option<wit::BudgetLimit>| {
        limit.map(|l| BudgetLimit {
            value: l.value,
            origin: from_wit_budget_origin(l.origin),
        })
    };
    EffectiveBudgets {
        timeout_millis: limit(budgets.timeout_millis),
        memory_bytes: limit(budgets.memory_bytes),
        max_processes: limit(budgets.max_processes),
        cpu_seconds: limit(budgets.cpu_seconds),
        helper_processes: budgets.helper_processes,
        launcher_processes: budgets.launcher_processes,
        clamped: budgets
            .clamped
            .into_iter()
            .map(|c| BudgetClamp {
                budget: match c.budget {
                    wit::BudgetKind::Timeout => BudgetKind::Timeout,
                    wit::BudgetKind::Memory => BudgetKind::Memory,
                    wit::BudgetKind::MaxProcesses => BudgetKind::MaxProcesses,
                    wit::BudgetKind::Cpu => BudgetKind::Cpu,
                },
                requested: c.requested,
                requested_by: from_wit_budget_origin(c.requested_by),
                limit: c.limit,
                limited_by: from_wit_budget_origin(c.limited_by),
            })
            .collect(),
    }
}

fn from_wit_budget_origin(origin: wit::BudgetOrigin) -> BudgetOrigin {
    match origin {
        wit::BudgetOrigin::Policy => BudgetOrigin::Policy,
        wit::BudgetOrigin::Flag => BudgetOrigin::Flag,
        wit::BudgetOrigin::TaskContract => BudgetOrigin::TaskContract,
        wit::BudgetOrigin::RuntimeProfile => BudgetOrigin::RuntimeProfile,
        wit::BudgetOrigin::HostCeiling => BudgetOrigin::HostCeiling,
    }
}

fn from_wit_trace(trace: wit::CandidateTrace) -> CandidateTrace {
    CandidateTrace {
        backend: from_wit_backend(trace.backend),
        verdict: match trace.verdict {
            wit::CandidateVerdict::Selected => CandidateVerdict::Selected,
            wit::CandidateVerdict::Unavailable => CandidateVerdict::Unavailable,
            wit::CandidateVerdict::Blocked => CandidateVerdict::Blocked,
            wit::CandidateVerdict::Insufficient => CandidateVerdict::Insufficient,
            wit::CandidateVerdict::NotConsidered => CandidateVerdict::NotConsidered,
        },
        reason: trace.reason,
        missing_capabilities: trace
            .missing_capabilities
            .into_iter()
            .map(from_wit_capability)
            .collect(),
    }
}

fn from_wit_refusal_code(code: wit::RefusalCode) -> RefusalCode {
    match code {
        wit::RefusalCode::SandboxPolicyInvalid => RefusalCode::SandboxPolicyInvalid,
        wit::RefusalCode::SandboxBackendUnavailable => RefusalCode::SandboxBackendUnavailable,
        wit::RefusalCode::SandboxCapabilityInsufficient => {
            RefusalCode::SandboxCapabilityInsufficient
        }
        wit::RefusalCode::HostFactsInvalid => RefusalCode::HostFactsInvalid,
        wit::RefusalCode::ExecutionModeForbidden => RefusalCode::ExecutionModeForbidden,
        wit::RefusalCode::SandboxWritableRootUnsafe => RefusalCode::SandboxWritableRootUnsafe,
        wit::RefusalCode::SandboxUnixSocketRefused => RefusalCode::SandboxUnixSocketRefused,
    }
}

/// The output, after checking that its digest really is the SHA-256 of its canonical JSON (a
/// foreign or archived component is not trusted on that).
pub(super) fn checked(output: RecordedOutput) -> Result<RecordedOutput, RuntimeError> {
    if palisade_engine::output::sha256_hex(output.canonical_json.as_bytes()) == output.digest {
        Ok(output)
    } else {
        Err(RuntimeError::DigestMismatch {
            digest: output.digest,
        })
    }
}

/// The component's result as an [`Outcome`], after checking its digest ([`checked`]).
pub(super) fn to_outcome(
    result: Result<wit::Decision, wit::Refusal>,
) -> Result<Outcome, RuntimeError> {
    let outcome = match result {
        Ok(decision) => Outcome {
            verdict: Verdict::Decision(Box::new(from_wit_plan(decision.plan))),
            canonical_json: decision.canonical_json,
            digest: decision.digest,
        },
        Err(refusal) => Outcome {
            verdict: Verdict::Refusal {
                code: from_wit_refusal_code(refusal.code),
                message: refusal.message,
                errors: refusal
                    .errors
                    .into_iter()
                    .map(|e| FieldError {
                        path: e.path,
                        message: e.message,
                    })
                    .collect(),
                trace: refusal.trace.into_iter().map(from_wit_trace).collect(),
            },
            canonical_json: refusal.canonical_json,
            digest: refusal.digest,
        },
    };
    checked(RecordedOutput {
        canonical_json: outcome.canonical_json,
        digest: outcome.digest,
    })
    .map(|output| Outcome {
        verdict: outcome.verdict,
        canonical_json: output.canonical_json,
        digest: output.digest,
    })
}
