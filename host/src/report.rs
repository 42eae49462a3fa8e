//! How `palisade` reports failures: one line with a machine-readable code, optional detail
//! lines, `hint:` lines, all on stderr. stdout carries data only.

use crate::exit::Exit;

/// The closed set of codes `palisade` prints. The first five come from the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    SandboxPolicyInvalid,
    SandboxBackendUnavailable,
    SandboxCapabilityInsufficient,
    HostFactsInvalid,
    /// The engine refused an execution mode the host forbids (`--execution-mode workspace`).
    ExecutionModeForbidden,
    /// The engine refused a writable root that contains nothing (`/`, the home or above).
    SandboxWritableRootUnsafe,
    /// The engine refused a host Unix socket the policy allows (not a socket, or one that grants
    /// root without the host configuration's allowance).
    SandboxUnixSocketRefused,
    /// A host configuration file is unusable: unreadable, too large, not YAML, an unknown key or
    /// a bad value, or a per-user file that loosens the system one. Nothing was decided.
    HostConfigInvalid,
    /// A command-line flag asks for what the host configuration forbids. Nothing was decided.
    HostConfigForbidden,
    /// The command line does not parse: an unknown flag, a flag value of the wrong type, a
    /// missing argument (clap's own usage errors).
    UsageInvalid,
    /// A file or argument Palisade was given could not be used (unreadable, not JSON, …).
    InputInvalid,
    /// A decision input (`run --input`) claims more than this host measured.
    HostFactsMismatch,
    /// Palisade itself failed (engine load or trap, audit write, probe thread).
    Internal,
    /// `palisade replay` found records that did not reproduce.
    ReplayDiverged,
    /// `palisade replay` found the audit file's hash chain broken (a line changed, removed,
    /// inserted or moved), every record reproducing.
    AuditChainBroken,
    /// `palisade replay --trusted-key` found a line no trusted key sealed: unsigned, signed by
    /// another key, or a seal that does not verify (every record reproducing, the chain whole).
    AuditSignatureInvalid,
    /// The runtime profile file is unreadable or invalid.
    DockerProfileInvalid,
    /// The chosen runtime profile pins no image ID or digest.
    DockerImageUnpinned,
    /// The profile's image is not on the daemon (palisade never pulls).
    DockerImageMissing,
    /// The profile's image is not the pinned one.
    DockerImageMismatch,
    /// The daemon did not answer when the image was checked before launching.
    DockerDaemonUnavailable,
}

impl ErrorCode {
    /// Every code.
    pub const ALL: [ErrorCode; 21] = [
        ErrorCode::SandboxPolicyInvalid,
        ErrorCode::SandboxBackendUnavailable,
        ErrorCode::SandboxCapabilityInsufficient,
        ErrorCode::HostFactsInvalid,
        ErrorCode::ExecutionModeForbidden,
        ErrorCode::SandboxWritableRootUnsafe,
        ErrorCode::SandboxUnixSocketRefused,
        ErrorCode::HostConfigInvalid,
        ErrorCode::HostConfigForbidden,
        ErrorCode::UsageInvalid,
        ErrorCode::InputInvalid,
        ErrorCode::HostFactsMismatch,
        ErrorCode::Internal,
        ErrorCode::ReplayDiverged,
        ErrorCode::AuditChainBroken,
        ErrorCode::AuditSignatureInvalid,
        ErrorCode::DockerProfileInvalid,
        ErrorCode::DockerImageUnpinned,
        ErrorCode::DockerImageMissing,
        ErrorCode::DockerImageMismatch,
        ErrorCode::DockerDaemonUnavailable,
    ];

    /// The code as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::SandboxPolicyInvalid => "SANDBOX_POLICY_INVALID",
            ErrorCode::SandboxBackendUnavailable => "SANDBOX_BACKEND_UNAVAILABLE",
            ErrorCode::SandboxCapabilityInsufficient => "SANDBOX_CAPABILITY_INSUFFICIENT",
            ErrorCode::HostFactsInvalid => "HOST_FACTS_INVALID",
            ErrorCode::ExecutionModeForbidden => "EXECUTION_MODE_FORBIDDEN",
            ErrorCode::SandboxWritableRootUnsafe => "SANDBOX_WRITABLE_ROOT_UNSAFE",
            ErrorCode::SandboxUnixSocketRefused => "SANDBOX_UNIX_SOCKET_REFUSED",
            ErrorCode::HostConfigInvalid => "HOST_CONFIG_INVALID",
            ErrorCode::HostConfigForbidden => "HOST_CONFIG_FORBIDDEN",
            ErrorCode::UsageInvalid => "PALISADE_USAGE_INVALID",
            ErrorCode::InputInvalid => "PALISADE_INPUT_INVALID",
            ErrorCode::HostFactsMismatch => "HOST_FACTS_MISMATCH",
            ErrorCode::Internal => "PALISADE_INTERNAL",
            ErrorCode::ReplayDiverged => "PALISADE_REPLAY_DIVERGED",
            ErrorCode::AuditChainBroken => "PALISADE_AUDIT_CHAIN_BROKEN",
            ErrorCode::AuditSignatureInvalid => "PALISADE_AUDIT_SIGNATURE_INVALID",
            ErrorCode::DockerProfileInvalid => "DOCKER_PROFILE_INVALID",
            ErrorCode::DockerImageUnpinned => "DOCKER_IMAGE_UNPINNED",
            ErrorCode::DockerImageMissing => "DOCKER_IMAGE_MISSING",
            ErrorCode::DockerImageMismatch => "DOCKER_IMAGE_MISMATCH",
            ErrorCode::DockerDaemonUnavailable => "DOCKER_DAEMON_UNAVAILABLE",
        }
    }

    /// The process exit status that goes with this code.
    pub fn exit(self) -> Exit {
        match self {
            ErrorCode::SandboxPolicyInvalid => Exit::PolicyInvalid,
            ErrorCode::SandboxBackendUnavailable
            | ErrorCode::SandboxCapabilityInsufficient
            | ErrorCode::ExecutionModeForbidden
            | ErrorCode::SandboxWritableRootUnsafe
            | ErrorCode::SandboxUnixSocketRefused
            | ErrorCode::HostFactsMismatch
            | ErrorCode::HostConfigForbidden => Exit::Refused,
            ErrorCode::HostFactsInvalid
            | ErrorCode::HostConfigInvalid
            | ErrorCode::InputInvalid
            | ErrorCode::Internal
            | ErrorCode::DockerProfileInvalid
            | ErrorCode::DockerImageUnpinned
            | ErrorCode::DockerImageMissing
            | ErrorCode::DockerImageMismatch
            | ErrorCode::DockerDaemonUnavailable => Exit::Internal,
            ErrorCode::ReplayDiverged
            | ErrorCode::AuditChainBroken
            | ErrorCode::AuditSignatureInvalid => Exit::Diverged,
            ErrorCode::UsageInvalid => Exit::Usage,
        }
    }

    /// Maps an engine refusal code.
    pub fn from_refusal(code: palisade_engine::RefusalCode) -> Self {
        use palisade_engine::RefusalCode as R;
        match code {
            R::SandboxPolicyInvalid => ErrorCode::SandboxPolicyInvalid,
            R::SandboxBackendUnavailable => ErrorCode::SandboxBackendUnavailable,
            R::SandboxCapabilityInsufficient => ErrorCode::SandboxCapabilityInsufficient,
            R::HostFactsInvalid => ErrorCode::HostFactsInvalid,
            R::ExecutionModeForbidden => ErrorCode::ExecutionModeForbidden,
            R::SandboxWritableRootUnsafe => ErrorCode::SandboxWritableRootUnsafe,
            R::SandboxUnixSocketRefused => ErrorCode::SandboxUnixSocketRefused,
        }
    }
}

/// A failure to report: `error[CODE]: message`, then details and hints.
#[derive(Debug)]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
    pub details: Vec<String>,
    pub hints: Vec<String>,
}

impl Failure {
    /// The failure as data: `{"error": {"code", "message", "details", "hints"}}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "code": self.code.as_str(),
                "message": self.message,
                "details": self.details,
                "hints": self.hints,
            }
        })
    }

    /// A failure with just a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: one_line(&message.into()),
            details: Vec::new(),
            hints: Vec::new(),
        }
    }

    /// Adds a `hint:` line.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(one_line(&hint.into()));
        self
    }

    /// Adds an indented detail line.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.details.push(one_line(&detail.into()));
        self
    }

    /// The text printed on stderr.
    pub fn render(&self) -> String {
        let mut text = format!("error[{}]: {}\n", self.code.as_str(), self.message);
        for detail in &self.details {
            text.push_str("  ");
            text.push_str(detail);
            text.push('\n');
        }
        for hint in &self.hints {
            text.push_str("hint: ");
            text.push_str(hint);
            text.push('\n');
        }
        text
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Failure {}

/// Collapses any line breaks so that every message stays on one line.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
