//! Links `palisade-init` statically (static-pie) on Linux with glibc.
//!
//! Every sandboxed run executes `palisade-init` once or twice (PID 1 of a bwrap sandbox, the
//! seccomp stub, the init of a Landlock one). Linked dynamically, each start loads `libc.so.6`
//! and `libgcc_s.so.1` first (whose constructor runs CPUID, a trap under a hypervisor): on the
//! 2-core VM this was measured on, a Rust `main` that returns at once starts in 1.16 ms
//! dynamic and 0.76 ms static-pie, and a bwrap run's init costs 1.26 ms over bwrap's own PID 1
//! dynamic against 0.52 ms static. Static-pie keeps address-space randomization.
//!
//! `-C target-feature=+crt-static` is what would ask rustc for this, but stable Cargo cannot
//! give it to one binary: in `.cargo/config.toml` it also reaches the proc-macros, which cannot
//! be built static. Link arguments can be given to one binary, so this asks for the same link
//! with them:
//!
//! - `-static-pie`: the static start files (`rcrt1.o`) and no dynamic loader;
//! - a search directory, first in line, holding one small linker script per library the
//!   standard library links (`-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc`, all asked for
//!   dynamically), each naming the static archive instead: what rustc links under crt-static
//!   (`libgcc_s` becomes `libgcc_eh.a` and `libgcc.a`, as rustc's own crt-static link does).
//!
//! Only `palisade-init` is linked this way. `palisade` stays dynamic: the proxy resolves names
//! through glibc's NSS, which a static glibc can only do with the very same glibc installed.
//!
//! When the C compiler cannot find a static archive (no `libc6-dev`), the init is linked
//! dynamically as before, with a cargo warning: it works the same, only slower to start.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary linked this way.
const INIT_BINARY: &str = "palisade-init";

/// Each library the standard library asks the linker for, and the static archives that stand
/// in for it.
const LIBRARIES: [(&str, &[&str]); 7] = [
    ("gcc_s", &["libgcc_eh.a", "libgcc.a"]),
    ("util", &["libutil.a"]),
    ("rt", &["librt.a"]),
    ("pthread", &["libpthread.a"]),
    ("m", &["libm.a"]),
    ("dl", &["libdl.a"]),
    ("c", &["libc.a"]),
];

/// Emits the link arguments for a static `palisade-init`, or a warning saying why it stays
/// dynamic. Does nothing for a target other than Linux with glibc.
pub fn link_init_statically(out_dir: &Path) {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os != "linux" || target_env != "gnu" {
        return;
    }
    match write_scripts(&out_dir.join("static-init-libs")) {
        Ok(dir) => {
            println!("cargo::rustc-link-arg-bin={INIT_BINARY}=-static-pie");
            println!(
                "cargo::rustc-link-arg-bin={INIT_BINARY}=-L{}",
                dir.display()
            );
        }
        Err(why) => println!(
            "cargo::warning={INIT_BINARY} is linked dynamically (it starts about 0.4 ms slower): {why}"
        ),
    }
}

/// Writes `lib<name>.a` for each library: a linker script naming the static archives.
fn write_scripts(dir: &Path) -> Result<PathBuf, String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    for (name, archives) in LIBRARIES {
        let mut inputs = Vec::new();
        for archive in archives {
            inputs.push(archive_path(archive)?);
        }
        let inputs = inputs
            .iter()
            .map(|path| path.display().to_string())
            .collect::<Vec<_>>()
            .join(" ");
        let script = dir.join(format!("lib{name}.a"));
        fs::write(&script, format!("INPUT({inputs})\n"))
            .map_err(|e| format!("cannot write `{}`: {e}", script.display()))?;
    }
    Ok(dir.to_path_buf())
}

/// Where the C compiler (rustc's linker driver) finds `archive`.
fn archive_path(archive: &str) -> Result<PathBuf, String> {
    let compiler = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| String::from("cc"));
    let output = Command::new(&compiler)
        .arg(format!("-print-file-name={archive}"))
        .output()
        .map_err(|e| format!("cannot run `{compiler}`: {e}"))?;
    let printed = String::from_utf8_lossy(&output.stdout).trim().to_string();
    // `-print-file-name` prints the bare name back when it finds nothing.
    let path = PathBuf::from(&printed);
    if !output.status.success() || !path.is_absolute() || !path.is_file() {
        return Err(format!(
            "`{compiler}` finds no `{archive}` (install libc6-dev)"
        ));
    }
    Ok(fs::canonicalize(&path).unwrap_or(path))
}
