//! Hostile and malformed policy documents: every one must be refused with
//! `SANDBOX_POLICY_INVALID` at the expected field path, without a panic, a stack overflow or
//! unbounded time.
//!
//! Each case runs on a thread with a 512 KiB stack (a quarter of a test thread's default), so a
//! regression in the nesting bound shows up here as a crash rather than in production.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::time::{Duration, Instant};

use common::{HEAD, code, error_paths, input, report, taskpack};
use palisade_engine::{decide, decide_json};

/// Generous for a debug build on a shared 2-core machine; release is far faster.
const TIME_LIMIT: Duration = Duration::from_secs(5);
const STACK: usize = 512 * 1024;

struct Case {
    name: String,
    document: String,
    path: &'static str,
    /// A fragment the error at `path` must contain (empty: any message).
    message: &'static str,
}

fn case(
    name: impl Into<String>,
    document: impl Into<String>,
    path: &'static str,
    message: &'static str,
) -> Case {
    Case {
        name: name.into(),
        document: document.into(),
        path,
        message,
    }
}

fn sandbox(name: &'static str, body: &str, path: &'static str, message: &'static str) -> Case {
    case(name, taskpack(body), path, message)
}

fn spec(body: &str) -> String {
    format!("{HEAD}spec:\n{body}")
}

fn cases() -> Vec<Case> {
    let mut cases = vec![
        // YAML syntax and document shape.
        case(
            "unclosed_flow_sequence",
            format!("{HEAD}spec: [a, b\n"),
            "document",
            "invalid yaml",
        ),
        case(
            "bad_indentation",
            "apiVersion: x\n  kind: y\n kind: z\n",
            "document",
            "invalid yaml",
        ),
        case(
            "tab_indentation",
            format!("{HEAD}spec:\n\tsandbox: {{}}\n"),
            "document",
            "invalid yaml",
        ),
        case(
            "unterminated_quote",
            format!("{HEAD}spec:\n  sandbox:\n    networkMode: \"none\n"),
            "document",
            "invalid yaml",
        ),
        case(
            "two_documents",
            format!("{HEAD}---\n{HEAD}"),
            "document",
            "more than one document",
        ),
        case("empty_document", "", "document", "document is empty"),
        case(
            "only_comments",
            "# nothing here\n   \n# still nothing\n",
            "document",
            "document is empty",
        ),
        case(
            "top_level_list",
            "- apiVersion: loopwright.dev/v1alpha1\n",
            "document",
            "must be a mapping",
        ),
        case(
            "top_level_scalar",
            "Taskpack",
            "document",
            "must be a mapping",
        ),
        case(
            "raw_nul_byte",
            format!("{HEAD}spec: {{}}\x00\n"),
            "document",
            "invalid yaml",
        ),
        case(
            "unknown_anchor",
            format!("{HEAD}spec: *nowhere\n"),
            "document",
            "invalid yaml",
        ),
        // Header fields.
        case(
            "missing_api_version",
            "kind: Taskpack\nmetadata: {name: x}\n",
            "apiVersion",
            "is required",
        ),
        case(
            "wrong_api_version",
            "apiVersion: loopwright.dev/v1\nkind: Taskpack\nmetadata: {name: x}\n",
            "apiVersion",
            "unsupported value",
        ),
        case(
            "kind_wrong_case",
            "apiVersion: loopwright.dev/v1alpha1\nkind: taskpack\nmetadata: {name: x}\n",
            "kind",
            "`Taskpack`",
        ),
        case(
            "kind_is_a_number",
            "apiVersion: loopwright.dev/v1alpha1\nkind: 7\nmetadata: {name: x}\n",
            "kind",
            "found a number",
        ),
        case(
            "kind_is_tagged",
            "apiVersion: loopwright.dev/v1alpha1\nkind: !Taskpack Taskpack\nmetadata: {name: x}\n",
            "kind",
            "tagged value",
        ),
        case(
            "missing_metadata_name",
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {labels: {}}\n",
            "metadata.name",
            "is required",
        ),
        case(
            "unknown_metadata_field",
            format!("{HEAD}  namespace: prod\n"),
            "metadata.namespace",
            "unknown field `namespace`",
        ),
        case(
            "label_value_not_a_string",
            format!("{HEAD}  labels:\n    tier: 1\n"),
            "metadata.labels.tier",
            "expected a string",
        ),
        case(
            "unknown_top_level_field",
            format!("{HEAD}status: {{}}\n"),
            "status",
            "unknown field `status`",
        ),
        case(
            "merge_key_is_not_supported",
            format!("{HEAD}<<: {{name: x}}\n"),
            "[\"<<\"]",
            "unknown field `<<`",
        ),
        // Duplicate keys, at each later repeat.
        case(
            "duplicate_top_level_key",
            format!("{HEAD}kind: Taskpack\n"),
            "kind",
            "duplicate key `kind`",
        ),
        case(
            "duplicate_spec_sandbox",
            spec("  sandbox: {}\n  sandbox: {}\n"),
            "spec.sandbox",
            "duplicate key",
        ),
        case(
            "duplicate_key_in_ignored_section",
            spec("  steps:\n    - run: a\n      run: b\n"),
            "spec.steps[0].run",
            "duplicate key",
        ),
        sandbox(
            "duplicate_sandbox_field",
            "networkMode: none\nnetworkMode: allow-outbound",
            "spec.sandbox.networkMode",
            "duplicate key",
        ),
        // spec and spec.sandbox shape.
        case(
            "spec_is_a_list",
            spec("  - sandbox\n"),
            "spec",
            "expected a mapping",
        ),
        case(
            "spec_is_null",
            format!("{HEAD}spec:\n"),
            "spec",
            "found null",
        ),
        case(
            "spec_non_string_key",
            spec("  1: x\n"),
            "spec",
            "keys must be strings",
        ),
        case(
            "sandbox_null",
            spec("  sandbox: null\n"),
            "spec.sandbox",
            "found null",
        ),
        case(
            "sandbox_empty_value",
            spec("  sandbox:\n"),
            "spec.sandbox",
            "found null",
        ),
        case(
            "sandbox_string",
            spec("  sandbox: linux-bwrap\n"),
            "spec.sandbox",
            "found a string",
        ),
        case(
            "sandbox_list",
            spec("  sandbox: [linux-bwrap]\n"),
            "spec.sandbox",
            "found a list",
        ),
        case(
            "sandbox_capitalised",
            spec("  Sandbox: {}\n"),
            "spec.Sandbox",
            "did you mean `sandbox`?",
        ),
        case(
            "sandbox_upper_case",
            spec("  SANDBOX: {}\n"),
            "spec.SANDBOX",
            "did you mean `sandbox`?",
        ),
        case(
            "sandbox_missing_letter",
            spec("  sandbx: {}\n"),
            "spec.sandbx",
            "did you mean `sandbox`?",
        ),
        case(
            "sandbox_transposed",
            spec("  sadnbox: {}\n"),
            "spec.sadnbox",
            "did you mean `sandbox`?",
        ),
        sandbox(
            "unknown_sandbox_field",
            "preferredBackend: [linux-bwrap]",
            "spec.sandbox.preferredBackend",
            "did you mean `preferredBackends`?",
        ),
        // preferredBackends.
        sandbox(
            "backends_empty",
            "preferredBackends: []",
            "spec.sandbox.preferredBackends",
            "at least 1",
        ),
        sandbox(
            "backends_too_many",
            "preferredBackends: [macos-seatbelt, linux-bwrap, linux-landlock, docker, direct-dedicated, linux-bwrap]",
            "spec.sandbox.preferredBackends",
            "has 6 entries; at most 5",
        ),
        sandbox(
            "backend_unknown",
            "preferredBackends: [linux-bwrap, linux-bwrapp]",
            "spec.sandbox.preferredBackends[1]",
            "unknown backend `linux-bwrapp`",
        ),
        sandbox(
            "backend_wrong_case",
            "preferredBackends: [Docker]",
            "spec.sandbox.preferredBackends[0]",
            "unknown backend `Docker`",
        ),
        sandbox(
            "backend_duplicate",
            "preferredBackends: [docker, linux-bwrap, docker]",
            "spec.sandbox.preferredBackends[2]",
            "duplicate backend `docker`",
        ),
        sandbox(
            "backends_a_mapping",
            "preferredBackends: {docker: 1}",
            "spec.sandbox.preferredBackends",
            "found a mapping",
        ),
        sandbox(
            "backends_a_string",
            "preferredBackends: docker",
            "spec.sandbox.preferredBackends",
            "found a string",
        ),
        sandbox(
            "backend_a_number",
            "preferredBackends: [1]",
            "spec.sandbox.preferredBackends[0]",
            "found a number",
        ),
        sandbox(
            "backend_a_bool",
            "preferredBackends: [docker, yes, true]",
            "spec.sandbox.preferredBackends[2]",
            "found a boolean",
        ),
        // networkMode.
        sandbox(
            "network_mode_unknown",
            "networkMode: offline",
            "spec.sandbox.networkMode",
            "unknown networkMode `offline`",
        ),
        sandbox(
            "network_mode_bool",
            "networkMode: false",
            "spec.sandbox.networkMode",
            "found a boolean",
        ),
        sandbox(
            "network_mode_list",
            "networkMode: [none]",
            "spec.sandbox.networkMode",
            "found a list",
        ),
        sandbox(
            "network_mode_null",
            "networkMode: ~",
            "spec.sandbox.networkMode",
            "found null",
        ),
        // requiredCapabilities.
        sandbox(
            "capability_unknown",
            "requiredCapabilities: [fileSystemReadContainment]",
            "spec.sandbox.requiredCapabilities[0]",
            "unknown capability",
        ),
        sandbox(
            "capability_duplicate",
            "requiredCapabilities: [networkIsolation, syscallFiltering, networkIsolation]",
            "spec.sandbox.requiredCapabilities[2]",
            "duplicate capability",
        ),
        sandbox(
            "capabilities_too_many",
            "requiredCapabilities: [filesystemReadContainment, filesystemWriteContainment, protectedPathReadOnlyMask, networkIsolation, processTreeCleanup, syscallFiltering, syscallFiltering]",
            "spec.sandbox.requiredCapabilities",
            "has 7 entries; at most 6",
        ),
        sandbox(
            "capabilities_a_number",
            "requiredCapabilities: 6",
            "spec.sandbox.requiredCapabilities",
            "found a number",
        ),
        // deniedReadPaths.
        sandbox(
            "denied_nul_escape",
            "deniedReadPaths: [\"/etc/\\0shadow\"]",
            "spec.sandbox.deniedReadPaths[0]",
            "nul byte",
        ),
        sandbox(
            "denied_dotdot_from_home",
            "deniedReadPaths: ['~/../../etc/shadow']",
            "spec.sandbox.deniedReadPaths[0]",
            "`..`",
        ),
        sandbox(
            "denied_dotdot_absolute",
            "deniedReadPaths: [/home/dev/proj/../.ssh]",
            "spec.sandbox.deniedReadPaths[0]",
            "`..`",
        ),
        sandbox(
            "denied_relative",
            "deniedReadPaths: [.ssh]",
            "spec.sandbox.deniedReadPaths[0]",
            "absolute or `~/`-relative",
        ),
        sandbox(
            "denied_tilde_alone",
            "deniedReadPaths: ['~']",
            "spec.sandbox.deniedReadPaths[0]",
            "`~` alone",
        ),
        sandbox(
            "denied_tilde_user",
            "deniedReadPaths: ['~root/.ssh']",
            "spec.sandbox.deniedReadPaths[0]",
            "`~user`",
        ),
        sandbox(
            "denied_empty_string",
            "deniedReadPaths: ['']",
            "spec.sandbox.deniedReadPaths[0]",
            "must not be empty",
        ),
        sandbox(
            "denied_home_contains_workspace",
            "deniedReadPaths: ['~/']",
            "spec.sandbox.deniedReadPaths[0]",
            "the task could not run",
        ),
        sandbox(
            "denied_root",
            "deniedReadPaths: [/]",
            "spec.sandbox.deniedReadPaths[0]",
            "the task could not run",
        ),
        sandbox(
            "denied_workspace_itself",
            "deniedReadPaths: [/home/dev/proj/]",
            "spec.sandbox.deniedReadPaths[0]",
            "the workspace",
        ),
        sandbox(
            "denied_contains_writable_root",
            "deniedReadPaths: [/tmp]",
            "spec.sandbox.deniedReadPaths[0]",
            "writable root",
        ),
        sandbox(
            "denied_not_a_list",
            "deniedReadPaths: /etc",
            "spec.sandbox.deniedReadPaths",
            "expected a list",
        ),
        sandbox(
            "denied_item_a_mapping",
            "deniedReadPaths: [{path: /etc}]",
            "spec.sandbox.deniedReadPaths[0]",
            "found a mapping",
        ),
    ];
    let too_many: Vec<String> = (0..65).map(|i| format!("/srv/secret{i}")).collect();
    cases.push(sandbox(
        "denied_too_many",
        &format!("deniedReadPaths: [{}]", too_many.join(", ")),
        "spec.sandbox.deniedReadPaths",
        "has 65 entries; at most 64",
    ));

    // Size, nesting and expansion bombs.
    cases.push(case(
        "ten_megabytes",
        format!(
            "{HEAD}spec:\n  notes: \"{}\"\n",
            "a".repeat(10 * 1024 * 1024)
        ),
        "document",
        "larger than 1048576 bytes",
    ));
    cases.push(case(
        "nested_flow_sequences_10k",
        format!("{HEAD}spec:\n  deep: {}\n", "[".repeat(10_000)),
        "document",
        "nest deeper than 64",
    ));
    // 20 000 levels (40 KB) once ran the component out of fuel: the parser's time grows with
    // the square of flow nesting. Refused before parsing, in linear time.
    cases.push(case(
        "nested_flow_sequences_20k_closed",
        format!(
            "{HEAD}spec:\n  sandbox:\n    deniedReadPaths: {}{}\n",
            "[".repeat(20_000),
            "]".repeat(20_000)
        ),
        "document",
        "nest deeper than 64",
    ));
    cases.push(case(
        "nested_flow_closed_200",
        format!(
            "{HEAD}spec:\n  deep: {}{}\n",
            "[".repeat(200),
            "]".repeat(200)
        ),
        "document",
        "nest deeper than 64",
    ));
    cases.push(case(
        "nested_flow_mappings_10k",
        format!("{HEAD}spec:\n  deep: {}\n", "{a: ".repeat(10_000)),
        "document",
        "nest deeper than 64",
    ));
    cases.push(case(
        "nested_block_mappings_300",
        {
            let mut doc = format!("{HEAD}spec:\n");
            for level in 0..300 {
                doc.push_str(&" ".repeat(2 * level + 2));
                doc.push_str("k:\n");
            }
            doc
        },
        "document",
        "nest deeper than 64",
    ));
    cases.push(case(
        "nested_block_sequences_5k",
        format!("{HEAD}spec:\n  deep: {}x\n", "- ".repeat(5_000)),
        "document",
        "nest deeper than 64",
    ));
    // Issue 16: every kind of nesting, 20 000 and 100 000 levels deep, is refused before the
    // parser (in linear time and memory) as an invalid document. Half a million `? ` levels
    // (1 MiB) once ran the component out of memory, 20 000 `[` out of fuel.
    for levels in [20_000, 100_000] {
        for (kind, value) in [
            (
                "flow_sequences",
                format!("{}{}", "[".repeat(levels), "]".repeat(levels)),
            ),
            ("flow_sequences_open", "[".repeat(levels)),
            (
                "flow_mappings",
                format!("{}x{}", "{a: ".repeat(levels), "}".repeat(levels)),
            ),
            ("flow_pairs", format!("[{}x", "[a: ".repeat(levels))),
            ("block_sequences", format!("\n    {}x", "- ".repeat(levels))),
            ("complex_keys", format!("\n    {}x", "? ".repeat(levels))),
            (
                "sequences_of_keys",
                format!("\n    {}x", "- ? ".repeat(levels)),
            ),
            (
                "anchored_and_tagged",
                format!("{}x", "&a !t [".repeat(levels)),
            ),
        ] {
            cases.push(case(
                format!("nested_{kind}_{levels}"),
                format!("{HEAD}spec:\n  sandbox:\n    deniedReadPaths: {value}\n"),
                "document",
                "nest deeper than 64",
            ));
        }
    }
    // Indentation alone costs the square of the depth in bytes: 1 400 levels fill 1 MiB.
    cases.push(case(
        "nested_block_mappings_1400",
        {
            let mut doc = format!("{HEAD}spec:\n");
            for level in 0..1_400 {
                doc.push_str(&" ".repeat(level + 2));
                doc.push_str("k:\n");
            }
            doc
        },
        "document",
        "nest deeper than 64",
    ));
    cases.push(case(
        "billion_laughs",
        {
            let mut doc = format!(
                "{HEAD}spec:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
            );
            for level in 1..10 {
                let refs = vec![format!("*a{}", level - 1); 10].join(", ");
                doc.push_str(&format!("  a{level}: &a{level} [{refs}]\n"));
            }
            doc
        },
        "document",
        "invalid yaml",
    ));
    cases.push(case(
        "quadratic_alias_expansion",
        {
            let mut doc = format!("{HEAD}spec:\n  big: &big [");
            doc.push_str(&"x,".repeat(50_000));
            doc.push_str("x]\n  copies: [");
            doc.push_str(&"*big,".repeat(50_000));
            doc.push_str("*big]\n");
            doc
        },
        "document",
        "more than 100000 nodes",
    ));
    cases.push(case(
        "self_referencing_alias",
        format!("{HEAD}spec:\n  loop: &l [a, *l]\n"),
        "document",
        "invalid yaml",
    ));
    cases
}

/// Runs one case on a small-stack thread and checks code, path, message and time.
fn check(case: Case) {
    let Case {
        name,
        document,
        path,
        message,
    } = case;
    let started = Instant::now();
    let outcome = std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || decide(&input(Some(&document))))
        .unwrap()
        .join()
        .unwrap_or_else(|_| panic!("{name}: the engine panicked"));
    let elapsed = started.elapsed();
    if std::env::var_os("BAD_INPUT_TIMES").is_some() {
        eprintln!("{name}: {elapsed:?}");
    }
    let r = report(&outcome);
    assert_eq!(
        code(&r),
        "SANDBOX_POLICY_INVALID",
        "{name}: {}",
        outcome.canonical_json
    );
    let errors = r["errors"].as_array().unwrap();
    let found = errors.iter().find(|e| e["path"] == path);
    let Some(found) = found else {
        panic!("{name}: no error at `{path}`; got {:?}", error_paths(&r));
    };
    let text = found["message"].as_str().unwrap();
    assert!(
        text.contains(message),
        "{name}: message {text:?} lacks {message:?}"
    );
    assert!(!text.contains('\n'), "{name}: multi-line message");
    assert!(
        !r["message"].as_str().unwrap().contains('\n'),
        "{name}: multi-line summary"
    );
    assert!(elapsed < TIME_LIMIT, "{name}: took {elapsed:?}");
}

#[test]
fn every_bad_document_is_refused_with_its_path() {
    let cases = cases();
    assert!(cases.len() >= 30);
    for case in cases {
        check(case);
    }
}

#[test]
fn multiple_problems_are_all_reported() {
    let doc = concat!(
        "apiVersion: v1\nkind: Taskpack\nmetadata: {name: x}\nspec:\n",
        "  sandbx: {}\n  sandbox:\n    preferredBackends: [docker, dockr, docker]\n",
        "    networkMode: offline\n    deniedReadPaths: [rel, '~/../x']\n    surprise: 1\n",
    );
    let r = report(&decide(&input(Some(doc))));
    assert_eq!(
        error_paths(&r),
        [
            "apiVersion",
            "spec.sandbx",
            "spec.sandbox.preferredBackends[1]",
            "spec.sandbox.preferredBackends[2]",
            "spec.sandbox.networkMode",
            "spec.sandbox.deniedReadPaths[0]",
            "spec.sandbox.deniedReadPaths[1]",
            "spec.sandbox.surprise",
        ]
    );
}

#[test]
fn many_problems_are_counted_but_listing_is_capped() {
    let items = vec!["nope"; 5_000].join(", ");
    let r = report(&decide(&input(Some(&taskpack(&format!(
        "preferredBackends: [{items}]"
    ))))));
    assert_eq!(r["errors"].as_array().unwrap().len(), 100);
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .starts_with("policy is invalid: 5001 problems (100 listed)")
    );
}

#[test]
fn huge_keys_do_not_make_huge_messages() {
    let key = "k".repeat(100_000);
    let r = report(&decide(&input(Some(&format!("{HEAD}{key}: 1\n")))));
    assert_eq!(code(&r), "SANDBOX_POLICY_INVALID");
    assert!(r["message"].as_str().unwrap().len() < 1_000);
}

#[test]
fn largest_accepted_document_is_decided_in_bounded_time() {
    // Just under the size limit, in long strings of an ignored section.
    let mut doc = format!("{HEAD}spec:\n  notes:\n");
    while doc.len() < palisade_engine::MAX_DOCUMENT_BYTES - 5_000 {
        doc.push_str(&format!("    - \"{}\"\n", "n".repeat(4_000)));
    }
    let started = Instant::now();
    let outcome = decide(&input(Some(&doc)));
    assert!(
        started.elapsed() < TIME_LIMIT,
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(code(&report(&outcome)), "decision");
}

#[test]
fn dense_documents_are_cut_at_the_node_bound() {
    // 1 MiB of one-letter items: 500 000 nodes, well past the bound.
    let mut doc = format!("{HEAD}spec:\n  data: [");
    while doc.len() < palisade_engine::MAX_DOCUMENT_BYTES - 16 {
        doc.push_str("a,");
    }
    doc.push_str("a]\n");
    let started = Instant::now();
    let r = report(&decide(&input(Some(&doc))));
    assert!(
        started.elapsed() < TIME_LIMIT,
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(error_paths(&r), ["document"]);
    assert!(
        r["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("more than 100000 nodes")
    );
}

#[test]
fn largest_alias_bomb_is_cut_in_bounded_time() {
    let mut doc = format!("{HEAD}spec:\n  big: &big [");
    doc.push_str(&"x,".repeat(20_000));
    doc.push_str("x]\n  copies: [");
    while doc.len() < palisade_engine::MAX_DOCUMENT_BYTES - 16 {
        doc.push_str("*big,");
    }
    doc.push_str("x]\n");
    let started = Instant::now();
    let r = report(&decide(&input(Some(&doc))));
    assert!(
        started.elapsed() < TIME_LIMIT,
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(error_paths(&r), ["document"]);
}

#[test]
fn malformed_json_inputs_are_host_facts_invalid() {
    let valid = serde_json::to_string(&input(None)).unwrap();
    let bad = [
        String::from("\u{0}"),
        valid.replace("\"cli\"", "\"daemon\""),
        valid.replace("\"linux-bwrap\"", "\"bwrap\""),
        valid.replace("\"documentName\"", "\"documentname\""),
        valid.replace("\"document\":null", "\"document\":\"\\ud800\""),
        format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        // Nesting is bounded by the JSON parser (128 levels), in linear time.
        format!("{}{}", "[".repeat(20_000), "]".repeat(20_000)),
        format!("{}1{}", "{\"a\":".repeat(20_000), "}".repeat(20_000)),
        format!("{}1{}", "{\"a\":".repeat(100_000), "}".repeat(100_000)),
        format!("{valid} trailing"),
    ];
    for text in bad {
        let r = report(&decide_json(&text));
        assert_eq!(
            code(&r),
            "HOST_FACTS_INVALID",
            "{}",
            &text[..text.len().min(80)]
        );
        assert_eq!(error_paths(&r), ["input"]);
    }
    // Oversized text is refused before it is parsed, whatever it holds.
    let padded = format!("{valid}{}", " ".repeat(palisade_engine::MAX_INPUT_BYTES));
    let r = report(&decide_json(&padded));
    assert_eq!(code(&r), "HOST_FACTS_INVALID");
    assert!(
        r["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("larger than 16777216 bytes")
    );
}
