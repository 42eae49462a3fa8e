//! Replays audit records through the engine component and compares the exact output bytes.
//!
//! A record is REPRODUCED only when the engine, given the recorded input, emits byte-for-byte
//! the recorded output and that output hashes to the recorded digest. Anything else is DIVERGED
//! (the engine now says something else; a diff shows what) or INVALID (the record is malformed or
//! inconsistent with itself, e.g. its digest does not match its output).

use serde::Serialize;
use serde_json::Value;

use crate::audit::{AUDIT_SCHEMA_VERSION, RecordLine};
use crate::runtime::EngineInstance;

/// The result of replaying one record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// 1-based line number in the audit file.
    pub line: usize,
    pub status: ReplayStatus,
    /// The digest the record claims, when it has one.
    pub recorded_digest: Option<String>,
    /// The digest the engine produced now, when it ran.
    pub replayed_digest: Option<String>,
    /// Why the status is not REPRODUCED: a diff or the reason the record is invalid.
    pub details: Vec<String>,
    /// Set when the record was made by a different engine component than the one replaying it.
    pub engine_note: Option<String>,
}

/// The verdict for one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReplayStatus {
    Reproduced,
    Diverged,
    Invalid,
}

impl ReplayStatus {
    /// The word printed for this status.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayStatus::Reproduced => "REPRODUCED",
            ReplayStatus::Diverged => "DIVERGED",
            ReplayStatus::Invalid => "INVALID",
        }
    }
}

/// Replays one record line with an instance of the component whose digest is `component_sha256`.
pub fn replay_line(
    instance: &mut EngineInstance,
    component_sha256: &str,
    line: usize,
    record: &RecordLine,
) -> ReplayReport {
    let mut report = ReplayReport {
        line,
        status: ReplayStatus::Invalid,
        recorded_digest: None,
        replayed_digest: None,
        details: Vec::new(),
        engine_note: None,
    };
    let record = match record {
        Ok(record) => record,
        Err(reason) => {
            report
                .details
                .push(format!("not an audit record: {reason}"));
            return report;
        }
    };
    report.recorded_digest = Some(record.output_digest.clone());
    if record.engine.component_sha256 != component_sha256 {
        report.engine_note = Some(format!(
            "recorded with engine component `{}`, replayed with `{}`",
            record.engine.component_sha256, component_sha256
        ));
    }
    if record.schema_version != AUDIT_SCHEMA_VERSION {
        report.details.push(format!(
            "unknown audit schema `{}`; this palisade reads `{AUDIT_SCHEMA_VERSION}`",
            record.schema_version
        ));
        return report;
    }
    let recomputed = palisade_engine::output::sha256_hex(record.output.as_bytes());
    if recomputed != record.output_digest {
        report.details.push(format!(
            "recorded digest `{}` does not match the recorded output (its sha-256 is `{recomputed}`)",
            record.output_digest
        ));
        return report;
    }
    let outcome = match instance.decide(&record.input) {
        Ok(outcome) => outcome,
        Err(error) => {
            report.status = ReplayStatus::Diverged;
            report
                .details
                .push(format!("the engine failed to replay: {error}"));
            return report;
        }
    };
    report.replayed_digest = Some(outcome.digest.clone());
    if outcome.canonical_json == record.output && outcome.digest == record.output_digest {
        report.status = ReplayStatus::Reproduced;
    } else {
        report.status = ReplayStatus::Diverged;
        report.details = json_diff_text(&record.output, &outcome.canonical_json);
    }
    report
}

/// A readable diff between two JSON texts: one line per differing JSON pointer.
pub fn json_diff_text(recorded: &str, replayed: &str) -> Vec<String> {
    match (
        serde_json::from_str::<Value>(recorded),
        serde_json::from_str::<Value>(replayed),
    ) {
        (Ok(a), Ok(b)) => {
            let mut lines = Vec::new();
            json_diff(&a, &b, "", &mut lines);
            if lines.is_empty() {
                // Same values, different bytes: the recorded output is not canonical.
                lines.push(
                    "same json values but different bytes (recorded output is not canonical)"
                        .into(),
                );
            }
            lines
        }
        (Err(error), _) => vec![format!("recorded output is not json: {error}")],
        (_, Err(error)) => vec![format!("replayed output is not json: {error}")],
    }
}

const MAX_DIFF_LINES: usize = 40;

fn json_diff(recorded: &Value, replayed: &Value, pointer: &str, out: &mut Vec<String>) {
    if out.len() >= MAX_DIFF_LINES {
        return;
    }
    match (recorded, replayed) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let child = format!("{pointer}/{}", escape_pointer(key));
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => json_diff(x, y, &child, out),
                    (Some(x), None) => out.push(format!("- {child}: {x}")),
                    (None, Some(y)) => out.push(format!("+ {child}: {y}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for index in 0..a.len().max(b.len()) {
                let child = format!("{pointer}/{index}");
                match (a.get(index), b.get(index)) {
                    (Some(x), Some(y)) => json_diff(x, y, &child, out),
                    (Some(x), None) => out.push(format!("- {child}: {x}")),
                    (None, Some(y)) => out.push(format!("+ {child}: {y}")),
                    (None, None) => {}
                }
            }
        }
        (a, b) if a == b => {}
        (a, b) => {
            let at = if pointer.is_empty() { "/" } else { pointer };
            out.push(format!("~ {at}: recorded {a}, replayed {b}"));
        }
    }
    if out.len() == MAX_DIFF_LINES {
        out.push("… (diff truncated)".into());
    }
}

fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_every_changed_pointer() {
        let diff = json_diff_text(
            r#"{"a":1,"b":[1,2],"c":{"d":"x"}}"#,
            r#"{"a":2,"b":[1],"c":{"d":"x","e":true}}"#,
        );
        assert_eq!(
            diff,
            vec![
                "~ /a: recorded 1, replayed 2".to_owned(),
                "- /b/1: 2".to_owned(),
                "+ /c/e: true".to_owned(),
            ]
        );
    }

    #[test]
    fn same_values_different_bytes_is_reported() {
        let diff = json_diff_text(r#"{"a":1, "b":2}"#, r#"{"a":1,"b":2}"#);
        assert_eq!(diff.len(), 1);
    }
}
