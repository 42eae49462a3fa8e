//! The cost of observing denials: the same command under Palisade's seccomp filter installed
//! plain (as `bwrap --seccomp` would) and observed (the listener answered by an observer
//! thread, as `palisade run` does), interleaved in one run.
//!
//! - `file-heavy`: creates, reads and removes 2,000 files in a fresh directory and lists a
//!   system directory tree: nothing is refused, so observing must cost nothing (target ≤ 1.10×).
//! - `refusal-flood`: 20,000 refused `ptrace` calls: each one is a round trip to the observer,
//!   the bound on what a command that triggers denials in a loop pays.
//! - `connect-flood`: 5,000 TCP connections to a listener of the command's own on loopback,
//!   under the profile of a bwrap sandbox with its own loopback: every `connect` is stopped for
//!   the observer to look at (the address, then the socket tables, as for the proxy's port)
//!   and let run. What each connection pays for being explained when refused.
//!
//! - `masks-true`, `masks-file-heavy`, `masks-refusal-flood`: a bwrap sandbox whose denied
//!   paths (a directory and a file) are masked mute (`plain`: a mode-0000 tmpfs, `/dev/null`)
//!   or observed (`observed`: FUSE nodes served by this process, mounted before and unmounted
//!   after each run, as `palisade run` does as root, and as another user only where bwrap's
//!   parent cannot mount them itself: through `fusermount3`). `true` is the per-run cost of
//!   observing that way; the
//!   file-heavy command never touches a denied path (target ≤ 1.10×); the flood opens a file
//!   beneath the denied directory 20,000 times, each a round trip to the server.
//!
//! - `masks-landlock-true`, `masks-bwrap-run-true`: `palisade run --backend linux-landlock
//!   -- true` and the same under `linux-bwrap` (release binary,
//!   warm probe cache), denying a file that does not exist (`plain`: nothing to mask) or one
//!   that does (`observed`: its mask mounted and bound by init in namespaces of the
//!   sandbox's own, served by the supervisor, its ruleset rule added): the per-run cost of
//!   observing under Landlock; under bwrap, as any user but root, bwrap's parent mounts the
//!   masks the same way in namespaces of its own (root mounts them with `mount(2)`). The
//!   home is empty, so no built-in credential store adds masks to either.
//!
//! Run with `cargo bench -p palisade-suite --bench observe` (as another user, the bench binary
//! with `PALISADE_BENCH_TMPDIR` and `CRITERION_HOME` set to directories that user can write); the ratios of the medians are
//! printed at the end. Under `cargo test --all-targets` each benchmark runs once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unsafe_code,
    reason = "benchmarks fail loudly; pre_exec is unsafe"
)]

use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use palisade_shims::plan::{Mechanism, Reach};
use palisade_shims::seccomp::{self, Arch, Profile, observe};

const PROFILE: Profile = Profile {
    mechanism: Mechanism::Bwrap,
    reach: Reach::Nothing,
};

const FILE_HEAVY: &str = "i=0; while [ $i -lt 2000 ]; do echo x > \"$0/f$i\"; i=$((i+1)); done; \
     cat \"$0\"/f* > /dev/null; rm -f \"$0\"/f*; find /usr/share/doc -type f > /dev/null 2>&1; true";

const FLOOD: &str = "import ctypes\nlibc = ctypes.CDLL(None)\nfor _ in range(20000): libc.syscall(101, 0, 0, 0, 0)\n";

const OWN_LOOPBACK: Profile = Profile {
    mechanism: Mechanism::Bwrap,
    reach: Reach::OwnLoopback,
};

const CONNECTS: &str = "import socket\nl = socket.socket()\nl.bind(('127.0.0.1', 0))\nl.listen(64)\n\
for _ in range(5000):\n    c = socket.create_connection(l.getsockname())\n    a, _ = l.accept()\n    a.close()\n    c.close()\n";

fn run(program: &str, args: &[&str], observed: bool) {
    run_under(PROFILE, program, args, observed);
}

fn run_under(profile: Profile, program: &str, args: &[&str], observed: bool) {
    let plain = seccomp::build(&profile).unwrap();
    let mut command = Command::new(program);
    command
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if observed {
        let (ours, theirs) = observe::channel().unwrap();
        let watch = observe::Watch::for_reach(profile.reach, Vec::new());
        let observer = observe::Observer::start(
            observe::Channel::Connected(ours),
            Arch::native().unwrap(),
            profile,
            watch,
        )
        .unwrap();
        let filter = plain.observed();
        let fd = theirs.as_raw_fd();
        // SAFETY: install_observed allocates nothing and only makes system calls.
        unsafe {
            command.pre_exec(move || {
                seccomp::install_observed(&filter, fd)
                    .map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))
            });
        }
        let status = command.status().unwrap();
        drop(theirs);
        let seen = observer.finish();
        assert!(status.success() && seen.listening, "{status} {seen:?}");
    } else {
        // SAFETY: install allocates nothing and only makes system calls.
        unsafe {
            command.pre_exec(move || {
                seccomp::install(&plain).map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))
            });
        }
        assert!(command.status().unwrap().success());
    }
}

fn criterion_dir() -> Option<PathBuf> {
    // Where criterion writes, when told (a run as another user cannot write under target/).
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return Some(PathBuf::from(home));
    }
    // target/<profile>/deps/observe-… → target/criterion
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.join("criterion"))
}

fn median_ns(group: &str, function: &str) -> Option<f64> {
    let path = criterion_dir()?
        .join(group)
        .join(function)
        .join("new")
        .join("estimates.json");
    let estimates: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    estimates.pointer("/median/point_estimate")?.as_f64()
}

fn ratio(group: &str) {
    if let (Some(plain), Some(observed)) = (median_ns(group, "plain"), median_ns(group, "observed"))
    {
        println!(
            "{group}: observed / plain = {:.3} (medians {:.2} ms / {:.2} ms)",
            observed / plain,
            observed / 1e6,
            plain / 1e6
        );
    }
}

/// Where the benches make their directories: `PALISADE_BENCH_TMPDIR` for a run as another
/// user, who cannot write under target/ (not under /tmp, which a sandbox replaces).
fn bench_tmpdir() -> PathBuf {
    std::env::var_os("PALISADE_BENCH_TMPDIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from)
}

fn observing(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(bench_tmpdir()).unwrap();
    let work: &Path = dir.path();
    let work = work.to_str().unwrap().to_owned();
    let mut group = c.benchmark_group("file-heavy");
    group.sample_size(10);
    group.bench_function("plain", |b| {
        b.iter(|| run("/bin/sh", &["-c", FILE_HEAVY, &work], false))
    });
    group.bench_function("observed", |b| {
        b.iter(|| run("/bin/sh", &["-c", FILE_HEAVY, &work], true))
    });
    group.finish();

    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if let Some(python) = python {
        let mut group = c.benchmark_group("refusal-flood");
        group.sample_size(10);
        group.bench_function("plain", |b| b.iter(|| run(python, &["-c", FLOOD], false)));
        group.bench_function("observed", |b| b.iter(|| run(python, &["-c", FLOOD], true)));
        group.finish();
        let mut group = c.benchmark_group("connect-flood");
        group.sample_size(10);
        group.bench_function("plain", |b| {
            b.iter(|| run_under(OWN_LOOPBACK, python, &["-c", CONNECTS], false))
        });
        group.bench_function("observed", |b| {
            b.iter(|| run_under(OWN_LOOPBACK, python, &["-c", CONNECTS], true))
        });
        group.finish();
    }
    ratio("file-heavy");
    ratio("refusal-flood");
    ratio("connect-flood");
}

/// A bwrap sandbox with a denied directory and a denied file, its masks mute or observed.
struct Masked {
    _dir: tempfile::TempDir,
    root: PathBuf,
    plan: palisade_shims::plan::LaunchPlan,
}

impl Masked {
    fn new() -> Masked {
        let dir = tempfile::tempdir_in(bench_tmpdir()).unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for sub in ["ws", "run", "home/.aws"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::write(root.join("home/.aws/credentials"), "SECRET").unwrap();
        std::fs::write(root.join("home/.netrc"), "SECRET").unwrap();
        let plan = palisade_shims::plan::LaunchPlan {
            mechanism: Mechanism::Bwrap,
            network: palisade_shims::plan::Network::None,
            workspace: root.join("ws"),
            writable_roots: vec![root.join("ws"), root.join("run")],
            read_only_root: true,
            denied_read_paths: vec![root.join("home/.aws"), root.join("home/.netrc")],
            protected_paths: Vec::new(),
            syscall_filter: false,
            command: Vec::new(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            run_temp_dir: root.join("run"),
            budgets: palisade_shims::plan::Budgets::default(),
            unix_sockets: Vec::new(),
        };
        Masked {
            _dir: dir,
            root,
            plan,
        }
    }

    fn run(&self, script: &str, observed: bool) {
        use palisade_shims::{bwrap, fsfacts, fusemask};
        let mut plan = self.plan.clone();
        plan.command = vec!["/bin/sh".into(), "-c".into(), script.into()];
        let facts = fsfacts::measure(&plan).unwrap();
        let at = self.root.join("masks");
        let args =
            bwrap::argv_observed(&plan, &facts, None, None, observed.then_some(&*at)).unwrap();
        let server =
            observed.then(|| fusemask::MaskServer::mount(&at, &args.denied_masks).unwrap());
        let status = Command::new("bwrap")
            .args(&args.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{status}");
        if let Some(server) = server {
            let seen = server.finish();
            assert!(seen.error.is_none(), "{seen:?}");
        }
    }
}

fn masks(c: &mut Criterion) {
    if !Path::new("/usr/bin/bwrap").exists() || palisade_shims::fusemask::mounter().is_err() {
        eprintln!("masks: skipped (needs bwrap and a FUSE mount: root, or fusermount3)");
        return;
    }
    let masked = Masked::new();
    let work = masked.root.join("ws");
    let work = work.to_str().unwrap();
    let heavy = FILE_HEAVY.replace("$0", work);
    let flood = format!(
        "i=0; while [ $i -lt 20000 ]; do command : 2>/dev/null < {}/credentials; i=$((i+1)); done; true",
        masked.root.join("home/.aws").display()
    );
    for (group, script) in [
        ("masks-true", "true"),
        ("masks-file-heavy", heavy.as_str()),
        ("masks-refusal-flood", flood.as_str()),
    ] {
        let mut g = c.benchmark_group(group);
        // The per-run cost is small beside bwrap's own: more samples for it.
        g.sample_size(if group == "masks-true" { 40 } else { 10 });
        g.bench_function("plain", |b| b.iter(|| masked.run(script, false)));
        g.bench_function("observed", |b| b.iter(|| masked.run(script, true)));
        g.finish();
    }
    for group in ["masks-true", "masks-file-heavy", "masks-refusal-flood"] {
        ratio(group);
    }
    if let (Some(plain), Some(observed)) = (
        median_ns("masks-true", "plain"),
        median_ns("masks-true", "observed"),
    ) {
        println!(
            "masks-true: observing costs {:.2} ms per run",
            (observed - plain) / 1e6
        );
    }
}

/// The `palisade` binary next to this bench's profile directory, if it was built.
fn palisade_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let binary = exe.parent()?.parent()?.join("palisade");
    binary.exists().then_some(binary)
}

fn run_masks(c: &mut Criterion) {
    let Some(palisade) = palisade_binary() else {
        eprintln!("masks-run: skipped (build the palisade binary first)");
        return;
    };
    if palisade_shims::fusemask::mounter().is_err() {
        eprintln!("masks-run: skipped (needs a FUSE mount: root, or fusermount3)");
        return;
    }
    let dir = tempfile::tempdir_in(bench_tmpdir()).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    for sub in ["ws", "home", "cache", "secrets"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::write(root.join("secrets/token"), "SECRET").unwrap();
    let (missing, existing) = (root.join("secrets/missing"), root.join("secrets/token"));
    for (group, backend) in [
        ("masks-landlock-true", "linux-landlock"),
        ("masks-bwrap-run-true", "linux-bwrap"),
    ] {
        if backend == "linux-bwrap" && !Path::new("/usr/bin/bwrap").exists() {
            continue;
        }
        let run = |denied: &Path| {
            let status = Command::new(&palisade)
                .args(["run", "--backend", backend, "--deny-read"])
                .arg(denied)
                .args(["--", "true"])
                .current_dir(root.join("ws"))
                .env("HOME", root.join("home"))
                .env("PALISADE_CACHE_DIR", root.join("cache"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "{status}");
        };
        run(&existing); // the probe cache
        let mut g = c.benchmark_group(group);
        g.sample_size(40);
        g.bench_function("plain", |b| b.iter(|| run(&missing)));
        g.bench_function("observed", |b| b.iter(|| run(&existing)));
        g.finish();
        ratio(group);
        if let (Some(plain), Some(observed)) =
            (median_ns(group, "plain"), median_ns(group, "observed"))
        {
            println!(
                "{group}: observing costs {:.2} ms per run",
                (observed - plain) / 1e6
            );
        }
    }
}

criterion_group!(benches, observing, masks, run_masks);
criterion_main!(benches);
