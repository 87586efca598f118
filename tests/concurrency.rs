//! Per-target concurrency (docs/ARCHITECTURE.md, "Per-target
//! concurrency"), end to end: attempts on one target key never hold leases
//! at once beyond the operator's limit, attempts on other keys run beside
//! them, and a queued attempt says which key it waits for.

mod common;

use std::time::Duration;

use common::leases;
use common::pipeline::{job, Pipeline};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(90);

/// The operator serializes each node, and counts the (idempotent) custom
/// probe among the operations that take target keys.
const POLICY: &str = "concurrency:\n  limits: {node: 1}\n  operations: [verify.custom.probe]\ndefaults:\n  ssh: {nodes: [node-a, node-b]}\n";

/// The first `waiting_for` entry of a queued attempt, as the API shows it.
async fn queued_wait(pool: &PgPool, store: &execplane::store::Store) -> serde_json::Value {
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        let queued: Vec<Uuid> =
            sqlx::query_scalar("SELECT attempt_id FROM attempts WHERE status = 'queued'")
                .fetch_all(pool)
                .await
                .unwrap();
        for attempt_id in queued {
            let Some(row) = store.attempt_json(attempt_id).await.unwrap() else {
                continue;
            };
            if let Some(wait) = row["waiting_for"]
                .as_array()
                .and_then(|waits| waits.first())
            {
                return wait.clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no queued attempt waited for its key");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn attempts_on_one_key_never_overlap_while_other_keys_run_beside_them(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let policy = pipeline.dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy.to_str().unwrap());
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    let probes = format!("{}/tests/probes", env!("CARGO_MANIFEST_DIR"));
    pipeline.spawn(
        &["runner", "verification"],
        &[
            ("EXECPLANE_VERIFY_PROBE_DIR", probes.as_str()),
            ("EXECPLANE_VERIFY_PROBES", "napper"),
            ("EXECPLANE_RUNNER_CAPACITY", "16"),
        ],
    );
    pipeline.wait_runners(1).await;

    // First, one on node-a that no runner can take (a pool nobody has),
    // willing to wait an hour: it must not hold node-a's queue back.
    let stranded = job(
        "verify.custom.probe",
        json!({"probe_id": "napper", "args": {"ms": 1}}),
        json!({"targets": [{"kind": "host", "id": "node-a"}],
               "runner_requirements": {"pool": {"zone": "nowhere"}},
               "retry": {"max_attempts": 1},
               "timeouts": {"schedule_to_start": "1h", "start_to_close": "30s", "heartbeat": "4s", "schedule_to_close": "2h"}}),
    );
    pipeline.submit(&stranded).await;
    pipeline
        .wait("the stranded job to be queued", WAIT, || async {
            !pipeline.attempts(&stranded.job_id).await.is_empty()
        })
        .await;

    // Then twenty at once: ten on node-a, ten on node-b (two names, one
    // address: the key is what is connected to).
    let specs: Vec<_> = (0..20)
        .map(|index| {
            let target = if index % 2 == 0 {
                json!({"kind": "host", "id": "node-a"})
            } else {
                json!({"kind": "host", "id": format!("alias-{index}"), "address": "node-b"})
            };
            job(
                "verify.custom.probe",
                json!({"probe_id": "napper", "args": {"ms": 300}}),
                json!({"targets": [target], "retry": {"max_attempts": 1}}),
            )
        })
        .collect();
    for spec in &specs {
        pipeline.submit(spec).await;
    }

    // While they run, a queued one says what it waits for.
    let store = execplane::store::Store::from_pool(pool.clone());
    let wait = queued_wait(&pool, &store).await;
    assert!(
        ["node:node-a", "node:node-b"].contains(&wait["key"].as_str().unwrap()),
        "{wait}"
    );
    assert_eq!(wait["limit"], 1, "{wait}");
    assert!(
        wait["holders"].as_i64().unwrap() + wait["ahead"].as_i64().unwrap() >= 1,
        "{wait}"
    );

    for spec in &specs {
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert_eq!(attempts[0].1, "succeeded", "{attempts:?}");
    }

    // The stranded one is still waiting; cancelled, it lets go of its key.
    let waiting = pipeline.attempts(&stranded.job_id).await;
    assert_eq!(waiting[0].1, "queued", "{waiting:?}");
    pipeline.cancel(waiting[0].0, 1_000).await;
    pipeline.wait_done(&stranded.job_id, WAIT).await;

    // The log: each attempt's lease from its grant to its end.
    let jobs: Vec<String> = specs.iter().map(|spec| spec.job_id.clone()).collect();
    let mut by_key = leases::by_key(&pool, &jobs).await;
    assert_eq!(
        by_key.keys().collect::<Vec<_>>(),
        vec!["node:node-a", "node:node-b"]
    );
    assert!(by_key.values().all(|held| held.len() == 10), "{by_key:?}");
    leases::assert_serial_per_key_parallel_across(&mut by_key, "node:node-a", "node:node-b");

    // Nothing is left behind: an ended attempt holds and waits for nothing.
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM target_keys")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    let report = store.rebuild_verify(false).await.unwrap();
    assert!(report.diffs.is_empty(), "{:?}", report.diffs);
}
