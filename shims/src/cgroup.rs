//! cgroups for one supervised run: limits, accounting and a race-free kill.
//!
//! Each run gets its own cgroup, `palisade/run-<pid>-<n>`, nested under the cgroup the supervisor
//! itself is in (per controller on v1), so a run never leaves a limit someone placed on the
//! supervisor. On cgroup v1 (this host: `pids`, `memory`, `cpuacct`, `freezer` mounted under
//! `/sys/fs/cgroup/<controller>`) there is one directory per controller; on a unified v2
//! hierarchy there is one directory, usable only where the supervisor may enable controllers
//! for a child (in practice: it sits in the root of its cgroup namespace, as in most
//! containers) — elsewhere [`RunCgroup::create`] fails and the supervisor falls back to rlimits
//! and polling.
//!
//! Key design decision: the kill is done with the tree frozen (v1 freezer, v2 `cgroup.kill`),
//! so no process can fork or exit between reading `cgroup.procs` and signalling it; the loop
//! repeats until `cgroup.procs` is empty. Zombies are not listed in `cgroup.procs`, so the
//! caller reaps its own children separately.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

/// Where cgroup hierarchies are mounted on every distribution palisade targets.
const MOUNTINFO: &str = "/proc/self/mountinfo";
const PROC_CGROUP: &str = "/proc/self/cgroup";
/// The directory (under the supervisor's own cgroup) that holds every run's cgroup.
const PARENT_DIR: &str = "palisade";

/// A cgroup controller palisade uses. On v2, `Cpuacct` means the `cpu` controller's `cpu.stat`
/// and `Freezer` the core `cgroup.freeze`/`cgroup.kill` files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Controller {
    Pids,
    Memory,
    Cpuacct,
    Freezer,
}

impl Controller {
    /// Every controller, in creation order.
    pub const ALL: [Controller; 4] = [
        Controller::Pids,
        Controller::Memory,
        Controller::Cpuacct,
        Controller::Freezer,
    ];

    /// The v1 hierarchy name (as in `/proc/self/cgroup` and the mount options).
    pub fn v1_name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Memory => "memory",
            Controller::Cpuacct => "cpuacct",
            Controller::Freezer => "freezer",
        }
    }

    /// The v2 controller name to enable in `cgroup.subtree_control`; `None` for the freezer,
    /// which is built into every v2 cgroup.
    fn v2_name(self) -> Option<&'static str> {
        match self {
            Controller::Pids => Some("pids"),
            Controller::Memory => Some("memory"),
            Controller::Cpuacct => Some("cpu"),
            Controller::Freezer => None,
        }
    }
}

/// The cgroup layout this process lives in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hierarchy {
    /// v1: for each mounted controller, the directory of the supervisor's own cgroup.
    V1 { own: BTreeMap<Controller, PathBuf> },
    /// v2 unified: the supervisor's own cgroup directory and the controllers available there.
    V2 {
        own: PathBuf,
        controllers: BTreeSet<Controller>,
        /// Whether `own` is the root of the hierarchy (or of the cgroup namespace), the only
        /// place a process may sit while enabling controllers for its children.
        is_root: bool,
    },
}

/// Limits written into a run's cgroup. `None` = unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Memory for the whole tree, swap included where the kernel accounts it.
    pub memory_bytes: Option<u64>,
    /// Tasks (processes and threads) alive at once.
    pub max_tasks: Option<u64>,
}

/// Why a cgroup operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroups are not usable here: {0}")]
    Unavailable(String),
    #[error("cannot read `{path}`: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot create cgroup `{path}`: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot write `{value}` to `{path}`: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
    #[error("cgroup `{path}` still holds {count} processes after the kill loop")]
    NotEmpty { path: PathBuf, count: usize },
}

/// Finds the hierarchy of the calling process from `/proc/self/mountinfo` and `/proc/self/cgroup`.
pub fn detect() -> Result<Hierarchy, CgroupError> {
    let mountinfo = read_to_string(Path::new(MOUNTINFO))?;
    let own = read_to_string(Path::new(PROC_CGROUP))?;
    let hierarchy = detect_from(&mountinfo, &own)?;
    if let Hierarchy::V2 {
        own, controllers, ..
    } = &hierarchy
        && controllers.is_empty()
    {
        return Err(CgroupError::Unavailable(format!(
            "no controllers are available in `{}`",
            own.display()
        )));
    }
    Ok(hierarchy)
}

/// [`detect`] on given file contents (pure; unit-tested). For v2, the available controllers are
/// read from `cgroup.controllers` of the resulting directory, so this returns an empty set and
/// [`detect`] fills it.
pub fn detect_from(mountinfo: &str, proc_cgroup: &str) -> Result<Hierarchy, CgroupError> {
    let mounts = parse_mountinfo(mountinfo);
    let own = parse_proc_cgroup(proc_cgroup);

    let mut v1 = BTreeMap::new();
    for controller in Controller::ALL {
        let name = controller.v1_name();
        let Some(path) = own.v1.get(name) else {
            continue;
        };
        let Some(mount) = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == name))
        else {
            continue;
        };
        if let Some(dir) = join_below_mount(mount, path) {
            v1.insert(controller, dir);
        }
    }
    if !v1.is_empty() {
        return Ok(Hierarchy::V1 { own: v1 });
    }

    // Unified only: the `0::` line and a cgroup2 mount.
    if let (Some(path), Some(mount)) = (
        own.unified.as_deref(),
        mounts.iter().find(|m| m.fstype == "cgroup2"),
    ) && let Some(dir) = join_below_mount(mount, path)
    {
        let controllers = read_to_string(&dir.join("cgroup.controllers"))
            .map(|text| {
                Controller::ALL
                    .into_iter()
                    .filter(|c| {
                        c.v2_name()
                            .is_none_or(|n| text.split_whitespace().any(|w| w == n))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let is_root = path == "/" || path.is_empty();
        return Ok(Hierarchy::V2 {
            own: dir,
            controllers,
            is_root,
        });
    }
    Err(CgroupError::Unavailable(
        "no cgroup v1 controller or cgroup2 mount found for this process".into(),
    ))
}

impl Hierarchy {
    /// The same hierarchy with only the controllers in `keep` (a run's cgroup then has
    /// directories, or enables controllers, for those alone).
    pub fn restricted_to(mut self, keep: &BTreeSet<Controller>) -> Hierarchy {
        match &mut self {
            Hierarchy::V1 { own } => own.retain(|controller, _| keep.contains(controller)),
            Hierarchy::V2 { controllers, .. } => controllers.retain(|c| keep.contains(c)),
        }
        self
    }
}

/// One run's cgroup (one directory per v1 controller, or one v2 directory).
#[derive(Debug)]
pub struct RunCgroup {
    v2: bool,
    /// Controller → directory. On v2 every entry points at the same directory.
    dirs: BTreeMap<Controller, PathBuf>,
    removed: bool,
}

impl RunCgroup {
    /// Creates `palisade/<name>` under the supervisor's own cgroup for every available controller
    /// and writes the limits. A requested limit whose controller is missing is an error (the
    /// caller falls back to rlimits); so is any failed write. On error nothing is left behind.
    pub fn create(hierarchy: &Hierarchy, name: &str, limits: &Limits) -> Result<Self, CgroupError> {
        let mut run = match hierarchy {
            Hierarchy::V1 { own } => {
                let mut run = RunCgroup {
                    v2: false,
                    dirs: BTreeMap::new(),
                    removed: false,
                };
                for (controller, base) in own {
                    let parent = base.join(PARENT_DIR);
                    let dir = parent.join(name);
                    ensure_dir(&parent)?;
                    create_new_dir(&dir)?;
                    run.dirs.insert(*controller, dir);
                }
                run
            }
            Hierarchy::V2 {
                own,
                controllers,
                is_root,
            } => {
                if !is_root {
                    return Err(CgroupError::Unavailable(format!(
                        "cgroup v2: `{}` is not the root of its hierarchy, so controllers cannot be delegated to a run",
                        own.display()
                    )));
                }
                let parent = own.join(PARENT_DIR);
                let enable: Vec<&str> = controllers.iter().filter_map(|c| c.v2_name()).collect();
                if !enable.is_empty() {
                    let value = enable
                        .iter()
                        .map(|n| format!("+{n}"))
                        .collect::<Vec<_>>()
                        .join(" ");
                    write_file(&own.join("cgroup.subtree_control"), &value)?;
                    ensure_dir(&parent)?;
                    write_file(&parent.join("cgroup.subtree_control"), &value)?;
                }
                let dir = parent.join(name);
                ensure_dir(&parent)?;
                create_new_dir(&dir)?;
                RunCgroup {
                    v2: true,
                    dirs: controllers.iter().map(|c| (*c, dir.clone())).collect(),
                    removed: false,
                }
            }
        };
        // From here on, `run` is dropped (and its directories removed) on any error.
        run.write_limits(limits)?;
        Ok(run)
    }

    fn write_limits(&mut self, limits: &Limits) -> Result<(), CgroupError> {
        if let Some(bytes) = limits.memory_bytes {
            let dir = self.require(Controller::Memory)?;
            if self.v2 {
                write_file(&dir.join("memory.max"), &bytes.to_string())?;
                let swap = dir.join("memory.swap.max");
                if swap.exists() {
                    write_file(&swap, "0")?;
                }
                // Ask the OOM killer to take the whole tree, not one process.
                let group = dir.join("memory.oom.group");
                if group.exists() {
                    write_file(&group, "1")?;
                }
            } else {
                write_file(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                let memsw = dir.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write_file(&memsw, &bytes.to_string())?;
                }
            }
        }
        if let Some(tasks) = limits.max_tasks {
            let dir = self.require(Controller::Pids)?;
            write_file(&dir.join("pids.max"), &tasks.to_string())?;
        }
        Ok(())
    }

    fn require(&self, controller: Controller) -> Result<PathBuf, CgroupError> {
        self.dirs.get(&controller).cloned().ok_or_else(|| {
            CgroupError::Unavailable(format!(
                "the `{}` controller is not available",
                controller.v1_name()
            ))
        })
    }

    /// Whether the run's cgroup has this controller.
    pub fn has(&self, controller: Controller) -> bool {
        self.dirs.contains_key(&controller)
    }

    /// Whether this is a v2 (unified) cgroup.
    pub fn is_v2(&self) -> bool {
        self.v2
    }

    /// Every distinct directory of the run (one per v1 controller, one on v2).
    pub fn dirs(&self) -> Vec<PathBuf> {
        let set: BTreeSet<&PathBuf> = self.dirs.values().collect();
        set.into_iter().cloned().collect()
    }

    /// `cgroup.procs` of every directory, opened for writing (close-on-exec). The launched
    /// child writes its own pid into each before it execs.
    pub fn open_procs(&self) -> Result<Vec<File>, CgroupError> {
        self.dirs()
            .into_iter()
            .map(|dir| {
                let path = dir.join("cgroup.procs");
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|source| CgroupError::Write {
                        path,
                        value: "<pid>".into(),
                        source,
                    })
            })
            .collect()
    }

    /// Every live (non-zombie) process in any of the run's directories, sorted.
    pub fn pids(&self) -> Vec<i32> {
        let mut all = BTreeSet::new();
        for dir in self.dirs() {
            all.extend(read_pids(&dir));
        }
        all.into_iter().collect()
    }

    /// Sends `signal` to every process in the cgroup; returns the pids it reached.
    pub fn signal(&self, signal: i32) -> Vec<i32> {
        self.pids()
            .into_iter()
            .filter(|pid| crate::sys::kill(*pid, signal).is_ok())
            .collect()
    }

    /// CPU time used by every process that ever ran in the cgroup.
    pub fn cpu_usage(&self) -> Option<Duration> {
        let dir = self.dirs.get(&Controller::Cpuacct)?;
        if self.v2 {
            let usec = keyed_value(&dir.join("cpu.stat"), "usage_usec")?;
            Some(Duration::from_micros(usec))
        } else {
            let ns = read_u64(&dir.join("cpuacct.usage"))?;
            Some(Duration::from_nanos(ns))
        }
    }

    /// How many processes the kernel's OOM killer killed in the cgroup.
    pub fn oom_kills(&self) -> Option<u64> {
        let dir = self.dirs.get(&Controller::Memory)?;
        if self.v2 {
            keyed_value(&dir.join("memory.events"), "oom_kill")
        } else {
            keyed_value(&dir.join("memory.oom_control"), "oom_kill")
        }
    }

    /// How many forks or clones failed because `pids.max` was reached.
    pub fn pids_limit_hits(&self) -> Option<u64> {
        let dir = self.dirs.get(&Controller::Pids)?;
        keyed_value(&dir.join("pids.events"), "max")
    }

    /// The highest memory use recorded for the cgroup, in bytes.
    pub fn peak_memory(&self) -> Option<u64> {
        let dir = self.dirs.get(&Controller::Memory)?;
        if self.v2 {
            read_u64(&dir.join("memory.peak"))
        } else {
            read_u64(&dir.join("memory.max_usage_in_bytes"))
        }
    }

    /// The highest number of tasks recorded for the cgroup (kernels with `pids.peak`).
    pub fn peak_tasks(&self) -> Option<u64> {
        let dir = self.dirs.get(&Controller::Pids)?;
        read_u64(&dir.join("pids.peak"))
    }

    /// Tasks currently charged to the cgroup, zombies included.
    pub fn current_tasks(&self) -> Option<u64> {
        let dir = self.dirs.get(&Controller::Pids)?;
        read_u64(&dir.join("pids.current"))
    }

    /// The cleanup mechanism [`RunCgroup::kill_all`] uses, for the outcome record.
    pub fn kill_mechanism(&self) -> &'static str {
        if self.v2 {
            if self
                .dirs
                .get(&Controller::Freezer)
                .is_some_and(|d| d.join("cgroup.kill").exists())
            {
                "cgroup-kill"
            } else {
                "cgroup-freeze"
            }
        } else if self.has(Controller::Freezer) {
            "cgroup-freezer"
        } else {
            "cgroup-procs"
        }
    }

    /// Kills every process in the cgroup and returns the pids it killed (v2 `cgroup.kill`:
    /// the pids listed just before). Loops — freeze, kill every listed pid, thaw — until
    /// `cgroup.procs` is empty or `timeout` passes.
    pub fn kill_all(&self, timeout: Duration) -> Result<BTreeSet<i32>, CgroupError> {
        let deadline = Instant::now() + timeout;
        let mut killed = BTreeSet::new();
        let freezer = self.dirs.get(&Controller::Freezer);
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return Ok(killed);
            }
            if Instant::now() >= deadline {
                let path = self.dirs().into_iter().next().unwrap_or_default();
                return Err(CgroupError::NotEmpty {
                    path,
                    count: pids.len(),
                });
            }
            match (self.v2, freezer) {
                (true, Some(dir)) if dir.join("cgroup.kill").exists() => {
                    write_file(&dir.join("cgroup.kill"), "1")?;
                    killed.extend(pids);
                }
                (true, Some(dir)) => {
                    write_file(&dir.join("cgroup.freeze"), "1")?;
                    wait_frozen(|| keyed_value(&dir.join("cgroup.events"), "frozen") == Some(1));
                    killed.extend(self.signal(libc::SIGKILL));
                    write_file(&dir.join("cgroup.freeze"), "0")?;
                }
                (false, Some(dir)) => {
                    let state = dir.join("freezer.state");
                    write_file(&state, "FROZEN")?;
                    wait_frozen(|| fs::read_to_string(&state).is_ok_and(|s| s.trim() == "FROZEN"));
                    killed.extend(self.signal(libc::SIGKILL));
                    write_file(&state, "THAWED")?;
                }
                _ => {
                    killed.extend(self.signal(libc::SIGKILL));
                }
            }
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Removes the run's directories. The cgroup must be empty and its zombies reaped (the
    /// kernel may report `EBUSY` briefly after the last task is released; this retries for a
    /// second).
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.removed = true;
        remove_dirs(&self.dirs())
    }
}

impl Drop for RunCgroup {
    /// Best effort for error paths: kill what is left and remove the directories.
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let _ = self.kill_all(Duration::from_secs(2));
        let _ = remove_dirs(&self.dirs());
    }
}

fn remove_dirs(dirs: &[PathBuf]) -> Result<(), CgroupError> {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut first_error = None;
    for dir in dirs {
        loop {
            match fs::remove_dir(dir) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    thread::sleep(Duration::from_millis(5));
                }
                Err(source) => {
                    first_error.get_or_insert(CgroupError::Create {
                        path: dir.clone(),
                        source,
                    });
                    break;
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Waits (at most a second) for a freeze to complete. A task in uninterruptible sleep can keep
/// a cgroup `FREEZING`; the kill proceeds anyway and the loop repeats.
fn wait_frozen(frozen: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while !frozen() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
}

/// [`sweep_stale`] in every hierarchy this process's cgroup is in. The supervisor calls it once
/// per run, right after the launch, whether it created a cgroup of its own or none: a host that
/// runs only cgroup-less launches must not keep dead runs' cgroups (and what is still in them)
/// for good. Best effort.
pub fn sweep_dead_runs() {
    match detect() {
        Ok(Hierarchy::V1 { own }) => {
            for base in own.values() {
                sweep_stale(&base.join(PARENT_DIR));
            }
        }
        Ok(Hierarchy::V2 { own, .. }) => sweep_stale(&own.join(PARENT_DIR)),
        Err(_) => {}
    }
}

/// Removes leftovers of supervisors that died (SIGKILL) before removing their run's cgroup:
/// `run-<pid>-<n>` whose `<pid>` no longer exists. What is still in one is killed first (it
/// outlived its run). An empty one gets [`remove_dirs`]'s short retry: right after the dead run's last task exited, the kernel
/// may still answer `EBUSY`, and a single attempt would leave it for good.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        if pid <= 0 || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // Its supervisor is gone, so whatever is still in it outlived its run: bwrap's child,
        // orphaned while it waits for its killed parent during setup (bubblewrap#633). Thawed
        // first (a frozen task takes SIGKILL only once thawed), killed, then removed.
        let members = read_pids(&dir);
        if !members.is_empty() {
            let _ = fs::write(dir.join("freezer.state"), "THAWED");
            for member in members {
                let _ = crate::sys::kill(member, libc::SIGKILL);
            }
            let deadline = Instant::now() + Duration::from_millis(200);
            while !read_pids(&dir).is_empty() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
        }
        if read_pids(&dir).is_empty() {
            let _ = remove_dirs(&[dir]);
        }
    }
}

fn ensure_dir(dir: &Path) -> Result<(), CgroupError> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map_err(|source| CgroupError::Create {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

fn create_new_dir(dir: &Path) -> Result<(), CgroupError> {
    fs::create_dir(dir).map_err(|source| CgroupError::Create {
        path: dir.to_path_buf(),
        source,
    })
}

fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_string(),
        source,
    })
}

fn read_to_string(path: &Path) -> Result<String, CgroupError> {
    crate::procfile::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_u64(path: &Path) -> Option<u64> {
    crate::procfile::read_to_string(path)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The number after `key` in a `key value` per line file (`pids.events`, `memory.oom_control`).
fn keyed_value(path: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    parse_keyed(&text, key)
}

fn parse_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some(key))
            .then(|| words.next()?.parse().ok())
            .flatten()
    })
}

fn read_pids(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

#[derive(Debug)]
struct Mount {
    /// The root of the mount within its filesystem (field 4).
    root: String,
    mountpoint: PathBuf,
    fstype: String,
    /// Per-superblock options (v1 controllers appear here).
    options: Vec<String>,
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let root = unescape_mount(fields.get(3)?);
            let mountpoint = PathBuf::from(unescape_mount(fields.get(4)?));
            let mut right = right.split(' ');
            let fstype = right.next()?.to_string();
            let _source = right.next();
            let options = right
                .next()
                .unwrap_or_default()
                .split(',')
                .map(str::to_string)
                .collect();
            Some(Mount {
                root,
                mountpoint,
                fstype,
                options,
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'\\'
            && let Some(octal) = bytes.get(i + 1..i + 4)
            && let Ok(text) = std::str::from_utf8(octal)
            && let Ok(value) = u8::from_str_radix(text, 8)
        {
            out.push(value);
            i += 4;
            continue;
        }
        out.push(b);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Debug, Default)]
struct ProcCgroup {
    /// v1 controller name → path.
    v1: BTreeMap<String, String>,
    /// The `0::` path.
    unified: Option<String>,
}

fn parse_proc_cgroup(text: &str) -> ProcCgroup {
    let mut out = ProcCgroup::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            out.unified = Some(path.to_string());
        } else {
            for name in controllers.split(',') {
                out.v1.insert(name.to_string(), path.to_string());
            }
        }
    }
    out
}

/// The directory of cgroup `path` in `mount`, or `None` when the path lies outside the mounted
/// subtree (then this process cannot reach its own cgroup through the mount).
fn join_below_mount(mount: &Mount, path: &str) -> Option<PathBuf> {
    let root = mount.root.trim_end_matches('/');
    let rest = if root.is_empty() {
        path
    } else {
        let rest = path.strip_prefix(root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    let rest = rest.trim_start_matches('/');
    if rest.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rest.is_empty() {
        mount.mountpoint.clone()
    } else {
        mount.mountpoint.join(rest)
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]
    use super::*;

    const HYBRID_MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 30 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:32 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 30 0:34 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 30 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/b95
2:cpuacct:/
1:cpu:/
0::/
";

    #[test]
    fn a_restricted_hierarchy_keeps_only_the_controllers_asked_for() {
        let keep = BTreeSet::from([Controller::Memory, Controller::Freezer]);
        let v1 = detect_from(HYBRID_MOUNTINFO, HYBRID_CGROUP)
            .unwrap()
            .restricted_to(&keep);
        let Hierarchy::V1 { own } = v1 else {
            panic!("{v1:?}");
        };
        assert_eq!(own.keys().copied().collect::<BTreeSet<_>>(), keep);
        let v2 = Hierarchy::V2 {
            own: PathBuf::from("/sys/fs/cgroup"),
            controllers: Controller::ALL.into_iter().collect(),
            is_root: true,
        }
        .restricted_to(&keep);
        let Hierarchy::V2 { controllers, .. } = v2 else {
            panic!("{v2:?}");
        };
        assert_eq!(controllers, keep);
    }

    #[test]
    fn v1_hybrid_nests_under_own_cgroup_per_controller() {
        let h = detect_from(HYBRID_MOUNTINFO, HYBRID_CGROUP).unwrap();
        let Hierarchy::V1 { own } = h else {
            panic!("expected v1")
        };
        assert_eq!(own[&Controller::Pids], PathBuf::from("/sys/fs/cgroup/pids"));
        assert_eq!(
            own[&Controller::Memory],
            PathBuf::from("/sys/fs/cgroup/memory/process_api/b95")
        );
        assert_eq!(own.len(), 4);
    }

    #[test]
    fn v1_mount_root_is_stripped_from_the_path() {
        let mi = "38 30 0:34 /docker/abc /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        let h = detect_from(mi, "8:pids:/docker/abc/sub\n").unwrap();
        assert_eq!(
            h,
            Hierarchy::V1 {
                own: [(Controller::Pids, PathBuf::from("/sys/fs/cgroup/pids/sub"))].into()
            }
        );
        // A path outside the mounted subtree is unreachable.
        assert!(detect_from(mi, "8:pids:/other\n").is_err());
        assert!(detect_from(mi, "8:pids:/docker/abcdef\n").is_err());
    }

    #[test]
    fn unified_only_is_v2_and_knows_whether_it_is_root() {
        let mi = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let h = detect_from(mi, "0::/\n").unwrap();
        assert!(matches!(h, Hierarchy::V2 { is_root: true, .. }));
        let h = detect_from(mi, "0::/user.slice/session-1.scope\n").unwrap();
        let Hierarchy::V2 { own, is_root, .. } = h else {
            panic!("expected v2")
        };
        assert!(!is_root);
        assert_eq!(
            own,
            PathBuf::from("/sys/fs/cgroup/user.slice/session-1.scope")
        );
    }

    #[test]
    fn keyed_values_parse() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(parse_keyed(text, "oom_kill"), Some(3));
        assert_eq!(parse_keyed(text, "under_oom"), Some(0));
        assert_eq!(parse_keyed("max 12\n", "max"), Some(12));
        assert_eq!(parse_keyed("max 12\n", "oom"), None);
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mount(r"/a\040b"), "/a b");
        assert_eq!(unescape_mount(r"/plain"), "/plain");
        assert_eq!(unescape_mount(r"/trail\0"), r"/trail\0");
    }
}
