//! The host configuration: one home for the facts the host decides about itself (session kind,
//! default backend order, the `direct-dedicated` opt-in, writable roots, the environment
//! allowlist, budget ceilings, whether `workspace` mode may be used).
//!
//! Two files, layered: the system file ([`SYSTEM_PATH`], the administrator's) and the per-user
//! file (`$XDG_CONFIG_HOME/palisade/host.yaml`, default `~/.config/palisade/host.yaml`), which
//! may only tighten what the system file sets. `--host-config FILE` takes the per-user file's
//! place (same rules) and never replaces the system file: whoever can pass a flag must not be
//! able to lift the administrator's limits with it.
//!
//! Key design decision — what "tighten" means is decided per field ([`tighten_errors`]), on one
//! uniform principle: a field the system file sets is a ceiling the per-user file may only
//! narrow; a field the system file leaves unset is the per-user file's to set. A per-user file
//! that loosens anything is refused as a whole (`HOST_CONFIG_INVALID`), never half-applied.
//!
//! Validated like a taskpack: bounded size, the engine's YAML reader (every duplicate key
//! reported, bounded nodes and depth), unknown keys rejected, every offending field path listed.
//! The files read, their SHA-256 and the effective values with their origin go into every audit
//! record ([`HostConfig::record`]).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use palisade_engine::environment::{self, Entry};
use palisade_engine::output::sha256_hex;
use palisade_engine::yaml::{self, Node};
use palisade_engine::{Backend, SessionKind};
use serde::Serialize;

/// The `apiVersion` a host configuration must carry.
pub const API_VERSION: &str = "palisade.dev/v1alpha1";
/// The `kind` a host configuration must carry.
pub const KIND: &str = "HostConfig";
/// The system-wide file.
pub const SYSTEM_PATH: &str = "/etc/palisade/host.yaml";
/// The largest file accepted, in bytes: a host configuration is a few hundred bytes.
pub const MAX_BYTES: u64 = 64 * 1024;
/// The most entries a path list (`writableRoots`, `taskTempDirs`) may hold.
pub const MAX_PATHS: usize = 64;

/// Each budget ceiling with its inclusive upper bound, as in a taskpack's `spec.budgets`.
const BUDGET_FIELDS: [(&str, u64); 4] = [
    ("timeoutSeconds", 7 * 24 * 3600),
    ("memoryMiB", 1024 * 1024),
    ("maxProcesses", 65_536),
    ("cpuSeconds", 7 * 24 * 3600),
];

const SPEC_FIELDS: [&str; 10] = [
    "sessionKind",
    "defaultBackendOrder",
    "allowDirectDedicated",
    "allowWorkspaceMode",
    "writableRoots",
    "taskTempDirs",
    "resultsDir",
    "dockerRuntimeProfiles",
    "environment",
    "budgets",
];

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

/// One problem at one field path (`spec.budgets.timeoutSeconds`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

/// Where a configuration file came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// Palisade's built-in default (no file set the field).
    Default,
    /// The system file.
    System,
    /// The per-user file.
    User,
    /// `--host-config FILE` (in the per-user file's place).
    Flag,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::System => "system",
            Source::User => "user",
            Source::Flag => "flag",
        }
    }
}

/// One file read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFile {
    pub source: Source,
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
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
    fn get(&self, field: &str) -> Option<u64> {
        match field {
            "timeoutSeconds" => self.timeout_seconds,
            "memoryMiB" => self.memory_mib,
            "maxProcesses" => self.max_processes,
            _ => self.cpu_seconds,
        }
    }

    fn slot(&mut self, field: &str) -> &mut Option<u64> {
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
    pub writable_roots: Option<Vec<String>>,
    pub task_temp_dirs: Option<Vec<String>>,
    pub results_dir: Option<String>,
    pub docker_runtime_profiles: Option<String>,
    pub environment: Option<Vec<String>>,
    pub budgets: Ceilings,
}

/// One effective value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Setting<T> {
    pub value: T,
    pub from: Source,
}

/// The effective host configuration, each value with its origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Effective {
    /// `null`: not configured (the command line decides; `cli` by default).
    pub session_kind: Setting<Option<SessionKind>>,
    pub default_backend_order: Setting<Vec<Backend>>,
    /// `null`: not configured (`--allow-direct-dedicated` opts in); `false` forbids the flag.
    pub allow_direct_dedicated: Setting<Option<bool>>,
    /// `null`: not configured (permitted on request); `false` forbids `workspace` mode.
    pub allow_workspace_mode: Setting<Option<bool>>,
    pub writable_roots: Setting<Vec<String>>,
    pub task_temp_dirs: Setting<Vec<String>>,
    pub results_dir: Setting<Option<String>>,
    pub docker_runtime_profiles: Setting<Option<String>>,
    pub environment: Setting<Vec<String>>,
    pub budgets: BudgetSettings,
}

/// The budget ceilings, each with its origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSettings {
    pub timeout_seconds: Setting<Option<u64>>,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Setting<Option<u64>>,
    pub max_processes: Setting<Option<u64>>,
    pub cpu_seconds: Setting<Option<u64>>,
}

/// The host configuration in force: the files read and the effective values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostConfig {
    /// Files read, system first.
    pub files: Vec<ConfigFile>,
    /// Locations looked at that held no file.
    pub absent: Vec<String>,
    pub effective: Effective,
}

impl HostConfig {
    /// The configuration when no file exists: every value Palisade's default.
    pub fn defaults() -> HostConfig {
        let effective = merge(&Spec::default(), None);
        HostConfig {
            files: Vec::new(),
            absent: Vec::new(),
            effective,
        }
    }

    /// The object recorded in audit records (`context.hostConfig`) and printed by `doctor`.
    pub fn record(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The human view `palisade doctor` prints: files, then every effective value and its origin.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let mut first = true;
        let mut line = |text: String| {
            out.push_str(if first { "config    " } else { "          " });
            out.push_str(&text);
            out.push('\n');
            first = false;
        };
        for file in &self.files {
            line(format!(
                "{:<7} {} sha256:{}",
                file.source.as_str(),
                file.path,
                file.sha256
            ));
        }
        for path in &self.absent {
            line(format!("-       {path} (not present)"));
        }
        let e = &self.effective;
        let opt = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
        let join = |items: &[String]| {
            if items.is_empty() {
                "-".to_owned()
            } else {
                items.join(", ")
            }
        };
        let rows: Vec<(&str, String, Source)> = vec![
            (
                "sessionKind",
                opt(e.session_kind.value.map(|k| k.as_str().to_owned())),
                e.session_kind.from,
            ),
            (
                "defaultBackendOrder",
                e.default_backend_order
                    .value
                    .iter()
                    .map(|b| b.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                e.default_backend_order.from,
            ),
            (
                "allowDirectDedicated",
                opt(e.allow_direct_dedicated.value.map(|b| b.to_string())),
                e.allow_direct_dedicated.from,
            ),
            (
                "allowWorkspaceMode",
                opt(e.allow_workspace_mode.value.map(|b| b.to_string())),
                e.allow_workspace_mode.from,
            ),
            (
                "writableRoots",
                join(&e.writable_roots.value),
                e.writable_roots.from,
            ),
            (
                "taskTempDirs",
                join(&e.task_temp_dirs.value),
                e.task_temp_dirs.from,
            ),
            (
                "resultsDir",
                opt(e.results_dir.value.clone()),
                e.results_dir.from,
            ),
            (
                "dockerRuntimeProfiles",
                opt(e.docker_runtime_profiles.value.clone()),
                e.docker_runtime_profiles.from,
            ),
            (
                "environment",
                join(&e.environment.value),
                e.environment.from,
            ),
        ];
        for (name, value, from) in rows {
            line(format!("{name:<22} {value} [{}]", from.as_str()));
        }
        for (name, setting) in [
            ("budgets.timeoutSeconds", &e.budgets.timeout_seconds),
            ("budgets.memoryMiB", &e.budgets.memory_mib),
            ("budgets.maxProcesses", &e.budgets.max_processes),
            ("budgets.cpuSeconds", &e.budgets.cpu_seconds),
        ] {
            line(format!(
                "{name:<22} {} [{}]",
                opt(setting.value.map(|v| v.to_string())),
                setting.from.as_str()
            ));
        }
        out
    }

    /// The budget ceilings in force.
    pub fn ceilings(&self) -> Ceilings {
        let b = &self.effective.budgets;
        Ceilings {
            timeout_seconds: b.timeout_seconds.value,
            memory_mib: b.memory_mib.value,
            max_processes: b.max_processes.value,
            cpu_seconds: b.cpu_seconds.value,
        }
    }

    /// The ceilings for the engine's host facts, in the contract's units: `None` when no file
    /// sets any, so decisions on unconfigured hosts keep the bytes they always had.
    pub fn budget_ceilings(&self) -> Option<palisade_engine::model::BudgetLimits> {
        let c = self.ceilings();
        (c != Ceilings::default()).then(|| palisade_engine::model::BudgetLimits {
            timeout_millis: c.timeout_seconds.map(|s| s.saturating_mul(1000)),
            memory_bytes: c.memory_mib.map(|m| m.saturating_mul(1024 * 1024)),
            max_processes: c.max_processes,
            cpu_seconds: c.cpu_seconds,
        })
    }

    /// The allowlist for the engine's host facts: `None` when no file set one, so decisions on
    /// unconfigured hosts keep the bytes they always had.
    pub fn environment_allowlist(&self) -> Option<Vec<String>> {
        (self.effective.environment.from != Source::Default)
            .then(|| self.effective.environment.value.clone())
    }

    /// The configured writable roots, in order (`writableRoots`, `taskTempDirs`, `resultsDir`),
    /// each with its field path and the source that set it.
    pub fn writable_roots(&self) -> Vec<(PathBuf, String, Source)> {
        let e = &self.effective;
        let mut roots = Vec::new();
        for (field, setting) in [
            ("spec.writableRoots", &e.writable_roots),
            ("spec.taskTempDirs", &e.task_temp_dirs),
        ] {
            for (index, root) in setting.value.iter().enumerate() {
                roots.push((
                    PathBuf::from(root),
                    format!("{field}[{index}]"),
                    setting.from,
                ));
            }
        }
        if let Some(root) = &e.results_dir.value {
            roots.push((
                PathBuf::from(root),
                "spec.resultsDir".to_owned(),
                e.results_dir.from,
            ));
        }
        roots
    }

    /// Every configured writable root must be an existing directory (Palisade creates none:
    /// a typo must not become a fresh writable directory). The error names the file that set
    /// the first missing one and lists them all.
    pub fn check_directories(&self) -> Result<(), HostConfigError> {
        let mut errors = Vec::new();
        let mut origin = None;
        for (path, field, source) in self.writable_roots() {
            let problem = match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => continue,
                Ok(_) => "not a directory".to_owned(),
                Err(e) => e.to_string(),
            };
            origin.get_or_insert(source);
            errors.push(FieldError {
                path: field,
                message: format!(
                    "{} is not usable: {problem}",
                    quote(&path.display().to_string())
                ),
            });
        }
        let Some(source) = origin else {
            return Ok(());
        };
        let path = self
            .files
            .iter()
            .find(|f| f.source == source)
            .map(|f| f.path.clone())
            .unwrap_or_default();
        Err(HostConfigError::Invalid {
            path,
            summary: summary(&errors),
            errors,
        })
    }
}

/// Where the files are looked for.
#[derive(Clone, Debug, Default)]
pub struct Locations {
    /// The system file (`/etc/palisade/host.yaml`); `None` skips it (tests only).
    pub system: Option<PathBuf>,
    /// The per-user file, if a home is known.
    pub user: Option<PathBuf>,
    /// `--host-config FILE`: replaces `user`, and must exist.
    pub flag: Option<PathBuf>,
}

impl Locations {
    /// The real locations, with `--host-config` if given.
    pub fn standard(flag: Option<PathBuf>) -> Locations {
        Locations {
            system: Some(PathBuf::from(SYSTEM_PATH)),
            user: user_path(),
            flag,
        }
    }
}

/// `$XDG_CONFIG_HOME/palisade/host.yaml`, else `$HOME/.config/palisade/host.yaml` (absolute
/// values only, as the XDG spec says), else none.
pub fn user_path() -> Option<PathBuf> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base =
        absolute("XDG_CONFIG_HOME").or_else(|| absolute("HOME").map(|h| h.join(".config")))?;
    Some(base.join("palisade").join("host.yaml"))
}

/// Reads, validates and layers the files at `locations`.
pub fn load(locations: &Locations) -> Result<HostConfig, HostConfigError> {
    let mut files = Vec::new();
    let mut absent = Vec::new();
    let mut system = None;
    if let Some(path) = &locations.system {
        match read_file(path, Source::System)? {
            Some((file, text)) => {
                system = Some(parse(&text, &file.path)?);
                files.push(file);
            }
            None => absent.push(path.display().to_string()),
        }
    }
    let mut upper = None;
    let (user_path, user_source) = match &locations.flag {
        Some(path) => (Some(path), Source::Flag),
        None => (locations.user.as_ref(), Source::User),
    };
    if let Some(path) = user_path {
        match read_file(path, user_source)? {
            Some((file, text)) => {
                let spec = parse(&text, &file.path)?;
                if let Some(system) = &system {
                    let errors = tighten_errors(system, &spec);
                    if !errors.is_empty() {
                        return Err(HostConfigError::Loosens {
                            path: file.path.clone(),
                            summary: summary(&errors),
                            errors,
                        });
                    }
                }
                upper = Some((spec, user_source));
                files.push(file);
            }
            None => absent.push(path.display().to_string()),
        }
    }
    let system = system.unwrap_or_default();
    let effective = merge(
        &system,
        upper.as_ref().map(|(spec, source)| (spec, *source)),
    );
    Ok(HostConfig {
        files,
        absent,
        effective,
    })
}

/// Opens one file: `None` when an optional location holds nothing. The opened file's metadata
/// (not the path's, which could change in between) must show an owner this process may trust
/// (root; for the per-user file also this user) and no write permission for group or others.
fn read_file(path: &Path, source: Source) -> Result<Option<(ConfigFile, String)>, HostConfigError> {
    let shown = path.display().to_string();
    let read_error = |reason: String| HostConfigError::Read {
        path: shown.clone(),
        reason,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && source != Source::Flag => {
            return Ok(None);
        }
        Err(e) => return Err(read_error(e.to_string())),
    };
    let meta = file.metadata().map_err(|e| read_error(e.to_string()))?;
    if !meta.is_file() {
        return Err(read_error("not a regular file".into()));
    }
    let uid = crate::facts::current_uid();
    let trusted_owner = meta.uid() == 0 || (source != Source::System && meta.uid() == uid);
    if !trusted_owner {
        return Err(HostConfigError::Unsafe {
            path: shown,
            reason: format!(
                "owned by uid {}; expected {}",
                meta.uid(),
                if source == Source::System {
                    "root".to_owned()
                } else {
                    format!("root or uid {uid}")
                }
            ),
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(HostConfigError::Unsafe {
            path: shown,
            reason: format!(
                "mode {:04o} lets others change it; `chmod go-w` it",
                meta.mode() & 0o7777
            ),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| read_error(e.to_string()))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_BYTES {
        return Err(HostConfigError::TooLarge { path: shown });
    }
    let digest = sha256_hex(&bytes);
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    let text = String::from_utf8(bytes).map_err(|e| HostConfigError::Invalid {
        path: shown.clone(),
        summary: format!("not valid utf-8 (byte {})", e.utf8_error().valid_up_to()),
        errors: Vec::new(),
    })?;
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    Ok(Some((
        ConfigFile {
            source,
            path: canonical.display().to_string(),
            sha256: digest,
            bytes: size,
        },
        text,
    )))
}

// ---------------------------------------------------------------------------------------------
// Parsing and validation

/// Parses and validates one file's text. `shown` names the file in the error.
pub fn parse(text: &str, shown: &str) -> Result<Spec, HostConfigError> {
    let invalid = |errors: Vec<FieldError>| HostConfigError::Invalid {
        path: shown.to_owned(),
        summary: summary(&errors),
        errors,
    };
    let node = yaml::parse(text).map_err(|message| {
        invalid(vec![FieldError {
            path: "document".into(),
            message,
        }])
    })?;
    let mut errors = Errors::default();
    let spec = walk_document(&node, &mut errors);
    if errors.0.is_empty() {
        Ok(spec)
    } else {
        Err(invalid(errors.0))
    }
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        // Bounded like the engine's reports: a huge list of bad entries is counted, not listed.
        if self.0.len() < 100 {
            self.0.push(FieldError {
                path: path.into(),
                message: message.into(),
            });
        }
    }
}

fn summary(errors: &[FieldError]) -> String {
    let count = if errors.len() == 1 {
        "1 problem".to_owned()
    } else {
        format!("{} problems", errors.len())
    };
    match errors.first() {
        Some(first) => format!("{count}; first: {}: {}", first.path, first.message),
        None => count,
    }
}

/// A value in backticks, cut and on one line.
fn quote(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(80)
        .map(|ch| if ch.is_control() { ' ' } else { ch })
        .collect();
    if value.chars().count() > 80 {
        out.push('…');
    }
    format!("`{out}`")
}

/// The entries of a mapping with string keys, reporting other keys and each later repeat.
fn entries<'n>(node: &'n Node, path: &str, errors: &mut Errors) -> Vec<(&'n str, &'n Node)> {
    let Node::Mapping(items) = node else {
        errors.push(path, format!("expected a mapping, found {}", node.kind()));
        return Vec::new();
    };
    let mut out: Vec<(&str, &Node)> = Vec::new();
    for (key, value) in items {
        let Node::String(key) = key else {
            errors.push(path, format!("keys must be strings, found {}", key.kind()));
            continue;
        };
        if out.iter().any(|(seen, _)| *seen == key.as_str()) {
            errors.push(child(path, key), "duplicate key");
            continue;
        }
        out.push((key.as_str(), value));
    }
    out
}

fn child(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else if key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !key.is_empty()
    {
        format!("{parent}.{key}")
    } else {
        format!(
            "{parent}[{}]",
            serde_json::to_string(key).unwrap_or_default()
        )
    }
}

fn unknown(key: &str, known: &[&str]) -> String {
    let hint = known
        .iter()
        .find(|k| k.eq_ignore_ascii_case(key) || edit_distance(k, key) <= 2)
        .map(|k| format!("; did you mean `{k}`?"))
        .unwrap_or_default();
    format!(
        "unknown field {}{hint}; expected one of {}",
        quote(key),
        known
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().take(64).collect();
    let b: Vec<char> = b.to_lowercase().chars().take(64).collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous.get(j).copied().unwrap_or(usize::MAX);
            let delete = previous.get(j + 1).copied().unwrap_or(usize::MAX);
            let insert = current.get(j).copied().unwrap_or(usize::MAX);
            current.push(
                substitute
                    .saturating_add(usize::from(ca != cb))
                    .min(delete.saturating_add(1))
                    .min(insert.saturating_add(1)),
            );
        }
        previous = current;
    }
    previous.last().copied().unwrap_or(usize::MAX)
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
    let top = entries(node, "document", errors);
    if !matches!(node, Node::Mapping(_)) {
        return spec;
    }
    let mut seen_api = false;
    let mut seen_kind = false;
    for (key, value) in top {
        match key {
            "apiVersion" => {
                seen_api = true;
                expect_exact(value, "apiVersion", API_VERSION, errors);
            }
            "kind" => {
                seen_kind = true;
                expect_exact(value, "kind", KIND, errors);
            }
            "metadata" => walk_metadata(value, errors),
            "spec" => walk_spec(value, &mut spec, errors),
            other => errors.push(
                child("", other),
                unknown(other, &["apiVersion", "kind", "metadata", "spec"]),
            ),
        }
    }
    if !seen_api {
        errors.push("apiVersion", format!("is required: `{API_VERSION}`"));
    }
    if !seen_kind {
        errors.push("kind", format!("is required: `{KIND}`"));
    }
    spec
}

fn expect_exact(node: &Node, path: &str, expected: &str, errors: &mut Errors) {
    match node {
        Node::String(value) if value == expected => {}
        Node::String(value) => errors.push(
            path,
            format!("must be `{expected}`, found {}", quote(value)),
        ),
        other => errors.push(
            path,
            format!("must be `{expected}`, found {}", other.kind()),
        ),
    }
}

fn walk_metadata(node: &Node, errors: &mut Errors) {
    for (key, value) in entries(node, "metadata", errors) {
        let path = child("metadata", key);
        match key {
            "name" => {
                if !matches!(value, Node::String(s) if !s.is_empty()) {
                    errors.push(
                        path,
                        format!("expected a non-empty string, found {}", value.kind()),
                    );
                }
            }
            other => errors.push(path, unknown(other, &["name"])),
        }
    }
}

fn walk_spec(node: &Node, spec: &mut Spec, errors: &mut Errors) {
    for (key, value) in entries(node, "spec", errors) {
        let path = child("spec", key);
        match key {
            "sessionKind" => {
                spec.session_kind = string(value, &path, errors).and_then(|s| {
                    let kind = match s {
                        "turnkey" => Some(SessionKind::Turnkey),
                        "cli" => Some(SessionKind::Cli),
                        "managed" => Some(SessionKind::Managed),
                        _ => None,
                    };
                    if kind.is_none() {
                        errors.push(
                            &path,
                            format!(
                                "unknown session kind {}; expected `turnkey`, `cli` or `managed`",
                                quote(s)
                            ),
                        );
                    }
                    kind
                });
            }
            "defaultBackendOrder" => {
                spec.default_backend_order = backend_order(value, &path, errors)
            }
            "allowDirectDedicated" => spec.allow_direct_dedicated = boolean(value, &path, errors),
            "allowWorkspaceMode" => spec.allow_workspace_mode = boolean(value, &path, errors),
            "writableRoots" => spec.writable_roots = path_list(value, &path, errors),
            "taskTempDirs" => spec.task_temp_dirs = path_list(value, &path, errors),
            "resultsDir" => spec.results_dir = path_value(value, &path, true, errors),
            "dockerRuntimeProfiles" => {
                spec.docker_runtime_profiles = path_value(value, &path, false, errors);
            }
            "environment" => spec.environment = environment_section(value, &path, errors),
            "budgets" => spec.budgets = budgets(value, &path, errors),
            other => errors.push(path, unknown(other, &SPEC_FIELDS)),
        }
    }
}

fn string<'n>(node: &'n Node, path: &str, errors: &mut Errors) -> Option<&'n str> {
    match node {
        Node::String(s) => Some(s),
        other => {
            errors.push(path, format!("expected a string, found {}", other.kind()));
            None
        }
    }
}

fn boolean(node: &Node, path: &str, errors: &mut Errors) -> Option<bool> {
    match node {
        Node::Bool(b) => Some(*b),
        other => {
            errors.push(
                path,
                format!("expected `true` or `false`, found {}", other.kind()),
            );
            None
        }
    }
}

fn list<'n>(node: &'n Node, path: &str, max: usize, errors: &mut Errors) -> Option<&'n [Node]> {
    match node {
        Node::Sequence(items) if items.len() > max => {
            errors.push(
                path,
                format!("has {} entries; expected at most {max}", items.len()),
            );
            None
        }
        Node::Sequence(items) => Some(items.as_slice()),
        other => {
            errors.push(path, format!("expected a list, found {}", other.kind()));
            None
        }
    }
}

fn backend_order(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<Backend>> {
    let items = list(node, path, Backend::ALL.len(), errors)?;
    if items.is_empty() {
        errors.push(
            path,
            format!("must name 1 to {} backends", Backend::ALL.len()),
        );
        return None;
    }
    let mut order = Vec::new();
    let mut ok = true;
    for (index, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{index}]");
        let Some(name) = string(item, &item_path, errors) else {
            ok = false;
            continue;
        };
        match Backend::from_name(name) {
            Some(backend) if order.contains(&backend) => {
                errors.push(item_path, format!("duplicate backend {}", quote(name)));
                ok = false;
            }
            Some(backend) => order.push(backend),
            None => {
                errors.push(
                    item_path,
                    format!(
                        "unknown backend {}; expected one of {}",
                        quote(name),
                        Backend::ALL
                            .iter()
                            .map(|b| format!("`{}`", b.as_str()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(order)
}

/// An absolute, normalised path: no `.`, `..` or empty components, no trailing `/`, no NUL.
pub fn check_path(path: &str) -> Result<(), String> {
    if path.contains('\0') {
        return Err("must not contain a nul byte".into());
    }
    if !path.starts_with('/') {
        return Err(format!("must be an absolute path, found {}", quote(path)));
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/')
        || path
            .split('/')
            .skip(1)
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(format!(
            "must be normalised (no `//`, `.`, `..` or trailing `/`): {}",
            quote(path)
        ));
    }
    Ok(())
}

fn path_value(node: &Node, path: &str, writable: bool, errors: &mut Errors) -> Option<String> {
    let value = string(node, path, errors)?;
    if let Err(message) = check_path(value) {
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
    let items = list(node, path, MAX_PATHS, errors)?;
    let mut out = Vec::new();
    let mut ok = true;
    for (index, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{index}]");
        match path_value(item, &item_path, true, errors) {
            Some(value) if out.contains(&value) => {
                errors.push(item_path, format!("duplicate path {}", quote(&value)));
                ok = false;
            }
            Some(value) => out.push(value),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn environment_section(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    let mut allow = None;
    let mut seen = false;
    for (key, value) in entries(node, path, errors) {
        let key_path = child(path, key);
        match key {
            "allow" => {
                seen = true;
                allow = allowlist(value, &key_path, errors);
            }
            other => errors.push(key_path, unknown(other, &["allow"])),
        }
    }
    if !seen && matches!(node, Node::Mapping(_)) {
        errors.push(
            child(path, "allow"),
            "is required: the list of variables to pass",
        );
    }
    allow
}

fn allowlist(node: &Node, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    let items = list(node, path, environment::MAX_ENTRIES, errors)?;
    let mut out: Vec<String> = Vec::new();
    let mut ok = true;
    for (index, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{index}]");
        let Some(entry) = string(item, &item_path, errors) else {
            ok = false;
            continue;
        };
        if let Err(message) = environment::parse_entry(entry) {
            errors.push(item_path, message);
            ok = false;
        } else if out.iter().any(|e| e == entry) {
            errors.push(item_path, format!("duplicate entry {}", quote(entry)));
            ok = false;
        } else {
            out.push(entry.to_owned());
        }
    }
    ok.then_some(out)
}

fn budgets(node: &Node, path: &str, errors: &mut Errors) -> Ceilings {
    let mut ceilings = Ceilings::default();
    let names: Vec<&str> = BUDGET_FIELDS.iter().map(|(n, _)| *n).collect();
    for (key, value) in entries(node, path, errors) {
        let key_path = child(path, key);
        let Some((field, max)) = BUDGET_FIELDS.iter().find(|(n, _)| *n == key) else {
            errors.push(key_path, unknown(key, &names));
            continue;
        };
        let parsed = match value {
            Node::Number(text) => text.parse::<u64>().ok().filter(|n| *n >= 1 && n <= max),
            _ => None,
        };
        match parsed {
            Some(number) => *ceilings.slot(field) = Some(number),
            None => errors.push(
                key_path,
                format!(
                    "expected a whole number from 1 to {max}, found {}",
                    match value {
                        Node::Number(text) => quote(text),
                        other => other.kind().to_owned(),
                    }
                ),
            ),
        }
    }
    ceilings
}

// ---------------------------------------------------------------------------------------------
// Layering

/// Every way `user` loosens `system`, at the user file's field paths. The rules, per field, when
/// the system file sets it (a field the system file leaves unset is the user's to set):
///
/// - `sessionKind`: the same kind, or `turnkey` (the only kind that adds a constraint);
/// - `defaultBackendOrder`: a subsequence (drop backends, keep the system's order);
/// - `allowDirectDedicated`, `allowWorkspaceMode`: `true` only if the system says `true`;
/// - `writableRoots`, `taskTempDirs`: a subset of the system's list;
/// - `resultsDir`, `dockerRuntimeProfiles`: the same path;
/// - `environment.allow`: every entry covered by the system's list — an exact name the system
///   names exactly or passes by a pattern (a pattern never covers a secret-looking name), a
///   pattern inside one of the system's patterns;
/// - `budgets.*`: at most the system's ceiling.
pub fn tighten_errors(system: &Spec, user: &Spec) -> Vec<FieldError> {
    let mut errors = Errors::default();
    let loosens =
        |what: String| format!("{what}; a per-user file may only tighten the system configuration");
    if let (Some(sys), Some(usr)) = (system.session_kind, user.session_kind)
        && usr != sys
        && usr != SessionKind::Turnkey
    {
        errors.push(
            "spec.sessionKind",
            loosens(format!(
                "`{}` instead of the system's `{}` (only `turnkey` is tighter)",
                usr.as_str(),
                sys.as_str()
            )),
        );
    }
    if let (Some(sys), Some(usr)) = (&system.default_backend_order, &user.default_backend_order)
        && !is_subsequence(usr, sys)
    {
        errors.push(
            "spec.defaultBackendOrder",
            loosens(format!(
                "not a subsequence of the system's order [{}]",
                sys.iter()
                    .map(|b| b.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        );
    }
    for (field, sys, usr) in [
        (
            "spec.allowDirectDedicated",
            system.allow_direct_dedicated,
            user.allow_direct_dedicated,
        ),
        (
            "spec.allowWorkspaceMode",
            system.allow_workspace_mode,
            user.allow_workspace_mode,
        ),
    ] {
        if sys == Some(false) && usr == Some(true) {
            errors.push(
                field,
                loosens("`true` where the system says `false`".into()),
            );
        }
    }
    for (field, sys, usr) in [
        (
            "spec.writableRoots",
            &system.writable_roots,
            &user.writable_roots,
        ),
        (
            "spec.taskTempDirs",
            &system.task_temp_dirs,
            &user.task_temp_dirs,
        ),
    ] {
        if let (Some(sys), Some(usr)) = (sys, usr) {
            for (index, path) in usr.iter().enumerate() {
                if !sys.contains(path) {
                    errors.push(
                        format!("{field}[{index}]"),
                        loosens(format!("{} is not in the system's list", quote(path))),
                    );
                }
            }
        }
    }
    for (field, sys, usr) in [
        ("spec.resultsDir", &system.results_dir, &user.results_dir),
        (
            "spec.dockerRuntimeProfiles",
            &system.docker_runtime_profiles,
            &user.docker_runtime_profiles,
        ),
    ] {
        if let (Some(sys), Some(usr)) = (sys, usr)
            && sys != usr
        {
            errors.push(
                field,
                loosens(format!(
                    "{} instead of the system's {}",
                    quote(usr),
                    quote(sys)
                )),
            );
        }
    }
    if let (Some(sys), Some(usr)) = (&system.environment, &user.environment) {
        let sys_entries = environment::parse_all(sys.iter().map(String::as_str));
        for (index, entry) in usr.iter().enumerate() {
            if !entry_covered(entry, &sys_entries) {
                errors.push(
                    format!("spec.environment.allow[{index}]"),
                    loosens(format!(
                        "{} is not covered by the system's allowlist",
                        quote(entry)
                    )),
                );
            }
        }
    }
    for (field, _) in BUDGET_FIELDS {
        if let (Some(sys), Some(usr)) = (system.budgets.get(field), user.budgets.get(field))
            && usr > sys
        {
            errors.push(
                format!("spec.budgets.{field}"),
                loosens(format!("{usr} is above the system's ceiling {sys}")),
            );
        }
    }
    errors.0
}

fn is_subsequence(sub: &[Backend], of: &[Backend]) -> bool {
    let mut rest = of.iter();
    sub.iter().all(|b| rest.any(|o| o == b))
}

/// Whether a user entry passes nothing the system's list would not pass.
fn entry_covered(entry: &str, system: &[Entry]) -> bool {
    match environment::parse_entry(entry) {
        Ok(Entry::Exact(name)) => environment::verdict(system, &name).passes(),
        Ok(Entry::Prefix(prefix)) => system
            .iter()
            .any(|s| matches!(s, Entry::Prefix(p) if prefix.starts_with(p.as_str()))),
        Err(_) => false,
    }
}

/// The effective configuration: the upper file's value where it sets one, else the system's,
/// else the default. (Tightening was checked before.)
pub fn merge(system: &Spec, upper: Option<(&Spec, Source)>) -> Effective {
    fn pick<T: Clone>(
        default: T,
        system: Option<&T>,
        upper: Option<(Option<&T>, Source)>,
    ) -> Setting<T> {
        if let Some((Some(value), source)) = upper {
            return Setting {
                value: value.clone(),
                from: source,
            };
        }
        match system {
            Some(value) => Setting {
                value: value.clone(),
                from: Source::System,
            },
            None => Setting {
                value: default,
                from: Source::Default,
            },
        }
    }
    fn pick_opt<T: Clone>(
        system: Option<T>,
        upper: Option<(Option<T>, Source)>,
    ) -> Setting<Option<T>> {
        if let Some((Some(value), source)) = upper {
            return Setting {
                value: Some(value),
                from: source,
            };
        }
        match system {
            Some(value) => Setting {
                value: Some(value),
                from: Source::System,
            },
            None => Setting {
                value: None,
                from: Source::Default,
            },
        }
    }
    let up = |f: fn(&Spec) -> Option<&Vec<String>>| upper.map(|(s, src)| (f(s), src));
    let budget = |field: &str| {
        pick_opt(
            system.budgets.get(field),
            upper.map(|(s, src)| (s.budgets.get(field), src)),
        )
    };
    Effective {
        session_kind: pick_opt(
            system.session_kind,
            upper.map(|(s, src)| (s.session_kind, src)),
        ),
        default_backend_order: pick(
            crate::facts::default_backend_order(),
            system.default_backend_order.as_ref(),
            upper.map(|(s, src)| (s.default_backend_order.as_ref(), src)),
        ),
        allow_direct_dedicated: pick_opt(
            system.allow_direct_dedicated,
            upper.map(|(s, src)| (s.allow_direct_dedicated, src)),
        ),
        allow_workspace_mode: pick_opt(
            system.allow_workspace_mode,
            upper.map(|(s, src)| (s.allow_workspace_mode, src)),
        ),
        writable_roots: pick(
            Vec::new(),
            system.writable_roots.as_ref(),
            up(|s| s.writable_roots.as_ref()),
        ),
        task_temp_dirs: pick(
            Vec::new(),
            system.task_temp_dirs.as_ref(),
            up(|s| s.task_temp_dirs.as_ref()),
        ),
        results_dir: pick_opt(
            system.results_dir.clone(),
            upper.map(|(s, src)| (s.results_dir.clone(), src)),
        ),
        docker_runtime_profiles: pick_opt(
            system.docker_runtime_profiles.clone(),
            upper.map(|(s, src)| (s.docker_runtime_profiles.clone(), src)),
        ),
        environment: pick(
            environment::DEFAULT_ALLOWLIST
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            system.environment.as_ref(),
            up(|s| s.environment.as_ref()),
        ),
        budgets: BudgetSettings {
            timeout_seconds: budget("timeoutSeconds"),
            memory_mib: budget("memoryMiB"),
            max_processes: budget("maxProcesses"),
            cpu_seconds: budget("cpuSeconds"),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// The command line against the configuration

/// The host flags of `doctor`, `decide` and `run`.
#[derive(Clone, Debug, Default)]
pub struct HostFlags {
    pub session_kind: Option<SessionKind>,
    pub allow_direct_dedicated: bool,
}

/// What the command line may not ask for under this configuration (`HOST_CONFIG_FORBIDDEN`).
#[derive(Debug, thiserror::Error)]
pub enum Forbidden {
    #[error(
        "`--allow-direct-dedicated` is forbidden by the host configuration (`{path}` sets allowDirectDedicated: false)"
    )]
    DirectDedicated { path: String },
    #[error(
        "`--session-kind {asked}` is forbidden: the host configuration (`{path}`) sets sessionKind `{configured}`; only that kind or `turnkey` may be asked for"
    )]
    SessionKind {
        asked: String,
        configured: String,
        path: String,
    },
}

/// The session kind and `direct-dedicated` opt-in the engine gets: the flags may only tighten
/// what the configuration sets (a `--session-kind` other than the configured one or `turnkey`,
/// and `--allow-direct-dedicated` where the configuration says `false`, are refused); where the
/// configuration is silent, the flags decide as they always have.
pub fn host_choices(
    config: &HostConfig,
    flags: &HostFlags,
) -> Result<(SessionKind, bool), Forbidden> {
    let e = &config.effective;
    let origin = |source: Source| {
        config
            .files
            .iter()
            .find(|f| f.source == source)
            .map(|f| f.path.clone())
            .unwrap_or_else(|| source.as_str().to_owned())
    };
    let session_kind = match (e.session_kind.value, flags.session_kind) {
        (Some(configured), Some(asked)) if asked != configured && asked != SessionKind::Turnkey => {
            return Err(Forbidden::SessionKind {
                asked: asked.as_str().to_owned(),
                configured: configured.as_str().to_owned(),
                path: origin(e.session_kind.from),
            });
        }
        (_, Some(asked)) => asked,
        (Some(configured), None) => configured,
        (None, None) => SessionKind::Cli,
    };
    let allow_direct_dedicated =
        match (e.allow_direct_dedicated.value, flags.allow_direct_dedicated) {
            (Some(false), true) => {
                return Err(Forbidden::DirectDedicated {
                    path: origin(e.allow_direct_dedicated.from),
                });
            }
            (configured, flag) => flag || configured == Some(true),
        };
    Ok((session_kind, allow_direct_dedicated))
}

/// The fact options for this configuration and these flags: the configuration's roots
/// (`writableRoots`, `taskTempDirs`, `resultsDir`) then the flags' own `--writable-root`s (the
/// invocation's, like `--workspace`), the session kind and opt-in from [`host_choices`], and
/// the backend order, allowlist and workspace permission as configured.
pub fn fact_options(
    config: &HostConfig,
    flags: &HostFlags,
    workspace: Option<PathBuf>,
    flag_roots: &[PathBuf],
) -> Result<crate::facts::FactOptions, Forbidden> {
    let (session_kind, allow_direct_dedicated) = host_choices(config, flags)?;
    let mut writable_roots: Vec<PathBuf> = config
        .writable_roots()
        .into_iter()
        .map(|(path, _, _)| path)
        .collect();
    writable_roots.extend(flag_roots.iter().cloned());
    Ok(crate::facts::FactOptions {
        workspace,
        writable_roots,
        session_kind: Some(session_kind),
        allow_direct_dedicated,
        default_backend_order: Some(config.effective.default_backend_order.value.clone()),
        environment_allowlist: config.environment_allowlist(),
        allow_workspace_mode: config.effective.allow_workspace_mode.value,
        budget_ceilings: config.budget_ceilings(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]
    use super::*;

    const HEAD: &str = "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\n";

    fn spec(body: &str) -> Spec {
        parse(&format!("{HEAD}spec:\n{body}"), "t.yaml").unwrap()
    }

    fn error_paths(text: &str) -> Vec<String> {
        match parse(text, "t.yaml") {
            Err(HostConfigError::Invalid { errors, .. }) => {
                errors.into_iter().map(|e| e.path).collect()
            }
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_full_file_parses() {
        let s = spec(
            "  sessionKind: managed\n  defaultBackendOrder: [linux-landlock, linux-bwrap]\n  allowDirectDedicated: true\n  allowWorkspaceMode: false\n  writableRoots: [/srv/cache]\n  taskTempDirs: [/var/tmp/tasks]\n  resultsDir: /srv/results\n  dockerRuntimeProfiles: /etc/palisade/profiles.yaml\n  environment:\n    allow: [LANG, LC_*, NPM_TOKEN]\n  budgets: {timeoutSeconds: 600, memoryMiB: 2048, maxProcesses: 128, cpuSeconds: 300}\n",
        );
        assert_eq!(s.session_kind, Some(SessionKind::Managed));
        assert_eq!(
            s.default_backend_order,
            Some(vec![Backend::LinuxLandlock, Backend::LinuxBwrap])
        );
        assert_eq!(s.allow_direct_dedicated, Some(true));
        assert_eq!(s.allow_workspace_mode, Some(false));
        assert_eq!(s.results_dir.as_deref(), Some("/srv/results"));
        assert_eq!(s.environment.unwrap(), ["LANG", "LC_*", "NPM_TOKEN"]);
        assert_eq!(s.budgets.memory_mib, Some(2048));
        // An empty spec (or none at all) is valid and sets nothing.
        assert_eq!(parse(HEAD, "t").unwrap(), Spec::default());
    }

    #[test]
    fn every_offending_field_is_listed() {
        let text = format!(
            "{HEAD}metadata: {{name: x, owner: y}}\nextra: 1\nspec:\n  sessionKind: laptop\n  defaultBackendOrder: [linux-bwrap, nope, linux-bwrap]\n  allowDirectDedicated: 'yes'\n  writableRoots: [relative, /a/../b, /, /ok, /ok]\n  resultsDir: /r/\n  dockerRuntimeProfiles: profiles.yaml\n  environment: {{allow: ['*', AWS_*, LANG, LANG, 'A-B'], set: {{}}}}\n  budgets: {{timeoutSeconds: 0, memoryMiB: big, tokens: 5}}\n  budget: {{}}\n  sessionKind: cli\n"
        );
        assert_eq!(
            error_paths(&text),
            [
                "metadata.owner",
                "extra",
                // The repeat is reported where it is found, before the values are checked.
                "spec.sessionKind",
                "spec.sessionKind",
                "spec.defaultBackendOrder[1]",
                "spec.defaultBackendOrder[2]",
                "spec.allowDirectDedicated",
                "spec.writableRoots[0]",
                "spec.writableRoots[1]",
                "spec.writableRoots[2]",
                "spec.writableRoots[4]",
                "spec.resultsDir",
                "spec.dockerRuntimeProfiles",
                "spec.environment.allow[0]",
                "spec.environment.allow[1]",
                "spec.environment.allow[3]",
                "spec.environment.allow[4]",
                "spec.environment.set",
                "spec.budgets.timeoutSeconds",
                "spec.budgets.memoryMiB",
                "spec.budgets.tokens",
                "spec.budget",
            ]
        );
    }

    #[test]
    fn document_shape_is_checked() {
        assert_eq!(error_paths(""), ["document"]);
        assert_eq!(error_paths("[1]\n"), ["document"]);
        assert_eq!(error_paths("spec: {}\n"), ["apiVersion", "kind"]);
        assert_eq!(
            error_paths("apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\n"),
            ["apiVersion", "kind"]
        );
        assert_eq!(error_paths(&format!("{HEAD}spec: [1]\n")), ["spec"]);
        assert_eq!(
            error_paths(&format!("{HEAD}spec: {{environment: {{}}}}\n")),
            ["spec.environment.allow"]
        );
        assert_eq!(error_paths("a: [\n"), ["document"]);
    }

    #[test]
    fn user_file_may_only_tighten() {
        let system = spec(
            "  sessionKind: cli\n  defaultBackendOrder: [linux-bwrap, linux-landlock, docker]\n  allowDirectDedicated: false\n  allowWorkspaceMode: false\n  writableRoots: [/a, /b]\n  taskTempDirs: [/t]\n  resultsDir: /r\n  dockerRuntimeProfiles: /p.yaml\n  environment: {allow: [LANG, LC_*, GITHUB_*, NPM_TOKEN]}\n  budgets: {timeoutSeconds: 600, memoryMiB: 1024}\n",
        );
        // Tighter in every field: accepted.
        let tighter = spec(
            "  sessionKind: turnkey\n  defaultBackendOrder: [linux-bwrap, docker]\n  allowDirectDedicated: false\n  allowWorkspaceMode: false\n  writableRoots: [/b]\n  taskTempDirs: []\n  resultsDir: /r\n  dockerRuntimeProfiles: /p.yaml\n  environment: {allow: [LC_ALL, GITHUB_SHA, GITHUB_R*, NPM_TOKEN]}\n  budgets: {timeoutSeconds: 60, memoryMiB: 1024, cpuSeconds: 5}\n",
        );
        assert_eq!(tighten_errors(&system, &tighter), []);
        // Looser in every field: each listed.
        let looser = spec(
            "  sessionKind: managed\n  defaultBackendOrder: [linux-landlock, linux-bwrap]\n  allowDirectDedicated: true\n  allowWorkspaceMode: true\n  writableRoots: [/b, /c]\n  taskTempDirs: [/u]\n  resultsDir: /elsewhere\n  dockerRuntimeProfiles: /q.yaml\n  environment: {allow: [LANG, TERM, GITHUB_TOKEN, X*, L*]}\n  budgets: {timeoutSeconds: 601, memoryMiB: 1024}\n",
        );
        let paths: Vec<String> = tighten_errors(&system, &looser)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.sessionKind",
                "spec.defaultBackendOrder",
                "spec.allowDirectDedicated",
                "spec.allowWorkspaceMode",
                "spec.writableRoots[1]",
                "spec.taskTempDirs[0]",
                "spec.resultsDir",
                "spec.dockerRuntimeProfiles",
                "spec.environment.allow[1]",
                "spec.environment.allow[2]",
                "spec.environment.allow[3]",
                "spec.environment.allow[4]",
                "spec.budgets.timeoutSeconds",
            ]
        );
        // Whatever the system leaves unset is the user's to set.
        assert_eq!(tighten_errors(&Spec::default(), &looser), []);
        // `true` over a system `true` is not loosening.
        let permissive = spec("  allowDirectDedicated: true\n");
        assert_eq!(
            tighten_errors(&permissive, &spec("  allowDirectDedicated: true\n")),
            []
        );
    }

    #[test]
    fn merge_takes_the_upper_value_and_records_origins() {
        let system = spec(
            "  sessionKind: managed\n  budgets: {timeoutSeconds: 600, memoryMiB: 100}\n  environment: {allow: [LANG]}\n",
        );
        let user = spec("  budgets: {timeoutSeconds: 60}\n");
        let e = merge(&system, Some((&user, Source::Flag)));
        assert_eq!(
            e.session_kind,
            Setting {
                value: Some(SessionKind::Managed),
                from: Source::System
            }
        );
        assert_eq!(
            e.budgets.timeout_seconds,
            Setting {
                value: Some(60),
                from: Source::Flag
            }
        );
        assert_eq!(
            e.budgets.memory_mib,
            Setting {
                value: Some(100),
                from: Source::System
            }
        );
        assert_eq!(
            e.budgets.cpu_seconds,
            Setting {
                value: None,
                from: Source::Default
            }
        );
        assert_eq!(e.environment.value, ["LANG"]);
        assert_eq!(e.default_backend_order.from, Source::Default);
        let defaults = HostConfig::defaults();
        assert_eq!(defaults.environment_allowlist(), None);
        assert_eq!(
            defaults.effective.environment.value.len(),
            environment::DEFAULT_ALLOWLIST.len()
        );
    }

    #[test]
    fn flags_may_only_tighten_the_configuration() {
        let mut config = HostConfig::defaults();
        let flags = |kind: Option<SessionKind>, dd: bool| HostFlags {
            session_kind: kind,
            allow_direct_dedicated: dd,
        };
        // Unconfigured: the flags decide.
        assert_eq!(
            host_choices(&config, &flags(None, false)).unwrap(),
            (SessionKind::Cli, false)
        );
        assert_eq!(
            host_choices(&config, &flags(Some(SessionKind::Managed), true)).unwrap(),
            (SessionKind::Managed, true)
        );
        // Configured.
        config.effective.session_kind = Setting {
            value: Some(SessionKind::Managed),
            from: Source::System,
        };
        config.effective.allow_direct_dedicated = Setting {
            value: Some(false),
            from: Source::System,
        };
        assert_eq!(
            host_choices(&config, &flags(None, false)).unwrap(),
            (SessionKind::Managed, false)
        );
        assert_eq!(
            host_choices(&config, &flags(Some(SessionKind::Turnkey), false))
                .unwrap()
                .0,
            SessionKind::Turnkey
        );
        assert!(matches!(
            host_choices(&config, &flags(Some(SessionKind::Cli), false)),
            Err(Forbidden::SessionKind { .. })
        ));
        assert!(matches!(
            host_choices(&config, &flags(None, true)),
            Err(Forbidden::DirectDedicated { .. })
        ));
        config.effective.allow_direct_dedicated = Setting {
            value: Some(true),
            from: Source::User,
        };
        assert!(host_choices(&config, &flags(None, false)).unwrap().1);
    }

    #[test]
    fn ceilings_reach_the_engine_in_its_units() {
        let text = "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec:\n  budgets: {timeoutSeconds: 60, memoryMiB: 1, cpuSeconds: 9}\n";
        let spec = parse(text, "host.yaml").unwrap();
        let config = HostConfig {
            files: Vec::new(),
            absent: Vec::new(),
            effective: merge(&spec, None),
        };
        assert_eq!(
            config.budget_ceilings(),
            Some(palisade_engine::model::BudgetLimits {
                timeout_millis: Some(60_000),
                memory_bytes: Some(1 << 20),
                max_processes: None,
                cpu_seconds: Some(9),
            })
        );
        // No ceilings: absent from the facts, so such decisions keep their bytes.
        assert_eq!(HostConfig::defaults().budget_ceilings(), None);
    }

    #[test]
    fn files_are_read_with_care() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("host.yaml");
        std::fs::write(&good, format!("{HEAD}spec: {{sessionKind: turnkey}}\n")).unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).unwrap();
        let missing = dir.path().join("missing.yaml");
        // A missing optional file is fine; a missing `--host-config` is not.
        let config = load(&Locations {
            system: Some(missing.clone()),
            user: Some(good.clone()),
            flag: None,
        })
        .unwrap();
        assert_eq!(config.files.len(), 1);
        assert_eq!(config.files[0].source, Source::User);
        assert_eq!(
            config.files[0].sha256,
            sha256_hex(&std::fs::read(&good).unwrap())
        );
        assert_eq!(config.absent, [missing.display().to_string()]);
        assert!(matches!(
            load(&Locations {
                system: None,
                user: None,
                flag: Some(missing.clone())
            }),
            Err(HostConfigError::Read { .. })
        ));
        // The flag replaces the per-user file.
        let other = dir.path().join("other.yaml");
        std::fs::write(&other, format!("{HEAD}spec: {{sessionKind: managed}}\n")).unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
        let config = load(&Locations {
            system: None,
            user: Some(good.clone()),
            flag: Some(other.clone()),
        })
        .unwrap();
        assert_eq!(
            config.effective.session_kind.value,
            Some(SessionKind::Managed)
        );
        assert_eq!(config.effective.session_kind.from, Source::Flag);
        // World-writable: refused.
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            load(&Locations {
                system: None,
                user: Some(good.clone()),
                flag: None
            }),
            Err(HostConfigError::Unsafe { .. })
        ));
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).unwrap();
        // Too large: refused before parsing.
        std::fs::write(&other, vec![b'#'; usize::try_from(MAX_BYTES).unwrap() + 1]).unwrap();
        assert!(matches!(
            load(&Locations {
                system: None,
                user: None,
                flag: Some(other.clone())
            }),
            Err(HostConfigError::TooLarge { .. })
        ));
        // A per-user file that loosens the system one is refused as a whole.
        let system = dir.path().join("system.yaml");
        std::fs::write(
            &system,
            format!("{HEAD}spec: {{allowWorkspaceMode: false}}\n"),
        )
        .unwrap();
        std::fs::write(
            &other,
            format!("{HEAD}spec: {{allowWorkspaceMode: true}}\n"),
        )
        .unwrap();
        let result = load(&Locations {
            system: Some(system.clone()),
            user: None,
            flag: Some(other.clone()),
        });
        match result {
            Err(HostConfigError::Loosens { errors, .. }) => {
                assert_eq!(errors[0].path, "spec.allowWorkspaceMode")
            }
            other => panic!("{other:?}"),
        }
    }
}
