//! Host configuration, the environment allowlist and the trusted `workspace` mode, as a user
//! sees them through the `palisade` binary.
//!
//! - configuration files: validation (every field path, `HOST_CONFIG_INVALID`, nothing
//!   launched), the per-user file and `--host-config`, flags that may only tighten, the files'
//!   digests and effective values in every audit record, budget ceilings;
//! - the environment: a secret planted in Palisade's environment is absent inside every backend
//!   (`linux-bwrap`, `linux-landlock`, `direct-dedicated`, and `workspace` mode) — in `env`,
//!   `/proc/self/environ`, `/proc/1/environ`, the supervisor's `/proc/<pid>/environ` and every
//!   other `environ` the command can see — while an allowlisted variable arrives intact; as
//!   root and as uid 65534 (via `setpriv`) when the test runs as root;
//! - `workspace` mode: unsandboxed (a write outside every writable root lands), yet supervised
//!   (a double-forked `setsid` daemon is reaped, budgets end the run, the allowlist applies),
//!   recorded as unsandboxed by request with who asked, and refused when the host forbids it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

#[path = "../../tests/support/reachable.rs"]
mod reachable;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

const PALISADE: &str = env!("CARGO_BIN_EXE_palisade");
const NOBODY: u32 = 65534;
const HEAD: &str = "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\n";

/// Who runs `palisade`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum User {
    /// The test's own user (root on CI).
    Own,
    /// uid/gid 65534 via `setpriv`, when the test runs as root.
    Nobody,
}

fn test_uid() -> u32 {
    std::fs::metadata("/proc/self").unwrap().uid()
}

/// The users to run as: the test's own, plus 65534 when the test is root.
fn users() -> Vec<User> {
    if test_uid() == 0 {
        vec![User::Own, User::Nobody]
    } else {
        eprintln!("not root: the uid 65534 pass is skipped (the own-user pass is unprivileged)");
        vec![User::Own]
    }
}

impl User {
    fn uid(self) -> u32 {
        match self {
            User::Own => test_uid(),
            User::Nobody => NOBODY,
        }
    }
}

/// Where this file's tests keep their files: reachable by uid 65534 wherever the checkout is.
fn test_root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        reachable::reachable_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "hostconfig")
    })
    .clone()
}

/// The palisade binary where every user can execute it.
fn palisade_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| reachable::reachable_binary(Path::new(PALISADE), &test_root()))
        .clone()
}

/// A unique marker, so concurrent tests never see each other's values.
fn marker(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}{nanos:x}p{}", std::process::id())
}

struct Env {
    dir: tempfile::TempDir,
    user: User,
}

impl Env {
    fn new(user: User) -> Env {
        // Not under /tmp: bwrap gives the sandbox a private /tmp, and the tests look at the
        // workspace from the host afterwards.
        let dir = tempfile::tempdir_in(test_root()).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for sub in [
            "ws",
            "cache",
            "home",
            "xdg/palisade",
            "outside",
            "results",
            "extra",
        ] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let env = Env { dir, user };
        if user == User::Nobody {
            chown_tree(env.dir.path(), NOBODY);
        }
        env
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn s(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    /// Writes a host configuration (root- or user-owned, mode 0644) and returns its path.
    fn config(&self, rel: &str, spec: &str) -> PathBuf {
        let path = self.path(rel);
        std::fs::write(&path, format!("{HEAD}spec:\n{spec}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        path
    }

    fn taskpack(&self, body: &str) -> String {
        let path = self.path("taskpack.yaml");
        std::fs::write(
            &path,
            format!("apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {{name: t}}\nspec:\n{body}"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        path.display().to_string()
    }

    /// `palisade ARGS` as this env's user, with a clean environment plus `extra`.
    fn command(&self, args: &[&str], extra: &[(&str, &str)]) -> Command {
        let mut cmd = match self.user {
            User::Own => Command::new(palisade_binary()),
            User::Nobody => {
                let mut cmd = Command::new("setpriv");
                cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(palisade_binary());
                cmd
            }
        };
        cmd.args(args)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", self.path("home"))
            .env("XDG_CONFIG_HOME", self.path("xdg"))
            .env("PALISADE_CACHE_DIR", self.path("cache"))
            .env("LANG", "C.UTF-8")
            .envs(extra.iter().copied())
            .current_dir(self.path("ws"));
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args, &[]).output().unwrap()
    }

    fn audit_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn decision_of(record: &Value) -> Value {
    serde_json::from_str(record["output"].as_str().unwrap()).unwrap()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Configuration files

#[test]
fn an_invalid_configuration_lists_every_field_and_launches_nothing() {
    let env = Env::new(User::Own);
    let config = env.config(
        "bad.yaml",
        "  sessionKind: laptop\n  bogus: 1\n  environment: {allow: ['*', LANG]}\n  budgets: {memoryMiB: lots}\n  writableRoots: [relative]\n",
    );
    let config = config.to_str().unwrap();
    let out = env.run(&["decide", "--host-config", config]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("error[HOST_CONFIG_INVALID]"), "{stderr}");
    for path in [
        "spec.sessionKind:",
        "spec.bogus:",
        "spec.environment.allow[0]:",
        "spec.budgets.memoryMiB:",
        "spec.writableRoots[0]:",
    ] {
        assert!(stderr.contains(path), "{path} missing from: {stderr}");
    }
    assert!(out.stdout.is_empty());

    // `run` refuses the same way (125), launches nothing and records nothing.
    let marker = env.path("ws/launched");
    let audit = env.s("audit.jsonl");
    let out = env.run(&[
        "run",
        "--host-config",
        config,
        "--audit",
        &audit,
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).starts_with("error[HOST_CONFIG_INVALID]"));
    assert!(!marker.exists());
    assert!(env.audit_lines().is_empty());

    // A missing `--host-config` is an error, not "no configuration".
    let out = env.run(&["doctor", "--host-config", &env.s("nope.yaml")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("error[HOST_CONFIG_INVALID]"));

    // A configured writable root must exist: Palisade creates none.
    let missing = env.config(
        "missing-root.yaml",
        &format!("  resultsDir: {}\n", env.s("no-such-dir")),
    );
    let out = env.run(&["decide", "--host-config", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("spec.resultsDir:"),
        "{}",
        text(&out.stderr)
    );

    // So is a file others may write.
    let loose = env.config("loose.yaml", "  sessionKind: cli\n");
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = env.run(&["decide", "--host-config", loose.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not safe to trust"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_per_user_file_is_read_and_host_config_replaces_it() {
    let env = Env::new(User::Own);
    let user_file = env.config("xdg/palisade/host.yaml", "  sessionKind: turnkey\n");
    let out = env.run(&["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doctor: Value = serde_json::from_slice(&out.stdout).unwrap();
    let config = &doctor["hostConfig"];
    assert_eq!(config["files"].as_array().unwrap().len(), 1, "{config}");
    assert_eq!(config["files"][0]["source"], "user");
    assert_eq!(
        config["files"][0]["sha256"],
        palisade_engine::output::sha256_hex(&std::fs::read(&user_file).unwrap())
    );
    assert_eq!(config["effective"]["sessionKind"]["value"], "turnkey");
    assert_eq!(config["effective"]["sessionKind"]["from"], "user");
    assert_eq!(doctor["host"]["sessionKind"], "turnkey");
    // The system location was looked at (and is absent on a test machine).
    assert!(strings(&config["absent"]).contains(&"/etc/palisade/host.yaml".to_owned()));

    // `--host-config` takes the per-user file's place.
    let other = env.config("other.yaml", "  sessionKind: managed\n");
    let out = env.run(&["doctor", "--json", "--host-config", other.to_str().unwrap()]);
    let doctor: Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = doctor["hostConfig"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["source"], "flag");
    assert_eq!(doctor["host"]["sessionKind"], "managed");

    // The text view names the file and every effective value with its origin.
    let out = env.run(&["doctor"]);
    let shown = text(&out.stdout);
    assert!(shown.contains("config    user"), "{shown}");
    assert!(
        shown.contains("sessionKind            turnkey [user]"),
        "{shown}"
    );
    assert!(
        shown.contains("budgets.timeoutSeconds - [default]"),
        "{shown}"
    );
}

#[test]
fn flags_may_only_tighten_the_configuration() {
    let env = Env::new(User::Own);
    let config = env.config(
        "host.yaml",
        "  sessionKind: managed\n  allowDirectDedicated: false\n",
    );
    let config = config.to_str().unwrap();
    for (flag, value) in [
        ("--allow-direct-dedicated", None),
        ("--session-kind", Some("cli")),
    ] {
        let mut args = vec!["decide", "--host-config", config, flag];
        args.extend(value);
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(4), "{flag}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).starts_with("error[HOST_CONFIG_FORBIDDEN]"),
            "{}",
            text(&out.stderr)
        );
    }
    // Tightening to turnkey is fine, and the engine sees it.
    let audit = env.s("audit.jsonl");
    let out = env.run(&[
        "decide",
        "--host-config",
        config,
        "--session-kind",
        "turnkey",
        "--record",
        &audit,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        env.audit_lines()[0]["input"]["host"]["sessionKind"],
        "turnkey"
    );
    // Without the flag, the configured kind applies.
    let out = env.run(&["decide", "--host-config", config, "--record", &audit]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        env.audit_lines()[1]["input"]["host"]["sessionKind"],
        "managed"
    );
}

#[test]
fn the_configuration_reaches_the_decision_and_every_audit_record() {
    let env = Env::new(User::Own);
    // The configured runtime profile file is read (and must parse) on every decision; its image
    // need not exist for a decision that does not pick docker.
    let profiles = env.s("runtime-profiles.yaml");
    std::fs::write(
        &profiles,
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata: {{name: t}}\nspec:\n  runtimeProfiles:\n    - name: build\n      image: palisade-absent:1\n      imageId: sha256:{}\n",
            "a".repeat(64)
        ),
    )
    .unwrap();
    let config = env.config(
        "host.yaml",
        &format!(
            "  defaultBackendOrder: [linux-landlock, linux-bwrap]\n  writableRoots: [{}]\n  resultsDir: {}\n  dockerRuntimeProfiles: {profiles}\n  environment:\n    allow: [LANG, LC_*, PALISADE_DEPLOY_TOKEN]\n",
            env.s("extra"),
            env.s("results"),
        ),
    );
    let digest = palisade_engine::output::sha256_hex(&std::fs::read(&config).unwrap());
    let config = config.to_str().unwrap();
    let taskpack = env.taskpack("  sandbox: {}\n");
    let audit = env.s("audit.jsonl");
    let out = env.run(&[
        "decide",
        "--host-config",
        config,
        "--taskpack",
        &taskpack,
        "--record",
        &audit,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(
        summary.contains("secret-looking, passed because named: PALISADE_DEPLOY_TOKEN"),
        "{summary}"
    );
    let record = &env.audit_lines()[0];
    let host = &record["input"]["host"];
    assert_eq!(
        strings(&host["defaultBackendOrder"]),
        ["linux-landlock", "linux-bwrap"]
    );
    let roots = strings(&host["writableRoots"]);
    assert!(
        roots.contains(&env.s("extra")) && roots.contains(&env.s("results")),
        "{roots:?}"
    );
    assert_eq!(
        strings(&host["environmentAllowlist"]),
        ["LANG", "LC_*", "PALISADE_DEPLOY_TOKEN"]
    );
    let decision = decision_of(record);
    assert_eq!(decision["policy"]["preferredBackendsOrigin"], "host");
    assert_eq!(
        strings(&decision["plan"]["environment"]["explicitSecrets"]),
        ["PALISADE_DEPLOY_TOKEN"]
    );
    let context = &record["context"]["hostConfig"];
    assert_eq!(context["files"][0]["sha256"], digest.as_str());
    assert_eq!(context["files"][0]["source"], "flag");
    assert_eq!(
        context["effective"]["dockerRuntimeProfiles"]["value"],
        profiles.as_str()
    );
    assert_eq!(context["effective"]["environment"]["from"], "flag");

    // Replay reproduces the decision from the recorded facts alone.
    let out = Command::new(PALISADE)
        .args(["replay", &audit])
        .env("PALISADE_CACHE_DIR", env.path("cache"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

    // A flag may repeat the configured runtime profile file, not replace it.
    let other = env.s("other-profiles.yaml");
    std::fs::copy(&profiles, &other).unwrap();
    for (flag, code) in [
        (profiles.as_str(), None),
        (other.as_str(), Some("HOST_CONFIG_FORBIDDEN")),
    ] {
        let out = env.run(&[
            "decide",
            "--host-config",
            config,
            "--taskpack",
            &taskpack,
            "--runtime-profiles",
            flag,
        ]);
        match code {
            None => assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr)),
            Some(code) => assert!(
                out.status.code() != Some(0) && text(&out.stderr).contains(code),
                "{}",
                text(&out.stderr)
            ),
        }
    }
    // Nor may `--docker-image` name another image than the configured profile's.
    let out = env.run(&[
        "decide",
        "--host-config",
        config,
        "--taskpack",
        &taskpack,
        "--docker-image",
        "other:1",
    ]);
    assert!(
        out.status.code() != Some(0)
            && text(&out.stderr).starts_with("error[HOST_CONFIG_FORBIDDEN]")
            && text(&out.stderr).contains("--docker-image other:1"),
        "{}",
        text(&out.stderr)
    );
    // A configured file that cannot be read stops the decision: the host's pins are unknown.
    std::fs::remove_file(&profiles).unwrap();
    let out = env.run(&["decide", "--host-config", config, "--taskpack", &taskpack]);
    assert!(
        out.status.code() != Some(0) && text(&out.stderr).contains("DOCKER_PROFILE_INVALID"),
        "{}",
        text(&out.stderr)
    );
}

/// A host configuration exempts git's config by rule: the measured git directory and the
/// exemption are recorded, the decision lists the path as dropped, `decide` warns, a run can
/// write it, the hooks stay read-only, and the record replays.
#[test]
fn an_exempted_git_rule_is_recorded_dropped_and_said() {
    let env = Env::new(User::Own);
    let ws = env.path("ws");
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws)
        .status()
        .unwrap();
    assert!(init.success());
    let config = env.config("host.yaml", "  exemptProtectedPaths: [.git/config]\n");
    let config = config.to_str().unwrap();
    let audit = env.s("audit.jsonl");
    let out = env.run(&["decide", "--host-config", config, "--record", &audit]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let git_config = format!("{}/.git/config", env.s("ws"));
    assert!(
        text(&out.stdout).contains(&format!("protected path `{git_config}` (.git/config) is writable: exempted by the host configuration")),
        "{}",
        text(&out.stdout)
    );
    let record = &env.audit_lines()[0];
    assert_eq!(
        strings(&record["input"]["host"]["gitDirs"]),
        [format!("{}/.git", env.s("ws"))]
    );
    assert_eq!(
        strings(&record["input"]["host"]["exemptProtectedPaths"]),
        [".git/config"]
    );
    let decision = decision_of(record);
    assert_eq!(
        decision["policy"]["droppedProtectedPaths"][0]["path"],
        git_config.as_str()
    );
    assert!(
        !decision["plan"]["protectedPaths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"] == git_config.as_str())
    );
    let out = Command::new(PALISADE)
        .args(["replay", &audit])
        .env("PALISADE_CACHE_DIR", env.path("cache"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

    // Inside, git's config can be written, its hooks still cannot.
    let out = env.run(&[
        "run",
        "--host-config",
        config,
        "--",
        "sh",
        "-c",
        "git config alias.st status && echo config-ok; touch .git/hooks/x || echo hooks-ro",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "config-ok\nhooks-ro\n",
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn budget_ceilings_clamp_the_taskpack_and_say_so() {
    let env = Env::new(User::Own);
    let config = env.config("host.yaml", "  budgets: {timeoutSeconds: 1}\n");
    let taskpack = env.taskpack(
        "  budgets: {timeoutSeconds: 600}\n  sandbox:\n    preferredBackends: [linux-bwrap]\n",
    );
    let audit = env.s("audit.jsonl");
    let started = Instant::now();
    let out = env.run(&[
        "run",
        "--host-config",
        config.to_str().unwrap(),
        "--taskpack",
        &taskpack,
        "--audit",
        &audit,
        "--",
        "sleep",
        "30",
    ]);
    assert!(started.elapsed() < Duration::from_secs(25));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 15), "{stderr}");
    // Said before the command started.
    assert!(
        stderr.contains("the policy's budgets.timeoutSeconds 10m clamped to 1s by the host configuration's ceiling"),
        "{stderr}"
    );
    let lines = env.audit_lines();
    // The decision holds what is enforced, who set it, and what the taskpack asked for.
    let decision = decision_of(&lines[0]);
    assert_eq!(
        decision["policy"]["budgets"]["timeoutSeconds"], 600,
        "the request stays visible"
    );
    assert_eq!(
        decision["plan"]["budgets"]["timeoutMillis"],
        serde_json::json!({"value": 1000, "origin": "host-ceiling"})
    );
    assert_eq!(
        decision["plan"]["budgets"]["clamped"],
        serde_json::json!([{"budget": "timeout", "requested": 600_000, "requestedBy": "policy",
            "limit": 1000, "limitedBy": "host-ceiling"}])
    );
    assert_eq!(lines[1]["outcome"]["endedBy"], "wall-clock");

    // The ceiling is a decision input: another ceiling gives another digest, and replay
    // reproduces both records (a host that re-decided natively could not).
    let looser = env.config("looser.yaml", "  budgets: {timeoutSeconds: 2}\n");
    let out = env.run(&[
        "decide",
        "--host-config",
        looser.to_str().unwrap(),
        "--taskpack",
        &taskpack,
        "--record",
        &audit,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines = env.audit_lines();
    assert_ne!(lines[0]["outputDigest"], lines[2]["outputDigest"]);
    assert_eq!(
        decision_of(&lines[2])["plan"]["budgets"]["timeoutMillis"]["value"],
        2000
    );
    let out = env.run(&["replay", &audit]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout).matches("REPRODUCED").count(), 2);
}

#[test]
fn a_budget_flag_is_a_decision_input_and_a_looser_one_is_clamped_aloud() {
    let env = Env::new(User::Own);
    let taskpack = env.taskpack(
        "  budgets: {timeoutSeconds: 600}\n  sandbox:\n    preferredBackends: [linux-bwrap]\n",
    );
    let audit = env.s("audit.jsonl");
    let decide = |timeout: &str| {
        env.run(&[
            "decide",
            "--taskpack",
            &taskpack,
            "--timeout",
            timeout,
            "--record",
            &audit,
        ])
    };
    // Tighter: the flag sets it. Looser: the policy's holds, and the summary says so.
    let tighter = decide("90s");
    assert_eq!(tighter.status.code(), Some(0), "{}", text(&tighter.stderr));
    assert!(text(&tighter.stdout).contains("timeout 90s [flag]"));
    let looser = decide("1h");
    let summary = text(&looser.stdout);
    assert!(summary.contains("timeout 10m [policy]"), "{summary}");
    assert!(
        summary.contains("--timeout 1h clamped to 10m by the policy's budget"),
        "{summary}"
    );
    let lines = env.audit_lines();
    assert_eq!(lines[0]["input"]["budgetFlags"]["timeoutMillis"], 90_000);
    assert_ne!(lines[0]["outputDigest"], lines[1]["outputDigest"]);
    assert_eq!(
        decision_of(&lines[1])["plan"]["budgets"]["clamped"][0]["requestedBy"],
        "flag"
    );
    let out = env.run(&["replay", &audit]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout).matches("REPRODUCED").count(), 2);
}

// ---------------------------------------------------------------------------------------------
// The environment on every backend

/// One observation run: what the command printed, and the audit.
struct Seen {
    stdout: String,
    stderr: String,
    status: Option<i32>,
    audit: String,
    lines: Vec<Value>,
}

/// The script the command runs: every way it has to look at environments. It waits for the
/// test to tell it the supervisor's pid (written into the workspace after spawning). The values
/// to look for come as `$1` and `$2` and are never printed: other processes' environments are
/// only searched (`LEAK <file>` on a match), so the host's own never reach the test's output.
const LOOK: &str = r#"
i=0; while [ ! -s supervisor.pid ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
sup=$(cat supervisor.pid)
echo "== env"; env
echo "== self"; tr '\0' '\n' < /proc/self/environ
echo "== init"; if tr '\0' '\n' < /proc/1/environ; then echo "(read /proc/1/environ)"; fi
echo "== supervisor $sup"
if tr '\0' '\n' < /proc/$sup/environ; then echo "(read supervisor environ)"; else echo "(supervisor environ unreadable)"; fi
echo "== all"
for f in /proc/[0-9]*/environ; do
  if grep -q -a -F -e "$1" -e "$2" "$f" 2>/dev/null; then echo "LEAK $f"; fi
done
echo "== end"
"#;

fn observe(env: &Env, mode_args: &[&str], extra: &[(&str, &str)], look_for: [&str; 2]) -> Seen {
    let _ = std::fs::remove_file(env.path("ws/supervisor.pid"));
    let audit = env.s("audit.jsonl");
    let _ = std::fs::remove_file(&audit);
    let config = env.config(
        "env-host.yaml",
        "  environment:\n    allow: [LANG, PALISADE_ALLOWED]\n",
    );
    let mut args = vec![
        "run",
        "--host-config",
        config.to_str().unwrap(),
        "--audit",
        &audit,
    ];
    args.extend(mode_args);
    args.extend(["--", "sh", "-c", LOOK, "sh"]);
    args.extend(look_for);
    let child = env
        .command(&args, extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid_file = env.path("ws/supervisor.pid");
    std::fs::write(&pid_file, child.id().to_string()).unwrap();
    if env.user == User::Nobody {
        chown_tree(&pid_file, NOBODY);
    }
    // Read both pipes while waiting (a full pipe would stall the command), with a deadline.
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let Ok(out) = finished.recv_timeout(Duration::from_secs(90)) else {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        panic!("palisade run did not finish");
    };
    let out = out.unwrap();
    let audit_text = std::fs::read_to_string(&audit).unwrap_or_default();
    Seen {
        stdout: text(&out.stdout),
        stderr: text(&out.stderr),
        status: out.status.code(),
        lines: audit_text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        audit: audit_text,
    }
}

#[test]
fn a_planted_secret_is_absent_inside_every_backend_and_an_allowlisted_variable_arrives() {
    // Control: the way the command looks works where nothing stands in its way.
    let secret = marker("s3cr3t");
    let control = Command::new("sh")
        .args(["-c", "tr '\\0' '\\n' < /proc/$$/environ"])
        .env("PALISADE_TEST_SECRET_TOKEN", &secret)
        .output()
        .unwrap();
    assert!(text(&control.stdout).contains(&secret));

    let allowed = "intact: spaces, ü, =;$ and 'quotes'";
    let mut table = Vec::new();
    for user in users() {
        for (label, mode_args) in [
            ("linux-bwrap", vec!["--taskpack", "BWRAP"]),
            ("linux-landlock", vec!["--taskpack", "LANDLOCK"]),
            (
                "direct-dedicated",
                vec!["--taskpack", "DIRECT", "--allow-direct-dedicated"],
            ),
            ("workspace", vec!["--execution-mode", "workspace"]),
        ] {
            let env = Env::new(user);
            let taskpack = match mode_args.get(1).copied() {
                Some("BWRAP") => env.taskpack("  sandbox: {preferredBackends: [linux-bwrap]}\n"),
                Some("LANDLOCK") => {
                    env.taskpack("  sandbox: {preferredBackends: [linux-landlock]}\n")
                }
                Some("DIRECT") => env.taskpack(
                    "  sandbox: {preferredBackends: [direct-dedicated], networkMode: allow-outbound}\n",
                ),
                _ => String::new(),
            };
            let args: Vec<&str> = mode_args
                .iter()
                .map(|a| {
                    if ["BWRAP", "LANDLOCK", "DIRECT"].contains(a) {
                        taskpack.as_str()
                    } else {
                        a
                    }
                })
                .collect();
            let secret = marker("tok");
            let unlisted = marker("unl");
            let seen = observe(
                &env,
                &args,
                &[
                    ("PALISADE_TEST_SECRET_TOKEN", secret.as_str()),
                    ("AWS_SECRET_ACCESS_KEY", secret.as_str()),
                    ("PALISADE_UNLISTED", unlisted.as_str()),
                    ("PALISADE_ALLOWED", allowed),
                ],
                [secret.as_str(), unlisted.as_str()],
            );
            let ctx = format!(
                "{label} as uid {}: {}\n{}",
                user.uid(),
                seen.stderr,
                seen.stdout
            );
            assert_eq!(seen.status, Some(0), "{ctx}");
            assert!(seen.stdout.contains("== end"), "{ctx}");
            assert!(!seen.stdout.contains(&secret), "secret leaked: {ctx}");
            assert!(!seen.stdout.contains(&unlisted), "unlisted leaked: {ctx}");
            assert!(
                !seen.stdout.contains("LEAK "),
                "an environ holds the secret: {ctx}"
            );
            assert!(
                seen.stdout
                    .lines()
                    .any(|l| l == format!("PALISADE_ALLOWED={allowed}")),
                "{ctx}"
            );
            // Names only in the audit, never a value.
            assert!(!seen.audit.contains(&secret) && !seen.audit.contains(allowed));
            let environment = &seen.lines[1]["outcome"]["environment"];
            assert_eq!(environment["allowlist"], "host", "{ctx}");
            assert!(strings(&environment["passed"]).contains(&"PALISADE_ALLOWED".to_owned()));
            let withheld = strings(&environment["withheld"]);
            for name in [
                "PALISADE_TEST_SECRET_TOKEN",
                "AWS_SECRET_ACCESS_KEY",
                "PALISADE_UNLISTED",
            ] {
                assert!(withheld.contains(&name.to_owned()), "{name}: {environment}");
            }
            let supervisor = seen
                .stdout
                .lines()
                .find(|l| l.starts_with("(supervisor environ") || l.starts_with("(read supervisor"))
                .unwrap_or("?")
                .to_owned();
            table.push(format!(
                "{label:<17} uid {:<6} supervisor environ: {supervisor:<32} concealment: {}",
                user.uid(),
                environment["supervisorEnviron"]
            ));
        }
    }
    eprintln!("{}", table.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Trusted mode

#[test]
fn workspace_mode_is_unsandboxed_but_supervised_and_recorded() {
    for user in users() {
        let env = Env::new(user);
        // A policy that would deny all of this under a sandbox.
        let taskpack = env.taskpack(
            "  sandbox: {preferredBackends: [linux-bwrap], networkMode: none, deniedReadPaths: [~/.ssh]}\n",
        );
        let audit = env.s("audit.jsonl");
        let outside = env.path("outside/written");
        let daemon = marker("daemon");
        let script = format!(
            "echo unconfined > {}; ( setsid sh -c 'sleep 600; : {daemon}' & ) ; sleep 0.2; exit 3",
            outside.display()
        );
        let out = env
            .command(
                &[
                    "run",
                    "--execution-mode",
                    "workspace",
                    "--requested-by",
                    "test suite",
                    "--taskpack",
                    &taskpack,
                    "--audit",
                    &audit,
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
                &[],
            )
            .output()
            .unwrap();
        let ctx = format!("uid {}: {}", user.uid(), text(&out.stderr));
        assert_eq!(out.status.code(), Some(3), "{ctx}");
        assert!(
            text(&out.stderr).contains("UNSANDBOXED by request"),
            "{ctx}"
        );
        // Unsandboxed: a write outside the workspace and every writable root landed.
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "unconfined\n");
        // Supervised: the double-forked setsid daemon is gone.
        assert!(
            survivors(&daemon).is_empty(),
            "{ctx}: {:?}",
            survivors(&daemon)
        );

        let lines = env.audit_lines();
        assert_eq!(lines.len(), 2, "{ctx}");
        let decision = decision_of(&lines[0]);
        assert_eq!(decision["executionMode"]["mode"], "workspace");
        assert_eq!(decision["executionMode"]["sandboxed"], false);
        assert_eq!(
            decision["executionMode"]["reason"],
            "unsandboxed by request"
        );
        assert_eq!(decision["backend"], "direct-dedicated");
        assert_eq!(decision["plan"]["deniedReadPaths"], serde_json::json!([]));
        assert_eq!(lines[0]["input"]["executionMode"], "workspace");
        let who = &lines[0]["context"]["requestedBy"];
        assert_eq!(who["uid"], user.uid(), "{who}");
        assert_eq!(who["text"], "test suite");
        assert_eq!(
            lines[1]["outcome"]["executionMode"]["requestedBy"]["uid"],
            user.uid()
        );
        assert_eq!(lines[1]["outcome"]["treeEmpty"], true);

        // Budgets still apply.
        let out = env.run(&[
            "run",
            "--execution-mode",
            "workspace",
            "--timeout",
            "1s",
            "--audit",
            &audit,
            "--",
            "sleep",
            "30",
        ]);
        assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
        assert_eq!(env.audit_lines()[3]["outcome"]["endedBy"], "wall-clock");

        // Replay covers the unsandboxed decisions.
        let out = Command::new(PALISADE)
            .args(["replay", &audit])
            .env("PALISADE_CACHE_DIR", env.path("cache"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    }
}

#[test]
fn workspace_mode_forbidden_by_the_host_is_refused_and_nothing_runs() {
    let env = Env::new(User::Own);
    let config = env.config("host.yaml", "  allowWorkspaceMode: false\n");
    let config = config.to_str().unwrap();
    let marker = env.path("ws/launched");
    let audit = env.s("audit.jsonl");
    let out = env.run(&[
        "run",
        "--host-config",
        config,
        "--execution-mode",
        "workspace",
        "--audit",
        &audit,
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("error[EXECUTION_MODE_FORBIDDEN]"),
        "{}",
        text(&out.stderr)
    );
    assert!(!marker.exists());
    // The refusal is recorded (who asked included), with no outcome.
    let lines = env.audit_lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(decision_of(&lines[0])["code"], "EXECUTION_MODE_FORBIDDEN");
    assert_eq!(lines[0]["context"]["requestedBy"]["uid"], test_uid());

    let out = env.run(&[
        "decide",
        "--host-config",
        config,
        "--execution-mode",
        "workspace",
    ]);
    assert_eq!(out.status.code(), Some(4));
    // A sandboxed run is unaffected.
    let out = env.run(&["decide", "--host-config", config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // A per-user file cannot lift the system's prohibition; here the flag's file plays the
    // per-user part and no system file exists, so it is the user's to set.
    let allow = env.config("allow.yaml", "  allowWorkspaceMode: true\n");
    let out = env.run(&[
        "decide",
        "--host-config",
        allow.to_str().unwrap(),
        "--execution-mode",
        "workspace",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let decision: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decision["executionMode"]["permittedBy"], "host");
}

/// Processes whose command line carries `marker`.
fn survivors(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(marker)
        {
            found.push(format!("{name}: {}", String::from_utf8_lossy(&cmdline)));
        }
    }
    found
}
