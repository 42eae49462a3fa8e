//! `palisade-bridge`: the egress bridge alone, for sandboxes that cannot run the host's
//! `palisade` (a container image without the host's libc). Built statically (see the README),
//! mounted read-only into the container, and run as its entrypoint:
//!
//! ```text
//! palisade-bridge __proxy-bridge --port 3128 --socket /run/palisade-egress/proxy.sock -- CMD…
//! ```
//!
//! It binds the container's loopback port, detaches the bridge, and execs the command, exactly
//! as `palisade __proxy-bridge` does under bwrap ([`palisade_proxy::bridge::exec_main`]).

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use palisade_proxy::bridge;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // 127 when the command is not found, as a shell (and Docker's own entrypoint lookup) says;
    // 125 otherwise, as `palisade __proxy-bridge`: nothing of the command ran.
    let (status, message) = match args.split_first() {
        Some((first, rest)) if first == bridge::SUBCOMMAND => match bridge::parse_args(rest) {
            Ok((port, socket, command)) => {
                let failure = bridge::exec_main(port, &socket, &command);
                (failure.status, failure.message)
            }
            Err(usage) => (125, usage),
        },
        _ => (
            125,
            format!(
                "usage: palisade-bridge {} --port N --socket PATH -- COMMAND [ARGS…]",
                bridge::SUBCOMMAND
            ),
        ),
    };
    let _ = writeln!(std::io::stderr(), "palisade-bridge: {message}");
    ExitCode::from(status)
}
