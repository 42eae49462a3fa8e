//! The conformance corpus: loading `tests/corpus/*.yaml` and checking an engine's output against
//! each case's expectation, whichever path produced it (native engine, embedded component,
//! `palisade decide`/`replay` output).
//!
//! Key design decision: the corpus is plain data so that every runtime (Rust, Python, Node) runs
//! the same cases. Everything a runner must do is written down here, and the checks work on the
//! canonical JSON alone, so a runner that only sees the CLI's output can apply them too.
//!
//! # Format
//!
//! Each file is plain YAML (anchors and aliases allowed, no merge keys) with two top-level keys:
//!
//! - `fixtures`: anything; holds the anchors the cases alias. Runners ignore it.
//! - `cases`: a list of cases, each with exactly these keys:
//!   - `name`: kebab-case, unique across the whole corpus, saying what the case guards;
//!   - `guards`: one sentence, the rule the case protects;
//!   - `input`: the `SandboxPolicyInput` JSON form (`document`, `documentName`, `host`, `probes`),
//!     exactly what `palisade decide --input` and the WIT `decide-json` take;
//!   - `expect`: exactly one of
//!     - `decision: {backend, fields?, absent?}`, or
//!     - `refusal: {code, fields?, absent?, errorPaths?}`.
//!
//! Checks, all against the canonical JSON of the output:
//!
//! - `/outcome` is `decision` or `refusal`; `/backend` equals `backend`, or `/code` equals `code`;
//! - `fields` maps a JSON pointer (RFC 6901) to an expected value. Scalars must be equal; arrays
//!   must have the same length and match element by element; objects match on the keys given
//!   (keys not given are not checked), so `{backend: docker, verdict: blocked}` matches a trace
//!   entry whatever its `reason` says;
//! - `absent` lists JSON pointers that must not resolve;
//! - `errorPaths` (refusals only) is the set of `/errors/*/path` values, compared as sets (each
//!   path once, order ignored);
//! - the canonical JSON re-serializes to the same bytes (sorted keys, no whitespace), and the
//!   digest is the lower-case hex SHA-256 of those bytes.
//!
//! Message texts are never asserted: codes, backends, verdicts, paths and origins are the
//! contract.

#![allow(
    dead_code,
    reason = "each test binary including this module uses a different part of it"
)]

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use palisade_engine::output::sha256_hex;
use palisade_engine::{DecisionInput, Outcome, Verdict};
use serde::Deserialize;
use serde_json::Value;

/// The corpus must hold at least this many cases (issue 2, "Tests").
pub const MIN_CASES: usize = 60;

/// The directory holding the corpus files.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("corpus")
}

/// One corpus file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CorpusFile {
    /// Anchors only; ignored.
    #[serde(default)]
    fixtures: serde::de::IgnoredAny,
    cases: Vec<RawCase>,
}

/// One case as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: String,
    guards: String,
    input: Value,
    expect: RawExpect,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    #[serde(default)]
    decision: Option<DecisionExpect>,
    #[serde(default)]
    refusal: Option<RefusalExpect>,
}

/// The expected decision.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionExpect {
    /// The chosen backend's name (`linux-bwrap`).
    pub backend: String,
    /// JSON pointer -> expected value.
    #[serde(default)]
    pub fields: BTreeMap<String, Value>,
    /// JSON pointers that must not resolve.
    #[serde(default)]
    pub absent: Vec<String>,
}

/// The expected refusal.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusalExpect {
    /// The refusal code (`SANDBOX_POLICY_INVALID`).
    pub code: String,
    /// JSON pointer -> expected value.
    #[serde(default)]
    pub fields: BTreeMap<String, Value>,
    /// JSON pointers that must not resolve.
    #[serde(default)]
    pub absent: Vec<String>,
    /// The exact set of `/errors/*/path` values.
    #[serde(default, rename = "errorPaths")]
    pub error_paths: Option<Vec<String>>,
}

/// A case's one expectation.
#[derive(Clone, Debug)]
pub enum Expectation {
    Decision(DecisionExpect),
    Refusal(RefusalExpect),
}

/// One loaded, validated case.
#[derive(Clone, Debug)]
pub struct Case {
    /// The corpus file it came from (`negotiation.yaml`).
    pub file: String,
    pub name: String,
    pub guards: String,
    /// The input exactly as written (the JSON form).
    pub input_value: Value,
    /// The same input, deserialized from its JSON form.
    pub input: DecisionInput,
    pub expect: Expectation,
}

impl Case {
    /// The input as a JSON string, for `decide-json` and `palisade decide --input`.
    pub fn input_json(&self) -> String {
        // Serializing a `Value` cannot fail.
        serde_json::to_string(&self.input_value).unwrap_or_default()
    }
}

/// Loads and validates every `*.yaml` file in `dir`, in file-name order. Every problem found
/// (unparsable file, duplicate or badly named case, input that is not a `DecisionInput`, not
/// exactly one expectation, too few cases) is reported at once.
pub fn load_corpus(dir: &Path) -> Result<Vec<Case>, String> {
    let mut problems = Vec::new();
    let mut cases = Vec::new();
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .collect(),
        Err(error) => return Err(format!("cannot read `{}`: {error}", dir.display())),
    };
    files.sort();
    if files.is_empty() {
        return Err(format!("no `*.yaml` files in `{}`", dir.display()));
    }
    for path in &files {
        let file = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) => {
                problems.push(format!("{file}: cannot read: {error}"));
                continue;
            }
        };
        if text.contains("<<:") {
            problems.push(format!(
                "{file}: uses a YAML merge key `<<`, which other runtimes may not support"
            ));
        }
        let parsed: CorpusFile = match serde_yaml::from_str(&text) {
            Ok(parsed) => parsed,
            Err(error) => {
                problems.push(format!("{file}: not a corpus file: {error}"));
                continue;
            }
        };
        let _ = parsed.fixtures;
        for raw in parsed.cases {
            match validate_case(&file, raw) {
                Ok(case) => cases.push(case),
                Err(problem) => problems.push(problem),
            }
        }
    }
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for case in &cases {
        if let Some(first) = seen.insert(&case.name, &case.file) {
            problems.push(format!(
                "{}: case name `{}` already used in {first}",
                case.file, case.name
            ));
        }
    }
    if cases.len() < MIN_CASES {
        problems.push(format!(
            "the corpus has {} cases; at least {MIN_CASES} are required",
            cases.len()
        ));
    }
    if problems.is_empty() {
        Ok(cases)
    } else {
        Err(problems.join("\n"))
    }
}

fn validate_case(file: &str, raw: RawCase) -> Result<Case, String> {
    let name = raw.name;
    let kebab = !name.is_empty()
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !kebab {
        return Err(format!("{file}: case name `{name}` is not kebab-case"));
    }
    if raw.guards.trim().is_empty() {
        return Err(format!("{file}: case `{name}` has an empty `guards`"));
    }
    let expect = match (raw.expect.decision, raw.expect.refusal) {
        (Some(decision), None) => Expectation::Decision(decision),
        (None, Some(refusal)) => Expectation::Refusal(refusal),
        _ => {
            return Err(format!(
                "{file}: case `{name}` must have exactly one of `expect.decision` or `expect.refusal`"
            ));
        }
    };
    let pointers: Vec<&String> = match &expect {
        Expectation::Decision(d) => d.fields.keys().chain(d.absent.iter()).collect(),
        Expectation::Refusal(r) => r.fields.keys().chain(r.absent.iter()).collect(),
    };
    if let Some(bad) = pointers.iter().find(|p| !p.starts_with('/')) {
        return Err(format!(
            "{file}: case `{name}`: `{bad}` is not a JSON pointer (must start with `/`)"
        ));
    }
    let input: DecisionInput = serde_json::from_value(raw.input.clone()).map_err(|error| {
        format!("{file}: case `{name}`: `input` is not a SandboxPolicyInput: {error}")
    })?;
    Ok(Case {
        file: file.to_owned(),
        name,
        guards: raw.guards,
        input_value: raw.input,
        input,
        expect,
    })
}

/// Checks an engine outcome (native or component): the typed verdict agrees with the
/// expectation and with the canonical JSON, the digest is that JSON's SHA-256, and the JSON
/// passes every check of the case. Returns every mismatch found; empty means the case passed.
pub fn check_outcome(expect: &Expectation, outcome: &Outcome) -> Vec<String> {
    let mut problems = Vec::new();
    let digest = sha256_hex(outcome.canonical_json.as_bytes());
    if digest != outcome.digest {
        problems.push(format!(
            "digest `{}` is not the SHA-256 of the canonical JSON (`{digest}`)",
            outcome.digest
        ));
    }
    match (&outcome.verdict, expect) {
        (Verdict::Decision(plan), Expectation::Decision(want)) => {
            if plan.backend.as_str() != want.backend {
                problems.push(format!(
                    "selected `{}`, expected `{}`",
                    plan.backend.as_str(),
                    want.backend
                ));
            }
        }
        (Verdict::Refusal { code, .. }, Expectation::Refusal(want)) => {
            if code.as_str() != want.code {
                problems.push(format!(
                    "refused with `{}`, expected `{}`",
                    code.as_str(),
                    want.code
                ));
            }
        }
        (Verdict::Decision(plan), Expectation::Refusal(want)) => {
            problems.push(format!(
                "selected `{}`, expected refusal `{}`",
                plan.backend.as_str(),
                want.code
            ));
        }
        (Verdict::Refusal { code, message, .. }, Expectation::Decision(want)) => {
            problems.push(format!(
                "refused with `{}` ({message}), expected `{}`",
                code.as_str(),
                want.backend
            ));
        }
    }
    let value = match serde_json::from_str::<Value>(&outcome.canonical_json) {
        Ok(value) => value,
        Err(error) => {
            problems.push(format!("canonical JSON does not parse: {error}"));
            return problems;
        }
    };
    // The typed verdict is the JSON's own value: the plan (or the refusal's errors and trace)
    // must serialize to exactly what the canonical JSON holds.
    let mut same = |pointer: &str, typed: Value| {
        let in_json = value.pointer(pointer).cloned().unwrap_or(Value::Null);
        if in_json != typed {
            problems.push(format!(
                "typed verdict {pointer} is {typed} but the canonical JSON holds {in_json}"
            ));
        }
    };
    match &outcome.verdict {
        Verdict::Decision(plan) => {
            same("/backend", Value::from(plan.backend.as_str()));
            same(
                "/plan",
                serde_json::to_value(plan.as_ref()).unwrap_or_default(),
            );
        }
        Verdict::Refusal {
            code,
            message,
            errors,
            trace,
        } => {
            same("/code", Value::from(code.as_str()));
            same("/message", Value::from(message.as_str()));
            let listed = serde_json::to_value(errors).unwrap_or_default();
            same(
                "/errors",
                if errors.is_empty() {
                    Value::Null
                } else {
                    listed
                },
            );
            let traced = serde_json::to_value(trace).unwrap_or_default();
            same(
                "/trace",
                if trace.is_empty() {
                    Value::Null
                } else {
                    traced
                },
            );
        }
    }
    problems.extend(check_canonical(expect, &outcome.canonical_json));
    problems
}

/// Checks a canonical JSON output against a case's expectation (the checks listed in the module
/// docs). Usable on any path's output, including the CLI's. Empty means the case passed.
pub fn check_canonical(expect: &Expectation, canonical_json: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let value = match serde_json::from_str::<Value>(canonical_json) {
        Ok(value) => value,
        Err(error) => {
            problems.push(format!("output is not JSON: {error}"));
            return problems;
        }
    };
    match serde_json::to_string(&value) {
        Ok(again) if again == canonical_json => {}
        _ => problems.push(String::from(
            "output is not canonical JSON (sorted keys, no whitespace)",
        )),
    }
    let (outcome, fields, absent) = match expect {
        Expectation::Decision(want) => {
            match_at(
                &value,
                "/backend",
                &Value::from(want.backend.as_str()),
                &mut problems,
            );
            ("decision", &want.fields, &want.absent)
        }
        Expectation::Refusal(want) => {
            match_at(
                &value,
                "/code",
                &Value::from(want.code.as_str()),
                &mut problems,
            );
            if let Some(paths) = &want.error_paths {
                check_error_paths(&value, paths, &mut problems);
            }
            ("refusal", &want.fields, &want.absent)
        }
    };
    match_at(&value, "/outcome", &Value::from(outcome), &mut problems);
    for (pointer, expected) in fields {
        match_at(&value, pointer, expected, &mut problems);
    }
    for pointer in absent {
        if let Some(found) = lookup(&value, pointer) {
            problems.push(format!(
                "{pointer}: expected absent, found {}",
                show(Some(found))
            ));
        }
    }
    problems
}

fn check_error_paths(value: &Value, expected: &[String], problems: &mut Vec<String>) {
    let got: BTreeSet<&str> = value
        .pointer("/errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| e.get("path").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let want: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
    if got != want {
        let missing: Vec<&&str> = want.difference(&got).collect();
        let extra: Vec<&&str> = got.difference(&want).collect();
        problems.push(format!(
            "/errors paths: missing {missing:?}, unexpected {extra:?} (got {got:?})"
        ));
    }
}

/// Resolves an RFC 6901 JSON pointer (`/trace/0/verdict`).
pub fn lookup<'v>(value: &'v Value, pointer: &str) -> Option<&'v Value> {
    value.pointer(pointer)
}

fn match_at(value: &Value, pointer: &str, expected: &Value, problems: &mut Vec<String>) {
    match lookup(value, pointer) {
        Some(actual) => match_value(expected, actual, pointer, problems),
        None => problems.push(format!(
            "{pointer}: expected {}, found nothing",
            show(Some(expected))
        )),
    }
}

/// Matches `actual` against `expected`: scalars equal, arrays equal in length and element by
/// element, objects on the keys `expected` names. Each mismatch is pushed with its pointer.
pub fn match_value(expected: &Value, actual: &Value, at: &str, problems: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(want), Value::Object(got)) => {
            for (key, want_value) in want {
                let here = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                match got.get(key) {
                    Some(got_value) => match_value(want_value, got_value, &here, problems),
                    None => problems.push(format!(
                        "{here}: expected {}, found nothing",
                        show(Some(want_value))
                    )),
                }
            }
        }
        (Value::Array(want), Value::Array(got)) => {
            if want.len() == got.len() {
                for (index, (w, g)) in want.iter().zip(got).enumerate() {
                    match_value(w, g, &format!("{at}/{index}"), problems);
                }
            } else {
                problems.push(format!(
                    "{at}: expected {} entries {}, found {} entries {}",
                    want.len(),
                    show(Some(expected)),
                    got.len(),
                    show(Some(actual))
                ));
            }
        }
        _ => {
            if expected != actual {
                problems.push(format!(
                    "{at}: expected {}, found {}",
                    show(Some(expected)),
                    show(Some(actual))
                ));
            }
        }
    }
}

fn show(value: Option<&Value>) -> String {
    match value {
        None => String::from("nothing"),
        Some(value) => {
            let text = serde_json::to_string(value).unwrap_or_default();
            if text.chars().count() > 300 {
                let cut: String = text.chars().take(300).collect();
                format!("{cut}…")
            } else {
                text
            }
        }
    }
}

/// Compares two outcomes of the same input (native `decide` vs `decide_json`, native vs
/// component): `None` when verdict, canonical JSON and digest are identical.
pub fn compare_outcomes(
    left_label: &str,
    left: &Outcome,
    right_label: &str,
    right: &Outcome,
) -> Option<String> {
    if left == right {
        return None;
    }
    let mut text = format!("{left_label} and {right_label} differ:");
    if left.verdict != right.verdict {
        let _ = write!(text, " verdict {:?} vs {:?};", left.verdict, right.verdict);
    }
    if left.digest != right.digest {
        let _ = write!(text, " digest {} vs {};", left.digest, right.digest);
    }
    if left.canonical_json != right.canonical_json {
        let _ = write!(
            text,
            " canonical JSON differs at byte {}",
            first_difference(&left.canonical_json, &right.canonical_json)
        );
    }
    Some(text)
}

fn first_difference(left: &str, right: &str) -> usize {
    left.bytes()
        .zip(right.bytes())
        .position(|(l, r)| l != r)
        .unwrap_or_else(|| left.len().min(right.len()))
}

/// Writes each case's input object to `<dir>/<case name>.json` (what `palisade decide --input`
/// reads) and returns `(case name, file)` pairs in corpus order.
pub fn write_inputs(cases: &[Case], dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let mut written = Vec::with_capacity(cases.len());
    for case in cases {
        let path = dir.join(format!("{}.json", case.name));
        let mut bytes = serde_json::to_vec_pretty(&case.input_value)
            .map_err(|e| format!("cannot serialize input of `{}`: {e}", case.name))?;
        bytes.push(b'\n');
        std::fs::write(&path, bytes)
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
        written.push((case.name.clone(), path));
    }
    Ok(written)
}

/// Collects per-case failures and renders them as one readable report.
#[derive(Debug, Default)]
pub struct Failures {
    entries: Vec<(String, Vec<String>)>,
}

impl Failures {
    /// Records the problems of one case (ignored when there are none).
    pub fn add(&mut self, case: &Case, problems: Vec<String>) {
        if !problems.is_empty() {
            self.entries
                .push((format!("{} ({})", case.name, case.file), problems));
        }
    }

    /// Whether no case failed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The number of failing cases.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The failing case names, in corpus order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|(name, _)| name.as_str()).collect()
    }

    /// One block per failing case, every problem on its own line.
    pub fn render(&self, path_label: &str, total: usize) -> String {
        let mut text = format!(
            "{} of {total} conformance cases failed ({path_label}):\n",
            self.entries.len()
        );
        for (name, problems) in &self.entries {
            let _ = writeln!(text, "\n  {name}");
            for problem in problems {
                let _ = writeln!(text, "    - {problem}");
            }
        }
        text
    }
}
