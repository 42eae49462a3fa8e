//! Host probes, for real on this machine and against fakes: a hung or refusing `bwrap`, a
//! Docker socket that never answers, a fake daemon, and the probe cache.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use palisade::probe::{CACHE_FILE_NAME, ProbeOptions, ProbeSet, probe_all};
use palisade_engine::model::{Backend, BackendProbe, Capability, NetworkMode};

fn probe_of(set: &ProbeSet, backend: Backend) -> &BackendProbe {
    set.probes.iter().find(|p| p.backend == backend).unwrap()
}

/// Writes an executable script (atomically: no half-written file is ever executable).
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    let temp = dir.join(format!(".{name}.tmp"));
    fs::write(&temp, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&temp, fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(&temp, &path).unwrap();
    path
}

/// A fake `bwrap` that answers `--version` and accepts any trial.
fn working_fake_bwrap(dir: &Path) -> PathBuf {
    script(
        dir,
        "bwrap",
        r#"if [ "$1" = --version ]; then echo "bubblewrap 9.9.9"; fi; exit 0"#,
    )
}

/// The defaults, with the palisade binary as the executable the Landlock probe trials (this
/// test binary has no `__sandbox-proc-trial`).
fn options() -> ProbeOptions {
    ProbeOptions {
        palisade_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_palisade"))),
        ..ProbeOptions::default()
    }
}

/// Options that keep tests off the host's real docker socket and cache.
fn isolated(dir: &Path) -> ProbeOptions {
    ProbeOptions {
        docker_socket: Some(dir.join("no-docker.sock")),
        ..options()
    }
}

/// The Landlock probe trusts its `/proc` trial only: an executable that does not run it (here
/// `true`, which prints nothing) leaves the backend unavailable, never available on a guess.
#[test]
fn landlock_is_unavailable_when_the_proc_trial_does_not_run() {
    let set = probe_all(&ProbeOptions {
        palisade_exe: Some(PathBuf::from("/bin/true")),
        ..options()
    });
    let landlock = probe_of(&set, Backend::LinuxLandlock);
    assert_unavailable_and_empty(landlock);
    assert!(
        landlock
            .reason
            .starts_with("the trial of the sandbox's namespaces failed: "),
        "{}",
        landlock.reason
    );
}

fn assert_unavailable_and_empty(probe: &BackendProbe) {
    assert!(!probe.available, "{probe:?}");
    assert!(probe.capabilities.is_empty(), "{probe:?}");
    assert!(probe.network_modes.is_empty(), "{probe:?}");
}

#[test]
fn real_probes_on_this_machine() {
    let set = probe_all(&options());
    assert!(!set.from_cache);
    let order: Vec<Backend> = set.probes.iter().map(|p| p.backend).collect();
    assert_eq!(order, Backend::ALL.to_vec());

    let bwrap = probe_of(&set, Backend::LinuxBwrap);
    assert!(bwrap.available, "{bwrap:?}");
    assert_eq!(bwrap.capabilities, Capability::ALL.to_vec());
    assert_eq!(bwrap.network_modes, NetworkMode::ALL.to_vec());
    // The filtering proxy and its bridge ship with Palisade; the private netns is the trial's.
    assert!(bwrap.network_bridge);
    assert!(
        bwrap.version.starts_with("bubblewrap "),
        "{}",
        bwrap.version
    );

    let landlock = probe_of(&set, Backend::LinuxLandlock);
    assert!(landlock.available, "{landlock:?}");
    assert_eq!(
        landlock.capabilities,
        vec![
            Capability::FilesystemReadContainment,
            Capability::FilesystemWriteContainment,
            Capability::NetworkIsolation,
            Capability::ProcessTreeCleanup,
        ]
    );
    assert_eq!(
        landlock.network_modes,
        vec![NetworkMode::None, NetworkMode::AllowOutbound]
    );
    assert!(
        landlock.version.starts_with("landlock abi "),
        "{}",
        landlock.version
    );
    assert!(
        landlock
            .limitations
            .iter()
            .any(|l| l.contains("do not exist yet"))
    );
    assert!(
        landlock
            .limitations
            .iter()
            .any(|l| l.contains("allow-listing"))
    );
    // The `/proc` trial ran and one line says which `/proc` a sandbox gets here.
    assert!(
        landlock.landlock_proc.is_some()
            && landlock
                .limitations
                .iter()
                .any(|l| l.starts_with("/proc is the ")),
        "{:?}",
        landlock.limitations
    );

    let seatbelt = probe_of(&set, Backend::MacosSeatbelt);
    assert_unavailable_and_empty(seatbelt);
    assert_eq!(seatbelt.reason, "seatbelt needs macos");

    let direct = probe_of(&set, Backend::DirectDedicated);
    assert!(direct.available);
    assert_eq!(direct.reason, "present; selectable only by host opt-in");
    assert_eq!(direct.capabilities, vec![Capability::ProcessTreeCleanup]);
    assert_eq!(direct.network_modes, vec![NetworkMode::AllowOutbound]);
    assert_eq!(
        direct.limitations,
        vec!["no filesystem masks", "no network isolation"]
    );

    // No image is configured, so docker is unavailable whether or not a daemon runs here.
    let docker = probe_of(&set, Backend::Docker);
    assert_unavailable_and_empty(docker);
    let known = [
        "docker cli not installed",
        "docker daemon not answering at `",
        "no docker image configured",
        "docker host `",
    ];
    assert!(
        known.iter().any(|k| docker.reason.starts_with(k)),
        "{}",
        docker.reason
    );
}

#[test]
fn docker_with_an_image_configured_reports_honestly() {
    let set = probe_all(&ProbeOptions {
        docker_image: Some("palisade-test-image:never-built".to_owned()),
        ..options()
    });
    let docker = probe_of(&set, Backend::Docker);
    if docker.available {
        assert_eq!(docker.capabilities, Capability::ALL.to_vec());
    } else {
        assert_unavailable_and_empty(docker);
        let known = [
            "docker cli not installed",
            "docker daemon not answering at `",
            "image `palisade-test-image:never-built` not present",
            "docker host `",
        ];
        assert!(
            known.iter().any(|k| docker.reason.starts_with(k)),
            "{}",
            docker.reason
        );
    }
}

#[test]
fn hung_bwrap_times_out_and_its_children_die() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("sleep.pid");
    script(
        dir.path(),
        "bwrap",
        &format!("sleep 1000 &\necho $! > {}\nwait", pid_file.display()),
    );
    let timeout = Duration::from_millis(500);
    let start = Instant::now();
    let set = probe_all(&ProbeOptions {
        search_path: Some(dir.path().as_os_str().to_owned()),
        timeout,
        ..isolated(dir.path())
    });
    let elapsed = start.elapsed();
    let bwrap = probe_of(&set, Backend::LinuxBwrap);
    assert_unavailable_and_empty(bwrap);
    assert_eq!(bwrap.reason, "timed out after 500 ms");
    assert!(
        elapsed < timeout + Duration::from_millis(1500),
        "{elapsed:?}"
    );

    // The script's own child was killed with it (its process group), not left behind.
    let pid = fs::read_to_string(&pid_file).unwrap();
    let stat = PathBuf::from(format!("/proc/{}/stat", pid.trim()));
    let gone_or_zombie = || match fs::read_to_string(&stat) {
        Err(_) => true,
        Ok(text) => text
            .rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('Z'),
    };
    let until = Instant::now() + Duration::from_secs(2);
    while !gone_or_zombie() && Instant::now() < until {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(gone_or_zombie(), "sleep {} survived the probe", pid.trim());
}

#[test]
fn uid_map_refusal_is_blocked_user_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let fake = script(
        dir.path(),
        "bwrap",
        "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1",
    );
    let set = probe_all(&ProbeOptions {
        bwrap_path: Some(fake),
        ..isolated(dir.path())
    });
    let bwrap = probe_of(&set, Backend::LinuxBwrap);
    assert_unavailable_and_empty(bwrap);
    assert!(
        bwrap.reason.starts_with("user namespaces blocked"),
        "{}",
        bwrap.reason
    );
    assert!(
        bwrap
            .reason
            .contains("setting up uid map: Permission denied"),
        "{}",
        bwrap.reason
    );
}

#[test]
fn other_trial_failures_say_trial_failed() {
    let dir = tempfile::tempdir().unwrap();
    let fake = script(
        dir.path(),
        "bwrap",
        r#"if [ "$1" = --version ]; then echo "bubblewrap 9.9.9"; exit 0; fi
echo 'bwrap: Can'"'"'t mount proc on /newroot/proc: Device or resource busy' >&2; exit 1"#,
    );
    let set = probe_all(&ProbeOptions {
        bwrap_path: Some(fake),
        ..isolated(dir.path())
    });
    let bwrap = probe_of(&set, Backend::LinuxBwrap);
    assert_unavailable_and_empty(bwrap);
    assert_eq!(
        bwrap.reason,
        "trial failed: Can't mount proc on /newroot/proc: Device or resource busy"
    );
    assert_eq!(bwrap.version, "bubblewrap 9.9.9");
}

#[test]
fn missing_bwrap_is_not_installed() {
    let dir = tempfile::tempdir().unwrap();
    let set = probe_all(&ProbeOptions {
        bwrap_path: Some(dir.path().join("bwrap")),
        ..isolated(dir.path())
    });
    let bwrap = probe_of(&set, Backend::LinuxBwrap);
    assert_unavailable_and_empty(bwrap);
    assert!(
        bwrap.reason.starts_with("bwrap not installed"),
        "{}",
        bwrap.reason
    );
}

#[test]
fn silent_docker_socket_is_not_answering_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    // Bound and listening (connects succeed into the backlog) but never accepts or answers.
    let _listener = UnixListener::bind(&socket).unwrap();
    let cli = script(dir.path(), "docker", "exit 0");
    let timeout = Duration::from_millis(500);
    let start = Instant::now();
    let set = probe_all(&ProbeOptions {
        docker_socket: Some(socket.clone()),
        docker_cli: Some(cli),
        docker_image: Some("busybox:latest".to_owned()),
        timeout,
        ..options()
    });
    let elapsed = start.elapsed();
    let docker = probe_of(&set, Backend::Docker);
    assert_unavailable_and_empty(docker);
    assert_eq!(
        docker.reason,
        format!(
            "docker daemon not answering at `{}`: timed out after 500 ms",
            socket.display()
        )
    );
    assert!(
        elapsed < timeout + Duration::from_millis(1500),
        "{elapsed:?}"
    );
}

#[test]
fn missing_docker_socket_and_cli_have_distinct_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let cli = script(dir.path(), "docker", "exit 0");
    let socket = dir.path().join("absent.sock");
    let set = probe_all(&ProbeOptions {
        docker_socket: Some(socket.clone()),
        docker_cli: Some(cli),
        ..options()
    });
    assert_eq!(
        probe_of(&set, Backend::Docker).reason,
        format!(
            "docker daemon not answering at `{}`: no socket there",
            socket.display()
        )
    );

    let set = probe_all(&ProbeOptions {
        docker_cli: Some(dir.path().join("no-docker-here")),
        ..isolated(dir.path())
    });
    let reason = &probe_of(&set, Backend::Docker).reason;
    assert!(reason.starts_with("docker cli not installed"), "{reason}");
}

/// The image ID the fake daemon reports for every image it has.
const FAKE_ID: &str = "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// Serves canned answers like dockerd: one HTTP/1.0 request per connection.
fn fake_daemon(socket: &Path, images: &'static [&'static str]) {
    let listener = UnixListener::bind(socket).unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap() == 0 || header == "\r\n" {
                    break;
                }
            }
            let target = request_line.split(' ').nth(1).unwrap_or("").to_owned();
            let (status, body) = match target.as_str() {
                "/_ping" => ("200 OK", "OK".to_owned()),
                "/version" => (
                    "200 OK",
                    r#"{"Version":"20.10.24","ApiVersion":"1.41"}"#.to_owned(),
                ),
                t if images.iter().any(|i| t == format!("/images/{i}/json")) => {
                    ("200 OK", format!(r#"{{"Id":"{FAKE_ID}"}}"#))
                }
                _ => ("404 Not Found", r#"{"message":"no such image"}"#.to_owned()),
            };
            let _ = write!(
                stream,
                "HTTP/1.0 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

#[test]
fn fake_daemon_with_and_without_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    fake_daemon(&socket, &["palisade/busybox:1"]);
    let cli = script(dir.path(), "docker", "exit 0");
    let options = |image: &str| ProbeOptions {
        docker_socket: Some(socket.clone()),
        docker_cli: Some(cli.clone()),
        docker_image: Some(image.to_owned()),
        docker_image_pin: Some(FAKE_ID.to_owned()),
        ..options()
    };

    let set = probe_all(&options("palisade/busybox:1"));
    let docker = probe_of(&set, Backend::Docker);
    assert!(docker.available, "{docker:?}");
    assert_eq!(docker.capabilities, Capability::ALL.to_vec());
    assert_eq!(docker.network_modes, NetworkMode::ALL.to_vec());
    assert_eq!(docker.version, "docker 20.10.24 (api 1.41)");

    let set = probe_all(&options("alpine:3"));
    let docker = probe_of(&set, Backend::Docker);
    assert_unavailable_and_empty(docker);
    assert_eq!(docker.reason, "image `alpine:3` not present");
    assert_eq!(docker.version, "docker 20.10.24 (api 1.41)");

    // Present but not pinned, or pinned to another image: unavailable, never pulled.
    let set = probe_all(&ProbeOptions {
        docker_image_pin: None,
        ..options("palisade/busybox:1")
    });
    let docker = probe_of(&set, Backend::Docker);
    assert_unavailable_and_empty(docker);
    assert!(docker.reason.contains("is not pinned"), "{}", docker.reason);
    let other = format!("sha256:{}", "e".repeat(64));
    let set = probe_all(&ProbeOptions {
        docker_image_pin: Some(other.clone()),
        ..options("palisade/busybox:1")
    });
    let docker = probe_of(&set, Backend::Docker);
    assert_unavailable_and_empty(docker);
    assert_eq!(
        docker.reason,
        format!("image is `{FAKE_ID}`, but the runtime profile pins `{other}`")
    );

    let set = probe_all(&ProbeOptions {
        docker_image: None,
        ..options("unused")
    });
    assert!(
        probe_of(&set, Backend::Docker)
            .reason
            .starts_with("no docker image configured"),
    );
}

#[test]
fn cache_hits_misses_and_survives_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache").join("palisade");
    let fake = working_fake_bwrap(dir.path());
    let options = ProbeOptions {
        bwrap_path: Some(fake.clone()),
        cache_dir: Some(cache_dir.clone()),
        ..isolated(dir.path())
    };
    let cache_file = cache_dir.join(CACHE_FILE_NAME);

    let first = probe_all(&options);
    assert!(!first.from_cache);
    assert_eq!(first.cache_error, None);
    assert!(probe_of(&first, Backend::LinuxBwrap).available);
    assert_eq!(
        probe_of(&first, Backend::LinuxBwrap).version,
        "bubblewrap 9.9.9"
    );
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&cache_dir), 0o700);
    assert_eq!(mode(&cache_file), 0o600);

    let second = probe_all(&options);
    assert!(second.from_cache);
    assert_eq!(second.probes, first.probes);

    // Touching the binary changes its identity: miss, then hit again.
    let file = fs::File::options().write(true).open(&fake).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(file);
    assert!(!probe_all(&options).from_cache);
    assert!(probe_all(&options).from_cache);

    // A different bwrap path: miss.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = working_fake_bwrap(elsewhere.path());
    let moved = ProbeOptions {
        bwrap_path: Some(other),
        ..options.clone()
    };
    assert!(!probe_all(&moved).from_cache);
    assert!(probe_all(&moved).from_cache);
    assert!(!probe_all(&options).from_cache);

    // Another configured image is another key.
    let imaged = ProbeOptions {
        docker_image: Some("busybox".to_owned()),
        ..options.clone()
    };
    assert!(!probe_all(&imaged).from_cache);
    assert!(!probe_all(&options).from_cache);

    // Any change by someone other than palisade — even the same bytes written again — is
    // caught by the file's identity, said, re-probed and rewritten.
    let not_ours = |error: Option<String>| {
        let error = error.unwrap();
        assert!(
            error.starts_with("ignored untrusted probe cache `")
                && error.contains("not the file palisade wrote"),
            "{error}"
        );
    };
    let same = fs::read(&cache_file).unwrap();
    fs::write(&cache_file, &same).unwrap();
    let reprobed = probe_all(&options);
    assert!(!reprobed.from_cache);
    not_ours(reprobed.cache_error);
    assert!(probe_all(&options).from_cache);
    for (what, bytes) in [
        ("corrupt", b"{ not json".to_vec()),
        ("a bogus probe list", {
            let mut value: serde_json::Value = serde_json::from_slice(&same).unwrap();
            value["probes"] = serde_json::json!([]);
            serde_json::to_vec(&value).unwrap()
        }),
        ("a tampered key", {
            let mut value: serde_json::Value = serde_json::from_slice(&same).unwrap();
            value["key"]["bootId"] = serde_json::json!("another boot");
            serde_json::to_vec(&value).unwrap()
        }),
    ] {
        fs::write(&cache_file, bytes).unwrap();
        let repaired = probe_all(&options);
        assert!(!repaired.from_cache, "{what}");
        not_ours(repaired.cache_error);
        assert!(probe_all(&options).from_cache, "{what}");
    }
    // Without its identity record the file is not trusted either.
    fs::remove_file(cache_dir.join("probes.json.id")).unwrap();
    let reprobed = probe_all(&options);
    assert!(!reprobed.from_cache);
    not_ours(reprobed.cache_error);
    assert!(probe_all(&options).from_cache);

    // A cache file others may write is not trusted.
    fs::set_permissions(&cache_file, fs::Permissions::from_mode(0o666)).unwrap();
    let distrusted = probe_all(&options);
    assert!(!distrusted.from_cache);
    assert!(
        distrusted
            .cache_error
            .unwrap()
            .contains("writable by others")
    );
    assert_eq!(mode(&cache_file), 0o600, "rewritten privately");

    // use_cache = false (doctor) probes afresh but refreshes the file.
    fs::remove_file(&cache_file).unwrap();
    let fresh = probe_all(&ProbeOptions {
        use_cache: false,
        ..options.clone()
    });
    assert!(!fresh.from_cache);
    assert!(cache_file.exists());
    assert!(probe_all(&options).from_cache);

    // No temp files left behind (the probe lock file stays: it is the lock).
    let leftovers: Vec<_> = fs::read_dir(&cache_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != CACHE_FILE_NAME && n != "probes.json.id" && n != "probe.lock")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn cached_probes_match_fresh_ones_for_real_backends() {
    let dir = tempfile::tempdir().unwrap();
    let options = ProbeOptions {
        cache_dir: Some(dir.path().join("cache")),
        ..options()
    };
    let fresh = probe_all(&options);
    let cached = probe_all(&options);
    assert!(!fresh.from_cache);
    assert!(cached.from_cache);
    assert_eq!(fresh.probes, cached.probes);
}

/// Not an assertion: prints fresh and cached timings (`cargo test -- --nocapture measure`).
#[test]
fn measure_probe_times() {
    let dir = tempfile::tempdir().unwrap();
    let options = ProbeOptions {
        cache_dir: Some(dir.path().join("cache")),
        ..options()
    };
    let mut fresh = Vec::new();
    for _ in 0..5 {
        fresh.push(
            probe_all(&ProbeOptions {
                use_cache: false,
                ..options.clone()
            })
            .elapsed,
        );
    }
    let mut cached = Vec::new();
    for _ in 0..50 {
        let set = probe_all(&options);
        assert!(set.from_cache);
        cached.push(set.elapsed);
    }
    fresh.sort();
    cached.sort();
    eprintln!(
        "probe_all fresh median {:?} (min {:?}), cached median {:?} (min {:?})",
        fresh[fresh.len() / 2],
        fresh[0],
        cached[cached.len() / 2],
        cached[0]
    );
}
