//! What the ingress reads and writes: the executor catalog, its refusal
//! audit, and read-only views of attempts and leases. It never writes the
//! attempt log: reports go through Kafka like every runner's.

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::{Store, StoreError};
use crate::contract::AttemptStatus;

/// One catalog row.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ExecutorGrant {
    pub executor_id: String,
    pub runner_types: Vec<String>,
    /// Empty: every tenant.
    pub tenants: Vec<String>,
    pub enabled: bool,
}

impl ExecutorGrant {
    pub fn serves_type(&self, runner_type: &str) -> bool {
        self.runner_types
            .iter()
            .any(|allowed| allowed == runner_type)
    }

    pub fn serves_tenant(&self, tenant: &str) -> bool {
        self.tenants.is_empty() || self.tenants.iter().any(|allowed| allowed == tenant)
    }
}

/// An attempt as the ingress needs it to answer a report.
#[derive(Clone, Debug)]
pub struct AttemptLease {
    pub job_id: String,
    pub tenant: String,
    pub runner_type: Option<String>,
    /// Its operation's name (`contract::Operation`).
    pub operation: String,
    pub status: AttemptStatus,
    pub cancel_requested: bool,
    pub lease: Option<LeaseView>,
}

#[derive(Clone, Debug)]
pub struct LeaseView {
    pub epoch: i64,
    pub runner_instance: String,
    pub expires_at: DateTime<Utc>,
    pub active: bool,
}

/// A lease granted to an instance whose attempt has not started.
#[derive(Clone, Debug)]
pub struct LeasedWork {
    pub attempt_id: Uuid,
    pub job_id: String,
    pub attempt_no: i32,
    pub lease_id: Uuid,
    pub epoch: i64,
    pub expires_at: DateTime<Utc>,
    pub operation: String,
    pub tenant: String,
    pub runner_type: String,
    pub spec: Option<serde_json::Value>,
}

impl Store {
    pub async fn executor_grant(
        &self,
        executor_id: &str,
    ) -> Result<Option<ExecutorGrant>, StoreError> {
        let row = sqlx::query(
            "SELECT executor_id, runner_types, tenants, enabled FROM executors WHERE executor_id = $1",
        )
        .bind(executor_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|row| ExecutorGrant {
            executor_id: row.get(0),
            runner_types: row.get(1),
            tenants: row.get(2),
            enabled: row.get(3),
        }))
    }

    /// Adds or replaces a catalog entry.
    pub async fn put_executor(&self, grant: &ExecutorGrant) -> Result<(), StoreError> {
        sqlx::query(include_str!("sql/put_executor.sql"))
            .bind(&grant.executor_id)
            .bind(&grant.runner_types)
            .bind(&grant.tenants)
            .bind(grant.enabled)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    pub async fn list_executors(&self) -> Result<Vec<ExecutorGrant>, StoreError> {
        let rows = sqlx::query(
            "SELECT executor_id, runner_types, tenants, enabled FROM executors ORDER BY executor_id",
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .iter()
            .map(|row| ExecutorGrant {
                executor_id: row.get(0),
                runner_types: row.get(1),
                tenants: row.get(2),
                enabled: row.get(3),
            })
            .collect())
    }

    /// Records a policy refusal of an authenticated request.
    pub async fn record_refusal(
        &self,
        executor_id: &str,
        client: IpAddr,
        transport: &str,
        route: &str,
        reason: &str,
        attempt_id: Option<Uuid>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO ingress_audit (executor_id, client, transport, route, reason, attempt_id)
             VALUES ($1, $2::inet, $3, $4, $5, $6)",
        )
        .bind(executor_id)
        .bind(client.to_string())
        .bind(transport)
        .bind(route)
        .bind(reason)
        .bind(attempt_id)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    pub async fn attempt_lease(
        &self,
        attempt_id: Uuid,
    ) -> Result<Option<AttemptLease>, StoreError> {
        let row = sqlx::query(include_str!("sql/attempt_lease.sql"))
            .bind(attempt_id)
            .fetch_optional(self.pool())
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let status: String = row.get(3);
        let status = AttemptStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("attempt status `{status}`")))?;
        let epoch: Option<i64> = row.get(5);
        Ok(Some(AttemptLease {
            job_id: row.get(0),
            tenant: row.get(1),
            runner_type: row.get(2),
            operation: row.get(9),
            status,
            cancel_requested: row.get(4),
            lease: epoch.map(|epoch| LeaseView {
                epoch,
                runner_instance: row.get(6),
                expires_at: row.get(7),
                active: row.get(8),
            }),
        }))
    }

    /// Active leases of `instance` whose attempts have not started.
    pub async fn leased_work(&self, instance: &str) -> Result<Vec<LeasedWork>, StoreError> {
        let rows = sqlx::query(include_str!("sql/leased_work.sql"))
            .bind(instance)
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .iter()
            .map(|row| LeasedWork {
                attempt_id: row.get(0),
                job_id: row.get(1),
                attempt_no: row.get(2),
                lease_id: row.get(3),
                epoch: row.get(4),
                expires_at: row.get(5),
                operation: row.get(6),
                tenant: row.get(7),
                runner_type: row.get(8),
                spec: row.get(9),
            })
            .collect())
    }

    /// An attempt's projection row as JSON (without its chain tip), and
    /// what it waits for when it is queued behind its target keys.
    pub async fn attempt_json(
        &self,
        attempt_id: Uuid,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let row: Option<serde_json::Value> = sqlx::query_scalar(
            "SELECT to_jsonb(a) - 'last_hash' FROM attempts a WHERE attempt_id = $1",
        )
        .bind(attempt_id)
        .fetch_optional(self.pool())
        .await?;
        match row {
            Some(row) => Ok(Some(self.with_key_waits(row).await?)),
            None => Ok(None),
        }
    }

    /// A job's row and its attempts, oldest first (the latest with what it
    /// waits for, as [`Store::attempt_json`]).
    pub async fn job_json(&self, job_id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let job: Option<serde_json::Value> =
            sqlx::query_scalar(include_str!("sql/attempt_json.sql"))
                .bind(job_id)
                .fetch_optional(self.pool())
                .await?;
        let Some(mut job) = job else {
            return Ok(None);
        };
        if let Some(latest) = job["attempts"]
            .as_array_mut()
            .and_then(|attempts| attempts.pop())
        {
            let latest = self.with_key_waits(latest).await?;
            if let Some(attempts) = job["attempts"].as_array_mut() {
                attempts.push(latest);
            }
        }
        Ok(Some(job))
    }

    /// At most `limit` events of an attempt after `after_seq`, in order.
    pub async fn history_after(
        &self,
        attempt_id: Uuid,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<super::StoredEvent>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM attempt_events WHERE attempt_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            super::audit::EVENT_COLUMNS
        ))
        .bind(attempt_id)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| super::StoredEvent::from_row(row).map_err(StoreError::from))
            .collect()
    }
}

impl Store {
    /// The newest position in the event log (0 when empty).
    pub async fn event_position(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT coalesce(max(position), 0) FROM attempt_events")
                .fetch_one(self.pool())
                .await?,
        )
    }

    /// The newest position, and which of `attempts` have events after
    /// `position` (the change feed of the ingress's waiters).
    pub async fn attempts_changed_since(
        &self,
        position: i64,
        attempts: &[Uuid],
    ) -> Result<(i64, Vec<Uuid>), StoreError> {
        let newest = self.event_position().await?;
        if newest <= position {
            return Ok((newest, Vec::new()));
        }
        let changed = sqlx::query_scalar(
            "SELECT DISTINCT attempt_id FROM attempt_events
             WHERE position > $1 AND position <= $2 AND attempt_id = ANY($3)",
        )
        .bind(position)
        .bind(newest)
        .bind(attempts)
        .fetch_all(self.pool())
        .await?;
        Ok((newest, changed))
    }

    /// For each of `instances` with active leases: (how many, newest epoch).
    pub async fn lease_marks(
        &self,
        instances: &[String],
    ) -> Result<std::collections::HashMap<String, (i64, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT runner_instance, count(*), max(epoch) FROM leases
             WHERE active AND runner_instance = ANY($1) GROUP BY runner_instance",
        )
        .bind(instances)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .iter()
            .map(|row| (row.get(0), (row.get(1), row.get(2))))
            .collect())
    }
}
