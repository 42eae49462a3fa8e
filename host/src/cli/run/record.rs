//! Where a run's outcome goes and what is said after the command: the audit line and `--json`'s
//! destination (opened before anything runs), the lines on stderr (denials, approvals, an
//! escalation, masks that were not observed), the phase table of `--timings`.

use serde_json::Value;

use crate::audit;
use crate::cli::args::RunArgs;
use crate::denials::Denials;
use crate::exit::Exit;
use crate::launch::{Ending, Outcome};
use crate::report::{ErrorCode, Failure};
use crate::timings::{Clock, Phase, Timings};

use super::Ended;

/// Where the run's outcome goes: the audit file and `--json`'s destination, opened before
/// anything runs (a destination that cannot be written is refused before the command starts,
/// and the command cannot swap a link in under it).
pub(super) struct Recorder<'a> {
    args: &'a RunArgs,
    run_id: String,
    json_out: Option<std::fs::File>,
}

impl<'a> Recorder<'a> {
    pub(super) fn open(args: &'a RunArgs, run_id: &str) -> Result<Recorder<'a>, Failure> {
        Ok(Recorder {
            args,
            run_id: run_id.to_owned(),
            json_out: args
                .json
                .as_deref()
                .map(open_json_destination)
                .transpose()?,
        })
    }

    /// Records the outcome of the run launched under the decision `digest`.
    pub(super) fn write(
        &mut self,
        digest: &str,
        record: Outcome,
        clock: &mut Clock,
    ) -> (Written, Value) {
        write_outcome(
            self.args,
            &self.run_id,
            digest,
            &mut self.json_out,
            record,
            clock,
        )
    }

    /// A run stopped by `signal` after its decision and before its command: said, recorded.
    pub(super) fn stopped(&mut self, digest: &str, signal: i32, clock: &mut Clock) -> Ended {
        say!("palisade: stopped by signal {signal} before the command started; nothing ran");
        let record = Outcome {
            denials: Some(Denials::default()),
            ..Outcome::new(
                Ending::not_launched(
                    format!("stopped by signal {signal} before the command started"),
                    Some(signal),
                ),
                i32::from(exit_for_signal(signal)),
            )
        };
        let (written, _) = self.write(digest, record, clock);
        print_timings(self.args, &written);
        Ended::Exit(Exit::Command(exit_for_signal(signal)))
    }

    /// A run that failed between its decision and its launch: a `not-launched` outcome, so no
    /// decision in the audit file is left without one.
    pub(super) fn not_launched(
        &mut self,
        digest: &str,
        failure: Failure,
        clock: &mut Clock,
    ) -> Ended {
        let record = Outcome {
            denials: Some(Denials::default()),
            ..Outcome::new(Ending::not_launched(failure.message.clone(), None), 125)
        };
        let (written, _) = self.write(digest, record, clock);
        print_timings(self.args, &written);
        Ended::Failure(failure)
    }
}

/// One line per connection the approver allowed (`--approve-with`), from the outcome's
/// `network.approvals`; connections an earlier `run` answer covered are counted, not repeated.
/// Its denies are refusals, which the denials' lines say with the approver's reason.
pub(super) fn approval_lines(record: &Value) -> Vec<String> {
    let Some(events) = record
        .pointer("/network/approvals")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    let mut covered = 0;
    for event in events {
        if event.get("asked") != Some(&Value::Bool(true)) {
            covered += 1;
            continue;
        }
        let field = |name: &str| event.get(name).cloned().unwrap_or_default();
        let target = format!(
            "{}:{}",
            field("host").as_str().unwrap_or("?"),
            field("port").as_u64().unwrap_or(0)
        );
        let waited = field("waitedMs").as_u64().unwrap_or(0);
        lines.push(match field("answer").as_str() {
            Some("once") => format!(
                "palisade: the approver allowed {target} once (after {waited} ms)"
            ),
            Some("run") => format!(
                "palisade: the approver allowed {target} for the rest of the run (after {waited} ms)"
            ),
            // A deny is a refused connection: the denials' lines above say it, with the
            // approver's reason.
            _ => continue,
        });
    }
    if covered > 0 {
        lines.push(format!(
            "palisade: {covered} more connection{} went through on an earlier `run` answer",
            if covered == 1 { "" } else { "s" }
        ));
    }
    lines
}

/// What `run` says when ending the run took SIGKILL (the record's `graceExpired`): the command
/// was sent SIGTERM (or the interrupt palisade received) and was still running when the grace
/// ran out, so a status of 137 is palisade's doing, not the command's.
pub(super) fn escalation_line(record: &Value) -> Option<String> {
    if record.get("graceExpired") != Some(&Value::Bool(true)) {
        return None;
    }
    let grace = palisade_shims::supervise::SuperviseOptions::default().grace;
    let why = match record.get("endedBy") {
        Some(Value::Object(map)) => match map.get("signal").and_then(Value::as_i64) {
            Some(signal) => format!("palisade received signal {signal} and passed it on"),
            None => "the run was being ended".to_owned(),
        },
        Some(Value::String(budget)) => format!("the {budget} budget ran out"),
        _ => "the run was being ended".to_owned(),
    };
    Some(format!(
        "palisade: {why}; the command had not exited {} s later (or a second interrupt came), so its process tree was killed with SIGKILL",
        grace.as_secs()
    ))
}

/// The status for a run stopped by `signal`: what a shell reports for a process it killed.
pub(super) fn exit_for_signal(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(125)
}

/// An outcome as written: the run's timings in it, and how long writing it took.
pub(super) struct Written {
    timings: Timings,
    write: std::time::Duration,
}

/// Appends the run's outcome line to the audit file and writes it to `--json`'s destination.
/// The command already ran (or never will): a failure to record is reported, not its status.
/// The run's last phase (cleanup) ends here, and its timings go into the outcome as `timings`.
pub(super) fn write_outcome(
    args: &RunArgs,
    run_id: &str,
    decision_digest: &str,
    json_out: &mut Option<std::fs::File>,
    mut record: Outcome,
    clock: &mut Clock,
) -> (Written, Value) {
    clock.end(Phase::Cleanup);
    let timings = clock.timings();
    record.timings = Some(timings.clone());
    // The one place an outcome is serialized: the audit line and `--json` carry these bytes,
    // and what is said after the command is read back from them.
    let outcome = record.to_value();
    let mut line = audit::OutcomeRecord {
        schema_version: audit::OUTCOME_SCHEMA_VERSION.to_owned(),
        run_id: run_id.to_owned(),
        decision_digest: decision_digest.to_owned(),
        time: audit::utc_now_rfc3339(),
        outcome,
        chain: None,
    };
    let writing = std::time::Instant::now();
    if let Some(path) = &args.audit
        && let Err(error) = audit::append_outcome(
            path,
            &mut line,
            args.checkpoint.as_deref(),
            crate::cli::engine::audit_signer().ok().flatten(),
        )
    {
        say!("warning: {error}");
    }
    if let Some(out) = json_out.take()
        && let Err(error) = write_json_outcome(out, &line)
    {
        say!("warning: cannot write the outcome to `--json`: {error}");
    }
    let written = Written {
        timings,
        write: writing.elapsed(),
    };
    (written, line.outcome)
}

/// With `--timings`, the phase table on stderr: the last thing the run prints (even with
/// `--quiet`, which silences only the denial summary).
pub(super) fn print_timings(args: &RunArgs, written: &Written) {
    if args.timings {
        for line in written.timings.table(Some(written.write)) {
            say!("{line}");
        }
    }
}

/// Opens `--json`'s destination: `fd:N`, a descriptor the caller left open (reopened through
/// `/proc/self/fd`, so the launcher never takes ownership of a raw number), or a file, created
/// or truncated, never through a symbolic link.
pub(super) fn open_json_destination(dest: &str) -> Result<std::fs::File, Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let refuse =
        |why: String| Failure::new(ErrorCode::InputInvalid, format!("`--json {dest}`: {why}"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    let path = match dest.strip_prefix("fd:") {
        Some(number) => {
            let fd: u32 = number
                .parse()
                .map_err(|_| refuse("expected `fd:N` with a descriptor number".to_owned()))?;
            if fd <= 2 {
                return Err(refuse(
                    "stdin, stdout and stderr belong to the command; name another descriptor"
                        .to_owned(),
                ));
            }
            options.append(true);
            std::path::PathBuf::from(format!("/dev/fd/{fd}"))
        }
        None => {
            options
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_NOFOLLOW);
            std::path::PathBuf::from(dest)
        }
    };
    options
        .open(&path)
        .map_err(|e| refuse(format!("cannot open it: {e}")))
}

/// Writes the outcome record as one JSON document and a newline.
pub(super) fn write_json_outcome(
    mut out: std::fs::File,
    line: &audit::OutcomeRecord,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
    text.push('\n');
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The note when the denied paths were masked mute because their observed masks could not be
/// mounted: still denied, but what the command tried there is not in the run's denials.
pub(super) fn unobserved_masks_line(record: &Value) -> Option<String> {
    let observer = record.get("fileObserver")?;
    if observer.get("mounted")?.as_bool()? {
        return None;
    }
    let why = observer
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    Some(format!(
        "palisade: note: the denied paths were masked but not observed in this run ({why}); accesses to them are refused and not listed"
    ))
}
