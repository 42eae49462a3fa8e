//! The taskpack front end: a document (or a task contract) → the engine's decision.
//!
//! Asserts, for every input: no panic; the typed (`decide`) and JSON (`decide_json`) entry
//! points give the same verdict, canonical JSON and digest; a refusal has a code and (for an
//! invalid document) every offending field with a path and a one-line message; a decision's
//! backend is available and provides every requirement; the output stays within a bound linear
//! in the input. Time and memory per input are bounded by libFuzzer (`-timeout`,
//! `-rss_limit_mb` in `fuzz/run.sh`). The first byte picks the field: even, the taskpack;
//! odd, the task contract (with the fixture taskpack).
#![no_main]

use libfuzzer_sys::fuzz_target;
use palisade_fuzz::{
    FIXTURE_TASKPACK, check_outcome, corpus_contracts, corpus_documents, host_input, write_seeds,
};

fuzz_target!(
    init: {
        let documents = corpus_documents().into_iter().map(|d| [&[0u8][..], d.as_bytes()].concat());
        let contracts = corpus_contracts().into_iter().map(|c| [&[1u8][..], c.as_bytes()].concat());
        write_seeds(documents.chain(contracts));
    },
    |data: &[u8]| {
        let Some((&selector, text)) = data.split_first() else {
            return;
        };
        // Only UTF-8 reaches the engine: the CLI refuses other bytes first.
        let Ok(text) = std::str::from_utf8(text) else {
            return;
        };
        let input = if selector % 2 == 0 {
            host_input(Some(text.to_owned()), None)
        } else {
            host_input(Some(FIXTURE_TASKPACK.to_owned()), Some(text.to_owned()))
        };
        let outcome = palisade_engine::decide(&input);
        check_outcome(&input, &outcome, 16 * text.len() + 256 * 1024);
    }
);
