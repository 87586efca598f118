//! Intake: consume commands, runner events and presence in batches, decide
//! each batch in ONE transaction, and only then store the offsets (the group
//! consumer commits them; see `KafkaConfig::group_consumer`). Poison
//! records go to the DLQ (with the reason in headers) before their offsets
//! are committed, so nothing is lost and no partition stalls.

use std::collections::HashSet;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::FutureProducer;
use rdkafka::Message;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::placement::Wake;
use super::{DispatcherConfig, DispatcherError};
use crate::attempt::Rejection;
use crate::codec::{Codec, CommandKind, CommandRecord, Family, PresenceRecord, RunnerEventRecord};
use crate::contract::{
    limits, topics, validate_jobspec, AttemptEvent, DurationMs, EventBody, FailureCategory, Input,
    Problem, Problems,
};
use crate::kafka::KafkaConfig;
use crate::store::{InputEnvelope, InputOutcome, Store};

/// What one record means.
enum Decoded {
    Input(InputEnvelope),
    Poison(String),
}

/// What intake tells the dispatcher's other tasks.
pub(super) struct Signals {
    /// Told after each batch what may have become placeable.
    pub placed: Wake,
    /// The instant before which intake decided everything on its partitions.
    pub caught_up: Arc<AtomicI64>,
    /// The same, per partition (shared with other dispatchers by the sweeper).
    pub progress: crate::kafka::PartitionProgress,
}

pub(super) async fn run(
    store: Store,
    kafka: KafkaConfig,
    producer: FutureProducer,
    config: DispatcherConfig,
    signals: Signals,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    let Signals {
        placed,
        caught_up,
        progress,
    } = signals;
    // Two members of the group, so that a batch can take the runner events
    // at hand before commands (see `kafka::collect_prioritized`). Presence
    // is read apart from the group (see `presence`), so a rebalance never
    // blinds placement.
    let events = kafka.group_consumer(&config.group)?;
    let commands = kafka.group_consumer(&config.group)?;
    let events_topic = kafka.topic(topics::RUNNER_EVENTS);
    let commands_topic = kafka.topic(topics::COMMANDS);
    events
        .subscribe(&[events_topic.as_str()])
        .map_err(crate::kafka::KafkaError::from)?;
    commands
        .subscribe(&[commands_topic.as_str()])
        .map_err(crate::kafka::KafkaError::from)?;
    let codec = kafka.codec.clone();
    info!(topics = ?[&events_topic, &commands_topic], group = %config.group, "intake subscribed");
    // Positions before each poll are decided positions (a batch is decided
    // before the next poll): the gate the timer sweeper waits on.
    let gate = crate::kafka::CaughtUpGate::start(
        &kafka,
        &config.group,
        caught_up,
        progress,
        shutdown.clone(),
    );
    let consumers = [&*events, &*commands];
    while !shutdown.is_cancelled() {
        let batch = tokio::select! {
            _ = shutdown.cancelled() => break,
            batch = gate.poll(&consumers, Duration::from_millis(100), config.batch_window, config.max_batch) => batch,
        };
        let batch = match batch {
            Ok(batch) if batch.is_empty() => continue,
            Ok(batch) => batch,
            Err(error) => {
                warn!(%error, "consume");
                continue;
            }
        };
        let context = Context {
            store: &store,
            kafka: &kafka,
            topics: [&commands_topic, &events_topic],
            producer: &producer,
            codec: &codec,
            config: &config,
            shutdown: &shutdown,
        };
        match handle(&context, &batch).await {
            Handled::Committed { placeable } => {
                let (of_events, of_commands): (Vec<OwnedMessage>, Vec<OwnedMessage>) = batch
                    .into_iter()
                    .partition(|message| message.topic() == events_topic);
                crate::kafka::store_offsets_past(&events, &of_events);
                crate::kafka::store_offsets_past(&commands, &of_commands);
                placeable.tell(&placed);
            }
            // Nothing committed: the records are redelivered after a restart
            // and the inbox makes what was decided a no-op.
            Handled::Interrupted if shutdown.is_cancelled() => break,
            Handled::Interrupted => return Err(DispatcherError::DeadLetter),
        }
    }
    Ok(())
}

/// Keeps `runner_instances` fresh from the presence topic. Every dispatcher
/// reads every partition by manual assignment from the end: presence is
/// soft state, repeated every interval, so no offsets are needed.
pub(super) async fn presence(
    store: Store,
    kafka: KafkaConfig,
    placed: Wake,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    let topic = kafka.topic(topics::RUNNER_PRESENCE);
    let consumer: StreamConsumer = kafka.assigned_consumer()?;
    let Some(assignment) =
        crate::kafka::until_ok("the presence topic's partitions", &shutdown, || {
            crate::kafka::at_the_end(&consumer, &topic)
        })
        .await
    else {
        return Ok(());
    };
    consumer
        .assign(&assignment)
        .map_err(crate::kafka::KafkaError::from)?;
    let codec = kafka.codec.clone();
    while !shutdown.is_cancelled() {
        let batch = tokio::select! {
            _ = shutdown.cancelled() => break,
            batch = collect(&consumer, 500, Duration::from_millis(5)) => batch.unwrap_or_default(),
        };
        let records: Vec<PresenceRecord> = batch
            .iter()
            .filter_map(|message| {
                let decoded = message.payload().map(|payload| codec.decode::<PresenceRecord>(Family::Presence, payload));
                match decoded {
                    Some(Ok(record)) => match record.problem() {
                        None => Some(record),
                        Some(problem) => {
                            warn!(%problem, offset = message.offset(), "presence record out of bounds skipped");
                            None
                        }
                    },
                    Some(Err(error)) => {
                        warn!(%error, offset = message.offset(), "undecodable presence record skipped");
                        None
                    }
                    None => None,
                }
            })
            .collect();
        // Presence is soft state: a failed upsert only delays placement.
        match store.upsert_presence(&records).await {
            // A new instance, or one with free slots again, may take work.
            Ok(()) if !records.is_empty() => placed.something_waits(),
            Ok(()) => {}
            Err(error) => warn!(%error, records = records.len(), "presence upsert failed"),
        }
    }
    Ok(())
}

/// Waits for a first record (up to 100 ms), then takes what arrives within
/// the batch window, up to the batch size.
async fn collect(
    consumer: &StreamConsumer,
    max_batch: usize,
    window: Duration,
) -> Result<Vec<OwnedMessage>, crate::kafka::KafkaError> {
    crate::kafka::collect_batch(consumer, Duration::from_millis(100), window, max_batch).await
}

/// What one batch needs.
struct Context<'a> {
    store: &'a Store,
    kafka: &'a KafkaConfig,
    /// The prefixed names of the topics read: commands, runner events.
    topics: [&'a str; 2],
    producer: &'a FutureProducer,
    codec: &'a Codec,
    config: &'a DispatcherConfig,
    shutdown: &'a CancellationToken,
}

enum Handled {
    /// Every record is decided or dead-lettered: store the offsets, then
    /// tell placement what the batch may have made placeable.
    Committed { placeable: Placeable },
    /// Shutdown came first; nothing more may be committed.
    Interrupted,
}

/// What became of one decodable record.
enum Decision {
    Outcome(InputOutcome),
    /// The store refuses it however often it is retried: dead-lettered.
    Refused(String),
}

async fn handle(context: &Context<'_>, batch: &[OwnedMessage]) -> Handled {
    let started = Instant::now();
    let mut inputs = Vec::new();
    let mut origins = Vec::new();
    for message in batch {
        match decode(context.topics, context.codec, context.config, message) {
            Decoded::Input(envelope) => {
                inputs.push(envelope);
                origins.push(message);
            }
            Decoded::Poison(reason) => {
                if !dead_letter(context, message, &reason).await {
                    return Handled::Interrupted;
                }
            }
        }
    }
    let mut events = Vec::new();
    let Some(decisions) = decide_isolating(context, &inputs, &mut events).await else {
        return Handled::Interrupted;
    };
    crate::telemetry::metrics::record_events(&events);
    crate::telemetry::metrics::intake_batch(batch.len(), started.elapsed().as_secs_f64());
    for ((envelope, message), decision) in inputs.iter().zip(&origins).zip(&decisions) {
        if let Input::Report(report) = &envelope.input {
            // One span per report: the attempt, its lease and the trace.
            let traceparent = header(message, "traceparent").unwrap_or_default();
            let span = tracing::debug_span!(
                "report",
                attempt_id = %report.attempt_id,
                lease_epoch = report.lease_epoch,
                runner_instance = %report.runner_instance,
                traceparent = %traceparent,
            );
            if let Decision::Outcome(outcome) = decision {
                debug!(parent: &span, kind = report.body.kind(), ?outcome, "report decided");
            }
        }
        let refusal = match decision {
            Decision::Refused(reason) => Some(reason.clone()),
            Decision::Outcome(InputOutcome::Rejected(rejection)) => match rejection {
                // Commands the contract cannot honour go where the control plane looks.
                Rejection::JobIdTaken { .. }
                | Rejection::CommandIdReused { .. }
                | Rejection::InputIdReused { .. }
                | Rejection::PlanNotApprovable { .. }
                | Rejection::UnknownAttempt(_) => Some(rejection.to_string()),
                _ => {
                    debug!(input = %envelope.input_id, %rejection, "input refused");
                    None
                }
            },
            Decision::Outcome(_) => None,
        };
        if let Some(reason) = refusal {
            if !dead_letter(context, message, &reason).await {
                return Handled::Interrupted;
            }
        }
    }
    debug!(
        records = batch.len(),
        events = events.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "batch decided"
    );
    Handled::Committed {
        placeable: Placeable::after(&events),
    }
}

/// What a batch may have made placeable. Anything but these (an attempt
/// leased where it was created, a start, a heartbeat) frees nothing, and
/// waking placement for it cost a round of queries per batch at low rates,
/// where batches are small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placeable {
    Nothing,
    /// An attempt ended: its slot and keys are free (a retry it causes is
    /// created in the same batch, and counted as such).
    Freed,
    /// An attempt was created and not leased in the same batch: it waits
    /// for a slot or its keys.
    Waits,
}

impl Placeable {
    fn after(events: &[AttemptEvent]) -> Self {
        let leased: HashSet<Uuid> = events
            .iter()
            .filter(|event| matches!(event.body, EventBody::LeaseGranted { .. }))
            .map(|event| event.attempt_id)
            .collect();
        let mut placeable = Self::Nothing;
        for event in events {
            match event.body {
                EventBody::Created { .. } if !leased.contains(&event.attempt_id) => {
                    return Self::Waits
                }
                EventBody::Finished { .. } => placeable = Self::Freed,
                _ => {}
            }
        }
        placeable
    }

    fn tell(self, placement: &Wake) {
        match self {
            Self::Nothing => {}
            Self::Freed => placement.freed(),
            Self::Waits => placement.something_waits(),
        }
    }
}

async fn dead_letter(context: &Context<'_>, message: &OwnedMessage, reason: &str) -> bool {
    crate::kafka::dead_letter(
        context.kafka,
        context.producer,
        message,
        reason,
        context.shutdown,
    )
    .await
}

/// Decides `inputs` through the store, one record it refuses at a time
/// isolated (see [`Store::process_isolating`]). `None`: shutdown came first.
async fn decide_isolating(
    context: &Context<'_>,
    inputs: &[InputEnvelope],
    events: &mut Vec<crate::contract::AttemptEvent>,
) -> Option<Vec<Decision>> {
    let isolated = context
        .store
        .process_isolating(
            inputs,
            Some((&super::placement::choose, context.config.presence_ttl)),
            context.shutdown,
        )
        .await?;
    events.extend(isolated.events);
    Some(
        isolated
            .decisions
            .into_iter()
            .map(|decision| match decision {
                Ok(outcome) => Decision::Outcome(outcome),
                Err(reason) => {
                    crate::telemetry::metrics::intake_isolated();
                    Decision::Refused(reason)
                }
            })
            .collect(),
    )
}

fn decode(
    [commands_topic, events_topic]: [&str; 2],
    codec: &Codec,
    config: &DispatcherConfig,
    message: &OwnedMessage,
) -> Decoded {
    let Some(payload) = message.payload() else {
        return Decoded::Poison("empty payload".into());
    };
    let topic = message.topic();
    if topic == commands_topic {
        match codec.decode_record::<CommandRecord>(payload) {
            Ok(record) => decode_command(config, record),
            Err(error) => Decoded::Poison(format!("not a command record: {error}")),
        }
    } else if topic == events_topic {
        match codec.decode_record::<RunnerEventRecord>(payload) {
            Ok(record) => match record.to_report() {
                Ok(report) => {
                    let mut problems = crate::contract::check_report(&report);
                    if Uuid::parse_str(&record.event_id).is_err() {
                        problems.push(Problem::new("event_id", "not a UUID"));
                    }
                    if problems.is_empty() {
                        Decoded::Input(InputEnvelope {
                            input_id: format!("report:{}", record.event_id),
                            source: "runner-events".into(),
                            input: Input::Report(report),
                        })
                    } else {
                        Decoded::Poison(format!("invalid runner event: {}", Problems(problems)))
                    }
                }
                Err(error) => Decoded::Poison(format!("invalid runner event: {error}")),
            },
            Err(error) => Decoded::Poison(format!("not a runner event record: {error}")),
        }
    } else {
        Decoded::Poison(format!("unexpected topic {topic}"))
    }
}

fn decode_command(config: &DispatcherConfig, record: CommandRecord) -> Decoded {
    // The inbox keys on it: a UUID, nothing a producer can stuff.
    let Ok(command_id) = Uuid::parse_str(&record.command_id) else {
        return Decoded::Poison(Problem::new("command_id", "not a UUID").to_string());
    };
    let input = match record.kind {
        CommandKind::ExecuteJob => match record.execute {
            Some(spec) => decode_execute(config, &spec),
            None => Err("an execute_job command without `execute`".into()),
        },
        CommandKind::CancelAttempt => match record.cancel {
            Some(cancel) => decode_cancel(config, cancel),
            None => Err("a cancel_attempt command without `cancel`".into()),
        },
        CommandKind::ApprovePlan => match record.approve {
            Some(approval) => decode_approve(config, command_id, approval),
            None => Err("an approve_plan command without `approve`".into()),
        },
    };
    match input {
        Ok(input) => Decoded::Input(InputEnvelope::command(command_id, "commands", input)),
        Err(reason) => Decoded::Poison(reason),
    }
}

/// An ExecuteJob: valid and within the operator's policy, it executes; a
/// contract or policy violation that names its command and job becomes a
/// visible `rejected` attempt; anything else is poison.
fn decode_execute(
    config: &DispatcherConfig,
    spec: &crate::codec::JobSpecRecord,
) -> Result<Input, String> {
    // One policy for the whole decision (a reload in between would check
    // one JobSpec against two); its digest goes in the attempt's first event.
    let policy = config.policy.current();
    let policy_digest = Some(policy.digest().to_owned());
    match validate_jobspec(&spec.to_json()) {
        Ok(valid) => {
            // The operator's policy first: a tenant asking for what it may
            // not do is told so, whether or not this release runs it.
            let refused = policy.check_jobspec(&valid);
            let (category, problems) = if !refused.is_empty() {
                (FailureCategory::Policy, refused)
            } else if let Some(problem) = valid.operation.not_implemented() {
                (FailureCategory::Contract, vec![problem])
            } else {
                return Ok(Input::Execute {
                    target_keys: policy.target_keys(&valid),
                    spec: std::sync::Arc::new(valid),
                    policy_digest,
                });
            };
            Ok(Input::ExecuteInvalid {
                command_id: valid.command_id,
                job_id: valid.job_id.clone(),
                tenant: valid.tenant.clone(),
                operation: valid.operation.as_str().to_owned(),
                category,
                problems,
                policy_digest,
            })
        }
        Err(problems) => {
            // A rejected attempt stores these: they must be storable ids.
            let mut unstorable = Vec::new();
            for (field, value) in [
                ("job_id", &spec.job_id),
                ("tenant", &spec.tenant),
                ("operation", &spec.operation),
            ] {
                limits::check_identifier(field, value, &mut unstorable);
            }
            let Ok(command_id) = Uuid::parse_str(&spec.command_id) else {
                return Err(problems.to_string());
            };
            if !unstorable.is_empty() {
                return Err(problems.to_string());
            }
            let policy_flag = problems
                .0
                .iter()
                .any(|problem| problem.path.starts_with("policy"));
            Ok(Input::ExecuteInvalid {
                command_id,
                job_id: spec.job_id.clone(),
                tenant: spec.tenant.clone(),
                operation: spec.operation.clone(),
                category: if policy_flag {
                    FailureCategory::Policy
                } else {
                    FailureCategory::Contract
                },
                problems: problems.0,
                policy_digest,
            })
        }
    }
}

/// A CancelAttempt, its free text bounded; the grace defaults to the
/// dispatcher's.
fn decode_cancel(
    config: &DispatcherConfig,
    cancel: crate::codec::CancelAttemptRecord,
) -> Result<Input, String> {
    let Ok(attempt_id) = Uuid::parse_str(&cancel.attempt_id) else {
        return Err(Problem::new("cancel.attempt_id", "not a UUID").to_string());
    };
    let problems = limits::check_cancel(&cancel.reason, &cancel.requested_by);
    if !problems.is_empty() {
        return Err(Problems(problems).to_string());
    }
    let default_grace = u64::try_from(config.cancel_grace.as_millis()).unwrap_or(10_000);
    let grace = cancel
        .grace_ms
        .and_then(|millis| u64::try_from(millis).ok())
        .map_or(DurationMs(default_grace), DurationMs);
    Ok(Input::Cancel {
        attempt_id,
        reason: cancel.reason,
        requested_by: cancel.requested_by,
        grace,
    })
}

/// An ApprovePlan, within the operator's policy: the approver is one of
/// the tenant's `opentofu.approvers`. Refused, it is dead-lettered with
/// why (an approval is no attempt to reject).
fn decode_approve(
    config: &DispatcherConfig,
    command_id: Uuid,
    approval: crate::codec::ApprovePlanRecord,
) -> Result<Input, String> {
    let Ok(plan_attempt_id) = Uuid::parse_str(&approval.plan_attempt_id) else {
        return Err(Problem::new("approve.plan_attempt_id", "not a UUID").to_string());
    };
    let mut problems = Vec::new();
    if let Err(message) = crate::contract::artifact_ref::InputRef::parse(&approval.plan_digest) {
        problems.push(Problem::new("approve.plan_digest", message));
    }
    limits::check_identifier("approve.tenant", &approval.tenant, &mut problems);
    limits::check_identifier("approve.approved_by", &approval.approved_by, &mut problems);
    if !problems.is_empty() {
        return Err(Problems(problems).to_string());
    }
    let rules = config
        .policy
        .current()
        .tenant(&approval.tenant)
        .operations
        .opentofu
        .clone();
    if !rules.may_approve(&approval.approved_by) {
        return Err(format!(
            "policy: `{}` may not approve tenant `{}`'s plans (operator policy rule `tenants.{}.opentofu.approvers`)",
            limits::loggable(&approval.approved_by),
            limits::loggable(&approval.tenant),
            limits::loggable(&approval.tenant),
        ));
    }
    Ok(Input::ApprovePlan {
        command_id,
        plan_attempt_id,
        plan_digest: approval.plan_digest,
        tenant: approval.tenant,
        approved_by: approval.approved_by,
        self_approve: rules.self_approve,
    })
}

/// A header's value as text.
fn header(message: &OwnedMessage, name: &str) -> Option<String> {
    use rdkafka::message::Headers;
    let headers = message.headers()?;
    headers
        .iter()
        .find(|header| header.key == name)
        .and_then(|header| header.value)
        .map(|value| String::from_utf8_lossy(value).into_owned())
}
