//! bubblewrap: the argv palisade hands to `bwrap`.
//!
//! Pure functions only: they build argument vectors and never touch the host, so the exact
//! vectors are unit-tested on any OS. The host's `linux-bwrap` probe runs [`trial_argv`] to
//! prove this kernel lets bwrap build the namespaces the shim relies on.

/// The program a trial sandbox runs: present on every Linux distribution palisade targets and
/// visible inside the sandbox because the trial binds `/` read-only.
pub const TRIAL_PROGRAM: &str = "/bin/true";

/// Arguments (without the `bwrap` program itself) for a throwaway trial sandbox.
///
/// The trial asks for every namespace the bwrap shim uses — user, PID, network, IPC, UTS and
/// cgroup — plus a new session, death with the parent and no capabilities, and runs
/// [`TRIAL_PROGRAM`]. If it exits 0, this host can build the sandbox; if the kernel or a
/// security module refuses one of the namespaces, bwrap says so on stderr.
///
/// Keep the namespace flags in step with the shim's: a trial that asks for less than the shim
/// would report `linux-bwrap` available on a host where launching fails.
pub fn trial_argv() -> Vec<String> {
    [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--new-session",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--",
        TRIAL_PROGRAM,
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_argv_is_exact() {
        assert_eq!(
            trial_argv(),
            vec![
                "--unshare-user",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-cgroup",
                "--ro-bind",
                "/",
                "/",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--new-session",
                "--die-with-parent",
                "--cap-drop",
                "ALL",
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
}
