//! The launcher's policy flags (`policyFlags`): `--network`, `--allow-domain`, `--deny-read`,
//! `--writable`, `--backend`, `--require`, `--pass-env`.
//!
//! Why two rules: without a declared `spec.sandbox` there is no author's policy to respect, so
//! the flags form the policy over the omitted-policy defaults (what a one-off user means by
//! "no network, deny ~/.aws"). With one, the taskpack's author decided, and a flag may only
//! tighten: a stricter network, more denied paths and requirements, fewer backends. Two sets
//! belong to the host, not to any policy — the writable roots and the environment allowlist — so
//! `--writable` and `--pass-env` only ever narrow them. Every setting a flag makes is recorded
//! with origin `flag`, and a flag that would loosen is `SANDBOX_POLICY_INVALID` at its own field
//! path.

use std::collections::BTreeSet;

use crate::environment::{self, Verdict};
use crate::model::{Capability, HostFacts, NetworkMode, PolicyFlags};
use crate::output::{DeniedOrigin, DeniedPath, EffectivePolicy, Origin, PolicySource};
use crate::paths;
use crate::resolve::{self, add_requirement};
use crate::sandbox::{self, SandboxSpec};
use crate::text::{self, Errors};
use crate::yaml::Node;

/// The field path of the flags in errors.
const PATH: &str = "policyFlags";

/// The most `--writable` and `--pass-env` entries.
const MAX_WRITABLE: usize = 64;
const MAX_PASS_ENV: usize = 256;

/// The flags, checked on their own: the `spec.sandbox`-shaped ones exactly as a policy's fields
/// are (bounds, names, duplicates, denied paths, `networkMode` against `allowedDomains`).
pub(crate) struct Checked {
    sandbox: SandboxSpec,
    /// `--allow-host-port` without `--network`: the ports asked for `loopback-only`.
    mode_implied_by_ports: bool,
    writable_roots: Vec<String>,
    pass_environment: Vec<String>,
}

/// Checks the flags against the host facts; every offending flag at its path.
pub(crate) fn check(flags: &PolicyFlags, host: &HostFacts) -> Result<Checked, Errors> {
    let mut errors = Errors::default();
    let sandbox = sandbox::walk(&as_node(flags), PATH, host, &mut errors);
    let writable_roots = writable_roots(&flags.writable_roots, host, &mut errors);
    let pass_environment = pass_environment(&flags.pass_environment, host, &mut errors);
    match sandbox {
        Some(sandbox) if errors.is_empty() => Ok(Checked {
            sandbox,
            mode_implied_by_ports: !flags.loopback_ports.is_empty() && flags.network_mode.is_none(),
            writable_roots,
            pass_environment,
        }),
        _ => Err(errors),
    }
}

/// The flags that `execution-mode workspace` cannot enforce (it confines nothing), each at its
/// path.
pub(crate) fn unenforceable_in_workspace(flags: &PolicyFlags) -> Errors {
    let mut errors = Errors::default();
    let given = [
        ("networkMode", flags.network_mode.is_some()),
        ("allowedDomains", !flags.allowed_domains.is_empty()),
        ("deniedReadPaths", !flags.denied_read_paths.is_empty()),
        ("writableRoots", !flags.writable_roots.is_empty()),
        ("preferredBackends", !flags.preferred_backends.is_empty()),
        (
            "requiredCapabilities",
            !flags.required_capabilities.is_empty(),
        ),
    ];
    for (field, _) in given.iter().filter(|(_, given)| *given) {
        errors.push(
            text::child_path(PATH, field),
            "cannot be enforced in execution mode `workspace` (no sandbox)",
        );
    }
    errors
}

/// Applies checked flags to the resolved policy: forming it when no `spec.sandbox` was
/// declared, tightening it otherwise.
pub(crate) fn apply(policy: &mut EffectivePolicy, flags: &Checked) -> Result<(), Errors> {
    let declared = policy.source == PolicySource::Declared;
    let spec = &flags.sandbox;
    if declared {
        let mut errors = Errors::default();
        tighten_network(policy, spec.network_mode, &mut errors);
        if let Some(backends) = &spec.preferred_backends {
            restrict_backends(policy, backends, &mut errors);
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        if let Some(list) = &spec.allowed_domains {
            let path = text::child_path(PATH, "allowedDomains");
            resolve::narrow_domains(policy, list, &path, Origin::Flag)?;
        }
        if let Some(sockets) = &spec.allowed_unix_sockets {
            narrow_unix_sockets(policy, sockets)?;
        }
        if !spec.loopback_ports.is_empty() {
            narrow_loopback_ports(policy, &spec.loopback_ports)?;
        }
    } else {
        form_network(policy, spec);
        if flags.mode_implied_by_ports {
            policy.network_mode_origin = Origin::Implied;
        }
        if !spec.loopback_ports.is_empty() {
            policy.loopback_ports = spec.loopback_ports.clone();
            policy.loopback_ports_origin = Some(Origin::Flag);
        }
        if let Some(sockets) = &spec.allowed_unix_sockets {
            policy.allowed_unix_sockets = sockets.clone();
            policy.allowed_unix_sockets_origin = Some(Origin::Flag);
        }
        if let Some(backends) = &spec.preferred_backends {
            policy.preferred_backends = backends.clone();
            policy.preferred_backends_origin = Origin::Flag;
        }
    }
    for &capability in &spec.required_capabilities {
        require(policy, capability);
    }
    deny(policy, &spec.denied_read_paths);
    if !flags.writable_roots.is_empty() {
        policy.writable_roots = Some(flags.writable_roots.clone());
        add_requirement(
            policy,
            Capability::FilesystemWriteContainment,
            Origin::Implied,
            "implied by policyFlags.writableRoots",
        );
    }
    if !flags.pass_environment.is_empty() {
        policy.pass_environment = Some(flags.pass_environment.clone());
    }
    Ok(())
}

/// A `spec.sandbox`-shaped node of the given flags (absent and empty ones left out), so that
/// the policy's own checks apply to them word for word.
fn as_node(flags: &PolicyFlags) -> Node {
    let string = |value: &str| Node::String(value.to_owned());
    let list = |values: Vec<&str>| Node::Sequence(values.into_iter().map(string).collect());
    let mut entries = Vec::new();
    if let Some(mode) = flags.network_mode {
        entries.push((string("networkMode"), string(mode.as_str())));
    }
    let fields = [
        (
            "preferredBackends",
            flags
                .preferred_backends
                .iter()
                .map(|b| b.as_str())
                .collect(),
        ),
        (
            "requiredCapabilities",
            flags
                .required_capabilities
                .iter()
                .map(|c| c.as_str())
                .collect(),
        ),
        (
            "deniedReadPaths",
            flags.denied_read_paths.iter().map(String::as_str).collect(),
        ),
        (
            "allowedDomains",
            flags.allowed_domains.iter().map(String::as_str).collect(),
        ),
        (
            "allowedUnixSockets",
            flags
                .allowed_unix_sockets
                .iter()
                .map(String::as_str)
                .collect(),
        ),
    ];
    for (key, values) in fields {
        let values: Vec<&str> = values;
        if !values.is_empty() {
            entries.push((string(key), list(values)));
        }
    }
    if !flags.loopback_ports.is_empty() {
        // Host ports are reached only under `loopback-only`: without `--network` the ports ask
        // for it (recorded as implied, [`apply`]).
        if flags.network_mode.is_none() {
            entries.push((
                string("networkMode"),
                string(NetworkMode::LoopbackOnly.as_str()),
            ));
        }
        let ports = flags
            .loopback_ports
            .iter()
            .map(|port| Node::Number(port.to_string()))
            .collect();
        entries.push((string("loopbackPorts"), Node::Sequence(ports)));
    }
    Node::Mapping(entries)
}

/// `--writable`: normalised absolute paths inside the workspace, unique, in the order given.
fn writable_roots(raw: &[String], host: &HostFacts, errors: &mut Errors) -> Vec<String> {
    let path = text::child_path(PATH, "writableRoots");
    if raw.len() > MAX_WRITABLE {
        errors.push(
            path.as_str(),
            format!("has {} entries; at most {MAX_WRITABLE}", raw.len()),
        );
    }
    let mut seen = BTreeSet::new();
    for (index, root) in raw.iter().enumerate() {
        let at = text::index_path(&path, index);
        if let Err(message) = paths::check_host_path(root) {
            errors.push(at, message);
        } else if !paths::contains(&host.workspace_dir, root) {
            errors.push(
                at,
                format!(
                    "{} is outside the workspace {}: --writable may only narrow what is writable",
                    text::quote(root),
                    text::quote(&host.workspace_dir)
                ),
            );
        } else if !seen.insert(root.as_str()) {
            errors.push(at, format!("duplicate entry {}", text::quote(root)));
        }
    }
    raw.to_vec()
}

/// `--pass-env`: exact names the host's (or the default) allowlist passes, sorted.
fn pass_environment(raw: &[String], host: &HostFacts, errors: &mut Errors) -> Vec<String> {
    let path = text::child_path(PATH, "passEnvironment");
    if raw.len() > MAX_PASS_ENV {
        errors.push(
            path.as_str(),
            format!("has {} entries; at most {MAX_PASS_ENV}", raw.len()),
        );
    }
    let allowlist: Vec<&str> = match &host.environment_allowlist {
        Some(list) => list.iter().map(String::as_str).collect(),
        None => environment::DEFAULT_ALLOWLIST.to_vec(),
    };
    let entries = environment::parse_all(allowlist);
    let mut names = BTreeSet::new();
    for (index, name) in raw.iter().enumerate() {
        let at = text::index_path(&path, index);
        if !environment::is_name(name) {
            errors.push(
                at,
                format!(
                    "{} is not a variable name; expected letters, digits and `_` (not starting with a digit)",
                    text::quote(name)
                ),
            );
        } else if !names.insert(name.clone()) {
            errors.push(at, format!("duplicate entry {}", text::quote(name)));
        } else if matches!(
            environment::verdict(&entries, name),
            Verdict::Withheld { .. }
        ) {
            errors.push(
                at,
                format!(
                    "{} is not passed by the {} environment allowlist; --pass-env may only narrow it",
                    text::quote(name),
                    if host.environment_allowlist.is_some() {
                        "host configuration's"
                    } else {
                        "default"
                    }
                ),
            );
        }
    }
    names.into_iter().collect()
}

/// How much network a mode allows: a flag may move only down this order.
fn openness(mode: NetworkMode) -> u8 {
    match mode {
        NetworkMode::None => 0,
        NetworkMode::LoopbackOnly => 1,
        NetworkMode::AllowOutbound => 2,
    }
}

/// `--network` over a declared policy: the same mode or a stricter one. A stricter mode keeps
/// nothing the looser one allowed beyond it: the domain allowlist goes (no egress at all), and
/// under `none` so do the host loopback ports.
fn tighten_network(policy: &mut EffectivePolicy, mode: Option<NetworkMode>, errors: &mut Errors) {
    let Some(mode) = mode else { return };
    let current = policy.network_mode;
    if openness(mode) > openness(current) {
        errors.push(
            text::child_path(PATH, "networkMode"),
            format!(
                "`{}` would widen the policy's networkMode `{}`; a flag may only tighten a declared policy (allow-outbound > loopback-only > none)",
                mode.as_str(),
                current.as_str()
            ),
        );
        return;
    }
    if openness(mode) < openness(current) {
        if policy.allowed_domains.is_some() {
            policy.allowed_domains = None;
            policy.allowed_domains_origin = None;
        }
        if mode == NetworkMode::None {
            policy.loopback_ports.clear();
        }
    }
    policy.network_mode = mode;
    policy.network_mode_origin = Origin::Flag;
    imply_isolation(policy);
}

/// `--network` and `--allow-domain` over an omitted policy: they replace its network, by the
/// rules a declared policy's `networkMode` and `allowedDomains` follow.
fn form_network(policy: &mut EffectivePolicy, spec: &SandboxSpec) {
    let mode = match (spec.network_mode, &spec.allowed_domains) {
        (Some(mode), _) => Some((mode, Origin::Flag)),
        // `*` or named domains without a mode: outbound traffic (filtered unless `*`).
        (None, Some(list)) if !list.is_empty() => {
            Some((NetworkMode::AllowOutbound, Origin::Implied))
        }
        (None, _) => None,
    };
    if let Some(list) = &spec.allowed_domains {
        policy.allowed_domains = Some(list.clone());
        policy.allowed_domains_origin = Some(Origin::Flag);
    }
    let Some((mode, origin)) = mode else { return };
    policy.network_mode = mode;
    policy.network_mode_origin = origin;
    if mode == NetworkMode::AllowOutbound {
        // The omitted policy required isolation for its own mode, `none`; the flag replaced it.
        policy.requirements.retain(|r| {
            !(r.capability == Capability::NetworkIsolation && r.origin == Origin::Default)
        });
    }
    imply_isolation(policy);
}

/// A mode other than `allow-outbound` needs the network isolated.
fn imply_isolation(policy: &mut EffectivePolicy) {
    if policy.network_mode != NetworkMode::AllowOutbound {
        let reason = format!("implied by networkMode `{}`", policy.network_mode.as_str());
        add_requirement(
            policy,
            Capability::NetworkIsolation,
            Origin::Implied,
            &reason,
        );
    }
}

/// `--allow-host-port` over a declared policy: only ports its `loopbackPorts` lists, and then
/// exactly those (the others are no longer reachable).
fn narrow_loopback_ports(policy: &mut EffectivePolicy, ports: &[u16]) -> Result<(), Errors> {
    let path = text::child_path(PATH, "loopbackPorts");
    let mut errors = Errors::default();
    for (index, port) in ports.iter().enumerate() {
        if !policy.loopback_ports.contains(port) {
            let listed: Vec<String> = policy.loopback_ports.iter().map(u16::to_string).collect();
            errors.push(
                text::index_path(&path, index),
                format!(
                    "port {port} is not among the policy's loopbackPorts ({}); --allow-host-port may only narrow a declared policy",
                    if listed.is_empty() {
                        String::from("it lists none")
                    } else {
                        listed.join(", ")
                    }
                ),
            );
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    policy.loopback_ports = ports.to_vec();
    policy.loopback_ports_origin = Some(Origin::Flag);
    Ok(())
}

/// `--allow-unix-socket` over a declared policy: only sockets the policy allows, and then
/// exactly those (the others are no longer reachable).
fn narrow_unix_sockets(policy: &mut EffectivePolicy, sockets: &[String]) -> Result<(), Errors> {
    let path = text::child_path(PATH, "allowedUnixSockets");
    let mut errors = Errors::default();
    for socket in sockets {
        if !policy.allowed_unix_sockets.contains(socket) {
            let allowed = if policy.allowed_unix_sockets.is_empty() {
                String::from("the policy allows none")
            } else {
                format!(
                    "the policy allows {}",
                    text::list_names(policy.allowed_unix_sockets.iter().map(String::as_str))
                )
            };
            errors.push(
                path.as_str(),
                format!(
                    "{} is not among the policy's allowedUnixSockets ({allowed}); --allow-unix-socket may only narrow a declared policy",
                    text::quote(socket)
                ),
            );
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    policy.allowed_unix_sockets = sockets.to_vec();
    policy.allowed_unix_sockets_origin = Some(Origin::Flag);
    Ok(())
}

/// `--backend` over a declared policy: a subset of its preferred backends, in the flag's order.
fn restrict_backends(
    policy: &mut EffectivePolicy,
    backends: &[crate::model::Backend],
    errors: &mut Errors,
) {
    let path = text::child_path(PATH, "preferredBackends");
    let before = errors.total();
    for (index, backend) in backends.iter().enumerate() {
        if !policy.preferred_backends.contains(backend) {
            errors.push(
                text::index_path(&path, index),
                format!(
                    "`{}` is not among the policy's preferredBackends ({}); --backend may only choose among them",
                    backend.as_str(),
                    text::list_names(policy.preferred_backends.iter().map(|b| b.as_str()))
                ),
            );
        }
    }
    if errors.total() == before {
        policy.preferred_backends = backends.to_vec();
        policy.preferred_backends_origin = Origin::Flag;
    }
}

/// `--require`: one more requirement, origin `flag` (a declared one stays `declared`; an
/// implied or default one becomes the flag's, which asked for it outright).
fn require(policy: &mut EffectivePolicy, capability: Capability) {
    match policy
        .requirements
        .iter_mut()
        .find(|r| r.capability == capability)
    {
        Some(existing) if existing.origin == Origin::Declared => {}
        Some(existing) => {
            existing.origin = Origin::Flag;
            existing.reason = String::from("asked for by policyFlags.requiredCapabilities");
        }
        None => add_requirement(
            policy,
            capability,
            Origin::Flag,
            "asked for by policyFlags.requiredCapabilities",
        ),
    }
}

/// `--deny-read`: more denied paths (resolved and checked already), origin `flag` unless the
/// policy declares the path itself; a built-in store the host exempted is denied again.
fn deny(policy: &mut EffectivePolicy, denied: &[String]) {
    if denied.is_empty() {
        return;
    }
    for path in denied {
        policy.dropped_denied_read_paths.retain(|d| &d.path != path);
        match policy
            .denied_read_paths
            .iter_mut()
            .find(|d| &d.path == path)
        {
            Some(existing) if existing.origin == DeniedOrigin::Declared => {}
            Some(existing) => existing.origin = DeniedOrigin::Flag,
            None => policy.denied_read_paths.push(DeniedPath {
                path: path.clone(),
                origin: DeniedOrigin::Flag,
            }),
        }
    }
    policy.denied_read_paths.sort_by(|a, b| a.path.cmp(&b.path));
    let reason = format!(
        "implied by {}",
        text::count(
            denied.len(),
            "policyFlags.deniedReadPaths entry",
            "policyFlags.deniedReadPaths entries"
        )
    );
    add_requirement(
        policy,
        Capability::FilesystemReadContainment,
        Origin::Implied,
        &reason,
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;
    use crate::model::{Backend, BackendProbe, DecisionInput};
    use serde_json::Value;

    fn input(document: Option<&str>, flags: PolicyFlags) -> DecisionInput {
        DecisionInput {
            document: document.map(str::to_owned),
            document_name: String::from("t.yaml"),
            probes: vec![BackendProbe {
                backend: Backend::LinuxBwrap,
                available: true,
                reason: "ok".into(),
                capabilities: Capability::ALL.to_vec(),
                network_modes: NetworkMode::ALL.to_vec(),
                network_bridge: true,
                version: String::new(),
                limitations: vec![],
                landlock_proc: None,
            }],
            policy_flags: Some(flags),
            ..crate::test_support::input(crate::model::HostFacts::linux_cli(
                "/home/u",
                "/home/u/ws",
            ))
        }
    }

    fn decide(document: Option<&str>, flags: PolicyFlags) -> Value {
        serde_json::from_str(&crate::decide(&input(document, flags)).canonical_json).unwrap()
    }

    const FILTERED: &str = "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: t}\nspec:\n  sandbox:\n    allowedDomains: [github.com]\n";

    #[test]
    fn a_stricter_mode_drops_the_allowlist() {
        let flags = PolicyFlags {
            network_mode: Some(NetworkMode::LoopbackOnly),
            ..PolicyFlags::default()
        };
        let out = decide(Some(FILTERED), flags);
        assert_eq!(out["plan"]["network"]["mode"], "loopback-only", "{out}");
        assert_eq!(out["policy"]["networkModeOrigin"], "flag");
        assert!(out["policy"].get("allowedDomains").is_none());
    }

    #[test]
    fn the_same_mode_keeps_the_allowlist() {
        let flags = PolicyFlags {
            network_mode: Some(NetworkMode::AllowOutbound),
            ..PolicyFlags::default()
        };
        let out = decide(Some(FILTERED), flags);
        assert_eq!(out["plan"]["network"]["mode"], "filtered", "{out}");
    }

    #[test]
    fn a_star_alone_opens_an_omitted_policy() {
        let flags = PolicyFlags {
            allowed_domains: vec!["*".into()],
            ..PolicyFlags::default()
        };
        let out = decide(None, flags);
        assert_eq!(out["plan"]["network"]["mode"], "allow-outbound", "{out}");
    }

    #[test]
    fn pass_env_names_a_pattern_covers_and_sorts_them() {
        let flags = PolicyFlags {
            pass_environment: vec!["TERM".into(), "LC_ALL".into()],
            ..PolicyFlags::default()
        };
        let out = decide(None, flags);
        assert_eq!(
            out["plan"]["environment"],
            serde_json::json!({"allowlist": ["LC_ALL", "TERM"], "explicitSecrets": [], "origin": "flag"}),
            "{out}"
        );
    }

    #[test]
    fn flags_change_nothing_when_none_is_given() {
        let without = crate::decide(&DecisionInput {
            policy_flags: None,
            ..input(None, PolicyFlags::default())
        });
        let empty = crate::decide(&input(None, PolicyFlags::default()));
        // The canonical input omits empty lists but keeps `policyFlags: {}`: only the digest
        // of the input differs, never the policy or the plan.
        let a: Value = serde_json::from_str(&without.canonical_json).unwrap();
        let b: Value = serde_json::from_str(&empty.canonical_json).unwrap();
        assert_eq!(a["policy"], b["policy"]);
        assert_eq!(a["plan"], b["plan"]);
    }
}
