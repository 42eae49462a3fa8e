//! Finds the git directories of the repository that holds the workspace, the way git finds
//! them, without running git: the fact `host.gitDirs` the engine protects git's execution
//! surface from (`palisade_engine::protected`).
//!
//! Why not `git rev-parse`: a process costs milliseconds on every run, the user's git may be
//! absent or configured to run things, and what matters is where the host's git *will* look
//! next, which is the discovery below: from the workspace upwards, the first directory with a
//! `.git` (a git directory, or a file `gitdir: PATH`) or that is itself a bare repository. A
//! `.git` that is neither (a socket placeholder, garbage) is skipped, as git skips it.
//!
//! What is reported, real paths, each once: the git directory; the common directory its
//! `commondir` names (a linked worktree's main `.git`); every submodule's git directory under
//! the common directory's `modules/` (names may hold `/`, and submodules nest), to a bounded
//! depth and count. Nothing found: empty, and the engine protects `.git` at the workspace's
//! root so that none can be made there during the run.

use std::path::{Path, PathBuf};

use palisade_engine::protected::MAX_GIT_DIRS;

/// How deep below `modules/` a submodule's git directory is looked for (a name's `/`s and
/// nesting both count).
const MAX_MODULE_DEPTH: usize = 6;

/// The git directories of the repository holding `workspace` (an absolute, real path), in the
/// order above; empty when it is in none.
pub fn measure(workspace: &Path) -> Vec<String> {
    let Some(git_dir) = discover(workspace) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = vec![git_dir.clone()];
    let common = common_dir(&git_dir);
    if common != git_dir {
        dirs.push(common.clone());
    }
    modules(&common.join("modules"), 0, &mut dirs);
    dirs.iter()
        .filter_map(|dir| crate::facts::normalized_string(dir).ok())
        .fold(Vec::new(), |mut out, dir| {
            if !out.contains(&dir) && out.len() < MAX_GIT_DIRS {
                out.push(dir);
            }
            out
        })
}

/// The git directory git would use in `start`: `.git` there or above, or a bare repository.
fn discover(start: &Path) -> Option<PathBuf> {
    for dir in start.ancestors() {
        let dot_git = dir.join(".git");
        match std::fs::metadata(&dot_git) {
            Ok(meta) if meta.is_dir() && is_git_directory(&dot_git) => return real(&dot_git),
            Ok(meta) if meta.is_file() => {
                if let Some(target) = read_gitfile(&dot_git)
                    && is_git_directory(&target)
                {
                    return real(&target);
                }
            }
            _ => {}
        }
        if is_git_directory(dir) {
            return real(dir);
        }
    }
    None
}

/// A `.git` file's `gitdir:` target, relative to the file's directory.
fn read_gitfile(file: &Path) -> Option<PathBuf> {
    // A gitdir file is one short line; git itself refuses anything odd.
    let text = std::fs::read_to_string(file)
        .ok()
        .filter(|t| t.len() < 4096)?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    if target.is_empty() {
        return None;
    }
    let base = file.parent()?;
    Some(base.join(target))
}

/// Whether `dir` is a git directory as git judges it: `HEAD`, and `objects/` and `refs/` in
/// its common directory.
fn is_git_directory(dir: &Path) -> bool {
    if !dir.join("HEAD").is_file() {
        return false;
    }
    let common = common_dir(dir);
    common.join("objects").is_dir() && common.join("refs").is_dir()
}

/// The common directory of a git directory: what its `commondir` file names (relative to
/// it), or itself.
fn common_dir(git_dir: &Path) -> PathBuf {
    std::fs::read_to_string(git_dir.join("commondir"))
        .ok()
        .and_then(|text| {
            let line = text.lines().next()?.trim().to_owned();
            (!line.is_empty()).then(|| git_dir.join(line))
        })
        .and_then(|dir| real(&dir))
        .unwrap_or_else(|| git_dir.to_path_buf())
}

/// Every submodule git directory at or below `dir` (a `modules/` directory or a name's
/// component), depth-first in name order.
fn modules(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth >= MAX_MODULE_DEPTH || out.len() >= MAX_GIT_DIRS {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.path())
        .collect();
    children.sort();
    for child in children {
        if out.len() >= MAX_GIT_DIRS {
            return;
        }
        if is_git_directory(&child) {
            if let Some(real) = real(&child) {
                out.push(real);
            }
            modules(&child.join("modules"), depth + 1, out);
        } else {
            modules(&child, depth + 1, out);
        }
    }
}

fn real(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let status = Command::new("git")
            .args(["-c", "protocol.file.allow=always"])
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?} in {}", dir.display());
    }

    fn real_string(path: &Path) -> String {
        crate::facts::normalized_string(&std::fs::canonicalize(path).unwrap()).unwrap()
    }

    #[test]
    fn no_repository_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        // A `.git` that is no repository (a placeholder, garbage) is skipped, as git skips it.
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        assert!(measure(&dir.path().canonicalize().unwrap()).is_empty());
    }

    #[test]
    fn a_subdirectory_finds_its_repository_and_its_submodules() {
        let dir = tempfile::tempdir().unwrap();
        let sub_src = dir.path().join("lib");
        std::fs::create_dir(&sub_src).unwrap();
        git(&sub_src, &["init", "-q"]);
        git(&sub_src, &["commit", "-q", "--allow-empty", "-m", "x"]);
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        git(
            &repo,
            &[
                "submodule",
                "-q",
                "add",
                sub_src.to_str().unwrap(),
                "vendor/lib",
            ],
        );
        let work = repo.join("src");
        std::fs::create_dir(&work).unwrap();
        let got = measure(&work.canonicalize().unwrap());
        assert_eq!(
            got,
            [
                real_string(&repo.join(".git")),
                real_string(&repo.join(".git/modules/vendor/lib")),
            ]
        );
        // From inside the submodule: its own git directory (through its `.git` file) first.
        let got = measure(&repo.join("vendor/lib").canonicalize().unwrap());
        assert_eq!(got, [real_string(&repo.join(".git/modules/vendor/lib"))]);
    }

    #[test]
    fn a_linked_worktree_names_its_own_and_the_common_directory() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "x"]);
        git(&repo, &["worktree", "add", "-q", "../wt"]);
        let got = measure(&dir.path().join("wt").canonicalize().unwrap());
        assert_eq!(
            got,
            [
                real_string(&repo.join(".git/worktrees/wt")),
                real_string(&repo.join(".git")),
            ]
        );
    }
}
