//! Projection rebuild: fold `attempt_events` through the one `apply` into a
//! shadow schema and diff it against the live projection.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures_util::TryStreamExt;
use uuid::Uuid;

use super::audit::{StoredEvent, EVENT_COLUMNS};
use super::batch::{LeaseWrite, ProjectionRows, ProjectionTarget};
use super::rows::Writes;
use super::{Store, StoreError};
use crate::attempt::{apply, Attempt, JobState};

/// The shadow schema a rebuild writes into.
pub const SHADOW_SCHEMA: &str = "execplane_shadow";
const TABLES: [(&str, &str); 4] = [
    ("jobs", "job_id"),
    ("attempts", "attempt_id"),
    ("leases", "attempt_id"),
    ("target_keys", "key, attempt_id"),
];
const SHOWN_ROWS: i64 = 10;

/// Rows that differ in one table.
#[derive(Clone, Debug, Default)]
pub struct TableDiff {
    pub table: String,
    /// Live rows with no identical rebuilt row (at most a few shown).
    pub only_live: Vec<serde_json::Value>,
    pub only_live_count: i64,
    /// Rebuilt rows with no identical live row.
    pub only_rebuilt: Vec<serde_json::Value>,
    pub only_rebuilt_count: i64,
}

#[derive(Clone, Debug, Default)]
pub struct RebuildReport {
    pub events: u64,
    pub attempts: u64,
    pub jobs: u64,
    pub diffs: Vec<TableDiff>,
}

impl RebuildReport {
    pub fn is_clean(&self) -> bool {
        self.diffs.is_empty()
    }
}

impl Store {
    /// Rebuilds the projection from the log into `execplane_shadow` inside one
    /// REPEATABLE READ transaction (log and live tables seen at one instant)
    /// and diffs every table. With `keep`, the shadow schema is committed for
    /// inspection; otherwise it is rolled back.
    pub async fn rebuild_verify(&self, keep: bool) -> Result<RebuildReport, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *tx)
            .await?;
        let live: String = sqlx::query_scalar("SELECT current_schema()")
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {SHADOW_SCHEMA} CASCADE"))
            .execute(&mut *tx)
            .await?;
        sqlx::query(&format!("CREATE SCHEMA {SHADOW_SCHEMA}"))
            .execute(&mut *tx)
            .await?;
        for (table, _) in TABLES {
            sqlx::query(&format!(
                "CREATE TABLE {SHADOW_SCHEMA}.{table} (LIKE \"{live}\".{table} INCLUDING ALL)"
            ))
            .execute(&mut *tx)
            .await?;
        }

        let mut report = RebuildReport::default();
        let mut attempts: HashMap<Uuid, Attempt> = HashMap::new();
        let mut tips: HashMap<Uuid, [u8; 32]> = HashMap::new();
        {
            let query =
                format!("SELECT {EVENT_COLUMNS} FROM \"{live}\".attempt_events ORDER BY position");
            let mut rows = sqlx::query(&query).fetch(&mut *tx);
            while let Some(row) = rows.try_next().await? {
                let stored = StoredEvent::from_row(&row)?;
                let event = stored.decode()?;
                let next = apply(attempts.get(&event.attempt_id), &event)?;
                attempts.insert(event.attempt_id, next);
                if let Ok(hash) = stored.hash.as_slice().try_into() {
                    tips.insert(event.attempt_id, hash);
                }
                report.events += 1;
            }
        }
        let mut jobs: BTreeMap<String, JobState> = BTreeMap::new();
        for attempt in attempts.into_values() {
            jobs.entry(attempt.job_id.clone())
                .or_default()
                .attempts
                .push(attempt);
        }
        let mut touched = BTreeSet::new();
        // Every attempt and lease is new in the shadow schema.
        let mut leases = HashMap::new();
        for state in jobs.values_mut() {
            state.attempts.sort_by_key(|attempt| attempt.attempt_no);
            for attempt in &state.attempts {
                touched.insert(attempt.attempt_id);
                if attempt.lease.is_some() {
                    leases.insert(attempt.attempt_id, LeaseWrite::Insert);
                }
            }
        }
        report.jobs = jobs.len() as u64;
        report.attempts = touched.len() as u64;
        // Write in chunks to bound statement size.
        let names: Vec<String> = jobs.keys().cloned().collect();
        for chunk in names.chunks(2_000) {
            let part: BTreeMap<String, JobState> = chunk
                .iter()
                .map(|name| (name.clone(), jobs[name].clone()))
                .collect();
            let mut writes = Writes::new();
            ProjectionRows::collect(
                &part,
                &touched,
                &touched,
                &part.keys().cloned().collect(),
                &leases,
                &tips,
            )
            .write(
                &mut tx,
                &mut writes,
                ProjectionTarget::Shadow(SHADOW_SCHEMA),
            )
            .await?;
            writes.execute(&mut tx).await?;
        }

        for (table, key) in TABLES {
            let diff = diff_table(&mut tx, &live, table, key).await?;
            if diff.only_live_count > 0 || diff.only_rebuilt_count > 0 {
                report.diffs.push(diff);
            }
        }
        if keep {
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        Ok(report)
    }
}

async fn diff_table(
    conn: &mut sqlx::PgConnection,
    live: &str,
    table: &str,
    key: &str,
) -> Result<TableDiff, StoreError> {
    let mut diff = TableDiff {
        table: table.to_owned(),
        ..TableDiff::default()
    };
    for (from, to, rows, count) in [
        (
            format!("\"{live}\""),
            SHADOW_SCHEMA.to_owned(),
            &mut diff.only_live,
            &mut diff.only_live_count,
        ),
        (
            SHADOW_SCHEMA.to_owned(),
            format!("\"{live}\""),
            &mut diff.only_rebuilt,
            &mut diff.only_rebuilt_count,
        ),
    ] {
        let except = format!("SELECT * FROM {from}.{table} EXCEPT SELECT * FROM {to}.{table}");
        *count = sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM ({except}) d"))
            .fetch_one(&mut *conn)
            .await?;
        if *count > 0 {
            *rows = sqlx::query_scalar::<_, serde_json::Value>(&format!(
                "SELECT to_jsonb(d) FROM ({except}) d ORDER BY {key} LIMIT {SHOWN_ROWS}"
            ))
            .fetch_all(&mut *conn)
            .await?;
        }
    }
    Ok(diff)
}
