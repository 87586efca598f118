//! The Kafka pipeline end to end on the real stack: Tansu, Postgres, and
//! `execplane` role processes (dispatcher, relay, verification runners).

mod common;

use std::time::Duration;

use common::http::Server;
use common::pipeline::{job, Pipeline};
use execplane::codec::{Codec, Family, ResultRecord};
use execplane::contract::{topics, EventBody};
use rdkafka::Message;
use serde_json::json;
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(60);

fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn verification_jobs_reach_the_right_terminal_states_and_are_published(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let target = Server::start(vec![], 200).await;
    let ok = job(
        "verify.http.endpoint",
        json!({"url": target.url("/health"), "expect": {"status": 200}}),
        json!({}),
    );
    let wrong = job(
        "verify.http.endpoint",
        json!({"url": target.url("/health"), "expect": {"status": 204}}),
        json!({"retry": {"max_attempts": 2, "initial_backoff": "100ms", "max_backoff": "100ms"}}),
    );
    let unreachable = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": closed_port(), "timeout": "1s"}),
        json!({"retry": {"max_attempts": 1}}),
    );
    let postgres = job(
        "verify.postgres.ready",
        json!({"host": "127.0.0.1", "port": 5432, "database": "postgres", "user": "postgres"}),
        json!({}),
    );
    for spec in [&ok, &wrong, &unreachable, &postgres] {
        pipeline.submit(spec).await;
    }
    assert_eq!(
        pipeline.wait_done(&ok.job_id, WAIT).await.last().unwrap().1,
        "succeeded"
    );
    let failed = pipeline.wait_done(&wrong.job_id, WAIT).await;
    assert_eq!(
        (failed.len(), failed[0].1.as_str(), failed[0].2.as_deref()),
        (1, "failed", Some("verification_failed")),
        "business failures are not retried"
    );
    let refused = pipeline.wait_done(&unreachable.job_id, WAIT).await;
    assert_eq!(
        (refused[0].1.as_str(), refused[0].2.as_deref()),
        ("failed", Some("target_unreachable"))
    );
    assert_eq!(
        pipeline
            .wait_done(&postgres.job_id, WAIT)
            .await
            .last()
            .unwrap()
            .1,
        "succeeded"
    );

    // The evidence: two samples for the failing assertion (its retry policy).
    let evidence: String = sqlx::query_scalar("SELECT result_json FROM attempts WHERE job_id = $1")
        .bind(&wrong.job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    let evidence: serde_json::Value = serde_json::from_str(&evidence).unwrap();
    assert_eq!(evidence["samples"].as_array().unwrap().len(), 2);
    assert_eq!(
        evidence["recommended_failure_category"],
        "verification_failed"
    );

    // Published in order, a faithful copy of the log; results on their topic.
    pipeline
        .wait("the relay to drain the outbox", WAIT, || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox")
                .fetch_one(&pool)
                .await
                .unwrap()
                == 0
        })
        .await;
    let published = pipeline.published_events().await;
    let stored = pipeline.stored_events().await;
    assert_eq!(published, stored);
    for events in published.values() {
        let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    }
    let results: Vec<ResultRecord> = pipeline
        .consume_all(topics::RESULTS)
        .await
        .iter()
        .map(|message| {
            Codec::default()
                .decode(Family::Result, message.payload().unwrap())
                .unwrap()
        })
        .collect();
    assert_eq!(results.len(), 4);
    assert!(results
        .iter()
        .any(|result| result.job_id == ok.job_id && result.idempotency_key.ends_with(":4")));
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn http_callbacks_are_retried_with_a_stable_idempotency_key_and_recorded(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let receiver = Server::start(vec![500, 500, 200], 200).await;
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({"callback": {"url": receiver.url("/callbacks")}}),
    );
    pipeline.submit(&spec).await;
    let attempt = pipeline.wait_done(&spec.job_id, WAIT).await[0].0;
    pipeline
        .wait("the callback outcome to be recorded", WAIT, || async {
            pipeline
                .events_of(attempt)
                .await
                .contains(&"callback_recorded".to_owned())
        })
        .await;
    let requests = receiver.requests();
    assert_eq!(requests.len(), 3, "two 500s, then delivered");
    let keys: Vec<&str> = requests
        .iter()
        .map(|request| request.header("idempotency-key").unwrap())
        .collect();
    assert!(
        keys.iter().all(|key| *key == format!("{attempt}:4")),
        "{keys:?}"
    );
    let body: serde_json::Value = serde_json::from_str(&requests[2].body).unwrap();
    assert_eq!(body["status"], "succeeded");
    assert_eq!(requests[2].method, "POST");
    let store = execplane::store::Store::from_pool(pool.clone());
    let recorded = store
        .history(attempt)
        .await
        .unwrap()
        .last()
        .unwrap()
        .decode()
        .unwrap();
    match recorded.body {
        EventBody::CallbackRecorded {
            delivered,
            attempts,
            http_status,
            ..
        } => assert_eq!((delivered, attempts, http_status), (true, 3, Some(200))),
        other => panic!("{other:?}"),
    }
    // Exactly one delivery per terminal state: nothing more arrives.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(receiver.requests().len(), 3);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_same_command_three_times_across_a_dispatcher_restart_is_one_job(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let (dispatcher, _, _) = pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    pipeline.submit(&spec).await;
    pipeline.submit(&spec).await;
    pipeline.wait_done(&spec.job_id, WAIT).await;
    pipeline.signal(dispatcher, "KILL");
    pipeline.submit(&spec).await;
    pipeline.spawn(&["dispatcher"], &[]);
    // The restarted dispatcher reads the third copy (and possibly the first two again).
    pipeline.wait("the third copy to be consumed", WAIT, || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM inbox WHERE input_id = $1").bind(format!("command:{}", spec.command_id)).fetch_one(&pool).await.unwrap() == 1
            && sqlx::query_scalar::<_, i64>("SELECT count(*) FROM runner_instances WHERE last_seen_at > now() - interval '1 second'").fetch_one(&pool).await.unwrap() >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs")
            .fetch_one(&pool)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM attempts")
            .fetch_one(&pool)
            .await
            .unwrap(),
        1
    );
}
