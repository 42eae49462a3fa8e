//! Privilege attacks: capabilities left, `no_new_privs` unset, new user namespaces, mount,
//! chroot, pivot_root, and the kernel attack surfaces bpf, perf_event_open and userfaultfd.

use std::path::Path;

use crate::guard::{self, Ns};
use crate::{Args, Attack, Outcome, io_detail, sys};

fn status_field(name: &str) -> Result<String, Outcome> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| Outcome::error(io_detail("read /proc/self/status", &e)))?;
    status
        .lines()
        .find_map(|line| {
            line.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
        })
        .map(|value| value.trim().to_string())
        .ok_or_else(|| Outcome::error(format!("/proc/self/status has no `{name}`")))
}

/// Any effective, permitted or ambient capability left is a success.
pub fn capabilities(_args: &Args) -> Attack {
    let mut held = Vec::new();
    for field in ["CapEff", "CapPrm", "CapAmb"] {
        let value = status_field(field)?;
        let bits = u64::from_str_radix(&value, 16)
            .map_err(|_| Outcome::error(format!("{field} `{value}` is not hex")))?;
        if bits != 0 {
            held.push(format!("{field}={value}"));
        }
    }
    Ok(if held.is_empty() {
        Outcome::blocked("no effective, permitted or ambient capabilities")
    } else {
        Outcome::succeeded(format!("capabilities left: {}", held.join(" ")))
    })
}

/// `NoNewPrivs: 0` is a success (setuid binaries would still raise privileges).
pub fn no_new_privs(_args: &Args) -> Attack {
    let value = status_field("NoNewPrivs")?;
    Ok(if value == "0" {
        Outcome::succeeded("NoNewPrivs is 0")
    } else {
        Outcome::blocked(format!("NoNewPrivs is {value}"))
    })
}

/// `unshare(CLONE_NEWUSER)`.
pub fn unshare_user(args: &Args) -> Attack {
    guard::outside_host(args, &[Ns::Mnt, Ns::Pid, Ns::User])?;
    Ok(match sys::unshare(libc::CLONE_NEWUSER) {
        Ok(()) => Outcome::succeeded("created a user namespace"),
        Err(error) => Outcome::blocked(io_detail("unshare(CLONE_NEWUSER)", &error)),
    })
}

/// `--target DIR`: the classic route to mount rights — a new user and mount namespace, then a
/// tmpfs over `DIR`, all private to this process.
pub fn userns_mount(args: &Args) -> Attack {
    guard::outside_host(args, &[Ns::Mnt, Ns::Pid, Ns::User])?;
    let target = Path::new(args.get("target")?);
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(65534);
    sys::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)
        .map_err(|e| Outcome::blocked(io_detail("unshare(CLONE_NEWUSER|CLONE_NEWNS)", &e)))?;
    // Best effort: map ourselves to root; the mount is attempted either way.
    let _ = std::fs::write("/proc/self/setgroups", "deny");
    let _ = std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"));
    Ok(match sys::mount("tmpfs", target, Some("tmpfs"), 0) {
        Ok(()) => Outcome::succeeded(format!(
            "mounted tmpfs on `{}` in a fresh user+mount namespace",
            target.display()
        )),
        Err(error) => Outcome::blocked(io_detail("mount tmpfs in the new namespace", &error)),
    })
}

/// `--target DIR`: mount a tmpfs over `DIR` (a test-owned directory) in our mount namespace.
pub fn mount_tmpfs(args: &Args) -> Attack {
    guard::outside_host(args, &[Ns::Mnt])?;
    let target = Path::new(args.get("target")?);
    Ok(match sys::mount("tmpfs", target, Some("tmpfs"), 0) {
        Ok(()) => Outcome::succeeded(format!("mounted tmpfs on `{}`", target.display())),
        Err(error) => Outcome::blocked(io_detail(
            &format!("mount tmpfs on `{}`", target.display()),
            &error,
        )),
    })
}

/// `--target DIR`: a mount that can never mount anything — a bind of a source that does not
/// exist — so it is safe in any namespace. The kernel checks the right to mount (LSM hook, then
/// CAP_SYS_ADMIN over the mount namespace) before it looks the source up, so ENOENT means the
/// mount would have been allowed; EPERM/EACCES/ENOSYS mean it was refused.
pub fn mount_probe(args: &Args) -> Attack {
    let target = Path::new(args.get("target")?);
    if !target.is_dir() {
        return Err(Outcome::error(format!(
            "probe target `{}` is not a directory",
            target.display()
        )));
    }
    let source = format!("/nonexistent-palisade-probe-{}", std::process::id());
    Ok(match sys::mount(&source, target, None, libc::MS_BIND) {
        Ok(()) => {
            // Impossible for a missing source; undo just in case.
            let _ = sys::umount2(target, libc::MNT_DETACH);
            Outcome::succeeded("a bind mount of a missing source succeeded?")
        }
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Outcome::succeeded(
            "mount passed the permission checks (ENOENT looking up the missing source)",
        ),
        Err(error) => Outcome::blocked(io_detail("mount(MS_BIND) probe", &error)),
    })
}

/// `--dir DIR`: chroot into a test-owned directory (affects only this process; guarded by any
/// sandbox namespace).
pub fn chroot(args: &Args) -> Attack {
    guard::outside_host(args, &[Ns::Mnt, Ns::Pid, Ns::User])?;
    let dir = Path::new(args.get("dir")?);
    Ok(match sys::chroot(dir) {
        Ok(()) => Outcome::succeeded(format!("chrooted into `{}`", dir.display())),
        Err(error) => Outcome::blocked(io_detail(&format!("chroot `{}`", dir.display()), &error)),
    })
}

/// `--dir DIR`: bind `DIR` onto itself and pivot_root into it.
pub fn pivot_root(args: &Args) -> Attack {
    guard::outside_host(args, &[Ns::Mnt])?;
    let dir = Path::new(args.get("dir")?);
    sys::mount(
        &dir.to_string_lossy(),
        dir,
        None,
        libc::MS_BIND | libc::MS_REC,
    )
    .map_err(|e| {
        Outcome::blocked(io_detail(
            &format!("bind `{}` onto itself", dir.display()),
            &e,
        ))
    })?;
    let old = dir.join("old");
    let _ = std::fs::create_dir(&old);
    Ok(match sys::pivot_root(dir, &old) {
        Ok(()) => Outcome::succeeded(format!("pivot_root into `{}`", dir.display())),
        Err(error) => Outcome::blocked(io_detail(
            &format!("pivot_root `{}`", dir.display()),
            &error,
        )),
    })
}

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_PROG_LOAD: libc::c_long = 5;

/// `bpf(BPF_MAP_CREATE)` of a one-entry array map.
pub fn bpf_map(_args: &Args) -> Attack {
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&2u32.to_ne_bytes()); // BPF_MAP_TYPE_ARRAY
    attr[4..8].copy_from_slice(&4u32.to_ne_bytes()); // key_size
    attr[8..12].copy_from_slice(&4u32.to_ne_bytes()); // value_size
    attr[12..16].copy_from_slice(&1u32.to_ne_bytes()); // max_entries
    Ok(match sys::bpf(BPF_MAP_CREATE, &mut attr) {
        Ok(_fd) => Outcome::succeeded("created a BPF map"),
        Err(error) => Outcome::blocked(io_detail("bpf(BPF_MAP_CREATE)", &error)),
    })
}

/// `bpf(BPF_PROG_LOAD)` of a two-instruction socket filter (`r0 = 0; exit`).
pub fn bpf_prog(_args: &Args) -> Attack {
    let insns: [u64; 2] = [
        u64::from_ne_bytes([0xb7, 0, 0, 0, 0, 0, 0, 0]), // BPF_ALU64|BPF_MOV|BPF_K r0 = 0
        u64::from_ne_bytes([0x95, 0, 0, 0, 0, 0, 0, 0]), // BPF_JMP|BPF_EXIT
    ];
    let license = c"GPL";
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // BPF_PROG_TYPE_SOCKET_FILTER
    attr[4..8].copy_from_slice(&2u32.to_ne_bytes()); // insn_cnt
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    Ok(match sys::bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(_fd) => Outcome::succeeded("loaded a BPF program"),
        Err(error) => Outcome::blocked(io_detail("bpf(BPF_PROG_LOAD)", &error)),
    })
}

/// `perf_event_open` of a software clock on ourselves, user space only (what perf_event_paranoid
/// 2 still allows an unprivileged process).
pub fn perf_event(_args: &Args) -> Attack {
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes()); // size
    // config = PERF_COUNT_SW_CPU_CLOCK (0); flags: disabled | exclude_kernel | exclude_hv.
    let flags: u64 = 1 | (1 << 5) | (1 << 6);
    attr[40..48].copy_from_slice(&flags.to_ne_bytes());
    Ok(match sys::perf_event_open(&mut attr, 0, -1) {
        Ok(_fd) => Outcome::succeeded("opened a perf event"),
        Err(error) => Outcome::blocked(io_detail("perf_event_open", &error)),
    })
}

/// `userfaultfd(UFFD_USER_MODE_ONLY)`, then without the flag.
pub fn userfaultfd(_args: &Args) -> Attack {
    const UFFD_USER_MODE_ONLY: libc::c_int = 1;
    let first = sys::userfaultfd(libc::O_CLOEXEC | UFFD_USER_MODE_ONLY);
    let error = match first {
        Ok(_fd) => return Ok(Outcome::succeeded("created a userfaultfd (user-mode only)")),
        Err(error) => error,
    };
    Ok(match sys::userfaultfd(libc::O_CLOEXEC) {
        Ok(_fd) => Outcome::succeeded("created a userfaultfd"),
        Err(second) => Outcome::blocked(format!(
            "userfaultfd(UFFD_USER_MODE_ONLY): {error}; userfaultfd(0): {second}"
        )),
    })
}
