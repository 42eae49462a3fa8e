//! Outcome records hold their shape: every field's name and type, for each kind of run and
//! backend (bwrap, Landlock; the docker one is in tests/docker.rs), as `tests/outcome-shapes/`
//! recorded it. How outcomes are built may change; what a reader of the audit file finds in them
//! does not, unless a commit says why.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[path = "../../tests/support/outcome_shape.rs"]
mod outcome_shape;

const PALISADE: &str = env!("CARGO_BIN_EXE_palisade");

/// Runs `palisade run ARGS` in a workspace of its own (HOME beside it, with a file `secret`)
/// and gives the run's outcome as the audit file recorded it.
fn outcome_of(args: &[&str]) -> Value {
    // Not under /tmp: bwrap gives the sandbox a private /tmp.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::create_dir_all(dir.path().join("ws")).unwrap();
    std::fs::write(dir.path().join("secret"), "s\n").unwrap();
    let audit = dir.path().join("audit.jsonl");
    let out = Command::new(PALISADE)
        .arg("run")
        .arg("--audit")
        .arg(&audit)
        .args(args)
        .env("PALISADE_CACHE_DIR", dir.path().join("cache"))
        .env("HOME", dir.path())
        .current_dir(dir.path().join("ws"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = audit_lines(&audit);
    assert_eq!(lines.len(), 2, "a decision and an outcome: {stderr}");
    lines[1]["outcome"].clone()
}

fn audit_lines(audit: &Path) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What every observer of a run can see: a denied file read, refused system calls.
const OBSERVED: &str = "cat ~/secret; unshare -U true; exit 3";

#[test]
fn a_bwrap_run_that_exits_keeps_its_shape() {
    let outcome = outcome_of(&["--backend", "linux-bwrap", "--", "sh", "-c", "exit 3"]);
    assert_eq!(outcome["exitCode"], 3, "{outcome}");
    outcome_shape::assert_shape("bwrap-exit", &outcome);
}

#[test]
fn a_bwrap_run_with_every_observer_keeps_its_shape() {
    let outcome = outcome_of(&[
        "--backend",
        "linux-bwrap",
        "--deny-read",
        "~/secret",
        "--allow-host-port",
        "18555",
        "--",
        "bash",
        "-c",
        OBSERVED,
    ]);
    assert_eq!(outcome["exitCode"], 3, "{outcome}");
    assert!(outcome["network"].is_object(), "{outcome}");
    assert!(outcome["fileObserver"].is_object(), "{outcome}");
    outcome_shape::assert_shape("bwrap-observed", &outcome);
}

#[test]
fn a_landlock_run_with_its_observers_keeps_its_shape() {
    let outcome = outcome_of(&[
        "--backend",
        "linux-landlock",
        "--deny-read",
        "~/secret",
        "--",
        "bash",
        "-c",
        OBSERVED,
    ]);
    assert_eq!(outcome["exitCode"], 3, "{outcome}");
    assert!(outcome["seccompObserver"].is_object(), "{outcome}");
    outcome_shape::assert_shape("landlock-observed", &outcome);
}

#[test]
fn a_run_its_budget_ended_keeps_its_shape() {
    let outcome = outcome_of(&[
        "--backend",
        "linux-bwrap",
        "--timeout",
        "300ms",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(outcome["endedBy"], "wall-clock", "{outcome}");
    outcome_shape::assert_shape("bwrap-timeout", &outcome);
}

#[test]
fn a_command_that_cannot_be_found_keeps_its_shape() {
    // bwrap's launcher resolves the command first (bwrap would report a failed exec as status
    // 1); under Landlock, init's exec answers 127 itself, a run like any other.
    let outcome = outcome_of(&["--backend", "linux-bwrap", "--", "no-such-command-here"]);
    assert_eq!(outcome["endedBy"], "not-executed", "{outcome}");
    outcome_shape::assert_shape("not-executed", &outcome);
}
