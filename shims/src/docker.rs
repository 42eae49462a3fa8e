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
//! - `run --rm --init -i --pull never --entrypoint CMD IMAGE_ID ARGS…`: the pinned image by its
//!   ID (never a tag, never pulled); the command exactly as given (the image's entrypoint is
//!   replaced, not wrapped); `docker-init` as PID 1 reaps orphans and forwards signals; stdin is
//!   passed through as for the other backends.
//! - `--name palisade-<run id>` and labels `dev.palisade.run`: the name is how the container
//!   is removed; a run's container is never looked up by anything the command can influence.
//! - `--user UID:GID` of the invoking user, `-w WORKSPACE`, `--cap-drop ALL`,
//!   `--security-opt no-new-privileges`, `--security-opt seccomp=…` with Palisade's own rules
//!   ([`crate::seccomp::oci_profile`]) when the plan asks for syscall filtering (otherwise
//!   Docker's default profile stays), `--ipc private` (its own `/dev/shm`), `--cgroupns
//!   private`, `--log-driver none` (the command's output is not kept by the daemon),
//!   `--no-healthcheck`. Never `--privileged`, `--cap-add`, a device or a host namespace other
//!   than the network below.
//! - Network: `none` → `--network none`; `loopback-only` → `--network none` as well (Docker
//!   gives the container its own network namespace with only `lo` up: the container's
//!   loopback, not the host's); `allow-outbound` → `--network host` (the host's network
//!   namespace, as bwrap's `allow-outbound`: the daemon Palisade targets runs with
//!   `--bridge=none`, so there is no default bridge to fall back on, and the plan asked for
//!   unrestricted traffic). A domain allowlist (the plan's egress proxy) → `--network none`,
//!   the proxy's Unix socket and the static `palisade-bridge` bound read-only on the private
//!   `/run` (at bwrap's paths), and the bridge as the entrypoint: it listens on the container's
//!   `127.0.0.1:<port>`, detaches, and execs the command, which reaches the outside only through
//!   the host's filtering proxy. The bridge is static because an image need not have the host's
//!   libc; the host checks that it is (see the probe).
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
//!   root get bwrap's stand-ins: an empty read-only mode-0555 tmpfs (a directory) or an empty
//!   mode-0000 file bound read-only (a file), at the first missing component, so the command
//!   cannot create them;
//! - denied directories: an empty read-only mode-0000 tmpfs; denied files, missing protected
//!   files and host sockets inside a bind: an empty mode-0000 file ([`mask_file`]) bound
//!   read-only (unreadable, unwritable, not a socket).
//!
//! Docker sorts mounts by depth itself, so a deeper mask always lands on top of the bind it
//! hides; two mounts at one path keep the later one.
//!
//! # Cleanup
//!
//! Killing `docker run` does not stop the container. [`run`] therefore, after the client ended
//! (exit, wall clock, a forwarded signal), removes the container over the daemon's API
//! (`DELETE /containers/NAME?force=1`) and checks it is gone. For the case where palisade
//! itself dies (SIGKILL included) before that, a *reaper* is started first: a detached `sh`
//! (not palisade's child, not in its process group) blocked reading a pipe whose only writer
//! is palisade. Palisade writes `done` once it removed the container itself; if the pipe hits
//! end-of-file instead, palisade died, and the reaper runs `docker rm -f NAME` until the
//! container is gone (a few attempts a second apart, which also catches a container the killed
//! client was still creating). The launched client has a parent-death signal, so it dies
//! with palisade too.
//!
//! # Known limits
//!
//! - Read-only binds are not recursively read-only on Docker 20.10: a submount inside a
//!   read-only bind keeps its own flags.
//! - The runtime's libseccomp ignores syscalls it does not know (`open_tree_attr` with
//!   Debian 12's 2.5.4); the dropped capabilities cover those that need privilege.
//! - Access to the Docker socket is root-equivalent: the backend is meant for root or members
//!   of the `docker` group, and the container's uid is the caller's.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::bwrap::{self, BwrapError, Mount};
use crate::fsfacts::{self, FsFacts, PathKind};
use crate::plan::{Budgets, LaunchPlan, Network};
use crate::seccomp;
#[cfg(target_os = "linux")]
use crate::supervise::{self, Launch, LaunchKind, PassFd};
use crate::supervise::{Outcome, SuperviseError};

/// The label every palisade container carries, with the run id as its value.
pub const RUN_LABEL: &str = "dev.palisade.run";

/// Where the CLI reads the seccomp profile from: the descriptor [`run`] passes it on.
pub const SECCOMP_FD: i32 = 3;

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
    /// The limits passed to Docker, for the record.
    pub limits: Limits,
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
    #[error("cannot build the seccomp profile: {0}")]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("cannot measure the filesystem: {0}")]
    Facts(#[from] fsfacts::FsFactsError),
    #[error("cannot prepare the run: {what}: {source}")]
    Setup {
        what: &'static str,
        source: io::Error,
    },
    #[error("the supervisor failed: {0}")]
    Supervise(#[from] SuperviseError),
}

/// Builds the `docker run` arguments. `seccomp_profile` is the path the CLI reads Palisade's
/// profile from (`None`: the plan does not filter syscalls; Docker's default profile applies).
pub fn argv(
    plan: &LaunchPlan,
    facts: &FsFacts,
    spec: &DockerSpec,
    mask_file: &Path,
    seccomp_profile: Option<&str>,
) -> Result<DockerArgs, DockerError> {
    // Filtered egress: the container's own network namespace, and the private tmpfs the
    // socket and bridge are mounted on (as under bwrap).
    let egress = bwrap::egress(plan, facts)?;
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
    args.flag("--rm");
    args.flag("--init");
    args.flag("-i");
    args.op("--pull", "never");
    args.op("--name", spec.container_name());
    args.op("--label", format!("{RUN_LABEL}={}", spec.run_id));
    args.op(
        "--network",
        match plan.network {
            Network::None | Network::LoopbackOnly | Network::Filtered(_) => "none",
            Network::AllowOutbound => "host",
        },
    );
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
            Mount::DenyDir(path) => (path, DockerMount::Tmpfs0000),
            Mount::EmptyDir(path) => (path, DockerMount::Tmpfs0555),
            Mount::Null(path) if shows_host(&path) || named.contains(&path) => {
                (path, DockerMount::MaskFile)
            }
            Mount::Null(_) => continue,
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
            DockerMount::Tmpfs0555 => args.op(
                "--tmpfs",
                format!("{target}:ro,nosuid,nodev,noexec,mode=555"),
            ),
        }
    }
    if let Some(egress) = egress {
        // The proxy's socket and the static bridge, read-only on the container's private /run
        // (a read-only bind still accepts `connect`).
        for bind in &egress.binds {
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

    let Some((program, rest)) = plan.command.split_first() else {
        return Err(BwrapError::EmptyCommand.into());
    };
    match egress.and_then(|egress| egress.bridge_argv.split_first()) {
        // The bridge listens on the container's loopback, detaches, and execs the command
        // (looked up in the image's PATH, as Docker's entrypoint would be).
        Some((bridge, bridge_args)) => {
            args.op("--entrypoint", bridge.clone());
            args.flag(&spec.image_id);
            args.0.extend(bridge_args.iter().cloned());
            args.0.push(program.clone());
        }
        None => {
            args.op("--entrypoint", program.clone());
            args.flag(&spec.image_id);
        }
    }
    args.0.extend(rest.iter().cloned());
    Ok(DockerArgs {
        args: args.0,
        env,
        created_mountpoints: filesystem.created_mountpoints,
        limits,
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
        // docker-init is PID 1 of the container and counts.
        pids: budgets.max_processes.map(|n| n.saturating_add(1)),
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DockerMount {
    Bind { rw: bool },
    MaskFile,
    Tmpfs,
    Tmpfs0000,
    Tmpfs0555,
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

// ---------------------------------------------------------------------------------------------
// The run.

/// How the container was removed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Removal {
    /// `--rm` had already removed it when the client exited.
    AlreadyGone,
    /// Palisade removed it (force: it was still running or stopping).
    Removed,
    /// The daemon did not confirm removal; the reaper keeps trying.
    Failed(String),
}

/// A finished Docker run.
#[derive(Clone, Debug)]
pub struct DockerOutcome {
    /// The supervised CLI: its status is the container's (`docker run` passes it through).
    pub outcome: Outcome,
    pub container: String,
    pub removal: Removal,
    pub limits: Limits,
    /// Mountpoints the runtime created on the host that could not be removed.
    pub mountpoints_left: Vec<PathBuf>,
    /// Rules in Palisade's seccomp profile, when one was passed.
    pub seccomp_rules: Option<usize>,
}

/// How long removing the container over the API may take.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(30);

/// Launches the container under the supervisor, then removes it and the mountpoints the
/// runtime created. The container is removed even when the supervisor fails. Linux only: the
/// supervisor is (the Docker backend is probed and offered on Linux hosts only).
#[cfg(target_os = "linux")]
pub fn run(
    plan: &LaunchPlan,
    spec: &DockerSpec,
    options: &supervise::SuperviseOptions,
) -> Result<DockerOutcome, DockerError> {
    let setup = |what| move |source| DockerError::Setup { what, source };
    let facts = fsfacts::measure(plan)?;
    let mask = MaskFile::create(&plan.run_temp_dir).map_err(setup("mask file"))?;
    let mut fds = Vec::new();
    let mut seccomp_rules = None;
    let profile_path = format!("/dev/fd/{SECCOMP_FD}");
    if plan.syscall_filter {
        let profile =
            seccomp::oci_profile(seccomp::Arch::native()?, &seccomp::Profile::for_plan(plan))?;
        seccomp_rules = profile
            .get("syscalls")
            .and_then(serde_json::Value::as_array)
            .map(Vec::len);
        let fd = supervise::data_fd("palisade-docker-seccomp", profile.to_string().as_bytes())
            .map_err(setup("seccomp profile"))?;
        fds.push(PassFd {
            fd,
            target: SECCOMP_FD,
        });
    }
    let built = argv(
        plan,
        &facts,
        spec,
        mask.path(),
        plan.syscall_filter.then_some(profile_path.as_str()),
    )?;
    let name = spec.container_name();
    let reaper = Reaper::start(&spec.cli, &spec.socket, &name).map_err(setup("reaper"))?;

    let launch = Launch {
        program: spec.cli.clone(),
        args: built.args,
        env: built.env,
        cwd: Some(PathBuf::from("/")),
        fds,
        kind: LaunchKind::Plain,
    };
    // Memory, processes and CPU are the container's (its cgroup, its rlimits); the client is
    // one small process, so only the wall clock applies to it.
    let budgets = Budgets {
        wall_clock: plan.budgets.wall_clock,
        ..Budgets::default()
    };
    let supervised = supervise::run(launch, &budgets, options);

    let removal = remove(&spec.socket, &name);
    if matches!(removal, Removal::AlreadyGone | Removal::Removed) {
        reaper.dismiss();
    }
    let mountpoints_left = fsfacts::cleanup_created(&built.created_mountpoints);
    drop(mask);
    let outcome = match supervised {
        Ok(outcome) => outcome,
        Err(SuperviseError::TreeNotEmpty { remaining, outcome }) => {
            return Err(SuperviseError::TreeNotEmpty { remaining, outcome }.into());
        }
        Err(other) => return Err(other.into()),
    };
    Ok(DockerOutcome {
        outcome,
        container: name,
        removal,
        limits: built.limits,
        mountpoints_left,
        seccomp_rules,
    })
}

/// Force-removes container `name` over the API and says whether it is gone.
pub fn remove(socket: &Path, name: &str) -> Removal {
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    let target = format!("/containers/{name}?force=1&v=1");
    match request(socket, "DELETE", &target, deadline) {
        Ok(204) => Removal::Removed,
        Ok(404) => Removal::AlreadyGone,
        // 409: removal already in progress (`--rm` racing us); wait for it to finish.
        Ok(409) => loop {
            match request(socket, "GET", &format!("/containers/{name}/json"), deadline) {
                Ok(404) => break Removal::AlreadyGone,
                Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                Ok(status) => break Removal::Failed(format!("still there (http {status})")),
                Err(error) => break Removal::Failed(error.to_string()),
            }
        },
        Ok(status) => Removal::Failed(format!("DELETE returned http {status}")),
        Err(error) => Removal::Failed(error.to_string()),
    }
}

/// Whether container `name` exists (`None`: the daemon did not answer).
pub fn exists(socket: &Path, name: &str) -> Option<bool> {
    let deadline = Instant::now() + Duration::from_secs(10);
    match request(socket, "GET", &format!("/containers/{name}/json"), deadline) {
        Ok(404) => Some(false),
        Ok(200) => Some(true),
        _ => None,
    }
}

/// One HTTP/1.0 request on the daemon's socket; the status code. Bodies are not needed.
fn request(socket: &Path, method: &str, target: &str, deadline: Instant) -> io::Result<u16> {
    let left = || {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(io::Error::from(io::ErrorKind::TimedOut))
        } else {
            Ok(left)
        }
    };
    let mut stream = UnixStream::connect(socket)?;
    stream.set_write_timeout(Some(left()?))?;
    stream.write_all(
        format!("{method} {target} HTTP/1.0\r\nHost: docker\r\nUser-Agent: palisade\r\n\r\n")
            .as_bytes(),
    )?;
    let mut head = Vec::new();
    let mut chunk = [0u8; 512];
    while !head.windows(2).any(|w| w == b"\r\n") {
        stream.set_read_timeout(Some(left()?))?;
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(chunk.get(..read).unwrap_or_default());
        if head.len() > 64 * 1024 {
            break;
        }
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let protocol = parts.next().unwrap_or_default();
    let status = parts
        .next()
        .and_then(|code| std::str::from_utf8(code).ok())
        .and_then(|code| code.parse::<u16>().ok());
    match status {
        Some(status) if protocol.starts_with(b"HTTP/1.") => Ok(status),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an http response from the docker daemon",
        )),
    }
}

#[cfg(target_os = "linux")]
/// An empty mode-0000 file next to the run's temp dir (in palisade's private per-user
/// directory, outside every bind): the source of every file mask. Removed on drop.
struct MaskFile(PathBuf);

#[cfg(target_os = "linux")]
impl MaskFile {
    fn create(run_temp_dir: &Path) -> io::Result<MaskFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut name = run_temp_dir
            .file_name()
            .map(std::ffi::OsStr::to_os_string)
            .unwrap_or_else(|| OsString::from("run"));
        name.push(".mask");
        let path = run_temp_dir.with_file_name(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o000)
            .open(&path)?;
        Ok(MaskFile(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

#[cfg(target_os = "linux")]
impl Drop for MaskFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(target_os = "linux")]
/// The detached process that removes the container if palisade dies first (module docs).
struct Reaper {
    writer: Option<io::PipeWriter>,
}

#[cfg(target_os = "linux")]
/// The reaper's script: `$0` the CLI, `$1` the container. One line `done` on stdin dismisses
/// it; end-of-file means palisade died.
const REAPER_SCRIPT: &str = r#"read -r line; [ "$line" = done ] && exit 0
n=0
while [ "$n" -lt 30 ]; do
    "$0" rm -f "$1" >/dev/null 2>&1
    sleep 1
    "$0" container inspect "$1" >/dev/null 2>&1 || exit 0
    n=$((n + 1))
done
exit 1"#;

#[cfg(target_os = "linux")]
impl Reaper {
    fn start(cli: &Path, socket: &Path, name: &str) -> io::Result<Reaper> {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let (reader, writer) = io::pipe()?;
        // `setsid -f` forks: the reaper is re-parented away from palisade (so no supervisor's
        // kill loop or wait reaches it) and leaves palisade's session and process group (so a
        // Ctrl-C or a hang-up meant for palisade does not kill it).
        let mut child = Command::new("setsid")
            .arg("-f")
            .arg("sh")
            .arg("-c")
            .arg(REAPER_SCRIPT)
            .arg(cli)
            .arg(name)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("DOCKER_HOST", docker_host_value(socket))
            .stdin(Stdio::from(reader))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let status = child.wait()?;
        if !status.success() {
            return Err(io::Error::other(format!("setsid -f exited with {status}")));
        }
        Ok(Reaper {
            writer: Some(writer),
        })
    }

    /// Palisade removed the container itself: the reaper exits without doing anything.
    fn dismiss(mut self) {
        if let Some(mut writer) = self.writer.take() {
            let _ = writer.write_all(b"done\n");
        }
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
    use super::*;
    use crate::fsfacts::PathFact;
    use crate::plan::Mechanism;

    const IMAGE: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn spec() -> DockerSpec {
        DockerSpec {
            cli: PathBuf::from("/usr/bin/docker"),
            socket: PathBuf::from("/run/palisade-dockerd/docker.sock"),
            image_id: IMAGE.into(),
            run_id: "18a2b3c4d5e6f7-4242".into(),
            read_only_binds: Vec::new(),
        }
    }

    fn plan(network: Network) -> LaunchPlan {
        LaunchPlan {
            mechanism: Mechanism::Docker,
            network,
            workspace: PathBuf::from("/home/u/ws"),
            writable_roots: vec![PathBuf::from("/home/u/ws"), PathBuf::from("/tmp/run-1")],
            read_only_root: true,
            denied_read_paths: vec![
                PathBuf::from("/home/u/.ssh"),
                PathBuf::from("/home/u/.netrc"),
                PathBuf::from("/home/u/ws/.env"),
            ],
            protected_paths: vec![
                PathBuf::from("/home/u/ws/.github"),
                PathBuf::from("/home/u/ws/AGENTS.md"),
                PathBuf::from("/home/u/ws/.loopwright/policies"),
            ],
            syscall_filter: true,
            command: vec!["make".into(), "test".into(), "--secret-looking=no".into()],
            env: vec![
                ("HOME".into(), "/home/u".into()),
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("TMPDIR".into(), "/tmp/run-1".into()),
            ],
            run_temp_dir: PathBuf::from("/tmp/run-1"),
            budgets: Budgets {
                wall_clock: Some(Duration::from_secs(60)),
                memory_bytes: Some(256 << 20),
                max_processes: Some(64),
                cpu_seconds: Some(30),
            },
        }
    }

    fn fact(kind: PathKind, real: &str) -> PathFact {
        PathFact {
            kind,
            real: PathBuf::from(real),
            symlinks: Vec::new(),
        }
    }

    fn missing(real: &str, first_missing: &str) -> PathFact {
        fact(
            PathKind::Missing {
                first_missing: PathBuf::from(first_missing),
                parent_is_dir: true,
            },
            real,
        )
    }

    fn facts() -> FsFacts {
        let mut paths = BTreeMap::new();
        for (path, fact) in [
            ("/home/u/ws", fact(PathKind::Dir, "/home/u/ws")),
            ("/tmp/run-1", fact(PathKind::Dir, "/tmp/run-1")),
            ("/home/u/.ssh", fact(PathKind::Dir, "/home/u/.ssh")),
            (
                "/home/u/.netrc",
                fact(PathKind::File { hard_links: 1 }, "/home/u/.netrc"),
            ),
            (
                "/home/u/ws/.env",
                missing("/home/u/ws/.env", "/home/u/ws/.env"),
            ),
            (
                "/home/u/ws/.github",
                fact(PathKind::Dir, "/home/u/ws/.github"),
            ),
            (
                "/home/u/ws/AGENTS.md",
                missing("/home/u/ws/AGENTS.md", "/home/u/ws/AGENTS.md"),
            ),
            (
                "/home/u/ws/.loopwright/policies",
                missing("/home/u/ws/.loopwright/policies", "/home/u/ws/.loopwright"),
            ),
        ] {
            paths.insert(PathBuf::from(path), fact);
        }
        FsFacts {
            uid: 1000,
            gid: 1000,
            paths,
            private_dirs: vec![
                PathBuf::from("/run"),
                PathBuf::from("/tmp"),
                PathBuf::from("/var/tmp"),
            ],
            resolv_conf: Some(PathBuf::from("/run/systemd/resolve/stub-resolv.conf")),
            host_sockets: vec![
                PathBuf::from("/home/u/ws/agent.sock"),
                PathBuf::from("/var/lib/thing/outside.sock"),
            ],
            abstract_sockets: Vec::new(),
            unlocated_sockets: Vec::new(),
        }
    }

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn build(plan: &LaunchPlan, spec: &DockerSpec) -> DockerArgs {
        argv(
            plan,
            &facts(),
            spec,
            Path::new("/tmp/run-1.mask"),
            plan.syscall_filter.then_some("/dev/fd/3"),
        )
        .unwrap()
    }

    #[test]
    fn typical_plan() {
        let built = build(&plan(Network::None), &spec());
        insta::assert_json_snapshot!("typical_plan", strings(&built.args));
        assert_eq!(
            built.created_mountpoints,
            [
                PathBuf::from("/home/u/ws/.loopwright"),
                PathBuf::from("/home/u/ws/AGENTS.md"),
                PathBuf::from("/home/u/ws/.env"),
                PathBuf::from("/home/u/ws/agent.sock"),
            ]
        );
    }

    #[test]
    fn values_never_reach_the_argv() {
        let mut plan = plan(Network::None);
        plan.env.push(("API_TOKEN".into(), "s3cr3t-value".into()));
        let built = build(&plan, &spec());
        let args = strings(&built.args);
        assert!(!args.iter().any(|a| a.contains("s3cr3t")));
        let at = args.iter().position(|a| a == "API_TOKEN").unwrap();
        assert_eq!(args[at - 1], "--env");
        let env: BTreeMap<_, _> = built.env.into_iter().collect();
        assert_eq!(
            env[&OsString::from("API_TOKEN")],
            OsString::from("s3cr3t-value")
        );
        assert_eq!(
            env[&OsString::from("DOCKER_HOST")],
            OsString::from("unix:///run/palisade-dockerd/docker.sock")
        );
    }

    #[test]
    fn network_modes() {
        let network = |mode| {
            let args = strings(&build(&plan(mode), &spec()).args);
            let at = args.iter().position(|a| a == "--network").unwrap();
            args[at + 1].clone()
        };
        assert_eq!(network(Network::None), "none");
        assert_eq!(network(Network::LoopbackOnly), "none");
        assert_eq!(network(Network::AllowOutbound), "host");
    }

    fn egress() -> crate::plan::EgressProxy {
        crate::plan::EgressProxy {
            binds: vec![
                crate::plan::ReadOnlyBind {
                    source: "/tmp/run-1-egress/proxy.sock".into(),
                    target: "/run/palisade-egress/proxy.sock".into(),
                },
                crate::plan::ReadOnlyBind {
                    source: "/usr/local/lib/palisade/palisade-bridge".into(),
                    target: "/run/palisade-egress/palisade".into(),
                },
            ],
            bridge_argv: [
                "/run/palisade-egress/palisade",
                "__proxy-bridge",
                "--port",
                "3128",
                "--socket",
                "/run/palisade-egress/proxy.sock",
                "--",
            ]
            .map(OsString::from)
            .to_vec(),
        }
    }

    #[test]
    fn filtered_egress_runs_the_static_bridge_as_the_entrypoint() {
        let plan = plan(Network::Filtered(egress()));
        let args = strings(&build(&plan, &spec()).args);
        let at = args.iter().position(|a| a == "--network").unwrap();
        assert_eq!(args[at + 1], "none", "the container's own loopback only");
        for mount in [
            "type=bind,source=/tmp/run-1-egress/proxy.sock,target=/run/palisade-egress/proxy.sock,readonly",
            "type=bind,source=/usr/local/lib/palisade/palisade-bridge,target=/run/palisade-egress/palisade,readonly",
        ] {
            let at = args.iter().position(|a| a == mount).unwrap();
            assert_eq!(args[at - 1], "--mount");
        }
        let image = args.iter().position(|a| a == &spec().image_id).unwrap();
        assert_eq!(
            args[image - 2..image],
            ["--entrypoint", "/run/palisade-egress/palisade"]
        );
        assert_eq!(
            args[image + 1..],
            [
                "__proxy-bridge",
                "--port",
                "3128",
                "--socket",
                "/run/palisade-egress/proxy.sock",
                "--",
                "make",
                "test",
                "--secret-looking=no"
            ]
        );
    }

    #[test]
    fn filtered_egress_needs_a_private_run() {
        let plan = plan(Network::Filtered(egress()));
        let mut facts = facts();
        facts.private_dirs.retain(|d| d != Path::new("/run"));
        let built = argv(&plan, &facts, &spec(), Path::new("/tmp/run-1.mask"), None);
        assert!(matches!(
            built,
            Err(DockerError::Plan(BwrapError::EgressBindNotPrivate(_)))
        ));
    }

    #[test]
    fn read_only_binds_show_the_host_and_its_sockets_get_masked() {
        let dir = tempfile::tempdir().unwrap();
        let bound = dir.path().canonicalize().unwrap();
        let mut facts = facts();
        let socket = bound.join("s.sock");
        facts.host_sockets.push(socket.clone());
        let spec = DockerSpec {
            read_only_binds: vec![bound.clone()],
            ..spec()
        };
        let plan = plan(Network::None);
        let args = strings(
            &argv(&plan, &facts, &spec, Path::new("/m"), None)
                .unwrap()
                .args,
        );
        let bound = bound.display().to_string();
        assert!(args.contains(&format!("type=bind,source={bound},target={bound},readonly")));
        assert!(args.contains(&format!(
            "type=bind,source=/m,target={},readonly",
            socket.display()
        )));
        // A host socket outside every bind is not there to mask.
        assert!(!args.iter().any(|a| a.contains("outside.sock")));
        // Without syscall filtering Docker's default profile stays.
        assert!(!args.iter().any(|a| a.starts_with("seccomp=")));
    }

    #[test]
    fn no_budgets_no_limits_and_a_writable_root() {
        let mut plan = plan(Network::None);
        plan.budgets = Budgets::default();
        plan.read_only_root = false;
        let args = strings(&build(&plan, &spec()).args);
        for flag in ["--memory", "--pids-limit", "--ulimit", "--read-only"] {
            assert!(!args.iter().any(|a| a == flag), "{flag}");
        }
    }

    #[test]
    fn refusals() {
        let plan = plan(Network::None);
        let fail = |plan: &LaunchPlan, spec: &DockerSpec| {
            argv(plan, &facts(), spec, Path::new("/m"), None).unwrap_err()
        };
        let bad_image = DockerSpec {
            image_id: "busybox:latest".into(),
            ..spec()
        };
        assert!(matches!(fail(&plan, &bad_image), DockerError::ImageId(_)));
        let bad_run = DockerSpec {
            run_id: "x y".into(),
            ..spec()
        };
        assert!(matches!(fail(&plan, &bad_run), DockerError::RunId(_)));
        let mut client_env = plan.clone();
        client_env
            .env
            .push(("DOCKER_HOST".into(), "tcp://evil:2375".into()));
        assert!(matches!(
            fail(&client_env, &spec()),
            DockerError::ClientEnv(_)
        ));
        let mut empty = plan.clone();
        empty.command.clear();
        assert!(matches!(
            fail(&empty, &spec()),
            DockerError::Plan(BwrapError::EmptyCommand)
        ));
        assert!(matches!(
            mount_path(Path::new("/a,b")),
            Err(DockerError::PathSyntax(_))
        ));
        assert!(matches!(
            mount_path(Path::new("/a:b")),
            Err(DockerError::PathSyntax(_))
        ));
        let missing_bind = DockerSpec {
            read_only_binds: vec![PathBuf::from("/nonexistent/palisade/bind")],
            ..spec()
        };
        assert!(matches!(
            fail(&plan, &missing_bind),
            DockerError::ReadOnlyBind(_)
        ));
    }

    #[test]
    fn image_ids() {
        assert!(valid_image_id(IMAGE));
        assert!(!valid_image_id("sha256:ABC"));
        assert!(!valid_image_id(&IMAGE.to_uppercase()));
        assert!(!valid_image_id("busybox"));
    }

    #[test]
    fn seccomp_profile_denies_what_the_bpf_filter_denies() {
        let profile = seccomp::oci_profile(
            seccomp::Arch::X86_64,
            &seccomp::Profile::for_plan(&plan(Network::None)),
        )
        .unwrap();
        insta::assert_json_snapshot!("seccomp_profile_x86_64", profile);
        let rules = seccomp::rules_for(
            seccomp::Arch::X86_64,
            &seccomp::Profile::for_plan(&plan(Network::None)),
        )
        .unwrap();
        let names: BTreeSet<&str> = profile["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["names"][0].as_str().unwrap())
            .collect();
        for rule in rules.iter().filter(|rule| rule.syscall != "*") {
            assert!(names.contains(rule.syscall), "{} missing", rule.syscall);
        }
    }
}
