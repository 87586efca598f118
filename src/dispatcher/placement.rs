//! Placement: each queued attempt goes to a live instance of its runner type
//! whose pool labels and capabilities cover the requirements and which has
//! free capacity, least loaded first. No fit: the attempt stays queued and
//! `schedule_to_start` applies.

use std::sync::Arc;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use uuid::Uuid;

use super::{DispatcherConfig, DispatcherError};
use crate::contract::Input;
use crate::store::{InputEnvelope, LiveInstance, QueuedAttempt, Store};

/// Pure placement: `(attempt, instance)` pairs, never over capacity.
pub fn place(queued: &[QueuedAttempt], instances: &[LiveInstance]) -> Vec<(Uuid, String)> {
    let mut load: Vec<i64> = instances
        .iter()
        .map(|instance| instance.in_flight)
        .collect();
    let mut grants = Vec::new();
    for attempt in queued {
        let best = instances
            .iter()
            .enumerate()
            .filter(|(index, instance)| {
                instance.runner_type == attempt.runner_type
                    && load[*index] < instance.capacity
                    && attempt
                        .pool
                        .iter()
                        .all(|(key, value)| instance.pool.get(key) == Some(value))
                    && attempt
                        .capabilities
                        .iter()
                        .all(|capability| instance.capabilities.contains(capability))
            })
            .min_by(|(left, a), (right, b)| {
                // Least loaded by fill ratio, then by id for determinism.
                let left_fill = load[*left] as f64 / a.capacity.max(1) as f64;
                let right_fill = load[*right] as f64 / b.capacity.max(1) as f64;
                left_fill
                    .total_cmp(&right_fill)
                    .then_with(|| a.instance_id.cmp(&b.instance_id))
            })
            .map(|(index, _)| index);
        if let Some(index) = best {
            load[index] += 1;
            grants.push((attempt.attempt_id, instances[index].instance_id.clone()));
        }
    }
    grants
}

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
    Ok(outcome.events.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn instance(
        id: &str,
        runner_type: &str,
        capacity: i64,
        in_flight: i64,
        zone: Option<&str>,
    ) -> LiveInstance {
        LiveInstance {
            instance_id: id.into(),
            runner_type: runner_type.into(),
            pool: zone
                .map(|zone| BTreeMap::from([("zone".to_owned(), zone.to_owned())]))
                .unwrap_or_default(),
            capabilities: vec!["ipv6".into()],
            capacity,
            in_flight,
        }
    }

    fn queued(index: u128, runner_type: &str, zone: Option<&str>) -> QueuedAttempt {
        QueuedAttempt {
            attempt_id: Uuid::from_u128(index),
            runner_type: runner_type.into(),
            pool: zone
                .map(|zone| BTreeMap::from([("zone".to_owned(), zone.to_owned())]))
                .unwrap_or_default(),
            capabilities: vec![],
        }
    }

    #[test]
    fn least_loaded_first_never_over_capacity_and_labels_respected() {
        let instances = vec![
            instance("a", "verification", 2, 1, Some("dmz")),
            instance("b", "verification", 2, 0, None),
            instance("s", "ssh", 5, 0, None),
        ];
        let attempts: Vec<QueuedAttempt> = (0..5)
            .map(|index| queued(index, "verification", None))
            .collect();
        let grants = place(&attempts, &instances);
        assert_eq!(grants.len(), 3, "capacity 2 + 2 with 1 in flight");
        assert_eq!(grants[0].1, "b");
        assert!(grants.iter().all(|(_, instance)| instance != "s"));
        let dmz = place(&[queued(9, "verification", Some("dmz"))], &instances);
        assert_eq!(dmz, vec![(Uuid::from_u128(9), "a".to_owned())]);
        assert!(place(&[queued(9, "verification", Some("lan"))], &instances).is_empty());
        let mut needs = queued(10, "verification", None);
        needs.capabilities = vec!["gpu".into()];
        assert!(place(&[needs], &instances).is_empty());
    }
}
