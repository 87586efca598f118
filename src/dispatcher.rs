//! The dispatcher ties store, Kafka and the state machine together: it
//! consumes commands, runner events and presence in batches, decides them in
//! one Postgres transaction per batch, commits offsets only after that,
//! places queued attempts on live runners, fires due timers and delivers
//! HTTP callbacks.

mod callbacks;
mod intake;
pub mod placement;

use std::time::Duration;

use rdkafka::producer::FutureProducer;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::kafka::{KafkaConfig, KafkaError};
use crate::store::{Store, StoreError};

pub use callbacks::{CallbackConfig, Signing};

/// Dispatcher settings; defaults are in the README.
#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Consumer group of the dispatchers.
    pub group: String,
    /// Most records decided in one transaction.
    pub max_batch: usize,
    /// How long a batch waits for more records after its first.
    pub batch_window: Duration,
    /// Grace a runner gets to confirm a cancel.
    pub cancel_grace: Duration,
    /// How often due timers are swept.
    pub sweep_interval: Duration,
    /// How often placement runs without a trigger: intake's batches, a
    /// presence, a sweep that fired anything wake it at once; the timer is
    /// for retry backoffs ending.
    pub placement_interval: Duration,
    /// A presence older than this is not live.
    pub presence_ttl: Duration,
    /// Inbox ids older than this are forgotten: no input is redelivered
    /// after its topic's retention (7 days for commands and runner events).
    pub inbox_retention: Duration,
    pub callbacks: CallbackConfig,
    /// The operator's policy, checked at intake (`rejected (policy)`).
    pub policy: crate::policy::SharedPolicy,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        Self {
            group: "execplane-dispatcher".into(),
            max_batch: 1_000,
            batch_window: Duration::from_millis(2),
            cancel_grace: Duration::from_secs(10),
            sweep_interval: Duration::from_millis(100),
            placement_interval: Duration::from_millis(500),
            presence_ttl: Duration::from_secs(6),
            inbox_retention: Duration::from_secs(7 * 24 * 3600),
            callbacks: CallbackConfig::default(),
            policy: crate::policy::SharedPolicy::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DispatcherError {
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot build the HTTP client for callbacks: {0}")]
    HttpClient(String),
    #[error("a blocking task failed: {0}")]
    Task(String),
    #[error("the broker did not take a dead letter after repeated tries; stopping with nothing committed")]
    DeadLetter,
}

/// Runs every dispatcher task until `shutdown`.
pub async fn run(
    store: Store,
    kafka: KafkaConfig,
    producer: FutureProducer,
    config: DispatcherConfig,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    let placed = placement::Wake::new();
    // When intake last had decided every report on its partitions: timers
    // fire only for deadlines before that, so a lagging or rebalancing
    // intake never makes the sweeper expire a lease whose heartbeats are
    // still waiting in Kafka.
    let caught_up = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    // Per partition, shared through Postgres with every other dispatcher:
    // the sweeper fires a deadline only once EVERY runner-events partition
    // is decided past it, whichever dispatcher owns it.
    let progress = crate::kafka::PartitionProgress::default();
    let intake = tokio::spawn(intake::run(
        store.clone(),
        kafka.clone(),
        producer.clone(),
        config.clone(),
        intake::Signals {
            placed: placed.clone(),
            caught_up,
            progress: progress.clone(),
        },
        shutdown.clone(),
    ));
    let placement = tokio::spawn(placement::run(
        store.clone(),
        config.clone(),
        placed.clone(),
        shutdown.clone(),
    ));
    let sweeper = tokio::spawn(sweep(
        store.clone(),
        kafka.clone(),
        config.sweep_interval,
        progress,
        placed.clone(),
        shutdown.clone(),
    ));
    let callbacks = tokio::spawn(callbacks::run(
        store.clone(),
        (kafka.clone(), producer.clone()),
        config.callbacks.clone(),
        shutdown.clone(),
    ));
    let maintenance = tokio::spawn(maintain(
        store.clone(),
        config.inbox_retention,
        shutdown.clone(),
    ));
    let presence = tokio::spawn(intake::presence(
        store.clone(),
        kafka.clone(),
        placed.clone(),
        shutdown.clone(),
    ));
    info!("dispatcher running");
    // Each task as it ends: one that fails stops the others at once, rather
    // than when the tasks before it in some order end.
    let mut names = vec![
        "intake",
        "presence",
        "maintenance",
        "placement",
        "sweeper",
        "callbacks",
    ];
    let mut tasks = vec![intake, presence, maintenance, placement, sweeper, callbacks];
    let mut first_error = None;
    while !tasks.is_empty() {
        let (ended, index, rest) = futures_util::future::select_all(tasks).await;
        let name = names.remove(index);
        tasks = rest;
        match ended {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                error!(task = name, %error, "dispatcher task failed");
                shutdown.cancel();
                first_error.get_or_insert(error);
            }
            Err(join) => {
                error!(task = name, %join, "dispatcher task panicked");
                shutdown.cancel();
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// How long the sweeper leaves out an attempt whose due timer the store
/// refused, before it tries the timer again.
const REFUSED_TIMER_PAUSE: Duration = Duration::from_secs(600);

/// Fires due timers; transient database errors are retried. A deadline
/// fires only when every runner-events partition has been decided past it
/// (minus the slack for reports in flight), by whichever dispatcher owns
/// the partition: this dispatcher publishes its own partitions' progress
/// and reads everyone's. A sweep that fired anything wakes placement (a
/// lease lost or an attempt ended frees a slot or a key). A timer the
/// store refuses is logged and left out for [`REFUSED_TIMER_PAUSE`].
async fn sweep(
    store: Store,
    kafka: KafkaConfig,
    interval: Duration,
    progress: crate::kafka::PartitionProgress,
    placed: placement::Wake,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    let runner_events = kafka.topic(crate::contract::topics::RUNNER_EVENTS);
    let mut partitions: Option<i32> = None;
    let mut published: std::collections::BTreeMap<(String, i32), i64> = Default::default();
    let mut failures = 0u32;
    let mut last_gauges = 0i64;
    // Attempts whose due timer the store refused, until when they are left
    // out of the sweeps: an operator's repair is picked up after that.
    let mut refused: std::collections::HashMap<uuid::Uuid, std::time::Instant> = Default::default();
    while !shutdown.is_cancelled() {
        refused.retain(|_, until| *until > std::time::Instant::now());
        let skip: Vec<uuid::Uuid> = refused.keys().copied().collect();
        let now = chrono::Utc::now().timestamp_millis();
        // Reports sent before a deadline may need this long to land in Kafka.
        const IN_FLIGHT_SLACK_MS: i64 = 500;
        let swept = async {
            let changed: Vec<(String, i32, i64)> = {
                let current = progress
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                current
                    .iter()
                    .filter(|(key, at)| published.get(*key) != Some(*at))
                    .map(|((topic, partition), at)| (topic.clone(), *partition, *at))
                    .collect()
            };
            store.record_intake_progress(&changed).await?;
            for (topic, partition, at) in changed {
                published.insert((topic, partition), at);
            }
            if partitions.is_none() {
                let consumer = kafka.assigned_consumer()?;
                let topic = runner_events.clone();
                partitions = Some(
                    tokio::task::spawn_blocking(move || {
                        crate::kafka::partition_count(&consumer, &topic)
                    })
                    .await
                    .map_err(|join| DispatcherError::Task(join.to_string()))??,
                );
            }
            let decided_until = store
                .intake_decided_until(&runner_events, partitions.unwrap_or(1))
                .await?
                .map_or(0, |until| until - IN_FLIGHT_SLACK_MS);
            crate::telemetry::metrics::intake_lag(
                ((now - decided_until - IN_FLIGHT_SLACK_MS).max(0)) as f64 / 1000.0,
            );
            if now - last_gauges >= 15_000 {
                last_gauges = now;
                if let Ok(counts) = store.live_attempts_by_status(None).await {
                    crate::telemetry::metrics::attempts_by_state(&counts);
                }
            }
            let swept = store
                .sweep_timers(now, now.min(decided_until), 500, &skip, &shutdown)
                .await?;
            Ok::<_, DispatcherError>(swept)
        }
        .await;
        match swept {
            Ok(swept) => {
                for (attempt_id, reason) in swept.refused {
                    tracing::error!(%attempt_id, %reason, retry_in = ?REFUSED_TIMER_PAUSE, "the store refuses this attempt's due timer; the other timers go on");
                    refused.insert(attempt_id, std::time::Instant::now() + REFUSED_TIMER_PAUSE);
                }
                crate::telemetry::metrics::record_events(&swept.events);
                if !swept.events.is_empty() {
                    placed.something_waits();
                }
                failures = 0;
                if swept.due == 500 {
                    continue;
                }
            }
            Err(error) => {
                failures += 1;
                tracing::warn!(%error, failures, "timer sweep failed");
            }
        }
        let pause = interval * (1 + failures.min(20));
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    Ok(())
}

/// Every ten minutes: forget inbox ids past the input topics' retention and
/// runner instances silent for a day. Every ten seconds: analyse the hot
/// tables that changed a lot, so their plans never depend on autovacuum
/// having run (a table grown from empty read by a plan made for an empty
/// table turns a key lookup into a sequential scan).
async fn maintain(
    store: Store,
    inbox_retention: Duration,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    let mut last_prune: Option<std::time::Instant> = None;
    while !shutdown.is_cancelled() {
        if last_prune.is_none_or(|at| at.elapsed() >= Duration::from_secs(600)) {
            last_prune = Some(std::time::Instant::now());
            match store
                .prune(inbox_retention, Duration::from_secs(24 * 3600))
                .await
            {
                Ok((inbox, instances)) if inbox + instances > 0 => {
                    info!(inbox, instances, "pruned")
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "pruning failed"),
            }
        }
        match store.analyze_if_stale().await {
            Ok(tables) if !tables.is_empty() => tracing::debug!(?tables, "analysed"),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "analyse failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
    }
    Ok(())
}
