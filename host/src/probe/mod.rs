//! Host probes: what each sandbox backend can really do on this machine.
//!
//! The engine trusts probe facts as recorded (replay depends on it), so this module is where
//! honesty lives. Each probe measures for real — a trial bwrap sandbox, the Landlock ABI from
//! the kernel, a ping on the Docker socket — and reports only the capabilities and network modes
//! the matching shim will actually enforce. Every probe fails closed: an error, a refusal or a
//! timeout is "unavailable" with the reason, never "available".
//!
//! Probes run in parallel and are time-boxed ([`ProbeOptions::timeout`]): a hung Docker daemon
//! or a hung `bwrap` cannot hang the CLI; spawned children are killed at the deadline.
//!
//! Results can be cached ([`ProbeOptions::cache_dir`]) under a key made of everything the probes
//! depend on ([`Inputs`]), so `decide` and `run` do not pay for a trial sandbox on every call.
//! Computing the key reads a few files and makes one syscall; it never spawns a process.

mod bwrap;
mod cache;
mod command;
mod direct;
pub mod docker;
mod landlock;
mod seatbelt;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use palisade_engine::model::{Backend, BackendProbe};
use palisade_shims::path::{Search, find_program};
use serde::Serialize;

pub use crate::sys::user_ids;

pub use cache::{CACHE_FILE_NAME, CacheError};

/// How long one probe may take unless the caller says otherwise: generous, because a probe that
/// runs out of time reports its backend unavailable (fail closed), and a loaded host (many runs
/// starting at once, a build) can take seconds to start a trial sandbox that normally takes
/// milliseconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The Docker socket probed when neither the options nor `DOCKER_HOST` name one.
pub const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// Bumped whenever what a probe reports for the same inputs changes, so old caches go stale.
const PROBE_SCHEMA: u32 = 6;

/// What the backends that keep protected paths read-only with binds cannot observe: the kernel
/// refuses the write itself (`EROFS`, `EBUSY`, `EACCES`), and nothing sees it happen.
pub(crate) const PROTECTED_WRITES_UNOBSERVED: &str = "a write refused at a protected path (git's hooks and config, AGENTS.md, ...) is not observed: the command sees EROFS, EBUSY or EACCES, and the outcome's denials do not list it";

/// How long the collector waits past the deadline for a probe to kill its child and report.
const COLLECT_GRACE: Duration = Duration::from_millis(250);

/// What to probe and how.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// The Docker daemon socket; `None` means `$DOCKER_HOST` if it is `unix://…`, else
    /// [`DEFAULT_DOCKER_SOCKET`].
    pub docker_socket: Option<PathBuf>,
    /// The image the docker backend would run; `None` means "image not configured" and docker
    /// is reported unavailable.
    pub docker_image: Option<String>,
    /// The image ID or registry digest a runtime profile pins `docker_image` to; without one
    /// the docker backend is unavailable (palisade runs only pinned images).
    pub docker_image_pin: Option<String>,
    /// The static `palisade-bridge` a runtime profile file names (`spec.egressBridge`); with a
    /// usable one the docker backend offers filtered egress.
    pub docker_egress_bridge: Option<PathBuf>,
    /// Time box for each probe (they run in parallel, so also roughly for all of them).
    pub timeout: Duration,
    /// Where `probes.json` lives; `None` means no cache is read or written.
    pub cache_dir: Option<PathBuf>,
    /// Whether a matching cache may answer. `false` probes afresh but still refreshes the cache
    /// file (what `doctor` does).
    pub use_cache: bool,
    /// Use exactly this `bwrap` instead of searching for it.
    pub bwrap_path: Option<PathBuf>,
    /// Use exactly this `docker` CLI instead of searching for it.
    pub docker_cli: Option<PathBuf>,
    /// The search path for `bwrap`, `docker` and `docker-init`; `None` means `$PATH`.
    pub search_path: Option<OsString>,
    /// The palisade executable whose `__sandbox-proc-trial` the Landlock probe runs (the one
    /// that will launch the sandbox); `None` means the running executable.
    pub palisade_exe: Option<PathBuf>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            docker_socket: None,
            docker_image: None,
            docker_image_pin: None,
            docker_egress_bridge: None,
            timeout: DEFAULT_TIMEOUT,
            cache_dir: None,
            use_cache: true,
            bwrap_path: None,
            docker_cli: None,
            search_path: None,
            palisade_exe: None,
        }
    }
}

impl ProbeOptions {
    /// The per-user cache directory: `$XDG_CACHE_HOME/palisade`, else `$HOME/.cache/palisade`.
    /// Relative values are ignored (the XDG spec says so); `None` when neither is usable.
    pub fn default_cache_dir() -> Option<PathBuf> {
        let absolute =
            |value: Option<OsString>| value.map(PathBuf::from).filter(|path| path.is_absolute());
        if let Some(base) = absolute(std::env::var_os("XDG_CACHE_HOME")) {
            return Some(base.join("palisade"));
        }
        absolute(std::env::var_os("HOME")).map(|home| home.join(".cache").join("palisade"))
    }
}

/// One probe per backend, in canonical [`Backend::ALL`] order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSet {
    pub probes: Vec<BackendProbe>,
    /// Whether the probes came from the cache file.
    pub from_cache: bool,
    /// Wall time `probe_all` took.
    pub elapsed: Duration,
    /// Why the cache could not be used or written (corrupt, untrusted, unwritable), for a
    /// warning on stderr; a plain miss or a stale key is not an error.
    pub cache_error: Option<String>,
    /// The programs a launch runs, as the probes' inputs located them.
    pub programs: Programs,
}

/// Probes every backend (or answers from a matching cache) and never fails: a probe that errors
/// reports its backend unavailable with the reason.
pub fn probe_all(options: &ProbeOptions) -> ProbeSet {
    let start = Instant::now();
    let inputs = Inputs::gather(options);
    let programs = inputs.programs();
    let mut cache_error = None;

    if let Some(dir) = &options.cache_dir
        && options.use_cache
    {
        match cache::load(dir, &inputs) {
            Ok(Some(probes)) => {
                return ProbeSet {
                    probes,
                    from_cache: true,
                    elapsed: start.elapsed(),
                    cache_error: None,
                    programs,
                };
            }
            Ok(None) => {}
            Err(err) => cache_error = Some(err.to_string()),
        }
    }

    // Many runs start at once with a cold cache (an agent runner's parallel tool calls): one of
    // them probes, the others wait for its result instead of all probing the loaded host at
    // once (and timing out together). The lock is released when its holder exits, however it
    // exits, and is held at most as long as one probe round.
    let _probing = match (&options.cache_dir, options.use_cache) {
        (Some(dir), true) => cache::lock_probing(dir, inputs.euid),
        _ => None,
    };
    if let (Some(_), Some(dir)) = (&_probing, &options.cache_dir)
        && let Ok(Some(probes)) = cache::load(dir, &inputs)
    {
        return ProbeSet {
            probes,
            from_cache: true,
            elapsed: start.elapsed(),
            cache_error,
            programs,
        };
    }

    let probes = probe_fresh(&inputs);

    // A probe that ran out of time says something about this moment's load, not about the
    // host: caching it would keep a working backend unavailable until the next `doctor`.
    // Likewise a bwrap trial that lost a race with another program's mounts.
    let transient = probes
        .iter()
        .any(|probe| probe.reason.contains(TIMED_OUT) || probe.reason.contains(bwrap::MOUNT_RACE));
    if let Some(dir) = &options.cache_dir
        && !transient
        && let Err(err) = cache::store(dir, &inputs, &probes)
    {
        cache_error.get_or_insert(err.to_string());
    }

    ProbeSet {
        probes,
        from_cache: false,
        elapsed: start.elapsed(),
        cache_error,
        programs,
    }
}

/// Where the probes and [`Programs`] search: the options' path, else
/// `PATH`, else the workspace's default ([`palisade_shims::path::of_process`]).
fn launch_search_path(options: &ProbeOptions) -> OsString {
    options
        .search_path
        .clone()
        .unwrap_or_else(palisade_shims::path::of_process)
}

/// Where Docker keeps `docker-init` when it is not on `PATH` (the daemon's own search list).
const DOCKER_INIT_FALLBACKS: [&str; 5] = [
    "/usr/local/libexec/docker/docker-init",
    "/usr/libexec/docker/docker-init",
    "/usr/local/lib/docker/docker-init",
    "/usr/lib/docker/docker-init",
    "/usr/bin/docker-init",
];

/// The programs a launch may run, located once, by the search that keys the probe cache
/// ([`Inputs`], done on every run, hit or miss): what was probed is what runs, and `run`
/// carries them to the launch, so that nothing is searched for again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Programs {
    /// `bwrap`, which a `linux-bwrap` plan launches.
    pub bwrap: Option<PathBuf>,
    /// The `docker` CLI, which a `docker` plan runs.
    pub docker: Option<PathBuf>,
    /// `docker-init`, copied into the container as its PID 1.
    pub docker_init: Option<PathBuf>,
    /// `palisade-init` beside this binary, when it is installed: the sandbox's init under
    /// bwrap, Landlock and direct (else this binary itself runs it).
    pub sandbox_init: Option<PathBuf>,
}

/// The palisade executable the Landlock probe trials: the options' one, else the running one.
fn palisade_exe(options: &ProbeOptions) -> Option<PathBuf> {
    options
        .palisade_exe
        .clone()
        .or_else(|| std::env::current_exe().ok())
}

/// The Docker daemon's unix socket the probe talks to, or why there is none.
pub fn docker_socket(options: &ProbeOptions) -> Result<PathBuf, String> {
    match DockerTarget::resolve(options.docker_socket.as_deref()) {
        DockerTarget::Unix { path, .. } => Ok(path),
        DockerTarget::NotUnix { docker_host } => Err(format!(
            "docker host `{docker_host}` is not a unix socket; palisade runs only local daemons"
        )),
    }
}

/// A probe that may block (it spawns or talks to a daemon) and so gets a thread.
type ProbeFn = fn(&Inputs, Instant) -> BackendProbe;

/// Runs every probe now: the slow ones on their own threads, all against one deadline.
fn probe_fresh(inputs: &Inputs) -> Vec<BackendProbe> {
    let timeout = Duration::from_millis(inputs.timeout_ms);
    let deadline = Instant::now() + timeout;
    let shared = Arc::new(inputs.clone());
    let (sender, receiver) = mpsc::channel::<BackendProbe>();

    let mut results: Vec<Option<BackendProbe>> = Backend::ALL.iter().map(|_| None).collect();
    let mut place = |probe: BackendProbe| {
        if let Some(index) = Backend::ALL.iter().position(|b| *b == probe.backend)
            && let Some(slot) = results.get_mut(index)
        {
            *slot = Some(probe);
        }
    };

    let threaded: [(Backend, ProbeFn); 4] = [
        (Backend::LinuxBwrap, bwrap::probe),
        (Backend::LinuxLandlock, landlock::probe),
        (Backend::Docker, docker::probe),
        (Backend::MacosSeatbelt, seatbelt::probe),
    ];
    let mut pending = 0usize;
    for (backend, run) in threaded {
        let sender = sender.clone();
        let inputs = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("probe-{}", backend.as_str()))
            .spawn(move || {
                // A send error means the collector gave up on us; nothing left to do.
                let _ = sender.send(run(&inputs, deadline));
            });
        match spawned {
            Ok(_) => pending += 1,
            Err(err) => place(unavailable(
                backend,
                format!("probe could not start a thread: {err}"),
            )),
        }
    }
    drop(sender);

    // The cheap probe runs here while the others work.
    place(direct::probe());

    let collect_until = deadline + COLLECT_GRACE;
    while pending > 0 {
        let wait = collect_until.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(wait) {
            Ok(probe) => {
                pending -= 1;
                place(probe);
            }
            Err(_) => break,
        }
    }

    // Whether denied paths can be served by observed masks (bwrap): measured once.
    let masks = observed_masks(false);
    let shared_masks = observed_masks(true);
    #[cfg(target_os = "linux")]
    let namespace_masks = masks_in_namespace();
    #[cfg(not(target_os = "linux"))]
    let namespace_masks: Result<(), String> = Err("not Linux".to_owned());
    Backend::ALL
        .iter()
        .zip(results)
        .map(|(backend, result)| {
            let mut probe = result.unwrap_or_else(|| unavailable(*backend, timed_out(timeout)));
            if probe.available {
                let static_stub = probe.network_bridge;
                // bwrap as any user but root mounts them in namespaces of its own where it
                // can, through `fusermount3` where it cannot.
                let either = match (&masks, &namespace_masks) {
                    (Ok(()), _) | (_, Ok(())) => Ok(()),
                    (Err(why), _) => Err(why.clone()),
                };
                let masks = match backend {
                    Backend::Docker => &shared_masks,
                    Backend::LinuxLandlock => &namespace_masks,
                    _ => &either,
                };
                probe
                    .limitations
                    .extend(unobserved_denials(*backend, static_stub, masks));
            }
            probe
        })
        .collect()
}

/// The kinds of denial a backend enforces but `palisade run` cannot yet observe, so that an
/// empty `denials` list is never read as "nothing was blocked". Observed everywhere: the
/// budget that ended a run (the supervisor's accounting) and what the filtering proxy and the
/// network bridge refused (their connection records); under bwrap and Landlock also every call
/// the seccomp filter refuses (sockets the network mode forbids included), through the filter's
/// listener; under bwrap also every `connect` to an address off the sandbox's own loopback or
/// to a host socket it masks (the listener looks at each `connect`, then lets the kernel refuse
/// it). Docker observes the same as bwrap when it has the static `palisade-bridge`
/// (`spec.egressBridge`, checked by its probe: `network_bridge`), which also serves as the
/// container's seccomp stub.
pub(crate) fn unobserved_denials(
    backend: Backend,
    static_stub: bool,
    masks: &Result<(), String>,
) -> Vec<String> {
    // bwrap and docker serve denied paths through observed masks where the host allows.
    let bwrap_files = match masks {
        Ok(()) => "writes outside the writable roots are not observed: they fail with EROFS, unlisted (accesses to denied paths are: their masks are observed)".to_owned(),
        Err(why) => format!("accesses to denied paths are not observed ({why}): the command sees EACCES, unlisted; nor are writes outside the writable roots (EROFS)"),
    };
    match backend {
        Backend::LinuxBwrap => vec![
            bwrap_files.clone(),
            "datagrams sent with `sendmsg` or `sendmmsg` to an address the sandbox cannot reach are not observed (connections and `sendto` are)".to_owned(),
        ],
        Backend::LinuxLandlock => vec![
            match masks {
                Ok(()) => "writes outside the writable roots are not observed: Landlock refuses them with EACCES, unlisted (accesses to denied files and directories are: init binds their observed masks in a mount namespace of the sandbox's own)".to_owned(),
                Err(why) => format!("accesses to denied paths are not observed ({why}): Landlock refuses them with EACCES, unlisted; nor are writes outside the writable roots"),
            },
            "connections Landlock's TCP rules refuse are not observed: they fail with EACCES, unlisted".to_owned(),
        ],
        Backend::Docker if static_stub => vec![
            bwrap_files.clone(),
            "datagrams sent with `sendmsg` or `sendmmsg` to an address the container cannot reach are not observed (connections and `sendto` are)".to_owned(),
            "a process budget reached inside the container is not observed: the container's cgroup refuses the fork (EAGAIN), unlisted (a memory budget is: the daemon records the kernel's out-of-memory kill)".to_owned(),
        ],
        Backend::Docker => vec![
            bwrap_files.clone(),
            "syscalls the seccomp profile refuses are not observed: without the static stub (`spec.egressBridge`) the container runtime installs it without a listener".to_owned(),
            "connections refused inside the container's network namespace are not observed (without the static stub, `spec.egressBridge`)".to_owned(),
            "a process budget reached inside the container is not observed: the container's cgroup refuses the fork (EAGAIN), unlisted (a memory budget is: the daemon records the kernel's out-of-memory kill)".to_owned(),
        ],
        Backend::MacosSeatbelt => vec![
            "file, network and process denials of the Seatbelt profile are not observed: the command sees EPERM, unlisted".to_owned(),
        ],
        Backend::DirectDedicated => Vec::new(),
    }
}

/// Whether this host can serve denied paths through observed masks
/// (`palisade_shims::fusemask`): the FUSE filesystem, and `mount(2)` as root or `fusermount3`
/// with a `/dev/fuse` this user may open otherwise; `shared` (for a container daemon, which
/// must see the mount) also `user_allow_other` for `fusermount3`. `Err` says what is missing.
#[cfg(target_os = "linux")]
pub(crate) fn observed_masks(shared: bool) -> Result<(), String> {
    use palisade_shims::fusemask::{MaskError, Mounter, mounter, user_allow_other};
    match mounter().map_err(|e| e.to_string())? {
        Mounter::Kernel => Ok(()),
        Mounter::Fusermount(_) if shared && !user_allow_other() => {
            Err(MaskError::NotShared.to_string())
        }
        // The helper mounts through a descriptor of the user's own.
        Mounter::Fusermount(_) => masks_in_namespace(),
    }
}

/// Whether this user can open `/dev/fuse`, which whoever mounts observed masks needs:
/// `fusermount3`, or, without it (a user namespace's owner may mount FUSE there), a Landlock
/// sandbox's init or an unprivileged bwrap's parent in namespaces of their own. Whether those
/// namespaces can be made shows at launch: where they cannot, init says so and its masks stay
/// mute, and bwrap's launch falls back to `fusermount3`.
#[cfg(target_os = "linux")]
pub(crate) fn masks_in_namespace() -> Result<(), String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
        .map_err(|e| format!("`/dev/fuse`: {e}; it must be readable and writable by this user (mode 0666, as Debian's udev rule sets it)"))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn observed_masks(_shared: bool) -> Result<(), String> {
    Err("not Linux".to_owned())
}

/// An unavailable probe: no capabilities, no network modes.
pub(crate) fn unavailable(backend: Backend, reason: String) -> BackendProbe {
    BackendProbe {
        landlock_proc: None,
        backend,
        available: false,
        reason,
        capabilities: Vec::new(),
        network_modes: Vec::new(),
        network_bridge: false,
        version: String::new(),
        limitations: Vec::new(),
    }
}

/// The reason a probe gives when its time box ran out.
pub(crate) fn timed_out(timeout: Duration) -> String {
    format!("{TIMED_OUT} {}", describe_duration(timeout))
}

/// How every time-boxed probe's reason says it ran out of time.
pub(crate) const TIMED_OUT: &str = "timed out after";

/// `2 s` for whole seconds, `500 ms` otherwise.
pub(crate) fn describe_duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// The first non-empty line of a child's output, trimmed, control characters replaced and cut
/// to a readable length: error messages are one line.
pub(crate) fn first_line(bytes: &[u8]) -> String {
    const MAX_CHARS: usize = 200;
    let text = String::from_utf8_lossy(bytes);
    let line = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("");
    let mut out: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_CHARS)
        .collect();
    if line.chars().count() > MAX_CHARS {
        out.push('…');
    }
    out
}

/// Everything the probes depend on, measured without spawning anything. Its JSON is the cache
/// key: if any of it changes, the cached probes are stale.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Inputs {
    pub schema: u32,
    pub palisade_version: String,
    /// The palisade executable the Landlock probe trials: a rebuilt palisade may probe
    /// differently.
    pub palisade_exe: Option<Located>,
    pub os: String,
    pub arch: String,
    pub timeout_ms: u64,
    pub bwrap: Located,
    pub docker_cli: Located,
    pub docker_socket: DockerTarget,
    pub docker_image: Option<String>,
    pub docker_image_pin: Option<String>,
    pub docker_egress_bridge: Option<Located>,
    pub docker_init: Located,
    pub sandbox_exec: Located,
    pub kernel_release: Option<String>,
    pub boot_id: Option<String>,
    pub uid: u32,
    pub euid: u32,
    pub max_user_namespaces: Option<String>,
    pub unprivileged_userns_clone: Option<String>,
    pub apparmor_restrict_unprivileged_userns: Option<String>,
    pub landlock: landlock::AbiQuery,
    pub seccomp: landlock::SeccompState,
}

impl Inputs {
    /// The programs these inputs located, where they are usable.
    fn programs(&self) -> Programs {
        let usable = |located: &Located| located.usable().map(Path::to_path_buf);
        Programs {
            bwrap: usable(&self.bwrap),
            docker: usable(&self.docker_cli),
            docker_init: usable(&self.docker_init),
            #[cfg(target_os = "linux")]
            sandbox_init: crate::launch::locate_sandbox_init(),
            // Seatbelt runs no init of Palisade's.
            #[cfg(not(target_os = "linux"))]
            sandbox_init: None,
        }
    }

    fn gather(options: &ProbeOptions) -> Inputs {
        let search_path = launch_search_path(options);
        let (uid, euid) = user_ids();
        Inputs {
            schema: PROBE_SCHEMA,
            palisade_version: env!("CARGO_PKG_VERSION").to_owned(),
            palisade_exe: palisade_exe(options).as_deref().map(Located::exact),
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
            timeout_ms: u64::try_from(options.timeout.as_millis()).unwrap_or(u64::MAX),
            bwrap: Located::find(
                options.bwrap_path.as_deref(),
                "bwrap",
                &search_path,
                &["/usr/bin/bwrap"],
            ),
            docker_cli: Located::find(
                options.docker_cli.as_deref(),
                "docker",
                &search_path,
                &["/usr/bin/docker", "/usr/local/bin/docker"],
            ),
            docker_socket: DockerTarget::resolve(options.docker_socket.as_deref()),
            docker_image: options.docker_image.clone(),
            docker_image_pin: options.docker_image_pin.clone(),
            docker_egress_bridge: options.docker_egress_bridge.as_deref().map(Located::exact),
            docker_init: Located::find(None, "docker-init", &search_path, &DOCKER_INIT_FALLBACKS),
            sandbox_exec: Located::exact(Path::new(seatbelt::SANDBOX_EXEC)),
            kernel_release: read_trimmed("/proc/sys/kernel/osrelease"),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            uid,
            euid,
            max_user_namespaces: read_trimmed("/proc/sys/user/max_user_namespaces"),
            unprivileged_userns_clone: read_trimmed("/proc/sys/kernel/unprivileged_userns_clone"),
            apparmor_restrict_unprivileged_userns: read_trimmed(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            ),
            landlock: landlock::AbiQuery::query(),
            seccomp: landlock::SeccompState::query(),
        }
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// A program palisade would run, as found, with the identity of what is there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Located {
    /// The explicit path, or where the search found it; `None` when the search found nothing.
    pub path: Option<PathBuf>,
    /// `None` when `path` is not an executable regular file.
    pub identity: Option<FileIdentity>,
    /// Whether `path` was given explicitly rather than searched for.
    pub explicit: bool,
}

impl Located {
    fn exact(path: &Path) -> Located {
        Located {
            path: Some(path.to_path_buf()),
            identity: FileIdentity::of_executable(path),
            explicit: true,
        }
    }

    /// The explicit path if given; else the first executable `name` in the absolute entries of
    /// `search_path` (relative entries such as `.` are skipped: [`palisade_shims::path`]), else
    /// the first fallback.
    fn find(
        explicit: Option<&Path>,
        name: &str,
        search_path: &OsStr,
        fallbacks: &[&str],
    ) -> Located {
        if let Some(path) = explicit {
            return Located::exact(path);
        }
        let found = find_program(OsStr::new(name), &Search::absolute_entries(search_path));
        let candidates = found
            .ok()
            .into_iter()
            .chain(fallbacks.iter().map(PathBuf::from));
        for candidate in candidates {
            if let Some(identity) = FileIdentity::of_executable(&candidate) {
                return Located {
                    path: Some(candidate),
                    identity: Some(identity),
                    explicit: false,
                };
            }
        }
        Located {
            path: None,
            identity: None,
            explicit: false,
        }
    }

    /// The usable path: present and executable.
    pub fn usable(&self) -> Option<&Path> {
        self.identity.as_ref().and(self.path.as_deref())
    }

    /// Why there is nothing usable, for a "not installed" reason: empty after a failed search,
    /// ` (`path` is not an executable file)` for an explicit path.
    pub fn missing_detail(&self) -> String {
        match (&self.path, self.explicit) {
            (Some(path), true) => format!(" (`{}` is not an executable file)", path.display()),
            _ => String::new(),
        }
    }
}

/// Enough of `stat(2)` to notice a replaced, rebuilt or touched file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl FileIdentity {
    /// The identity of whatever `path` resolves to; `None` if it does not exist.
    fn of(path: &Path) -> Option<FileIdentity> {
        std::fs::metadata(path).ok().map(|meta| FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }

    /// Like [`FileIdentity::of`], but only for a regular file with an execute bit.
    fn of_executable(path: &Path) -> Option<FileIdentity> {
        let identity = FileIdentity::of(path)?;
        // `mode_t` is u32 on Linux and u16 on macOS.
        #[allow(clippy::useless_conversion, reason = "u16 on macOS")]
        let regular = identity.mode & u32::from(libc::S_IFMT) == u32::from(libc::S_IFREG);
        (regular && identity.mode & 0o111 != 0).then_some(identity)
    }
}

/// Where the docker probe talks to the daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum DockerTarget {
    /// A unix socket, with the identity of the socket file (dockerd recreates it on start).
    Unix {
        path: PathBuf,
        identity: Option<FileIdentity>,
    },
    /// `DOCKER_HOST` names something other than a unix socket.
    NotUnix { docker_host: String },
}

impl DockerTarget {
    fn resolve(explicit: Option<&Path>) -> DockerTarget {
        let unix = |path: PathBuf| DockerTarget::Unix {
            identity: FileIdentity::of(&path),
            path,
        };
        if let Some(path) = explicit {
            return unix(path.to_path_buf());
        }
        match std::env::var_os("DOCKER_HOST") {
            Some(host) if !host.is_empty() => match host.as_bytes().strip_prefix(b"unix://") {
                Some(rest) => unix(PathBuf::from(OsStr::from_bytes(rest))),
                None => DockerTarget::NotUnix {
                    docker_host: host.to_string_lossy().into_owned(),
                },
            },
            _ => unix(PathBuf::from(DEFAULT_DOCKER_SOCKET)),
        }
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    palisade_shims::procfile::read_to_string(path)
        .ok()
        .map(|text| text.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(describe_duration(Duration::from_secs(2)), "2 s");
        assert_eq!(describe_duration(Duration::from_millis(500)), "500 ms");
        assert_eq!(
            timed_out(Duration::from_millis(1500)),
            "timed out after 1500 ms"
        );
    }

    #[test]
    fn first_line_is_one_clean_line() {
        assert_eq!(
            first_line(b"\n  bwrap: oops\tthere \nsecond\n"),
            "bwrap: oops there"
        );
        assert_eq!(first_line(b""), "");
        let long = vec![b'x'; 500];
        assert_eq!(first_line(&long).chars().count(), 201);
    }

    #[test]
    fn search_skips_relative_entries_and_falls_back() {
        let found = Located::find(None, "sh", OsStr::new(".:relative"), &["/bin/sh"]);
        assert_eq!(found.path.as_deref(), Some(Path::new("/bin/sh")));
        assert!(found.usable().is_some());
        let missing = Located::find(
            None,
            "no-such-program-here",
            OsStr::new("/nonexistent"),
            &[],
        );
        assert_eq!(missing.usable(), None);
        assert_eq!(missing.missing_detail(), "");
    }

    #[test]
    fn explicit_non_executable_is_not_usable() {
        let located = Located::find(
            Some(Path::new("/proc/self/status")),
            "x",
            OsStr::new(""),
            &[],
        );
        assert_eq!(located.usable(), None);
        assert!(located.missing_detail().contains("/proc/self/status"));
    }
}
