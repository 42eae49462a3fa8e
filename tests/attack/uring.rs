//! io_uring attacks: set up a ring, then open a denied file (`IORING_OP_OPENAT`) or create a
//! socket and connect it to the host's loopback (`IORING_OP_SOCKET` + `IORING_OP_CONNECT`).
//! io_uring operations bypass a seccomp filter that only looks at `openat`/`socket`/`connect`,
//! which is why sandboxes must refuse `io_uring_setup` itself.
//!
//! A minimal ring by hand (no liburing): one submission at a time, waited for synchronously.

use std::ffi::CString;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::{Args, Attack, Outcome, io_detail};

const IORING_OFF_SQ_RING: i64 = 0;
const IORING_OFF_CQ_RING: i64 = 0x800_0000;
const IORING_OFF_SQES: i64 = 0x1000_0000;
const IORING_FEAT_SINGLE_MMAP: u32 = 1;
const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_OP_CONNECT: u8 = 16;
const IORING_OP_OPENAT: u8 = 18;
const IORING_OP_SOCKET: u8 = 45;

#[repr(C)]
#[derive(Default)]
struct SqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct CqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqOffsets,
    cq_off: CqOffsets,
}

/// `struct io_uring_sqe` (64 bytes).
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Sqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    off: u64,
    addr: u64,
    len: u32,
    op_flags: u32,
    user_data: u64,
    buf_index: u16,
    personality: u16,
    file_index: u32,
    addr3: u64,
    pad: u64,
}

/// `struct io_uring_cqe` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
struct Cqe {
    user_data: u64,
    res: i32,
    flags: u32,
}

/// One mmap'ed region, unmapped on drop.
struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Map {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` came from a successful mmap and are unmapped exactly once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[allow(unsafe_code)]
fn map(fd: &OwnedFd, len: usize, offset: i64) -> std::io::Result<Map> {
    // SAFETY: a fresh shared mapping of the ring fd at a kernel-defined offset; no existing
    // memory is affected.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            offset,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Map {
        ptr: ptr.cast(),
        len,
    })
}

struct Ring {
    fd: OwnedFd,
    sq: Map,
    cq: Option<Map>,
    sqes: Map,
    params: Params,
}

impl Ring {
    #[allow(unsafe_code)]
    fn new() -> std::io::Result<Ring> {
        let mut params = Params::default();
        // SAFETY: `params` is a live, writable `struct io_uring_params`.
        let fd =
            unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, &mut params as *mut Params) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this new descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let sq_len = params.sq_off.array as usize + params.sq_entries as usize * 4;
        let cq_len = params.cq_off.cqes as usize + params.cq_entries as usize * size_of::<Cqe>();
        let single = params.features & IORING_FEAT_SINGLE_MMAP != 0;
        let sq = map(
            &fd,
            if single { sq_len.max(cq_len) } else { sq_len },
            IORING_OFF_SQ_RING,
        )?;
        let cq = if single {
            None
        } else {
            Some(map(&fd, cq_len, IORING_OFF_CQ_RING)?)
        };
        let sqes = map(
            &fd,
            params.sq_entries as usize * size_of::<Sqe>(),
            IORING_OFF_SQES,
        )?;
        Ok(Ring {
            fd,
            sq,
            cq,
            sqes,
            params,
        })
    }

    fn cq_base(&self) -> *mut u8 {
        self.cq.as_ref().map_or(self.sq.ptr, |m| m.ptr)
    }

    /// Submit one entry and wait for its completion; returns the CQE's `res`.
    #[allow(unsafe_code)]
    fn run(&self, sqe: Sqe) -> std::io::Result<i32> {
        let off = &self.params.sq_off;
        // SAFETY: every offset below comes from the kernel's io_uring_params for this ring and
        // lies inside the mapping sized from those same offsets; the head/tail words are
        // shared with the kernel and accessed atomically, the rest only by this thread.
        unsafe {
            let sq = self.sq.ptr;
            let tail_ptr = AtomicU32::from_ptr(sq.add(off.tail as usize).cast());
            let mask = *sq.add(off.ring_mask as usize).cast::<u32>();
            let tail = tail_ptr.load(Ordering::Acquire);
            let index = tail & mask;
            let slot = self.sqes.ptr.cast::<Sqe>().add(index as usize);
            slot.write(sqe);
            sq.add(off.array as usize)
                .cast::<u32>()
                .add(index as usize)
                .write(index);
            tail_ptr.store(tail.wrapping_add(1), Ordering::Release);

            let ret = libc::syscall(
                libc::SYS_io_uring_enter,
                self.fd.as_raw_fd(),
                1u32,
                1u32,
                IORING_ENTER_GETEVENTS,
                std::ptr::null::<libc::c_void>(),
                0usize,
            );
            if ret < 0 {
                return Err(std::io::Error::last_os_error());
            }

            let coff = &self.params.cq_off;
            let cq = self.cq_base();
            let head_ptr = AtomicU32::from_ptr(cq.add(coff.head as usize).cast());
            let tail_ptr = AtomicU32::from_ptr(cq.add(coff.tail as usize).cast());
            let cmask = *cq.add(coff.ring_mask as usize).cast::<u32>();
            let head = head_ptr.load(Ordering::Acquire);
            if head == tail_ptr.load(Ordering::Acquire) {
                return Err(std::io::Error::other("no completion"));
            }
            let cqe = cq
                .add(coff.cqes as usize)
                .cast::<Cqe>()
                .add((head & cmask) as usize)
                .read();
            head_ptr.store(head.wrapping_add(1), Ordering::Release);
            Ok(cqe.res)
        }
    }
}

/// A negative CQE result as an I/O error.
fn cqe_result(res: i32) -> Result<i32, std::io::Error> {
    if res < 0 {
        Err(std::io::Error::from_raw_os_error(-res))
    } else {
        Ok(res)
    }
}

fn setup_ring() -> Result<Ring, Outcome> {
    Ring::new().map_err(|e| Outcome::blocked(io_detail("io_uring_setup", &e)))
}

/// Set up a ring.
pub fn setup(_args: &Args) -> Attack {
    let ring = setup_ring()?;
    Ok(Outcome::succeeded(format!(
        "io_uring_setup gave a ring ({} entries, features {:#x})",
        ring.params.sq_entries, ring.params.features
    )))
}

/// `--path P --marker M`: `IORING_OP_OPENAT` on `P`, then read the marker from the new fd.
#[allow(unsafe_code)]
pub fn openat(args: &Args) -> Attack {
    let path = args.get("path")?;
    let marker = args.get("marker")?;
    let ring = setup_ring()?;
    let cpath = CString::new(path).map_err(|_| Outcome::error("path contains NUL"))?;
    let sqe = Sqe {
        opcode: IORING_OP_OPENAT,
        fd: libc::AT_FDCWD,
        addr: cpath.as_ptr() as u64,
        op_flags: (libc::O_RDONLY | libc::O_CLOEXEC) as u32,
        ..Sqe::default()
    };
    let res = ring
        .run(sqe)
        .map_err(|e| Outcome::blocked(io_detail("io_uring_enter", &e)))?;
    let fd = cqe_result(res)
        .map_err(|e| Outcome::blocked(io_detail(&format!("IORING_OP_OPENAT `{path}`"), &e)))?;
    // SAFETY: the completion handed us this new descriptor.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut content = Vec::new();
    use std::io::Read;
    file.take(1 << 20)
        .read_to_end(&mut content)
        .map_err(|e| Outcome::blocked(io_detail("read the io_uring-opened file", &e)))?;
    Ok(if String::from_utf8_lossy(&content).contains(marker) {
        Outcome::succeeded(format!(
            "opened `{path}` through io_uring and read the marker"
        ))
    } else {
        Outcome::blocked(format!(
            "io_uring opened `{path}`: {} bytes without the marker",
            content.len()
        ))
    })
}

/// `--addr A --port P --marker M`: `IORING_OP_SOCKET` + `IORING_OP_CONNECT` to the test's TCP
/// listener, then read its banner.
#[allow(unsafe_code)]
pub fn connect(args: &Args) -> Attack {
    let addr: std::net::Ipv4Addr = args
        .get("addr")?
        .parse()
        .map_err(|_| Outcome::error("option `--addr` is not an IPv4 address"))?;
    let port: u16 = args.num("port")?;
    let marker = args.get("marker")?;
    let ring = setup_ring()?;
    let socket = Sqe {
        opcode: IORING_OP_SOCKET,
        fd: libc::AF_INET,
        off: libc::SOCK_STREAM as u64,
        ..Sqe::default()
    };
    let res = ring
        .run(socket)
        .map_err(|e| Outcome::blocked(io_detail("io_uring_enter", &e)))?;
    let fd = cqe_result(res).map_err(|e| Outcome::blocked(io_detail("IORING_OP_SOCKET", &e)))?;
    // SAFETY: the completion handed us this new descriptor.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let sockaddr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(addr).to_be(),
        },
        sin_zero: [0; 8],
    };
    let connect = Sqe {
        opcode: IORING_OP_CONNECT,
        fd,
        addr: &sockaddr as *const libc::sockaddr_in as u64,
        off: size_of::<libc::sockaddr_in>() as u64,
        ..Sqe::default()
    };
    let target = SocketAddr::from((addr, port));
    let res = ring
        .run(connect)
        .map_err(|e| Outcome::blocked(io_detail("io_uring_enter", &e)))?;
    cqe_result(res)
        .map_err(|e| Outcome::blocked(io_detail(&format!("IORING_OP_CONNECT {target}"), &e)))?;
    let mut stream = TcpStream::from(owned);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(3)));
    Ok(crate::net::read_banner(
        &mut stream,
        marker,
        &format!("io_uring tcp {target}"),
    ))
}
