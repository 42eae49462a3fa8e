//! Docker: the `docker run` argv palisade hands to the Docker CLI, and the supervised run that
//! removes the container whatever happens.
//!
//! [`argv`] is pure: a [`LaunchPlan`], the [`FsFacts`] the host measured and a [`DockerSpec`]
//! (pinned image, container name, the daemon) in, the exact arguments out, snapshot-tested on
//! any OS. [`run`] launches the CLI under [`crate::supervise`] and then makes sure the container
//! is gone.
//!
//! # The container, flag by flag
//!
//! - `run -i --pull never --entrypoint /run/palisade-init IMAGE_ID -- CMD ARGS…`: the
//!   pinned image by its ID (never a tag, never pulled); the command exactly as given (the
//!   image's entrypoint is replaced, not wrapped); stdin is passed through as for the other
//!   backends. PID 1 is `docker-init` (tini: it reaps orphans and forwards signals), run from
//!   an *execute-only* copy ([`DockerSpec::init`], mode 0111, bound read-only at
//!   [`INIT_IN_CONTAINER`]): the kernel makes a process not dumpable when it executes a file it
//!   cannot read, and the container has no capability to read it anyway. `docker run --init`
//!   would start the same init from a readable file, dumpable and with the command's uid, so the
//!   command could open `/proc/1/mem` read-write and rewrite it; not dumpable, its `/proc/1`
//!   entries that need ptrace access (`mem`, `environ`, `fd`, …) are closed to the command.
//!   There is no fallback to `--init`: the probe reports the backend unavailable without a
//!   static `docker-init` it can copy.
//! - `--name palisade-<run id>` and labels `dev.palisade.run` (the run id) and
//!   `dev.palisade.uid` (the caller's uid): the name is how the container is removed; a run's container is never looked up by anything the command can influence.
//! - With the static stub ([`DockerSpec::stub`], the host's `palisade-bridge`): the init runs
//!   `/run/palisade-stub __sandbox-exec --mechanism docker …` before the command
//!   ([`crate::sandbox_exec`]). The stub installs Palisade's filter in its observed form and
//!   hands the listener to the supervisor over a Unix socket bound read-only at
//!   [`OBSERVE_SOCKET_IN_CONTAINER`] (the host end lives beside the run's temporary directory,
//!   not in anything the container sees); the runtime's profile is then
//!   [`crate::seccomp::oci_profile_beneath_observer`], which leaves the refusals to that
//!   filter, so each one is recorded, and so is each `connect` the container cannot make.
//!   If the stub cannot install the filter it exits 125 and the command never runs.
//! - `--user UID:GID` of the invoking user, `-w WORKSPACE`, `--cap-drop ALL`,
//!   `--security-opt no-new-privileges`, `--security-opt seccomp=…` with Palisade's own rules
//!   ([`crate::seccomp::oci_profile`]) when the plan asks for syscall filtering (otherwise
//!   Docker's default profile stays), `--ipc private` (its own `/dev/shm`), `--cgroupns
//!   private`, `--log-driver none` (the command's output is not kept by the daemon),
//!   `--no-healthcheck`. Never `--privileged`, `--cap-add`, a device or a host namespace other
//!   than the network below.
//! - Network: `none` → `--network none`; `loopback-only` → `--network none` as well (Docker
//!   gives the container its own network namespace with only `lo` up: the container's
//!   loopback, not the host's; `--sysctl net.ipv6.conf.lo.disable_ipv6=0` gives it `::1`); `allow-outbound` → `--network host` (the host's network
//!   namespace, as bwrap's `allow-outbound`: the daemon Palisade targets runs with
//!   `--bridge=none`, so there is no default bridge to fall back on, and the plan asked for
//!   unrestricted traffic). A bridge (listed host loopback ports, a domain allowlist's proxy)
//!   → `--network none`, the bridge's Unix sockets and the static `palisade-bridge` bound
//!   read-only on the private `/run` (at bwrap's paths), and the bridge as the entrypoint: it
//!   listens on the container's loopback, detaches, and execs the command, which reaches the
//!   host only through the bridge's routes. The bridge is static because an image need not have
//!   the host's libc; the host checks that it is (see the probe).
//! - Budgets: `--memory`/`--memory-swap` (the container's cgroup), `--pids-limit` (plus one
//!   for `docker-init`), CPU seconds as `--ulimit cpu=N:N` (per process, like the rlimit
//!   fallback of the other backends); the wall clock is the supervisor's timer on the client.
//! - Environment: `-e NAME` for each variable of the plan; the values travel in the CLI's own
//!   environment, never in its argv (so `ps` never shows them).
//!
//! Filesystem: the same mount plan as bwrap ([`crate::bwrap::filesystem`]), spelled as Docker
//! mounts over the image's root:
//! - the image's root, `--read-only` when the plan's root is read-only;
//! - [`DockerSpec::read_only_binds`] (host paths the runtime profile makes visible), each
//!   bound read-only at its own path; nothing else of the host is visible;
//! - private tmpfs on `/tmp`, `/var/tmp`, `/run` (as on the host), and Docker's own `/dev`,
//!   `/proc` (with `/proc/sys` read-only) and `/dev/shm`;
//! - writable roots (workspace first) and bwrap's pins bound read-write at the same path;
//! - existing protected paths bound read-only onto themselves; missing ones inside a writable
//!   root get bwrap's placeholders ([`crate::placeholder`]: an inert socket node the launcher
//!   makes on the host before `docker run`, at the first missing component), bound read-only
//!   onto themselves the same way, so the command cannot create them and git inside sees what
//!   it sees outside (runc would otherwise create the mountpoint itself, an empty file or
//!   directory, which git does not ignore: see [`crate::bwrap`], step 5);
//! - denied directories: an empty read-only mode-0000 tmpfs; denied files and host sockets
//!   inside a bind: an empty mode-0000 file ([`mask_file`]) bound read-only (unreadable,
//!   unwritable, not a socket).
//!
//! Docker sorts mounts by depth itself, so a deeper mask always lands on top of the bind it
//! hides; two mounts at one path keep the later one.
//!
//! # Cleanup
//!
//! Killing `docker run` does not stop the container. [`run()`] therefore, after the client ended
//! (exit, wall clock, a forwarded signal), removes the container over the daemon's API
//! (`DELETE /containers/NAME?force=1`) and checks it is gone. For the case where palisade
//! itself dies (SIGKILL included) before that, a *reaper* is started first: a detached `sh`
//! (not palisade's child, not in its process group) blocked reading a pipe whose only writer
//! is palisade. Palisade writes `done` once it removed the container itself; if the pipe hits
//! end-of-file instead, palisade died, and the reaper runs `docker rm -f NAME` until the
//! daemon has said five times in a row, a second apart, that there is no such container (for
//! up to a minute: a daemon that does not answer, because it is restarting, is not an answer,
//! and the repeats catch a container the killed client was still creating). The launched client has a parent-death signal, so it dies
//! with palisade too. A container created after the reaper stopped looking (the daemon was
//! restarting, and finished the killed client's create later) stays `Created`: the next
//! docker run of the same user ([`labelled`], label [`UID_LABEL`]) removes every container
//! whose run is over, and says so.
//!
//! # Known limits
//!
//! - Read-only binds are not recursively read-only on Docker 20.10: a submount inside a
//!   read-only bind keeps its own flags.
//! - The runtime's libseccomp ignores syscalls it does not know (`open_tree_attr` with
//!   Debian 12's 2.5.4); the dropped capabilities cover those that need privilege.
//! - Access to the Docker socket is root-equivalent: the backend is meant for root or members
//!   of the `docker` group, and the container's uid is the caller's.
//!
//! Layout: this module builds the argv ([`argv`]); `run` is the supervised run and the
//! container's removal; [`api`] is the one client of the daemon's API, which the host's probe
//! uses too.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::bwrap::{self, BwrapError, Mount};
use crate::fsfacts::{self, FsFacts, PathKind};
use crate::plan::{Budgets, LaunchPlan, Network};
use crate::seccomp;
use crate::supervise::SuperviseError;

pub mod api;
mod run;

#[cfg(target_os = "linux")]
pub use run::run;
pub use run::{DockerOutcome, Labelled, Removal, exists, labelled, remove};

/// The label every palisade container carries, with the run id as its value.
pub const RUN_LABEL: &str = "dev.palisade.run";

/// The label with the uid of the user whose run made the container: a later run of that user
/// may remove it once the run is over, and never another user's.
pub const UID_LABEL: &str = "dev.palisade.uid";

/// Where the CLI reads the seccomp profile from: the descriptor [`run`] passes it on.
pub const SECCOMP_FD: i32 = 3;

/// Where the container's execute-only `docker-init` is bound (in the private `/run`).
pub const INIT_IN_CONTAINER: &str = "/run/palisade-init";

/// Where the seccomp stub ([`DockerSpec::stub`]) is bound (in the private `/run`).
pub const STUB_IN_CONTAINER: &str = "/run/palisade-stub";

/// Where the observer's listening socket is bound (in the private `/run`): the stub connects to
/// it to hand over the filter's listener.
pub const OBSERVE_SOCKET_IN_CONTAINER: &str = "/run/palisade-observe.sock";

/// What the Docker backend needs besides the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerSpec {
    /// The `docker` CLI the probe found.
    pub cli: PathBuf,
    /// The daemon's unix socket.
    pub socket: PathBuf,
    /// The pinned image, by ID (`sha256:<64 hex>`).
    pub image_id: String,
    /// The run id; the container is `palisade-<run id>`.
    pub run_id: String,
    /// Host paths visible read-only in the container, each at its own path.
    pub read_only_binds: Vec<PathBuf>,
    /// The host's static `docker-init` (checked by the host), run as PID 1 from an
    /// execute-only copy.
    pub init: PathBuf,
    /// The static `palisade-bridge` (checked by the host), run in the container as the seccomp
    /// stub ([`crate::sandbox_exec`]) so that the calls the filter refuses and the connections
    /// the container cannot make are observed; `None`: the runtime installs the filter alone,
    /// and they are not (a limitation the probe lists).
    pub stub: Option<PathBuf>,
}

impl DockerSpec {
    /// The container's name.
    pub fn container_name(&self) -> String {
        format!("palisade-{}", self.run_id)
    }
}

/// The argv of one run, and what it changes on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerArgs {
    /// Arguments after the `docker` program itself.
    pub args: Vec<OsString>,
    /// The CLI's environment: the plan's variables (named by `-e NAME` in `args`) plus
    /// `DOCKER_HOST` and `DOCKER_CONFIG`.
    pub env: Vec<(OsString, OsString)>,
    /// Host paths where the runtime creates a mountpoint (inside writable roots); remove them
    /// with [`fsfacts::cleanup_created`] after the run.
    pub created_mountpoints: Vec<PathBuf>,
    /// Placeholders the mounts bind: held before `docker run`, released once the container is
    /// gone (see [`crate::bwrap::BwrapArgs::placeholders`]).
    pub placeholders: Vec<PathBuf>,
    /// The limits passed to Docker, for the record.
    pub limits: Limits,
    /// The masks of denied paths, in node order (see [`argv_observed`]).
    pub denied_masks: Vec<bwrap::DeniedMask>,
}

/// The budgets Docker enforces (the wall clock stays with the supervisor).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_seconds_per_process: Option<u64>,
}

/// Why [`argv`] or [`run`] refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error(transparent)]
    Plan(#[from] BwrapError),
    #[error("image `{0}` is not an image ID (`sha256:` and 64 hex digits)")]
    ImageId(String),
    #[error("run id `{0}` is not a valid container name part")]
    RunId(String),
    #[error("read-only bind `{}` is not an absolute path to an existing file or directory", .0.display())]
    ReadOnlyBind(PathBuf),
    #[error("path `{}` contains `,`, `:`, `\"` or a line break, which docker's mount syntax cannot carry", .0.display())]
    PathSyntax(PathBuf),
    #[error("environment variable `{}` would configure the docker client itself", .0.to_string_lossy())]
    ClientEnv(OsString),
    #[error("an observed run needs the static stub (`DockerSpec::stub`), and there is none")]
    NoStub,
    #[error("`{}` is bound from the host, so the container's init cannot be placed there", .0.display())]
    InitTarget(PathBuf),
    #[error("cannot build the seccomp profile: {0}")]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("cannot measure the filesystem: {0}")]
    Facts(#[from] fsfacts::FsFactsError),
    #[cfg(target_os = "linux")]
    #[error("cannot hold the protected paths' placeholders: {0}")]
    Placeholder(#[from] crate::placeholder::PlaceholderError),
    #[error("cannot prepare the run: {what}: {source}")]
    Setup {
        what: &'static str,
        source: io::Error,
    },
    #[error("the supervisor failed: {0}")]
    Supervise(#[from] SuperviseError),
}

/// Builds the `docker run` arguments. `init` is the host path of the execute-only copy of
/// `docker-init` to run as PID 1; `seccomp_profile` is the path the CLI reads Palisade's profile
/// from (`None`: the plan does not filter syscalls; Docker's default profile applies);
/// `observe_socket` is the host path of the observer's listening socket when the stub installs
/// the observed filter ([`DockerSpec::stub`]; the profile is then
/// [`seccomp::oci_profile_beneath_observer`]).
pub fn argv(
    plan: &LaunchPlan,
    facts: &FsFacts,
    spec: &DockerSpec,
    mask_file: &Path,
    init: &Path,
    seccomp_profile: Option<&str>,
    observe_socket: Option<&Path>,
) -> Result<DockerArgs, DockerError> {
    argv_observed(
        plan,
        facts,
        spec,
        mask_file,
        init,
        seccomp_profile,
        observe_socket,
        None,
    )
}

/// [`argv`], with the masks of denied paths bound from `observed_masks` when given: node `i` of
/// [`DockerArgs::denied_masks`] at `observed_masks/i`, a FUSE filesystem the launcher mounts
/// there before `docker run` (`crate::fusemask`), instead of a mode-0000 tmpfs or the mask
/// file. The daemon must be able to see that mount (`allow_other`).
#[allow(
    clippy::too_many_arguments,
    reason = "argv's seven, plus where the observed masks are"
)]
pub fn argv_observed(
    plan: &LaunchPlan,
    facts: &FsFacts,
    spec: &DockerSpec,
    mask_file: &Path,
    init: &Path,
    seccomp_profile: Option<&str>,
    observe_socket: Option<&Path>,
    observed_masks: Option<&Path>,
) -> Result<DockerArgs, DockerError> {
    let stub = match observe_socket {
        Some(socket) => Some((socket, spec.stub.as_ref().ok_or(DockerError::NoStub)?)),
        None => None,
    };
    // The bridge (forwarded host ports, filtered egress): the container's own network
    // namespace, and the private tmpfs its sockets and program are mounted on (as under bwrap).
    let bridge = bwrap::bridge(plan, facts)?;
    if !valid_image_id(&spec.image_id) {
        return Err(DockerError::ImageId(spec.image_id.clone()));
    }
    if spec.run_id.is_empty()
        || spec.run_id.len() > 100
        || !spec
            .run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(DockerError::RunId(spec.run_id.clone()));
    }
    let mut binds = Vec::new();
    for path in &spec.read_only_binds {
        let fact = fsfacts::resolve(path)?;
        if !path.is_absolute() || !matches!(fact.kind, PathKind::Dir | PathKind::File { .. }) {
            return Err(DockerError::ReadOnlyBind(path.clone()));
        }
        binds.push(fact.real);
    }
    let filesystem = bwrap::filesystem(plan, facts, &binds)?;

    let mut args = Args::default();
    args.flag("run");
    // No `--rm`: palisade removes the container itself ([`run::remove`]), after asking the
    // daemon whether the kernel's out-of-memory killer acted in it (a memory budget reached
    // inside the container), which only a container that still exists can answer.
    args.flag("-i");
    args.op("--pull", "never");
    args.op("--name", spec.container_name());
    args.op("--label", format!("{RUN_LABEL}={}", spec.run_id));
    args.op("--label", format!("{UID_LABEL}={}", facts.uid));
    args.op(
        "--network",
        match plan.network {
            Network::None | Network::OwnLoopback(_) => "none",
            Network::AllowOutbound => "host",
            // Refused by `bwrap::bridge` above.
            Network::HostLoopback => return Err(BwrapError::HostLoopback.into()),
        },
    );
    if let Network::OwnLoopback(_) = plan.network {
        // Docker disables IPv6 in a container by default, so its loopback would have no ::1;
        // bwrap's has one, and `loopback-only` means 127.0.0.1 and ::1 alike.
        args.op("--sysctl", "net.ipv6.conf.lo.disable_ipv6=0");
    }
    args.op("--user", format!("{}:{}", facts.uid, facts.gid));
    args.op("--cap-drop", "ALL");
    args.op("--security-opt", "no-new-privileges");
    if let Some(profile) = seccomp_profile {
        args.op("--security-opt", format!("seccomp={profile}"));
    }
    args.op("--ipc", "private");
    args.op("--cgroupns", "private");
    args.op("--log-driver", "none");
    args.flag("--no-healthcheck");

    let limits = limits(&plan.budgets);
    if let Some(bytes) = limits.memory_bytes {
        args.op("--memory", bytes.to_string());
        args.op("--memory-swap", bytes.to_string());
    }
    if let Some(pids) = limits.pids {
        args.op("--pids-limit", pids.to_string());
    }
    if let Some(seconds) = limits.cpu_seconds_per_process {
        args.op("--ulimit", format!("cpu={seconds}:{seconds}"));
    }

    // Mounts: where the host is visible at all, then the bwrap plan spelled for Docker.
    let mut visible: Vec<PathBuf> = binds;
    let mut mounts: BTreeMap<PathBuf, DockerMount> = BTreeMap::new();
    let mut read_only_root = false;
    for mount in &filesystem.mounts {
        if let Mount::Writable(path) = mount {
            visible.push(path.clone());
        }
    }
    // The init's mountpoint is created where it is bound: never in something of the host's.
    if let Some(host) = visible
        .iter()
        .find(|path| Path::new(INIT_IN_CONTAINER).starts_with(path))
    {
        return Err(DockerError::InitTarget(host.clone()));
    }
    // Paths the plan itself names get their masks wherever they are (outside every bind they
    // hide the image's path of the same name, which is harmless); host sockets only where the
    // host is visible.
    let named: BTreeSet<&PathBuf> = plan
        .denied_read_paths
        .iter()
        .chain(&plan.protected_paths)
        .filter_map(|path| facts.paths.get(path).map(|fact| &fact.real))
        .collect();
    let shows_host = |path: &Path| visible.iter().any(|root| path.starts_with(root));
    // A denied path's observed mask: its node under `observed_masks`.
    let observed = |path: &Path, dir: bool| {
        let root = observed_masks?;
        filesystem
            .denied_masks
            .iter()
            .position(|m| m.target == path && m.dir == dir)
            .map(|i| root.join(i.to_string()))
    };
    for mount in filesystem.mounts {
        let (path, mount) = match mount {
            Mount::Root { writable } => {
                read_only_root = !writable;
                continue;
            }
            // Docker brings its own /dev, /proc (with /proc/sys read-only) and, with
            // `--ipc private`, its own /dev/shm.
            Mount::Dev(_) | Mount::Proc(_) | Mount::ProcCover { .. } => continue,
            Mount::Tmpfs(path) if path == Path::new("/dev/shm") => continue,
            Mount::Tmpfs(path) => (path, DockerMount::Tmpfs),
            Mount::Writable(path) => (path, DockerMount::Bind { rw: true }),
            // A host file bound back read-only (resolv.conf under a private /run) or an
            // existing protected path: only where the host is visible at all.
            Mount::ReadOnly(path) if shows_host(&path) => (path, DockerMount::Bind { rw: false }),
            Mount::ReadOnly(_) => continue,
            Mount::Placeholder(path) => (path, DockerMount::Bind { rw: false }),
            Mount::DenyDir(path) => match observed(&path, true) {
                Some(node) => (path, DockerMount::Observed(node)),
                None => (path, DockerMount::Tmpfs0000),
            },
            Mount::Null(path) if shows_host(&path) || named.contains(&path) => {
                match observed(&path, false) {
                    Some(node) => (path, DockerMount::Observed(node)),
                    None => (path, DockerMount::MaskFile),
                }
            }
            Mount::Null(_) => continue,
            Mount::HostSocket { target, path } => (path, DockerMount::HostSocket(target)),
        };
        mounts.insert(path, mount);
    }
    if read_only_root {
        args.flag("--read-only");
    }
    // Docker orders mounts by depth itself; emit them that way too, so the argv reads as the
    // container is built.
    let mut ordered: Vec<(&PathBuf, &DockerMount)> = mounts.iter().collect();
    ordered.sort_by_key(|(path, _)| path.components().count());
    for (path, mount) in ordered {
        let target = mount_path(path)?;
        match mount {
            DockerMount::Bind { rw } => args.op(
                "--mount",
                format!(
                    "type=bind,source={target},target={target}{}",
                    if *rw { "" } else { ",readonly" }
                ),
            ),
            DockerMount::MaskFile => args.op(
                "--mount",
                format!(
                    "type=bind,source={},target={target},readonly",
                    mount_path(mask_file)?
                ),
            ),
            DockerMount::Tmpfs => args.op(
                "--tmpfs",
                format!("{target}:rw,nosuid,nodev,exec,mode=1777"),
            ),
            DockerMount::Tmpfs0000 => args.op(
                "--tmpfs",
                format!("{target}:ro,nosuid,nodev,noexec,mode=000"),
            ),
            // Read-write, so that writes reach the mask's server (which refuses them) instead
            // of failing unobserved with `EROFS`.
            DockerMount::Observed(node) => args.op(
                "--mount",
                format!("type=bind,source={},target={target}", mount_path(node)?),
            ),
            // An allowed host socket at the path the command connects to.
            DockerMount::HostSocket(socket) => args.op(
                "--mount",
                format!("type=bind,source={},target={target}", mount_path(socket)?),
            ),
        }
    }
    if let Some(bridge) = bridge {
        // The bridge's sockets and the static bridge program, read-only on the container's
        // private /run (a read-only bind still accepts `connect`).
        for bind in &bridge.binds {
            args.op(
                "--mount",
                format!(
                    "type=bind,source={},target={},readonly",
                    mount_path(&bind.source)?,
                    mount_path(&bind.target)?
                ),
            );
        }
    }
    args.op(
        "--mount",
        format!(
            "type=bind,source={},target={INIT_IN_CONTAINER},readonly",
            mount_path(init)?
        ),
    );
    if let Some((socket, program)) = stub {
        for (source, target) in [
            (program.as_path(), STUB_IN_CONTAINER),
            (socket, OBSERVE_SOCKET_IN_CONTAINER),
        ] {
            args.op(
                "--mount",
                format!(
                    "type=bind,source={},target={target},readonly",
                    mount_path(source)?
                ),
            );
        }
    }
    args.op("--workdir", mount_path(&filesystem.workspace)?);

    let mut env = Vec::new();
    for (name, value) in &plan.env {
        let bytes = name.as_bytes();
        if bytes.starts_with(b"DOCKER_") || bytes.is_empty() || bytes.contains(&b'=') {
            return Err(DockerError::ClientEnv(name.clone()));
        }
        args.op("--env", name.clone());
        env.push((name.clone(), value.clone()));
    }
    env.push((
        OsString::from("DOCKER_HOST"),
        docker_host_value(&spec.socket),
    ));
    // No user configuration: `~/.docker/config.json` can inject proxy variables into every
    // container. The directory does not exist; the CLI then uses its defaults.
    env.push((
        OsString::from("DOCKER_CONFIG"),
        plan.run_temp_dir
            .join(".palisade-no-docker-config")
            .into_os_string(),
    ));

    if plan.command.is_empty() {
        return Err(BwrapError::EmptyCommand.into());
    }
    // `docker-init -- [STUB …] PROGRAM ARGS…`: the init is the entrypoint; it runs the stub,
    // which installs the observed filter and execs the command, behind the bridge when there is
    // one (it listens on the container's loopback, detaches, and execs the command, looked up in
    // the image's PATH as Docker's entrypoint would be).
    args.op("--entrypoint", INIT_IN_CONTAINER);
    args.flag(&spec.image_id);
    args.flag("--");
    if stub.is_some() {
        args.0.extend(
            [
                STUB_IN_CONTAINER,
                bwrap::SUBCOMMAND_SANDBOX_EXEC,
                "--mechanism",
                "docker",
                "--reach",
                bwrap::reach_name(plan.network.reach()),
                "--observe-socket",
                OBSERVE_SOCKET_IN_CONTAINER,
                "--",
            ]
            .map(OsString::from),
        );
    }
    let bridge = bridge.map_or(&[][..], |bridge| bridge.argv.as_slice());
    args.0.extend(bridge.iter().chain(&plan.command).cloned());
    Ok(DockerArgs {
        args: args.0,
        env,
        created_mountpoints: filesystem.created_mountpoints,
        placeholders: filesystem.placeholders,
        limits,
        denied_masks: filesystem.denied_masks,
    })
}

/// `unix://PATH`, as the CLI wants it.
pub fn docker_host_value(socket: &Path) -> OsString {
    let mut value = OsString::from("unix://");
    value.push(socket.as_os_str());
    value
}

/// The budgets Docker enforces.
pub fn limits(budgets: &Budgets) -> Limits {
    Limits {
        memory_bytes: budgets.memory_bytes,
        // docker-init is PID 1 of the container and counts: the plan's launcher process.
        pids: budgets
            .max_processes
            .map(|n| n.saturating_add(budgets.launcher_processes)),
        cpu_seconds_per_process: budgets.cpu_seconds,
    }
}

/// `sha256:` and 64 lowercase hex digits.
pub fn valid_image_id(id: &str) -> bool {
    id.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum DockerMount {
    Bind {
        rw: bool,
    },
    MaskFile,
    Tmpfs,
    Tmpfs0000,
    /// A denied path's observed mask: this FUSE node.
    Observed(PathBuf),
    /// An allowed host socket: this one, of the host's.
    HostSocket(PathBuf),
}

/// A path as it may appear in `--mount` and `--tmpfs` values: those split on `,` and `:`.
fn mount_path(path: &Path) -> Result<String, DockerError> {
    let text = path
        .to_str()
        .filter(|text| !text.contains([',', ':', '"', '\n', '\r', '\0']))
        .ok_or_else(|| DockerError::PathSyntax(path.to_path_buf()))?;
    Ok(text.to_owned())
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn flag(&mut self, flag: &str) {
        self.0.push(flag.into());
    }

    fn op(&mut self, flag: &str, value: impl Into<OsString>) {
        self.0.push(flag.into());
        self.0.push(value.into());
    }
}

#[cfg(test)]
mod tests;
