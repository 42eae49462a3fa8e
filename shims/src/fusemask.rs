//! Observed masks: the denied paths of a sandbox served by a tiny FUSE filesystem that refuses
//! every access to them and records it.
//!
//! Key design decision: the mask observes instead of staying mute, and costs nothing for any
//! other path. A denied directory or file is bound from one node of this filesystem instead
//! of a mode-0000 tmpfs or `/dev/null` (read-write, so that writes reach the server rather
//! than failing unobserved with `EROFS`); the kernel sends every lookup, open,
//! create, removal and attribute change beneath it to the server here, which answers `EACCES`
//! (as the mute masks did) and records what was asked, by which process. Nothing else of the
//! sandbox goes through FUSE, so a file-heavy command that never touches a denied path pays
//! nothing. The server performs no operation on the command's behalf: it only refuses.
//!
//! What the command sees: a denied directory or file with no permission bits (`stat` works, as
//! before), whose contents cannot be listed, read, written, executed or created; the error is
//! `EACCES` everywhere, as under the mute masks. Because the mount does not use
//! `default_permissions`, the kernel asks the server even for uid 0, whose `CAP_DAC_OVERRIDE`
//! the sandbox drops anyway.
//!
//! Failure: if the server thread ends (or this process dies), its `/dev/fuse` descriptor
//! closes and the kernel aborts the connection: every access then fails with `ENOTCONN`. The
//! masks never open up.
//!
//! Mounting: root mounts directly (`/dev/fuse` and `mount(2)`). Any other user's bwrap
//! sandbox has its masks mounted by bwrap's parent in user and mount namespaces of its own
//! (`crate::supervise::MaskMount`, served by [`MaskServer::serve_sent`]); where that fails,
//! and for docker, such a user goes through
//! the setuid `fusermount3` (Debian's `fuse3`), which mounts and hands back the descriptor
//! over a socket (`_FUSE_COMMFD`), and again (`fusermount3 -u -z`) to unmount: the cost of
//! observing for such a user, two executions of a setuid program per run. Such a mount admits
//! only its owner's uid (no `allow_other`), which is the uid every process of a bwrap sandbox
//! runs as; a container daemon needs `allow_other` ([`MaskServer::mount_shared`]). A Landlock
//! sandbox's init mounts the filesystem itself, in the user and mount namespaces it makes
//! (`crate::init`), and sends this process the descriptor ([`MaskServer::serve_sent`]):
//! no setuid helper, nothing on the host to unmount.
//!
//! Bounded: at most [`MAX_EVENTS`] distinct events (same operation on the same path is one,
//! with a count); past that only a counter grows.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;

use serde::Serialize;

use crate::bwrap::DeniedMask;
use crate::sys;

/// Distinct events kept; the rest are counted in [`Seen::dropped`].
pub const MAX_EVENTS: usize = 64;

/// Where the unprivileged mount helper is looked for, in order.
pub const FUSERMOUNT: [&str; 4] = [
    "/usr/bin/fusermount3",
    "/bin/fusermount3",
    "/usr/bin/fusermount",
    "/bin/fusermount",
];

/// What was asked of a masked path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileOp {
    /// Open for reading, list, look up a name beneath, or check for read access.
    Read,
    /// Open for writing, change attributes or extended attributes, or check for write access.
    Write,
    /// Create a file, directory, node or link beneath.
    Create,
    /// Remove or rename something beneath.
    Remove,
    /// Execute, or check for execute access.
    Exec,
}

impl FileOp {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Create => "create",
            Self::Remove => "remove",
            Self::Exec => "exec",
        }
    }
}

/// One refused access (or several of the same: `count`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileEvent {
    pub op: FileOp,
    /// The path asked for: the mask's target, or a name beneath it.
    pub path: PathBuf,
    /// The index of the mask's node: its place in the masks given to [`MaskServer::mount`].
    pub mask: usize,
    /// The first requester, as this process's PID namespace numbers it.
    pub pid: u32,
    /// Its `comm`, read when the event was first seen (empty if it was already gone).
    pub command: String,
    pub count: u64,
}

/// Everything the server saw, once it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    pub events: Vec<FileEvent>,
    /// Every refused access, kept or not.
    pub total: u64,
    /// Refused accesses past [`MAX_EVENTS`] distinct events.
    pub dropped: u64,
    /// Why the server stopped before it was asked to, if it did.
    pub error: Option<String>,
}

impl Seen {
    fn record(&mut self, op: FileOp, path: PathBuf, mask: usize, pid: u32) {
        self.total = self.total.saturating_add(1);
        if let Some(same) = self
            .events
            .iter_mut()
            .find(|e| e.op == op && e.path == path)
        {
            same.count = same.count.saturating_add(1);
        } else if self.events.len() < MAX_EVENTS {
            let command = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim_end().to_owned())
                .unwrap_or_default();
            self.events.push(FileEvent {
                op,
                path,
                mask,
                pid,
                command,
                count: 1,
            });
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }
}

/// How this host can mount the masks, or why it cannot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mounter {
    /// `mount(2)` with `/dev/fuse` (root).
    Kernel,
    /// The setuid helper at this path.
    Fusermount(PathBuf),
}

/// Why the masks could not be mounted.
#[derive(Debug, thiserror::Error)]
pub enum MaskError {
    #[error("this kernel has no FUSE filesystem (`fuse` is not in /proc/filesystems)")]
    NoFuse,
    #[error("no `fusermount3` for an unprivileged mount (Debian: `apt-get install fuse3`)")]
    NoFusermount,
    #[error("`/dev/fuse`: {0}")]
    Device(std::io::Error),
    #[error("mountpoint `{}`: {err}", path.display())]
    Mountpoint { path: PathBuf, err: std::io::Error },
    #[error("mount: {0}")]
    Mount(std::io::Error),
    #[error("`{}` failed: {why}", helper.display())]
    Helper { helper: PathBuf, why: String },
    #[error(
        "a container runtime cannot see an unprivileged FUSE mount unless `/etc/fuse.conf` says `user_allow_other`"
    )]
    NotShared,
    #[error("the server thread could not start: {0}")]
    Thread(std::io::Error),
}

/// How this process can mount observed masks: directly when root, else through
/// `fusermount3`; an error says what is missing.
pub fn mounter() -> Result<Mounter, MaskError> {
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|line| line.split_whitespace().last() == Some("fuse"))
    {
        return Err(MaskError::NoFuse);
    }
    if sys::geteuid() == 0 {
        return Ok(Mounter::Kernel);
    }
    FUSERMOUNT
        .iter()
        .map(Path::new)
        .find(|path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(path)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o4000 != 0)
        })
        .map(|path| Mounter::Fusermount(path.to_path_buf()))
        .ok_or(MaskError::NoFusermount)
}

/// A mounted mask filesystem and the thread serving it. [`MaskServer::finish`] stops it;
/// dropping it unfinished does the same and discards what it saw.
pub struct MaskServer {
    /// Where this process mounted the filesystem, and how to unmount it (`None`: the sandbox
    /// mounted it in namespaces of its own, [`MaskServer::serve_sent`]).
    mounted: Option<(PathBuf, Mounter)>,
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<Seen>>,
}

impl MaskServer {
    /// Mounts the masks at `mountpoint` (created here, mode 0700; it must not exist) and
    /// starts serving them. Node `i` of `masks` (a shim's [`DeniedMask`]s, in its order) is
    /// `mountpoint/i`, to be bound onto its target; the root itself is never shown to the
    /// sandbox.
    pub fn mount(mountpoint: &Path, masks: &[DeniedMask]) -> Result<MaskServer, MaskError> {
        Self::mount_for(mountpoint, masks, false)
    }

    /// [`MaskServer::mount`] for a container runtime: the mount admits every user
    /// (`allow_other`), so that the daemon can bind its nodes. An unprivileged user may ask for
    /// that only where `/etc/fuse.conf` says `user_allow_other`.
    pub fn mount_shared(mountpoint: &Path, masks: &[DeniedMask]) -> Result<MaskServer, MaskError> {
        Self::mount_for(mountpoint, masks, true)
    }

    fn mount_for(
        mountpoint: &Path,
        masks: &[DeniedMask],
        shared: bool,
    ) -> Result<MaskServer, MaskError> {
        let mounter = mounter()?;
        if shared && matches!(mounter, Mounter::Fusermount(_)) && !user_allow_other() {
            return Err(MaskError::NotShared);
        }
        let at = |err| MaskError::Mountpoint {
            path: mountpoint.to_path_buf(),
            err,
        };
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(mountpoint)
                .map_err(at)?;
        }
        let device = match mount_with(&mounter, mountpoint, shared) {
            Ok(device) => device,
            Err(err) => {
                let _ = std::fs::remove_dir(mountpoint);
                return Err(err);
            }
        };
        let (wake, stop) = match sys::pipe_cloexec() {
            Ok(pair) => pair,
            Err(err) => {
                unmount(&mounter, mountpoint);
                return Err(MaskError::Thread(err));
            }
        };
        let owner = (sys::getuid(), sys::getgid());
        let nodes = masks.to_vec();
        let spawned = std::thread::Builder::new()
            .name("palisade-masks".to_owned())
            .spawn(move || serve(File::from(device), &wake, &nodes, owner));
        match spawned {
            Ok(thread) => Ok(MaskServer {
                mounted: Some((mountpoint.to_path_buf(), mounter)),
                stop: Some(stop),
                thread: Some(thread),
            }),
            Err(err) => {
                unmount(&mounter, mountpoint);
                Err(MaskError::Thread(err))
            }
        }
    }

    /// Serves masks that the sandbox mounts itself: the Landlock sandbox's init, in the user
    /// and mount namespaces it makes, where any user may mount a FUSE filesystem without
    /// `fusermount3` (the kernel wants the `/dev/fuse` descriptor opened in the namespace that
    /// mounts it) and the mount goes with the namespace, so nothing is left to unmount. Init
    /// sends the descriptor over `socket` once it has mounted it; node `i` is mask `i` of
    /// `masks`. If nothing arrives before [`MaskServer::finish`], nothing was seen.
    pub fn serve_sent(socket: OwnedFd, masks: &[DeniedMask]) -> Result<MaskServer, MaskError> {
        let (wake, stop) = sys::pipe_cloexec().map_err(MaskError::Thread)?;
        let owner = (sys::getuid(), sys::getgid());
        let nodes = masks.to_vec();
        let thread = std::thread::Builder::new()
            .name("palisade-masks".to_owned())
            .spawn(move || match receive_device(&socket, &wake) {
                Ok(device) => serve(device, &wake, &nodes, owner),
                Err(seen) => seen,
            })
            .map_err(MaskError::Thread)?;
        Ok(MaskServer {
            mounted: None,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The mount's root (node `i` is `root/i`), when this process mounted it.
    pub fn mountpoint(&self) -> Option<&Path> {
        self.mounted.as_ref().map(|(path, _)| path.as_path())
    }

    /// Stops serving (the connection is aborted: a sandbox still alive would get `ENOTCONN`),
    /// unmounts, removes the mountpoint, and returns what was seen.
    pub fn finish(mut self) -> Seen {
        self.stop_and_unmount()
    }

    fn stop_and_unmount(&mut self) -> Seen {
        // Closing the write end wakes the server, which returns and closes the device.
        drop(self.stop.take());
        let seen = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(seen)) => seen,
            Some(Err(_)) => Seen {
                error: Some("the server thread panicked".to_owned()),
                ..Seen::default()
            },
            None => Seen::default(),
        };
        if let Some((mountpoint, mounter)) = &self.mounted {
            unmount(mounter, mountpoint);
        }
        seen
    }
}

/// The `/dev/fuse` descriptor the sandbox sends over `socket`, or what was seen instead when
/// `wake` ends the wait first or the sandbox closes its end without sending one (it then
/// reports why itself).
fn receive_device(socket: &OwnedFd, wake: &OwnedFd) -> Result<File, Seen> {
    loop {
        let (socket_events, wake_events) = sys::poll_two(socket.as_raw_fd(), wake.as_raw_fd());
        if wake_events != 0 {
            return Err(Seen::default());
        }
        if socket_events == 0 {
            continue;
        }
        return match sys::recv_fd(socket) {
            Ok(Some(device)) => Ok(File::from(device)),
            Ok(None) => Err(Seen::default()),
            Err(err) => Err(Seen {
                error: Some(format!("receiving the masks' /dev/fuse: {err}")),
                ..Seen::default()
            }),
        };
    }
}

impl Drop for MaskServer {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop_and_unmount();
        }
    }
}

/// Unmounts a mask a dead run left at `mountpoint` (its server is gone: every access there
/// already fails with `ENOTCONN`) and removes the mountpoint. Best effort.
pub fn unmount_stale(mountpoint: &Path) {
    if let Ok(mounter) = mounter() {
        unmount(&mounter, mountpoint);
    }
}

/// Whether `/etc/fuse.conf` lets unprivileged users mount with `allow_other`.
pub fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf").is_ok_and(|conf| {
        conf.lines()
            .any(|line| line.split('#').next().unwrap_or("").trim() == "user_allow_other")
    })
}

/// The `/dev/fuse` descriptor of the new mount.
fn mount_with(mounter: &Mounter, mountpoint: &Path, shared: bool) -> Result<OwnedFd, MaskError> {
    match mounter {
        Mounter::Kernel => {
            let device = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/fuse")
                .map_err(MaskError::Device)?;
            let options = kernel_mount_options(device.as_raw_fd(), sys::getuid(), sys::getgid());
            sys::mount_fuse(mountpoint, &options).map_err(MaskError::Mount)?;
            Ok(device.into())
        }
        Mounter::Fusermount(helper) => {
            let failed = |why: String| MaskError::Helper {
                helper: helper.clone(),
                why,
            };
            let (ours, theirs) = sys::socketpair_cloexec().map_err(|e| failed(e.to_string()))?;
            let inherited =
                sys::dup_inheritable(theirs.as_fd()).map_err(|e| failed(e.to_string()))?;
            // The helper mounts, sends the descriptor and exits. (Its `auto_unmount` would save
            // the second exec at `finish`, but it unmounts only a mount it can look at as root,
            // so only with `allow_other`, and measured here it was slower: 4.6 ms per run
            // against 3.7 ms, leaving a process per run for init to reap.)
            let output = Command::new(helper)
                .arg("-o")
                .arg(if shared {
                    "fsname=palisade-mask,subtype=palisade-mask,allow_other"
                } else {
                    "fsname=palisade-mask,subtype=palisade-mask"
                })
                .arg("--")
                .arg(mountpoint)
                .env_clear()
                .env("_FUSE_COMMFD", inherited.as_raw_fd().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output();
            drop(inherited);
            drop(theirs);
            let output = output.map_err(|e| failed(e.to_string()))?;
            if !output.status.success() {
                return Err(failed(format!(
                    "{}: {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                )));
            }
            match sys::recv_fd(&ours) {
                Ok(Some(device)) => Ok(device),
                Ok(None) => Err(failed("it sent no descriptor".to_owned())),
                Err(err) => Err(failed(err.to_string())),
            }
        }
    }
}

/// The options of a mount made directly with `mount(2)` (as root, or in a user namespace of
/// one's own): the filesystem served through `/dev/fuse` descriptor `fd`, its root a
/// directory, owned by `uid`/`gid`, open to every user of the mount's namespace (a container
/// daemon's, or a sandbox's nested ones).
pub(crate) fn kernel_mount_options(fd: RawFd, uid: u32, gid: u32) -> String {
    format!("fd={fd},rootmode=40000,user_id={uid},group_id={gid},allow_other")
}

/// Unmounts (lazily: a sandbox still holding it keeps its copy until it goes) and removes the
/// mountpoint. Best effort: a mount left behind refuses everything (its server is gone), and
/// the next run's sweep removes it.
fn unmount(mounter: &Mounter, mountpoint: &Path) {
    match mounter {
        Mounter::Kernel => {
            let _ = sys::unmount_detach(mountpoint);
        }
        Mounter::Fusermount(helper) => {
            let _ = Command::new(helper)
                .args(["-u", "-z", "-q", "--"])
                .arg(mountpoint)
                .env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
    let _ = std::fs::remove_dir(mountpoint);
}

// ---------------------------------------------------------------------------------------------
// The protocol: just enough of FUSE 7.31 to refuse.

mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const STATFS: u32 = 17;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
    pub const RENAME2: u32 = 45;
    pub const STATX: u32 = 52;
    pub const TMPFILE: u32 = 51;
}

const ROOT: u64 = 1;
const HEADER: usize = 40;
/// Room for any request but a large `SETXATTR` (which the kernel then fails with `E2BIG`).
const BUFFER: usize = 64 * 1024 + 4096;
/// The kernel's `__FMODE_EXEC` in an `open`'s flags: the open of `execve`.
const FMODE_EXEC: u32 = 0x20;
/// How long the kernel may cache the masks' attributes and names: they never change.
const VALID_SECONDS: u64 = 3600;

struct Request<'a> {
    opcode: u32,
    unique: u64,
    node: u64,
    pid: u32,
    body: &'a [u8],
}

impl<'a> Request<'a> {
    fn parse(bytes: &'a [u8]) -> Option<Request<'a>> {
        let header = bytes.get(..HEADER)?;
        let u32_at = |at: usize| {
            header
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_ne_bytes)
        };
        let u64_at = |at: usize| {
            header
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_ne_bytes)
        };
        let len = usize::try_from(u32_at(0)).ok()?;
        Some(Request {
            opcode: u32_at(4),
            unique: u64_at(8),
            node: u64_at(16),
            pid: u32_at(32),
            body: bytes.get(HEADER..len.min(bytes.len()))?,
        })
    }

    fn u32_at(&self, at: usize) -> u32 {
        self.body
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_ne_bytes)
    }

    /// The NUL-terminated name starting `skip` bytes into the body.
    fn name(&self, skip: usize) -> &'a OsStr {
        let rest = self.body.get(skip..).unwrap_or(&[]);
        let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
        OsStr::from_bytes(rest.get(..end).unwrap_or(rest))
    }
}

fn serve(mut device: File, wake: &OwnedFd, nodes: &[DeniedMask], owner: (u32, u32)) -> Seen {
    let mut seen = Seen::default();
    let mut buffer = vec![0u8; BUFFER];
    loop {
        let (device_events, wake_events) = sys::poll_two(device.as_raw_fd(), wake.as_raw_fd());
        if wake_events != 0 {
            break;
        }
        if device_events & libc::POLLIN == 0 {
            if device_events & (libc::POLLERR | libc::POLLHUP) != 0 {
                break;
            }
            continue;
        }
        let n = match device.read(&mut buffer) {
            Ok(n) => n,
            Err(err) => match err.raw_os_error() {
                // Interrupted, nothing there after all, or a request the kernel withdrew.
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // Unmounted: the connection is gone.
                Some(libc::ENODEV) => break,
                _ => {
                    seen.error = Some(format!("reading /dev/fuse: {err}"));
                    break;
                }
            },
        };
        let Some(request) = buffer.get(..n).and_then(Request::parse) else {
            continue;
        };
        if let Some(reply) = answer(&request, nodes, owner, &mut seen) {
            // ENOENT: the request was interrupted meanwhile; nothing to do.
            let _ = device.write(&reply);
        }
    }
    seen
}

/// The reply to one request (`None` for those that take none), recording what it refuses.
fn answer(
    request: &Request<'_>,
    nodes: &[DeniedMask],
    owner: (u32, u32),
    seen: &mut Seen,
) -> Option<Vec<u8>> {
    let node = request
        .node
        .checked_sub(2)
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| Some((i, nodes.get(i)?)));
    let is_root = request.node == ROOT;
    let mut refuse = |op: FileOp, name: Option<&OsStr>| match node {
        Some((i, mask)) => {
            let path = match name {
                Some(name) if !name.is_empty() => mask.target.join(name),
                _ => mask.target.clone(),
            };
            seen.record(op, path, i, request.pid);
            Some(error(request, libc::EACCES))
        }
        None => Some(error(request, libc::ENOENT)),
    };
    match request.opcode {
        op::INIT => Some(init(request)),
        op::FORGET | op::BATCH_FORGET | op::INTERRUPT => None,
        op::DESTROY => Some(reply(request, &[])),
        op::LOOKUP if is_root => {
            let index = request
                .name(0)
                .to_str()
                .and_then(|name| name.parse::<usize>().ok())
                .filter(|i| request.name(0) == i.to_string().as_str())
                .and_then(|i| Some((i, nodes.get(i)?)));
            match index {
                Some((i, mask)) => {
                    let mut body = Vec::with_capacity(128);
                    body.extend((i as u64 + 2).to_ne_bytes()); // nodeid
                    body.extend(0u64.to_ne_bytes()); // generation
                    body.extend(VALID_SECONDS.to_ne_bytes()); // entry_valid
                    body.extend(VALID_SECONDS.to_ne_bytes()); // attr_valid
                    body.extend(0u32.to_ne_bytes());
                    body.extend(0u32.to_ne_bytes());
                    attr(&mut body, i as u64 + 2, mask.dir, owner);
                    Some(reply(request, &body))
                }
                None => Some(error(request, libc::ENOENT)),
            }
        }
        op::LOOKUP => refuse(FileOp::Read, Some(request.name(0))),
        op::GETATTR if is_root || node.is_some() => {
            let mut body = Vec::with_capacity(104);
            body.extend(VALID_SECONDS.to_ne_bytes());
            body.extend(0u32.to_ne_bytes());
            body.extend(0u32.to_ne_bytes());
            let dir = node.is_none_or(|(_, mask)| mask.dir);
            attr_of(&mut body, request.node, dir, owner, is_root);
            Some(reply(request, &body))
        }
        op::STATFS => Some(reply(request, &[0u8; 80])),
        op::OPEN => {
            let flags = request.u32_at(0);
            let op = if flags & FMODE_EXEC != 0 {
                FileOp::Exec
            } else if flags & libc::O_ACCMODE as u32 == libc::O_RDONLY as u32 {
                FileOp::Read
            } else {
                FileOp::Write
            };
            refuse(op, None)
        }
        op::OPENDIR => refuse(FileOp::Read, None),
        op::ACCESS => {
            let mask = request.u32_at(0);
            if mask == libc::F_OK as u32 {
                // Whether it exists: it does, as `stat` shows.
                return Some(reply(request, &[]));
            }
            let op = if mask & libc::W_OK as u32 != 0 {
                FileOp::Write
            } else if mask & libc::X_OK as u32 != 0 {
                FileOp::Exec
            } else {
                FileOp::Read
            };
            refuse(op, None)
        }
        op::CREATE | op::TMPFILE => refuse(FileOp::Create, Some(request.name(16))),
        op::MKNOD => refuse(FileOp::Create, Some(request.name(16))),
        op::MKDIR => refuse(FileOp::Create, Some(request.name(8))),
        op::SYMLINK => refuse(FileOp::Create, Some(request.name(0))),
        op::LINK => refuse(FileOp::Create, Some(request.name(8))),
        op::UNLINK | op::RMDIR => refuse(FileOp::Remove, Some(request.name(0))),
        op::RENAME => refuse(FileOp::Remove, Some(request.name(8))),
        op::RENAME2 => refuse(FileOp::Remove, Some(request.name(16))),
        op::SETATTR | op::SETXATTR | op::REMOVEXATTR => refuse(FileOp::Write, None),
        op::GETXATTR | op::LISTXATTR => Some(error(request, libc::EOPNOTSUPP)),
        op::READLINK => Some(error(request, libc::EINVAL)),
        // The kernel falls back to GETATTR.
        op::STATX => Some(error(request, libc::ENOSYS)),
        // Nothing else can reach a node that is never opened; refuse whatever it is.
        _ => Some(error(request, libc::EACCES)),
    }
}

/// The `INIT` reply: protocol 7.31 (or the kernel's, if older), no optional features.
fn init(request: &Request<'_>) -> Vec<u8> {
    let major = request.u32_at(0);
    let minor = request.u32_at(4);
    let max_readahead = request.u32_at(8);
    if major != 7 {
        // Reply with our major version; the kernel then offers 7 or gives up.
        let mut body = Vec::with_capacity(64);
        body.extend(7u32.to_ne_bytes());
        body.resize(64, 0);
        return reply(request, &body);
    }
    let mut body = Vec::with_capacity(64);
    body.extend(7u32.to_ne_bytes());
    body.extend(minor.min(31).to_ne_bytes());
    body.extend(max_readahead.to_ne_bytes());
    body.extend(0u32.to_ne_bytes()); // flags
    body.extend(16u16.to_ne_bytes()); // max_background
    body.extend(12u16.to_ne_bytes()); // congestion_threshold
    body.extend(4096u32.to_ne_bytes()); // max_write
    body.extend(1u32.to_ne_bytes()); // time_gran
    body.resize(64, 0);
    reply(request, &body)
}

/// A node's attributes: no permission bits, empty, owned by the mounting user.
fn attr(body: &mut Vec<u8>, ino: u64, dir: bool, owner: (u32, u32)) {
    attr_of(body, ino, dir, owner, false);
}

fn attr_of(body: &mut Vec<u8>, ino: u64, dir: bool, owner: (u32, u32), root: bool) {
    let kind = if dir { libc::S_IFDIR } else { libc::S_IFREG };
    // The root is only ever seen on the host, by the launcher (bwrap looks its nodes up).
    let permissions = if root { 0o500 } else { 0o000 };
    body.extend(ino.to_ne_bytes());
    body.extend(0u64.to_ne_bytes()); // size
    body.extend(0u64.to_ne_bytes()); // blocks
    for _ in 0..3 {
        body.extend(0u64.to_ne_bytes()); // atime, mtime, ctime
    }
    for _ in 0..3 {
        body.extend(0u32.to_ne_bytes()); // their nanoseconds
    }
    body.extend((kind | permissions).to_ne_bytes());
    body.extend((if dir { 2u32 } else { 1u32 }).to_ne_bytes());
    body.extend(owner.0.to_ne_bytes());
    body.extend(owner.1.to_ne_bytes());
    body.extend(0u32.to_ne_bytes()); // rdev
    body.extend(4096u32.to_ne_bytes()); // blksize
    body.extend(0u32.to_ne_bytes()); // flags
}

fn reply(request: &Request<'_>, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(16 + body.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend(len.to_ne_bytes());
    out.extend(0i32.to_ne_bytes());
    out.extend(request.unique.to_ne_bytes());
    out.extend(body);
    out
}

fn error(request: &Request<'_>, errno: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.extend(16u32.to_ne_bytes());
    out.extend((-errno).to_ne_bytes());
    out.extend(request.unique.to_ne_bytes());
    out
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]
mod tests {
    use super::*;

    fn request(opcode: u32, node: u64, body: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend(u32::try_from(HEADER + body.len()).unwrap().to_ne_bytes());
        bytes.extend(opcode.to_ne_bytes());
        bytes.extend(7u64.to_ne_bytes());
        bytes.extend(node.to_ne_bytes());
        bytes.extend([0u8; 12]); // uid, gid, pid 0 (no /proc/0: an empty command)
        bytes.extend([0u8; 4]);
        bytes.extend(body);
        bytes
    }

    fn nodes() -> Vec<DeniedMask> {
        vec![
            DeniedMask {
                target: "/home/u/.aws".into(),
                dir: true,
                denied: vec!["/home/u/.aws".into()],
            },
            DeniedMask {
                target: "/home/u/.netrc".into(),
                dir: false,
                denied: vec!["/home/u/.netrc".into()],
            },
        ]
    }

    fn errno_of(reply: &[u8]) -> i32 {
        -i32::from_ne_bytes(reply[4..8].try_into().unwrap())
    }

    fn ask(opcode: u32, node: u64, body: &[u8], seen: &mut Seen) -> Vec<u8> {
        let bytes = request(opcode, node, body);
        let request = Request::parse(&bytes).unwrap();
        answer(&request, &nodes(), (1000, 1000), seen).unwrap()
    }

    #[test]
    fn the_root_shows_its_nodes_by_index_and_nothing_else() {
        let mut seen = Seen::default();
        let entry = ask(op::LOOKUP, ROOT, b"1\0", &mut seen);
        assert_eq!(errno_of(&entry), 0);
        assert_eq!(entry.len(), 16 + 128);
        assert_eq!(u64::from_ne_bytes(entry[16..24].try_into().unwrap()), 3);
        // mode: a regular file with no permission bits
        let mode = u32::from_ne_bytes(entry[16 + 40 + 60..16 + 40 + 64].try_into().unwrap());
        assert_eq!(mode, libc::S_IFREG);
        for name in [&b"2\0"[..], b"01\0", b"x\0", b"\0"] {
            assert_eq!(
                errno_of(&ask(op::LOOKUP, ROOT, name, &mut seen)),
                libc::ENOENT
            );
        }
        assert_eq!(seen.total, 0, "the launcher's lookups are no denial");
    }

    #[test]
    fn every_access_beneath_a_mask_is_refused_and_recorded() {
        let mut seen = Seen::default();
        let cases: [(u32, u64, Vec<u8>, FileOp, &str); 9] = [
            (
                op::LOOKUP,
                2,
                b"credentials\0".to_vec(),
                FileOp::Read,
                "/home/u/.aws/credentials",
            ),
            (op::OPENDIR, 2, vec![0; 8], FileOp::Read, "/home/u/.aws"),
            (op::OPEN, 3, vec![0; 8], FileOp::Read, "/home/u/.netrc"),
            (
                op::OPEN,
                3,
                [1u32.to_ne_bytes(), [0; 4]].concat(),
                FileOp::Write,
                "/home/u/.netrc",
            ),
            (
                op::OPEN,
                3,
                [FMODE_EXEC.to_ne_bytes(), [0; 4]].concat(),
                FileOp::Exec,
                "/home/u/.netrc",
            ),
            (
                op::MKDIR,
                2,
                [vec![0; 8], b"new\0".to_vec()].concat(),
                FileOp::Create,
                "/home/u/.aws/new",
            ),
            (
                op::CREATE,
                2,
                [vec![0; 16], b"f\0".to_vec()].concat(),
                FileOp::Create,
                "/home/u/.aws/f",
            ),
            (
                op::UNLINK,
                2,
                b"config\0".to_vec(),
                FileOp::Remove,
                "/home/u/.aws/config",
            ),
            (op::SETATTR, 3, vec![0; 88], FileOp::Write, "/home/u/.netrc"),
        ];
        for (opcode, node, body, op, path) in &cases {
            let reply = ask(*opcode, *node, body, &mut seen);
            assert_eq!(errno_of(&reply), libc::EACCES, "{opcode}");
            assert!(
                seen.events
                    .iter()
                    .any(|e| (e.op, e.path.as_path()) == (*op, Path::new(path))),
                "{opcode}: {:?}",
                seen.events
            );
        }
        assert_eq!(seen.total, 9);
        // The same again is one event with a count.
        ask(op::OPEN, 3, &[0; 8], &mut seen);
        assert_eq!(seen.events.len(), 8);
        assert_eq!(seen.events[2].count, 2);
    }

    #[test]
    fn looking_at_a_mask_is_no_denial() {
        let mut seen = Seen::default();
        let attr = ask(op::GETATTR, 2, &[0; 16], &mut seen);
        assert_eq!(errno_of(&attr), 0);
        let mode = u32::from_ne_bytes(attr[16 + 16 + 60..16 + 16 + 64].try_into().unwrap());
        assert_eq!(mode, libc::S_IFDIR);
        let exists = ask(op::ACCESS, 2, &[0; 8], &mut seen);
        assert_eq!(errno_of(&exists), 0);
        assert_eq!(
            errno_of(&ask(op::GETXATTR, 2, &[0; 8], &mut seen)),
            libc::EOPNOTSUPP
        );
        assert_eq!(seen.total, 0);
        // An unknown node is not a mask: nothing to record.
        assert_eq!(
            errno_of(&ask(op::OPEN, 9, &[0; 8], &mut seen)),
            libc::ENOENT
        );
        assert_eq!(seen.total, 0);
    }

    #[test]
    fn events_are_bounded() {
        let mut seen = Seen::default();
        for i in 0..(MAX_EVENTS + 10) {
            seen.record(FileOp::Read, PathBuf::from(format!("/m/{i}")), 0, 0);
        }
        assert_eq!(seen.events.len(), MAX_EVENTS);
        assert_eq!((seen.total, seen.dropped), (MAX_EVENTS as u64 + 10, 10));
    }
}
