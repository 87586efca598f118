//! Rust mirrors of the Avro records, field for field, and the conversions to
//! and from the contract types. Ids travel as strings, durations as
//! milliseconds, maps as sorted `Label` arrays.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::CodecError;
use crate::contract::{
    AttemptEvent, Callback, DurationMs, EventBody, FailureCategory, JobSpec, Label, OutputArtifact,
    PolicyFlags, Problem, ReportBody, ReportedOutcome, RetryPolicy, RunnerReport,
    RunnerRequirements, SecretRef, Target, TargetKey, TerminalOutcome, Timeouts, TimerKind,
    TraceContext, UnixMillis,
};

fn uuid(text: &str, field: &str) -> Result<Uuid, CodecError> {
    Uuid::parse_str(text)
        .map_err(|_| CodecError::Invalid(format!("`{field}` is not a UUID: `{text}`")))
}

fn opt_uuid(text: &Option<String>, field: &str) -> Result<Option<Uuid>, CodecError> {
    text.as_deref().map(|value| uuid(value, field)).transpose()
}

fn missing(field: &str, kind: &str) -> CodecError {
    CodecError::Invalid(format!("`{field}` is required for a `{kind}` record"))
}

fn labels(map: &BTreeMap<String, String>) -> Vec<Label> {
    map.iter()
        .map(|(key, value)| Label {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

fn unlabel(labels: Vec<Label>) -> BTreeMap<String, String> {
    labels
        .into_iter()
        .map(|label| (label.key, label.value))
        .collect()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunnerRequirementsRecord {
    pub pool: Vec<Label>,
    pub capabilities: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetRecord {
    pub kind: String,
    pub id: String,
    pub address: Option<String>,
    pub attributes: Vec<Label>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeoutsRecord {
    pub schedule_to_start_ms: i64,
    pub start_to_close_ms: i64,
    pub heartbeat_ms: i64,
    pub schedule_to_close_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicyRecord {
    pub max_attempts: i32,
    pub initial_backoff_ms: i64,
    pub max_backoff_ms: i64,
}

/// The Avro form of a JobSpec. Converting back yields JSON that goes through
/// the same validation as a JSON JobSpec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpecRecord {
    pub command_id: String,
    pub job_id: String,
    pub tenant: String,
    pub requested_by: String,
    pub operation: String,
    pub inputs_json: String,
    pub runner_requirements: RunnerRequirementsRecord,
    pub targets: Vec<TargetRecord>,
    pub secret_refs: Vec<SecretRef>,
    pub timeouts: TimeoutsRecord,
    pub retry: RetryPolicyRecord,
    pub policy: PolicyFlags,
    pub callback: Option<Callback>,
    pub trace: Option<TraceContext>,
}

fn millis(duration: DurationMs) -> i64 {
    duration.as_i64()
}

fn duration(millis: i64) -> DurationMs {
    DurationMs(u64::try_from(millis).unwrap_or(0))
}

impl From<&JobSpec> for JobSpecRecord {
    fn from(spec: &JobSpec) -> Self {
        Self {
            command_id: spec.command_id.to_string(),
            job_id: spec.job_id.clone(),
            tenant: spec.tenant.clone(),
            requested_by: spec.requested_by.clone(),
            operation: spec.operation.as_str().to_owned(),
            inputs_json: serde_json::to_string(&spec.inputs).unwrap_or_else(|_| "{}".to_owned()),
            runner_requirements: RunnerRequirementsRecord {
                pool: labels(&spec.runner_requirements.pool),
                capabilities: spec.runner_requirements.capabilities.clone(),
            },
            targets: spec
                .targets
                .iter()
                .map(|target| TargetRecord {
                    kind: target.kind.clone(),
                    id: target.id.clone(),
                    address: target.address.clone(),
                    attributes: labels(&target.attributes),
                })
                .collect(),
            secret_refs: spec.secret_refs.clone(),
            timeouts: TimeoutsRecord {
                schedule_to_start_ms: millis(spec.timeouts.schedule_to_start),
                start_to_close_ms: millis(spec.timeouts.start_to_close),
                heartbeat_ms: millis(spec.timeouts.heartbeat),
                schedule_to_close_ms: millis(spec.timeouts.schedule_to_close),
            },
            retry: RetryPolicyRecord {
                max_attempts: i32::try_from(spec.retry.max_attempts).unwrap_or(i32::MAX),
                initial_backoff_ms: millis(spec.retry.initial_backoff),
                max_backoff_ms: millis(spec.retry.max_backoff),
            },
            policy: spec.policy.clone(),
            callback: spec.callback.clone(),
            trace: spec.trace.clone(),
        }
    }
}

impl JobSpecRecord {
    /// The JSON form, for validation. Malformed `inputs_json` becomes a JSON
    /// string so that validation reports it at `inputs`.
    pub fn to_json(&self) -> serde_json::Value {
        let inputs = serde_json::from_str::<serde_json::Value>(&self.inputs_json)
            .unwrap_or_else(|_| serde_json::Value::String(self.inputs_json.clone()));
        let spec = serde_json::json!({
            "command_id": self.command_id,
            "job_id": self.job_id,
            "tenant": self.tenant,
            "requested_by": self.requested_by,
            "operation": self.operation,
            "inputs": inputs,
            "runner_requirements": RunnerRequirements {
                pool: unlabel(self.runner_requirements.pool.clone()),
                capabilities: self.runner_requirements.capabilities.clone(),
            },
            "targets": self.targets.iter().map(|target| Target {
                kind: target.kind.clone(),
                id: target.id.clone(),
                address: target.address.clone(),
                attributes: unlabel(target.attributes.clone()),
            }).collect::<Vec<_>>(),
            "secret_refs": self.secret_refs,
            "timeouts": {
                "schedule_to_start": self.timeouts.schedule_to_start_ms,
                "start_to_close": self.timeouts.start_to_close_ms,
                "heartbeat": self.timeouts.heartbeat_ms,
                "schedule_to_close": self.timeouts.schedule_to_close_ms,
            },
            "retry": {
                "max_attempts": self.retry.max_attempts,
                "initial_backoff": self.retry.initial_backoff_ms,
                "max_backoff": self.retry.max_backoff_ms,
            },
            "policy": self.policy,
        });
        let mut spec = spec;
        // Built field by field (absent fields stay absent, as serde writes
        // them): nothing here can fail to encode.
        if let Some(callback) = &self.callback {
            let mut object = serde_json::Map::new();
            if let Some(url) = &callback.url {
                object.insert("url".into(), serde_json::Value::String(url.clone()));
            }
            if let Some(topic) = &callback.topic {
                object.insert("topic".into(), serde_json::Value::String(topic.clone()));
            }
            spec["callback"] = serde_json::Value::Object(object);
        }
        if let Some(trace) = &self.trace {
            let mut object = serde_json::Map::new();
            object.insert(
                "traceparent".into(),
                serde_json::Value::String(trace.traceparent.clone()),
            );
            if let Some(state) = &trace.tracestate {
                object.insert(
                    "tracestate".into(),
                    serde_json::Value::String(state.clone()),
                );
            }
            spec["trace"] = serde_json::Value::Object(object);
        }
        spec
    }

    /// Back to a JobSpec that was valid when written (events, work items).
    /// Not re-validated: policy may tighten later, history must still read.
    pub fn to_spec(&self) -> Result<JobSpec, CodecError> {
        Ok(JobSpec {
            command_id: uuid(&self.command_id, "spec.command_id")?,
            job_id: self.job_id.clone(),
            tenant: self.tenant.clone(),
            requested_by: self.requested_by.clone(),
            operation: self.operation.parse().map_err(CodecError::Invalid)?,
            inputs: serde_json::from_str(&self.inputs_json)
                .map_err(|error| CodecError::Invalid(format!("spec.inputs_json: {error}")))?,
            runner_requirements: RunnerRequirements {
                pool: unlabel(self.runner_requirements.pool.clone()),
                capabilities: self.runner_requirements.capabilities.clone(),
            },
            targets: self
                .targets
                .iter()
                .map(|target| Target {
                    kind: target.kind.clone(),
                    id: target.id.clone(),
                    address: target.address.clone(),
                    attributes: unlabel(target.attributes.clone()),
                })
                .collect(),
            secret_refs: self.secret_refs.clone(),
            timeouts: Timeouts {
                schedule_to_start: duration(self.timeouts.schedule_to_start_ms),
                start_to_close: duration(self.timeouts.start_to_close_ms),
                heartbeat: duration(self.timeouts.heartbeat_ms),
                schedule_to_close: duration(self.timeouts.schedule_to_close_ms),
            },
            retry: RetryPolicy {
                max_attempts: u32::try_from(self.retry.max_attempts).unwrap_or(1),
                initial_backoff: duration(self.retry.initial_backoff_ms),
                max_backoff: duration(self.retry.max_backoff_ms),
            },
            policy: self.policy.clone(),
            callback: self.callback.clone(),
            trace: self.trace.clone(),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandKind {
    ExecuteJob,
    CancelAttempt,
    ApprovePlan,
}

/// An ApprovePlan command: the saved plan `plan_digest` of the
/// `opentofu.plan` attempt `plan_attempt_id` of `tenant` may be applied,
/// approved by `approved_by`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovePlanRecord {
    pub plan_attempt_id: String,
    pub plan_digest: String,
    pub tenant: String,
    pub approved_by: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelAttemptRecord {
    pub attempt_id: String,
    pub reason: String,
    pub requested_by: String,
    pub grace_ms: Option<i64>,
}

/// exec.commands.v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandRecord {
    pub command_id: String,
    pub kind: CommandKind,
    pub issued_at: UnixMillis,
    pub execute: Option<JobSpecRecord>,
    pub cancel: Option<CancelAttemptRecord>,
    /// An ApprovePlan's (since 0.3).
    #[serde(default)]
    pub approve: Option<ApprovePlanRecord>,
}

impl CommandRecord {
    /// An ExecuteJob command for `spec` (its command id is the spec's).
    pub fn execute(spec: &JobSpec, issued_at: UnixMillis) -> Self {
        Self {
            command_id: spec.command_id.to_string(),
            kind: CommandKind::ExecuteJob,
            issued_at,
            execute: Some(JobSpecRecord::from(spec)),
            cancel: None,
            approve: None,
        }
    }

    /// A CancelAttempt command.
    pub fn cancel(
        command_id: Uuid,
        attempt_id: Uuid,
        reason: String,
        requested_by: String,
        grace_ms: Option<i64>,
        issued_at: UnixMillis,
    ) -> Self {
        Self {
            command_id: command_id.to_string(),
            kind: CommandKind::CancelAttempt,
            issued_at,
            execute: None,
            cancel: Some(CancelAttemptRecord {
                attempt_id: attempt_id.to_string(),
                reason,
                requested_by,
                grace_ms,
            }),
            approve: None,
        }
    }

    /// An ApprovePlan command.
    pub fn approve(command_id: Uuid, approval: ApprovePlanRecord, issued_at: UnixMillis) -> Self {
        Self {
            command_id: command_id.to_string(),
            kind: CommandKind::ApprovePlan,
            issued_at,
            execute: None,
            cancel: None,
            approve: Some(approval),
        }
    }
}

/// The `type` of an attempt event record (the `EventBody` tag).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    #[default]
    Created,
    Rejected,
    LeaseGranted,
    LeaseExtended,
    Started,
    Progress,
    CancelRequested,
    ReportFenced,
    Finished,
    CallbackRecorded,
    PlanApproved,
}

impl EventType {
    fn of(body: &EventBody) -> Self {
        match body {
            EventBody::Created { .. } => EventType::Created,
            EventBody::Rejected { .. } => EventType::Rejected,
            EventBody::LeaseGranted { .. } => EventType::LeaseGranted,
            EventBody::LeaseExtended { .. } => EventType::LeaseExtended,
            EventBody::Started { .. } => EventType::Started,
            EventBody::Progress { .. } => EventType::Progress,
            EventBody::CancelRequested { .. } => EventType::CancelRequested,
            EventBody::ReportFenced { .. } => EventType::ReportFenced,
            EventBody::Finished { .. } => EventType::Finished,
            EventBody::CallbackRecorded { .. } => EventType::CallbackRecorded,
            EventBody::PlanApproved { .. } => EventType::PlanApproved,
        }
    }
}

/// The `type` of a runner event record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportType {
    Started,
    Heartbeat,
    Progress,
    Finished,
}

/// exec.attempt-events.v1 and the `attempt_events.payload` column.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptEventRecord {
    pub event_id: String,
    pub attempt_id: String,
    pub job_id: String,
    pub seq: i64,
    pub occurred_at: UnixMillis,
    #[serde(rename = "type")]
    pub kind: EventType,
    pub command_id: Option<String>,
    pub attempt_no: Option<i32>,
    pub spec: Option<JobSpecRecord>,
    pub available_at: Option<i64>,
    pub previous_attempt_id: Option<String>,
    pub tenant: Option<String>,
    pub operation: Option<String>,
    pub problems: Vec<Problem>,
    pub lease_id: Option<String>,
    pub epoch: Option<i64>,
    pub runner_instance: Option<String>,
    pub expires_at: Option<i64>,
    pub message: Option<String>,
    pub percent: Option<i32>,
    pub reason: Option<String>,
    pub requested_by: Option<String>,
    pub grace_deadline: Option<i64>,
    pub report_kind: Option<String>,
    pub current_epoch: Option<i64>,
    pub outcome: Option<TerminalOutcome>,
    pub category: Option<FailureCategory>,
    pub result_json: Option<String>,
    pub timer: Option<TimerKind>,
    pub lease_revoked: bool,
    pub retry_attempt_id: Option<String>,
    pub url: Option<String>,
    pub delivered: Option<bool>,
    pub delivery_attempts: Option<i32>,
    pub http_status: Option<i32>,
    pub error: Option<String>,
    pub idempotency_key: Option<String>,
    /// `created` and `rejected`: the operator policy in force (since 0.2).
    pub policy_digest: Option<String>,
    /// `finished`: the files the runner stored (since 0.2).
    pub outputs: Vec<OutputArtifact>,
    /// `created`: the target keys the attempt holds while leased (since 0.2).
    pub target_keys: Vec<TargetKeyRecord>,
    /// `plan_approved`: the saved plan's digest (since 0.3).
    #[serde(default)]
    pub plan_digest: Option<String>,
}

/// One target key of a `created` event and how many attempts may hold it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetKeyRecord {
    pub key: String,
    pub limit: i32,
}

impl From<&TargetKey> for TargetKeyRecord {
    fn from(key: &TargetKey) -> Self {
        TargetKeyRecord {
            key: key.key.clone(),
            limit: i32::try_from(key.limit).unwrap_or(i32::MAX),
        }
    }
}

impl TargetKeyRecord {
    fn to_key(&self) -> Result<TargetKey, CodecError> {
        match u32::try_from(self.limit) {
            Ok(limit) if limit >= 1 => Ok(TargetKey {
                key: self.key.clone(),
                limit,
            }),
            _ => Err(CodecError::Invalid(format!(
                "target key `{}` has limit {}; a limit is at least 1",
                self.key, self.limit
            ))),
        }
    }
}

fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn unsigned(value: Option<i64>, field: &str, kind: &str) -> Result<u64, CodecError> {
    value
        .and_then(|value| u64::try_from(value).ok())
        .ok_or_else(|| missing(field, kind))
}

impl From<&AttemptEvent> for AttemptEventRecord {
    fn from(event: &AttemptEvent) -> Self {
        let mut record = AttemptEventRecord {
            event_id: event.event_id.to_string(),
            attempt_id: event.attempt_id.to_string(),
            job_id: event.job_id.clone(),
            seq: signed(event.seq),
            occurred_at: event.occurred_at,
            kind: EventType::of(&event.body),
            ..Default::default()
        };
        match &event.body {
            EventBody::Created {
                command_id,
                attempt_no,
                spec,
                available_at,
                previous_attempt_id,
                policy_digest,
                target_keys,
            } => {
                record.target_keys = target_keys.iter().map(TargetKeyRecord::from).collect();
                record.policy_digest = policy_digest.clone();
                record.command_id = Some(command_id.to_string());
                record.attempt_no = Some(*attempt_no as i32);
                record.spec = Some(JobSpecRecord::from(spec.as_ref()));
                record.available_at = Some(*available_at);
                record.previous_attempt_id = previous_attempt_id.map(|id| id.to_string());
            }
            EventBody::Rejected {
                command_id,
                attempt_no,
                tenant,
                operation,
                category,
                problems,
                policy_digest,
            } => {
                record.policy_digest = policy_digest.clone();
                record.command_id = Some(command_id.to_string());
                record.attempt_no = Some(*attempt_no as i32);
                record.tenant = Some(tenant.clone());
                record.operation = Some(operation.clone());
                record.category = Some(*category);
                record.problems = problems.clone();
            }
            EventBody::LeaseGranted {
                lease_id,
                epoch,
                runner_instance,
                expires_at,
            } => {
                record.lease_id = Some(lease_id.to_string());
                record.epoch = Some(signed(*epoch));
                record.runner_instance = Some(runner_instance.clone());
                record.expires_at = Some(*expires_at);
            }
            EventBody::LeaseExtended { epoch, expires_at } => {
                record.epoch = Some(signed(*epoch));
                record.expires_at = Some(*expires_at);
            }
            EventBody::Started {
                epoch,
                runner_instance,
            } => {
                record.epoch = Some(signed(*epoch));
                record.runner_instance = Some(runner_instance.clone());
            }
            EventBody::Progress {
                epoch,
                message,
                percent,
            } => {
                record.epoch = Some(signed(*epoch));
                record.message = Some(message.clone());
                record.percent = percent.map(i32::from);
            }
            EventBody::CancelRequested {
                reason,
                requested_by,
                grace_deadline,
            } => {
                record.reason = Some(reason.clone());
                record.requested_by = Some(requested_by.clone());
                record.grace_deadline = Some(*grace_deadline);
            }
            EventBody::ReportFenced {
                report_kind,
                report_epoch,
                current_epoch,
                runner_instance,
                reason,
            } => {
                record.report_kind = Some(report_kind.clone());
                record.epoch = Some(signed(*report_epoch));
                record.current_epoch = current_epoch.map(signed);
                record.runner_instance = Some(runner_instance.clone());
                record.reason = Some(reason.clone());
            }
            EventBody::Finished {
                outcome,
                category,
                message,
                result_json,
                timer,
                lease_revoked,
                retry_attempt_id,
                outputs,
            } => {
                record.outputs = outputs.clone();
                record.outcome = Some(*outcome);
                record.category = *category;
                record.message = Some(message.clone());
                record.result_json = result_json.clone();
                record.timer = *timer;
                record.lease_revoked = *lease_revoked;
                record.retry_attempt_id = retry_attempt_id.map(|id| id.to_string());
            }
            EventBody::CallbackRecorded {
                url,
                delivered,
                attempts,
                http_status,
                error,
                idempotency_key,
            } => {
                record.url = Some(url.clone());
                record.delivered = Some(*delivered);
                record.delivery_attempts = Some(i32::try_from(*attempts).unwrap_or(i32::MAX));
                record.http_status = http_status.map(i32::from);
                record.error = error.clone();
                record.idempotency_key = Some(idempotency_key.clone());
            }
            EventBody::PlanApproved {
                command_id,
                plan_digest,
                approved_by,
            } => {
                record.command_id = Some(command_id.to_string());
                record.plan_digest = Some(plan_digest.clone());
                record.requested_by = Some(approved_by.clone());
            }
        }
        record
    }
}

impl TryFrom<AttemptEventRecord> for AttemptEvent {
    type Error = CodecError;

    fn try_from(record: AttemptEventRecord) -> Result<Self, CodecError> {
        let kind = event_type_name(record.kind);
        let attempt_no = |record: &AttemptEventRecord| {
            record
                .attempt_no
                .and_then(|value| u32::try_from(value).ok())
                .ok_or_else(|| missing("attempt_no", kind))
        };
        let text =
            |value: &Option<String>, field: &str| value.clone().ok_or_else(|| missing(field, kind));
        let body = match record.kind {
            EventType::Created => EventBody::Created {
                command_id: uuid(&text(&record.command_id, "command_id")?, "command_id")?,
                attempt_no: attempt_no(&record)?,
                spec: std::sync::Arc::new(
                    record
                        .spec
                        .as_ref()
                        .ok_or_else(|| missing("spec", kind))?
                        .to_spec()?,
                ),
                available_at: record
                    .available_at
                    .ok_or_else(|| missing("available_at", kind))?,
                previous_attempt_id: opt_uuid(&record.previous_attempt_id, "previous_attempt_id")?,
                policy_digest: record.policy_digest.clone(),
                target_keys: record
                    .target_keys
                    .iter()
                    .map(TargetKeyRecord::to_key)
                    .collect::<Result<_, _>>()?,
            },
            EventType::Rejected => EventBody::Rejected {
                command_id: uuid(&text(&record.command_id, "command_id")?, "command_id")?,
                attempt_no: attempt_no(&record)?,
                tenant: text(&record.tenant, "tenant")?,
                operation: text(&record.operation, "operation")?,
                category: record.category.ok_or_else(|| missing("category", kind))?,
                problems: record.problems.clone(),
                policy_digest: record.policy_digest.clone(),
            },
            EventType::LeaseGranted => EventBody::LeaseGranted {
                lease_id: uuid(&text(&record.lease_id, "lease_id")?, "lease_id")?,
                epoch: unsigned(record.epoch, "epoch", kind)?,
                runner_instance: text(&record.runner_instance, "runner_instance")?,
                expires_at: record
                    .expires_at
                    .ok_or_else(|| missing("expires_at", kind))?,
            },
            EventType::LeaseExtended => EventBody::LeaseExtended {
                epoch: unsigned(record.epoch, "epoch", kind)?,
                expires_at: record
                    .expires_at
                    .ok_or_else(|| missing("expires_at", kind))?,
            },
            EventType::Started => EventBody::Started {
                epoch: unsigned(record.epoch, "epoch", kind)?,
                runner_instance: text(&record.runner_instance, "runner_instance")?,
            },
            EventType::Progress => EventBody::Progress {
                epoch: unsigned(record.epoch, "epoch", kind)?,
                message: text(&record.message, "message")?,
                percent: record.percent.and_then(|value| u8::try_from(value).ok()),
            },
            EventType::CancelRequested => EventBody::CancelRequested {
                reason: text(&record.reason, "reason")?,
                requested_by: text(&record.requested_by, "requested_by")?,
                grace_deadline: record
                    .grace_deadline
                    .ok_or_else(|| missing("grace_deadline", kind))?,
            },
            EventType::ReportFenced => EventBody::ReportFenced {
                report_kind: text(&record.report_kind, "report_kind")?,
                report_epoch: unsigned(record.epoch, "epoch", kind)?,
                current_epoch: record
                    .current_epoch
                    .and_then(|value| u64::try_from(value).ok()),
                runner_instance: text(&record.runner_instance, "runner_instance")?,
                reason: text(&record.reason, "reason")?,
            },
            EventType::Finished => EventBody::Finished {
                outcome: record.outcome.ok_or_else(|| missing("outcome", kind))?,
                category: record.category,
                message: text(&record.message, "message")?,
                result_json: record.result_json.clone(),
                timer: record.timer,
                lease_revoked: record.lease_revoked,
                retry_attempt_id: opt_uuid(&record.retry_attempt_id, "retry_attempt_id")?,
                outputs: record.outputs.clone(),
            },
            EventType::CallbackRecorded => EventBody::CallbackRecorded {
                url: text(&record.url, "url")?,
                delivered: record.delivered.ok_or_else(|| missing("delivered", kind))?,
                attempts: record
                    .delivery_attempts
                    .and_then(|value| u32::try_from(value).ok())
                    .ok_or_else(|| missing("delivery_attempts", kind))?,
                http_status: record
                    .http_status
                    .and_then(|value| u16::try_from(value).ok()),
                error: record.error.clone(),
                idempotency_key: text(&record.idempotency_key, "idempotency_key")?,
            },
            EventType::PlanApproved => EventBody::PlanApproved {
                command_id: uuid(&text(&record.command_id, "command_id")?, "command_id")?,
                plan_digest: text(&record.plan_digest, "plan_digest")?,
                approved_by: text(&record.requested_by, "requested_by")?,
            },
        };
        Ok(AttemptEvent {
            event_id: uuid(&record.event_id, "event_id")?,
            attempt_id: uuid(&record.attempt_id, "attempt_id")?,
            job_id: record.job_id,
            seq: u64::try_from(record.seq)
                .map_err(|_| CodecError::Invalid("negative seq".into()))?,
            occurred_at: record.occurred_at,
            body,
        })
    }
}

fn event_type_name(kind: EventType) -> &'static str {
    use crate::contract::event_kind as name;
    match kind {
        EventType::Created => name::CREATED,
        EventType::Rejected => name::REJECTED,
        EventType::LeaseGranted => name::LEASE_GRANTED,
        EventType::LeaseExtended => name::LEASE_EXTENDED,
        EventType::Started => name::STARTED,
        EventType::Progress => name::PROGRESS,
        EventType::CancelRequested => name::CANCEL_REQUESTED,
        EventType::ReportFenced => name::REPORT_FENCED,
        EventType::Finished => name::FINISHED,
        EventType::CallbackRecorded => name::CALLBACK_RECORDED,
        EventType::PlanApproved => name::PLAN_APPROVED,
    }
}

/// exec.runner-events.v1: a runner report plus its inbox id and send time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunnerEventRecord {
    pub event_id: String,
    pub attempt_id: String,
    pub lease_epoch: i64,
    pub runner_instance: String,
    pub sent_at: UnixMillis,
    #[serde(rename = "type")]
    pub kind: ReportType,
    pub message: Option<String>,
    pub percent: Option<i32>,
    pub outcome: Option<ReportedOutcome>,
    pub category: Option<FailureCategory>,
    pub result_json: Option<String>,
    /// `finished`: the files the runner stored (since 0.2).
    pub outputs: Vec<OutputArtifact>,
}

impl RunnerEventRecord {
    pub fn from_report(event_id: Uuid, sent_at: UnixMillis, report: &RunnerReport) -> Self {
        let mut record = RunnerEventRecord {
            event_id: event_id.to_string(),
            attempt_id: report.attempt_id.to_string(),
            lease_epoch: signed(report.lease_epoch),
            runner_instance: report.runner_instance.clone(),
            sent_at,
            kind: match report.body {
                ReportBody::Started => ReportType::Started,
                ReportBody::Heartbeat { .. } => ReportType::Heartbeat,
                ReportBody::Progress { .. } => ReportType::Progress,
                ReportBody::Finished { .. } => ReportType::Finished,
            },
            message: None,
            percent: None,
            outcome: None,
            category: None,
            result_json: None,
            outputs: Vec::new(),
        };
        match &report.body {
            ReportBody::Started => {}
            ReportBody::Heartbeat { progress, percent } => {
                record.message = progress.clone();
                record.percent = percent.map(i32::from);
            }
            ReportBody::Progress { message, percent } => {
                record.message = Some(message.clone());
                record.percent = percent.map(i32::from);
            }
            ReportBody::Finished {
                outcome,
                category,
                message,
                result_json,
                outputs,
            } => {
                record.outputs = outputs.clone();
                record.outcome = Some(*outcome);
                record.category = *category;
                record.message = Some(message.clone());
                record.result_json = result_json.clone();
            }
        }
        record
    }

    pub fn to_report(&self) -> Result<RunnerReport, CodecError> {
        let kind = match self.kind {
            ReportType::Started => "started",
            ReportType::Heartbeat => "heartbeat",
            ReportType::Progress => "progress",
            ReportType::Finished => "finished",
        };
        let percent = self
            .percent
            .and_then(|value| u8::try_from(value.clamp(0, 100)).ok());
        let body = match self.kind {
            ReportType::Started => ReportBody::Started,
            ReportType::Heartbeat => ReportBody::Heartbeat {
                progress: self.message.clone(),
                percent,
            },
            ReportType::Progress => ReportBody::Progress {
                message: self
                    .message
                    .clone()
                    .ok_or_else(|| missing("message", kind))?,
                percent,
            },
            ReportType::Finished => ReportBody::Finished {
                outcome: self.outcome.ok_or_else(|| missing("outcome", kind))?,
                category: self.category,
                message: self.message.clone().unwrap_or_default(),
                result_json: self.result_json.clone(),
                outputs: self.outputs.clone(),
            },
        };
        Ok(RunnerReport {
            attempt_id: uuid(&self.attempt_id, "attempt_id")?,
            lease_epoch: u64::try_from(self.lease_epoch)
                .map_err(|_| missing("lease_epoch", kind))?,
            runner_instance: self.runner_instance.clone(),
            body,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkType {
    WorkItem,
    LeaseExtended,
    LeaseRevoked,
    Cancel,
}

/// exec.work.<type>.v1: one message to one runner instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkRecord {
    pub record_id: String,
    pub runner_instance: String,
    #[serde(rename = "type")]
    pub kind: WorkType,
    pub attempt_id: String,
    pub job_id: String,
    pub attempt_no: i32,
    pub lease_id: String,
    pub lease_epoch: i64,
    pub expires_at: Option<i64>,
    pub spec: Option<JobSpecRecord>,
    pub reason: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalStatus {
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
    Rejected,
    OutcomeUnknown,
}

impl From<TerminalOutcome> for TerminalStatus {
    fn from(outcome: TerminalOutcome) -> Self {
        match outcome {
            TerminalOutcome::Succeeded => Self::Succeeded,
            TerminalOutcome::Failed => Self::Failed,
            TerminalOutcome::TimedOut => Self::TimedOut,
            TerminalOutcome::Cancelled => Self::Cancelled,
            TerminalOutcome::OutcomeUnknown => Self::OutcomeUnknown,
        }
    }
}

/// exec.results.v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultRecord {
    pub attempt_id: String,
    pub job_id: String,
    pub command_id: String,
    pub attempt_no: i32,
    pub tenant: String,
    pub operation: String,
    pub status: TerminalStatus,
    pub category: Option<FailureCategory>,
    pub message: String,
    pub result_json: Option<String>,
    pub finished_at: UnixMillis,
    pub terminal_seq: i64,
    pub idempotency_key: String,
    pub retry_attempt_id: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PresenceStatus {
    Ready,
    Draining,
    Stopped,
}

/// exec.runner-presence.v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PresenceRecord {
    pub runner_instance: String,
    pub runner_type: String,
    pub version: String,
    pub pool: Vec<Label>,
    pub capabilities: Vec<String>,
    /// The operations the instance runs (empty from releases before 0.2:
    /// such an instance is granted nothing).
    #[serde(default)]
    pub operations: Vec<String>,
    pub capacity: i32,
    pub in_flight: i32,
    pub work_partition: i32,
    pub status: PresenceStatus,
    pub started_at: UnixMillis,
    pub sent_at: UnixMillis,
    /// How the instance runs its tools ([`Isolation::as_str`]); `unknown`
    /// from releases before 0.3.
    #[serde(default = "unknown_isolation")]
    pub isolation: String,
}

fn unknown_isolation() -> String {
    "unknown".into()
}

/// How a runner instance runs its tools, as its presence says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// A uid, mount and pid namespaces of each attempt's own; the network
    /// guarded.
    Sandboxed,
    /// The sandbox without the network guard (`EXECPLANE_SANDBOX_NETWORK=host`).
    HostNetwork,
    /// As the runner's own user (`EXECPLANE_SANDBOX=off`).
    Unsandboxed,
    /// An ingress executor: on its own host, out of execplane's hands.
    Remote,
}

impl Isolation {
    pub const fn as_str(self) -> &'static str {
        match self {
            Isolation::Sandboxed => "sandboxed",
            Isolation::HostNetwork => "sandboxed, host network",
            Isolation::Unsandboxed => "unsandboxed",
            Isolation::Remote => "remote",
        }
    }
}

/// What an instance says of itself, for [`PresenceRecord::new`].
#[derive(Clone, Debug)]
pub struct Presence<'a> {
    pub runner_instance: &'a str,
    pub runner_type: &'a str,
    pub version: String,
    pub pool: &'a BTreeMap<String, String>,
    pub capabilities: &'a [String],
    pub operations: &'a [String],
    pub capacity: u32,
    pub in_flight: u32,
    pub work_partition: i32,
    pub started_at: UnixMillis,
    pub isolation: Isolation,
}

impl PresenceRecord {
    /// The one constructor (the runner SDK and the ingress announce
    /// instances alike): an instance that is not ready offers no capacity.
    pub fn new(presence: &Presence<'_>, status: PresenceStatus, sent_at: UnixMillis) -> Self {
        Self {
            runner_instance: presence.runner_instance.to_owned(),
            runner_type: presence.runner_type.to_owned(),
            version: presence.version.clone(),
            pool: presence
                .pool
                .iter()
                .map(|(key, value)| Label {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            capabilities: presence.capabilities.to_vec(),
            operations: presence.operations.to_vec(),
            capacity: if status == PresenceStatus::Ready {
                i32::try_from(presence.capacity).unwrap_or(i32::MAX)
            } else {
                0
            },
            in_flight: i32::try_from(presence.in_flight).unwrap_or(i32::MAX),
            work_partition: presence.work_partition,
            status,
            started_at: presence.started_at,
            sent_at,
            isolation: presence.isolation.as_str().to_owned(),
        }
    }
}

/// The most a presence record may hold: it comes from the presence topic
/// (anyone who may produce there) and is stored as it is.
mod presence_bounds {
    pub const NAME: usize = 128;
    pub const VERSION: usize = 64;
    pub const LABELS: usize = 32;
    pub const LABEL_KEY: usize = 63;
    pub const LABEL_VALUE: usize = 256;
    pub const LIST: usize = 256;
    pub const LIST_ITEM: usize = 128;
}

impl PresenceRecord {
    /// Why this record cannot be stored, if it cannot: a text over its
    /// bound or with a control character (Postgres refuses NUL, and a row
    /// that fails fails its whole batch), too many labels, capabilities
    /// or operations, or a negative number.
    pub fn problem(&self) -> Option<String> {
        use presence_bounds::*;
        fn text(field: &str, value: &str, max: usize) -> Result<(), String> {
            if value.len() > max {
                return Err(format!("{field} is over {max} bytes"));
            }
            if value.chars().any(char::is_control) {
                return Err(format!("{field} holds a control character"));
            }
            Ok(())
        }
        fn list(field: &str, values: &[String]) -> Result<(), String> {
            if values.len() > LIST {
                return Err(format!("{field} has over {LIST} entries"));
            }
            values
                .iter()
                .try_for_each(|value| text(field, value, LIST_ITEM))
        }
        let check = || -> Result<(), String> {
            if self.runner_instance.is_empty() {
                return Err("runner_instance is empty".into());
            }
            text("runner_instance", &self.runner_instance, NAME)?;
            text("runner_type", &self.runner_type, NAME)?;
            text("version", &self.version, VERSION)?;
            text("isolation", &self.isolation, NAME)?;
            if self.pool.len() > LABELS {
                return Err(format!("pool has over {LABELS} labels"));
            }
            for label in &self.pool {
                text("pool label", &label.key, LABEL_KEY)?;
                text("pool label value", &label.value, LABEL_VALUE)?;
            }
            list("capabilities", &self.capabilities)?;
            list("operations", &self.operations)?;
            if self.capacity < 0 || self.in_flight < 0 || self.work_partition < 0 {
                return Err("capacity, in_flight and work_partition are never negative".into());
            }
            Ok(())
        };
        check().err()
    }
}

/// Which output a log chunk carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    Stdout,
    Stderr,
    /// The runner's (or executor's) own notes about the run.
    Runner,
}

/// exec.log-chunks.v1: one ordered piece of output, masked at the source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogChunkRecord {
    pub chunk_id: String,
    pub attempt_id: String,
    pub lease_epoch: i64,
    pub runner_instance: String,
    pub stream: LogStream,
    pub seq: i64,
    pub text: String,
    pub sent_at: UnixMillis,
}

impl LogChunkRecord {
    /// The one constructor: its id is derived from (attempt, epoch, stream,
    /// seq), so a chunk sent again has the same id wherever it is sent from
    /// (the runner SDK, the ingress).
    pub fn new(
        attempt_id: Uuid,
        lease_epoch: u64,
        runner_instance: String,
        stream: LogStream,
        seq: u64,
        text: String,
        sent_at: UnixMillis,
    ) -> Self {
        let chunk_id = Uuid::new_v5(
            &attempt_id,
            format!("{lease_epoch}:{stream:?}:{seq}").as_bytes(),
        );
        Self {
            chunk_id: chunk_id.to_string(),
            attempt_id: attempt_id.to_string(),
            lease_epoch: i64::try_from(lease_epoch).unwrap_or(i64::MAX),
            runner_instance,
            stream,
            seq: i64::try_from(seq).unwrap_or(i64::MAX),
            text,
            sent_at,
        }
    }
}

pub use crate::contract::RetentionClass;

/// exec.artifacts.v1: artifact.created.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    pub artifact_id: String,
    pub attempt_id: String,
    pub name: String,
    pub media_type: String,
    pub size: i64,
    pub sha256: String,
    pub producer: String,
    pub retention_class: RetentionClass,
    pub uri: String,
    pub created_at: UnixMillis,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn announced() -> PresenceRecord {
        let pool = BTreeMap::from([("zone".to_owned(), "dmz".to_owned())]);
        let operations: Vec<String> =
            crate::contract::Operation::implemented_by(crate::contract::RunnerType::Verification)
                .map(|operation| operation.as_str().to_owned())
                .collect();
        let presence = Presence {
            runner_instance: "verification-0b6c9f0e4d2a4c7e9a1f3b5d7e9f1a2b",
            runner_type: "verification",
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pool: &pool,
            capabilities: &["http".to_owned(), "tcp".to_owned()],
            operations: &operations,
            capacity: 16,
            in_flight: 3,
            work_partition: 2,
            started_at: 1,
            isolation: Isolation::HostNetwork,
        };
        PresenceRecord::new(&presence, PresenceStatus::Ready, 2)
    }

    #[test]
    fn what_a_runner_announces_is_storable_and_a_forged_record_is_not() {
        assert_eq!(announced().problem(), None);
        let mut nul = announced();
        nul.version = "1.0\u{0}".into();
        assert_eq!(
            nul.problem().as_deref(),
            Some("version holds a control character")
        );
        let mut long = announced();
        long.isolation = "x".repeat(10_000);
        assert!(long.problem().unwrap().contains("isolation is over"));
        let mut labels = announced();
        labels.pool = (0..100)
            .map(|index| Label {
                key: format!("k{index}"),
                value: String::new(),
            })
            .collect();
        assert!(labels.problem().unwrap().contains("over 32 labels"));
        let mut operations = announced();
        operations.operations = vec!["verify.tcp.connect".into(); 10_000];
        assert!(operations
            .problem()
            .unwrap()
            .contains("operations has over"));
        let mut negative = announced();
        negative.capacity = -1;
        assert!(negative.problem().is_some());
    }
}
