//! What the host gives the sandbox's init, and takes back: the spec ([`InitSpec`], made by
//! [`spec_for`] from a plan), the launch of `palisade __sandbox-init` with its descriptors
//! ([`launch`]), and the report init writes ([`InitReport`]). The init process itself is
//! `super`'s.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::landlock::{self, ListingFacts, RulesetPlan};
use crate::plan::{LandlockProc, LaunchPlan, Mechanism, Network, Reach};
use crate::seccomp;
use crate::supervise::{self, Launch, LaunchKind, PassFd};
use crate::sys::{self, RlimitResource};

/// The hidden subcommand of the `palisade` binary that calls [`main`].
pub const SUBCOMMAND: &str = "__sandbox-init";
/// The descriptor init reads its [`InitSpec`] from (JSON, until end of file).
pub const SPEC_FD: RawFd = 3;
/// The descriptor [`launch`] passes the report pipe on.
pub const REPORT_FD: RawFd = 4;
/// The descriptor [`launch`] passes the seccomp observer's socket on: the command child sends
/// its filter's listener over it ([`seccomp::install_observed`]).
pub const OBSERVE_FD: RawFd = 5;
/// The descriptor [`launch`] passes the start signal's pipe on: the command child writes one
/// byte to it just before it execs the command ([`InitSpec::started_fd`]).
pub const STARTED_FD: RawFd = 6;

/// The descriptor [`launch`] passes the masks' socket on: init sends the masks' `/dev/fuse`
/// descriptor over it ([`InitSpec::masks_fd`]).
pub const MASKS_FD: RawFd = 7;

/// Exit status for a failure of init itself (nothing was executed), as `env` and `docker run`.
pub const EXIT_SETUP_FAILED: i32 = 125;
/// The command was found but could not be executed.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// The command was not found.
pub const EXIT_NOT_FOUND: i32 = 127;

/// Everything init needs, as JSON on [`SPEC_FD`]. Strings that are not UTF-8 are written as
/// arrays of bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitSpec {
    /// The command and its arguments; `command[0]` is looked up in the `PATH` of `env` unless
    /// it contains a `/`.
    #[serde(with = "crate::wire::list")]
    pub command: Vec<OsString>,
    /// The command's complete environment.
    #[serde(with = "crate::wire::pairs")]
    pub env: Vec<(OsString, OsString)>,
    /// The command's working directory (the workspace).
    #[serde(with = "crate::wire::path")]
    pub cwd: PathBuf,
    /// Limits set in the command child before it execs.
    pub rlimits: Vec<Rlimit>,
    pub confinement: Confinement,
    /// Where to report setup failures and the Landlock status (set by [`launch`]).
    pub report_fd: Option<RawFd>,
    /// Where to send the seccomp filter's listener, for an observed filter (set by [`launch`]
    /// when the confinement has a filter).
    #[serde(default)]
    pub observe_fd: Option<RawFd>,
    /// Where the command child writes one byte just before it execs the command (set by
    /// [`launch`]): how the supervisor learns when the sandbox was set up
    /// ([`Launch::started`]). Nothing depends on it but the launcher's phase timings.
    #[serde(default)]
    pub started_fd: Option<RawFd>,
    /// The observed masks to mount and bind over denied paths before the ruleset is applied
    /// (`crate::fusemask`), in a mount namespace of the sandbox's own.
    #[serde(default)]
    pub masks: Option<MaskSpec>,
    /// Where init sends the masks' `/dev/fuse` descriptor once it has mounted them (set by
    /// [`launch`], whose mask server answers on the other end).
    #[serde(default)]
    pub masks_fd: Option<RawFd>,
    /// The launcher's [`crate::BUILD`] (set by [`launch`]): init runs only for a launcher of its
    /// own build, so an init binary left from another install cannot apply its own ruleset.
    #[serde(default)]
    pub build: Option<String>,
}

/// The observed masks of a Landlock sandbox: init mounts their FUSE filesystem on
/// `mountpoint` (an empty directory of the host's; the mount is in init's own mount namespace
/// only), binds node `i` over `nodes[i]`, and detaches the mount from `mountpoint` again (the
/// binds keep it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskSpec {
    #[serde(with = "crate::wire::path")]
    pub mountpoint: PathBuf,
    pub nodes: Vec<MaskNode>,
}

/// One observed mask: a directory or file node, bound over the denied path `target`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskNode {
    #[serde(with = "crate::wire::path")]
    pub target: PathBuf,
    pub dir: bool,
}

/// What the command child applies just before `execve`.
///
/// Adjacently tagged, the tag first: serde reads an internally tagged enum into a buffer before
/// it knows the variant, and a Landlock ruleset beneath a readable `/` holds a rule for every
/// entry beside each denied path's ancestors (hundreds in a home), which init read twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    content = "spec",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum Confinement {
    /// `direct-dedicated`: nothing (see the module documentation).
    None,
    /// `linux-landlock`: the ruleset, then (when the plan asks for a syscall filter) palisade's
    /// seccomp filter for the Landlock mechanism and this network reach.
    Landlock {
        ruleset: RulesetPlan,
        /// The `/proc` the sandbox gets, which `ruleset` was computed for ([`procfs`]).
        proc: LandlockProc,
        seccomp: Option<Reach>,
    },
}

/// One resource limit; `u64::MAX` is unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rlimit {
    pub resource: Resource,
    pub soft: u64,
    pub hard: u64,
}

/// The rlimits init may set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// Address space (`RLIMIT_AS`).
    As,
    /// Core file size (`RLIMIT_CORE`).
    Core,
    /// CPU seconds (`RLIMIT_CPU`).
    Cpu,
    /// File size (`RLIMIT_FSIZE`).
    Fsize,
    /// Open descriptors (`RLIMIT_NOFILE`).
    Nofile,
}

impl Resource {
    pub(super) fn raw(self) -> RlimitResource {
        match self {
            Resource::As => libc::RLIMIT_AS,
            Resource::Core => libc::RLIMIT_CORE,
            Resource::Cpu => libc::RLIMIT_CPU,
            Resource::Fsize => libc::RLIMIT_FSIZE,
            Resource::Nofile => libc::RLIMIT_NOFILE,
        }
    }
}

/// Why init could not be prepared or could not start the command.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("mechanism `{0:?}` does not use palisade's sandbox init")]
    Mechanism(Mechanism),
    #[error("the command is empty")]
    EmptyCommand,
    #[error("direct-dedicated confines no network; it runs only with allow-outbound")]
    DirectNetwork,
    #[error("{what} `{value}` contains a NUL byte")]
    Nul { what: &'static str, value: String },
    #[error(transparent)]
    Landlock(#[from] landlock::LandlockError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("invalid init spec: {0}")]
    Spec(String),
    #[error(
        "no /proc of the sandbox's own, though this host's probe found one (`palisade doctor` probes afresh): {0}"
    )]
    OwnProc(String),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: io::Error,
    },
}

pub(super) fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> InitError {
    move |source| InitError::Io { what, source }
}

/// The spec for `plan`. For `Landlock`, the ruleset is computed from `facts` (measured now when
/// `None`); the seccomp filter is always included (it is half of the mechanism). Core dumps are
/// off (`RLIMIT_CORE` 0): a crashing command must not write its memory into the workspace.
/// Budgets are not part of the spec: the supervisor enforces them (cgroup or rlimits set before
/// init starts, inherited by everything below it).
pub fn spec_for(plan: &LaunchPlan, facts: Option<&ListingFacts>) -> Result<InitSpec, InitError> {
    if plan.command.is_empty() {
        return Err(InitError::EmptyCommand);
    }
    let confinement = match plan.mechanism {
        // No masks means no network isolation either: anything but the host's network would
        // be a promise this mechanism cannot keep.
        Mechanism::Direct if plan.network != Network::AllowOutbound => {
            return Err(InitError::DirectNetwork);
        }
        Mechanism::Direct => Confinement::None,
        Mechanism::Landlock(proc) => {
            let measured;
            let facts = match facts {
                Some(f) => f,
                None => {
                    measured = ListingFacts::measure(plan)?;
                    &measured
                }
            };
            Confinement::Landlock {
                ruleset: landlock::ruleset_plan(plan, facts)?,
                proc,
                // Always: the filter is half of this mechanism (non-TCP sockets, io_uring,
                // keyrings, namespaces, setuid bits, TIOCSTI), whether or not the policy asked
                // for `syscallFiltering` (which the Landlock probe does not claim).
                seccomp: Some(plan.network.reach()),
            }
        }
        Mechanism::Bwrap | Mechanism::Seatbelt | Mechanism::Docker => {
            return Err(InitError::Mechanism(plan.mechanism));
        }
    };
    Ok(InitSpec {
        command: plan.command.clone(),
        env: plan.env.clone(),
        cwd: plan.workspace.clone(),
        rlimits: vec![Rlimit {
            resource: Resource::Core,
            soft: 0,
            hard: 0,
        }],
        confinement,
        report_fd: None,
        observe_fd: None,
        started_fd: None,
        masks: None,
        masks_fd: None,
        build: None,
    })
}

/// A [`Launch`] of `exe` (the palisade binary, or any binary whose [`SUBCOMMAND`] calls
/// [`main`]) with `spec` on [`SPEC_FD`] (a memfd) and the report pipe on [`REPORT_FD`]. When the
/// confinement has a seccomp filter, it is installed observed: the command child sends its
/// listener over [`OBSERVE_FD`] to a [`seccomp::observe::Observer`] started here. Keep the
/// [`InitReport`] and [`InitReport::collect`] it after the run. The start signal's pipe is on
/// [`STARTED_FD`], its read end in [`Launch::started`].
pub fn launch(spec: &InitSpec, exe: &Path) -> Result<(Launch, InitReport), InitError> {
    let mut spec = spec.clone();
    spec.report_fd = Some(REPORT_FD);
    spec.started_fd = Some(STARTED_FD);
    spec.build = Some(crate::BUILD.to_owned());
    let mut fds = Vec::new();
    let observer = match &spec.confinement {
        Confinement::Landlock {
            seccomp: Some(reach),
            proc,
            ..
        } => {
            let (ours, theirs) = seccomp::observe::channel().map_err(io_err("observer socket"))?;
            let profile = seccomp::Profile {
                mechanism: Mechanism::Landlock(*proc),
                reach: *reach,
            };
            let observer = seccomp::observe::Observer::start(
                seccomp::observe::Channel::Connected(ours),
                seccomp::Arch::native()?,
                profile,
                seccomp::observe::Watch::default(),
            )
            .map_err(io_err("observer thread"))?;
            spec.observe_fd = Some(OBSERVE_FD);
            fds.push(PassFd {
                fd: theirs,
                target: OBSERVE_FD,
            });
            Some(observer)
        }
        Confinement::Landlock { seccomp: None, .. } | Confinement::None => None,
    };
    // The observed masks: init mounts them and sends their device here, to be served.
    let masks = match &spec.masks {
        Some(masks) => {
            let (ours, theirs) = sys::socketpair_cloexec().map_err(io_err("masks socket"))?;
            let nodes: Vec<crate::bwrap::DeniedMask> = masks
                .nodes
                .iter()
                .map(|node| crate::bwrap::DeniedMask {
                    target: node.target.clone(),
                    dir: node.dir,
                    denied: Vec::new(),
                })
                .collect();
            let server = crate::fusemask::MaskServer::serve_sent(ours, &nodes)
                .map_err(|e| InitError::Spec(e.to_string()))?;
            spec.masks_fd = Some(MASKS_FD);
            fds.push(PassFd {
                fd: theirs,
                target: MASKS_FD,
            });
            Some(server)
        }
        None => None,
    };
    let json = serde_json::to_vec(&spec).map_err(|e| InitError::Spec(e.to_string()))?;
    let memfd =
        supervise::data_fd("palisade-init-spec", &json).map_err(io_err("init spec memfd"))?;
    let (report_read, report_write) = sys::pipe_cloexec().map_err(io_err("report pipe"))?;
    fds.push(PassFd {
        fd: memfd,
        target: SPEC_FD,
    });
    fds.push(PassFd {
        fd: report_write,
        target: REPORT_FD,
    });
    let (started_read, started_write) = sys::pipe_cloexec().map_err(io_err("start pipe"))?;
    fds.push(PassFd {
        fd: started_write,
        target: STARTED_FD,
    });
    let launch = Launch {
        program: exe.to_path_buf(),
        args: vec![OsString::from(SUBCOMMAND)],
        env: Vec::new(),
        cwd: None,
        fds,
        kind: LaunchKind::SandboxInit,
        started: Some(started_read),
        pid_record: None,
        mask_namespace: None,
    };
    Ok((
        launch,
        InitReport {
            read: report_read,
            observer,
            masks,
        },
    ))
}

/// The read end of init's report pipe, and the observer of the command's seccomp filter.
pub struct InitReport {
    read: OwnedFd,
    observer: Option<seccomp::observe::Observer>,
    masks: Option<crate::fusemask::MaskServer>,
}

impl std::fmt::Debug for InitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitReport")
            .field("read", &self.read)
            .field("observing", &self.observer.is_some())
            .field("masks", &self.masks.is_some())
            .finish()
    }
}

/// What init reported: a setup failure (nothing was executed; the status is 125), and what
/// Landlock enforced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetupReport {
    pub error: Option<String>,
    pub landlock: Option<landlock::Status>,
    /// The calls the seccomp filter refused, as its observer answered them.
    pub observed: Option<seccomp::observe::Observed>,
    /// Why init did not bind the observed masks it was given, if it did not.
    pub masks_error: Option<String>,
    /// What the observed masks refused (`None`: there were none).
    pub masks_seen: Option<crate::fusemask::Seen>,
}

impl InitReport {
    /// Reads the report. Call after [`crate::supervise::run`] returned (every writer is gone
    /// then, so this never blocks).
    pub fn collect(self) -> SetupReport {
        let mut text = Vec::new();
        let _ = File::from(self.read).read_to_end(&mut text);
        let mut report = SetupReport {
            observed: self.observer.map(seccomp::observe::Observer::finish),
            masks_seen: self.masks.map(crate::fusemask::MaskServer::finish),
            ..SetupReport::default()
        };
        for line in String::from_utf8_lossy(&text).lines() {
            if let Some(message) = line.strip_prefix("error: ") {
                report.error.get_or_insert_with(|| message.to_string());
            } else if let Some(why) = line.strip_prefix("masks: ") {
                report.masks_error = Some(why.to_owned());
            } else if let Some(json) = line.strip_prefix("landlock: ") {
                report.landlock = serde_json::from_str(json).ok();
            }
        }
        report
    }
}

/// Why init refuses a launcher whose [`crate::BUILD`] is `launcher` (not its own).
pub fn other_build(launcher: Option<&str>) -> String {
    format!(
        "this sandbox init is build {} but the launcher is build {}: install `palisade` and \
         `palisade-init` from one build (`cargo install --path host` installs both)",
        crate::BUILD,
        launcher.unwrap_or("(none given)")
    )
}
