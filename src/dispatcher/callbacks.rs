//! HTTP callbacks of terminal states: POSTed at least once with exponential
//! backoff and jitter, an `Idempotency-Key` stable across retries, and a
//! bound on attempts; the outcome is recorded as a `callback_recorded` event.

use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::DispatcherError;
use crate::contract::Input;
use crate::store::{ClaimedCallback, InputEnvelope, Store};

#[derive(Clone, Debug)]
pub struct CallbackConfig {
    pub max_attempts: i32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub request_timeout: Duration,
    pub poll_interval: Duration,
    /// The operator's policy: where each tenant's callbacks may connect.
    pub policy: crate::policy::SharedPolicy,
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

pub(super) async fn run(
    store: Store,
    config: CallbackConfig,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    // One client per tenant, bound to its destination policy (callbacks
    // follow no redirects); bounded, cleared when full and whenever the
    // operator's policy was reloaded.
    let mut clients: std::collections::HashMap<String, reqwest::Client> = Default::default();
    let mut clients_policy = String::new();
    while !shutdown.is_cancelled() {
        let policy = config.policy.current();
        if policy.digest() != clients_policy {
            clients.clear();
            clients_policy = policy.digest().to_owned();
        }
        let claimed = match store.claim_callbacks(32, config.request_timeout * 3).await {
            Ok(claimed) => claimed,
            Err(error) => {
                warn!(%error, "claiming callbacks failed");
                Vec::new()
            }
        };
        let busy = !claimed.is_empty();
        let mut deliveries = Vec::with_capacity(claimed.len());
        let (shared_store, shared_config) = (&store, &config);
        for callback in claimed {
            let tenant = callback
                .body
                .get("tenant")
                .and_then(|tenant| tenant.as_str())
                .unwrap_or_default()
                .to_owned();
            if !clients.contains_key(&tenant) {
                if clients.len() >= 256 {
                    clients.clear();
                }
                let destinations = policy.tenant(&tenant).destinations;
                let client = crate::policy::http_client(&destinations, 0)
                    .map_err(DispatcherError::HttpClient)?;
                clients.insert(tenant.clone(), client);
            }
            let client = clients[&tenant].clone();
            let destinations = policy.tenant(&tenant).destinations;
            deliveries.push(async move {
                deliver(
                    shared_store,
                    &client,
                    &destinations,
                    shared_config,
                    callback,
                )
                .await
            });
        }
        futures_util::future::join_all(deliveries).await;
        if busy {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(config.poll_interval) => {}
        }
    }
    Ok(())
}

async fn deliver(
    store: &Store,
    client: &reqwest::Client,
    destinations: &crate::policy::DestinationPolicy,
    config: &CallbackConfig,
    callback: ClaimedCallback,
) {
    let refused = reqwest::Url::parse(&callback.url)
        .map_err(|error| format!("not a URL: {error}"))
        .and_then(|url| crate::policy::check_url(destinations, &url));
    let mut request = client
        .post(&callback.url)
        .header("content-type", "application/json")
        .header("idempotency-key", &callback.idempotency_key)
        .header("ce-specversion", "1.0")
        .header("ce-id", &callback.idempotency_key)
        .header("ce-type", "io.execplane.attempt.result")
        .header("ce-source", crate::store::CE_SOURCE)
        .timeout(config.request_timeout)
        .body(callback.body.to_string());
    if let Some(traceparent) = &callback.traceparent {
        request = request.header("traceparent", traceparent);
    }
    let sent = match refused {
        Ok(()) => request
            .send()
            .await
            .map_err(|error| crate::policy::describe_http_error(&error)),
        Err(refusal) => Err(refusal),
    };
    let (delivered, status, error) = match sent {
        Ok(response) if response.status().is_success() => {
            (true, Some(response.status().as_u16()), None)
        }
        Ok(response) => (
            false,
            Some(response.status().as_u16()),
            Some(format!("HTTP {}", response.status())),
        ),
        Err(error) => (false, None, Some(error)),
    };
    crate::telemetry::metrics::callback(delivered);
    let give_up = !delivered && callback.attempts >= config.max_attempts;
    if delivered || give_up {
        let outcome = Input::CallbackOutcome {
            attempt_id: callback.attempt_id,
            url: callback.url.clone(),
            delivered,
            attempts: u32::try_from(callback.attempts).unwrap_or(0),
            http_status: status,
            error: error.clone(),
            idempotency_key: callback.idempotency_key.clone(),
        };
        let envelope = InputEnvelope {
            input_id: format!("callback:{}", callback.idempotency_key),
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
            .finish_callback(
                callback.attempt_id,
                callback.terminal_seq,
                delivered,
                status,
                error.as_deref(),
            )
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
            callback.attempt_id,
            callback.terminal_seq,
            delay,
            status,
            error.as_deref().unwrap_or("unknown"),
        )
        .await
    {
        warn!(%failure, "scheduling the callback retry failed");
    }
}
