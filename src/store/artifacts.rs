//! The artifact worker's tables: staged log chunks, artifact refs, bundle
//! progress and detections. An artifact row and its `artifact.created`
//! outbox row are written in one transaction.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use sqlx::Row;
use uuid::Uuid;

use super::{Store, StoreError};
use crate::codec::{ArtifactRecord, Family};
use crate::contract::topics;

const ARTIFACT_COLUMNS: &str = "artifact_id, attempt_id, name, media_type, size, sha256, producer, retention_class, storage_key, created_at";

fn artifact_row(row: &sqlx::postgres::PgRow) -> ArtifactRow {
    ArtifactRow {
        artifact_id: row.get(0),
        attempt_id: row.get(1),
        name: row.get(2),
        media_type: row.get(3),
        size: row.get(4),
        sha256: row.get(5),
        producer: row.get(6),
        retention_class: row.get(7),
        storage_key: row.get(8),
        created_at: row.get(9),
    }
}

/// A chunk taken from `exec.log-chunks.v1`.
#[derive(Clone, Debug)]
pub struct StagedChunk {
    pub attempt_id: Uuid,
    pub stream: String,
    pub seq: i64,
    pub lease_epoch: i64,
    pub producer: String,
    pub text: String,
}

/// A finished attempt whose artifacts are not stored yet.
#[derive(Clone, Debug)]
pub struct PendingBundle {
    pub attempt_id: Uuid,
    pub result_json: Option<String>,
    /// (stream, seq, producer, text) in seq order per stream.
    pub chunks: Vec<(String, i64, String, String)>,
    /// Chunks that arrived after the attempt's bundle was stored: they
    /// become artifacts of their own rather than being lost.
    pub late: bool,
    /// Files the runner stored, as the attempt's `finished` event lists them.
    pub outputs: Vec<crate::contract::OutputArtifact>,
    /// The instance that held the attempt's lease (the outputs' producer).
    pub runner_instance: Option<String>,
}

/// A stored artifact's ref.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ArtifactRow {
    pub artifact_id: Uuid,
    pub attempt_id: Uuid,
    pub name: String,
    pub media_type: String,
    pub size: i64,
    pub sha256: String,
    pub producer: String,
    pub retention_class: String,
    pub storage_key: String,
    pub created_at: DateTime<Utc>,
}

impl Store {
    /// Stages chunks; a chunk seen before (same attempt, stream, seq),
    /// staged or already stored in a bundle, is ignored. Returns how many
    /// were new.
    pub async fn stage_chunks(&self, chunks: &[StagedChunk]) -> Result<u64, StoreError> {
        if chunks.is_empty() {
            return Ok(0);
        }
        let result = sqlx::query(include_str!("sql/stage_chunks.sql"))
            .bind(chunks.iter().map(|c| c.attempt_id).collect::<Vec<_>>())
            .bind(chunks.iter().map(|c| c.stream.clone()).collect::<Vec<_>>())
            .bind(chunks.iter().map(|c| c.seq).collect::<Vec<_>>())
            .bind(chunks.iter().map(|c| c.lease_epoch).collect::<Vec<_>>())
            .bind(
                chunks
                    .iter()
                    .map(|c| c.producer.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(chunks.iter().map(|c| c.text.clone()).collect::<Vec<_>>())
            .execute(self.pool())
            .await?;
        Ok(result.rows_affected())
    }

    /// Attempts that ended before `cutoff` (ms since the epoch) and have no
    /// stored bundle, oldest first, with their staged chunks: at most
    /// `limit` attempts, and no more of them than hold `max_bytes` of
    /// chunks together (one, however large its chunks are). A tenant's
    /// attempts may each stage the runner's whole output bound, and the
    /// worker holds a bundle's text several times over while it builds it.
    pub async fn pending_bundles(
        &self,
        cutoff: i64,
        limit: i64,
        max_bytes: i64,
    ) -> Result<Vec<PendingBundle>, StoreError> {
        let mut rows = sqlx::query(include_str!("sql/pending_bundles.sql"))
            .bind(cutoff)
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        let mut held = 0i64;
        let within = rows
            .iter()
            .enumerate()
            .take_while(|(index, row)| {
                held = held.saturating_add(row.get::<i64, _>(5));
                *index == 0 || held <= max_bytes
            })
            .count();
        rows.truncate(within);
        let mut pending: Vec<PendingBundle> = rows
            .iter()
            .map(|row| {
                let outputs: serde_json::Value = row.get(3);
                Ok(PendingBundle {
                    attempt_id: row.get(0),
                    result_json: row.get(1),
                    chunks: Vec::new(),
                    late: row.get(2),
                    outputs: serde_json::from_value(outputs).map_err(|error| {
                        StoreError::Corrupt(format!("attempts.outputs: {error}"))
                    })?,
                    runner_instance: row.get(4),
                })
            })
            .collect::<Result<_, StoreError>>()?;
        if pending.is_empty() {
            return Ok(pending);
        }
        let ids: Vec<Uuid> = pending.iter().map(|p| p.attempt_id).collect();
        let chunks = sqlx::query(
            "SELECT attempt_id, stream, seq, producer, text FROM artifact_chunks
             WHERE attempt_id = ANY($1) ORDER BY attempt_id, stream, seq",
        )
        .bind(&ids)
        .fetch_all(self.pool())
        .await?;
        for row in chunks {
            let attempt_id: Uuid = row.get(0);
            if let Some(bundle) = pending.iter_mut().find(|p| p.attempt_id == attempt_id) {
                bundle
                    .chunks
                    .push((row.get(1), row.get(2), row.get(3), row.get(4)));
            }
        }
        Ok(pending)
    }

    /// How many finished attempts wait for their artifacts.
    pub async fn bundle_backlog(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM attempts a WHERE a.finished_at IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM artifact_bundles b WHERE b.attempt_id = a.attempt_id)",
        )
        .fetch_one(self.pool())
        .await?)
    }

    /// Records a stored bundle: artifact refs, one `artifact.created`
    /// outbox row per artifact not recorded before, detections, progress;
    /// the staged chunks go. One transaction.
    pub async fn record_bundle(
        &self,
        attempt_id: Uuid,
        artifacts: &[ArtifactRecord],
        storage_keys: &[String],
        detections: &[(String, &'static str, usize)],
        bundled: &[(String, i64)],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        for (record, key) in artifacts.iter().zip(storage_keys) {
            let artifact_id: Uuid = record
                .artifact_id
                .parse()
                .map_err(|_| StoreError::Corrupt("artifact id".into()))?;
            let inserted = sqlx::query(include_str!("sql/insert_artifacts.sql"))
                .bind(artifact_id)
                .bind(attempt_id)
                .bind(&record.name)
                .bind(&record.media_type)
                .bind(record.size)
                .bind(&record.sha256)
                .bind(&record.producer)
                .bind(record.retention_class.as_str())
                .bind(key)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if inserted == 0 {
                continue;
            }
            let payload = self.codec().encode(Family::Artifact, record)?;
            let mut headers = Map::new();
            headers.insert("ce_specversion".into(), json!("1.0"));
            headers.insert("ce_id".into(), json!(record.artifact_id));
            headers.insert("ce_type".into(), json!("io.execplane.artifact.created"));
            headers.insert("ce_source".into(), json!("execplane/artifact-worker"));
            headers.insert(
                "ce_time".into(),
                json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            );
            headers.insert("ce_subject".into(), json!(attempt_id.to_string()));
            headers.insert("content-type".into(), json!("application/avro"));
            sqlx::query(
                "INSERT INTO outbox (topic, key, headers, payload) VALUES ($1, $2, $3, $4)",
            )
            .bind(topics::ARTIFACTS)
            .bind(attempt_id.to_string())
            .bind(Value::Object(headers))
            .bind(payload)
            .execute(&mut *tx)
            .await?;
        }
        for (name, detector, occurrences) in detections {
            sqlx::query(
                "INSERT INTO artifact_detections (attempt_id, name, detector, occurrences) VALUES ($1, $2, $3, $4)",
            )
            .bind(attempt_id)
            .bind(name)
            .bind(*detector)
            .bind(i32::try_from(*occurrences).unwrap_or(i32::MAX))
            .execute(&mut *tx)
            .await?;
        }
        // Which seqs of each stream the attempt's bundles hold: a chunk
        // read again later is not new (migration 0024). The row is made
        // first, so that the read locks it even for the attempt's first
        // bundle: two workers bundling one attempt at once merge in turn,
        // never one over the other.
        sqlx::query("INSERT INTO artifact_bundles (attempt_id) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(attempt_id)
            .execute(&mut *tx)
            .await?;
        let held: Value = sqlx::query_scalar(
            "SELECT seqs FROM artifact_bundles WHERE attempt_id = $1 FOR UPDATE",
        )
        .bind(attempt_id)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query("UPDATE artifact_bundles SET seqs = $2 WHERE attempt_id = $1")
            .bind(attempt_id)
            .bind(held_with(held, bundled))
            .execute(&mut *tx)
            .await?;
        // Only what this bundle holds: a chunk staged meanwhile waits for
        // the next (late) bundle.
        sqlx::query(
            "DELETE FROM artifact_chunks c USING UNNEST($2::text[], $3::bigint[]) AS u(stream, seq)
             WHERE c.attempt_id = $1 AND c.stream = u.stream AND c.seq = u.seq",
        )
        .bind(attempt_id)
        .bind(
            bundled
                .iter()
                .map(|(stream, _)| stream.clone())
                .collect::<Vec<_>>(),
        )
        .bind(bundled.iter().map(|(_, seq)| *seq).collect::<Vec<_>>())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn artifacts_of(&self, attempt_id: Uuid) -> Result<Vec<ArtifactRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE attempt_id = $1 ORDER BY name"
        ))
        .bind(attempt_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(artifact_row).collect())
    }
}

/// How long each retention class is kept.
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    pub logs: std::time::Duration,
    pub rendered: std::time::Duration,
    pub evidence: std::time::Duration,
}

impl Store {
    /// Artifacts older than their class's retention, oldest first: what a
    /// collection deletes (the dry run lists exactly this).
    pub async fn expired_artifacts(
        &self,
        retention: Retention,
    ) -> Result<Vec<ArtifactRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {ARTIFACT_COLUMNS} FROM artifacts
             WHERE created_at < now() - make_interval(secs => CASE retention_class
                       WHEN 'logs' THEN $1 WHEN 'rendered' THEN $2 ELSE $3 END)
             ORDER BY created_at, artifact_id"
        ))
        .bind(retention.logs.as_secs_f64())
        .bind(retention.rendered.as_secs_f64())
        .bind(retention.evidence.as_secs_f64())
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(artifact_row).collect())
    }

    /// Forgets an artifact whose bytes are deleted.
    pub async fn forget_artifact(&self, artifact_id: Uuid) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM artifacts WHERE artifact_id = $1")
            .bind(artifact_id)
            .execute(self.pool())
            .await?;
        Ok(())
    }
}

/// `held` (per stream, sorted disjoint ranges `[first, last]` of seqs)
/// with the seqs of `bundled` added, adjacent ranges joined.
fn held_with(held: Value, bundled: &[(String, i64)]) -> Value {
    let mut streams: std::collections::BTreeMap<String, Vec<(i64, i64)>> = Default::default();
    if let Value::Object(held) = held {
        for (stream, ranges) in held {
            let ranges = ranges.as_array().cloned().unwrap_or_default();
            streams.entry(stream).or_default().extend(
                ranges
                    .iter()
                    .filter_map(|range| Some((range.get(0)?.as_i64()?, range.get(1)?.as_i64()?))),
            );
        }
    }
    for (stream, seq) in bundled {
        streams
            .entry(stream.clone())
            .or_default()
            .push((*seq, *seq));
    }
    let mut out = Map::new();
    for (stream, mut ranges) in streams {
        ranges.sort_unstable();
        let mut joined: Vec<(i64, i64)> = Vec::with_capacity(ranges.len());
        for (first, last) in ranges {
            match joined.last_mut() {
                Some(previous) if first <= previous.1.saturating_add(1) => {
                    previous.1 = previous.1.max(last);
                }
                _ => joined.push((first, last)),
            }
        }
        let ranges: Vec<Value> = joined
            .into_iter()
            .map(|(first, last)| json!([first, last]))
            .collect();
        out.insert(stream, Value::Array(ranges));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::held_with;
    use serde_json::json;

    #[test]
    fn held_seqs_are_joined_ranges_and_a_gap_stays_open() {
        let first = held_with(
            json!({}),
            &[
                ("stdout".into(), 0),
                ("stdout".into(), 1),
                ("stdout".into(), 3),
                ("stderr".into(), 0),
            ],
        );
        assert_eq!(
            first,
            json!({"stderr": [[0, 0]], "stdout": [[0, 1], [3, 3]]})
        );
        let later = held_with(first, &[("stdout".into(), 2), ("stdout".into(), 4)]);
        assert_eq!(later, json!({"stderr": [[0, 0]], "stdout": [[0, 4]]}));
        // What is not an object of ranges holds nothing.
        assert_eq!(held_with(json!(null), &[]), json!({}));
        assert_eq!(
            held_with(json!({"stdout": "x", "stderr": [[1]]}), &[]),
            json!({"stderr": [], "stdout": []})
        );
    }
}
