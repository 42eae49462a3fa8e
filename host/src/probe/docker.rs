//! `docker`: the CLI, a daemon answering on its socket, and the configured image.
//!
//! The daemon is asked directly over its unix socket with the shims' one API client
//! ([`palisade_shims::docker::api`]: HTTP/1.0, one request per connection, every write and read
//! bounded by the probe's deadline) — spawning `docker info` would cost tens of milliseconds and
//! hang with a hung daemon.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use palisade_engine::model::{Backend, BackendProbe, Capability, NetworkMode};
use palisade_shims::docker::api::{self, ApiError};
use serde::Deserialize;

use super::{DockerTarget, Inputs, unavailable};

pub(crate) fn probe(inputs: &Inputs, deadline: Instant) -> BackendProbe {
    // Palisade supervises `docker run` with its Linux supervisor (subreaper, cgroups); on other
    // hosts the backend is not offered rather than launched with weaker cleanup.
    if !cfg!(target_os = "linux") {
        return unavailable(
            Backend::Docker,
            "palisade launches the docker backend on linux hosts only".into(),
        );
    }
    if inputs.docker_cli.usable().is_none() {
        let reason = format!(
            "docker cli not installed{}",
            inputs.docker_cli.missing_detail()
        );
        return unavailable(Backend::Docker, reason);
    }
    let socket = match &inputs.docker_socket {
        DockerTarget::Unix { path, .. } => path,
        DockerTarget::NotUnix { docker_host } => {
            let reason = format!(
                "docker host `{docker_host}` is not a unix socket; palisade probes only local daemons"
            );
            return unavailable(Backend::Docker, reason);
        }
    };
    let not_answering = |detail: String| {
        unavailable(
            Backend::Docker,
            format!(
                "docker daemon not answering at `{}`: {detail}",
                socket.display()
            ),
        )
    };
    let describe = |err: ApiError| describe_http(err, inputs.timeout());

    match api::get(socket, "/_ping", deadline) {
        Ok(response) if response.status == 200 => {}
        Ok(response) => {
            return not_answering(format!("`/_ping` returned http {}", response.status));
        }
        Err(err) => return not_answering(describe(err)),
    }

    let version = match api::get(socket, "/version", deadline) {
        Ok(response) if response.status == 200 => parse_version(&response.body),
        Ok(_) => None,
        Err(ApiError::TimedOut) => return not_answering(describe(ApiError::TimedOut)),
        Err(_) => None,
    }
    .unwrap_or_else(|| "docker (version unknown)".to_owned());
    let with_version = |reason: String| BackendProbe {
        version: version.clone(),
        ..unavailable(Backend::Docker, reason)
    };

    let Some(image) = inputs.docker_image.as_deref() else {
        return with_version(
            "no docker image configured (name a pinned one with `--runtime-profiles FILE`)"
                .to_owned(),
        );
    };
    let facts = match inspect_image(socket, image, deadline) {
        Ok(Some(facts)) => facts,
        Ok(None) => return with_version(format!("image `{image}` not present")),
        Err(InspectError::Http(err)) => return not_answering(describe(err)),
        Err(other) => return with_version(other.to_string()),
    };
    let Some(pin) = inputs.docker_image_pin.as_deref() else {
        return with_version(format!(
            "image `{image}` is not pinned by a runtime profile; palisade runs only pinned images"
        ));
    };
    if let Err(mismatch) = facts.matches(pin) {
        return with_version(mismatch);
    }
    // The container's PID 1 runs from an execute-only copy of it (not dumpable); Docker's own
    // `--init` would leave it open to the command's `/proc/1/mem`, so there is no fallback.
    let init = match inputs.docker_init.usable() {
        Some(path) => check_docker_init(path, inputs.euid),
        None => Err("no `docker-init` found".to_owned()),
    };
    if let Err(why) = init {
        return with_version(format!("{why}: palisade runs it as the container's PID 1"));
    }

    let mut limitations = vec![
        "read-only binds are not recursively read-only".to_owned(),
        super::PROTECTED_WRITES_UNOBSERVED.to_owned(),
    ];
    let bridge = match &inputs.docker_egress_bridge {
        None => Err("no static bridge configured (runtime profiles' `spec.egressBridge`)".into()),
        Some(located) => match located.usable() {
            None => Err(format!(
                "egress bridge `{}` is not an executable file",
                located.path.as_deref().unwrap_or(Path::new("")).display()
            )),
            Some(path) => check_egress_bridge(path, inputs.euid).map(|_| ()),
        },
    };
    let network_bridge = match bridge {
        Ok(()) => true,
        Err(why) => {
            limitations.push(format!(
                "no network bridge: no filtered egress (allowedDomains) and no host loopback ports (loopbackPorts): {why}"
            ));
            false
        }
    };
    let mut probe = BackendProbe {
        landlock_proc: None,
        backend: Backend::Docker,
        available: true,
        reason: format!(
            "daemon answering at `{}`; image `{image}` present as pinned `{}`",
            socket.display(),
            facts.id
        ),
        capabilities: Capability::ALL.to_vec(),
        network_modes: NetworkMode::ALL.to_vec(),
        network_bridge,
        version,
        limitations,
    };
    // `--network host` shares the host's abstract Unix sockets; the static binary, the
    // container's seccomp stub, scopes them out as bwrap's stub does, where the kernel can.
    if network_bridge {
        super::bwrap::abstract_socket_scope(&mut probe);
    } else {
        probe.limitations.insert(0,
            "allow-outbound uses the host's network namespace (`--network host`), and with it the host's abstract Unix sockets (no static stub, `spec.egressBridge`, to scope them out)".to_owned(),
        );
    }
    probe
}

/// Whether `path` can serve as the in-container egress bridge (see [`check_static_helper`]).
/// Returns the resolved path, which is what gets mounted; `Err` says why not.
pub fn check_egress_bridge(path: &Path, euid: u32) -> Result<PathBuf, String> {
    check_static_helper("egress bridge", path, euid).map_err(|why| {
        if why.ends_with(DYNAMIC) {
            format!("{why}; build it with `-C target-feature=+crt-static` (docs/docker.md)")
        } else {
            why
        }
    })
}

/// Whether `path` can serve as the container's PID 1 (copied execute-only, see
/// `palisade_shims::docker`): Docker's own `docker-init`, checked as the bridge is.
pub fn check_docker_init(path: &Path, euid: u32) -> Result<PathBuf, String> {
    check_static_helper("docker-init", path, euid)
}

/// Whether `path` can run in every container of this backend: a statically linked ELF
/// executable for this machine (an image need not have the host's libc, or any) that only root
/// or `euid` can replace, nor any directory above it. `what` names it in the reason.
fn check_static_helper(what: &str, path: &Path, euid: u32) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let real = std::fs::canonicalize(path).map_err(|e| format!("{what} `{shown}`: {e}"))?;
    let meta = std::fs::metadata(&real).map_err(|e| format!("{what} `{shown}`: {e}"))?;
    if !meta.is_file() || meta.mode() & 0o111 == 0 {
        return Err(format!("{what} `{shown}` is not an executable file"));
    }
    let trusted_owner = |uid: u32| uid == 0 || uid == euid;
    if meta.mode() & 0o022 != 0 || !trusted_owner(meta.uid()) {
        return Err(format!(
            "{what} `{shown}` may be changed by others (owner {}, mode {:o}); it must be \
             owned by root or you and not writable by group or others",
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    // A directory others may write could have the file renamed away and replaced (a sticky
    // directory such as /tmp protects names it does not own).
    for dir in real.ancestors().skip(1) {
        let meta = std::fs::metadata(dir).map_err(|e| format!("`{}`: {e}", dir.display()))?;
        let open = meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0;
        if open || !trusted_owner(meta.uid()) {
            return Err(format!(
                "{what} `{shown}` is in `{}`, which others may change (owner {}, mode {:o})",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
    }
    let mut head = Vec::new();
    std::fs::File::open(&real)
        .and_then(|file| file.take(64 * 1024).read_to_end(&mut head))
        .map_err(|e| format!("{what} `{shown}`: {e}"))?;
    elf_is_static_for_this_machine(&head).map_err(|why| format!("{what} `{shown}` {why}"))?;
    Ok(real)
}

/// Why [`elf_is_static_for_this_machine`] refuses a dynamically linked executable.
const DYNAMIC: &str = "is dynamically linked (it names a program interpreter)";

/// Checks an ELF image's first bytes: 64-bit little-endian, this machine's architecture, and no
/// `PT_INTERP` program header (no dynamic loader: statically linked, static-pie included).
pub fn elf_is_static_for_this_machine(head: &[u8]) -> Result<(), String> {
    const PT_INTERP: u32 = 3;
    let machine: u16 = match std::env::consts::ARCH {
        "x86_64" => 62,
        "aarch64" => 183,
        other => return Err(format!("cannot be checked on {other}")),
    };
    let u16_at = |at: usize| -> Option<u16> {
        Some(u16::from_le_bytes(head.get(at..at + 2)?.try_into().ok()?))
    };
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(head.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(head.get(at..at + 8)?.try_into().ok()?))
    };
    if head.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("is not an ELF executable".into());
    }
    // EI_CLASS 2 = 64-bit, EI_DATA 1 = little-endian.
    if head.get(4) != Some(&2) || head.get(5) != Some(&1) {
        return Err("is not a 64-bit little-endian ELF".into());
    }
    if u16_at(18) != Some(machine) {
        return Err(format!("is not built for {}", std::env::consts::ARCH));
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(32), u16_at(54), u16_at(56)) else {
        return Err("has a truncated ELF header".into());
    };
    let phoff = usize::try_from(phoff).map_err(|_| "has an ELF header out of range")?;
    for index in 0..usize::from(phnum) {
        let at = phoff.saturating_add(index.saturating_mul(usize::from(phentsize)));
        match u32_at(at) {
            Some(PT_INTERP) => return Err(DYNAMIC.into()),
            Some(_) => {}
            None => return Err("has program headers past its first 64 KiB".into()),
        }
    }
    Ok(())
}

/// A running container's full ID and its init process's pid (in this pid namespace), by name;
/// `None` when it is not running or the daemon does not say.
pub fn container_process(socket: &Path, name: &str, deadline: Instant) -> Option<(String, i32)> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    if name.is_empty() || !name.bytes().all(plain) {
        return None;
    }
    let container = api::inspect_container(socket, name, deadline).ok()??;
    (container.running && container.pid > 0).then_some((container.id, container.pid))
}

/// What the daemon says about an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageFacts {
    /// The image ID (`sha256:…`), what a run uses.
    pub id: String,
    /// `name@sha256:…` digests from registries the image came from.
    pub repo_digests: Vec<String>,
}

impl ImageFacts {
    /// Whether the image is the pinned one: `pin` is an image ID (equal to [`Self::id`]) or a
    /// registry digest (the digest part of one of [`Self::repo_digests`]).
    pub fn matches(&self, pin: &str) -> Result<(), String> {
        if self.id == pin
            || self
                .repo_digests
                .iter()
                .any(|d| d.rsplit_once('@').is_some_and(|(_, digest)| digest == pin))
        {
            Ok(())
        } else {
            Err(format!(
                "image is `{}`, but the runtime profile pins `{pin}`",
                self.id
            ))
        }
    }
}

/// Why an image could not be inspected.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("invalid docker image name `{0}`")]
    Name(String),
    #[error("docker daemon failed to inspect image `{image}`: http {status}")]
    Status { image: String, status: u16 },
    #[error("docker daemon sent an image description palisade cannot read")]
    Body,
    #[error("docker daemon not answering")]
    Http(ApiError),
}

/// `GET /images/{image}/json`: `None` when the daemon does not have the image.
pub fn inspect_image(
    socket: &Path,
    image: &str,
    deadline: Instant,
) -> Result<Option<ImageFacts>, InspectError> {
    #[derive(Deserialize)]
    struct Body {
        #[serde(rename = "Id")]
        id: String,
        #[serde(rename = "RepoDigests", default)]
        repo_digests: Option<Vec<String>>,
    }
    if !valid_image_name(image) {
        return Err(InspectError::Name(image.escape_default().to_string()));
    }
    let response =
        api::get(socket, &format!("/images/{image}/json"), deadline).map_err(InspectError::Http)?;
    match response.status {
        200 => {}
        404 => return Ok(None),
        status => {
            return Err(InspectError::Status {
                image: image.to_owned(),
                status,
            });
        }
    }
    let body: Body = serde_json::from_slice(&response.body).map_err(|_| InspectError::Body)?;
    if !palisade_shims::docker::valid_image_id(&body.id) {
        return Err(InspectError::Body);
    }
    Ok(Some(ImageFacts {
        id: body.id,
        repo_digests: body.repo_digests.unwrap_or_default(),
    }))
}

/// Describes a failed daemon request for a one-line error: a timeout as the probe's, the usual
/// socket errors in words.
pub fn describe_http(err: ApiError, timeout: Duration) -> String {
    match err {
        ApiError::TimedOut => super::timed_out(timeout),
        ApiError::Io(err) => match err.kind() {
            io::ErrorKind::NotFound => "no socket there".to_owned(),
            io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => err.to_string(),
        },
        ApiError::Malformed(what) => format!("not an http response ({what})"),
    }
}

/// A reference `docker` would accept (`palisade_formats::profiles`, where profiles are read).
pub use palisade_formats::profiles::valid_image_name;

#[derive(Deserialize)]
struct VersionBody {
    #[serde(rename = "Version")]
    version: Option<String>,
    #[serde(rename = "ApiVersion")]
    api_version: Option<String>,
}

fn parse_version(body: &[u8]) -> Option<String> {
    let parsed: VersionBody = serde_json::from_slice(body).ok()?;
    let clean = |value: String| {
        let ok = !value.is_empty()
            && value.len() <= 64
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '~' | '_'));
        ok.then_some(value)
    };
    let version = parsed.version.and_then(clean)?;
    Some(match parsed.api_version.and_then(clean) {
        Some(api) => format!("docker {version} (api {api})"),
        None => format!("docker {version}"),
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        reason = "tests fail loudly"
    )]

    use super::*;

    /// A minimal ELF header for this machine with one program header of type `p_type`.
    fn elf(p_type: u32) -> Vec<u8> {
        let machine: u16 = if cfg!(target_arch = "aarch64") {
            183
        } else {
            62
        };
        let mut head = vec![0u8; 64 + 56];
        head[..4].copy_from_slice(b"\x7fELF");
        head[4] = 2;
        head[5] = 1;
        head[18..20].copy_from_slice(&machine.to_le_bytes());
        head[32..40].copy_from_slice(&64u64.to_le_bytes());
        head[54..56].copy_from_slice(&56u16.to_le_bytes());
        head[56..58].copy_from_slice(&1u16.to_le_bytes());
        head[64..68].copy_from_slice(&p_type.to_le_bytes());
        head
    }

    #[test]
    fn only_static_elf_for_this_machine_may_bridge() {
        assert!(
            elf_is_static_for_this_machine(&elf(1)).is_ok(),
            "PT_LOAD only"
        );
        let dynamic = elf_is_static_for_this_machine(&elf(3)).unwrap_err();
        assert!(dynamic.contains("dynamically linked"), "{dynamic}");
        // This test binary itself is dynamically linked.
        let me = std::fs::read("/proc/self/exe").unwrap();
        assert!(elf_is_static_for_this_machine(&me).is_err());
        assert!(elf_is_static_for_this_machine(b"#!/bin/sh\n").is_err());
        let mut other = elf(1);
        other[18] = 40; // ARM (32-bit)
        assert!(elf_is_static_for_this_machine(&other).is_err());
        assert!(
            elf_is_static_for_this_machine(&elf(1)[..40]).is_err(),
            "truncated"
        );
    }

    #[test]
    fn a_bridge_others_may_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bridge = dir.path().join("palisade-bridge");
        std::fs::write(&bridge, elf(1)).unwrap();
        std::fs::set_permissions(&bridge, std::fs::Permissions::from_mode(0o755)).unwrap();
        let euid = crate::probe::user_ids().1;
        let real = bridge.canonicalize().unwrap();
        // tempdir() is under the sticky /tmp, which protects names it does not own.
        assert_eq!(check_egress_bridge(&bridge, euid), Ok(real.clone()));
        // Through a symlink: the resolved file is what gets mounted.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&bridge, &link).unwrap();
        assert_eq!(check_egress_bridge(&link, euid), Ok(real));
        std::fs::set_permissions(&bridge, std::fs::Permissions::from_mode(0o775)).unwrap();
        let err = check_egress_bridge(&bridge, euid).unwrap_err();
        assert!(err.contains("may be changed by others"), "{err}");
        std::fs::set_permissions(&bridge, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            check_egress_bridge(&bridge, euid).is_err(),
            "not executable"
        );
        std::fs::set_permissions(&bridge, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A directory anyone may write (and not sticky) could swap the file.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_egress_bridge(&bridge, euid).unwrap_err();
        assert!(err.contains("which others may change"), "{err}");
    }

    #[test]
    fn parses_versions() {
        let body = br#"{"Version":"20.10.24+dfsg1","ApiVersion":"1.41","Os":"linux"}"#;
        assert_eq!(
            parse_version(body).as_deref(),
            Some("docker 20.10.24+dfsg1 (api 1.41)")
        );
        assert_eq!(parse_version(b"{}"), None);
        assert_eq!(parse_version(b"not json"), None);
    }

    #[test]
    fn image_names() {
        for good in [
            "busybox",
            "busybox:latest",
            "palisade/probe:1.0",
            "reg.local:5000/a/b@sha256:abc",
        ] {
            assert!(valid_image_name(good), "{good}");
        }
        for bad in ["", "a b", "../x", "x?y", "/abs", "-flag", "x#y", "x\ny"] {
            assert!(!valid_image_name(bad), "{bad}");
        }
    }
}
