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

#[cfg(target_os = "linux")]
use palisade_shims::docker as shim;
#[cfg(target_os = "linux")]
use palisade_shims::docker::{DockerSpec, Removal};
#[cfg(target_os = "linux")]
use palisade_shims::plan::LaunchPlan;
#[cfg(target_os = "linux")]
use palisade_shims::supervise;

#[cfg(target_os = "linux")]
use crate::launch::{LaunchError, Launched};
use crate::probe::docker::{ImageFacts, InspectError, inspect_image};
use crate::report::ErrorCode;

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

#[cfg(target_os = "linux")]
/// Removes the containers of this user's earlier runs that are over but still exist, and says
/// so: a run killed while the daemon restarts can leave its container `Created` after the
/// reaper has given up (the create request finished after the reaper found nothing to remove).
/// Best effort: a daemon that does not answer now is the launch's problem, reported there.
fn sweep_orphaned_containers(plan: &LaunchPlan, spec: &DockerSpec) -> Vec<String> {
    let Some(runs) = plan.run_temp_dir.parent() else {
        return Vec::new();
    };
    let uid = crate::probe::user_ids().0;
    let Ok(containers) = shim::labelled(&spec.socket, uid) else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for container in containers {
        if container.run_id == spec.run_id || !crate::launch::run_is_over(runs, &container.run_id) {
            continue;
        }
        if matches!(
            shim::remove(&spec.socket, &container.name),
            Removal::Removed | Removal::AlreadyGone
        ) {
            say!(
                "palisade: removed container {} ({}), left by run {}, which is over",
                container.name,
                container.state,
                container.run_id
            );
            swept.push(container.name);
        }
    }
    swept
}

/// Runs the plan in a container (see [`palisade_shims::docker`]) and accounts for it (Linux:
/// the supervisor is Linux's).
#[cfg(target_os = "linux")]
pub fn execute(plan: &LaunchPlan, spec: &DockerSpec) -> Result<Launched, LaunchError> {
    let swept = sweep_orphaned_containers(plan, spec);
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
        if !swept.is_empty() {
            object.insert("containersSwept".into(), serde_json::json!(swept));
        }
        object.insert(
            "pid1".into(),
            serde_json::json!({"init": "docker-init", "dumpable": false, "copyOf": spec.init}),
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
        if !done.placeholders_left.is_empty() {
            object.insert(
                "placeholdersLeft".into(),
                serde_json::json!(done.placeholders_left),
            );
        }
    }
    if let Removal::Failed(detail) = &done.removal {
        return Err(LaunchError::ContainerNotRemoved {
            container: done.container.clone(),
            detail: detail.clone(),
            record: {
                let mut record = record;
                if let Some(object) = record.as_object_mut() {
                    object.insert("removalError".into(), detail.clone().into());
                }
                record
            },
        });
    }
    // The client's supervisor enforces only the wall clock; the container's own budgets are its
    // cgroup's (a limitation the probe lists).
    let mut denials = crate::launch::budget_denials(&done.outcome, plan);
    if let Some(observed) = &done.observed {
        denials.extend(crate::denials::syscall_denials(observed));
        crate::launch::set(
            &mut record,
            "seccompObserver",
            crate::launch::observer_account(observed),
        );
    }
    if let Some(seen) = &done.masks_seen {
        denials.extend(crate::denials::file_denials(
            seen,
            &done.denied_masks,
            &plan.denied_read_paths,
        ));
    }
    if !done.denied_masks.is_empty() {
        crate::launch::set(
            &mut record,
            "fileObserver",
            crate::launch::mask_account(done.masks_seen.as_ref(), done.mask_error.as_deref()),
        );
    }
    Ok(Launched {
        exit_code: u8::try_from(done.outcome.exit_code()).unwrap_or(125),
        record,
        denials,
        dropped: done.observed.as_ref().map_or(0, |o| o.dropped)
            + done.masks_seen.as_ref().map_or(0, |seen| seen.dropped),
        // No start signal through `docker run`: the container's setup counts in `command`.
        marks: done.outcome.marks,
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
