//! `execplane submit FILE`: validate locally, produce the command, follow
//! the published attempt events to the terminal state, print a timeline,
//! and exit with the outcome.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::StreamConsumer;
use rdkafka::producer::FutureRecord;
use rdkafka::Message;

use super::assemble;
use crate::codec::CommandRecord;
use crate::config::Config;
use crate::contract::{topics, validate_jobspec_bytes, AttemptEvent, EventBody, TerminalOutcome};
use crate::kafka::cloudevent_headers;
use crate::policy::OperatorPolicy;

/// Exit codes: 0 succeeded, 1 ended otherwise, 2 invalid JobSpec, 4 no
/// terminal state within the timeout.
pub async fn run(
    config: &Config,
    policy: &OperatorPolicy,
    file: &Path,
    timeout: Duration,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let spec = match validate_jobspec_bytes(&bytes).and_then(|spec| runnable(spec, policy)) {
        Ok(spec) => spec,
        Err(problems) => {
            eprintln!("{}: {problems}", file.display());
            return Ok(ExitCode::from(2));
        }
    };
    // A command that already ran is not resubmitted to wait in vain: the
    // dispatcher would (rightly) treat it as a duplicate and publish nothing.
    if let Some(code) = already_known(config, &spec, json).await {
        return Ok(code);
    }
    let kafka = assemble::kafka(config);
    // Follow from the end of the published log BEFORE producing.
    let consumer = follow_from_the_end(&kafka)?;
    produce(&kafka, &spec).await?;
    if !json {
        println!(
            "submitted {} job `{}` (command {})",
            spec.operation, spec.job_id, spec.command_id
        );
    }
    follow(&kafka, &consumer, &spec, timeout, json).await
}

/// A valid JobSpec that the operator's policy (as configured here)
/// admits and that some runner of this release runs: the order intake
/// checks them in.
pub(super) fn runnable(
    spec: crate::contract::JobSpec,
    policy: &crate::policy::OperatorPolicy,
) -> Result<crate::contract::JobSpec, crate::contract::Problems> {
    let refused = policy.check_jobspec(&spec);
    if !refused.is_empty() {
        return Err(crate::contract::Problems(refused));
    }
    match spec.operation.not_implemented() {
        Some(problem) => Err(crate::contract::Problems(vec![problem])),
        None => Ok(spec),
    }
}

/// A consumer of the published log, assigned at its current end.
fn follow_from_the_end(kafka: &crate::kafka::KafkaConfig) -> anyhow::Result<StreamConsumer> {
    Ok(kafka.consumer_from_the_end(&kafka.topic(topics::ATTEMPT_EVENTS))?)
}

/// Produces the ExecuteJob command, keyed by job id.
async fn produce(
    kafka: &crate::kafka::KafkaConfig,
    spec: &crate::contract::JobSpec,
) -> anyhow::Result<()> {
    let producer = kafka.producer()?;
    let command = CommandRecord::execute(spec, chrono::Utc::now().timestamp_millis());
    let payload = kafka.codec.encode_record(&command)?;
    let commands_topic = kafka.topic(topics::COMMANDS);
    let traceparent = spec.trace.as_ref().map(|trace| trace.traceparent.as_str());
    producer
        .send(
            FutureRecord::to(&commands_topic)
                .key(&spec.job_id)
                .payload(&payload)
                .headers(cloudevent_headers(
                    &spec.command_id.to_string(),
                    "io.execplane.command.execute_job",
                    "execplane/cli",
                    traceparent,
                )),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(error, _)| anyhow::anyhow!("producing the command: {error}"))?;
    Ok(())
}

/// Follows the job's events to its end (a retry is not an end) and exits
/// with what it ended as.
async fn follow(
    kafka: &crate::kafka::KafkaConfig,
    consumer: &StreamConsumer,
    spec: &crate::contract::JobSpec,
    timeout: Duration,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut seen = HashSet::new();
    let mut timeline = Vec::new();
    loop {
        let message = match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Err(_) => {
                eprintln!(
                    "no terminal state within {}",
                    humantime::format_duration(timeout)
                );
                return Ok(ExitCode::from(4));
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "reading attempt events");
                continue;
            }
            Ok(Ok(message)) => message,
        };
        let Some(event) = message
            .payload()
            .and_then(|payload| {
                kafka
                    .codec
                    .decode_record::<crate::codec::AttemptEventRecord>(payload)
                    .ok()
            })
            .filter(|record| record.job_id == spec.job_id)
            .and_then(|record| AttemptEvent::try_from(record).ok())
        else {
            continue;
        };
        // A re-published event is the same event.
        if !seen.insert(event.event_id) {
            continue;
        }
        if json {
            timeline.push(serde_json::to_value(&event)?);
        } else {
            let short = event.attempt_id.simple().to_string();
            println!(
                "attempt {} #{:<3} {:<16} {}",
                short.get(..8).unwrap_or_default(),
                event.seq,
                event.body.kind(),
                event.summary()
            );
        }
        if let Some(succeeded) = verdict(&event.body) {
            if json {
                println!("{}", serde_json::to_string_pretty(&timeline)?);
            }
            return Ok(if succeeded {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
        }
    }
}

/// Whether an event ends the job, and as a success.
fn verdict(body: &EventBody) -> Option<bool> {
    match body {
        EventBody::Finished {
            retry_attempt_id: Some(_),
            ..
        } => None,
        EventBody::Finished { outcome, .. } => Some(*outcome == TerminalOutcome::Succeeded),
        EventBody::Rejected { .. } => Some(false),
        _ => None,
    }
}

/// When Postgres is reachable and the command already created its job:
/// prints the latest attempt's history and returns the exit code its state
/// deserves (or `None` to submit normally, e.g. still in flight).
async fn already_known(
    config: &Config,
    spec: &crate::contract::JobSpec,
    json: bool,
) -> Option<ExitCode> {
    // Best effort: when Postgres does not answer quickly, submit as usual.
    let store = tokio::time::timeout(
        Duration::from_secs(3),
        crate::store::Store::connect(&config.database.url, 1, None),
    )
    .await
    .ok()?
    .ok()?;
    let (attempt_id, status) = store
        .latest_attempt_of_command(spec.command_id)
        .await
        .ok()??;
    let terminal = crate::contract::AttemptStatus::parse(&status)
        .is_some_and(crate::contract::AttemptStatus::is_terminal);
    if !terminal {
        return None;
    }
    if !json {
        println!(
            "command {} already ran (job `{}`); its latest attempt:",
            spec.command_id, spec.job_id
        );
    }
    let _ = super::audit::replay(
        &store,
        &crate::store::EventSelection::Attempt(attempt_id),
        json,
    )
    .await;
    Some(if status == "succeeded" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
