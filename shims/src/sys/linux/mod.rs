//! The Linux-only system calls: prctl, pidfds, `wait4`/`waitid` with `__WALL`, memfds,
//! `close_range`, namespaces, the sandbox's `/proc` mount, capabilities, Landlock's ABI query,
//! `O_PATH` opens and seccomp.

mod confine;
mod exec;
mod fds;
mod mount;
mod process;
mod signals;

pub(crate) use confine::*;
pub(crate) use exec::*;
pub(crate) use fds::*;
pub(crate) use mount::*;
pub(crate) use process::*;
pub(crate) use signals::*;
