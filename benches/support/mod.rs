//! What the benches share: the medians criterion measured in this run (`target/criterion/<group>/
//! <function>/new/estimates.json`), and the ratio lines they print from them. Under `cargo test
//! --all-targets` (each benchmark runs once, no estimates) nothing is printed.

#![allow(dead_code, reason = "each bench uses part of it")]

use std::path::PathBuf;

fn criterion_dir() -> Option<PathBuf> {
    // target/<profile>/deps/<bench>-… → target/criterion
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.join("criterion"))
}

/// The median of `group/function` in nanoseconds, when this run measured it.
pub fn median_ns(group: &str, function: &str) -> Option<f64> {
    let path = criterion_dir()?
        .join(group)
        .join(function)
        .join("new")
        .join("estimates.json");
    let estimates: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    estimates.pointer("/median/point_estimate")?.as_f64()
}

/// Prints `label: A / B = ratio (medians a ms / b ms)`, with the target when given.
pub fn print_ratio(label: &str, group: &str, a: &str, b: &str, target: Option<f64>) {
    if let (Some(a_ns), Some(b_ns)) = (median_ns(group, a), median_ns(group, b)) {
        let ratio = a_ns / b_ns;
        let target = target.map_or_else(String::new, |t| {
            format!(
                ", target ≤ {t:.2}× {}",
                if ratio <= t { "(met)" } else { "(not met)" }
            )
        });
        println!(
            "ratio {label}: {a} / {b} = {ratio:.2}× (medians {:.2} ms / {:.2} ms){target}",
            a_ns / 1e6,
            b_ns / 1e6
        );
    }
}

/// The `palisade` binary this bench's profile built, run from a copy (with `palisade-init`
/// beside it) in a directory of its own, as an installed one is: a binary the linker just wrote
/// sits in the page cache in small pieces and starts measurably slower than a copy of the same
/// bytes (here 0.24 ms for `palisade --version`, 1.5 ms for a cached `palisade decide`).
/// `None` when it was not built. The directory goes with the returned guard.
pub fn installed_palisade() -> Option<(tempfile::TempDir, PathBuf)> {
    // target/<profile>/deps/<bench>-… → target/<profile>/palisade
    let exe = std::env::current_exe().ok()?;
    let built = exe.parent()?.parent()?.to_path_buf();
    if !built.join("palisade").exists() {
        return None;
    }
    let dir = tempfile::tempdir().ok()?;
    for program in ["palisade", "palisade-init"] {
        let from = built.join(program);
        if from.exists() {
            std::fs::copy(&from, dir.path().join(program)).ok()?;
        }
    }
    let palisade = dir.path().join("palisade");
    Some((dir, palisade))
}

/// Whether this is a measuring run (`cargo bench` passes `--bench`), not the smoke test of
/// `cargo test --all-targets`: extra measurements outside criterion run only then.
pub fn benchmarking() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// The median of some measurements.
pub fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// The machine's load averages (`/proc/loadavg`), to print beside the numbers.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}
