//! Reading a file of the kernel's virtual filesystems (`/proc`, a cgroup's files), which say
//! their size is 0: `std::fs::read` then starts with a 32-byte read and doubles its buffer from
//! there, eight reads (eight system calls) for `/proc/self/status`. These start with a page and
//! read on to the end, so a file that fits takes one read, and the end a second. They read
//! through `Take`, not the `File` itself: a `File`'s `read_to_end` first asks the size and the
//! position (`statx` and `lseek`), two more system calls whose answer is 0 here.

use std::io::{self, Read};
use std::path::Path;

/// What the first read asks for: a page, what the kernel's `seq_file` fills at a time.
const FIRST_READ: usize = 4096;

/// The whole file at `path`.
pub fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(FIRST_READ);
    std::fs::File::open(path)?
        .take(u64::MAX)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The whole file at `path`, which must be UTF-8.
pub fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    let mut text = String::with_capacity(FIRST_READ);
    std::fs::File::open(path)?
        .take(u64::MAX)
        .read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    /// A file longer than the first read is read whole, bytes and text alike.
    #[test]
    fn a_file_longer_than_the_first_read_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long");
        let text = "x".repeat(FIRST_READ * 2 + 7);
        std::fs::write(&path, &text).unwrap();
        assert_eq!(read(&path).unwrap(), text.as_bytes());
        assert_eq!(read_to_string(&path).unwrap(), text);
        assert!(read("/proc/self/status").is_ok_and(|status| !status.is_empty()));
    }
}
