//! Audit records as data: the decision record and the run-outcome line of a `decisions.jsonl`
//! file, and how one line of such a file is read — bounded in length, a malformed line reported
//! in place rather than failing the file. Writing records (appending, syncing) is the CLI's
//! (`palisade::audit`).
//!
//! A record holds the engine's identity, the inputs verbatim and the output bytes with their
//! digest. Replay re-runs the inputs and compares the exact output bytes recorded; it never
//! re-serializes the output. The `context` block (time, host name, palisade version) is outside
//! what replay compares, because it varies by construction.

use std::io::BufRead;

use palisade_engine::reader::one_line;
use serde::{Deserialize, Serialize};

use crate::chain::ChainLink;

/// The version of the audit record format.
pub const AUDIT_SCHEMA_VERSION: &str = "palisade.audit/v1";

/// One audit record (one JSON line).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditRecord {
    pub schema_version: String,
    pub engine: EngineIdentity,
    /// The decision input exactly as passed to the engine. Kept as JSON, not as this
    /// palisade's `DecisionInput`, so a record made under an earlier contract (whose input had
    /// other fields) still reads and replays with the engine that made it.
    pub input: serde_json::Value,
    /// The engine's canonical output, byte for byte.
    pub output: String,
    /// Lower-case hex SHA-256 of `output`, as the engine computed it.
    pub output_digest: String,
    /// Facts about the recording that replay does not compare.
    pub context: RecordContext,
    /// Where this line stands in its file's hash chain ([`crate::chain`]); absent in records
    /// written before chaining.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainLink>,
}

/// The version of the run-outcome line format.
pub const OUTCOME_SCHEMA_VERSION: &str = "palisade.run-outcome/v1";

/// What happened to a launched command: appended after its decision record by `palisade run`.
///
/// The decision record is written (and synced) before anything is launched; this line follows
/// when the run is over, bound to the decision by its digest and to the run by its id.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OutcomeRecord {
    pub schema_version: String,
    pub run_id: String,
    /// The `outputDigest` of the decision record this run was launched under.
    pub decision_digest: String,
    /// UTC, RFC 3339, when the run ended.
    pub time: String,
    /// The supervisor's account: exit status or signal, why it ended, duration, reaping.
    pub outcome: serde_json::Value,
    /// Where this line stands in its file's hash chain ([`crate::chain`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainLink>,
}

/// A line that takes its place in a file's hash chain when it is appended.
pub trait Chained {
    fn set_chain(&mut self, link: ChainLink);
}

/// A line a seal can sign ([`crate::seal`]): the in-toto statement for its own text, made from
/// what it already holds (the line is not read back).
pub trait Sealable: Chained {
    fn statement(&self, line: &str) -> Result<String, String>;
}

impl Chained for AuditRecord {
    fn set_chain(&mut self, link: ChainLink) {
        self.chain = Some(link);
    }
}

impl Sealable for AuditRecord {
    fn statement(&self, line: &str) -> Result<String, String> {
        crate::statement::statement_for(line, self)
    }
}

impl Chained for OutcomeRecord {
    fn set_chain(&mut self, link: ChainLink) {
        self.chain = Some(link);
    }
}

impl Sealable for OutcomeRecord {
    fn statement(&self, line: &str) -> Result<String, String> {
        crate::statement::outcome_statement_for(line, self)
    }
}

/// Which engine made a decision, and how it was run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EngineIdentity {
    pub component_sha256: String,
    pub engine_version: String,
    pub wit_version: String,
    pub schema_version: String,
    pub wasmtime_version: String,
    pub determinism: serde_json::Value,
}

/// Where and when a record was made.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordContext {
    /// UTC, RFC 3339, second precision.
    pub time: String,
    pub host_name: String,
    pub palisade_version: String,
    /// The subcommand that made the record (`decide`, `run`).
    pub command: String,
    /// How the probes were obtained: `fresh`, `cache`, `facts-file` or `input-file`.
    pub probe_source: String,
    /// The run this decision launched (`palisade run`); absent for `decide`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The host configuration in force: files read with their SHA-256, and every effective
    /// value with its origin. Absent when the input came from `--facts` or `--input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_config: Option<serde_json::Value>,
    /// Who asked for an unsandboxed (`--execution-mode workspace`) decision or run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<serde_json::Value>,
}

/// One line of an audit file: a record, or why that line is not one.
pub type RecordLine = Result<AuditRecord, String>;

/// One parsed line of an audit file.
#[derive(Debug)]
pub enum AuditLine {
    /// A decision record (replayable), or why the line is not a valid one.
    Decision(Box<RecordLine>),
    /// A run outcome (not replayed; checked to refer to an earlier decision).
    Outcome(OutcomeRecord),
    /// A seal: the signature over the line before it ([`crate::seal`]), or why it is not one.
    Seal(Result<crate::seal::SealLine, String>),
}

/// The longest line read from an audit or statement file, in bytes. A record holds at most two
/// documents of [`palisade_engine::MAX_DOCUMENT_BYTES`] (the policy and the task contract), each
/// at most six times longer once escaped as JSON, plus facts and the output: far below this. A
/// longer line is reported as invalid without being held in memory.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// One line of a JSON Lines file: its text, or why it could not be read (too long, not UTF-8).
pub type LineText = Result<String, String>;

/// Every non-empty line of a JSON Lines stream with its 1-based number, as written (the text is
/// what in-toto export embeds verbatim). A line longer than `max` bytes, or not UTF-8, is
/// reported in its place; only a failing read fails the whole stream.
pub fn read_lines(mut reader: impl BufRead, max: usize) -> std::io::Result<Vec<(usize, LineText)>> {
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let mut lines = Vec::new();
    let mut number = 0;
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        let read = std::io::Read::take(reader.by_ref(), limit).read_until(b'\n', &mut bytes)?;
        if read == 0 {
            break;
        }
        number += 1;
        let complete = bytes.last() == Some(&b'\n');
        if !complete && bytes.len() > max {
            // Too long: skip to the end of the line without keeping it.
            reader.skip_until(b'\n')?;
            lines.push((
                number,
                Err(format!("line {number} is longer than {max} bytes")),
            ));
            continue;
        }
        let mut text = bytes.as_slice();
        if let Some(rest) = text.strip_suffix(b"\n") {
            text = rest.strip_suffix(b"\r").unwrap_or(rest);
        }
        match std::str::from_utf8(text) {
            Ok(text) if text.trim().is_empty() => {}
            Ok(text) => lines.push((number, Ok(text.to_owned()))),
            Err(e) => lines.push((
                number,
                Err(format!(
                    "line {number} is not valid utf-8 (byte {})",
                    e.valid_up_to()
                )),
            )),
        }
    }
    Ok(lines)
}

/// Parses one audit file line: a run outcome, or a decision record (or why it is not one, in
/// one line: the parser's messages quote the text, and a line break there would let an audit
/// file forge lines of `palisade replay`'s report).
pub fn parse_line(line: &str) -> AuditLine {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Schema {
        #[serde(default)]
        schema_version: Option<String>,
    }
    let schema = serde_json::from_str::<Schema>(line)
        .ok()
        .and_then(|s| s.schema_version);
    if schema.as_deref() == Some(crate::seal::SEAL_SCHEMA_VERSION) {
        return AuditLine::Seal(
            serde_json::from_str(line).map_err(|e| one_line(&format!("malformed seal: {e}"))),
        );
    }
    if schema.as_deref() == Some(OUTCOME_SCHEMA_VERSION) {
        match serde_json::from_str::<OutcomeRecord>(line) {
            Ok(outcome) => AuditLine::Outcome(outcome),
            Err(e) => AuditLine::Decision(Box::new(Err(one_line(&format!(
                "malformed run outcome: {e}"
            ))))),
        }
    } else {
        AuditLine::Decision(Box::new(parse_record(line)))
    }
}

/// Parses one decision record.
pub fn parse_record(text: &str) -> RecordLine {
    serde_json::from_str::<AuditRecord>(text).map_err(|e| one_line(&e.to_string()))
}
