//! The docker backend against a real daemon (`DOCKER_HOST`, e.g. from `.ci/dockerd.sh start`):
//! the probe and the image pin, exit statuses, budgets, and cleanup — after every run no
//! container, no process of the run and no container mount may be left, whether the command
//! exited, timed out, or the supervisor was SIGKILLed.
//!
//! Without a daemon every test here says so and passes, unless `PALISADE_REQUIRE_DOCKER=1`
//! (CI), which makes a missing daemon a failure. The escape battery (tests/escape.rs) attacks
//! the same backend.

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
#[path = "support/outcome_shape.rs"]
mod outcome_shape;
#[path = "support/reachable.rs"]
mod reachable;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use docker_image::TestImage;

/// Runs one at a time: the leftover checks look at the whole daemon.
static SERIAL: Mutex<()> = Mutex::new(());

struct Setup {
    _serial: MutexGuard<'static, ()>,
    image: TestImage,
    dir: tempfile::TempDir,
    palisade: PathBuf,
}

impl Setup {
    fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// The runtime profile file the runs use: the pinned image and the static bridge, which
    /// is also the container's seccomp stub (the observed filter).
    fn profiles(&self) -> PathBuf {
        self.dir.path().join("profiles.yaml")
    }

    /// The same image without `spec.egressBridge`: no network bridge, no observed filter.
    fn plain_profiles(&self) -> PathBuf {
        self.dir.path().join("plain-profiles.yaml")
    }

    fn taskpack(&self, network: &str) -> PathBuf {
        let path = self.dir.path().join(format!("taskpack-{network}.yaml"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {{name: docker-tests}}\nspec:\n  sandbox:\n    preferredBackends: [docker]\n    networkMode: {network}\n"
            ),
        )
        .unwrap();
        path
    }

    /// `palisade run` under docker with `extra` flags before `--`.
    fn run_command(&self, extra: &[&str], command: &[&str]) -> Command {
        self.run_command_with_profiles(&self.profiles(), extra, command)
    }

    /// [`Setup::run_command`] with another runtime profile file.
    fn run_command_with_profiles(
        &self,
        profiles: &Path,
        extra: &[&str],
        command: &[&str],
    ) -> Command {
        self.run_command_with(&self.taskpack("none"), profiles, extra, command)
    }

    /// [`Setup::run_command`] with another taskpack and runtime profile file.
    fn run_command_with(
        &self,
        taskpack: &Path,
        profiles: &Path,
        extra: &[&str],
        command: &[&str],
    ) -> Command {
        let mut cmd = Command::new(&self.palisade);
        cmd.arg("run")
            .arg("--taskpack")
            .arg(taskpack)
            .arg("--workspace")
            .arg(self.workspace())
            .arg("--runtime-profiles")
            .arg(profiles)
            .arg("--docker-socket")
            .arg(&self.image.socket)
            .arg("--no-cache")
            .args(extra)
            .arg("--")
            .args(command)
            .env_remove("DOCKER_HOST")
            .env("PALISADE_CACHE_DIR", self.dir.path().join("cache"))
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, extra: &[&str], command: &[&str]) -> Output {
        self.run_command(extra, command).output().unwrap()
    }
}

fn setup() -> Option<Setup> {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let image = match docker_image::ensure() {
        Ok(image) => image,
        Err(why) => {
            assert!(
                !docker_image::required(),
                "PALISADE_REQUIRE_DOCKER=1 but: {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let exe = std::env::current_exe().unwrap();
    let palisade = exe.parent().unwrap().parent().unwrap().join("palisade");
    assert!(
        palisade.exists(),
        "build the palisade binary first (cargo test --workspace builds it)"
    );
    // Some runs are as uid 65534: the directory must be reachable for that user too.
    let dir = tempfile::tempdir_in(reachable::reachable_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        "docker",
    ))
    .unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let setup = Setup {
        _serial: serial,
        image,
        dir,
        palisade,
    };
    setup.image.write_profile(&setup.plain_profiles(), &[]);
    let bridge = docker_image::static_bridge().unwrap();
    setup
        .image
        .write_profile_with_bridge(&setup.profiles(), &[], Some(&bridge));
    Some(setup)
}

/// The outcome record of a run's audit file: its second line (the decision is the first).
fn outcome_record(audit: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(audit).unwrap();
    serde_json::from_str(text.lines().nth(1).unwrap()).unwrap()
}

/// The docker probe `palisade doctor --json` reports with the runtime profile file `profiles`.
fn doctor_docker_probe(s: &Setup, profiles: &Path) -> serde_json::Value {
    let out = Command::new(&s.palisade)
        .args(["doctor", "--json", "--runtime-profiles"])
        .arg(profiles)
        .arg("--docker-socket")
        .arg(&s.image.socket)
        .env("PALISADE_CACHE_DIR", s.dir.path().join("cache"))
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", stderr(&out)));
    report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["backend"] == "docker")
        .unwrap()
        .clone()
}

/// Containers of palisade runs still on the daemon.
fn palisade_containers(image: &TestImage) -> Vec<String> {
    image
        .containers()
        .into_iter()
        .filter(|name| name.starts_with("palisade-"))
        .collect()
}

/// Mounts of containers (overlay roots, shm, …) on the host, as `/proc/self/mountinfo` lists
/// them: the daemon's data root is private to the test daemon's roots only by convention, so
/// count every overlay mount and compare before and after.
fn container_mounts() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|line| line.contains("/overlay2/") || line.contains("/containers/"))
        .count()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The outcome of a docker run keeps its shape (tests/support/outcome_shape.rs): the container's
/// account, its removal and limits, the observed filter, beside what every backend records.
#[test]
fn a_docker_run_keeps_its_outcome_shape() {
    let Some(s) = setup() else { return };
    let audit = s.dir.path().join("shape-audit.jsonl");
    let out = s.run(
        &["--memory", "64M", "--audit", audit.to_str().unwrap()],
        &["sh", "-c", "exit 3"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let outcome = outcome_record(&audit)["outcome"].clone();
    assert_eq!(outcome["mechanism"], "docker", "{outcome}");
    outcome_shape::assert_shape("docker-exit", &outcome);
}

#[test]
fn doctor_shows_docker_available_with_a_pinned_profile() {
    let Some(s) = setup() else { return };
    let docker = doctor_docker_probe(&s, &s.plain_profiles());
    assert_eq!(docker["available"], true, "{docker}");
    assert_eq!(
        docker["networkBridge"], false,
        "no bridge configured: {docker}"
    );
    assert_eq!(docker["capabilities"].as_array().unwrap().len(), 6);

    // The same image pinned to another ID: unavailable, and the reason says why.
    let wrong = s.dir.path().join("wrong.yaml");
    std::fs::write(
        &wrong,
        std::fs::read_to_string(s.profiles())
            .unwrap()
            .replace(&s.image.id, &format!("sha256:{}", "0".repeat(64))),
    )
    .unwrap();
    let docker = doctor_docker_probe(&s, &wrong);
    assert_eq!(docker["available"], false);
    assert!(
        docker["reason"].as_str().unwrap().contains("pins"),
        "{docker}"
    );
}

#[test]
fn runs_pass_the_status_through_and_leave_nothing() {
    let Some(s) = setup() else { return };
    let mounts = container_mounts();
    let out = s.run(&[], &["true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = s.run(&[], &["sh", "-c", "echo in-container; exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "in-container\n");
    let out = s.run(&[], &["no-such-command-here"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    // The workspace is writable, at its own path, and the command starts there.
    let out = s.run(&[], &["sh", "-c", "pwd > marker; id -u >> marker"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let marker = std::fs::read_to_string(s.workspace().join("marker")).unwrap();
    assert_eq!(
        marker,
        format!("{}\n{}\n", s.workspace().display(), escape_kit::test_uid())
    );
    assert_eq!(palisade_containers(&s.image), Vec::<String>::new());
    assert_eq!(container_mounts(), mounts);
}

#[test]
fn a_planted_secret_stays_outside_and_an_allowlisted_variable_arrives() {
    let Some(s) = setup() else { return };
    // Control: the way the command looks finds a variable where nothing filters it.
    let secret = format!("s3cr3t-{}", std::process::id());
    let control = Command::new("sh")
        .args(["-c", "tr '\\0' '\\n' < /proc/$$/environ"])
        .env("PALISADE_TEST_SECRET_TOKEN", &secret)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&control.stdout).contains(&secret));

    let config = s.dir.path().join("host.yaml");
    std::fs::write(
        &config,
        "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec:\n  environment:\n    allow: [LANG, PALISADE_ALLOWED]\n",
    )
    .unwrap();
    let audit = s.dir.path().join("env-audit.jsonl");
    let allowed = "intact: spaces, =;$ and 'quotes'";
    let out = s
        .run_command(
            &["--host-config", config.to_str().unwrap(), "--audit", audit.to_str().unwrap()],
            &[
                "sh",
                "-c",
                "tr '\\0' '\\n' < /proc/self/environ; echo ==; tr '\\0' '\\n' < /proc/1/environ; echo == end",
            ],
        )
        .env("PALISADE_TEST_SECRET_TOKEN", &secret)
        .env("AWS_SECRET_ACCESS_KEY", &secret)
        .env("PALISADE_ALLOWED", allowed)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}{stdout}", stderr(&out));
    assert!(stdout.contains("== end"), "{stdout}");
    assert!(!stdout.contains(&secret), "secret leaked: {stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l == format!("PALISADE_ALLOWED={allowed}")),
        "{stdout}"
    );
    let audit = std::fs::read_to_string(&audit).unwrap();
    assert!(
        !audit.contains(&secret) && !audit.contains(allowed),
        "{audit}"
    );
    let outcome: serde_json::Value = serde_json::from_str(audit.lines().nth(1).unwrap()).unwrap();
    let withheld = outcome["outcome"]["environment"]["withheld"].to_string();
    assert!(
        withheld.contains("PALISADE_TEST_SECRET_TOKEN")
            && withheld.contains("AWS_SECRET_ACCESS_KEY"),
        "{withheld}"
    );
    assert!(palisade_containers(&s.image).is_empty());
}

/// An HTTP server on the host's loopback that answers every request with `tag` and counts the
/// connections that reached it (the oracle: bytes that arrive where they must not are an escape).
struct Upstream {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl Upstream {
    fn start(ip: &str, tag: &'static str) -> Upstream {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&connections);
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{tag}",
                    tag.len()
                );
            }
        });
        Upstream { port, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

#[test]
fn filtered_egress_reaches_allowed_names_only_through_the_proxy() {
    let Some(s) = setup() else { return };
    let allowed = Upstream::start("127.0.0.2", "allowed-upstream");
    let denied = Upstream::start("127.0.0.3", "denied-upstream");
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    // Control: unconfined, the same wget reaches both upstreams directly.
    for (upstream, tag) in [(&allowed, "allowed-upstream"), (&denied, "denied-upstream")] {
        let ip = if tag.starts_with("allowed") {
            "127.0.0.2"
        } else {
            "127.0.0.3"
        };
        let out = Command::new(busybox)
            .args(["wget", "-q", "-O", "-", "-Y", "off"])
            .arg(format!("http://{ip}:{}/", upstream.port))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            tag,
            "control for {tag}"
        );
    }

    // Without a bridge the docker probe offers no domain filtering, and the run is refused.
    let taskpack = s.dir.path().join("taskpack-egress.yaml");
    std::fs::write(
        &taskpack,
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: docker-egress}\nspec:\n  sandbox:\n    preferredBackends: [docker]\n    allowedDomains: [allowed.test, 127.0.0.2]\n",
    )
    .unwrap();
    let resolve = [
        "--proxy-resolve",
        "allowed.test=127.0.0.2",
        "--proxy-resolve",
        "denied.test=127.0.0.3",
    ];
    let out = s
        .run_command_with(&taskpack, &s.plain_profiles(), &resolve, &["true"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("SANDBOX_CAPABILITY_INSUFFICIENT"),
        "{}",
        stderr(&out)
    );

    let bridged = s.profiles();
    let bridge = docker_image::static_bridge().unwrap();
    let docker = doctor_docker_probe(&s, &bridged);
    assert_eq!(docker["networkBridge"], true, "{docker}");
    // The host's own palisade is dynamically linked: an image need not have its libc.
    let dynamic = s.dir.path().join("dynamic-bridge.yaml");
    s.image
        .write_profile_with_bridge(&dynamic, &[], Some(&s.palisade));
    let docker = doctor_docker_probe(&s, &dynamic);
    assert_eq!(docker["networkBridge"], false, "{docker}");
    assert!(
        docker["limitations"]
            .to_string()
            .contains("dynamically linked"),
        "{docker}"
    );

    let script = format!(
        "wget -q -O - http://allowed.test:{a}/; echo \" allowed=$?\"; \
         wget -q -O - http://denied.test:{d}/; echo \" denied=$?\"; \
         wget -q -O - http://127.0.0.3:{d}/; echo \" proxied-ip=$?\"; \
         wget -q -O - -Y off http://127.0.0.2:{a}/; echo \" direct=$?\"; \
         wget -q -O - -Y off http://127.0.0.3:{d}/; echo \" direct-denied=$?\"",
        a = allowed.port,
        d = denied.port
    );
    // As root, and as uid 65534 in the socket's group (how most people use Docker), when the
    // test can become that user and the socket has such a group.
    let mut users = vec![("root", None)];
    if escape_kit::test_uid() == 0 {
        use std::os::unix::fs::MetadataExt;
        let gid = std::fs::metadata(&s.image.socket).unwrap().gid();
        if gid != 0 {
            users.push((
                "uid 65534 in the socket's group",
                Some(nobody_with(&s, vec![gid])),
            ));
        } else {
            eprintln!("the socket belongs to root's group: no unprivileged docker user to try");
        }
    }
    for (who, nobody) in users {
        let (allowed_before, denied_before) = (allowed.connections(), denied.connections());
        let home = match &nobody {
            Some(user) => user.home.clone(),
            None => s.dir.path().to_path_buf(),
        };
        let audit = home.join("egress-audit.jsonl");
        let mut extra = resolve.to_vec();
        extra.extend(["--audit", audit.to_str().unwrap()]);
        let mut command = s.run_command_with(&taskpack, &bridged, &extra, &["sh", "-c", &script]);
        if let Some(user) = &nobody {
            command = user.wrap(&command);
        }
        let out = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{who}: {}{stdout}",
            stderr(&out)
        );
        assert!(
            stdout.contains("allowed-upstream allowed=0"),
            "{who}: {stdout}"
        );
        for refused in ["denied", "proxied-ip", "direct", "direct-denied"] {
            assert!(
                !stdout.contains(&format!(" {refused}=0"))
                    && stdout.contains(&format!(" {refused}=")),
                "{who}: {refused}: {stdout}"
            );
        }
        assert!(!stdout.contains("denied-upstream"), "{who}: {stdout}");
        // The oracle: one connection reached the allowed upstream (the proxy's), none the
        // denied one.
        assert_eq!(allowed.connections() - allowed_before, 1, "{who}: {stdout}");
        assert_eq!(denied.connections() - denied_before, 0, "{who}: {stdout}");

        let outcome = outcome_record(&audit);
        let egress = &outcome["outcome"]["network"];
        assert!(
            egress["admitted"].as_str().unwrap().contains("container"),
            "{who}: {egress}"
        );
        assert_eq!(egress["bridgeProgram"], bridge.display().to_string());
        let verdicts: Vec<(String, String)> = egress["connections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["host"].as_str().unwrap_or_default().to_owned(),
                    c["verdict"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            verdicts,
            [
                ("allowed.test".to_owned(), "allowed".to_owned()),
                ("denied.test".to_owned(), "refused".to_owned()),
                ("127.0.0.3".to_owned(), "refused".to_owned())
            ],
            "{who}: {egress}"
        );
        // Both refusals are denials of the run, each naming the allowlist.
        let targets: Vec<&str> = outcome["outcome"]["denials"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["rule"] == "plan.network.allowlist" && d["observedBy"] == "proxy")
            .filter_map(|d| d["target"].as_str())
            .collect();
        assert!(
            targets.iter().any(|t| t.starts_with("denied.test:"))
                && targets.iter().any(|t| t.starts_with("127.0.0.3:")),
            "{who}: {}",
            outcome["outcome"]["denials"]
        );
        assert!(
            stderr(&out).contains("palisade: the sandbox refused"),
            "{who}"
        );
        // The bridge looks the command up in the image: a missing one is 127, as without it.
        let mut missing =
            s.run_command_with(&taskpack, &bridged, &resolve, &["no-such-command-here"]);
        if let Some(user) = &nobody {
            missing = user.wrap(&missing);
        }
        let out = missing.output().unwrap();
        assert_eq!(out.status.code(), Some(127), "{who}: {}", stderr(&out));
        assert!(palisade_containers(&s.image).is_empty());
        eprintln!("filtered egress under docker checked as {who}");
    }
}

/// uid 65534 (with `setpriv`, so the test must be root) with `groups` as its only
/// supplementary groups, and a home, cache and audit directory of its own. Opens the setup's
/// directory, workspace and files to that user.
struct Nobody {
    groups: Vec<u32>,
    home: PathBuf,
}

impl Nobody {
    /// `command` (a `palisade` invocation) as this user, with its own home and cache.
    fn wrap(&self, command: &Command) -> Command {
        let setpriv = escape_kit::User::Nobody.wrap_in_groups(&self.groups);
        let mut wrapped = Command::new(&setpriv[0]);
        wrapped
            .args(&setpriv[1..])
            .arg(command.get_program())
            .args(command.get_args());
        for (name, value) in command.get_envs() {
            match value {
                Some(value) => wrapped.env(name, value),
                None => wrapped.env_remove(name),
            };
        }
        wrapped
            .env_remove("XDG_CONFIG_HOME")
            .env("HOME", &self.home)
            .env("PALISADE_CACHE_DIR", self.home.join("cache"))
            .stdin(Stdio::null());
        wrapped
    }
}

fn nobody_with(s: &Setup, groups: Vec<u32>) -> Nobody {
    escape_kit::chmod(s.dir.path(), 0o755);
    escape_kit::chmod(&s.workspace(), 0o777);
    for entry in std::fs::read_dir(s.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            escape_kit::chmod(&path, 0o644);
        }
    }
    let home = s.dir.path().join("nobody-home");
    std::fs::create_dir_all(&home).unwrap();
    escape_kit::chown_tree(&home, escape_kit::User::Nobody);
    Nobody { groups, home }
}

#[test]
fn a_user_who_cannot_use_the_socket_is_refused_and_nothing_runs() {
    let Some(s) = setup() else { return };
    if escape_kit::test_uid() != 0 {
        eprintln!("skipped: becoming uid 65534 needs root");
        return;
    }
    // Control: that user cannot use the daemon's socket at all.
    let setpriv = escape_kit::User::Nobody.wrap();
    let control = Command::new(&setpriv[0])
        .args(&setpriv[1..])
        .args(["docker", "version"])
        .env(
            "DOCKER_HOST",
            format!("unix://{}", s.image.socket.display()),
        )
        .output()
        .unwrap();
    assert!(!control.status.success(), "uid 65534 can use the socket");

    let nobody = nobody_with(&s, Vec::new());
    let out = nobody
        .wrap(&s.run_command(&[], &["sh", "-c", "touch ran"]))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("error[SANDBOX_BACKEND_UNAVAILABLE]")
            && stderr(&out).contains("permission denied"),
        "{}",
        stderr(&out)
    );
    assert!(!s.workspace().join("ran").exists(), "the command ran");
    assert!(palisade_containers(&s.image).is_empty());
}

#[test]
fn unpinned_and_mismatched_images_are_refused() {
    let Some(s) = setup() else { return };
    let unpinned = s.dir.path().join("unpinned.yaml");
    std::fs::write(
        &unpinned,
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata: {{name: t}}\nspec:\n  runtimeProfiles:\n    - name: t\n      image: {}\n",
            s.image.tag
        ),
    )
    .unwrap();
    let out = s
        .run_command_with_profiles(&unpinned, &[], &["true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("DOCKER_IMAGE_UNPINNED"),
        "{}",
        stderr(&out)
    );

    let wrong = s.dir.path().join("wrong.yaml");
    std::fs::write(
        &wrong,
        std::fs::read_to_string(s.profiles())
            .unwrap()
            .replace(&s.image.id, &format!("sha256:{}", "0".repeat(64))),
    )
    .unwrap();
    let out = s
        .run_command_with_profiles(&wrong, &[], &["true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    // The probe already refuses the mismatched pin, so the engine finds no backend.
    assert!(
        stderr(&out).contains("SANDBOX_BACKEND_UNAVAILABLE") && stderr(&out).contains("pins"),
        "{}",
        stderr(&out)
    );
    assert_eq!(palisade_containers(&s.image), Vec::<String>::new());
}

#[test]
fn a_timeout_removes_the_container() {
    let Some(s) = setup() else { return };
    let started = Instant::now();
    // A duration no other test sleeps for: the check below looks at every process on the host.
    let out = s.run(&["--timeout", "2s"], &["sleep", "301"]);
    assert!(started.elapsed() < Duration::from_secs(60));
    // SIGTERM reaches `sleep` through docker-init: the status says a signal ended it.
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    // And Palisade says which budget did it.
    assert!(
        stderr(&out).contains("the wall-clock limit of 2000 ms ended the run"),
        "{}",
        stderr(&out)
    );
    assert_eq!(palisade_containers(&s.image), Vec::<String>::new());
    assert!(
        no_process_with("sleep 301"),
        "{:?}",
        processes_with("sleep 301")
    );
}

#[test]
fn the_process_budget_is_the_containers() {
    let Some(s) = setup() else { return };
    // 20 processes at most (plus docker-init): the 30th background sleep cannot start.
    let json = s.dir.path().join("process-budget.json");
    let out = s.run(
        &["--max-procs", "20", "--json", json.to_str().unwrap()],
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 30 ]; do sleep 5 & i=$((i+1)); done; echo started $i",
        ],
    );
    assert!(
        stderr(&out).contains("fork") || stderr(&out).contains("Resource temporarily unavailable"),
        "{}",
        stderr(&out)
    );
    assert_eq!(palisade_containers(&s.image), Vec::<String>::new());
    // The limit the container really had is recorded, and why it is not the budget.
    let outcome: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let enforcement = outcome["outcome"]["enforcement"].as_array().unwrap();
    assert!(
        enforcement.contains(&serde_json::json!({
            "budget": "processes", "by": "container", "applied": 21, "because": "docker-init"
        })),
        "{enforcement:?}"
    );
}

/// A memory budget reached inside the container: the kernel's out-of-memory killer acts in the
/// container's cgroup, and the run says which budget ended it, as the other backends do. Under
/// the budget, the same command is no denial.
#[test]
fn a_memory_budget_reached_inside_the_container_is_explained() {
    let Some(s) = setup() else { return };
    // As root, and as uid 65534 in the socket's group.
    let mut users = vec![None];
    if escape_kit::test_uid() == 0 {
        use std::os::unix::fs::MetadataExt;
        let gid = std::fs::metadata(&s.image.socket).unwrap().gid();
        if gid != 0 {
            users.push(Some(nobody_with(&s, vec![gid])));
        }
    }
    for user in &users {
        let who = if user.is_some() { "uid 65534" } else { "root" };
        let home = user.as_ref().map_or(s.dir.path(), |u| u.home.as_path());
        let dd = |block: &str, audit: &Path| {
            let bs = format!("bs={block}");
            let command = s.run_command(
                &["--memory", "32M", "--audit", audit.to_str().unwrap()],
                &["dd", "if=/dev/zero", "of=/dev/null", &bs, "count=1"],
            );
            match user {
                Some(nobody) => nobody.wrap(&command).output().unwrap(),
                None => { command }.output().unwrap(),
            }
        };
        // A 1 MiB buffer fits.
        let fits = home.join("fits.jsonl");
        let out = dd("1M", &fits);
        assert_eq!(out.status.code(), Some(0), "{who}: {}", stderr(&out));
        assert_eq!(
            outcome_record(&fits)["outcome"]["denials"]["events"],
            serde_json::json!([]),
            "{who}"
        );
        // dd fills a 64 MiB buffer: over the budget, the kernel kills it.
        let over = home.join("over.jsonl");
        let out = dd("64M", &over);
        assert_eq!(out.status.code(), Some(137), "{who}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("budget: the memory limit of 33554432 bytes ended the run"),
            "{who}: {}",
            stderr(&out)
        );
        let outcome = &outcome_record(&over)["outcome"];
        let events = outcome["denials"]["events"].as_array().unwrap();
        assert!(
            events.iter().any(|e| e["kind"] == "budget"
                && e["operation"] == "memory"
                && e["rule"] == "plan.budgets.memoryBytes"
                && e["limit"] == 33_554_432),
            "{who}: {outcome}"
        );
        assert_eq!(palisade_containers(&s.image), Vec::<String>::new());
    }
}

#[test]
fn a_sigkilled_supervisor_still_loses_its_container() {
    let Some(s) = setup() else { return };
    let marker = format!("palisade-docker-test-{}", std::process::id());
    let mut child = s
        .run_command(&[], &["sh", "-c", &format!("exec sleep 302 # {marker}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while palisade_containers(&s.image).is_empty() || no_process_with("sleep 302") {
        assert!(Instant::now() < deadline, "the container never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL: no cleanup code of palisade's runs
    child.wait().unwrap();
    // The detached reaper removes the container; on a loaded machine the daemon takes its time.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !palisade_containers(&s.image).is_empty() || !no_process_with("sleep 302") {
        assert!(
            Instant::now() < deadline,
            "left behind: containers {:?}, processes {:?}",
            palisade_containers(&s.image),
            processes_with("sleep 302")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The pid and command line of every process on the host with `needle` in its command line.
fn processes_with(needle: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline
                .contains(needle)
                .then(|| format!("{}: {cmdline}", entry.file_name().to_string_lossy()))
        })
        .collect()
}

/// Whether no process on the host has `needle` in its command line.
fn no_process_with(needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    !entries.flatten().any(|entry| {
        let path: &Path = &entry.path();
        std::fs::read(path.join("cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(needle)
            })
            .unwrap_or(false)
    })
}

#[test]
fn a_container_left_by_a_run_that_is_over_is_removed_by_the_next_run() {
    // A run killed while the daemon restarts can leave its container `Created` after its reaper
    // gave up. The next run of the same user removes it, and nothing of a live run's or another
    // user's.
    let Some(s) = setup() else { return };
    let uid = real_uid();
    let nanos = |ago: Duration| {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .saturating_sub(ago);
        format!("{:x}", since_epoch.as_nanos())
    };
    // A supervisor that is gone: a child that has exited and been reaped.
    let mut child = Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let over = format!("{}-{dead_pid}", nanos(Duration::from_secs(30)));
    // A supervisor that is alive: this test, which started before the id's time.
    let live = format!("{}-{}", nanos(Duration::ZERO), std::process::id());
    let other_user = format!("{}-{dead_pid}-other", nanos(Duration::from_secs(30)));
    let create = |id: &str, owner: u32| {
        let out = s
            .image
            .docker()
            .args(["create", "--name"])
            .arg(format!("palisade-{id}"))
            .arg("--label")
            .arg(format!("dev.palisade.run={id}"))
            .arg("--label")
            .arg(format!("dev.palisade.uid={owner}"))
            .args([&s.image.id, "true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "docker create: {}", stderr(&out));
    };
    create(&over, uid);
    create(&live, uid);
    create(&other_user, uid + 1);

    let out = s.run(&[], &["true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let left = palisade_containers(&s.image);
    // Remove what the test made before asserting, so a failure leaves nothing for the others.
    for id in [&over, &live, &other_user] {
        let _ = s
            .image
            .docker()
            .args(["rm", "-f", &format!("palisade-{id}")])
            .output();
    }
    assert!(!left.contains(&format!("palisade-{over}")), "{left:?}");
    assert!(left.contains(&format!("palisade-{live}")), "{left:?}");
    assert!(left.contains(&format!("palisade-{other_user}")), "{left:?}");
    assert!(
        stderr(&out).contains(&format!(
            "removed container palisade-{over} (created), left by run {over}, which is over"
        )),
        "{}",
        stderr(&out)
    );
}

/// The invoking user's real uid.
fn real_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap()
}

/// With the static stub (`spec.egressBridge`), what the container's filter refuses and the
/// connections the container cannot make are explained, as under bwrap: the stub installs the
/// observed filter, the runtime's profile leaves those refusals to it, and the supervisor
/// records each. Without the stub the run still refuses the same calls (the runtime's own
/// profile), records none, and the probe says so.
#[test]
fn refused_calls_and_connections_are_explained_with_the_static_stub() {
    let Some(s) = setup() else { return };
    // A host socket this test made, outside anything bound into the container.
    let host_socket = s.dir.path().join("host.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&host_socket).unwrap();
    // Control: it answers on the host.
    std::os::unix::net::UnixStream::connect(&host_socket).unwrap();
    let attack = docker_image::ATTACK_IN_IMAGE;
    // The attack binary prints one JSON line per attack with its verdict.
    let script = format!(
        "{attack} ipc.keyring-add --desc palisade-docker-test; \
         {attack} net.tcp-connect --addr 192.0.2.7 --port 443 --marker m; \
         {attack} ipc.unix-connect --path {} --marker m",
        host_socket.display()
    );
    // The container's own loopback: IP sockets are allowed, routes off it are not.
    let taskpack = s.taskpack("loopback-only");
    let limitations = doctor_docker_probe(&s, &s.profiles())["limitations"].to_string();
    assert!(!limitations.contains("syscalls the seccomp profile refuses are not observed"));
    let unobserved = doctor_docker_probe(&s, &s.plain_profiles())["limitations"].to_string();
    assert!(unobserved.contains("syscalls the seccomp profile refuses are not observed"));

    // As root, and as uid 65534 in the socket's group (how most people use Docker), when the
    // test can become that user and the socket has such a group.
    let mut users = vec![None];
    if escape_kit::test_uid() == 0 {
        use std::os::unix::fs::MetadataExt;
        let gid = std::fs::metadata(&s.image.socket).unwrap().gid();
        if gid == 0 {
            eprintln!("the socket belongs to root's group: no unprivileged docker user to try");
        } else {
            users.push(Some(nobody_with(&s, vec![gid])));
        }
    }
    let runs = users.iter().flat_map(|user| {
        [(s.profiles(), true), (s.plain_profiles(), false)].map(|run| (user, run))
    });
    for (user, (profiles, observed)) in runs {
        let who = if user.is_some() { "uid 65534" } else { "root" };
        let home = user.as_ref().map_or(s.dir.path(), |u| u.home.as_path());
        let audit = home.join(format!("audit-{observed}.jsonl"));
        let mut command = s.run_command_with(
            &taskpack,
            &profiles,
            &["--audit", audit.to_str().unwrap()],
            &["sh", "-c", &script],
        );
        if let Some(user) = user {
            command = user.wrap(&command);
        }
        let out = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{who}: {}", stderr(&out));
        // The command gets the same refusals either way.
        let verdicts: Vec<&str> = stdout
            .lines()
            .map(|line| {
                if line.contains(r#""verdict":"blocked""#) {
                    "blocked"
                } else {
                    line
                }
            })
            .collect();
        assert_eq!(verdicts, ["blocked"; 3], "{who}: {stdout}");
        for errno in [
            "Operation not permitted",
            "Network is unreachable",
            "No such file",
        ] {
            assert!(stdout.contains(errno), "{who}: {errno}: {stdout}");
        }
        let record = outcome_record(&audit);
        let outcome = &record["outcome"];
        let events = outcome["denials"]["events"].as_array().unwrap();
        let find = |operation: &str, target: Option<&str>| {
            events
                .iter()
                .find(|e| e["operation"] == operation && target.is_none_or(|t| e["target"] == t))
        };
        if !observed {
            assert!(events.is_empty(), "{who}: {outcome}");
            assert!(outcome.get("seccompObserver").is_none(), "{who}: {outcome}");
            continue;
        }
        assert_eq!(
            outcome["seccompObserver"]["listening"], true,
            "{who}: {outcome}"
        );
        let keyring = find("add_key", None).unwrap_or_else(|| panic!("{who}: {outcome}"));
        assert_eq!(keyring["kind"], "syscall", "{keyring}");
        let connect =
            find("connect", Some("192.0.2.7:443")).unwrap_or_else(|| panic!("{who}: {outcome}"));
        assert_eq!(connect["rule"], "plan.network.mode", "{connect}");
        assert!(
            connect["reason"].as_str().unwrap().contains("ENETUNREACH"),
            "{connect}"
        );
        let socket =
            find("connect", host_socket.to_str()).unwrap_or_else(|| panic!("{who}: {outcome}"));
        assert_eq!(socket["rule"], "builtin.maskedHostSockets", "{socket}");
        assert!(
            stderr(&out).contains("refused by `plan.network.mode`"),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(palisade_containers(&s.image), Vec::<String>::new());
}

/// Accesses to denied paths inside the container are refused by their observed masks and
/// recorded with the `deniedReadPaths` entry that denied them, as root and as uid 65534 in
/// the socket's group; an allowed access is no denial. The daemon binds the masks' nodes, so
/// the unprivileged user's mount needs `user_allow_other` in `/etc/fuse.conf` (`.ci/run` sets
/// it); without it the masks stay mute, and the outcome and stderr say why.
#[test]
fn accesses_to_denied_paths_are_explained_under_docker() {
    let Some(s) = setup() else { return };
    let ws = s.workspace();
    std::fs::create_dir_all(ws.join("private")).unwrap();
    std::fs::write(ws.join("private/key"), "SECRET-KEY").unwrap();
    std::fs::write(ws.join("token"), "SECRET-TOKEN").unwrap();
    std::fs::write(ws.join("README"), "readable\n").unwrap();
    let script = "cat private/key; ls private; cat token; echo x > token; cat README; echo end";
    // Outside, the reads succeed.
    let outside = Command::new("sh")
        .args(["-c", script])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&outside.stdout).contains("SECRET-KEY"));
    std::fs::write(ws.join("token"), "SECRET-TOKEN").unwrap();
    escape_kit::chmod(&ws.join("private"), 0o755);

    let mut users = vec![None];
    if escape_kit::test_uid() == 0 {
        use std::os::unix::fs::MetadataExt;
        let gid = std::fs::metadata(&s.image.socket).unwrap().gid();
        if gid != 0 {
            users.push(Some(nobody_with(&s, vec![gid])));
        }
    }
    let private = ws.join("private");
    let token = ws.join("token");
    let private = std::fs::canonicalize(&private).unwrap();
    let token = std::fs::canonicalize(&token).unwrap();
    for user in &users {
        let who = if user.is_some() { "uid 65534" } else { "root" };
        let home = user.as_ref().map_or(s.dir.path(), |u| u.home.as_path());
        let audit = home.join("audit-files.jsonl");
        let mut command = s.run_command(
            &[
                "--audit",
                audit.to_str().unwrap(),
                "--deny-read",
                private.to_str().unwrap(),
                "--deny-read",
                token.to_str().unwrap(),
            ],
            &["sh", "-c", script],
        );
        if let Some(user) = user {
            command = user.wrap(&command);
        }
        let out = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{who}: {err}");
        assert!(
            stdout.contains("readable") && stdout.contains("end"),
            "{who}: {stdout}"
        );
        assert!(
            !stdout.contains("SECRET") && !err.contains("SECRET"),
            "{who}: {stdout}"
        );
        assert_eq!(
            std::fs::read_to_string(&token).unwrap(),
            "SECRET-TOKEN",
            "{who}"
        );
        let record = outcome_record(&audit);
        let outcome = &record["outcome"];
        let shared = user.is_none() || palisade_shims::fusemask::user_allow_other();
        if !shared {
            assert_eq!(
                outcome["fileObserver"]["mounted"], false,
                "{who}: {outcome}"
            );
            assert!(err.contains("masked but not observed"), "{who}: {err}");
            continue;
        }
        assert_eq!(outcome["fileObserver"]["mounted"], true, "{who}: {outcome}");
        let events = outcome["denials"]["events"].as_array().unwrap();
        for (operation, target) in [
            ("read", private.join("key")),
            ("read", private.clone()),
            ("read", token.clone()),
            ("write", token.clone()),
        ] {
            let event = events
                .iter()
                .find(|e| e["operation"] == operation && e["target"] == target.to_str().unwrap())
                .unwrap_or_else(|| {
                    panic!("{who}: no {operation} of {}: {outcome}", target.display())
                });
            assert_eq!(event["kind"], "file", "{who}: {event}");
            assert!(
                event["rule"]
                    .as_str()
                    .unwrap()
                    .starts_with("plan.deniedReadPaths["),
                "{who}: {event}"
            );
        }
        assert_eq!(events.len(), 4, "{who}: {outcome}");
        assert!(err.contains("palisade:   file: read "), "{who}: {err}");
    }
    assert_eq!(palisade_containers(&s.image), Vec::<String>::new());
}

/// `--approve-with` under docker: the same host proxy asks the approver about a name outside
/// the allowlist for a container's connection. A `once` answer lets the container's request
/// through to the upstream; a name the approver denies reaches nothing; both answers are in
/// the outcome.
#[test]
fn approvals_apply_to_a_containers_connections() {
    let Some(s) = setup() else { return };
    let upstream = Upstream::start("127.0.0.2", "approved-upstream");
    let taskpack = s.dir.path().join("taskpack-approvals.yaml");
    // Only the upstream's address is listed (so loopback can be reached at all); the names
    // are the approver's to allow.
    std::fs::write(
        &taskpack,
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: docker-approvals}\nspec:\n  sandbox:\n    preferredBackends: [docker]\n    allowedDomains: [127.0.0.2]\n",
    )
    .unwrap();
    let approver = s.dir.path().join("approver.sh");
    std::fs::write(
        &approver,
        "#!/bin/sh\nread -r request\ncase \"$request\" in *'\"host\":\"ask.test\"'*) echo once ;; *) echo deny ;; esac\n",
    )
    .unwrap();
    escape_kit::chmod(&approver, 0o755);
    let audit = s.dir.path().join("approvals-audit.jsonl");
    let script = format!(
        "wget -q -O - http://ask.test:{p}/; echo \" asked=$?\"; \
         wget -q -O - http://refused.test:{p}/; echo \" refused=$?\"",
        p = upstream.port
    );
    let out = s
        .run_command_with(
            &taskpack,
            &s.profiles(),
            &[
                "--proxy-resolve",
                "ask.test=127.0.0.2",
                "--proxy-resolve",
                "refused.test=127.0.0.2",
                "--approve-with",
                approver.to_str().unwrap(),
                "--audit",
                audit.to_str().unwrap(),
            ],
            &["sh", "-c", &script],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}{stdout}", stderr(&out));
    assert!(
        stdout.contains("approved-upstream asked=0"),
        "{stdout}{}",
        stderr(&out)
    );
    assert!(
        stdout.contains(" refused=") && !stdout.contains(" refused=0"),
        "{stdout}"
    );
    assert_eq!(
        upstream.connections(),
        1,
        "only the approved request arrives"
    );
    let outcome = outcome_record(&audit);
    let answers: Vec<(String, String)> = outcome["outcome"]["network"]["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["host"].as_str().unwrap().to_owned(),
                a["answer"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        [
            ("ask.test".to_owned(), "once".to_owned()),
            ("refused.test".to_owned(), "deny".to_owned())
        ]
    );
    assert!(
        outcome["outcome"]["network"]["admitted"]
            .as_str()
            .unwrap()
            .contains("container")
    );
    assert!(palisade_containers(&s.image).is_empty());
}

/// A host loopback port below 1024 — which bwrap's unprivileged bridge cannot listen for, so
/// the engine leaves bwrap for docker (corpus: `privileged-host-ports-are-beyond-the-bwrap-
/// bridge`) — is forwarded into the container: a server this test starts on the host's
/// 127.0.0.1:81 answers a command inside, and an unlisted port beside it does not.
#[test]
fn a_privileged_host_port_is_forwarded_into_the_container() {
    let Some(s) = setup() else { return };
    // Port 81: below 1024, and nothing usually serves it. Binding it needs root (CI runs the
    // tests as root); elsewhere the test says why it cannot run.
    let listener = match TcpListener::bind("127.0.0.1:81") {
        Ok(listener) => listener,
        Err(e) => {
            assert!(
                !docker_image::required() || real_uid() != 0,
                "cannot listen on 127.0.0.1:81 as root: {e}"
            );
            eprintln!("skipped: cannot listen on 127.0.0.1:81: {e}");
            return;
        }
    };
    let served = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&served);
    std::thread::spawn(move || {
        // A banner on accept, as the attack binary's `net.tcp-connect` reads it.
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(b"privileged-port\n");
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let taskpack = s.dir.path().join("taskpack-port-81.yaml");
    std::fs::write(
        &taskpack,
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: docker-tests}\nspec:\n  sandbox:\n    preferredBackends: [linux-bwrap, docker]\n    networkMode: loopback-only\n    loopbackPorts: [81]\n",
    )
    .unwrap();
    let audit = s.dir.path().join("port-81-audit.jsonl");
    let out = s
        .run_command_with(
            &taskpack,
            &s.profiles(),
            &["--audit", audit.to_str().unwrap()],
            &[
                "sh",
                "-c",
                &format!(
                    "{attack} net.tcp-connect --addr 127.0.0.1 --port 81 --marker privileged-port; \
                     {attack} net.tcp-connect --addr 127.0.0.1 --port 82 --marker privileged-port",
                    attack = docker_image::ATTACK_IN_IMAGE
                ),
            ],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}{stdout}", stderr(&out));
    let verdicts: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    assert_eq!(verdicts.len(), 2, "{stdout}{}", stderr(&out));
    assert_eq!(verdicts[0]["verdict"], "succeeded", "{stdout}");
    assert_eq!(
        verdicts[1]["verdict"], "blocked",
        "an unlisted port: {stdout}"
    );
    assert!(served.load(Ordering::SeqCst) >= 1);
    // The decision chose docker, and says why not bwrap.
    let decision: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&audit)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let output: serde_json::Value =
        serde_json::from_str(decision["output"].as_str().unwrap()).unwrap();
    assert_eq!(output["backend"], "docker", "{output}");
    assert!(
        output["trace"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("below 1024"),
        "{output}"
    );
}
