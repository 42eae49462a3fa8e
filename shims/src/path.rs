//! The one `PATH` search of the workspace: how a command name becomes the program to execute.
//!
//! `execvp`'s rules: a name with a `/` is a path and is not searched for; any other name is
//! looked for in each entry of the search path in turn, and the first executable regular file
//! wins (`access(X_OK)`, as `execve` would judge it). [`NotRunnable`] tells "not found" (127, as
//! `env` exits) from "found but not executable" (126). Callers differ in two choices, which a
//! [`Search`] states: whether relative entries (an empty entry means `.`) are searched, as
//! `execvp` does, or skipped, for a search made on behalf of a sandbox or a probe, where the
//! launcher's working directory means nothing; and which directory a relative name with a `/`
//! is taken in. Which search path is one choice too: a launched command's is its own `PATH`
//! ([`of_env`]), the launcher's and the bridge's their process's ([`of_process`]); with no `PATH`
//! at all, every caller searches [`DEFAULT_PATH`].
//!
//! Callers: the Linux supervisor ([`crate::supervise::run`]), the sandbox init's candidates
//! ([`crate::init`]), the host's command resolution and backend probes, and the proxy's egress
//! bridge (`palisade_proxy::bridge`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::sys;

/// `PATH` when none is set: the value `env`, `sudo` and systemd use.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The search path of a command run with `env`: its `PATH`, else [`DEFAULT_PATH`] — never the
/// launcher's own `PATH`, which the command does not see. The one choice for every launch (the
/// host's command resolution, the supervisor, the sandbox init).
pub fn of_env(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> &OsStr {
    env.iter()
        .find(|(key, _)| key == "PATH")
        .map_or(OsStr::new(DEFAULT_PATH), |(_, value)| value.as_os_str())
}

/// The search path of this process (the launcher's probes, the bridge inside a sandbox): its
/// `PATH`, else [`DEFAULT_PATH`].
pub fn of_process() -> std::ffi::OsString {
    std::env::var_os("PATH").unwrap_or_else(|| std::ffi::OsString::from(DEFAULT_PATH))
}

/// Why a command cannot be executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotRunnable {
    /// Nothing by that name (or an empty name).
    #[error("command not found")]
    NotFound,
    /// Something by that name, but not an executable regular file (for a searched name: in
    /// some entry, and nothing executable in any).
    #[error("permission denied")]
    NotExecutable,
}

impl NotRunnable {
    /// The status `env` exits with: 127 when not found, 126 when found but not executable.
    pub fn exit_status(self) -> u8 {
        match self {
            NotRunnable::NotFound => 127,
            NotRunnable::NotExecutable => 126,
        }
    }
}

/// Where [`find_program`] looks.
#[derive(Clone, Copy, Debug)]
pub struct Search<'a> {
    path: &'a OsStr,
    relative_entries: bool,
    dir: Option<&'a Path>,
}

impl<'a> Search<'a> {
    /// `execvp`'s search of `path`: every entry, an empty one meaning `.`, relative entries
    /// taken from this process's working directory.
    pub fn execvp(path: &'a OsStr) -> Self {
        Search {
            path,
            relative_entries: true,
            dir: None,
        }
    }

    /// Only the absolute entries of `path` (relative and empty ones are skipped).
    pub fn absolute_entries(path: &'a OsStr) -> Self {
        Search {
            path,
            relative_entries: false,
            dir: None,
        }
    }

    /// A relative name with a `/` is taken in `dir` (otherwise in this process's working
    /// directory).
    pub fn names_relative_to(self, dir: &'a Path) -> Self {
        Search {
            dir: Some(dir),
            ..self
        }
    }

    /// Every path `name` is tried at, in order.
    pub fn candidates(&self, name: &'a OsStr) -> impl Iterator<Item = PathBuf> + 'a {
        let relative_entries = self.relative_entries;
        self.path
            .as_bytes()
            .split(|b| *b == b':')
            .map(|entry| {
                if entry.is_empty() {
                    Path::new(".")
                } else {
                    Path::new(OsStr::from_bytes(entry))
                }
            })
            .filter(move |dir| relative_entries || dir.is_absolute())
            .map(move |dir| dir.join(name))
    }
}

/// The program `name` names: a name with a `/` as it is (in the search's directory when
/// relative; not checked, as `execvp` leaves that to `execve`: see [`runnable`]), else the
/// first executable regular file called `name` among the search's candidates.
pub fn find_program(name: &OsStr, search: &Search<'_>) -> Result<PathBuf, NotRunnable> {
    if name.is_empty() {
        return Err(NotRunnable::NotFound);
    }
    if name.as_bytes().contains(&b'/') {
        let named = Path::new(name);
        return Ok(match search.dir {
            Some(dir) if named.is_relative() => dir.join(named),
            _ => named.to_path_buf(),
        });
    }
    let mut unexecutable = false;
    for candidate in search.candidates(name) {
        match runnable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(NotRunnable::NotExecutable) => unexecutable = true,
            Err(NotRunnable::NotFound) => {}
        }
    }
    Err(if unexecutable {
        NotRunnable::NotExecutable
    } else {
        NotRunnable::NotFound
    })
}

/// Whether `path` could be executed: an executable regular file (symlinks followed), else
/// whether anything is there at all.
pub fn runnable(path: &Path) -> Result<(), NotRunnable> {
    match sys::is_executable_file(path) {
        Ok(true) => Ok(()),
        // A search tries every entry of the path, and most have nothing by the name:
        // `access` has said so already, so that costs one system call, not two.
        Err(error) if matches!(error.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            Err(NotRunnable::NotFound)
        }
        Ok(false) | Err(_) if path.exists() => Err(NotRunnable::NotExecutable),
        Ok(false) | Err(_) => Err(NotRunnable::NotFound),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use std::ffi::OsString;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn path_search_finds_sh() {
        let found = find_program(
            OsStr::new("sh"),
            &Search::execvp(OsStr::new("/nonexistent:/bin:/usr/bin")),
        );
        assert!(found.is_ok_and(|p| p.ends_with("sh")));
        assert_eq!(
            find_program(
                OsStr::new("no-such-program-xyz"),
                &Search::execvp(OsStr::new("/bin"))
            ),
            Err(NotRunnable::NotFound)
        );
    }

    #[test]
    fn found_but_not_executable_is_126() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = OsString::from(format!("/nonexistent:{}", dir.path().display()));
        let found = find_program(OsStr::new("plain"), &Search::execvp(&path));
        assert_eq!(found, Err(NotRunnable::NotExecutable));
        assert_eq!(found.unwrap_err().exit_status(), 126);
        assert_eq!(NotRunnable::NotFound.exit_status(), 127);
        assert_eq!(runnable(&plain), Err(NotRunnable::NotExecutable));
        assert_eq!(
            runnable(&dir.path().join("absent")),
            Err(NotRunnable::NotFound)
        );
        // Beneath a file (`ENOTDIR`) nothing can be; a directory is there but not runnable.
        assert_eq!(runnable(&plain.join("below")), Err(NotRunnable::NotFound));
        assert_eq!(runnable(dir.path()), Err(NotRunnable::NotExecutable));
    }

    #[test]
    fn names_with_a_slash_are_not_searched() {
        let search = Search::execvp(OsStr::new("/bin"));
        assert_eq!(
            find_program(OsStr::new("./x"), &search),
            Ok(PathBuf::from("./x"))
        );
        let work = Path::new("/work");
        let relative = search.names_relative_to(work);
        assert_eq!(
            find_program(OsStr::new("bin/x"), &relative),
            Ok(PathBuf::from("/work/bin/x"))
        );
        assert_eq!(
            find_program(OsStr::new("/abs/x"), &relative),
            Ok(PathBuf::from("/abs/x"))
        );
        assert_eq!(
            find_program(OsStr::new(""), &search),
            Err(NotRunnable::NotFound)
        );
    }

    #[test]
    fn empty_entries_mean_the_working_directory_unless_skipped() {
        let path = OsStr::new(":rel:/usr/bin");
        let all: Vec<_> = Search::execvp(path).candidates(OsStr::new("x")).collect();
        assert_eq!(
            all,
            [
                PathBuf::from("./x"),
                PathBuf::from("rel/x"),
                PathBuf::from("/usr/bin/x")
            ]
        );
        let absolute: Vec<_> = Search::absolute_entries(path)
            .candidates(OsStr::new("x"))
            .collect();
        assert_eq!(absolute, [PathBuf::from("/usr/bin/x")]);
    }
}
