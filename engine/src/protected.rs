//! Protected paths: what stays read-only, and cannot be created when missing, in every sandbox
//! whose backend can mask it — the seed's four in the workspace, and git's execution surface.
//!
//! Why git's: the host's own git, run unconfined after the sandbox is gone (agent runners run
//! `git status` after nearly every task), executes what a repository's `hooks/` and `config`
//! tell it to: a planted `post-checkout` hook, `core.fsmonitor`, `core.hooksPath`,
//! `core.sshCommand`, a `!` alias, an `include.path`. None of those files is tracked, so no
//! review of the task's diff shows them. So in the repository that holds the workspace — its git
//! directory, the common directory of a linked worktree, each submodule's git directory — the
//! files `hooks`, `config` and `config.worktree` are protected (as narrow as Anthropic's srt,
//! which keeps commits, branches, stash and the index working inside), and `.git` at the
//! workspace's root is protected whenever it is not that repository's git directory: missing (a
//! `git init` there would make a repository the host's git trusts next), or a file (a `gitdir:`
//! pointer the command could re-point at a directory of its own).
//!
//! Where the git directories are is an outside fact: the host measures it
//! ([`HostFacts::git_dirs`]) and the decision records it. Absent, the engine assumes the usual
//! layout, `.git` at the workspace's root.
//!
//! Each path carries its *rule*, the built-in's name (`.git/hooks` for every git directory's
//! `hooks`): the host configuration may exempt a git rule by that name, and the decision lists
//! what it dropped and why. The seed's four cannot be exempted, and no flag exempts anything.

use crate::model::HostFacts;
use crate::output::{DroppedProtectedPath, PolicyProtectedPath, ProtectedOrigin};
use crate::paths;

/// Workspace-relative paths the seed protects, in this order.
pub(crate) const SEED_PROTECTED_PATHS: [&str; 4] =
    [".github", ".loopwright/policies", "AGENTS.md", "CLAUDE.md"];

/// The rule for `.git` at the workspace's root, when it is not the repository's git directory.
pub const GIT_DIR_RULE: &str = ".git";

/// The rules for what a git directory holds that git executes or obeys, in this order; each
/// names the path as the usual layout (`.git/` at the workspace's root) spells it.
pub const GIT_SURFACE_RULES: [(&str, &str); 3] = [
    (".git/hooks", "hooks"),
    (".git/config", "config"),
    (".git/config.worktree", "config.worktree"),
];

/// The rule for Palisade's own state (its host configuration, caches, runtime-profile file)
/// where it lies inside a writable root: what the next run trusts. Never exempted.
pub const STATE_RULE: &str = "palisade-state";

/// The most state paths a host may report.
pub const MAX_STATE_PATHS: usize = 32;

/// Every rule the host configuration may exempt (`exemptProtectedPaths`), in built-in order.
pub const EXEMPTABLE_RULES: [&str; 4] = [
    GIT_DIR_RULE,
    ".git/hooks",
    ".git/config",
    ".git/config.worktree",
];

/// The most git directories a host may report (a repository with this many submodules is
/// measured up to here; the host says so).
pub const MAX_GIT_DIRS: usize = 256;

/// The protected paths for this host, in built-in order (the seed's four, the workspace's
/// `.git`, then each git directory's surface), each once; and those dropped, with why.
pub(crate) fn resolve(host: &HostFacts) -> (Vec<PolicyProtectedPath>, Vec<DroppedProtectedPath>) {
    let workspace = &host.workspace_dir;
    let root_git = paths::join(workspace, ".git");
    let assumed;
    let git_dirs: &[String] = match &host.git_dirs {
        Some(dirs) => dirs,
        None => {
            assumed = [root_git.clone()];
            &assumed
        }
    };
    let mut candidates: Vec<(String, &'static str)> = SEED_PROTECTED_PATHS
        .iter()
        .map(|relative| (paths::join(workspace, relative), *relative))
        .collect();
    if !git_dirs.contains(&root_git) {
        candidates.push((root_git, GIT_DIR_RULE));
    }
    for dir in git_dirs {
        for (rule, name) in GIT_SURFACE_RULES {
            candidates.push((paths::join(dir, name), rule));
        }
    }
    // Palisade's own state, where a writable root would let the command rewrite it; elsewhere
    // the read-only root keeps it as it is.
    let writable = std::iter::once(workspace).chain(&host.writable_roots);
    let roots: Vec<&String> = writable.collect();
    for path in host.state_paths.iter().flatten() {
        if roots.iter().any(|root| paths::contains(root, path)) {
            candidates.push((path.clone(), STATE_RULE));
        }
    }

    let exempt = host.exempt_protected_paths.as_deref().unwrap_or_default();
    let mut kept: Vec<PolicyProtectedPath> = Vec::new();
    let mut dropped: Vec<DroppedProtectedPath> = Vec::new();
    for (path, rule) in candidates {
        if kept.iter().any(|p| p.path == path) || dropped.iter().any(|d| d.path == path) {
            continue;
        }
        // Only the host configuration drops one. A writable root inside a protected path is
        // not a reason (a flag may not exempt): the backends refuse such a plan.
        if exempt.iter().any(|e| e == rule) {
            dropped.push(DroppedProtectedPath {
                path,
                rule: rule.to_owned(),
                reason: String::from("exempted by the host configuration"),
            });
        } else {
            kept.push(PolicyProtectedPath {
                path,
                rule: rule.to_owned(),
                origin: ProtectedOrigin::BuiltIn,
            });
        }
    }
    (kept, dropped)
}

/// Whether a rule is one of git's (its paths are git's execution surface).
pub fn is_git_rule(rule: &str) -> bool {
    EXEMPTABLE_RULES.contains(&rule)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    fn paths_of(host: &HostFacts) -> Vec<String> {
        resolve(host).0.into_iter().map(|p| p.path).collect()
    }

    #[test]
    fn absent_facts_assume_git_at_the_workspace_root() {
        let host = HostFacts::linux_cli("/home/u", "/w");
        assert_eq!(
            paths_of(&host),
            [
                "/w/.github",
                "/w/.loopwright/policies",
                "/w/AGENTS.md",
                "/w/CLAUDE.md",
                "/w/.git/hooks",
                "/w/.git/config",
                "/w/.git/config.worktree",
            ]
        );
    }

    #[test]
    fn no_repository_protects_dot_git_itself() {
        let host = HostFacts {
            git_dirs: Some(vec![]),
            ..HostFacts::linux_cli("/home/u", "/w")
        };
        let (kept, dropped) = resolve(&host);
        assert!(dropped.is_empty());
        assert_eq!(kept.last().unwrap().path, "/w/.git");
        assert_eq!(kept.last().unwrap().rule, ".git");
        assert_eq!(kept.len(), 5);
    }

    #[test]
    fn a_linked_worktree_protects_its_git_file_and_both_directories() {
        let host = HostFacts {
            git_dirs: Some(vec!["/r/.git/worktrees/w".into(), "/r/.git".into()]),
            ..HostFacts::linux_cli("/home/u", "/w")
        };
        let got = paths_of(&host);
        assert_eq!(
            got[4..],
            [
                "/w/.git",
                "/r/.git/worktrees/w/hooks",
                "/r/.git/worktrees/w/config",
                "/r/.git/worktrees/w/config.worktree",
                "/r/.git/hooks",
                "/r/.git/config",
                "/r/.git/config.worktree",
            ]
        );
    }

    #[test]
    fn state_inside_a_writable_root_is_protected_and_elsewhere_not() {
        let host = HostFacts {
            git_dirs: Some(vec![]),
            writable_roots: vec!["/home/u/.config".into()],
            state_paths: Some(vec![
                "/etc/palisade".into(),
                "/home/u/.config/palisade".into(),
                "/w/.cache/palisade".into(),
            ]),
            ..HostFacts::linux_cli("/home/u", "/w")
        };
        let (kept, _) = resolve(&host);
        let state: Vec<&str> = kept
            .iter()
            .filter(|p| p.rule == STATE_RULE)
            .map(|p| p.path.as_str())
            .collect();
        assert_eq!(state, ["/home/u/.config/palisade", "/w/.cache/palisade"]);
    }

    #[test]
    fn a_writable_root_that_is_or_lies_in_palisades_state_is_unsafe() {
        for root in ["/home/u/.cache/palisade", "/home/u/.cache/palisade/x"] {
            let input = crate::test_support::input(HostFacts {
                writable_roots: vec![root.into()],
                state_paths: Some(vec!["/home/u/.cache/palisade".into()]),
                ..HostFacts::linux_cli("/home/u", "/w")
            });
            let errors = crate::host::unsafe_writable_roots(&input).into_listed();
            assert_eq!(errors.len(), 1, "{root}: {errors:?}");
            assert_eq!(errors[0].path, "host.writableRoots[0]");
            assert!(
                errors[0].message.contains("Palisade's own state"),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn only_the_host_configuration_drops_one() {
        let host = HostFacts {
            git_dirs: Some(vec!["/w/.git".into()]),
            exempt_protected_paths: Some(vec![".git/config".into()]),
            // A writable root inside a protected path exempts nothing: the shims refuse it.
            writable_roots: vec!["/w/.git/hooks/cache".into()],
            ..HostFacts::linux_cli("/home/u", "/w")
        };
        let (kept, dropped) = resolve(&host);
        assert_eq!(kept.len(), 6, "{kept:?}");
        assert!(kept.iter().any(|p| p.path == "/w/.git/hooks"));
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].path, "/w/.git/config");
        assert_eq!(dropped[0].rule, ".git/config");
        assert_eq!(dropped[0].reason, "exempted by the host configuration");
    }
}
