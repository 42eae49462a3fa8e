//! Builds the decision engine as a WebAssembly component and embeds it in the host.
//!
//! A plain `cargo build -p palisade` runs this script, which
//! 1. checks that the `wasm32-unknown-unknown` standard library is installed;
//! 2. runs a nested `cargo build --release --target wasm32-unknown-unknown -p palisade-engine`
//!    into its own target directory (sharing the outer one would deadlock on its lock), with
//!    the outer build's cargo/rustc environment scrubbed and the checkout's and cargo home's
//!    path prefixes remapped, so two checkouts at different paths produce the identical module;
//! 3. turns the core module into a component with `wit-component` (which validates it); on
//!    `wasm32-unknown-unknown` the engine links no WASI, so the component imports nothing;
//! 4. writes it to `$OUT_DIR/palisade-engine.component.wasm` and exports its SHA-256 as
//!    `PALISADE_ENGINE_COMPONENT_SHA256` (plus the locked wasmtime version as
//!    `PALISADE_WASMTIME_VERSION`) for `src/runtime.rs`.
//!
//! It also links `palisade-init` static-pie and `palisade` with a static libgcc on Linux with
//! glibc (`build/static_link.rs`).

use std::env;
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

#[path = "build/static_link.rs"]
mod static_link;

const WASM_TARGET: &str = "wasm32-unknown-unknown";
const ENGINE_PACKAGE: &str = "palisade-engine";
const ENGINE_ARTIFACT: &str = "palisade_engine.wasm";
const COMPONENT_FILE: &str = "palisade-engine.component.wasm";
/// Overrides where the nested engine build keeps its target directory.
const TARGET_DIR_VAR: &str = "PALISADE_ENGINE_TARGET_DIR";
/// What the checkout's root is rewritten to inside the module.
const REMAPPED_WORKSPACE: &str = "/palisade";
/// What cargo's home (the registry sources) is rewritten to inside the module.
const REMAPPED_CARGO_HOME: &str = "/cargo";
/// What an out-of-tree engine target directory is rewritten to.
const REMAPPED_TARGET_DIR: &str = "/palisade-engine-target";

fn main() {
    if let Err(message) = run() {
        // One clear line for the user; the nested cargo's own output (if any) was already
        // forwarded to stderr, which cargo prints when a build script fails.
        println!("cargo::error={message}");
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let manifest_dir = PathBuf::from(required_env("CARGO_MANIFEST_DIR")?);
    let workspace = manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("`{}` has no parent directory", manifest_dir.display()))?;
    let workspace = canonical(&workspace);
    let out_dir = PathBuf::from(required_env("OUT_DIR")?);
    static_link::link_statically(&out_dir);

    for path in [
        "engine",
        "wit",
        "Cargo.lock",
        "Cargo.toml",
        "rust-toolchain.toml",
    ] {
        println!("cargo::rerun-if-changed={}", workspace.join(path).display());
    }
    println!("cargo::rerun-if-env-changed={TARGET_DIR_VAR}");

    let rustc = env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    check_target_installed(&rustc)?;

    let target_dir = match env::var_os(TARGET_DIR_VAR) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => workspace.join("target").join("engine-wasm"),
    };
    fs::create_dir_all(&target_dir)
        .map_err(|e| format!("cannot create `{}`: {e}", target_dir.display()))?;
    let target_dir = canonical(&target_dir);

    let core = build_core_module(&workspace, &target_dir, &rustc)?;
    let component = componentize(&core)?;

    let component_path = out_dir.join(COMPONENT_FILE);
    fs::write(&component_path, &component)
        .map_err(|e| format!("cannot write `{}`: {e}", component_path.display()))?;
    println!(
        "cargo::rustc-env=PALISADE_ENGINE_COMPONENT_SHA256={}",
        sha256_hex(&component)
    );
    println!(
        "cargo::rustc-env=PALISADE_WASMTIME_VERSION={}",
        locked_version(&workspace.join("Cargo.lock"), "wasmtime")
            .unwrap_or_else(|| String::from("unknown"))
    );
    Ok(())
}

fn required_env(name: &str) -> Result<OsString, String> {
    env::var_os(name).ok_or_else(|| format!("cargo did not set `{name}` for the build script"))
}

fn canonical(path: &Path) -> PathBuf {
    fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Fails with the command to run when the wasm target's standard library is missing.
fn check_target_installed(rustc: &OsStr) -> Result<(), String> {
    let output = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", WASM_TARGET])
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", rustc.to_string_lossy()))?;
    let libdir = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let installed = output.status.success()
        && !libdir.is_empty()
        && fs::read_dir(&libdir).is_ok_and(|mut entries| {
            entries.any(|entry| {
                entry.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("libcore-"))
            })
        });
    if installed {
        Ok(())
    } else {
        Err(format!(
            "the `{WASM_TARGET}` target is not installed for this toolchain; the engine component \
             is built for it. hint: run `rustup target add {WASM_TARGET}`"
        ))
    }
}

/// Whether an inherited environment variable must not reach the nested cargo.
///
/// Everything cargo sets for build scripts (`CARGO_*`, `OUT_DIR`, `TARGET`, `PROFILE`,
/// `NUM_JOBS`, the jobserver in `CARGO_MAKEFLAGS`, `RUSTC_WRAPPER`/`RUSTC_WORKSPACE_WRAPPER` as
/// set by `cargo clippy`, ...) and every user flag variable would change what the nested build
/// compiles, or where, or make it differ between machines. Only cargo's home and its network
/// and registry configuration pass through.
fn scrubbed(name: &str) -> bool {
    const KEEP_CARGO: [&str; 5] = [
        "CARGO_HOME",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
    ];
    const DROP: [&str; 16] = [
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_LINKER",
        "RUSTDOC",
        "MAKEFLAGS",
        "MFLAGS",
        "OUT_DIR",
        "TARGET",
        "HOST",
        "NUM_JOBS",
        "OPT_LEVEL",
        "DEBUG",
        "PROFILE",
        "RUSTC_BOOTSTRAP",
    ];
    if name.starts_with("CARGO") {
        return !KEEP_CARGO.iter().any(|keep| name.starts_with(keep));
    }
    name.starts_with("__CARGO") || DROP.contains(&name)
}

fn build_core_module(
    workspace: &Path,
    target_dir: &Path,
    rustc: &OsStr,
) -> Result<Vec<u8>, String> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));

    // Later remappings win in rustc, so the most specific prefixes come last.
    let mut remaps: Vec<(PathBuf, &str)> = Vec::new();
    if let Some(home) = cargo_home {
        remaps.push((canonical(&home), REMAPPED_CARGO_HOME));
    }
    remaps.push((workspace.to_path_buf(), REMAPPED_WORKSPACE));
    if !target_dir.starts_with(workspace) {
        remaps.push((target_dir.to_path_buf(), REMAPPED_TARGET_DIR));
    }
    let rustflags = remaps
        .iter()
        .map(|(from, to)| format!("--remap-path-prefix={}={to}", from.display()))
        .collect::<Vec<_>>()
        .join("\u{1f}");

    let mut command = Command::new(&cargo);
    for (name, _) in env::vars_os() {
        if name.to_str().is_none_or(scrubbed) {
            command.env_remove(&name);
        }
    }
    command
        .current_dir(workspace)
        .env("RUSTC", rustc)
        .env("CARGO_ENCODED_RUSTFLAGS", &rustflags)
        .env("CARGO_INCREMENTAL", "0")
        .env("CARGO_TERM_COLOR", "never")
        .args([
            "build",
            "--release",
            "--locked",
            "--lib",
            "--target",
            WASM_TARGET,
        ])
        .args(["-p", ENGINE_PACKAGE])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    if let Some(jobs) = env::var_os("NUM_JOBS") {
        command.arg("-j").arg(jobs);
    }

    let output = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", cargo.to_string_lossy()))?;
    let status = output.status;
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Cargo shows a build script's stderr only when it fails (or with `-vv`)...
    eprint!("{stderr}");
    // ...so surface the engine's own compiler warnings, which the native build of the engine
    // cannot show for the wasm-only code (`engine/src/component.rs`).
    forward_warnings(&stderr);
    if !status.success() {
        return Err(format!(
            "the nested engine build (`cargo build --release --target {WASM_TARGET} -p \
             {ENGINE_PACKAGE}`) failed with {status}; its output is above"
        ));
    }

    let artifact = target_dir
        .join(WASM_TARGET)
        .join("release")
        .join(ENGINE_ARTIFACT);
    fs::read(&artifact).map_err(|e| format!("cannot read `{}`: {e}", artifact.display()))
}

/// Re-emits each `warning: …` of the nested build (with its `--> file:line`) as a cargo
/// warning of this package.
fn forward_warnings(stderr: &str) {
    let mut pending: Option<&str> = None;
    let flush = |warning: &str, location: Option<&str>| match location {
        Some(location) => println!("cargo::warning=engine (wasm32): {warning} at {location}"),
        None => println!("cargo::warning=engine (wasm32): {warning}"),
    };
    for line in stderr.lines() {
        let trimmed = line.trim_start();
        if let Some(location) = trimmed.strip_prefix("--> ") {
            if let Some(warning) = pending.take() {
                flush(warning, Some(location));
            }
            continue;
        }
        if let Some(warning) = pending.take() {
            flush(warning, None);
        }
        if let Some(warning) = line.strip_prefix("warning: ") {
            // Skip cargo's "`crate` (lib) generated N warnings" summary.
            if !(warning.contains(") generated ") && warning.contains(" warning")) {
                pending = Some(warning);
            }
        }
    }
    if let Some(warning) = pending {
        flush(warning, None);
    }
}

fn componentize(core: &[u8]) -> Result<Vec<u8>, String> {
    wit_component::ComponentEncoder::default()
        .module(core)
        .and_then(|encoder| encoder.validate(true).encode())
        .map_err(|e| format!("cannot turn the engine module into a component: {e:#}"))
}

/// The version of `package` recorded in `Cargo.lock`, if exactly one is.
fn locked_version(lock: &Path, package: &str) -> Option<String> {
    let text = fs::read_to_string(lock).ok()?;
    let wanted = format!("name = \"{package}\"");
    let mut versions = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == wanted {
            let version = lines.next()?.trim();
            let version = version.strip_prefix("version = \"")?.strip_suffix('"')?;
            versions.push(version.to_string());
        }
    }
    match versions.as_slice() {
        [only] => Some(only.clone()),
        _ => None,
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(64);
    for byte in Sha256::digest(bytes) {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}
