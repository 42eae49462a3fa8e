//! The domain allowlist: which `host:port` a sandbox may ask the proxy for.
//!
//! Matching is on the *requested* name only; whether the addresses it resolves to may be used is
//! [`crate::address`]'s question, except that an IP-literal entry also vouches for its address
//! there (see [`Allowlist::permits_address`]).

use std::fmt;
use std::net::IpAddr;

use crate::host::{self, Host, HostError};

/// What an entry's host part matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// `*`: every host, names and IP literals (addresses are still checked).
    Any,
    /// `github.com`: exactly that name.
    Exact(String),
    /// `*.github.com` (stored as `github.com`): strict subdomains only, at any depth.
    Subdomains(String),
    /// `127.0.0.2` or `[::1]`: that address as a request target, and that address as a resolution
    /// result even when it is loopback or private.
    Ip(IpAddr),
}

/// One allowlist entry: a pattern and an optional port (`None` = any port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub pattern: Pattern,
    pub port: Option<u16>,
}

/// Why an allowlist entry was refused. The index is the entry's position in the input list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error("allowlist entry {index} `{entry}`: {source}")]
    BadHost {
        index: usize,
        entry: String,
        source: HostError,
    },
    #[error("allowlist entry {index} `{entry}`: port must be a number from 1 to 65535")]
    BadPort { index: usize, entry: String },
    #[error("allowlist entry {index} `{entry}`: `*` may only stand alone or as a leading `*.`")]
    BadWildcard { index: usize, entry: String },
}

/// A parsed allowlist. Empty = deny everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<Entry>,
}

impl Allowlist {
    /// Parses entries as the engine emits them (`*`, `github.com`, `*.github.com`, `127.0.0.2`,
    /// `[::1]`, each with an optional `:port`). Entries are re-validated: the proxy is the
    /// enforcement point and must not trust that its input was checked.
    pub fn parse(entries: &[String]) -> Result<Allowlist, AllowlistError> {
        let entries = entries
            .iter()
            .enumerate()
            .map(|(index, text)| parse_entry(index, text))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Allowlist { entries })
    }

    /// The allowlist that refuses everything.
    pub fn deny_all() -> Allowlist {
        Allowlist::default()
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The first entry allowing `host` (any case, optional trailing dot, `[v6]` or bare) on
    /// `port`, or `None` (also for hosts that do not parse).
    pub fn matches(&self, host: &str, port: u16) -> Option<&Entry> {
        let host = Host::parse(host).ok()?;
        self.matches_host(&host, port)
    }

    /// [`Allowlist::matches`] for an already parsed host.
    pub fn matches_host(&self, host: &Host, port: u16) -> Option<&Entry> {
        self.entries.iter().find(|e| e.matches(host, port))
    }

    /// Whether an IP-literal entry names `ip` (and `port`, if the entry has one). Such an address
    /// is used even when it is loopback, private, link-local or metadata: the policy said so.
    pub fn permits_address(&self, ip: IpAddr, port: u16) -> bool {
        self.entries
            .iter()
            .any(|e| e.pattern == Pattern::Ip(ip) && e.port.is_none_or(|p| p == port))
    }
}

impl Entry {
    /// Whether this entry allows `host` on `port`.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.pattern, host) {
            (Pattern::Any, _) => true,
            (Pattern::Exact(name), Host::Name(h)) => name == h,
            (Pattern::Subdomains(suffix), Host::Name(h)) => h
                .strip_suffix(suffix.as_str())
                .and_then(|prefix| prefix.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty()),
            (Pattern::Ip(ip), Host::Ip(h)) => ip == h,
            _ => false,
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Pattern::Any => f.write_str("*")?,
            Pattern::Exact(name) => f.write_str(name)?,
            Pattern::Subdomains(suffix) => write!(f, "*.{suffix}")?,
            Pattern::Ip(ip) => f.write_str(&Host::Ip(*ip).to_authority())?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

fn parse_entry(index: usize, text: &str) -> Result<Entry, AllowlistError> {
    let bad_host = |source| AllowlistError::BadHost {
        index,
        entry: text.to_owned(),
        source,
    };
    let (host_text, port_text) = host::split_host_port(text);
    let port = match port_text {
        None => None,
        Some(p) => Some(host::parse_port(p).ok_or_else(|| AllowlistError::BadPort {
            index,
            entry: text.to_owned(),
        })?),
    };
    let pattern = if host_text == "*" {
        Pattern::Any
    } else if let Some(suffix) = host_text.strip_prefix("*.") {
        let suffix = suffix.strip_suffix('.').unwrap_or(suffix);
        if suffix.contains('*') {
            return Err(AllowlistError::BadWildcard {
                index,
                entry: text.to_owned(),
            });
        }
        Pattern::Subdomains(host::validate_name(suffix).map_err(bad_host)?)
    } else if host_text.contains('*') {
        return Err(AllowlistError::BadWildcard {
            index,
            entry: text.to_owned(),
        });
    } else {
        match Host::parse(host_text).map_err(bad_host)? {
            Host::Name(name) => Pattern::Exact(name),
            Host::Ip(ip) => Pattern::Ip(ip),
        }
    };
    Ok(Entry { pattern, port })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn empty_denies_everything() {
        let l = Allowlist::deny_all();
        assert!(l.matches("github.com", 443).is_none());
        assert!(l.matches("127.0.0.1", 80).is_none());
    }

    #[test]
    fn star_allows_everything_but_vouches_for_no_address() {
        let l = list(&["*"]);
        assert!(l.matches("anything.example", 1).is_some());
        assert!(l.matches("[::1]", 1).is_some());
        assert!(!l.permits_address("127.0.0.1".parse().unwrap(), 80));
    }

    #[test]
    fn exact_names_fold_case_and_trailing_dot() {
        let l = list(&["github.com"]);
        assert!(l.matches("GitHub.com.", 443).is_some());
        assert!(l.matches("api.github.com", 443).is_none());
        assert!(l.matches("github.com.evil", 443).is_none());
    }

    #[test]
    fn wildcard_matches_strict_subdomains_only() {
        let l = list(&["*.github.com"]);
        assert!(l.matches("a.github.com", 443).is_some());
        assert!(l.matches("a.b.github.com", 443).is_some());
        assert!(l.matches("github.com", 443).is_none());
        assert!(l.matches("evilgithub.com", 443).is_none());
        assert!(l.matches(".github.com", 443).is_none());
        assert!(l.matches("github.com.evil.com", 443).is_none());
    }

    #[test]
    fn ports_narrow_entries() {
        let l = list(&["github.com:443", "[::1]:8080", "127.0.0.2:22"]);
        assert!(l.matches("github.com", 443).is_some());
        assert!(l.matches("github.com", 80).is_none());
        assert!(l.matches("[::1]", 8080).is_some());
        assert!(l.matches("::1", 8081).is_none());
        assert!(l.permits_address("127.0.0.2".parse().unwrap(), 22));
        assert!(!l.permits_address("127.0.0.2".parse().unwrap(), 23));
        assert_eq!(l.entries()[1].to_string(), "[::1]:8080");
    }

    #[test]
    fn ip_literal_entries_match_literals_not_names() {
        let l = list(&["127.0.0.2"]);
        assert!(l.matches("127.0.0.2", 9).is_some());
        assert!(l.matches("127.0.0.3", 9).is_none());
        assert!(l.permits_address("127.0.0.2".parse().unwrap(), 9));
        assert!(!l.permits_address("127.0.0.1".parse().unwrap(), 9));
    }

    #[test]
    fn bad_entries_are_refused_with_their_index() {
        for bad in [
            "",
            "github.com:0",
            "github.com:99999",
            "github.com:",
            "git*hub.com",
            "*.*.com",
            "**",
            "*github.com",
            "a..b",
            "[::1",
            "http://github.com",
            "github.com/path",
        ] {
            let err = Allowlist::parse(&["ok.com".to_string(), bad.to_string()]);
            match err {
                Err(
                    AllowlistError::BadHost { index, .. }
                    | AllowlistError::BadPort { index, .. }
                    | AllowlistError::BadWildcard { index, .. },
                ) => assert_eq!(index, 1, "{bad:?}"),
                Ok(_) => panic!("{bad:?} should be refused"),
            }
        }
    }
}
