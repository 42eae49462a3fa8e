//! The seccomp filter, tested two ways.
//!
//! 1. A small classic-BPF interpreter runs the programs of both architectures against a table
//!    of `(syscall, arguments) → action`, so the verdicts are checked on any host.
//! 2. The real kernel: each probe runs in a forked child, first unfiltered (proving the call
//!    works, or fails for another reason, so the test can fail) and then with the filter
//!    installed. Namespaces, mounts and hostnames are only ever touched inside a child that
//!    first entered its own user + mount/UTS namespace and exits right after.

// Linux kernel mechanisms; the macOS type-check (`--target aarch64-apple-darwin`) skips them.
#![cfg(target_os = "linux")]
#![allow(
    unsafe_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests: fork/exec probes need unsafe libc calls, and failures should panic"
)]

#[path = "../../tests/support/reachable.rs"]
mod reachable;

use std::ffi::CString;
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use palisade_shims::plan::{LandlockProc, Mechanism, Reach};
use std::os::fd::AsRawFd as _;

use palisade_shims::seccomp::{self, Action, Arch, Instruction, Profile, Program, observe};

/// Counts every allocation in this test binary, to prove `install` makes none.
struct CountingAllocator;

static ALLOCATIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const BWRAP_NONE: Profile = Profile {
    mechanism: Mechanism::Bwrap,
    reach: Reach::Nothing,
};
const BWRAP_LOOPBACK: Profile = Profile {
    mechanism: Mechanism::Bwrap,
    reach: Reach::OwnLoopback,
};
const LANDLOCK_NONE: Profile = Profile {
    mechanism: Mechanism::Landlock(LandlockProc::Own),
    reach: Reach::Nothing,
};
const LANDLOCK_OUTBOUND: Profile = Profile {
    mechanism: Mechanism::Landlock(LandlockProc::Own),
    reach: Reach::Everything,
};
const PROFILES: [Profile; 4] = [BWRAP_NONE, BWRAP_LOOPBACK, LANDLOCK_NONE, LANDLOCK_OUTBOUND];

const EPERM: Action = Action::Errno(libc::EPERM as u16);
const ENOSYS: Action = Action::Errno(libc::ENOSYS as u16);
const ALLOW: Action = Action::Allow;
const KILL: Action = Action::KillProcess;

// ---------------------------------------------------------------------------------------------
// A classic BPF interpreter for the opcodes a seccomp filter may use.

const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_ARM: u32 = 0x4000_0028;

/// `struct seccomp_data` as the kernel lays it out on a little-endian ABI.
fn seccomp_data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
    let mut data = [0u8; 64];
    data[0..4].copy_from_slice(&nr.to_le_bytes());
    data[4..8].copy_from_slice(&arch.to_le_bytes());
    data[8..16].copy_from_slice(&0x7f00_dead_beefu64.to_le_bytes());
    for (i, arg) in args.iter().enumerate() {
        data[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
    }
    data
}

/// Runs `program` like the kernel would; errors on anything the kernel's checker rejects.
fn interpret(program: &[Instruction], data: &[u8; 64]) -> Result<u32, String> {
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    loop {
        let insn = program
            .get(pc)
            .ok_or_else(|| format!("fell off the end at {pc}"))?;
        let target = |offset: u8| pc + 1 + usize::from(offset);
        pc = match insn.code {
            0x20 => {
                let k = insn.k as usize;
                if !k.is_multiple_of(4) || k + 4 > data.len() {
                    return Err(format!("misaligned or out-of-range load {k} at {pc}"));
                }
                acc = u32::from_le_bytes(data[k..k + 4].try_into().unwrap());
                pc + 1
            }
            0x54 => {
                acc &= insn.k;
                pc + 1
            }
            0x15 => target(if acc == insn.k { insn.jt } else { insn.jf }),
            0x25 => target(if acc > insn.k { insn.jt } else { insn.jf }),
            0x35 => target(if acc >= insn.k { insn.jt } else { insn.jf }),
            0x45 => target(if acc & insn.k != 0 { insn.jt } else { insn.jf }),
            0x05 => pc + 1 + insn.k as usize,
            0x06 => return Ok(insn.k),
            code => return Err(format!("unexpected opcode {code:#x} at {pc}")),
        };
    }
}

/// The static checks of the kernel's `bpf_check_classic` + `seccomp_check_filter`.
fn validate(program: &[Instruction]) {
    assert!(
        !program.is_empty() && program.len() <= 4096,
        "length {}",
        program.len()
    );
    for (pc, insn) in program.iter().enumerate() {
        match insn.code {
            0x15 | 0x25 | 0x35 | 0x45 => {
                for offset in [insn.jt, insn.jf] {
                    assert!(
                        pc + 1 + usize::from(offset) < program.len(),
                        "jump at {pc} leaves the program"
                    );
                }
            }
            0x05 => assert!(
                (pc as u64) + 1 + u64::from(insn.k) < program.len() as u64,
                "jump at {pc} leaves the program"
            ),
            0x20 => assert!(insn.k % 4 == 0 && insn.k < 64, "load at {pc}"),
            0x54 | 0x06 => {}
            code => panic!("opcode {code:#x} at {pc}"),
        }
    }
    assert_eq!(
        program.last().unwrap().code,
        0x06,
        "the last instruction must return"
    );
}

fn verdict(program: &Program, audit_arch: u32, nr: u32, args: [u64; 6]) -> Action {
    let ret = interpret(program.instructions(), &seccomp_data(audit_arch, nr, args)).unwrap();
    Action::from_ret(ret).unwrap_or_else(|| panic!("unknown return {ret:#x}"))
}

/// Syscall numbers of one architecture, for the verdict tables.
struct Numbers {
    arch: Arch,
    audit_arch: u32,
    ptrace: u32,
    getpid: u32,
    clone: u32,
    clone3: u32,
    unshare: u32,
    ioctl: u32,
    fchmodat: u32,
    fchmod: u32,
    mknodat: u32,
    openat: u32,
    openat2: u32,
    socket: u32,
    socketpair: u32,
    personality: u32,
    read: u32,
    mount: u32,
    io_uring_setup: u32,
    bpf: u32,
}

fn native_numbers() -> Numbers {
    let n = |nr: libc::c_long| u32::try_from(nr).unwrap();
    Numbers {
        arch: Arch::native().unwrap(),
        audit_arch: Arch::native().unwrap().audit_arch(),
        ptrace: n(libc::SYS_ptrace),
        getpid: n(libc::SYS_getpid),
        clone: n(libc::SYS_clone),
        clone3: n(libc::SYS_clone3),
        unshare: n(libc::SYS_unshare),
        ioctl: n(libc::SYS_ioctl),
        fchmodat: n(libc::SYS_fchmodat),
        fchmod: n(libc::SYS_fchmod),
        mknodat: n(libc::SYS_mknodat),
        openat: n(libc::SYS_openat),
        openat2: n(libc::SYS_openat2),
        socket: n(libc::SYS_socket),
        socketpair: n(libc::SYS_socketpair),
        personality: n(libc::SYS_personality),
        read: n(libc::SYS_read),
        mount: n(libc::SYS_mount),
        io_uring_setup: n(libc::SYS_io_uring_setup),
        bpf: n(libc::SYS_bpf),
    }
}

/// The foreign architecture's numbers, spelled out (include/uapi/asm-generic/unistd.h and
/// arch/x86/entry/syscalls/syscall_64.tbl), so its program is checked on this host too.
fn foreign_numbers() -> Numbers {
    match Arch::native().unwrap() {
        Arch::X86_64 => Numbers {
            arch: Arch::Aarch64,
            audit_arch: Arch::Aarch64.audit_arch(),
            ptrace: 117,
            getpid: 172,
            clone: 220,
            clone3: 435,
            unshare: 97,
            ioctl: 29,
            fchmodat: 53,
            fchmod: 52,
            mknodat: 33,
            openat: 56,
            openat2: 437,
            socket: 198,
            socketpair: 199,
            personality: 92,
            read: 63,
            mount: 40,
            io_uring_setup: 425,
            bpf: 280,
        },
        Arch::Aarch64 => Numbers {
            arch: Arch::X86_64,
            audit_arch: Arch::X86_64.audit_arch(),
            ptrace: 101,
            getpid: 39,
            clone: 56,
            clone3: 435,
            unshare: 272,
            ioctl: 16,
            fchmodat: 268,
            fchmod: 91,
            mknodat: 259,
            openat: 257,
            openat2: 437,
            socket: 41,
            socketpair: 53,
            personality: 135,
            read: 0,
            mount: 165,
            io_uring_setup: 425,
            bpf: 321,
        },
    }
}

/// `(profiles, name, nr, args, expected action)`.
type Row<'a> = (&'a [Profile], &'a str, u32, [u64; 6], Action);

fn check_verdicts(n: &Numbers) {
    const TIOCSTI: u64 = 0x5412;
    const TIOCLINUX: u64 = 0x541C;
    const TCGETS: u64 = 0x5401;
    const JUNK: u64 = 0xdead_beef_0000_0000;
    const CLONE_NEWUSER: u64 = 0x1000_0000;
    const CLONE_NEWNET: u64 = 0x4000_0000;
    const CLONE_THREAD_FLAGS: u64 = 0x003d_0f00; // what pthread_create passes
    const SIGCHLD: u64 = 17;
    const AT_FDCWD: u64 = -100i64 as u64;
    const O_CREAT: u64 = 0o100;
    const O_TMPFILE: u64 = 0o20_200_000;
    const AF_UNIX: u64 = 1;
    const AF_INET: u64 = 2;
    const AF_INET6: u64 = 10;
    const AF_NETLINK: u64 = 16;
    const AF_PACKET: u64 = 17;
    const AF_VSOCK: u64 = 40;

    let a = |a0: u64, a1: u64, a2: u64, a3: u64| [a0, a1, a2, a3, 0, 0];
    let none = [0u64; 6];
    // `all` = every profile.
    let all: &[Profile] = &PROFILES;
    let landlock: &[Profile] = &[LANDLOCK_NONE, LANDLOCK_OUTBOUND];
    let bwrap: &[Profile] = &[BWRAP_NONE, BWRAP_LOOPBACK];
    let mut table: Vec<Row<'_>> = vec![
        (all, "ptrace", n.ptrace, none, EPERM),
        (all, "getpid", n.getpid, none, ALLOW),
        (all, "read", n.read, a(0, 0x1000, 10, 0), ALLOW),
        (all, "unshare(0)", n.unshare, none, EPERM),
        (all, "mount", n.mount, none, EPERM),
        (all, "io_uring_setup", n.io_uring_setup, none, EPERM),
        (all, "bpf", n.bpf, none, EPERM),
        (
            all,
            "clone(CLONE_NEWUSER)",
            n.clone,
            a(CLONE_NEWUSER | SIGCHLD, 0, 0, 0),
            EPERM,
        ),
        (
            all,
            "clone(CLONE_NEWNET) high junk",
            n.clone,
            a(JUNK | CLONE_NEWNET, 0, 0, 0),
            EPERM,
        ),
        (all, "clone(SIGCHLD)", n.clone, a(SIGCHLD, 0, 0, 0), ALLOW),
        (
            all,
            "clone(thread)",
            n.clone,
            a(CLONE_THREAD_FLAGS, 0x7000, 0, 0),
            ALLOW,
        ),
        (
            all,
            "clone(junk high bits only)",
            n.clone,
            a(JUNK | SIGCHLD, 0, 0, 0),
            ALLOW,
        ),
        (all, "clone3", n.clone3, a(0x7000, 88, 0, 0), ENOSYS),
        (all, "ioctl(TIOCSTI)", n.ioctl, a(0, TIOCSTI, 0, 0), EPERM),
        (
            all,
            "ioctl(TIOCLINUX)",
            n.ioctl,
            a(0, TIOCLINUX, 0, 0),
            EPERM,
        ),
        (
            all,
            "ioctl(TIOCSTI | junk << 32)",
            n.ioctl,
            a(0, JUNK | TIOCSTI, 0, 0),
            EPERM,
        ),
        (
            all,
            "ioctl(USERFAULTFD_IOC_NEW)",
            n.ioctl,
            a(3, 0xAA00, 0, 0),
            EPERM,
        ),
        (all, "ioctl(TCGETS)", n.ioctl, a(0, TCGETS, 0, 0), ALLOW),
        (
            all,
            "ioctl(TIOCSTI in fd)",
            n.ioctl,
            a(TIOCSTI, TCGETS, 0, 0),
            ALLOW,
        ),
        (
            all,
            "fchmodat(04755)",
            n.fchmodat,
            a(AT_FDCWD, 0x1000, 0o4755, 0),
            EPERM,
        ),
        (
            all,
            "fchmodat(02755)",
            n.fchmodat,
            a(AT_FDCWD, 0x1000, 0o2755, 0),
            EPERM,
        ),
        (
            all,
            "fchmodat(0644)",
            n.fchmodat,
            a(AT_FDCWD, 0x1000, 0o644, 0),
            ALLOW,
        ),
        (
            all,
            "fchmodat(01777)",
            n.fchmodat,
            a(AT_FDCWD, 0x1000, 0o1777, 0),
            ALLOW,
        ),
        (
            all,
            "fchmodat(mode in wrong arg)",
            n.fchmodat,
            a(AT_FDCWD, 0o4755, 0o644, 0),
            ALLOW,
        ),
        (all, "fchmod(04755)", n.fchmod, a(3, 0o4755, 0, 0), EPERM),
        (
            all,
            "mknodat(S_IFCHR)",
            n.mknodat,
            a(AT_FDCWD, 0x1000, 0o020_600, 0x103),
            EPERM,
        ),
        (
            all,
            "mknodat(S_IFBLK)",
            n.mknodat,
            a(AT_FDCWD, 0x1000, 0o060_600, 0x801),
            EPERM,
        ),
        (
            all,
            "mknodat(S_IFREG|04755)",
            n.mknodat,
            a(AT_FDCWD, 0x1000, 0o104_755, 0),
            EPERM,
        ),
        (
            all,
            "mknodat(S_IFIFO)",
            n.mknodat,
            a(AT_FDCWD, 0x1000, 0o010_644, 0),
            ALLOW,
        ),
        (
            all,
            "mknodat(S_IFSOCK)",
            n.mknodat,
            a(AT_FDCWD, 0x1000, 0o140_644, 0),
            ALLOW,
        ),
        (
            all,
            "mknodat(S_IFREG)",
            n.mknodat,
            a(AT_FDCWD, 0x1000, 0o100_644, 0),
            ALLOW,
        ),
        (
            all,
            "openat(O_CREAT, 04755)",
            n.openat,
            a(AT_FDCWD, 0x1000, O_CREAT | 1, 0o4755),
            EPERM,
        ),
        (
            all,
            "openat(O_TMPFILE, 02755)",
            n.openat,
            a(AT_FDCWD, 0x1000, O_TMPFILE | 2, 0o2755),
            EPERM,
        ),
        (
            all,
            "openat(O_CREAT, 0644)",
            n.openat,
            a(AT_FDCWD, 0x1000, O_CREAT | 1, 0o644),
            ALLOW,
        ),
        (
            all,
            "openat(O_RDONLY, stray 04755)",
            n.openat,
            a(AT_FDCWD, 0x1000, 0, 0o4755),
            ALLOW,
        ),
        (
            all,
            "openat2",
            n.openat2,
            a(AT_FDCWD, 0x1000, 0x2000, 24),
            ENOSYS,
        ),
        (
            all,
            "personality(query)",
            n.personality,
            a(0xFFFF_FFFF, 0, 0, 0),
            ALLOW,
        ),
        (all, "personality(PER_LINUX)", n.personality, none, ALLOW),
        (
            all,
            "personality(ADDR_NO_RANDOMIZE)",
            n.personality,
            a(0x0040_0000, 0, 0, 0),
            EPERM,
        ),
        (
            all,
            "personality(READ_IMPLIES_EXEC)",
            n.personality,
            a(0x0400_0000, 0, 0, 0),
            EPERM,
        ),
        (
            all,
            "socketpair(AF_UNIX)",
            n.socketpair,
            a(AF_UNIX, 1, 0, 0x1000),
            ALLOW,
        ),
        (
            all,
            "x32 getpid",
            n.getpid | 0x4000_0000,
            none,
            if n.arch == Arch::X86_64 { EPERM } else { ALLOW },
        ),
        (
            bwrap,
            "socket(AF_UNIX) bwrap",
            n.socket,
            a(AF_UNIX, 1, 0, 0),
            ALLOW,
        ),
        (
            &[BWRAP_NONE],
            "socket(AF_PACKET) bwrap none",
            n.socket,
            a(AF_PACKET, 3, 0, 0),
            EPERM,
        ),
        (
            &[BWRAP_NONE],
            "socket(AF_INET) bwrap none",
            n.socket,
            a(AF_INET, 1, 0, 0),
            EPERM,
        ),
        (
            &[BWRAP_NONE],
            "socket(AF_INET6 | junk) bwrap none",
            n.socket,
            a(JUNK | AF_INET6, 2, 0, 0),
            EPERM,
        ),
        (
            &[BWRAP_NONE],
            "socket(AF_NETLINK, ROUTE) bwrap none",
            n.socket,
            a(AF_NETLINK, 3, 0, 0),
            ALLOW,
        ),
        (
            &[BWRAP_NONE],
            "socket(AF_NETLINK, AUDIT) bwrap none",
            n.socket,
            a(AF_NETLINK, 3, 9, 0),
            EPERM,
        ),
        (
            &[BWRAP_LOOPBACK],
            "socket(AF_INET) bwrap loopback",
            n.socket,
            a(AF_INET, 1, 0, 0),
            ALLOW,
        ),
        (
            &[BWRAP_LOOPBACK],
            "socket(AF_INET6) bwrap loopback",
            n.socket,
            a(AF_INET6, 2, 0, 0),
            ALLOW,
        ),
        (
            all,
            "socket(AF_VSOCK)",
            n.socket,
            a(AF_VSOCK, 1, 0, 0),
            EPERM,
        ),
        (
            all,
            "socket(AF_VSOCK | junk)",
            n.socket,
            a(JUNK | AF_VSOCK, 5, 0, 0),
            EPERM,
        ),
        (
            landlock,
            "socket(AF_UNIX) landlock",
            n.socket,
            a(AF_UNIX, 1, 0, 0),
            EPERM,
        ),
        (
            landlock,
            "socket(AF_UNIX | junk) landlock",
            n.socket,
            a(JUNK | AF_UNIX, 1, 0, 0),
            EPERM,
        ),
        (
            landlock,
            "socket(AF_PACKET) landlock",
            n.socket,
            a(AF_PACKET, 3, 0, 0),
            EPERM,
        ),
        (
            landlock,
            "socket(AF_VSOCK) landlock",
            n.socket,
            a(AF_VSOCK, 1, 0, 0),
            EPERM,
        ),
        (
            landlock,
            "socket(AF_NETLINK, AUDIT)",
            n.socket,
            a(AF_NETLINK, 3, 9, 0),
            EPERM,
        ),
        (
            &[LANDLOCK_NONE],
            "socket(AF_INET) none",
            n.socket,
            a(AF_INET, 1, 0, 0),
            EPERM,
        ),
        (
            &[LANDLOCK_NONE],
            "socket(AF_NETLINK, ROUTE) none",
            n.socket,
            a(AF_NETLINK, 3, 0, 0),
            EPERM,
        ),
        (
            &[LANDLOCK_OUTBOUND],
            "socket(AF_INET) outbound",
            n.socket,
            a(AF_INET, 1, 0, 0),
            ALLOW,
        ),
        (
            &[LANDLOCK_OUTBOUND],
            "socket(AF_INET6) outbound",
            n.socket,
            a(AF_INET6, 2, 0, 0),
            ALLOW,
        ),
        (
            &[LANDLOCK_OUTBOUND],
            "socket(AF_NETLINK, ROUTE)",
            n.socket,
            a(AF_NETLINK, 3, 0, 0),
            ALLOW,
        ),
    ];
    // Another ABI's call is killed whatever its number.
    let foreign_abi = if n.arch == Arch::X86_64 {
        AUDIT_ARCH_I386
    } else {
        AUDIT_ARCH_ARM
    };
    for profile in PROFILES {
        let program = seccomp::build_for(n.arch, &profile).unwrap();
        validate(program.instructions());
        for nr in [0, 20, n.getpid, n.ptrace] {
            assert_eq!(
                verdict(&program, foreign_abi, nr, none),
                KILL,
                "foreign ABI nr {nr}"
            );
        }
    }
    table.sort_by_key(|row| row.1);
    let mut failures = Vec::new();
    for (profiles, name, nr, args, expected) in table {
        for profile in profiles {
            let program = seccomp::build_for(n.arch, profile).unwrap();
            let got = verdict(&program, n.audit_arch, nr, args);
            if got != expected {
                failures.push(format!(
                    "{:?} {profile:?} {name}: got {got}, want {expected}",
                    n.arch
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "wrong verdicts:\n{}",
        failures.join("\n")
    );
}

#[test]
fn interpreted_verdicts_native_arch() {
    check_verdicts(&native_numbers());
}

#[test]
fn interpreted_verdicts_foreign_arch() {
    check_verdicts(&foreign_numbers());
}

/// Every profile the filter is built for, the mechanisms' and reaches' combinations.
fn every_profile() -> Vec<Profile> {
    let mut profiles = PROFILES.to_vec();
    for reach in [Reach::Nothing, Reach::OwnLoopback, Reach::Everything] {
        profiles.push(Profile {
            mechanism: Mechanism::Docker,
            reach,
        });
    }
    profiles.push(Profile {
        mechanism: Mechanism::Landlock(LandlockProc::HostProcessesDenied),
        reach: Reach::Everything,
    });
    profiles.push(Profile {
        mechanism: Mechanism::Direct,
        reach: Reach::Everything,
    });
    profiles
}

/// What the rules say of one call ([`seccomp::judge`]: the first rule of its syscall whose
/// tests hold), with the program's two blanket tests in front: the plain program's spec.
fn rules_say(arch: Arch, profile: &Profile, nr: u32, args: &[u64; 6]) -> Action {
    if arch == Arch::X86_64 && nr >= 0x4000_0000 {
        return EPERM;
    }
    i32::try_from(nr)
        .ok()
        .and_then(|nr| seccomp::judge(arch, profile, nr, args))
        .map_or(ALLOW, |j| j.action)
}

/// The observed program's spec: what the plain one refuses with an errno (but the `ENOSYS`
/// steers) goes to the listener, and so does what only an observe rule stops.
fn observed_rules_say(arch: Arch, profile: &Profile, nr: u32, args: &[u64; 6]) -> Action {
    match rules_say(arch, profile, nr, args) {
        Action::Errno(errno) if Action::Errno(errno) != ENOSYS => Action::Observe,
        ALLOW => {
            if i32::try_from(nr)
                .is_ok_and(|n| seccomp::observed_only(arch, profile, n, args).is_some())
            {
                Action::Observe
            } else {
                ALLOW
            }
        }
        other => other,
    }
}

/// The values the program compares arguments with (after an argument load), each with its
/// neighbours: the argument vectors that reach every branch of a syscall's block.
fn tested_values(program: &[Instruction]) -> Vec<u64> {
    let mut values = vec![0u64, u64::MAX, 0xdead_beef_0000_0000, 1, 0o7777, 0o6000];
    let mut after_arg_load = false;
    for insn in program {
        match insn.code {
            0x20 => after_arg_load = insn.k >= 16,
            0x15 | 0x45 | 0x54 if after_arg_load => {
                let k = u64::from(insn.k);
                values.extend([
                    k,
                    k | 0x8000_0000,
                    k.wrapping_sub(1),
                    k + 1,
                    !k & 0xFFFF_FFFF,
                ]);
            }
            _ => {}
        }
    }
    values.sort_unstable();
    values.dedup();
    values
}

/// The program decides every call exactly as its rules do, whatever the shape its assembler
/// gives it (a binary search over the syscall numbers): every number up to 1100 and the x32
/// range, with no arguments and with junk, and every syscall a rule names with its tested
/// argument values one by one and in pairs, on both architectures, plain and observed.
#[test]
fn every_call_gets_what_the_rules_say() {
    let mut checked = 0usize;
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let audit = arch.audit_arch();
        for profile in every_profile() {
            let plain = seccomp::build_for(arch, &profile).unwrap();
            let observed = plain.observed();
            validate(plain.instructions());
            validate(observed.instructions());
            let values = tested_values(plain.instructions());
            let named: std::collections::BTreeSet<u32> = seccomp::rules_for(arch, &profile)
                .unwrap()
                .iter()
                .filter_map(|rule| rule.number)
                .collect();
            let junk = [u64::MAX, 0x0123_4567_89ab_cdef, 0o6000, 0x5412, 1, 0];
            let mut calls: Vec<(u32, [u64; 6])> = Vec::new();
            for nr in (0..1100u32).chain([0x4000_0000, 0x4000_0001, 0x4000_0000 + 435, u32::MAX]) {
                calls.push((nr, [0; 6]));
                calls.push((nr, junk));
            }
            for &nr in &named {
                for arg in 0..4 {
                    for &value in &values {
                        let mut args = [0u64; 6];
                        args[arg] = value;
                        calls.push((nr, args));
                    }
                }
                for (first, second) in [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)] {
                    for &a in values.iter().step_by(9) {
                        for &b in values.iter().step_by(23) {
                            let mut args = [0u64; 6];
                            args[first] = a;
                            args[second] = b;
                            calls.push((nr, args));
                        }
                    }
                }
            }
            for (nr, args) in calls {
                let want = rules_say(arch, &profile, nr, &args);
                let got = verdict(&plain, audit, nr, args);
                assert_eq!(got, want, "{arch:?} {profile:?} nr {nr} args {args:x?}");
                let want = observed_rules_say(arch, &profile, nr, &args);
                let got = verdict(&observed, audit, nr, args);
                assert_eq!(
                    got, want,
                    "observed {arch:?} {profile:?} nr {nr} args {args:x?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100_000, "checked {checked}");
}

/// How many instructions the kernel runs to learn whether syscall `nr` is always allowed, when
/// it fills its per-syscall action cache at install time (`seccomp_is_const_allow`: it follows
/// the program on the number and architecture alone and gives up at the first argument load).
fn const_action_steps(program: &[Instruction], audit_arch: u32, nr: u32) -> usize {
    let mut acc = 0u32;
    let mut pc = 0usize;
    for steps in 1.. {
        let insn = program[pc];
        let target = |offset: u8| pc + 1 + usize::from(offset);
        pc = match insn.code {
            0x20 => match insn.k {
                0 => {
                    acc = nr;
                    pc + 1
                }
                4 => {
                    acc = audit_arch;
                    pc + 1
                }
                _ => return steps,
            },
            0x06 => return steps,
            0x05 => pc + 1 + insn.k as usize,
            0x15 => target(if acc == insn.k { insn.jt } else { insn.jf }),
            0x35 => target(if acc >= insn.k { insn.jt } else { insn.jf }),
            0x45 => target(if acc & insn.k != 0 { insn.jt } else { insn.jf }),
            0x54 => {
                acc &= insn.k;
                pc + 1
            }
            code => panic!("opcode {code:#x} at {pc}"),
        };
    }
    unreachable!()
}

/// Installing the filter makes the kernel run it for every syscall number, and a call its
/// cache cannot answer runs it again: each number is reached in a few comparisons, not after
/// one per syscall the filter names (about 70: a chain of them cost 0.14 ms of every start).
#[test]
fn every_syscall_number_is_reached_in_a_few_steps() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for profile in every_profile() {
            for program in [
                seccomp::build_for(arch, &profile).unwrap(),
                seccomp::build_for(arch, &profile).unwrap().observed(),
            ] {
                let named = seccomp::rules_for(arch, &profile).unwrap().len();
                let most = (0..1100u32)
                    .map(|nr| const_action_steps(program.instructions(), arch.audit_arch(), nr))
                    .max()
                    .unwrap();
                assert!(
                    most <= 24,
                    "{arch:?} {profile:?}: {most} steps for one number ({named} rules)"
                );
            }
        }
    }
}

/// Under bwrap the observed program also stops `connect` and a `sendto` that names an address,
/// which the plain program allows, for the observer to look at and let run; a `sendto` without
/// an address (a connected socket's data) and every other allowed call still run unstopped.
/// Under Landlock nothing more is stopped.
#[test]
fn observed_bwrap_programs_stop_connect_and_addressed_sendto_only() {
    let arch = Arch::native().unwrap();
    let audit = arch.audit_arch();
    let connect = u32::try_from(libc::SYS_connect).unwrap();
    let sendto = u32::try_from(libc::SYS_sendto).unwrap();
    let getpid = u32::try_from(libc::SYS_getpid).unwrap();
    let addressed = [3, 0x7f00_0000_1000, 1, 0, 0x7f00_0000_2000, 16];
    let unaddressed = [3, 0x7f00_0000_1000, 1, 0, 0, 0];
    for reach in [Reach::OwnLoopback, Reach::Everything, Reach::Nothing] {
        let profile = Profile {
            mechanism: Mechanism::Bwrap,
            reach,
        };
        let plain = seccomp::build(&profile).unwrap();
        let observed = plain.observed();
        for (nr, args) in [
            (connect, addressed),
            (sendto, addressed),
            (sendto, unaddressed),
        ] {
            assert_eq!(
                verdict(&plain, audit, nr, args),
                Action::Allow,
                "{reach:?} {nr}"
            );
        }
        assert_eq!(
            verdict(&observed, audit, connect, addressed),
            Action::Observe
        );
        assert_eq!(
            verdict(&observed, audit, sendto, addressed),
            Action::Observe
        );
        assert_eq!(
            verdict(&observed, audit, sendto, unaddressed),
            Action::Allow
        );
        assert_eq!(verdict(&observed, audit, getpid, [0; 6]), Action::Allow);
        assert_eq!(
            seccomp::observed_only(arch, &profile, i32::try_from(sendto).unwrap(), &addressed),
            Some("sendto")
        );
        assert_eq!(
            seccomp::observed_only(arch, &profile, i32::try_from(sendto).unwrap(), &unaddressed),
            None
        );
    }
    // Raw IP sockets the socket rules allow are stopped to be looked at (the kernel refuses
    // them without CAP_NET_RAW); a netlink socket is SOCK_RAW too, and is not.
    let socket = u32::try_from(libc::SYS_socket).unwrap();
    let raw_icmp = [2, 3 | 0o2000000, 1, 0, 0, 0];
    let netlink = [16, 3, 0, 0, 0, 0];
    let stream = [2, 1, 0, 0, 0, 0];
    for reach in [Reach::OwnLoopback, Reach::Everything] {
        for mechanism in [Mechanism::Bwrap, Mechanism::Docker] {
            let profile = Profile { mechanism, reach };
            let plain = seccomp::build(&profile).unwrap();
            let observed = plain.observed();
            assert_eq!(verdict(&plain, audit, socket, raw_icmp), Action::Allow);
            assert_eq!(verdict(&observed, audit, socket, raw_icmp), Action::Observe);
            assert_eq!(verdict(&observed, audit, socket, stream), Action::Allow);
            assert_eq!(
                seccomp::observed_only(arch, &profile, i32::try_from(socket).unwrap(), &raw_icmp),
                Some("socket")
            );
            if verdict(&plain, audit, socket, netlink) == Action::Allow {
                assert_eq!(verdict(&observed, audit, socket, netlink), Action::Allow);
            }
        }
    }
    let landlock = Profile {
        mechanism: Mechanism::Landlock(LandlockProc::Own),
        reach: Reach::Everything,
    };
    let observed = seccomp::build(&landlock).unwrap().observed();
    assert_eq!(verdict(&observed, audit, connect, addressed), Action::Allow);
    assert_eq!(
        seccomp::observed_only(arch, &landlock, i32::try_from(connect).unwrap(), &addressed),
        None
    );
}

/// The program and `rules()` agree: every number not named by a rule is allowed with any
/// arguments, and every unconditional rule returns its action.
#[test]
fn rules_describe_the_program() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for profile in PROFILES {
            let program = seccomp::build_for(arch, &profile).unwrap();
            let rules = seccomp::rules_for(arch, &profile).unwrap();
            assert!(
                rules
                    .iter()
                    .all(|rule| !rule.closes.is_empty() && !rule.condition.is_empty())
            );
            let junk = [u64::MAX, 0x0123_4567_89ab_cdef, 0o6000, 0x5412, 1, 0];
            for nr in 0..1024u32 {
                let named: Vec<_> = rules
                    .iter()
                    .filter(|rule| rule.number == Some(nr))
                    .collect();
                let got_zero = verdict(&program, arch.audit_arch(), nr, [0; 6]);
                let got_junk = verdict(&program, arch.audit_arch(), nr, junk);
                match named.as_slice() {
                    [] => {
                        assert_eq!(got_zero, ALLOW, "{arch:?} {profile:?} nr {nr}");
                        assert_eq!(got_junk, ALLOW, "{arch:?} {profile:?} nr {nr}");
                    }
                    [rule, ..] if rule.condition == "always" => {
                        assert_eq!(got_zero, rule.action, "{rule}");
                        assert_eq!(got_junk, rule.action, "{rule}");
                    }
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn instruction_counts_are_bounded_and_reported() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for profile in PROFILES {
            let program = seccomp::build_for(arch, &profile).unwrap();
            let rules = seccomp::rules_for(arch, &profile).unwrap();
            assert!(program.len() < 4096);
            assert_eq!(program.as_bytes().len(), program.len() * 8);
            eprintln!(
                "{arch:?} {profile:?}: {} instructions, {} rules",
                program.len(),
                rules.len()
            );
        }
    }
    for rule in seccomp::rules_for(Arch::native().unwrap(), &LANDLOCK_OUTBOUND).unwrap() {
        eprintln!("{rule}");
    }
}

#[test]
fn bytes_are_native_sock_filters() {
    let program = seccomp::build(&BWRAP_NONE).unwrap();
    let bytes = program.as_bytes();
    let first = program.instructions()[0];
    assert_eq!(bytes[0..2], first.code.to_ne_bytes());
    assert_eq!(bytes[2], first.jt);
    assert_eq!(bytes[3], first.jf);
    assert_eq!(bytes[4..8], first.k.to_ne_bytes());
    assert_eq!(
        std::mem::size_of::<Instruction>(),
        std::mem::size_of::<libc::sock_filter>()
    );
}

// ---------------------------------------------------------------------------------------------
// The real kernel.

/// What happened to one probe in one child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Ok(i64),
    Err(i32),
    Killed(i32),
    /// The child could not enter its namespaces or install the filter (errno).
    SetupFailed(i32),
}

impl Outcome {
    fn same_kind(self, other: Self) -> bool {
        match (self, other) {
            (Self::Ok(_), Self::Ok(_)) => true,
            _ => self == other,
        }
    }
}

/// Where the child runs the probe.
#[derive(Clone, Copy, Debug)]
enum Setup {
    Plain,
    /// A new user + mount namespace whose mounts are private: mounting there touches nothing else.
    MountNs,
    /// A new user + UTS namespace: the hostname there is the child's own.
    UtsNs,
}

/// Paths and buffers prepared before `fork`, so the child allocates nothing.
struct Fixture {
    dir: PathBuf,
    c_dir: CString,
    c_file: CString,
    c_new: CString,
    c_node: CString,
    c_dev_null: CString,
    c_dev_userfaultfd: CString,
    c_tmpfs: CString,
    c_none: CString,
    c_key_type: CString,
    c_key_desc: CString,
}

impl Fixture {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("palisade-seccomp-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("file"), b"hello").unwrap();
        let c = |path: &Path| CString::new(path.as_os_str().as_bytes()).unwrap();
        Self {
            c_dir: c(&dir),
            c_file: c(&dir.join("file")),
            c_new: c(&dir.join("new")),
            c_node: c(&dir.join("node")),
            c_dev_null: CString::new("/dev/null").unwrap(),
            c_dev_userfaultfd: CString::new("/dev/userfaultfd").unwrap(),
            c_tmpfs: CString::new("tmpfs").unwrap(),
            c_none: CString::new("none").unwrap(),
            c_key_type: CString::new("user").unwrap(),
            c_key_desc: CString::new("palisade-seccomp-test").unwrap(),
            dir,
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Forks; the child enters `setup`, installs `filter` if any, runs `probe` and reports its
/// return value and errno through a pipe. Nothing in the child allocates or panics.
fn run_probe(
    setup: Setup,
    filter: Option<&Program>,
    probe: fn(&Fixture) -> i64,
    fx: &Fixture,
) -> Outcome {
    run_probe_with(setup, filter, None, probe, fx)
}

/// [`run_probe`] with the observed form of `filter` and its listener sent over `observe_to`.
fn run_probe_with(
    setup: Setup,
    filter: Option<&Program>,
    observe_to: Option<libc::c_int>,
    probe: fn(&Fixture) -> i64,
    fx: &Fixture,
) -> Outcome {
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut record = [0u8; 13];
        let ns = match setup {
            Setup::Plain => 0,
            Setup::MountNs => libc::CLONE_NEWUSER | libc::CLONE_NEWNS,
            Setup::UtsNs => libc::CLONE_NEWUSER | libc::CLONE_NEWUTS,
        };
        let mut failed = 0;
        if ns != 0 && unsafe { libc::unshare(ns) } != 0 {
            failed = errno();
        }
        if failed == 0 && ns & libc::CLONE_NEWNS != 0 {
            let root = c"/";
            let flags = libc::MS_REC | libc::MS_PRIVATE;
            if unsafe {
                libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    flags,
                    std::ptr::null(),
                )
            } != 0
            {
                failed = errno();
            }
        }
        let installed = match (filter, observe_to) {
            (None, _) => Ok(()),
            (Some(program), None) => seccomp::install(program),
            (Some(program), Some(socket)) => seccomp::install_observed(program, socket),
        };
        if failed == 0
            && let Err(err) = installed
        {
            failed = match err {
                seccomp::SeccompError::NoNewPrivs { source }
                | seccomp::SeccompError::Install { source }
                | seccomp::SeccompError::SendListener { source } => {
                    source.raw_os_error().unwrap_or(-1)
                }
                _ => -1,
            };
        }
        if failed != 0 {
            record[0] = 2;
            record[9..13].copy_from_slice(&failed.to_ne_bytes());
        } else {
            let ret = probe(fx);
            let err = if ret < 0 { errno() } else { 0 };
            record[0] = 1;
            record[1..9].copy_from_slice(&ret.to_ne_bytes());
            record[9..13].copy_from_slice(&err.to_ne_bytes());
        }
        unsafe {
            libc::write(fds[1], record.as_ptr().cast(), record.len());
            libc::_exit(0);
        }
    }
    unsafe { libc::close(fds[1]) };
    let mut record = Vec::new();
    let mut reader = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
    reader.read_to_end(&mut record).unwrap();
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
    if libc::WIFSIGNALED(status) {
        return Outcome::Killed(libc::WTERMSIG(status));
    }
    assert_eq!(
        record.len(),
        13,
        "child exited with {status:#x} and no report"
    );
    let ret = i64::from_ne_bytes(record[1..9].try_into().unwrap());
    let err = i32::from_ne_bytes(record[9..13].try_into().unwrap());
    match record[0] {
        1 if ret < 0 => Outcome::Err(err),
        1 => Outcome::Ok(ret),
        _ => Outcome::SetupFailed(err),
    }
}

/// `c_long` is `i64` on both supported architectures.
fn raw(ret: libc::c_long) -> i64 {
    ret
}

fn open_file(fx: &Fixture, flags: libc::c_int) -> libc::c_int {
    unsafe { libc::open(fx.c_file.as_ptr(), flags | libc::O_CLOEXEC) }
}

/// A fork-like raw clone: the child exits at once, the parent reaps it.
fn clone_and_reap(flags: libc::c_ulong) -> i64 {
    let zero: libc::c_ulong = 0;
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags | libc::SIGCHLD as libc::c_ulong,
            zero,
            zero,
            zero,
            zero,
        )
    };
    if pid == 0 {
        unsafe { libc::_exit(0) };
    }
    if pid > 0 {
        let mut status = 0;
        unsafe { libc::waitpid(pid as libc::pid_t, &raw mut status, 0) };
    }
    raw(pid)
}

fn ioctl_dev_null(fx: &Fixture, request: u64) -> i64 {
    let fd = unsafe { libc::open(fx.c_dev_null.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    let mut buf = [0u8; 64];
    raw(unsafe { libc::syscall(libc::SYS_ioctl, fd, request, buf.as_mut_ptr()) })
}

fn socket(domain: libc::c_int, kind: libc::c_int, protocol: libc::c_int) -> i64 {
    i64::from(unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) })
}

fn fchmodat(fx: &Fixture, mode: libc::mode_t) -> i64 {
    i64::from(unsafe { libc::fchmodat(libc::AT_FDCWD, fx.c_file.as_ptr(), mode, 0) })
}

fn mknodat(fx: &Fixture, mode: libc::mode_t, dev: libc::dev_t) -> i64 {
    unsafe { libc::unlink(fx.c_node.as_ptr()) };
    i64::from(unsafe { libc::mknodat(libc::AT_FDCWD, fx.c_node.as_ptr(), mode, dev) })
}

fn create(fx: &Fixture, mode: libc::c_uint) -> i64 {
    unsafe { libc::unlink(fx.c_new.as_ptr()) };
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC;
    raw(unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            fx.c_new.as_ptr(),
            flags,
            mode,
        )
    })
}

/// How the unfiltered call must behave for the filtered verdict to mean anything.
#[derive(Clone, Copy, Debug)]
enum Baseline {
    Succeeds,
    SucceedsOr(&'static [i32]),
    Fails(&'static [i32]),
}

impl Baseline {
    fn accepts(self, outcome: Outcome) -> bool {
        match (self, outcome) {
            (Self::Succeeds | Self::SucceedsOr(_), Outcome::Ok(_)) => true,
            (Self::SucceedsOr(errnos) | Self::Fails(errnos), Outcome::Err(e)) => {
                errnos.contains(&e)
            }
            _ => false,
        }
    }
}

/// The expected verdict under the filter: the same as unfiltered, or a denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Same,
    Denied(i32),
    Killed,
}

const SAME: Expect = Expect::Same;
const DENIED: Expect = Expect::Denied(libc::EPERM);

struct Case {
    name: &'static str,
    setup: Setup,
    probe: fn(&Fixture) -> i64,
    baseline: Baseline,
    /// For [`PROFILES`]: bwrap + none, bwrap + own loopback, landlock + none, landlock +
    /// outbound.
    expect: [Expect; 4],
}

const fn case(
    name: &'static str,
    probe: fn(&Fixture) -> i64,
    baseline: Baseline,
    expect: Expect,
) -> Case {
    Case {
        name,
        setup: Setup::Plain,
        probe,
        baseline,
        expect: [expect; 4],
    }
}

fn cases() -> Vec<Case> {
    use Baseline::{Fails, Succeeds, SucceedsOr};
    let mut cases = vec![
        case(
            "getpid",
            |_| i64::from(unsafe { libc::getpid() }),
            Succeeds,
            SAME,
        ),
        case(
            "unshare(CLONE_NEWUSER)",
            |_| i64::from(unsafe { libc::unshare(libc::CLONE_NEWUSER) }),
            Succeeds,
            DENIED,
        ),
        case(
            "clone(CLONE_NEWUSER)",
            |_| clone_and_reap(libc::CLONE_NEWUSER as libc::c_ulong),
            Succeeds,
            DENIED,
        ),
        case(
            "clone(CLONE_NEWNET|CLONE_NEWUSER)",
            |_| clone_and_reap((libc::CLONE_NEWNET | libc::CLONE_NEWUSER) as libc::c_ulong),
            Succeeds,
            DENIED,
        ),
        case("clone(SIGCHLD)", |_| clone_and_reap(0), Succeeds, SAME),
        case(
            "clone3(NULL, 0)",
            |_| raw(unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) }),
            Fails(&[libc::EINVAL]),
            Expect::Denied(libc::ENOSYS),
        ),
        case(
            "setns(-1)",
            |_| i64::from(unsafe { libc::setns(-1, 0) }),
            Fails(&[libc::EBADF]),
            DENIED,
        ),
        case(
            "ptrace(PTRACE_TRACEME)",
            |_| raw(unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) }),
            Succeeds,
            DENIED,
        ),
        case(
            "process_vm_readv(self)",
            |_| {
                let source = [7u8; 8];
                let mut target = [0u8; 8];
                let local = libc::iovec {
                    iov_base: target.as_mut_ptr().cast(),
                    iov_len: 8,
                };
                let remote = libc::iovec {
                    iov_base: source.as_ptr().cast_mut().cast(),
                    iov_len: 8,
                };
                raw(unsafe {
                    libc::process_vm_readv(
                        libc::getpid(),
                        &raw const local,
                        1,
                        &raw const remote,
                        1,
                        0,
                    )
                } as libc::c_long)
            },
            Succeeds,
            DENIED,
        ),
        case(
            "pidfd_getfd(self, 0)",
            |_| {
                let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
                raw(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, 0, 0) })
            },
            Succeeds,
            DENIED,
        ),
        case(
            "kcmp(self, self, KCMP_FILE)",
            |_| {
                let pid = unsafe { libc::getpid() };
                raw(unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, 0, 0, 0) })
            },
            SucceedsOr(&[libc::ENOSYS]),
            DENIED,
        ),
        case(
            "io_uring_setup(1)",
            |_| {
                let mut params = [0u32; 30];
                raw(unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) })
            },
            Succeeds,
            DENIED,
        ),
        case(
            "keyctl(GET_KEYRING_ID, session)",
            |_| raw(unsafe { libc::syscall(libc::SYS_keyctl, 0, -3, 0) }),
            Succeeds,
            DENIED,
        ),
        case(
            "add_key(user, process keyring)",
            |fx| {
                let payload = b"x";
                raw(unsafe {
                    libc::syscall(
                        libc::SYS_add_key,
                        fx.c_key_type.as_ptr(),
                        fx.c_key_desc.as_ptr(),
                        payload.as_ptr(),
                        1,
                        -2,
                    )
                })
            },
            Succeeds,
            DENIED,
        ),
        case(
            "perf_event_open(software, self)",
            |_| {
                let mut attr = [0u64; 16];
                attr[0] = 1 | (64 << 32); // type PERF_TYPE_SOFTWARE, size PERF_ATTR_SIZE_VER0
                attr[1] = 9; // PERF_COUNT_SW_DUMMY
                attr[5] = 0x61; // disabled | exclude_kernel | exclude_hv
                raw(unsafe {
                    libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0)
                })
            },
            SucceedsOr(&[libc::EACCES]),
            DENIED,
        ),
        case(
            "userfaultfd(UFFD_USER_MODE_ONLY)",
            |_| raw(unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | 1) }),
            Succeeds,
            DENIED,
        ),
        case(
            "ioctl(/dev/userfaultfd, USERFAULTFD_IOC_NEW)",
            |fx| {
                // Unopenable (not root): fd -1 still reaches the handler's EBADF.
                let fd = unsafe {
                    libc::open(
                        fx.c_dev_userfaultfd.as_ptr(),
                        libc::O_RDWR | libc::O_CLOEXEC,
                    )
                };
                raw(unsafe { libc::syscall(libc::SYS_ioctl, fd, 0xAA00, libc::O_CLOEXEC | 1) })
            },
            SucceedsOr(&[libc::EBADF]),
            DENIED,
        ),
        case(
            "ioctl(TIOCSTI)",
            |fx| ioctl_dev_null(fx, 0x5412),
            Fails(&[libc::ENOTTY]),
            DENIED,
        ),
        case(
            "ioctl(TIOCSTI | junk << 32)",
            |fx| ioctl_dev_null(fx, 0xdead_beef_0000_5412),
            Fails(&[libc::ENOTTY]),
            DENIED,
        ),
        case(
            "ioctl(TIOCLINUX)",
            |fx| ioctl_dev_null(fx, 0x541C),
            Fails(&[libc::ENOTTY]),
            DENIED,
        ),
        case(
            "ioctl(TCGETS)",
            |fx| ioctl_dev_null(fx, 0x5401),
            Fails(&[libc::ENOTTY]),
            SAME,
        ),
        case(
            "personality(ADDR_NO_RANDOMIZE)",
            |_| raw(unsafe { libc::syscall(libc::SYS_personality, 0x0040_0000) }),
            Succeeds,
            DENIED,
        ),
        case(
            "personality(query)",
            |_| raw(unsafe { libc::syscall(libc::SYS_personality, 0xFFFF_FFFFu32) }),
            Succeeds,
            SAME,
        ),
        case(
            "fchmodat(04755)",
            |fx| fchmodat(fx, 0o4755),
            Succeeds,
            DENIED,
        ),
        case(
            "fchmodat(02755)",
            |fx| fchmodat(fx, 0o2755),
            Succeeds,
            DENIED,
        ),
        case("fchmodat(0644)", |fx| fchmodat(fx, 0o644), Succeeds, SAME),
        case(
            "fchmod(04700)",
            |fx| i64::from(unsafe { libc::fchmod(open_file(fx, libc::O_RDONLY), 0o4700) }),
            Succeeds,
            DENIED,
        ),
        case(
            "fchmod(0600)",
            |fx| i64::from(unsafe { libc::fchmod(open_file(fx, libc::O_RDONLY), 0o600) }),
            Succeeds,
            SAME,
        ),
        case(
            "mknodat(S_IFCHR whiteout 0:0)",
            |fx| mknodat(fx, libc::S_IFCHR | 0o600, 0),
            Succeeds,
            DENIED,
        ),
        case(
            "mknodat(S_IFREG|04755)",
            |fx| mknodat(fx, libc::S_IFREG | 0o4755, 0),
            Succeeds,
            DENIED,
        ),
        case(
            "mknodat(S_IFIFO|0644)",
            |fx| mknodat(fx, libc::S_IFIFO | 0o644, 0),
            Succeeds,
            SAME,
        ),
        case(
            "openat(O_CREAT, 04755)",
            |fx| create(fx, 0o4755),
            Succeeds,
            DENIED,
        ),
        case(
            "openat(O_CREAT, 0644)",
            |fx| create(fx, 0o644),
            Succeeds,
            SAME,
        ),
        case(
            "openat(O_RDONLY, stray mode 04755)",
            |fx| {
                let flags = libc::O_RDONLY | libc::O_CLOEXEC;
                raw(unsafe {
                    libc::syscall(
                        libc::SYS_openat,
                        libc::AT_FDCWD,
                        fx.c_file.as_ptr(),
                        flags,
                        0o4755,
                    )
                })
            },
            Succeeds,
            SAME,
        ),
        case(
            "openat2(O_RDONLY)",
            |fx| {
                let how: [u64; 3] = [(libc::O_RDONLY | libc::O_CLOEXEC) as u64, 0, 0];
                raw(unsafe {
                    libc::syscall(
                        libc::SYS_openat2,
                        libc::AT_FDCWD,
                        fx.c_file.as_ptr(),
                        how.as_ptr(),
                        24usize,
                    )
                })
            },
            Succeeds,
            Expect::Denied(libc::ENOSYS),
        ),
        case(
            "open + write + pread",
            |fx| {
                let fd = open_file(fx, libc::O_RDWR);
                let mut buf = [0u8; 16];
                if unsafe { libc::write(fd, b"HE".as_ptr().cast(), 2) } != 2 {
                    return -1;
                }
                raw(
                    unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) }
                        as libc::c_long,
                )
            },
            Succeeds,
            SAME,
        ),
        case(
            "socketpair(AF_UNIX)",
            |_| {
                let mut sv = [0; 2];
                i64::from(unsafe {
                    libc::socketpair(
                        libc::AF_UNIX,
                        libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                        0,
                        sv.as_mut_ptr(),
                    )
                })
            },
            Succeeds,
            SAME,
        ),
        Case {
            name: "socket(AF_UNIX)",
            setup: Setup::Plain,
            probe: |_| socket(libc::AF_UNIX, libc::SOCK_STREAM, 0),
            baseline: Succeeds,
            expect: [SAME, SAME, DENIED, DENIED],
        },
        Case {
            name: "socket(AF_INET, TCP)",
            setup: Setup::Plain,
            probe: |_| socket(libc::AF_INET, libc::SOCK_STREAM, 0),
            baseline: Succeeds,
            expect: [DENIED, SAME, DENIED, SAME],
        },
        Case {
            name: "socket(AF_INET6, UDP)",
            setup: Setup::Plain,
            probe: |_| socket(libc::AF_INET6, libc::SOCK_DGRAM, 0),
            baseline: Succeeds,
            expect: [DENIED, SAME, DENIED, SAME],
        },
        Case {
            // Route netlink sees only the sandbox's own loopback under bwrap and docker, where
            // `getifaddrs` needs it; under Landlock `none` it would list the host's.
            name: "socket(AF_NETLINK, NETLINK_ROUTE)",
            setup: Setup::Plain,
            probe: |_| socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE),
            baseline: Succeeds,
            expect: [SAME, SAME, DENIED, SAME],
        },
        Case {
            name: "socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)",
            setup: Setup::Plain,
            probe: |_| {
                socket(
                    libc::AF_NETLINK,
                    libc::SOCK_RAW,
                    libc::NETLINK_KOBJECT_UEVENT,
                )
            },
            baseline: Succeeds,
            expect: [DENIED, SAME, DENIED, DENIED],
        },
        Case {
            // Without a vsock transport the unfiltered call fails with EAFNOSUPPORT (or
            // ENODEV); the filter must still answer EPERM, before the family is looked at.
            name: "socket(AF_VSOCK, STREAM)",
            setup: Setup::Plain,
            probe: |_| socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0),
            baseline: SucceedsOr(&[libc::EAFNOSUPPORT, libc::ENODEV]),
            expect: [DENIED; 4],
        },
        Case {
            name: "mount(tmpfs) in a private mount namespace",
            setup: Setup::MountNs,
            probe: |fx| {
                let flags = libc::MS_NOSUID | libc::MS_NODEV;
                i64::from(unsafe {
                    libc::mount(
                        fx.c_none.as_ptr(),
                        fx.c_dir.as_ptr(),
                        fx.c_tmpfs.as_ptr(),
                        flags,
                        std::ptr::null(),
                    )
                })
            },
            baseline: Succeeds,
            expect: [DENIED; 4],
        },
        Case {
            name: "umount2(not a mount point) in a private mount namespace",
            setup: Setup::MountNs,
            probe: |fx| i64::from(unsafe { libc::umount2(fx.c_dir.as_ptr(), 0) }),
            baseline: Fails(&[libc::EINVAL]),
            expect: [DENIED; 4],
        },
        Case {
            name: "fsopen(tmpfs) in a private mount namespace",
            setup: Setup::MountNs,
            probe: |fx| raw(unsafe { libc::syscall(libc::SYS_fsopen, fx.c_tmpfs.as_ptr(), 0) }),
            baseline: Succeeds,
            expect: [DENIED; 4],
        },
        Case {
            name: "open_tree(OPEN_TREE_CLONE) in a private mount namespace",
            setup: Setup::MountNs,
            probe: |fx| {
                raw(unsafe {
                    libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, fx.c_dir.as_ptr(), 1)
                })
            },
            baseline: Succeeds,
            expect: [DENIED; 4],
        },
        Case {
            name: "chroot in a private mount namespace",
            setup: Setup::MountNs,
            probe: |fx| i64::from(unsafe { libc::chroot(fx.c_dir.as_ptr()) }),
            baseline: Succeeds,
            expect: [DENIED; 4],
        },
        Case {
            name: "sethostname in a private UTS namespace",
            setup: Setup::UtsNs,
            probe: |_| {
                let name = b"palisade-test";
                i64::from(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })
            },
            baseline: Succeeds,
            expect: [DENIED; 4],
        },
    ];
    #[cfg(target_arch = "x86_64")]
    cases.extend([
        case(
            "chmod(04755)",
            |fx| raw(unsafe { libc::syscall(libc::SYS_chmod, fx.c_file.as_ptr(), 0o4755) }),
            Succeeds,
            DENIED,
        ),
        case(
            "chmod(0644)",
            |fx| raw(unsafe { libc::syscall(libc::SYS_chmod, fx.c_file.as_ptr(), 0o644) }),
            Succeeds,
            SAME,
        ),
        case(
            "fchmodat2(04755)",
            |fx| {
                raw(unsafe {
                    libc::syscall(
                        libc::SYS_fchmodat2,
                        libc::AT_FDCWD,
                        fx.c_file.as_ptr(),
                        0o4755,
                        0,
                    )
                })
            },
            Succeeds,
            DENIED,
        ),
        case(
            "creat(04755)",
            |fx| {
                unsafe { libc::unlink(fx.c_new.as_ptr()) };
                raw(unsafe { libc::syscall(libc::SYS_creat, fx.c_new.as_ptr(), 0o4755) })
            },
            Succeeds,
            DENIED,
        ),
        case(
            "mknod(S_IFCHR whiteout 0:0)",
            |fx| {
                unsafe { libc::unlink(fx.c_node.as_ptr()) };
                raw(unsafe {
                    libc::syscall(
                        libc::SYS_mknod,
                        fx.c_node.as_ptr(),
                        libc::S_IFCHR | 0o600,
                        0,
                    )
                })
            },
            Succeeds,
            DENIED,
        ),
        case(
            "x32 getpid (nr | 0x40000000)",
            |_| raw(unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) }),
            Fails(&[libc::ENOSYS]),
            DENIED,
        ),
        case(
            "i386 int 0x80 getpid",
            |_| int80_getpid(),
            Succeeds,
            Expect::Killed,
        ),
    ]);
    cases
}

/// getpid through the i386 compat entry (`int 0x80`, nr 20), which reports AUDIT_ARCH_I386.
#[cfg(target_arch = "x86_64")]
fn int80_getpid() -> i64 {
    let ret: i64;
    unsafe {
        std::arch::asm!(
            "int 0x80",
            inlateout("rax") 20i64 => ret,
            lateout("r8") _, lateout("r9") _, lateout("r10") _, lateout("r11") _,
            options(nostack)
        );
    }
    if ret < 0 {
        // The compat entry returns -errno in rax; report it like libc would.
        unsafe { *libc::__errno_location() = i32::try_from(-ret).unwrap_or(libc::EINVAL) };
        return -1;
    }
    ret
}

fn check_kernel(profile_index: usize) {
    let profile = PROFILES[profile_index];
    let program = seccomp::build(&profile).unwrap();
    let fx = Fixture::new(&format!("{profile_index}"));
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for case in cases() {
        let baseline = run_probe(case.setup, None, case.probe, &fx);
        let filtered = run_probe(case.setup, Some(&program), case.probe, &fx);
        let expect = case.expect[profile_index];
        report.push(format!(
            "{:<55} unfiltered {baseline:?}, filtered {filtered:?}",
            case.name
        ));
        if !case.baseline.accepts(baseline) {
            failures.push(format!(
                "{}: unfiltered {baseline:?}, needed {:?}",
                case.name, case.baseline
            ));
            continue;
        }
        let ok = match expect {
            Expect::Same => filtered.same_kind(baseline),
            Expect::Denied(errno) => filtered == Outcome::Err(errno) && baseline != filtered,
            Expect::Killed => filtered == Outcome::Killed(libc::SIGSYS),
        };
        if !ok {
            failures.push(format!(
                "{}: unfiltered {baseline:?}, filtered {filtered:?}, want {expect:?}",
                case.name
            ));
        }
    }
    eprintln!(
        "{profile:?} (euid {}):\n{}",
        unsafe { libc::geteuid() },
        report.join("\n")
    );
    assert!(failures.is_empty(), "{profile:?}:\n{}", failures.join("\n"));
}

/// Every case again under the observed form of the filter, with an observer answering: the
/// command sees exactly what the plain filter gives it, every refusal is observed with that
/// errno, and nothing the filter allows (or kills) reaches the observer.
fn check_kernel_observed(profile_index: usize) {
    let profile = PROFILES[profile_index];
    let plain = seccomp::build(&profile).unwrap();
    let observed_program = plain.observed();
    assert!(observed_program.is_observed() && !plain.is_observed());
    let fx = Fixture::new(&format!("observed-{profile_index}"));
    let mut failures = Vec::new();
    let mut explained = 0;
    let mut refused = 0;
    for case in cases() {
        let filtered = run_probe(case.setup, Some(&plain), case.probe, &fx);
        let (ours, theirs) = observe::channel().unwrap();
        let observer = observe::Observer::start(
            observe::Channel::Connected(ours),
            seccomp::Arch::native().unwrap(),
            profile,
            observe::Watch::default(),
        )
        .unwrap();
        let outcome = run_probe_with(
            case.setup,
            Some(&observed_program),
            Some(theirs.as_raw_fd()),
            case.probe,
            &fx,
        );
        drop(theirs);
        let seen = observer.finish();
        let same = match (outcome, filtered) {
            (Outcome::Ok(_), Outcome::Ok(_)) => true,
            _ => outcome == filtered,
        };
        if !same {
            failures.push(format!(
                "{}: plain filter {filtered:?}, observed filter {outcome:?}",
                case.name
            ));
            continue;
        }
        match outcome {
            // ENOSYS steers libc to a readable syscall: the kernel answers it, never observed.
            Outcome::Err(libc::ENOSYS) if seen.total != 0 => {
                failures.push(format!("{}: a steer was observed {seen:?}", case.name));
            }
            Outcome::Err(libc::ENOSYS) => {}
            Outcome::Err(errno) if matches!(case.expect[profile_index], Expect::Denied(_)) => {
                refused += 1;
                if seen.total >= 1 && seen.calls.iter().any(|c| c.errno == errno) {
                    explained += 1;
                } else {
                    failures.push(format!(
                        "{}: refused with {errno}, observed {seen:?}",
                        case.name
                    ));
                }
            }
            _ if matches!(case.expect[profile_index], Expect::Same | Expect::Killed)
                && seen.total != 0 =>
            {
                failures.push(format!("{}: not refused, yet observed {seen:?}", case.name));
            }
            _ => {}
        }
        if let Some(error) = &seen.error {
            failures.push(format!("{}: observer error {error}", case.name));
        }
    }
    eprintln!("{profile:?} observed: {explained} of {refused} refusals explained");
    assert!(failures.is_empty(), "{profile:?}:\n{}", failures.join("\n"));
    assert!(refused > 0);
}

#[test]
fn kernel_enforces_bwrap_none_profile_observed() {
    check_kernel_observed(0);
}

#[test]
fn kernel_enforces_bwrap_loopback_profile_observed() {
    check_kernel_observed(1);
}

#[test]
fn kernel_enforces_landlock_none_profile_observed() {
    check_kernel_observed(2);
}

#[test]
fn kernel_enforces_landlock_outbound_profile_observed() {
    check_kernel_observed(3);
}

#[test]
fn kernel_enforces_bwrap_none_profile() {
    check_kernel(0);
}

#[test]
fn kernel_enforces_bwrap_loopback_profile() {
    check_kernel(1);
}

#[test]
fn kernel_enforces_landlock_none_profile() {
    check_kernel(2);
}

#[test]
fn kernel_enforces_landlock_outbound_profile() {
    check_kernel(3);
}

/// `install` runs between `fork` and `exec`, where allocating can deadlock: it must not.
#[test]
fn install_allocates_nothing() {
    let program = seccomp::build(&LANDLOCK_NONE).unwrap();
    let before = ALLOCATIONS.load(std::sync::atomic::Ordering::SeqCst);
    drop(std::hint::black_box(vec![1u8]));
    assert!(
        ALLOCATIONS.load(std::sync::atomic::Ordering::SeqCst) > before,
        "the counter counts"
    );
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let before = ALLOCATIONS.load(std::sync::atomic::Ordering::SeqCst);
        let installed = u64::from(seccomp::install(&program).is_ok());
        let allocations = ALLOCATIONS.load(std::sync::atomic::Ordering::SeqCst) - before;
        let record = [installed, allocations as u64];
        unsafe {
            libc::write(fds[1], record.as_ptr().cast(), 16);
            libc::_exit(0);
        }
    }
    unsafe { libc::close(fds[1]) };
    let mut record = [0u8; 16];
    let mut reader = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
    reader.read_exact(&mut record).unwrap();
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
    let installed = u64::from_ne_bytes(record[0..8].try_into().unwrap());
    let allocations = u64::from_ne_bytes(record[8..16].try_into().unwrap());
    assert_eq!((installed, allocations), (1, 0), "installed?, allocations");
}

/// `install` from `pre_exec`, the way the Landlock runner uses it: the filter survives `exec`
/// and real programs run normally under it.
fn filtered_command(program: &str, profile: Profile) -> Command {
    let filter = seccomp::build(&profile).unwrap();
    let mut command = Command::new(program);
    unsafe {
        command.pre_exec(move || {
            seccomp::install(&filter).map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))
        });
    }
    command
}

#[test]
fn shell_runs_under_the_filter_and_cannot_set_setuid_bits() {
    let fx = Fixture::new("shell");
    let script = "cd \"$1\" && echo ok > out && cat out && chmod 644 out && ls -l out >/dev/null \
                  && (chmod 4755 out && echo SETUID-ALLOWED || echo setuid-denied)";
    let output = filtered_command("/bin/sh", LANDLOCK_NONE)
        .args(["-c", script, "sh"])
        .arg(&fx.dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout, "ok\nsetuid-denied\n", "{output:?}");
    let unfiltered = Command::new("/bin/sh")
        .args(["-c", script, "sh"])
        .arg(&fx.dir)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&unfiltered.stdout),
        "ok\nSETUID-ALLOWED\n",
        "{unfiltered:?}"
    );
}

const CHILD_ENV: &str = "PALISADE_SECCOMP_TEST_CHILD";

/// Helper run by `threads_and_processes_work_under_the_filter` in a filtered re-exec of this
/// binary; a no-op in a normal run.
#[test]
fn helper_threads_under_filter() {
    if std::env::var_os(CHILD_ENV).as_deref() != Some(std::ffi::OsStr::new("threads")) {
        return;
    }
    // pthread_create tries clone3 first, gets ENOSYS from the filter and falls back to clone.
    let handles: Vec<_> = (0..4).map(|i| std::thread::spawn(move || i * 2)).collect();
    let sum: i32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(sum, 12);
    assert!(Command::new("/bin/true").status().unwrap().success());
    assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWUSER) }, -1);
    assert_eq!(errno(), libc::EPERM);
    println!("threads ok");
}

#[test]
fn threads_and_processes_work_under_the_filter() {
    let exe = std::env::current_exe().unwrap();
    let output = filtered_command(exe.to_str().unwrap(), LANDLOCK_NONE)
        .args([
            "--exact",
            "helper_threads_under_filter",
            "--nocapture",
            "--test-threads",
            "2",
        ])
        .env(CHILD_ENV, "threads")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("threads ok"),
        "{output:?}"
    );
}

/// The kernel tests again as an unprivileged user when the suite runs as root, so both kinds of
/// caller are covered by one `cargo test`.
#[test]
fn kernel_tests_pass_unprivileged_too() {
    if unsafe { libc::geteuid() } != 0 {
        return; // already unprivileged: the kernel tests above are the unprivileged run
    }
    // uid 65534 must be able to execute this test binary, wherever the checkout lives.
    let exe = reachable::reachable_binary(
        &std::env::current_exe().unwrap(),
        &reachable::reachable_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "seccomp-tests"),
    );
    let mut command = Command::new(&exe);
    command
        .args(["kernel_enforces_", "--test-threads", "1"])
        .env("TMPDIR", "/tmp")
        .current_dir("/");
    unsafe {
        command.pre_exec(|| {
            let nobody: libc::uid_t = 65534;
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(nobody, nobody, nobody) != 0
                || libc::setresuid(nobody, nobody, nobody) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("8 passed"),
        "as uid 65534 ({:?}; signal {:?}):\n{stdout}\n{}",
        output.status.code(),
        output.status.signal(),
        String::from_utf8_lossy(&output.stderr)
    );
}
