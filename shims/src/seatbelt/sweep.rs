//! The run's membership canaries and the sweep's finder: a per-run [`RunToken`] names two
//! sibling paths ([`Canary`]) that every profile of the run treats oppositely, and
//! [`is_member`] judges what the kernel's `sandbox_check` says about a process against them
//! (see "Membership canaries" in the [module documentation](super)). `SandboxMembers` (macOS
//! only) is the [`crate::pgroup::Members`] finder built on them; its system calls are in
//! [`crate::sys`].

use std::fmt::Write as _;
use std::io::{self, Read as _};
#[cfg(target_os = "macos")]
use std::path::Path;
use std::path::PathBuf;

use super::profile::{check_path, normal};
use super::{SeatbeltError, SeatbeltFacts};
use crate::plan::LaunchPlan;
#[cfg(target_os = "macos")]
use crate::sys;

/// A per-run random token: the name of the run's membership canaries (see the module docs).
/// 128 bits as 32 lowercase hex digits, so the names are unguessable and need no quoting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunToken(String);

impl RunToken {
    /// How many random bytes a token holds.
    pub const BYTES: usize = 16;

    /// The token for `bytes` (pure: tests and snapshots use fixed bytes).
    pub fn from_bytes(bytes: [u8; Self::BYTES]) -> RunToken {
        let mut hex = String::with_capacity(Self::BYTES * 2);
        for b in bytes {
            let _ = write!(hex, "{b:02x}");
        }
        RunToken(hex)
    }

    /// A fresh token from the OS's random source (`/dev/urandom`, on every Unix).
    pub fn random() -> io::Result<RunToken> {
        let mut bytes = [0_u8; Self::BYTES];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(RunToken::from_bytes(bytes))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The run's membership canaries: two sibling paths inside a directory named after the
/// [`RunToken`], under the run temp dir's resolved path (the spelling Seatbelt matches, and
/// the one `sandbox_check` is asked about). Nothing is created there: the rules match the path
/// strings, and the profile forbids the command to create anything under `dir`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Canary {
    /// `<resolved run temp dir>/.palisade-sandbox-<token>`: unwritable.
    pub dir: PathBuf,
    /// `dir/deny`: unreadable under this run's profile.
    pub deny: PathBuf,
    /// `dir/allow`: readable under this run's profile.
    pub allow: PathBuf,
}

/// The canaries of `plan`'s run under `token`; refuses what [`profile`](super::profile()) would refuse for the
/// run temp dir (no facts for it, a path a profile cannot name).
pub fn canary(
    plan: &LaunchPlan,
    facts: &SeatbeltFacts,
    token: &RunToken,
) -> Result<Canary, SeatbeltError> {
    let fact = facts
        .paths
        .get(&plan.run_temp_dir)
        .ok_or_else(|| SeatbeltError::MissingFact(plan.run_temp_dir.clone()))?;
    let dir = normal(&fact.real).join(format!(".palisade-sandbox-{}", token.as_str()));
    check_path(&dir)?;
    Ok(Canary {
        deny: dir.join("deny"),
        allow: dir.join("allow"),
        dir,
    })
}

/// What the kernel said about one process, for [`is_member`] (defined beside the system calls
/// that fill it in).
pub use crate::sys::sandbox_check::MemberCheck;

/// Whether the process carries this run's profile: same uid, alive, sandboxed, the deny canary
/// denied and the allow canary allowed. Every unclear answer (an error from `sandbox_check`)
/// counts as *not* a member: the sweep never kills a process it is not sure of.
pub fn is_member(check: &MemberCheck) -> bool {
    check.same_uid
        && !check.zombie
        && check.sandboxed == 1
        && check.deny_canary == 1
        && check.allow_canary == 0
}

/// The run's processes as the kernel's sandbox sees them, for [`crate::pgroup`]'s cleanup
/// sweep: every live process of this user whose sandbox answers the run's [`Canary`] the way
/// this run's profile does, wherever it is in the process tree. macOS only (libproc and
/// libsystem_sandbox); type-checked, not run, in this repository.
#[cfg(target_os = "macos")]
pub struct SandboxMembers {
    deny: std::ffi::CString,
    allow: std::ffi::CString,
}

#[cfg(target_os = "macos")]
impl SandboxMembers {
    /// The finder for `canary` (whose paths [`canary`] already checked: no NUL byte).
    pub fn new(canary: &Canary) -> Result<SandboxMembers, SeatbeltError> {
        let c = |path: &Path| {
            path.to_str()
                .and_then(|text| std::ffi::CString::new(text).ok())
                .ok_or_else(|| SeatbeltError::ControlCharacter(path.display().to_string()))
        };
        Ok(SandboxMembers {
            deny: c(&canary.deny)?,
            allow: c(&canary.allow)?,
        })
    }
}

#[cfg(target_os = "macos")]
impl crate::pgroup::Members for SandboxMembers {
    fn find(&self) -> Vec<libc::pid_t> {
        let me = sys::getpid();
        sys::macos::all_pids()
            .into_iter()
            .filter(|pid| *pid > 1 && *pid != me)
            .filter(|pid| is_member(&sys::macos::member_check(*pid, &self.deny, &self.allow)))
            .collect()
    }
}
