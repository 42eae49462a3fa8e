//! Unix sockets bound at paths longer than `sun_path` allows.
//!
//! A socket's address holds at most 107 bytes of path, and a run's sockets live beside its
//! temp dir: under a deep `XDG_RUNTIME_DIR` or temp dir the full path is longer. The kernel
//! resolves `/proc/self/fd/N/<name>` (N an open descriptor of the directory) to the same place,
//! so the socket is bound there instead, at its real path.

use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The longest path `bind` takes (`sun_path` is 108 bytes with its terminating NUL).
const SUN_PATH_MAX: usize = 107;

/// Binds a listening Unix socket at `path`, however long: directly when the path fits, else
/// through the directory's descriptor (Linux's `/proc/self/fd`).
pub fn bind_listener(path: &Path) -> io::Result<UnixListener> {
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return UnixListener::bind(path);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::other("socket path has no directory"));
    };
    let dir = std::fs::File::open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    UnixListener::bind(short)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn a_path_longer_than_sun_path_is_bound_at_its_real_place() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&deep).unwrap();
        let path = deep.join("s.sock");
        assert!(path.as_os_str().len() > SUN_PATH_MAX);
        assert!(UnixListener::bind(&path).is_err(), "the control must fail");
        let listener = bind_listener(&path).unwrap();
        use std::os::unix::fs::FileTypeExt as _;
        assert!(std::fs::metadata(&path).unwrap().file_type().is_socket());
        // Reached through the same kind of short name, as a client with the long path would.
        let dir_fd = std::fs::File::open(&deep).unwrap();
        let short = format!("/proc/self/fd/{}/s.sock", dir_fd.as_raw_fd());
        let _client = std::os::unix::net::UnixStream::connect(short).unwrap();
        let (_accepted, _) = listener.accept().unwrap();
    }
}

/// Whether this process has `gid` as its effective group or one of its supplementary groups:
/// whether a socket of that group with group write permission accepts its connections.
pub fn caller_in_group(gid: u32) -> bool {
    crate::sys::in_group(gid)
}
