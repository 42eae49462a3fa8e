//! Tool caches a run may write: `run --cache cargo` makes the directories where cargo keeps its
//! downloads writable, and nothing else of the home.
//!
//! Inside a sandbox the home is read-only, so `cargo build`, `npm install` or `pip install`
//! fail writing their caches. A cache is a writable root like any other (recorded in the
//! decision, checked by the engine), named for the tool so that the user need not know, and
//! never reaching a dotfile or a credential store: cargo's `credentials.toml` sits beside the
//! registry, not in it, and stays denied.

use std::path::{Path, PathBuf};

/// Each tool's cache directories, relative to the home.
/// Not `~/.cache` as a whole: Palisade's own cache lives there, and other tools' state too.
pub const KNOWN: [(&str, &[&str]); 8] = [
    ("cargo", &[".cargo/registry", ".cargo/git"]),
    ("npm", &[".npm"]),
    ("yarn", &[".cache/yarn"]),
    ("pip", &[".cache/pip"]),
    ("uv", &[".cache/uv"]),
    ("go", &["go/pkg/mod", ".cache/go-build"]),
    ("maven", &[".m2/repository"]),
    ("gradle", &[".gradle/caches"]),
];

/// Why a `--cache` value cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("--cache `{0}` is neither a known tool ({known}) nor an absolute path", known = known_names())]
    Unknown(String),
    #[error("--cache `{}`: cannot create it: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn known_names() -> String {
    KNOWN
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The directories `values` name, under `home`, each created (mode 0700) when missing so that
/// it can be bound writable.
pub fn directories(values: &[String], home: &Path) -> Result<Vec<PathBuf>, CacheError> {
    let mut dirs = Vec::new();
    for value in values {
        let named = KNOWN.iter().find(|(name, _)| *name == value.as_str());
        let paths: Vec<PathBuf> = match named {
            Some((_, relative)) => relative.iter().map(|r| home.join(r)).collect(),
            None if Path::new(value).is_absolute() => vec![PathBuf::from(value)],
            None => return Err(CacheError::Unknown(value.clone())),
        };
        for path in paths {
            create(&path)?;
            if !dirs.contains(&path) {
                dirs.push(path);
            }
        }
    }
    Ok(dirs)
}

fn create(path: &Path) -> Result<(), CacheError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| CacheError::Create {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn names_map_under_the_home_and_paths_pass_through() {
        let home = tempfile::tempdir().unwrap();
        let extra = home.path().join("elsewhere");
        let dirs = directories(
            &["cargo".into(), extra.display().to_string(), "cargo".into()],
            home.path(),
        )
        .unwrap();
        assert_eq!(
            dirs,
            [
                home.path().join(".cargo/registry"),
                home.path().join(".cargo/git"),
                extra.clone()
            ]
        );
        assert!(dirs.iter().all(|d| d.is_dir()));
        assert!(matches!(
            directories(&["relative".into()], home.path()),
            Err(CacheError::Unknown(_))
        ));
    }
}
