//! `palisade-bridge`: the network bridge alone, for sandboxes that cannot run the host's
//! `palisade` (a container image without the host's libc). Built statically (see the README),
//! mounted read-only into the container, and run as its entrypoint:
//!
//! ```text
//! palisade-bridge __bridge --proxy 127.0.0.1:3128=/run/palisade-bridge/proxy.sock -- CMD…
//! ```
//!
//! It binds the container's loopback ports, detaches the bridge, and execs the command, exactly
//! as `palisade __bridge` does under bwrap ([`palisade_proxy::bridge::main`]). `palisade-bridge
//! __bridge connect [--via ADDR] HOST PORT` is ssh's `ProxyCommand` in the container
//! ([`palisade_proxy::bridge::connect_main`]).
//!
//! It is also the container's seccomp stub, `palisade-bridge __sandbox-exec --mechanism docker
//! …` ([`palisade_shims::sandbox_exec`]): it installs Palisade's observed filter, hands its
//! listener to the supervisor and execs the rest (the bridge, or the command).

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use palisade_proxy::bridge;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // 127 when the command is not found, as a shell (and Docker's own entrypoint lookup) says;
    // 125 otherwise, as `palisade __bridge`: nothing of the command ran.
    let failure = match args.split_first() {
        #[cfg(target_os = "linux")]
        Some((first, rest)) if first == palisade_shims::bwrap::SUBCOMMAND_SANDBOX_EXEC => {
            palisade_shims::sandbox_exec::main(rest)
        }
        Some((first, rest)) if first == bridge::SUBCOMMAND => match rest.split_first() {
            // ssh's ProxyCommand inside the container (`GIT_SSH_COMMAND`).
            Some((mode, rest)) if mode == bridge::CONNECT => {
                return match bridge::connect_main(rest) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(message) => {
                        let _ = writeln!(std::io::stderr(), "palisade-bridge: {message}");
                        ExitCode::from(1)
                    }
                };
            }
            _ => bridge::main(rest),
        },
        _ => bridge::ExecFailure {
            status: 125,
            message: format!(
                "usage: palisade-bridge {} [--proxy ADDR=SOCKET] [--forward ADDR=SOCKET]... -- COMMAND [ARGS...]",
                bridge::SUBCOMMAND
            ),
        },
    };
    let _ = writeln!(std::io::stderr(), "palisade-bridge: {}", failure.message);
    ExitCode::from(failure.status)
}
