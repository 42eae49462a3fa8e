//! The rules: one table, each rule with the hole it closes, compiled both to BPF ([`super::bpf`])
//! and to Docker's OCI profile ([`super::oci`]). Every profile carries [`BASE_RULES`]; the
//! socket rules of the mechanism and its network reach come after ([`rule_set`]).

use super::table::*;
use super::{Action, Profile, SeccompError};
use crate::plan::{Mechanism, Reach};

/// One test on the low 32 bits of an argument (see the module docs for why the low half only).
#[derive(Clone, Copy, Debug)]
pub(super) enum Test {
    /// `arg & mask != 0`.
    AnyBit {
        arg: u8,
        mask: u32,
        what: &'static str,
    },
    /// `arg & mask` is one of `values` (`mask` `u32::MAX`: the plain value).
    In {
        arg: u8,
        mask: u32,
        values: &'static [(u32, &'static str)],
    },
    /// `arg & mask` is none of `values`.
    NotIn {
        arg: u8,
        mask: u32,
        values: &'static [(u32, &'static str)],
    },
}

impl Test {
    /// Whether the test holds for these arguments, comparing the low 32 bits as the program
    /// does.
    pub(super) fn holds(&self, args: &[u64; 6]) -> bool {
        let low = |arg: u8| {
            args.get(usize::from(arg))
                .map_or(0, |value| (*value & 0xFFFF_FFFF) as u32)
        };
        match *self {
            Self::AnyBit { arg, mask, .. } => low(arg) & mask != 0,
            Self::In { arg, mask, values } => values.iter().any(|(v, _)| low(arg) & mask == *v),
            Self::NotIn { arg, mask, values } => !values.iter().any(|(v, _)| low(arg) & mask == *v),
        }
    }

    pub(super) fn describe(&self) -> String {
        fn operand(arg: u8, mask: u32) -> String {
            if mask == u32::MAX {
                format!("arg{arg}")
            } else {
                format!("arg{arg} & {mask:#o}")
            }
        }
        fn set(values: &[(u32, &str)]) -> String {
            let items: Vec<String> = values
                .iter()
                .map(|(v, name)| format!("{name} ({v:#x})"))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        match *self {
            // File modes read best in octal, flags in hex.
            Self::AnyBit { arg, mask, what } if what.starts_with("S_") => {
                format!("arg{arg} & {mask:#o} != 0 ({what})")
            }
            Self::AnyBit { arg, mask, what } => format!("arg{arg} & {mask:#x} != 0 ({what})"),
            Self::In { arg, mask, values } => format!("{} in {}", operand(arg, mask), set(values)),
            Self::NotIn { arg, mask, values } => {
                format!("{} not in {}", operand(arg, mask), set(values))
            }
        }
    }
}

/// A rule: when every test holds, return `action`. Rules of one syscall are tried in order;
/// if none applies, the syscall is allowed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rule {
    pub(super) syscall: Syscall,
    pub(super) tests: &'static [Test],
    pub(super) action: Action,
    pub(super) closes: &'static str,
}

pub(super) const fn deny(syscall: Syscall, closes: &'static str) -> Rule {
    Rule {
        syscall,
        tests: &[],
        action: Action::EPERM,
        closes,
    }
}

pub(super) const fn deny_if(
    syscall: Syscall,
    tests: &'static [Test],
    closes: &'static str,
) -> Rule {
    Rule {
        syscall,
        tests,
        action: Action::EPERM,
        closes,
    }
}

/// `CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
/// CLONE_NEWNET`. `CLONE_NEWTIME` (0x80) is absent on purpose: in `clone` that bit belongs to the
/// exit signal (`CSIGNAL`) and the kernel never reads it as a flag; a time namespace needs
/// `clone3` or `unshare`, both denied.
pub(super) const CLONE_NAMESPACE_FLAGS: u32 = 0x7E02_0000;
/// `S_ISUID | S_ISGID`.
pub(super) const SETID_BITS: u32 = 0o6000;
/// `S_IFMT`, and the two file types that name devices.
pub(super) const S_IFMT: u32 = 0o170_000;
pub(super) const DEVICE_TYPES: &[(u32, &str)] = &[(0o020_000, "S_IFCHR"), (0o060_000, "S_IFBLK")];
/// `O_CREAT | __O_TMPFILE` (identical on x86_64 and the generic ABI).
pub(super) const CREATING_FLAGS: u32 = 0o100 | 0o20_000_000;

pub(super) const fn setid_mode(arg: u8) -> Test {
    Test::AnyBit {
        arg,
        mask: SETID_BITS,
        what: "S_ISUID|S_ISGID",
    }
}

pub(super) const fn device_node(arg: u8) -> Test {
    Test::In {
        arg,
        mask: S_IFMT,
        values: DEVICE_TYPES,
    }
}

pub(super) const CLOSES_SETID: &str =
    "setuid/setgid files that outlive the run and grant privilege later";
pub(super) const CLOSES_DEVICE: &str = "device nodes giving raw access to host disks or memory";
pub(super) const CLOSES_MOUNT: &str =
    "changing the mount table to unmask paths or remount read-only ones";

/// Rules every profile carries, in program order.
pub(super) const BASE_RULES: &[Rule] = &[
    // Other processes: read or write their memory, steal their file descriptors.
    deny(
        PTRACE,
        "tracing and rewriting another process (the supervisor, the init)",
    ),
    deny(PROCESS_VM_READV, "reading another process's memory"),
    deny(PROCESS_VM_WRITEV, "writing another process's memory"),
    deny(
        PIDFD_GETFD,
        "stealing file descriptors from another process",
    ),
    deny(KCMP, "probing another process's kernel objects"),
    // Namespaces: a fresh user namespace grants every capability inside it and is the usual
    // first step of kernel exploits; setns joins a namespace outside the sandbox.
    deny(
        UNSHARE,
        "new namespaces (user namespace capabilities, private mounts)",
    ),
    deny(
        SETNS,
        "joining another namespace through an inherited or opened ns fd",
    ),
    deny_if(
        CLONE,
        &[Test::AnyBit {
            arg: 0,
            mask: CLONE_NAMESPACE_FLAGS,
            what: "namespace flags",
        }],
        "new namespaces created by clone",
    ),
    // clone3 keeps its flags behind a pointer the filter cannot read; ENOSYS makes glibc fall
    // back to clone, whose flags it can.
    Rule {
        syscall: CLONE3,
        tests: &[],
        action: Action::ENOSYS,
        closes: "namespace flags hidden behind clone3's pointer",
    },
    // Mounts, old and new API.
    deny(MOUNT, CLOSES_MOUNT),
    deny(UMOUNT2, "unmounting the masks that hide denied paths"),
    deny(PIVOT_ROOT, CLOSES_MOUNT),
    deny(CHROOT, "chroot games that confuse path-based checks"),
    deny(OPEN_TREE, CLOSES_MOUNT),
    deny(MOVE_MOUNT, CLOSES_MOUNT),
    deny(FSOPEN, CLOSES_MOUNT),
    deny(FSCONFIG, CLOSES_MOUNT),
    deny(FSMOUNT, CLOSES_MOUNT),
    deny(FSPICK, CLOSES_MOUNT),
    deny(MOUNT_SETATTR, "making read-only mounts writable"),
    deny(OPEN_TREE_ATTR, CLOSES_MOUNT),
    // Kernel attack surface with a long exploit history.
    deny(BPF, "eBPF programs and maps (kernel attack surface)"),
    deny(
        PERF_EVENT_OPEN,
        "perf events (kernel attack surface, side channels)",
    ),
    deny(
        USERFAULTFD,
        "userfaultfd (stalls the kernel mid-copy in race exploits)",
    ),
    deny(
        IO_URING_SETUP,
        "io_uring, whose operations bypass the socket and open rules",
    ),
    deny(
        IO_URING_ENTER,
        "io_uring, whose operations bypass the socket and open rules",
    ),
    deny(
        IO_URING_REGISTER,
        "io_uring, whose operations bypass the socket and open rules",
    ),
    // Keyrings are not namespaced: secrets of other sessions of the same user.
    deny(ADD_KEY, "the kernel keyring shared with the host user"),
    deny(REQUEST_KEY, "the kernel keyring shared with the host user"),
    deny(KEYCTL, "the kernel keyring shared with the host user"),
    // Host-global administration (mostly capability-gated; the command may run as root).
    deny(KEXEC_LOAD, "replacing the running kernel"),
    deny(KEXEC_FILE_LOAD, "replacing the running kernel"),
    deny(INIT_MODULE, "loading kernel modules"),
    deny(FINIT_MODULE, "loading kernel modules"),
    deny(DELETE_MODULE, "unloading kernel modules"),
    deny(
        NAME_TO_HANDLE_AT,
        "file handles that reach files outside the sandbox's view",
    ),
    deny(
        OPEN_BY_HANDLE_AT,
        "opening host files by handle, past every mount and path check",
    ),
    deny(FANOTIFY_INIT, "watching and blocking host-wide file access"),
    deny(ACCT, "process accounting to an arbitrary file"),
    deny(SWAPON, "host swap configuration"),
    deny(SWAPOFF, "host swap configuration"),
    deny(REBOOT, "rebooting the host"),
    deny(SYSLOG, "reading or clearing the kernel log"),
    deny(QUOTACTL, "host disk quotas"),
    deny(QUOTACTL_FD, "host disk quotas"),
    deny(LOOKUP_DCOOKIE, "kernel-internal path lookups"),
    deny(
        SETHOSTNAME,
        "renaming the host (Landlock has no UTS namespace)",
    ),
    deny(
        SETDOMAINNAME,
        "renaming the host (Landlock has no UTS namespace)",
    ),
    deny(SETTIMEOFDAY, "setting the host clock"),
    deny(CLOCK_SETTIME, "setting the host clock"),
    deny(IOPL, "raw I/O port access"),
    deny(IOPERM, "raw I/O port access"),
    deny(USELIB, "the obsolete a.out library loader"),
    // Execution domains other than plain Linux, e.g. MMAP_PAGE_ZERO and READ_IMPLIES_EXEC.
    deny_if(
        PERSONALITY,
        &[Test::NotIn {
            arg: 0,
            mask: u32::MAX,
            values: &[
                (0x0, "PER_LINUX"),
                (0x8, "PER_LINUX32"),
                (0x2_0000, "UNAME26"),
                (0x2_0008, "PER_LINUX32|UNAME26"),
                (0xFFFF_FFFF, "query"),
            ],
        }],
        "execution domains that map page zero or make data executable",
    ),
    // ioctl's request is an `unsigned int`: the low 32 bits are what the kernel dispatches on.
    deny_if(
        IOCTL,
        &[Test::In {
            arg: 1,
            mask: u32::MAX,
            values: &[
                (0x5412, "TIOCSTI"),
                (0x541C, "TIOCLINUX"),
                (0xAA00, "USERFAULTFD_IOC_NEW"),
            ],
        }],
        "typing into the inherited terminal (TIOCSTI, TIOCLINUX) and userfaultfd via /dev/userfaultfd",
    ),
    // setuid/setgid bits on files in the workspace (the `mode` argument's index differs).
    deny_if(CHMOD, &[setid_mode(1)], CLOSES_SETID),
    deny_if(FCHMOD, &[setid_mode(1)], CLOSES_SETID),
    deny_if(FCHMODAT, &[setid_mode(2)], CLOSES_SETID),
    deny_if(FCHMODAT2, &[setid_mode(2)], CLOSES_SETID),
    deny_if(MKNOD, &[device_node(1)], CLOSES_DEVICE),
    deny_if(MKNOD, &[setid_mode(1)], CLOSES_SETID),
    deny_if(MKNODAT, &[device_node(2)], CLOSES_DEVICE),
    deny_if(MKNODAT, &[setid_mode(2)], CLOSES_SETID),
    // open(O_CREAT) applies setuid/setgid bits from its mode just as chmod does.
    deny_if(
        OPEN,
        &[
            setid_mode(2),
            Test::AnyBit {
                arg: 1,
                mask: CREATING_FLAGS,
                what: "O_CREAT|O_TMPFILE",
            },
        ],
        CLOSES_SETID,
    ),
    deny_if(CREAT, &[setid_mode(1)], CLOSES_SETID),
    deny_if(
        OPENAT,
        &[
            setid_mode(3),
            Test::AnyBit {
                arg: 2,
                mask: CREATING_FLAGS,
                what: "O_CREAT|O_TMPFILE",
            },
        ],
        CLOSES_SETID,
    ),
    // openat2 keeps its mode behind a pointer; ENOSYS makes callers fall back to openat.
    Rule {
        syscall: OPENAT2,
        tests: &[],
        action: Action::ENOSYS,
        closes: "setuid/setgid modes hidden behind openat2's pointer",
    },
    // vsock is not scoped by a network namespace: on a VM it reaches the hypervisor side (its
    // agents, other guests' services) from any sandbox, whatever the network mode.
    deny_if(
        SOCKET,
        &[Test::In {
            arg: 0,
            mask: u32::MAX,
            values: &[AF_VSOCK],
        }],
        "vsock channels to the hypervisor, which no network namespace scopes",
    ),
];

/// The name of an address family the rules know.
pub(super) fn family_name(family: u32) -> Option<&'static str> {
    [
        AF_UNIX,
        AF_INET,
        AF_INET6,
        AF_NETLINK,
        AF_VSOCK,
        (17, "AF_PACKET"),
        (38, "AF_ALG"),
    ]
    .iter()
    .find(|(number, _)| *number == family)
    .map(|(_, name)| *name)
}

pub(super) const AF_UNIX: (u32, &str) = (1, "AF_UNIX");
pub(super) const AF_INET: (u32, &str) = (2, "AF_INET");
pub(super) const AF_INET6: (u32, &str) = (10, "AF_INET6");
pub(super) const AF_NETLINK: (u32, &str) = (16, "AF_NETLINK");
pub(super) const AF_VSOCK: (u32, &str) = (40, "AF_VSOCK");
pub(super) const NETLINK_ROUTE: (u32, &str) = (0, "NETLINK_ROUTE");

/// Landlock has no mount namespace, so a host pathname socket (the Docker socket, a session
/// bus) cannot be masked, and Landlock does not govern connecting to one: no AF_UNIX sockets.
/// `socketpair` stays allowed: its pair is private to the sandbox.
pub(super) const SOCKET_NO_UNIX: Rule = deny_if(
    SOCKET,
    &[Test::In {
        arg: 0,
        mask: u32::MAX,
        values: &[AF_UNIX],
    }],
    "host pathname and abstract Unix sockets (no mount or network namespace to hide them); \
     glibc's user, group and host lookups try nscd this way first, then read /etc themselves",
);

/// [`Reach::Nothing`] under a network namespace (bwrap, docker): the namespace already has no
/// route out, but its own loopback still takes TCP and UDP; `none` means no IP socket at all.
/// Unix sockets stay (the namespace's mount and abstract-socket scoping keeps them inside), and
/// so does route netlink: in the sandbox's own namespace it lists only its loopback, and
/// without it `getifaddrs` fails (Node's `os.networkInterfaces()` throws).
pub(super) const SOCKET_ONLY_UNIX: &[Rule] = &[
    deny_if(
        SOCKET,
        &[Test::NotIn {
            arg: 0,
            mask: u32::MAX,
            values: &[AF_UNIX, AF_NETLINK],
        }],
        "IP and every other non-Unix family when the network mode is none (even the sandbox's own loopback)",
    ),
    deny_if(
        SOCKET,
        &[
            Test::In {
                arg: 0,
                mask: u32::MAX,
                values: &[AF_NETLINK],
            },
            Test::NotIn {
                arg: 2,
                mask: u32::MAX,
                values: &[NETLINK_ROUTE],
            },
        ],
        "netlink families other than route (audit, uevents, netfilter, crypto)",
    ),
];

/// [`Reach::Nothing`] under Landlock: no socket of any family.
pub(super) const SOCKET_NONE: Rule = deny(
    SOCKET,
    "every network protocol when the network mode is none",
);

/// [`Reach::Everything`] under Landlock: IP, plus route netlink for `getaddrinfo`.
pub(super) const SOCKET_OUTBOUND: &[Rule] = &[
    deny_if(
        SOCKET,
        &[Test::NotIn {
            arg: 0,
            mask: u32::MAX,
            values: &[AF_INET, AF_INET6, AF_NETLINK],
        }],
        "packet, vsock, bluetooth, crypto and other non-IP families",
    ),
    deny_if(
        SOCKET,
        &[
            Test::In {
                arg: 0,
                mask: u32::MAX,
                values: &[AF_NETLINK],
            },
            Test::NotIn {
                arg: 2,
                mask: u32::MAX,
                values: &[NETLINK_ROUTE],
            },
        ],
        "netlink families other than route (audit, uevents, netfilter, crypto)",
    ),
];

pub(super) fn rule_set(profile: &Profile) -> Result<Vec<Rule>, SeccompError> {
    let mut rules = BASE_RULES.to_vec();
    let unsupported = || SeccompError::UnsupportedNetwork {
        mechanism: profile.mechanism,
        reach: profile.reach,
    };
    match profile.mechanism {
        Mechanism::Landlock(_) => {
            rules.push(SOCKET_NO_UNIX);
            match profile.reach {
                Reach::Nothing => rules.push(SOCKET_NONE),
                Reach::Everything => rules.extend_from_slice(SOCKET_OUTBOUND),
                Reach::OwnLoopback | Reach::HostLoopback => return Err(unsupported()),
            }
        }
        // The namespace scopes every family but vsock (a base rule); `none` also takes IP.
        Mechanism::Bwrap | Mechanism::Docker => match profile.reach {
            Reach::Nothing => rules.extend_from_slice(SOCKET_ONLY_UNIX),
            Reach::OwnLoopback | Reach::Everything => {}
            Reach::HostLoopback => return Err(unsupported()),
        },
        Mechanism::Seatbelt | Mechanism::Direct => {}
    }
    Ok(rules)
}

/// What an observed program stops on top of its rules, for the observer to look at and then
/// let run: under bwrap and docker (a network namespace and masked host sockets), every `connect` and
/// every `sendto` that names an address (a datagram's destination), so a destination the
/// namespace cannot route, a port of the host's loopback or a masked host socket is explained;
/// and every raw `socket` the socket rules allow, which the kernel refuses to a sandbox without
/// capabilities (`ping`'s `SOCK_RAW`).
/// (`sendmsg` names its address inside a struct the filter cannot read, and stopping every
/// one would stop a stream's data too.) The plain program allows these calls, so letting them
/// run changes nothing the kernel enforces.
pub(super) fn observe_rules(profile: &Profile) -> &'static [Rule] {
    const CONNECT_OBSERVED: &[Rule] = &[
        Rule {
            syscall: CONNECT,
            tests: &[],
            action: Action::Observe,
            closes: "nothing: observed only (the network namespace and the socket masks refuse)",
        },
        Rule {
            syscall: SENDTO,
            // `addrlen` is a `socklen_t`: zero for a connected socket's data.
            tests: &[Test::AnyBit {
                arg: 5,
                mask: u32::MAX,
                what: "an address (addrlen != 0)",
            }],
            action: Action::Observe,
            closes: "nothing: observed only (the network namespace and the socket masks refuse)",
        },
        Rule {
            syscall: SOCKET,
            // IP and packet families only (a netlink socket is `SOCK_RAW` too, and needs no
            // capability); the type without `SOCK_NONBLOCK` and `SOCK_CLOEXEC` (the high bits).
            tests: &[
                Test::In {
                    arg: 0,
                    mask: u32::MAX,
                    values: &[AF_INET, AF_INET6, (17, "AF_PACKET")],
                },
                Test::In {
                    arg: 1,
                    mask: 0xF,
                    values: &[
                        (3, "SOCK_RAW"),
                        // Obsolete, but the kernel still takes it (with CAP_NET_RAW).
                        (10, "SOCK_PACKET"),
                    ],
                },
            ],
            action: Action::Observe,
            closes: "nothing: observed only (the kernel refuses raw sockets to a process without CAP_NET_RAW)",
        },
    ];
    match profile.mechanism {
        Mechanism::Bwrap | Mechanism::Docker => CONNECT_OBSERVED,
        Mechanism::Landlock(_) | Mechanism::Seatbelt | Mechanism::Direct => &[],
    }
}
