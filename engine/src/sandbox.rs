//! `spec.sandbox`: its optional fields, their bounds, path resolution, and the rules that tie
//! `allowedDomains` to `networkMode`.
//!
//! Why every unknown key here is an error (while unknown `spec` sections are only listed): this
//! block is the security policy itself, so a misspelt or future field must not be silently
//! dropped and leave the command less confined than its author wrote.

use std::collections::BTreeSet;

use crate::domains::{self, DomainEntry};
use crate::model::{Backend, Capability, HostFacts, NetworkMode};
use crate::paths;
use crate::reader::{each_entry, expect_str, unknown_field};
use crate::text::{self, Errors};
use crate::yaml::Node;

/// The fields `spec.sandbox` may hold.
const FIELDS: [&str; 7] = [
    "preferredBackends",
    "networkMode",
    "requiredCapabilities",
    "deniedReadPaths",
    "allowedDomains",
    "loopbackPorts",
    "allowedUnixSockets",
];

/// The most host Unix sockets a policy may allow.
pub(crate) const MAX_UNIX_SOCKETS: usize = 16;

/// The most host loopback ports a policy may list.
pub(crate) const MAX_LOOPBACK_PORTS: usize = 64;

/// Bounds from the policy contract.
const MAX_BACKENDS: usize = 5;
const MAX_CAPABILITIES: usize = 6;
pub(crate) const MAX_DENIED_READ_PATHS: usize = 64;

/// A valid `spec.sandbox`: absent fields are `None` (or empty), resolved later.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SandboxSpec {
    pub(crate) preferred_backends: Option<Vec<Backend>>,
    pub(crate) network_mode: Option<NetworkMode>,
    /// In declaration order, unique.
    pub(crate) required_capabilities: Vec<Capability>,
    /// Resolved against the host's home, normalised, deduplicated and sorted.
    pub(crate) denied_read_paths: Vec<String>,
    /// Canonical entries, sorted; `None` when the field is absent (the mode is in charge).
    pub(crate) allowed_domains: Option<Vec<String>>,
    /// Ports of the host's loopback (127.0.0.1 and ::1) reachable under `loopback-only`,
    /// sorted, unique.
    pub(crate) loopback_ports: Vec<u16>,
    /// Host pathname Unix sockets the command may connect to: resolved against the host's
    /// home, normalised, sorted, unique. `None` when the field is absent.
    pub(crate) allowed_unix_sockets: Option<Vec<String>>,
}

/// Walks `spec.sandbox`; `None` when it (or anything in it) is invalid.
pub(crate) fn walk(
    node: &Node,
    path: &str,
    host: &HostFacts,
    errors: &mut Errors,
) -> Option<SandboxSpec> {
    if !matches!(node, Node::Mapping(_)) {
        errors.push(path, format!("expected a mapping, found {}", node.kind()));
        return None;
    }
    let before = errors.total();
    let mut spec = SandboxSpec::default();
    each_entry(node, path, errors, |key, child, value, errors| match key {
        "preferredBackends" => {
            spec.preferred_backends = names(value, &child, &BACKENDS, errors);
        }
        "networkMode" => spec.network_mode = network_mode(value, &child, errors),
        "requiredCapabilities" => {
            spec.required_capabilities =
                names(value, &child, &CAPABILITIES, errors).unwrap_or_default();
        }
        "deniedReadPaths" => {
            spec.denied_read_paths = denied_read_paths(value, &child, host, errors);
        }
        "allowedDomains" => {
            spec.allowed_domains = allowed_domains(value, &child, errors);
        }
        "loopbackPorts" => spec.loopback_ports = loopback_ports(value, &child, host, errors),
        "allowedUnixSockets" => {
            spec.allowed_unix_sockets = unix_sockets(value, &child, host, errors);
        }
        other => errors.push(child, unknown_field(other, &FIELDS)),
    });
    if errors.total() == before {
        network_conflicts(&spec, path, errors);
    }
    (errors.total() == before).then_some(spec)
}

/// `allowedDomains`: a bounded list of unique entries (see [`crate::domains`]).
pub(crate) fn allowed_domains(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    let Node::Sequence(items) = node else {
        errors.push(
            path,
            format!("expected a list of domain names, found {}", node.kind()),
        );
        return None;
    };
    let raw: Vec<(String, Option<&str>)> = items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let child = text::index_path(path, index);
            let value = match item {
                Node::String(value) => Some(value.as_str()),
                other => {
                    errors.push(
                        child.clone(),
                        format!("expected a domain name, found {}", other.kind()),
                    );
                    None
                }
            };
            (child, value)
        })
        .collect();
    entry_list(raw, path, errors)
}

/// Checks a list of entries (each with its field path): bounds, syntax, duplicates, and `*`
/// standing alone. Returns the canonical entries, sorted, when all are valid.
pub(crate) fn entry_list(
    items: Vec<(String, Option<&str>)>,
    path: &str,
    errors: &mut Errors,
) -> Option<Vec<String>> {
    let before = errors.total();
    if items.len() > domains::MAX_ENTRIES {
        errors.push(
            path,
            format!(
                "has {} entries; at most {}",
                items.len(),
                domains::MAX_ENTRIES
            ),
        );
    }
    let count = items.len();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for (child, raw) in items {
        let Some(raw) = raw else { continue };
        match DomainEntry::parse(raw) {
            Err(message) => errors.push(child, format!("{} {message}", text::quote(raw))),
            Ok(entry) if entry.is_everything() && count > 1 => {
                errors.push(child, "`*` allows every domain; it must be the only entry")
            }
            Ok(entry) => {
                let canonical = entry.canonical();
                if !seen.insert(canonical.clone()) {
                    errors.push(
                        child,
                        format!("duplicate entry {}", text::quote(&canonical)),
                    );
                }
            }
        }
    }
    (errors.total() == before).then(|| seen.into_iter().collect())
}

/// `loopbackPorts`: a bounded list of unique port numbers (1 to 65535), sorted.
fn loopback_ports(node: &Node, path: &str, host: &HostFacts, errors: &mut Errors) -> Vec<u16> {
    let Some(items) = crate::reader::expect_list(node, path, MAX_LOOPBACK_PORTS, errors) else {
        return Vec::new();
    };
    let mut ports = BTreeSet::new();
    for (index, item) in items.iter().enumerate() {
        let child = text::index_path(path, index);
        match crate::reader::bounded_integer(item, u64::from(u16::MAX)) {
            Err(message) => errors.push(child, message),
            Ok(port) => {
                let port = u16::try_from(port).unwrap_or(u16::MAX);
                let allowed = host
                    .loopback_ports
                    .as_ref()
                    .is_none_or(|allowed| allowed.contains(&port));
                if !allowed {
                    errors.push(
                        child,
                        format!(
                            "port {port} is not among the host loopback ports this host allows ({})",
                            host.loopback_ports
                                .iter()
                                .flatten()
                                .map(u16::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                } else if !ports.insert(port) {
                    errors.push(child, format!("duplicate port {port}"));
                }
            }
        }
    }
    ports.into_iter().collect()
}

/// `allowedDomains` against an explicit `networkMode` (DESIGN.md, "Network"): `[]` conflicts
/// with `allow-outbound`, `*` with `none` and `loopback-only`, a concrete list with `none`.
fn network_conflicts(spec: &SandboxSpec, path: &str, errors: &mut Errors) {
    // Host loopback ports are reached only from a sandbox's own network namespace that keeps
    // everything else out: `loopback-only` (explicit: no other mode implies it).
    if !spec.loopback_ports.is_empty() && spec.network_mode != Some(NetworkMode::LoopbackOnly) {
        errors.push(
            text::child_path(path, "loopbackPorts"),
            "host loopback ports are reachable only with networkMode `loopback-only`",
        );
    }
    let (Some(list), Some(mode)) = (&spec.allowed_domains, spec.network_mode) else {
        return;
    };
    let everything = list.len() == 1 && list.first().is_some_and(|e| e == "*");
    let problem = match mode {
        NetworkMode::AllowOutbound if list.is_empty() => Some(
            "an empty allowedDomains denies all outbound traffic, which contradicts \
             networkMode `allow-outbound`",
        ),
        NetworkMode::None | NetworkMode::LoopbackOnly if everything => Some(
            "allowedDomains `*` allows all outbound traffic, which contradicts a networkMode \
             without outbound traffic",
        ),
        NetworkMode::None if !list.is_empty() => Some(
            "allowedDomains names domains, but networkMode `none` allows no network at all; \
             use `allow-outbound` or `loopback-only` (or omit networkMode)",
        ),
        _ => None,
    };
    if let Some(problem) = problem {
        errors.push(text::child_path(path, "networkMode"), problem);
        errors.push(text::child_path(path, "allowedDomains"), problem);
    }
}

/// How one kind of name list is checked.
struct NameList<T: 'static> {
    /// `backend`, `capability`.
    what: &'static str,
    min: usize,
    max: usize,
    all: &'static [T],
    name: fn(&T) -> &'static str,
}

const BACKENDS: NameList<Backend> = NameList {
    what: "backend",
    min: 1,
    max: MAX_BACKENDS,
    all: &Backend::ALL,
    name: |b| b.as_str(),
};

const CAPABILITIES: NameList<Capability> = NameList {
    what: "capability",
    min: 0,
    max: MAX_CAPABILITIES,
    all: &Capability::ALL,
    name: |c| c.as_str(),
};

/// A bounded list of unique known names; every bad item is reported at its index.
fn names<T: Copy + PartialEq>(
    node: &Node,
    path: &str,
    list: &NameList<T>,
    errors: &mut Errors,
) -> Option<Vec<T>> {
    let Node::Sequence(items) = node else {
        errors.push(
            path,
            format!(
                "expected a list of {} names, found {}",
                list.what,
                node.kind()
            ),
        );
        return None;
    };
    let before = errors.total();
    if items.len() < list.min {
        errors.push(
            path,
            format!("must list at least {} {}", list.min, list.what),
        );
    }
    if items.len() > list.max {
        errors.push(
            path,
            format!("has {} entries; at most {}", items.len(), list.max),
        );
    }
    let known = || list.all.iter().map(list.name);
    let mut out: Vec<T> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let child = text::index_path(path, index);
        let Node::String(raw) = item else {
            errors.push(
                child,
                format!("expected a {} name, found {}", list.what, item.kind()),
            );
            continue;
        };
        match list.all.iter().find(|value| (list.name)(value) == raw) {
            None => errors.push(
                child,
                format!(
                    "unknown {} {}; expected one of {}{}",
                    list.what,
                    text::quote(raw),
                    text::list_names(known()),
                    text::did_you_mean(raw, known()),
                ),
            ),
            Some(value) if out.contains(value) => errors.push(
                child,
                format!("duplicate {} {}", list.what, text::quote(raw)),
            ),
            Some(value) => out.push(*value),
        }
    }
    (errors.total() == before).then_some(out)
}

/// `networkMode`: one of the three mode names.
fn network_mode(node: &Node, path: &str, errors: &mut Errors) -> Option<NetworkMode> {
    let raw = expect_str(node, path, errors)?;
    let found = NetworkMode::from_name(raw);
    if found.is_none() {
        let known = || NetworkMode::ALL.iter().map(|m| m.as_str());
        errors.push(
            path,
            format!(
                "unknown networkMode {}; expected one of {}{}",
                text::quote(raw),
                text::list_names(known()),
                text::did_you_mean(raw, known()),
            ),
        );
    }
    found
}

/// `deniedReadPaths`: resolved, checked against the workspace and writable roots, deduplicated
/// and sorted.
fn denied_read_paths(
    node: &Node,
    path: &str,
    host: &HostFacts,
    errors: &mut Errors,
) -> Vec<String> {
    let Node::Sequence(items) = node else {
        errors.push(
            path,
            format!("expected a list of paths, found {}", node.kind()),
        );
        return Vec::new();
    };
    if items.len() > MAX_DENIED_READ_PATHS {
        errors.push(
            path,
            format!(
                "has {} entries; at most {MAX_DENIED_READ_PATHS}",
                items.len()
            ),
        );
    }
    let mut resolved = BTreeSet::new();
    for (index, item) in items.iter().enumerate() {
        let child = text::index_path(path, index);
        let Some(raw) = expect_str(item, &child, errors) else {
            continue;
        };
        match paths::resolve_denied(raw, &host.home_dir) {
            Err(message) => errors.push(child, message),
            Ok(full) => match blocked_root(&full, host) {
                Some(problem) => errors.push(
                    child,
                    format!(
                        "{} resolves to {}, which contains {problem}; the task could not run",
                        text::quote(raw),
                        text::quote(&full)
                    ),
                ),
                None => {
                    resolved.insert(full);
                }
            },
        }
    }
    resolved.into_iter().collect()
}

/// `allowedUnixSockets`: a bounded list of paths (absolute or `~/`), resolved, unique (after
/// resolution), sorted. Whether each is a socket, and whether it grants root, is decided later
/// from the host's facts ([`crate::sockets`]).
fn unix_sockets(
    node: &Node,
    path: &str,
    host: &HostFacts,
    errors: &mut Errors,
) -> Option<Vec<String>> {
    let Node::Sequence(items) = node else {
        errors.push(
            path,
            format!("expected a list of socket paths, found {}", node.kind()),
        );
        return None;
    };
    let before = errors.total();
    if items.len() > MAX_UNIX_SOCKETS {
        errors.push(
            path,
            format!("has {} entries; at most {MAX_UNIX_SOCKETS}", items.len()),
        );
    }
    let mut resolved = BTreeSet::new();
    for (index, item) in items.iter().enumerate() {
        let child = text::index_path(path, index);
        let Some(raw) = expect_str(item, &child, errors) else {
            continue;
        };
        match paths::resolve_denied(raw, &host.home_dir) {
            Err(message) => errors.push(child, message),
            Ok(full) if full == "/" => errors.push(child, "`/` is not a socket"),
            Ok(full) => {
                if !resolved.insert(full.clone()) {
                    errors.push(child, format!("duplicate socket {}", text::quote(&full)));
                }
            }
        }
    }
    (errors.total() == before).then(|| resolved.into_iter().collect())
}

/// The workspace or writable root a denied path would hide, described for a message.
pub(crate) fn blocked_root(denied: &str, host: &HostFacts) -> Option<String> {
    if paths::contains(denied, &host.workspace_dir) {
        return Some(format!(
            "the workspace {}",
            text::quote(&host.workspace_dir)
        ));
    }
    host.writable_roots
        .iter()
        .find(|root| paths::contains(denied, root))
        .map(|root| format!("the writable root {}", text::quote(root)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;
    use crate::output::FieldError;
    use crate::yaml;

    fn host() -> HostFacts {
        HostFacts {
            writable_roots: vec!["/tmp/task".into()],
            ..HostFacts::linux_cli("/home/u", "/home/u/proj")
        }
    }

    fn run(body: &str) -> (Option<SandboxSpec>, Vec<FieldError>) {
        let node = yaml::parse(body).unwrap();
        let mut errors = Errors::default();
        let spec = walk(&node, "spec.sandbox", &host(), &mut errors);
        (spec, errors.into_listed())
    }

    fn paths(body: &str) -> Vec<String> {
        run(body).1.into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn empty_mapping_is_all_defaults() {
        assert_eq!(run("{}").0, Some(SandboxSpec::default()));
    }

    #[test]
    fn full_block_parses() {
        let (spec, errors) = run(
            "preferredBackends: [linux-bwrap, docker]\nnetworkMode: loopback-only\n\
             requiredCapabilities: [syscallFiltering]\ndeniedReadPaths: ['~/.ssh', /etc//x/, ~/.ssh/]\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let spec = spec.unwrap();
        assert_eq!(
            spec.preferred_backends,
            Some(vec![Backend::LinuxBwrap, Backend::Docker])
        );
        assert_eq!(spec.network_mode, Some(NetworkMode::LoopbackOnly));
        assert_eq!(spec.required_capabilities, [Capability::SyscallFiltering]);
        assert_eq!(spec.denied_read_paths, ["/etc/x", "/home/u/.ssh"]);
    }

    #[test]
    fn non_mapping_sandbox_is_invalid() {
        for body in ["null", "~", "docker", "[docker]", "1"] {
            assert_eq!(paths(body), ["spec.sandbox"], "{body}");
        }
    }

    #[test]
    fn backend_list_errors_are_reported_per_index() {
        let body = "preferredBackends: [linux-bwrap, linux-bwrapp, linux-bwrap, 7, docker, docker]";
        let errors = run(body).1;
        let got: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            got,
            [
                "spec.sandbox.preferredBackends",
                "spec.sandbox.preferredBackends[1]",
                "spec.sandbox.preferredBackends[2]",
                "spec.sandbox.preferredBackends[3]",
                "spec.sandbox.preferredBackends[5]",
            ]
        );
        assert_eq!(errors[0].message, "has 6 entries; at most 5");
        assert!(
            errors[1]
                .message
                .starts_with("unknown backend `linux-bwrapp`")
        );
        assert!(errors[1].message.ends_with("did you mean `linux-bwrap`?"));
        assert_eq!(errors[2].message, "duplicate backend `linux-bwrap`");
    }

    #[test]
    fn empty_backend_list_is_invalid() {
        assert_eq!(
            paths("preferredBackends: []"),
            ["spec.sandbox.preferredBackends"]
        );
        assert_eq!(
            paths("preferredBackends: docker"),
            ["spec.sandbox.preferredBackends"]
        );
    }

    #[test]
    fn capabilities_bounds_and_names() {
        assert_eq!(
            run("requiredCapabilities: []").0,
            Some(SandboxSpec::default())
        );
        let body = "requiredCapabilities: [networkIsolation, NetworkIsolation, networkIsolation]";
        assert_eq!(
            paths(body),
            [
                "spec.sandbox.requiredCapabilities[1]",
                "spec.sandbox.requiredCapabilities[2]"
            ]
        );
    }

    #[test]
    fn network_mode_must_be_a_known_string() {
        assert_eq!(paths("networkMode: None"), ["spec.sandbox.networkMode"]);
        assert_eq!(paths("networkMode: [none]"), ["spec.sandbox.networkMode"]);
        assert_eq!(paths("networkMode: false"), ["spec.sandbox.networkMode"]);
    }

    #[test]
    fn unknown_and_duplicate_fields() {
        assert_eq!(
            paths("networkMode: none\nnetworkmode: none\nnetworkMode: none"),
            ["spec.sandbox.networkmode", "spec.sandbox.networkMode"]
        );
    }

    #[test]
    fn denied_paths_that_hide_the_workspace_are_invalid() {
        let errors = run("deniedReadPaths: ['~/', /, /tmp, '~/proj', '~/proj/secrets']").1;
        let got: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            got,
            [
                "spec.sandbox.deniedReadPaths[0]",
                "spec.sandbox.deniedReadPaths[1]",
                "spec.sandbox.deniedReadPaths[2]",
                "spec.sandbox.deniedReadPaths[3]",
            ]
        );
        assert!(errors[0].message.contains("the task could not run"));
        assert!(errors[2].message.contains("writable root `/tmp/task`"));
    }

    #[test]
    fn denied_path_count_is_bounded() {
        let list: Vec<String> = (0..65).map(|i| format!("/d{i}")).collect();
        let body = format!("deniedReadPaths: [{}]", list.join(", "));
        assert_eq!(paths(&body), ["spec.sandbox.deniedReadPaths"]);
    }
}
