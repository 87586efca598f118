//! Tamper evidence: re-walk every attempt's hash chain.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use sqlx::Row;
use uuid::Uuid;

use super::batch::{chain_hash, GENESIS_HASH};
use super::{Store, StoreError};
use crate::codec::{AttemptEventRecord, Codec, Family};
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
        let record: AttemptEventRecord = Codec::from_datum_by_fingerprint(
            Family::AttemptEvent,
            self.schema_fingerprint as u64,
            &self.payload,
        )?;
        Ok(AttemptEvent::try_from(record)?)
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

/// Where a chain first breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainBreak {
    pub attempt_id: Uuid,
    pub seq: i64,
    pub reason: String,
}

#[derive(Clone, Debug, Default)]
pub struct ChainReport {
    pub attempts: u64,
    pub events: u64,
    /// The first bad event, in (attempt_id, seq) order; walking stops there.
    pub first_break: Option<ChainBreak>,
}

struct Walk {
    attempt_id: Option<Uuid>,
    expected_seq: i64,
    tip: [u8; 32],
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

    /// Re-walks the hash chain of one attempt or of all, checking per event:
    /// seq continuity, `prev_hash` linking, `hash = sha256(prev_hash ||
    /// payload)`, that the payload decodes and agrees with its columns; and
    /// per attempt, that the projection's `last_seq`/`last_hash` is the tip
    /// (so a truncated tail is caught too).
    pub async fn verify_chain(&self, only: Option<Uuid>) -> Result<ChainReport, StoreError> {
        let mut report = ChainReport::default();
        let tips: HashMap<Uuid, (i64, Vec<u8>)> = sqlx::query("SELECT attempt_id, last_seq, last_hash FROM attempts WHERE $1::uuid IS NULL OR attempt_id = $1")
            .bind(only)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(|row| (row.get(0), (row.get(1), row.get(2))))
            .collect();
        let mut walked: HashMap<Uuid, (i64, [u8; 32])> = HashMap::new();
        let mut walk = Walk {
            attempt_id: None,
            expected_seq: 1,
            tip: GENESIS_HASH,
        };
        let query = format!(
            "SELECT {EVENT_COLUMNS} FROM attempt_events WHERE $1::uuid IS NULL OR attempt_id = $1 ORDER BY attempt_id, seq"
        );
        let mut rows = sqlx::query(&query).bind(only).fetch(&self.pool);
        while let Some(row) = rows.try_next().await? {
            let event = StoredEvent::from_row(&row)?;
            if walk.attempt_id != Some(event.attempt_id) {
                if let Some(previous) = walk.attempt_id {
                    walked.insert(previous, (walk.expected_seq - 1, walk.tip));
                }
                walk = Walk {
                    attempt_id: Some(event.attempt_id),
                    expected_seq: 1,
                    tip: GENESIS_HASH,
                };
                report.attempts += 1;
            }
            report.events += 1;
            if let Some(reason) = check_link(&walk, &event) {
                report.first_break = Some(ChainBreak {
                    attempt_id: event.attempt_id,
                    seq: event.seq,
                    reason,
                });
                return Ok(report);
            }
            walk.expected_seq += 1;
            walk.tip = event.hash.as_slice().try_into().unwrap_or(GENESIS_HASH);
        }
        if let Some(previous) = walk.attempt_id {
            walked.insert(previous, (walk.expected_seq - 1, walk.tip));
        }
        let mut tip_ids: Vec<&Uuid> = tips.keys().collect();
        tip_ids.sort();
        for attempt_id in tip_ids {
            let (last_seq, last_hash) = &tips[attempt_id];
            match walked.get(attempt_id) {
                None => {
                    report.first_break = Some(ChainBreak {
                        attempt_id: *attempt_id,
                        seq: 1,
                        reason: "the attempt exists in the projection but has no events".into(),
                    });
                    return Ok(report);
                }
                Some((seq, hash)) if seq != last_seq || hash.as_slice() != last_hash.as_slice() => {
                    report.first_break = Some(ChainBreak {
                        attempt_id: *attempt_id,
                        seq: seq + 1,
                        reason: format!("the chain ends at seq {seq} but the projection recorded seq {last_seq} as its tip (events missing?)"),
                    });
                    return Ok(report);
                }
                Some(_) => {}
            }
        }
        Ok(report)
    }
}

fn check_link(walk: &Walk, event: &StoredEvent) -> Option<String> {
    if event.seq != walk.expected_seq {
        return Some(format!(
            "expected seq {} here, found seq {} (events missing or reordered)",
            walk.expected_seq, event.seq
        ));
    }
    if event.prev_hash.as_slice() != walk.tip.as_slice() {
        return Some(format!("prev_hash does not link to seq {}", event.seq - 1));
    }
    let recomputed = chain_hash(&walk.tip, &event.payload);
    if event.hash.as_slice() != recomputed.as_slice() {
        return Some(
            "hash does not match sha256(prev_hash || payload): the payload or hash was altered"
                .into(),
        );
    }
    match event.decode() {
        Err(error) => Some(format!("the payload does not decode: {error}")),
        Ok(decoded) => event.mismatch(&decoded),
    }
}
