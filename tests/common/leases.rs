//! Leases as the event log has them: per-target concurrency checked from
//! outside, on the `lease_granted` and terminal events of each attempt.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use uuid::Uuid;

/// One attempt's lease, from its grant to its end.
#[derive(Debug)]
pub struct Held {
    pub attempt_id: Uuid,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

/// The leases of the attempts of `jobs`, by their (first) target key.
pub async fn by_key(pool: &PgPool, jobs: &[String]) -> BTreeMap<String, Vec<Held>> {
    let rows = sqlx::query(
        "SELECT a.attempt_id, a.target_keys->0->>'key', \
                min(e.occurred_at) FILTER (WHERE e.kind = 'lease_granted'), \
                min(e.occurred_at) FILTER (WHERE e.terminal) \
         FROM attempts a JOIN attempt_events e ON e.attempt_id = a.attempt_id \
         WHERE a.job_id = ANY($1) \
         GROUP BY a.attempt_id, a.target_keys",
    )
    .bind(jobs)
    .fetch_all(pool)
    .await
    .unwrap();
    let mut by_key: BTreeMap<String, Vec<Held>> = BTreeMap::new();
    for row in rows {
        let key: Option<String> = row.get(1);
        by_key
            .entry(key.expect("the attempt holds a target key"))
            .or_default()
            .push(Held {
                attempt_id: row.get(0),
                from: row.get(2),
                to: row.get(3),
            });
    }
    by_key
}

/// No two leases of one key overlap, and the keys `a` and `b` were held
/// at the same time at least once.
pub fn assert_serial_per_key_parallel_across(
    by_key: &mut BTreeMap<String, Vec<Held>>,
    a: &str,
    b: &str,
) {
    for (key, held) in by_key.iter_mut() {
        held.sort_by_key(|held| held.from);
        for pair in held.windows(2) {
            assert!(
                pair[1].from >= pair[0].to,
                "{key}: {} was leased at {} while {} held it until {}",
                pair[1].attempt_id,
                pair[1].from,
                pair[0].attempt_id,
                pair[0].to
            );
        }
    }
    let overlapping = by_key[a]
        .iter()
        .any(|x| by_key[b].iter().any(|y| x.from < y.to && y.from < x.to));
    assert!(overlapping, "{a} and {b} were never held side by side");
}
