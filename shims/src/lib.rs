//! Palisade's backend shims: each backend is a pure `plan → mechanism` function (an argv, a
//! ruleset, a filter program) plus a small exec/supervise step that fails closed when the kernel
//! does not enforce what was asked.
//!
//! Key design decision: the shims know neither the engine nor the CLI. Their input is a
//! [`plan::LaunchPlan`] (resolved absolute paths, a network mode, budgets) plus facts the host
//! measured (which paths exist, which host sockets are listening), so every mechanism can be
//! snapshot-tested on any machine, and only the exec step touches the kernel.
//!
//! The two halves:
//! - The plans, pure: [`plan`] (the input), [`fsfacts`] (the measured facts), [`bwrap`] (the
//!   bubblewrap argv and the mount plan Docker shares), [`seccomp`] (one rule table compiled to
//!   BPF and to Docker's OCI profile), [`landlock`] (the ruleset; Linux), [`seatbelt`] (the SBPL
//!   profile and the macOS membership sweep), [`docker`] (the `docker run` argv, the supervised
//!   run and the one client of the daemon's API), [`path`] (the one `PATH` search of the
//!   workspace), [`landlock_abi`] (which ABI brought which right).
//! - The launch: [`supervise`] (launch, budgets, signals, leave nothing behind; its Linux
//!   supervisor is a child subreaper with per-run cgroups), [`pgroup`] (the process-group
//!   supervisor macOS uses), [`init`] (`palisade __sandbox-init`, the PID-namespace init of the
//!   Landlock and direct mechanisms; Linux), [`cgroup`] (Linux), and the signal self-pipe the
//!   supervisors share (`signals`).
//!
//! Everything unsafe in the crate is in `sys`: thin system-call wrappers, each unsafe block with
//! the reason it is sound (`// SAFETY:`), including the code that runs in a forked child before
//! `execve`. Every other module is declared `#[forbid(unsafe_code)]` below, which an `allow`
//! inside it cannot undo.
//!
//! Portability: the pure modules (`plan`, `bwrap`, `fsfacts`, `seccomp`'s program builder,
//! `seatbelt`) and the supervision types compile on every Unix, so the macOS path type-checks
//! in CI (`cargo check --target aarch64-apple-darwin`). What needs the Linux kernel — cgroups,
//! the PID-namespace init, Landlock, installing seccomp, the subreaper supervisor — is
//! `#[cfg(target_os = "linux")]`; `pgroup` is the process-group supervisor macOS uses, and it is
//! compiled (and tested) on Linux too.

/// Like `eprintln!`, but a closed or broken stderr is not a panic: Palisade's stderr is often a
/// pipe to an agent runner that may go away mid-run, and a supervisor that panicked there would
/// leave its run's tree unreaped and its outcome unrecorded.
#[cfg_attr(
    not(target_os = "linux"),
    allow(unused_macros, reason = "its users are the Linux-only modules")
)]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// This build of the shims (a digest of their sources, `build.rs`). The sandbox's init may run
/// from the small `palisade-init` beside `palisade`; the launcher passes its own value, and
/// init refuses to set up a sandbox for a launcher from another build.
pub const BUILD: &str = env!("PALISADE_SHIMS_BUILD");

#[forbid(unsafe_code)]
pub mod bwrap;
#[cfg(target_os = "linux")]
#[forbid(unsafe_code)]
pub mod cgroup;
#[forbid(unsafe_code)]
pub mod docker;
#[forbid(unsafe_code)]
pub mod fsfacts;
#[cfg(target_os = "linux")]
#[forbid(unsafe_code)]
pub mod fusemask;
#[cfg(target_os = "linux")]
#[forbid(unsafe_code)]
pub mod init;
#[cfg(target_os = "linux")]
#[forbid(unsafe_code)]
pub mod landlock;
#[forbid(unsafe_code)]
pub mod landlock_abi;
#[forbid(unsafe_code)]
pub mod path;
#[forbid(unsafe_code)]
pub mod pgroup;
#[cfg(target_os = "linux")]
#[forbid(unsafe_code)]
pub mod placeholder;
#[forbid(unsafe_code)]
pub mod plan;
#[forbid(unsafe_code)]
pub mod procfile;
#[cfg(target_os = "linux")]
#[forbid(unsafe_code)]
pub mod sandbox_exec;
#[forbid(unsafe_code)]
pub mod seatbelt;
#[forbid(unsafe_code)]
pub mod seccomp;
#[forbid(unsafe_code)]
pub mod signals;
#[forbid(unsafe_code)]
pub mod supervise;
#[allow(
    unsafe_code,
    reason = "the system-call wrappers: the crate's only unsafe code, each block with its SAFETY comment"
)]
mod sys;
#[forbid(unsafe_code)]
pub mod unix_socket;
#[cfg(target_os = "linux")]
#[forbid(unsafe_code)]
pub(crate) mod wire;
