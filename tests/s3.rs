//! Artifacts on real S3-compatible storage (Garage, started by
//! scripts/garage.sh): multipart round trips with content verification,
//! and an outage mid-run that delays artifacts without blocking the
//! attempt or losing a chunk.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::pipeline::{job, Pipeline};
use execplane::artifacts::{ArtifactStorage, S3Settings, S3};
use execplane::config::Secret;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(90);

const ENDPOINT: &str = "http://127.0.0.1:3900";

/// The PIDs of running `garage ... server` processes.
fn garage_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let text = String::from_utf8_lossy(&cmdline);
                let args: Vec<&str> = text.split('\0').collect();
                args.first()
                    .is_some_and(|program| program.ends_with("garage"))
                    && args.contains(&"server")
            })
        })
        .collect()
}

/// Starts Garage again, detached, as scripts/garage.sh does.
fn start_garage() {
    let config = common::stack_dir().join("garage/garage.toml");
    let log = common::stack_dir().join("garage.log");
    let status = Command::new("sh")
        .args([
            "-c",
            &format!(
                "nohup garage -c '{}' server >>'{}' 2>&1 &",
                config.display(),
                log.display()
            ),
        ])
        .stdin(Stdio::null())
        .status()
        .expect("sh runs");
    assert!(status.success());
}

async fn metric(port: u16, name: &str) -> f64 {
    let Ok(response) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else {
        return 0.0;
    };
    let text = response.text().await.unwrap_or_default();
    let samples = common::prometheus::parse(&text).unwrap();
    common::prometheus::sum(&samples, name, &[])
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn s3_artifacts_round_trip_and_survive_an_outage(pool: PgPool) {
    let (key_id, secret) = common::s3_credentials();
    let storage = S3::new(&S3Settings {
        endpoint: ENDPOINT.into(),
        region: "garage".into(),
        bucket: "execplane-artifacts".into(),
        access_key_id: key_id.clone(),
        secret_access_key: Secret::new(secret.clone()),
    });
    // Multipart (three parts) and single-part objects come back intact.
    let big: Vec<u8> = (0..(S3::PART_SIZE * 2 + 12345))
        .map(|i| (i % 251) as u8)
        .collect();
    let key = format!("test/{}/big.bin", Uuid::new_v4());
    storage.put(&key, &big).await.unwrap();
    assert!(
        storage.get(&key).await.unwrap() == big,
        "multipart content differs"
    );
    storage.delete(&key).await.unwrap();
    assert!(storage.get(&key).await.is_err(), "deleted");

    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(
        &["runner", "verification"],
        &[("EXECPLANE_VERIFY_PROBES", "sleep,hang,fail,echo")],
    );
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let s3_env = [
        ("EXECPLANE_S3_ENDPOINT", ENDPOINT),
        ("EXECPLANE_S3_ACCESS_KEY_ID", key_id.as_str()),
        ("EXECPLANE_S3_SECRET_ACCESS_KEY", secret.as_str()),
    ];
    let mut worker_env = s3_env.to_vec();
    worker_env.push(("EXECPLANE_ARTIFACT_GRACE", "300ms"));
    worker_env.push(("EXECPLANE_METRICS_ADDR", metrics_addr.as_str()));
    pipeline.spawn(&["artifact-worker"], &worker_env);
    pipeline.wait_runners(1).await;
    let names = |attempt: Uuid| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT name FROM artifacts WHERE attempt_id = $1 ORDER BY name",
            )
            .bind(attempt)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    let echo = |text: &str| {
        job(
            "verify.custom.probe",
            json!({"probe_id": "echo", "args": {"text": text, "forms": ["plain", "base64"]}}),
            json!({}),
        )
    };
    let get = |attempt: Uuid| {
        let output = common::execplane_with(
            &pool,
            &["artifacts", "get", &attempt.to_string(), "stdout.log"],
            &s3_env,
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };

    let before = echo("before the outage");
    pipeline.submit(&before).await;
    let first = pipeline
        .wait_status(&before.job_id, "succeeded", WAIT)
        .await;
    pipeline
        .wait("artifacts in S3", WAIT, || async {
            names(first).await.len() == 4
        })
        .await;
    assert_eq!(
        get(first),
        "plain: before the outage\nbase64: YmVmb3JlIHRoZSBvdXRhZ2U=\n"
    );

    // Garage goes down mid-run: the attempt still ends, its artifacts wait.
    for pid in garage_pids() {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    let during = echo("written while S3 was down");
    pipeline.submit(&during).await;
    let second = pipeline
        .wait_status(&during.job_id, "succeeded", WAIT)
        .await;
    pipeline
        .wait("the backlog and the failures to show", WAIT, || async {
            metric(metrics_port, "execplane_artifact_backlog").await >= 1.0
                && metric(metrics_port, "execplane_artifact_store_failures_total").await >= 1.0
        })
        .await;
    assert!(names(second).await.is_empty());

    // Back up: every chunk ends up in its bundle.
    start_garage();
    pipeline
        .wait("the delayed artifacts", WAIT, || async {
            names(second).await.len() == 4
        })
        .await;
    assert_eq!(
        get(second),
        "plain: written while S3 was down\nbase64: d3JpdHRlbiB3aGlsZSBTMyB3YXMgZG93bg==\n"
    );
    pipeline
        .wait("the backlog to drain", WAIT, || async {
            metric(metrics_port, "execplane_artifact_backlog").await == 0.0
        })
        .await;
}
