//! Bad input to every entry point of `palisade run` (issue 16, part 5): each flag value, file and
//! environment variable that is wrong gets one error line with its code, exit 125, and nothing
//! is launched. Run as the test's own user and, under root, as uid 65534.
//!
//! The table is the closing note's table of bad inputs; a case that stops failing this way
//! (launches, panics, or answers without a code) fails the test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step should fail the test loudly"
)]

#[path = "../../tests/support/reachable.rs"]
mod reachable;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const PALISADE: &str = env!("CARGO_BIN_EXE_palisade");
const NOBODY: u32 = 65534;

fn test_uid() -> u32 {
    std::fs::metadata("/proc/self").unwrap().uid()
}

fn test_root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        reachable::reachable_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "bad-input")
    })
    .clone()
}

fn palisade_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| reachable::reachable_binary(Path::new(PALISADE), &test_root()))
        .clone()
}

/// One user's directory: a workspace, a cache, a home, and the files the cases point at.
struct Env {
    dir: tempfile::TempDir,
    nobody: bool,
}

impl Env {
    fn new(nobody: bool) -> Env {
        let dir = tempfile::tempdir_in(test_root()).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["ws", "cache", "home", "outside"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let write =
            |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).unwrap();
        write(
            "taskpack.yaml",
            b"apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  sandbox:\n    preferredBackends: [linux-bwrap, linux-landlock]\n",
        );
        write(
            "unknown-field.yaml",
            b"apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  sandbox:\n    networkMod: none\n",
        );
        write("not-utf8.yaml", b"\xff\xfe\x00garbage");
        write("empty.yaml", b"");
        write("garbage.json", b"{not json");
        write("a-file", b"plain");
        std::os::unix::fs::symlink("loop-b", dir.path().join("loop-a")).unwrap();
        std::os::unix::fs::symlink("loop-a", dir.path().join("loop-b")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.path().join("dangling")).unwrap();
        if nobody {
            let status = Command::new("chown")
                .args(["-R", "-h", &format!("{NOBODY}:{NOBODY}")])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success());
        }
        Env { dir, nobody }
    }

    fn p(&self, rel: &str) -> OsString {
        self.dir.path().join(rel).into_os_string()
    }
}

/// A bad input: the arguments before `--`, extra environment, and the code it must give.
struct Case {
    label: &'static str,
    args: Vec<OsString>,
    env: Vec<(&'static str, OsString)>,
    /// Start in a directory that no longer exists.
    deleted_cwd: bool,
    code: &'static str,
}

fn case(label: &'static str, code: &'static str, args: &[&OsStr]) -> Case {
    Case {
        label,
        args: args.iter().map(|a| a.to_os_string()).collect(),
        env: Vec::new(),
        deleted_cwd: false,
        code,
    }
}

fn s(text: &str) -> &OsStr {
    OsStr::new(text)
}

fn cases(env: &Env) -> Vec<Case> {
    let tp = env.p("taskpack.yaml");
    let tp = tp.as_os_str();
    let ws_file = env.p("ws/inside.jsonl");
    let non_utf8 = OsStr::from_bytes(b"/tmp/\xff\xfe-no-such-dir");
    let mut cases = vec![
        // Durations, sizes, counts.
        case(
            "--timeout not a number",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--timeout"), s("soon")],
        ),
        case(
            "--timeout zero",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--timeout"), s("0")],
        ),
        case(
            "--timeout overflowing",
            "PALISADE_INPUT_INVALID",
            &[
                s("--taskpack"),
                tp,
                s("--timeout"),
                s("99999999999999999999h"),
            ],
        ),
        case(
            "--timeout with a newline",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--timeout"), s("1s\n")],
        ),
        case(
            "--memory unknown unit",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--memory"), s("5X")],
        ),
        case(
            "--memory overflowing",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--memory"), s("99999999999G")],
        ),
        case(
            "--max-procs negative",
            "PALISADE_USAGE_INVALID",
            &[s("--taskpack"), tp, s("--max-procs"), s("-1")],
        ),
        case(
            "--max-procs zero",
            "SANDBOX_POLICY_INVALID",
            &[s("--taskpack"), tp, s("--max-procs"), s("0")],
        ),
        case(
            "--max-procs past the bound",
            "SANDBOX_POLICY_INVALID",
            &[s("--taskpack"), tp, s("--max-procs"), s("9999999")],
        ),
        case(
            "--cpu-seconds not a number",
            "PALISADE_USAGE_INVALID",
            &[s("--taskpack"), tp, s("--cpu-seconds"), s("x")],
        ),
        // Paths.
        case(
            "--workspace missing",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--workspace"), &env.p("no-such-dir")],
        ),
        case(
            "--workspace is a file",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--workspace"), &env.p("a-file")],
        ),
        case(
            "--workspace with a newline",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--workspace"), s("/tmp/a\nb")],
        ),
        case(
            "--workspace not UTF-8",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--workspace"), non_utf8],
        ),
        case(
            "--workspace a symlink loop",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--workspace"), &env.p("loop-a")],
        ),
        case(
            "--writable-root relative",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--writable-root"), s("relative/dir")],
        ),
        case(
            "--writable-root /",
            "SANDBOX_WRITABLE_ROOT_UNSAFE",
            &[s("--taskpack"), tp, s("--writable-root"), s("/")],
        ),
        case(
            "--audit a directory",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--audit"), &env.p("outside")],
        ),
        case(
            "--audit a dangling symlink",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--audit"), &env.p("dangling")],
        ),
        case(
            "--audit a symlink loop",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--audit"), &env.p("loop-a")],
        ),
        case(
            "--audit in a missing directory",
            "PALISADE_INPUT_INVALID",
            &[
                s("--taskpack"),
                tp,
                s("--audit"),
                &env.p("no-such-dir/audit.jsonl"),
            ],
        ),
        case(
            "--audit inside the workspace",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--audit"), &ws_file],
        ),
        case(
            "--json fd:1",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--json"), s("fd:1")],
        ),
        case(
            "--json fd:x",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--json"), s("fd:x")],
        ),
        case(
            "--json a closed descriptor",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--json"), s("fd:987")],
        ),
        case(
            "--json a directory",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--json"), &env.p("outside")],
        ),
        // Choices and free text.
        case(
            "--execution-mode unknown",
            "PALISADE_USAGE_INVALID",
            &[s("--taskpack"), tp, s("--execution-mode"), s("bogus")],
        ),
        case(
            "--session-kind unknown",
            "PALISADE_USAGE_INVALID",
            &[s("--taskpack"), tp, s("--session-kind"), s("bogus")],
        ),
        case(
            "--requested-by without workspace mode",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--requested-by"), s("me")],
        ),
        case(
            "--requested-by with a newline",
            "PALISADE_USAGE_INVALID",
            &[
                s("--taskpack"),
                tp,
                s("--execution-mode"),
                s("workspace"),
                s("--requested-by"),
                s("a\nb"),
            ],
        ),
        case(
            "--proxy-resolve without =",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), tp, s("--proxy-resolve"), s("bad")],
        ),
        case(
            "--proxy-resolve not an address",
            "PALISADE_INPUT_INVALID",
            &[
                s("--taskpack"),
                tp,
                s("--proxy-resolve"),
                s("a.example=notip"),
            ],
        ),
        case(
            "--allow-domain empty label",
            "SANDBOX_POLICY_INVALID",
            &[s("--taskpack"), tp, s("--allow-domain"), s("bad..name")],
        ),
        case(
            "--allow-domain empty",
            "SANDBOX_POLICY_INVALID",
            &[s("--taskpack"), tp, s("--allow-domain"), s("")],
        ),
        case(
            "--network unknown",
            "PALISADE_USAGE_INVALID",
            &[s("--network"), s("offline")],
        ),
        case(
            "--network looser than the taskpack",
            "SANDBOX_POLICY_INVALID",
            &[s("--taskpack"), tp, s("--network"), s("allow-outbound")],
        ),
        case(
            "--deny-read relative",
            "SANDBOX_POLICY_INVALID",
            &[s("--deny-read"), s("secrets")],
        ),
        case(
            "--writable missing",
            "PALISADE_INPUT_INVALID",
            &[s("--writable"), &env.p("no-such-dir")],
        ),
        case(
            "--writable outside the workspace",
            "SANDBOX_POLICY_INVALID",
            &[s("--writable"), s("/usr")],
        ),
        case(
            "--backend unknown",
            "PALISADE_USAGE_INVALID",
            &[s("--backend"), s("firejail")],
        ),
        case(
            "--require unknown",
            "PALISADE_USAGE_INVALID",
            &[s("--require"), s("magic")],
        ),
        case(
            "--pass-env a secret the allowlist withholds",
            "SANDBOX_POLICY_INVALID",
            &[s("--pass-env"), s("GITHUB_TOKEN")],
        ),
        case(
            "an unknown flag",
            "PALISADE_USAGE_INVALID",
            &[s("--taskpack"), tp, s("--no-such-flag")],
        ),
        // Files.
        case(
            "--taskpack missing",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), &env.p("no-such.yaml")],
        ),
        case(
            "--taskpack a directory",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), &env.p("outside")],
        ),
        case(
            "--taskpack a symlink loop",
            "PALISADE_INPUT_INVALID",
            &[s("--taskpack"), &env.p("loop-a")],
        ),
        case(
            "--taskpack not UTF-8",
            "SANDBOX_POLICY_INVALID",
            &[s("--taskpack"), &env.p("not-utf8.yaml")],
        ),
        case(
            "--taskpack empty",
            "SANDBOX_POLICY_INVALID",
            &[s("--taskpack"), &env.p("empty.yaml")],
        ),
        case(
            "--taskpack an unknown field",
            "SANDBOX_POLICY_INVALID",
            &[s("--taskpack"), &env.p("unknown-field.yaml")],
        ),
        case(
            "--task-contract not UTF-8",
            "SANDBOX_POLICY_INVALID",
            &[
                s("--taskpack"),
                tp,
                s("--task-contract"),
                &env.p("not-utf8.yaml"),
            ],
        ),
        case(
            "--host-config missing",
            "HOST_CONFIG_INVALID",
            &[
                s("--taskpack"),
                tp,
                s("--host-config"),
                &env.p("no-such.yaml"),
            ],
        ),
        case(
            "--host-config a directory",
            "HOST_CONFIG_INVALID",
            &[s("--taskpack"), tp, s("--host-config"), &env.p("outside")],
        ),
        case(
            "--host-config garbage",
            "HOST_CONFIG_INVALID",
            &[
                s("--taskpack"),
                tp,
                s("--host-config"),
                &env.p("garbage.json"),
            ],
        ),
        case(
            "--runtime-profiles garbage",
            "DOCKER_PROFILE_INVALID",
            &[
                s("--taskpack"),
                tp,
                s("--runtime-profiles"),
                &env.p("garbage.json"),
            ],
        ),
        case(
            "--input missing",
            "PALISADE_INPUT_INVALID",
            &[s("--input"), &env.p("no-such.json")],
        ),
        case(
            "--input garbage",
            "PALISADE_INPUT_INVALID",
            &[s("--input"), &env.p("garbage.json")],
        ),
    ];
    // Environment variables Palisade honours.
    for (label, name, value, code) in [
        (
            "PALISADE_CACHE_DIR relative",
            "PALISADE_CACHE_DIR",
            s("relative"),
            "PALISADE_INPUT_INVALID",
        ),
        (
            "PALISADE_CACHE_DIR empty",
            "PALISADE_CACHE_DIR",
            s(""),
            "PALISADE_INPUT_INVALID",
        ),
        (
            "PALISADE_CACHE_DIR a file",
            "PALISADE_CACHE_DIR",
            &env.p("a-file"),
            "PALISADE_INPUT_INVALID",
        ),
        (
            "PALISADE_CACHE_DIR inside the workspace",
            "PALISADE_CACHE_DIR",
            &env.p("ws/cache"),
            "PALISADE_INPUT_INVALID",
        ),
        (
            "XDG_RUNTIME_DIR a file",
            "XDG_RUNTIME_DIR",
            &env.p("a-file"),
            "PALISADE_INPUT_INVALID",
        ),
        (
            "XDG_RUNTIME_DIR relative",
            "XDG_RUNTIME_DIR",
            s("run"),
            "PALISADE_INPUT_INVALID",
        ),
    ] {
        let mut c = case(label, code, &[s("--taskpack"), tp]);
        c.env.push((name, value.to_os_string()));
        cases.push(c);
    }
    let mut gone = case(
        "the current directory deleted",
        "PALISADE_INPUT_INVALID",
        &[s("--taskpack"), tp],
    );
    gone.deleted_cwd = true;
    cases.push(gone);
    cases
}

fn run_case(env: &Env, case: &Case) -> Result<(), String> {
    let cwd = if case.deleted_cwd {
        env.dir.path().join("gone")
    } else {
        env.dir.path().join("ws")
    };
    let mut cmd = if env.nobody {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".into(),
            "--".into(),
        ])
        .arg(palisade_binary());
        cmd
    } else {
        Command::new(palisade_binary())
    };
    if case.deleted_cwd {
        // Entered by the shell, then removed under it: palisade starts in a deleted directory.
        std::fs::create_dir_all(&cwd).unwrap();
        let script = format!(
            "cd '{}' && rmdir '{}' && exec \"$@\"",
            cwd.display(),
            cwd.display()
        );
        let program = cmd.get_program().to_os_string();
        let args: Vec<OsString> = cmd.get_args().map(OsStr::to_os_string).collect();
        cmd = Command::new("sh");
        cmd.arg("-c").arg(script).arg("sh").arg(program).args(args);
    }
    cmd.arg("run")
        .args(&case.args)
        .args(["--", "sh", "-c", "echo LAUNCHED"])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", env.dir.path().join("home"))
        .env("PALISADE_CACHE_DIR", env.dir.path().join("cache"))
        .env("LANG", "C.UTF-8");
    for (name, value) in &case.env {
        cmd.env(name, value);
    }
    cmd.current_dir(if case.deleted_cwd {
        env.dir.path()
    } else {
        &cwd
    });
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let first = stderr.lines().next().unwrap_or_default();
    let mut problems = Vec::new();
    if stdout.contains("LAUNCHED") {
        problems.push("the command was launched".to_owned());
    }
    if out.status.code() != Some(125) {
        problems.push(format!("exit {:?}, not 125", out.status));
    }
    if !first.starts_with(&format!("error[{}]: ", case.code)) {
        problems.push(format!("first line is not `error[{}]: …`", case.code));
    }
    if stderr.contains("panicked") || stderr.contains("RUST_BACKTRACE") {
        problems.push("a panic".to_owned());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}\n    stderr: {}",
            case.label,
            problems.join("; "),
            stderr.trim().replace('\n', "\n            ")
        ))
    }
}

fn every_bad_input(nobody: bool) {
    let env = Env::new(nobody);
    let cases = cases(&env);
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| run_case(&env, c).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} bad inputs{}:\n{}",
        failures.len(),
        cases.len(),
        if nobody { " as uid 65534" } else { "" },
        failures.join("\n")
    );
    eprintln!(
        "{} bad inputs{}: each one error line with its code, exit 125, nothing launched",
        cases.len(),
        if nobody { " as uid 65534" } else { "" }
    );
}

#[test]
fn every_bad_input_is_one_coded_error_and_launches_nothing() {
    every_bad_input(false);
}

#[test]
fn every_bad_input_is_one_coded_error_and_launches_nothing_unprivileged() {
    if test_uid() == 0 {
        every_bad_input(true);
    } else {
        eprintln!("not root: the uid 65534 pass is skipped (the own-user pass is unprivileged)");
    }
}
