//! The syscalls the rules name, with their numbers on each architecture: one table, a column
//! per architecture (`aarch64` uses the generic numbering); a unit test checks the native column
//! against `libc::SYS_*`.

use super::Arch;

/// `__X32_SYSCALL_BIT`: x32 syscalls carry `AUDIT_ARCH_X86_64` and `nr | 0x4000_0000`.
pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// A syscall and its number on each architecture (`None` where it does not exist).
#[derive(Clone, Copy, Debug)]
pub(super) struct Syscall {
    pub(super) name: &'static str,
    pub(super) x86_64: Option<u32>,
    pub(super) aarch64: Option<u32>,
}

impl Syscall {
    pub(super) const fn number(self, arch: Arch) -> Option<u32> {
        match arch {
            Arch::X86_64 => self.x86_64,
            Arch::Aarch64 => self.aarch64,
        }
    }
}

pub(super) const fn both(name: &'static str, x86_64: u32, aarch64: u32) -> Syscall {
    Syscall {
        name,
        x86_64: Some(x86_64),
        aarch64: Some(aarch64),
    }
}

pub(super) const fn x86_64_only(name: &'static str, x86_64: u32) -> Syscall {
    Syscall {
        name,
        x86_64: Some(x86_64),
        aarch64: None,
    }
}

// Numbers from arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h;
// `syscall_numbers_match_libc` checks the native column.
pub(super) const PTRACE: Syscall = both("ptrace", 101, 117);
pub(super) const PROCESS_VM_READV: Syscall = both("process_vm_readv", 310, 270);
pub(super) const PROCESS_VM_WRITEV: Syscall = both("process_vm_writev", 311, 271);
pub(super) const PIDFD_GETFD: Syscall = both("pidfd_getfd", 438, 438);
pub(super) const KCMP: Syscall = both("kcmp", 312, 272);
pub(super) const UNSHARE: Syscall = both("unshare", 272, 97);
pub(super) const SETNS: Syscall = both("setns", 308, 268);
pub(super) const CLONE: Syscall = both("clone", 56, 220);
pub(super) const CLONE3: Syscall = both("clone3", 435, 435);
pub(super) const MOUNT: Syscall = both("mount", 165, 40);
pub(super) const UMOUNT2: Syscall = both("umount2", 166, 39);
pub(super) const PIVOT_ROOT: Syscall = both("pivot_root", 155, 41);
pub(super) const CHROOT: Syscall = both("chroot", 161, 51);
pub(super) const OPEN_TREE: Syscall = both("open_tree", 428, 428);
pub(super) const MOVE_MOUNT: Syscall = both("move_mount", 429, 429);
pub(super) const FSOPEN: Syscall = both("fsopen", 430, 430);
pub(super) const FSCONFIG: Syscall = both("fsconfig", 431, 431);
pub(super) const FSMOUNT: Syscall = both("fsmount", 432, 432);
pub(super) const FSPICK: Syscall = both("fspick", 433, 433);
pub(super) const MOUNT_SETATTR: Syscall = both("mount_setattr", 442, 442);
pub(super) const OPEN_TREE_ATTR: Syscall = both("open_tree_attr", 467, 467);
pub(super) const BPF: Syscall = both("bpf", 321, 280);
pub(super) const PERF_EVENT_OPEN: Syscall = both("perf_event_open", 298, 241);
pub(super) const USERFAULTFD: Syscall = both("userfaultfd", 323, 282);
pub(super) const IO_URING_SETUP: Syscall = both("io_uring_setup", 425, 425);
pub(super) const IO_URING_ENTER: Syscall = both("io_uring_enter", 426, 426);
pub(super) const IO_URING_REGISTER: Syscall = both("io_uring_register", 427, 427);
pub(super) const ADD_KEY: Syscall = both("add_key", 248, 217);
pub(super) const REQUEST_KEY: Syscall = both("request_key", 249, 218);
pub(super) const KEYCTL: Syscall = both("keyctl", 250, 219);
pub(super) const KEXEC_LOAD: Syscall = both("kexec_load", 246, 104);
pub(super) const KEXEC_FILE_LOAD: Syscall = both("kexec_file_load", 320, 294);
pub(super) const INIT_MODULE: Syscall = both("init_module", 175, 105);
pub(super) const FINIT_MODULE: Syscall = both("finit_module", 313, 273);
pub(super) const DELETE_MODULE: Syscall = both("delete_module", 176, 106);
pub(super) const NAME_TO_HANDLE_AT: Syscall = both("name_to_handle_at", 303, 264);
pub(super) const OPEN_BY_HANDLE_AT: Syscall = both("open_by_handle_at", 304, 265);
pub(super) const FANOTIFY_INIT: Syscall = both("fanotify_init", 300, 262);
pub(super) const ACCT: Syscall = both("acct", 163, 89);
pub(super) const SWAPON: Syscall = both("swapon", 167, 224);
pub(super) const SWAPOFF: Syscall = both("swapoff", 168, 225);
pub(super) const REBOOT: Syscall = both("reboot", 169, 142);
pub(super) const SYSLOG: Syscall = both("syslog", 103, 116);
pub(super) const QUOTACTL: Syscall = both("quotactl", 179, 60);
pub(super) const QUOTACTL_FD: Syscall = both("quotactl_fd", 443, 443);
pub(super) const LOOKUP_DCOOKIE: Syscall = both("lookup_dcookie", 212, 18);
pub(super) const SETHOSTNAME: Syscall = both("sethostname", 170, 161);
pub(super) const SETDOMAINNAME: Syscall = both("setdomainname", 171, 162);
pub(super) const SETTIMEOFDAY: Syscall = both("settimeofday", 164, 170);
pub(super) const CLOCK_SETTIME: Syscall = both("clock_settime", 227, 112);
pub(super) const IOPL: Syscall = x86_64_only("iopl", 172);
pub(super) const IOPERM: Syscall = x86_64_only("ioperm", 173);
pub(super) const USELIB: Syscall = x86_64_only("uselib", 134);
pub(super) const PERSONALITY: Syscall = both("personality", 135, 92);
pub(super) const IOCTL: Syscall = both("ioctl", 16, 29);
pub(super) const CHMOD: Syscall = x86_64_only("chmod", 90);
pub(super) const FCHMOD: Syscall = both("fchmod", 91, 52);
pub(super) const FCHMODAT: Syscall = both("fchmodat", 268, 53);
pub(super) const FCHMODAT2: Syscall = both("fchmodat2", 452, 452);
pub(super) const MKNOD: Syscall = x86_64_only("mknod", 133);
pub(super) const MKNODAT: Syscall = both("mknodat", 259, 33);
pub(super) const OPEN: Syscall = x86_64_only("open", 2);
pub(super) const CREAT: Syscall = x86_64_only("creat", 85);
pub(super) const OPENAT: Syscall = both("openat", 257, 56);
pub(super) const OPENAT2: Syscall = both("openat2", 437, 437);
pub(super) const SOCKET: Syscall = both("socket", 41, 198);
pub(super) const CONNECT: Syscall = both("connect", 42, 203);
pub(super) const SENDTO: Syscall = both("sendto", 44, 206);
