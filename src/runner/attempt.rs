//! One attempt on a runner: started, heartbeats with progress, the lease
//! deadline watched (self-fencing), cancel and revocation, the final report.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use super::fence::{LeaseGuard, Stopping};
use super::{heartbeat_period, Assignment, ExecutionContext, ExecutionOutcome, Executor, Failure};
use crate::codec::{Codec, Family, LogChunkRecord, LogStream, RunnerEventRecord};
use crate::contract::{
    topics, FailureCategory, JobSpec, OperationInputs, Problem, ReportBody, RunnerInputs,
    RunnerReport, RunnerType,
};
use crate::kafka::KafkaConfig;
use crate::secrets::{Masker, StreamMasker, Vault};

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
    /// The attempt's resolved secrets, masked in everything it sends.
    masker: Masker,
}

impl Reporter {
    pub(super) fn new(kafka: KafkaConfig, producer: FutureProducer, instance_id: String) -> Self {
        Self {
            codec: kafka.codec.clone(),
            kafka,
            producer,
            instance_id,
            traceparent: None,
            masker: Masker::default(),
        }
    }

    /// This reporter for one attempt: its JobSpec's traceparent, and the
    /// masker of the secrets it resolved.
    fn for_attempt(&self, traceparent: Option<String>, masker: Masker) -> Self {
        Self {
            traceparent,
            masker,
            ..self.clone()
        }
    }

    /// Every text of a report, masked, then made storable: an executor's
    /// message or result that intake would refuse (too long, control
    /// characters) would otherwise be dead-lettered, and the attempt would
    /// never finish.
    fn masked(&self, body: ReportBody) -> ReportBody {
        let mask = |text: String| {
            let masked = if self.masker.is_empty() {
                text
            } else {
                self.masker.mask(&text)
            };
            storable(masked)
        };
        match body {
            ReportBody::Started => ReportBody::Started,
            ReportBody::Heartbeat { progress, percent } => ReportBody::Heartbeat {
                progress: progress.map(mask),
                percent,
            },
            ReportBody::Progress { message, percent } => ReportBody::Progress {
                message: mask(message),
                percent,
            },
            ReportBody::Finished {
                outcome,
                category,
                message,
                result_json,
                outputs,
            } => {
                let mut message = mask(message);
                let result_json = result_json
                    .map(|text| {
                        if self.masker.is_empty() {
                            text
                        } else {
                            self.masker.mask(&text)
                        }
                    })
                    .map(storable_result)
                    .and_then(|text| {
                        if text.len() <= crate::contract::limits::MAX_RESULT_BYTES {
                            return Some(text);
                        }
                        warn!(bytes = text.len(), "result over the report bound; dropped");
                        message = storable(format!(
                            "{message} (its result, {} bytes, is over the {}-byte bound and was dropped)",
                            text.len(),
                            crate::contract::limits::MAX_RESULT_BYTES
                        ));
                        None
                    });
                ReportBody::Finished {
                    outcome,
                    category,
                    message,
                    result_json,
                    // Names and digests; the bytes were masked before upload.
                    outputs,
                }
            }
        }
    }

    /// Sends one chunk of output (already masked by the caller's stream
    /// masker) to `exec.log-chunks.v1`, keyed by attempt.
    fn log(
        &self,
        attempt_id: Uuid,
        epoch: u64,
        stream: LogStream,
        seq: u64,
        text: String,
    ) -> Option<rdkafka::producer::DeliveryFuture> {
        let record = LogChunkRecord::new(
            attempt_id,
            epoch,
            self.instance_id.clone(),
            stream,
            seq,
            text,
            chrono::Utc::now().timestamp_millis(),
        );
        let chunk_id = record.chunk_id.clone();
        let Ok(payload) = self.codec.encode(Family::LogChunk, &record) else {
            return None;
        };
        let topic = self.kafka.topic(topics::LOG_CHUNKS);
        let key = attempt_id.to_string();
        let record = FutureRecord::to(&topic)
            .key(&key)
            .payload(&payload)
            .headers(crate::kafka::cloudevent_headers(
                &chunk_id,
                "io.execplane.runner.log_chunk",
                "execplane/runner",
                self.traceparent.as_deref(),
            ));
        match self.producer.send_result(record) {
            Ok(delivery) => Some(delivery),
            Err((error, _)) => {
                warn!(%error, "log chunk not enqueued");
                None
            }
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
            body: self.masked(body),
        };
        let event_id = Uuid::new_v4();
        let record = RunnerEventRecord::from_report(
            event_id,
            chrono::Utc::now().timestamp_millis(),
            &report,
        );
        let payload = self.codec.encode_record(&record).ok()?;
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

/// The tokio instant of an epoch-milliseconds wall-clock time.
fn instant_of(at_millis: i64) -> tokio::time::Instant {
    let now = chrono::Utc::now().timestamp_millis();
    let remaining = Duration::from_millis(u64::try_from(at_millis - now).unwrap_or(0));
    tokio::time::Instant::now() + remaining
}

/// What every attempt of an instance shares.
#[derive(Clone, Debug)]
pub(super) struct AttemptSettings {
    /// How long a stopped tool gets between SIGINT and SIGKILL.
    pub stop_grace: Duration,
    /// Where tool processes run.
    pub tools: Arc<super::tool::ToolSettings>,
    /// Where input artifacts are read from.
    pub storage: Option<Arc<crate::artifacts::Storage>>,
    /// Where secret references are resolved.
    pub secrets: Option<Arc<Vault>>,
    /// The operator's policy, checked again before anything is resolved.
    pub policy: crate::policy::SharedPolicy,
}

/// The channels an attempt is told things on by its instance.
pub(super) struct Signals {
    /// The lease deadline, as extended.
    pub lease: watch::Receiver<i64>,
    /// A cancel or a revocation.
    pub stops: mpsc::UnboundedReceiver<Stop>,
    /// Cancelled when the instance's drain timed out.
    pub stop_all: CancellationToken,
}

/// Runs the attempt to its end; returns when the final report is sent (or
/// deliberately not sent, after a revocation).
pub(super) async fn run_attempt<E: Executor>(
    executor: Arc<E>,
    reporter: Reporter,
    mut assignment: Assignment,
    signals: Signals,
    settings: AttemptSettings,
) {
    let (attempt_id, epoch) = (assignment.attempt_id, assignment.lease_epoch);
    let operation = assignment.spec.operation;
    let traceparent = assignment
        .spec
        .trace
        .as_ref()
        .map(|trace| trace.traceparent.clone());
    // Before anything of it is resolved: a work item of an operation this
    // runner does not run (misrouted, or forged onto its partition), or
    // one intake would refuse, or the operator's policy refuses (a secret
    // outside the tenant's prefixes is never even asked for).
    let policy = settings.policy.current();
    let operations = executor.operations();
    let refused = before_secrets(
        &assignment.spec,
        executor.runner_type(),
        &operations,
        &policy,
    );
    if let Err(refusal) = refused {
        warn!(category = ?refusal.category, "refused before its secrets were resolved");
        let reporter = reporter.for_attempt(traceparent, Default::default());
        reporter.post(attempt_id, epoch, ReportBody::Started);
        return refuse(&reporter, attempt_id, epoch, refusal).await;
    }
    // Secrets are resolved here, at execution time, and live in memory only
    // (in the inputs the executor reads); every report masks them.
    let resolved =
        crate::secrets::resolve_inputs(&mut assignment.spec, settings.secrets.as_deref()).await;
    let masker = resolved
        .as_ref()
        .map(|resolved| resolved.masker.clone())
        .unwrap_or_default();
    let reporter = reporter.for_attempt(traceparent, masker.clone());
    reporter.post(attempt_id, epoch, ReportBody::Started);
    info!("started");
    if let Err(error) = resolved {
        warn!(%error, "secret not resolved");
        let failure = Failure::new(error.category(), error.to_string());
        return refuse(&reporter, attempt_id, epoch, failure).await;
    }
    let inputs = match admit::<E::Inputs>(&assignment.spec, executor.runner_type(), &policy) {
        Ok(inputs) => inputs,
        Err(refused) => {
            warn!(category = ?refused.category, "inputs refused");
            return refuse(&reporter, attempt_id, epoch, refused).await;
        }
    };
    let outputs = super::outputs::Outputs::new(attempt_id, &assignment.spec.tenant, masker.clone());
    let mut logs = OutputStreams::new(masker);
    let Some(outcome) = supervise(
        executor,
        &reporter,
        &mut logs,
        Admitted {
            assignment,
            inputs,
            policy,
        },
        signals,
        &settings,
        outputs.clone(),
    )
    .await
    else {
        info!("lease revoked; stopped");
        return;
    };
    logs.finish(&reporter, attempt_id, epoch).await;
    // Whatever the tool stored is listed, whatever its outcome: a failed
    // plan's output is evidence too.
    let mut report = finished(outcome, outputs.taken());
    if let Some(problem) = report.hold_to_type(operation) {
        warn!(%problem, "the executor's result does not match its operation's type");
    }
    if let ReportBody::Finished {
        outcome, category, ..
    } = &report
    {
        info!(?outcome, ?category, "finished");
    }
    reporter.send_final(attempt_id, epoch, report).await;
}

/// An attempt refused before its executor ran: its final report.
async fn refuse(reporter: &Reporter, attempt_id: Uuid, epoch: u64, failure: Failure) {
    reporter
        .send_final(attempt_id, epoch, finished(failure.into(), Vec::new()))
        .await;
}

fn finished(
    outcome: ExecutionOutcome,
    outputs: Vec<crate::contract::OutputArtifact>,
) -> ReportBody {
    ReportBody::Finished {
        outcome: outcome.outcome,
        category: outcome.category,
        message: outcome.message,
        result_json: outcome.result_json,
        outputs,
    }
}

/// What the SDK hands the executor once every check passed.
struct Admitted<I> {
    assignment: Assignment,
    inputs: I,
    /// The policy the attempt was checked against.
    policy: Arc<crate::policy::OperatorPolicy>,
}

/// The inputs as the executor gets them: parsed once, from the JobSpec as
/// it is now (secrets resolved), checked as intake checked them (the
/// contract's input checks, then its flag gates), and narrowed to the
/// runner's operations. The failure to report otherwise.
pub(crate) fn admit<I: RunnerInputs>(
    spec: &JobSpec,
    runner: RunnerType,
    policy: &crate::policy::OperatorPolicy,
) -> Result<I, Failure> {
    let refused = |category, problems: Vec<Problem>| {
        let problems: Vec<String> = problems.iter().map(Problem::to_string).collect();
        Err(Failure::new(category, problems.join("; ")))
    };
    let inputs = match OperationInputs::parse(spec.operation, &spec.inputs) {
        Ok(inputs) => inputs,
        Err((path, message)) => {
            return refused(
                FailureCategory::Contract,
                vec![Problem::new(
                    if path.is_empty() {
                        "inputs".to_owned()
                    } else {
                        format!("inputs.{path}")
                    },
                    message,
                )],
            )
        }
    };
    let problems = crate::contract::input_problems(&inputs);
    if !problems.is_empty() {
        return refused(FailureCategory::Contract, problems);
    }
    let problems = crate::contract::flag_problems(spec);
    if !problems.is_empty() {
        return refused(FailureCategory::Policy, problems);
    }
    // The operator's policy again, on what the runner will read: a
    // reference that stood where a name goes is a name now.
    let problems = policy.check_jobspec(spec);
    if !problems.is_empty() {
        return refused(FailureCategory::Policy, problems);
    }
    I::try_from(inputs).map_err(|_| {
        Failure::contract(format!(
            "the {runner} runner does not run {}",
            spec.operation
        ))
    })
}

/// Why the work item is refused before any of its secrets is resolved: an
/// operation the runner does not run; a JobSpec intake would refuse (its
/// record's JSON form, validated as the dispatcher's intake validates it: a
/// record produced past the dispatcher is held to the same contract, so
/// nothing that stands where a name goes can be a secret reference that
/// only resolution turns into one); the operator's policy, this runner's
/// file being what binds it.
fn before_secrets(
    spec: &JobSpec,
    runner: RunnerType,
    operations: &[crate::contract::Operation],
    policy: &crate::policy::OperatorPolicy,
) -> Result<(), Failure> {
    let operation = spec.operation;
    if !operations.contains(&operation) {
        return Err(Failure::contract(format!(
            "the {runner} runner does not run {operation}"
        )));
    }
    let as_sent = crate::codec::JobSpecRecord::from(spec).to_json();
    if let Err(problems) = crate::contract::validate_jobspec(&as_sent) {
        return Err(Failure::contract(format!(
            "the work item is not a JobSpec intake accepts: {problems}"
        )));
    }
    let refused = policy.check_jobspec(spec);
    if !refused.is_empty() {
        return Err(Failure::policy(format!(
            "refused by the operator's policy: {}",
            crate::contract::Problems(refused)
        )));
    }
    Ok(())
}

/// Runs the executor under the lease: heartbeats, progress and output as
/// they come; the tool stopped on a fence, cancel, revocation or drain
/// timeout. The outcome to report, or `None` (revoked: report nothing).
async fn supervise<E: Executor>(
    executor: Arc<E>,
    reporter: &Reporter,
    logs: &mut OutputStreams,
    admitted: Admitted<E::Inputs>,
    signals: Signals,
    settings: &AttemptSettings,
    outputs: super::outputs::Outputs,
) -> Option<ExecutionOutcome> {
    let Signals {
        mut lease,
        mut stops,
        stop_all,
    } = signals;
    let Admitted {
        assignment,
        inputs,
        policy,
    } = admitted;
    let (attempt_id, epoch) = (assignment.attempt_id, assignment.lease_epoch);
    let ttl = assignment.spec.timeouts.heartbeat.as_std();
    let cancel = CancellationToken::new();
    let (progress_tx, mut progress_rx) = mpsc::unbounded_channel();
    let (log_tx, mut log_rx) = mpsc::unbounded_channel::<(LogStream, String)>();
    let start_to_close = assignment.spec.timeouts.start_to_close.as_std();
    let context = ExecutionContext::new(cancel.clone(), progress_tx, log_tx)
        .with_outputs(outputs)
        .with_tools(settings.tools.clone(), settings.stop_grace)
        .with_storage(settings.storage.clone())
        .with_tenant(assignment.spec.tenant.clone())
        .with_policy(policy)
        .with_secrets(settings.secrets.clone())
        .with_deadline(tokio::time::Instant::now() + start_to_close);
    let execution = executor.execute(assignment, inputs, context);
    tokio::pin!(execution);
    let mut guard = LeaseGuard::new(ttl, *lease.borrow());
    let mut heartbeat = tokio::time::interval(heartbeat_period(ttl));
    heartbeat.tick().await;
    let mut latest_progress: Option<(String, Option<u8>)> = None;
    let outcome = loop {
        let stopping = tokio::select! {
            // Fencing first: after a pause (SIGSTOP, a long GC, a cut link)
            // the deadline wins over everything else that became ready.
            biased;
            _ = tokio::time::sleep_until(instant_of(guard.fence_at())) => {
                if !guard.must_fence(chrono::Utc::now().timestamp_millis()) {
                    continue;
                }
                Stopping::Fenced
            }
            changed = lease.changed() => {
                if changed.is_ok() {
                    let expires_at = *lease.borrow();
                    guard.extend(expires_at, chrono::Utc::now().timestamp_millis());
                }
                continue;
            }
            stop = stops.recv() => {
                let asked = match stop {
                    Some(Stop::Revoked) => Stopping::Revoked,
                    Some(Stop::Cancel(reason)) => Stopping::Cancelled(reason),
                    None => continue,
                };
                // Read after a pause, a stop may race the fence's timer:
                // the deadline decides, not which woke first.
                guard.settle(asked, chrono::Utc::now().timestamp_millis())
            }
            _ = stop_all.cancelled() => Stopping::ShutDown,
            outcome = &mut execution => break Some(outcome),
            Some(progress) = progress_rx.recv() => {
                latest_progress = Some(progress);
                continue;
            }
            Some((stream, text)) = log_rx.recv() => {
                logs.push(reporter, attempt_id, epoch, stream, &text);
                continue;
            }
            _ = heartbeat.tick() => {
                let (progress, percent) = match &latest_progress {
                    Some((message, percent)) => (Some(message.clone()), *percent),
                    None => (None, None),
                };
                reporter.post(attempt_id, epoch, ReportBody::Heartbeat { progress, percent });
                continue;
            }
        };
        if stopping == Stopping::Fenced {
            // By the timer or by a stop read after the deadline: the same.
            warn!("lease deadline passed without an extension: fencing myself");
            crate::telemetry::metrics::runner_self_fenced();
        }
        cancel.cancel();
        // The grace a tool gets between SIGINT and SIGKILL, and a second
        // for the supervisor to reap it and the executor to say how it ended.
        let finished = tokio::time::timeout(settings.stop_grace + KILL_MARGIN, &mut execution)
            .await
            .ok();
        break stopping.report(finished);
    };
    // Output the tool wrote before it ended.
    while let Ok((stream, text)) = log_rx.try_recv() {
        logs.push(reporter, attempt_id, epoch, stream, &text);
    }
    outcome
}

/// How long after a stopped tool's grace the runner waits for the executor.
const KILL_MARGIN: Duration = Duration::from_secs(1);

/// Largest chunk of output sent in one record.
const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// The attempt's output streams: each masked as a stream (a secret split
/// across two writes is still caught), cut into bounded chunks, numbered;
/// deliveries are kept so the final report waits for them.
struct OutputStreams {
    masker: Masker,
    streams: Vec<(LogStream, StreamMasker, u64)>,
    deliveries: Vec<rdkafka::producer::DeliveryFuture>,
}

impl OutputStreams {
    fn new(masker: Masker) -> Self {
        Self {
            masker,
            streams: Vec::new(),
            deliveries: Vec::new(),
        }
    }

    fn send(
        &mut self,
        reporter: &Reporter,
        attempt_id: Uuid,
        epoch: u64,
        index: usize,
        text: String,
    ) {
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let mut cut = rest.len().min(MAX_CHUNK_BYTES);
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            let (stream, _, seq) = &mut self.streams[index];
            if let Some(delivery) =
                reporter.log(attempt_id, epoch, *stream, *seq, rest[..cut].to_owned())
            {
                self.deliveries.push(delivery);
            }
            *seq += 1;
            rest = &rest[cut..];
        }
    }

    fn push(
        &mut self,
        reporter: &Reporter,
        attempt_id: Uuid,
        epoch: u64,
        stream: LogStream,
        text: &str,
    ) {
        let index = match self.streams.iter().position(|(s, _, _)| *s == stream) {
            Some(index) => index,
            None => {
                self.streams
                    .push((stream, StreamMasker::new(self.masker.clone()), 0));
                self.streams.len() - 1
            }
        };
        let ready = self.streams[index].1.push(text);
        self.send(reporter, attempt_id, epoch, index, ready);
    }

    /// Flushes what the maskers held back and waits (bounded) until the
    /// broker has every chunk, so output is staged before the attempt ends.
    async fn finish(&mut self, reporter: &Reporter, attempt_id: Uuid, epoch: u64) {
        for index in 0..self.streams.len() {
            let rest = self.streams[index].1.finish();
            self.send(reporter, attempt_id, epoch, index, rest);
        }
        let deliveries = std::mem::take(&mut self.deliveries);
        if tokio::time::timeout(
            Duration::from_secs(10),
            futures_util::future::join_all(deliveries),
        )
        .await
        .is_err()
        {
            warn!("output chunks not acknowledged within 10 s; reporting the end anyway");
        }
    }
}

/// A result whose strings hold U+0000 (a tool's output, escaped as JSON
/// allows) with U+FFFD in its place: intake refuses a result `jsonb`
/// cannot hold, and the tool's result is kept rather than lost.
fn storable_result(text: String) -> String {
    if !text.contains("\\u0000") {
        return text;
    }
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value) if crate::contract::limits::json_holds_nul(&value) => {
            crate::contract::limits::json_without_nul(value).to_string()
        }
        _ => text,
    }
}

/// `text` as a report may carry it: control characters other than newline,
/// carriage return and tab escaped, at most `MAX_MESSAGE_BYTES` (cut at a
/// character boundary, marked).
fn storable(text: String) -> String {
    use crate::contract::limits::MAX_MESSAGE_BYTES;
    let clean = if text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        text.chars()
            .map(|c| {
                if c.is_control() && !matches!(c, '\n' | '\r' | '\t') {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    } else {
        text
    };
    if clean.len() <= MAX_MESSAGE_BYTES {
        return clean;
    }
    const MARK: &str = " [...]";
    let mut end = MAX_MESSAGE_BYTES - MARK.len();
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &clean[..end])
}

#[cfg(test)]
mod storable_tests {
    use super::{storable, storable_result};
    use crate::contract::limits::MAX_MESSAGE_BYTES;

    #[test]
    fn a_result_keeps_a_tool_s_nul_as_a_replacement_character() {
        let kept = storable_result(r#"{"out":"a\u0000b","\u0000k":[1]}"#.into());
        let value: serde_json::Value = serde_json::from_str(&kept).unwrap();
        assert_eq!(value["out"], "a\u{fffd}b");
        assert_eq!(value["\u{fffd}k"], serde_json::json!([1]));
        let untouched = r#"{"out": "a\\u0000b"}"#;
        assert_eq!(storable_result(untouched.into()), untouched);
    }

    #[test]
    fn a_report_text_is_cut_to_its_bound_and_loses_its_control_characters() {
        assert_eq!(storable("fine\nline\ttab".into()), "fine\nline\ttab");
        assert_eq!(storable("a\u{1b}[31mb".into()), "a\\u{1b}[31mb");
        let long = storable("é".repeat(MAX_MESSAGE_BYTES));
        assert!(long.len() <= MAX_MESSAGE_BYTES && long.ends_with(" [...]"));
    }
}

#[cfg(test)]
mod admit_tests {
    use serde_json::{json, Value};

    use super::{admit, before_secrets};
    use crate::policy::OperatorPolicy;

    /// team-a may run what these tests send, on cluster `c`.
    fn permissive() -> OperatorPolicy {
        OperatorPolicy::from_yaml(
            "clusters:\n  c:\n    server: https://127.0.0.1:6443\n\
             tenants:\n  team-a:\n    operations: [\"kubernetes.*\", \"opentofu.*\", \"ssh.*\"]\n\
             \x20   grants: [destructive, elevated, explicit_command]\n\
             \x20   secret_prefixes: [\"secret/\"]\n\
             \x20   kubernetes:\n      clusters:\n        c:\n          namespaces: [n]\n",
        )
        .unwrap()
    }
    use crate::contract::ops::{KubernetesInputs, SshInputs, TofuInputs};
    use crate::contract::{FailureCategory, JobSpec, RunnerType};

    fn spec(operation: &str, policy: Value, inputs: Value) -> JobSpec {
        crate::contract::validate_jobspec(&json!({
            "command_id": uuid::Uuid::new_v4().to_string(),
            "job_id": "gates", "tenant": "team-a", "requested_by": "test",
            "operation": operation, "inputs": inputs, "policy": policy,
        }))
        .unwrap()
    }

    /// A work item put past intake with a secret reference where the
    /// template's name goes: the policy's check, before resolution, cannot
    /// read a name there, and resolution would make one. Refused as intake
    /// refuses it, before any secret is asked for; and a name the tenant may
    /// not use, once resolved, is the policy's refusal.
    #[test]
    fn a_name_no_check_could_read_before_resolution_is_refused() {
        let command = |template: Value| {
            let mut spec = crate::contract::validate_jobspec(&json!({
                "command_id": uuid::Uuid::new_v4().to_string(),
                "job_id": "forged", "tenant": "team-a", "requested_by": "test",
                "operation": "ssh.command.run",
                "inputs": {"template_id": "uptime", "user": "ops",
                           "private_key": {"$secret": "key"}},
                "targets": [{"kind": "node", "id": "n", "address": "127.0.0.1"}],
                "secret_refs": [
                    {"name": "key", "mount": "secret", "path": "k", "key": "private_key"},
                    {"name": "name", "mount": "secret", "path": "n", "key": "template"}
                ],
            }))
            .unwrap();
            spec.inputs["template_id"] = template;
            spec
        };
        let ssh = [crate::contract::Operation::SshCommandRun];
        let forged = command(json!({"$secret": "name"}));
        let refused = before_secrets(&forged, RunnerType::Ssh, &ssh, &permissive()).unwrap_err();
        assert_eq!(
            refused.category,
            FailureCategory::Contract,
            "{}",
            refused.message
        );
        assert!(refused.message.contains("intake"), "{}", refused.message);
        let mut resolved = command(json!("root-shell"));
        resolved.inputs["private_key"] = json!("resolved");
        let refused = admit::<SshInputs>(&resolved, RunnerType::Ssh, &permissive()).unwrap_err();
        assert_eq!(
            refused.category,
            FailureCategory::Policy,
            "{}",
            refused.message
        );
        assert!(
            refused.message.contains("root-shell"),
            "{}",
            refused.message
        );
    }

    /// An apply of another plan than the approved one, or a destroy that
    /// is not elevated, never reaches the executor: the contract's flag
    /// gates refuse it as `policy`. The same JobSpecs are refused at
    /// intake; a work record produced past the dispatcher meets this check.
    #[test]
    fn the_flag_gates_refuse_before_the_executor_runs() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let module = json!({"package": {"name": "m", "version": "1", "digest": digest}});
        let mut apply_inputs = module.clone();
        apply_inputs["plan_artifact"] = json!(digest);
        let mut other = spec(
            "opentofu.apply",
            json!({"approved_plan_digest": digest}),
            apply_inputs,
        );
        other.policy.approved_plan_digest = Some(format!("sha256:{}", "cd".repeat(32)));
        let mut unelevated = spec("opentofu.destroy", json!({"elevated": true}), module);
        unelevated.policy.elevated = false;
        for (spec, expected) in [(other, "not the approved plan"), (unelevated, "elevated")] {
            let outcome =
                admit::<TofuInputs>(&spec, RunnerType::Opentofu, &permissive()).unwrap_err();
            assert_eq!(
                outcome.category,
                FailureCategory::Policy,
                "{}",
                outcome.message
            );
            assert!(outcome.message.contains(expected), "{}", outcome.message);
        }
    }

    /// Inputs that intake would refuse (here a name no API path may hold,
    /// written into the record past intake) are refused as `contract`, and
    /// an operation of another runner as `contract` too, naming it.
    #[test]
    fn inputs_are_checked_as_intake_checks_them_and_narrowed_to_the_runner() {
        let cluster = json!({"name": "c", "credentials": {"$secret": "k"}});
        let read = |name: &str| {
            let mut spec: JobSpec = crate::contract::validate_jobspec(&json!({
                "command_id": uuid::Uuid::new_v4().to_string(),
                "job_id": "read", "tenant": "team-a", "requested_by": "test",
                "operation": "kubernetes.resource.read",
                "inputs": {"cluster": cluster, "namespace": "n",
                           "object": {"api_version": "v1", "kind": "ConfigMap", "name": "ok"}},
                "secret_refs": [{"name": "k", "mount": "secret", "path": "c", "key": "token"}],
            }))
            .unwrap();
            spec.inputs["object"]["name"] = json!(name);
            spec.inputs["cluster"]["credentials"] = json!("resolved");
            spec
        };
        assert!(
            admit::<KubernetesInputs>(&read("ok"), RunnerType::Kubernetes, &permissive()).is_ok()
        );
        let bad = admit::<KubernetesInputs>(
            &read("../../secrets"),
            RunnerType::Kubernetes,
            &permissive(),
        )
        .unwrap_err();
        assert_eq!(bad.category, FailureCategory::Contract, "{}", bad.message);
        assert!(
            bad.message.contains("inputs.object.name"),
            "{}",
            bad.message
        );
        let mut unparsed = read("ok");
        unparsed.inputs["object"]["kind"] = json!(7);
        let bad = admit::<KubernetesInputs>(&unparsed, RunnerType::Kubernetes, &permissive())
            .unwrap_err();
        assert_eq!(bad.category, FailureCategory::Contract, "{}", bad.message);
        assert!(
            bad.message.starts_with("inputs.object.kind"),
            "{}",
            bad.message
        );
        let other =
            admit::<TofuInputs>(&read("ok"), RunnerType::Opentofu, &permissive()).unwrap_err();
        assert_eq!(other.category, FailureCategory::Contract);
        assert_eq!(
            other.message,
            "the opentofu runner does not run kubernetes.resource.read"
        );
    }
}
