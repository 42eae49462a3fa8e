//! Replays audit records through the engine component and compares the exact output bytes;
//! exports and verifies in-toto statements made from them.
//!
//! A record is REPRODUCED only when the engine it names (by component digest), given the
//! recorded input, emits byte-for-byte the recorded output and that output hashes to the
//! recorded digest. Anything else is DIVERGED (the engine now says something else, a diff shows
//! what; or the replaying engine is not the one the record names) or INVALID (the record is
//! malformed or inconsistent with itself, e.g. its digest does not match its output, or the
//! engine it names cannot be had).
//!
//! Key design decision: an in-toto statement's predicate is the audit record line itself, byte
//! for byte, so verifying a statement is replaying its record plus one check (the subject digest
//! is the SHA-256 of the recorded output bytes); there is one verification path, not two.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use palisade_engine::reader::quote;

use crate::audit::{AUDIT_SCHEMA_VERSION, RecordLine};
use crate::runtime::{
    EMBEDDED_COMPONENT_SHA256, EngineInfo, EngineInstance, EngineRuntime, LoadOptions,
};
use crate::store::{ComponentStore, is_sha256_hex};

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
    /// The component digest of the engine that replayed the record, when one ran.
    pub replayed_with: Option<String>,
    /// Why the status is not REPRODUCED: a diff or the reason the record is invalid.
    pub details: Vec<String>,
    /// Set when the record was made by a different engine component than the one replaying it.
    pub engine_note: Option<String>,
}

impl ReplayReport {
    /// A line that is not a record (or statement) at all: why, in one line.
    pub fn invalid(line: usize, detail: String) -> ReplayReport {
        ReplayReport {
            line,
            status: ReplayStatus::Invalid,
            recorded_digest: None,
            replayed_digest: None,
            replayed_with: None,
            details: vec![detail],
            engine_note: None,
        }
    }
}

/// The verdict for one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReplayStatus {
    Reproduced,
    Diverged,
    Invalid,
    /// Not a verdict on a decision: the run it launched recorded no outcome.
    Interrupted,
    /// Not a verdict on a decision: the file's hash chain breaks at this line (a line changed,
    /// removed, inserted or moved; [`crate::audit::chain`]).
    ChainBroken,
    /// Not a verdict on a decision: no seal follows this line, and trusted keys were given.
    Unsigned,
    /// Not a verdict on a decision: this line's seal is by a key the reader does not trust.
    OtherKey,
    /// Not a verdict on a decision: this line's seal does not verify (the line or the seal was
    /// changed), or a seal seals no line.
    BadSeal,
}

impl ReplayStatus {
    /// The word printed for this status.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayStatus::Reproduced => "REPRODUCED",
            ReplayStatus::Diverged => "DIVERGED",
            ReplayStatus::Invalid => "INVALID",
            ReplayStatus::Interrupted => "INTERRUPTED",
            ReplayStatus::ChainBroken => "CHAIN_BROKEN",
            ReplayStatus::Unsigned => "UNSIGNED",
            ReplayStatus::OtherKey => "OTHER_KEY",
            ReplayStatus::BadSeal => "BAD_SEAL",
        }
    }
}

/// An engine ready to replay a record: a fresh-per-call instance, its component digest and what
/// it reports about itself.
#[derive(Debug)]
pub struct ReplayEngine<'a> {
    pub instance: &'a mut EngineInstance,
    pub component_sha256: &'a str,
    pub info: &'a EngineInfo,
}

/// Chooses the engine each record is replayed with.
pub trait EngineSource {
    /// The engine to replay a record made by the component `recorded_sha256`, or why there is
    /// none (one line).
    fn engine_for(&mut self, recorded_sha256: &str) -> Result<ReplayEngine<'_>, String>;
}

/// Which engine replays the records.
#[derive(Clone, Debug)]
pub enum EngineChoice {
    /// The component embedded in this binary, for every record.
    Embedded,
    /// This component, for every record (`--component FILE`).
    Component(Vec<u8>),
    /// For each record, the component it names, from this store (`--component-store DIR`); the
    /// embedded component serves records that name it even when the store lacks it.
    Store(ComponentStore),
}

/// The engines a replay has loaded, by component digest (each compiled once).
pub struct Engines {
    choice: EngineChoice,
    cache_dir: Option<PathBuf>,
    loaded: BTreeMap<String, Result<LoadedEngine, String>>,
}

struct LoadedEngine {
    runtime: EngineRuntime,
    instance: EngineInstance,
    info: EngineInfo,
}

impl std::fmt::Debug for Engines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engines")
            .field("choice", &self.choice)
            .field("loaded", &self.loaded.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The key under which a fixed (embedded or `--component`) engine is kept.
const FIXED: &str = "";

impl Engines {
    /// Engines chosen by `choice`, compiled with the compiled-component cache in `cache_dir`.
    pub fn new(choice: EngineChoice, cache_dir: Option<PathBuf>) -> Self {
        Engines {
            choice,
            cache_dir,
            loaded: BTreeMap::new(),
        }
    }

    /// Loads the fixed engine now, so that an unusable `--component` fails the command once
    /// rather than every record. A store's engines load as records name them.
    pub fn preload(&mut self) -> Result<(), String> {
        if matches!(self.choice, EngineChoice::Store(_)) {
            return Ok(());
        }
        self.engine_for(FIXED).map(|_| ())
    }

    fn load(&self, key: &str) -> Result<LoadedEngine, String> {
        let component = match &self.choice {
            EngineChoice::Embedded => None,
            EngineChoice::Component(bytes) => Some(bytes.clone()),
            EngineChoice::Store(_) if key == EMBEDDED_COMPONENT_SHA256 => None,
            EngineChoice::Store(store) => Some(store.get(key).map_err(|e| e.to_string())?),
        };
        let runtime = EngineRuntime::load(&LoadOptions {
            component,
            cache_dir: self.cache_dir.clone(),
            ..LoadOptions::default()
        })
        .map_err(|e| format!("cannot load the engine: {e}"))?;
        let mut instance = runtime
            .instantiate()
            .map_err(|e| format!("cannot start the engine: {e}"))?;
        let info = instance
            .info()
            .map_err(|e| format!("the engine failed to report its identity: {e}"))?;
        Ok(LoadedEngine {
            runtime,
            instance,
            info,
        })
    }
}

impl EngineSource for Engines {
    fn engine_for(&mut self, recorded_sha256: &str) -> Result<ReplayEngine<'_>, String> {
        let key = match self.choice {
            EngineChoice::Store(_) => recorded_sha256,
            EngineChoice::Embedded | EngineChoice::Component(_) => FIXED,
        }
        .to_owned();
        if !self.loaded.contains_key(&key) {
            let loaded = self.load(&key);
            self.loaded.insert(key.clone(), loaded);
        }
        match self.loaded.get_mut(&key) {
            Some(Ok(LoadedEngine {
                runtime,
                instance,
                info,
            })) => Ok(ReplayEngine {
                instance,
                component_sha256: runtime.component_sha256(),
                info,
            }),
            Some(Err(reason)) => Err(reason.clone()),
            None => Err(String::from("the engine was not loaded")),
        }
    }
}

/// Replays one record line with the engine `engines` picks for it.
pub fn replay_line(
    engines: &mut dyn EngineSource,
    line: usize,
    record: &RecordLine,
) -> ReplayReport {
    let mut report = ReplayReport {
        line,
        status: ReplayStatus::Invalid,
        recorded_digest: None,
        replayed_digest: None,
        replayed_with: None,
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
    if record.schema_version != AUDIT_SCHEMA_VERSION {
        report.details.push(format!(
            "unknown audit schema {}; this palisade reads `{AUDIT_SCHEMA_VERSION}`",
            quote(&record.schema_version)
        ));
        return report;
    }
    let recomputed = palisade_engine::output::sha256_hex(record.output.as_bytes());
    if recomputed != record.output_digest {
        report.details.push(format!(
            "recorded digest {} does not match the recorded output (its sha-256 is `{recomputed}`)",
            quote(&record.output_digest)
        ));
        return report;
    }
    let recorded_engine = &record.engine.component_sha256;
    if !is_sha256_hex(recorded_engine) {
        report.details.push(format!(
            "recorded engine component {} is not a sha-256 digest",
            quote(recorded_engine)
        ));
        return report;
    }
    let engine = match engines.engine_for(recorded_engine) {
        Ok(engine) => engine,
        Err(reason) => {
            report.details.push(format!(
                "cannot replay with the engine the record names: {reason}"
            ));
            return report;
        }
    };
    report.replayed_with = Some(engine.component_sha256.to_owned());
    let same_engine = engine.component_sha256 == recorded_engine.as_str();
    if same_engine {
        // The component's own account of itself must match what the record says about it.
        let claimed = [
            (
                "engineVersion",
                &record.engine.engine_version,
                &engine.info.engine_version,
            ),
            (
                "witVersion",
                &record.engine.wit_version,
                &engine.info.wit_version,
            ),
            (
                "schemaVersion",
                &record.engine.schema_version,
                &engine.info.schema_version,
            ),
        ];
        for (field, recorded, actual) in claimed {
            if recorded != actual {
                report.details.push(format!(
                    "the record says engine {field} {}, but component `{recorded_engine}` reports {}",
                    quote(recorded),
                    quote(actual)
                ));
            }
        }
        if !report.details.is_empty() {
            return report;
        }
    } else {
        report.engine_note = Some(format!(
            "recorded with engine component `{recorded_engine}`, replayed with `{}`",
            engine.component_sha256
        ));
    }
    // Through `decide-json`, which every contract version exports, so that an archived
    // component of an earlier version replays the records it made.
    let outcome = match engine.instance.replay(&record.input) {
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
    let identical =
        outcome.canonical_json == record.output && outcome.digest == record.output_digest;
    if identical && same_engine {
        report.status = ReplayStatus::Reproduced;
    } else if identical {
        // Same bytes from another engine prove nothing about the engine the record names.
        report.status = ReplayStatus::Diverged;
        report.details.push(format!(
            "the output is byte-identical, but from engine `{}`, not the engine the record names; \
             replay with `--component-store DIR` or `--component FILE` holding `{recorded_engine}`",
            engine.component_sha256
        ));
    } else {
        report.status = ReplayStatus::Diverged;
        report.details = json_diff_text(&record.output, &outcome.canonical_json);
    }
    report
}

// ---------------------------------------------------------------------------------------------
// in-toto statements: the format is `palisade_formats::statement`.

pub use palisade_formats::statement::{
    IN_TOTO_STATEMENT_TYPE, PREDICATE_TYPE, SUBJECT_NAME, statement_for,
};

/// Verifies one statement line: it is a statement of [`PREDICATE_TYPE`] with exactly one
/// subject whose only digest is the SHA-256 of the recorded output bytes, and its predicate (an
/// audit record) replays as [`replay_line`] requires. Never re-serializes anything: the subject
/// digest is compared with the hash of the output string's bytes as recorded.
pub fn verify_statement(engines: &mut dyn EngineSource, line: usize, text: &str) -> ReplayReport {
    let invalid = |detail: String, recorded_digest: Option<String>| ReplayReport {
        line,
        status: ReplayStatus::Invalid,
        recorded_digest,
        replayed_digest: None,
        replayed_with: None,
        details: vec![detail],
        engine_note: None,
    };
    let statement = match palisade_formats::statement::parse(text) {
        Ok(statement) => statement,
        Err(detail) => return invalid(detail, None),
    };
    let subject_digest = statement.subject_sha256;
    let record = crate::audit::parse_record(statement.predicate.get());
    if let Ok(record) = &record {
        let output_sha256 = palisade_engine::output::sha256_hex(record.output.as_bytes());
        if subject_digest != output_sha256 {
            return invalid(
                format!(
                    "subject digest {} is not the sha-256 of the recorded output (`{output_sha256}`)",
                    quote(&subject_digest)
                ),
                Some(subject_digest),
            );
        }
    }
    replay_line(engines, line, &record)
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
