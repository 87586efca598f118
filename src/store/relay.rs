//! What the relay publishes, as it sees it: the events of the log past its
//! cursor and the outbox's rows; the advisory lock that makes one relay
//! active, held on a connection of its own; and the reads, deletes and
//! cursor moves made on that same connection, so a relay that lost the
//! connection (and with it the lock) learns it before it publishes another
//! record.

use sqlx::postgres::PgConnection;
use sqlx::{Connection, Row};

use uuid::Uuid;

use super::outbox::{derived_records, log_record, AttemptFacts, LoggedEvent};
use super::rows::{lease_info, LeaseRow};
use super::{Store, StoreError};
use crate::codec::Codec;
use crate::contract::{AttemptEvent, JobSpec, TraceContext};

/// The advisory lock key of the active relay ("execplan").
const RELAY_LOCK: i64 = 0x6578_6563_706c_616e;

/// Where a record to publish comes from, and so how it is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A row of `outbox`, deleted once published.
    Outbox(i64),
    /// An event of the log at this position: the cursor moves past it once
    /// it is published.
    Log(i64),
}

/// One record to publish.
#[derive(Clone, Debug)]
pub struct OutboxRow {
    pub origin: Origin,
    pub topic: String,
    pub key: String,
    pub headers: crate::codec::Headers,
    pub payload: Vec<u8>,
}

/// What one read found to publish.
#[derive(Debug, Default)]
pub struct NextRows {
    /// The records, in the order they must go out.
    pub rows: Vec<OutboxRow>,
    /// A source filled its limit: more may be waiting now. Otherwise the
    /// read took everything committed before it, and what commits after it
    /// wakes the relay (`OutboxListener`).
    pub more: bool,
}

/// The relay's dedicated connection, holding the lock.
pub struct RelayLock {
    connection: PgConnection,
    codec: Codec,
}

impl Store {
    /// Opens a connection of its own (never the pool's: a pooled connection
    /// could be handed to someone else or recycled, taking the lock with
    /// it) and tries to take the relay lock; `None` when another relay
    /// holds it.
    pub async fn try_relay_lock(&self) -> Result<Option<RelayLock>, StoreError> {
        let options = self
            .pool
            .connect_options()
            .as_ref()
            .clone()
            .application_name("execplane-relay")
            // Its reads return what is new, a few rows to a batch: starting
            // parallel workers for them cost more than the reads (the
            // planner takes the unpublished range for a third of the log).
            .options([
                ("max_parallel_workers_per_gather", "0"),
                // An acknowledgement lost with a crash of the server only
                // publishes its records again (each carries its stable
                // `ce_id`), so it need not wait for its WAL to reach the
                // disk; what a successor relies on does (`prove`).
                ("synchronous_commit", "off"),
            ]);
        let mut connection = PgConnection::connect_with(&options).await?;
        let acquired: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(RELAY_LOCK)
            .fetch_one(&mut connection)
            .await?;
        if acquired {
            Ok(Some(RelayLock {
                connection,
                codec: self.codec.clone(),
            }))
        } else {
            connection.close().await.ok();
            Ok(None)
        }
    }
}

impl RelayLock {
    /// The next records to publish, read on the lock's connection (a
    /// successful read proves the lock is still held: it lives as long as
    /// the session): the oldest outbox rows, then the log's events past the
    /// cursor, up to `limit` of each, each followed by the records it
    /// causes (derived from it since migration 0019). The log waits while
    /// the outbox still holds rows from before migration 0018 (event
    /// records were copied there then), so an attempt's events keep their
    /// order across the upgrade.
    pub async fn next_rows(&mut self, limit: i64) -> Result<NextRows, StoreError> {
        let mut rows: Vec<OutboxRow> =
            sqlx::query("SELECT id, topic, key, headers, payload FROM outbox ORDER BY id LIMIT $1")
                .bind(limit)
                .fetch_all(&mut self.connection)
                .await?
                .into_iter()
                .map(|row| {
                    let headers = match row.get(3) {
                        serde_json::Value::Object(headers) => {
                            crate::codec::Headers::from_json(&headers)
                        }
                        _ => crate::codec::Headers::default(),
                    };
                    OutboxRow {
                        origin: Origin::Outbox(row.get(0)),
                        topic: row.get(1),
                        key: row.get(2),
                        headers,
                        payload: row.get(4),
                    }
                })
                .collect();
        let mut more = rows.len() as i64 >= limit;
        let logged = sqlx::query(include_str!("sql/next_log_events.sql"))
            .bind(limit)
            .fetch_all(&mut self.connection)
            .await?;
        more |= logged.len() as i64 >= limit;
        for row in &logged {
            let event = logged_event(row)?;
            let mut records = vec![log_record(&event, &self.codec)?];
            // What cannot be derived (a stored spec this release cannot
            // read) is this event's loss alone: its attempt waits for a
            // work item or result that never comes and ends by its timers,
            // while every other record keeps moving.
            match derived(row, &event, &self.codec) {
                Ok(derived) => records.extend(derived),
                Err(error) => tracing::error!(
                    attempt_id = %event.attempt_id,
                    seq = event.seq,
                    %error,
                    "cannot build the records this event causes; publishing the event alone"
                ),
            }
            rows.extend(records.into_iter().map(|record| OutboxRow {
                origin: Origin::Log(event.position),
                topic: record.topic,
                key: record.key,
                headers: record.headers,
                payload: record.payload,
            }));
        }
        Ok(NextRows { rows, more })
    }

    /// Proves the lock is still held, and records that this relay may
    /// publish until `horizon` from now (a successor waits that out).
    pub async fn prove(&mut self, horizon: std::time::Duration) -> Result<(), StoreError> {
        // Durable before this relay publishes on it, unlike the
        // connection's other commits: a successor waits out what it says.
        let mut tx = self.connection.begin().await?;
        sqlx::query("SET LOCAL synchronous_commit = on")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "UPDATE relay_state SET active_until = greatest(active_until, now() + make_interval(secs => $1)) WHERE id = 1",
        )
        .bind(horizon.as_secs_f64())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// How long the previous holder may still have been publishing.
    pub async fn predecessor_horizon(&mut self) -> Result<std::time::Duration, StoreError> {
        let seconds: f64 = sqlx::query_scalar(
            "SELECT CASE WHEN active_until > now() THEN extract(epoch FROM active_until - now())::float8 ELSE 0 END FROM relay_state WHERE id = 1",
        )
        .fetch_optional(&mut self.connection)
        .await?
        .unwrap_or(0.0);
        Ok(std::time::Duration::from_secs_f64(
            seconds.clamp(0.0, 3600.0),
        ))
    }

    /// Acknowledges published records: deletes their outbox rows and
    /// moves the cursor past their events, in one statement.
    pub async fn acknowledge(&mut self, published: &[Origin]) -> Result<(), StoreError> {
        let mut ids = Vec::new();
        let mut position = 0i64;
        for origin in published {
            match origin {
                Origin::Outbox(id) => ids.push(*id),
                Origin::Log(at) => position = position.max(*at),
            }
        }
        sqlx::query(
            "WITH deleted AS (DELETE FROM outbox WHERE id = ANY($1))
             UPDATE relay_state SET published_position = greatest(published_position, $2) WHERE id = 1",
        )
        .bind(&ids)
        .bind(position)
        .execute(&mut self.connection)
        .await?;
        Ok(())
    }

    /// Releases the lock and closes the connection.
    pub async fn release(mut self) {
        let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(RELAY_LOCK)
            .execute(&mut self.connection)
            .await;
        let _ = self.connection.close().await;
    }
}

/// Wakes the relay when outbox rows are inserted (LISTEN/NOTIFY on its own
/// connection; missed notifications are covered by the relay's idle poll).
pub struct OutboxListener {
    listener: sqlx::postgres::PgListener,
}

impl Store {
    pub async fn listen_outbox(&self) -> Result<OutboxListener, StoreError> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen("execplane_outbox").await?;
        Ok(OutboxListener { listener })
    }
}

impl OutboxListener {
    /// The next notification (reconnecting as needed).
    pub async fn recv(&mut self) -> Result<(), StoreError> {
        self.listener.recv().await?;
        Ok(())
    }
}

/// An event row of `next_log_events.sql`.
fn logged_event(row: &sqlx::postgres::PgRow) -> Result<LoggedEvent, StoreError> {
    let link = |index: usize| -> Result<[u8; 32], StoreError> {
        let bytes: Vec<u8> = row.get(index);
        bytes.try_into().map_err(|_| {
            StoreError::Corrupt(format!(
                "a hash of event {} is not 32 bytes",
                row.get::<Uuid, _>(1)
            ))
        })
    };
    let occurred_at: chrono::DateTime<chrono::Utc> = row.get(5);
    let traceparent: Option<String> = row.get(9);
    let fingerprint: i64 = row.get(11);
    Ok(LoggedEvent {
        position: row.get(0),
        event_id: row.get(1),
        attempt_id: row.get(2),
        seq: row.get(3),
        kind: row.get(4),
        occurred_at: occurred_at.timestamp_millis(),
        datum: row.get(6),
        fingerprint: fingerprint as u64,
        prev_hash: link(7)?,
        hash: link(8)?,
        trace: traceparent.map(|traceparent| TraceContext {
            traceparent,
            tracestate: row.get(10),
        }),
    })
}

/// The records an event causes besides its own (none for most).
fn derived(
    row: &sqlx::postgres::PgRow,
    event: &LoggedEvent,
    codec: &Codec,
) -> Result<Vec<super::OutboxMessage>, StoreError> {
    let Some(facts) = attempt_facts(row, event)? else {
        return Ok(Vec::new());
    };
    let decoded =
        Codec::record::<crate::codec::AttemptEventRecord>(event.fingerprint, &event.datum)?;
    Ok(derived_records(
        &AttemptEvent::try_from(decoded)?,
        &facts,
        codec,
    )?)
}

/// What the records an event causes are made of besides the event, read
/// with it (`next_log_events.sql`); `None` for an event that causes none.
fn attempt_facts(
    row: &sqlx::postgres::PgRow,
    event: &LoggedEvent,
) -> Result<Option<AttemptFacts>, StoreError> {
    let Some(job_id) = row.get::<Option<String>, _>(12) else {
        return Ok(None);
    };
    let lease = LeaseRow::from_joined(row)?.map(lease_info);
    let spec = row
        .try_get::<Option<sqlx::types::Json<JobSpec>>, _>("spec")
        .map_err(|error| {
            StoreError::Corrupt(format!(
                "the spec of attempt {} does not read back: {error}",
                event.attempt_id
            ))
        })?
        .map(|json| json.0);
    Ok(Some(AttemptFacts {
        job_id,
        command_id: row.get(13),
        attempt_no: u32::try_from(row.get::<i32, _>(14)).unwrap_or(0),
        tenant: row.get(15),
        operation: row.get(16),
        lease,
        spec,
        trace: event.trace.clone(),
    }))
}

impl Store {
    /// Records waiting to be published: outbox rows, and the log's events
    /// past the relay's cursor.
    pub async fn unpublished(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar(include_str!("sql/unpublished_count.sql"))
                .fetch_one(&self.pool)
                .await?,
        )
    }
}
