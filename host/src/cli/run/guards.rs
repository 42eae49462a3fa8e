//! What must lie out of the command's reach, checked before anything is decided: the audit file
//! and its checkpoint, the caches' directory; and the git directories a run's plan really kept
//! read-only (the scan for what it planted skips them).

use crate::report::{ErrorCode, Failure};

/// The audit file must not be where the command can write: it could rewrite the record of its
/// own run. Refused before anything is decided or written.
pub(super) fn audit_outside_writable_roots(
    audit: &std::path::Path,
    host: &palisade_engine::HostFacts,
    what: &str,
) -> Result<(), Failure> {
    // The file may not exist yet: resolve its directory (symlinks included) and add its name. A
    // symlink that leads nowhere yet would be followed by the first write: refused.
    let resolved = match std::fs::canonicalize(audit) {
        Ok(path) => path,
        Err(_) if std::fs::symlink_metadata(audit).is_ok() => {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                format!(
                    "{what} `{}` is a symlink to a path that does not exist",
                    audit.display()
                ),
            ));
        }
        Err(_) => {
            let parent = match audit.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                _ => std::path::PathBuf::from("."),
            };
            let parent = std::fs::canonicalize(&parent).map_err(|e| {
                Failure::new(
                    ErrorCode::InputInvalid,
                    format!("{what} `{}`: {e}", audit.display()),
                )
            })?;
            parent.join(audit.file_name().unwrap_or_default())
        }
    };
    if resolved.exists() && !resolved.is_file() {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            format!("{what} `{}` is not a regular file", audit.display()),
        ));
    }
    let roots = std::iter::once(&host.workspace_dir).chain(&host.writable_roots);
    for root in roots {
        if resolved.starts_with(root) {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                format!(
                    "{what} `{}` is inside writable root `{root}`: the command could rewrite the record of its own run",
                    resolved.display()
                ),
            )
            .hint("keep the audit file outside the workspace and every writable root, e.g. `--audit ~/.local/state/palisade/audit.jsonl`"));
        }
    }
    Ok(())
}

/// The caches hold compiled native code and the probes the decision trusts: where the command
/// can write, it could make the next run execute its code or choose weaker isolation. A cache
/// named by `PALISADE_CACHE_DIR` inside the workspace or a writable root is refused; the
/// default one there is not used for this run, and that is said.
pub(super) fn cache_outside_writable_roots(
    setup: &mut crate::cli::setup::HostSetup,
) -> Result<(), Failure> {
    let Some(cache) = &setup.cache else {
        return Ok(());
    };
    // The deepest part that exists, resolved, and the rest as named.
    let resolved = crate::facts::resolve_deepest(&cache.path);
    let workspace = match &setup.facts.workspace {
        Some(dir) => Some(dir.clone()),
        None => std::env::current_dir().ok(),
    };
    // `/` and the directories above the home are never writable roots (the engine refuses them
    // with their own code); every other root is checked.
    let home = crate::facts::home_dir().ok().map(std::path::PathBuf::from);
    let roots = workspace.iter().chain(&setup.facts.writable_roots);
    for root in roots {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
        let above_home = home
            .as_ref()
            .is_some_and(|home| home.starts_with(&root) && *home != root);
        if !resolved.starts_with(&root) || root.parent().is_none() || above_home {
            continue;
        }
        let problem = format!(
            "cache directory `{}` is inside writable root `{}`: the command could rewrite the compiled engine or the probes the next run trusts",
            resolved.display(),
            root.display()
        );
        if cache.explicit {
            return Err(Failure::new(ErrorCode::InputInvalid, problem)
                .hint("set PALISADE_CACHE_DIR outside the workspace and every writable root"));
        }
        say!("palisade: {problem}; this run uses no cache");
        setup.cache = None;
        return Ok(());
    }
    Ok(())
}

/// The git directories whose hooks and configuration the plan kept read-only: the scan after
/// the run leaves them out (nothing can have been planted there).
pub(super) fn enforced_git_dirs(
    plan: &palisade_engine::output::ConfinementPlan,
    host: &palisade_engine::HostFacts,
) -> Vec<String> {
    let assumed = [format!("{}/.git", host.workspace_dir.trim_end_matches('/'))];
    let dirs = host.git_dirs.as_deref().unwrap_or(&assumed);
    dirs.iter()
        .filter(|dir| {
            ["hooks", "config"].iter().all(|name| {
                let path = format!("{dir}/{name}");
                plan.protected_paths
                    .iter()
                    .any(|p| p.path == path && p.enforced)
            })
        })
        .cloned()
        .collect()
}
