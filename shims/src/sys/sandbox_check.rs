//! What the kernel answers about one process for the Seatbelt membership sweep, as raw data:
//! filled in by `sys::macos` (`sandbox_check`, libproc), judged by `crate::seatbelt`
//! (`is_member`, which re-exports it). Plain data on every OS, so the judgement is tested
//! anywhere.

/// What the kernel said about one process, for `seatbelt::is_member`. The `sandbox_check`
/// results are raw: 1 = sandboxed / denied, 0 = not sandboxed / allowed, anything else an
/// error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberCheck {
    /// The process runs as the supervisor's effective uid (the only ones it may signal, and the
    /// only ones a run can have started without a setuid program, which the profile forbids
    /// creating).
    pub same_uid: bool,
    /// The process has exited and awaits its parent: nothing left to kill.
    pub zombie: bool,
    /// `sandbox_check(pid, NULL, SANDBOX_FILTER_NONE)`.
    pub sandboxed: i32,
    /// `sandbox_check(pid, "file-read-data", SANDBOX_FILTER_PATH | SANDBOX_CHECK_NO_REPORT,
    /// canary.deny)`.
    pub deny_canary: i32,
    /// The same check on `canary.allow`.
    pub allow_canary: i32,
}
