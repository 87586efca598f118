//! Placement, as a pure decision: which live instance takes which queued
//! attempt. The store runs it inside the transaction that created the
//! attempts; the dispatcher runs it on a timer for the rest (retries after
//! their backoff, attempts that found no runner at first), and it alone
//! places attempts with target keys, each in its turn on its keys.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::contract::TargetKey;

/// A queued attempt waiting for a runner.
#[derive(Clone, Debug, PartialEq)]
pub struct QueuedAttempt {
    pub attempt_id: Uuid,
    pub runner_type: String,
    /// The operation's wire name: only an instance that lists it may take it.
    pub operation: String,
    pub pool: BTreeMap<String, String>,
    pub capabilities: Vec<String>,
    /// The keys it holds once leased, with their limits.
    pub target_keys: Vec<TargetKey>,
}

/// Who holds one target key and who waits for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyQueue {
    /// Attempts holding it (leased, running or cancelling).
    pub holders: u32,
    /// The head of its queue: attempts due now that wait for it, oldest
    /// first, each with the limit it recorded for the key. A list cut
    /// shorter than a limit only delays the attempts beyond it.
    pub waiting: Vec<(Uuid, u32)>,
}

/// The target keys of the attempts being placed, by key.
pub type KeyBoard = BTreeMap<String, KeyQueue>;

/// Why a queued attempt waits for one of its keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyWait {
    pub key: String,
    pub limit: u32,
    pub holders: u32,
    /// Attempts due before it that wait for the key too.
    pub ahead: u32,
}

/// The keys `attempt` cannot take now, with why (empty: every key has
/// room for it). Arrival order per key: of the attempts waiting for a key
/// on `board`, the oldest `limit - holders` may take it; the rest wait, so
/// a key's queue is never overtaken (the placement task first leaves out
/// waiters nobody could take, [`without_unplaceable`]).
pub fn key_waits(attempt_id: Uuid, keys: &[TargetKey], board: &KeyBoard) -> Vec<KeyWait> {
    let mut waits = Vec::new();
    for key in keys {
        let queue = board.get(&key.key).cloned().unwrap_or_default();
        let position = queue.waiting.iter().position(|(id, _)| *id == attempt_id);
        let room = key.limit.saturating_sub(queue.holders) as usize;
        if position.is_none_or(|position| position >= room) {
            waits.push(KeyWait {
                key: key.key.clone(),
                limit: key.limit,
                holders: queue.holders,
                ahead: position.map_or(queue.waiting.len(), |position| position) as u32,
            });
        }
    }
    waits
}

/// The attempts `board` lets take a key now, each on at least one of its
/// keys (whether on all of them is [`key_waits`]'s to say).
pub fn key_candidates(board: &KeyBoard) -> std::collections::BTreeSet<Uuid> {
    board
        .values()
        .flat_map(|queue| {
            queue
                .waiting
                .iter()
                .enumerate()
                .filter(|(position, (_, limit))| {
                    *position < limit.saturating_sub(queue.holders) as usize
                })
                .map(|(_, (attempt_id, _))| *attempt_id)
        })
        .collect()
}

/// Whether `instance` could ever take `attempt` (capacity aside): its
/// type, an announced operation, the pool labels and capabilities asked.
pub fn fits(attempt: &QueuedAttempt, instance: &LiveInstance) -> bool {
    instance.runner_type == attempt.runner_type
        && instance.operations.contains(&attempt.operation)
        && attempt
            .pool
            .iter()
            .all(|(key, value)| instance.pool.get(key) == Some(value))
        && attempt
            .capabilities
            .iter()
            .all(|capability| instance.capabilities.contains(capability))
}

/// `board` without the waiters no live instance could take (their type has
/// no instance, or none has their pool or capabilities): such a waiter does
/// not hold a key's queue back, or one tenant's unplaceable job would stop
/// every other job on a shared target until its `schedule_to_start`. It
/// takes its place again once an instance for it is live. `waiters` are
/// the board's waiters as read (one missing counts as unplaceable).
pub fn without_unplaceable(
    board: &KeyBoard,
    waiters: &[QueuedAttempt],
    instances: &[LiveInstance],
) -> KeyBoard {
    let placeable: std::collections::BTreeSet<Uuid> = waiters
        .iter()
        .filter(|attempt| instances.iter().any(|instance| fits(attempt, instance)))
        .map(|attempt| attempt.attempt_id)
        .collect();
    board
        .iter()
        .map(|(key, queue)| {
            let mut queue = queue.clone();
            queue
                .waiting
                .retain(|(attempt_id, _)| placeable.contains(attempt_id));
            (key.clone(), queue)
        })
        .collect()
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

/// Pure placement: `(attempt, instance)` pairs, never over capacity, and
/// an attempt with target keys only in its turn on every key (`board` has
/// its keys; one missing is not known to be free).
pub fn place(
    queued: &[QueuedAttempt],
    instances: &[LiveInstance],
    board: &KeyBoard,
) -> Vec<(Uuid, String)> {
    let mut load: Vec<i64> = instances
        .iter()
        .map(|instance| instance.in_flight)
        .collect();
    let mut grants = Vec::new();
    for attempt in queued {
        if !key_waits(attempt.attempt_id, &attempt.target_keys, board).is_empty() {
            continue;
        }
        let best = instances
            .iter()
            .enumerate()
            .filter(|(index, instance)| load[*index] < instance.capacity && fits(attempt, instance))
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
            target_keys: vec![],
        }
    }

    fn place_free(queued: &[QueuedAttempt], instances: &[LiveInstance]) -> Vec<(Uuid, String)> {
        place(queued, instances, &KeyBoard::new())
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
        let grants = place_free(&attempts, &instances);
        assert_eq!(grants.len(), 3, "capacity 2 + 2 with 1 in flight");
        assert_eq!(grants[0].1, "b");
        assert!(grants.iter().all(|(_, instance)| instance != "s"));
        let dmz = place_free(&[queued(9, "verification", Some("dmz"))], &instances);
        assert_eq!(dmz, vec![(Uuid::from_u128(9), "a".to_owned())]);
        assert!(place_free(&[queued(9, "verification", Some("lan"))], &instances).is_empty());
        let mut needs = queued(10, "verification", None);
        needs.capabilities = vec!["gpu".into()];
        assert!(place_free(&[needs], &instances).is_empty());
    }

    #[test]
    fn an_instance_takes_only_the_operations_it_announced() {
        let mut older = instance("old", "verification", 4, 0, None);
        older.operations = vec!["verify.tcp.connect".into()];
        let newer = instance("new", "verification", 4, 3, None);
        let mut http = queued(1, "verification", None);
        http.operation = "verify.http.endpoint".into();
        assert!(
            place_free(&[http.clone()], &[older.clone(), newer.clone()]).is_empty(),
            "neither lists verify.http.endpoint"
        );
        let mut both = newer;
        both.operations.push("verify.http.endpoint".into());
        assert_eq!(
            place_free(&[http, queued(2, "verification", None)], &[older, both]),
            vec![
                (Uuid::from_u128(1), "new".to_owned()),
                (Uuid::from_u128(2), "old".to_owned())
            ],
            "the busier instance takes what only it runs"
        );
    }

    fn keyed(index: u128, keys: &[(&str, u32)]) -> QueuedAttempt {
        let mut attempt = queued(index, "verification", None);
        attempt.target_keys = keys
            .iter()
            .map(|(key, limit)| TargetKey {
                key: (*key).to_owned(),
                limit: *limit,
            })
            .collect();
        attempt
    }

    /// Keys with their holders and waiters, every waiter at limit 1 but
    /// on keys named `...:2` (limit 2).
    fn board(keys: &[(&str, u32, &[u128])]) -> KeyBoard {
        keys.iter()
            .map(|(key, holders, waiting)| {
                let limit = if key.ends_with(":2") { 2 } else { 1 };
                (
                    (*key).to_owned(),
                    KeyQueue {
                        holders: *holders,
                        waiting: waiting
                            .iter()
                            .map(|index| (Uuid::from_u128(*index), limit))
                            .collect(),
                    },
                )
            })
            .collect()
    }

    fn granted(grants: Vec<(Uuid, String)>) -> Vec<u128> {
        grants.into_iter().map(|(id, _)| id.as_u128()).collect()
    }

    #[test]
    fn a_key_is_taken_in_arrival_order_up_to_its_limit() {
        let instances = vec![instance("a", "verification", 10, 0, None)];
        let one = [keyed(1, &[("node:h", 1)]), keyed(2, &[("node:h", 1)])];
        assert_eq!(
            granted(place(&one, &instances, &board(&[("node:h", 0, &[1, 2])]))),
            vec![1],
            "limit 1: the older only"
        );
        assert!(
            place(&one, &instances, &board(&[("node:h", 1, &[1, 2])])).is_empty(),
            "held: neither"
        );
        let two = [keyed(1, &[("node:2", 2)]), keyed(2, &[("node:2", 2)])];
        let keys = board(&[("node:2", 0, &[1, 2, 3])]);
        assert_eq!(granted(place(&two, &instances, &keys)), vec![1, 2]);
        assert_eq!(
            key_candidates(&keys)
                .into_iter()
                .map(|id| id.as_u128())
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert!(
            place(&one, &instances, &KeyBoard::new()).is_empty(),
            "keys nobody read are not known to be free"
        );
        assert_eq!(
            granted(place(
                &[keyed(3, &[("node:h", 1)]), queued(4, "verification", None)],
                &instances,
                &board(&[("node:h", 0, &[3])])
            )),
            vec![3, 4],
            "attempts without keys are placed as before"
        );
    }

    #[test]
    fn an_older_waiter_is_never_overtaken_and_says_so() {
        let instances = vec![instance("a", "verification", 10, 0, None)];
        // 9 waits on h (another runner type, or no runner fits it): 2 waits
        // behind it even though h has no holder.
        let younger = keyed(2, &[("node:h", 1)]);
        let keys = board(&[("node:h", 0, &[9, 2])]);
        assert!(place(std::slice::from_ref(&younger), &instances, &keys).is_empty());
        assert_eq!(
            key_waits(younger.attempt_id, &younger.target_keys, &keys),
            vec![KeyWait {
                key: "node:h".into(),
                limit: 1,
                holders: 0,
                ahead: 1
            }]
        );
        // 1 needs h and g, and g is held: 2 (h only) still waits behind 1,
        // so 1 is not starved by a stream of attempts on h.
        let keys = board(&[("node:g", 1, &[1]), ("node:h", 0, &[1, 2])]);
        let both = keyed(1, &[("node:g", 1), ("node:h", 1)]);
        assert!(place(&[both, younger.clone()], &instances, &keys).is_empty());
        assert_eq!(
            key_waits(younger.attempt_id, &younger.target_keys, &keys)[0].ahead,
            1
        );
    }

    #[test]
    fn a_waiter_no_instance_could_take_does_not_hold_the_key_back() {
        let instances = vec![instance("a", "verification", 10, 0, None)];
        // 1 asks for a pool no live instance has; 2, behind it on h, runs.
        let mut stranded = keyed(1, &[("node:h", 1)]);
        stranded.pool = BTreeMap::from([("zone".to_owned(), "nowhere".to_owned())]);
        let younger = keyed(2, &[("node:h", 1)]);
        let read = board(&[("node:h", 0, &[1, 2])]);
        let waiters = [stranded.clone(), younger.clone()];
        assert!(place(std::slice::from_ref(&younger), &instances, &read).is_empty());
        let fair = without_unplaceable(&read, &waiters, &instances);
        assert_eq!(
            granted(place(std::slice::from_ref(&younger), &instances, &fair)),
            vec![2]
        );
        // Once an instance for it is live, it is first again.
        let dmz = vec![
            instances[0].clone(),
            instance("z", "verification", 10, 0, Some("nowhere")),
        ];
        let fair = without_unplaceable(&read, &waiters, &dmz);
        assert!(place(std::slice::from_ref(&younger), &dmz, &fair).is_empty());
    }
}
