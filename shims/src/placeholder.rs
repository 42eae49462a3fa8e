//! Placeholders: what holds the place of a missing protected path inside a writable root
//! (`AGENTS.md`, `.github`, `.loopwright/policies` in a workspace that has none) while a
//! sandbox runs, on the host, and how runs that share a workspace share them.
//!
//! # Why an inert socket node
//!
//! The sandbox must not be able to create the path, so something has to be mounted there, and a
//! mount needs an entry to sit on. The writable root is the host's own directory, bound in: any
//! entry made there — by bwrap, by Docker's runtime or by palisade — is the host's too, for as
//! long as the run lasts. What that entry is decides what every tool walking the workspace
//! sees, inside and outside:
//!
//! - a regular file (what bwrap creates for a file mount) is listed by `git status` as
//!   untracked, and `git add -A` fails on what is mounted over it (`/dev/null`: "can only add
//!   regular files");
//! - an empty directory is ignored by `git status` and `git add`, but `git stash -u` ends with
//!   `git clean -d`, whose `rmdir` of a mountpoint fails (`EBUSY`), and the stash then stops
//!   half-done (exit 1, the worktree not reset);
//! - a socket, FIFO or device is skipped by git altogether (`status`, `add`, `clean`, `stash`
//!   look only at files, directories and symlinks), so everything git does is what it does
//!   outside.
//!
//! Of those only a FIFO or a socket can be made without privilege, and opening a FIFO can block
//! a reader forever, while opening a socket node fails at once (`ENXIO`). So the placeholder is
//! a Unix-socket node nobody is bound to, with no permission bits (`s---------`): nothing can
//! open, connect to or write it, and it blocks the name (and, being no directory, everything
//! beneath it: `.github/workflows/x.yml`). The sandbox gets it bound read-only onto itself, so
//! inside it can be neither removed nor renamed (a mountpoint: `EBUSY`) nor changed (`EROFS`),
//! and nothing can be created, linked or renamed onto its name (`EEXIST`, `EBUSY`). Palisade
//! makes it before launching, rather than letting bwrap or Docker make a mountpoint, because
//! only palisade can choose its type and then take it away again.
//!
//! # Sharing a workspace
//!
//! Two runs in one workspace share one placeholder: the name is the same. Removing it on the
//! host while another run has it mounted would not fail — since Linux 3.18 an `unlink` detaches
//! the mounts on that entry in every other mount namespace — and the other sandbox could then
//! create the path. So every run holds a shared `flock` on the placeholder's directory from
//! before it makes (or finds) the placeholder until its sandbox is gone, and removes
//! placeholders only once it gets the exclusive lock: the last run out removes them, every
//! earlier one leaves them to it. A run that finds one (another run's, or one a SIGKILLed run
//! left) joins it the same way, so a leftover goes with the next run in that workspace.
//!
//! A run that is killed (SIGKILL: no release) leaves its placeholders, and its lock goes with
//! its descriptors. Under bwrap the sandbox dies with palisade (`--die-with-parent`, then its
//! PID namespace). A Docker container does not: the reaper that removes it once palisade is
//! gone inherits this run's locks ([`Placeholders::inheritable`]) and keeps them until it
//! exits, so no later run removes a placeholder the orphaned container still has mounted.
//!
//! Known limits: while a run lasts the host sees the placeholders (`ls` shows them, `git` does
//! not) and cannot create those paths itself; on a filesystem whose `flock` cannot take an
//! exclusive lock through a read-only descriptor (NFS), placeholders are never removed.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::fsfacts::is_placeholder_mode;
use crate::sys;

/// How long a run waits for another one's cleanup of a directory it shares: that takes
/// microseconds, so a longer wait means some other process holds the directory's lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Why [`hold`] failed; nothing was launched.
#[derive(Debug, thiserror::Error)]
pub enum PlaceholderError {
    #[error("placeholder `{}` has no parent directory or no name", .0.display())]
    NoParent(PathBuf),
    #[error("cannot open `{}` to hold placeholders in it: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot lock `{}`: {source}", path.display())]
    Lock { path: PathBuf, source: io::Error },
    #[error("`{}` stayed locked by another process for {LOCK_WAIT:?}", .0.display())]
    Busy(PathBuf),
    #[error("cannot create the placeholder `{}`: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("`{}` appeared while the sandbox was being prepared; run again", .0.display())]
    Appeared(PathBuf),
}

/// One run's placeholders, held (see the module docs). [`Placeholders::release`] them once the
/// sandbox is gone; dropping them releases them too. [`Placeholders::keep`] them when the
/// sandbox may still be alive.
#[derive(Debug, Default)]
pub struct Placeholders {
    dirs: Vec<HeldDir>,
}

/// A directory holding placeholders, open and locked shared.
#[derive(Debug)]
struct HeldDir {
    dir: File,
    nodes: Vec<(CString, PathBuf)>,
}

/// What [`Placeholders::release`] did with each placeholder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Removed: no other run held them.
    pub removed: Vec<PathBuf>,
    /// Left to a run still holding their directory, which removes them when it ends.
    pub handed_over: Vec<PathBuf>,
    /// Left because they could not be removed, or are no placeholder any more.
    pub left: Vec<PathBuf>,
}

/// Makes (or joins) a placeholder at each of `paths` — real paths whose parent is an existing
/// directory, as [`crate::bwrap::BwrapArgs::placeholders`] lists them — and holds them.
pub fn hold(paths: &[PathBuf]) -> Result<Placeholders, PlaceholderError> {
    let mut by_dir: BTreeMap<&Path, Vec<(CString, PathBuf)>> = BTreeMap::new();
    for path in paths {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(PlaceholderError::NoParent(path.clone()));
        };
        let name =
            CString::new(name.as_bytes()).map_err(|_| PlaceholderError::NoParent(path.clone()))?;
        by_dir.entry(parent).or_default().push((name, path.clone()));
    }
    // Anything made before a failure is released by the drop.
    let mut held = Placeholders::default();
    for (parent, nodes) in by_dir {
        let mut dir = HeldDir {
            dir: lock_shared(parent)?,
            nodes: Vec::new(),
        };
        let made = nodes
            .into_iter()
            .try_for_each(|(name, path)| dir.make(name, path));
        held.dirs.push(dir);
        made?;
    }
    Ok(held)
}

impl HeldDir {
    /// Makes the placeholder `name`, or joins the one there.
    fn make(&mut self, name: CString, path: PathBuf) -> Result<(), PlaceholderError> {
        match sys::mknod_socket_at(self.dir.as_fd(), &name) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(source) => return Err(PlaceholderError::Create { path, source }),
        }
        let stat = match sys::stat_at(self.dir.as_fd(), &name) {
            Ok(stat) => stat,
            Err(source) => return Err(PlaceholderError::Create { path, source }),
        };
        if !is_placeholder_mode(stat.mode) {
            return Err(PlaceholderError::Appeared(path));
        }
        self.nodes.push((name, path));
        Ok(())
    }
}

/// Opens `dir` and takes a shared lock on it, waiting up to [`LOCK_WAIT`] for a run that is
/// removing placeholders there.
fn lock_shared(dir: &Path) -> Result<File, PlaceholderError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .map_err(|source| PlaceholderError::Open {
            path: dir.to_path_buf(),
            source,
        })?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock_shared() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(PlaceholderError::Busy(dir.to_path_buf()));
            }
            Err(TryLockError::Error(source)) => {
                return Err(PlaceholderError::Lock {
                    path: dir.to_path_buf(),
                    source,
                });
            }
        }
    }
}

impl Placeholders {
    /// The placeholders held, in the order made.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .flat_map(|dir| dir.nodes.iter().map(|(_, path)| path.clone()))
            .collect()
    }

    /// New descriptors of the held directories, without close-on-exec: a child spawned while
    /// they are open shares this run's locks and keeps them for as long as it lives, even if
    /// palisade is killed (releasing unlocks them for it too). Close them once it is spawned.
    pub fn inheritable(&self) -> io::Result<Vec<OwnedFd>> {
        self.dirs
            .iter()
            .map(|held| sys::dup_inheritable(held.dir.as_fd()))
            .collect()
    }

    /// Once the sandbox is gone: removes the placeholders unless another run still holds their
    /// directory.
    pub fn release(mut self) -> Released {
        release(std::mem::take(&mut self.dirs))
    }

    /// Lets go without removing anything, for when the sandbox may still be alive (its mounts
    /// must stay): the next run in the workspace removes them.
    pub fn keep(mut self) -> Vec<PathBuf> {
        let kept = self.paths();
        self.dirs.clear();
        kept
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        release(std::mem::take(&mut self.dirs));
    }
}

fn release(dirs: Vec<HeldDir>) -> Released {
    let mut released = Released::default();
    // Every shared lock of this run goes first, or its own would keep it from the exclusive one.
    for held in &dirs {
        let _ = held.dir.unlock();
    }
    for held in dirs {
        let paths = held.nodes.iter().map(|(_, path)| path.clone());
        match held.dir.try_lock() {
            Ok(()) => {
                for (name, path) in &held.nodes {
                    if remove(&held.dir, name) {
                        released.removed.push(path.clone());
                    } else {
                        released.left.push(path.clone());
                    }
                }
            }
            Err(TryLockError::WouldBlock) => released.handed_over.extend(paths),
            Err(TryLockError::Error(_)) => released.left.extend(paths),
        }
        // Explicitly: a child that inherited the descriptor would otherwise keep the lock.
        let _ = held.dir.unlock();
    }
    released
}

/// Removes `name` if it is still a placeholder (under the exclusive lock no run uses it, whoever
/// made it); whether it is gone.
fn remove(dir: &File, name: &CString) -> bool {
    match sys::stat_at(dir.as_fd(), name) {
        Ok(stat) if is_placeholder_mode(stat.mode) => sys::unlink_at(dir.as_fd(), name).is_ok(),
        Ok(_) => false,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    use super::*;

    fn tempdir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        (dir, root)
    }

    #[test]
    fn makes_inert_socket_nodes_and_removes_them_when_released() {
        let (_dir, root) = tempdir();
        std::fs::create_dir(root.join(".loopwright")).unwrap();
        let paths = vec![
            root.join("AGENTS.md"),
            root.join(".github"),
            root.join(".loopwright/policies"),
        ];
        let held = hold(&paths).unwrap();
        for path in &paths {
            let meta = std::fs::symlink_metadata(path).unwrap();
            assert!(meta.file_type().is_socket(), "{}", path.display());
            assert_eq!(meta.mode() & 0o7777, 0);
            assert!(is_placeholder_mode(meta.mode()));
            // Nothing can open it.
            assert!(std::fs::read(path).is_err());
        }
        let mut held_paths = held.paths();
        held_paths.sort();
        let mut expected = paths.clone();
        expected.sort();
        assert_eq!(held_paths, expected);
        let released = held.release();
        assert_eq!(released.removed.len(), 3, "{released:?}");
        assert!(released.handed_over.is_empty() && released.left.is_empty());
        for path in &paths {
            assert!(
                std::fs::symlink_metadata(path).is_err(),
                "{}",
                path.display()
            );
        }
        assert!(root.join(".loopwright").is_dir());
    }

    #[test]
    fn the_last_holder_removes_a_shared_placeholder() {
        let (_dir, root) = tempdir();
        let path = root.join("AGENTS.md");
        let first = hold(std::slice::from_ref(&path)).unwrap();
        let second = hold(std::slice::from_ref(&path)).unwrap();
        // The first leaves first: the second still has it mounted.
        let released = first.release();
        assert_eq!(released.handed_over, vec![path.clone()]);
        assert!(std::fs::symlink_metadata(&path).is_ok());
        let released = second.release();
        assert_eq!(released.removed, vec![path.clone()]);
        assert!(std::fs::symlink_metadata(&path).is_err());
    }

    #[test]
    fn a_leftover_is_joined_and_removed_and_kept_ones_stay() {
        let (_dir, root) = tempdir();
        let path = root.join("CLAUDE.md");
        // A run that was killed: it made the placeholder and never released it.
        let killed = hold(std::slice::from_ref(&path)).unwrap();
        assert_eq!(killed.keep(), vec![path.clone()]);
        assert!(std::fs::symlink_metadata(&path).is_ok());
        let next = hold(std::slice::from_ref(&path)).unwrap();
        drop(next);
        assert!(std::fs::symlink_metadata(&path).is_err());
    }

    #[test]
    fn a_child_that_inherited_the_locks_keeps_the_placeholders_after_the_run_is_killed() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let (_dir, root) = tempdir();
        let path = root.join("AGENTS.md");
        let killed = hold(std::slice::from_ref(&path)).unwrap();
        let inherit = killed.inheritable().unwrap();
        // The reaper's stand-in: lives until its stdin ends.
        let mut child = Command::new("sh")
            .args(["-c", "read -r line"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        drop(inherit);
        // Killed: its descriptors close without a release.
        assert_eq!(killed.keep(), vec![path.clone()]);
        // Another run comes and goes while the child lives: the placeholder must stay.
        let released = hold(std::slice::from_ref(&path)).unwrap().release();
        assert_eq!(released.handed_over, vec![path.clone()], "{released:?}");
        assert!(std::fs::symlink_metadata(&path).is_ok());
        child.stdin.take().unwrap().write_all(b"done\n").unwrap();
        assert!(child.wait().unwrap().success());
        // Any other process that inherited the descriptor meanwhile (tests spawn in parallel)
        // is gone once an exclusive lock can be had.
        let dir = File::open(&root).unwrap();
        dir.lock().unwrap();
        drop(dir);
        let released = hold(std::slice::from_ref(&path)).unwrap().release();
        assert_eq!(released.removed, vec![path.clone()], "{released:?}");
        assert!(std::fs::symlink_metadata(&path).is_err());
    }

    #[test]
    fn a_released_lock_is_not_kept_by_a_child_that_inherited_it() {
        use std::process::{Command, Stdio};
        let (_dir, root) = tempdir();
        let path = root.join("AGENTS.md");
        let run = hold(std::slice::from_ref(&path)).unwrap();
        let inherit = run.inheritable().unwrap();
        let mut child = Command::new("sh")
            .args(["-c", "read -r line"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        drop(inherit);
        // The run ends normally while the child still lives (a dismissed reaper on its way out).
        let released = run.release();
        assert_eq!(released.removed, vec![path.clone()], "{released:?}");
        // The next run is not kept waiting by the child.
        let next = hold(std::slice::from_ref(&path)).unwrap();
        assert_eq!(next.release().removed, vec![path.clone()]);
        drop(child.stdin.take());
        child.wait().unwrap();
    }

    #[test]
    fn anything_else_at_the_path_is_refused_and_left_alone() {
        let (_dir, root) = tempdir();
        std::fs::write(root.join("AGENTS.md"), "mine").unwrap();
        std::fs::create_dir(root.join(".github")).unwrap();
        // A bound socket has permission bits: not a placeholder.
        let socket = root.join("CLAUDE.md");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for path in [root.join("AGENTS.md"), root.join(".github"), socket] {
            assert!(matches!(
                hold(std::slice::from_ref(&path)),
                Err(PlaceholderError::Appeared(p)) if p == path
            ));
            assert!(std::fs::symlink_metadata(&path).is_ok());
        }
        assert_eq!(std::fs::read(root.join("AGENTS.md")).unwrap(), b"mine");
        // A failure part-way releases what was made before it.
        let made = root.join("a.md");
        assert!(hold(&[made.clone(), root.join("AGENTS.md")]).is_err());
        assert!(std::fs::symlink_metadata(&made).is_err());
    }

    #[test]
    fn a_path_without_a_directory_is_refused() {
        assert!(matches!(
            hold(&[PathBuf::from("/")]),
            Err(PlaceholderError::NoParent(_))
        ));
        let (_dir, root) = tempdir();
        assert!(matches!(
            hold(&[root.join("missing-dir/AGENTS.md")]),
            Err(PlaceholderError::Open { .. })
        ));
    }
}
