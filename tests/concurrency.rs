//! Concurrent runs never touch each other (issue 16, part 3): many `palisade run`s at once, in
//! one workspace and in separate ones, mixed backends, some ended by a budget and some by a
//! signal, as root and as an unprivileged user. Each run's exit status is its own; the shared
//! audit file holds only whole lines, each decision before its outcome and every decision with
//! an outcome; afterwards no run left a temp directory, a cgroup, a mount or (docker runs,
//! under root) a container behind.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step should fail the test loudly"
)]

#[path = "support/docker_image.rs"]
mod docker_image;
#[path = "support/escape_kit.rs"]
mod escape_kit;
#[path = "support/reachable.rs"]
mod reachable;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use escape_kit::{Env, User};

/// One run of the mix: where, under which backend, and what it must exit with.
struct Planned {
    backend: &'static str,
    workspace: PathBuf,
    args: Vec<String>,
    command: String,
    expect: i32,
    /// Send SIGTERM to the supervisor once the command created this file (it dies of the
    /// forwarded signal, 143).
    terminate_when: Option<PathBuf>,
}

fn taskpack(dir: &Path, backend: &str) -> PathBuf {
    let path = dir.join(format!("{backend}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {{name: c}}\nspec:\n  sandbox:\n    preferredBackends: [{backend}]\n    requiredCapabilities: [filesystemWriteContainment, networkIsolation, processTreeCleanup]\n"
        ),
    )
    .unwrap();
    escape_kit::chmod(&path, 0o644);
    path
}

/// What the runs named `run_ids` left behind: their temp dirs, and any mount naming them or the
/// test's directory.
fn leftovers(user: User, run_ids: &[String], root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    for base in [
        Some(PathBuf::from("/tmp")),
        Some(std::env::temp_dir()),
        runtime,
    ]
    .into_iter()
    .flatten()
    {
        let dir = base.join(format!("palisade-{}", user.uid()));
        for id in run_ids {
            let path = dir.join(format!("run-{id}"));
            if path.exists() {
                found.push(format!("temp dir {}", path.display()));
            }
        }
    }
    let root = root.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mounts
        .lines()
        .filter(|l| l.contains(&root) || run_ids.iter().any(|id| l.contains(id.as_str())))
    {
        found.push(format!("mount {line}"));
    }
    found
}

fn run_mix(user: User) {
    let env = Env::new(
        user,
        PathBuf::from(env!("CARGO_BIN_EXE_palisade-attack")),
        escape_kit::palisade_binary(),
    );
    let Some(palisade) = env.palisade.clone() else {
        panic!("{}", env.palisade_missing.clone().unwrap_or_default());
    };
    let root = env.base.path().join("mix");
    std::fs::create_dir_all(&root).unwrap();
    // One shared workspace with none of the protected paths (every run must hold its own
    // view of them), and a workspace per run for the rest.
    let shared = root.join("shared-ws");
    std::fs::create_dir_all(&shared).unwrap();
    let audit_dir = root.join("audit");
    std::fs::create_dir_all(&audit_dir).unwrap();
    let audit = audit_dir.join("audit.jsonl");
    let bwrap = taskpack(&root, "linux-bwrap");
    let landlock = taskpack(&root, "linux-landlock");

    let mut planned = Vec::new();
    // 20 at once in the shared workspace, strict policy under bwrap, each its own status.
    for i in 0..20 {
        planned.push(Planned {
            backend: "linux-bwrap",
            workspace: shared.clone(),
            args: vec!["--taskpack".into(), bwrap.display().to_string()],
            command: format!("echo run{i} > out-{i} && exit {}", 10 + i),
            expect: 10 + i,
            terminate_when: None,
        });
    }
    // 30 more, mixed: Landlock, budgets, signals, separate workspaces.
    for i in 0..30 {
        let own = root.join(format!("ws-{i}"));
        std::fs::create_dir_all(&own).unwrap();
        let (backend, taskpack) = if i % 2 == 0 {
            ("linux-bwrap", &bwrap)
        } else {
            ("linux-landlock", &landlock)
        };
        let workspace = if i % 3 == 0 { shared.clone() } else { own };
        let mut run = Planned {
            backend,
            workspace: workspace.clone(),
            args: vec!["--taskpack".into(), taskpack.display().to_string()],
            command: format!("exit {}", 40 + i),
            expect: 40 + i,
            terminate_when: None,
        };
        match i % 5 {
            // A wall-clock budget ends it: sleep dies of SIGTERM.
            1 => {
                run.args.extend(["--timeout".into(), "1s".into()]);
                run.command = "sleep 30".into();
                run.expect = 143;
            }
            // The supervisor is told to stop once the command runs: it forwards SIGTERM.
            2 => {
                run.command = format!("touch started-{i} && exec sleep 30");
                run.expect = 143;
                run.terminate_when = Some(workspace.join(format!("started-{i}")));
            }
            // A process budget ends it.
            3 => {
                run.args.extend(["--max-procs".into(), "3".into()]);
                run.command = "for i in 1 2 3 4 5 6; do sleep 20 & done; wait".into();
                run.expect = -1; // killed by the budget: any status but success
            }
            _ => {}
        }
        planned.push(run);
    }
    // Docker runs in the mix, under root (the daemon's socket is root's): exit statuses, a
    // budget and a signal, half of them in the shared workspace.
    let mut docker_used = None;
    if user.is_root() {
        match docker_image::ensure() {
            Ok(image) => {
                let profiles = root.join("profiles.yaml");
                image.write_profile(&profiles, &[]);
                escape_kit::chmod(&profiles, 0o644);
                let docker = taskpack(&root, "docker");
                for i in 0..6 {
                    let own = root.join(format!("docker-ws-{i}"));
                    std::fs::create_dir_all(&own).unwrap();
                    let workspace = if i % 2 == 0 { shared.clone() } else { own };
                    let mut run = Planned {
                        backend: "docker",
                        workspace: workspace.clone(),
                        args: vec![
                            "--taskpack".into(),
                            docker.display().to_string(),
                            "--runtime-profiles".into(),
                            profiles.display().to_string(),
                            "--docker-socket".into(),
                            image.socket.display().to_string(),
                        ],
                        command: format!("exit {}", 80 + i),
                        expect: 80 + i,
                        terminate_when: None,
                    };
                    match i {
                        2 | 3 => {
                            // Long enough for the container to start on a loaded machine: a
                            // SIGTERM that reaches the docker CLI while it still creates the
                            // container is not forwarded, and the grace ends in SIGKILL (137;
                            // issue 16's note, not fixed yet).
                            run.args.extend(["--timeout".into(), "8s".into()]);
                            run.command = "sleep 30".into();
                            run.expect = 143;
                        }
                        4 | 5 => {
                            run.command = format!("touch docker-started-{i} && exec sleep 30");
                            run.expect = 143;
                            run.terminate_when =
                                Some(workspace.join(format!("docker-started-{i}")));
                        }
                        _ => {}
                    }
                    planned.push(run);
                }
                docker_used = Some(image);
            }
            Err(why) => {
                assert!(
                    !docker_image::required(),
                    "PALISADE_REQUIRE_DOCKER=1 but: {why}"
                );
                eprintln!("docker runs skipped: {why}");
            }
        }
    }
    for dir in std::fs::read_dir(&root).unwrap().flatten() {
        escape_kit::chown_tree(&dir.path(), user);
    }
    escape_kit::chown_tree(&root, user);

    let mut children = Vec::new();
    for (index, run) in planned.iter().enumerate() {
        let mut argv = user.wrap();
        argv.push(palisade.display().to_string());
        argv.push("run".into());
        argv.extend(run.args.iter().cloned());
        argv.extend([
            "--workspace".into(),
            run.workspace.display().to_string(),
            "--audit".into(),
            audit.display().to_string(),
            "--quiet".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            run.command.clone(),
        ]);
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", env.base.path())
            .env("PALISADE_CACHE_DIR", &env.cache)
            .current_dir(&run.workspace)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        children.push((index, child, std::time::Instant::now()));
    }
    // Signals for the runs that get one, then every status.
    let mut statuses = BTreeMap::new();
    let mut signalled = std::collections::BTreeSet::new();
    let mut pending: Vec<_> = children;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for (index, mut child, started) in pending {
            if let Some(marker) = &planned[index].terminate_when
                && marker.exists()
                && signalled.insert(index)
            {
                // The wrapper is `setpriv`, which execs palisade: same pid.
                Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status()
                    .unwrap();
            }
            match child.try_wait().unwrap() {
                Some(_) => {
                    let out = child.wait_with_output().unwrap();
                    statuses.insert(index, out);
                }
                None if started.elapsed() > Duration::from_secs(120) => {
                    let _ = child.kill();
                    panic!("run {index} did not finish in 120 s");
                }
                None => still.push((index, child, started)),
            }
        }
        pending = still;
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut failures = Vec::new();
    let mut lost_race = std::collections::BTreeSet::new();
    for (index, run) in planned.iter().enumerate() {
        let Some(out) = statuses.get(&index) else {
            continue;
        };
        let code = out.status.code();
        // Known and open (issue 16's note): with docker runs in the mix, bwrap binding `/`
        // read-only can lose a race with a container's mounts and fail closed (125) before the
        // command starts. Said, not counted as a run that touched another.
        if run.backend == "linux-bwrap"
            && code == Some(125)
            && String::from_utf8_lossy(&out.stderr).contains("Unable to apply mount flags")
        {
            eprintln!("run {index}: bwrap lost a mount race with docker (125, nothing ran)");
            lost_race.insert(index);
            continue;
        }
        let ok = match run.expect {
            -1 => code.is_some_and(|c| c != 0 && c != 125),
            expect => code == Some(expect),
        };
        if !ok {
            failures.push(format!(
                "run {index} ({}, `{}`): status {:?}, expected {}: {}",
                run.backend,
                run.command,
                code,
                run.expect,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    // Each shared-workspace run wrote its own file; none saw another's stand-ins.
    for i in (0..20).filter(|i| !lost_race.contains(i)) {
        let out = std::fs::read_to_string(shared.join(format!("out-{i}"))).unwrap_or_default();
        if out != format!("run{i}\n") {
            failures.push(format!("shared run {i} wrote {out:?}"));
        }
    }

    // The audit file: whole lines only; every decision followed (later) by its outcome.
    let text = std::fs::read_to_string(&audit).unwrap();
    let mut decided = BTreeMap::new();
    let mut run_ids = Vec::new();
    let mut outcomes = 0;
    for (number, line) in text.lines().enumerate() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            failures.push(format!("audit line {number} is not JSON (a torn line)"));
            continue;
        };
        if value["schemaVersion"] == "palisade.run-outcome/v1" {
            outcomes += 1;
            match decided.get(value["decisionDigest"].as_str().unwrap_or_default()) {
                Some(at) if *at < number => {}
                _ => failures.push(format!("outcome at line {number} before its decision")),
            }
        } else {
            decided.insert(value["outputDigest"].as_str().unwrap().to_owned(), number);
            if let Some(id) = value["context"]["runId"].as_str() {
                run_ids.push(id.to_owned());
            }
        }
    }
    let lines = text.lines().count();
    if lines != 2 * planned.len() || outcomes != planned.len() {
        failures.push(format!(
            "{lines} audit lines, {outcomes} outcomes for {} runs",
            planned.len()
        ));
    }
    let mut after = leftovers(user, &run_ids, &root);
    if let Some(image) = &docker_used {
        // A removal the daemon did not confirm in time (56 runs at once on two cores) is left
        // to the run's reaper, which retries for a few seconds after palisade exits.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let containers = loop {
            // This test's own runs' containers (`palisade-<run id>`): another test's leftover
            // is that test's failure.
            let left: Vec<String> = image
                .containers()
                .into_iter()
                .filter(|name| run_ids.iter().any(|id| *name == format!("palisade-{id}")))
                .collect();
            if left.is_empty() || std::time::Instant::now() > deadline {
                break left;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        after.extend(
            containers
                .into_iter()
                .map(|name| format!("container {name}")),
        );
    }
    if !after.is_empty() {
        failures.push(format!("left behind: {after:?}"));
    }
    assert!(
        failures.is_empty(),
        "{} of {} concurrent runs misbehaved as {}:\n{}",
        failures.len(),
        planned.len(),
        user.label(),
        failures.join("\n")
    );
    eprintln!(
        "{} concurrent runs as {}: every status its own, {lines} whole audit lines, nothing left",
        planned.len(),
        user.label()
    );
}

#[test]
fn fifty_concurrent_runs_as_root() {
    match escape_kit::root_user() {
        Some(user) => run_mix(user),
        None => eprintln!("skipped: the root pass needs root"),
    }
}

#[test]
fn fifty_concurrent_runs_unprivileged() {
    run_mix(escape_kit::unprivileged_user());
}
