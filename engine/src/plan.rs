//! The confinement plan: what the shim must enforce for the chosen backend.
//!
//! Why the plan is driven by the chosen probe's capabilities rather than by the requirements:
//! a backend applies every protection it can, not only the required ones (built-in protected
//! paths are masked by any backend with `protectedPathReadOnlyMask`, without requiring it), and
//! it must never be asked for one it cannot honestly enforce (an opted-in `direct-dedicated` gets
//! empty masks, not masks it would silently ignore).

use std::collections::BTreeSet;

use crate::budgets;
use crate::environment::{self, Entry};
use crate::model::{
    Backend, BackendProbe, Capability, DecisionInput, ExecutionMode, HostFacts, NetworkMode,
};
use crate::output::{
    ConfinementPlan, EffectivePolicy, EnvironmentOrigin, EnvironmentPolicy, PlanNetwork,
    ProtectedPath, UnixSocketGrant,
};

/// The plan for `probe`'s backend under `policy`.
pub(crate) fn plan(
    policy: &EffectivePolicy,
    input: &DecisionInput,
    probe: &BackendProbe,
    unix_sockets: Vec<UnixSocketGrant>,
) -> ConfinementPlan {
    let has = |capability: Capability| probe.capabilities.contains(&capability);
    let network = network(policy, probe.backend);
    // The bridge (to the proxy, to the listed host loopback ports) is one process of
    // Palisade's own inside the tree.
    let helper_processes = u32::from(match &network {
        PlanNetwork::Filtered { .. } => true,
        PlanNetwork::LoopbackOnly { host_ports } => !host_ports.is_empty(),
        PlanNetwork::None | PlanNetwork::HostLoopback | PlanNetwork::AllowOutbound => false,
    });
    let mut plan = ConfinementPlan {
        backend: probe.backend,
        execution_mode: ExecutionMode::Sandbox,
        network,
        workspace_dir: input.host.workspace_dir.clone(),
        writable_roots: writable_roots(policy, &input.host),
        read_only_root: has(Capability::FilesystemWriteContainment),
        denied_read_paths: if has(Capability::FilesystemReadContainment) {
            policy
                .denied_read_paths
                .iter()
                .map(|denied| denied.path.clone())
                .collect()
        } else {
            Vec::new()
        },
        protected_paths: protected_paths(policy, has(Capability::ProtectedPathReadOnlyMask)),
        syscall_filter: has(Capability::SyscallFiltering),
        process_tree_cleanup: has(Capability::ProcessTreeCleanup),
        budgets: budgets::effective(
            &budget_sources(policy, input),
            helper_processes,
            launcher_processes(probe.backend),
        ),
        landlock_proc: (probe.backend == Backend::LinuxLandlock)
            .then_some(probe.landlock_proc)
            .flatten(),
        environment: environment_policy(policy, &input.host),
        unix_sockets,
        warnings: Vec::new(),
    };
    let ssh_agent = ssh_agent(&mut plan, &input.host);
    plan.warnings = warnings(policy, &plan, ssh_agent);
    plan
}

/// The processes the launcher of `backend` keeps at the top of the tree, which count in the
/// process budget: bwrap's monitor and PID 1; init's outer process and PID 1 (Landlock, direct,
/// and so `workspace` runs); docker-init, the container's PID 1; none under Seatbelt (the
/// command is the group leader).
fn launcher_processes(backend: Backend) -> u32 {
    match backend {
        Backend::LinuxBwrap | Backend::LinuxLandlock | Backend::DirectDedicated => 2,
        Backend::Docker => 1,
        Backend::MacosSeatbelt => 0,
    }
}

/// The plan for an explicit `workspace` request: nothing is confined (outbound network, no
/// masks, no filter, every protected path unenforced); the launcher still supervises it with the
/// budgets, tree cleanup and the environment allowlist, the way it runs `direct-dedicated`.
pub(crate) fn workspace_plan(
    policy: &EffectivePolicy,
    input: &DecisionInput,
    unix_sockets: Vec<UnixSocketGrant>,
) -> ConfinementPlan {
    let mut plan = ConfinementPlan {
        backend: Backend::DirectDedicated,
        execution_mode: ExecutionMode::Workspace,
        network: PlanNetwork::AllowOutbound,
        workspace_dir: input.host.workspace_dir.clone(),
        writable_roots: writable_roots(policy, &input.host),
        read_only_root: false,
        denied_read_paths: Vec::new(),
        protected_paths: protected_paths(policy, false),
        syscall_filter: false,
        process_tree_cleanup: true,
        budgets: budgets::effective(
            &budget_sources(policy, input),
            0,
            launcher_processes(Backend::DirectDedicated),
        ),
        landlock_proc: None,
        environment: environment_policy(policy, &input.host),
        unix_sockets,
        warnings: Vec::new(),
    };
    let ssh_agent = ssh_agent(&mut plan, &input.host);
    plan.warnings = warnings(policy, &plan, ssh_agent);
    plan
}

/// What the launcher must say before the command starts (see [`ConfinementPlan::warnings`]).
fn warnings(
    policy: &EffectivePolicy,
    plan: &ConfinementPlan,
    ssh_agent: Option<String>,
) -> Vec<String> {
    let mut lines = Vec::new();
    let backend = plan.backend.as_str();
    if plan.execution_mode == ExecutionMode::Workspace {
        lines.push(String::from(
            "running UNSANDBOXED by request (execution mode `workspace`): supervised, no isolation",
        ));
    } else if plan.backend == Backend::DirectDedicated {
        // Chosen by negotiation (an opt-in host, the GitHub Actions default): as unconfined
        // as workspace mode, and said as loudly.
        lines.push(String::from(
            "running UNCONFINED under `direct-dedicated`: no filesystem or network isolation; supervised, its process tree reaped",
        ));
    }
    for clamp in &plan.budgets.clamped {
        lines.push(format!(
            "{} {} clamped to {} by {}",
            budgets::requester(clamp.requested_by, clamp.budget),
            budgets::show(clamp.budget, clamp.requested),
            budgets::show(clamp.budget, clamp.limit),
            budgets::origin_phrase(clamp.limited_by),
        ));
    }
    if plan.network == PlanNetwork::HostLoopback {
        // `loopbackPorts` never gets here: negotiation refuses it without a bridge.
        lines.push(format!(
            "loopback-only under `{backend}` is the host's own loopback: every port of 127.0.0.1 and ::1 is reachable"
        ));
    }
    let unenforced: Vec<&str> = plan
        .protected_paths
        .iter()
        .filter(|protected| !protected.enforced)
        .map(|protected| protected.path.as_str())
        .collect();
    if !unenforced.is_empty() {
        lines.push(format!(
            "protected paths are NOT read-only under `{backend}`: {}",
            unenforced.join(", ")
        ));
    }
    // Said apart, and plainly: of all the unenforced paths only these run code later.
    let git_unenforced = policy.protected_paths.iter().any(|protected| {
        crate::protected::is_git_rule(&protected.rule)
            && plan
                .protected_paths
                .iter()
                .any(|p| p.path == protected.path && !p.enforced)
    });
    if git_unenforced && plan.execution_mode == ExecutionMode::Sandbox {
        lines.push(format!(
            "git's hooks and configuration are WRITABLE under `{backend}`: a hook or config the command plants runs unconfined at the next git command outside; add protectedPathReadOnlyMask to requiredCapabilities (or --require protectedPathReadOnlyMask) to refuse this backend"
        ));
    }
    // Said, so that a write the command makes there failing is no mystery.
    let state: Vec<&str> = policy
        .protected_paths
        .iter()
        .filter(|protected| protected.rule == crate::protected::STATE_RULE)
        .map(|protected| protected.path.as_str())
        .collect();
    if !state.is_empty() && plan.execution_mode == ExecutionMode::Sandbox {
        lines.push(format!(
            "Palisade's own state is read-only in this run (a writable root holds it; the next run trusts it): {}",
            state.join(", ")
        ));
    }
    for dropped in &policy.dropped_protected_paths {
        lines.push(format!(
            "protected path {} ({}) is writable: {}",
            crate::text::quote(&dropped.path),
            dropped.rule,
            dropped.reason
        ));
    }
    if plan.denied_read_paths.is_empty() && !policy.denied_read_paths.is_empty() {
        let paths: Vec<&str> = policy
            .denied_read_paths
            .iter()
            .map(|denied| denied.path.as_str())
            .collect();
        lines.push(format!(
            "denied read paths are READABLE under `{backend}` (no read containment): {}",
            paths.join(", ")
        ));
    }
    for dropped in &policy.dropped_denied_read_paths {
        lines.push(format!(
            "credential store {} is readable: {}",
            crate::text::quote(&dropped.path),
            dropped.reason
        ));
    }
    if !plan.unix_sockets.is_empty() {
        let paths: Vec<&str> = plan.unix_sockets.iter().map(|s| s.path.as_str()).collect();
        lines.push(format!(
            "host Unix sockets reachable by allowance: {}",
            paths.join(", ")
        ));
    }
    for socket in &plan.unix_sockets {
        if let Some(why) = &socket.grants_root {
            lines.push(format!(
                "host Unix socket {} GRANTS ROOT ({why}); allowed by the host configuration",
                crate::text::quote(&socket.path)
            ));
        }
    }
    lines.extend(ssh_agent);
    lines
}

/// `SSH_AUTH_SOCK` passes only when it names an allowed host Unix socket, whatever the
/// allowlist says: an agent the sandbox cannot reach is of no use, and one it can reach should
/// be found. Adds it to (or takes it out of) the plan's environment allowlist; the line the
/// launcher says about it, if any. `--pass-env` without it keeps it out.
fn ssh_agent(plan: &mut ConfinementPlan, host: &HostFacts) -> Option<String> {
    const NAME: &str = "SSH_AUTH_SOCK";
    let named = plan.environment.allowlist.iter().any(|e| e == NAME);
    let value = host
        .ssh_auth_sock
        .as_deref()
        .and_then(|raw| crate::paths::resolve_denied(raw, "/").ok());
    let socket = value.as_deref().and_then(|value| {
        plan.unix_sockets
            .iter()
            .find(|s| s.path == value || s.target == value)
    });
    let env = &mut plan.environment;
    match socket {
        Some(_) if env.origin == EnvironmentOrigin::Flag && !named => None,
        Some(socket) => {
            if !named {
                env.allowlist.push(String::from(NAME));
            }
            if !env.explicit_secrets.iter().any(|e| e == NAME) {
                env.explicit_secrets.push(String::from(NAME));
                env.explicit_secrets.sort();
            }
            Some(format!(
                "{NAME} passes: it names the allowed socket {}",
                crate::text::quote(&socket.path)
            ))
        }
        None if named => {
            env.allowlist.retain(|e| e != NAME);
            env.explicit_secrets.retain(|e| e != NAME);
            Some(format!(
                "{NAME} is withheld: it does not name a host Unix socket the policy allows (allowedUnixSockets)"
            ))
        }
        None => None,
    }
}

/// Every source of a budget: the policy, the launcher's flags, the envelope (task contract and
/// runtime profile) and the host's ceilings.
fn budget_sources<'a>(
    policy: &'a EffectivePolicy,
    input: &'a DecisionInput,
) -> budgets::BudgetSources<'a> {
    budgets::BudgetSources {
        policy: Some(&policy.budgets),
        flags: input.budget_flags.as_ref(),
        contract: policy.task_contract.as_ref().map(|c| &c.budgets),
        profile: input.host.runtime_profile_budgets.as_ref(),
        ceilings: input.host.budget_ceilings.as_ref(),
    }
}

/// The network as the launcher applies it: filtered egress is its own variant (the sandbox
/// keeps its own loopback and reaches out only through the proxy), whatever mode it came with;
/// `loopback-only` without a network namespace (Seatbelt) is the host's loopback itself.
fn network(policy: &EffectivePolicy, backend: Backend) -> PlanNetwork {
    let host_ports = policy.loopback_ports.clone();
    if let Some(list) = policy.filtered_egress() {
        return PlanNetwork::Filtered {
            allowlist: list.to_vec(),
            host_ports,
        };
    }
    match policy.network_mode {
        NetworkMode::None => PlanNetwork::None,
        NetworkMode::LoopbackOnly if backend == Backend::MacosSeatbelt => PlanNetwork::HostLoopback,
        NetworkMode::LoopbackOnly => PlanNetwork::LoopbackOnly { host_ports },
        NetworkMode::AllowOutbound => PlanNetwork::AllowOutbound,
    }
}

/// The workspace first (or only the places in it `--writable` names), then the host's
/// writable roots, deduplicated, in host order.
fn writable_roots(policy: &EffectivePolicy, host: &HostFacts) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let workspace = match &policy.writable_roots {
        Some(narrowed) => narrowed.iter().collect(),
        None => vec![&host.workspace_dir],
    };
    workspace
        .into_iter()
        .chain(&host.writable_roots)
        .filter(|root| seen.insert(root.as_str()))
        .cloned()
        .collect()
}

fn protected_paths(policy: &EffectivePolicy, enforced: bool) -> Vec<ProtectedPath> {
    policy
        .protected_paths
        .iter()
        .map(|protected| ProtectedPath {
            path: protected.path.clone(),
            enforced,
        })
        .collect()
}

/// `--pass-env`'s names, or the host's environment allowlist, or the built-in default list;
/// with the secret-looking exact entries.
fn environment_policy(policy: &EffectivePolicy, host: &HostFacts) -> EnvironmentPolicy {
    let (allowlist, origin) = match (&policy.pass_environment, &host.environment_allowlist) {
        (Some(names), _) => (names.clone(), EnvironmentOrigin::Flag),
        (None, Some(list)) => (list.clone(), EnvironmentOrigin::Host),
        (None, None) => (
            environment::DEFAULT_ALLOWLIST
                .iter()
                .map(|entry| (*entry).to_owned())
                .collect(),
            EnvironmentOrigin::Default,
        ),
    };
    let mut explicit_secrets: Vec<String> =
        environment::parse_all(allowlist.iter().map(String::as_str))
            .into_iter()
            .filter_map(|entry| match entry {
                Entry::Exact(name) if environment::is_secret_looking(&name) => Some(name),
                _ => None,
            })
            .collect();
    explicit_secrets.sort();
    explicit_secrets.dedup();
    EnvironmentPolicy {
        allowlist,
        explicit_secrets,
        origin,
    }
}

/// The chosen probe's capabilities, sorted and deduplicated.
pub(crate) fn provided_capabilities(probe: &BackendProbe) -> Vec<Capability> {
    let mut capabilities = probe.capabilities.clone();
    capabilities.sort();
    capabilities.dedup();
    capabilities
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;
    use crate::output::{Origin, PolicySource};

    fn input() -> DecisionInput {
        crate::test_support::input(host())
    }

    /// Direct runs allowed, and writable roots with a duplicate and the workspace among them.
    fn host() -> HostFacts {
        HostFacts {
            allow_direct_dedicated: true,
            writable_roots: vec!["/tmp/a".into(), "/w".into(), "/tmp/a".into(), "/out".into()],
            ..HostFacts::linux_cli("/root", "/w")
        }
    }

    fn policy() -> EffectivePolicy {
        EffectivePolicy {
            source: PolicySource::Declared,
            document_name: String::new(),
            taskpack_name: None,
            ignored_spec_sections: vec![],
            preferred_backends: vec![Backend::LinuxBwrap],
            preferred_backends_origin: Origin::Declared,
            network_mode: NetworkMode::LoopbackOnly,
            network_mode_origin: Origin::Declared,
            requirements: vec![],
            denied_read_paths: vec![crate::output::DeniedPath {
                path: "/root/.ssh".into(),
                origin: crate::output::DeniedOrigin::Declared,
            }],
            dropped_denied_read_paths: vec![],
            protected_paths: vec![crate::output::PolicyProtectedPath {
                path: "/w/.github".into(),
                rule: ".github".into(),
                origin: crate::output::ProtectedOrigin::BuiltIn,
            }],
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

    fn probe(backend: Backend, capabilities: &[Capability]) -> BackendProbe {
        BackendProbe {
            backend,
            available: true,
            reason: String::new(),
            capabilities: capabilities.to_vec(),
            network_modes: vec![],
            network_bridge: false,
            version: String::new(),
            limitations: vec![],
            landlock_proc: None,
        }
    }

    #[test]
    fn full_backend_gets_every_mask() {
        let plan = plan(
            &policy(),
            &input(),
            &probe(Backend::LinuxBwrap, &Capability::ALL),
            Vec::new(),
        );
        assert_eq!(plan.writable_roots, ["/w", "/tmp/a", "/out"]);
        assert!(plan.read_only_root && plan.syscall_filter && plan.process_tree_cleanup);
        assert_eq!(plan.denied_read_paths, ["/root/.ssh"]);
        assert_eq!(
            plan.protected_paths,
            [ProtectedPath {
                path: "/w/.github".into(),
                enforced: true
            }]
        );
        assert_eq!(
            plan.network,
            PlanNetwork::LoopbackOnly { host_ports: vec![] }
        );
        assert_eq!(plan.budgets.helper_processes, 0);
        assert_eq!(plan.environment.origin, EnvironmentOrigin::Default);
    }

    #[test]
    fn direct_dedicated_gets_no_masks_and_says_which_paths_it_leaves() {
        let probe = probe(Backend::DirectDedicated, &[Capability::ProcessTreeCleanup]);
        let plan = plan(&policy(), &input(), &probe, Vec::new());
        assert!(!plan.read_only_root && !plan.syscall_filter);
        assert!(plan.process_tree_cleanup);
        assert!(plan.denied_read_paths.is_empty());
        assert_eq!(
            plan.protected_paths,
            [ProtectedPath {
                path: "/w/.github".into(),
                enforced: false
            }]
        );
    }

    #[test]
    fn filtered_egress_is_its_own_network_with_a_helper_process() {
        let mut policy = policy();
        policy.network_mode = NetworkMode::AllowOutbound;
        policy.allowed_domains = Some(vec!["example.com".into()]);
        let plan = plan(
            &policy,
            &input(),
            &probe(Backend::LinuxBwrap, &Capability::ALL),
            Vec::new(),
        );
        assert_eq!(
            plan.network,
            PlanNetwork::Filtered {
                allowlist: vec!["example.com".into()],
                host_ports: vec![],
            }
        );
        assert_eq!(plan.budgets.helper_processes, 1);
    }

    #[test]
    fn provided_capabilities_are_sorted_and_unique() {
        let probe = probe(
            Backend::Docker,
            &[
                Capability::SyscallFiltering,
                Capability::FilesystemReadContainment,
                Capability::SyscallFiltering,
            ],
        );
        assert_eq!(
            provided_capabilities(&probe),
            [
                Capability::FilesystemReadContainment,
                Capability::SyscallFiltering
            ]
        );
    }

    fn agent(path: &str, target: &str) -> UnixSocketGrant {
        UnixSocketGrant {
            path: path.into(),
            target: target.into(),
            grants_root: None,
        }
    }

    #[test]
    fn ssh_auth_sock_passes_exactly_when_it_names_an_allowed_socket() {
        let bwrap = probe(Backend::LinuxBwrap, &Capability::ALL);
        let mut input = input();
        input.host.ssh_auth_sock = Some("/tmp/ssh-a/agent.1".into());
        // Allowed (through a link: the host measured where it leads): it passes, and is said.
        let sockets = vec![agent("/home/u/agent.sock", "/tmp/ssh-a/agent.1")];
        let allowed = plan(&policy(), &input, &bwrap, sockets.clone());
        assert!(
            allowed
                .environment
                .allowlist
                .iter()
                .any(|e| e == "SSH_AUTH_SOCK")
        );
        assert_eq!(allowed.environment.explicit_secrets, ["SSH_AUTH_SOCK"]);
        assert!(
            allowed
                .warnings
                .iter()
                .any(|w| w.starts_with("SSH_AUTH_SOCK passes")),
            "{:?}",
            allowed.warnings
        );
        assert!(
            allowed
                .warnings
                .iter()
                .any(|w| w == "host Unix sockets reachable by allowance: /home/u/agent.sock")
        );
        // `--pass-env` without it keeps it out.
        let mut narrowed = policy();
        narrowed.pass_environment = Some(vec!["PATH".into()]);
        let plan_narrowed = plan(&narrowed, &input, &bwrap, sockets);
        assert_eq!(plan_narrowed.environment.allowlist, ["PATH"]);
        // Named by the host, but its socket is not allowed: withheld, and said.
        input.host.environment_allowlist = Some(vec!["PATH".into(), "SSH_AUTH_SOCK".into()]);
        let withheld = plan(&policy(), &input, &bwrap, Vec::new());
        assert_eq!(withheld.environment.allowlist, ["PATH"]);
        assert!(withheld.environment.explicit_secrets.is_empty());
        assert!(
            withheld
                .warnings
                .iter()
                .any(|w| w.starts_with("SSH_AUTH_SOCK is withheld"))
        );
        // Another socket allowed: still withheld.
        let other = plan(
            &policy(),
            &input,
            &bwrap,
            vec![agent("/run/db.sock", "/run/db.sock")],
        );
        assert_eq!(other.environment.allowlist, ["PATH"]);
    }
}
