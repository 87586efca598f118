//! Faults while jobs run, with the roles as separate processes: poison
//! records produced straight to Kafka, a relay killed between publishing
//! and deleting, relays whose lock connections are cut under load, and a
//! dispatcher paused while another sweeps timers.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use common::http::Server;
use common::pipeline::{job, Pipeline};
use execplane::codec::{CommandKind, CommandRecord, Family, JobSpecRecord, RunnerEventRecord};
use execplane::contract::{topics, ReportBody, RunnerReport};
use rdkafka::message::Headers;
use rdkafka::Message;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(90);

fn dlq_reasons(messages: &[rdkafka::message::OwnedMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|message| {
            message
                .headers()
                .and_then(|headers| {
                    headers
                        .iter()
                        .find(|header| header.key == "execplane_dlq_reason")
                        .and_then(|header| header.value)
                        .map(|value| String::from_utf8_lossy(value).into_owned())
                })
                .unwrap_or_default()
        })
        .collect()
}

async fn terminate_relay_backends(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'execplane-relay'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn nul_records_straight_to_kafka_are_isolated_and_shutdown_still_works(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let (dispatcher, _, _) = pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    // A command whose job id holds U+0000: it cannot even become a
    // rejected attempt (the id is not storable): dead-lettered.
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    let mut unstorable = JobSpecRecord::from(&spec);
    unstorable.job_id = "nul\u{0}job".into();
    let command = |record: JobSpecRecord| CommandRecord {
        command_id: record.command_id.clone(),
        kind: CommandKind::ExecuteJob,
        issued_at: chrono::Utc::now().timestamp_millis(),
        execute: Some(record),
        cancel: None,
        approve: None,
    };
    let codec = pipeline.kafka.codec.clone();
    pipeline
        .produce(
            topics::COMMANDS,
            "nul",
            &codec.encode(Family::Command, &command(unstorable)).unwrap(),
        )
        .await;
    // A command with U+0000 in its inputs names its job: it becomes a
    // rejected attempt that says where.
    let named = job(
        "verify.http.endpoint",
        json!({"url": "http://127.0.0.1:1/"}),
        json!({}),
    );
    let mut nul_inputs = JobSpecRecord::from(&named);
    nul_inputs.inputs_json = json!({"url": "http://x/a\u{0}b"}).to_string();
    pipeline
        .produce(
            topics::COMMANDS,
            &named.job_id,
            &codec.encode(Family::Command, &command(nul_inputs)).unwrap(),
        )
        .await;
    // A runner event whose progress holds U+0000: dead-lettered.
    let report = RunnerEventRecord::from_report(
        Uuid::new_v4(),
        chrono::Utc::now().timestamp_millis(),
        &RunnerReport {
            attempt_id: Uuid::new_v4(),
            lease_epoch: 1,
            runner_instance: "verification-x".into(),
            body: ReportBody::Progress {
                message: "half\u{0}way".into(),
                percent: None,
            },
        },
    );
    pipeline
        .produce(
            topics::RUNNER_EVENTS,
            "nul",
            &codec.encode(Family::RunnerEvent, &report).unwrap(),
        )
        .await;
    // A legitimate job behind them runs.
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
    let rejected = pipeline.wait_done(&named.job_id, WAIT).await;
    assert_eq!(rejected[0].1, "rejected");
    let message: String = sqlx::query_scalar("SELECT message FROM attempts WHERE job_id = $1")
        .bind(&named.job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        message.contains("inputs.url") && message.contains("U+0000"),
        "{message}"
    );
    pipeline
        .wait("two dead letters", WAIT, || async {
            pipeline.consume_all(topics::DLQ).await.len() >= 2
        })
        .await;
    let reasons = dlq_reasons(&pipeline.consume_all(topics::DLQ).await);
    assert!(
        reasons.iter().any(|reason| reason.contains("job_id")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|reason| reason.contains("message")),
        "{reasons:?}"
    );
    // And SIGTERM stops the dispatcher within its shutdown grace.
    pipeline.signal(dispatcher, "TERM");
    let status = pipeline.wait_exit(dispatcher, Duration::from_secs(15));
    assert!(
        status.is_some_and(|status| status.success()),
        "dispatcher after SIGTERM: {status:?}"
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_work_record_published_again_after_a_relay_crash_never_runs_twice(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[]);
    let runner = pipeline.spawn(&["runner", "verification"], &[]);
    // The relay will publish its first round and then hang moving its
    // cursor past it: killed there, it dies between publishing and
    // acknowledging.
    sqlx::query(
        "CREATE FUNCTION test_stall() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(600); RETURN NULL; END $$",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("CREATE TRIGGER test_stall BEFORE UPDATE ON relay_state FOR EACH ROW WHEN (NEW.published_position <> OLD.published_position) EXECUTE FUNCTION test_stall()")
        .execute(&pool)
        .await
        .unwrap();
    let relay = pipeline.spawn(&["relay"], &[]);
    pipeline.wait_runners(1).await;
    // The runner counts its executions: one request per execution.
    let target = Server::start(vec![], 200).await;
    let specs: Vec<_> = (0..5)
        .map(|index| {
            job(
                "verify.http.endpoint",
                json!({"url": target.url(&format!("/run/{index}"))}),
                // A lease whose work record waited behind the stalled relay
                // expires; its job runs again as a new attempt (a new lease).
                json!({"retry": {"max_attempts": 5, "initial_backoff": "200ms", "max_backoff": "1s"}}),
            )
        })
        .collect();
    for spec in &specs {
        pipeline.submit(spec).await;
    }
    // Some ran (their work records were in the first round) and ended.
    pipeline
        .wait("a job to run and end", WAIT, || async {
            let ended: i64 =
                sqlx::query_scalar("SELECT count(*) FROM attempts WHERE status = 'succeeded'")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            ended >= 1
        })
        .await;
    pipeline.signal(relay, "KILL");
    assert!(terminate_relay_backends(&pool).await >= 1);
    sqlx::query("DROP TRIGGER test_stall ON relay_state")
        .execute(&pool)
        .await
        .unwrap();
    pipeline.spawn(&["relay"], &[]);
    for spec in &specs {
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        assert_eq!(attempts.last().unwrap().1, "succeeded", "{attempts:?}");
    }
    // The new relay published the first round again; the runner read it.
    pipeline
        .wait("the runner to see a work record again", WAIT, || async {
            pipeline.log(runner).contains("not started twice")
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut executions: HashMap<String, usize> = HashMap::new();
    for request in target.requests() {
        *executions.entry(request.path).or_default() += 1;
    }
    assert_eq!(executions.len(), 5, "{executions:?}");
    assert!(
        executions.values().all(|count| *count == 1),
        "executions per job: {executions:?}"
    );
}

/// One line of a JSON log: (time, message).
fn log_events(log: &str) -> Vec<(chrono::DateTime<chrono::Utc>, String)> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|entry| {
            let at = entry["timestamp"].as_str()?.parse().ok()?;
            Some((at, entry["fields"]["message"].as_str()?.to_owned()))
        })
        .collect()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn relays_whose_lock_connections_are_cut_never_publish_at_once(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["runner", "verification"], &[]);
    pipeline.spawn(&["runner", "verification"], &[]);
    let env = [
        ("EXECPLANE_LOG_FORMAT", "json"),
        (
            "EXECPLANE_LOG",
            "info,execplane::kafka::relay=debug,sqlx=warn",
        ),
    ];
    let relays = [
        pipeline.spawn(&["relay"], &env),
        pipeline.spawn(&["relay"], &env),
    ];
    pipeline.wait_runners(2).await;
    // Leases outlive a relay failover (up to the predecessor's horizon, 8 s
    // with the defaults): a lease shorter than that would expire while its
    // work record waits.
    let specs: Vec<_> = (0..300)
        .map(|_| {
            job(
                "verify.tcp.connect",
                json!({"host": "127.0.0.1", "port": 5432}),
                json!({"timeouts": {"schedule_to_start": "60s", "start_to_close": "60s", "heartbeat": "20s", "schedule_to_close": "120s"}}),
            )
        })
        .collect();
    let mut cuts = 0;
    for (index, spec) in specs.iter().enumerate() {
        pipeline.submit(spec).await;
        if index % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Under load, cut the active relay's connections, three times
        // (waiting, bounded, for a relay that reconnected after the last
        // cut: on two busy cores that can take a moment).
        if index % 100 == 50 {
            for _ in 0..100 {
                let cut = terminate_relay_backends(&pool).await;
                if cut > 0 {
                    cuts += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(cuts, 3, "the relays' connections were cut {cuts} times");
    for spec in &specs {
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        assert_eq!(attempts.last().unwrap().1, "succeeded", "{attempts:?}");
    }
    pipeline.wait_published(WAIT).await;
    // Both exit cleanly on SIGTERM (a cut connection is not a crash).
    for relay in relays {
        pipeline.signal(relay, "TERM");
        let status = pipeline.wait_exit(relay, Duration::from_secs(15));
        assert!(
            status.is_some_and(|status| status.success()),
            "relay: {status:?}"
        );
    }
    // Publication windows: each "relay active" opens one relay's window,
    // and every round a relay published lies in a window of its own.
    let mut windows = Vec::new();
    let mut published = Vec::new();
    for (relay, index) in relays.iter().enumerate() {
        for (at, message) in log_events(&pipeline.log(*index)) {
            match message.as_str() {
                "relay active" => windows.push((at, relay)),
                "outbox published" => published.push((at, relay)),
                _ => {}
            }
        }
    }
    windows.sort();
    assert!(windows.len() >= 2, "the lock changed hands: {windows:?}");
    assert!(!published.is_empty());
    for (at, relay) in &published {
        let owner = windows
            .iter()
            .rev()
            .find(|(start, _)| start <= at)
            .map(|(_, owner)| *owner);
        assert_eq!(
            owner,
            Some(*relay),
            "relay {relay} published at {at} inside another's window: {windows:?}"
        );
    }
    // The topic is the log, once duplicates (same ce_id) are dropped.
    let mut seen = HashSet::new();
    let mut by_attempt: BTreeMap<Uuid, Vec<u64>> = BTreeMap::new();
    for message in pipeline.consume_all(topics::ATTEMPT_EVENTS).await {
        let ce_id = message
            .headers()
            .and_then(|headers| {
                headers
                    .iter()
                    .find(|header| header.key == "ce_id")
                    .and_then(|header| header.value)
            })
            .map(|value| String::from_utf8_lossy(value).into_owned())
            .unwrap();
        if !seen.insert(ce_id) {
            continue;
        }
        let record: execplane::codec::AttemptEventRecord = pipeline
            .kafka
            .codec
            .decode(Family::AttemptEvent, message.payload().unwrap())
            .unwrap();
        let event = execplane::contract::AttemptEvent::try_from(record).unwrap();
        by_attempt
            .entry(event.attempt_id)
            .or_default()
            .push(event.seq);
    }
    let stored = pipeline.stored_events().await;
    assert_eq!(by_attempt.len(), stored.len());
    for (attempt, seqs) in by_attempt {
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "attempt {attempt} out of order"
        );
        assert_eq!(seqs.len(), stored[&attempt].len());
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_paused_dispatcher_does_not_make_another_expire_healthy_leases(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[]);
    let slow = pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(&["runner", "verification"], &[]);
    pipeline.wait_runners(1).await;
    // Let the group settle: both dispatchers own runner-events partitions.
    let warm = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    pipeline.submit(&warm).await;
    pipeline.wait_done(&warm.job_id, WAIT).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Twelve 2 s jobs on 4 s leases: their reports spread over both
    // dispatchers' partitions.
    let specs: Vec<_> = (0..12)
        .map(|_| {
            job(
                "verify.custom.probe",
                json!({"probe_id": "sleep", "args": {"seconds": 2}}),
                json!({}),
            )
        })
        .collect();
    for spec in &specs {
        pipeline.submit(spec).await;
    }
    for spec in &specs {
        pipeline.wait_status(&spec.job_id, "running", WAIT).await;
    }
    // One dispatcher stops for 5 s (under the group's 6 s session timeout):
    // the jobs finish and their leases pass their deadlines meanwhile,
    // their final reports waiting on its partitions.
    pipeline.signal(slow, "STOP");
    tokio::time::sleep(Duration::from_secs(5)).await;
    pipeline.signal(slow, "CONT");
    for spec in &specs {
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        assert_eq!(
            (
                attempts.len(),
                attempts[0].1.as_str(),
                attempts[0].2.as_deref()
            ),
            (1, "succeeded", None),
            "{}: {attempts:?}",
            spec.job_id
        );
    }
}

/// A result whose JSON escapes U+0000 is valid JSON and storable text, but
/// no `jsonb` holds it (the callback queued with the result): such a
/// report is refused as the record's own fault, dead-lettered at once
/// with its reason, and the rest keep moving (docs/EVENTS.md,
/// "exec.runner.events").
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_result_escaping_nul_is_dead_lettered_by_its_reason_and_others_keep_moving(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let hang = job(
        "verify.custom.probe",
        json!({"probe_id": "hang"}),
        json!({"callback": {"url": "http://127.0.0.1:9/done"}}),
    );
    pipeline.submit(&hang).await;
    let attempt = pipeline.wait_status(&hang.job_id, "running", WAIT).await;
    let (epoch, instance): (i64, String) = sqlx::query_as(
        "SELECT epoch, runner_instance FROM leases WHERE attempt_id = $1 AND active",
    )
    .bind(attempt)
    .fetch_one(&pool)
    .await
    .unwrap();
    let report = RunnerEventRecord::from_report(
        Uuid::new_v4(),
        chrono::Utc::now().timestamp_millis(),
        &RunnerReport {
            attempt_id: attempt,
            lease_epoch: epoch as u64,
            runner_instance: instance,
            body: ReportBody::Finished {
                outcome: execplane::contract::ReportedOutcome::Succeeded,
                category: None,
                message: "done".into(),
                result_json: Some(r#"{"output":"a\u0000b"}"#.into()),
                outputs: Vec::new(),
            },
        },
    );
    let codec = pipeline.kafka.codec.clone();
    pipeline
        .produce(
            topics::RUNNER_EVENTS,
            &attempt.to_string(),
            &codec.encode(Family::RunnerEvent, &report).unwrap(),
        )
        .await;
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
    pipeline
        .wait("the report to be dead-lettered", WAIT, || async {
            !pipeline.consume_all(topics::DLQ).await.is_empty()
        })
        .await;
    let reasons = dlq_reasons(&pipeline.consume_all(topics::DLQ).await);
    assert!(
        reasons
            .iter()
            .any(|reason| reason.contains("result") && reason.contains("U+0000")),
        "{reasons:?}"
    );
    assert_eq!(
        pipeline.attempts(&hang.job_id).await[0].1,
        "running",
        "the refused report decided nothing"
    );
}
