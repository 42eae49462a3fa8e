//! in-toto statements made from audit records: a Statement v1 whose subject is the engine's
//! canonical output (by digest) and whose predicate is the audit record line itself, byte for
//! byte. [`statement_for`] writes one; [`parse`] reads one back and checks its shape (type,
//! predicate type, exactly one subject with exactly one `sha256` digest), leaving the replay of
//! its record to the CLI (`palisade replay --in-toto`).

use std::collections::BTreeMap;

use palisade_engine::reader::{one_line, quote};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::audit::{AuditRecord, OutcomeRecord};

/// The in-toto Statement type this palisade writes and reads.
pub const IN_TOTO_STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// The predicate type: the predicate is one `palisade.audit/v1` record, verbatim.
pub const PREDICATE_TYPE: &str = "https://loopwright.dev/palisade/decision-record/v1";

/// The subject's name: the artefact attested is the engine's canonical output.
pub const SUBJECT_NAME: &str = "palisade-decision.json";

/// An in-toto Statement v1 (serialized in this field order).
#[derive(Debug, Serialize)]
struct StatementOut<'a> {
    #[serde(rename = "_type")]
    statement_type: &'static str,
    subject: [SubjectOut<'a>; 1],
    #[serde(rename = "predicateType")]
    predicate_type: &'static str,
    predicate: &'a RawValue,
}

#[derive(Debug, Serialize)]
struct SubjectOut<'a> {
    name: &'static str,
    digest: DigestSet<'a>,
}

#[derive(Debug, Serialize)]
struct DigestSet<'a> {
    sha256: &'a str,
}

/// The statement for one audit record: subject = the output digest, predicate = `record_text`
/// (the record's line) verbatim, so the input, the engine identity and the output bytes are
/// exactly those recorded. One line of JSON, no trailing newline.
pub fn statement_for(record_text: &str, record: &AuditRecord) -> Result<String, String> {
    statement(PREDICATE_TYPE, &record.output_digest, record_text)
}

/// The predicate type of a run's outcome: the predicate is one `palisade.run-outcome/v1` line,
/// verbatim.
pub const OUTCOME_PREDICATE_TYPE: &str = "https://loopwright.dev/palisade/run-outcome/v1";

/// The statement for one run-outcome line: subject = the decision it ran under (by its output
/// digest), predicate = `outcome_text` verbatim. What a seal signs for an outcome line.
pub fn outcome_statement_for(
    outcome_text: &str,
    outcome: &OutcomeRecord,
) -> Result<String, String> {
    statement(
        OUTCOME_PREDICATE_TYPE,
        &outcome.decision_digest,
        outcome_text,
    )
}

fn statement(predicate_type: &'static str, digest: &str, text: &str) -> Result<String, String> {
    let predicate = RawValue::from_string(text.trim().to_owned())
        .map_err(|e| format!("the line is not json: {e}"))?;
    serde_json::to_string(&StatementOut {
        statement_type: IN_TOTO_STATEMENT_TYPE,
        subject: [SubjectOut {
            name: SUBJECT_NAME,
            digest: DigestSet { sha256: digest },
        }],
        predicate_type,
        predicate: &predicate,
    })
    .map_err(|e| format!("cannot serialize the statement: {e}"))
}

/// An in-toto statement as read back.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatementIn {
    #[serde(rename = "_type")]
    statement_type: String,
    subject: Vec<SubjectIn>,
    #[serde(rename = "predicateType")]
    predicate_type: String,
    predicate: Box<RawValue>,
}

/// A subject (an in-toto ResourceDescriptor; fields other than these are allowed and ignored).
#[derive(Debug, Deserialize)]
struct SubjectIn {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    digest: BTreeMap<String, String>,
}

/// A statement as read back: the digest it attests, and the audit record line it carries.
#[derive(Debug)]
pub struct Statement {
    /// The subject's `sha256` digest, as written.
    pub subject_sha256: String,
    /// The predicate: one audit record line, verbatim.
    pub predicate: Box<RawValue>,
}

/// Reads one statement line and checks its shape (why not, in one line): a statement of [`PREDICATE_TYPE`] with
/// exactly one subject, named [`SUBJECT_NAME`], whose only digest is `sha256`. Whether that
/// digest is the recorded output's, and whether the record replays, the caller checks.
pub fn parse(text: &str) -> Result<Statement, String> {
    let statement: StatementIn = serde_json::from_str(text)
        .map_err(|e| one_line(&format!("not an in-toto statement: {e}")))?;
    if statement.statement_type != IN_TOTO_STATEMENT_TYPE {
        return Err(format!(
            "statement `_type` is {}, expected `{IN_TOTO_STATEMENT_TYPE}`",
            quote(&statement.statement_type)
        ));
    }
    if statement.predicate_type != PREDICATE_TYPE {
        return Err(format!(
            "`predicateType` is {}, expected `{PREDICATE_TYPE}`",
            quote(&statement.predicate_type)
        ));
    }
    let subject_sha256 = match statement.subject.as_slice() {
        [only] if only.name.as_deref() == Some(SUBJECT_NAME) => {
            match (only.digest.len(), only.digest.get("sha256")) {
                (1, Some(digest)) => digest.clone(),
                _ => {
                    return Err(String::from(
                        "the subject must carry exactly one digest, `sha256`",
                    ));
                }
            }
        }
        [_] => return Err(format!("the subject must be named `{SUBJECT_NAME}`")),
        subjects => {
            return Err(format!(
                "a palisade statement has exactly one subject, this one has {}",
                subjects.len()
            ));
        }
    };
    Ok(Statement {
        subject_sha256,
        predicate: statement.predicate,
    })
}
