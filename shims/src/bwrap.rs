//! bubblewrap: the argv palisade hands to `bwrap`.
//!
//! Pure functions only: they build argument vectors and never touch the host, so the exact
//! vectors are unit-tested on any OS. [`argv`] turns a [`LaunchPlan`] plus the [`FsFacts`] the
//! host measured into the arguments; the host's `linux-bwrap` probe runs [`trial_argv`] to prove
//! this kernel lets bwrap build the namespaces and mounts the shim relies on.
//!
//! # The sandbox, flag by flag
//!
//! Namespaces and process: `--unshare-user` (an unprivileged user namespace: capabilities only
//! inside it), `--unshare-pid` (the command sees only its own tree; bwrap is its PID 1 and
//! reaper), `--unshare-ipc`, `--unshare-uts`, `--unshare-cgroup`, `--unshare-net` unless the
//! plan allows outbound traffic (`none` and `loopback-only` both get a private network
//! namespace whose loopback bwrap brings up — it is the sandbox's own, not the host's; it also
//! hides the host's abstract Unix sockets), `--disable-userns` (no nested user namespace, so no
//! way back to a full capability set), `--die-with-parent`, `--new-session` (no controlling
//! terminal: no `TIOCSTI` into the caller's tty), `--cap-drop ALL`, `--uid`/`--gid` (the
//! invoking user's own ids), `--seccomp FD` when the plan asks for syscall filtering (bwrap
//! always sets `no_new_privs`). The environment is cleared and set to exactly `plan.env`
//! (bwrap itself adds `PWD`); the working directory is the workspace.
//!
//! Filesystem, in mount order (a later mount covers an earlier one):
//! 1. `/` read-only (`--ro-bind / /`; `--bind` only for a plan without a read-only root).
//!    bwrap remounts every submount read-only too, so `/sys` and the cgroup hierarchies are
//!    read-only; it binds everything `nosuid,nodev`.
//! 2. `--dev /dev` (a private minimal `/dev`), `--proc /proc` (this PID namespace's procfs), and
//!    `--ro-bind /proc/sys /proc/sys`, `--ro-bind-try /proc/sysrq-trigger …`: bwrap 0.8 skips
//!    covering `/proc/sys` because the *directory* is not writable, yet its files are writable
//!    by a uid 0 that maps to the host's root (measured: `core_pattern` was writable inside).
//! 3. private tmpfs on `/tmp`, `/var/tmp`, `/run` (and `/var/run` when it is a real directory),
//!    `/dev/shm`: the host's sockets and state there (docker.sock, session buses) disappear.
//!    With outbound traffic allowed, a `/etc/resolv.conf` that resolves into one of them is
//!    bound back read-only so DNS keeps working.
//! 4. each writable root (workspace, run temp dir, further roots) bound read-write at its real
//!    path, plus *pins*: every existing directory between a writable root and a masked path
//!    there is bound onto itself. A mountpoint cannot be renamed or removed, so the sandbox
//!    cannot move `.loopwright` aside and recreate `.loopwright/policies` (measured: without
//!    the pin, `mv .loopwright x && mkdir -p .loopwright/policies` succeeded and persisted).
//!    Steps 2–4 are interleaved by depth so a shallower bind never covers a deeper mount.
//! 5. protected paths: existing ones `--ro-bind P P`; missing ones inside a writable root get a
//!    read-only stand-in so they cannot be created: a name with an extension (`AGENTS.md`) gets
//!    `--ro-bind /dev/null` (the mount is `nodev`, so opening it for reading or writing fails
//!    with `EACCES`), any other name (`.github`) an empty read-only tmpfs (`--perms 0555`).
//!    When an ancestor is missing too, the stand-in is an empty read-only directory at the
//!    first missing component.
//! 6. denied paths: directories `--perms 0000 --tmpfs P --remount-ro P` (listing and reading
//!    fail with `EACCES`, nothing can be written); files and other nodes `--ro-bind /dev/null P`;
//!    missing ones inside a writable root the same mode-0000 read-only directory at the first
//!    missing component, so nothing can be created there. Denied paths come after protected
//!    ones, so a denial always wins.
//! 7. every host pathname socket still visible (not under a private tmpfs or a mask):
//!    `--ro-bind /dev/null SOCKET` — `connect` then fails with `ECONNREFUSED`, in every network
//!    mode. A socket that vanishes between measuring and launching makes bwrap fail before the
//!    command starts when it was in the read-only root (bwrap cannot create the mountpoint:
//!    fail closed; the host should measure again and retry), and makes bwrap create an empty
//!    file when it was inside a writable root (listed for cleanup).
//!
//! bwrap creates the mountpoint of a missing path on the host (inside a writable root, as an
//! empty directory or an empty mode-0444 file); [`BwrapArgs::created_mountpoints`] lists them
//! for [`crate::fsfacts::cleanup_created`].
//!
//! # Refusals (an error, never a weaker argv)
//!
//! An empty command; relative paths, `..` components or NUL bytes anywhere; a bad environment
//! name; facts that do not cover the plan; a missing writable root; a denied or protected path
//! that contains a writable root; a protected path that goes through a symlink whose own entry
//! lies inside a writable root (the sandbox could replace the link: a mount can only cover its
//! target, never the link); a protected file inside a writable root, or any denied file, with
//! more than one hard link (the other names stay reachable).
//!
//! # Known limits
//!
//! - A missing denied or protected path *outside* writable roots is not mounted: bwrap cannot
//!   create a mountpoint in the read-only root, and the sandbox cannot create the path either.
//! - Hard links to a denied *directory's* files elsewhere are not found (no walk).
//! - Host sockets that `/proc/net/unix` does not list (bound in another network namespace or
//!   with a relative path) or that appear after measuring stay reachable unless they live under
//!   a private tmpfs; with outbound traffic allowed the host's *abstract* sockets are reachable
//!   (only a network namespace hides them).
//! - A missing protected file is visible as a character device while the sandbox runs, and the
//!   host briefly sees the empty mountpoints bwrap created.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::fsfacts::{FsFacts, PathFact, PathKind};
use crate::plan::{EgressProxy, LaunchPlan, Network};

/// The program a trial sandbox runs: present on every Linux distribution palisade targets and
/// visible inside the sandbox because the trial binds `/` read-only.
pub const TRIAL_PROGRAM: &str = "/bin/true";

/// Arguments (without the `bwrap` program itself) for a throwaway trial sandbox.
///
/// The trial asks for every namespace and kind of mount the bwrap shim uses — user, PID,
/// network, IPC, UTS and cgroup namespaces, no nested user namespaces, a read-only root, a
/// fresh `/dev` and `/proc` with `/proc/sys` bound read-only, a mode-0000 tmpfs remounted
/// read-only, a `/dev/null` file mask — plus a cleared environment, a new session, death with
/// the parent and no capabilities, and runs [`TRIAL_PROGRAM`]. If it exits 0, this host can
/// build the sandbox; if the kernel, a security module or an old bwrap (`--disable-userns`
/// needs 0.8) refuses something, bwrap says so on stderr. Only `--seccomp` is not tried (it
/// needs a file descriptor).
///
/// Keep it in step with [`argv`]: a trial that asks for less than the shim would report
/// `linux-bwrap` available on a host where launching fails.
pub fn trial_argv() -> Vec<String> {
    [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--ro-bind-try",
        "/proc/sysrq-trigger",
        "/proc/sysrq-trigger",
        "--perms",
        "0000",
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev/shm",
        "--ro-bind",
        "/dev/null",
        "/dev/palisade-trial",
        "--clearenv",
        "--",
        TRIAL_PROGRAM,
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

/// The arguments for one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BwrapArgs {
    /// Everything after the `bwrap` program itself, ending with `--` and the command.
    pub args: Vec<OsString>,
    /// Paths bwrap will create on the host (inside writable roots) as mountpoints for missing
    /// masked paths, shallowest first, then the host sockets inside writable roots (created
    /// only if one vanishes before bwrap starts); hand them to
    /// [`crate::fsfacts::cleanup_created`] after the run.
    pub created_mountpoints: Vec<PathBuf>,
}

/// Why [`argv`] refused to build an argv.
#[derive(Debug, thiserror::Error)]
pub enum BwrapError {
    #[error("the command is empty")]
    EmptyCommand,
    #[error("path `{}` is not absolute", .0.display())]
    RelativePath(PathBuf),
    #[error("path `{}` contains a `..` component", .0.display())]
    ParentComponent(PathBuf),
    #[error("{what} `{}` contains a NUL byte", value.to_string_lossy())]
    Nul { what: &'static str, value: OsString },
    #[error("environment variable name `{}` is empty or contains `=`", .0.to_string_lossy())]
    EnvName(OsString),
    #[error("no filesystem facts for `{}`: measure the plan before building the argv", .0.display())]
    MissingFact(PathBuf),
    #[error("writable root `{}` does not exist or is not a directory or file", .0.display())]
    BadWritableRoot(PathBuf),
    #[error("denied path `{}` contains writable root `{}`", path.display(), root.display())]
    DeniedContainsWritable { path: PathBuf, root: PathBuf },
    #[error("masked path `{}` contains `{}`, which the sandbox mounts itself", path.display(), inner.display())]
    MaskContainsMount { path: PathBuf, inner: PathBuf },
    #[error(
        "protected path `{}` goes through symlink `{}` inside a writable root; the sandbox could replace the link",
        path.display(),
        link.display()
    )]
    ProtectedSymlink { path: PathBuf, link: PathBuf },
    #[error("`{}` has {links} hard links; the other names would stay reachable", path.display())]
    HardLinks { path: PathBuf, links: u64 },
    #[error(
        "filtered egress binds `{}` outside the sandbox's private directories",
        .0.display()
    )]
    EgressBindNotPrivate(PathBuf),
    #[error("filtered egress names no bridge to run")]
    EgressNoBridge,
}

/// The proxy of a filtered network, checked: every bind lands in a directory the sandbox gets
/// privately (so nothing of the host's is covered, and nothing is created on the host) and a
/// bridge is named. `None` for every other network.
pub(crate) fn egress<'p>(
    plan: &'p LaunchPlan,
    facts: &FsFacts,
) -> Result<Option<&'p EgressProxy>, BwrapError> {
    let Network::Filtered(egress) = &plan.network else {
        return Ok(None);
    };
    for bind in &egress.binds {
        let private = bind.target.is_absolute()
            && facts
                .private_dirs
                .iter()
                .any(|dir| bind.target.starts_with(dir) && bind.target != *dir);
        if !private {
            return Err(BwrapError::EgressBindNotPrivate(bind.target.clone()));
        }
    }
    if egress.bridge_argv.is_empty() {
        return Err(BwrapError::EgressNoBridge);
    }
    Ok(Some(egress))
}

/// One mount of the sandbox's filesystem, in the order bwrap performs them (a later mount
/// covers an earlier one). [`filesystem`] plans them; [`argv`] spells them as bwrap options and
/// [`crate::docker`] as `docker run` mounts, so both backends mask exactly the same paths.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mount {
    /// The host's root at `/`: `--ro-bind / /`, or `--bind / /` when `writable`.
    Root { writable: bool },
    /// A private minimal `/dev`.
    Dev(PathBuf),
    /// This PID namespace's procfs.
    Proc(PathBuf),
    /// The host's procfs entry bound read-only over the sandbox's (`-try` unless `required`).
    ProcCover { path: PathBuf, required: bool },
    /// A private, writable, empty tmpfs (`/tmp`, `/run`, `/dev/shm`, …).
    Tmpfs(PathBuf),
    /// The host's path bound read-only onto itself (an existing protected path, a file bound
    /// back into a private directory).
    ReadOnly(PathBuf),
    /// The host's path bound read-write onto itself (a writable root or a pin).
    Writable(PathBuf),
    /// A denied directory: an empty, mode-0000, read-only tmpfs.
    DenyDir(PathBuf),
    /// A denied file, a host socket or a missing protected file: an unreadable, unwritable file
    /// (`/dev/null` on a `nodev` mount under bwrap).
    Null(PathBuf),
    /// A missing protected directory: an empty, mode-0555, read-only tmpfs.
    EmptyDir(PathBuf),
}

/// The sandbox's filesystem for one plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filesystem {
    /// Every mount, in order.
    pub mounts: Vec<Mount>,
    /// The workspace's real path (the command's working directory).
    pub workspace: PathBuf,
    /// Host paths where the mechanism creates a mountpoint (see [`BwrapArgs`]).
    pub created_mountpoints: Vec<PathBuf>,
}

/// Plans the sandbox's mounts for `plan`, given the `facts` measured for it (steps 1–7 of the
/// module docs), or refuses (see "Refusals"). `read_only_binds` are host paths (real, absolute)
/// bound read-only onto themselves with the base mounts — nothing for bwrap, whose root is the
/// host's; the host paths a Docker runtime profile makes visible over the image — so that
/// masks and socket masks are planned under them like anywhere else the host shows.
pub fn filesystem(
    plan: &LaunchPlan,
    facts: &FsFacts,
    read_only_binds: &[PathBuf],
) -> Result<Filesystem, BwrapError> {
    validate(plan)?;
    let workspace = writable_root(facts, &plan.workspace)?;
    let mut roots = BTreeSet::from([workspace.clone()]);
    for root in plan.writable_roots.iter().chain([&plan.run_temp_dir]) {
        roots.insert(writable_root(facts, root)?);
    }

    // The root, then everything the sandbox mounts itself, ordered by depth.
    let mut mounts = vec![Mount::Root {
        writable: !plan.read_only_root,
    }];
    let mut base = Base::new(plan.read_only_root);
    base.add(Base::DEV, BaseOp::Dev);
    base.add(Base::PROC, BaseOp::Proc);
    base.add("/proc/sys", BaseOp::ProcCover { required: true });
    base.add("/proc/sysrq-trigger", BaseOp::ProcCover { required: false });
    base.add("/dev/shm", BaseOp::Tmpfs);
    for dir in &facts.private_dirs {
        base.add(dir, BaseOp::Tmpfs);
    }
    if plan.network == Network::AllowOutbound
        && let Some(resolv) = &facts.resolv_conf
        && base.layer(resolv) == Layer::Private
    {
        base.add(resolv, BaseOp::ReadOnly);
    }
    for bind in read_only_binds {
        base.add(bind, BaseOp::ReadOnly);
    }
    for root in &roots {
        base.add(root, BaseOp::Writable);
    }

    let planned = plan_masks(plan, facts, &base, &roots)?;
    for pin in &planned.pins {
        base.add(pin, BaseOp::Writable);
    }
    base.emit(&mut mounts);
    let mut layers = Layers {
        base: &base,
        masks: Vec::new(),
    };
    for mask in &planned.masks {
        mounts.push(mask.mount());
        layers.masks.push(mask.clone());
    }

    // Host sockets still visible after all of the above.
    let mut created = planned.created;
    for socket in &facts.host_sockets {
        match layers.layer(socket) {
            Layer::HostRo => mounts.push(Mount::Null(socket.clone())),
            Layer::HostRw(_) => {
                mounts.push(Mount::Null(socket.clone()));
                // Should the socket vanish before bwrap starts, bwrap creates an empty file
                // there; cleanup removes it (and never a socket, which is not a regular file).
                created.push(socket.clone());
            }
            Layer::Private | Layer::Masked => {}
        }
    }
    Ok(Filesystem {
        mounts,
        workspace,
        created_mountpoints: created,
    })
}

/// Builds the bwrap arguments for `plan`, given the `facts` measured for it and the file
/// descriptor of a seccomp program (classic BPF) the launcher keeps open for bwrap.
pub fn argv(
    plan: &LaunchPlan,
    facts: &FsFacts,
    seccomp_fd: Option<i32>,
) -> Result<BwrapArgs, BwrapError> {
    let filesystem = filesystem(plan, facts, &[])?;

    let mut args = Args::default();
    // Namespaces and process state; see the module docs for why each one is there.
    args.flag("--unshare-user");
    args.flag("--unshare-pid");
    args.flag("--unshare-ipc");
    args.flag("--unshare-uts");
    args.flag("--unshare-cgroup");
    if plan.network != Network::AllowOutbound {
        args.flag("--unshare-net");
    }
    args.flag("--disable-userns");
    args.flag("--die-with-parent");
    args.flag("--new-session");
    args.op("--cap-drop", ["ALL"]);
    args.op("--uid", [facts.uid.to_string()]);
    args.op("--gid", [facts.gid.to_string()]);

    for mount in &filesystem.mounts {
        emit(mount, &mut args);
    }

    // Filtered egress: the proxy's socket and the bridge binary, read-only on a private tmpfs.
    // A read-only bind still accepts `connect` (the mount flag does not apply to sockets).
    let egress = egress(plan, facts)?;
    if let Some(egress) = egress {
        let mut made: Vec<&Path> = Vec::new();
        for bind in &egress.binds {
            if let Some(parent) = bind.target.parent()
                && !made.contains(&parent)
            {
                args.op("--dir", [parent]);
                made.push(parent);
            }
            args.op("--ro-bind", [&bind.source, &bind.target]);
        }
    }

    args.op("--chdir", [&filesystem.workspace]);
    args.flag("--clearenv");
    for (name, value) in &plan.env {
        args.op("--setenv", [name.as_os_str(), value.as_os_str()]);
    }
    if let Some(fd) = seccomp_fd {
        args.op("--seccomp", [fd.to_string()]);
    }
    args.flag("--");
    if let Some(egress) = egress {
        // The bridge listens on the sandbox's loopback before the command starts, detaches,
        // and execs the command in its place (same pid, status and signals as without it).
        args.0.extend(egress.bridge_argv.iter().cloned());
    }
    args.0.extend(plan.command.iter().cloned());

    Ok(BwrapArgs {
        args: args.0,
        created_mountpoints: filesystem.created_mountpoints,
    })
}

/// One mount as bwrap options.
fn emit(mount: &Mount, args: &mut Args) {
    let root = Path::new("/");
    match mount {
        Mount::Root { writable: false } => args.op("--ro-bind", [root, root]),
        Mount::Root { writable: true } => args.op("--bind", [root, root]),
        Mount::Dev(path) => args.op("--dev", [path]),
        Mount::Proc(path) => args.op("--proc", [path]),
        Mount::ProcCover {
            path,
            required: true,
        } => args.op("--ro-bind", [path, path]),
        Mount::ProcCover {
            path,
            required: false,
        } => args.op("--ro-bind-try", [path, path]),
        Mount::Tmpfs(path) => args.op("--tmpfs", [path]),
        Mount::ReadOnly(path) => args.op("--ro-bind", [path, path]),
        Mount::Writable(path) => args.op("--bind", [path, path]),
        Mount::DenyDir(path) => {
            args.op("--perms", ["0000"]);
            args.op("--tmpfs", [path]);
            args.op("--remount-ro", [path]);
        }
        Mount::Null(path) => args.op("--ro-bind", [Path::new("/dev/null"), path]),
        Mount::EmptyDir(path) => {
            args.op("--perms", ["0555"]);
            args.op("--tmpfs", [path]);
            args.op("--remount-ro", [path]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation

fn validate(plan: &LaunchPlan) -> Result<(), BwrapError> {
    if plan.command.is_empty() {
        return Err(BwrapError::EmptyCommand);
    }
    let paths = [&plan.workspace, &plan.run_temp_dir]
        .into_iter()
        .chain(&plan.writable_roots)
        .chain(&plan.denied_read_paths)
        .chain(&plan.protected_paths);
    for path in paths {
        no_nul("path", path.as_os_str())?;
        if !path.is_absolute() {
            return Err(BwrapError::RelativePath(path.clone()));
        }
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(BwrapError::ParentComponent(path.clone()));
        }
    }
    for arg in &plan.command {
        no_nul("command argument", arg)?;
    }
    for (name, value) in &plan.env {
        no_nul("environment variable", name)?;
        no_nul("environment value", value)?;
        if name.is_empty() || name.as_bytes().contains(&b'=') {
            return Err(BwrapError::EnvName(name.clone()));
        }
    }
    Ok(())
}

fn no_nul(what: &'static str, value: &OsStr) -> Result<(), BwrapError> {
    if value.as_bytes().contains(&0) {
        return Err(BwrapError::Nul {
            what,
            value: value.to_os_string(),
        });
    }
    Ok(())
}

fn fact<'a>(facts: &'a FsFacts, path: &Path) -> Result<&'a PathFact, BwrapError> {
    facts
        .paths
        .get(path)
        .ok_or_else(|| BwrapError::MissingFact(path.to_path_buf()))
}

fn writable_root(facts: &FsFacts, path: &Path) -> Result<PathBuf, BwrapError> {
    let fact = fact(facts, path)?;
    match fact.kind {
        PathKind::Dir | PathKind::File { .. } => Ok(fact.real.clone()),
        PathKind::Other | PathKind::Missing { .. } | PathKind::Unsearchable { .. } => {
            Err(BwrapError::BadWritableRoot(path.to_path_buf()))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Layers: what the sandbox sees at a path, given the mounts so far.

/// Whose content a path shows inside the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Layer {
    /// The host's, read-only.
    HostRo,
    /// The host's, writable through the writable mount at this path.
    HostRw(PathBuf),
    /// The sandbox's own (tmpfs, `/dev`, `/proc`, a read-only stand-in): nothing persists.
    Private,
    /// A denial mask.
    Masked,
}

/// One mount of the base sequence (steps 2–4 in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum BaseOp {
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
    fn layer(self, path: &Path) -> Layer {
        match self {
            Self::Dev | Self::Proc | Self::ProcCover { .. } | Self::Tmpfs => Layer::Private,
            Self::ReadOnly => Layer::HostRo,
            Self::Writable => Layer::HostRw(path.to_path_buf()),
        }
    }
}

/// The root plus the base mounts, kept in emission order: by depth, then by path, then by kind
/// (a writable root at a private directory's own path must come after its tmpfs).
struct Base {
    read_only_root: bool,
    mounts: BTreeSet<(usize, PathBuf, BaseOp)>,
}

impl Base {
    const DEV: &'static str = "/dev";
    const PROC: &'static str = "/proc";

    fn new(read_only_root: bool) -> Self {
        Self {
            read_only_root,
            mounts: BTreeSet::new(),
        }
    }

    fn add(&mut self, path: impl AsRef<Path>, op: BaseOp) {
        let path = path.as_ref().to_path_buf();
        self.mounts.insert((depth(&path), path, op));
    }

    /// A base mount at or beneath `path`, which a mask at `path` would cover.
    fn contained_in(&self, path: &Path) -> Option<&Path> {
        self.mounts
            .iter()
            .map(|(_, mounted, _)| mounted.as_path())
            .find(|mounted| mounted.starts_with(path))
    }

    fn layer(&self, path: &Path) -> Layer {
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

    fn emit(&self, mounts: &mut Vec<Mount>) {
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
struct Layers<'a> {
    base: &'a Base,
    masks: Vec<Mask>,
}

impl Layers<'_> {
    fn layer(&self, path: &Path) -> Layer {
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
enum Mask {
    /// Denied directory: mode 0000, empty, read-only.
    DenyDir(PathBuf),
    /// Denied file, socket or missing protected file: `/dev/null` on a `nodev` mount.
    Null(PathBuf),
    /// Missing protected directory: empty and read-only.
    EmptyDir(PathBuf),
    /// Existing protected path: the host's, read-only.
    ReadOnly(PathBuf),
}

impl Mask {
    fn target(&self) -> &Path {
        match self {
            Self::DenyDir(path)
            | Self::Null(path)
            | Self::EmptyDir(path)
            | Self::ReadOnly(path) => path,
        }
    }

    fn covers(&self, path: &Path) -> bool {
        match self {
            Self::Null(target) => path == target,
            Self::DenyDir(target) | Self::EmptyDir(target) | Self::ReadOnly(target) => {
                path.starts_with(target)
            }
        }
    }

    fn layer(&self) -> Layer {
        match self {
            Self::DenyDir(_) | Self::Null(_) => Layer::Masked,
            Self::EmptyDir(_) => Layer::Private,
            Self::ReadOnly(_) => Layer::HostRo,
        }
    }

    fn mount(&self) -> Mount {
        match self {
            Self::DenyDir(path) => Mount::DenyDir(path.clone()),
            Self::Null(path) => Mount::Null(path.clone()),
            Self::EmptyDir(path) => Mount::EmptyDir(path.clone()),
            Self::ReadOnly(path) => Mount::ReadOnly(path.clone()),
        }
    }
}

/// What a denied or protected path needs, before looking at where it lies.
#[derive(Clone, Debug)]
enum Need {
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
    /// Nothing to mount (a protected path whose stand-in would add nothing).
    Nothing,
}

impl Need {
    fn target(&self) -> Option<&Path> {
        match self {
            Self::Mask { mask, .. } => Some(mask.target()),
            Self::Pin(path) => Some(path),
            Self::Nothing => None,
        }
    }
}

struct Planned {
    masks: Vec<Mask>,
    pins: BTreeSet<PathBuf>,
    created: Vec<PathBuf>,
}

fn plan_masks(
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
        let need = protected_need(fact);
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
                    if created {
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

fn denied_need(fact: &PathFact) -> Need {
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

fn protected_need(fact: &PathFact) -> Need {
    match &fact.kind {
        PathKind::Dir | PathKind::File { .. } | PathKind::Other => {
            existing(Mask::ReadOnly(fact.real.clone()))
        }
        PathKind::Missing {
            first_missing,
            parent_is_dir: true,
        } => {
            let mask = if *first_missing == fact.real && looks_like_file(first_missing) {
                Mask::Null(first_missing.clone())
            } else {
                Mask::EmptyDir(first_missing.clone())
            };
            Need::Mask {
                mask,
                created: true,
                writable_only: true,
            }
        }
        PathKind::Missing {
            first_missing,
            parent_is_dir: false,
        } => blocker(first_missing),
        PathKind::Unsearchable { dir } => Need::Mask {
            mask: Mask::ReadOnly(dir.clone()),
            created: false,
            writable_only: true,
        },
    }
}

fn existing(mask: Mask) -> Need {
    Need::Mask {
        mask,
        created: false,
        writable_only: false,
    }
}

/// Two protected paths with one target (`.loopwright/a` and `.loopwright/b` under a missing
/// `.loopwright`): a directory stand-in serves both.
fn merge(earlier: Need, later: Need) -> Need {
    match (earlier, later) {
        (
            Need::Mask {
                mask: Mask::EmptyDir(path),
                created,
                writable_only,
            },
            _,
        )
        | (
            _,
            Need::Mask {
                mask: Mask::EmptyDir(path),
                created,
                writable_only,
            },
        ) => Need::Mask {
            mask: Mask::EmptyDir(path),
            created,
            writable_only,
        },
        (earlier, _) => earlier,
    }
}

fn blocker(first_missing: &Path) -> Need {
    match first_missing.parent() {
        Some(parent) => Need::Pin(parent.to_path_buf()),
        None => Need::Nothing,
    }
}

/// Whether a missing protected path should be stood in for by a file: its name has an
/// extension (`AGENTS.md`), unlike a dot-directory (`.github`) or a plain name (`policies`).
fn looks_like_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.as_bytes().get(1..))
        .is_some_and(|rest| rest.contains(&b'.'))
}

/// Pins every directory strictly between the writable mount `root` and `target`.
fn pin_ancestors(root: &Path, target: &Path, pins: &mut BTreeSet<PathBuf>) {
    for ancestor in target.ancestors().skip(1) {
        if ancestor == root || !ancestor.starts_with(root) {
            break;
        }
        pins.insert(ancestor.to_path_buf());
    }
}

fn depth(path: &Path) -> usize {
    path.components().count()
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn flag(&mut self, flag: &str) {
        self.0.push(flag.into());
    }

    fn op<I, S>(&mut self, flag: &str, values: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.0.push(flag.into());
        self.0.extend(
            values
                .into_iter()
                .map(|value| value.as_ref().to_os_string()),
        );
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

    use super::*;
    use crate::plan::{Budgets, Mechanism};

    const WS: &str = "/home/u/ws";
    const RUN: &str = "/home/u/.cache/palisade/run-1";

    fn base_plan(network: Network) -> LaunchPlan {
        LaunchPlan {
            mechanism: Mechanism::Bwrap,
            network,
            workspace: WS.into(),
            writable_roots: vec![WS.into(), RUN.into()],
            read_only_root: true,
            denied_read_paths: Vec::new(),
            protected_paths: Vec::new(),
            syscall_filter: true,
            command: vec!["make".into(), "test".into()],
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("TMPDIR".into(), RUN.into()),
            ],
            run_temp_dir: RUN.into(),
            budgets: Budgets::default(),
        }
    }

    fn fact(kind: PathKind, real: &str) -> PathFact {
        PathFact {
            kind,
            real: real.into(),
            symlinks: Vec::new(),
        }
    }

    fn dir(real: &str) -> PathFact {
        fact(PathKind::Dir, real)
    }

    fn file(real: &str) -> PathFact {
        fact(PathKind::File { hard_links: 1 }, real)
    }

    fn missing(real: &str, first_missing: &str) -> PathFact {
        fact(
            PathKind::Missing {
                first_missing: first_missing.into(),
                parent_is_dir: true,
            },
            real,
        )
    }

    fn base_facts() -> FsFacts {
        FsFacts {
            uid: 1000,
            gid: 1000,
            paths: BTreeMap::from([(WS.into(), dir(WS)), (RUN.into(), dir(RUN))]),
            private_dirs: vec!["/run".into(), "/tmp".into(), "/var/tmp".into()],
            resolv_conf: Some("/etc/resolv.conf".into()),
            host_sockets: Vec::new(),
            abstract_sockets: Vec::new(),
            unlocated_sockets: Vec::new(),
        }
    }

    /// Adds a denied (or protected) path and its fact.
    fn deny(plan: &mut LaunchPlan, facts: &mut FsFacts, path: &str, fact: PathFact) {
        plan.denied_read_paths.push(path.into());
        facts.paths.insert(path.into(), fact);
    }

    fn protect(plan: &mut LaunchPlan, facts: &mut FsFacts, path: &str, fact: PathFact) {
        plan.protected_paths.push(path.into());
        facts.paths.insert(path.into(), fact);
    }

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    fn build(plan: &LaunchPlan, facts: &FsFacts) -> (Vec<String>, Vec<PathBuf>) {
        let built = argv(plan, facts, Some(3)).unwrap();
        (strings(&built.args), built.created_mountpoints)
    }

    fn head(network: Network) -> Vec<&'static str> {
        let mut head = vec![
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup",
        ];
        if network != Network::AllowOutbound {
            head.push("--unshare-net");
        }
        head.extend([
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--ro-bind",
            "/",
            "/",
        ]);
        head
    }

    /// The base mounts of [`base_facts`], up to and including the writable roots.
    const BASE: &[&str] = &[
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/dev/shm",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--ro-bind-try",
        "/proc/sysrq-trigger",
        "/proc/sysrq-trigger",
        "--tmpfs",
        "/var/tmp",
    ];

    const ROOTS: &[&str] = &["--bind", WS, WS, "--bind", RUN, RUN];

    const TAIL: &[&str] = &[
        "--chdir",
        WS,
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "TMPDIR",
        RUN,
        "--seccomp",
        "3",
        "--",
        "make",
        "test",
    ];

    fn expected(network: Network, parts: &[&[&str]]) -> Vec<String> {
        let mut all: Vec<String> = head(network).into_iter().map(String::from).collect();
        for part in parts {
            all.extend(part.iter().map(|s| (*s).to_owned()));
        }
        all
    }

    const EGRESS_SOCKET: &str = "/run/palisade-egress/proxy.sock";
    const EGRESS_BRIDGE: &str = "/run/palisade-egress/palisade";

    fn egress(socket_target: &str) -> crate::plan::EgressProxy {
        crate::plan::EgressProxy {
            binds: vec![
                crate::plan::ReadOnlyBind {
                    source: "/run/user/1000/palisade-1000/proxy-1/proxy.sock".into(),
                    target: socket_target.into(),
                },
                crate::plan::ReadOnlyBind {
                    source: "/usr/local/bin/palisade".into(),
                    target: EGRESS_BRIDGE.into(),
                },
            ],
            bridge_argv: [EGRESS_BRIDGE, "bridge", "--socket", socket_target, "--"]
                .map(OsString::from)
                .to_vec(),
        }
    }

    #[test]
    fn filtered_network_binds_socket_and_bridge_and_wraps_the_command() {
        let network = Network::Filtered(egress(EGRESS_SOCKET));
        let plan = base_plan(network.clone());
        let (args, _) = build(&plan, &base_facts());
        #[rustfmt::skip]
        let binds: &[&str] = &[
            "--dir", "/run/palisade-egress",
            "--ro-bind", "/run/user/1000/palisade-1000/proxy-1/proxy.sock", EGRESS_SOCKET,
            "--ro-bind", "/usr/local/bin/palisade", EGRESS_BRIDGE,
        ];
        let mut tail: Vec<&str> = TAIL.to_vec();
        let command_at = tail.len() - 2;
        tail.splice(
            command_at..command_at,
            [EGRESS_BRIDGE, "bridge", "--socket", EGRESS_SOCKET, "--"],
        );
        assert_eq!(args, expected(network, &[BASE, ROOTS, binds, &tail]));
        // Its own network namespace, as every network but allow-outbound.
        assert!(args.iter().any(|a| a == "--unshare-net"));
    }

    #[test]
    fn filtered_network_binds_only_into_private_directories() {
        // A target outside every private directory would cover (or create) a host path.
        for target in ["/etc/proxy.sock", "/run", "relative.sock"] {
            let plan = base_plan(Network::Filtered(egress(target)));
            assert!(matches!(
                argv(&plan, &base_facts(), None),
                Err(BwrapError::EgressBindNotPrivate(_))
            ));
        }
        let plan = base_plan(Network::Filtered(egress(EGRESS_SOCKET)));
        let mut facts = base_facts();
        facts.private_dirs.retain(|d| d != Path::new("/run"));
        assert!(matches!(
            argv(&plan, &facts, None),
            Err(BwrapError::EgressBindNotPrivate(_))
        ));
        let mut empty = egress(EGRESS_SOCKET);
        empty.bridge_argv.clear();
        assert!(matches!(
            argv(&base_plan(Network::Filtered(empty)), &base_facts(), None),
            Err(BwrapError::EgressNoBridge)
        ));
    }

    #[test]
    fn typical_plan_exact_argv() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        protect(
            &mut plan,
            &mut facts,
            "/home/u/ws/.github",
            dir("/home/u/ws/.github"),
        );
        protect(
            &mut plan,
            &mut facts,
            "/home/u/ws/AGENTS.md",
            file("/home/u/ws/AGENTS.md"),
        );
        protect(
            &mut plan,
            &mut facts,
            "/home/u/ws/CLAUDE.md",
            missing("/home/u/ws/CLAUDE.md", "/home/u/ws/CLAUDE.md"),
        );
        protect(
            &mut plan,
            &mut facts,
            "/home/u/ws/.loopwright/policies",
            missing("/home/u/ws/.loopwright/policies", "/home/u/ws/.loopwright"),
        );
        deny(&mut plan, &mut facts, "/home/u/.ssh", dir("/home/u/.ssh"));
        deny(
            &mut plan,
            &mut facts,
            "/home/u/.aws",
            missing("/home/u/.aws", "/home/u/.aws"),
        );
        deny(
            &mut plan,
            &mut facts,
            "/home/u/ws/.env",
            file("/home/u/ws/.env"),
        );
        facts.host_sockets = vec![
            "/home/u/ws/.dev.sock".into(),
            "/run/docker.sock".into(),
            "/var/lib/app/app.sock".into(),
        ];

        let (args, created) = build(&plan, &facts);
        #[rustfmt::skip]
        let masks: &[&str] = &[
            // protected, shallowest first
            "--ro-bind", "/home/u/ws/.github", "/home/u/ws/.github",
            "--perms", "0555", "--tmpfs", "/home/u/ws/.loopwright",
            "--remount-ro", "/home/u/ws/.loopwright",
            "--ro-bind", "/home/u/ws/AGENTS.md", "/home/u/ws/AGENTS.md",
            "--ro-bind", "/dev/null", "/home/u/ws/CLAUDE.md",
            // denied: ~/.aws is missing outside the writable roots, so not mounted
            "--perms", "0000", "--tmpfs", "/home/u/.ssh", "--remount-ro", "/home/u/.ssh",
            "--ro-bind", "/dev/null", "/home/u/ws/.env",
            // host sockets outside the private tmpfs mounts
            "--ro-bind", "/dev/null", "/home/u/ws/.dev.sock",
            "--ro-bind", "/dev/null", "/var/lib/app/app.sock",
        ];
        assert_eq!(args, expected(Network::None, &[BASE, ROOTS, masks, TAIL]));
        assert_eq!(
            created,
            vec![
                PathBuf::from("/home/u/ws/.loopwright"),
                PathBuf::from("/home/u/ws/CLAUDE.md"),
                // only created if the socket vanishes before bwrap starts
                PathBuf::from("/home/u/ws/.dev.sock"),
            ]
        );
    }

    #[test]
    fn loopback_only_is_a_private_network_namespace_like_none() {
        let plan = base_plan(Network::LoopbackOnly);
        let (args, created) = build(&plan, &base_facts());
        assert_eq!(args, expected(Network::LoopbackOnly, &[BASE, ROOTS, TAIL]));
        assert!(args.contains(&"--unshare-net".to_owned()));
        assert!(created.is_empty());
        let (none, _) = build(&base_plan(Network::None), &base_facts());
        assert_eq!(args, none);
    }

    #[test]
    fn allow_outbound_shares_the_network_and_keeps_dns() {
        let plan = base_plan(Network::AllowOutbound);
        let (args, _) = build(&plan, &base_facts());
        assert_eq!(args, expected(Network::AllowOutbound, &[BASE, ROOTS, TAIL]));
        assert!(!args.contains(&"--unshare-net".to_owned()));

        // systemd-resolved: /etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf
        let mut facts = base_facts();
        facts.resolv_conf = Some("/run/systemd/resolve/stub-resolv.conf".into());
        let (args, _) = build(&plan, &facts);
        // Depth 5: between the workspace (4) and the run temp dir (6).
        #[rustfmt::skip]
        let roots: &[&str] = &[
            "--bind", WS, WS,
            "--ro-bind", "/run/systemd/resolve/stub-resolv.conf",
            "/run/systemd/resolve/stub-resolv.conf",
            "--bind", RUN, RUN,
        ];
        assert_eq!(args, expected(Network::AllowOutbound, &[BASE, roots, TAIL]));
        // ... but not without a network.
        let (args, _) = build(&base_plan(Network::None), &facts);
        assert_eq!(args, expected(Network::None, &[BASE, ROOTS, TAIL]));
    }

    #[test]
    fn host_sockets_are_masked_in_every_network_mode() {
        for network in [Network::None, Network::LoopbackOnly, Network::AllowOutbound] {
            let mut facts = base_facts();
            facts.host_sockets = vec!["/srv/dock.sock".into()];
            let (args, _) = build(&base_plan(network.clone()), &facts);
            let mask: &[&str] = &["--ro-bind", "/dev/null", "/srv/dock.sock"];
            assert_eq!(args, expected(network, &[BASE, ROOTS, mask, TAIL]));
        }
    }

    #[test]
    fn sockets_hidden_by_private_dirs_or_denials_are_not_masked_again() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        deny(&mut plan, &mut facts, "/srv/secret", dir("/srv/secret"));
        deny(
            &mut plan,
            &mut facts,
            "/srv/one.sock",
            fact(PathKind::Other, "/srv/one.sock"),
        );
        facts.host_sockets = vec![
            "/run/user/1000/bus".into(),
            "/tmp/.X11-unix/X0".into(),
            "/dev/shm/s".into(),
            "/srv/secret/agent.sock".into(),
            "/srv/one.sock".into(),
            "/home/u/.cache/palisade/run-1/s".into(),
        ];
        let (args, _) = build(&plan, &facts);
        #[rustfmt::skip]
        let masks: &[&str] = &[
            "--ro-bind", "/dev/null", "/srv/one.sock",
            "--perms", "0000", "--tmpfs", "/srv/secret", "--remount-ro", "/srv/secret",
            "--ro-bind", "/dev/null", "/home/u/.cache/palisade/run-1/s",
        ];
        assert_eq!(args, expected(Network::None, &[BASE, ROOTS, masks, TAIL]));
    }

    #[test]
    fn a_writable_root_under_a_private_dir_reexposes_its_sockets() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        plan.writable_roots.push("/tmp/extra".into());
        facts.paths.insert("/tmp/extra".into(), dir("/tmp/extra"));
        facts.host_sockets = vec!["/tmp/extra/s".into(), "/tmp/other".into()];
        let (args, _) = build(&plan, &facts);
        // Depth order: `/tmp/extra` comes right after the `/tmp` tmpfs it sits in.
        let mut base = BASE.to_vec();
        base.splice(
            base.len() - 2..,
            ["--bind", "/tmp/extra", "/tmp/extra", "--tmpfs", "/var/tmp"],
        );
        let mask: &[&str] = &["--ro-bind", "/dev/null", "/tmp/extra/s"];
        assert_eq!(args, expected(Network::None, &[&base, ROOTS, mask, TAIL]));
    }

    #[test]
    fn denied_paths_dir_file_missing_inside_and_outside() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        deny(&mut plan, &mut facts, "/etc/shadow", file("/etc/shadow"));
        deny(
            &mut plan,
            &mut facts,
            "/home/u/ws/secrets",
            dir("/home/u/ws/secrets"),
        );
        deny(
            &mut plan,
            &mut facts,
            "/home/u/ws/.env",
            missing("/home/u/ws/.env", "/home/u/ws/.env"),
        );
        deny(
            &mut plan,
            &mut facts,
            "/home/u/ws/a/b/key",
            missing("/home/u/ws/a/b/key", "/home/u/ws/a/b"),
        );
        deny(
            &mut plan,
            &mut facts,
            "/opt/nothing",
            missing("/opt/nothing", "/opt/nothing"),
        );
        let (args, created) = build(&plan, &facts);
        #[rustfmt::skip]
        let roots: &[&str] = &[
            "--bind", WS, WS,
            // `a` exists between the workspace and the missing `a/b`: pinned, so it
            // cannot be moved aside to recreate `a/b/key` elsewhere.
            "--bind", "/home/u/ws/a", "/home/u/ws/a",
            "--bind", RUN, RUN,
        ];
        #[rustfmt::skip]
        let masks: &[&str] = &[
            "--ro-bind", "/dev/null", "/etc/shadow",
            "--perms", "0000", "--tmpfs", "/home/u/ws/.env", "--remount-ro", "/home/u/ws/.env",
            "--perms", "0000", "--tmpfs", "/home/u/ws/secrets",
            "--remount-ro", "/home/u/ws/secrets",
            "--perms", "0000", "--tmpfs", "/home/u/ws/a/b", "--remount-ro", "/home/u/ws/a/b",
        ];
        assert_eq!(args, expected(Network::None, &[BASE, roots, masks, TAIL]));
        assert_eq!(
            created,
            vec![
                PathBuf::from("/home/u/ws/.env"),
                PathBuf::from("/home/u/ws/a/b"),
            ]
        );
    }

    #[test]
    fn protected_paths_existing_missing_and_pinned() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        protect(
            &mut plan,
            &mut facts,
            "/home/u/ws/.loopwright/policies",
            missing(
                "/home/u/ws/.loopwright/policies",
                "/home/u/ws/.loopwright/policies",
            ),
        );
        protect(
            &mut plan,
            &mut facts,
            "/home/u/ws/docs/AGENTS.md",
            file("/home/u/ws/docs/AGENTS.md"),
        );
        protect(
            &mut plan,
            &mut facts,
            "/home/u/ws/.github",
            missing("/home/u/ws/.github", "/home/u/ws/.github"),
        );
        // Outside the writable roots everything is read-only already.
        protect(&mut plan, &mut facts, "/etc/hosts", file("/etc/hosts"));
        protect(
            &mut plan,
            &mut facts,
            "/opt/x.md",
            missing("/opt/x.md", "/opt/x.md"),
        );
        let (args, created) = build(&plan, &facts);
        #[rustfmt::skip]
        let roots: &[&str] = &[
            "--bind", WS, WS,
            // pins: the existing directories above the masked paths
            "--bind", "/home/u/ws/.loopwright", "/home/u/ws/.loopwright",
            "--bind", "/home/u/ws/docs", "/home/u/ws/docs",
            "--bind", RUN, RUN,
        ];
        #[rustfmt::skip]
        let masks: &[&str] = &[
            "--perms", "0555", "--tmpfs", "/home/u/ws/.github", "--remount-ro", "/home/u/ws/.github",
            "--perms", "0555", "--tmpfs", "/home/u/ws/.loopwright/policies",
            "--remount-ro", "/home/u/ws/.loopwright/policies",
            "--ro-bind", "/home/u/ws/docs/AGENTS.md", "/home/u/ws/docs/AGENTS.md",
        ];
        assert_eq!(args, expected(Network::None, &[BASE, roots, masks, TAIL]));
        assert_eq!(
            created,
            vec![
                PathBuf::from("/home/u/ws/.github"),
                PathBuf::from("/home/u/ws/.loopwright/policies"),
            ]
        );
    }

    #[test]
    fn denial_wins_over_protection_at_or_above_it() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        deny(
            &mut plan,
            &mut facts,
            "/home/u/ws/private",
            dir("/home/u/ws/private"),
        );
        protect(
            &mut plan,
            &mut facts,
            "/home/u/ws/private/AGENTS.md",
            missing(
                "/home/u/ws/private/AGENTS.md",
                "/home/u/ws/private/AGENTS.md",
            ),
        );
        let (args, created) = build(&plan, &facts);
        #[rustfmt::skip]
        let rest: &[&str] = &[
            "--perms", "0000", "--tmpfs", "/home/u/ws/private",
            "--remount-ro", "/home/u/ws/private",
        ];
        assert_eq!(args, expected(Network::None, &[BASE, ROOTS, rest, TAIL]));
        assert!(created.is_empty());
    }

    #[test]
    fn missing_path_under_a_file_pins_the_file() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        deny(
            &mut plan,
            &mut facts,
            "/home/u/ws/sub/notes.txt/x",
            fact(
                PathKind::Missing {
                    first_missing: "/home/u/ws/sub/notes.txt/x".into(),
                    parent_is_dir: false,
                },
                "/home/u/ws/sub/notes.txt/x",
            ),
        );
        let (args, created) = build(&plan, &facts);
        #[rustfmt::skip]
        let roots: &[&str] = &[
            "--bind", WS, WS,
            "--bind", "/home/u/ws/sub", "/home/u/ws/sub",
            "--bind", RUN, RUN,
            "--bind", "/home/u/ws/sub/notes.txt", "/home/u/ws/sub/notes.txt",
        ];
        assert_eq!(args, expected(Network::None, &[BASE, roots, TAIL]));
        assert!(created.is_empty());
    }

    #[test]
    fn symlinked_paths_are_masked_at_their_real_location() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        let mut env = file("/home/u/secrets/env");
        env.symlinks = vec!["/home/u/ws/.env".into()];
        deny(&mut plan, &mut facts, "/home/u/ws/.env", env);
        // A protected path whose link lives outside every writable root is fine.
        let mut shared = file("/srv/shared/AGENTS.md");
        shared.symlinks = vec!["/srv/current".into()];
        protect(&mut plan, &mut facts, "/srv/current/AGENTS.md", shared);
        let (args, _) = build(&plan, &facts);
        let rest: &[&str] = &["--ro-bind", "/dev/null", "/home/u/secrets/env"];
        assert_eq!(args, expected(Network::None, &[BASE, ROOTS, rest, TAIL]));
    }

    #[test]
    fn a_read_write_root_masks_missing_paths_everywhere() {
        let mut plan = base_plan(Network::None);
        plan.read_only_root = false;
        let mut facts = base_facts();
        deny(
            &mut plan,
            &mut facts,
            "/home/u/.aws",
            missing("/home/u/.aws", "/home/u/.aws"),
        );
        let (args, created) = build(&plan, &facts);
        let mut head: Vec<String> = expected(Network::None, &[]);
        let root_bind = head.len() - 3;
        head[root_bind] = "--bind".into();
        #[rustfmt::skip]
        let mounts: &[&str] = &[
            "--dev", "/dev",
            "--bind", "/home", "/home", // pin
            "--proc", "/proc",
            "--tmpfs", "/run",
            "--tmpfs", "/tmp",
            "--tmpfs", "/dev/shm",
            "--bind", "/home/u", "/home/u", // pin
            "--ro-bind", "/proc/sys", "/proc/sys",
            "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
            "--tmpfs", "/var/tmp",
            "--bind", WS, WS,
            "--bind", RUN, RUN,
            "--perms", "0000", "--tmpfs", "/home/u/.aws", "--remount-ro", "/home/u/.aws",
        ];
        head.extend(mounts.iter().chain(TAIL).map(|s| (*s).to_owned()));
        assert_eq!(args, head);
        assert_eq!(created, vec![PathBuf::from("/home/u/.aws")]);
    }

    #[test]
    fn a_real_var_run_directory_gets_its_own_tmpfs() {
        let mut facts = base_facts();
        facts.private_dirs.push("/var/run".into());
        let (args, _) = build(&base_plan(Network::None), &facts);
        let mut base = BASE.to_vec();
        base.splice(
            base.len() - 2..,
            ["--tmpfs", "/var/run", "--tmpfs", "/var/tmp"],
        );
        assert_eq!(args, expected(Network::None, &[&base, ROOTS, TAIL]));
    }

    #[test]
    fn no_seccomp_flag_without_a_descriptor() {
        let built = argv(&base_plan(Network::None), &base_facts(), None).unwrap();
        let args = strings(&built.args);
        assert!(!args.contains(&"--seccomp".to_owned()));
        assert_eq!(
            args.len(),
            expected(Network::None, &[BASE, ROOTS, TAIL]).len() - 2
        );
    }

    fn refusal(plan: &LaunchPlan, facts: &FsFacts) -> BwrapError {
        argv(plan, facts, None).unwrap_err()
    }

    #[test]
    fn refuses_bad_plans() {
        let facts = base_facts();
        let mut plan = base_plan(Network::None);
        plan.command.clear();
        assert!(matches!(refusal(&plan, &facts), BwrapError::EmptyCommand));

        let mut plan = base_plan(Network::None);
        plan.denied_read_paths.push("home/u/.ssh".into());
        assert!(matches!(
            refusal(&plan, &facts),
            BwrapError::RelativePath(_)
        ));

        let mut plan = base_plan(Network::None);
        plan.protected_paths.push("/home/u/ws/../x".into());
        assert!(matches!(
            refusal(&plan, &facts),
            BwrapError::ParentComponent(_)
        ));

        let mut plan = base_plan(Network::None);
        plan.protected_paths
            .push(PathBuf::from(OsStr::from_bytes(b"/home/u/ws/a\0b")));
        assert!(matches!(refusal(&plan, &facts), BwrapError::Nul { .. }));

        let mut plan = base_plan(Network::None);
        plan.command.push(OsString::from_vec(b"a\0b".to_vec()));
        assert!(matches!(refusal(&plan, &facts), BwrapError::Nul { .. }));

        let mut plan = base_plan(Network::None);
        plan.env.push(("A=B".into(), "c".into()));
        assert!(matches!(refusal(&plan, &facts), BwrapError::EnvName(_)));

        let mut plan = base_plan(Network::None);
        plan.env.push(("".into(), "c".into()));
        assert!(matches!(refusal(&plan, &facts), BwrapError::EnvName(_)));

        let mut plan = base_plan(Network::None);
        plan.denied_read_paths.push("/home/u/.ssh".into());
        assert!(matches!(refusal(&plan, &facts), BwrapError::MissingFact(_)));

        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        plan.writable_roots.push("/gone".into());
        facts
            .paths
            .insert("/gone".into(), missing("/gone", "/gone"));
        assert!(matches!(
            refusal(&plan, &facts),
            BwrapError::BadWritableRoot(_)
        ));
    }

    #[test]
    fn refuses_a_protected_symlink_inside_a_writable_root() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        let mut claude = file("/home/u/ws/AGENTS.md");
        claude.symlinks = vec!["/home/u/ws/CLAUDE.md".into()];
        protect(&mut plan, &mut facts, "/home/u/ws/CLAUDE.md", claude);
        assert!(matches!(
            refusal(&plan, &facts),
            BwrapError::ProtectedSymlink { link, .. } if link == Path::new("/home/u/ws/CLAUDE.md")
        ));
    }

    #[test]
    fn refuses_files_with_other_hard_links() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        deny(
            &mut plan,
            &mut facts,
            "/home/u/.netrc",
            fact(PathKind::File { hard_links: 2 }, "/home/u/.netrc"),
        );
        assert!(matches!(
            refusal(&plan, &facts),
            BwrapError::HardLinks { links: 2, .. }
        ));

        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        protect(
            &mut plan,
            &mut facts,
            "/home/u/ws/AGENTS.md",
            fact(PathKind::File { hard_links: 3 }, "/home/u/ws/AGENTS.md"),
        );
        assert!(matches!(
            refusal(&plan, &facts),
            BwrapError::HardLinks { links: 3, .. }
        ));
    }

    #[test]
    fn refuses_masks_over_writable_roots() {
        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        deny(&mut plan, &mut facts, "/home/u", dir("/home/u"));
        assert!(matches!(
            refusal(&plan, &facts),
            BwrapError::DeniedContainsWritable { .. }
        ));

        let mut plan = base_plan(Network::None);
        let mut facts = base_facts();
        protect(&mut plan, &mut facts, WS, dir(WS));
        assert!(matches!(
            refusal(&plan, &facts),
            BwrapError::MaskContainsMount { .. }
        ));
    }

    #[test]
    fn looks_like_file_by_extension() {
        assert!(looks_like_file(Path::new("/w/AGENTS.md")));
        assert!(looks_like_file(Path::new("/w/.env.local")));
        assert!(!looks_like_file(Path::new("/w/.github")));
        assert!(!looks_like_file(Path::new("/w/policies")));
        assert!(!looks_like_file(Path::new("/")));
    }

    #[test]
    fn trial_argv_is_exact() {
        assert_eq!(
            trial_argv(),
            vec![
                "--unshare-user",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-cgroup",
                "--disable-userns",
                "--die-with-parent",
                "--new-session",
                "--cap-drop",
                "ALL",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--ro-bind",
                "/proc/sys",
                "/proc/sys",
                "--ro-bind-try",
                "/proc/sysrq-trigger",
                "/proc/sysrq-trigger",
                "--perms",
                "0000",
                "--tmpfs",
                "/dev/shm",
                "--remount-ro",
                "/dev/shm",
                "--ro-bind",
                "/dev/null",
                "/dev/palisade-trial",
                "--clearenv",
                "--",
                "/bin/true",
            ]
        );
    }

    #[test]
    fn trial_program_comes_last_after_separator() {
        let argv = trial_argv();
        let n = argv.len();
        assert_eq!(
            argv.get(n.saturating_sub(2)).map(String::as_str),
            Some("--")
        );
        assert_eq!(argv.last().map(String::as_str), Some(TRIAL_PROGRAM));
    }
}
