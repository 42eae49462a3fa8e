//! The sandbox's init binary a Landlock, direct or bwrap launch runs: `palisade-init` beside
//! `palisade`, else this binary itself.

/// The file name of the init binary installed beside `palisade` (`src/init_main.rs`).
pub const INIT_BINARY: &str = "palisade-init";

/// The binary that runs the sandbox's init, PID 1 and seccomp stub: `palisade-init` beside this
/// binary when it is there (no WebAssembly runtime in it: each run starts it about a
/// millisecond sooner), else this binary itself, which has the same subcommands from the same
/// code. Either refuses a launcher of another build ([`palisade_shims::BUILD`]), so an init
/// left from another install fails the run instead of applying its own rules.
pub(super) struct SandboxInitBinary {
    pub(super) path: std::path::PathBuf,
    /// What the outcome's `pid1.init` records: `palisade-init` or `palisade`.
    pub(super) name: &'static str,
}

impl SandboxInitBinary {
    /// `located` (`palisade-init` beside this binary, found while measuring:
    /// [`locate_sandbox_init`]), else `own`: how the launched program names this binary (bwrap
    /// binds a path of the host; init can exec `/proc/self/exe`, which stays this very version
    /// even if an upgrade replaces the file meanwhile).
    pub(super) fn choose(located: Option<&std::path::Path>, own: std::path::PathBuf) -> Self {
        match located {
            Some(beside) => SandboxInitBinary {
                path: beside.to_path_buf(),
                name: INIT_BINARY,
            },
            None => SandboxInitBinary {
                path: own,
                name: "palisade",
            },
        }
    }
}

/// `palisade-init` beside this binary, when it is there and executable: its real path (this
/// binary's directory is one already; a link named `palisade-init` is resolved), which a bwrap
/// sandbox runs it from when its read-only root shows it there
/// ([`palisade_shims::bwrap::exe_in_place`]).
pub fn locate_sandbox_init() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut beside = std::env::current_exe().ok()?.with_file_name(INIT_BINARY);
    let mut meta = std::fs::symlink_metadata(&beside).ok()?;
    if meta.is_symlink() {
        beside = std::fs::canonicalize(&beside).ok()?;
        meta = std::fs::metadata(&beside).ok()?;
    }
    (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(beside)
}
