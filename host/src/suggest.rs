//! `palisade explain --suggest`: the smallest change that would have allowed what a run was
//! denied — the flags to add or drop when flags formed the policy, the Taskpack's fields (whole,
//! as they would read) when it declared one, the host configuration's part — and, apart, what no
//! policy allows. Read from the run's decision and its denials alone, so it is what that
//! decision would have needed, not a guess about the host.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::denials::{Denial, DenialKind, MASKED_HOST_SOCKETS, NO_CAPABILITIES, at};

/// The change, grouped by where it is made.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Suggestion {
    /// Flags to add to the same `palisade run` (each `--flag value`).
    pub add_flags: BTreeSet<(String, String)>,
    /// Flags to drop from it.
    pub drop_flags: BTreeSet<(String, String)>,
    /// Entries to add to a list of the Taskpack's `spec.sandbox` (field → entries).
    pub add_fields: std::collections::BTreeMap<&'static str, BTreeSet<String>>,
    /// Entries to remove from a list of `spec.sandbox`.
    pub remove_fields: std::collections::BTreeMap<&'static str, BTreeSet<String>>,
    /// What only the host configuration (or a TaskContract, a runtime profile) can change.
    pub elsewhere: BTreeSet<String>,
    /// What no policy allows, with why.
    pub never: BTreeSet<String>,
}

impl Suggestion {
    /// The change for `denials` under `decision`.
    pub fn for_denials<'a>(
        denials: impl IntoIterator<Item = &'a Denial>,
        decision: &Value,
    ) -> Suggestion {
        let mut out = Suggestion::default();
        let declared = at(decision, "/policy/source") == "declared";
        for denial in denials {
            out.add(denial, decision, declared);
        }
        out
    }

    fn flag(&mut self, flag: &str, value: impl Into<String>) {
        self.add_flags.insert((flag.to_owned(), value.into()));
    }

    fn field(&mut self, field: &'static str, value: impl Into<String>) {
        self.add_fields
            .entry(field)
            .or_default()
            .insert(value.into());
    }

    fn add(&mut self, denial: &Denial, decision: &Value, declared: bool) {
        let port_of = |target: &str| target.rsplit_once(':').map(|(_, p)| p.to_owned());
        match (denial.kind, denial.rule.as_str()) {
            (DenialKind::Network, "plan.network.allowlist")
                if denial.reason.starts_with("address-not-allowed") =>
            {
                self.never.insert(format!(
                    "{}: resolves to a private or special-purpose address, which a name never reaches (name the address itself in `allowedDomains` if it is meant)",
                    denial.target
                ));
            }
            (DenialKind::Network, "plan.network.allowlist") => {
                let host = denial
                    .target
                    .rsplit_once(':')
                    .map_or(denial.target.as_str(), |(host, _)| host);
                match at(decision, "/policy/allowedDomainsOrigin").as_str() {
                    Some("flag") => self.flag("--allow-domain", host),
                    Some("launcher") => {
                        self.field("allowedDomains", host);
                        self.flag("--allow-domain", host);
                    }
                    _ => self.field("allowedDomains", host),
                }
            }
            (DenialKind::Network, "plan.network.hostPorts")
                if denial.observed_by == crate::denials::Observer::Seccomp =>
            {
                if let Some(port) = port_of(&denial.target) {
                    if declared {
                        self.field("loopbackPorts", port);
                    } else {
                        self.flag("--allow-host-port", port);
                    }
                }
            }
            (DenialKind::Network, MASKED_HOST_SOCKETS) if !denial.target.starts_with('@') => {
                if declared {
                    self.field("allowedUnixSockets", denial.target.clone());
                } else {
                    self.flag("--allow-unix-socket", denial.target.clone());
                }
            }
            (DenialKind::Network, "plan.network.mode")
                if matches!(denial.operation.as_str(), "connect" | "sendto")
                    && !at(decision, "/plan/network/allowlist").is_array() =>
            {
                if declared {
                    self.elsewhere.insert(String::from(
                        "spec.sandbox.networkMode: allow-outbound (a flag may only tighten a declared network)",
                    ));
                } else {
                    self.flag("--network", "allow-outbound");
                }
            }
            (DenialKind::File, rule) => self.file(rule, decision),
            (DenialKind::Budget, _) => {
                self.elsewhere
                    .insert(crate::denials::suggestion(denial, decision));
            }
            (DenialKind::Network, NO_CAPABILITIES | MASKED_HOST_SOCKETS)
            | (DenialKind::Syscall, _)
            | (DenialKind::Network, "plan.syscallFilter") => {
                let what = if denial.target.is_empty() {
                    denial.operation.clone()
                } else {
                    format!("{} {}", denial.operation, denial.target)
                };
                self.never.insert(format!(
                    "{what}: {}",
                    crate::denials::suggestion(denial, decision)
                ));
            }
            _ => {
                self.elsewhere
                    .insert(crate::denials::suggestion(denial, decision));
            }
        }
    }

    fn file(&mut self, rule: &str, decision: &Value) {
        let path = rule
            .strip_prefix("plan.deniedReadPaths[")
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| at(decision, &format!("/plan/deniedReadPaths/{i}")).as_str());
        let Some(path) = path else {
            return;
        };
        let origin = at(decision, "/policy/deniedReadPaths")
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| at(d, "/path") == path)
            .and_then(|d| at(d, "/origin").as_str())
            .unwrap_or("");
        match origin {
            "declared" => {
                self.remove_fields
                    .entry("deniedReadPaths")
                    .or_default()
                    .insert(path.to_owned());
            }
            "flag" => {
                self.drop_flags
                    .insert(("--deny-read".to_owned(), path.to_owned()));
            }
            "built-in" if path.ends_with("/palisade/keys") => {
                self.never.insert(format!(
                    "{path}: Palisade's audit-signing key, which no sandbox may read"
                ));
            }
            "built-in" => {
                self.elsewhere.insert(format!(
                    "the host configuration's `exemptDeniedReadPaths` lists the credential store `{path}` (its `~/` name)"
                ));
            }
            _ => {
                self.elsewhere.insert(format!(
                    "the host configuration's `deniedReadPaths` lists `{path}`"
                ));
            }
        }
    }

    /// Whether there is nothing to change.
    pub fn is_empty(&self) -> bool {
        *self == Suggestion::default()
    }

    /// The text `explain --suggest` prints: one `add flags:`/`drop flags:` line each (ready to
    /// paste), the Taskpack's `spec.sandbox` fields as they would read, then the rest.
    pub fn render(&self, decision: &Value) -> String {
        let mut out = String::new();
        let flags = |set: &BTreeSet<(String, String)>| {
            set.iter()
                .map(|(flag, value)| format!("{flag} {}", shell_word(value)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        if !self.add_flags.is_empty() {
            out.push_str(&format!("add flags: {}\n", flags(&self.add_flags)));
        }
        if !self.drop_flags.is_empty() {
            out.push_str(&format!("drop flags: {}\n", flags(&self.drop_flags)));
        }
        let fields: BTreeSet<&&str> = self
            .add_fields
            .keys()
            .chain(self.remove_fields.keys())
            .collect();
        if !fields.is_empty() {
            out.push_str("taskpack: set in spec.sandbox (each list whole, as it would read):\n");
            for field in fields {
                let mut list = current(field, decision);
                list.extend(self.add_fields.get(*field).into_iter().flatten().cloned());
                if let Some(removed) = self.remove_fields.get(*field) {
                    list.retain(|entry| !removed.contains(entry));
                }
                let entries: Vec<String> = list.iter().map(|e| yaml_word(e)).collect();
                out.push_str(&format!("  {field}: [{}]\n", entries.join(", ")));
            }
        }
        for line in &self.elsewhere {
            out.push_str(&format!("elsewhere: {line}\n"));
        }
        for line in &self.never {
            out.push_str(&format!("no policy allows: {line}\n"));
        }
        if self.is_empty() {
            out.push_str("nothing to change: the run was denied nothing the sandbox observes\n");
        }
        out
    }
}

/// A `spec.sandbox` list as the decision had it (the Taskpack's own entries where the decision
/// tells them apart).
fn current(field: &str, decision: &Value) -> BTreeSet<String> {
    let strings = |pointer: &str| -> BTreeSet<String> {
        at(decision, pointer)
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect()
    };
    match field {
        "allowedDomains" => strings("/policy/allowedDomains"),
        "loopbackPorts" => strings("/policy/loopbackPorts"),
        "allowedUnixSockets" => strings("/policy/allowedUnixSockets"),
        "deniedReadPaths" => at(decision, "/policy/deniedReadPaths")
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| at(d, "/origin") == "declared")
            .filter_map(|d| at(d, "/path").as_str().map(str::to_owned))
            .collect(),
        _ => BTreeSet::new(),
    }
}

/// `value` as one shell word: as it is when it is plain, else single-quoted.
fn shell_word(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c))
    {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

/// `value` as a YAML flow scalar: plain when it is a plain word or number, else quoted.
fn yaml_word(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && !value.starts_with(['-', '.'])
    {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', "''"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::denials::Observer;

    fn denial(kind: DenialKind, target: &str, rule: &str, by: Observer) -> Denial {
        Denial {
            kind,
            operation: "connect".into(),
            target: target.into(),
            rule: rule.into(),
            reason: "domain-not-allowed".into(),
            observed_by: by,
            limit: None,
            measured: None,
            unit: None,
            count: 1,
        }
    }

    #[test]
    fn flags_for_a_flag_policy_and_fields_for_a_taskpack() {
        let denials = [
            denial(
                DenialKind::Network,
                "127.0.0.1:18555",
                "plan.network.hostPorts",
                Observer::Seccomp,
            ),
            denial(
                DenialKind::Network,
                "/run/a.sock",
                MASKED_HOST_SOCKETS,
                Observer::Seccomp,
            ),
            denial(
                DenialKind::Network,
                "pypi.org:443",
                "plan.network.allowlist",
                Observer::Proxy,
            ),
            denial(
                DenialKind::Syscall,
                "",
                "plan.syscallFilter",
                Observer::Seccomp,
            ),
        ];
        let flags = serde_json::json!({"policy": {"source": "omitted-default", "allowedDomainsOrigin": "flag"}});
        let text = Suggestion::for_denials(&denials, &flags).render(&flags);
        assert!(text.contains("add flags: --allow-domain pypi.org --allow-host-port 18555 --allow-unix-socket /run/a.sock\n"), "{text}");
        assert!(text.contains("no policy allows:"), "{text}");
        let declared = serde_json::json!({"policy": {"source": "declared", "allowedDomainsOrigin": "declared",
            "allowedDomains": ["crates.io"], "loopbackPorts": [5432], "allowedUnixSockets": []}});
        let text = Suggestion::for_denials(&denials, &declared).render(&declared);
        assert!(
            text.contains("  allowedDomains: [crates.io, pypi.org]\n"),
            "{text}"
        );
        assert!(text.contains("  loopbackPorts: [18555, 5432]\n"), "{text}");
        assert!(
            text.contains("  allowedUnixSockets: [/run/a.sock]\n"),
            "{text}"
        );
        assert!(!text.contains("add flags"), "{text}");
    }
}
