//! Intake: consume commands, runner events and presence in batches, decide
//! each batch in ONE transaction, and only then commit the offsets. Poison
//! records go to the DLQ (with the reason in headers) before their offsets
//! are committed, so nothing is lost and no partition stalls.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::FutureProducer;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::{DispatcherConfig, DispatcherError};
use crate::attempt::Rejection;
use crate::codec::{Codec, CommandKind, CommandRecord, Family, PresenceRecord, RunnerEventRecord};
use crate::contract::{topics, validate_jobspec, DurationMs, FailureCategory, Input, Problem};
use crate::kafka::KafkaConfig;
use crate::store::{InputEnvelope, InputOutcome, Store};

/// What one record means.
enum Decoded {
    Input(InputEnvelope),
    Poison(String),
}

pub(super) async fn run(
    store: Store,
    kafka: KafkaConfig,
    producer: FutureProducer,
    config: DispatcherConfig,
    placed: Arc<Notify>,
    caught_up: Arc<AtomicI64>,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    let consumer: StreamConsumer = kafka.group_consumer(&config.group)?;
    // Presence is read apart from the group (see `presence`), so a
    // rebalance never blinds placement.
    let subscribed = [
        kafka.topic(topics::COMMANDS),
        kafka.topic(topics::RUNNER_EVENTS),
    ];
    let names: Vec<&str> = subscribed.iter().map(String::as_str).collect();
    consumer
        .subscribe(&names)
        .map_err(crate::kafka::KafkaError::from)?;
    let codec = Codec::default();
    info!(topics = ?names, group = %config.group, "intake subscribed");
    // Positions before each poll are decided positions (a batch is decided
    // before the next poll): the gate the timer sweeper waits on.
    let gate = crate::kafka::CaughtUpGate::start(&kafka, caught_up, shutdown.clone());
    while !shutdown.is_cancelled() {
        let batch = tokio::select! {
            _ = shutdown.cancelled() => break,
            batch = gate.poll(&consumer, Duration::from_millis(100), config.batch_window, config.max_batch) => batch,
        };
        let batch = match batch {
            Ok(batch) if batch.is_empty() => continue,
            Ok(batch) => batch,
            Err(error) => {
                warn!(%error, "consume");
                continue;
            }
        };
        handle(
            &store, &kafka, &producer, &consumer, &codec, &config, &batch,
        )
        .await?;
        placed.notify_one();
    }
    Ok(())
}

/// Keeps `runner_instances` fresh from the presence topic. Every dispatcher
/// reads every partition by manual assignment from the end: presence is
/// soft state, repeated every interval, so no offsets are needed.
pub(super) async fn presence(
    store: Store,
    kafka: KafkaConfig,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    let topic = kafka.topic(topics::RUNNER_PRESENCE);
    let consumer: StreamConsumer = kafka.assigned_consumer()?;
    let partitions = crate::kafka::partition_count(&consumer, &topic)?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(&topic, partition, Duration::from_secs(10))
            .map_err(crate::kafka::KafkaError::from)?;
        assignment
            .add_partition_offset(&topic, partition, Offset::Offset(high))
            .map_err(crate::kafka::KafkaError::from)?;
    }
    consumer
        .assign(&assignment)
        .map_err(crate::kafka::KafkaError::from)?;
    let codec = Codec::default();
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
                    Some(Ok(record)) => Some(record),
                    Some(Err(error)) => {
                        warn!(%error, offset = message.offset(), "undecodable presence record skipped");
                        None
                    }
                    None => None,
                }
            })
            .collect();
        // Presence is soft state: a failed upsert only delays placement.
        if let Err(error) = store.upsert_presence(&records).await {
            warn!(%error, records = records.len(), "presence upsert failed");
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

async fn handle(
    store: &Store,
    kafka: &KafkaConfig,
    producer: &FutureProducer,
    consumer: &StreamConsumer,
    codec: &Codec,
    config: &DispatcherConfig,
    batch: &[OwnedMessage],
) -> Result<(), DispatcherError> {
    let started = Instant::now();
    let mut inputs = Vec::new();
    let mut origins = Vec::new();
    for message in batch {
        match decode(kafka, codec, config, message) {
            Decoded::Input(envelope) => {
                inputs.push(envelope);
                origins.push(message);
            }
            Decoded::Poison(reason) => {
                crate::kafka::dead_letter(kafka, producer, message, &reason).await
            }
        }
    }
    // Decide the batch; a failure is retried (nothing was committed) until
    // shutdown, never skipped.
    let mut failures = 0u32;
    let outcome = loop {
        let now = chrono::Utc::now().timestamp_millis();
        let fresh_after = now - i64::try_from(config.presence_ttl.as_millis()).unwrap_or(i64::MAX);
        // Commands are placed in the transaction that creates their attempts.
        match store.process_batch_placing(&inputs, now, fresh_after).await {
            Ok(outcome) => break outcome,
            Err(error) => {
                failures += 1;
                warn!(%error, failures, records = inputs.len(), "batch failed; retrying");
                tokio::time::sleep(Duration::from_millis(100 * u64::from(failures.min(50)))).await;
            }
        }
    };
    crate::telemetry::metrics::record_events(&outcome.events);
    crate::telemetry::metrics::intake_batch(batch.len(), started.elapsed().as_secs_f64());
    for ((envelope, message), result) in inputs.iter().zip(&origins).zip(&outcome.outcomes) {
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
            debug!(parent: &span, kind = report.body.kind(), outcome = ?result, "report decided");
        }
        if let InputOutcome::Rejected(rejection) = result {
            match rejection {
                // Commands the contract cannot honour go where the control plane looks.
                Rejection::JobIdTaken { .. }
                | Rejection::CommandIdReused { .. }
                | Rejection::UnknownAttempt(_) => {
                    crate::kafka::dead_letter(kafka, producer, message, &rejection.to_string())
                        .await;
                }
                _ => debug!(input = %envelope.input_id, %rejection, "input refused"),
            }
        }
    }
    commit(consumer, batch);
    debug!(
        records = batch.len(),
        events = outcome.events.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "batch committed"
    );
    Ok(())
}

/// Commits the next offset of every partition in the batch.
fn commit(consumer: &StreamConsumer, batch: &[OwnedMessage]) {
    crate::kafka::commit_batch(consumer, batch);
}

fn decode(
    kafka: &KafkaConfig,
    codec: &Codec,
    config: &DispatcherConfig,
    message: &OwnedMessage,
) -> Decoded {
    let Some(payload) = message.payload() else {
        return Decoded::Poison("empty payload".into());
    };
    let topic = message.topic();
    if topic == kafka.topic(topics::COMMANDS) {
        match codec.decode::<CommandRecord>(Family::Command, payload) {
            Ok(record) => decode_command(config, record),
            Err(error) => Decoded::Poison(format!("not a command record: {error}")),
        }
    } else if topic == kafka.topic(topics::RUNNER_EVENTS) {
        match codec.decode::<RunnerEventRecord>(Family::RunnerEvent, payload) {
            Ok(record) => match record.to_report() {
                Ok(report) => Decoded::Input(InputEnvelope {
                    input_id: format!("report:{}", record.event_id),
                    source: "runner-events".into(),
                    input: Input::Report(report),
                }),
                Err(error) => Decoded::Poison(format!("invalid runner event: {error}")),
            },
            Err(error) => Decoded::Poison(format!("not a runner event record: {error}")),
        }
    } else {
        Decoded::Poison(format!("unexpected topic {topic}"))
    }
}

fn decode_command(config: &DispatcherConfig, record: CommandRecord) -> Decoded {
    let input_id = format!("command:{}", record.command_id);
    match record.kind {
        CommandKind::ExecuteJob => {
            let Some(spec) = record.execute else {
                return Decoded::Poison("an execute_job command without `execute`".into());
            };
            match validate_jobspec(&spec.to_json()) {
                Ok(valid) => Decoded::Input(InputEnvelope {
                    input_id,
                    source: "commands".into(),
                    input: Input::Execute {
                        spec: Box::new(valid),
                    },
                }),
                Err(problems) => {
                    // Identifiable: it becomes a rejected attempt, visible to
                    // everyone. Not identifiable: dead letter.
                    let command_id = Uuid::parse_str(&spec.command_id).ok();
                    match command_id {
                        Some(command_id) if !spec.job_id.trim().is_empty() => {
                            Decoded::Input(InputEnvelope {
                                input_id,
                                source: "commands".into(),
                                input: Input::ExecuteInvalid {
                                    command_id,
                                    job_id: spec.job_id.clone(),
                                    tenant: spec.tenant.clone(),
                                    operation: spec.operation.clone(),
                                    category: if problems
                                        .0
                                        .iter()
                                        .any(|problem| problem.path.starts_with("policy"))
                                    {
                                        FailureCategory::Policy
                                    } else {
                                        FailureCategory::Contract
                                    },
                                    problems: problems.0,
                                },
                            })
                        }
                        _ => Decoded::Poison(problems.to_string()),
                    }
                }
            }
        }
        CommandKind::CancelAttempt => {
            let Some(cancel) = record.cancel else {
                return Decoded::Poison("a cancel_attempt command without `cancel`".into());
            };
            let Ok(attempt_id) = Uuid::parse_str(&cancel.attempt_id) else {
                return Decoded::Poison(
                    Problem::new("cancel.attempt_id", "not a UUID").to_string(),
                );
            };
            let grace = cancel
                .grace_ms
                .and_then(|millis| u64::try_from(millis).ok())
                .map(DurationMs)
                .unwrap_or(DurationMs(
                    u64::try_from(config.cancel_grace.as_millis()).unwrap_or(10_000),
                ));
            Decoded::Input(InputEnvelope {
                input_id,
                source: "commands".into(),
                input: Input::Cancel {
                    attempt_id,
                    reason: cancel.reason,
                    requested_by: cancel.requested_by,
                    grace,
                },
            })
        }
    }
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
