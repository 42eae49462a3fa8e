//! `palisade-init`: the processes Palisade starts inside a Linux sandbox — the init of a
//! `linux-landlock` or `direct-dedicated` sandbox (`__sandbox-init`), PID 1 of a `linux-bwrap`
//! sandbox (`__sandbox-pid1`) and the seccomp stub (`__sandbox-exec`) — and nothing else.
//!
//! `palisade` can run them itself (the same subcommands, the same code from `palisade-shims`),
//! but it is a 20 MB binary with the WebAssembly runtime in it, and every run executes its init
//! once more inside the sandbox: this one starts in about a millisecond less. `palisade` runs
//! this binary when it is installed beside it (`cargo build` and `cargo install --path host`
//! make both), else itself, and the outcome's `pid1.init` says which. Both carry the shims'
//! build ([`palisade_shims::BUILD`]); init refuses a launcher of another build. On Linux with
//! glibc it is linked static-pie (`host/build/static_link.rs`): no dynamic loader, no
//! `libc.so.6` or `libgcc_s.so.1` to load on each of its starts.

#[cfg(target_os = "linux")]
fn main() {
    use std::ffi::OsString;

    use palisade_shims::{bwrap, init, sandbox_exec};

    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let Some((subcommand, rest)) = args.split_first() else {
        usage()
    };
    match subcommand.to_str() {
        Some(init::SUBCOMMAND) if rest.is_empty() => init::main(),
        Some(bwrap::SUBCOMMAND_SANDBOX_PID1) => match rest {
            [option, build, separator, command @ ..]
                if option == bwrap::PID1_BUILD_OPTION && separator == "--" =>
            {
                init::pid1::main(&build.to_string_lossy(), command)
            }
            _ => usage(),
        },
        Some(bwrap::SUBCOMMAND_SANDBOX_EXEC) => sandbox_exec::main(rest),
        _ => usage(),
    }
}

#[cfg(target_os = "linux")]
fn usage() -> ! {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "palisade-init: internal to palisade: __sandbox-init | __sandbox-pid1 --build B -- CMD… \
         | __sandbox-exec …"
    );
    std::process::exit(palisade_shims::init::EXIT_SETUP_FAILED)
}

#[cfg(not(target_os = "linux"))]
fn main() {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "palisade-init: sandbox inits need linux");
    std::process::exit(125)
}
