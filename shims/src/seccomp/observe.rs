//! The observer: the supervisor's side of an [`observed`](super::Program::observed) filter.
//!
//! The sandboxed process installs the observed program ([`super::install_observed`]) and sends
//! its listener here over a Unix socket: one end of a socket pair it inherited (bwrap), or a
//! connection to a listening socket bound into the container ([`Channel::Listening`], docker). A thread then answers every call the program stopped
//! with exactly the errno the plain program returns ([`super::judge`]; `EPERM` for anything it
//! does not recognise) and counts it. It never lets a refused call run: its answer to one is an
//! error, and if the thread is gone the kernel fails the call with `ENOSYS`. So the filter
//! stays the enforcement; the observer only learns of each refusal and picks the error the
//! plain filter would have given.
//!
//! One call is stopped only to be looked at: `connect` under bwrap and docker ([`super::Action::Observe`]),
//! which the plain program allows. The observer reads the address from the caller's memory,
//! records a connection the sandbox cannot make (an IP address outside the network namespace's
//! own loopback, or a host socket the command's view hides: [`Watch`]), and lets the call run, so the
//! kernel refuses it exactly as it would unobserved, with the namespace's or the mask's own
//! error. The address is read while the caller is stopped, but another thread of the command
//! could change it before the kernel reads it again: that can only falsify this record (the
//! kernel decides on what it reads), never let a connection through. A raw IP or packet
//! `socket` is stopped the same way, only to be looked at: the kernel refuses it to a process
//! without `CAP_NET_RAW` (which no sandbox has), and the observer records that refusal.
//!
//! Bounded: at most [`MAX_CALLS`] distinct calls are kept (the same syscall under the same rule
//! and target is one entry with a count); the rest are only counted. A call costs one round trip
//! to this thread, and only refused calls and `connect` are stopped; other calls never reach it.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use super::{Action, Arch, Profile, judge};
use crate::sys;

/// What the observer checks each `connect` it stops against (bwrap and docker; empty elsewhere).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    /// The sandbox has a network namespace of its own with only its loopback up: an IP address
    /// outside `127.0.0.0/8`, `::1` (and the unspecified address, which means loopback) has no
    /// route there, its loopback ports are not the host's, and neither are its abstract
    /// sockets.
    pub own_network: bool,
    /// The host's listening pathname Unix sockets (`/proc/net/unix`), at their real paths. A
    /// `connect` to one that the command's own view of the filesystem does not have as a socket
    /// (masked, or under a private `/tmp` or `/run`) is refused.
    pub host_sockets: Vec<PathBuf>,
    /// The sandbox shares the host's network namespace, and the stub has scoped it out of the
    /// abstract Unix sockets created outside its Landlock domain (`allow-outbound`, Landlock
    /// ABI 6): a `connect` to an abstract socket no process of the sandbox holds is refused
    /// (`EPERM`).
    pub abstract_scoped: bool,
}

impl Watch {
    /// What to watch for a sandbox of `reach` under bwrap or docker (the stub scopes abstract
    /// sockets under [`Reach::Everything`](crate::plan::Reach::Everything) where the kernel
    /// can), with the host's listening pathname sockets.
    #[must_use]
    pub fn for_reach(reach: crate::plan::Reach, host_sockets: Vec<PathBuf>) -> Self {
        let shared = reach == crate::plan::Reach::Everything;
        Self {
            own_network: !shared,
            host_sockets,
            abstract_scoped: shared
                && crate::landlock::kernel_abi()
                    .is_ok_and(|abi| abi >= crate::landlock_abi::SCOPES),
        }
    }
}

/// Distinct calls kept; the rest are counted in [`Observed::dropped`].
pub const MAX_CALLS: usize = 64;

/// One kind of refused call: a syscall under one rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedCall {
    /// The syscall's name (`ptrace`, `socket`, …), or `nr N` for one no rule names (x32).
    pub syscall: String,
    /// The rule's condition (`always`, `arg0 in {AF_INET (0x2)}`, …).
    pub condition: String,
    /// What the rule closes, in the rule table's words.
    pub closes: String,
    /// The errno the call failed with (for a `connect` or `sendto` the observer let run: the
    /// one the namespace or the mask gives; 0 for a datagram sent where nothing listens).
    pub errno: i32,
    /// For `socket`: the family asked for.
    pub socket_family: Option<String>,
    /// Whether a socket rule of the network reach refused it (rather than a base rule).
    pub network_rule: bool,
    /// For a `connect` the observer let the kernel refuse: the address (`203.0.113.7:443`,
    /// `[2001:db8::1]:443`, or a socket's path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The first caller: its pid (as the supervisor sees it) and command name.
    pub pid: u32,
    pub command: String,
    pub count: u64,
}

/// Everything the observer saw during a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    /// Every refused call.
    pub total: u64,
    /// Calls not kept once [`MAX_CALLS`] distinct ones were.
    pub dropped: u64,
    pub calls: Vec<ObservedCall>,
    /// Why observing stopped early, if it did (the calls were still refused by the kernel).
    pub error: Option<String>,
    /// Whether a listener arrived (false: the command never got as far as its filter).
    pub listening: bool,
}

/// The observer's answer to a stopped call.
enum Answer {
    /// Fail it with this errno (a call the filter refuses).
    Error(i32),
    /// Let it run (a call stopped only to be looked at).
    Continue,
}

impl Observed {
    /// Records `notif` if it is a refusal, or a `connect` the sandbox will refuse, and answers
    /// it.
    fn answer(
        &mut self,
        notif: &sys::SeccompNotif,
        arch: Arch,
        profile: &Profile,
        watch: &Watch,
        listener: &OwnedFd,
        listening: &mut SandboxListeners,
    ) -> Answer {
        // One lookup of the plain rules per call: a refusal is answered from it, and only a
        // call they allow can be one stopped just to be looked at.
        let native = notif.arch == arch.audit_arch();
        let judgement = native
            .then(|| judge(arch, profile, notif.nr, &notif.args))
            .flatten();
        let looked_at = (native && judgement.is_none())
            .then(|| super::observe_rule(arch, profile, notif.nr, &notif.args))
            .flatten();
        if let Some(syscall) = looked_at {
            if let Some(refused) = refused_destination(syscall, notif, watch, listening)
                // Read while the caller waited: not a recycled pid's memory.
                && sys::seccomp_notif_id_valid(listener, notif.id)
            {
                self.keep(ObservedCall {
                    syscall: syscall.to_owned(),
                    condition: refused.condition.to_owned(),
                    closes: refused.closes.to_owned(),
                    errno: refused.errno,
                    socket_family: Some(refused.family.to_owned()),
                    network_rule: true,
                    target: Some(refused.target),
                    pid: notif.pid,
                    command: String::new(),
                    count: 1,
                });
            }
            return Answer::Continue;
        }
        Answer::Error(self.record(notif, judgement.as_ref()))
    }

    /// Adds one call, merged into an equal one (same syscall, condition and target), or counted
    /// as dropped once [`MAX_CALLS`] are kept.
    fn keep(&mut self, call: ObservedCall) {
        self.total = self.total.saturating_add(1);
        if let Some(same) = self.calls.iter_mut().find(|c| {
            c.syscall == call.syscall && c.condition == call.condition && c.target == call.target
        }) {
            same.count = same.count.saturating_add(1);
        } else if self.calls.len() < MAX_CALLS {
            self.calls.push(ObservedCall {
                command: command_name(call.pid),
                ..call
            });
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }

    /// Records a refused call under `judgement`, the plain rules' verdict on it (`None` for a
    /// call of another ABI, which the program kills before it can be stopped, or one no rule
    /// names), and returns the errno to answer with.
    fn record(&mut self, notif: &sys::SeccompNotif, judgement: Option<&super::Judgement>) -> i32 {
        let errno = match judgement.map(|j| j.action) {
            Some(Action::Errno(errno)) => i32::from(errno),
            // The program only stops calls it would fail; anything else is refused as well.
            _ => libc::EPERM,
        };
        let (syscall, condition) = match judgement {
            Some(j) => (j.syscall.to_owned(), j.condition.clone()),
            None => (format!("nr {}", notif.nr), "x32 or unknown".to_owned()),
        };
        self.keep(ObservedCall {
            syscall,
            condition,
            closes: judgement
                .map_or("a syscall outside the filter's ABI", |j| j.closes)
                .to_owned(),
            errno,
            socket_family: judgement.and_then(|j| j.socket_family.clone()),
            network_rule: judgement.is_some_and(|j| j.network_rule),
            target: None,
            pid: notif.pid,
            command: String::new(),
            count: 1,
        });
        errno
    }
}

/// A `connect` or `sendto` the sandbox will refuse, as the observer recorded it.
struct RefusedConnect {
    condition: &'static str,
    closes: &'static str,
    /// The error the namespace or the mask gives; 0 for a datagram the call sends to a port
    /// nothing listens on (it goes nowhere).
    errno: i32,
    family: &'static str,
    target: String,
}

/// The conditions of the `connect` refusals the observer records.
pub const UNROUTABLE: &str = "an address outside the sandbox's network namespace";
pub const HOST_LOOPBACK_PORT: &str = "a port of the host's loopback the plan does not list";
pub const MASKED_SOCKET: &str = "a host socket the sandbox masks";
pub const PRIVATE_SOCKET: &str = "a host socket under a directory the sandbox keeps private";
pub const HOST_ABSTRACT_SOCKET: &str = "an abstract socket of the host's network namespace";
pub const RAW_SOCKET: &str = "a raw socket, which needs CAP_NET_RAW";

/// `CAP_NET_RAW`'s bit in `/proc/PID/status`'s `CapEff`.
const CAP_NET_RAW: u32 = 13;

/// A raw `socket` (`SOCK_RAW`, `SOCK_PACKET`) by a process without `CAP_NET_RAW` in its
/// effective set: the kernel refuses it with `EPERM`. `None` when it holds the capability, or
/// its status cannot be read.
fn refused_raw_socket(notif: &sys::SeccompNotif) -> Option<RefusedConnect> {
    let [family, kind, ..] = notif.args;
    let status = std::fs::read_to_string(format!("/proc/{}/status", notif.pid)).ok()?;
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())?;
    if effective & (1 << CAP_NET_RAW) != 0 {
        return None;
    }
    let family = (family & 0xFFFF_FFFF) as u32;
    // `SOCK_PACKET` (10), obsolete and deprecated in libc, but still taken by the kernel.
    let kind = if kind & 0xF == 10 {
        "SOCK_PACKET"
    } else {
        "SOCK_RAW"
    };
    Some(RefusedConnect {
        condition: RAW_SOCKET,
        closes: "raw sockets (a packet sniffer's, `ping`'s SOCK_RAW): the sandbox holds no capability",
        errno: libc::EPERM,
        family: super::rules::family_name(family).unwrap_or("AF_?"),
        target: kind.to_owned(),
    })
}

/// Whether `/proc/net/unix` under `net_dir` lists a socket bound to `name` (`@…` for an
/// abstract one, as the table shows it). `None` when the table cannot be read.
fn unix_table_has(net_dir: &str, name: &str) -> Option<bool> {
    let text = std::fs::read_to_string(format!("{net_dir}/unix")).ok()?;
    // `Num RefCount Protocol Flags Type St Inode Path`: the path is the eighth field.
    Some(
        text.lines()
            .skip(1)
            .any(|line| line.split_whitespace().nth(7) == Some(name)),
    )
}

/// The inodes of the sockets `/proc/net/unix` under `net_dir` lists as bound to `name`.
/// `None` when the table cannot be read.
fn unix_table_inodes(net_dir: &str, name: &str) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(format!("{net_dir}/unix")).ok()?;
    Some(
        text.lines()
            .skip(1)
            .filter_map(|line| {
                let mut fields = line.split_whitespace().skip(6);
                let inode = fields.next()?;
                (fields.next() == Some(name)).then(|| inode.parse().ok())?
            })
            .collect(),
    )
}

/// Whether a process of the sandbox `pid` is in holds a socket with one of `inodes`, looked up
/// in the sandbox's own `/proc` (its PID namespace) through `pid`'s root. `None` when the
/// descriptors of one of its processes cannot be read: then nothing is recorded, since a
/// socket the sandbox holds is no refusal. The sandbox's PID 1 (Palisade's init, or
/// `docker-init`) is skipped: it is not dumpable, and holds nothing of the command's.
fn sandbox_holds(pid: u32, inodes: &[u64]) -> Option<bool> {
    for process in std::fs::read_dir(format!("/proc/{pid}/root/proc")).ok()? {
        let process = process.ok()?;
        let name = process.file_name();
        let Some(number) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if number == "1" {
            continue;
        }
        let descriptors = match std::fs::read_dir(process.path().join("fd")) {
            Ok(descriptors) => descriptors,
            // Exited meanwhile.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(_) => return None,
        };
        for descriptor in descriptors.flatten() {
            let Ok(target) = std::fs::read_link(descriptor.path()) else {
                continue;
            };
            let inode = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse::<u64>().ok());
            if inode.is_some_and(|inode| inodes.contains(&inode)) {
                return Some(true);
            }
        }
    }
    Some(false)
}

/// Whether something in the network namespace whose `/proc/<pid>/net` is `net_dir` listens
/// (TCP; not asked for a datagram) or is bound (UDP) on `port` at a loopback or wildcard
/// address, IPv4 or IPv6. `None` when no table can be read.
///
/// Bounded by the listeners, not the connections: the kernel writes a TCP table's listening
/// sockets first, and the lines are read as the kernel makes them, so reading stops at the
/// first line that is not `LISTEN`. (Read whole, a table holding the `TIME_WAIT`s of thousands
/// of recent connections made every loopback `connect` pay for all of them.)
fn listens_on(net_dir: &str, port: u16, datagram: bool) -> Option<bool> {
    use std::io::BufRead as _;
    let mut read_any = false;
    for (table, tcp) in [
        ("tcp", true),
        ("tcp6", true),
        ("udp", false),
        ("udp6", false),
    ] {
        if datagram && tcp {
            continue;
        }
        let Ok(file) = std::fs::File::open(format!("{net_dir}/{table}")) else {
            continue;
        };
        read_any = true;
        for line in std::io::BufReader::new(file).lines().skip(1) {
            let Ok(line) = line else {
                break;
            };
            if tcp && line.split_whitespace().nth(3) != Some(TCP_LISTEN) {
                break;
            }
            if socket_line_matches(&line, port, tcp) {
                return Some(true);
            }
        }
    }
    read_any.then_some(false)
}

/// `st` of a listening TCP socket in `/proc/net/tcp[6]`.
const TCP_LISTEN: &str = "0A";

/// One line of `/proc/net/{tcp,udp}[6]`: `sl local_address rem_address st …`, the local address
/// as hex words in host byte order then `:PORT` in hex; TCP state `0A` is `LISTEN`.
fn socket_line_matches(line: &str, port: u16, tcp: bool) -> bool {
    let mut fields = line.split_whitespace();
    let (Some(_), Some(local), Some(_), Some(state)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    let Some((address, local_port)) = local.split_once(':') else {
        return false;
    };
    if u16::from_str_radix(local_port, 16) != Ok(port) || (tcp && state != TCP_LISTEN) {
        return false;
    }
    // Each 32-bit word is the address's bytes read as a native integer, printed in hex: the
    // native bytes of the parsed word are the address's bytes, in network order.
    let mut bytes = Vec::with_capacity(16);
    for word in address.as_bytes().chunks(8) {
        let Some(word) = std::str::from_utf8(word)
            .ok()
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        else {
            return false;
        };
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    if let Ok(v4) = <[u8; 4]>::try_from(bytes.as_slice()) {
        is_local(IpAddr::from(v4))
    } else if let Ok(v6) = <[u8; 16]>::try_from(bytes.as_slice()) {
        is_local(IpAddr::from(v6))
    } else {
        false
    }
}

/// Whether `ip` stays on the namespace's own loopback: a loopback address, the unspecified one
/// (which means loopback to `connect`), or either as an IPv4-mapped IPv6 address.
fn is_local(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    ip.is_loopback() || ip.is_unspecified()
}

/// Loopback ports (with whether for datagrams) found listening in the sandbox during the run.
/// A socket table costs a walk of the kernel's hash buckets to read (about 0.1 ms here), and
/// agents connect to the same few ports (the proxy's) again and again; a listener seen once is
/// taken to stay, so a connection to one that closed since is not recorded (a missed record,
/// never a false one).
type SandboxListeners = std::collections::BTreeSet<(u16, bool)>;

/// The longest address read: `struct sockaddr_un` (110 bytes) covers every family looked at.
const SOCKADDR_MAX: usize = 110;

/// Whether the `connect` or `sendto` stopped in `notif` goes where the sandbox will not let it,
/// by its address as read from the caller's memory: an IP address off the namespace's loopback,
/// a port of the host's loopback, or a host socket the caller's view of the filesystem hides.
/// `None` for anything else (and when the address or the view cannot be read).
fn refused_destination(
    syscall: &str,
    notif: &sys::SeccompNotif,
    watch: &Watch,
    listening: &mut SandboxListeners,
) -> Option<RefusedConnect> {
    if syscall == "socket" {
        return refused_raw_socket(notif);
    }
    let [
        _,
        connect_address,
        connect_length,
        _,
        sendto_address,
        sendto_length,
    ] = notif.args;
    let datagram = syscall == "sendto";
    let (address, length) = if datagram {
        (sendto_address, sendto_length)
    } else {
        (connect_address, connect_length)
    };
    let length = usize::try_from(length).ok()?.min(SOCKADDR_MAX);
    let mut bytes = [0_u8; SOCKADDR_MAX];
    let read = sys::read_process_memory(notif.pid, address, bytes.get_mut(..length)?).ok()?;
    match judge_address(bytes.get(..read)?, watch)? {
        Destination::Unroutable(refused) => Some(refused),
        Destination::Abstract(name) if watch.own_network => {
            // The namespace scopes abstract sockets: the host's are not the sandbox's.
            let bound = |net_dir: &str| unix_table_has(net_dir, &name);
            (!bound(&format!("/proc/{}/net", notif.pid))? && bound("/proc/self/net")?).then_some(
                RefusedConnect {
                    condition: HOST_ABSTRACT_SOCKET,
                    closes: "the host's abstract Unix sockets: the sandbox's network namespace has its own",
                    errno: libc::ECONNREFUSED,
                    family: "AF_UNIX",
                    target: name,
                },
            )
        }
        Destination::Abstract(name) => {
            // One namespace, scoped by Landlock: a socket bound there that no process of the
            // sandbox holds was created outside its domain.
            let inodes = unix_table_inodes("/proc/self/net", &name)?;
            (!inodes.is_empty() && !sandbox_holds(notif.pid, &inodes)?).then_some(RefusedConnect {
                condition: HOST_ABSTRACT_SOCKET,
                closes: "the host's abstract Unix sockets: Landlock scopes the sandbox out of those created outside it",
                errno: libc::EPERM,
                family: "AF_UNIX",
                target: name,
            })
        }
        Destination::Loopback {
            family,
            target,
            port,
        } => {
            // Nothing of the sandbox's own there, but something of the host's: the command
            // meant the host's loopback, which only listed ports reach (through the bridge).
            let sandbox_listens = listening.contains(&(port, datagram))
                || listens_on(&format!("/proc/{}/net", notif.pid), port, datagram)?;
            if sandbox_listens {
                listening.insert((port, datagram));
            }
            let host_listens = || listens_on("/proc/self/net", port, datagram);
            (!sandbox_listens && host_listens()?).then_some(RefusedConnect {
                condition: HOST_LOOPBACK_PORT,
                closes: "the host's loopback ports: the sandbox's loopback is its own, and only the ports the plan lists reach the host's",
                // A datagram is sent, and goes nowhere.
                errno: if datagram { 0 } else { libc::ECONNREFUSED },
                family,
                target,
            })
        }
        Destination::UnixPath(path) => {
            // The host's table has real paths; a client may name one through a symlink
            // (`/var/run/docker.sock`), which resolves the same way on the host.
            let listed = |p: &std::path::Path| watch.host_sockets.iter().any(|host| host == p);
            if !listed(&path) && !std::fs::canonicalize(&path).is_ok_and(|real| listed(&real)) {
                return None;
            }
            let in_view = sys::file_type_in_view_of(notif.pid, &path).ok()?;
            hidden_socket(&path, in_view)
        }
    }
}

/// A `connect` destination worth a second look.
enum Destination {
    /// Refused for certain: no route from the namespace.
    Unroutable(RefusedConnect),
    /// The namespace's own loopback: refused if nothing of the sandbox's listens on `port` but
    /// something of the host's does.
    Loopback {
        family: &'static str,
        target: String,
        port: u16,
    },
    /// A pathname Unix socket: refused if it is one of the host's and the caller's view has no
    /// socket there.
    UnixPath(PathBuf),
    /// An abstract Unix socket (`@name`, as `/proc/net/unix` shows it): refused if the host's
    /// namespace has it and the sandbox's does not.
    Abstract(String),
}

/// [`refused_destination`]'s judgement of one `struct sockaddr` (native byte order for the
/// family, network order for the port).
fn judge_address(sockaddr: &[u8], watch: &Watch) -> Option<Destination> {
    let family = u16::from_ne_bytes([*sockaddr.first()?, *sockaddr.get(1)?]);
    match i32::from(family) {
        libc::AF_INET | libc::AF_INET6 if watch.own_network => {
            let (family, ip) = if i32::from(family) == libc::AF_INET {
                let octets = <[u8; 4]>::try_from(sockaddr.get(4..8)?).ok()?;
                ("AF_INET", IpAddr::from(octets))
            } else {
                let octets = <[u8; 16]>::try_from(sockaddr.get(8..24)?).ok()?;
                ("AF_INET6", IpAddr::from(octets))
            };
            let port = u16::from_be_bytes([*sockaddr.get(2)?, *sockaddr.get(3)?]);
            let target = std::net::SocketAddr::new(ip, port).to_string();
            Some(if is_local(ip) {
                Destination::Loopback {
                    family,
                    target,
                    port,
                }
            } else {
                Destination::Unroutable(RefusedConnect {
                    condition: UNROUTABLE,
                    closes: "a route out of the sandbox's network namespace, which has only its own loopback",
                    errno: libc::ENETUNREACH,
                    family,
                    target,
                })
            })
        }
        libc::AF_UNIX => {
            // A pathname socket: NUL-terminated or not. An abstract one starts with NUL and is
            // every byte the length covers, NULs included (`/proc/net/unix` shows those as `@`).
            // A relative path is not judged.
            let name = sockaddr.get(2..)?;
            if let Some(abstract_name) = name.strip_prefix(b"\0") {
                let scoped = watch.own_network || watch.abstract_scoped;
                return (scoped && !abstract_name.is_empty()).then(|| {
                    let shown: Vec<u8> = abstract_name
                        .iter()
                        .map(|b| if *b == 0 { b'@' } else { *b })
                        .collect();
                    Destination::Abstract(format!("@{}", String::from_utf8_lossy(&shown)))
                });
            }
            let path = name.split(|b| *b == 0).next()?;
            let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
            path.is_absolute()
                .then(|| Destination::UnixPath(path.to_path_buf()))
        }
        _ => None,
    }
}

/// A `connect` to host socket `path`, given what the caller's view has there: refused when
/// that is no socket (a mask: `ECONNREFUSED`) or nothing (a private directory: `ENOENT`).
fn hidden_socket(
    path: &std::path::Path,
    in_view: Option<std::fs::FileType>,
) -> Option<RefusedConnect> {
    let (condition, errno) = match in_view {
        Some(kind) if std::os::unix::fs::FileTypeExt::is_socket(&kind) => return None,
        Some(_) => (MASKED_SOCKET, libc::ECONNREFUSED),
        None => (PRIVATE_SOCKET, libc::ENOENT),
    };
    Some(RefusedConnect {
        condition,
        closes: "the host's pathname Unix sockets (a Docker daemon, an SSH agent, a session bus): none is reachable, in any network mode",
        errno,
        family: "AF_UNIX",
        target: path.display().to_string(),
    })
}

/// The command name of `pid` (`/proc/PID/comm`), read once per distinct call kept.
fn command_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|name| name.trim_end().to_owned())
        .unwrap_or_default()
}

/// A connected pair of Unix sockets for the listener: `(supervisor's end, sandbox's end)`,
/// both close-on-exec (pass the sandbox's end at an agreed descriptor number).
///
/// # Errors
/// The kernel's, from `socketpair`.
pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    sys::socketpair_cloexec()
}

/// Where the observer receives the filter's listener from.
pub enum Channel {
    /// The supervisor's end of a [`channel`] pair; the sandbox inherited the other.
    Connected(OwnedFd),
    /// A listening socket the sandbox connects to (bound into a container, which inherits
    /// nothing from the supervisor). The observer takes the first connection only, then closes
    /// the listener: the stub connects before anything of the command runs, and the queue is
    /// first come, first served, so a later connection (the command's) is never the one read.
    Listening(std::os::unix::net::UnixListener),
}

/// A running observer; [`finish`](Self::finish) stops it and returns what it saw.
pub struct Observer {
    thread: JoinHandle<Observed>,
    stop: OwnedFd,
}

impl Observer {
    /// Starts the thread: it waits for the listener on `socket`, then answers every stopped
    /// call until the filter has no user left or [`finish`](Self::finish).
    ///
    /// # Errors
    /// The pipe or the thread could not be created.
    pub fn start(
        socket: Channel,
        arch: Arch,
        profile: Profile,
        watch: Watch,
    ) -> io::Result<Observer> {
        let (stop_read, stop) = sys::pipe_cloexec()?;
        let thread = std::thread::Builder::new()
            .name("seccomp-observer".to_owned())
            .spawn(move || serve(socket, &stop_read, arch, &profile, &watch))?;
        Ok(Observer { thread, stop })
    }

    /// Stops observing (call it once the run's processes are gone) and returns the account.
    pub fn finish(self) -> Observed {
        drop(self.stop);
        self.thread.join().unwrap_or_else(|_| Observed {
            error: Some("the observer thread panicked".to_owned()),
            ..Observed::default()
        })
    }
}

fn serve(
    socket: Channel,
    stop: &OwnedFd,
    arch: Arch,
    profile: &Profile,
    watch: &Watch,
) -> Observed {
    let mut observed = Observed::default();
    let mut listening = SandboxListeners::new();
    let ended =
        |revents: libc::c_short| revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
    // The stub's connection first, where it connects to a listening socket.
    let socket = match socket {
        Channel::Connected(socket) => socket,
        Channel::Listening(listening) => {
            let (from_socket, from_stop) = sys::poll_two(listening.as_raw_fd(), stop.as_raw_fd());
            if ended(from_stop) && !ended(from_socket) {
                return observed;
            }
            match listening.accept() {
                // `listening` is closed as this arm ends: nobody connects after the stub.
                Ok((stream, _)) => OwnedFd::from(stream),
                Err(e) => {
                    observed.error = Some(format!("accepting the stub's connection: {e}"));
                    return observed;
                }
            }
        }
    };
    // Then the listener, unless the run ends (or the sandbox closes its end) before sending.
    let (from_socket, from_stop) = sys::poll_two(socket.as_raw_fd(), stop.as_raw_fd());
    if ended(from_stop) && !ended(from_socket) {
        return observed;
    }
    let listener = match sys::recv_fd(&socket) {
        Ok(Some(listener)) => listener,
        Ok(None) => return observed,
        Err(e) => {
            observed.error = Some(format!("receiving the listener: {e}"));
            return observed;
        }
    };
    observed.listening = true;
    loop {
        let (events, from_stop) = sys::poll_two(listener.as_raw_fd(), stop.as_raw_fd());
        if events & libc::POLLIN != 0 {
            match sys::seccomp_notif_recv(&listener) {
                Ok(notif) => {
                    let sent = match observed.answer(
                        &notif,
                        arch,
                        profile,
                        watch,
                        &listener,
                        &mut listening,
                    ) {
                        Answer::Error(errno) => {
                            sys::seccomp_notif_send_error(&listener, notif.id, errno)
                        }
                        Answer::Continue => sys::seccomp_notif_continue(&listener, notif.id),
                    };
                    // ENOENT: the caller died meanwhile; nothing to answer.
                    if let Err(e) = sent
                        && e.raw_os_error() != Some(libc::ENOENT)
                    {
                        observed.error = Some(format!("answering a call: {e}"));
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    observed.error = Some(format!("receiving a call: {e}"));
                    return observed;
                }
            }
            continue;
        }
        // No task uses the filter any more, or the supervisor is done.
        if events & (libc::POLLHUP | libc::POLLERR) != 0 || ended(from_stop) {
            return observed;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]
    use super::*;

    fn inet(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut bytes = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        bytes.extend_from_slice(&port.to_be_bytes());
        bytes.extend_from_slice(&ip);
        bytes.extend_from_slice(&[0; 8]);
        bytes
    }

    fn inet6(ip: std::net::Ipv6Addr, port: u16) -> Vec<u8> {
        let mut bytes = (libc::AF_INET6 as u16).to_ne_bytes().to_vec();
        bytes.extend_from_slice(&port.to_be_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(&ip.octets());
        bytes.extend_from_slice(&[0; 4]);
        bytes
    }

    fn unix(path: &[u8]) -> Vec<u8> {
        let mut bytes = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        bytes.extend_from_slice(path);
        bytes
    }

    fn target(sockaddr: &[u8], watch: &Watch) -> Option<String> {
        match judge_address(sockaddr, watch)? {
            Destination::Unroutable(refused) => Some(refused.target),
            Destination::UnixPath(path) => Some(path.display().to_string()),
            Destination::Abstract(name) => Some(name),
            // Judged by the socket tables at the time, below.
            Destination::Loopback { .. } => None,
        }
    }

    #[test]
    fn loopback_destinations_are_left_to_the_socket_tables() {
        let own = Watch {
            own_network: true,
            ..Watch::default()
        };
        let Some(Destination::Loopback {
            family,
            target,
            port,
        }) = judge_address(&inet([127, 0, 0, 1], 8080), &own)
        else {
            panic!("not a loopback destination");
        };
        assert_eq!(
            (family, target.as_str(), port),
            ("AF_INET", "127.0.0.1:8080", 8080)
        );
        // The kernel's own lines (x86-64): 127.0.0.1:8080 LISTEN, *:53 UDP, [::1]:8080 LISTEN,
        // 10.0.0.5:8080 LISTEN (not loopback), 127.0.0.1:8080 ESTABLISHED (not listening).
        let v4_listen = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0";
        let udp_any = "  1: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 2 2 0 0";
        let v6_listen = "   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0";
        let v4_other = "   2: 0500000A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0 100 0 0 10 0";
        let v4_established = "   3: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 5 1 0 100 0 0 10 0";
        assert!(socket_line_matches(v4_listen, 8080, true));
        assert!(!socket_line_matches(v4_listen, 8081, true));
        assert!(socket_line_matches(udp_any, 53, false));
        assert!(socket_line_matches(v6_listen, 8080, true));
        assert!(!socket_line_matches(v4_other, 8080, true));
        assert!(!socket_line_matches(v4_established, 8080, true));
    }

    #[test]
    fn only_addresses_off_the_namespaces_loopback_are_refused() {
        let own = Watch {
            own_network: true,
            ..Watch::default()
        };
        assert_eq!(
            target(&inet([192, 0, 2, 7], 443), &own).as_deref(),
            Some("192.0.2.7:443")
        );
        assert_eq!(target(&inet([127, 0, 0, 53], 53), &own), None);
        assert_eq!(target(&inet([0, 0, 0, 0], 80), &own), None);
        let doc: std::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
        assert_eq!(
            target(&inet6(doc, 22), &own).as_deref(),
            Some("[2001:db8::7]:22")
        );
        for local in ["::1", "::", "::ffff:127.0.0.1"] {
            assert_eq!(
                target(&inet6(local.parse().unwrap(), 1), &own),
                None,
                "{local}"
            );
        }
        // The host's network (allow-outbound): nothing to refuse.
        assert_eq!(target(&inet([192, 0, 2, 7], 443), &Watch::default()), None);
        // Too short to hold the address: not judged.
        assert_eq!(target(&inet([192, 0, 2, 7], 443)[..6], &own), None);
    }

    #[test]
    fn only_host_sockets_the_view_hides_are_refused() {
        let watch = Watch {
            own_network: false,
            host_sockets: vec![PathBuf::from("/run/docker.sock")],
            abstract_scoped: false,
        };
        let host = Some("/run/docker.sock".to_owned());
        assert_eq!(target(&unix(b"/run/docker.sock\0junk"), &watch), host);
        // Without the terminating NUL (the length ends it), too.
        assert_eq!(target(&unix(b"/run/docker.sock"), &watch), host);
        // An abstract name is every byte the length covers, shown as `/proc/net/unix` shows it;
        // only a namespace of its own makes the host's unreachable.
        let own = Watch {
            own_network: true,
            ..watch.clone()
        };
        assert_eq!(
            target(&unix(b"\0app\0sock"), &own).as_deref(),
            Some("@app@sock")
        );
        // Relative paths are not judged.
        assert_eq!(target(&unix(b"docker.sock\0"), &watch), None);
        // Abstract and unnamed sockets: the namespace scopes them.
        assert_eq!(target(&unix(b"\0/run/docker.sock"), &watch), None);
        assert_eq!(target(&unix(b""), &watch), None);
        // What the caller's view has there decides.
        let path = std::path::Path::new("/run/docker.sock");
        let dir = tempfile::tempdir().unwrap();
        let socket = std::os::unix::net::UnixListener::bind(dir.path().join("s")).unwrap();
        let kind = |p: &str| std::fs::metadata(dir.path().join(p)).unwrap().file_type();
        std::fs::write(dir.path().join("f"), "").unwrap();
        assert!(hidden_socket(path, Some(kind("s"))).is_none());
        assert_eq!(
            hidden_socket(path, Some(kind("f"))).unwrap().errno,
            libc::ECONNREFUSED
        );
        assert_eq!(hidden_socket(path, None).unwrap().errno, libc::ENOENT);
        drop(socket);
    }
}
