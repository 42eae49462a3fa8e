//! `--execution-mode`: `sandbox` (the default) or `workspace`, Skep's explicitly trusted mode,
//! and who asked for it.
//!
//! The engine decides a `workspace` request (refused with `EXECUTION_MODE_FORBIDDEN` when the
//! host configuration says `allowWorkspaceMode: false`; otherwise an unsandboxed decision that
//! says so), so replay covers it. The launcher then runs the command the way it runs
//! `direct-dedicated`: no filesystem, network or syscall confinement, but supervised — budgets,
//! a private PID namespace for process-tree cleanup, the environment allowlist. This module only
//! names the mode and records the requester: the uid and its user name from the password
//! database (not `$USER`, which the caller sets), the sudo caller when there is one, and the
//! free text of `--requested-by`.

use palisade_engine::ExecutionMode;
use serde::Serialize;

/// Parses `--execution-mode`.
pub fn parse(text: &str) -> Option<ExecutionMode> {
    match text {
        "sandbox" => Some(ExecutionMode::Sandbox),
        "workspace" => Some(ExecutionMode::Workspace),
        _ => None,
    }
}

/// The engine input's field: absent for `sandbox`, so sandboxed decisions keep the bytes they
/// had before execution modes existed.
pub fn input_field(mode: ExecutionMode) -> Option<ExecutionMode> {
    (mode == ExecutionMode::Workspace).then_some(mode)
}

/// Who asked for an unsandboxed run, for the audit record's context and the run's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Requester {
    pub uid: u32,
    /// The uid's name in `/etc/passwd`, if it has one.
    pub user: Option<String>,
    /// `$SUDO_USER` when running as root under sudo: the person behind the root shell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sudo_user: Option<String>,
    /// `--requested-by TEXT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// The requester of this process's run.
pub fn requester(text: Option<&str>) -> Requester {
    let uid = crate::facts::current_uid();
    Requester {
        uid,
        user: user_name(uid),
        sudo_user: (uid == 0)
            .then(|| std::env::var("SUDO_USER").ok())
            .flatten()
            .filter(|name| !name.is_empty()),
        text: text.map(|t| t.chars().take(256).collect()),
    }
}

fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id = fields.nth(1)?;
        (id.parse::<u32>().ok() == Some(uid)).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_requester() {
        assert_eq!(parse("workspace"), Some(ExecutionMode::Workspace));
        assert_eq!(parse("Workspace"), None);
        assert_eq!(input_field(ExecutionMode::Sandbox), None);
        let who = requester(Some("ci bot"));
        assert_eq!(who.uid, crate::facts::current_uid());
        assert_eq!(who.text.as_deref(), Some("ci bot"));
        if who.uid == 0 {
            assert_eq!(who.user.as_deref(), Some("root"));
        }
    }
}
