//! What the unit tests share: one Linux host and a decision input around it, each test
//! changing only what it is about.

use crate::model::{Backend, DecisionInput, HostFacts, SessionKind};

/// A Linux CLI host with home `home` and workspace `workspace`, bwrap first, and nothing else
/// configured.
pub(crate) fn linux_host(home: &str, workspace: &str) -> HostFacts {
    HostFacts {
        os: "linux".into(),
        arch: "x86_64".into(),
        session_kind: SessionKind::Cli,
        github_actions: false,
        allow_direct_dedicated: false,
        home_dir: home.into(),
        workspace_dir: workspace.into(),
        writable_roots: vec![],
        default_backend_order: vec![Backend::LinuxBwrap],
        environment_allowlist: None,
        allow_workspace_mode: None,
        budget_ceilings: None,
        denied_read_paths: None,
        exempt_denied_read_paths: None,
        allow_home_writable: None,
        runtime_profile_budgets: None,
        loopback_ports: None,
    }
}

/// An input on `host` with no document, no probes and no flags.
pub(crate) fn input(host: HostFacts) -> DecisionInput {
    DecisionInput {
        document: None,
        document_name: String::new(),
        host,
        probes: vec![],
        narrow_allowed_domains: None,
        execution_mode: None,
        budget_flags: None,
        task_contract: None,
        policy_flags: None,
    }
}
