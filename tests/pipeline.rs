//! The Kafka pipeline end to end on the real stack: Apache Kafka, Postgres, and
//! `execplane` role processes (dispatcher, relay, verification runners).

mod common;

use std::time::Duration;

use common::http::{Reply, Server};
use common::pipeline::{job, Pipeline};
use execplane::codec::{Codec, CommandRecord, Family, ResultRecord};
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
    // The JobSpec's targets are nodes the tenant may name.
    let policy = pipeline.dir.join("targets-policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "{}  ssh:\n    nodes: [\"127.0.0.0/8\"]\n",
            common::pipeline::LOOPBACK_POLICY
        ),
    )
    .unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy.to_str().unwrap());
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let target = Server::start(vec![], 200).await;
    // Aimed at the JobSpec's targets by id: the probes connect to their
    // addresses.
    let ok = job(
        "verify.http.endpoint",
        json!({"url": format!("http://web-1:{}/health", target.port), "target": "web-1",
               "expect": {"status": 200}}),
        json!({"targets": [{"kind": "node", "id": "web-1", "address": target.host}]}),
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
        json!({"target": "db", "port": 5432, "database": "postgres", "user": "postgres"}),
        json!({"targets": [{"kind": "node", "id": "db", "address": "127.0.0.1"}]}),
    );
    // Its own query, in a read-only transaction: what it returns is the
    // contract; a write is refused by the server, and nothing is written.
    let query = |query: &str, expect: serde_json::Value| {
        job(
            "verify.postgres.ready",
            json!({"host": "127.0.0.1", "database": "postgres", "user": "postgres",
                   "query": query, "expect": expect}),
            json!({"retry": {"max_attempts": 1}}),
        )
    };
    let answered = query(
        "SELECT current_database()::text FROM generate_series(1, 3)",
        json!({"value": "postgres", "rows": 3}),
    );
    let miscounted = query("SELECT 'x'::text", json!({"rows": 2}));
    let table = format!("probe_{}", uuid::Uuid::new_v4().simple());
    // Run as a subquery of a read-only transaction: neither a statement
    // that writes nor a writing WITH gets through.
    let writes = query(&format!("CREATE TABLE {table} (x int)"), json!({}));
    let sneaks = query(
        &format!("WITH made AS (INSERT INTO {table} VALUES (1) RETURNING x) SELECT x FROM made"),
        json!({}),
    );
    for spec in [
        &ok,
        &wrong,
        &unreachable,
        &postgres,
        &answered,
        &miscounted,
        &writes,
        &sneaks,
    ] {
        pipeline.submit(spec).await;
    }
    let ran = pipeline.wait_done(&answered.job_id, WAIT).await;
    assert_eq!(ran[0].1, "succeeded", "{ran:?}");
    for spec in [&miscounted, &writes, &sneaks] {
        let done = pipeline.wait_done(&spec.job_id, WAIT).await;
        assert_eq!(
            (done[0].1.as_str(), done[0].2.as_deref()),
            ("failed", Some("verification_failed")),
            "{}",
            spec.inputs
        );
    }
    let message: String = sqlx::query_scalar("SELECT message FROM attempts WHERE job_id = $1")
        .bind(&writes.job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(message.contains("postgres refused"), "{message}");
    let probed = sqlx::PgPool::connect(&std::env::var("DATABASE_URL").unwrap())
        .await
        .unwrap();
    let created: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(&table)
        .fetch_one(&probed)
        .await
        .unwrap();
    assert_eq!(created, None, "a probe's query wrote");
    // A target the JobSpec does not hold is refused at intake.
    let mut stray = postgres.clone();
    stray.inputs["target"] = json!("nowhere");
    let problems =
        execplane::contract::validate_jobspec(&serde_json::to_value(&stray).unwrap()).unwrap_err();
    assert_eq!(problems.0[0].path, "inputs.target", "{problems:?}");
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
    pipeline.wait_published(WAIT).await;
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
    assert_eq!(results.len(), 8);
    assert!(results
        .iter()
        .any(|result| result.job_id == ok.job_id && result.idempotency_key.ends_with(":4")));
}

/// A body contract (a JSON Schema and a pattern) and evidence that must
/// pass three samples in a row, on a steady endpoint and a flapping one.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_body_schema_and_passes_in_a_row_judge_an_endpoint(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.start_roles(1);
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    pipeline.wait_runners(1).await;
    let flaps = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let target = Server::start_on(
        "127.0.0.1",
        std::sync::Arc::new(move |request: &common::http::Received| {
            let healthy = r#"{"status": "ok", "replicas": 3}"#;
            let n = match request.path.as_str() {
                "/flapping" => flaps.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                _ => 0,
            };
            // The flapping endpoint's 2nd and 5th answers are degraded.
            let body = if n % 3 == 1 {
                r#"{"status": "degraded", "replicas": 1}"#
            } else {
                healthy
            };
            Reply::Body(body.to_owned())
        }),
    )
    .await;
    let schema = json!({
        "type": "object", "required": ["status", "replicas"],
        "properties": {"status": {"const": "ok"}, "replicas": {"type": "integer", "minimum": 3}}
    });
    let retry = |max_attempts: u32| json!({"retry": {"max_attempts": max_attempts, "initial_backoff": "100ms", "max_backoff": "100ms"}});
    let verify = |path: &str, schema: &serde_json::Value, max_attempts: u32| {
        job(
            "verify.http.endpoint",
            json!({"url": target.url(path),
                   "expect": {"body_schema": schema, "body_matches": r#""replicas": \d+"#},
                   "evidence": {"consecutive_passes": 3}}),
            retry(max_attempts),
        )
    };
    let mut steady = verify("/steady", &schema, 1);
    steady.inputs["expect"]["body_json"] = json!({"/status": "ok", "/replicas": 3});
    let mut flapping = verify("/flapping", &schema, 5);
    flapping.inputs["evidence"]["keep"] = json!(["samples", "bodies"]);
    let mut too_few = schema.clone();
    too_few["properties"]["replicas"]["minimum"] = 4.into();
    let short = verify("/steady", &too_few, 1);
    for spec in [&steady, &flapping, &short] {
        pipeline.submit(spec).await;
    }
    let evidence = |job_id: String| {
        let pool = pool.clone();
        async move {
            let text: String =
                sqlx::query_scalar("SELECT result_json FROM attempts WHERE job_id = $1")
                    .bind(job_id)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            serde_json::from_str::<serde_json::Value>(&text).unwrap()
        }
    };
    // Three samples are taken though `retry` allows one, and all pass.
    let done = pipeline.wait_done(&steady.job_id, WAIT).await;
    assert_eq!(done.last().unwrap().1, "succeeded", "{done:?}");
    let passed = evidence(steady.job_id.clone()).await;
    assert_eq!(passed["samples"].as_array().unwrap().len(), 3, "{passed}");
    assert_eq!(passed["consecutive_passes"], 3);
    // good, bad, good, good, bad: never three in a row in five samples.
    let done = pipeline.wait_done(&flapping.job_id, WAIT).await;
    assert_eq!(
        (done[0].1.as_str(), done[0].2.as_deref()),
        ("failed", Some("verification_failed")),
        "{done:?}"
    );
    let flapped = evidence(flapping.job_id.clone()).await;
    let passes: Vec<bool> = flapped["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sample| {
            sample["assertions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|a| a["passed"] == true)
        })
        .collect();
    assert_eq!(passes, [true, false, true, true, false], "{flapped}");
    // Kept as asked: the whole evidence, and each sample's body.
    let attempt = done[0].0;
    assert_eq!(flapped["evidence_artifact"], "evidence.json", "{flapped}");
    let kept: serde_json::Value =
        serde_json::from_slice(&pipeline.download(attempt, "evidence.json").await).unwrap();
    let mut without_ref = flapped.clone();
    without_ref
        .as_object_mut()
        .unwrap()
        .remove("evidence_artifact");
    assert_eq!(kept, without_ref);
    assert_eq!(flapped["samples"][1]["observed"]["body_artifact"], "body-2");
    assert_eq!(
        pipeline.download(attempt, "body-2").await,
        br#"{"status": "degraded", "replicas": 1}"#
    );
    assert_eq!(
        pipeline.download(attempt, "body-5").await,
        pipeline.download(attempt, "body-2").await
    );
    // The schema's error names the field that broke it, in the evidence.
    let done = pipeline.wait_done(&short.job_id, WAIT).await;
    assert_eq!(
        done[0].2.as_deref(),
        Some("verification_failed"),
        "{done:?}"
    );
    let broken = evidence(short.job_id.clone()).await;
    let schema_assertion = &broken["samples"][0]["assertions"][2];
    assert_eq!(schema_assertion["name"], "body_schema", "{broken}");
    assert!(
        schema_assertion["actual"][0]
            .as_str()
            .unwrap()
            .starts_with("at `/replicas`"),
        "{broken}"
    );
    assert_eq!(broken["samples"].as_array().unwrap().len(), 1, "{broken}");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn with_confluent_framing_configured_a_job_runs_end_to_end(pool: PgPool) {
    let ids: Vec<(Family, u32)> = Family::ALL
        .into_iter()
        .enumerate()
        .map(|(index, family)| (family, 41 + index as u32))
        .collect();
    let mut pipeline = Pipeline::confluent(&pool, &ids).await;
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    pipeline.submit(&spec).await;
    assert_eq!(
        pipeline.wait_done(&spec.job_id, WAIT).await[0].1,
        "succeeded"
    );
    pipeline.wait_published(WAIT).await;
    // Every record every role wrote is framed 00 + the family's registry id.
    let id_of = |family: Family| ids.iter().find(|(f, _)| *f == family).unwrap().1;
    for (topic, family) in [
        (topics::ATTEMPT_EVENTS, Family::AttemptEvent),
        (topics::RESULTS, Family::Result),
        (topics::RUNNER_EVENTS, Family::RunnerEvent),
        (topics::RUNNER_PRESENCE, Family::Presence),
        ("exec.work.verification.v1", Family::WorkItem),
    ] {
        let records = pipeline.consume_all(topic).await;
        assert!(!records.is_empty(), "{topic}");
        for record in records {
            let payload = record.payload().unwrap();
            assert_eq!(payload[0], 0, "{topic}: Confluent magic byte");
            assert_eq!(
                u32::from_be_bytes(payload[1..5].try_into().unwrap()),
                id_of(family),
                "{topic}"
            );
        }
    }
    assert_eq!(
        pipeline.published_events().await,
        pipeline.stored_events().await
    );
    // Both example consumers read the Confluent records, given the id of
    // the schema (docs/EVENTS.md), and fold them to the database's states;
    // the chain proves itself as in the default framing.
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/attempt-events.avsc");
    let id = [
        "--confluent-id".to_owned(),
        format!("{}={schema}", id_of(Family::AttemptEvent)),
    ];
    let topic = pipeline.kafka.topic(topics::ATTEMPT_EVENTS);
    let states = common::consumers::stored_states(&pool).await;
    for (name, command) in common::consumers::each() {
        let fold = common::consumers::fold(name, command, &pipeline.brokers, &topic, &id);
        assert_eq!(
            common::consumers::folded_states(&fold),
            states,
            "the {name} consumer"
        );
    }
    let verified = pipeline.run(&["audit", "verify", "--from-kafka"], &[]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
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
    // A job of its own behind the third copy, on its partition (same key):
    // once it exists, the third copy was decided.
    let marker = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    let record = CommandRecord::execute(&marker, chrono::Utc::now().timestamp_millis());
    let payload = pipeline
        .kafka
        .codec
        .encode(Family::Command, &record)
        .unwrap();
    pipeline
        .produce(topics::COMMANDS, &spec.job_id, &payload)
        .await;
    pipeline.spawn(&["dispatcher"], &[]);
    // The restarted dispatcher reads the third copy (and possibly the first two again).
    pipeline
        .wait("the third copy to be consumed", WAIT, || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs WHERE job_id = $1")
                .bind(&marker.job_id)
                .fetch_one(&pool)
                .await
                .unwrap()
                == 1
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM attempts WHERE job_id = $1")
            .bind(&spec.job_id)
            .fetch_one(&pool)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs")
            .fetch_one(&pool)
            .await
            .unwrap(),
        2
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_killed_runner_loses_its_lease_and_a_read_only_job_succeeds_on_another(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let (_, _, runners) = pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    // Long enough to be killed mid-attempt; the retry's sleep is short.
    let spec = job(
        "verify.custom.probe",
        json!({"probe_id": "sleep", "args": {"seconds": 4}}),
        json!({"retry": {"max_attempts": 2, "initial_backoff": "100ms", "max_backoff": "100ms"}}),
    );
    pipeline.submit(&spec).await;
    let first = pipeline.wait_status(&spec.job_id, "running", WAIT).await;
    pipeline.signal(runners[0], "KILL");
    pipeline.spawn(&["runner", "verification"], &[]);
    let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(
        (attempts[0].1.as_str(), attempts[0].2.as_deref()),
        ("failed", Some("lease_lost"))
    );
    assert_eq!(attempts[1].1, "succeeded");
    assert_eq!(attempts[0].0, first);
    let holders: Vec<String> = sqlx::query_scalar("SELECT runner_instance FROM leases l JOIN attempts a USING (attempt_id) WHERE a.job_id = $1 ORDER BY epoch")
        .bind(&spec.job_id)
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_ne!(holders[0], holders[1], "the retry ran on another instance");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_stopped_runner_fences_itself_when_it_runs_again_and_its_late_report_is_fenced(
    pool: PgPool,
) {
    let mut pipeline = Pipeline::new(&pool).await;
    let (_, _, runners) = pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let spec = job(
        "verify.custom.probe",
        json!({"probe_id": "sleep", "args": {"seconds": 30}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&spec).await;
    let attempt = pipeline.wait_status(&spec.job_id, "running", WAIT).await;
    pipeline.signal(runners[0], "STOP");
    // Longer than the 4 s lease TTL: the sweeper takes the lease back.
    let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(
        (attempts[0].1.as_str(), attempts[0].2.as_deref()),
        ("failed", Some("lease_lost"))
    );
    pipeline.signal(runners[0], "CONT");
    // On waking, the runner fences itself at once and reports; the report is fenced.
    pipeline
        .wait("the late report to be fenced", WAIT, || async {
            pipeline
                .events_of(attempt)
                .await
                .contains(&"report_fenced".to_owned())
        })
        .await;
    let log = std::fs::read_to_string(pipeline.dir.join("runner-verification-2.log")).unwrap();
    assert!(
        log.contains("fencing myself") || log.contains("lease revoked"),
        "{log}"
    );
    // Nothing but bookkeeping after the terminal event.
    let kinds = pipeline.events_of(attempt).await;
    let terminal = kinds.iter().position(|kind| kind == "finished").unwrap();
    assert!(
        kinds[terminal + 1..]
            .iter()
            .all(|kind| kind == "report_fenced"),
        "{kinds:?}"
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn cancelling_a_running_probe_stops_it_and_a_queued_attempt_is_cancelled_at_once(
    pool: PgPool,
) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let long = job(
        "verify.custom.probe",
        json!({"probe_id": "hang"}),
        json!({}),
    );
    pipeline.submit(&long).await;
    let attempt = pipeline.wait_status(&long.job_id, "running", WAIT).await;
    let asked = std::time::Instant::now();
    pipeline.cancel(attempt, 3_000).await;
    let attempts = pipeline.wait_done(&long.job_id, WAIT).await;
    assert_eq!(attempts[0].1, "cancelled");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "confirmed within the grace period"
    );
    let kinds = pipeline.events_of(attempt).await;
    assert!(kinds.contains(&"cancel_requested".to_owned()), "{kinds:?}");

    // No runner of the type matches this pool: the attempt stays queued.
    let queued = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({"runner_requirements": {"pool": {"zone": "nowhere"}}}),
    );
    pipeline.submit(&queued).await;
    let attempt = pipeline.wait_status(&queued.job_id, "queued", WAIT).await;
    pipeline.cancel(attempt, 3_000).await;
    assert_eq!(
        pipeline.wait_done(&queued.job_id, WAIT).await[0].1,
        "cancelled"
    );
    assert_eq!(
        pipeline.events_of(attempt).await,
        vec!["created", "finished"]
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn timeouts_fire_schedule_to_start_start_to_close_and_heartbeat(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let (_, _, runners) = pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    // No live runner is in this pool.
    let nobody = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({
            "timeouts": {"schedule_to_start": "2s", "start_to_close": "30s", "heartbeat": "2s", "schedule_to_close": "60s"},
            "runner_requirements": {"pool": {"zone": "nowhere"}}
        }),
    );
    // A hung probe.
    let hung = job(
        "verify.custom.probe",
        json!({"probe_id": "hang"}),
        json!({"timeouts": {"schedule_to_start": "20s", "start_to_close": "5s", "heartbeat": "4s", "schedule_to_close": "60s"}}),
    );
    pipeline.submit(&nobody).await;
    pipeline.submit(&hung).await;
    let nobody_attempts = pipeline.wait_done(&nobody.job_id, WAIT).await;
    assert_eq!(
        (
            nobody_attempts[0].1.as_str(),
            nobody_attempts[0].2.as_deref()
        ),
        ("timed_out", Some("timeout"))
    );
    let timer: String = sqlx::query_scalar("SELECT timer_fired FROM attempts WHERE job_id = $1")
        .bind(&nobody.job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(timer, "schedule_to_start");
    let hung_attempts = pipeline.wait_done(&hung.job_id, WAIT).await;
    assert_eq!(hung_attempts[0].1, "timed_out");
    let timer: String = sqlx::query_scalar("SELECT timer_fired FROM attempts WHERE job_id = $1")
        .bind(&hung.job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(timer, "start_to_close");

    // A runner that stops heartbeating: the heartbeat timer takes the lease.
    let silent = job(
        "verify.custom.probe",
        json!({"probe_id": "hang"}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&silent).await;
    pipeline.wait_status(&silent.job_id, "running", WAIT).await;
    pipeline.signal(runners[0], "STOP");
    let silent_attempts = pipeline.wait_done(&silent.job_id, WAIT).await;
    pipeline.signal(runners[0], "CONT");
    assert_eq!(
        (
            silent_attempts[0].1.as_str(),
            silent_attempts[0].2.as_deref()
        ),
        ("failed", Some("lease_lost"))
    );
    let timer: String = sqlx::query_scalar("SELECT timer_fired FROM attempts WHERE job_id = $1")
        .bind(&silent.job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(timer, "heartbeat");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn poison_records_end_in_the_dlq_or_as_rejected_attempts_and_intake_keeps_going(
    pool: PgPool,
) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    pipeline
        .produce(topics::COMMANDS, "garbage", b"\x00\x01not avro at all")
        .await;
    let mut unknown = vec![0xC3, 0x01];
    unknown.extend_from_slice(&0xdead_beef_u64.to_le_bytes());
    unknown.extend_from_slice(b"payload");
    pipeline
        .produce(topics::COMMANDS, "unknown-schema", &unknown)
        .await;
    pipeline
        .produce(topics::RUNNER_EVENTS, "garbage", b"{\"json\": true}")
        .await;
    // Valid Avro carrying an invalid JobSpec: a rejected attempt with the reason.
    let mut invalid = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    invalid.inputs = json!({"host": "127.0.0.1"});
    invalid.timeouts.heartbeat = execplane::contract::DurationMs(100);
    pipeline.submit(&invalid).await;
    // And the consumer keeps going.
    let good = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    pipeline.submit(&good).await;
    assert_eq!(
        pipeline.wait_done(&good.job_id, WAIT).await[0].1,
        "succeeded"
    );
    // The same command id again, for another job: dead-lettered, not lost.
    let mut reused = good.clone();
    reused.job_id = format!("{}-other", good.job_id);
    pipeline.submit(&reused).await;
    let rejected = pipeline.wait_done(&invalid.job_id, WAIT).await;
    assert_eq!(
        (rejected[0].1.as_str(), rejected[0].2.as_deref()),
        ("rejected", Some("contract"))
    );
    let message: String = sqlx::query_scalar("SELECT message FROM attempts WHERE job_id = $1")
        .bind(&invalid.job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        message.contains("inputs.port") && message.contains("timeouts.heartbeat"),
        "{message}"
    );
    pipeline
        .wait(
            "the reused command id to be dead-lettered",
            WAIT,
            || async { pipeline.consume_all(topics::DLQ).await.len() >= 4 },
        )
        .await;
    let dead: Vec<String> = pipeline
        .consume_all(topics::DLQ)
        .await
        .iter()
        .map(|message| {
            use rdkafka::message::Headers;
            let headers = message.headers().unwrap();
            headers
                .iter()
                .find(|header| header.key == "execplane_dlq_reason")
                .map(|header| String::from_utf8_lossy(header.value.unwrap()).into_owned())
                .unwrap()
        })
        .collect();
    assert_eq!(dead.len(), 4, "{dead:?}");
    // Named with both jobs (the job's row, not the inbox, holds the id).
    assert!(
        dead.iter()
            .any(|reason| reason.contains("already created job")
                && reason.contains(&format!("`{}`", good.job_id))
                && reason.contains(&reused.job_id)),
        "{dead:?}"
    );
    assert!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs WHERE job_id = $1")
            .bind(&reused.job_id)
            .fetch_one(&pool)
            .await
            .unwrap()
            == 0
    );
    assert!(
        dead.iter().any(|reason| reason.contains("unknown framing")),
        "{dead:?}"
    );
    assert!(
        dead.iter()
            .any(|reason| reason.contains("unknown schema fingerprint")),
        "{dead:?}"
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_dispatcher_killed_mid_batch_loses_nothing_and_the_published_log_folds_to_the_database(
    pool: PgPool,
) {
    let mut pipeline = Pipeline::new(&pool).await;
    let (dispatcher, _, _) = pipeline.start_roles(2);
    pipeline.wait_runners(2).await;
    let specs: Vec<_> = (0..150)
        .map(|_| {
            job(
                "verify.tcp.connect",
                json!({"host": "127.0.0.1", "port": 5432}),
                json!({}),
            )
        })
        .collect();
    for spec in &specs[..75] {
        pipeline.submit(spec).await;
    }
    // Kill it while it is taking in batches.
    pipeline
        .wait("some attempts to exist", WAIT, || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM attempts")
                .fetch_one(&pool)
                .await
                .unwrap()
                > 5
        })
        .await;
    pipeline.signal(dispatcher, "KILL");
    for spec in &specs[75..] {
        pipeline.submit(spec).await;
    }
    pipeline.spawn(&["dispatcher"], &[]);
    for spec in &specs {
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        assert_eq!(attempts.last().unwrap().1, "succeeded", "{}", spec.job_id);
    }
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs")
            .fetch_one(&pool)
            .await
            .unwrap(),
        150
    );
    let double: i64 = sqlx::query_scalar("SELECT count(*) FROM (SELECT attempt_id FROM attempt_events WHERE terminal GROUP BY attempt_id HAVING count(*) > 1) d").fetch_one(&pool).await.unwrap();
    assert_eq!(double, 0);
    let rebuild = common::execplane(&pool, &["projection", "rebuild", "--verify"]);
    assert!(
        rebuild.status.success(),
        "{}",
        String::from_utf8_lossy(&rebuild.stderr)
    );
    pipeline.wait_published(WAIT).await;
    // Fold exec.attempt-events.v1 from the beginning: equal to the Postgres log
    // (a re-published record is recognised by its event id).
    let mut published = pipeline.published_events().await;
    for events in published.values_mut() {
        let mut seen = std::collections::HashSet::new();
        events.retain(|event| seen.insert(event.event_id));
    }
    let stored = pipeline.stored_events().await;
    assert_eq!(published.len(), stored.len());
    assert_eq!(published, stored);
    // Each attempt folds to the state the database holds (an attempt that
    // lost its lease on a loaded machine is `failed`, its retry
    // `succeeded`: every job's last attempt succeeded, checked above).
    let statuses: std::collections::HashMap<uuid::Uuid, String> =
        sqlx::query_as("SELECT attempt_id, status FROM attempts")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    for (attempt, events) in &published {
        let folded = execplane::attempt::rebuild(events).unwrap().unwrap();
        assert_eq!(folded.status.as_str(), statuses[attempt], "{attempt}");
    }
}

/// A broker of this test's own whose advertised address is a proxy, so that
/// every client's connections (bootstrap and after) go through it.
struct OwnBroker {
    // Dropped after the proxy: fields drop in order.
    proxy: common::proxy::Proxy,
    _cluster: common::kafka::Cluster,
}

async fn own_broker() -> OwnBroker {
    let proxy_port = closed_port();
    let cluster =
        tokio::task::spawn_blocking(move || common::kafka::Cluster::start(1, Some(proxy_port)))
            .await
            .unwrap();
    let proxy = common::proxy::Proxy::start_on(proxy_port, cluster.client_port(1));
    OwnBroker {
        proxy,
        _cluster: cluster,
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_runner_cut_off_from_the_broker_stops_its_work_before_its_lease_deadline(pool: PgPool) {
    let broker = own_broker().await;
    let mut pipeline =
        Pipeline::with_brokers(&pool, format!("127.0.0.1:{}", broker.proxy.port)).await;
    let (_, _, runners) = pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let spec = job(
        "verify.custom.probe",
        json!({"probe_id": "sleep", "args": {"seconds": 60}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&spec).await;
    let attempt = pipeline.wait_status(&spec.job_id, "running", WAIT).await;
    broker.proxy.cut(pipeline.pid(runners[0]) as u32);
    let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(
        (attempts[0].1.as_str(), attempts[0].2.as_deref()),
        ("failed", Some("lease_lost"))
    );
    // The runner stopped the tool before the lease it last held expired.
    let expires_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT expires_at FROM leases WHERE attempt_id = $1")
            .bind(attempt)
            .fetch_one(&pool)
            .await
            .unwrap();
    let log = std::fs::read_to_string(pipeline.dir.join("runner-verification-2.log")).unwrap();
    let plain: String = strip_ansi(&log);
    let fenced_line = plain
        .lines()
        .find(|line| line.contains("fencing myself"))
        .unwrap_or_else(|| panic!("the runner never fenced itself:\n{plain}"));
    let fenced_at =
        chrono::DateTime::parse_from_rfc3339(fenced_line.split_whitespace().next().unwrap())
            .unwrap();
    assert!(
        fenced_at < expires_at,
        "fenced at {fenced_at}, lease expired at {expires_at}"
    );
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(character) = chars.next() {
        if character == '\u{1b}' {
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(character);
        }
    }
    out
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn submit_follows_a_job_to_its_end_and_a_draining_runner_hands_back_what_it_cannot_finish(
    pool: PgPool,
) {
    let mut pipeline = Pipeline::new(&pool).await;
    let (_, _, runners) = pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    // `execplane submit`: exit 0 on success, 1 on another end, 2 when invalid.
    let run_submit = |spec: &execplane::contract::JobSpec| {
        let path = pipeline.dir.join(format!("{}.json", spec.command_id));
        std::fs::write(&path, serde_json::to_vec(spec).unwrap()).unwrap();
        let url = pipeline.url.clone();
        let prefix = pipeline.prefix.clone();
        let brokers = pipeline.brokers.clone();
        let policy = pipeline.loopback_policy();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_execplane"))
                .args(["submit", path.to_str().unwrap(), "--timeout", "60s"])
                .env("EXECPLANE_POLICY_FILE", policy)
                .env("EXECPLANE_DATABASE_URL", url)
                .env("EXECPLANE_TOPIC_PREFIX", prefix)
                .env("EXECPLANE_KAFKA_BROKERS", brokers)
                .env("EXECPLANE_LOG", "warn")
                .output()
                .unwrap()
        })
    };
    let ok = run_submit(&job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    ))
    .await
    .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    let timeline = String::from_utf8_lossy(&ok.stdout);
    for kind in ["created", "lease_granted", "started", "finished"] {
        assert!(timeline.contains(kind), "{timeline}");
    }
    let failing = run_submit(&job(
        "verify.custom.probe",
        json!({"probe_id": "fail"}),
        json!({"retry": {"max_attempts": 1}}),
    ))
    .await
    .unwrap();
    assert_eq!(failing.status.code(), Some(1));
    let mut invalid = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    invalid.inputs = json!({});
    assert_eq!(run_submit(&invalid).await.unwrap().status.code(), Some(2));

    // SIGTERM while an attempt runs: the runner drains (5 s here), then
    // stops it and reports a retryable infrastructure failure; a new
    // runner finishes the job.
    let spec = job(
        "verify.custom.probe",
        json!({"probe_id": "sleep", "args": {"seconds": 20}}),
        json!({"retry": {"max_attempts": 2, "initial_backoff": "100ms", "max_backoff": "100ms"}}),
    );
    pipeline.submit(&spec).await;
    pipeline.wait_status(&spec.job_id, "running", WAIT).await;
    pipeline.signal(runners[0], "TERM");
    pipeline
        .wait("the first attempt to end", WAIT, || async {
            pipeline.attempts(&spec.job_id).await.len() == 2
        })
        .await;
    let attempts = pipeline.attempts(&spec.job_id).await;
    assert_eq!(
        (attempts[0].1.as_str(), attempts[0].2.as_deref()),
        ("failed", Some("infrastructure"))
    );
    let draining: String = sqlx::query_scalar(
        "SELECT status FROM runner_instances ORDER BY last_seen_at DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_ne!(draining, "ready", "the runner announced it is going away");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn submitting_a_command_that_already_ran_reports_its_outcome_at_once(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    pipeline.submit(&spec).await;
    pipeline.wait_done(&spec.job_id, WAIT).await;
    let path = pipeline.dir.join("again.json");
    std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let started = std::time::Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_execplane"))
        .args(["submit", path.to_str().unwrap(), "--timeout", "60s"])
        .env("EXECPLANE_POLICY_FILE", pipeline.loopback_policy())
        .env("EXECPLANE_DATABASE_URL", &pipeline.url)
        .env("EXECPLANE_TOPIC_PREFIX", &pipeline.prefix)
        .env("EXECPLANE_KAFKA_BROKERS", &pipeline.brokers)
        .env("EXECPLANE_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(String::from_utf8_lossy(&output.stdout).contains("already ran"));
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM attempts")
            .fetch_one(&pool)
            .await
            .unwrap(),
        1
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_dispatcher_serves_prometheus_metrics(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let port = closed_port().to_string();
    let address = format!("127.0.0.1:{port}");
    pipeline.spawn(
        &["dispatcher"],
        &[("EXECPLANE_METRICS_ADDR", address.as_str())],
    );
    pipeline.spawn(&["relay"], &[("EXECPLANE_METRICS_ADDR", "")]);
    pipeline.spawn(
        &["runner", "verification"],
        &[("EXECPLANE_METRICS_ADDR", "")],
    );
    pipeline.wait_runners(1).await;
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    pipeline.submit(&spec).await;
    pipeline.wait_done(&spec.job_id, WAIT).await;
    let scrape = || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    };
    pipeline
        .wait("the terminal state to be counted", WAIT, || async {
            scrape().contains("execplane_attempts_ended_total{state=\"succeeded\"} 1")
        })
        .await;
    let text = scrape();
    for name in [
        "execplane_lease_grants_total 1",
        "execplane_intake_transaction_seconds",
        "# HELP execplane_lease_grants_total leases granted",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn every_example_runs_to_the_end_the_readme_gives_it(pool: PgPool) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    // | `examples/verify-tcp.json` | what it checks | `succeeded` |
    let expected: Vec<(String, String)> = readme
        .lines()
        // The ssh and ansible examples (in subdirectories) run on the
        // local sshd: tests/ansible.rs.
        .filter(|line| {
            line.strip_prefix("| `examples/")
                .is_some_and(|rest| !rest.split('`').next().unwrap_or("").contains('/'))
        })
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (
                cells[1].trim_matches('`').to_owned(),
                cells[3].trim_matches('`').to_owned(),
            )
        })
        .collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .map(|entry| format!("examples/{}", entry.unwrap().file_name().to_string_lossy()))
        // JobSpecs; `policy.yaml` is the example operator policy.
        .filter(|path| path.ends_with(".json"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = expected.iter().map(|(path, _)| path.clone()).collect();
    listed.sort();
    assert_eq!(listed, on_disk, "the README's table lists every example");

    let mut pipeline = Pipeline::new(&pool).await;
    // The HTTP example reads `serve`'s /metrics; here, the dispatcher's.
    let metrics = closed_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    pipeline.spawn(
        &["dispatcher"],
        &[("EXECPLANE_METRICS_ADDR", metrics_addr.as_str())],
    );
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(&["runner", "verification"], &[]);
    pipeline.wait_runners(1).await;
    for (path, end) in &expected {
        let text = std::fs::read_to_string(root.join(path))
            .unwrap()
            .replace("127.0.0.1:9464", &metrics_addr);
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["command_id"] = json!(uuid::Uuid::new_v4().to_string());
        value["job_id"] = json!(format!(
            "{}-{}",
            value["job_id"].as_str().unwrap(),
            uuid::Uuid::new_v4().simple()
        ));
        let spec = execplane::contract::validate_jobspec(&value)
            .unwrap_or_else(|problems| panic!("{path}: {problems}"));
        pipeline.submit(&spec).await;
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        assert_eq!(&attempts.last().unwrap().1, end, "{path}: {attempts:?}");
    }
}

/// A runner whose tool is missing announces nothing: on its own it stops
/// at start naming the tool; under `serve` it is left out, loudly, and the
/// runners that can run serve on.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_runner_whose_tool_is_missing_serves_no_job_that_needs_it(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[("EXECPLANE_METRICS_ADDR", "")]);
    let helm = pipeline.spawn(
        &["runner", "helm"],
        &[
            ("EXECPLANE_HELM_BIN", "/nonexistent/helm"),
            ("EXECPLANE_METRICS_ADDR", ""),
        ],
    );
    let status = pipeline
        .wait_exit(helm, Duration::from_secs(60))
        .expect("the runner stops at start");
    assert!(!status.success());
    let log = strip_ansi(&pipeline.log(helm));
    assert!(
        log.contains("the helm runner cannot run its tool: cannot run /nonexistent/helm"),
        "{log}"
    );

    let serve = pipeline.spawn(
        &["serve"],
        &[
            ("EXECPLANE_TOFU_BIN", "/nonexistent/tofu"),
            ("EXECPLANE_METRICS_ADDR", ""),
            ("EXECPLANE_RUNNER_CAPACITY", "2"),
        ],
    );
    // The runners' checks run at once and end in any order: wait until the
    // missing tool is named and the helm runner (whose tool the stack has)
    // is up, on a cold machine too.
    let ready_types = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT DISTINCT runner_type FROM runner_instances WHERE status = 'ready' ORDER BY 1",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    pipeline
        .wait(
            "the verification and helm runners up, and the opentofu one left out",
            Duration::from_secs(120),
            || async {
                let types = ready_types().await;
                types.contains(&"verification".to_owned())
                    && types.contains(&"helm".to_owned())
                    && strip_ansi(&pipeline.log(serve)).contains("/nonexistent/tofu")
            },
        )
        .await;
    let types = ready_types().await;
    assert!(types.contains(&"verification".to_owned()), "{types:?}");
    assert!(!types.contains(&"opentofu".to_owned()), "{types:?}");
    // The stack's helm answers: this serve's helm runner is there.
    assert!(types.contains(&"helm".to_owned()), "{types:?}");
    let log = strip_ansi(&pipeline.log(serve));
    assert!(
        log.contains("runner disabled") && log.contains("/nonexistent/tofu"),
        "{log}"
    );
    // `execplane operations --live`: which operations a live runner serves.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_execplane"))
        .args(["operations", "--live", "--json"])
        .env("EXECPLANE_DATABASE_URL", &pipeline.url)
        .env("EXECPLANE_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let live = |name: &str| {
        rows.iter()
            .find(|row| row["operation"] == name)
            .map(|row| row["live_runners"].as_i64().unwrap())
            .unwrap()
    };
    assert_eq!(live("opentofu.plan"), 0, "{rows:?}");
    assert!(live("verify.tcp.connect") >= 1, "{rows:?}");
}

/// A forged presence record (anyone who may produce to the presence topic)
/// with a NUL in a text or half a megabyte of it is skipped, and a good record
/// beside it in the same batch is stored all the same.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_forged_presence_record_is_skipped_and_the_good_one_beside_it_stored(pool: PgPool) {
    use execplane::codec::{Isolation, Presence, PresenceRecord, PresenceStatus};
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[("EXECPLANE_METRICS_ADDR", "")]);
    let pool_labels = std::collections::BTreeMap::new();
    let announce = |instance: &str| {
        let presence = Presence {
            runner_instance: instance,
            runner_type: "verification",
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pool: &pool_labels,
            capabilities: &[],
            operations: &["verify.tcp.connect".to_owned()],
            capacity: 1,
            in_flight: 0,
            work_partition: 0,
            started_at: chrono::Utc::now().timestamp_millis(),
            isolation: Isolation::Sandboxed,
        };
        PresenceRecord::new(
            &presence,
            PresenceStatus::Ready,
            chrono::Utc::now().timestamp_millis(),
        )
    };
    let mut nul = announce("verification-forged-nul");
    nul.version = "0.1\u{0}".into();
    let mut huge = announce("verification-forged-huge");
    huge.isolation = "x".repeat(500_000);
    let encode = |record: &PresenceRecord| {
        let payload = pipeline
            .kafka
            .codec
            .encode(Family::Presence, record)
            .unwrap();
        (record.runner_instance.clone(), payload)
    };
    let stored = |instance: String| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM runner_instances WHERE instance_id = $1",
            )
            .bind(instance)
            .fetch_one(&pool)
            .await
            .unwrap()
                == 1
        }
    };
    // Each forged record goes out together with a good one, so that the
    // two arrive in one batch; again, until the good one is stored (the
    // dispatcher reads presence from the end once it is up). A batch that
    // failed whole would never store it.
    for (forged, good) in [
        (&nul, "verification-good-1"),
        (&huge, "verification-good-2"),
    ] {
        let (forged_key, forged_payload) = encode(forged);
        let (good_key, good_payload) = encode(&announce(good));
        let deadline = std::time::Instant::now() + WAIT;
        while !stored(good.to_owned()).await {
            assert!(
                std::time::Instant::now() < deadline,
                "{good}, sent beside {forged_key}, was never stored"
            );
            tokio::join!(
                pipeline.produce(topics::RUNNER_PRESENCE, &forged_key, &forged_payload),
                pipeline.produce(topics::RUNNER_PRESENCE, &good_key, &good_payload),
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let forged: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runner_instances WHERE instance_id LIKE 'verification-forged-%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(forged, 0);
}

/// The topics on the broker whose names start with `prefix`.
fn topics_starting(prefix: &str) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", common::pipeline::brokers())
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    metadata
        .topics()
        .iter()
        .map(|topic| topic.name().to_owned())
        .filter(|name| name.starts_with(prefix))
        .collect()
}

async fn bench_schemas(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'execplane\\_bench\\_%'",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A bench run that is interrupted removes its schema and topics; one that
/// was killed leaves them, the next run says so, and `bench clean` removes
/// them (a broker holding them ran the bare pipeline at half speed).
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_interrupted_bench_cleans_up_and_bench_clean_removes_what_killed_runs_left(
    pool: PgPool,
) {
    let url = common::database_url(&pool);
    let bench = |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_execplane"));
        command
            .arg("bench")
            .args(args)
            .env("EXECPLANE_DATABASE_URL", &url)
            .env("EXECPLANE_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    };

    // What a killed run leaves: its schema and its topics; the next run
    // says so.
    let killed = format!("bench{}.", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let kafka = execplane::kafka::KafkaConfig {
        brokers: common::pipeline::brokers(),
        topic_prefix: killed.clone(),
        fetch_wait_ms: 100,
        codec: Default::default(),
        properties: Vec::new(),
        replication_factor: common::replication_factor(),
    };
    execplane::kafka::topology::apply(&kafka).await.unwrap();
    sqlx::query("CREATE SCHEMA execplane_bench_killed")
        .execute(&pool)
        .await
        .unwrap();
    let left = topics_starting(&killed).len();
    assert!(left > 0);

    // Interrupted mid-run: its jobs are flowing when SIGINT comes.
    let child = bench(&["pipeline", "--jobs", "100000", "--rate", "200", "--no-bare"])
        .spawn()
        .unwrap();
    let prefix = format!("bench{}", child.id());
    let mut schema = None;
    for _ in 0..600 {
        let running = bench_schemas(&pool).await;
        if let Some(name) = running
            .into_iter()
            .find(|name| name != "execplane_bench_killed")
        {
            let attempts: Option<i64> =
                sqlx::query_scalar(&format!("SELECT count(*) FROM {name}.attempts"))
                    .fetch_one(&pool)
                    .await
                    .ok();
            if attempts.unwrap_or(0) > 0 {
                schema = Some(name);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let schema = schema.expect("the bench ran jobs within 60 s");
    assert!(!topics_starting(&prefix).is_empty(), "its topics exist");
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(
        stderr.contains("earlier bench runs") && stderr.contains("`execplane bench clean`"),
        "{stderr}"
    );
    assert!(
        !bench_schemas(&pool).await.contains(&schema),
        "its schema {schema} is dropped"
    );
    gone(&prefix).await;

    let out = bench(&["clean"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("removed 1 bench schemas"), "{stdout}");
    assert_eq!(bench_schemas(&pool).await, Vec::<String>::new());
    gone(&killed).await;
}

/// Waits (up to 10 s) for the broker to list no topic starting with `prefix`.
async fn gone(prefix: &str) {
    for _ in 0..100 {
        if topics_starting(prefix).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("topics {:?} are still listed", topics_starting(prefix));
}
