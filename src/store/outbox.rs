//! What each event causes to be published, as outbox rows. Pure mapping; the
//! relay (Kafka side) moves the rows. Every record carries a stable
//! CloudEvents id, so a re-publish after a crash is deduplicated downstream.

use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::attempt::Attempt;
use crate::codec::{
    Codec, CodecError, Family, JobSpecRecord, ResultRecord, TerminalStatus, WorkRecord, WorkType,
};
use crate::contract::{topics, AttemptEvent, EventBody, Operation, TerminalOutcome};

/// `ce_source` of records the dispatcher causes.
pub const CE_SOURCE: &str = "execplane/dispatcher";

const RECORD_NAMESPACE: Uuid = Uuid::from_u128(0x2b8e_51c4_77d9_4a0e_8f31_c6d2_0e94_b517);

/// One row of the outbox.
#[derive(Clone, Debug, PartialEq)]
pub struct OutboxMessage {
    pub topic: String,
    /// The Kafka key: attempt id, or the runner instance for work topics.
    pub key: String,
    pub headers: Map<String, Value>,
    pub payload: Vec<u8>,
}

fn derived_id(event: &AttemptEvent, purpose: &str) -> Uuid {
    let mut name = event.event_id.as_bytes().to_vec();
    name.extend_from_slice(purpose.as_bytes());
    Uuid::new_v5(&RECORD_NAMESPACE, &name)
}

fn headers(id: Uuid, ce_type: &str, event: &AttemptEvent, attempt: &Attempt) -> Map<String, Value> {
    let id = id.to_string();
    let subject = event.attempt_id.to_string();
    let trace = attempt.spec.as_ref().and_then(|spec| spec.trace.as_ref());
    let cloud_event = crate::codec::CloudEvent {
        id: &id,
        ce_type,
        source: CE_SOURCE,
        time: event.occurred_at,
        subject: Some(&subject),
        traceparent: trace.map(|trace| trace.traceparent.as_str()),
        tracestate: trace.and_then(|trace| trace.tracestate.as_deref()),
    };
    cloud_event
        .headers()
        .into_iter()
        .map(|(name, value)| (name.to_owned(), Value::String(value)))
        .collect()
}

fn work(
    event: &AttemptEvent,
    attempt: &Attempt,
    kind: WorkType,
    codec: &Codec,
    reason: Option<String>,
) -> Result<Option<OutboxMessage>, CodecError> {
    let (Some(lease), Ok(operation)) = (
        attempt.lease.as_ref(),
        attempt.operation.parse::<Operation>(),
    ) else {
        return Ok(None);
    };
    let id = derived_id(event, "work");
    let record = WorkRecord {
        record_id: id.to_string(),
        runner_instance: lease.runner_instance.clone(),
        kind,
        attempt_id: attempt.attempt_id.to_string(),
        job_id: attempt.job_id.clone(),
        attempt_no: i32::try_from(attempt.attempt_no).unwrap_or(i32::MAX),
        lease_id: lease.lease_id.to_string(),
        lease_epoch: i64::try_from(lease.epoch).unwrap_or(i64::MAX),
        expires_at: Some(lease.expires_at),
        spec: (kind == WorkType::WorkItem)
            .then(|| attempt.spec.as_deref().map(JobSpecRecord::from))
            .flatten(),
        reason,
    };
    let ce_type = match kind {
        WorkType::WorkItem => "io.execplane.work.item",
        WorkType::LeaseExtended => "io.execplane.work.lease_extended",
        WorkType::LeaseRevoked => "io.execplane.work.lease_revoked",
        WorkType::Cancel => "io.execplane.work.cancel",
    };
    let mut headers = headers(id, ce_type, event, attempt);
    headers.insert(
        "execplane_runner_instance".into(),
        json!(lease.runner_instance),
    );
    Ok(Some(OutboxMessage {
        topic: topics::work(operation.runner_type()),
        key: lease.runner_instance.clone(),
        headers,
        payload: codec.encode(Family::WorkItem, &record)?,
    }))
}

/// An event as the hash chain holds it: its Avro datum and its links.
pub(crate) struct Chained<'a> {
    pub datum: &'a [u8],
    pub prev_hash: &'a [u8; 32],
    pub hash: &'a [u8; 32],
}

/// The outbox rows one event causes, given the attempt after the event.
pub(crate) fn messages_for(
    event: &AttemptEvent,
    chained: Chained<'_>,
    attempt: &Attempt,
    codec: &Codec,
) -> Result<Vec<OutboxMessage>, CodecError> {
    let mut messages = Vec::with_capacity(2);
    // Every event goes to the published log, keyed by attempt: a faithful,
    // ordered copy of attempt_events, with its links of the hash chain, so
    // the topic alone proves its integrity (docs/EVENTS.md).
    let mut published = headers(
        event.event_id,
        &format!("io.execplane.attempt.{}", event.body.kind()),
        event,
        attempt,
    );
    published.insert(
        crate::audit::SEQ_HEADER.into(),
        json!(event.seq.to_string()),
    );
    published.insert(
        crate::audit::PREV_HASH_HEADER.into(),
        json!(hex::encode(chained.prev_hash)),
    );
    published.insert(
        crate::audit::HASH_HEADER.into(),
        json!(hex::encode(chained.hash)),
    );
    messages.push(OutboxMessage {
        topic: topics::ATTEMPT_EVENTS.to_owned(),
        key: event.attempt_id.to_string(),
        headers: published,
        payload: codec.frame(Family::AttemptEvent, chained.datum)?,
    });
    match &event.body {
        EventBody::LeaseGranted { .. } => {
            messages.extend(work(event, attempt, WorkType::WorkItem, codec, None)?)
        }
        EventBody::LeaseExtended { .. } => {
            messages.extend(work(event, attempt, WorkType::LeaseExtended, codec, None)?)
        }
        EventBody::CancelRequested { reason, .. } => {
            messages.extend(work(
                event,
                attempt,
                WorkType::Cancel,
                codec,
                Some(reason.clone()),
            )?);
        }
        EventBody::Finished {
            lease_revoked,
            message,
            ..
        } => {
            if *lease_revoked {
                messages.extend(work(
                    event,
                    attempt,
                    WorkType::LeaseRevoked,
                    codec,
                    Some(message.clone()),
                )?);
            }
            messages.push(result(event, attempt, codec)?);
        }
        EventBody::Rejected { .. } => messages.push(result(event, attempt, codec)?),
        _ => {}
    }
    Ok(messages)
}

fn result(
    event: &AttemptEvent,
    attempt: &Attempt,
    codec: &Codec,
) -> Result<OutboxMessage, CodecError> {
    let status = match attempt.outcome {
        None => TerminalStatus::Rejected,
        Some(TerminalOutcome::Succeeded) => TerminalStatus::Succeeded,
        Some(TerminalOutcome::Failed) => TerminalStatus::Failed,
        Some(TerminalOutcome::TimedOut) => TerminalStatus::TimedOut,
        Some(TerminalOutcome::Cancelled) => TerminalStatus::Cancelled,
        Some(TerminalOutcome::OutcomeUnknown) => TerminalStatus::OutcomeUnknown,
    };
    let idempotency_key = format!("{}:{}", event.attempt_id, event.seq);
    let record = ResultRecord {
        attempt_id: attempt.attempt_id.to_string(),
        job_id: attempt.job_id.clone(),
        command_id: attempt.command_id.to_string(),
        attempt_no: i32::try_from(attempt.attempt_no).unwrap_or(i32::MAX),
        tenant: attempt.tenant.clone(),
        operation: attempt.operation.clone(),
        status,
        category: attempt.failure_category,
        message: attempt.message.clone().unwrap_or_default(),
        result_json: attempt.result_json.clone(),
        finished_at: attempt.finished_at.unwrap_or(event.occurred_at),
        terminal_seq: i64::try_from(event.seq).unwrap_or(i64::MAX),
        idempotency_key: idempotency_key.clone(),
        retry_attempt_id: attempt.retry_attempt_id.map(|id| id.to_string()),
    };
    let mut headers = headers(
        derived_id(event, "result"),
        "io.execplane.attempt.result",
        event,
        attempt,
    );
    headers.insert("idempotency_key".into(), json!(idempotency_key));
    Ok(OutboxMessage {
        topic: topics::RESULTS.to_owned(),
        key: attempt.attempt_id.to_string(),
        headers,
        payload: codec.encode(Family::Result, &record)?,
    })
}
