//! Filesystem facts the bwrap shim needs, measured on the host just before launch.
//!
//! [`crate::bwrap::argv`] is pure; everything it must know about the host lives here: what each
//! denied, protected and writable path is (directory, file, something else, missing — and where
//! it really is once symlinks are resolved), the invoking uid/gid, which of the host's usual
//! private-state directories exist, and which pathname Unix sockets are bound on the host. The
//! host measures, records the facts, builds the argv from them, and after the run calls
//! [`cleanup_created`] on the mountpoints the argv said bwrap would create. Measuring also
//! notes the placeholders of other runs met at protected paths ([`FsFacts::placeholders`]), so
//! this run holds them too.
//!
//! # Symlinks
//!
//! Every path is resolved component by component, the way the kernel would, up to its deepest
//! existing prefix: [`PathFact::real`] is where a mount must go (mounting on a symlink mounts on
//! its target anyway), and [`PathFact::symlinks`] lists where each symlink met on the way lives,
//! so the shim can tell whether the sandbox could replace one of them.
//!
//! # Host sockets
//!
//! Pathname sockets come from `/proc/net/unix`, which lists the sockets of the *current network
//! namespace* only, each under the path it was bound with. A listed path is kept when it still
//! names a socket here (resolved to its real path); paths that are relative, stale, or bound in
//! another mount namespace are kept apart in [`FsFacts::unlocated_sockets`] for the record.
//! Abstract sockets (`@name`) are recorded separately: no mount can hide them, only a network
//! namespace (or Landlock's abstract-socket scope) can.
//!
//! Decided: no directory walk. Walking "well-known" directories would be slow (the launch
//! budget is a few milliseconds) and still incomplete, while the places that hold nearly every
//! host socket — `/run` (and `/var/run`), `/tmp`, `/var/tmp`, `/dev/shm` — are replaced by
//! private tmpfs mounts in the sandbox anyway. Not covered, and documented as such: sockets
//! bound by processes in *other* network namespaces at paths visible outside those directories,
//! sockets bound with a relative path, and sockets created after [`measure`] ran.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::plan::LaunchPlan;

/// Directories whose host contents the sandbox never sees: each one that exists on the host as
/// a directory (after resolving symlinks; `/var/run` is usually a link to `/run`) gets a private
/// tmpfs. `/dev/shm` is not measured: bwrap builds its own `/dev`.
pub const PRIVATE_DIR_CANDIDATES: [&str; 4] = ["/tmp", "/var/tmp", "/run", "/var/run"];

/// The resolver configuration, bound back in when the network is shared and it lives under a
/// private directory (systemd-resolved links it into `/run`).
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// The kernel's list of the current network namespace's Unix sockets.
pub const PROC_NET_UNIX: &str = "/proc/net/unix";

/// The kernel's limit on symlinks followed while resolving one path.
const MAX_SYMLINKS: usize = 40;

/// What the host's filesystem looks like for one plan, as far as the bwrap shim cares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FsFacts {
    /// The invoking user's real uid; the sandbox runs as the same uid.
    pub uid: u32,
    /// The invoking user's real gid.
    pub gid: u32,
    /// Every path the plan names (workspace, writable roots, run temp dir, denied and protected
    /// paths), keyed by the path exactly as the plan spells it.
    pub paths: BTreeMap<PathBuf, PathFact>,
    /// Real paths of the [`PRIVATE_DIR_CANDIDATES`] that exist as directories; sorted, unique.
    pub private_dirs: Vec<PathBuf>,
    /// Real path of [`RESOLV_CONF`] when it exists and is not a directory.
    pub resolv_conf: Option<PathBuf>,
    /// Real paths of the pathname sockets bound on the host that exist as sockets; sorted.
    pub host_sockets: Vec<PathBuf>,
    /// Names of the host's abstract sockets, without the leading `@`; sorted.
    pub abstract_sockets: Vec<String>,
    /// Listed socket paths that could not be located here (relative, stale, or in another
    /// mount namespace); sorted. Recorded, not masked.
    pub unlocated_sockets: Vec<String>,
    /// Real paths of the placeholders (see [`crate::placeholder`]) met resolving the protected
    /// paths: at a protected path, or the non-directory that stops one from resolving (a
    /// placeholder at `.loopwright` for `.loopwright/policies`); sorted. Another run's, or one a
    /// killed run left behind.
    pub placeholders: Vec<PathBuf>,
}

/// One path, resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathFact {
    pub kind: PathKind,
    /// Where the path really is: symlinks resolved along its existing prefix; the missing rest
    /// appended as spelled.
    pub real: PathBuf,
    /// Where each symlink met while resolving lives (its own location, parent resolved), in the
    /// order met. Empty when no component is a symlink.
    pub symlinks: Vec<PathBuf>,
}

impl PathFact {
    /// Whether the path is, or passes through, a symlink.
    pub fn is_symlink(&self) -> bool {
        !self.symlinks.is_empty()
    }
}

/// What a path is, after resolving symlinks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum PathKind {
    Dir,
    /// A regular file; `hard_links` > 1 means other names reach the same inode.
    File {
        hard_links: u64,
    },
    /// A socket, FIFO or device node.
    Other,
    /// The path does not exist. `first_missing` is the shallowest component of
    /// [`PathFact::real`] that does not exist (the path itself, or an ancestor);
    /// `parent_is_dir` is false when that component's parent exists but is not a directory,
    /// so the path cannot come into existence unless the parent is replaced.
    Missing {
        first_missing: PathBuf,
        parent_is_dir: bool,
    },
    /// Resolution stopped at `dir`, an existing directory the invoking user cannot search:
    /// whether the path exists is unknown.
    Unsearchable {
        dir: PathBuf,
    },
}

/// Why [`measure`] could not measure.
#[derive(Debug, thiserror::Error)]
pub enum FsFactsError {
    #[error("path `{}` is not absolute", .0.display())]
    Relative(PathBuf),
    #[error("path `{}` contains a `..` component", .0.display())]
    ParentComponent(PathBuf),
    #[error("too many levels of symbolic links resolving `{}`", .0.display())]
    SymlinkLoop(PathBuf),
    #[error("cannot inspect `{}`: {source}", path.display())]
    Inspect { path: PathBuf, source: io::Error },
    #[error("cannot read `{PROC_NET_UNIX}`: {0}")]
    ProcNetUnix(io::Error),
}

/// Measures everything [`crate::bwrap::argv`] needs for `plan`.
///
/// Read-only: it stats, reads links and reads `/proc/net/unix`; it creates nothing.
pub fn measure(plan: &LaunchPlan) -> Result<FsFacts, FsFactsError> {
    let mut named: BTreeSet<&Path> = BTreeSet::new();
    named.insert(&plan.workspace);
    named.insert(&plan.run_temp_dir);
    named.extend(plan.writable_roots.iter().map(PathBuf::as_path));
    named.extend(plan.denied_read_paths.iter().map(PathBuf::as_path));
    named.extend(plan.protected_paths.iter().map(PathBuf::as_path));
    // The plan's paths share their ancestors (`/home/u` for every denied path under it): each
    // is looked at once per measure, not once per path beneath it.
    let mut seen = Lstats::default();
    let mut paths = BTreeMap::new();
    for path in named {
        paths.insert(path.to_path_buf(), resolve_with(path, &mut seen)?);
    }

    let mut private_dirs = BTreeSet::new();
    for candidate in PRIVATE_DIR_CANDIDATES {
        let fact = resolve_with(Path::new(candidate), &mut seen)?;
        if fact.kind == PathKind::Dir {
            private_dirs.insert(fact.real);
        }
    }
    let resolv = resolve_with(Path::new(RESOLV_CONF), &mut seen)?;
    let resolv_conf = match resolv.kind {
        PathKind::File { .. } | PathKind::Other => Some(resolv.real),
        PathKind::Dir | PathKind::Missing { .. } | PathKind::Unsearchable { .. } => None,
    };

    let table = crate::procfile::read(PROC_NET_UNIX).map_err(FsFactsError::ProcNetUnix)?;
    let listed = parse_proc_net_unix(&table);
    let mut host_sockets = BTreeSet::new();
    let mut unlocated = BTreeSet::new();
    for path in listed.paths {
        match locate_socket(&path, &mut seen) {
            Some(real) => {
                host_sockets.insert(real);
            }
            None => {
                unlocated.insert(path.to_string_lossy().into_owned());
            }
        }
    }

    let mut placeholders = BTreeSet::new();
    for path in &plan.protected_paths {
        let node = paths
            .get(path)
            .and_then(|fact: &PathFact| match &fact.kind {
                PathKind::Other => Some(fact.real.as_path()),
                PathKind::Missing {
                    first_missing,
                    parent_is_dir: false,
                } => first_missing.parent(),
                PathKind::Dir
                | PathKind::File { .. }
                | PathKind::Missing { .. }
                | PathKind::Unsearchable { .. } => None,
            });
        if let Some(node) = node
            && seen
                .lstat(node)
                .is_ok_and(|meta| is_placeholder_mode(meta.mode()))
        {
            placeholders.insert(node.to_path_buf());
        }
    }

    Ok(FsFacts {
        uid: crate::sys::getuid(),
        gid: crate::sys::getgid(),
        paths,
        private_dirs: private_dirs.into_iter().collect(),
        resolv_conf,
        host_sockets: host_sockets.into_iter().collect(),
        abstract_sockets: listed.abstract_names.into_iter().collect(),
        unlocated_sockets: unlocated.into_iter().collect(),
        placeholders: placeholders.into_iter().collect(),
    })
}

/// Whether `st_mode` is a placeholder's: a Unix-socket node with no permission bits at all
/// (`S_IFSOCK` is `0o140000` on every Unix). Nothing else makes one; a live socket is bound
/// with the umask's bits.
pub fn is_placeholder_mode(mode: u32) -> bool {
    mode & 0o170_000 == 0o140_000 && mode & 0o7777 == 0
}

/// Removes the mountpoints bwrap created on the host (the argv's `created_mountpoints`), once
/// the sandbox is gone: deepest first, each only if it is still an empty directory or an empty
/// regular file. Anything else — a directory the command filled, a path that is now something
/// else — is left alone. Returns the paths that still exist afterwards.
pub fn cleanup_created(created: &[PathBuf]) -> Vec<PathBuf> {
    let mut ordered: Vec<&PathBuf> = created.iter().collect();
    // Deepest first, so a created directory is empty once its created children are gone.
    ordered.sort_by(|a, b| {
        depth(b)
            .cmp(&depth(a))
            .then_with(|| b.as_os_str().cmp(a.as_os_str()))
    });
    ordered.dedup();
    let mut kept = Vec::new();
    for path in ordered {
        let Ok(meta) = fs::symlink_metadata(path) else {
            continue; // already gone (or never created: bwrap failed early)
        };
        let file_type = meta.file_type();
        let removed = if file_type.is_dir() {
            // rmdir refuses a non-empty directory atomically.
            fs::remove_dir(path).is_ok()
        } else if file_type.is_file() && meta.len() == 0 {
            fs::remove_file(path).is_ok()
        } else {
            false
        };
        if !removed {
            kept.push(path.clone());
        }
    }
    kept
}

/// Pathname and abstract socket names listed in a `/proc/net/unix` table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedSockets {
    /// Listed names that are not abstract (normally absolute paths); sorted, unique.
    pub paths: BTreeSet<PathBuf>,
    /// Abstract names without the leading `@`; sorted, unique.
    pub abstract_names: BTreeSet<String>,
}

/// Parses the bytes of `/proc/net/unix`.
///
/// Each row is `Num: RefCount Protocol Flags Type St Inode[ Path]`; the path is printed raw,
/// so it may contain spaces and even newlines — a line that does not start like a row
/// continues the previous row's path. Abstract names start with `@`.
pub fn parse_proc_net_unix(table: &[u8]) -> ListedSockets {
    let mut rows: Vec<Vec<u8>> = Vec::new();
    // The final newline ends the last row; any other empty line is part of a path.
    let table = table.strip_suffix(b"\n").unwrap_or(table);
    for (index, line) in table.split(|&byte| byte == b'\n').enumerate() {
        if index == 0 {
            continue; // header
        }
        match row_path(line) {
            RowPath::Row(path) => rows.push(path.to_vec()),
            RowPath::Continuation => {
                if let Some(last) = rows.last_mut()
                    && !last.is_empty()
                {
                    last.push(b'\n');
                    last.extend_from_slice(line);
                }
            }
        }
    }
    let mut listed = ListedSockets::default();
    for name in rows {
        match name.split_first() {
            None => {}
            Some((b'@', rest)) => {
                listed
                    .abstract_names
                    .insert(String::from_utf8_lossy(rest).into_owned());
            }
            Some(_) => {
                listed.paths.insert(PathBuf::from(OsStr::from_bytes(&name)));
            }
        }
    }
    listed
}

enum RowPath<'a> {
    /// A row; its path (empty for an unbound socket).
    Row(&'a [u8]),
    /// Not a row: the continuation of a path that contained a newline.
    Continuation,
}

fn row_path(line: &[u8]) -> RowPath<'_> {
    let mut rest = line;
    for field in 0..7 {
        let start = rest.iter().position(|&byte| byte != b' ');
        let Some(start) = start else {
            return RowPath::Continuation;
        };
        let after = rest.get(start..).unwrap_or_default();
        let len = after
            .iter()
            .position(|&byte| byte == b' ')
            .unwrap_or(after.len());
        let token = after.get(..len).unwrap_or_default();
        let valid = if field == 0 {
            token.len() > 1
                && token.ends_with(b":")
                && token
                    .get(..token.len() - 1)
                    .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
        } else {
            token.iter().all(u8::is_ascii_hexdigit)
        };
        if !valid {
            return RowPath::Continuation;
        }
        rest = after.get(len..).unwrap_or_default();
    }
    // After the inode: nothing (unbound), or one space then the name.
    RowPath::Row(rest.strip_prefix(b" ").unwrap_or_default())
}

/// The real path of a listed socket, if it is an absolute path that names a socket here.
/// Resolved with the measure's other paths (`seen`): the sockets of a host share their
/// directories (`/run`, `/run/user/1000`, …), and each was looked at once per socket.
fn locate_socket(listed: &Path, seen: &mut Lstats) -> Option<PathBuf> {
    if !listed.is_absolute() {
        return None;
    }
    let fact = resolve_with(listed, seen).ok()?;
    if fact.kind != PathKind::Other {
        return None;
    }
    let meta = seen.lstat(&fact.real).ok()?;
    meta.file_type().is_socket().then_some(fact.real)
}

/// One step of a path still to resolve.
enum Step {
    Parent,
    Name(OsString),
}

fn steps(path: &Path) -> impl Iterator<Item = Step> + '_ {
    path.components().filter_map(|component| match component {
        Component::Normal(name) => Some(Step::Name(name.to_os_string())),
        Component::ParentDir => Some(Step::Parent),
        Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
    })
}

/// Resolves `path` like the kernel would, without requiring it to exist.
pub fn resolve(path: &Path) -> Result<PathFact, FsFactsError> {
    resolve_with(path, &mut Lstats::default())
}

/// What `lstat` said of each path one [`measure`] looked at (its answer, or the error's raw
/// code): the same question is not asked twice in one measure, and every path resolved in it
/// sees one answer for a shared ancestor.
#[derive(Default)]
struct Lstats(BTreeMap<PathBuf, Result<Metadata, i32>>);

impl Lstats {
    fn lstat(&mut self, path: &Path) -> io::Result<Metadata> {
        if let Some(seen) = self.0.get(path) {
            return seen.clone().map_err(io::Error::from_raw_os_error);
        }
        let answer = fs::symlink_metadata(path);
        // An error without a code (none from lstat) is not kept: asked again, it is answered
        // again.
        match &answer {
            Ok(meta) => {
                self.0.insert(path.to_path_buf(), Ok(meta.clone()));
            }
            Err(err) => {
                if let Some(code) = err.raw_os_error() {
                    self.0.insert(path.to_path_buf(), Err(code));
                }
            }
        }
        answer
    }
}

/// [`resolve`], asking `seen` rather than the filesystem again.
fn resolve_with(path: &Path, seen: &mut Lstats) -> Result<PathFact, FsFactsError> {
    if !path.is_absolute() {
        return Err(FsFactsError::Relative(path.to_path_buf()));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(FsFactsError::ParentComponent(path.to_path_buf()));
    }
    let inspect = |at: &Path, source: io::Error| FsFactsError::Inspect {
        path: at.to_path_buf(),
        source,
    };
    let mut pending: VecDeque<Step> = steps(path).collect();
    let mut current = PathBuf::from("/");
    let mut symlinks = Vec::new();
    let mut last_meta: Option<Metadata> = None;
    while let Some(step) = pending.pop_front() {
        let name = match step {
            Step::Parent => {
                current.pop();
                last_meta = None;
                continue;
            }
            Step::Name(name) => name,
        };
        let candidate = current.join(&name);
        match seen.lstat(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if symlinks.len() >= MAX_SYMLINKS {
                    return Err(FsFactsError::SymlinkLoop(path.to_path_buf()));
                }
                let target = fs::read_link(&candidate).map_err(|e| inspect(&candidate, e))?;
                symlinks.push(candidate);
                if target.is_absolute() {
                    current = PathBuf::from("/");
                }
                for step in steps(&target).collect::<Vec<_>>().into_iter().rev() {
                    pending.push_front(step);
                }
                last_meta = None;
            }
            Ok(meta) => {
                if !meta.is_dir()
                    && let Some(next) = pending.pop_front()
                {
                    let Step::Name(next) = next else {
                        // `file/..`: the kernel says ENOTDIR; so do we.
                        return Err(inspect(
                            &candidate,
                            io::Error::from_raw_os_error(libc::ENOTDIR),
                        ));
                    };
                    let first_missing = candidate.join(next);
                    let real = finish_lexically(first_missing.clone(), pending);
                    return Ok(PathFact {
                        kind: PathKind::Missing {
                            first_missing,
                            parent_is_dir: false,
                        },
                        real,
                        symlinks,
                    });
                }
                current = candidate;
                last_meta = Some(meta);
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                let real = finish_lexically(candidate.clone(), pending);
                return Ok(PathFact {
                    kind: PathKind::Missing {
                        first_missing: candidate,
                        parent_is_dir: true,
                    },
                    real,
                    symlinks,
                });
            }
            Err(err) if err.kind() == io::ErrorKind::PermissionDenied => {
                let real = finish_lexically(candidate, pending);
                return Ok(PathFact {
                    kind: PathKind::Unsearchable { dir: current },
                    real,
                    symlinks,
                });
            }
            Err(err) => return Err(inspect(&candidate, err)),
        }
    }
    let meta = match last_meta {
        Some(meta) => meta,
        None => seen.lstat(&current).map_err(|e| inspect(&current, e))?,
    };
    let file_type = meta.file_type();
    let kind = if file_type.is_dir() {
        PathKind::Dir
    } else if file_type.is_file() {
        PathKind::File {
            hard_links: meta.nlink(),
        }
    } else {
        PathKind::Other
    };
    Ok(PathFact {
        kind,
        real: current,
        symlinks,
    })
}

fn finish_lexically(mut path: PathBuf, rest: VecDeque<Step>) -> PathBuf {
    for step in rest {
        match step {
            Step::Parent => {
                path.pop();
            }
            Step::Name(name) => path.push(name),
        }
    }
    path
}

fn depth(path: &Path) -> usize {
    path.components().count()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    const HEADER: &str = "Num       RefCount Protocol Flags    Type St Inode Path\n";

    /// One measure's paths resolved through one shared answer per ancestor resolve as each does
    /// alone: through symlinks, to missing and dangling paths, under a file.
    #[test]
    fn shared_lstats_resolve_as_each_path_alone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        fs::create_dir_all(root.join("d/e")).unwrap();
        fs::write(root.join("d/f"), b"x").unwrap();
        symlink(root.join("d"), root.join("link")).unwrap();
        symlink(root.join("nowhere"), root.join("dangling")).unwrap();
        let paths = [
            "d",
            "d/e",
            "d/f",
            "link/e",
            "link/f",
            "link/new/deeper",
            "dangling",
            "d/f/x",
            "missing/x",
            "link",
            "d/e",
        ]
        .map(|p| root.join(p));
        let mut seen = Lstats::default();
        for path in &paths {
            assert_eq!(
                resolve_with(path, &mut seen).unwrap(),
                resolve(path).unwrap(),
                "{}",
                path.display()
            );
        }
        assert!(seen.0.contains_key(&root.join("d")));
    }

    #[test]
    fn parses_pathname_abstract_and_unbound_rows() {
        let table = format!(
            "{HEADER}\
             0000000000000000: 00000002 00000000 00010000 0001 01 12345 /run/docker.sock\n\
             0000000000000000: 00000003 00000000 00000000 0001 03  1072\n\
             ffff8880053a4400: 00000002 00000000 00010000 0001 01 22222 @/tmp/.X11-unix/X0\n\
             ffff8880053a4800: 00000002 00000000 00000000 0002 01 33333 /run/with space.sock\n\
             ffff8880053a4c00: 00000003 00000000 00000000 0001 03 44444 /run/docker.sock\n"
        );
        let listed = parse_proc_net_unix(table.as_bytes());
        assert_eq!(
            listed.paths.into_iter().collect::<Vec<_>>(),
            vec![
                PathBuf::from("/run/docker.sock"),
                PathBuf::from("/run/with space.sock")
            ]
        );
        assert_eq!(
            listed.abstract_names.into_iter().collect::<Vec<_>>(),
            vec!["/tmp/.X11-unix/X0".to_owned()]
        );
    }

    #[test]
    fn a_newline_in_a_path_continues_the_row() {
        let table = format!(
            "{HEADER}\
             0000000000000000: 00000002 00000000 00010000 0001 01 12345 /tmp/evil\n\
             x y.sock\n\
             0000000000000000: 00000002 00000000 00010000 0001 01 12346 /tmp/plain\n"
        );
        let listed = parse_proc_net_unix(table.as_bytes());
        assert_eq!(
            listed.paths.into_iter().collect::<Vec<_>>(),
            vec![
                PathBuf::from("/tmp/evil\nx y.sock"),
                PathBuf::from("/tmp/plain")
            ]
        );
    }

    #[test]
    fn garbage_never_panics() {
        for table in [
            &b""[..],
            b"\n\n",
            b"x\n: : : :\n",
            b"h\n0: 1 2 3 4 5 6",
            b"h\n\xff\xfe",
        ] {
            let _ = parse_proc_net_unix(table);
        }
        let listed = parse_proc_net_unix(b"h\n0: 1 2 3 4 5 6 /a\xffb");
        assert_eq!(listed.paths.len(), 1);
    }

    #[test]
    fn the_real_table_parses() {
        let table = fs::read(PROC_NET_UNIX).unwrap();
        let _ = parse_proc_net_unix(&table);
    }

    #[test]
    fn resolves_existing_missing_and_symlinked_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir(root.join("d")).unwrap();
        fs::write(root.join("d/f"), "x").unwrap();
        symlink("d", root.join("link")).unwrap();
        symlink(root.join("nowhere/x"), root.join("dangling")).unwrap();

        let f = resolve(&root.join("d/f")).unwrap();
        assert_eq!(f.kind, PathKind::File { hard_links: 1 });
        assert!(!f.is_symlink());

        let via = resolve(&root.join("link/f")).unwrap();
        assert_eq!(via.real, root.join("d/f"));
        assert_eq!(via.symlinks, vec![root.join("link")]);

        let missing = resolve(&root.join("link/new/deeper")).unwrap();
        assert_eq!(missing.real, root.join("d/new/deeper"));
        assert_eq!(
            missing.kind,
            PathKind::Missing {
                first_missing: root.join("d/new"),
                parent_is_dir: true
            }
        );

        let dangling = resolve(&root.join("dangling")).unwrap();
        assert_eq!(dangling.real, root.join("nowhere/x"));
        assert_eq!(dangling.symlinks, vec![root.join("dangling")]);

        let under_file = resolve(&root.join("d/f/x")).unwrap();
        assert_eq!(
            under_file.kind,
            PathKind::Missing {
                first_missing: root.join("d/f/x"),
                parent_is_dir: false
            }
        );
    }

    #[test]
    fn symlink_loops_and_bad_paths_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        symlink("b", root.join("a")).unwrap();
        symlink("a", root.join("b")).unwrap();
        assert!(matches!(
            resolve(&root.join("a")),
            Err(FsFactsError::SymlinkLoop(_))
        ));
        assert!(matches!(
            resolve(Path::new("rel")),
            Err(FsFactsError::Relative(_))
        ));
        assert!(matches!(
            resolve(Path::new("/a/../b")),
            Err(FsFactsError::ParentComponent(_))
        ));
    }

    #[test]
    fn hard_links_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::write(root.join("f"), "x").unwrap();
        fs::hard_link(root.join("f"), root.join("g")).unwrap();
        assert_eq!(
            resolve(&root.join("f")).unwrap().kind,
            PathKind::File { hard_links: 2 }
        );
    }

    #[test]
    fn cleanup_removes_only_empty_created_paths_deepest_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("empty.md"), "").unwrap();
        fs::write(root.join("full.md"), "kept").unwrap();
        fs::create_dir(root.join("filled")).unwrap();
        fs::write(root.join("filled/x"), "").unwrap();
        fs::write(root.join("untouched"), "").unwrap();

        let created = vec![
            root.join("a"),
            root.join("a/b"),
            root.join("empty.md"),
            root.join("full.md"),
            root.join("filled"),
            root.join("never-existed"),
        ];
        let kept = cleanup_created(&created);
        assert_eq!(kept, vec![root.join("full.md"), root.join("filled")]);
        assert!(!root.join("a").exists());
        assert!(!root.join("empty.md").exists());
        assert!(root.join("full.md").exists());
        assert!(root.join("filled/x").exists());
        assert!(root.join("untouched").exists());
    }

    #[test]
    fn measure_records_sockets_and_private_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let sock = root.join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let plan = LaunchPlan {
            mechanism: crate::plan::Mechanism::Bwrap,
            network: crate::plan::Network::None,
            workspace: root.clone(),
            writable_roots: vec![root.clone()],
            read_only_root: true,
            denied_read_paths: vec![root.join("secret")],
            protected_paths: vec![root.join("AGENTS.md")],
            syscall_filter: false,
            command: vec!["true".into()],
            env: Vec::new(),
            run_temp_dir: root.clone(),
            budgets: crate::plan::Budgets::default(),
            unix_sockets: Vec::new(),
        };
        let facts = measure(&plan).unwrap();
        assert!(facts.host_sockets.contains(&sock), "{facts:#?}");
        assert!(facts.private_dirs.contains(&PathBuf::from("/tmp")));
        assert_eq!(facts.paths.len(), 3);
        assert_eq!(facts.paths[&root].kind, PathKind::Dir);
        assert!(matches!(
            facts.paths[&root.join("secret")].kind,
            PathKind::Missing { .. }
        ));
    }
}
