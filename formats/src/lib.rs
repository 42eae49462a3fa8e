//! The host's own files as data: the host configuration, runtime profiles, audit records, their
//! seals and signing keys, and in-toto statements, read and validated without I/O and without the engine runtime.
//!
//! Key design decision: these parsers read text that someone else may have written (a per-user
//! configuration, an audit file handed to `palisade replay`), so they live apart from the CLI,
//! which links wasmtime: their tests and the fuzz targets (`fuzz/`) reach them cheaply. The CLI
//! (`host/`) re-exports each where it always was (`palisade::hostconfig`, `palisade::docker`,
//! `palisade::audit`, `palisade::replay`) and keeps the I/O: which files, who may own them,
//! appending records, replaying them. The YAML files go through the engine's reader
//! ([`palisade_engine::reader`]), so they get the taskpack's guarantees: every offending field at
//! its path, size and nesting bounded before the parser runs.

pub mod audit;
pub mod chain;
pub mod hostconfig;
pub mod keys;
pub mod profiles;
pub mod seal;
pub mod statement;
