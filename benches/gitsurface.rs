//! What protecting git's execution surface (#34) costs per run, measured in one run (release):
//!
//! - `git-facts/measure`: finding the workspace's git directories (`host.gitDirs`), in a
//!   repository's root and four levels below it, and in a directory in no repository (the walk
//!   to `/`).
//! - `git-facts/scan`: the bounded scan after the run (two levels below each writable root) over
//!   a synthetic workspace of 2,000 directories (100 × 20) plus a `node_modules` of 1,000
//!   packages, nothing planted: the cost every run pays; and over this checkout (with its
//!   `target/`), a real repository.
//! - `git-run/true`: `palisade run -- true` under `linux-bwrap` in a git repository, with git's
//!   surface protected (default) against the same run with every git rule exempted by the host
//!   configuration (the mounts before #34), to price the extra binds, pins and placeholder.
//!
//! Run with `cargo build --release -p palisade && cargo bench -p palisade-suite --bench
//! gitsurface` (about a minute). Under `cargo test --all-targets` each benchmark runs once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "benchmarks fail loudly"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};

mod support;

fn palisade_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let binary = exe.parent()?.parent()?.join("palisade");
    binary.exists().then_some(binary)
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

/// A repository with 100 × 20 directories and a `node_modules` of 1,000 packages.
fn workspace(base: &Path) -> PathBuf {
    let ws = base.join("ws");
    for i in 0..100 {
        for j in 0..20 {
            std::fs::create_dir_all(ws.join(format!("d{i}/e{j}"))).unwrap();
        }
    }
    for i in 0..1000 {
        std::fs::create_dir_all(ws.join(format!("node_modules/pkg{i}/lib"))).unwrap();
    }
    git(&ws, &["init", "-q"]);
    ws
}

fn facts(c: &mut Criterion) {
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = workspace(base.path());
    let ws = ws.canonicalize().unwrap();
    let deep = ws.join("d1/e1");
    let outside = tempfile::tempdir().unwrap();
    let outside = outside.path().canonicalize().unwrap();
    let mut group = c.benchmark_group("git-facts");
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("measure-root", |b| {
        b.iter(|| palisade::gitdirs::measure(&ws))
    });
    group.bench_function("measure-4-deep", |b| {
        b.iter(|| palisade::gitdirs::measure(&deep))
    });
    group.bench_function("measure-no-repository", |b| {
        b.iter(|| palisade::gitdirs::measure(&outside))
    });
    let roots = [ws.display().to_string()];
    let enforced = [ws.join(".git").display().to_string()];
    let started = SystemTime::now();
    group.bench_function("scan-3100-dirs", |b| {
        b.iter(|| {
            let found = palisade::gitplanted::scan(&roots, &enforced, started);
            assert!(found.planted.is_empty() && found.complete);
        })
    });
    // A real repository: this checkout, with its target directory.
    let checkout = [Path::new(env!("CARGO_MANIFEST_DIR"))
        .canonicalize()
        .unwrap()
        .display()
        .to_string()];
    group.bench_function("scan-this-checkout", |b| {
        b.iter(|| palisade::gitplanted::scan(&checkout, &[], started))
    });
    group.finish();
}

fn runs(c: &mut Criterion) {
    let Some(palisade) = palisade_binary() else {
        eprintln!("git-run skipped: build palisade first (cargo build --release -p palisade)");
        return;
    };
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = base.path().join("repo");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("README"), "x\n").unwrap();
    git(&ws, &["init", "-q"]);
    let cache = base.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    let exempt = base.path().join("exempt.yaml");
    std::fs::write(
        &exempt,
        "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec:\n  exemptProtectedPaths: [.git, .git/hooks, .git/config, .git/config.worktree]\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let status = Command::new(&palisade)
            .arg("run")
            .args(extra)
            .args(["--backend", "linux-bwrap", "--quiet", "--", "true"])
            .current_dir(&ws)
            .env("PALISADE_CACHE_DIR", &cache)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "palisade run {extra:?}");
    };
    let exempt_arg = exempt.display().to_string();
    let mut group = c.benchmark_group("git-run");
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("protected", |b| b.iter(|| run(&[])));
    group.bench_function("exempted", |b| {
        b.iter(|| run(&["--host-config", &exempt_arg]))
    });
    group.finish();
    if support::benchmarking() {
        support::print_ratio(
            "git surface protected vs exempted",
            "git-run",
            "protected",
            "exempted",
            None,
        );
        println!("load: {}", support::load());
    }
}

criterion_group!(benches, facts, runs);
criterion_main!(benches);
