//! The `palisade` host: measures the host, runs the decision engine component under a
//! deterministic wasmtime, writes audit records and replays them.
//!
//! Key design decision: every decision goes through the embedded WebAssembly component, never
//! the native engine crate (used here for its model types only), so whatever the CLI decides can
//! be replayed bit for bit by any runtime that loads the same component.

/// Like `eprintln!`, but a closed or broken stderr is not a panic: Palisade's stderr is often a
/// pipe to an agent runner that may go away mid-run, and a supervisor that panicked there would
/// leave its run's tree unreaped and its outcome unrecorded.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod approve;
pub mod audit;
pub mod caches;
pub mod cli;
pub mod decisions;
pub mod denials;
pub mod docker;
pub mod envpolicy;
pub mod execmode;
pub mod exit;
pub mod facts;
pub mod gitdirs;
pub mod gitplanted;
pub mod hostconfig;
pub mod keys;
pub mod launch;
mod lock;
pub mod network;
pub mod probe;
pub mod replay;
pub mod report;
pub mod runtime;
pub mod store;
pub mod suggest;
pub mod sys;
pub mod timings;
pub mod translate;
pub mod unix_sockets;

/// The engine's WIT contract, as `palisade wit` prints it.
pub const WIT_TEXT: &str = include_str!("../../wit/palisade.wit");
