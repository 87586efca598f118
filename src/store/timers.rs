//! The timer sweeper's claim: due deadlines, their jobs locked with
//! `FOR UPDATE ... SKIP LOCKED` (jobs first, the same lock order as every
//! batch), decided in the same transaction. A timer that fires twice is
//! decided once: the second firing finds it disarmed. A sweep the store
//! refuses for its data is decided again one range at a time, so one
//! timer that cannot be decided holds no other back.

use sqlx::Row;
use uuid::Uuid;

use super::batch::{process_in, InputEnvelope};
use super::rows::{millis, timestamp};
use super::{Store, StoreError};
use crate::contract::{AttemptEvent, Input, TimerKind, UnixMillis};

/// What a sweep did.
#[derive(Debug, Default)]
pub struct SweepOutcome {
    /// How many due timers it read (at most the limit: a full page means
    /// more may be due).
    pub due: usize,
    /// The events the timers it decided appended.
    pub events: Vec<AttemptEvent>,
    /// The attempts whose due timer the store refuses however often it is
    /// retried, with the reason; the caller leaves them out of its next
    /// sweeps for a while.
    pub refused: Vec<(Uuid, String)>,
}

impl Store {
    /// Fires up to `limit` deadlines due at or before `due_before` (at most
    /// `now`; the dispatcher passes the instant up to which every runner
    /// report has been decided), leaving out the attempts in `skip`. Jobs
    /// being written by another transaction are skipped and picked up on
    /// the next sweep.
    ///
    /// All in one transaction; if the store refuses it for its data (not a
    /// lost connection or a race), the due timers are decided again through
    /// [`Store::process_isolating`] (at the same `now`), which refuses the one it cannot decide
    /// alone (shutdown during that: nothing more is decided).
    pub async fn sweep_timers(
        &self,
        now: UnixMillis,
        due_before: UnixMillis,
        limit: i64,
        skip: &[Uuid],
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> Result<SweepOutcome, StoreError> {
        let due_by = due_before.min(now);
        // Most sweeps find nothing due: one indexed probe, no transaction.
        let earliest: Option<chrono::DateTime<chrono::Utc>> =
            sqlx::query_scalar(include_str!("sql/earliest_deadline.sql"))
                .fetch_one(&self.pool)
                .await?;
        if earliest.is_none_or(|earliest| millis(earliest) > due_by) {
            return Ok(SweepOutcome::default());
        }
        let mut tx = self.pool.begin().await?;
        let inputs = due_timers(&mut tx, due_by, limit, skip).await?;
        if inputs.is_empty() {
            tx.rollback().await?;
            return Ok(SweepOutcome::default());
        }
        let error = match process_in(&mut tx, &self.codec, &inputs, now, None).await {
            Ok(outcome) => {
                tx.commit().await?;
                return Ok(SweepOutcome {
                    due: inputs.len(),
                    events: outcome.events,
                    refused: Vec::new(),
                });
            }
            Err(error) => error,
        };
        drop(tx);
        if error.is_transient() {
            return Err(error);
        }
        tracing::warn!(%error, timers = inputs.len(), "the store refused a sweep; deciding its timers one range at a time");
        let isolated = self
            .process_isolating_at(&inputs, None, shutdown, || now)
            .await;
        let Some(isolated) = isolated else {
            return Ok(SweepOutcome::default());
        };
        let refused = inputs
            .iter()
            .zip(isolated.decisions)
            .filter_map(|(input, decision)| match (&input.input, decision) {
                (Input::TimerFired { attempt_id, .. }, Err(reason)) => Some((*attempt_id, reason)),
                _ => None,
            })
            .collect();
        Ok(SweepOutcome {
            due: inputs.len(),
            events: isolated.events,
            refused,
        })
    }
}

/// Up to `limit` timers due by `due_by`, of jobs no other transaction is
/// writing, earliest first, as inputs (their jobs locked until `conn`'s
/// transaction ends).
async fn due_timers(
    conn: &mut sqlx::PgConnection,
    due_by: UnixMillis,
    limit: i64,
    skip: &[Uuid],
) -> Result<Vec<InputEnvelope>, StoreError> {
    let rows = sqlx::query(include_str!("sql/due_deadlines.sql"))
        .bind(timestamp(due_by))
        .bind(limit)
        .bind(skip)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
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
        .collect())
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
    /// the console's overview). An attempt that has not ended has a
    /// deadline armed, and one that has ended has none (migration 0025),
    /// so this reads the `attempts_next_deadline` index: the cost is the
    /// work in flight, however many attempts have ended.
    pub async fn live_attempts_by_status(
        &self,
        tenants: Option<&[String]>,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let counted: Vec<(String, i64)> = sqlx::query_as(
            "SELECT status, count(*) FROM attempts \
             WHERE next_deadline IS NOT NULL \
               AND status IN ('queued', 'leased', 'running', 'cancel_requested') \
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
