//! Properties over random policies, hosts and probe sets, checked against an independent oracle
//! written from DESIGN.md rather than from the engine's code:
//! - a selected backend is available, not blocked, and provides every required capability
//!   (and the network mode, when isolation is required), and is the first such candidate;
//! - the refusal is `SANDBOX_BACKEND_UNAVAILABLE` exactly when no candidate was available and
//!   unblocked, `SANDBOX_CAPABILITY_INSUFFICIENT` exactly when some were but none sufficed;
//! - the same input gives the same bytes, through `decide` and `decide_json` alike.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::collections::BTreeSet;

use common::{HEAD, code, report};
use palisade_engine::output::sha256_hex;
use palisade_engine::{
    Backend, BackendProbe, Capability, DecisionInput, HostFacts, NetworkMode, SessionKind, decide,
    decide_json,
};
use proptest::prelude::*;
use proptest::sample::subsequence;
use proptest::test_runner::FileFailurePersistence;

/// A random `spec.sandbox` (every field optional).
#[derive(Clone, Debug)]
struct Sandbox {
    backends: Option<Vec<Backend>>,
    mode: Option<NetworkMode>,
    capabilities: Option<Vec<Capability>>,
    denied: Option<Vec<&'static str>>,
}

/// What the document looks like.
#[derive(Clone, Debug)]
enum Document {
    None,
    NoSpec,
    Sandbox(Sandbox),
    /// A sandbox plus a junk field: must be refused as invalid, never panic.
    Junk(Sandbox),
}

const DENIED_POOL: [&str; 6] = [
    "~/.ssh",
    "~/.aws/",
    "/etc/shadow",
    "/var/lib//secret/.",
    "/home/dev/proj/private",
    "~/.ssh/",
];

fn backends(min: usize) -> impl Strategy<Value = Vec<Backend>> {
    subsequence(Backend::ALL.to_vec(), min..=5).prop_shuffle()
}

fn mode() -> impl Strategy<Value = NetworkMode> {
    prop::sample::select(NetworkMode::ALL.to_vec())
}

fn sandbox() -> impl Strategy<Value = Sandbox> {
    (
        prop::option::of(backends(1)),
        prop::option::of(mode()),
        prop::option::of(subsequence(Capability::ALL.to_vec(), 0..=6).prop_shuffle()),
        prop::option::of(subsequence(DENIED_POOL.to_vec(), 0..=6)),
    )
        .prop_map(|(backends, mode, capabilities, denied)| Sandbox {
            backends,
            mode,
            capabilities,
            denied,
        })
}

fn document() -> impl Strategy<Value = Document> {
    prop_oneof![
        1 => Just(Document::None),
        1 => Just(Document::NoSpec),
        6 => sandbox().prop_map(Document::Sandbox),
        1 => sandbox().prop_map(Document::Junk),
    ]
}

fn probe() -> impl Strategy<Value = (bool, Vec<Capability>, Vec<NetworkMode>)> {
    (
        prop::bool::weighted(0.7),
        subsequence(Capability::ALL.to_vec(), 0..=6).prop_shuffle(),
        subsequence(NetworkMode::ALL.to_vec(), 0..=3),
    )
}

fn host() -> impl Strategy<Value = HostFacts> {
    (
        prop::sample::select(vec![
            SessionKind::Turnkey,
            SessionKind::Cli,
            SessionKind::Managed,
        ]),
        any::<bool>(),
        any::<bool>(),
        backends(1),
    )
        .prop_map(
            |(session_kind, github_actions, allow_direct_dedicated, order)| {
                let mut host = common::host();
                host.session_kind = session_kind;
                host.github_actions = github_actions;
                host.allow_direct_dedicated = allow_direct_dedicated;
                host.default_backend_order = order;
                host
            },
        )
}

fn decision_input() -> impl Strategy<Value = (Document, DecisionInput)> {
    (
        document(),
        host(),
        prop::collection::vec(prop::option::of(probe()), 5),
    )
        .prop_map(|(document, host, probes)| {
            let probes = Backend::ALL
                .iter()
                .zip(probes)
                .filter_map(|(&backend, probe)| {
                    probe.map(|(available, capabilities, network_modes)| BackendProbe {
                        backend,
                        available,
                        reason: if available {
                            String::from("ok")
                        } else {
                            String::from("not installed")
                        },
                        capabilities,
                        network_modes,
                        network_bridge: false,
                        version: String::new(),
                        limitations: Vec::new(),
                        landlock_proc: None,
                    })
                })
                .collect();
            let input = DecisionInput {
                document: render(&document),
                document_name: String::from("taskpack.yaml"),
                host,
                probes,
                narrow_allowed_domains: None,
                execution_mode: None,
                budget_flags: None,
                task_contract: None,
                policy_flags: None,
            };
            (document, input)
        })
}

fn yaml_list<T>(items: &[T], name: impl Fn(&T) -> String) -> String {
    let names: Vec<String> = items
        .iter()
        .map(|item| format!("'{}'", name(item)))
        .collect();
    format!("[{}]", names.join(", "))
}

fn render(document: &Document) -> Option<String> {
    let (sandbox, junk) = match document {
        Document::None => return None,
        Document::NoSpec => return Some(format!("{HEAD}spec:\n  steps: []\n")),
        Document::Sandbox(sandbox) => (sandbox, false),
        Document::Junk(sandbox) => (sandbox, true),
    };
    let mut doc = format!("{HEAD}spec:\n  sandbox:\n    {{}}\n");
    let mut fields = Vec::new();
    if let Some(backends) = &sandbox.backends {
        fields.push(format!(
            "preferredBackends: {}",
            yaml_list(backends, |b| b.as_str().to_owned())
        ));
    }
    if let Some(mode) = sandbox.mode {
        fields.push(format!("networkMode: {}", mode.as_str()));
    }
    if let Some(capabilities) = &sandbox.capabilities {
        fields.push(format!(
            "requiredCapabilities: {}",
            yaml_list(capabilities, |c| c.as_str().to_owned())
        ));
    }
    if let Some(denied) = &sandbox.denied {
        fields.push(format!(
            "deniedReadPaths: {}",
            yaml_list(denied, |p| (*p).to_owned())
        ));
    }
    if junk {
        fields.push(String::from("allowEverything: true"));
    }
    if !fields.is_empty() {
        doc = format!("{HEAD}spec:\n  sandbox:\n");
        for field in fields {
            doc.push_str(&format!("    {field}\n"));
        }
    }
    Some(doc)
}

/// The oracle's view of the effective policy: candidates, requirements, mode, override.
struct Expected {
    candidates: Vec<Backend>,
    requirements: BTreeSet<Capability>,
    mode: NetworkMode,
    override_direct: bool,
}

fn expected(document: &Document, host: &HostFacts) -> Option<Expected> {
    let sandbox = match document {
        Document::Junk(_) => return None,
        Document::Sandbox(sandbox) => Some(sandbox),
        Document::None | Document::NoSpec => None,
    };
    Some(match sandbox {
        Some(sandbox) => {
            let mode = sandbox.mode.unwrap_or(NetworkMode::None);
            let mut requirements: BTreeSet<Capability> =
                sandbox.capabilities.iter().flatten().copied().collect();
            if mode != NetworkMode::AllowOutbound {
                requirements.insert(Capability::NetworkIsolation);
            }
            if sandbox.denied.as_ref().is_some_and(|d| !d.is_empty()) {
                requirements.insert(Capability::FilesystemReadContainment);
            }
            Expected {
                candidates: sandbox
                    .backends
                    .clone()
                    .unwrap_or_else(|| host.default_backend_order.clone()),
                requirements,
                mode,
                override_direct: false,
            }
        }
        None if host.github_actions => Expected {
            candidates: vec![Backend::DirectDedicated],
            requirements: [Capability::ProcessTreeCleanup].into(),
            mode: NetworkMode::AllowOutbound,
            override_direct: true,
        },
        None => Expected {
            candidates: vec![
                Backend::MacosSeatbelt,
                Backend::LinuxBwrap,
                Backend::LinuxLandlock,
            ],
            requirements: [
                Capability::FilesystemWriteContainment,
                Capability::NetworkIsolation,
                Capability::ProcessTreeCleanup,
            ]
            .into(),
            mode: NetworkMode::None,
            override_direct: false,
        },
    })
}

fn probe_of(input: &DecisionInput, backend: Backend) -> Option<&BackendProbe> {
    input.probes.iter().find(|p| p.backend == backend)
}

fn usable(input: &DecisionInput, expected: &Expected, backend: Backend) -> bool {
    let Some(probe) = probe_of(input, backend) else {
        return false;
    };
    let blocked = match backend {
        Backend::Docker => input.host.session_kind == SessionKind::Turnkey,
        Backend::DirectDedicated => !input.host.allow_direct_dedicated && !expected.override_direct,
        _ => false,
    };
    probe.available && !blocked
}

fn sufficient(input: &DecisionInput, expected: &Expected, backend: Backend) -> bool {
    let Some(probe) = probe_of(input, backend) else {
        return false;
    };
    let has_all = expected
        .requirements
        .iter()
        .all(|c| probe.capabilities.contains(c));
    // The probe must list the policy's network mode whatever the requirements.
    let mode_ok = probe.network_modes.contains(&expected.mode);
    has_all && mode_ok
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 400,
        // Failures are saved next to this file (`properties.proptest-regressions`) and committed, so they rerun first.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn decisions_follow_the_oracle((document, input) in decision_input()) {
        let outcome = decide(&input);
        let r = report(&outcome);
        let code = code(&r);
        let Some(expected) = expected(&document, &input.host) else {
            prop_assert_eq!(code, "SANDBOX_POLICY_INVALID");
            return Ok(());
        };
        let winner = expected
            .candidates
            .iter()
            .copied()
            .find(|&b| usable(&input, &expected, b) && sufficient(&input, &expected, b));
        let any_usable = expected.candidates.iter().any(|&b| usable(&input, &expected, b));
        match winner {
            Some(backend) => {
                prop_assert_eq!(code, "decision");
                prop_assert_eq!(r["backend"].as_str(), Some(backend.as_str()));
                prop_assert_eq!(r["policy"]["networkMode"].as_str(), Some(expected.mode.as_str()));
                // The network as applied is the policy's mode, filtered egress, or (loopback-only
                // under Seatbelt, which has no network of its own to give) the host's loopback.
                let applied = r["plan"]["network"]["mode"].as_str();
                let host_loopback = backend == Backend::MacosSeatbelt && expected.mode.as_str() == "loopback-only";
                if host_loopback {
                    prop_assert_eq!(applied, Some("host-loopback"));
                } else {
                    prop_assert!(applied == Some(expected.mode.as_str()) || applied == Some("filtered"), "{applied:?}");
                }
            }
            None if any_usable => prop_assert_eq!(code, "SANDBOX_CAPABILITY_INSUFFICIENT"),
            None => prop_assert_eq!(code, "SANDBOX_BACKEND_UNAVAILABLE"),
        }
        // The report's own requirements agree with the oracle's.
        let reported: BTreeSet<String> = r["policy"]["requirements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["capability"].as_str().unwrap().to_owned())
            .collect();
        let wanted: BTreeSet<String> = expected.requirements.iter().map(|c| c.as_str().to_owned()).collect();
        prop_assert_eq!(reported, wanted);
        // One trace entry per candidate, in order.
        let traced: Vec<&str> = r["trace"].as_array().unwrap().iter().map(|c| c["backend"].as_str().unwrap()).collect();
        let candidates: Vec<&str> = expected.candidates.iter().map(|b| b.as_str()).collect();
        prop_assert_eq!(traced, candidates);
    }

    #[test]
    fn a_selected_backend_is_never_unavailable_blocked_or_short((_document, input) in decision_input()) {
        let r = report(&decide(&input));
        if let Some(name) = r.get("backend").and_then(|b| b.as_str()) {
            let backend = Backend::from_name(name).unwrap();
            let probe = probe_of(&input, backend).unwrap();
            prop_assert!(probe.available);
            prop_assert!(!(backend == Backend::Docker && input.host.session_kind == SessionKind::Turnkey));
            if backend == Backend::DirectDedicated {
                prop_assert!(input.host.allow_direct_dedicated || r["policy"]["allowDedicatedDirectOverride"] == true);
            }
            let mode = NetworkMode::from_name(r["policy"]["networkMode"].as_str().unwrap()).unwrap();
            prop_assert!(probe.network_modes.contains(&mode));
            for requirement in r["policy"]["requirements"].as_array().unwrap() {
                let capability = Capability::from_name(requirement["capability"].as_str().unwrap()).unwrap();
                prop_assert!(probe.capabilities.contains(&capability));
                if capability == Capability::NetworkIsolation {
                    prop_assert!(probe.network_modes.contains(&mode));
                }
            }
        }
    }

    #[test]
    fn same_input_same_bytes_through_both_entry_points((_document, input) in decision_input()) {
        let first = decide(&input);
        let second = decide(&input);
        prop_assert_eq!(&first, &second);
        prop_assert_eq!(&first.digest, &sha256_hex(first.canonical_json.as_bytes()));
        let through_json = decide_json(&serde_json::to_string(&input).unwrap());
        prop_assert_eq!(&first, &through_json);
    }
}
