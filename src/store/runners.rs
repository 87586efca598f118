//! Runner presence (soft state, not event-sourced) and what placement reads.

use std::collections::BTreeMap;

use sqlx::Row;

use super::rows::timestamp;
use super::{Store, StoreError};
use crate::codec::{PresenceRecord, PresenceStatus};
use crate::contract::UnixMillis;

pub use crate::attempt::placement::{KeyBoard, KeyQueue, LiveInstance, QueuedAttempt};

/// Where a page of queued attempts ended: (available_at, attempt_id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuedPosition(pub UnixMillis, pub uuid::Uuid);

impl Store {
    /// Deletes inbox ids older than `inbox_retention` and runner instances
    /// not seen for `instance_retention`; returns how many of each.
    pub async fn prune(
        &self,
        inbox_retention: std::time::Duration,
        instance_retention: std::time::Duration,
    ) -> Result<(u64, u64), StoreError> {
        let inbox =
            sqlx::query("DELETE FROM inbox WHERE processed_at < now() - make_interval(secs => $1)")
                .bind(inbox_retention.as_secs_f64())
                .execute(&self.pool)
                .await?
                .rows_affected();
        let instances = sqlx::query(
            "DELETE FROM runner_instances r WHERE last_seen_at < now() - make_interval(secs => $1)
             AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.runner_instance = r.instance_id AND l.active)",
        )
        .bind(instance_retention.as_secs_f64())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok((inbox, instances))
    }

    /// The instances not stopped whose tools run without the whole sandbox
    /// (`unsandboxed`, `sandboxed, host network`): (instance, type, isolation).
    pub async fn weakly_isolated_instances(
        &self,
    ) -> Result<Vec<(String, String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT instance_id, runner_type, isolation FROM runner_instances
             WHERE status <> 'stopped' AND isolation IN ('unsandboxed', 'sandboxed, host network')
             ORDER BY instance_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// How many ready runner instances, seen within `ttl`, announce each
    /// operation.
    pub async fn live_operations(
        &self,
        ttl: std::time::Duration,
    ) -> Result<std::collections::HashMap<String, i64>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT operation, count(*) FROM runner_instances, \
             jsonb_array_elements_text(operations) AS operation \
             WHERE status = 'ready' AND last_seen_at > now() - make_interval(secs => $1) \
             GROUP BY operation",
        )
        .bind(ttl.as_secs_f64())
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().collect())
    }

    /// Upserts presence records; an older record never overwrites a newer one.
    pub async fn upsert_presence(&self, records: &[PresenceRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        // One row per instance (the newest), or the upsert would touch a row twice.
        let mut newest: BTreeMap<&str, &PresenceRecord> = BTreeMap::new();
        for record in records {
            let entry = newest
                .entry(record.runner_instance.as_str())
                .or_insert(record);
            if record.sent_at > entry.sent_at {
                *entry = record;
            }
        }
        let rows: Vec<serde_json::Value> = newest
            .into_values()
            .map(|record| {
                let pool: BTreeMap<&str, &str> = record
                    .pool
                    .iter()
                    .map(|label| (label.key.as_str(), label.value.as_str()))
                    .collect();
                serde_json::json!({
                    "instance_id": record.runner_instance,
                    "runner_type": record.runner_type,
                    "version": record.version,
                    "pool": pool,
                    "capabilities": record.capabilities,
                    "operations": record.operations,
                    "capacity": record.capacity,
                    "in_flight": record.in_flight,
                    "started_at": timestamp(record.started_at),
                    "last_seen_at": timestamp(record.sent_at),
                    "status": match record.status {
                        PresenceStatus::Ready => "ready",
                        PresenceStatus::Draining => "draining",
                        PresenceStatus::Stopped => "stopped",
                    },
                    "work_partition": record.work_partition,
                    "isolation": record.isolation,
                })
            })
            .collect();
        sqlx::query(include_str!("sql/upsert_presence.sql"))
            .bind(serde_json::Value::Array(rows))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A page of queued attempts of `runner_type` whose backoff has passed,
    /// oldest first, after `after` (the last one of the previous page). One
    /// index range scan: the cost does not grow with the backlog.
    pub async fn queued_attempts(
        &self,
        runner_type: &str,
        now: UnixMillis,
        after: Option<QueuedPosition>,
        limit: i64,
    ) -> Result<Vec<(QueuedAttempt, QueuedPosition)>, StoreError> {
        // Before any attempt (Postgres has no room for chrono's minimum).
        let (after_at, after_id) = after.map_or((timestamp(0), uuid::Uuid::nil()), |position| {
            (timestamp(position.0), position.1)
        });
        let rows = sqlx::query(include_str!("sql/queued_attempts.sql"))
            .bind(runner_type)
            .bind(timestamp(now))
            .bind(after_at)
            .bind(after_id)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(queued_from_row).collect()
    }

    /// The queued attempts among `attempt_ids` that are due by `now`.
    pub async fn queued_by_id(
        &self,
        attempt_ids: &[uuid::Uuid],
        now: UnixMillis,
    ) -> Result<Vec<QueuedAttempt>, StoreError> {
        let rows = sqlx::query(include_str!("sql/queued_by_id.sql"))
            .bind(attempt_ids)
            .bind(timestamp(now))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| queued_from_row(row).map(|(attempt, _)| attempt))
            .collect()
    }

    /// The next `count` keys after `after`, in key order, that an attempt
    /// due by `now` waits for.
    pub async fn waited_keys(
        &self,
        after: &str,
        now: UnixMillis,
        count: u32,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(include_str!("sql/waited_keys.sql"))
            .bind(after)
            .bind(timestamp(now))
            .bind(i32::try_from(count).unwrap_or(i32::MAX))
            .fetch_all(&self.pool)
            .await?)
    }

    /// Who holds and who waits for each of `keys`: its holders, and the
    /// first `depth` attempts due by `now` waiting for it, oldest first.
    pub async fn key_board(
        &self,
        keys: &[String],
        now: UnixMillis,
        depth: u32,
    ) -> Result<KeyBoard, StoreError> {
        if keys.is_empty() {
            return Ok(KeyBoard::new());
        }
        let rows = sqlx::query(include_str!("sql/key_board.sql"))
            .bind(keys)
            .bind(timestamp(now))
            .bind(i64::from(depth))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let holders: i64 = row.get(1);
                let waiting: Vec<uuid::Uuid> = row.get(2);
                let limits: Vec<i32> = row.get(3);
                let waiting = waiting
                    .into_iter()
                    .zip(limits)
                    .map(|(attempt_id, limit)| (attempt_id, u32::try_from(limit).unwrap_or(1)))
                    .collect();
                (
                    row.get(0),
                    KeyQueue {
                        holders: u32::try_from(holders).unwrap_or(u32::MAX),
                        waiting,
                    },
                )
            })
            .collect())
    }

    /// Instances ready to take work whose presence is newer than `fresh_after`
    /// and newer than any lease they lost to the heartbeat timer.
    pub async fn live_instances(
        &self,
        fresh_after: UnixMillis,
    ) -> Result<Vec<LiveInstance>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        live_instances_in(&mut conn, fresh_after).await
    }
}

/// A queued attempt as placement reads it, and where it is in the queue.
fn queued_from_row(
    row: &sqlx::postgres::PgRow,
) -> Result<(QueuedAttempt, QueuedPosition), StoreError> {
    let requirements: Option<serde_json::Value> = row.get(2);
    let requirements: crate::contract::RunnerRequirements = match requirements {
        Some(value) => serde_json::from_value(value)
            .map_err(|error| StoreError::Corrupt(format!("runner requirements: {error}")))?,
        None => Default::default(),
    };
    let attempt_id: uuid::Uuid = row.get(0);
    let available_at: chrono::DateTime<chrono::Utc> = row.get(3);
    let target_keys = serde_json::from_value(row.get(5))
        .map_err(|error| StoreError::Corrupt(format!("target keys: {error}")))?;
    Ok((
        QueuedAttempt {
            attempt_id,
            runner_type: row.get::<Option<String>, _>(1).unwrap_or_default(),
            operation: row.get::<Option<String>, _>(4).unwrap_or_default(),
            pool: requirements.pool,
            capabilities: requirements.capabilities,
            target_keys,
        },
        QueuedPosition(super::rows::millis(available_at), attempt_id),
    ))
}

/// [`Store::live_instances`] inside a caller's transaction.
pub(crate) async fn live_instances_in(
    conn: &mut sqlx::PgConnection,
    fresh_after: UnixMillis,
) -> Result<Vec<LiveInstance>, StoreError> {
    let rows = sqlx::query(include_str!("sql/live_instances.sql"))
        .bind(timestamp(fresh_after))
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| LiveInstance {
            instance_id: row.get(0),
            runner_type: row.get(1),
            pool: serde_json::from_value(row.get(2)).unwrap_or_default(),
            capabilities: serde_json::from_value(row.get(3)).unwrap_or_default(),
            capacity: i64::from(row.get::<i32, _>(4)),
            in_flight: row.get(5),
            operations: serde_json::from_value(row.get(6)).unwrap_or_default(),
        })
        .collect())
}

/// The tables the hot path reads by key; their plans must not wait for
/// autovacuum to have analysed them.
/// The advisory lock key of the analysing dispatcher ("analyze").
const ANALYZE_LOCK: i64 = 0x0061_6e61_6c79_7a65;

const HOT_TABLES: [&str; 5] = ["jobs", "attempts", "leases", "inbox", "runner_instances"];

impl Store {
    /// Analyses each hot table that has more than doubled (by at least
    /// 1,000 rows) since it was last analysed: plans go wrong when a table
    /// grown from empty is planned as empty, and growth is what changes
    /// them (the jobs row is rewritten on every event; counting those
    /// updates would analyse it every few seconds for nothing). Returns the
    /// tables analysed. One dispatcher at a time does it (an advisory lock).
    pub async fn analyze_if_stale(&self) -> Result<Vec<String>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let stale: Vec<String> = sqlx::query_scalar(include_str!("sql/stale_tables.sql"))
            .bind(HOT_TABLES)
            .fetch_all(&mut *conn)
            .await?;
        if stale.is_empty() {
            return Ok(stale);
        }
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(ANALYZE_LOCK)
            .fetch_one(&mut *conn)
            .await?;
        if !locked {
            return Ok(Vec::new());
        }
        let mut analysed = Vec::new();
        for table in stale {
            // The name comes from the fixed list above, never from input.
            if HOT_TABLES.contains(&table.as_str()) {
                sqlx::query(&format!("ANALYZE {table}"))
                    .execute(&mut *conn)
                    .await?;
                analysed.push(table);
            }
        }
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(ANALYZE_LOCK)
            .execute(&mut *conn)
            .await?;
        Ok(analysed)
    }
}
