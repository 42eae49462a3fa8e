//! Conversions between the engine crate's model types and the wasmtime bindings' WIT types.

use palisade_engine::{
    Backend, BackendProbe, Capability, DecisionInput, ExecutionMode, HostFacts, NetworkMode,
    Outcome, RefusalCode, SessionKind, Verdict,
};

use super::{RuntimeError, wit};

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
        domain_filtering: probe.domain_filtering,
        version: probe.version.clone(),
        limitations: probe.limitations.clone(),
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

fn from_wit_network_mode(mode: wit::NetworkMode) -> NetworkMode {
    match mode {
        wit::NetworkMode::None => NetworkMode::None,
        wit::NetworkMode::LoopbackOnly => NetworkMode::LoopbackOnly,
        wit::NetworkMode::AllowOutbound => NetworkMode::AllowOutbound,
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

fn from_wit_refusal_code(code: wit::RefusalCode) -> RefusalCode {
    match code {
        wit::RefusalCode::SandboxPolicyInvalid => RefusalCode::SandboxPolicyInvalid,
        wit::RefusalCode::SandboxBackendUnavailable => RefusalCode::SandboxBackendUnavailable,
        wit::RefusalCode::SandboxCapabilityInsufficient => {
            RefusalCode::SandboxCapabilityInsufficient
        }
        wit::RefusalCode::HostFactsInvalid => RefusalCode::HostFactsInvalid,
        wit::RefusalCode::ExecutionModeForbidden => RefusalCode::ExecutionModeForbidden,
    }
}

/// The component's result as an [`Outcome`], after checking that its digest really is the
/// SHA-256 of its canonical JSON (a foreign or archived component is not trusted on that).
pub(super) fn to_outcome(
    result: Result<wit::Decision, wit::Refusal>,
) -> Result<Outcome, RuntimeError> {
    let outcome = match result {
        Ok(decision) => Outcome {
            verdict: Verdict::Decision {
                backend: from_wit_backend(decision.backend),
                network_mode: from_wit_network_mode(decision.network_mode),
                domain_allowlist: decision.domain_allowlist,
            },
            canonical_json: decision.canonical_json,
            digest: decision.digest,
        },
        Err(refusal) => Outcome {
            verdict: Verdict::Refusal {
                code: from_wit_refusal_code(refusal.code),
                message: refusal.message,
            },
            canonical_json: refusal.canonical_json,
            digest: refusal.digest,
        },
    };
    if palisade_engine::output::sha256_hex(outcome.canonical_json.as_bytes()) == outcome.digest {
        Ok(outcome)
    } else {
        Err(RuntimeError::DigestMismatch {
            digest: outcome.digest,
        })
    }
}
