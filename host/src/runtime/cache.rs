//! The compiled-component cache: `<cache_dir>/compiled/<key>.cwasm` and its check file
//! `<key>.check`.
//!
//! The key binds an entry to the exact component (its SHA-256), the wasmtime version and
//! wasmtime's precompile compatibility hash (target, CPU features, every codegen setting). The
//! `.cwasm` is exactly what `Component::serialize` produced, so wasmtime maps it as it is (no
//! copy); the check file holds the SHA-256 of those bytes, written with them, and, once a load
//! found that they match, the identity of the file that matched ([`Identity`]). Both are
//! written to temporary files and renamed into place, so readers never see a partial file.
//!
//! Loading checks that the directory and both files belong to the current user and are
//! writable by nobody else, then verifies the bytes against the digest before wasmtime maps
//! them as native code — in full, unless the file is the very one a previous load verified
//! (same identity): see [`Identity`] for why that keeps the guarantee. Any failure — missing,
//! corrupt, foreign, written by another wasmtime — falls back to compiling and rewriting the
//! entry; the cache is never fatal.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::{RuntimeError, WASMTIME_VERSION, one_line};

/// The first line of every check file.
const MAGIC: &str = "palisade compiled component v2";

/// How long ago a file must last have changed before its identity is recorded as verified:
/// longer than the coarsest timestamp granularity of the filesystems a cache lives on, so that
/// any later change moves its ctime (see [`Identity`]).
const SETTLED: Duration = Duration::from_secs(2);

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
    hasher.0.update(b"palisade-cwasm-key-v2\0");
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

/// The check file of an entry.
fn check_path(entry: &Path) -> PathBuf {
    entry.with_extension("check")
}

/// `Ok(None)` when there is no entry; `Err` with a diagnostic when one exists but cannot be used.
fn read_entry(engine: &Engine, path: &Path) -> Result<Option<Component>, String> {
    let started = SystemTime::now();
    let mut file = match open_no_follow(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot open `{}`: {error}", path.display())),
    };
    let metadata = file
        .metadata()
        .map_err(|e| format!("cannot stat `{}`: {e}", path.display()))?;
    if !metadata.file_type().is_file() {
        return Err(format!("`{}` is not a regular file", path.display()));
    }
    check_private(path, &metadata)?;
    let check = read_check(&check_path(path))?;
    let identity = Identity::of(&metadata);
    if check.verified.as_ref() != Some(&identity) {
        let mut data = Vec::new();
        file.read_to_end(&mut data)
            .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
        if hex(&Sha256::digest(&data)) != check.sha256 {
            return Err(format!("`{}` is corrupt (digest mismatch)", path.display()));
        }
        if settled(&metadata, started) {
            // Best effort: without it the next load verifies in full again.
            let _ = write_check(&check_path(path), &check.sha256, Some(&identity), false);
        }
    }
    // SAFETY: `Component::deserialize_file` maps the file as native code and trusts it to be
    // wasmtime's own output for a compatible engine. Here it is: the file lives in the user's
    // private cache directory (owned by this user, writable by nobody else, checked above, and
    // outside every writable root of a run: `palisade run` refuses or skips a cache there), it
    // is only ever written by `write_entry` with `Component::serialize` output and renamed into
    // place (never rewritten in place), its name binds it to the exact component digest,
    // wasmtime version and compatibility hash of this engine, and its bytes matched the
    // SHA-256 recorded when it was written — just now, or at an earlier load of this very file
    // (its identity, which every change through the filesystem moves: see `Identity`), so a
    // truncated or altered file is rejected before wasmtime sees it. It is mapped through the
    // descriptor opened and checked above (`/proc/self/fd`), so the file checked is the file
    // mapped. Wasmtime itself rejects artefacts from another version or configuration.
    let component = crate::sys::deserialize_verified_component(engine, fd_path(&file));
    component
        .map(Some)
        .map_err(|e| format!("cannot load `{}`: {}", path.display(), one_line(&e)))
}

/// The path that opens the same file as `file`'s descriptor.
fn fd_path(file: &fs::File) -> PathBuf {
    use std::os::fd::AsRawFd as _;
    let dir = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    Path::new(dir).join(file.as_raw_fd().to_string())
}

/// Whether the file last changed at least [`SETTLED`] before `started` (the load's start).
fn settled(metadata: &fs::Metadata, started: SystemTime) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let changed = u64::try_from(metadata.ctime())
        .ok()
        .map(|secs| Duration::new(secs, u32::try_from(metadata.ctime_nsec()).unwrap_or(0)));
    let started = started.duration_since(SystemTime::UNIX_EPOCH).ok();
    matches!((changed, started), (Some(changed), Some(started)) if changed + SETTLED <= started)
}

/// Which file a verification applied to: device, inode, size, modification and status-change
/// times (ns), as `fstat` reports them.
///
/// Why a match with a recorded identity may skip hashing the bytes again: the entry and its
/// check file are in the user's private directory, so only this user (or root) can change
/// either, and Palisade never changes an entry in place. Any change to the file through the
/// filesystem — a write, a truncation, a rename over it, a `chmod` — sets its ctime to the
/// current time, which no process can set back (`utimensat` sets only the access and
/// modification times); a replacement is another inode. An identity is recorded only after
/// the bytes matched and only when the file had not changed for [`SETTLED`], so a change made
/// during or after that verification cannot share its ctime. Hence a file with a recorded
/// identity holds the bytes that matched the digest. What a full hash at every load would
/// check beyond this is the storage below the filesystem (a bit flipped on the disk after the
/// verification): the palisade binary itself, which embeds the component and is executed
/// without a hash, has the same exposure, so the compiled component is no worse off than the
/// code that loads it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Identity(String);

impl Identity {
    fn of(metadata: &fs::Metadata) -> Identity {
        use std::os::unix::fs::MetadataExt as _;
        Identity(format!(
            "dev={} ino={} size={} mtime={}.{:09} ctime={}.{:09}",
            metadata.dev(),
            metadata.ino(),
            metadata.size(),
            metadata.mtime(),
            metadata.mtime_nsec(),
            metadata.ctime(),
            metadata.ctime_nsec()
        ))
    }
}

/// A check file: the digest of the entry's bytes, and the identity of the file that last
/// matched it.
struct Check {
    sha256: String,
    verified: Option<Identity>,
}

/// Reads a check file (`MAGIC`, `sha256 <hex>`, optionally `verified <identity>`), which must be
/// private like its entry. A missing or malformed one makes the entry unusable.
fn read_check(path: &Path) -> Result<Check, String> {
    let unusable = |why: String| format!("`{}` {why}", path.display());
    let mut file = open_no_follow(path).map_err(|e| unusable(format!("cannot be opened: {e}")))?;
    let metadata = file
        .metadata()
        .map_err(|e| unusable(format!("cannot be read: {e}")))?;
    if !metadata.file_type().is_file() {
        return Err(unusable("is not a regular file".to_owned()));
    }
    check_private(path, &metadata)?;
    let mut text = String::new();
    // A check file is a few hundred bytes; anything much longer is not one.
    (&mut file)
        .take(4096)
        .read_to_string(&mut text)
        .map_err(|e| unusable(format!("cannot be read: {e}")))?;
    let mut lines = text.lines();
    let sha256 = match (
        lines.next(),
        lines.next().and_then(|l| l.strip_prefix("sha256 ")),
    ) {
        (Some(MAGIC), Some(hex)) if hex.len() == 64 => hex.to_owned(),
        _ => return Err(unusable("is not a check file".to_owned())),
    };
    let verified = lines
        .next()
        .and_then(|l| l.strip_prefix("verified "))
        .map(|identity| Identity(identity.to_owned()));
    Ok(Check { sha256, verified })
}

fn write_entry(component: &Component, dir: &Path, path: &Path) -> Result<(), String> {
    let payload = component
        .serialize()
        .map_err(|e| format!("cannot serialize the compiled component: {}", one_line(&e)))?;
    let sha256 = hex(&Sha256::digest(&payload));
    let temp = temp_path(dir, "cwasm");
    // The entry first: a check file renamed in before its entry would send a concurrent
    // reader to the old entry's bytes with the new digest (a mismatch, not a wrong load).
    let written = write_new_private_file(&temp, &payload, true)
        .and_then(|()| fs::rename(&temp, path))
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written?;
    write_check(&check_path(path), &sha256, None, true)
}

/// Writes a check file (through a temporary file and a rename); `sync` flushes it first.
fn write_check(
    path: &Path,
    sha256: &str,
    verified: Option<&Identity>,
    sync: bool,
) -> Result<(), String> {
    let mut text = format!("{MAGIC}\nsha256 {sha256}\n");
    if let Some(Identity(identity)) = verified {
        text.push_str(&format!("verified {identity}\n"));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let temp = temp_path(dir, "check");
    let written = write_new_private_file(&temp, text.as_bytes(), sync)
        .and_then(|()| fs::rename(&temp, path))
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

/// A fresh temporary name in `dir`.
fn temp_path(dir: &Path, extension: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    dir.join(format!(".tmp-{}-{nanos}.{extension}", std::process::id()))
}

fn open_no_follow(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn write_new_private_file(path: &Path, data: &[u8], sync: bool) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(data)?;
    if sync { file.sync_all() } else { Ok(()) }
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
    let euid = crate::sys::geteuid();
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
