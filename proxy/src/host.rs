//! Host names and IP literals as the proxy compares them: one normal form, so the allowlist, the
//! resolver overrides and request targets cannot disagree about what a name is.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// A request or allowlist host in normal form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Host {
    /// A DNS name: lower-case ASCII, no trailing dot, LDH labels (plus `_`).
    Name(String),
    /// An IP literal (`127.0.0.2`, `::1`; brackets are syntax, not part of the address).
    Ip(IpAddr),
}

/// Why a host is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("empty host")]
    Empty,
    #[error("host `{0}` is longer than 253 characters")]
    TooLong(String),
    #[error("host `{0}` has an empty label")]
    EmptyLabel(String),
    #[error("host `{0}` has a label longer than 63 characters")]
    LabelTooLong(String),
    #[error("host `{0}` has a character outside letters, digits, `-` and `_`")]
    BadCharacter(String),
    #[error("host `{0}` has a label starting or ending with `-`")]
    BadHyphen(String),
    // Resolvers read `2130706433` or `0x7f.1` as IPv4 addresses; the URL standard treats a
    // numeric last label as an IPv4 literal too. Refusing them keeps "name" and "address" apart.
    #[error("host `{0}` ends in a numeric label but is not a valid IPv4 address")]
    NumericName(String),
    #[error("host `{0}` is not a valid bracketed IPv6 address")]
    BadIpv6(String),
}

impl Host {
    /// Parses a host as it appears in a request target or allowlist entry, without a port:
    /// `github.com`, `GitHub.COM.`, `127.0.0.2`, `[::1]` or a bare `::1`. Case is folded and one
    /// trailing dot is stripped.
    pub fn parse(text: &str) -> Result<Host, HostError> {
        if text.is_empty() {
            return Err(HostError::Empty);
        }
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| HostError::BadIpv6(text.to_owned()))?;
            // Zone identifiers (`%eth0`) fail to parse here, on purpose: they name host interfaces.
            return inner
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(IpAddr::V6(ip)))
                .map_err(|_| HostError::BadIpv6(text.to_owned()));
        }
        if text.contains(':') {
            return text
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(IpAddr::V6(ip)))
                .map_err(|_| HostError::BadIpv6(text.to_owned()));
        }
        let name = text.strip_suffix('.').unwrap_or(text);
        if let Ok(ip) = name.parse::<std::net::Ipv4Addr>() {
            return Ok(Host::Ip(IpAddr::V4(ip)));
        }
        validate_name(name).map(Host::Name)
    }

    /// The host as written in an authority: names as-is, IPv6 in brackets.
    pub fn to_authority(&self) -> String {
        match self {
            Host::Name(name) => name.clone(),
            Host::Ip(IpAddr::V4(ip)) => ip.to_string(),
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_authority())
    }
}

/// Validates a DNS name (already stripped of one trailing dot) and returns it lower-cased.
pub(crate) fn validate_name(name: &str) -> Result<String, HostError> {
    if name.is_empty() {
        return Err(HostError::Empty);
    }
    let lower = name.to_ascii_lowercase();
    if lower.len() > 253 {
        return Err(HostError::TooLong(lower));
    }
    let mut last_numeric = false;
    for label in lower.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel(lower));
        }
        if label.len() > 63 {
            return Err(HostError::LabelTooLong(lower));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(HostError::BadCharacter(lower));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(HostError::BadHyphen(lower));
        }
        last_numeric = label.bytes().all(|b| b.is_ascii_digit())
            || (label.starts_with("0x") && label.bytes().skip(2).all(|b| b.is_ascii_hexdigit()));
    }
    if last_numeric {
        return Err(HostError::NumericName(lower));
    }
    Ok(lower)
}

/// Splits `host[:port]` (host possibly `[v6]`) into the host text and the optional port text.
/// A bare IPv6 address (two or more colons, no brackets) has no port.
pub(crate) fn split_host_port(text: &str) -> (&str, Option<&str>) {
    if text.starts_with('[') {
        if let Some(end) = text.find(']') {
            let (host, rest) = text.split_at(end + 1);
            if rest.is_empty() {
                return (host, None);
            }
            if let Some(port) = rest.strip_prefix(':') {
                return (host, Some(port));
            }
        }
        // Malformed: handed back whole so that `Host::parse` refuses it.
        return (text, None);
    }
    if text.matches(':').count() >= 2 {
        return (text, None);
    }
    match text.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (text, None),
    }
}

/// Parses a decimal port `1..=65535` (digits only: no sign, no spaces).
pub(crate) fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|p| *p != 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_normalised() {
        assert_eq!(
            Host::parse("GitHub.COM.").unwrap(),
            Host::Name("github.com".into())
        );
        assert_eq!(
            Host::parse("[::1]").unwrap(),
            Host::Ip("::1".parse().unwrap())
        );
        assert_eq!(
            Host::parse("::1").unwrap(),
            Host::Ip("::1".parse().unwrap())
        );
        assert_eq!(
            Host::parse("127.0.0.2").unwrap(),
            Host::Ip("127.0.0.2".parse().unwrap())
        );
    }

    #[test]
    fn ambiguous_or_bad_names_are_refused() {
        for bad in [
            "",
            "a..b",
            "-a.com",
            "a-.com",
            "a b.com",
            "é.com",
            "2130706433",
            "0x7f.1",
            "1.2.3",
            "0127.0.0.1",
            "[fe80::1%eth0]",
            "[::1",
            "a.com%00",
            "evil.com/",
            ".",
        ] {
            assert!(Host::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn host_port_split() {
        assert_eq!(split_host_port("a.com:443"), ("a.com", Some("443")));
        assert_eq!(split_host_port("a.com"), ("a.com", None));
        assert_eq!(split_host_port("[::1]:80"), ("[::1]", Some("80")));
        assert_eq!(split_host_port("[::1]"), ("[::1]", None));
        assert_eq!(split_host_port("::1"), ("::1", None));
        assert_eq!(parse_port("0"), None);
        assert_eq!(parse_port("+80"), None);
        assert_eq!(parse_port("65536"), None);
        assert_eq!(parse_port("8080"), Some(8080));
    }
}
