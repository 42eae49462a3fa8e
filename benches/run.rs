//! Launch overhead: `palisade run -- true` per backend against the bare mechanism with
//! equivalent settings, measured in the same run, plus reaping a 1,000-process tree.
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
    reason = "benchmarks fail loudly"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "../tests/support/docker_image.rs"]
mod docker_image;

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

fn launch(c: &mut Criterion) {
    let Some(palisade) = palisade_binary() else {
        eprintln!("skipping: build the palisade binary first (cargo build --release -p palisade)");
        return;
    };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let cache = dir.path().join("cache");
    let run = |backend: &'static str, network: &'static str| {
        let taskpack = taskpack(dir.path(), backend, network);
        let palisade = palisade.clone();
        let workspace = workspace.clone();
        let cache = cache.clone();
        move || {
            let mut command = Command::new(&palisade);
            command
                .arg("run")
                .arg("--taskpack")
                .arg(&taskpack)
                .arg("--workspace")
                .arg(&workspace)
                .env("PALISADE_CACHE_DIR", &cache);
            if backend == "direct-dedicated" {
                command.arg("--allow-direct-dedicated");
            }
            status_ok(command.args(["--", "true"]));
        }
    };
    let bwrap_run = run("linux-bwrap", "none");
    let landlock_run = run("linux-landlock", "none");
    let direct_run = run("direct-dedicated", "allow-outbound");
    bwrap_run(); // warm the probe and compiled-component caches

    let mut group = c.benchmark_group("launch-true");
    group.sample_size(30);
    group.bench_function("bare-bwrap", |b| {
        b.iter(|| {
            status_ok(Command::new("bwrap").args([
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--unshare-all",
                "--die-with-parent",
                "true",
            ]))
        })
    });
    group.bench_function("bare-bwrap-new-session", |b| {
        b.iter(|| {
            status_ok(Command::new("bwrap").args([
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--unshare-all",
                "--die-with-parent",
                "--new-session",
                "true",
            ]))
        })
    });
    group.bench_function("palisade-run-bwrap", |b| b.iter(&bwrap_run));
    group.bench_function("palisade-run-landlock", |b| b.iter(&landlock_run));
    group.bench_function("palisade-run-direct", |b| b.iter(&direct_run));
    group.bench_function("bare-true", |b| {
        b.iter(|| status_ok(&mut Command::new("true")))
    });
    group.finish();

    // Reaping: a command that leaves 1,000 sleepers behind; the run ends when all are gone.
    let mut group = c.benchmark_group("reap");
    group.sample_size(10);
    let tree = "i=0; while [ $i -lt 1000 ]; do sleep 600 & i=$((i+1)); done";
    for backend in ["linux-bwrap", "linux-landlock"] {
        let taskpack = taskpack(dir.path(), backend, "none");
        group.bench_function(format!("1000-processes-{backend}"), |b| {
            b.iter(|| {
                status_ok(
                    Command::new(&palisade)
                        .arg("run")
                        .arg("--taskpack")
                        .arg(&taskpack)
                        .arg("--workspace")
                        .arg(&workspace)
                        .env("PALISADE_CACHE_DIR", &cache)
                        .args(["--", "sh", "-c", tree]),
                )
            })
        });
    }
    group.finish();
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
