//! Placement, as a pure decision: which live instance takes which queued
//! attempt. The store runs it inside the transaction that created the
//! attempts; the dispatcher runs it on a timer for the rest (retries after
//! their backoff, attempts that found no runner at first).

use std::collections::BTreeMap;

use uuid::Uuid;

/// A queued attempt waiting for a runner.
#[derive(Clone, Debug, PartialEq)]
pub struct QueuedAttempt {
    pub attempt_id: Uuid,
    pub runner_type: String,
    /// The operation's wire name: only an instance that lists it may take it.
    pub operation: String,
    pub pool: BTreeMap<String, String>,
    pub capabilities: Vec<String>,
}

/// A runner instance with a fresh presence and its active leases.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveInstance {
    pub instance_id: String,
    pub runner_type: String,
    pub pool: BTreeMap<String, String>,
    pub capabilities: Vec<String>,
    /// The operations it announced it runs.
    pub operations: Vec<String>,
    pub capacity: i64,
    pub in_flight: i64,
}

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
                    && instance.operations.contains(&attempt.operation)
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

#[cfg(test)]
mod tests {
    use super::*;

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
            operations: vec!["verify.tcp.connect".into(), "ssh.command.run".into()],
            capacity,
            in_flight,
        }
    }

    fn queued(index: u128, runner_type: &str, zone: Option<&str>) -> QueuedAttempt {
        QueuedAttempt {
            attempt_id: Uuid::from_u128(index),
            runner_type: runner_type.into(),
            operation: if runner_type == "ssh" {
                "ssh.command.run".into()
            } else {
                "verify.tcp.connect".into()
            },
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

    #[test]
    fn an_instance_takes_only_the_operations_it_announced() {
        let mut older = instance("old", "verification", 4, 0, None);
        older.operations = vec!["verify.tcp.connect".into()];
        let newer = instance("new", "verification", 4, 3, None);
        let mut http = queued(1, "verification", None);
        http.operation = "verify.http.endpoint".into();
        assert!(
            place(&[http.clone()], &[older.clone(), newer.clone()]).is_empty(),
            "neither lists verify.http.endpoint"
        );
        let mut both = newer;
        both.operations.push("verify.http.endpoint".into());
        assert_eq!(
            place(&[http, queued(2, "verification", None)], &[older, both]),
            vec![
                (Uuid::from_u128(1), "new".to_owned()),
                (Uuid::from_u128(2), "old".to_owned())
            ],
            "the busier instance takes what only it runs"
        );
    }
}
