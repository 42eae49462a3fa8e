//! The `palisade` process exit codes, as a closed set.
//!
//! Scripts and controllers branch on these, so a refusal (the policy was understood and no
//! backend fits), an invalid policy (the document is wrong) and an internal failure (Palisade
//! itself broke) must never share a code. `palisade run` (later) passes the command's own status
//! through and keeps 125 for "Palisade failed or refused; nothing was launched".

/// Why `palisade` exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The command did what was asked: a decision was made, every record reproduced, …
    Success,
    /// Palisade itself failed: I/O, a probe or engine fault, malformed host facts or records.
    Internal,
    /// The command line was wrong (clap's own usage errors also exit 2).
    Usage,
    /// `SANDBOX_POLICY_INVALID`: the policy document is invalid.
    PolicyInvalid,
    /// `SANDBOX_BACKEND_UNAVAILABLE` or `SANDBOX_CAPABILITY_INSUFFICIENT` (nothing fits), or
    /// the host refused what was asked (`SANDBOX_WRITABLE_ROOT_UNSAFE`,
    /// `SANDBOX_UNIX_SOCKET_REFUSED`, `EXECUTION_MODE_FORBIDDEN`, `HOST_CONFIG_FORBIDDEN`, `HOST_FACTS_MISMATCH`).
    Refused,
    /// `palisade replay`: at least one record diverged or was invalid.
    Diverged,
    /// `palisade run`: the command's own status (128+N when signal N ended it).
    Command(u8),
    /// `palisade run`: Palisade failed or refused; nothing was launched (as `docker run`).
    NotLaunched,
}

impl Exit {
    /// The numeric process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Internal => 1,
            Exit::Usage => 2,
            Exit::PolicyInvalid => 3,
            Exit::Refused => 4,
            Exit::Diverged => 5,
            Exit::Command(status) => status,
            Exit::NotLaunched => 125,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}
