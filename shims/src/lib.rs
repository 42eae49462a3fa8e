//! Palisade's backend shims: each backend is a pure `plan → mechanism` function (an argv, a
//! ruleset, a filter program) plus a small exec/supervise step that fails closed when the kernel
//! does not enforce what was asked.
//!
//! Key design decision: the shims know neither the engine nor the CLI. Their input is a
//! [`plan::LaunchPlan`] (resolved absolute paths, a network mode, budgets) plus facts the host
//! measured (which paths exist, which host sockets are listening), so every mechanism can be
//! snapshot-tested on any machine, and only the exec step touches the kernel.

pub mod bwrap;
pub mod cgroup;
pub mod docker;
pub mod fsfacts;
pub mod init;
pub mod landlock;
pub mod plan;
pub mod seccomp;
pub mod supervise;
