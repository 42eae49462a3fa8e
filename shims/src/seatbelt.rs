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
//!
//! `subpath` matches a path and everything below it; `literal` matches exactly one path. Masks
//! use `subpath` (a protected or denied name stays covered whether it is a file, a directory,
//! or missing and created later); pins use `literal` (the pinned directory itself cannot be
//! renamed, removed or replaced, while files inside it stay as writable as the root makes them).
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
//! - The rules were written from Apple's and others' public profiles; this repository cannot run
//!   Seatbelt, so an operation name that a macOS release does not know makes `sandbox-exec` fail
//!   before the command starts (fail closed), never a weaker sandbox.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use crate::fsfacts::{FsFactsError, PathFact, PathKind};
use crate::plan::{LaunchPlan, Network};

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
                egress_proxy: None,
            };
            profile(&plan, &facts)
        })
        .collect()
}

/// Builds the SBPL profile for `plan`, given the `facts` measured for it. See the module docs.
pub fn profile(plan: &LaunchPlan, facts: &SeatbeltFacts) -> Result<String, SeatbeltError> {
    if plan.egress_proxy.is_some() {
        return Err(SeatbeltError::EgressProxy);
    }
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
    let pins = pins(&masked, &links, &roots);

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
    network(&mut out, plan.network, &writable)?;

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
    Ok(out.0)
}

/// The network section for `mode`. Each mode is one arm: a later mode (the domain allowlist,
/// whose only way out is the host proxy's loopback port) is one more arm here, e.g.
/// `(allow network-outbound (remote ip "localhost:PORT"))`.
fn network(out: &mut Sbpl, mode: Network, roots: &BTreeSet<PathBuf>) -> Result<(), SeatbeltError> {
    match mode {
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
            egress_proxy: None,
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
            let text = profile(&plan, &facts).unwrap();
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
        let text = profile(&plan, &facts).unwrap();
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
        let text = profile(&plan, &facts).unwrap();
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
        let a = profile(&plan, &facts).unwrap();
        let mut shuffled = plan.clone();
        shuffled.denied_read_paths.reverse();
        shuffled.protected_paths.reverse();
        shuffled.writable_roots.reverse();
        assert_eq!(a, profile(&shuffled, &facts).unwrap());
        assert_eq!(a, profile(&plan, &facts).unwrap());
    }

    // -----------------------------------------------------------------------------------------
    // Rules that matter for security, asserted directly (the snapshots show them too).

    #[test]
    fn denials_come_after_every_allowance() {
        let (plan, facts) = realistic(Network::AllowOutbound);
        let text = profile(&plan, &facts).unwrap();
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
        let text = profile(&plan, &facts).unwrap();
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
        let text = profile(&plan, &facts).unwrap();
        assert!(text.contains("(allow file-write* (subpath \"/private/tmp/palisade-501/run-1\"))"));
        assert!(!text.contains("(subpath \"/tmp/palisade-501/run-1\")"));
    }

    #[test]
    fn network_modes() {
        let text = |n| {
            let (plan, facts) = realistic(n);
            profile(&plan, &facts).unwrap()
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
        let text = profile(&plan, &facts).unwrap();
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
    // Refusals.

    fn refused(plan: &LaunchPlan, facts: &SeatbeltFacts) -> SeatbeltError {
        profile(plan, facts).expect_err("profile should be refused")
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
        assert!(profile(&plan, &f).is_ok());
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
        let text = profile(&plan, &facts).unwrap();
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
            let tame_text = profile(&tame, &tame_facts).unwrap();
            let tame_forms = parse(&tame_text).unwrap();

            let has_control = [&denied, &protected, &root, &real]
                .iter()
                .any(|c| c.chars().any(char::is_control));
            match profile(&weird, &weird_facts) {
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
