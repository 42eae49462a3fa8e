//! The host configuration file (`kind: HostConfig`): its text to a [`Spec`], with the engine's
//! reader: every offending field reported at its path, unknown keys rejected with a "did you
//! mean" hint, size and nesting bounded before the YAML parser runs. Which files are read, who
//! may own them and how two files layer is the CLI's (`palisade::hostconfig`).

use palisade_engine::environment;
use palisade_engine::output::FieldError;
use palisade_engine::reader::{
    self, Errors, Node, bounded_integer, check_absolute_path, each_entry, expect_bool,
    expect_exact, expect_list, expect_mapping, expect_str, index_path, quote, unknown_field,
};
use palisade_engine::{Backend, SessionKind};
use serde::Serialize;

/// The `apiVersion` a host configuration must carry.
pub const API_VERSION: &str = "palisade.dev/v1alpha1";
/// The `kind` a host configuration must carry.
pub const KIND: &str = "HostConfig";
/// The largest file accepted, in bytes: a host configuration is a few hundred bytes.
pub const MAX_BYTES: u64 = 64 * 1024;
/// The most entries a path list (`writableRoots`, `taskTempDirs`) may hold.
pub const MAX_PATHS: usize = 64;

/// Each budget ceiling with its inclusive upper bound: a taskpack's `spec.budgets` fields.
pub const BUDGET_FIELDS: [(&str, u64); 4] = palisade_engine::budgets::FIELDS;

/// Why the host configuration cannot be used. Every variant is `HOST_CONFIG_INVALID`.
#[derive(Debug, thiserror::Error)]
pub enum HostConfigError {
    #[error("cannot read host configuration `{path}`: {reason}")]
    Read { path: String, reason: String },
    #[error("host configuration `{path}` is larger than {MAX_BYTES} bytes")]
    TooLarge { path: String },
    #[error("host configuration `{path}` is not safe to trust: {reason}")]
    Unsafe { path: String, reason: String },
    #[error("host configuration `{path}` is invalid: {summary}")]
    Invalid {
        path: String,
        summary: String,
        errors: Vec<FieldError>,
    },
    #[error("host configuration `{path}` loosens the system configuration: {summary}")]
    Loosens {
        path: String,
        summary: String,
        errors: Vec<FieldError>,
    },
}

impl HostConfigError {
    /// A file with these offending fields.
    pub fn invalid(path: String, errors: Errors) -> HostConfigError {
        HostConfigError::Invalid {
            path,
            summary: errors.summary(),
            errors: errors.into_listed(),
        }
    }

    /// The field errors, for detail lines.
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            HostConfigError::Invalid { errors, .. } | HostConfigError::Loosens { errors, .. } => {
                errors
            }
            _ => &[],
        }
    }
}

/// Budget ceilings: a run's budget is never above these.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ceilings {
    pub timeout_seconds: Option<u64>,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    pub max_processes: Option<u64>,
    pub cpu_seconds: Option<u64>,
}

impl Ceilings {
    /// The ceiling named as in `spec.budgets` (`timeoutSeconds`, …).
    pub fn get(&self, field: &str) -> Option<u64> {
        match field {
            "timeoutSeconds" => self.timeout_seconds,
            "memoryMiB" => self.memory_mib,
            "maxProcesses" => self.max_processes,
            _ => self.cpu_seconds,
        }
    }

    /// The slot of the ceiling named as in `spec.budgets`.
    pub fn slot(&mut self, field: &str) -> &mut Option<u64> {
        match field {
            "timeoutSeconds" => &mut self.timeout_seconds,
            "memoryMiB" => &mut self.memory_mib,
            "maxProcesses" => &mut self.max_processes,
            _ => &mut self.cpu_seconds,
        }
    }
}

/// What one file sets; `None` = the file leaves the field alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub session_kind: Option<SessionKind>,
    pub default_backend_order: Option<Vec<Backend>>,
    pub allow_direct_dedicated: Option<bool>,
    pub allow_workspace_mode: Option<bool>,
    pub allow_home_writable: Option<bool>,
    pub writable_roots: Option<Vec<String>>,
    pub task_temp_dirs: Option<Vec<String>>,
    pub results_dir: Option<String>,
    pub docker_runtime_profiles: Option<String>,
    pub environment: Option<Vec<String>>,
    pub denied_read_paths: Option<Vec<String>>,
    pub exempt_denied_read_paths: Option<Vec<String>>,
    pub exempt_protected_paths: Option<Vec<String>>,
    pub loopback_ports: Option<Vec<u16>>,
    pub allow_root_granting_sockets: Option<Vec<String>>,
    pub budgets: Ceilings,
}

/// The top-level keys.
const TOP_FIELDS: [&str; 4] = ["apiVersion", "kind", "metadata", "spec"];

/// The keys of `spec`.
const SPEC_FIELDS: [&str; 16] = [
    "sessionKind",
    "defaultBackendOrder",
    "allowDirectDedicated",
    "allowWorkspaceMode",
    "allowHomeWritable",
    "deniedReadPaths",
    "exemptDeniedReadPaths",
    "exemptProtectedPaths",
    "loopbackPorts",
    "allowRootGrantingSockets",
    "writableRoots",
    "taskTempDirs",
    "resultsDir",
    "dockerRuntimeProfiles",
    "environment",
    "budgets",
];

/// Parses and validates one file's text. `shown` names the file in the error.
pub fn parse(text: &str, shown: &str) -> Result<Spec, HostConfigError> {
    let mut errors = Errors::default();
    // The loader reads no more than this; the parser holds to it too, whoever calls it.
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > MAX_BYTES {
        errors.push("document", format!("is larger than {MAX_BYTES} bytes"));
        return Err(HostConfigError::invalid(shown.to_owned(), errors));
    }
    let spec = match reader::parse(text) {
        Ok(node) => walk_document(&node, &mut errors),
        Err(message) => {
            errors.push("document", message);
            Spec::default()
        }
    };
    if errors.is_empty() {
        Ok(spec)
    } else {
        Err(HostConfigError::invalid(shown.to_owned(), errors))
    }
}

fn walk_document(node: &Node, errors: &mut Errors) -> Spec {
    let mut spec = Spec::default();
    if matches!(node, Node::Empty) {
        errors.push(
            "document",
            "is empty; expected `apiVersion`, `kind` and `spec`",
        );
        return spec;
    }
    if !expect_mapping(node, "document", errors) {
        return spec;
    }
    let (mut seen_api, mut seen_kind) = (false, false);
    each_entry(node, "", errors, |key, path, value, errors| match key {
        "apiVersion" => {
            seen_api = true;
            expect_exact(value, &path, API_VERSION, errors);
        }
        "kind" => {
            seen_kind = true;
            expect_exact(value, &path, KIND, errors);
        }
        "metadata" => walk_metadata(value, &path, errors),
        "spec" => walk_spec(value, &path, &mut spec, errors),
        other => errors.push(path, unknown_field(other, &TOP_FIELDS)),
    });
    if !seen_api {
        errors.push("apiVersion", format!("is required: `{API_VERSION}`"));
    }
    if !seen_kind {
        errors.push("kind", format!("is required: `{KIND}`"));
    }
    spec
}

fn walk_metadata(node: &Node, path: &str, errors: &mut Errors) {
    if !expect_mapping(node, path, errors) {
        return;
    }
    each_entry(node, path, errors, |key, path, value, errors| match key {
        "name" => {
            if expect_str(value, &path, errors).is_some_and(str::is_empty) {
                errors.push(path, "must not be empty");
            }
        }
        other => errors.push(path, unknown_field(other, &["name"])),
    });
}

fn walk_spec(node: &Node, path: &str, spec: &mut Spec, errors: &mut Errors) {
    if !expect_mapping(node, path, errors) {
        return;
    }
    each_entry(node, path, errors, |key, path, value, errors| match key {
        "sessionKind" => spec.session_kind = session_kind(value, &path, errors),
        "defaultBackendOrder" => spec.default_backend_order = backend_order(value, &path, errors),
        "allowDirectDedicated" => spec.allow_direct_dedicated = expect_bool(value, &path, errors),
        "allowWorkspaceMode" => spec.allow_workspace_mode = expect_bool(value, &path, errors),
        "allowHomeWritable" => spec.allow_home_writable = expect_bool(value, &path, errors),
        "deniedReadPaths" => spec.denied_read_paths = denied_list(value, &path, errors),
        "exemptDeniedReadPaths" => {
            spec.exempt_denied_read_paths = exempt_list(value, &path, errors);
        }
        "exemptProtectedPaths" => {
            spec.exempt_protected_paths = exempt_protected_list(value, &path, errors);
        }
        "loopbackPorts" => spec.loopback_ports = port_list(value, &path, errors),
        "allowRootGrantingSockets" => {
            spec.allow_root_granting_sockets = socket_list(value, &path, errors);
        }
        "writableRoots" => spec.writable_roots = path_list(value, &path, errors),
        "taskTempDirs" => spec.task_temp_dirs = path_list(value, &path, errors),
        "resultsDir" => spec.results_dir = path_value(value, &path, true, errors),
        "dockerRuntimeProfiles" => {
            spec.docker_runtime_profiles = path_value(value, &path, false, errors);
        }
        "environment" => spec.environment = environment_section(value, &path, errors),
        "budgets" => spec.budgets = budgets(value, &path, errors),
        other => errors.push(path, unknown_field(other, &SPEC_FIELDS)),
    });
}

fn session_kind(node: &Node, path: &str, errors: &mut Errors) -> Option<SessionKind> {
    let name = expect_str(node, path, errors)?;
    let kind = match name {
        "turnkey" => Some(SessionKind::Turnkey),
        "cli" => Some(SessionKind::Cli),
        "managed" => Some(SessionKind::Managed),
        _ => None,
    };
    if kind.is_none() {
        errors.push(
            path,
            format!(
                "unknown session kind {}; expected `turnkey`, `cli` or `managed`{}",
                quote(name),
                reader::did_you_mean(name, ["turnkey", "cli", "managed"])
            ),
        );
    }
    kind
}

fn backend_order(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<Backend>> {
    let items = expect_list(node, path, Backend::ALL.len(), errors)?;
    if items.is_empty() {
        errors.push(
            path,
            format!("must name 1 to {} backends", Backend::ALL.len()),
        );
        return None;
    }
    let before = errors.total();
    let known = || Backend::ALL.iter().map(|b| b.as_str());
    let mut order = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let item_path = index_path(path, index);
        let Some(name) = expect_str(item, &item_path, errors) else {
            continue;
        };
        match Backend::from_name(name) {
            Some(backend) if order.contains(&backend) => {
                errors.push(item_path, format!("duplicate backend {}", quote(name)));
            }
            Some(backend) => order.push(backend),
            None => errors.push(
                item_path,
                format!(
                    "unknown backend {}; expected one of {}{}",
                    quote(name),
                    reader::list_names(known()),
                    reader::did_you_mean(name, known())
                ),
            ),
        }
    }
    (errors.total() == before).then_some(order)
}

/// An absolute, normalised path; a writable one may not be `/`.
fn path_value(node: &Node, path: &str, writable: bool, errors: &mut Errors) -> Option<String> {
    let value = expect_str(node, path, errors)?;
    if let Err(message) = check_absolute_path(value) {
        errors.push(path, message);
        return None;
    }
    if writable && value == "/" {
        errors.push(path, "`/` would make the whole filesystem writable");
        return None;
    }
    Some(value.to_owned())
}

fn path_list(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    let items = expect_list(node, path, MAX_PATHS, errors)?;
    let before = errors.total();
    let mut out = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let item_path = index_path(path, index);
        match path_value(item, &item_path, true, errors) {
            Some(value) if out.contains(&value) => {
                errors.push(item_path, format!("duplicate path {}", quote(&value)));
            }
            Some(value) => out.push(value),
            None => {}
        }
    }
    (errors.total() == before).then_some(out)
}

/// `deniedReadPaths`: entries as a taskpack writes them (absolute or `~/`), bounded, once each.
/// Where they resolve (`~/` against whose home) is the engine's business, with the facts.
fn denied_list(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    let items = expect_list(node, path, MAX_PATHS, errors)?;
    let before = errors.total();
    let mut out: Vec<String> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let item_path = index_path(path, index);
        let Some(entry) = expect_str(item, &item_path, errors) else {
            continue;
        };
        if let Err(message) = reader::check_denied_path(entry) {
            errors.push(item_path, message);
        } else if out.iter().any(|e| e == entry) {
            errors.push(item_path, format!("duplicate path {}", quote(entry)));
        } else {
            out.push(entry.to_owned());
        }
    }
    (errors.total() == before).then_some(out)
}

/// `loopbackPorts`: host loopback ports (1 to 65535), bounded, once each.
fn port_list(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<u16>> {
    let items = expect_list(node, path, MAX_PATHS, errors)?;
    let before = errors.total();
    let mut out: Vec<u16> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let item_path = index_path(path, index);
        match bounded_integer(item, u64::from(u16::MAX)) {
            Err(message) => errors.push(item_path, message),
            Ok(port) => {
                let port = u16::try_from(port).unwrap_or(u16::MAX);
                if out.contains(&port) {
                    errors.push(item_path, format!("duplicate port {port}"));
                } else {
                    out.push(port);
                }
            }
        }
    }
    (errors.total() == before).then_some(out)
}

/// `allowRootGrantingSockets`: host paths of sockets that grant root (absolute, normalised),
/// bounded, once each. Whether a path is such a socket is measured and judged per run.
fn socket_list(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    let items = expect_list(node, path, MAX_PATHS, errors)?;
    let before = errors.total();
    let mut out = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let item_path = index_path(path, index);
        match path_value(item, &item_path, false, errors) {
            Some(value) if out.contains(&value) => {
                errors.push(item_path, format!("duplicate path {}", quote(&value)));
            }
            Some(value) => out.push(value),
            None => {}
        }
    }
    (errors.total() == before).then_some(out)
}

/// `exemptProtectedPaths`: git's built-in protected-path rules, by name, once each.
fn exempt_protected_list(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    names_from(
        node,
        path,
        &palisade_engine::protected::EXEMPTABLE_RULES,
        ("an exemptable protected path", "rule"),
        errors,
    )
}

/// `exemptDeniedReadPaths`: built-in denied paths, as the built-in list spells them, once each.
fn exempt_list(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    names_from(
        node,
        path,
        &palisade_engine::resolve::BUILT_IN_DENIED_READ_PATHS,
        ("a built-in denied path", "path"),
        errors,
    )
}

/// A list of names, each one of `known` (with a did-you-mean), each once; `what` names a
/// known entry and a repeated one in messages.
fn names_from(
    node: &Node,
    path: &str,
    known: &[&str],
    (what, repeated): (&str, &str),
    errors: &mut Errors,
) -> Option<Vec<String>> {
    let items = expect_list(node, path, known.len(), errors)?;
    let before = errors.total();
    let mut out: Vec<String> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let item_path = index_path(path, index);
        let Some(entry) = expect_str(item, &item_path, errors) else {
            continue;
        };
        if !known.contains(&entry) {
            errors.push(
                item_path,
                format!(
                    "{} is not {what}; expected one of {}{}",
                    quote(entry),
                    reader::list_names(known.iter().copied()),
                    reader::did_you_mean(entry, known.iter().copied())
                ),
            );
        } else if out.iter().any(|e| e == entry) {
            errors.push(item_path, format!("duplicate {repeated} {}", quote(entry)));
        } else {
            out.push(entry.to_owned());
        }
    }
    (errors.total() == before).then_some(out)
}

fn environment_section(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    if !expect_mapping(node, path, errors) {
        return None;
    }
    let mut allow = None;
    let mut seen = false;
    each_entry(
        node,
        path,
        errors,
        |key, key_path, value, errors| match key {
            "allow" => {
                seen = true;
                allow = allowlist(value, &key_path, errors);
            }
            other => errors.push(key_path, unknown_field(other, &["allow"])),
        },
    );
    if !seen {
        errors.push(
            reader::child_path(path, "allow"),
            "is required: the list of variables to pass",
        );
    }
    allow
}

fn allowlist(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    let items = expect_list(node, path, environment::MAX_ENTRIES, errors)?;
    let before = errors.total();
    let mut out: Vec<String> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let item_path = index_path(path, index);
        let Some(entry) = expect_str(item, &item_path, errors) else {
            continue;
        };
        if let Err(message) = environment::parse_entry(entry) {
            errors.push(item_path, message);
        } else if out.iter().any(|e| e == entry) {
            errors.push(item_path, format!("duplicate entry {}", quote(entry)));
        } else {
            out.push(entry.to_owned());
        }
    }
    (errors.total() == before).then_some(out)
}

/// `spec.budgets`: the ceilings, bounded like a taskpack's `spec.budgets`.
fn budgets(node: &Node, path: &str, errors: &mut Errors) -> Ceilings {
    let mut ceilings = Ceilings::default();
    if !expect_mapping(node, path, errors) {
        return ceilings;
    }
    let names: Vec<&str> = BUDGET_FIELDS.iter().map(|(n, _)| *n).collect();
    each_entry(node, path, errors, |key, key_path, value, errors| {
        let Some((field, max)) = BUDGET_FIELDS.iter().find(|(n, _)| *n == key) else {
            errors.push(key_path, unknown_field(key, &names));
            return;
        };
        match bounded_integer(value, *max) {
            Ok(number) => *ceilings.slot(field) = Some(number),
            Err(message) => errors.push(key_path, message),
        }
    });
    ceilings
}
