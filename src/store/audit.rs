//! Tamper evidence: re-walk every attempt's hash chain.

use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use sqlx::Row;
use uuid::Uuid;

use super::{Store, StoreError};
pub use crate::audit::ChainBreak;
use crate::audit::{Link, Tip};
use crate::codec::Codec;
use crate::contract::AttemptEvent;

/// One row of `attempt_events`.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct StoredEvent {
    pub position: i64,
    pub event_id: Uuid,
    pub attempt_id: Uuid,
    pub job_id: String,
    pub seq: i64,
    pub kind: String,
    pub terminal: bool,
    pub occurred_at: DateTime<Utc>,
    pub payload: Vec<u8>,
    pub schema_fingerprint: i64,
    pub prev_hash: Vec<u8>,
    pub hash: Vec<u8>,
    pub recorded_at: DateTime<Utc>,
}

impl StoredEvent {
    pub(crate) fn from_row(row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        <Self as sqlx::FromRow<'_, sqlx::postgres::PgRow>>::from_row(row)
    }

    /// Decodes the payload with the schema it was written with.
    pub fn decode(&self) -> Result<AttemptEvent, StoreError> {
        let record = Codec::record::<crate::codec::AttemptEventRecord>(
            self.schema_fingerprint as u64,
            &self.payload,
        )?;
        Ok(AttemptEvent::try_from(record)?)
    }

    /// Checks this row as the link after `tip` (`audit::check`), and that
    /// its payload agrees with its columns; the new tip, or why not.
    fn check(&self, tip: Tip) -> Result<Tip, String> {
        let link = Link {
            seq: self.seq,
            prev_hash: Some(&self.prev_hash),
            hash: Some(&self.hash),
            fingerprint: self.schema_fingerprint as u64,
            datum: &self.payload,
        };
        let (event, next) = crate::audit::check(self.attempt_id, tip, &link)?;
        match self.mismatch(&event) {
            Some(reason) => Err(reason),
            None => Ok(next),
        }
    }

    /// Why the payload disagrees with the row's own columns, if it does.
    fn mismatch(&self, event: &AttemptEvent) -> Option<String> {
        let checks = [
            ("event_id", event.event_id == self.event_id),
            ("attempt_id", event.attempt_id == self.attempt_id),
            ("job_id", event.job_id == self.job_id),
            ("seq", i64::try_from(event.seq).ok() == Some(self.seq)),
            ("kind", event.body.kind() == self.kind),
            ("terminal", event.body.is_terminal() == self.terminal),
            (
                "occurred_at",
                event.occurred_at == self.occurred_at.timestamp_millis(),
            ),
        ];
        checks
            .iter()
            .find(|(_, matches)| !matches)
            .map(|(column, _)| format!("the payload disagrees with column `{column}`"))
    }
}

pub(crate) const EVENT_COLUMNS: &str =
    "position, event_id, attempt_id, job_id, seq, kind, terminal, occurred_at, payload, schema_fingerprint, prev_hash, hash, recorded_at";

#[derive(Clone, Debug, Default)]
pub struct ChainReport {
    pub attempts: u64,
    pub events: u64,
    /// The first bad event, in (attempt_id, seq) order; walking stops there.
    pub first_break: Option<ChainBreak>,
}

impl Store {
    /// An attempt's history in seq order.
    pub async fn history(&self, attempt_id: Uuid) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {EVENT_COLUMNS} FROM attempt_events WHERE attempt_id = $1 ORDER BY seq"
        ))
        .bind(attempt_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| StoredEvent::from_row(row).map_err(StoreError::from))
            .collect()
    }

    /// A read-only transaction that sees one instant throughout.
    async fn read_only_snapshot(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        let mut transaction = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *transaction)
            .await?;
        Ok(transaction)
    }

    /// Two transactions that see the database as of one instant: the first
    /// read-only, exporting its snapshot, the second importing it, and
    /// read-only too unless `second_writes`. A long read streams through
    /// one while the other reads or writes beside it.
    pub(crate) async fn at_one_instant(
        &self,
        second_writes: bool,
    ) -> Result<
        (
            sqlx::Transaction<'static, sqlx::Postgres>,
            sqlx::Transaction<'static, sqlx::Postgres>,
        ),
        StoreError,
    > {
        if self.pool.options().get_max_connections() < 2 {
            return Err(StoreError::Database(sqlx::Error::Configuration(
                "this reads through two connections at once; the pool allows one \
                 (EXECPLANE_DATABASE_MAX_CONNECTIONS)"
                    .into(),
            )));
        }
        let mut first = self.read_only_snapshot().await?;
        let snapshot: String = sqlx::query_scalar("SELECT pg_export_snapshot()")
            .fetch_one(&mut *first)
            .await?;
        // Postgres names snapshots in hex digits and dashes; nothing else
        // goes into the statement.
        if !snapshot.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(StoreError::Corrupt(format!(
                "unexpected snapshot name {snapshot:?}"
            )));
        }
        let mut second = self.pool.begin().await?;
        let access = if second_writes { "" } else { " READ ONLY" };
        sqlx::query(&format!(
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ{access}"
        ))
        .execute(&mut *second)
        .await?;
        sqlx::query(&format!("SET TRANSACTION SNAPSHOT '{snapshot}'"))
            .execute(&mut *second)
            .await?;
        Ok((first, second))
    }

    /// Re-walks the hash chain of one attempt or of all, checking per event:
    /// seq continuity, `prev_hash` linking, `hash = sha256(prev_hash ||
    /// payload)`, that the payload decodes and agrees with its columns; and
    /// per attempt, that the projection's `last_seq`/`last_hash` is the tip
    /// (so a truncated tail is caught too).
    ///
    /// The log and the projection's tips are read as of one instant (one
    /// read-only snapshot, shared by two connections), each streamed in
    /// attempt order and merged as the walk goes: what the walk holds is
    /// one attempt's tip, whatever the length of the log.
    ///
    /// One attempt's (the console checks it on every page view) is read
    /// through one connection: its tip first, then its events, in one
    /// read-only snapshot. Two connections a view would let ten viewers
    /// each hold one of the pool's and wait for a second.
    pub async fn verify_chain(&self, only: Option<Uuid>) -> Result<ChainReport, StoreError> {
        let (mut log, mut projection) = match only {
            Some(_) => (self.read_only_snapshot().await?, None),
            None => {
                let (log, projection) = self.at_one_instant(false).await?;
                (log, Some(projection))
            }
        };
        let tips_sql = "SELECT attempt_id, last_seq, last_hash FROM attempts \
                        WHERE $1::uuid IS NULL OR attempt_id = $1 ORDER BY attempt_id";
        let tip_rows = match projection.as_mut() {
            Some(projection) => sqlx::query(tips_sql).bind(only).fetch(&mut **projection),
            None => {
                let rows = sqlx::query(tips_sql)
                    .bind(only)
                    .fetch_all(&mut *log)
                    .await?;
                futures_util::StreamExt::boxed(futures_util::stream::iter(rows.into_iter().map(Ok)))
            }
        };
        let events_sql = format!(
            "SELECT {EVENT_COLUMNS} FROM attempt_events \
             WHERE $1::uuid IS NULL OR attempt_id = $1 ORDER BY attempt_id, seq"
        );
        let mut rows = sqlx::query(&events_sql).bind(only).fetch(&mut *log);
        let mut tips = Tips {
            rows: tip_rows,
            next: None,
        };
        let mut report = ChainReport::default();
        let mut walk: Option<(Uuid, Tip)> = None;
        while let Some(row) = rows.try_next().await? {
            let event = StoredEvent::from_row(&row)?;
            let tip = match walk {
                Some((attempt_id, tip)) if attempt_id == event.attempt_id => tip,
                previous => {
                    if let Some((attempt_id, tip)) = previous {
                        if let Some(broken) = tips.walked(attempt_id, tip).await? {
                            report.first_break = Some(broken);
                            return Ok(report);
                        }
                    }
                    report.attempts += 1;
                    Tip::GENESIS
                }
            };
            report.events += 1;
            match event.check(tip) {
                Ok(next) => walk = Some((event.attempt_id, next)),
                Err(reason) => {
                    report.first_break = Some(ChainBreak {
                        attempt_id: event.attempt_id,
                        seq: event.seq,
                        reason,
                    });
                    return Ok(report);
                }
            }
        }
        if let Some((attempt_id, tip)) = walk {
            if let Some(broken) = tips.walked(attempt_id, tip).await? {
                report.first_break = Some(broken);
                return Ok(report);
            }
        }
        report.first_break = tips.peek().await?.map(|(next, _, _)| no_events(*next));
        Ok(report)
    }
}

/// The projection's tips (attempt, last seq, last hash), streamed in
/// attempt order beside the log by [`Store::verify_chain`].
struct Tips<'c> {
    rows: futures_util::stream::BoxStream<'c, Result<sqlx::postgres::PgRow, sqlx::Error>>,
    next: Option<(Uuid, i64, Vec<u8>)>,
}

impl Tips<'_> {
    async fn peek(&mut self) -> Result<Option<&(Uuid, i64, Vec<u8>)>, StoreError> {
        if self.next.is_none() {
            self.next = self
                .rows
                .try_next()
                .await?
                .map(|row| (row.get(0), row.get(1), row.get(2)));
        }
        Ok(self.next.as_ref())
    }

    /// `attempt_id`'s chain was walked to `tip`: the break, if an attempt
    /// before it in the projection has no events, or its own tip is not
    /// where the chain ends. (An attempt with events and no row of its own
    /// is the projection's business: `projection rebuild --verify`.)
    async fn walked(
        &mut self,
        attempt_id: Uuid,
        tip: Tip,
    ) -> Result<Option<ChainBreak>, StoreError> {
        let Some((next, last_seq, last_hash)) = self.peek().await? else {
            return Ok(None);
        };
        if *next < attempt_id {
            return Ok(Some(no_events(*next)));
        }
        if *next > attempt_id {
            return Ok(None);
        }
        let broken = (tip.seq != *last_seq || tip.hash.as_slice() != last_hash.as_slice())
            .then(|| ChainBreak {
                attempt_id,
                seq: tip.seq + 1,
                reason: format!(
                    "the chain ends at seq {} but the projection recorded seq {last_seq} as its tip (events missing?)",
                    tip.seq
                ),
            });
        self.next = None;
        Ok(broken)
    }
}

fn no_events(attempt_id: Uuid) -> ChainBreak {
    ChainBreak {
        attempt_id,
        seq: 1,
        reason: "the attempt exists in the projection but has no events".into(),
    }
}

/// Which events a timeline or an export reads from `attempt_events`.
#[derive(Clone, Debug)]
pub enum EventSelection {
    Attempt(Uuid),
    Job(String),
    /// Events that occurred in `[from, to)`.
    Window(DateTime<Utc>, DateTime<Utc>),
}

/// One event of `attempt_events` as `audit compare` holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventLink {
    pub attempt_id: Uuid,
    pub seq: i64,
    pub event_id: Uuid,
    pub hash: Vec<u8>,
}

impl Store {
    /// The selected events in (attempt, seq) order, handed to `each` one at
    /// a time (an export streams them; nothing is held).
    pub async fn for_each_event(
        &self,
        selection: &EventSelection,
        mut each: impl FnMut(StoredEvent) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError> {
        let filter = match selection {
            EventSelection::Attempt(_) => "attempt_id = $1",
            // The log keeps no index by job (migration 0023): the job's
            // attempts are found through the projection, their events by
            // attempt.
            EventSelection::Job(_) => {
                "attempt_id IN (SELECT attempt_id FROM attempts WHERE job_id = $1) AND job_id = $1"
            }
            EventSelection::Window(..) => "occurred_at >= $1 AND occurred_at < $2",
        };
        let query = format!(
            "SELECT {EVENT_COLUMNS} FROM attempt_events WHERE {filter} ORDER BY attempt_id, seq"
        );
        let query = match selection {
            EventSelection::Attempt(attempt) => sqlx::query(&query).bind(*attempt),
            EventSelection::Job(job) => sqlx::query(&query).bind(job),
            EventSelection::Window(from, to) => sqlx::query(&query).bind(*from).bind(*to),
        };
        let mut rows = query.fetch(&self.pool);
        let mut count = 0;
        while let Some(row) = rows.try_next().await? {
            each(StoredEvent::from_row(&row)?)?;
            count += 1;
        }
        Ok(count)
    }

    /// Every event's id and hash (of one attempt, or of all) in one
    /// snapshot, handed to `each`; and, from the same snapshot, the ids of
    /// events whose record still waits to be published (past the relay's
    /// cursor, or copied to the outbox before migration 0018), so not
    /// missing from the topic.
    pub async fn event_links(
        &self,
        only: Option<Uuid>,
        mut each: impl FnMut(EventLink),
    ) -> Result<std::collections::HashSet<Uuid>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await?;
        let pending: Vec<Option<String>> = sqlx::query_scalar(
            "SELECT headers->>'ce_id' FROM outbox WHERE topic = $1 AND ($2::uuid IS NULL OR key = $2::text)
             UNION ALL
             SELECT event_id::text FROM unpublished_events
             WHERE $2::uuid IS NULL OR attempt_id = $2",
        )
        .bind(crate::contract::topics::ATTEMPT_EVENTS)
        .bind(only)
        .fetch_all(&mut *tx)
        .await?;
        {
            let mut rows = sqlx::query(
                "SELECT attempt_id, seq, event_id, hash FROM attempt_events WHERE $1::uuid IS NULL OR attempt_id = $1",
            )
            .bind(only)
            .fetch(&mut *tx);
            while let Some(row) = rows.try_next().await? {
                each(EventLink {
                    attempt_id: row.get(0),
                    seq: row.get(1),
                    event_id: row.get(2),
                    hash: row.get(3),
                });
            }
        }
        tx.commit().await?;
        Ok(pending
            .into_iter()
            .flatten()
            .filter_map(|id| id.parse().ok())
            .collect())
    }
}
