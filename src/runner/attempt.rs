//! One attempt on a runner: started, heartbeats with progress, the lease
//! deadline watched (self-fencing), cancel and revocation, the final report.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use super::{
    fence_margin, heartbeat_period, Assignment, ExecutionContext, ExecutionOutcome, Executor,
};
use crate::codec::{Codec, Family, RunnerEventRecord};
use crate::contract::{topics, FailureCategory, ReportBody, ReportedOutcome, RunnerReport};
use crate::kafka::KafkaConfig;

/// Why a running attempt must stop.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Stop {
    /// The control plane asked; report `cancelled`.
    Cancel(String),
    /// The dispatcher already ended the attempt; stop quietly.
    Revoked,
}

/// Sends runner events, keyed by attempt.
#[derive(Clone)]
pub(super) struct Reporter {
    kafka: KafkaConfig,
    producer: FutureProducer,
    instance_id: String,
    codec: Codec,
    /// The attempt's trace context, carried on its reports.
    traceparent: Option<String>,
}

impl Reporter {
    pub(super) fn new(kafka: KafkaConfig, producer: FutureProducer, instance_id: String) -> Self {
        Self {
            kafka,
            producer,
            instance_id,
            codec: Codec::default(),
            traceparent: None,
        }
    }

    /// This reporter for one attempt, carrying its JobSpec's traceparent.
    fn for_attempt(&self, traceparent: Option<String>) -> Self {
        Self {
            traceparent,
            ..self.clone()
        }
    }

    /// Enqueues a report and returns at once: a broker that does not answer
    /// must never keep the attempt loop from fencing itself. Delivery is
    /// awaited in the background (the idempotent producer retries until its
    /// message timeout).
    fn send(
        &self,
        attempt_id: Uuid,
        epoch: u64,
        body: ReportBody,
    ) -> Option<rdkafka::producer::DeliveryFuture> {
        let report = RunnerReport {
            attempt_id,
            lease_epoch: epoch,
            runner_instance: self.instance_id.clone(),
            body,
        };
        let event_id = Uuid::new_v4();
        let record = RunnerEventRecord::from_report(
            event_id,
            chrono::Utc::now().timestamp_millis(),
            &report,
        );
        let payload = self.codec.encode(Family::RunnerEvent, &record).ok()?;
        let topic = self.kafka.topic(topics::RUNNER_EVENTS);
        let key = attempt_id.to_string();
        let ce_type = format!("io.execplane.runner.{}", report.body.kind());
        let record = FutureRecord::to(&topic)
            .key(&key)
            .payload(&payload)
            .headers(crate::kafka::cloudevent_headers(
                &event_id.to_string(),
                &ce_type,
                "execplane/runner",
                self.traceparent.as_deref(),
            ));
        match self.producer.send_result(record) {
            Ok(delivery) => Some(delivery),
            Err((error, _)) => {
                warn!(%error, kind = report.body.kind(), "report not enqueued");
                None
            }
        }
    }

    /// Sends without waiting; a failed delivery is logged.
    fn post(&self, attempt_id: Uuid, epoch: u64, body: ReportBody) {
        let kind = body.kind();
        if let Some(delivery) = self.send(attempt_id, epoch, body) {
            tokio::spawn(async move {
                if let Ok(Err((error, _))) = delivery.await {
                    warn!(%error, kind, "report not delivered");
                }
            });
        }
    }

    /// Sends the final report and waits (bounded) for its delivery.
    async fn send_final(&self, attempt_id: Uuid, epoch: u64, body: ReportBody) {
        if let Some(delivery) = self.send(attempt_id, epoch, body) {
            match tokio::time::timeout(Duration::from_secs(30), delivery).await {
                Ok(Ok(Ok(_))) => {}
                Ok(Ok(Err((error, _)))) => warn!(%error, "final report not delivered"),
                _ => warn!("final report not confirmed by the broker"),
            }
        }
    }
}

fn deadline_instant(expires_at_millis: i64, margin: Duration) -> tokio::time::Instant {
    let now = chrono::Utc::now().timestamp_millis();
    let remaining = Duration::from_millis(u64::try_from(expires_at_millis - now).unwrap_or(0));
    tokio::time::Instant::now() + remaining.saturating_sub(margin)
}

/// Runs the attempt to its end; returns when the final report is sent (or
/// deliberately not sent, after a revocation).
pub(super) async fn run_attempt<E: Executor>(
    executor: Arc<E>,
    reporter: Reporter,
    assignment: Assignment,
    mut lease: watch::Receiver<i64>,
    mut stops: mpsc::UnboundedReceiver<Stop>,
    stop_all: CancellationToken,
    stop_grace: Duration,
) {
    let attempt_id = assignment.attempt_id;
    let epoch = assignment.lease_epoch;
    let ttl = assignment.spec.timeouts.heartbeat.as_std();
    let margin = fence_margin(ttl);
    let reporter = reporter.for_attempt(
        assignment
            .spec
            .trace
            .as_ref()
            .map(|trace| trace.traceparent.clone()),
    );
    reporter.post(attempt_id, epoch, ReportBody::Started);
    info!("started");

    let cancel = CancellationToken::new();
    let (progress_tx, mut progress_rx) = mpsc::unbounded_channel();
    let context = ExecutionContext::new(cancel.clone(), progress_tx);
    let execution = executor.execute(assignment, context);
    tokio::pin!(execution);
    let mut fence = deadline_instant(*lease.borrow(), margin);
    let mut heartbeat = tokio::time::interval(heartbeat_period(ttl));
    heartbeat.tick().await;
    let mut latest_progress: Option<(String, Option<u8>)> = None;
    let outcome = loop {
        tokio::select! {
            // Fencing first: after a pause (SIGSTOP, a long GC, a cut link)
            // the deadline wins over everything else that became ready.
            biased;
            _ = tokio::time::sleep_until(fence) => {
                warn!("lease deadline passed without an extension: fencing myself");
                crate::telemetry::metrics::runner_self_fenced();
                cancel.cancel();
                let _ = tokio::time::timeout(stop_grace, &mut execution).await;
                break ExecutionOutcome::failed(
                    FailureCategory::LeaseLost,
                    "self-fenced: the lease deadline passed without an extension; the tool was stopped",
                    None,
                );
            }
            changed = lease.changed() => {
                if changed.is_ok() {
                    fence = deadline_instant(*lease.borrow(), margin);
                }
            }
            stop = stops.recv() => {
                let Some(stop) = stop else { continue };
                cancel.cancel();
                let finished = tokio::time::timeout(stop_grace, &mut execution).await;
                match stop {
                    Stop::Revoked => {
                        info!("lease revoked; stopped");
                        return;
                    }
                    Stop::Cancel(reason) => {
                        // A tool that finished anyway reports what it did.
                        match finished {
                            Ok(outcome) if outcome.outcome == ReportedOutcome::Succeeded => break outcome,
                            _ => break ExecutionOutcome {
                                outcome: ReportedOutcome::Cancelled,
                                category: Some(FailureCategory::Cancelled),
                                message: format!("cancelled: {reason}"),
                                result_json: None,
                            },
                        }
                    }
                }
            }
            _ = stop_all.cancelled() => {
                cancel.cancel();
                let _ = tokio::time::timeout(stop_grace, &mut execution).await;
                break ExecutionOutcome::failed(FailureCategory::Infrastructure, "the runner shut down before the attempt finished", None);
            }
            outcome = &mut execution => break outcome,
            Some(progress) = progress_rx.recv() => latest_progress = Some(progress),
            _ = heartbeat.tick() => {
                let (progress, percent) = match &latest_progress {
                    Some((message, percent)) => (Some(message.clone()), *percent),
                    None => (None, None),
                };
                reporter.post(attempt_id, epoch, ReportBody::Heartbeat { progress, percent });
            }
        }
    };
    info!(outcome = ?outcome.outcome, category = ?outcome.category, "finished");
    reporter
        .send_final(
            attempt_id,
            epoch,
            ReportBody::Finished {
                outcome: outcome.outcome,
                category: outcome.category,
                message: outcome.message,
                result_json: outcome.result_json,
            },
        )
        .await;
}
