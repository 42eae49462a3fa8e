//! `linux-bwrap`: the binary, its version, and a real trial sandbox.
//!
//! The trial is the authority: a sysctl may look restrictive while an AppArmor profile grants
//! bwrap its namespaces (Ubuntu 24.04), or look permissive while a security module refuses them.
//! The sysctls only explain a failure — except `max_user_namespaces = 0`, which nothing
//! overrides, so the trial is skipped.

use std::time::Instant;

use palisade_engine::model::{Backend, BackendProbe, Capability, NetworkMode};
use palisade_shims::bwrap::trial_argv;

use super::command::{self, RunError};
use super::{Inputs, first_line, timed_out, unavailable};

const NOT_INSTALLED: &str = "bwrap not installed";
const BLOCKED: &str = "user namespaces blocked";

pub(crate) fn probe(inputs: &Inputs, deadline: Instant) -> BackendProbe {
    let Some(path) = inputs.bwrap.usable() else {
        return unavailable(
            Backend::LinuxBwrap,
            format!(
                "{NOT_INSTALLED}{} (install the `bubblewrap` package, e.g. `apt-get install bubblewrap`)",
                inputs.bwrap.missing_detail()
            ),
        );
    };
    if inputs.max_user_namespaces.as_deref() == Some("0") {
        return unavailable(
            Backend::LinuxBwrap,
            format!("{BLOCKED}: user.max_user_namespaces is 0"),
        );
    }

    // `--version` failing is not fatal on its own: the trial decides.
    let version = match command::run(path, &["--version".to_owned()], deadline) {
        Ok(done) if done.status.success() => parse_version(&done.stdout),
        Ok(_) => None,
        Err(RunError::TimedOut) => {
            return unavailable(Backend::LinuxBwrap, timed_out(inputs.timeout()));
        }
        Err(RunError::Spawn(err)) => {
            let reason = format!("trial failed: cannot run `{}`: {err}", path.display());
            return unavailable(Backend::LinuxBwrap, reason);
        }
        Err(RunError::Wait(err)) => {
            return unavailable(Backend::LinuxBwrap, format!("trial failed: {err}"));
        }
    };

    // bwrap binds `/` read-only recursively, remounting every submount; a mount that another
    // program (a container runtime, an automounter) adds or removes meanwhile fails the trial
    // with a remount error that says nothing about this host's abilities. Try again, a little.
    let mut outcome = command::run(path, &trial_argv(), deadline);
    for _ in 0..2 {
        match &outcome {
            Ok(done) if !done.status.success() && is_mount_race(&done.stderr) => {
                outcome = command::run(path, &trial_argv(), deadline);
            }
            _ => break,
        }
    }
    let mut probe = match outcome {
        Ok(done) if done.status.success() => available(),
        Ok(done) => {
            let line = first_line(&done.stderr);
            let line = if line.is_empty() {
                format!("bwrap exited with {}", done.status)
            } else {
                line
            };
            unavailable(Backend::LinuxBwrap, classify_failure(&line, inputs))
        }
        Err(RunError::TimedOut) => unavailable(Backend::LinuxBwrap, timed_out(inputs.timeout())),
        Err(RunError::Spawn(err)) => unavailable(
            Backend::LinuxBwrap,
            format!("trial failed: cannot run `{}`: {err}", path.display()),
        ),
        Err(RunError::Wait(err)) => {
            unavailable(Backend::LinuxBwrap, format!("trial failed: {err}"))
        }
    };
    if probe.available {
        abstract_socket_scope(&mut probe);
    }
    probe.version = match version {
        Some(version) => version,
        None if probe.available => "bubblewrap (version unknown)".to_owned(),
        None => String::new(),
    };
    probe
}

fn available() -> BackendProbe {
    BackendProbe {
        landlock_proc: None,
        backend: Backend::LinuxBwrap,
        available: true,
        reason: "trial sandbox ran (user, pid, net, ipc, uts and cgroup namespaces)".to_owned(),
        capabilities: Capability::ALL.to_vec(),
        network_modes: NetworkMode::ALL.to_vec(),
        // A private network namespace whose only way out is the host proxy's Unix socket,
        // bound in and bridged to the sandbox's loopback by Palisade itself.
        network_bridge: true,
        version: String::new(),
        limitations: vec![super::PROTECTED_WRITES_UNOBSERVED.to_owned()],
    }
}

/// Under `allow-outbound` the sandbox keeps the host's network namespace, whose abstract Unix
/// sockets (a session bus, a container runtime's) it would reach: Palisade's stub scopes them
/// out with Landlock where the kernel has scopes (ABI 6), which the probe records either way
/// (docker's probe too, where the container has the stub).
#[cfg(target_os = "linux")]
pub(crate) fn abstract_socket_scope(probe: &mut BackendProbe) {
    let exposed = "under `allow-outbound` the sandbox shares the host's network namespace, and with it the host's abstract Unix sockets";
    match palisade_shims::landlock::kernel_abi() {
        Ok(abi) if abi >= palisade_shims::landlock_abi::SCOPES => probe.reason.push_str(&format!(
            "; under allow-outbound, Landlock (ABI {abi}) scopes the host's abstract Unix sockets out"
        )),
        Ok(abi) => probe.limitations.push(format!(
            "{exposed}: Landlock ABI {abi} has no scopes (6 has)"
        )),
        Err(e) => probe
            .limitations
            .push(format!("{exposed}: no Landlock to scope them ({e})")),
    }
}

/// bwrap runs only on Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn abstract_socket_scope(_: &mut BackendProbe) {}

/// Whether bwrap's message is a remount of a submount that changed under it (transient).
pub(crate) fn is_mount_race(stderr: &[u8]) -> bool {
    let text = String::from_utf8_lossy(stderr);
    text.contains(MOUNT_RACE)
}

/// The part of bwrap's message for a submount that changed while it remounted `/`.
pub(crate) const MOUNT_RACE: &str = "Unable to apply mount flags";

/// `bubblewrap 0.8.0` from `bwrap --version`; anything else is not a version we recognise.
fn parse_version(stdout: &[u8]) -> Option<String> {
    let line = first_line(stdout);
    let number = line.strip_prefix("bubblewrap ")?.trim();
    let plausible = !number.is_empty()
        && number
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '~'));
    plausible.then(|| format!("bubblewrap {number}"))
}

/// Names the cause of a failed trial: user namespaces refused, or something else.
fn classify_failure(stderr_line: &str, inputs: &Inputs) -> String {
    let lower = stderr_line.to_ascii_lowercase();
    let userns_message = [
        "uid map",
        "gid map",
        "uid_map",
        "gid_map",
        "setgroups",
        "no permissions to creat",
        "user namespace",
        "unprivileged_userns_clone",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
        || (lower.contains("namespace")
            && (lower.contains("permission denied") || lower.contains("not permitted")));
    let permission_error = lower.contains("permission denied") || lower.contains("not permitted");

    let sysctl = restricting_sysctl(inputs);
    match sysctl {
        Some(sysctl) if userns_message || permission_error => {
            format!(
                "{BLOCKED}: {sysctl} (bwrap: {})",
                strip_bwrap_prefix(stderr_line)
            )
        }
        _ if userns_message => format!("{BLOCKED}: {}", strip_bwrap_prefix(stderr_line)),
        _ => format!("trial failed: {}", strip_bwrap_prefix(stderr_line)),
    }
}

/// A sysctl that keeps an unprivileged caller out of user namespaces, if one does.
fn restricting_sysctl(inputs: &Inputs) -> Option<&'static str> {
    if inputs.euid == 0 {
        return None;
    }
    if inputs.apparmor_restrict_unprivileged_userns.as_deref() == Some("1") {
        return Some("kernel.apparmor_restrict_unprivileged_userns is 1");
    }
    if inputs.unprivileged_userns_clone.as_deref() == Some("0") {
        return Some("kernel.unprivileged_userns_clone is 0");
    }
    None
}

fn strip_bwrap_prefix(line: &str) -> &str {
    line.strip_prefix("bwrap: ").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;
    use crate::probe::ProbeOptions;

    fn inputs(euid: u32, apparmor: Option<&str>, clone: Option<&str>) -> Inputs {
        let mut inputs = Inputs::gather(&ProbeOptions::default());
        inputs.euid = euid;
        inputs.apparmor_restrict_unprivileged_userns = apparmor.map(str::to_owned);
        inputs.unprivileged_userns_clone = clone.map(str::to_owned);
        inputs
    }

    #[test]
    fn versions() {
        assert_eq!(
            parse_version(b"bubblewrap 0.8.0\n").as_deref(),
            Some("bubblewrap 0.8.0")
        );
        assert_eq!(parse_version(b"something else\n"), None);
        assert_eq!(parse_version(b"bubblewrap 0.8 $(rm)\n"), None);
    }

    #[test]
    fn uid_map_denied_is_blocked_userns() {
        let reason = classify_failure(
            "bwrap: setting up uid map: Permission denied",
            &inputs(0, None, None),
        );
        assert_eq!(
            reason,
            "user namespaces blocked: setting up uid map: Permission denied"
        );
    }

    #[test]
    fn debian_sysctl_message_is_blocked_userns() {
        let line = "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.";
        let reason = classify_failure(line, &inputs(1000, None, Some("0")));
        assert!(reason.starts_with("user namespaces blocked: kernel.unprivileged_userns_clone is 0 (bwrap: No permissions"), "{reason}");
    }

    #[test]
    fn apparmor_restriction_explains_a_permission_error() {
        let line = "bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted";
        let reason = classify_failure(line, &inputs(1000, Some("1"), None));
        assert!(
            reason.starts_with(
                "user namespaces blocked: kernel.apparmor_restrict_unprivileged_userns is 1"
            ),
            "{reason}"
        );
        // Root is not subject to the AppArmor restriction: the same line is a plain failure.
        let reason = classify_failure(line, &inputs(0, Some("1"), None));
        assert_eq!(
            reason,
            "trial failed: loopback: Failed RTM_NEWADDR: Operation not permitted"
        );
    }

    #[test]
    fn other_failures_are_trial_failures() {
        let reason = classify_failure(
            "bwrap: Can't mount proc on /newroot/proc: Device or resource busy",
            &inputs(0, None, None),
        );
        assert_eq!(
            reason,
            "trial failed: Can't mount proc on /newroot/proc: Device or resource busy"
        );
    }

    #[test]
    fn a_submount_that_changed_during_the_trial_is_a_race_not_a_verdict() {
        let race = b"bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount \"/newroot/var/lib/docker/overlay2/x/merged\": No such file or directory\n";
        assert!(is_mount_race(race));
        assert!(!is_mount_race(
            b"bwrap: setting up uid map: Permission denied\n"
        ));
    }
}
