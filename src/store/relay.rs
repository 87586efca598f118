//! The outbox as the relay sees it: the advisory lock that makes one relay
//! active, held on a connection of its own, and the reads and deletes made
//! on that same connection, so a relay that lost the connection (and with
//! it the lock) learns it before it publishes another row.

use sqlx::postgres::PgConnection;
use sqlx::{Connection, Row};

use super::{Store, StoreError};

/// The advisory lock key of the active relay ("execplan").
const RELAY_LOCK: i64 = 0x6578_6563_706c_616e;

/// One outbox row to publish.
#[derive(Clone, Debug)]
pub struct OutboxRow {
    pub id: i64,
    pub topic: String,
    pub key: String,
    pub headers: serde_json::Value,
    pub payload: Vec<u8>,
}

/// The relay's dedicated connection, holding the lock.
pub struct RelayLock {
    connection: PgConnection,
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
            .application_name("execplane-relay");
        let mut connection = PgConnection::connect_with(&options).await?;
        let acquired: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(RELAY_LOCK)
            .fetch_one(&mut connection)
            .await?;
        if acquired {
            Ok(Some(RelayLock { connection }))
        } else {
            connection.close().await.ok();
            Ok(None)
        }
    }
}

impl RelayLock {
    /// The oldest outbox rows, read on the lock's connection: a successful
    /// read proves the lock is still held (it lives as long as the session).
    pub async fn next_rows(&mut self, limit: i64) -> Result<Vec<OutboxRow>, StoreError> {
        let rows =
            sqlx::query("SELECT id, topic, key, headers, payload FROM outbox ORDER BY id LIMIT $1")
                .bind(limit)
                .fetch_all(&mut self.connection)
                .await?;
        Ok(rows
            .into_iter()
            .map(|row| OutboxRow {
                id: row.get(0),
                topic: row.get(1),
                key: row.get(2),
                headers: row.get(3),
                payload: row.get(4),
            })
            .collect())
    }

    /// Proves the lock is still held, and records that this relay may
    /// publish until `horizon` from now (a successor waits that out).
    pub async fn prove(&mut self, horizon: std::time::Duration) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE relay_state SET active_until = greatest(active_until, now() + make_interval(secs => $1)) WHERE id = 1",
        )
        .bind(horizon.as_secs_f64())
        .execute(&mut self.connection)
        .await?;
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

    /// Deletes published rows.
    pub async fn delete(&mut self, ids: &[i64]) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM outbox WHERE id = ANY($1)")
            .bind(ids)
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

impl Store {
    /// Rows waiting in the outbox.
    pub async fn outbox_len(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM outbox")
            .fetch_one(&self.pool)
            .await?)
    }
}
