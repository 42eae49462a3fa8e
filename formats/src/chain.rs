//! The audit file's hash chain: every line carries the SHA-256 of the line before it in the same
//! file and its position in the chain, so that a line changed, removed, inserted or moved is
//! found, with where and how (`palisade replay`).
//!
//! Why a chain: replay proves a decision follows from its recorded input, not that the record is
//! the one Palisade wrote or that none is missing. A chain makes every line vouch for the one
//! before it (as AWS CloudTrail's digest files chain its log files): rewriting one record means
//! rewriting every record after it. What a chain alone cannot show: a cut-off tail (nothing
//! follows the last line), or a file rewritten from some line on by someone who can write it —
//! those need a checkpoint kept elsewhere, or signatures.
//!
//! The link is computed under the file lock from the file's last line ([`link_after`]), so
//! concurrent runs appending to one file keep one chain. Lines written before chaining existed
//! carry no link; the first chained line after them links to the last of them with `seq` 1.

use palisade_engine::output::sha256_hex;
use serde::{Deserialize, Serialize};

use crate::audit::LineText;

/// What `prev` holds for the first line of a file.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Where a line stands in its file's chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChainLink {
    /// 1 for the first chained line, then one more for each line.
    pub seq: u64,
    /// Lower-case hex SHA-256 of the previous line's bytes (without its newline), or
    /// [`GENESIS`] for the first line of the file.
    pub prev: String,
}

/// Just the link of a line, whatever else it holds.
#[derive(Deserialize)]
struct LinkOnly {
    #[serde(default)]
    chain: Option<ChainLink>,
}

/// The link of a line's text, if it has one (and is JSON at all).
pub fn link_of(text: &str) -> Option<ChainLink> {
    serde_json::from_str::<LinkOnly>(text).ok()?.chain
}

/// The link for a line appended after `last` (the file's last line, without its newline; `None`
/// for an empty file).
pub fn link_after(last: Option<&[u8]>) -> ChainLink {
    match last {
        None => ChainLink {
            seq: 1,
            prev: GENESIS.to_owned(),
        },
        Some(bytes) => ChainLink {
            seq: std::str::from_utf8(bytes)
                .ok()
                .and_then(link_of)
                .map_or(1, |link| link.seq.saturating_add(1)),
            prev: sha256_hex(bytes),
        },
    }
}

/// How the chain breaks at a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BreakKind {
    /// The line before is not the one this line was written after: its bytes changed.
    Changed,
    /// Lines before this one are not in the chain: this line follows an earlier one.
    Inserted,
    /// Records this line's position says came before it are gone.
    Removed,
    /// This line follows a line that now comes after it.
    Reordered,
    /// The link is well formed and names the line before, with the wrong position: forged.
    Forged,
    /// A line without a link (or unreadable) after chained ones.
    Unchained,
    /// The checkpoint names a line the file no longer has: its tail was cut off.
    Cut,
}

impl BreakKind {
    /// The kind's name (`changed`, `inserted`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            BreakKind::Changed => "changed",
            BreakKind::Inserted => "inserted",
            BreakKind::Removed => "removed",
            BreakKind::Reordered => "reordered",
            BreakKind::Forged => "forged",
            BreakKind::Unchained => "unchained",
            BreakKind::Cut => "cut",
        }
    }
}

/// One place the chain breaks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainBreak {
    /// The 1-based line where it was found.
    pub line: usize,
    pub kind: BreakKind,
    /// What was found, in one line.
    pub detail: String,
}

/// The verdict on a file's chain.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainReport {
    /// Lines that carry a link.
    pub chained: usize,
    /// The last chained line's `seq`.
    pub last_seq: Option<u64>,
    /// Every break, in file order; the first is where the file stops being trustworthy.
    pub breaks: Vec<ChainBreak>,
}

/// The version of the checkpoint file format.
pub const CHECKPOINT_SCHEMA_VERSION: &str = "palisade.checkpoint/v1";

/// The head of an audit file's chain, written apart from it after every append
/// (`--checkpoint FILE`): a file cut back to before this line is found by it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checkpoint {
    pub schema_version: String,
    /// The audit file it was written for, as named.
    pub audit: String,
    /// The `seq` of the last line appended.
    pub seq: u64,
    /// Lower-case hex SHA-256 of that line's bytes.
    pub sha256: String,
}

/// Where a file's lines disagree with a checkpoint of it, if they do: the line `seq` names
/// must be there with the recorded bytes.
pub fn verify_checkpoint(
    lines: &[(usize, LineText)],
    checkpoint: &Checkpoint,
) -> Option<ChainBreak> {
    let mut last: Option<(usize, u64)> = None;
    for (line, text) in lines {
        let Ok(text) = text else { continue };
        let Some(link) = link_of(text) else { continue };
        if link.seq == checkpoint.seq {
            if sha256_hex(text.as_bytes()) == checkpoint.sha256 {
                return None;
            }
            return Some(ChainBreak {
                line: *line,
                kind: BreakKind::Changed,
                detail: format!(
                    "the checkpoint's line (seq {}) has other bytes than when it was written",
                    checkpoint.seq
                ),
            });
        }
        last = Some((*line, link.seq));
    }
    let (line, seq) = last.unwrap_or((0, 0));
    Some(ChainBreak {
        line,
        kind: BreakKind::Cut,
        detail: format!(
            "the file ends at seq {seq}, and the checkpoint names seq {}: its tail was cut off",
            checkpoint.seq
        ),
    })
}

/// Verifies the chain over every line of a file, as [`crate::audit::read_lines`] read them.
pub fn verify(lines: &[(usize, LineText)]) -> ChainReport {
    let hashes: Vec<Option<String>> = lines
        .iter()
        .map(|(_, text)| text.as_ref().ok().map(|t| sha256_hex(t.as_bytes())))
        .collect();
    let position_of = |hash: &str| hashes.iter().position(|h| h.as_deref() == Some(hash));
    let mut report = ChainReport::default();
    let mut prev_hash: Option<String> = Some(GENESIS.to_owned());
    let mut prev_seq: Option<u64> = None;
    for (index, (line, text)) in lines.iter().enumerate() {
        let link = text.as_ref().ok().and_then(|t| link_of(t));
        let Some(link) = link else {
            if report.chained > 0 {
                report.breaks.push(ChainBreak {
                    line: *line,
                    kind: BreakKind::Unchained,
                    detail: String::from(
                        "a line without a chain link after chained ones: inserted, or unreadable",
                    ),
                });
            }
            prev_hash = hashes.get(index).cloned().flatten();
            prev_seq = None;
            continue;
        };
        report.chained += 1;
        let expected_seq = prev_seq.map_or(1, |seq| seq.saturating_add(1));
        let follows = prev_hash.as_deref() == Some(link.prev.as_str());
        if !(follows && link.seq == expected_seq) {
            let before = index.checked_sub(1).and_then(|i| lines.get(i)).map(|l| l.0);
            let at = position_of(&link.prev);
            let copy_of = hashes
                .iter()
                .take(index)
                .position(|h| h.is_some() && *h == hashes.get(index).cloned().flatten());
            let (kind, detail) = if let Some(k) = copy_of {
                (
                    BreakKind::Inserted,
                    format!("it is a copy of line {}", lines.get(k).map_or(0, |l| l.0)),
                )
            } else if follows {
                (
                    BreakKind::Forged,
                    format!(
                        "its position is seq {} where {expected_seq} was due",
                        link.seq
                    ),
                )
            } else if let Some(k) = at.filter(|&k| k + 1 < index) {
                let first = lines.get(k + 1).map_or(0, |l| l.0);
                (
                    BreakKind::Inserted,
                    format!(
                        "it follows line {}: lines {first} to {} are not in the chain",
                        lines.get(k).map_or(0, |l| l.0),
                        before.unwrap_or(0)
                    ),
                )
            } else if let Some(k) = at.filter(|&k| k > index) {
                (
                    BreakKind::Reordered,
                    format!(
                        "it follows line {}, which comes after it",
                        lines.get(k).map_or(0, |l| l.0)
                    ),
                )
            } else if link.prev == GENESIS {
                (
                    BreakKind::Inserted,
                    String::from("it claims to be the first line of the file, and is not"),
                )
            } else if link.seq < expected_seq {
                (
                    BreakKind::Inserted,
                    format!(
                        "its position, seq {}, comes before the line before it (seq {})",
                        link.seq,
                        expected_seq - 1
                    ),
                )
            } else if link.seq > expected_seq {
                (
                    BreakKind::Removed,
                    format!(
                        "{} records before it are missing (seq {expected_seq} to {})",
                        link.seq - expected_seq,
                        link.seq - 1
                    ),
                )
            } else {
                (
                    BreakKind::Changed,
                    match before {
                        Some(before) => format!(
                            "line {before} is not the line it was written after: its bytes changed"
                        ),
                        None => String::from("it claims a line before it, and it is the first"),
                    },
                )
            };
            report.breaks.push(ChainBreak {
                line: *line,
                kind,
                detail,
            });
        }
        prev_hash = hashes.get(index).cloned().flatten();
        prev_seq = Some(link.seq);
        report.last_seq = Some(link.seq);
    }
    report
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    /// A chained file of `n` lines, each `{"n":i,"chain":...}`.
    fn file(n: usize) -> Vec<String> {
        let mut lines: Vec<String> = Vec::new();
        for i in 0..n {
            let link = link_after(lines.last().map(String::as_bytes));
            lines.push(serde_json::json!({"n": i, "chain": link}).to_string());
        }
        lines
    }

    fn check(lines: &[String]) -> ChainReport {
        let numbered: Vec<(usize, LineText)> = lines
            .iter()
            .enumerate()
            .map(|(i, l)| (i + 1, Ok(l.clone())))
            .collect();
        verify(&numbered)
    }

    fn first(lines: &[String]) -> (usize, BreakKind) {
        let report = check(lines);
        let b = &report.breaks[0];
        (b.line, b.kind)
    }

    #[test]
    fn an_untouched_file_verifies() {
        let report = check(&file(20));
        assert!(report.breaks.is_empty(), "{report:?}");
        assert_eq!((report.chained, report.last_seq), (20, Some(20)));
    }

    #[test]
    fn each_tampering_is_named_where_it_happens() {
        let original = file(20);
        let mut changed = original.clone();
        changed[9] = changed[9].replace("\"n\":9", "\"n\":99");
        assert_eq!(first(&changed), (11, BreakKind::Changed));

        let mut removed = original.clone();
        removed.remove(9);
        assert_eq!(first(&removed), (10, BreakKind::Removed));

        let mut inserted = original.clone();
        inserted.insert(10, original[3].clone());
        assert_eq!(first(&inserted), (11, BreakKind::Inserted));
        assert!(check(&inserted).breaks[0].detail.contains("copy of line 4"));
        let mut forged = original.clone();
        // A forged line that links correctly to the one before it: the next line does not.
        let link = link_after(Some(forged[9].as_bytes()));
        forged.insert(
            10,
            serde_json::json!({"n": "forged", "chain": link}).to_string(),
        );
        assert_eq!(first(&forged), (12, BreakKind::Inserted));

        let mut swapped = original.clone();
        swapped.swap(9, 10);
        assert_eq!(first(&swapped), (10, BreakKind::Reordered));

        let mut unchained = original.clone();
        unchained.insert(5, "{\"n\":\"plain\"}".to_owned());
        assert_eq!(first(&unchained), (6, BreakKind::Unchained));

        let mut first_again = original.clone();
        first_again.insert(
            5,
            serde_json::json!({"n": "x", "chain": link_after(None)}).to_string(),
        );
        assert_eq!(first(&first_again), (6, BreakKind::Inserted));

        let mut reseq = original.clone();
        let mut value: serde_json::Value = serde_json::from_str(&reseq[0]).unwrap();
        value["chain"]["seq"] = 7.into();
        reseq[0] = value.to_string();
        assert_eq!(first(&reseq), (1, BreakKind::Forged));
    }

    #[test]
    fn a_checkpoint_finds_a_cut_tail_and_a_changed_head() {
        let lines = file(10);
        let checkpoint = Checkpoint {
            schema_version: CHECKPOINT_SCHEMA_VERSION.to_owned(),
            audit: String::from("a.jsonl"),
            seq: 10,
            sha256: sha256_hex(lines[9].as_bytes()),
        };
        let numbered = |lines: &[String]| -> Vec<(usize, LineText)> {
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| (i + 1, Ok(l.clone())))
                .collect()
        };
        assert_eq!(verify_checkpoint(&numbered(&lines), &checkpoint), None);
        let cut = verify_checkpoint(&numbered(&lines[..7]), &checkpoint).unwrap();
        assert_eq!((cut.line, cut.kind), (7, BreakKind::Cut));
        let mut changed = lines.clone();
        changed[9] = changed[9].replace("\"n\":9", "\"n\":90");
        let changed = verify_checkpoint(&numbered(&changed), &checkpoint).unwrap();
        assert_eq!((changed.line, changed.kind), (10, BreakKind::Changed));
        // The chain alone cannot see the cut.
        assert!(check(&lines[..7]).breaks.is_empty());
    }

    #[test]
    fn lines_before_chaining_are_linked_to_and_not_blamed() {
        let mut lines = vec!["{\"old\":1}".to_owned(), "{\"old\":2}".to_owned()];
        for i in 0..3 {
            let link = link_after(lines.last().map(String::as_bytes));
            lines.push(serde_json::json!({"n": i, "chain": link}).to_string());
        }
        let report = check(&lines);
        assert!(report.breaks.is_empty(), "{report:?}");
        assert_eq!((report.chained, report.last_seq), (3, Some(3)));
    }
}
