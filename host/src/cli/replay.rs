//! `palisade replay`: re-run recorded decisions through the engine that made them and compare
//! the bytes; export or verify in-toto statements.

use std::collections::BTreeMap;

use palisade_engine::reader::one_line;

use crate::audit;
use crate::audit::seal::{self, Envelope, SealLine, SealVerdict};
use crate::exit::Exit;
use crate::keys::{self, PublicKey};
use crate::replay::{self, EngineChoice, Engines, ReplayStatus};
use crate::report::{ErrorCode, Failure};
use crate::store::ComponentStore;

use super::args::ReplayArgs;
use super::inputs::read_file_limited;
use super::setup::cache_path;
use super::{CommandResult, write_stdout};

/// `palisade replay`.
pub fn replay(args: &ReplayArgs) -> CommandResult {
    let choice = if let Some(path) = &args.component {
        EngineChoice::Component(read_file_limited(path, "component")?)
    } else if let Some(dir) = &args.component_store {
        if !dir.is_dir() {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                format!("component store `{}` is not a directory", dir.display()),
            )
            .hint("fill one with `palisade component --archive DIR`"));
        }
        EngineChoice::Store(ComponentStore::new(dir))
    } else {
        EngineChoice::Embedded
    };
    let mut engines = Engines::new(choice, cache_path()?);
    engines
        .preload()
        .map_err(|reason| Failure::new(ErrorCode::Internal, reason))?;
    let lines = audit::read_lines(&args.file)
        .map_err(|e| Failure::new(ErrorCode::InputInvalid, e.to_string()))?;
    let trusted: Vec<PublicKey> = args
        .trusted_key
        .iter()
        .map(|path| keys::read_public(path))
        .collect::<Result<_, _>>()
        .map_err(|e| {
            Failure::new(ErrorCode::InputInvalid, e.to_string())
                .hint("pass the `audit-signing.pub` that `palisade key init` wrote")
        })?;
    let seals = if args.in_toto {
        Seals::default()
    } else {
        Seals::scan(&lines, &trusted)
    };
    let mut seal_failed = 0usize;
    if lines.is_empty() {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            format!(
                "{} `{}` holds no {}",
                if args.in_toto {
                    "statement file"
                } else {
                    "audit file"
                },
                args.file.display(),
                if args.in_toto {
                    "statements"
                } else {
                    "records"
                }
            ),
        ));
    }
    let mut out = String::new();
    let mut failed = 0usize;
    let mut replayed = 0usize;
    let mut digests_seen = Vec::new();
    // Each run's decision (line, digest) and whether an outcome followed it.
    let mut runs: std::collections::BTreeMap<String, (usize, String, bool)> =
        std::collections::BTreeMap::new();
    let mut statements = String::new();
    let mut exported = 0usize;
    for (index, (line, text)) in lines.iter().enumerate() {
        let text = match text {
            Ok(text) => text,
            Err(reason) => {
                // Too long or not UTF-8: invalid in place; the rest of the file still replays.
                let result = replay::ReplayReport::invalid(*line, reason.clone());
                failed += 1;
                replayed += 1;
                report_line(&mut out, &result, args.json);
                continue;
            }
        };
        let result = if args.in_toto {
            match serde_json::from_str::<Envelope>(text) {
                // A signed statement: its signatures, then the statement it carries.
                Ok(envelope) => match envelope.payload_text() {
                    Ok(payload) => {
                        let verdict = if envelope.payload_type == seal::PAYLOAD_TYPE {
                            seal::verify_envelope(
                                &envelope.signatures,
                                &envelope.payload_type,
                                &payload,
                                &trusted,
                            )
                        } else {
                            SealVerdict::NotTheLine
                        };
                        if let Some(report) = seal_report(*line, Some(&verdict), &trusted) {
                            seal_failed += 1;
                            report_line(&mut out, &report, args.json);
                        }
                        replay::verify_statement(&mut engines, *line, &payload)
                    }
                    Err(reason) => replay::ReplayReport::invalid(*line, reason),
                },
                Err(_) => replay::verify_statement(&mut engines, *line, text),
            }
        } else {
            let parsed = audit::parse_line(text);
            if matches!(parsed, audit::AuditLine::Seal(_)) {
                // Checked with the line it seals (`Seals::scan`).
                continue;
            }
            // The line's seal (the line after it), when trusted keys are given or it is broken.
            if let Some(report) = seal_report(*line, seals.verdicts.get(&index), &trusted) {
                seal_failed += 1;
                report_line(&mut out, &report, args.json);
            }
            let record = match parsed {
                audit::AuditLine::Decision(record) => record,
                audit::AuditLine::Seal(_) => continue,
                audit::AuditLine::Outcome(outcome) => {
                    // Outcomes are not decisions: nothing to replay, but each must follow the
                    // decision it claims to have been launched under.
                    if let Some(run) = runs.get_mut(&outcome.run_id)
                        && run.1 == outcome.decision_digest
                    {
                        run.2 = true;
                    } else if !digests_seen.contains(&outcome.decision_digest) {
                        failed += 1;
                        if args.json {
                            let mut result = replay::ReplayReport::invalid(
                                *line,
                                String::from("run outcome for unknown decision"),
                            );
                            result.recorded_digest = Some(outcome.decision_digest.clone());
                            report_line(&mut out, &result, true);
                        } else {
                            out.push_str(&format!(
                                "{:<10} line {line} run outcome for unknown decision sha256:{}\n",
                                ReplayStatus::Invalid.as_str(),
                                one_line(&outcome.decision_digest)
                            ));
                        }
                    }
                    continue;
                }
            };
            let result = replay::replay_line(&mut engines, *line, &record);
            if let Ok(record) = record.as_ref() {
                digests_seen.push(record.output_digest.clone());
                // Only a decision launches anything; a refusal's run never had an outcome.
                let launched = serde_json::from_str::<serde_json::Value>(&record.output)
                    .is_ok_and(|output| output.get("outcome").is_some_and(|o| o == "decision"));
                if let Some(run_id) = record.context.run_id.as_ref().filter(|_| launched) {
                    runs.insert(run_id.clone(), (*line, record.output_digest.clone(), false));
                }
                if args.export_in_toto.is_some() && result.status == ReplayStatus::Reproduced {
                    let mut statement = replay::statement_for(text, record).map_err(|reason| {
                        Failure::new(
                            ErrorCode::Internal,
                            format!("cannot export line {line}: {reason}"),
                        )
                    })?;
                    // Sealed: the whole DSSE envelope, which any DSSE verifier checks.
                    if let Some(sealed) = seals.sealed(index) {
                        statement = serde_json::to_string(&Envelope::of(sealed, &statement))
                            .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;
                    }
                    statements.push_str(&statement);
                    statements.push('\n');
                    exported += 1;
                }
            }
            result
        };
        replayed += 1;
        if result.status != ReplayStatus::Reproduced {
            failed += 1;
        }
        report_line(&mut out, &result, args.json);
    }
    // A run whose decision has no outcome was stopped before its supervisor could write one
    // (SIGKILL, a power cut), or is still going: said, not a failure of the decision.
    for (run_id, (line, digest, _)) in runs.iter().filter(|(_, run)| !run.2) {
        let result = replay::ReplayReport {
            line: *line,
            status: ReplayStatus::Interrupted,
            recorded_digest: Some(digest.clone()),
            replayed_digest: None,
            replayed_with: None,
            details: vec![format!(
                "run {} has no outcome: it is still going, or its supervisor was stopped before it could write one",
                one_line(run_id)
            )],
            engine_note: None,
        };
        report_line(&mut out, &result, args.json);
    }
    // Seals that seal nothing (after a seal, or at the top), or that are not seals at all.
    for (line, detail) in &seals.broken {
        seal_failed += 1;
        report_line(
            &mut out,
            &status_report(*line, ReplayStatus::BadSeal, detail.clone()),
            args.json,
        );
    }
    if !args.json && !seals.verdicts.is_empty() {
        let keyids: Vec<&str> = seals.keyids.iter().map(String::as_str).collect();
        if trusted.is_empty() {
            out.push_str(&format!(
                "{:<10} {} lines carry a seal, by key {}: pass --trusted-key PUB to check them\n",
                "SEALED",
                seals.verdicts.len(),
                keyids.join(", ")
            ));
        } else if seal_failed == 0 {
            out.push_str(&format!(
                "{:<10} every record and outcome is sealed by a trusted key ({})\n",
                "SEALS_OK",
                keyids.join(", ")
            ));
        }
    }
    // The file's hash chain: where a line was changed, removed, inserted or moved.
    let mut chain_broken = None;
    if !args.in_toto {
        let chain = audit::chain::verify(&lines);
        if chain.chained > 0 {
            for broken in &chain.breaks {
                report_line(&mut out, &chain_broken_report(broken), args.json);
            }
            if let Some(first) = chain.breaks.first() {
                chain_broken = Some(format!(
                    "the audit file's hash chain breaks at line {} ({}: {}){}",
                    first.line,
                    first.kind.as_str(),
                    first.detail,
                    match chain.breaks.len() {
                        1 => String::new(),
                        n => format!(", and at {} more lines", n - 1),
                    }
                ));
            } else if !args.json {
                out.push_str(&format!(
                    "{:<10} {} chained lines, seq 1 to {}, each after the line before it (a cut-off tail is not seen without a checkpoint)\n",
                    "CHAIN_OK",
                    chain.chained,
                    chain.last_seq.unwrap_or(0)
                ));
            }
        }
    }
    // The checkpoint kept apart: the line it names must still be there, as it was.
    if let Some(path) = &args.checkpoint {
        let bytes = read_file_limited(path, "checkpoint")?;
        let checkpoint: audit::chain::Checkpoint = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::new(
                ErrorCode::InputInvalid,
                format!(
                    "checkpoint `{}` is not a checkpoint: {}",
                    path.display(),
                    one_line(&e.to_string())
                ),
            )
        })?;
        match audit::chain::verify_checkpoint(&lines, &checkpoint) {
            None if !args.json => out.push_str(&format!(
                "{:<10} the file holds seq {} as it was when the checkpoint was written\n",
                "CHECKPOINT", checkpoint.seq
            )),
            None => {}
            Some(broken) => {
                report_line(&mut out, &chain_broken_report(&broken), args.json);
                if chain_broken.is_none() {
                    chain_broken = Some(format!(
                        "the audit file disagrees with the checkpoint at line {} ({}: {})",
                        broken.line,
                        broken.kind.as_str(),
                        broken.detail
                    ));
                }
            }
        }
    }
    if let Some(path) = &args.export_in_toto {
        std::fs::write(path, statements.as_bytes()).map_err(|e| {
            Failure::new(
                ErrorCode::Internal,
                format!("cannot write `{}`: {e}", path.display()),
            )
        })?;
    }
    write_stdout(out.as_bytes())?;
    let what = if args.in_toto {
        "statements"
    } else {
        "decisions"
    };
    let seals_broken = (seal_failed > 0).then(|| {
        format!(
            "{seal_failed} lines are not sealed by a trusted key (UNSIGNED, OTHER_KEY or BAD_SEAL above)"
        )
    });
    if failed == 0 && chain_broken.is_none() && seals_broken.is_none() {
        Ok(Exit::Success)
    } else {
        let mut failure = match (&chain_broken, &seals_broken) {
            (Some(broken), _) if failed == 0 => {
                Failure::new(ErrorCode::AuditChainBroken, broken.clone())
            }
            (None, Some(broken)) if failed == 0 => {
                Failure::new(ErrorCode::AuditSignatureInvalid, broken.clone())
                    .hint("a line sealed by no trusted key is not the one this host's key signed: check where the file has been")
            }
            _ => Failure::new(
                ErrorCode::ReplayDiverged,
                format!(
                    "{failed} of {} lines did not reproduce ({replayed} {what} replayed)",
                    lines.len()
                ),
            ),
        };
        if let Some(broken) = chain_broken.filter(|_| failed > 0) {
            failure = failure.detail(broken);
        }
        if let Some(broken) =
            seals_broken.filter(|_| failure.code != ErrorCode::AuditSignatureInvalid)
        {
            failure = failure.detail(broken);
        }
        if let Some(path) = &args.export_in_toto {
            failure = failure.detail(format!(
                "{exported} statements for the reproduced records were written to `{}`",
                path.display()
            ));
        }
        Err(failure)
    }
}

/// One line's result, as JSON or as text. Every text line is one line: details quote recorded
/// values (diff pointers hold recorded keys), and a line break there would let an audit file
/// forge lines of this report.
/// The report line of a place where the file's chain (or its checkpoint) breaks.
fn chain_broken_report(broken: &audit::chain::ChainBreak) -> replay::ReplayReport {
    status_report(
        broken.line,
        ReplayStatus::ChainBroken,
        format!("{}: {}", broken.kind.as_str(), broken.detail),
    )
}

/// A report line that is no verdict on a decision: a status and what was found.
fn status_report(line: usize, status: ReplayStatus, detail: String) -> replay::ReplayReport {
    replay::ReplayReport {
        line,
        status,
        recorded_digest: None,
        replayed_digest: None,
        replayed_with: None,
        details: vec![detail],
        engine_note: None,
    }
}

/// The seals of an audit file: each sealed line's verdict (by index), and seal lines that seal
/// nothing.
#[derive(Default)]
struct Seals {
    verdicts: BTreeMap<usize, SealVerdict>,
    seals: BTreeMap<usize, SealLine>,
    keyids: std::collections::BTreeSet<String>,
    broken: Vec<(usize, String)>,
}

impl Seals {
    /// Reads every seal line and checks it against the line before it.
    fn scan(lines: &[(usize, audit::LineText)], trusted: &[PublicKey]) -> Seals {
        let mut seals = Seals::default();
        for (index, (line, text)) in lines.iter().enumerate() {
            let Ok(text) = text else { continue };
            let audit::AuditLine::Seal(parsed) = audit::parse_line(text) else {
                continue;
            };
            let sealed = match parsed {
                Ok(sealed) => sealed,
                Err(reason) => {
                    seals.broken.push((*line, reason));
                    continue;
                }
            };
            let before = index
                .checked_sub(1)
                .and_then(|i| lines.get(i))
                .and_then(|(_, text)| text.as_ref().ok())
                .filter(|text| !matches!(audit::parse_line(text), audit::AuditLine::Seal(_)));
            let Some(before) = before else {
                seals.broken.push((
                    *line,
                    String::from("a seal that follows no record or outcome"),
                ));
                continue;
            };
            seals
                .keyids
                .extend(sealed.signatures.iter().map(|s| s.keyid.clone()));
            let prev = index.saturating_sub(1);
            seals
                .verdicts
                .insert(prev, seal::verify(&sealed, before, trusted));
            seals.seals.insert(prev, sealed);
        }
        seals
    }

    /// The seal of the line at `index`, when it was made for that line.
    fn sealed(&self, index: usize) -> Option<&SealLine> {
        match self.verdicts.get(&index) {
            Some(SealVerdict::Verified { .. } | SealVerdict::Unchecked { .. }) => {
                self.seals.get(&index)
            }
            _ => None,
        }
    }
}

/// What to report about a line's seal, if anything: with trusted keys, every line must carry a
/// seal one of them made; without, only a seal made for another line is reported.
fn seal_report(
    line: usize,
    verdict: Option<&SealVerdict>,
    trusted: &[PublicKey],
) -> Option<replay::ReplayReport> {
    let (status, detail) = match verdict {
        Some(SealVerdict::Verified { .. } | SealVerdict::Unchecked { .. }) => return None,
        None if trusted.is_empty() => return None,
        None => (
            ReplayStatus::Unsigned,
            String::from("no seal follows this line: written without a key, or inserted"),
        ),
        Some(SealVerdict::OtherKey { keyids }) => (
            ReplayStatus::OtherKey,
            format!(
                "sealed by key {}, which is not a trusted key",
                keyids.join(", ")
            ),
        ),
        Some(SealVerdict::BadSignature { keyid }) => (
            ReplayStatus::BadSeal,
            format!("the signature of trusted key {keyid} does not verify: the seal was changed"),
        ),
        Some(SealVerdict::NotTheLine) => (
            ReplayStatus::BadSeal,
            String::from(
                "the seal after this line was made for another line: this line was changed or put in its place",
            ),
        ),
    };
    Some(status_report(line, status, detail))
}

fn report_line(out: &mut String, result: &replay::ReplayReport, json: bool) {
    if json {
        out.push_str(&serde_json::to_string(result).unwrap_or_default());
        out.push('\n');
        return;
    }
    out.push_str(&format!(
        "{:<10} line {} sha256:{}\n",
        result.status.as_str(),
        result.line,
        one_line(result.recorded_digest.as_deref().unwrap_or("-"))
    ));
    if let Some(note) = &result.engine_note {
        out.push_str(&format!("  note: {}\n", one_line(note)));
    }
    for detail in &result.details {
        out.push_str(&format!("  {}\n", one_line(detail)));
    }
}
