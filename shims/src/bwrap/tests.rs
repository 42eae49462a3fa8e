#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStringExt;

use super::*;
use crate::plan::{Budgets, Mechanism};

const WS: &str = "/home/u/ws";
const RUN: &str = "/home/u/.cache/palisade/run-1";

fn base_plan(network: Network) -> LaunchPlan {
    LaunchPlan {
        mechanism: Mechanism::Bwrap,
        network,
        workspace: WS.into(),
        writable_roots: vec![WS.into(), RUN.into()],
        read_only_root: true,
        denied_read_paths: Vec::new(),
        protected_paths: Vec::new(),
        syscall_filter: true,
        command: vec!["make".into(), "test".into()],
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("TMPDIR".into(), RUN.into()),
        ],
        run_temp_dir: RUN.into(),
        budgets: Budgets::default(),
        unix_sockets: Vec::new(),
    }
}

fn fact(kind: PathKind, real: &str) -> PathFact {
    PathFact {
        kind,
        real: real.into(),
        symlinks: Vec::new(),
    }
}

fn dir(real: &str) -> PathFact {
    fact(PathKind::Dir, real)
}

fn file(real: &str) -> PathFact {
    fact(PathKind::File { hard_links: 1 }, real)
}

fn missing(real: &str, first_missing: &str) -> PathFact {
    fact(
        PathKind::Missing {
            first_missing: first_missing.into(),
            parent_is_dir: true,
        },
        real,
    )
}

fn base_facts() -> FsFacts {
    FsFacts {
        uid: 1000,
        gid: 1000,
        paths: BTreeMap::from([(WS.into(), dir(WS)), (RUN.into(), dir(RUN))]),
        private_dirs: vec!["/run".into(), "/tmp".into(), "/var/tmp".into()],
        resolv_conf: Some("/etc/resolv.conf".into()),
        host_sockets: Vec::new(),
        abstract_sockets: Vec::new(),
        unlocated_sockets: Vec::new(),
        placeholders: Vec::new(),
    }
}

/// Adds a denied (or protected) path and its fact.
fn deny(plan: &mut LaunchPlan, facts: &mut FsFacts, path: &str, fact: PathFact) {
    plan.denied_read_paths.push(path.into());
    facts.paths.insert(path.into(), fact);
}

fn protect(plan: &mut LaunchPlan, facts: &mut FsFacts, path: &str, fact: PathFact) {
    plan.protected_paths.push(path.into());
    facts.paths.insert(path.into(), fact);
}

fn strings(args: &[OsString]) -> Vec<String> {
    args.iter()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect()
}

fn build(plan: &LaunchPlan, facts: &FsFacts) -> (Vec<String>, Vec<PathBuf>) {
    let built = argv(plan, facts, None, None).unwrap();
    (strings(&built.args), built.created_mountpoints)
}

fn placeholders(plan: &LaunchPlan, facts: &FsFacts) -> Vec<PathBuf> {
    argv(plan, facts, None, None).unwrap().placeholders
}

fn paths(paths: &[&str]) -> Vec<PathBuf> {
    paths.iter().map(PathBuf::from).collect()
}

fn head(network: Network) -> Vec<&'static str> {
    let mut head = vec![
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup",
    ];
    if network != Network::AllowOutbound {
        head.push("--unshare-net");
    }
    head.extend([
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        "1000",
        "--gid",
        "1000",
        "--ro-bind",
        "/",
        "/",
    ]);
    head
}

/// The base mounts of [`base_facts`], up to and including the writable roots.
const BASE: &[&str] = &[
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/tmp",
    "--tmpfs",
    "/dev/shm",
    "--ro-bind",
    "/proc/sys",
    "/proc/sys",
    "--ro-bind-try",
    "/proc/sysrq-trigger",
    "/proc/sysrq-trigger",
    "--tmpfs",
    "/var/tmp",
];

const ROOTS: &[&str] = &["--bind", WS, WS, "--bind", RUN, RUN];

const TAIL: &[&str] = &[
    "--chdir",
    WS,
    "--clearenv",
    "--setenv",
    "PATH",
    "/usr/bin:/bin",
    "--setenv",
    "TMPDIR",
    RUN,
    "--",
    "make",
    "test",
];

fn expected(network: Network, parts: &[&[&str]]) -> Vec<String> {
    let mut all: Vec<String> = head(network).into_iter().map(String::from).collect();
    for part in parts {
        all.extend(part.iter().map(|s| (*s).to_owned()));
    }
    all
}

const BRIDGE_SOCKET: &str = "/run/palisade-bridge/proxy.sock";
const BRIDGE_PROGRAM: &str = "/run/palisade-bridge/palisade";

fn egress(socket_target: &str) -> crate::plan::Bridge {
    crate::plan::Bridge {
        binds: vec![
            crate::plan::ReadOnlyBind {
                source: "/run/user/1000/palisade-1000/proxy-1/proxy.sock".into(),
                target: socket_target.into(),
            },
            crate::plan::ReadOnlyBind {
                source: "/usr/local/bin/palisade".into(),
                target: BRIDGE_PROGRAM.into(),
            },
        ],
        argv: [BRIDGE_PROGRAM, "bridge", "--socket", socket_target, "--"]
            .map(OsString::from)
            .to_vec(),
    }
}

#[test]
fn filtered_network_binds_socket_and_bridge_and_wraps_the_command() {
    let network = Network::OwnLoopback(Some(egress(BRIDGE_SOCKET)));
    let plan = base_plan(network.clone());
    let (args, _) = build(&plan, &base_facts());
    #[rustfmt::skip]
    let binds: &[&str] = &[
        "--dir", "/run/palisade-bridge",
        "--ro-bind", "/run/user/1000/palisade-1000/proxy-1/proxy.sock", BRIDGE_SOCKET,
        "--ro-bind", "/usr/local/bin/palisade", BRIDGE_PROGRAM,
    ];
    let mut tail: Vec<&str> = TAIL.to_vec();
    let command_at = tail.len() - 2;
    tail.splice(
        command_at..command_at,
        [BRIDGE_PROGRAM, "bridge", "--socket", BRIDGE_SOCKET, "--"],
    );
    assert_eq!(args, expected(network, &[BASE, ROOTS, binds, &tail]));
    // Its own network namespace, as every network but allow-outbound.
    assert!(args.iter().any(|a| a == "--unshare-net"));
}

#[test]
fn filtered_network_binds_only_into_private_directories() {
    // A target outside every private directory would cover (or create) a host path.
    for target in ["/etc/proxy.sock", "/run", "relative.sock"] {
        let plan = base_plan(Network::OwnLoopback(Some(egress(target))));
        assert!(matches!(
            argv(&plan, &base_facts(), None, None),
            Err(BwrapError::BridgeBindNotPrivate(_))
        ));
    }
    let plan = base_plan(Network::OwnLoopback(Some(egress(BRIDGE_SOCKET))));
    let mut facts = base_facts();
    facts.private_dirs.retain(|d| d != Path::new("/run"));
    assert!(matches!(
        argv(&plan, &facts, None, None),
        Err(BwrapError::BridgeBindNotPrivate(_))
    ));
    let mut empty = egress(BRIDGE_SOCKET);
    empty.argv.clear();
    assert!(matches!(
        argv(
            &base_plan(Network::OwnLoopback(Some(empty))),
            &base_facts(),
            None,
            None
        ),
        Err(BwrapError::BridgeNoProgram)
    ));
}

#[test]
fn the_seccomp_stub_is_bound_read_only_on_the_private_run_and_runs_before_the_bridge() {
    let network = Network::OwnLoopback(Some(egress(BRIDGE_SOCKET)));
    let plan = base_plan(network.clone());
    // In the workspace, a writable root: the sandbox gets it bound read-only on `/run`.
    let stub = SandboxExec {
        exe: "/home/u/ws/target/palisade".into(),
        reach: network.reach(),
        started_fd: None,
    };
    let args = strings(&argv(&plan, &base_facts(), None, Some(&stub)).unwrap().args);
    #[rustfmt::skip]
    let binds: &[&str] = &[
        "--dir", "/run/palisade-bridge",
        "--ro-bind", "/run/user/1000/palisade-1000/proxy-1/proxy.sock", BRIDGE_SOCKET,
        "--ro-bind", "/usr/local/bin/palisade", BRIDGE_PROGRAM,
        "--dir", "/run/palisade-exec",
        "--ro-bind", "/home/u/ws/target/palisade", SANDBOX_EXEC_PATH,
    ];
    let mut tail: Vec<&str> = TAIL.to_vec();
    let command_at = tail.len() - 2;
    tail.splice(
        command_at..command_at,
        [
            SANDBOX_EXEC_PATH,
            "__sandbox-exec",
            "--reach",
            "own-loopback",
            "--",
            BRIDGE_PROGRAM,
            "bridge",
            "--socket",
            BRIDGE_SOCKET,
            "--",
        ],
    );
    assert_eq!(args, expected(network, &[BASE, ROOTS, binds, &tail]));
    assert!(!args.iter().any(|a| a == "--seccomp"));

    // Without a private `/run` there is nowhere to put it: refused, not run unfiltered.
    let mut facts = base_facts();
    facts.private_dirs.retain(|d| d != Path::new("/run"));
    assert!(matches!(
        argv(&base_plan(Network::None), &facts, None, Some(&stub)),
        Err(BwrapError::SandboxExecNotPrivate)
    ));
    // The stub's reach names round-trip.
    for reach in [
        Reach::Nothing,
        Reach::OwnLoopback,
        Reach::HostLoopback,
        Reach::Everything,
    ] {
        assert_eq!(reach_from_name(reach_name(reach)), Some(reach));
    }
}

#[test]
fn typical_plan_exact_argv() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/.github",
        dir("/home/u/ws/.github"),
    );
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/AGENTS.md",
        file("/home/u/ws/AGENTS.md"),
    );
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/CLAUDE.md",
        missing("/home/u/ws/CLAUDE.md", "/home/u/ws/CLAUDE.md"),
    );
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/.loopwright/policies",
        missing("/home/u/ws/.loopwright/policies", "/home/u/ws/.loopwright"),
    );
    deny(&mut plan, &mut facts, "/home/u/.ssh", dir("/home/u/.ssh"));
    deny(
        &mut plan,
        &mut facts,
        "/home/u/.aws",
        missing("/home/u/.aws", "/home/u/.aws"),
    );
    deny(
        &mut plan,
        &mut facts,
        "/home/u/ws/.env",
        file("/home/u/ws/.env"),
    );
    facts.host_sockets = vec![
        "/home/u/ws/.dev.sock".into(),
        "/run/docker.sock".into(),
        "/var/lib/app/app.sock".into(),
    ];

    let (args, created) = build(&plan, &facts);
    #[rustfmt::skip]
    let masks: &[&str] = &[
        // protected, shallowest first; placeholders for the missing ones (the launcher makes
        // them), `.loopwright` for the missing `.loopwright/policies`
        "--ro-bind", "/home/u/ws/.github", "/home/u/ws/.github",
        "--ro-bind", "/home/u/ws/.loopwright", "/home/u/ws/.loopwright",
        "--ro-bind", "/home/u/ws/AGENTS.md", "/home/u/ws/AGENTS.md",
        "--ro-bind", "/home/u/ws/CLAUDE.md", "/home/u/ws/CLAUDE.md",
        // denied: ~/.aws is missing outside the writable roots, so not mounted
        "--perms", "0000", "--tmpfs", "/home/u/.ssh", "--remount-ro", "/home/u/.ssh",
        "--ro-bind", "/dev/null", "/home/u/ws/.env",
        // host sockets outside the private tmpfs mounts
        "--ro-bind", "/dev/null", "/home/u/ws/.dev.sock",
        "--ro-bind", "/dev/null", "/var/lib/app/app.sock",
    ];
    assert_eq!(args, expected(Network::None, &[BASE, ROOTS, masks, TAIL]));
    // Only created if the socket vanishes before bwrap starts.
    assert_eq!(created, paths(&["/home/u/ws/.dev.sock"]));
    assert_eq!(
        placeholders(&plan, &facts),
        paths(&["/home/u/ws/.loopwright", "/home/u/ws/CLAUDE.md"])
    );
}

#[test]
fn loopback_only_is_a_private_network_namespace_like_none() {
    let plan = base_plan(Network::OwnLoopback(None));
    let (args, created) = build(&plan, &base_facts());
    assert_eq!(
        args,
        expected(Network::OwnLoopback(None), &[BASE, ROOTS, TAIL])
    );
    assert!(args.contains(&"--unshare-net".to_owned()));
    assert!(created.is_empty());
    let (none, _) = build(&base_plan(Network::None), &base_facts());
    assert_eq!(args, none);
}

#[test]
fn allow_outbound_shares_the_network_and_keeps_dns() {
    let plan = base_plan(Network::AllowOutbound);
    let (args, _) = build(&plan, &base_facts());
    assert_eq!(args, expected(Network::AllowOutbound, &[BASE, ROOTS, TAIL]));
    assert!(!args.contains(&"--unshare-net".to_owned()));

    // systemd-resolved: /etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf
    let mut facts = base_facts();
    facts.resolv_conf = Some("/run/systemd/resolve/stub-resolv.conf".into());
    let (args, _) = build(&plan, &facts);
    // Depth 5: between the workspace (4) and the run temp dir (6).
    #[rustfmt::skip]
    let roots: &[&str] = &[
        "--bind", WS, WS,
        "--ro-bind", "/run/systemd/resolve/stub-resolv.conf",
        "/run/systemd/resolve/stub-resolv.conf",
        "--bind", RUN, RUN,
    ];
    assert_eq!(args, expected(Network::AllowOutbound, &[BASE, roots, TAIL]));
    // ... but not without a network.
    let (args, _) = build(&base_plan(Network::None), &facts);
    assert_eq!(args, expected(Network::None, &[BASE, ROOTS, TAIL]));
}

#[test]
fn host_sockets_are_masked_in_every_network_mode() {
    for network in [
        Network::None,
        Network::OwnLoopback(None),
        Network::AllowOutbound,
    ] {
        let mut facts = base_facts();
        facts.host_sockets = vec!["/srv/dock.sock".into()];
        let (args, _) = build(&base_plan(network.clone()), &facts);
        let mask: &[&str] = &["--ro-bind", "/dev/null", "/srv/dock.sock"];
        assert_eq!(args, expected(network, &[BASE, ROOTS, mask, TAIL]));
    }
}

#[test]
fn allowed_sockets_are_left_unmasked_and_bound_last_at_their_paths() {
    let mut plan = base_plan(Network::None);
    let facts = FsFacts {
        host_sockets: vec!["/srv/agent.sock".into(), "/srv/neighbour.sock".into()],
        ..base_facts()
    };
    plan.unix_sockets = vec![
        crate::plan::HostSocket {
            path: "/srv/agent.sock".into(),
            target: "/srv/agent.sock".into(),
        },
        // Under the private /tmp, reached through a link the host resolved.
        crate::plan::HostSocket {
            path: "/home/u/agent-link".into(),
            target: "/tmp/ssh-x/agent.1".into(),
        },
    ];
    let (args, _) = build(&plan, &facts);
    #[rustfmt::skip]
    let sockets: &[&str] = &[
        "--ro-bind", "/dev/null", "/srv/neighbour.sock",
        "--bind", "/srv/agent.sock", "/srv/agent.sock",
        "--bind", "/tmp/ssh-x/agent.1", "/home/u/agent-link",
    ];
    assert_eq!(args, expected(Network::None, &[BASE, ROOTS, sockets, TAIL]));
    // A relative socket path is refused, never bound.
    plan.unix_sockets[0].path = "srv/agent.sock".into();
    assert!(argv(&plan, &facts, None, None).is_err());
}

#[test]
fn sockets_hidden_by_private_dirs_or_denials_are_not_masked_again() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    deny(&mut plan, &mut facts, "/srv/secret", dir("/srv/secret"));
    deny(
        &mut plan,
        &mut facts,
        "/srv/one.sock",
        fact(PathKind::Other, "/srv/one.sock"),
    );
    facts.host_sockets = vec![
        "/run/user/1000/bus".into(),
        "/tmp/.X11-unix/X0".into(),
        "/dev/shm/s".into(),
        "/srv/secret/agent.sock".into(),
        "/srv/one.sock".into(),
        "/home/u/.cache/palisade/run-1/s".into(),
    ];
    let (args, _) = build(&plan, &facts);
    #[rustfmt::skip]
    let masks: &[&str] = &[
        "--ro-bind", "/dev/null", "/srv/one.sock",
        "--perms", "0000", "--tmpfs", "/srv/secret", "--remount-ro", "/srv/secret",
        "--ro-bind", "/dev/null", "/home/u/.cache/palisade/run-1/s",
    ];
    assert_eq!(args, expected(Network::None, &[BASE, ROOTS, masks, TAIL]));
}

#[test]
fn a_writable_root_under_a_private_dir_reexposes_its_sockets() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    plan.writable_roots.push("/tmp/extra".into());
    facts.paths.insert("/tmp/extra".into(), dir("/tmp/extra"));
    facts.host_sockets = vec!["/tmp/extra/s".into(), "/tmp/other".into()];
    let (args, _) = build(&plan, &facts);
    // Depth order: `/tmp/extra` comes right after the `/tmp` tmpfs it sits in.
    let mut base = BASE.to_vec();
    base.splice(
        base.len() - 2..,
        ["--bind", "/tmp/extra", "/tmp/extra", "--tmpfs", "/var/tmp"],
    );
    let mask: &[&str] = &["--ro-bind", "/dev/null", "/tmp/extra/s"];
    assert_eq!(args, expected(Network::None, &[&base, ROOTS, mask, TAIL]));
}

#[test]
fn denied_paths_dir_file_missing_inside_and_outside() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    deny(&mut plan, &mut facts, "/etc/shadow", file("/etc/shadow"));
    deny(
        &mut plan,
        &mut facts,
        "/home/u/ws/secrets",
        dir("/home/u/ws/secrets"),
    );
    deny(
        &mut plan,
        &mut facts,
        "/home/u/ws/.env",
        missing("/home/u/ws/.env", "/home/u/ws/.env"),
    );
    deny(
        &mut plan,
        &mut facts,
        "/home/u/ws/a/b/key",
        missing("/home/u/ws/a/b/key", "/home/u/ws/a/b"),
    );
    deny(
        &mut plan,
        &mut facts,
        "/opt/nothing",
        missing("/opt/nothing", "/opt/nothing"),
    );
    let (args, created) = build(&plan, &facts);
    #[rustfmt::skip]
    let roots: &[&str] = &[
        "--bind", WS, WS,
        // `a` exists between the workspace and the missing `a/b`: pinned, so it
        // cannot be moved aside to recreate `a/b/key` elsewhere.
        "--bind", "/home/u/ws/a", "/home/u/ws/a",
        "--bind", RUN, RUN,
    ];
    #[rustfmt::skip]
    let masks: &[&str] = &[
        "--ro-bind", "/dev/null", "/etc/shadow",
        "--perms", "0000", "--tmpfs", "/home/u/ws/.env", "--remount-ro", "/home/u/ws/.env",
        "--perms", "0000", "--tmpfs", "/home/u/ws/secrets",
        "--remount-ro", "/home/u/ws/secrets",
        "--perms", "0000", "--tmpfs", "/home/u/ws/a/b", "--remount-ro", "/home/u/ws/a/b",
    ];
    assert_eq!(args, expected(Network::None, &[BASE, roots, masks, TAIL]));
    assert_eq!(
        created,
        vec![
            PathBuf::from("/home/u/ws/.env"),
            PathBuf::from("/home/u/ws/a/b"),
        ]
    );
}

#[test]
fn protected_paths_existing_missing_and_pinned() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/.loopwright/policies",
        missing(
            "/home/u/ws/.loopwright/policies",
            "/home/u/ws/.loopwright/policies",
        ),
    );
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/docs/AGENTS.md",
        file("/home/u/ws/docs/AGENTS.md"),
    );
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/.github",
        missing("/home/u/ws/.github", "/home/u/ws/.github"),
    );
    // Outside the writable roots everything is read-only already.
    protect(&mut plan, &mut facts, "/etc/hosts", file("/etc/hosts"));
    protect(
        &mut plan,
        &mut facts,
        "/opt/x.md",
        missing("/opt/x.md", "/opt/x.md"),
    );
    let (args, created) = build(&plan, &facts);
    #[rustfmt::skip]
    let roots: &[&str] = &[
        "--bind", WS, WS,
        // pins: the existing directories above the masked paths
        "--bind", "/home/u/ws/.loopwright", "/home/u/ws/.loopwright",
        "--bind", "/home/u/ws/docs", "/home/u/ws/docs",
        "--bind", RUN, RUN,
    ];
    #[rustfmt::skip]
    let masks: &[&str] = &[
        "--ro-bind", "/home/u/ws/.github", "/home/u/ws/.github",
        "--ro-bind", "/home/u/ws/.loopwright/policies", "/home/u/ws/.loopwright/policies",
        "--ro-bind", "/home/u/ws/docs/AGENTS.md", "/home/u/ws/docs/AGENTS.md",
    ];
    assert_eq!(args, expected(Network::None, &[BASE, roots, masks, TAIL]));
    // The launcher makes the placeholders; bwrap creates nothing.
    assert!(created.is_empty());
    assert_eq!(
        placeholders(&plan, &facts),
        paths(&["/home/u/ws/.github", "/home/u/ws/.loopwright/policies"])
    );
}

#[test]
fn placeholders_found_are_held_like_new_ones() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    // Another run's placeholders: at a protected path, and at `.loopwright`, which stops
    // `.loopwright/policies` from resolving (a missing path under a non-directory).
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/AGENTS.md",
        fact(PathKind::Other, "/home/u/ws/AGENTS.md"),
    );
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/.loopwright/policies",
        fact(
            PathKind::Missing {
                first_missing: "/home/u/ws/.loopwright/policies".into(),
                parent_is_dir: false,
            },
            "/home/u/ws/.loopwright/policies",
        ),
    );
    // A socket that is no placeholder stays an existing protected path.
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/CLAUDE.md",
        fact(PathKind::Other, "/home/u/ws/CLAUDE.md"),
    );
    // A placeholder outside the writable roots is read-only already.
    protect(
        &mut plan,
        &mut facts,
        "/srv/AGENTS.md",
        fact(PathKind::Other, "/srv/AGENTS.md"),
    );
    facts.placeholders = paths(&[
        "/home/u/ws/.loopwright",
        "/home/u/ws/AGENTS.md",
        "/srv/AGENTS.md",
    ]);
    let (args, created) = build(&plan, &facts);
    #[rustfmt::skip]
    let masks: &[&str] = &[
        "--ro-bind", "/home/u/ws/.loopwright", "/home/u/ws/.loopwright",
        "--ro-bind", "/home/u/ws/AGENTS.md", "/home/u/ws/AGENTS.md",
        "--ro-bind", "/home/u/ws/CLAUDE.md", "/home/u/ws/CLAUDE.md",
    ];
    assert_eq!(args, expected(Network::None, &[BASE, ROOTS, masks, TAIL]));
    assert!(created.is_empty());
    assert_eq!(
        placeholders(&plan, &facts),
        paths(&["/home/u/ws/.loopwright", "/home/u/ws/AGENTS.md"])
    );
}

#[test]
fn one_placeholder_serves_protected_paths_under_one_missing_directory() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    for path in ["/home/u/ws/.loopwright/a", "/home/u/ws/.loopwright/b"] {
        protect(
            &mut plan,
            &mut facts,
            path,
            missing(path, "/home/u/ws/.loopwright"),
        );
    }
    let (args, _) = build(&plan, &facts);
    #[rustfmt::skip]
    let masks: &[&str] = &["--ro-bind", "/home/u/ws/.loopwright", "/home/u/ws/.loopwright"];
    assert_eq!(args, expected(Network::None, &[BASE, ROOTS, masks, TAIL]));
    assert_eq!(
        placeholders(&plan, &facts),
        paths(&["/home/u/ws/.loopwright"])
    );
}

#[test]
fn denial_wins_over_protection_at_or_above_it() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    deny(
        &mut plan,
        &mut facts,
        "/home/u/ws/private",
        dir("/home/u/ws/private"),
    );
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/private/AGENTS.md",
        missing(
            "/home/u/ws/private/AGENTS.md",
            "/home/u/ws/private/AGENTS.md",
        ),
    );
    let (args, created) = build(&plan, &facts);
    #[rustfmt::skip]
    let rest: &[&str] = &[
        "--perms", "0000", "--tmpfs", "/home/u/ws/private",
        "--remount-ro", "/home/u/ws/private",
    ];
    assert_eq!(args, expected(Network::None, &[BASE, ROOTS, rest, TAIL]));
    assert!(created.is_empty());
}

#[test]
fn missing_path_under_a_file_pins_the_file() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    deny(
        &mut plan,
        &mut facts,
        "/home/u/ws/sub/notes.txt/x",
        fact(
            PathKind::Missing {
                first_missing: "/home/u/ws/sub/notes.txt/x".into(),
                parent_is_dir: false,
            },
            "/home/u/ws/sub/notes.txt/x",
        ),
    );
    let (args, created) = build(&plan, &facts);
    #[rustfmt::skip]
    let roots: &[&str] = &[
        "--bind", WS, WS,
        "--bind", "/home/u/ws/sub", "/home/u/ws/sub",
        "--bind", RUN, RUN,
        "--bind", "/home/u/ws/sub/notes.txt", "/home/u/ws/sub/notes.txt",
    ];
    assert_eq!(args, expected(Network::None, &[BASE, roots, TAIL]));
    assert!(created.is_empty());
}

#[test]
fn symlinked_paths_are_masked_at_their_real_location() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    let mut env = file("/home/u/secrets/env");
    env.symlinks = vec!["/home/u/ws/.env".into()];
    deny(&mut plan, &mut facts, "/home/u/ws/.env", env);
    // A protected path whose link lives outside every writable root is fine.
    let mut shared = file("/srv/shared/AGENTS.md");
    shared.symlinks = vec!["/srv/current".into()];
    protect(&mut plan, &mut facts, "/srv/current/AGENTS.md", shared);
    let (args, _) = build(&plan, &facts);
    let rest: &[&str] = &["--ro-bind", "/dev/null", "/home/u/secrets/env"];
    assert_eq!(args, expected(Network::None, &[BASE, ROOTS, rest, TAIL]));
}

#[test]
fn a_read_write_root_masks_missing_paths_everywhere() {
    let mut plan = base_plan(Network::None);
    plan.read_only_root = false;
    let mut facts = base_facts();
    deny(
        &mut plan,
        &mut facts,
        "/home/u/.aws",
        missing("/home/u/.aws", "/home/u/.aws"),
    );
    let (args, created) = build(&plan, &facts);
    let mut head: Vec<String> = expected(Network::None, &[]);
    let root_bind = head.len() - 3;
    head[root_bind] = "--bind".into();
    #[rustfmt::skip]
    let mounts: &[&str] = &[
        "--dev", "/dev",
        "--bind", "/home", "/home", // pin
        "--proc", "/proc",
        "--tmpfs", "/run",
        "--tmpfs", "/tmp",
        "--tmpfs", "/dev/shm",
        "--bind", "/home/u", "/home/u", // pin
        "--ro-bind", "/proc/sys", "/proc/sys",
        "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
        "--tmpfs", "/var/tmp",
        "--bind", WS, WS,
        "--bind", RUN, RUN,
        "--perms", "0000", "--tmpfs", "/home/u/.aws", "--remount-ro", "/home/u/.aws",
    ];
    head.extend(mounts.iter().chain(TAIL).map(|s| (*s).to_owned()));
    assert_eq!(args, head);
    assert_eq!(created, vec![PathBuf::from("/home/u/.aws")]);
}

#[test]
fn a_real_var_run_directory_gets_its_own_tmpfs() {
    let mut facts = base_facts();
    facts.private_dirs.push("/var/run".into());
    let (args, _) = build(&base_plan(Network::None), &facts);
    let mut base = BASE.to_vec();
    base.splice(
        base.len() - 2..,
        ["--tmpfs", "/var/run", "--tmpfs", "/var/tmp"],
    );
    assert_eq!(args, expected(Network::None, &[&base, ROOTS, TAIL]));
}

#[test]
fn no_stub_without_a_filter() {
    let built = argv(&base_plan(Network::None), &base_facts(), None, None).unwrap();
    let args = strings(&built.args);
    assert!(!args.contains(&"--seccomp".to_owned()));
    assert!(!args.contains(&SANDBOX_EXEC_PATH.to_owned()));
    assert_eq!(args, expected(Network::None, &[BASE, ROOTS, TAIL]));
}

/// The argv of a plan with a bridge, PID 1 and the stub from the palisade binary at `exe`, and
/// the index of its `--`.
fn pid1_and_stub_argv(exe: &str) -> (Vec<String>, usize) {
    let network = Network::OwnLoopback(Some(egress(BRIDGE_SOCKET)));
    let stub = SandboxExec {
        exe: exe.into(),
        reach: network.reach(),
        started_fd: None,
    };
    let built = argv(
        &base_plan(network),
        &base_facts(),
        Some(Path::new(exe)),
        Some(&stub),
    );
    let args = strings(&built.unwrap().args);
    let end = args.iter().position(|a| a == "--").unwrap();
    (args, end)
}

/// What that argv starts after its `--`, the binary seen in the sandbox at `at`: PID 1, the
/// stub, the bridge, the command.
#[rustfmt::skip]
fn started_from(at: &str) -> Vec<&str> {
    vec![
        at, "__sandbox-pid1", "--build", crate::BUILD, "--",
        at, "__sandbox-exec", "--reach", "own-loopback", "--",
        BRIDGE_PROGRAM, "bridge", "--socket", BRIDGE_SOCKET, "--",
        "make", "test",
    ]
}

/// Palisade's PID 1 (`--as-pid-1`) runs first, from the palisade binary bound once on the
/// private `/run` (the stub's too) when the sandbox would not see it unchanged where it is, and
/// starts the stub, then the bridge, then the command.
#[test]
fn palisade_is_pid_1_and_starts_the_stub() {
    let exe = Path::new("/tmp/palisade/bin/palisade");
    let (args, end) = pid1_and_stub_argv("/tmp/palisade/bin/palisade");
    assert_eq!(args[..3], ["--unshare-user", "--unshare-pid", "--as-pid-1"]);
    let bound = args
        .windows(3)
        .filter(|w| w[0] == "--ro-bind" && w[2] == SANDBOX_EXEC_PATH)
        .count();
    assert_eq!(bound, 1);
    assert_eq!(args[end + 1..], started_from(SANDBOX_EXEC_PATH));

    // Alone, PID 1 still gets the binary.
    let plan = base_plan(Network::None);
    let args = strings(&argv(&plan, &base_facts(), Some(exe), None).unwrap().args);
    assert!(
        args.windows(3)
            .any(|w| w == ["--ro-bind", "/tmp/palisade/bin/palisade", SANDBOX_EXEC_PATH])
    );
    let end = args.iter().position(|a| a == "--").unwrap();
    assert_eq!(
        args[end + 1..],
        [
            SANDBOX_EXEC_PATH,
            "__sandbox-pid1",
            "--build",
            crate::BUILD,
            "--",
            "make",
            "test"
        ]
    );
    // One binary for both, and a private `/run` to put it in.
    let stub = SandboxExec {
        exe: exe.into(),
        reach: Reach::Nothing,
        started_fd: None,
    };
    assert!(matches!(
        argv(
            &plan,
            &base_facts(),
            Some(Path::new("/other/palisade")),
            Some(&stub)
        ),
        Err(BwrapError::TwoExecutables(..))
    ));
    let mut facts = base_facts();
    facts.private_dirs.retain(|d| d != Path::new("/run"));
    assert!(matches!(
        argv(&plan, &facts, Some(exe), None),
        Err(BwrapError::SandboxExecNotPrivate)
    ));
}

/// Where the read-only root shows the binary unchanged, PID 1 and the stub run from its own
/// path and bwrap binds nothing for them (no `/run/palisade-exec`, not even with no private
/// `/run`).
#[test]
fn palisade_runs_in_place_where_the_read_only_root_shows_it() {
    let exe = "/opt/palisade/bin/palisade";
    let (args, end) = pid1_and_stub_argv(exe);
    assert!(
        !args.iter().any(|a| a.contains("palisade-exec")),
        "{args:?}"
    );
    // Not bound anywhere: bwrap's options never name it.
    assert!(!args[..end].contains(&exe.to_owned()));
    assert_eq!(args[end + 1..], started_from(exe));
    let mut facts = base_facts();
    facts.private_dirs.retain(|d| d != Path::new("/run"));
    let plan = base_plan(Network::None);
    assert!(argv(&plan, &facts, Some(Path::new(exe)), None).is_ok());
}

/// The binary runs in place only where no mount of the sandbox is at it or above it, under a
/// read-only root: a private directory, a writable root, a mask, a protected path and a
/// writable `/` each make the launcher bind it instead.
#[test]
fn the_binary_runs_in_place_only_where_no_mount_covers_it() {
    let in_place = |plan: &LaunchPlan, facts: &FsFacts, exe: &str| {
        let built = filesystem(plan, facts, &[]).unwrap();
        exe_in_place(Path::new(exe), &built.mounts, None)
    };
    let plan = base_plan(Network::None);
    let facts = base_facts();
    assert!(in_place(&plan, &facts, "/opt/palisade/bin/palisade"));
    // A name that merely starts like a mount's is not under it.
    assert!(in_place(&plan, &facts, "/tmpfoo/palisade"));
    assert!(in_place(&plan, &facts, "/home/u/wsx/palisade"));
    for covered in [
        "/tmp/palisade",
        "/run/palisade",
        "/var/tmp/x/palisade",
        "/dev/palisade",
        "/proc/palisade",
        "/home/u/ws/target/release/palisade",
        "/home/u/ws",
        RUN,
    ] {
        assert!(!in_place(&plan, &facts, covered), "{covered}");
    }
    // Under a denied directory, or a protected one.
    let mut denied = (base_plan(Network::None), base_facts());
    deny(
        &mut denied.0,
        &mut denied.1,
        "/opt/secret",
        dir("/opt/secret"),
    );
    assert!(!in_place(&denied.0, &denied.1, "/opt/secret/palisade"));
    assert!(in_place(&denied.0, &denied.1, "/opt/palisade/bin/palisade"));
    // A protected path outside every writable root needs no mount (the root is read-only):
    // the binary there is shown unchanged.
    let mut protected = (base_plan(Network::None), base_facts());
    protect(
        &mut protected.0,
        &mut protected.1,
        "/opt/palisade",
        dir("/opt/palisade"),
    );
    assert!(in_place(
        &protected.0,
        &protected.1,
        "/opt/palisade/bin/palisade"
    ));
    // A writable `/`: nothing is in place.
    let mut writable = base_plan(Network::None);
    writable.read_only_root = false;
    assert!(!in_place(&writable, &facts, "/opt/palisade/bin/palisade"));
}

fn refusal(plan: &LaunchPlan, facts: &FsFacts) -> BwrapError {
    argv(plan, facts, None, None).unwrap_err()
}

#[test]
fn refuses_bad_plans() {
    let facts = base_facts();
    let mut plan = base_plan(Network::None);
    plan.command.clear();
    assert!(matches!(refusal(&plan, &facts), BwrapError::EmptyCommand));

    let mut plan = base_plan(Network::None);
    plan.denied_read_paths.push("home/u/.ssh".into());
    assert!(matches!(
        refusal(&plan, &facts),
        BwrapError::RelativePath(_)
    ));

    let mut plan = base_plan(Network::None);
    plan.protected_paths.push("/home/u/ws/../x".into());
    assert!(matches!(
        refusal(&plan, &facts),
        BwrapError::ParentComponent(_)
    ));

    let mut plan = base_plan(Network::None);
    plan.protected_paths
        .push(PathBuf::from(OsStr::from_bytes(b"/home/u/ws/a\0b")));
    assert!(matches!(refusal(&plan, &facts), BwrapError::Nul { .. }));

    let mut plan = base_plan(Network::None);
    plan.command.push(OsString::from_vec(b"a\0b".to_vec()));
    assert!(matches!(refusal(&plan, &facts), BwrapError::Nul { .. }));

    let mut plan = base_plan(Network::None);
    plan.env.push(("A=B".into(), "c".into()));
    assert!(matches!(refusal(&plan, &facts), BwrapError::EnvName(_)));

    let mut plan = base_plan(Network::None);
    plan.env.push(("".into(), "c".into()));
    assert!(matches!(refusal(&plan, &facts), BwrapError::EnvName(_)));

    let mut plan = base_plan(Network::None);
    plan.denied_read_paths.push("/home/u/.ssh".into());
    assert!(matches!(refusal(&plan, &facts), BwrapError::MissingFact(_)));

    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    plan.writable_roots.push("/gone".into());
    facts
        .paths
        .insert("/gone".into(), missing("/gone", "/gone"));
    assert!(matches!(
        refusal(&plan, &facts),
        BwrapError::BadWritableRoot(_)
    ));
}

#[test]
fn refuses_a_protected_symlink_inside_a_writable_root() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    let mut claude = file("/home/u/ws/AGENTS.md");
    claude.symlinks = vec!["/home/u/ws/CLAUDE.md".into()];
    protect(&mut plan, &mut facts, "/home/u/ws/CLAUDE.md", claude);
    assert!(matches!(
        refusal(&plan, &facts),
        BwrapError::ProtectedSymlink { link, .. } if link == Path::new("/home/u/ws/CLAUDE.md")
    ));
}

#[test]
fn refuses_files_with_other_hard_links() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    deny(
        &mut plan,
        &mut facts,
        "/home/u/.netrc",
        fact(PathKind::File { hard_links: 2 }, "/home/u/.netrc"),
    );
    assert!(matches!(
        refusal(&plan, &facts),
        BwrapError::HardLinks { links: 2, .. }
    ));

    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    protect(
        &mut plan,
        &mut facts,
        "/home/u/ws/AGENTS.md",
        fact(PathKind::File { hard_links: 3 }, "/home/u/ws/AGENTS.md"),
    );
    assert!(matches!(
        refusal(&plan, &facts),
        BwrapError::HardLinks { links: 3, .. }
    ));
}

#[test]
fn refuses_masks_over_writable_roots() {
    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    deny(&mut plan, &mut facts, "/home/u", dir("/home/u"));
    assert!(matches!(
        refusal(&plan, &facts),
        BwrapError::DeniedContainsWritable { .. }
    ));

    let mut plan = base_plan(Network::None);
    let mut facts = base_facts();
    protect(&mut plan, &mut facts, WS, dir(WS));
    assert!(matches!(
        refusal(&plan, &facts),
        BwrapError::MaskContainsMount { .. }
    ));
}

#[test]
fn trial_argv_is_exact() {
    assert_eq!(
        trial_argv(),
        vec![
            "--unshare-user",
            "--unshare-pid",
            "--as-pid-1",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--ro-bind",
            "/proc/sys",
            "/proc/sys",
            "--ro-bind-try",
            "/proc/sysrq-trigger",
            "/proc/sysrq-trigger",
            "--perms",
            "0000",
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev/shm",
            "--ro-bind",
            "/dev/null",
            "/dev/palisade-trial",
            "--clearenv",
            "--",
            "/bin/true",
        ]
    );
}

#[test]
fn trial_program_comes_last_after_separator() {
    let argv = trial_argv();
    let n = argv.len();
    assert_eq!(
        argv.get(n.saturating_sub(2)).map(String::as_str),
        Some("--")
    );
    assert_eq!(argv.last().map(String::as_str), Some(TRIAL_PROGRAM));
}
