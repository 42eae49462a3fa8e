//! The one place a decision becomes a launch: the engine's typed [`ConfinementPlan`] to the
//! shims' [`LaunchPlan`], with exhaustive matches and nothing re-decided.
//!
//! Everything that changes what runs — backend, network as applied, paths, budgets (with the
//! egress bridge's process), the environment allowlist — was decided by the engine and is in
//! the plan (and so in the audit record and its replay). The host adds only what it alone has:
//! the command, the values of its environment (filtered by the decided allowlist), the run's
//! private temp dir, and for a filtered network the proxy it started for that plan.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use palisade_engine::Backend;
use palisade_engine::output::{
    BudgetKind, BudgetOrigin, ConfinementPlan, EffectiveBudgets, EnvironmentOrigin, PlanNetwork,
};
use palisade_shims::plan::{Budgets, EgressProxy, LaunchPlan, Mechanism, Network};

use crate::envpolicy::{self, EnvRecord};
use crate::launch::LaunchError;

/// What the host supplies besides the plan.
#[derive(Debug)]
pub struct HostSide<V> {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Palisade's own environment, which the decided allowlist filters.
    pub vars: V,
    /// The home directory fact (`HOME` when Palisade's own is unset or relative).
    pub home: String,
    /// The run's private temp dir: the command's `TMPDIR`, one of the plan's writable roots.
    pub run_temp_dir: PathBuf,
    /// The proxy started for a filtered network (exactly then).
    pub egress: Option<EgressProxy>,
}

/// The shims' plan for `plan`, and the account of the command's environment.
pub fn launch_plan<V>(
    plan: &ConfinementPlan,
    host: HostSide<V>,
) -> Result<(LaunchPlan, EnvRecord), LaunchError>
where
    V: IntoIterator<Item = (OsString, OsString)>,
{
    let mechanism = match plan.backend {
        Backend::LinuxBwrap => Mechanism::Bwrap,
        Backend::LinuxLandlock => Mechanism::Landlock,
        Backend::DirectDedicated => Mechanism::Direct,
        Backend::MacosSeatbelt => Mechanism::Seatbelt,
        Backend::Docker => Mechanism::Docker,
    };
    let network = match (&plan.network, host.egress) {
        (PlanNetwork::None, None) => Network::None,
        (PlanNetwork::LoopbackOnly, None) => Network::LoopbackOnly,
        (PlanNetwork::AllowOutbound, None) => Network::AllowOutbound,
        (PlanNetwork::Filtered { .. }, Some(proxy)) => Network::Filtered(proxy),
        (PlanNetwork::Filtered { .. }, None) => {
            return Err(LaunchError::Plan(
                "the plan filters egress but no proxy was started".into(),
            ));
        }
        (_, Some(_)) => {
            return Err(LaunchError::Plan(
                "a proxy was started for a plan without filtered egress".into(),
            ));
        }
    };
    if !plan.process_tree_cleanup {
        // Every shim reaps the whole tree; a plan without it would mean a backend we do not
        // know how to supervise.
        return Err(LaunchError::Plan(
            "the plan does not include process-tree cleanup".into(),
        ));
    }
    let writable_roots: Vec<PathBuf> = plan.writable_roots.iter().map(PathBuf::from).collect();
    if !writable_roots.contains(&host.run_temp_dir) {
        return Err(LaunchError::Plan(format!(
            "the decision does not make the run's temp dir `{}` writable",
            host.run_temp_dir.display()
        )));
    }

    let source = match plan.environment.origin {
        EnvironmentOrigin::Default => "default",
        EnvironmentOrigin::Host => "host",
    };
    let mut command_env = envpolicy::command_env(
        host.vars,
        &plan.environment.allowlist,
        source,
        &host.home,
        &host.run_temp_dir,
    );
    let mut env = command_env.env.clone();
    if matches!(network, Network::Filtered(_)) {
        // The bridge is the only way out: every proxy variable points at it.
        env.retain(|(name, _)| !is_proxy_variable(name));
        env.extend(crate::egress::proxy_env(crate::egress::BRIDGE_PORT));
        env.sort();
    }
    command_env.account_final(&env);

    let launch = LaunchPlan {
        mechanism,
        network,
        workspace: PathBuf::from(&plan.workspace_dir),
        writable_roots,
        read_only_root: plan.read_only_root,
        denied_read_paths: plan.denied_read_paths.iter().map(PathBuf::from).collect(),
        protected_paths: plan
            .protected_paths
            .iter()
            .filter(|protected| protected.enforced)
            .map(|protected| PathBuf::from(&protected.path))
            .collect(),
        syscall_filter: plan.syscall_filter,
        command: host.command,
        env,
        run_temp_dir: host.run_temp_dir,
        budgets: budgets(&plan.budgets),
    };
    Ok((launch, command_env.record))
}

/// The supervisor's budgets: the decided ones, with the helper processes (the egress bridge)
/// on top of the process limit so that the command keeps the number it was given.
fn budgets(decided: &EffectiveBudgets) -> Budgets {
    Budgets {
        wall_clock: decided
            .timeout_millis
            .map(|limit| Duration::from_millis(limit.value)),
        memory_bytes: decided.memory_bytes.map(|limit| limit.value),
        max_processes: decided.max_processes.map(|limit| {
            limit
                .value
                .saturating_add(u64::from(decided.helper_processes))
        }),
        cpu_seconds: decided.cpu_seconds.map(|limit| limit.value),
    }
}

/// Proxy variables (any case) the launcher sets itself for filtered egress.
fn is_proxy_variable(name: &std::ffi::OsStr) -> bool {
    let upper = name.to_string_lossy().to_ascii_uppercase();
    matches!(
        upper.as_str(),
        "HTTP_PROXY" | "HTTPS_PROXY" | "ALL_PROXY" | "NO_PROXY" | "FTP_PROXY"
    )
}

/// What the user must hear before the command starts: every budget request that was clamped,
/// and every protected path the backend does not keep read-only. One line each.
pub fn notices(plan: &ConfinementPlan) -> Vec<String> {
    let mut lines = Vec::new();
    for clamp in &plan.budgets.clamped {
        lines.push(format!(
            "{} {} clamped to {} by {}",
            requester(clamp.requested_by, clamp.budget),
            show(clamp.budget, clamp.requested),
            show(clamp.budget, clamp.limit),
            origin(clamp.limited_by),
        ));
    }
    let unenforced: Vec<&str> = plan
        .protected_paths
        .iter()
        .filter(|protected| !protected.enforced)
        .map(|protected| protected.path.as_str())
        .collect();
    if !unenforced.is_empty() {
        lines.push(format!(
            "protected paths are NOT read-only under `{}`: {}",
            plan.backend.as_str(),
            unenforced.join(", ")
        ));
    }
    lines
}

/// Who asked: `--timeout`, `the policy's timeoutSeconds`.
fn requester(origin: BudgetOrigin, budget: BudgetKind) -> String {
    let (flag, field) = match budget {
        BudgetKind::Timeout => ("--timeout", "timeoutSeconds"),
        BudgetKind::Memory => ("--memory", "memoryMiB"),
        BudgetKind::MaxProcesses => ("--max-procs", "maxProcesses"),
        BudgetKind::Cpu => ("--cpu-seconds", "cpuSeconds"),
    };
    match origin {
        BudgetOrigin::Flag => flag.to_owned(),
        BudgetOrigin::Policy => format!("the policy's budgets.{field}"),
        BudgetOrigin::HostCeiling => format!("the host ceiling for {field}"),
    }
}

fn origin(origin: BudgetOrigin) -> &'static str {
    match origin {
        BudgetOrigin::Policy => "the policy's budget",
        BudgetOrigin::Flag => "the command line",
        BudgetOrigin::HostCeiling => "the host configuration's ceiling",
    }
}

/// A budget value for people: `10m`, `1.5s`, `512 MiB`, `64 processes`, `30 cpu-seconds`.
pub fn show(budget: BudgetKind, value: u64) -> String {
    match budget {
        BudgetKind::Timeout => show_millis(value),
        BudgetKind::Memory => show_bytes(value),
        BudgetKind::MaxProcesses => format!("{value} processes"),
        BudgetKind::Cpu => format!("{value} cpu-seconds"),
    }
}

fn show_millis(millis: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(3_600_000, "h"), (60_000, "m"), (1000, "s")];
    for (size, unit) in UNITS {
        if millis >= size && millis.is_multiple_of(size) {
            return format!("{}{unit}", millis / size);
        }
    }
    if millis >= 1000 {
        let fraction = format!("{:03}", millis % 1000);
        format!("{}.{}s", millis / 1000, fraction.trim_end_matches('0'))
    } else {
        format!("{millis}ms")
    }
}

fn show_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
        (1, "B"),
    ];
    UNITS
        .iter()
        .find(|(size, _)| bytes >= *size && bytes.is_multiple_of(*size))
        .map(|(size, unit)| format!("{} {unit}", bytes / size))
        .unwrap_or_else(|| format!("{bytes} B"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    #[test]
    fn values_read_as_people_write_them() {
        assert_eq!(show(BudgetKind::Timeout, 600_000), "10m");
        assert_eq!(show(BudgetKind::Timeout, 1_500), "1.5s");
        assert_eq!(show(BudgetKind::Timeout, 250), "250ms");
        assert_eq!(show(BudgetKind::Timeout, 7_200_000), "2h");
        assert_eq!(show(BudgetKind::Memory, 512 << 20), "512 MiB");
        assert_eq!(show(BudgetKind::Memory, 1000), "1000 B");
        assert_eq!(show(BudgetKind::MaxProcesses, 64), "64 processes");
    }
}
