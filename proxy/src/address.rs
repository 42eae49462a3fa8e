//! Which IP addresses the proxy may connect to without an explicit IP-literal allowlist entry.
//!
//! Only globally routable unicast space is [`AddressClass::Public`]; everything else names
//! something on the host's side of the sandbox (loopback services, the LAN, the cloud metadata
//! endpoint) or nothing useful at all. Documentation, benchmarking and unallocated ranges are
//! refused too: no legitimate destination lives there, so refusing them costs nothing. IPv6 forms
//! that carry an IPv4 address (mapped, compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are
//! classified by the IPv4 address they carry, so `::ffff:127.0.0.1` is loopback.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The class of an address; every class but `Public` is refused unless an IP-literal entry
/// allows that exact address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    Public,
    Unspecified,
    /// 0.0.0.0/8 other than 0.0.0.0.
    ThisNetwork,
    Loopback,
    /// RFC 1918, IPv6 unique-local fc00::/7 and deprecated site-local fec0::/10.
    Private,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// 169.254.169.254, fd00:ec2::254, and Azure's wire server 168.63.129.16 (a public address
    /// that only means something from inside Azure).
    CloudMetadata,
    /// CGNAT 100.64/10.
    SharedAddressSpace,
    Multicast,
    Broadcast,
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18/15, 2001:2::/48 (inside 2001::/23, reported as reserved).
    Benchmarking,
    /// 240/4, 192.0.0/24, 192.88.99/24, 2001::/23 (Teredo, ORCHID, ...), 64:ff9b:1::/48, 100::/64,
    /// and IPv6 outside 2000::/3.
    Reserved,
}

impl AddressClass {
    pub fn is_public(self) -> bool {
        self == AddressClass::Public
    }

    /// A short name for messages: "loopback", "cloud metadata", ...
    pub fn name(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Unspecified => "unspecified",
            AddressClass::ThisNetwork => "this-network (0.0.0.0/8)",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local",
            AddressClass::CloudMetadata => "cloud metadata",
            AddressClass::SharedAddressSpace => "shared address space (100.64.0.0/10)",
            AddressClass::Multicast => "multicast",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Documentation => "documentation",
            AddressClass::Benchmarking => "benchmarking",
            AddressClass::Reserved => "reserved",
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Classifies an address (IPv6 forms carrying IPv4 by the IPv4 address).
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match embedded_ipv4(v6) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

/// The IPv4 address an IPv6 address carries, for IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`, not `::` or `::1`), NAT64 well-known prefix
/// (`64:ff9b::a.b.c.d`) and 6to4 (`2002:aabb:ccdd::/48`).
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let [_, _, o2, o3, o4, o5, _, _, _, _, _, _, o12, o13, o14, o15] = ip.octets();
    let tail = Ipv4Addr::new(o12, o13, o14, o15);
    match ip.segments() {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, _, _] => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        [0x2002, _, _, _, _, _, _, _] => Some(Ipv4Addr::new(o2, o3, o4, o5)),
        _ => None,
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if a == 0 {
        AddressClass::ThisNetwork
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(168, 63, 129, 16) {
        AddressClass::CloudMetadata
    } else if ip.is_private() {
        AddressClass::Private
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if a == 100 && (64..128).contains(&b) {
        AddressClass::SharedAddressSpace
    } else if ip.is_documentation() {
        AddressClass::Documentation
    } else if a == 198 && (b == 18 || b == 19) {
        AddressClass::Benchmarking
    } else if ip.is_broadcast() {
        AddressClass::Broadcast
    } else if ip.is_multicast() {
        AddressClass::Multicast
    } else if a >= 240 || (a == 192 && b == 0 && c == 0) || (a == 192 && b == 88 && c == 99) {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let [s0, s1, ..] = ip.segments();
    if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        AddressClass::CloudMetadata
    } else if s0 & 0xfe00 == 0xfc00 || s0 & 0xffc0 == 0xfec0 {
        AddressClass::Private
    } else if s0 & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if s0 & 0xff00 == 0xff00 {
        AddressClass::Multicast
    } else if (s0 == 0x2001 && s1 == 0xdb8) || (s0 == 0x3fff && s1 & 0xf000 == 0) {
        AddressClass::Documentation
    } else if s0 == 0x2001 && s1 < 0x200 {
        // 2001::/23: IETF protocol assignments (Teredo, benchmarking, ORCHID, AS112, ...).
        AddressClass::Reserved
    } else if s0 & 0xe000 != 0x2000 {
        // Outside global unicast 2000::/3: 100::/64 discard, 64:ff9b:1::/48 local NAT64,
        // unallocated space.
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn class(text: &str) -> AddressClass {
        classify(text.parse().unwrap())
    }

    #[test]
    fn refused_classes() {
        use AddressClass::*;
        for (addr, want) in [
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", ThisNetwork),
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("10.1.2.3", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("169.254.1.1", LinkLocal),
            ("169.254.169.254", CloudMetadata),
            ("168.63.129.16", CloudMetadata),
            ("100.64.0.1", SharedAddressSpace),
            ("100.127.255.255", SharedAddressSpace),
            ("224.0.0.1", Multicast),
            ("255.255.255.255", Broadcast),
            ("240.0.0.1", Reserved),
            ("192.0.0.170", Reserved),
            ("192.0.2.1", Documentation),
            ("198.51.100.1", Documentation),
            ("203.0.113.1", Documentation),
            ("198.18.0.1", Benchmarking),
            ("::", Unspecified),
            ("::1", Loopback),
            ("fc00::1", Private),
            ("fd12::1", Private),
            ("fec0::1", Private),
            ("fe80::1", LinkLocal),
            ("fd00:ec2::254", CloudMetadata),
            ("ff02::1", Multicast),
            ("2001:db8::1", Documentation),
            ("2001:0::1", Reserved),
            ("64:ff9b:1::1", Reserved),
            ("100::1", Reserved),
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:169.254.169.254", CloudMetadata),
            ("::127.0.0.1", Loopback),
            ("::10.0.0.1", Private),
            ("64:ff9b::7f00:1", Loopback),
            ("64:ff9b::a9fe:a9fe", CloudMetadata),
            ("2002:7f00:0001::1", Loopback),
            ("2002:c0a8:0101::1", Private),
        ] {
            assert_eq!(class(addr), want, "{addr}");
            assert!(!want.is_public());
        }
    }

    #[test]
    fn public_addresses() {
        for addr in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "169.255.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
        ] {
            assert_eq!(class(addr), AddressClass::Public, "{addr}");
        }
    }
}
