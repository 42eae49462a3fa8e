//! `macos-seatbelt`: the SBPL profile palisade hands to `/usr/bin/sandbox-exec -p`.
//!
//! [`profile`] is pure and deterministic: a [`LaunchPlan`] plus the [`SeatbeltFacts`] the host
//! measured (where each named path really is) become one profile string, so the exact text is
//! snapshot-tested on every OS even though Seatbelt itself only runs on macOS. [`measure`] is
//! the host-side step that resolves the plan's paths; [`argv`] is what follows `sandbox-exec`.
//!
//! # How Seatbelt decides, and what that means for the order of rules
//!
//! SBPL is a small Scheme: `(allow OPERATION FILTER…)` / `(deny OPERATION FILTER…)`. For one
//! operation the **last matching rule wins** (a later rule overrides an earlier one), and
//! `(deny default)` makes every operation that no rule matches a refusal. Seatbelt matches file
//! rules against the path the kernel resolved (symlinks followed: `/tmp/x` is seen as
//! `/private/tmp/x`), so allowances name the resolved path only, and denials name the path as
//! the plan spells it *and* as it really is. The profile is laid out as:
//!
//! 1. `(version 1)` then `(deny default)`: closed unless allowed below.
//! 2. Allowances, each preceded by a `;` comment saying why: process execution and forking,
//!    reading files, the few sysctls, Mach services and IPC ordinary commands need, writing to
//!    the terminal and `/dev/null`, writing under the writable roots, and the network mode.
//! 3. Denials, after every allowance so that they win: no setuid/setgid bits; no writes to
//!    protected paths or to the directories and symlinks leading to protected and denied paths
//!    inside writable roots (*pins*: renaming `.loopwright` aside would carry
//!    `.loopwright/policies` out of its protected path); no reading, writing, executing or
//!    connecting to sockets under denied paths.
//! 4. Membership canaries (see below): one read allowance just before the denials, and the
//!    canary denials last of all.
//!
//! `subpath` matches a path and everything below it; `literal` matches exactly one path. Masks
//! use `subpath` (a protected or denied name stays covered whether it is a file, a directory,
//! or missing and created later); pins use `literal` (the pinned directory itself cannot be
//! renamed, removed or replaced, while files inside it stay as writable as the root makes them).
//!
//! # Membership canaries: finding the run's processes wherever they went
//!
//! A Seatbelt sandbox is inherited by every descendant and cannot be shed, whereas the process
//! group the supervisor starts can be left (`setsid`, `setpgid`: a double-forked daemon). So
//! every profile carries two rules on run-unique paths under a per-run random [`RunToken`]
//! (see [`Canary`]): `DIR/deny` unreadable and `DIR/allow` readable, with
//! `DIR = <resolved run temp dir>/.palisade-sandbox-<token>`. Asking the kernel, with
//! `sandbox_check`, how a process's sandbox answers for those two sibling paths tells whether
//! it carries *this run's* profile ([`is_member`]): another profile would have to name both
//! random names, and treat them oppositely, to answer the same way. The cleanup sweep of
//! [`crate::pgroup`] kills every such process (`SandboxMembers`, macOS only). The canary
//! directory is also unwritable, so a member cannot put a file or symlink there.
//!
//! # Escaping
//!
//! Every path is written as an SBPL string literal by [`quote`]: `\` and `"` are escaped, and a
//! path with a control character (newline, tab, DEL, C1 — anything `char::is_control`), a NUL
//! byte or invalid UTF-8 is refused rather than escaped, because Seatbelt's reader is not
//! documented to accept escapes beyond `\\` and `\"`. No user-controlled text ever appears
//! outside a string literal, and comments are fixed text, so no path can inject SBPL.
//!
//! # Refusals (an error, never a weaker profile)
//!
//! Relative paths, `..` components, NUL bytes, control characters, non-UTF-8 paths; facts that
//! do not cover the plan; a denied or protected path that contains a writable root (the deny
//! would win and the command could not write its workspace); a denied file, or a protected file
//! inside a writable root, with more than one hard link (Seatbelt matches paths, so the other
//! names stay reachable).
//!
//! # Known limits
//!
//! - `loopback-only` is the *host's* loopback: macOS has no network namespaces, so services
//!   listening on the host's 127.0.0.1 are reachable (bwrap gives the sandbox its own loopback).
//! - Seatbelt compares path strings: a denied path spelled in another Unicode normalisation or
//!   letter case than the name on disk (APFS is insensitive to both by default) may not match.
//!   The host resolves symlinks; it does not re-spell names.
//! - Hard links created *after* launch to a denied file inside a writable root are not
//!   prevented by a rule of this profile; existing ones are refused.
//! - The membership test relies on `sandbox_check` (a private but long-stable libsystem_sandbox
//!   call, used by WebKit and Chromium) answering path checks for another process of the same
//!   user, for paths that do not exist. That is type-checked here, never run: this repository
//!   has no Mac.
//! - The rules were written from Apple's and others' public profiles; this repository cannot run
//!   Seatbelt, so an operation name that a macOS release does not know makes `sandbox-exec` fail
//!   before the command starts (fail closed), never a weaker sandbox.
//!
//! # Layout
//!
//! `profile` holds the pure profile generation ([`profile()`], [`quote`]); `sweep` the run's
//! membership canaries and the macOS finder the cleanup sweep uses ([`RunToken`], [`Canary`],
//! [`is_member`], `SandboxMembers`), whose system calls are the crate's `sys` module's.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::fsfacts::{FsFactsError, PathFact, PathKind};
use crate::plan::{LaunchPlan, Network};

mod profile;
mod sweep;

use profile::named_paths;
pub use profile::{profile, quote};
#[cfg(target_os = "macos")]
pub use sweep::SandboxMembers;
pub use sweep::{Canary, MemberCheck, RunToken, canary, is_member};

/// Where macOS ships the Seatbelt front end; it is never searched for in `PATH`.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// Where each path the plan names really is, measured by the host just before launch.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SeatbeltFacts {
    /// Every path the plan names (workspace, writable roots, run temp dir, denied and protected
    /// paths), keyed by the path exactly as the plan spells it.
    pub paths: BTreeMap<PathBuf, PathFact>,
}

/// Why [`profile`] refused to build a profile.
#[derive(Debug, thiserror::Error)]
pub enum SeatbeltError {
    /// A network namespace of the sandbox's own (with or without a bridge for forwarded ports
    /// or filtered egress) does not exist on macOS; the engine plans `loopback-only` here as
    /// the host's loopback and never plans filtered egress (the probe does not claim it).
    #[error("macos-seatbelt has no network namespace: `{0}` cannot be applied")]
    OwnNetwork(&'static str),
    #[error("path `{}` is not absolute", .0.display())]
    RelativePath(PathBuf),
    #[error("path `{}` contains a `..` component", .0.display())]
    ParentComponent(PathBuf),
    #[error("path `{}` is not valid UTF-8; a seatbelt profile cannot name it", .0.display())]
    NotUtf8(PathBuf),
    #[error("path `{}` contains a NUL byte or control character; a seatbelt profile cannot name it safely", .0.escape_debug())]
    ControlCharacter(String),
    #[error("no filesystem facts for `{}`: measure the plan before building the profile", .0.display())]
    MissingFact(PathBuf),
    #[error("{what} path `{}` contains writable root `{}`", path.display(), root.display())]
    MaskContainsWritable {
        what: &'static str,
        path: PathBuf,
        root: PathBuf,
    },
    #[error("`{}` has {links} hard links; the other names would stay reachable", path.display())]
    HardLinks { path: PathBuf, links: u64 },
    #[error("the command is empty")]
    EmptyCommand,
    /// Chosen host sockets are not wired for Seatbelt (the engine never plans one here).
    #[error("macos-seatbelt does not let host socket `{}` through; refusing", .0.display())]
    HostSocket(PathBuf),
}

/// Resolves every path `plan` names, for [`profile`]. Read-only: it stats and reads links.
pub fn measure(plan: &LaunchPlan) -> Result<SeatbeltFacts, FsFactsError> {
    let mut paths = BTreeMap::new();
    for path in named_paths(plan) {
        paths.insert(path.clone(), crate::fsfacts::resolve(path)?);
    }
    Ok(SeatbeltFacts { paths })
}

/// The arguments after `sandbox-exec` itself: the profile, then `--` and the command, so a
/// command starting with `-` is never read as an option.
pub fn argv(profile: &str, plan: &LaunchPlan) -> Result<Vec<OsString>, SeatbeltError> {
    if plan.command.is_empty() {
        return Err(SeatbeltError::EmptyCommand);
    }
    let mut args = vec![OsString::from("-p"), OsString::from(profile), "--".into()];
    args.extend(plan.command.iter().cloned());
    Ok(args)
}

/// Profiles for the host's probe to try with `sandbox-exec -p PROFILE /usr/bin/true`: one per
/// network mode, each with a writable root, a protected path, a pin and a denied path, so every
/// operation and filter [`profile`] emits is compiled by this macOS's Seatbelt. A release that
/// does not know one makes the probe report the backend unavailable (with Seatbelt's message)
/// instead of every launch failing. The paths exist on every Mac and nothing is written.
pub fn trial_profiles() -> Result<Vec<String>, SeatbeltError> {
    let root = PathBuf::from("/private/var/empty");
    let fact = |path: &Path, kind: PathKind| PathFact {
        kind,
        real: path.to_path_buf(),
        symlinks: Vec::new(),
    };
    let protected = root.join("palisade-trial/protected");
    let denied = root.join("palisade-trial/denied");
    let absent = |path: &Path| PathKind::Missing {
        first_missing: root.join("palisade-trial"),
        parent_is_dir: path.parent().is_some(),
    };
    let facts = SeatbeltFacts {
        paths: BTreeMap::from([
            (root.clone(), fact(&root, PathKind::Dir)),
            (protected.clone(), fact(&protected, absent(&protected))),
            (denied.clone(), fact(&denied, absent(&denied))),
        ]),
    };
    [Network::None, Network::HostLoopback, Network::AllowOutbound]
        .into_iter()
        .map(|network| {
            let plan = LaunchPlan {
                mechanism: crate::plan::Mechanism::Seatbelt,
                network,
                workspace: root.clone(),
                writable_roots: vec![root.clone()],
                read_only_root: true,
                denied_read_paths: vec![denied.clone()],
                protected_paths: vec![protected.clone()],
                syscall_filter: false,
                command: vec![OsString::from("/usr/bin/true")],
                env: Vec::new(),
                run_temp_dir: root.clone(),
                budgets: crate::plan::Budgets::default(),
                unix_sockets: Vec::new(),
            };
            profile(&plan, &facts, &RunToken::from_bytes([0; RunToken::BYTES]))
        })
        .collect()
}

#[cfg(test)]
mod tests;
