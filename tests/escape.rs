//! The escape battery: attack the sandbox from inside, for every backend that claims the
//! capability an attack targets — first proving each attack works where it should.
//!
//! Every case runs one `palisade-attack` attack (tests/attack/) against targets this test
//! created for that run alone — files under a per-run directory, listeners on the host's
//! loopback, a victim process, a pty, a session keyring — never the host's own paths, mounts or
//! processes:
//!
//! 1. **outside**: as a plain child of the test, or, for kernel and destructive attacks, in a
//!    throwaway namespace (`unshare -U -r -m …`). It must succeed; an attack that does not work
//!    outside proves nothing inside. Where it cannot work for this user at all (e.g. `mknod`
//!    or `bpf` without root) the table says why.
//! 2. **inside** `palisade run` once per backend (`linux-bwrap`, `linux-landlock`,
//!    `direct-dedicated`, `docker`), chosen by a taskpack that prefers only that backend. Each case says
//!    per backend what must happen: `blocked` (the backend claims the capability), `works`
//!    (e.g. `socketpair`), `refused` (the backend cannot honour the policy, so `palisade run`
//!    must refuse with 125 and launch nothing), or `record` (shown, not asserted — this is how
//!    the battery documents what `direct-dedicated` leaves open).
//!
//! After each run the host checks what really happened (a file on the host, a datagram at the
//! listener, the victim alive, the pty's input queue, survivors in `/proc`): an attack that
//! "worked" into a private mask is `contained`; an effect seen on the host is an escape
//! whatever the attack said.
//!
//! The battery runs twice: as root and as an unprivileged user (uid 65534 via `setpriv` when
//! the test runs as root; the test's own user otherwise, and then the root pass says it was
//! skipped). Each test function prints its table (`cargo test --test escape -- --nocapture`);
//! `PALISADE_ESCAPE_REPORT=<dir>` also writes the tables there, with every cell's detail.
//!
//! Docker: the attack runs from the test image (tests/support/docker_image.rs: busybox-static
//! and a static build of the same attack binary) on the daemon `DOCKER_HOST` names, with a
//! runtime profile that pins the image and makes the run's fixture directory visible
//! read-only (so the denied paths exist in the container and must be masked there, and the
//! controls next to them can be read). Access to the daemon's socket is root-equivalent and
//! Palisade does not grant it. The unprivileged pass runs the docker column as uid 65534 in the
//! socket's group (Debian's `docker` group: how most people use Docker), so the container runs
//! as that uid; where the socket belongs to root's group, that user cannot use it and must see
//! `palisade run` refuse the docker backend (`SANDBOX_BACKEND_UNAVAILABLE`, exit 125;
//! tests/docker.rs checks this case on its own). Without
//! a daemon the docker column is skipped, unless `PALISADE_REQUIRE_DOCKER=1` (CI) makes that a
//! failure.
//!
//! Controls: reads of allowed files next to the denied ones, the sandbox's own loopback and
//! `socketpair` must work inside, so a block comes from the policy and not from an attack that
//! cannot run in a sandbox at all.
//!
//! The `palisade` binary is the one next to this test's deps directory (`cargo test --workspace`
//! builds it); `PALISADE_ESCAPE_PALISADE=<path>` overrides it. `PALISADE_ESCAPE_OUTSIDE_ONLY=1`
//! runs the outside half alone (while `palisade run` is unavailable); otherwise a missing
//! `palisade run` is a failure.
//!
//! Safety: every target is the test's own; destructive attacks check their namespace first
//! (see tests/attack/guard.rs) and process attacks the victim's marker; the root pass keeps its
//! fixtures in `0700` directories; leftovers carrying a run's marker are killed on drop.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step should fail the test loudly"
)]

#[path = "support/docker_image.rs"]
mod docker_image;
#[path = "support/escape_kit.rs"]
mod escape_kit;
#[path = "support/reachable.rs"]
mod reachable;

use std::path::{Path, PathBuf};

use escape_kit::{Backend, Cell, Env, Fixture, How, Layout, Oracle, Place, Table, User, Verdict};

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

/// What must happen inside one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// The backend claims the capability: the attack must fail (or be contained, where the
    /// case allows it) and nothing may reach the host.
    Blocked,
    /// As `Blocked`, but `unsafe-refused` is accepted too: the backend has no mount namespace
    /// (Landlock), so a real mount attack cannot safely run there; `priv.mount-probe` covers
    /// the right to mount without mounting.
    BlockedOrNoNs,
    /// Must keep working inside (not an attack).
    Works,
    /// The backend cannot honour the policy: `palisade run` must exit 125 and launch nothing.
    Refused,
    /// Shown, not asserted.
    Record,
}

#[derive(Clone, Copy, Debug)]
struct Expects {
    bwrap: Expect,
    landlock: Expect,
    direct: Expect,
    docker: Expect,
}

impl Expects {
    fn get(self, backend: Backend) -> Expect {
        match backend {
            Backend::Bwrap => self.bwrap,
            Backend::Landlock => self.landlock,
            Backend::Direct => self.direct,
            Backend::Docker => self.docker,
        }
    }
}

/// bwrap, Landlock and Docker claim it; direct-dedicated is documented.
const CONFINED: Expects = Expects {
    bwrap: Expect::Blocked,
    landlock: Expect::Blocked,
    direct: Expect::Record,
    docker: Expect::Blocked,
};
/// bwrap and Docker claim it (`syscallFiltering`); Landlock's seccomp filter covers only what
/// Landlock cannot express, so it is documented there.
const SYSCALL_FILTER: Expects = Expects {
    bwrap: Expect::Blocked,
    landlock: Expect::Record,
    direct: Expect::Record,
    docker: Expect::Blocked,
};
/// A real mount-family attack: Landlock has no mount namespace to try it in safely.
const MOUNT: Expects = Expects {
    bwrap: Expect::Blocked,
    landlock: Expect::BlockedOrNoNs,
    direct: Expect::Record,
    docker: Expect::Blocked,
};
/// Protected paths, loopback-only, denied paths inside the workspace: bwrap and Docker (mount
/// namespaces); Landlock must refuse such a policy.
const BWRAP_ONLY: Expects = Expects {
    bwrap: Expect::Blocked,
    landlock: Expect::Refused,
    direct: Expect::Record,
    docker: Expect::Blocked,
};
/// Process-tree cleanup: every backend claims it.
const CLEANUP: Expects = Expects {
    bwrap: Expect::Blocked,
    landlock: Expect::Blocked,
    direct: Expect::Blocked,
    docker: Expect::Blocked,
};
/// Must work everywhere.
const WORKS: Expects = Expects {
    bwrap: Expect::Works,
    landlock: Expect::Works,
    direct: Expect::Works,
    docker: Expect::Works,
};

/// The taskpack a case runs under (direct-dedicated always gets its own: `allow-outbound`,
/// no masks, host opt-in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    /// `networkMode: none`; the run's `deny/*` paths and `~/.ssh` (in the fake HOME) denied.
    Standard,
    /// As `Standard`, declaring `protectedPathReadOnlyMask`.
    Protected,
    /// As `Standard`, plus denied paths inside the workspace (`.secrets`, `.env`).
    DeniedInWorkspace,
    /// As `Standard` with this `networkMode`.
    Network(&'static str),
}

/// One attack run: the attack, its arguments, the host's check.
struct Plan {
    attack: &'static str,
    args: Vec<String>,
    oracle: Oracle,
    /// Whether an attack that "worked" into a private view (nothing on the host) is fine.
    contained_ok: bool,
    /// `cleanup.stay`: SIGKILL the supervisor once the lingerer is up.
    kill_supervisor: bool,
}

fn plan(attack: &'static str, args: Vec<String>) -> Plan {
    Plan {
        attack,
        args,
        oracle: Oracle::None,
        contained_ok: false,
        kill_supervisor: false,
    }
}

impl Plan {
    fn oracle(mut self, oracle: Oracle) -> Plan {
        self.oracle = oracle;
        self
    }
    fn contained_ok(mut self) -> Plan {
        self.contained_ok = true;
        self
    }
}

type Build = fn(&mut Fixture, &Env) -> Result<Plan, String>;

struct Case {
    name: String,
    layout: Layout,
    policy: Policy,
    outside: fn(User) -> How,
    expect: Expects,
    build: Build,
}

fn case(name: &str, outside: fn(User) -> How, expect: Expects, build: Build) -> Case {
    Case {
        name: name.into(),
        layout: Layout::Plain,
        policy: Policy::Standard,
        outside,
        expect,
        build,
    }
}

impl Case {
    fn layout(mut self, layout: Layout) -> Case {
        self.layout = layout;
        self
    }
    fn policy(mut self, policy: Policy) -> Case {
        self.policy = policy;
        self
    }
}

/// `--name value` pairs.
fn opts<const N: usize>(pairs: [(&str, String); N]) -> Vec<String> {
    pairs
        .into_iter()
        .flat_map(|(k, v)| [format!("--{k}"), v])
        .collect()
}

fn s(path: impl AsRef<Path>) -> String {
    path.as_ref().display().to_string()
}

// Outside: how each attack shows it works.

fn plain(_: User) -> How {
    How::Plain
}
fn in_userns(_: User) -> How {
    How::Unshare(&["-U", "-r"])
}
/// ptrace and process_vm_readv need the tracer in the target's user namespace (the kernel's
/// capability check refuses a child user namespace), and the attack's guard needs it outside
/// a host namespace: root gets both from a new mount namespace; an unprivileged user can make no
/// namespace but through a user namespace, so only the root pass can show these work.
fn ptrace_ns(user: User) -> How {
    if user.is_root() {
        How::Unshare(&["-m"])
    } else {
        How::NotPossible(
            "an unprivileged user leaves the host's namespaces only through a new user namespace, \
             and the kernel refuses ptrace from a child user namespace into its parent"
                .into(),
        )
    }
}
fn mount_ns(user: User) -> How {
    if user.is_root() {
        How::Unshare(&["-m"])
    } else {
        How::Unshare(&["-U", "-r", "-m"])
    }
}
fn mount_probe_ns(user: User) -> How {
    if user.is_root() {
        How::Plain
    } else {
        How::Unshare(&["-U", "-r", "-m"])
    }
}
fn proc_ns(user: User) -> How {
    if user.is_root() {
        How::Unshare(&["-m", "-p", "-f", "--mount-proc"])
    } else {
        How::Unshare(&["-U", "-r", "-m", "-p", "-f", "--mount-proc"])
    }
}
fn pid_ns_shell(user: User) -> How {
    if user.is_root() {
        How::UnshareShell(&["-m", "-p", "-f", "--mount-proc"])
    } else {
        How::UnshareShell(&["-U", "-r", "-m", "-p", "-f", "--mount-proc"])
    }
}
fn caps_ns(user: User) -> How {
    if user.is_root() {
        How::Plain
    } else {
        How::Unshare(&["-U", "-r"])
    }
}
fn netraw_ns(user: User) -> How {
    if user.is_root() {
        How::Plain
    } else {
        How::Unshare(&["-U", "-r", "-n"])
    }
}
fn mknod_ns(user: User) -> How {
    if user.is_root() {
        How::Unshare(&["-m"])
    } else {
        How::NotPossible("a device node needs CAP_MKNOD in the initial user namespace".into())
    }
}
fn knob(user: User) -> How {
    if user.is_root() {
        How::Plain
    } else {
        How::NotPossible(
            "only the initial namespace's root may write /proc/sys or /proc/sysrq-trigger".into(),
        )
    }
}
fn bpf_ns(user: User) -> How {
    let sysctl =
        std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled").unwrap_or_default();
    if user.is_root() || sysctl.trim() == "0" {
        How::Plain
    } else {
        How::NotPossible(format!(
            "kernel.unprivileged_bpf_disabled = {}",
            sysctl.trim()
        ))
    }
}
fn perf_ns(user: User) -> How {
    let sysctl =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    match sysctl.trim().parse::<i32>() {
        _ if user.is_root() => How::Plain,
        Ok(level) if level <= 2 => How::Plain,
        _ => How::NotPossible(format!("kernel.perf_event_paranoid = {}", sysctl.trim())),
    }
}
/// A fresh PID namespace whose PID 1 is the attack itself (the host's init is no target).
/// io_uring as the kernel allows it (`kernel.io_uring_disabled`: 1 = root only, 2 = nobody).
fn uring_ns(user: User) -> How {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").unwrap_or_default();
    match sysctl.trim() {
        "" | "0" => How::Plain,
        "1" if user.is_root() => How::Plain,
        other => How::NotPossible(format!("kernel.io_uring_disabled = {other}")),
    }
}
/// TIOCSTI as the kernel allows it (`dev.tty.legacy_tiocsti = 0`: CAP_SYS_ADMIN only).
fn tiocsti_ns(user: User) -> How {
    let sysctl = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").unwrap_or_default();
    if user.is_root() || sysctl.trim() != "0" {
        How::Plain
    } else {
        How::NotPossible("dev.tty.legacy_tiocsti = 0".into())
    }
}
/// Signals from inside a PID namespace reach its init only through handlers it installed (the
/// kernel drops the rest, SIGKILL and SIGSTOP included), and an init that dies takes the
/// signalling process with it: outside there is no PID 1 this attack could stop or end and then
/// report on. Inside, it must find PID 1 running, not stopped.
fn init_signals(_: User) -> How {
    How::NotPossible(
        "the kernel drops signals to a PID namespace's init from inside unless it handles them, \
         and an init that dies takes the sender with it: there is no outside init to stop"
            .into(),
    )
}
fn proc1_root(user: User) -> How {
    if user.is_root() {
        How::Unshare(&["-m", "-p", "-f", "--mount-proc"])
    } else {
        How::Unshare(&["-U", "-r", "-m", "-p", "-f", "--mount-proc"])
    }
}

fn marker(f: &Fixture) -> String {
    f.marker.clone()
}

/// `attack --path P --marker M`: read a secret at `P`.
fn read_at(attack: &'static str, f: &Fixture, path: PathBuf) -> Plan {
    plan(attack, opts([("path", s(path)), ("marker", marker(f))]))
}

/// `attack --workspace W --path P --marker M`: read `P` through something planted in `W`.
fn read_through_workspace(attack: &'static str, f: &Fixture, path: PathBuf) -> Plan {
    plan(
        attack,
        opts([
            ("workspace", s(f.ws())),
            ("path", s(path)),
            ("marker", marker(f)),
        ]),
    )
}

/// `attack --path P`, checked on the host by `oracle`.
fn touch(attack: &'static str, path: &Path, oracle: Oracle) -> Plan {
    plan(attack, opts([("path", s(path))])).oracle(oracle)
}

/// Create `P` (with missing parents if `mkdirs`); it must not exist on the host afterwards.
fn create_at(path: PathBuf, mkdirs: bool) -> Plan {
    let mut args = opts([("path", s(&path))]);
    if mkdirs {
        args.extend(opts([("mkdirs", "1".into())]));
    }
    plan("fs.create", args).oracle(Oracle::Absent(path))
}

/// Append to `P`; its bytes must be unchanged on the host afterwards.
fn append_to(path: PathBuf) -> Plan {
    let before = std::fs::read(&path).unwrap();
    touch("fs.append", &path, Oracle::Unchanged(path.clone(), before))
}

/// An attack with only the namespace guard's arguments (plus `extra`).
fn guarded(attack: &'static str, f: &Fixture, extra: Vec<String>) -> Plan {
    let mut args = extra;
    args.extend(f.ns_args());
    plan(attack, args)
}

/// The filesystem class: reads of denied paths by every route, writes outside, tampering,
/// devices, setuid files, /proc, /tmp and /dev/shm; then protected paths and denied paths
/// inside the workspace (bwrap only).
#[rustfmt::skip]
fn filesystem_cases() -> Vec<Case> {
    let mut cases = vec![
        // Controls: the same read of an allowed sibling works inside every backend, so a
        // block below comes from the policy, not from a read that cannot work in a sandbox.
        case("fs.control-read-allowed-sibling", plain, WORKS, |f, _| Ok(read_at("fs.read", f, f.path("deny/allowed-file")))),
        case("fs.control-read-allowed-home-file", plain, WORKS, |f, _| Ok(read_at("fs.read", f, f.path("home/notes.txt")))),
        // Reads of denied paths, by every route.
        case("fs.read-denied-file", plain, CONFINED, |f, _| Ok(read_at("fs.read", f, f.path("deny/secret-file")))),
        case("fs.read-denied-dir-entry", plain, CONFINED, |f, _| Ok(read_at("fs.read", f, f.path("deny/secret-dir/key")))),
        case("fs.read-home-ssh-key", plain, CONFINED, |f, _| Ok(read_at("fs.read", f, f.path("home/.ssh/id_ed25519")))),
        case("fs.list-denied-dir", plain, CONFINED, |f, _| Ok(read_at("fs.list-dir", f, f.path("deny/secret-dir")))),
        case("fs.read-via-proc-self-root", plain, CONFINED, |f, _| {
            Ok(read_at("fs.read-proc-self-root", f, f.path("deny/secret-file")))
        }),
        case("fs.read-via-proc-1-root", proc1_root, CONFINED, |f, _| {
            Ok(read_at("fs.read-proc-1-root", f, f.path("deny/secret-file")))
        }),
        case("fs.read-via-proc-pid-root", plain, CONFINED, |f, e| {
            let (pid, _) = f.victim(&e.attack);
            let mut p = read_at("fs.read-proc-pid-root", f, f.path("deny/secret-file"));
            p.args.extend(opts([("pid", pid.to_string())]));
            Ok(p)
        }),
        case("fs.read-via-proc-pid-cwd", plain, CONFINED, |f, e| {
            // The victim's working directory is the denied secret directory.
            let (pid, _) = f.victim(&e.attack);
            Ok(plan("fs.read-proc-pid-cwd", opts([("pid", pid.to_string()), ("name", "key".into()), ("marker", marker(f))])))
        }),
        case("fs.read-via-workspace-symlink", plain, CONFINED, |f, _| {
            Ok(read_through_workspace("fs.read-symlink", f, f.path("deny/secret-file")))
        }),
        case("fs.read-via-workspace-hardlink", plain, CONFINED, |f, _| {
            Ok(read_through_workspace("fs.read-hardlink", f, f.path("deny/secret-file")))
        }),
        case("fs.read-via-dotdot", plain, CONFINED, |f, _| {
            Ok(read_through_workspace("fs.read-dotdot", f, f.path("deny/secret-file")))
        }),
        // Writes outside the workspace.
        case("fs.create-outside-workspace", plain, CONFINED, |f, _| {
            Ok(create_at(f.path(&format!("outside/new-{}", f.marker)), false).contained_ok())
        }),
        case("fs.create-in-home", plain, CONFINED, |f, _| Ok(create_at(f.path("home/.profile-escape"), false).contained_ok())),
        case("fs.append-home-dotfile", plain, CONFINED, |f, _| Ok(append_to(f.path("home/.bashrc")).contained_ok())),
        case("fs.write-via-workspace-symlink", plain, CONFINED, |f, _| {
            let target = f.path(&format!("outside/via-link-{}", f.marker));
            Ok(plan("fs.write-symlink", opts([("workspace", s(f.ws())), ("target", s(&target))]))
                .oracle(Oracle::Absent(target))
                .contained_ok())
        }),
        case("fs.write-host-tmp", plain, CONFINED, |f, _| {
            Ok(create_at(PathBuf::from(format!("/tmp/palisade-escape-{}", f.marker)), false).contained_ok())
        }),
        case("fs.write-host-dev-shm", plain, CONFINED, |f, _| {
            Ok(create_at(PathBuf::from(format!("/dev/shm/palisade-escape-{}", f.marker)), false).contained_ok())
        }),
        case("fs.write-host-var-tmp", plain, CONFINED, |f, _| {
            Ok(create_at(PathBuf::from(format!("/var/tmp/palisade-escape-{}", f.marker)), false).contained_ok())
        }),
        // Tampering with denied paths (masks may absorb writes; nothing may reach the host).
        case("fs.append-denied-file", plain, CONFINED, |f, _| Ok(append_to(f.path("deny/secret-file")).contained_ok())),
        case("fs.create-denied-missing-path", plain, CONFINED, |f, _| Ok(create_at(f.path("deny/missing"), false).contained_ok())),
        case("fs.create-in-denied-dir", plain, CONFINED, |f, _| {
            Ok(create_at(f.path("deny/secret-dir/planted"), false).contained_ok())
        }),
        case("fs.rename-denied-dir", plain, CONFINED, |f, _| {
            Ok(touch("fs.rename", &f.path("deny/secret-dir"), Oracle::Present(f.path("deny/secret-dir/key"))).contained_ok())
        }),
        case("fs.rename-denied-ancestor", plain, CONFINED, |f, _| {
            Ok(touch("fs.rename", &f.path("deny"), Oracle::Present(f.path("deny/secret-file"))).contained_ok())
        }),
        case("fs.unlink-denied-file", plain, CONFINED, |f, _| {
            Ok(touch("fs.unlink", &f.path("deny/secret-file"), Oracle::Present(f.path("deny/secret-file"))).contained_ok())
        }),
        case("fs.rmdir-denied-empty-dir", plain, CONFINED, |f, _| {
            Ok(touch("fs.rmdir", &f.path("deny/empty-dir"), Oracle::Present(f.path("deny/empty-dir"))).contained_ok())
        }),
        // Devices and setuid files in the workspace (which persists on the host).
        case("fs.mknod-char-device", mknod_ns, CONFINED, |f, _| {
            Ok(guarded("fs.mknod", f, opts([("path", s(f.ws().join("null-device")))])))
        }),
        case("fs.setuid-copy-chmod", plain, CONFINED, |f, _| {
            let path = f.ws().join("suid-copy");
            Ok(touch("fs.setuid-chmod", &path, Oracle::NoSetuid(path.clone())))
        }),
        case("fs.setgid-copy-chmod", plain, CONFINED, |f, _| {
            let path = f.ws().join("sgid-copy");
            Ok(touch("fs.setgid-chmod", &path, Oracle::NoSetuid(path.clone())))
        }),
        case("fs.setuid-copy-fchmod", plain, CONFINED, |f, _| {
            let path = f.ws().join("suid-fchmod");
            Ok(touch("fs.setuid-fchmod", &path, Oracle::NoSetuid(path.clone())))
        }),
        case("fs.setuid-create-mode", plain, CONFINED, |f, _| {
            let path = f.ws().join("suid-create");
            Ok(touch("fs.setuid-create", &path, Oracle::NoSetuid(path.clone())))
        }),
        // /proc: unmount it, open kernel knobs for writing (without writing).
        case("fs.umount-proc", proc_ns, MOUNT, |f, _| Ok(guarded("fs.umount-proc", f, Vec::new()))),
        case("fs.open-core-pattern-for-write", knob, CONFINED, |_, _| {
            Ok(plan("fs.open-write-only", opts([("path", "/proc/sys/kernel/core_pattern".into())])))
        }),
        case("fs.open-sysrq-trigger-for-write", knob, CONFINED, |_, _| {
            if !Path::new("/proc/sysrq-trigger").exists() {
                return Err("this kernel has no /proc/sysrq-trigger (CONFIG_MAGIC_SYSRQ off)".into());
            }
            Ok(plan("fs.open-write-only", opts([("path", "/proc/sysrq-trigger".into())])))
        }),
    ];
    // Protected paths (bwrap's `protectedPathReadOnlyMask`; Landlock must refuse the policy).
    // Attempts must fail outright: a protected file the command "wrote" is a broken promise.
    let protected = vec![
        case("protected.append-existing-agents-md", plain, BWRAP_ONLY, |f, _| Ok(append_to(f.ws().join("AGENTS.md"))))
            .layout(Layout::Protected),
        case("protected.replace-existing-agents-md", plain, BWRAP_ONLY, |f, _| {
            let path = f.ws().join("AGENTS.md");
            let before = std::fs::read(&path).unwrap();
            Ok(touch("fs.replace-rename", &path, Oracle::Unchanged(path.clone(), before)))
        })
        .layout(Layout::Protected),
        case("protected.unlink-existing-agents-md", plain, BWRAP_ONLY, |f, _| {
            let path = f.ws().join("AGENTS.md");
            let before = std::fs::read(&path).unwrap();
            Ok(touch("fs.unlink", &path, Oracle::Unchanged(path.clone(), before)))
        })
        .layout(Layout::Protected),
        case("protected.create-missing-agents-md", plain, BWRAP_ONLY, |f, _| Ok(create_at(f.ws().join("AGENTS.md"), false))),
        case("protected.create-missing-claude-md", plain, BWRAP_ONLY, |f, _| Ok(create_at(f.ws().join("CLAUDE.md"), false))),
        case("protected.create-missing-workflow", plain, BWRAP_ONLY, |f, _| {
            Ok(create_at(f.ws().join(".github/workflows/x.yml"), true))
        }),
        case("protected.create-workflow-in-existing-github", plain, BWRAP_ONLY, |f, _| {
            Ok(create_at(f.ws().join(".github/workflows/x.yml"), false))
        })
        .layout(Layout::Protected),
        case("protected.rename-github-dir", plain, BWRAP_ONLY, |f, _| {
            Ok(touch("fs.rename", &f.ws().join(".github"), Oracle::Present(f.ws().join(".github/workflows/ci.yml"))))
        })
        .layout(Layout::Protected),
        case("protected.create-missing-loopwright-policy", plain, BWRAP_ONLY, |f, _| {
            Ok(create_at(f.ws().join(".loopwright/policies/p.yaml"), true))
        }),
    ];
    cases.extend(protected.into_iter().map(|c| c.policy(Policy::Protected)));
    // Denied paths inside the workspace (bwrap masks them; Landlock cannot and must refuse).
    let in_workspace = vec![
        case("denied-in-workspace.read", plain, BWRAP_ONLY, |f, _| Ok(read_at("fs.read", f, f.ws().join(".secrets/key")))),
        case("denied-in-workspace.read-via-hardlink", plain, BWRAP_ONLY, |f, _| {
            Ok(read_through_workspace("fs.read-hardlink", f, f.ws().join(".secrets/key")))
        }),
        case("denied-in-workspace.create-missing", plain, BWRAP_ONLY, |f, _| Ok(create_at(f.ws().join(".env"), false).contained_ok())),
        case("denied-in-workspace.rename", plain, BWRAP_ONLY, |f, _| {
            Ok(touch("fs.rename", &f.ws().join(".secrets"), Oracle::Present(f.ws().join(".secrets/key"))).contained_ok())
        }),
    ];
    cases.extend(
        in_workspace
            .into_iter()
            .map(|c| c.layout(Layout::SecretsInWorkspace).policy(Policy::DeniedInWorkspace)),
    );
    cases
}

fn loopback_v4() -> std::net::IpAddr {
    "127.0.0.1".parse().unwrap()
}

fn loopback_v6() -> std::net::IpAddr {
    "::1".parse().unwrap()
}

/// A TCP listener on `ip` and `attack --addr --port --marker` aimed at it.
fn tcp_plan(f: &mut Fixture, ip: std::net::IpAddr, attack: &'static str) -> Result<Plan, String> {
    let port = f.tcp(ip)?;
    let args = opts([
        ("addr", ip.to_string()),
        ("port", port.to_string()),
        ("marker", marker(f)),
    ]);
    Ok(plan(attack, args))
}

/// A UDP echo listener on `ip`; the host checks whether the marker arrived.
fn udp_plan(f: &mut Fixture, ip: std::net::IpAddr) -> Result<Plan, String> {
    let (port, received) = f.udp(ip)?;
    let args = opts([
        ("addr", ip.to_string()),
        ("port", port.to_string()),
        ("marker", marker(f)),
    ]);
    Ok(plan("net.udp-send", args).oracle(Oracle::NotReceived(received)))
}

/// The network class, for one `networkMode` (`none` or `loopback-only`). Every target is a
/// listener the test opened on the host's loopback (TCP, UDP, a toy DNS resolver): loopback is
/// the only address these tests may use. Off-box addresses are never a target.
#[rustfmt::skip]
fn network_cases(mode: &'static str) -> Vec<Case> {
    let loopback_only = mode == "loopback-only";
    let attacks = if loopback_only { BWRAP_ONLY } else { CONFINED };
    // The sandbox's own loopback must keep working in loopback-only (a private netns); in
    // `none` not even an IP socket may be created ("blocks all outbound and loopback sockets").
    let own_ip = Expects {
        bwrap: if loopback_only { Expect::Works } else { Expect::Blocked },
        landlock: if loopback_only { Expect::Refused } else { Expect::Blocked },
        direct: Expect::Record,
        docker: if loopback_only { Expect::Works } else { Expect::Blocked },
    };
    // Unix sockets of the sandbox's own stay usable in every mode (socketpair is in ipc).
    let own_unix = Expects { bwrap: Expect::Works, landlock: if loopback_only { Expect::Refused } else { Expect::Record }, direct: Expect::Works, docker: Expect::Works };
    let cases = vec![
        case("net.tcp-host-loopback-v4", plain, attacks, |f, _| tcp_plan(f, loopback_v4(), "net.tcp-connect")),
        case("net.tcp-host-loopback-v6", plain, attacks, |f, _| tcp_plan(f, loopback_v6(), "net.tcp-connect")),
        case("net.udp-host-loopback-v4", plain, attacks, |f, _| udp_plan(f, loopback_v4())),
        case("net.udp-host-loopback-v6", plain, attacks, |f, _| udp_plan(f, loopback_v6())),
        case("net.dns-host-resolver", plain, attacks, |f, _| {
            let (port, received) = f.dns();
            Ok(plan("net.dns-query", opts([("addr", "127.0.0.1".into()), ("port", port.to_string()), ("marker", marker(f))]))
                .oracle(Oracle::NotReceived(received)))
        }),
        case("net.bash-dev-tcp-host-loopback", plain, attacks, |f, _| {
            if !Path::new("/bin/bash").exists() {
                return Err("bash is not installed".into());
            }
            if f.place == Place::Inside(Backend::Docker) {
                return Err("the test image has no bash (busybox only)".into());
            }
            tcp_plan(f, loopback_v4(), "net.dev-tcp")
        }),
        case("net.raw-icmp-socket", netraw_ns, attacks, |_, _| Ok(plan("net.raw-icmp", Vec::new()))),
        case("net.own-loopback", plain, own_ip, |_, _| Ok(plan("net.loopback-self", Vec::new()))),
        case("net.create-inet-stream-socket", plain, own_ip, |_, _| Ok(socket_plan("inet", "stream"))),
        case("net.create-inet6-dgram-socket", plain, own_ip, |_, _| Ok(socket_plan("inet6", "dgram"))),
        case("net.create-unix-socket", plain, own_unix, |_, _| Ok(socket_plan("unix", "stream"))),
        vsock_case(attacks),
    ];
    let mut cases = cases;
    if loopback_only {
        cases.extend(listed_port_cases());
    }
    cases
        .into_iter()
        .map(|c| Case { name: format!("{}@{mode}", c.name), ..c.policy(Policy::Network(mode)) })
        .collect()
}

/// `loopback-only` with `loopbackPorts`: exactly the listed TCP ports of the host's loopback
/// are reachable (through Palisade's bridge), on 127.0.0.1 and ::1; an unlisted port beside a
/// listed one, and UDP to a listed port, are not.
#[rustfmt::skip]
fn listed_port_cases() -> Vec<Case> {
    let reachable = Expects { bwrap: Expect::Works, landlock: Expect::Refused, direct: Expect::Record, docker: Expect::Works };
    vec![
        case("net.tcp-listed-host-port-v4", plain, reachable, |f, _| listed_tcp(f, loopback_v4())),
        case("net.tcp-listed-host-port-v6", plain, reachable, |f, _| listed_tcp(f, loopback_v6())),
        case("net.tcp-unlisted-host-port-beside-a-listed-one", plain, BWRAP_ONLY, |f, _| {
            let other = f.tcp(loopback_v4())?;
            f.loopback_ports.push(other);
            tcp_plan(f, loopback_v4(), "net.tcp-connect")
        }),
        case("net.udp-to-a-listed-host-port", plain, BWRAP_ONLY, |f, _| {
            let plan = udp_plan(f, loopback_v4())?;
            f.loopback_ports.push(plan_port(&plan));
            Ok(plan)
        }),
    ]
}

/// A TCP listener on `ip` whose port the policy lists.
fn listed_tcp(f: &mut Fixture, ip: std::net::IpAddr) -> Result<Plan, String> {
    let plan = tcp_plan(f, ip, "net.tcp-connect")?;
    f.loopback_ports.push(plan_port(&plan));
    Ok(plan)
}

/// The `--port` a network plan aims at.
fn plan_port(plan: &Plan) -> u16 {
    plan.args
        .windows(2)
        .find(|pair| pair[0] == "--port")
        .and_then(|pair| pair[1].parse().ok())
        .unwrap()
}

fn socket_plan(family: &str, kind: &str) -> Plan {
    plan(
        "net.socket-create",
        opts([("family", family.into()), ("type", kind.into())]),
    )
}

/// `AF_VSOCK` is scoped by no network namespace: on a VM it reaches the hypervisor side, so it
/// is blocked in every mode. Creating the socket is the whole attack (nothing is connected to).
fn vsock_case(expects: Expects) -> Case {
    case("net.create-vsock-socket", plain, expects, |_, env| {
        // Hosts without a vsock transport cannot show the attack working outside.
        let probe = std::process::Command::new(&env.attack)
            .args(["net.socket-create", "--family", "vsock", "--type", "stream"])
            .output()
            .map_err(|e| format!("cannot run the attack tool: {e}"))?;
        let line = String::from_utf8_lossy(&probe.stdout);
        if !line.contains("\"verdict\":\"succeeded\"") {
            return Err(format!("this host has no vsock transport: {}", line.trim()));
        }
        Ok(socket_plan("vsock", "stream"))
    })
}

/// `allow-outbound` shares the host's network; what stays closed there is vsock, and the host's
/// abstract Unix sockets (Landlock scopes them out: the namespace does not). Docker's `--network
/// host` shares them unless the container has the static stub, which scopes them as bwrap's
/// does; without it (no static bridge could be built) recorded, and listed in the probe.
fn outbound_cases() -> Vec<Case> {
    let outbound = Expects {
        bwrap: Expect::Blocked,
        landlock: Expect::Blocked,
        direct: Expect::Record,
        docker: Expect::Blocked,
    };
    let abstract_sockets = Expects {
        docker: if docker_image::static_bridge().is_ok() {
            Expect::Blocked
        } else {
            Expect::Record
        },
        ..outbound
    };
    vec![
        Case {
            name: "net.create-vsock-socket@allow-outbound".into(),
            ..vsock_case(outbound).policy(Policy::Network("allow-outbound"))
        },
        Case {
            name: "ipc.unix-abstract-host@allow-outbound".into(),
            ..case("ipc.unix-abstract-host", plain, abstract_sockets, |f, _| {
                let name = f.unix_abstract();
                Ok(plan(
                    "ipc.unix-abstract",
                    opts([("name", name), ("marker", marker(f))]),
                ))
            })
            .policy(Policy::Network("allow-outbound"))
        },
    ]
}

/// The IPC class: host Unix sockets, io_uring, TIOCSTI, keyrings; signals, ptrace,
/// process_vm_readv and `/proc` reads (environment, command line) of host processes (a victim,
/// the supervisor); ptrace, memory, environment and signals of the sandbox's own PID 1.
#[rustfmt::skip]
fn ipc_cases() -> Vec<Case> {
    vec![
        // Host Unix sockets (a Docker socket lives in /run; others in /tmp), abstract sockets.
        case("ipc.unix-socket-host-dir", plain, CONFINED, |f, _| {
            let path = f.host_socket_dir().join("host.sock");
            f.unix_stream(&path);
            Ok(plan("ipc.unix-connect", opts([("path", s(&path)), ("marker", marker(f))])))
        }),
        case("ipc.unix-socket-host-tmp", plain, CONFINED, |f, _| {
            let path = f.host_tmp_dir().join("host.sock");
            f.unix_stream(&path);
            Ok(plan("ipc.unix-connect", opts([("path", s(&path)), ("marker", marker(f))])))
        }),
        case("ipc.unix-abstract-host", plain, CONFINED, |f, _| {
            let name = f.unix_abstract();
            Ok(plan("ipc.unix-abstract", opts([("name", name), ("marker", marker(f))])))
        }),
        case("ipc.unix-dgram-host", plain, CONFINED, |f, _| {
            let path = f.host_socket_dir().join("host.dgram");
            let received = f.unix_dgram(&path);
            Ok(plan("ipc.unix-dgram", opts([("path", s(&path)), ("marker", marker(f))])).oracle(Oracle::NotReceived(received)))
        }),
        case("ipc.socketpair-works", plain, WORKS, |_, _| Ok(plan("ipc.socketpair", Vec::new()))),
        // io_uring: the ring itself, then operations a syscall filter on openat/connect misses.
        case("ipc.io-uring-setup", uring_ns, CONFINED, |_, _| Ok(plan("io.uring-setup", Vec::new()))),
        case("ipc.io-uring-openat-denied-file", uring_ns, CONFINED, |f, _| {
            Ok(read_at("io.uring-openat", f, f.path("deny/secret-file")))
        }),
        case("ipc.io-uring-connect-host-loopback", uring_ns, CONFINED, |f, _| tcp_plan(f, loopback_v4(), "io.uring-connect")),
        // The terminal and the session keyring the command inherits.
        case("ipc.tiocsti-inherited-tty", tiocsti_ns, CONFINED, |f, _| {
            let rdev = f.pty();
            Ok(plan("ipc.tiocsti", opts([("tty-rdev", rdev.to_string()), ("marker", marker(f))])).oracle(Oracle::TtyClean))
        }),
        case("ipc.keyring-read-inherited-key", plain, CONFINED, |f, _| {
            let desc = format!("palisade-escape-{}", f.marker);
            f.keyring(&desc);
            Ok(plan("ipc.keyring-read", opts([("desc", desc), ("marker", marker(f))])))
        }),
        case("ipc.keyring-add-session-key", plain, CONFINED, |f, _| {
            let desc = format!("palisade-escape-{}", f.marker);
            f.keyring(&format!("{desc}-seed"));
            Ok(plan("ipc.keyring-add", opts([("desc", desc)])))
        }),
        // Host processes: a victim the test spawned, and the `palisade` supervisor itself.
        case("ipc.kill-host-process", in_userns, CONFINED, |f, e| {
            let (pid, _) = f.victim(&e.attack);
            Ok(guarded("proc.kill", f, opts([("pid", pid.to_string()), ("marker", marker(f))])).oracle(Oracle::VictimAlive))
        }),
        case("ipc.signal-supervisor", in_userns, CONFINED, |f, e| {
            let file = f.supervisor_pid_file(&e.attack);
            Ok(guarded("proc.signal", f, opts([("pid-file", s(file)), ("marker", marker(f))])))
        }),
        case("ipc.ptrace-host-process", ptrace_ns, CONFINED, |f, e| {
            let (pid, _) = f.victim(&e.attack);
            Ok(guarded("proc.ptrace", f, opts([("pid", pid.to_string()), ("marker", marker(f))])))
        }),
        case("ipc.ptrace-supervisor", ptrace_ns, CONFINED, |f, e| {
            let file = f.supervisor_pid_file(&e.attack);
            Ok(guarded("proc.ptrace", f, opts([("pid-file", s(file)), ("marker", marker(f))])))
        }),
        case("ipc.process-vm-readv-host-process", ptrace_ns, CONFINED, |f, e| {
            let (pid, addr) = f.victim(&e.attack);
            let args = opts([("pid", pid.to_string()), ("addr", format!("{addr:#x}")), ("marker", marker(f))]);
            Ok(guarded("proc.vm-read", f, args))
        }),
        case("ipc.read-host-process-environ", plain, CONFINED, |f, e| {
            let (pid, _) = f.victim(&e.attack);
            Ok(plan("proc.environ", opts([("pid", pid.to_string()), ("marker", marker(f))])))
        }),
        // World-readable in any /proc that shows the victim: secrets passed as arguments.
        case("ipc.read-host-process-cmdline", plain, CONFINED, |f, e| {
            let (pid, _) = f.victim(&e.attack);
            Ok(plan("proc.cmdline", opts([("pid", pid.to_string()), ("marker", marker(f))])))
        }),
        // The sandbox's own PID 1 (palisade's init, or the container's).
        case("ipc.ptrace-sandbox-init", pid_ns_shell, CONFINED, |f, _| Ok(guarded("proc.ptrace-init", f, Vec::new()))),
        case("ipc.process-vm-readv-sandbox-init", pid_ns_shell, CONFINED, |f, _| {
            Ok(guarded("proc.vm-read-init", f, Vec::new()))
        }),
        case("ipc.open-sandbox-init-mem-rw", pid_ns_shell, CONFINED, |f, _| Ok(guarded("proc.open-init-mem", f, Vec::new()))),
        case("ipc.read-sandbox-init-environ", pid_ns_shell, CONFINED, |f, _| {
            Ok(guarded("proc.read-init-environ", f, Vec::new()))
        }),
        case("ipc.signal-sandbox-init", init_signals, CONFINED, |f, _| Ok(guarded("proc.signal-init", f, Vec::new()))),
    ]
}

/// The privilege class.
#[rustfmt::skip]
fn privilege_cases() -> Vec<Case> {
    vec![
        case("priv.capabilities-left", caps_ns, CONFINED, |_, _| Ok(plan("priv.capabilities", Vec::new()))),
        case("priv.no-new-privs-unset", plain, CONFINED, |_, _| Ok(plan("priv.no-new-privs", Vec::new()))),
        case("priv.unshare-user-namespace", in_userns, CONFINED, |f, _| Ok(guarded("priv.unshare-user", f, Vec::new()))),
        case("priv.userns-then-mount", in_userns, CONFINED, |f, _| {
            Ok(guarded("priv.userns-mount", f, opts([("target", s(f.ws().join("mnt")))])))
        }),
        case("priv.mount-tmpfs", mount_ns, MOUNT, |f, _| {
            Ok(guarded("priv.mount-tmpfs", f, opts([("target", s(f.ws().join("mnt")))])))
        }),
        case("priv.mount-permission-probe", mount_probe_ns, CONFINED, |f, _| {
            Ok(plan("priv.mount-probe", opts([("target", s(f.ws().join("mnt")))])))
        }),
        case("priv.chroot", in_userns, CONFINED, |f, _| Ok(guarded("priv.chroot", f, opts([("dir", s(f.ws()))])))),
        case("priv.pivot-root", mount_ns, MOUNT, |f, _| {
            Ok(guarded("priv.pivot-root", f, opts([("dir", s(f.ws().join("newroot")))])))
        }),
        case("priv.bpf-map-create", bpf_ns, SYSCALL_FILTER, |_, _| Ok(plan("priv.bpf-map", Vec::new()))),
        case("priv.bpf-prog-load", bpf_ns, SYSCALL_FILTER, |_, _| Ok(plan("priv.bpf-prog", Vec::new()))),
        case("priv.perf-event-open", perf_ns, SYSCALL_FILTER, |_, _| Ok(plan("priv.perf-event", Vec::new()))),
        case("priv.userfaultfd", plain, SYSCALL_FILTER, |_, _| Ok(plan("priv.userfaultfd", Vec::new()))),
    ]
}

/// Inherited descriptors: the secret handed to `palisade run` as fd 5.
#[rustfmt::skip]
fn fd_cases() -> Vec<Case> {
    vec![
        case("fd.inherited-secret-read", plain, CONFINED, |f, _| {
            f.inherit_fd5(&f.path("deny/secret-file"));
            Ok(plan("fd.read", opts([("fd", "5".into()), ("marker", marker(f))])))
        }),
        case("fd.inherited-secret-proc-self-fd", plain, CONFINED, |f, _| {
            f.inherit_fd5(&f.path("deny/secret-file"));
            Ok(plan("fd.proc-path", opts([("fd", "5".into()), ("marker", marker(f))])))
        }),
        case("fd.inherited-secret-scan", plain, CONFINED, |f, _| {
            f.inherit_fd5(&f.path("deny/secret-file"));
            Ok(plan("fd.scan", opts([("marker", marker(f))])))
        }),
    ]
}

/// A cleanup attack that leaves a lingerer behind; the host looks for survivors.
fn lingerer(attack: &'static str, f: &Fixture) -> Plan {
    plan(attack, opts([("marker", marker(f))])).oracle(Oracle::NoSurvivors)
}

/// Process-tree cleanup: nothing the command started may survive `palisade run`.
#[rustfmt::skip]
fn cleanup_cases() -> Vec<Case> {
    vec![
        case("cleanup.double-fork-setsid-daemon", plain, CLEANUP, |f, _| Ok(lingerer("cleanup.daemon", f))),
        case("cleanup.setpgid-escape", plain, CLEANUP, |f, _| Ok(lingerer("cleanup.setpgid", f))),
        case("cleanup.sigterm-ignorer", plain, CLEANUP, |f, _| Ok(lingerer("cleanup.ignore-term", f))),
        case("cleanup.child-running-at-exit", plain, CLEANUP, |f, _| Ok(lingerer("cleanup.child-running", f))),
        case("cleanup.supervisor-sigkilled", plain, CLEANUP, |f, _| {
            let mut p = lingerer("cleanup.stay", f);
            p.kill_supervisor = true;
            Ok(p)
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Running a case
// ---------------------------------------------------------------------------------------------

fn outside_only() -> bool {
    std::env::var_os("PALISADE_ESCAPE_OUTSIDE_ONLY").is_some_and(|v| v == "1")
}

fn taskpack(f: &Fixture, case: &Case, backend: Backend) -> PathBuf {
    let q = |p: &Path| serde_json::to_string(&p.display().to_string()).unwrap();
    let mut yaml = String::from(
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: escape-battery\nspec:\n  sandbox:\n",
    );
    if backend == Backend::Direct {
        yaml.push_str(
            "    preferredBackends: [direct-dedicated]\n    networkMode: allow-outbound\n",
        );
    } else {
        let mode = match case.policy {
            Policy::Network(mode) => mode,
            _ => "none",
        };
        yaml.push_str(&format!(
            "    preferredBackends: [{}]\n    networkMode: {mode}\n",
            backend.name()
        ));
        if !f.loopback_ports.is_empty() {
            let ports: Vec<String> = f.loopback_ports.iter().map(u16::to_string).collect();
            yaml.push_str(&format!("    loopbackPorts: [{}]\n", ports.join(", ")));
        }
        if case.policy == Policy::Protected {
            yaml.push_str("    requiredCapabilities: [protectedPathReadOnlyMask]\n");
        }
        yaml.push_str("    deniedReadPaths:\n");
        let mut denied = f.denied_paths();
        if case.policy == Policy::DeniedInWorkspace {
            denied.push(f.ws().join(".secrets"));
            denied.push(f.ws().join(".env"));
        }
        for path in denied {
            yaml.push_str(&format!("      - {}\n", q(&path)));
        }
        // Resolved by palisade against the run's HOME (the fixture's fake home).
        yaml.push_str("      - \"~/.ssh\"\n");
    }
    let file = f.path("taskpack.yaml");
    std::fs::write(&file, yaml).unwrap();
    escape_kit::chmod(&file, 0o644);
    file
}

/// The docker column's situation for one user.
enum DockerColumn {
    /// A daemon and the test image; `usable` says whether this user may use the socket, and
    /// `groups` are the supplementary groups it runs with for that (the socket's group).
    Ready {
        image: docker_image::TestImage,
        usable: bool,
        groups: Vec<u32>,
    },
    /// No daemon or no image: the column is skipped (a failure when it is required).
    Missing(String),
}

impl DockerColumn {
    /// The unprivileged pass runs the docker column as a member of the socket's group (as
    /// Debian's `docker` group), the way most people use Docker without being root; when the
    /// socket belongs to root's group there is no such member, and the backend must be refused.
    fn new(user: User) -> DockerColumn {
        use std::os::unix::fs::MetadataExt;
        let image = match docker_image::ensure() {
            Ok(image) => image,
            Err(why) => return DockerColumn::Missing(why),
        };
        let groups = match (user, std::fs::metadata(&image.socket).map(|m| m.gid())) {
            (User::Nobody, Ok(gid)) if gid != 0 => vec![gid],
            _ => Vec::new(),
        };
        let mut argv = user.wrap_in_groups(&groups);
        argv.extend(["docker".into(), "version".into()]);
        let usable = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env("DOCKER_HOST", format!("unix://{}", image.socket.display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        DockerColumn::Ready {
            image,
            usable,
            groups,
        }
    }

    /// Whether `palisade run` must refuse the docker backend for this user.
    fn refused(&self) -> bool {
        matches!(self, DockerColumn::Ready { usable: false, .. })
    }

    /// The supplementary groups the docker column's runs get.
    fn groups(&self) -> &[u32] {
        match self {
            DockerColumn::Ready { groups, .. } => groups,
            DockerColumn::Missing(_) => &[],
        }
    }
}

fn run_case(env: &Env, docker: &DockerColumn, case: &Case, place: Place) -> Cell {
    let not_run = |detail: String, failure: Option<String>| Cell {
        verdict: Verdict::NotRun,
        detail,
        asserted: failure.is_some(),
        failure,
        explained: None,
    };
    let how = match place {
        Place::Outside => match (case.outside)(env.user) {
            How::NotPossible(why) => {
                return not_run(format!("not possible for this user: {why}"), None);
            }
            how => Some(how),
        },
        Place::Inside(backend) => {
            if backend == Backend::Docker
                && let DockerColumn::Missing(why) = docker
            {
                let failure = docker_image::required()
                    .then(|| "PALISADE_REQUIRE_DOCKER=1 but there is no docker daemon".to_string());
                return not_run(format!("no docker: {why}"), failure);
            }
            if let Some(why) = &env.palisade_missing {
                return if outside_only() {
                    not_run(format!("PALISADE_ESCAPE_OUTSIDE_ONLY: {why}"), None)
                } else {
                    not_run(why.clone(), Some("`palisade run` is unavailable".into()))
                };
            }
            None
        }
    };
    let mut fixture = Fixture::new(env, &case.name, place, case.layout);
    let plan = match (case.build)(&mut fixture, env) {
        Ok(plan) => plan,
        Err(why) => return not_run(format!("not applicable on this host: {why}"), None),
    };
    let mut argv = match place {
        Place::Inside(Backend::Docker) => env.user.wrap_in_groups(docker.groups()),
        _ => env.user.wrap(),
    };
    match (&how, place) {
        (Some(How::Unshare(flags)), _) => {
            argv.push("unshare".into());
            argv.extend(flags.iter().map(|f| f.to_string()));
            argv.push("--".into());
        }
        (Some(How::UnshareShell(flags)), _) => {
            argv.push("unshare".into());
            argv.extend(flags.iter().map(|f| f.to_string()));
            argv.extend([
                "--".into(),
                "sh".into(),
                "-c".into(),
                "\"$0\" \"$@\"; exit $?".into(),
            ]);
        }
        (_, Place::Inside(backend)) => {
            let tp = taskpack(&fixture, case, backend);
            argv.push(s(env.palisade.as_ref().unwrap()));
            argv.extend([
                "run".into(),
                "--taskpack".into(),
                s(&tp),
                "--workspace".into(),
                s(fixture.ws()),
                "--audit".into(),
                s(fixture.path("audit/decisions.jsonl")),
            ]);
            if backend == Backend::Direct {
                argv.push("--allow-direct-dedicated".into());
            }
            if let (Backend::Docker, DockerColumn::Ready { image, .. }) = (backend, docker) {
                // The fixture is visible read-only: the denied paths must be masked there.
                // The static bridge: forwarded host loopback ports need it under docker.
                let profile = fixture.path("runtime-profiles.yaml");
                let bridge = docker_image::static_bridge().ok();
                image.write_profile_with_bridge(
                    &profile,
                    std::slice::from_ref(&fixture.root),
                    bridge.as_deref(),
                );
                escape_kit::chmod(&profile, 0o644);
                argv.extend([
                    "--runtime-profiles".into(),
                    s(&profile),
                    "--docker-socket".into(),
                    s(&image.socket),
                ]);
            }
            argv.push("--".into());
        }
        _ => {}
    }
    if place == Place::Inside(Backend::Docker) {
        argv.push(docker_image::ATTACK_IN_IMAGE.into());
    } else {
        argv.push(s(&env.attack));
    }
    argv.push(plan.attack.into());
    argv.extend(plan.args.iter().cloned());
    let vars = vec![
        (
            "PATH".to_string(),
            "/usr/local/bin:/usr/bin:/bin".to_string(),
        ),
        ("HOME".to_string(), s(fixture.path("home"))),
        ("LANG".to_string(), "C.UTF-8".to_string()),
        ("PALISADE_CACHE_DIR".to_string(), s(&env.cache)),
    ];
    let pid_file = if place == Place::Outside {
        None
    } else {
        fixture.pid_file.clone()
    };
    let user = env.user;
    let ran = escape_kit::run(&argv, &vars, &fixture, plan.kill_supervisor, |pid| {
        if let Some(file) = pid_file {
            std::fs::write(&file, pid.to_string()).unwrap();
            escape_kit::chown_tree(&file, user);
        }
    });
    judge(env, docker, case, place, &plan, &ran, &mut fixture)
}

/// Turn a run into a verdict and check it against the case's expectation.
fn judge(
    env: &Env,
    docker: &DockerColumn,
    case: &Case,
    place: Place,
    plan: &Plan,
    ran: &escape_kit::Ran,
    fixture: &mut Fixture,
) -> Cell {
    let docker_refused = place == Place::Inside(Backend::Docker) && docker.refused();
    let expect = match place {
        Place::Outside => None,
        Place::Inside(_) if docker_refused => Some(Expect::Refused),
        Place::Inside(backend) => Some(case.expect.get(backend)),
    };
    let refused = matches!(place, Place::Inside(_))
        && ran.status.and_then(|s| s.code()) == Some(125)
        && ran.stdout.trim().is_empty();
    let (verdict, detail) = if refused {
        let first = ran.stderr.lines().next().unwrap_or_default();
        (
            Verdict::Refused,
            format!(
                "palisade refused (125): {first} … {}",
                escape_kit::tail(&ran.stderr)
            ),
        )
    } else if plan.kill_supervisor && !ran.killed {
        (
            Verdict::Broken,
            format!(
                "no lingerer appeared, so the supervisor was never killed; stdout: {}",
                ran.stdout.trim()
            ),
        )
    } else {
        match escape_kit::parse_verdict(ran, plan.attack) {
            Err(problem) => (Verdict::Broken, problem),
            Ok((word, detail)) => {
                let effect = plan.oracle.check(fixture);
                let verdict = match (word.as_str(), &effect) {
                    ("error", _) => Verdict::ToolError,
                    ("unsafe-refused", None) => Verdict::UnsafeRefused,
                    (_, Some(_)) => Verdict::Succeeded,
                    ("succeeded", None) if plan.oracle.decides() => Verdict::Blocked,
                    ("succeeded", None) if matches!(plan.oracle, Oracle::None) => {
                        Verdict::Succeeded
                    }
                    ("succeeded", None) => Verdict::Contained,
                    ("blocked", None) => Verdict::Blocked,
                    (_, None) => Verdict::Broken,
                };
                let detail = match effect {
                    Some(effect) => format!("{detail}; host: {effect}"),
                    None => detail,
                };
                (verdict, detail)
            }
        }
    };
    let _ = env;
    let mut detail = detail;
    if let Place::Inside(_) = place {
        let status = ran.status.map_or("none".to_string(), |s| s.to_string());
        detail = format!("{detail} [{status}, {} ms]", ran.elapsed.as_millis());
    }
    let failure = match expect {
        None => (verdict != Verdict::Succeeded).then(|| {
            "the attack does not work outside, so a block inside proves nothing".to_string()
        }),
        Some(Expect::Record) => None,
        Some(Expect::Works) => {
            (verdict != Verdict::Succeeded).then(|| "must keep working inside".to_string())
        }
        Some(Expect::Refused) => {
            // The engine knows a backend's capabilities and network modes: it must say why.
            // A denied path inside the workspace is refused by the Landlock shim instead.
            let code = match case.policy {
                _ if docker_refused => Some("SANDBOX_BACKEND_UNAVAILABLE"),
                Policy::Protected | Policy::Network(_) => Some("SANDBOX_CAPABILITY_INSUFFICIENT"),
                Policy::Standard | Policy::DeniedInWorkspace => None,
            };
            if verdict != Verdict::Refused {
                Some("palisade must refuse this policy for this backend (exit 125, nothing launched)".to_string())
            } else {
                code.filter(|code| !ran.stderr.contains(code))
                    .map(|code| format!("refused, but stderr does not say `{code}`"))
            }
        }
        Some(expect @ (Expect::Blocked | Expect::BlockedOrNoNs)) => {
            let ok = verdict == Verdict::Blocked
                || (verdict == Verdict::Contained && plan.contained_ok)
                || (verdict == Verdict::UnsafeRefused && expect == Expect::BlockedOrNoNs);
            (!ok).then(|| match verdict {
                Verdict::Succeeded => "ESCAPE: the attack succeeded inside".to_string(),
                Verdict::Contained => "the attack worked inside (only a private view was changed), and this case requires it to fail".to_string(),
                _ => format!("expected blocked, got {}", verdict.word()),
            })
        }
    };
    // Leftovers must be reaped, not waited for: a lingerer lives 30 s by itself.
    let failure = failure.or_else(|| {
        (matches!(place, Place::Inside(_))
            && plan.oracle.decides()
            && !plan.kill_supervisor
            && ran.elapsed > std::time::Duration::from_secs(20))
        .then(|| "palisade waited for the leftover processes to exit by themselves".to_string())
    });
    let asserted = !matches!(expect, Some(Expect::Record));
    let explained = (matches!(place, Place::Inside(_))
        && matches!(verdict, Verdict::Blocked | Verdict::Contained))
    .then(|| denials_recorded(&fixture.path("audit/decisions.jsonl")));
    Cell {
        verdict,
        detail,
        asserted,
        failure,
        explained,
    }
}

/// Whether the last run outcome in `audit` lists at least one denial.
fn denials_recorded(audit: &std::path::Path) -> bool {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    text.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|v| v["schemaVersion"] == "palisade.run-outcome/v1")
        .and_then(|outcome| {
            outcome
                .pointer("/outcome/denials/total")
                .and_then(|t| t.as_u64())
        })
        .is_some_and(|total| total > 0)
}

/// Run every case outside and inside each backend as `user`; print the table; fail on any
/// failure.
fn battery(class: &str, user: Option<User>, cases: Vec<Case>) {
    let Some(user) = user else {
        println!(
            "escape battery `{class}` as root: SKIPPED — the test runs as uid {}, not root; run it as root for the root pass",
            escape_kit::test_uid()
        );
        return;
    };
    let env = Env::new(
        user,
        PathBuf::from(env!("CARGO_BIN_EXE_palisade-attack")),
        escape_kit::palisade_binary(),
    );
    let places = [
        Place::Outside,
        Place::Inside(Backend::Bwrap),
        Place::Inside(Backend::Landlock),
        Place::Inside(Backend::Direct),
        Place::Inside(Backend::Docker),
    ];
    let docker = DockerColumn::new(user);
    let docker_note = match &docker {
        DockerColumn::Ready {
            image,
            usable,
            groups,
        } => format!(
            "docker: image {} ({}), socket {} {}{}",
            image.tag,
            image.id,
            image.socket.display(),
            if *usable {
                "usable"
            } else {
                "NOT usable by this user: the backend must be refused"
            },
            if groups.is_empty() {
                String::new()
            } else {
                format!(" (runs with supplementary groups {groups:?}: the socket's group)")
            }
        ),
        DockerColumn::Missing(why) => format!("docker: skipped: {why}"),
    };
    let mut table = Table {
        title: format!("{class}, {}", user.label()),
        columns: places.iter().map(|p| p.label().to_string()).collect(),
        rows: Vec::new(),
    };
    for case in &cases {
        let cells = places
            .iter()
            .map(|place| run_case(&env, &docker, case, *place))
            .collect();
        table.rows.push((case.name.clone(), cells));
    }
    // The share of attacks refused inside whose run explained the refusal (issue: every
    // denial explained); measured and printed, not asserted, while some kinds are unobserved.
    let mut shares = Vec::new();
    for (index, place) in places.iter().enumerate().skip(1) {
        let cells: Vec<bool> = table
            .rows
            .iter()
            .filter_map(|(_, cells)| cells.get(index).and_then(|c: &Cell| c.explained))
            .collect();
        if !cells.is_empty() {
            let explained = cells.iter().filter(|e| **e).count();
            shares.push(format!("{} {explained}/{}", place.label(), cells.len()));
        }
    }
    let explained_note = format!(
        "refusals explained by a recorded denial: {}",
        shares.join(", ")
    );
    let rendered = format!("{}\n{docker_note}\n{explained_note}", table.render());
    println!("{rendered}");
    println!("details:\n{}", table.details());
    if let Some(dir) = std::env::var_os("PALISADE_ESCAPE_REPORT") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{class}-uid{}.txt", user.uid()));
        std::fs::write(file, format!("{rendered}\ndetails:\n{}", table.details())).unwrap();
    }
    let failures = table.failures();
    assert!(
        failures.is_empty(),
        "{} failure(s) in `{class}` as {}:\n{}",
        failures.len(),
        user.label(),
        failures.join("\n")
    );
}

#[test]
fn filesystem_as_root() {
    battery("filesystem", escape_kit::root_user(), filesystem_cases());
}

#[test]
fn filesystem_unprivileged() {
    battery(
        "filesystem",
        Some(escape_kit::unprivileged_user()),
        filesystem_cases(),
    );
}

#[test]
fn network_as_root() {
    let mut cases = network_cases("none");
    cases.extend(network_cases("loopback-only"));
    cases.extend(outbound_cases());
    battery("network", escape_kit::root_user(), cases);
}

#[test]
fn network_unprivileged() {
    let mut cases = network_cases("none");
    cases.extend(network_cases("loopback-only"));
    cases.extend(outbound_cases());
    battery("network", Some(escape_kit::unprivileged_user()), cases);
}

#[test]
fn ipc_as_root() {
    battery("ipc", escape_kit::root_user(), ipc_cases());
}

#[test]
fn ipc_unprivileged() {
    battery("ipc", Some(escape_kit::unprivileged_user()), ipc_cases());
}

#[test]
fn privilege_as_root() {
    battery("privilege", escape_kit::root_user(), privilege_cases());
}

#[test]
fn privilege_unprivileged() {
    battery(
        "privilege",
        Some(escape_kit::unprivileged_user()),
        privilege_cases(),
    );
}

#[test]
fn inherited_fds_as_root() {
    battery("fds", escape_kit::root_user(), fd_cases());
}

#[test]
fn inherited_fds_unprivileged() {
    battery("fds", Some(escape_kit::unprivileged_user()), fd_cases());
}

#[test]
fn cleanup_as_root() {
    battery("cleanup", escape_kit::root_user(), cleanup_cases());
}

#[test]
fn cleanup_unprivileged() {
    battery(
        "cleanup",
        Some(escape_kit::unprivileged_user()),
        cleanup_cases(),
    );
}
