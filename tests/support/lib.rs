//! Shared helpers for the workspace integration tests (`tests/*.rs`).
//!
//! The helper modules live beside this file and are included by each test binary with
//! `#[path = "support/<module>.rs"] mod <module>;`, because this library target only sees the
//! root package's `[dependencies]` (only what the attack binary needs), while the helpers need the dev-dependencies
//! (`palisade-engine`, `serde`, `serde_json`, `serde_yaml`):
//!
//! - `corpus.rs` — the conformance corpus (`tests/corpus/*.yaml`): format, loader, expectation
//!   checks on canonical JSON, outcome comparison, and writing each case's input as a
//!   `palisade decide --input` file.
//! - `escape_kit.rs` — the escape battery's harness: per-user environments, targets the test
//!   owns (secrets, sockets, listeners, victims, ptys), running `palisade-attack` outside and
//!   inside `palisade run`, and checking on the host what really happened.
//!
//! Moving those crates to `[dependencies]` would let this file declare the modules and the tests
//! import them as `palisade_suite::corpus`; the module files need no change for that.
