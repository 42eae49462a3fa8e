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

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{self, Read as _};
use std::path::{Component, Path, PathBuf};

use crate::fsfacts::{FsFactsError, PathFact, PathKind};
use crate::plan::{LaunchPlan, Network};

/// Where macOS ships the Seatbelt front end; it is never searched for in `PATH`.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

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

/// The canaries of `plan`'s run under `token`; refuses what [`profile`] would refuse for the
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

/// What the kernel said about one process, for [`is_member`]. The `sandbox_check` results are
/// raw: 1 = sandboxed / denied, 0 = not sandboxed / allowed, anything else an error.
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
        let me = macos::getpid();
        macos::all_pids()
            .into_iter()
            .filter(|pid| *pid > 1 && *pid != me)
            .filter(|pid| is_member(&macos::check(*pid, &self.deny, &self.allow)))
            .collect()
    }
}

/// The system calls behind [`SandboxMembers`], each with the reason it is sound.
#[cfg(target_os = "macos")]
mod macos {
    use std::ffi::{CStr, c_char, c_int};

    use super::MemberCheck;

    // libsystem_sandbox, re-exported by libSystem (linked into every program): private API,
    // declared as WebKit, Chromium and LLVM's sanitizers declare it. Returns 1 when the
    // operation is denied (or, with SANDBOX_FILTER_NONE and no operation, when the process is
    // sandboxed), 0 when allowed, -1 on error. The filter argument follows `filter_type`.
    #[allow(
        unsafe_code,
        reason = "a foreign declaration; each call states why it is sound"
    )]
    unsafe extern "C" {
        fn sandbox_check(
            pid: libc::pid_t,
            operation: *const c_char,
            filter_type: c_int,
            ...
        ) -> c_int;
    }

    /// `enum sandbox_filter_type`: no filter argument.
    const SANDBOX_FILTER_NONE: c_int = 0;
    /// `enum sandbox_filter_type`: the argument is a path (`const char *`).
    const SANDBOX_FILTER_PATH: c_int = 1;
    /// Or-ed into the filter type: do not log the (would-be) violation.
    const SANDBOX_CHECK_NO_REPORT: c_int = 0x4000_0000;

    #[allow(unsafe_code)]
    pub fn getpid() -> libc::pid_t {
        // SAFETY: no preconditions.
        unsafe { libc::getpid() }
    }

    /// Every pid on the system (a snapshot: processes come and go).
    #[allow(unsafe_code)]
    pub fn all_pids() -> Vec<libc::pid_t> {
        // SAFETY: a null buffer of size 0 asks only for the current count.
        let estimate = unsafe { libc::proc_listallpids(std::ptr::null_mut(), 0) };
        // Room for processes started between the two calls.
        let room = usize::try_from(estimate).unwrap_or(0).saturating_add(256);
        let mut pids: Vec<libc::pid_t> = vec![0; room];
        let bytes =
            c_int::try_from(room.saturating_mul(size_of::<libc::pid_t>())).unwrap_or(c_int::MAX);
        // SAFETY: the buffer holds `bytes` bytes; libproc writes at most that many and returns
        // how many pids (not bytes) it wrote.
        let count = unsafe { libc::proc_listallpids(pids.as_mut_ptr().cast(), bytes) };
        pids.truncate(usize::try_from(count).unwrap_or(0));
        pids
    }

    /// What the kernel says about `pid` (see [`MemberCheck`]). A process that is gone, or whose
    /// information cannot be read, is reported as neither same-uid nor sandboxed.
    #[allow(unsafe_code)]
    pub fn check(pid: libc::pid_t, deny: &CStr, allow: &CStr) -> MemberCheck {
        let gone = MemberCheck {
            same_uid: false,
            zombie: false,
            sandboxed: -1,
            deny_canary: -1,
            allow_canary: -1,
        };
        // SAFETY: an all-zero proc_bsdinfo is a valid value to be overwritten.
        let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
        let size = c_int::try_from(size_of::<libc::proc_bsdinfo>()).unwrap_or(0);
        // SAFETY: `info` is `size` bytes; libproc fills it or returns <= 0.
        let r = unsafe {
            libc::proc_pidinfo(
                pid,
                libc::PROC_PIDTBSDINFO,
                0,
                std::ptr::from_mut(&mut info).cast(),
                size,
            )
        };
        if r != size {
            return gone;
        }
        // SAFETY: no preconditions.
        let euid = unsafe { libc::geteuid() };
        let same_uid = info.pbi_uid == euid;
        let zombie = info.pbi_status == libc::SZOMB;
        if !same_uid || zombie {
            return MemberCheck {
                same_uid,
                zombie,
                ..gone
            };
        }
        let read_data = c"file-read-data";
        let path_check = |path: &CStr| {
            // SAFETY: both strings are NUL-terminated and outlive the call; with
            // SANDBOX_FILTER_PATH the one variadic argument is a `const char *`.
            unsafe {
                sandbox_check(
                    pid,
                    read_data.as_ptr(),
                    SANDBOX_FILTER_PATH | SANDBOX_CHECK_NO_REPORT,
                    path.as_ptr(),
                )
            }
        };
        MemberCheck {
            same_uid,
            zombie,
            // SAFETY: a null operation with SANDBOX_FILTER_NONE takes no further argument and
            // asks only whether `pid` is sandboxed.
            sandboxed: unsafe { sandbox_check(pid, std::ptr::null(), SANDBOX_FILTER_NONE) },
            deny_canary: path_check(deny),
            allow_canary: path_check(allow),
        }
    }
}

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
    /// Filtered egress (a domain allowlist) has no Seatbelt mechanism yet; the probe does not
    /// claim it, so the engine never plans it here.
    #[error("filtered egress (allowedDomains) is not implemented for macos-seatbelt")]
    EgressProxy,
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
    [Network::None, Network::LoopbackOnly, Network::AllowOutbound]
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
            };
            profile(&plan, &facts, &RunToken::from_bytes([0; RunToken::BYTES]))
        })
        .collect()
}

/// Builds the SBPL profile for `plan`, given the `facts` measured for it and the run's
/// `token` (which names its membership [`Canary`]). See the module docs.
pub fn profile(
    plan: &LaunchPlan,
    facts: &SeatbeltFacts,
    token: &RunToken,
) -> Result<String, SeatbeltError> {
    for path in named_paths(plan) {
        check_path(path)?;
    }
    let fact = |path: &Path| {
        facts
            .paths
            .get(path)
            .ok_or_else(|| SeatbeltError::MissingFact(path.to_path_buf()))
    };
    for path in named_paths(plan) {
        let f = fact(path)?;
        for spelling in std::iter::once(&f.real).chain(&f.symlinks) {
            check_path(spelling)?;
        }
    }

    // Writable roots: the workspace, further roots and the run's temp dir. Writes are allowed
    // at their resolved paths only — the ones Seatbelt matches. An allowance at a spelling that
    // goes through a symlink would at best never match, and at worst (were some operation
    // matched unresolved) follow a link the command can re-point. Masks and pins are decided
    // against both spellings: there, more is safer.
    let mut writable: BTreeSet<PathBuf> = BTreeSet::new();
    let mut roots: BTreeSet<PathBuf> = BTreeSet::new();
    for root in [&plan.workspace, &plan.run_temp_dir]
        .into_iter()
        .chain(&plan.writable_roots)
    {
        let real = normal(&fact(root)?.real);
        roots.insert(normal(root));
        roots.insert(real.clone());
        writable.insert(real);
    }

    let (protected, protected_links) = masks(facts, &plan.protected_paths, "protected", &roots)?;
    let (denied, denied_links) = masks(facts, &plan.denied_read_paths, "denied", &roots)?;
    for (path, f) in plan.denied_read_paths.iter().map(|p| (p, fact(p))) {
        if let PathKind::File { hard_links } = f?.kind
            && hard_links > 1
        {
            return Err(SeatbeltError::HardLinks {
                path: path.clone(),
                links: hard_links,
            });
        }
    }
    for path in &plan.protected_paths {
        let f = fact(path)?;
        if let PathKind::File { hard_links } = f.kind
            && hard_links > 1
            && inside_any(&normal(&f.real), &roots)
        {
            return Err(SeatbeltError::HardLinks {
                path: path.clone(),
                links: hard_links,
            });
        }
    }
    let masked: BTreeSet<PathBuf> = protected.union(&denied).cloned().collect();
    let links: BTreeSet<PathBuf> = protected_links.union(&denied_links).cloned().collect();
    let canary = canary(plan, facts, token)?;
    // The canary directory is masked like a protected path, so the directories leading to it
    // are pinned too: the path `sandbox_check` is asked about cannot be moved or re-pointed.
    let mut masked_or_canary = masked.clone();
    masked_or_canary.insert(canary.dir.clone());
    let pins = pins(&masked_or_canary, &links, &roots);

    let mut out = Sbpl::default();
    out.line("(version 1)");
    out.line("(deny default)");
    out.blank();
    out.comment(
        "Generated by palisade from a launch plan. Seatbelt applies the last matching rule,",
    );
    out.comment("so every allowance comes first and every denial after it. Anything no rule");
    out.comment("allows is refused by (deny default).");

    out.section("Processes");
    out.comment("The command runs programs and starts children; both inherit this profile.");
    out.line("(allow process-exec)");
    out.line("(allow process-fork)");
    out.comment("Signals and process information only within this sandbox: no signalling,");
    out.comment("tracing or reading the arguments and environment of the user's other processes.");
    out.line("(allow signal (target same-sandbox))");
    out.line("(allow process-info* (target same-sandbox))");

    out.section("Reading files");
    out.comment("Reading is allowed everywhere (programs, libraries, configuration); the paths");
    out.comment("that must stay unreadable are denied at the end, where the denial wins.");
    out.line("(allow file-read*)");

    out.section("System information and IPC ordinary commands need");
    out.comment("Read-only sysctls that language runtimes and libc query (CPU count and type,");
    out.comment(
        "page size, OS version, load average). Deliberately not kern.procargs*: those would",
    );
    out.comment("show the arguments and environment of the user's other processes.");
    out.line("(allow sysctl-read");
    for name in SYSCTL_NAMES {
        out.line(&format!("  (sysctl-name \"{name}\")"));
    }
    for prefix in SYSCTL_PREFIXES {
        out.line(&format!("  (sysctl-name-prefix \"{prefix}\")"));
    }
    out.line(")");
    out.comment("Host statistics through Mach (host_processor_info: Node's os.cpus(), Go, JVMs).");
    out.line("(allow mach-host*)");
    out.comment("User and group lookups (getpwuid, getgrgid: `id`, `ls -l`, `whoami`) go through");
    out.comment("opendirectoryd; system logging and notifications through logd and notifyd, whose");
    out.comment("absence makes libc calls block or fail in ordinary programs.");
    out.line("(allow mach-lookup");
    for service in MACH_SERVICES {
        out.line(&format!("  (global-name \"{service}\")"));
    }
    out.line(")");
    out.comment(
        "POSIX semaphores: Python multiprocessing's locks. Named semaphores carry no data.",
    );
    out.line("(allow ipc-posix-sem)");
    out.comment("Unnamed Unix sockets (socketpair) for talking to its own children; where named");
    out.comment("sockets may be bound or reached is decided in the network section.");
    out.line("(allow system-socket (socket-domain AF_UNIX))");

    out.section("Devices");
    out.comment("Writing to /dev/null, and output to the terminal palisade was started from");
    out.comment("(/dev/tty and the pseudo-terminals /dev/ttysNNN): Seatbelt checks every write,");
    out.comment(
        "also to inherited stdout/stderr. Data writes only: no ioctl, so no TIOCSTI typing",
    );
    out.comment("into the user's shell; programs see no terminal settings.");
    out.line("(allow file-write-data");
    out.line("  (require-all");
    out.line("    (require-any (literal \"/dev/null\") (literal \"/dev/tty\") (regex #\"^/dev/ttys[0-9]+$\"))");
    out.line("    (vnode-type CHARACTER-DEVICE)))");

    out.section("Writable roots");
    out.comment("The workspace, the run's private temp dir and the further writable roots: the");
    out.comment("only places the command may create, change or remove files (at their resolved");
    out.comment("paths, which are what Seatbelt matches).");
    for root in &writable {
        out.line(&format!("(allow file-write* (subpath {}))", quote(root)?));
    }

    out.section("Network");
    network(&mut out, &plan.network, &writable)?;

    out.section("Membership canary");
    out.comment("Lets palisade recognise this run's processes by their sandbox, which every");
    out.comment("descendant inherits (leaving the process group does not shed it): this path is");
    out.comment("readable, its sibling .../deny is denied at the very end. Already allowed by");
    out.comment("(allow file-read*); stated so the pair is explicit. No later rule matches it:");
    out.comment("denied and protected paths never contain the run temp dir.");
    out.line(&format!(
        "(allow file-read* (literal {}))",
        quote(&canary.allow)?
    ));

    out.section("Denials (after every allowance, so they win)");
    out.comment("No setuid or setgid bits, even in writable roots: a run as root must not leave a");
    out.comment("setuid-root program behind.");
    out.line("(deny file-write-setugid)");
    if !protected.is_empty() {
        out.comment("Protected paths are read-only: nothing below them may be written, created,");
        out.comment("renamed or removed, existing or not.");
        for path in &protected {
            out.line(&format!("(deny file-write* (subpath {}))", quote(path)?));
        }
    }
    if !pins.is_empty() {
        out.comment("Pins: the directories and symlinks inside writable roots that lead to a");
        out.comment("protected or denied path may not be renamed, removed or replaced, or the");
        out.comment(
            "path's content would move out from under its rule. Files inside stay writable.",
        );
        for path in &pins {
            out.line(&format!("(deny file-write* (literal {}))", quote(path)?));
        }
    }
    if !denied.is_empty() {
        out.comment(
            "Denied paths: unreadable (data and metadata), unwritable, not executable (exec",
        );
        out.comment("would map the file into the process), and their Unix sockets unreachable.");
        for path in &denied {
            let q = quote(path)?;
            out.line(&format!(
                "(deny file-read* file-write* process-exec* (subpath {q}))"
            ));
            out.line(&format!(
                "(deny network-outbound (remote unix-socket (subpath {q})))"
            ));
        }
    }
    out.comment(
        "Membership canary: .../deny is unreadable (its sibling .../allow stays readable),",
    );
    out.comment("and nothing may be created in the canary directory, so no file or symlink the");
    out.comment("command makes there can change how the two paths are answered. Last, so it wins.");
    out.line(&format!(
        "(deny file-write* (subpath {}))",
        quote(&canary.dir)?
    ));
    out.line(&format!(
        "(deny file-read* (literal {}))",
        quote(&canary.deny)?
    ));
    Ok(out.0)
}

/// The network section for `mode`. Each mode is one arm: a later mode (the domain allowlist,
/// whose only way out is the host proxy's loopback port) is one more arm here, e.g.
/// `(allow network-outbound (remote ip "localhost:PORT"))`.
fn network(out: &mut Sbpl, mode: &Network, roots: &BTreeSet<PathBuf>) -> Result<(), SeatbeltError> {
    match mode {
        Network::Filtered(_) => return Err(SeatbeltError::EgressProxy),
        Network::None => {
            out.comment(
                "Mode none: no IP traffic at all (redundant with (deny default); explicit so",
            );
            out.comment("the intent is visible).");
            out.line("(deny network*)");
        }
        Network::LoopbackOnly => {
            out.comment(
                "Mode loopback-only: bind, accept and connect on localhost only. This is the",
            );
            out.comment("host's loopback (macOS has no network namespaces), not a private one.");
            out.line("(deny network*)");
            out.line("(allow network-bind network-inbound (local ip \"localhost:*\"))");
            out.line("(allow network-outbound (remote ip \"localhost:*\"))");
        }
        Network::AllowOutbound => {
            out.comment(
                "Mode allow-outbound: unrestricted network, plus what name resolution and TLS",
            );
            out.comment(
                "need: routing and system sockets, the resolver, configd and the trust daemons.",
            );
            out.line("(allow network*)");
            out.line("(allow system-socket)");
            out.line("(allow mach-lookup");
            for service in NETWORK_MACH_SERVICES {
                out.line(&format!("  (global-name \"{service}\")"));
            }
            out.line(")");
        }
    }
    // In every mode: Unix sockets the command binds inside its writable roots (test servers,
    // language servers, ssh-agent style helpers it starts itself) work. Sockets elsewhere — the
    // host's daemons — stay unreachable unless the mode allows all network traffic.
    out.comment("Every mode: named Unix sockets inside the writable roots (servers the command");
    out.comment(
        "starts itself). Host daemons' sockets elsewhere are reachable in allow-outbound only.",
    );
    for root in roots {
        let q = quote(root)?;
        out.line(&format!(
            "(allow network-bind network-inbound (local unix-socket (subpath {q})))"
        ));
        out.line(&format!(
            "(allow network-outbound (remote unix-socket (subpath {q})))"
        ));
    }
    Ok(())
}

/// Sysctls read by libc and common runtimes; all are host facts, none is per-process data.
const SYSCTL_NAMES: [&str; 30] = [
    "hw.activecpu",
    "hw.byteorder",
    "hw.cacheconfig",
    "hw.cachelinesize",
    "hw.cpufamily",
    "hw.cpufrequency",
    "hw.cputype",
    "hw.logicalcpu",
    "hw.logicalcpu_max",
    "hw.machine",
    "hw.memsize",
    "hw.model",
    "hw.ncpu",
    "hw.nperflevels",
    "hw.pagesize",
    "hw.physicalcpu",
    "hw.physicalcpu_max",
    "hw.tbfrequency",
    "kern.argmax",
    "kern.hostname",
    "kern.maxfilesperproc",
    "kern.maxproc",
    "kern.osproductversion",
    "kern.osrelease",
    "kern.ostype",
    "kern.osversion",
    "kern.usrstack64",
    "kern.version",
    "sysctl.proc_cputype",
    "vm.loadavg",
];

/// Sysctl families: CPU feature flags and performance levels (runtimes pick code paths by
/// them), and the process status entries `kern.proc.pid.*`/`kern.proc.pgrp.*` that libc and
/// runtimes read for their own processes. Those hold a process's name, ids and state, never
/// its arguments or environment (`kern.procargs*`, not allowed).
const SYSCTL_PREFIXES: [&str; 4] = [
    "hw.optional.",
    "hw.perflevel",
    "kern.proc.pgrp.",
    "kern.proc.pid.",
];

/// Mach services for user lookups, logging and notifications.
const MACH_SERVICES: [&str; 5] = [
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.opendirectoryd.membership",
    "com.apple.system.logger",
    "com.apple.logd",
    "com.apple.system.notification_center",
];

/// Mach services for name resolution, network configuration and TLS trust evaluation.
const NETWORK_MACH_SERVICES: [&str; 7] = [
    "com.apple.dnssd.service",
    "com.apple.SystemConfiguration.DNSConfiguration",
    "com.apple.SystemConfiguration.configd",
    "com.apple.networkd",
    "com.apple.trustd.agent",
    "com.apple.SecurityServer",
    "com.apple.ocspd",
];

/// Every path the plan names.
fn named_paths(plan: &LaunchPlan) -> impl Iterator<Item = &PathBuf> {
    [&plan.workspace, &plan.run_temp_dir]
        .into_iter()
        .chain(&plan.writable_roots)
        .chain(&plan.denied_read_paths)
        .chain(&plan.protected_paths)
}

fn check_path(path: &Path) -> Result<(), SeatbeltError> {
    if !path.is_absolute() {
        return Err(SeatbeltError::RelativePath(path.to_path_buf()));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(SeatbeltError::ParentComponent(path.to_path_buf()));
    }
    let text = path
        .to_str()
        .ok_or_else(|| SeatbeltError::NotUtf8(path.to_path_buf()))?;
    if text.chars().any(char::is_control) {
        return Err(SeatbeltError::ControlCharacter(text.to_owned()));
    }
    Ok(())
}

/// The path as spelled, normalised: no `//`, no trailing `/`, no `.` components (Seatbelt's
/// resolved paths have none, so a rule spelled with one would never match).
fn normal(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| *c != Component::CurDir)
        .collect()
}

/// Whether `path` is `root` or below it, for any of `roots`.
fn inside_any(path: &Path, roots: &BTreeSet<PathBuf>) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

/// The masked spellings of `paths` (each as spelled and as resolved), and the locations of
/// the symlinks met resolving them; refuses a path that contains a writable root.
fn masks(
    facts: &SeatbeltFacts,
    paths: &[PathBuf],
    what: &'static str,
    roots: &BTreeSet<PathBuf>,
) -> Result<(BTreeSet<PathBuf>, BTreeSet<PathBuf>), SeatbeltError> {
    let mut spellings = BTreeSet::new();
    let mut links = BTreeSet::new();
    for path in paths {
        let fact = facts
            .paths
            .get(path)
            .ok_or_else(|| SeatbeltError::MissingFact(path.clone()))?;
        for spelling in [normal(path), normal(&fact.real)] {
            if let Some(root) = roots.iter().find(|root| root.starts_with(&spelling)) {
                return Err(SeatbeltError::MaskContainsWritable {
                    what,
                    path: path.clone(),
                    root: root.clone(),
                });
            }
            spellings.insert(spelling);
        }
        links.extend(fact.symlinks.iter().map(|link| normal(link)));
    }
    Ok((spellings, links))
}

/// Pins: every ancestor of a masked spelling, and every symlink met resolving one (with its
/// ancestors), that lies inside a writable root — the root itself included — and is not
/// masked itself (a masked path's own rule already forbids every write).
fn pins(
    masked: &BTreeSet<PathBuf>,
    links: &BTreeSet<PathBuf>,
    roots: &BTreeSet<PathBuf>,
) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let ancestors = masked
        .iter()
        .flat_map(|m| m.ancestors().skip(1))
        .chain(links.iter().flat_map(|l| l.ancestors()));
    for path in ancestors {
        if inside_any(path, roots) {
            out.insert(path.to_path_buf());
        }
    }
    out.retain(|pin| !masked.contains(pin));
    out
}

/// An SBPL string literal for `path`: `\` and `"` escaped; control characters, NUL and
/// non-UTF-8 refused (see the module docs).
pub fn quote(path: &Path) -> Result<String, SeatbeltError> {
    check_path(path)?;
    let text = path
        .to_str()
        .ok_or_else(|| SeatbeltError::NotUtf8(path.to_path_buf()))?;
    let mut out = String::with_capacity(text.len().saturating_add(2));
    out.push('"');
    for c in text.chars() {
        if c == '\\' || c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// The profile text being built, one form or comment per line.
#[derive(Default)]
struct Sbpl(String);

impl Sbpl {
    fn line(&mut self, text: &str) {
        self.0.push_str(text);
        self.0.push('\n');
    }

    fn blank(&mut self) {
        self.0.push('\n');
    }

    /// A comment: fixed text from this module, never user input.
    fn comment(&mut self, text: &str) {
        let _ = writeln!(self.0, "; {text}");
    }

    fn section(&mut self, title: &str) {
        self.blank();
        self.comment(&format!("--- {title}"));
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use proptest::prelude::*;

    use super::*;
    use crate::plan::{Budgets, Mechanism};

    /// The fixed token every test profile uses (snapshots name its canaries).
    fn token() -> RunToken {
        RunToken::from_bytes([0xa5; RunToken::BYTES])
    }

    // -----------------------------------------------------------------------------------------
    // A tiny SBPL reader: enough Scheme to check structure, written independently of the
    // generator (it shares no code with `quote`).

    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Tok {
        Open,
        Close,
        /// A string literal, unescaped.
        Str(String),
        /// A `#"…"` regex literal.
        Regex(String),
        Atom(String),
    }

    fn tokenize(text: &str) -> Result<Vec<Tok>, String> {
        let mut out = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                c if c.is_whitespace() => {}
                ';' => {
                    for c in chars.by_ref() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                '(' => out.push(Tok::Open),
                ')' => out.push(Tok::Close),
                '"' => {
                    let mut s = String::new();
                    loop {
                        match chars.next() {
                            None => return Err("unterminated string".into()),
                            Some('"') => break,
                            Some('\\') => match chars.next() {
                                Some(e @ ('\\' | '"')) => s.push(e),
                                other => return Err(format!("unknown escape {other:?}")),
                            },
                            Some(c) if c.is_control() => {
                                return Err(format!("raw control character {c:?} in a string"));
                            }
                            Some(c) => s.push(c),
                        }
                    }
                    out.push(Tok::Str(s));
                }
                '#' if chars.peek() == Some(&'"') => {
                    chars.next();
                    let mut s = String::new();
                    loop {
                        match chars.next() {
                            None => return Err("unterminated regex".into()),
                            Some('"') => break,
                            Some(c) => s.push(c),
                        }
                    }
                    out.push(Tok::Regex(s));
                }
                c => {
                    let mut s = String::from(c);
                    while let Some(&n) = chars.peek() {
                        if n.is_whitespace() || matches!(n, '(' | ')' | '"' | ';') {
                            break;
                        }
                        s.push(n);
                        chars.next();
                    }
                    out.push(Tok::Atom(s));
                }
            }
        }
        Ok(out)
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Form {
        List(Vec<Form>),
        Leaf(Tok),
    }

    impl Form {
        fn list(&self) -> &[Form] {
            match self {
                Form::List(items) => items,
                Form::Leaf(_) => &[],
            }
        }

        fn head(&self) -> Option<&str> {
            match self.list().first() {
                Some(Form::Leaf(Tok::Atom(a))) => Some(a),
                _ => None,
            }
        }

        /// The form with every string literal replaced by a placeholder.
        fn skeleton(&self) -> Form {
            match self {
                Form::List(items) => Form::List(items.iter().map(Form::skeleton).collect()),
                Form::Leaf(Tok::Str(_)) => Form::Leaf(Tok::Str("<S>".into())),
                Form::Leaf(t) => Form::Leaf(t.clone()),
            }
        }

        fn strings(&self, out: &mut Vec<String>) {
            match self {
                Form::List(items) => items.iter().for_each(|f| f.strings(out)),
                Form::Leaf(Tok::Str(s)) => out.push(s.clone()),
                Form::Leaf(_) => {}
            }
        }

        /// Whether some sub-form is exactly `(FILTER "path")`.
        fn has_filter(&self, filter: &str, path: &str) -> bool {
            match self {
                Form::List(items) => {
                    (items.len() == 2
                        && items[0] == Form::Leaf(Tok::Atom(filter.into()))
                        && items[1] == Form::Leaf(Tok::Str(path.into())))
                        || items.iter().any(|f| f.has_filter(filter, path))
                }
                Form::Leaf(_) => false,
            }
        }

        fn has_atom(&self, atom: &str) -> bool {
            self.list()
                .iter()
                .any(|f| *f == Form::Leaf(Tok::Atom(atom.into())))
        }
    }

    /// Parses the whole profile into top-level forms; errors on unbalanced parentheses or a
    /// top-level token that is not a list.
    fn parse(text: &str) -> Result<Vec<Form>, String> {
        let mut stack: Vec<Vec<Form>> = vec![Vec::new()];
        for tok in tokenize(text)? {
            match tok {
                Tok::Open => stack.push(Vec::new()),
                Tok::Close => {
                    if stack.len() < 2 {
                        return Err("unbalanced `)`".into());
                    }
                    let done = stack.pop().unwrap();
                    stack.last_mut().unwrap().push(Form::List(done));
                }
                other => {
                    if stack.len() < 2 {
                        return Err(format!("top-level token outside a form: {other:?}"));
                    }
                    stack.last_mut().unwrap().push(Form::Leaf(other));
                }
            }
        }
        if stack.len() != 1 {
            return Err("unclosed `(`".into());
        }
        Ok(stack.pop().unwrap())
    }

    // -----------------------------------------------------------------------------------------
    // Plans and facts.

    fn plan(network: Network) -> LaunchPlan {
        LaunchPlan {
            mechanism: Mechanism::Direct,
            network,
            workspace: "/Users/dev/project".into(),
            writable_roots: vec!["/Users/dev/project".into(), "/Users/dev/results".into()],
            read_only_root: true,
            denied_read_paths: Vec::new(),
            protected_paths: vec![
                "/Users/dev/project/.github".into(),
                "/Users/dev/project/.loopwright/policies".into(),
                "/Users/dev/project/AGENTS.md".into(),
            ],
            syscall_filter: false,
            command: vec!["make".into(), "test".into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            run_temp_dir: "/tmp/palisade-501/run-1".into(),
            budgets: Budgets::default(),
        }
    }

    fn dir(real: &str) -> PathFact {
        PathFact {
            kind: PathKind::Dir,
            real: real.into(),
            symlinks: Vec::new(),
        }
    }

    fn file(real: &str, hard_links: u64) -> PathFact {
        PathFact {
            kind: PathKind::File { hard_links },
            real: real.into(),
            symlinks: Vec::new(),
        }
    }

    fn missing(real: &str, first_missing: &str) -> PathFact {
        PathFact {
            kind: PathKind::Missing {
                first_missing: first_missing.into(),
                parent_is_dir: true,
            },
            real: real.into(),
            symlinks: Vec::new(),
        }
    }

    /// Facts for `plan`: every path where it is spelled, except `/tmp` (really `/private/tmp`,
    /// as on macOS) and the explicit `overrides`.
    fn facts(plan: &LaunchPlan, overrides: &[(&str, PathFact)]) -> SeatbeltFacts {
        let mut paths = BTreeMap::new();
        for path in named_paths(plan) {
            let real = match path.strip_prefix("/tmp") {
                Ok(rest) => Path::new("/private/tmp").join(rest),
                Err(_) => path.clone(),
            };
            let kind =
                if plan.protected_paths.contains(path) || plan.denied_read_paths.contains(path) {
                    PathKind::Missing {
                        first_missing: real.clone(),
                        parent_is_dir: true,
                    }
                } else {
                    PathKind::Dir
                };
            let fact = PathFact {
                kind,
                real,
                symlinks: Vec::new(),
            };
            paths.insert(path.clone(), fact);
        }
        for (path, fact) in overrides {
            paths.insert(PathBuf::from(path), fact.clone());
        }
        SeatbeltFacts { paths }
    }

    /// The realistic case: `.ssh` denied, `.aws` denied through a symlink to another volume,
    /// a secrets file denied inside the workspace, `.github` existing, `AGENTS.md` a symlink
    /// inside the workspace, `.loopwright` missing entirely.
    fn realistic(network: Network) -> (LaunchPlan, SeatbeltFacts) {
        let mut plan = plan(network);
        plan.denied_read_paths = vec![
            "/Users/dev/.ssh".into(),
            "/Users/dev/.aws".into(),
            "/Users/dev/project/config/secrets.env".into(),
        ];
        let facts = facts(
            &plan,
            &[
                ("/Users/dev/.ssh", dir("/Users/dev/.ssh")),
                (
                    "/Users/dev/.aws",
                    PathFact {
                        kind: PathKind::Dir,
                        real: "/Volumes/keys/aws".into(),
                        symlinks: vec!["/Users/dev/.aws".into()],
                    },
                ),
                (
                    "/Users/dev/project/config/secrets.env",
                    file("/Users/dev/project/config/secrets.env", 1),
                ),
                (
                    "/Users/dev/project/.github",
                    dir("/Users/dev/project/.github"),
                ),
                (
                    "/Users/dev/project/AGENTS.md",
                    PathFact {
                        kind: PathKind::File { hard_links: 1 },
                        real: "/Users/dev/project/docs/agents.md".into(),
                        symlinks: vec!["/Users/dev/project/AGENTS.md".into()],
                    },
                ),
                (
                    "/Users/dev/project/.loopwright/policies",
                    missing(
                        "/Users/dev/project/.loopwright/policies",
                        "/Users/dev/project/.loopwright",
                    ),
                ),
            ],
        );
        (plan, facts)
    }

    /// Every structural property the profile must have, given the plan and facts it came from.
    fn check_structure(plan: &LaunchPlan, facts: &SeatbeltFacts, text: &str) -> Vec<Form> {
        let forms = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(text.starts_with("(version 1)\n(deny default)\n"), "{text}");
        assert_eq!(forms[0].head(), Some("version"));
        assert_eq!(forms[1].head(), Some("deny"));
        assert!(forms[1].has_atom("default"));
        for form in &forms {
            assert!(
                matches!(form.head(), Some("version" | "allow" | "deny")),
                "unexpected top-level form {form:?}"
            );
            assert!(
                !(form.head() == Some("allow") && form.has_atom("default")),
                "(allow default) in the profile"
            );
        }
        assert_eq!(
            forms.iter().filter(|f| f.head() == Some("version")).count(),
            1
        );

        // Every allowance is explained: in each blank-line-separated block, a comment comes
        // before the first allow.
        for block in text.split("\n\n") {
            if let Some(first_allow) = block.lines().position(|l| l.starts_with("(allow")) {
                assert!(
                    block.lines().take(first_allow).any(|l| l.starts_with(';')),
                    "uncommented allowance:\n{block}"
                );
            }
        }

        let last = |op: &str, allow: bool| {
            forms.iter().rposition(|f| {
                f.head() == Some(if allow { "allow" } else { "deny" }) && f.has_atom(op)
            })
        };
        let deny_after = |op: &str, filter: &str, path: &Path, after: Option<usize>| {
            let path = path.to_str().unwrap();
            let at = forms.iter().rposition(|f| {
                f.head() == Some("deny") && f.has_atom(op) && f.has_filter(filter, path)
            });
            assert!(
                at.is_some() && at > after,
                "no ({op} ({filter} {path:?})) denial after the last allowance\n{text}"
            );
        };
        let last_read_allow = last("file-read*", true);
        let last_write_allow = last("file-write*", true);
        let last_exec_allow = last("process-exec", true);
        for path in &plan.denied_read_paths {
            let real = &facts.paths[path].real;
            for spelling in [path, real] {
                deny_after("file-read*", "subpath", spelling, last_read_allow);
                deny_after("file-write*", "subpath", spelling, last_write_allow);
                deny_after("process-exec*", "subpath", spelling, last_exec_allow);
            }
        }
        for path in &plan.protected_paths {
            let real = &facts.paths[path].real;
            for spelling in [path, real] {
                deny_after("file-write*", "subpath", spelling, last_write_allow);
            }
        }
        // Every writable root is writable at its resolved path.
        for root in [&plan.workspace, &plan.run_temp_dir]
            .into_iter()
            .chain(&plan.writable_roots)
        {
            let real = normal(&facts.paths[root].real);
            assert!(forms.iter().any(|f| f.head() == Some("allow")
                && f.has_atom("file-write*")
                && f.has_filter("subpath", real.to_str().unwrap())));
        }
        // The only file-write* allowances are the writable roots' subpaths.
        for form in &forms {
            if form.head() == Some("allow") && form.has_atom("file-write*") {
                assert_eq!(form.list().len(), 3, "{form:?}");
            }
        }
        forms
    }

    // -----------------------------------------------------------------------------------------
    // Snapshots.

    #[test]
    fn snapshot_matrix() {
        for (name, network) in [
            ("none", Network::None),
            ("loopback_only", Network::LoopbackOnly),
            ("allow_outbound", Network::AllowOutbound),
        ] {
            let (plan, facts) = realistic(network);
            let text = profile(&plan, &facts, &token()).unwrap();
            check_structure(&plan, &facts, &text);
            insta::assert_snapshot!(format!("profile_{name}"), text);
        }
    }

    #[test]
    fn snapshot_minimal_plan() {
        let mut plan = plan(Network::None);
        plan.protected_paths.clear();
        plan.writable_roots = vec![plan.workspace.clone()];
        let facts = facts(&plan, &[]);
        let text = profile(&plan, &facts, &token()).unwrap();
        check_structure(&plan, &facts, &text);
        insta::assert_snapshot!("profile_minimal", text);
    }

    #[test]
    fn snapshot_awkward_paths() {
        let mut plan = plan(Network::LoopbackOnly);
        plan.workspace = "/Users/dev/my \"quoted\" (project) \\ dir".into();
        plan.writable_roots = vec![
            plan.workspace.clone(),
            "/Volumes/Ext Drive/out; (allow default)".into(),
        ];
        plan.protected_paths = vec![plan.workspace.join(".github")];
        plan.denied_read_paths = vec![
            "/Users/dev/Données privées/clé".into(),
            "/Users/dev/\")(allow file-write* (subpath \"/\"))(\"".into(),
            "/Users/dev/日本語/🔑".into(),
        ];
        let facts = facts(&plan, &[]);
        let text = profile(&plan, &facts, &token()).unwrap();
        let forms = check_structure(&plan, &facts, &text);
        // The injection attempt is one string literal, not a form.
        let allows_root = forms.iter().any(|f| {
            f.head() == Some("allow") && f.has_atom("file-write*") && f.has_filter("subpath", "/")
        });
        assert!(!allows_root);
        insta::assert_snapshot!("profile_awkward_paths", text);
    }

    #[test]
    fn profile_is_deterministic_and_order_independent() {
        let (plan, facts) = realistic(Network::None);
        let a = profile(&plan, &facts, &token()).unwrap();
        let mut shuffled = plan.clone();
        shuffled.denied_read_paths.reverse();
        shuffled.protected_paths.reverse();
        shuffled.writable_roots.reverse();
        assert_eq!(a, profile(&shuffled, &facts, &token()).unwrap());
        assert_eq!(a, profile(&plan, &facts, &token()).unwrap());
    }

    // -----------------------------------------------------------------------------------------
    // Rules that matter for security, asserted directly (the snapshots show them too).

    #[test]
    fn denials_come_after_every_allowance() {
        let (plan, facts) = realistic(Network::AllowOutbound);
        let text = profile(&plan, &facts, &token()).unwrap();
        let forms = parse(&text).unwrap();
        let last_allow = forms
            .iter()
            .rposition(|f| f.head() == Some("allow"))
            .unwrap();
        let first_mask = forms
            .iter()
            .position(|f| f.head() == Some("deny") && f.has_atom("file-write-setugid"))
            .unwrap();
        assert!(first_mask > last_allow);
        assert!(forms[first_mask..].iter().all(|f| f.head() == Some("deny")));
    }

    #[test]
    fn symlinked_paths_are_denied_at_both_spellings_and_links_are_pinned() {
        let (plan, facts) = realistic(Network::None);
        let text = profile(&plan, &facts, &token()).unwrap();
        assert!(
            text.contains(
                "(deny file-read* file-write* process-exec* (subpath \"/Users/dev/.aws\"))"
            )
        );
        assert!(text.contains(
            "(deny file-read* file-write* process-exec* (subpath \"/Volumes/keys/aws\"))"
        ));
        // AGENTS.md is a symlink inside the workspace: both the link and its target are
        // protected, and the directory holding the target is pinned.
        assert!(text.contains("(deny file-write* (subpath \"/Users/dev/project/AGENTS.md\"))"));
        assert!(
            text.contains("(deny file-write* (subpath \"/Users/dev/project/docs/agents.md\"))")
        );
        assert!(text.contains("(deny file-write* (literal \"/Users/dev/project/docs\"))"));
        // Missing .loopwright: its future directory is pinned, so it cannot be created
        // elsewhere and moved into place.
        assert!(text.contains("(deny file-write* (literal \"/Users/dev/project/.loopwright\"))"));
        // The workspace root itself is pinned (it holds masked paths), `.ssh`'s parent is not
        // (it is outside every writable root).
        assert!(text.contains("(deny file-write* (literal \"/Users/dev/project\"))"));
        assert!(!text.contains("(literal \"/Users/dev\")"));
    }

    #[test]
    fn temp_dir_is_writable_at_its_real_path_only() {
        let (plan, facts) = realistic(Network::None);
        let text = profile(&plan, &facts, &token()).unwrap();
        assert!(text.contains("(allow file-write* (subpath \"/private/tmp/palisade-501/run-1\"))"));
        assert!(!text.contains("(subpath \"/tmp/palisade-501/run-1\")"));
    }

    #[test]
    fn network_modes() {
        let text = |n| {
            let (plan, facts) = realistic(n);
            profile(&plan, &facts, &token()).unwrap()
        };
        let none = text(Network::None);
        assert!(none.contains("(deny network*)"));
        assert!(!none.contains("(remote ip"));
        assert!(!none.contains("(allow network*)"));
        let loopback = text(Network::LoopbackOnly);
        assert!(loopback.contains("(allow network-outbound (remote ip \"localhost:*\"))"));
        assert!(
            loopback.contains("(allow network-bind network-inbound (local ip \"localhost:*\"))")
        );
        assert!(!loopback.contains("(allow network*)"));
        let outbound = text(Network::AllowOutbound);
        assert!(outbound.contains("(allow network*)"));
        // In every mode, Unix sockets under denied paths stay unreachable, after the allowances.
        for t in [&none, &loopback, &outbound] {
            let deny = t
                .find("(deny network-outbound (remote unix-socket (subpath \"/Users/dev/.ssh\")))")
                .unwrap();
            assert!(deny > t.rfind("(allow network").unwrap());
        }
    }

    #[test]
    fn trial_profiles_cover_every_mode_and_rule_kind() {
        let trials = trial_profiles().unwrap();
        assert_eq!(trials.len(), 3);
        for needle in [
            "(local ip \"localhost:*\")",
            "(allow network*)",
            "(deny network*)",
        ] {
            assert!(trials.iter().any(|t| t.contains(needle)), "{needle}");
        }
        for trial in &trials {
            parse(trial).unwrap();
            for needle in [
                "(deny file-write* (subpath",
                "(deny file-write* (literal",
                "(deny file-read* file-write* process-exec* (subpath",
                "(allow file-write* (subpath",
                "(local unix-socket (subpath",
            ] {
                assert!(trial.contains(needle), "{needle}\n{trial}");
            }
        }
    }

    #[test]
    fn sandbox_exec_argv() {
        let (plan, facts) = realistic(Network::None);
        let text = profile(&plan, &facts, &token()).unwrap();
        let args = argv(&text, &plan).unwrap();
        assert_eq!(args[0], "-p");
        assert_eq!(args[1], OsString::from(&text));
        assert_eq!(args[2], "--");
        assert_eq!(&args[3..], &plan.command[..]);
        let mut empty = plan;
        empty.command.clear();
        assert!(matches!(
            argv(&text, &empty),
            Err(SeatbeltError::EmptyCommand)
        ));
    }

    // -----------------------------------------------------------------------------------------
    // Membership canaries.

    #[test]
    fn run_tokens_are_hex_and_random() {
        let fixed =
            RunToken::from_bytes([0, 1, 0xab, 0xff, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
        assert_eq!(fixed.as_str(), "0001abff02030405060708090a0b0c0d");
        let a = RunToken::random().unwrap();
        let b = RunToken::random().unwrap();
        assert_eq!(a.as_str().len(), 32);
        assert!(
            a.as_str()
                .bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b);
    }

    #[test]
    fn canaries_live_under_the_resolved_run_temp_dir() {
        let (plan, facts) = realistic(Network::None);
        let c = canary(&plan, &facts, &token()).unwrap();
        let real = normal(&facts.paths[&plan.run_temp_dir].real);
        assert_ne!(
            real, plan.run_temp_dir,
            "the fixture's temp dir goes through /tmp"
        );
        assert_eq!(
            c.dir,
            real.join(format!(".palisade-sandbox-{}", token().as_str()))
        );
        assert_eq!(c.deny, c.dir.join("deny"));
        assert_eq!(c.allow, c.dir.join("allow"));
        let other = canary(&plan, &facts, &RunToken::from_bytes([1; 16])).unwrap();
        assert_ne!(c.dir, other.dir);
        let mut missing = facts.clone();
        missing.paths.remove(&plan.run_temp_dir);
        assert!(matches!(
            canary(&plan, &missing, &token()),
            Err(SeatbeltError::MissingFact(_))
        ));
    }

    #[test]
    fn canary_rules_are_in_every_profile_and_win() {
        for network in [Network::None, Network::LoopbackOnly, Network::AllowOutbound] {
            let (plan, facts) = realistic(network);
            let c = canary(&plan, &facts, &token()).unwrap();
            let text = profile(&plan, &facts, &token()).unwrap();
            let forms = check_structure(&plan, &facts, &text);
            let s = |p: &Path| p.to_str().unwrap().to_owned();
            let at = |head: &str, op: &str, filter: &str, path: &Path| {
                let found: Vec<usize> = forms
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| {
                        f.head() == Some(head) && f.has_atom(op) && f.has_filter(filter, &s(path))
                    })
                    .map(|(i, _)| i)
                    .collect();
                assert_eq!(found.len(), 1, "({head} {op} ({filter} {path:?}))\n{text}");
                found[0]
            };
            let deny_read = at("deny", "file-read*", "literal", &c.deny);
            let deny_write = at("deny", "file-write*", "subpath", &c.dir);
            let allow_read = at("allow", "file-read*", "literal", &c.allow);
            // The denials come after every allowance (last rule wins) ...
            let last_allow = forms.iter().rposition(|f| f.head() == Some("allow"));
            assert!(Some(deny_read) > last_allow && Some(deny_write) > last_allow);
            // ... and no denial after the allow canary's rule covers it.
            for form in forms.iter().skip(allow_read + 1) {
                if form.head() == Some("deny") && form.has_atom("file-read*") {
                    let mut strings = Vec::new();
                    form.strings(&mut strings);
                    assert!(
                        strings.iter().all(|p| !c.allow.starts_with(p)),
                        "{form:?} covers the allow canary"
                    );
                }
            }
            // Other tokens give other canaries: the token reaches the text.
            let other = profile(&plan, &facts, &RunToken::from_bytes([7; 16])).unwrap();
            assert_ne!(text, other);
        }
    }

    #[test]
    fn the_canary_directory_is_pinned() {
        // The directories leading to the canary (the run temp dir) cannot be renamed or
        // replaced, so the path `sandbox_check` is asked about keeps its meaning.
        let mut plan = plan(Network::None);
        plan.protected_paths.clear();
        plan.denied_read_paths.clear();
        let facts = facts(&plan, &[]);
        let text = profile(&plan, &facts, &token()).unwrap();
        let real = normal(&facts.paths[&plan.run_temp_dir].real);
        assert!(text.contains(&format!(
            "(deny file-write* (literal {}))",
            quote(&real).unwrap()
        )));
    }

    #[test]
    fn membership_needs_every_answer() {
        let member = MemberCheck {
            same_uid: true,
            zombie: false,
            sandboxed: 1,
            deny_canary: 1,
            allow_canary: 0,
        };
        assert!(is_member(&member));
        let not = [
            MemberCheck {
                same_uid: false,
                ..member
            },
            MemberCheck {
                zombie: true,
                ..member
            },
            // Not sandboxed at all: every path is allowed.
            MemberCheck {
                sandboxed: 0,
                deny_canary: 0,
                ..member
            },
            // Another sandbox that denies everything it does not know.
            MemberCheck {
                allow_canary: 1,
                ..member
            },
            // Another sandbox that allows reading everywhere.
            MemberCheck {
                deny_canary: 0,
                ..member
            },
            // Errors are never membership.
            MemberCheck {
                sandboxed: -1,
                ..member
            },
            MemberCheck {
                deny_canary: -1,
                ..member
            },
            MemberCheck {
                allow_canary: -1,
                ..member
            },
            MemberCheck {
                sandboxed: 2,
                ..member
            },
        ];
        for check in not {
            assert!(!is_member(&check), "{check:?}");
        }
    }

    // -----------------------------------------------------------------------------------------
    // Refusals.

    fn refused(plan: &LaunchPlan, facts: &SeatbeltFacts) -> SeatbeltError {
        profile(plan, facts, &token()).expect_err("profile should be refused")
    }

    #[test]
    fn control_characters_are_refused() {
        for bad in [
            "/Users/dev/new\nline",
            "/Users/dev/tab\there",
            "/Users/dev/del\u{7f}",
            "/Users/dev/c1\u{85}",
            "/Users/dev/cr\r",
        ] {
            let mut plan = plan(Network::None);
            plan.denied_read_paths = vec![bad.into()];
            let facts = facts(&plan, &[]);
            assert!(
                matches!(refused(&plan, &facts), SeatbeltError::ControlCharacter(_)),
                "{bad:?}"
            );
        }
        // Also when the control character only appears in the resolved spelling.
        let mut plan = plan(Network::None);
        plan.denied_read_paths = vec!["/Users/dev/link".into()];
        let facts = facts(
            &plan,
            &[("/Users/dev/link", dir("/Users/dev/evil\n(allow default)"))],
        );
        assert!(matches!(
            refused(&plan, &facts),
            SeatbeltError::ControlCharacter(_)
        ));
    }

    #[test]
    fn nul_and_non_utf8_are_refused() {
        let mut plan = plan(Network::None);
        plan.denied_read_paths = vec![PathBuf::from(OsStr::from_bytes(b"/Users/dev/a\0b"))];
        let f = facts(&plan, &[]);
        assert!(matches!(
            refused(&plan, &f),
            SeatbeltError::ControlCharacter(_)
        ));
        plan.denied_read_paths = vec![PathBuf::from(OsStr::from_bytes(b"/Users/dev/\xff"))];
        let f = facts(&plan, &[]);
        assert!(matches!(refused(&plan, &f), SeatbeltError::NotUtf8(_)));
    }

    #[test]
    fn relative_and_parent_paths_are_refused() {
        let mut plan = plan(Network::None);
        plan.denied_read_paths = vec!["relative/secret".into()];
        let f = facts(&plan, &[]);
        assert!(matches!(refused(&plan, &f), SeatbeltError::RelativePath(_)));
        plan.denied_read_paths = vec!["/Users/dev/project/../.ssh".into()];
        let f = facts(&plan, &[]);
        assert!(matches!(
            refused(&plan, &f),
            SeatbeltError::ParentComponent(_)
        ));
    }

    #[test]
    fn masks_containing_a_writable_root_are_refused() {
        let mut plan = plan(Network::None);
        plan.denied_read_paths = vec!["/Users/dev".into()];
        let f = facts(&plan, &[]);
        assert!(matches!(
            refused(&plan, &f),
            SeatbeltError::MaskContainsWritable { what: "denied", .. }
        ));
        // Through a symlink: the denied path resolves to a directory holding the temp dir.
        let mut plan = self::plan(Network::None);
        plan.denied_read_paths = vec!["/Users/dev/tmp-link".into()];
        let f = facts(&plan, &[("/Users/dev/tmp-link", dir("/private/tmp"))]);
        assert!(matches!(
            refused(&plan, &f),
            SeatbeltError::MaskContainsWritable { .. }
        ));
        let mut plan = self::plan(Network::None);
        plan.protected_paths = vec!["/Users/dev/project".into()];
        let f = facts(&plan, &[]);
        assert!(matches!(
            refused(&plan, &f),
            SeatbeltError::MaskContainsWritable {
                what: "protected",
                ..
            }
        ));
    }

    #[test]
    fn hard_linked_files_are_refused() {
        let mut plan = plan(Network::None);
        plan.denied_read_paths = vec!["/Users/dev/key".into()];
        let f = facts(&plan, &[("/Users/dev/key", file("/Users/dev/key", 2))]);
        assert!(matches!(
            refused(&plan, &f),
            SeatbeltError::HardLinks { links: 2, .. }
        ));
        // A protected file with links inside a writable root: refused; outside: fine (nothing
        // outside the roots is writable anyway).
        let mut plan = self::plan(Network::None);
        plan.protected_paths = vec!["/Users/dev/project/AGENTS.md".into()];
        let f = facts(
            &plan,
            &[(
                "/Users/dev/project/AGENTS.md",
                file("/Users/dev/project/AGENTS.md", 3),
            )],
        );
        assert!(matches!(
            refused(&plan, &f),
            SeatbeltError::HardLinks { links: 3, .. }
        ));
        plan.protected_paths = vec!["/etc/hosts".into()];
        let f = facts(&plan, &[("/etc/hosts", file("/private/etc/hosts", 2))]);
        assert!(profile(&plan, &f, &token()).is_ok());
    }

    #[test]
    fn missing_facts_are_refused() {
        let (plan, mut facts) = realistic(Network::None);
        facts.paths.remove(Path::new("/Users/dev/.ssh"));
        assert!(matches!(
            refused(&plan, &facts),
            SeatbeltError::MissingFact(_)
        ));
    }

    #[test]
    fn quote_escapes_only_backslash_and_quote() {
        assert_eq!(quote(Path::new("/a b")).unwrap(), "\"/a b\"");
        assert_eq!(quote(Path::new("/a\"b")).unwrap(), "\"/a\\\"b\"");
        assert_eq!(quote(Path::new("/a\\b")).unwrap(), "\"/a\\\\b\"");
        assert_eq!(quote(Path::new("/é(;)#\"")).unwrap(), "\"/é(;)#\\\"\"");
        assert!(quote(Path::new("/a\nb")).is_err());
    }

    #[test]
    fn measure_resolves_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        let mut plan = plan(Network::None);
        plan.workspace = root.clone();
        plan.writable_roots = vec![root.clone()];
        plan.run_temp_dir = root.clone();
        plan.protected_paths.clear();
        plan.denied_read_paths = vec![root.join("link/secret")];
        let facts = measure(&plan).unwrap();
        let fact = &facts.paths[&root.join("link/secret")];
        assert_eq!(fact.real, root.join("real/secret"));
        assert_eq!(fact.symlinks, vec![root.join("link")]);
        let text = profile(&plan, &facts, &token()).unwrap();
        check_structure(&plan, &facts, &text);
        // The link is inside the writable root: pinned, so it cannot be pointed elsewhere.
        assert!(text.contains(&format!(
            "(deny file-write* (literal {}))",
            quote(&root.join("link")).unwrap()
        )));
    }

    // -----------------------------------------------------------------------------------------
    // No path can inject SBPL.

    /// Any text for one path component: quotes, backslashes, parentheses, semicolons, `#`,
    /// whitespace, control characters and arbitrary Unicode.
    fn component() -> impl Strategy<Value = String> {
        let special = prop::sample::select(vec![
            "\"",
            "\\",
            "(",
            ")",
            ";",
            "#",
            "#\"",
            " ",
            "\n",
            "\r",
            "\t",
            "\u{7f}",
            "\u{85}",
            "\u{2028}",
            "é",
            "🔑",
            "a",
            "(allow default)",
            "\")",
            "\\\"",
        ]);
        prop::collection::vec(
            prop_oneof![
                special.prop_map(String::from),
                any::<char>().prop_map(String::from)
            ],
            1..12,
        )
        .prop_map(|parts| parts.concat().replace(['/', '\0'], "_"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_paths_never_change_the_profile_structure(
            denied in component(),
            protected in component(),
            root in component(),
            real in component(),
        ) {
            let mut weird = plan(Network::LoopbackOnly);
            weird.writable_roots.push(PathBuf::from("/Volumes").join(&root));
            weird.protected_paths = vec![weird.workspace.join(&protected)];
            weird.denied_read_paths = vec![PathBuf::from("/Users/dev/d").join(&denied)];
            let weird_facts = facts(&weird, &[(
                weird.denied_read_paths[0].to_str().unwrap(),
                dir(PathBuf::from("/Volumes/r").join(&real).to_str().unwrap()),
            )]);

            // The same plan with tame names: the profile must have the same shape.
            let mut tame = plan(Network::LoopbackOnly);
            tame.writable_roots.push("/Volumes/root".into());
            tame.protected_paths = vec![tame.workspace.join("protected")];
            tame.denied_read_paths = vec!["/Users/dev/d/denied".into()];
            let tame_facts = facts(&tame, &[("/Users/dev/d/denied", dir("/Volumes/r/real"))]);
            let tame_text = profile(&tame, &tame_facts, &token()).unwrap();
            let tame_forms = parse(&tame_text).unwrap();

            let has_control = [&denied, &protected, &root, &real]
                .iter()
                .any(|c| c.chars().any(char::is_control));
            match profile(&weird, &weird_facts, &token()) {
                Err(SeatbeltError::ControlCharacter(_)) => prop_assert!(has_control),
                Err(other) => prop_assert!(false, "unexpected refusal: {other}"),
                Ok(text) => {
                    prop_assert!(!has_control);
                    let forms = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
                    let shape: Vec<Form> = forms.iter().map(Form::skeleton).collect();
                    let tame_shape: Vec<Form> = tame_forms.iter().map(Form::skeleton).collect();
                    prop_assert_eq!(shape, tame_shape);
                    // And the user's text arrives intact, inside string literals.
                    let mut strings = Vec::new();
                    forms.iter().for_each(|f| f.strings(&mut strings));
                    for expected in [
                        &weird.denied_read_paths[0],
                        &weird.protected_paths[0],
                        &weird.writable_roots[2],
                    ] {
                        let expected = normal(expected);
                        prop_assert!(strings.iter().any(|s| Path::new(s) == expected));
                    }
                    check_structure(&weird, &weird_facts, &text);
                }
            }
        }
    }
}
