//! What the fuzz targets share: the seed corpora (from the conformance corpus and the fixtures,
//! compiled in), the decision input every document target decides under, and the properties
//! every engine outcome must have. docs/fuzzing.md says what each target asserts.
//!
//! A target that finds a failing input panics with a message saying which property broke;
//! libFuzzer saves the input under `fuzz/artifacts/<target>/`, and it becomes a regression test
//! in the normal test suite.

use std::path::Path;

use palisade_engine::model::NamedDocument;
use palisade_engine::output::{FieldError, sha256_hex};
use palisade_engine::{
    Backend, BackendProbe, Capability, DecisionInput, ExecutionMode, HostFacts, NetworkMode,
    Outcome, RefusalCode, Verdict,
};

/// The conformance corpus and the fixtures, as the seeds are made from them.
const CORPUS: [&str; 12] = [
    include_str!("../../tests/corpus/bounds.yaml"),
    include_str!("../../tests/corpus/budgets.yaml"),
    include_str!("../../tests/corpus/defaults.yaml"),
    include_str!("../../tests/corpus/document-shape.yaml"),
    include_str!("../../tests/corpus/domains.yaml"),
    include_str!("../../tests/corpus/host-config.yaml"),
    include_str!("../../tests/corpus/host-constraints.yaml"),
    include_str!("../../tests/corpus/host-facts.yaml"),
    include_str!("../../tests/corpus/macos.yaml"),
    include_str!("../../tests/corpus/negotiation.yaml"),
    include_str!("../../tests/corpus/paths.yaml"),
    include_str!("../../tests/corpus/requirements.yaml"),
];
pub const FIXTURE_TASKPACK: &str = include_str!("../../tests/fixtures/taskpack.yaml");
pub const FIXTURE_RECORDS: &str = include_str!("../../tests/fixtures/engine-0.1.0/decisions.jsonl");
/// The docs' examples of the host's own files (their ```yaml blocks are seeds too).
const DOCS: [&str; 3] = [
    include_str!("../../docs/host-configuration.md"),
    include_str!("../../docs/docker.md"),
    include_str!("../../docs/policy.md"),
];

/// Every case's decision input in the conformance corpus, as JSON values (anchors expanded).
pub fn corpus_inputs() -> Vec<serde_json::Value> {
    let mut inputs = Vec::new();
    for text in CORPUS {
        let Ok(file) = serde_yaml::from_str::<serde_json::Value>(text) else {
            continue;
        };
        if let Some(cases) = file.get("cases").and_then(|c| c.as_array()) {
            inputs.extend(cases.iter().filter_map(|c| c.get("input").cloned()));
        }
    }
    inputs
}

/// Every taskpack the corpus decides, and the fixture.
pub fn corpus_documents() -> Vec<String> {
    let mut documents: Vec<String> = corpus_inputs()
        .iter()
        .filter_map(|i| i.get("document")?.as_str().map(str::to_owned))
        .collect();
    documents.push(FIXTURE_TASKPACK.to_owned());
    documents
}

/// Every task contract the corpus decides with.
pub fn corpus_contracts() -> Vec<String> {
    corpus_inputs()
        .iter()
        .filter_map(|i| {
            i.get("taskContract")?
                .get("text")?
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// The ```yaml blocks of the docs whose text contains `marker` (a `kind:`).
pub fn doc_examples(marker: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    for doc in DOCS {
        let mut rest = doc;
        while let Some(start) = rest.find("```yaml\n") {
            let body = &rest[start + 8..];
            let end = body.find("```").unwrap_or(body.len());
            if body[..end].contains(marker) {
                blocks.push(body[..end].to_owned());
            }
            rest = &body[end..];
        }
    }
    blocks
}

/// Writes `seeds` into the directory named by `PALISADE_FUZZ_SEEDS`, if set, one file each,
/// named by content digest (so reruns add nothing twice). `fuzz/run.sh` sets it to the
/// target's corpus directory; libFuzzer reads that directory after this init step.
pub fn write_seeds(seeds: impl IntoIterator<Item = Vec<u8>>) {
    let Some(dir) = std::env::var_os("PALISADE_FUZZ_SEEDS") else {
        return;
    };
    let dir = Path::new(&dir);
    let _ = std::fs::create_dir_all(dir);
    for seed in seeds {
        let name = format!("seed-{}", &sha256_hex(&seed)[..16]);
        let _ = std::fs::write(dir.join(name), seed);
    }
}

/// The host every fuzzed document is decided on: Linux, every backend available with every
/// capability (so a valid policy reaches negotiation and the plan), Docker included.
pub fn host_input(document: Option<String>, task_contract: Option<String>) -> DecisionInput {
    let all = vec![
        Capability::FilesystemReadContainment,
        Capability::FilesystemWriteContainment,
        Capability::ProtectedPathReadOnlyMask,
        Capability::NetworkIsolation,
        Capability::ProcessTreeCleanup,
        Capability::SyscallFiltering,
    ];
    let probe = |backend: Backend, available: bool| BackendProbe {
        backend,
        available,
        reason: String::from("fuzz"),
        capabilities: if available { all.clone() } else { Vec::new() },
        network_modes: if available {
            vec![
                NetworkMode::None,
                NetworkMode::LoopbackOnly,
                NetworkMode::AllowOutbound,
            ]
        } else {
            Vec::new()
        },
        network_bridge: available,
        version: String::new(),
        limitations: Vec::new(),
        landlock_proc: (backend == Backend::LinuxLandlock)
            .then_some(palisade_engine::LandlockProc::Own),
    };
    DecisionInput {
        document,
        document_name: String::from("taskpack.yaml"),
        host: HostFacts {
            allow_direct_dedicated: true,
            writable_roots: vec![String::from("/home/dev/work/results")],
            default_backend_order: vec![
                Backend::LinuxBwrap,
                Backend::LinuxLandlock,
                Backend::Docker,
            ],
            ..HostFacts::linux_cli("/home/dev", "/home/dev/work/repo")
        },
        probes: vec![
            probe(Backend::MacosSeatbelt, false),
            probe(Backend::LinuxBwrap, true),
            probe(Backend::LinuxLandlock, true),
            probe(Backend::Docker, true),
            probe(Backend::DirectDedicated, true),
        ],
        narrow_allowed_domains: None,
        execution_mode: None,
        budget_flags: None,
        task_contract: task_contract.map(|text| NamedDocument {
            name: String::from("contract.yaml"),
            text,
        }),
        policy_flags: None,
    }
}

/// The properties of any outcome of `input`: the typed and the JSON entry points agree byte for
/// byte; the digest is the canonical JSON's; the JSON parses and is one line; a refusal has a
/// code and, when it is about the input, every offending field with a path and a one-line
/// message; a decision never picks a backend that is unavailable or lacks a requirement.
/// `limit` bounds the output's size (time and memory follow the input, not an attack).
pub fn check_outcome(input: &DecisionInput, typed: &Outcome, limit: usize) {
    let json = serde_json::to_string(input).expect("a decision input serializes");
    let from_json = palisade_engine::decide_json(&json);
    assert!(
        *typed == from_json,
        "decide and decide_json differ:\n{}\n{}",
        typed.canonical_json,
        from_json.canonical_json
    );
    assert_eq!(typed.digest, sha256_hex(typed.canonical_json.as_bytes()));
    assert!(!typed.canonical_json.contains('\n'));
    let value: serde_json::Value =
        serde_json::from_str(&typed.canonical_json).expect("the canonical JSON parses");
    assert!(
        typed.canonical_json.len() <= limit,
        "the output ({} bytes) outgrew its bound ({limit})",
        typed.canonical_json.len()
    );
    match &typed.verdict {
        Verdict::Refusal {
            code,
            message,
            errors,
            ..
        } => {
            assert_eq!(value["code"], code.as_str());
            assert!(RefusalCode::ALL.contains(code));
            one_line(message);
            if matches!(
                code,
                RefusalCode::SandboxPolicyInvalid | RefusalCode::HostFactsInvalid
            ) {
                assert!(!errors.is_empty(), "{code:?} without an offending field");
            }
            check_field_errors(errors);
        }
        Verdict::Decision(plan) if plan.execution_mode == ExecutionMode::Workspace => {
            // Unsandboxed by the launcher's explicit request: no backend isolates it.
            assert_eq!(input.execution_mode, Some(ExecutionMode::Workspace));
            assert_eq!(value["executionMode"]["mode"], "workspace");
        }
        Verdict::Decision(plan) => {
            let probe = input
                .probes
                .iter()
                .find(|p| p.backend == plan.backend)
                .expect("the chosen backend was probed");
            assert!(probe.available, "chose unavailable {:?}", plan.backend);
            let required = value["policy"]["requirements"]
                .as_array()
                .expect("a decision lists its requirements");
            for requirement in required {
                let name = requirement["capability"].as_str().unwrap_or_default();
                assert!(
                    probe.capabilities.iter().any(|c| c.as_str() == name),
                    "chose {:?} without {name}",
                    plan.backend
                );
            }
        }
    }
}

/// Every field error has a path and a one-line message.
pub fn check_field_errors(errors: &[FieldError]) {
    assert!(errors.len() <= palisade_engine::reader::MAX_LISTED_ERRORS);
    for error in errors {
        assert!(!error.path.is_empty(), "an error without a path: {error:?}");
        one_line(&error.message);
    }
}

/// One line: no control character (newlines included).
pub fn one_line(text: &str) {
    assert!(
        !text.chars().any(char::is_control),
        "not one line: {text:?}"
    );
}
