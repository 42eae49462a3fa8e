//! The conformance corpus (`tests/corpus/*.yaml`) run three ways: the native engine, the
//! embedded WebAssembly component, and the `palisade` CLI's records replayed by `palisade replay`.
//!
//! Natively every case is decided twice — typed (`decide`, input deserialized from the case's
//! JSON form) and from JSON text (`decide_json`) — and both must give the same verdict,
//! canonical JSON and digest, and satisfy the case's expectation. The component must then give
//! the native bytes exactly, through both of its entry points. Every failing case is listed, not
//! only the first. The format and the checks are documented in `support/corpus.rs`.
//!
//! `PALISADE_CORPUS_DUMP=<dir>` writes each case's native output to `<dir>/<case>.json`
//! (pretty-printed) for inspection.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step should fail the test loudly"
)]

#[path = "support/corpus.rs"]
mod corpus;

use corpus::{Case, Expectation, Failures};

fn load() -> Vec<Case> {
    match corpus::load_corpus(&corpus::corpus_dir()) {
        Ok(cases) => cases,
        Err(problems) => panic!("the conformance corpus is malformed:\n{problems}"),
    }
}

#[test]
fn corpus_is_well_formed() {
    let cases = load();
    assert!(cases.len() >= corpus::MIN_CASES, "{} cases", cases.len());
    for case in &cases {
        assert_eq!(
            case.input_value,
            serde_json::to_value(&case.input).unwrap(),
            "case `{}`: the input does not round-trip through DecisionInput",
            case.name
        );
    }
}

#[test]
fn corpus_native_engine() {
    let cases = load();
    let mut failures = Failures::default();
    for case in &cases {
        let typed = palisade_engine::decide(&case.input);
        let from_json = palisade_engine::decide_json(&case.input_json());
        let mut problems = corpus::check_outcome(&case.expect, &typed);
        if let Some(diff) = corpus::compare_outcomes("decide", &typed, "decide_json", &from_json) {
            problems.push(diff);
        }
        dump(case, &typed);
        failures.add(case, problems);
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures.render("native engine", cases.len())
    );
}

/// The third path: the `palisade` CLI decides each case from `--input`, records it, and
/// `palisade replay` reproduces every record. The recorded output must be the native bytes.
#[test]
fn corpus_cli_record_and_replay() {
    let cases = load();
    let binary = palisade_binary();
    let dir = tempfile::tempdir().unwrap();
    let written = corpus::write_inputs(&cases, &dir.path().join("inputs")).unwrap();
    assert_eq!(written.len(), cases.len());
    let audit = dir.path().join("decisions.jsonl");
    let cache = dir.path().join("cache");
    let mut failures = Failures::default();
    for ((name, path), case) in written.iter().zip(&cases) {
        assert_eq!(name, &case.name);
        let output = std::process::Command::new(&binary)
            .args(["decide", "--json", "--input"])
            .arg(path)
            .arg("--record")
            .arg(&audit)
            .env("PALISADE_CACHE_DIR", &cache)
            .output()
            .unwrap();
        let native = palisade_engine::decide(&case.input);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut problems = corpus::check_canonical(&case.expect, stdout.trim_end());
        if stdout.trim_end() != native.canonical_json {
            problems.push(format!("cli output differs from native: {stdout}"));
        }
        let expected_status = match &case.expect {
            Expectation::Decision(_) => 0,
            Expectation::Refusal(r) if r.code == "SANDBOX_POLICY_INVALID" => 3,
            Expectation::Refusal(r) if r.code == "HOST_FACTS_INVALID" => 1,
            Expectation::Refusal(_) => 4,
        };
        if output.status.code() != Some(expected_status) {
            problems.push(format!(
                "exit status {:?}, expected {expected_status}: {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        failures.add(case, problems);
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures.render("cli decide", cases.len())
    );

    // Every record carries the native digest and replays to the same bytes.
    let text = std::fs::read_to_string(&audit).unwrap();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), cases.len());
    for (record, case) in records.iter().zip(&cases) {
        let native = palisade_engine::decide(&case.input);
        assert_eq!(
            record["outputDigest"],
            native.digest.as_str(),
            "case `{}`",
            case.name
        );
        assert_eq!(
            record["output"],
            native.canonical_json.as_str(),
            "case `{}`",
            case.name
        );
    }
    let replay = std::process::Command::new(&binary)
        .args(["replay", "--json"])
        .arg(&audit)
        .env("PALISADE_CACHE_DIR", &cache)
        .output()
        .unwrap();
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&replay.stdout)
    );
    let results: Vec<serde_json::Value> = String::from_utf8_lossy(&replay.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), cases.len());
    for (result, case) in results.iter().zip(&cases) {
        let native = palisade_engine::decide(&case.input);
        assert_eq!(result["status"], "REPRODUCED", "case `{}`", case.name);
        assert_eq!(
            result["replayedDigest"],
            native.digest.as_str(),
            "case `{}`",
            case.name
        );
    }
}

/// The `palisade` binary built by this `cargo test --workspace` run (it belongs to another
/// package, so `CARGO_BIN_EXE_palisade` is not available here).
fn palisade_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let binary = profile_dir.join("palisade");
    assert!(
        binary.exists(),
        "`{}` is missing: run the workspace tests (`cargo test --workspace`) or `cargo build -p palisade` first",
        binary.display()
    );
    // A binary left over from an earlier build would embed another engine.
    let embedded = std::process::Command::new(&binary)
        .arg("component")
        .output()
        .unwrap();
    assert_eq!(
        palisade_engine::output::sha256_hex(&embedded.stdout),
        palisade::runtime::EMBEDDED_COMPONENT_SHA256,
        "`{}` is stale: run `cargo build -p palisade` (or `cargo test --workspace`)",
        binary.display()
    );
    binary
}

#[test]
fn corpus_embedded_component() {
    let cases = load();
    let options = palisade::runtime::LoadOptions::default();
    let runtime = palisade::runtime::EngineRuntime::load(&options).unwrap();
    let mut instance = runtime.instantiate().unwrap();
    let mut failures = Failures::default();
    for case in &cases {
        let native = palisade_engine::decide(&case.input);
        let mut problems = Vec::new();
        match instance.decide(&case.input) {
            Ok(outcome) => {
                problems.extend(corpus::check_outcome(&case.expect, &outcome));
                problems.extend(corpus::compare_outcomes(
                    "native",
                    &native,
                    "component decide",
                    &outcome,
                ));
            }
            Err(error) => problems.push(format!("component decide failed: {error}")),
        }
        match instance.decide_json(&case.input_json()) {
            Ok(outcome) => problems.extend(corpus::compare_outcomes(
                "native",
                &native,
                "component decide-json",
                &outcome,
            )),
            Err(error) => problems.push(format!("component decide-json failed: {error}")),
        }
        failures.add(case, problems);
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures.render("embedded component", cases.len())
    );
}

/// The checks must be able to fail: a wrong backend, code, field, absent pointer or error path
/// each produce a problem, so a passing corpus run means something.
#[test]
fn checker_rejects_wrong_expectations() {
    let cases = load();
    let decision = cases
        .iter()
        .find(|c| matches!(c.expect, Expectation::Decision(_)))
        .unwrap();
    let refusal = cases
        .iter()
        .find(|c| matches!(&c.expect, Expectation::Refusal(r) if r.error_paths.is_some()))
        .unwrap();
    let decided = palisade_engine::decide(&decision.input);
    let refused = palisade_engine::decide(&refusal.input);
    let Expectation::Decision(good_decision) = &decision.expect else {
        unreachable!()
    };
    let Expectation::Refusal(good_refusal) = &refusal.expect else {
        unreachable!()
    };
    assert!(corpus::check_outcome(&decision.expect, &decided).is_empty());
    assert!(corpus::check_outcome(&refusal.expect, &refused).is_empty());

    let mut wrong = Vec::new();
    let mut d = good_decision.clone();
    d.backend = String::from("docker");
    wrong.push(("backend", Expectation::Decision(d), &decided));
    let mut d = good_decision.clone();
    d.fields.insert(
        String::from("/policy/source"),
        serde_json::json!("no-such-source"),
    );
    wrong.push(("scalar field", Expectation::Decision(d), &decided));
    let mut d = good_decision.clone();
    d.fields
        .insert(String::from("/trace"), serde_json::json!([]));
    wrong.push(("array length", Expectation::Decision(d), &decided));
    let mut d = good_decision.clone();
    d.fields.insert(
        String::from("/trace/0"),
        serde_json::json!({"verdict": "blocked"}),
    );
    wrong.push(("object subset", Expectation::Decision(d), &decided));
    let mut d = good_decision.clone();
    d.fields
        .insert(String::from("/no/such/pointer"), serde_json::json!(null));
    wrong.push(("missing pointer", Expectation::Decision(d), &decided));
    let mut d = good_decision.clone();
    d.absent.push(String::from("/policy"));
    wrong.push(("absent", Expectation::Decision(d), &decided));
    wrong.push((
        "decision expected, refusal given",
        Expectation::Decision(good_decision.clone()),
        &refused,
    ));
    let mut r = good_refusal.clone();
    r.code = String::from("SANDBOX_BACKEND_UNAVAILABLE");
    wrong.push(("code", Expectation::Refusal(r), &refused));
    let mut r = good_refusal.clone();
    r.error_paths
        .as_mut()
        .unwrap()
        .push(String::from("spec.sandbox.nothing"));
    wrong.push(("missing error path", Expectation::Refusal(r), &refused));
    let mut r = good_refusal.clone();
    r.error_paths = Some(Vec::new());
    wrong.push(("unexpected error path", Expectation::Refusal(r), &refused));
    for (what, expect, outcome) in wrong {
        assert!(
            !corpus::check_outcome(&expect, outcome).is_empty(),
            "a wrong {what} expectation passed"
        );
    }

    let mut tampered = decided.clone();
    tampered.canonical_json.push(' ');
    assert!(!corpus::check_outcome(&decision.expect, &tampered).is_empty());
}

fn dump(case: &Case, outcome: &palisade_engine::Outcome) {
    let Some(dir) = std::env::var_os("PALISADE_CORPUS_DUMP") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let value: serde_json::Value = serde_json::from_str(&outcome.canonical_json).unwrap();
    let text = serde_json::to_string_pretty(&value).unwrap();
    std::fs::write(dir.join(format!("{}.json", case.name)), text + "\n").unwrap();
}
