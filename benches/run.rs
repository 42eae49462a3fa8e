//! Launch overhead, interleaved in one run (release): `palisade run -- true` per backend
//! against the bare mechanism with equivalent settings, reaping a 1,000-process tree, and 50
//! runs at once. At the end it prints the ratios (#38) from the medians, and the load.
//!
//! - `launch-true`: `palisade run -- true` under `linux-bwrap` (the strict default policy) vs
//!   bare bwrap with the equivalent flags (`--ro-bind / / --bind WS WS --tmpfs` over `~/.ssh`
//!   and `~/.aws` where they exist, `--dev /dev --proc /proc --unshare-all --die-with-parent
//!   --new-session`): target ≤ 1.5×; under `linux-landlock` vs `true` started by a minimal
//!   launcher written here (fork, the same Landlock ruleset and seccomp filter Palisade applies
//!   for that plan, exec): target ≤ 3×. And, to tell the launcher's cost from the strict
//!   policy's mounts, bare bwrap with the very mounts Palisade's bwrap gets
//!   (`bwrap-same-mounts`: its argv, bwrap's own PID 1, no seccomp stub): target ≤ 1.2×.
//! - `reap`: a command that leaves 1,000 sleepers behind; besides the whole run, the outcome's
//!   `timings.reapAndVerifyUs` and the time from the command's last act to `palisade run`'s exit
//!   (the namespace's teardown, reap and verify, cleanup, the outcome), target ≤ 100 ms.
//! - `concurrent-50`: 50 `palisade run -- true` started at once vs 50 bare bwraps: runs/s.
//!
//! Docker (when `DOCKER_HOST` names a running daemon, e.g. `eval "$(bash .ci/dockerd.sh
//! start)"`): `palisade run -- true` under the docker backend against bare `docker run --rm
//! --network none IMAGE true`, on the tests' local image; and the same run with filtered egress
//! (the host proxy plus the static bridge as the container's entrypoint).
//!
//! Run with `cargo build --release -p palisade && cargo bench -p palisade-suite --bench run`.
//! Under `cargo test --all-targets` each benchmark runs once as a smoke test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    unsafe_code,
    reason = "benchmarks fail loudly; the minimal launcher's pre_exec is unsafe"
)]

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use palisade_shims::plan::{Budgets, LandlockProc, LaunchPlan, Mechanism, Network, Reach};
use palisade_shims::{bwrap, landlock, seccomp};

#[path = "../tests/support/docker_image.rs"]
mod docker_image;
mod support;

/// The `palisade` binary next to this bench's profile directory, if it was built.
fn palisade_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let binary = exe.parent()?.parent()?.join("palisade");
    binary.exists().then_some(binary)
}

fn status_ok(command: &mut Command) {
    let status = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{command:?} failed: {status}");
}

fn taskpack(dir: &Path, backend: &str, network: &str) -> PathBuf {
    let path = dir.join(format!("{backend}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {{name: bench}}\nspec:\n  sandbox:\n    preferredBackends: [{backend}]\n    networkMode: {network}\n"
        ),
    )
    .unwrap();
    path
}

/// `palisade run` with `args` (after `--`), in `workspace`, with the shared cache.
fn palisade_run(
    palisade: &Path,
    workspace: &Path,
    cache: &Path,
    taskpack: &Path,
    backend: &str,
) -> Command {
    let mut command = Command::new(palisade);
    command
        .arg("run")
        .arg("--taskpack")
        .arg(taskpack)
        .arg("--workspace")
        .arg(workspace)
        .env("PALISADE_CACHE_DIR", cache);
    if backend == "direct-dedicated" {
        command.arg("--allow-direct-dedicated");
    }
    command
}

/// Bare bwrap with the flags equivalent to Palisade's strict policy, as the issue spells them:
/// the home's `.ssh` and `.aws` masked where they exist (where they do not, Palisade has
/// nothing to mask either).
fn bare_bwrap(workspace: &Path) -> Command {
    let mut command = Command::new("bwrap");
    command.args(["--ro-bind", "/", "/", "--bind"]);
    command.arg(workspace).arg(workspace);
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    for masked in [".ssh", ".aws"].map(|name| home.join(name)) {
        if masked.exists() {
            command.arg("--tmpfs").arg(masked);
        }
    }
    command.args([
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "true",
    ]);
    command
}

/// Bare bwrap with the mounts Palisade's plan gives `workspace` (from its `decision`): the same
/// argv the launcher builds ([`bwrap::argv`]) with its placeholders held, but bwrap's own PID
/// 1, no seccomp stub, and no host-socket masks. Against it, `palisade run` shows the launcher's
/// own cost; against [`bare_bwrap`], the launcher's and the strict policy's mounts together.
struct SameMountsBwrap {
    args: Vec<std::ffi::OsString>,
    _placeholders: palisade_shims::placeholder::Placeholders,
}

impl SameMountsBwrap {
    fn new(decision: &serde_json::Value, temp: &Path) -> SameMountsBwrap {
        let plan = LaunchPlan {
            mechanism: Mechanism::Bwrap,
            protected_paths: decision["plan"]["protectedPaths"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| PathBuf::from(p["path"].as_str().unwrap()))
                .collect(),
            ..plan_from_decision(decision, temp)
        };
        let facts = palisade_shims::fsfacts::measure(&plan).unwrap();
        let args = bwrap::argv(&plan, &facts, None, None).unwrap();
        SameMountsBwrap {
            _placeholders: palisade_shims::placeholder::hold(&args.placeholders).unwrap(),
            args: args.args,
        }
    }

    fn run_true(&self) {
        status_ok(Command::new("bwrap").args(&self.args));
    }
}

/// The launch plan of Palisade's `decision` (its workspace, writable roots and denied paths),
/// for `true` without environment and with no protected paths; `temp` is the run's temp dir.
/// The mechanism is `Direct`: callers set their own.
fn plan_from_decision(decision: &serde_json::Value, temp: &Path) -> LaunchPlan {
    let paths = |key: &str| -> Vec<PathBuf> {
        decision["plan"][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| PathBuf::from(p.as_str().unwrap()))
            .collect()
    };
    LaunchPlan {
        mechanism: Mechanism::Direct,
        network: Network::None,
        workspace: PathBuf::from(decision["plan"]["workspaceDir"].as_str().unwrap()),
        writable_roots: paths("writableRoots"),
        read_only_root: true,
        denied_read_paths: paths("deniedReadPaths"),
        protected_paths: Vec::new(),
        syscall_filter: true,
        command: vec!["true".into()],
        env: Vec::new(),
        run_temp_dir: temp.to_path_buf(),
        budgets: Budgets::default(),
        unix_sockets: Vec::new(),
    }
}

/// The minimal Landlock launcher: what `palisade run` under `linux-landlock` applies to the
/// command — the same Landlock ruleset and seccomp filter for the same plan — and nothing else
/// (no decision, no PID namespace, no init, no supervisor).
struct LandlockLauncher {
    ruleset: landlock::RulesetPlan,
    filter: seccomp::Program,
}

impl LandlockLauncher {
    /// For the plan Palisade's decision gives `workspace` (its denied paths and writable roots,
    /// from `decision`) and the `/proc` its run recorded (`proc`).
    fn new(decision: &serde_json::Value, proc: LandlockProc, temp: &Path) -> LandlockLauncher {
        let plan = LaunchPlan {
            mechanism: Mechanism::Landlock(proc),
            ..plan_from_decision(decision, temp)
        };
        let facts = landlock::ListingFacts::measure(&plan).unwrap();
        LandlockLauncher {
            ruleset: landlock::ruleset_plan(&plan, &facts).unwrap(),
            filter: seccomp::build(&seccomp::Profile {
                mechanism: plan.mechanism,
                reach: Reach::Nothing,
            })
            .unwrap(),
        }
    }

    fn run_true(&self) {
        let ruleset = self.ruleset.clone();
        let filter = self.filter.clone();
        let mut command = Command::new("/usr/bin/true");
        // SAFETY: this bench process has a single thread, so the child may allocate between
        // fork and exec (no other thread can hold the allocator's lock); it only restricts
        // itself and installs the filter.
        unsafe {
            command.pre_exec(move || {
                landlock::restrict(&ruleset, None).map_err(std::io::Error::other)?;
                seccomp::install(&filter).map_err(std::io::Error::other)
            });
        }
        status_ok(&mut command);
    }
}

fn launch(c: &mut Criterion) {
    let Some((_installed, palisade)) = support::installed_palisade() else {
        eprintln!("skipping: build the palisade binary first (cargo build --release -p palisade)");
        return;
    };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let cache = dir.path().join("cache");
    let run = |backend: &'static str, network: &'static str| {
        let taskpack = taskpack(dir.path(), backend, network);
        let (palisade, workspace, cache) = (palisade.clone(), workspace.clone(), cache.clone());
        move || {
            status_ok(
                palisade_run(&palisade, &workspace, &cache, &taskpack, backend)
                    .args(["--", "true"]),
            )
        }
    };
    let bwrap_run = run("linux-bwrap", "none");
    let landlock_run = run("linux-landlock", "none");
    let direct_run = run("direct-dedicated", "allow-outbound");
    bwrap_run(); // warm the probe and compiled-component caches

    // `palisade decide --json` for a taskpack in the bench's workspace.
    let decide = |taskpack: &Path| -> serde_json::Value {
        let decided = Command::new(&palisade)
            .args(["decide", "--json", "--taskpack"])
            .arg(taskpack)
            .arg("--workspace")
            .arg(&workspace)
            .env("PALISADE_CACHE_DIR", &cache)
            .output()
            .unwrap();
        serde_json::from_slice(&decided.stdout).unwrap()
    };
    // The minimal launcher's plan is the one Palisade's decision and run record.
    let landlock_taskpack = taskpack(dir.path(), "linux-landlock", "none");
    let decision = decide(&landlock_taskpack);
    let outcome = dir.path().join("landlock-outcome.json");
    status_ok(
        palisade_run(
            &palisade,
            &workspace,
            &cache,
            &landlock_taskpack,
            "linux-landlock",
        )
        .arg("--json")
        .arg(&outcome)
        .args(["--", "true"]),
    );
    let outcome: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&outcome).unwrap()).unwrap();
    let proc: LandlockProc = serde_json::from_value(outcome["outcome"]["proc"].clone()).unwrap();
    let launcher_temp = dir.path().join("launcher-tmp");
    std::fs::create_dir_all(&launcher_temp).unwrap();
    let launcher = LandlockLauncher::new(&decision, proc, &launcher_temp);
    let same_mounts = SameMountsBwrap::new(
        &decide(&taskpack(dir.path(), "linux-bwrap", "none")),
        &launcher_temp,
    );

    let mut group = c.benchmark_group("launch-true");
    group.sample_size(30);
    group.bench_function("bare-bwrap", |b| {
        b.iter(|| status_ok(&mut bare_bwrap(&workspace)))
    });
    group.bench_function("bwrap-same-mounts", |b| b.iter(|| same_mounts.run_true()));
    group.bench_function("palisade-run-bwrap", |b| b.iter(&bwrap_run));
    group.bench_function("minimal-landlock-launcher", |b| {
        b.iter(|| launcher.run_true())
    });
    group.bench_function("palisade-run-landlock", |b| b.iter(&landlock_run));
    group.bench_function("palisade-run-direct", |b| b.iter(&direct_run));
    group.bench_function("bare-true", |b| {
        b.iter(|| status_ok(&mut Command::new("true")))
    });
    group.finish();

    // Reaping: a command that leaves 1,000 sleepers behind; the run ends when all are gone.
    // Its last act writes the time (ns), so the teardown after it can be measured.
    let mut group = c.benchmark_group("reap");
    group.sample_size(10);
    let tree = "i=0; while [ $i -lt 1000 ]; do sleep 600 & i=$((i+1)); done; date +%s%N > ended";
    let reap_run = |backend: &str, json: Option<&Path>| {
        let taskpack = taskpack(dir.path(), backend, "none");
        let mut command = palisade_run(&palisade, &workspace, &cache, &taskpack, backend);
        if let Some(json) = json {
            command.arg("--json").arg(json);
        }
        status_ok(command.args(["--", "sh", "-c", tree]));
    };
    for backend in ["linux-bwrap", "linux-landlock"] {
        group.bench_function(format!("1000-processes-{backend}"), |b| {
            b.iter(|| reap_run(backend, None))
        });
    }
    group.finish();
    let mut teardown = Vec::new();
    let measured = if support::benchmarking() {
        &["linux-bwrap", "linux-landlock"][..]
    } else {
        &[]
    };
    for backend in measured.iter().copied() {
        let (mut after_command, mut reap_and_verify) = (Vec::new(), Vec::new());
        let json = dir.path().join("reap.json");
        for _ in 0..5 {
            reap_run(backend, Some(&json));
            let exited = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as f64;
            let ended: f64 = std::fs::read_to_string(workspace.join("ended"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            after_command.push((exited - ended) / 1e6);
            let outcome: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
            let us = outcome["outcome"]["timings"]["reapAndVerifyUs"].as_f64();
            reap_and_verify.push(us.unwrap_or(f64::NAN) / 1e3);
        }
        teardown.push((
            backend,
            support::median(&mut after_command),
            support::median(&mut reap_and_verify),
        ));
    }

    // Throughput: 50 runs started at once, against 50 bare bwraps.
    let mut group = c.benchmark_group("concurrent-50");
    group.sample_size(10);
    let fifty = |make: &dyn Fn() -> Command| {
        let children: Vec<_> = (0..50)
            .map(|_| {
                make()
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
    };
    let bwrap_taskpack = taskpack(dir.path(), "linux-bwrap", "none");
    group.bench_function("bare-bwrap", |b| {
        b.iter(|| fifty(&|| bare_bwrap(&workspace)))
    });
    group.bench_function("palisade-run-bwrap", |b| {
        b.iter(|| {
            fifty(&|| {
                let mut command = palisade_run(
                    &palisade,
                    &workspace,
                    &cache,
                    &bwrap_taskpack,
                    "linux-bwrap",
                );
                command.args(["--", "true"]);
                command
            })
        })
    });
    group.finish();

    println!("load (1, 5, 15 min): {}", support::load());
    support::print_ratio(
        "bwrap",
        "launch-true",
        "palisade-run-bwrap",
        "bare-bwrap",
        Some(1.5),
    );
    support::print_ratio(
        "bwrap, the launcher alone",
        "launch-true",
        "palisade-run-bwrap",
        "bwrap-same-mounts",
        Some(1.2),
    );
    support::print_ratio(
        "landlock",
        "launch-true",
        "palisade-run-landlock",
        "minimal-landlock-launcher",
        Some(3.0),
    );
    for (backend, after_command, reap_and_verify) in teardown {
        if let (Some(after), Some(reap)) = (after_command, reap_and_verify) {
            println!(
                "reap 1000 processes under {backend}: command's end to palisade's exit {after:.1} ms (median of 5; target ≤ 100 ms), of which reapAndVerify {reap:.2} ms"
            );
        }
    }
    let runs_per_second =
        |function| support::median_ns("concurrent-50", function).map(|ns| 50.0 / (ns / 1e9));
    if let (Some(palisade), Some(bare)) = (
        runs_per_second("palisade-run-bwrap"),
        runs_per_second("bare-bwrap"),
    ) {
        println!(
            "50 concurrent runs: palisade {palisade:.0} runs/s, bare bwrap {bare:.0} runs/s ({:.2}× the bare throughput)",
            palisade / bare
        );
    }
}

fn docker(c: &mut Criterion) {
    let Some(palisade) = palisade_binary() else {
        return;
    };
    let image = match docker_image::ensure() {
        Ok(image) => image,
        Err(why) => {
            eprintln!("skipping the docker benchmarks: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let cache = dir.path().join("cache");
    let taskpack = taskpack(dir.path(), "docker", "none");
    let profiles = dir.path().join("profiles.yaml");
    image.write_profile(&profiles, &[]);
    // `palisade run -- true` under docker with a taskpack and a runtime profile file.
    let docker_run = |taskpack: &Path, profiles: &Path| {
        status_ok(
            Command::new(&palisade)
                .arg("run")
                .arg("--taskpack")
                .arg(taskpack)
                .arg("--workspace")
                .arg(&workspace)
                .arg("--runtime-profiles")
                .arg(profiles)
                .arg("--docker-socket")
                .arg(&image.socket)
                .env("PALISADE_CACHE_DIR", &cache)
                .args(["--", "true"]),
        )
    };
    let palisade_run = || docker_run(&taskpack, &profiles);
    let bare_run = || {
        status_ok(
            image
                .docker()
                .args(["run", "--rm", "--network", "none", &image.id, "true"]),
        )
    };
    // Filtered egress: the proxy on the host, the static bridge as the container's entrypoint.
    let egress_taskpack = dir.path().join("docker-egress.yaml");
    std::fs::write(
        &egress_taskpack,
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: bench}\nspec:\n  sandbox:\n    preferredBackends: [docker]\n    allowedDomains: [example.test]\n",
    )
    .unwrap();
    let bridged = dir.path().join("bridged.yaml");
    let bridge = docker_image::static_bridge().unwrap();
    image.write_profile_with_bridge(&bridged, &[], Some(&bridge));
    let palisade_egress_run = || docker_run(&egress_taskpack, &bridged);
    palisade_run(); // warm the probe and compiled-component caches
    palisade_egress_run();

    let mut group = c.benchmark_group("docker-launch-true");
    group.sample_size(20);
    group.bench_function("bare-docker-run", |b| b.iter(bare_run));
    group.bench_function("palisade-run-docker", |b| b.iter(palisade_run));
    group.bench_function("palisade-run-docker-egress", |b| {
        b.iter(palisade_egress_run)
    });
    group.finish();
}

criterion_group!(benches, launch, docker);
criterion_main!(benches);
