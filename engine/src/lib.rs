//! Palisade's decision engine: a pure function from a policy document, host facts and backend
//! probes to one decision or one refusal.
//!
//! Key design decision: the engine does no I/O and imports nothing that can vary (clocks,
//! random, environment, files). Every outside fact is measured by the host, passed in and
//! recorded, so any decision can be replayed from its audit record, and the same source compiled
//! natively and as a WebAssembly component gives the same bytes. The host never calls this crate
//! natively; it runs the component. The native build exists for tests, differential checks and
//! the benchmark baseline.

pub mod budgets;
pub mod canonical;
pub mod environment;
pub mod model;
pub mod output;
pub mod protected;
pub mod reader;
pub mod resolve;
pub mod yaml;

mod decide;
mod domains;
mod flags;
mod host;
mod negotiate;
mod nesting;
mod paths;
mod plan;
mod policy;
mod sandbox;
mod sockets;
#[cfg(test)]
mod test_support;
mod text;

#[cfg(target_arch = "wasm32")]
mod component;

pub use decide::{decide, decide_json};
pub use model::{
    Backend, BackendProbe, Capability, DecisionInput, ExecutionMode, HostFacts, LandlockProc,
    NetworkMode, PolicyFlags, RecordedFacts, SessionKind, UnixSocketFact, UnixSocketKind,
};
pub use output::{Outcome, RefusalCode, Verdict};

/// The engine crate's version, recorded in every decision.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version of the WIT package this engine implements (`palisade:engine@…`).
pub const WIT_VERSION: &str = "0.8.0";

/// The largest policy document accepted, in bytes. Larger documents are refused before parsing,
/// so time and memory stay bounded whatever the input.
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// The largest decision input accepted as JSON text ([`decide_json`], `palisade decide --input`,
/// `--facts`), in bytes: room for a policy and a task contract of [`MAX_DOCUMENT_BYTES`] each,
/// escaped, and the host facts. Larger text is refused before parsing; nesting is bounded by the
/// JSON parser itself (128 levels).
pub const MAX_INPUT_BYTES: usize = 16 * 1024 * 1024;
