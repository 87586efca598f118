//! Secrets by reference (docs/ARCHITECTURE.md, "Secrets"). A JobSpec names each secret it needs
//! (`secret_refs`: name, mount, path, key) and its inputs say
//! `{"$secret": "<name>"}`; the runner resolves the references at execution
//! time from a Vault-API server (KV v2), holds the values in memory only,
//! and masks every form of them in whatever leaves it ([`mask`]).
//!
//! Failures name the reference, never a value: an unreachable store or
//! credentials the store refuses are `infrastructure` (another runner, or
//! the same one later, may succeed); a missing path or key, or a policy
//! that denies the path, is `contract` (the JobSpec asks for what it may
//! not have).

pub mod mask;
mod value;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use vaultrs::client::{Client, VaultClient, VaultClientSettingsBuilder};
use vaultrs::error::ClientError;

use crate::contract::{FailureCategory, JobSpec, SecretRef};
pub use mask::{Masker, StreamMasker, MASK};
pub use value::Secret;

/// How the runner authenticates to the secret store.
#[derive(Clone, Debug)]
pub enum VaultAuth {
    Token(Secret),
    AppRole {
        mount: String,
        role_id: String,
        secret_id: Secret,
    },
}

#[derive(Clone, Debug)]
pub struct VaultSettings {
    /// `EXECPLANE_VAULT_ADDR`, e.g. `http://127.0.0.1:8200`.
    pub address: String,
    pub auth: VaultAuth,
    /// Per request.
    pub timeout: Duration,
}

/// A resolved value: never printed.
#[derive(Clone)]
pub struct SecretValue(Arc<String>);

impl SecretValue {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("SecretValue(redacted)")
    }
}

/// Why a reference could not be resolved. Every message names the
/// reference and none carries a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("secret `{name}` ({location}): the secret store is unreachable: {detail}")]
    Unreachable {
        name: String,
        location: String,
        detail: String,
    },
    #[error("secret `{name}` ({location}): the secret store refused this runner's credentials")]
    Unauthenticated { name: String, location: String },
    #[error("secret `{name}` ({location}): no such secret")]
    NotFound { name: String, location: String },
    #[error("secret `{name}` ({location}): permission denied by the secret store's policy")]
    Denied { name: String, location: String },
    #[error("secret `{name}` ({location}): the secret has no key `{key}`")]
    KeyMissing {
        name: String,
        location: String,
        key: String,
    },
    #[error("secret `{name}` is referenced but not declared in secret_refs")]
    Undeclared { name: String },
    #[error("secret `{name}` ({location}): no secret store is configured on this runner (EXECPLANE_VAULT_ADDR)")]
    NotConfigured { name: String, location: String },
}

impl SecretError {
    pub fn category(&self) -> FailureCategory {
        match self {
            SecretError::Unreachable { .. }
            | SecretError::Unauthenticated { .. }
            | SecretError::NotConfigured { .. } => FailureCategory::Infrastructure,
            SecretError::NotFound { .. }
            | SecretError::Denied { .. }
            | SecretError::KeyMissing { .. }
            | SecretError::Undeclared { .. } => FailureCategory::Contract,
        }
    }
}

fn location(reference: &SecretRef) -> String {
    format!(
        "{}/{}#{}",
        reference.mount.trim_end_matches('/'),
        reference.path.trim_start_matches('/'),
        reference.key
    )
}

/// A client of a Vault-API server (Vault, OpenBao) that keeps its token
/// alive: renewed at two thirds of its TTL, or, for AppRole, logged in
/// again when it cannot be renewed.
pub struct Vault {
    settings: VaultSettings,
    client: RwLock<VaultClient>,
    /// When the current token must be renewed; `None`: it does not expire.
    renew_at: std::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Vault")
            .field("address", &self.settings.address)
            .finish_non_exhaustive()
    }
}

impl Vault {
    /// Builds the client and authenticates. A store that is down or refuses
    /// the credentials does not stop the runner: attempts that need a
    /// secret fail with a clear reason until it answers.
    pub async fn connect(settings: VaultSettings) -> Result<Arc<Self>, String> {
        let token = match &settings.auth {
            VaultAuth::Token(token) => token.expose().to_owned(),
            VaultAuth::AppRole { .. } => String::new(),
        };
        let client = VaultClient::new(
            VaultClientSettingsBuilder::default()
                .address(&settings.address)
                .token(token)
                .timeout(Some(settings.timeout))
                .build()
                .map_err(|error| format!("vault settings: {error}"))?,
        )
        .map_err(|error| format!("vault client: {error}"))?;
        let vault = Arc::new(Self {
            settings,
            client: RwLock::new(client),
            renew_at: std::sync::Mutex::new(None),
        });
        if let Err(error) = vault.authenticate().await {
            warn!(address = %vault.settings.address, %error, "secret store: not authenticated yet; retrying");
            vault.retry_soon();
        }
        Ok(vault)
    }

    /// Tries again in a few seconds (a store that was down, a renewal that
    /// failed): renewal never silently stops.
    fn retry_soon(&self) {
        *self.renew_at.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + Duration::from_secs(3));
    }

    fn schedule(&self, ttl_seconds: u64) {
        let at =
            (ttl_seconds > 0).then(|| Instant::now() + Duration::from_secs(ttl_seconds) * 2 / 3);
        *self.renew_at.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    /// Logs in (AppRole) or looks the token up (token auth) to learn when
    /// to renew it.
    async fn authenticate(&self) -> Result<(), ClientError> {
        match &self.settings.auth {
            VaultAuth::AppRole {
                mount,
                role_id,
                secret_id,
            } => {
                let mut client = self.client.write().await;
                let auth =
                    vaultrs::auth::approle::login(&*client, mount, role_id, secret_id.expose())
                        .await?;
                client.set_token(&auth.client_token);
                self.schedule(auth.lease_duration);
                info!(
                    ttl_s = auth.lease_duration,
                    "secret store: logged in with AppRole"
                );
            }
            VaultAuth::Token(_) => {
                let client = self.client.read().await;
                let lookup = vaultrs::token::lookup_self(&*client).await?;
                self.schedule(if lookup.renewable.unwrap_or(false) {
                    lookup.ttl
                } else {
                    0
                });
            }
        }
        Ok(())
    }

    /// Renews the token (or logs in again) when two thirds of its TTL have
    /// passed; every second it checks.
    pub fn keep_alive(self: &Arc<Self>, shutdown: CancellationToken) {
        let vault = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                let due = vault
                    .renew_at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_some_and(|at| Instant::now() >= at);
                if due {
                    vault.renew().await;
                }
            }
        });
    }

    async fn renew(&self) {
        let approle = matches!(self.settings.auth, VaultAuth::AppRole { .. });
        let renewed = {
            let client = self.client.read().await;
            vaultrs::token::renew_self(&*client, None).await
        };
        match renewed {
            // Near its max TTL a renewal grants less each time: an AppRole
            // logs in again instead of riding the token to its end.
            Ok(auth) if approle && auth.lease_duration < 5 => self.relogin().await,
            Ok(auth) => {
                tracing::debug!(ttl_s = auth.lease_duration, "secret store token renewed");
                if auth.lease_duration == 0 {
                    self.retry_soon();
                } else {
                    self.schedule(auth.lease_duration);
                }
            }
            Err(error) if approle => {
                tracing::debug!(%error, "secret store: renewal refused; logging in again");
                self.relogin().await;
            }
            Err(error) => {
                warn!(%error, "secret store: token renewal failed; retrying");
                // A token past its end cannot be renewed; keep trying (the
                // operator may fix the store), and attempts fail clearly
                // with `infrastructure` meanwhile.
                self.retry_soon();
            }
        }
    }

    async fn relogin(&self) {
        if let Err(error) = self.authenticate().await {
            warn!(%error, "secret store: AppRole login failed; retrying");
            self.retry_soon();
        }
    }

    /// Reads one reference (KV v2).
    pub async fn resolve(&self, reference: &SecretRef) -> Result<SecretValue, SecretError> {
        let name = reference.name.clone();
        let location = location(reference);
        let read = {
            let client = self.client.read().await;
            vaultrs::kv2::read::<BTreeMap<String, serde_json::Value>>(
                &*client,
                reference.mount.trim_matches('/'),
                reference.path.trim_matches('/'),
            )
            .await
        };
        let data = match read {
            Ok(data) => data,
            Err(ClientError::APIError { code: 404, .. }) => {
                return Err(SecretError::NotFound { name, location })
            }
            Err(ClientError::APIError { code: 403, .. }) => {
                // A refused token and a policy that denies the path look the
                // same; asking about the token itself tells them apart.
                let token_valid = {
                    let client = self.client.read().await;
                    vaultrs::token::lookup_self(&*client).await.is_ok()
                };
                return Err(if token_valid {
                    SecretError::Denied { name, location }
                } else {
                    if matches!(self.settings.auth, VaultAuth::AppRole { .. }) {
                        let _ = self.authenticate().await;
                    }
                    SecretError::Unauthenticated { name, location }
                });
            }
            Err(ClientError::APIError { code, .. }) => {
                return Err(SecretError::Unreachable {
                    name,
                    location,
                    detail: format!("HTTP {code}"),
                })
            }
            Err(error) => {
                return Err(SecretError::Unreachable {
                    name,
                    location,
                    detail: error.to_string(),
                })
            }
        };
        match data.get(&reference.key) {
            Some(serde_json::Value::String(text)) => Ok(SecretValue(Arc::new(text.clone()))),
            Some(other) => Ok(SecretValue(Arc::new(other.to_string()))),
            None => Err(SecretError::KeyMissing {
                name,
                location,
                key: reference.key.clone(),
            }),
        }
    }

    /// Creates `reference`'s key when its secret lacks it: a random value
    /// of `generate`'s length, added to what the secret holds by a
    /// check-and-set write on the version read, so attempts that race
    /// keep one value (the loser reads the winner's). Never logged.
    pub async fn ensure_generated(
        &self,
        reference: &SecretRef,
        generate: crate::contract::GenerateSecret,
    ) -> Result<(), SecretError> {
        use vaultrs::api::kv2::requests::{ReadSecretRequest, SetSecretRequestOptions};
        let name = reference.name.clone();
        let location = location(reference);
        let (mount, path) = (
            reference.mount.trim_matches('/'),
            reference.path.trim_matches('/'),
        );
        let unreachable = |detail: String| SecretError::Unreachable {
            name: name.clone(),
            location: location.clone(),
            detail,
        };
        let refused = |error: ClientError| write_error(&name, &location, error);
        for _ in 0..3 {
            let request = ReadSecretRequest::builder()
                .mount(mount)
                .path(path)
                .build()
                .map_err(|error| unreachable(error.to_string()))?;
            let read = {
                let client = self.client.read().await;
                vaultrs::api::exec_with_result(&*client, request).await
            };
            let (mut data, version) = match read {
                // KV v2 data is an object: anything else is never overwritten.
                Ok(secret) => (
                    serde_json::from_value::<BTreeMap<String, serde_json::Value>>(secret.data)
                        .map_err(|error| {
                            unreachable(format!("the secret is not an object: {error}"))
                        })?,
                    secret.metadata.version,
                ),
                Err(ClientError::APIError { code: 404, .. }) => (BTreeMap::new(), 0),
                Err(error) => return Err(refused(error)),
            };
            if data.contains_key(&reference.key) {
                return Ok(());
            }
            data.insert(
                reference.key.clone(),
                serde_json::Value::String(random_text(usize::from(generate.length))),
            );
            let cas = u32::try_from(version).unwrap_or(u32::MAX);
            let written = {
                let client = self.client.read().await;
                vaultrs::kv2::set_with_options(
                    &*client,
                    mount,
                    path,
                    &data,
                    SetSecretRequestOptions { cas },
                )
                .await
            };
            match written {
                Ok(_) => return Ok(()),
                // Another writer came first: read what it wrote.
                Err(ClientError::APIError { code: 400, .. }) => continue,
                Err(error) => return Err(refused(error)),
            }
        }
        Err(unreachable(
            "the secret kept changing while a value was being generated for it".into(),
        ))
    }

    /// Writes `data` as the secret at `mount`/`path` (KV v2: a new version
    /// of it), `name` saying what it is in an error. The caller checked the
    /// path against the tenant's secret prefixes; the store's own policy
    /// must let this runner write there.
    pub async fn write(
        &self,
        name: &str,
        mount: &str,
        path: &str,
        data: &BTreeMap<String, String>,
    ) -> Result<(), SecretError> {
        let name = name.to_owned();
        let location = format!("{}/{}", mount.trim_matches('/'), path.trim_matches('/'));
        let written = {
            let client = self.client.read().await;
            vaultrs::kv2::set(
                &*client,
                mount.trim_matches('/'),
                path.trim_matches('/'),
                data,
            )
            .await
        };
        written
            .map(drop)
            .map_err(|error| write_error(&name, &location, error))
    }
}

/// Why a write (or the read before it) was refused: the store's policy
/// (`Denied`, 403), else the store itself.
fn write_error(name: &str, location: &str, error: ClientError) -> SecretError {
    let (name, location) = (name.to_owned(), location.to_owned());
    match error {
        ClientError::APIError { code: 403, .. } => SecretError::Denied { name, location },
        ClientError::APIError { code, .. } => SecretError::Unreachable {
            name,
            location,
            detail: format!("HTTP {code}"),
        },
        error => SecretError::Unreachable {
            name,
            location,
            detail: error.to_string(),
        },
    }
}

/// `length` random characters of `[A-Za-z0-9]`, from `rand`'s thread generator (a CSPRNG seeded by the OS).
fn random_text(length: usize) -> String {
    use rand::distr::{Alphanumeric, SampleString};
    Alphanumeric.sample_string(&mut rand::rng(), length)
}

/// The secrets an attempt resolved: the masker for everything it sends.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub masker: Masker,
    pub count: usize,
}

/// Replaces every `{"$secret": "<name>"}` in the spec's inputs with the
/// value of its declared reference, resolving each name once.
pub async fn resolve_inputs(
    spec: &mut JobSpec,
    vault: Option<&Vault>,
) -> Result<Resolved, SecretError> {
    fn names(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                if let (1, Some(serde_json::Value::String(name))) = (map.len(), map.get("$secret"))
                {
                    out.push(name.clone());
                } else {
                    map.values().for_each(|value| names(value, out));
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|value| names(value, out)),
            _ => {}
        }
    }
    fn substitute(value: &mut serde_json::Value, values: &BTreeMap<String, SecretValue>) {
        match value {
            serde_json::Value::Object(map) => {
                let reference = match (map.len(), map.get("$secret")) {
                    (1, Some(serde_json::Value::String(name))) => values.get(name).cloned(),
                    _ => None,
                };
                match reference {
                    Some(secret) => *value = serde_json::Value::String(secret.expose().to_owned()),
                    None => map.values_mut().for_each(|value| substitute(value, values)),
                }
            }
            serde_json::Value::Array(items) => {
                items.iter_mut().for_each(|value| substitute(value, values))
            }
            _ => {}
        }
    }
    let mut wanted = Vec::new();
    names(&spec.inputs, &mut wanted);
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() {
        return Ok(Resolved::default());
    }
    let mut values = BTreeMap::new();
    for name in wanted {
        let Some(reference) = spec.secret_refs.iter().find(|r| r.name == name) else {
            return Err(SecretError::Undeclared { name });
        };
        let Some(vault) = vault else {
            return Err(SecretError::NotConfigured {
                name,
                location: location(reference),
            });
        };
        if let Some(generate) = reference.generate {
            vault.ensure_generated(reference, generate).await?;
        }
        values.insert(name, vault.resolve(reference).await?);
    }
    substitute(&mut spec.inputs, &values);
    Ok(Resolved {
        masker: Masker::new(values.values().map(SecretValue::expose)),
        count: values.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_never_print() {
        let value = SecretValue(Arc::new("hunter2".into()));
        assert!(!format!("{value:?}").contains("hunter2"));
        let error = SecretError::Denied {
            name: "db".into(),
            location: "secret/app#password".into(),
        };
        assert_eq!(error.category(), FailureCategory::Contract);
        assert!(error.to_string().contains("`db`"));
    }
}
