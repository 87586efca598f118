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

    /// An attempt's projection row as JSON (without its hash).
    pub async fn attempt_row_json(
        &self,
        attempt_id: Uuid,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT to_jsonb(a) - 'last_hash' FROM attempts a WHERE attempt_id = $1",
        )
        .bind(attempt_id)
        .fetch_optional(&self.pool)
        .await?)
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
