//! After a run: git hooks and configuration that the run left in a repository no mount
//! protected, reported on stderr and in the outcome (`gitPlanted`).
//!
//! Why after the run: a repository made during the run (`cargo new hello` makes
//! `hello/.git`, `git init` in a subdirectory) did not exist when the sandbox's mounts were made,
//! so nothing could keep its `hooks/` and `config` read-only, and the host's git runs what they
//! say at the next `git status` there. The same holds for a repository that existed but whose
//! surface the backend does not mask (Landlock, `direct-dedicated`). Palisade cannot undo what
//! the command wrote; it can make sure the user knows before running git there.
//!
//! What is looked at, bounded so it stays within the run's speed budget: every directory at
//! the first two levels below each writable root (and the root itself) that holds a `.git`,
//! except git directories whose surface the plan enforced read-only. What is reported: the
//! executable hooks, and the keys of `config` / `config.worktree` that make git run a command,
//! in files changed since the run started (their *ctime*, which the command cannot set back);
//! and a `.git` file (a `gitdir:` pointer) written during the run.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// How many directories one run's scan looks in at most (about 2 µs each: a lookup of their
/// `.git`, and for the first level a listing). Past it the outcome says the scan stopped.
pub const MAX_DIRS: usize = 4096;

/// Slack for the filesystem's coarse clock, which can lag the one that timed the start.
const CLOCK_SLACK: Duration = Duration::from_secs(1);

/// Longest value quoted back.
const MAX_VALUE: usize = 200;

/// One repository the run left something in that git will run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Planted {
    /// The git directory.
    pub git_dir: String,
    /// A `.git` file written during the run, pointing here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_file: Option<String>,
    /// Executable hooks written during the run, by name.
    pub hooks: Vec<String>,
    /// Configuration keys that run a command, from files written during the run.
    pub config: Vec<ConfigKey>,
}

/// One configuration key that makes git run a command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigKey {
    /// `config` or `config.worktree`.
    pub file: String,
    /// Lower-case section and key, the subsection as written (`alias.st`, `filter.lfs.smudge`).
    pub key: String,
    pub value: String,
}

impl Planted {
    /// The line `palisade run` says about it.
    pub fn line(&self) -> String {
        let mut items: Vec<String> = Vec::new();
        if let Some(file) = &self.git_file {
            items.push(format!("`.git` file {file} written"));
        }
        items.extend(self.hooks.iter().map(|hook| format!("hook {hook}")));
        items.extend(
            self.config
                .iter()
                .map(|c| format!("{} = `{}`", c.key, c.value)),
        );
        format!(
            "palisade: this run left what git RUNS in {} (not protected: made during the run, or its backend does not mask it): {}; check or remove them before running git there",
            self.git_dir,
            items.join(", ")
        )
    }
}

/// What one scan found, and how far it looked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    pub planted: Vec<Planted>,
    /// Directories looked in.
    pub directories: usize,
    /// Whether every directory of the first two levels was looked in ([`MAX_DIRS`]).
    pub complete: bool,
}

/// Scans the writable roots for what the run planted (see the module comment). `enforced`:
/// the git directories whose surface the plan kept read-only.
pub fn scan(roots: &[String], enforced: &[String], started: SystemTime) -> Scan {
    let since = started.checked_sub(CLOCK_SLACK).unwrap_or(UNIX_EPOCH);
    let mut found = Scan {
        complete: true,
        ..Scan::default()
    };
    let mut seen: Vec<PathBuf> = Vec::new();
    for root in roots {
        let mut dirs: Vec<PathBuf> = vec![PathBuf::from(root)];
        for depth in 0..=2 {
            let mut next = Vec::new();
            for dir in &dirs {
                if found.directories >= MAX_DIRS {
                    found.complete = false;
                    return found;
                }
                found.directories += 1;
                // The first levels are listed anyway (for the next): the listing says whether
                // a `.git` is there, without a lookup.
                let has_git = if depth < 2 {
                    children(dir, &mut next)
                } else {
                    true
                };
                if has_git && let Some(planted) = look_at(dir, enforced, since, &mut seen) {
                    found.planted.push(planted);
                }
            }
            dirs = next;
        }
    }
    found
}

/// Adds the subdirectories of `dir` (not `.git`, not through symlinks) to `out`; whether `dir`
/// holds a `.git`.
fn children(dir: &Path, out: &mut Vec<PathBuf>) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut has_git = false;
    for entry in entries.filter_map(Result::ok) {
        if entry.file_name() == ".git" {
            has_git = true;
        } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(entry.path());
        }
    }
    has_git
}

/// What `dir/.git` holds that the run planted, if anything.
fn look_at(
    dir: &Path,
    enforced: &[String],
    since: SystemTime,
    seen: &mut Vec<PathBuf>,
) -> Option<Planted> {
    let dot_git = dir.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    let (git_dir, git_file) = if meta.is_dir() {
        (dot_git, None)
    } else if meta.is_file() {
        let text = std::fs::read_to_string(&dot_git).ok()?;
        let target = text
            .lines()
            .next()?
            .strip_prefix("gitdir:")?
            .trim()
            .to_owned();
        let written = changed_since(&meta, since).then(|| dot_git.display().to_string());
        (dir.join(target), written)
    } else {
        return None;
    };
    let git_dir = std::fs::canonicalize(&git_dir).unwrap_or(git_dir);
    let name = git_dir.display().to_string();
    if seen.contains(&git_dir) || (git_file.is_none() && enforced.contains(&name)) {
        return None;
    }
    seen.push(git_dir.clone());
    let planted = Planted {
        git_dir: name,
        git_file,
        hooks: hooks(&git_dir.join("hooks"), since),
        config: ["config", "config.worktree"]
            .into_iter()
            .flat_map(|file| config_keys(&git_dir, file, since))
            .collect(),
    };
    (planted.git_file.is_some() || !planted.hooks.is_empty() || !planted.config.is_empty())
        .then_some(planted)
}

fn changed_since(meta: &std::fs::Metadata, since: SystemTime) -> bool {
    let ctime = u64::try_from(meta.ctime()).unwrap_or(0);
    let nanos = u32::try_from(meta.ctime_nsec()).unwrap_or(0);
    UNIX_EPOCH + Duration::new(ctime, nanos) >= since
}

/// Executable hooks (not git's `.sample`s) changed since the start, sorted.
fn hooks(dir: &Path, since: SystemTime) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            // Followed: a hook that is a symlink to an executable runs too.
            let meta = std::fs::metadata(entry.path()).ok()?;
            let link = std::fs::symlink_metadata(entry.path()).ok()?;
            let executable = meta.is_file() && meta.mode() & 0o111 != 0;
            (executable
                && !name.ends_with(".sample")
                && (changed_since(&meta, since) || changed_since(&link, since)))
            .then_some(name)
        })
        .collect();
    out.sort();
    out
}

/// The keys that run a command in `git_dir/file`, when it changed since the start.
fn config_keys(git_dir: &Path, file: &str, since: SystemTime) -> Vec<ConfigKey> {
    let path = git_dir.join(file);
    let Ok(meta) = std::fs::metadata(&path) else {
        return Vec::new();
    };
    if !meta.is_file() || !changed_since(&meta, since) || meta.len() > 1 << 20 {
        return Vec::new();
    }
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Vec::new();
    };
    parse(&text)
        .into_iter()
        .filter(|(key, value)| runs_a_command(key, value))
        .map(|(key, value)| ConfigKey {
            file: file.to_owned(),
            key,
            value: value.chars().take(MAX_VALUE).collect(),
        })
        .collect()
}

/// Whether git runs a command for this key (lower-case section and name).
fn runs_a_command(key: &str, value: &str) -> bool {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let name = rest.rsplit('.').next().unwrap_or(rest);
    let has_sub = rest.contains('.');
    let boolean = matches!(
        value.to_ascii_lowercase().as_str(),
        "" | "true" | "false" | "yes" | "no" | "on" | "off" | "0" | "1"
    );
    match (section, has_sub, name) {
        ("core", false, "fsmonitor") => !boolean,
        (
            "core",
            false,
            "hookspath"
            | "sshcommand"
            | "pager"
            | "editor"
            | "askpass"
            | "gitproxy"
            | "alternaterefscommand",
        ) => true,
        ("alias", _, _) => value.trim_start().starts_with('!'),
        ("include", false, "path") | ("includeif", true, "path") => true,
        ("filter", true, "clean" | "smudge" | "process") => true,
        ("diff", true, "textconv" | "command") | ("diff", false, "external") => true,
        ("merge", true, "driver") => true,
        ("credential", _, "helper") => true,
        ("pager", _, _) => !boolean,
        ("sequence", false, "editor") => true,
        ("gpg", _, "program") => true,
        ("uploadpack", false, "packobjectshook") => true,
        ("remote", true, "uploadpack" | "receivepack" | "proxy") => true,
        ("url", true, "insteadof" | "pushinsteadof") => value.contains("::"),
        _ => false,
    }
}

/// A git configuration file's `(key, value)` pairs: section and name lower-cased, a quoted
/// subsection as written. Enough of git's syntax to find keys; what it cannot read is skipped.
fn parse(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut line = line.trim().to_owned();
        // A trailing backslash continues the value on the next line.
        while line.ends_with('\\') {
            line.pop();
            match lines.next() {
                Some(next) => line.push_str(next.trim()),
                None => break,
            }
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let Some((header, after)) = rest.split_once(']') else {
                continue;
            };
            section = match header.split_once(char::is_whitespace) {
                Some((name, sub)) => {
                    let sub = sub.trim().trim_matches('"').replace("\\\"", "\"");
                    format!("{}.{sub}", name.to_ascii_lowercase())
                }
                None => header.to_ascii_lowercase(),
            };
            // `[core] fsmonitor = x` on one line is valid git.
            line = after.trim().to_owned();
            if line.is_empty() {
                continue;
            }
        }
        let (name, value) = match line.split_once('=') {
            Some((name, value)) => (name.trim(), unquote(value.trim())),
            None => (line.as_str(), String::new()),
        };
        if section.is_empty() || name.is_empty() {
            continue;
        }
        out.push((format!("{section}.{}", name.to_ascii_lowercase()), value));
    }
    out
}

/// A value without its quotes and trailing comment.
fn unquote(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push(match next {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
            }
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    #[test]
    fn finds_the_keys_that_run_commands() {
        let text = "[core]\n\tfsmonitor = \"echo x > /tmp/p; false\"\n\tbare = false\n\
            [core] sshCommand = ssh -i k\n[alias]\n\tst = status\n\tp = !sh -c 'id'\n\
            [include]\n\tpath = ../evil\n[filter \"lfs\"]\n\tsmudge = run %f\n\
            [remote \"origin\"]\n\turl = x\n";
        let keys: Vec<(String, String)> = parse(text)
            .into_iter()
            .filter(|(k, v)| runs_a_command(k, v))
            .collect();
        assert_eq!(
            keys,
            [
                ("core.fsmonitor".into(), "echo x > /tmp/p; false".into()),
                ("core.sshcommand".into(), "ssh -i k".into()),
                ("alias.p".into(), "!sh -c 'id'".into()),
                ("include.path".into(), "../evil".into()),
                ("filter.lfs.smudge".into(), "run %f".into()),
            ]
        );
        // The built-in fsmonitor is a boolean, not a command.
        assert!(!runs_a_command("core.fsmonitor", "true"));
    }

    #[test]
    fn reports_what_was_planted_two_levels_down_and_nothing_older() {
        let root = tempfile::tempdir().unwrap();
        let old = root.path().join("old/.git/hooks");
        std::fs::create_dir_all(&old).unwrap();
        write_hook(&old.join("pre-commit"));
        let enforced_dir = root.path().join(".git");
        std::fs::create_dir_all(enforced_dir.join("hooks")).unwrap();
        let started = SystemTime::now() + CLOCK_SLACK + Duration::from_millis(50);
        std::thread::sleep(Duration::from_millis(100));
        write_hook(&enforced_dir.join("hooks/post-checkout"));
        let new = root.path().join("a/hello/.git");
        std::fs::create_dir_all(new.join("hooks")).unwrap();
        write_hook(&new.join("hooks/post-checkout"));
        std::fs::write(new.join("hooks/pre-push.sample"), "x").unwrap();
        std::fs::write(new.join("config"), "[core]\n\tfsmonitor = echo hi\n").unwrap();
        // Three levels down: beyond the bound.
        let deep = root.path().join("a/b/c/.git/hooks");
        std::fs::create_dir_all(&deep).unwrap();
        write_hook(&deep.join("post-checkout"));

        let root_name = root.path().canonicalize().unwrap().display().to_string();
        let enforced = [enforced_dir.canonicalize().unwrap().display().to_string()];
        let scanned = scan(&[root_name], &enforced, started);
        assert!(scanned.complete);
        let found = scanned.planted;
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].git_dir.ends_with("a/hello/.git"));
        assert_eq!(found[0].hooks, ["post-checkout"]);
        assert_eq!(found[0].config[0].key, "core.fsmonitor");
        let line = found[0].line();
        assert!(line.contains("hook post-checkout") && line.contains("core.fsmonitor"));
    }

    fn write_hook(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, "#!/bin/sh\necho planted\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
