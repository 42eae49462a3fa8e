//! Audit records: one JSON line per decision, enough to prove months later why a run was
//! isolated the way it was.
//!
//! A record holds the engine's identity, the inputs verbatim and the output bytes with their
//! digest. Replay re-runs the inputs and compares the exact output bytes recorded; it never
//! re-serializes the output. The `context` block (time, host name, palisade version) is outside
//! what replay compares, because it varies by construction.

use std::fs::OpenOptions;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::Serialize;

use crate::runtime::{DeterminismSettings, EngineInfo};

// The record format is `palisade_formats::audit`, apart from the CLI so that tests and fuzz
// targets reach it without wasmtime.
pub use palisade_formats::audit::{
    AUDIT_SCHEMA_VERSION, AuditLine, AuditRecord, Chained, EngineIdentity, LineText,
    MAX_LINE_BYTES, OUTCOME_SCHEMA_VERSION, OutcomeRecord, RecordContext, RecordLine, Sealable,
    parse_line, parse_record,
};
pub use palisade_formats::chain;
pub use palisade_formats::seal;

use crate::keys::Signer;

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

/// Appends one record as a JSON line, linked into the file's hash chain ([`chain`]: the record
/// gets its `chain`), and flushes it to disk before returning, so that a record exists before
/// anything is launched.
pub fn append(
    path: &Path,
    record: &mut AuditRecord,
    checkpoint: Option<&Path>,
    signer: Option<&Signer>,
) -> Result<(), AuditError> {
    append_line(path, record, checkpoint, signer)
}

/// Appends a run's outcome line, linked into the file's hash chain like a record.
pub fn append_outcome(
    path: &Path,
    record: &mut OutcomeRecord,
    checkpoint: Option<&Path>,
    signer: Option<&Signer>,
) -> Result<(), AuditError> {
    append_line(path, record, checkpoint, signer)
}

/// Appends `record`, linked, and with a `signer` its seal right after it (one write, so no
/// other appender's line comes between a line and its seal); then, still under the lock (so the
/// checkpoint names the head the file really has), replaces `checkpoint` with the new head.
fn append_line<T: Serialize + Sealable>(
    path: &Path,
    record: &mut T,
    checkpoint: Option<&Path>,
    signer: Option<&Signer>,
) -> Result<(), AuditError> {
    let write_error = |reason: String| AuditError::Write {
        path: path.display().to_string(),
        reason,
    };
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .map_err(|e| write_error(e.to_string()))?;
    // Concurrent runs append to one file: an exclusive lock for the whole line, so no other
    // appender's bytes land inside it even when the kernel splits the write, and so the line
    // this one links to is the one it follows.
    file.lock().map_err(|e| write_error(format!("lock: {e}")))?;
    let start = file
        .metadata()
        .map_err(|e| write_error(e.to_string()))?
        .len();
    let last = last_line(&mut file, start).map_err(|e| write_error(format!("read: {e}")))?;
    let link = chain::link_after(last.as_deref());
    let mut seq = link.seq;
    record.set_chain(link);
    let mut line = serde_json::to_string(record).map_err(|e| write_error(e.to_string()))?;
    let mut head = line.clone();
    if let Some(signer) = signer {
        let mut sealed = seal::seal_payload(signer, &record.statement(&line).map_err(write_error)?);
        let link = chain::link_after(Some(line.as_bytes()));
        seq = link.seq;
        sealed.set_chain(link);
        head = serde_json::to_string(&sealed).map_err(|e| write_error(e.to_string()))?;
        line.push('\n');
        line.push_str(&head);
    }
    line.push('\n');
    if let Err(e) = file.write_all(line.as_bytes()) {
        // A full disk or a quota: take the torn tail back off, so the file never holds a line
        // that is not a whole record.
        let _ = file.set_len(start);
        return Err(write_error(e.to_string()));
    }
    file.sync_data().map_err(|e| write_error(e.to_string()))?;
    if let Some(checkpoint) = checkpoint {
        let head = chain::Checkpoint {
            schema_version: chain::CHECKPOINT_SCHEMA_VERSION.to_owned(),
            audit: path.display().to_string(),
            seq,
            sha256: palisade_engine::output::sha256_hex(head.as_bytes()),
        };
        write_checkpoint(checkpoint, &head).map_err(|e| AuditError::Write {
            path: checkpoint.display().to_string(),
            reason: e.to_string(),
        })?;
    }
    Ok(())
}

/// Replaces the checkpoint file whole (a private temp file renamed into place, 0600).
fn write_checkpoint(path: &Path, head: &chain::Checkpoint) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut text = serde_json::to_string(head).map_err(std::io::Error::other)?;
    text.push('\n');
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_data()
        })
        .and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// The file's last non-empty line, without its newline (`None` for an empty file), read back
/// from its end in blocks: the whole file is never read. A line longer than
/// [`MAX_LINE_BYTES`] is taken as it is (its hash still links it).
fn last_line(file: &mut std::fs::File, len: u64) -> std::io::Result<Option<Vec<u8>>> {
    const BLOCK: u64 = 16 * 1024;
    let mut end = len;
    // Trailing newlines (and blank lines) are not a line.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        if end == 0 {
            break;
        }
        let from = end.saturating_sub(BLOCK);
        let mut block = vec![0; usize::try_from(end - from).unwrap_or(0)];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut block)?;
        block.extend_from_slice(&tail);
        tail = block;
        end = from;
        let trimmed = tail.iter().rposition(|b| !matches!(b, b'\n' | b'\r'));
        if let Some(last_byte) = trimmed
            && let Some(newline) = tail
                .get(..last_byte)
                .and_then(|t| t.iter().rposition(|b| *b == b'\n'))
        {
            return Ok(tail.get(newline + 1..=last_byte).map(<[u8]>::to_vec));
        }
        if tail.len() > MAX_LINE_BYTES + 2 {
            break;
        }
    }
    let trimmed = tail.iter().rposition(|b| !matches!(b, b'\n' | b'\r'));
    Ok(trimmed.and_then(|last_byte| tail.get(..=last_byte).map(<[u8]>::to_vec)))
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
    palisade_shims::procfile::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]
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
        let signer = Signer::from_seed([5; 32]);
        std::thread::scope(|scope| {
            for writer in 0..8 {
                let (path, big, signer) = (&path, &big, &signer);
                // Half the writers seal their lines: each seal must land right after its line.
                let signer = (writer % 2 == 0).then_some(signer);
                scope.spawn(move || {
                    for n in 0..20 {
                        let mut record = OutcomeRecord {
                            schema_version: OUTCOME_SCHEMA_VERSION.to_owned(),
                            run_id: format!("{writer}-{n}"),
                            decision_digest: String::new(),
                            time: String::new(),
                            outcome: serde_json::json!({ "padding": big }),
                            chain: None,
                        };
                        append_outcome(path, &mut record, None, signer).unwrap();
                    }
                });
            }
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 240);
        let key = signer.public();
        let mut sealed = 0;
        for (index, line) in lines.iter().enumerate() {
            match parse_line(line) {
                AuditLine::Outcome(_) => {}
                AuditLine::Seal(seal) => {
                    let before = lines[index - 1];
                    assert_eq!(
                        seal::verify(&seal.unwrap(), before, std::slice::from_ref(&key)),
                        seal::SealVerdict::Verified {
                            keyid: key.keyid().to_owned()
                        }
                    );
                    sealed += 1;
                }
                AuditLine::Decision(_) => panic!("a torn line"),
            }
        }
        assert_eq!(sealed, 80);
        // Eight writers, one chain.
        let numbered = read_lines(&path).unwrap();
        let report = chain::verify(&numbered);
        assert!(report.breaks.is_empty(), "{:?}", report.breaks);
        assert_eq!(report.last_seq, Some(240));
    }

    #[test]
    fn the_last_line_is_found_from_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for (content, expected) in [
            ("", None),
            ("\n\n", None),
            ("one", Some("one")),
            ("one\n", Some("one")),
            ("one\ntwo\n", Some("two")),
            ("one\ntwo\n\n", Some("two")),
        ] {
            std::fs::write(&path, content).unwrap();
            let mut file = std::fs::File::open(&path).unwrap();
            let len = file.metadata().unwrap().len();
            let got = last_line(&mut file, len).unwrap();
            assert_eq!(got.as_deref(), expected.map(str::as_bytes), "{content:?}");
        }
        // Longer than a block, after a long first line.
        let long = "x".repeat(40_000);
        std::fs::write(&path, format!("{long}\n{long}y\n")).unwrap();
        let mut file = std::fs::File::open(&path).unwrap();
        let len = file.metadata().unwrap().len();
        assert_eq!(
            last_line(&mut file, len).unwrap().unwrap(),
            format!("{long}y").into_bytes()
        );
    }
}
