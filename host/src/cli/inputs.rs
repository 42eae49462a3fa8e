//! The pieces of a decision input the command line gives: the taskpack, the budget flags, the
//! policy flags and the execution mode.

use std::io::Read;
use std::path::{Path, PathBuf};

use palisade_engine::model::{BudgetLimits, PolicyFlags};
use palisade_engine::{Backend, Capability, ExecutionMode, NetworkMode};

use crate::execmode;
use crate::report::{ErrorCode, Failure};

use super::args::{BudgetArgs, ExecArgs, HostArgs, PolicyArgs};

/// `--execution-mode`, and the audit's requester entry for a `workspace` request.
pub(super) fn execution(
    exec: &ExecArgs,
) -> Result<(ExecutionMode, Option<execmode::Requester>), Failure> {
    let mode = execmode::parse(&exec.execution_mode).unwrap_or(ExecutionMode::Sandbox);
    if exec.requested_by.is_some() && mode != ExecutionMode::Workspace {
        // Recorded only for workspace runs: accepted anywhere else it would vanish unsaid.
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            "`--requested-by` applies only with `--execution-mode workspace`",
        ));
    }
    let requester = (mode == ExecutionMode::Workspace)
        .then(|| execmode::requester(exec.requested_by.as_deref()));
    Ok((mode, requester))
}

/// The most bytes read from a file the CLI is handed (a component, a facts file, a decision
/// input): each format refuses far less itself, this keeps a runaway file from exhausting memory.
const READ_LIMIT: usize = 64 * 1024 * 1024;

pub(super) fn read_file_limited(path: &Path, what: &str) -> Result<Vec<u8>, Failure> {
    read_bounded(path, what, READ_LIMIT)
}

/// The file's bytes, refused (`INPUT_INVALID`) if there are more than `limit`.
fn read_bounded(path: &Path, what: &str, limit: usize) -> Result<Vec<u8>, Failure> {
    let (bytes, cut) = read_prefix(path, what, limit)?;
    if cut {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            format!("{what} `{}` is larger than {limit} bytes", path.display()),
        ));
    }
    Ok(bytes)
}

/// At most `limit` bytes of the file, and whether it holds more.
fn read_prefix(path: &Path, what: &str, limit: usize) -> Result<(Vec<u8>, bool), Failure> {
    let unreadable = |e: std::io::Error| {
        Failure::new(
            ErrorCode::InputInvalid,
            format!("cannot read {what} `{}`: {e}", path.display()),
        )
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    // Sized from the file, bounded by the limit: one read, not 32 bytes doubled.
    let size = file.metadata().map_or(0, |meta| meta.len());
    let mut bytes = Vec::with_capacity(
        usize::try_from(size)
            .unwrap_or(limit)
            .min(limit)
            .saturating_add(1),
    );
    file.take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let cut = bytes.len() > limit;
    bytes.truncate(limit);
    Ok((bytes, cut))
}

/// A document the engine reads (the taskpack, the task contract), as text. A file larger than
/// the engine accepts is handed over cut just past [`palisade_engine::MAX_DOCUMENT_BYTES`] (at a
/// character boundary): the engine refuses it as too large and that refusal is recorded, while
/// neither this process nor the component ever holds the rest.
fn read_engine_document(path: &Path, what: &str) -> Result<String, Failure> {
    // One more character at most: enough to be over the limit after a cut character is dropped.
    let (mut bytes, _) = read_prefix(path, what, palisade_engine::MAX_DOCUMENT_BYTES + 4)?;
    if bytes.len() > palisade_engine::MAX_DOCUMENT_BYTES
        && let Err(e) = std::str::from_utf8(&bytes)
        && e.error_len().is_none()
    {
        bytes.truncate(e.valid_up_to());
    }
    String::from_utf8(bytes).map_err(|e| {
        Failure::new(
            ErrorCode::SandboxPolicyInvalid,
            format!(
                "{what} `{}` is not valid utf-8 (byte {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// The policy flags as the engine's input (`None` when none was given). Names were checked by
/// the parser; everything else is the engine's (`policyFlags.*`). `--writable` directories are
/// resolved here, as the workspace is: the engine takes canonical paths, and a symlink inside
/// the workspace must not make its target writable.
pub(super) fn policy_flags(args: &PolicyArgs) -> Result<Option<PolicyFlags>, Failure> {
    let flags = PolicyFlags {
        network_mode: args.network.as_deref().and_then(NetworkMode::from_name),
        allowed_domains: args.allow_domains.clone(),
        denied_read_paths: args.deny_read.clone(),
        writable_roots: args
            .writable
            .iter()
            .map(|dir| writable_dir(dir))
            .collect::<Result<_, _>>()?,
        preferred_backends: args
            .backends
            .iter()
            .filter_map(|name| Backend::from_name(name))
            .collect(),
        required_capabilities: args
            .require
            .iter()
            .filter_map(|name| Capability::from_name(name))
            .collect(),
        pass_environment: args.pass_env.clone(),
        allowed_unix_sockets: args.allow_unix_sockets.clone(),
        loopback_ports: args.allow_host_ports.clone(),
    };
    Ok((!flags.is_empty()).then_some(flags))
}

/// A `--writable` directory's canonical path.
fn writable_dir(dir: &Path) -> Result<String, Failure> {
    let real = std::fs::canonicalize(dir).map_err(|e| {
        Failure::new(
            ErrorCode::InputInvalid,
            format!("cannot resolve `--writable {}`: {e}", dir.display()),
        )
    })?;
    if !real.is_dir() {
        return Err(Failure::new(
            ErrorCode::InputInvalid,
            format!("`--writable {}` is not a directory", dir.display()),
        ));
    }
    real.into_os_string().into_string().map_err(|raw| {
        Failure::new(
            ErrorCode::InputInvalid,
            format!("`--writable {}` is not valid utf-8", raw.to_string_lossy()),
        )
    })
}

/// The task contract document (`--task-contract`), if given: its text and name, as the engine
/// records them.
pub(super) fn read_task_contract(
    budgets: &BudgetArgs,
) -> Result<Option<palisade_engine::model::NamedDocument>, Failure> {
    let Some(path) = &budgets.task_contract else {
        return Ok(None);
    };
    let text = read_engine_document(path, "task contract")?;
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
    let text = read_engine_document(&path, "taskpack")?;
    Ok((Some(text), path.display().to_string()))
}

/// The budget flags as the engine's input, in its units (`None` when no flag was given).
/// Only the spelling is checked here; bounds are the engine's (`budgetFlags.*`).
pub(super) fn budget_flags(args: &BudgetArgs) -> Result<Option<BudgetLimits>, Failure> {
    let usage = |e: super::units::UnitError| Failure::new(ErrorCode::InputInvalid, e.to_string());
    let limits = BudgetLimits {
        timeout_millis: args
            .timeout
            .as_deref()
            .map(super::units::parse_duration)
            .transpose()
            .map_err(usage)?
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        memory_bytes: args
            .memory
            .as_deref()
            .map(super::units::parse_size)
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
    parse_json(&bytes).map_err(|e| {
        Failure::new(
            ErrorCode::InputInvalid,
            format!("input `{source}` is not a decision input: {e}"),
        )
        .hint("the input is JSON with `document`, `documentName`, `host` and `probes`; see docs/contract.md")
    })
}

/// JSON of a decision input's shape, or the field where it is not, with why: `at
/// probes[0].backend: unknown variant ...` (the parser's line and column stay in the why), as
/// a taskpack's errors name their field.
pub(super) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            inner.to_string()
        } else {
            format!("at {path}: {inner}")
        }
    })?;
    deserializer.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// The bytes of `--input`: a file, or stdin for `-`; no more than the engine takes as JSON
/// ([`palisade_engine::MAX_INPUT_BYTES`]), refused before parsing.
fn read_json_source(source: &str) -> Result<Vec<u8>, Failure> {
    let limit = palisade_engine::MAX_INPUT_BYTES;
    if source == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| {
                Failure::new(ErrorCode::InputInvalid, format!("cannot read stdin: {e}"))
            })?;
        if bytes.len() > limit {
            return Err(Failure::new(
                ErrorCode::InputInvalid,
                format!("input on stdin is larger than {limit} bytes"),
            ));
        }
        Ok(bytes)
    } else {
        read_json_file(Path::new(source), "input")
    }
}

/// A JSON file the engine's input is made from (`--input`, `--facts`), no more than
/// [`palisade_engine::MAX_INPUT_BYTES`]: refused before parsing. Nesting is bounded by the JSON
/// parser (128 levels).
pub(super) fn read_json_file(path: &Path, what: &str) -> Result<Vec<u8>, Failure> {
    read_bounded(path, what, palisade_engine::MAX_INPUT_BYTES)
}
