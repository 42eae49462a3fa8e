//! The confinement plan: what the shim must enforce for the chosen backend.
//!
//! Why the plan is driven by the chosen probe's capabilities rather than by the requirements:
//! a backend applies every protection it can, not only the required ones (built-in protected
//! paths are masked by any backend with `protectedPathReadOnlyMask`, without requiring it), and
//! it must never be asked for one it cannot honestly enforce (an opted-in `direct-dedicated` gets
//! empty masks, not masks it would silently ignore).

use std::collections::BTreeSet;

use crate::model::{BackendProbe, Capability, HostFacts};
use crate::output::{ConfinementPlan, EffectivePolicy};

/// The plan for `probe`'s backend under `policy`.
pub(crate) fn plan(
    policy: &EffectivePolicy,
    host: &HostFacts,
    probe: &BackendProbe,
) -> ConfinementPlan {
    let has = |capability: Capability| probe.capabilities.contains(&capability);
    let mut seen = BTreeSet::new();
    let writable_roots = std::iter::once(&host.workspace_dir)
        .chain(&host.writable_roots)
        .filter(|root| seen.insert(root.as_str()))
        .cloned()
        .collect();
    ConfinementPlan {
        backend: probe.backend,
        network_mode: policy.network_mode,
        workspace_dir: host.workspace_dir.clone(),
        writable_roots,
        read_only_root: has(Capability::FilesystemWriteContainment),
        denied_read_paths: if has(Capability::FilesystemReadContainment) {
            policy.denied_read_paths.clone()
        } else {
            Vec::new()
        },
        protected_paths: if has(Capability::ProtectedPathReadOnlyMask) {
            policy.protected_paths.clone()
        } else {
            Vec::new()
        },
        syscall_filter: has(Capability::SyscallFiltering),
        process_tree_cleanup: has(Capability::ProcessTreeCleanup),
        budgets: policy.budgets.clone(),
        domain_allowlist: policy.filtered_egress().map(<[String]>::to_vec),
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
    use crate::model::{Backend, NetworkMode, SessionKind};
    use crate::output::{Origin, PolicySource};

    fn host() -> HostFacts {
        HostFacts {
            os: "linux".into(),
            arch: "x86_64".into(),
            session_kind: SessionKind::Cli,
            github_actions: false,
            allow_direct_dedicated: true,
            home_dir: "/root".into(),
            workspace_dir: "/w".into(),
            writable_roots: vec!["/tmp/a".into(), "/w".into(), "/tmp/a".into(), "/out".into()],
            default_backend_order: vec![Backend::LinuxBwrap],
            environment_allowlist: None,
            allow_workspace_mode: None,
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
            denied_read_paths: vec!["/root/.ssh".into()],
            protected_paths: vec!["/w/.github".into()],
            allow_dedicated_direct_override: false,
            budgets: Default::default(),
            allowed_domains: None,
            allowed_domains_origin: None,
        }
    }

    fn probe(backend: Backend, capabilities: &[Capability]) -> BackendProbe {
        BackendProbe {
            backend,
            available: true,
            reason: String::new(),
            capabilities: capabilities.to_vec(),
            network_modes: vec![],
            domain_filtering: false,
            version: String::new(),
            limitations: vec![],
        }
    }

    #[test]
    fn full_backend_gets_every_mask() {
        let plan = plan(
            &policy(),
            &host(),
            &probe(Backend::LinuxBwrap, &Capability::ALL),
        );
        assert_eq!(plan.writable_roots, ["/w", "/tmp/a", "/out"]);
        assert!(plan.read_only_root && plan.syscall_filter && plan.process_tree_cleanup);
        assert_eq!(plan.denied_read_paths, ["/root/.ssh"]);
        assert_eq!(plan.protected_paths, ["/w/.github"]);
        assert_eq!(plan.network_mode, NetworkMode::LoopbackOnly);
    }

    #[test]
    fn direct_dedicated_gets_no_masks() {
        let probe = probe(Backend::DirectDedicated, &[Capability::ProcessTreeCleanup]);
        let plan = plan(&policy(), &host(), &probe);
        assert!(!plan.read_only_root && !plan.syscall_filter);
        assert!(plan.process_tree_cleanup);
        assert!(plan.denied_read_paths.is_empty() && plan.protected_paths.is_empty());
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
}
