//! The Postgres attempt store: the append-only event log with its hash
//! chain, the projection, the inbox and the outbox. Knows no transport.
//!
//! Every state change goes through [`Store::process_batch`] (decide + append)
//! or [`append_decided`] (append only): events, projection and outbox rows in
//! ONE transaction, multi-row, one commit per batch.

mod artifacts;
mod audit;
mod batch;
mod bench;
mod callbacks;
pub mod console;
mod ingress;
mod outbox;
mod reads;
mod rebuild;
mod relay;
mod rows;
mod runners;
mod timers;

pub use artifacts::{ArtifactRow, PendingBundle, Retention, StagedChunk};
pub use batch::{chain_hash, GENESIS_HASH};
pub use callbacks::{Channel, ClaimedCallback};
pub use ingress::{AttemptLease, ExecutorGrant, LeaseView, LeasedWork};
pub use reads::{AttemptSummary, KeyWaitView};
pub use rebuild::SHADOW_SCHEMA;
pub use relay::{NextRows, Origin, OutboxListener, OutboxRow, RelayLock};
pub use runners::{KeyBoard, KeyQueue, LiveInstance, QueuedAttempt, QueuedPosition};
pub use timers::SweepOutcome;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

pub use audit::{ChainBreak, ChainReport, EventLink, EventSelection, StoredEvent};
pub use batch::{
    append_decided, AppendOutcome, BatchOutcome, InputEnvelope, InputOutcome, IsolatedOutcome,
    LoadedJobs,
};
pub use outbox::{OutboxMessage, CE_SOURCE};
pub use rebuild::{RebuildReport, TableDiff};

use crate::attempt::ApplyError;
use crate::codec::{Codec, CodecError};

/// Migrations embedded from `migrations/`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("encoding: {0}")]
    Codec(#[from] CodecError),
    #[error("history does not fold: {0}")]
    Apply(#[from] ApplyError),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("encoding rows: {0}")]
    Json(#[from] serde_json::Error),
}

impl StoreError {
    /// True when the database refused the write by a constraint (a unique
    /// key, a check, the append-only trigger): a fence held.
    pub fn is_constraint_violation(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(error)) => {
                error.code().is_some_and(|code| code.starts_with("23"))
            }
            _ => false,
        }
    }

    /// True when retrying the same write can succeed without anything in
    /// it changing: the connection, the pool or the server was unavailable,
    /// or the transaction lost a race (serialization failure, deadlock).
    /// Anything else (the data was refused, a row did not decode) fails
    /// again for the same inputs, however often it is retried.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(error)) => {
                error.code().is_some_and(|code| {
                    // 08: connection; 40: transaction rollback (serialization,
                    // deadlock); 53: insufficient resources; 57: operator
                    // intervention (shutdown, cancel); 58: system error.
                    // And the deployment's, never a record's (every statement
                    // is fixed text with bound values): 25, a read-only
                    // transaction (a failed-over primary); 42, a table,
                    // column or privilege missing (a migration or grant not
                    // in place yet); 55, an object not in the state needed.
                    // Refused as a record's, every record would be
                    // dead-lettered until the operator mends it.
                    ["08", "25", "40", "42", "53", "55", "57", "58"]
                        .iter()
                        .any(|class| code.starts_with(class))
                })
            }
            StoreError::Database(
                sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Protocol(_),
            ) => true,
            StoreError::Database(_) => false,
            StoreError::Migrate(_) => true,
            StoreError::Codec(_)
            | StoreError::Apply(_)
            | StoreError::Corrupt(_)
            | StoreError::Json(_) => false,
        }
    }
}

/// Handle to the store. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    codec: Codec,
}

impl Store {
    /// Connects with at most `max_connections`; `search_path` picks the
    /// schema (tests and benches isolate themselves with one).
    pub async fn connect(
        url: &str,
        max_connections: u32,
        search_path: Option<&str>,
    ) -> Result<Self, StoreError> {
        let mut options: PgConnectOptions = url.parse()?;
        options = options.application_name("execplane");
        if let Some(schema) = search_path {
            options = options.options([("search_path", schema)]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        Ok(Self::from_pool(pool))
    }

    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            pool,
            codec: Codec::default(),
        }
    }

    /// The same store framing outbox records with `codec`.
    pub fn with_codec(mut self, codec: Codec) -> Self {
        self.codec = codec;
        self
    }

    /// The pool, for the store's own modules.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    /// Applies the embedded migrations.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }
}
