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
//! inside it), `--unshare-pid` (the command sees only its own tree) with `--as-pid-1` and
//! palisade's own PID 1 first (`palisade __sandbox-pid1`, `crate::init::pid1`: bwrap's reaper
//! would run as the command's uid and stay dumpable, its memory writable through `/proc/1/mem`;
//! palisade's marks itself not dumpable), `--unshare-ipc`, `--unshare-uts`, `--unshare-cgroup`,
//! `--unshare-net` unless the plan allows outbound traffic (`none` and `loopback-only` both get
//! a private network namespace whose loopback bwrap brings up — it is the sandbox's own, not the
//! host's; it also hides the host's abstract Unix sockets), `--disable-userns` (no nested user namespace, so no
//! way back to a full capability set), `--die-with-parent`, `--new-session` (no controlling
//! terminal: no `TIOCSTI` into the caller's tty), `--cap-drop ALL`, `--uid`/`--gid` (the
//! invoking user's own ids). When the plan asks for syscall filtering, the first program PID 1
//! starts is Palisade's stub ([`SandboxExec`], [`crate::sandbox_exec`]); both run from the
//! palisade binary, at its own path where the read-only root shows it unchanged
//! ([`exe_in_place`]), else bound read-only on the private `/run`: the stub installs the
//! filter in its observed form (under `no_new_privs`) and execs the rest, instead of
//! `--seccomp FD`, which has no listener. PID 1 itself runs none of the command's code and is
//! not filtered. The environment is cleared and set to exactly `plan.env` (bwrap itself adds
//! `PWD`); the working directory is the workspace.
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
//! 5. protected paths: existing ones `--ro-bind P P`; a missing one inside a writable root gets
//!    a *placeholder* at its first missing component (`AGENTS.md`, or `.loopwright` for a
//!    missing `.loopwright/policies`): an inert Unix-socket node with no permission bits that
//!    the launcher makes on the host before bwrap starts ([`crate::placeholder`]), bound the
//!    same way, `--ro-bind P P`. Not `/dev/null` on a file, nor an empty directory, as before:
//!    git lists the first as an untracked file it cannot add, and `git stash -u` stops half-way
//!    on the second (its `git clean -d` cannot remove a mountpoint); git skips a socket node
//!    altogether, so `status`, `add -A`, `commit`, `stash -u` and `clean -fdx` behave exactly
//!    as outside. Inside, the name cannot be created, opened, linked, renamed onto or removed,
//!    and, as no directory, nothing can be created beneath it. A placeholder another run made
//!    (or a killed run left) is found by [`crate::fsfacts::measure`] and held the same way, so
//!    the last run out removes it.
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
//! 8. every host socket the plan allows (`unixSockets`): `--bind TARGET PATH`, the real socket
//!    at the path the command connects to, after everything else, so that neither a private
//!    tmpfs (`/tmp`, `/run`) nor a mask hides it; step 7 leaves it unmasked.
//!
//! bwrap creates the mountpoint of a missing denied path on the host (inside a writable root,
//! as an empty directory, or an empty mode-0444 file for a socket that vanished);
//! [`BwrapArgs::created_mountpoints`] lists them for [`crate::fsfacts::cleanup_created`].
//! [`BwrapArgs::placeholders`] lists the placeholders the launcher must hold
//! ([`crate::placeholder::hold`]) before bwrap starts and release once the sandbox is gone.
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
//! - While the sandbox runs the host sees the placeholders (`ls` lists them as sockets; git
//!   does not) and the empty directories bwrap created for missing denied paths.
//!
//! Layout: this module validates the plan, plans the base mounts ([`filesystem`]) and spells
//! them as bwrap options ([`argv`]); `masks` decides what the sandbox sees at a path and which
//! masks and pins the denied and protected paths need.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::fsfacts::{FsFacts, PathFact, PathKind};

mod masks;

use crate::plan::{Bridge, LaunchPlan, Network, Reach};
use masks::{Base, BaseOp, Layer, Layers, plan_masks};

/// The program a trial sandbox runs: present on every Linux distribution palisade targets and
/// visible inside the sandbox because the trial binds `/` read-only.
pub const TRIAL_PROGRAM: &str = "/bin/true";

/// Arguments (without the `bwrap` program itself) for a throwaway trial sandbox.
///
/// The trial asks for every namespace and kind of mount the bwrap shim uses — user, PID (with
/// the command as PID 1), network, IPC, UTS and cgroup namespaces, no nested user namespaces, a read-only root, a
/// fresh `/dev` and `/proc` with `/proc/sys` bound read-only, a mode-0000 tmpfs remounted
/// read-only, a `/dev/null` file mask — plus a cleared environment, a new session, death with
/// the parent and no capabilities, and runs [`TRIAL_PROGRAM`]. If it exits 0, this host can
/// build the sandbox; if the kernel, a security module or an old bwrap (`--disable-userns`
/// needs 0.8) refuses something, bwrap says so on stderr. The seccomp stub is not tried (it is
/// the palisade binary; its filter is tried by the kernel tests and fails closed at launch).
///
/// Keep it in step with [`argv`]: a trial that asks for less than the shim would report
/// `linux-bwrap` available on a host where launching fails.
pub fn trial_argv() -> Vec<String> {
    [
        "--unshare-user",
        "--unshare-pid",
        "--as-pid-1",
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

/// The hidden subcommand of the `palisade` binary that runs [`crate::sandbox_exec::main`].
pub const SUBCOMMAND_SANDBOX_EXEC: &str = "__sandbox-exec";

/// The hidden subcommand of the `palisade` binary that runs the sandbox's PID 1
/// (`crate::init::pid1`).
pub const SUBCOMMAND_SANDBOX_PID1: &str = "__sandbox-pid1";

/// The option of [`SUBCOMMAND_SANDBOX_PID1`] that carries the launcher's [`crate::BUILD`]
/// (`__sandbox-pid1 --build B -- CMD`): PID 1 refuses a launcher of another build.
pub const PID1_BUILD_OPTION: &str = "--build";

/// Where the sandbox-exec stub receives the seccomp observer's socket.
pub const OBSERVE_FD: i32 = 5;

/// Where the palisade binary appears inside the sandbox to run as PID 1 and as the stub when
/// the sandbox does not see it, unchanged and read-only, at its own path ([`exe_in_place`]):
/// bound read-only on the private `/run` tmpfs.
pub const SANDBOX_EXEC_PATH: &str = "/run/palisade-exec/palisade";

/// The seccomp filter applied by Palisade's own stub ([`crate::sandbox_exec`]) instead of
/// `bwrap --seccomp`, so that the calls it refuses are observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxExec {
    /// The palisade binary on the host (its real path: no symlink on the way), run where
    /// [`argv`] puts it: at this path, or bound read-only at [`SANDBOX_EXEC_PATH`].
    pub exe: PathBuf,
    /// The network reach the filter's socket rules enforce.
    pub reach: Reach,
    /// Where the stub writes one byte just before it execs (the launcher's sign that the
    /// sandbox was set up and the command started), when nothing else runs between them.
    pub started_fd: Option<i32>,
}

impl SandboxExec {
    /// The stub's argv with the binary at `exe_at` in the sandbox, to which the rest of the
    /// command line is appended.
    pub fn prefix(&self, exe_at: &Path) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![exe_at.as_os_str().to_owned()];
        argv.extend(
            [SUBCOMMAND_SANDBOX_EXEC, "--reach", reach_name(self.reach)].map(OsString::from),
        );
        if let Some(fd) = self.started_fd {
            argv.push("--started-fd".into());
            argv.push(fd.to_string().into());
        }
        argv.push("--".into());
        argv
    }
}

/// The stub's spelling of a reach.
pub fn reach_name(reach: Reach) -> &'static str {
    match reach {
        Reach::Nothing => "nothing",
        Reach::OwnLoopback => "own-loopback",
        Reach::HostLoopback => "host-loopback",
        Reach::Everything => "everything",
    }
}

/// The reach the stub's spelling names.
pub fn reach_from_name(name: &str) -> Option<Reach> {
    [
        Reach::Nothing,
        Reach::OwnLoopback,
        Reach::HostLoopback,
        Reach::Everything,
    ]
    .into_iter()
    .find(|reach| reach_name(*reach) == name)
}

/// The arguments for one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BwrapArgs {
    /// Everything after the `bwrap` program itself, ending with `--` and the command.
    pub args: Vec<OsString>,
    /// Paths bwrap will create on the host (inside writable roots) as mountpoints for missing
    /// denied paths, shallowest first, then the host sockets inside writable roots (created
    /// only if one vanishes before bwrap starts); hand them to
    /// [`crate::fsfacts::cleanup_created`] after the run.
    pub created_mountpoints: Vec<PathBuf>,
    /// Placeholders the argv binds, shallowest first: [`crate::placeholder::hold`] them before
    /// bwrap starts (bwrap fails if one is missing), release them once the sandbox is gone.
    pub placeholders: Vec<PathBuf>,
    /// The masks of denied paths, in order: with [`argv_observed`], node `i` is bound from
    /// `observed_masks/i`.
    pub denied_masks: Vec<DeniedMask>,
}

/// Why [`argv`] refused to build an argv.
#[derive(Debug, thiserror::Error)]
pub enum BwrapError {
    #[error("the command is empty")]
    EmptyCommand,
    #[error(
        "`/run` is not a private directory of this sandbox, so palisade's PID 1 and seccomp stub have nowhere to be bound"
    )]
    SandboxExecNotPrivate,
    #[error("PID 1 `{}` and the seccomp stub `{}` would be two binaries", .0.display(), .1.display())]
    TwoExecutables(PathBuf, PathBuf),
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
        "the network bridge binds `{}` outside the sandbox's private directories",
        .0.display()
    )]
    BridgeBindNotPrivate(PathBuf),
    #[error("the network bridge names no program to run")]
    BridgeNoProgram,
    #[error("the host's own loopback needs a backend without a network namespace (Seatbelt)")]
    HostLoopback,
}

/// The network's bridge, checked: every bind lands in a directory the sandbox gets privately
/// (so nothing of the host's is covered, and nothing is created on the host) and a program is
/// named. `None` for a network without one.
pub(crate) fn bridge<'p>(
    plan: &'p LaunchPlan,
    facts: &FsFacts,
) -> Result<Option<&'p Bridge>, BwrapError> {
    if plan.network == Network::HostLoopback {
        return Err(BwrapError::HostLoopback);
    }
    let Some(bridge) = plan.network.bridge() else {
        return Ok(None);
    };
    for bind in &bridge.binds {
        let private = bind.target.is_absolute()
            && facts
                .private_dirs
                .iter()
                .any(|dir| bind.target.starts_with(dir) && bind.target != *dir);
        if !private {
            return Err(BwrapError::BridgeBindNotPrivate(bind.target.clone()));
        }
    }
    if bridge.argv.is_empty() {
        return Err(BwrapError::BridgeNoProgram);
    }
    Ok(Some(bridge))
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
    /// A denied file or a host socket: an unreadable, unwritable file (`/dev/null` on a `nodev`
    /// mount under bwrap).
    Null(PathBuf),
    /// A missing protected path: the placeholder the launcher makes there
    /// ([`crate::placeholder`]), bound read-only onto itself.
    Placeholder(PathBuf),
    /// A host socket the plan allows (`target`, the socket itself) bound at `path`, where the
    /// command connects: after every other mount, so that neither a private directory nor a
    /// mask hides it.
    HostSocket { target: PathBuf, path: PathBuf },
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
    /// Placeholders the mounts need (see [`BwrapArgs`]).
    pub placeholders: Vec<PathBuf>,
    /// The masks of denied paths among `mounts`, in mount order (see [`DeniedMask`]).
    pub denied_masks: Vec<DeniedMask>,
}

/// One mask of a denied path: a [`Mount::DenyDir`] (`dir`) or a [`Mount::Null`] that is not a
/// host socket's. An observed launch serves it from a FUSE node that refuses and records every
/// access instead (`crate::fusemask`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeniedMask {
    /// Where the sandbox sees it (real, absolute).
    pub target: PathBuf,
    pub dir: bool,
    /// The plan's denied paths it masks (usually one; several when they resolve alike).
    pub denied: Vec<PathBuf>,
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
    // The workspace is writable when the plan lists it (`--writable` may narrow it to places
    // inside it); otherwise it is still the working directory, bound read-only.
    let workspace_writable = plan.writable_roots.contains(&plan.workspace);
    let mut roots = BTreeSet::new();
    if workspace_writable {
        roots.insert(workspace.clone());
    }
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
    if !workspace_writable {
        base.add(&workspace, BaseOp::ReadOnly);
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
    let mut denied_masks = Vec::new();
    for mask in &planned.masks {
        mounts.push(mask.mount());
        layers.masks.push(mask.clone());
        if let masks::Mask::DenyDir(target) | masks::Mask::Null(target) = mask {
            // Which of the plan's denied paths asked for this mask (an explanation names them).
            let denied = plan
                .denied_read_paths
                .iter()
                .filter(|path| {
                    fact(facts, path)
                        .is_ok_and(|f| masks::denied_need(f).target() == Some(target.as_path()))
                })
                .cloned()
                .collect();
            denied_masks.push(DeniedMask {
                target: target.clone(),
                dir: matches!(mask, masks::Mask::DenyDir(_)),
                denied,
            });
        }
    }

    // Host sockets still visible after all of the above, but those the plan allows.
    let mut created = planned.created;
    let allowed = |socket: &PathBuf| plan.unix_sockets.iter().any(|s| &s.target == socket);
    for socket in facts.host_sockets.iter().filter(|s| !allowed(s)) {
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
    // Step 8: the allowed host sockets, last.
    for socket in &plan.unix_sockets {
        mounts.push(Mount::HostSocket {
            target: socket.target.clone(),
            path: socket.path.clone(),
        });
    }
    Ok(Filesystem {
        mounts,
        workspace,
        created_mountpoints: created,
        placeholders: planned.placeholders,
        denied_masks,
    })
}

/// Builds the bwrap arguments for `plan`, given the `facts` measured for it; `pid1`, the
/// palisade binary on the host (its real path), to run as the sandbox's PID 1
/// ([`SUBCOMMAND_SANDBOX_PID1`], `None`: bwrap's own reaper, dumpable — for tests of the mounts
/// alone); and, when the plan filters syscalls, the stub that installs the filter
/// ([`SandboxExec`]). Both run from the one binary: at its own path when the sandbox sees it
/// there unchanged ([`exe_in_place`]), else bound read-only at [`SANDBOX_EXEC_PATH`].
pub fn argv(
    plan: &LaunchPlan,
    facts: &FsFacts,
    pid1: Option<&Path>,
    sandbox_exec: Option<&SandboxExec>,
) -> Result<BwrapArgs, BwrapError> {
    argv_observed(plan, facts, pid1, sandbox_exec, None)
}

/// [`argv`], with the masks of denied paths bound from `observed_masks` when given:
/// node `i` of [`BwrapArgs::denied_masks`] at `observed_masks/i` (a FUSE filesystem the
/// launcher mounts there before bwrap starts, `crate::fusemask`), instead of a mode-0000 tmpfs
/// or `/dev/null`.
pub fn argv_observed(
    plan: &LaunchPlan,
    facts: &FsFacts,
    pid1: Option<&Path>,
    sandbox_exec: Option<&SandboxExec>,
    observed_masks: Option<&Path>,
) -> Result<BwrapArgs, BwrapError> {
    let filesystem = filesystem(plan, facts, &[])?;
    if let Some(root) = observed_masks {
        no_nul("path", root.as_os_str())?;
        if !root.is_absolute() {
            return Err(BwrapError::RelativePath(root.to_path_buf()));
        }
    }
    let exe = match (pid1, sandbox_exec) {
        (Some(pid1), Some(stub)) if pid1 != stub.exe => {
            return Err(BwrapError::TwoExecutables(
                pid1.to_path_buf(),
                stub.exe.clone(),
            ));
        }
        (Some(exe), _) => Some(exe),
        (None, stub) => stub.map(|stub| stub.exe.as_path()),
    };

    let mut args = Args::default();
    // Namespaces and process state; see the module docs for why each one is there.
    args.flag("--unshare-user");
    args.flag("--unshare-pid");
    if pid1.is_some() {
        args.flag("--as-pid-1");
    }
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
        let observed = observed_masks.and_then(|root| {
            let (target, dir) = match mount {
                Mount::DenyDir(target) => (target, true),
                Mount::Null(target) => (target, false),
                _ => return None,
            };
            filesystem
                .denied_masks
                .iter()
                .position(|m| m.target == *target && m.dir == dir)
                .map(|i| (root.join(i.to_string()), target))
        });
        match observed {
            // Read-write, so that writes reach the server (which refuses them) instead of
            // failing unobserved with `EROFS`; nothing can be written there either way.
            Some((node, target)) => args.op("--bind", [node.as_path(), target]),
            None => emit(mount, &mut args),
        }
    }

    // The bridge's sockets and program, read-only on a private tmpfs. A read-only bind still
    // accepts `connect` (the mount flag does not apply to sockets).
    let bridge = bridge(plan, facts)?;
    if let Some(bridge) = bridge {
        let mut made: Vec<&Path> = Vec::new();
        for bind in &bridge.binds {
            if let Some(parent) = bind.target.parent()
                && !made.contains(&parent)
            {
                args.op("--dir", [parent]);
                made.push(parent);
            }
            args.op("--ro-bind", [&bind.source, &bind.target]);
        }
    }

    // PID 1 and the stub: the palisade binary where the read-only root shows it, else bound
    // read-only on the private `/run`.
    let exe_at = match exe {
        Some(exe) => {
            no_nul("path", exe.as_os_str())?;
            if !exe.is_absolute() {
                return Err(BwrapError::RelativePath(exe.to_path_buf()));
            }
            if exe_in_place(exe, &filesystem.mounts, bridge) {
                Some(exe)
            } else {
                let target = Path::new(SANDBOX_EXEC_PATH);
                let private = facts
                    .private_dirs
                    .iter()
                    .any(|dir| target.starts_with(dir) && target != dir);
                if !private {
                    return Err(BwrapError::SandboxExecNotPrivate);
                }
                if let Some(parent) = target.parent() {
                    args.op("--dir", [parent]);
                }
                args.op("--ro-bind", [exe, target]);
                Some(target)
            }
        }
        None => None,
    };

    args.op("--chdir", [&filesystem.workspace]);
    args.flag("--clearenv");
    for (name, value) in &plan.env {
        args.op("--setenv", [name.as_os_str(), value.as_os_str()]);
    }
    args.flag("--");
    if let (Some(_), Some(exe_at)) = (pid1, exe_at) {
        args.0.push(exe_at.as_os_str().to_owned());
        args.0.extend(
            [
                SUBCOMMAND_SANDBOX_PID1,
                PID1_BUILD_OPTION,
                crate::BUILD,
                "--",
            ]
            .map(OsString::from),
        );
    }
    if let (Some(stub), Some(exe_at)) = (sandbox_exec, exe_at) {
        args.0.extend(stub.prefix(exe_at));
    }
    if let Some(bridge) = bridge {
        // The bridge listens on the sandbox's loopback before the command starts, detaches,
        // and execs the command in its place (same pid, status and signals as without it).
        args.0.extend(bridge.argv.iter().cloned());
    }
    args.0.extend(plan.command.iter().cloned());

    Ok(BwrapArgs {
        args: args.0,
        created_mountpoints: filesystem.created_mountpoints,
        placeholders: filesystem.placeholders,
        denied_masks: filesystem.denied_masks,
    })
}

/// Whether the sandbox sees the binary at `exe` (a real path) as the host does, read-only: the
/// root is bound read-only and no other mount of the sandbox — a private directory, a writable
/// root, a mask, a protected path, the bridge's — is at `exe` or above it. Then PID 1 and the
/// stub run from there, and bwrap binds nothing for them: each bind costs bwrap a bind mount, a
/// read of the whole mount table and a remount (about 0.2 ms; this one and its directory 0.48
/// ms of every run in #38's measurements). A binary under a writable root is bound as before
/// (read-only in the sandbox, whatever the root allows).
pub fn exe_in_place(exe: &Path, mounts: &[Mount], bridge: Option<&Bridge>) -> bool {
    let mut targets = Vec::new();
    for mount in mounts {
        match mount {
            Mount::Root { writable } => {
                if *writable {
                    return false;
                }
            }
            Mount::Dev(target)
            | Mount::Proc(target)
            | Mount::ProcCover { path: target, .. }
            | Mount::Tmpfs(target)
            | Mount::ReadOnly(target)
            | Mount::Writable(target)
            | Mount::DenyDir(target)
            | Mount::Null(target)
            | Mount::Placeholder(target)
            | Mount::HostSocket { path: target, .. } => targets.push(target.as_path()),
        }
    }
    if let Some(bridge) = bridge {
        targets.extend(bridge.binds.iter().map(|bind| bind.target.as_path()));
    }
    !targets.iter().any(|target| exe.starts_with(target))
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
        Mount::ReadOnly(path) | Mount::Placeholder(path) => args.op("--ro-bind", [path, path]),
        Mount::Writable(path) => args.op("--bind", [path, path]),
        Mount::DenyDir(path) => {
            args.op("--perms", ["0000"]);
            args.op("--tmpfs", [path]);
            args.op("--remount-ro", [path]);
        }
        Mount::Null(path) => args.op("--ro-bind", [Path::new("/dev/null"), path]),
        // Read-write: `connect` needs write permission on the socket, which the mount flag
        // does not affect for sockets, but nothing else is reachable through it either.
        Mount::HostSocket { target, path } => args.op("--bind", [target, path]),
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
        .chain(&plan.protected_paths)
        .chain(plan.unix_sockets.iter().flat_map(|s| [&s.path, &s.target]));
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
mod tests;
