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
    /// Rebuilds the projection from the log into `execplane_shadow` and
    /// diffs every table, the log and the live tables read as of one
    /// instant (one snapshot, shared by the connection that streams the
    /// log and the one that writes and diffs). With `keep`, the shadow
    /// schema is committed for inspection; otherwise it is rolled back.
    pub async fn rebuild_verify(&self, keep: bool) -> Result<RebuildReport, StoreError> {
        // `log` streams the log; `tx` writes the shadow schema and diffs it
        // with the live tables, as of the instant `log` reads.
        let (mut log, mut tx) = self.at_one_instant(true).await?;
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

        // The log job by job (Postgres sorts it), each job's attempts
        // folded, and written JOBS_PER_WRITE jobs at a time: what the
        // rebuild holds is that many jobs, whatever the length of the log.
        let mut report = RebuildReport::default();
        let mut chunk = Chunk::default();
        let mut job: Option<(String, HashMap<Uuid, Attempt>)> = None;
        {
            let query = format!(
                "SELECT {EVENT_COLUMNS} FROM \"{live}\".attempt_events ORDER BY job_id, position"
            );
            let mut rows = sqlx::query(&query).fetch(&mut *log);
            while let Some(row) = rows.try_next().await? {
                let stored = StoredEvent::from_row(&row)?;
                let event = stored.decode()?;
                if event.job_id != stored.job_id {
                    return Err(StoreError::Corrupt(format!(
                        "event {} of attempt {}: its job_id column says {:?}, its datum {:?}",
                        stored.seq, stored.attempt_id, stored.job_id, event.job_id
                    )));
                }
                if job.as_ref().is_some_and(|(id, _)| *id != event.job_id) {
                    if let Some((id, attempts)) = job.take() {
                        chunk.add(id, attempts);
                    }
                    if chunk.jobs.len() >= JOBS_PER_WRITE {
                        chunk.write(&mut tx, &mut report).await?;
                    }
                }
                let (_, attempts) =
                    job.get_or_insert_with(|| (event.job_id.clone(), HashMap::new()));
                let next = apply(attempts.get(&event.attempt_id), &event)?;
                attempts.insert(event.attempt_id, next);
                if let Ok(hash) = stored.hash.as_slice().try_into() {
                    chunk.tips.insert(event.attempt_id, hash);
                }
                report.events += 1;
            }
        }
        if let Some((id, attempts)) = job.take() {
            chunk.add(id, attempts);
        }
        chunk.write(&mut tx, &mut report).await?;
        log.rollback().await?;

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

/// How many jobs the rebuild folds before it writes them (a bound on the
/// statement's size and on what the rebuild holds).
const JOBS_PER_WRITE: usize = 1_000;

/// Jobs folded and not yet written, with their attempts' chain tips.
#[derive(Default)]
struct Chunk {
    jobs: BTreeMap<String, JobState>,
    tips: HashMap<Uuid, [u8; 32]>,
}

impl Chunk {
    fn add(&mut self, job_id: String, attempts: HashMap<Uuid, Attempt>) {
        let mut attempts: Vec<Attempt> = attempts.into_values().collect();
        attempts.sort_by_key(|attempt| attempt.attempt_no);
        self.jobs.insert(
            job_id,
            JobState {
                attempts,
                ..JobState::default()
            },
        );
    }

    /// Writes the chunk's rows into the shadow schema, every attempt and
    /// lease as new, and empties it.
    async fn write(
        &mut self,
        conn: &mut sqlx::PgConnection,
        report: &mut RebuildReport,
    ) -> Result<(), StoreError> {
        if self.jobs.is_empty() {
            return Ok(());
        }
        let mut touched = BTreeSet::new();
        let mut leases = HashMap::new();
        for attempt in self.jobs.values().flat_map(|state| &state.attempts) {
            touched.insert(attempt.attempt_id);
            if attempt.lease.is_some() {
                leases.insert(attempt.attempt_id, LeaseWrite::Insert);
            }
        }
        report.jobs += self.jobs.len() as u64;
        report.attempts += touched.len() as u64;
        let mut writes = Writes::new();
        ProjectionRows::collect(&self.jobs, &touched, &touched, &leases, &self.tips)
            .write(
                &mut *conn,
                &mut writes,
                ProjectionTarget::Shadow(SHADOW_SCHEMA),
            )
            .await?;
        writes.execute(&mut *conn).await?;
        *self = Self::default();
        Ok(())
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
