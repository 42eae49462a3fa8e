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
//!   [`Network::AllowOutbound`] handles nothing. [`Network::OwnLoopback`] needs a network
//!   namespace and [`Network::HostLoopback`] cannot be told apart by port: both are refused.
//! - **scopes** (ABI ≥ 6): abstract unix sockets and signals, always: no connecting to the
//!   host's abstract sockets, no signals to processes outside the sandbox.
//! - **observed masks** ([`observed_masks`], [`Reason::ObservedMask`]): each outermost denied
//!   path that exists as a file or directory gets a rule granting what a mask's server can be
//!   asked for, so that the server refuses and records each access instead of Landlock
//!   refusing it unobserved. Init binds the masks over those paths (`crate::fusemask`, in a
//!   mount namespace of the sandbox's own) before [`restrict`], which adds such a rule only
//!   where the path then is a FUSE node on the masks' device: never on the denied path itself.
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
//! # `/proc`
//!
//! The plan's mechanism says which `/proc` the sandbox gets ([`LandlockProc`]). With its own
//! (mounted by init, `crate::init::procfs`), `/proc` is a path like any other. Sharing the
//! host's, every process directory of the host's `/proc` (as [`ListingFacts::measure`] listed
//! it) is a denied path: `/proc` gets no rule, its other entries are granted one by one, and a
//! process that starts later — the command itself, its children — has no rule, so no process's
//! directory is readable ([`ruleset_plan`] says why the sandbox's own cannot be granted).
//!
//! # Refusals (fail closed: an error, no ruleset)
//!
//! - a denied path inside a writable root (or a writable root inside a denied path): the
//!   writable root's rule grants reads on its whole subtree, and Landlock cannot carve a read
//!   hole out of a granted subtree;
//! - any protected path: the engine only selects Landlock when `protectedPathReadOnlyMask` is
//!   not required and then leaves them empty; Landlock cannot stop a missing protected file from
//!   being created inside a writable workspace, so masking some would be pretending;
//! - [`Network::OwnLoopback`] and [`Network::HostLoopback`]; relative or `..` paths; a denied path with a symlinked ancestor
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
//! access, never more) and counted in [`Status::skipped`]; a mask rule whose path is not its
//! mask is skipped too (counted apart: [`Status::observed_masks`] counts those added).
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
//!
//! Layout: this module holds the plan's types, [`ruleset_plan`], [`ListingFacts::measure`] and
//! [`restrict`]; `rights` what each right is to the kernel and which ABI brought it, `listing`
//! the path checks, the sibling grants and the filesystem reads behind the listings. The two
//! raw system calls (the ABI query, `O_PATH` opens) are the crate's `sys` module's.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};

use landlock::{
    CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
};
use serde::{Deserialize, Serialize};

use crate::bwrap::DeniedMask;
use crate::landlock_abi;
use crate::plan::{LandlockProc, LaunchPlan, Mechanism, Network};

mod listing;
mod rights;

use listing::{
    Rules, denied_paths, grant_siblings, list, lstat, normalized, open_path, writable_roots,
};
use rights::{NET_ABI, READ, WRITABLE, fs_bits, keep, net_bits, scope_bits};

/// The Landlock ABI whose rights the plan is computed for (the newest one tested here).
///
/// [`restrict`] applies the plan at the kernel's ABI: rights newer than the kernel's are dropped
/// (and reported in [`Status::dropped`]) as long as the kernel reaches [`RulesetPlan::min_abi`].
pub const TARGET_ABI: u32 = 7;

/// Where the host's procfs is (and the sandbox's own, when it gets one).
const PROC: &str = "/proc";

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
        "network `{0}` cannot be applied by landlock: it has no network namespace of the sandbox's own and its TCP rules cannot tell loopback from other addresses"
    )]
    OwnNetwork(&'static str),
    /// The sandbox's filter refuses `AF_UNIX` sockets whole: it cannot let one host socket
    /// through (the engine never plans one here).
    #[error(
        "landlock cannot let host socket `{}` through: its filter refuses every Unix socket; refusing",
        .0.display()
    )]
    HostSocket(PathBuf),
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
    #[error("the listing of `/proc` names no process: it is not a procfs")]
    NoProcesses,
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
    /// A denied path, for the observed mask init binds over it (`crate::fusemask`): added only
    /// if the path is that mask when the ruleset is applied ([`restrict`]), so the mask's
    /// server, not Landlock, refuses the command and records each access. Without the mask it
    /// is not added and Landlock refuses, unobserved, as it would without this rule.
    ObservedMask,
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
    #[serde(with = "crate::wire::path")]
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
    /// Rules added on observed masks ([`Reason::ObservedMask`]); a mask init did not bind
    /// gets none, and Landlock refuses its path unobserved.
    #[serde(default)]
    pub observed_masks: usize,
    /// The kernel enforces every handled right (always true: otherwise [`restrict`] errs).
    pub enforced: bool,
    pub no_new_privs: bool,
}

/// The ruleset for `plan`, given the listings `facts` measured.
///
/// With a `/proc` of the sandbox's own ([`LandlockProc::Own`], see `crate::init::procfs`),
/// `/proc` is read like any other path: the rule on it is opened after init mounted the
/// sandbox's procfs there. Sharing the host's ([`LandlockProc::HostProcessesDenied`]), every
/// process directory the host listed in `/proc` is a denied path like the plan's, so `/proc`'s
/// other entries are granted one by one and nothing else is: a process that starts later (the
/// command and its children included) has no rule and is unreadable, and so is the command's
/// own directory (`self` and `thread-self` are links into process directories, and links get no
/// rule). Landlock rules follow inodes, and a procfs process directory gets a new inode
/// whenever its dentry is evicted, so granting the sandbox's own processes would be neither
/// expressible for later ones nor reliable for the first.
pub fn ruleset_plan(plan: &LaunchPlan, facts: &ListingFacts) -> Result<RulesetPlan, LandlockError> {
    match plan.mechanism {
        Mechanism::Landlock(LandlockProc::HostProcessesDenied) => {
            build(plan, facts, &process_dirs(facts)?)
        }
        _ => build(plan, facts, &[]),
    }
}

/// Every process directory of the host's `/proc`, as listed.
fn process_dirs(facts: &ListingFacts) -> Result<Vec<PathBuf>, LandlockError> {
    let proc = Path::new(PROC);
    let listing = facts
        .listings
        .get(proc)
        .ok_or_else(|| LandlockError::MissingListing(proc.to_path_buf()))?;
    let processes: Vec<PathBuf> = listing
        .iter()
        .filter(|entry| is_process_dir(entry))
        .map(|entry| proc.join(&entry.name))
        .collect();
    if processes.is_empty() {
        // Every procfs lists at least the process that read it: this is no procfs.
        return Err(LandlockError::NoProcesses);
    }
    Ok(processes)
}

/// A directory entry of `/proc` that is a process: a directory named by a number.
fn is_process_dir(entry: &Entry) -> bool {
    entry.kind == EntryKind::Dir
        && !entry.name.is_empty()
        && entry.name.as_encoded_bytes().iter().all(u8::is_ascii_digit)
}

fn build(
    plan: &LaunchPlan,
    facts: &ListingFacts,
    extra_denied: &[PathBuf],
) -> Result<RulesetPlan, LandlockError> {
    if let Some(path) = plan.protected_paths.first() {
        return Err(LandlockError::ProtectedPaths(path.clone()));
    }
    if let Some(socket) = plan.unix_sockets.first() {
        return Err(LandlockError::HostSocket(socket.path.clone()));
    }
    let handled_net: BTreeSet<NetRight> = match plan.network {
        Network::None => [NetRight::BindTcp, NetRight::ConnectTcp].into(),
        Network::AllowOutbound => BTreeSet::new(),
        Network::OwnLoopback(None) => return Err(LandlockError::OwnNetwork("loopback-only")),
        Network::OwnLoopback(Some(_)) => {
            return Err(LandlockError::OwnNetwork("a network bridge"));
        }
        Network::HostLoopback => return Err(LandlockError::OwnNetwork("the host's loopback")),
    };
    let writable = writable_roots(plan)?;
    let denied = denied_paths(plan, extra_denied)?;
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

    for mask in observed_masks(plan, facts)? {
        rules.grant(&mask.target, mask.dir, &MASKED, Reason::ObservedMask);
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

/// What a rule on an observed mask grants: everything its server can be asked for, so that
/// the server refuses (and records) what Landlock would otherwise refuse unobserved. Nothing
/// can pass: the server refuses every request, and without it every access fails.
const MASKED: [FsRight; 5] = [
    FsRight::Execute,
    FsRight::ReadFile,
    FsRight::ReadDir,
    FsRight::WriteFile,
    FsRight::Truncate,
];

/// The observed masks for `plan`: one per outermost denied path of the plan that exists as a
/// directory or a file (as its parent's listing in `facts` shows it; anything else has no mask
/// and stays refused by Landlock alone, unobserved), in path order. Node `i` of the mask
/// server is mask `i`; init binds it over its target before the ruleset is applied, and the
/// ruleset grants the target only if it then is that node ([`Reason::ObservedMask`]). Each
/// mask names the plan's entries it covers, its own first.
pub fn observed_masks(
    plan: &LaunchPlan,
    facts: &ListingFacts,
) -> Result<Vec<DeniedMask>, LandlockError> {
    let mut masks = Vec::new();
    for target in denied_paths(plan, &[])? {
        let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
            continue;
        };
        let kind = facts
            .listings
            .get(parent)
            .and_then(|entries| entries.iter().find(|entry| entry.name == name))
            .map(|entry| entry.kind);
        let dir = match kind {
            Some(EntryKind::Dir) => true,
            Some(EntryKind::File) => false,
            Some(EntryKind::Symlink | EntryKind::Other) | None => continue,
        };
        let mut denied: Vec<PathBuf> = plan
            .denied_read_paths
            .iter()
            .filter(|path| normalized(path).is_ok_and(|p| p.starts_with(&target)))
            .cloned()
            .collect();
        denied.sort_by_key(|path| normalized(path).ok().as_ref() != Some(&target));
        masks.push(DeniedMask {
            target,
            dir,
            denied,
        });
    }
    Ok(masks)
}

impl ListingFacts {
    /// Measures what [`ruleset_plan`] needs for `plan`: the listing of every existing ancestor
    /// of every denied path (stopping at a missing, non-directory or symlinked one) — and of
    /// `/proc` when the sandbox shares the host's — and the kinds of the writable roots and
    /// device files. A missing path is simply absent.
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
        // `/proc` is listed as the parent of a denied path: the ruleset for a sandbox sharing
        // the host's `/proc` denies its process directories.
        let in_proc = Path::new(PROC).join("0");
        let host_proc = plan.mechanism == Mechanism::Landlock(LandlockProc::HostProcessesDenied);
        let extra = host_proc.then_some(&in_proc);
        for denied in plan.denied_read_paths.iter().chain(extra) {
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
/// `masks_device` is the device of the observed masks init bound ([`observed_masks`]), if it
/// bound any: a [`Reason::ObservedMask`] rule is added only where its path is on that device
/// (a mask node), never on what the mask would hide.
/// The caller is single-threaded (a freshly exec'd helper); allocation is fine.
pub fn restrict(plan: &RulesetPlan, masks_device: Option<u64>) -> Result<Status, LandlockError> {
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
    let (mut rules, mut skipped, mut observed_masks) = (0, 0, 0);
    // Each right is one bit, so the bits of the rights both sets hold are the bits both hold.
    let handled_bits = fs_bits(&handled_fs);
    for rule in &plan.rules {
        let access = fs_bits(&rule.access) & handled_bits;
        if access.is_empty() {
            continue;
        }
        // A sibling or device that vanished or changed type since the listing is simply not
        // granted (less access, never more); a writable root or `/` must be as planned.
        let optional = rule
            .reasons
            .iter()
            .all(|reason| matches!(reason, Reason::ReadSibling | Reason::Device));
        if rule.reasons.contains(&Reason::ObservedMask) {
            if let Some(file) = mask_node(&rule.path, rule.dir, masks_device) {
                created = created.add_rule(PathBeneath::new(file, access))?;
                observed_masks += 1;
            }
            continue;
        }
        let file = match open_as_planned(&rule.path, rule.dir) {
            Ok(file) => file,
            Err(Unplanned::Missing(_) | Unplanned::KindChanged) if optional => {
                skipped += 1;
                continue;
            }
            Err(Unplanned::KindChanged) => {
                return Err(LandlockError::KindChanged(rule.path.clone()));
            }
            Err(Unplanned::Missing(source) | Unplanned::Other(source)) => {
                return Err(LandlockError::Open {
                    path: rule.path.clone(),
                    source,
                });
            }
        };
        created = created.add_rule(PathBeneath::new(file, access))?;
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
        observed_masks,
        enforced: true,
        no_new_privs: true,
    })
}

/// Why a rule's path could not be opened as the plan has it.
enum Unplanned {
    /// Nothing is there (or a directory on the way is gone).
    Missing(std::io::Error),
    /// Something of another kind is there (a symlink included), or on the way.
    KindChanged,
    Other(std::io::Error),
}

/// `path` opened (`O_PATH`, not following a symlink) if it is still what the plan found: a
/// directory when `dir`, else neither a directory nor a symlink. This runs once per rule, and a
/// ruleset beneath a readable `/` has a rule for every entry beside each denied path's
/// ancestors (hundreds in a home): a directory's kind is checked by the open itself
/// (`O_DIRECTORY`), anything else's by one `fstat`.
fn open_as_planned(path: &Path, dir: bool) -> Result<File, Unplanned> {
    let opened = if dir {
        crate::sys::open_dir_path_nofollow(path)
    } else {
        crate::sys::open_path_nofollow(path)
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(source) if source.raw_os_error() == Some(libc::ENOTDIR) => {
            return Err(Unplanned::KindChanged);
        }
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(Unplanned::Missing(source));
        }
        Err(source) => return Err(Unplanned::Other(source)),
    };
    if !dir {
        use std::os::fd::AsFd;
        let format = crate::sys::file_format(fd.as_fd()).map_err(Unplanned::Other)?;
        if format == libc::S_IFDIR || format == libc::S_IFLNK {
            return Err(Unplanned::KindChanged);
        }
    }
    Ok(File::from(fd))
}

/// `path` opened, if it is an observed mask's node: a FUSE node on `masks_device`, of the kind
/// planned. Anything else — the denied path itself, when no mask was bound over it — gets no
/// rule, whatever device init claimed.
fn mask_node(path: &Path, dir: bool, masks_device: Option<u64>) -> Option<File> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let device = masks_device?;
    let file = File::from(open_path(path).ok()?);
    let meta = file.metadata().ok()?;
    let fuse = crate::sys::filesystem_type(file.as_fd()).ok()? == crate::sys::FUSE_SUPER_MAGIC;
    (fuse && meta.dev() == device && meta.is_dir() == dir && !meta.file_type().is_symlink())
        .then_some(file)
}

/// Scopes the calling process, and what it execs, out of the abstract Unix sockets of every
/// other Landlock domain (the host's included) and nothing else: for a sandbox that shares the
/// host's network namespace (bwrap under `allow-outbound`), which does not scope them. Sets
/// `no_new_privs`. `Ok(false)` when the kernel's ABI has no scopes (below 6; the bwrap probe
/// lists that as a limitation); an error if the kernel has them and the scope is not enforced.
pub fn scope_abstract_unix_sockets() -> Result<bool, LandlockError> {
    if kernel_abi()? < rights::SCOPE_ABI {
        return Ok(false);
    }
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(landlock::Scope::AbstractUnixSocket)?
        .create()?
        .no_new_privs(true)
        .restrict_self()?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(LandlockError::NotEnforced(format!("{:?}", status.ruleset)));
    }
    Ok(true)
}

/// The running kernel's Landlock ABI version (`landlock_create_ruleset(NULL, 0, VERSION)`).
pub fn kernel_abi() -> Result<u32, LandlockError> {
    let version = crate::sys::landlock_abi_version().map_err(LandlockError::AbiQuery)?;
    u32::try_from(version)
        .map_err(|_| LandlockError::AbiQuery(std::io::Error::from_raw_os_error(libc::ERANGE)))
}

#[cfg(test)]
mod tests;
