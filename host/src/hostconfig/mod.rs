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
//! Validated like a taskpack, with the engine's reader ([`palisade_engine::reader`]): bounded
//! size, every duplicate key reported, bounded nodes and depth, unknown keys rejected, every
//! offending field path listed.
//!
//! The module's parts: [`load`] (where the files are and how they are opened), [`parse`] (one
//! file's text to a [`Spec`]), [`layering`] (what "tighten" means per field, and the effective
//! values), [`flags`] (the command line against the configuration).
//! The files read, their SHA-256 and the effective values with their origin go into every audit
//! record ([`HostConfig::record`]).

mod flags;
mod layering;
mod load;

use std::path::PathBuf;

use palisade_engine::reader::{self, Errors};
use palisade_engine::{Backend, SessionKind};
use serde::Serialize;

pub use flags::{Forbidden, HostFlags, fact_options, host_choices};
pub use layering::{merge, tighten_errors};
pub use load::{Locations, load, user_path};
pub use palisade_engine::output::FieldError;
// The file's format (its text to a [`Spec`]) is `palisade_formats::hostconfig`, apart from the
// CLI so that tests and fuzz targets reach it without wasmtime.
pub use palisade_formats::hostconfig::{
    API_VERSION, BUDGET_FIELDS, Ceilings, HostConfigError, KIND, MAX_BYTES, MAX_PATHS, Spec, parse,
};

/// The system-wide file.
pub const SYSTEM_PATH: &str = "/etc/palisade/host.yaml";
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
    /// `null`: not configured (the home may not be a writable root); `true` allows the home
    /// directory itself (never `/` or an ancestor of the home).
    pub allow_home_writable: Setting<Option<bool>>,
    pub writable_roots: Setting<Vec<String>>,
    pub task_temp_dirs: Setting<Vec<String>>,
    pub results_dir: Setting<Option<String>>,
    pub docker_runtime_profiles: Setting<Option<String>>,
    pub environment: Setting<Vec<String>>,
    /// Denied read paths added to every policy's (absolute or `~/`).
    pub denied_read_paths: Setting<Vec<String>>,
    /// Built-in denied read paths (credential stores) exempted, each recorded in decisions.
    pub exempt_denied_read_paths: Setting<Vec<String>>,
    /// Git's built-in protected-path rules exempted (`.git/config`, ...), each recorded in
    /// decisions.
    pub exempt_protected_paths: Setting<Vec<String>>,
    /// `null`: not configured (a policy may list any host loopback port); else the ports a
    /// policy may make reachable under `loopback-only`.
    pub loopback_ports: Setting<Option<Vec<u16>>>,
    /// `null`: not configured (no socket that grants root may be allowed); else the host paths
    /// of such sockets (a container daemon's) a policy may still allow.
    pub allow_root_granting_sockets: Setting<Option<Vec<String>>>,
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
                "allowHomeWritable",
                opt(e.allow_home_writable.value.map(|b| b.to_string())),
                e.allow_home_writable.from,
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
            (
                "deniedReadPaths",
                join(&e.denied_read_paths.value),
                e.denied_read_paths.from,
            ),
            (
                "exemptDeniedReadPaths",
                join(&e.exempt_denied_read_paths.value),
                e.exempt_denied_read_paths.from,
            ),
            (
                "exemptProtectedPaths",
                join(&e.exempt_protected_paths.value),
                e.exempt_protected_paths.from,
            ),
            (
                "loopbackPorts",
                opt(e.loopback_ports.value.as_ref().map(|ports| {
                    ports
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                })),
                e.loopback_ports.from,
            ),
            (
                "allowRootGrantingSockets",
                opt(e
                    .allow_root_granting_sockets
                    .value
                    .as_ref()
                    .map(|paths| join(paths))),
                e.allow_root_granting_sockets.from,
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

    /// A list setting for the engine's host facts: `None` when no file set it, so decisions on
    /// unconfigured hosts keep their bytes.
    fn configured(setting: &Setting<Vec<String>>) -> Option<Vec<String>> {
        (setting.from != Source::Default).then(|| setting.value.clone())
    }

    /// The host loopback ports a policy may reach, for the engine's host facts.
    pub fn loopback_ports(&self) -> Option<Vec<u16>> {
        self.effective.loopback_ports.value.clone()
    }

    /// The sockets that grant root a policy may still allow, for the engine's host facts:
    /// `None` when no file sets the key (none may be allowed).
    pub fn allow_root_granting_sockets(&self) -> Option<Vec<String>> {
        self.effective.allow_root_granting_sockets.value.clone()
    }

    /// The denied read paths the configuration adds, for the engine's host facts.
    pub fn denied_read_paths(&self) -> Option<Vec<String>> {
        Self::configured(&self.effective.denied_read_paths)
    }

    /// Git's protected-path rules the configuration exempts, for the engine's host facts.
    pub fn exempt_protected_paths(&self) -> Option<Vec<String>> {
        Self::configured(&self.effective.exempt_protected_paths)
    }

    /// The built-in denied read paths the configuration exempts, for the engine's host facts.
    pub fn exempt_denied_read_paths(&self) -> Option<Vec<String>> {
        Self::configured(&self.effective.exempt_denied_read_paths)
    }

    /// The allowlist for the engine's host facts: `None` when no file set one, so decisions on
    /// unconfigured hosts keep the bytes they always had.
    pub fn environment_allowlist(&self) -> Option<Vec<String>> {
        Self::configured(&self.effective.environment)
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
        let mut errors = Errors::default();
        let mut origin = None;
        for (path, field, source) in self.writable_roots() {
            let problem = match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => continue,
                Ok(_) => "not a directory".to_owned(),
                Err(e) => e.to_string(),
            };
            origin.get_or_insert(source);
            errors.push(
                field,
                format!(
                    "{} is not usable: {problem}",
                    reader::quote(&path.display().to_string())
                ),
            );
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
        Err(HostConfigError::invalid(path, errors))
    }
}

#[cfg(test)]
mod tests;
