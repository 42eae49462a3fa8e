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

/// What every corpus decision makes the launcher apply: each case's typed plan translated by
/// `palisade::translate` (the one host module that does it) into the shims' `LaunchPlan`, with a
/// fixed command, environment and run directory. Any change to what a decision applies shows in
/// review as a change to `snapshots/conformance__launch_plans.snap`.
/// The decision cache reads a decision's plan back from its canonical JSON: for every corpus
/// decision that gives the very plan the engine returned.
#[test]
fn every_corpus_plan_reads_back_from_its_canonical_json() {
    let mut decisions = 0;
    for case in load() {
        let outcome = palisade_engine::decide(&case.input);
        let palisade_engine::Verdict::Decision(plan) = &outcome.verdict else {
            continue;
        };
        let json: serde_json::Value = serde_json::from_str(&outcome.canonical_json).unwrap();
        let read: palisade_engine::output::ConfinementPlan =
            serde_json::from_value(json["plan"].clone()).unwrap();
        assert_eq!(&read, &**plan, "{}", case.name);
        decisions += 1;
    }
    assert!(decisions > 50, "{decisions}");
}

#[test]
fn launch_plan_of_every_corpus_decision() {
    use std::ffi::OsString;
    use std::path::PathBuf;
    let mut text = String::new();
    for case in load() {
        let palisade_engine::Verdict::Decision(plan) = palisade_engine::decide(&case.input).verdict
        else {
            continue;
        };
        let bridge = palisade::network::routes_for(&plan.network, &[]).map(|routes| {
            palisade::network::bridge_plan(
                std::path::Path::new("/run/user/1000/palisade-1000/run-1-bridge"),
                &routes,
                PathBuf::from("/usr/local/bin/palisade"),
            )
        });
        let vars = [
            ("PATH", "/usr/bin:/bin"),
            ("LANG", "C.UTF-8"),
            ("HTTPS_PROXY", "http://corp:8080"),
            ("GITHUB_TOKEN", "withheld"),
            // Passes only where the plan allows the socket it names.
            ("SSH_AUTH_SOCK", "/tmp/ssh-XYZ/agent.41"),
        ]
        .map(|(name, value)| (OsString::from(name), OsString::from(value)));
        let host = palisade::translate::HostSide {
            command: vec![OsString::from("make"), OsString::from("test")],
            vars,
            home: case.input.host.home_dir.clone(),
            // The last writable root stands in for the run's private directory.
            run_temp_dir: PathBuf::from(plan.writable_roots.last().unwrap()),
            bridge,
        };
        let rendered = match palisade::translate::launch_plan(&plan, host) {
            Ok((l, _)) if !l.unix_sockets.is_empty() => format!(
                "mechanism {:?}\nsockets {:?}\nenv {:?}",
                l.mechanism, l.unix_sockets, l.env
            ),
            Ok((l, _)) => format!(
                "mechanism {:?}, read-only root {}, syscall filter {}\nnetwork {:?}\n\
                 workspace {:?}\nwritable {:?}\ndenied {:?}\nprotected {:?}\nenv {:?}\n\
                 budgets {:?}\ncommand {:?}, TMPDIR {:?}",
                l.mechanism,
                l.read_only_root,
                l.syscall_filter,
                l.network,
                l.workspace,
                l.writable_roots,
                l.denied_read_paths,
                l.protected_paths,
                l.env,
                l.budgets,
                l.command,
                l.run_temp_dir
            ),
            Err(error) => format!("refused: {error}"),
        };
        text.push_str(&format!("== {} ({})\n{rendered}\n\n", case.name, case.file));
    }
    insta::assert_snapshot!("launch_plans", text);
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

/// The corpus as the other runtimes (Python, Node: `tests/xruntime/`) consume it, and the
/// digests the two Rust paths give for exactly those bytes.
///
/// Every runtime must feed the engine the same bytes, so the inputs are exported once, here,
/// rather than re-derived from the YAML by each runner (whose YAML parsers and JSON serializers
/// differ). `corpus.tsv` holds one `name<TAB>input-json` line per case, in corpus order; the
/// JSON is the `decide-json` argument verbatim (serde_json escapes tabs and newlines inside
/// strings, and the read-back below proves the split is unambiguous). `native.txt` (the engine
/// crate's `decide_json`) and `rust-host.txt` (the embedded component's `decide-json` under the
/// host's wasmtime) hold one `name digest outcome` line per case, where outcome is
/// `decision:<backend>` or `refusal:<CODE>`: the format every runner prints.
///
/// `PALISADE_XRUNTIME_DIR=<dir>` keeps the files (the driver `tests/xruntime/run.sh` sets it);
/// otherwise they go to a temporary directory and the checks alone run.
#[test]
fn corpus_export_for_other_runtimes() {
    let cases = load();
    let temp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("PALISADE_XRUNTIME_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).unwrap();

    let mut tsv = String::new();
    for case in &cases {
        tsv.push_str(&case.name);
        tsv.push('\t');
        tsv.push_str(&case.input_json());
        tsv.push('\n');
    }
    std::fs::write(dir.join("corpus.tsv"), &tsv).unwrap();

    // Read the file back the way the runners do: split lines, then split at the first tab.
    let text = std::fs::read_to_string(dir.join("corpus.tsv")).unwrap();
    let lines: Vec<(&str, &str)> = text
        .lines()
        .map(|line| line.split_once('\t').expect("a line without a tab"))
        .collect();
    assert_eq!(
        lines.len(),
        cases.len(),
        "corpus.tsv has the wrong line count"
    );
    for ((name, json), case) in lines.iter().zip(&cases) {
        assert_eq!(*name, case.name);
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(
            value, case.input_value,
            "case `{name}`: exported input differs"
        );
    }

    let started = std::time::Instant::now();
    let native: Vec<palisade_engine::Outcome> = lines
        .iter()
        .map(|(_, json)| palisade_engine::decide_json(json))
        .collect();
    let native_time = started.elapsed();

    let started = std::time::Instant::now();
    let runtime =
        palisade::runtime::EngineRuntime::load(&palisade::runtime::LoadOptions::default()).unwrap();
    let mut instance = runtime.instantiate().unwrap();
    let loaded = started.elapsed();
    let started = std::time::Instant::now();
    let host: Vec<palisade_engine::Outcome> = lines
        .iter()
        .map(|(name, json)| {
            instance
                .decide_json(json)
                .unwrap_or_else(|e| panic!("case `{name}`: component decide-json failed: {e}"))
        })
        .collect();
    let host_time = started.elapsed();

    let mut failures = Failures::default();
    for (((native, host), case), (_, json)) in native.iter().zip(&host).zip(&cases).zip(&lines) {
        let mut problems = corpus::check_outcome(&case.expect, native);
        // The exported bytes decide exactly as the typed input does.
        let typed = palisade_engine::decide(&case.input);
        problems.extend(corpus::compare_outcomes(
            "typed decide",
            &typed,
            "decide_json",
            native,
        ));
        problems.extend(corpus::compare_outcomes(
            "native",
            native,
            "rust host",
            host,
        ));
        if json.contains('\t') || json.contains('\n') {
            problems.push(String::from("exported json holds a raw tab or newline"));
        }
        failures.add(case, problems);
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures.render("cross-runtime export", cases.len())
    );

    let digest_lines = |outcomes: &[palisade_engine::Outcome]| -> String {
        outcomes
            .iter()
            .zip(&cases)
            .map(|(outcome, case)| {
                format!(
                    "{} {} {}\n",
                    case.name,
                    outcome.digest,
                    outcome_label(outcome)
                )
            })
            .collect()
    };
    std::fs::write(dir.join("native.txt"), digest_lines(&native)).unwrap();
    std::fs::write(dir.join("rust-host.txt"), digest_lines(&host)).unwrap();
    std::fs::write(
        dir.join("component.sha256"),
        format!("{}\n", runtime.component_sha256()),
    )
    .unwrap();
    std::fs::write(
        dir.join("times.txt"),
        format!(
            "native {} cases {} ms\nrust-host {} cases {} ms (+ load and compile {} ms)\n",
            cases.len(),
            native_time.as_millis(),
            cases.len(),
            host_time.as_millis(),
            loaded.as_millis()
        ),
    )
    .unwrap();
}

/// `decision:<backend>` or `refusal:<CODE>`, as every cross-runtime runner prints it.
fn outcome_label(outcome: &palisade_engine::Outcome) -> String {
    match &outcome.verdict {
        palisade_engine::Verdict::Decision(plan) => {
            format!("decision:{}", plan.backend.as_str())
        }
        palisade_engine::Verdict::Refusal { code, .. } => format!("refusal:{}", code.as_str()),
    }
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
