//! Measures the host facts the engine decides on: OS, session, opt-ins, home, workspace and
//! writable roots. The engine never looks at the environment itself; whatever is measured here is
//! passed in and recorded, so a decision can be replayed later on any machine.

use std::path::{Component, Path, PathBuf};

use palisade_engine::{Backend, HostFacts, SessionKind};

// The process's own ids and clocks (their system calls are `crate::sys`'s).
pub use crate::sys::{clock_ticks_per_second, current_uid, process_cpu_time};

/// What the command line says about the host.
#[derive(Clone, Debug, Default)]
pub struct FactOptions {
    pub workspace: Option<PathBuf>,
    pub writable_roots: Vec<PathBuf>,
    pub session_kind: Option<SessionKind>,
    pub allow_direct_dedicated: bool,
    /// From the host configuration; `None`: [`default_backend_order`].
    pub default_backend_order: Option<Vec<Backend>>,
    /// From the host configuration; `None`: the built-in default list (and absent from the
    /// engine input).
    pub environment_allowlist: Option<Vec<String>>,
    /// From the host configuration; `None`: not configured (permitted).
    pub allow_workspace_mode: Option<bool>,
    /// From the host configuration; `None`: no ceilings.
    pub budget_ceilings: Option<palisade_engine::model::BudgetLimits>,
    /// From the host configuration: denied read paths it adds; `None`: none.
    pub denied_read_paths: Option<Vec<String>>,
    /// From the host configuration: built-in denied paths it exempts; `None`: none.
    pub exempt_denied_read_paths: Option<Vec<String>>,
    /// From the host configuration: git's protected-path rules it exempts; `None`: none.
    pub exempt_protected_paths: Option<Vec<String>>,
    /// From the host configuration: whether the home may be a writable root; `None`: no.
    pub allow_home_writable: Option<bool>,
    /// The selected runtime profile's budgets; `None`: no profile, or no budgets in it.
    pub runtime_profile_budgets: Option<palisade_engine::model::BudgetLimits>,
    /// From the host configuration: the host loopback ports a policy may reach; `None`: any.
    pub loopback_ports: Option<Vec<u16>>,
    /// From the host configuration: sockets that grant root which a policy may still allow, by
    /// path; `None`: none.
    pub allow_root_granting_sockets: Option<Vec<String>>,
    /// Palisade's own state (host configuration, caches, runtime profile file), absolute,
    /// existing or not; measured into the host fact `statePaths`.
    pub state_paths: Vec<PathBuf>,
    /// The directories that hold Palisade's signing keys ([`crate::keys::present_dirs`]);
    /// measured into the host fact `keyPaths`.
    pub key_paths: Vec<PathBuf>,
}

/// Why host facts could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error("workspace `{path}` is not usable: {reason}")]
    Workspace { path: String, reason: String },
    #[error("writable root `{path}` is not usable: {reason}")]
    WritableRoot { path: String, reason: String },
    #[error("cannot determine the home directory: {0}")]
    Home(String),
    #[error("cannot determine the current directory: {0}")]
    CurrentDir(String),
}

/// The host's default backend order for policies that name none.
pub fn default_backend_order() -> Vec<Backend> {
    if cfg!(target_os = "macos") {
        vec![Backend::MacosSeatbelt, Backend::Docker]
    } else {
        vec![Backend::LinuxBwrap, Backend::LinuxLandlock, Backend::Docker]
    }
}

/// Whether `GITHUB_ACTIONS` counts as true: only when it is exactly `true`.
pub fn github_actions() -> bool {
    std::env::var_os("GITHUB_ACTIONS").is_some_and(|value| value == "true")
}

/// Measures the host facts.
pub fn gather(options: &FactOptions) -> Result<HostFacts, FactsError> {
    let workspace = match &options.workspace {
        Some(path) => path.clone(),
        None => std::env::current_dir().map_err(|e| FactsError::CurrentDir(e.to_string()))?,
    };
    let workspace_dir = real_directory(&workspace).map_err(|reason| FactsError::Workspace {
        path: workspace.display().to_string(),
        reason,
    })?;
    let mut writable_roots = Vec::new();
    for root in &options.writable_roots {
        let resolved = real_directory(root).map_err(|reason| FactsError::WritableRoot {
            path: root.display().to_string(),
            reason,
        })?;
        if !writable_roots.contains(&resolved) {
            writable_roots.push(resolved);
        }
    }
    let git_dirs = crate::gitdirs::measure(Path::new(&workspace_dir));
    let mut state_paths: Vec<String> = Vec::new();
    for path in &options.state_paths {
        if let Some(resolved) = resolve_missing(path)
            && !state_paths.contains(&resolved)
            && state_paths.len() < palisade_engine::protected::MAX_STATE_PATHS
        {
            state_paths.push(resolved);
        }
    }
    let mut key_paths: Vec<String> = Vec::new();
    for path in &options.key_paths {
        if let Some(resolved) = resolve_missing(path)
            && !key_paths.contains(&resolved)
            && key_paths.len() < palisade_engine::protected::MAX_STATE_PATHS
        {
            key_paths.push(resolved);
        }
    }
    Ok(HostFacts {
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        session_kind: options.session_kind.unwrap_or(SessionKind::Cli),
        github_actions: github_actions(),
        allow_direct_dedicated: options.allow_direct_dedicated,
        home_dir: home_dir()?,
        workspace_dir,
        writable_roots,
        default_backend_order: options
            .default_backend_order
            .clone()
            .unwrap_or_else(default_backend_order),
        environment_allowlist: options.environment_allowlist.clone(),
        allow_workspace_mode: options.allow_workspace_mode,
        budget_ceilings: options.budget_ceilings.clone(),
        denied_read_paths: options.denied_read_paths.clone(),
        exempt_denied_read_paths: options.exempt_denied_read_paths.clone(),
        allow_home_writable: options.allow_home_writable,
        runtime_profile_budgets: options.runtime_profile_budgets.clone(),
        loopback_ports: options.loopback_ports.clone(),
        allow_root_granting_sockets: options.allow_root_granting_sockets.clone(),
        // Measured once the policy is known (`crate::unix_sockets::measure_into`).
        unix_sockets: None,
        ssh_auth_sock: None,
        git_dirs: Some(git_dirs),
        state_paths: Some(state_paths),
        key_paths: Some(key_paths),
        exempt_protected_paths: options.exempt_protected_paths.clone(),
    })
}

/// The invoking user's home: `$HOME` when absolute, else the password database.
pub fn home_dir() -> Result<String, FactsError> {
    let from_env = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let home = match from_env {
        Some(home) => home,
        None => {
            passwd_home().ok_or_else(|| FactsError::Home("`HOME` is unset or relative".into()))?
        }
    };
    // Resolve symlinks when the home exists so that `~/` masks name real paths; a missing home
    // is still a valid fact (masks under it simply match nothing yet).
    let resolved = std::fs::canonicalize(&home).unwrap_or(home);
    normalized_string(&resolved).map_err(FactsError::Home)
}

fn passwd_home() -> Option<PathBuf> {
    let uid = current_uid();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        match fields.as_slice() {
            [_, _, id, _, _, home, ..] if id.parse::<u32>().ok() == Some(uid) => {
                Some(PathBuf::from(home))
            }
            _ => None,
        }
    })
}

/// An absolute path with its deepest existing part resolved (symlinks followed) and the rest as
/// named, normalised; `None` for a relative path or one that cannot be written as UTF-8.
pub fn resolve_missing(path: &Path) -> Option<String> {
    if !path.is_absolute() {
        return None;
    }
    normalized_string(&resolve_deepest(path)).ok()
}

/// `path` with its deepest existing part resolved (symlinks followed) and the rest as named.
pub fn resolve_deepest(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut resolved = std::fs::canonicalize(&existing).unwrap_or(existing);
    resolved.extend(rest.iter().rev());
    resolved
}

/// Canonicalizes an existing directory into the normalised absolute form the engine expects.
fn real_directory(path: &Path) -> Result<String, String> {
    let resolved = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    if !resolved.is_dir() {
        return Err("not a directory".into());
    }
    normalized_string(&resolved)
}

/// An absolute path as UTF-8 with `.` and empty components removed; `..` is refused.
pub fn normalized_string(path: &Path) -> Result<String, String> {
    let mut out = String::new();
    for component in path.components() {
        match component {
            Component::RootDir => {}
            Component::CurDir => {}
            Component::Normal(part) => {
                let part = part
                    .to_str()
                    .ok_or_else(|| format!("path `{}` is not valid utf-8", path.display()))?;
                out.push('/');
                out.push_str(part);
            }
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!("path `{}` is not normalised", path.display()));
            }
        }
    }
    if !path.is_absolute() {
        return Err(format!("path `{}` is not absolute", path.display()));
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_absolute_paths() {
        assert_eq!(
            normalized_string(Path::new("/a//b/./c/")),
            Ok("/a/b/c".into())
        );
        assert_eq!(normalized_string(Path::new("/")), Ok("/".into()));
        assert!(normalized_string(Path::new("a/b")).is_err());
        assert!(normalized_string(Path::new("/a/../b")).is_err());
    }
}
