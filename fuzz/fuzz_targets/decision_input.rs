//! The decision input JSON (`decide --input`, `decide-json`, every replayed record): text → the
//! engine's decision.
//!
//! Asserts: no panic; text that parses as a `DecisionInput` decides exactly as the typed entry
//! point does on the parsed value (and then every property of `check_outcome`); text that does
//! not is refused with `HOST_FACTS_INVALID` at path `input`, with a one-line message and the
//! raw text's digest as `inputDigest`; the output stays within a bound linear in the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use palisade_engine::{DecisionInput, RefusalCode, Verdict};
use palisade_fuzz::{check_field_errors, check_outcome, corpus_inputs, write_seeds};

fuzz_target!(
    init: {
        write_seeds(corpus_inputs().iter().map(|i| i.to_string().into_bytes()));
    },
    |data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let from_json = palisade_engine::decide_json(text);
        let limit = 16 * text.len() + 256 * 1024;
        match serde_json::from_str::<DecisionInput>(text) {
            Ok(parsed) => {
                let typed = palisade_engine::decide(&parsed);
                assert!(typed == from_json, "decide_json differs from decide on the parsed input");
                check_outcome(&parsed, &typed, limit);
            }
            Err(_) => {
                let Verdict::Refusal { code, errors, .. } = &from_json.verdict else {
                    panic!("unparsable input decided: {}", from_json.canonical_json);
                };
                assert_eq!(*code, RefusalCode::HostFactsInvalid);
                assert_eq!(errors.len(), 1);
                assert_eq!(errors[0].path, "input");
                check_field_errors(errors);
                let report: serde_json::Value =
                    serde_json::from_str(&from_json.canonical_json).expect("canonical JSON");
                assert_eq!(
                    report["inputDigest"],
                    palisade_engine::output::sha256_hex(text.as_bytes())
                );
                assert!(from_json.canonical_json.len() <= limit);
            }
        }
    }
);
