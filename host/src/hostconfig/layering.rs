//! Layering: what "tighten" means per field when a per-user file sits on the system file, and
//! the effective values with their origin.

use palisade_engine::environment::{self, Entry};
use palisade_engine::reader::{Errors, quote};
use palisade_engine::{Backend, SessionKind};

use super::{BUDGET_FIELDS, BudgetSettings, Effective, Setting, Source, Spec};

/// Every way `user` loosens `system`, at the user file's field paths. The rules, per field, when
/// the system file sets it (a field the system file leaves unset is the user's to set):
///
/// - `sessionKind`: the same kind, or `turnkey` (the only kind that adds a constraint);
/// - `defaultBackendOrder`: a subsequence (drop backends, keep the system's order);
/// - `allowDirectDedicated`, `allowWorkspaceMode`: `true` only if the system says `true`;
/// - `writableRoots`, `taskTempDirs`: a subset of the system's list;
/// - `resultsDir`, `dockerRuntimeProfiles`: the same path;
/// - `loopbackPorts`, `allowRootGrantingSockets`: a subset of the system's list;
/// - `environment.allow`: every entry covered by the system's list — an exact name the system
///   names exactly or passes by a pattern (a pattern never covers a secret-looking name), a
///   pattern inside one of the system's patterns;
/// - `budgets.*`: at most the system's ceiling.
pub fn tighten_errors(system: &Spec, user: &Spec) -> Errors {
    let mut errors = Errors::default();
    let loosens =
        |what: String| format!("{what}; a per-user file may only tighten the system configuration");
    if let (Some(sys), Some(usr)) = (system.session_kind, user.session_kind)
        && usr != sys
        && usr != SessionKind::Turnkey
    {
        errors.push(
            "spec.sessionKind",
            loosens(format!(
                "`{}` instead of the system's `{}` (only `turnkey` is tighter)",
                usr.as_str(),
                sys.as_str()
            )),
        );
    }
    if let (Some(sys), Some(usr)) = (&system.default_backend_order, &user.default_backend_order)
        && !is_subsequence(usr, sys)
    {
        errors.push(
            "spec.defaultBackendOrder",
            loosens(format!(
                "not a subsequence of the system's order [{}]",
                sys.iter()
                    .map(|b| b.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        );
    }
    for (field, sys, usr) in [
        (
            "spec.allowDirectDedicated",
            system.allow_direct_dedicated,
            user.allow_direct_dedicated,
        ),
        (
            "spec.allowWorkspaceMode",
            system.allow_workspace_mode,
            user.allow_workspace_mode,
        ),
        (
            "spec.allowHomeWritable",
            system.allow_home_writable,
            user.allow_home_writable,
        ),
    ] {
        if sys == Some(false) && usr == Some(true) {
            errors.push(
                field,
                loosens("`true` where the system says `false`".into()),
            );
        }
    }
    for (field, sys, usr) in [
        (
            "spec.writableRoots",
            &system.writable_roots,
            &user.writable_roots,
        ),
        (
            "spec.taskTempDirs",
            &system.task_temp_dirs,
            &user.task_temp_dirs,
        ),
    ] {
        if let (Some(sys), Some(usr)) = (sys, usr) {
            for (index, path) in usr.iter().enumerate() {
                if !sys.contains(path) {
                    errors.push(
                        format!("{field}[{index}]"),
                        loosens(format!("{} is not in the system's list", quote(path))),
                    );
                }
            }
        }
    }
    for (field, sys, usr) in [
        ("spec.resultsDir", &system.results_dir, &user.results_dir),
        (
            "spec.dockerRuntimeProfiles",
            &system.docker_runtime_profiles,
            &user.docker_runtime_profiles,
        ),
    ] {
        if let (Some(sys), Some(usr)) = (sys, usr)
            && sys != usr
        {
            errors.push(
                field,
                loosens(format!(
                    "{} instead of the system's {}",
                    quote(usr),
                    quote(sys)
                )),
            );
        }
    }
    // Denying more is tighter: the user's list keeps every path the system denies.
    if let (Some(sys), Some(usr)) = (&system.denied_read_paths, &user.denied_read_paths) {
        for path in sys.iter().filter(|path| !usr.contains(path)) {
            errors.push(
                "spec.deniedReadPaths",
                loosens(format!("drops the system's {}", quote(path))),
            );
        }
    }
    // Reaching more host ports is looser: only ports the system lists.
    if let (Some(sys), Some(usr)) = (&system.loopback_ports, &user.loopback_ports) {
        for (index, port) in usr.iter().enumerate() {
            if !sys.contains(port) {
                errors.push(
                    format!("spec.loopbackPorts[{index}]"),
                    loosens(format!("port {port} is not among the system's")),
                );
            }
        }
    }
    // Reaching more sockets that grant root is looser: only paths the system lists.
    if let (Some(sys), Some(usr)) = (
        &system.allow_root_granting_sockets,
        &user.allow_root_granting_sockets,
    ) {
        for (index, path) in usr.iter().enumerate() {
            if !sys.contains(path) {
                errors.push(
                    format!("spec.allowRootGrantingSockets[{index}]"),
                    loosens(format!("{} is not among the system's", quote(path))),
                );
            }
        }
    }
    // Exempting is looser: only what the system exempts.
    if let (Some(sys), Some(usr)) = (&system.exempt_protected_paths, &user.exempt_protected_paths) {
        for (index, rule) in usr.iter().enumerate() {
            if !sys.contains(rule) {
                errors.push(
                    format!("spec.exemptProtectedPaths[{index}]"),
                    loosens(format!("{} is not exempted by the system", quote(rule))),
                );
            }
        }
    }
    if let (Some(sys), Some(usr)) = (
        &system.exempt_denied_read_paths,
        &user.exempt_denied_read_paths,
    ) {
        for (index, path) in usr.iter().enumerate() {
            if !sys.contains(path) {
                errors.push(
                    format!("spec.exemptDeniedReadPaths[{index}]"),
                    loosens(format!("{} is not exempted by the system", quote(path))),
                );
            }
        }
    }
    if let (Some(sys), Some(usr)) = (&system.environment, &user.environment) {
        let sys_entries = environment::parse_all(sys.iter().map(String::as_str));
        for (index, entry) in usr.iter().enumerate() {
            if !entry_covered(entry, &sys_entries) {
                errors.push(
                    format!("spec.environment.allow[{index}]"),
                    loosens(format!(
                        "{} is not covered by the system's allowlist",
                        quote(entry)
                    )),
                );
            }
        }
    }
    for (field, _) in BUDGET_FIELDS {
        if let (Some(sys), Some(usr)) = (system.budgets.get(field), user.budgets.get(field))
            && usr > sys
        {
            errors.push(
                format!("spec.budgets.{field}"),
                loosens(format!("{usr} is above the system's ceiling {sys}")),
            );
        }
    }
    errors
}

fn is_subsequence(sub: &[Backend], of: &[Backend]) -> bool {
    let mut rest = of.iter();
    sub.iter().all(|b| rest.any(|o| o == b))
}

/// Whether a user entry passes nothing the system's list would not pass.
fn entry_covered(entry: &str, system: &[Entry]) -> bool {
    match environment::parse_entry(entry) {
        Ok(Entry::Exact(name)) => environment::verdict(system, &name).passes(),
        Ok(Entry::Prefix(prefix)) => system
            .iter()
            .any(|s| matches!(s, Entry::Prefix(p) if prefix.starts_with(p.as_str()))),
        Err(_) => false,
    }
}

/// The effective configuration: the upper file's value where it sets one, else the system's,
/// else the default. (Tightening was checked before.)
pub fn merge(system: &Spec, upper: Option<(&Spec, Source)>) -> Effective {
    fn pick<T: Clone>(
        default: T,
        system: Option<&T>,
        upper: Option<(Option<&T>, Source)>,
    ) -> Setting<T> {
        if let Some((Some(value), source)) = upper {
            return Setting {
                value: value.clone(),
                from: source,
            };
        }
        match system {
            Some(value) => Setting {
                value: value.clone(),
                from: Source::System,
            },
            None => Setting {
                value: default,
                from: Source::Default,
            },
        }
    }
    fn pick_opt<T: Clone>(
        system: Option<T>,
        upper: Option<(Option<T>, Source)>,
    ) -> Setting<Option<T>> {
        if let Some((Some(value), source)) = upper {
            return Setting {
                value: Some(value),
                from: source,
            };
        }
        match system {
            Some(value) => Setting {
                value: Some(value),
                from: Source::System,
            },
            None => Setting {
                value: None,
                from: Source::Default,
            },
        }
    }
    let up = |f: fn(&Spec) -> Option<&Vec<String>>| upper.map(|(s, src)| (f(s), src));
    let budget = |field: &str| {
        pick_opt(
            system.budgets.get(field),
            upper.map(|(s, src)| (s.budgets.get(field), src)),
        )
    };
    Effective {
        session_kind: pick_opt(
            system.session_kind,
            upper.map(|(s, src)| (s.session_kind, src)),
        ),
        default_backend_order: pick(
            crate::facts::default_backend_order(),
            system.default_backend_order.as_ref(),
            upper.map(|(s, src)| (s.default_backend_order.as_ref(), src)),
        ),
        allow_direct_dedicated: pick_opt(
            system.allow_direct_dedicated,
            upper.map(|(s, src)| (s.allow_direct_dedicated, src)),
        ),
        allow_workspace_mode: pick_opt(
            system.allow_workspace_mode,
            upper.map(|(s, src)| (s.allow_workspace_mode, src)),
        ),
        allow_home_writable: pick_opt(
            system.allow_home_writable,
            upper.map(|(s, src)| (s.allow_home_writable, src)),
        ),
        denied_read_paths: pick(
            Vec::new(),
            system.denied_read_paths.as_ref(),
            up(|s| s.denied_read_paths.as_ref()),
        ),
        loopback_ports: pick_opt(
            system.loopback_ports.clone(),
            upper.map(|(s, src)| (s.loopback_ports.clone(), src)),
        ),
        allow_root_granting_sockets: pick_opt(
            system.allow_root_granting_sockets.clone(),
            upper.map(|(s, src)| (s.allow_root_granting_sockets.clone(), src)),
        ),
        exempt_denied_read_paths: pick(
            Vec::new(),
            system.exempt_denied_read_paths.as_ref(),
            up(|s| s.exempt_denied_read_paths.as_ref()),
        ),
        exempt_protected_paths: pick(
            Vec::new(),
            system.exempt_protected_paths.as_ref(),
            up(|s| s.exempt_protected_paths.as_ref()),
        ),
        writable_roots: pick(
            Vec::new(),
            system.writable_roots.as_ref(),
            up(|s| s.writable_roots.as_ref()),
        ),
        task_temp_dirs: pick(
            Vec::new(),
            system.task_temp_dirs.as_ref(),
            up(|s| s.task_temp_dirs.as_ref()),
        ),
        results_dir: pick_opt(
            system.results_dir.clone(),
            upper.map(|(s, src)| (s.results_dir.clone(), src)),
        ),
        docker_runtime_profiles: pick_opt(
            system.docker_runtime_profiles.clone(),
            upper.map(|(s, src)| (s.docker_runtime_profiles.clone(), src)),
        ),
        environment: pick(
            environment::DEFAULT_ALLOWLIST
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            system.environment.as_ref(),
            up(|s| s.environment.as_ref()),
        ),
        budgets: BudgetSettings {
            timeout_seconds: budget("timeoutSeconds"),
            memory_mib: budget("memoryMiB"),
            max_processes: budget("maxProcesses"),
            cpu_seconds: budget("cpuSeconds"),
        },
    }
}
