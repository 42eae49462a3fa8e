//! The linear nesting count every YAML document gets before the parser
//! (`palisade_engine::yaml::check_nesting`), against libyaml's own events.
//!
//! libyaml (through serde_yaml) is the parser the engine uses; here it is driven directly, so
//! every collection it opens is seen, with no depth limit of its own. Asserts: no panic; if the
//! count lets a document through, libyaml never has more than `MAX_DEPTH` collections open
//! (nothing deep reaches the parser, so its time and memory stay linear); and if libyaml reads a
//! whole document with at most `MAX_DEPTH` open, the count lets it through (no valid, shallow
//! document is refused). Seeds: the corpus taskpacks, nesting that is almost too deep, and the
//! documents this target found (`engine/tests/nesting/`, each also a unit test of the count).
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::fuzz_target;
use palisade_engine::yaml::{MAX_DEPTH, check_nesting};
use palisade_fuzz::{corpus_documents, write_seeds};
use unsafe_libyaml::{
    YAML_MAPPING_END_EVENT, YAML_MAPPING_START_EVENT, YAML_SEQUENCE_END_EVENT,
    YAML_SEQUENCE_START_EVENT, YAML_STREAM_END_EVENT, yaml_event_delete, yaml_event_t,
    yaml_parser_delete, yaml_parser_initialize, yaml_parser_parse, yaml_parser_set_input_string,
    yaml_parser_t,
};

/// The most collections libyaml had open at once while reading `text`, and whether it read the
/// whole stream without an error.
fn libyaml_depth(text: &[u8]) -> (usize, bool) {
    let mut parser = MaybeUninit::<yaml_parser_t>::uninit();
    // SAFETY: libyaml's C API, used as its documentation says: the parser is initialized before
    // use and deleted after; `text` outlives the parser; each event is deleted after reading.
    unsafe {
        if yaml_parser_initialize(parser.as_mut_ptr()).fail {
            return (0, false);
        }
        let parser = parser.as_mut_ptr();
        yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as _);
        let (mut depth, mut deepest, mut complete) = (0usize, 0usize, false);
        loop {
            let mut event = MaybeUninit::<yaml_event_t>::uninit();
            if yaml_parser_parse(parser, event.as_mut_ptr()).fail {
                break;
            }
            let event = event.as_mut_ptr();
            let kind = (*event).type_;
            if kind == YAML_SEQUENCE_START_EVENT || kind == YAML_MAPPING_START_EVENT {
                depth += 1;
                deepest = deepest.max(depth);
            } else if kind == YAML_SEQUENCE_END_EVENT || kind == YAML_MAPPING_END_EVENT {
                depth = depth.saturating_sub(1);
            }
            yaml_event_delete(event);
            if kind == YAML_STREAM_END_EVENT {
                complete = true;
                break;
            }
        }
        yaml_parser_delete(parser);
        (deepest, complete)
    }
}

fuzz_target!(
    init: {
        let mut seeds: Vec<Vec<u8>> = corpus_documents().into_iter().map(String::into_bytes).collect();
        for (unit, tail) in [("[", "]"), ("{a: ", "}"), ("- ", ""), ("? ", ""), ("[a: ", "]"), ("- ? ", "")] {
            seeds.push(format!("{}x{}", unit.repeat(MAX_DEPTH - 1), tail.repeat(MAX_DEPTH - 1)).into_bytes());
        }
        // Keys that are collections: libyaml opens their mapping around them at the `:`.
        let key = format!("{}{}", "[".repeat(MAX_DEPTH - 1), "]".repeat(MAX_DEPTH - 1));
        seeds.push(format!("{key}: x\n").into_bytes());
        seeds.push(format!("[{key} y: x]\n").into_bytes());
        seeds.push(include_bytes!("../../engine/tests/nesting/fuzz-nested-flow-keys.yaml").to_vec());
        seeds.push(include_bytes!("../../engine/tests/nesting/fuzz-byte-order-mark-line.yaml").to_vec());
        let indented: String = (0..MAX_DEPTH).map(|n| format!("{}k:\n", " ".repeat(n))).collect();
        seeds.push(indented.into_bytes());
        write_seeds(seeds);
    },
    |data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let counted = check_nesting(text);
        let (deepest, complete) = libyaml_depth(data);
        if counted.is_ok() {
            assert!(
                deepest <= MAX_DEPTH,
                "the count let through a document libyaml nests {deepest} deep"
            );
        }
        if complete && deepest <= MAX_DEPTH {
            assert!(
                counted.is_ok(),
                "the count refused a valid document libyaml nests only {deepest} deep: {counted:?}"
            );
        }
    }
);
