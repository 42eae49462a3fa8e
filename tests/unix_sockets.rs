//! Host Unix sockets by explicit allowance (`--allow-unix-socket`, `allowedUnixSockets`),
//! attacked from inside `palisade run`, as root and as an unprivileged user.
//!
//! The test binds its own listening sockets: `agent.sock` and its neighbour `neighbour.sock` in
//! one directory of its own, and `tmp-agent.sock` under a directory of its own in `/tmp` (which
//! the sandbox replaces with a private tmpfs). Each answers every connection with a banner
//! carrying a fresh marker, which is the oracle: the attack binary's `ipc.unix-connect` reports
//! `succeeded` only when it read that banner.
//!
//! Each connection is first shown to work unconfined (the same binary as the same user, outside
//! any sandbox), then inside: without an allowance every socket is out of reach; with one, the
//! allowed sockets are reachable at their paths and the neighbour stays masked. A socket named
//! like Docker's (`docker.sock`, the test's own, not the daemon's) is refused before anything
//! runs, unless the host configuration allows it. `ssh-add -l` against a real `ssh-agent` shows
//! `SSH_AUTH_SOCK` passing with its socket, and withheld without it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step should fail the test loudly"
)]

#[path = "support/docker_image.rs"]
mod docker_image;
#[path = "support/escape_kit.rs"]
mod escape_kit;
#[path = "support/reachable.rs"]
mod reachable;

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use escape_kit::{Env, User};

/// A listening socket of the test's own: every connection gets `banner\n`.
struct Listener {
    path: PathBuf,
}

impl Listener {
    fn start(path: PathBuf, banner: String) -> Listener {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        // Any user may connect: the sandbox, not the socket's mode, is what is tested.
        escape_kit::chmod(&path, 0o666);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = writeln!(stream, "{banner}");
            }
        });
        Listener { path }
    }

    fn arg(&self) -> String {
        self.path.display().to_string()
    }
}

/// The attack binary's one verdict for a connect to `path`, run through `prefix` (nothing,
/// or `palisade run … --`).
fn connect_argv(attack: &Path, path: &Path, marker: &str) -> Vec<String> {
    vec![
        attack.display().to_string(),
        "ipc.unix-connect".into(),
        "--path".into(),
        path.display().to_string(),
        "--marker".into(),
        marker.into(),
    ]
}

fn run_as(
    user: User,
    groups: &[u32],
    argv: &[String],
    env: &[(String, String)],
    cwd: &Path,
) -> Output {
    let mut full = user.wrap_in_groups(groups);
    full.extend(argv.iter().cloned());
    Command::new(&full[0])
        .args(&full[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The verdicts (`succeeded`, `blocked`, …) of the attack lines in `stdout`, in order.
fn verdicts(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|v| v["verdict"].as_str().map(str::to_owned))
        .collect()
}

fn summary(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Everything one user's pass needs.
struct Pass {
    env: Env,
    user: User,
    palisade: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    audit: PathBuf,
    marker: String,
    agent: Listener,
    neighbour: Listener,
    tmp_agent: Listener,
    docker_named: Listener,
    _tmp_dir: tempfile::TempDir,
}

impl Pass {
    fn new(user: User) -> Pass {
        let env = Env::new(
            user,
            PathBuf::from(env!("CARGO_BIN_EXE_palisade-attack")),
            escape_kit::palisade_binary(),
        );
        let Some(palisade) = env.palisade.clone() else {
            panic!("no palisade binary: {:?}", env.palisade_missing);
        };
        let base = env.base.path().to_path_buf();
        let ws = base.join("ws");
        let home = base.join("home");
        let sockets = base.join("sockets");
        let logs = base.join("logs");
        for dir in [&ws, &home, &sockets, &logs] {
            std::fs::create_dir(dir).unwrap();
            escape_kit::chmod(dir, 0o755);
        }
        for dir in [&ws, &home, &logs] {
            escape_kit::chown_tree(dir, user);
        }
        let tmp_dir = tempfile::Builder::new()
            .prefix("palisade-sockets-")
            .tempdir_in("/tmp")
            .unwrap();
        escape_kit::chmod(tmp_dir.path(), 0o755);
        let marker = env.marker();
        let listen = |path: PathBuf, name: &str| Listener::start(path, format!("{marker} {name}"));
        Pass {
            agent: listen(sockets.join("agent.sock"), "agent"),
            neighbour: listen(sockets.join("neighbour.sock"), "neighbour"),
            tmp_agent: listen(tmp_dir.path().join("tmp-agent.sock"), "tmp-agent"),
            docker_named: listen(sockets.join("docker.sock"), "docker-named"),
            _tmp_dir: tmp_dir,
            audit: logs.join("audit.jsonl"),
            user,
            palisade,
            ws,
            home,
            marker,
            env,
        }
    }

    fn run_env(&self) -> Vec<(String, String)> {
        vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOME".into(), self.home.display().to_string()),
            ("LANG".into(), "C.UTF-8".into()),
            (
                "PALISADE_CACHE_DIR".into(),
                self.env.cache.display().to_string(),
            ),
        ]
    }

    /// `palisade run <flags> -- /bin/sh -c <script>` as this pass's user.
    fn palisade_run(&self, flags: &[String], script: &str) -> Output {
        self.palisade_run_env(flags, script, &[], &[])
    }

    fn palisade_run_env(
        &self,
        flags: &[String],
        script: &str,
        extra_env: &[(String, String)],
        groups: &[u32],
    ) -> Output {
        let mut argv = vec![
            self.palisade.display().to_string(),
            "run".into(),
            "--workspace".into(),
            self.ws.display().to_string(),
            "--audit".into(),
            self.audit.display().to_string(),
        ];
        argv.extend(flags.iter().cloned());
        argv.extend(["--", "/bin/sh", "-c", script].map(String::from));
        let mut env = self.run_env();
        env.extend(extra_env.iter().cloned());
        run_as(self.user, groups, &argv, &env, &self.ws)
    }

    /// A shell script connecting to each socket in turn with the attack binary at `attack`.
    fn connect_script(&self, attack: &Path, sockets: &[&Listener]) -> String {
        sockets
            .iter()
            .map(|socket| {
                connect_argv(attack, &socket.path, &self.marker)
                    .iter()
                    .map(|arg| format!("'{arg}'"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn allow(sockets: &[&Listener]) -> Vec<String> {
        sockets
            .iter()
            .flat_map(|s| ["--allow-unix-socket".to_owned(), s.arg()])
            .collect()
    }

    /// The engine's output of the last decision record in the audit file.
    fn last_decision(&self) -> serde_json::Value {
        std::fs::read_to_string(&self.audit)
            .unwrap()
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|record| match record.get("output") {
                Some(serde_json::Value::String(json)) => serde_json::from_str(json).ok(),
                Some(output) => Some(output.clone()),
                None => None,
            })
            .expect("a decision in the audit file")
    }
}

/// bwrap: the control outside, nothing reachable inside by default, exactly the allowed ones
/// with an allowance; Landlock refused; a Docker-named socket refused unless the host allows it.
fn bwrap_pass(user: User) {
    let pass = Pass::new(user);
    let attack = pass.env.attack.clone();
    let all = [&pass.agent, &pass.neighbour, &pass.tmp_agent];

    // The attack works where it should: outside, as the same user, every socket answers.
    let script = pass.connect_script(&attack, &all);
    let outside = run_as(
        user,
        &[],
        &["/bin/sh".into(), "-c".into(), script.clone()],
        &pass.run_env(),
        &pass.ws,
    );
    assert_eq!(
        verdicts(&text(&outside.stdout)),
        ["succeeded"; 3],
        "outside: {}",
        summary(&outside)
    );

    // Inside, without an allowance: none.
    let bwrap = ["--backend".to_owned(), "linux-bwrap".to_owned()];
    let closed = pass.palisade_run(&bwrap, &script);
    assert_eq!(closed.status.code(), Some(0), "{}", summary(&closed));
    assert_eq!(
        verdicts(&text(&closed.stdout)),
        ["blocked"; 3],
        "no allowance: {}",
        summary(&closed)
    );

    // With the agent (beside the neighbour) and the one under /tmp allowed: those two only.
    let mut flags = bwrap.to_vec();
    flags.extend(Pass::allow(&[&pass.agent, &pass.tmp_agent]));
    let open = pass.palisade_run(&flags, &script);
    assert_eq!(open.status.code(), Some(0), "{}", summary(&open));
    assert_eq!(
        verdicts(&text(&open.stdout)),
        ["succeeded", "blocked", "succeeded"],
        "allowed agent and tmp-agent: {}",
        summary(&open)
    );
    let stderr = text(&open.stderr);
    assert!(
        stderr.contains("host Unix sockets reachable by allowance:")
            && stderr.contains(&pass.agent.arg()),
        "{stderr}"
    );
    let decision = pass.last_decision();
    let granted: Vec<&str> = decision
        .pointer("/plan/unixSockets")
        .and_then(|v| v.as_array())
        .unwrap()
        .iter()
        .filter_map(|s| s["path"].as_str())
        .collect();
    let mut expected = vec![pass.agent.arg(), pass.tmp_agent.arg()];
    expected.sort();
    assert_eq!(granted, expected, "{decision}");

    // Landlock cannot let one socket through: refused, nothing runs.
    let mut landlock = vec!["--backend".to_owned(), "linux-landlock".to_owned()];
    landlock.extend(Pass::allow(&[&pass.agent]));
    let refused = pass.palisade_run(&landlock, &script);
    assert_ne!(refused.status.code(), Some(0), "{}", summary(&refused));
    assert!(
        text(&refused.stderr).contains("SANDBOX_CAPABILITY_INSUFFICIENT"),
        "{}",
        summary(&refused)
    );
    assert!(verdicts(&text(&refused.stdout)).is_empty());

    // A socket named like Docker's grants root: refused by default, before anything runs.
    let docker_script = pass.connect_script(&attack, &[&pass.docker_named]);
    let mut docker_flags = bwrap.to_vec();
    docker_flags.extend(Pass::allow(&[&pass.docker_named]));
    let forbidden = pass.palisade_run(&docker_flags, &docker_script);
    assert!(
        text(&forbidden.stderr).contains("SANDBOX_UNIX_SOCKET_REFUSED"),
        "{}",
        summary(&forbidden)
    );
    assert!(verdicts(&text(&forbidden.stdout)).is_empty());
    // The host configuration allows it by path: reachable, and said loudly.
    let config = pass.env.base.path().join("host.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec:\n  allowRootGrantingSockets: [{}]\n",
            pass.docker_named.arg()
        ),
    )
    .unwrap();
    escape_kit::chmod(&config, 0o644);
    docker_flags.extend(["--host-config".to_owned(), config.display().to_string()]);
    let allowed = pass.palisade_run(&docker_flags, &docker_script);
    assert_eq!(
        verdicts(&text(&allowed.stdout)),
        ["succeeded"],
        "{}",
        summary(&allowed)
    );
    assert!(
        text(&allowed.stderr).contains("GRANTS ROOT"),
        "{}",
        summary(&allowed)
    );
}

#[test]
fn allowed_sockets_under_bwrap_as_root() {
    match escape_kit::root_user() {
        Some(user) => bwrap_pass(user),
        None => eprintln!("skipped: the root pass needs root"),
    }
}

#[test]
fn allowed_sockets_under_bwrap_unprivileged() {
    bwrap_pass(escape_kit::unprivileged_user());
}

/// A real SSH agent: `ssh-add -l` inside lists the key only when the agent's socket is allowed
/// (which also passes `SSH_AUTH_SOCK`); without it the variable is withheld and no agent is
/// reachable, even when the command names the socket itself.
fn ssh_agent_pass(user: User) {
    for program in ["ssh-agent", "ssh-add", "ssh-keygen"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            assert!(
                std::env::var_os("PALISADE_REQUIRE_SSHD").is_none(),
                "PALISADE_REQUIRE_SSHD=1 but {program} is missing"
            );
            eprintln!("skipped: {program} is not installed");
            return;
        }
    }
    let pass = Pass::new(user);
    let agent_dir = pass.env.base.path().join("agent");
    std::fs::create_dir(&agent_dir).unwrap();
    escape_kit::chown_tree(&agent_dir, user);
    let socket = agent_dir.join("agent.sock");
    let key = agent_dir.join("id");
    let env = pass.run_env();
    let sh = |script: &str| {
        run_as(
            user,
            &[],
            &["/bin/sh".into(), "-c".into(), script.to_owned()],
            &env,
            &agent_dir,
        )
    };
    // The agent runs as the user (ssh-agent serves only its own uid, and root).
    let mut agent = {
        let mut full = user.wrap();
        full.extend(["ssh-agent", "-D", "-a"].map(String::from));
        full.push(socket.display().to_string());
        Command::new(&full[0])
            .args(&full[1..])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !socket.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let add = sh(&format!(
        "ssh-keygen -q -t ed25519 -N '' -C palisade-test -f '{k}' && SSH_AUTH_SOCK='{s}' ssh-add -q '{k}' && SSH_AUTH_SOCK='{s}' ssh-add -l",
        k = key.display(),
        s = socket.display()
    ));
    assert!(add.status.success(), "outside: {}", summary(&add));
    let fingerprint = text(&add.stdout);
    assert!(fingerprint.contains("palisade-test"), "{fingerprint}");

    let agent_env = [("SSH_AUTH_SOCK".to_owned(), socket.display().to_string())];
    let bwrap = ["--backend".to_owned(), "linux-bwrap".to_owned()];
    // Allowed: the agent answers, with the key, through the variable Palisade passed.
    let mut flags = bwrap.to_vec();
    flags.extend([
        "--allow-unix-socket".to_owned(),
        socket.display().to_string(),
    ]);
    let inside = pass.palisade_run_env(&flags, "ssh-add -l", &agent_env, &[]);
    assert_eq!(
        inside.status.code(),
        Some(0),
        "allowed: {}",
        summary(&inside)
    );
    assert!(
        text(&inside.stdout).contains("palisade-test"),
        "{}",
        summary(&inside)
    );
    assert!(
        text(&inside.stderr).contains("SSH_AUTH_SOCK passes"),
        "{}",
        summary(&inside)
    );
    // Not allowed: the variable is withheld, and naming the socket by hand reaches nothing.
    let script = format!(
        "echo \"var=${{SSH_AUTH_SOCK:-unset}}\"; SSH_AUTH_SOCK='{}' ssh-add -l; echo \"status=$?\"",
        socket.display()
    );
    let closed = pass.palisade_run_env(&bwrap, &script, &agent_env, &[]);
    let out = text(&closed.stdout);
    assert!(out.contains("var=unset"), "{}", summary(&closed));
    // ssh-add: 2 = no agent could be reached (1 would be an agent without keys).
    assert!(out.contains("status=2"), "{}", summary(&closed));
    assert!(!out.contains("palisade-test"), "{}", summary(&closed));

    let _ = agent.kill();
    let _ = agent.wait();
}

#[test]
fn ssh_agent_as_root() {
    match escape_kit::root_user() {
        Some(user) => ssh_agent_pass(user),
        None => eprintln!("skipped: the root pass needs root"),
    }
}

#[test]
fn ssh_agent_unprivileged() {
    ssh_agent_pass(escape_kit::unprivileged_user());
}

/// Docker binds the allowed socket into the container; the neighbour is not there.
#[test]
fn allowed_sockets_under_docker() {
    let image = match docker_image::ensure() {
        Ok(image) => image,
        Err(why) => {
            assert!(
                !docker_image::required(),
                "PALISADE_REQUIRE_DOCKER=1 but: {why}"
            );
            eprintln!("skipped: {why}");
            return;
        }
    };
    let Some(user) = escape_kit::root_user() else {
        eprintln!("skipped: the docker pass runs as root");
        return;
    };
    let pass = Pass::new(user);
    let profiles = pass.env.base.path().join("profiles.yaml");
    image.write_profile(&profiles, &[]);
    let attack = PathBuf::from(docker_image::ATTACK_IN_IMAGE);
    let script = pass.connect_script(&attack, &[&pass.agent, &pass.neighbour, &pass.tmp_agent]);
    let mut flags = vec![
        "--backend".to_owned(),
        "docker".to_owned(),
        "--runtime-profiles".to_owned(),
        profiles.display().to_string(),
        "--docker-socket".to_owned(),
        image.socket.display().to_string(),
    ];
    let closed = pass.palisade_run(&flags, &script);
    assert_eq!(
        verdicts(&text(&closed.stdout)),
        ["blocked"; 3],
        "no allowance: {}",
        summary(&closed)
    );
    flags.extend(Pass::allow(&[&pass.agent, &pass.tmp_agent]));
    let open = pass.palisade_run(&flags, &script);
    assert_eq!(
        verdicts(&text(&open.stdout)),
        ["succeeded", "blocked", "succeeded"],
        "allowed agent and tmp-agent: {}",
        summary(&open)
    );
    assert!(image.containers().is_empty(), "a container was left behind");
}
