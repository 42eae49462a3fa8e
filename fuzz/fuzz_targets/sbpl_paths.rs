//! SBPL path escaping and the Seatbelt profile built around arbitrary paths
//! (`palisade_shims::seatbelt::{quote, profile}`).
//!
//! The input is split at NUL bytes into a denied path, a protected path (inside the workspace),
//! a further writable root and the denied path's real location, each any bytes (`/` included).
//! Asserts: no panic; `quote` accepts exactly the absolute, UTF-8 paths with no `..` component
//! and no control character, and what it writes reads back (by an SBPL reader written here) as
//! one string literal holding the path; a profile is refused only for a reason its paths have,
//! and an accepted profile reads as `(version 1) (deny default)` then only `allow`/`deny` forms,
//! never `(allow default)`, with user text only inside string literals, writes allowed only
//! under the writable roots, and every denied path denied for reading after the last read
//! allowance, at its spelled and real locations.
#![no_main]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use palisade_fuzz::write_seeds;
use palisade_shims::fsfacts::{PathFact, PathKind};
use palisade_shims::plan::{Budgets, LaunchPlan, Mechanism, Network};
use palisade_shims::seatbelt::{RunToken, SeatbeltError, SeatbeltFacts, profile, quote};

const SEEDS: [&[u8]; 4] = [
    b"denied\0protected\0root\0real",
    b"\"\0\"\0\xe2\x80\xa8\0.",
    b"a\\b\0(allow default)\0x\")\0..",
    b"sub/dir/./f\0.github\0vol/w\0r/../s",
];

#[derive(Debug, PartialEq)]
enum Tok {
    Open,
    Close,
    Str(String),
    Atom(String),
}

/// An SBPL reader: enough to see forms, atoms and string literals (`\\` and `\"` escapes only).
fn tokenize(text: &str) -> Option<Vec<Tok>> {
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
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            e @ ('\\' | '"') => s.push(e),
                            _ => return None,
                        },
                        c if c.is_control() => return None,
                        c => s.push(c),
                    }
                }
                out.push(Tok::Str(s));
            }
            '#' if chars.peek() == Some(&'"') => {
                // A fixed regex (`#"^/dev/ttys[0-9]+$"`): read as an atom.
                chars.next();
                let mut s = String::from("#");
                for c in chars.by_ref() {
                    if c == '"' {
                        break;
                    }
                    s.push(c);
                }
                out.push(Tok::Atom(s));
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
    Some(out)
}

/// Top-level forms as token lists (nested parentheses kept as tokens).
fn forms(tokens: &[Tok]) -> Vec<&[Tok]> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, tok) in tokens.iter().enumerate() {
        match tok {
            Tok::Open => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            Tok::Close => {
                depth = depth.checked_sub(1).expect("balanced parentheses");
                if depth == 0 {
                    out.push(&tokens[start..=i]);
                }
            }
            _ => assert!(depth > 0, "a token outside any form"),
        }
    }
    assert_eq!(depth, 0, "unclosed form");
    out
}

fn atom(form: &[Tok], name: &str) -> bool {
    form.iter().any(|t| *t == Tok::Atom(name.into()))
}

fn has_subpath(form: &[Tok], path: &Path) -> bool {
    let Some(path) = path.to_str() else {
        return false;
    };
    form.windows(2)
        .any(|w| w[0] == Tok::Atom("subpath".into()) && w[1] == Tok::Str(path.into()))
}

fn normal(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| *c != Component::CurDir)
        .collect()
}

fn quotable(path: &Path) -> bool {
    path.is_absolute()
        && !path.components().any(|c| c == Component::ParentDir)
        && path
            .to_str()
            .is_some_and(|t| !t.chars().any(char::is_control))
}

fn check_quote(path: &Path) {
    match quote(path) {
        Ok(quoted) => {
            assert!(quotable(path), "quoted {path:?}");
            assert!(!quoted.chars().any(char::is_control));
            let tokens = tokenize(&quoted).expect("a quoted path reads back");
            assert_eq!(
                tokens,
                vec![Tok::Str(path.to_str().unwrap_or_default().to_owned())]
            );
        }
        Err(_) => assert!(!quotable(path), "refused to quote {path:?}"),
    }
}

fuzz_target!(
    init: {
        write_seeds(SEEDS.iter().map(|s| s.to_vec()));
    },
    |data: &[u8]| {
        let mut parts = data.split(|b| *b == 0).map(OsStr::from_bytes);
        let mut next = || parts.next().unwrap_or(OsStr::new("x"));
        let denied = Path::new("/Users/dev/d").join(next());
        let protected = Path::new("/Users/dev/project").join(next());
        let root = Path::new("/Volumes/w").join(next());
        let real = Path::new("/Volumes/r").join(next());
        for path in [&denied, &protected, &root, &real] {
            check_quote(path);
        }

        let plan = LaunchPlan {
            mechanism: Mechanism::Direct,
            network: Network::HostLoopback,
            workspace: "/Users/dev/project".into(),
            writable_roots: vec!["/Users/dev/project".into(), root.clone()],
            read_only_root: true,
            denied_read_paths: vec![denied.clone()],
            protected_paths: vec![protected.clone()],
            syscall_filter: false,
            command: vec!["make".into()],
            env: Vec::new(),
            run_temp_dir: "/tmp/palisade-501/run-1".into(),
            budgets: Budgets::default(),
            unix_sockets: Vec::new(),
        };
        let fact = |real: &Path, kind: PathKind| PathFact {
            kind,
            real: real.to_path_buf(),
            symlinks: Vec::new(),
        };
        let mut paths = BTreeMap::new();
        for dir in [&plan.workspace, &root] {
            paths.insert(dir.clone(), fact(dir, PathKind::Dir));
        }
        paths.insert(plan.run_temp_dir.clone(), fact(Path::new("/private/tmp/palisade-501/run-1"), PathKind::Dir));
        paths.insert(denied.clone(), fact(&real, PathKind::Dir));
        let missing = |p: &Path| PathKind::Missing { first_missing: p.to_path_buf(), parent_is_dir: true };
        paths.insert(protected.clone(), fact(&protected, missing(&protected)));
        let facts = SeatbeltFacts { paths };
        let token = RunToken::from_bytes([0xa5; RunToken::BYTES]);

        // The expectations read the facts as finally measured: two names may be one path (a
        // denied path that is also the protected one), and then one fact describes both.
        let real_of = |p: &Path| facts.paths[p].real.clone();
        let real = real_of(&denied);
        let inputs = [&denied, &protected, &root, &real];
        let mut roots: Vec<PathBuf> = Vec::new();
        for dir in [&plan.workspace, &root, &plan.run_temp_dir] {
            roots.push(normal(dir));
            roots.push(normal(&real_of(dir)));
        }
        let protected_real = real_of(&protected);
        match profile(&plan, &facts, &token) {
            Err(SeatbeltError::ControlCharacter(_) | SeatbeltError::NotUtf8(_)) => {
                assert!(inputs.iter().chain([&&protected_real]).any(|p| p.to_str().is_none_or(|t| t.chars().any(char::is_control))));
            }
            Err(SeatbeltError::ParentComponent(_)) => {
                assert!(inputs.iter().chain([&&protected_real]).any(|p| p.components().any(|c| c == Component::ParentDir)));
            }
            Err(SeatbeltError::MaskContainsWritable { .. }) => {
                let masks = [normal(&denied), normal(&real), normal(&protected), normal(&protected_real)];
                assert!(masks.iter().any(|m| roots.iter().any(|r| r.starts_with(m))));
            }
            Err(other) => panic!("unexpected refusal: {other}"),
            Ok(text) => {
                assert!(inputs.iter().all(|p| quotable(p)));
                assert!(text.starts_with("(version 1)\n(deny default)\n"));
                let tokens = tokenize(&text).expect("the profile reads");
                let forms = forms(&tokens);
                for form in &forms {
                    let head = match form.get(1) {
                        Some(Tok::Atom(a)) => a.as_str(),
                        _ => panic!("a form without a head"),
                    };
                    assert!(matches!(head, "version" | "allow" | "deny"), "{head}");
                    assert!(!(head == "allow" && atom(form, "default")), "(allow default)");
                    if head == "allow" && atom(form, "file-write*") {
                        assert!(roots.iter().any(|r| has_subpath(form, r)), "a write allowance outside the roots: {form:?}");
                    }
                }
                let last_read_allow = forms
                    .iter()
                    .rposition(|f| f.get(1) == Some(&Tok::Atom("allow".into())) && atom(f, "file-read*"));
                for spelling in [normal(&denied), normal(&real)] {
                    let denial = forms.iter().rposition(|f| {
                        f.get(1) == Some(&Tok::Atom("deny".into())) && atom(f, "file-read*") && has_subpath(f, &spelling)
                    });
                    assert!(denial.is_some() && denial > last_read_allow, "{spelling:?} is not denied last");
                }
            }
        }
    }
);
