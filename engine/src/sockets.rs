//! Host Unix sockets by explicit allowance (`allowedUnixSockets`, `--allow-unix-socket`).
//!
//! Every host pathname socket is out of the sandbox's reach by default. A policy may name a few
//! that the command needs (an SSH agent, a language server, a database); the host measures what
//! is at each path and the engine grants it here, or refuses the whole decision.
//!
//! Why some sockets are refused even when named: a container daemon's socket (Docker's,
//! containerd's, Podman's, LXD's) lets whoever can connect start a privileged container, which
//! is root on the host. Allowing one would make every other protection of the sandbox moot, so
//! it takes the host configuration (`allowRootGrantingSockets`, by path), not a policy author.
//! The rule is decided here from measured facts, so a replay shows why a socket was granted.

use crate::model::{HostFacts, UnixSocketFact, UnixSocketKind};
use crate::output::{EffectivePolicy, Origin, UnixSocketGrant};
use crate::paths;
use crate::text::{self, Errors};

/// Socket file names of daemons whose socket grants root to its clients.
pub const ROOT_GRANTING_NAMES: [&str; 9] = [
    "docker.sock",
    "dockershim.sock",
    "containerd.sock",
    "cri-dockerd.sock",
    "crio.sock",
    "podman.sock",
    "buildkitd.sock",
    "libvirt-sock",
    "virtqemud-sock",
];

/// Groups whose members control a daemon that grants root (through its socket).
pub const ROOT_GRANTING_GROUPS: [&str; 7] = [
    "docker",
    "lxd",
    "incus",
    "incus-admin",
    "libvirt",
    "podman",
    "containerd",
];

/// Why the socket cannot be granted.
pub(crate) enum Refused {
    /// The host gave no fact for an allowed path: a host bug.
    Unmeasured(Errors),
    /// Not a socket, or a socket that grants root without the host's allowance.
    Forbidden(Errors),
}

/// Grants every socket the policy allows, from the host's facts, or says why not.
pub(crate) fn grant(
    policy: &EffectivePolicy,
    host: &HostFacts,
) -> Result<Vec<UnixSocketGrant>, Refused> {
    let field = match policy.allowed_unix_sockets_origin {
        Some(Origin::Flag) => "policyFlags.allowedUnixSockets",
        _ => "spec.sandbox.allowedUnixSockets",
    };
    let facts = host.unix_sockets.as_deref().unwrap_or_default();
    let mut unmeasured = Errors::default();
    let mut forbidden = Errors::default();
    let mut grants = Vec::with_capacity(policy.allowed_unix_sockets.len());
    for path in &policy.allowed_unix_sockets {
        let Some(fact) = facts.iter().find(|fact| &fact.path == path) else {
            unmeasured.push(
                "host.unixSockets",
                format!("no fact for the allowed socket {}", text::quote(path)),
            );
            continue;
        };
        match judge(fact, host).and_then(|grant| outside_denied(grant, policy)) {
            Ok(grant) => grants.push(grant),
            Err(why) => forbidden.push(field, format!("{}: {why}", text::quote(path))),
        }
    }
    if !unmeasured.is_empty() {
        return Err(Refused::Unmeasured(unmeasured));
    }
    if !forbidden.is_empty() {
        return Err(Refused::Forbidden(forbidden));
    }
    Ok(grants)
}

/// One socket: granted (saying so when it grants root and the host allowed it), or why not.
fn judge(fact: &UnixSocketFact, host: &HostFacts) -> Result<UnixSocketGrant, String> {
    match fact.kind {
        UnixSocketKind::Socket => {}
        UnixSocketKind::Missing => {
            return Err(String::from("nothing is there on this host"));
        }
        UnixSocketKind::NotSocket => {
            return Err(String::from("it is not a socket"));
        }
    }
    let grants_root = grants_root(fact);
    if let Some(why) = &grants_root {
        let allowed = host
            .allow_root_granting_sockets
            .iter()
            .flatten()
            .any(|entry| entry == &fact.path || entry == &fact.target);
        if !allowed {
            return Err(format!(
                "{why}, which grants root on the host; only the host configuration can allow it (allowRootGrantingSockets)"
            ));
        }
    }
    Ok(UnixSocketGrant {
        path: fact.path.clone(),
        target: fact.target.clone(),
        grants_root,
    })
}

/// The grant, unless a denied read path hides where the command would connect: the mask over
/// it leaves no place to bind the socket (and a mask with a hole would be no mask), so the
/// launch could only fail. Said before anything runs instead.
fn outside_denied(
    grant: UnixSocketGrant,
    policy: &EffectivePolicy,
) -> Result<UnixSocketGrant, String> {
    let hidden = policy.denied_read_paths.iter().find(|denied| {
        paths::contains(&denied.path, &grant.path)
            || (grant.target != grant.path && paths::contains(&denied.path, &grant.target))
    });
    match hidden {
        None => Ok(grant),
        Some(denied) => Err(format!(
            "it lies inside the denied read path {}, which stays masked; allow the socket at a path outside it{}",
            text::quote(&denied.path),
            if paths::contains(&denied.path, &grant.target) {
                String::new()
            } else {
                format!(" (where it leads: {})", text::quote(&grant.target))
            }
        )),
    }
}

/// Why the socket grants root to whoever can connect, if it does: a container daemon's socket
/// by name (at the path or where it leads), or a socket of such a daemon's group that the
/// caller can write to.
fn grants_root(fact: &UnixSocketFact) -> Option<String> {
    if ROOT_GRANTING_NAMES.contains(&paths::file_name(&fact.path)) {
        return Some(format!(
            "{} is a container daemon's socket name",
            text::quote(paths::file_name(&fact.path))
        ));
    }
    if ROOT_GRANTING_NAMES.contains(&paths::file_name(&fact.target)) {
        return Some(format!(
            "it leads to {}, a container daemon's socket",
            text::quote(&fact.target)
        ));
    }
    let group_writable = fact.mode & 0o020 != 0 && fact.caller_in_group;
    let world_writable = fact.mode & 0o002 != 0;
    if ROOT_GRANTING_GROUPS.contains(&fact.group.as_str()) && (group_writable || world_writable) {
        return Some(format!(
            "its group `{}` controls a container daemon, and the caller can write to it",
            fact.group
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    fn fact(path: &str, target: &str, group: &str, mode: u32, in_group: bool) -> UnixSocketFact {
        UnixSocketFact {
            path: path.into(),
            kind: UnixSocketKind::Socket,
            target: target.into(),
            owner_uid: 0,
            group: group.into(),
            mode,
            caller_in_group: in_group,
        }
    }

    fn host(allowed: &[&str]) -> HostFacts {
        HostFacts {
            allow_root_granting_sockets: (!allowed.is_empty())
                .then(|| allowed.iter().map(|s| (*s).to_owned()).collect()),
            ..HostFacts::linux_cli("/home/u", "/home/u/w")
        }
    }

    #[test]
    fn an_agent_socket_is_granted() {
        let agent = fact("/tmp/ssh-x/agent.1", "/tmp/ssh-x/agent.1", "u", 0o600, true);
        let grant = judge(&agent, &host(&[])).unwrap();
        assert_eq!(grant.target, "/tmp/ssh-x/agent.1");
        assert_eq!(grant.grants_root, None);
    }

    #[test]
    fn a_daemon_socket_by_name_or_through_a_link_needs_the_host() {
        let direct = fact("/run/docker.sock", "/run/docker.sock", "root", 0o600, false);
        let why = judge(&direct, &host(&[])).unwrap_err();
        assert!(why.contains("a container daemon's socket name"), "{why}");
        assert!(why.contains("allowRootGrantingSockets"), "{why}");
        // A harmless-looking name that leads to one.
        let linked = fact(
            "/home/u/w/api.sock",
            "/run/docker.sock",
            "root",
            0o600,
            false,
        );
        assert!(judge(&linked, &host(&[])).is_err());
        // The host allows it by either path.
        for allowed in ["/run/docker.sock", "/home/u/w/api.sock"] {
            let grant = judge(&linked, &host(&[allowed])).unwrap();
            assert!(grant.grants_root.is_some());
        }
        assert!(judge(&linked, &host(&["/run/other.sock"])).is_err());
    }

    #[test]
    fn a_daemon_group_socket_grants_root_only_when_the_caller_can_write() {
        let writable = fact(
            "/var/lib/lxd/unix.socket",
            "/var/lib/lxd/unix.socket",
            "lxd",
            0o660,
            true,
        );
        assert!(judge(&writable, &host(&[])).is_err());
        let not_member = UnixSocketFact {
            caller_in_group: false,
            ..writable.clone()
        };
        assert!(judge(&not_member, &host(&[])).is_ok());
        let world = UnixSocketFact {
            mode: 0o666,
            ..not_member
        };
        assert!(judge(&world, &host(&[])).is_err());
        let read_only_group = UnixSocketFact {
            mode: 0o640,
            ..writable
        };
        assert!(judge(&read_only_group, &host(&[])).is_ok());
    }

    #[test]
    fn missing_and_other_files_are_refused() {
        let mut missing = fact("/tmp/x.sock", "", "u", 0, false);
        missing.kind = UnixSocketKind::Missing;
        assert!(
            judge(&missing, &host(&[]))
                .unwrap_err()
                .contains("nothing is there")
        );
        missing.kind = UnixSocketKind::NotSocket;
        assert!(
            judge(&missing, &host(&[]))
                .unwrap_err()
                .contains("not a socket")
        );
    }

    #[test]
    fn a_socket_under_a_denied_path_is_refused_where_the_mask_would_hide_it() {
        use crate::output::{DeniedOrigin, DeniedPath};
        let policy = |denied: &str| {
            let mut policy = crate::resolve::resolve(
                &crate::model::DecisionInput {
                    document: None,
                    document_name: String::from("<none>"),
                    host: host(&[]),
                    probes: Vec::new(),
                    narrow_allowed_domains: None,
                    execution_mode: None,
                    budget_flags: None,
                    task_contract: None,
                    policy_flags: None,
                },
                None,
            );
            policy.denied_read_paths = vec![DeniedPath {
                path: denied.into(),
                origin: DeniedOrigin::BuiltIn,
            }];
            policy
        };
        let grant = |path: &str, target: &str| UnixSocketGrant {
            path: path.into(),
            target: target.into(),
            grants_root: None,
        };
        // At the path: refused, pointing at where it leads.
        let why = outside_denied(
            grant("/home/u/.ssh/agent", "/tmp/s/a"),
            &policy("/home/u/.ssh"),
        )
        .unwrap_err();
        assert!(
            why.contains("/home/u/.ssh") && why.contains("/tmp/s/a"),
            "{why}"
        );
        // Through a link into one: refused too.
        assert!(
            outside_denied(
                grant("/home/u/a", "/home/u/.ssh/a"),
                &policy("/home/u/.ssh")
            )
            .is_err()
        );
        // Beside it: granted.
        assert!(
            outside_denied(
                grant("/home/u/.sshx/a", "/home/u/.sshx/a"),
                &policy("/home/u/.ssh")
            )
            .is_ok()
        );
    }
}
