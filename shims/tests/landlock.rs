//! Kernel tests of the Landlock shim: a real ruleset applied to a child process.
//!
//! The test runner itself is never restricted. Each scenario builds a fresh tree in a temp dir
//! (a workspace, a run temp dir, a `home` with a `.ssh/id` secret and siblings, an `outside`
//! dir), computes the plan in this process, and re-runs this test binary as a helper child
//! (`helper`, selected by an environment variable) that applies the plan (or not) and attacks
//! the tree, printing one `VERDICT name ok|err errno` line per attempt. Every attack first runs
//! in a `bare` child, where it must succeed (so a failure inside the sandbox means something),
//! then in restricted children, where it must fail with the expected errno.

// Linux kernel mechanisms; the macOS type-check (`--target aarch64-apple-darwin`) skips them.
#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    unsafe_code,
    reason = "tests; libc calls for truncate/kill/mknod/geteuid"
)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use palisade_shims::landlock::{ListingFacts, RulesetPlan, Status, restrict, ruleset_plan};
use palisade_shims::plan::{Budgets, LandlockProc, LaunchPlan, Mechanism, Network};

const HELPER_MODE: &str = "PALISADE_LANDLOCK_HELPER";
const HELPER_ROOT: &str = "PALISADE_LANDLOCK_ROOT";
const HELPER_PORT: &str = "PALISADE_LANDLOCK_PORT";
const HELPER_VICTIM: &str = "PALISADE_LANDLOCK_VICTIM";
const HELPER_ABSTRACT: &str = "PALISADE_LANDLOCK_ABSTRACT";
const HELPER_SECRET: &str = "PALISADE_LANDLOCK_SECRET";

/// What a verdict must be.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Ok,
    /// Fails with one of these errnos.
    Err(&'static [i32]),
}

const EACCES: &[i32] = &[libc::EACCES];
const EPERM: &[i32] = &[libc::EPERM];
/// Landlock refuses a reparenting that would gain rights with `EXDEV`, one lacking a right
/// with `EACCES`.
const EXDEV_OR_EACCES: &[i32] = &[libc::EXDEV, libc::EACCES];

/// The attacks, in the order the helper runs them (destructive ones last), with what they
/// must give under the `none` network mode.
const ATTACKS: &[(&str, Expect)] = &[
    // Denied reads, by every route.
    ("read_secret", Expect::Err(EACCES)),
    ("list_denied_dir", Expect::Err(EACCES)),
    ("read_secret_via_proc_self_root", Expect::Err(EACCES)),
    ("read_secret_via_dotdot", Expect::Err(EACCES)),
    ("read_secret_via_planted_symlink", Expect::Err(EACCES)),
    (
        "hardlink_secret_into_workspace",
        Expect::Err(EXDEV_OR_EACCES),
    ),
    ("read_denied_created_after_measure", Expect::Err(EACCES)),
    // Writes outside the writable roots.
    ("write_outside", Expect::Err(EACCES)),
    ("create_outside", Expect::Err(EACCES)),
    ("truncate_outside", Expect::Err(EACCES)),
    ("create_in_home", Expect::Err(EACCES)),
    ("mknod_char_device_in_workspace", Expect::Err(EACCES)),
    // Network and IPC.
    ("tcp_connect_host_loopback", Expect::Err(EACCES)),
    ("tcp_bind", Expect::Err(EACCES)),
    ("connect_host_abstract_socket", Expect::Err(EPERM)),
    ("kill_host_process", Expect::Err(EPERM)),
    // Destructive: moving the denied dir or its parent somewhere readable.
    ("delete_outside", Expect::Err(EACCES)),
    ("rename_denied_into_workspace", Expect::Err(EXDEV_OR_EACCES)),
    (
        "rename_denied_parent_into_workspace",
        Expect::Err(EXDEV_OR_EACCES),
    ),
];

/// Ordinary work that must keep working inside the sandbox.
const LEGIT: &[&str] = &[
    "read_sibling_file",
    "read_file_in_sibling_dir",
    "list_sibling_dir",
    "write_workspace",
    "write_run_temp_dir",
    "rename_across_writable_roots",
    "write_dev_null_with_truncate",
    "read_dev_urandom",
    "exec_bin_true",
    "shell_pipeline",
    "socketpair",
    "kill_own_child",
];

/// Documented trade-offs: work bare, fail (`EACCES`) inside.
const TRADE_OFFS: &[&str] = &[
    // No `read_dir` on the ancestors of a denied path.
    "list_home",
    // An entry created in an ancestor after the listing has no rule.
    "read_sibling_created_after_measure",
];

/// Landlock ABI 7 limits: these still work inside (pinned so a change is noticed).
const LIMITS: &[&str] = &[
    "stat_secret",
    "chmod_outside",
    "connect_host_pathname_socket",
];

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The temp tree a scenario attacks.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        // The tree must be usable by whoever runs the tests (root or not).
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let home = root.join("home");
        fs::create_dir_all(home.join(".ssh")).unwrap();
        fs::write(home.join(".ssh/id"), "secret").unwrap();
        fs::write(home.join("notes.txt"), "notes").unwrap();
        fs::write(home.join("gone.txt"), "removed after the listing").unwrap();
        fs::create_dir_all(home.join("docs")).unwrap();
        fs::write(home.join("docs/readme"), "readme").unwrap();
        fs::create_dir_all(root.join("ws")).unwrap();
        fs::create_dir_all(root.join("run")).unwrap();
        fs::create_dir_all(root.join("outside")).unwrap();
        fs::write(root.join("outside/existing.txt"), "keep").unwrap();
        Tree { _dir: dir, root }
    }

    fn launch(&self, network: Network) -> LaunchPlan {
        let workspace = self.root.join("ws");
        LaunchPlan {
            mechanism: Mechanism::Landlock(LandlockProc::Own),
            network,
            workspace: workspace.clone(),
            writable_roots: vec![workspace],
            read_only_root: true,
            denied_read_paths: vec![
                self.root.join("home/.ssh"),
                self.root.join("home/.aws/credentials"),
            ],
            protected_paths: vec![],
            syscall_filter: true,
            command: vec!["true".into()],
            env: vec![],
            run_temp_dir: self.root.join("run"),
            budgets: Budgets::default(),
            unix_sockets: Vec::new(),
        }
    }
}

/// One scenario's results.
struct Run {
    verdicts: BTreeMap<String, Result<(), i32>>,
    status: Option<Status>,
    stdout: String,
}

/// Builds a fresh tree, plans it for `network`, then runs the helper in `mode`.
fn scenario(mode: &str, network: Network) -> Run {
    let tree = Tree::new();
    let launch = tree.launch(network.clone());
    let facts = ListingFacts::measure(&launch).unwrap();
    let plan = ruleset_plan(&launch, &facts).unwrap();
    let plan_file = tree.root.join("plan.json");
    fs::write(&plan_file, serde_json::to_vec(&plan).unwrap()).unwrap();
    // Created after the listing was measured: the denied path that did not exist yet, and a
    // new sibling in an ancestor directory.
    fs::create_dir(tree.root.join("home/.aws")).unwrap();
    fs::write(tree.root.join("home/.aws/credentials"), "late secret").unwrap();
    fs::write(tree.root.join("home/late.txt"), "late").unwrap();
    // A listed sibling that vanishes before `restrict`: skipped, not an error.
    fs::remove_file(tree.root.join("home/gone.txt")).unwrap();

    // Targets outside the sandbox that this test owns.
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let abstract_name = format!("palisade-landlock-test-{}-{port}", std::process::id());
    let abstract_listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap())
            .unwrap();
    let pathname_listener = UnixListener::bind(tree.root.join("outside/host.sock")).unwrap();
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();

    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "helper", "--nocapture", "--test-threads=1"])
        .env(HELPER_MODE, mode)
        .env(HELPER_ROOT, &tree.root)
        .env(HELPER_PORT, port.to_string())
        .env(HELPER_VICTIM, victim.id().to_string())
        .env(HELPER_ABSTRACT, &abstract_name)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "helper {mode} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    drop((tcp, abstract_listener, pathname_listener));
    if std::env::var_os("PALISADE_LANDLOCK_SHOW").is_some() {
        eprintln!("--- helper {mode} {network:?}\n{stdout}");
    }

    let mut verdicts = BTreeMap::new();
    let mut status = None;
    for line in stdout.lines() {
        // libtest prints `test helper ... ` before the first line of output.
        let line = ["VERDICT ", "STATUS "]
            .iter()
            .find_map(|tag| line.find(tag).map(|at| &line[at..]))
            .unwrap_or(line);
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["VERDICT", name, "ok"] => {
                verdicts.insert((*name).to_owned(), Ok(()));
            }
            ["VERDICT", name, "err", errno] => {
                verdicts.insert((*name).to_owned(), Err(errno.parse().unwrap()));
            }
            ["STATUS", ..] => {
                status = Some(serde_json::from_str(line.trim_start_matches("STATUS ")).unwrap());
            }
            _ => {}
        }
    }
    // The victim's fate must agree with the helper's verdict.
    let claimed_kill = verdicts.get("kill_host_process") == Some(&Ok(()));
    let signal = reap(&mut victim, claimed_kill);
    assert_eq!(
        signal,
        claimed_kill.then_some(libc::SIGTERM),
        "victim ended by {signal:?}\n{stdout}"
    );
    Run {
        verdicts,
        status,
        stdout,
    }
}

/// The signal that ended the victim: waits for it if it was `killed`, else checks it is still
/// alive and kills it (the kill is then ours and not reported).
fn reap(victim: &mut Child, killed: bool) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while killed && Instant::now() < deadline {
        if let Some(status) = victim.try_wait().unwrap() {
            return status.signal();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let alive = victim.try_wait().unwrap().is_none();
    victim.kill().unwrap();
    let status = victim.wait().unwrap();
    if alive { None } else { status.signal() }
}

fn skipped(name: &str) -> bool {
    name == "mknod_char_device_in_workspace" && !is_root()
}

fn check(run: &Run, name: &str, expect: Expect, problems: &mut Vec<String>) {
    let got = run.verdicts.get(name);
    let fine = match (expect, got) {
        (Expect::Ok, Some(Ok(()))) => true,
        (Expect::Err(errnos), Some(Err(errno))) => errnos.contains(errno),
        _ => false,
    };
    if !fine {
        problems.push(format!("{name}: expected {expect:?}, got {got:?}"));
    }
}

#[test]
fn every_attack_works_without_landlock() {
    let run = scenario("bare", Network::None);
    let mut problems = Vec::new();
    let all = ATTACKS.iter().map(|(name, _)| *name);
    for name in all
        .chain(LEGIT.iter().copied())
        .chain(TRADE_OFFS.iter().copied())
    {
        if skipped(name) {
            eprintln!("skipped: {name} needs CAP_MKNOD (run as root to exercise it)");
            continue;
        }
        check(&run, name, Expect::Ok, &mut problems);
    }
    for name in LIMITS {
        check(&run, name, Expect::Ok, &mut problems);
    }
    assert!(run.status.is_none());
    assert!(problems.is_empty(), "{problems:#?}\n{}", run.stdout);
}

#[test]
fn landlock_blocks_every_attack_with_network_none() {
    blocks_every_attack_with_network_none("restrict");
}

/// The ruleset has a rule for each denied path's observed mask, to be added only on the mask
/// (a FUSE node on the masks' device). Applied with no mask bound and init claiming the
/// secret's own filesystem as the masks' device — the worst wrong claim — it adds none of them,
/// and every attack fails as before.
#[test]
fn mask_rules_never_grant_the_denied_path_itself() {
    let status = blocks_every_attack_with_network_none("restrict-claimed-masks");
    assert_eq!(status.observed_masks, 0, "{status:?}");
}

fn blocks_every_attack_with_network_none(mode: &str) -> Status {
    let run = scenario(mode, Network::None);
    let status = run.status.as_ref().expect("no status");
    assert!(status.enforced && status.no_new_privs, "{status:?}");
    assert!(status.abi >= 6, "{status:?}");
    assert!(status.dropped.is_empty(), "{status:?}");
    assert!(status.skipped >= 1, "{status:?}");
    assert_eq!(status.handled_net.len(), 2, "{status:?}");
    assert_eq!(status.scopes.len(), 2, "{status:?}");
    let mut problems = Vec::new();
    for (name, expect) in ATTACKS {
        if skipped(name) {
            eprintln!("skipped: {name} needs CAP_MKNOD (run as root to exercise it)");
            continue;
        }
        check(&run, name, *expect, &mut problems);
    }
    for name in LEGIT {
        check(&run, name, Expect::Ok, &mut problems);
    }
    for name in TRADE_OFFS {
        check(&run, name, Expect::Err(EACCES), &mut problems);
    }
    for name in LIMITS {
        check(&run, name, Expect::Ok, &mut problems);
    }
    assert!(problems.is_empty(), "{problems:#?}\n{}", run.stdout);
    run.status.unwrap()
}

#[test]
fn landlock_allow_outbound_leaves_tcp_alone() {
    let run = scenario("restrict", Network::AllowOutbound);
    let status = run.status.as_ref().expect("no status");
    assert!(
        status.enforced && status.handled_net.is_empty(),
        "{status:?}"
    );
    let mut problems = Vec::new();
    for (name, expect) in ATTACKS {
        let expect = match *name {
            "tcp_connect_host_loopback" | "tcp_bind" => Expect::Ok,
            _ => *expect,
        };
        if skipped(name) {
            continue;
        }
        check(&run, name, expect, &mut problems);
    }
    for name in LEGIT {
        check(&run, name, Expect::Ok, &mut problems);
    }
    assert!(problems.is_empty(), "{problems:#?}\n{}", run.stdout);
}

/// Runs `restrict` on `plan` in a child (a success would confine the runner) and returns the
/// child's stdout: `REFUSED <error>` or `RESTRICTED <status>`.
fn restrict_in_child(tree: &Tree, plan: &RulesetPlan) -> String {
    fs::write(
        tree.root.join("plan.json"),
        serde_json::to_vec(plan).unwrap(),
    )
    .unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "helper", "--nocapture", "--test-threads=1"])
        .env(HELPER_MODE, "restrict-only")
        .env(HELPER_ROOT, &tree.root)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn restrict_refuses_a_plan_above_the_kernel() {
    let tree = Tree::new();
    let launch = tree.launch(Network::None);
    let mut plan = ruleset_plan(&launch, &ListingFacts::measure(&launch).unwrap()).unwrap();
    plan.min_abi = 99;
    let stdout = restrict_in_child(&tree, &plan);
    assert!(
        stdout.contains("REFUSED landlock abi ") && stdout.contains(" is below the 99 "),
        "{stdout}"
    );
}

#[test]
fn restrict_refuses_a_writable_root_that_vanished_or_turned_into_a_symlink() {
    let tree = Tree::new();
    let launch = tree.launch(Network::None);
    let plan = ruleset_plan(&launch, &ListingFacts::measure(&launch).unwrap()).unwrap();
    fs::remove_dir(tree.root.join("run")).unwrap();
    let stdout = restrict_in_child(&tree, &plan);
    assert!(stdout.contains("REFUSED cannot open `"), "{stdout}");
    symlink(tree.root.join("home/.ssh"), tree.root.join("run")).unwrap();
    let stdout = restrict_in_child(&tree, &plan);
    assert!(
        stdout.contains("REFUSED `") && stdout.contains("changed type"),
        "{stdout}"
    );
}

/// Process directories a sandbox sharing the host's `/proc` must not read, and `/proc` entries
/// it still may.
const PROC_ATTACKS: &[&str] = &[
    "read_victim_cmdline",
    "read_victim_environ",
    "read_own_cmdline_via_self",
    "read_process_started_later",
    "list_proc",
];
const PROC_LEGIT: &[&str] = &["read_proc_meminfo", "read_proc_sys_entry"];

/// [`LandlockProc::HostProcessesDenied`]: the ruleset for a sandbox that shares the host's
/// `/proc` (where no procfs of its own can be mounted) keeps every process's command line and
/// environment out — a victim's this test started with a secret in its argv, the command's own,
/// and one started after the ruleset — while the rest of `/proc` stays readable. Each read
/// first works without Landlock.
#[test]
fn the_host_proc_ruleset_denies_every_process_directory() {
    let tree = Tree::new();
    let mut launch = tree.launch(Network::None);
    launch.mechanism = Mechanism::Landlock(LandlockProc::HostProcessesDenied);
    let plan = ruleset_plan(&launch, &ListingFacts::measure(&launch).unwrap()).unwrap();
    fs::write(
        tree.root.join("plan.json"),
        serde_json::to_vec(&plan).unwrap(),
    )
    .unwrap();
    let secret = format!("secret-argv-{}", std::process::id());
    let mut victim = Command::new("sh")
        .args(["-c", "sleep 60; :", &secret])
        .spawn()
        .unwrap();
    // `spawn` returns once the new image is mapped, maybe before its arguments are set up.
    let cmdline = format!("/proc/{}/cmdline", victim.id());
    for _ in 0..2000 {
        if String::from_utf8_lossy(&fs::read(&cmdline).unwrap()).contains(&secret) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let run = |mode: &str| {
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "helper", "--nocapture", "--test-threads=1"])
            .env(HELPER_MODE, mode)
            .env(HELPER_ROOT, &tree.root)
            .env(HELPER_VICTIM, victim.id().to_string())
            .env(HELPER_SECRET, &secret)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{mode}: {stdout}");
        let verdicts: BTreeMap<String, Result<(), i32>> = stdout
            .lines()
            .filter_map(|line| line.find("VERDICT ").map(|at| &line[at..]))
            .filter_map(
                |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                    ["VERDICT", name, "ok"] => Some((name.to_owned(), Ok(()))),
                    ["VERDICT", name, "err", errno] => {
                        Some((name.to_owned(), Err(errno.parse().unwrap())))
                    }
                    _ => None,
                },
            )
            .collect();
        Run {
            verdicts,
            status: None,
            stdout,
        }
    };
    let bare = run("bare-proc");
    let restricted = run("restrict-proc");
    victim.kill().unwrap();
    victim.wait().unwrap();
    let mut problems = Vec::new();
    for name in PROC_ATTACKS.iter().chain(PROC_LEGIT) {
        check(&bare, name, Expect::Ok, &mut problems);
    }
    for name in PROC_ATTACKS {
        check(&restricted, name, Expect::Err(EACCES), &mut problems);
    }
    for name in PROC_LEGIT {
        check(&restricted, name, Expect::Ok, &mut problems);
    }
    assert!(
        problems.is_empty(),
        "{problems:#?}\nbare:\n{}\nrestricted:\n{}",
        bare.stdout,
        restricted.stdout
    );
}

/// The helper child: not a test unless `PALISADE_LANDLOCK_HELPER` is set.
#[test]
fn helper() {
    let Ok(mode) = std::env::var(HELPER_MODE) else {
        return;
    };
    let root = PathBuf::from(std::env::var_os(HELPER_ROOT).unwrap());
    let plan: RulesetPlan =
        serde_json::from_slice(&fs::read(root.join("plan.json")).unwrap()).unwrap();
    match mode.as_str() {
        "bare-proc" | "restrict-proc" => {
            if mode == "restrict-proc" {
                restrict(&plan, None).unwrap();
            }
            let victim: i32 = std::env::var(HELPER_VICTIM).unwrap().parse().unwrap();
            let secret = std::env::var(HELPER_SECRET).unwrap();
            proc_attack(victim, &secret);
            return;
        }
        "bare" => {}
        "restrict" => {
            let status = restrict(&plan, None).unwrap();
            println!("STATUS {}", serde_json::to_string(&status).unwrap());
        }
        "restrict-claimed-masks" => {
            use std::os::unix::fs::MetadataExt;
            let device = fs::metadata(&root).unwrap().dev();
            let status = restrict(&plan, Some(device)).unwrap();
            println!("STATUS {}", serde_json::to_string(&status).unwrap());
        }
        "restrict-only" => {
            match restrict(&plan, None) {
                Ok(status) => println!("RESTRICTED {status:?}"),
                Err(err) => println!("REFUSED {err}"),
            }
            return;
        }
        other => panic!("unknown helper mode `{other}`"),
    }
    let port: u16 = std::env::var(HELPER_PORT).unwrap().parse().unwrap();
    let victim: i32 = std::env::var(HELPER_VICTIM).unwrap().parse().unwrap();
    let abstract_name = std::env::var(HELPER_ABSTRACT).unwrap();
    attack(&root, port, victim, &abstract_name);
}

fn verdict(name: &str, result: std::io::Result<()>) {
    match result {
        Ok(()) => println!("VERDICT {name} ok"),
        Err(err) => println!("VERDICT {name} err {}", err.raw_os_error().unwrap_or(-1)),
    }
    std::io::stdout().flush().unwrap();
}

fn errno(ret: libc::c_int) -> std::io::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn read(path: &Path) -> std::io::Result<()> {
    fs::read(path).map(drop)
}

/// Reads `path` and checks it holds `needle` (a read that returns something else is an error).
fn read_holding(path: &str, needle: &str) -> std::io::Result<()> {
    let bytes = fs::read(path)?;
    if String::from_utf8_lossy(&bytes).contains(needle) {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("`{path}` lacks `{needle}`")))
    }
}

fn proc_attack(victim: i32, secret: &str) {
    verdict(
        "read_victim_cmdline",
        read_holding(&format!("/proc/{victim}/cmdline"), secret),
    );
    verdict(
        "read_victim_environ",
        fs::read(format!("/proc/{victim}/environ")).map(drop),
    );
    verdict(
        "read_own_cmdline_via_self",
        read_holding("/proc/self/cmdline", "helper"),
    );
    verdict(
        "read_process_started_later",
        Command::new("sleep")
            .arg("60")
            .spawn()
            .and_then(|mut child| {
                let read = fs::read(format!("/proc/{}/cmdline", child.id())).map(drop);
                child.kill()?;
                child.wait()?;
                read
            }),
    );
    verdict("list_proc", fs::read_dir("/proc").map(drop));
    verdict(
        "read_proc_meminfo",
        read_holding("/proc/meminfo", "MemTotal"),
    );
    verdict(
        "read_proc_sys_entry",
        fs::read("/proc/sys/kernel/osrelease").map(drop),
    );
}

fn attack(root: &Path, port: u16, victim: i32, abstract_name: &str) {
    let home = root.join("home");
    let ws = root.join("ws");
    let run = root.join("run");
    let outside = root.join("outside");
    let secret = home.join(".ssh/id");

    verdict("read_secret", read(&secret));
    verdict("list_denied_dir", fs::read_dir(home.join(".ssh")).map(drop));
    let mut via_proc = PathBuf::from("/proc/self/root");
    via_proc.push(secret.strip_prefix("/").unwrap());
    verdict("read_secret_via_proc_self_root", read(&via_proc));
    verdict("read_secret_via_dotdot", read(&ws.join("../home/.ssh/id")));
    verdict(
        "read_secret_via_planted_symlink",
        symlink(&secret, ws.join("link")).and_then(|()| read(&ws.join("link"))),
    );
    verdict(
        "hardlink_secret_into_workspace",
        fs::hard_link(&secret, ws.join("id-copy")).and_then(|()| read(&ws.join("id-copy"))),
    );
    verdict(
        "read_denied_created_after_measure",
        read(&home.join(".aws/credentials")),
    );

    verdict(
        "write_outside",
        fs::OpenOptions::new()
            .append(true)
            .open(outside.join("existing.txt"))
            .and_then(|mut file| file.write_all(b"x")),
    );
    verdict(
        "create_outside",
        fs::File::create(outside.join("new.txt")).map(drop),
    );
    let existing = c_path(&outside.join("existing.txt"));
    // SAFETY: `existing` is a valid NUL-terminated path.
    verdict(
        "truncate_outside",
        errno(unsafe { libc::truncate(existing.as_ptr(), 0) }),
    );
    verdict(
        "create_in_home",
        fs::File::create(home.join(".profile")).map(drop),
    );
    if is_root() {
        let node = c_path(&ws.join("null-copy"));
        // SAFETY: `node` is a valid NUL-terminated path; mknod only creates a node in our temp
        // tree (the memory device 1:3, i.e. another /dev/null).
        let ret = unsafe { libc::mknod(node.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        verdict("mknod_char_device_in_workspace", errno(ret));
    }

    verdict(
        "tcp_connect_host_loopback",
        TcpStream::connect(("127.0.0.1", port)).map(drop),
    );
    verdict("tcp_bind", TcpListener::bind("127.0.0.1:0").map(drop));
    verdict(
        "connect_host_abstract_socket",
        SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .and_then(|addr| UnixStream::connect_addr(&addr))
            .map(drop),
    );
    // SAFETY: kill has no memory arguments; `victim` is the `sleep` the parent test started.
    verdict(
        "kill_host_process",
        errno(unsafe { libc::kill(victim, libc::SIGTERM) }),
    );

    // Legitimate work.
    verdict("read_sibling_file", read(&home.join("notes.txt")));
    verdict("read_file_in_sibling_dir", read(&home.join("docs/readme")));
    verdict(
        "list_sibling_dir",
        fs::read_dir(home.join("docs")).map(drop),
    );
    verdict("write_workspace", fs::write(ws.join("out.txt"), "out"));
    verdict("write_run_temp_dir", fs::write(run.join("tmp.txt"), "tmp"));
    verdict(
        "rename_across_writable_roots",
        fs::write(ws.join("move.txt"), "m")
            .and_then(|()| fs::rename(ws.join("move.txt"), run.join("move.txt"))),
    );
    verdict(
        "write_dev_null_with_truncate",
        fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open("/dev/null")
            .and_then(|mut file| file.write_all(b"x")),
    );
    verdict(
        "read_dev_urandom",
        fs::File::open("/dev/urandom").and_then(|mut file| {
            let mut buf = [0_u8; 8];
            std::io::Read::read_exact(&mut file, &mut buf)
        }),
    );
    verdict(
        "exec_bin_true",
        Command::new("/bin/true").status().and_then(|status| {
            if status.success() {
                Ok(())
            } else {
                Err(std::io::Error::other("true failed"))
            }
        }),
    );
    verdict(
        "shell_pipeline",
        Command::new("/bin/sh")
            .args([
                "-c",
                "ls /usr/bin | head -n 1 >/dev/null && cat /etc/hostname >/dev/null \
                 && echo ok > \"$1/sh.txt\" && test -s \"$1/sh.txt\"",
                "sh",
            ])
            .arg(&ws)
            .status()
            .and_then(|status| {
                if status.success() {
                    Ok(())
                } else {
                    Err(std::io::Error::other("sh failed"))
                }
            }),
    );
    verdict("socketpair", UnixStream::pair().map(drop));
    verdict(
        "kill_own_child",
        Command::new("sleep")
            .arg("60")
            .spawn()
            .and_then(|mut child| {
                let pid = i32::try_from(child.id()).unwrap();
                // SAFETY: kill has no memory arguments; `pid` is our own child.
                let result = errno(unsafe { libc::kill(pid, libc::SIGTERM) });
                child.wait()?;
                result
            }),
    );

    // Trade-offs and limits.
    verdict("list_home", fs::read_dir(&home).map(drop));
    verdict(
        "read_sibling_created_after_measure",
        read(&home.join("late.txt")),
    );
    verdict("stat_secret", fs::metadata(&secret).map(drop));
    verdict(
        "chmod_outside",
        fs::set_permissions(
            outside.join("existing.txt"),
            fs::Permissions::from_mode(0o640),
        ),
    );
    verdict(
        "connect_host_pathname_socket",
        UnixStream::connect(outside.join("host.sock")).map(drop),
    );

    // Destructive, last.
    verdict(
        "delete_outside",
        fs::remove_file(outside.join("existing.txt")),
    );
    verdict(
        "rename_denied_into_workspace",
        fs::rename(home.join(".ssh"), ws.join("ssh")),
    );
    verdict(
        "rename_denied_parent_into_workspace",
        fs::rename(&home, ws.join("home")),
    );
}

/// Why Landlock does not claim domain filtering (host/src/probe/landlock.rs): its TCP rules name
/// ports, not addresses. A thread restricted to connecting on port P alone still reaches P on
/// another address (in a shared network namespace: any host on the internet), while other
/// ports are refused — so "allow only the proxy's port" would be a hole, not a filter.
#[test]
fn tcp_port_rules_cannot_restrict_the_address() {
    use landlock::{ABI, Access, AccessNet, NetPort, Ruleset, RulesetAttr, RulesetCreatedAttr};
    let proxy = TcpListener::bind("127.0.0.9:0").unwrap();
    let port = proxy.local_addr().unwrap().port();
    let Ok(elsewhere) = TcpListener::bind(("127.0.0.10", port)) else {
        eprintln!("port {port} is taken on 127.0.0.10; nothing to show");
        return;
    };
    let other_port = TcpListener::bind("127.0.0.9:0").unwrap();
    let other = other_port.local_addr().unwrap();
    let restricted = std::thread::spawn(move || {
        let status = Ruleset::default()
            .handle_access(AccessNet::from_all(ABI::V4))
            .unwrap()
            .create()
            .unwrap()
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .unwrap()
            .restrict_self()
            .unwrap();
        if status.ruleset == landlock::RulesetStatus::NotEnforced {
            return None;
        }
        Some((
            TcpStream::connect(("127.0.0.10", port)).map(|_| ()),
            TcpStream::connect(other).map(|_| ()),
        ))
    })
    .join()
    .unwrap();
    drop(elsewhere);
    let Some((same_port_elsewhere, other_port_result)) = restricted else {
        eprintln!("Landlock TCP rules are not enforced on this kernel; nothing to show");
        return;
    };
    assert!(
        other_port_result.is_err(),
        "the port rule must refuse other ports"
    );
    assert!(
        same_port_elsewhere.is_ok(),
        "a port rule reaches the same port on any address: {same_port_elsewhere:?}"
    );
}
