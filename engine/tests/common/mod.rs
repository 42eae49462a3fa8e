//! Builders shared by the engine's integration tests: host facts, probes, Taskpack documents,
//! and a parsed view of the report JSON.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "test helpers; not every test binary uses every helper"
)]

use palisade_engine::{
    Backend, BackendProbe, Capability, DecisionInput, HostFacts, LandlockProc, NetworkMode, Outcome,
};
use serde_json::Value;

/// The head every valid Taskpack starts with.
pub const HEAD: &str =
    "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: demo\n";

/// A Taskpack whose `spec.sandbox` block is `sandbox` (YAML, indented by the caller's choice).
pub fn taskpack(sandbox_body: &str) -> String {
    let mut doc = format!("{HEAD}spec:\n  sandbox:\n");
    for line in sandbox_body.lines() {
        doc.push_str("    ");
        doc.push_str(line);
        doc.push('\n');
    }
    doc
}

pub fn host() -> HostFacts {
    HostFacts {
        writable_roots: vec!["/tmp/palisade-task".into()],
        default_backend_order: vec![Backend::LinuxBwrap, Backend::LinuxLandlock, Backend::Docker],
        ..HostFacts::linux_cli("/home/dev", "/home/dev/proj")
    }
}

/// A probe as a Linux host like this one would record it.
pub fn probe(backend: Backend, available: bool) -> BackendProbe {
    let (capabilities, modes): (Vec<Capability>, Vec<NetworkMode>) = match backend {
        Backend::LinuxBwrap => (Capability::ALL.to_vec(), NetworkMode::ALL.to_vec()),
        Backend::LinuxLandlock => (
            vec![
                Capability::FilesystemReadContainment,
                Capability::FilesystemWriteContainment,
                Capability::ProtectedPathReadOnlyMask,
                Capability::NetworkIsolation,
                Capability::ProcessTreeCleanup,
            ],
            vec![NetworkMode::None, NetworkMode::AllowOutbound],
        ),
        Backend::DirectDedicated => (
            vec![Capability::ProcessTreeCleanup],
            vec![NetworkMode::AllowOutbound],
        ),
        Backend::Docker | Backend::MacosSeatbelt => {
            (Capability::ALL.to_vec(), NetworkMode::ALL.to_vec())
        }
    };
    BackendProbe {
        backend,
        available,
        reason: if available {
            format!("{} trial sandbox ran", backend.as_str())
        } else {
            String::from("not installed")
        },
        capabilities,
        network_modes: modes,
        network_bridge: false,
        version: String::new(),
        limitations: if backend == Backend::LinuxLandlock {
            vec![String::from("loopback-only needs a network namespace")]
        } else {
            Vec::new()
        },
        landlock_proc: (backend == Backend::LinuxLandlock).then_some(LandlockProc::Own),
    }
}

/// Probes for this host: bwrap and Landlock available, the rest not.
pub fn linux_probes() -> Vec<BackendProbe> {
    vec![
        probe(Backend::MacosSeatbelt, false),
        probe(Backend::LinuxBwrap, true),
        probe(Backend::LinuxLandlock, true),
        probe(Backend::Docker, false),
        probe(Backend::DirectDedicated, true),
    ]
}

pub fn input(document: Option<&str>) -> DecisionInput {
    DecisionInput {
        document: document.map(str::to_owned),
        document_name: ".loopwright/taskpack.yaml".into(),
        host: host(),
        probes: linux_probes(),
        narrow_allowed_domains: None,
        execution_mode: None,
        budget_flags: None,
        task_contract: None,
        policy_flags: None,
    }
}

/// The report JSON of an outcome, parsed.
pub fn report(outcome: &Outcome) -> Value {
    serde_json::from_str(&outcome.canonical_json).expect("canonical json parses")
}

/// The refusal code of a report, or `decision`.
pub fn code(report: &Value) -> String {
    match report.get("code") {
        Some(Value::String(code)) => code.clone(),
        _ => String::from("decision"),
    }
}

/// The `path` of every listed error.
pub fn error_paths(report: &Value) -> Vec<String> {
    report
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .map(|e| e["path"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}
