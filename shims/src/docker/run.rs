//! The supervised run: `docker run` under [`crate::supervise`], then the container removed over
//! the daemon's API whatever happened, with a detached reaper for the case where palisade dies
//! first (see "Cleanup" in the [module documentation](super)).

#[cfg(target_os = "linux")]
use std::ffi::OsString;
#[cfg(target_os = "linux")]
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
use super::{DockerError, DockerSpec, SECCOMP_FD, argv_observed, docker_host_value};
use super::{Limits, api};
#[cfg(target_os = "linux")]
use crate::plan::{Budgets, LaunchPlan};
use crate::supervise::Outcome;
#[cfg(target_os = "linux")]
use crate::supervise::{self, EndReason, Launch, LaunchKind, PassFd, SuperviseError};
#[cfg(target_os = "linux")]
use crate::{fsfacts, placeholder, seccomp};

/// How the container was removed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Removal {
    /// Already gone when palisade came to remove it (the daemon, or a sweep, removed it).
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
    /// Placeholders left in place for a later run to remove: the container's removal was not
    /// confirmed (its mounts must stay), or they could not be removed.
    pub placeholders_left: Vec<PathBuf>,
    /// Rules in Palisade's seccomp profile, when one was passed.
    pub seccomp_rules: Option<usize>,
    /// What the seccomp observer saw, when the stub installed the observed filter
    /// ([`DockerSpec::stub`](super::DockerSpec::stub)).
    #[cfg(target_os = "linux")]
    pub observed: Option<seccomp::observe::Observed>,
    /// What the observed masks of the denied paths saw, when they were mounted.
    #[cfg(target_os = "linux")]
    pub masks_seen: Option<crate::fusemask::Seen>,
    /// Why the denied paths were masked mute although the plan has some.
    pub mask_error: Option<String>,
    /// The masks of denied paths, in node order.
    pub denied_masks: Vec<crate::bwrap::DeniedMask>,
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
    let mask =
        BoundFile::create(&plan.run_temp_dir, ".mask", 0o000, &[]).map_err(setup("mask file"))?;
    // Execute-only: executing a file it cannot read leaves the init not dumpable.
    let bytes = std::fs::read(&spec.init).map_err(setup("reading docker-init"))?;
    let init = BoundFile::create(&plan.run_temp_dir, ".init", 0o111, &bytes)
        .map_err(setup("execute-only docker-init"))?;
    let mut fds = Vec::new();
    let mut seccomp_rules = None;
    let profile_path = format!("/dev/fd/{SECCOMP_FD}");
    let filter = seccomp::Profile::for_plan(plan);
    let arch = seccomp::Arch::native()?;
    // With the static stub, Palisade's own observed filter refuses what the runtime's profile
    // leaves out, and this process records every refusal (see `crate::sandbox_exec`).
    let observed_at = (plan.syscall_filter && spec.stub.is_some())
        .then(|| SocketFile(plan.beside_run_temp_dir(".observe.sock")));
    let observer = match &observed_at {
        Some(path) => {
            let listening =
                crate::unix_socket::bind_listener(path.path()).map_err(setup("observer socket"))?;
            let watch = seccomp::observe::Watch::for_reach(
                plan.network.reach(),
                facts.host_sockets.clone(),
            );
            Some(
                seccomp::observe::Observer::start(
                    seccomp::observe::Channel::Listening(listening),
                    arch,
                    filter,
                    watch,
                )
                .map_err(setup("observer thread"))?,
            )
        }
        None => None,
    };
    if plan.syscall_filter {
        let profile = if observer.is_some() {
            seccomp::oci_profile_beneath_observer(arch, &filter)?
        } else {
            seccomp::oci_profile(arch, &filter)?
        };
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
    // The denied paths are served by observed masks when the daemon can see them (a FUSE
    // node that refuses and records every access; `allow_other`), else by the mute ones.
    let masks_at = plan.beside_run_temp_dir(".masks");
    let built_with = |observed: Option<&Path>| {
        argv_observed(
            plan,
            &facts,
            spec,
            mask.path(),
            init.path(),
            plan.syscall_filter.then_some(profile_path.as_str()),
            observed_at.as_ref().map(SocketFile::path),
            observed,
        )
    };
    let mut built = built_with(Some(&masks_at))?;
    let (mask_server, mask_error) = if built.denied_masks.is_empty() {
        (None, None)
    } else {
        match crate::fusemask::MaskServer::mount_shared(&masks_at, &built.denied_masks) {
            Ok(server) => (Some(server), None),
            Err(err) => {
                built = built_with(None)?;
                (None, Some(err.to_string()))
            }
        }
    };
    // Before the container exists: dropped on any failure below, they are released.
    let placeholders = placeholder::hold(&built.placeholders)?;
    let name = spec.container_name();
    // The reaper shares the placeholders' locks: should palisade be killed, they stay held
    // until it has removed the container, which has them mounted.
    let inherit = placeholders.inheritable().map_err(setup("reaper"))?;
    let reaper = Reaper::start(&spec.cli, &spec.socket, &name, inherit).map_err(setup("reaper"))?;

    let launch = Launch {
        program: spec.cli.clone(),
        args: built.args,
        env: built.env,
        cwd: Some(PathBuf::from("/")),
        fds,
        kind: LaunchKind::Plain,
        started: None,
        pid_record: None,
        mask_namespace: None,
    };
    // Memory, processes and CPU are the container's (its cgroup, its rlimits); the client is
    // one small process, so only the wall clock applies to it.
    let budgets = Budgets {
        wall_clock: plan.budgets.wall_clock,
        ..Budgets::default()
    };
    let mut supervised = supervise::run(launch, &budgets, options);
    // What the container's limits apply (the daemon sets them from `limits`): recorded as
    // applied, beside the client's timer.
    if let Ok(outcome) = &mut supervised {
        outcome
            .enforcement
            .extend(container_enforcement(&plan.budgets));
    }
    // A memory budget reached inside the container: the kernel's out-of-memory killer acted
    // in its cgroup, which the daemon recorded from the cgroup's own events. Asked before the
    // container is removed, and only when there is a budget it could have been.
    if plan.budgets.memory_bytes.is_some()
        && let Ok(outcome) = &mut supervised
        && outcome.ended_by == EndReason::CommandExited
        && oom_killed(&spec.socket, &name) == Some(true)
    {
        outcome.ended_by = EndReason::Memory;
    }

    let removal = remove(&spec.socket, &name);
    let placeholders_left = if matches!(removal, Removal::AlreadyGone | Removal::Removed) {
        reaper.dismiss();
        placeholders.release().left
    } else {
        placeholders.keep()
    };
    let mountpoints_left = fsfacts::cleanup_created(&built.created_mountpoints);
    // The container is gone (or its removal failed, and the filter's users are the reaper's
    // to end): the observer stops once no process uses the filter, or now.
    let observed = observer.map(seccomp::observe::Observer::finish);
    // The container is gone with its copy of the masks (or its removal failed: it then finds
    // them refusing with ENOTCONN, still closed).
    let masks_seen = mask_server.map(crate::fusemask::MaskServer::finish);
    drop(observed_at);
    drop(mask);
    drop(init);
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
        placeholders_left,
        seccomp_rules,
        observed,
        masks_seen,
        mask_error,
        denied_masks: built.denied_masks,
    })
}

/// The observer's listening socket: beside the run's temporary directory (`run-ID.observe.sock`
/// in the user's private directory of runs, swept with the run's other entries), not inside it,
/// because that directory is a writable root the command sees. Removed when dropped.
#[cfg(target_os = "linux")]
struct SocketFile(PathBuf);

#[cfg(target_os = "linux")]
impl SocketFile {
    fn path(&self) -> &Path {
        &self.0
    }
}

#[cfg(target_os = "linux")]
impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether the kernel's out-of-memory killer acted in container `name` (`State.OOMKilled`),
/// `None` when the daemon does not say.
#[cfg(target_os = "linux")]
fn oom_killed(socket: &Path, name: &str) -> Option<bool> {
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    api::inspect_container(socket, name, deadline)
        .ok()?
        .map(|container| container.oom_killed)
}

/// Force-removes container `name` over the API and says whether it is gone.
pub fn remove(socket: &Path, name: &str) -> Removal {
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    let status_of = |method: &str, target: &str| {
        api::request(socket, method, target, deadline).map(|response| response.status)
    };
    match status_of("DELETE", &format!("/containers/{name}?force=1&v=1")) {
        Ok(204) => Removal::Removed,
        Ok(404) => Removal::AlreadyGone,
        // 409: removal already in progress (the reaper racing us); wait for it to finish.
        Ok(409) => loop {
            match status_of("GET", &format!("/containers/{name}/json")) {
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

/// A container carrying palisade's labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Labelled {
    /// Its name, without Docker's leading `/`.
    pub name: String,
    /// The run id of [`super::RUN_LABEL`].
    pub run_id: String,
    /// Docker's state: `created`, `running`, `exited`, …
    pub state: String,
}

/// The containers of `uid`'s runs ([`super::RUN_LABEL`] and [`super::UID_LABEL`]), whatever
/// their state, named as palisade names them (`palisade-<run id>`); anything else is skipped.
///
/// # Errors
/// The daemon did not answer, or not with a list.
pub fn labelled(socket: &Path, uid: u32) -> Result<Vec<Labelled>, api::ApiError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    // filters={"label":["dev.palisade.run","dev.palisade.uid=<uid>"]}, percent-encoded.
    let filters = format!(
        "%7B%22label%22%3A%5B%22{}%22%2C%22{}%3D{uid}%22%5D%7D",
        super::RUN_LABEL,
        super::UID_LABEL
    );
    let response = api::get(
        socket,
        &format!("/containers/json?all=1&filters={filters}"),
        deadline,
    )?;
    if response.status != 200 {
        return Err(api::ApiError::Malformed(
            "container list: unexpected status",
        ));
    }
    let list: Vec<serde_json::Value> = serde_json::from_slice(&response.body)
        .map_err(|_| api::ApiError::Malformed("container list: not a JSON list"))?;
    Ok(list
        .iter()
        .filter_map(|container| {
            let name = container
                .get("Names")?
                .as_array()?
                .first()?
                .as_str()?
                .trim_start_matches('/')
                .to_owned();
            let run_id = container
                .get("Labels")?
                .get(super::RUN_LABEL)?
                .as_str()?
                .to_owned();
            // Only what palisade named after the run: a label alone names nothing to remove.
            (name == format!("palisade-{run_id}")).then(|| Labelled {
                name,
                run_id,
                state: container
                    .get("State")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            })
        })
        .collect())
}

/// Whether container `name` exists (`None`: the daemon did not answer).
pub fn exists(socket: &Path, name: &str) -> Option<bool> {
    let deadline = Instant::now() + Duration::from_secs(10);
    match api::get(socket, &format!("/containers/{name}/json"), deadline).map(|r| r.status) {
        Ok(404) => Some(false),
        Ok(200) => Some(true),
        _ => None,
    }
}

#[cfg(target_os = "linux")]
/// A file next to the run's temp dir (in palisade's private per-user directory, outside every
/// bind) that the container gets bound read-only: the empty mode-0000 source of every file
/// mask, and the execute-only copy of `docker-init`. Removed on drop.
struct BoundFile(PathBuf);

#[cfg(target_os = "linux")]
impl BoundFile {
    /// `<run temp dir><suffix>` holding `content`, with `mode` (set after writing).
    fn create(
        run_temp_dir: &Path,
        suffix: &str,
        mode: u32,
        content: &[u8],
    ) -> io::Result<BoundFile> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let mut name = run_temp_dir
            .file_name()
            .map(std::ffi::OsStr::to_os_string)
            .unwrap_or_else(|| OsString::from("run"));
        name.push(suffix);
        let path = run_temp_dir.with_file_name(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o200)
            .open(&path)?;
        let made = BoundFile(path);
        file.write_all(content)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        Ok(made)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

#[cfg(target_os = "linux")]
impl Drop for BoundFile {
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
/// it; end-of-file means palisade died. The container is gone only when the daemon says so
/// five times in a row, a second apart: a daemon that does not answer (it is restarting) says
/// nothing, and a killed client's create can still land after the first "no such container"
/// (seconds later on a loaded machine; one that lands later still is the next docker run's).
const REAPER_SCRIPT: &str = r#"read -r line; [ "$line" = done ] && exit 0
n=0
absent=0
while [ "$n" -lt 60 ]; do
    "$0" rm -f "$1" >/dev/null 2>&1
    sleep 1
    if out=$("$0" container inspect --format . "$1" 2>&1); then
        absent=0
    else
        case "$out" in
            *"No such container"*) absent=$((absent + 1)); [ "$absent" -ge 5 ] && exit 0 ;;
            *) absent=0 ;;
        esac
    fi
    n=$((n + 1))
done
exit 1"#;

#[cfg(target_os = "linux")]
impl Reaper {
    /// Starts the reaper, which inherits `inherit` (and so whatever `flock` they hold) for as
    /// long as it lives.
    fn start(
        cli: &Path,
        socket: &Path,
        name: &str,
        inherit: Vec<std::os::fd::OwnedFd>,
    ) -> io::Result<Reaper> {
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
            .env("PATH", crate::path::DEFAULT_PATH)
            .env("DOCKER_HOST", docker_host_value(socket))
            .stdin(Stdio::from(reader))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        drop(inherit);
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

/// The container's own limits as [`super::limits`] gives them to the daemon: memory by its
/// cgroup, processes by its pids limit (docker-init counts: one more than the budget), CPU by a
/// per-process rlimit.
#[cfg(target_os = "linux")]
fn container_enforcement(budgets: &Budgets) -> Vec<supervise::Enforcement> {
    use supervise::{AppliedBecause, Budget, Enforcement, Enforcer};
    let limits = super::limits(budgets);
    let mut list = Vec::new();
    if limits.memory_bytes.is_some() {
        list.push(Enforcement::as_given(Budget::Memory, Enforcer::Container));
    }
    if let Some(pids) = limits.pids {
        list.push(Enforcement {
            applied: Some(pids),
            because: Some(AppliedBecause::DockerInit),
            ..Enforcement::as_given(Budget::Processes, Enforcer::Container)
        });
    }
    if limits.cpu_seconds_per_process.is_some() {
        list.push(Enforcement::as_given(Budget::Cpu, Enforcer::Rlimit));
    }
    list
}
