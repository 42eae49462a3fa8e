//! Measures the host Unix sockets a policy or the flags allow (`spec.sandbox.allowedUnixSockets`,
//! `--allow-unix-socket`), so that the engine can decide whether to grant each one.
//!
//! The host only measures: what is at each path (symlinks followed), where it really is, its
//! owner, group and mode, and whether the caller is in its group. Whether a socket grants root,
//! and whether it may be reached at all, is the engine's call, made from these recorded facts.
//!
//! Which paths to measure is read from the policy document here with a plain YAML parse; the
//! engine alone validates the document. Should this reading miss a path the engine then finds,
//! the engine has no fact for it and refuses (`HOST_FACTS_INVALID`): never a socket granted
//! unmeasured.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use palisade_engine::{DecisionInput, HostFacts, UnixSocketFact, UnixSocketKind};

/// The environment variable naming the SSH agent's socket.
pub const SSH_AUTH_SOCK: &str = "SSH_AUTH_SOCK";

/// Adds the facts about every socket `input`'s policy or flags allow, and `SSH_AUTH_SOCK`'s
/// value when there is at least one; nothing when none is allowed.
pub fn measure_into(input: &mut DecisionInput) {
    let flags = input
        .policy_flags
        .as_ref()
        .map(|flags| flags.allowed_unix_sockets.as_slice())
        .unwrap_or_default();
    let paths = candidates(input.document.as_deref(), flags, &input.host.home_dir);
    if paths.is_empty() {
        return;
    }
    input.host.unix_sockets = Some(paths.iter().map(|path| measure(path)).collect());
    input.host.ssh_auth_sock = std::env::var(SSH_AUTH_SOCK)
        .ok()
        .filter(|value| !value.is_empty());
}

/// The problems with `claimed` socket facts (a `run --input`) that differ from what this host
/// measures at the same paths now, or that claim more root-granting sockets allowed than this
/// host's configuration does.
pub fn claims_differ(claimed: &HostFacts, here: &HostFacts) -> Vec<String> {
    let mut problems = Vec::new();
    for (index, fact) in claimed.unix_sockets.iter().flatten().enumerate() {
        let measured = measure(&fact.path);
        if &measured != fact {
            problems.push(format!(
                "host.unixSockets[{index}]: `{}` is not what this host has there now",
                fact.path
            ));
        }
    }
    let allowed_here = here
        .allow_root_granting_sockets
        .as_deref()
        .unwrap_or_default();
    for (index, path) in claimed
        .allow_root_granting_sockets
        .iter()
        .flatten()
        .enumerate()
    {
        if !allowed_here.contains(path) {
            problems.push(format!(
                "host.allowRootGrantingSockets[{index}]: `{path}` is not allowed by this host's configuration"
            ));
        }
    }
    if claimed.ssh_auth_sock.is_some() {
        let value = std::env::var(SSH_AUTH_SOCK).ok();
        if claimed.ssh_auth_sock != value {
            problems.push(String::from(
                "host.sshAuthSock: not this process's SSH_AUTH_SOCK",
            ));
        }
    }
    problems
}

/// The paths the document's `spec.sandbox.allowedUnixSockets` and the flags name, resolved the
/// way the engine resolves them (absolute, or `~/` against `home`; `.` and empty components
/// dropped); entries the engine will refuse anyway (relative, `..`) are left out. Sorted.
pub fn candidates(document: Option<&str>, flags: &[String], home: &str) -> Vec<String> {
    let mut raw: Vec<String> = flags.to_vec();
    if let Some(text) = document
        && text.contains("allowedUnixSockets")
        && let Ok(value) = serde_yaml::from_str::<serde_yaml::Value>(text)
        && let Some(list) = value
            .get("spec")
            .and_then(|spec| spec.get("sandbox"))
            .and_then(|sandbox| sandbox.get("allowedUnixSockets"))
            .and_then(serde_yaml::Value::as_sequence)
    {
        raw.extend(list.iter().filter_map(|v| v.as_str().map(str::to_owned)));
    }
    raw.iter()
        .filter_map(|entry| resolve(entry, home))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn resolve(raw: &str, home: &str) -> Option<String> {
    let (base, rest) = match raw.strip_prefix("~/") {
        Some(rest) => (home, rest),
        None => ("", raw.strip_prefix('/')?),
    };
    let mut out = String::from(base.trim_end_matches('/'));
    for component in rest.split('/') {
        match component {
            "" | "." => {}
            ".." => return None,
            name => {
                out.push('/');
                out.push_str(name);
            }
        }
    }
    (!out.is_empty() && !raw.contains('\0')).then_some(out)
}

/// What is at `path` now. Anything that cannot be looked at (a missing path, a dangling link, a
/// directory on the way the caller cannot search) is `missing`: the engine refuses it.
pub fn measure(path: &str) -> UnixSocketFact {
    let absent = |kind| UnixSocketFact {
        path: path.to_owned(),
        kind,
        target: String::new(),
        owner_uid: 0,
        group: String::new(),
        mode: 0,
        caller_in_group: false,
    };
    let Ok(meta) = std::fs::metadata(path) else {
        return absent(UnixSocketKind::Missing);
    };
    if !meta.file_type().is_socket() {
        return absent(UnixSocketKind::NotSocket);
    }
    let Some(target) = std::fs::canonicalize(path)
        .ok()
        .and_then(|real| real.into_os_string().into_string().ok())
    else {
        return absent(UnixSocketKind::Missing);
    };
    let gid = meta.gid();
    UnixSocketFact {
        path: path.to_owned(),
        kind: UnixSocketKind::Socket,
        target,
        owner_uid: meta.uid(),
        group: group_name(gid).unwrap_or_else(|| gid.to_string()),
        mode: meta.mode() & 0o7777,
        caller_in_group: palisade_shims::unix_socket::caller_in_group(gid),
    }
}

/// The name `/etc/group` gives `gid`.
fn group_name(gid: u32) -> Option<String> {
    let groups = std::fs::read_to_string(Path::new("/etc/group")).ok()?;
    groups.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id = fields.nth(1)?;
        (id.parse::<u32>().ok() == Some(gid)).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    #[test]
    fn candidates_come_from_the_document_and_the_flags_resolved_and_sorted() {
        let document = "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  sandbox:\n    allowedUnixSockets: [\"~/agent.sock\", /run/./db.sock, relative.sock, /a/../b]\n";
        let found = candidates(Some(document), &["/tmp//x.sock".into()], "/home/u");
        assert_eq!(found, ["/home/u/agent.sock", "/run/db.sock", "/tmp/x.sock"]);
        assert!(candidates(Some("spec: {sandbox: {}}"), &[], "/home/u").is_empty());
    }

    #[test]
    fn a_listening_socket_is_measured_where_it_really_is() {
        let dir = std::env::temp_dir().join(format!("palisade-sockfacts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s.sock");
        let _ = std::fs::remove_file(&socket);
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let link = dir.join("link.sock");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&socket, &link).unwrap();
        let real = std::fs::canonicalize(&socket).unwrap();

        let fact = measure(link.to_str().unwrap());
        assert_eq!(fact.kind, UnixSocketKind::Socket);
        assert_eq!(fact.target, real.to_str().unwrap());
        assert_eq!(fact.owner_uid, crate::facts::current_uid());
        assert!(fact.caller_in_group, "{fact:?}");
        assert_eq!(
            measure(dir.to_str().unwrap()).kind,
            UnixSocketKind::NotSocket
        );
        assert_eq!(
            measure(dir.join("nothing").to_str().unwrap()).kind,
            UnixSocketKind::Missing
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
