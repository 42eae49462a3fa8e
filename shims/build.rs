//! Exports `PALISADE_SHIMS_BUILD`: a digest of this crate's sources and the lockfile.
//!
//! The sandbox's init can run from a binary other than the `palisade` that launched it (the
//! small `palisade-init` installed beside it, which starts in a fraction of the time). Both
//! carry this value, the launcher passes its own, and init refuses to run under a launcher from
//! another build: an init left behind by an older install must not apply its older ruleset or
//! filter. The value depends on nothing but the sources, so builds stay reproducible.

use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let lockfile = manifest_dir.join("../Cargo.lock");
    let mut files = Vec::new();
    collect(&manifest_dir.join("src"), &mut files);
    files.sort();
    files.push(manifest_dir.join("Cargo.toml"));
    files.push(lockfile.clone());
    let mut hasher = Sha256::new();
    for file in &files {
        let name = file.strip_prefix(&manifest_dir).unwrap_or(file);
        hasher.update(name.to_string_lossy().as_bytes());
        hasher.update([0]);
        // An unreadable file still changes the digest (by its absence), never the build.
        let contents = fs::read(file).unwrap_or_default();
        hasher.update((contents.len() as u64).to_le_bytes());
        hasher.update(&contents);
    }
    let digest = hasher.finalize();
    let hex: String = digest
        .iter()
        .take(12)
        .map(|byte| format!("{byte:02x}"))
        .collect();
    println!("cargo::rustc-env=PALISADE_SHIMS_BUILD={hex}");
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=Cargo.toml");
    println!("cargo::rerun-if-changed={}", lockfile.display());
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => collect(&path, files),
            Ok(kind) if kind.is_file() => files.push(path),
            _ => {}
        }
    }
}
