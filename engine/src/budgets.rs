//! `spec.budgets`: the resource envelope a Taskpack grants its command.
//!
//! Why the engine reads this section (while other `spec` sections are only listed as ignored):
//! budgets are enforced by the launcher, and the audit record must show the limits the policy
//! asked for. The CLI may only tighten them. Every field is optional; unknown keys are invalid
//! for the same reason as in `spec.sandbox`: a misspelt limit must not silently vanish.

use crate::output::Budgets;
use crate::policy::{each_entry, unknown_field};
use crate::text::{self, Errors};
use crate::yaml::Node;

/// The section's name in `spec`.
pub(crate) const SECTION: &str = "budgets";

/// Each field with its inclusive upper bound (the lower bound is 1).
const FIELDS: [(&str, u64); 4] = [
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

/// A whole number in `1..=max`, written as a plain YAML integer.
fn bounded_integer(node: &Node, max: u64) -> Result<u64, String> {
    let Node::Number(text) = node else {
        return Err(format!("expected a whole number, found {}", node.kind()));
    };
    let number: u64 = text.parse().map_err(|_| {
        format!(
            "expected a whole number from 1 to {max}, found {}",
            text::quote(text)
        )
    })?;
    if number == 0 || number > max {
        return Err(format!("{number} is out of bounds; expected 1 to {max}"));
    }
    Ok(number)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

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
