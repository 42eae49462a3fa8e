//! The probe cache: `<cache_dir>/probes.json` holding `{key, probes}`.
//!
//! The key is the JSON of [`Inputs`] — everything the probes depend on — so a hit means the
//! same binaries, the same socket, the same kernel boot, the same user and sysctls. Nothing is
//! trusted blindly: a missing file or a different key is a miss; an unreadable, malformed,
//! foreign-owned or group/world-writable file is ignored with a [`CacheError`] and re-probed.
//! Writes go to a private temp file renamed into place, in a `0700` directory, as `0600`.
//!
//! Identity: after writing, Palisade records the file's identity (device, inode, size,
//! modification and status-change times) in `probes.json.id`. A cache file whose identity is
//! not the recorded one was changed by someone other than Palisade — a command that once could
//! write the cache, another program — and is ignored with a [`CacheError`] and re-probed: any
//! change through the filesystem moves the file's ctime, which no process can set back (the
//! compiled component's cache rests on the same fact, `runtime::cache`).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_engine::model::{Backend, BackendProbe};
use serde::{Deserialize, Serialize};

use super::Inputs;

/// The cache file's name inside the cache directory.
pub const CACHE_FILE_NAME: &str = "probes.json";

/// The file that records the identity of the cache file Palisade last wrote.
pub const IDENTITY_FILE_NAME: &str = "probes.json.id";

/// Larger files are not ours.
const MAX_CACHE_BYTES: u64 = 1024 * 1024;

/// Why the cache could not be used or written. A miss is not an error.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot read probe cache `{}`: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("ignored corrupt probe cache `{}`: {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },
    #[error("ignored untrusted probe cache `{}`: {detail}", path.display())]
    Untrusted { path: PathBuf, detail: String },
    #[error("cannot write probe cache `{}`: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot encode probe cache: {0}")]
    Encode(#[from] serde_json::Error),
}

#[derive(Serialize)]
struct CacheFileOut<'a> {
    key: &'a Inputs,
    probes: &'a [BackendProbe],
}

/// Read in two steps: the key as plain JSON (a key written by another version is just stale),
/// then the probes only when the key matches.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheFileIn {
    key: serde_json::Value,
    probes: serde_json::Value,
}

/// The cached probes if the file is trustworthy and its key is `key`; `Ok(None)` on a miss.
pub(crate) fn load(dir: &Path, key: &Inputs) -> Result<Option<Vec<BackendProbe>>, CacheError> {
    let path = dir.join(CACHE_FILE_NAME);
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
            return Err(CacheError::Untrusted {
                path,
                detail: "it is a symlink".to_owned(),
            });
        }
        Err(source) => return Err(CacheError::Read { path, source }),
    };
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(source) => return Err(CacheError::Read { path, source }),
    };
    if let Some(detail) = untrusted(&meta, key.euid, false) {
        return Err(CacheError::Untrusted { path, detail });
    }
    if meta.len() > MAX_CACHE_BYTES {
        return Err(CacheError::Corrupt {
            path,
            detail: format!("larger than {MAX_CACHE_BYTES} bytes"),
        });
    }
    let recorded = fs::read_to_string(dir.join(IDENTITY_FILE_NAME)).ok();
    if recorded.as_deref().map(str::trim) != Some(identity(&meta).as_str()) {
        return Err(CacheError::Untrusted {
            path,
            detail: String::from(
                "it is not the file palisade wrote (its identity changed, or none was recorded)",
            ),
        });
    }
    // Sized from the file (checked above to be at most MAX_CACHE_BYTES): one read, not a
    // probe of 32 bytes doubled eight times.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).saturating_add(1));
    if let Err(source) = (&mut file).take(MAX_CACHE_BYTES).read_to_end(&mut bytes) {
        return Err(CacheError::Read { path, source });
    }

    let stored: CacheFileIn = match serde_json::from_slice(&bytes) {
        Ok(stored) => stored,
        Err(err) => {
            return Err(CacheError::Corrupt {
                path,
                detail: err.to_string(),
            });
        }
    };
    if stored.key != serde_json::to_value(key)? {
        return Ok(None);
    }
    let probes: Vec<BackendProbe> = match serde_json::from_value(stored.probes) {
        Ok(probes) => probes,
        Err(err) => {
            return Err(CacheError::Corrupt {
                path,
                detail: err.to_string(),
            });
        }
    };
    let canonical = probes.len() == Backend::ALL.len()
        && probes
            .iter()
            .zip(Backend::ALL)
            .all(|(probe, b)| probe.backend == b);
    if !canonical {
        return Err(CacheError::Corrupt {
            path,
            detail: "not one probe per backend in canonical order".to_owned(),
        });
    }
    Ok(Some(probes))
}

/// Writes `{key, probes}` atomically, creating `dir` (mode 0700) if needed.
pub(crate) fn store(dir: &Path, key: &Inputs, probes: &[BackendProbe]) -> Result<(), CacheError> {
    let bytes = serde_json::to_vec(&CacheFileOut { key, probes })?;
    let write_error = |source: io::Error| CacheError::Write {
        path: dir.join(CACHE_FILE_NAME),
        source,
    };

    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(write_error)?;
    let dir_meta = fs::metadata(dir).map_err(write_error)?;
    if let Some(detail) = untrusted(&dir_meta, key.euid, true) {
        return Err(CacheError::Untrusted {
            path: dir.to_path_buf(),
            detail,
        });
    }

    let temp = dir.join(temp_name());
    let written =
        write_new(&temp, &bytes).and_then(|()| fs::rename(&temp, dir.join(CACHE_FILE_NAME)));
    if let Err(err) = written {
        let _ = fs::remove_file(&temp);
        return Err(write_error(err));
    }
    // The identity of the file now in place (a rename moves its ctime: read after it).
    let placed = fs::symlink_metadata(dir.join(CACHE_FILE_NAME)).map_err(write_error)?;
    let id_temp = dir.join(format!("{}.id", temp_name()));
    let recorded = write_new(&id_temp, identity(&placed).as_bytes())
        .and_then(|()| fs::rename(&id_temp, dir.join(IDENTITY_FILE_NAME)));
    if let Err(err) = recorded {
        let _ = fs::remove_file(&id_temp);
        return Err(write_error(err));
    }
    Ok(())
}

/// A file's identity: device, inode, size, modification and status-change times (ns).
fn identity(meta: &fs::Metadata) -> String {
    format!(
        "dev={} ino={} size={} mtime={}.{:09} ctime={}.{:09}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    )
}

/// An exclusive lock on `dir/probe.lock` (creating `dir`, mode 0700, if needed), held by the run
/// that probes while others with the same cold cache wait for its result. `None` when the
/// directory is not one this user may trust or the lock cannot be taken: probing then goes
/// ahead unlocked (the lock only spares the host duplicate work).
pub(crate) fn lock_probing(dir: &Path, euid: u32) -> Option<File> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .ok()?;
    let meta = fs::metadata(dir).ok()?;
    if untrusted(&meta, euid, true).is_some() {
        return None;
    }
    crate::lock::exclusive(&dir.join("probe.lock"))
}

fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    file.write_all(bytes)
}

/// A name no concurrent palisade uses: pid plus a clock reading.
fn temp_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    format!(".{CACHE_FILE_NAME}.{}.{nanos}.tmp", std::process::id())
}

/// Why a cache file or directory must not be trusted: another owner, or writable by others.
fn untrusted(meta: &fs::Metadata, euid: u32, is_dir: bool) -> Option<String> {
    if is_dir && !meta.is_dir() {
        return Some("not a directory".to_owned());
    }
    if !is_dir && !meta.is_file() {
        return Some("not a regular file".to_owned());
    }
    if meta.uid() != euid {
        return Some(format!("owned by uid {}, not {euid}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "mode {:o} is writable by others",
            meta.mode() & 0o7777
        ));
    }
    None
}
