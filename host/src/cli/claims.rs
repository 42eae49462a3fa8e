//! `run --input`: a managed controller's decision input may claim no more than this host
//! measured (its facts and its probes); a claim that is looser is refused before anything is
//! decided (`HOST_FACTS_MISMATCH`).

use palisade_engine::LandlockProc;
use palisade_engine::{Backend, DecisionInput};

use crate::report::{ErrorCode, Failure};

/// A managed controller's decision input may not claim more than this host measured: the same
/// OS and architecture, existing directories at their real paths, and for every backend no
/// availability, capability, network mode or network bridge this host's own probe lacks.
/// Otherwise the launch would rest on isolation nobody measured here.
pub(super) fn confirm_claims(
    input: &DecisionInput,
    measured: &palisade_engine::HostFacts,
    probes: &[palisade_engine::BackendProbe],
) -> Result<(), Failure> {
    let mut problems = Vec::new();
    for (field, claimed, here) in [
        ("host.os", &input.host.os, &measured.os),
        ("host.arch", &input.host.arch, &measured.arch),
    ] {
        if claimed != here {
            problems.push(format!("{field}: `{claimed}`, but this host is `{here}`"));
        }
    }
    // `--writable` places too: the shim binds a writable root at its real path, so a symlink
    // spelt inside the workspace would make its target writable.
    let flagged = input
        .policy_flags
        .iter()
        .flat_map(|flags| flags.writable_roots.iter().enumerate())
        .map(|(i, root)| (format!("policyFlags.writableRoots[{i}]"), root));
    let dirs = std::iter::once(("host.workspaceDir".to_owned(), &input.host.workspace_dir))
        .chain(
            input
                .host
                .writable_roots
                .iter()
                .enumerate()
                .map(|(i, root)| (format!("host.writableRoots[{i}]"), root)),
        )
        .chain(flagged);
    for (field, dir) in dirs {
        let real = std::fs::canonicalize(dir);
        if !real
            .as_ref()
            .is_ok_and(|real| real.is_dir() && real == std::path::Path::new(dir))
        {
            problems.push(format!(
                "{field}: `{dir}` is not an existing directory at its real path here"
            ));
        }
    }
    problems.extend(looser_host_facts(&input.host, measured));
    problems.extend(crate::unix_sockets::claims_differ(&input.host, measured));
    for (index, claim) in input.probes.iter().enumerate() {
        let name = claim.backend.as_str();
        let Some(here) = probes.iter().find(|p| p.backend == claim.backend) else {
            problems.push(format!("probes[{index}]: `{name}` was not probed here"));
            continue;
        };
        if claim.available && !here.available {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed available, but here: {}",
                here.reason
            ));
            continue;
        }
        if !claim.available {
            continue;
        }
        for capability in claim
            .capabilities
            .iter()
            .filter(|c| !here.capabilities.contains(c))
        {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed to provide `{}`, which this host's probe does not",
                capability.as_str()
            ));
        }
        for mode in claim
            .network_modes
            .iter()
            .filter(|m| !here.network_modes.contains(m))
        {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed to enforce network mode `{}`, which this host's probe does not",
                mode.as_str()
            ));
        }
        if claim.network_bridge && !here.network_bridge {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed to have the network bridge (filtered egress, host loopback ports), which this host's probe does not"
            ));
        }
        // Sharing the host's `/proc` (every process directory denied) needs nothing of the
        // host; a `/proc` of the sandbox's own does.
        if claim.backend == Backend::LinuxLandlock
            && claim.landlock_proc == Some(LandlockProc::Own)
            && here.landlock_proc != Some(LandlockProc::Own)
        {
            problems.push(format!(
                "probes[{index}]: `{name}` is claimed to give the sandbox a /proc of its own, which this host's probe does not"
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let mut failure = Failure::new(
        ErrorCode::HostFactsMismatch,
        format!(
            "the decision input claims more than this host measured ({} {})",
            problems.len(),
            if problems.len() == 1 {
                "claim"
            } else {
                "claims"
            }
        ),
    );
    for problem in problems {
        failure = failure.detail(problem);
    }
    Err(failure.hint("nothing was run; `palisade doctor --json` shows what this host measures"))
}

/// What the input's host facts loosen against this host's own (its configuration and flags): a
/// managed controller decides the policy, but not past the limits the host's administrator set.
fn looser_host_facts(
    claimed: &palisade_engine::HostFacts,
    here: &palisade_engine::HostFacts,
) -> Vec<String> {
    use palisade_engine::SessionKind;
    let mut problems = Vec::new();
    let mut looser = |field: &str, what: String| {
        problems.push(format!("host.{field}: {what}, looser than this host"));
    };
    if claimed.home_dir != here.home_dir {
        // Denied `~/` paths resolve against it.
        looser(
            "homeDir",
            format!(
                "`{}`, but the home here is `{}`",
                claimed.home_dir, here.home_dir
            ),
        );
    }
    if here.session_kind == SessionKind::Turnkey && claimed.session_kind != SessionKind::Turnkey {
        looser(
            "sessionKind",
            format!("`{}`", claimed.session_kind.as_str()),
        );
    }
    if claimed.allow_direct_dedicated && !here.allow_direct_dedicated {
        looser("allowDirectDedicated", "`true`".into());
    }
    if here.allow_workspace_mode == Some(false) && claimed.allow_workspace_mode != Some(false) {
        looser("allowWorkspaceMode", "not `false`".into());
    }
    if claimed.allow_home_writable == Some(true) && here.allow_home_writable != Some(true) {
        looser("allowHomeWritable", "`true`".into());
    }
    match (&claimed.environment_allowlist, &here.environment_allowlist) {
        (None, _) => {}
        (Some(list), Some(allowed)) if list.iter().all(|entry| allowed.contains(entry)) => {}
        (Some(_), _) => looser(
            "environmentAllowlist",
            "passes variables this host's allowlist does not".into(),
        ),
    }
    let here_denied = here.denied_read_paths.as_deref().unwrap_or_default();
    let claimed_denied = claimed.denied_read_paths.as_deref().unwrap_or_default();
    if here_denied
        .iter()
        .any(|path| !claimed_denied.contains(path))
    {
        looser("deniedReadPaths", "drops paths this host denies".into());
    }
    // The repository is measured here: a claim of other git directories (or none) would move
    // the protection of git's hooks and configuration away from the ones this run can write.
    if claimed.git_dirs.is_some() && claimed.git_dirs != here.git_dirs {
        looser(
            "gitDirs",
            format!(
                "{:?}, but this workspace's git directories are {:?}",
                claimed.git_dirs.as_deref().unwrap_or_default(),
                here.git_dirs.as_deref().unwrap_or_default()
            ),
        );
    }
    // Palisade's own state is masked where the run could write it: a claim without some of it
    // would leave it writable.
    let claimed_state = claimed.state_paths.as_deref().unwrap_or_default();
    if here
        .state_paths
        .iter()
        .flatten()
        .any(|path| !claimed_state.contains(path))
    {
        looser(
            "statePaths",
            "leaves out Palisade's own state that this host measured".into(),
        );
    }
    // A signing key is denied in every sandbox: a claim without it would hand the command it.
    let claimed_keys = claimed.key_paths.as_deref().unwrap_or_default();
    if here
        .key_paths
        .iter()
        .flatten()
        .any(|path| !claimed_keys.contains(path))
    {
        looser(
            "keyPaths",
            "leaves out a Palisade signing key that this host holds".into(),
        );
    }
    let here_rules = here.exempt_protected_paths.as_deref().unwrap_or_default();
    if claimed
        .exempt_protected_paths
        .iter()
        .flatten()
        .any(|rule| !here_rules.contains(rule))
    {
        looser(
            "exemptProtectedPaths",
            "exempts protected paths this host does not".into(),
        );
    }
    let here_exempt = here.exempt_denied_read_paths.as_deref().unwrap_or_default();
    let claimed_exempt = claimed
        .exempt_denied_read_paths
        .as_deref()
        .unwrap_or_default();
    if claimed_exempt
        .iter()
        .any(|path| !here_exempt.contains(path))
    {
        looser(
            "exemptDeniedReadPaths",
            "exempts credential stores this host does not".into(),
        );
    }
    for (field, claimed_caps, here_caps) in [
        (
            "budgetCeilings",
            &claimed.budget_ceilings,
            &here.budget_ceilings,
        ),
        (
            "runtimeProfileBudgets",
            &claimed.runtime_profile_budgets,
            &here.runtime_profile_budgets,
        ),
    ] {
        let Some(here_caps) = here_caps else {
            continue;
        };
        let claimed_caps = claimed_caps.clone().unwrap_or_default();
        let pairs = [
            (here_caps.timeout_millis, claimed_caps.timeout_millis),
            (here_caps.memory_bytes, claimed_caps.memory_bytes),
            (here_caps.max_processes, claimed_caps.max_processes),
            (here_caps.cpu_seconds, claimed_caps.cpu_seconds),
        ];
        let lifted = pairs
            .iter()
            .any(|(cap, claim)| cap.is_some_and(|cap| claim.is_none_or(|claim| claim > cap)));
        if lifted {
            looser(field, "lifts or raises a cap this host sets".into());
        }
    }
    problems
}
