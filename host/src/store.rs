//! A content-addressed store of engine components, so that a record can be replayed months later
//! with the exact engine that made it.
//!
//! Layout: `<root>/sha256/<hex>.wasm`, where `<hex>` is the lower-case SHA-256 of the file's
//! bytes. The name is the only index: nothing else is stored, so a store can be copied, merged
//! (`cp -n`) or served read-only. Every read re-hashes the bytes, so a corrupted or substituted
//! file is reported, never run. Writes go to a temporary file that is renamed into place, so a
//! concurrent reader never sees half a component.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use palisade_engine::output::sha256_hex;

/// The largest component the store reads (the engine is ~0.5 MiB).
const MAX_COMPONENT_BYTES: u64 = 64 * 1024 * 1024;

/// Why a component could not be stored or fetched.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("`{0}` is not a sha-256 digest (64 lower-case hex digits)")]
    InvalidDigest(String),
    #[error("engine component sha256:{digest} is not in the component store (`{}`)", path.display())]
    NotFound { digest: String, path: PathBuf },
    #[error(
        "component store entry `{}` is corrupt: its bytes hash to sha256:{actual}",
        path.display()
    )]
    Corrupt { path: PathBuf, actual: String },
    #[error("component store entry `{}` is larger than {MAX_COMPONENT_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("cannot use the component store at `{}`: {reason}", path.display())]
    Io { path: PathBuf, reason: String },
}

/// A directory of components named by their digest.
#[derive(Clone, Debug)]
pub struct ComponentStore {
    root: PathBuf,
}

/// What [`ComponentStore::put`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Lower-case hex SHA-256 of the component.
    pub digest: String,
    /// Where it is stored.
    pub path: PathBuf,
    /// Whether this call wrote it (false: an intact copy was already there).
    pub written: bool,
}

impl ComponentStore {
    /// The store rooted at `root` (created on the first `put`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ComponentStore { root: root.into() }
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the component with this digest lives. The digest is validated first, so a record
    /// cannot name a path outside the store.
    pub fn path_for(&self, digest: &str) -> Result<PathBuf, StoreError> {
        if !is_sha256_hex(digest) {
            return Err(StoreError::InvalidDigest(digest.to_owned()));
        }
        Ok(self.root.join("sha256").join(format!("{digest}.wasm")))
    }

    /// Stores `bytes` under their digest. An intact copy already there is kept; a corrupt one is
    /// replaced (the bytes given are hashed here, so the replacement is verified).
    pub fn put(&self, bytes: &[u8]) -> Result<Stored, StoreError> {
        let digest = sha256_hex(bytes);
        let path = self.path_for(&digest)?;
        match self.get(&digest) {
            Ok(_) => {
                return Ok(Stored {
                    digest,
                    path,
                    written: false,
                });
            }
            Err(StoreError::NotFound { .. } | StoreError::Corrupt { .. }) => {}
            Err(other) => return Err(other),
        }
        let io = |path: &Path, e: std::io::Error| StoreError::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let dir = self.root.join("sha256");
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let temp = dir.join(format!(".{digest}.wasm.{}.tmp", std::process::id()));
        let written = std::fs::File::create(&temp)
            .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
            .and_then(|()| std::fs::rename(&temp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(io(&path, e));
        }
        Ok(Stored {
            digest,
            path,
            written: true,
        })
    }

    /// The bytes of the component with this digest, verified against it.
    pub fn get(&self, digest: &str) -> Result<Vec<u8>, StoreError> {
        let path = self.path_for(digest)?;
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound {
                    digest: digest.to_owned(),
                    path: self.root.clone(),
                });
            }
            Err(e) => {
                return Err(StoreError::Io {
                    path,
                    reason: e.to_string(),
                });
            }
        };
        let mut bytes = Vec::new();
        file.take(MAX_COMPONENT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| StoreError::Io {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_COMPONENT_BYTES {
            return Err(StoreError::TooLarge { path });
        }
        let actual = sha256_hex(&bytes);
        if actual != digest {
            return Err(StoreError::Corrupt { path, actual });
        }
        Ok(bytes)
    }
}

/// Whether `text` is 64 lower-case hex digits.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;

    #[test]
    fn put_then_get_round_trips_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let store = ComponentStore::new(dir.path());
        let stored = store.put(b"component bytes").unwrap();
        assert!(stored.written);
        assert_eq!(stored.digest, sha256_hex(b"component bytes"));
        assert_eq!(
            stored.path,
            dir.path()
                .join("sha256")
                .join(format!("{}.wasm", stored.digest))
        );
        assert_eq!(store.get(&stored.digest).unwrap(), b"component bytes");
        assert!(!store.put(b"component bytes").unwrap().written);
    }

    #[test]
    fn a_corrupt_entry_is_reported_then_repaired_by_put() {
        let dir = tempfile::tempdir().unwrap();
        let store = ComponentStore::new(dir.path());
        let stored = store.put(b"good").unwrap();
        std::fs::write(&stored.path, b"evil").unwrap();
        assert!(matches!(
            store.get(&stored.digest),
            Err(StoreError::Corrupt { actual, .. }) if actual == sha256_hex(b"evil")
        ));
        assert!(store.put(b"good").unwrap().written);
        assert_eq!(store.get(&stored.digest).unwrap(), b"good");
    }

    #[test]
    fn digests_are_validated_before_touching_the_filesystem() {
        let store = ComponentStore::new("/nonexistent-store");
        for bad in [
            "../../etc/passwd",
            "ABCDEF",
            &"A".repeat(64),
            &"g".repeat(64),
            "",
        ] {
            assert!(
                matches!(store.get(bad), Err(StoreError::InvalidDigest(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            store.get(&"a".repeat(64)),
            Err(StoreError::NotFound { .. })
        ));
    }
}
