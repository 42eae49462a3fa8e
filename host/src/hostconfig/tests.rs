#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]
use super::*;
use palisade_engine::environment;
use palisade_engine::output::sha256_hex;

const HEAD: &str = "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\n";

fn spec(body: &str) -> Spec {
    parse(&format!("{HEAD}spec:\n{body}"), "t.yaml").unwrap()
}

fn error_paths(text: &str) -> Vec<String> {
    match parse(text, "t.yaml") {
        Err(HostConfigError::Invalid { errors, .. }) => {
            errors.into_iter().map(|e| e.path).collect()
        }
        other => panic!("expected invalid, got {other:?}"),
    }
}

#[test]
fn a_full_file_parses() {
    let s = spec(
        "  sessionKind: managed\n  defaultBackendOrder: [linux-landlock, linux-bwrap]\n  allowDirectDedicated: true\n  allowWorkspaceMode: false\n  writableRoots: [/srv/cache]\n  taskTempDirs: [/var/tmp/tasks]\n  resultsDir: /srv/results\n  dockerRuntimeProfiles: /etc/palisade/profiles.yaml\n  environment:\n    allow: [LANG, LC_*, NPM_TOKEN]\n  budgets: {timeoutSeconds: 600, memoryMiB: 2048, maxProcesses: 128, cpuSeconds: 300}\n",
    );
    assert_eq!(s.session_kind, Some(SessionKind::Managed));
    assert_eq!(
        s.default_backend_order,
        Some(vec![Backend::LinuxLandlock, Backend::LinuxBwrap])
    );
    assert_eq!(s.allow_direct_dedicated, Some(true));
    assert_eq!(s.allow_workspace_mode, Some(false));
    assert_eq!(s.results_dir.as_deref(), Some("/srv/results"));
    assert_eq!(s.environment.unwrap(), ["LANG", "LC_*", "NPM_TOKEN"]);
    assert_eq!(s.budgets.memory_mib, Some(2048));
    // An empty spec (or none at all) is valid and sets nothing.
    assert_eq!(parse(HEAD, "t").unwrap(), Spec::default());
}

#[test]
fn every_offending_field_is_listed() {
    let text = format!(
        "{HEAD}metadata: {{name: x, owner: y}}\nextra: 1\nspec:\n  sessionKind: laptop\n  defaultBackendOrder: [linux-bwrap, nope, linux-bwrap]\n  allowDirectDedicated: 'yes'\n  writableRoots: [relative, /a/../b, /, /ok, /ok]\n  resultsDir: /r/\n  dockerRuntimeProfiles: profiles.yaml\n  environment: {{allow: ['*', AWS_*, LANG, LANG, 'A-B'], set: {{}}}}\n  budgets: {{timeoutSeconds: 0, memoryMiB: big, tokens: 5}}\n  budget: {{}}\n  sessionKind: cli\n"
    );
    assert_eq!(
        error_paths(&text),
        [
            "metadata.owner",
            "extra",
            "spec.sessionKind",
            "spec.defaultBackendOrder[1]",
            "spec.defaultBackendOrder[2]",
            "spec.allowDirectDedicated",
            "spec.writableRoots[0]",
            "spec.writableRoots[1]",
            "spec.writableRoots[2]",
            "spec.writableRoots[4]",
            "spec.resultsDir",
            "spec.dockerRuntimeProfiles",
            "spec.environment.allow[0]",
            "spec.environment.allow[1]",
            "spec.environment.allow[3]",
            "spec.environment.allow[4]",
            "spec.environment.set",
            "spec.budgets.timeoutSeconds",
            "spec.budgets.memoryMiB",
            "spec.budgets.tokens",
            "spec.budget",
            // The repeat, where it is in the document (as in a taskpack).
            "spec.sessionKind",
        ]
    );
}

#[test]
fn document_shape_is_checked() {
    assert_eq!(error_paths(""), ["document"]);
    assert_eq!(error_paths("[1]\n"), ["document"]);
    assert_eq!(error_paths("spec: {}\n"), ["apiVersion", "kind"]);
    assert_eq!(
        error_paths("apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\n"),
        ["apiVersion", "kind"]
    );
    assert_eq!(error_paths(&format!("{HEAD}spec: [1]\n")), ["spec"]);
    assert_eq!(
        error_paths(&format!("{HEAD}spec: {{environment: {{}}}}\n")),
        ["spec.environment.allow"]
    );
    assert_eq!(error_paths("a: [\n"), ["document"]);
}

#[test]
fn user_file_may_only_tighten() {
    let system = spec(
        "  sessionKind: cli\n  defaultBackendOrder: [linux-bwrap, linux-landlock, docker]\n  allowDirectDedicated: false\n  allowWorkspaceMode: false\n  writableRoots: [/a, /b]\n  taskTempDirs: [/t]\n  resultsDir: /r\n  dockerRuntimeProfiles: /p.yaml\n  environment: {allow: [LANG, LC_*, GITHUB_*, NPM_TOKEN]}\n  budgets: {timeoutSeconds: 600, memoryMiB: 1024}\n",
    );
    // Tighter in every field: accepted.
    let tighter = spec(
        "  sessionKind: turnkey\n  defaultBackendOrder: [linux-bwrap, docker]\n  allowDirectDedicated: false\n  allowWorkspaceMode: false\n  writableRoots: [/b]\n  taskTempDirs: []\n  resultsDir: /r\n  dockerRuntimeProfiles: /p.yaml\n  environment: {allow: [LC_ALL, GITHUB_SHA, GITHUB_R*, NPM_TOKEN]}\n  budgets: {timeoutSeconds: 60, memoryMiB: 1024, cpuSeconds: 5}\n",
    );
    assert_eq!(tighten_errors(&system, &tighter).into_listed(), []);
    // Looser in every field: each listed.
    let looser = spec(
        "  sessionKind: managed\n  defaultBackendOrder: [linux-landlock, linux-bwrap]\n  allowDirectDedicated: true\n  allowWorkspaceMode: true\n  writableRoots: [/b, /c]\n  taskTempDirs: [/u]\n  resultsDir: /elsewhere\n  dockerRuntimeProfiles: /q.yaml\n  environment: {allow: [LANG, TERM, GITHUB_TOKEN, X*, L*]}\n  budgets: {timeoutSeconds: 601, memoryMiB: 1024}\n",
    );
    let paths: Vec<String> = tighten_errors(&system, &looser)
        .into_listed()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(
        paths,
        [
            "spec.sessionKind",
            "spec.defaultBackendOrder",
            "spec.allowDirectDedicated",
            "spec.allowWorkspaceMode",
            "spec.writableRoots[1]",
            "spec.taskTempDirs[0]",
            "spec.resultsDir",
            "spec.dockerRuntimeProfiles",
            "spec.environment.allow[1]",
            "spec.environment.allow[2]",
            "spec.environment.allow[3]",
            "spec.environment.allow[4]",
            "spec.budgets.timeoutSeconds",
        ]
    );
    // Whatever the system leaves unset is the user's to set.
    assert_eq!(tighten_errors(&Spec::default(), &looser).into_listed(), []);
    // `true` over a system `true` is not loosening.
    let permissive = spec("  allowDirectDedicated: true\n");
    assert_eq!(
        tighten_errors(&permissive, &spec("  allowDirectDedicated: true\n")).into_listed(),
        []
    );
}

#[test]
fn merge_takes_the_upper_value_and_records_origins() {
    let system = spec(
        "  sessionKind: managed\n  budgets: {timeoutSeconds: 600, memoryMiB: 100}\n  environment: {allow: [LANG]}\n",
    );
    let user = spec("  budgets: {timeoutSeconds: 60}\n");
    let e = merge(&system, Some((&user, Source::Flag)));
    assert_eq!(
        e.session_kind,
        Setting {
            value: Some(SessionKind::Managed),
            from: Source::System
        }
    );
    assert_eq!(
        e.budgets.timeout_seconds,
        Setting {
            value: Some(60),
            from: Source::Flag
        }
    );
    assert_eq!(
        e.budgets.memory_mib,
        Setting {
            value: Some(100),
            from: Source::System
        }
    );
    assert_eq!(
        e.budgets.cpu_seconds,
        Setting {
            value: None,
            from: Source::Default
        }
    );
    assert_eq!(e.environment.value, ["LANG"]);
    assert_eq!(e.default_backend_order.from, Source::Default);
    let defaults = HostConfig::defaults();
    assert_eq!(defaults.environment_allowlist(), None);
    assert_eq!(
        defaults.effective.environment.value.len(),
        environment::DEFAULT_ALLOWLIST.len()
    );
}

#[test]
fn flags_may_only_tighten_the_configuration() {
    let mut config = HostConfig::defaults();
    let flags = |kind: Option<SessionKind>, dd: bool| HostFlags {
        session_kind: kind,
        allow_direct_dedicated: dd,
    };
    // Unconfigured: the flags decide.
    assert_eq!(
        host_choices(&config, &flags(None, false)).unwrap(),
        (SessionKind::Cli, false)
    );
    assert_eq!(
        host_choices(&config, &flags(Some(SessionKind::Managed), true)).unwrap(),
        (SessionKind::Managed, true)
    );
    // Configured.
    config.effective.session_kind = Setting {
        value: Some(SessionKind::Managed),
        from: Source::System,
    };
    config.effective.allow_direct_dedicated = Setting {
        value: Some(false),
        from: Source::System,
    };
    assert_eq!(
        host_choices(&config, &flags(None, false)).unwrap(),
        (SessionKind::Managed, false)
    );
    assert_eq!(
        host_choices(&config, &flags(Some(SessionKind::Turnkey), false))
            .unwrap()
            .0,
        SessionKind::Turnkey
    );
    assert!(matches!(
        host_choices(&config, &flags(Some(SessionKind::Cli), false)),
        Err(Forbidden::SessionKind { .. })
    ));
    assert!(matches!(
        host_choices(&config, &flags(None, true)),
        Err(Forbidden::DirectDedicated { .. })
    ));
    config.effective.allow_direct_dedicated = Setting {
        value: Some(true),
        from: Source::User,
    };
    assert!(host_choices(&config, &flags(None, false)).unwrap().1);
}

#[test]
fn ceilings_reach_the_engine_in_its_units() {
    let text = "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec:\n  budgets: {timeoutSeconds: 60, memoryMiB: 1, cpuSeconds: 9}\n";
    let spec = parse(text, "host.yaml").unwrap();
    let config = HostConfig {
        files: Vec::new(),
        absent: Vec::new(),
        effective: merge(&spec, None),
    };
    assert_eq!(
        config.budget_ceilings(),
        Some(palisade_engine::model::BudgetLimits {
            timeout_millis: Some(60_000),
            memory_bytes: Some(1 << 20),
            max_processes: None,
            cpu_seconds: Some(9),
        })
    );
    // No ceilings: absent from the facts, so such decisions keep their bytes.
    assert_eq!(HostConfig::defaults().budget_ceilings(), None);
}

#[test]
fn files_are_read_with_care() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("host.yaml");
    std::fs::write(&good, format!("{HEAD}spec: {{sessionKind: turnkey}}\n")).unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).unwrap();
    let missing = dir.path().join("missing.yaml");
    // A missing optional file is fine; a missing `--host-config` is not.
    let config = load(&Locations {
        system: Some(missing.clone()),
        user: Some(good.clone()),
        flag: None,
    })
    .unwrap();
    assert_eq!(config.files.len(), 1);
    assert_eq!(config.files[0].source, Source::User);
    assert_eq!(
        config.files[0].sha256,
        sha256_hex(&std::fs::read(&good).unwrap())
    );
    assert_eq!(config.absent, [missing.display().to_string()]);
    assert!(matches!(
        load(&Locations {
            system: None,
            user: None,
            flag: Some(missing.clone())
        }),
        Err(HostConfigError::Read { .. })
    ));
    // The flag replaces the per-user file.
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, format!("{HEAD}spec: {{sessionKind: managed}}\n")).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = load(&Locations {
        system: None,
        user: Some(good.clone()),
        flag: Some(other.clone()),
    })
    .unwrap();
    assert_eq!(
        config.effective.session_kind.value,
        Some(SessionKind::Managed)
    );
    assert_eq!(config.effective.session_kind.from, Source::Flag);
    // World-writable: refused.
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(matches!(
        load(&Locations {
            system: None,
            user: Some(good.clone()),
            flag: None
        }),
        Err(HostConfigError::Unsafe { .. })
    ));
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Too large: refused before parsing.
    std::fs::write(&other, vec![b'#'; usize::try_from(MAX_BYTES).unwrap() + 1]).unwrap();
    assert!(matches!(
        load(&Locations {
            system: None,
            user: None,
            flag: Some(other.clone())
        }),
        Err(HostConfigError::TooLarge { .. })
    ));
    // A per-user file that loosens the system one is refused as a whole.
    let system = dir.path().join("system.yaml");
    std::fs::write(
        &system,
        format!("{HEAD}spec: {{allowWorkspaceMode: false}}\n"),
    )
    .unwrap();
    std::fs::write(
        &other,
        format!("{HEAD}spec: {{allowWorkspaceMode: true}}\n"),
    )
    .unwrap();
    let result = load(&Locations {
        system: Some(system.clone()),
        user: None,
        flag: Some(other.clone()),
    });
    match result {
        Err(HostConfigError::Loosens { errors, .. }) => {
            assert_eq!(errors[0].path, "spec.allowWorkspaceMode")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn denied_paths_exemptions_and_the_home_are_read_and_only_tighten() {
    let system = spec(
        "  deniedReadPaths: [/srv/vault, '~/.config/op']\n  exemptDeniedReadPaths: ['~/.npmrc']\n  allowHomeWritable: false\n",
    );
    assert_eq!(
        system.denied_read_paths,
        Some(vec!["/srv/vault".into(), "~/.config/op".into()])
    );
    assert_eq!(
        system.exempt_denied_read_paths,
        Some(vec!["~/.npmrc".into()])
    );
    // Denying more, exempting less: tighter.
    let tighter = spec(
        "  deniedReadPaths: [/srv/vault, '~/.config/op', /opt/keys]\n  exemptDeniedReadPaths: []\n",
    );
    assert_eq!(tighter_paths(&system, &tighter), Vec::<String>::new());
    // Dropping a denied path, exempting another store, allowing the home: looser, each said.
    let looser = spec(
        "  deniedReadPaths: [/srv/vault]\n  exemptDeniedReadPaths: ['~/.npmrc', '~/.ssh']\n  allowHomeWritable: true\n",
    );
    assert_eq!(
        tighter_paths(&system, &looser),
        [
            "spec.allowHomeWritable",
            "spec.deniedReadPaths",
            "spec.exemptDeniedReadPaths[1]"
        ]
    );
    // Every bad entry at its path: a relative path, `..`, a name that is not a built-in store.
    assert_eq!(
        error_paths(&format!(
            "{HEAD}spec:\n  deniedReadPaths: [relative, /a/../b, /ok, /ok]\n  exemptDeniedReadPaths: ['~/.bashrc']\n"
        )),
        [
            "spec.deniedReadPaths[0]",
            "spec.deniedReadPaths[1]",
            "spec.deniedReadPaths[3]",
            "spec.exemptDeniedReadPaths[0]"
        ]
    );
}

/// Git's protected paths are exempted by rule name only, once each; a per-user file may exempt
/// only what the system file does.
#[test]
fn protected_path_exemptions_name_git_rules_and_only_tighten() {
    let system = spec(
        "  exemptProtectedPaths: [.git/config, .git/config.worktree]
",
    );
    assert_eq!(
        system.exempt_protected_paths,
        Some(vec![".git/config".into(), ".git/config.worktree".into()])
    );
    let tighter = spec(
        "  exemptProtectedPaths: [.git/config]
",
    );
    assert_eq!(tighter_paths(&system, &tighter), Vec::<String>::new());
    let looser = spec(
        "  exemptProtectedPaths: [.git/config, .git/hooks]
",
    );
    assert_eq!(
        tighter_paths(&system, &looser),
        ["spec.exemptProtectedPaths[1]"]
    );
    // The seed's paths, an absolute path and a repeat are each refused at their index.
    assert_eq!(
        error_paths(&format!(
            "{HEAD}spec:\n  exemptProtectedPaths: [AGENTS.md, /w/.git/hooks, .git/hooks, .git/hooks]\n"
        )),
        [
            "spec.exemptProtectedPaths[0]",
            "spec.exemptProtectedPaths[1]",
            "spec.exemptProtectedPaths[3]"
        ]
    );
}

fn tighter_paths(system: &Spec, user: &Spec) -> Vec<String> {
    tighten_errors(system, user)
        .into_listed()
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn root_granting_sockets_are_read_checked_and_only_tighten() {
    let system = spec("  allowRootGrantingSockets: [/run/docker.sock, /run/podman/podman.sock]\n");
    assert_eq!(
        system.allow_root_granting_sockets,
        Some(vec![
            "/run/docker.sock".into(),
            "/run/podman/podman.sock".into()
        ])
    );
    // Unset: none may be allowed, and nothing reaches the engine.
    assert_eq!(
        spec("  loopbackPorts: [1]\n").allow_root_granting_sockets,
        None
    );
    assert_eq!(HostConfig::defaults().allow_root_granting_sockets(), None);
    // Every bad entry at its path: relative, `..`, `.`, a trailing `/`, a repeat, not a string.
    assert_eq!(
        error_paths(&format!(
            "{HEAD}spec:\n  allowRootGrantingSockets: [docker.sock, /run/../docker.sock, /run/./d.sock, /run/d.sock/, /run/docker.sock, /run/docker.sock, 5]\n"
        )),
        [
            "spec.allowRootGrantingSockets[0]",
            "spec.allowRootGrantingSockets[1]",
            "spec.allowRootGrantingSockets[2]",
            "spec.allowRootGrantingSockets[3]",
            "spec.allowRootGrantingSockets[5]",
            "spec.allowRootGrantingSockets[6]",
        ]
    );
    assert_eq!(
        error_paths(&format!(
            "{HEAD}spec:\n  allowRootGrantingSockets: /run/docker.sock\n"
        )),
        ["spec.allowRootGrantingSockets"]
    );
    // At most 64 entries.
    let many: Vec<String> = (0..65).map(|i| format!("/run/s{i}.sock")).collect();
    assert_eq!(
        error_paths(&format!(
            "{HEAD}spec:\n  allowRootGrantingSockets: [{}]\n",
            many.join(", ")
        )),
        ["spec.allowRootGrantingSockets"]
    );
    let sixty_four = spec(&format!(
        "  allowRootGrantingSockets: [{}]\n",
        many[..64].join(", ")
    ));
    assert_eq!(sixty_four.allow_root_granting_sockets.unwrap().len(), 64);
    // A subset of the system's list (none at all included): tighter.
    assert_eq!(
        tighter_paths(
            &system,
            &spec("  allowRootGrantingSockets: [/run/podman/podman.sock]\n")
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        tighter_paths(&system, &spec("  allowRootGrantingSockets: []\n")),
        Vec::<String>::new()
    );
    // A path the system does not list: looser, at its index.
    let looser = spec("  allowRootGrantingSockets: [/run/docker.sock, /var/run/docker.sock]\n");
    let errors = tighten_errors(&system, &looser).into_listed();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].path, "spec.allowRootGrantingSockets[1]");
    assert!(
        errors[0].message.contains("/var/run/docker.sock")
            && errors[0].message.contains("may only tighten"),
        "{}",
        errors[0].message
    );
    // The system's empty list is a ceiling too.
    assert_eq!(
        tighter_paths(&spec("  allowRootGrantingSockets: []\n"), &looser),
        [
            "spec.allowRootGrantingSockets[0]",
            "spec.allowRootGrantingSockets[1]"
        ]
    );
    // Where the system leaves it unset, it is the user's to set (as every field).
    assert_eq!(
        tighter_paths(&Spec::default(), &looser),
        Vec::<String>::new()
    );
}

#[test]
fn root_granting_sockets_layer_with_their_origin_and_reach_the_facts() {
    let system = spec("  allowRootGrantingSockets: [/run/docker.sock, /run/containerd.sock]\n");
    // Only the system sets it: the system's applies.
    let e = merge(
        &system,
        Some((&spec("  loopbackPorts: [8080]\n"), Source::User)),
    );
    assert_eq!(
        e.allow_root_granting_sockets,
        Setting {
            value: Some(vec![
                "/run/docker.sock".into(),
                "/run/containerd.sock".into()
            ]),
            from: Source::System
        }
    );
    // Both set it: the (tighter) upper file's.
    let user = spec("  allowRootGrantingSockets: [/run/containerd.sock]\n");
    let e = merge(&system, Some((&user, Source::Flag)));
    assert_eq!(
        e.allow_root_granting_sockets,
        Setting {
            value: Some(vec!["/run/containerd.sock".into()]),
            from: Source::Flag
        }
    );
    // Neither: not configured.
    assert_eq!(
        HostConfig::defaults().effective.allow_root_granting_sockets,
        Setting {
            value: None,
            from: Source::Default
        }
    );
    // The accessor and the fact options carry it; `doctor` shows it with its origin.
    let config = HostConfig {
        files: Vec::new(),
        absent: Vec::new(),
        effective: e,
    };
    assert_eq!(
        config.allow_root_granting_sockets(),
        Some(vec!["/run/containerd.sock".to_owned()])
    );
    let options = fact_options(&config, &HostFlags::default(), None, &[]).unwrap();
    assert_eq!(
        options.allow_root_granting_sockets,
        Some(vec!["/run/containerd.sock".to_owned()])
    );
    assert!(
        config
            .render_text()
            .contains("allowRootGrantingSockets /run/containerd.sock [flag]"),
        "{}",
        config.render_text()
    );
    assert!(
        HostConfig::defaults()
            .render_text()
            .contains("allowRootGrantingSockets - [default]")
    );
    assert_eq!(
        config.record()["effective"]["allowRootGrantingSockets"],
        serde_json::json!({"value": ["/run/containerd.sock"], "from": "flag"})
    );
}

#[test]
fn a_user_file_adding_a_root_granting_socket_is_refused_as_a_whole() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let system = dir.path().join("system.yaml");
    let user = dir.path().join("user.yaml");
    for (path, body) in [
        (
            &system,
            "{allowRootGrantingSockets: [/run/podman/podman.sock]}",
        ),
        (&user, "{allowRootGrantingSockets: [/run/docker.sock]}"),
    ] {
        std::fs::write(path, format!("{HEAD}spec: {body}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let result = load(&Locations {
        system: Some(system.clone()),
        user: Some(user.clone()),
        flag: None,
    });
    match result {
        Err(HostConfigError::Loosens { errors, .. }) => {
            assert_eq!(errors.len(), 1);
            assert_eq!(errors[0].path, "spec.allowRootGrantingSockets[0]");
        }
        other => panic!("{other:?}"),
    }
    // Without the user's file, the system's list is in force.
    let config = load(&Locations {
        system: Some(system),
        user: None,
        flag: None,
    })
    .unwrap();
    assert_eq!(
        config.allow_root_granting_sockets(),
        Some(vec!["/run/podman/podman.sock".to_owned()])
    );
}
