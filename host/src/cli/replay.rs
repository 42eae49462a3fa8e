//! `palisade replay`: re-run recorded decisions through the engine that made them and compare
//! the bytes; export or verify in-toto statements.

use palisade_engine::reader::one_line;

use crate::audit;
use crate::exit::Exit;
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
    for (line, text) in &lines {
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
            replay::verify_statement(&mut engines, *line, text)
        } else {
            let record = match audit::parse_line(text) {
                audit::AuditLine::Decision(record) => record,
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
                    let statement = replay::statement_for(text, record).map_err(|reason| {
                        Failure::new(
                            ErrorCode::Internal,
                            format!("cannot export line {line}: {reason}"),
                        )
                    })?;
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
    if failed == 0 && chain_broken.is_none() {
        Ok(Exit::Success)
    } else {
        let mut failure = match &chain_broken {
            Some(broken) if failed == 0 => {
                Failure::new(ErrorCode::AuditChainBroken, broken.clone())
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
    replay::ReplayReport {
        line: broken.line,
        status: ReplayStatus::ChainBroken,
        recorded_digest: None,
        replayed_digest: None,
        replayed_with: None,
        details: vec![format!("{}: {}", broken.kind.as_str(), broken.detail)],
        engine_note: None,
    }
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
