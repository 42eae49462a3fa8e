//! Every reader of this crate refuses over-deep and oversized input before parsing it, as an
//! invalid document with a path (issue 16): a host configuration or runtime profile nested
//! 20 000 or 100 000 levels deep, of every kind; documents over their size; audit lines over
//! the line limit or nested past the JSON parser's depth; statements likewise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use palisade_formats::audit::{self, AuditLine};
use palisade_formats::hostconfig::{self, HostConfigError};
use palisade_formats::{profiles, statement};

/// Values nested `levels` deep, each kind of nesting the YAML reader counts.
fn deep_values(levels: usize) -> Vec<(&'static str, String)> {
    vec![
        (
            "flow sequences",
            format!("{}{}", "[".repeat(levels), "]".repeat(levels)),
        ),
        ("open flow sequences", "[".repeat(levels)),
        (
            "flow mappings",
            format!("{}x{}", "{a: ".repeat(levels), "}".repeat(levels)),
        ),
        ("flow pairs", format!("[{}x", "[a: ".repeat(levels))),
        ("block sequences", format!("\n    {}x", "- ".repeat(levels))),
        ("complex keys", format!("\n    {}x", "? ".repeat(levels))),
        (
            "sequences of keys",
            format!("\n    {}x", "- ? ".repeat(levels)),
        ),
        (
            "anchored and tagged",
            format!("{}x", "&a !t [".repeat(levels)),
        ),
    ]
}

#[test]
fn a_deep_host_configuration_is_invalid_at_document() {
    for levels in [20_000, 100_000] {
        for (kind, value) in deep_values(levels) {
            let text = format!(
                "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec:\n  writableRoots: {value}\n"
            );
            // Over 64 KiB is refused for its size first; under it, for its depth.
            let expected = if text.len() > 64 * 1024 {
                "is larger than 65536 bytes"
            } else {
                "nest deeper than 64 levels"
            };
            match hostconfig::parse(&text, "host.yaml") {
                Err(HostConfigError::Invalid { errors, .. }) => {
                    assert_eq!(errors[0].path, "document", "{kind} {levels}");
                    assert!(
                        errors[0].message.contains(expected),
                        "{kind} {levels}: {errors:?}"
                    );
                }
                other => panic!("{kind} {levels}: {other:?}"),
            }
        }
    }
    // 20 000 levels fit in 64 KiB only as `[`: that one is refused for its depth.
    let text = format!(
        "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec:\n  writableRoots: {}\n",
        "[".repeat(20_000)
    );
    let Err(HostConfigError::Invalid { errors, .. }) = hostconfig::parse(&text, "h") else {
        panic!("accepted");
    };
    assert!(
        errors[0].message.contains("nest deeper than 64"),
        "{errors:?}"
    );
}

#[test]
fn deep_runtime_profiles_are_invalid_at_document() {
    for levels in [20_000, 100_000] {
        for (kind, value) in deep_values(levels) {
            let text = format!(
                "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata: {{name: x}}\nspec:\n  runtimeProfiles: {value}\n"
            );
            let errors = profiles::parse(&text).unwrap_err().into_listed();
            assert_eq!(errors[0].path, "document", "{kind} {levels}");
            assert!(
                errors[0].message.contains("nest deeper than 64 levels"),
                "{kind} {levels}: {errors:?}"
            );
        }
    }
    let big = format!(
        "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata: {{name: x}}\nspec:\n  x: \"{}\"\n",
        "a".repeat(profiles::MAX_BYTES as usize)
    );
    let errors = profiles::parse(&big).unwrap_err().into_listed();
    assert_eq!(errors[0].path, "document");
    assert!(errors[0].message.contains("larger than 1048576 bytes"));
}

#[test]
fn audit_lines_are_bounded_and_reported_in_place() {
    let record = "{\"schemaVersion\":\"x\"}";
    let long = "y".repeat(300);
    let text = format!("{record}\n{long}\n\n  \n\u{0}\n{record}\r\n");
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(b"\xff\xfe\n");
    bytes.extend_from_slice(record.as_bytes());
    let lines = audit::read_lines(bytes.as_slice(), 256).unwrap();
    let numbers: Vec<usize> = lines.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, [1, 2, 5, 6, 7, 8]);
    assert_eq!(lines[0].1.as_deref(), Ok(record));
    assert_eq!(
        lines[1].1.as_ref().unwrap_err(),
        "line 2 is longer than 256 bytes"
    );
    assert_eq!(lines[3].1.as_deref(), Ok(record), "CRLF is one line end");
    assert!(lines[4].1.as_ref().unwrap_err().contains("not valid utf-8"));
    assert_eq!(
        lines[5].1.as_deref(),
        Ok(record),
        "the last line needs no newline"
    );
}

#[test]
fn deep_json_lines_and_statements_are_refused_quickly() {
    // Refused by the JSON parser's 128 levels, never by the stack or after building the value.
    for levels in [20_000, 100_000] {
        let deep = format!("{}1{}", "{\"a\":[".repeat(levels), "]}".repeat(levels));
        let AuditLine::Decision(record) = audit::parse_line(&format!("{{\"input\":{deep}}}"))
        else {
            panic!("read as an outcome");
        };
        let reason = record.unwrap_err();
        assert!(reason.contains("recursion limit exceeded"), "{reason}");
        // A statement keeps its predicate as raw text (skipped without recursion); the record
        // in it is then refused like any audit line.
        let text = format!(
            "{{\"_type\":\"{}\",\"subject\":[{{\"name\":\"{}\",\"digest\":{{\"sha256\":\"00\"}}}}],\"predicateType\":\"{}\",\"predicate\":{{\"input\":{deep}}}}}",
            statement::IN_TOTO_STATEMENT_TYPE,
            statement::SUBJECT_NAME,
            statement::PREDICATE_TYPE
        );
        let read = statement::parse(&text).unwrap();
        let reason = audit::parse_record(read.predicate.get()).unwrap_err();
        assert!(reason.contains("recursion limit exceeded"), "{reason}");
    }
}

/// Found by the `audit_records` fuzz target: the JSON parser's message quotes the text, so an
/// audit line with an unknown key holding a newline gave a two-line reason, and `palisade
/// replay` printed it as two lines — an audit file could forge a `REPRODUCED` line in the report.
#[test]
fn reasons_for_unreadable_lines_are_one_line() {
    let forged = "x`\nREPRODUCED line 9 sha256:00\n";
    for text in [
        format!("{{{}:1}}", serde_json::to_string(forged).unwrap()),
        format!(
            "{{\"schemaVersion\":\"{}\",{}:1}}",
            audit::OUTCOME_SCHEMA_VERSION,
            serde_json::to_string(forged).unwrap()
        ),
    ] {
        let AuditLine::Decision(record) = audit::parse_line(&text) else {
            panic!("read as an outcome");
        };
        let reason = record.unwrap_err();
        assert!(!reason.chars().any(char::is_control), "{reason:?}");
        assert!(reason.contains("REPRODUCED line 9"), "{reason:?}");
    }
    for text in [
        format!("{{{}:1}}", serde_json::to_string(forged).unwrap()),
        format!(
            "{{\"_type\":{},\"subject\":[],\"predicateType\":\"p\",\"predicate\":1}}",
            serde_json::to_string(forged).unwrap()
        ),
    ] {
        let reason = statement::parse(&text).unwrap_err();
        assert!(!reason.chars().any(char::is_control), "{reason:?}");
    }
}
