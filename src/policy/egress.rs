//! A network destination as the operator's policy and settings write it:
//! `host:port`, `[v6]:port`, a CIDR or an address (every port). What a
//! sandboxed tool may not reach (the deny list), and what a tool that runs
//! the tenant's code may (`egress`; the runner's `sandbox::egress` holds
//! it to that).

use std::net::IpAddr;

use ipnet::IpNet;

/// One entry of a deny list, or of what a held tool may reach.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Destination {
    /// `host:port` (`[v6]:port`): that port at every address `host`
    /// resolves to, and at every address of this machine when one of them
    /// is its own.
    Endpoint { host: String, port: u16 },
    /// A CIDR, or one address: every port.
    Net(IpNet),
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Endpoint { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Self::Endpoint { host, port } => write!(f, "{host}:{port}"),
            Self::Net(net) => write!(f, "{net}"),
        }
    }
}

impl TryFrom<String> for Destination {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text)
    }
}

impl Destination {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Self::Net(net));
        }
        if let Ok(address) = text.parse::<IpAddr>() {
            return Ok(Self::Net(address.into()));
        }
        let bad = || format!("`{text}` is neither host:port, [v6]:port, a CIDR nor an address");
        let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
        let host = host
            .strip_prefix('[')
            .and_then(|host| host.strip_suffix(']'))
            .unwrap_or(host);
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || (host.contains(':') && host.parse::<IpAddr>().is_err()) || port == 0 {
            return Err(bad());
        }
        Ok(Self::Endpoint {
            host: host.to_owned(),
            port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_as_endpoints_networks_or_errors() {
        let endpoint = |host: &str, port| Destination::Endpoint {
            host: host.into(),
            port,
        };
        assert_eq!(
            Destination::parse("kafka-0.example:9093").unwrap(),
            endpoint("kafka-0.example", 9093)
        );
        assert_eq!(
            Destination::parse("[::1]:5432").unwrap(),
            endpoint("::1", 5432)
        );
        assert_eq!(
            Destination::parse("169.254.0.0/16").unwrap(),
            Destination::Net("169.254.0.0/16".parse().unwrap())
        );
        assert_eq!(
            Destination::parse("10.1.2.3").unwrap(),
            Destination::Net("10.1.2.3/32".parse().unwrap())
        );
        for bad in [
            "",
            "host",
            "host:",
            "host:0",
            "host:http",
            ":80",
            "fe80::1::2:80",
        ] {
            assert!(Destination::parse(bad).is_err(), "{bad}");
        }
    }
}
