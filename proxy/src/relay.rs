//! Byte relay between two connected streams: one thread per direction, `splice(2)` through a
//! private pipe where the kernel supports it (no copy through user space), a large buffer
//! otherwise. Tunnel bytes are never parsed. End of stream in one direction is passed on as a
//! write shutdown, so "read until EOF" protocols (HTTP/1.0 bodies, `nc -q`) keep working.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::sys;

/// Bytes moved per splice/read call, and the pipe and buffer size behind it.
const CHUNK: usize = 256 * 1024;

/// A connected stream of either family.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        }
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            Stream::Unix(s) => s.set_write_timeout(timeout),
        }
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).read(buf),
            Stream::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Relays `a <-> b` until both directions have ended; `a_to_b_first` is sent to `b` before
/// anything else read from `a` (bytes that arrived with a request head). Returns the bytes
/// written to `b` and to `a`. Errors end a direction like EOF does; the counts say how far it got.
pub(crate) fn relay(a: Stream, b: Stream, a_to_b_first: &[u8]) -> (u64, u64) {
    let mut up = 0_u64;
    if !a_to_b_first.is_empty() {
        if (&b).write_all(a_to_b_first).is_err() {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
            return (0, 0);
        }
        up = a_to_b_first.len() as u64;
    }
    let (a2, b2) = match (a.try_clone(), b.try_clone()) {
        (Ok(a2), Ok(b2)) => (a2, b2),
        _ => {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
            return (up, 0);
        }
    };
    let down_thread = std::thread::Builder::new()
        .name("palisade-proxy-relay".into())
        .spawn(move || copy_until_end(&b2, &a2));
    let down_thread = match down_thread {
        Ok(t) => t,
        Err(_) => {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
            return (up, 0);
        }
    };
    up += copy_until_end(&a, &b);
    let down = down_thread.join().unwrap_or(0);
    (up, down)
}

/// Copies `src` to `dst` until EOF or an error, then shuts down `dst` for writing and `src` for
/// reading (the half-close), and returns the bytes written.
pub(crate) fn copy_until_end(src: &Stream, dst: &Stream) -> u64 {
    let moved = splice_copy(src, dst);
    let _ = dst.shutdown(Shutdown::Write);
    let _ = src.shutdown(Shutdown::Read);
    moved
}

/// Whether a splice error means "not possible here" (kernel support, a seccomp filter) rather
/// than a failed connection.
fn splice_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EPERM | libc::EOPNOTSUPP)
    )
}

/// Copies with `splice(2)` through a private pipe; falls back to [`buffered_copy`] (moving any
/// bytes already in the pipe first) when the kernel refuses to splice these descriptors.
fn splice_copy(src: &Stream, dst: &Stream) -> u64 {
    let Ok((pipe_r, pipe_w)) = sys::pipe(CHUNK) else {
        return buffered_copy(src, dst);
    };
    let mut total = 0_u64;
    loop {
        let n = match sys::splice(src.as_fd(), pipe_w.as_fd(), CHUNK) {
            Ok(0) => return total,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if splice_unsupported(&e) => return total + buffered_copy(src, dst),
            Err(_) => return total,
        };
        let mut left = n;
        while left > 0 {
            match sys::splice(pipe_r.as_fd(), dst.as_fd(), left) {
                Ok(0) => return total,
                Ok(m) => {
                    left = left.saturating_sub(m);
                    total += m as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if splice_unsupported(&e) => {
                    // The bytes are in our pipe: move them by hand, then copy the rest.
                    let mut pending = vec![0_u8; left];
                    let mut pipe = std::fs::File::from(pipe_r);
                    if pipe.read_exact(&mut pending).is_err()
                        || (&*dst).write_all(&pending).is_err()
                    {
                        return total;
                    }
                    return total + left as u64 + buffered_copy(src, dst);
                }
                Err(_) => return total,
            }
        }
    }
}

fn buffered_copy(src: &Stream, dst: &Stream) -> u64 {
    let mut buf = vec![0_u8; CHUNK];
    let mut total = 0_u64;
    let mut reader = src;
    let mut writer = dst;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return total,
        };
        let Some(chunk) = buf.get(..n) else {
            return total;
        };
        if writer.write_all(chunk).is_err() {
            return total;
        }
        total += n as u64;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use std::net::TcpListener;

    use super::*;

    /// A connected TCP pair on loopback.
    fn tcp_pair() -> (Stream, Stream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (Stream::Tcp(a), Stream::Tcp(b))
    }

    fn unix_pair() -> (Stream, Stream) {
        let (a, b) = UnixStream::pair().unwrap();
        (Stream::Unix(a), Stream::Unix(b))
    }

    /// Sends `data` into `src_peer`, copies `src → dst` with `copy`, reads it from `dst_peer`.
    fn through(
        copy: fn(&Stream, &Stream) -> Result<u64, ()>,
        src: (Stream, Stream),
        dst: (Stream, Stream),
    ) {
        let (src_peer, src) = src;
        let (dst, dst_peer) = dst;
        let data: Vec<u8> = (0..3_000_000_u32).map(|i| (i % 253) as u8).collect();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            (&src_peer).write_all(&sent).unwrap();
            src_peer.shutdown(Shutdown::Write).unwrap();
        });
        let copier = std::thread::spawn(move || {
            let n = copy(&src, &dst);
            let _ = dst.shutdown(Shutdown::Write);
            n
        });
        let mut got = Vec::new();
        (&dst_peer).read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(copier.join().unwrap(), Ok(data.len() as u64));
        assert!(got == data);
    }

    fn spliced(src: &Stream, dst: &Stream) -> Result<u64, ()> {
        Ok(splice_copy(src, dst))
    }

    fn buffered(src: &Stream, dst: &Stream) -> Result<u64, ()> {
        Ok(buffered_copy(src, dst))
    }

    #[test]
    fn splice_copy_moves_everything_between_tcp_and_unix_sockets() {
        through(spliced, tcp_pair(), unix_pair());
        through(spliced, unix_pair(), tcp_pair());
        through(spliced, tcp_pair(), tcp_pair());
    }

    // Guards the fast path: `splice_copy` falls back silently, so this checks the kernel really
    // splices each socket family in and out (else relays lose throughput without failing).
    #[test]
    fn the_kernel_splices_tcp_and_unix_sockets_both_ways() {
        for (src_peer, src) in [tcp_pair(), unix_pair()] {
            for (dst, dst_peer) in [tcp_pair(), unix_pair()] {
                let (pipe_r, pipe_w) = sys::pipe(CHUNK).unwrap();
                (&src_peer).write_all(b"abc").unwrap();
                assert_eq!(sys::splice(src.as_fd(), pipe_w.as_fd(), CHUNK).unwrap(), 3);
                assert_eq!(sys::splice(pipe_r.as_fd(), dst.as_fd(), 3).unwrap(), 3);
                let mut got = [0_u8; 3];
                (&dst_peer).read_exact(&mut got).unwrap();
                assert_eq!(&got, b"abc");
            }
        }
    }

    #[test]
    fn buffered_fallback_copies_everything() {
        through(buffered, tcp_pair(), unix_pair());
        through(buffered, unix_pair(), tcp_pair());
    }
}
