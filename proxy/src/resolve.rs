//! Name resolution for the proxy, and the address check that follows it.
//!
//! The proxy resolves names itself (the sandbox has no DNS) and connects only to the addresses it
//! checked: a second lookup at connect time could return a different answer (DNS rebinding).
//! Overrides come first, so tests and policies can pin names without the machine's DNS or
//! `/etc/hosts`; with `overrides_only` nothing else is ever asked.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use crate::address;
use crate::allowlist::Allowlist;
use crate::host::{Host, HostError};
use crate::record::{Refusal, RefusalCode};

/// Why a hosts-style override file was refused.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error("cannot read hosts file `{path}`: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("hosts line {line}: `{text}` is not an IP address")]
    BadAddress { line: usize, text: String },
    #[error("hosts line {line}: address without a name")]
    NoName { line: usize },
    #[error("hosts line {line}: {source}")]
    BadName { line: usize, source: HostError },
    #[error("override name must be a DNS name, not an IP literal: `{0}`")]
    LiteralName(String),
}

/// Resolves names: overrides first, then (unless `overrides_only`) the system resolver on a
/// helper thread bounded by a timeout.
#[derive(Debug, Clone)]
pub struct Resolver {
    overrides: BTreeMap<String, Vec<IpAddr>>,
    overrides_only: bool,
    timeout: Duration,
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver::system()
    }
}

impl Resolver {
    /// Overrides (none yet), then the system resolver with a 5 s timeout.
    pub fn system() -> Resolver {
        Resolver {
            overrides: BTreeMap::new(),
            overrides_only: false,
            timeout: Duration::from_secs(5),
        }
    }

    /// Overrides only: a name without an override fails to resolve. Tests use this so nothing
    /// ever queries real DNS.
    pub fn overrides_only() -> Resolver {
        Resolver {
            overrides_only: true,
            ..Resolver::system()
        }
    }

    /// The bound on one system lookup.
    pub fn with_timeout(mut self, timeout: Duration) -> Resolver {
        self.timeout = timeout;
        self
    }

    pub fn is_overrides_only(&self) -> bool {
        self.overrides_only
    }

    /// Adds addresses for `name` (appending to any already there).
    pub fn add_override(
        &mut self,
        name: &str,
        addrs: impl IntoIterator<Item = IpAddr>,
    ) -> Result<(), HostsError> {
        let name =
            match Host::parse(name).map_err(|source| HostsError::BadName { line: 0, source })? {
                Host::Name(name) => name,
                Host::Ip(_) => return Err(HostsError::LiteralName(name.to_owned())),
            };
        let entry = self.overrides.entry(name).or_default();
        for addr in addrs {
            if !entry.contains(&addr) {
                entry.push(addr);
            }
        }
        Ok(())
    }

    /// Adds the overrides of a hosts-style text: `ADDR NAME [NAME...]` per line, `#` comments.
    pub fn add_hosts_text(&mut self, text: &str) -> Result<(), HostsError> {
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or("");
            let mut fields = content.split_whitespace();
            let Some(addr_text) = fields.next() else {
                continue;
            };
            let addr = match Host::parse(addr_text) {
                Ok(Host::Ip(ip)) => ip,
                _ => {
                    return Err(HostsError::BadAddress {
                        line,
                        text: addr_text.to_owned(),
                    });
                }
            };
            let mut any = false;
            for name in fields {
                any = true;
                match Host::parse(name).map_err(|source| HostsError::BadName { line, source })? {
                    Host::Name(name) => {
                        let entry = self.overrides.entry(name).or_default();
                        if !entry.contains(&addr) {
                            entry.push(addr);
                        }
                    }
                    Host::Ip(_) => return Err(HostsError::LiteralName(name.to_owned())),
                }
            }
            if !any {
                return Err(HostsError::NoName { line });
            }
        }
        Ok(())
    }

    /// [`Resolver::add_hosts_text`] for a file.
    pub fn add_hosts_file(&mut self, path: &Path) -> Result<(), HostsError> {
        let text = std::fs::read_to_string(path).map_err(|source| HostsError::Read {
            path: path.display().to_string(),
            source,
        })?;
        self.add_hosts_text(&text)
    }

    /// The addresses of `host` (unchecked): the literal itself, the override, or the system
    /// resolver's answer in its order, deduplicated.
    pub fn lookup(&self, host: &Host, port: u16) -> Result<Vec<IpAddr>, Refusal> {
        let name = match host {
            Host::Ip(ip) => return Ok(vec![*ip]),
            Host::Name(name) => name,
        };
        if let Some(addrs) = self.overrides.get(name) {
            return Ok(addrs.clone());
        }
        if self.overrides_only {
            return Err(Refusal::new(
                RefusalCode::ResolutionFailed,
                format!("{name}:{port}: no address for this name (the proxy uses overrides only)"),
            ));
        }
        let (tx, rx) = mpsc::channel();
        let query = (name.clone(), port);
        // getaddrinfo cannot be cancelled; a lookup that outlives the timeout finishes on its own
        // thread and its answer is dropped.
        let spawned = std::thread::Builder::new()
            .name("palisade-proxy-resolve".into())
            .spawn(move || {
                let answer = query
                    .to_socket_addrs()
                    .map(|it| it.map(|sa| sa.ip()).collect::<Vec<_>>());
                let _ = tx.send(answer);
            });
        if let Err(e) = spawned {
            return Err(Refusal::new(
                RefusalCode::ResolutionFailed,
                format!("{name}:{port}: cannot start a lookup: {e}"),
            ));
        }
        match rx.recv_timeout(self.timeout) {
            Ok(Ok(found)) => {
                let mut addrs: Vec<IpAddr> = Vec::with_capacity(found.len());
                for ip in found {
                    if !addrs.contains(&ip) {
                        addrs.push(ip);
                    }
                }
                if addrs.is_empty() {
                    Err(Refusal::new(
                        RefusalCode::ResolutionFailed,
                        format!("{name}:{port}: the name has no addresses"),
                    ))
                } else {
                    Ok(addrs)
                }
            }
            Ok(Err(e)) => Err(Refusal::new(
                RefusalCode::ResolutionFailed,
                format!("{name}:{port}: lookup failed: {e}"),
            )),
            Err(_) => Err(Refusal::new(
                RefusalCode::ResolutionFailed,
                format!(
                    "{name}:{port}: lookup timed out after {} ms",
                    self.timeout.as_millis()
                ),
            )),
        }
    }

    /// Resolves `host` and checks every address: if any one is not public and not allowed by an
    /// IP-literal entry, the whole name is refused (a name that mixes a public and a private
    /// address is a rebinding attempt or a misconfiguration either way). Returns the socket
    /// addresses to connect to, in order.
    pub fn resolve_checked(
        &self,
        host: &Host,
        port: u16,
        allowlist: &Allowlist,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        let addrs = self.lookup(host, port)?;
        for ip in &addrs {
            let class = address::classify(*ip);
            if !class.is_public() && !allowlist.permits_address(*ip, port) {
                let via = match host {
                    Host::Ip(_) => String::new(),
                    Host::Name(_) => " (resolved)".to_owned(),
                };
                return Err(Refusal::new(
                    RefusalCode::AddressNotAllowed,
                    format!(
                        "{}:{port}: address {ip}{via} is {class} and no IP-literal allowlist entry allows it",
                        host.to_authority()
                    ),
                ));
            }
        }
        Ok(addrs
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn name(n: &str) -> Host {
        Host::parse(n).unwrap()
    }

    #[test]
    fn hosts_text_and_overrides() {
        let mut r = Resolver::overrides_only();
        r.add_hosts_text("# comment\n127.0.0.2 a.test B.test. # trailing\n\n::1 a.test\n")
            .unwrap();
        r.add_override("c.test", ["10.0.0.1".parse().unwrap()])
            .unwrap();
        assert_eq!(
            r.lookup(&name("a.test"), 1).unwrap(),
            vec![
                "127.0.0.2".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert_eq!(r.lookup(&name("b.test"), 1).unwrap().len(), 1);
        assert_eq!(
            r.lookup(&name("nope.test"), 1).unwrap_err().code,
            RefusalCode::ResolutionFailed
        );
        assert!(r.add_hosts_text("notanip a.test\n").is_err());
        assert!(r.add_hosts_text("127.0.0.1\n").is_err());
        assert!(r.add_hosts_text("127.0.0.1 bad..name\n").is_err());
        assert!(r.add_hosts_text("127.0.0.1 10.0.0.1\n").is_err());
    }

    #[test]
    fn any_refused_address_refuses_the_name() {
        let mut r = Resolver::overrides_only();
        r.add_override(
            "mixed.test",
            [
                "93.184.216.34".parse().unwrap(),
                "10.0.0.1".parse().unwrap(),
            ],
        )
        .unwrap();
        r.add_override("public.test", ["93.184.216.34".parse().unwrap()])
            .unwrap();
        let all = Allowlist::parse(&["*".to_string()]).unwrap();
        assert_eq!(
            r.resolve_checked(&name("mixed.test"), 443, &all)
                .unwrap_err()
                .code,
            RefusalCode::AddressNotAllowed
        );
        assert_eq!(
            r.resolve_checked(&name("public.test"), 443, &all).unwrap(),
            vec!["93.184.216.34:443".parse().unwrap()]
        );
        let with_ip = Allowlist::parse(&["*".to_string(), "10.0.0.1:443".to_string()]).unwrap();
        assert_eq!(
            r.resolve_checked(&name("mixed.test"), 443, &with_ip)
                .unwrap()
                .len(),
            2
        );
        assert!(
            r.resolve_checked(&name("mixed.test"), 80, &with_ip)
                .is_err()
        );
    }
}
