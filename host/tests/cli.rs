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
        "capabilities": caps, "networkModes": modes, "domainFiltering": false,
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
    assert!(stdout(&out).contains("package palisade:engine@0.1.0;"));
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
    let ssh = env.dir.path().join(".ssh").display().to_string();
    assert_eq!(report["plan"]["deniedReadPaths"], json!([ssh]));
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
    assert!(err.contains("linux-landlock: insufficient"), "{err}");
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
