//! A place every local user can reach, for tests that run something as another user (uid 65534
//! through `setpriv`).
//!
//! Tests keep their files under cargo's target directory, but a checkout in a `0700` home
//! (root's `/root`) is unreachable for any other user: a host configuration or a binary there
//! gives uid 65534 "Permission denied" before Palisade even starts. Then the files go to
//! [`FALLBACK`] instead. Not `/tmp`, `/var/tmp` or `/dev/shm`: every sandbox replaces those with
//! private directories, so a fixture placed there would be hidden by that mask rather than by
//! the policy under test.
//!
//! Included with `#[path]` by the workspace tests and by `host/tests/hostconfig.rs`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where the files go when the target directory is out of other users' reach (root only).
pub const FALLBACK: &str = "/var/lib/palisade-tests";

/// Whether every ancestor of `path` (and `path` itself) lets others search it.
pub fn world_searchable(path: &Path) -> bool {
    path.ancestors().all(|dir| {
        dir.as_os_str().is_empty() || std::fs::metadata(dir).is_ok_and(|m| m.mode() & 0o001 != 0)
    })
}

/// `<target_tmpdir>/<name>`, or `FALLBACK/<name>` when the former is out of other users'
/// reach and the test is root (only root switches to another user); created, mode 0755.
pub fn reachable_dir(target_tmpdir: &Path, name: &str) -> PathBuf {
    let root = if world_searchable(target_tmpdir) || !is_root() {
        target_tmpdir.to_path_buf()
    } else {
        eprintln!(
            "`{}` is not reachable by other users; test files go to {FALLBACK}",
            target_tmpdir.display()
        );
        PathBuf::from(FALLBACK)
    };
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create `{}`: {e}", dir.display()));
    if root == Path::new(FALLBACK) {
        chmod_755(&root);
    }
    chmod_755(&dir);
    dir
}

fn chmod_755(path: &Path) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("cannot chmod `{}`: {e}", path.display()));
}

/// `bin` where every user can execute it: in place when it already is, else copied (mode 0755)
/// into `dir`, which must be reachable (see [`reachable_dir`]).
///
/// Once per process and destination, and never over an identical copy: a copy renamed over a
/// binary that another test's run is executing leaves that run's `/proc/self/exe` deleted, and
/// Palisade binds its own executable into the sandbox (bwrap: "Can't find source path …
/// (deleted)").
pub fn reachable_binary(bin: &Path, dir: &Path) -> PathBuf {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    static PLACED: Mutex<BTreeMap<(PathBuf, PathBuf), PathBuf>> = Mutex::new(BTreeMap::new());
    let mut placed = PLACED.lock().unwrap_or_else(|p| p.into_inner());
    let key = (bin.to_path_buf(), dir.to_path_buf());
    if let Some(copy) = placed.get(&key) {
        return copy.clone();
    }
    let copy = place_binary(bin, dir);
    placed.insert(key, copy.clone());
    copy
}

fn place_binary(bin: &Path, dir: &Path) -> PathBuf {
    let executable = std::fs::metadata(bin).is_ok_and(|m| m.mode() & 0o005 == 0o005);
    if executable && bin.parent().is_none_or(world_searchable) {
        return bin.to_path_buf();
    }
    let name = bin.file_name().unwrap_or(bin.as_os_str());
    let copy = dir.join(name);
    let same = std::fs::metadata(&copy).is_ok_and(|m| m.mode() & 0o777 == 0o755)
        && std::fs::read(&copy).ok() == std::fs::read(bin).ok();
    if same {
        return copy;
    }
    // Copied by `install` in a process of its own, to a unique name, then renamed into place:
    // a write descriptor for the copy held in this (multi-threaded) test process would be
    // inherited by any child another test forks meanwhile, and executing the copy would then
    // fail with "Text file busy".
    let partial = dir.join(format!(
        "{}.{}.partial",
        name.to_string_lossy(),
        std::process::id()
    ));
    let status = std::process::Command::new("install")
        .args(["-m", "0755", "--"])
        .arg(bin)
        .arg(&partial)
        .status()
        .unwrap_or_else(|e| panic!("cannot run `install`: {e}"));
    assert!(
        status.success(),
        "`install {}` failed: {status}",
        bin.display()
    );
    std::fs::rename(&partial, &copy)
        .unwrap_or_else(|e| panic!("cannot rename to `{}`: {e}", copy.display()));
    copy
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
