//! The bwrap shim against the real `/usr/bin/bwrap`: every claim is first shown to hold
//! *outside* the sandbox (the attack works against a target this test owns), then shown to fail
//! inside. Runs as root and as an unprivileged user alike (for example
//! `setpriv --reuid 65534 --regid 65534 --clear-groups <test binary>` with
//! `PALISADE_TEST_TMPDIR` pointing at a directory that user can write).
//!
//! Fixtures live under `PALISADE_TEST_TMPDIR`, else cargo's `CARGO_TARGET_TMPDIR` — deliberately
//! not under `/tmp`, which the sandbox replaces with a private tmpfs (one test uses `/tmp` on
//! purpose). Probes that need more than `sh` (Unix and TCP connects) re-run this test binary
//! inside the sandbox as a helper (`helper_entry`).

// Linux kernel mechanisms; the macOS type-check (`--target aarch64-apple-darwin`) skips them.
#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed setup step should fail the test loudly"
)]

use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use palisade_shims::bwrap::{BwrapError, argv, argv_observed, trial_argv};
use palisade_shims::fsfacts::{cleanup_created, measure};
use palisade_shims::fusemask;
use palisade_shims::placeholder;
use palisade_shims::plan::{Budgets, LaunchPlan, Mechanism, Network};

const BWRAP: &str = "/usr/bin/bwrap";
const HELPER_ENV: &str = "PALISADE_BWRAP_TEST_HELPER";

// ---------------------------------------------------------------------------------------------
// Fixture

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    run: PathBuf,
    outside: PathBuf,
    /// Dropped last: after the directory (and any socket in it) is gone.
    _serial: Serial,
}

/// The tests that use a fixture run one at a time. Each measures the host's whole socket table
/// (`/proc/net/unix`), and a socket another test removes between that measurement and this
/// test's bwrap (its fixture dropped, or a test of a vanishing socket) would be masked at a
/// path that no longer exists, where bwrap cannot create the mountpoint in the read-only root.
/// (`palisade run` retries such a setup failure once; these tests call bwrap directly.) The
/// whole file takes well under a second. Reentrant, for a test that makes two fixtures.
struct Serial;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

thread_local! {
    static HELD: std::cell::RefCell<(usize, Option<std::sync::MutexGuard<'static, ()>>)> =
        const { std::cell::RefCell::new((0, None)) };
}

impl Serial {
    fn take() -> Self {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if held.0 == 0 {
                held.1 = Some(SERIAL.lock().unwrap_or_else(|p| p.into_inner()));
            }
            held.0 += 1;
        });
        Serial
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            held.0 -= 1;
            if held.0 == 0 {
                held.1 = None;
            }
        });
    }
}

fn base_dir() -> PathBuf {
    let base = std::env::var_os("PALISADE_TEST_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    fs::create_dir_all(&base).ok();
    base
}

impl Fixture {
    fn new() -> Self {
        assert!(
            Path::new(BWRAP).exists(),
            "{BWRAP} is missing: install bubblewrap (apt-get install bubblewrap)"
        );
        let base = base_dir();
        let dir = tempfile::Builder::new()
            .prefix("bwrap-")
            .tempdir_in(&base)
            .unwrap_or_else(|err| {
                panic!(
                    "cannot create a fixture under `{}` ({err}); set PALISADE_TEST_TMPDIR to a \
                     writable directory outside /tmp",
                    base.display()
                )
            });
        Self::at(dir)
    }

    fn at(dir: tempfile::TempDir) -> Self {
        let serial = Serial::take();
        let root = fs::canonicalize(dir.path()).unwrap();
        let ws = root.join("ws");
        let home = root.join("home");
        let run = root.join("run");
        let outside = root.join("outside");
        for d in [&ws, &home, &run, &outside] {
            fs::create_dir(d).unwrap();
        }
        Self {
            _dir: dir,
            root,
            ws,
            home,
            run,
            outside,
            _serial: serial,
        }
    }

    fn plan(&self, network: Network, command: Vec<OsString>) -> LaunchPlan {
        LaunchPlan {
            mechanism: Mechanism::Bwrap,
            network,
            workspace: self.ws.clone(),
            writable_roots: vec![self.ws.clone(), self.run.clone()],
            read_only_root: true,
            denied_read_paths: Vec::new(),
            protected_paths: Vec::new(),
            syscall_filter: false,
            command,
            env: vec![
                ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
                ("TMPDIR".into(), self.run.clone().into()),
            ],
            run_temp_dir: self.run.clone(),
            budgets: Budgets::default(),
            unix_sockets: Vec::new(),
        }
    }
}

fn sh(script: &str) -> Vec<OsString> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

struct Ran {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
    /// What `cleanup_created` and releasing the placeholders left behind.
    kept: Vec<PathBuf>,
}

/// Measures, builds the argv, holds the placeholders, runs bwrap, cleans up the created
/// mountpoints and releases the placeholders (what the launcher does).
///
/// Other tests create and drop host sockets concurrently; when one measured here vanishes
/// before bwrap starts, bwrap refuses to start (see
/// `a_socket_that_vanishes_before_launch_fails_closed`). Measuring again and retrying is what
/// the host should do too.
fn run(plan: &LaunchPlan) -> Ran {
    run_with_masks(plan, None)
}

/// [`run`], with the denied paths served by observed masks mounted at `masks` (the launcher's
/// `palisade_shims::fusemask::MaskServer`); what the masks saw is returned.
fn run_observed(plan: &LaunchPlan, masks: &Path) -> (Ran, fusemask::Seen) {
    let facts = measure(plan).unwrap();
    let denied_masks = argv(plan, &facts, None, None).unwrap().denied_masks;
    let server = fusemask::MaskServer::mount(masks, &denied_masks).unwrap();
    let ran = run_with_masks(plan, Some(masks));
    let seen = server.finish();
    // Unmounted (a dead mount would not show in `exists`), and the mountpoint removed.
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts.contains(masks.to_str().unwrap()),
        "still mounted: {mounts}"
    );
    assert!(
        fs::symlink_metadata(masks).is_err(),
        "the mountpoint is left"
    );
    (ran, seen)
}

fn run_with_masks(plan: &LaunchPlan, masks: Option<&Path>) -> Ran {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let facts = measure(plan).unwrap();
        let built = argv_observed(plan, &facts, None, None, masks).unwrap();
        let held = placeholder::hold(&built.placeholders).unwrap();
        let output = Command::new(BWRAP).args(&built.args).output().unwrap();
        let mut kept = cleanup_created(&built.created_mountpoints);
        kept.extend(held.release().left);
        let ran = Ran {
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            kept,
        };
        let setup_failed = ran.stderr.starts_with("bwrap:");
        let vanished = facts.host_sockets.iter().any(|s| !s.exists());
        if setup_failed && vanished && attempts < 5 {
            continue;
        }
        assert!(
            !setup_failed,
            "bwrap itself failed: {}\nargv: {:?}",
            ran.stderr, built.args
        );
        return ran;
    }
}

/// Runs a script on the host, as this process, to show an attack works outside.
fn host_sh(script: &str, cwd: &Path) -> Output {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // `/proc/self` belongs to this process's effective uid.
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

// ---------------------------------------------------------------------------------------------
// Helper: this binary, re-run inside the sandbox.

/// Not a real test: when `PALISADE_BWRAP_TEST_HELPER` is set, performs one probe, prints
/// `VERDICT ok` or `VERDICT err <errno>` and exits; otherwise does nothing.
#[test]
fn helper_entry() {
    let Some(action) = std::env::var_os(HELPER_ENV) else {
        return;
    };
    let action = action.to_string_lossy().into_owned();
    let (kind, arg) = action.split_once(':').unwrap();
    let result = match kind {
        "unix" => UnixStream::connect(arg).map(drop),
        "abstract" => SocketAddr::from_abstract_name(arg.as_bytes())
            .and_then(|addr| UnixStream::connect_addr(&addr))
            .map(drop),
        "tcp" => TcpStream::connect(arg).map(drop),
        "tcp-self" => TcpListener::bind("127.0.0.1:0").and_then(|listener| {
            let addr = listener.local_addr()?;
            TcpStream::connect(addr).map(drop)
        }),
        other => panic!("unknown helper action `{other}`"),
    };
    match result {
        Ok(()) => println!("VERDICT ok"),
        Err(err) => println!(
            "VERDICT err {} {err}",
            err.raw_os_error().unwrap_or_default()
        ),
    }
    std::process::exit(0);
}

/// Runs the helper inside a sandbox built from `plan` and returns its verdict line.
fn helper_inside(plan: &mut LaunchPlan, action: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    plan.command = vec![
        exe.into(),
        "--exact".into(),
        "helper_entry".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ];
    plan.env.push((HELPER_ENV.into(), action.into()));
    let ran = run(plan);
    plan.env.pop();
    // libtest prints `test helper_entry ... ` before the helper's own output.
    ran.stdout
        .lines()
        .find_map(|line| line.find("VERDICT ").map(|at| line[at..].to_owned()))
        .unwrap_or_else(|| panic!("no verdict: {}\n{}", ran.stdout, ran.stderr))
}

// ---------------------------------------------------------------------------------------------
// Filesystem

/// A denied directory's secret (`home/.ssh/id`) and a denied file in the workspace
/// (`secret.txt`); returns the directory.
fn plant_secrets(fx: &Fixture) -> PathBuf {
    let ssh = fx.home.join(".ssh");
    fs::create_dir(&ssh).unwrap();
    fs::write(ssh.join("id"), "SECRET-SSH-KEY").unwrap();
    fs::write(fx.ws.join("secret.txt"), "SECRET-IN-WS").unwrap();
    ssh
}

#[test]
fn denied_dir_and_file_are_unreadable() {
    let fx = Fixture::new();
    let ssh = plant_secrets(&fx);
    let script = format!(
        "cat {ssh}/id; ls {ssh}; cat /proc/self/root{ssh}/id; cat secret.txt; \
         cat /proc/1/root{ws}/secret.txt; echo x > secret.txt; echo end",
        ssh = ssh.display(),
        ws = fx.ws.display()
    );

    let outside = host_sh(&script.replace("echo x > secret.txt", ":"), &fx.ws);
    let out = String::from_utf8_lossy(&outside.stdout);
    assert!(
        out.contains("SECRET-SSH-KEY") && out.contains("SECRET-IN-WS"),
        "{out}"
    );

    let mut plan = fx.plan(Network::None, sh(&script));
    plan.denied_read_paths = vec![ssh.clone(), fx.ws.join("secret.txt")];
    let ran = run(&plan);
    assert!(ran.stdout.contains("end"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("SECRET"), "{}", ran.stdout);
    assert!(!ran.stderr.contains("SECRET"), "{}", ran.stderr);
    assert!(ran.stderr.contains("Permission denied"), "{}", ran.stderr);
    assert_eq!(
        fs::read_to_string(fx.ws.join("secret.txt")).unwrap(),
        "SECRET-IN-WS"
    );
    assert!(ran.kept.is_empty());
}

#[test]
fn observed_masks_refuse_as_the_mute_ones_and_record_every_access() {
    let fx = Fixture::new();
    let ssh = plant_secrets(&fx);
    let script = format!(
        "cat {ssh}/id; ls {ssh}; cat secret.txt; echo x > secret.txt; touch {ssh}/new; \
         mkdir {ssh}/d; rm secret.txt; chmod 644 secret.txt; mkdir -p private; \
         (echo x > private/key); stat -c %F:%a {ssh} secret.txt; git status --short; echo end",
        ssh = ssh.display(),
    );
    // Outside, the same reads succeed.
    let outside = host_sh(&format!("cat {}/id secret.txt", ssh.display()), &fx.ws);
    assert!(String::from_utf8_lossy(&outside.stdout).contains("SECRET-SSH-KEY"));

    Command::new("git")
        .args(["init", "-q"])
        .current_dir(&fx.ws)
        .status()
        .unwrap();
    let mut plan = fx.plan(Network::None, sh(&script));
    plan.denied_read_paths = vec![
        ssh.clone(),
        fx.ws.join("secret.txt"),
        fx.ws.join("private/key"),
    ];
    let masks = fx.root.join("masks");
    let (ran, seen) = run_observed(&plan, &masks);
    assert!(ran.stdout.contains("end"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("SECRET"), "{}", ran.stdout);
    assert!(!ran.stderr.contains("SECRET"), "{}", ran.stderr);
    // What the command sees: the masks are there, with no permission bits, and refuse.
    assert!(
        ran.stdout.contains("directory:0"),
        "{}\n{}",
        ran.stdout,
        ran.stderr
    );
    assert!(
        ran.stdout.contains("regular empty file:0"),
        "{}",
        ran.stdout
    );
    assert_eq!(
        ran.stderr.matches("Permission denied").count(),
        9,
        "{}\n{}",
        ran.stderr,
        ran.stdout
    );
    // git sees a file it cannot read and says so; the run goes on (as under the mute mask).
    assert_eq!(
        fs::read_to_string(fx.ws.join("secret.txt")).unwrap(),
        "SECRET-IN-WS"
    );
    assert!(ran.kept.is_empty(), "{:?}", ran.kept);

    let found = |op: fusemask::FileOp, path: &Path| {
        seen.events
            .iter()
            .any(|e| e.op == op && e.path == path && !e.command.is_empty())
    };
    let secret = fx.ws.join("secret.txt");
    use fusemask::FileOp::{Read, Remove, Write};
    for (op, path) in [
        (Read, ssh.join("id")),
        (Read, ssh.clone()),
        (Read, secret.clone()),
        (Write, secret.clone()),
        (Read, ssh.join("new")),
        // A name beneath a denied directory is looked up (and refused) before anything is
        // created: the kernel resolves it first.
        (Read, ssh.join("d")),
        (Write, secret.clone()),
        (Read, fx.ws.join("private/key")),
    ] {
        assert!(
            found(op, &path),
            "{op:?} {}: {:#?}",
            path.display(),
            seen.events
        );
    }
    // `rm` of the mask itself is refused by the workspace's mount (a mountpoint: EBUSY), not
    // by the mask: no event for it.
    assert!(
        !seen.events.iter().any(|e| e.op == Remove),
        "{:#?}",
        seen.events
    );
    assert!(seen.error.is_none(), "{:?}", seen.error);
    assert_eq!(seen.dropped, 0);
}

#[test]
fn workspace_is_writable_and_nothing_else_is() {
    let fx = Fixture::new();
    let script = format!(
        "echo hi > new.txt && echo wrote-ws; echo hi > {run}/t && echo wrote-run; \
         echo x > {out}/x && echo wrote-outside; echo x > {home}/x && echo wrote-home; \
         touch /etc/palisade-bwrap-test && echo wrote-etc; echo end",
        run = fx.run.display(),
        out = fx.outside.display(),
        home = fx.home.display()
    );
    // Outside: the probe file can be written (then removed).
    assert!(
        host_sh(&format!("echo x > {}/probe", fx.outside.display()), &fx.ws)
            .status
            .success()
    );
    fs::remove_file(fx.outside.join("probe")).unwrap();

    let ran = run(&fx.plan(Network::None, sh(&script)));
    assert!(ran.stdout.contains("wrote-ws"), "{}", ran.stderr);
    assert!(ran.stdout.contains("wrote-run"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("wrote-outside"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("wrote-home"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("wrote-etc"), "{}", ran.stdout);
    assert!(
        ran.stderr.contains("Read-only file system"),
        "{}",
        ran.stderr
    );
    assert_eq!(fs::read_to_string(fx.ws.join("new.txt")).unwrap(), "hi\n");
    assert!(!fx.outside.join("x").exists());
    assert!(!Path::new("/etc/palisade-bwrap-test").exists());
}

/// Every attempt on a protected path; each prints `ok:<name>` if it succeeded.
const PROTECTED_ATTACKS: &str = "\
    (echo x > AGENTS.md) 2>/dev/null && echo ok:write-agents; \
    (echo x >> AGENTS.md) 2>/dev/null && echo ok:append-agents; \
    rm -f AGENTS.md 2>/dev/null && echo ok:rm-agents; \
    mv AGENTS.md a2 2>/dev/null && echo ok:mv-agents; \
    (echo x > CLAUDE.md) 2>/dev/null && echo ok:create-claude; \
    mkdir -p .github/workflows 2>/dev/null && echo ok:mkdir-github; \
    (echo x > .github/x) 2>/dev/null && echo ok:create-github-file; \
    mv .loopwright lw2 2>/dev/null && echo ok:mv-loopwright; \
    mkdir -p .loopwright/policies 2>/dev/null && (echo x > .loopwright/policies/p) 2>/dev/null \
        && echo ok:create-policy; \
    echo end";

fn protected_fixture(fx: &Fixture) {
    fs::write(fx.ws.join("AGENTS.md"), "orig").unwrap();
    fs::create_dir(fx.ws.join(".loopwright")).unwrap();
}

fn protected_paths(fx: &Fixture) -> Vec<PathBuf> {
    vec![
        fx.ws.join(".github"),
        fx.ws.join(".loopwright/policies"),
        fx.ws.join("AGENTS.md"),
        fx.ws.join("CLAUDE.md"),
    ]
}

#[test]
fn protected_paths_cannot_be_changed_or_created_and_nothing_persists() {
    // Outside: every attack works on a throwaway copy of the workspace.
    let scratch = Fixture::new();
    protected_fixture(&scratch);
    let outside = host_sh(PROTECTED_ATTACKS, &scratch.ws);
    let out = String::from_utf8_lossy(&outside.stdout);
    for attack in [
        "write-agents",
        "append-agents",
        "rm-agents",
        "create-claude",
        "mkdir-github",
        "create-github-file",
        "mv-loopwright",
        "create-policy",
    ] {
        assert!(
            out.contains(&format!("ok:{attack}")),
            "{attack} failed outside: {out}"
        );
    }

    let fx = Fixture::new();
    protected_fixture(&fx);
    let mut plan = fx.plan(Network::None, sh(PROTECTED_ATTACKS));
    plan.protected_paths = protected_paths(&fx);
    let ran = run(&plan);
    assert!(ran.stdout.contains("end"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("ok:"), "{}", ran.stdout);
    assert!(ran.kept.is_empty(), "{:?}", ran.kept);

    // Nothing changed, nothing was created, the created mountpoints are gone.
    assert_eq!(fs::read_to_string(fx.ws.join("AGENTS.md")).unwrap(), "orig");
    let mut entries: Vec<_> = fs::read_dir(&fx.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert_eq!(entries, vec![".loopwright", "AGENTS.md"]);
    assert_eq!(fs::read_dir(fx.ws.join(".loopwright")).unwrap().count(), 0);
}

#[test]
fn protected_paths_read_as_before() {
    let fx = Fixture::new();
    protected_fixture(&fx);
    let mut plan = fx.plan(
        Network::None,
        sh("cat AGENTS.md; echo; ls -A .github; echo end"),
    );
    plan.protected_paths = protected_paths(&fx);
    let ran = run(&plan);
    assert!(
        ran.stdout.starts_with("orig\n"),
        "{}{}",
        ran.stdout,
        ran.stderr
    );
    assert!(ran.stdout.ends_with("end\n"), "{}", ran.stderr);
}

#[test]
fn a_protected_symlink_inside_the_workspace_is_refused() {
    let fx = Fixture::new();
    fs::write(fx.ws.join("AGENTS.md"), "orig").unwrap();
    std::os::unix::fs::symlink("AGENTS.md", fx.ws.join("CLAUDE.md")).unwrap();
    // Outside: replacing the link replaces what `CLAUDE.md` is.
    let out = host_sh(
        "rm CLAUDE.md && echo x > CLAUDE.md && cat CLAUDE.md",
        &fx.ws,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x\n");
    fs::remove_file(fx.ws.join("CLAUDE.md")).unwrap();
    std::os::unix::fs::symlink("AGENTS.md", fx.ws.join("CLAUDE.md")).unwrap();

    let mut plan = fx.plan(Network::None, sh("true"));
    plan.protected_paths = vec![fx.ws.join("CLAUDE.md")];
    let facts = measure(&plan).unwrap();
    assert!(matches!(
        argv(&plan, &facts, None, None),
        Err(BwrapError::ProtectedSymlink { .. })
    ));
}

#[test]
fn missing_denied_paths_in_the_workspace_cannot_be_created() {
    let fx = Fixture::new();
    let script = "(echo x > .env) 2>/dev/null && echo ok:env; \
                  mkdir -p private 2>/dev/null; (echo x > private/key) 2>/dev/null && echo ok:key; \
                  ls .env 2>&1; echo end";
    // Outside both can be created.
    let scratch = Fixture::new();
    let out = host_sh(script, &scratch.ws);
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("ok:env") && out.contains("ok:key"), "{out}");

    let mut plan = fx.plan(Network::None, sh(script));
    plan.denied_read_paths = vec![fx.ws.join(".env"), fx.ws.join("private/key")];
    let ran = run(&plan);
    assert!(ran.stdout.contains("end"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("ok:"), "{}", ran.stdout);
    assert!(ran.stdout.contains("Permission denied"), "{}", ran.stdout);
    assert!(ran.kept.is_empty(), "{:?}", ran.kept);
    assert_eq!(fs::read_dir(&fx.ws).unwrap().count(), 0);
}

#[test]
fn tmp_shm_and_var_tmp_are_private() {
    let fx = Fixture::new();
    let markers = [
        tempfile::Builder::new()
            .prefix("palisade-marker-")
            .tempfile_in("/tmp")
            .unwrap(),
        tempfile::Builder::new()
            .prefix("palisade-marker-")
            .tempfile_in("/dev/shm")
            .unwrap(),
        tempfile::Builder::new()
            .prefix("palisade-marker-")
            .tempfile_in("/var/tmp")
            .unwrap(),
    ];
    let check: String = markers
        .iter()
        .map(|m| {
            format!(
                "test -e {} && echo seen:{}; ",
                m.path().display(),
                m.path().display()
            )
        })
        .collect();
    // Outside the markers are visible.
    let out = host_sh(&check, &fx.ws);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("seen:")
            .count(),
        3
    );

    let inside_name = format!("palisade-inside-{}", std::process::id());
    let script = format!(
        "{check} ls -A /tmp /dev/shm /var/tmp; echo x > /tmp/{inside_name} && echo wrote-tmp; \
         echo x > /dev/shm/{inside_name} && echo wrote-shm; echo end"
    );
    let ran = run(&fx.plan(Network::None, sh(&script)));
    assert!(!ran.stdout.contains("seen:"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("palisade-marker"), "{}", ran.stdout);
    assert!(ran.stdout.contains("wrote-tmp") && ran.stdout.contains("wrote-shm"));
    assert!(!Path::new("/tmp").join(&inside_name).exists());
    assert!(!Path::new("/dev/shm").join(&inside_name).exists());
}

#[test]
fn a_workspace_under_host_tmp_is_still_bound() {
    let dir = tempfile::Builder::new()
        .prefix("palisade-ws-")
        .tempdir_in("/tmp")
        .unwrap();
    let fx = Fixture::at(dir);
    let marker = tempfile::Builder::new()
        .prefix("palisade-marker-")
        .tempfile_in("/tmp")
        .unwrap();
    let script = format!(
        "echo hi > in-tmp.txt && echo wrote; test -e {} && echo seen-marker; echo end",
        marker.path().display()
    );
    let ran = run(&fx.plan(Network::None, sh(&script)));
    assert!(ran.stdout.contains("wrote"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("seen-marker"), "{}", ran.stdout);
    assert_eq!(
        fs::read_to_string(fx.ws.join("in-tmp.txt")).unwrap(),
        "hi\n"
    );
}

#[test]
fn proc_sys_and_sys_are_read_only() {
    let fx = Fixture::new();
    // Opening for append without writing changes nothing, so it is a safe probe.
    // (A subshell: a failed redirection on `:` would end a POSIX shell.)
    let probe = "(: >> /proc/sys/kernel/core_pattern) && echo opened-core-pattern";
    let outside = host_sh(probe, &fx.ws);
    let opened_outside = String::from_utf8_lossy(&outside.stdout).contains("opened");
    if is_root() {
        assert!(
            opened_outside,
            "root should be able to open core_pattern for writing"
        );
    } else {
        eprintln!("note: not root, so core_pattern is not writable outside either");
    }
    let script = format!("{probe}; cat /proc/self/mountinfo; echo end");
    let ran = run(&fx.plan(Network::None, sh(&script)));
    assert!(ran.stdout.contains("end"), "{}", ran.stderr);
    assert!(
        !ran.stdout.contains("opened-core-pattern"),
        "{}",
        ran.stdout
    );
    // Every mount at or under /sys and /proc/sys is read-only.
    let mut checked = 0;
    for line in ran.stdout.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(options)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        if point.starts_with("/sys") || point.starts_with("/proc/sys") {
            checked += 1;
            assert!(options.split(',').any(|o| o == "ro"), "writable: {line}");
        }
    }
    assert!(checked >= 2, "{}", ran.stdout);
}

#[test]
fn no_capabilities_no_new_privileges_no_nested_user_namespace() {
    let fx = Fixture::new();
    // Outside, a user namespace can be created (that is what bwrap itself needs).
    let outside = host_sh("unshare -U true && echo userns-ok", &fx.ws);
    assert!(
        String::from_utf8_lossy(&outside.stdout).contains("userns-ok"),
        "unshare -U failed outside: {}",
        String::from_utf8_lossy(&outside.stderr)
    );
    let script = "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status; \
                  unshare -U true && echo userns-ok; unshare -r true && echo userns-root-ok; echo end";
    let ran = run(&fx.plan(Network::None, sh(script)));
    assert!(ran.stdout.contains("end"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("userns-ok"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("userns-root-ok"), "{}", ran.stdout);
    assert!(ran.stdout.contains("NoNewPrivs:\t1"), "{}", ran.stdout);
    for cap in ["CapEff", "CapPrm", "CapBnd"] {
        assert!(
            ran.stdout.contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {}",
            ran.stdout
        );
    }
}

#[test]
fn the_probe_trial_runs_here() {
    let out = Command::new(BWRAP).args(trial_argv()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn host_processes_are_invisible() {
    let fx = Fixture::new();
    let me = std::process::id();
    let probe = format!("test -d /proc/{me} && echo sees-host-pid; echo end");
    let outside = host_sh(&probe, &fx.ws);
    assert!(String::from_utf8_lossy(&outside.stdout).contains("sees-host-pid"));
    let ran = run(&fx.plan(Network::None, sh(&format!("{probe}; cat /proc/1/comm"))));
    assert!(ran.stdout.contains("end"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("sees-host-pid"), "{}", ran.stdout);
    assert!(
        ran.stdout.contains("bwrap"),
        "PID 1 is bwrap's reaper: {}",
        ran.stdout
    );
}

#[test]
fn environment_is_exactly_the_plans() {
    let fx = Fixture::new();
    // This process's own environment (PATH at least) must not leak in.
    assert!(std::env::var_os("PATH").is_some());
    let mut plan = fx.plan(Network::None, vec!["/usr/bin/env".into()]);
    plan.env = vec![("A".into(), "1".into()), ("B".into(), "two words".into())];
    let ran = run(&plan);
    let mut lines: Vec<&str> = ran.stdout.lines().collect();
    lines.sort_unstable();
    let pwd = format!("PWD={}", fx.ws.display());
    // bwrap adds PWD after changing into the workspace.
    assert_eq!(lines, vec!["A=1", "B=two words", pwd.as_str()]);
}

// ---------------------------------------------------------------------------------------------
// Host sockets and network

#[test]
fn host_pathname_sockets_are_unreachable_in_every_network_mode() {
    let fx = Fixture::new();
    let sockets = fx.root.join("sockets");
    fs::create_dir(&sockets).unwrap();
    let outside_sock = sockets.join("host.sock");
    let ws_sock = fx.ws.join("dev.sock");
    let tmp_dir = tempfile::Builder::new()
        .prefix("palisade-sock-")
        .tempdir_in("/tmp")
        .unwrap();
    let tmp_sock = tmp_dir.path().join("s.sock");
    let _listeners: Vec<UnixListener> = [&outside_sock, &ws_sock, &tmp_sock]
        .into_iter()
        .map(|p| UnixListener::bind(p).unwrap())
        .collect();
    // Outside: each socket accepts a connection.
    for sock in [&outside_sock, &ws_sock, &tmp_sock] {
        UnixStream::connect(sock).unwrap_or_else(|e| panic!("{}: {e}", sock.display()));
    }
    for network in [
        Network::None,
        Network::OwnLoopback(None),
        Network::AllowOutbound,
    ] {
        let mut plan = fx.plan(network.clone(), Vec::new());
        let facts = measure(&plan).unwrap();
        assert!(facts.host_sockets.contains(&outside_sock), "{facts:?}");
        for sock in [&outside_sock, &ws_sock, &tmp_sock] {
            let verdict = helper_inside(&mut plan, &format!("unix:{}", sock.display()));
            assert!(
                verdict.starts_with("VERDICT err"),
                "{network:?} {}: {verdict}",
                sock.display()
            );
        }
    }
    // The workspace socket is still there afterwards (masked, not removed).
    assert!(ws_sock.exists());
}

#[test]
fn a_socket_that_vanishes_before_launch_fails_closed() {
    let fx = Fixture::new();
    let sockets = fx.root.join("sockets");
    fs::create_dir(&sockets).unwrap();
    let sock = sockets.join("gone.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let plan = fx.plan(Network::None, sh("echo started"));
    let facts = measure(&plan).unwrap();
    let built = argv(&plan, &facts, None, None).unwrap();
    drop(listener);
    fs::remove_file(&sock).unwrap();
    // In the read-only root bwrap cannot create the mountpoint: nothing starts.
    let out = Command::new(BWRAP).args(&built.args).output().unwrap();
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("started"));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("bwrap:"));
    assert!(cleanup_created(&built.created_mountpoints).is_empty());
    assert!(!sock.exists());
}

#[test]
fn a_workspace_socket_that_vanishes_leaves_nothing_behind() {
    let fx = Fixture::new();
    let sock = fx.ws.join("gone.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let plan = fx.plan(Network::None, sh("echo started"));
    let facts = measure(&plan).unwrap();
    let built = argv(&plan, &facts, None, None).unwrap();
    assert!(built.created_mountpoints.contains(&sock));
    drop(listener);
    fs::remove_file(&sock).unwrap();
    // bwrap creates an empty file as the mountpoint and starts; cleanup removes the file.
    let out = Command::new(BWRAP).args(&built.args).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("started"));
    assert!(sock.exists());
    assert!(cleanup_created(&built.created_mountpoints).is_empty());
    assert_eq!(fs::read_dir(&fx.ws).unwrap().count(), 0);
}

#[test]
fn host_abstract_sockets_need_a_network_namespace() {
    let fx = Fixture::new();
    let name = format!("palisade-bwrap-test-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = UnixListener::bind_addr(&addr).unwrap();
    UnixStream::connect_addr(&addr).unwrap();
    for network in [Network::None, Network::OwnLoopback(None)] {
        let mut plan = fx.plan(network.clone(), Vec::new());
        let verdict = helper_inside(&mut plan, &format!("abstract:{name}"));
        assert!(verdict.starts_with("VERDICT err"), "{network:?}: {verdict}");
    }
    // Known limit, pinned here so it is not forgotten: with the host's network shared, the
    // host's abstract sockets are reachable (no mount can hide them).
    let mut plan = fx.plan(Network::AllowOutbound, Vec::new());
    assert_eq!(
        helper_inside(&mut plan, &format!("abstract:{name}")),
        "VERDICT ok"
    );
}

#[test]
fn host_loopback_is_unreachable_without_allow_outbound() {
    let fx = Fixture::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    TcpStream::connect(addr).unwrap(); // outside: reachable
    let action = format!("tcp:{addr}");
    for network in [Network::None, Network::OwnLoopback(None)] {
        let mut plan = fx.plan(network.clone(), Vec::new());
        let verdict = helper_inside(&mut plan, &action);
        assert!(verdict.starts_with("VERDICT err"), "{network:?}: {verdict}");
        // The sandbox's own loopback works.
        assert_eq!(helper_inside(&mut plan, "tcp-self:"), "VERDICT ok");
    }
    let mut plan = fx.plan(Network::AllowOutbound, Vec::new());
    assert_eq!(helper_inside(&mut plan, &action), "VERDICT ok");
}

#[test]
fn bash_dev_tcp_to_host_loopback_fails_with_no_network() {
    let fx = Fixture::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let bash = ["/bin/bash", "/usr/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("bash is needed for /dev/tcp");
    let outside = Command::new(bash).arg("-c").arg(&script).output().unwrap();
    assert!(String::from_utf8_lossy(&outside.stdout).contains("connected"));
    let plan = fx.plan(Network::None, vec![bash.into(), "-c".into(), script.into()]);
    let ran = run(&plan);
    assert!(!ran.stdout.contains("connected"), "{}", ran.stdout);
    assert!(!ran.status.success());
    match listener
        .set_nonblocking(true)
        .and_then(|()| listener.accept())
    {
        Err(err) if err.kind() == ErrorKind::WouldBlock => {}
        // The outside connection above is the only one allowed to have arrived.
        Ok(_) => assert!(matches!(
            listener.accept().map(drop).map_err(|e| e.kind()),
            Err(ErrorKind::WouldBlock)
        )),
        Err(err) => panic!("{err}"),
    }
}
