//! The command's environment: the decision's allowlist applied to Palisade's own environment,
//! plus what Palisade sets itself, and the supervisor's own environment kept out of reach.
//!
//! Why the allowlist comes from the decision and not from the configuration file: what the
//! command may see is part of what was decided (and replayed); the host applies exactly the
//! list the plan shows (`plan.environment.allowlist`, the host's list or the built-in default,
//! with its origin). The rules (exact names, `PREFIX*` patterns that never pass secret-looking names)
//! are the engine's [`palisade_engine::environment`], so the two cannot disagree.
//!
//! The audit outcome lists the names passed, withheld and set — never a value.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use palisade_engine::environment::{self, Verdict};
use serde::Serialize;

/// Variables Palisade always sets itself, whatever the allowlist says.
pub const SET_BY_PALISADE: [&str; 3] = ["HOME", "PATH", "TMPDIR"];

/// `PATH` when Palisade's own environment has none: the workspace's one default
/// ([`palisade_shims::path::DEFAULT_PATH`]).
pub const FALLBACK_PATH: &str = palisade_shims::path::DEFAULT_PATH;

/// The command's environment and its account.
#[derive(Clone, Debug)]
pub struct CommandEnv {
    /// The complete environment, sorted by name.
    pub env: Vec<(OsString, OsString)>,
    pub record: EnvRecord,
}

/// What the audit outcome says about the environment (names only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvRecord {
    /// `default` (the built-in list) or `host` (the host configuration's, as decided).
    pub allowlist: String,
    /// Variables passed from Palisade's environment, sorted.
    pub passed: Vec<String>,
    /// The secret-looking names among `passed`: each passed because the host named it exactly.
    pub passed_secrets: Vec<String>,
    /// Variables of Palisade's environment the command did not get, sorted.
    pub withheld: Vec<String>,
    /// Variables Palisade set itself (`HOME`, `PATH`, `TMPDIR`, proxy variables), sorted.
    pub set: Vec<String>,
    /// How the supervisor's own environment is kept from `/proc/<pid>/environ` (see
    /// [`scrub_own_environ`], [`make_undumpable`]).
    pub supervisor_environ: String,
}

/// The command's environment: every variable of `vars` the allowlist passes, then `HOME`
/// (Palisade's own when absolute, else `home`), `PATH` (Palisade's own, else
/// [`FALLBACK_PATH`]) and `TMPDIR` (the run's private directory). A name that is not UTF-8 is
/// withheld.
pub fn command_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    allowlist: &[String],
    allowlist_source: &str,
    home: &str,
    run_temp_dir: &Path,
) -> CommandEnv {
    let entries = environment::parse_all(allowlist.iter().map(String::as_str));
    let mut env = Vec::new();
    let mut record = EnvRecord {
        allowlist: allowlist_source.to_owned(),
        ..EnvRecord::default()
    };
    let mut parent_home = None;
    let mut parent_path = None;
    for (name, value) in vars {
        let Some(text) = name.to_str() else {
            record.withheld.push(name.to_string_lossy().into_owned());
            continue;
        };
        match text {
            "HOME" => parent_home = Some(value),
            "PATH" => parent_path = Some(value),
            "TMPDIR" => {}
            _ => match environment::verdict(&entries, text) {
                verdict if verdict.passes() => {
                    if matches!(verdict, Verdict::Exact { secret: true }) {
                        record.passed_secrets.push(text.to_owned());
                    }
                    record.passed.push(text.to_owned());
                    env.push((name, value));
                }
                _ => record.withheld.push(text.to_owned()),
            },
        }
    }
    let home = parent_home
        .filter(|h| Path::new(h).is_absolute())
        .unwrap_or_else(|| OsString::from(home));
    let path = parent_path
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| OsString::from(FALLBACK_PATH));
    env.push(("HOME".into(), home));
    env.push(("PATH".into(), path));
    env.push(("TMPDIR".into(), run_temp_dir.as_os_str().to_owned()));
    env.sort();
    record.passed.sort();
    record.passed_secrets.sort();
    record.withheld.sort();
    record.withheld.dedup();
    record.set = SET_BY_PALISADE.iter().map(|s| (*s).to_owned()).collect();
    CommandEnv { env, record }
}

impl CommandEnv {
    /// Brings `set` and `passed` up to date with the plan's final environment (the launcher
    /// adds or replaces proxy variables for filtered egress).
    pub fn account_final(&mut self, final_env: &[(OsString, OsString)]) {
        let original = |name: &OsStr| self.env.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        let mut set: Vec<String> = Vec::new();
        for (name, value) in final_env {
            let text = name.to_string_lossy().into_owned();
            let passed_unchanged =
                self.record.passed.contains(&text) && original(name).is_some_and(|v| v == value);
            if !passed_unchanged {
                set.push(text);
            }
        }
        set.sort();
        let record = &mut self.record;
        record.passed.retain(|name| !set.contains(name));
        record.passed_secrets.retain(|name| !set.contains(name));
        record.set = set;
    }
}

/// Keeps Palisade's own environment (which holds everything the allowlist withheld) from being
/// read through `/proc/<supervisor pid>/environ` by the command it supervises. Call it first
/// thing in `palisade run`, while the process has a single thread.
///
/// bwrap's and Landlock's commands cannot reach the supervisor anyway (their own PID namespace
/// and `/proc` for bwrap; Landlock's ptrace scoping, which governs `/proc/<pid>/environ`, for
/// Landlock). `direct-dedicated` and `workspace` runs share the host's `/proc` and user, and as
/// root the command keeps `CAP_SYS_PTRACE`, so the kernel's view of the environment is emptied:
///
/// 1. every variable is set again (`setenv` puts a heap copy in `environ`), so nothing in the
///    process refers to the strings the kernel placed on the initial stack any more — checked
///    pointer by pointer;
/// 2. that block (`env_start..env_end` in `/proc/self/stat`, exactly what `/proc/<pid>/environ`
///    reads) is zeroed.
///
/// Palisade keeps reading its environment normally (from the copies). The copies themselves are
/// kept from an unprivileged command by [`make_undumpable`]; a root command in an unconfined mode
/// could still read the supervisor's memory (`/proc/<pid>/mem` needs `CAP_SYS_PTRACE`, which
/// those modes do not drop) — root is not a boundary there.
pub fn scrub_own_environ() -> Result<(), String> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        crate::sys::scrub_initial_environ()
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        Err("not supported on this platform".into())
    }
}

/// `PR_SET_DUMPABLE 0`: another process's `environ`, `mem` and ptrace need ptrace access, which
/// for a non-dumpable process needs `CAP_SYS_PTRACE` — an unprivileged command has none. Returns
/// whether it took.
/// Elsewhere there is no such flag to set; the record then says "dumpable".
pub fn make_undumpable() -> bool {
    crate::sys::set_undumpable()
}

/// The `supervisorEnviron` entry of the record: what [`scrub_own_environ`] and
/// [`make_undumpable`] achieved.
pub fn concealment(scrubbed: &Result<(), String>, undumpable: bool) -> String {
    match (scrubbed, undumpable) {
        (Ok(()), true) => "scrubbed, not-dumpable".into(),
        (Ok(()), false) => "scrubbed".into(),
        (Err(why), true) => format!("not-dumpable (not scrubbed: {why})"),
        (Err(why), false) => format!("exposed (not scrubbed: {why}; dumpable)"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    fn vars() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("GITHUB_TOKEN", "secret"),
            ("GITHUB_SHA", "abc"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("NPM_TOKEN", "secret"),
            ("LC_ALL", "C"),
            ("TMPDIR", "/elsewhere"),
            ("SSH_AUTH_SOCK", "/run/ssh"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .to_vec()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn default_allowlist_passes_no_secrets() {
        let list: Vec<String> = environment::DEFAULT_ALLOWLIST
            .iter()
            .map(|e| (*e).to_owned())
            .collect();
        let source = "default";
        let out = command_env(vars(), &list, source, "/h", Path::new("/tmp/run"));
        assert_eq!(names(&out.env), ["HOME", "LC_ALL", "PATH", "TMPDIR"]);
        assert_eq!(out.env[0].1, OsString::from("/home/u"));
        assert_eq!(out.env[3].1, OsString::from("/tmp/run"));
        assert_eq!(out.record.passed, ["LC_ALL"]);
        assert_eq!(
            out.record.withheld,
            [
                "AWS_SECRET_ACCESS_KEY",
                "GITHUB_SHA",
                "GITHUB_TOKEN",
                "NPM_TOKEN",
                "SSH_AUTH_SOCK"
            ]
        );
        assert!(out.record.passed_secrets.is_empty());
    }

    #[test]
    fn host_allowlist_patterns_and_explicit_secrets() {
        let list = strings(&["GITHUB_*", "NPM_TOKEN", "AWS*"]);
        let source = "host";
        let out = command_env(vars(), &list, source, "/h", Path::new("/tmp/run"));
        assert_eq!(
            names(&out.env),
            ["GITHUB_SHA", "HOME", "NPM_TOKEN", "PATH", "TMPDIR"]
        );
        assert_eq!(out.record.passed_secrets, ["NPM_TOKEN"]);
        assert!(out.record.withheld.contains(&"GITHUB_TOKEN".to_owned()));
        assert!(
            out.record
                .withheld
                .contains(&"AWS_SECRET_ACCESS_KEY".to_owned())
        );
    }

    #[test]
    fn fallbacks_for_home_and_path() {
        let out = command_env(
            [(OsString::from("HOME"), OsString::from("relative"))],
            &[],
            "host",
            "/home/fact",
            Path::new("/tmp/run"),
        );
        assert_eq!(out.env[0].1, OsString::from("/home/fact"));
        assert_eq!(out.env[1].1, OsString::from(FALLBACK_PATH));
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_initial_environment_range_is_found() {
        let (start, end) = crate::sys::initial_environment_range().unwrap();
        assert!(start < end);
    }

    #[test]
    fn final_accounting_moves_replaced_variables_to_set() {
        let list = strings(&["HTTP_PROXY", "LANG"]);
        let source = "host";
        let mut out = command_env(
            [
                (
                    OsString::from("HTTP_PROXY"),
                    OsString::from("http://corp:8080"),
                ),
                (OsString::from("LANG"), OsString::from("C")),
            ],
            &list,
            source,
            "/h",
            Path::new("/t"),
        );
        let mut final_env = out.env.clone();
        final_env.retain(|(n, _)| n != "HTTP_PROXY");
        final_env.push(("HTTP_PROXY".into(), "http://127.0.0.1:3128".into()));
        final_env.push(("NO_PROXY".into(), "localhost".into()));
        out.account_final(&final_env);
        assert_eq!(out.record.passed, ["LANG"]);
        assert_eq!(
            out.record.set,
            ["HOME", "HTTP_PROXY", "NO_PROXY", "PATH", "TMPDIR"]
        );
    }
}
