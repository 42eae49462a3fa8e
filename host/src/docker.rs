//! The Docker backend's host configuration: runtime profiles (which image a run may use, pinned)
//! and the image check right before launching, with what else a run needs checked again then
//! (the CLI, docker-init, the static bridge): [`run_spec`]. The launch itself is
//! `crate::launch`'s `docker.rs`, through [`palisade_shims::docker`].
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
//! `spec.egressBridge` names a statically linked `palisade-bridge` (built as docs/docker.md says).
//! With one, the docker backend offers the network bridge (filtered egress, `allowedDomains`, and
//! listed host loopback ports, `loopbackPorts`): the bridge is mounted read-only into the
//! container and runs as its entrypoint, as `palisade __bridge` does under bwrap. The probe checks
//! that it is a static executable for this machine that only root or the caller can change;
//! without a usable one, docker has no network bridge.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use palisade_engine::output::FieldError;
use palisade_engine::reader::Errors;

use crate::probe::docker::{ImageFacts, InspectError, inspect_image};
use crate::probe::{self, ProbeOptions};
use crate::report::{ErrorCode, Failure};

// The file's format is `palisade_formats::profiles`, apart from the CLI so that tests and fuzz
// targets reach it without wasmtime.
use palisade_formats::profiles::parse;
pub use palisade_formats::profiles::{API_VERSION, KIND, MAX_BYTES};

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
    /// The file's `spec.egressBridge`: the static network bridge (filtered egress, forwarded
    /// host loopback ports).
    pub egress_bridge: Option<PathBuf>,
    /// The profile's `budgets` (`timeoutSeconds`, `memoryMiB`, `maxProcesses`, `cpuSeconds`) in
    /// the engine's units: part of the envelope every decision made with it tightens within.
    pub budgets: Option<palisade_engine::model::BudgetLimits>,
}

/// Why a runtime profile file cannot be used. The codes are printed by the CLI.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read runtime profiles `{}`: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("runtime profiles `{}` are larger than {MAX_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("runtime profiles `{}` are invalid: {summary}", path.display())]
    Invalid {
        path: PathBuf,
        summary: String,
        errors: Vec<FieldError>,
    },
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

    /// Every offending field, for detail lines.
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            ProfileError::Invalid { errors, .. } => errors,
            _ => &[],
        }
    }
}

/// Reads `path` and picks profile `name` (or the only one).
pub fn load(path: &Path, name: Option<&str>) -> Result<RuntimeProfile, ProfileError> {
    let read_error = |source| ProfileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_BYTES + 1).read_to_end(&mut bytes))
        .map_err(read_error)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_BYTES {
        return Err(ProfileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let invalid = |errors: Errors| ProfileError::Invalid {
        path: path.to_path_buf(),
        summary: errors.summary(),
        errors: errors.into_listed(),
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        let mut errors = Errors::default();
        errors.push(
            "document",
            format!("not valid utf-8 (byte {})", e.utf8_error().valid_up_to()),
        );
        invalid(errors)
    })?;
    let (profiles, egress_bridge) = parse(&text).map_err(invalid)?;
    let available = || {
        profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let chosen =
        match name {
            Some(name) => profiles.iter().find(|p| p.name == name).ok_or_else(|| {
                ProfileError::UnknownName {
                    path: path.to_path_buf(),
                    name: name.to_owned(),
                    available: available(),
                }
            })?,
            None => match profiles.as_slice() {
                [only] => only,
                _ => {
                    return Err(ProfileError::Ambiguous {
                        path: path.to_path_buf(),
                        count: profiles.len(),
                    });
                }
            },
        };
    match &chosen.pin {
        Some(pin) => Ok(RuntimeProfile {
            name: chosen.name.clone(),
            image: chosen.image.clone(),
            pin: pin.clone(),
            read_only_paths: chosen.read_only_paths.clone(),
            egress_bridge,
            budgets: chosen.budgets.clone(),
        }),
        None => Err(ProfileError::Unpinned {
            name: chosen.name.clone(),
        }),
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

/// Everything a docker run needs: the CLI and daemon the probe used, and the pinned image,
/// checked again now (a tag may have moved since it was probed or cached).
pub fn run_spec(
    profile: Option<&RuntimeProfile>,
    probe_opts: &ProbeOptions,
    programs: &probe::Programs,
    run_id: &str,
) -> Result<(palisade_shims::docker::DockerSpec, Option<PathBuf>), Failure> {
    let profile = profile.ok_or_else(|| {
        Failure::new(
            ErrorCode::DockerImageUnpinned,
            "the docker backend needs a runtime profile that pins its image",
        )
        .hint("pass `--runtime-profiles FILE` (docs/docker.md)")
    })?;
    let socket = probe::docker_socket(probe_opts)
        .map_err(|e| Failure::new(ErrorCode::DockerDaemonUnavailable, e))?;
    let cli = programs.docker.clone().ok_or_else(|| {
        Failure::new(
            ErrorCode::DockerDaemonUnavailable,
            "the docker cli is not installed (it was when probed); nothing was run",
        )
    })?;
    // The container's PID 1, checked again now (it runs inside the container, like the image).
    let init = programs
        .docker_init
        .clone()
        .ok_or_else(|| "no `docker-init` found".to_owned())
        .and_then(|path| probe::docker::check_docker_init(&path, probe::user_ids().1))
        .map_err(|why| {
            Failure::new(
                ErrorCode::DockerDaemonUnavailable,
                format!("{why} (it was when probed; palisade runs it as the container's PID 1); nothing was run"),
            )
        })?;
    let image_id = verify_image(&socket, profile, probe_opts.timeout)
        .map_err(|e| Failure::new(e.code(), e.to_string()))?;
    // The static bridge is also the container's seccomp stub, through which the filter's
    // refusals are observed: used when it passes the probe's check now (the probe listed the
    // denials as unobserved otherwise, and the outcome's `seccompObserver` says which it was).
    let stub = profile
        .egress_bridge
        .as_deref()
        .and_then(|path| probe::docker::check_egress_bridge(path, probe::user_ids().1).ok());
    let spec = palisade_shims::docker::DockerSpec {
        cli,
        socket,
        image_id,
        run_id: run_id.to_owned(),
        read_only_binds: profile.read_only_paths.clone(),
        init,
        stub,
    };
    Ok((spec, profile.egress_bridge.clone()))
}

/// The docker run's static egress bridge, checked again now (like the image: it runs inside
/// the container); the resolved path is what gets mounted.
pub fn verified_bridge(configured: Option<&Path>) -> Result<PathBuf, Failure> {
    let refused = |why: String| {
        Failure::new(ErrorCode::SandboxCapabilityInsufficient, why)
            .hint("nothing was run; `palisade doctor` shows the docker probe")
    };
    let bridge = configured.ok_or_else(|| {
        refused(
            "the network bridge under docker (filtered egress, host loopback ports) needs the runtime profiles' `spec.egressBridge` (it was there when probed)".into(),
        )
    })?;
    probe::docker::check_egress_bridge(bridge, probe::user_ids().1).map_err(refused)
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
            "    - name: build\n      image: palisade-build:1\n      imageId: {ID}\n      readOnlyPaths: [/opt/tools]\n      budgets: {{timeoutSeconds: 600, memoryMiB: 512}}\n"
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
                budgets: Some(palisade_engine::model::BudgetLimits {
                    timeout_millis: Some(600_000),
                    memory_bytes: Some(512 << 20),
                    max_processes: None,
                    cpu_seconds: None,
                }),
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
        assert_eq!(
            paths(&load(&path, None).unwrap_err()),
            ["spec.egressBridge"]
        );
    }

    /// The field paths of an invalid file's errors.
    fn paths(error: &ProfileError) -> Vec<String> {
        error
            .field_errors()
            .iter()
            .map(|e| e.path.clone())
            .collect()
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_path() {
        let (_dir, path) = file(&doc(&format!(
            "    - name: build\n      image: b:1\n      imageID: {ID}\n"
        )));
        let err = load(&path, None).unwrap_err();
        assert_eq!(err.code(), ErrorCode::DockerProfileInvalid);
        assert_eq!(paths(&err), ["spec.runtimeProfiles[0].imageID"]);
        let text = err.to_string();
        assert!(text.contains("did you mean `imageId`?"), "{text}");
        // Every problem, not the first: wrong types, missing fields, repeats, unknown keys.
        let (_dir, path) = file(
            "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata: {name: x, owner: y}\nspec:\n  runtimeProfiles:\n    - {name: a, image: [b]}\n    - {image: c:1, image: d:1}\n    - 7\n  egressBridge: 3\n  extra: 1\n",
        );
        assert_eq!(
            paths(&load(&path, None).unwrap_err()),
            [
                "metadata.owner",
                "spec.runtimeProfiles[0].image",
                "spec.runtimeProfiles[1].image",
                "spec.runtimeProfiles[1].name",
                "spec.runtimeProfiles[2]",
                "spec.egressBridge",
                "spec.extra",
            ]
        );
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
        assert_eq!(
            paths(&load(&path, Some("a")).unwrap_err()),
            [
                "spec.runtimeProfiles[1].image",
                "spec.runtimeProfiles[1].readOnlyPaths[0]",
                "spec.runtimeProfiles[1].name",
            ]
        );
        let (_dir, path) = file(&doc(&format!(
            "    - name: a\n      image: b:1\n      imageId: {ID}\n      digest: {ID}\n"
        )));
        assert_eq!(
            paths(&load(&path, None).unwrap_err()),
            ["spec.runtimeProfiles[0].digest"]
        );
    }

    #[test]
    fn wrong_kind_and_several_profiles() {
        let text = doc(&format!(
            "    - name: a\n      image: b:1\n      imageId: {ID}\n    - name: c\n      image: d:1\n      imageId: {ID}\n"
        ))
        .replace("TrustedRegistry", "RuntimeProfiles");
        let (_dir, path) = file(&text);
        assert_eq!(paths(&load(&path, Some("a")).unwrap_err()), ["kind"]);
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
