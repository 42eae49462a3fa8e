//! `spec.budgets`: the resource envelope a Taskpack grants its command.
//!
//! Why the engine reads this section (while other `spec` sections are only listed as ignored):
//! budgets are enforced by the launcher, and the audit record must show the limits the policy
//! asked for. The CLI may only tighten them. Every field is optional; unknown keys are invalid
//! for the same reason as in `spec.sandbox`: a misspelt limit must not silently vanish.

use crate::model::BudgetLimits;
use crate::output::{
    BudgetClamp, BudgetKind, BudgetLimit, BudgetOrigin, Budgets, EffectiveBudgets,
};
use crate::reader::{bounded_integer, each_entry, unknown_field};
use crate::text::{self, Errors};
use crate::yaml::Node;

/// The section's name in `spec`.
pub(crate) const SECTION: &str = "budgets";

/// Each field with its inclusive upper bound (the lower bound is 1). The host's budget ceilings
/// use the same names and bounds.
pub const FIELDS: [(&str, u64); 4] = [
    ("timeoutSeconds", 7 * 24 * 3600),
    ("memoryMiB", 1024 * 1024),
    ("maxProcesses", 65_536),
    ("cpuSeconds", 7 * 24 * 3600),
];

/// Walks `spec.budgets`: the budgets, and the keys that are not Palisade's (as
/// `budgets.<key>`). Invalid fields are reported and left unset.
pub(crate) fn walk(node: &Node, path: &str, errors: &mut Errors) -> (Budgets, Vec<String>) {
    let mut budgets = Budgets::default();
    let mut ignored = Vec::new();
    if !matches!(node, Node::Mapping(_)) {
        errors.push(path, format!("expected a mapping, found {}", node.kind()));
        return (budgets, ignored);
    }
    let names: Vec<&str> = FIELDS.iter().map(|(name, _)| *name).collect();
    each_entry(node, path, errors, |key, child, value, errors| {
        let Some((_, max)) = FIELDS.iter().find(|(name, _)| *name == key) else {
            if names.iter().any(|name| text::within_edits(key, name, 2)) {
                errors.push(child, unknown_field(key, &names));
            } else {
                ignored.push(format!("{SECTION}.{key}"));
            }
            return;
        };
        let parsed = bounded_integer(value, *max);
        match parsed {
            Ok(number) => {
                let slot = match key {
                    "timeoutSeconds" => &mut budgets.timeout_seconds,
                    "memoryMiB" => &mut budgets.memory_mib,
                    "maxProcesses" => &mut budgets.max_processes,
                    _ => &mut budgets.cpu_seconds,
                };
                *slot = Some(number);
            }
            Err(message) => errors.push(child, message),
        }
    });
    (budgets, ignored)
}

/// The largest value of each budget in the contract's units (the policy's bounds converted):
/// 7 days, 1 TiB, 65 536 processes, 7 days of CPU.
/// Each limit's field and bounds. Memory starts at 1 MiB, as `spec.budgets.memoryMiB` does: no
/// process starts in less, and a run that is killed at once explains nothing.
const LIMIT_BOUNDS: [(BudgetKind, &str, u64, u64); 4] = [
    (
        BudgetKind::Timeout,
        "timeoutMillis",
        1,
        7 * 24 * 3600 * 1000,
    ),
    (
        BudgetKind::Memory,
        "memoryBytes",
        1024 * 1024,
        1024 * 1024 * 1024 * 1024,
    ),
    (BudgetKind::MaxProcesses, "maxProcesses", 1, 65_536),
    (BudgetKind::Cpu, "cpuSeconds", 1, 7 * 24 * 3600),
];

/// One budget of a [`BudgetLimits`].
fn limit_of(limits: &BudgetLimits, kind: BudgetKind) -> Option<u64> {
    match kind {
        BudgetKind::Timeout => limits.timeout_millis,
        BudgetKind::Memory => limits.memory_bytes,
        BudgetKind::MaxProcesses => limits.max_processes,
        BudgetKind::Cpu => limits.cpu_seconds,
    }
}

/// One budget of the policy's `spec.budgets`, in the contract's units.
fn policy_limit(budgets: &Budgets, kind: BudgetKind) -> Option<u64> {
    match kind {
        BudgetKind::Timeout => budgets.timeout_seconds.map(|s| s.saturating_mul(1000)),
        BudgetKind::Memory => budgets.memory_mib.map(|m| m.saturating_mul(1024 * 1024)),
        BudgetKind::MaxProcesses => budgets.max_processes,
        BudgetKind::Cpu => budgets.cpu_seconds,
    }
}

/// Checks a launcher's flags or a host's ceilings: every given value within its bounds, each
/// problem reported at `<path>.<field>`.
pub(crate) fn validate_limits(limits: &BudgetLimits, path: &str, errors: &mut Errors) {
    for (kind, field, min, max) in LIMIT_BOUNDS {
        if let Some(value) = limit_of(limits, kind)
            && (value < min || value > max)
        {
            errors.push(
                text::child_path(path, field),
                format!("{value} is out of bounds; expected {min} to {max}"),
            );
        }
    }
}

/// Everything a budget may come from.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BudgetSources<'a> {
    /// The taskpack's `spec.budgets`.
    pub(crate) policy: Option<&'a Budgets>,
    /// The launcher's flags.
    pub(crate) flags: Option<&'a BudgetLimits>,
    /// The task contract's `spec.budgets` (envelope).
    pub(crate) contract: Option<&'a Budgets>,
    /// The runtime profile's budgets (envelope).
    pub(crate) profile: Option<&'a BudgetLimits>,
    /// The host configuration's ceilings.
    pub(crate) ceilings: Option<&'a BudgetLimits>,
}

/// The budgets the launcher enforces: for each budget the tightest of the policy's, the
/// launcher's flag, the envelope (task contract, runtime profile) and the host's ceiling, with
/// who set it and every request not granted listed as clamped: a flag above the enforced value,
/// or the policy above a cap (a flag tighter than the policy is the flag tightening it). `helper_processes` is what Palisade itself runs inside the tree (the egress bridge),
/// `launcher_processes` what the launcher keeps at its top (bwrap, init, docker-init).
///
/// Decided: a request above a ceiling (or a flag looser than the policy) is clamped, not
/// refused. Budgets only ever get tighter, the request and the clamp both stay in the decision,
/// and a refusal would make every taskpack depend on every host's ceilings.
pub(crate) fn effective(
    sources: &BudgetSources<'_>,
    helper_processes: u32,
    launcher_processes: u32,
) -> EffectiveBudgets {
    let mut out = EffectiveBudgets {
        helper_processes,
        launcher_processes,
        ..EffectiveBudgets::default()
    };
    let limit = |limits: Option<&BudgetLimits>, kind| limits.and_then(|l| limit_of(l, kind));
    for (kind, _, _, _) in LIMIT_BOUNDS {
        // In tie-breaking order: the first source with the tightest value sets it.
        let sources = [
            (
                BudgetOrigin::Policy,
                sources.policy.and_then(|p| policy_limit(p, kind)),
            ),
            (BudgetOrigin::Flag, limit(sources.flags, kind)),
            (
                BudgetOrigin::TaskContract,
                sources.contract.and_then(|c| policy_limit(c, kind)),
            ),
            (BudgetOrigin::RuntimeProfile, limit(sources.profile, kind)),
            (BudgetOrigin::HostCeiling, limit(sources.ceilings, kind)),
        ];
        let tightest = sources
            .iter()
            .filter_map(|&(origin, value)| value.map(|value| BudgetLimit { value, origin }))
            .reduce(|best, next| if next.value < best.value { next } else { best });
        if let Some(limit) = tightest {
            for (origin, value) in sources {
                // A request not granted: a flag above what is enforced, or the policy above a
                // host ceiling. A policy value above a flag is the flag tightening it, as flags
                // may; a ceiling is a cap, never a request.
                let clamped = match origin {
                    BudgetOrigin::Flag => true,
                    BudgetOrigin::Policy => limit.origin.is_cap(),
                    BudgetOrigin::TaskContract
                    | BudgetOrigin::RuntimeProfile
                    | BudgetOrigin::HostCeiling => false,
                };
                if let Some(requested) = value
                    && clamped
                    && requested > limit.value
                {
                    out.clamped.push(BudgetClamp {
                        budget: kind,
                        requested,
                        requested_by: origin,
                        limit: limit.value,
                        limited_by: limit.origin,
                    });
                }
            }
        }
        let slot = match kind {
            BudgetKind::Timeout => &mut out.timeout_millis,
            BudgetKind::Memory => &mut out.memory_bytes,
            BudgetKind::MaxProcesses => &mut out.max_processes,
            BudgetKind::Cpu => &mut out.cpu_seconds,
        };
        *slot = tightest;
    }
    out
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

/// Who asked: `--timeout`, `the policy's timeoutSeconds`.
pub(crate) fn requester(origin: BudgetOrigin, budget: BudgetKind) -> String {
    let (flag, field) = match budget {
        BudgetKind::Timeout => ("--timeout", "timeoutSeconds"),
        BudgetKind::Memory => ("--memory", "memoryMiB"),
        BudgetKind::MaxProcesses => ("--max-procs", "maxProcesses"),
        BudgetKind::Cpu => ("--cpu-seconds", "cpuSeconds"),
    };
    match origin {
        BudgetOrigin::Flag => flag.to_owned(),
        BudgetOrigin::Policy => format!("the policy's budgets.{field}"),
        BudgetOrigin::TaskContract => format!("the task contract's budgets.{field}"),
        BudgetOrigin::RuntimeProfile => format!("the runtime profile's budgets.{field}"),
        BudgetOrigin::HostCeiling => format!("the host ceiling for {field}"),
    }
}

/// Who set a limit, as a clamp warning says it.
pub(crate) fn origin_phrase(origin: BudgetOrigin) -> &'static str {
    match origin {
        BudgetOrigin::Policy => "the policy's budget",
        BudgetOrigin::Flag => "the command line",
        BudgetOrigin::TaskContract => "the task contract's envelope",
        BudgetOrigin::RuntimeProfile => "the runtime profile's envelope",
        BudgetOrigin::HostCeiling => "the host configuration's ceiling",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
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

    fn walk_text(text: &str) -> (Budgets, Vec<String>) {
        let node = crate::yaml::parse(text).unwrap();
        let mut errors = Errors::default();
        let (budgets, _) = walk(&node, "spec.budgets", &mut errors);
        let paths = errors.into_listed().into_iter().map(|e| e.path).collect();
        (budgets, paths)
    }

    #[test]
    fn reads_every_field() {
        let (budgets, errors) =
            walk_text("timeoutSeconds: 60\nmemoryMiB: 512\nmaxProcesses: 64\ncpuSeconds: 30\n");
        assert!(errors.is_empty());
        assert_eq!(
            budgets,
            Budgets {
                timeout_seconds: Some(60),
                memory_mib: Some(512),
                max_processes: Some(64),
                cpu_seconds: Some(30),
            }
        );
    }

    #[test]
    fn other_keys_are_listed_as_ignored() {
        let node = crate::yaml::parse("tokens: 20000\ntimeoutSeconds: 5\n").unwrap();
        let mut errors = Errors::default();
        let (budgets, ignored) = walk(&node, "spec.budgets", &mut errors);
        assert!(errors.is_empty());
        assert_eq!(budgets.timeout_seconds, Some(5));
        assert_eq!(ignored, ["budgets.tokens"]);
    }

    fn limits(timeout_millis: Option<u64>, max_processes: Option<u64>) -> BudgetLimits {
        BudgetLimits {
            timeout_millis,
            max_processes,
            ..BudgetLimits::default()
        }
    }

    #[test]
    fn the_tightest_source_wins_and_looser_requests_are_clamped() {
        let policy = Budgets {
            timeout_seconds: Some(600),
            memory_mib: Some(512),
            max_processes: None,
            cpu_seconds: Some(30),
        };
        // A flag looser than the policy, a ceiling tighter than both.
        let flags = limits(Some(3_600_000), Some(64));
        let ceilings = limits(Some(300_000), Some(64));
        let sources = BudgetSources {
            policy: Some(&policy),
            flags: Some(&flags),
            ceilings: Some(&ceilings),
            ..BudgetSources::default()
        };
        let out = effective(&sources, 1, 2);
        let timeout = BudgetLimit {
            value: 300_000,
            origin: BudgetOrigin::HostCeiling,
        };
        assert_eq!(out.timeout_millis, Some(timeout));
        assert_eq!(
            out.memory_bytes,
            Some(BudgetLimit {
                value: 512 << 20,
                origin: BudgetOrigin::Policy
            })
        );
        // A tie goes to the first source: the flag, not the ceiling.
        assert_eq!(
            out.max_processes,
            Some(BudgetLimit {
                value: 64,
                origin: BudgetOrigin::Flag
            })
        );
        assert_eq!(out.helper_processes, 1);
        assert_eq!(
            out.clamped,
            [
                BudgetClamp {
                    budget: BudgetKind::Timeout,
                    requested: 600_000,
                    requested_by: BudgetOrigin::Policy,
                    limit: 300_000,
                    limited_by: BudgetOrigin::HostCeiling,
                },
                BudgetClamp {
                    budget: BudgetKind::Timeout,
                    requested: 3_600_000,
                    requested_by: BudgetOrigin::Flag,
                    limit: 300_000,
                    limited_by: BudgetOrigin::HostCeiling,
                },
            ]
        );
    }

    #[test]
    fn nothing_asked_nothing_enforced() {
        let sources = BudgetSources::default();
        assert_eq!(effective(&sources, 0, 0), EffectiveBudgets::default());
        // A ceiling alone applies without a clamp: nobody asked for more.
        let ceiling = limits(Some(5), None);
        let out = effective(
            &BudgetSources {
                ceilings: Some(&ceiling),
                ..sources
            },
            0,
            0,
        );
        assert_eq!(
            out.timeout_millis.map(|l| l.origin),
            Some(BudgetOrigin::HostCeiling)
        );
        assert!(out.clamped.is_empty());
    }

    #[test]
    fn limits_are_bounded() {
        let mut errors = Errors::default();
        let bad = BudgetLimits {
            timeout_millis: Some(0),
            memory_bytes: Some(u64::MAX),
            max_processes: Some(65_536),
            cpu_seconds: Some(7 * 24 * 3600 + 1),
        };
        validate_limits(&bad, "budgetFlags", &mut errors);
        let paths: Vec<String> = errors.into_listed().into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "budgetFlags.timeoutMillis",
                "budgetFlags.memoryBytes",
                "budgetFlags.cpuSeconds"
            ]
        );
    }

    #[test]
    fn reports_every_bad_field() {
        let (_, errors) = walk_text(
            "timeoutSeconds: 0\nmemoryMiB: -1\nmaxProcesses: 1.5\ncpuSeconds: '3'\nmemoryMib: 4\n",
        );
        assert_eq!(
            errors,
            [
                "spec.budgets.timeoutSeconds",
                "spec.budgets.memoryMiB",
                "spec.budgets.maxProcesses",
                "spec.budgets.cpuSeconds",
                "spec.budgets.memoryMib",
            ]
        );
        let (_, errors) = walk_text("timeoutSeconds: 99999999999999999999999\n");
        assert_eq!(errors, ["spec.budgets.timeoutSeconds"]);
        let (_, errors) = walk_text("[1]\n");
        assert_eq!(errors, ["spec.budgets"]);
    }
}
