//! The map stays true (issue 37): `docs/layout.md` names every source module of the crates, and
//! every module it names exists. A module is named by its file name or its path below `src/` in
//! backquotes (a file in a subdirectory also by that directory, `seccomp/`); `mod.rs`, `lib.rs`
//! and `main.rs` are their directory's or crate's, and the archived WIT directories are data.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const CRATES: [&str; 5] = ["engine", "formats", "host", "shims", "proxy"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file below `dir`, as paths relative to it.
fn sources(dir: &Path, below: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let relative = below.join(entry.file_name());
        if path.is_dir() {
            sources(&path, &relative, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(relative);
        }
    }
}

/// Every backquoted word of the page, split at spaces, commas and parentheses.
fn named(page: &str) -> BTreeSet<String> {
    let mut words = BTreeSet::new();
    for (index, quoted) in page.split('`').enumerate() {
        if index % 2 == 1 {
            for word in quoted.split([' ', ',', '(', ')']) {
                if !word.is_empty() {
                    words.insert(word.to_owned());
                }
            }
        }
    }
    words
}

#[test]
fn the_layout_names_every_module_and_only_modules_that_exist() {
    let page = std::fs::read_to_string(root().join("docs/layout.md")).unwrap();
    let words = named(&page);
    let mut all = Vec::new();
    let mut missing = Vec::new();
    for krate in CRATES {
        let src = root().join(krate).join("src");
        let mut files = Vec::new();
        sources(&src, Path::new(""), &mut files);
        for file in files {
            all.push(Path::new(krate).join("src").join(&file));
            let text = file.to_string_lossy().into_owned();
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            if matches!(name.as_str(), "mod.rs" | "lib.rs" | "main.rs") || text.contains("wit-") {
                continue;
            }
            let dirs: Vec<String> = file
                .ancestors()
                .skip(1)
                .filter(|d| !d.as_os_str().is_empty())
                .map(|d| format!("{}/", d.display()))
                .collect();
            let found = words.iter().any(|word| {
                *word == name
                    || word.ends_with(&format!("/{text}"))
                    || *word == text
                    || dirs
                        .iter()
                        .any(|dir| word.ends_with(&format!("/{dir}")) || word == dir)
            });
            if !found {
                missing.push(format!("{krate}/src/{text}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/layout.md does not name these modules: {missing:?}"
    );
    // Every `.rs` the page names is a file of the repository (by name or by path); `X.rs` is a
    // pattern (`probe/X.rs`: one per backend).
    for dir in ["tests", "benches", "fuzz"] {
        let mut files = Vec::new();
        sources(&root().join(dir), Path::new(dir), &mut files);
        all.extend(files);
    }
    let stale: Vec<&String> = words
        .iter()
        .filter(|word| word.ends_with(".rs") && !word.contains('*') && !word.ends_with("X.rs"))
        .filter(|word| {
            !root().join(word.as_str()).exists()
                && !all.iter().any(|file| {
                    file.ends_with(word.as_str())
                        || file
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy() == word.as_str())
                })
        })
        .collect();
    assert!(
        stale.is_empty(),
        "docs/layout.md names modules that do not exist: {stale:?}"
    );
}
