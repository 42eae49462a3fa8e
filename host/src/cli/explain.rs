//! `palisade explain`: the denials of a recorded run, each with the smallest change to the
//! policy, the flags or the host configuration that would have allowed it.

use serde_json::Value;

use crate::audit::{self, AuditLine, OutcomeRecord};
use crate::denials::{Denial, Denials, at, suggestion};
use crate::exit::Exit;
use crate::report::{ErrorCode, Failure};

use super::CommandResult;
use super::args::ExplainArgs;

pub fn explain(args: &ExplainArgs) -> CommandResult {
    let invalid = |why: String| Failure::new(ErrorCode::InputInvalid, why);
    let lines = audit::read_all(&args.file).map_err(|e| invalid(e.to_string()))?;
    let mut decisions: Vec<(String, String)> = Vec::new();
    let mut outcomes: Vec<OutcomeRecord> = Vec::new();
    for (_, line) in lines {
        match line {
            AuditLine::Decision(record) => {
                if let Ok(record) = *record {
                    decisions.push((record.output_digest, record.output));
                }
            }
            AuditLine::Outcome(outcome) => outcomes.push(outcome),
            AuditLine::Seal(_) => {}
        }
    }
    let outcome = match &args.run {
        Some(id) => outcomes.iter().rev().find(|o| &o.run_id == id),
        None => outcomes.last(),
    }
    .ok_or_else(|| {
        invalid(match &args.run {
            Some(id) => format!("`{}` has no outcome for run `{id}`", args.file.display()),
            None => format!("`{}` holds no run outcome", args.file.display()),
        })
    })?;
    // The outcome is explained against the decision it was launched under, and only if the
    // recorded output still hashes to the digest the outcome names.
    let decision_text = decisions
        .iter()
        .rev()
        .find(|(digest, output)| {
            digest == &outcome.decision_digest
                && palisade_engine::output::sha256_hex(output.as_bytes()) == *digest
        })
        .map(|(_, output)| output.as_str())
        .ok_or_else(|| {
            invalid(format!(
                "run `{}` names decision sha256:{}, which is not in `{}` (or its output does not hash to that digest)",
                outcome.run_id,
                outcome.decision_digest,
                args.file.display()
            ))
        })?;
    let decision: Value = serde_json::from_str(decision_text)
        .map_err(|e| invalid(format!("the run's decision is not JSON: {e}")))?;
    let denials: Denials = match outcome.outcome.get("denials") {
        Some(value) => serde_json::from_value(value.clone()).map_err(|e| {
            invalid(format!(
                "run `{}`: malformed `denials`: {e}",
                outcome.run_id
            ))
        })?,
        None => Denials::default(),
    };
    let text = if args.suggest {
        crate::suggest::Suggestion::for_denials(&denials.events, &decision).render(&decision)
    } else {
        render(
            outcome,
            &decision,
            &denials,
            outcome.outcome.get("denials").is_some(),
        )
    };
    super::write_stdout(text.as_bytes())?;
    Ok(Exit::Success)
}

fn render(outcome: &OutcomeRecord, decision: &Value, denials: &Denials, recorded: bool) -> String {
    let mut out = String::new();
    let backend = at(decision, "/backend").as_str().unwrap_or("?");
    let exit = at(&outcome.outcome, "/exitCode");
    let ended = at(&outcome.outcome, "/endedBy").as_str().unwrap_or("?");
    out.push_str(&format!(
        "run {} under {backend} (decision sha256:{}): exit {exit}, ended by {ended}\n",
        outcome.run_id, outcome.decision_digest
    ));
    if !recorded {
        out.push_str("this outcome was recorded by a palisade that did not account for denials\n");
    } else if denials.is_empty() {
        out.push_str("nothing the sandbox observes was denied\n");
    } else {
        out.push_str(&format!(
            "{} denial{} ({} kept, {} dropped past the bound):\n",
            denials.total,
            if denials.total == 1 { "" } else { "s" },
            denials.events.len(),
            denials.dropped
        ));
        for denial in &denials.events {
            out.push_str(&item(denial, decision));
        }
    }
    // What this backend cannot see, so that silence is not read as "nothing was blocked".
    let unobserved: Vec<&str> = at(decision, "/limitations")
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|l| l.contains("not observed"))
        .collect();
    for limitation in unobserved {
        out.push_str(&format!("note: {limitation}\n"));
    }
    out
}

fn item(denial: &Denial, decision: &Value) -> String {
    format!(
        "- {}\n  to allow it: {}\n",
        denial.line(),
        suggestion(denial, decision)
    )
}
