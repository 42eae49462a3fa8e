//! The escape battery's plumbing: who runs (root or an unprivileged user), where (unconfined,
//! in a throwaway namespace, or inside `palisade run` under one backend), against which targets
//! (a per-run fixture of files, listeners, a victim process, a pty, a keyring — all created by
//! the test, never the host's own), and how the host checks afterwards what really happened.
//!
//! The case catalogue lives in `tests/escape.rs`; this file knows nothing about particular
//! attacks. Included with `#[path = "support/escape_kit.rs"] mod escape_kit;`.

#![allow(
    dead_code,
    reason = "each test binary uses a different subset of the kit"
)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one run (outside or inside) may take before it is killed and reported.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// The unprivileged user of the second pass when the battery runs as root.
pub const NOBODY: u32 = 65534;

// ---------------------------------------------------------------------------------------------
// Backends and users
// ---------------------------------------------------------------------------------------------

/// A backend the battery attacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Backend {
    Bwrap,
    Landlock,
    Direct,
    Docker,
}

impl Backend {
    pub const ALL: [Backend; 4] = [
        Backend::Bwrap,
        Backend::Landlock,
        Backend::Direct,
        Backend::Docker,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Bwrap => "linux-bwrap",
            Backend::Landlock => "linux-landlock",
            Backend::Direct => "direct-dedicated",
            Backend::Docker => "docker",
        }
    }
}

/// Who the battery runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum User {
    /// uid 0 (the test runs as root).
    Root,
    /// uid/gid 65534 via `setpriv`, when the test runs as root.
    Nobody,
    /// The unprivileged user the test itself runs as (no `setpriv` possible).
    Current { uid: u32, gid: u32 },
}

impl User {
    pub fn uid(self) -> u32 {
        match self {
            User::Root => 0,
            User::Nobody => NOBODY,
            User::Current { uid, .. } => uid,
        }
    }

    pub fn gid(self) -> u32 {
        match self {
            User::Root => 0,
            User::Nobody => NOBODY,
            User::Current { gid, .. } => gid,
        }
    }

    pub fn is_root(self) -> bool {
        self.uid() == 0
    }

    pub fn label(self) -> String {
        match self {
            User::Root => "root (uid 0)".into(),
            User::Nobody => format!("unprivileged (uid {NOBODY} via setpriv)"),
            User::Current { uid, .. } => format!("unprivileged (uid {uid}, the test's own user)"),
        }
    }

    /// The argv prefix that makes a command run as this user.
    pub fn wrap(self) -> Vec<String> {
        self.wrap_in_groups(&[])
    }

    /// [`User::wrap`] with supplementary `groups` for [`User::Nobody`] (the others keep their
    /// own), e.g. the group that may use a Docker socket.
    pub fn wrap_in_groups(self, groups: &[u32]) -> Vec<String> {
        let groups = if groups.is_empty() {
            "--clear-groups".to_owned()
        } else {
            let list: Vec<String> = groups.iter().map(u32::to_string).collect();
            format!("--groups={}", list.join(","))
        };
        match self {
            User::Nobody => vec![
                "setpriv".into(),
                format!("--reuid={NOBODY}"),
                format!("--regid={NOBODY}"),
                groups,
                "--".into(),
            ],
            User::Root | User::Current { .. } => Vec::new(),
        }
    }
}

/// The user this test process runs as.
pub fn test_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

fn test_gid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.gid())
        .unwrap_or(u32::MAX)
}

/// The root pass's user, if the test can run it.
pub fn root_user() -> Option<User> {
    (test_uid() == 0).then_some(User::Root)
}

/// The unprivileged pass's user: 65534 via setpriv under root, else the test's own user.
pub fn unprivileged_user() -> User {
    if test_uid() == 0 {
        User::Nobody
    } else {
        User::Current {
            uid: test_uid(),
            gid: test_gid(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The environment shared by one test function
// ---------------------------------------------------------------------------------------------

/// Binaries, host namespaces and the per-user base directory.
pub struct Env {
    pub user: User,
    pub attack: PathBuf,
    pub palisade: Option<PathBuf>,
    /// Why the inside half cannot run (no `palisade` binary, or no `run` subcommand yet).
    pub palisade_missing: Option<String>,
    /// `mnt=N,pid=N,user=N` of the host, for `--expect-outside-ns`.
    pub host_ns: String,
    pub base: tempfile::TempDir,
    /// `PALISADE_CACHE_DIR` for every `palisade run` of this user.
    pub cache: PathBuf,
    pub counter: AtomicU64,
}

impl Env {
    pub fn new(user: User, attack: PathBuf, palisade: Result<PathBuf, String>) -> Env {
        let binaries = shared_binaries(&attack, palisade.as_ref().ok());
        let base = tempfile::Builder::new()
            .prefix(&format!("escape-u{}-", user.uid()))
            .tempdir_in(battery_root())
            .expect("create the battery's base directory");
        chmod(base.path(), 0o755);
        let cache = base.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        chmod(&cache, 0o700);
        chown_tree(&cache, user);
        let (palisade, palisade_missing) = match (palisade, binaries.1) {
            (Ok(_), Some(bin)) => match run_subcommand_missing(&bin) {
                None => (Some(bin), None),
                Some(why) => (None, Some(why)),
            },
            (Err(why), _) => (None, Some(why)),
            (Ok(_), None) => (None, Some("palisade binary not copied".into())),
        };
        Env {
            user,
            attack: binaries.0,
            palisade,
            palisade_missing,
            host_ns: host_namespaces(),
            base,
            cache,
            counter: AtomicU64::new(0),
        }
    }

    /// A fresh marker: unique per run, DNS-label safe, easy to grep for in `/proc`.
    pub fn marker(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!(
            "palesc-{}-{}-{n}-{nanos:x}",
            std::process::id(),
            self.user.uid()
        )
    }
}

/// `<target>/tmp/escape-battery`, or its fallback outside a `0700` home, reachable by every
/// user (see `reachable.rs`).
fn battery_root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        crate::reachable::reachable_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "escape-battery")
    })
    .clone()
}

/// The attack and palisade binaries where every user can execute them: in place when they
/// already are, else copied once into the battery root.
fn shared_binaries(attack: &Path, palisade: Option<&PathBuf>) -> (PathBuf, Option<PathBuf>) {
    static SHARED: OnceLock<(PathBuf, Option<PathBuf>)> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let dir = battery_root();
            let place = |bin: &Path| crate::reachable::reachable_binary(bin, &dir);
            (place(attack), palisade.map(|p| place(p)))
        })
        .clone()
}

/// `None` when `palisade run --help` works, else why not.
fn run_subcommand_missing(palisade: &Path) -> Option<String> {
    match Command::new(palisade).args(["run", "--help"]).output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "`{} run --help` failed ({}): {}",
            palisade.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(error) => Some(format!("cannot run `{}`: {error}", palisade.display())),
    }
}

fn host_namespaces() -> String {
    ["mnt", "pid", "user"]
        .iter()
        .map(|kind| {
            let ino = std::fs::metadata(format!("/proc/self/ns/{kind}"))
                .unwrap()
                .ino();
            format!("{kind}={ino}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Give a tree to `user` (no-op unless the test is root and the user is someone else).
pub fn chown_tree(path: &Path, user: User) {
    if test_uid() != 0 || user.is_root() {
        return;
    }
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(user.uid()), Some(user.gid())).unwrap();
        if p.is_dir() && !p.is_symlink() {
            for entry in std::fs::read_dir(&p).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Where an attack runs
// ---------------------------------------------------------------------------------------------

/// How an attack's "works where it should" half runs for one user.
#[derive(Clone, Debug)]
pub enum How {
    /// A plain child process of the test.
    Plain,
    /// Under `unshare <flags> -- attack …` (a throwaway namespace).
    Unshare(&'static [&'static str]),
    /// Under `unshare <flags> -- sh -c 'attack …; exit $?'`: the shell stays PID 1 of the new
    /// PID namespace, so the attack has a PID 1 other than itself to aim at.
    UnshareShell(&'static [&'static str]),
    /// Cannot be shown for this user; the reason goes in the table.
    NotPossible(String),
}

/// Where one run happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Outside,
    Inside(Backend),
}

impl Place {
    pub fn label(self) -> &'static str {
        match self {
            Place::Outside => "outside",
            Place::Inside(b) => b.name(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fixture: targets the test owns
// ---------------------------------------------------------------------------------------------

/// Which files a run's workspace starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// An empty workspace.
    Plain,
    /// `AGENTS.md` and `.github/workflows/ci.yml` exist.
    Protected,
    /// `.secrets/key` exists in the workspace (a denied path inside it).
    SecretsInWorkspace,
}

/// Bytes a UDP or datagram listener received.
pub type Received = Arc<Mutex<Vec<Vec<u8>>>>;

/// A victim process on the host (spawned by the test, as the run's user).
pub struct Victim {
    pub child: Child,
    pub pid: u32,
    pub addr: u64,
}

/// A pty the test allocated: the master, the slave (the run's stdin) and its device number.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: std::fs::File,
    pub rdev: u64,
}

/// Everything one run attacks. Built fresh for every run (outside and each backend).
pub struct Fixture {
    pub place: Place,
    pub user: User,
    pub marker: String,
    pub host_ns: String,
    /// The run's root directory (`R`): `ws/`, `deny/`, `outside/`, `home/`, `sock/`, `audit/`.
    pub root: PathBuf,
    _root_guard: tempfile::TempDir,
    pub layout: Layout,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub tmp_dirs: Vec<tempfile::TempDir>,
    pub victim: Option<Victim>,
    pub pty: Option<Pty>,
    pub fd5: Option<std::fs::File>,
    pub keyring: Option<(CString, Vec<u8>)>,
    /// A file the harness writes the supervisor's pid into (inside) or the victim's (outside).
    pub pid_file: Option<PathBuf>,
    /// Host loopback ports the case's `loopback-only` policy lists (`loopbackPorts`).
    pub loopback_ports: Vec<u16>,
}

impl Fixture {
    pub fn new(env: &Env, case: &str, place: Place, layout: Layout) -> Fixture {
        let marker = env.marker();
        let guard = tempfile::Builder::new()
            .prefix(&format!("{case}-{}-", place.label()))
            .tempdir_in(env.base.path())
            .unwrap();
        let root = guard.path().to_path_buf();
        // The root pass keeps its fixtures to itself: a setuid-root file an attack makes in the
        // workspace must not be reachable by other local users even for a moment.
        chmod(&root, if env.user.is_root() { 0o700 } else { 0o755 });
        let mkdir = |rel: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(&p).unwrap();
            chmod(&p, 0o755);
            p
        };
        let write = |rel: &str, content: &str, mode: u32| {
            let p = root.join(rel);
            std::fs::write(&p, content).unwrap();
            chmod(&p, mode);
        };
        for dir in [
            "ws",
            "ws/mnt",
            "ws/newroot",
            "deny",
            "deny/secret-dir",
            "deny/empty-dir",
            "outside",
            "home",
            "sock",
            "audit",
        ] {
            mkdir(dir);
        }
        write(
            "deny/secret-dir/key",
            &format!("secret key {marker}\n"),
            0o600,
        );
        write(&format!("deny/secret-dir/{marker}"), "", 0o600);
        write(
            "deny/secret-file",
            &format!("secret file {marker}\n"),
            0o600,
        );
        chmod(&root.join("deny/secret-dir"), 0o700);
        write("home/.bashrc", "# original bashrc\n", 0o644);
        // Controls: readable inside, next to the denied paths (proves blocks come from the policy).
        write(
            "deny/allowed-file",
            &format!("allowed file {marker}\n"),
            0o600,
        );
        write("home/notes.txt", &format!("notes {marker}\n"), 0o600);
        mkdir("home/.ssh");
        write(
            "home/.ssh/id_ed25519",
            &format!("ssh key {marker}\n"),
            0o600,
        );
        chmod(&root.join("home/.ssh"), 0o700);
        match layout {
            Layout::Plain => {}
            Layout::Protected => {
                write("ws/AGENTS.md", "# original agents\n", 0o644);
                mkdir("ws/.github/workflows");
                write("ws/.github/workflows/ci.yml", "on: push\n", 0o644);
            }
            Layout::SecretsInWorkspace => {
                mkdir("ws/.secrets");
                write(
                    "ws/.secrets/key",
                    &format!("workspace secret {marker}\n"),
                    0o600,
                );
            }
        }
        chown_tree(&root, env.user);
        Fixture {
            place,
            user: env.user,
            marker,
            host_ns: env.host_ns.clone(),
            root,
            _root_guard: guard,
            layout,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            tmp_dirs: Vec::new(),
            victim: None,
            pty: None,
            fd5: None,
            keyring: None,
            pid_file: None,
            loopback_ports: Vec::new(),
        }
    }

    pub fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The denied read paths of the standard policy.
    pub fn denied_paths(&self) -> Vec<PathBuf> {
        [
            "deny/secret-dir",
            "deny/secret-file",
            "deny/empty-dir",
            "deny/missing",
        ]
        .iter()
        .map(|rel| self.path(rel))
        .collect()
    }

    /// What a TCP/Unix listener says to every client.
    pub fn banner(&self) -> String {
        format!("hello from the host {}\n", self.marker)
    }

    /// A TCP listener on `ip`, port chosen by the kernel; every client gets the banner.
    pub fn tcp(&mut self, ip: IpAddr) -> Result<u16, String> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|e| format!("cannot listen on {ip} here: {e}"))?;
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let banner = self.banner();
        self.serve(move || match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.write_all(banner.as_bytes());
                true
            }
            Err(_) => false,
        });
        Ok(port)
    }

    /// A UDP socket on `ip` that records what it receives and echoes it back.
    pub fn udp(&mut self, ip: IpAddr) -> Result<(u16, Received), String> {
        let socket = UdpSocket::bind(SocketAddr::new(ip, 0))
            .map_err(|e| format!("cannot bind {ip} here: {e}"))?;
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let port = socket.local_addr().unwrap().port();
        let received: Received = Arc::default();
        let sink = received.clone();
        self.serve(move || {
            let mut buf = [0u8; 1500];
            match socket.recv_from(&mut buf) {
                Ok((n, from)) => {
                    sink.lock().unwrap().push(buf[..n].to_vec());
                    let _ = socket.send_to(&buf[..n], from);
                    true
                }
                Err(_) => false,
            }
        });
        Ok((port, received))
    }

    /// A toy DNS resolver on 127.0.0.1: answers every A query with 192.0.2.123.
    pub fn dns(&mut self) -> (u16, Received) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let port = socket.local_addr().unwrap().port();
        let received: Received = Arc::default();
        let sink = received.clone();
        self.serve(move || {
            let mut buf = [0u8; 1500];
            match socket.recv_from(&mut buf) {
                Ok((n, from)) if n > 12 => {
                    let query = &buf[..n];
                    sink.lock().unwrap().push(query.to_vec());
                    let mut reply = Vec::with_capacity(n + 16);
                    reply.extend_from_slice(&query[0..2]);
                    reply.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
                    reply.extend_from_slice(&query[12..]);
                    reply.extend_from_slice(&[
                        0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 123,
                    ]);
                    let _ = socket.send_to(&reply, from);
                    true
                }
                _ => false,
            }
        });
        (port, received)
    }

    /// A pathname Unix stream listener at `path` (world-connectable); clients get the banner.
    pub fn unix_stream(&mut self, path: &Path) {
        let listener = UnixListener::bind(path).unwrap();
        chmod(path, 0o777);
        listener.set_nonblocking(true).unwrap();
        let banner = self.banner();
        self.serve(move || match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.write_all(banner.as_bytes());
                true
            }
            Err(_) => false,
        });
    }

    /// An abstract Unix stream listener; returns its name (without the leading NUL).
    pub fn unix_abstract(&mut self) -> String {
        let name = format!("palisade-escape-{}", self.marker);
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let banner = self.banner();
        self.serve(move || match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.write_all(banner.as_bytes());
                true
            }
            Err(_) => false,
        });
        name
    }

    /// A pathname Unix datagram socket at `path` that records what it receives.
    pub fn unix_dgram(&mut self, path: &Path) -> Received {
        let socket = UnixDatagram::bind(path).unwrap();
        chmod(path, 0o777);
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let received: Received = Arc::default();
        let sink = received.clone();
        self.serve(move || {
            let mut buf = [0u8; 1500];
            match socket.recv(&mut buf) {
                Ok(n) => {
                    sink.lock().unwrap().push(buf[..n].to_vec());
                    true
                }
                Err(_) => false,
            }
        });
        received
    }

    /// Run `step` in a thread until the fixture drops (`step` returns whether it did work).
    fn serve(&mut self, mut step: impl FnMut() -> bool + Send + 'static) {
        let stop = self.stop.clone();
        self.threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if !step() {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }));
    }

    /// A directory in the host's `/tmp` (for sockets and files that must live there).
    pub fn host_tmp_dir(&mut self) -> PathBuf {
        self.short_dir(Path::new("/tmp"))
    }

    /// A directory for host sockets outside `/tmp`, with a path short enough for `sun_path`
    /// (108 bytes): in `/run`, where real daemons keep theirs (`/run/docker.sock`), when the
    /// test may write there; else `/var/tmp`.
    pub fn host_socket_dir(&mut self) -> PathBuf {
        let run = Path::new("/run");
        let writable =
            std::fs::metadata(run).is_ok_and(|m| m.uid() == test_uid() || m.mode() & 0o002 != 0);
        self.short_dir(if writable { run } else { Path::new("/var/tmp") })
    }

    fn short_dir(&mut self, parent: &Path) -> PathBuf {
        let dir = tempfile::Builder::new()
            .prefix("palisade-esc-")
            .tempdir_in(parent)
            .unwrap();
        chmod(dir.path(), 0o755);
        let path = dir.path().to_path_buf();
        self.tmp_dirs.push(dir);
        path
    }

    /// Spawn the victim: `palisade-attack victim`, as the run's user, with the marker in its
    /// argv, its environment (`PALISADE_VICTIM_SECRET`) and its memory, its working directory
    /// in the denied secret directory.
    pub fn victim(&mut self, attack: &Path) -> (u32, u64) {
        if let Some(v) = &self.victim {
            return (v.pid, v.addr);
        }
        let mut argv = self.user.wrap();
        argv.push(attack.display().to_string());
        argv.extend(["victim".into(), "--marker".into(), self.marker.clone()]);
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("PALISADE_VICTIM_SECRET", &self.marker)
            .current_dir(self.path("deny/secret-dir"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = Vec::new();
        let mut stdout = child.stdout.take().unwrap();
        let mut byte = [0u8; 1];
        while stdout.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        let line = String::from_utf8_lossy(&line).to_string();
        let addr = line
            .strip_prefix("ready 0x")
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or_else(|| panic!("the victim did not start: `{line}`"));
        let pid = child.id();
        self.victim = Some(Victim { child, pid, addr });
        (pid, addr)
    }

    /// Whether the victim still runs (a signal takes a moment to kill it: allow 1 s).
    pub fn victim_alive(&mut self) -> bool {
        let Some(v) = &mut self.victim else {
            return false;
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if !matches!(v.child.try_wait(), Ok(None)) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Allocate a pty whose slave becomes the run's stdin and controlling terminal.
    pub fn pty(&mut self) -> u64 {
        let pty = open_pty(self.user);
        let rdev = pty.rdev;
        self.pty = Some(pty);
        rdev
    }

    /// What arrived in the pty's input queue (read from the slave, non-blocking).
    pub fn pty_input(&mut self) -> Vec<u8> {
        let Some(pty) = &mut self.pty else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            match pty.slave.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        out
    }

    /// Open `path` and hand it to the run as fd 5.
    pub fn inherit_fd5(&mut self, path: &Path) {
        self.fd5 = Some(std::fs::File::open(path).unwrap());
    }

    /// Give the run a fresh session keyring holding a `user` key `desc` with the marker.
    pub fn keyring(&mut self, desc: &str) {
        self.keyring = Some((
            CString::new(desc).unwrap(),
            format!("keyring secret {}", self.marker).into_bytes(),
        ));
    }

    /// A pid file in the workspace: inside, the harness writes the `palisade` supervisor's pid
    /// into it after spawning; outside, a stand-in (the victim) is written right away.
    pub fn supervisor_pid_file(&mut self, attack: &Path) -> PathBuf {
        let file = self.ws().join("supervisor.pid");
        if self.place == Place::Outside {
            let (pid, _) = self.victim(attack);
            std::fs::write(&file, pid.to_string()).unwrap();
            chown_tree(&file, self.user);
        }
        self.pid_file = Some(file.clone());
        file
    }

    /// `--expect-outside-ns` and its value.
    pub fn ns_args(&self) -> [String; 2] {
        ["--expect-outside-ns".into(), self.host_ns.clone()]
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        if let Some(mut v) = self.victim.take() {
            let _ = v.child.kill();
            let _ = v.child.wait();
        }
        kill_marked(&self.marker);
    }
}

#[allow(unsafe_code)]
fn open_pty(user: User) -> Pty {
    // SAFETY: posix_openpt returns a new descriptor or -1.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    assert!(
        master >= 0,
        "posix_openpt: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `master` is a fresh descriptor nothing else owns.
    let master = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(master) };
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `master` is a pty master; `name` is writable for its length.
    unsafe {
        assert_eq!(libc::grantpt(master.as_raw_fd()), 0);
        assert_eq!(libc::unlockpt(master.as_raw_fd()), 0);
        assert_eq!(
            libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()),
            0
        );
    }
    // SAFETY: ptsname_r wrote a NUL-terminated path into `name`.
    let path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    // Raw mode: injected bytes are readable at once, no echo, no line editing.
    // SAFETY: an all-zero termios is a valid value; tcgetattr/tcsetattr get a live one.
    unsafe {
        let mut termios: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(slave.as_raw_fd(), &mut termios), 0);
        libc::cfmakeraw(&mut termios);
        assert_eq!(
            libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &termios),
            0
        );
    }
    if test_uid() == 0 && !user.is_root() {
        std::os::unix::fs::chown(&path, Some(user.uid()), None).unwrap();
    }
    let rdev = slave.metadata().unwrap().rdev();
    Pty {
        master,
        slave,
        rdev,
    }
}

use std::os::unix::fs::OpenOptionsExt;

// ---------------------------------------------------------------------------------------------
// Host-side checks
// ---------------------------------------------------------------------------------------------

/// What the host checks after a run, to see what really escaped.
pub enum Oracle {
    /// Nothing beyond the attack's own verdict.
    None,
    /// The path must not exist afterwards (removed after the check).
    Absent(PathBuf),
    /// The file must still hold exactly these bytes.
    Unchanged(PathBuf, Vec<u8>),
    /// The path must still exist.
    Present(PathBuf),
    /// The path, if it exists, must carry no setuid/setgid bit.
    NoSetuid(PathBuf),
    /// The victim must still run.
    VictimAlive,
    /// The listener must not have received the marker.
    NotReceived(Received),
    /// The pty's input queue must not hold the marker.
    TtyClean,
    /// No process whose command line carries the marker may remain.
    NoSurvivors,
}

impl Oracle {
    /// `Some(what reached the host)` if the attack's effect is visible on the host.
    pub fn check(&self, fixture: &mut Fixture) -> Option<String> {
        let marker = fixture.marker.clone();
        match self {
            Oracle::None => None,
            Oracle::Absent(path) => {
                let exists = path.symlink_metadata().is_ok();
                let _ = std::fs::remove_file(path);
                exists.then(|| format!("`{}` exists on the host", path.display()))
            }
            Oracle::Unchanged(path, before) => match std::fs::read(path) {
                Ok(now) if &now == before => None,
                Ok(_) => Some(format!("`{}` changed on the host", path.display())),
                Err(e) => Some(format!("`{}` is gone on the host: {e}", path.display())),
            },
            Oracle::Present(path) => {
                (!path.exists()).then(|| format!("`{}` is gone on the host", path.display()))
            }
            Oracle::NoSetuid(path) => match std::fs::metadata(path) {
                Ok(meta) if meta.mode() & 0o6000 != 0 => {
                    let mode = meta.mode() & 0o7777;
                    let _ = std::fs::remove_file(path);
                    Some(format!(
                        "`{}` has mode {mode:o} on the host",
                        path.display()
                    ))
                }
                _ => None,
            },
            Oracle::VictimAlive => {
                (!fixture.victim_alive()).then(|| "the host victim died".to_string())
            }
            Oracle::NotReceived(received) => {
                let got = received.lock().unwrap();
                got.iter()
                    .any(|d| String::from_utf8_lossy(d).contains(&marker))
                    .then(|| "the host listener received the marker".to_string())
            }
            Oracle::TtyClean => {
                let input = fixture.pty_input();
                String::from_utf8_lossy(&input)
                    .contains(&marker)
                    .then(|| "the marker arrived in the host pty's input queue".to_string())
            }
            Oracle::NoSurvivors => {
                let first = marked_processes(&marker);
                if first.is_empty() {
                    return None;
                }
                std::thread::sleep(Duration::from_secs(1));
                let later = marked_processes(&marker);
                kill_marked(&marker);
                Some(format!(
                    "processes survived on the host: {first:?} (after 1 s: {later:?})"
                ))
            }
        }
    }

    /// Whether the attack's own verdict is only "planted" and the oracle decides.
    pub fn decides(&self) -> bool {
        matches!(self, Oracle::NoSurvivors)
    }
}

/// Pids (other than ours) whose command line carries `marker`.
pub fn marked_processes(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(marker)
        {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

/// SIGKILL every process carrying `marker` (only the battery's own helpers carry it).
pub fn kill_marked(marker: &str) {
    for _ in 0..3 {
        let pids = marked_processes(marker);
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // Re-check right before signalling: the pid must still carry our marker.
            if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline"))
                && String::from_utf8_lossy(&cmdline).contains(marker)
            {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/// What a run produced.
pub struct Ran {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// How long the child ran.
    pub elapsed: Duration,
    /// Whether the harness SIGKILLed the child (`kill_supervisor`).
    pub killed: bool,
}

/// Spawn `argv` with the fixture's stdin, fd 5, controlling tty and keyring; wait (killing it
/// after `RUN_TIMEOUT`). `on_spawn` runs right after the spawn with the child's pid.
///
/// With `kill_supervisor`, once the verdict line is out and a lingerer carrying the marker is
/// visible on the host, the child (the `palisade` supervisor, or the attack itself outside) is
/// SIGKILLed; the caller's oracle then looks for survivors.
pub fn run(
    argv: &[String],
    env: &[(String, String)],
    fixture: &Fixture,
    kill_supervisor: bool,
    on_spawn: impl FnOnce(u32),
) -> Ran {
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(fixture.ws())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match &fixture.pty {
        Some(pty) => {
            command.stdin(pty.slave.try_clone().unwrap());
        }
        None => {
            command.stdin(Stdio::null());
        }
    }
    apply_child_setup(&mut command, fixture);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            return Ran {
                status: None,
                stdout: String::new(),
                stderr: format!("spawn `{}`: {error}", argv[0]),
                timed_out: false,
                elapsed: Duration::ZERO,
                killed: false,
            };
        }
    };
    let started = Instant::now();
    on_spawn(child.id());
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    let out_buf = out.1.clone();
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut timed_out = false;
    let mut killed = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() > deadline => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => {
                if kill_supervisor && !killed && out_buf.lock().unwrap().contains(&b'\n') {
                    let lingering = marked_processes(&fixture.marker).into_iter().any(|pid| {
                        std::fs::read(format!("/proc/{pid}/cmdline"))
                            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("linger"))
                    });
                    if lingering {
                        let _ = child.kill();
                        killed = true;
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => break None,
        }
    };
    let elapsed = started.elapsed();
    if killed {
        // Give the kernel a moment to take down whatever dies with the supervisor.
        let deadline = Instant::now() + Duration::from_secs(3);
        while !marked_processes(&fixture.marker).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ran {
        status,
        stdout: join_reader(out),
        stderr: join_reader(err),
        timed_out,
        elapsed,
        killed,
    }
}

type Shared = Arc<Mutex<Vec<u8>>>;

fn reader(mut pipe: impl Read + Send + 'static) -> (JoinHandle<()>, Shared) {
    let buf: Shared = Arc::default();
    let sink = buf.clone();
    let handle = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    (handle, buf)
}

/// A reader's text; stops waiting after a while if a leftover process holds the pipe open.
fn join_reader((handle, buf): (JoinHandle<()>, Shared)) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !handle.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
    if handle.is_finished() {
        text
    } else {
        format!("{text}<pipe still held open by a leftover process>")
    }
}

/// fd 5, the controlling terminal and the session keyring, between fork and exec.
#[allow(unsafe_code)]
fn apply_child_setup(command: &mut Command, fixture: &Fixture) {
    let fd5 = fixture.fd5.as_ref().map(|f| f.as_raw_fd());
    let ctty = fixture.pty.is_some();
    let keyring = fixture.keyring.clone();
    if fd5.is_none() && !ctty && keyring.is_none() {
        return;
    }
    let user_type = c"user";
    // SAFETY: the closure makes only raw system calls (async-signal-safe) on data prepared
    // before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if let Some((desc, payload)) = &keyring {
                // KEYCTL_JOIN_SESSION_KEYRING (1) with no name: a fresh anonymous keyring, so
                // the test never touches the user's real session keyring.
                if libc::syscall(libc::SYS_keyctl, 1, std::ptr::null::<libc::c_char>()) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(
                    libc::SYS_add_key,
                    user_type.as_ptr(),
                    desc.as_ptr(),
                    payload.as_ptr(),
                    payload.len(),
                    -3 as libc::c_long,
                ) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if ctty {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(fd) = fd5 {
                // dup2 onto itself would keep FD_CLOEXEC: clear it instead.
                let ret = if fd == 5 {
                    libc::fcntl(5, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, 5)
                };
                if ret < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Verdicts and the table
// ---------------------------------------------------------------------------------------------

/// A run's final verdict, after the host's checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Succeeded,
    Blocked,
    /// The attack "worked" inside, but nothing reached the host (a private mask or tmpfs).
    Contained,
    UnsafeRefused,
    /// The attack tool reported `error`.
    ToolError,
    /// No usable verdict line (crash, timeout, junk on stdout, palisade failed).
    Broken,
    /// `palisade run` refused the policy (exit 125), nothing launched.
    Refused,
    /// Not run: why.
    NotRun,
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Succeeded => "succeeded",
            Verdict::Blocked => "blocked",
            Verdict::Contained => "contained",
            Verdict::UnsafeRefused => "unsafe-refused",
            Verdict::ToolError => "error",
            Verdict::Broken => "broken",
            Verdict::Refused => "refused",
            Verdict::NotRun => "n/a",
        }
    }
}

/// One cell of the table.
#[derive(Clone, Debug)]
pub struct Cell {
    pub verdict: Verdict,
    pub detail: String,
    /// Whether this cell's outcome is asserted (outside: must succeed; inside: the backend's
    /// claim), as opposed to only recorded.
    pub asserted: bool,
    /// `Some(problem)` if this cell fails the battery.
    pub failure: Option<String>,
    /// For an attack refused inside: whether the run's outcome lists a denial for it (the
    /// refusal was observed and explained); `None` where that does not apply.
    pub explained: Option<bool>,
}

/// Parse the attack's one JSON line.
pub fn parse_verdict(ran: &Ran, attack: &str) -> Result<(String, String), String> {
    if ran.timed_out {
        return Err(format!("timed out after {RUN_TIMEOUT:?}"));
    }
    let lines: Vec<&str> = ran
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let [line] = lines.as_slice() else {
        return Err(format!(
            "expected exactly one JSON line on stdout, got {} (status {:?}); stderr: {}",
            lines.len(),
            ran.status,
            tail(&ran.stderr)
        ));
    };
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("bad JSON line `{line}`: {e}"))?;
    let field = |k: &str| value.get(k).and_then(|v| v.as_str()).map(str::to_string);
    if field("attack").as_deref() != Some(attack) {
        return Err(format!("verdict line is for another attack: `{line}`"));
    }
    match (field("verdict"), field("detail")) {
        (Some(v), Some(d)) => Ok((v, d)),
        _ => Err(format!("verdict line lacks fields: `{line}`")),
    }
}

/// The last lines of a stream, on one line.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    lines[start..].join(" | ")
}

/// The rendered table of one test function.
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<(String, Vec<Cell>)>,
}

impl Table {
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = std::iter::once(4)
            .chain(self.columns.iter().map(|c| c.len()))
            .collect();
        for (name, cells) in &self.rows {
            widths[0] = widths[0].max(name.len());
            for (i, cell) in cells.iter().enumerate() {
                widths[i + 1] = widths[i + 1].max(cell_text(cell).len());
            }
        }
        let mut out = String::new();
        let _ = writeln!(out, "\n=== escape battery: {} ===", self.title);
        let _ = write!(out, "{:w$}", "CASE", w = widths[0]);
        for (i, c) in self.columns.iter().enumerate() {
            let _ = write!(out, "  {:w$}", c, w = widths[i + 1]);
        }
        out.push('\n');
        for (name, cells) in &self.rows {
            let _ = write!(out, "{:w$}", name, w = widths[0]);
            for (i, cell) in cells.iter().enumerate() {
                let _ = write!(out, "  {:w$}", cell_text(cell), w = widths[i + 1]);
            }
            out.push('\n');
        }
        let mut counts: BTreeMap<String, BTreeMap<&'static str, usize>> = BTreeMap::new();
        let mut asserted: BTreeMap<String, usize> = BTreeMap::new();
        for (_, cells) in &self.rows {
            for (i, cell) in cells.iter().enumerate() {
                let column = self.columns[i].clone();
                if cell.asserted {
                    *asserted.entry(column.clone()).or_default() += 1;
                }
                *counts
                    .entry(column)
                    .or_default()
                    .entry(cell.verdict.word())
                    .or_default() += 1;
            }
        }
        for column in &self.columns {
            let _ = writeln!(
                out,
                "  {column}: {} asserted; verdicts {:?}",
                asserted.get(column).copied().unwrap_or_default(),
                counts.get(column).cloned().unwrap_or_default()
            );
        }
        out
    }

    pub fn failures(&self) -> Vec<String> {
        let mut all = Vec::new();
        for (name, cells) in &self.rows {
            for (i, cell) in cells.iter().enumerate() {
                if let Some(problem) = &cell.failure {
                    all.push(format!(
                        "{name} [{}]: {problem} — {}",
                        self.columns[i], cell.detail
                    ));
                }
            }
        }
        all
    }

    /// Every cell's detail, for the log.
    pub fn details(&self) -> String {
        let mut out = String::new();
        for (name, cells) in &self.rows {
            for (i, cell) in cells.iter().enumerate() {
                let explained = match cell.explained {
                    Some(true) => " (explained)",
                    Some(false) => " (UNEXPLAINED: no denial recorded)",
                    None => "",
                };
                let _ = writeln!(
                    out,
                    "  {name} [{}] {}{explained}: {}",
                    self.columns[i],
                    cell.verdict.word(),
                    cell.detail
                );
            }
        }
        out
    }
}

fn cell_text(cell: &Cell) -> String {
    if cell.failure.is_some() {
        format!("{} !!", cell.verdict.word())
    } else {
        cell.verdict.word().to_string()
    }
}

/// The `palisade` binary next to this test's deps directory (built by `cargo test
/// --workspace` or `cargo build -p palisade`); `PALISADE_ESCAPE_PALISADE` overrides.
pub fn palisade_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("PALISADE_ESCAPE_PALISADE") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().unwrap();
    let binary = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("palisade");
    if binary.exists() {
        Ok(binary)
    } else {
        Err(format!(
            "`{}` is missing: run `cargo test --workspace` or `cargo build -p palisade` first",
            binary.display()
        ))
    }
}
