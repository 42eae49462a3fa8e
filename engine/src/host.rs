//! Host facts and probes: the checks that make them safe to decide on.
//!
//! Why a separate refusal code: malformed facts are a host bug, not a policy error, and the
//! user who wrote the Taskpack cannot fix them. Probes are otherwise trusted as recorded (replay
//! depends on it); only what would make the decision ambiguous or the plan unsafe is checked:
//! paths that are not normalised absolute paths, an empty or repeated backend order, two probes
//! for one backend.

use std::collections::BTreeSet;

use crate::environment;
use crate::model::{Backend, DecisionInput};
use crate::paths;
use crate::text::{self, Errors};

/// Every problem with the host facts and probes, with paths like `host.writableRoots[1]`.
pub(crate) fn validate(input: &DecisionInput) -> Errors {
    let mut errors = Errors::default();
    let host = &input.host;
    for (path, value) in [("host.os", &host.os), ("host.arch", &host.arch)] {
        if value.is_empty() {
            errors.push(path, "must not be empty");
        }
    }
    for (path, value) in [
        ("host.homeDir", &host.home_dir),
        ("host.workspaceDir", &host.workspace_dir),
    ] {
        if let Err(message) = paths::check_host_path(value) {
            errors.push(path, message);
        }
    }
    for (index, root) in host.writable_roots.iter().enumerate() {
        if let Err(message) = paths::check_host_path(root) {
            errors.push(text::index_path("host.writableRoots", index), message);
        }
    }
    let order = &host.default_backend_order;
    if order.is_empty() || order.len() > Backend::ALL.len() {
        errors.push(
            "host.defaultBackendOrder",
            format!(
                "has {} entries; expected 1 to {}",
                order.len(),
                Backend::ALL.len()
            ),
        );
    }
    let mut seen = BTreeSet::new();
    for (index, backend) in order.iter().enumerate() {
        if !seen.insert(*backend) {
            errors.push(
                text::index_path("host.defaultBackendOrder", index),
                format!("duplicate backend `{}`", backend.as_str()),
            );
        }
    }
    if let Some(allowlist) = &host.environment_allowlist {
        validate_allowlist(allowlist, &mut errors);
    }
    if let Some(ceilings) = &host.budget_ceilings {
        crate::budgets::validate_limits(ceilings, "host.budgetCeilings", &mut errors);
    }
    if let Some(profile) = &host.runtime_profile_budgets {
        crate::budgets::validate_limits(profile, "host.runtimeProfileBudgets", &mut errors);
    }
    if let Some(denied) = &host.denied_read_paths {
        validate_denied(denied, input, &mut errors);
    }
    if let Some(exempt) = &host.exempt_denied_read_paths {
        validate_exempt(exempt, &mut errors);
    }
    if let Some(dirs) = &host.git_dirs {
        validate_path_list(
            dirs,
            "host.gitDirs",
            crate::protected::MAX_GIT_DIRS,
            &mut errors,
        );
    }
    if let Some(exempt) = &host.exempt_protected_paths {
        validate_exempt_protected(exempt, &mut errors);
    }
    if let Some(state) = &host.state_paths {
        validate_path_list(
            state,
            "host.statePaths",
            crate::protected::MAX_STATE_PATHS,
            &mut errors,
        );
    }
    if let Some(keys) = &host.key_paths {
        validate_path_list(
            keys,
            "host.keyPaths",
            crate::protected::MAX_STATE_PATHS,
            &mut errors,
        );
    }
    if let Some(ports) = &host.loopback_ports {
        const PATH: &str = "host.loopbackPorts";
        if ports.len() > crate::sandbox::MAX_LOOPBACK_PORTS {
            errors.push(
                PATH,
                format!(
                    "has {} entries; expected at most {}",
                    ports.len(),
                    crate::sandbox::MAX_LOOPBACK_PORTS
                ),
            );
        }
        let mut seen = BTreeSet::new();
        for (index, port) in ports.iter().enumerate() {
            if *port == 0 {
                errors.push(text::index_path(PATH, index), "port 0 is not a port");
            } else if !seen.insert(port) {
                errors.push(
                    text::index_path(PATH, index),
                    format!("duplicate port {port}"),
                );
            }
        }
    }
    if let Some(facts) = &host.unix_sockets {
        validate_unix_sockets(facts, &mut errors);
    }
    if let Some(allowed) = &host.allow_root_granting_sockets {
        const PATH: &str = "host.allowRootGrantingSockets";
        if allowed.len() > crate::sandbox::MAX_UNIX_SOCKETS * 4 {
            errors.push(
                PATH,
                format!(
                    "has {} entries; expected at most {}",
                    allowed.len(),
                    crate::sandbox::MAX_UNIX_SOCKETS * 4
                ),
            );
        }
        for (index, path) in allowed.iter().enumerate() {
            if let Err(message) = paths::check_host_path(path) {
                errors.push(text::index_path(PATH, index), message);
            }
        }
    }
    let mut probed = BTreeSet::new();
    for (index, probe) in input.probes.iter().enumerate() {
        if !probed.insert(probe.backend) {
            errors.push(
                format!("probes[{index}].backend"),
                format!("a second probe for `{}`", probe.backend.as_str()),
            );
        }
    }
    errors
}

/// The facts about allowed host Unix sockets: bounded (a policy and the flags allow at most
/// [`crate::sandbox::MAX_UNIX_SOCKETS`] each), normalised absolute paths, one fact per path, a
/// target exactly for a socket, permission bits only.
fn validate_unix_sockets(facts: &[crate::model::UnixSocketFact], errors: &mut Errors) {
    use crate::model::UnixSocketKind;
    const PATH: &str = "host.unixSockets";
    let most = crate::sandbox::MAX_UNIX_SOCKETS * 2;
    if facts.len() > most {
        errors.push(
            PATH,
            format!("has {} entries; expected at most {most}", facts.len()),
        );
        return;
    }
    let mut seen = BTreeSet::new();
    for (index, fact) in facts.iter().enumerate() {
        let at = |field: &str| text::child_path(&text::index_path(PATH, index), field);
        if let Err(message) = paths::check_host_path(&fact.path) {
            errors.push(at("path"), message);
        } else if !seen.insert(fact.path.as_str()) {
            errors.push(
                at("path"),
                format!("a second fact for {}", text::quote(&fact.path)),
            );
        }
        match fact.kind {
            UnixSocketKind::Socket => {
                if let Err(message) = paths::check_host_path(&fact.target) {
                    errors.push(at("target"), message);
                }
            }
            UnixSocketKind::Missing | UnixSocketKind::NotSocket if !fact.target.is_empty() => {
                errors.push(at("target"), "must be empty unless the path is a socket");
            }
            UnixSocketKind::Missing | UnixSocketKind::NotSocket => {}
        }
        if fact.mode > 0o7777 {
            errors.push(
                at("mode"),
                "must hold permission bits only (at most 0o7777)",
            );
        }
    }
}

/// The host's own denied read paths: bounded, each a valid `deniedReadPaths` entry that does
/// not hide the workspace or a writable root.
fn validate_denied(denied: &[String], input: &DecisionInput, errors: &mut Errors) {
    const PATH: &str = "host.deniedReadPaths";
    if denied.len() > crate::sandbox::MAX_DENIED_READ_PATHS {
        errors.push(
            PATH,
            format!(
                "has {} entries; expected at most {}",
                denied.len(),
                crate::sandbox::MAX_DENIED_READ_PATHS
            ),
        );
        return;
    }
    for (index, raw) in denied.iter().enumerate() {
        let at = text::index_path(PATH, index);
        match paths::resolve_denied(raw, &input.host.home_dir) {
            Err(message) => errors.push(at, message),
            Ok(full) => {
                if let Some(root) = crate::sandbox::blocked_root(&full, &input.host) {
                    errors.push(
                        at,
                        format!(
                            "{} resolves to {}, which contains {root}",
                            text::quote(raw),
                            text::quote(&full)
                        ),
                    );
                }
            }
        }
    }
}

/// Exemptions name built-in denied paths exactly as the built-in list spells them, once each.
fn validate_exempt(exempt: &[String], errors: &mut Errors) {
    const PATH: &str = "host.exemptDeniedReadPaths";
    let built_in = crate::resolve::BUILT_IN_DENIED_READ_PATHS;
    let mut seen = BTreeSet::new();
    for (index, entry) in exempt.iter().enumerate() {
        let at = text::index_path(PATH, index);
        if !built_in.contains(&entry.as_str()) {
            errors.push(
                at,
                format!(
                    "{} is not a built-in denied path; expected one of {}",
                    text::quote(entry),
                    text::list_names(built_in)
                ),
            );
        } else if !seen.insert(entry.as_str()) {
            errors.push(at, format!("duplicate entry {}", text::quote(entry)));
        }
    }
}

/// A measured list of host paths (git directories, Palisade's state) at `path`: at most `max`,
/// each a normalised absolute path, each once.
fn validate_path_list(list: &[String], path: &str, max: usize, errors: &mut Errors) {
    if list.len() > max {
        errors.push(
            path,
            format!("has {} entries; expected at most {max}", list.len()),
        );
    }
    let mut seen = BTreeSet::new();
    for (index, entry) in list.iter().enumerate() {
        let at = text::index_path(path, index);
        if let Err(message) = paths::check_host_path(entry) {
            errors.push(at, message);
        } else if !seen.insert(entry.as_str()) {
            errors.push(at, format!("duplicate entry {}", text::quote(entry)));
        }
    }
}

/// Protected-path exemptions name git's built-in rules exactly, once each: the seed's four are
/// not exemptable.
fn validate_exempt_protected(exempt: &[String], errors: &mut Errors) {
    const PATH: &str = "host.exemptProtectedPaths";
    let rules = crate::protected::EXEMPTABLE_RULES;
    let mut seen = BTreeSet::new();
    for (index, entry) in exempt.iter().enumerate() {
        let at = text::index_path(PATH, index);
        if !rules.contains(&entry.as_str()) {
            errors.push(
                at,
                format!(
                    "{} is not an exemptable protected path; expected one of {}",
                    text::quote(entry),
                    text::list_names(rules)
                ),
            );
        } else if !seen.insert(entry.as_str()) {
            errors.push(at, format!("duplicate entry {}", text::quote(entry)));
        }
    }
}

/// The writable roots (the workspace first) that contain nothing: `/`, the home directory
/// (unless the host allows it explicitly) or an ancestor of it. Each at its field path.
pub(crate) fn unsafe_writable_roots(input: &DecisionInput) -> Errors {
    let host = &input.host;
    let mut errors = Errors::default();
    let roots = std::iter::once((String::from("host.workspaceDir"), &host.workspace_dir)).chain(
        host.writable_roots
            .iter()
            .enumerate()
            .map(|(index, root)| (text::index_path("host.writableRoots", index), root)),
    );
    for (at, root) in roots {
        if root == "/" {
            errors.push(
                at,
                "`/` would make the whole filesystem writable: no containment",
            );
        } else if *root == host.home_dir && host.allow_home_writable == Some(true) {
            // Allowed by the host configuration, and recorded with the facts.
        } else if let Some(state) = host
            .state_paths
            .iter()
            .flatten()
            .chain(host.key_paths.iter().flatten())
            .find(|state| paths::contains(state, root))
        {
            errors.push(
                at,
                format!(
                    "{} is or lies inside Palisade's own state {} (its host configuration, caches or signing keys): the command could rewrite what the next run trusts",
                    text::quote(root),
                    text::quote(state)
                ),
            );
        } else if paths::contains(root, &host.home_dir) {
            errors.push(
                at,
                format!(
                    "{} is the home directory {} or contains it: every dotfile and credential store \
                     there would be writable",
                    text::quote(root),
                    text::quote(&host.home_dir)
                ),
            );
        }
    }
    errors
}

/// The environment allowlist: bounded, each entry an exact name or a pattern that can pass
/// something ([`environment::parse_entry`]), no repeats.
fn validate_allowlist(allowlist: &[String], errors: &mut Errors) {
    const PATH: &str = "host.environmentAllowlist";
    if allowlist.len() > environment::MAX_ENTRIES {
        errors.push(
            PATH,
            format!(
                "has {} entries; expected at most {}",
                allowlist.len(),
                environment::MAX_ENTRIES
            ),
        );
        return;
    }
    let mut seen = BTreeSet::new();
    for (index, entry) in allowlist.iter().enumerate() {
        if let Err(message) = environment::parse_entry(entry) {
            errors.push(text::index_path(PATH, index), message);
        } else if !seen.insert(entry.as_str()) {
            errors.push(
                text::index_path(PATH, index),
                format!("duplicate entry {}", text::quote(entry)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;
    use crate::model::BackendProbe;

    fn input() -> DecisionInput {
        crate::test_support::input(crate::model::HostFacts::linux_cli("/root", "/w"))
    }

    fn probe(backend: Backend) -> BackendProbe {
        BackendProbe {
            backend,
            available: true,
            reason: String::new(),
            capabilities: vec![],
            network_modes: vec![],
            network_bridge: false,
            version: String::new(),
            limitations: vec![],
            landlock_proc: None,
        }
    }

    fn paths(input: &DecisionInput) -> Vec<String> {
        validate(input)
            .into_listed()
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    #[test]
    fn good_facts_pass() {
        assert!(validate(&input()).is_empty());
    }

    #[test]
    fn every_problem_is_listed() {
        let mut input = input();
        input.host.os.clear();
        input.host.workspace_dir = "w".into();
        input.host.home_dir = "/root/".into();
        input.host.writable_roots = vec!["/ok".into(), "/a/../b".into()];
        input.host.default_backend_order = vec![Backend::Docker, Backend::Docker];
        input.probes = vec![
            probe(Backend::Docker),
            probe(Backend::LinuxBwrap),
            probe(Backend::Docker),
        ];
        assert_eq!(
            paths(&input),
            [
                "host.os",
                "host.homeDir",
                "host.workspaceDir",
                "host.writableRoots[1]",
                "host.defaultBackendOrder[1]",
                "probes[2].backend",
            ]
        );
    }

    #[test]
    fn environment_allowlist_entries_are_checked() {
        let mut input = input();
        input.host.environment_allowlist = Some(
            ["LANG", "LC_*", "*", "AWS_*", "LANG", "NPM_TOKEN", "A-B"]
                .map(String::from)
                .to_vec(),
        );
        assert_eq!(
            paths(&input),
            [
                "host.environmentAllowlist[2]",
                "host.environmentAllowlist[3]",
                "host.environmentAllowlist[4]",
                "host.environmentAllowlist[6]",
            ]
        );
        input.host.environment_allowlist = Some(vec!["A".into(); environment::MAX_ENTRIES + 1]);
        assert_eq!(paths(&input), ["host.environmentAllowlist"]);
    }

    #[test]
    fn backend_order_is_bounded() {
        let mut input = input();
        input.host.default_backend_order.clear();
        assert_eq!(paths(&input), ["host.defaultBackendOrder"]);
        input.host.default_backend_order = Backend::ALL
            .iter()
            .chain(&Backend::ALL[..1])
            .copied()
            .collect();
        assert_eq!(
            paths(&input),
            ["host.defaultBackendOrder", "host.defaultBackendOrder[5]"]
        );
    }
}
