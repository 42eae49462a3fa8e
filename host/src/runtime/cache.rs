//! The compiled-component cache: `<cache_dir>/compiled/<key>.cwasm`.
//!
//! The key binds an entry to the exact component (its SHA-256), the wasmtime version and
//! wasmtime's precompile compatibility hash (target, CPU features, every codegen setting). An
//! entry is a short header carrying the SHA-256 of the compiled bytes, then the bytes produced
//! by `Component::serialize`; it is written to a temporary file and renamed into place, so
//! readers never see a partial entry. Loading checks that the directory and the file belong to
//! the current user and are writable by nobody else, and that the bytes match the header's
//! digest, before wasmtime maps them as native code. Any failure — missing, corrupt, foreign,
//! written by another wasmtime — falls back to compiling and rewriting the entry; the cache
//! is never fatal.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::{RuntimeError, WASMTIME_VERSION, one_line};

/// The first line of every cache entry.
const MAGIC: &[u8] = b"palisade compiled component v1\n";
/// The header: magic, 64 hex digits of the payload's SHA-256, a newline.
const HEADER_LEN: usize = MAGIC.len() + 64 + 1;

/// The default cache directory: `$XDG_CACHE_HOME/palisade`, else `~/.cache/palisade`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let absolute = |value: std::ffi::OsString| {
        let path = PathBuf::from(value);
        path.is_absolute().then_some(path)
    };
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").and_then(absolute) {
        return Some(xdg.join("palisade"));
    }
    std::env::var_os("HOME")
        .and_then(absolute)
        .map(|home| home.join(".cache").join("palisade"))
}

/// A compiled component and how it was obtained.
pub(super) struct Loaded {
    pub(super) component: Component,
    pub(super) cache_hit: bool,
    pub(super) cache_problem: Option<String>,
}

/// Loads the compiled component from the cache, or compiles it and stores it there.
pub(super) fn load_component(
    engine: &Engine,
    bytes: &[u8],
    sha256: &str,
    cache_dir: Option<&Path>,
) -> Result<Loaded, RuntimeError> {
    let Some(cache_dir) = cache_dir else {
        return Ok(Loaded {
            component: compile(engine, bytes, sha256)?,
            cache_hit: false,
            cache_problem: None,
        });
    };
    let dir = cache_dir.join("compiled");
    let path = dir.join(format!("{}.cwasm", cache_key(engine, sha256)));

    let mut problem = match ensure_private_dir(&dir) {
        Ok(()) => match read_entry(engine, &path) {
            Ok(Some(component)) => {
                return Ok(Loaded {
                    component,
                    cache_hit: true,
                    cache_problem: None,
                });
            }
            Ok(None) => None,
            Err(problem) => Some(problem),
        },
        Err(problem) => {
            // Not ours or not private: do not read from it and do not write to it.
            let component = compile(engine, bytes, sha256)?;
            return Ok(Loaded {
                component,
                cache_hit: false,
                cache_problem: Some(problem),
            });
        }
    };

    // Many runs start at once with a cold cache: one compiles, the others wait for its entry
    // (compiling the component takes a core for a while; fifty at once starve the host). The
    // lock goes with its holder, however it exits.
    let _compiling = lock_compiling(&dir);
    if _compiling.is_some()
        && let Ok(Some(component)) = read_entry(engine, &path)
    {
        return Ok(Loaded {
            component,
            cache_hit: true,
            cache_problem: None,
        });
    }
    let component = compile(engine, bytes, sha256)?;
    if let Err(write_problem) = write_entry(&component, &dir, &path) {
        problem = Some(match problem {
            Some(read_problem) => format!("{read_problem}; {write_problem}"),
            None => write_problem,
        });
    }
    Ok(Loaded {
        component,
        cache_hit: false,
        cache_problem: problem,
    })
}

/// An exclusive lock on `dir/compile.lock` (`dir` is private and ours by now), or `None` when it
/// cannot be had: compiling then goes ahead unlocked (the lock only spares duplicate work).
fn lock_compiling(dir: &Path) -> Option<std::fs::File> {
    crate::lock::exclusive(&dir.join("compile.lock"))
}

fn compile(engine: &Engine, bytes: &[u8], sha256: &str) -> Result<Component, RuntimeError> {
    Component::new(engine, bytes).map_err(|e| RuntimeError::Compile {
        digest: sha256.to_string(),
        message: one_line(&e),
    })
}

/// Hex SHA-256 over the component digest, the wasmtime version and the engine's
/// compatibility hash.
fn cache_key(engine: &Engine, component_sha256: &str) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    hasher.0.update(b"palisade-cwasm-key-v1\0");
    hasher.0.update(component_sha256.as_bytes());
    hasher.0.update(b"\0");
    hasher.0.update(WASMTIME_VERSION.as_bytes());
    hasher.0.update(b"\0");
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex(&hasher.0.finalize())
}

/// Feeds `Hash` output into SHA-256, so the compatibility hash can become part of a file name
/// without depending on the standard library's unspecified default hasher.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0u8; 8];
        for (slot, byte) in first.iter_mut().zip(digest.iter()) {
            *slot = *byte;
        }
        u64::from_le_bytes(first)
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// `Ok(None)` when there is no entry; `Err` with a diagnostic when one exists but cannot be used.
fn read_entry(engine: &Engine, path: &Path) -> Result<Option<Component>, String> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot stat `{}`: {error}", path.display())),
    };
    if !metadata.file_type().is_file() {
        return Err(format!("`{}` is not a regular file", path.display()));
    }
    check_private(path, &metadata)?;
    let data = fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let payload = verified_payload(&data)
        .ok_or_else(|| format!("`{}` is corrupt (digest mismatch)", path.display()))?;
    // SAFETY: `Component::deserialize` maps the bytes as native code and trusts them to be
    // wasmtime's own output for a compatible engine. Here they are: the file lives in the
    // user's private cache directory (owned by this user, writable by nobody else, checked
    // above), it is only ever written by `write_entry` with `Component::serialize` output, its
    // name binds it to the exact component digest, wasmtime version and compatibility hash of
    // this engine, and its bytes were just checked against the SHA-256 recorded when it was
    // written, so a truncated or bit-flipped file is rejected before wasmtime sees it.
    // Wasmtime itself rejects artefacts from another version or configuration.
    #[expect(
        unsafe_code,
        reason = "deserializing a compiled artefact maps native code"
    )]
    let component = unsafe { Component::deserialize(engine, payload) };
    component
        .map(Some)
        .map_err(|e| format!("cannot load `{}`: {}", path.display(), one_line(&e)))
}

/// The payload of an entry whose header digest matches it.
fn verified_payload(data: &[u8]) -> Option<&[u8]> {
    let rest = data.strip_prefix(MAGIC)?;
    let (digest, rest) = rest.split_at_checked(64)?;
    let payload = rest.strip_prefix(b"\n")?;
    (hex(&Sha256::digest(payload)).as_bytes() == digest).then_some(payload)
}

fn write_entry(component: &Component, dir: &Path, path: &Path) -> Result<(), String> {
    let payload = component
        .serialize()
        .map_err(|e| format!("cannot serialize the compiled component: {}", one_line(&e)))?;
    let mut data = Vec::with_capacity(HEADER_LEN + payload.len());
    data.extend_from_slice(MAGIC);
    data.extend_from_slice(hex(&Sha256::digest(&payload)).as_bytes());
    data.push(b'\n');
    data.extend_from_slice(&payload);

    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let temp = dir.join(format!(".tmp-{}-{nanos}.cwasm", std::process::id()));
    let written = write_new_private_file(&temp, &data)
        .and_then(|()| fs::rename(&temp, path))
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

fn write_new_private_file(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(data)?;
    file.sync_all()
}

/// Creates the directory (mode 0700) if needed and checks it is private to this user.
fn ensure_private_dir(dir: &Path) -> Result<(), String> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let metadata =
        fs::metadata(dir).map_err(|e| format!("cannot stat `{}`: {e}", dir.display()))?;
    check_private(dir, &metadata)
}

#[cfg(unix)]
fn check_private(path: &Path, metadata: &fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    // SAFETY: `geteuid` takes no arguments, touches no memory and cannot fail.
    #[expect(unsafe_code, reason = "libc::geteuid is an extern function")]
    let euid = unsafe { libc::geteuid() };
    if metadata.uid() != euid {
        return Err(format!(
            "`{}` belongs to uid `{}`, not to this user",
            path.display(),
            metadata.uid()
        ));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(format!(
            "`{}` is writable by other users (mode `{:o}`)",
            path.display(),
            metadata.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path, _metadata: &fs::Metadata) -> Result<(), String> {
    Ok(())
}
