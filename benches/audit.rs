//! What the audit file's hash chain costs per record (#36), measured in one run (release): a
//! real decision record (from `palisade decide --record`, about 17 KB) appended to a file that
//! already holds 200 records, by `palisade::audit::append` (open, lock, read the last line back
//! from the end, hash it, link, write, sync) against the same bytes appended without the chain
//! (open, lock, write, sync), and with a checkpoint file replaced after each append
//! (`--checkpoint`: a temp file written, synced and renamed). A run appends two lines, its
//! decision and its outcome.
//!
//! Run with `cargo bench -p palisade-suite --bench audit` (about 20 s). Under `cargo test
//! --all-targets` each benchmark runs once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
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

criterion_group!(benches, chain);
criterion_main!(benches);
