//! What operators read: attempt listings and rows for the CLI, readiness,
//! and the already-known check of `submit`.

use sqlx::Row;
use uuid::Uuid;

use super::{Store, StoreError};

/// One line of `attempts list`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AttemptSummary {
    pub attempt_id: Uuid,
    pub job_id: String,
    pub attempt_no: i32,
    pub operation: String,
    pub status: String,
    pub failure_category: Option<String>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// One target key a queued attempt waits for (see [`Store::key_waits`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct KeyWaitView {
    pub key: String,
    pub limit: i32,
    pub holders: i64,
    pub held_by: Vec<Uuid>,
    pub ahead: i64,
}

impl Store {
    /// The most recently updated attempts, optionally of one status or job.
    pub async fn list_attempts(
        &self,
        status: Option<&str>,
        job: Option<&str>,
        limit: i64,
    ) -> Result<Vec<AttemptSummary>, StoreError> {
        let rows = sqlx::query(include_str!("sql/list_attempts.sql"))
            .bind(status)
            .bind(job)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|row| AttemptSummary {
                attempt_id: row.get(0),
                job_id: row.get(1),
                attempt_no: row.get(2),
                operation: row.get(3),
                status: row.get(4),
                failure_category: row.get(5),
                updated_at: row.get(6),
            })
            .collect())
    }

    /// Why a queued attempt is not leased yet, as far as its target keys
    /// say: each key it cannot take now, with its limit, its holders (the
    /// first ten) and the attempts due before it that wait for it too.
    /// Computed when read, never stored; empty when no key holds it back.
    pub async fn key_waits(&self, attempt_id: Uuid) -> Result<Vec<KeyWaitView>, StoreError> {
        let now = chrono::Utc::now();
        let rows = sqlx::query(include_str!("sql/key_waits.sql"))
            .bind(attempt_id)
            .bind(now)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|row| KeyWaitView {
                key: row.get(0),
                limit: row.get(1),
                holders: row.get(2),
                held_by: row.get(3),
                ahead: row.get(4),
            })
            .filter(|wait| wait.holders + wait.ahead >= i64::from(wait.limit))
            .collect())
    }

    /// Adds `waiting_for` ([`Store::key_waits`]) to an attempt row (JSON)
    /// that is queued with target keys.
    pub async fn with_key_waits(
        &self,
        mut row: serde_json::Value,
    ) -> Result<serde_json::Value, StoreError> {
        let queued = row["status"] == "queued"
            && row["target_keys"]
                .as_array()
                .is_some_and(|keys| !keys.is_empty());
        let attempt_id = row["attempt_id"]
            .as_str()
            .and_then(|id| Uuid::parse_str(id).ok());
        if let (true, Some(attempt_id)) = (queued, attempt_id) {
            let waits = self.key_waits(attempt_id).await?;
            row["waiting_for"] = serde_json::to_value(waits)?;
        }
        Ok(row)
    }

    /// An attempt's status, if it exists.
    pub async fn attempt_status(&self, attempt_id: Uuid) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT status FROM attempts WHERE attempt_id = $1")
                .bind(attempt_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// The latest attempt of the job a command created: (attempt, status).
    pub async fn latest_attempt_of_command(
        &self,
        command_id: Uuid,
    ) -> Result<Option<(Uuid, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT a.attempt_id, a.status FROM jobs j
             JOIN attempts a ON a.attempt_id = j.latest_attempt_id
             WHERE j.command_id = $1",
        )
        .bind(command_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Postgres answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
