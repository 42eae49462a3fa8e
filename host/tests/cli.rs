//! The `palisade` command line as a user sees it: stdout data, stderr errors with codes, exit
//! statuses, audit records and replay.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const PALISADE: &str = env!("CARGO_BIN_EXE_palisade");

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work/repo")).unwrap();
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        Env { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn write(&self, rel: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(PALISADE);
        cmd.args(args)
            .env("PALISADE_CACHE_DIR", self.path("cache"))
            .env("HOME", self.dir.path())
            .env_remove("GITHUB_ACTIONS")
            .current_dir(self.path("work/repo"));
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Writes a facts file for a Linux host whose probes are given.
    fn facts(&self, probes: Value) -> PathBuf {
        let facts = json!({
            "host": host_facts(self.dir.path()),
            "probes": probes,
        });
        self.write("facts.json", facts.to_string())
    }
}

fn host_facts(root: &Path) -> Value {
    json!({
        "os": "linux", "arch": "x86_64", "sessionKind": "cli", "githubActions": false,
        "allowDirectDedicated": false,
        "homeDir": root.display().to_string(),
        "workspaceDir": root.join("work/repo").display().to_string(),
        "writableRoots": [],
        "defaultBackendOrder": ["linux-bwrap", "linux-landlock", "docker"],
    })
}

fn probe(backend: &str, available: bool, caps: &[&str], modes: &[&str]) -> Value {
    json!({
        "backend": backend, "available": available,
        "reason": if available { "" } else { "not installed" },
        "capabilities": caps, "networkModes": modes, "networkBridge": false,
        "version": "", "limitations": [],
    })
}

const ALL_CAPS: [&str; 6] = [
    "filesystemReadContainment",
    "filesystemWriteContainment",
    "protectedPathReadOnlyMask",
    "networkIsolation",
    "processTreeCleanup",
    "syscallFiltering",
];
const ALL_MODES: [&str; 3] = ["none", "loopback-only", "allow-outbound"];

fn linux_probes() -> Value {
    json!([
        probe("macos-seatbelt", false, &[], &[]),
        probe("linux-bwrap", true, &ALL_CAPS, &ALL_MODES),
        probe(
            "linux-landlock",
            true,
            &ALL_CAPS[..2],
            &["none", "allow-outbound"]
        ),
        probe("docker", false, &[], &[]),
        probe(
            "direct-dedicated",
            true,
            &["processTreeCleanup"],
            &["allow-outbound"]
        ),
    ])
}

const TASKPACK: &str = "apiVersion: loopwright.dev/v1alpha1
kind: Taskpack
metadata:
  name: docs-sync
spec:
  sandbox:
    networkMode: none
    deniedReadPaths: [~/.ssh]
";

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

#[test]
fn wit_prints_the_contract() {
    let env = Env::new();
    let out = env.run(&["wit"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("package palisade:engine@0.8.0;"));
}

#[test]
fn component_writes_the_embedded_bytes() {
    let env = Env::new();
    let path = env.path("engine.wasm");
    let out = env.run(&["component", "--out", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..4], b"\0asm");
    let to_stdout = env.run(&["component"]);
    assert_eq!(to_stdout.stdout, bytes);
}

#[test]
fn decide_with_recorded_facts_prints_the_decision_json() {
    let env = Env::new();
    let facts = env.facts(linux_probes());
    let taskpack = env.write("taskpack.yaml", TASKPACK);
    let out = env.run(&[
        "decide",
        "--facts",
        facts.to_str().unwrap(),
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let text = stdout(&out);
    assert!(
        text.ends_with('\n') && text.lines().count() == 1,
        "one line of json: {text}"
    );
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["outcome"], "decision");
    assert_eq!(report["backend"], "linux-bwrap");
    // The policy's `~/.ssh`, among the built-in credential stores every policy denies.
    let ssh = env.dir.path().join(".ssh").display().to_string();
    let denied = report["policy"]["deniedReadPaths"].as_array().unwrap();
    assert!(
        denied.contains(&json!({"path": ssh, "origin": "declared"})),
        "{denied:?}"
    );
    assert!(denied.iter().any(|d| d["origin"] == "built-in"));
    assert_eq!(
        report["plan"]["deniedReadPaths"].as_array().unwrap().len(),
        denied.len()
    );
}

#[test]
fn decide_summary_is_readable() {
    let env = Env::new();
    let facts = env.facts(linux_probes());
    let taskpack = env.write("taskpack.yaml", TASKPACK);
    let out = env.run(&[
        "decide",
        "--facts",
        facts.to_str().unwrap(),
        "--taskpack",
        taskpack.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("backend   linux-bwrap\n"), "{text}");
    assert!(text.contains("digest    sha256:"), "{text}");
}

#[test]
fn invalid_policy_exits_3_with_every_field_path() {
    let env = Env::new();
    let facts = env.facts(linux_probes());
    let taskpack = env.write(
        "bad.yaml",
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: x}\nspec:\n  sandbox:\n    preferredBackends: [linux-bwrap, nope, linux-bwrap]\n    networkMode: sideways\n",
    );
    let out = env.run(&[
        "decide",
        "--facts",
        facts.to_str().unwrap(),
        "--taskpack",
        taskpack.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stdout(&out), "", "stdout carries data only");
    let err = stderr(&out);
    assert!(err.starts_with("error[SANDBOX_POLICY_INVALID]: "), "{err}");
    // One error line; everything after it is an indented detail or a hint.
    assert!(
        err.lines()
            .skip(1)
            .all(|l| l.starts_with("  ") || l.starts_with("hint: ")),
        "{err}"
    );
    for path in [
        "spec.sandbox.preferredBackends[1]",
        "spec.sandbox.preferredBackends[2]",
        "spec.sandbox.networkMode",
    ] {
        assert!(err.contains(path), "missing {path} in {err}");
    }
    assert!(err.contains("\nhint: "), "{err}");

    let json_out = env.run(&[
        "decide",
        "--facts",
        facts.to_str().unwrap(),
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(json_out.status.code(), Some(3));
    let report: Value = serde_json::from_str(&stdout(&json_out)).unwrap();
    assert_eq!(report["code"], "SANDBOX_POLICY_INVALID");
    assert_eq!(report["errors"].as_array().unwrap().len(), 3);
}

#[test]
fn refusals_exit_4_with_their_codes() {
    let env = Env::new();
    let none_available = env.facts(json!([
        probe("linux-bwrap", false, &[], &[]),
        probe("linux-landlock", false, &[], &[]),
    ]));
    let out = env.run(&[
        "decide",
        "--facts",
        none_available.to_str().unwrap(),
        "--workspace",
        ".",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("error[SANDBOX_BACKEND_UNAVAILABLE]: "),
        "{}",
        stderr(&out)
    );

    let taskpack = env.write(
        "loop.yaml",
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: x}\nspec:\n  sandbox:\n    preferredBackends: [linux-landlock]\n    networkMode: loopback-only\n",
    );
    let facts = env.facts(linux_probes());
    let out = env.run(&[
        "decide",
        "--facts",
        facts.to_str().unwrap(),
        "--taskpack",
        taskpack.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(4));
    let err = stderr(&out);
    assert!(
        err.starts_with("error[SANDBOX_CAPABILITY_INSUFFICIENT]: "),
        "{err}"
    );
    // The single candidate and its reason are on the first line, and said once.
    assert!(
        err.lines().next().unwrap().contains("linux-landlock ("),
        "{err}"
    );
    assert!(!err.contains("linux-landlock: insufficient"), "{err}");
}

/// Issue 12's messages, each as a new user met it: what they say now.
#[test]
fn messages_tell_the_truth() {
    let env = Env::new();
    let facts = env.facts(linux_probes());
    let facts = facts.to_str().unwrap();
    let first_line = |out: &Output| stderr(out).lines().next().unwrap_or_default().to_owned();

    // Refusing direct-dedicated names the opt-in, not `doctor` (which shows it available).
    let direct = env.write(
        "direct.yaml",
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: x}\nspec:\n  sandbox:\n    preferredBackends: [direct-dedicated]\n    networkMode: allow-outbound\n",
    );
    let out = env.run(&[
        "decide",
        "--facts",
        facts,
        "--taskpack",
        direct.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "hint: direct-dedicated is selectable only by opt-in: pass `--allow-direct-dedicated`"
        ),
        "{}",
        stderr(&out)
    );
    let doctor = env.run(&["doctor"]);
    let line = stdout(&doctor)
        .lines()
        .find(|l| l.starts_with("direct-dedicated  "))
        .unwrap_or_default()
        .to_owned();
    assert!(
        line.contains("opt-in") && line.contains("selectable only by opt-in"),
        "{line}"
    );

    // Chosen (opted in, or the GitHub Actions default), it is said to be unconfined, and the
    // summary claims no containment it lacks.
    let mut opted_in = json!({"host": host_facts(env.dir.path()), "probes": linux_probes()});
    opted_in["host"]["allowDirectDedicated"] = json!(true);
    let opted_in = env.write("opted-in.json", opted_in.to_string());
    let out = env.run(&[
        "decide",
        "--facts",
        opted_in.to_str().unwrap(),
        "--taskpack",
        direct.to_str().unwrap(),
    ]);
    let summary = stdout(&out);
    assert!(summary.starts_with("mode      UNCONFINED"), "{summary}");
    assert!(
        summary.contains("writable  everything this user can write"),
        "{summary}"
    );
    assert!(
        summary.contains("running UNCONFINED under `direct-dedicated`"),
        "{summary}"
    );
    let out = env.run(&[
        "decide",
        "--facts",
        facts,
        "--taskpack",
        env.write("tp.yaml", TASKPACK).to_str().unwrap(),
        "--execution-mode",
        "workspace",
    ]);
    assert!(
        stdout(&out).contains("networkIsolation [implied] (NOT enforced)"),
        "{}",
        stdout(&out)
    );

    // A one-problem policy: the problem on the first line, not repeated below it.
    let out = env.run(&["decide", "--facts", facts, "--max-procs", "0"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        first_line(&out).contains("budgetFlags.maxProcesses: 0 is out of bounds"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        stderr(&out).matches("budgetFlags.maxProcesses").count(),
        1,
        "{}",
        stderr(&out)
    );

    // `--memory 100` is refused at its field, not an internal error with nothing above it.
    let out = env.run(&["decide", "--facts", facts, "--memory", "100"]);
    assert!(
        first_line(&out).starts_with("error[SANDBOX_POLICY_INVALID]"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("budgetFlags.memoryBytes: 100 is out of bounds; expected 1048576"),
        "{}",
        stderr(&out)
    );

    // `--timeout 1.5s` says how to write it.
    let out = env.run(&["decide", "--facts", facts, "--timeout", "1.5s"]);
    assert!(
        first_line(&out).contains("whole numbers only: write `1500ms`"),
        "{}",
        stderr(&out)
    );

    // `decide --json` answers with JSON on stdout even when it cannot decide.
    let out = env.run(&[
        "decide",
        "--json",
        "--taskpack",
        "/nonexistent/taskpack.yaml",
    ]);
    let answer: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(answer["error"]["code"], "PALISADE_INPUT_INVALID");
    assert_eq!(out.status.code(), Some(1));

    // A usage error has a code too.
    let out = env.run(&["decide", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        first_line(&out).starts_with("error[PALISADE_USAGE_INVALID]: "),
        "{}",
        stderr(&out)
    );

    // `doctor` with an unpinned runtime profile reports docker unavailable, with the reason.
    let profiles = env.write(
        "profiles.yaml",
        "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata: {name: t}\nspec:\n  runtimeProfiles:\n    - name: t\n      image: busybox:latest\n",
    );
    let out = env.run(&["doctor", "--runtime-profiles", profiles.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let line = stdout(&out)
        .lines()
        .find(|l| l.starts_with("docker  "))
        .unwrap_or_default()
        .to_owned();
    assert!(
        line.contains(" no ") && line.contains("DOCKER_IMAGE_UNPINNED"),
        "{line}"
    );

    // `palisade component` does not write wasm to a terminal (`script` gives it one).
    if Command::new("script").arg("--version").output().is_ok() {
        let out = Command::new("script")
            .args(["-qec", &format!("{PALISADE} component"), "/dev/null"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("stdout is a terminal"), "{text}");
        assert!(!text.contains("\0asm"), "{text}");
    }
}

#[test]
fn record_then_replay_reproduces_and_tampering_is_caught() {
    let env = Env::new();
    let facts = env.facts(linux_probes());
    let taskpack = env.write("taskpack.yaml", TASKPACK);
    let audit = env.path("decisions.jsonl");
    let facts_arg = facts.to_str().unwrap();
    let audit_arg = audit.to_str().unwrap();
    for extra in [vec!["--taskpack", taskpack.to_str().unwrap()], vec![]] {
        let mut args = vec!["decide", "--facts", facts_arg, "--record", audit_arg];
        args.extend(extra);
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    // A refusal is recorded too.
    let bad = env.write("bad.yaml", "kind: Taskpack\n");
    let out = env.run(&[
        "decide",
        "--facts",
        facts_arg,
        "--record",
        audit_arg,
        "--taskpack",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));

    let out = env.run(&["replay", audit_arg]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("REPRODUCED")).count(),
        3,
        "{text}"
    );

    // The exported component replays the same way, with no engine note.
    let wasm = env.path("engine.wasm");
    assert!(
        env.run(&["component", "--out", wasm.to_str().unwrap()])
            .status
            .success()
    );
    let out = env.run(&[
        "replay",
        audit_arg,
        "--component",
        wasm.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    for line in stdout(&out).lines() {
        let result: Value = serde_json::from_str(line).unwrap();
        assert_eq!(result["status"], "REPRODUCED");
        assert_eq!(result["engineNote"], Value::Null);
    }

    // Tamper with one field at a time.
    let original = std::fs::read_to_string(&audit).unwrap();
    let first: Value = serde_json::from_str(original.lines().next().unwrap()).unwrap();
    type Tamper = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "output",
            Box::new(|r: &mut Value| {
                let s = r["output"]
                    .as_str()
                    .unwrap()
                    .replace("linux-bwrap", "linux-landlock");
                r["output"] = json!(s);
            }),
            "INVALID",
        ),
        (
            "output and digest",
            Box::new(|r: &mut Value| {
                let s = r["output"]
                    .as_str()
                    .unwrap()
                    .replace("\"selected\"", "\"blocked\"");
                let digest = sha256(&s);
                r["output"] = json!(s);
                r["outputDigest"] = json!(digest);
            }),
            "DIVERGED",
        ),
        (
            "input document",
            Box::new(|r: &mut Value| {
                r["input"]["document"] = json!(TASKPACK.replace("none", "allow-outbound"));
            }),
            "DIVERGED",
        ),
        (
            "input probes",
            Box::new(|r: &mut Value| {
                r["input"]["probes"][1]["available"] = json!(false);
            }),
            "DIVERGED",
        ),
        (
            "input host",
            Box::new(|r: &mut Value| {
                r["input"]["host"]["homeDir"] = json!("/elsewhere");
            }),
            "DIVERGED",
        ),
        (
            "digest",
            Box::new(|r: &mut Value| {
                r["outputDigest"] = json!("0".repeat(64));
            }),
            "INVALID",
        ),
        (
            "schema",
            Box::new(|r: &mut Value| {
                r["schemaVersion"] = json!("palisade.audit/v0");
            }),
            "INVALID",
        ),
        (
            "unknown field",
            Box::new(|r: &mut Value| {
                r["extra"] = json!(1);
            }),
            "INVALID",
        ),
        (
            // The embedded engine replays it, but it is not the engine the record names.
            "engine digest",
            Box::new(|r: &mut Value| {
                r["engine"]["componentSha256"] = json!("ab".repeat(32));
            }),
            "DIVERGED",
        ),
        (
            "engine digest (not a digest)",
            Box::new(|r: &mut Value| {
                r["engine"]["componentSha256"] = json!("../../engine");
            }),
            "INVALID",
        ),
        (
            "engine version",
            Box::new(|r: &mut Value| {
                r["engine"]["engineVersion"] = json!("9.9.9");
            }),
            "INVALID",
        ),
    ];
    for (what, tamper, expected) in cases {
        let mut record = first.clone();
        tamper(&mut record);
        let path = env.write("tampered.jsonl", format!("{record}\n"));
        let out = env.run(&["replay", path.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(5),
            "tampered {what}: {}",
            stdout(&out)
        );
        assert!(
            stdout(&out).starts_with(expected),
            "tampered {what}: {}",
            stdout(&out)
        );
        assert!(
            stderr(&out).starts_with("error[PALISADE_REPLAY_DIVERGED]"),
            "{}",
            stderr(&out)
        );
    }
}

fn sha256(text: &str) -> String {
    palisade_engine::output::sha256_hex(text.as_bytes())
}

#[test]
fn replay_of_a_garbage_line_is_invalid_not_a_crash() {
    let env = Env::new();
    let path = env.write("garbage.jsonl", "{not json\n");
    let out = env.run(&["replay", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(5));
    assert!(stdout(&out).starts_with("INVALID"));
    let empty = env.write("empty.jsonl", "\n");
    let out = env.run(&["replay", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("error[PALISADE_INPUT_INVALID]"));
}

#[test]
fn input_json_from_stdin_matches_taskpack_and_facts() {
    let env = Env::new();
    let facts = env.facts(linux_probes());
    let taskpack = env.write("taskpack.yaml", TASKPACK);
    let by_files = env.run(&[
        "decide",
        "--facts",
        facts.to_str().unwrap(),
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--json",
    ]);
    let input = json!({
        "document": TASKPACK,
        "documentName": taskpack.display().to_string(),
        "host": host_facts(env.dir.path()),
        "probes": linux_probes(),
    });
    let mut child = env
        .cmd(&["decide", "--input", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let by_input = child.wait_with_output().unwrap();
    assert_eq!(by_input.status.code(), Some(0), "{}", stderr(&by_input));
    assert_eq!(by_input.stdout, by_files.stdout);
}

#[test]
fn bad_input_files_are_input_errors() {
    let env = Env::new();
    let garbage = env.write("input.json", "{\"document\": 3}");
    let out = env.run(&["decide", "--input", garbage.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error[PALISADE_INPUT_INVALID]: "),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).lines().next().unwrap().len() < 400);

    let facts = env.facts(linux_probes());
    let binary = env.write("binary.yaml", [0xff_u8, 0xfe, 0x00, 0x41]);
    let out = env.run(&[
        "decide",
        "--facts",
        facts.to_str().unwrap(),
        "--taskpack",
        binary.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("not valid utf-8"), "{}", stderr(&out));

    let out = env.run(&["decide", "--workspace", "/nonexistent/palisade/ws"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("`/nonexistent/palisade/ws`"),
        "{}",
        stderr(&out)
    );

    let out = env.run(&["decide", "--taskpack", "/nonexistent/taskpack.yaml"]);
    assert_eq!(out.status.code(), Some(1));

    let out = env.run(&["decide", "--bogus-flag"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn doctor_reports_every_backend() {
    let env = Env::new();
    let out = env.run(&["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let probes = report["probes"].as_array().unwrap();
    let names: Vec<&str> = probes
        .iter()
        .map(|p| p["backend"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "macos-seatbelt",
            "linux-bwrap",
            "linux-landlock",
            "docker",
            "direct-dedicated"
        ]
    );
    let seatbelt = &probes[0];
    assert_eq!(seatbelt["available"], false);
    assert!(!seatbelt["reason"].as_str().unwrap().is_empty());

    let table = env.run(&["doctor"]);
    assert_eq!(table.status.code(), Some(0));
    let text = stdout(&table);
    for name in names {
        assert!(text.contains(name), "{text}");
    }
    // What each mode is on each available backend, in words.
    let section = text
        .split("NETWORK MODES, AS APPLIED HERE\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no network section: {text}"));
    for probe in probes.iter().filter(|p| p["available"] == true) {
        let backend = probe["backend"].as_str().unwrap();
        assert!(section.contains(backend), "{backend}: {section}");
        for mode in probe["networkModes"].as_array().unwrap() {
            assert!(
                section.contains(mode.as_str().unwrap()),
                "{mode}: {section}"
            );
        }
    }
    assert!(!section.contains("not offered"), "{section}");
}

#[test]
fn real_probing_then_cache_gives_the_same_decision() {
    let env = Env::new();
    let taskpack = env.write("work/repo/.loopwright/taskpack.yaml", TASKPACK);
    assert!(taskpack.exists());
    let audit = env.path("audit.jsonl");
    let first = env.run(&["decide", "--json", "--record", audit.to_str().unwrap()]);
    let second = env.run(&["decide", "--json", "--record", audit.to_str().unwrap()]);
    assert_eq!(first.stdout, second.stdout, "{}", stderr(&second));
    let text = std::fs::read_to_string(&audit).unwrap();
    let sources: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["context"]["probeSource"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(sources, ["fresh", "cache"]);
    let record: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(
        record["input"]["documentName"]
            .as_str()
            .unwrap()
            .ends_with(".loopwright/taskpack.yaml")
    );
    let out = env.run(&["replay", audit.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

// ---------------------------------------------------------------------------------------------
// Replay as an audit tool: the component store and in-toto statements.

/// Records three decisions (two decisions, one refusal) and returns the audit file.
fn record_three(env: &Env) -> PathBuf {
    let facts = env.facts(linux_probes());
    let taskpack = env.write("taskpack.yaml", TASKPACK);
    let bad = env.write("bad.yaml", "kind: Taskpack\n");
    let audit = env.path("decisions.jsonl");
    let facts_arg = facts.to_str().unwrap();
    let audit_arg = audit.to_str().unwrap();
    for (extra, status) in [
        (vec!["--taskpack", taskpack.to_str().unwrap()], 0),
        (vec![], 0),
        (vec!["--taskpack", bad.to_str().unwrap()], 3),
    ] {
        let mut args = vec!["decide", "--facts", facts_arg, "--record", audit_arg];
        args.extend(extra);
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(status), "{}", stderr(&out));
    }
    audit
}

/// Another engine component that decides exactly as the embedded one: the embedded bytes plus a
/// custom section, so its digest differs. Stands in for "the engine an older palisade shipped".
fn other_engine(embedded: &[u8]) -> Vec<u8> {
    let name = b"palisade-test-version";
    let payload = b"an older release";
    let mut section = vec![u8::try_from(name.len()).unwrap()];
    section.extend_from_slice(name);
    section.extend_from_slice(payload);
    let mut bytes = embedded.to_vec();
    bytes.push(0); // custom section id
    bytes.push(u8::try_from(section.len()).unwrap()); // < 128: one LEB128 byte
    bytes.extend_from_slice(&section);
    bytes
}

fn replay_json(env: &Env, args: &[&str]) -> (Option<i32>, Vec<Value>) {
    let mut all = vec!["replay", "--json"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    let results = stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (out.status.code(), results)
}

#[test]
fn component_archive_is_content_addressed_and_idempotent() {
    let env = Env::new();
    let embedded = env.run(&["component"]).stdout;
    let store = env.path("store");
    let store_arg = store.to_str().unwrap();
    let out = env.run(&["component", "--archive", store_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let digest = sha256_bytes(&embedded);
    let path = store.join("sha256").join(format!("{digest}.wasm"));
    assert_eq!(
        stdout(&out),
        format!("sha256:{digest} {}\n", path.display())
    );
    assert_eq!(std::fs::read(&path).unwrap(), embedded);
    // Again: the same entry, nothing else in the store.
    let again = env.run(&["component", "--archive", store_arg]);
    assert_eq!(stdout(&again), stdout(&out));
    assert_eq!(std::fs::read_dir(store.join("sha256")).unwrap().count(), 1);
    // --archive and --out together write both.
    let wasm = env.path("engine.wasm");
    let out = env.run(&[
        "component",
        "--archive",
        store_arg,
        "--out",
        wasm.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read(&wasm).unwrap(), embedded);
}

fn sha256_bytes(bytes: &[u8]) -> String {
    palisade_engine::output::sha256_hex(bytes)
}

/// Records made by the engine of the contract before the typed plan (`palisade:engine@0.1.0`,
/// `tests/fixtures/engine-0.1.0/`: the component and two records it made) still replay with the
/// engine that made them, from a component store; the current engine gives other bytes.
#[test]
fn records_of_the_previous_contract_replay_with_their_own_engine() {
    replay_fixture("engine-0.1.0", "0.1.0", 2);
}

/// Records made by the engine of the contract before the policy flags (`palisade:engine@0.2.0`,
/// `tests/fixtures/engine-0.2.0/`: that component and three records it made, one the refusal of
/// `--allow-domain` without a taskpack) still replay with the engine that made them.
#[test]
fn records_of_the_contract_before_policy_flags_replay_with_their_own_engine() {
    replay_fixture("engine-0.2.0", "0.2.0", 3);
}

/// Records made by the engine of the contract before host Unix sockets
/// (`palisade:engine@0.3.0`, `tests/fixtures/engine-0.3.0/`: that component and three records it
/// made: a policy formed by flags alone, the example taskpack, and the refusal of a flag that
/// would widen the taskpack's network) still replay with the engine that made them.
#[test]
fn records_of_the_contract_before_unix_sockets_replay_with_their_own_engine() {
    replay_fixture("engine-0.3.0", "0.3.0", 3);
}

/// Records made by the engine of the contract before git's protected paths
/// (`palisade:engine@0.4.0`, `tests/fixtures/engine-0.4.0/`: that component and three records it
/// made: a policy formed by flags alone with an allowed host Unix socket, the example taskpack,
/// and the refusal of a socket flag that would widen the taskpack) still replay with the engine
/// that made them.
#[test]
fn records_of_the_contract_before_git_protected_paths_replay_with_their_own_engine() {
    replay_fixture("engine-0.4.0", "0.4.0", 3);
}

/// Records made by the engine of the contract before Palisade's measured state
/// (`palisade:engine@0.5.0`, `tests/fixtures/engine-0.5.0/`: that component and three chained
/// records it made: a policy formed by flags in a git repository, the example taskpack, and the
/// refusal of a flag that would widen the taskpack's network) still replay with the engine that
/// made them.
#[test]
fn records_of_the_contract_before_state_paths_replay_with_their_own_engine() {
    replay_fixture("engine-0.5.0", "0.5.0", 3);
}

/// Records made by the engine of the contract before Palisade's signing keys
/// (`palisade:engine@0.6.0`, `tests/fixtures/engine-0.6.0/`: that component and three chained
/// records it made: a policy formed by flags (a denied path, a host port) in a git repository,
/// the example taskpack, and the refusal of a flag that would widen the taskpack's network)
/// still replay with the engine that made them.
#[test]
fn records_of_the_contract_before_signing_keys_replay_with_their_own_engine() {
    replay_fixture("engine-0.6.0", "0.6.0", 3);
}

/// Records made by the engine of the contract before the Landlock `/proc` and the launcher's
/// own processes were in the plan (`palisade:engine@0.7.0`, `tests/fixtures/engine-0.7.0/`:
/// that component and three chained records it made: a policy formed by flags (a denied path,
/// a host port) in a git repository, the example taskpack, and the refusal of a flag that would
/// widen the taskpack's network) still replay with the engine that made them.
#[test]
fn records_of_the_contract_before_the_typed_proc_replay_with_their_own_engine() {
    replay_fixture("engine-0.7.0", "0.7.0", 3);
}

/// Replays `tests/fixtures/<name>/decisions.jsonl` with the component beside it (from a
/// component store): every record REPRODUCED; the embedded engine is not the one they name.
fn replay_fixture(name: &str, wit_version: &str, records: usize) {
    let env = Env::new();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests")
        .join("fixtures")
        .join(name);
    let old = std::fs::read(fixtures.join("palisade-engine.wasm")).unwrap();
    let digest = sha256_bytes(&old);
    let store = env.path("store");
    std::fs::create_dir_all(store.join("sha256")).unwrap();
    std::fs::write(store.join("sha256").join(format!("{digest}.wasm")), &old).unwrap();
    let audit = fixtures.join("decisions.jsonl");
    let audit_arg = audit.to_str().unwrap();

    let (code, results) = replay_json(
        &env,
        &[audit_arg, "--component-store", store.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{results:?}");
    assert_eq!(results.len(), records);
    for result in &results {
        assert_eq!(result["status"], "REPRODUCED", "{result}");
        assert_eq!(result["replayedWith"], digest.as_str());
    }
    // The records really are of that contract, and the embedded engine is not theirs.
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(&audit)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["engine"]["witVersion"], wit_version);
    let (code, results) = replay_json(&env, &[audit_arg]);
    assert_eq!(code, Some(5));
    assert!(
        results.iter().all(|r| r["status"] == "DIVERGED"),
        "{results:?}"
    );
}

#[test]
fn component_store_replays_each_record_with_the_engine_it_names() {
    let env = Env::new();
    let audit = record_three(&env);
    let embedded = env.run(&["component"]).stdout;
    let a = sha256_bytes(&embedded);
    let store = env.path("store");
    let store_arg = store.to_str().unwrap();
    assert!(
        env.run(&["component", "--archive", store_arg])
            .status
            .success()
    );
    let other = other_engine(&embedded);
    let b = sha256_bytes(&other);
    let b_path = store.join("sha256").join(format!("{b}.wasm"));
    std::fs::write(&b_path, &other).unwrap();
    let b_file = env.write("other.wasm", &other);

    // Line 1 as recorded (engine A); line 2 the same decision as engine B recorded it.
    let first = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    // Unchained (as records before the hash chain were): this test is about engines, and a
    // record made by hand breaks the chain (`replay_finds_where_the_chain_breaks`).
    let mut first_value: Value = serde_json::from_str(&first).unwrap();
    first_value.as_object_mut().unwrap().remove("chain");
    let first = first_value.to_string();
    let mut by_b = first_value.clone();
    by_b["engine"]["componentSha256"] = json!(b);
    let mixed = env.write("mixed.jsonl", format!("{first}\n{by_b}\n"));
    let mixed_arg = mixed.to_str().unwrap();

    // With the store, each record runs on its own engine and reproduces.
    let (code, results) = replay_json(&env, &[mixed_arg, "--component-store", store_arg]);
    assert_eq!(code, Some(0), "{results:?}");
    assert_eq!(results.len(), 2);
    for (result, engine) in results.iter().zip([&a, &b]) {
        assert_eq!(result["status"], "REPRODUCED", "{result}");
        assert_eq!(result["replayedWith"], engine.as_str());
        assert_eq!(result["engineNote"], Value::Null);
    }

    // With one fixed engine, the record naming the other is DIVERGED and the note says so.
    for (fixed, reproduced, diverged, used) in [
        (vec![], 0, 1, &a),
        (vec!["--component", b_file.to_str().unwrap()], 1, 0, &b),
    ] {
        let mut args = vec![mixed_arg];
        args.extend(fixed);
        let (code, results) = replay_json(&env, &args);
        assert_eq!(code, Some(5));
        assert_eq!(results[reproduced]["status"], "REPRODUCED");
        assert_eq!(results[reproduced]["engineNote"], Value::Null);
        let result = &results[diverged];
        assert_eq!(result["status"], "DIVERGED", "{result}");
        assert_eq!(result["replayedWith"], used.as_str());
        let note = result["engineNote"].as_str().unwrap();
        assert!(
            note.contains(&a) && note.contains(&b),
            "the note names both engines: {note}"
        );
        assert!(
            result["details"][0]
                .as_str()
                .unwrap()
                .contains("byte-identical"),
            "{result}"
        );
    }
    // The text output carries the note too.
    let out = env.run(&["replay", mixed_arg]);
    assert!(
        stdout(&out).contains(&format!(
            "note: recorded with engine component `{b}`, replayed with `{a}`"
        )),
        "{}",
        stdout(&out)
    );

    // A corrupt store entry is never run; a missing one cannot be replayed.
    std::fs::write(&b_path, &embedded).unwrap();
    let (code, results) = replay_json(&env, &[mixed_arg, "--component-store", store_arg]);
    assert_eq!(code, Some(5));
    assert_eq!(results[0]["status"], "REPRODUCED");
    assert_eq!(results[1]["status"], "INVALID");
    assert!(
        results[1]["details"][0]
            .as_str()
            .unwrap()
            .contains("is corrupt"),
        "{}",
        results[1]
    );
    std::fs::remove_file(&b_path).unwrap();
    let (code, results) = replay_json(&env, &[mixed_arg, "--component-store", store_arg]);
    assert_eq!(code, Some(5));
    assert_eq!(results[1]["status"], "INVALID");
    assert!(
        results[1]["details"][0]
            .as_str()
            .unwrap()
            .contains("is not in the component store"),
        "{}",
        results[1]
    );

    // The embedded engine serves records that name it even from an empty store.
    let empty = env.path("empty-store");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, results) = replay_json(
        &env,
        &[
            audit.to_str().unwrap(),
            "--component-store",
            empty.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{results:?}");
    assert_eq!(results.len(), 3);

    let out = env.run(&[
        "replay",
        mixed_arg,
        "--component-store",
        env.path("no-such-store").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error[PALISADE_INPUT_INVALID]"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn in_toto_statements_are_exported_and_verified_byte_for_byte() {
    let env = Env::new();
    let audit = record_three(&env);
    let statements = env.path("statements.jsonl");
    let out = env.run(&[
        "replay",
        audit.to_str().unwrap(),
        "--export-in-toto",
        statements.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let records = std::fs::read_to_string(&audit).unwrap();
    let exported = std::fs::read_to_string(&statements).unwrap();
    assert_eq!(exported.lines().count(), 3);
    for (record_line, statement_line) in records.lines().zip(exported.lines()) {
        let record: Value = serde_json::from_str(record_line).unwrap();
        let statement: Value = serde_json::from_str(statement_line).unwrap();
        assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
        assert_eq!(
            statement["predicateType"],
            "https://loopwright.dev/palisade/decision-record/v1"
        );
        let subjects = statement["subject"].as_array().unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0]["name"], "palisade-decision.json");
        assert_eq!(
            subjects[0]["digest"],
            json!({"sha256": record["outputDigest"]})
        );
        assert_eq!(
            subjects[0]["digest"]["sha256"].as_str().unwrap(),
            sha256(record["output"].as_str().unwrap())
        );
        // The predicate is the record line itself, byte for byte.
        assert!(
            statement_line.ends_with(&format!(",\"predicate\":{record_line}}}")),
            "{statement_line}"
        );
    }

    // Verification, with the embedded engine and with a store.
    let store = env.path("store");
    assert!(
        env.run(&["component", "--archive", store.to_str().unwrap()])
            .status
            .success()
    );
    for extra in [vec![], vec!["--component-store", store.to_str().unwrap()]] {
        let mut args = vec!["--in-toto", statements.to_str().unwrap()];
        args.extend(extra);
        let (code, results) = replay_json(&env, &args);
        assert_eq!(code, Some(0), "{results:?}");
        assert_eq!(results.len(), 3);
        assert!(results.iter().all(|r| r["status"] == "REPRODUCED"));
    }

    // A record is not a statement, and a statement is not a record.
    let (code, results) = replay_json(&env, &["--in-toto", audit.to_str().unwrap()]);
    assert_eq!(code, Some(5));
    assert!(results.iter().all(|r| r["status"] == "INVALID"));
    let (code, results) = replay_json(&env, &[statements.to_str().unwrap()]);
    assert_eq!(code, Some(5));
    assert!(results.iter().all(|r| r["status"] == "INVALID"));

    // Only reproduced records are exported; the rest are reported as usual.
    let mut tampered: Value = serde_json::from_str(records.lines().next().unwrap()).unwrap();
    tampered["input"]["host"]["homeDir"] = json!("/elsewhere");
    let partly = env.write(
        "partly.jsonl",
        format!("{tampered}\n{}\n", records.lines().nth(1).unwrap()),
    );
    let out = env.run(&[
        "replay",
        partly.to_str().unwrap(),
        "--export-in-toto",
        statements.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(5));
    let exported_now = std::fs::read_to_string(&statements).unwrap();
    assert_eq!(exported_now.lines().count(), 1);
    assert_eq!(
        exported_now.lines().next(),
        exported.lines().nth(1),
        "the reproduced record's statement is the same bytes as before"
    );
}

/// Every field of a statement that matters, altered alone (and one consistent forgery), is
/// DIVERGED or INVALID, never REPRODUCED.
#[test]
fn tampered_statements_are_never_reproduced() {
    let env = Env::new();
    let audit = record_three(&env);
    let statements = env.path("statements.jsonl");
    let out = env.run(&[
        "replay",
        audit.to_str().unwrap(),
        "--export-in-toto",
        statements.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(&statements)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let store = env.path("store");
    assert!(
        env.run(&["component", "--archive", store.to_str().unwrap()])
            .status
            .success()
    );

    type Tamper = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Tamper, &str, &str)> = vec![
        (
            "output",
            Box::new(|s: &mut Value| {
                let text = s["predicate"]["output"]
                    .as_str()
                    .unwrap()
                    .replace("linux-bwrap", "linux-landlock");
                s["predicate"]["output"] = json!(text);
            }),
            "INVALID",
            "INVALID",
        ),
        (
            "output with both digests recomputed",
            Box::new(|s: &mut Value| {
                let text = s["predicate"]["output"]
                    .as_str()
                    .unwrap()
                    .replace("\"selected\"", "\"blocked\"");
                let digest = sha256(&text);
                s["predicate"]["output"] = json!(text);
                s["predicate"]["outputDigest"] = json!(digest);
                s["subject"][0]["digest"]["sha256"] = json!(digest);
            }),
            "DIVERGED",
            "DIVERGED",
        ),
        (
            "input",
            Box::new(|s: &mut Value| {
                s["predicate"]["input"]["probes"][1]["available"] = json!(false);
            }),
            "DIVERGED",
            "DIVERGED",
        ),
        (
            "output digest",
            Box::new(|s: &mut Value| {
                s["predicate"]["outputDigest"] = json!("0".repeat(64));
            }),
            "INVALID",
            "INVALID",
        ),
        (
            "engine digest",
            Box::new(|s: &mut Value| {
                s["predicate"]["engine"]["componentSha256"] = json!("ab".repeat(32));
            }),
            // The embedded engine is not the one named; the store does not have the one named.
            "DIVERGED",
            "INVALID",
        ),
        (
            "subject digest",
            Box::new(|s: &mut Value| {
                s["subject"][0]["digest"]["sha256"] = json!("0".repeat(64));
            }),
            "INVALID",
            "INVALID",
        ),
        (
            "subject digest algorithm",
            Box::new(|s: &mut Value| {
                let digest = s["subject"][0]["digest"]["sha256"].clone();
                s["subject"][0]["digest"] = json!({"sha512": digest});
            }),
            "INVALID",
            "INVALID",
        ),
        (
            "a second subject",
            Box::new(|s: &mut Value| {
                let subject = s["subject"][0].clone();
                s["subject"].as_array_mut().unwrap().push(subject);
            }),
            "INVALID",
            "INVALID",
        ),
        (
            "statement type",
            Box::new(|s: &mut Value| {
                s["_type"] = json!("https://in-toto.io/Statement/v0.1");
            }),
            "INVALID",
            "INVALID",
        ),
        (
            "predicate type",
            Box::new(|s: &mut Value| {
                s["predicateType"] = json!("https://slsa.dev/provenance/v1");
            }),
            "INVALID",
            "INVALID",
        ),
    ];
    for (what, tamper, embedded_status, store_status) in cases {
        let mut statement = first.clone();
        tamper(&mut statement);
        let path = env.write("tampered.jsonl", format!("{statement}\n"));
        for (extra, expected) in [
            (vec![], embedded_status),
            (
                vec!["--component-store", store.to_str().unwrap()],
                store_status,
            ),
        ] {
            let mut args = vec!["replay", "--in-toto", path.to_str().unwrap()];
            args.extend(extra.iter().copied());
            let out = env.run(&args);
            assert_eq!(
                out.status.code(),
                Some(5),
                "tampered {what} {extra:?}: {}",
                stdout(&out)
            );
            assert!(
                stdout(&out).starts_with(expected),
                "tampered {what} {extra:?}: expected {expected}, got {}",
                stdout(&out)
            );
        }
    }
}

/// The envelope reaches the decision from the command line: a `--task-contract` document and
/// the selected runtime profile's `budgets` cap the taskpack and the flags, each recorded with
/// its origin, and the clamps are said.
#[test]
fn a_task_contract_and_the_runtime_profile_budgets_are_the_envelope() {
    let env = Env::new();
    let taskpack = env.write(
        "taskpack.yaml",
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  budgets: {timeoutSeconds: 600}\n  sandbox: {preferredBackends: [linux-bwrap]}\n",
    );
    let contract = env.write(
        "contract.yaml",
        "apiVersion: loopwright.dev/v1alpha1\nkind: TaskContract\nmetadata: {name: c}\nspec:\n  budgets: {timeoutSeconds: 120}\n",
    );
    let id = format!("sha256:{}", "0".repeat(64));
    let profiles = env.write(
        "registry.yaml",
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata: {{name: r}}\nspec:\n  runtimeProfiles:\n    - {{name: build, image: 'b:1', imageId: '{id}', budgets: {{maxProcesses: 16}}}}\n"
        ),
    );
    let out = env.run(&[
        "decide",
        "--json",
        "--no-cache",
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--task-contract",
        contract.to_str().unwrap(),
        "--runtime-profiles",
        profiles.to_str().unwrap(),
        "--max-procs",
        "64",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decision: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let budgets = &decision["plan"]["budgets"];
    assert_eq!(
        budgets["timeoutMillis"],
        json!({"value": 120_000, "origin": "task-contract"})
    );
    assert_eq!(
        budgets["maxProcesses"],
        json!({"value": 16, "origin": "runtime-profile"})
    );
    assert_eq!(budgets["clamped"].as_array().unwrap().len(), 2, "{budgets}");
    assert_eq!(decision["policy"]["taskContract"]["name"], "c");
    let warnings = decision["plan"]["warnings"].to_string();
    assert!(
        warnings.contains(
            "the policy's budgets.timeoutSeconds 10m clamped to 2m by the task contract's envelope"
        ),
        "{warnings}"
    );
    assert!(
        warnings.contains(
            "--max-procs 64 processes clamped to 16 processes by the runtime profile's envelope"
        ),
        "{warnings}"
    );
}

/// A taskpack nested 20 000 levels deep with `[` (40 KB) once ran the engine out of fuel
/// (`PALISADE_INTERNAL`, nothing recorded). It is an invalid policy, refused quickly and
/// recorded like any other refusal; the host configuration reader refuses it the same way.
#[test]
fn a_deeply_nested_document_is_an_invalid_policy_and_is_recorded() {
    let env = Env::new();
    let deep = format!(
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {{name: t}}\nspec:\n  sandbox:\n    deniedReadPaths: {}{}\n",
        "[".repeat(20_000),
        "]".repeat(20_000)
    );
    let taskpack = env.write("deep.yaml", &deep);
    let record = env.path("audit.jsonl");
    let facts = env.facts(linux_probes());
    let out = env.run(&[
        "decide",
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--facts",
        facts.to_str().unwrap(),
        "--record",
        record.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("error[SANDBOX_POLICY_INVALID]"));
    let line: Value =
        serde_json::from_str(std::fs::read_to_string(&record).unwrap().trim()).unwrap();
    let output: Value = serde_json::from_str(line["output"].as_str().unwrap()).unwrap();
    assert_eq!(output["code"], "SANDBOX_POLICY_INVALID");
    assert_eq!(output["errors"][0]["path"], "document");

    let config = env.write(
        "host.yaml",
        format!(
            "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec:\n  writableRoots: {}{}\n",
            "[".repeat(20_000),
            "]".repeat(20_000)
        ),
    );
    let out = env.run(&["doctor", "--host-config", config.to_str().unwrap()]);
    assert!(
        stderr(&out).contains("error[HOST_CONFIG_INVALID]"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("nest deeper than 64"),
        "{}",
        stderr(&out)
    );
}

/// The last record of an audit file, and its output.
fn last_record(path: &Path) -> (Value, Value) {
    let text = std::fs::read_to_string(path).unwrap();
    let line: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let output: Value = serde_json::from_str(line["output"].as_str().unwrap()).unwrap();
    (line, output)
}

/// Issue 16: a taskpack or task contract nested 20 000 or 100 000 levels deep, of any kind, or
/// larger than the engine takes, is an invalid policy refused before parsing and recorded —
/// never an internal failure without a record. Before: 20 000 `[` ran the component out of
/// fuel, 520 000 `? ` (1 MiB) and a 60 MB file out of memory, all `PALISADE_INTERNAL`.
#[test]
fn deep_and_oversized_documents_are_invalid_policies_and_recorded() {
    let env = Env::new();
    let facts = env.facts(linux_probes());
    let record = env.path("decisions.jsonl");
    let head = "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  sandbox:\n    deniedReadPaths: ";
    let decide = |taskpack: &Path, extra: &[&str]| {
        let mut args = vec![
            "decide",
            "--taskpack",
            taskpack.to_str().unwrap(),
            "--facts",
            facts.to_str().unwrap(),
            "--record",
            record.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        assert!(stderr(&out).contains("error[SANDBOX_POLICY_INVALID]"));
        last_record(&record)
    };
    for levels in [20_000, 100_000] {
        for (kind, value) in [
            (
                "flow",
                format!("{}{}", "[".repeat(levels), "]".repeat(levels)),
            ),
            (
                "flow-mapping",
                format!("{}x{}", "{a: ".repeat(levels), "}".repeat(levels)),
            ),
            ("flow-pair", format!("[{}x", "[a: ".repeat(levels))),
            ("block", format!("\n      {}x", "- ".repeat(levels))),
            ("complex-key", format!("\n      {}x", "? ".repeat(levels))),
            (
                "sequence-of-keys",
                format!("\n      {}x", "- ? ".repeat(levels)),
            ),
        ] {
            let taskpack = env.write("deep.yaml", format!("{head}{value}\n"));
            let (_, output) = decide(&taskpack, &[]);
            assert_eq!(output["code"], "SANDBOX_POLICY_INVALID", "{kind} {levels}");
            assert_eq!(output["errors"][0]["path"], "document", "{kind} {levels}");
            let message = output["errors"][0]["message"].as_str().unwrap();
            assert!(
                message.contains("nest deeper than 64"),
                "{kind} {levels}: {message}"
            );
        }
    }

    // The task contract goes through the same reader.
    let plain = env.write("plain.yaml", format!("{head}[/srv/secret]\n"));
    let contract = env.write(
        "contract.yaml",
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: TaskContract\nmetadata: {{name: c}}\nspec:\n  budgets: {}\n",
            "? ".repeat(100_000)
        ),
    );
    let (_, output) = decide(&plain, &["--task-contract", contract.to_str().unwrap()]);
    assert_eq!(output["errors"][0]["path"], "taskContract");
    assert!(
        output["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("nest deeper than 64")
    );

    // 100 MiB (sparse): only the first bytes past the limit are read and handed over, so the
    // refusal is recorded with what the engine saw.
    let big = env.path("big.yaml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(100 * 1024 * 1024)
        .unwrap();
    let (line, output) = decide(&big, &[]);
    assert_eq!(output["errors"][0]["path"], "document");
    assert_eq!(
        output["errors"][0]["message"],
        "document is larger than 1048576 bytes"
    );
    let recorded = line["input"]["document"].as_str().unwrap().len();
    assert!((1_048_577..=1_048_580).contains(&recorded), "{recorded}");
    // A cut never splits a character: the record holds valid text, and the engine still
    // sees more than the limit.
    let accented = env.write("accented.yaml", "é".repeat(600_000));
    let (line, output) = decide(&accented, &[]);
    assert_eq!(
        output["errors"][0]["message"],
        "document is larger than 1048576 bytes"
    );
    let recorded = line["input"]["document"].as_str().unwrap();
    assert!(recorded.len() > 1_048_576 && recorded.chars().all(|c| c == 'é'));

    // `run --audit` records the same refusal before it would launch anything.
    let audit = env.path("run.jsonl");
    let deep = env.write("deep.yaml", format!("{head}{}\n", "[".repeat(20_000)));
    let out = env.run(&[
        "run",
        "--taskpack",
        deep.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo launched",
    ]);
    // 125: palisade refused; nothing was launched.
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("error[SANDBOX_POLICY_INVALID]"));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("launched"));
    let (_, output) = last_record(&audit);
    assert_eq!(output["code"], "SANDBOX_POLICY_INVALID");
    assert_eq!(output["errors"][0]["path"], "document");
}

/// The JSON inputs (`--input`, `--facts`) are refused before parsing when larger than the
/// engine takes, and nesting stops at the JSON parser's 128 levels: an input error with a code,
/// quickly, never an internal failure.
#[test]
fn oversized_or_deep_json_inputs_are_input_errors() {
    let env = Env::new();
    let big = env.path("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(17 * 1024 * 1024)
        .unwrap();
    for flag in ["--input", "--facts"] {
        let out = env.run(&["decide", flag, big.to_str().unwrap()]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("error[PALISADE_INPUT_INVALID]"),
            "{}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("is larger than 16777216 bytes"),
            "{}",
            stderr(&out)
        );
    }
    // Every field of the input is typed and closed, so deep JSON is refused where it stops
    // fitting the schema (at the first level here), long before the parser's 128 levels.
    for levels in [20_000, 100_000] {
        for text in [
            format!("{}1{}", "{\"host\":".repeat(levels), "}".repeat(levels)),
            format!("{}{}", "[".repeat(levels), "]".repeat(levels)),
        ] {
            let deep = env.write("deep.json", text);
            for flag in ["--input", "--facts"] {
                let out = env.run(&["decide", flag, deep.to_str().unwrap()]);
                assert!(
                    stderr(&out).contains("error[PALISADE_INPUT_INVALID]"),
                    "{}",
                    stderr(&out)
                );
            }
        }
    }
}

/// An audit file with lines that are not records (not UTF-8, not JSON, nested past the JSON
/// parser's depth) still replays its other lines; each bad one is INVALID in place.
#[test]
fn replay_reports_unreadable_lines_in_place() {
    let env = Env::new();
    let facts = env.facts(linux_probes());
    let taskpack = env.write("t.yaml", TASKPACK);
    let record = env.path("decisions.jsonl");
    let out = env.run(&[
        "decide",
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--facts",
        facts.to_str().unwrap(),
        "--record",
        record.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let good = std::fs::read(&record).unwrap();
    let mut file = good.clone();
    file.extend_from_slice(b"\xff\xfe not utf-8\n");
    file.extend_from_slice(format!("{{\"input\":{}\n", "[".repeat(100_000)).as_bytes());
    // Found by the `audit_records` fuzz target: reasons quoted the line raw, so this one
    // printed a forged `REPRODUCED` line in the text report.
    file.extend_from_slice(b"{\"x\\nREPRODUCED line 9 sha256:00\":1}\n");
    file.extend_from_slice(&good);
    std::fs::write(&record, file).unwrap();
    let out = env.run(&["replay", "--json", record.to_str().unwrap()]);
    let results: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let statuses: Vec<&str> = results
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    // The three lines in the middle are not in the file's hash chain either: each is
    // unchained, and the last record follows the first.
    assert_eq!(
        statuses,
        [
            "REPRODUCED",
            "INVALID",
            "INVALID",
            "INVALID",
            "REPRODUCED",
            "CHAIN_BROKEN",
            "CHAIN_BROKEN",
            "CHAIN_BROKEN",
            "CHAIN_BROKEN"
        ]
    );
    assert!(
        results[8]["details"][0]
            .as_str()
            .unwrap()
            .starts_with("inserted: it is a copy of line 1"),
        "{}",
        results[8]
    );
    let detail = |i: usize| results[i]["details"][0].as_str().unwrap().to_owned();
    assert!(detail(1).contains("not valid utf-8"));
    assert!(detail(2).contains("recursion limit"));
    assert!(
        stderr(&out).contains("error[PALISADE_REPLAY_DIVERGED]"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["replay", record.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let statuses = text.lines().filter(|l| !l.starts_with("  ")).count();
    assert_eq!(statuses, 9, "{text}");
    let broken = text
        .lines()
        .filter(|l| l.starts_with("CHAIN_BROKEN"))
        .count();
    assert_eq!(broken, 4, "{text}");
    let reproduced = text.lines().filter(|l| l.starts_with("REPRODUCED")).count();
    assert_eq!(reproduced, 2, "{text}");
}

/// Shell completions and the manual page come from the parser's own definitions: every public
/// subcommand and flag, none of the sandbox-internal ones; the bash script parses.
#[test]
fn completions_and_manual_page_are_generated() {
    let env = Env::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = env.run(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(
            script.contains("allow-domain") && script.contains("run"),
            "{shell}"
        );
        assert!(
            !script.contains("__sandbox"),
            "{shell} offers an internal subcommand"
        );
    }
    let bash = env.write("palisade.bash", stdout(&env.run(&["completions", "bash"])));
    let syntax = Command::new("bash").arg("-n").arg(&bash).output().unwrap();
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    let out = env.run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("error[PALISADE_USAGE_INVALID]"),
        "{}",
        stderr(&out)
    );

    let page = stdout(&env.run(&["man"]));
    assert!(page.contains(".TH palisade 1"), "{page}");
    for subcommand in ["doctor", "decide", "run", "replay", "explain"] {
        assert!(
            page.contains(&format!("palisade\\-{subcommand}")),
            "{subcommand}"
        );
    }
    assert!(!page.contains("__sandbox"));
}

/// An allowed host Unix socket is measured before deciding, recorded in the input, granted in
/// the plan (and said by `decide`), and the record replays; a socket named like Docker's is
/// refused with its code, and that refusal replays too.
#[test]
fn allowed_unix_sockets_are_measured_recorded_and_replayed() {
    let env = Env::new();
    let socket = env.path("agent.sock");
    let _agent = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let docker = env.path("docker.sock");
    let _docker = std::os::unix::net::UnixListener::bind(&docker).unwrap();
    let audit = env.path("decisions.jsonl");
    let audit_arg = audit.to_str().unwrap();
    let out = env
        .cmd(&[
            "decide",
            "--record",
            audit_arg,
            "--allow-unix-socket",
            socket.to_str().unwrap(),
        ])
        .env("SSH_AUTH_SOCK", &socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let real = std::fs::canonicalize(&socket).unwrap();
    let said = stdout(&out);
    assert!(said.contains("sockets   "), "{said}");
    let record: Value = serde_json::from_str(
        std::fs::read_to_string(&audit)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let fact = &record["input"]["host"]["unixSockets"][0];
    assert_eq!(fact["kind"], "socket", "{record}");
    assert_eq!(fact["target"], real.to_str().unwrap());
    assert_eq!(
        record["input"]["host"]["sshAuthSock"],
        socket.to_str().unwrap()
    );
    let output: Value = serde_json::from_str(record["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        output["plan"]["unixSockets"][0]["target"],
        real.to_str().unwrap()
    );
    assert_eq!(
        output["plan"]["environment"]["explicitSecrets"],
        json!(["SSH_AUTH_SOCK"])
    );

    let refused = env.run(&[
        "decide",
        "--record",
        audit_arg,
        "--allow-unix-socket",
        docker.to_str().unwrap(),
    ]);
    assert_ne!(refused.status.code(), Some(0));
    assert!(
        stderr(&refused).contains("SANDBOX_UNIX_SOCKET_REFUSED"),
        "{}",
        stderr(&refused)
    );

    let (code, results) = replay_json(&env, &[audit_arg]);
    assert_eq!(code, Some(0), "{results:?}");
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r["status"] == "REPRODUCED"),
        "{results:?}"
    );
}

/// A real audit file of 1,000 runs, 50 at a time, is one hash chain: an untouched copy verifies
/// in full, and each tampering is reported at its line and by its kind — a changed byte where
/// replay alone sees nothing (the record's context), a record removed, a forged record inserted
/// with a well-formed link, two records swapped; and, against the checkpoint the runs kept apart
/// (`--checkpoint`), the tail cut off, which the chain alone cannot see. (Signatures are not
/// built yet.)
#[test]
fn replay_finds_where_the_chain_breaks() {
    const RUNS: usize = 1000;
    const AT_ONCE: usize = 50;
    let env = Env::new();
    let audit = env.path("audit.jsonl");
    let audit_arg = audit.to_str().unwrap().to_owned();
    let checkpoint = env.path("checkpoint.json");
    let checkpoint_arg = checkpoint.to_str().unwrap().to_owned();
    for _ in 0..RUNS / AT_ONCE {
        let children: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                env.cmd(&[
                    "run",
                    "--quiet",
                    "--audit",
                    &audit_arg,
                    "--checkpoint",
                    &checkpoint_arg,
                    "--",
                    "true",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", stderr(&out));
        }
    }
    let original = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    assert_eq!(lines.len(), 2 * RUNS);

    let out = env.run(&["replay", &audit_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "CHAIN_OK   {} chained lines, seq 1 to {}",
            2 * RUNS,
            2 * RUNS
        )),
        "{}",
        stdout(&out).lines().last().unwrap_or_default()
    );

    // The first chain break of a tampered copy: its line and kind, and the exit code.
    let first_break = |name: &str, tampered: Vec<String>| -> (usize, String, Option<i32>, String) {
        let path = env.write(name, tampered.join("\n") + "\n");
        let (code, results) = replay_json(&env, &[path.to_str().unwrap()]);
        let broken = results
            .iter()
            .find(|r| r["status"] == "CHAIN_BROKEN")
            .unwrap_or_else(|| panic!("{name}: no chain break reported"));
        let detail = broken["details"][0].as_str().unwrap().to_owned();
        let kind = detail.split(':').next().unwrap().to_owned();
        // Besides the chain, replay sees at most an outcome whose decision is gone, or (the
        // forged record) a run without an outcome.
        let others: Vec<&Value> = results
            .iter()
            .filter(|r| !matches!(r["status"].as_str(), Some("REPRODUCED" | "CHAIN_BROKEN")))
            .collect();
        assert!(
            others
                .iter()
                .all(|r| r["details"][0] == "run outcome for unknown decision"
                    || r["status"] == "INTERRUPTED"),
            "{name}: {others:?}"
        );
        (
            broken["line"].as_u64().unwrap() as usize,
            kind,
            code,
            detail,
        )
    };
    let copy = || {
        lines
            .iter()
            .map(|l| (*l).to_owned())
            .collect::<Vec<String>>()
    };

    // A changed byte in a decision's context (time): every record still reproduces.
    let mut changed = copy();
    let at = (1..changed.len())
        .find(|&i| i > 700 && changed[i].contains("\"schemaVersion\":\"palisade.audit/v1\""))
        .unwrap();
    changed[at] = changed[at].replacen("\"time\":\"2", "\"time\":\"1", 1);
    assert_ne!(changed[at], lines[at]);
    let (line, kind, code, _) = first_break("changed.jsonl", changed);
    assert_eq!((line, kind.as_str(), code), (at + 2, "changed", Some(5)));

    let mut removed = copy();
    removed.remove(500);
    let (line, kind, _, detail) = first_break("removed.jsonl", removed);
    assert_eq!((line, kind.as_str()), (501, "removed"), "{detail}");

    // A forged record with a well-formed link to the line before it: the next line tells.
    let mut forged = copy();
    let mut record: Value = serde_json::from_str(lines[300]).unwrap();
    record["context"]["runId"] = json!("forged");
    let prev = palisade::audit::chain::link_after(Some(lines[299].as_bytes()));
    record["chain"] = serde_json::to_value(&prev).unwrap();
    forged.insert(300, record.to_string());
    let (line, kind, _, detail) = first_break("forged.jsonl", forged);
    assert_eq!((line, kind.as_str()), (302, "inserted"), "{detail}");

    let mut swapped = copy();
    swapped.swap(800, 801);
    let (line, kind, _, detail) = first_break("swapped.jsonl", swapped);
    assert_eq!((line, kind.as_str()), (801, "reordered"), "{detail}");

    // The checkpoint names the file's last line; with it, a cut-off tail is found, without it
    // not. The untouched file agrees with it.
    let head: Value = serde_json::from_slice(&std::fs::read(&checkpoint).unwrap()).unwrap();
    assert_eq!(head["seq"], json!(2 * RUNS), "{head}");
    let (code, results) = replay_json(&env, &[&audit_arg, "--checkpoint", &checkpoint_arg]);
    assert_eq!(code, Some(0), "{:?}", results.last());
    let cut = env.write("cut.jsonl", lines[..lines.len() - 10].join("\n") + "\n");
    let cut_arg = cut.to_str().unwrap();
    let (code, results) = replay_json(&env, &[cut_arg]);
    assert_eq!(code, Some(0), "the chain alone cannot see a cut tail");
    assert!(results.iter().all(|r| r["status"] != "CHAIN_BROKEN"));
    let (code, results) = replay_json(&env, &[cut_arg, "--checkpoint", &checkpoint_arg]);
    assert_eq!(code, Some(5));
    let broken = results
        .iter()
        .find(|r| r["status"] == "CHAIN_BROKEN")
        .unwrap();
    assert_eq!(broken["line"], json!(2 * RUNS - 10), "{broken}");
    assert!(
        broken["details"][0].as_str().unwrap().starts_with("cut: "),
        "{broken}"
    );
}

/// A malformed `--input` or `--facts` is refused at its field path, as a taskpack's errors are
/// (`probes[0].backend`), not only at a line and column.
#[test]
fn a_malformed_input_names_its_field_path() {
    let env = Env::new();
    let input = json!({
        "document": null,
        "documentName": "(none)",
        "host": {"os": "linux", "arch": "x86_64", "sessionKind": "cli", "githubActions": false,
                 "allowDirectDedicated": false, "homeDir": "/home/u", "workspaceDir": "/w",
                 "writableRoots": [], "defaultBackendOrder": ["linux-bwrap"]},
        "probes": [{"backend": "bwrapp", "available": true, "reason": "", "capabilities": [],
                    "networkModes": [], "networkBridge": false, "version": "", "limitations": []}]
    });
    let path = env.write("input.json", input.to_string());
    let out = env.run(&["decide", "--input", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("error[PALISADE_INPUT_INVALID]")
            && err.contains("at probes[0].backend: unknown variant `bwrapp`"),
        "{err}"
    );
    let mut facts = input.clone();
    facts.as_object_mut().unwrap().remove("document");
    facts.as_object_mut().unwrap().remove("documentName");
    facts["host"]["sessionKind"] = json!("laptop");
    let path = env.write("facts.json", facts.to_string());
    let out = env.run(&["decide", "--facts", path.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(
        err.contains("at host.sessionKind: unknown variant `laptop`"),
        "{err}"
    );
}

/// The decision cache (#38): `decide` twice and once with `--no-cache` give the same record
/// (its context and chain aside), each REPRODUCED by replay; the second came from the cache.
/// An entry whose bytes changed is not used (said on stderr), the decision is made afresh and
/// the entry rewritten; an entry of another engine is not used; another input misses.
#[test]
fn the_decision_cache_gives_the_engines_bytes_and_is_never_trusted_blindly() {
    let env = Env::new();
    let audit = env.path("decisions.jsonl");
    let audit_arg = audit.to_str().unwrap();
    let decide = |extra: &[&str]| {
        let mut args = vec!["decide", "--json", "--record", audit_arg];
        args.extend(extra);
        env.run(&args)
    };
    let first = decide(&[]);
    assert!(first.status.success(), "{}", stderr(&first));
    let entries = || -> Vec<PathBuf> {
        let dir = env.path("cache/decisions");
        let mut list: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|read| read.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        list.retain(|p| p.extension().is_some_and(|e| e == "json"));
        list.sort();
        list
    };
    assert_eq!(entries().len(), 1, "the decision was kept");
    let entry = entries()[0].clone();
    let second = decide(&[]);
    let third = decide(&["--no-cache"]);
    assert_eq!(stdout(&second), stdout(&first));
    assert_eq!(stdout(&third), stdout(&first));
    assert!(stderr(&second).is_empty(), "{}", stderr(&second));
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| {
            let mut record: Value = serde_json::from_str(l).unwrap();
            let map = record.as_object_mut().unwrap();
            map.remove("context");
            map.remove("chain");
            record
        })
        .collect();
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| *r == records[0]), "{records:?}");
    let (code, results) = replay_json(&env, &[audit_arg]);
    assert_eq!(code, Some(0), "{results:?}");

    // The second decision was read from the cache: an entry consistent with itself (its digest
    // recomputed) but whose plan says something else is what `decide` then prints — and replay
    // shows it is not the engine's.
    let original = std::fs::read_to_string(&entry).unwrap();
    let mut forged: Value = serde_json::from_str(&original).unwrap();
    let canonical = forged["canonicalJson"].as_str().unwrap().replacen(
        "\"warnings\":[]",
        "\"warnings\":[\"from the cache\"]",
        1,
    );
    assert_ne!(canonical, forged["canonicalJson"].as_str().unwrap());
    forged["digest"] = json!(sha256_bytes(canonical.as_bytes()));
    forged["canonicalJson"] = json!(canonical);
    std::fs::write(&entry, forged.to_string()).unwrap();
    let hit = decide(&[]);
    assert!(stdout(&hit).contains("from the cache"), "{}", stdout(&hit));
    let (code, results) = replay_json(&env, &[audit_arg]);
    assert_eq!(code, Some(5));
    assert_eq!(results[3]["status"], "DIVERGED", "{results:?}");

    // A byte changed without its digest: not used, said, decided afresh, rewritten.
    let mut altered: Value = serde_json::from_str(&original).unwrap();
    altered["canonicalJson"] = json!(altered["canonicalJson"].as_str().unwrap().replacen(
        "\"warnings\":[]",
        "\"warnings\":[\"x\"]",
        1
    ));
    assert_ne!(altered.to_string(), original);
    std::fs::write(&entry, altered.to_string()).unwrap();
    let afresh = decide(&[]);
    assert_eq!(stdout(&afresh), stdout(&first));
    assert!(
        stderr(&afresh).contains("decision cache") && stderr(&afresh).contains("not used"),
        "{}",
        stderr(&afresh)
    );
    assert_eq!(std::fs::read_to_string(&entry).unwrap(), original);

    // Made by another engine (its identity changed, its digest kept): not used.
    let mut other: Value = serde_json::from_str(&original).unwrap();
    other["engine"]["engineVersion"] = json!("0.0.0-other");
    std::fs::write(&entry, other.to_string()).unwrap();
    let afresh = decide(&[]);
    assert_eq!(stdout(&afresh), stdout(&first));
    assert!(
        stderr(&afresh).contains("another engine"),
        "{}",
        stderr(&afresh)
    );

    // Another input (one more denied path) misses: a second entry.
    let other_input = decide(&["--deny-read", "~/y"]);
    assert!(other_input.status.success(), "{}", stderr(&other_input));
    assert_eq!(entries().len(), 2);
}
