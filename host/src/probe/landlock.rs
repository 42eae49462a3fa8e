//! `linux-landlock`: the ABI the kernel speaks, plus seccomp, and only what they can enforce.
//!
//! What each ABI adds (landlock(7)): 1 filesystem access rights; 2 `REFER` (cross-directory
//! rename and link); 3 `TRUNCATE`; 4 TCP bind/connect rules; 5 device `IOCTL`; 6 scoping of
//! abstract unix sockets and signals; 7 audit logging. The shim backs Landlock with a seccomp
//! filter for what it cannot express (other socket families, io_uring, ptrace, namespaces, ...).
//!
//! Then a trial (`palisade __sandbox-proc-trial`, time-boxed): the namespaces the sandbox's init
//! makes and the procfs mount its PID 1 does. It says whether a sandbox gets a `/proc` of its
//! own here or shares the host's with every process directory denied; one limitation line says
//! which ([`LandlockProc::limitation`]), the decision records it, and the launcher applies it.
//! No PID namespace at all means no launch could work: unavailable.

use std::time::Instant;

use palisade_engine::model::{Backend, BackendProbe, Capability, NetworkMode};
use palisade_shims::landlock_abi;
use palisade_shims::plan::LandlockProc;
use serde::Serialize;

use super::{Inputs, timed_out, unavailable};

/// What the `/proc` trial found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(
    not(target_os = "linux"),
    allow(dead_code, reason = "the trial runs on Linux only")
)]
pub(crate) enum ProcTrial {
    /// A sandbox gets a `/proc` of its own.
    Own,
    /// A sandbox shares the host's `/proc`, for this reason.
    Host(String),
    /// The PID namespace itself was refused, for this reason.
    NoPidNamespace(String),
    /// The trial did not run or said nothing usable.
    Failed(String),
    /// The probe's time box ran out.
    TimedOut,
}

/// Runs the trial with the palisade executable the inputs name.
#[cfg(target_os = "linux")]
fn proc_trial(inputs: &Inputs, deadline: Instant) -> ProcTrial {
    use palisade_shims::init::procfs::{TRIAL_SUBCOMMAND, TrialOutcome};

    use super::command::{self, RunError};
    use super::first_line;

    let Some(exe) = inputs
        .palisade_exe
        .as_ref()
        .and_then(super::Located::usable)
    else {
        return ProcTrial::Failed("the palisade executable is not known".into());
    };
    match command::run(exe, &[TRIAL_SUBCOMMAND.to_owned()], deadline) {
        Ok(done) => match TrialOutcome::parse(&done.stdout) {
            Some(TrialOutcome::Own) => ProcTrial::Own,
            Some(TrialOutcome::Host { reason }) => ProcTrial::Host(reason),
            Some(TrialOutcome::NoPidNamespace { reason }) => ProcTrial::NoPidNamespace(reason),
            None => ProcTrial::Failed(format!(
                "`{}` {} reported nothing: {}",
                exe.display(),
                TRIAL_SUBCOMMAND,
                first_line(&done.stderr)
            )),
        },
        Err(RunError::TimedOut) => ProcTrial::TimedOut,
        Err(RunError::Spawn(err) | RunError::Wait(err)) => {
            ProcTrial::Failed(format!("cannot run `{}`: {err}", exe.display()))
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn proc_trial(_: &Inputs, _: Instant) -> ProcTrial {
    ProcTrial::Failed("needs linux".into())
}

/// The outcome of `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    not(target_os = "linux"),
    allow(dead_code, reason = "the ABI is only queried on Linux")
)]
pub(crate) enum AbiQuery {
    /// The kernel's ABI version (0 would mean no Landlock).
    Abi(i64),
    /// The query failed with this errno.
    Errno(i32),
    /// Not Linux: there is nothing to ask.
    #[cfg_attr(
        target_os = "linux",
        allow(dead_code, reason = "only built on other systems")
    )]
    NotLinux,
}

impl AbiQuery {
    #[cfg(target_os = "linux")]
    pub(crate) fn query() -> AbiQuery {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
        let result = crate::sys::landlock_abi_query(LANDLOCK_CREATE_RULESET_VERSION);
        if result < 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            AbiQuery::Errno(errno)
        } else {
            AbiQuery::Abi(result)
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn query() -> AbiQuery {
        AbiQuery::NotLinux
    }
}

/// Whether this process can install seccomp filters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SeccompState {
    /// `prctl(PR_GET_SECCOMP)` answered (the kernel has seccomp).
    pub prctl: bool,
    /// The `Seccomp:` field of `/proc/self/status` (absent without `CONFIG_SECCOMP`).
    pub status_field: Option<String>,
    /// `/proc/sys/kernel/seccomp/actions_avail` (present with `CONFIG_SECCOMP_FILTER`).
    pub actions: Option<String>,
}

impl SeccompState {
    pub(crate) fn query() -> SeccompState {
        let status_field = palisade_shims::procfile::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("Seccomp:"))
                    .map(|value| value.trim().to_owned())
            });
        SeccompState {
            prctl: crate::sys::seccomp_mode_readable(),
            status_field,
            actions: palisade_shims::procfile::read_to_string(
                "/proc/sys/kernel/seccomp/actions_avail",
            )
            .ok()
            .map(|text| text.trim().to_owned()),
        }
    }

    /// Filters can be installed and can fail a syscall with an errno.
    pub(crate) fn filters_available(&self) -> bool {
        self.prctl
            && self.status_field.is_some()
            && self
                .actions
                .as_deref()
                .is_some_and(|actions| actions.split_whitespace().any(|a| a == "errno"))
    }
}

/// The probe: the kernel's answers (in the inputs), then the `/proc` trial.
pub(crate) fn probe(inputs: &Inputs, deadline: Instant) -> BackendProbe {
    match kernel_abi(inputs) {
        Ok(abi) => described(inputs, abi, &proc_trial(inputs, deadline)),
        Err(reason) => unavailable(Backend::LinuxLandlock, reason),
    }
}

/// The kernel's Landlock ABI, or why there is none.
fn kernel_abi(inputs: &Inputs) -> Result<i64, String> {
    match inputs.landlock {
        AbiQuery::NotLinux => Err("landlock needs linux".to_owned()),
        AbiQuery::Errno(errno) if errno == libc::ENOSYS => {
            Err("landlock not supported by this kernel".to_owned())
        }
        AbiQuery::Errno(errno) if errno == libc::EOPNOTSUPP => {
            Err("landlock disabled at boot".to_owned())
        }
        AbiQuery::Errno(errno) => {
            let err = std::io::Error::from_raw_os_error(errno);
            Err(format!("landlock abi query failed: {err}"))
        }
        AbiQuery::Abi(abi) if abi < 1 => Err("landlock not supported by this kernel".to_owned()),
        AbiQuery::Abi(abi) => Ok(abi),
    }
}

/// The probe for this ABI and this `/proc` trial: pure.
fn described(inputs: &Inputs, abi: i64, trial: &ProcTrial) -> BackendProbe {
    let (proc_mode, proc) = match trial {
        ProcTrial::Own => (
            palisade_engine::LandlockProc::Own,
            LandlockProc::Own.limitation(""),
        ),
        ProcTrial::Host(reason) => (
            palisade_engine::LandlockProc::HostProcessesDenied,
            LandlockProc::HostProcessesDenied.limitation(reason),
        ),
        ProcTrial::NoPidNamespace(reason) => {
            return unavailable(
                Backend::LinuxLandlock,
                format!("cannot create the sandbox's PID namespace: {reason}"),
            );
        }
        ProcTrial::Failed(why) => {
            return unavailable(
                Backend::LinuxLandlock,
                format!("the trial of the sandbox's namespaces failed: {why}"),
            );
        }
        ProcTrial::TimedOut => {
            return unavailable(Backend::LinuxLandlock, timed_out(inputs.timeout()));
        }
    };
    let seccomp = inputs.seccomp.filters_available();
    // What each ABI gives is the shim's table (`landlock_abi`), so the probe never claims what
    // the shim would refuse to apply.
    let kernel = u32::try_from(abi).unwrap_or(u32::MAX);
    let network = landlock_abi::denies_tcp(kernel) && seccomp;

    let mut capabilities = vec![Capability::FilesystemReadContainment];
    if landlock_abi::contains_writes(kernel) {
        capabilities.push(Capability::FilesystemWriteContainment);
    }
    if network {
        capabilities.push(Capability::NetworkIsolation);
    }
    capabilities.push(Capability::ProcessTreeCleanup);

    let network_modes = if network {
        vec![NetworkMode::None, NetworkMode::AllowOutbound]
    } else {
        vec![NetworkMode::AllowOutbound]
    };

    let mut limitations = vec![
        "protected paths that do not exist yet cannot be masked: landlock cannot stop creating them inside a writable workspace".to_owned(),
        "reads are denied only by allow-listing everything else: new files in the ancestor directories of a denied path may be unreadable".to_owned(),
        "loopback-only needs a network namespace, which landlock does not create".to_owned(),
        "no syscall filtering guarantee: its seccomp filter only backs what landlock cannot express".to_owned(),
    ];
    if kernel < landlock_abi::REFER {
        limitations.push(format!(
            "renaming or linking across directories is always denied (abi < {})",
            landlock_abi::REFER
        ));
    }
    if !landlock_abi::contains_writes(kernel) {
        limitations.push(format!(
            "truncating files cannot be denied (abi < {}), so writes are not contained",
            landlock_abi::TRUNCATE
        ));
    }
    if !landlock_abi::denies_tcp(kernel) {
        limitations.push(format!(
            "no tcp rules (abi < {}), so no network isolation",
            landlock_abi::TCP
        ));
    }
    if kernel < landlock_abi::IOCTL_DEV {
        limitations.push(format!(
            "ioctl on devices is not restricted (abi < {})",
            landlock_abi::IOCTL_DEV
        ));
    }
    if kernel < landlock_abi::SCOPES {
        limitations.push(format!(
            "abstract unix sockets and signals are not scoped (abi < {}); only seccomp limits them",
            landlock_abi::SCOPES
        ));
    }
    if !seccomp {
        limitations.push("seccomp filters unavailable: no network isolation, non-tcp sockets and io_uring unrestricted".to_owned());
    }

    // Why not a TCP port rule for the filtering proxy: Landlock's network rules name ports, not
    // addresses, and without a network namespace the command shares the host's routes, so
    // allowing the proxy's port would allow that port on every host on the internet.
    limitations.push(
        "no domain filtering: tcp rules restrict ports, not addresses, so allowing the proxy's \
         port would allow that port on any host"
            .to_owned(),
    );
    limitations.push(proc);
    let reason = if seccomp {
        format!("landlock abi {abi} with seccomp")
    } else {
        format!("landlock abi {abi} without seccomp")
    };
    BackendProbe {
        backend: Backend::LinuxLandlock,
        available: true,
        reason,
        capabilities,
        network_modes,
        network_bridge: false,
        version: format!("landlock abi {abi}"),
        limitations,
        // What init applies: the plan carries it, typed; the line above says it to people.
        landlock_proc: Some(proc_mode),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ProbeOptions;

    fn with(abi: AbiQuery, seccomp: bool) -> BackendProbe {
        with_trial(abi, seccomp, &ProcTrial::Own)
    }

    fn with_trial(abi: AbiQuery, seccomp: bool, trial: &ProcTrial) -> BackendProbe {
        let mut inputs = Inputs::gather(&ProbeOptions::default());
        inputs.landlock = abi;
        inputs.seccomp = SeccompState {
            prctl: seccomp,
            status_field: seccomp.then(|| "0".to_owned()),
            actions: seccomp.then(|| "kill_process errno allow".to_owned()),
        };
        match kernel_abi(&inputs) {
            Ok(abi) => described(&inputs, abi, trial),
            Err(reason) => unavailable(Backend::LinuxLandlock, reason),
        }
    }

    #[test]
    fn errnos_have_distinct_reasons() {
        assert_eq!(
            with(AbiQuery::Errno(libc::ENOSYS), true).reason,
            "landlock not supported by this kernel"
        );
        assert_eq!(
            with(AbiQuery::Errno(libc::EOPNOTSUPP), true).reason,
            "landlock disabled at boot"
        );
        assert_eq!(
            with(AbiQuery::Abi(0), true).reason,
            "landlock not supported by this kernel"
        );
        let other = with(AbiQuery::Errno(libc::EPERM), true);
        assert!(!other.available);
        assert!(
            other.reason.starts_with("landlock abi query failed: "),
            "{}",
            other.reason
        );
        assert!(other.capabilities.is_empty());
    }

    #[test]
    fn abi_7_with_seccomp() {
        let probe = with(AbiQuery::Abi(7), true);
        assert!(probe.available);
        assert_eq!(
            probe.capabilities,
            vec![
                Capability::FilesystemReadContainment,
                Capability::FilesystemWriteContainment,
                Capability::NetworkIsolation,
                Capability::ProcessTreeCleanup,
            ]
        );
        assert_eq!(
            probe.network_modes,
            vec![NetworkMode::None, NetworkMode::AllowOutbound]
        );
        assert_eq!(probe.version, "landlock abi 7");
        assert_eq!(probe.limitations.len(), 6);
        assert!(
            probe
                .limitations
                .iter()
                .any(|l| l.starts_with("no domain filtering"))
        );
    }

    /// One line says which `/proc` a sandbox gets, in the form the launcher reads back.
    #[test]
    #[allow(clippy::unwrap_used, reason = "tests fail loudly")]
    fn the_proc_trial_is_stated_or_the_backend_is_unavailable() {
        let own = with_trial(AbiQuery::Abi(7), true, &ProcTrial::Own);
        assert!(own.available);
        assert_eq!(own.landlock_proc, Some(palisade_engine::LandlockProc::Own));
        assert!(own.limitations.contains(&LandlockProc::OWN.to_owned()));
        let host = with_trial(
            AbiQuery::Abi(7),
            true,
            &ProcTrial::Host("mounting a procfs on /proc: Operation not permitted".into()),
        );
        assert!(host.available);
        assert_eq!(
            host.landlock_proc,
            Some(palisade_engine::LandlockProc::HostProcessesDenied)
        );
        let line = host
            .limitations
            .iter()
            .find(|l| l.starts_with(LandlockProc::HOST_PREFIX))
            .unwrap();
        assert!(line.contains("Operation not permitted"), "{line}");
        assert!(line.contains("the command's own included"), "{line}");
        for (trial, reason) in [
            (
                ProcTrial::NoPidNamespace("unshare: EPERM".into()),
                "cannot create the sandbox's PID namespace: unshare: EPERM",
            ),
            (
                ProcTrial::Failed("cannot run `/x`".into()),
                "the trial of the sandbox's namespaces failed: cannot run `/x`",
            ),
        ] {
            let probe = with_trial(AbiQuery::Abi(7), true, &trial);
            assert!(!probe.available);
            assert!(probe.capabilities.is_empty());
            assert_eq!(probe.reason, reason);
        }
        let timed_out = with_trial(AbiQuery::Abi(7), true, &ProcTrial::TimedOut);
        assert!(timed_out.reason.starts_with(crate::probe::TIMED_OUT));
    }

    #[test]
    fn abi_3_has_no_network_isolation() {
        let probe = with(AbiQuery::Abi(3), true);
        assert!(!probe.capabilities.contains(&Capability::NetworkIsolation));
        assert!(
            probe
                .capabilities
                .contains(&Capability::FilesystemWriteContainment)
        );
        assert_eq!(probe.network_modes, vec![NetworkMode::AllowOutbound]);
    }

    #[test]
    fn abi_1_cannot_contain_writes() {
        let probe = with(AbiQuery::Abi(1), true);
        assert_eq!(
            probe.capabilities,
            vec![
                Capability::FilesystemReadContainment,
                Capability::ProcessTreeCleanup
            ]
        );
        assert!(probe.limitations.iter().any(|l| l.contains("truncating")));
    }

    #[test]
    fn no_seccomp_means_no_network_isolation() {
        let probe = with(AbiQuery::Abi(7), false);
        assert!(probe.available);
        assert!(!probe.capabilities.contains(&Capability::NetworkIsolation));
        assert_eq!(probe.network_modes, vec![NetworkMode::AllowOutbound]);
    }

    #[test]
    fn never_claims_masks_or_syscall_filtering() {
        for abi in 1..=9 {
            for seccomp in [false, true] {
                let probe = with(AbiQuery::Abi(abi), seccomp);
                assert!(
                    !probe
                        .capabilities
                        .contains(&Capability::ProtectedPathReadOnlyMask)
                );
                assert!(!probe.capabilities.contains(&Capability::SyscallFiltering));
                assert!(!probe.network_modes.contains(&NetworkMode::LoopbackOnly));
            }
        }
    }
}
