#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use super::profile::{named_paths, normal};
use super::*;
use crate::plan::{Budgets, Mechanism};

/// The fixed token every test profile uses (snapshots name its canaries).
fn token() -> RunToken {
    RunToken::from_bytes([0xa5; RunToken::BYTES])
}

// -----------------------------------------------------------------------------------------
// A tiny SBPL reader: enough Scheme to check structure, written independently of the
// generator (it shares no code with `quote`).

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Open,
    Close,
    /// A string literal, unescaped.
    Str(String),
    /// A `#"…"` regex literal.
    Regex(String),
    Atom(String),
}

fn tokenize(text: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            ';' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '(' => out.push(Tok::Open),
            ')' => out.push(Tok::Close),
            '"' => {
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err("unterminated string".into()),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e @ ('\\' | '"')) => s.push(e),
                            other => return Err(format!("unknown escape {other:?}")),
                        },
                        Some(c) if c.is_control() => {
                            return Err(format!("raw control character {c:?} in a string"));
                        }
                        Some(c) => s.push(c),
                    }
                }
                out.push(Tok::Str(s));
            }
            '#' if chars.peek() == Some(&'"') => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err("unterminated regex".into()),
                        Some('"') => break,
                        Some(c) => s.push(c),
                    }
                }
                out.push(Tok::Regex(s));
            }
            c => {
                let mut s = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_whitespace() || matches!(n, '(' | ')' | '"' | ';') {
                        break;
                    }
                    s.push(n);
                    chars.next();
                }
                out.push(Tok::Atom(s));
            }
        }
    }
    Ok(out)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Form {
    List(Vec<Form>),
    Leaf(Tok),
}

impl Form {
    fn list(&self) -> &[Form] {
        match self {
            Form::List(items) => items,
            Form::Leaf(_) => &[],
        }
    }

    fn head(&self) -> Option<&str> {
        match self.list().first() {
            Some(Form::Leaf(Tok::Atom(a))) => Some(a),
            _ => None,
        }
    }

    /// The form with every string literal replaced by a placeholder.
    fn skeleton(&self) -> Form {
        match self {
            Form::List(items) => Form::List(items.iter().map(Form::skeleton).collect()),
            Form::Leaf(Tok::Str(_)) => Form::Leaf(Tok::Str("<S>".into())),
            Form::Leaf(t) => Form::Leaf(t.clone()),
        }
    }

    fn strings(&self, out: &mut Vec<String>) {
        match self {
            Form::List(items) => items.iter().for_each(|f| f.strings(out)),
            Form::Leaf(Tok::Str(s)) => out.push(s.clone()),
            Form::Leaf(_) => {}
        }
    }

    /// Whether some sub-form is exactly `(FILTER "path")`.
    fn has_filter(&self, filter: &str, path: &str) -> bool {
        match self {
            Form::List(items) => {
                (items.len() == 2
                    && items[0] == Form::Leaf(Tok::Atom(filter.into()))
                    && items[1] == Form::Leaf(Tok::Str(path.into())))
                    || items.iter().any(|f| f.has_filter(filter, path))
            }
            Form::Leaf(_) => false,
        }
    }

    fn has_atom(&self, atom: &str) -> bool {
        self.list()
            .iter()
            .any(|f| *f == Form::Leaf(Tok::Atom(atom.into())))
    }
}

/// Parses the whole profile into top-level forms; errors on unbalanced parentheses or a
/// top-level token that is not a list.
fn parse(text: &str) -> Result<Vec<Form>, String> {
    let mut stack: Vec<Vec<Form>> = vec![Vec::new()];
    for tok in tokenize(text)? {
        match tok {
            Tok::Open => stack.push(Vec::new()),
            Tok::Close => {
                if stack.len() < 2 {
                    return Err("unbalanced `)`".into());
                }
                let done = stack.pop().unwrap();
                stack.last_mut().unwrap().push(Form::List(done));
            }
            other => {
                if stack.len() < 2 {
                    return Err(format!("top-level token outside a form: {other:?}"));
                }
                stack.last_mut().unwrap().push(Form::Leaf(other));
            }
        }
    }
    if stack.len() != 1 {
        return Err("unclosed `(`".into());
    }
    Ok(stack.pop().unwrap())
}

// -----------------------------------------------------------------------------------------
// Plans and facts.

fn plan(network: Network) -> LaunchPlan {
    LaunchPlan {
        mechanism: Mechanism::Direct,
        network,
        workspace: "/Users/dev/project".into(),
        writable_roots: vec!["/Users/dev/project".into(), "/Users/dev/results".into()],
        read_only_root: true,
        denied_read_paths: Vec::new(),
        protected_paths: vec![
            "/Users/dev/project/.github".into(),
            "/Users/dev/project/.loopwright/policies".into(),
            "/Users/dev/project/AGENTS.md".into(),
        ],
        syscall_filter: false,
        command: vec!["make".into(), "test".into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        run_temp_dir: "/tmp/palisade-501/run-1".into(),
        budgets: Budgets::default(),
        unix_sockets: Vec::new(),
    }
}

fn dir(real: &str) -> PathFact {
    PathFact {
        kind: PathKind::Dir,
        real: real.into(),
        symlinks: Vec::new(),
    }
}

fn file(real: &str, hard_links: u64) -> PathFact {
    PathFact {
        kind: PathKind::File { hard_links },
        real: real.into(),
        symlinks: Vec::new(),
    }
}

fn missing(real: &str, first_missing: &str) -> PathFact {
    PathFact {
        kind: PathKind::Missing {
            first_missing: first_missing.into(),
            parent_is_dir: true,
        },
        real: real.into(),
        symlinks: Vec::new(),
    }
}

/// Facts for `plan`: every path where it is spelled, except `/tmp` (really `/private/tmp`,
/// as on macOS) and the explicit `overrides`.
fn facts(plan: &LaunchPlan, overrides: &[(&str, PathFact)]) -> SeatbeltFacts {
    let mut paths = BTreeMap::new();
    for path in named_paths(plan) {
        let real = match path.strip_prefix("/tmp") {
            Ok(rest) => Path::new("/private/tmp").join(rest),
            Err(_) => path.clone(),
        };
        let kind = if plan.protected_paths.contains(path) || plan.denied_read_paths.contains(path) {
            PathKind::Missing {
                first_missing: real.clone(),
                parent_is_dir: true,
            }
        } else {
            PathKind::Dir
        };
        let fact = PathFact {
            kind,
            real,
            symlinks: Vec::new(),
        };
        paths.insert(path.clone(), fact);
    }
    for (path, fact) in overrides {
        paths.insert(PathBuf::from(path), fact.clone());
    }
    SeatbeltFacts { paths }
}

/// The realistic case: `.ssh` denied, `.aws` denied through a symlink to another volume,
/// a secrets file denied inside the workspace, `.github` existing, `AGENTS.md` a symlink
/// inside the workspace, `.loopwright` missing entirely.
fn realistic(network: Network) -> (LaunchPlan, SeatbeltFacts) {
    let mut plan = plan(network);
    plan.denied_read_paths = vec![
        "/Users/dev/.ssh".into(),
        "/Users/dev/.aws".into(),
        "/Users/dev/project/config/secrets.env".into(),
    ];
    let facts = facts(
        &plan,
        &[
            ("/Users/dev/.ssh", dir("/Users/dev/.ssh")),
            (
                "/Users/dev/.aws",
                PathFact {
                    kind: PathKind::Dir,
                    real: "/Volumes/keys/aws".into(),
                    symlinks: vec!["/Users/dev/.aws".into()],
                },
            ),
            (
                "/Users/dev/project/config/secrets.env",
                file("/Users/dev/project/config/secrets.env", 1),
            ),
            (
                "/Users/dev/project/.github",
                dir("/Users/dev/project/.github"),
            ),
            (
                "/Users/dev/project/AGENTS.md",
                PathFact {
                    kind: PathKind::File { hard_links: 1 },
                    real: "/Users/dev/project/docs/agents.md".into(),
                    symlinks: vec!["/Users/dev/project/AGENTS.md".into()],
                },
            ),
            (
                "/Users/dev/project/.loopwright/policies",
                missing(
                    "/Users/dev/project/.loopwright/policies",
                    "/Users/dev/project/.loopwright",
                ),
            ),
        ],
    );
    (plan, facts)
}

/// Every structural property the profile must have, given the plan and facts it came from.
fn check_structure(plan: &LaunchPlan, facts: &SeatbeltFacts, text: &str) -> Vec<Form> {
    let forms = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(text.starts_with("(version 1)\n(deny default)\n"), "{text}");
    assert_eq!(forms[0].head(), Some("version"));
    assert_eq!(forms[1].head(), Some("deny"));
    assert!(forms[1].has_atom("default"));
    for form in &forms {
        assert!(
            matches!(form.head(), Some("version" | "allow" | "deny")),
            "unexpected top-level form {form:?}"
        );
        assert!(
            !(form.head() == Some("allow") && form.has_atom("default")),
            "(allow default) in the profile"
        );
    }
    assert_eq!(
        forms.iter().filter(|f| f.head() == Some("version")).count(),
        1
    );

    // Every allowance is explained: in each blank-line-separated block, a comment comes
    // before the first allow.
    for block in text.split("\n\n") {
        if let Some(first_allow) = block.lines().position(|l| l.starts_with("(allow")) {
            assert!(
                block.lines().take(first_allow).any(|l| l.starts_with(';')),
                "uncommented allowance:\n{block}"
            );
        }
    }

    let last = |op: &str, allow: bool| {
        forms
            .iter()
            .rposition(|f| f.head() == Some(if allow { "allow" } else { "deny" }) && f.has_atom(op))
    };
    // The profile names every path normalised (no `.` components: Seatbelt matches resolved
    // paths, which have none), so the expectation is spelled the same way.
    let deny_after = |op: &str, filter: &str, path: &Path, after: Option<usize>| {
        let path = normal(path);
        let path = path.to_str().unwrap();
        let at = forms.iter().rposition(|f| {
            f.head() == Some("deny") && f.has_atom(op) && f.has_filter(filter, path)
        });
        assert!(
            at.is_some() && at > after,
            "no ({op} ({filter} {path:?})) denial after the last allowance\n{text}"
        );
    };
    let last_read_allow = last("file-read*", true);
    let last_write_allow = last("file-write*", true);
    let last_exec_allow = last("process-exec", true);
    for path in &plan.denied_read_paths {
        let real = &facts.paths[path].real;
        for spelling in [path, real] {
            deny_after("file-read*", "subpath", spelling, last_read_allow);
            deny_after("file-write*", "subpath", spelling, last_write_allow);
            deny_after("process-exec*", "subpath", spelling, last_exec_allow);
        }
    }
    for path in &plan.protected_paths {
        let real = &facts.paths[path].real;
        for spelling in [path, real] {
            deny_after("file-write*", "subpath", spelling, last_write_allow);
        }
    }
    // Every writable root is writable at its resolved path.
    for root in [&plan.workspace, &plan.run_temp_dir]
        .into_iter()
        .chain(&plan.writable_roots)
    {
        let real = normal(&facts.paths[root].real);
        assert!(forms.iter().any(|f| f.head() == Some("allow")
            && f.has_atom("file-write*")
            && f.has_filter("subpath", real.to_str().unwrap())));
    }
    // The only file-write* allowances are the writable roots' subpaths.
    for form in &forms {
        if form.head() == Some("allow") && form.has_atom("file-write*") {
            assert_eq!(form.list().len(), 3, "{form:?}");
        }
    }
    forms
}

// -----------------------------------------------------------------------------------------
// Snapshots.

#[test]
fn snapshot_matrix() {
    for (name, network) in [
        ("none", Network::None),
        ("loopback_only", Network::HostLoopback),
        ("allow_outbound", Network::AllowOutbound),
    ] {
        let (plan, facts) = realistic(network);
        let text = profile(&plan, &facts, &token()).unwrap();
        check_structure(&plan, &facts, &text);
        insta::assert_snapshot!(format!("profile_{name}"), text);
    }
}

#[test]
fn snapshot_minimal_plan() {
    let mut plan = plan(Network::None);
    plan.protected_paths.clear();
    plan.writable_roots = vec![plan.workspace.clone()];
    let facts = facts(&plan, &[]);
    let text = profile(&plan, &facts, &token()).unwrap();
    check_structure(&plan, &facts, &text);
    insta::assert_snapshot!("profile_minimal", text);
}

#[test]
fn snapshot_awkward_paths() {
    let mut plan = plan(Network::HostLoopback);
    plan.workspace = "/Users/dev/my \"quoted\" (project) \\ dir".into();
    plan.writable_roots = vec![
        plan.workspace.clone(),
        "/Volumes/Ext Drive/out; (allow default)".into(),
    ];
    plan.protected_paths = vec![plan.workspace.join(".github")];
    plan.denied_read_paths = vec![
        "/Users/dev/Données privées/clé".into(),
        "/Users/dev/\")(allow file-write* (subpath \"/\"))(\"".into(),
        "/Users/dev/日本語/🔑".into(),
    ];
    let facts = facts(&plan, &[]);
    let text = profile(&plan, &facts, &token()).unwrap();
    let forms = check_structure(&plan, &facts, &text);
    // The injection attempt is one string literal, not a form.
    let allows_root = forms.iter().any(|f| {
        f.head() == Some("allow") && f.has_atom("file-write*") && f.has_filter("subpath", "/")
    });
    assert!(!allows_root);
    insta::assert_snapshot!("profile_awkward_paths", text);
}

#[test]
fn profile_is_deterministic_and_order_independent() {
    let (plan, facts) = realistic(Network::None);
    let a = profile(&plan, &facts, &token()).unwrap();
    let mut shuffled = plan.clone();
    shuffled.denied_read_paths.reverse();
    shuffled.protected_paths.reverse();
    shuffled.writable_roots.reverse();
    assert_eq!(a, profile(&shuffled, &facts, &token()).unwrap());
    assert_eq!(a, profile(&plan, &facts, &token()).unwrap());
}

// -----------------------------------------------------------------------------------------
// Rules that matter for security, asserted directly (the snapshots show them too).

#[test]
fn denials_come_after_every_allowance() {
    let (plan, facts) = realistic(Network::AllowOutbound);
    let text = profile(&plan, &facts, &token()).unwrap();
    let forms = parse(&text).unwrap();
    let last_allow = forms
        .iter()
        .rposition(|f| f.head() == Some("allow"))
        .unwrap();
    let first_mask = forms
        .iter()
        .position(|f| f.head() == Some("deny") && f.has_atom("file-write-setugid"))
        .unwrap();
    assert!(first_mask > last_allow);
    assert!(forms[first_mask..].iter().all(|f| f.head() == Some("deny")));
}

#[test]
fn symlinked_paths_are_denied_at_both_spellings_and_links_are_pinned() {
    let (plan, facts) = realistic(Network::None);
    let text = profile(&plan, &facts, &token()).unwrap();
    assert!(
        text.contains("(deny file-read* file-write* process-exec* (subpath \"/Users/dev/.aws\"))")
    );
    assert!(
        text.contains(
            "(deny file-read* file-write* process-exec* (subpath \"/Volumes/keys/aws\"))"
        )
    );
    // AGENTS.md is a symlink inside the workspace: both the link and its target are
    // protected, and the directory holding the target is pinned.
    assert!(text.contains("(deny file-write* (literal \"/Users/dev/project/AGENTS.md\") (subpath \"/Users/dev/project/AGENTS.md\"))"));
    assert!(text.contains("(deny file-write* (literal \"/Users/dev/project/docs/agents.md\") (subpath \"/Users/dev/project/docs/agents.md\"))"));
    assert!(text.contains("(deny file-write* (literal \"/Users/dev/project/docs\"))"));
    // Missing .loopwright: its future directory is pinned, so it cannot be created
    // elsewhere and moved into place.
    assert!(text.contains("(deny file-write* (literal \"/Users/dev/project/.loopwright\"))"));
    // The workspace root itself is pinned (it holds masked paths), `.ssh`'s parent is not
    // (it is outside every writable root).
    assert!(text.contains("(deny file-write* (literal \"/Users/dev/project\"))"));
    assert!(!text.contains("(literal \"/Users/dev\")"));
}

#[test]
fn temp_dir_is_writable_at_its_real_path_only() {
    let (plan, facts) = realistic(Network::None);
    let text = profile(&plan, &facts, &token()).unwrap();
    assert!(text.contains("(allow file-write* (subpath \"/private/tmp/palisade-501/run-1\"))"));
    assert!(!text.contains("(subpath \"/tmp/palisade-501/run-1\")"));
}

#[test]
fn network_modes() {
    let text = |n| {
        let (plan, facts) = realistic(n);
        profile(&plan, &facts, &token()).unwrap()
    };
    let none = text(Network::None);
    assert!(none.contains("(deny network*)"));
    assert!(!none.contains("(remote ip"));
    assert!(!none.contains("(allow network*)"));
    let loopback = text(Network::HostLoopback);
    assert!(loopback.contains("(allow network-outbound (remote ip \"localhost:*\"))"));
    assert!(loopback.contains("(allow network-bind network-inbound (local ip \"localhost:*\"))"));
    assert!(!loopback.contains("(allow network*)"));
    let outbound = text(Network::AllowOutbound);
    assert!(outbound.contains("(allow network-outbound (remote ip \"*:*\"))"));
    assert!(!outbound.contains("(allow network*)"));
    // In every mode, Unix sockets under denied paths stay unreachable, after the allowances.
    for t in [&none, &loopback, &outbound] {
        let deny = t
            .find("(deny network-outbound (remote unix-socket (subpath \"/Users/dev/.ssh\")))")
            .unwrap();
        assert!(deny > t.rfind("(allow network").unwrap());
    }
}

#[test]
fn trial_profiles_cover_every_mode_and_rule_kind() {
    let trials = trial_profiles().unwrap();
    assert_eq!(trials.len(), 3);
    for needle in [
        "(local ip \"localhost:*\")",
        "(remote ip \"*:*\")",
        "(deny network*)",
    ] {
        assert!(trials.iter().any(|t| t.contains(needle)), "{needle}");
    }
    for trial in &trials {
        parse(trial).unwrap();
        for needle in [
            "(deny file-write* (literal",
            "(deny file-read* file-write* process-exec* (subpath",
            "(allow file-write* (subpath",
            "(local unix-socket (subpath",
        ] {
            assert!(trial.contains(needle), "{needle}\n{trial}");
        }
    }
}

#[test]
fn sandbox_exec_argv() {
    let (plan, facts) = realistic(Network::None);
    let text = profile(&plan, &facts, &token()).unwrap();
    let args = argv(&text, &plan).unwrap();
    assert_eq!(args[0], "-p");
    assert_eq!(args[1], OsString::from(&text));
    assert_eq!(args[2], "--");
    assert_eq!(&args[3..], &plan.command[..]);
    let mut empty = plan;
    empty.command.clear();
    assert!(matches!(
        argv(&text, &empty),
        Err(SeatbeltError::EmptyCommand)
    ));
}

// -----------------------------------------------------------------------------------------
// Membership canaries.

#[test]
fn run_tokens_are_hex_and_random() {
    let fixed = RunToken::from_bytes([0, 1, 0xab, 0xff, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
    assert_eq!(fixed.as_str(), "0001abff02030405060708090a0b0c0d");
    let a = RunToken::random().unwrap();
    let b = RunToken::random().unwrap();
    assert_eq!(a.as_str().len(), 32);
    assert!(
        a.as_str()
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_ne!(a, b);
}

#[test]
fn canaries_live_under_the_resolved_run_temp_dir() {
    let (plan, facts) = realistic(Network::None);
    let c = canary(&plan, &facts, &token()).unwrap();
    let real = normal(&facts.paths[&plan.run_temp_dir].real);
    assert_ne!(
        real, plan.run_temp_dir,
        "the fixture's temp dir goes through /tmp"
    );
    assert_eq!(
        c.dir,
        real.join(format!(".palisade-sandbox-{}", token().as_str()))
    );
    assert_eq!(c.deny, c.dir.join("deny"));
    assert_eq!(c.allow, c.dir.join("allow"));
    let other = canary(&plan, &facts, &RunToken::from_bytes([1; 16])).unwrap();
    assert_ne!(c.dir, other.dir);
    let mut missing = facts.clone();
    missing.paths.remove(&plan.run_temp_dir);
    assert!(matches!(
        canary(&plan, &missing, &token()),
        Err(SeatbeltError::MissingFact(_))
    ));
}

#[test]
fn canary_rules_are_in_every_profile_and_win() {
    for network in [Network::None, Network::HostLoopback, Network::AllowOutbound] {
        let (plan, facts) = realistic(network);
        let c = canary(&plan, &facts, &token()).unwrap();
        let text = profile(&plan, &facts, &token()).unwrap();
        let forms = check_structure(&plan, &facts, &text);
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        let at = |head: &str, op: &str, filter: &str, path: &Path| {
            let found: Vec<usize> = forms
                .iter()
                .enumerate()
                .filter(|(_, f)| {
                    f.head() == Some(head) && f.has_atom(op) && f.has_filter(filter, &s(path))
                })
                .map(|(i, _)| i)
                .collect();
            assert_eq!(found.len(), 1, "({head} {op} ({filter} {path:?}))\n{text}");
            found[0]
        };
        let deny_read = at("deny", "file-read*", "literal", &c.deny);
        let deny_write = at("deny", "file-write*", "subpath", &c.dir);
        let allow_read = at("allow", "file-read*", "literal", &c.allow);
        // The denials come after every allowance (last rule wins) ...
        let last_allow = forms.iter().rposition(|f| f.head() == Some("allow"));
        assert!(Some(deny_read) > last_allow && Some(deny_write) > last_allow);
        // ... and no denial after the allow canary's rule covers it.
        for form in forms.iter().skip(allow_read + 1) {
            if form.head() == Some("deny") && form.has_atom("file-read*") {
                let mut strings = Vec::new();
                form.strings(&mut strings);
                assert!(
                    strings.iter().all(|p| !c.allow.starts_with(p)),
                    "{form:?} covers the allow canary"
                );
            }
        }
        // Other tokens give other canaries: the token reaches the text.
        let other = profile(&plan, &facts, &RunToken::from_bytes([7; 16])).unwrap();
        assert_ne!(text, other);
    }
}

#[test]
fn the_canary_directory_is_pinned() {
    // The directories leading to the canary (the run temp dir) cannot be renamed or
    // replaced, so the path `sandbox_check` is asked about keeps its meaning.
    let mut plan = plan(Network::None);
    plan.protected_paths.clear();
    plan.denied_read_paths.clear();
    let facts = facts(&plan, &[]);
    let text = profile(&plan, &facts, &token()).unwrap();
    let real = normal(&facts.paths[&plan.run_temp_dir].real);
    assert!(text.contains(&format!(
        "(deny file-write* (literal {}))",
        quote(&real).unwrap()
    )));
}

#[test]
fn membership_needs_every_answer() {
    let member = MemberCheck {
        same_uid: true,
        zombie: false,
        sandboxed: 1,
        deny_canary: 1,
        allow_canary: 0,
    };
    assert!(is_member(&member));
    let not = [
        MemberCheck {
            same_uid: false,
            ..member
        },
        MemberCheck {
            zombie: true,
            ..member
        },
        // Not sandboxed at all: every path is allowed.
        MemberCheck {
            sandboxed: 0,
            deny_canary: 0,
            ..member
        },
        // Another sandbox that denies everything it does not know.
        MemberCheck {
            allow_canary: 1,
            ..member
        },
        // Another sandbox that allows reading everywhere.
        MemberCheck {
            deny_canary: 0,
            ..member
        },
        // Errors are never membership.
        MemberCheck {
            sandboxed: -1,
            ..member
        },
        MemberCheck {
            deny_canary: -1,
            ..member
        },
        MemberCheck {
            allow_canary: -1,
            ..member
        },
        MemberCheck {
            sandboxed: 2,
            ..member
        },
    ];
    for check in not {
        assert!(!is_member(&check), "{check:?}");
    }
}

// -----------------------------------------------------------------------------------------
// Refusals.

fn refused(plan: &LaunchPlan, facts: &SeatbeltFacts) -> SeatbeltError {
    profile(plan, facts, &token()).expect_err("profile should be refused")
}

#[test]
fn control_characters_are_refused() {
    for bad in [
        "/Users/dev/new\nline",
        "/Users/dev/tab\there",
        "/Users/dev/del\u{7f}",
        "/Users/dev/c1\u{85}",
        "/Users/dev/cr\r",
    ] {
        let mut plan = plan(Network::None);
        plan.denied_read_paths = vec![bad.into()];
        let facts = facts(&plan, &[]);
        assert!(
            matches!(refused(&plan, &facts), SeatbeltError::ControlCharacter(_)),
            "{bad:?}"
        );
    }
    // Also when the control character only appears in the resolved spelling.
    let mut plan = plan(Network::None);
    plan.denied_read_paths = vec!["/Users/dev/link".into()];
    let facts = facts(
        &plan,
        &[("/Users/dev/link", dir("/Users/dev/evil\n(allow default)"))],
    );
    assert!(matches!(
        refused(&plan, &facts),
        SeatbeltError::ControlCharacter(_)
    ));
}

#[test]
fn nul_and_non_utf8_are_refused() {
    let mut plan = plan(Network::None);
    plan.denied_read_paths = vec![PathBuf::from(OsStr::from_bytes(b"/Users/dev/a\0b"))];
    let f = facts(&plan, &[]);
    assert!(matches!(
        refused(&plan, &f),
        SeatbeltError::ControlCharacter(_)
    ));
    plan.denied_read_paths = vec![PathBuf::from(OsStr::from_bytes(b"/Users/dev/\xff"))];
    let f = facts(&plan, &[]);
    assert!(matches!(refused(&plan, &f), SeatbeltError::NotUtf8(_)));
}

#[test]
fn relative_and_parent_paths_are_refused() {
    let mut plan = plan(Network::None);
    plan.denied_read_paths = vec!["relative/secret".into()];
    let f = facts(&plan, &[]);
    assert!(matches!(refused(&plan, &f), SeatbeltError::RelativePath(_)));
    plan.denied_read_paths = vec!["/Users/dev/project/../.ssh".into()];
    let f = facts(&plan, &[]);
    assert!(matches!(
        refused(&plan, &f),
        SeatbeltError::ParentComponent(_)
    ));
}

#[test]
fn masks_containing_a_writable_root_are_refused() {
    let mut plan = plan(Network::None);
    plan.denied_read_paths = vec!["/Users/dev".into()];
    let f = facts(&plan, &[]);
    assert!(matches!(
        refused(&plan, &f),
        SeatbeltError::MaskContainsWritable { what: "denied", .. }
    ));
    // Through a symlink: the denied path resolves to a directory holding the temp dir.
    let mut plan = self::plan(Network::None);
    plan.denied_read_paths = vec!["/Users/dev/tmp-link".into()];
    let f = facts(&plan, &[("/Users/dev/tmp-link", dir("/private/tmp"))]);
    assert!(matches!(
        refused(&plan, &f),
        SeatbeltError::MaskContainsWritable { .. }
    ));
    let mut plan = self::plan(Network::None);
    plan.protected_paths = vec!["/Users/dev/project".into()];
    let f = facts(&plan, &[]);
    assert!(matches!(
        refused(&plan, &f),
        SeatbeltError::MaskContainsWritable {
            what: "protected",
            ..
        }
    ));
}

#[test]
fn hard_linked_files_are_refused() {
    let mut plan = plan(Network::None);
    plan.denied_read_paths = vec!["/Users/dev/key".into()];
    let f = facts(&plan, &[("/Users/dev/key", file("/Users/dev/key", 2))]);
    assert!(matches!(
        refused(&plan, &f),
        SeatbeltError::HardLinks { links: 2, .. }
    ));
    // A protected file with links inside a writable root: refused; outside: fine (nothing
    // outside the roots is writable anyway).
    let mut plan = self::plan(Network::None);
    plan.protected_paths = vec!["/Users/dev/project/AGENTS.md".into()];
    let f = facts(
        &plan,
        &[(
            "/Users/dev/project/AGENTS.md",
            file("/Users/dev/project/AGENTS.md", 3),
        )],
    );
    assert!(matches!(
        refused(&plan, &f),
        SeatbeltError::HardLinks { links: 3, .. }
    ));
    plan.protected_paths = vec!["/etc/hosts".into()];
    let f = facts(&plan, &[("/etc/hosts", file("/private/etc/hosts", 2))]);
    assert!(profile(&plan, &f, &token()).is_ok());
}

#[test]
fn missing_facts_are_refused() {
    let (plan, mut facts) = realistic(Network::None);
    facts.paths.remove(Path::new("/Users/dev/.ssh"));
    assert!(matches!(
        refused(&plan, &facts),
        SeatbeltError::MissingFact(_)
    ));
}

#[test]
fn quote_escapes_only_backslash_and_quote() {
    assert_eq!(quote(Path::new("/a b")).unwrap(), "\"/a b\"");
    assert_eq!(quote(Path::new("/a\"b")).unwrap(), "\"/a\\\"b\"");
    assert_eq!(quote(Path::new("/a\\b")).unwrap(), "\"/a\\\\b\"");
    assert_eq!(quote(Path::new("/é(;)#\"")).unwrap(), "\"/é(;)#\\\"\"");
    assert!(quote(Path::new("/a\nb")).is_err());
}

#[test]
fn measure_resolves_symlinks() {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::create_dir(root.join("real")).unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
    let mut plan = plan(Network::None);
    plan.workspace = root.clone();
    plan.writable_roots = vec![root.clone()];
    plan.run_temp_dir = root.clone();
    plan.protected_paths.clear();
    plan.denied_read_paths = vec![root.join("link/secret")];
    let facts = measure(&plan).unwrap();
    let fact = &facts.paths[&root.join("link/secret")];
    assert_eq!(fact.real, root.join("real/secret"));
    assert_eq!(fact.symlinks, vec![root.join("link")]);
    let text = profile(&plan, &facts, &token()).unwrap();
    check_structure(&plan, &facts, &text);
    // The link is inside the writable root: pinned, so it cannot be pointed elsewhere.
    assert!(text.contains(&format!(
        "(deny file-write* (literal {}))",
        quote(&root.join("link")).unwrap()
    )));
}

// -----------------------------------------------------------------------------------------
// No path can inject SBPL.

/// Any text for one path component: quotes, backslashes, parentheses, semicolons, `#`,
/// whitespace, control characters and arbitrary Unicode.
fn component() -> impl Strategy<Value = String> {
    let special = prop::sample::select(vec![
        "\"",
        "\\",
        "(",
        ")",
        ";",
        "#",
        "#\"",
        " ",
        "\n",
        "\r",
        "\t",
        "\u{7f}",
        "\u{85}",
        "\u{2028}",
        "é",
        "🔑",
        "a",
        "(allow default)",
        "\")",
        "\\\"",
    ]);
    prop::collection::vec(
        prop_oneof![
            special.prop_map(String::from),
            any::<char>().prop_map(String::from)
        ],
        1..12,
    )
    .prop_map(|parts| parts.concat().replace(['/', '\0'], "_"))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        // Failures are saved next to this file (`tests.proptest-regressions`) and committed.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_paths_never_change_the_profile_structure(
        denied in component(),
        protected in component(),
        root in component(),
        real in component(),
    ) {
        arbitrary_paths_case(&denied, &protected, &root, &real)?;
    }
}

/// The property above for one set of names. A name may also be `.` (the directory itself, which
/// the profile writes normalised) or `..` (refused): both are legal component text that changes
/// what the path means, so the expectation says what each one does. The further writable root
/// lives under `/Volumes/w`, apart from the denied path's real location under `/Volumes/r`, so
/// no generated name puts one inside the other (that would add pins: another shape, rightly).
fn arbitrary_paths_case(
    denied: &str,
    protected: &str,
    root: &str,
    real: &str,
) -> Result<(), TestCaseError> {
    let mut weird = plan(Network::HostLoopback);
    weird
        .writable_roots
        .push(PathBuf::from("/Volumes/w").join(root));
    weird.protected_paths = vec![weird.workspace.join(protected)];
    weird.denied_read_paths = vec![PathBuf::from("/Users/dev/d").join(denied)];
    let weird_facts = facts(
        &weird,
        &[(
            weird.denied_read_paths[0].to_str().unwrap(),
            dir(PathBuf::from("/Volumes/r").join(real).to_str().unwrap()),
        )],
    );

    // The same plan with tame names: the profile must have the same shape.
    let mut tame = plan(Network::HostLoopback);
    tame.writable_roots.push("/Volumes/w/root".into());
    tame.protected_paths = vec![tame.workspace.join("protected")];
    tame.denied_read_paths = vec!["/Users/dev/d/denied".into()];
    let tame_facts = facts(&tame, &[("/Users/dev/d/denied", dir("/Volumes/r/real"))]);
    let tame_text = profile(&tame, &tame_facts, &token()).unwrap();
    let tame_forms = parse(&tame_text).unwrap();

    let names = [denied, protected, root, real];
    let has_control = names.iter().any(|c| c.chars().any(char::is_control));
    let has_parent = names.contains(&"..");
    // `workspace/.` is the workspace: a protected path containing a writable root.
    let protects_workspace = protected == ".";
    match profile(&weird, &weird_facts, &token()) {
        Err(SeatbeltError::ControlCharacter(_)) => prop_assert!(has_control),
        Err(SeatbeltError::ParentComponent(_)) => prop_assert!(has_parent),
        Err(SeatbeltError::MaskContainsWritable { .. }) => prop_assert!(protects_workspace),
        Err(other) => prop_assert!(false, "unexpected refusal: {other}"),
        Ok(text) => {
            prop_assert!(!has_control && !has_parent && !protects_workspace);
            let forms = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            let shape: Vec<Form> = forms.iter().map(Form::skeleton).collect();
            let tame_shape: Vec<Form> = tame_forms.iter().map(Form::skeleton).collect();
            prop_assert_eq!(shape, tame_shape);
            // And the user's text arrives intact, inside string literals.
            let mut strings = Vec::new();
            forms.iter().for_each(|f| f.strings(&mut strings));
            for expected in [
                &weird.denied_read_paths[0],
                &weird.protected_paths[0],
                &weird.writable_roots[2],
            ] {
                let expected = normal(expected);
                prop_assert!(strings.iter().any(|s| Path::new(s) == expected));
            }
            check_structure(&weird, &weird_facts, &text);
        }
    }
    Ok(())
}

/// Issue 16: proptest once drew `real = "."` (with `denied = protected = "\""`, `root =
/// "\u{2028}"`). The profile rightly denies `/Volumes/r`, the normal spelling of `/Volumes/r/.`;
/// the checker looked for the unnormalised spelling, so the run failed one time in many.
#[test]
fn a_dot_component_is_denied_at_its_normal_spelling() {
    arbitrary_paths_case("\"", "\"", "\u{2028}", ".").unwrap();
    arbitrary_paths_case(".", "a", ".", ".").unwrap();
}

/// The other names the generator can draw that change a path's meaning: `..` is refused, and a
/// protected `.` is the workspace itself, which a read-only mask would make unwritable.
#[test]
fn parent_components_and_a_protected_workspace_are_refused() {
    arbitrary_paths_case("..", "a", "a", "a").unwrap();
    arbitrary_paths_case("a", "a", "a", "..").unwrap();
    arbitrary_paths_case("a", ".", "a", "a").unwrap();
}

/// Git's execution surface (issue 34), as the engine lists it: an existing repository's
/// `hooks`, `config` and a missing `config.worktree` are unwritable (existing or not, so
/// neither writable, replaceable nor creatable), and `.git` itself is only pinned, so commits,
/// the index and refs stay writable inside it. In a workspace without a repository, `.git`
/// cannot be created.
#[test]
fn git_hooks_and_config_are_unwritable_and_dot_git_only_pinned() {
    let mut repo = plan(Network::None);
    repo.protected_paths = vec![
        "/Users/dev/project/.git/hooks".into(),
        "/Users/dev/project/.git/config".into(),
        "/Users/dev/project/.git/config.worktree".into(),
    ];
    let repo_facts = facts(
        &repo,
        &[
            (
                "/Users/dev/project/.git/hooks",
                dir("/Users/dev/project/.git/hooks"),
            ),
            (
                "/Users/dev/project/.git/config",
                file("/Users/dev/project/.git/config", 1),
            ),
            (
                "/Users/dev/project/.git/config.worktree",
                missing(
                    "/Users/dev/project/.git/config.worktree",
                    "/Users/dev/project/.git/config.worktree",
                ),
            ),
        ],
    );
    let text = profile(&repo, &repo_facts, &token()).unwrap();
    for path in ["hooks", "config", "config.worktree"] {
        let q = format!("\"/Users/dev/project/.git/{path}\"");
        assert!(
            text.contains(&format!("(deny file-write* (literal {q}) (subpath {q}))")),
            "{path}: {text}"
        );
    }
    assert!(text.contains("(deny file-write* (literal \"/Users/dev/project/.git\"))"));
    assert!(!text.contains("(subpath \"/Users/dev/project/.git\")"));

    let mut no_repo = plan(Network::None);
    no_repo.protected_paths = vec!["/Users/dev/project/.git".into()];
    let no_repo_facts = facts(&no_repo, &[]);
    let text = profile(&no_repo, &no_repo_facts, &token()).unwrap();
    assert!(text.contains(
        "(deny file-write* (literal \"/Users/dev/project/.git\") (subpath \"/Users/dev/project/.git\"))"
    ));
}

// -----------------------------------------------------------------------------------------
// Held to the peers (issue 35): Codex's seatbelt_base_policy.sbpl and network policy, and
// Anthropic's sandbox-runtime (srt) macos-sandbox-utils.ts. One test per item, for every
// network mode: the rule is there, and the looser one it replaced is not.

const MODES: [Network; 3] = [Network::None, Network::HostLoopback, Network::AllowOutbound];

fn every_mode() -> Vec<(Network, String)> {
    MODES
        .into_iter()
        .map(|mode| {
            let (plan, facts) = realistic(mode.clone());
            let text = profile(&plan, &facts, &token()).unwrap();
            (mode, text)
        })
        .collect()
}

#[test]
fn peers_no_mode_reaches_every_host_unix_socket() {
    for (mode, text) in every_mode() {
        assert!(!text.contains("(allow network*)"), "{mode:?}");
        assert!(!text.contains("(allow network-outbound)"), "{mode:?}");
        assert!(!text.contains("(remote unix-socket)"), "{mode:?}");
        // Unix sockets: the writable roots' own and, for name resolution, the resolver's.
        let forms = parse(&text).unwrap();
        for form in &forms {
            if form.head() == Some("allow") && format!("{form:?}").contains("unix-socket") {
                let mut strings = Vec::new();
                form.strings(&mut strings);
                assert!(
                    strings.iter().all(|s| s.starts_with("/Users/dev/project")
                        || s.starts_with("/Users/dev/results")
                        || s.starts_with("/private/tmp/palisade-501/run-1")
                        || s == "/private/var/run/mDNSResponder"),
                    "{mode:?}: {form:?}"
                );
            }
        }
        // A container daemon's socket is denied last, in every mode.
        let deny = text
            .rfind("(remote unix-socket (literal \"/private/var/run/docker.sock\"))")
            .unwrap_or_else(|| panic!("{mode:?}: no docker.sock denial"));
        assert!(deny > text.rfind("(allow network").unwrap(), "{mode:?}");
        assert!(text.contains(r#"(remote unix-socket (regex #"^/Users/[^/]+/\.docker/run/"))"#));
    }
}

#[test]
fn peers_allow_outbound_reaches_ip_destinations_and_listens_on_localhost_only() {
    for (mode, text) in every_mode() {
        let outbound = text.contains("(allow network-outbound (remote ip \"*:*\"))");
        assert_eq!(outbound, mode == Network::AllowOutbound, "{mode:?}");
        assert!(
            !text.contains("(local ip \"*:*\")"),
            "{mode:?}: binds every interface"
        );
        if mode != Network::None {
            assert!(
                text.contains("(allow network-bind network-inbound (local ip \"localhost:*\"))")
            );
        }
    }
}

#[test]
fn peers_system_sockets_are_narrowed() {
    for (mode, text) in every_mode() {
        assert!(!text.contains("(allow system-socket)"), "{mode:?}");
        let narrowed = text.contains(
            "(allow system-socket (require-all (socket-domain AF_SYSTEM) (socket-protocol 2)))",
        );
        assert_eq!(narrowed, mode == Network::AllowOutbound, "{mode:?}");
        assert!(text.contains("(allow system-socket (socket-domain AF_UNIX))"));
    }
}

#[test]
fn peers_no_mach_host_and_cpu_facts_by_sysctl() {
    for (mode, text) in every_mode() {
        assert!(!text.contains("(allow mach-host"), "{mode:?}");
        for name in ["machdep.cpu.brand_string", "hw.model", "kern.tcsm_enable"] {
            assert!(
                text.contains(&format!("(sysctl-name \"{name}\")")),
                "{mode:?}: {name}"
            );
        }
        assert!(text.contains("(sysctl-name-prefix \"kern.proc.all\")"));
        assert!(!text.contains("\"kern.procargs"), "{mode:?}");
        assert!(text.contains(
            "(allow sysctl-write\n  (sysctl-name \"kern.grade_cputype\")\n  (sysctl-name \"kern.tcsm_enable\")\n)"
        ));
    }
}

#[test]
fn peers_protected_paths_are_uncreatable_by_literal_too() {
    for (mode, text) in every_mode() {
        // `.loopwright/policies` is missing: its own path is covered literally as well.
        let q = "\"/Users/dev/project/.loopwright/policies\"";
        assert!(
            text.contains(&format!("(deny file-write* (literal {q}) (subpath {q}))")),
            "{mode:?}"
        );
        assert!(!text.contains(&format!("(deny file-write* (subpath {q}))")));
    }
}

#[test]
fn peers_per_user_folders_preferences_and_shared_memory() {
    for (mode, text) in every_mode() {
        for service in [
            "com.apple.bsd.dirhelper",
            "com.apple.cfprefsd.agent",
            "com.apple.cfprefsd.daemon",
        ] {
            assert!(
                text.contains(&format!("(global-name \"{service}\")")),
                "{mode:?}: {service}"
            );
        }
        assert!(text.contains("(local-name \"com.apple.cfprefsd.agent\")"));
        assert!(text.contains("(allow user-preference-read)"));
        assert!(
            text.contains("(allow ipc-posix-shm-read* (ipc-posix-name-prefix \"apple.cfprefs.\"))")
        );
        assert!(text.contains(r#"(ipc-posix-name-regex #"^/__KMP_REGISTERED_LIB_[0-9]+$")"#));
        assert!(text.contains(r#"(ipc-posix-name-regex #"^/psm_[0-9a-f]+$")"#));
        // Never blanket shared memory, never the per-user folders writable.
        assert!(!text.contains("(allow ipc-posix-shm)"), "{mode:?}");
        assert!(!text.contains("/var/folders"), "{mode:?}");
        assert!(!text.contains("(param"), "{mode:?}");
    }
}

#[test]
fn peers_terminals_and_standard_devices() {
    for (mode, text) in every_mode() {
        assert!(text.contains("(allow pseudo-tty)"), "{mode:?}");
        assert!(
            text.contains(
                "(allow file-read-data file-write-data file-ioctl (literal \"/dev/ptmx\"))"
            )
        );
        assert!(text.contains("(extension \"com.apple.sandbox.pty\")"));
        // ioctl on a terminal only with the pty extension: never on the user's own terminal
        // (TIOCSTI would type into the user's shell).
        let forms = parse(&text).unwrap();
        for form in &forms {
            let shown = format!("{form:?}");
            if form.head() == Some("allow") && form.has_atom("file-ioctl") && shown.contains("ttys")
            {
                assert!(
                    shown.contains("com.apple.sandbox.pty"),
                    "{mode:?}: {form:?}"
                );
            }
            assert!(
                !(form.head() == Some("allow")
                    && form.has_atom("file-ioctl")
                    && shown.contains("\"/dev/tty\"")),
                "{mode:?}: {form:?}"
            );
        }
        assert!(text.contains("(allow file-write-data (subpath \"/dev/fd\"))"));
        assert!(
            text.contains("(allow file-write-data file-ioctl (literal \"/dev/dtracehelper\"))")
        );
    }
}

/// Every profile of the snapshot matrix and the peers' items is well-formed SBPL: balanced
/// forms, every string literal closed, escapes only `\\` and `\"`, one top-level form per rule.
#[test]
fn peers_every_profile_parses() {
    for (mode, text) in every_mode() {
        let forms = parse(&text).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        let (plan, facts) = realistic(mode.clone());
        check_structure(&plan, &facts, &text);
        assert!(forms.len() > 20, "{mode:?}");
    }
}
