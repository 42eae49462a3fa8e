//! What the sandbox sees at a path, given the mounts so far ([`Layers`]), and the masks that
//! hide denied paths and keep protected ones read-only ([`plan_masks`]): a directory, a file or
//! a missing path each get the mount that covers them, pins keep the directories and symlinks
//! leading to a masked path from being renamed away, and a missing protected path gets a
//! placeholder so it cannot be created (steps 5–7 of the [module documentation](super)).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{BwrapError, Mount, fact};
use crate::fsfacts::{FsFacts, PathFact, PathKind};
use crate::plan::LaunchPlan;

/// Whose content a path shows inside the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Layer {
    /// The host's, read-only.
    HostRo,
    /// The host's, writable through the writable mount at this path.
    HostRw(PathBuf),
    /// The sandbox's own (tmpfs, `/dev`, `/proc`): nothing persists.
    Private,
    /// A denial mask.
    Masked,
}

/// One mount of the base sequence (steps 2–4 in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum BaseOp {
    Dev,
    Proc,
    /// `--ro-bind` of the host's procfs entry over the sandbox's (`-try` when not required).
    ProcCover {
        required: bool,
    },
    Tmpfs,
    /// A host file bound back read-only into a private directory.
    ReadOnly,
    /// A writable root or a pin.
    Writable,
}

impl BaseOp {
    pub(super) fn layer(self, path: &Path) -> Layer {
        match self {
            Self::Dev | Self::Proc | Self::ProcCover { .. } | Self::Tmpfs => Layer::Private,
            Self::ReadOnly => Layer::HostRo,
            Self::Writable => Layer::HostRw(path.to_path_buf()),
        }
    }
}

/// The root plus the base mounts, kept in emission order: by depth, then by path, then by kind
/// (a writable root at a private directory's own path must come after its tmpfs).
pub(super) struct Base {
    pub(super) read_only_root: bool,
    pub(super) mounts: BTreeSet<(usize, PathBuf, BaseOp)>,
}

impl Base {
    pub(super) const DEV: &'static str = "/dev";
    pub(super) const PROC: &'static str = "/proc";

    pub(super) fn new(read_only_root: bool) -> Self {
        Self {
            read_only_root,
            mounts: BTreeSet::new(),
        }
    }

    pub(super) fn add(&mut self, path: impl AsRef<Path>, op: BaseOp) {
        let path = path.as_ref().to_path_buf();
        self.mounts.insert((depth(&path), path, op));
    }

    /// A base mount at or beneath `path`, which a mask at `path` would cover.
    pub(super) fn contained_in(&self, path: &Path) -> Option<&Path> {
        self.mounts
            .iter()
            .map(|(_, mounted, _)| mounted.as_path())
            .find(|mounted| mounted.starts_with(path))
    }

    pub(super) fn layer(&self, path: &Path) -> Layer {
        let covering = self
            .mounts
            .iter()
            .rev()
            .find(|(_, target, _)| path.starts_with(target));
        match covering {
            Some((_, target, op)) => op.layer(target),
            None if self.read_only_root => Layer::HostRo,
            None => Layer::HostRw(PathBuf::from("/")),
        }
    }

    pub(super) fn emit(&self, mounts: &mut Vec<Mount>) {
        for (_, path, op) in &self.mounts {
            let path = path.clone();
            mounts.push(match op {
                BaseOp::Dev => Mount::Dev(path),
                BaseOp::Proc => Mount::Proc(path),
                BaseOp::ProcCover { required } => Mount::ProcCover {
                    path,
                    required: *required,
                },
                BaseOp::Tmpfs => Mount::Tmpfs(path),
                BaseOp::ReadOnly => Mount::ReadOnly(path),
                BaseOp::Writable => Mount::Writable(path),
            });
        }
    }
}

/// The base plus the masks emitted after it (a mask covers whatever the base has there).
pub(super) struct Layers<'a> {
    pub(super) base: &'a Base,
    pub(super) masks: Vec<Mask>,
}

impl Layers<'_> {
    pub(super) fn layer(&self, path: &Path) -> Layer {
        for mask in self.masks.iter().rev() {
            if mask.covers(path) {
                return mask.layer();
            }
        }
        self.base.layer(path)
    }
}

// ---------------------------------------------------------------------------------------------
// Masks for denied and protected paths.

/// A mount over a denied or protected path (steps 5–7 in the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Mask {
    /// Denied directory: mode 0000, empty, read-only.
    DenyDir(PathBuf),
    /// Denied file or socket: `/dev/null` on a `nodev` mount.
    Null(PathBuf),
    /// Missing protected path inside a writable root (at its first missing component), or a
    /// placeholder already there: the placeholder, read-only.
    Placeholder(PathBuf),
    /// Existing protected path: the host's, read-only.
    ReadOnly(PathBuf),
}

impl Mask {
    pub(super) fn target(&self) -> &Path {
        match self {
            Self::DenyDir(path)
            | Self::Null(path)
            | Self::Placeholder(path)
            | Self::ReadOnly(path) => path,
        }
    }

    pub(super) fn covers(&self, path: &Path) -> bool {
        match self {
            Self::Null(target) => path == target,
            Self::DenyDir(target) | Self::Placeholder(target) | Self::ReadOnly(target) => {
                path.starts_with(target)
            }
        }
    }

    pub(super) fn layer(&self) -> Layer {
        match self {
            Self::DenyDir(_) | Self::Null(_) => Layer::Masked,
            Self::Placeholder(_) | Self::ReadOnly(_) => Layer::HostRo,
        }
    }

    pub(super) fn mount(&self) -> Mount {
        match self {
            Self::DenyDir(path) => Mount::DenyDir(path.clone()),
            Self::Null(path) => Mount::Null(path.clone()),
            Self::Placeholder(path) => Mount::Placeholder(path.clone()),
            Self::ReadOnly(path) => Mount::ReadOnly(path.clone()),
        }
    }
}

/// What a denied or protected path needs, before looking at where it lies.
#[derive(Clone, Debug)]
pub(super) enum Need {
    /// Mount this mask; `created` when bwrap must create the mountpoint; `writable_only` when
    /// the mask matters only inside a writable root (elsewhere the sandbox can neither create
    /// the path nor make it searchable).
    Mask {
        mask: Mask,
        created: bool,
        writable_only: bool,
    },
    /// The path cannot exist while this existing non-directory stays where it is: pin it.
    Pin(PathBuf),
    /// Nothing to mount (a missing path with no parent to pin).
    Nothing,
}

impl Need {
    pub(super) fn target(&self) -> Option<&Path> {
        match self {
            Self::Mask { mask, .. } => Some(mask.target()),
            Self::Pin(path) => Some(path),
            Self::Nothing => None,
        }
    }
}

pub(super) struct Planned {
    pub(super) masks: Vec<Mask>,
    pub(super) pins: BTreeSet<PathBuf>,
    pub(super) created: Vec<PathBuf>,
    pub(super) placeholders: Vec<PathBuf>,
}

pub(super) fn plan_masks(
    plan: &LaunchPlan,
    facts: &FsFacts,
    base: &Base,
    roots: &BTreeSet<PathBuf>,
) -> Result<Planned, BwrapError> {
    let mut denied: BTreeMap<(usize, PathBuf), Need> = BTreeMap::new();
    for path in &plan.denied_read_paths {
        let fact = fact(facts, path)?;
        if let PathKind::File { hard_links } = fact.kind
            && hard_links > 1
        {
            return Err(BwrapError::HardLinks {
                path: path.clone(),
                links: hard_links,
            });
        }
        let need = denied_need(fact);
        if let Some(target) = need.target() {
            if let Some(root) = roots.iter().find(|root| root.starts_with(target)) {
                return Err(BwrapError::DeniedContainsWritable {
                    path: path.clone(),
                    root: root.clone(),
                });
            }
            denied.insert((depth(target), target.to_path_buf()), need);
        }
    }

    let mut protected: BTreeMap<(usize, PathBuf), Need> = BTreeMap::new();
    for path in &plan.protected_paths {
        let fact = fact(facts, path)?;
        for link in &fact.symlinks {
            if matches!(base.layer(link), Layer::HostRw(_)) {
                return Err(BwrapError::ProtectedSymlink {
                    path: path.clone(),
                    link: link.clone(),
                });
            }
        }
        if let PathKind::File { hard_links } = fact.kind
            && hard_links > 1
            && matches!(base.layer(&fact.real), Layer::HostRw(_))
        {
            return Err(BwrapError::HardLinks {
                path: path.clone(),
                links: hard_links,
            });
        }
        let need = protected_need(fact, &facts.placeholders);
        let Some(target) = need.target() else {
            continue;
        };
        // A denial at or above the target wins; the protected mask would be hidden anyway.
        if denied
            .values()
            .filter_map(Need::target)
            .any(|d| target.starts_with(d))
        {
            continue;
        }
        let key = (depth(target), target.to_path_buf());
        let merged = match protected.remove(&key) {
            Some(earlier) => merge(earlier, need),
            None => need,
        };
        protected.insert(key, merged);
    }

    let mut layers = Layers {
        base,
        masks: Vec::new(),
    };
    let mut planned = Planned {
        masks: Vec::new(),
        pins: BTreeSet::new(),
        created: Vec::new(),
        placeholders: Vec::new(),
    };
    for (is_denied, needs) in [(false, protected), (true, denied)] {
        for need in needs.into_values() {
            let Some(target) = need.target().map(Path::to_path_buf) else {
                continue;
            };
            let layer = layers.layer(&target);
            match (layer, need) {
                (Layer::HostRw(root), Need::Pin(blocker)) => {
                    pin_ancestors(&root, &blocker, &mut planned.pins);
                    planned.pins.insert(blocker);
                }
                (Layer::HostRw(root), Need::Mask { mask, created, .. }) => {
                    if let Some(inner) = base.contained_in(&target) {
                        return Err(BwrapError::MaskContainsMount {
                            path: target,
                            inner: inner.to_path_buf(),
                        });
                    }
                    pin_ancestors(&root, &target, &mut planned.pins);
                    if let Mask::Placeholder(path) = &mask {
                        planned.placeholders.push(path.clone());
                    } else if created {
                        planned.created.push(target);
                    }
                    layers.masks.push(mask.clone());
                    planned.masks.push(mask);
                }
                // Read-only already: a denied path that exists still needs its mask; a
                // protected one needs nothing, and a missing path cannot be created there.
                (
                    Layer::HostRo,
                    Need::Mask {
                        mask,
                        writable_only: false,
                        ..
                    },
                ) if is_denied => {
                    layers.masks.push(mask.clone());
                    planned.masks.push(mask);
                }
                // Private, masked, read-only-and-missing, or nothing to do.
                _ => {}
            }
        }
    }
    Ok(planned)
}

pub(super) fn denied_need(fact: &PathFact) -> Need {
    match &fact.kind {
        PathKind::Dir => existing(Mask::DenyDir(fact.real.clone())),
        PathKind::File { .. } | PathKind::Other => existing(Mask::Null(fact.real.clone())),
        PathKind::Missing {
            first_missing,
            parent_is_dir: true,
        } => Need::Mask {
            mask: Mask::DenyDir(first_missing.clone()),
            created: true,
            writable_only: true,
        },
        PathKind::Missing {
            first_missing,
            parent_is_dir: false,
        } => blocker(first_missing),
        PathKind::Unsearchable { dir } => Need::Mask {
            mask: Mask::DenyDir(dir.clone()),
            created: false,
            writable_only: true,
        },
    }
}

/// A protected path's need; `placeholders` are those the host found (see
/// [`FsFacts::placeholders`]), which are held like the ones this run makes.
pub(super) fn protected_need(fact: &PathFact, placeholders: &[PathBuf]) -> Need {
    let placeholder = |path: &Path| Need::Mask {
        mask: Mask::Placeholder(path.to_path_buf()),
        created: false,
        writable_only: true,
    };
    match &fact.kind {
        PathKind::Other if placeholders.contains(&fact.real) => placeholder(&fact.real),
        PathKind::Dir | PathKind::File { .. } | PathKind::Other => {
            existing(Mask::ReadOnly(fact.real.clone()))
        }
        PathKind::Missing {
            first_missing,
            parent_is_dir: true,
        } => placeholder(first_missing),
        PathKind::Missing {
            first_missing,
            parent_is_dir: false,
        } => match first_missing.parent() {
            Some(node) if placeholders.iter().any(|p| p == node) => placeholder(node),
            _ => blocker(first_missing),
        },
        PathKind::Unsearchable { dir } => Need::Mask {
            mask: Mask::ReadOnly(dir.clone()),
            created: false,
            writable_only: true,
        },
    }
}

pub(super) fn existing(mask: Mask) -> Need {
    Need::Mask {
        mask,
        created: false,
        writable_only: false,
    }
}

/// Two protected paths with one target (`.loopwright/a` and `.loopwright/b` under a missing
/// `.loopwright`: one placeholder serves both; `notes` and `notes/x` with `notes` a file: its
/// read-only mount keeps it in place as a pin would).
pub(super) fn merge(earlier: Need, later: Need) -> Need {
    match (earlier, later) {
        (Need::Pin(_) | Need::Nothing, mask @ Need::Mask { .. }) => mask,
        (earlier, _) => earlier,
    }
}

pub(super) fn blocker(first_missing: &Path) -> Need {
    match first_missing.parent() {
        Some(parent) => Need::Pin(parent.to_path_buf()),
        None => Need::Nothing,
    }
}

/// Pins every directory strictly between the writable mount `root` and `target`.
pub(super) fn pin_ancestors(root: &Path, target: &Path, pins: &mut BTreeSet<PathBuf>) {
    for ancestor in target.ancestors().skip(1) {
        if ancestor == root || !ancestor.starts_with(root) {
            break;
        }
        pins.insert(ancestor.to_path_buf());
    }
}

pub(super) fn depth(path: &Path) -> usize {
    path.components().count()
}
