//! Placement: each queued attempt goes to a live instance of its runner type
//! whose pool labels and capabilities cover the requirements and which has
//! free capacity, least loaded first. No fit: the attempt stays queued and
//! `schedule_to_start` applies.

use std::sync::Arc;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{DispatcherConfig, DispatcherError};
use uuid::Uuid;

use crate::attempt::placement::place;
use crate::store::{InputEnvelope, Store};
use crate::store::{LiveInstance, QueuedAttempt};

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

/// The placement decision, wherever it is made (here, and for new
/// attempts inside intake's transaction): each queued attempt to the least
/// loaded live instance of its type whose pool labels and capabilities
/// cover it and which has free capacity (`attempt::placement::place`).
pub fn choose(queued: &[QueuedAttempt], instances: &[LiveInstance]) -> Vec<(Uuid, String)> {
    place(queued, instances)
}

/// Queued attempts read per page.
const PAGE: i64 = 500;
/// Pages read per runner type per round: attempts nobody can take (their
/// pool or capabilities match no live instance) cannot keep the rest of the
/// queue waiting for more than this many pages a round.
const MAX_PAGES: usize = 4;

/// One placement round; returns the number of leases granted. It costs the
/// same whatever the backlog: only runner types with free capacity are
/// read, a page at a time, as far as that capacity goes.
pub async fn place_once(
    store: &Store,
    config: &DispatcherConfig,
) -> Result<usize, DispatcherError> {
    let now = chrono::Utc::now().timestamp_millis();
    let fresh_after = now - i64::try_from(config.presence_ttl.as_millis()).unwrap_or(i64::MAX);
    let instances = store.live_instances(fresh_after).await?;
    let mut free: std::collections::BTreeMap<&str, i64> = Default::default();
    for instance in &instances {
        *free.entry(instance.runner_type.as_str()).or_default() +=
            (instance.capacity - instance.in_flight).max(0);
    }
    let mut grants = Vec::new();
    // Instances with what this round already gave them.
    let mut loaded = instances.clone();
    for (runner_type, capacity) in free {
        let mut left = capacity;
        let mut after = None;
        for _ in 0..MAX_PAGES {
            if left <= 0 {
                break;
            }
            let page = store
                .queued_attempts(runner_type, now, after, PAGE.min(left * 4).max(1))
                .await?;
            let Some((_, last)) = page.last() else {
                break;
            };
            after = Some(*last);
            let full_page = page.len() as i64 >= PAGE.min(left * 4).max(1);
            let queued: Vec<_> = page.into_iter().map(|(attempt, _)| attempt).collect();
            let placed = choose(&queued, &loaded);
            for (_, instance_id) in &placed {
                if let Some(instance) = loaded
                    .iter_mut()
                    .find(|instance| &instance.instance_id == instance_id)
                {
                    instance.in_flight += 1;
                }
            }
            left -= placed.len() as i64;
            grants.extend(placed);
            if !full_page {
                break;
            }
        }
    }
    if grants.is_empty() {
        return Ok(0);
    }
    let inputs: Vec<InputEnvelope> = grants
        .into_iter()
        .map(|(attempt_id, runner_instance)| InputEnvelope::grant(attempt_id, runner_instance))
        .collect();
    let outcome = store
        .process_batch(&inputs, chrono::Utc::now().timestamp_millis())
        .await?;
    crate::telemetry::metrics::record_events(&outcome.events);
    Ok(outcome.events.len())
}
