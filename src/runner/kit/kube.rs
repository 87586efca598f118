//! Connecting to a cluster of the operator's catalogue with the attempt's
//! credentials, and resolving a manifest's kind through discovery.
//!
//! The endpoint and the CAs come from the operator's `clusters` table only.
//! The credentials (resolved from Vault into the inputs before the executor
//! runs) are a bearer token or a kubeconfig, of which only the user's inline
//! token or client certificate and key are read: a kubeconfig's `exec` or
//! `auth-provider` plugin would run a program of the secret writer's on the
//! runner, a `tokenFile` or certificate path would read the runner's files,
//! and impersonation would be asked for by the requester — each is refused
//! by name. No message here quotes the credentials or a parser's view of
//! them.

pub mod judge;

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine;
use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use serde_yaml::Value as Yaml;

use crate::contract::ops::ClusterRef;
use crate::policy::clusters::ClusterEndpoint;
use crate::runner::Failure;

/// The largest credential accepted (a kubeconfig with a client certificate
/// is a few KiB).
const MAX_CREDENTIALS_BYTES: usize = 64 * 1024;

/// A user's credentials: what the client sends.
#[derive(Clone)]
pub enum Credentials {
    Token(String),
    /// PEM certificate and key, as kubeconfig's `*-data` fields carry them
    /// (base64 of the PEM).
    ClientCertificate {
        certificate_data: String,
        key_data: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Token(_) => formatter.write_str("Token([masked])"),
            Credentials::ClientCertificate { .. } => {
                formatter.write_str("ClientCertificate([masked])")
            }
        }
    }
}

impl Credentials {
    /// Reads the resolved `inputs.cluster.credentials`: a kubeconfig (YAML
    /// with `users`) or a bearer token.
    fn parse(text: &str) -> Result<Self, String> {
        if text.len() > MAX_CREDENTIALS_BYTES {
            return Err(format!(
                "the credentials are over {} KiB",
                MAX_CREDENTIALS_BYTES / 1024
            ));
        }
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err("the credentials are empty".into());
        }
        // A kubeconfig may be JSON on one line: it is never a token.
        let single_token = !trimmed.starts_with('{')
            && !trimmed.contains(char::is_whitespace)
            && trimmed.bytes().all(|b| b.is_ascii_graphic());
        if single_token {
            return Ok(Credentials::Token(trimmed.to_owned()));
        }
        match serde_yaml::from_str::<Yaml>(trimmed) {
            Ok(config) if config.get("users").is_some() => Self::of_kubeconfig(&config),
            // Never the parser's message: it may quote the text.
            _ => Err(
                "the credentials are neither a bearer token (one word) nor a kubeconfig (YAML with `users`)"
                    .into(),
            ),
        }
    }

    /// The user of the kubeconfig's current context (or its only user).
    fn of_kubeconfig(config: &Yaml) -> Result<Self, String> {
        let users = config
            .get("users")
            .and_then(Yaml::as_sequence)
            .ok_or("the kubeconfig's `users` is not a list")?;
        let named = |name: &str| {
            users
                .iter()
                .find(|user| user.get("name").and_then(Yaml::as_str) == Some(name))
        };
        let current_user = config
            .get("current-context")
            .and_then(Yaml::as_str)
            .and_then(|current| {
                config
                    .get("contexts")
                    .and_then(Yaml::as_sequence)?
                    .iter()
                    .find(|context| context.get("name").and_then(Yaml::as_str) == Some(current))
            })
            .and_then(|context| context.get("context")?.get("user")?.as_str());
        let entry = match (current_user, users.len()) {
            (Some(name), _) => named(name).ok_or_else(|| {
                "the kubeconfig's current context names a user it does not define".to_owned()
            })?,
            (None, 1) => &users[0],
            (None, _) => {
                return Err(
                    "the kubeconfig has several users and no current context naming one".into(),
                )
            }
        };
        let user = entry
            .get("user")
            .and_then(Yaml::as_mapping)
            .ok_or("the kubeconfig's user has no `user` section")?;
        for (field, why) in [
            ("exec", "would run a program on the runner"),
            ("auth-provider", "would run a provider plugin on the runner"),
            ("tokenFile", "would read a file of the runner's"),
            ("client-certificate", "would read a file of the runner's"),
            ("client-key", "would read a file of the runner's"),
            ("as", "asks for impersonation"),
            ("as-groups", "asks for impersonation"),
            ("as-uid", "asks for impersonation"),
            ("as-user-extra", "asks for impersonation"),
            (
                "username",
                "is basic authentication, which Kubernetes no longer serves",
            ),
        ] {
            if user.contains_key(field) {
                return Err(format!(
                    "the kubeconfig's user sets `{field}`, which {why}: only an inline `token` or `client-certificate-data` and `client-key-data` are used"
                ));
            }
        }
        let text = |field: &str| user.get(field).and_then(Yaml::as_str).map(str::to_owned);
        match (
            text("token"),
            text("client-certificate-data"),
            text("client-key-data"),
        ) {
            (Some(token), None, None) => Ok(Credentials::Token(token)),
            (None, Some(certificate_data), Some(key_data)) => {
                let engine = base64::engine::general_purpose::STANDARD;
                if engine.decode(certificate_data.trim()).is_err()
                    || engine.decode(key_data.trim()).is_err()
                {
                    return Err("the kubeconfig's client certificate or key data is not base64".into());
                }
                Ok(Credentials::ClientCertificate {
                    certificate_data,
                    key_data,
                })
            }
            _ => Err(
                "the kubeconfig's user needs exactly one of `token`, or `client-certificate-data` with `client-key-data`"
                    .into(),
            ),
        }
    }
}

/// How the runner talks to every cluster (`EXECPLANE_KUBERNETES_*`; the
/// defaults are the README's).
#[derive(Clone, Copy, Debug)]
pub struct ClientSettings {
    pub connect_timeout: Duration,
    /// The longest one request may take to answer.
    pub request_timeout: Duration,
}

impl Default for ClientSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("the operator's CA file {path} for cluster `{cluster}`: {reason}")]
    CaFile {
        cluster: String,
        path: String,
        reason: String,
    },
    #[error("cluster `{cluster}`: {reason}")]
    Client { cluster: String, reason: String },
}

/// A client for the JobSpec's `cluster`, as the operator's catalogue
/// places it, with its resolved credentials; the failure to report
/// otherwise (a cluster outside the catalogue is the policy's refusal,
/// unusable credentials the requester's).
pub(crate) fn connect(
    policy: &crate::policy::OperatorPolicy,
    cluster: &ClusterRef,
    settings: ClientSettings,
) -> Result<kube::Client, Failure> {
    let (endpoint, credentials) = identify(policy, cluster)?;
    client(&cluster.name, endpoint, &credentials, settings)
        .map_err(|error| Failure::infrastructure(error.to_string()))
}

/// The catalogue's entry for the JobSpec's `cluster` and its resolved
/// credentials, or the failure to report.
pub(crate) fn identify<'p>(
    policy: &'p crate::policy::OperatorPolicy,
    cluster: &ClusterRef,
) -> Result<(&'p ClusterEndpoint, Credentials), Failure> {
    let Some(endpoint) = policy.cluster(&cluster.name) else {
        return Err(Failure::policy(format!(
            "inputs.cluster.name: `{}` is not in the operator's clusters",
            cluster.name
        )));
    };
    let credentials = match cluster.credentials.as_str().map(Credentials::parse) {
        Some(Ok(credentials)) => credentials,
        Some(Err(problem)) => {
            return Err(Failure::contract(format!(
                "inputs.cluster.credentials: {problem}"
            )))
        }
        None => {
            return Err(Failure::contract(
                "inputs.cluster.credentials: not a resolved {\"$secret\": ...} reference",
            ))
        }
    };
    Ok((endpoint, credentials))
}

/// A client for the catalogue's cluster `name` as `credentials`.
pub fn client(
    name: &str,
    endpoint: &ClusterEndpoint,
    credentials: &Credentials,
    settings: ClientSettings,
) -> Result<kube::Client, ConnectError> {
    let failed = |reason: String| ConnectError::Client {
        cluster: name.to_owned(),
        reason,
    };
    let url: http::Uri = endpoint
        .server
        .parse()
        .map_err(|error| failed(format!("server `{}`: {error}", endpoint.server)))?;
    let mut config = kube::Config::new(url);
    config.connect_timeout = Some(settings.connect_timeout);
    config.read_timeout = Some(settings.request_timeout);
    config.write_timeout = Some(settings.request_timeout);
    // The timeout counts from the request, not from when a pooled
    // connection went idle.
    config.reset_reader_on_write = true;
    config.tls_server_name = endpoint.tls_server_name.clone();
    let pem = match (&endpoint.ca_file, &endpoint.ca_pem) {
        (Some(path), _) => {
            Some(
                std::fs::read_to_string(path).map_err(|error| ConnectError::CaFile {
                    cluster: name.to_owned(),
                    path: path.display().to_string(),
                    reason: error.to_string(),
                })?,
            )
        }
        (None, Some(pem)) => Some(pem.clone()),
        (None, None) => None,
    };
    if let Some(pem) = pem {
        let roots = pem_certificates(&pem);
        if roots.is_empty() {
            return Err(failed("the operator's CA holds no PEM certificate".into()));
        }
        config.root_cert = Some(roots);
    }
    config.auth_info = match credentials {
        Credentials::Token(token) => kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        },
        Credentials::ClientCertificate {
            certificate_data,
            key_data,
        } => kube::config::AuthInfo {
            client_certificate_data: Some(certificate_data.clone()),
            client_key_data: Some(key_data.clone().into()),
            ..Default::default()
        },
    };
    kube::Client::try_from(config).map_err(|error| failed(error.to_string()))
}

/// The DER bytes of every `CERTIFICATE` block of a PEM text.
fn pem_certificates(pem: &str) -> Vec<Vec<u8>> {
    let engine = base64::engine::general_purpose::STANDARD;
    let mut certificates = Vec::new();
    let mut body: Option<String> = None;
    for line in pem.lines().map(str::trim) {
        match line {
            "-----BEGIN CERTIFICATE-----" => body = Some(String::new()),
            "-----END CERTIFICATE-----" => {
                if let Some(der) = body.take().and_then(|text| engine.decode(text).ok()) {
                    certificates.push(der);
                }
            }
            _ => {
                if let Some(text) = body.as_mut() {
                    text.push_str(line);
                }
            }
        }
    }
    certificates
}

/// A kind as the cluster serves it.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
    /// The verbs the API serves on it (`get`, `list`, `patch`, ...).
    pub verbs: Vec<String>,
}

/// Kinds resolved through discovery, once per attempt each.
#[derive(Default)]
pub struct Kinds {
    seen: HashMap<(String, String), Resolved>,
}

impl Kinds {
    /// `api_version` + `kind` as the cluster serves them (so a custom
    /// resource resolves like a built-in one); `None` when it serves no
    /// such kind (or group version).
    pub async fn resolve(
        &mut self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<Resolved>, kube::Error> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(resolved) = self.seen.get(&key) {
            return Ok(Some(resolved.clone()));
        }
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities): (ApiResource, ApiCapabilities) =
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok(found) => found,
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
                Err(kube::Error::Discovery(_)) => return Ok(None),
                Err(error) => return Err(error),
            };
        let resolved = Resolved {
            resource,
            namespaced: capabilities.scope == Scope::Namespaced,
            verbs: capabilities.operations,
        };
        self.seen.insert(key, resolved.clone());
        Ok(Some(resolved))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_one_word_and_a_kubeconfig_gives_its_current_user_only() {
        assert!(
            matches!(Credentials::parse(" abc.def-123\n"), Ok(Credentials::Token(t)) if t == "abc.def-123")
        );
        let config = "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
            contexts: [{name: c, context: {cluster: x, user: two}}]\n\
            clusters: [{name: x, cluster: {server: 'https://elsewhere.example'}}]\n\
            users: [{name: one, user: {token: first}}, {name: two, user: {token: second}}]\n";
        assert!(matches!(Credentials::parse(config), Ok(Credentials::Token(t)) if t == "second"));
    }

    #[test]
    fn a_kubeconfig_that_would_run_read_or_impersonate_is_refused_by_name() {
        for (field, value) in [
            ("exec", "{command: /bin/sh}"),
            ("auth-provider", "{name: gcp}"),
            ("tokenFile", "/etc/shadow"),
            ("client-certificate", "/root/cert"),
            ("as", "system:admin"),
            ("username", "admin"),
        ] {
            let config = format!("users: [{{name: u, user: {{token: t, {field}: {value}}}}}]");
            let error = Credentials::parse(&config).unwrap_err();
            assert!(error.contains(&format!("`{field}`")), "{field}: {error}");
        }
    }

    #[test]
    fn refusals_never_quote_the_credentials() {
        for text in [
            "two words-s3cr3t",
            "users: notalist s3cr3t",
            "users: [{name: u, user: {token: s3cr3t, client-key-data: s3cr3t}}]",
        ] {
            let error = Credentials::parse(text).unwrap_err();
            assert!(!error.contains("s3cr3t"), "{error}");
        }
        assert!(!format!("{:?}", Credentials::Token("s3cr3t".into())).contains("s3cr3t"));
    }

    #[test]
    fn every_certificate_of_a_bundle_is_read() {
        let bundle = "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n\
                      junk\n-----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_certificates(bundle), vec![vec![1, 2, 3], vec![4, 5, 6]]);
    }
}
