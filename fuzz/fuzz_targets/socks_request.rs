//! The filtering proxy's SOCKS5 messages (`palisade_proxy::socks::parse_greeting` and
//! `parse_request`), fed the input as one stream: a greeting, then a request after it.
//!
//! Asserts: no panic; a parser given fewer bytes than the message's maximum (257, 262) may ask
//! for more, never one given that many; `Done` never claims more bytes than it was given, and
//! gives the same answer for every longer input (the server parses as bytes arrive); an accepted
//! request names a non-empty host and a non-zero port; a refusal has a one-line reason and a
//! SOCKS5 reply code that is not "succeeded".
#![no_main]

use libfuzzer_sys::fuzz_target;
use palisade_fuzz::{one_line, write_seeds};
use palisade_proxy::socks::{
    MAX_GREETING, MAX_REQUEST, Parsed, Reply, parse_greeting, parse_request,
};

const SEEDS: [&[u8]; 5] = [
    b"\x05\x01\x00\x05\x01\x00\x03\x0agithub.com\x00\x16",
    b"\x05\x02\x02\x00\x05\x01\x00\x01\x7f\x00\x00\x02\x1f\x90SSH-2.0-x\r\n",
    b"\x05\x01\x00\x05\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x50",
    b"\x05\x01\x02",
    b"\x05\x01\x00\x05\x01\x00\x03\x09127.0.0.1\x00\x35",
];

fuzz_target!(
    init: {
        write_seeds(SEEDS.iter().map(|s| s.to_vec()));
    },
    |data: &[u8]| {
        let rest = match parse_greeting(data) {
            Ok(Parsed::Incomplete) => {
                assert!(data.len() < MAX_GREETING);
                return;
            }
            Ok(Parsed::Done { used, .. }) => {
                assert!(used <= data.len() && used <= MAX_GREETING);
                assert_eq!(parse_greeting(&data[..used]), parse_greeting(data));
                &data[used..]
            }
            Err(e) => {
                one_line(&e.refusal().reason);
                return;
            }
        };
        match parse_request(rest) {
            Ok(Parsed::Incomplete) => assert!(rest.len() < MAX_REQUEST),
            Ok(Parsed::Done { value, used }) => {
                assert!(used <= rest.len() && used <= MAX_REQUEST);
                assert_ne!(value.port, 0);
                assert!(!value.host.to_authority().is_empty());
                assert_eq!(
                    parse_request(&rest[..used]),
                    Ok(Parsed::Done { value, used })
                );
            }
            Err(e) => {
                one_line(&e.refusal().reason);
                assert_ne!(e.reply(), Reply::Succeeded);
                assert_eq!(parse_request(&rest[..rest.len().min(MAX_REQUEST)]), Err(e));
            }
        }
    }
);
