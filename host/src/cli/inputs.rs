//! The pieces of a decision input the command line gives: the taskpack, the budget flags, the
//! domain narrowing and the execution mode.

use std::io::Read;
use std::path::{Path, PathBuf};

use palisade_engine::ExecutionMode;
use palisade_engine::model::BudgetLimits;
use serde_json::Value;

use crate::execmode;
use crate::launch;
use crate::report::{ErrorCode, Failure};

use super::args::{BudgetArgs, ExecArgs, HostArgs};

/// `--execution-mode`, and the audit's requester entry for a `workspace` request.
pub(super) fn execution(exec: &ExecArgs) -> (ExecutionMode, Option<Value>) {
    let mode = execmode::parse(&exec.execution_mode).unwrap_or(ExecutionMode::Sandbox);
    let requester = (mode == ExecutionMode::Workspace).then(|| {
        serde_json::to_value(execmode::requester(exec.requested_by.as_deref())).unwrap_or_default()
    });
    (mode, requester)
}

pub(super) fn read_file_limited(path: &Path, what: &str) -> Result<Vec<u8>, Failure> {
    // Generous cap: the engine refuses documents above 1 MiB itself (and records that refusal);
    // this only keeps a runaway file from exhausting memory.
    const READ_LIMIT: u64 = 64 * 1024 * 1024;
    let file = std::fs::File::open(path).map_err(|e| {
        Failure::new(
            ErrorCode::InputInvalid,
            format!("cannot read {what} `{}`: {e}", path.display()),
        )
    })?;
    let mut bytes = Vec::new();
    file.take(READ_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            Failure::new(
                ErrorCode::InputInvalid,
                format!("cannot read {what} `{}`: {e}", path.display()),
            )
        })?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > READ_LIMIT {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            format!(
                "{what} `{}` is larger than {READ_LIMIT} bytes",
                path.display()
            ),
        ));
    }
    Ok(bytes)
}

/// `--allow-domain` entries as the engine's narrowing list (absent when none were given).
pub(super) fn narrowing(entries: &[String]) -> Option<Vec<String>> {
    (!entries.is_empty()).then(|| entries.to_vec())
}

/// The task contract document (`--task-contract`), if given: its text and name, as the engine
/// records them.
pub(super) fn read_task_contract(
    budgets: &BudgetArgs,
) -> Result<Option<palisade_engine::model::NamedDocument>, Failure> {
    let Some(path) = &budgets.task_contract else {
        return Ok(None);
    };
    let bytes = read_file_limited(path, "task contract")?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Failure::new(
            ErrorCode::SandboxPolicyInvalid,
            format!(
                "task contract `{}` is not valid utf-8 (byte {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    Ok(Some(palisade_engine::model::NamedDocument {
        name: path.display().to_string(),
        text,
    }))
}

/// The policy document: `--taskpack`, else the workspace's `.loopwright/taskpack.yaml` if it
/// exists, else none (the omitted-policy defaults apply).
pub(super) fn read_document(
    taskpack: &Option<PathBuf>,
    host: &HostArgs,
) -> Result<(Option<String>, String), Failure> {
    let path = match taskpack {
        Some(path) => path.clone(),
        None => {
            let workspace = match &host.workspace {
                Some(dir) => dir.clone(),
                None => std::env::current_dir().map_err(|e| {
                    Failure::new(
                        ErrorCode::Internal,
                        format!("cannot read the current directory: {e}"),
                    )
                })?,
            };
            let default = workspace.join(".loopwright").join("taskpack.yaml");
            if !default.exists() {
                return Ok((None, "<none>".to_owned()));
            }
            default
        }
    };
    let bytes = read_file_limited(&path, "taskpack")?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Failure::new(
            ErrorCode::SandboxPolicyInvalid,
            format!(
                "taskpack `{}` is not valid utf-8 (byte {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    Ok((Some(text), path.display().to_string()))
}

/// The budget flags as the engine's input, in its units (`None` when no flag was given).
/// Only the spelling is checked here; bounds are the engine's (`budgetFlags.*`).
pub(super) fn budget_flags(args: &BudgetArgs) -> Result<Option<BudgetLimits>, Failure> {
    let usage = |e: launch::LaunchError| Failure::new(ErrorCode::InputInvalid, e.to_string());
    let limits = BudgetLimits {
        timeout_millis: args
            .timeout
            .as_deref()
            .map(launch::parse_duration)
            .transpose()
            .map_err(usage)?
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        memory_bytes: args
            .memory
            .as_deref()
            .map(launch::parse_size)
            .transpose()
            .map_err(usage)?,
        max_processes: args.max_procs,
        cpu_seconds: args.cpu_seconds,
    };
    Ok((limits != BudgetLimits::default()).then_some(limits))
}

/// A whole decision input (`--input FILE|-`, the JSON form `decide-json` takes), parsed.
pub(super) fn read_input(source: &str) -> Result<palisade_engine::DecisionInput, Failure> {
    let bytes = read_json_source(source)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Failure::new(
            ErrorCode::InputInvalid,
            format!("input `{source}` is not a decision input: {e}"),
        )
        .hint("the input is JSON with `document`, `documentName`, `host` and `probes`; see docs/contract.md")
    })
}

/// The bytes of `--input`: a file, or stdin for `-`.
fn read_json_source(source: &str) -> Result<Vec<u8>, Failure> {
    if source == "-" {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).map_err(|e| {
            Failure::new(ErrorCode::InputInvalid, format!("cannot read stdin: {e}"))
        })?;
        Ok(bytes)
    } else {
        read_file_limited(Path::new(source), "input")
    }
}
