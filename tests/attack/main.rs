//! `palisade-attack`: the escape battery's probe binary.
//!
//! `palisade-attack <attack> [--option value]…` runs ONE attack and prints exactly one JSON line
//! on stdout, then exits 0:
//!
//! ```json
//! {"attack":"fs.read","verdict":"blocked","detail":"open `/x`: permission denied (os error 13)"}
//! ```
//!
//! - `succeeded`: the attack did what it tried (read the marker, connected, created the node…).
//! - `blocked`: it failed; `detail` says how (errno, missing marker, EOF).
//! - `unsafe-refused`: a destructive attack found itself in the host's namespace (as the test
//!   measured it with `--expect-outside-ns mnt=N,pid=N,user=N`) and did nothing.
//! - `error`: the tool could not run the attack at all (bad arguments, a precondition the test
//!   should have met, a helper program missing). The harness never counts that as a block.
//!
//! Attacks act only on targets named in their arguments — paths, ports, pids and sockets the
//! test created — never on host paths, mounts or processes of their own choosing. Destructive
//! ones (mount, umount, pivot_root, chroot, mknod, unshare, kill, ptrace, process_vm_readv)
//! verify their namespace first (see `guard.rs`); process attacks also check that the target's
//! command line carries the test's marker before acting. Several modes are not attacks but
//! helpers the battery spawns: `victim`, `linger` and `__daemonize` (see `cleanup.rs`).
//!
//! The attacks are Linux-only; elsewhere every attack reports `error`.

#![allow(
    clippy::indexing_slicing,
    reason = "test tool: slices are bounds-checked against lengths computed a line above"
)]

#[cfg(target_os = "linux")]
mod cleanup;
#[cfg(target_os = "linux")]
mod fds;
#[cfg(target_os = "linux")]
mod fs;
#[cfg(target_os = "linux")]
mod guard;
#[cfg(target_os = "linux")]
mod ipc;
#[cfg(target_os = "linux")]
mod net;
#[cfg(target_os = "linux")]
mod privilege;
#[cfg(target_os = "linux")]
mod procs;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(target_os = "linux")]
mod uring;

use std::collections::BTreeMap;
use std::io::Write;

/// What an attack achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Succeeded,
    Blocked,
    UnsafeRefused,
    Error,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Succeeded => "succeeded",
            Verdict::Blocked => "blocked",
            Verdict::UnsafeRefused => "unsafe-refused",
            Verdict::Error => "error",
        }
    }
}

/// One attack's result: the verdict and what happened.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub verdict: Verdict,
    pub detail: String,
}

impl Outcome {
    pub fn succeeded(detail: impl Into<String>) -> Outcome {
        Outcome {
            verdict: Verdict::Succeeded,
            detail: detail.into(),
        }
    }
    pub fn blocked(detail: impl Into<String>) -> Outcome {
        Outcome {
            verdict: Verdict::Blocked,
            detail: detail.into(),
        }
    }
    pub fn refused(detail: impl Into<String>) -> Outcome {
        Outcome {
            verdict: Verdict::UnsafeRefused,
            detail: detail.into(),
        }
    }
    pub fn error(detail: impl Into<String>) -> Outcome {
        Outcome {
            verdict: Verdict::Error,
            detail: detail.into(),
        }
    }
}

/// `--name value` options after the attack name.
pub struct Args {
    options: BTreeMap<String, String>,
}

impl Args {
    fn parse(raw: &[String]) -> Result<Args, String> {
        let mut options = BTreeMap::new();
        let mut iter = raw.iter();
        while let Some(key) = iter.next() {
            let Some(name) = key.strip_prefix("--") else {
                return Err(format!(
                    "unexpected argument `{key}`: options are `--name value`"
                ));
            };
            let Some(value) = iter.next() else {
                return Err(format!("option `{key}` needs a value"));
            };
            options.insert(name.to_string(), value.clone());
        }
        Ok(Args { options })
    }

    /// A required option.
    pub fn get(&self, name: &str) -> Result<&str, Outcome> {
        self.options
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| Outcome::error(format!("missing option `--{name}`")))
    }

    /// An optional option.
    pub fn opt(&self, name: &str) -> Option<&str> {
        self.options.get(name).map(String::as_str)
    }

    /// A required option parsed as a number.
    pub fn num<T: std::str::FromStr>(&self, name: &str) -> Result<T, Outcome> {
        let raw = self.get(name)?;
        let parsed = match raw.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16)
                .ok()
                .and_then(|n| n.to_string().parse().ok()),
            None => raw.parse().ok(),
        };
        parsed.ok_or_else(|| Outcome::error(format!("option `--{name}`: `{raw}` is not a number")))
    }
}

/// The JSON line for an outcome, keys in the documented order (each value escaped by
/// serde_json, so any detail text is safe).
fn render(attack: &str, outcome: &Outcome) -> String {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""));
    format!(
        "{{\"attack\":{},\"verdict\":{},\"detail\":{}}}",
        quote(attack),
        quote(outcome.verdict.as_str()),
        quote(&outcome.detail)
    )
}

/// Print one verdict line and flush it (an attack may go on living afterwards, e.g.
/// `cleanup.stay`, and the harness reads the line while it does).
pub fn emit(attack: &str, outcome: &Outcome) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", render(attack, outcome));
    let _ = stdout.flush();
}

#[cfg(target_os = "linux")]
fn dispatch(attack: &str, args: &Args) -> Option<Outcome> {
    let outcome = match attack {
        // Filesystem.
        "fs.read" => fs::read(args),
        "fs.list-dir" => fs::list_dir(args),
        "fs.read-proc-self-root" => fs::read_under(args, "/proc/self/root"),
        "fs.read-proc-1-root" => fs::read_under(args, "/proc/1/root"),
        "fs.read-proc-pid-root" => fs::read_proc_pid(args, "root"),
        "fs.read-proc-pid-cwd" => fs::read_proc_pid(args, "cwd"),
        "fs.read-symlink" => fs::read_symlink(args),
        "fs.read-hardlink" => fs::read_hardlink(args),
        "fs.read-dotdot" => fs::read_dotdot(args),
        "fs.create" => fs::create(args),
        "fs.append" => fs::append(args),
        "fs.write-symlink" => fs::write_symlink(args),
        "fs.replace-rename" => fs::replace_rename(args),
        "fs.unlink" => fs::unlink(args),
        "fs.rename" => fs::rename(args),
        "fs.rmdir" => fs::rmdir(args),
        "fs.mknod" => fs::mknod(args),
        "fs.setuid-chmod" => fs::setuid_chmod(args, 0o4755),
        "fs.setgid-chmod" => fs::setuid_chmod(args, 0o2755),
        "fs.setuid-fchmod" => fs::setuid_fchmod(args),
        "fs.setuid-create" => fs::setuid_create(args),
        "fs.umount-proc" => fs::umount_proc(args),
        "fs.open-write-only" => fs::open_write_only(args),
        // Network.
        "net.tcp-connect" => net::tcp_connect(args),
        "net.udp-send" => net::udp_send(args),
        "net.dns-query" => net::dns_query(args),
        "net.raw-icmp" => net::raw_icmp(args),
        "net.dev-tcp" => net::dev_tcp(args),
        "net.loopback-self" => net::loopback_self(args),
        "net.socket-create" => net::socket_create(args),
        // IPC.
        "ipc.unix-connect" => ipc::unix_connect(args),
        "ipc.unix-abstract" => ipc::unix_abstract(args),
        "ipc.unix-dgram" => ipc::unix_dgram(args),
        "ipc.socketpair" => ipc::socketpair(args),
        "ipc.tiocsti" => ipc::tiocsti(args),
        "ipc.keyring-add" => ipc::keyring_add(args),
        "ipc.keyring-read" => ipc::keyring_read(args),
        "io.uring-setup" => uring::setup(args),
        "io.uring-openat" => uring::openat(args),
        "io.uring-connect" => uring::connect(args),
        // Processes.
        "proc.kill" => procs::kill(args),
        "proc.signal" => procs::signal(args),
        "proc.ptrace" => procs::ptrace(args),
        "proc.vm-read" => procs::vm_read(args),
        "proc.ptrace-init" => procs::ptrace_init(args),
        "proc.vm-read-init" => procs::vm_read_init(args),
        "proc.environ" => procs::environ(args),
        "proc.cmdline" => procs::cmdline(args),
        "proc.open-init-mem" => procs::open_init_mem(args),
        "proc.read-init-environ" => procs::read_init_environ(args),
        "proc.signal-init" => procs::signal_init(args),
        // Privilege.
        "priv.capabilities" => privilege::capabilities(args),
        "priv.no-new-privs" => privilege::no_new_privs(args),
        "priv.unshare-user" => privilege::unshare_user(args),
        "priv.userns-mount" => privilege::userns_mount(args),
        "priv.mount-tmpfs" => privilege::mount_tmpfs(args),
        "priv.mount-probe" => privilege::mount_probe(args),
        "priv.chroot" => privilege::chroot(args),
        "priv.pivot-root" => privilege::pivot_root(args),
        "priv.bpf-map" => privilege::bpf_map(args),
        "priv.bpf-prog" => privilege::bpf_prog(args),
        "priv.perf-event" => privilege::perf_event(args),
        "priv.userfaultfd" => privilege::userfaultfd(args),
        // Inherited file descriptors.
        "fd.read" => fds::read(args),
        "fd.proc-path" => fds::proc_path(args),
        "fd.scan" => fds::scan(args),
        // Process-tree cleanup (the harness checks survivors on the host).
        "cleanup.daemon" => cleanup::daemon(args),
        "cleanup.setpgid" => cleanup::setpgid(args),
        "cleanup.ignore-term" => cleanup::ignore_term(args),
        "cleanup.child-running" => cleanup::child_running(args),
        "cleanup.stay" => cleanup::stay(args),
        _ => return None,
    };
    Some(outcome.unwrap_or_else(|outcome| outcome))
}

/// Every attack name, for `palisade-attack list`.
#[cfg(target_os = "linux")]
const ATTACKS: &[&str] = &[
    "fs.read",
    "fs.list-dir",
    "fs.read-proc-self-root",
    "fs.read-proc-1-root",
    "fs.read-proc-pid-root",
    "fs.read-proc-pid-cwd",
    "fs.read-symlink",
    "fs.read-hardlink",
    "fs.read-dotdot",
    "fs.create",
    "fs.append",
    "fs.write-symlink",
    "fs.replace-rename",
    "fs.unlink",
    "fs.rename",
    "fs.rmdir",
    "fs.mknod",
    "fs.setuid-chmod",
    "fs.setgid-chmod",
    "fs.setuid-fchmod",
    "fs.setuid-create",
    "fs.umount-proc",
    "fs.open-write-only",
    "net.tcp-connect",
    "net.udp-send",
    "net.dns-query",
    "net.raw-icmp",
    "net.dev-tcp",
    "net.loopback-self",
    "net.socket-create",
    "ipc.unix-connect",
    "ipc.unix-abstract",
    "ipc.unix-dgram",
    "ipc.socketpair",
    "ipc.tiocsti",
    "ipc.keyring-add",
    "ipc.keyring-read",
    "io.uring-setup",
    "io.uring-openat",
    "io.uring-connect",
    "proc.kill",
    "proc.signal",
    "proc.ptrace",
    "proc.vm-read",
    "proc.ptrace-init",
    "proc.vm-read-init",
    "proc.environ",
    "proc.cmdline",
    "proc.open-init-mem",
    "proc.read-init-environ",
    "proc.signal-init",
    "priv.capabilities",
    "priv.no-new-privs",
    "priv.unshare-user",
    "priv.userns-mount",
    "priv.mount-tmpfs",
    "priv.mount-probe",
    "priv.chroot",
    "priv.pivot-root",
    "priv.bpf-map",
    "priv.bpf-prog",
    "priv.perf-event",
    "priv.userfaultfd",
    "fd.read",
    "fd.proc-path",
    "fd.scan",
    "cleanup.daemon",
    "cleanup.setpgid",
    "cleanup.ignore-term",
    "cleanup.child-running",
    "cleanup.stay",
];

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((attack, rest)) = argv.split_first() else {
        emit(
            "",
            &Outcome::error("usage: palisade-attack <attack> [--option value]…"),
        );
        return;
    };
    run(attack, rest);
}

#[cfg(target_os = "linux")]
fn run(attack: &str, rest: &[String]) {
    // Helper modes: not attacks, no verdict line of their own.
    match attack {
        "victim" => return cleanup::victim(rest),
        "linger" => return cleanup::linger(rest),
        "__daemonize" => return cleanup::daemonize(rest),
        "list" => {
            for name in ATTACKS {
                println!("{name}");
            }
            return;
        }
        _ => {}
    }
    let outcome = match Args::parse(rest) {
        Err(message) => Outcome::error(message),
        Ok(args) => {
            // An attack that panics must still say so in one line.
            match std::panic::catch_unwind(|| dispatch(attack, &args)) {
                Ok(Some(outcome)) => outcome,
                Ok(None) => Outcome::error(format!("unknown attack `{attack}`")),
                Err(_) => Outcome::error("the attack panicked"),
            }
        }
    };
    emit(attack, &outcome);
}

#[cfg(not(target_os = "linux"))]
fn run(attack: &str, _rest: &[String]) {
    emit(attack, &Outcome::error("the attacks are linux-only"));
}

/// Render an I/O error with what was being done.
pub fn io_detail(what: &str, error: &std::io::Error) -> String {
    format!("{what}: {error}")
}

/// Attacks return `Err(outcome)` for early exits (bad arguments, blocked first steps).
pub type Attack = Result<Outcome, Outcome>;
