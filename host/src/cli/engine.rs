//! Running the embedded engine for a subcommand: load it, decide (recording first when asked)
//! and turn a refusal into the failure to print.

use std::path::Path;
use std::time::Instant;

use palisade_engine::{DecisionInput, Outcome, Verdict};

use crate::audit::{self, AuditRecord, RecordContext};
use crate::report::{ErrorCode, Failure};
use crate::runtime::{self, EngineRuntime, LoadOptions};

/// Loads the engine, compiled or from the compiled-component cache in `cache_dir`.
pub(super) fn load_runtime(
    component: Option<Vec<u8>>,
    cache_dir: Option<&Path>,
) -> Result<EngineRuntime, Failure> {
    EngineRuntime::load(&LoadOptions {
        component,
        cache_dir: cache_dir.map(Path::to_path_buf),
        ..LoadOptions::default()
    })
    .map_err(|error| {
        Failure::new(
            ErrorCode::Internal,
            format!("cannot load the engine: {error}"),
        )
    })
}

/// A decision and when [`decide_recorded`] finished each of its steps (a run's phase timings:
/// component load, decide, audit write).
#[derive(Debug)]
pub(super) struct Recorded {
    pub(super) outcome: Outcome,
    /// The engine was loaded (compiled, or from the compiled-component cache).
    pub(super) loaded: Instant,
    /// The component decided (instantiation included).
    pub(super) decided: Instant,
    /// The record was appended and synced (or, with no audit file, the decision was made).
    pub(super) recorded: Instant,
    /// Where the decision came from: the decision cache, or the engine (the cache missed, or
    /// is off).
    pub(super) source: DecisionSource,
}

/// Where a decision came from, as the outcome and `--timings` say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DecisionSource {
    /// Read back from the decision cache: wasmtime was not started.
    Cache,
    /// Made by the engine; the cache missed (and now holds it, if it is a decision).
    EngineCacheMissed,
    /// Made by the engine; no decision cache (`--no-cache`, or no caches' directory).
    Engine,
}

impl DecisionSource {
    /// The outcome's `decisionCache`: `hit`, `miss` or `off`.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            DecisionSource::Cache => "hit",
            DecisionSource::EngineCacheMissed => "miss",
            DecisionSource::Engine => "off",
        }
    }
}

/// The identity the embedded engine gives its records, known without starting wasmtime: its
/// digest, the engine crate's versions (the component is built from the same source), this
/// build's wasmtime and determinism settings. A cached decision is used only if it is this.
fn embedded_identity() -> audit::EngineIdentity {
    let settings = runtime::DeterminismSettings::new(runtime::DEFAULT_FUEL_PER_CALL);
    audit::engine_identity(
        runtime::EMBEDDED_COMPONENT_SHA256,
        &runtime::EngineInfo {
            engine_version: palisade_engine::ENGINE_VERSION.to_owned(),
            wit_version: palisade_engine::WIT_VERSION.to_owned(),
            schema_version: palisade_engine::output::SCHEMA_VERSION.to_owned(),
        },
        &settings,
    )
}

/// The key that seals this process's audit lines, read once: `None` when this host has no key,
/// or when the only key is one this user cannot read (said once on stderr: the records are then
/// unsigned). A key file that is there and malformed is a failure, before anything runs.
pub(super) fn audit_signer() -> Result<Option<&'static crate::keys::Signer>, Failure> {
    static SIGNER: std::sync::OnceLock<Result<Option<crate::keys::Signer>, String>> =
        std::sync::OnceLock::new();
    let loaded = SIGNER.get_or_init(|| match crate::keys::signer() {
        Ok(found) => Ok(found.map(|(signer, _)| signer)),
        Err(error @ crate::keys::KeysError::Read { .. }) => {
            eprintln!(
                "palisade: warning: audit records are NOT signed: {error}; `palisade key init` makes a key of your own"
            );
            Ok(None)
        }
        Err(error) => Err(error.to_string()),
    });
    match loaded {
        Ok(signer) => Ok(signer.as_ref()),
        Err(reason) => Err(Failure::new(ErrorCode::HostConfigInvalid, reason.clone())
            .hint("replace it with `palisade key init --force` (records it signed then verify only with its public half)")),
    }
}

/// Decides the input — from the decision cache in `cache_dir` when `use_decisions` and it holds
/// this input's decision by this engine, else through a fresh instance of the embedded component
/// — and, when `audit` is given, appends the record (synced) before returning: `decide` and `run`
/// share this path, so a run's decision is exactly what `decide` would have recorded, cached or
/// not.
pub(super) fn decide_recorded(
    input: &DecisionInput,
    audit: Option<&Path>,
    checkpoint: Option<&Path>,
    context: RecordContext,
    cache_dir: Option<&Path>,
    use_decisions: bool,
) -> Result<Recorded, Failure> {
    let engine_failed = |e: runtime::RuntimeError| {
        Failure::new(ErrorCode::Internal, format!("the engine failed: {e}"))
    };
    let input_value = serde_json::to_value(input)
        .map_err(|e| Failure::new(ErrorCode::Internal, format!("cannot record the input: {e}")))?;
    let cache = cache_dir
        .filter(|_| use_decisions)
        .map(crate::decisions::DecisionCache::in_caches);
    let expected = embedded_identity();
    let key = crate::decisions::key(runtime::EMBEDDED_COMPONENT_SHA256, &input_value);
    let hit = match cache.as_ref().map(|cache| cache.get(&key, &expected)) {
        Some(Ok(hit)) => hit,
        Some(Err(reason)) => {
            eprintln!("palisade: warning: decision cache: {reason}; deciding afresh");
            None
        }
        None => None,
    };
    let (outcome, identity, loaded, decided, source) = match hit {
        Some(hit) => {
            let now = Instant::now();
            (hit.outcome, hit.engine, now, now, DecisionSource::Cache)
        }
        None => {
            let engine = load_runtime(None, cache_dir)?;
            let loaded = Instant::now();
            let mut instance = engine.instantiate().map_err(engine_failed)?;
            let outcome = instance.decide(input).map_err(engine_failed)?;
            let decided = Instant::now();
            // The embedded component's identity is `expected`, known without asking it: its
            // digest and settings are this build's, and its `info` returns the engine crate's
            // versions it was built from (`info_reports_the_engine_identity` in
            // tests/component.rs). Asking would take a second fresh instance (a call never
            // reuses one), about 0.2 ms of a miss.
            debug_assert_eq!(
                engine.component_sha256(),
                runtime::EMBEDDED_COMPONENT_SHA256
            );
            debug_assert_eq!(
                engine.settings(),
                &runtime::DeterminismSettings::new(runtime::DEFAULT_FUEL_PER_CALL)
            );
            let identity = expected.clone();
            let source = match &cache {
                Some(cache) => {
                    if let Err(reason) = cache.put(&key, &identity, &outcome) {
                        eprintln!("palisade: warning: decision cache: {reason}");
                    }
                    DecisionSource::EngineCacheMissed
                }
                None => DecisionSource::Engine,
            };
            // The engine and its instance are left for the process's exit to reclaim: tearing
            // them down here (the instance's 4 GiB reservation, the compiled code's mappings)
            // took 0.1–0.2 ms of every miss, before a run's launch, where exit unmaps the whole
            // address space at once, more cheaply. A CLI process decides once.
            std::mem::forget((instance, engine));
            (outcome, identity, loaded, decided, source)
        }
    };
    if let Some(path) = audit {
        let mut record = AuditRecord {
            schema_version: audit::AUDIT_SCHEMA_VERSION.to_owned(),
            engine: identity,
            input: input_value,
            output: outcome.canonical_json.clone(),
            output_digest: outcome.digest.clone(),
            context,
            chain: None,
        };
        audit::append(path, &mut record, checkpoint, audit_signer()?)
            .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;
    }
    Ok(Recorded {
        outcome,
        loaded,
        decided,
        recorded: Instant::now(),
        source,
    })
}

/// The failure to report for a refusal, or `None` for a decision.
pub(super) fn refusal_failure(outcome: &Outcome) -> Option<Failure> {
    let Verdict::Refusal {
        code,
        message,
        errors,
        trace,
    } = &outcome.verdict
    else {
        return None;
    };
    let code = ErrorCode::from_refusal(*code);
    let mut failure = Failure::new(code, message.clone());
    // A detail the first line already says is not said twice (the engine's message names the
    // first problem, and a single candidate with its reason).
    for error in errors {
        let detail = format!("{}: {}", error.path, error.message);
        if !message.contains(&detail) {
            failure = failure.detail(detail);
        }
    }
    for candidate in trace {
        let backend = candidate.backend.as_str();
        if message.contains(&format!("{backend} ({})", candidate.reason)) {
            continue;
        }
        failure = failure.detail(format!(
            "{backend}: {} ({})",
            candidate.verdict.as_str(),
            candidate.reason
        ));
    }
    // Blocked by the missing opt-in: doctor would show it available, so name the opt-in.
    let needs_opt_in = trace.iter().any(|candidate| {
        candidate.backend == palisade_engine::Backend::DirectDedicated
            && candidate.verdict == palisade_engine::output::CandidateVerdict::Blocked
    });
    failure = match code {
        ErrorCode::SandboxPolicyInvalid => {
            failure.hint("fix the listed fields; `palisade decide --json` prints them as data")
        }
        ErrorCode::SandboxBackendUnavailable if needs_opt_in => failure.hint(
            "direct-dedicated is selectable only by opt-in: pass `--allow-direct-dedicated`, or set `allowDirectDedicated: true` in the host configuration",
        ),
        ErrorCode::SandboxBackendUnavailable => {
            failure.hint("run `palisade doctor` to see why each backend is unavailable")
        }
        ErrorCode::SandboxCapabilityInsufficient => failure.hint(
            "drop a requirement or prefer a backend that provides it; `palisade doctor` lists capabilities",
        ),
        ErrorCode::SandboxUnixSocketRefused => failure.hint(
            "allow only sockets that exist, at paths outside every denied read path; one that grants root needs `allowRootGrantingSockets` in the host configuration",
        ),
        ErrorCode::ExecutionModeForbidden => failure.hint(
            "the host configuration sets `allowWorkspaceMode: false`; `palisade doctor` shows which file",
        ),
        _ => failure,
    };
    Some(failure.detail(format!("digest sha256:{}", outcome.digest)))
}
