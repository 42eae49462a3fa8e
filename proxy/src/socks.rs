//! SOCKS5 (RFC 1928) as the filtering proxy speaks it: no authentication (method `0x00` only),
//! `CONNECT` only, by name (`ATYP` 3) or by IPv4/IPv6 literal. The parsers are pure functions over
//! the bytes read so far, so the server's bounded reads and the fuzz target share them; the
//! client half is what the bridge's `connect` mode (ssh's `ProxyCommand`) sends.
//!
//! Both messages are bounded by their own structure (a greeting is at most 257 bytes, a request
//! at most 262), so a parser answers "incomplete", "done" or a refusal after at most that many.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::host::Host;
use crate::record::{Refusal, RefusalCode};

/// The protocol version byte, which is also how the proxy tells SOCKS5 from HTTP: no HTTP method
/// starts with `0x05`.
pub const VERSION: u8 = 5;
/// The largest greeting: version, method count, 255 methods.
pub const MAX_GREETING: usize = 2 + 255;
/// The largest request: version, command, reserved, address type, a 255-byte name with its
/// length, port.
pub const MAX_REQUEST: usize = 4 + 1 + 255 + 2;

const NO_AUTH: u8 = 0x00;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;
const ATYP_IPV4: u8 = 1;
const ATYP_NAME: u8 = 3;
const ATYP_IPV6: u8 = 4;

/// A SOCKS5 reply code (RFC 1928 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Succeeded = 0,
    GeneralFailure = 1,
    NotAllowedByRuleset = 2,
    NetworkUnreachable = 3,
    HostUnreachable = 4,
    ConnectionRefused = 5,
    TtlExpired = 6,
    CommandNotSupported = 7,
    AddressTypeNotSupported = 8,
}

impl Reply {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Reply> {
        Some(match code {
            0 => Reply::Succeeded,
            1 => Reply::GeneralFailure,
            2 => Reply::NotAllowedByRuleset,
            3 => Reply::NetworkUnreachable,
            4 => Reply::HostUnreachable,
            5 => Reply::ConnectionRefused,
            6 => Reply::TtlExpired,
            7 => Reply::CommandNotSupported,
            8 => Reply::AddressTypeNotSupported,
            _ => return None,
        })
    }

    /// The reply the proxy sends for a refusal of its own (the reason goes to the record only:
    /// SOCKS has no room for text).
    pub fn for_refusal(code: RefusalCode) -> Reply {
        match code {
            RefusalCode::DomainNotAllowed
            | RefusalCode::AddressNotAllowed
            | RefusalCode::ClientNotAllowed => Reply::NotAllowedByRuleset,
            RefusalCode::ResolutionFailed => Reply::HostUnreachable,
            RefusalCode::UpstreamUnreachable => Reply::ConnectionRefused,
            RefusalCode::MalformedRequest
            | RefusalCode::UnsupportedRequest
            | RefusalCode::TooManyConnections
            | RefusalCode::ProxyUnreachable => Reply::GeneralFailure,
        }
    }

    /// The whole reply message. The bound address is always `0.0.0.0:0`: the client has no use
    /// for the proxy's upstream address, and the sandbox should not learn it.
    pub fn message(self) -> [u8; 10] {
        [VERSION, self.code(), 0, ATYP_IPV4, 0, 0, 0, 0, 0, 0]
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reply::Succeeded => "succeeded",
            Reply::GeneralFailure => "general failure",
            Reply::NotAllowedByRuleset => "connection not allowed by ruleset",
            Reply::NetworkUnreachable => "network unreachable",
            Reply::HostUnreachable => "host unreachable",
            Reply::ConnectionRefused => "connection refused",
            Reply::TtlExpired => "TTL expired",
            Reply::CommandNotSupported => "command not supported",
            Reply::AddressTypeNotSupported => "address type not supported",
        })
    }
}

/// A request's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Connect,
    Bind,
    UdpAssociate,
}

impl Command {
    /// How records name it (`method`), beside HTTP's `CONNECT` and `GET`.
    pub fn record_name(self) -> &'static str {
        match self {
            Command::Connect => "SOCKS5 CONNECT",
            Command::Bind => "SOCKS5 BIND",
            Command::UdpAssociate => "SOCKS5 UDP-ASSOCIATE",
        }
    }
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub command: Command,
    pub host: Host,
    pub port: u16,
}

/// What a parser made of the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<T> {
    /// More bytes are needed; never more than the message's maximum in all.
    Incomplete,
    /// The message, and how many bytes it took (the rest is the client's next message).
    Done { value: T, used: usize },
}

/// Why a greeting or request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocksError {
    #[error("SOCKS version {0} is not 5")]
    BadVersion(u8),
    #[error("the SOCKS5 client offers no method without authentication (offered: {0:?})")]
    NoAcceptableMethod(Vec<u8>),
    #[error("SOCKS5 command {0} is not supported (only CONNECT)")]
    UnknownCommand(u8),
    #[error("SOCKS5 reserved byte is {0}, not 0")]
    BadReserved(u8),
    #[error("SOCKS5 address type {0} is not supported (IPv4, name, IPv6)")]
    UnsupportedAddressType(u8),
    #[error("SOCKS5 target name is not a host name: {0}")]
    BadName(String),
    #[error("SOCKS5 target port is 0")]
    ZeroPort,
}

impl SocksError {
    /// The reply sent before closing: a greeting gets the method-selection answer (`0xFF` or
    /// nothing), a request its reply code.
    pub fn reply(&self) -> Reply {
        match self {
            SocksError::UnknownCommand(_) => Reply::CommandNotSupported,
            SocksError::UnsupportedAddressType(_) => Reply::AddressTypeNotSupported,
            SocksError::BadVersion(_)
            | SocksError::NoAcceptableMethod(_)
            | SocksError::BadReserved(_)
            | SocksError::BadName(_)
            | SocksError::ZeroPort => Reply::GeneralFailure,
        }
    }

    /// The refusal as records carry it.
    pub fn refusal(&self) -> Refusal {
        let code = match self {
            SocksError::NoAcceptableMethod(_)
            | SocksError::UnknownCommand(_)
            | SocksError::UnsupportedAddressType(_) => RefusalCode::UnsupportedRequest,
            SocksError::BadVersion(_)
            | SocksError::BadReserved(_)
            | SocksError::BadName(_)
            | SocksError::ZeroPort => RefusalCode::MalformedRequest,
        };
        Refusal::new(code, self.to_string())
    }
}

/// Parses a greeting (`VER NMETHODS METHODS…`). `Done` means the client offers "no
/// authentication", the one method the proxy accepts (`0x00` is the answer).
pub fn parse_greeting(buf: &[u8]) -> Result<Parsed<()>, SocksError> {
    let Some(&version) = buf.first() else {
        return Ok(Parsed::Incomplete);
    };
    if version != VERSION {
        return Err(SocksError::BadVersion(version));
    }
    let Some(&count) = buf.get(1) else {
        return Ok(Parsed::Incomplete);
    };
    let used = 2 + usize::from(count);
    let Some(methods) = buf.get(2..used) else {
        return Ok(Parsed::Incomplete);
    };
    if methods.contains(&NO_AUTH) {
        Ok(Parsed::Done { value: (), used })
    } else {
        Err(SocksError::NoAcceptableMethod(methods.to_vec()))
    }
}

/// The answer to a greeting: `0x00` when [`parse_greeting`] accepted it, `0xFF` ("no
/// acceptable methods") otherwise.
pub fn method_selection(accepted: bool) -> [u8; 2] {
    [
        VERSION,
        if accepted {
            NO_AUTH
        } else {
            NO_ACCEPTABLE_METHOD
        },
    ]
}

/// Parses a request (`VER CMD RSV ATYP DST.ADDR DST.PORT`). Every command parses (so a refused
/// `BIND` is recorded with its target); the server refuses all but `CONNECT`.
pub fn parse_request(buf: &[u8]) -> Result<Parsed<Request>, SocksError> {
    let Some(head) = buf.get(..4) else {
        return Ok(Parsed::Incomplete);
    };
    let &[version, command, reserved, atyp] = head else {
        return Ok(Parsed::Incomplete);
    };
    if version != VERSION {
        return Err(SocksError::BadVersion(version));
    }
    let command = match command {
        1 => Command::Connect,
        2 => Command::Bind,
        3 => Command::UdpAssociate,
        other => return Err(SocksError::UnknownCommand(other)),
    };
    if reserved != 0 {
        return Err(SocksError::BadReserved(reserved));
    }
    let (address_len, address_start) = match atyp {
        ATYP_IPV4 => (4, 4),
        ATYP_IPV6 => (16, 4),
        ATYP_NAME => match buf.get(4) {
            Some(&len) => (usize::from(len), 5),
            None => return Ok(Parsed::Incomplete),
        },
        other => return Err(SocksError::UnsupportedAddressType(other)),
    };
    let address_end = address_start + address_len;
    let used = address_end + 2;
    let (Some(address), Some(&[high, low])) = (
        buf.get(address_start..address_end),
        buf.get(address_end..used),
    ) else {
        return Ok(Parsed::Incomplete);
    };
    let host = match atyp {
        ATYP_IPV4 => {
            // Exactly 4 bytes by the slice above.
            let octets: [u8; 4] = address.try_into().unwrap_or_default();
            Host::Ip(IpAddr::V4(Ipv4Addr::from(octets)))
        }
        ATYP_IPV6 => {
            let octets: [u8; 16] = address.try_into().unwrap_or_default();
            Host::Ip(IpAddr::V6(Ipv6Addr::from(octets)))
        }
        _ => {
            let text = std::str::from_utf8(address)
                .map_err(|_| SocksError::BadName(String::from_utf8_lossy(address).into_owned()))?;
            // The same normal form as an HTTP CONNECT authority's host: a name that is an IP
            // literal is that address, and gets the same address checks.
            Host::parse(text).map_err(|e| SocksError::BadName(e.to_string()))?
        }
    };
    let port = u16::from_be_bytes([high, low]);
    if port == 0 {
        return Err(SocksError::ZeroPort);
    }
    Ok(Parsed::Done {
        value: Request {
            command,
            host,
            port,
        },
        used,
    })
}

/// Why the client half failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("talking to the proxy failed: {0}")]
    Io(#[from] io::Error),
    #[error("the proxy does not speak SOCKS5 (answered version {0})")]
    NotSocks(u8),
    #[error("the proxy accepts no method without authentication")]
    NoMethod,
    #[error("target name `{0}` is longer than 255 bytes")]
    NameTooLong(String),
    #[error("the proxy refused {target}: {reply}")]
    Refused { target: String, reply: String },
}

/// The client half: greets `stream` (no authentication), asks to `CONNECT` to `host:port` and
/// reads the reply. On success the stream carries the connection.
pub fn client_connect(
    stream: &mut (impl Read + Write),
    host: &Host,
    port: u16,
) -> Result<(), ClientError> {
    stream.write_all(&[VERSION, 1, NO_AUTH])?;
    let mut selection = [0_u8; 2];
    stream.read_exact(&mut selection)?;
    if selection[0] != VERSION {
        return Err(ClientError::NotSocks(selection[0]));
    }
    if selection[1] != NO_AUTH {
        return Err(ClientError::NoMethod);
    }
    let mut request = vec![VERSION, 1, 0];
    match host {
        Host::Ip(IpAddr::V4(ip)) => {
            request.push(ATYP_IPV4);
            request.extend_from_slice(&ip.octets());
        }
        Host::Ip(IpAddr::V6(ip)) => {
            request.push(ATYP_IPV6);
            request.extend_from_slice(&ip.octets());
        }
        Host::Name(name) => {
            let len =
                u8::try_from(name.len()).map_err(|_| ClientError::NameTooLong(name.clone()))?;
            request.push(ATYP_NAME);
            request.push(len);
            request.extend_from_slice(name.as_bytes());
        }
    }
    request.extend_from_slice(&port.to_be_bytes());
    stream.write_all(&request)?;
    let mut head = [0_u8; 4];
    stream.read_exact(&mut head)?;
    let [version, code, _, atyp] = head;
    if version != VERSION {
        return Err(ClientError::NotSocks(version));
    }
    let rest = match atyp {
        ATYP_IPV4 => 4 + 2,
        ATYP_IPV6 => 16 + 2,
        ATYP_NAME => {
            let mut len = [0_u8; 1];
            stream.read_exact(&mut len)?;
            usize::from(len[0]) + 2
        }
        _ => 0,
    };
    let mut bound = vec![0_u8; rest];
    if code == Reply::Succeeded.code() {
        stream.read_exact(&mut bound)?;
        return Ok(());
    }
    let reply =
        Reply::from_code(code).map_or_else(|| format!("reply code {code}"), |r| r.to_string());
    Err(ClientError::Refused {
        target: format!("{}:{port}", host.to_authority()),
        reply,
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "tests"
    )]
    use super::*;

    fn request(bytes: &[u8]) -> Result<Parsed<Request>, SocksError> {
        parse_request(bytes)
    }

    #[test]
    fn greetings() {
        assert_eq!(parse_greeting(&[]), Ok(Parsed::Incomplete));
        assert_eq!(parse_greeting(&[5]), Ok(Parsed::Incomplete));
        assert_eq!(parse_greeting(&[5, 2, 0]), Ok(Parsed::Incomplete));
        assert_eq!(
            parse_greeting(&[5, 2, 2, 0, 9]),
            Ok(Parsed::Done { value: (), used: 4 })
        );
        assert_eq!(
            parse_greeting(&[5, 1, 2]),
            Err(SocksError::NoAcceptableMethod(vec![2]))
        );
        assert_eq!(
            parse_greeting(&[5, 0]),
            Err(SocksError::NoAcceptableMethod(vec![]))
        );
        assert_eq!(parse_greeting(&[4, 1, 0]), Err(SocksError::BadVersion(4)));
        // The largest greeting: 255 methods, the accepted one last.
        let mut big = vec![5, 255];
        big.extend(std::iter::repeat_n(1, 254));
        big.push(0);
        assert_eq!(big.len(), MAX_GREETING);
        assert_eq!(
            parse_greeting(&big[..MAX_GREETING - 1]),
            Ok(Parsed::Incomplete)
        );
        assert_eq!(
            parse_greeting(&big),
            Ok(Parsed::Done {
                value: (),
                used: MAX_GREETING
            })
        );
        assert_eq!(method_selection(true), [5, 0]);
        assert_eq!(method_selection(false), [5, 0xff]);
    }

    #[test]
    fn requests_by_name_and_literal() {
        let mut by_name = vec![5, 1, 0, 3, 8];
        by_name.extend_from_slice(b"Git.Test");
        by_name.extend_from_slice(&22_u16.to_be_bytes());
        by_name.extend_from_slice(b"SSH-2.0-early");
        assert_eq!(
            request(&by_name),
            Ok(Parsed::Done {
                value: Request {
                    command: Command::Connect,
                    host: Host::Name("git.test".into()),
                    port: 22
                },
                used: 15
            })
        );
        for cut in 0..15 {
            assert_eq!(request(&by_name[..cut]), Ok(Parsed::Incomplete), "{cut}");
        }
        let v4 = [5, 1, 0, 1, 127, 0, 0, 2, 0x1f, 0x90];
        assert_eq!(
            request(&v4),
            Ok(Parsed::Done {
                value: Request {
                    command: Command::Connect,
                    host: Host::Ip("127.0.0.2".parse().unwrap()),
                    port: 8080
                },
                used: 10
            })
        );
        let mut v6 = vec![5, 2, 0, 4];
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&[0, 80]);
        let Ok(Parsed::Done { value, used: 22 }) = request(&v6) else {
            panic!("{:?}", request(&v6));
        };
        assert_eq!(value.command, Command::Bind);
        assert_eq!(value.host, Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        // A name that is an address literal is that address (as in an HTTP authority).
        let mut literal = vec![5, 3, 0, 3, 9];
        literal.extend_from_slice(b"127.0.0.1");
        literal.extend_from_slice(&[0, 53]);
        let Ok(Parsed::Done { value, .. }) = request(&literal) else {
            panic!();
        };
        assert_eq!(value.command, Command::UdpAssociate);
        assert_eq!(value.host, Host::Ip("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn request_refusals_and_their_replies() {
        let cases: [(&[u8], SocksError, Reply, RefusalCode); 7] = [
            (
                &[4, 1, 0, 1, 1, 2, 3, 4, 0, 80],
                SocksError::BadVersion(4),
                Reply::GeneralFailure,
                RefusalCode::MalformedRequest,
            ),
            (
                &[5, 9, 0, 1],
                SocksError::UnknownCommand(9),
                Reply::CommandNotSupported,
                RefusalCode::UnsupportedRequest,
            ),
            (
                &[5, 1, 1, 1],
                SocksError::BadReserved(1),
                Reply::GeneralFailure,
                RefusalCode::MalformedRequest,
            ),
            (
                &[5, 1, 0, 2],
                SocksError::UnsupportedAddressType(2),
                Reply::AddressTypeNotSupported,
                RefusalCode::UnsupportedRequest,
            ),
            (
                &[5, 1, 0, 3, 0, 0, 80],
                SocksError::BadName("empty host".into()),
                Reply::GeneralFailure,
                RefusalCode::MalformedRequest,
            ),
            (
                &[5, 1, 0, 3, 3, b'a', b'\n', b'b', 0, 80],
                SocksError::BadName(
                    "host `a\nb` has a character outside letters, digits, `-` and `_`".into(),
                ),
                Reply::GeneralFailure,
                RefusalCode::MalformedRequest,
            ),
            (
                &[5, 1, 0, 1, 1, 2, 3, 4, 0, 0],
                SocksError::ZeroPort,
                Reply::GeneralFailure,
                RefusalCode::MalformedRequest,
            ),
        ];
        for (bytes, error, reply, code) in cases {
            let got = request(bytes).unwrap_err();
            assert_eq!(got, error);
            assert_eq!(got.reply(), reply);
            let refusal = got.refusal();
            assert_eq!(refusal.code, code);
            assert!(!refusal.reason.chars().any(char::is_control), "{refusal:?}");
        }
        assert_eq!(
            SocksError::NoAcceptableMethod(vec![2]).refusal().code,
            RefusalCode::UnsupportedRequest
        );
        // The longest name (255 bytes) parses to a refusal, not past the bound.
        let mut long = vec![5, 1, 0, 3, 255];
        long.extend(std::iter::repeat_n(b'a', 255));
        long.extend_from_slice(&[0, 22]);
        assert_eq!(long.len(), MAX_REQUEST);
        assert!(matches!(request(&long), Err(SocksError::BadName(_))));
        assert_eq!(request(&long[..MAX_REQUEST - 1]), Ok(Parsed::Incomplete));
    }

    #[test]
    fn reply_codes() {
        for code in 0..=8 {
            let reply = Reply::from_code(code).unwrap();
            assert_eq!(reply.code(), code);
            assert_eq!(reply.message()[..2], [5, code]);
        }
        assert_eq!(Reply::from_code(9), None);
        for (refusal, reply) in [
            (RefusalCode::DomainNotAllowed, Reply::NotAllowedByRuleset),
            (RefusalCode::AddressNotAllowed, Reply::NotAllowedByRuleset),
            (RefusalCode::ClientNotAllowed, Reply::NotAllowedByRuleset),
            (RefusalCode::ResolutionFailed, Reply::HostUnreachable),
            (RefusalCode::UpstreamUnreachable, Reply::ConnectionRefused),
            (RefusalCode::MalformedRequest, Reply::GeneralFailure),
            (RefusalCode::TooManyConnections, Reply::GeneralFailure),
        ] {
            assert_eq!(Reply::for_refusal(refusal), reply);
        }
    }

    proptest::proptest! {
        /// Any bytes: the parsers never read past their maximum, a `Done` never claims more
        /// than it was given, and "incomplete" only below the maximum.
        #[test]
        fn parsers_are_bounded(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            match parse_greeting(&bytes) {
                Ok(Parsed::Done { used, .. }) => proptest::prop_assert!(used <= bytes.len().min(MAX_GREETING)),
                Ok(Parsed::Incomplete) => proptest::prop_assert!(bytes.len() < MAX_GREETING),
                Err(e) => proptest::prop_assert!(!e.refusal().reason.chars().any(char::is_control)),
            }
            match parse_request(&bytes) {
                Ok(Parsed::Done { used, value }) => {
                    proptest::prop_assert!(used <= bytes.len().min(MAX_REQUEST));
                    proptest::prop_assert!(value.port != 0);
                }
                Ok(Parsed::Incomplete) => proptest::prop_assert!(bytes.len() < MAX_REQUEST),
                Err(e) => proptest::prop_assert!(!e.refusal().reason.chars().any(char::is_control)),
            }
        }

        /// What the client half sends, the server half reads back.
        #[test]
        fn client_requests_round_trip(name in "[a-z][a-z0-9]{0,20}(\\.[a-z]{1,10}){1,3}", port in 1_u16..) {
            let host = Host::Name(name);
            let mut wire = Wire::default();
            wire.input.extend(&method_selection(true));
            wire.input.extend(&Reply::Succeeded.message());
            client_connect(&mut wire, &host, port).unwrap();
            proptest::prop_assert_eq!(parse_greeting(&wire.output[..3]), Ok(Parsed::Done { value: (), used: 3 }));
            let Ok(Parsed::Done { value, used }) = parse_request(&wire.output[3..]) else {
                return Err(proptest::test_runner::TestCaseError::fail("request did not parse"));
            };
            proptest::prop_assert_eq!(used, wire.output.len() - 3);
            proptest::prop_assert_eq!(value, Request { command: Command::Connect, host, port });
        }
    }

    /// A scripted peer: reads come from `input`, writes go to `output`.
    #[derive(Default)]
    struct Wire {
        input: std::collections::VecDeque<u8>,
        output: Vec<u8>,
    }

    impl Read for Wire {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Wire {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn client_reports_refusals() {
        let mut wire = Wire::default();
        wire.input.extend(&method_selection(true));
        wire.input.extend(&Reply::NotAllowedByRuleset.message());
        let error = client_connect(&mut wire, &Host::Name("denied.test".into()), 22).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the proxy refused denied.test:22: connection not allowed by ruleset"
        );
        let mut wire = Wire::default();
        wire.input.extend(b"HTTP/1.1 403");
        assert!(matches!(
            client_connect(&mut wire, &Host::Name("a.test".into()), 22),
            Err(ClientError::NotSocks(b'H'))
        ));
    }
}
