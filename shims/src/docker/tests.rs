#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
use std::time::Duration;

use super::*;
use crate::fsfacts::PathFact;
use crate::plan::Mechanism;

const IMAGE: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn spec() -> DockerSpec {
    DockerSpec {
        cli: PathBuf::from("/usr/bin/docker"),
        socket: PathBuf::from("/run/palisade-dockerd/docker.sock"),
        image_id: IMAGE.into(),
        run_id: "18a2b3c4d5e6f7-4242".into(),
        read_only_binds: Vec::new(),
        init: PathBuf::from("/usr/bin/docker-init"),
        stub: None,
    }
}

fn plan(network: Network) -> LaunchPlan {
    LaunchPlan {
        mechanism: Mechanism::Docker,
        network,
        workspace: PathBuf::from("/home/u/ws"),
        writable_roots: vec![PathBuf::from("/home/u/ws"), PathBuf::from("/tmp/run-1")],
        read_only_root: true,
        denied_read_paths: vec![
            PathBuf::from("/home/u/.ssh"),
            PathBuf::from("/home/u/.netrc"),
            PathBuf::from("/home/u/ws/.env"),
        ],
        protected_paths: vec![
            PathBuf::from("/home/u/ws/.github"),
            PathBuf::from("/home/u/ws/AGENTS.md"),
            PathBuf::from("/home/u/ws/.loopwright/policies"),
        ],
        syscall_filter: true,
        command: vec!["make".into(), "test".into(), "--secret-looking=no".into()],
        env: vec![
            ("HOME".into(), "/home/u".into()),
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("TMPDIR".into(), "/tmp/run-1".into()),
        ],
        run_temp_dir: PathBuf::from("/tmp/run-1"),
        budgets: Budgets {
            wall_clock: Some(Duration::from_secs(60)),
            memory_bytes: Some(256 << 20),
            max_processes: Some(64),
            cpu_seconds: Some(30),
            launcher_processes: 1,
        },
        unix_sockets: Vec::new(),
    }
}

fn fact(kind: PathKind, real: &str) -> PathFact {
    PathFact {
        kind,
        real: PathBuf::from(real),
        symlinks: Vec::new(),
    }
}

fn missing(real: &str, first_missing: &str) -> PathFact {
    fact(
        PathKind::Missing {
            first_missing: PathBuf::from(first_missing),
            parent_is_dir: true,
        },
        real,
    )
}

fn facts() -> FsFacts {
    let mut paths = BTreeMap::new();
    for (path, fact) in [
        ("/home/u/ws", fact(PathKind::Dir, "/home/u/ws")),
        ("/tmp/run-1", fact(PathKind::Dir, "/tmp/run-1")),
        ("/home/u/.ssh", fact(PathKind::Dir, "/home/u/.ssh")),
        (
            "/home/u/.netrc",
            fact(PathKind::File { hard_links: 1 }, "/home/u/.netrc"),
        ),
        (
            "/home/u/ws/.env",
            missing("/home/u/ws/.env", "/home/u/ws/.env"),
        ),
        (
            "/home/u/ws/.github",
            fact(PathKind::Dir, "/home/u/ws/.github"),
        ),
        (
            "/home/u/ws/AGENTS.md",
            missing("/home/u/ws/AGENTS.md", "/home/u/ws/AGENTS.md"),
        ),
        (
            "/home/u/ws/.loopwright/policies",
            missing("/home/u/ws/.loopwright/policies", "/home/u/ws/.loopwright"),
        ),
    ] {
        paths.insert(PathBuf::from(path), fact);
    }
    FsFacts {
        uid: 1000,
        gid: 1000,
        paths,
        private_dirs: vec![
            PathBuf::from("/run"),
            PathBuf::from("/tmp"),
            PathBuf::from("/var/tmp"),
        ],
        resolv_conf: Some(PathBuf::from("/run/systemd/resolve/stub-resolv.conf")),
        host_sockets: vec![
            PathBuf::from("/home/u/ws/agent.sock"),
            PathBuf::from("/var/lib/thing/outside.sock"),
        ],
        abstract_sockets: Vec::new(),
        unlocated_sockets: Vec::new(),
        placeholders: Vec::new(),
    }
}

fn strings(args: &[OsString]) -> Vec<String> {
    args.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// The argv as `run` builds it: the execute-only copy of the spec's init next to the mask.
fn build(plan: &LaunchPlan, spec: &DockerSpec) -> DockerArgs {
    argv(
        plan,
        &facts(),
        spec,
        Path::new("/tmp/run-1.mask"),
        Path::new("/tmp/run-1.init"),
        plan.syscall_filter.then_some("/dev/fd/3"),
        None,
    )
    .unwrap()
}

#[test]
fn an_observed_run_starts_the_command_through_the_stub() {
    let plan = plan(Network::None);
    assert!(plan.syscall_filter);
    let spec = DockerSpec {
        stub: Some(PathBuf::from("/usr/local/lib/palisade/palisade-bridge")),
        ..spec()
    };
    let observe = |socket: Option<&Path>, spec: &DockerSpec| {
        argv(
            &plan,
            &facts(),
            spec,
            Path::new("/tmp/run-1.mask"),
            Path::new("/tmp/run-1.init"),
            Some("/dev/fd/3"),
            socket,
        )
    };
    let built = observe(Some(Path::new("/tmp/p/run-1.observe.sock")), &spec).unwrap();
    let args: Vec<String> = built
        .args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    for mount in [
        "type=bind,source=/usr/local/lib/palisade/palisade-bridge,target=/run/palisade-stub,readonly",
        "type=bind,source=/tmp/p/run-1.observe.sock,target=/run/palisade-observe.sock,readonly",
    ] {
        assert!(args.iter().any(|a| a == mount), "{mount} in {args:?}");
    }
    let image = args.iter().position(|a| a == IMAGE).unwrap();
    assert_eq!(
        args[image + 1..].join(" "),
        "-- /run/palisade-stub __sandbox-exec --mechanism docker --reach nothing \
         --observe-socket /run/palisade-observe.sock -- make test --secret-looking=no"
    );
    // Not observed: the command right behind the init, as before.
    let plain = observe(None, &spec).unwrap();
    assert!(!plain.args.iter().any(|a| a == "/run/palisade-stub"));
    // Observed without a stub is refused, never run unobserved behind a relaxed profile.
    assert!(matches!(
        observe(
            Some(Path::new("/tmp/s")),
            &DockerSpec {
                stub: None,
                ..spec.clone()
            }
        ),
        Err(DockerError::NoStub)
    ));
}

#[test]
fn pid_1_is_docker_init_from_an_execute_only_copy() {
    let args = strings(&build(&plan(Network::None), &spec()).args);
    assert!(!args.iter().any(|a| a == "--init"));
    let at = args
        .iter()
        .position(|a| a == "type=bind,source=/tmp/run-1.init,target=/run/palisade-init,readonly")
        .unwrap();
    assert_eq!(args[at - 1], "--mount");
    let image = args.iter().position(|a| a == IMAGE).unwrap();
    assert_eq!(
        args[image - 2..image],
        ["--entrypoint", "/run/palisade-init"]
    );
    assert_eq!(
        args[image + 1..],
        ["--", "make", "test", "--secret-looking=no"]
    );
}

#[test]
fn the_init_is_never_placed_in_a_host_directory() {
    let mut plan = plan(Network::None);
    plan.writable_roots.push(PathBuf::from("/run"));
    let mut facts = facts();
    facts
        .paths
        .insert(PathBuf::from("/run"), fact(PathKind::Dir, "/run"));
    let built = argv(
        &plan,
        &facts,
        &spec(),
        Path::new("/m"),
        Path::new("/tmp/run-1.init"),
        None,
        None,
    );
    assert!(matches!(built, Err(DockerError::InitTarget(path)) if path == Path::new("/run")));
}

#[test]
fn typical_plan() {
    let built = build(&plan(Network::None), &spec());
    insta::assert_json_snapshot!("typical_plan", strings(&built.args));
    assert_eq!(
        built.created_mountpoints,
        [
            PathBuf::from("/home/u/ws/.env"),
            PathBuf::from("/home/u/ws/agent.sock"),
        ]
    );
    assert_eq!(
        built.placeholders,
        [
            PathBuf::from("/home/u/ws/.loopwright"),
            PathBuf::from("/home/u/ws/AGENTS.md"),
        ]
    );
}

#[test]
fn values_never_reach_the_argv() {
    let mut plan = plan(Network::None);
    plan.env.push(("API_TOKEN".into(), "s3cr3t-value".into()));
    let built = build(&plan, &spec());
    let args = strings(&built.args);
    assert!(!args.iter().any(|a| a.contains("s3cr3t")));
    let at = args.iter().position(|a| a == "API_TOKEN").unwrap();
    assert_eq!(args[at - 1], "--env");
    let env: BTreeMap<_, _> = built.env.into_iter().collect();
    assert_eq!(
        env[&OsString::from("API_TOKEN")],
        OsString::from("s3cr3t-value")
    );
    assert_eq!(
        env[&OsString::from("DOCKER_HOST")],
        OsString::from("unix:///run/palisade-dockerd/docker.sock")
    );
}

#[test]
fn network_modes() {
    let network = |mode| {
        let args = strings(&build(&plan(mode), &spec()).args);
        let at = args.iter().position(|a| a == "--network").unwrap();
        args[at + 1].clone()
    };
    assert_eq!(network(Network::None), "none");
    assert_eq!(network(Network::OwnLoopback(None)), "none");
    assert_eq!(network(Network::AllowOutbound), "host");
    // The container's own loopback has ::1 too, as bwrap's does; the host's network is left be.
    let ipv6_loopback = |mode| {
        strings(&build(&plan(mode), &spec()).args)
            .windows(2)
            .any(|pair| pair == ["--sysctl", "net.ipv6.conf.lo.disable_ipv6=0"])
    };
    assert!(ipv6_loopback(Network::OwnLoopback(None)));
    assert!(ipv6_loopback(Network::OwnLoopback(Some(egress()))));
    assert!(!ipv6_loopback(Network::None));
    assert!(!ipv6_loopback(Network::AllowOutbound));
}

fn egress() -> crate::plan::Bridge {
    crate::plan::Bridge {
        binds: vec![
            crate::plan::ReadOnlyBind {
                source: "/tmp/run-1-egress/proxy.sock".into(),
                target: "/run/palisade-bridge/proxy.sock".into(),
            },
            crate::plan::ReadOnlyBind {
                source: "/usr/local/lib/palisade/palisade-bridge".into(),
                target: "/run/palisade-bridge/palisade".into(),
            },
        ],
        argv: [
            "/run/palisade-bridge/palisade",
            "__bridge",
            "--proxy",
            "127.0.0.1:3128=/run/palisade-bridge/proxy.sock",
            "--",
        ]
        .map(OsString::from)
        .to_vec(),
    }
}

#[test]
fn filtered_egress_runs_the_static_bridge_as_the_entrypoint() {
    let plan = plan(Network::OwnLoopback(Some(egress())));
    let args = strings(&build(&plan, &spec()).args);
    let at = args.iter().position(|a| a == "--network").unwrap();
    assert_eq!(args[at + 1], "none", "the container's own loopback only");
    for mount in [
        "type=bind,source=/tmp/run-1-egress/proxy.sock,target=/run/palisade-bridge/proxy.sock,readonly",
        "type=bind,source=/usr/local/lib/palisade/palisade-bridge,target=/run/palisade-bridge/palisade,readonly",
    ] {
        let at = args.iter().position(|a| a == mount).unwrap();
        assert_eq!(args[at - 1], "--mount");
    }
    // PID 1 runs the bridge, which execs the command.
    let image = args.iter().position(|a| a == &spec().image_id).unwrap();
    assert_eq!(
        args[image - 2..image],
        ["--entrypoint", "/run/palisade-init"]
    );
    assert_eq!(
        args[image + 1..],
        [
            "--",
            "/run/palisade-bridge/palisade",
            "__bridge",
            "--proxy",
            "127.0.0.1:3128=/run/palisade-bridge/proxy.sock",
            "--",
            "make",
            "test",
            "--secret-looking=no"
        ]
    );
}

#[test]
fn filtered_egress_needs_a_private_run() {
    let plan = plan(Network::OwnLoopback(Some(egress())));
    let mut facts = facts();
    facts.private_dirs.retain(|d| d != Path::new("/run"));
    let built = argv(
        &plan,
        &facts,
        &spec(),
        Path::new("/tmp/run-1.mask"),
        Path::new("/tmp/run-1.init"),
        None,
        None,
    );
    assert!(matches!(
        built,
        Err(DockerError::Plan(BwrapError::BridgeBindNotPrivate(_)))
    ));
}

#[test]
fn read_only_binds_show_the_host_and_its_sockets_get_masked() {
    let dir = tempfile::tempdir().unwrap();
    let bound = dir.path().canonicalize().unwrap();
    let mut facts = facts();
    let socket = bound.join("s.sock");
    facts.host_sockets.push(socket.clone());
    let spec = DockerSpec {
        read_only_binds: vec![bound.clone()],
        ..spec()
    };
    let plan = plan(Network::None);
    let args = strings(
        &argv(
            &plan,
            &facts,
            &spec,
            Path::new("/m"),
            Path::new("/i"),
            None,
            None,
        )
        .unwrap()
        .args,
    );
    let bound = bound.display().to_string();
    assert!(args.contains(&format!("type=bind,source={bound},target={bound},readonly")));
    assert!(args.contains(&format!(
        "type=bind,source=/m,target={},readonly",
        socket.display()
    )));
    // A host socket outside every bind is not there to mask.
    assert!(!args.iter().any(|a| a.contains("outside.sock")));
    // Without syscall filtering Docker's default profile stays.
    assert!(!args.iter().any(|a| a.starts_with("seccomp=")));
}

#[test]
fn an_allowed_host_socket_is_bound_at_its_path_and_its_neighbour_stays_masked() {
    let dir = tempfile::tempdir().unwrap();
    let bound = dir.path().canonicalize().unwrap();
    let mut facts = facts();
    let agent = bound.join("agent.sock");
    let neighbour = bound.join("neighbour.sock");
    facts
        .host_sockets
        .extend([agent.clone(), neighbour.clone()]);
    let spec = DockerSpec {
        read_only_binds: vec![bound.clone()],
        ..spec()
    };
    let mut plan = plan(Network::None);
    plan.unix_sockets = vec![
        crate::plan::HostSocket {
            path: agent.clone(),
            target: agent.clone(),
        },
        crate::plan::HostSocket {
            path: PathBuf::from("/home/u/agent-link"),
            target: PathBuf::from("/tmp/ssh-x/agent.1"),
        },
    ];
    let args = strings(
        &argv(
            &plan,
            &facts,
            &spec,
            Path::new("/m"),
            Path::new("/i"),
            None,
            None,
        )
        .unwrap()
        .args,
    );
    let agent = agent.display().to_string();
    assert!(
        args.contains(&format!("type=bind,source={agent},target={agent}")),
        "{args:?}"
    );
    assert!(
        args.contains(&"type=bind,source=/tmp/ssh-x/agent.1,target=/home/u/agent-link".to_owned())
    );
    assert!(args.contains(&format!(
        "type=bind,source=/m,target={},readonly",
        neighbour.display()
    )));
    assert!(
        !args
            .iter()
            .any(|a| a.contains(&format!("target={agent},readonly")))
    );
}

#[test]
fn no_budgets_no_limits_and_a_writable_root() {
    let mut plan = plan(Network::None);
    plan.budgets = Budgets::default();
    plan.read_only_root = false;
    let args = strings(&build(&plan, &spec()).args);
    for flag in ["--memory", "--pids-limit", "--ulimit", "--read-only"] {
        assert!(!args.iter().any(|a| a == flag), "{flag}");
    }
}

#[test]
fn refusals() {
    let plan = plan(Network::None);
    let fail = |plan: &LaunchPlan, spec: &DockerSpec| {
        argv(
            plan,
            &facts(),
            spec,
            Path::new("/m"),
            Path::new("/i"),
            None,
            None,
        )
        .unwrap_err()
    };
    let bad_image = DockerSpec {
        image_id: "busybox:latest".into(),
        ..spec()
    };
    assert!(matches!(fail(&plan, &bad_image), DockerError::ImageId(_)));
    let bad_run = DockerSpec {
        run_id: "x y".into(),
        ..spec()
    };
    assert!(matches!(fail(&plan, &bad_run), DockerError::RunId(_)));
    let mut client_env = plan.clone();
    client_env
        .env
        .push(("DOCKER_HOST".into(), "tcp://evil:2375".into()));
    assert!(matches!(
        fail(&client_env, &spec()),
        DockerError::ClientEnv(_)
    ));
    let mut empty = plan.clone();
    empty.command.clear();
    assert!(matches!(
        fail(&empty, &spec()),
        DockerError::Plan(BwrapError::EmptyCommand)
    ));
    assert!(matches!(
        mount_path(Path::new("/a,b")),
        Err(DockerError::PathSyntax(_))
    ));
    assert!(matches!(
        mount_path(Path::new("/a:b")),
        Err(DockerError::PathSyntax(_))
    ));
    let missing_bind = DockerSpec {
        read_only_binds: vec![PathBuf::from("/nonexistent/palisade/bind")],
        ..spec()
    };
    assert!(matches!(
        fail(&plan, &missing_bind),
        DockerError::ReadOnlyBind(_)
    ));
}

#[test]
fn image_ids() {
    assert!(valid_image_id(IMAGE));
    assert!(!valid_image_id("sha256:ABC"));
    assert!(!valid_image_id(&IMAGE.to_uppercase()));
    assert!(!valid_image_id("busybox"));
}

#[test]
fn seccomp_profile_denies_what_the_bpf_filter_denies() {
    let profile = seccomp::oci_profile(
        seccomp::Arch::X86_64,
        &seccomp::Profile::for_plan(&plan(Network::None)),
    )
    .unwrap();
    insta::assert_json_snapshot!("seccomp_profile_x86_64", profile);
    let rules = seccomp::rules_for(
        seccomp::Arch::X86_64,
        &seccomp::Profile::for_plan(&plan(Network::None)),
    )
    .unwrap();
    let names: BTreeSet<&str> = profile["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["names"][0].as_str().unwrap())
        .collect();
    for rule in rules.iter().filter(|rule| rule.syscall != "*") {
        assert!(names.contains(rule.syscall), "{} missing", rule.syscall);
    }
}
