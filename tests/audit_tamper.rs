//! A real audit file no one can quietly rewrite (issue 36): 1,000 `palisade run`s, 50 at a time,
//! append to one file with a signing key and a checkpoint. The untouched file verifies in full
//! (every record reproduces, the chain is whole, every line sealed by the trusted key, the
//! checkpoint's line there). Then each way of rewriting it, on a copy, is reported with its line
//! and kind: a changed byte, a record removed, a forged record inserted (with the chain
//! rewritten after it, as someone without the key could), two records swapped, the tail cut, a
//! record sealed by another key.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step should fail the test loudly"
)]

#[path = "support/escape_kit.rs"]
mod escape_kit;
#[path = "support/reachable.rs"]
mod reachable;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use palisade::audit::chain;
use serde_json::Value;

/// How many runs, and how many at once.
const RUNS: usize = 1000;
const AT_ONCE: usize = 50;

struct Fixture {
    dir: tempfile::TempDir,
    palisade: PathBuf,
}

impl Fixture {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `palisade ARGS` with `home` as HOME (whose key seals), in the workspace.
    fn palisade(&self, home: &str, args: &[&str]) -> Command {
        let mut command = Command::new(&self.palisade);
        command
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.path(home))
            .env("PALISADE_CACHE_DIR", self.path("cache"))
            .current_dir(self.path("ws"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    fn run_args(&self) -> Vec<String> {
        [
            "run",
            "--backend",
            "linux-bwrap",
            "--audit",
            self.path("audit.jsonl").to_str().unwrap(),
            "--checkpoint",
            self.path("checkpoint.json").to_str().unwrap(),
            "--",
            "true",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }

    /// `palisade replay FILE --json --trusted-key <home's key> [more]`: exit code and reports.
    fn replay(&self, lines: &[String], more: &[&str]) -> (Option<i32>, Vec<Value>, String) {
        let file = self.path("copy.jsonl");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let key = self.path("home/.config/palisade/keys/audit-signing.pub");
        let mut args = vec![
            "replay",
            file.to_str().unwrap(),
            "--json",
            "--trusted-key",
            key.to_str().unwrap(),
        ];
        args.extend(more);
        let out = self.palisade("home", &args).output().unwrap();
        let reports = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (
            out.status.code(),
            reports,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The reports that are not REPRODUCED, as (line, status, first detail).
fn findings(reports: &[Value]) -> Vec<(u64, String, String)> {
    reports
        .iter()
        .filter(|r| r["status"] != "REPRODUCED")
        .map(|r| {
            (
                r["line"].as_u64().unwrap(),
                r["status"].as_str().unwrap().to_owned(),
                r["details"][0].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn schema(line: &str) -> String {
    serde_json::from_str::<Value>(line).unwrap()["schemaVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Rewrites every chain link from `from` on, as someone who can write the file (but holds no
/// key) would to hide a change from the chain.
fn rechain(lines: &mut [String], from: usize) {
    for i in from.max(1)..lines.len() {
        let link = chain::link_after(Some(lines[i - 1].as_bytes()));
        let mut value: Value = serde_json::from_str(&lines[i]).unwrap();
        value["chain"] = serde_json::to_value(&link).unwrap();
        lines[i] = value.to_string();
    }
}

#[test]
fn a_thousand_sealed_runs_verify_and_every_rewrite_is_named() {
    let palisade = escape_kit::palisade_binary().unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let fixture = Fixture { dir, palisade };
    for sub in ["home", "other", "cache", "ws"] {
        std::fs::create_dir_all(fixture.path(sub)).unwrap();
    }
    ok(
        &fixture.palisade("home", &["key", "init"]).output().unwrap(),
        "key init",
    );

    // 1,000 runs, 50 at a time, into one file.
    let args = fixture.run_args();
    let started = std::time::Instant::now();
    for _ in 0..RUNS / AT_ONCE {
        let children: Vec<_> = (0..AT_ONCE)
            .map(|_| fixture.palisade("home", &[]).args(&args).spawn().unwrap())
            .collect();
        for child in children {
            ok(&child.wait_with_output().unwrap(), "run");
        }
    }
    eprintln!("{RUNS} runs in {:?}", started.elapsed());
    let text = std::fs::read_to_string(fixture.path("audit.jsonl")).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), RUNS * 4, "a decision, an outcome, each sealed");
    let checkpoint = fixture.path("checkpoint.json");
    let with_checkpoint = ["--checkpoint", checkpoint.to_str().unwrap()];

    // Untouched: every record reproduces, the chain is whole, every line is sealed by the key,
    // and the checkpoint's line is there.
    let (code, reports, stderr) = fixture.replay(&lines, &with_checkpoint);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(findings(&reports).is_empty(), "{:?}", findings(&reports));
    assert_eq!(reports.len(), RUNS);

    // Lines by kind (0-based indexes into `lines`; reports count from 1).
    let decisions: Vec<usize> = (0..lines.len())
        .filter(|&i| schema(&lines[i]) == "palisade.audit/v1")
        .collect();
    let pick = decisions[RUNS / 2];
    assert_eq!(schema(&lines[pick + 1]), "palisade.seal/v1");

    // A changed byte in a record (its context, which replay does not compare): its seal no
    // longer fits it, and the chain breaks at the line after.
    let mut changed = lines.clone();
    changed[pick] = changed[pick].replacen("\"hostName\":\"", "\"hostName\":\"x", 1);
    assert_ne!(changed[pick], lines[pick]);
    let (code, reports, _) = fixture.replay(&changed, &[]);
    assert_eq!(code, Some(5));
    let found = findings(&reports);
    assert_eq!(found[0].0, pick as u64 + 1, "{found:?}");
    assert_eq!(found[0].1, "BAD_SEAL", "{found:?}");
    assert!(
        found
            .iter()
            .any(|f| f.0 == pick as u64 + 2 && f.1 == "CHAIN_BROKEN" && f.2.starts_with("changed")),
        "{found:?}"
    );

    // A record removed with its seal: the line after it says records are missing.
    let mut removed = lines.clone();
    removed.drain(pick..pick + 2);
    let (code, reports, _) = fixture.replay(&removed, &[]);
    assert_eq!(code, Some(5));
    let found = findings(&reports);
    assert!(
        found
            .iter()
            .any(|f| f.0 == pick as u64 + 1 && f.1 == "CHAIN_BROKEN" && f.2.starts_with("removed")),
        "{found:?}"
    );

    // A forged record inserted, the chain rewritten after it: the chain is whole again, the
    // record reproduces (a copy of a real one, made to look new), and no seal vouches for it;
    // every seal after it no longer fits its line.
    let mut forged = lines.clone();
    let copy = forged[decisions[3]].replacen("\"time\":\"", "\"time\":\"1", 1);
    forged.insert(pick, copy);
    rechain(&mut forged, pick);
    let (code, reports, stderr) = fixture.replay(&forged, &[]);
    assert_eq!(code, Some(5));
    assert!(
        stderr.contains("PALISADE_AUDIT_SIGNATURE_INVALID"),
        "{stderr}"
    );
    let found = findings(&reports);
    assert_eq!(
        (found[0].0, found[0].1.as_str()),
        (pick as u64 + 1, "UNSIGNED"),
        "{found:?}"
    );
    assert!(
        found.iter().all(|f| f.1 != "CHAIN_BROKEN"),
        "the chain was rewritten: {found:?}"
    );
    // (The copy's run had its outcome before it: INTERRUPTED, which is no failure.)
    assert!(
        found
            .iter()
            .skip(1)
            .all(|f| f.1 == "BAD_SEAL" || f.1 == "INTERRUPTED"),
        "{found:?}"
    );

    // Two records swapped, each with its seal: the chain names the move.
    let mut swapped = lines.clone();
    let (a, b) = (decisions[10], decisions[20]);
    swapped.swap(a, b);
    swapped.swap(a + 1, b + 1);
    let (code, reports, _) = fixture.replay(&swapped, &[]);
    assert_eq!(code, Some(5));
    let found = findings(&reports);
    assert!(
        found
            .iter()
            .any(|f| f.0 == a as u64 + 1 && f.1 == "CHAIN_BROKEN" && f.2.starts_with("reordered")),
        "{found:?}"
    );
    // And with the chain rewritten, the seals still see it.
    rechain(&mut swapped, a);
    let (code, reports, _) = fixture.replay(&swapped, &[]);
    assert_eq!(code, Some(5));
    let found = findings(&reports);
    assert!(
        found.iter().all(|f| f.1 != "CHAIN_BROKEN"),
        "the chain was rewritten: {found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.0 == a as u64 + 1 && f.1 == "BAD_SEAL"),
        "{found:?}"
    );

    // The tail cut: the chain alone cannot see it; the checkpoint does.
    let cut = lines[..lines.len() - 8].to_vec();
    let (code, reports, _) = fixture.replay(&cut, &[]);
    assert_eq!(code, Some(0), "{:?}", findings(&reports));
    let (code, reports, _) = fixture.replay(&cut, &with_checkpoint);
    assert_eq!(code, Some(5));
    let found = findings(&reports);
    assert!(
        found
            .iter()
            .any(|f| f.0 == cut.len() as u64 && f.1 == "CHAIN_BROKEN" && f.2.starts_with("cut")),
        "{found:?}"
    );

    // A run appended by someone else's palisade, with its own key: its two lines are sealed by
    // a key the reader does not trust; trusting both keys, the file verifies.
    ok(
        &fixture
            .palisade("other", &["key", "init"])
            .output()
            .unwrap(),
        "other key init",
    );
    ok(
        &fixture.palisade("other", &[]).args(&args).output().unwrap(),
        "other's run",
    );
    let text = std::fs::read_to_string(fixture.path("audit.jsonl")).unwrap();
    let appended: Vec<String> = text.lines().map(str::to_owned).collect();
    assert_eq!(appended.len(), lines.len() + 4);
    let (code, reports, _) = fixture.replay(&appended, &[]);
    assert_eq!(code, Some(5));
    let found = findings(&reports);
    let other: Vec<u64> = found
        .iter()
        .filter(|f| f.1 == "OTHER_KEY")
        .map(|f| f.0)
        .collect();
    assert_eq!(
        other,
        [lines.len() as u64 + 1, lines.len() as u64 + 3],
        "{found:?}"
    );
    let other_key = fixture.path("other/.config/palisade/keys/audit-signing.pub");
    let (code, reports, stderr) =
        fixture.replay(&appended, &["--trusted-key", other_key.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr} {:?}", findings(&reports));
}
