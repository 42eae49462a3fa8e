//! The Docker backend's host side: runtime profiles (which image a run may use, pinned), the
//! image check right before launching, and the launch itself through
//! [`palisade_shims::docker`].
//!
//! A runtime profile file is host-side configuration in the shape of Loopwright's
//! `TrustedRegistry` (`spec.runtimeProfiles[]`): each profile names an image reference and pins
//! it by image ID or registry digest. Palisade never pulls: an image that is absent, unpinned
//! or not what the pin says is refused, and the container runs from the image *ID* that was
//! checked, so a tag moved after the check changes nothing.
//!
//! ```yaml
//! apiVersion: loopwright.dev/v1alpha1
//! kind: TrustedRegistry
//! metadata:
//!   name: local
//! spec:
//!   runtimeProfiles:
//!     - name: build
//!       image: palisade-build:1
//!       imageId: sha256:0123…           # or `digest: sha256:…` (a registry digest)
//!       readOnlyPaths: [/opt/toolchain]  # host paths the container may read (optional)
//!   egressBridge: /usr/local/lib/palisade/palisade-bridge   # optional, see below
//! ```
//!
//! `spec.egressBridge` names a statically linked `palisade-bridge` (built as the README says).
//! With one, the docker backend offers filtered egress (`allowedDomains`): the bridge is mounted
//! read-only into the container and runs as its entrypoint, as `palisade __proxy-bridge` does
//! under bwrap. The probe checks that it is a static executable for this machine that only root
//! or the caller can change; without a usable one, docker offers no domain filtering.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use palisade_shims::docker as shim;
#[cfg(target_os = "linux")]
use palisade_shims::docker::{DockerSpec, Removal};
#[cfg(target_os = "linux")]
use palisade_shims::plan::LaunchPlan;
#[cfg(target_os = "linux")]
use palisade_shims::supervise;
use serde::Deserialize;

#[cfg(target_os = "linux")]
use crate::launch::{LaunchError, Launched};
use crate::probe::docker::{ImageFacts, InspectError, inspect_image};
use crate::report::ErrorCode;

/// The document's `apiVersion` and `kind`.
pub const API_VERSION: &str = "loopwright.dev/v1alpha1";
pub const KIND: &str = "TrustedRegistry";

/// One pinned runtime profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeProfile {
    pub name: String,
    /// The image reference, as `docker` names it (`name[:tag]`).
    pub image: String,
    /// `sha256:…`: an image ID or a registry digest.
    pub pin: String,
    /// Host paths visible read-only in the container.
    pub read_only_paths: Vec<PathBuf>,
    /// The file's `spec.egressBridge`: the static bridge for filtered egress.
    pub egress_bridge: Option<PathBuf>,
}

/// Why a runtime profile file cannot be used. The codes are printed by the CLI.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read runtime profiles `{}`: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("runtime profiles `{}` are invalid: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error(
        "runtime profile `{name}` does not pin its image: give `imageId` or `digest` (sha256:…)"
    )]
    Unpinned { name: String },
    #[error("no runtime profile `{name}` in `{}` (it has: {available})", path.display())]
    UnknownName {
        path: PathBuf,
        name: String,
        available: String,
    },
    #[error("`{}` holds {count} runtime profiles; choose one with `--runtime-profile NAME`", path.display())]
    Ambiguous { path: PathBuf, count: usize },
}

impl ProfileError {
    /// The machine-readable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProfileError::Unpinned { .. } => ErrorCode::DockerImageUnpinned,
            _ => ErrorCode::DockerProfileInvalid,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Document {
    api_version: String,
    kind: String,
    metadata: Metadata,
    spec: Spec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    name: String,
    #[serde(default)]
    #[allow(dead_code, reason = "accepted for the Loopwright shape; not used")]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    #[allow(dead_code, reason = "accepted for the Loopwright shape; not used")]
    annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Spec {
    runtime_profiles: Vec<ProfileDoc>,
    #[serde(default)]
    egress_bridge: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProfileDoc {
    name: String,
    image: String,
    #[serde(default)]
    image_id: Option<String>,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    read_only_paths: Vec<PathBuf>,
}

/// Reads `path` and picks profile `name` (or the only one).
pub fn load(path: &Path, name: Option<&str>) -> Result<RuntimeProfile, ProfileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let (profiles, egress_bridge) = parse(&text).map_err(|message| ProfileError::Invalid {
        path: path.to_path_buf(),
        message,
    })?;
    let chosen = match name {
        Some(name) => profiles
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| {
                let available = parse(&text)
                    .map(|(all, _)| {
                        all.into_iter()
                            .map(|p| p.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                ProfileError::UnknownName {
                    path: path.to_path_buf(),
                    name: name.to_owned(),
                    available,
                }
            })?,
        None if profiles.len() == 1 => {
            profiles.into_iter().next().ok_or(ProfileError::Ambiguous {
                path: path.to_path_buf(),
                count: 0,
            })?
        }
        None => {
            return Err(ProfileError::Ambiguous {
                path: path.to_path_buf(),
                count: profiles.len(),
            });
        }
    };
    match chosen.pin {
        Some(pin) => Ok(RuntimeProfile {
            name: chosen.name,
            image: chosen.image,
            pin,
            read_only_paths: chosen.read_only_paths,
            egress_bridge,
        }),
        None => Err(ProfileError::Unpinned { name: chosen.name }),
    }
}

/// A profile as read, before its pin is required.
struct Parsed {
    name: String,
    image: String,
    pin: Option<String>,
    read_only_paths: Vec<PathBuf>,
}

/// Parses and validates a whole file (its profiles and `spec.egressBridge`); every problem, each
/// with its field path, in one message.
fn parse(text: &str) -> Result<(Vec<Parsed>, Option<PathBuf>), String> {
    let doc: Document =
        serde_yaml::from_str(text).map_err(|e| crate::report::one_line(&e.to_string()))?;
    let mut problems = Vec::new();
    if doc.api_version != API_VERSION {
        problems.push(format!("apiVersion: must be `{API_VERSION}`"));
    }
    if doc.kind != KIND {
        problems.push(format!("kind: must be `{KIND}`"));
    }
    if doc.metadata.name.is_empty() {
        problems.push("metadata.name: must not be empty".to_owned());
    }
    if doc.spec.runtime_profiles.is_empty() {
        problems.push("spec.runtimeProfiles: must list at least one profile".to_owned());
    }
    if let Some(bridge) = &doc.spec.egress_bridge
        && (!bridge.is_absolute() || bridge.components().any(|c| c == Component::ParentDir))
    {
        problems.push(format!(
            "spec.egressBridge: `{}` must be absolute, without `..`",
            bridge.display()
        ));
    }
    let mut seen = Vec::new();
    let mut parsed = Vec::new();
    for (index, profile) in doc.spec.runtime_profiles.into_iter().enumerate() {
        let at = format!("spec.runtimeProfiles[{index}]");
        let name_ok = !profile.name.is_empty()
            && profile.name.len() <= 64
            && profile
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !name_ok {
            problems.push(format!("{at}.name: letters, digits, `-`, `_`, `.` (1..64)"));
        } else if seen.contains(&profile.name) {
            problems.push(format!("{at}.name: duplicate `{}`", profile.name));
        }
        seen.push(profile.name.clone());
        if !crate::probe::docker::valid_image_name(&profile.image) || profile.image.contains('@') {
            problems.push(format!(
                "{at}.image: `{}` is not an image reference (name[:tag]; pin with imageId or digest)",
                profile.image.escape_default()
            ));
        }
        let pin = match (profile.image_id, profile.digest) {
            (Some(_), Some(_)) => {
                problems.push(format!("{at}: give `imageId` or `digest`, not both"));
                None
            }
            (Some(id), None) | (None, Some(id)) if !shim::valid_image_id(&id) => {
                problems.push(format!(
                    "{at}: `{}` is not `sha256:` and 64 lowercase hex digits",
                    id.escape_default()
                ));
                None
            }
            (Some(id), None) | (None, Some(id)) => Some(id),
            (None, None) => None,
        };
        for (i, path) in profile.read_only_paths.iter().enumerate() {
            if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
                problems.push(format!(
                    "{at}.readOnlyPaths[{i}]: `{}` must be absolute, without `..`",
                    path.display()
                ));
            }
        }
        parsed.push(Parsed {
            name: profile.name,
            image: profile.image,
            pin,
            read_only_paths: profile.read_only_paths,
        });
    }
    if problems.is_empty() {
        Ok((parsed, doc.spec.egress_bridge))
    } else {
        Err(problems.join("; "))
    }
}

/// Why the image cannot be used right now.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image `{image}` is not present on the daemon; palisade never pulls")]
    Missing { image: String },
    #[error("image `{image}`: {detail}")]
    Mismatch { image: String, detail: String },
    #[error("cannot inspect image `{image}`: {detail}")]
    Inspect { image: String, detail: String },
}

impl ImageError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ImageError::Missing { .. } => ErrorCode::DockerImageMissing,
            ImageError::Mismatch { .. } => ErrorCode::DockerImageMismatch,
            ImageError::Inspect { .. } => ErrorCode::DockerDaemonUnavailable,
        }
    }
}

/// Inspects the profile's image now and returns the ID to run, if it is the pinned image.
pub fn verify_image(
    socket: &Path,
    profile: &RuntimeProfile,
    timeout: Duration,
) -> Result<String, ImageError> {
    let image = profile.image.clone();
    let facts: ImageFacts = match inspect_image(socket, &profile.image, Instant::now() + timeout) {
        Ok(Some(facts)) => facts,
        Ok(None) => return Err(ImageError::Missing { image }),
        Err(InspectError::Http(err)) => {
            return Err(ImageError::Inspect {
                image,
                detail: crate::probe::docker::describe_http(err, timeout),
            });
        }
        Err(other) => {
            return Err(ImageError::Inspect {
                image,
                detail: other.to_string(),
            });
        }
    };
    facts
        .matches(&profile.pin)
        .map_err(|detail| ImageError::Mismatch { image, detail })?;
    Ok(facts.id)
}

/// Runs the plan in a container (see [`palisade_shims::docker`]) and accounts for it (Linux:
/// the supervisor is Linux's).
#[cfg(target_os = "linux")]
pub fn execute(plan: &LaunchPlan, spec: &DockerSpec) -> Result<Launched, LaunchError> {
    let options = supervise::SuperviseOptions::default();
    let done = match shim::run(plan, spec, &options) {
        Ok(done) => done,
        Err(shim::DockerError::Supervise(supervise::SuperviseError::TreeNotEmpty {
            remaining,
            outcome,
        })) => {
            let record = serde_json::to_value(&*outcome).unwrap_or_default();
            return Err(LaunchError::TreeNotEmpty { remaining, record });
        }
        Err(shim::DockerError::Supervise(other)) => {
            return Err(LaunchError::Supervise(other.to_string()));
        }
        Err(other) => return Err(LaunchError::Prepare(other.to_string())),
    };
    let mut record =
        serde_json::to_value(&done.outcome).map_err(|e| LaunchError::Supervise(e.to_string()))?;
    let gone = matches!(done.removal, Removal::AlreadyGone | Removal::Removed);
    if let Some(object) = record.as_object_mut() {
        object.insert("exitCode".into(), done.outcome.exit_code().into());
        object.insert("mechanism".into(), "docker".into());
        object.insert(
            "docker".into(),
            serde_json::json!({
                "container": done.container,
                "imageId": spec.image_id,
                "removal": done.removal,
                "limits": done.limits,
                "seccompRules": done.seccomp_rules,
            }),
        );
        // The client's tree is the supervisor's; the container's processes are gone only if
        // the container is.
        let tree_empty = done.outcome.tree_empty && gone;
        object.insert("treeEmpty".into(), tree_empty.into());
        if !done.mountpoints_left.is_empty() {
            object.insert(
                "mountpointsLeft".into(),
                serde_json::json!(done.mountpoints_left),
            );
        }
    }
    if let Removal::Failed(detail) = &done.removal {
        return Err(LaunchError::TreeNotEmpty {
            remaining: 1,
            record: {
                let mut record = record;
                if let Some(object) = record.as_object_mut() {
                    object.insert("removalError".into(), detail.clone().into());
                }
                record
            },
        });
    }
    Ok(Launched {
        exit_code: u8::try_from(done.outcome.exit_code()).unwrap_or(125),
        record,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    const ID: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("registry.yaml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn doc(profiles: &str) -> String {
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata:\n  name: local\nspec:\n  runtimeProfiles:\n{profiles}"
        )
    }

    #[test]
    fn loads_a_pinned_profile() {
        let (_dir, path) = file(&doc(&format!(
            "    - name: build\n      image: palisade-build:1\n      imageId: {ID}\n      readOnlyPaths: [/opt/tools]\n"
        )));
        let profile = load(&path, None).unwrap();
        assert_eq!(
            profile,
            RuntimeProfile {
                name: "build".into(),
                image: "palisade-build:1".into(),
                pin: ID.into(),
                read_only_paths: vec![PathBuf::from("/opt/tools")],
                egress_bridge: None,
            }
        );
        assert_eq!(load(&path, Some("build")).unwrap(), profile);
        let err = load(&path, Some("other")).unwrap_err();
        assert!(err.to_string().contains("it has: build"), "{err}");
    }

    #[test]
    fn the_egress_bridge_is_the_files_and_must_be_absolute() {
        let profile = format!("    - name: build\n      image: b:1\n      imageId: {ID}\n");
        let (_dir, path) = file(&format!(
            "{}  egressBridge: /opt/palisade-bridge\n",
            doc(&profile)
        ));
        assert_eq!(
            load(&path, None).unwrap().egress_bridge,
            Some(PathBuf::from("/opt/palisade-bridge"))
        );
        let (_dir, path) = file(&format!("{}  egressBridge: bin/bridge\n", doc(&profile)));
        let text = load(&path, None).unwrap_err().to_string();
        assert!(
            text.contains("spec.egressBridge: `bin/bridge` must be absolute"),
            "{text}"
        );
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_path() {
        let (_dir, path) = file(&doc(&format!(
            "    - name: build\n      image: b:1\n      imageID: {ID}\n"
        )));
        let err = load(&path, None).unwrap_err();
        assert_eq!(err.code(), ErrorCode::DockerProfileInvalid);
        let text = err.to_string();
        assert!(text.contains("spec.runtimeProfiles[0]"), "{text}");
        assert!(text.contains("unknown field `imageID`"), "{text}");
    }

    #[test]
    fn unpinned_and_bad_pins() {
        let (_dir, path) = file(&doc("    - name: build\n      image: b:1\n"));
        let err = load(&path, None).unwrap_err();
        assert_eq!(err.code(), ErrorCode::DockerImageUnpinned);
        let (_dir, path) = file(&doc(
            "    - name: build\n      image: b:1\n      digest: sha256:short\n",
        ));
        assert!(
            load(&path, None)
                .unwrap_err()
                .to_string()
                .contains("64 lowercase hex")
        );
        let (_dir, path) = file(&doc(&format!(
            "    - name: a\n      image: b:1\n      imageId: {ID}\n    - name: a\n      image: b@{ID}\n      imageId: {ID}\n      readOnlyPaths: [rel]\n"
        )));
        let text = load(&path, Some("a")).unwrap_err().to_string();
        for expected in [
            "spec.runtimeProfiles[1].name: duplicate `a`",
            "spec.runtimeProfiles[1].image",
            "spec.runtimeProfiles[1].readOnlyPaths[0]",
        ] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
    }

    #[test]
    fn wrong_kind_and_several_profiles() {
        let text = doc(&format!(
            "    - name: a\n      image: b:1\n      imageId: {ID}\n    - name: c\n      image: d:1\n      imageId: {ID}\n"
        ))
        .replace("TrustedRegistry", "RuntimeProfiles");
        let (_dir, path) = file(&text);
        assert!(
            load(&path, Some("a"))
                .unwrap_err()
                .to_string()
                .contains("kind: must be")
        );
        let (_dir, path) = file(&text.replace("RuntimeProfiles", "TrustedRegistry"));
        assert!(matches!(
            load(&path, None),
            Err(ProfileError::Ambiguous { count: 2, .. })
        ));
    }

    #[test]
    fn pins_match_ids_or_digests() {
        let facts = ImageFacts {
            id: ID.into(),
            repo_digests: vec![format!("reg/x@sha256:{}", "f".repeat(64))],
        };
        assert!(facts.matches(ID).is_ok());
        assert!(facts.matches(&format!("sha256:{}", "f".repeat(64))).is_ok());
        let err = facts
            .matches(&format!("sha256:{}", "e".repeat(64)))
            .unwrap_err();
        assert!(err.contains("pins"), "{err}");
    }
}
