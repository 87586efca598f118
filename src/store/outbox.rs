//! What each event causes to be published. Pure mapping; the relay (Kafka
//! side) moves the records. An event's own record on the published log is
//! built from its row of `attempt_events` ([`log_record`]); what else it
//! causes (work records, results) is derived from the event and its
//! attempt's fixed columns when the relay publishes it
//! ([`derived_records`]). Every record carries a stable CloudEvents id, so
//! a re-publish after a crash is deduplicated downstream. The outbox table
//! holds what other writers publish (artifact records).

use uuid::Uuid;

use crate::attempt::Attempt;
use crate::codec::{
    Codec, CodecError, Family, Headers, JobSpecRecord, ResultRecord, TerminalStatus, WorkRecord,
    WorkType,
};
use crate::contract::{
    topics, AttemptEvent, EventBody, JobSpec, LeaseInfo, Operation, TraceContext, UnixMillis,
};

/// `ce_source` of records the dispatcher causes.
pub const CE_SOURCE: &str = "execplane/dispatcher";

const RECORD_NAMESPACE: Uuid = Uuid::from_u128(0x2b8e_51c4_77d9_4a0e_8f31_c6d2_0e94_b517);

/// One row of the outbox.
#[derive(Clone, Debug, PartialEq)]
pub struct OutboxMessage {
    pub topic: String,
    /// The Kafka key: attempt id, or the runner instance for work topics.
    pub key: String,
    pub headers: Headers,
    pub payload: Vec<u8>,
}

fn derived_id(event: &AttemptEvent, purpose: &str) -> Uuid {
    let mut name = event.event_id.as_bytes().to_vec();
    name.extend_from_slice(purpose.as_bytes());
    Uuid::new_v5(&RECORD_NAMESPACE, &name)
}

/// The CloudEvents headers of a record about an attempt.
fn cloud_headers(
    id: Uuid,
    ce_type: &str,
    time: UnixMillis,
    attempt_id: Uuid,
    trace: Option<&TraceContext>,
) -> Headers {
    let id = id.to_string();
    let subject = attempt_id.to_string();
    let cloud_event = crate::codec::CloudEvent {
        id: &id,
        ce_type,
        source: CE_SOURCE,
        time,
        subject: Some(&subject),
        traceparent: trace.map(|trace| trace.traceparent.as_str()),
        tracestate: trace.and_then(|trace| trace.tracestate.as_deref()),
    };
    cloud_event.headers()
}

/// What an event's derived records are made of besides the event itself:
/// its attempt's fixed columns, the attempt's lease, and the spec (read for
/// a work item only). The relay reads them with the event
/// (`next_log_events.sql`); intake has them in the attempt it folded.
#[derive(Clone, Debug)]
pub struct AttemptFacts {
    pub job_id: String,
    pub command_id: Uuid,
    pub attempt_no: u32,
    pub tenant: String,
    pub operation: String,
    /// The attempt's lease: its identity is fixed once granted, its expiry
    /// is as of when the records are built.
    pub lease: Option<LeaseInfo>,
    pub spec: Option<JobSpec>,
    pub trace: Option<TraceContext>,
}

impl AttemptFacts {
    /// The facts of an attempt intake holds (its spec not copied: intake
    /// builds results from them, never work items).
    pub(crate) fn of(attempt: &Attempt) -> Self {
        Self {
            job_id: attempt.job_id.clone(),
            command_id: attempt.command_id,
            attempt_no: attempt.attempt_no,
            tenant: attempt.tenant.clone(),
            operation: attempt.operation.clone(),
            lease: attempt.lease.clone(),
            spec: None,
            trace: trace_of(attempt).cloned(),
        }
    }
}

fn headers(id: Uuid, ce_type: &str, event: &AttemptEvent, facts: &AttemptFacts) -> Headers {
    cloud_headers(
        id,
        ce_type,
        event.occurred_at,
        event.attempt_id,
        facts.trace.as_ref(),
    )
}

/// The trace an attempt's records carry: its spec's.
pub(crate) fn trace_of(attempt: &Attempt) -> Option<&TraceContext> {
    attempt.spec.as_ref().and_then(|spec| spec.trace.as_ref())
}

fn work(
    event: &AttemptEvent,
    facts: &AttemptFacts,
    kind: WorkType,
    lease: Option<&LeaseInfo>,
    codec: &Codec,
    reason: Option<String>,
) -> Result<Option<OutboxMessage>, CodecError> {
    let (Some(lease), Ok(operation)) = (lease, facts.operation.parse::<Operation>()) else {
        return Ok(None);
    };
    let id = derived_id(event, "work");
    let record = WorkRecord {
        record_id: id.to_string(),
        runner_instance: lease.runner_instance.clone(),
        kind,
        attempt_id: event.attempt_id.to_string(),
        job_id: facts.job_id.clone(),
        attempt_no: i32::try_from(facts.attempt_no).unwrap_or(i32::MAX),
        lease_id: lease.lease_id.to_string(),
        lease_epoch: i64::try_from(lease.epoch).unwrap_or(i64::MAX),
        expires_at: Some(lease.expires_at),
        spec: (kind == WorkType::WorkItem)
            .then(|| facts.spec.as_ref().map(JobSpecRecord::from))
            .flatten(),
        reason,
    };
    let ce_type = match kind {
        WorkType::WorkItem => "io.execplane.work.item",
        WorkType::LeaseExtended => "io.execplane.work.lease_extended",
        WorkType::LeaseRevoked => "io.execplane.work.lease_revoked",
        WorkType::Cancel => "io.execplane.work.cancel",
    };
    let mut headers = headers(id, ce_type, event, facts);
    headers.push("execplane_runner_instance", lease.runner_instance.clone());
    Ok(Some(OutboxMessage {
        topic: topics::work(operation.runner_type()),
        key: lease.runner_instance.clone(),
        headers,
        payload: codec.encode_record(&record)?,
    }))
}

/// An appended event as the relay reads it from `attempt_events`: all its
/// record on the published log is made of.
#[derive(Clone, Debug)]
pub struct LoggedEvent {
    /// Its place in the log, committed in order (docs/ARCHITECTURE.md,
    /// "Relay").
    pub position: i64,
    pub event_id: Uuid,
    pub attempt_id: Uuid,
    pub seq: i64,
    pub kind: String,
    pub occurred_at: UnixMillis,
    /// The Avro datum the chain hashes, and its writer schema's
    /// fingerprint: the record is framed as the event was written.
    pub datum: Vec<u8>,
    pub fingerprint: u64,
    pub prev_hash: [u8; 32],
    pub hash: [u8; 32],
    pub trace: Option<TraceContext>,
}

/// An event's record on the published log, keyed by attempt: a faithful,
/// ordered copy of its row, with its links of the hash chain, so the topic
/// alone proves its integrity (docs/EVENTS.md).
pub(crate) fn log_record(event: &LoggedEvent, codec: &Codec) -> Result<OutboxMessage, CodecError> {
    let mut headers = cloud_headers(
        event.event_id,
        &format!(
            "{}{}",
            crate::contract::event_kind::CE_TYPE_PREFIX,
            event.kind
        ),
        event.occurred_at,
        event.attempt_id,
        event.trace.as_ref(),
    );
    headers.push(crate::audit::SEQ_HEADER, event.seq.to_string());
    headers.push(crate::audit::PREV_HASH_HEADER, hex::encode(event.prev_hash));
    headers.push(crate::audit::HASH_HEADER, hex::encode(event.hash));
    Ok(OutboxMessage {
        topic: topics::ATTEMPT_EVENTS.to_owned(),
        key: event.attempt_id.to_string(),
        headers,
        payload: codec.frame_written_with(Family::AttemptEvent, event.fingerprint, &event.datum)?,
    })
}

/// The records one event causes besides its own on the log: a runner's
/// work item, lease extension, revocation or cancel, and the result.
/// Derived from the event and its attempt's facts alone, so the relay
/// builds them when it publishes the event (docs/ARCHITECTURE.md, "Relay").
pub(crate) fn derived_records(
    event: &AttemptEvent,
    facts: &AttemptFacts,
    codec: &Codec,
) -> Result<Vec<OutboxMessage>, CodecError> {
    let mut messages = Vec::with_capacity(1);
    let lease = facts.lease.as_ref();
    match &event.body {
        EventBody::LeaseGranted {
            lease_id,
            epoch,
            runner_instance,
            expires_at,
        } => {
            let granted = LeaseInfo {
                lease_id: *lease_id,
                epoch: *epoch,
                runner_instance: runner_instance.clone(),
                granted_at: event.occurred_at,
                expires_at: *expires_at,
                active: true,
            };
            let granted = Some(&granted);
            messages.extend(work(
                event,
                facts,
                WorkType::WorkItem,
                granted,
                codec,
                None,
            )?)
        }
        EventBody::LeaseExtended { epoch, expires_at } => {
            let extended = lease.map(|lease| LeaseInfo {
                epoch: *epoch,
                expires_at: *expires_at,
                ..lease.clone()
            });
            messages.extend(work(
                event,
                facts,
                WorkType::LeaseExtended,
                extended.as_ref(),
                codec,
                None,
            )?)
        }
        EventBody::CancelRequested { reason, .. } => {
            messages.extend(work(
                event,
                facts,
                WorkType::Cancel,
                lease,
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
                    facts,
                    WorkType::LeaseRevoked,
                    lease,
                    codec,
                    Some(message.clone()),
                )?);
            }
            messages.extend(result(event, facts, codec)?);
        }
        EventBody::Rejected { .. } => messages.extend(result(event, facts, codec)?),
        _ => {}
    }
    Ok(messages)
}

/// The result record of a terminal event (`None` for any other).
pub(crate) fn result(
    event: &AttemptEvent,
    facts: &AttemptFacts,
    codec: &Codec,
) -> Result<Option<OutboxMessage>, CodecError> {
    let (status, category, message, result_json, retry_attempt_id) = match &event.body {
        EventBody::Finished {
            outcome,
            category,
            message,
            result_json,
            retry_attempt_id,
            ..
        } => (
            TerminalStatus::from(*outcome),
            *category,
            message.clone(),
            result_json.clone(),
            *retry_attempt_id,
        ),
        EventBody::Rejected {
            category, problems, ..
        } => (
            TerminalStatus::Rejected,
            Some(*category),
            crate::attempt::rejection_message(problems),
            None,
            None,
        ),
        _ => return Ok(None),
    };
    let idempotency_key = format!("{}:{}", event.attempt_id, event.seq);
    let record = ResultRecord {
        attempt_id: event.attempt_id.to_string(),
        job_id: facts.job_id.clone(),
        command_id: facts.command_id.to_string(),
        attempt_no: i32::try_from(facts.attempt_no).unwrap_or(i32::MAX),
        tenant: facts.tenant.clone(),
        operation: facts.operation.clone(),
        status,
        category,
        message,
        result_json,
        finished_at: event.occurred_at,
        terminal_seq: i64::try_from(event.seq).unwrap_or(i64::MAX),
        idempotency_key: idempotency_key.clone(),
        retry_attempt_id: retry_attempt_id.map(|id| id.to_string()),
    };
    let mut headers = headers(
        derived_id(event, "result"),
        "io.execplane.attempt.result",
        event,
        facts,
    );
    headers.push("idempotency_key", idempotency_key);
    Ok(Some(OutboxMessage {
        topic: topics::RESULTS.to_owned(),
        key: event.attempt_id.to_string(),
        headers,
        payload: codec.encode_record(&record)?,
    }))
}
