//! Placement: each queued attempt goes to a live instance of its runner type
//! whose pool labels and capabilities cover the requirements and which has
//! free capacity, least loaded first. No fit: the attempt stays queued and
//! `schedule_to_start` applies.

use std::sync::Arc;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{DispatcherConfig, DispatcherError};
use crate::attempt::placement::place;
use crate::contract::Input;
use crate::store::{InputEnvelope, Store};

/// Places on a timer and whenever intake says something may be placeable.
pub(super) async fn run(
    store: Store,
    config: DispatcherConfig,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    while !shutdown.is_cancelled() {
        if let Err(error) = place_once(&store, &config).await {
            warn!(%error, "placement failed");
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.notified() => {}
            _ = tokio::time::sleep(config.placement_interval) => {}
        }
    }
    Ok(())
}

/// One placement round; returns the number of leases granted.
pub async fn place_once(
    store: &Store,
    config: &DispatcherConfig,
) -> Result<usize, DispatcherError> {
    let now = chrono::Utc::now().timestamp_millis();
    let queued = store.queued_attempts(now, 2_000).await?;
    if queued.is_empty() {
        return Ok(0);
    }
    let fresh_after = now - i64::try_from(config.presence_ttl.as_millis()).unwrap_or(i64::MAX);
    let instances = store.live_instances(fresh_after).await?;
    let grants = place(&queued, &instances);
    if grants.is_empty() {
        return Ok(0);
    }
    let inputs: Vec<InputEnvelope> = grants
        .into_iter()
        .map(|(attempt_id, runner_instance)| InputEnvelope {
            // One grant decision per attempt, whoever places it.
            input_id: format!("grant:{attempt_id}:{runner_instance}"),
            source: "placement".into(),
            input: Input::Grant {
                attempt_id,
                runner_instance,
            },
        })
        .collect();
    let outcome = store
        .process_batch(&inputs, chrono::Utc::now().timestamp_millis())
        .await?;
    crate::telemetry::metrics::record_events(&outcome.events);
    Ok(outcome.events.len())
}
