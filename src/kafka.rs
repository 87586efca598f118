//! Kafka: client settings, the shared work-partition
//! function, CloudEvents headers, topology and the outbox relay.

pub mod relay;
pub mod topology;

use std::time::Duration;

use futures_util::FutureExt;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;

/// How to reach the broker and name topics.
#[derive(Clone, Debug)]
pub struct KafkaConfig {
    pub brokers: String,
    /// Prefixes every topic name (`EXECPLANE_TOPIC_PREFIX`).
    pub topic_prefix: String,
    /// `fetch.wait.max.ms`: how long an idle fetch waits on the broker.
    pub fetch_wait_ms: u32,
    /// How records are framed and read (`EXECPLANE_AVRO_FRAMING` and the
    /// registry ids): built once from the configuration.
    pub codec: crate::codec::Codec,
    /// librdkafka properties of the operator's (security, pass-through),
    /// set on every client after execplane's own; values never shown.
    pub properties: Vec<(String, crate::secrets::Secret)>,
    /// `EXECPLANE_TOPIC_REPLICATION_FACTOR`: topics are created with this
    /// many replicas instead of the topology's.
    pub replication_factor: Option<i32>,
}

#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("kafka: {0}")]
    Client(#[from] rdkafka::error::KafkaError),
    #[error("topic {0} does not exist or has no partitions (run `execplane topology apply`)")]
    NoPartitions(String),
    #[error("topology: {0}")]
    Topology(String),
    #[error("the broker refused this client: {0} (check EXECPLANE_KAFKA_SECURITY_PROTOCOL, EXECPLANE_KAFKA_SASL_* and EXECPLANE_KAFKA_SSL_*)")]
    Refused(String),
}

/// How long dropping a [`GroupConsumer`] waits for its close.
const CLOSE_BOUND: Duration = Duration::from_secs(5);

/// A group member whose close is bounded. librdkafka's close leaves the
/// group, and with the group coordinator away it waits for the session
/// timeout or longer (rust-rdkafka#509): a process stopping while its
/// broker is down must not. Dropped, it closes on a thread of its own,
/// waited for at most [`CLOSE_BOUND`]; past that the close goes on in the
/// background and the broker ends the membership when its session lapses.
/// The close commits the offsets stored since the last periodic commit (a
/// second's worth at most); a close cut short leaves them to redelivery,
/// which every consumer here makes a no-op.
pub struct GroupConsumer(Option<StreamConsumer>);

impl std::ops::Deref for GroupConsumer {
    type Target = StreamConsumer;

    fn deref(&self) -> &StreamConsumer {
        self.0
            .as_ref()
            .expect("a group consumer is only taken by its drop")
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        let Some(consumer) = self.0.take() else {
            return;
        };
        let (closed, waiter) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("kafka-close".into())
            .spawn(move || {
                drop(consumer);
                let _ = closed.send(());
            });
        if spawned.is_ok() && waiter.recv_timeout(CLOSE_BOUND).is_err() {
            tracing::warn!(
                bound = ?CLOSE_BOUND,
                "the group consumer did not close in time; left to close in the background"
            );
        }
    }
}

impl KafkaConfig {
    /// The full name of a topic.
    pub fn topic(&self, name: &str) -> String {
        format!("{}{name}", self.topic_prefix)
    }

    fn base(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("broker.address.family", "v4")
            .set("socket.keepalive.enable", "true")
            .set("topic.metadata.refresh.interval.ms", "10000")
            .set("reconnect.backoff.ms", "50")
            .set("reconnect.backoff.max.ms", "1000")
            .set("log_level", "3");
        for (name, value) in &self.properties {
            config.set(name, value.expose());
        }
        config
    }

    /// An idempotent producer: per-partition order survives retries.
    pub fn producer(&self) -> Result<FutureProducer, KafkaError> {
        Ok(self
            .base()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "1")
            .set("batch.num.messages", "10000")
            .set("message.timeout.ms", "30000")
            .set("queue.buffering.max.messages", "1000000")
            .create()?)
    }

    /// The relay's producer: idempotent, and a record not delivered within
    /// `message_timeout` fails instead of going out late (the relay's
    /// takeover rule counts on it).
    pub fn relay_producer(&self, message_timeout: Duration) -> Result<FutureProducer, KafkaError> {
        let millis = message_timeout.as_millis().max(100).to_string();
        Ok(self
            .base()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "1")
            .set("batch.num.messages", "10000")
            .set("message.timeout.ms", &millis)
            .set("request.timeout.ms", &millis)
            .set("queue.buffering.max.messages", "1000000")
            .create()?)
    }

    /// A consumer in `group`, cooperative-sticky. Offsets are stored by
    /// hand once what they cover is done with ([`store_offsets_past`]),
    /// and librdkafka commits what is stored every second, before a
    /// partition is revoked, and on close: a commit request per batch was
    /// the group coordinator's largest load at low rates, and a crash
    /// redelivers at most a second more of records, which the inbox and
    /// the attempts' state make no-ops.
    pub fn group_consumer(&self, group: &str) -> Result<GroupConsumer, KafkaError> {
        Ok(GroupConsumer(Some(
            self.base()
                .set("group.id", group)
                .set("enable.auto.commit", "true")
                .set("auto.commit.interval.ms", "1000")
                .set("enable.auto.offset.store", "false")
                .set("auto.offset.reset", "earliest")
                .set("partition.assignment.strategy", "cooperative-sticky")
                .set("session.timeout.ms", "6000")
                .set("heartbeat.interval.ms", "1000")
                .set("fetch.wait.max.ms", self.fetch_wait_ms.to_string())
                .set("fetch.min.bytes", "1")
                .create()?,
        )))
    }

    /// A consumer of `group` that never subscribes, assigns or commits: it
    /// reads the group's committed offsets and the partitions' ends (the
    /// caught-up gate's watcher) without joining the group.
    pub fn group_reader(&self, group: &str) -> Result<StreamConsumer, KafkaError> {
        Ok(self
            .base()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .create()?)
    }

    /// A consumer that only ever uses manual assignment: no group is joined
    /// and nothing is committed.
    pub fn assigned_consumer(&self) -> Result<StreamConsumer, KafkaError> {
        Ok(self
            .base()
            .set("group.id", "execplane-unjoined")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "latest")
            .set("fetch.wait.max.ms", self.fetch_wait_ms.to_string())
            .set("fetch.min.bytes", "1")
            .create()?)
    }

    /// A consumer of every partition of `topic` from its current end, with
    /// no group: it reads what is published from now on.
    pub fn consumer_from_the_end(&self, topic: &str) -> Result<StreamConsumer, KafkaError> {
        let consumer: StreamConsumer = self.assigned_consumer()?;
        consumer.assign(&at_the_end(&consumer, topic)?)?;
        Ok(consumer)
    }

    pub fn admin(&self) -> Result<AdminClient<DefaultClientContext>, KafkaError> {
        Ok(self.base().create()?)
    }
}

/// The health condition (`/readyz`) the brokers' answers set.
pub const BROKERS_CONDITION: &str = "kafka";

/// How often, once reached, the brokers are asked again for `/readyz`.
const WATCH_INTERVAL: Duration = Duration::from_secs(5);

/// One metadata request of `client`, off the runtime's threads, with its
/// queue served so librdkafka's errors reach the client's context.
/// Only `topic`'s metadata is asked for: a production cluster's whole
/// metadata is large.
async fn ask(
    client: &std::sync::Arc<rdkafka::consumer::BaseConsumer<RefusalWatch>>,
    topic: &str,
    timeout: Duration,
) -> Result<(), String> {
    let (probe, topic) = (client.clone(), topic.to_owned());
    let answer = tokio::task::spawn_blocking(move || {
        let answer = probe.fetch_metadata(Some(&topic), timeout);
        let _ = rdkafka::consumer::BaseConsumer::poll(&probe, Duration::ZERO);
        answer
    })
    .await;
    match answer {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(join) => Err(join.to_string()),
    }
}

/// Every broker of the cluster as its metadata advertises it (host,
/// port): the bootstrap list may name only some. Asked with the metadata
/// of one topic (`topic`, unprefixed), which lists every broker all the
/// same: a production cluster's whole metadata is large.
pub async fn cluster_brokers(
    kafka: &KafkaConfig,
    topic: &str,
) -> Result<Vec<(String, u16)>, KafkaError> {
    let consumer = kafka.assigned_consumer()?;
    let topic = kafka.topic(topic);
    tokio::task::spawn_blocking(move || {
        let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
        Ok(metadata
            .brokers()
            .iter()
            .filter_map(|broker| {
                Some((broker.host().to_owned(), u16::try_from(broker.port()).ok()?))
            })
            .collect())
    })
    .await
    .map_err(|error| KafkaError::Topology(error.to_string()))?
}

/// Waits until the brokers answer this client (a metadata request),
/// backing off from 100 ms to 5 s: `Ok(false)` when `shutdown` fires first.
/// A broker that refuses the client (its credentials, its TLS) is an
/// error at once, with librdkafka's reason: waiting would not mend it.
/// Meanwhile, and afterwards until `shutdown` (the brokers asked again
/// every few seconds), `/readyz` says whether they answer.
pub async fn reach(
    kafka: &KafkaConfig,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<bool, KafkaError> {
    use crate::telemetry::health;
    let watch = RefusalWatch::default();
    let client: std::sync::Arc<rdkafka::consumer::BaseConsumer<RefusalWatch>> =
        std::sync::Arc::new(kafka.base().create_with_context(watch.clone())?);
    health::not_ready(
        BROKERS_CONDITION,
        format!("connecting to the brokers at {}", kafka.brokers),
    );
    let topic = kafka.topic(crate::contract::topics::COMMANDS);
    let mut backoff = Duration::from_millis(100);
    loop {
        let answer = tokio::select! {
            _ = shutdown.cancelled() => return Ok(false),
            answer = ask(&client, &topic, Duration::from_secs(5)) => answer,
        };
        let error = match answer {
            Ok(()) => break,
            Err(error) => error,
        };
        if let Some(reason) = watch.refusal() {
            return Err(KafkaError::Refused(reason));
        }
        health::not_ready(
            BROKERS_CONDITION,
            format!("waiting for the brokers at {}: {error}", kafka.brokers),
        );
        tracing::warn!(%error, brokers = %kafka.brokers, retry_in = ?backoff, "waiting for the broker");
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(false),
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    health::ready(BROKERS_CONDITION);
    let (brokers, shutdown) = (kafka.brokers.clone(), shutdown.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(WATCH_INTERVAL) => {}
            }
            // Short: a probe in flight holds the process's exit that long.
            match ask(&client, &topic, Duration::from_secs(2)).await {
                Ok(()) => health::ready(BROKERS_CONDITION),
                Err(error) => health::not_ready(
                    BROKERS_CONDITION,
                    format!("the brokers at {brokers} do not answer: {error}"),
                ),
            }
        }
    });
    Ok(true)
}

/// A client context that remembers the broker's refusal (authentication,
/// TLS) among librdkafka's errors, and logs them all as the default does.
#[derive(Clone, Default)]
struct RefusalWatch(std::sync::Arc<std::sync::Mutex<Option<String>>>);

impl RefusalWatch {
    fn refusal(&self) -> Option<String> {
        self.0.lock().ok().and_then(|refusal| refusal.clone())
    }
}

impl RefusalWatch {
    fn refused(&self, reason: String) {
        if let Ok(mut refusal) = self.0.lock() {
            refusal.get_or_insert(reason);
        }
    }
}

impl rdkafka::ClientContext for RefusalWatch {
    /// As the default context logs, and a connection's failure that says
    /// the broker refused the client counts at once (the error event for
    /// it comes only after librdkafka's retries).
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel;
        const REFUSALS: [&str; 3] = [
            "SASL authentication error",
            "SSL handshake failed",
            "certificate verify failed",
        ];
        if REFUSALS.iter().any(|refusal| message.contains(refusal)) {
            self.refused(message.to_owned());
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {facility} {message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", "librdkafka: {facility} {message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "librdkafka: {facility} {message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", "librdkafka: {facility} {message}")
            }
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        use rdkafka::types::RDKafkaErrorCode;
        let refused = matches!(
            error.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::Authentication
                    | RDKafkaErrorCode::SSL
                    | RDKafkaErrorCode::SaslAuthenticationFailed
            )
        );
        if refused {
            self.refused(format!("{error}: {reason}"));
        }
        tracing::error!(target: "librdkafka", "librdkafka: {error}: {reason}");
    }
}

impl rdkafka::consumer::ConsumerContext for RefusalWatch {}

/// Runs `attempt` (a broker call) until it succeeds, backing off from
/// 100 ms to 5 s and saying each time what it waits for; `None` once
/// `shutdown` fires first. A broker that is down, or a topic whose leader
/// is not elected yet (just created, or its broker lost), is waited for:
/// a role never exits on it by itself.
pub async fn until_ok<T>(
    what: &str,
    shutdown: &tokio_util::sync::CancellationToken,
    mut attempt: impl FnMut() -> Result<T, KafkaError>,
) -> Option<T> {
    let mut backoff = Duration::from_millis(100);
    loop {
        match attempt() {
            Ok(value) => return Some(value),
            Err(error) => {
                tracing::warn!(%error, retry_in = ?backoff, "waiting for the broker: {what}");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Every partition of `topic` at its high watermark: what a consumer that
/// reads only what is published from now on is assigned.
pub fn at_the_end<C: Consumer>(
    consumer: &C,
    topic: &str,
) -> Result<rdkafka::TopicPartitionList, KafkaError> {
    let mut assignment = rdkafka::TopicPartitionList::new();
    for partition in 0..partition_count(consumer, topic)? {
        let (_, high) = watermarks(consumer, topic, partition)?;
        assignment.add_partition_offset(topic, partition, rdkafka::Offset::Offset(high))?;
    }
    Ok(assignment)
}

/// The first and the end offset of one partition. A partition whose leader
/// is moving (a topic just created, a broker restarting) is asked again for
/// up to ten seconds; any other refusal is returned at once.
pub fn watermarks<C: Consumer>(
    consumer: &C,
    topic: &str,
    partition: i32,
) -> Result<(i64, i64), KafkaError> {
    use rdkafka::types::RDKafkaErrorCode::{
        LeaderNotAvailable, NotLeaderForPartition, UnknownTopicOrPartition,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match consumer.fetch_watermarks(topic, partition, Duration::from_secs(10)) {
            Ok(marks) => return Ok(marks),
            Err(error)
                if matches!(
                    error.rdkafka_error_code(),
                    Some(LeaderNotAvailable | NotLeaderForPartition | UnknownTopicOrPartition)
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Whether `topic` exists with partitions and every partition has a leader.
pub fn every_partition_led<C: Consumer>(consumer: &C, topic: &str) -> bool {
    let Ok(metadata) = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) else {
        return false;
    };
    metadata
        .topics()
        .iter()
        .find(|candidate| candidate.name() == topic)
        .is_some_and(|found| {
            !found.partitions().is_empty()
                && found
                    .partitions()
                    .iter()
                    .all(|partition| partition.leader() >= 0 && partition.error().is_none())
        })
}

/// The number of partitions of `topic`, from the broker's metadata.
pub fn partition_count<C: Consumer>(consumer: &C, topic: &str) -> Result<i32, KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let count = metadata
        .topics()
        .iter()
        .find(|candidate| candidate.name() == topic)
        .map(|candidate| candidate.partitions().len())
        .unwrap_or(0);
    if count == 0 {
        return Err(KafkaError::NoPartitions(topic.to_owned()));
    }
    Ok(i32::try_from(count).unwrap_or(i32::MAX))
}

/// The partition of a runner instance on its work topic:
/// `fnv1a64(instance_id) % partitions`. The one function both the runner
/// (to read) and the relay (to address) use; never the client's partitioner.
pub fn work_partition(instance_id: &str, partitions: i32) -> i32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in instance_id.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let partitions = u64::try_from(partitions.max(1)).unwrap_or(1);
    i32::try_from(hash % partitions).unwrap_or(0)
}

/// Kafka headers, as librdkafka takes them.
pub fn owned_headers(headers: &crate::codec::Headers) -> OwnedHeaders {
    let mut owned = OwnedHeaders::new_with_capacity(headers.len());
    for (key, value) in headers.iter() {
        owned = owned.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    owned
}

/// CloudEvents headers for a record we produce directly (not via the
/// outbox), stamped now.
pub fn cloudevent_headers(
    id: &str,
    ce_type: &str,
    source: &str,
    traceparent: Option<&str>,
) -> OwnedHeaders {
    let event = crate::codec::CloudEvent {
        id,
        ce_type,
        source,
        time: chrono::Utc::now().timestamp_millis(),
        subject: None,
        traceparent,
        tracestate: None,
    };
    owned_headers(&event.headers())
}

/// A batch from `consumer`: waits up to `first` for one record, then takes
/// what arrives within `window` of it, at most `max`. `Ok` and empty means
/// nothing arrived in time, which does not mean nothing is left to read
/// (see [`CaughtUpGate`]); a consume error is an error, never an empty
/// batch.
pub async fn collect_batch(
    consumer: &StreamConsumer,
    first: Duration,
    window: Duration,
    max: usize,
) -> Result<Vec<rdkafka::message::OwnedMessage>, KafkaError> {
    collect_prioritized(&[consumer], first, window, max).await
}

/// As [`collect_batch`] over several consumers, in order of priority: the
/// records a consumer has at hand are taken before a later one's, up to
/// three quarters of `max` while a later one has records waiting (so a
/// flood on one topic never starves the others), then up to `max`. Records
/// of one partition keep their order. Intake reads runner events before
/// commands this way: a backlog of commands never holds back the reports
/// that free runner slots (docs/ARCHITECTURE.md, "Intake").
pub async fn collect_prioritized(
    consumers: &[&StreamConsumer],
    first: Duration,
    window: Duration,
    max: usize,
) -> Result<Vec<rdkafka::message::OwnedMessage>, KafkaError> {
    let mut batch = Vec::new();
    let Some(last) = consumers.len().checked_sub(1) else {
        return Ok(batch);
    };
    let mut taken = vec![0usize; consumers.len()];
    match tokio::time::timeout(first, next_of(consumers)).await {
        Ok(Ok((index, message))) => {
            taken[index] += 1;
            batch.push(message);
        }
        Ok(Err(error)) => return Err(error),
        Err(_) => return Ok(batch),
    }
    let deadline = tokio::time::Instant::now() + window;
    let share = max - max / 4;
    while batch.len() < max {
        let within_share = (0..=last).filter(|&index| index == last || taken[index] < share);
        let ready = within_share
            .chain(0..=last)
            .find_map(|index| Some((index, at_hand(consumers[index])?)));
        let next = match ready {
            Some(ready) => ready,
            None => match tokio::time::timeout_at(deadline, next_of(consumers)).await {
                Ok(Ok(received)) => received,
                _ => break,
            },
        };
        taken[next.0] += 1;
        batch.push(next.1);
    }
    Ok(batch)
}

/// A record `consumer` has at hand, without waiting. (Not a zero timeout:
/// tokio's timers tick in milliseconds, so every miss would wait one.)
fn at_hand(consumer: &StreamConsumer) -> Option<rdkafka::message::OwnedMessage> {
    match consumer.recv().now_or_never() {
        Some(Ok(message)) => Some(message.detach()),
        _ => None,
    }
}

/// The next record of any of `consumers` (and whose it is), the first at
/// hand in their order.
async fn next_of(
    consumers: &[&StreamConsumer],
) -> Result<(usize, rdkafka::message::OwnedMessage), KafkaError> {
    let waits = consumers.iter().map(|consumer| Box::pin(consumer.recv()));
    let (received, index, _) = futures_util::future::select_all(waits).await;
    Ok((index, received?.detach()))
}

/// Stores the offset after the last record of every partition in `batch`,
/// for the group consumer to commit (see [`KafkaConfig::group_consumer`]).
/// Nothing stored, or stored and not yet committed at a crash, only means
/// redelivery, which every consumer here makes a no-op.
pub fn store_offsets_past(consumer: &StreamConsumer, batch: &[rdkafka::message::OwnedMessage]) {
    use rdkafka::{Message, Offset, TopicPartitionList};
    if batch.is_empty() {
        // An empty list would mean "the whole assignment" to librdkafka.
        return;
    }
    let mut next: std::collections::BTreeMap<(&str, i32), i64> = Default::default();
    for message in batch {
        let entry = next
            .entry((message.topic(), message.partition()))
            .or_insert(0);
        *entry = (*entry).max(message.offset() + 1);
    }
    let mut list = TopicPartitionList::new();
    for ((topic, partition), offset) in next {
        let _ = list.add_partition_offset(topic, partition, Offset::Offset(offset));
    }
    // A partition revoked meanwhile refuses it: its new owner reads the
    // batch again, and deciding it again is a no-op.
    if let Err(error) = consumer.store_offsets(&list) {
        tracing::warn!(%error, "offsets not stored; records will be redelivered");
    }
}

/// A consumer group member whose progress gates other work (the
/// dispatcher's timers, the artifact worker's bundles): `caught_up` is the
/// instant before which everything sent to its partitions is done with.
/// Polling through it records positions; a watcher compares them with the
/// broker's high watermarks off the poll loop. The gate moves only on that
/// comparison, never because a poll came back empty: right after an
/// assignment a poll returns empty before the first fetch from the
/// committed offsets has, with records still to read.
pub struct CaughtUpGate {
    progress: Progress,
    watcher: tokio::task::JoinHandle<()>,
}

/// Per (topic, partition): the instant before which every record sent to it
/// is done with, by this process (the dispatcher shares it through
/// Postgres, so every dispatcher's timers see every partition).
pub type PartitionProgress =
    std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<(String, i32), i64>>>;

impl CaughtUpGate {
    /// The gate of consumers of `group`: a partition they have read nothing
    /// of since their assignment is done with once the group's committed
    /// offset (where they start) has reached its high watermark.
    pub fn start(
        kafka: &KafkaConfig,
        group: &str,
        caught_up: std::sync::Arc<std::sync::atomic::AtomicI64>,
        partitions: PartitionProgress,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Self {
        let progress = Progress::default();
        let watcher = tokio::spawn(watch_caught_up(
            kafka.clone(),
            group.to_owned(),
            progress.clone(),
            caught_up,
            partitions,
            shutdown,
        ));
        Self { progress, watcher }
    }

    /// One batch (see [`collect_prioritized`]: `consumers` in order of
    /// priority). The positions before the poll are the ones the caller is
    /// done with (it handles a batch before polling again).
    pub async fn poll(
        &self,
        consumers: &[&StreamConsumer],
        first: Duration,
        window: Duration,
        max: usize,
    ) -> Result<Vec<rdkafka::message::OwnedMessage>, KafkaError> {
        record_progress(
            consumers,
            chrono::Utc::now().timestamp_millis(),
            &self.progress,
        );
        collect_prioritized(consumers, first, window, max).await
    }
}

impl Drop for CaughtUpGate {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// A consumer's positions (topic, partition, next offset) as of an instant:
/// what it had finished with when it polled again.
#[derive(Clone, Debug, Default)]
struct Progress(std::sync::Arc<std::sync::Mutex<Option<Positions>>>);

/// (instant in ms, [(topic, partition, next offset)]).
type Positions = (i64, Vec<(String, i32, i64)>);

/// Records the consumers' positions as of `polled_at` (call it just before
/// a poll, after the previous batch is done with).
fn record_progress(consumers: &[&StreamConsumer], polled_at: i64, progress: &Progress) {
    use rdkafka::Offset;
    let mut snapshot = Vec::new();
    for consumer in consumers {
        let Ok(positions) = consumer.position() else {
            return;
        };
        snapshot.extend(positions.elements().iter().map(|element| {
            let offset = match element.offset() {
                Offset::Offset(offset) => offset,
                _ => -1,
            };
            (element.topic().to_owned(), element.partition(), offset)
        }));
    }
    *progress
        .0
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((polled_at, snapshot));
}

/// Every 200 ms while the positions move (about once a second while they
/// do not): if every position recorded at instant `t` has reached the
/// broker's high watermark (fetched after `t`), everything sent before `t`
/// is done with, and `caught_up` moves to `t`; this holds under a steady
/// stream too, where no poll ever comes back empty. A partition the member
/// has read nothing of since its assignment has no position: it starts at
/// the group's committed offset (the earliest offset when there is none or
/// it is gone), and is done with once that start has reached the high
/// watermark. Each look also reports the consumer lag (records not yet
/// read) by topic.
async fn watch_caught_up(
    kafka: KafkaConfig,
    group: String,
    progress: Progress,
    caught_up: std::sync::Arc<std::sync::atomic::AtomicI64>,
    partitions: PartitionProgress,
    shutdown: tokio_util::sync::CancellationToken,
) {
    use std::sync::atomic::Ordering;
    let Ok(client) = kafka.group_reader(&group) else {
        return;
    };
    let client = std::sync::Arc::new(client);
    // The starts of partitions without a position, as last asked. A start
    // only moves forward, so one that had reached the high watermark still
    // has: it is asked again only when records arrive after it.
    let mut starts = Starts::default();
    let mut checked: Option<Vec<(String, i32, i64)>> = None;
    let mut tick = 0u64;
    while !shutdown.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        tick += 1;
        let snapshot = progress
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let Some((at, positions)) = snapshot else {
            continue;
        };
        // Positions that have not moved since the last look can only have
        // fallen behind: at rest (or stuck) they are looked at once a second.
        let moved = checked.as_ref() != Some(&positions);
        if positions.is_empty() || (!moved && !tick.is_multiple_of(5)) {
            continue;
        }
        checked = Some(positions.clone());
        let client = client.clone();
        let mut known = std::mem::take(&mut starts);
        let Ok((decided, lag, done, asked)) = tokio::task::spawn_blocking(move || {
            let highs = ends(&client, positions.iter(), rdkafka::Offset::End);
            known.refresh(&client, &positions, &highs);
            let mut decided = true;
            let mut lag: std::collections::BTreeMap<String, i64> = Default::default();
            let mut done = Vec::new();
            for (topic, partition, position) in &positions {
                let key = (topic.clone(), *partition);
                let start = if *position >= 0 {
                    Some(*position)
                } else {
                    known.0.get(&key).copied()
                };
                let (Some(&high), Some(start)) = (highs.get(&key), start) else {
                    decided = false;
                    continue;
                };
                decided &= start >= high;
                if start >= high {
                    done.push(key);
                }
                *lag.entry(topic.clone()).or_default() += (high - start).max(0);
            }
            (decided, lag, done, known)
        })
        .await
        else {
            continue;
        };
        starts = asked;
        for (topic, records) in &lag {
            crate::telemetry::metrics::consumer_lag(topic, *records);
        }
        {
            let mut by_partition = partitions
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            for key in done {
                let entry = by_partition.entry(key).or_insert(at);
                *entry = (*entry).max(at);
            }
        }
        if decided {
            caught_up.fetch_max(at, Ordering::SeqCst);
        }
    }
}

/// Where a group member starts on each partition it has no position on.
#[derive(Default)]
struct Starts(std::collections::HashMap<(String, i32), i64>);

impl Starts {
    /// Keeps only the partitions without a position in `positions`, and
    /// asks for those whose start is unknown or behind its high watermark
    /// in `highs`: the group's committed offsets and the partitions' low
    /// watermarks, one request each. A partition the broker did not answer
    /// for is left unknown (and holds the gate).
    fn refresh(
        &mut self,
        client: &StreamConsumer,
        positions: &[(String, i32, i64)],
        highs: &std::collections::HashMap<(String, i32), i64>,
    ) {
        let unread: Vec<&(String, i32, i64)> = positions
            .iter()
            .filter(|(_, _, position)| *position < 0)
            .collect();
        self.0.retain(|(topic, partition), _| {
            unread.iter().any(|(t, p, _)| t == topic && p == partition)
        });
        let ask: Vec<&(String, i32, i64)> = unread
            .into_iter()
            .filter(|(topic, partition, _)| {
                let key = (topic.clone(), *partition);
                match (self.0.get(&key), highs.get(&key)) {
                    (Some(start), Some(high)) => start < high,
                    _ => true,
                }
            })
            .collect();
        if ask.is_empty() {
            return;
        }
        let lows = ends(client, ask.iter().copied(), rdkafka::Offset::Beginning);
        let committed = committed(client, ask.iter().copied());
        for (topic, partition, _) in ask {
            let key = (topic.clone(), *partition);
            match (lows.get(&key), committed.as_ref()) {
                (Some(&low), Some(committed)) => {
                    let start = committed.get(&key).map_or(low, |offset| (*offset).max(low));
                    self.0.insert(key, start);
                }
                _ => {
                    self.0.remove(&key);
                }
            }
        }
    }
}

/// The group's committed offsets of the partitions named, in one request
/// (`client` belongs to the group without joining it); a partition with
/// nothing committed is left out. `None` when the broker did not answer.
fn committed<'a>(
    client: &StreamConsumer,
    partitions: impl Iterator<Item = &'a (String, i32, i64)>,
) -> Option<std::collections::HashMap<(String, i32), i64>> {
    let mut list = rdkafka::TopicPartitionList::new();
    for (topic, partition, _) in partitions {
        list.add_partition(topic, *partition);
    }
    let answered = client
        .committed_offsets(list, Duration::from_secs(2))
        .ok()?;
    let mut offsets = std::collections::HashMap::new();
    for element in answered.elements() {
        if element.error().is_err() {
            return None;
        }
        if let rdkafka::Offset::Offset(offset) = element.offset() {
            offsets.insert((element.topic().to_owned(), element.partition()), offset);
        }
    }
    Some(offsets)
}

/// One end (`Offset::End`: the high watermark; `Offset::Beginning`: the
/// low) of every partition named, in one request per broker rather than
/// one per partition: the watcher asks every 200 ms while a consumer is
/// busy, and on an idle pipeline these requests were most of what the
/// broker did. A partition the broker did not answer for is left out.
fn ends<'a>(
    client: &StreamConsumer,
    partitions: impl Iterator<Item = &'a (String, i32, i64)>,
    end: rdkafka::Offset,
) -> std::collections::HashMap<(String, i32), i64> {
    let mut list = rdkafka::TopicPartitionList::new();
    for (topic, partition, _) in partitions {
        let _ = list.add_partition_offset(topic, *partition, end);
    }
    if list.count() == 0 {
        return Default::default();
    }
    let Ok(answered) = client.offsets_for_times(list, Duration::from_secs(2)) else {
        return Default::default();
    };
    answered
        .elements()
        .iter()
        .filter(|element| element.error().is_ok())
        .filter_map(|element| match element.offset() {
            rdkafka::Offset::Offset(offset) => {
                Some(((element.topic().to_owned(), element.partition()), offset))
            }
            _ => None,
        })
        .collect()
}

/// How often a DLQ copy is tried before the consumer gives up (about five
/// minutes with the backoff): a broker that refuses that long is an outage
/// to surface, not to spin through.
pub const DLQ_TRIES: u32 = 60;

/// Copies a record to the DLQ with the reason and its origin in headers;
/// retries until the broker takes it (true), or until shutdown or
/// [`DLQ_TRIES`] failures (false: the caller must not commit the record's
/// offset, and stops).
pub async fn dead_letter(
    kafka: &KafkaConfig,
    producer: &FutureProducer,
    message: &rdkafka::message::OwnedMessage,
    reason: &str,
    shutdown: &tokio_util::sync::CancellationToken,
) -> bool {
    crate::telemetry::metrics::dead_lettered();
    tracing::warn!(topic = message.topic(), partition = message.partition(), offset = message.offset(), %reason, "dead-lettering record");
    let mut headers = rdkafka::message::OwnedHeaders::new();
    use rdkafka::message::Headers;
    use rdkafka::Message;
    if let Some(original) = message.headers() {
        for header in original.iter() {
            headers = headers.insert(rdkafka::message::Header {
                key: header.key,
                value: header.value,
            });
        }
    }
    let offset = message.offset().to_string();
    let partition = message.partition().to_string();
    headers = headers
        .insert(rdkafka::message::Header {
            key: "execplane_dlq_reason",
            value: Some(reason),
        })
        .insert(rdkafka::message::Header {
            key: "execplane_dlq_topic",
            value: Some(message.topic()),
        })
        .insert(rdkafka::message::Header {
            key: "execplane_dlq_partition",
            value: Some(partition.as_str()),
        })
        .insert(rdkafka::message::Header {
            key: "execplane_dlq_offset",
            value: Some(offset.as_str()),
        });
    let topic = kafka.topic(crate::contract::topics::DLQ);
    let key = message.key().unwrap_or_default();
    let payload = message.payload().unwrap_or_default();
    let mut attempt = 0u32;
    loop {
        let record = rdkafka::producer::FutureRecord::to(&topic)
            .key(key)
            .payload(payload)
            .headers(headers.clone());
        let sent = tokio::select! {
            _ = shutdown.cancelled() => return false,
            sent = producer.send(record, Duration::from_secs(10)) => sent,
        };
        match sent {
            Ok(_) => return true,
            Err((error, _)) => {
                attempt += 1;
                if attempt >= DLQ_TRIES {
                    tracing::error!(%error, attempt, "DLQ publish failed; giving up (nothing committed)");
                    return false;
                }
                tracing::warn!(%error, attempt, "DLQ publish failed; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return false,
                    _ = tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt.min(25)))) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::work_partition;

    #[test]
    fn work_partition_is_stable_and_in_range() {
        // Fixed values: changing the function would strand running instances.
        assert_eq!(
            work_partition("verification-0", 4),
            work_partition("verification-0", 4)
        );
        for index in 0..100 {
            let partition = work_partition(&format!("verification-{index}"), 4);
            assert!((0..4).contains(&partition));
        }
        assert_eq!(work_partition("", 1), 0);
        assert_eq!(
            work_partition("a", 7),
            (0xaf63_dc4c_8601_ec8c_u64 % 7) as i32
        );
    }
}
