//! Faults (issue 16, part 4): many `palisade run`s, four at a time, whose supervisor is sent
//! SIGKILL, SIGTERM or SIGINT at a random moment (before the command is spawned, while the
//! sandbox is set up, while the command runs, while it is cleaned up), with the Docker daemon
//! restarted once under the root pass (opt-in, `PALISADE_SOAK_RESTART_DOCKER=1`, see `docker`)
//! and the disk holding the audit file full once.
//!
//! Afterwards nothing of any run is left: no process, mount, run cgroup, container, temp
//! directory or socket (a supervisor killed outright cannot clean up; the next run sweeps what it
//! left, and the test starts one last run to show it). The audit file holds only whole lines,
//! `palisade replay` reproduces every decision, and each run without an outcome is reported
//! INTERRUPTED — only SIGKILL may leave one. A run whose record cannot be written does not
//! start.
//!
//! `PALISADE_SOAK_RUNS` sets the number of runs per user (default 60, CI's short version; the
//! closing note of issue 16 reports 1,000), `PALISADE_SOAK_SEED` the seed (printed).
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
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use escape_kit::{Env, User};

/// splitmix64: a small, seeded, reproducible source of choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    None,
    Signal(i32),
}

struct Planned {
    backend: &'static str,
    /// The command's own exit status.
    code: i32,
    fault: Fault,
    /// When the fault is sent, after the supervisor was started.
    delay: Duration,
}

fn taskpack(dir: &Path, backend: &str) -> PathBuf {
    let path = dir.join(format!("{backend}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {{name: soak}}\nspec:\n  sandbox:\n    preferredBackends: [{backend}]\n    requiredCapabilities: [filesystemWriteContainment, processTreeCleanup]\n"
        ),
    )
    .unwrap();
    escape_kit::chmod(&path, 0o644);
    path
}

fn runs_per_user() -> usize {
    std::env::var("PALISADE_SOAK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

fn seed() -> u64 {
    std::env::var("PALISADE_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1)
        })
}

/// Processes whose command line holds `tag`: the supervisor's argv carries it, and so do the
/// command's `sh` (`$0`) and its `sleep` (the digits of its duration).
fn processes_with(tag: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(tag) && pid != std::process::id().to_string() {
            found.push(format!("process {pid}: {}", cmdline.trim()));
        }
    }
    found
}

/// `palisade/run-*` cgroups on the host, by path.
fn run_cgroups() -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| n.starts_with("run-"))
                && path
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|p| p == "palisade")
            {
                out.push(path);
            } else if depth > 0 {
                walk(&path, depth - 1, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(Path::new("/sys/fs/cgroup"), 6, &mut out);
    out.sort();
    out
}

/// The user's run directories (and their lock files), in every base a run may use.
fn run_dirs(user: User) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for base in [PathBuf::from("/tmp"), std::env::temp_dir()] {
        let dir = base.join(format!("palisade-{}", user.uid()));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with("run-"))
                {
                    out.push(entry.path());
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

struct Docker {
    image: docker_image::TestImage,
    profiles: PathBuf,
    /// `.ci/dockerd.sh`, when `DOCKER_HOST` is the daemon it manages (so it may be restarted).
    restart: Option<PathBuf>,
}

fn docker(root: &Path) -> Option<Docker> {
    let image = match docker_image::ensure() {
        Ok(image) => image,
        Err(why) => {
            assert!(
                !docker_image::required(),
                "PALISADE_REQUIRE_DOCKER=1 but: {why}"
            );
            eprintln!("docker runs skipped: {why}");
            return None;
        }
    };
    let profiles = root.join("profiles.yaml");
    image.write_profile(&profiles, &[]);
    escape_kit::chmod(&profiles, 0o644);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/dockerd.sh");
    // Opt-in (`PALISADE_SOAK_RESTART_DOCKER=1`). A restart found a leak, now fixed: a run
    // killed while the daemon created its container, the daemon restarting meanwhile, left
    // the container `Created` (the reaper took "daemon unreachable" for "gone"; the next run
    // now also sweeps containers whose run is over). CI's short soak leaves the restart out:
    // it restarts the daemon every other test uses, and the long soak covers it.
    let asked = std::env::var_os("PALISADE_SOAK_RESTART_DOCKER").is_some_and(|v| v == "1");
    let private = image.socket == Path::new("/run/palisade-dockerd/docker.sock");
    let restart = (asked && private).then_some(script);
    if asked && !private {
        eprintln!(
            "the daemon at `{}` is not the private test daemon: it is not restarted",
            image.socket.display()
        );
    }
    Some(Docker {
        image,
        profiles,
        restart,
    })
}

fn restart_docker(script: &Path) {
    let stop = Command::new("bash")
        .arg(script)
        .arg("stop")
        .status()
        .unwrap();
    assert!(stop.success(), "dockerd.sh stop failed");
    let start = Command::new("bash")
        .arg(script)
        .arg("start")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(start.success(), "dockerd.sh start failed");
}

/// A tmpfs of 256 KiB at `dir`, filled to the last byte; `None` when the test cannot mount.
struct FullDisk {
    dir: PathBuf,
}

impl FullDisk {
    fn mount(dir: &Path, user: User) -> Option<FullDisk> {
        if escape_kit::test_uid() != 0 {
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot mount a tmpfs at `{}`", dir.display());
        escape_kit::chown_tree(dir, user);
        let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while std::io::Write::write_all(&mut filler, &block).is_ok() {}
        drop(filler);
        // Whatever is left of the last block, byte by byte.
        let mut tail = std::fs::File::create(dir.join("tail")).unwrap();
        while std::io::Write::write_all(&mut tail, b"x").is_ok() {}
        Some(FullDisk {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// The two passes one after the other: the root pass restarts the daemon and counts cgroups.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn soak(user: User) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new(
        user,
        PathBuf::from(env!("CARGO_BIN_EXE_palisade-attack")),
        escape_kit::palisade_binary(),
    );
    let Some(palisade) = env.palisade.clone() else {
        panic!("{}", env.palisade_missing.clone().unwrap_or_default());
    };
    let seed = seed();
    let runs = runs_per_user();
    eprintln!(
        "soak as {}: {runs} runs, PALISADE_SOAK_SEED={seed}",
        user.label()
    );
    let mut rng = Rng(seed ^ u64::from(user.uid()));
    let root = env.base.path().join("soak");
    let workspace = root.join("ws");
    let audit_dir = root.join("audit");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&audit_dir).unwrap();
    let audit = audit_dir.join("audit.jsonl");
    let docker = if user.is_root() { docker(&root) } else { None };
    let mut backends = vec!["linux-bwrap", "linux-landlock"];
    if docker.is_some() {
        backends.push("docker");
    }
    let taskpacks: BTreeMap<&str, PathBuf> =
        backends.iter().map(|b| (*b, taskpack(&root, b))).collect();
    escape_kit::chown_tree(&root, user);
    let cgroups_before = run_cgroups();
    // Every process of this soak carries the tag in its command line.
    let tag = format!("{:06}", rng.below(1_000_000));

    let planned: Vec<Planned> = (0..runs)
        .map(|_| {
            let backend = backends[rng.below(backends.len() as u64) as usize];
            let fault = match rng.below(8) {
                0 | 1 => Fault::None,
                2 | 3 => Fault::Signal(libc::SIGKILL),
                4 | 5 => Fault::Signal(libc::SIGTERM),
                _ => Fault::Signal(libc::SIGINT),
            };
            // Docker starts slower: its window is wider.
            let window = if backend == "docker" { 1500 } else { 400 };
            Planned {
                backend,
                code: 3 + rng.below(60) as i32,
                fault,
                delay: Duration::from_millis(rng.below(window)),
            }
        })
        .collect();
    let restart_at = docker
        .as_ref()
        .and_then(|d| d.restart.as_ref())
        .map(|_| runs / 2);

    let spawn = |index: usize, run: &Planned| -> Child {
        let mut argv = user.wrap();
        argv.push(palisade.display().to_string());
        argv.push("run".into());
        argv.extend([
            "--taskpack".into(),
            taskpacks[run.backend].display().to_string(),
            "--workspace".into(),
            workspace.display().to_string(),
            "--audit".into(),
            audit.display().to_string(),
            // Not `--quiet`: what palisade says after the command (a SIGKILL after the grace)
            // is how the soak tells a known case from an unexplained status.
        ]);
        if let (Some(docker), "docker") = (&docker, run.backend) {
            argv.extend([
                "--runtime-profiles".into(),
                docker.profiles.display().to_string(),
                "--docker-socket".into(),
                docker.image.socket.display().to_string(),
            ]);
        }
        // 0 to 300 ms of work; the duration's digits carry the tag and the run's index.
        let sleep = format!("0.{:03}{tag}{index:05}", index * 37 % 300);
        argv.extend([
            "--".into(),
            "sh".into(),
            "-c".into(),
            format!("sleep {sleep}; exit {}", run.code),
            format!("soak-{tag}"),
        ]);
        Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", env.base.path())
            .env("PALISADE_CACHE_DIR", &env.cache)
            .current_dir(&workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };

    let mut failures = Vec::new();
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let mut killed = 0usize;
    let mut next = 0usize;
    let mut active: Vec<(usize, Child, Instant, bool)> = Vec::new();
    // Stderr pipes still held open by someone after their palisade exited.
    let mut holders: Vec<(usize, std::sync::mpsc::Receiver<Chunk>, Instant)> = Vec::new();
    // Runs that were going when the daemon restarted (docker ones may fail, loudly).
    let mut in_flight_at_restart: Vec<usize> = Vec::new();
    let started = Instant::now();
    while next < planned.len() || !active.is_empty() {
        while active.len() < 4 && next < planned.len() {
            if restart_at == Some(next)
                && let Some(script) = docker.as_ref().and_then(|d| d.restart.as_ref())
            {
                // Restarted while the runs before it may still be going.
                in_flight_at_restart.extend(active.iter().map(|(index, ..)| *index));
                restart_docker(script);
                *faults.entry("docker daemon restarted".into()).or_default() += 1;
            }
            active.push((next, spawn(next, &planned[next]), Instant::now(), false));
            next += 1;
        }
        let mut still = Vec::new();
        for (index, mut child, at, sent) in active {
            let run = &planned[index];
            let mut sent = sent;
            if let Fault::Signal(signal) = run.fault
                && !sent
                && at.elapsed() >= run.delay
            {
                // The wrapper is `setpriv`, which execs palisade: same pid.
                let _ = Command::new("kill")
                    .args([&format!("-{signal}"), &child.id().to_string()])
                    .status();
                sent = true;
            }
            match child.try_wait().unwrap() {
                Some(status) => {
                    let mut stderr = String::new();
                    // Palisade has exited: what it wrote is in the pipe already.
                    if let Some(pipe) = child.stderr.take()
                        && let receiver = read_in_background(pipe)
                        && !drain(&receiver, &mut stderr, Duration::from_millis(500))
                    {
                        // Palisade is gone, yet something holds its stderr: a process the
                        // killed supervisor could not remove (bwrap's child, orphaned while it
                        // waits for its parent during setup). The next run's sweep must end it.
                        holders.push((index, receiver, Instant::now()));
                    }
                    let name = match run.fault {
                        Fault::None => "none".to_owned(),
                        Fault::Signal(s) => format!("signal {s}"),
                    };
                    *faults
                        .entry(format!("{} / {name}", run.backend))
                        .or_default() += 1;
                    let ok = match run.fault {
                        Fault::None => status.code() == Some(run.code),
                        Fault::Signal(libc::SIGKILL) => {
                            if status.signal() == Some(libc::SIGKILL) {
                                killed += 1;
                            }
                            status.code() == Some(run.code)
                                || status.signal() == Some(libc::SIGKILL)
                        }
                        // Forwarded and reported as 128+N, or (before palisade installed its
                        // handlers) the default action; or the command had already ended.
                        Fault::Signal(s) => {
                            status.code() == Some(run.code)
                                || status.code() == Some(128 + s)
                                || status.signal() == Some(s)
                        }
                    };
                    // A restarted daemon may fail the docker runs it was serving (those going
                    // when it restarted), loudly: 125 and a docker code.
                    let served_by_restarted =
                        run.backend == "docker" && in_flight_at_restart.contains(&index);
                    let failed_loudly = served_by_restarted
                        && status.code() == Some(125)
                        && !stderr.contains("PALISADE_INTERNAL");
                    // Known and open (issue 16's note): bwrap binding `/` read-only loses a race
                    // with a container's mounts coming and going on the same host, and fails
                    // closed before the command starts. Counted, not hidden.
                    let lost_mount_race = run.backend == "linux-bwrap"
                        && status.code() == Some(125)
                        && stderr.contains("Unable to apply mount flags");
                    // Known and open: the docker CLI drops a signal that arrives between
                    // creating the container and starting it (it forwards signals only to a
                    // running container), so the grace ends in SIGKILL: 137, said on stderr
                    // and recorded as `graceExpired`. Counted, not hidden.
                    let docker_signal_dropped = run.backend == "docker"
                        && matches!(run.fault, Fault::Signal(s) if s != libc::SIGKILL)
                        && status.code() == Some(128 + libc::SIGKILL)
                        && stderr.contains("so its process tree was killed with SIGKILL");
                    if docker_signal_dropped {
                        *faults
                            .entry("docker CLI dropped a signal before start (137, said)".into())
                            .or_default() += 1;
                    }
                    if lost_mount_race {
                        *faults
                            .entry("bwrap lost a mount race with docker (125, nothing ran)".into())
                            .or_default() += 1;
                    }
                    if !(ok || failed_loudly || lost_mount_race || docker_signal_dropped) {
                        failures.push(format!(
                            "run {index} ({}, exit {}, {:?} after {:?}): {status:?}: {}",
                            run.backend,
                            run.code,
                            run.fault,
                            run.delay,
                            stderr.trim()
                        ));
                    }
                }
                None if at.elapsed() > Duration::from_secs(120) => {
                    let _ = child.kill();
                    failures.push(format!(
                        "run {index} ({}) did not end in 120 s",
                        run.backend
                    ));
                    let _ = child.wait();
                }
                None => still.push((index, child, at, sent)),
            }
        }
        active = still;
        holders.retain_mut(|(index, receiver, since)| {
            let mut ignored = String::new();
            if drain(receiver, &mut ignored, Duration::ZERO) {
                *faults
                    .entry(
                        "a stray of a killed run held its stderr until a later run swept it".into(),
                    )
                    .or_default() += 1;
                return false;
            }
            if since.elapsed() > Duration::from_secs(120) {
                failures.push(format!(
                    "run {index}: a process still held its stderr 120 s after palisade exited"
                ));
                return false;
            }
            true
        });
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed();

    // The disk holding the audit file is full: the run refuses to start, says why, and its
    // command never runs.
    let full_disk = FullDisk::mount(&root.join("full"), user);
    if let Some(disk) = &full_disk {
        let marker = workspace.join("ran-with-a-full-disk");
        let mut argv = user.wrap();
        argv.push(palisade.display().to_string());
        argv.extend([
            "run".into(),
            "--taskpack".into(),
            taskpacks["linux-bwrap"].display().to_string(),
            "--workspace".into(),
            workspace.display().to_string(),
            "--audit".into(),
            disk.dir.join("audit.jsonl").display().to_string(),
            "--".into(),
            "touch".into(),
            marker.display().to_string(),
        ]);
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", env.base.path())
            .env("PALISADE_CACHE_DIR", &env.cache)
            .current_dir(&workspace)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(125) || marker.exists() || !stderr.contains("error[") {
            failures.push(format!(
                "with the audit disk full: {:?}, command ran: {}: {}",
                out.status,
                marker.exists(),
                stderr.trim()
            ));
        }
        *faults.entry("audit disk full".into()).or_default() += 1;
    } else {
        eprintln!("the full-disk case needs root to mount a tmpfs: skipped");
    }
    drop(full_disk);

    // One clean run: it sweeps what the killed supervisors could not remove. With docker, a
    // clean docker run too: a container whose killed client's create landed after the reaper
    // stopped looking (a loaded machine) is the next docker run's to remove (module docs of
    // `palisade_shims::docker`).
    let mut sweepers = vec!["linux-bwrap"];
    if docker.is_some() {
        sweepers.push("docker");
    }
    for backend in sweepers {
        let mut argv = user.wrap();
        argv.push(palisade.display().to_string());
        argv.extend([
            "run".into(),
            "--taskpack".into(),
            taskpacks[backend].display().to_string(),
            "--workspace".into(),
            workspace.display().to_string(),
            "--quiet".into(),
        ]);
        if let (Some(docker), "docker") = (&docker, backend) {
            argv.extend([
                "--runtime-profiles".into(),
                docker.profiles.display().to_string(),
                "--docker-socket".into(),
                docker.image.socket.display().to_string(),
            ]);
        }
        argv.extend(["--".into(), "true".into()]);
        let swept = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", env.base.path())
            .env("PALISADE_CACHE_DIR", &env.cache)
            .current_dir(&workspace)
            .status()
            .unwrap();
        assert!(
            swept.success(),
            "the sweeping {backend} run failed: {swept:?}"
        );
    }
    // What held a stderr open is gone with that sweep.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !holders.is_empty() && Instant::now() < deadline {
        let mut ignored = String::new();
        holders.retain(|(_, receiver, _)| !drain(receiver, &mut ignored, Duration::ZERO));
        std::thread::sleep(Duration::from_millis(50));
    }
    for (index, _, _) in &holders {
        failures.push(format!(
            "run {index}: a process still held its stderr after the sweeping run"
        ));
    }

    // Leftovers, after giving reapers (docker's) their few seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let leftovers = loop {
        let mut left = processes_with(&tag);
        left.extend(
            run_dirs(user)
                .into_iter()
                .map(|p| format!("temp dir or lock {}", p.display())),
        );
        left.extend(
            run_cgroups()
                .into_iter()
                .filter(|c| !cgroups_before.contains(c))
                .map(|c| format!("cgroup {}", c.display())),
        );
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let root_text = root.display().to_string();
        left.extend(
            mounts
                .lines()
                .filter(|l| l.contains(&root_text))
                .map(|l| format!("mount {l}")),
        );
        if let Some(docker) = &docker {
            left.extend(
                docker
                    .image
                    .containers()
                    .into_iter()
                    .filter(|n| n.starts_with("palisade-"))
                    .map(|n| format!("container {n}")),
            );
        }
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    failures.extend(leftovers);

    // The audit file: whole lines, every decision reproduced, only SIGKILLed runs interrupted.
    let text = std::fs::read_to_string(&audit).unwrap();
    for (number, line) in text.lines().enumerate() {
        if serde_json::from_str::<serde_json::Value>(line).is_err() {
            failures.push(format!(
                "audit line {} is not JSON (a torn line)",
                number + 1
            ));
        }
    }
    let replay = Command::new(&palisade)
        .args(["replay", "--json"])
        .arg(&audit)
        .env("PALISADE_CACHE_DIR", &env.cache)
        .output()
        .unwrap();
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for line in String::from_utf8_lossy(&replay.stdout).lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        *statuses
            .entry(value["status"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    if !replay.status.success()
        || statuses
            .keys()
            .any(|s| s != "REPRODUCED" && s != "INTERRUPTED")
    {
        failures.push(format!(
            "replay: {:?} {statuses:?}: {}",
            replay.status,
            String::from_utf8_lossy(&replay.stderr).trim()
        ));
    }
    let interrupted = statuses.get("INTERRUPTED").copied().unwrap_or(0);
    if interrupted > killed {
        failures.push(format!(
            "{interrupted} runs have no outcome, but only {killed} supervisors were SIGKILLed"
        ));
    }

    eprintln!(
        "soak as {}: {} runs in {elapsed:.1?}; faults {faults:?}; {killed} supervisors died of SIGKILL; replay {statuses:?}",
        user.label(),
        planned.len()
    );
    assert!(
        failures.is_empty(),
        "soak as {} (PALISADE_SOAK_SEED={seed}): {} problems:\n{}",
        user.label(),
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn supervisors_killed_at_random_leave_nothing_as_root() {
    match escape_kit::root_user() {
        Some(user) => soak(user),
        None => eprintln!("skipped: the root pass needs root"),
    }
}

#[test]
fn supervisors_killed_at_random_leave_nothing_unprivileged() {
    soak(escape_kit::unprivileged_user());
}

/// What a reader thread saw on a run's stderr.
enum Chunk {
    Data(String),
    End,
}

/// Reads `pipe` on a thread of its own, so that a pipe some stray process keeps open never
/// blocks the soak.
fn read_in_background(pipe: std::process::ChildStderr) -> std::sync::mpsc::Receiver<Chunk> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut pipe = pipe;
        let mut buffer = [0u8; 8192];
        loop {
            match pipe.read(&mut buffer) {
                Ok(0) | Err(_) => {
                    let _ = sender.send(Chunk::End);
                    return;
                }
                Ok(n) => {
                    let text = String::from_utf8_lossy(buffer.get(..n).unwrap_or_default());
                    if sender.send(Chunk::Data(text.into_owned())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    receiver
}

/// Collects what the reader has, waiting at most `wait` for more: true at end of file (every
/// writer is gone), false while a writer still holds the pipe.
fn drain(receiver: &std::sync::mpsc::Receiver<Chunk>, into: &mut String, wait: Duration) -> bool {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        match receiver.recv_timeout(wait) {
            Ok(Chunk::Data(text)) => into.push_str(&text),
            Ok(Chunk::End) | Err(RecvTimeoutError::Disconnected) => return true,
            Err(RecvTimeoutError::Timeout) => return false,
        }
    }
}
