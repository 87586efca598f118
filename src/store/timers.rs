//! The timer sweeper's claim: due deadlines, their jobs locked with
//! `FOR UPDATE ... SKIP LOCKED` (jobs first, the same lock order as every
//! batch), decided in the same transaction. A timer that fires twice is
//! decided once: the second firing finds it disarmed.

use sqlx::Row;
use uuid::Uuid;

use super::batch::{process_in, BatchOutcome, InputEnvelope};
use super::rows::{millis, timestamp};
use super::{Store, StoreError};
use crate::contract::{Input, TimerKind, UnixMillis};

impl Store {
    /// Fires up to `limit` deadlines due at or before `due_before` (at most
    /// `now`; the dispatcher passes the instant up to which every runner
    /// report has been decided). Jobs being written by another transaction
    /// are skipped and picked up on the next sweep.
    pub async fn sweep_timers(
        &self,
        now: UnixMillis,
        due_before: UnixMillis,
        limit: i64,
    ) -> Result<BatchOutcome, StoreError> {
        let due_by = due_before.min(now);
        // Most sweeps find nothing due: one indexed probe, no transaction.
        let earliest: Option<chrono::DateTime<chrono::Utc>> =
            sqlx::query_scalar(include_str!("sql/earliest_deadline.sql"))
                .fetch_one(&self.pool)
                .await?;
        if earliest.is_none_or(|earliest| millis(earliest) > due_by) {
            return Ok(BatchOutcome::default());
        }
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query(include_str!("sql/due_deadlines.sql"))
            .bind(timestamp(due_by))
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        if rows.is_empty() {
            tx.rollback().await?;
            return Ok(BatchOutcome::default());
        }
        let inputs: Vec<InputEnvelope> = rows
            .into_iter()
            .filter_map(|row| {
                let attempt_id: Uuid = row.get(0);
                let kind: String = row.get(1);
                let due: chrono::DateTime<chrono::Utc> = row.get(2);
                let timer = TimerKind::parse(&kind)?;
                Some(InputEnvelope {
                    input_id: format!("timer:{attempt_id}:{kind}:{}", millis(due)),
                    source: "timers".into(),
                    input: Input::TimerFired { attempt_id, timer },
                })
            })
            .collect();
        let outcome = process_in(&mut tx, &self.codec, &inputs, now, None).await?;
        tx.commit().await?;
        Ok(outcome)
    }
}

impl Store {
    /// Records that each (topic, partition) is decided until the instant
    /// given (never moving one back).
    pub async fn record_intake_progress(
        &self,
        progress: &[(String, i32, UnixMillis)],
    ) -> Result<(), StoreError> {
        if progress.is_empty() {
            return Ok(());
        }
        let topics: Vec<&str> = progress
            .iter()
            .map(|(topic, _, _)| topic.as_str())
            .collect();
        let partitions: Vec<i32> = progress
            .iter()
            .map(|(_, partition, _)| *partition)
            .collect();
        let instants: Vec<chrono::DateTime<chrono::Utc>> =
            progress.iter().map(|(_, _, at)| timestamp(*at)).collect();
        sqlx::query(include_str!("sql/record_intake_progress.sql"))
            .bind(&topics)
            .bind(&partitions)
            .bind(&instants)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The instant before which every one of `topic`'s `partitions` is
    /// decided, whoever decided it; `None` while any partition has no
    /// progress at all.
    pub async fn intake_decided_until(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Result<Option<UnixMillis>, StoreError> {
        let row = sqlx::query(
            "SELECT count(*), min(decided_until) FROM intake_progress
             WHERE topic = $1 AND partition >= 0 AND partition < $2",
        )
        .bind(topic)
        .bind(partitions)
        .fetch_one(&self.pool)
        .await?;
        let count: i64 = row.get(0);
        let until: Option<chrono::DateTime<chrono::Utc>> = row.get(1);
        Ok(match until {
            Some(until) if count >= i64::from(partitions) => Some(millis(until)),
            _ => None,
        })
    }
}

impl Store {
    /// How many attempts that have not ended are in each such status, zero
    /// included, of `tenants` (`None`: every tenant; the attempts gauge,
    /// the console's overview). It reads the `attempts_live` index
    /// (migration 0020): the cost is the work in flight, however many
    /// attempts have ended.
    pub async fn live_attempts_by_status(
        &self,
        tenants: Option<&[String]>,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let counted: Vec<(String, i64)> = sqlx::query_as(
            "SELECT status, count(*) FROM attempts \
             WHERE status IN ('queued', 'leased', 'running', 'cancel_requested') \
               AND ($1::text[] IS NULL OR tenant = ANY($1)) GROUP BY status",
        )
        .bind(tenants)
        .fetch_all(&self.pool)
        .await?;
        Ok(crate::contract::AttemptStatus::ALL
            .iter()
            .filter(|status| !status.is_terminal())
            .map(|status| {
                let name = status.as_str();
                let count = counted
                    .iter()
                    .find(|(counted, _)| counted == name)
                    .map_or(0, |(_, count)| *count);
                (name.to_owned(), count)
            })
            .collect())
    }
}
