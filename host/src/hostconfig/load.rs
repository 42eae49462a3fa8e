//! Where the host configuration files are, and how each is opened: only files an owner this
//! process may trust can change, bounded in size, then parsed and layered.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use palisade_engine::output::sha256_hex;

use super::{
    ConfigFile, HostConfig, HostConfigError, MAX_BYTES, SYSTEM_PATH, Source, merge, parse,
    tighten_errors,
};

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
                            summary: errors.summary(),
                            errors: errors.into_listed(),
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
