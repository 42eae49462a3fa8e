//! Audit records: one JSON line per decision, enough to prove months later why a run was
//! isolated the way it was.
//!
//! A record holds the engine's identity, the inputs verbatim and the output bytes with their
//! digest. Replay re-runs the inputs and compares the exact output bytes recorded; it never
//! re-serializes the output. The `context` block (time, host name, palisade version) is outside
//! what replay compares, because it varies by construction.

use std::fs::OpenOptions;
use std::io::{BufReader, Write};
use std::path::Path;

use serde::Serialize;

use crate::runtime::{DeterminismSettings, EngineInfo};

// The record format is `palisade_formats::audit`, apart from the CLI so that tests and fuzz
// targets reach it without wasmtime.
pub use palisade_formats::audit::{
    AUDIT_SCHEMA_VERSION, AuditLine, AuditRecord, EngineIdentity, LineText, MAX_LINE_BYTES,
    OUTCOME_SCHEMA_VERSION, OutcomeRecord, RecordContext, RecordLine, parse_line, parse_record,
};

/// The identity of a loaded component, for its records.
pub fn engine_identity(
    component_sha256: &str,
    info: &EngineInfo,
    settings: &DeterminismSettings,
) -> EngineIdentity {
    EngineIdentity {
        component_sha256: component_sha256.to_owned(),
        engine_version: info.engine_version.clone(),
        wit_version: info.wit_version.clone(),
        schema_version: info.schema_version.clone(),
        wasmtime_version: settings.wasmtime_version.clone(),
        determinism: serde_json::to_value(settings).unwrap_or(serde_json::Value::Null),
    }
}

/// A record context stamped now, on this host.
pub fn context_now(command: &str, probe_source: &str) -> RecordContext {
    RecordContext {
        time: utc_now_rfc3339(),
        host_name: host_name(),
        palisade_version: env!("CARGO_PKG_VERSION").to_owned(),
        command: command.to_owned(),
        probe_source: probe_source.to_owned(),
        run_id: None,
        host_config: None,
        requested_by: None,
    }
}

/// Why a record could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot write audit record to `{path}`: {reason}")]
    Write { path: String, reason: String },
    #[error("cannot read audit records from `{path}`: {reason}")]
    Read { path: String, reason: String },
}

/// Appends one record as a JSON line and flushes it to disk before returning, so that a record
/// exists before anything is launched.
pub fn append(path: &Path, record: &AuditRecord) -> Result<(), AuditError> {
    append_line(path, record)
}

/// Appends a run's outcome line.
pub fn append_outcome(path: &Path, record: &OutcomeRecord) -> Result<(), AuditError> {
    append_line(path, record)
}

fn append_line<T: Serialize>(path: &Path, record: &T) -> Result<(), AuditError> {
    let write_error = |reason: String| AuditError::Write {
        path: path.display().to_string(),
        reason,
    };
    let mut line = serde_json::to_string(record).map_err(|e| write_error(e.to_string()))?;
    line.push('\n');
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| write_error(e.to_string()))?;
    // Concurrent runs append to one file: an exclusive lock for the whole line, so no other
    // appender's bytes land inside it even when the kernel splits the write.
    file.lock().map_err(|e| write_error(format!("lock: {e}")))?;
    let start = file
        .metadata()
        .map_err(|e| write_error(e.to_string()))?
        .len();
    if let Err(e) = file.write_all(line.as_bytes()) {
        // A full disk or a quota: take the torn tail back off, so the file never holds a line
        // that is not a whole record.
        let _ = file.set_len(start);
        return Err(write_error(e.to_string()));
    }
    file.sync_data().map_err(|e| write_error(e.to_string()))
}

/// Reads every non-empty line of an audit file. A malformed line is reported in place (replay
/// calls it INVALID) rather than aborting the whole file.
pub fn read_all(path: &Path) -> Result<Vec<(usize, AuditLine)>, AuditError> {
    Ok(read_lines(path)?
        .into_iter()
        .map(|(number, text)| {
            let line = match text {
                Ok(text) => parse_line(&text),
                Err(reason) => AuditLine::Decision(Box::new(Err(reason))),
            };
            (number, line)
        })
        .collect())
}

/// Every non-empty line of a JSON Lines file with its 1-based number, as written (the text is
/// what in-toto export embeds verbatim); a line over [`MAX_LINE_BYTES`] or not UTF-8 is reported
/// in its place ([`palisade_formats::audit::read_lines`]).
pub fn read_lines(path: &Path) -> Result<Vec<(usize, LineText)>, AuditError> {
    let read_error = |reason: String| AuditError::Read {
        path: path.display().to_string(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| read_error(e.to_string()))?;
    palisade_formats::audit::read_lines(BufReader::new(file), MAX_LINE_BYTES)
        .map_err(|e| read_error(e.to_string()))
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now_rfc3339() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339_from_unix(seconds)
}

/// Formats Unix seconds as RFC 3339 UTC (proleptic Gregorian, days-from-civil inverse).
pub fn rfc3339_from_unix(seconds: u64) -> String {
    let days = i64::try_from(seconds / 86_400).unwrap_or(0);
    let rem = seconds % 86_400;
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

/// This machine's host name, or `unknown`.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339_from_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_from_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_from_unix(1_796_000_000), "2026-11-30T00:53:20Z");
    }

    #[test]
    fn concurrent_appenders_write_only_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let big = "x".repeat(200_000);
        std::thread::scope(|scope| {
            for writer in 0..8 {
                let (path, big) = (&path, &big);
                scope.spawn(move || {
                    for n in 0..20 {
                        let record = OutcomeRecord {
                            schema_version: OUTCOME_SCHEMA_VERSION.to_owned(),
                            run_id: format!("{writer}-{n}"),
                            decision_digest: String::new(),
                            time: String::new(),
                            outcome: serde_json::json!({ "padding": big }),
                        };
                        append_outcome(path, &record).unwrap();
                    }
                });
            }
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 160);
        for line in lines {
            assert!(
                matches!(parse_line(line), AuditLine::Outcome(_)),
                "a torn line"
            );
        }
    }
}
