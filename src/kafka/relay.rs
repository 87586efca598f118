//! The outbox relay: publishes outbox rows in id order with the idempotent
//! producer, then deletes them. Woken by LISTEN/NOTIFY, batching what piled
//! up. One relay is active at a time (a Postgres advisory lock), so per-key
//! order is the outbox's id order. A crash between publish and delete
//! re-publishes; every record carries its stable `ce_id`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord};
use sqlx::postgres::PgListener;
use sqlx::Row;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{headers_from_json, partition_count, work_partition, KafkaConfig, KafkaError};
use crate::contract::topics;
use crate::store::Store;

/// The advisory lock key of the active relay.
const RELAY_LOCK: i64 = 0x6578_6563_706c_616e; // "execplan"

#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// Rows per publish round.
    pub batch: i64,
    /// Poll interval when no notification arrives (a safety net).
    pub idle_poll: Duration,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            batch: 2_000,
            idle_poll: Duration::from_millis(200),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// Runs until `shutdown`; standby while another relay holds the lock.
pub async fn run(
    store: Store,
    kafka: KafkaConfig,
    producer: FutureProducer,
    config: RelayConfig,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    let mut leader = store.pool().acquire().await?;
    loop {
        let acquired: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(RELAY_LOCK)
            .fetch_one(&mut *leader)
            .await?;
        if acquired {
            break;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    info!("relay active");
    let mut listener = PgListener::connect_with(store.pool()).await?;
    listener.listen("execplane_outbox").await?;
    let metadata = kafka.assigned_consumer()?;
    let mut partitions: HashMap<String, i32> = HashMap::new();
    let mut failures = 0u32;
    while !shutdown.is_cancelled() {
        let rows =
            sqlx::query("SELECT id, topic, key, headers, payload FROM outbox ORDER BY id LIMIT $1")
                .bind(config.batch)
                .fetch_all(store.pool())
                .await?;
        if rows.is_empty() {
            crate::telemetry::metrics::outbox_round(0, &[], 0.0);
            tokio::select! {
                _ = shutdown.cancelled() => break,
                notification = listener.recv() => { if let Err(error) = notification { warn!(%error, "outbox listener"); } }
                _ = tokio::time::sleep(config.idle_poll) => {}
            }
            continue;
        }
        let started = Instant::now();
        let mut ids = Vec::with_capacity(rows.len());
        let mut published_topics = Vec::with_capacity(rows.len());
        let mut deliveries = Vec::with_capacity(rows.len());
        let mut failed = false;
        for row in &rows {
            let id: i64 = row.get(0);
            let topic: String = row.get(1);
            let key: String = row.get(2);
            let headers: serde_json::Value = row.get(3);
            let payload: Vec<u8> = row.get(4);
            let full = kafka.topic(&topic);
            let partition = if topics::is_work(&topic) {
                let count = match partitions.get(&full) {
                    Some(count) => *count,
                    None => {
                        let count = partition_count(&metadata, &full)?;
                        partitions.insert(full.clone(), count);
                        count
                    }
                };
                Some(work_partition(&key, count))
            } else {
                None
            };
            let empty = serde_json::Map::new();
            let mut record = FutureRecord::to(&full)
                .key(&key)
                .payload(&payload)
                .headers(headers_from_json(headers.as_object().unwrap_or(&empty)));
            if let Some(partition) = partition {
                record = record.partition(partition);
            }
            // Enqueue in order; the idempotent producer keeps per-partition order.
            loop {
                match producer.send_result(record) {
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
                    }
                }
            }
            if failed {
                break;
            }
            ids.push(id);
            published_topics.push(topic);
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
        if failed {
            failures += 1;
            let backoff = Duration::from_millis(100 * u64::from(failures.min(50)));
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(backoff) => {}
            }
            continue;
        }
        failures = 0;
        sqlx::query("DELETE FROM outbox WHERE id = ANY($1)")
            .bind(&ids)
            .execute(store.pool())
            .await?;
        crate::telemetry::metrics::outbox_round(
            rows.len(),
            &published_topics,
            started.elapsed().as_secs_f64(),
        );
        debug!(
            rows = ids.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "outbox published"
        );
    }
    // The lock is per session and the connection goes back to the pool.
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(RELAY_LOCK)
        .execute(&mut *leader)
        .await?;
    Ok(())
}
