//! `palisade run` as a user sees it: statuses passed through, refusals launch nothing, the audit
//! record precedes the launch, budgets end runs with a reason, the environment is allowlisted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

#[path = "../../tests/support/reachable.rs"]
mod reachable;

const PALISADE: &str = env!("CARGO_BIN_EXE_palisade");

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        // Not under /tmp: bwrap gives the sandbox a private /tmp, and the tests look at the
        // workspace from the host afterwards.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        Env { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn taskpack(&self, backend: &str, extra: &str) -> PathBuf {
        let path = self.path("taskpack.yaml");
        std::fs::write(
            &path,
            format!(
                "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {{name: t}}\nspec:\n{extra}  sandbox:\n    preferredBackends: [{backend}]\n"
            ),
        )
        .unwrap();
        path
    }

    fn run(&self, args: &[&str]) -> Output {
        self.palisade("run", args)
    }

    fn palisade(&self, subcommand: &str, args: &[&str]) -> Output {
        Command::new(PALISADE)
            .arg(subcommand)
            .args(args)
            .env("PALISADE_CACHE_DIR", self.path("cache"))
            .env("HOME", self.dir.path())
            .env("PALISADE_TEST_SECRET_TOKEN", "hunter2")
            .current_dir(self.path("ws"))
            .output()
            .unwrap()
    }

    fn audit_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const BACKENDS: [&str; 3] = ["linux-bwrap", "linux-landlock", "direct-dedicated"];

fn taskpack_for(env: &Env, backend: &str) -> PathBuf {
    // direct-dedicated cannot enforce `networkMode: none`; ask for what it can do.
    if backend == "direct-dedicated" {
        let path = env.path("taskpack.yaml");
        std::fs::write(
            &path,
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  sandbox:\n    preferredBackends: [direct-dedicated]\n    networkMode: allow-outbound\n",
        )
        .unwrap();
        path
    } else {
        env.taskpack(backend, "")
    }
}

fn run_args<'a>(taskpack: &'a Path, audit: &'a Path, backend: &str) -> Vec<&'a str> {
    let mut args = vec![
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
    ];
    if backend == "direct-dedicated" {
        args.push("--allow-direct-dedicated");
    }
    args
}

#[test]
fn exit_status_passes_through_on_every_backend() {
    for backend in BACKENDS {
        let env = Env::new();
        let taskpack = taskpack_for(&env, backend);
        let audit = env.path("audit.jsonl");
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend(["--", "sh", "-c", "echo out; echo err >&2; exit 7"]);
        let out = env.run(&args);
        assert_eq!(
            out.status.code(),
            Some(7),
            "{backend}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), "out\n", "{backend}");
        assert!(text(&out.stderr).contains("err"), "{backend}");

        // A command killed by a signal exits 128+N.
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend(["--", "sh", "-c", "kill -TERM $$"]);
        let out = env.run(&args);
        assert_eq!(
            out.status.code(),
            Some(128 + 15),
            "{backend}: {}",
            text(&out.stderr)
        );

        // Decision before launch, outcome after, bound by digest; replay reproduces.
        let lines = env.audit_lines();
        assert_eq!(lines.len(), 4, "{backend}");
        assert_eq!(lines[0]["schemaVersion"], "palisade.audit/v1");
        assert_eq!(lines[1]["schemaVersion"], "palisade.run-outcome/v1");
        assert_eq!(lines[1]["decisionDigest"], lines[0]["outputDigest"]);
        assert_eq!(lines[1]["runId"], lines[0]["context"]["runId"]);
        assert_eq!(lines[1]["outcome"]["exitCode"], 7);
        assert_eq!(lines[1]["outcome"]["treeEmpty"], true);
        let decision: Value = serde_json::from_str(lines[0]["output"].as_str().unwrap()).unwrap();
        assert_eq!(decision["backend"], backend);
        let replay = Command::new(PALISADE)
            .args(["replay", audit.to_str().unwrap()])
            .env("PALISADE_CACHE_DIR", env.path("cache"))
            .output()
            .unwrap();
        assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stdout));
    }
}

#[test]
fn every_outcome_has_its_timings_and_timings_prints_them_after_the_command() {
    const PHASES: [&str; 12] = [
        "configurationUs",
        "probesUs",
        "filesystemFactsUs",
        "componentLoadUs",
        "decideUs",
        "auditWriteUs",
        "planUs",
        "spawnUs",
        "sandboxSetupUs",
        "commandUs",
        "reapAndVerifyUs",
        "cleanupUs",
    ];
    for backend in BACKENDS {
        let env = Env::new();
        let taskpack = taskpack_for(&env, backend);
        let audit = env.path("audit.jsonl");
        let json = env.path("outcome.json");
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend(["--timings", "--json", json.to_str().unwrap()]);
        args.extend(["--", "sh", "-c", "echo out; echo err >&2"]);
        let out = env.run(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{backend}: {stderr}");
        assert_eq!(text(&out.stdout), "out\n", "{backend}");
        // The table follows the command's output, one row per phase, the total last but one.
        let table = stderr
            .find("palisade: timings")
            .unwrap_or_else(|| panic!("{backend}: no table in {stderr}"));
        assert!(stderr.find("err\n").unwrap() < table, "{backend}: {stderr}");
        let rows: Vec<&str> = stderr[table..].lines().skip(1).collect();
        let labels: Vec<&str> = rows
            .iter()
            .map(|row| row.get(2..19).unwrap().trim())
            .collect();
        assert_eq!(
            labels,
            [
                "process start",
                "configuration",
                "probes",
                "filesystem facts",
                "component load",
                "decide",
                "audit write",
                "plan",
                "spawn",
                "sandbox setup",
                "command",
                "reap and verify",
                "cleanup",
                "total",
                "outcome write",
                "decision cache",
            ],
            "{backend}: {stderr}"
        );
        // A fresh cache directory: the decision was the engine's (and is now kept).
        assert!(rows.last().unwrap().contains("miss"), "{backend}: {stderr}");
        assert_eq!(
            env.audit_lines()[1]["outcome"]["decisionCache"],
            "miss",
            "{backend}"
        );

        // The record holds the same figures: whole microseconds, every phase observed on these
        // backends (the start signal included), adding up to the total.
        let timings = &env.audit_lines()[1]["outcome"]["timings"];
        let keys: Vec<&str> = timings
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected: Vec<&str> = PHASES.to_vec();
        expected.extend(["processStartUs", "totalUs"]);
        expected.sort_unstable();
        assert_eq!(keys, expected, "{backend}");
        let sum: u64 = PHASES
            .iter()
            .map(|key| {
                timings[key]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{backend}: {key} in {timings}"))
            })
            .sum();
        assert_eq!(
            Some(sum),
            timings["totalUs"].as_u64(),
            "{backend}: {timings}"
        );
        assert!(timings["processStartUs"].is_u64(), "{backend}: {timings}");
        for (row, key) in rows.iter().skip(1).zip(PHASES) {
            let printed: u64 = row.get(19..29).unwrap().trim().parse().unwrap();
            assert_eq!(Some(printed), timings[key].as_u64(), "{backend}: {row}");
        }
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(&written["outcome"]["timings"], timings, "{backend}");

        // Without the flag: recorded all the same, not printed.
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend(["--", "true"]);
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(0), "{backend}");
        assert!(!text(&out.stderr).contains("timings"), "{backend}");
        assert!(env.audit_lines()[3]["outcome"]["timings"]["totalUs"].is_u64());
    }
}

#[test]
fn a_refusal_launches_nothing_and_exits_125() {
    let env = Env::new();
    // Landlock cannot enforce loopback-only: the only candidate is insufficient.
    let taskpack = env.path("taskpack.yaml");
    std::fs::write(
        &taskpack,
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  sandbox:\n    preferredBackends: [linux-landlock]\n    networkMode: loopback-only\n",
    )
    .unwrap();
    let marker = env.path("ws/launched");
    let audit = env.path("audit.jsonl");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).starts_with("error[SANDBOX_CAPABILITY_INSUFFICIENT]"),
        "{}",
        text(&out.stderr)
    );
    assert!(!marker.exists(), "a refused run must launch nothing");
    // The refusal is recorded, with no outcome line.
    let lines = env.audit_lines();
    assert_eq!(lines.len(), 1);

    // An invalid policy is refused the same way.
    std::fs::write(&taskpack, "kind: Taskpack\n").unwrap();
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).starts_with("error[SANDBOX_POLICY_INVALID]"));
    assert!(!marker.exists());

    // So is a bad flag.
    let out = env.run(&["--timeout", "soon", "--", "touch", marker.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(125));
    assert!(!marker.exists());
}

#[test]
fn missing_and_unexecutable_commands_are_127_and_126() {
    for backend in BACKENDS {
        let env = Env::new();
        let taskpack = taskpack_for(&env, backend);
        let audit = env.path("audit.jsonl");
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend(["--", "palisade-no-such-command"]);
        let out = env.run(&args);
        assert_eq!(
            out.status.code(),
            Some(127),
            "{backend}: {}",
            text(&out.stderr)
        );

        let script = env.path("ws/not-executable");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend(["--", script.to_str().unwrap()]);
        let out = env.run(&args);
        assert_eq!(
            out.status.code(),
            Some(126),
            "{backend}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn wall_clock_budget_ends_the_run_and_says_so() {
    for backend in BACKENDS {
        let env = Env::new();
        let taskpack = taskpack_for(&env, backend);
        let audit = env.path("audit.jsonl");
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend([
            "--timeout",
            "1s",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 60",
        ]);
        let started = std::time::Instant::now();
        let out = env.run(&args);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{backend}"
        );
        assert_eq!(
            out.status.code(),
            Some(128 + 9),
            "{backend}: {}",
            text(&out.stderr)
        );
        let lines = env.audit_lines();
        assert_eq!(
            lines[1]["outcome"]["endedBy"], "wall-clock",
            "{backend}: {}",
            lines[1]
        );
        // The budget is a denial of the run, tied to the plan's field, with what was measured,
        // and the user is told after the command ended.
        let denials = &lines[1]["outcome"]["denials"];
        assert_eq!(denials["total"], 1, "{backend}: {denials}");
        let event = &denials["events"][0];
        assert_eq!(event["kind"], "budget", "{backend}: {event}");
        assert_eq!(event["operation"], "wall-clock");
        assert_eq!(event["rule"], "plan.budgets.timeoutMillis");
        assert_eq!(event["observedBy"], "supervisor");
        assert_eq!(event["limit"], 1000);
        assert!(event["measured"].as_u64().unwrap() >= 1000, "{event}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("palisade: the sandbox refused 1 operation in run")
                && stderr.contains("the wall-clock limit of 1000 ms ended the run"),
            "{backend}: {stderr}"
        );
        // The command ignored SIGTERM: 137 is palisade's SIGKILL, and it says so.
        assert_eq!(lines[1]["outcome"]["graceExpired"], true, "{backend}");
        assert!(
            stderr.contains(
                "palisade: the wall-clock budget ran out; the command had not exited 2 s later"
            ) && stderr.contains("killed with SIGKILL"),
            "{backend}: {stderr}"
        );
        let explained = env.palisade("explain", &[audit.to_str().unwrap()]);
        assert_eq!(
            explained.status.code(),
            Some(0),
            "{}",
            text(&explained.stderr)
        );
        assert!(
            text(&explained.stdout).contains("to allow it: raise `--timeout`"),
            "{backend}: {}",
            text(&explained.stdout)
        );
        // A command that ends on SIGTERM needs no SIGKILL, and nothing says there was one.
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend(["--timeout", "1s", "--", "sleep", "60"]);
        let out = env.run(&args);
        assert_eq!(
            out.status.code(),
            Some(128 + 15),
            "{backend}: {}",
            text(&out.stderr)
        );
        let lines = env.audit_lines();
        let outcome = &lines.last().unwrap()["outcome"];
        assert_eq!(outcome["endedBy"], "wall-clock", "{backend}: {outcome}");
        assert!(
            outcome.get("graceExpired").is_none(),
            "{backend}: {outcome}"
        );
        assert!(
            !text(&out.stderr).contains("SIGKILL"),
            "{backend}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_run_without_denials_reports_none_and_the_outcome_goes_where_asked() {
    let env = Env::new();
    let taskpack = env.taskpack("linux-bwrap", "");
    let audit = env.path("audit.jsonl");
    let json = env.path("outcome.json");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo fine",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("refused"),
        "{}",
        text(&out.stderr)
    );
    let lines = env.audit_lines();
    assert_eq!(
        lines[1]["outcome"]["denials"],
        serde_json::json!({"total": 0, "dropped": 0, "events": []})
    );
    // `--json` is the outcome record itself, bound to the decision like the audit's.
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(written, lines[1]);
    let explained = env.palisade("explain", &[audit.to_str().unwrap()]);
    assert!(
        text(&explained.stdout).contains("nothing the sandbox observes was denied")
            && text(&explained.stdout)
                .contains("note: writes outside the writable roots are not observed"),
        "{}",
        text(&explained.stdout)
    );

    // On a descriptor the caller opened, and quiet: the summary is not printed.
    let script = format!(
        "{PALISADE} run --taskpack {} --quiet --timeout 1s --json fd:3 -- sleep 5 3>{}",
        taskpack.display(),
        env.path("fd3.json").display()
    );
    let quiet = Command::new("sh")
        .args(["-c", &script])
        .env("PALISADE_CACHE_DIR", env.path("cache"))
        .env("HOME", env.path(""))
        .current_dir(env.path("ws"))
        .output()
        .unwrap();
    assert_eq!(quiet.status.code(), Some(143), "{}", text(&quiet.stderr));
    assert!(
        !text(&quiet.stderr).contains("refused"),
        "{}",
        text(&quiet.stderr)
    );
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(env.path("fd3.json")).unwrap()).unwrap();
    assert_eq!(
        written["outcome"]["denials"]["events"][0]["operation"],
        "wall-clock"
    );

    // The command's own descriptors are not a destination, and nothing runs.
    let marker = env.path("ws/launched");
    let refused = env.run(&["--json", "fd:1", "--", "touch", marker.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(125));
    assert!(
        text(&refused.stderr).contains("PALISADE_INPUT_INVALID"),
        "{}",
        text(&refused.stderr)
    );
    assert!(!marker.exists());
}

#[test]
fn a_process_budget_that_ends_the_run_is_a_denial() {
    let env = Env::new();
    let taskpack = env.taskpack("linux-bwrap", "");
    let audit = env.path("audit.jsonl");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--max-procs",
        "4",
        "--",
        "sh",
        "-c",
        "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 20 & done; wait",
    ]);
    let lines = env.audit_lines();
    assert_eq!(
        lines[1]["outcome"]["endedBy"],
        "processes",
        "{}",
        text(&out.stderr)
    );
    let event = &lines[1]["outcome"]["denials"]["events"][0];
    assert_eq!(event["rule"], "plan.budgets.maxProcesses", "{event}");
    assert_eq!(event["limit"], 4);
    assert!(text(&out.stderr).contains("the processes limit of 4 processes ended the run"));
    // What the kernel applied is recorded: bwrap's monitor and PID 1 count in the tree, so the
    // limit is 4 + 2, and the outcome says so and why.
    let enforcement = lines[1]["outcome"]["enforcement"].as_array().unwrap();
    let processes: Vec<&Value> = enforcement
        .iter()
        .filter(|e| e["budget"] == "processes")
        .collect();
    assert!(!processes.is_empty(), "{enforcement:?}");
    for entry in processes {
        assert_eq!(entry["applied"], 6, "{entry}");
        assert_eq!(entry["because"], "launcher-processes", "{entry}");
    }
}

#[test]
fn taskpack_budgets_apply_and_flags_only_tighten() {
    let env = Env::new();
    let taskpack = env.taskpack("linux-bwrap", "  budgets: {timeoutSeconds: 1}\n");
    let audit = env.path("audit.jsonl");
    // The flag asks for more time; the policy's 1 s wins.
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--timeout",
        "60s",
        "--",
        "sleep",
        "30",
    ]);
    // `sleep` dies of the budget's SIGTERM (143); one that ignored it would get SIGKILL (137).
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
    let lines = env.audit_lines();
    assert_eq!(lines[1]["outcome"]["endedBy"], "wall-clock");
}

#[test]
fn secrets_in_the_environment_do_not_reach_the_command() {
    for backend in BACKENDS {
        let env = Env::new();
        let taskpack = taskpack_for(&env, backend);
        let audit = env.path("audit.jsonl");
        // Shown to be present in palisade's own environment first.
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend(["--", "sh", "-c", "env; echo TMPDIR=$TMPDIR"]);
        let out = env.run(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{backend}: {}",
            text(&out.stderr)
        );
        let stdout = text(&out.stdout);
        assert!(!stdout.contains("hunter2"), "{backend}: {stdout}");
        assert!(stdout.contains("PATH="), "{backend}: {stdout}");
        assert!(stdout.contains("TMPDIR=/"), "{backend}: {stdout}");
    }
}

/// bwrap reports its own setup failures with status 1, like a command's. As root on a workspace
/// owned by another user, bwrap (uid 0 mapped to 0 only) cannot create the mountpoint of a
/// missing denied path in it: nothing runs, and `palisade run` must say so with 125 — not
/// pass 1 through as if the command had failed. (A missing protected path no longer does:
/// palisade makes its placeholder itself, as root.)
#[test]
fn a_bwrap_setup_failure_is_125_not_the_commands_status() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("skipped: needs root (a workspace owned by another user)");
        return;
    }
    let env = Env::new();
    let ws = env.path("foreign");
    std::fs::create_dir(&ws).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).unwrap();
    let taskpack = env.path("taskpack.yaml");
    std::fs::write(
        &taskpack,
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {{name: t}}\nspec:\n  sandbox:\n    preferredBackends: [linux-bwrap]\n    deniedReadPaths: [{}]\n",
            ws.join("secret").display()
        ),
    )
    .unwrap();
    let audit = env.path("audit.jsonl");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--",
        "/bin/echo",
        "the-command-ran",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("could not set up the sandbox"), "{stderr}");
    assert!(stderr.contains("Can't mkdir"), "{stderr}");
    assert!(
        !text(&out.stdout).contains("the-command-ran"),
        "the command must not have run"
    );
    // The decision is followed by an outcome that says nothing was launched, and why.
    let lines = env.audit_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1]["decisionDigest"], lines[0]["outputDigest"]);
    assert_eq!(lines[1]["outcome"]["endedBy"], "not-launched");
    assert_eq!(lines[1]["outcome"]["exitCode"], 125);
    assert!(
        lines[1]["outcome"]["error"]
            .as_str()
            .unwrap()
            .contains("could not set up the sandbox")
    );
    // The placeholders palisade made for the missing protected paths went with the failure.
    assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0);
}

/// No silent downgrade: a backend that cannot keep the protected paths read-only (Landlock, for a
/// policy that did not require `protectedPathReadOnlyMask`) lets an existing `AGENTS.md` be
/// rewritten — and Palisade says so before the command starts, and the decision marks each
/// path unenforced. bwrap, which can, keeps it and says nothing.
#[test]
fn a_backend_that_cannot_protect_paths_says_so_before_the_command_starts() {
    let script = "echo changed > AGENTS.md && cat AGENTS.md";
    for backend in ["linux-landlock", "linux-bwrap"] {
        let env = Env::new();
        std::fs::write(env.path("ws/AGENTS.md"), "original\n").unwrap();
        let taskpack = env.taskpack(backend, "");
        let audit = env.path("audit.jsonl");
        let mut args = run_args(&taskpack, &audit, backend);
        args.extend(["--", "sh", "-c", script]);
        let out = env.run(&args);
        let stderr = text(&out.stderr);
        let agents = env.path("ws/AGENTS.md");
        let warned = stderr.contains(&format!(
            "palisade: protected paths are NOT read-only under `{backend}`"
        ));
        let plan = &serde_json::from_str::<Value>(env.audit_lines()[0]["output"].as_str().unwrap())
            .unwrap()["plan"];
        let enforced: Vec<bool> = plan["protectedPaths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["enforced"].as_bool().unwrap())
            .collect();
        // The seed's four and git's surface (the workspace is somewhere in a repository or not).
        assert!(enforced.len() >= 7, "{backend}: {enforced:?}");
        if backend == "linux-landlock" {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            assert_eq!(std::fs::read_to_string(&agents).unwrap(), "changed\n");
            assert!(warned, "{backend}: {stderr}");
            assert!(stderr.contains(&agents.display().to_string()), "{stderr}");
            assert!(enforced.iter().all(|e| !e));
        } else {
            assert_ne!(out.status.code(), Some(0), "{stderr}");
            assert_eq!(std::fs::read_to_string(&agents).unwrap(), "original\n");
            assert!(!warned, "{backend}: {stderr}");
            assert!(enforced.iter().all(|e| *e));
        }
    }
}

/// Landlock cannot keep git's hooks and config read-only inside the workspace: the run says so
/// before the command starts, and after it names the hook and the key the command planted;
/// `--require protectedPathReadOnlyMask` refuses the backend instead.
#[test]
fn landlock_says_git_is_writable_and_reports_what_was_planted() {
    let env = Env::new();
    let ws = env.path("ws");
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(&ws)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    let taskpack = env.taskpack("linux-landlock", "");
    let audit = env.path("audit.jsonl");
    let mut args = run_args(&taskpack, &audit, "linux-landlock");
    let script = "printf '#!/bin/sh\\necho planted\\n' > .git/hooks/post-checkout \
        && chmod +x .git/hooks/post-checkout && git config core.fsmonitor 'echo planted; false'";
    args.extend(["--", "sh", "-c", script]);
    let out = env.run(&args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("git's hooks and configuration are WRITABLE under `linux-landlock`"),
        "{stderr}"
    );
    let report = stderr
        .lines()
        .find(|line| line.contains("left what git RUNS"))
        .unwrap_or_else(|| panic!("no report: {stderr}"));
    assert!(
        report.contains("hook post-checkout") && report.contains("core.fsmonitor"),
        "{report}"
    );
    let outcome = env
        .audit_lines()
        .into_iter()
        .find(|line| line.get("outcome").is_some())
        .unwrap();
    let planted = &outcome["outcome"]["gitPlanted"][0];
    assert_eq!(planted["hooks"][0], "post-checkout", "{outcome}");
    assert_eq!(planted["config"][0]["key"], "core.fsmonitor", "{outcome}");

    // Required: no backend but one that masks them.
    let mut args = run_args(&taskpack, &audit, "linux-landlock");
    args.extend(["--require", "protectedPathReadOnlyMask", "--", "true"]);
    let out = env.run(&args);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
}

/// The command must not be able to rewrite the record of its own run: an audit file inside the
/// workspace (or reached through a symlink into it) is refused, and nothing is launched.
#[test]
fn an_audit_file_the_command_could_rewrite_is_refused() {
    let env = Env::new();
    let taskpack = env.taskpack("linux-bwrap", "");
    let marker = env.path("ws/ran");
    std::os::unix::fs::symlink(env.path("ws/real.jsonl"), env.path("link.jsonl")).unwrap();
    for audit in [env.path("ws/audit.jsonl"), env.path("link.jsonl")] {
        let out = env.run(&[
            "--taskpack",
            taskpack.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
            "--",
            "touch",
            marker.to_str().unwrap(),
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{stderr}");
        assert!(stderr.contains("PALISADE_INPUT_INVALID"), "{stderr}");
        assert!(!marker.exists(), "nothing may run");
        assert!(!env.path("ws/audit.jsonl").exists() && !env.path("ws/real.jsonl").exists());
    }
    // Once the symlink's target exists, it is recognised for what it is.
    std::fs::write(env.path("ws/real.jsonl"), "").unwrap();
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        env.path("link.jsonl").to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("could rewrite the record of its own run"),
        "{stderr}"
    );
    assert!(!marker.exists());
    assert_eq!(
        std::fs::read_to_string(env.path("ws/real.jsonl")).unwrap(),
        ""
    );
    std::fs::remove_file(env.path("ws/real.jsonl")).unwrap();
    // Outside every writable root, the same run goes ahead.
    let audit = env.path("audit.jsonl");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(marker.exists());
}

/// A managed controller passes a whole decision input: `run --input` launches from it exactly as
/// `decide --input` decides — after this host's own probes confirm every claim. A probe that
/// claims more than this host measured is refused, and nothing runs.
#[test]
fn a_managed_input_runs_only_with_claims_this_host_confirms() {
    let env = Env::new();
    let taskpack = env.taskpack("linux-bwrap", "");
    // A genuine input: what this host measures, as a controller would have recorded it.
    let recorded = env.path("decided.jsonl");
    let out = env.palisade(
        "decide",
        &[
            "--taskpack",
            taskpack.to_str().unwrap(),
            "--record",
            recorded.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line: Value =
        serde_json::from_str(std::fs::read_to_string(&recorded).unwrap().trim()).unwrap();
    let input = line["input"].clone();
    let input_file = env.path("input.json");
    std::fs::write(&input_file, input.to_string()).unwrap();
    let audit = env.path("audit.jsonl");
    let out = env.run(&[
        "--input",
        input_file.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo managed",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "managed\n");
    let record = &env.audit_lines()[0];
    assert_eq!(record["context"]["probeSource"], "input-file");
    // The input as given, plus the run's private temp dir as a writable root.
    let roots = record["input"]["host"]["writableRoots"].as_array().unwrap();
    assert_eq!(
        roots.len(),
        input["host"]["writableRoots"].as_array().unwrap().len() + 1
    );
    assert_eq!(record["input"]["probes"], input["probes"]);

    // Forged: Landlock claims to keep protected paths read-only, which it cannot.
    let mut forged = input.clone();
    for probe in forged["probes"].as_array_mut().unwrap() {
        if probe["backend"] == "linux-landlock" {
            probe["capabilities"]
                .as_array_mut()
                .unwrap()
                .push(Value::from("protectedPathReadOnlyMask"));
        }
    }
    std::fs::write(&input_file, forged.to_string()).unwrap();
    let marker = env.path("ws/ran");
    let out = env.run(&[
        "--input",
        input_file.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("error[HOST_FACTS_MISMATCH]"), "{stderr}");
    assert!(
        stderr.contains("`linux-landlock` is claimed to provide `protectedPathReadOnlyMask`"),
        "{stderr}"
    );
    assert!(!marker.exists(), "nothing may run");

    // Host facts that loosen this host's own: another home (where `~/.ssh` would resolve), an
    // opt-in to direct-dedicated the host did not give.
    let mut forged = input.clone();
    forged["host"]["homeDir"] = Value::from("/nonexistent-home");
    forged["host"]["allowDirectDedicated"] = Value::from(true);
    std::fs::write(&input_file, forged.to_string()).unwrap();
    let out = env.run(&[
        "--input",
        input_file.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("host.homeDir"), "{stderr}");
    assert!(stderr.contains("host.allowDirectDedicated"), "{stderr}");
    assert!(!marker.exists(), "nothing may run");
}

/// The seed's `loopback-only`: "used for local loopback MCP or runner bridges". A host HTTP
/// server (Python's `http.server`, as a user would start one) on a port the policy lists is
/// reached from inside with `curl` on 127.0.0.1 and ::1; a second one on an unlisted port is
/// not; the audit outcome lists each forwarded connection.
#[test]
fn listed_host_loopback_ports_are_reachable_and_nothing_else() {
    if Command::new("curl").arg("--version").output().is_err()
        || Command::new("python3").arg("--version").output().is_err()
    {
        println!("SKIPPED: curl or python3 is not installed");
        return;
    }
    let env = Env::new();
    let serve = |dir: &str| -> (std::process::Child, u16) {
        let root = env.path(dir);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("index.txt"), format!("served from {dir}\n")).unwrap();
        // Port 0: the OS picks; the server prints the port it got.
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import http.server,socketserver,sys\n\
                 class S(socketserver.ThreadingMixIn, http.server.HTTPServer):\n    address_family=__import__('socket').AF_INET6\n\
                 h=http.server.SimpleHTTPRequestHandler\n\
                 s=S(('::', 0), h)\n\
                 print(s.server_address[1], flush=True)\n\
                 s.serve_forever()",
            ])
            .current_dir(&root)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        (child, line.trim().parse().unwrap())
    };
    // A dual-stack server (`::`, v4-mapped) answers on 127.0.0.1 and ::1 alike.
    let (mut listed_server, listed) = serve("listed");
    let (mut other_server, other) = serve("other");
    let curl = |addr: &str, port: u16| -> String {
        format!("curl -sS --max-time 5 --noproxy '*' http://{addr}:{port}/index.txt")
    };
    let script = format!(
        "{} && {} && ({} && echo UNLISTED-REACHED || echo unlisted-refused)",
        curl("127.0.0.1", listed),
        curl("[::1]", listed),
        curl("127.0.0.1", other)
    );
    // Outside, both servers answer: the unlisted one is a real target.
    let outside = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(
        text(&outside.stdout).contains("UNLISTED-REACHED"),
        "{outside:?}"
    );

    let taskpack = env.taskpack("linux-bwrap", "");
    let mut yaml = std::fs::read_to_string(&taskpack).unwrap();
    yaml.push_str(&format!(
        "    networkMode: loopback-only\n    loopbackPorts: [{listed}]\n"
    ));
    std::fs::write(&taskpack, yaml).unwrap();
    let audit = env.path("audit.jsonl");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    // The same without a taskpack: `--allow-host-port` forms the list (and `loopback-only`).
    let listed_arg = listed.to_string();
    let by_flag = env.run(&[
        "--backend",
        "linux-bwrap",
        "--allow-host-port",
        &listed_arg,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    listed_server.kill().unwrap();
    other_server.kill().unwrap();
    let _ = listed_server.wait();
    let _ = other_server.wait();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout,
        text(&out.stderr)
    );
    assert_eq!(
        stdout,
        "served from listed\nserved from listed\nunlisted-refused\n",
        "{}",
        text(&out.stderr)
    );
    let lines = env.audit_lines();
    // The record keeps the decision's canonical JSON as text (its digest is over those bytes).
    let decision: Value = serde_json::from_str(lines[0]["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        decision["plan"]["network"],
        serde_json::json!({"mode": "loopback-only", "hostPorts": [listed]})
    );
    assert_eq!(decision["plan"]["budgets"]["helperProcesses"], 1);
    assert_eq!(
        text(&by_flag.stdout),
        "served from listed\nserved from listed\nunlisted-refused\n",
        "{}",
        text(&by_flag.stderr)
    );
    let network = &lines[1]["outcome"]["network"];
    assert_eq!(network["hostPorts"], serde_json::json!([listed]));
    let connections = network["connections"].as_array().unwrap();
    assert_eq!(connections.len(), 2, "{network:#}");
    for (connection, host) in connections.iter().zip(["127.0.0.1", "::1"]) {
        assert_eq!(connection["route"], "loopback-port");
        assert_eq!(connection["verdict"], "allowed");
        assert_eq!(connection["host"], host);
        assert_eq!(connection["port"], listed);
    }
}

/// A syscall the filter refuses and a socket the network mode `none` forbids are denials of the
/// run, observed through the filter's listener, with the same errors the command saw without
/// an observer; explain names the rule.
#[test]
fn refused_syscalls_and_sockets_are_observed_under_bwrap_and_landlock() {
    for backend in ["linux-bwrap", "linux-landlock"] {
        let env = Env::new();
        let taskpack = env.taskpack(backend, "");
        let audit = env.path("audit.jsonl");
        let out = env.run(&[
            "--taskpack",
            taskpack.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
            "--",
            "bash",
            "-c",
            "unshare -U true; unshare -U true; echo > /dev/tcp/127.0.0.1/9; echo done",
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{backend}: {stderr}");
        assert_eq!(text(&out.stdout), "done\n", "{backend}: {stderr}");
        // The command saw the filter's own errors.
        assert!(
            stderr.contains("Operation not permitted"),
            "{backend}: {stderr}"
        );
        let lines = env.audit_lines();
        let denials = &lines[1]["outcome"]["denials"];
        let events = denials["events"].as_array().unwrap();
        let unshare = events
            .iter()
            .find(|e| e["operation"] == "unshare")
            .unwrap_or_else(|| panic!("{backend}: {denials}"));
        assert_eq!(unshare["kind"], "syscall");
        assert_eq!(unshare["rule"], "plan.syscallFilter");
        assert_eq!(unshare["observedBy"], "seccomp");
        assert_eq!(unshare["count"], 2, "{backend}: {unshare}");
        assert!(
            unshare["reason"]
                .as_str()
                .unwrap()
                .contains("EPERM for `unshare`"),
            "{unshare}"
        );
        // Under Landlock a shell whose environment has no SHELL looks its user up, and glibc
        // first tries nscd's Unix socket: an AF_UNIX refusal of its own, also recorded.
        let socket = events
            .iter()
            .find(|e| e["operation"] == "socket" && e["target"] == "AF_INET")
            .unwrap_or_else(|| panic!("{backend}: {denials}"));
        assert_eq!(socket["kind"], "network");
        assert_eq!(socket["target"], "AF_INET");
        assert_eq!(socket["rule"], "plan.network.mode");
        assert_eq!(lines[1]["outcome"]["seccompObserver"]["listening"], true);
        assert!(
            stderr.contains(
                "palisade:   syscall: unshare (always) refused by `plan.syscallFilter` (2 times)"
            ),
            "{backend}: {stderr}"
        );
        let explained = env.palisade("explain", &[audit.to_str().unwrap()]);
        let explained = text(&explained.stdout);
        assert!(
            explained.contains("the network mode `none` allows no `AF_INET` socket")
                && explained.contains("`unshare` is refused on every backend"),
            "{backend}: {explained}"
        );
    }
}

/// Under bwrap a connection the sandbox cannot make is explained too, though the filter allows
/// `connect`: the observer reads the address and lets the kernel refuse it. An address off the
/// namespace's own loopback (IPv4 and IPv6) is a denial of the network mode; a host socket the
/// sandbox masks (also named through a symlink) or keeps under its private `/tmp` is a denial of
/// the built-in mask; a port of the host's loopback the plan does not list is a denial of the
/// host ports; a connection to the sandbox's own loopback is not a denial, even when nothing
/// listens there, and neither is one to a socket the command made itself.
#[cfg(target_os = "linux")]
#[test]
fn connections_the_sandbox_refuses_are_observed_under_bwrap() {
    let env = Env::new();
    // A host socket this test made, outside the workspace. It answers from the host, so the
    // sandbox's refusal below is the mask's doing.
    let socket_path = env.path("host.sock");
    let alias = env.path("alias.sock");
    std::os::unix::fs::symlink(&socket_path, &alias).unwrap();
    let host_tmp = tempfile::tempdir().unwrap();
    let tmp_socket = host_tmp.path().join("host.sock");
    // A port of the host's loopback, reachable from the host.
    let host_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host_port.local_addr().unwrap().port();
    std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let host_udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = host_udp.local_addr().unwrap().port();
    // An abstract socket of the host's network namespace.
    let abstract_name = format!("palisade-run-test-{}", std::process::id());
    let abstract_address = {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap()
    };
    let _host_abstract = std::os::unix::net::UnixListener::bind_addr(&abstract_address).unwrap();
    std::os::unix::net::UnixStream::connect_addr(&abstract_address).unwrap();
    let _listeners = [&socket_path, &tmp_socket].map(|path| {
        let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
        std::os::unix::net::UnixStream::connect(path).unwrap();
        listener
    });
    let taskpack = env.path("taskpack.yaml");
    std::fs::write(
        &taskpack,
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  sandbox:\n    preferredBackends: [linux-bwrap]\n    networkMode: loopback-only\n",
    )
    .unwrap();
    let script = format!(
        r#"
import errno, socket
def attempt(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.connect(address)
        print("connected")
    except OSError as e:
        print(errno.errorcode[e.errno])
attempt(socket.AF_INET, ("192.0.2.7", 443))
attempt(socket.AF_INET6, ("2001:db8::7", 443))
attempt(socket.AF_INET, ("127.0.0.1", 9))
attempt(socket.AF_INET, ("127.0.0.1", {port}))
mine = socket.socket()
mine.bind(("127.0.0.1", 0))
mine.listen()
attempt(socket.AF_INET, mine.getsockname())
attempt(socket.AF_UNIX, "{}")
attempt(socket.AF_UNIX, "{}")
attempt(socket.AF_UNIX, "{}")
own = socket.socket(socket.AF_UNIX)
own.bind("/tmp/own.sock")
own.listen()
attempt(socket.AF_UNIX, "/tmp/own.sock")
attempt(socket.AF_UNIX, "\0{abstract_name}")
datagrams = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for address in [("192.0.2.7", 53), ("127.0.0.1", {udp_port})]:
    try:
        datagrams.sendto(b"x", address)
        print("sent")
    except OSError as e:
        print(errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    print("raw")
except OSError as e:
    print(errno.errorcode[e.errno])
"#,
        socket_path.display(),
        alias.display(),
        tmp_socket.display(),
    );
    let audit = env.path("audit.jsonl");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--",
        "/usr/bin/python3",
        "-c",
        &script,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The command got the kernel's own answers.
    assert_eq!(
        text(&out.stdout),
        "ENETUNREACH\nENETUNREACH\nECONNREFUSED\nECONNREFUSED\nconnected\nECONNREFUSED\nECONNREFUSED\nENOENT\nconnected\nECONNREFUSED\nENETUNREACH\nsent\nEPERM\n",
        "{stderr}"
    );
    let lines = env.audit_lines();
    let denials = &lines[1]["outcome"]["denials"];
    let events = denials["events"].as_array().unwrap();
    let event = |target: &str| {
        events
            .iter()
            .find(|e| e["operation"] == "connect" && e["target"] == target)
            .unwrap_or_else(|| panic!("no event for {target}: {denials}"))
    };
    for target in ["192.0.2.7:443", "[2001:db8::7]:443"] {
        let ip = event(target);
        assert_eq!(ip["kind"], "network");
        assert_eq!(ip["rule"], "plan.network.mode");
        assert_eq!(ip["observedBy"], "seccomp");
        assert!(
            ip["reason"]
                .as_str()
                .unwrap()
                .contains("ENETUNREACH for `python3`"),
            "{ip}"
        );
    }
    for (path, errno) in [
        (&socket_path, "ECONNREFUSED"),
        (&alias, "ECONNREFUSED"),
        (&tmp_socket, "ENOENT"),
    ] {
        let hidden = event(path.to_str().unwrap());
        assert_eq!(hidden["rule"], "builtin.maskedHostSockets");
        assert!(
            hidden["reason"].as_str().unwrap().contains(errno),
            "{hidden}"
        );
    }
    // The sandbox's own loopback is not a denial.
    assert!(
        !events.iter().any(|e| e["target"] == "127.0.0.1:9"),
        "{denials}"
    );
    assert!(
        !events.iter().any(|e| e["target"] == "/tmp/own.sock"),
        "{denials}"
    );
    let host_port = event(&format!("127.0.0.1:{port}"));
    assert_eq!(host_port["rule"], "plan.network.hostPorts");
    let datagram = |target: &str| {
        events
            .iter()
            .find(|e| e["operation"] == "sendto" && e["target"] == target)
            .unwrap_or_else(|| panic!("no datagram event for {target}: {denials}"))
    };
    assert_eq!(datagram("192.0.2.7:53")["rule"], "plan.network.mode");
    let dropped = datagram(&format!("127.0.0.1:{udp_port}"));
    assert_eq!(dropped["rule"], "plan.network.hostPorts");
    assert!(
        dropped["reason"].as_str().unwrap().contains("dropped"),
        "{dropped}"
    );
    assert_eq!(
        event(&format!("@{abstract_name}"))["rule"],
        "builtin.maskedHostSockets"
    );
    // A raw socket: the kernel's refusal (no CAP_NET_RAW in the sandbox), explained.
    let raw = events
        .iter()
        .find(|e| e["operation"] == "socket" && e["target"] == "SOCK_RAW")
        .unwrap_or_else(|| panic!("no raw socket event: {denials}"));
    assert_eq!(raw["rule"], "builtin.noCapabilities", "{raw}");
    assert!(raw["reason"].as_str().unwrap().contains("EPERM"), "{raw}");
    assert_eq!(denials["total"], 10, "{denials}");
    assert!(
        stderr
            .contains("palisade:   network: connect 192.0.2.7:443 refused by `plan.network.mode`"),
        "{stderr}"
    );
    let explained = env.palisade("explain", &[audit.to_str().unwrap()]);
    let explained = text(&explained.stdout);
    assert!(
        explained
            .contains("the network mode `loopback-only` reaches only the sandbox's own loopback")
            && explained.contains("not allowed by a built-in mask")
            && explained.contains(&format!("to reach the host's port {port} (TCP only)"))
            && explained.contains(&format!("--allow-host-port {port}")),
        "{explained}"
    );
}

/// Under bwrap's `allow-outbound` the sandbox shares the host's network namespace, and Palisade's
/// stub scopes it out of the host's abstract sockets with Landlock: a connection to one is
/// refused and explained, while the sandbox's own abstract socket stays reachable, unrecorded.
#[test]
#[cfg(target_os = "linux")]
fn host_abstract_sockets_refused_under_allow_outbound_are_explained() {
    let abi = palisade_shims::landlock::kernel_abi().unwrap_or(0);
    if abi < palisade_shims::landlock_abi::SCOPES {
        eprintln!("skipped: Landlock has no scopes here (the bwrap probe lists the limitation)");
        return;
    }
    let env = Env::new();
    let name = format!("palisade-run-outbound-{}", std::process::id());
    let address = {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap()
    };
    let _host = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
    // Control: reachable from the host.
    std::os::unix::net::UnixStream::connect_addr(&address).unwrap();
    let taskpack = env.path("taskpack.yaml");
    std::fs::write(
        &taskpack,
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  sandbox:\n    preferredBackends: [linux-bwrap]\n    networkMode: allow-outbound\n",
    )
    .unwrap();
    let script = format!(
        r#"
import errno, socket
def attempt(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0" + name)
        print("connected")
    except OSError as e:
        print(errno.errorcode[e.errno])
attempt("{name}")
own = socket.socket(socket.AF_UNIX)
own.bind("\0{name}-own")
own.listen()
attempt("{name}-own")
"#
    );
    let audit = env.path("audit.jsonl");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--",
        "/usr/bin/python3",
        "-c",
        &script,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&out.stdout), "EPERM\nconnected\n", "{stderr}");
    let lines = env.audit_lines();
    let denials = &lines[1]["outcome"]["denials"];
    let events = denials["events"].as_array().unwrap();
    let host = events
        .iter()
        .find(|e| e["operation"] == "connect" && e["target"] == format!("@{name}"))
        .unwrap_or_else(|| panic!("no event for @{name}: {denials}"));
    assert_eq!(host["rule"], "builtin.maskedHostSockets", "{host}");
    assert!(host["reason"].as_str().unwrap().contains("EPERM"), "{host}");
    assert_eq!(denials["total"], 1, "{denials}");
}

/// A run told to stop before its command starts (here: while it waits for another run's probe)
/// stops cleanly: the shell's status for the signal, a line saying nothing ran, no temp dir
/// left, nothing half-recorded.
#[test]
fn a_run_stopped_before_its_command_starts_leaves_nothing() {
    let env = Env::new();
    let cache = env.path("cache");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(cache.join("probe.lock"))
        .unwrap();
    lock.lock().unwrap();
    let temp = env.path("tmp");
    std::fs::create_dir_all(&temp).unwrap();
    let audit = env.path("audit.jsonl");
    let child = Command::new(PALISADE)
        .args(["run", "--audit", audit.to_str().unwrap(), "--", "true"])
        .env("PALISADE_CACHE_DIR", &cache)
        .env("HOME", env.path(""))
        .env("TMPDIR", &temp)
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir(env.path("ws"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until it holds the lock file open: it is past its own setup and waiting to probe.
    let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
    let waiting = (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|target| target.ends_with("probe.lock"))
            })
    });
    assert!(waiting, "palisade never waited for the probe lock");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    drop(lock);
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 15), "{stderr}");
    assert!(
        stderr.contains("stopped by signal 15 before anything was decided"),
        "{stderr}"
    );
    let left: Vec<_> = walk(&temp);
    assert!(left.iter().all(|p| !p.contains("run-")), "{left:?}");
    assert!(!audit.exists() || env.audit_lines().is_empty());
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(entry.path().display().to_string());
        if entry.path().is_dir() {
            out.extend(walk(&entry.path()));
        }
    }
    out
}

/// A Landlock sandbox's `/proc` is the one its probe stated and the decision records, and
/// nothing else: the probe's line in the decision's limitations, `proc` in the run's outcome.
/// Whichever one, a process this test started with a secret in its argv (readable here, from
/// outside) is out of the command's reach. A decision input claiming the host's `/proc` (which
/// needs nothing of the host) runs with every process directory denied, the command's own
/// included, while `/proc`'s other files stay readable; an input that does not say which `/proc`
/// launches nothing.
#[test]
fn landlock_gets_the_proc_its_decision_records() {
    use palisade_shims::plan::LandlockProc;
    let env = Env::new();
    let secret = format!("palisade-argv-secret-{}", std::process::id());
    let mut victim = Command::new("sh")
        .args(["-c", "sleep 120; :", &secret])
        .spawn()
        .unwrap();
    let cmdline = format!("/proc/{}/cmdline", victim.id());
    // Outside, the secret is one read away.
    // Outside, the secret is one read away (once the victim's exec has set its arguments up:
    // `spawn` returns as soon as the new image is mapped).
    let mut outside = String::new();
    for _ in 0..2000 {
        outside = text(&std::fs::read(&cmdline).unwrap());
        if outside.contains(&secret) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(outside.contains(&secret), "{outside:?}");
    let read_victim = format!("cat {cmdline}; echo \" status=$?\"");

    let taskpack = env.taskpack("linux-landlock", "");
    let audit = env.path("audit.jsonl");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &read_victim,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains(&secret),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("status=1"),
        "{}",
        text(&out.stdout)
    );
    let lines = env.audit_lines();
    let decided: Value = serde_json::from_str(lines[0]["output"].as_str().unwrap()).unwrap();
    // The plan says which `/proc`, typed; the probe's line says it to people.
    let stated = &decided["plan"]["landlockProc"];
    assert!(stated.is_string(), "{decided}");
    assert_eq!(&lines[1]["outcome"]["proc"], stated);
    let limitations: Vec<String> = serde_json::from_value(decided["limitations"].clone()).unwrap();
    assert!(
        limitations.iter().any(|l| l.starts_with("/proc is the ")),
        "{limitations:?}"
    );
    assert_eq!(lines[1]["outcome"]["pid1"]["dumpable"], false);

    // A decision input as a controller would record it, claiming the host's `/proc`.
    let recorded = env.path("decided.jsonl");
    let out = env.palisade(
        "decide",
        &[
            "--taskpack",
            taskpack.to_str().unwrap(),
            "--record",
            recorded.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line: Value =
        serde_json::from_str(std::fs::read_to_string(&recorded).unwrap().trim()).unwrap();
    let input = line["input"].clone();
    let with_proc = |proc: Option<LandlockProc>| {
        let mut input = input.clone();
        for probe in input["probes"].as_array_mut().unwrap() {
            if probe["backend"] == "linux-landlock" {
                let kept: Vec<Value> = probe["limitations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|l| !l.as_str().unwrap().starts_with("/proc is the "))
                    .cloned()
                    .chain(proc.map(|p| Value::from(p.limitation("claimed by this test"))))
                    .collect();
                probe["limitations"] = Value::from(kept);
                match proc {
                    Some(proc) => probe["landlockProc"] = serde_json::to_value(proc).unwrap(),
                    None => {
                        probe.as_object_mut().unwrap().remove("landlockProc");
                    }
                }
            }
        }
        let file = env.path("input.json");
        std::fs::write(&file, input.to_string()).unwrap();
        file
    };
    let host = with_proc(Some(LandlockProc::HostProcessesDenied));
    let audit_host = env.path("audit-host.jsonl");
    let script = format!(
        "{read_victim}; cat /proc/self/status >/dev/null; echo \" self=$?\"; \
         grep -c MemTotal /proc/meminfo"
    );
    let out = env.run(&[
        "--input",
        host.to_str().unwrap(),
        "--audit",
        audit_host.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!stdout.contains(&secret), "{stdout}");
    assert!(stdout.contains("status=1"), "{stdout}");
    assert!(stdout.contains("self=1"), "{stdout}");
    assert!(stdout.ends_with("1\n"), "{stdout}");
    let host_lines: Vec<Value> = std::fs::read_to_string(&audit_host)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(host_lines[1]["outcome"]["proc"], "host-processes-denied");

    // A probe that does not say which `/proc`: nothing is launched.
    let silent = with_proc(None);
    let marker = env.path("ws/ran");
    let out = env.run(&[
        "--input",
        silent.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("which /proc the sandbox gets"), "{stderr}");
    assert!(!marker.exists(), "nothing may run");

    victim.kill().unwrap();
    victim.wait().unwrap();
}

/// `clone3` and `openat2` get ENOSYS only so that libc falls back to calls the filter can read:
/// a program that starts threads is not told the sandbox refused anything.
#[test]
fn starting_threads_is_not_a_denial() {
    for backend in ["linux-bwrap", "linux-landlock"] {
        let env = Env::new();
        let taskpack = env.taskpack(backend, "");
        let audit = env.path("audit.jsonl");
        let out = env.run(&[
            "--taskpack",
            taskpack.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
            "--",
            // Not a `python3` found on PATH: pyenv's is a bash script, and bash without SHELL
            // looks its user up (an nscd socket, refused under Landlock and rightly reported).
            "/usr/bin/python3",
            "-c",
            "import threading\nts = [threading.Thread(target=print) for _ in range(4)]\n[t.start() for t in ts]\n[t.join() for t in ts]",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{backend}: {}",
            text(&out.stderr)
        );
        assert!(
            !text(&out.stderr).contains("refused"),
            "{backend}: {}",
            text(&out.stderr)
        );
        assert_eq!(env.audit_lines()[1]["outcome"]["denials"]["total"], 0);
    }
}

/// Issue 12: a tool's cache is writable by name (`--cache`), nothing else of the home is, and
/// the credential store beside cargo's registry stays denied. Real `npm` writes its cache
/// offline (`npm cache verify`); the others are written to where each tool keeps its cache.
#[test]
fn tool_caches_are_writable_by_name_and_nothing_else_of_the_home() {
    let npm = Command::new("npm").arg("--version").output().is_ok();
    for backend in ["linux-bwrap", "linux-landlock"] {
        let env = Env::new();
        let taskpack = env.taskpack(backend, "");
        std::fs::create_dir_all(env.path(".cargo")).unwrap();
        std::fs::write(
            env.path(".cargo/credentials.toml"),
            "token = \"sekrit-cargo\"\n",
        )
        .unwrap();
        std::fs::write(env.path(".bashrc"), "# untouched\n").unwrap();
        let script = format!(
            "touch ~/.cargo/registry/probe ~/.cargo/git/probe ~/.npm/probe ~/.cache/pip/probe && echo caches-written; \
             {} \
             echo x >> ~/.bashrc 2>/dev/null && echo BASHRC-WRITTEN; \
             git config --global user.name x 2>/dev/null && echo GITCONFIG-WRITTEN; \
             cat ~/.cargo/credentials.toml 2>/dev/null; true",
            if npm {
                "npm cache verify >/dev/null 2>&1 && echo npm-cache-verified;"
            } else {
                ""
            }
        );
        let out = env.run(&[
            "--taskpack",
            taskpack.to_str().unwrap(),
            "--cache",
            "cargo",
            "--cache",
            "npm",
            "--cache",
            "pip",
            "--quiet",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{backend}: {}",
            text(&out.stderr)
        );
        assert!(
            stdout.contains("caches-written"),
            "{backend}: {stdout} {}",
            text(&out.stderr)
        );
        if npm {
            assert!(stdout.contains("npm-cache-verified"), "{backend}: {stdout}");
            assert!(
                env.path(".npm/_cacache").is_dir(),
                "{backend}: npm wrote no cache"
            );
        }
        assert!(!stdout.contains("BASHRC-WRITTEN"), "{backend}: {stdout}");
        assert!(!stdout.contains("GITCONFIG-WRITTEN"), "{backend}: {stdout}");
        assert!(!stdout.contains("sekrit-cargo"), "{backend}: {stdout}");
        assert_eq!(
            std::fs::read_to_string(env.path(".bashrc")).unwrap(),
            "# untouched\n"
        );
        assert!(env.path(".cargo/registry/probe").exists());
        assert!(env.path(".cache/pip/probe").exists());
    }
    // A name that is neither a known tool nor an absolute path is refused, nothing launched.
    let env = Env::new();
    let out = env.run(&["--cache", "nonsense", "--", "sh", "-c", "echo LAUNCHED"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(!text(&out.stdout).contains("LAUNCHED"));
    assert!(
        text(&out.stderr).starts_with("error[PALISADE_INPUT_INVALID]: --cache `nonsense`"),
        "{}",
        text(&out.stderr)
    );
}

/// Certificate-authority variables pass by default (a custom CA behind a corporate proxy);
/// a token beside them does not.
#[test]
fn certificate_variables_pass_by_default() {
    let env = Env::new();
    let taskpack = env.taskpack("linux-bwrap", "");
    let out = Command::new(PALISADE)
        .args(["run", "--quiet", "--taskpack", taskpack.to_str().unwrap(), "--"])
        .args(["sh", "-c", "echo \"$SSL_CERT_FILE|$NODE_EXTRA_CA_CERTS|$REQUESTS_CA_BUNDLE|$CURL_CA_BUNDLE|$SSL_CERT_DIR|${PALISADE_TEST_SECRET_TOKEN:-no-token}\""])
        .env("PALISADE_CACHE_DIR", env.path("cache"))
        .env("HOME", env.dir.path())
        .env("SSL_CERT_FILE", "/etc/ssl/corp.pem")
        .env("NODE_EXTRA_CA_CERTS", "/etc/ssl/corp-node.pem")
        .env("REQUESTS_CA_BUNDLE", "/etc/ssl/corp-py.pem")
        .env("CURL_CA_BUNDLE", "/etc/ssl/corp-curl.pem")
        .env("SSL_CERT_DIR", "/etc/ssl/certs")
        .env("PALISADE_TEST_SECRET_TOKEN", "hunter2")
        .current_dir(env.path("ws"))
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        "/etc/ssl/corp.pem|/etc/ssl/corp-node.pem|/etc/ssl/corp-py.pem|/etc/ssl/corp-curl.pem|/etc/ssl/certs|no-token\n",
        "{}",
        text(&out.stderr)
    );
}

/// Under bwrap's `none` the command may list its network interfaces (route netlink, which in its
/// own namespace shows only its loopback): Node's `os.networkInterfaces()` threw before. IP
/// sockets stay refused.
#[test]
fn interfaces_are_listable_but_ip_is_refused_under_bwrap_none() {
    let env = Env::new();
    let taskpack = env.taskpack("linux-bwrap", "");
    let out = env.run(&[
        "--taskpack",
        taskpack.to_str().unwrap(),
        "--quiet",
        "--",
        "python3",
        "-c",
        "import socket\nprint([n for _, n in socket.if_nameindex()])\ntry:\n    socket.socket(socket.AF_INET)\n    print('ip-open')\nexcept OSError as e:\n    print('ip-refused', e.errno)",
    ]);
    assert_eq!(
        text(&out.stdout),
        "['lo']\nip-refused 1\n",
        "{}",
        text(&out.stderr)
    );
}

/// An agent runner that goes away closes Palisade's stderr: every warning and the denial
/// summary then fail to write. The run goes on: the command's status passes through and the
/// outcome is recorded. Before, the first such write panicked (exit 101, no outcome, and a
/// tree left unreaped when it happened while the command ran).
#[test]
fn a_closed_stderr_neither_stops_nor_breaks_the_run() {
    for backend in ["linux-bwrap", "linux-landlock"] {
        let env = Env::new();
        let taskpack = env.taskpack(backend, "");
        let audit = env.path("audit.jsonl");
        let mut child = Command::new(PALISADE)
            .args(["run", "--taskpack", taskpack.to_str().unwrap(), "--audit"])
            .arg(&audit)
            .args([
                "--",
                "sh",
                "-c",
                "sleep 0.5; unshare -U true 2>/dev/null; exit 3",
            ])
            .env("PALISADE_CACHE_DIR", env.path("cache"))
            .env("HOME", env.dir.path())
            .current_dir(env.path("ws"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(3), "{backend}");
        let lines = env.audit_lines();
        assert_eq!(lines.len(), 2, "{backend}: a decision and its outcome");
        assert_eq!(
            lines[1]["outcome"]["exitCode"], 3,
            "{backend}: {}",
            lines[1]
        );
    }
}

/// A `bwrap` first on the PATH that fails the way bwrap does when it loses a mount race
/// (`Unable to apply mount flags`) the first `failures` times it is asked to run `marker`, and
/// is the real bwrap otherwise (the probe's trial, and every later launch).
fn flaky_bwrap(env: &Env, marker: &str, failures: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = env.path("flaky-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let count = env.path("flaky-count");
    let script = format!(
        "#!/bin/sh\ncase \"$*\" in *{marker}*)\n  n=$(cat {count} 2>/dev/null || echo 0)\n  echo $((n + 1)) > {count}\n  if [ \"$n\" -lt {failures} ]; then\n    echo 'bwrap: Unable to apply mount flags: remount \"/newroot/x\": Invalid argument' >&2\n    exit 1\n  fi;;\nesac\nexec /usr/bin/bwrap \"$@\"\n",
        count = count.display()
    );
    let path = dir.join("bwrap");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn a_setup_that_fails_before_the_command_starts_is_tried_once_more() {
    if !std::path::Path::new("/usr/bin/bwrap").exists() {
        eprintln!("skipped: no /usr/bin/bwrap");
        return;
    }
    let run = |failures: u32| {
        let env = Env::new();
        let marker = format!("flaky-marker-{failures}");
        let bin = flaky_bwrap(&env, &marker, failures);
        let taskpack = env.taskpack("linux-bwrap", "");
        let audit = env.path("audit.jsonl");
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let out = Command::new(PALISADE)
            .args(["run", "--no-cache", "--taskpack"])
            .arg(&taskpack)
            .arg("--audit")
            .arg(&audit)
            .args(["--", "sh", "-c", &format!("echo ran >> ran.txt # {marker}")])
            .env("PATH", path)
            .env("PALISADE_CACHE_DIR", env.path("cache"))
            .env("HOME", env.path(""))
            .current_dir(env.path("ws"))
            .output()
            .unwrap();
        let ran = std::fs::read_to_string(env.path("ws/ran.txt")).unwrap_or_default();
        (out, ran, env.audit_lines())
    };

    // Lost once: set up again, the command runs once, and both the user and the record know.
    let (out, ran, lines) = run(1);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(ran, "ran\n", "the command runs exactly once");
    assert!(
        stderr.contains("the command did not start, so palisade sets the sandbox up once more"),
        "{stderr}"
    );
    let retried = &lines[1]["outcome"]["setupRetried"]["firstAttempt"];
    assert!(
        retried
            .as_str()
            .unwrap()
            .contains("could not set up the sandbox"),
        "{lines:?}"
    );

    // Lost twice: the setup failure stands (125), and the command never ran.
    let (out, ran, lines) = run(2);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(ran, "", "the command never ran");
    assert_eq!(lines[1]["outcome"]["endedBy"], "not-launched");
}

/// Policy flags without a taskpack (issue 12): `--network none --deny-read X --writable W` form
/// the policy, bwrap enforces each (the denied path unreadable, the workspace read-only outside
/// W), the audit record carries them as `policyFlags` with origin `flag` in the decision, and
/// replay reproduces it.
#[test]
fn policy_flags_form_the_policy_and_bwrap_enforces_them() {
    let env = Env::new();
    let ws = std::fs::canonicalize(env.path("ws")).unwrap();
    std::fs::create_dir_all(ws.join("out")).unwrap();
    std::fs::create_dir_all(ws.join("secret")).unwrap();
    std::fs::write(ws.join("secret").join("key"), "s3cret").unwrap();
    let audit = env.path("audit.jsonl");
    let secret = ws.join("secret");
    let out = env.run(&[
        "--audit",
        audit.to_str().unwrap(),
        "--backend",
        "linux-bwrap",
        "--network",
        "none",
        "--deny-read",
        secret.to_str().unwrap(),
        "--writable",
        "out",
        "--",
        "sh",
        "-c",
        "cat secret/key && echo READ-SECRET; echo a > out/a && echo WROTE-OUT; echo b > b && echo WROTE-WS; true",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("WROTE-OUT"), "{stdout}");
    assert!(!stdout.contains("READ-SECRET"), "{stdout}");
    assert!(!stdout.contains("WROTE-WS"), "{stdout}");
    assert!(ws.join("out").join("a").exists());
    assert!(!ws.join("b").exists());

    let record = &env.audit_lines()[0];
    let flags = &record["input"]["policyFlags"];
    assert_eq!(flags["networkMode"], "none");
    assert_eq!(flags["deniedReadPaths"][0], secret.to_str().unwrap());
    assert_eq!(flags["writableRoots"][0], ws.join("out").to_str().unwrap());
    let decision: Value = serde_json::from_str(record["output"].as_str().unwrap()).unwrap();
    assert_eq!(decision["policy"]["networkModeOrigin"], "flag");
    assert_eq!(decision["policy"]["preferredBackendsOrigin"], "flag");
    assert_eq!(decision["plan"]["network"]["mode"], "none");
    assert_eq!(
        decision["plan"]["writableRoots"][0],
        ws.join("out").to_str().unwrap()
    );
    assert!(
        decision["policy"]["deniedReadPaths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["origin"] == "flag" && d["path"] == secret.to_str().unwrap()),
        "{decision}"
    );

    let replay = env.palisade("replay", &[audit.to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stderr));
    assert!(
        text(&replay.stdout).contains("REPRODUCED"),
        "{}",
        text(&replay.stdout)
    );
}

/// With a taskpack the flags may only tighten it: a looser network or a backend the taskpack
/// does not list is refused at its `policyFlags` path, and nothing runs.
#[test]
fn policy_flags_that_loosen_a_taskpack_are_refused() {
    let env = Env::new();
    let taskpack = env.taskpack("linux-bwrap", "");
    for (flag, value, path) in [
        ("--network", "allow-outbound", "policyFlags.networkMode"),
        (
            "--backend",
            "linux-landlock",
            "policyFlags.preferredBackends[0]",
        ),
        ("--writable", "/", "policyFlags.writableRoots[0]"),
    ] {
        let out = env.run(&[
            "--taskpack",
            taskpack.to_str().unwrap(),
            flag,
            value,
            "--",
            "sh",
            "-c",
            "echo RAN",
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{flag}: {stderr}");
        assert!(
            stderr.contains("SANDBOX_POLICY_INVALID"),
            "{flag}: {stderr}"
        );
        assert!(stderr.contains(path), "{flag}: {stderr}");
        assert!(!text(&out.stdout).contains("RAN"));
    }
}

/// A managed input's `--writable` places are claims like the host's writable roots: a symlink
/// inside the workspace (here to /etc) would make its target writable, so it is refused.
#[test]
fn a_managed_input_may_not_make_a_symlink_writable() {
    let env = Env::new();
    let ws = std::fs::canonicalize(env.path("ws")).unwrap();
    std::fs::create_dir_all(ws.join("out")).unwrap();
    std::os::unix::fs::symlink("/etc", ws.join("link")).unwrap();
    let record = env.path("decided.jsonl");
    let out = env.palisade(
        "decide",
        &["--writable", "out", "--record", record.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line = std::fs::read_to_string(&record).unwrap();
    let mut input: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let mut input = input["input"].take();
    input["policyFlags"]["writableRoots"] = serde_json::json!([ws.join("link")]);
    let path = env.path("input.json");
    std::fs::write(&path, input.to_string()).unwrap();
    let out = env.run(&["--input", path.to_str().unwrap(), "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("HOST_FACTS_MISMATCH"), "{stderr}");
    assert!(stderr.contains("policyFlags.writableRoots[0]"), "{stderr}");
}

/// Accesses to denied paths are refused by their observed masks and explained, each with the
/// entry of `deniedReadPaths` that denied it and where that entry came from; looking at a
/// denied path, and everything allowed, is no denial. As this user and, under root, as uid
/// 65534 (through `fusermount3`).
#[test]
fn accesses_to_denied_paths_are_observed_and_explained() {
    denied_paths_are_observed_and_explained("linux-bwrap");
}

/// The same under Landlock: init binds the masks in a mount namespace of the sandbox's own,
/// and the ruleset lets each through to its server, which refuses.
#[test]
fn accesses_to_denied_paths_are_observed_and_explained_under_landlock() {
    denied_paths_are_observed_and_explained("linux-landlock");
}

fn denied_paths_are_observed_and_explained(backend: &str) {
    let users: Vec<Option<u32>> = if is_root() {
        vec![None, Some(65534)]
    } else {
        vec![None]
    };
    for user in users {
        // The unprivileged pass needs its files and the binary where uid 65534 reaches them
        // (a checkout under root's 0700 home is not).
        let (env, palisade) = match user {
            None => (Env::new(), PathBuf::from(PALISADE)),
            Some(_) => {
                let base =
                    reachable::reachable_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "run-users");
                let dir = tempfile::tempdir_in(&base).unwrap();
                std::fs::create_dir_all(dir.path().join("ws")).unwrap();
                std::fs::create_dir_all(dir.path().join("cache")).unwrap();
                let palisade = reachable::reachable_binary(Path::new(PALISADE), &base);
                (Env { dir }, palisade)
            }
        };
        let home = env.path("");
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".aws/credentials"), "SECRET-AWS").unwrap();
        std::fs::create_dir_all(home.join("private")).unwrap();
        std::fs::write(home.join("private/key"), "SECRET-KEY").unwrap();
        std::fs::write(home.join("token"), "SECRET-TOKEN").unwrap();
        std::fs::write(env.path("ws/README"), "readable\n").unwrap();
        let taskpack = env.taskpack(backend, "");
        let text_of = std::fs::read_to_string(&taskpack).unwrap();
        std::fs::write(
            &taskpack,
            format!("{text_of}    deniedReadPaths: [\"~/private\"]\n"),
        )
        .unwrap();
        if let Some(uid) = user {
            chown_tree(env.dir.path(), uid);
        }
        let script = "cat ~/.aws/credentials; ls ~/private; echo x > ~/private/new; \
                      cat ~/token; cat README; echo ok > allowed.txt; ls -a ~ > /dev/null; \
                      stat -c %a ~/private; git add -A && echo added";
        // The workspace is a repository of its own (a `git init` inside would be refused: `.git`
        // is protected where the workspace has none).
        let init = as_user(Command::new("git").args(["init", "-q"]), user)
            .current_dir(env.path("ws"))
            .status()
            .unwrap();
        assert!(init.success());
        // Outside, every read succeeds (as this user).
        let outside = as_user(Command::new("sh").args(["-c", script]), user)
            .env("HOME", &home)
            .current_dir(env.path("ws"))
            .output()
            .unwrap();
        assert!(text(&outside.stdout).contains("SECRET-AWS"), "{outside:?}");
        let reset = as_user(
            Command::new("git").args(["rm", "-q", "-r", "--cached", "."]),
            user,
        )
        .current_dir(env.path("ws"))
        .status()
        .unwrap();
        assert!(reset.success());
        std::fs::remove_file(env.path("ws/allowed.txt")).unwrap();
        std::fs::remove_file(home.join("private/new")).unwrap();

        let audit = env.path("audit.jsonl");
        let token = home.join("token");
        let out = as_user(Command::new(&palisade).arg("run"), user)
            .args([
                "--taskpack",
                taskpack.to_str().unwrap(),
                "--audit",
                audit.to_str().unwrap(),
                "--deny-read",
                token.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                script,
            ])
            .env("PALISADE_CACHE_DIR", env.path("cache"))
            .env("HOME", &home)
            .current_dir(env.path("ws"))
            .output()
            .unwrap();
        let who = format!("{backend} as {user:?}");
        let stderr = text(&out.stderr);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{who}: {stderr}");
        assert!(
            !stdout.contains("SECRET") && !stderr.contains("SECRET"),
            "{who}: {stdout}"
        );
        assert!(
            stdout.contains("readable") && stdout.contains("added"),
            "{who}: {stdout} {stderr}"
        );
        assert!(
            stdout.contains("\n0\n"),
            "{who}: the mask has no permission bits: {stdout}"
        );
        assert!(
            stderr.contains("palisade:   file: read ") && !stderr.contains("not observed"),
            "{who}: {stderr}"
        );
        let lines = env.audit_lines();
        let decision: Value = serde_json::from_str(lines[0]["output"].as_str().unwrap()).unwrap();
        let outcome = &lines[1]["outcome"];
        assert_eq!(outcome["fileObserver"]["mounted"], true, "{who}: {outcome}");
        if backend == "linux-landlock" {
            // One rule per mask (`~/.aws`, `~/private`, `~/token`), each on its node.
            assert_eq!(outcome["landlock"]["observed_masks"], 3, "{who}: {outcome}");
        }
        let denied: Vec<&str> = decision["plan"]["deniedReadPaths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        let rule_of = |path: &Path| {
            let i = denied
                .iter()
                .position(|d| Path::new(d) == path)
                .unwrap_or_else(|| panic!("{} not denied: {denied:?}", path.display()));
            format!("plan.deniedReadPaths[{i}]")
        };
        let events = outcome["denials"]["events"].as_array().unwrap();
        let expected = [
            ("read", home.join(".aws/credentials"), home.join(".aws")),
            ("read", home.join("private"), home.join("private")),
            ("read", home.join("private/new"), home.join("private")),
            ("read", home.join("token"), home.join("token")),
        ];
        for (operation, target, entry) in &expected {
            let event = events
                .iter()
                .find(|e| e["operation"] == *operation && e["target"] == target.to_str().unwrap())
                .unwrap_or_else(|| {
                    panic!("{who}: no {operation} of {}: {events:#?}", target.display())
                });
            assert_eq!(event["rule"], rule_of(entry), "{who}: {event}");
            assert_eq!(event["kind"], "file", "{who}: {event}");
            assert_eq!(event["observedBy"], "mask", "{who}: {event}");
        }
        // Nothing else: `ls -a ~` and `stat` look at the masks, git and the workspace are
        // allowed.
        assert_eq!(events.len(), expected.len(), "{who}: {events:#?}");

        let explained = text(
            &as_user(Command::new(&palisade).arg("explain"), user)
                .arg(&audit)
                .output()
                .unwrap()
                .stdout,
        );
        for suggestion in [
            format!(
                "`{}` is a built-in credential store",
                home.join(".aws").display()
            ),
            format!(
                "remove `{}` from `spec.sandbox.deniedReadPaths`",
                home.join("private").display()
            ),
            format!("drop `--deny-read {}`", token.display()),
        ] {
            assert!(
                explained.contains(&suggestion),
                "{who}: {suggestion}\n{explained}"
            );
        }
    }
}

/// A denied file inside the workspace that git is not told to ignore: `git add -A` stops at
/// it (it cannot index what it cannot read, and a mask cannot make git skip a name its
/// directory lists as a file), the secret stays out of the index, and Palisade says why and
/// what lets git go on. Listed in `.gitignore`, the same `git add -A && git commit` works and
/// is no denial.
#[test]
fn git_add_meets_a_denied_file_in_the_workspace_and_is_told_to_ignore_it() {
    let env = Env::new();
    let ws = env.path("ws");
    std::fs::write(ws.join("notes.txt"), "notes\n").unwrap();
    std::fs::write(ws.join(".env"), "SECRET-ENV").unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        text(&out.stdout)
    };
    // Outside, git indexes the file as any other.
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    assert!(git(&["ls-files"]).contains(".env"));
    std::fs::remove_dir_all(ws.join(".git")).unwrap();
    git(&["init", "-q"]);

    let audit = env.path("audit.jsonl");
    let dot_env = ws.join(".env");
    let script = "git add -A; echo add=$?";
    let run = || {
        env.run(&[
            "--backend",
            "linux-bwrap",
            "--audit",
            audit.to_str().unwrap(),
            "--deny-read",
            dot_env.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            script,
        ])
    };
    let out = run();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("add=128"), "{stdout} {stderr}");
    assert!(!stdout.contains("SECRET") && !stderr.contains("SECRET"));
    assert!(
        stderr.contains(&format!("file: read {}", dot_env.display()))
            && stderr.contains("list it in `.gitignore`"),
        "{stderr}"
    );
    assert!(!git(&["ls-files", "--stage"]).contains(".env"));
    let lines = env.audit_lines();
    let events = lines[1]["outcome"]["denials"]["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["target"] == dot_env.to_str().unwrap()
                && e["reason"].as_str().unwrap().contains("`.gitignore`")),
        "{events:#?}"
    );

    // Told to ignore it, git never opens it: the add and the commit go through.
    std::fs::write(ws.join(".gitignore"), ".env\n").unwrap();
    std::fs::remove_file(&audit).unwrap();
    let out = run();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("add=0"), "{stdout} {stderr}");
    assert!(!stderr.contains("refused"), "{stderr}");
    let lines = env.audit_lines();
    assert_eq!(
        lines[1]["outcome"]["denials"]["events"],
        serde_json::json!([]),
        "{}",
        lines[1]
    );
    let staged = git(&["ls-files"]);
    assert!(
        staged.contains("notes.txt") && staged.contains(".gitignore") && !staged.contains(".env\n"),
        "{staged}"
    );
}

fn is_root() -> bool {
    own_uid() == 0
}

/// `command` as uid/gid `user` through `setpriv` (under root), or as this user.
fn as_user(command: &mut Command, user: Option<u32>) -> Command {
    match user {
        None => std::mem::replace(command, Command::new("true")),
        Some(uid) => {
            let mut wrapped = Command::new("setpriv");
            wrapped.args([
                "--reuid",
                &uid.to_string(),
                "--regid",
                &uid.to_string(),
                "--clear-groups",
                "--",
            ]);
            wrapped.arg(command.get_program());
            wrapped.args(command.get_args());
            wrapped
        }
    }
}

fn chown_tree(dir: &Path, uid: u32) {
    let status = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
    // The test directory itself is 0700 root: let the user in.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Observed masks are mounted in a mount namespace of bwrap's parent, root's runs included:
/// never in the host's mount table, where another run's bwrap binding `/` would meet them (and
/// fail should they go meanwhile). A supervisor killed mid-run therefore leaves nothing
/// mounted; the next run's sweep removes the empty mountpoint it left.
#[test]
fn observed_masks_are_never_on_the_hosts_mount_table_even_when_the_run_is_killed() {
    let env = Env::new();
    let home = env.path("");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(home.join(".aws/credentials"), "SECRET-AWS").unwrap();
    let temp = env.path("tmp");
    std::fs::create_dir_all(&temp).unwrap();
    let started = env.path("ws/started");
    let run = |script: &str| {
        let mut command = Command::new(PALISADE);
        command
            .args(["run", "--", "sh", "-c", script])
            .env("PALISADE_CACHE_DIR", env.path("cache"))
            .env("HOME", &home)
            .env("TMPDIR", &temp)
            .env_remove("XDG_RUNTIME_DIR")
            .current_dir(env.path("ws"));
        command
    };
    let masks_mounted = || {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .filter(|line| line.contains(temp.to_str().unwrap()) && line.contains(".masks"))
            .count()
    };
    let mut child = run("cat ~/.aws/credentials > read 2>&1; touch started; sleep 30")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The mask is in effect inside, and not on the host's table.
    let read = std::fs::read_to_string(env.path("ws/read")).unwrap();
    assert!(
        !read.contains("SECRET") && read.contains("Permission denied"),
        "{read}"
    );
    assert_eq!(
        masks_mounted(),
        0,
        "the run's masks are not the host's mounts"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        masks_mounted(),
        0,
        "a killed supervisor leaves nothing mounted"
    );

    let out = run("cat ~/.aws/credentials; echo end").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("SECRET"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(masks_mounted(), 0);
    let left: Vec<String> = std::fs::read_dir(temp.join(format!("palisade-{}", own_uid())))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.iter().all(|name| !name.ends_with(".masks")),
        "{left:?}"
    );
}

fn own_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid()
}

/// `palisade-init` (the sandbox's init, PID 1 and seccomp stub, without the WebAssembly
/// runtime) runs inside the sandbox when it is installed beside `palisade`; without it
/// `palisade` runs them itself; the outcome says which. Either refuses a launcher of another
/// build, so an init left from another install never sets up a sandbox.
#[cfg(target_os = "linux")]
#[test]
fn the_sandbox_init_is_palisade_init_beside_palisade_else_palisade_itself() {
    const INIT: &str = env!("CARGO_BIN_EXE_palisade-init");
    let env = Env::new();
    // `palisade` alone in a directory of its own (a link, not a copy: the same build).
    let alone = env.path("alone");
    std::fs::create_dir_all(&alone).unwrap();
    let lone_palisade = alone.join("palisade");
    if std::fs::hard_link(PALISADE, &lone_palisade).is_err() {
        std::fs::copy(PALISADE, &lone_palisade).unwrap();
    }
    for backend in ["linux-bwrap", "linux-landlock"] {
        for (binary, expected) in [
            (Path::new(PALISADE), "palisade-init"),
            (lone_palisade.as_path(), "palisade"),
        ] {
            let taskpack = env.taskpack(backend, "");
            let audit = env.path("audit.jsonl");
            let _ = std::fs::remove_file(&audit);
            let out = Command::new(binary)
                .args(["run", "--taskpack", taskpack.to_str().unwrap()])
                .args([
                    "--audit",
                    audit.to_str().unwrap(),
                    "--",
                    "sh",
                    "-c",
                    "echo ran",
                ])
                .env("PALISADE_CACHE_DIR", env.path("cache"))
                .env("HOME", env.dir.path())
                .current_dir(env.path("ws"))
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{backend}: {}",
                text(&out.stderr)
            );
            assert_eq!(text(&out.stdout), "ran\n", "{backend}");
            let lines = env.audit_lines();
            assert_eq!(
                lines[1]["outcome"]["pid1"]["init"],
                expected,
                "{backend} from {}",
                binary.display()
            );
            assert_eq!(lines[1]["outcome"]["pid1"]["dumpable"], false);
        }
    }

    // PID 1 for a launcher of another build: refused before anything runs.
    let out = Command::new(INIT)
        .args([
            "__sandbox-pid1",
            "--build",
            "another",
            "--",
            "/bin/echo",
            "ran",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("from one build"),
        "{}",
        text(&out.stderr)
    );
    // The init of a Landlock sandbox, given a spec from another build (or none): the same; and
    // so for a spec of another build in a shape this init cannot read (not a parse error).
    let spec_of = |build: Option<&str>| {
        let spec = palisade_shims::init::InitSpec {
            command: vec!["/bin/echo".into(), "ran".into()],
            env: Vec::new(),
            cwd: env.path("ws"),
            rlimits: Vec::new(),
            confinement: palisade_shims::init::Confinement::None,
            report_fd: None,
            observe_fd: None,
            started_fd: None,
            masks: None,
            masks_fd: None,
            build: build.map(str::to_owned),
        };
        serde_json::to_vec(&spec).unwrap()
    };
    let unreadable = br#"{"command":["/bin/echo","ran"],"confinement":{"kind":"from-the-future"},"build":"another"}"#;
    for (case, spec) in [
        ("another build", spec_of(Some("another"))),
        ("no build", spec_of(None)),
        ("another build, unreadable", unreadable.to_vec()),
    ] {
        let spec_file = env.path("spec.json");
        std::fs::write(&spec_file, spec).unwrap();
        let out = Command::new("sh")
            .args(["-c", "exec \"$0\" __sandbox-init 3< \"$1\""])
            .arg(INIT)
            .arg(&spec_file)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(125),
            "{case}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
        assert!(
            text(&out.stderr).contains("from one build"),
            "{case}: {}",
            text(&out.stderr)
        );
    }
}

/// bwrap runs `palisade-init` (PID 1, and the seccomp stub in its child) from where the
/// sandbox's read-only root shows it; from under a directory the sandbox gets privately (here
/// `/tmp`), it is bound read-only on the private `/run` instead. Either way PID 1 is init, not
/// dumpable, and the command runs under the filter.
#[cfg(target_os = "linux")]
#[test]
fn bwrap_runs_palisade_init_where_the_sandbox_sees_it_else_bound() {
    const INIT: &str = env!("CARGO_BIN_EXE_palisade-init");
    let env = Env::new();
    let under_tmp = tempfile::tempdir_in("/tmp").unwrap();
    let install = |dir: &Path| {
        std::fs::create_dir_all(dir).unwrap();
        for (from, name) in [(PALISADE, "palisade"), (INIT, "palisade-init")] {
            // Links, not copies: the same build, without copying the binaries.
            if std::fs::hard_link(from, dir.join(name)).is_err() {
                std::fs::copy(from, dir.join(name)).unwrap();
            }
        }
        dir.join("palisade")
    };
    let own = env.path("bin");
    let private_dirs = ["/tmp", "/run", "/var/tmp", "/dev/shm"];
    // (palisade, the palisade-init PID 1 runs as in place, or `None`: bound)
    let mut cases = vec![(install(&under_tmp.path().join("bin")), None)];
    if private_dirs.iter().any(|dir| own.starts_with(dir)) {
        eprintln!(
            "the in-place cases are skipped: this checkout is under a directory the sandbox gets privately"
        );
    } else {
        let palisade = install(&own);
        cases.push((palisade.clone(), Some(own.join("palisade-init"))));
        // A `palisade-init` that is a link runs from the file it names.
        let linked = env.path("linked");
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::hard_link(&palisade, linked.join("palisade")).unwrap();
        std::os::unix::fs::symlink(own.join("palisade-init"), linked.join("palisade-init"))
            .unwrap();
        cases.push((linked.join("palisade"), Some(own.join("palisade-init"))));
    }
    for (binary, in_place) in cases {
        let taskpack = env.taskpack("linux-bwrap", "");
        let audit = env.path("audit.jsonl");
        let _ = std::fs::remove_file(&audit);
        let out = Command::new(&binary)
            .args(["run", "--taskpack", taskpack.to_str().unwrap()])
            .args(["--audit", audit.to_str().unwrap(), "--", "sh", "-c"])
            .arg(r#"tr '\0' ' ' < /proc/1/cmdline; echo; grep '^Seccomp:' /proc/self/status"#)
            .env("PALISADE_CACHE_DIR", env.path("cache"))
            .env("HOME", env.dir.path())
            .current_dir(env.path("ws"))
            .output()
            .unwrap();
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {stdout}{}",
            binary.display(),
            text(&out.stderr)
        );
        let mut lines = stdout.lines();
        let pid1 = lines.next().unwrap_or_default();
        let expected = match &in_place {
            Some(init) => format!("{} __sandbox-pid1 --build ", init.display()),
            None => "/run/palisade-exec/palisade __sandbox-pid1 --build ".to_owned(),
        };
        assert!(pid1.starts_with(&expected), "{}: {pid1}", binary.display());
        // The stub, named as PID 1 was executed, ran in PID 1's child and installed the filter.
        assert_eq!(
            lines
                .next()
                .map(str::split_whitespace)
                .map(Iterator::collect::<Vec<_>>),
            Some(vec!["Seccomp:", "2"]),
            "{}: {stdout}",
            binary.display()
        );
        let lines = env.audit_lines();
        assert_eq!(lines[1]["outcome"]["pid1"]["init"], "palisade-init");
        assert_eq!(lines[1]["outcome"]["pid1"]["dumpable"], false);
    }
}

/// Palisade's own state is out of every sandbox's reach (issue 36): with the per-user host
/// configuration directory or the caches' directory inside a writable root (`--writable-root
/// ~/.config`, `~/.cache`), the command cannot create or change them under bwrap (they are
/// masked: the state's placeholder or a read-only bind), and Landlock, which cannot mask inside
/// a writable root, is refused before anything runs. Outside, the same writes work. The next
/// decision is the same as before. As this user and, under root, as uid 65534.
#[test]
fn palisades_own_state_is_never_writable_inside() {
    let users: Vec<Option<u32>> = if is_root() {
        vec![None, Some(65534)]
    } else {
        vec![None]
    };
    for user in users {
        for backend in ["linux-bwrap", "linux-landlock"] {
            let base = reachable::reachable_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "state");
            let dir = tempfile::tempdir_in(&base).unwrap();
            let home = dir.path().to_path_buf();
            for sub in ["ws", ".config", ".cache"] {
                std::fs::create_dir_all(home.join(sub)).unwrap();
            }
            let palisade = match user {
                None => PathBuf::from(PALISADE),
                Some(_) => reachable::reachable_binary(Path::new(PALISADE), &base),
            };
            if let Some(uid) = user {
                chown_tree(&home, uid);
            }
            let who = format!("{backend} as {user:?}");
            let command = |args: &[&str]| {
                let mut command = Command::new(&palisade);
                command.args(args);
                let mut command = as_user(&mut command, user);
                command
                    .env_clear()
                    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                    .env("HOME", &home)
                    .current_dir(home.join("ws"));
                command.output().unwrap()
            };
            let decide = || {
                let out = command(&["decide", "--backend", backend, "--json"]);
                // The canonical decision: the same bytes for the same input and facts.
                serde_json::from_slice::<Value>(&out.stdout).unwrap_or_default()
            };
            let before = decide();

            for (root, script, target) in [
                (
                    ".config",
                    "mkdir -p ~/.config/palisade && echo 'spec: {allowDirectDedicated: true}' > ~/.config/palisade/host.yaml && echo WROTE",
                    ".config/palisade/host.yaml",
                ),
                (
                    ".cache",
                    "mkdir -p ~/.cache/palisade && echo '{}' > ~/.cache/palisade/probes.json && echo WROTE",
                    ".cache/palisade/probes.json",
                ),
            ] {
                // Outside, as this user, the write works (and is undone).
                let mut sh = Command::new("sh");
                sh.args(["-c", script]);
                let outside = as_user(&mut sh, user).env("HOME", &home).output().unwrap();
                assert!(
                    text(&outside.stdout).contains("WROTE"),
                    "{who}: {outside:?}"
                );
                std::fs::remove_dir_all(home.join(root).join("palisade")).unwrap();

                let root_path = home.join(root).display().to_string();
                let out = command(&[
                    "run",
                    "--backend",
                    backend,
                    "--writable-root",
                    &root_path,
                    "--",
                    "sh",
                    "-c",
                    script,
                ]);
                let stderr = text(&out.stderr);
                assert!(
                    !text(&out.stdout).contains("WROTE"),
                    "{who}: {root}: {stderr}"
                );
                assert!(
                    !home.join(target).exists(),
                    "{who}: {target} was written from inside"
                );
                if backend == "linux-landlock" {
                    assert_eq!(out.status.code(), Some(125), "{who}: {root}: {stderr}");
                    assert!(
                        stderr.contains("SANDBOX_CAPABILITY_INSUFFICIENT"),
                        "{who}: {root}: {stderr}"
                    );
                } else {
                    assert_ne!(out.status.code(), Some(125), "{who}: {root}: {stderr}");
                    assert_ne!(out.status.code(), Some(0), "{who}: {root}: {stderr}");
                }
                // Nothing of the run is left where the state would be.
                assert!(
                    !home.join(root).join("palisade").exists(),
                    "{who}: {root}/palisade left behind"
                );
            }
            assert_eq!(decide(), before, "{who}: the next decision changed");
            assert_eq!(before["outcome"], "decision", "{who}: {before}");
        }
    }
}

/// Palisade's signing key (`palisade key init`) is never readable or replaceable inside: under
/// bwrap and Landlock, as this user and, under root, as uid 65534, the command cannot read it
/// plainly, through a writable root that holds it (`--writable-root ~/.config`: masked, or the
/// backend refused), and its directory as a writable root is refused before anything runs.
/// Outside, the same user reads it. The key is unchanged afterwards, the next decision is the
/// same, and the run's audit lines verify against the key's public half.
#[test]
fn a_signing_key_is_never_readable_inside() {
    let users: Vec<Option<u32>> = if is_root() {
        vec![None, Some(65534)]
    } else {
        vec![None]
    };
    for user in users {
        for backend in ["linux-bwrap", "linux-landlock"] {
            let base = reachable::reachable_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "keys");
            let dir = tempfile::tempdir_in(&base).unwrap();
            let home = dir.path().to_path_buf();
            for sub in ["ws", ".config", "audit"] {
                std::fs::create_dir_all(home.join(sub)).unwrap();
            }
            let palisade = match user {
                None => PathBuf::from(PALISADE),
                Some(_) => reachable::reachable_binary(Path::new(PALISADE), &base),
            };
            if let Some(uid) = user {
                chown_tree(&home, uid);
            }
            let who = format!("{backend} as {user:?}");
            let command = |args: &[&str]| {
                let mut command = Command::new(&palisade);
                command.args(args);
                let mut command = as_user(&mut command, user);
                command
                    .env_clear()
                    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                    .env("HOME", &home)
                    .current_dir(home.join("ws"));
                command.output().unwrap()
            };
            let made = command(&["key", "init"]);
            assert_eq!(made.status.code(), Some(0), "{who}: {made:?}");
            let keys = home.join(".config/palisade/keys");
            let key = std::fs::read(keys.join("audit-signing.key")).unwrap();
            let decide = || {
                let out = command(&["decide", "--backend", backend, "--json"]);
                serde_json::from_slice::<Value>(&out.stdout).unwrap_or_default()
            };
            let before = decide();
            assert_eq!(before["outcome"], "decision", "{who}: {before}");

            let read = "cat ~/.config/palisade/keys/audit-signing.key; echo x > ~/.config/palisade/keys/audit-signing.key && echo WROTE";
            // Outside, as this user, the key reads (and the write is not tried: it would work).
            let mut sh = Command::new("sh");
            sh.args(["-c", "cat ~/.config/palisade/keys/audit-signing.key"]);
            let outside = as_user(&mut sh, user).env("HOME", &home).output().unwrap();
            assert!(
                text(&outside.stdout).contains("\"seed\""),
                "{who}: {outside:?}"
            );

            let audit = home.join("audit/a.jsonl").display().to_string();
            let config = home.join(".config").display().to_string();
            let inside_keys = keys.display().to_string();
            for (route, extra) in [
                ("plain", vec![]),
                (
                    "--writable-root ~/.config",
                    vec!["--writable-root", config.as_str()],
                ),
                (
                    "--writable-root ~/.config/palisade/keys",
                    vec!["--writable-root", inside_keys.as_str()],
                ),
            ] {
                let mut args = vec!["run", "--backend", backend, "--audit", audit.as_str()];
                args.extend(extra);
                args.extend(["--", "sh", "-c", read]);
                let out = command(&args);
                let stdout = text(&out.stdout);
                let stderr = text(&out.stderr);
                assert!(
                    !stdout.contains("seed"),
                    "{who}: {route}: read the key: {stdout}"
                );
                assert!(
                    !stdout.contains("WROTE"),
                    "{who}: {route}: wrote the key: {stderr}"
                );
                match route {
                    "plain" => assert_ne!(out.status.code(), Some(125), "{who}: {route}: {stderr}"),
                    r if r.ends_with("/keys") => {
                        assert_eq!(out.status.code(), Some(125), "{who}: {route}: {stderr}");
                        assert!(
                            stderr.contains("SANDBOX_WRITABLE_ROOT_UNSAFE"),
                            "{who}: {route}: {stderr}"
                        );
                    }
                    // Landlock cannot mask the state inside a writable root: refused.
                    _ if backend == "linux-landlock" => {
                        assert_eq!(out.status.code(), Some(125), "{who}: {route}: {stderr}");
                    }
                    _ => assert_ne!(out.status.code(), Some(125), "{who}: {route}: {stderr}"),
                }
                assert_eq!(
                    std::fs::read(keys.join("audit-signing.key")).unwrap(),
                    key,
                    "{who}: {route}: the key changed"
                );
            }
            assert_eq!(decide(), before, "{who}: the next decision changed");
            // Every line this user's runs appended is sealed by the key.
            let public = keys.join("audit-signing.pub").display().to_string();
            let replayed = command(&["replay", &audit, "--trusted-key", &public]);
            assert_eq!(replayed.status.code(), Some(0), "{who}: {replayed:?}");
            assert!(
                text(&replayed.stdout).contains("SEALS_OK"),
                "{who}: {replayed:?}"
            );
        }
    }
}

/// A checkpoint file the command could rewrite is refused like an audit file: it would let the
/// command hide a cut tail. Nothing is launched.
#[test]
fn a_checkpoint_the_command_could_rewrite_is_refused() {
    let env = Env::new();
    let taskpack = env.taskpack("linux-bwrap", "");
    let audit = env.path("audit.jsonl");
    let inside = env.path("ws/checkpoint.json");
    let mut args = run_args(&taskpack, &audit, "linux-bwrap");
    args.extend([
        "--checkpoint",
        inside.to_str().unwrap(),
        "--",
        "touch",
        "ran",
    ]);
    let out = env.run(&args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("checkpoint file") && stderr.contains("inside writable root"),
        "{stderr}"
    );
    assert!(!env.path("ws/ran").exists() && !inside.exists());
    // Outside every writable root it is written, naming the audit file's last line.
    let outside = env.path("checkpoint.json");
    let mut args = run_args(&taskpack, &audit, "linux-bwrap");
    args.extend(["--checkpoint", outside.to_str().unwrap(), "--", "true"]);
    let out = env.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let head: Value = serde_json::from_slice(&std::fs::read(&outside).unwrap()).unwrap();
    assert_eq!(head["seq"], 2, "{head}");
    assert_eq!(head["schemaVersion"], "palisade.checkpoint/v1");
}

/// `explain --suggest` (#39): a run denied a host port, a host socket and a denied read, under
/// a policy formed by flags; the suggestion's `add flags:` / `drop flags:` applied to the same
/// command, it runs again and is denied nothing, and each of the three works.
#[test]
#[cfg(target_os = "linux")]
fn applying_explain_suggest_allows_what_was_denied() {
    use std::io::Read as _;
    let env = Env::new();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in tcp.incoming().flatten() {
            let mut stream = stream;
            let _ = std::io::Write::write_all(&mut stream, b"tcp-ok");
        }
    });
    let socket_path = env.path("host.sock");
    let unix = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
    std::thread::spawn(move || {
        for stream in unix.incoming().flatten() {
            let mut stream = stream;
            let _ = std::io::Write::write_all(&mut stream, b"unix-ok");
        }
    });
    let secret = env.path("secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("f"), "read-ok").unwrap();
    let script = format!(
        r#"
import socket
def attempt(name, f):
    try:
        print(name, f())
    except Exception as e:
        print(name, "failed", type(e).__name__)
def tcp():
    s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
    return s.recv(16).decode()
def unix():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect("{sock}")
    return s.recv(16).decode()
attempt("tcp", tcp)
attempt("unix", unix)
attempt("file", lambda: open("{secret}/f").read())
"#,
        sock = socket_path.display(),
        secret = secret.display()
    );
    let run = |audit: &str, extra: &[String]| {
        let mut args: Vec<String> = [
            "--backend",
            "linux-bwrap",
            "--network",
            "loopback-only",
            "--audit",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.push(env.path(audit).display().to_string());
        args.extend(extra.iter().cloned());
        args.extend(["--".into(), "python3".into(), "-c".into(), script.clone()]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        env.run(&refs)
    };
    let first_flags = vec!["--deny-read".to_owned(), secret.display().to_string()];
    let first = run("first.jsonl", &first_flags);
    let stdout = text(&first.stdout);
    assert!(
        stdout.contains("tcp failed"),
        "{stdout}\n{}",
        text(&first.stderr)
    );
    assert!(stdout.contains("unix failed"), "{stdout}");
    assert!(stdout.contains("file failed"), "{stdout}");

    let suggested = env.palisade(
        "explain",
        &["--suggest", env.path("first.jsonl").to_str().unwrap()],
    );
    let suggestion = text(&suggested.stdout);
    assert!(suggested.status.success(), "{}", text(&suggested.stderr));
    let flags_of = |prefix: &str| -> Vec<String> {
        suggestion
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|rest| rest.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let add = flags_of("add flags: ");
    let drop = flags_of("drop flags: ");
    assert_eq!(
        add,
        [
            "--allow-host-port".to_owned(),
            port.to_string(),
            "--allow-unix-socket".to_owned(),
            socket_path.display().to_string()
        ],
        "{suggestion}"
    );
    assert_eq!(drop, first_flags, "{suggestion}");

    // Applied: the dropped flags out, the added ones in.
    let second = run("second.jsonl", &add);
    let stdout = text(&second.stdout);
    assert!(
        stdout.contains("tcp tcp-ok"),
        "{stdout}\n{}",
        text(&second.stderr)
    );
    assert!(stdout.contains("unix unix-ok"), "{stdout}");
    assert!(stdout.contains("file read-ok"), "{stdout}");
    let mut outcome = String::new();
    std::fs::File::open(env.path("second.jsonl"))
        .unwrap()
        .read_to_string(&mut outcome)
        .unwrap();
    let outcome: Value = outcome
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["schemaVersion"] == "palisade.run-outcome/v1")
        .unwrap();
    assert_eq!(outcome["outcome"]["denials"]["total"], 0, "{outcome}");
    let again = env.palisade(
        "explain",
        &["--suggest", env.path("second.jsonl").to_str().unwrap()],
    );
    assert!(
        text(&again.stdout).starts_with("nothing to change"),
        "{}",
        text(&again.stdout)
    );
}

/// A run takes its temp dir in a slot whose path is the same from one run to the next, so the
/// run that follows another decides from the decision cache: wasmtime is not started, and the
/// audit file holds the very decision the engine gave the first (same output bytes, same
/// writable roots). Two runs at once hold two slots.
#[test]
fn a_run_that_follows_another_decides_from_the_cache() {
    for backend in ["linux-bwrap", "linux-landlock"] {
        let env = Env::new();
        let taskpack = env.taskpack(backend, "");
        let audit = env.path("audit.jsonl");
        let run = |command: &[&str]| {
            let mut args = vec![
                "--taskpack",
                taskpack.to_str().unwrap(),
                "--audit",
                audit.to_str().unwrap(),
                "--",
            ];
            args.extend_from_slice(command);
            env.run(&args)
        };
        for _ in 0..2 {
            let out = run(&["sh", "-c", "echo x > \"$TMPDIR/scratch\""]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{backend}: {}",
                text(&out.stderr)
            );
        }
        let lines = env.audit_lines();
        assert_eq!(lines[1]["outcome"]["decisionCache"], "miss", "{backend}");
        assert_eq!(lines[3]["outcome"]["decisionCache"], "hit", "{backend}");
        assert_eq!(lines[0]["output"], lines[2]["output"], "{backend}");
        assert_eq!(lines[0]["outputDigest"], lines[2]["outputDigest"]);
        assert_ne!(lines[1]["runId"], lines[3]["runId"]);
        // Replay reproduces the cached decision with the engine.
        let out = env.palisade("replay", &[audit.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

        // A run while another holds the first slot gets the next one: its own directory.
        let concurrent = env.path("concurrent.jsonl");
        let mut first = Command::new(PALISADE)
            .args(["run", "--taskpack", taskpack.to_str().unwrap()])
            .args(["--audit", concurrent.to_str().unwrap(), "--", "sleep", "2"])
            .env("PALISADE_CACHE_DIR", env.path("cache"))
            .env("HOME", env.dir.path())
            .current_dir(env.path("ws"))
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::fs::read_to_string(&concurrent)
            .unwrap_or_default()
            .lines()
            .count()
            < 1
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the first run recorded nothing"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = env.run(&[
            "--taskpack",
            taskpack.to_str().unwrap(),
            "--audit",
            concurrent.to_str().unwrap(),
            "--",
            "true",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(first.wait().unwrap().success());
        let roots = |line: &Value| -> Vec<String> {
            let output: Value = serde_json::from_str(line["output"].as_str().unwrap()).unwrap();
            serde_json::from_value(output["plan"]["writableRoots"].clone()).unwrap()
        };
        let decisions: Vec<Value> = std::fs::read_to_string(&concurrent)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l.get("output").is_some())
            .collect();
        assert_eq!(decisions.len(), 2);
        assert_ne!(
            roots(&decisions[0]).last(),
            roots(&decisions[1]).last(),
            "{backend}: two live runs, two temp dirs"
        );
    }
}

/// bwrap's bridge listens for each listed host port on the sandbox's own loopback with no
/// privilege: a port below 1024 would fail there at launch ("Permission denied", status 125
/// after a retry), so the engine counts bwrap insufficient for it and the run is refused before
/// anything starts, saying which port and why (docker, which can, is tested in tests/docker.rs).
#[test]
fn a_privileged_host_port_is_refused_before_bwrap_launches() {
    let env = Env::new();
    let marker = env.path("ws/launched");
    let out = env.run(&[
        "--backend",
        "linux-bwrap",
        "--allow-host-port",
        "80",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.starts_with("error[SANDBOX_CAPABILITY_INSUFFICIENT]"),
        "{stderr}"
    );
    assert!(
        stderr.contains("cannot forward host loopback ports below 1024 (80)"),
        "{stderr}"
    );
    assert!(!stderr.contains("Permission denied"), "{stderr}");
    assert!(!marker.exists(), "a refused run must launch nothing");
    // A port of 1024 or above is forwarded as before.
    let out = env.run(&[
        "--backend",
        "linux-bwrap",
        "--allow-host-port",
        "18555",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(marker.exists());
}
