//! Where Palisade keeps its audit-signing key, and `palisade key init`.
//!
//! A per-user key lives in `$XDG_CONFIG_HOME/palisade/keys/` (else `~/.config/palisade/keys/`), a
//! fleet host's in `/etc/palisade/keys/`: the private half `audit-signing.key` (0600, in a 0700
//! directory), the public half `audit-signing.pub` beside it. Records are signed with the
//! per-user key when there is one, else with the system key when this user can read it.
//!
//! Every directory that holds a key is measured into the host fact `keyPaths`, so the engine
//! denies it in every sandbox (the command must never read the key) and refuses a writable root
//! inside it.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

pub use palisade_formats::keys::{KeyError, PublicKey, Signer};

/// The private half's file name.
pub const KEY_FILE: &str = "audit-signing.key";
/// The public half's file name.
pub const PUBLIC_FILE: &str = "audit-signing.pub";
/// The system-wide key directory (a fleet host's).
pub const SYSTEM_DIR: &str = "/etc/palisade/keys";

/// The per-user key directory: beside the per-user host configuration.
pub fn user_dir() -> Option<PathBuf> {
    crate::hostconfig::user_path().and_then(|config| config.parent().map(|dir| dir.join("keys")))
}

/// The key directories, in the order a key is looked for: per-user, then system.
pub fn dirs() -> Vec<PathBuf> {
    user_dir()
        .into_iter()
        .chain(std::iter::once(PathBuf::from(SYSTEM_DIR)))
        .collect()
}

/// The directories that hold a private key (readable by this user or not): the host fact
/// `keyPaths`.
pub fn present_dirs() -> Vec<PathBuf> {
    dirs()
        .into_iter()
        .filter(|dir| std::fs::symlink_metadata(dir.join(KEY_FILE)).is_ok())
        .collect()
}

/// Why a key could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error("cannot determine the per-user configuration directory (set HOME or XDG_CONFIG_HOME)")]
    NoUserDir,
    #[error(
        "a key already exists at `{0}` (pass --force to replace it; records it signed then verify only with its public half)"
    )]
    Exists(String),
    #[error("cannot write `{path}`: {reason}")]
    Write { path: String, reason: String },
    #[error("cannot read the signing key `{path}`: {reason}")]
    Read { path: String, reason: String },
    #[error("the signing key `{path}` is not usable: {source}")]
    Invalid {
        path: String,
        #[source]
        source: KeyError,
    },
}

/// The key that signs this user's records, and where it is: the per-user key, else the
/// system key. `Ok(None)`: no key on this host. A key that exists and cannot be read or parsed
/// is an error (said before anything runs, never silently unsigned).
pub fn signer() -> Result<Option<(Signer, PathBuf)>, KeysError> {
    for dir in dirs() {
        let path = dir.join(KEY_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            // The system key of a fleet host is root's: a user without a key of their own
            // signs nothing, and is told.
            Err(e) => {
                return Err(KeysError::Read {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                });
            }
        };
        let signer = Signer::parse(&text).map_err(|source| KeysError::Invalid {
            path: path.display().to_string(),
            source,
        })?;
        return Ok(Some((signer, path)));
    }
    Ok(None)
}

/// Reads a public key file (`--trusted-key`).
pub fn read_public(path: &Path) -> Result<PublicKey, KeysError> {
    let text = std::fs::read_to_string(path).map_err(|e| KeysError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    PublicKey::parse(&text).map_err(|source| KeysError::Invalid {
        path: path.display().to_string(),
        source,
    })
}

/// Makes a new key in `dir` (created 0700): the private half 0600, the public half 0644.
/// Refuses to replace one unless `force`. Returns the public half.
pub fn init(dir: &Path, force: bool) -> Result<PublicKey, KeysError> {
    let key_path = dir.join(KEY_FILE);
    if !force && std::fs::symlink_metadata(&key_path).is_ok() {
        return Err(KeysError::Exists(key_path.display().to_string()));
    }
    let write_error = |path: &Path, e: std::io::Error| KeysError::Write {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| write_error(dir, e))?;
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut seed))
        .map_err(|e| write_error(Path::new("/dev/urandom"), e))?;
    let signer = Signer::from_seed(seed);
    seed.fill(0);
    write_new(&key_path, signer.to_file().as_bytes(), 0o600)
        .map_err(|e| write_error(&key_path, e))?;
    let public = signer.public();
    let public_path = dir.join(PUBLIC_FILE);
    write_new(&public_path, public.to_file().as_bytes(), 0o644)
        .map_err(|e| write_error(&public_path, e))?;
    Ok(public)
}

/// Writes `bytes` to a private temp file in the same directory, then renames it over `path`:
/// never a half-written key, never one readable by others in between.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}
