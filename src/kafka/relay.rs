//! The relay: publishes the outbox's rows in id order, and the log's events
//! in position order from its cursor, with the idempotent producer; then
//! deletes the rows and moves the cursor. Woken by LISTEN/NOTIFY, batching
//! what piled up. One relay is active at a time (a Postgres advisory lock
//! held on a connection of its own), so per-key order is the outbox's id
//! order and the log's position order. A crash between publish and
//! acknowledgement re-publishes; every record carries its stable `ce_id`
//! (and runners never start one lease twice).
//!
//! Publication windows never overlap (docs/ARCHITECTURE.md, "Relay"):
//! - every round starts by reading the outbox on the lock's connection, so
//!   a relay that lost its connection (and the lock with it) learns it
//!   before it enqueues anything more, and goes back to standby;
//! - a round enqueues only within `round_budget` of a successful read on
//!   that connection (past it, the connection is checked again), and its
//!   producer gives up on any record not delivered within `message_timeout`;
//! - the active relay keeps `relay_state.active_until` (the instant until
//!   which it may still publish) ahead of both, and a relay that takes the
//!   lock waits until that instant, and proves it still holds the lock,
//!   before it publishes: whatever a predecessor that lost its connection
//!   still had in flight has landed or been dropped by then. A first relay
//!   waits for nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{owned_headers, partition_count, work_partition, KafkaConfig, KafkaError};
use crate::contract::topics;
use crate::store::{NextRows, Origin, OutboxListener, OutboxRow, RelayLock, Store, StoreError};

#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// Rows per publish round.
    pub batch: i64,
    /// Poll interval when no notification arrives (a safety net).
    pub idle_poll: Duration,
    /// A round enqueues records only this long after its lock check.
    pub round_budget: Duration,
    /// The relay producer drops a record not delivered within this.
    pub message_timeout: Duration,
}

impl RelayConfig {
    /// How far ahead the active relay records it may publish: twice what
    /// one check covers, refreshed when half of it is used.
    fn horizon(&self) -> Duration {
        (self.round_budget + self.message_timeout) * 2
    }
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            batch: 2_000,
            idle_poll: Duration::from_millis(200),
            round_budget: Duration::from_secs(1),
            message_timeout: Duration::from_secs(3),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Runs until `shutdown`; standby while another relay holds the lock, and
/// back to standby whenever this one loses it.
pub async fn run(
    store: Store,
    kafka: KafkaConfig,
    config: RelayConfig,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    let producer = kafka.relay_producer(config.message_timeout)?;
    let metadata = kafka.assigned_consumer()?;
    let mut partitions: HashMap<String, i32> = HashMap::new();
    let mut standby_logged = false;
    while !shutdown.is_cancelled() {
        let mut lock = match store.try_relay_lock().await {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                if !standby_logged {
                    info!("relay standing by: another relay holds the lock");
                    standby_logged = true;
                }
                pause(&shutdown, Duration::from_secs(1)).await;
                continue;
            }
            Err(error) => {
                warn!(%error, "relay cannot reach Postgres; retrying");
                pause(&shutdown, Duration::from_secs(1)).await;
                continue;
            }
        };
        standby_logged = false;
        let wait = match lock.predecessor_horizon().await {
            Ok(wait) => wait,
            Err(error) => {
                warn!(%error, "relay lost its new lock connection; standing by");
                continue;
            }
        };
        if !wait.is_zero() {
            info!(
                wait_ms = wait.as_millis() as u64,
                "relay took the lock; waiting out the predecessor's records in flight"
            );
            if !pause(&shutdown, wait).await {
                lock.release().await;
                break;
            }
        }
        // Proves the lock again before publishing: a connection cut while
        // this relay waited took the lock with it, and another relay may
        // hold it now.
        if let Err(error) = lock.prove(config.horizon()).await {
            warn!(%error, "relay lost its lock connection while it waited; standing by");
            continue;
        }
        let mut leader = Leader {
            lock,
            producer: &producer,
            kafka: &kafka,
            metadata: &metadata,
            partitions: &mut partitions,
            config: &config,
        };
        info!("relay active");
        match leader.publish_until(&store, &shutdown).await {
            Ok(()) => {
                leader.lock.release().await;
                info!("relay stopped");
                break;
            }
            Err(error) => {
                // Whatever is still queued must not go out late.
                producer.purge(rdkafka::producer::PurgeConfig::default().queue());
                warn!(%error, "relay stopped publishing: its lock connection failed; standing by");
                drop(leader);
                pause(&shutdown, Duration::from_secs(1)).await;
            }
        }
    }
    let _ = producer.flush(Duration::from_secs(5));
    Ok(())
}

/// Sleeps `duration` unless shutdown comes first (then false).
async fn pause(shutdown: &CancellationToken, duration: Duration) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(duration) => true,
    }
}

/// The active relay: publishes rounds while it holds the lock.
struct Leader<'a> {
    lock: RelayLock,
    producer: &'a FutureProducer,
    kafka: &'a KafkaConfig,
    metadata: &'a rdkafka::consumer::StreamConsumer,
    partitions: &'a mut HashMap<String, i32>,
    config: &'a RelayConfig,
}

impl Leader<'_> {
    /// Publishes until shutdown (`Ok`) or until the lock's connection
    /// fails (`Err`: the lock may be another relay's now).
    async fn publish_until(
        &mut self,
        store: &Store,
        shutdown: &CancellationToken,
    ) -> Result<(), RelayError> {
        let mut listener = store.listen_outbox().await?;
        let mut failures = 0u32;
        // When the horizon was last moved (never, yet).
        let mut proved: Option<Instant> = None;
        while !shutdown.is_cancelled() {
            let checked_at = Instant::now();
            if proved.is_none_or(|at| at.elapsed() * 2 >= self.config.horizon()) {
                self.lock.prove(self.config.horizon()).await?;
                proved = Some(checked_at);
            }
            let NextRows { rows, more } = self.lock.next_rows(self.config.batch).await?;
            if rows.is_empty() {
                crate::telemetry::metrics::outbox_round(0, &[], 0.0);
                if !self.wake_up(&mut listener, shutdown).await {
                    break;
                }
                continue;
            }
            match self.round(&rows, checked_at, &mut proved).await? {
                Some(published) => {
                    failures = 0;
                    self.lock.acknowledge(&published.origins).await?;
                    crate::telemetry::metrics::outbox_round(
                        rows.len(),
                        &published.topics,
                        published.started.elapsed().as_secs_f64(),
                    );
                    debug!(
                        rows = published.origins.len(),
                        elapsed_ms = published.started.elapsed().as_millis() as u64,
                        "outbox published"
                    );
                    // The read took everything committed before it: what
                    // commits since has notified, so reading again at once
                    // would find nothing (one statement per round saved).
                    if !more && !self.wake_up(&mut listener, shutdown).await {
                        break;
                    }
                }
                None => {
                    failures += 1;
                    let backoff = Duration::from_millis(100 * u64::from(failures.min(50)));
                    if !pause(shutdown, backoff).await {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits for an append's notification or the idle poll; false on
    /// shutdown.
    async fn wake_up(&self, listener: &mut OutboxListener, shutdown: &CancellationToken) -> bool {
        tokio::select! {
            _ = shutdown.cancelled() => false,
            notification = listener.recv() => {
                if let Err(error) = notification {
                    warn!(%error, "outbox listener");
                    return pause(shutdown, self.config.idle_poll).await;
                }
                true
            }
            _ = tokio::time::sleep(self.config.idle_poll) => true,
        }
    }

    /// Enqueues `rows` in order and waits for the broker; `None` when a
    /// record failed (nothing is acknowledged; the round is retried).
    async fn round(
        &mut self,
        rows: &[OutboxRow],
        mut checked_at: Instant,
        proved: &mut Option<Instant>,
    ) -> Result<Option<Published>, RelayError> {
        let started = Instant::now();
        let mut published = Published {
            origins: Vec::with_capacity(rows.len()),
            topics: Vec::with_capacity(rows.len()),
            started,
        };
        let mut deliveries = Vec::with_capacity(rows.len());
        let mut failed = false;
        for row in rows {
            if checked_at.elapsed() > self.config.round_budget {
                // Long round (a full queue, a slow broker): prove the lock
                // again, and move the horizon, before enqueueing more.
                checked_at = Instant::now();
                self.lock.prove(self.config.horizon()).await?;
                *proved = Some(checked_at);
            }
            let full = self.kafka.topic(&row.topic);
            let partition = if topics::is_work(&row.topic) {
                let count = match self.partitions.get(&full) {
                    Some(count) => *count,
                    None => {
                        let count = partition_count(self.metadata, &full)?;
                        self.partitions.insert(full.clone(), count);
                        count
                    }
                };
                Some(work_partition(&row.key, count))
            } else {
                None
            };
            let mut record = FutureRecord::to(&full)
                .key(&row.key)
                .payload(&row.payload)
                .headers(owned_headers(&row.headers));
            if let Some(partition) = partition {
                record = record.partition(partition);
            }
            // Enqueue in order; the idempotent producer keeps per-partition order.
            loop {
                match self.producer.send_result(record) {
                    Ok(delivery) => {
                        deliveries.push(delivery);
                        break;
                    }
                    Err((error, returned)) => {
                        if !matches!(
                            error,
                            rdkafka::error::KafkaError::MessageProduction(
                                rdkafka::types::RDKafkaErrorCode::QueueFull
                            )
                        ) {
                            warn!(%error, "cannot enqueue outbox row");
                            failed = true;
                            break;
                        }
                        record = returned;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        if checked_at.elapsed() > self.config.round_budget {
                            checked_at = Instant::now();
                            self.lock.prove(self.config.horizon()).await?;
                            *proved = Some(checked_at);
                        }
                    }
                }
            }
            if failed {
                break;
            }
            published.origins.push(row.origin);
            published.topics.push(row.topic.clone());
        }
        for delivery in deliveries {
            match delivery.await {
                Ok(Ok(_)) => {}
                Ok(Err((error, _))) => {
                    warn!(%error, "outbox publish failed");
                    failed = true;
                }
                Err(_) => failed = true,
            }
        }
        Ok((!failed).then_some(published))
    }
}

struct Published {
    origins: Vec<Origin>,
    topics: Vec<String>,
    started: Instant,
}
