//! Negotiation: first fit over the preferred backends, with a verdict and reason for each.
//!
//! Why every candidate gets a trace entry, even after one was selected: a refusal must show why
//! each backend failed, and a decision must show that the backends ranked above the chosen one
//! were considered and why they lost, so that "why not bwrap?" is answered by the record alone.

use crate::model::{Backend, BackendProbe, Capability, HostFacts, SessionKind};
use crate::output::{CandidateTrace, CandidateVerdict, EffectivePolicy, RefusalCode};
use crate::text;

/// The outcome of negotiation: the trace, and the selected probe if any.
pub(crate) struct Negotiation<'p> {
    pub(crate) trace: Vec<CandidateTrace>,
    pub(crate) selected: Option<&'p BackendProbe>,
}

impl Negotiation<'_> {
    /// The refusal when nothing was selected: `UNAVAILABLE` when no candidate was available and
    /// unblocked, else `INSUFFICIENT`; with a one-line message listing every candidate.
    pub(crate) fn refusal(&self) -> (RefusalCode, String) {
        let usable = self
            .trace
            .iter()
            .any(|c| c.verdict == CandidateVerdict::Insufficient);
        let listed = self
            .trace
            .iter()
            .map(|c| format!("{} ({})", c.backend.as_str(), text::one_line(&c.reason)))
            .collect::<Vec<_>>()
            .join(", ");
        if usable {
            (
                RefusalCode::SandboxCapabilityInsufficient,
                format!("no available backend provides every required capability: {listed}"),
            )
        } else {
            (
                RefusalCode::SandboxBackendUnavailable,
                format!("no preferred backend is available: {listed}"),
            )
        }
    }
}

/// Walks `policy.preferred_backends` in order and selects the first that fits.
pub(crate) fn negotiate<'p>(
    policy: &EffectivePolicy,
    host: &HostFacts,
    probes: &'p [BackendProbe],
) -> Negotiation<'p> {
    let mut trace = Vec::with_capacity(policy.preferred_backends.len());
    let mut selected = None;
    for &backend in &policy.preferred_backends {
        if selected.is_some() {
            trace.push(entry(
                backend,
                CandidateVerdict::NotConsidered,
                "an earlier candidate was selected",
                Vec::new(),
            ));
            continue;
        }
        let probe = probes.iter().find(|p| p.backend == backend);
        let candidate = judge(backend, probe, policy, host);
        if candidate.verdict == CandidateVerdict::Selected {
            selected = probe;
        }
        trace.push(candidate);
    }
    Negotiation { trace, selected }
}

/// One candidate's verdict, ignoring candidates before it.
fn judge(
    backend: Backend,
    probe: Option<&BackendProbe>,
    policy: &EffectivePolicy,
    host: &HostFacts,
) -> CandidateTrace {
    let Some(probe) = probe else {
        return entry(
            backend,
            CandidateVerdict::Unavailable,
            "no probe recorded for this host",
            Vec::new(),
        );
    };
    if !probe.available {
        let reason = if probe.reason.is_empty() {
            "the probe reports it unavailable"
        } else {
            probe.reason.as_str()
        };
        return entry(backend, CandidateVerdict::Unavailable, reason, Vec::new());
    }
    if let Some(reason) = blocked(backend, policy, host) {
        return entry(backend, CandidateVerdict::Blocked, reason, Vec::new());
    }
    // Required capabilities the probe does not list at all.
    let mut lacking: Vec<Capability> = policy
        .requirements
        .iter()
        .map(|r| r.capability)
        .filter(|c| !probe.capabilities.contains(c))
        .collect();
    lacking.sort();
    lacking.dedup();
    // The backend cannot run the command in this network mode at all (even `allow-outbound`
    // must be listed: a backend that can only confine the network cannot honour it).
    let mode_unenforceable = !probe.network_modes.contains(&policy.network_mode);
    // Filtered egress needs the backend to route all traffic through the host's proxy, and
    // listed host loopback ports need the same bridge: without it they could not be reached
    // (a network namespace) or could not be narrowed to the listed ones (Seatbelt).
    let filter_unenforceable = policy.filtered_egress().is_some() && !probe.network_bridge;
    let ports_unenforceable = !policy.loopback_ports.is_empty() && !probe.network_bridge;
    let privileged = privileged_ports(backend, &policy.loopback_ports);
    let sockets_unpassable =
        !policy.allowed_unix_sockets.is_empty() && !passes_unix_sockets(backend);
    let isolation_required = policy
        .requirements
        .iter()
        .any(|r| r.capability == Capability::NetworkIsolation);
    if lacking.is_empty()
        && !mode_unenforceable
        && !filter_unenforceable
        && !ports_unenforceable
        && privileged.is_empty()
        && !sockets_unpassable
    {
        let mut reason = format!(
            "provides every required capability for networkMode `{}`",
            policy.network_mode.as_str()
        );
        if policy.filtered_egress().is_some() {
            reason.push_str(" with egress filtered by domain");
        }
        if !policy.loopback_ports.is_empty() {
            reason.push_str(" and the listed host loopback ports");
        }
        if !policy.allowed_unix_sockets.is_empty() {
            reason.push_str(", passing the allowed host Unix sockets");
        }
        return entry(backend, CandidateVerdict::Selected, &reason, Vec::new());
    }
    let mut parts = Vec::new();
    if !lacking.is_empty() {
        parts.push(format!(
            "lacks {}",
            text::list_names(lacking.iter().map(|c| c.as_str()))
        ));
    }
    let mut missing = lacking;
    if mode_unenforceable {
        parts.push(format!(
            "cannot enforce networkMode `{}`",
            policy.network_mode.as_str()
        ));
        if isolation_required {
            missing.push(Capability::NetworkIsolation);
        }
    }
    if filter_unenforceable {
        parts.push(String::from(
            "cannot filter egress by domain (allowedDomains)",
        ));
        missing.push(Capability::NetworkIsolation);
    }
    if ports_unenforceable {
        parts.push(String::from(
            "cannot reach exactly the listed host loopback ports (loopbackPorts)",
        ));
        missing.push(Capability::NetworkIsolation);
    }
    if !privileged.is_empty() {
        parts.push(format!(
            "cannot forward host loopback ports below 1024 ({}): its bridge listens for them on \
             the sandbox's own loopback with no privilege; serve them from port 1024 up, or let \
             the docker backend, which can, run the command",
            privileged
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
        missing.push(Capability::NetworkIsolation);
    }
    if sockets_unpassable {
        // Not a capability the backend lacks: it confines every host socket and cannot let
        // one through (Landlock's filter refuses AF_UNIX whole; Seatbelt is not wired for it).
        parts.push(String::from(
            "cannot let chosen host Unix sockets through (allowedUnixSockets)",
        ));
    }
    missing.sort();
    missing.dedup();
    entry(
        backend,
        CandidateVerdict::Insufficient,
        &parts.join("; "),
        missing,
    )
}

/// The listed host loopback ports `backend`'s bridge cannot forward: under bwrap the bridge
/// binds each port on the sandbox's own loopback with every capability dropped, in a network
/// namespace whose unprivileged port floor is the kernel's default (1024), so a port below it
/// fails at launch; a container's namespace lets its processes bind any port (Docker sets
/// `net.ipv4.ip_unprivileged_port_start` to 0).
fn privileged_ports(backend: Backend, ports: &[u16]) -> Vec<u16> {
    match backend {
        Backend::LinuxBwrap => ports.iter().copied().filter(|p| *p < 1024).collect(),
        Backend::Docker
        | Backend::LinuxLandlock
        | Backend::MacosSeatbelt
        | Backend::DirectDedicated => Vec::new(),
    }
}

/// Whether the backend can bind a chosen host socket into the sandbox while every other stays
/// masked: bwrap and Docker mount it; `direct-dedicated` masks nothing at all.
fn passes_unix_sockets(backend: Backend) -> bool {
    match backend {
        Backend::LinuxBwrap | Backend::Docker | Backend::DirectDedicated => true,
        Backend::LinuxLandlock | Backend::MacosSeatbelt => false,
    }
}

/// Why the host forbids an available backend, if it does.
fn blocked(backend: Backend, policy: &EffectivePolicy, host: &HostFacts) -> Option<&'static str> {
    match backend {
        Backend::Docker if host.session_kind == SessionKind::Turnkey => {
            Some("turnkey sessions block docker")
        }
        Backend::DirectDedicated
            if !host.allow_direct_dedicated && !policy.allow_dedicated_direct_override =>
        {
            Some("direct-dedicated needs the host's explicit opt-in")
        }
        _ => None,
    }
}

fn entry(
    backend: Backend,
    verdict: CandidateVerdict,
    reason: &str,
    missing_capabilities: Vec<Capability>,
) -> CandidateTrace {
    CandidateTrace {
        backend,
        verdict,
        reason: reason.to_owned(),
        missing_capabilities,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;
    use crate::model::NetworkMode;
    use crate::output::{Origin, PolicySource, Requirement};

    fn host(session_kind: SessionKind, allow_direct_dedicated: bool) -> HostFacts {
        HostFacts {
            session_kind,
            allow_direct_dedicated,
            ..HostFacts::linux_cli("/root", "/w")
        }
    }

    fn policy(backends: &[Backend], mode: NetworkMode, caps: &[Capability]) -> EffectivePolicy {
        EffectivePolicy {
            source: PolicySource::Declared,
            document_name: String::new(),
            taskpack_name: None,
            ignored_spec_sections: vec![],
            preferred_backends: backends.to_vec(),
            preferred_backends_origin: Origin::Declared,
            network_mode: mode,
            network_mode_origin: Origin::Declared,
            requirements: caps
                .iter()
                .map(|&capability| Requirement {
                    capability,
                    origin: Origin::Declared,
                    reason: String::new(),
                })
                .collect(),
            denied_read_paths: vec![],
            dropped_denied_read_paths: vec![],
            protected_paths: vec![],
            dropped_protected_paths: vec![],
            allow_dedicated_direct_override: false,
            budgets: Default::default(),
            task_contract: None,
            loopback_ports: vec![],
            allowed_domains: None,
            allowed_domains_origin: None,
            writable_roots: None,
            pass_environment: None,
            allowed_unix_sockets: Vec::new(),
            allowed_unix_sockets_origin: None,
            loopback_ports_origin: None,
        }
    }

    fn probe(
        backend: Backend,
        available: bool,
        caps: &[Capability],
        modes: &[NetworkMode],
    ) -> BackendProbe {
        BackendProbe {
            backend,
            available,
            reason: if available {
                String::new()
            } else {
                "not installed".into()
            },
            capabilities: caps.to_vec(),
            network_modes: modes.to_vec(),
            network_bridge: false,
            version: String::new(),
            limitations: vec![],
            landlock_proc: None,
        }
    }

    fn verdicts(n: &Negotiation<'_>) -> Vec<CandidateVerdict> {
        n.trace.iter().map(|c| c.verdict).collect()
    }

    use CandidateVerdict::*;

    #[test]
    fn first_fit_wins_and_later_are_not_considered() {
        let all = Capability::ALL;
        let probes = [
            probe(Backend::MacosSeatbelt, false, &[], &[]),
            probe(Backend::LinuxBwrap, true, &all, &NetworkMode::ALL),
            probe(Backend::LinuxLandlock, true, &all, &NetworkMode::ALL),
        ];
        let p = policy(
            &[
                Backend::MacosSeatbelt,
                Backend::LinuxBwrap,
                Backend::LinuxLandlock,
            ],
            NetworkMode::None,
            &[Capability::NetworkIsolation],
        );
        let n = negotiate(&p, &host(SessionKind::Cli, false), &probes);
        assert_eq!(verdicts(&n), [Unavailable, Selected, NotConsidered]);
        assert_eq!(n.selected.unwrap().backend, Backend::LinuxBwrap);
        assert_eq!(n.trace[0].reason, "not installed");
        assert_eq!(
            n.trace[1].reason,
            "provides every required capability for networkMode `none`"
        );
    }

    #[test]
    fn missing_probe_is_unavailable() {
        let p = policy(&[Backend::Docker], NetworkMode::None, &[]);
        let n = negotiate(&p, &host(SessionKind::Cli, false), &[]);
        assert_eq!(verdicts(&n), [Unavailable]);
        assert_eq!(n.trace[0].reason, "no probe recorded for this host");
        assert_eq!(n.refusal().0, RefusalCode::SandboxBackendUnavailable);
    }

    #[test]
    fn turnkey_blocks_docker_and_direct_dedicated_needs_opt_in() {
        let outbound = [NetworkMode::AllowOutbound];
        let probes = [
            probe(Backend::Docker, true, &[], &outbound),
            probe(Backend::DirectDedicated, true, &[], &outbound),
        ];
        let p = policy(
            &[Backend::Docker, Backend::DirectDedicated],
            NetworkMode::AllowOutbound,
            &[],
        );
        let n = negotiate(&p, &host(SessionKind::Turnkey, false), &probes);
        assert_eq!(verdicts(&n), [Blocked, Blocked]);
        let (code, message) = n.refusal();
        assert_eq!(code, RefusalCode::SandboxBackendUnavailable);
        assert_eq!(
            message,
            "no preferred backend is available: docker (turnkey sessions block docker), \
             direct-dedicated (direct-dedicated needs the host's explicit opt-in)"
        );
        let n = negotiate(&p, &host(SessionKind::Cli, true), &probes);
        assert_eq!(verdicts(&n), [Selected, NotConsidered]);
        let n = negotiate(&p, &host(SessionKind::Turnkey, true), &probes);
        assert_eq!(verdicts(&n), [Blocked, Selected]);
    }

    #[test]
    fn actions_override_unblocks_direct_dedicated() {
        let probes = [probe(
            Backend::DirectDedicated,
            true,
            &[Capability::ProcessTreeCleanup],
            &[NetworkMode::AllowOutbound],
        )];
        let mut p = policy(
            &[Backend::DirectDedicated],
            NetworkMode::AllowOutbound,
            &[Capability::ProcessTreeCleanup],
        );
        p.allow_dedicated_direct_override = true;
        let n = negotiate(&p, &host(SessionKind::Cli, false), &probes);
        assert_eq!(verdicts(&n), [Selected]);
    }

    #[test]
    fn a_mode_the_probe_cannot_run_is_insufficient_even_without_isolation() {
        let probes = [
            probe(Backend::LinuxLandlock, true, &[], &[NetworkMode::None]),
            probe(
                Backend::LinuxBwrap,
                true,
                &[],
                &[NetworkMode::AllowOutbound],
            ),
        ];
        let p = policy(
            &[Backend::LinuxLandlock, Backend::LinuxBwrap],
            NetworkMode::AllowOutbound,
            &[],
        );
        let n = negotiate(&p, &host(SessionKind::Cli, false), &probes);
        assert_eq!(verdicts(&n), [Insufficient, Selected]);
        assert_eq!(
            n.trace[0].reason,
            "cannot enforce networkMode `allow-outbound`"
        );
        assert!(n.trace[0].missing_capabilities.is_empty());
    }

    #[test]
    fn insufficient_lists_missing_capabilities_and_mode() {
        let probes = [
            probe(
                Backend::LinuxLandlock,
                true,
                &[Capability::NetworkIsolation],
                &[NetworkMode::None],
            ),
            probe(Backend::LinuxBwrap, true, &[], &[NetworkMode::LoopbackOnly]),
        ];
        let p = policy(
            &[Backend::LinuxLandlock, Backend::LinuxBwrap],
            NetworkMode::LoopbackOnly,
            &[Capability::SyscallFiltering, Capability::NetworkIsolation],
        );
        let n = negotiate(&p, &host(SessionKind::Cli, false), &probes);
        assert_eq!(verdicts(&n), [Insufficient, Insufficient]);
        assert_eq!(
            n.trace[0].missing_capabilities,
            [Capability::NetworkIsolation, Capability::SyscallFiltering]
        );
        assert_eq!(
            n.trace[0].reason,
            "lacks `syscallFiltering`; cannot enforce networkMode `loopback-only`"
        );
        assert_eq!(
            n.trace[1].reason,
            "lacks `networkIsolation`, `syscallFiltering`"
        );
        assert_eq!(n.refusal().0, RefusalCode::SandboxCapabilityInsufficient);
    }
}
