//! The decision cache (#38): the engine is a pure function, so the same input to the same
//! component always gives the same bytes — a decision made once is read back instead of made
//! again, without starting wasmtime.
//!
//! - Key: SHA-256 over the component's digest and the input's canonical JSON (the `input` an
//!   audit record holds). Value: the decision's canonical JSON, its digest, and the engine's
//!   identity (versions, determinism settings) for the record.
//! - One file per key in `decisions/` of the caches' directory (0700), written whole to a private
//!   temp file and renamed; at most [`MAX_ENTRIES`] (once over it, the oldest go until
//!   [`TRIMMED_ENTRIES`] remain).
//! - Verified on every read: the key, the digest of the bytes, this component's digest and this
//!   build's determinism settings. An entry that fails is ignored (said once on stderr), decided
//!   afresh and rewritten.
//! - Only decisions are kept: a refusal is decided afresh each time (it launches nothing, and its
//!   failure report needs the engine's typed answer).
//!
//! The audit record of a cached decision is byte for byte that of an uncached one (the record's
//! `context` aside, which varies by construction): `palisade replay` reproduces it with the
//! engine as before.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use palisade_engine::output::{ConfinementPlan, sha256_hex};
use palisade_engine::{Outcome, Verdict};
use serde::{Deserialize, Serialize};

use crate::audit::EngineIdentity;

/// The entry format.
pub const ENTRY_SCHEMA_VERSION: &str = "palisade.decision-cache/v1";

/// The most entries kept; the oldest (by modification time) go first.
pub const MAX_ENTRIES: usize = 1000;

/// How many entries a trim keeps: a tenth below [`MAX_ENTRIES`], so that a full cache is
/// trimmed once per hundred new entries rather than at every one.
pub const TRIMMED_ENTRIES: usize = MAX_ENTRIES - MAX_ENTRIES / 10;

/// The largest entry read (a decision's canonical JSON is tens of KB).
const MAX_ENTRY_BYTES: u64 = 4 * 1024 * 1024;

/// One cached decision.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    schema_version: String,
    key: String,
    engine: EngineIdentity,
    canonical_json: String,
    digest: String,
}

/// A decision read from the cache: the outcome and the engine that made it.
pub struct Hit {
    pub outcome: Outcome,
    pub engine: EngineIdentity,
}

/// The cache in one directory.
pub struct DecisionCache {
    dir: PathBuf,
}

/// The key of an input for a component.
pub fn key(component_sha256: &str, input: &serde_json::Value) -> String {
    let canonical = palisade_engine::output::canonical_json(input);
    let mut bytes = Vec::with_capacity(component_sha256.len() + 1 + canonical.len());
    bytes.extend_from_slice(component_sha256.as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(canonical.as_bytes());
    sha256_hex(&bytes)
}

impl DecisionCache {
    /// The cache in `decisions/` of the caches' directory.
    pub fn in_caches(caches: &Path) -> DecisionCache {
        DecisionCache {
            dir: caches.join("decisions"),
        }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The decision cached under `key`, made by the engine `expected` (its component digest and
    /// determinism settings); `Err` says why an entry that is there was not used.
    pub fn get(&self, key: &str, expected: &EngineIdentity) -> Result<Option<Hit>, String> {
        let path = self.path(key);
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read `{}`: {e}", path.display())),
        };
        // Sized from the file, bounded: one read rather than 32 bytes doubled again and again.
        let size = file
            .metadata()
            .map_or(0, |meta| meta.len())
            .min(MAX_ENTRY_BYTES);
        let mut text = String::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
        file.take(MAX_ENTRY_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
        let entry: Entry = serde_json::from_str(&text)
            .map_err(|e| format!("`{}` is not a cache entry: {e}", path.display()))?;
        let problem = if entry.schema_version != ENTRY_SCHEMA_VERSION {
            Some("another format")
        } else if entry.key != key {
            Some("it names another key")
        } else if sha256_hex(entry.canonical_json.as_bytes()) != entry.digest {
            Some("its bytes are not the ones its digest names")
        } else if entry.engine != *expected {
            Some("another engine or other determinism settings made it")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(format!("`{}` not used: {problem}", path.display()));
        }
        let plan = plan_of(&entry.canonical_json)
            .map_err(|e| format!("`{}` not used: {e}", path.display()))?;
        Ok(Some(Hit {
            outcome: Outcome {
                verdict: Verdict::Decision(Box::new(plan)),
                canonical_json: entry.canonical_json,
                digest: entry.digest,
            },
            engine: entry.engine,
        }))
    }

    /// Keeps a decision under `key` (refusals are not kept). Best effort: a cache that cannot
    /// be written costs the next run a decision, nothing else.
    pub fn put(&self, key: &str, engine: &EngineIdentity, outcome: &Outcome) -> Result<(), String> {
        if !matches!(outcome.verdict, Verdict::Decision(_)) {
            return Ok(());
        }
        let entry = Entry {
            schema_version: ENTRY_SCHEMA_VERSION.to_owned(),
            key: key.to_owned(),
            engine: engine.clone(),
            canonical_json: outcome.canonical_json.clone(),
            digest: outcome.digest.clone(),
        };
        let text = serde_json::to_string(&entry).map_err(|e| e.to_string())?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| format!("cannot create `{}`: {e}", self.dir.display()))?;
        let path = self.path(key);
        let temp = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut file| file.write_all(text.as_bytes()))
            .and_then(|()| std::fs::rename(&temp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(format!("cannot write `{}`: {e}", path.display()));
        }
        self.trim();
        Ok(())
    }

    /// Keeps at most [`MAX_ENTRIES`]: once over it, the oldest go until [`TRIMMED_ENTRIES`]
    /// remain.
    fn trim(&self) {
        self.trim_to(MAX_ENTRIES, TRIMMED_ENTRIES);
    }

    /// Once there are more than `max` entries, removes the oldest until `keep` remain. Every
    /// decision that misses ends here, so the usual case — not over the bound — costs one
    /// listing of names (a few `getdents` calls for a full cache); only a cache over the bound
    /// has its entries' times read (one `statx` each: 3.6 ms for a thousand, measured), and
    /// trimming to `keep` below the bound makes that once in `max - keep` misses, not at each
    /// one of a full cache.
    fn trim_to(&self, max: usize, keep: usize) {
        let Ok(read) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let names: Vec<std::fs::DirEntry> = read
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .collect();
        if names.len() <= max {
            return;
        }
        let mut entries: Vec<(std::time::SystemTime, PathBuf)> = names
            .into_iter()
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        entries.sort();
        let excess = entries.len().saturating_sub(keep.min(max));
        for (_, path) in entries.into_iter().take(excess) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The typed plan of a decision's canonical JSON.
fn plan_of(canonical_json: &str) -> Result<ConfinementPlan, String> {
    #[derive(Deserialize)]
    struct PlanOnly {
        outcome: String,
        plan: ConfinementPlan,
    }
    let read: PlanOnly =
        serde_json::from_str(canonical_json).map_err(|e| format!("its plan does not read: {e}"))?;
    if read.outcome != "decision" {
        return Err(String::from("it is not a decision"));
    }
    Ok(read.plan)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn the_key_moves_with_the_engine_and_with_any_input_byte() {
        let input = serde_json::json!({"a": 1, "b": "x"});
        let k = key("c1", &input);
        assert_eq!(k, key("c1", &serde_json::json!({"b": "x", "a": 1})));
        assert_ne!(k, key("c2", &input));
        assert_ne!(k, key("c1", &serde_json::json!({"a": 1, "b": "y"})));
    }

    #[test]
    fn trimming_removes_the_oldest_entries_beyond_the_bound_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DecisionCache::in_caches(dir.path());
        std::fs::create_dir_all(&cache.dir).unwrap();
        let base =
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        // Written in an order unrelated to their age: entry i is i seconds younger than entry 0.
        for i in [3_u64, 0, 5, 1, 4, 2] {
            let path = cache.dir.join(format!("{i}.json"));
            std::fs::write(&path, "{}").unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(base + std::time::Duration::from_secs(i))
                .unwrap();
        }
        // Not an entry: never counted, never removed.
        std::fs::write(cache.dir.join(".0.json.123.tmp"), "").unwrap();
        let names = |cache: &DecisionCache| {
            let mut names: Vec<String> = std::fs::read_dir(&cache.dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };

        cache.trim_to(6, 3);
        assert_eq!(names(&cache).len(), 7, "within the bound nothing goes");

        cache.trim_to(5, 3);
        assert_eq!(
            names(&cache),
            [".0.json.123.tmp", "3.json", "4.json", "5.json"],
            "over the bound, the oldest went until three remain"
        );
    }
}
