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
    /// `palisade-init` beside this binary, else `own`: how the launched program names this
    /// binary (bwrap binds a path of the host; init can exec `/proc/self/exe`, which stays this
    /// very version even if an upgrade replaces the file meanwhile).
    pub(super) fn find(own: std::path::PathBuf) -> std::io::Result<SandboxInitBinary> {
        use std::os::unix::fs::PermissionsExt as _;
        let exe = std::env::current_exe()?;
        let beside = exe.with_file_name(INIT_BINARY);
        match std::fs::metadata(&beside) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                Ok(SandboxInitBinary {
                    path: beside,
                    name: INIT_BINARY,
                })
            }
            _ => Ok(SandboxInitBinary {
                path: own,
                name: "palisade",
            }),
        }
    }
}
