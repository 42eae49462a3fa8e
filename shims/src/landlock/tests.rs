#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::symlink;

use super::rights::*;
use super::*;
use crate::plan::{Budgets, LandlockProc, Mechanism};

const HOME: &str = "/home/dev";
const WORKSPACE: &str = "/home/dev/src/app";
const RUN_TMP: &str = "/tmp/palisade-run-1";

fn launch(denied: &[&str]) -> LaunchPlan {
    LaunchPlan {
        mechanism: Mechanism::Landlock(LandlockProc::Own),
        network: Network::None,
        workspace: WORKSPACE.into(),
        writable_roots: vec![WORKSPACE.into(), RUN_TMP.into()],
        read_only_root: true,
        denied_read_paths: denied.iter().map(PathBuf::from).collect(),
        protected_paths: vec![],
        syscall_filter: true,
        command: vec!["true".into()],
        env: vec![],
        run_temp_dir: RUN_TMP.into(),
        budgets: Budgets::default(),
        unix_sockets: Vec::new(),
    }
}

fn entries(list: &[(&str, EntryKind)]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = list
        .iter()
        .map(|(name, kind)| Entry {
            name: name.into(),
            kind: *kind,
        })
        .collect();
    entries.sort();
    entries
}

/// What a host with `/home/dev` (dotfiles, a symlink, `src/app`) would measure.
fn facts() -> ListingFacts {
    use EntryKind::{Dir, File, Other, Symlink};
    let mut facts = ListingFacts::default();
    facts.listings.insert(
        "/".into(),
        entries(&[
            ("bin", Symlink),
            ("dev", Dir),
            ("etc", Dir),
            ("home", Dir),
            ("proc", Dir),
            ("tmp", Dir),
            ("usr", Dir),
        ]),
    );
    facts
        .listings
        .insert("/home".into(), entries(&[("dev", Dir), ("other", Dir)]));
    facts.listings.insert(
        HOME.into(),
        entries(&[
            (".bashrc", File),
            (".config", Dir),
            (".ssh", Dir),
            ("keys", Symlink),
            ("mail.sock", Other),
            ("src", Dir),
        ]),
    );
    for root in [WORKSPACE, RUN_TMP, "/dev/pts"] {
        facts.kinds.insert(root.into(), Dir);
    }
    for device in ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/tty"] {
        facts.kinds.insert(device.into(), Other);
    }
    facts
}

fn rule<'a>(plan: &'a RulesetPlan, path: &str) -> Option<&'a PathRule> {
    plan.rules.iter().find(|rule| rule.path == Path::new(path))
}

#[test]
fn nothing_denied_reads_everything() {
    let plan = ruleset_plan(&launch(&[]), &facts()).unwrap();
    insta::assert_json_snapshot!("nothing_denied", plan);
    let root = rule(&plan, "/").unwrap();
    assert_eq!(root.access, READ.into());
    assert_eq!(plan.min_abi, 4);
}

#[test]
fn ssh_denied_grants_siblings_only() {
    let plan = ruleset_plan(&launch(&["/home/dev/.ssh"]), &facts()).unwrap();
    insta::assert_json_snapshot!("ssh_denied", plan);
    // No rule on the denied path, on anything beneath it, or on any of its ancestors — but
    // the one for its observed mask, added only on the mask (`restrict`).
    let mask = rule(&plan, "/home/dev/.ssh").unwrap();
    assert_eq!(mask.reasons, [Reason::ObservedMask].into());
    for rule in plan.rules.iter().filter(|rule| rule != &mask) {
        assert!(
            !Path::new("/home/dev/.ssh").starts_with(&rule.path)
                && !rule.path.starts_with("/home/dev/.ssh"),
            "{rule:?}"
        );
    }
    assert_eq!(
        rule(&plan, "/home/dev/.config").unwrap().access,
        READ.into()
    );
    // Files get no directory-only right; symlinks get no rule at all.
    let file = [FsRight::Execute, FsRight::ReadFile].into();
    assert_eq!(rule(&plan, "/home/dev/.bashrc").unwrap().access, file);
    assert_eq!(rule(&plan, "/home/dev/mail.sock").unwrap().access, file);
    assert!(rule(&plan, "/home/dev/keys").is_none());
    assert!(rule(&plan, "/bin").is_none());
    // The workspace is an (ungranted) sibling subtree `src` plus its own writable rule.
    assert_eq!(rule(&plan, "/home/dev/src").unwrap().access, READ.into());
    assert!(
        rule(&plan, WORKSPACE)
            .unwrap()
            .access
            .contains(&FsRight::WriteFile)
    );
}

#[test]
fn missing_denied_path_is_simply_not_granted() {
    // `.aws` does not exist: the listing of `/home/dev` does not have it, so every entry
    // there is granted and nothing is where it will appear.
    let missing = ruleset_plan(&launch(&["/home/dev/.aws/credentials"]), &facts()).unwrap();
    insta::assert_json_snapshot!("missing_denied", missing);
    assert!(rule(&missing, "/home/dev/.ssh").is_some());
    assert!(rule(&missing, "/home/dev").is_none());
    assert!(rule(&missing, "/home/dev/.aws").is_none());
}

#[test]
fn writable_roots_get_everything_but_devices() {
    let plan = ruleset_plan(&launch(&["/home/dev/.ssh"]), &facts()).unwrap();
    let workspace = rule(&plan, WORKSPACE).unwrap();
    assert_eq!(workspace.access, WRITABLE.into());
    for right in [FsRight::MakeChar, FsRight::MakeBlock, FsRight::IoctlDev] {
        assert!(!workspace.access.contains(&right), "{right:?}");
        assert!(plan.handled_fs.contains(&right), "{right:?}");
    }
    assert_eq!(plan.handled_fs.len(), 16);
    assert!(
        rule(&plan, RUN_TMP)
            .unwrap()
            .reasons
            .contains(&Reason::WritableRoot)
    );
}

#[test]
fn devices_only_if_they_exist() {
    let plan = ruleset_plan(&launch(&[]), &facts()).unwrap();
    let null = rule(&plan, "/dev/null").unwrap();
    assert_eq!(null.access, [FsRight::ReadFile, FsRight::WriteFile].into());
    assert!(!null.dir);
    let urandom = rule(&plan, "/dev/urandom").unwrap();
    assert_eq!(urandom.access, [FsRight::ReadFile].into());
    assert!(
        rule(&plan, "/dev/tty")
            .unwrap()
            .access
            .contains(&FsRight::IoctlDev)
    );
    assert!(rule(&plan, "/dev/pts").unwrap().dir);
    assert!(rule(&plan, "/dev/full").is_none());
    assert!(rule(&plan, "/dev/ptmx").is_none());
}

#[test]
fn device_rules_never_regrant_a_denied_path() {
    let mut facts = facts();
    facts.listings.insert(
        "/dev".into(),
        entries(&[("null", EntryKind::Other), ("pts", EntryKind::Dir)]),
    );
    facts
        .listings
        .insert("/dev/pts".into(), entries(&[("0", EntryKind::Other)]));
    let plan = ruleset_plan(&launch(&["/dev/null", "/dev/pts/0"]), &facts).unwrap();
    assert!(rule(&plan, "/dev/null").is_none());
    assert!(rule(&plan, "/dev/pts").is_none());
    assert!(rule(&plan, "/dev/pts/0").is_none());
    assert!(rule(&plan, "/dev/tty").is_some());
}

#[test]
fn denied_inside_workspace_is_refused() {
    let err = ruleset_plan(&launch(&["/home/dev/src/app/.env"]), &facts()).unwrap_err();
    assert!(
        matches!(&err, LandlockError::DeniedInsideWritable { denied, root }
            if denied == Path::new("/home/dev/src/app/.env") && root == Path::new(WORKSPACE)),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "denied path `/home/dev/src/app/.env` lies inside writable root `/home/dev/src/app`: \
         landlock cannot carve a read hole out of a writable subtree"
    );
    // The workspace itself, and a denied path containing it.
    assert!(matches!(
        ruleset_plan(&launch(&[WORKSPACE]), &facts()),
        Err(LandlockError::DeniedInsideWritable { .. })
    ));
    assert!(matches!(
        ruleset_plan(&launch(&["/home/dev/src"]), &facts()),
        Err(LandlockError::WritableInsideDenied { .. })
    ));
}

#[test]
fn without_a_read_only_root_nothing_can_be_denied() {
    let mut open = launch(&[]);
    open.read_only_root = false;
    let plan = ruleset_plan(&open, &facts()).unwrap();
    assert_eq!(rule(&plan, "/").unwrap().access, WRITABLE.into());
    open.denied_read_paths = vec!["/home/dev/.ssh".into()];
    assert!(matches!(
        ruleset_plan(&open, &facts()),
        Err(LandlockError::DeniedInsideWritable { root, .. }) if root == Path::new("/")
    ));
}

#[test]
fn protected_paths_are_refused() {
    let mut plan = launch(&[]);
    plan.protected_paths = vec!["/home/dev/src/app/AGENTS.md".into()];
    let err = ruleset_plan(&plan, &facts()).unwrap_err();
    assert!(matches!(err, LandlockError::ProtectedPaths(_)), "{err}");
}

#[test]
fn loopback_only_is_refused() {
    let mut plan = launch(&[]);
    plan.network = Network::OwnLoopback(None);
    let err = ruleset_plan(&plan, &facts()).unwrap_err();
    assert!(matches!(err, LandlockError::OwnNetwork(_)), "{err}");
}

#[test]
fn network_modes_and_min_abi() {
    let mut plan = launch(&[]);
    let none = ruleset_plan(&plan, &facts()).unwrap();
    assert_eq!(
        none.handled_net,
        [NetRight::BindTcp, NetRight::ConnectTcp].into()
    );
    assert_eq!((none.abi, none.min_abi), (7, 4));
    assert_eq!(
        none.scopes,
        [ScopeRight::AbstractUnixSocket, ScopeRight::Signal].into()
    );
    plan.network = Network::AllowOutbound;
    let outbound = ruleset_plan(&plan, &facts()).unwrap();
    assert!(outbound.handled_net.is_empty());
    assert_eq!(outbound.min_abi, 3);
    assert_eq!(outbound.scopes.len(), 2);
    plan.read_only_root = false;
    assert_eq!(ruleset_plan(&plan, &facts()).unwrap().min_abi, 1);
}

#[test]
fn bad_facts_and_paths_fail_closed() {
    // A symlinked ancestor of a denied path would leave its target granted.
    let mut linked = facts();
    linked
        .listings
        .get_mut(Path::new(HOME))
        .unwrap()
        .push(Entry {
            name: ".aws".into(),
            kind: EntryKind::Symlink,
        });
    assert!(matches!(
        ruleset_plan(&launch(&["/home/dev/.aws/config"]), &linked),
        Err(LandlockError::SymlinkAncestor(path)) if path == Path::new("/home/dev/.aws")
    ));
    // An existing ancestor without a listing.
    assert!(matches!(
        ruleset_plan(&launch(&["/home/dev/.config/gh/hosts.yml"]), &facts()),
        Err(LandlockError::MissingListing(path)) if path == Path::new("/home/dev/.config")
    ));
    // Entry names are single components.
    let mut odd = facts();
    odd.listings
        .get_mut(Path::new("/home"))
        .unwrap()
        .push(Entry {
            name: "../etc".into(),
            kind: EntryKind::Dir,
        });
    assert!(matches!(
        ruleset_plan(&launch(&["/home/dev/.ssh"]), &odd),
        Err(LandlockError::InvalidEntry { .. })
    ));
    for path in ["home/dev/.ssh", "/home/dev/../root", ""] {
        assert!(
            matches!(
                ruleset_plan(&launch(&[path]), &facts()),
                Err(LandlockError::NotNormalized(_))
            ),
            "{path}"
        );
    }
    // A missing writable root.
    let mut gone = facts();
    gone.kinds.remove(Path::new(RUN_TMP));
    assert!(matches!(
        ruleset_plan(&launch(&[]), &gone),
        Err(LandlockError::MissingWritableRoot(_))
    ));
}

#[test]
fn nested_and_repeated_denied_paths_merge() {
    let one = ruleset_plan(&launch(&["/home/dev/.ssh"]), &facts()).unwrap();
    let many = ruleset_plan(
        &launch(&[
            "/home/dev/.ssh/id_ed25519",
            "/home/dev/.ssh",
            "/home/dev/./.ssh",
        ]),
        &facts(),
    )
    .unwrap();
    assert_eq!(one, many);
}

#[test]
fn two_denied_paths_in_one_directory() {
    let plan = ruleset_plan(&launch(&["/home/dev/.ssh", "/home/dev/.bashrc"]), &facts()).unwrap();
    let only_masks =
        |path: &str| rule(&plan, path).unwrap().reasons == [Reason::ObservedMask].into();
    assert!(only_masks("/home/dev/.bashrc"));
    assert!(only_masks("/home/dev/.ssh"));
    assert!(rule(&plan, "/home/dev/.config").is_some());
    assert!(rule(&plan, "/home/other").is_some());
}

#[test]
fn observed_masks_are_the_outermost_denied_files_and_directories_that_exist() {
    let plan = launch(&[
        "/home/dev/.ssh/id_ed25519",
        "/home/dev/.ssh",
        "/home/dev/.bashrc",
        "/home/dev/.aws/credentials",
    ]);
    let masks = observed_masks(&plan, &facts()).unwrap();
    let summary: Vec<(&str, bool, Vec<&str>)> = masks
        .iter()
        .map(|m| {
            (
                m.target.to_str().unwrap(),
                m.dir,
                m.denied.iter().map(|d| d.to_str().unwrap()).collect(),
            )
        })
        .collect();
    // `.aws` is missing: nothing to bind a mask over (Landlock alone refuses it). The mask of
    // `.ssh` names its own entry first, then the one beneath it.
    assert_eq!(
        summary,
        [
            ("/home/dev/.bashrc", false, vec!["/home/dev/.bashrc"]),
            (
                "/home/dev/.ssh",
                true,
                vec!["/home/dev/.ssh", "/home/dev/.ssh/id_ed25519"]
            ),
        ]
    );
    // A file's mask rule carries no directory-only right.
    let ruleset = ruleset_plan(&plan, &facts()).unwrap();
    assert!(
        !rule(&ruleset, "/home/dev/.bashrc")
            .unwrap()
            .access
            .contains(&FsRight::ReadDir)
    );
}

#[test]
fn plans_round_trip_through_json_even_with_non_utf8_paths() {
    let mut plan = ruleset_plan(&launch(&["/home/dev/.ssh"]), &facts()).unwrap();
    plan.rules.push(PathRule {
        path: PathBuf::from(OsString::from_vec(b"/tmp/\xff".to_vec())),
        dir: false,
        access: [FsRight::ReadFile].into(),
        reasons: [Reason::ReadSibling].into(),
    });
    let json = serde_json::to_string(&plan).unwrap();
    assert!(json.contains("[47,116,109,112,47,255]"), "{json}");
    let back: RulesetPlan = serde_json::from_str(&json).unwrap();
    assert_eq!(back, plan);
}

/// The same shape measured on a real tree: `root/home/{.ssh/id, .bashrc, docs/, link}`.
#[test]
fn measured_home_with_siblings() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let home = root.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id"), "secret").unwrap();
    std::fs::write(home.join(".bashrc"), "").unwrap();
    std::fs::create_dir_all(home.join("docs")).unwrap();
    std::fs::create_dir_all(home.join("ws")).unwrap();
    symlink(home.join(".ssh"), home.join("link")).unwrap();
    let workspace = home.join("ws");
    let run_tmp = root.join("run");
    std::fs::create_dir(&run_tmp).unwrap();
    let mut launch = launch(&[]);
    launch.workspace = workspace.clone();
    launch.writable_roots = vec![workspace.clone()];
    launch.run_temp_dir = run_tmp.clone();
    launch.denied_read_paths = vec![home.join(".ssh"), home.join(".aws/credentials")];

    let facts = ListingFacts::measure(&launch).unwrap();
    // Listings for every existing ancestor, none for the missing `.aws` nor the denied dir.
    for dir in root.ancestors() {
        assert!(facts.listings.contains_key(dir), "{}", dir.display());
    }
    assert!(facts.listings.contains_key(&home));
    assert!(!facts.listings.contains_key(&home.join(".aws")));
    assert!(!facts.listings.contains_key(&home.join(".ssh")));
    assert_eq!(facts.kinds.get(&workspace), Some(&EntryKind::Dir));
    assert_eq!(
        facts.kinds.get(Path::new("/dev/null")),
        Some(&EntryKind::Other)
    );

    let plan = ruleset_plan(&launch, &facts).unwrap();
    let inside: Vec<(String, Vec<Reason>)> = plan
        .rules
        .iter()
        .filter_map(|rule| {
            let relative = rule.path.strip_prefix(&root).ok()?;
            Some((
                relative.display().to_string(),
                rule.reasons.iter().copied().collect(),
            ))
        })
        .collect();
    insta::assert_json_snapshot!("measured_home", inside);
    for rule in &plan.rules {
        assert!(!home.starts_with(&rule.path), "ancestor granted: {rule:?}");
    }
}

/// A sandbox sharing the host's `/proc` gets every process directory the host listed denied
/// (numbered directories only), `/proc`'s other entries granted one by one, and no rule on
/// `/proc` itself; with a `/proc` of its own, `/proc` is granted whole like any sibling.
#[test]
fn host_proc_denies_every_process_directory() {
    use EntryKind::{Dir, File, Symlink};
    let mut facts = facts();
    facts.listings.insert(
        "/proc".into(),
        entries(&[
            ("1", Dir),
            ("4242", Dir),
            ("acpi", Dir),
            ("meminfo", File),
            ("self", Symlink),
            ("sys", Dir),
            ("thread-self", Symlink),
            ("12ab", Dir),
        ]),
    );
    let mut host = launch(&["/home/dev/.ssh"]);
    host.mechanism = Mechanism::Landlock(LandlockProc::HostProcessesDenied);
    let plan = ruleset_plan(&host, &facts).unwrap();
    for denied in [
        "/proc",
        "/proc/1",
        "/proc/4242",
        "/proc/self",
        "/proc/thread-self",
    ] {
        assert!(rule(&plan, denied).is_none(), "{denied} granted");
    }
    for granted in ["/proc/acpi", "/proc/meminfo", "/proc/sys", "/proc/12ab"] {
        assert!(rule(&plan, granted).is_some(), "{granted} not granted");
    }
    assert!(plan.rules.iter().all(|r| !r.path.starts_with("/proc/1")));

    let own = ruleset_plan(&launch(&["/home/dev/.ssh"]), &facts).unwrap();
    assert_eq!(rule(&own, "/proc").unwrap().access, READ.into());
    assert!(rule(&own, "/proc/1").is_none());

    // Without the listing, or with one that names no process, there is no such ruleset.
    let mut unlisted = facts.clone();
    unlisted.listings.remove(Path::new("/proc"));
    assert!(matches!(
        ruleset_plan(&host, &unlisted),
        Err(LandlockError::MissingListing(path)) if path == Path::new("/proc")
    ));
    let mut no_process = facts;
    no_process
        .listings
        .insert("/proc".into(), entries(&[("meminfo", File)]));
    assert!(matches!(
        ruleset_plan(&host, &no_process),
        Err(LandlockError::NoProcesses)
    ));
}

/// `/proc` is measured only for a sandbox that shares the host's.
#[test]
fn proc_is_listed_only_when_shared() {
    let mut plan = launch(&[]);
    plan.workspace = std::env::temp_dir();
    plan.writable_roots = vec![std::env::temp_dir()];
    plan.run_temp_dir = std::env::temp_dir();
    let own = ListingFacts::measure(&plan).unwrap();
    assert!(!own.listings.contains_key(Path::new("/proc")));
    plan.mechanism = Mechanism::Landlock(LandlockProc::HostProcessesDenied);
    let host = ListingFacts::measure(&plan).unwrap();
    let listing = &host.listings[Path::new("/proc")];
    let me = std::process::id().to_string();
    assert!(listing.iter().any(|entry| entry.name == me.as_str()));
}

/// A rule's path is opened only if it is still of the kind planned: a directory for a directory
/// rule (not a symlink to one), anything but a directory or symlink for a file rule; what
/// vanished is `Missing`, what changed kind `KindChanged` (whether that skips the rule or
/// refuses the ruleset is `restrict`'s to say).
#[test]
fn a_rules_path_opens_only_as_the_kind_planned() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("dir")).unwrap();
    std::fs::write(root.join("file"), b"x").unwrap();
    symlink(root.join("dir"), root.join("link-to-dir")).unwrap();
    symlink(root.join("file"), root.join("link-to-file")).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(root.join("socket")).unwrap();

    let outcome = |name: &str, dir: bool| match open_as_planned(&root.join(name), dir) {
        Ok(_) => "opened",
        Err(Unplanned::Missing(_)) => "missing",
        Err(Unplanned::KindChanged) => "kind changed",
        Err(Unplanned::Other(error)) => panic!("{name}: {error}"),
    };
    assert_eq!(outcome("dir", true), "opened");
    assert_eq!(outcome("file", true), "kind changed");
    assert_eq!(outcome("link-to-dir", true), "kind changed");
    assert_eq!(outcome("socket", true), "kind changed");
    assert_eq!(outcome("gone", true), "missing");
    assert_eq!(outcome("file/below", true), "kind changed");
    assert_eq!(outcome("file", false), "opened");
    assert_eq!(outcome("socket", false), "opened");
    assert_eq!(outcome("dir", false), "kind changed");
    assert_eq!(outcome("link-to-file", false), "kind changed");
    assert_eq!(outcome("link-to-dir", false), "kind changed");
    assert_eq!(outcome("gone", false), "missing");
}

/// The rules' sort key orders paths exactly as `Path` does, including names that begin
/// another name, bytes below `/`, paths beneath paths, and names that are not UTF-8.
#[test]
fn the_rules_sort_key_orders_as_path_does() {
    let mut paths: Vec<PathBuf> = [
        "/", "/a", "/a/b", "/a/b/c", "/a-b", "/a.b", "/a b", "/ab", "/a/.b", "/a/-", "/b", "/.",
        "/a/b-", "/a/b/", "/A", "/a\t", "/~", "/a/b/c/d",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    paths.push(PathBuf::from(OsString::from_vec(b"/a/\xff".to_vec())));
    paths.push(PathBuf::from(OsString::from_vec(b"/a\x01".to_vec())));
    for one in &paths {
        for other in &paths {
            assert_eq!(
                super::listing::order_key(one).cmp(&super::listing::order_key(other)),
                one.cmp(other),
                "{} vs {}",
                one.display(),
                other.display()
            );
        }
    }
}
