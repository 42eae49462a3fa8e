//! The one place a decision becomes a launch: the engine's typed [`ConfinementPlan`] to the
//! shims' [`LaunchPlan`], with exhaustive matches and nothing re-decided.
//!
//! Everything that changes what runs — backend, network as applied, paths, budgets (with the
//! egress bridge's process), the environment allowlist — was decided by the engine and is in
//! the plan (and so in the audit record and its replay), a `linux-landlock` sandbox's `/proc`
//! (`plan.landlockProc`, from its probe) and the launcher's own processes the process budget
//! counts (`plan.budgets.launcherProcesses`) among it. The host adds only what it alone has:
//! the command, the values of its environment (filtered by the decided allowlist), the run's
//! private temp dir, and the network bridge it started for the plan's routes (filtered egress,
//! listed host loopback ports) with the variables that point the command at it (the proxy
//! variables and `GIT_SSH_COMMAND`, which follow from the plan's `filtered` network alone).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use palisade_engine::Backend;
use palisade_engine::output::{ConfinementPlan, EffectiveBudgets, EnvironmentOrigin, PlanNetwork};
use palisade_shims::plan::{
    Bridge, Budgets, HostSocket, LandlockProc, LaunchPlan, Mechanism, Network,
};

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
    /// The bridge started for the plan's routes (exactly when it has any: filtered egress,
    /// listed host loopback ports).
    pub bridge: Option<Bridge>,
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
        Backend::LinuxLandlock => Mechanism::Landlock(match plan.landlock_proc {
            Some(palisade_engine::LandlockProc::Own) => LandlockProc::Own,
            Some(palisade_engine::LandlockProc::HostProcessesDenied) => {
                LandlockProc::HostProcessesDenied
            }
            None => {
                return Err(LaunchError::Plan(
                    "the `linux-landlock` plan does not say which /proc the sandbox gets (`plan.landlockProc`)".into(),
                ));
            }
        }),
        Backend::DirectDedicated => Mechanism::Direct,
        Backend::MacosSeatbelt => Mechanism::Seatbelt,
        Backend::Docker => Mechanism::Docker,
    };
    let routes = match &plan.network {
        PlanNetwork::Filtered { .. } => true,
        PlanNetwork::LoopbackOnly { host_ports } => !host_ports.is_empty(),
        PlanNetwork::None | PlanNetwork::HostLoopback | PlanNetwork::AllowOutbound => false,
    };
    let network = match (&plan.network, host.bridge) {
        (PlanNetwork::None, None) => Network::None,
        (PlanNetwork::LoopbackOnly { .. } | PlanNetwork::Filtered { .. }, bridge)
            if routes == bridge.is_some() =>
        {
            Network::OwnLoopback(bridge)
        }
        (PlanNetwork::HostLoopback, None) => Network::HostLoopback,
        (PlanNetwork::AllowOutbound, None) => Network::AllowOutbound,
        (_, bridge) => {
            return Err(LaunchError::Plan(format!(
                "the plan's network `{}` {} a bridge, and one was {}started",
                plan.network.as_str(),
                if routes { "needs" } else { "has no route for" },
                if bridge.is_some() { "" } else { "not " }
            )));
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
        EnvironmentOrigin::Flag => "flag",
    };
    let mut command_env = envpolicy::command_env(
        host.vars,
        &plan.environment.allowlist,
        source,
        &host.home,
        &host.run_temp_dir,
    );
    let mut env = command_env.env.clone();
    if matches!(plan.network, PlanNetwork::Filtered { .. }) {
        crate::network::apply_filtered_env(&mut env);
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
        unix_sockets: plan
            .unix_sockets
            .iter()
            .map(|socket| HostSocket {
                path: PathBuf::from(&socket.path),
                target: PathBuf::from(&socket.target),
            })
            .collect(),
    };
    Ok((launch, command_env.record))
}

/// The supervisor's budgets: the decided ones, with the helper processes (the network bridge)
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
        launcher_processes: u64::from(decided.launcher_processes),
    }
}
