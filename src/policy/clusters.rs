//! The operator's cluster catalogue (`clusters` in the policy file): where
//! each Kubernetes cluster's API is and which certificate authorities its
//! serving certificate must chain to. A JobSpec names a cluster; its
//! credentials (a token or a kubeconfig's user) come from Vault, but the
//! endpoint and the trust never come from the requester — a kubeconfig's own
//! `server` and CA are ignored, so a tenant's secret cannot point a runner
//! at another address (docs/ARCHITECTURE.md, "Kubernetes").

use std::path::PathBuf;

use serde::Deserialize;

/// One cluster of the catalogue.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClusterEndpoint {
    /// `https://host[:port]` of the API server.
    pub server: String,
    /// A PEM file of the CAs the serving certificate must chain to (read by
    /// the runner when it connects); none, and no `ca_pem`: the system's
    /// roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// The same PEM text inline, instead of `ca_file`.
    #[serde(default)]
    pub ca_pem: Option<String>,
    /// The name the serving certificate must carry, when it is not the
    /// server's host.
    #[serde(default)]
    pub tls_server_name: Option<String>,
}

impl ClusterEndpoint {
    /// Problems of the entry `name`, each naming it.
    pub fn problems(&self, name: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let field = format!("clusters.{name}");
        if !is_cluster_name(name) {
            problems.push(format!(
                "{field}: a cluster name is 1-63 lowercase letters, digits and `-`"
            ));
        }
        match url::Url::parse(&self.server) {
            Ok(url) if url.scheme() == "https" && url.host_str().is_some() => {
                if !url.username().is_empty() || url.password().is_some() {
                    problems.push(format!("{field}.server: no credentials in the URL"));
                }
                if url.query().is_some() || url.fragment().is_some() {
                    problems.push(format!("{field}.server: no query or fragment"));
                }
            }
            Ok(_) => problems.push(format!(
                "{field}.server: `{}` is not an https:// URL with a host",
                self.server
            )),
            Err(error) => problems.push(format!("{field}.server: {error}")),
        }
        if self.ca_file.is_some() && self.ca_pem.is_some() {
            problems.push(format!("{field}: ca_file or ca_pem, not both"));
        }
        if let Some(file) = &self.ca_file {
            if !file.is_absolute() {
                problems.push(format!(
                    "{field}.ca_file: `{}` is not an absolute path",
                    file.display()
                ));
            }
        }
        if let Some(pem) = &self.ca_pem {
            if !pem.contains("-----BEGIN CERTIFICATE-----") {
                problems.push(format!("{field}.ca_pem: no PEM certificate in it"));
            }
        }
        problems
    }
}

fn is_cluster_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(server: &str) -> ClusterEndpoint {
        ClusterEndpoint {
            server: server.into(),
            ca_file: None,
            ca_pem: None,
            tls_server_name: None,
        }
    }

    #[test]
    fn only_a_plain_https_endpoint_is_accepted() {
        assert!(endpoint("https://127.0.0.1:6443")
            .problems("dev")
            .is_empty());
        assert!(endpoint("https://k8s.example.com")
            .problems("prod-1")
            .is_empty());
        for bad in [
            "http://127.0.0.1:6443",
            "https://user:pw@k8s.example.com",
            "https://k8s.example.com/?token=x",
            "not a url",
        ] {
            assert!(!endpoint(bad).problems("dev").is_empty(), "{bad}");
        }
        assert!(!endpoint("https://a").problems("Dev_1").is_empty());
    }

    #[test]
    fn the_ca_is_a_file_or_inline_pem_not_both() {
        let mut both = endpoint("https://a");
        both.ca_file = Some("/etc/ca.pem".into());
        both.ca_pem = Some("-----BEGIN CERTIFICATE-----\n".into());
        assert_eq!(both.problems("dev").len(), 1);
        let mut relative = endpoint("https://a");
        relative.ca_file = Some("ca.pem".into());
        assert_eq!(relative.problems("dev").len(), 1);
    }
}
