//! What the audit file's hash chain costs per record (#36), measured in one run (release): a
//! real decision record (from `palisade decide --record`, about 17 KB) appended to a file that
//! already holds 200 records, by `palisade::audit::append` (open, lock, read the last line back
//! from the end, hash it, link, write, sync) against the same bytes appended without the chain
//! (open, lock, write, sync), and with a checkpoint file replaced after each append
//! (`--checkpoint`: a temp file written, synced and renamed). A run appends two lines, its
//! decision and its outcome.
//!
//! Then the seals (#36), measured interleaved (each round appends once each way, in a rotating
//! order, and the medians are compared): a real run's two lines (its decision record and its
//! outcome) appended plain, chained, and chained and sealed (an Ed25519 signature over each
//! line's in-toto statement, one more line each); and whole runs, `palisade run --backend
//! linux-bwrap --audit FILE -- true` for a user with a signing key and one without (who denies the
//! same, empty, directory with `--deny-read`, so both runs mount the same masks), alternating.
//! Target: signing and chaining add at most 0.3 ms to a run.
//!
//! Run with `cargo build --release -p palisade && cargo bench -p palisade-suite --bench audit`
//! (about 40 s). Under `cargo test --all-targets` each benchmark runs once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "benchmarks fail loudly"
)]

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

mod support;

/// A decision record made by this checkout's engine, through the CLI's own path.
fn record(dir: &Path) -> palisade::audit::AuditRecord {
    let exe = std::env::current_exe().unwrap();
    let palisade = exe.parent().unwrap().parent().unwrap().join("palisade");
    let file = dir.join("one.jsonl");
    if palisade.exists() {
        let status = std::process::Command::new(&palisade)
            .args(["decide", "--record"])
            .arg(&file)
            .current_dir(dir)
            .env("PALISADE_CACHE_DIR", dir.join("cache"))
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let text = std::fs::read_to_string(&file).unwrap();
        if let palisade::audit::AuditLine::Decision(record) =
            palisade::audit::parse_line(text.lines().next().unwrap())
        {
            return (*record).clone().unwrap();
        }
    }
    // Without a built binary (the smoke test): a record of the same shape, smaller.
    serde_json::from_value(serde_json::json!({
        "schemaVersion": "palisade.audit/v1",
        "engine": {"componentSha256": "0", "engineVersion": "0", "witVersion": "0",
                   "schemaVersion": "0", "wasmtimeVersion": "0", "determinism": {}},
        "input": {"padding": "x".repeat(16_000)},
        "output": "{}",
        "outputDigest": "0",
        "context": {"time": "", "hostName": "", "palisadeVersion": "", "command": "",
                    "probeSource": ""}
    }))
    .unwrap()
}

fn plain_append(path: &Path, line: &[u8]) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.lock().unwrap();
    file.write_all(line).unwrap();
    file.sync_data().unwrap();
}

fn chain(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let record = record(dir.path());
    let chained = dir.path().join("chained.jsonl");
    let plain = dir.path().join("plain.jsonl");
    let mut line = serde_json::to_string(&record).unwrap();
    line.push('\n');
    for _ in 0..200 {
        palisade::audit::append(&chained, &mut record.clone(), None, None).unwrap();
        plain_append(&plain, line.as_bytes());
    }
    let mut group = c.benchmark_group("audit-append");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("chained", |b| {
        b.iter(|| palisade::audit::append(&chained, &mut record.clone(), None, None).unwrap())
    });
    let checkpoint = dir.path().join("checkpoint.json");
    group.bench_function("chained-checkpoint", |b| {
        b.iter(|| {
            palisade::audit::append(&chained, &mut record.clone(), Some(&checkpoint), None).unwrap()
        })
    });
    group.bench_function("plain", |b| {
        b.iter(|| {
            // The same work as `append` but the chain: serialize, then append.
            let mut line = serde_json::to_string(&record.clone()).unwrap();
            line.push('\n');
            plain_append(&plain, line.as_bytes());
        })
    });
    group.finish();
    if support::benchmarking() {
        if let (Some(chained), Some(plain)) = (
            support::median_ns("audit-append", "chained"),
            support::median_ns("audit-append", "plain"),
        ) {
            println!(
                "chaining costs {:.3} ms per line ({:.3} ms chained, {:.3} ms plain; a {} byte record); a run appends two",
                (chained - plain) / 1e6,
                chained / 1e6,
                plain / 1e6,
                line.len()
            );
        }
        if let (Some(with), Some(plain)) = (
            support::median_ns("audit-append", "chained-checkpoint"),
            support::median_ns("audit-append", "plain"),
        ) {
            println!(
                "chaining and a checkpoint cost {:.3} ms per line",
                (with - plain) / 1e6
            );
        }
        println!("load: {}", support::load());
    }
}

/// Microseconds `f` took.
fn timed(f: impl FnOnce()) -> f64 {
    let start = std::time::Instant::now();
    f();
    start.elapsed().as_secs_f64() * 1e6
}

/// A run's two lines, as `palisade run` appends them.
struct RunLines {
    decision: palisade::audit::AuditRecord,
    outcome: palisade::audit::OutcomeRecord,
}

impl RunLines {
    /// Both lines appended plain (serialized, locked, written, synced), chained, or chained
    /// and sealed.
    fn append(&self, path: &Path, how: usize, signer: &palisade::keys::Signer) {
        match how {
            0 => {
                for line in [
                    serde_json::to_string(&self.decision).unwrap(),
                    serde_json::to_string(&self.outcome).unwrap(),
                ] {
                    plain_append(path, (line + "\n").as_bytes());
                }
            }
            _ => {
                let signer = (how == 2).then_some(signer);
                palisade::audit::append(path, &mut self.decision.clone(), None, signer).unwrap();
                palisade::audit::append_outcome(path, &mut self.outcome.clone(), None, signer)
                    .unwrap();
            }
        }
    }
}

fn seal(_: &mut Criterion) {
    let measuring = support::benchmarking();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let exe = std::env::current_exe().unwrap();
    let palisade = exe.parent().unwrap().parent().unwrap().join("palisade");
    if !palisade.exists() {
        eprintln!("skipping the seals: build the palisade binary first");
        return;
    }
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // The keyed run denies the key's directory; the other denies the same (empty) directory by
    // `--deny-read`, so both mount the same masks and the difference is the key and the seals.
    let deny = dir.path().join("plain-home/.config/palisade/keys");
    let run = |home: &str, audit: &str| {
        let mut command = std::process::Command::new(&palisade);
        command.args(["run", "--backend", "linux-bwrap", "--audit"]);
        command.arg(dir.path().join(audit));
        if home == "plain-home" {
            command.arg("--deny-read").arg(&deny);
        }
        command
            .args(["--", "true"])
            .current_dir(&ws)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", dir.path().join(home))
            .env("PALISADE_CACHE_DIR", dir.path().join("cache"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        command
    };
    for home in ["keyed", "plain-home"] {
        std::fs::create_dir_all(dir.path().join(home)).unwrap();
    }
    std::fs::create_dir_all(&deny).unwrap();
    let made = std::process::Command::new(&palisade)
        .args(["key", "init"])
        .env("HOME", dir.path().join("keyed"))
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    for home in ["keyed", "plain-home"] {
        assert!(run(home, "warm.jsonl").status().unwrap().success());
    }

    // A real run's two lines, appended plain, chained, chained and sealed, interleaved.
    let text = std::fs::read_to_string(dir.path().join("warm.jsonl")).unwrap();
    let mut decision = None;
    let mut outcome = None;
    for line in text.lines() {
        match palisade::audit::parse_line(line) {
            palisade::audit::AuditLine::Decision(record) => decision = (*record).ok(),
            palisade::audit::AuditLine::Outcome(line) => outcome = Some(line),
            palisade::audit::AuditLine::Seal(_) => {}
        }
    }
    let lines = RunLines {
        decision: decision.unwrap(),
        outcome: outcome.unwrap(),
    };
    let signer = palisade::keys::Signer::from_seed([9; 32]);
    let files = ["plain", "chained", "sealed"].map(|name| dir.path().join(format!("{name}.jsonl")));
    let rounds = if measuring { 400 } else { 2 };
    let mut times: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        for step in 0..3 {
            let how = (round + step) % 3;
            times[how].push(timed(|| lines.append(&files[how], how, &signer)));
        }
    }
    let [mut plain, mut chained, mut sealed] = times;
    let (plain, chained, sealed) = (
        support::median(&mut plain).unwrap(),
        support::median(&mut chained).unwrap(),
        support::median(&mut sealed).unwrap(),
    );
    if measuring {
        println!(
            "a run's two lines ({} + {} bytes), interleaved over {rounds} rounds (medians): plain {:.3} ms, chained {:.3} ms, chained and sealed {:.3} ms: sealing adds {:.3} ms, chaining and sealing {:.3} ms (target ≤ 0.3 ms)",
            serde_json::to_string(&lines.decision).unwrap().len(),
            serde_json::to_string(&lines.outcome).unwrap().len(),
            plain / 1e3,
            chained / 1e3,
            sealed / 1e3,
            (sealed - chained) / 1e3,
            (sealed - plain) / 1e3
        );
    }

    // Whole runs, with a key and without, alternating.
    let runs = if measuring { 300 } else { 1 };
    let (mut keyed, mut unkeyed) = (Vec::new(), Vec::new());
    for round in 0..runs {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for with_key in order {
            let (home, audit, times) = if with_key {
                ("keyed", "keyed.jsonl", &mut keyed)
            } else {
                ("plain-home", "unkeyed.jsonl", &mut unkeyed)
            };
            times.push(timed(|| {
                assert!(run(home, audit).status().unwrap().success())
            }));
        }
    }
    if measuring {
        let (keyed, unkeyed) = (
            support::median(&mut keyed).unwrap(),
            support::median(&mut unkeyed).unwrap(),
        );
        println!(
            "palisade run -- true, interleaved over {runs} rounds (medians): with a signing key {:.2} ms, without {:.2} ms: reading the key and sealing two lines add {:.3} ms to a run (target ≤ 0.3 ms)",
            keyed / 1e3,
            unkeyed / 1e3,
            (keyed - unkeyed) / 1e3
        );
        println!("load: {}", support::load());
    }
}

criterion_group!(benches, chain, seal);
criterion_main!(benches);
