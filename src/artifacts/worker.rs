//! The worker's two loops: intake (chunks → staged rows → offsets) and
//! bundling (ended attempts → stored artifacts → refs + outbox).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::OwnedMessage;
use rdkafka::producer::FutureProducer;
use rdkafka::Message;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::{sha256_hex, ArtifactStorage, Detectors};
use crate::codec::{ArtifactRecord, Codec, Family, LogChunkRecord, RetentionClass};
use crate::contract::topics;
use crate::kafka::{KafkaConfig, KafkaError};
use crate::store::{PendingBundle, StagedChunk, Store};

/// Settings; defaults in the README.
#[derive(Clone, Debug)]
pub struct ArtifactConfig {
    /// `EXECPLANE_ARTIFACT_GROUP`: the workers' consumer group.
    pub group: String,
    /// `EXECPLANE_ARTIFACT_GRACE`: how long after an attempt ends its bundle
    /// waits for chunks still in flight.
    pub grace: Duration,
    pub detectors: Detectors,
    pub retention: crate::store::Retention,
    /// How often expired artifacts are collected.
    pub gc_interval: Duration,
}

/// The most attempts bundled in a round.
const BUNDLES_PER_ROUND: i64 = 20;

/// The most staged chunk bytes a round loads (at least one attempt's,
/// however large): building a bundle holds its text a few times over, and
/// each attempt may stage the runner's whole output bound.
const STAGED_BYTES_PER_ROUND: i64 = 32 * 1024 * 1024;

const NAMESPACE: Uuid = Uuid::from_u128(0x6a1f_0c2e_93d4_4b7a_a51e_7f20_c3b8_d914);

pub async fn run<S: ArtifactStorage>(
    store: Store,
    kafka: KafkaConfig,
    producer: FutureProducer,
    config: ArtifactConfig,
    storage: Arc<S>,
    shutdown: CancellationToken,
) -> Result<(), KafkaError> {
    let consumer = kafka.group_consumer(&config.group)?;
    let topic = kafka.topic(topics::LOG_CHUNKS);
    consumer.subscribe(&[topic.as_str()])?;
    info!(%topic, group = %config.group, "artifact worker subscribed");
    // The instant before which every chunk sent is staged: a bundle is only
    // built once intake has caught up past its attempt's end (plus the
    // grace), so a worker that was down or lagging never bundles half the
    // output.
    let caught_up = Arc::new(AtomicI64::new(0));
    let gate = crate::kafka::CaughtUpGate::start(
        &kafka,
        &config.group,
        caught_up.clone(),
        Default::default(),
        shutdown.clone(),
    );
    let bundler = tokio::spawn(bundle_loop(
        store.clone(),
        config.clone(),
        storage,
        caught_up.clone(),
        shutdown.clone(),
    ));
    let codec = kafka.codec.clone();
    let consumers = [&*consumer];
    while !shutdown.is_cancelled() {
        let batch = tokio::select! {
            _ = shutdown.cancelled() => break,
            batch = gate.poll(&consumers, Duration::from_millis(200), Duration::from_millis(20), 500) => batch,
        };
        let batch = match batch {
            Ok(batch) if batch.is_empty() => continue,
            Ok(batch) => batch,
            Err(error) => {
                warn!(%error, "consume");
                continue;
            }
        };
        let mut chunks = Vec::with_capacity(batch.len());
        for message in &batch {
            match decode_chunk(&codec, message) {
                Ok(chunk) => chunks.push(chunk),
                Err(reason) => {
                    if !crate::kafka::dead_letter(&kafka, &producer, message, &reason, &shutdown)
                        .await
                    {
                        // Shutdown before the broker took it: nothing committed.
                        bundler.abort();
                        return Ok(());
                    }
                }
            }
        }
        // Staged before the offsets move: a crash re-reads, and the
        // (attempt, stream, seq) key makes that a no-op.
        if !stage(&store, &chunks, &shutdown).await {
            bundler.abort();
            return Ok(());
        }
        crate::kafka::store_offsets_past(&consumer, &batch);
    }
    let _ = bundler.await;
    Ok(())
}

/// One log-chunk record as a row to stage, or why it cannot be one.
fn decode_chunk(codec: &Codec, message: &OwnedMessage) -> Result<StagedChunk, String> {
    let payload = message
        .payload()
        .ok_or_else(|| "empty payload".to_owned())?;
    let record = codec
        .decode::<LogChunkRecord>(Family::LogChunk, payload)
        .map_err(|error| format!("not a log chunk: {error}"))?;
    Ok(StagedChunk {
        attempt_id: record
            .attempt_id
            .parse()
            .map_err(|_| "attempt_id is not a UUID".to_owned())?,
        stream: format!("{:?}", record.stream).to_lowercase(),
        seq: record.seq,
        lease_epoch: record.lease_epoch,
        producer: record.runner_instance.replace('\0', "\u{FFFD}"),
        // Postgres text holds no NUL; tools may print one.
        text: record.text.replace('\0', "\u{FFFD}"),
    })
}

/// Stage the chunks, retrying with backoff until they are stored; false when
/// shutdown came first (nothing staged, nothing to commit).
async fn stage(store: &Store, chunks: &[StagedChunk], shutdown: &CancellationToken) -> bool {
    let mut failures = 0u32;
    loop {
        match store.stage_chunks(chunks).await {
            Ok(new) => {
                debug!(chunks = chunks.len(), new, "chunks staged");
                return true;
            }
            Err(error) => {
                failures += 1;
                warn!(%error, failures, "staging chunks failed; retrying");
                if shutdown.is_cancelled() {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(200 * u64::from(failures.min(25)))).await;
            }
        }
    }
}

/// One attempt's artifacts, built and scrubbed.
struct Built {
    /// (stream, seq) of every chunk in the bundle.
    chunks: Vec<(String, i64)>,
    records: Vec<ArtifactRecord>,
    keys: Vec<String>,
    /// What to store at each key; `None`: stored already (a runner's output).
    bodies: Vec<Option<Vec<u8>>>,
    detections: Vec<(String, &'static str, usize)>,
}

/// An artifact the worker writes: name, media type, class, producer, text.
type Part = (String, &'static str, RetentionClass, String, String);

/// The worker's own artifacts of a bundle: a log per stream (or its late
/// part), and the result as evidence.
fn parts_of(bundle: &PendingBundle) -> Vec<Part> {
    let mut parts: Vec<Part> = Vec::new();
    for (stream, seq, producer, text) in &bundle.chunks {
        let name = if bundle.late {
            // Named after its stream's first late chunk, so each late
            // bundle has a name of its own.
            let first = bundle
                .chunks
                .iter()
                .find(|(s, _, _, _)| s == stream)
                .map_or(*seq, |(_, first, _, _)| *first);
            format!("{stream}.late-{first}.log")
        } else {
            format!("{stream}.log")
        };
        match parts.iter_mut().find(|part| part.0 == name) {
            Some(part) => part.4.push_str(text),
            None => parts.push((
                name,
                "text/plain; charset=utf-8",
                RetentionClass::Logs,
                producer.clone(),
                text.clone(),
            )),
        }
    }
    if let Some(result) = &bundle.result_json {
        parts.push((
            "result.json".into(),
            "application/json",
            RetentionClass::Evidence,
            "runner-result".into(),
            result.clone(),
        ));
    }
    parts
}

fn build<S: ArtifactStorage>(bundle: &PendingBundle, detectors: &Detectors, storage: &S) -> Built {
    let parts = parts_of(bundle);
    let mut built = Built {
        chunks: bundle
            .chunks
            .iter()
            .map(|(stream, seq, _, _)| (stream.clone(), *seq))
            .collect(),
        records: Vec::new(),
        keys: Vec::new(),
        bodies: Vec::new(),
        detections: Vec::new(),
    };
    let now = chrono::Utc::now().timestamp_millis();
    for (name, media_type, class, producer, text) in parts {
        let (text, caught) = detectors.scrub(&text);
        for (detector, count) in caught {
            crate::telemetry::metrics::artifact_detection(detector, count);
            warn!(attempt_id = %bundle.attempt_id, artifact = %name, detector, count, "secret-shaped text masked by the artifact worker");
            built.detections.push((name.clone(), detector, count));
        }
        built.push(
            bundle.attempt_id,
            storage,
            now,
            name,
            media_type,
            class,
            producer,
            text.into_bytes(),
        );
    }
    // The runner stored its outputs itself: recorded here, not stored.
    for output in &bundle.outputs {
        built.record_output(bundle, output, storage, now);
    }
    // The attempt's one document to start from: every artifact of the
    // bundle with its digest. Late bundles come after it and are listed
    // by `artifacts list` (docs/ARCHITECTURE.md, "Artifacts").
    if !bundle.late {
        let manifest = manifest(bundle.attempt_id, &built.records);
        built.push(
            bundle.attempt_id,
            storage,
            now,
            MANIFEST.into(),
            "application/json",
            RetentionClass::Evidence,
            "artifact-worker".into(),
            manifest,
        );
    }
    built
}

/// The name of an attempt's artifact manifest.
pub const MANIFEST: &str = "manifest.json";

/// `manifest.json`: the attempt and each artifact (name, class, media
/// type, size, sha256, producer), in the order they were built.
fn manifest(attempt_id: Uuid, records: &[ArtifactRecord]) -> Vec<u8> {
    let artifacts: Vec<serde_json::Value> = records
        .iter()
        .map(|record| {
            serde_json::json!({
                "name": record.name,
                "class": record.retention_class.as_str(),
                "media_type": record.media_type,
                "size": record.size,
                "sha256": record.sha256,
                "producer": record.producer,
            })
        })
        .collect();
    let document = serde_json::json!({
        "attempt_id": attempt_id.to_string(),
        "artifacts": artifacts,
    });
    // `Value`'s Display cannot fail; `#` is the pretty form.
    format!("{document:#}\n").into_bytes()
}

impl Built {
    /// A runner's output: its ref (producer: the instance that held the
    /// lease), at the key the runner stored it under, nothing to store.
    fn record_output<S: ArtifactStorage>(
        &mut self,
        bundle: &PendingBundle,
        output: &crate::contract::OutputArtifact,
        storage: &S,
        now: i64,
    ) {
        let attempt_id = bundle.attempt_id;
        self.records.push(ArtifactRecord {
            artifact_id: Uuid::new_v5(
                &NAMESPACE,
                format!("{attempt_id}/{}", output.name).as_bytes(),
            )
            .to_string(),
            attempt_id: attempt_id.to_string(),
            name: output.name.clone(),
            media_type: output.media_type.clone(),
            size: output.size,
            sha256: output.sha256.clone(),
            producer: bundle
                .runner_instance
                .clone()
                .unwrap_or_else(|| "runner".into()),
            retention_class: output.class,
            uri: storage.uri(&output.key),
            created_at: now,
        });
        self.keys.push(output.key.clone());
        self.bodies.push(None);
    }

    /// One artifact: its content-addressed key, its record and its bytes.
    #[allow(clippy::too_many_arguments)]
    fn push<S: ArtifactStorage>(
        &mut self,
        attempt_id: Uuid,
        storage: &S,
        now: i64,
        name: String,
        media_type: &str,
        class: RetentionClass,
        producer: String,
        bytes: Vec<u8>,
    ) {
        let sha256 = sha256_hex(&bytes);
        // Content-addressed: two workers racing on one attempt cannot leave
        // an object that differs from the recorded digest.
        let key = format!("{attempt_id}/{}/{name}", &sha256[..16]);
        self.records.push(ArtifactRecord {
            artifact_id: Uuid::new_v5(&NAMESPACE, format!("{attempt_id}/{name}").as_bytes())
                .to_string(),
            attempt_id: attempt_id.to_string(),
            name,
            media_type: media_type.to_owned(),
            size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
            sha256,
            producer,
            retention_class: class,
            uri: storage.uri(&key),
            created_at: now,
        });
        self.keys.push(key);
        self.bodies.push(Some(bytes));
    }
}

async fn bundle_loop<S: ArtifactStorage>(
    store: Store,
    config: ArtifactConfig,
    storage: Arc<S>,
    caught_up: Arc<AtomicI64>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(500);
    let mut backlog_checked = Instant::now() - Duration::from_secs(60);
    let mut collected = Instant::now();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        if backlog_checked.elapsed() >= Duration::from_secs(2) {
            if let Ok(count) = store.bundle_backlog().await {
                crate::telemetry::metrics::artifact_backlog(count);
            }
            backlog_checked = Instant::now();
        }
        if collected.elapsed() >= config.gc_interval {
            collected = Instant::now();
            match super::collect_garbage(&store, &*storage, config.retention, false).await {
                Ok(deleted) if !deleted.is_empty() => {
                    info!(deleted = deleted.len(), "expired artifacts collected")
                }
                Ok(_) => {}
                Err(error) => warn!(%error, "collecting expired artifacts failed"),
            }
        }
        let grace = i64::try_from(config.grace.as_millis()).unwrap_or(i64::MAX);
        let cutoff = caught_up.load(Ordering::SeqCst).saturating_sub(grace);
        let pending = match store
            .pending_bundles(cutoff, BUNDLES_PER_ROUND, STAGED_BYTES_PER_ROUND)
            .await
        {
            Ok(pending) => pending,
            Err(error) => {
                warn!(%error, "reading pending bundles failed");
                continue;
            }
        };
        let mut failed = false;
        for bundle in &pending {
            let built = build(bundle, &config.detectors, &*storage);
            let mut stored = true;
            for (key, body) in built.keys.iter().zip(&built.bodies) {
                let Some(body) = body else {
                    continue;
                };
                if let Err(error) = storage.put(key, body).await {
                    crate::telemetry::metrics::artifact_store_failed();
                    warn!(%error, %key, "storing an artifact failed; will retry");
                    stored = false;
                    break;
                }
            }
            if !stored {
                // The next attempts may store fine (an object-level refusal);
                // an outage fails them all quickly.
                failed = true;
                continue;
            }
            match store
                .record_bundle(
                    bundle.attempt_id,
                    &built.records,
                    &built.keys,
                    &built.detections,
                    &built.chunks,
                )
                .await
            {
                Ok(()) => {
                    for record in &built.records {
                        crate::telemetry::metrics::artifact_stored(record.retention_class.as_str());
                    }
                    debug!(attempt_id = %bundle.attempt_id, artifacts = built.records.len(), "artifacts stored");
                }
                Err(error) => {
                    warn!(%error, attempt_id = %bundle.attempt_id, "recording artifacts failed; will retry");
                    failed = true;
                }
            }
        }
        backoff = if failed {
            (backoff * 2).min(Duration::from_secs(30))
        } else if pending.len() == 20 {
            Duration::from_millis(10)
        } else {
            Duration::from_millis(500)
        };
    }
}
