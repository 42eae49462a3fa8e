//! Palisade's backend shims.
pub mod bwrap;
