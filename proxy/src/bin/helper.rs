//! Test helper (not shipped). Modes, each printing `key=value` lines for tests/proxy.rs:
//!
//! - `reaper PROGRAM ARGS...`: becomes a child subreaper, runs the program, then reports and
//!   kills any orphans left behind (`command-exit=N`, `bridge-orphans=N`).
//! - `bridge-exec LISTEN SOCKET PROGRAM ARGS...`: `bridge::start_detached_then_exec`.
//! - `client BRIDGE TARGET`: one CONNECT through the bridge, a ping, then whether this process
//!   has any children (`status=`, `echo=`, `children=`).
#![allow(clippy::print_stdout, reason = "the helper's output is its result")]

use std::ffi::CString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((mode, rest)) if mode == "reaper" => reaper(rest),
        Some((mode, rest)) if mode == "bridge-exec" => bridge_exec(rest),
        Some((mode, rest)) if mode == "client" => client(rest),
        _ => {
            eprintln!("usage: palisade-proxy-helper reaper|bridge-exec|client ...");
            ExitCode::from(2)
        }
    }
}

fn reaper(args: &[String]) -> ExitCode {
    let Some((program, rest)) = args.split_first() else {
        return ExitCode::from(2);
    };
    if let Err(e) = sys::set_child_subreaper() {
        eprintln!("prctl: {e}");
        return ExitCode::from(1);
    }
    let status = match Command::new(program).args(rest).status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("spawn: {e}");
            return ExitCode::from(1);
        }
    };
    println!("command-exit={}", status.code().unwrap_or(-1));
    let orphans = children();
    println!("bridge-orphans={}", orphans.len());
    for pid in orphans {
        sys::kill_and_reap(pid);
    }
    ExitCode::SUCCESS
}

/// This process's children, from `/proc/self/task/*/children`.
fn children() -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return pids;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    pids
}

fn bridge_exec(args: &[String]) -> ExitCode {
    let [listen, socket, program, argv @ ..] = args else {
        return ExitCode::from(2);
    };
    let Ok(listen) = listen.parse() else {
        return ExitCode::from(2);
    };
    let cstring = |s: &[u8]| CString::new(s).unwrap_or_default();
    let program_c = cstring(program.as_bytes());
    let mut argv_c = vec![program_c.clone()];
    argv_c.extend(argv.iter().map(|a| cstring(a.as_bytes())));
    let env = palisade_proxy::bridge::environ().unwrap_or_default();
    let route = palisade_proxy::bridge::BridgeRoute {
        listen,
        socket: Path::new(socket).to_path_buf(),
        kind: palisade_proxy::RouteKind::Proxy,
    };
    let err = palisade_proxy::bridge::start_detached_then_exec(&[route], &program_c, &argv_c, &env);
    eprintln!("bridge-exec: {err}");
    ExitCode::from(127)
}

fn client(args: &[String]) -> ExitCode {
    let [bridge, target] = args else {
        return ExitCode::from(2);
    };
    // No retry: the bridge's listener must exist before this command starts.
    let mut stream = match TcpStream::connect(bridge.as_str()) {
        Ok(s) => s,
        Err(e) => {
            println!("connect-error={e}");
            return ExitCode::from(1);
        }
    };
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return ExitCode::from(1);
    }
    let mut head = Vec::new();
    let mut byte = [0_u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.extend_from_slice(&byte),
            _ => return ExitCode::from(1),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    println!("status={}", head.split(' ').nth(1).unwrap_or("none"));
    let _ = stream.write_all(b"ping");
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut echo = String::new();
    let _ = stream.read_to_string(&mut echo);
    println!("echo={echo}");
    println!(
        "children={}",
        if sys::has_children() { "some" } else { "none" }
    );
    ExitCode::SUCCESS
}

mod sys {
    use std::io;

    #[allow(unsafe_code)]
    pub fn set_child_subreaper() -> io::Result<()> {
        // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag.
        let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// `waitpid(-1, WNOHANG)`: `ECHILD` means no children at all (what a command that waits for
    /// all its children must see when the bridge is detached).
    #[allow(unsafe_code)]
    pub fn has_children() -> bool {
        let mut status = 0;
        // SAFETY: `status` is a valid int for the kernel to fill.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        !(r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
    }

    #[allow(unsafe_code)]
    pub fn kill_and_reap(pid: i32) {
        let mut status = 0;
        // SAFETY: kill and waitpid on our own child's pid; `status` is a valid int.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut status, 0);
        }
    }
}
