//! The engine (which validates `allowedDomains`) and the proxy (which enforces the plan's
//! `domainAllowlist`) parse entries separately. A list the engine accepts but the proxy rejects
//! would be a decision `palisade run` cannot launch; one the proxy reads differently would be a
//! hole. This property test feeds arbitrary entry-like strings through the native engine and
//! checks that every list it accepts parses in the proxy to the same entries, and that the
//! proxy's matching agrees with the engine's canonical form on the entry's own host.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use palisade_engine::output::PlanNetwork;
use palisade_engine::{
    Backend, BackendProbe, Capability, DecisionInput, HostFacts, NetworkMode, Verdict,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

fn input(entries: &[String]) -> DecisionInput {
    let list = serde_json::to_string(entries).unwrap();
    DecisionInput {
        document: Some(format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {{name: t}}\n\
             spec:\n  sandbox:\n    preferredBackends: [linux-bwrap]\n    allowedDomains: {list}\n"
        )),
        document_name: "t.yaml".into(),
        host: HostFacts::linux_cli("/home/u", "/home/u/w"),
        probes: vec![BackendProbe {
            backend: Backend::LinuxBwrap,
            available: true,
            reason: "ok".into(),
            capabilities: Capability::ALL.to_vec(),
            network_modes: NetworkMode::ALL.to_vec(),
            network_bridge: true,
            version: "bubblewrap 0.8.0".into(),
            limitations: vec![],
            landlock_proc: None,
        }],
        narrow_allowed_domains: None,
        execution_mode: None,
        budget_flags: None,
        task_contract: None,
        policy_flags: None,
    }
}

/// Entry-like strings: labels, wildcards, digits, hex, IPv4/IPv6 literals, ports, junk.
fn entry() -> impl Strategy<Value = String> {
    let label = prop_oneof![
        "[a-zA-Z][a-zA-Z0-9-]{0,6}[a-zA-Z0-9]",
        "[0-9]{1,3}",
        "0x[0-9a-f]{1,3}",
        "xn--[a-z0-9]{2,5}",
        "[a-z_]{1,4}",
    ];
    let name = prop::collection::vec(label, 1..4).prop_map(|labels| labels.join("."));
    let host = prop_oneof![
        name.clone(),
        name.prop_map(|n| format!("*.{n}")),
        "(25[0-5]|1?[0-9]{1,2})\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}",
        "\\[(::1|fe80::1|2001:db8::[0-9a-f]{1,4}|::ffff:127\\.0\\.0\\.1)\\]",
        Just("*".to_owned()),
        "[ -~]{1,12}",
    ];
    (host, prop::option::of(0u32..70000)).prop_map(|(host, port)| match port {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        // Failures are saved next to this file (`allowlist_agreement.proptest-regressions`) and committed, so they rerun first.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_list_the_engine_accepts_the_proxy_parses_alike(
        entries in prop::collection::vec(entry(), 1..4)
    ) {
        let outcome = palisade_engine::decide(&input(&entries));
        if let Verdict::Decision(plan) = outcome.verdict
            && let PlanNetwork::Filtered { allowlist: list, .. } = plan.network
        {
            let parsed = palisade_proxy::Allowlist::parse(&list);
            prop_assert!(parsed.is_ok(), "engine accepted {list:?}, proxy: {parsed:?}");
            let parsed = parsed.unwrap();
            let spelled: Vec<String> = parsed.entries().iter().map(ToString::to_string).collect();
            let mut sorted = spelled.clone();
            sorted.sort();
            prop_assert_eq!(&sorted, &list, "the proxy reads the entries differently");
        }
    }
}
