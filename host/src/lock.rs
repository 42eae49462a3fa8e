//! One exclusive lock file per cache: when many runs start at once with a cold cache, one of
//! them does the work (probing, compiling) while the others wait for its cache entry.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Takes an exclusive `flock` on `path` (created mode 0600, never through a symlink), blocking
/// until it is free. `None` when it cannot be had: the caller then goes ahead unlocked, since
/// the lock only spares duplicate work. The lock goes with the returned file, and with its
/// holder however it exits.
pub(crate) fn exclusive(path: &Path) -> Option<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    file.lock().ok()?;
    Some(file)
}
