//! Links the C runtime's libraries statically where that shortens every start.
//!
//! - `palisade-init` is linked static-pie on Linux with glibc. Every sandboxed run executes it
//!   once or twice (PID 1 of a bwrap sandbox, the seccomp stub, the init of a Landlock one).
//!   Linked dynamically, each start first loads `libc.so.6` and `libgcc_s.so.1`.
//! - `palisade` keeps glibc dynamic (the proxy resolves names through glibc's NSS, which a
//!   static glibc can only do with the very same glibc installed) but links libgcc's unwinder
//!   statically, as gcc's `-static-libgcc` does: one library less to load, and no
//!   `__cpu_indicator_init` constructor, whose CPUID is a trap under a hypervisor.
//!
//! Measured on the 2-core VM of #38 (600 interleaved starts of a Rust `main` that returns at
//! once): 1.71 ms with `libc.so.6` and `libgcc_s.so.1`, 1.48 ms with `libc.so.6` alone, 1.18 ms
//! static-pie, against 1.27 ms for `/bin/true`. Static-pie keeps address-space randomization.
//!
//! `-C target-feature=+crt-static` is what would ask rustc for a static binary, but stable
//! Cargo cannot give it to one binary: in `.cargo/config.toml` it also reaches the proc-macros,
//! which cannot be built static. Link arguments can be given to one binary, so this asks for
//! the same link with them: a search directory, first in line, holding a small linker script
//! per library the standard library links (`-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc`, each
//! asked for dynamically), naming the static archive instead (`libgcc_s` becomes
//! `libgcc_eh.a` and `libgcc.a`, as in rustc's own crt-static link); for `palisade-init` also
//! `-static-pie` (the static start files, `rcrt1.o`, and no dynamic loader).
//!
//! When the C compiler cannot find a static archive (no `libc6-dev`), the binaries are linked
//! dynamically as before, with a cargo warning: they work the same, only start slower.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary linked static-pie.
const INIT_BINARY: &str = "palisade-init";

/// The binary that links libgcc statically and glibc dynamically.
const CLI_BINARY: &str = "palisade";

/// libgcc's unwinder, which the standard library asks for as `-lgcc_s`.
const LIBGCC: (&str, &[&str]) = ("gcc_s", &["libgcc_eh.a", "libgcc.a"]);

/// glibc's libraries the standard library asks for.
const GLIBC: [(&str, &[&str]); 6] = [
    ("util", &["libutil.a"]),
    ("rt", &["librt.a"]),
    ("pthread", &["libpthread.a"]),
    ("m", &["libm.a"]),
    ("dl", &["libdl.a"]),
    ("c", &["libc.a"]),
];

/// Emits the link arguments of both binaries, or a warning saying why one stays dynamic. Does
/// nothing for a target other than Linux with glibc.
pub fn link_statically(out_dir: &Path) {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os != "linux" || target_env != "gnu" {
        return;
    }
    // The archives are found by asking the C compiler, which knows the host's: a cross build
    // links as before.
    if std::env::var("TARGET").ok() != std::env::var("HOST").ok() {
        println!(
            "cargo::warning=cross build: {CLI_BINARY} and {INIT_BINARY} are linked dynamically"
        );
        return;
    }
    let dir = out_dir.join("static-link");
    match write_scripts(&dir.join("libgcc"), &[LIBGCC]) {
        Ok(libgcc) => println!(
            "cargo::rustc-link-arg-bin={CLI_BINARY}=-L{}",
            libgcc.display()
        ),
        Err(why) => println!(
            "cargo::warning={CLI_BINARY} loads libgcc_s.so.1 at each start (about 0.2 ms): {why}"
        ),
    }
    let all: Vec<_> = std::iter::once(LIBGCC).chain(GLIBC).collect();
    match write_scripts(&dir.join("all"), &all) {
        Ok(all) => {
            println!("cargo::rustc-link-arg-bin={INIT_BINARY}=-static-pie");
            println!(
                "cargo::rustc-link-arg-bin={INIT_BINARY}=-L{}",
                all.display()
            );
        }
        Err(why) => println!(
            "cargo::warning={INIT_BINARY} is linked dynamically (it starts about 0.5 ms slower): {why}"
        ),
    }
}

/// Writes `lib<name>.a` in `dir` for each library: a linker script naming the static archives.
fn write_scripts(dir: &Path, libraries: &[(&str, &[&str])]) -> Result<PathBuf, String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    for (name, archives) in libraries {
        let mut inputs = Vec::new();
        for archive in *archives {
            inputs.push(archive_path(archive)?.display().to_string());
        }
        let script = dir.join(format!("lib{name}.a"));
        fs::write(&script, format!("INPUT({})\n", inputs.join(" ")))
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
