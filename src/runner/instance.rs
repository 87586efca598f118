use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};
use uuid::Uuid;

use super::attempt::{run_attempt, AttemptSettings, Reporter, Signals, Stop};
use super::{Assignment, Executor, RunnerConfig};
use crate::codec::{Family, PresenceRecord, PresenceStatus, WorkRecord, WorkType};
use crate::contract::topics;
use crate::kafka::{partition_count, work_partition, KafkaConfig, KafkaError};
use crate::telemetry::health;

/// What the caller can see of a running instance.
#[derive(Clone, Debug)]
pub struct InstanceHandle {
    pub instance_id: String,
    pub partition: i32,
}

struct Running {
    lease: watch::Sender<i64>,
    stop: mpsc::UnboundedSender<Stop>,
    epoch: u64,
}

/// Every (attempt, lease epoch) this instance has started, kept until its
/// lease can no longer be valid: a work record delivered again (a relay
/// that died between publishing and acknowledging it publishes it once
/// more) must never run the operation twice (docs/ARCHITECTURE.md,
/// "Runners"). Forgetting costs O(log n) per start, whatever the number
/// remembered.
#[derive(Debug, Default)]
pub(super) struct StartedLeases {
    /// (attempt, epoch) → the lease expiry the work record carried.
    started: HashMap<(Uuid, u64), i64>,
    /// (expiry, attempt, epoch), soonest first. An extension pushes a new
    /// entry; the old one is stale (its expiry is no longer the lease's)
    /// and forgets nothing when it comes up.
    expiries: BinaryHeap<Reverse<(i64, Uuid, u64)>>,
}

/// How long past its lease expiry a started lease is remembered: a record
/// for it arriving later is refused by its expiry anyway.
const REMEMBER_PAST_EXPIRY_MS: i64 = 60_000;

impl StartedLeases {
    /// Whether a work item may start now: not started before, and its
    /// lease not already expired. Records the start when it may.
    pub(super) fn admit(
        &mut self,
        attempt_id: Uuid,
        epoch: u64,
        expires_at: i64,
        now: i64,
    ) -> Admission {
        self.forget_until(now);
        if self.started.contains_key(&(attempt_id, epoch)) {
            return Admission::AlreadyStarted;
        }
        if expires_at <= now {
            return Admission::Expired;
        }
        self.started.insert((attempt_id, epoch), expires_at);
        self.expiries.push(Reverse((expires_at, attempt_id, epoch)));
        Admission::Start
    }

    /// A lease extension moves how long the start is remembered.
    pub(super) fn extend(&mut self, attempt_id: Uuid, epoch: u64, expires_at: i64) {
        if let Some(expiry) = self.started.get_mut(&(attempt_id, epoch)) {
            if expires_at > *expiry {
                *expiry = expires_at;
                self.expiries.push(Reverse((expires_at, attempt_id, epoch)));
            }
        }
    }

    /// Forgets the leases remembered long enough by `now`.
    fn forget_until(&mut self, now: i64) {
        while let Some(Reverse((expiry, attempt_id, epoch))) = self.expiries.peek().copied() {
            if now <= expiry + REMEMBER_PAST_EXPIRY_MS {
                break;
            }
            self.expiries.pop();
            let key = (attempt_id, epoch);
            if self.started.get(&key) == Some(&expiry) {
                self.started.remove(&key);
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admission {
    Start,
    AlreadyStarted,
    Expired,
}

/// Runs one runner instance until `shutdown`, then drains. `ready` receives
/// the instance's identity once it reads its partition and has announced
/// itself.
pub async fn run_instance<E: Executor>(
    kafka: KafkaConfig,
    config: RunnerConfig,
    executor: Arc<E>,
    shutdown: CancellationToken,
    ready: Option<tokio::sync::oneshot::Sender<InstanceHandle>>,
) -> Result<(), KafkaError> {
    let Some((mut instance, consumer)) =
        Instance::start(kafka, config, executor, &shutdown).await?
    else {
        return Ok(());
    };
    if let Some(ready) = ready {
        let _ = ready.send(InstanceHandle {
            instance_id: instance.instance_id.clone(),
            partition: instance.presence.partition,
        });
    }
    // Draining keeps reading the partition: running attempts still need
    // their lease extensions, cancels and revocations.
    loop {
        if instance.drain_until.is_some() && instance.tasks.is_empty() {
            break;
        }
        tokio::select! {
            _ = shutdown.cancelled(), if instance.drain_until.is_none() => instance.begin_drain().await,
            _ = tokio::time::sleep_until(instance.drain_until.unwrap_or_else(tokio::time::Instant::now)), if instance.drain_until.is_some() => {
                instance.drain_timed_out()
            }
            Some(done) = instance.tasks.join_next(), if !instance.tasks.is_empty() => {
                if let Ok(attempt_id) = done {
                    instance.running.remove(&attempt_id);
                }
            }
            message = consumer.recv() => match message {
                Ok(message) => instance.on_message(&message),
                Err(error) => warn!(parent: &instance.span, %error, "work partition read failed"),
            },
        }
    }
    instance.stop().await;
    Ok(())
}

/// One runner instance: its identity, presence, running attempts, and what
/// each record on its partition does to them.
struct Instance<E: Executor> {
    instance_id: String,
    span: tracing::Span,
    config: RunnerConfig,
    executor: Arc<E>,
    producer: FutureProducer,
    codec: crate::codec::Codec,
    presence: Presence,
    presence_stop: CancellationToken,
    presence_task: Option<tokio::task::JoinHandle<()>>,
    reporter: Reporter,
    running: HashMap<Uuid, Running>,
    started_leases: StartedLeases,
    tasks: tokio::task::JoinSet<Uuid>,
    /// Cancelled when the drain timed out: whatever still runs stops.
    stop_all: CancellationToken,
    drain_until: Option<tokio::time::Instant>,
}

/// The longest a presence record's delivery is waited for.
const PRESENCE_DELIVERY: Duration = Duration::from_secs(3);

/// The health condition (`/readyz`) of this process's `runner_type` runner:
/// set here while it runs, and by `serve` when it leaves the runner out.
pub fn condition(runner_type: crate::contract::RunnerType) -> String {
    format!("{} runner", runner_type.as_str())
}

impl<E: Executor> Instance<E> {
    /// A fresh instance id; its partition assigned at the high watermark
    /// BEFORE presence is announced, so nothing addressed to it is missed.
    async fn start(
        kafka: KafkaConfig,
        config: RunnerConfig,
        executor: Arc<E>,
        shutdown: &CancellationToken,
    ) -> Result<Option<(Self, StreamConsumer)>, KafkaError> {
        let runner_type = executor.runner_type();
        let instance_id = format!("{}-{}", runner_type.as_str(), Uuid::new_v4().simple());
        let topic = kafka.topic(&topics::work(runner_type));
        let consumer: StreamConsumer = kafka.assigned_consumer()?;
        let condition = condition(runner_type);
        health::not_ready(&condition, "finding its work partition");
        // A broker that is down is waited for: the instance starts reading
        // once it answers, or ends with the shutdown.
        let Some((partition, high)) =
            crate::kafka::until_ok("the work partition", shutdown, || {
                let partition = work_partition(&instance_id, partition_count(&consumer, &topic)?);
                let (_, high) =
                    consumer.fetch_watermarks(&topic, partition, Duration::from_secs(10))?;
                Ok((partition, high))
            })
            .await
        else {
            return Ok(None);
        };
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&topic, partition, Offset::Offset(high))?;
        consumer.assign(&assignment)?;
        let producer: FutureProducer = kafka.producer()?;
        let span = info_span!("runner", runner_instance = %instance_id);
        info!(parent: &span, %topic, partition, offset = high, "reading work partition");
        let presence = Presence {
            kafka: kafka.clone(),
            producer: producer.clone(),
            instance_id: instance_id.clone(),
            runner_type: runner_type.as_str().to_owned(),
            capabilities: executor.capabilities(),
            operations: executor
                .operations()
                .iter()
                .map(|operation| operation.as_str().to_owned())
                .collect(),
            config: config.clone(),
            partition,
            started_at: chrono::Utc::now().timestamp_millis(),
            in_flight: Arc::new(AtomicU32::new(0)),
        };
        presence.send(PresenceStatus::Ready).await;
        health::ready(&condition);
        let presence_stop = CancellationToken::new();
        let presence_task = Some(presence.clone().keep_announcing(presence_stop.clone()));
        let instance = Self {
            reporter: Reporter::new(kafka.clone(), producer.clone(), instance_id.clone()),
            codec: kafka.codec.clone(),
            instance_id,
            span,
            config,
            executor,
            producer,
            presence,
            presence_stop,
            presence_task,
            running: HashMap::new(),
            started_leases: StartedLeases::default(),
            tasks: tokio::task::JoinSet::new(),
            stop_all: CancellationToken::new(),
            drain_until: None,
        };
        Ok(Some((instance, consumer)))
    }

    /// Shutdown asked: announce `draining`, take no new work, let running
    /// attempts finish until the drain timeout.
    async fn begin_drain(&mut self) {
        info!(parent: &self.span, running = self.tasks.len(), "draining");
        health::not_ready(&condition(self.executor.runner_type()), "draining");
        self.drain_until = Some(tokio::time::Instant::now() + self.config.drain_timeout);
        self.stop_announcing().await;
        self.presence.send(PresenceStatus::Draining).await;
    }

    /// Out of patience: stop what still runs; it reports a retryable
    /// infrastructure failure.
    fn drain_timed_out(&mut self) {
        self.stop_all.cancel();
        self.drain_until = Some(tokio::time::Instant::now() + self.config.stop_grace * 4);
    }

    async fn stop_announcing(&mut self) {
        self.presence_stop.cancel();
        if let Some(task) = self.presence_task.take() {
            let _ = task.await;
        }
    }

    async fn stop(mut self) {
        self.stop_announcing().await;
        self.presence.send(PresenceStatus::Stopped).await;
        producer_flush(&self.producer);
        info!(parent: &self.span, "stopped");
    }

    /// One record of the partition: ours or another instance's, and what
    /// it asks.
    fn on_message(&mut self, message: &rdkafka::message::BorrowedMessage<'_>) {
        let Some(payload) = message.payload() else {
            return;
        };
        let record: WorkRecord = match self.codec.decode_record(payload) {
            Ok(record) => record,
            Err(error) => {
                warn!(parent: &self.span, %error, offset = message.offset(), "undecodable work record skipped");
                return;
            }
        };
        // Records for other instances sharing the partition are not ours.
        if record.runner_instance != self.instance_id {
            return;
        }
        let Ok(attempt_id) = Uuid::parse_str(&record.attempt_id) else {
            return;
        };
        let epoch = u64::try_from(record.lease_epoch).unwrap_or(0);
        match record.kind {
            WorkType::WorkItem => self.start_work(attempt_id, epoch, &record),
            WorkType::LeaseExtended => {
                if let Some(expires_at) = record.expires_at {
                    self.started_leases.extend(attempt_id, epoch, expires_at);
                    if let Some(running) = self.running.get(&attempt_id) {
                        if running.epoch == epoch {
                            let _ = running.lease.send(expires_at);
                        }
                    }
                }
            }
            WorkType::Cancel => self.stop_attempt(
                attempt_id,
                Stop::Cancel(record.reason.clone().unwrap_or_default()),
            ),
            WorkType::LeaseRevoked => self.stop_attempt(attempt_id, Stop::Revoked),
        }
    }

    fn stop_attempt(&self, attempt_id: Uuid, stop: Stop) {
        if let Some(running) = self.running.get(&attempt_id) {
            let _ = running.stop.send(stop);
        }
    }

    /// A work item: started at most once per lease, never while draining.
    fn start_work(&mut self, attempt_id: Uuid, epoch: u64, record: &WorkRecord) {
        if self.drain_until.is_some() {
            // Not started, not reported: the dispatcher's timers give it
            // to a live instance.
            warn!(parent: &self.span, %attempt_id, "draining: work item left for another instance");
            return;
        }
        let Some(spec) = record.spec.as_ref().and_then(|spec| spec.to_spec().ok()) else {
            warn!(parent: &self.span, %attempt_id, "work item without a readable spec skipped");
            return;
        };
        let expires_at = record.expires_at.unwrap_or(0);
        let now = chrono::Utc::now().timestamp_millis();
        match self
            .started_leases
            .admit(attempt_id, epoch, expires_at, now)
        {
            Admission::Start => {}
            Admission::AlreadyStarted => {
                info!(parent: &self.span, %attempt_id, lease_epoch = epoch, "work item delivered again; this lease was already started here and is not started twice");
                crate::telemetry::metrics::runner_duplicate_work();
                return;
            }
            Admission::Expired => {
                warn!(parent: &self.span, %attempt_id, lease_epoch = epoch, "work item whose lease already expired; not started");
                return;
            }
        }
        let (lease_tx, lease_rx) = watch::channel(expires_at);
        let (stop_tx, stop_rx) = mpsc::unbounded_channel();
        self.running.insert(
            attempt_id,
            Running {
                lease: lease_tx,
                stop: stop_tx,
                epoch,
            },
        );
        let assignment = Assignment {
            attempt_id,
            job_id: record.job_id.clone(),
            attempt_no: u32::try_from(record.attempt_no).unwrap_or(0),
            lease_epoch: epoch,
            spec,
        };
        let settings = AttemptSettings {
            stop_grace: self.config.stop_grace,
            tools: self.config.tools.clone(),
            storage: self.config.storage.clone(),
            secrets: self.config.secrets.clone(),
            policy: self.config.policy.clone(),
        };
        let (executor, reporter, stop_all) = (
            self.executor.clone(),
            self.reporter.clone(),
            self.stop_all.clone(),
        );
        let in_flight = self.presence.in_flight.clone();
        let attempt_span =
            info_span!(parent: &self.span, "attempt", %attempt_id, lease_epoch = epoch);
        crate::telemetry::metrics::runner_in_flight(in_flight.fetch_add(1, Ordering::SeqCst) + 1);
        self.tasks.spawn(
            async move {
                let signals = Signals {
                    lease: lease_rx,
                    stops: stop_rx,
                    stop_all,
                };
                run_attempt(executor, reporter, assignment, signals, settings).await;
                crate::telemetry::metrics::runner_in_flight(
                    in_flight.fetch_sub(1, Ordering::SeqCst).saturating_sub(1),
                );
                attempt_id
            }
            .instrument(attempt_span),
        );
    }
}

fn producer_flush(producer: &FutureProducer) {
    use rdkafka::producer::Producer;
    let _ = producer.flush(Duration::from_secs(5));
}

#[derive(Clone)]
struct Presence {
    kafka: KafkaConfig,
    producer: FutureProducer,
    instance_id: String,
    runner_type: String,
    capabilities: Vec<String>,
    operations: Vec<String>,
    config: RunnerConfig,
    partition: i32,
    started_at: i64,
    in_flight: Arc<AtomicU32>,
}

impl Presence {
    /// Announces `ready` every presence interval until `stop`.
    fn keep_announcing(self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(self.config.presence_interval);
            // A send to a broker that is away takes up to PRESENCE_DELIVERY:
            // the ticks missed meanwhile are not made up in a burst.
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // Stop first: with a tick ready too, an unbiased choice kept
                // announcing, one undelivered send after another, past a
                // SIGTERM (`tests/broker.rs`, roles started with the broker
                // down).
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    _ = ticker.tick() => self.send(PresenceStatus::Ready).await,
                }
            }
        })
    }

    async fn send(&self, status: PresenceStatus) {
        let record = PresenceRecord::new(
            &crate::codec::Presence {
                runner_instance: &self.instance_id,
                runner_type: &self.runner_type,
                version: env!("CARGO_PKG_VERSION").to_owned(),
                pool: &self.config.pool,
                capabilities: &self.capabilities,
                operations: &self.operations,
                capacity: self.config.capacity,
                in_flight: self.in_flight.load(Ordering::SeqCst),
                work_partition: self.partition,
                started_at: self.started_at,
                isolation: self.config.tools.sandbox.isolation(),
            },
            status,
            chrono::Utc::now().timestamp_millis(),
        );
        let Ok(payload) = self.kafka.codec.encode(Family::Presence, &record) else {
            return;
        };
        let topic = self.kafka.topic(topics::RUNNER_PRESENCE);
        let id = Uuid::new_v4().to_string();
        let record = FutureRecord::to(&topic)
            .key(&self.instance_id)
            .payload(&payload)
            .headers(crate::kafka::cloudevent_headers(
                &id,
                "io.execplane.runner.presence",
                "execplane/runner",
                None,
            ));
        // Presence is soft state, and a broker that is away must not hold
        // a drain or a stop: the delivery is waited for a few seconds at
        // most (librdkafka keeps trying in the background).
        match tokio::time::timeout(
            PRESENCE_DELIVERY,
            self.producer.send(record, Duration::from_secs(5)),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err((error, _))) => {
                warn!(runner_instance = %self.instance_id, %error, "presence not delivered");
            }
            Err(_) => {
                warn!(runner_instance = %self.instance_id, "presence not delivered within {PRESENCE_DELIVERY:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_started_once_however_often_its_record_arrives() {
        let mut started = StartedLeases::default();
        let attempt = Uuid::new_v4();
        assert_eq!(started.admit(attempt, 1, 10_000, 1_000), Admission::Start);
        // The attempt finished; the relay re-publishes its work record.
        assert_eq!(
            started.admit(attempt, 1, 10_000, 9_000),
            Admission::AlreadyStarted
        );
        // Remembered past the expiry an extension carried...
        started.extend(attempt, 1, 100_000);
        assert_eq!(
            started.admit(attempt, 1, 10_000, 150_000),
            Admission::AlreadyStarted
        );
        // ...and once forgotten, the stale record's expiry refuses it.
        assert_eq!(
            started.admit(attempt, 1, 10_000, 200_000),
            Admission::Expired
        );
        // Another attempt (or epoch) is its own lease.
        assert_eq!(
            started.admit(Uuid::new_v4(), 2, 300_000, 200_000),
            Admission::Start
        );
        assert_eq!(
            started.admit(attempt, 2, 300_000, 200_000),
            Admission::Start
        );
    }

    #[test]
    fn what_is_remembered_is_forgotten_once_its_lease_cannot_be_valid() {
        let mut started = StartedLeases::default();
        let extended = Uuid::new_v4();
        started.admit(extended, 1, 10_000, 0);
        started.extend(extended, 1, 500_000);
        for index in 0..1_000 {
            started.admit(Uuid::new_v4(), 1, 10_000 + index, 0);
        }
        // Long after those leases, one start forgets all but the extended.
        started.admit(Uuid::new_v4(), 1, 400_000, 300_000);
        assert_eq!(started.started.len(), 2);
        assert_eq!(
            started.admit(extended, 1, 500_000, 300_000),
            Admission::AlreadyStarted
        );
        started.admit(Uuid::new_v4(), 1, 700_000, 600_000);
        assert_eq!(started.started.len(), 1);
        assert_eq!(started.expiries.len(), 1);
    }
}
