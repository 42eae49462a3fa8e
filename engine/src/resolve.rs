//! Resolution: from a validated Taskpack (or none) and the host facts to the effective policy,
//! with the origin of every setting and requirement.
//!
//! Why requirements carry origins: "no silent downgrade" is only checkable if the decision says
//! which guarantees the author asked for, which the engine added because another setting needs
//! them (a network mode needs `networkIsolation`, denied paths need `filesystemReadContainment`),
//! and which came from a default.

use std::collections::BTreeMap;

use crate::domains::DomainEntry;
use crate::model::{Backend, Capability, DecisionInput, HostFacts, NetworkMode};
use crate::output::{
    DeniedOrigin, DeniedPath, DroppedDeniedPath, EffectivePolicy, Origin, PolicySource, Requirement,
};
use crate::paths;
use crate::policy::Taskpack;
use crate::sandbox::{self, SandboxSpec};
use crate::text::{self, Errors};

/// Credential stores every policy denies, on every backend with read containment (absolute or
/// `~/`-relative, as a policy spells them). A host may exempt one only by naming it in its
/// configuration, and the decision lists the exemption.
pub const BUILT_IN_DENIED_READ_PATHS: [&str; 13] = [
    "~/.ssh",
    "~/.aws",
    "~/.config/gh",
    "~/.gnupg",
    "~/.netrc",
    "~/.git-credentials",
    "~/.docker/config.json",
    "~/.kube",
    "~/.config/gcloud",
    "~/.azure",
    "~/.npmrc",
    "~/.pypirc",
    "~/.cargo/credentials.toml",
];

/// The fixed order for an omitted policy outside GitHub Actions.
const OMITTED_DEFAULT_BACKENDS: [Backend; 3] = [
    Backend::MacosSeatbelt,
    Backend::LinuxBwrap,
    Backend::LinuxLandlock,
];

/// The default requirements for an omitted policy outside GitHub Actions.
const OMITTED_DEFAULT_REQUIREMENTS: [Capability; 3] = [
    Capability::FilesystemWriteContainment,
    Capability::NetworkIsolation,
    Capability::ProcessTreeCleanup,
];

/// The effective policy for a valid input.
pub(crate) fn resolve(input: &DecisionInput, taskpack: Option<&Taskpack>) -> EffectivePolicy {
    let (protected_paths, dropped_protected_paths) = crate::protected::resolve(&input.host);
    let mut policy = EffectivePolicy {
        source: PolicySource::OmittedDefault,
        document_name: input.document_name.clone(),
        taskpack_name: taskpack.map(|t| t.name.clone()),
        ignored_spec_sections: taskpack
            .map(|t| t.ignored_spec_sections.clone())
            .unwrap_or_default(),
        preferred_backends: OMITTED_DEFAULT_BACKENDS.to_vec(),
        preferred_backends_origin: Origin::Default,
        network_mode: NetworkMode::None,
        network_mode_origin: Origin::Default,
        requirements: Vec::new(),
        denied_read_paths: Vec::new(),
        dropped_denied_read_paths: Vec::new(),
        protected_paths,
        dropped_protected_paths,
        allow_dedicated_direct_override: false,
        budgets: taskpack.map(|t| t.budgets.clone()).unwrap_or_default(),
        task_contract: None,
        loopback_ports: Vec::new(),
        allowed_domains: None,
        allowed_domains_origin: None,
        writable_roots: None,
        pass_environment: None,
        allowed_unix_sockets: Vec::new(),
        allowed_unix_sockets_origin: None,
        loopback_ports_origin: None,
    };
    match taskpack.and_then(|t| t.sandbox.as_ref()) {
        Some(sandbox) => apply_declared(&mut policy, sandbox, &input.host.default_backend_order),
        None if input.host.github_actions => {
            policy.source = PolicySource::GithubActionsDefault;
            policy.preferred_backends = vec![Backend::DirectDedicated];
            policy.network_mode = NetworkMode::AllowOutbound;
            policy.requirements = vec![requirement(
                Capability::ProcessTreeCleanup,
                Origin::Default,
                "github actions default",
            )];
            policy.allow_dedicated_direct_override = true;
        }
        None => {
            policy.requirements = OMITTED_DEFAULT_REQUIREMENTS
                .iter()
                .map(|&capability| {
                    requirement(
                        capability,
                        Origin::Default,
                        "default for an omitted sandbox policy",
                    )
                })
                .collect();
        }
    };
    add_host_and_built_in_denied(&mut policy, &input.host);
    policy
}

/// Adds the host's denied read paths and the built-in credential stores to the policy's own
/// (already there), each once: a path the policy names keeps origin `declared`. A built-in path
/// the host exempts, or that contains the workspace or a writable root (the task could not
/// run), is listed as dropped with the reason. Host entries were validated with the facts.
fn add_host_and_built_in_denied(policy: &mut EffectivePolicy, host: &HostFacts) {
    let mut all: BTreeMap<String, DeniedOrigin> = policy
        .denied_read_paths
        .iter()
        .map(|d| (d.path.clone(), d.origin))
        .collect();
    for raw in host.denied_read_paths.iter().flatten() {
        if let Ok(path) = paths::resolve_denied(raw, &host.home_dir) {
            all.entry(path).or_insert(DeniedOrigin::Host);
        }
    }
    let exempt = host.exempt_denied_read_paths.as_deref().unwrap_or_default();
    for raw in BUILT_IN_DENIED_READ_PATHS {
        let Ok(path) = paths::resolve_denied(raw, &host.home_dir) else {
            continue;
        };
        // Denied already (the policy or the host names it): it stays denied, whatever else.
        let dropped = if all.contains_key(&path) {
            None
        } else if exempt.iter().any(|e| e == raw) {
            Some(String::from("exempted by the host configuration"))
        } else {
            sandbox::blocked_root(&path, host).map(|root| format!("it contains {root}"))
        };
        match dropped {
            Some(reason) => policy
                .dropped_denied_read_paths
                .push(DroppedDeniedPath { path, reason }),
            None => {
                all.entry(path).or_insert(DeniedOrigin::BuiltIn);
            }
        }
    }
    // Palisade's signing keys: denied whatever the host configuration exempts.
    for path in host.key_paths.iter().flatten() {
        all.entry(path.clone()).or_insert(DeniedOrigin::BuiltIn);
    }
    policy.denied_read_paths = all
        .into_iter()
        .map(|(path, origin)| DeniedPath { path, origin })
        .collect();
}

/// Applies a declared `spec.sandbox`: declared values, host and contract defaults, implications.
fn apply_declared(policy: &mut EffectivePolicy, sandbox: &SandboxSpec, host_order: &[Backend]) {
    policy.source = PolicySource::Declared;
    (policy.preferred_backends, policy.preferred_backends_origin) =
        match &sandbox.preferred_backends {
            Some(declared) => (declared.clone(), Origin::Declared),
            None => (host_order.to_vec(), Origin::Host),
        };
    (policy.network_mode, policy.network_mode_origin) =
        match (sandbox.network_mode, &sandbox.allowed_domains) {
            (Some(mode), _) => (mode, Origin::Declared),
            // `*` or named domains without a mode: outbound traffic (filtered unless `*`).
            (None, Some(list)) if !list.is_empty() => (NetworkMode::AllowOutbound, Origin::Implied),
            (None, _) => (NetworkMode::None, Origin::Default),
        };
    if let Some(list) = &sandbox.allowed_domains {
        policy.allowed_domains = Some(list.clone());
        policy.allowed_domains_origin = Some(Origin::Declared);
    }
    policy.loopback_ports = sandbox.loopback_ports.clone();
    if !policy.loopback_ports.is_empty() {
        policy.loopback_ports_origin = Some(Origin::Declared);
    }
    if let Some(sockets) = &sandbox.allowed_unix_sockets {
        policy.allowed_unix_sockets = sockets.clone();
        policy.allowed_unix_sockets_origin = Some(Origin::Declared);
    }
    policy.denied_read_paths = sandbox
        .denied_read_paths
        .iter()
        .map(|path| DeniedPath {
            path: path.clone(),
            origin: DeniedOrigin::Declared,
        })
        .collect();

    let mut requirements: Vec<Requirement> = sandbox
        .required_capabilities
        .iter()
        .map(|&capability| {
            requirement(
                capability,
                Origin::Declared,
                "declared in spec.sandbox.requiredCapabilities",
            )
        })
        .collect();
    let mut imply = |capability: Capability, reason: String| {
        // A requirement both declared and implied is labelled `declared`.
        if !requirements.iter().any(|r| r.capability == capability) {
            requirements.push(requirement(capability, Origin::Implied, &reason));
        }
    };
    if policy.network_mode != NetworkMode::AllowOutbound {
        imply(
            Capability::NetworkIsolation,
            format!("implied by networkMode `{}`", policy.network_mode.as_str()),
        );
    }
    let denied = policy.denied_read_paths.len();
    if denied > 0 {
        imply(
            Capability::FilesystemReadContainment,
            format!(
                "implied by {}",
                crate::text::count(denied, "deniedReadPaths entry", "deniedReadPaths entries")
            ),
        );
    }
    requirements.sort_by_key(|r| r.capability);
    policy.requirements = requirements;
}

/// Applies the launcher's `narrowAllowedDomains`, which may only narrow what the policy
/// allows, then adds the requirements filtered egress, Palisade's state and its keys imply.
pub(crate) fn narrow_and_imply(
    policy: &mut EffectivePolicy,
    narrow: Option<&[String]>,
    host: &HostFacts,
) -> Result<(), Errors> {
    if let Some(raw) = narrow {
        narrow_domains(policy, raw, NARROW_PATH, Origin::Launcher)?;
    }
    imply_filtered(policy);
    imply_state(policy);
    imply_keys(policy, host);
    Ok(())
}

/// A signing key the command could read lets it sign forged records as this host: only a
/// backend that can deny reads may run while one exists.
fn imply_keys(policy: &mut EffectivePolicy, host: &HostFacts) {
    if let Some(first) = host.key_paths.iter().flatten().next() {
        add_requirement(
            policy,
            Capability::FilesystemReadContainment,
            Origin::Implied,
            &format!("implied by Palisade's audit-signing key in {first}"),
        );
    }
}

/// Palisade's own state inside a writable root can be kept from the command only by masking
/// it: only a backend that masks may run (never silently one that would leave it writable).
fn imply_state(policy: &mut EffectivePolicy) {
    let state: Vec<&str> = policy
        .protected_paths
        .iter()
        .filter(|p| p.rule == crate::protected::STATE_RULE)
        .map(|p| p.path.as_str())
        .collect();
    if let Some(first) = state.first() {
        let reason = format!(
            "implied by Palisade's own state inside a writable root ({}{})",
            first,
            match state.len() {
                1 => String::new(),
                n => format!(" and {} more", n - 1),
            }
        );
        add_requirement(
            policy,
            Capability::ProtectedPathReadOnlyMask,
            Origin::Implied,
            &reason,
        );
    }
}

/// Narrows the policy's allowlist to `raw` (given at `path`), recorded with `origin`. Every
/// entry that would widen the policy is reported at its own path.
pub(crate) fn narrow_domains(
    policy: &mut EffectivePolicy,
    raw: &[String],
    path: &str,
    origin: Origin,
) -> Result<(), Errors> {
    let mut errors = Errors::default();
    let items = raw
        .iter()
        .enumerate()
        .map(|(index, entry)| (text::index_path(path, index), Some(entry.as_str())))
        .collect();
    let Some(list) = sandbox::entry_list(items, path, &mut errors) else {
        return Err(errors);
    };
    // What the policy allows: `None` = everything.
    let allowed: Option<Vec<DomainEntry>> = match &policy.allowed_domains {
        Some(entries) => Some(
            entries
                .iter()
                .filter_map(|e| DomainEntry::parse(e).ok())
                .collect(),
        ),
        None if policy.network_mode == NetworkMode::AllowOutbound => None,
        None => Some(Vec::new()),
    };
    if let Some(allowed) = &allowed {
        let everything = allowed.iter().any(DomainEntry::is_everything);
        // Reported at the index the launcher gave (the canonical list is sorted).
        for (index, entry) in raw.iter().enumerate() {
            let covered = everything
                || DomainEntry::parse(entry)
                    .is_ok_and(|parsed| allowed.iter().any(|a| a.covers(&parsed)));
            if !covered {
                let why = if allowed.is_empty() {
                    format!(
                        "the policy allows no outbound traffic (networkMode `{}`)",
                        policy.network_mode.as_str()
                    )
                } else {
                    String::from("no entry of the policy's allowedDomains covers it")
                };
                errors.push(
                    text::index_path(path, index),
                    format!(
                        "{} would widen the policy: {why}; --allow-domain may only narrow it",
                        text::quote(entry)
                    ),
                );
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    policy.allowed_domains = Some(list);
    policy.allowed_domains_origin = Some(origin);
    Ok(())
}

/// Filtered egress needs a network of the sandbox's own: `networkIsolation`, implied.
fn imply_filtered(policy: &mut EffectivePolicy) {
    if policy.filtered_egress().is_some() {
        add_requirement(
            policy,
            Capability::NetworkIsolation,
            Origin::Implied,
            "implied by allowedDomains (egress only through the filtering proxy)",
        );
    }
}

/// Adds a requirement unless the capability is required already (whatever its origin), keeping
/// the list sorted.
pub(crate) fn add_requirement(
    policy: &mut EffectivePolicy,
    capability: Capability,
    origin: Origin,
    reason: &str,
) {
    if !policy
        .requirements
        .iter()
        .any(|r| r.capability == capability)
    {
        policy
            .requirements
            .push(requirement(capability, origin, reason));
        policy.requirements.sort_by_key(|r| r.capability);
    }
}

/// The field path of the launcher's narrowing list in errors.
const NARROW_PATH: &str = "narrowAllowedDomains";

fn requirement(capability: Capability, origin: Origin, reason: &str) -> Requirement {
    Requirement {
        capability,
        origin,
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;
    use crate::model::HostFacts;

    fn input(github_actions: bool) -> DecisionInput {
        DecisionInput {
            document: None,
            document_name: "taskpack.yaml".into(),
            host: HostFacts {
                github_actions,
                default_backend_order: vec![Backend::LinuxLandlock, Backend::Docker],
                ..HostFacts::linux_cli("/root", "/w")
            },
            probes: vec![],
            narrow_allowed_domains: None,
            execution_mode: None,
            budget_flags: None,
            task_contract: None,
            policy_flags: None,
        }
    }

    fn taskpack(sandbox: Option<SandboxSpec>) -> Taskpack {
        Taskpack {
            name: "t".into(),
            ignored_spec_sections: vec!["steps".into()],
            sandbox,
            budgets: Default::default(),
        }
    }

    fn summary(policy: &EffectivePolicy) -> Vec<(Capability, Origin)> {
        policy
            .requirements
            .iter()
            .map(|r| (r.capability, r.origin))
            .collect()
    }

    #[test]
    fn omitted_outside_actions_is_fail_closed() {
        let policy = resolve(&input(false), None);
        assert_eq!(policy.source, PolicySource::OmittedDefault);
        assert_eq!(policy.preferred_backends, OMITTED_DEFAULT_BACKENDS);
        assert_eq!(policy.network_mode, NetworkMode::None);
        assert_eq!(
            summary(&policy),
            [
                (Capability::FilesystemWriteContainment, Origin::Default),
                (Capability::NetworkIsolation, Origin::Default),
                (Capability::ProcessTreeCleanup, Origin::Default),
            ]
        );
        let protected: Vec<&str> = policy
            .protected_paths
            .iter()
            .map(|p| p.path.as_str())
            .collect();
        assert_eq!(
            protected,
            [
                "/w/.github",
                "/w/.loopwright/policies",
                "/w/AGENTS.md",
                "/w/CLAUDE.md",
                "/w/.git/hooks",
                "/w/.git/config",
                "/w/.git/config.worktree",
            ]
        );
        assert_eq!(policy.taskpack_name, None);
    }

    #[test]
    fn omitted_under_actions_is_direct_dedicated() {
        let policy = resolve(&input(true), Some(&taskpack(None)));
        assert_eq!(policy.source, PolicySource::GithubActionsDefault);
        assert_eq!(policy.preferred_backends, [Backend::DirectDedicated]);
        assert_eq!(policy.network_mode, NetworkMode::AllowOutbound);
        assert_eq!(
            summary(&policy),
            [(Capability::ProcessTreeCleanup, Origin::Default)]
        );
        assert!(policy.allow_dedicated_direct_override);
        assert_eq!(policy.taskpack_name.as_deref(), Some("t"));
        assert_eq!(policy.ignored_spec_sections, ["steps"]);
    }

    #[test]
    fn declared_defaults_come_from_host_and_contract() {
        let policy = resolve(&input(true), Some(&taskpack(Some(SandboxSpec::default()))));
        assert_eq!(policy.source, PolicySource::Declared);
        assert_eq!(
            policy.preferred_backends,
            [Backend::LinuxLandlock, Backend::Docker]
        );
        assert_eq!(policy.preferred_backends_origin, Origin::Host);
        assert_eq!(policy.network_mode_origin, Origin::Default);
        assert_eq!(
            summary(&policy),
            [(Capability::NetworkIsolation, Origin::Implied)]
        );
        assert_eq!(
            policy.requirements[0].reason,
            "implied by networkMode `none`"
        );
        assert!(!policy.allow_dedicated_direct_override);
    }

    #[test]
    fn declared_wins_over_implied_and_requirements_are_sorted() {
        let sandbox = SandboxSpec {
            preferred_backends: Some(vec![Backend::Docker]),
            network_mode: Some(NetworkMode::LoopbackOnly),
            required_capabilities: vec![Capability::SyscallFiltering, Capability::NetworkIsolation],
            denied_read_paths: vec!["/a".into(), "/b".into()],
            allowed_domains: None,
            loopback_ports: vec![],
            allowed_unix_sockets: None,
        };
        let policy = resolve(&input(false), Some(&taskpack(Some(sandbox))));
        assert_eq!(
            summary(&policy),
            [
                (Capability::FilesystemReadContainment, Origin::Implied),
                (Capability::NetworkIsolation, Origin::Declared),
                (Capability::SyscallFiltering, Origin::Declared),
            ]
        );
        assert_eq!(
            policy.requirements[0].reason,
            "implied by 2 deniedReadPaths entries"
        );
        assert_eq!(policy.preferred_backends_origin, Origin::Declared);
    }

    #[test]
    fn allow_outbound_implies_nothing() {
        let sandbox = SandboxSpec {
            network_mode: Some(NetworkMode::AllowOutbound),
            ..SandboxSpec::default()
        };
        let policy = resolve(&input(false), Some(&taskpack(Some(sandbox))));
        assert!(policy.requirements.is_empty());
    }
}
