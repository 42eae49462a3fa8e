//! The in-sandbox bridge's argument protocol (`palisade_proxy::bridge::parse_args`): the argv
//! the launcher writes (`--proxy ADDR=SOCKET`, `--forward ADDR=SOCKET`, `--`, the command).
//!
//! Asserts: no panic; refused arguments get a one-line message; accepted ones have at least one
//! route and a command, every route listening on loopback only with an absolute socket path, and
//! writing the routes back out (`BridgeRoute::to_args`) and parsing again gives the same routes
//! and command. Arguments are the input split at NUL bytes (any bytes, as argv may hold).
#![no_main]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use libfuzzer_sys::fuzz_target;
use palisade_fuzz::{one_line, write_seeds};
use palisade_proxy::bridge::parse_args;

const SEEDS: [&[u8]; 3] = [
    b"--proxy\x00127.0.0.1:3128=/run/palisade/proxy.sock\x00--\x00curl\x00https://example.com",
    b"--forward\x00127.0.0.1:5432=/run/p/5432.sock\x00--forward\x00[::1]:6379=/run/p/6379.sock\x00--\x00sh\x00-c\x00true",
    b"--proxy\x00127.0.0.1:0=relative\x00--\x00x",
];

fuzz_target!(
    init: {
        write_seeds(SEEDS.iter().map(|s| s.to_vec()));
    },
    |data: &[u8]| {
        let args: Vec<OsString> = data
            .split(|b| *b == 0)
            .map(|a| OsString::from_vec(a.to_vec()))
            .collect();
        match parse_args(&args) {
            Err(message) => one_line(&message),
            Ok((routes, command)) => {
                assert!(!routes.is_empty() && !command.is_empty());
                let mut again = Vec::new();
                for route in &routes {
                    assert!(route.listen.ip().is_loopback());
                    assert!(route.socket.is_absolute());
                    again.extend(route.to_args());
                }
                again.push(OsString::from("--"));
                again.extend(command.iter().cloned());
                let reparsed = parse_args(&again).expect("written routes parse again");
                assert_eq!(reparsed, (routes, command));
            }
        }
    }
);
