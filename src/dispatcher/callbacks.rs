//! HTTP callbacks of terminal states: POSTed at least once with exponential
//! backoff and jitter, an `Idempotency-Key` stable across retries, and a
//! bound on attempts; the outcome is recorded as a `callback_recorded` event.
//! Signed, when the operator configured where each tenant's secrets are,
//! as the Standard Webhooks specification says (`contract::callbacks`): a
//! callback whose secrets cannot be read is not sent unsigned, it is
//! retried.

use std::time::Duration;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rand::Rng;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::DispatcherError;
use crate::contract::callbacks as contract_callbacks;
use crate::contract::Input;
use crate::store::{Channel, ClaimedCallback, InputEnvelope, Store};

#[derive(Clone, Debug)]
pub struct CallbackConfig {
    pub max_attempts: i32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub request_timeout: Duration,
    pub poll_interval: Duration,
    /// The operator's policy: where each tenant's callbacks may connect.
    pub policy: crate::policy::SharedPolicy,
    /// Where each tenant's signing secrets are; `None`: unsigned.
    pub signing: Option<Arc<Signing>>,
}

/// Each tenant's signing secrets, read from the secret store and kept a
/// short while (a rotated secret is in force within [`SECRETS_TTL`]).
#[derive(Debug)]
pub struct Signing {
    pub vault: Arc<crate::secrets::Vault>,
    pub mount: String,
    /// With `{tenant}`.
    pub path: String,
}

const SECRETS_TTL: Duration = Duration::from_secs(30);

type Secrets = Result<Arc<Vec<Vec<u8>>>, String>;

impl Signing {
    async fn secrets(&self, tenant: &str) -> Secrets {
        let path = contract_callbacks::signing_path(&self.path, tenant)?;
        let reference = crate::contract::SecretRef {
            name: "callback signing secrets".into(),
            mount: self.mount.clone(),
            path,
            key: contract_callbacks::SIGNING_KEY.into(),
            generate: None,
        };
        let value = self
            .vault
            .resolve(&reference)
            .await
            .map_err(|error| format!("the signing secrets of tenant `{tenant}`: {error}"))?;
        contract_callbacks::parse_secrets(value.expose())
            .map(Arc::new)
            .map_err(|problem| format!("the signing secrets of tenant `{tenant}`: {problem}"))
    }
}

impl Default for CallbackConfig {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            request_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(200),
            policy: crate::policy::SharedPolicy::default(),
            signing: None,
        }
    }
}

/// Exponential backoff with full jitter in [delay/2, delay].
pub fn backoff(config: &CallbackConfig, attempts: i32) -> Duration {
    let exponent = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(20);
    let delay = config
        .initial_backoff
        .saturating_mul(1 << exponent)
        .min(config.max_backoff);
    let half = delay / 2;
    half + Duration::from_millis(
        rand::rng().random_range(0..=u64::try_from(half.as_millis()).unwrap_or(0)),
    )
}

/// Deliveries in flight at once, and HTTP deliveries of one tenant at
/// once: a tenant whose endpoint answers slowly (or never, until the
/// request timeout) holds its own share, never the other tenants' turn.
/// A claim takes at most a tenant's share, so one tenant holds fewer than
/// twice it. A topic callback goes to the platform's own broker and takes
/// no tenant's share.
const IN_FLIGHT: usize = 128;
const IN_FLIGHT_PER_TENANT: usize = 4;

/// Each tenant's signing secrets, read at most every [`SECRETS_TTL`].
type SecretsCache = Arc<tokio::sync::Mutex<HashMap<String, (Instant, Secrets)>>>;

pub(super) async fn run(
    store: Store,
    (kafka, producer): (crate::kafka::KafkaConfig, rdkafka::producer::FutureProducer),
    config: CallbackConfig,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    // One client per tenant, bound to its destination policy (callbacks
    // follow no redirects); bounded, cleared when full and whenever the
    // operator's policy was reloaded.
    let mut clients: HashMap<String, reqwest::Client> = Default::default();
    let mut clients_policy = String::new();
    let secrets: SecretsCache = Arc::default();
    // Each delivery is a task of its own, so none waits on the claims or
    // on another tenant's secrets.
    let mut in_flight: tokio::task::JoinSet<()> = tokio::task::JoinSet::new();
    // The tenant of each HTTP delivery in flight, by task: a task that
    // panicked gives its tenant's share back all the same.
    let mut tenant_of: HashMap<tokio::task::Id, String> = HashMap::new();
    let mut per_tenant: HashMap<String, usize> = HashMap::new();
    let ended = |id: tokio::task::Id,
                 tenant_of: &mut HashMap<tokio::task::Id, String>,
                 per_tenant: &mut HashMap<String, usize>| {
        if let Some(tenant) = tenant_of.remove(&id) {
            if let Some(count) = per_tenant.get_mut(&tenant) {
                *count -= 1;
                if *count == 0 {
                    per_tenant.remove(&tenant);
                }
            }
        }
    };
    let id_of = |done: Result<(tokio::task::Id, ()), tokio::task::JoinError>| match done {
        Ok((id, ())) => id,
        Err(error) => {
            warn!(%error, "a callback delivery panicked; retried after its claim lapses");
            error.id()
        }
    };
    while !shutdown.is_cancelled() {
        let policy = config.policy.current();
        if policy.digest() != clients_policy {
            clients.clear();
            clients_policy = policy.digest().to_owned();
        }
        // Claim while there is room, at most a tenant's share at a time,
        // none of a tenant that has its share in flight.
        while in_flight.len() < IN_FLIGHT {
            let full: Vec<String> = per_tenant
                .iter()
                .filter(|(_, count)| **count >= IN_FLIGHT_PER_TENANT)
                .map(|(tenant, _)| tenant.clone())
                .collect();
            let room = (IN_FLIGHT - in_flight.len()).min(IN_FLIGHT_PER_TENANT);
            let claimed = match store
                .claim_callbacks(room as i64, config.request_timeout * 3, &full)
                .await
            {
                Ok(claimed) => claimed,
                Err(error) => {
                    warn!(%error, "claiming callbacks failed");
                    Vec::new()
                }
            };
            if claimed.is_empty() {
                break;
            }
            for callback in claimed {
                let (store, config) = (store.clone(), config.clone());
                let tenant = callback.tenant.clone();
                if callback.channel == Channel::Kafka {
                    // The topic is checked against the policy in force, as
                    // a URL is: a reload may have taken the prefix away
                    // since the JobSpec was admitted.
                    let refused = policy.tenant(&tenant).callback_topic_refused(&callback.url);
                    let (kafka, producer) = (kafka.clone(), producer.clone());
                    in_flight.spawn(async move {
                        let sent = match refused {
                            Some(refusal) => Err((None, refusal)),
                            None => produce(&kafka, &producer, &config, &callback).await,
                        };
                        conclude(&store, &config, callback, sent).await;
                    });
                    continue;
                }
                *per_tenant.entry(tenant.clone()).or_default() += 1;
                if !clients.contains_key(&tenant) {
                    if clients.len() >= 256 {
                        clients.clear();
                    }
                    let destinations = policy.tenant(&tenant).destinations.clone();
                    match crate::policy::http_client(&destinations, 0) {
                        Ok(client) => {
                            clients.insert(tenant.clone(), client);
                        }
                        // Tried again later, as any failed delivery is.
                        Err(error) => {
                            let task = in_flight.spawn(async move {
                                conclude(&store, &config, callback, Err((None, error))).await;
                            });
                            tenant_of.insert(task.id(), tenant);
                            continue;
                        }
                    }
                }
                let client = clients[&tenant].clone();
                let destinations = policy.tenant(&tenant).destinations.clone();
                let secrets = secrets.clone();
                let of = tenant.clone();
                let task = in_flight.spawn(async move {
                    let signed = match &config.signing {
                        None => None,
                        Some(signing) => Some(signing_secrets(signing, &secrets, &of).await),
                    };
                    deliver(&store, &client, &destinations, signed, &config, callback).await;
                });
                tenant_of.insert(task.id(), tenant);
            }
        }
        // One delivery ending makes room (with any others that ended by
        // then: one claim for them all); the poll interval brings what
        // has come due meanwhile.
        tokio::select! {
            Some(done) = in_flight.join_next_with_id(), if !in_flight.is_empty() => {
                ended(id_of(done), &mut tenant_of, &mut per_tenant);
                while let Some(done) = in_flight.try_join_next_with_id() {
                    ended(id_of(done), &mut tenant_of, &mut per_tenant);
                }
            }
            _ = tokio::time::sleep(config.poll_interval) => {}
            _ = shutdown.cancelled() => break,
        }
    }
    // What is in flight ends and is recorded, within its request's time
    // and a little more; what is cut off then comes back when its claim
    // lapses. Nothing more is claimed.
    let drained = async { while in_flight.join_next().await.is_some() {} };
    if tokio::time::timeout(config.request_timeout + Duration::from_secs(5), drained)
        .await
        .is_err()
    {
        warn!(
            left = in_flight.len(),
            "callbacks still in flight at shutdown; retried after their claim lapses"
        );
    }
    Ok(())
}

/// `tenant`'s signing secrets, from the cache while fresh.
async fn signing_secrets(signing: &Signing, cache: &SecretsCache, tenant: &str) -> Secrets {
    if let Some((read, secrets)) = cache.lock().await.get(tenant) {
        if read.elapsed() < SECRETS_TTL {
            return secrets.clone();
        }
    }
    let read = signing.secrets(tenant).await;
    let mut cache = cache.lock().await;
    if cache.len() >= 256 {
        cache.clear();
    }
    cache.insert(tenant.to_owned(), (Instant::now(), read.clone()));
    read
}

async fn deliver(
    store: &Store,
    client: &reqwest::Client,
    destinations: &crate::policy::DestinationPolicy,
    signed: Option<Secrets>,
    config: &CallbackConfig,
    callback: ClaimedCallback,
) {
    let body = callback.body.to_string();
    let timestamp = chrono::Utc::now().timestamp();
    let signature = signed
        .map(|secrets| {
            secrets.map(|secrets| {
                contract_callbacks::signature(
                    &secrets,
                    &callback.idempotency_key,
                    timestamp,
                    body.as_bytes(),
                )
            })
        })
        .transpose();
    let refused = reqwest::Url::parse(&callback.url)
        .map_err(|error| format!("not a URL: {error}"))
        .and_then(|url| crate::policy::check_url(destinations, &url))
        .and(signature.as_ref().map(|_| ()).map_err(Clone::clone));
    let mut request = client
        .post(&callback.url)
        .header("content-type", "application/json")
        .header("idempotency-key", &callback.idempotency_key)
        .header("ce-specversion", "1.0")
        .header("ce-id", &callback.idempotency_key)
        .header("ce-type", "io.execplane.attempt.result")
        .header("ce-source", crate::store::CE_SOURCE)
        .timeout(config.request_timeout);
    if let Some(traceparent) = &callback.traceparent {
        request = request.header("traceparent", traceparent);
    }
    if let Ok(Some(signature)) = &signature {
        request = request
            .header("webhook-id", &callback.idempotency_key)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature);
    }
    let request = request.body(body);
    let sent = match refused {
        Ok(()) => request
            .send()
            .await
            .map_err(|error| crate::policy::describe_http_error(&error)),
        Err(refusal) => Err(refusal),
    };
    let sent = match sent {
        Ok(response) if response.status().is_success() => Ok(Some(response.status().as_u16())),
        Ok(response) => Err((
            Some(response.status().as_u16()),
            format!("HTTP {}", response.status()),
        )),
        Err(error) => Err((None, error)),
    };
    conclude(store, config, callback, sent).await;
}

/// Produces a topic callback: the exec.results.v1 record, as it is, to the
/// JobSpec's topic (under the deployment's prefix), keyed by the attempt.
async fn produce(
    kafka: &crate::kafka::KafkaConfig,
    producer: &rdkafka::producer::FutureProducer,
    config: &CallbackConfig,
    callback: &ClaimedCallback,
) -> Result<Option<u16>, (Option<u16>, String)> {
    let (Some(headers), Some(payload)) = (&callback.headers, &callback.payload) else {
        return Err((None, "the queued record is missing".into()));
    };
    let empty = serde_json::Map::new();
    let headers = crate::codec::Headers::from_json(headers.as_object().unwrap_or(&empty));
    let topic = kafka.topic(&callback.url);
    let key = callback.attempt_id.to_string();
    let record = rdkafka::producer::FutureRecord::to(&topic)
        .key(&key)
        .payload(payload)
        .headers(crate::kafka::owned_headers(&headers));
    match tokio::time::timeout(
        config.request_timeout,
        producer.send(record, config.request_timeout),
    )
    .await
    {
        Ok(Ok(_)) => Ok(None),
        Ok(Err((error, _))) => Err((None, format!("producing to {topic}: {error}"))),
        Err(_) => Err((
            None,
            format!("producing to {topic}: no acknowledgement in time"),
        )),
    }
}

/// Records a delivery's outcome, or schedules the next try.
async fn conclude(
    store: &Store,
    config: &CallbackConfig,
    callback: ClaimedCallback,
    sent: Result<Option<u16>, (Option<u16>, String)>,
) {
    let (delivered, status, error) = match sent {
        Ok(status) => (true, status, None),
        Err((status, error)) => (false, status, Some(error)),
    };
    crate::telemetry::metrics::callback(delivered);
    let give_up = !delivered && callback.attempts >= config.max_attempts;
    if delivered || give_up {
        // A topic's callback is recorded as `kafka:<topic>`.
        let url = match callback.channel {
            Channel::Http => callback.url.clone(),
            Channel::Kafka => format!("{}{}", contract_callbacks::TOPIC_SCHEME, callback.url),
        };
        let outcome = Input::CallbackOutcome {
            attempt_id: callback.attempt_id,
            url,
            delivered,
            attempts: u32::try_from(callback.attempts).unwrap_or(0),
            http_status: status,
            error: error.clone(),
            idempotency_key: callback.idempotency_key.clone(),
        };
        let envelope = InputEnvelope {
            input_id: match callback.channel {
                Channel::Http => format!("callback:{}", callback.idempotency_key),
                Channel::Kafka => format!("callback-topic:{}", callback.idempotency_key),
            },
            source: "callbacks".into(),
            input: outcome,
        };
        if let Err(failure) = store
            .process_batch(&[envelope], chrono::Utc::now().timestamp_millis())
            .await
        {
            warn!(%failure, "recording the callback outcome failed; will retry");
            return;
        }
        if let Err(failure) = store
            .finish_callback(&callback, delivered, status, error.as_deref())
            .await
        {
            warn!(%failure, "closing the callback failed");
        }
        info!(attempt_id = %callback.attempt_id, delivered, attempts = callback.attempts, "callback done");
        return;
    }
    let delay = backoff(config, callback.attempts);
    warn!(attempt_id = %callback.attempt_id, attempts = callback.attempts, error = error.as_deref().unwrap_or(""), retry_in_ms = delay.as_millis() as u64, "callback failed");
    if let Err(failure) = store
        .retry_callback(
            &callback,
            delay,
            status,
            error.as_deref().unwrap_or("unknown"),
        )
        .await
    {
        warn!(%failure, "scheduling the callback retry failed");
    }
}
