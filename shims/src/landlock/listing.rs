//! From the plan's paths to rules: paths checked and normalized, the writable roots and the
//! outermost denied paths, read rules for every sibling on the way to a denied path (from the
//! host's [`ListingFacts`](super::ListingFacts)), and the filesystem reads behind the listings
//! (`lstat`, `read_dir`, `O_PATH` opens).

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use super::rights::READ;
use super::{Entry, EntryKind, FsRight, LandlockError, ListingFacts, PathRule, Reason};
use crate::plan::LaunchPlan;

/// Rules being collected, in the order they were granted; [`Rules::into_sorted`] makes them
/// one per path.
#[derive(Default)]
pub(super) struct Rules(Vec<PathRule>);

impl Rules {
    pub(super) fn grant(&mut self, path: &Path, dir: bool, access: &[FsRight], reason: Reason) {
        self.0.push(PathRule {
            path: path.to_path_buf(),
            dir,
            access: access.iter().copied().collect(),
            reasons: BTreeSet::from([reason]),
        });
    }

    /// One rule per path, sorted as `Path` orders them: a path granted more than once has the
    /// kind of its first grant and the union of the rights and reasons of all.
    ///
    /// A ruleset beneath a readable `/` has a rule for every entry beside each denied path's
    /// ancestors (hundreds with a busy home): the rules are sorted once, by a key made once per
    /// rule that orders as `Path` does, rather than kept in a map whose every insertion compares
    /// paths component by component.
    pub(super) fn into_sorted(mut self) -> Vec<PathRule> {
        // Stable (ties keep their order), so the first grant of a path comes first.
        self.0.sort_by_cached_key(|rule| order_key(&rule.path));
        let mut merged: Vec<PathRule> = Vec::with_capacity(self.0.len());
        for rule in self.0 {
            match merged.last_mut() {
                Some(first) if first.path == rule.path => {
                    first.access.extend(rule.access);
                    first.reasons.extend(rule.reasons);
                }
                _ => merged.push(rule),
            }
        }
        for rule in &mut merged {
            // INVARIANT: a non-directory never carries a directory-only right (the kernel would
            // reject the rule with EINVAL).
            if !rule.dir {
                rule.access.retain(|right| right.for_files());
            }
        }
        merged
    }
}

/// Bytes that order as `Path`'s `Ord` does (component by component, each component's kind in
/// `Component`'s order, then its name): a tag per component, its name, and a NUL, which no name
/// contains and which sorts below every byte of one, so a name sorts before any longer name it
/// begins and a path before the paths beneath it.
pub(super) fn order_key(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut key = Vec::with_capacity(path.as_os_str().len() + 8);
    for component in path.components() {
        let (tag, name): (u8, &[u8]) = match component {
            Component::Prefix(prefix) => (0, prefix.as_os_str().as_bytes()),
            Component::RootDir => (1, b""),
            Component::CurDir => (2, b""),
            Component::ParentDir => (3, b""),
            Component::Normal(name) => (4, name.as_bytes()),
        };
        key.push(tag);
        key.extend_from_slice(name);
        key.push(0);
    }
    key
}

/// The writable roots (the run temp dir included; `/` when the root is not read-only), checked
/// and deduplicated.
pub(super) fn writable_roots(plan: &LaunchPlan) -> Result<BTreeSet<PathBuf>, LandlockError> {
    let mut roots = BTreeSet::new();
    let root = PathBuf::from("/");
    let extra = (!plan.read_only_root).then_some(&root);
    for path in plan
        .writable_roots
        .iter()
        .chain([&plan.run_temp_dir])
        .chain(extra)
    {
        roots.insert(normalized(path)?);
    }
    Ok(roots)
}

/// The denied paths (the plan's and `extra`), checked, without those beneath another denied
/// path.
pub(super) fn denied_paths(
    plan: &LaunchPlan,
    extra: &[PathBuf],
) -> Result<BTreeSet<PathBuf>, LandlockError> {
    let mut all = BTreeSet::new();
    for path in plan.denied_read_paths.iter().chain(extra) {
        all.insert(normalized(path)?);
    }
    let outermost = all
        .iter()
        .filter(|path| {
            !all.iter()
                .any(|other| other != *path && path.starts_with(other))
        })
        .cloned()
        .collect();
    Ok(outermost)
}

/// `path` rebuilt from its components, if it is absolute and has no `..`.
pub(super) fn normalized(path: &Path) -> Result<PathBuf, LandlockError> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::RootDir if out.as_os_str().is_empty() => out.push("/"),
            Component::Normal(name) if !out.as_os_str().is_empty() => out.push(name),
            Component::CurDir => {}
            _ => return Err(LandlockError::NotNormalized(path.to_path_buf())),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(LandlockError::NotNormalized(path.to_path_buf()));
    }
    Ok(out)
}

/// Grants reads on every entry of `dir` (an ancestor of some denied path) except the denied
/// paths, and recurses into the entries that are themselves ancestors of denied paths.
pub(super) fn grant_siblings(
    dir: &Path,
    denied: &BTreeSet<PathBuf>,
    facts: &ListingFacts,
    rules: &mut Rules,
) -> Result<(), LandlockError> {
    let entries = facts
        .listings
        .get(dir)
        .ok_or_else(|| LandlockError::MissingListing(dir.to_path_buf()))?;
    // Which names of `dir` are denied, and which lead to a denied path: asked of the denied
    // paths once per directory, not once per entry (a directory such as /tmp or a home has
    // hundreds, each compared with every denied path component by component).
    let (mut denied_here, mut on_chain_here) = (BTreeSet::new(), BTreeSet::new());
    for path in denied {
        if let Ok(rest) = path.strip_prefix(dir) {
            let mut below = rest.components();
            if let Some(Component::Normal(name)) = below.next() {
                on_chain_here.insert(name);
                if below.next().is_none() {
                    denied_here.insert(name);
                }
            }
        }
    }
    for entry in entries {
        let mut components = Path::new(&entry.name).components();
        if !matches!(
            (components.next(), components.next()),
            (Some(Component::Normal(_)), None)
        ) {
            return Err(LandlockError::InvalidEntry {
                dir: dir.to_path_buf(),
                name: entry.name.to_string_lossy().into_owned(),
            });
        }
        if denied_here.contains(entry.name.as_os_str()) {
            continue;
        }
        let child = dir.join(&entry.name);
        let on_chain = on_chain_here.contains(entry.name.as_os_str());
        match entry.kind {
            EntryKind::Dir if on_chain => grant_siblings(&child, denied, facts, rules)?,
            EntryKind::Symlink if on_chain => return Err(LandlockError::SymlinkAncestor(child)),
            EntryKind::Dir => rules.grant(&child, true, &READ, Reason::ReadSibling),
            // Nothing can exist beneath a non-directory: granting it hides nothing.
            EntryKind::File | EntryKind::Other => {
                rules.grant(&child, false, &READ, Reason::ReadSibling);
            }
            EntryKind::Symlink => {}
        }
    }
    Ok(())
}

/// `lstat(path)`: `None` if it does not exist.
pub(super) fn lstat(path: &Path) -> Result<Option<EntryKind>, LandlockError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(kind(meta.file_type()))),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LandlockError::Measure {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub(super) fn kind(file_type: std::fs::FileType) -> EntryKind {
    if file_type.is_symlink() {
        EntryKind::Symlink
    } else if file_type.is_dir() {
        EntryKind::Dir
    } else if file_type.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

/// The entries of `dir`, sorted by name; `None` if it vanished.
pub(super) fn list(dir: &Path) -> Result<Option<Vec<Entry>>, LandlockError> {
    let error = |source| LandlockError::Measure {
        path: dir.to_path_buf(),
        source,
    };
    let reader = match std::fs::read_dir(dir) {
        Ok(reader) => reader,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(error(err)),
    };
    let mut entries = Vec::new();
    for entry in reader {
        let entry = entry.map_err(error)?;
        let file_type = entry.file_type().map_err(error)?;
        entries.push(Entry {
            name: entry.file_name(),
            kind: kind(file_type),
        });
    }
    entries.sort();
    Ok(Some(entries))
}

/// Opens `path` with `O_PATH | O_NOFOLLOW`: a rule never follows a symlink planted in its
/// place after the listing (the kind is checked against the plan afterwards).
pub(super) fn open_path(path: &Path) -> Result<OwnedFd, LandlockError> {
    crate::sys::open_path_nofollow(path).map_err(|source| LandlockError::Open {
        path: path.to_path_buf(),
        source,
    })
}
