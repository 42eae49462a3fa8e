//! `allowedDomains` entries: parsing into a canonical form, and the narrowing rule.
//!
//! An entry is `*` (everything), an exact host name (`github.com`), a wildcard (`*.github.com`,
//! which matches names below the suffix but neither the bare suffix nor look-alikes such as
//! `evilgithub.com`), or an IP literal (`127.0.0.2`, `[::1]`), each with an optional `:port`.
//! An IP literal is how a policy explicitly allows an address the filtering proxy would
//! otherwise refuse (loopback, private, link-local, metadata): names never unlock such addresses
//! on their own, so a DNS answer cannot point an allowed name at the host's own services.
//!
//! Why the engine canonicalises entries (lower case, no trailing dot, IPv6 in its compressed
//! form): the effective list is recorded in the decision and compared by the narrowing rule, so
//! two spellings of one entry must be one entry.

use core::net::{IpAddr, Ipv6Addr};

/// The most entries a list may hold (policy or command line).
pub(crate) const MAX_ENTRIES: usize = 128;

/// The longest entry accepted, in bytes (a 253-byte name, `*.`, `:65535`).
const MAX_ENTRY_BYTES: usize = 262;

/// The host part of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// `*`: every host.
    Any,
    /// One host name, lower case, without a trailing dot.
    Exact(String),
    /// `*.suffix`: names strictly below `suffix`.
    Below(String),
    /// One address.
    Ip(IpAddr),
}

/// One parsed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DomainEntry {
    host: HostPattern,
    /// `None`: any port.
    port: Option<u16>,
}

impl DomainEntry {
    /// Parses one entry; the error is a message for the entry's field path.
    pub(crate) fn parse(raw: &str) -> Result<DomainEntry, String> {
        if raw.is_empty() {
            return Err("an entry must not be empty".into());
        }
        if raw.len() > MAX_ENTRY_BYTES {
            return Err(format!(
                "is {} bytes long; at most {MAX_ENTRY_BYTES}",
                raw.len()
            ));
        }
        if !raw.is_ascii() {
            return Err(
                "contains non-ASCII characters; write internationalised names in their \
                 `xn--` (punycode) form"
                    .into(),
            );
        }
        if raw
            .chars()
            .any(|ch| ch.is_ascii_whitespace() || ch.is_ascii_control())
        {
            return Err("contains whitespace or control characters".into());
        }
        if raw.contains("://") || raw.contains('/') || raw.contains('@') {
            return Err(
                "is not a host name: write `host`, `*.suffix` or `host:port`, without a scheme, \
                 path or user"
                    .into(),
            );
        }
        let (host, port) = split_port(raw)?;
        Ok(DomainEntry {
            host: parse_host(host)?,
            port,
        })
    }

    /// The canonical spelling recorded in decisions.
    pub(crate) fn canonical(&self) -> String {
        let host = match &self.host {
            HostPattern::Any => String::from("*"),
            HostPattern::Exact(name) => name.clone(),
            HostPattern::Below(suffix) => format!("*.{suffix}"),
            HostPattern::Ip(IpAddr::V4(v4)) => v4.to_string(),
            HostPattern::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
        };
        match self.port {
            Some(port) => format!("{host}:{port}"),
            None => host,
        }
    }

    /// Whether this is the bare `*` (every host, every port).
    pub(crate) fn is_everything(&self) -> bool {
        self.host == HostPattern::Any && self.port.is_none()
    }

    /// Whether every connection `narrower` allows is also allowed by `self`.
    pub(crate) fn covers(&self, narrower: &DomainEntry) -> bool {
        let port_ok = match (self.port, narrower.port) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        let host_ok = match (&self.host, &narrower.host) {
            (HostPattern::Any, _) => true,
            (_, HostPattern::Any) => false,
            (HostPattern::Exact(a), HostPattern::Exact(b)) => a == b,
            (HostPattern::Below(suffix), HostPattern::Exact(name)) => is_below(name, suffix),
            (HostPattern::Below(suffix), HostPattern::Below(other)) => {
                other == suffix || is_below(other, suffix)
            }
            (HostPattern::Ip(a), HostPattern::Ip(b)) => a == b,
            _ => false,
        };
        port_ok && host_ok
    }
}

/// `name` is strictly below `suffix` (`a.github.com` below `github.com`; not `evilgithub.com`).
fn is_below(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name
            .as_bytes()
            .get(name.len() - suffix.len() - 1)
            .is_some_and(|&b| b == b'.')
}

/// Splits an optional `:port` off; `[v6]` keeps its colons.
fn split_port(raw: &str) -> Result<(&str, Option<u16>), String> {
    if raw.starts_with('[') {
        let Some(close) = raw.find(']') else {
            return Err("has `[` without a closing `]`".into());
        };
        let host = raw.get(..=close).unwrap_or(raw);
        let after = raw.get(close + 1..).unwrap_or("");
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(parse_port(port)?))),
                None => Err("has text after `]` that is not `:port`".into()),
            },
        };
    }
    match raw.rsplit_once(':') {
        None => Ok((raw, None)),
        Some((host, _)) if host.contains(':') => {
            Err("looks like an IPv6 address; write it in brackets (`[::1]`, `[::1]:443`)".into())
        }
        Some((host, port)) => Ok((host, Some(parse_port(port)?))),
    }
}

fn parse_port(text: &str) -> Result<u16, String> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "has port `{text}`; a port is a number from 1 to 65535"
        ));
    }
    match text.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!(
            "has port `{text}`; a port is a number from 1 to 65535"
        )),
    }
}

fn parse_host(host: &str) -> Result<HostPattern, String> {
    if host == "*" {
        return Ok(HostPattern::Any);
    }
    if let Some(inside) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return match inside.parse::<Ipv6Addr>() {
            Ok(v6) => Ok(HostPattern::Ip(IpAddr::V6(v6))),
            Err(_) => Err(format!("`{inside}` in brackets is not an IPv6 address")),
        };
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(HostPattern::Ip(ip));
    }
    let lowered = host.to_ascii_lowercase();
    let name = lowered.strip_suffix('.').unwrap_or(&lowered);
    if let Some(suffix) = name.strip_prefix("*.") {
        check_name(suffix)?;
        if !suffix.contains('.') {
            return Err(format!(
                "wildcard `*.{suffix}` covers a whole top-level domain; name at least two \
                 labels (`*.example.com`)"
            ));
        }
        return Ok(HostPattern::Below(suffix.to_owned()));
    }
    if name.contains('*') {
        return Err("a wildcard may only be a leading `*.` (`*.example.com`) or `*` alone".into());
    }
    check_name(name)?;
    Ok(HostPattern::Exact(name.to_owned()))
}

/// A DNS host name: 1–253 bytes of labels of 1–63 letters, digits, `-` or `_`, no label
/// starting or ending with `-`, and not all-numeric (which would read as an address).
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err("a host name is 1 to 253 characters long".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "`{name}` has an empty label or one longer than 63 characters"
            ));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "`{name}` may only contain letters, digits, `-`, `_` and dots"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("`{name}` has a label starting or ending with `-`"));
        }
    }
    // Resolvers and URL parsers read a numeric last label (`1.2.3`, `a.0x7f`… `a.123`) as part of
    // an IPv4 address; the proxy refuses such names, so the policy does too.
    let last = name.rsplit('.').next().unwrap_or(name);
    let hex = last
        .strip_prefix("0x")
        .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()));
    if hex || last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{name}` is neither a host name nor a complete IPv4 address"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    fn canon(raw: &str) -> String {
        DomainEntry::parse(raw).unwrap().canonical()
    }

    fn entry(raw: &str) -> DomainEntry {
        DomainEntry::parse(raw).unwrap()
    }

    #[test]
    fn canonical_forms() {
        assert_eq!(canon("GitHub.COM."), "github.com");
        assert_eq!(canon("*.GitHub.com"), "*.github.com");
        assert_eq!(canon("crates.io:443"), "crates.io:443");
        assert_eq!(canon("127.0.0.2"), "127.0.0.2");
        assert_eq!(canon("[0:0::1]:8080"), "[::1]:8080");
        assert_eq!(canon("[::1]"), "[::1]");
        assert_eq!(canon("*"), "*");
        assert_eq!(canon("*:443"), "*:443");
        assert_eq!(canon("localhost"), "localhost");
    }

    #[test]
    fn bad_entries_say_why() {
        for (raw, needle) in [
            ("", "empty"),
            ("https://github.com", "scheme"),
            ("github.com/x", "scheme"),
            ("user@github.com", "scheme"),
            ("git hub.com", "whitespace"),
            ("gïthub.com", "punycode"),
            ("github.com:0", "port"),
            ("github.com:65536", "port"),
            ("github.com:", "port"),
            ("github.com:+1", "port"),
            ("::1", "brackets"),
            ("[::1", "closing"),
            ("[::1]x", "after"),
            ("[github.com]", "IPv6"),
            ("*.com", "top-level"),
            ("a.*.com", "wildcard"),
            ("*github.com", "wildcard"),
            ("**.github.com", "wildcard"),
            ("-a.com", "starting or ending"),
            ("a..com", "empty label"),
            ("1.2.3", "neither"),
            ("a.123", "neither"),
            ("a.0x7f", "neither"),
            ("a!.com", "letters"),
        ] {
            let error = DomainEntry::parse(raw).unwrap_err();
            assert!(error.contains(needle), "{raw:?}: {error}");
        }
        let long = format!("{}.com", "a".repeat(300));
        assert!(DomainEntry::parse(&long).is_err());
    }

    #[test]
    fn wildcards_do_not_cover_the_suffix_or_look_alikes() {
        let wild = entry("*.github.com");
        assert!(wild.covers(&entry("api.github.com")));
        assert!(wild.covers(&entry("a.b.github.com:443")));
        assert!(wild.covers(&entry("*.api.github.com")));
        assert!(wild.covers(&entry("*.github.com")));
        assert!(!wild.covers(&entry("github.com")));
        assert!(!wild.covers(&entry("evilgithub.com")));
        assert!(!wild.covers(&entry("github.com.evil.org")));
        assert!(!wild.covers(&entry("*")));
    }

    #[test]
    fn ports_and_addresses_narrow_exactly() {
        assert!(entry("github.com").covers(&entry("github.com:443")));
        assert!(!entry("github.com:443").covers(&entry("github.com")));
        assert!(!entry("github.com:443").covers(&entry("github.com:80")));
        assert!(entry("*").covers(&entry("[::1]:1")));
        assert!(entry("127.0.0.2").covers(&entry("127.0.0.2:80")));
        assert!(!entry("127.0.0.2").covers(&entry("127.0.0.3")));
        assert!(!entry("*.example.com").covers(&entry("127.0.0.2")));
        assert!(!entry("*:443").covers(&entry("*")));
        assert!(entry("*").is_everything());
        assert!(!entry("*:443").is_everything());
    }
}
