//! Who is asking: CIDR lists, IPv4-mapped IPv6 normalisation, and the client
//! address behind trusted proxies (the rightmost untrusted X-Forwarded-For
//! hop).

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

/// A list of networks. An empty list contains nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cidrs(Vec<IpNet>);

impl Cidrs {
    /// Parses `10.0.0.0/8, ::1/128, 192.0.2.7` (a bare address is a /32 or
    /// /128). Every bad entry is named.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut networks = Vec::new();
        let mut bad = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
            {
                Ok(network) => networks.push(normalize_net(network)),
                Err(_) => bad.push(format!("`{entry}`")),
            }
        }
        if bad.is_empty() {
            Ok(Self(networks))
        } else {
            Err(format!("not a CIDR or address: {}", bad.join(", ")))
        }
    }

    pub fn contains(&self, address: IpAddr) -> bool {
        let address = normalize(address);
        self.0.iter().any(|network| network.contains(&address))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `::ffff:a.b.c.d` is `a.b.c.d`: one client, one address, whichever socket
/// family it arrived on.
pub fn normalize(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

fn normalize_net(network: IpNet) -> IpNet {
    match network {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96).unwrap_or(network),
            None => network,
        },
        other => other,
    }
}

/// One X-Forwarded-For entry: an address, optionally with a port
/// (`192.0.2.1:4711`, `[2001:db8::1]:80`).
fn parse_hop(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|socket| socket.ip()))
        .map(normalize)
}

/// Resolves the client address of a request.
#[derive(Clone, Debug, Default)]
pub struct ClientResolver {
    /// `EXECPLANE_INGRESS_TRUST_PROXY`.
    pub trust_proxy: bool,
    /// `EXECPLANE_INGRESS_TRUSTED_PROXIES`.
    pub trusted: Cidrs,
}

impl ClientResolver {
    /// The peer itself unless trust-proxy is on AND the peer is a trusted
    /// proxy; then the rightmost X-Forwarded-For hop that is not a trusted
    /// proxy (everything left of it was written by the client and proves
    /// nothing). With trust-proxy on and no trusted proxies named, the peer
    /// is the one proxy, whoever it is, and the rightmost hop is the client
    /// (the seed's `TRUST_PROXY=true` alone). `None` when a hop the walk
    /// reaches is unreadable: the client cannot be known, and the caller
    /// refuses the request. `forwarded_for` holds the header's values in the
    /// order received.
    pub fn resolve<'a>(
        &self,
        peer: IpAddr,
        forwarded_for: impl IntoIterator<Item = &'a str>,
    ) -> Option<IpAddr> {
        let peer = normalize(peer);
        let one_hop = self.trusted.is_empty();
        if !self.trust_proxy || !(one_hop || self.trusted.contains(peer)) {
            return Some(peer);
        }
        let hops: Vec<&str> = forwarded_for
            .into_iter()
            .flat_map(|value| value.split(','))
            .collect();
        if one_hop {
            return hops.last().map_or(Some(peer), |hop| parse_hop(hop));
        }
        let mut client = peer;
        for hop in hops.iter().rev() {
            match parse_hop(hop) {
                Some(address) if self.trusted.contains(address) => client = address,
                Some(address) => return Some(address),
                None => return None,
            }
        }
        Some(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn cidrs_parse_contain_and_name_bad_entries() {
        let cidrs = Cidrs::parse("10.0.0.0/8, 192.0.2.7 ,::1/128").unwrap();
        assert!(cidrs.contains(ip("10.1.2.3")));
        assert!(cidrs.contains(ip("192.0.2.7")));
        assert!(!cidrs.contains(ip("192.0.2.8")));
        assert!(cidrs.contains(ip("::1")));
        assert!(cidrs.contains(ip("::ffff:10.9.9.9")), "mapped v6 is v4");
        let error = Cidrs::parse("10.0.0.0/8,nonsense,10.0.0.0/33").unwrap_err();
        assert!(error.contains("`nonsense`") && error.contains("`10.0.0.0/33`"));
        assert!(Cidrs::parse("").unwrap().is_empty());
        let mapped = Cidrs::parse("::ffff:10.0.0.0/104").unwrap();
        assert!(mapped.contains(ip("10.200.0.1")));
    }

    #[test]
    fn forwarded_for_is_ignored_unless_trusted() {
        let off = ClientResolver {
            trust_proxy: false,
            trusted: Cidrs::parse("127.0.0.0/8").unwrap(),
        };
        assert_eq!(
            off.resolve(ip("127.0.0.1"), ["10.9.9.9"]),
            Some(ip("127.0.0.1"))
        );
        let on = ClientResolver {
            trust_proxy: true,
            trusted: Cidrs::parse("127.0.0.0/8,172.16.0.0/12").unwrap(),
        };
        // The peer is not a trusted proxy: its header is the client's own words.
        assert_eq!(
            on.resolve(ip("192.0.2.1"), ["10.9.9.9"]),
            Some(ip("192.0.2.1"))
        );
        assert_eq!(
            on.resolve(ip("::ffff:192.0.2.1"), [""]),
            Some(ip("192.0.2.1"))
        );
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let on = ClientResolver {
            trust_proxy: true,
            trusted: Cidrs::parse("127.0.0.0/8,172.16.0.0/12").unwrap(),
        };
        let peer = ip("127.0.0.1");
        assert_eq!(on.resolve(peer, ["10.9.9.9"]), Some(ip("10.9.9.9")));
        // A spoofed leftmost entry is ignored.
        assert_eq!(
            on.resolve(peer, ["1.2.3.4, 10.9.9.9, 172.16.0.5"]),
            Some(ip("10.9.9.9"))
        );
        // Several header lines are one list, in order.
        assert_eq!(
            on.resolve(peer, ["1.2.3.4", "10.9.9.9:4711, 172.16.0.5"]),
            Some(ip("10.9.9.9"))
        );
        assert_eq!(
            on.resolve(peer, ["[::ffff:10.8.8.8]:80"]),
            Some(ip("10.8.8.8"))
        );
        // All trusted: the leftmost one; none: the peer.
        assert_eq!(
            on.resolve(peer, ["172.16.0.9, 172.16.0.5"]),
            Some(ip("172.16.0.9"))
        );
        assert_eq!(on.resolve(peer, Vec::<&str>::new()), Some(peer));
        // An unreadable hop: the client cannot be known.
        assert_eq!(on.resolve(peer, ["10.9.9.9, garbage, 172.16.0.5"]), None);
    }

    #[test]
    fn trust_proxy_alone_trusts_the_immediate_peer_for_one_hop() {
        let one_hop = ClientResolver {
            trust_proxy: true,
            trusted: Cidrs::default(),
        };
        let peer = ip("192.0.2.1");
        assert_eq!(one_hop.resolve(peer, ["10.9.9.9"]), Some(ip("10.9.9.9")));
        // Only the hop the peer wrote counts: the rest is the client's.
        assert_eq!(
            one_hop.resolve(peer, ["10.9.9.9, 1.2.3.4"]),
            Some(ip("1.2.3.4"))
        );
        assert_eq!(
            one_hop.resolve(peer, ["10.9.9.9", "1.2.3.4"]),
            Some(ip("1.2.3.4"))
        );
        assert_eq!(one_hop.resolve(peer, Vec::<&str>::new()), Some(peer));
        assert_eq!(one_hop.resolve(peer, ["10.9.9.9, garbage"]), None);
    }
}
