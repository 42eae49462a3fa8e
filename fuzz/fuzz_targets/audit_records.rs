//! What `palisade replay` reads: audit file lines (decision records and run outcomes), in-toto
//! statements, and the splitting of a file into bounded lines (`palisade_formats::audit`,
//! `palisade_formats::statement`).
//!
//! Asserts: no panic; a line that is no record is reported with a one-line reason (replay calls
//! it INVALID); a record read back, written again and read again is the same record; exporting a
//! record as a statement and reading the statement back gives the record's line and output digest
//! (one verification path); a statement that is refused says why in one line; splitting never
//! returns a line longer than the limit or with a line break inside, in increasing line order.
//! The first byte picks the reader: 0 a line, 1 a statement, other a whole file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use palisade_formats::audit::{self, AuditLine};
use palisade_formats::statement;
use palisade_fuzz::{FIXTURE_RECORDS, one_line, write_seeds};

/// A small line limit, so the fuzzer reaches the too-long path.
const MAX: usize = 256;

fuzz_target!(
    init: {
        let mut seeds = Vec::new();
        for line in FIXTURE_RECORDS.lines().filter(|l| !l.trim().is_empty()) {
            seeds.push([&[0u8][..], line.as_bytes()].concat());
            if let Ok(record) = audit::parse_record(line)
                && let Ok(statement) = statement::statement_for(line, &record)
            {
                seeds.push([&[1u8][..], statement.as_bytes()].concat());
            }
        }
        seeds.push([&[2u8][..], FIXTURE_RECORDS.as_bytes()].concat());
        write_seeds(seeds);
    },
    |data: &[u8]| {
        let Some((&selector, rest)) = data.split_first() else {
            return;
        };
        match selector {
            0 => {
                let Ok(text) = std::str::from_utf8(rest) else {
                    return;
                };
                match audit::parse_line(text) {
                    AuditLine::Decision(record) => match *record {
                        Err(reason) => {
                            assert!(!reason.is_empty());
                            one_line(&reason);
                        }
                        Ok(record) => {
                            let again = serde_json::to_string(&record).expect("a record serializes");
                            let reread = audit::parse_record(&again).expect("a written record reads");
                            assert_eq!(serde_json::to_string(&reread).ok(), Some(again));
                            let exported = statement::statement_for(text, &record)
                                .expect("a record's line exports");
                            let read = statement::parse(&exported).expect("an export reads back");
                            assert_eq!(read.subject_sha256, record.output_digest);
                            assert_eq!(read.predicate.get(), text.trim());
                        }
                    },
                    AuditLine::Outcome(outcome) => {
                        assert_eq!(outcome.schema_version, audit::OUTCOME_SCHEMA_VERSION);
                    }
                    AuditLine::Seal(Err(reason)) => {
                        assert!(!reason.is_empty());
                        one_line(&reason);
                    }
                    AuditLine::Seal(Ok(seal)) => {
                        // A seal read from anywhere checks against any line without panicking.
                        let _ = palisade_formats::seal::verify(&seal, text, &[]);
                    }
                }
            }
            1 => {
                let Ok(text) = std::str::from_utf8(rest) else {
                    return;
                };
                match statement::parse(text) {
                    Err(reason) => one_line(&reason),
                    Ok(read) => {
                        assert!(serde_json::from_str::<serde_json::Value>(read.predicate.get()).is_ok());
                    }
                }
            }
            _ => {
                let lines = audit::read_lines(rest, MAX).expect("reading memory cannot fail");
                let mut last = 0;
                for (number, line) in &lines {
                    assert!(*number > last);
                    last = *number;
                    match line {
                        Ok(text) => {
                            assert!(text.len() <= MAX);
                            assert!(!text.contains('\n'));
                            assert!(!text.trim().is_empty());
                        }
                        Err(reason) => one_line(reason),
                    }
                }
                assert!(last <= rest.iter().filter(|b| **b == b'\n').count() + 1);
            }
        }
    }
);
