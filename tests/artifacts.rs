//! The artifact worker on the real stack: an attempt's output and result
//! become checksummed artifacts (local-directory storage, the embedded
//! default), secret-shaped text the runner could not know is masked again,
//! `artifact.created` is published once per artifact, and a worker killed
//! and restarted loses and duplicates nothing.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::pipeline::{job, Pipeline};
use execplane::codec::{ArtifactRecord, Codec, Family};
use execplane::contract::topics;
use rdkafka::message::Headers;
use rdkafka::Message;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);
const KEY_SHAPED: &str = "AKIAQWERTYUIOPASDFGH";

fn echo_job(text: &str) -> execplane::contract::JobSpec {
    echo_job_as(text, "plain")
}

/// `form` `reversed`: the JobSpec holds the text reversed and the tool
/// prints it the right way round, so a key-shaped literal is never in the
/// JobSpec (which refuses one) but is in the output, as when a tool
/// prints a key by itself.
fn echo_job_as(text: &str, form: &str) -> execplane::contract::JobSpec {
    let text: String = if form == "reversed" {
        text.chars().rev().collect()
    } else {
        text.to_owned()
    };
    job(
        "verify.custom.probe",
        json!({"probe_id": "echo", "args": {"text": text, "forms": [form]}}),
        json!({}),
    )
}

async fn names_of(pool: &PgPool, attempt: Uuid) -> Vec<String> {
    sqlx::query_scalar("SELECT name FROM artifacts WHERE attempt_id = $1 ORDER BY name")
        .bind(attempt)
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn output_becomes_checksummed_artifacts_once_even_across_a_worker_crash(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(
        &["runner", "verification"],
        &[("EXECPLANE_VERIFY_PROBES", "sleep,hang,fail,echo")],
    );
    let worker = pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    pipeline.wait_runners(1).await;

    let first = echo_job_as(
        &format!("hello from a tool that printed {KEY_SHAPED}"),
        "reversed",
    );
    pipeline.submit(&first).await;
    let attempt = pipeline.wait_status(&first.job_id, "succeeded", WAIT).await;
    pipeline
        .wait("the first attempt's artifacts", WAIT, || async {
            names_of(&pool, attempt).await.len() == 4
        })
        .await;
    assert_eq!(
        names_of(&pool, attempt).await,
        ["manifest.json", "result.json", "stderr.log", "stdout.log"]
    );
    // The manifest lists every other artifact with the digest and size
    // recorded for it, and downloads like any of them.
    let artifact_dir = pipeline.dir.join("artifacts");
    let storage_env = [("EXECPLANE_ARTIFACT_DIR", artifact_dir.to_str().unwrap())];
    let manifest_file = pipeline.dir.join("manifest.json");
    let listed: serde_json::Value = serde_json::from_slice(&common::download(
        &pool,
        attempt,
        "manifest.json",
        &manifest_file,
        &storage_env,
    ))
    .unwrap();
    assert_eq!(listed["attempt_id"], attempt.to_string());
    let recorded: Vec<(String, String, i64, String, String)> = sqlx::query_as(
        "SELECT name, sha256, size, producer, retention_class FROM artifacts WHERE attempt_id = $1 AND name <> 'manifest.json' ORDER BY name",
    )
    .bind(attempt)
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut in_manifest: Vec<(String, String, i64, String, String)> = listed["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["name"].as_str().unwrap().to_owned(),
                entry["sha256"].as_str().unwrap().to_owned(),
                entry["size"].as_i64().unwrap(),
                entry["producer"].as_str().unwrap().to_owned(),
                entry["class"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    in_manifest.sort();
    assert_eq!(in_manifest, recorded, "{listed}");

    // Download through the CLI: the sha256 is verified, the key-shaped text
    // the runner did not know to mask is masked, and recorded.
    let out = pipeline.dir.join("stdout.log");
    let output = common::execplane_with(
        &pool,
        &[
            "artifacts",
            "get",
            &attempt.to_string(),
            "stdout.log",
            "-o",
            out.to_str().unwrap(),
        ],
        &[(
            "EXECPLANE_ARTIFACT_DIR",
            pipeline.dir.join("artifacts").to_str().unwrap(),
        )],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text,
        "reversed: hello from a tool that printed [masked:aws_access_key_id]\n"
    );
    let manifest: (String, i64) = sqlx::query_as(
        "SELECT sha256, size FROM artifacts WHERE attempt_id = $1 AND name = 'stdout.log'",
    )
    .bind(attempt)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        manifest.0,
        execplane::artifacts::sha256_hex(text.as_bytes())
    );
    assert_eq!(manifest.1, text.len() as i64);
    let detected: Vec<(String, String, i32)> = sqlx::query_as("SELECT name, detector, occurrences FROM artifact_detections WHERE attempt_id = $1 ORDER BY name")
        .bind(attempt)
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(
        detected.contains(&("stdout.log".into(), "aws_access_key_id".into(), 1)),
        "{detected:?}"
    );
    // A bundle changed in storage no longer verifies.
    let key: String = sqlx::query_scalar(
        "SELECT storage_key FROM artifacts WHERE attempt_id = $1 AND name = 'stdout.log'",
    )
    .bind(attempt)
    .fetch_one(&pool)
    .await
    .unwrap();
    let stored = pipeline.dir.join("artifacts").join(key);
    std::fs::write(&stored, "tampered\n").unwrap();
    let output = common::execplane_with(
        &pool,
        &["artifacts", "get", &attempt.to_string(), "stdout.log"],
        &[(
            "EXECPLANE_ARTIFACT_DIR",
            pipeline.dir.join("artifacts").to_str().unwrap(),
        )],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("sha256 mismatch"));

    // The worker dies; output keeps arriving; a new worker picks it up.
    pipeline.signal(worker, "KILL");
    let second = echo_job("second attempt's output");
    pipeline.submit(&second).await;
    let second_attempt = pipeline
        .wait_status(&second.job_id, "succeeded", WAIT)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    pipeline
        .wait("the second attempt's artifacts", WAIT, || async {
            names_of(&pool, second_attempt).await.len() == 4
        })
        .await;

    // artifact.created: every artifact published, each record's ce_id its
    // artifact id (so any re-publish deduplicates), one artifact per id.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut published: BTreeMap<String, Vec<ArtifactRecord>> = BTreeMap::new();
    for message in pipeline.consume_all(topics::ARTIFACTS).await {
        let record: ArtifactRecord = Codec::default()
            .decode(Family::Artifact, message.payload().unwrap())
            .unwrap();
        let ce_id = message
            .headers()
            .and_then(|headers| headers.iter().find(|header| header.key == "ce_id"))
            .and_then(|header| header.value)
            .map(|value| String::from_utf8_lossy(value).into_owned());
        assert_eq!(ce_id.as_deref(), Some(record.artifact_id.as_str()));
        published
            .entry(record.artifact_id.clone())
            .or_default()
            .push(record);
    }
    let recorded: Vec<String> =
        sqlx::query_scalar("SELECT artifact_id::text FROM artifacts ORDER BY artifact_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(recorded.len(), 8);
    assert_eq!(published.keys().cloned().collect::<Vec<_>>(), recorded);
    for (id, records) in &published {
        assert!(
            records.windows(2).all(|pair| pair[0] == pair[1]),
            "{id}: {records:?}"
        );
    }
    // A chunk that arrives after its attempt was bundled is not lost: it
    // becomes an artifact of its own.
    let late = execplane::codec::LogChunkRecord {
        chunk_id: Uuid::new_v4().to_string(),
        attempt_id: attempt.to_string(),
        lease_epoch: 1,
        runner_instance: "late-runner".into(),
        stream: execplane::codec::LogStream::Stdout,
        seq: 100,
        text: "a late line\n".into(),
        sent_at: chrono::Utc::now().timestamp_millis(),
    };
    let payload = Codec::default().encode(Family::LogChunk, &late).unwrap();
    pipeline
        .produce(topics::LOG_CHUNKS, &attempt.to_string(), &payload)
        .await;
    pipeline
        .wait("the late chunk's artifact", WAIT, || async {
            names_of(&pool, attempt)
                .await
                .contains(&"stdout.late-100.log".to_owned())
        })
        .await;
    let staged: i64 = sqlx::query_scalar("SELECT count(*) FROM artifact_chunks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(staged, 0, "every staged chunk is in a bundle");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn retention_deletes_logs_keeps_evidence_and_the_dry_run_lists_exactly_that(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(
        &["runner", "verification"],
        &[("EXECPLANE_VERIFY_PROBES", "sleep,hang,fail,echo")],
    );
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    pipeline.wait_runners(1).await;
    let spec = echo_job("kept briefly");
    pipeline.submit(&spec).await;
    let attempt = pipeline.wait_status(&spec.job_id, "succeeded", WAIT).await;
    pipeline
        .wait("the attempt's artifacts", WAIT, || async {
            names_of(&pool, attempt).await.len() == 4
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let dir = pipeline.dir.join("artifacts");
    let env = [
        ("EXECPLANE_ARTIFACT_DIR", dir.to_str().unwrap()),
        ("EXECPLANE_ARTIFACT_RETENTION_LOGS", "1s"),
        ("EXECPLANE_ARTIFACT_RETENTION_EVIDENCE", "1h"),
    ];
    let listed = |args: &[&str]| {
        let output = common::execplane_with(&pool, args, &env);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
        rows.iter()
            .map(|row| {
                (
                    row["artifact_id"].as_str().unwrap().to_owned(),
                    row["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect::<Vec<_>>()
    };
    let keys: Vec<(String, String)> =
        sqlx::query_as("SELECT name, storage_key FROM artifacts WHERE attempt_id = $1")
            .bind(attempt)
            .fetch_all(&pool)
            .await
            .unwrap();
    let would = listed(&["artifacts", "gc", "--dry-run", "--json"]);
    let mut names: Vec<&str> = would.iter().map(|(_, name)| name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["stderr.log", "stdout.log"]);
    assert_eq!(
        names_of(&pool, attempt).await.len(),
        4,
        "a dry run deletes nothing"
    );
    let deleted = listed(&["artifacts", "gc", "--json"]);
    assert_eq!(
        deleted, would,
        "the dry run lists exactly what the real run deletes"
    );
    assert_eq!(
        names_of(&pool, attempt).await,
        ["manifest.json", "result.json"]
    );
    for (name, key) in &keys {
        assert_eq!(
            dir.join(key).exists(),
            name == "result.json" || name == "manifest.json",
            "{name}: evidence outlives logs, logs are deleted"
        );
    }
    assert!(listed(&["artifacts", "gc", "--dry-run", "--json"]).is_empty());
}
