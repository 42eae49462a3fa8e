//! The host side of every subcommand: the host configuration and flags, probe options, the
//! docker runtime profile and its checks right before a launch.

use std::path::{Path, PathBuf};
use std::time::Duration;

use palisade_engine::SessionKind;

use crate::docker;
use crate::facts::{self, FactOptions};
use crate::hostconfig::{self, HostConfig};
use crate::probe::ProbeOptions;
use crate::report::{ErrorCode, Failure};
use crate::runtime;

use super::args::HostArgs;

/// Where the per-user caches (compiled engine, probes) live, and who chose it.
#[derive(Clone, Debug)]
pub(super) struct CacheDir {
    pub(super) path: PathBuf,
    /// Named by `PALISADE_CACHE_DIR` rather than the platform default.
    pub(super) explicit: bool,
}

/// The per-user cache directory: `$PALISADE_CACHE_DIR`, else the platform default. An explicit
/// value must be absolute and, if it exists, a directory: a relative one would put compiled
/// native code wherever the command happens to start (often the workspace it may rewrite).
pub(super) fn cache_dir() -> Result<Option<CacheDir>, Failure> {
    let Some(value) = std::env::var_os("PALISADE_CACHE_DIR") else {
        return Ok(runtime::default_cache_dir().map(|path| CacheDir {
            path,
            explicit: false,
        }));
    };
    let path = PathBuf::from(&value);
    let problem = if value.is_empty() {
        Some("is empty")
    } else if !path.is_absolute() {
        Some("is not an absolute path")
    } else if path.exists() && !path.is_dir() {
        Some("is not a directory")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Failure::new(
            ErrorCode::InputInvalid,
            format!("PALISADE_CACHE_DIR `{}` {problem}", path.display()),
        )
        .hint("name an absolute directory outside every writable root, or unset it")),
        None => Ok(Some(CacheDir {
            path,
            explicit: true,
        })),
    }
}

/// [`cache_dir`]'s path alone, for the subcommands that launch nothing.
pub(super) fn cache_path() -> Result<Option<PathBuf>, Failure> {
    Ok(cache_dir()?.map(|cache| cache.path))
}

/// What a subcommand knows about its host before measuring anything: the host configuration in
/// force, the fact options it and the host flags give, and the runtime profile (read once).
pub(super) struct HostSetup {
    pub(super) config: HostConfig,
    pub(super) facts: FactOptions,
    pub(super) profile: Option<docker::RuntimeProfile>,
    /// The caches' directory; `None`: no caching (none could be found, or `run` found it
    /// inside a writable root).
    pub(super) cache: Option<CacheDir>,
}

pub(super) fn probe_options(
    host: &HostArgs,
    setup: &HostSetup,
    use_cache: bool,
) -> Result<ProbeOptions, Failure> {
    let profile = setup.profile.as_ref();
    // clap refuses `--docker-image` with `--runtime-profiles`; a file the host configuration
    // names is refused the same way rather than silently winning.
    if let (Some(image), Some(profile)) = (&host.docker_image, profile) {
        return Err(Failure::new(
            ErrorCode::HostConfigForbidden,
            format!(
                "--docker-image {image} conflicts with the host configuration's dockerRuntimeProfiles (profile `{}`, image `{}`)",
                profile.name, profile.image
            ),
        )
        .hint("drop --docker-image; the runtime profile names the image"));
    }
    Ok(ProbeOptions {
        docker_socket: host.docker_socket.clone(),
        docker_image: match profile {
            Some(profile) => Some(profile.image.clone()),
            None => host.docker_image.clone(),
        },
        docker_image_pin: profile.map(|profile| profile.pin.clone()),
        docker_egress_bridge: profile.and_then(|profile| profile.egress_bridge.clone()),
        timeout: Duration::from_secs(2),
        cache_dir: setup.cache.as_ref().map(|cache| cache.path.clone()),
        use_cache,
        ..ProbeOptions::default()
    })
}

/// The runtime profile file: the host configuration's `dockerRuntimeProfiles`, or
/// `--runtime-profiles` where the configuration names none. A flag naming another file than the
/// configuration's is refused: flags may only tighten the host configuration.
pub(super) fn runtime_profiles_file(
    host: &HostArgs,
    config: &HostConfig,
) -> Result<Option<PathBuf>, Failure> {
    let configured = config
        .effective
        .docker_runtime_profiles
        .value
        .as_ref()
        .map(PathBuf::from);
    match (&host.runtime_profiles, configured) {
        (Some(flag), Some(configured)) if *flag != configured => Err(Failure::new(
            ErrorCode::HostConfigForbidden,
            format!(
                "--runtime-profiles {} differs from the host configuration's dockerRuntimeProfiles {}",
                flag.display(),
                configured.display()
            ),
        )
        .hint("drop the flag or change the host configuration; `palisade doctor` shows it")),
        (Some(flag), _) => Ok(Some(flag.clone())),
        (None, configured) => Ok(configured),
    }
}

/// The runtime profile the host configuration or `--runtime-profiles`, and `--runtime-profile`,
/// choose, if any.
fn runtime_profile(
    host: &HostArgs,
    config: &HostConfig,
) -> Result<Option<docker::RuntimeProfile>, Failure> {
    let Some(path) = runtime_profiles_file(host, config)? else {
        if host.runtime_profile.is_some() {
            return Err(Failure::new(
                ErrorCode::DockerProfileInvalid,
                "--runtime-profile names a profile, but no runtime profile file is configured",
            )
            .hint("pass `--runtime-profiles FILE` or set dockerRuntimeProfiles in the host configuration"));
        }
        return Ok(None);
    };
    docker::load(&path, host.runtime_profile.as_deref())
        .map(Some)
        .map_err(|e| {
            let mut failure = Failure::new(e.code(), e.to_string());
            for field in e.field_errors() {
                failure = failure.detail(format!("{}: {}", field.path, field.message));
            }
            failure.hint("docs/docker.md describes the runtime profile file")
        })
}

/// The host configuration in force (system file, then the per-user file or `--host-config`),
/// the fact options it and the host flags give (the flags may only tighten it), and the runtime
/// profile, whose budgets are part of every decision's envelope.
pub(super) fn host_setup(host: &HostArgs) -> Result<HostSetup, Failure> {
    let (setup, profile_problem) = host_setup_deferring_profile(host)?;
    match profile_problem {
        Some(failure) => Err(failure),
        None => Ok(setup),
    }
}

/// [`host_setup`] for `doctor`: a runtime profile that cannot be used is not the end of the
/// report but the reason docker is unavailable, returned beside a setup without a profile.
pub(super) fn host_setup_deferring_profile(
    host: &HostArgs,
) -> Result<(HostSetup, Option<Failure>), Failure> {
    let config = hostconfig::load(&hostconfig::Locations::standard(host.host_config.clone()))
        .and_then(|config| config.check_directories().map(|()| config))
        .map_err(host_config_failure)?;
    let flags = hostconfig::HostFlags {
        session_kind: host.session_kind.as_deref().map(|kind| match kind {
            "turnkey" => SessionKind::Turnkey,
            "managed" => SessionKind::Managed,
            _ => SessionKind::Cli,
        }),
        allow_direct_dedicated: host.allow_direct_dedicated,
    };
    // Tool caches are writable roots like `--writable-root`s, under the invoking user's home.
    let mut flag_roots = host.writable_roots.clone();
    if !host.caches.is_empty() {
        let home =
            facts::home_dir().map_err(|e| Failure::new(ErrorCode::InputInvalid, e.to_string()))?;
        let dirs = crate::caches::directories(&host.caches, Path::new(&home))
            .map_err(|e| Failure::new(ErrorCode::InputInvalid, e.to_string()))?;
        flag_roots.extend(dirs);
    }
    let mut facts = hostconfig::fact_options(&config, &flags, host.workspace.clone(), &flag_roots)
        .map_err(|e| {
            Failure::new(ErrorCode::HostConfigForbidden, e.to_string())
                .hint("drop the flag or change the host configuration; `palisade doctor` shows it")
        })?;
    let (profile, profile_problem) = match runtime_profile(host, &config) {
        Ok(profile) => (profile, None),
        Err(failure) => (None, Some(failure)),
    };
    facts.runtime_profile_budgets = profile.as_ref().and_then(|p| p.budgets.clone());
    let cache = cache_dir()?;
    facts.state_paths = state_paths(host, &config, cache.as_ref());
    facts.key_paths = crate::keys::present_dirs();
    Ok((
        HostSetup {
            config,
            facts,
            profile,
            cache,
        },
        profile_problem,
    ))
}

/// Palisade's own state, which a later run trusts (the host fact `statePaths`): the system and
/// per-user host configuration directories, a `--host-config` file, the caches' directory and
/// the runtime profile file. The engine masks each that lies inside a writable root.
fn state_paths(host: &HostArgs, config: &HostConfig, cache: Option<&CacheDir>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    paths.extend(
        Path::new(hostconfig::SYSTEM_PATH)
            .parent()
            .map(Path::to_path_buf),
    );
    paths.extend(hostconfig::user_path().and_then(|user| user.parent().map(Path::to_path_buf)));
    paths.extend(host.host_config.clone());
    paths.extend(cache.map(|cache| cache.path.clone()));
    // A runtime profile file a flag names that the configuration forbids is refused elsewhere.
    paths.extend(runtime_profiles_file(host, config).ok().flatten());
    paths
}

pub(super) fn host_config_failure(error: hostconfig::HostConfigError) -> Failure {
    let mut failure = Failure::new(ErrorCode::HostConfigInvalid, error.to_string());
    for field in error.field_errors() {
        failure = failure.detail(format!("{}: {}", field.path, field.message));
    }
    failure.hint("fix the listed fields; docs/host-configuration.md describes the file")
}

pub(super) fn facts_failure(error: facts::FactsError) -> Failure {
    Failure::new(ErrorCode::InputInvalid, error.to_string())
        .hint("pass an existing directory with `--workspace DIR` / `--writable-root DIR`")
}
