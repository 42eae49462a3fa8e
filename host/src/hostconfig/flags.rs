//! The command line against the configuration: host flags may only tighten what it sets.

use std::path::PathBuf;

use palisade_engine::SessionKind;

use super::{HostConfig, Source};

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
        allow_home_writable: config.effective.allow_home_writable.value,
        denied_read_paths: config.denied_read_paths(),
        exempt_denied_read_paths: config.exempt_denied_read_paths(),
        exempt_protected_paths: config.exempt_protected_paths(),
        // The runtime profile's, when one is selected (the caller reads it).
        runtime_profile_budgets: None,
        loopback_ports: config.loopback_ports(),
        allow_root_granting_sockets: config.allow_root_granting_sockets(),
        // Measured by the caller, which knows the caches' directory (`cli::setup`).
        state_paths: Vec::new(),
        key_paths: Vec::new(),
        budget_ceilings: config.budget_ceilings(),
    })
}
