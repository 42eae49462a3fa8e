//! The `linux-landlock` backend's filesystem, network and scope ruleset.
//!
//! Two halves, as every shim: [`ruleset_plan`] is a pure function from a [`LaunchPlan`] and the
//! directory listings the host measured ([`ListingFacts`]) to a sorted, serializable
//! [`RulesetPlan`] (snapshot-tested on any machine); [`restrict`] applies such a plan to the
//! calling process and fails closed unless the kernel enforces every right the plan needs.
//!
//! # What the ruleset contains
//!
//! Every filesystem right of Landlock ABI [`TARGET_ABI`] is *handled* (denied unless a rule
//! grants it). Rules then grant:
//! - **reads** (`execute`, `read_file`, `read_dir`): on `/` when nothing is denied. Landlock rules
//!   only add rights, so "everything but the denied paths" is built by allow-listing: along the
//!   chain of ancestors of each denied path, every *sibling* entry is granted (directories the
//!   three read rights, other files `execute` + `read_file`), while the ancestors themselves get
//!   no rule at all — neither `read_dir` (so `ls ~` or `ls /` fail inside the sandbox: the price
//!   of denying `~/.ssh` without a mount namespace) nor anything beneath them that was not
//!   listed. Path traversal is never restricted by Landlock, so `~/.bashrc` stays readable.
//!   Sibling symlinks get no rule: a rule would follow the link (a `~/x -> .ssh` link would
//!   re-grant the denied path), and not granting them costs nothing, since whatever they point
//!   to is readable exactly when its own location is.
//! - **writes** on each writable root (the run temp dir included): everything except
//!   `make_char`, `make_block` (a device node made in the workspace would be a raw path to the
//!   disk for a sandboxed root) and `ioctl_dev`.
//! - **devices** ordinary programs need: `/dev/null`, `/dev/zero`, `/dev/full` (read, write),
//!   `/dev/random`, `/dev/urandom` (read), `/dev/tty`, `/dev/ptmx` and `/dev/pts` (read, write,
//!   device ioctls), each only if it exists.
//! - **network** (ABI ≥ 4): in [`Network::None`] TCP bind and connect are handled with no rule,
//!   so every TCP bind/connect fails; other socket families are left to seccomp.
//!   [`Network::AllowOutbound`] handles nothing. [`Network::LoopbackOnly`] and
//!   [`Network::Filtered`] need a network namespace and are refused.
//! - **scopes** (ABI ≥ 6): abstract unix sockets and signals, always: no connecting to the
//!   host's abstract sockets, no signals to processes outside the sandbox.
//!
//! # Paths that do not exist yet, and new entries
//!
//! A missing denied path is denied the same way: its nearest existing ancestor's children are
//! listed and granted, and since the path (or its missing ancestor) is not among them, nothing
//! is granted where it will appear. Rules bind to the inodes opened when the ruleset is built,
//! so an entry created later directly inside an ancestor directory — by the host, since the
//! sandbox cannot write there — has no rule and is unreadable: the ruleset fails closed on
//! anything it did not list, the denied path included. (An entry the host creates later *as a
//! symlink* to a granted place is readable through it; that is the host's own doing.)
//!
//! # Refusals (fail closed: an error, no ruleset)
//!
//! - a denied path inside a writable root (or a writable root inside a denied path): the
//!   writable root's rule grants reads on its whole subtree, and Landlock cannot carve a read
//!   hole out of a granted subtree;
//! - any protected path: the engine only selects Landlock when `protectedPathReadOnlyMask` is
//!   not required and then leaves them empty; Landlock cannot stop a missing protected file from
//!   being created inside a writable workspace, so masking some would be pretending;
//! - [`Network::LoopbackOnly`]; relative or `..` paths; a denied path with a symlinked ancestor
//!   (the host resolves paths; a symlinked ancestor would leave its target granted); missing
//!   writable roots; listings the facts should have but do not.
//!
//! # Applying it
//!
//! [`restrict`] queries the kernel's ABI and refuses below [`RulesetPlan::min_abi`] (3 for
//! write containment, which needs `truncate`; 4 for network mode `none`). Between that and
//! [`TARGET_ABI`], rights the kernel lacks (`refer` < 2, `ioctl_dev` < 5, scopes < 6) are dropped
//! and named in [`Status::dropped`], matching the limitations the host's probe reports for such
//! kernels; everything kept is a hard requirement (`CompatLevel::HardRequirement`, then
//! `FullyEnforced` is checked), and `no_new_privs` must be set. Rules are opened with
//! `O_PATH | O_NOFOLLOW` and their type checked against the plan: a writable root or `/` that
//! vanished or changed type is an error; a read sibling or device that did is skipped (less
//! access, never more) and counted in [`Status::skipped`].
//!
//! # Known limits of Landlock (ABI 7), left to seccomp or reported
//!
//! Not controlled: `stat` and other metadata reads (a denied file's size and times are
//! visible), `chmod`/`chown`/`utimes`/xattrs outside writable roots (DAC still applies; seccomp
//! must cover the setuid bits), `connect` to pathname unix sockets (ABI 9 adds a right for it),
//! UDP and other socket families, hard links that already existed to a denied file elsewhere in
//! a granted subtree, other mounts of the same files, `ioctl` on file descriptors opened before
//! [`restrict`] (the inherited terminal: `TIOCSTI` is seccomp's job). Only the calling thread is
//! restricted (ABI 8's all-threads flag is not used): call it single-threaded. There is no
//! writable shared `/tmp` or `/dev/shm` (POSIX semaphores and `shm_open` fail); the run temp dir
//! is the place for temporary files.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use landlock::{
    AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};
use serde::{Deserialize, Serialize};

use crate::landlock_abi;
use crate::plan::{LaunchPlan, Network};

/// The Landlock ABI whose rights the plan is computed for (the newest one tested here).
///
/// [`restrict`] applies the plan at the kernel's ABI: rights newer than the kernel's are dropped
/// (and reported in [`Status::dropped`]) as long as the kernel reaches [`RulesetPlan::min_abi`].
pub const TARGET_ABI: u32 = 7;

/// Device files ordinary programs open, with the rights each gets (if it exists).
const DEVICES: [(&str, &[FsRight]); 8] = [
    ("/dev/full", &[FsRight::ReadFile, FsRight::WriteFile]),
    ("/dev/null", &[FsRight::ReadFile, FsRight::WriteFile]),
    (
        "/dev/ptmx",
        &[FsRight::ReadFile, FsRight::WriteFile, FsRight::IoctlDev],
    ),
    (
        "/dev/pts",
        &[FsRight::ReadFile, FsRight::WriteFile, FsRight::IoctlDev],
    ),
    ("/dev/random", &[FsRight::ReadFile]),
    (
        "/dev/tty",
        &[FsRight::ReadFile, FsRight::WriteFile, FsRight::IoctlDev],
    ),
    ("/dev/urandom", &[FsRight::ReadFile]),
    ("/dev/zero", &[FsRight::ReadFile, FsRight::WriteFile]),
];

/// Why [`ruleset_plan`] or [`restrict`] refused.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error(
        "denied path `{denied}` lies inside writable root `{root}`: landlock cannot carve a read hole out of a writable subtree"
    )]
    DeniedInsideWritable { denied: PathBuf, root: PathBuf },
    #[error(
        "writable root `{root}` lies inside denied path `{denied}`: landlock cannot grant writes without reads"
    )]
    WritableInsideDenied { root: PathBuf, denied: PathBuf },
    #[error(
        "landlock cannot mask protected path `{0}` read-only (a missing one could still be created); refusing"
    )]
    ProtectedPaths(PathBuf),
    #[error(
        "network `{0}` needs a network namespace of the sandbox's own, which landlock does not create"
    )]
    OwnNetwork(&'static str),
    #[error("path `{0}` is not absolute and normalized")]
    NotNormalized(PathBuf),
    #[error("ancestor `{0}` of a denied path is a symlink; denied paths must be resolved")]
    SymlinkAncestor(PathBuf),
    #[error("no directory listing for `{0}`, an ancestor of a denied path")]
    MissingListing(PathBuf),
    #[error("listing of `{dir}` has an invalid entry name `{name}`")]
    InvalidEntry { dir: PathBuf, name: String },
    #[error("writable root `{0}` does not exist or is a symlink")]
    MissingWritableRoot(PathBuf),
    #[error("cannot measure `{path}`: {source}")]
    Measure {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot query the landlock abi: {0}")]
    AbiQuery(#[source] std::io::Error),
    #[error("landlock abi {kernel} is below the {needed} this ruleset needs")]
    AbiTooOld { kernel: u32, needed: u32 },
    #[error("cannot open `{path}` for a landlock rule: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{0}` changed type since it was measured")]
    KindChanged(PathBuf),
    #[error("landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("landlock ruleset not fully enforced ({0}); refusing")]
    NotEnforced(String),
    #[error("no_new_privs could not be set")]
    NoNewPrivs,
}

/// A Landlock filesystem access right, named as in the kernel's UAPI (lowercase).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsRight {
    Execute,
    WriteFile,
    ReadFile,
    ReadDir,
    RemoveDir,
    RemoveFile,
    MakeChar,
    MakeDir,
    MakeReg,
    MakeSock,
    MakeFifo,
    MakeBlock,
    MakeSym,
    Refer,
    Truncate,
    IoctlDev,
}

/// A Landlock network access right.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetRight {
    BindTcp,
    ConnectTcp,
}

/// A Landlock scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeRight {
    AbstractUnixSocket,
    Signal,
}

/// Why a rule exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Nothing is denied: the whole filesystem is readable.
    ReadAll,
    /// A sibling of an ancestor of a denied path (or of the denied path itself).
    ReadSibling,
    /// A writable root.
    WritableRoot,
    /// A device file ordinary programs need.
    Device,
}

/// What a path is, as `lstat` saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Dir,
    File,
    Symlink,
    /// Devices, sockets, FIFOs.
    Other,
}

/// One directory entry: a single path component and its kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub name: OsString,
    pub kind: EntryKind,
}

/// What the host measured, so that [`ruleset_plan`] stays pure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListingFacts {
    /// The entries (sorted by name) of every existing directory that is an ancestor of a denied
    /// path.
    pub listings: BTreeMap<PathBuf, Vec<Entry>>,
    /// The kind of every writable root and candidate device file that exists.
    pub kinds: BTreeMap<PathBuf, EntryKind>,
}

/// One rule: rights granted on a path and everything beneath it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRule {
    #[serde(with = "path_serde")]
    pub path: PathBuf,
    /// Whether the path is a directory (checked again when the rule is added).
    pub dir: bool,
    pub access: BTreeSet<FsRight>,
    pub reasons: BTreeSet<Reason>,
}

/// The complete, deterministic description of a Landlock ruleset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesetPlan {
    /// The ABI the rights were computed for ([`TARGET_ABI`]).
    pub abi: u32,
    /// The lowest kernel ABI on which the plan is honest: write containment needs `truncate`
    /// (ABI 3) and network mode `none` needs TCP rules (ABI 4). Between this and `abi`, newer
    /// rights are dropped and reported (the probe lists those limitations).
    pub min_abi: u32,
    pub handled_fs: BTreeSet<FsRight>,
    pub handled_net: BTreeSet<NetRight>,
    pub scopes: BTreeSet<ScopeRight>,
    /// Sorted by path, one rule per path.
    pub rules: Vec<PathRule>,
}

/// What [`restrict`] enforced, for the audit record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The kernel's Landlock ABI.
    pub abi: u32,
    pub handled_fs: BTreeSet<FsRight>,
    pub handled_net: BTreeSet<NetRight>,
    pub scopes: BTreeSet<ScopeRight>,
    /// Rights of the plan this kernel does not have (none at ABI ≥ [`TARGET_ABI`]).
    pub dropped: Vec<String>,
    /// Number of rules added.
    pub rules: usize,
    /// Read-sibling or device rules not added because their path vanished or changed type
    /// since the listing (those paths are unreadable: less access, never more).
    pub skipped: usize,
    /// The kernel enforces every handled right (always true: otherwise [`restrict`] errs).
    pub enforced: bool,
    pub no_new_privs: bool,
}

/// The ruleset for `plan`, given the listings `facts` measured.
pub fn ruleset_plan(plan: &LaunchPlan, facts: &ListingFacts) -> Result<RulesetPlan, LandlockError> {
    if let Some(path) = plan.protected_paths.first() {
        return Err(LandlockError::ProtectedPaths(path.clone()));
    }
    let handled_net: BTreeSet<NetRight> = match plan.network {
        Network::None => [NetRight::BindTcp, NetRight::ConnectTcp].into(),
        Network::AllowOutbound => BTreeSet::new(),
        Network::LoopbackOnly => return Err(LandlockError::OwnNetwork("loopback-only")),
        Network::Filtered(_) => return Err(LandlockError::OwnNetwork("filtered egress")),
    };
    let writable = writable_roots(plan)?;
    let denied = denied_paths(plan)?;
    for d in &denied {
        for w in &writable {
            if d.starts_with(w) {
                return Err(LandlockError::DeniedInsideWritable {
                    denied: d.clone(),
                    root: w.clone(),
                });
            }
            if w.starts_with(d) {
                return Err(LandlockError::WritableInsideDenied {
                    root: w.clone(),
                    denied: d.clone(),
                });
            }
        }
    }

    let mut rules = Rules::default();
    if denied.is_empty() {
        rules.grant(Path::new("/"), true, &READ, Reason::ReadAll);
    } else {
        grant_siblings(Path::new("/"), &denied, facts, &mut rules)?;
    }
    for root in &writable {
        let dir = match facts.kinds.get(root) {
            _ if root == Path::new("/") => true,
            Some(EntryKind::Dir) => true,
            Some(EntryKind::File | EntryKind::Other) => false,
            Some(EntryKind::Symlink) | None => {
                return Err(LandlockError::MissingWritableRoot(root.clone()));
            }
        };
        rules.grant(root, dir, &WRITABLE, Reason::WritableRoot);
    }
    for (device, access) in DEVICES {
        let device = Path::new(device);
        // A device rule must not re-grant a denied path (`/dev/tty` itself, or `/dev/pts/3`
        // beneath the `/dev/pts` rule).
        if denied
            .iter()
            .any(|path| device.starts_with(path) || path.starts_with(device))
        {
            continue;
        }
        match facts.kinds.get(device) {
            Some(EntryKind::Dir) => rules.grant(device, true, access, Reason::Device),
            Some(EntryKind::File | EntryKind::Other) => {
                rules.grant(device, false, access, Reason::Device);
            }
            Some(EntryKind::Symlink) | None => {}
        }
    }

    // The lowest ABI at which this ruleset is what the probe promised (`landlock_abi`).
    let mut min_abi = 1;
    if plan.read_only_root {
        min_abi = min_abi.max(landlock_abi::TRUNCATE);
    }
    if !handled_net.is_empty() {
        min_abi = min_abi.max(NET_ABI);
    }
    Ok(RulesetPlan {
        abi: TARGET_ABI,
        min_abi,
        handled_fs: FsRight::ALL.into_iter().collect(),
        handled_net,
        scopes: [ScopeRight::AbstractUnixSocket, ScopeRight::Signal].into(),
        rules: rules.into_sorted(),
    })
}

impl ListingFacts {
    /// Measures what [`ruleset_plan`] needs for `plan`: the listing of every existing ancestor of
    /// every denied path (stopping at a missing, non-directory or symlinked one), and the kinds
    /// of the writable roots and device files. A missing path is simply absent.
    pub fn measure(plan: &LaunchPlan) -> Result<ListingFacts, LandlockError> {
        // Paths that are not absolute and normalized are skipped: `ruleset_plan` refuses them.
        let mut facts = ListingFacts::default();
        let writable = plan.writable_roots.iter().chain([&plan.run_temp_dir]);
        let devices = DEVICES.iter().map(|(device, _)| PathBuf::from(device));
        for path in writable
            .filter_map(|path| normalized(path).ok())
            .chain(devices)
        {
            if let Some(kind) = lstat(&path)? {
                facts.kinds.insert(path, kind);
            }
        }
        for denied in &plan.denied_read_paths {
            let Ok(denied) = normalized(denied) else {
                continue;
            };
            let mut chain: Vec<&Path> = denied.ancestors().skip(1).collect();
            chain.reverse();
            for dir in chain {
                if facts.listings.contains_key(dir) {
                    continue;
                }
                if lstat(dir)? != Some(EntryKind::Dir) {
                    break;
                }
                match list(dir)? {
                    Some(entries) => facts.listings.insert(dir.to_path_buf(), entries),
                    None => break,
                };
            }
        }
        Ok(facts)
    }
}

/// Applies `plan` to the calling thread (and the processes it will exec), after setting
/// `no_new_privs`. Fails closed: an error if the kernel is below [`RulesetPlan::min_abi`], if a
/// rule's path cannot be opened or changed type, or if anything handled is not fully enforced.
/// The caller is single-threaded (a freshly exec'd helper); allocation is fine.
pub fn restrict(plan: &RulesetPlan) -> Result<Status, LandlockError> {
    let abi = kernel_abi()?;
    if abi < plan.min_abi {
        return Err(LandlockError::AbiTooOld {
            kernel: abi,
            needed: plan.min_abi,
        });
    }
    let mut dropped = Vec::new();
    let handled_fs = keep(&plan.handled_fs, abi, &mut dropped);
    let handled_net = keep(&plan.handled_net, abi, &mut dropped);
    let scopes = keep(&plan.scopes, abi, &mut dropped);

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(fs_bits(&handled_fs))?;
    if !handled_net.is_empty() {
        ruleset = ruleset.handle_access(net_bits(&handled_net))?;
    }
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scope_bits(&scopes))?;
    }
    let mut created = ruleset.create()?;
    let (mut rules, mut skipped) = (0, 0);
    for rule in &plan.rules {
        let access: BTreeSet<FsRight> = rule.access.intersection(&handled_fs).copied().collect();
        if access.is_empty() {
            continue;
        }
        // A sibling or device that vanished or changed type since the listing is simply not
        // granted (less access, never more); a writable root or `/` must be as planned.
        let optional = rule
            .reasons
            .iter()
            .all(|reason| matches!(reason, Reason::ReadSibling | Reason::Device));
        let file = match open_path(&rule.path) {
            Ok(fd) => File::from(fd),
            Err(LandlockError::Open { source, .. })
                if optional && source.kind() == std::io::ErrorKind::NotFound =>
            {
                skipped += 1;
                continue;
            }
            Err(err) => return Err(err),
        };
        let meta = file.metadata().map_err(|source| LandlockError::Open {
            path: rule.path.clone(),
            source,
        })?;
        if meta.file_type().is_symlink() || meta.is_dir() != rule.dir {
            if optional {
                skipped += 1;
                continue;
            }
            return Err(LandlockError::KindChanged(rule.path.clone()));
        }
        created = created.add_rule(PathBeneath::new(file, fs_bits(&access)))?;
        rules += 1;
    }
    let status = created.no_new_privs(true).restrict_self()?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(LandlockError::NotEnforced(format!("{:?}", status.ruleset)));
    }
    if !status.no_new_privs {
        return Err(LandlockError::NoNewPrivs);
    }
    Ok(Status {
        abi,
        handled_fs,
        handled_net,
        scopes,
        dropped,
        rules,
        skipped,
        enforced: true,
        no_new_privs: true,
    })
}

/// The running kernel's Landlock ABI version (`landlock_create_ruleset(NULL, 0, VERSION)`).
pub fn kernel_abi() -> Result<u32, LandlockError> {
    let version = crate::sys::landlock_abi_version().map_err(LandlockError::AbiQuery)?;
    u32::try_from(version)
        .map_err(|_| LandlockError::AbiQuery(std::io::Error::from_raw_os_error(libc::ERANGE)))
}

// ---------------------------------------------------------------------------------------------

const NET_ABI: u32 = landlock_abi::TCP;
const SCOPE_ABI: u32 = landlock_abi::SCOPES;

const READ: [FsRight; 3] = [FsRight::Execute, FsRight::ReadFile, FsRight::ReadDir];

/// A writable root's rights: all but device creation and device ioctls.
const WRITABLE: [FsRight; 13] = [
    FsRight::Execute,
    FsRight::ReadFile,
    FsRight::ReadDir,
    FsRight::WriteFile,
    FsRight::RemoveDir,
    FsRight::RemoveFile,
    FsRight::MakeDir,
    FsRight::MakeReg,
    FsRight::MakeSock,
    FsRight::MakeFifo,
    FsRight::MakeSym,
    FsRight::Refer,
    FsRight::Truncate,
];

impl FsRight {
    /// Every right of ABI [`TARGET_ABI`].
    pub const ALL: [FsRight; 16] = [
        FsRight::Execute,
        FsRight::WriteFile,
        FsRight::ReadFile,
        FsRight::ReadDir,
        FsRight::RemoveDir,
        FsRight::RemoveFile,
        FsRight::MakeChar,
        FsRight::MakeDir,
        FsRight::MakeReg,
        FsRight::MakeSock,
        FsRight::MakeFifo,
        FsRight::MakeBlock,
        FsRight::MakeSym,
        FsRight::Refer,
        FsRight::Truncate,
        FsRight::IoctlDev,
    ];

    /// The ABI that introduced the right.
    pub fn abi(self) -> u32 {
        match self {
            FsRight::Refer => landlock_abi::REFER,
            FsRight::Truncate => landlock_abi::TRUNCATE,
            FsRight::IoctlDev => landlock_abi::IOCTL_DEV,
            _ => 1,
        }
    }

    /// Whether the right means anything on a non-directory (the kernel rejects the others).
    fn for_files(self) -> bool {
        matches!(
            self,
            FsRight::Execute
                | FsRight::WriteFile
                | FsRight::ReadFile
                | FsRight::Truncate
                | FsRight::IoctlDev
        )
    }

    fn bits(self) -> AccessFs {
        match self {
            FsRight::Execute => AccessFs::Execute,
            FsRight::WriteFile => AccessFs::WriteFile,
            FsRight::ReadFile => AccessFs::ReadFile,
            FsRight::ReadDir => AccessFs::ReadDir,
            FsRight::RemoveDir => AccessFs::RemoveDir,
            FsRight::RemoveFile => AccessFs::RemoveFile,
            FsRight::MakeChar => AccessFs::MakeChar,
            FsRight::MakeDir => AccessFs::MakeDir,
            FsRight::MakeReg => AccessFs::MakeReg,
            FsRight::MakeSock => AccessFs::MakeSock,
            FsRight::MakeFifo => AccessFs::MakeFifo,
            FsRight::MakeBlock => AccessFs::MakeBlock,
            FsRight::MakeSym => AccessFs::MakeSym,
            FsRight::Refer => AccessFs::Refer,
            FsRight::Truncate => AccessFs::Truncate,
            FsRight::IoctlDev => AccessFs::IoctlDev,
        }
    }
}

fn fs_bits(rights: &BTreeSet<FsRight>) -> BitFlags<AccessFs> {
    rights
        .iter()
        .fold(BitFlags::EMPTY, |bits, right| bits | right.bits())
}

fn net_bits(rights: &BTreeSet<NetRight>) -> BitFlags<AccessNet> {
    rights.iter().fold(BitFlags::EMPTY, |bits, right| {
        bits | match right {
            NetRight::BindTcp => AccessNet::BindTcp,
            NetRight::ConnectTcp => AccessNet::ConnectTcp,
        }
    })
}

fn scope_bits(scopes: &BTreeSet<ScopeRight>) -> BitFlags<Scope> {
    scopes.iter().fold(BitFlags::EMPTY, |bits, scope| {
        bits | match scope {
            ScopeRight::AbstractUnixSocket => Scope::AbstractUnixSocket,
            ScopeRight::Signal => Scope::Signal,
        }
    })
}

/// The members of `set` the kernel's `abi` has; the names of the others go to `dropped`.
fn keep<T: Right>(set: &BTreeSet<T>, abi: u32, dropped: &mut Vec<String>) -> BTreeSet<T> {
    let (kept, gone): (BTreeSet<T>, BTreeSet<T>) = set.iter().partition(|right| right.abi() <= abi);
    dropped.extend(gone.iter().map(|right| right.name().to_owned()));
    kept
}

/// A handled right or scope: the ABI that introduced it and its UAPI name.
trait Right: Copy + Ord {
    fn abi(self) -> u32;
    fn name(self) -> &'static str;
}

impl Right for FsRight {
    fn abi(self) -> u32 {
        FsRight::abi(self)
    }
    fn name(self) -> &'static str {
        match self {
            FsRight::Execute => "execute",
            FsRight::WriteFile => "write_file",
            FsRight::ReadFile => "read_file",
            FsRight::ReadDir => "read_dir",
            FsRight::RemoveDir => "remove_dir",
            FsRight::RemoveFile => "remove_file",
            FsRight::MakeChar => "make_char",
            FsRight::MakeDir => "make_dir",
            FsRight::MakeReg => "make_reg",
            FsRight::MakeSock => "make_sock",
            FsRight::MakeFifo => "make_fifo",
            FsRight::MakeBlock => "make_block",
            FsRight::MakeSym => "make_sym",
            FsRight::Refer => "refer",
            FsRight::Truncate => "truncate",
            FsRight::IoctlDev => "ioctl_dev",
        }
    }
}

impl Right for NetRight {
    fn abi(self) -> u32 {
        NET_ABI
    }
    fn name(self) -> &'static str {
        match self {
            NetRight::BindTcp => "bind_tcp",
            NetRight::ConnectTcp => "connect_tcp",
        }
    }
}

impl Right for ScopeRight {
    fn abi(self) -> u32 {
        SCOPE_ABI
    }
    fn name(self) -> &'static str {
        match self {
            ScopeRight::AbstractUnixSocket => "abstract_unix_socket",
            ScopeRight::Signal => "signal",
        }
    }
}

/// Rules being collected: one per path, rights and reasons merged.
#[derive(Default)]
struct Rules(BTreeMap<PathBuf, PathRule>);

impl Rules {
    fn grant(&mut self, path: &Path, dir: bool, access: &[FsRight], reason: Reason) {
        let rule = self
            .0
            .entry(path.to_path_buf())
            .or_insert_with(|| PathRule {
                path: path.to_path_buf(),
                dir,
                access: BTreeSet::new(),
                reasons: BTreeSet::new(),
            });
        // INVARIANT: a non-directory never carries a directory-only right (the kernel would
        // reject the rule with EINVAL).
        rule.access.extend(
            access
                .iter()
                .copied()
                .filter(|right| rule.dir || right.for_files()),
        );
        rule.reasons.insert(reason);
    }

    fn into_sorted(self) -> Vec<PathRule> {
        self.0.into_values().collect()
    }
}

/// The writable roots (the run temp dir included; `/` when the root is not read-only), checked
/// and deduplicated.
fn writable_roots(plan: &LaunchPlan) -> Result<BTreeSet<PathBuf>, LandlockError> {
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

/// The denied paths, checked, without those beneath another denied path.
fn denied_paths(plan: &LaunchPlan) -> Result<BTreeSet<PathBuf>, LandlockError> {
    let mut all = BTreeSet::new();
    for path in &plan.denied_read_paths {
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
fn normalized(path: &Path) -> Result<PathBuf, LandlockError> {
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
fn grant_siblings(
    dir: &Path,
    denied: &BTreeSet<PathBuf>,
    facts: &ListingFacts,
    rules: &mut Rules,
) -> Result<(), LandlockError> {
    let entries = facts
        .listings
        .get(dir)
        .ok_or_else(|| LandlockError::MissingListing(dir.to_path_buf()))?;
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
        let child = dir.join(&entry.name);
        if denied.contains(&child) {
            continue;
        }
        let on_chain = denied.iter().any(|path| path.starts_with(&child));
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
fn lstat(path: &Path) -> Result<Option<EntryKind>, LandlockError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(kind(meta.file_type()))),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LandlockError::Measure {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn kind(file_type: std::fs::FileType) -> EntryKind {
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
fn list(dir: &Path) -> Result<Option<Vec<Entry>>, LandlockError> {
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
fn open_path(path: &Path) -> Result<OwnedFd, LandlockError> {
    crate::sys::open_path_nofollow(path).map_err(|source| LandlockError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// Paths serialize as strings, or as byte arrays when they are not UTF-8, so every plan can
/// be written down and read back.
mod path_serde {
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes(Vec<u8>),
    }

    pub(super) fn serialize<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
        match path.to_str() {
            Some(text) => serializer.serialize_str(text),
            None => serializer.collect_seq(path.as_os_str().as_bytes()),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<PathBuf, D::Error> {
        Ok(match Repr::deserialize(deserializer)? {
            Repr::Text(text) => PathBuf::from(text),
            Repr::Bytes(bytes) => PathBuf::from(OsString::from_vec(bytes)),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]

    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::plan::{Budgets, Mechanism};

    const HOME: &str = "/home/dev";
    const WORKSPACE: &str = "/home/dev/src/app";
    const RUN_TMP: &str = "/tmp/palisade-run-1";

    fn launch(denied: &[&str]) -> LaunchPlan {
        LaunchPlan {
            mechanism: Mechanism::Landlock,
            network: Network::None,
            workspace: WORKSPACE.into(),
            writable_roots: vec![WORKSPACE.into(), RUN_TMP.into()],
            read_only_root: true,
            denied_read_paths: denied.iter().map(PathBuf::from).collect(),
            protected_paths: vec![],
            syscall_filter: true,
            command: vec!["true".into()],
            env: vec![],
            run_temp_dir: RUN_TMP.into(),
            budgets: Budgets::default(),
        }
    }

    fn entries(list: &[(&str, EntryKind)]) -> Vec<Entry> {
        let mut entries: Vec<Entry> = list
            .iter()
            .map(|(name, kind)| Entry {
                name: name.into(),
                kind: *kind,
            })
            .collect();
        entries.sort();
        entries
    }

    /// What a host with `/home/dev` (dotfiles, a symlink, `src/app`) would measure.
    fn facts() -> ListingFacts {
        use EntryKind::{Dir, File, Other, Symlink};
        let mut facts = ListingFacts::default();
        facts.listings.insert(
            "/".into(),
            entries(&[
                ("bin", Symlink),
                ("dev", Dir),
                ("etc", Dir),
                ("home", Dir),
                ("proc", Dir),
                ("tmp", Dir),
                ("usr", Dir),
            ]),
        );
        facts
            .listings
            .insert("/home".into(), entries(&[("dev", Dir), ("other", Dir)]));
        facts.listings.insert(
            HOME.into(),
            entries(&[
                (".bashrc", File),
                (".config", Dir),
                (".ssh", Dir),
                ("keys", Symlink),
                ("mail.sock", Other),
                ("src", Dir),
            ]),
        );
        for root in [WORKSPACE, RUN_TMP, "/dev/pts"] {
            facts.kinds.insert(root.into(), Dir);
        }
        for device in ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/tty"] {
            facts.kinds.insert(device.into(), Other);
        }
        facts
    }

    fn rule<'a>(plan: &'a RulesetPlan, path: &str) -> Option<&'a PathRule> {
        plan.rules.iter().find(|rule| rule.path == Path::new(path))
    }

    #[test]
    fn nothing_denied_reads_everything() {
        let plan = ruleset_plan(&launch(&[]), &facts()).unwrap();
        insta::assert_json_snapshot!("nothing_denied", plan);
        let root = rule(&plan, "/").unwrap();
        assert_eq!(root.access, READ.into());
        assert_eq!(plan.min_abi, 4);
    }

    #[test]
    fn ssh_denied_grants_siblings_only() {
        let plan = ruleset_plan(&launch(&["/home/dev/.ssh"]), &facts()).unwrap();
        insta::assert_json_snapshot!("ssh_denied", plan);
        // No rule on the denied path, on anything beneath it, or on any of its ancestors.
        for rule in &plan.rules {
            assert!(
                !Path::new("/home/dev/.ssh").starts_with(&rule.path)
                    && !rule.path.starts_with("/home/dev/.ssh"),
                "{rule:?}"
            );
        }
        assert_eq!(
            rule(&plan, "/home/dev/.config").unwrap().access,
            READ.into()
        );
        // Files get no directory-only right; symlinks get no rule at all.
        let file = [FsRight::Execute, FsRight::ReadFile].into();
        assert_eq!(rule(&plan, "/home/dev/.bashrc").unwrap().access, file);
        assert_eq!(rule(&plan, "/home/dev/mail.sock").unwrap().access, file);
        assert!(rule(&plan, "/home/dev/keys").is_none());
        assert!(rule(&plan, "/bin").is_none());
        // The workspace is an (ungranted) sibling subtree `src` plus its own writable rule.
        assert_eq!(rule(&plan, "/home/dev/src").unwrap().access, READ.into());
        assert!(
            rule(&plan, WORKSPACE)
                .unwrap()
                .access
                .contains(&FsRight::WriteFile)
        );
    }

    #[test]
    fn missing_denied_path_is_simply_not_granted() {
        // `.aws` does not exist: the listing of `/home/dev` does not have it, so every entry
        // there is granted and nothing is where it will appear.
        let missing = ruleset_plan(&launch(&["/home/dev/.aws/credentials"]), &facts()).unwrap();
        insta::assert_json_snapshot!("missing_denied", missing);
        assert!(rule(&missing, "/home/dev/.ssh").is_some());
        assert!(rule(&missing, "/home/dev").is_none());
        assert!(rule(&missing, "/home/dev/.aws").is_none());
    }

    #[test]
    fn writable_roots_get_everything_but_devices() {
        let plan = ruleset_plan(&launch(&["/home/dev/.ssh"]), &facts()).unwrap();
        let workspace = rule(&plan, WORKSPACE).unwrap();
        assert_eq!(workspace.access, WRITABLE.into());
        for right in [FsRight::MakeChar, FsRight::MakeBlock, FsRight::IoctlDev] {
            assert!(!workspace.access.contains(&right), "{right:?}");
            assert!(plan.handled_fs.contains(&right), "{right:?}");
        }
        assert_eq!(plan.handled_fs.len(), 16);
        assert!(
            rule(&plan, RUN_TMP)
                .unwrap()
                .reasons
                .contains(&Reason::WritableRoot)
        );
    }

    #[test]
    fn devices_only_if_they_exist() {
        let plan = ruleset_plan(&launch(&[]), &facts()).unwrap();
        let null = rule(&plan, "/dev/null").unwrap();
        assert_eq!(null.access, [FsRight::ReadFile, FsRight::WriteFile].into());
        assert!(!null.dir);
        let urandom = rule(&plan, "/dev/urandom").unwrap();
        assert_eq!(urandom.access, [FsRight::ReadFile].into());
        assert!(
            rule(&plan, "/dev/tty")
                .unwrap()
                .access
                .contains(&FsRight::IoctlDev)
        );
        assert!(rule(&plan, "/dev/pts").unwrap().dir);
        assert!(rule(&plan, "/dev/full").is_none());
        assert!(rule(&plan, "/dev/ptmx").is_none());
    }

    #[test]
    fn device_rules_never_regrant_a_denied_path() {
        let mut facts = facts();
        facts.listings.insert(
            "/dev".into(),
            entries(&[("null", EntryKind::Other), ("pts", EntryKind::Dir)]),
        );
        facts
            .listings
            .insert("/dev/pts".into(), entries(&[("0", EntryKind::Other)]));
        let plan = ruleset_plan(&launch(&["/dev/null", "/dev/pts/0"]), &facts).unwrap();
        assert!(rule(&plan, "/dev/null").is_none());
        assert!(rule(&plan, "/dev/pts").is_none());
        assert!(rule(&plan, "/dev/pts/0").is_none());
        assert!(rule(&plan, "/dev/tty").is_some());
    }

    #[test]
    fn denied_inside_workspace_is_refused() {
        let err = ruleset_plan(&launch(&["/home/dev/src/app/.env"]), &facts()).unwrap_err();
        assert!(
            matches!(&err, LandlockError::DeniedInsideWritable { denied, root }
                if denied == Path::new("/home/dev/src/app/.env") && root == Path::new(WORKSPACE)),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "denied path `/home/dev/src/app/.env` lies inside writable root `/home/dev/src/app`: \
             landlock cannot carve a read hole out of a writable subtree"
        );
        // The workspace itself, and a denied path containing it.
        assert!(matches!(
            ruleset_plan(&launch(&[WORKSPACE]), &facts()),
            Err(LandlockError::DeniedInsideWritable { .. })
        ));
        assert!(matches!(
            ruleset_plan(&launch(&["/home/dev/src"]), &facts()),
            Err(LandlockError::WritableInsideDenied { .. })
        ));
    }

    #[test]
    fn without_a_read_only_root_nothing_can_be_denied() {
        let mut open = launch(&[]);
        open.read_only_root = false;
        let plan = ruleset_plan(&open, &facts()).unwrap();
        assert_eq!(rule(&plan, "/").unwrap().access, WRITABLE.into());
        open.denied_read_paths = vec!["/home/dev/.ssh".into()];
        assert!(matches!(
            ruleset_plan(&open, &facts()),
            Err(LandlockError::DeniedInsideWritable { root, .. }) if root == Path::new("/")
        ));
    }

    #[test]
    fn protected_paths_are_refused() {
        let mut plan = launch(&[]);
        plan.protected_paths = vec!["/home/dev/src/app/AGENTS.md".into()];
        let err = ruleset_plan(&plan, &facts()).unwrap_err();
        assert!(matches!(err, LandlockError::ProtectedPaths(_)), "{err}");
    }

    #[test]
    fn loopback_only_is_refused() {
        let mut plan = launch(&[]);
        plan.network = Network::LoopbackOnly;
        let err = ruleset_plan(&plan, &facts()).unwrap_err();
        assert!(matches!(err, LandlockError::OwnNetwork(_)), "{err}");
    }

    #[test]
    fn network_modes_and_min_abi() {
        let mut plan = launch(&[]);
        let none = ruleset_plan(&plan, &facts()).unwrap();
        assert_eq!(
            none.handled_net,
            [NetRight::BindTcp, NetRight::ConnectTcp].into()
        );
        assert_eq!((none.abi, none.min_abi), (7, 4));
        assert_eq!(
            none.scopes,
            [ScopeRight::AbstractUnixSocket, ScopeRight::Signal].into()
        );
        plan.network = Network::AllowOutbound;
        let outbound = ruleset_plan(&plan, &facts()).unwrap();
        assert!(outbound.handled_net.is_empty());
        assert_eq!(outbound.min_abi, 3);
        assert_eq!(outbound.scopes.len(), 2);
        plan.read_only_root = false;
        assert_eq!(ruleset_plan(&plan, &facts()).unwrap().min_abi, 1);
    }

    #[test]
    fn bad_facts_and_paths_fail_closed() {
        // A symlinked ancestor of a denied path would leave its target granted.
        let mut linked = facts();
        linked
            .listings
            .get_mut(Path::new(HOME))
            .unwrap()
            .push(Entry {
                name: ".aws".into(),
                kind: EntryKind::Symlink,
            });
        assert!(matches!(
            ruleset_plan(&launch(&["/home/dev/.aws/config"]), &linked),
            Err(LandlockError::SymlinkAncestor(path)) if path == Path::new("/home/dev/.aws")
        ));
        // An existing ancestor without a listing.
        assert!(matches!(
            ruleset_plan(&launch(&["/home/dev/.config/gh/hosts.yml"]), &facts()),
            Err(LandlockError::MissingListing(path)) if path == Path::new("/home/dev/.config")
        ));
        // Entry names are single components.
        let mut odd = facts();
        odd.listings
            .get_mut(Path::new("/home"))
            .unwrap()
            .push(Entry {
                name: "../etc".into(),
                kind: EntryKind::Dir,
            });
        assert!(matches!(
            ruleset_plan(&launch(&["/home/dev/.ssh"]), &odd),
            Err(LandlockError::InvalidEntry { .. })
        ));
        for path in ["home/dev/.ssh", "/home/dev/../root", ""] {
            assert!(
                matches!(
                    ruleset_plan(&launch(&[path]), &facts()),
                    Err(LandlockError::NotNormalized(_))
                ),
                "{path}"
            );
        }
        // A missing writable root.
        let mut gone = facts();
        gone.kinds.remove(Path::new(RUN_TMP));
        assert!(matches!(
            ruleset_plan(&launch(&[]), &gone),
            Err(LandlockError::MissingWritableRoot(_))
        ));
    }

    #[test]
    fn nested_and_repeated_denied_paths_merge() {
        let one = ruleset_plan(&launch(&["/home/dev/.ssh"]), &facts()).unwrap();
        let many = ruleset_plan(
            &launch(&[
                "/home/dev/.ssh/id_ed25519",
                "/home/dev/.ssh",
                "/home/dev/./.ssh",
            ]),
            &facts(),
        )
        .unwrap();
        assert_eq!(one, many);
    }

    #[test]
    fn two_denied_paths_in_one_directory() {
        let plan =
            ruleset_plan(&launch(&["/home/dev/.ssh", "/home/dev/.bashrc"]), &facts()).unwrap();
        assert!(rule(&plan, "/home/dev/.bashrc").is_none());
        assert!(rule(&plan, "/home/dev/.ssh").is_none());
        assert!(rule(&plan, "/home/dev/.config").is_some());
        assert!(rule(&plan, "/home/other").is_some());
    }

    #[test]
    fn plans_round_trip_through_json_even_with_non_utf8_paths() {
        let mut plan = ruleset_plan(&launch(&["/home/dev/.ssh"]), &facts()).unwrap();
        plan.rules.push(PathRule {
            path: PathBuf::from(OsString::from_vec(b"/tmp/\xff".to_vec())),
            dir: false,
            access: [FsRight::ReadFile].into(),
            reasons: [Reason::ReadSibling].into(),
        });
        let json = serde_json::to_string(&plan).unwrap();
        assert!(json.contains("[47,116,109,112,47,255]"), "{json}");
        let back: RulesetPlan = serde_json::from_str(&json).unwrap();
        assert_eq!(back, plan);
    }

    /// The same shape measured on a real tree: `root/home/{.ssh/id, .bashrc, docs/, link}`.
    #[test]
    fn measured_home_with_siblings() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let home = root.join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id"), "secret").unwrap();
        std::fs::write(home.join(".bashrc"), "").unwrap();
        std::fs::create_dir_all(home.join("docs")).unwrap();
        std::fs::create_dir_all(home.join("ws")).unwrap();
        symlink(home.join(".ssh"), home.join("link")).unwrap();
        let workspace = home.join("ws");
        let run_tmp = root.join("run");
        std::fs::create_dir(&run_tmp).unwrap();
        let mut launch = launch(&[]);
        launch.workspace = workspace.clone();
        launch.writable_roots = vec![workspace.clone()];
        launch.run_temp_dir = run_tmp.clone();
        launch.denied_read_paths = vec![home.join(".ssh"), home.join(".aws/credentials")];

        let facts = ListingFacts::measure(&launch).unwrap();
        // Listings for every existing ancestor, none for the missing `.aws` nor the denied dir.
        for dir in root.ancestors() {
            assert!(facts.listings.contains_key(dir), "{}", dir.display());
        }
        assert!(facts.listings.contains_key(&home));
        assert!(!facts.listings.contains_key(&home.join(".aws")));
        assert!(!facts.listings.contains_key(&home.join(".ssh")));
        assert_eq!(facts.kinds.get(&workspace), Some(&EntryKind::Dir));
        assert_eq!(
            facts.kinds.get(Path::new("/dev/null")),
            Some(&EntryKind::Other)
        );

        let plan = ruleset_plan(&launch, &facts).unwrap();
        let inside: Vec<(String, Vec<Reason>)> = plan
            .rules
            .iter()
            .filter_map(|rule| {
                let relative = rule.path.strip_prefix(&root).ok()?;
                Some((
                    relative.display().to_string(),
                    rule.reasons.iter().copied().collect(),
                ))
            })
            .collect();
        insta::assert_json_snapshot!("measured_home", inside);
        for rule in &plan.rules {
            assert!(!home.starts_with(&rule.path), "ancestor granted: {rule:?}");
        }
    }
}
