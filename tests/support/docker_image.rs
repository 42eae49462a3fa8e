//! A local Docker image for the tests and benches: busybox-static plus Palisade's own attack
//! binary built statically, imported with `docker import` (no registry is reachable), tagged by
//! a hash of its content and pinned by the ID the daemon gives it.
//!
//! The daemon is the one `DOCKER_HOST` names (`unix://…`; `.ci/dockerd.sh start` prints it).
//! Included with `#[path = "support/docker_image.rs"] mod docker_image;`.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test support: a failed step should fail loudly; users take different subsets"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Where the attack binary lives in the image.
pub const ATTACK_IN_IMAGE: &str = "/usr/local/bin/palisade-attack";
/// Bumped when the image's layout changes.
const LAYOUT_VERSION: &str = "1";

/// A built, pinned test image.
#[derive(Clone, Debug)]
pub struct TestImage {
    /// The daemon's socket.
    pub socket: PathBuf,
    /// `palisade-test:<content hash>`.
    pub tag: String,
    /// `sha256:…` as the daemon reports it.
    pub id: String,
}

impl TestImage {
    /// A runtime profile file pinning this image, making `read_only` visible in the container.
    pub fn write_profile(&self, path: &Path, read_only: &[PathBuf]) {
        self.write_profile_with_bridge(path, read_only, None);
    }

    /// [`TestImage::write_profile`], naming `bridge` as the file's `spec.egressBridge`.
    pub fn write_profile_with_bridge(
        &self,
        path: &Path,
        read_only: &[PathBuf],
        bridge: Option<&Path>,
    ) {
        let paths: Vec<String> = read_only
            .iter()
            .map(|p| serde_json::to_string(&p.display().to_string()).unwrap())
            .collect();
        let text = format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata:\n  name: tests\nspec:\n  runtimeProfiles:\n    - name: tests\n      image: {}\n      imageId: {}\n      readOnlyPaths: [{}]\n",
            self.tag,
            self.id,
            paths.join(", ")
        );
        let text = match bridge {
            Some(bridge) => format!("{text}  egressBridge: {}\n", bridge.display()),
            None => text,
        };
        std::fs::write(path, text).unwrap();
    }

    /// `docker` with this daemon.
    pub fn docker(&self) -> Command {
        let mut command = Command::new("docker");
        command.env("DOCKER_HOST", format!("unix://{}", self.socket.display()));
        command
    }

    /// Names of every container on the daemon, running or not.
    pub fn containers(&self) -> Vec<String> {
        let out = self
            .docker()
            .args(["ps", "-a", "--format", "{{.Names}}"])
            .output()
            .unwrap();
        assert!(out.status.success(), "docker ps failed");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The daemon's socket from `DOCKER_HOST`, if it names a unix socket that answers.
pub fn daemon_socket() -> Result<PathBuf, String> {
    let host = std::env::var("DOCKER_HOST").map_err(|_| {
        "DOCKER_HOST is not set (start a daemon: `eval \"$(bash .ci/dockerd.sh start)\"`)"
            .to_owned()
    })?;
    let path = host
        .strip_prefix("unix://")
        .map(PathBuf::from)
        .ok_or_else(|| format!("DOCKER_HOST `{host}` is not a unix socket"))?;
    let ping = Command::new("docker")
        .env("DOCKER_HOST", &host)
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if ping.success() {
        Ok(path)
    } else {
        Err(format!("no docker daemon answers at `{host}`"))
    }
}

/// Whether the tests must have a daemon (CI sets `PALISADE_REQUIRE_DOCKER=1`).
pub fn required() -> bool {
    std::env::var_os("PALISADE_REQUIRE_DOCKER").is_some_and(|v| v == "1")
}

/// The image, built once per process (and once per content: the tag carries a hash).
pub fn ensure() -> Result<TestImage, String> {
    static IMAGE: OnceLock<Result<TestImage, String>> = OnceLock::new();
    IMAGE.get_or_init(|| build(&[])).clone()
}

/// [`ensure`]'s image plus the host's `git` at its own path and in its exec path, with the
/// shared libraries `ldd` names for it (the image has no libc of its own), for tests that run
/// git inside a container. Built once per process.
pub fn ensure_with_git() -> Result<TestImage, String> {
    static IMAGE: OnceLock<Result<TestImage, String>> = OnceLock::new();
    IMAGE.get_or_init(|| build(&host_git_files()?)).clone()
}

/// [`ensure_with_git`]'s image plus the host's `ssh` client and its shared libraries, for git
/// over ssh inside a container. Built once per process.
pub fn ensure_with_git_and_ssh() -> Result<TestImage, String> {
    static IMAGE: OnceLock<Result<TestImage, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let mut files = host_git_files()?;
            for file in host_program_files("ssh")? {
                if !files.contains(&file) {
                    files.push(file);
                }
            }
            build(&files)
        })
        .clone()
}

/// `(host file, path in the image)` for the `git` found on `PATH` and what it needs to run.
fn host_git_files() -> Result<Vec<(PathBuf, PathBuf)>, String> {
    let mut files = host_program_files("git")?;
    let out = Command::new("git")
        .arg("--exec-path")
        .output()
        .map_err(|e| format!("git --exec-path: {e}"))?;
    if !out.status.success() {
        return Err("`git --exec-path` failed".to_owned());
    }
    let exec_path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let git = files[0].0.clone();
    files.insert(1, (git, exec_path.join("git")));
    Ok(files)
}

/// `(host file, path in the image)` for `program` as found on `PATH`, and the shared libraries
/// `ldd` names for it.
fn host_program_files(program: &str) -> Result<Vec<(PathBuf, PathBuf)>, String> {
    let sh = |script: &str| -> Result<String, String> {
        let out = Command::new("sh")
            .args(["-c", script])
            .output()
            .map_err(|e| format!("sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "`{script}` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let found = PathBuf::from(
        sh(&format!("command -v {program}")).map_err(|_| format!("{program} is not installed"))?,
    );
    let mut files = vec![(found.clone(), found.clone())];
    // `libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x…)` and `/lib64/ld-linux-x86-64.so.2 (0x…)`.
    for line in sh(&format!("ldd '{}'", found.display()))?.lines() {
        let path = line
            .split("=>")
            .last()
            .and_then(|rest| rest.split_whitespace().next())
            .filter(|path| path.starts_with('/'));
        if let Some(path) = path {
            files.push((PathBuf::from(path), PathBuf::from(path)));
        }
    }
    Ok(files)
}

/// The image: busybox, the attack binary and `extra` files (`(host file, path in the image)`,
/// each executable).
fn build(extra: &[(PathBuf, PathBuf)]) -> Result<TestImage, String> {
    let socket = daemon_socket()?;
    let attack = static_attack()?;
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or("busybox is not installed (apt-get install busybox-static)")?;
    let busybox_bytes = std::fs::read(&busybox).unwrap();
    let attack_bytes = std::fs::read(&attack).unwrap();
    let hash = {
        let mut input = Vec::new();
        input.extend_from_slice(LAYOUT_VERSION.as_bytes());
        input.extend_from_slice(&busybox_bytes);
        input.extend_from_slice(&attack_bytes);
        for (host, inside) in extra {
            input.extend_from_slice(inside.as_os_str().as_encoded_bytes());
            input.extend_from_slice(
                &std::fs::read(host).map_err(|e| format!("{}: {e}", host.display()))?,
            );
        }
        sha256_hex(&input)
    };
    let tag = format!("palisade-test:{}", &hash[..16]);
    let image = |id: String| TestImage {
        socket: socket.clone(),
        tag: tag.clone(),
        id,
    };
    if let Some(id) = inspect_id(&socket, &tag) {
        return Ok(image(id));
    }

    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for dir in [
        "bin",
        "usr/local/bin",
        "etc",
        "tmp",
        "root",
        "var/tmp",
        "proc",
        "dev",
        "sys",
    ] {
        std::fs::create_dir_all(r.join(dir)).unwrap();
    }
    std::fs::write(r.join("bin/busybox"), &busybox_bytes).unwrap();
    std::fs::write(r.join("usr/local/bin/palisade-attack"), &attack_bytes).unwrap();
    let mut executables = vec![
        PathBuf::from("bin/busybox"),
        PathBuf::from("usr/local/bin/palisade-attack"),
    ];
    for (host, inside) in extra {
        let relative = inside.strip_prefix("/").unwrap_or(inside);
        let target = r.join(relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(host, &target).map_err(|e| format!("{}: {e}", host.display()))?;
        executables.push(relative.to_path_buf());
    }
    let list = Command::new(&busybox).arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet != "busybox" && !applet.contains('/') && !applet.is_empty() {
            std::os::unix::fs::symlink("busybox", r.join("bin").join(applet)).unwrap();
        }
    }
    std::fs::write(
        r.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(r.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").unwrap();
    let status = Command::new("chmod")
        .args(["-R", "u=rwX,go=rX"])
        .arg(r)
        .status()
        .unwrap();
    assert!(status.success());
    let modes = executables
        .iter()
        .map(|path| (path.as_path(), "0755"))
        .chain([(Path::new("tmp"), "1777"), (Path::new("var/tmp"), "1777")]);
    for (path, mode) in modes {
        let status = Command::new("chmod")
            .arg(mode)
            .arg(r.join(path))
            .status()
            .unwrap();
        assert!(status.success());
    }
    let tar = Command::new("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
        .arg(r)
        .args(["-cf", "-", "."])
        .output()
        .map_err(|e| format!("tar: {e}"))?;
    if !tar.status.success() {
        return Err(format!(
            "tar failed: {}",
            String::from_utf8_lossy(&tar.stderr)
        ));
    }
    let mut import = Command::new("docker")
        .env("DOCKER_HOST", format!("unix://{}", socket.display()))
        .args(["import", "-", &tag])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("docker import: {e}"))?;
    import
        .stdin
        .take()
        .unwrap()
        .write_all(&tar.stdout)
        .map_err(|e| format!("docker import: {e}"))?;
    let out = import.wait_with_output().unwrap();
    if !out.status.success() {
        return Err(format!(
            "docker import failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    inspect_id(&socket, &tag)
        .map(image)
        .ok_or_else(|| format!("image `{tag}` missing right after import"))
}

fn inspect_id(socket: &Path, tag: &str) -> Option<String> {
    let out = Command::new("docker")
        .env("DOCKER_HOST", format!("unix://{}", socket.display()))
        .args(["image", "inspect", "--format", "{{.Id}}", tag])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && id.starts_with("sha256:")).then_some(id)
}

/// The static `palisade-bridge` (filtered egress under docker: a runtime profile file's
/// `spec.egressBridge`), built with the attack binary.
///
/// Palisade trusts a bridge only where nobody but root or the caller can replace it, all the way
/// up to `/`, and a checkout may sit below directories of another owner. So the tests use a copy
/// in a private directory of the system temp dir, one per content (`palisade-test-bridge-<hash>`,
/// reused by later runs).
pub fn static_bridge() -> Result<PathBuf, String> {
    static COPY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    COPY.get_or_init(|| {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let built = std::fs::read(static_build()?.join("palisade-bridge"))
            .map_err(|e| format!("cannot read the static bridge: {e}"))?;
        let hash = sha256_hex(&built);
        let dir = std::env::temp_dir().join(format!("palisade-test-bridge-{}", &hash[..16]));
        match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
        let copy = dir.join("palisade-bridge");
        if std::fs::read(&copy).ok().as_deref() != Some(built.as_slice()) {
            let partial = dir.join(format!(".palisade-bridge.{}", std::process::id()));
            std::fs::write(&partial, &built).map_err(|e| format!("copy the bridge: {e}"))?;
            std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("chmod the bridge: {e}"))?;
            std::fs::rename(&partial, &copy).map_err(|e| format!("place the bridge: {e}"))?;
        }
        Ok(copy)
    })
    .clone()
}

fn static_attack() -> Result<PathBuf, String> {
    Ok(static_build()?.join("palisade-attack"))
}

/// The directory holding the attack binary and the egress bridge, linked statically (the image
/// has no libc): one nested cargo build of this workspace's `palisade-attack` and
/// `palisade-bridge` with `+crt-static`, in its own target directory (the outer build holds the
/// lock on the usual one). Built once per process.
fn static_build() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build_static).clone()
}

fn build_static() -> Result<PathBuf, String> {
    let target_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("docker-static");
    let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--locked",
            "-p",
            "palisade-suite",
            "--bin",
            "palisade-attack",
            "-p",
            "palisade-proxy",
            "--bin",
            "palisade-bridge",
        ])
        .args(["--target", &triple])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building the static attack binary and bridge failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(target_dir.join(triple).join("debug"))
}

fn sha256_hex(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}
