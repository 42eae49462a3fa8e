//! End-to-end decisions through the public API: each test names the rule it guards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use common::{HEAD, code, error_paths, input, probe, report, taskpack};
use palisade_engine::output::{SCHEMA_VERSION, canonical_json, sha256_hex};
use palisade_engine::{
    Backend, Capability, RefusalCode, SessionKind, Verdict, decide, decide_json,
};
use serde_json::{Value, json};

fn backend_of(outcome: &palisade_engine::Outcome) -> Option<Backend> {
    match &outcome.verdict {
        Verdict::Decision(plan) => Some(plan.backend),
        Verdict::Refusal { .. } => None,
    }
}

fn refusal_of(outcome: &palisade_engine::Outcome) -> Option<RefusalCode> {
    match outcome.verdict {
        Verdict::Refusal { code, .. } => Some(code),
        Verdict::Decision { .. } => None,
    }
}

#[test]
fn declared_policy_selects_first_fit_in_declared_order() {
    let doc = taskpack("preferredBackends: [macos-seatbelt, linux-landlock, linux-bwrap]");
    let outcome = decide(&input(Some(&doc)));
    assert_eq!(backend_of(&outcome), Some(Backend::LinuxLandlock));
    let r = report(&outcome);
    let verdicts: Vec<&str> = r["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["unavailable", "selected", "not-considered"]);
    assert_eq!(r["policy"]["source"], "declared");
    assert_eq!(r["policy"]["preferredBackendsOrigin"], "declared");
}

#[test]
fn declared_policy_without_backends_uses_host_order() {
    let outcome = decide(&input(Some(&taskpack("networkMode: none"))));
    let r = report(&outcome);
    assert_eq!(
        r["policy"]["preferredBackends"],
        json!(["linux-bwrap", "linux-landlock", "docker"])
    );
    assert_eq!(r["policy"]["preferredBackendsOrigin"], "host");
    assert_eq!(backend_of(&outcome), Some(Backend::LinuxBwrap));
}

#[test]
fn declared_policy_defaults_network_mode_to_none_and_implies_isolation() {
    let r = report(&decide(&input(Some(&taskpack("{}")))));
    assert_eq!(r["policy"]["networkMode"], "none");
    assert_eq!(r["policy"]["networkModeOrigin"], "default");
    assert_eq!(
        r["policy"]["requirements"],
        json!([{"capability": "networkIsolation", "origin": "implied", "reason": "implied by networkMode `none`"}])
    );
}

#[test]
fn loopback_only_skips_a_backend_that_cannot_enforce_it() {
    let doc =
        taskpack("preferredBackends: [linux-landlock, linux-bwrap]\nnetworkMode: loopback-only");
    let outcome = decide(&input(Some(&doc)));
    assert_eq!(backend_of(&outcome), Some(Backend::LinuxBwrap));
    let r = report(&outcome);
    assert_eq!(r["trace"][0]["verdict"], "insufficient");
    assert_eq!(
        r["trace"][0]["missingCapabilities"],
        json!(["networkIsolation"])
    );
    assert_eq!(
        r["trace"][0]["reason"],
        "cannot enforce networkMode `loopback-only`"
    );
    assert_eq!(
        r["plan"]["network"],
        json!({"mode": "loopback-only", "hostPorts": []})
    );
}

#[test]
fn denied_read_paths_imply_read_containment_and_reach_the_plan() {
    let doc = taskpack("deniedReadPaths: ['~/.ssh', '~/.aws/', /etc//shadow, '~/.ssh']");
    let r = report(&decide(&input(Some(&doc))));
    let denied = r["policy"]["deniedReadPaths"].as_array().unwrap();
    let declared: Vec<&str> = denied
        .iter()
        .filter(|d| d["origin"] == "declared")
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        declared,
        ["/etc/shadow", "/home/dev/.aws", "/home/dev/.ssh"]
    );
    // The plan applies every one of them, the built-in credential stores included.
    let paths: Vec<&Value> = denied.iter().map(|d| &d["path"]).collect();
    assert_eq!(r["plan"]["deniedReadPaths"], json!(paths));
    assert_eq!(
        r["policy"]["requirements"][0]["capability"],
        "filesystemReadContainment"
    );
    assert_eq!(r["policy"]["requirements"][0]["origin"], "implied");
    assert_eq!(
        r["policy"]["requirements"][0]["reason"],
        "implied by 3 deniedReadPaths entries"
    );
}

#[test]
fn declared_requirement_that_is_also_implied_is_labelled_declared() {
    let doc = taskpack("requiredCapabilities: [networkIsolation, processTreeCleanup]");
    let r = report(&decide(&input(Some(&doc))));
    let requirements = r["policy"]["requirements"].as_array().unwrap();
    assert_eq!(requirements.len(), 2);
    assert_eq!(requirements[0]["capability"], "networkIsolation");
    assert_eq!(requirements[0]["origin"], "declared");
    assert_eq!(
        requirements[0]["reason"],
        "declared in spec.sandbox.requiredCapabilities"
    );
}

#[test]
fn omitted_document_outside_actions_negotiates_os_sandboxes_fail_closed() {
    let outcome = decide(&input(None));
    assert_eq!(backend_of(&outcome), Some(Backend::LinuxBwrap));
    let r = report(&outcome);
    assert_eq!(r["policy"]["source"], "omitted-default");
    assert_eq!(
        r["policy"]["preferredBackends"],
        json!(["macos-seatbelt", "linux-bwrap", "linux-landlock"])
    );
    assert_eq!(r["policy"]["taskpackName"], Value::Null);

    let mut none_available = input(None);
    none_available.probes = vec![
        probe(Backend::Docker, true),
        probe(Backend::DirectDedicated, true),
    ];
    none_available.host.allow_direct_dedicated = true;
    assert_eq!(
        refusal_of(&decide(&none_available)),
        Some(RefusalCode::SandboxBackendUnavailable)
    );
}

#[test]
fn document_without_spec_is_an_omitted_policy_with_its_name() {
    let r = report(&decide(&input(Some(HEAD))));
    assert_eq!(r["policy"]["source"], "omitted-default");
    assert_eq!(r["policy"]["taskpackName"], "demo");
}

#[test]
fn actions_default_selects_direct_dedicated_without_opt_in() {
    let mut i = input(Some(&format!("{HEAD}spec:\n  steps: []\n")));
    i.host.github_actions = true;
    let outcome = decide(&i);
    assert_eq!(backend_of(&outcome), Some(Backend::DirectDedicated));
    let r = report(&outcome);
    assert_eq!(r["plan"]["network"], json!({"mode": "allow-outbound"}));
    assert_eq!(r["policy"]["source"], "github-actions-default");
    assert_eq!(r["policy"]["allowDedicatedDirectOverride"], true);
    assert_eq!(r["policy"]["ignoredSpecSections"], json!(["steps"]));
    // The built-in protected paths (the seed's four, git's three) are listed, each unenforced.
    let protected = r["plan"]["protectedPaths"].as_array().unwrap();
    assert_eq!(protected.len(), 7);
    assert!(protected.iter().all(|p| p["enforced"] == false));
    assert_eq!(r["plan"]["readOnlyRoot"], false);
    assert_eq!(r["plan"]["processTreeCleanup"], true);
}

#[test]
fn actions_default_with_direct_dedicated_unavailable_does_not_fall_back() {
    let mut i = input(None);
    i.host.github_actions = true;
    i.probes = vec![
        probe(Backend::LinuxBwrap, true),
        probe(Backend::DirectDedicated, false),
    ];
    let outcome = decide(&i);
    assert_eq!(
        refusal_of(&outcome),
        Some(RefusalCode::SandboxBackendUnavailable)
    );
    assert_eq!(report(&outcome)["trace"].as_array().unwrap().len(), 1);
}

#[test]
fn actions_with_declared_sandbox_uses_the_declaration() {
    let mut i = input(Some(&taskpack(
        "preferredBackends: [direct-dedicated]\nnetworkMode: allow-outbound",
    )));
    i.host.github_actions = true;
    let outcome = decide(&i);
    assert_eq!(
        refusal_of(&outcome),
        Some(RefusalCode::SandboxBackendUnavailable)
    );
    assert_eq!(report(&outcome)["trace"][0]["verdict"], "blocked");
}

#[test]
fn turnkey_blocks_docker_and_blocked_counts_as_unavailable() {
    let mut i = input(Some(&taskpack("preferredBackends: [docker]")));
    i.host.session_kind = SessionKind::Turnkey;
    i.probes = vec![probe(Backend::Docker, true)];
    let outcome = decide(&i);
    assert_eq!(
        refusal_of(&outcome),
        Some(RefusalCode::SandboxBackendUnavailable)
    );
    let r = report(&outcome);
    assert_eq!(r["trace"][0]["reason"], "turnkey sessions block docker");
    i.host.session_kind = SessionKind::Managed;
    assert_eq!(backend_of(&decide(&i)), Some(Backend::Docker));
}

#[test]
fn direct_dedicated_with_host_opt_in_stays_selectable_despite_builtin_masks() {
    let mut i = input(Some(&taskpack(
        "preferredBackends: [direct-dedicated]\nnetworkMode: allow-outbound",
    )));
    i.host.allow_direct_dedicated = true;
    let r = report(&decide(&i));
    assert_eq!(r["backend"], "direct-dedicated");
    // Listed so that the launcher can say so, none enforced.
    let protected = r["plan"]["protectedPaths"].as_array().unwrap();
    assert_eq!(protected.len(), 7);
    assert!(protected.iter().all(|p| p["enforced"] == false));
    assert_eq!(r["policy"]["protectedPaths"].as_array().unwrap().len(), 7);
}

#[test]
fn insufficient_when_some_available_but_none_suffices() {
    let doc = taskpack(
        "preferredBackends: [linux-landlock, docker]\nrequiredCapabilities: [syscallFiltering]",
    );
    let outcome = decide(&input(Some(&doc)));
    assert_eq!(
        refusal_of(&outcome),
        Some(RefusalCode::SandboxCapabilityInsufficient)
    );
    let r = report(&outcome);
    assert_eq!(
        r["trace"][0]["missingCapabilities"],
        json!(["syscallFiltering"])
    );
    assert_eq!(r["trace"][1]["verdict"], "unavailable");
    assert!(r["policy"].is_object());
    assert!(r.get("plan").is_none());
    assert_eq!(
        r["message"],
        "no available backend provides every required capability: linux-landlock (lacks `syscallFiltering`), docker (not installed)"
    );
}

#[test]
fn plan_uses_the_chosen_backend_capabilities() {
    let r = report(&decide(&input(Some(&taskpack(
        "preferredBackends: [linux-landlock]",
    )))));
    let plan = &r["plan"];
    assert_eq!(plan["backend"], "linux-landlock");
    assert_eq!(plan["workspaceDir"], "/home/dev/proj");
    assert_eq!(
        plan["writableRoots"],
        json!(["/home/dev/proj", "/tmp/palisade-task"])
    );
    assert_eq!(plan["readOnlyRoot"], true);
    assert_eq!(plan["syscallFilter"], false);
    assert_eq!(
        plan["protectedPaths"][0],
        json!({"path": "/home/dev/proj/.github", "enforced": true})
    );
    assert_eq!(
        r["limitations"],
        json!(["loopback-only needs a network namespace"])
    );
    assert_eq!(r["providedCapabilities"].as_array().unwrap().len(), 5);
}

#[test]
fn invalid_host_facts_list_every_problem() {
    let mut i = input(None);
    i.host.workspace_dir = "proj".into();
    i.host.writable_roots = vec!["/ok".into(), "/tmp/".into()];
    i.probes.push(probe(Backend::LinuxBwrap, true));
    let outcome = decide(&i);
    let r = report(&outcome);
    assert_eq!(code(&r), "HOST_FACTS_INVALID");
    assert_eq!(
        error_paths(&r),
        [
            "host.workspaceDir",
            "host.writableRoots[1]",
            "probes[5].backend"
        ]
    );
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .starts_with("host facts are invalid: 3 problems")
    );
    assert!(r.get("policy").is_none() && r.get("trace").is_none());
}

#[test]
fn host_facts_are_checked_before_the_document() {
    let mut i = input(Some("not: [valid"));
    i.host.os.clear();
    assert_eq!(code(&report(&decide(&i))), "HOST_FACTS_INVALID");
}

#[test]
fn invalid_policy_report_lists_every_path_and_nothing_else() {
    let doc = taskpack(
        "preferredBackends: [linux-bwrapp, docker, docker]\nnetworkMode: offline\nextra: 1",
    );
    let outcome = decide(&input(Some(&doc)));
    let r = report(&outcome);
    assert_eq!(code(&r), "SANDBOX_POLICY_INVALID");
    assert_eq!(
        error_paths(&r),
        [
            "spec.sandbox.preferredBackends[0]",
            "spec.sandbox.preferredBackends[2]",
            "spec.sandbox.networkMode",
            "spec.sandbox.extra",
        ]
    );
    let message = r["message"].as_str().unwrap();
    assert!(message.starts_with("policy is invalid: 4 problems; first: spec.sandbox.preferredBackends[0]: unknown backend `linux-bwrapp`"), "{message}");
    assert!(r.get("policy").is_none() && r.get("trace").is_none() && r.get("plan").is_none());
}

#[test]
fn report_header_binds_input_and_engine() {
    let i = input(None);
    let outcome = decide(&i);
    let r = report(&outcome);
    assert_eq!(r["schemaVersion"], SCHEMA_VERSION);
    assert_eq!(r["engineVersion"], palisade_engine::ENGINE_VERSION);
    assert_eq!(r["inputDigest"], sha256_hex(canonical_json(&i).as_bytes()));
    assert_eq!(r["outcome"], "decision");
    assert_eq!(
        outcome.digest,
        sha256_hex(outcome.canonical_json.as_bytes())
    );
}

#[test]
fn canonical_json_has_sorted_keys_and_no_whitespace() {
    let outcome = decide(&input(None));
    let reparsed: Value = serde_json::from_str(&outcome.canonical_json).unwrap();
    assert_eq!(
        serde_json::to_string(&reparsed).unwrap(),
        outcome.canonical_json
    );
}

#[test]
fn decide_json_matches_decide() {
    let i = input(Some(&taskpack("deniedReadPaths: ['~/.ssh']")));
    let text = serde_json::to_string(&i).unwrap();
    assert_eq!(decide_json(&text), decide(&i));
    let pretty = serde_json::to_string_pretty(&i).unwrap();
    assert_eq!(decide_json(&pretty), decide(&i));
}

#[test]
fn decide_json_refuses_malformed_input_at_path_input() {
    for text in ["", "{", "[]", "{\"document\":null}", "{\"extra\":1}"] {
        let outcome = decide_json(text);
        let r = report(&outcome);
        assert_eq!(code(&r), "HOST_FACTS_INVALID", "{text}");
        assert_eq!(error_paths(&r), ["input"]);
        assert_eq!(r["inputDigest"], sha256_hex(text.as_bytes()));
        assert!(!r["errors"][0]["message"].as_str().unwrap().contains('\n'));
    }
    let mut value = serde_json::to_value(input(None)).unwrap();
    value["host"]["shell"] = json!("bash");
    let r = report(&decide_json(&value.to_string()));
    assert_eq!(code(&r), "HOST_FACTS_INVALID");
    assert!(
        r["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `shell`")
    );
}

#[test]
fn verdict_mirrors_the_report() {
    let outcomes = [
        decide(&input(None)),
        decide(&input(Some("kind: x"))),
        decide(&input(Some(&taskpack("preferredBackends: [docker]")))),
    ];
    for outcome in &outcomes {
        let r = report(outcome);
        // The typed verdict is the JSON's own value, field for field.
        match &outcome.verdict {
            Verdict::Decision(plan) => {
                assert_eq!(r["backend"], plan.backend.as_str());
                assert_eq!(r["plan"], serde_json::to_value(plan.as_ref()).unwrap());
            }
            Verdict::Refusal {
                code,
                message,
                errors,
                trace,
            } => {
                assert_eq!(r["code"], code.as_str());
                assert_eq!(r["message"], message.as_str());
                let listed = r.get("errors").cloned().unwrap_or(json!([]));
                assert_eq!(listed, serde_json::to_value(errors).unwrap());
                let traced = r.get("trace").cloned().unwrap_or(json!([]));
                assert_eq!(traced, serde_json::to_value(trace).unwrap());
            }
        }
    }
}

#[test]
fn missing_probes_are_unavailable_with_a_reason() {
    let mut i = input(None);
    i.probes.clear();
    let outcome = decide(&i);
    let r = report(&outcome);
    assert_eq!(code(&r), "SANDBOX_BACKEND_UNAVAILABLE");
    assert_eq!(r["trace"][0]["reason"], "no probe recorded for this host");
}

#[test]
fn every_capability_name_round_trips_through_a_policy() {
    let names: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
    let doc = taskpack(&format!(
        "preferredBackends: [linux-bwrap]\nrequiredCapabilities: [{}]",
        names.join(", ")
    ));
    let r = report(&decide(&input(Some(&doc))));
    assert_eq!(r["backend"], "linux-bwrap");
    assert_eq!(r["policy"]["requirements"].as_array().unwrap().len(), 6);
}

#[test]
fn a_writable_root_that_contains_nothing_is_refused() {
    // `/`, the home and its ancestors, as the workspace or as another writable root.
    for (workspace, root, path) in [
        ("/", None, "host.workspaceDir"),
        ("/home/dev", None, "host.workspaceDir"),
        ("/home", None, "host.workspaceDir"),
        ("/home/dev/proj", Some("/"), "host.writableRoots[0]"),
        ("/home/dev/proj", Some("/home/dev"), "host.writableRoots[0]"),
    ] {
        let mut i = input(None);
        i.host.workspace_dir = workspace.into();
        i.host.writable_roots = root.map(String::from).into_iter().collect();
        let r = report(&decide(&i));
        assert_eq!(
            code(&r),
            "SANDBOX_WRITABLE_ROOT_UNSAFE",
            "{workspace} {root:?}"
        );
        assert_eq!(error_paths(&r), [path], "{workspace} {root:?}");
    }
    // The home itself only when the host allows it, and never `/`.
    let mut i = input(None);
    i.host.workspace_dir = "/home/dev".into();
    i.host.allow_home_writable = Some(true);
    assert_eq!(backend_of(&decide(&i)), Some(Backend::LinuxBwrap));
    i.host.workspace_dir = "/".into();
    assert_eq!(code(&report(&decide(&i))), "SANDBOX_WRITABLE_ROOT_UNSAFE");
    // An unsandboxed run confines nothing, so nothing is refused.
    i.execution_mode = Some(palisade_engine::ExecutionMode::Workspace);
    assert_eq!(backend_of(&decide(&i)), Some(Backend::DirectDedicated));
}

#[test]
fn credential_stores_are_denied_in_every_policy() {
    let built_in = palisade_engine::resolve::BUILT_IN_DENIED_READ_PATHS;
    // An omitted policy and a declared one alike.
    for document in [None, Some(taskpack("preferredBackends: [linux-bwrap]"))] {
        let r = report(&decide(&input(document.as_deref())));
        let denied = r["policy"]["deniedReadPaths"].as_array().unwrap();
        assert_eq!(denied.len(), built_in.len(), "{denied:?}");
        assert!(denied.iter().all(|d| d["origin"] == "built-in"));
        assert!(denied.iter().any(|d| d["path"] == "/home/dev/.ssh"));
        assert_eq!(
            r["plan"]["deniedReadPaths"].as_array().unwrap().len(),
            built_in.len()
        );
        // They do not require read containment: the policy did not ask for it.
        assert!(
            !r["policy"]["requirements"]
                .as_array()
                .unwrap()
                .iter()
                .any(|q| q["capability"] == "filesystemReadContainment")
        );
    }
    // A path the policy names is `declared`; the host adds its own; an exemption is recorded.
    let mut i = input(Some(&taskpack("deniedReadPaths: ['~/.ssh']")));
    i.host.denied_read_paths = Some(vec!["/opt/secrets".into()]);
    // `~/.ssh` is exempt, but the policy denies it itself: it stays denied, and is not dropped.
    i.host.exempt_denied_read_paths = Some(vec!["~/.npmrc".into(), "~/.ssh".into()]);
    let r = report(&decide(&i));
    let origin_of = |path: &str| {
        r["policy"]["deniedReadPaths"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["path"] == path)
            .map(|d| d["origin"].clone())
    };
    assert_eq!(origin_of("/home/dev/.ssh"), Some(json!("declared")));
    assert_eq!(origin_of("/opt/secrets"), Some(json!("host")));
    assert_eq!(origin_of("/home/dev/.aws"), Some(json!("built-in")));
    assert_eq!(origin_of("/home/dev/.npmrc"), None);
    assert_eq!(
        r["policy"]["droppedDeniedReadPaths"],
        json!([{"path": "/home/dev/.npmrc", "reason": "exempted by the host configuration"}])
    );
    // An exemption must name a built-in entry; a host path may not hide the workspace.
    let mut i = input(None);
    i.host.exempt_denied_read_paths = Some(vec!["~/.bashrc".into()]);
    i.host.denied_read_paths = Some(vec!["~/".into(), "~/proj".into()]);
    let r = report(&decide(&i));
    assert_eq!(code(&r), "HOST_FACTS_INVALID");
    assert_eq!(
        error_paths(&r),
        [
            "host.deniedReadPaths[0]",
            "host.deniedReadPaths[1]",
            "host.exemptDeniedReadPaths[0]"
        ]
    );
}

#[test]
fn a_built_in_denied_path_that_holds_the_workspace_is_dropped_aloud() {
    let mut i = input(None);
    i.host.workspace_dir = "/home/dev/.kube/work".into();
    i.host.writable_roots.clear();
    let r = report(&decide(&i));
    assert_eq!(r["backend"], "linux-bwrap");
    assert_eq!(
        r["policy"]["droppedDeniedReadPaths"][0]["path"],
        "/home/dev/.kube"
    );
    assert!(
        r["policy"]["droppedDeniedReadPaths"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("the workspace")
    );
}

/// Prints one decision and one refusal (`cargo test -- --nocapture print_examples`).
#[test]
fn print_examples() {
    let doc = taskpack(
        "preferredBackends: [linux-landlock, linux-bwrap]\nnetworkMode: loopback-only\ndeniedReadPaths: ['~/.ssh']",
    );
    println!("{}", decide(&input(Some(&doc))).canonical_json);
    let mut i = input(None);
    i.probes = vec![probe(Backend::MacosSeatbelt, false)];
    println!("{}", decide(&i).canonical_json);
    println!(
        "{}",
        decide(&input(Some(&taskpack(
            "preferredBackends: [linux-bwrapp]\nnetworkmode: none"
        ))))
        .canonical_json
    );
}

#[test]
fn refusal_codes_read_the_same_in_json_and_in_text() {
    for code in [
        RefusalCode::SandboxPolicyInvalid,
        RefusalCode::SandboxBackendUnavailable,
        RefusalCode::SandboxCapabilityInsufficient,
        RefusalCode::HostFactsInvalid,
        RefusalCode::ExecutionModeForbidden,
        RefusalCode::SandboxWritableRootUnsafe,
    ] {
        assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
    }
}
