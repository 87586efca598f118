//! The callback queue: rows written with the terminal event (one per
//! channel: the JobSpec's URL, its topic), claimed by the callback worker
//! with `FOR UPDATE SKIP LOCKED`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;
use uuid::Uuid;

use super::outbox::AttemptFacts;
use super::rows::{enum_text, timestamp};
use super::{Store, StoreError};
use crate::attempt::Attempt;
use crate::codec::{Codec, CodecError};
use crate::contract::AttemptEvent;

/// Where a callback goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// POSTed to the JobSpec's `callback.url`.
    Http,
    /// Produced to the JobSpec's `callback.topic`.
    Kafka,
}

impl Channel {
    fn parse(text: &str) -> Self {
        if text == "kafka" {
            Channel::Kafka
        } else {
            Channel::Http
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Http => "http",
            Channel::Kafka => "kafka",
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct PendingCallback {
    attempt_id: Uuid,
    terminal_seq: i64,
    url: String,
    idempotency_key: String,
    body: serde_json::Value,
    traceparent: Option<String>,
    next_attempt_at: DateTime<Utc>,
    channel: Channel,
    headers: Option<serde_json::Map<String, serde_json::Value>>,
    /// Hex, for the row's `bytea`.
    payload: Option<String>,
}

/// The callbacks a terminal event owes: to the JobSpec's URL, and to its
/// topic, the exec.results.v1 record `result` (the same record, the same
/// `ce_id`).
pub(crate) fn pending_for(
    event: &AttemptEvent,
    attempt: &Attempt,
    codec: &Codec,
) -> Result<Vec<PendingCallback>, CodecError> {
    let Some(callback) = attempt
        .spec
        .as_ref()
        .and_then(|spec| spec.callback.as_ref())
    else {
        return Ok(Vec::new());
    };
    let mut pending = Vec::new();
    if let Some(url) = &callback.url {
        pending.push(http(event, attempt, url.clone()));
    }
    let result = match &callback.topic {
        Some(topic) => super::outbox::result(event, &AttemptFacts::of(attempt), codec)?
            .map(|result| (topic, result)),
        None => None,
    };
    if let Some((topic, result)) = result {
        pending.push(PendingCallback {
            attempt_id: event.attempt_id,
            terminal_seq: i64::try_from(event.seq).unwrap_or(i64::MAX),
            url: topic.clone(),
            idempotency_key: format!("{}:{}", event.attempt_id, event.seq),
            // The record is the result's, in `headers` and `payload`.
            body: serde_json::json!({}),
            traceparent: None,
            next_attempt_at: timestamp(event.occurred_at),
            channel: Channel::Kafka,
            headers: Some(result.headers.to_json()),
            payload: Some(hex::encode(&result.payload)),
        });
    }
    Ok(pending)
}

fn http(event: &AttemptEvent, attempt: &Attempt, url: String) -> PendingCallback {
    let spec = attempt.spec.as_ref();
    let idempotency_key = format!("{}:{}", event.attempt_id, event.seq);
    let body = serde_json::json!({
        "attempt_id": attempt.attempt_id,
        "job_id": attempt.job_id,
        "command_id": attempt.command_id,
        "attempt_no": attempt.attempt_no,
        "tenant": attempt.tenant,
        "operation": attempt.operation,
        "status": attempt.status.as_str(),
        "category": attempt.failure_category.as_ref().map(enum_text),
        "message": attempt.message,
        "result": attempt.result_json.as_deref().and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok()),
        "finished_at": attempt.finished_at.map(timestamp),
        "terminal_seq": event.seq,
        "idempotency_key": idempotency_key,
        "retry_attempt_id": attempt.retry_attempt_id,
    });
    PendingCallback {
        attempt_id: event.attempt_id,
        terminal_seq: i64::try_from(event.seq).unwrap_or(i64::MAX),
        url,
        idempotency_key,
        body,
        traceparent: spec
            .and_then(|spec| spec.trace.as_ref())
            .map(|trace| trace.traceparent.clone()),
        next_attempt_at: timestamp(event.occurred_at),
        channel: Channel::Http,
        headers: None,
        payload: None,
    }
}

/// A callback claimed for one delivery attempt.
#[derive(Clone, Debug)]
pub struct ClaimedCallback {
    pub attempt_id: Uuid,
    pub terminal_seq: i64,
    pub url: String,
    pub idempotency_key: String,
    pub body: serde_json::Value,
    pub traceparent: Option<String>,
    /// Including this one.
    pub attempts: i32,
    pub channel: Channel,
    /// A topic callback's record: its headers and value.
    pub headers: Option<serde_json::Value>,
    pub payload: Option<Vec<u8>>,
    /// The attempt's tenant, whose policy the delivery is held to.
    pub tenant: String,
}

impl Store {
    /// Claims due callbacks, none of `skip_tenants`' (those that have their
    /// share in flight): bumps their attempt count and pushes their next
    /// attempt `lease` ahead, so a crashed worker's claim comes back.
    pub async fn claim_callbacks(
        &self,
        limit: i64,
        lease: std::time::Duration,
        skip_tenants: &[String],
    ) -> Result<Vec<ClaimedCallback>, StoreError> {
        let rows = sqlx::query(include_str!("sql/claim_callbacks.sql"))
            .bind(limit)
            .bind(lease.as_secs_f64())
            .bind(skip_tenants)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| ClaimedCallback {
                attempt_id: row.get(0),
                terminal_seq: row.get(1),
                url: row.get(2),
                idempotency_key: row.get(3),
                body: row.get(4),
                traceparent: row.get(5),
                attempts: row.get(6),
                channel: Channel::parse(row.get::<&str, _>(7)),
                headers: row.get(8),
                payload: row.get(9),
                tenant: row.get::<Option<String>, _>(10).unwrap_or_default(),
            })
            .collect())
    }

    /// Schedules the next delivery attempt after a failure.
    pub async fn retry_callback(
        &self,
        callback: &ClaimedCallback,
        delay: std::time::Duration,
        status: Option<u16>,
        error: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE callbacks SET next_attempt_at = now() + make_interval(secs => $3), last_status = $4, last_error = $5
             WHERE attempt_id = $1 AND terminal_seq = $2 AND channel = $6",
        )
        .bind(callback.attempt_id)
        .bind(callback.terminal_seq)
        .bind(delay.as_secs_f64())
        .bind(status.map(i32::from))
        .bind(error)
        .bind(callback.channel.as_str())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Marks a callback delivered or given up.
    pub async fn finish_callback(
        &self,
        callback: &ClaimedCallback,
        delivered: bool,
        status: Option<u16>,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE callbacks SET status = $3, last_status = $4, last_error = $5 WHERE attempt_id = $1 AND terminal_seq = $2 AND channel = $6")
            .bind(callback.attempt_id)
            .bind(callback.terminal_seq)
            .bind(if delivered { "delivered" } else { "failed" })
            .bind(status.map(i32::from))
            .bind(error)
            .bind(callback.channel.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
