//! The attempt store against the real Postgres: each test gets a fresh
//! database from `#[sqlx::test]`.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{database_url, drive_mixed, execplane, spec, BASE};
use execplane::attempt::{attempt_id_for, decide, Rejection};
use execplane::codec::{Codec, Family, ResultRecord, WorkRecord, WorkType};
use execplane::contract::{Input, ReportBody, ReportedOutcome, RunnerReport};
use execplane::store::{
    append_decided, InputEnvelope, InputOutcome, LoadedJobs, Origin, OutboxRow, Store,
};
use sqlx::{PgPool, Row};
use uuid::Uuid;

fn envelope(id: &str, input: Input) -> InputEnvelope {
    InputEnvelope {
        input_id: id.to_owned(),
        source: "test".into(),
        input,
    }
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Creates job `job_id` with one queued attempt; the attempt's id.
async fn create_job(store: &Store, job_id: &str) -> Uuid {
    let command_id = Uuid::new_v4();
    let execute = Input::Execute {
        policy_digest: None,
        target_keys: Vec::new(),
        spec: std::sync::Arc::new(spec(command_id, job_id, "verify.tcp.connect")),
    };
    store
        .process_batch(&[envelope(job_id, execute)], BASE)
        .await
        .unwrap();
    attempt_id_for(command_id, 1)
}

/// A grant of the attempt to `instance`, decided on the job's state as
/// committed, and that state (with the attempt's chain tip) to append it on:
/// what a dispatcher holds between its decision and its append.
async fn decided_grant(
    store: &Store,
    pool: &PgPool,
    job_id: &str,
    attempt_id: Uuid,
    instance: &str,
) -> (LoadedJobs, Vec<execplane::contract::AttemptEvent>) {
    let state = store.job_state(job_id).await.unwrap();
    let mut loaded = LoadedJobs::default();
    loaded.jobs.insert(job_id.into(), state.clone());
    let tip: Vec<u8> = sqlx::query_scalar("SELECT last_hash FROM attempts WHERE attempt_id = $1")
        .bind(attempt_id)
        .fetch_one(pool)
        .await
        .unwrap();
    loaded.last_hash.insert(attempt_id, tip.try_into().unwrap());
    let grant = Input::Grant {
        attempt_id,
        runner_instance: instance.into(),
    };
    let events = decide(&state, &grant, BASE + 1).unwrap();
    (loaded, events)
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_duplicate_command_id_gives_one_job(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let command_id = Uuid::new_v4();
    let execute = Input::Execute {
        policy_digest: None,
        target_keys: Vec::new(),
        spec: std::sync::Arc::new(spec(command_id, "dup/1", "verify.tcp.connect")),
    };
    // Redelivered (same input id), resent (new input id), and resent inside one batch.
    let first = store
        .process_batch(
            &[
                envelope("in-1", execute.clone()),
                envelope("in-1", execute.clone()),
                envelope("in-2", execute.clone()),
            ],
            BASE,
        )
        .await
        .unwrap();
    assert_eq!(
        first.outcomes,
        vec![
            InputOutcome::Applied { events: 1 },
            InputOutcome::Duplicate,
            InputOutcome::Applied { events: 0 }
        ]
    );
    let again = store
        .process_batch(
            &[envelope("in-1", execute.clone()), envelope("in-3", execute)],
            BASE + 5,
        )
        .await
        .unwrap();
    // The job's row names its command: every later delivery is a repeat.
    assert_eq!(again.outcomes, vec![InputOutcome::Duplicate; 2]);
    // The same command id under another job id is refused, not a second job.
    let other = Input::Execute {
        policy_digest: None,
        target_keys: Vec::new(),
        spec: std::sync::Arc::new(spec(command_id, "dup/2", "verify.tcp.connect")),
    };
    let refused = store
        .process_batch(&[envelope("in-4", other)], BASE + 6)
        .await
        .unwrap();
    assert!(matches!(
        refused.outcomes[0],
        InputOutcome::Rejected(Rejection::CommandIdReused { .. })
    ));
    assert_eq!(count(&pool, "SELECT count(*) FROM jobs").await, 1);
    assert_eq!(count(&pool, "SELECT count(*) FROM attempts").await, 1);
    assert_eq!(count(&pool, "SELECT count(*) FROM attempt_events").await, 1);
    // Only the inputs that created nothing claimed their ids (`in-2`, a
    // resend in the batch that created the job, and `in-4`): the job's row
    // names the command for the others.
    assert_eq!(count(&pool, "SELECT count(*) FROM inbox").await, 2);
    // And the database itself refuses a second job row for the command.
    let error = sqlx::query("INSERT INTO jobs SELECT 'dup/3', command_id, tenant, operation, spec, attempts, latest_attempt_id, created_at FROM jobs")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("jobs_command_id_key"), "{error}");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn of_two_concurrent_lease_grants_the_database_refuses_the_second(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let attempt_id = create_job(&store, "race/1").await;
    // Two dispatchers read the same queued state and each decides a grant.
    let (loaded, grant_a) = decided_grant(&store, &pool, "race/1", attempt_id, "runner-a").await;
    let (_, grant_b) = decided_grant(&store, &pool, "race/1", attempt_id, "runner-b").await;

    let codec = Codec::default();
    let mut first = pool.begin().await.unwrap();
    append_decided(&mut first, &codec, &loaded, &grant_a)
        .await
        .unwrap();
    let second = {
        let pool = pool.clone();
        let loaded = loaded.clone();
        tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            let result = append_decided(&mut tx, &Codec::default(), &loaded, &grant_b).await;
            if result.is_ok() {
                tx.commit().await.unwrap();
            }
            result
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    first.commit().await.unwrap();
    let error = second
        .await
        .unwrap()
        .expect_err("the second grant must be refused");
    assert!(error.is_constraint_violation(), "{error}");
    let holders: Vec<String> = sqlx::query_scalar("SELECT runner_instance FROM leases")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(holders, vec!["runner-a".to_owned()]);
    assert_eq!(count(&pool, "SELECT count(*) FROM attempt_events").await, 2);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn update_delete_and_truncate_on_attempt_events_are_refused(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 10).await;
    for statement in [
        "UPDATE attempt_events SET kind = 'finished' WHERE seq = 1",
        "DELETE FROM attempt_events WHERE seq = 2",
        "TRUNCATE attempt_events CASCADE",
    ] {
        let error = sqlx::query(statement).execute(&pool).await.unwrap_err();
        assert!(
            error.to_string().contains("append-only"),
            "{statement}: {error}"
        );
    }
    // The database also holds invariant 3: a second terminal event is refused.
    let error = sqlx::query(
        "INSERT INTO attempt_events (event_id, attempt_id, job_id, seq, kind, terminal, occurred_at, payload, schema_fingerprint, prev_hash, hash)
         SELECT gen_random_uuid(), attempt_id, job_id, seq + 100, kind, true, occurred_at, payload, schema_fingerprint, prev_hash, hash
         FROM attempt_events WHERE terminal LIMIT 1",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("attempt_events_one_terminal"),
        "{error}"
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn audit_verify_catches_one_flipped_payload_byte(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 30).await;
    let clean = execplane(&pool, &["audit", "verify"]);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    assert!(String::from_utf8_lossy(&clean.stdout).contains("hash chain intact"));

    // A superuser bypasses the trigger and flips one byte of one payload.
    let row = sqlx::query(
        "SELECT attempt_id, seq FROM attempt_events WHERE job_id = 'mixed/0' AND seq = 3",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let (attempt_id, seq): (Uuid, i64) = (row.get(0), row.get(1));
    tamper(
        &pool,
        sqlx::query("UPDATE attempt_events SET payload = set_byte(payload, 20, get_byte(payload, 20) # 1) WHERE attempt_id = $1 AND seq = $2")
            .bind(attempt_id)
            .bind(seq),
    )
    .await;

    let report = store.verify_chain(None).await.unwrap();
    let broken = report.first_break.expect("the flip is caught");
    assert_eq!((broken.attempt_id, broken.seq), (attempt_id, seq));
    let tampered = execplane(&pool, &["audit", "verify"]);
    assert_eq!(tampered.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&tampered.stderr);
    assert!(
        stderr.contains(&format!("attempt {attempt_id} seq {seq}")),
        "{stderr}"
    );
    // Scoped to another attempt, the chain is still intact.
    let other: Uuid =
        sqlx::query_scalar("SELECT attempt_id FROM attempts WHERE job_id = 'mixed/1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        execplane(&pool, &["audit", "verify", "--attempt", &other.to_string()])
            .status
            .success()
    );
}

/// Runs `query` past the log's append-only triggers, as someone holding
/// the database's keys could: what `audit verify` is there to catch.
async fn tamper(
    pool: &PgPool,
    query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .unwrap();
    query.execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn audit_verify_catches_a_truncated_tail(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 10).await;
    tamper(
        &pool,
        sqlx::query("DELETE FROM attempt_events WHERE job_id = 'mixed/0' AND terminal"),
    )
    .await;
    let broken = store
        .verify_chain(None)
        .await
        .unwrap()
        .first_break
        .expect("a missing tail is caught");
    assert!(
        broken.reason.contains("events missing"),
        "{}",
        broken.reason
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn audit_verify_catches_an_attempt_whose_events_are_all_gone(pool: PgPool) {
    // The walk goes through the log and the projection side by side, in
    // attempt order: an attempt the projection holds and the log does not
    // is caught wherever it falls among the others.
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 10).await;
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT attempt_id FROM attempts ORDER BY attempt_id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(ids.len() >= 3, "{ids:?}");
    let intact = store.verify_chain(None).await.unwrap();
    assert!(intact.first_break.is_none(), "{:?}", intact.first_break);
    assert_eq!(intact.attempts, ids.len() as u64);
    // The last in attempt order (after the walk's last event), then one
    // in the middle (before others that are intact): each is the break.
    for gone in [ids[ids.len() - 1], ids[1]] {
        tamper(
            &pool,
            sqlx::query("DELETE FROM attempt_events WHERE attempt_id = $1").bind(gone),
        )
        .await;
        let broken = store
            .verify_chain(None)
            .await
            .unwrap()
            .first_break
            .expect("an attempt without events is caught");
        assert_eq!((broken.attempt_id, broken.seq), (gone, 1));
        assert!(broken.reason.contains("has no events"), "{}", broken.reason);
        let scoped = store.verify_chain(Some(gone)).await.unwrap().first_break;
        assert_eq!(scoped.map(|broken| broken.attempt_id), Some(gone));
    }
    let other = store.verify_chain(Some(ids[0])).await.unwrap();
    assert!(other.first_break.is_none(), "{:?}", other.first_break);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn audit_verify_reads_the_log_and_the_tips_as_of_one_instant(pool: PgPool) {
    // A change that commits while the walk waits must be wholly in it or
    // wholly out of it. Here the change takes an attempt's last event away
    // and moves its tip back with it (consistent on its own), while the
    // walk waits for the log's table: read at two instants, the tips said
    // one thing and the log another, and an intact history was reported
    // broken ("events missing").
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 10).await;
    let (attempt_id, prev_hash): (Uuid, Vec<u8>) = sqlx::query_as(
        "SELECT attempt_id, prev_hash FROM attempt_events WHERE terminal ORDER BY attempt_id LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let mut change = pool.begin().await.unwrap();
    for statement in [
        "SET LOCAL session_replication_role = replica",
        "LOCK TABLE attempt_events IN ACCESS EXCLUSIVE MODE",
    ] {
        sqlx::query(statement).execute(&mut *change).await.unwrap();
    }
    sqlx::query("DELETE FROM attempt_events WHERE attempt_id = $1 AND terminal")
        .bind(attempt_id)
        .execute(&mut *change)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE attempts SET last_seq = last_seq - 1, last_hash = $2 WHERE attempt_id = $1",
    )
    .bind(attempt_id)
    .bind(&prev_hash)
    .execute(&mut *change)
    .await
    .unwrap();
    let walk = tokio::spawn({
        let store = store.clone();
        async move { store.verify_chain(None).await }
    });
    // The walk is waiting for the lock.
    let waiting = async {
        loop {
            let waiters: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%attempt_events%'",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            if waiters > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), waiting)
        .await
        .expect("the walk waits for the log's table");
    change.commit().await.unwrap();
    let report = walk.await.unwrap().unwrap();
    assert!(report.first_break.is_none(), "{:?}", report.first_break);
    // And after it, the change is seen whole: still intact.
    let after = store.verify_chain(None).await.unwrap();
    assert!(after.first_break.is_none(), "{:?}", after.first_break);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn what_the_projection_reads_back_is_the_log_folded_in_memory(pool: PgPool) {
    // The projection's rows are written one typed array per column; two
    // columns of one type bound in each other's place would pass every
    // type check. After every batch of a mixed workload, each job it
    // touched must read back as its events folded here. (Checked after
    // every batch: a row written twice would swap such columns back.)
    let store = Store::from_pool(pool.clone());
    let mut folded: BTreeMap<String, execplane::attempt::JobState> = BTreeMap::new();
    let mut compared = 0;
    for (at, batch) in common::mixed_batches(150) {
        let outcome = store.process_batch(&batch, at).await.unwrap();
        let mut touched = std::collections::BTreeSet::new();
        for event in &outcome.events {
            folded
                .entry(event.job_id.clone())
                .or_default()
                .apply_all(std::slice::from_ref(event))
                .unwrap();
            touched.insert(event.job_id.clone());
        }
        for job_id in touched {
            let read = store.job_state(&job_id).await.unwrap();
            assert_eq!(read.attempts, folded[&job_id].attempts, "job {job_id}");
            compared += 1;
        }
    }
    assert!(folded.len() >= 150 && compared > 300, "{compared}");
}

/// `projection rebuild --verify` fails and says `difference`.
fn rebuild_reports(pool: &PgPool, difference: &str) {
    let verify = execplane(pool, &["projection", "rebuild", "--verify"]);
    assert_eq!(verify.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&verify.stderr);
    assert!(stderr.contains(difference), "{stderr}");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn projection_rebuild_verify_passes_after_a_mixed_workload_and_fails_on_corruption(
    pool: PgPool,
) {
    let store = Store::from_pool(pool.clone());
    let inputs = drive_mixed(&store, 1_200).await;
    assert!(inputs > 5_000);
    let attempts = count(&pool, "SELECT count(*) FROM attempts").await;
    assert!(attempts >= 1_000, "{attempts} attempts");
    // Every path of the lifecycle is in the data.
    let statuses: BTreeMap<String, i64> =
        sqlx::query("SELECT status, count(*) FROM attempts GROUP BY status")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
    for status in [
        "queued",
        "succeeded",
        "failed",
        "timed_out",
        "cancelled",
        "rejected",
        "outcome_unknown",
    ] {
        assert!(
            statuses.contains_key(status),
            "no {status} attempt in {statuses:?}"
        );
    }
    assert!(
        count(
            &pool,
            "SELECT count(*) FROM attempt_events WHERE kind = 'report_fenced'"
        )
        .await
            > 0
    );
    assert!(
        count(
            &pool,
            "SELECT count(*) FROM attempt_events WHERE kind = 'lease_extended'"
        )
        .await
            > 0
    );

    let clean = execplane(&pool, &["projection", "rebuild", "--verify"]);
    assert!(
        clean.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&clean.stdout),
        String::from_utf8_lossy(&clean.stderr)
    );
    // More jobs than the rebuild writes at once (1,000): folded and
    // written in parts, every one of them counted.
    let jobs = count(&pool, "SELECT count(*) FROM jobs").await;
    let events = count(&pool, "SELECT count(*) FROM attempt_events").await;
    assert!(jobs > 1_000, "{jobs} jobs");
    let said = String::from_utf8_lossy(&clean.stdout);
    assert!(
        said.contains(&format!(
            "rebuilt {jobs} jobs and {attempts} attempts from {events} events"
        )),
        "{said}"
    );
    assert!(execplane(&pool, &["audit", "verify"]).status.success());

    sqlx::query("UPDATE attempts SET status = 'succeeded' WHERE attempt_id = (SELECT attempt_id FROM attempts WHERE status = 'failed' ORDER BY attempt_id LIMIT 1)")
        .execute(&pool)
        .await
        .unwrap();
    rebuild_reports(&pool, "table attempts: 1 live row(s) differ");
    // The shadow schema was rolled back, not left behind.
    assert_eq!(count(&pool, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'execplane_shadow'").await, 0);

    // No foreign key refuses a lease without its attempt (migration 0023):
    // the rebuild reports it.
    sqlx::query(
        "INSERT INTO leases (lease_id, attempt_id, job_id, epoch, runner_instance, granted_at, expires_at, active)
         VALUES (gen_random_uuid(), gen_random_uuid(), 'no-such-job', 1, 'nobody', now(), now(), false)",
    )
    .execute(&pool)
    .await
    .unwrap();
    rebuild_reports(&pool, "table leases: 1 live row(s) differ");
}

/// Every record the relay would publish now, acknowledged as it goes: the
/// log's in the order read; the outbox's rows stay, read again each round.
async fn relay_log(store: &Store, round: i64) -> Vec<OutboxRow> {
    let mut lock = store.try_relay_lock().await.unwrap().unwrap();
    let mut logged = Vec::new();
    loop {
        let log: Vec<OutboxRow> = lock
            .next_rows(round)
            .await
            .unwrap()
            .rows
            .into_iter()
            .filter(|row| matches!(row.origin, Origin::Log(_)))
            .collect();
        if log.is_empty() {
            break;
        }
        let origins: Vec<Origin> = log.iter().map(|row| row.origin).collect();
        lock.acknowledge(&origins).await.unwrap();
        logged.extend(log);
    }
    lock.release().await;
    logged
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_relay_publishes_the_log_itself_in_order_and_derives_what_each_event_causes(
    pool: PgPool,
) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 20).await;
    // Nothing is copied to the outbox: not the events, not what they cause.
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 0);

    // The relay reads every event once, in the log's order, and its record
    // is the event's: its id, seq and links, its datum framed. What the
    // event causes follows it, acknowledged with it.
    let stored = sqlx::query(
        "SELECT event_id, attempt_id, seq, payload, prev_hash, hash, position, kind FROM attempt_events ORDER BY position",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let logged = relay_log(&store, 7).await;
    let codec = Codec::default();
    let mut records = logged.iter().peekable();
    let (mut results, mut work_items) = (0, 0);
    for row in &stored {
        let record = records.next().expect("a record for every event");
        let header = |name: &str| record.headers.get(name).unwrap().to_owned();
        assert_eq!(record.topic, "exec.attempt-events.v1");
        assert_eq!(record.origin, Origin::Log(row.get(6)));
        assert_eq!(header("ce_id"), row.get::<Uuid, _>(0).to_string());
        assert_eq!(record.key, row.get::<Uuid, _>(1).to_string());
        assert_eq!(header("execplane_seq"), row.get::<i64, _>(2).to_string());
        assert_eq!(
            header("execplane_prev_hash"),
            hex::encode(row.get::<Vec<u8>, _>(4))
        );
        assert_eq!(
            header("execplane_hash"),
            hex::encode(row.get::<Vec<u8>, _>(5))
        );
        let datum: Vec<u8> = row.get(3);
        assert_eq!(
            record.payload,
            codec.frame(Family::AttemptEvent, &datum).unwrap()
        );
        let attempt_id: Uuid = row.get(1);
        let kind: String = row.get(7);
        while let Some(derived) = records.next_if(|next| next.topic != "exec.attempt-events.v1") {
            assert_eq!(derived.origin, record.origin);
            if derived.topic == "exec.results.v1" {
                results += 1;
                assert!(matches!(kind.as_str(), "finished" | "rejected"), "{kind}");
                let result: ResultRecord = codec.decode(Family::Result, &derived.payload).unwrap();
                let status: String =
                    sqlx::query_scalar("SELECT status FROM attempts WHERE attempt_id = $1")
                        .bind(attempt_id)
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                assert_eq!(
                    serde_json::to_value(result.status).unwrap(),
                    status.as_str()
                );
                assert_eq!(result.terminal_seq, row.get::<i64, _>(2));
            } else {
                let work: WorkRecord = codec.decode(Family::WorkItem, &derived.payload).unwrap();
                assert_eq!(work.attempt_id, attempt_id.to_string());
                let (lease_id, instance): (Uuid, String) = sqlx::query_as(
                    "SELECT lease_id, runner_instance FROM leases WHERE attempt_id = $1",
                )
                .bind(attempt_id)
                .fetch_one(&pool)
                .await
                .unwrap();
                assert_eq!(
                    (work.lease_id.as_str(), derived.key.as_str()),
                    (lease_id.to_string().as_str(), instance.as_str())
                );
                if kind == "lease_granted" {
                    work_items += 1;
                    assert_eq!(work.kind, WorkType::WorkItem);
                    assert!(work.spec.is_some());
                }
            }
        }
    }
    assert!(records.next().is_none());
    assert_eq!(
        results,
        count(&pool, "SELECT count(*) FROM attempt_events WHERE terminal").await
    );
    assert_eq!(
        work_items,
        count(
            &pool,
            "SELECT count(*) FROM attempt_events WHERE kind = 'lease_granted'"
        )
        .await
    );
    // Published, nothing waits; a relay reads nothing more.
    assert_eq!(store.unpublished().await.unwrap(), 0);
    assert!(relay_log(&store, 7).await.is_empty());
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_rejected_command_gets_its_result_from_the_log(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let command_id = Uuid::new_v4();
    let invalid = Input::ExecuteInvalid {
        command_id,
        job_id: "rejected/1".into(),
        tenant: "team-a".into(),
        operation: "verify.tcp.connect".into(),
        category: execplane::contract::FailureCategory::Contract,
        problems: vec![execplane::contract::Problem::new(
            "inputs.port",
            "out of range",
        )],
        policy_digest: None,
    };
    store
        .process_batch(&[envelope("rejected", invalid)], BASE)
        .await
        .unwrap();
    let logged = relay_log(&store, 100).await;
    let topics: Vec<&str> = logged.iter().map(|record| record.topic.as_str()).collect();
    assert_eq!(topics, ["exec.attempt-events.v1", "exec.results.v1"]);
    let result: ResultRecord = Codec::default()
        .decode(Family::Result, &logged[1].payload)
        .unwrap();
    assert_eq!(
        (
            result.job_id.as_str(),
            result.command_id,
            result.tenant.as_str(),
            result.status,
            result.category,
            result.terminal_seq,
        ),
        (
            "rejected/1",
            command_id.to_string(),
            "team-a",
            execplane::codec::TerminalStatus::Rejected,
            Some(execplane::contract::FailureCategory::Contract),
            1
        )
    );
    assert!(result.message.contains("inputs.port"), "{}", result.message);
}

/// Event ids are unique because each is derived from its attempt and seq,
/// which the log keeps unique: the append path refuses any other id
/// (migration 0022), and writes nothing of the batch.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_event_whose_id_is_not_derived_from_its_seq_is_refused(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let attempt_id = create_job(&store, "ids/1").await;
    let (loaded, mut grant) = decided_grant(&store, &pool, "ids/1", attempt_id, "runner-a").await;
    let events = count(&pool, "SELECT count(*) FROM attempt_events").await;
    grant[0].event_id = Uuid::new_v4();
    let mut tx = pool.begin().await.unwrap();
    let refused = append_decided(&mut tx, &Codec::default(), &loaded, &grant).await;
    assert!(
        matches!(&refused, Err(execplane::store::StoreError::Apply(error)) if error.reason.contains("not derived")),
        "{refused:?}"
    );
    drop(tx);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM attempt_events").await,
        events
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_event_whose_records_cannot_be_built_does_not_hold_the_log_back(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let first = create_job(&store, "unreadable/1").await;
    create_job(&store, "readable/2").await;
    let (loaded, grant) = decided_grant(&store, &pool, "unreadable/1", first, "runner-a").await;
    let mut tx = pool.begin().await.unwrap();
    append_decided(&mut tx, &Codec::default(), &loaded, &grant)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // A stored spec this release cannot read (written by another, say).
    sqlx::query("UPDATE jobs SET spec = '{\"unreadable\": true}' WHERE job_id = 'unreadable/1'")
        .execute(&pool)
        .await
        .unwrap();
    let logged = relay_log(&store, 100).await;
    // Every event is published, the grant without its work item.
    assert_eq!(
        logged
            .iter()
            .map(|record| record.topic.as_str())
            .collect::<Vec<_>>(),
        ["exec.attempt-events.v1"; 3]
    );
    assert_eq!(store.unpublished().await.unwrap(), 0);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn events_from_before_records_were_derived_cause_none(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 3).await;
    // An upgraded database: these events had what they cause written to
    // the outbox by the release before migration 0019.
    sqlx::query(
        "UPDATE relay_state SET derived_after = (SELECT max(position) FROM attempt_events)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let logged = relay_log(&store, 50).await;
    assert_eq!(
        logged.len() as i64,
        count(&pool, "SELECT count(*) FROM attempt_events").await
    );
    assert!(logged
        .iter()
        .all(|record| record.topic == "exec.attempt-events.v1"));
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_log_waits_for_the_outbox_rows_from_before_it_was_the_source(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    // An upgraded database: rows in the outbox from before migration 0018
    // (here, one), then events appended since.
    sqlx::query(
        "INSERT INTO outbox (topic, key, headers, payload) VALUES ('exec.artifacts.v1', 'a', '{}', '')",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("UPDATE relay_state SET legacy_outbox_until = (SELECT max(id) FROM outbox)")
        .execute(&pool)
        .await
        .unwrap();
    create_job(&store, "upgraded/1").await;
    let mut lock = store.try_relay_lock().await.unwrap().unwrap();
    let first = lock.next_rows(100).await.unwrap();
    assert!(!first.more, "one row of a hundred: nothing more waits");
    let first = first.rows;
    let origins: Vec<Origin> = first.iter().map(|row| row.origin).collect();
    assert!(
        matches!(origins[..], [Origin::Outbox(_)]),
        "the old row alone: {origins:?}"
    );
    lock.acknowledge(&origins).await.unwrap();
    let next = lock.next_rows(100).await.unwrap().rows;
    assert!(
        matches!(
            next.iter().map(|row| row.origin).collect::<Vec<_>>()[..],
            [Origin::Log(_)]
        ),
        "then the log"
    );
    lock.release().await;
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn no_insert_takes_a_position_around_the_lock_and_no_event_is_copied_to_the_outbox(
    pool: PgPool,
) {
    let store = Store::from_pool(pool.clone());
    create_job(&store, "guarded/1").await;
    // An insert naming its own position is refused; without one, it takes
    // the next.
    let copy = |named: bool| {
        let (column, value) = if named {
            ("position, ", "1000000, ")
        } else {
            ("", "")
        };
        format!(
            "INSERT INTO attempt_events ({column}event_id, attempt_id, job_id, seq, kind, terminal, occurred_at, payload, schema_fingerprint, prev_hash, hash)
             SELECT {value}gen_random_uuid(), gen_random_uuid(), job_id, 1, kind, terminal, occurred_at, payload, schema_fingerprint, prev_hash, hash
             FROM attempt_events LIMIT 1"
        )
    };
    let error = sqlx::query(&copy(true)).execute(&pool).await.unwrap_err();
    let code = error
        .as_database_error()
        .and_then(|error| error.code())
        .unwrap_or_default();
    assert_eq!(code, "428C9", "{error}");
    sqlx::query(&copy(false)).execute(&pool).await.unwrap();
    let positions: Vec<i64> =
        sqlx::query_scalar("SELECT position FROM attempt_events ORDER BY position")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(positions, [1, 2]);
    // A dispatcher of an earlier release copying an event, or what an event
    // causes (the relay derives that now), to the outbox is refused with a
    // state it retries, never dead-letters.
    for topic in [
        "exec.attempt-events.v1",
        "exec.results.v1",
        "exec.work.ssh.v1",
    ] {
        let error = sqlx::query(
            "INSERT INTO outbox (topic, key, headers, payload) VALUES ($1, 'a', '{}', '')",
        )
        .bind(topic)
        .execute(&pool)
        .await
        .unwrap_err();
        let code = error
            .as_database_error()
            .and_then(|error| error.code())
            .unwrap_or_default();
        assert_eq!(code, "55000", "{topic}: {error}");
    }
}

/// The contract the relay's cursor rests on (docs/ARCHITECTURE.md,
/// "Relay"): a transaction that took log positions holds every later one
/// back until it ends, so no position becomes visible after a greater one.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_open_append_holds_back_every_later_position(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let mut grants = Vec::new();
    for job in ["order/1", "order/2"] {
        let attempt_id = create_job(&store, job).await;
        grants.push(decided_grant(&store, &pool, job, attempt_id, "runner-a").await);
    }
    let created = relay_log(&store, 100).await;
    assert_eq!(created.len(), 2);

    // The first grant is appended and its transaction left open; the
    // second, appended meanwhile, waits for it at the append lock.
    let (first_loaded, first_grant) = grants.remove(0);
    let (second_loaded, second_grant) = grants.remove(0);
    let expected: Vec<String> = [&first_grant, &second_grant]
        .iter()
        .map(|events| events[0].attempt_id.to_string())
        .collect();
    let mut first = pool.begin().await.unwrap();
    append_decided(&mut first, &Codec::default(), &first_loaded, &first_grant)
        .await
        .unwrap();
    let second = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            append_decided(&mut tx, &Codec::default(), &second_loaded, &second_grant)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        })
    };
    let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    while count(&pool, waiting).await == 0 {
        assert!(!second.is_finished(), "the second append did not wait");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Neither is visible to the relay, and neither is passed over.
    assert!(relay_log(&store, 100).await.is_empty());
    first.commit().await.unwrap();
    second.await.unwrap();
    let granted: Vec<String> = relay_log(&store, 100)
        .await
        .iter()
        .filter(|record| record.topic == "exec.attempt-events.v1")
        .map(|record| record.key.clone())
        .collect();
    assert_eq!(granted, expected);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn audit_replay_prints_the_timeline_and_json(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 10).await;
    let attempt: Uuid =
        sqlx::query_scalar("SELECT attempt_id FROM attempts WHERE job_id = 'mixed/9'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let text = execplane(
        &pool,
        &["audit", "replay", "--attempt", &attempt.to_string()],
    );
    assert!(text.status.success());
    let timeline = String::from_utf8_lossy(&text.stdout);
    let kinds: Vec<&str> = timeline
        .lines()
        .map(|line| line.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "created",
            "lease_granted",
            "started",
            "report_fenced",
            "finished",
            "report_fenced"
        ]
    );
    assert!(timeline.contains("epoch 99 is stale"), "{timeline}");
    let json = execplane(
        &pool,
        &[
            "audit",
            "replay",
            "--attempt",
            &attempt.to_string(),
            "--json",
        ],
    );
    let events: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(events.len(), 6);
    assert_eq!(events[4]["body"]["type"], "finished");
    assert_eq!(events[1]["prev_hash"], events[0]["hash"]);

    // A job's timeline holds every event of each of its attempts, retries
    // among them, in attempt order.
    let job: String = sqlx::query_scalar(
        "SELECT job_id FROM attempts GROUP BY job_id HAVING count(*) > 1 ORDER BY job_id LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let logged: i64 = sqlx::query_scalar("SELECT count(*) FROM attempt_events WHERE job_id = $1")
        .bind(&job)
        .fetch_one(&pool)
        .await
        .unwrap();
    let json = execplane(&pool, &["audit", "replay", "--job", &job, "--json"]);
    assert!(json.status.success());
    let events: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(events.len() as i64, logged);
    let attempts: BTreeSet<&str> = events
        .iter()
        .map(|event| event["attempt_id"].as_str().unwrap())
        .collect();
    assert!(attempts.len() > 1, "{events:?}");
    let _ = database_url(&pool);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_overview_reads_at_most_its_limit_of_endings(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 40).await;
    // The mixed run's clock is long past: its endings are moved into the
    // last hour, one a second apart, in attempt id order.
    tamper(
        &pool,
        sqlx::query(
            "UPDATE attempts a SET finished_at = now() - n.i * interval '1 second'
             FROM (SELECT attempt_id, row_number() OVER (ORDER BY attempt_id) AS i
                   FROM attempts WHERE finished_at IS NOT NULL) n
             WHERE a.attempt_id = n.attempt_id",
        ),
    )
    .await;
    let ended = count(
        &pool,
        "SELECT count(*) FROM attempts WHERE finished_at IS NOT NULL",
    )
    .await;
    assert!(ended > 20, "{ended}");
    let sum = |ended: &execplane::store::console::Ended| -> i64 {
        ended.counts.iter().map(|(_, _, count)| count).sum()
    };

    let all = store.ended_recently(None, 1_000_000).await.unwrap();
    assert!(!all.capped);
    assert_eq!(sum(&all), ended);
    assert!(all.since < chrono::Utc::now() - chrono::Duration::minutes(59));

    let newest = store.ended_recently(None, 10).await.unwrap();
    assert!(newest.capped);
    assert_eq!(sum(&newest), 10);
    let tenth: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT finished_at FROM attempts WHERE finished_at IS NOT NULL
         ORDER BY finished_at DESC OFFSET 9 LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(newest.since, tenth);

    // The limit bounds what is read, whatever the tenant: a tenant with
    // no ending among the newest sees none, and since when.
    let nobody = store
        .ended_recently(Some(&["no-such-tenant".to_owned()]), 10)
        .await
        .unwrap();
    assert!(nobody.capped && nobody.counts.is_empty());
    assert_eq!(nobody.since, tenth);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn output_read_again_after_its_bundle_is_not_stored_twice(pool: PgPool) {
    // An artifact worker killed after it stored a bundle and before its
    // offsets were committed: the next worker reads the same chunks again.
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 1).await;
    let attempt: Uuid =
        sqlx::query_scalar("SELECT attempt_id FROM attempts WHERE finished_at IS NOT NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    let chunk = |stream: &str, seq: i64| execplane::store::StagedChunk {
        attempt_id: attempt,
        stream: stream.into(),
        seq,
        lease_epoch: 1,
        producer: "runner-1".into(),
        text: format!("{stream} {seq}\n"),
    };
    // stdout's seq 2 is still on its way (an executor's re-send).
    let output: Vec<_> = [0, 1, 3]
        .into_iter()
        .map(|seq| chunk("stdout", seq))
        .chain([chunk("stderr", 0)])
        .collect();
    assert_eq!(store.stage_chunks(&output).await.unwrap(), 4);
    // After the mixed run's clock and after now: every ended attempt.
    let far = BASE.max(chrono::Utc::now().timestamp_millis()) + 86_400_000_000;
    let pending = store.pending_bundles(far, 1_000, i64::MAX).await.unwrap();
    let bundle = pending
        .iter()
        .find(|bundle| bundle.attempt_id == attempt)
        .unwrap();
    assert!(!bundle.late);
    assert_eq!(bundle.chunks.len(), 4);
    // A round loads a bounded amount of staged text: the oldest attempt's,
    // and more only while the total stays within the bound.
    let bounded = store.pending_bundles(far, 1_000, 1).await.unwrap();
    assert!(!bounded.is_empty());
    assert!(
        bounded
            .iter()
            .skip(1)
            .all(|bundle| bundle.chunks.is_empty()),
        "{bounded:?}"
    );
    let bundled: Vec<(String, i64)> = bundle
        .chunks
        .iter()
        .map(|(stream, seq, _, _)| (stream.clone(), *seq))
        .collect();
    store
        .record_bundle(attempt, &[], &[], &[], &bundled)
        .await
        .unwrap();

    // Read again: nothing new, and no late bundle of output stored once.
    assert_eq!(store.stage_chunks(&output).await.unwrap(), 0);
    let pending = store.pending_bundles(far, 1_000, i64::MAX).await.unwrap();
    assert!(
        pending.iter().all(|bundle| bundle.attempt_id != attempt),
        "{pending:?}"
    );

    // Output the bundle does not hold is still kept, late: the chunk that
    // was on its way, and one after the bundle's last.
    let after = [chunk("stdout", 2), chunk("stdout", 4)];
    assert_eq!(store.stage_chunks(&after).await.unwrap(), 2);
    let pending = store.pending_bundles(far, 1_000, i64::MAX).await.unwrap();
    let late = pending
        .iter()
        .find(|bundle| bundle.attempt_id == attempt)
        .unwrap();
    assert!(late.late);
    assert_eq!(late.chunks.len(), 2);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_callback_outcome_is_recorded_once_after_the_terminal_event(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 1).await;
    let attempt: Uuid = sqlx::query_scalar("SELECT attempt_id FROM attempts")
        .fetch_one(&pool)
        .await
        .unwrap();
    let outcome = Input::CallbackOutcome {
        attempt_id: attempt,
        url: "http://127.0.0.1:1/cb".into(),
        delivered: true,
        attempts: 3,
        http_status: Some(200),
        error: None,
        idempotency_key: format!("{attempt}:7"),
    };
    let first = store
        .process_batch(&[envelope("cb-1", outcome.clone())], BASE + 100_000)
        .await
        .unwrap();
    assert_eq!(
        first.outcomes,
        vec![InputOutcome::Applied { events: 1 }],
        "{:?}",
        first.outcomes
    );
    let again = store
        .process_batch(&[envelope("cb-2", outcome)], BASE + 100_001)
        .await
        .unwrap();
    assert_eq!(again.outcomes, vec![InputOutcome::Applied { events: 0 }]);
    assert!(execplane(&pool, &["projection", "rebuild", "--verify"])
        .status
        .success());
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn pruning_forgets_old_inbox_ids_only(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 3).await;
    let before = count(&pool, "SELECT count(*) FROM inbox").await;
    sqlx::query(
        "UPDATE inbox SET processed_at = now() - interval '8 days' WHERE input_id LIKE 'mixed-0-%'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let old = count(
        &pool,
        "SELECT count(*) FROM inbox WHERE processed_at < now() - interval '7 days'",
    )
    .await;
    let (pruned, _) = store
        .prune(
            std::time::Duration::from_secs(7 * 24 * 3600),
            std::time::Duration::from_secs(86_400),
        )
        .await
        .unwrap();
    assert_eq!(pruned as i64, old);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM inbox").await,
        before - old
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_redelivered_grant_started_or_finished_is_a_no_op_without_an_inbox_row(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let attempt_id = create_job(&store, "repeat/1").await;
    let report = |id: &str, epoch: u64, body: ReportBody| {
        envelope(
            id,
            Input::Report(RunnerReport {
                attempt_id,
                lease_epoch: epoch,
                runner_instance: "runner-a".into(),
                body,
            }),
        )
    };
    let finished = || ReportBody::Finished {
        outcome: ReportedOutcome::Succeeded,
        category: None,
        message: "done".into(),
        result_json: None,
        outputs: Vec::new(),
    };
    let grant = Input::Grant {
        attempt_id,
        runner_instance: "runner-a".into(),
    };
    let granted = store
        .process_batch(&[envelope("grant", grant.clone())], BASE)
        .await
        .unwrap();
    assert_eq!(granted.outcomes, vec![InputOutcome::Applied { events: 1 }]);
    // Nor does a grant: decided again, it finds its attempt leased.
    let again = store
        .process_batch(&[envelope("grant", grant)], BASE)
        .await
        .unwrap();
    assert!(
        matches!(
            again.outcomes[..],
            [InputOutcome::Rejected(Rejection::NotQueued { .. })]
        ),
        "{:?}",
        again.outcomes
    );
    let reports = [
        report("started", 1, ReportBody::Started),
        report("finished", 1, finished()),
    ];
    let first = store.process_batch(&reports, BASE + 1).await.unwrap();
    assert_eq!(
        first.outcomes,
        vec![InputOutcome::Applied { events: 1 }; 2],
        "started, then finished"
    );
    // The reports claimed no inbox row; delivered again (a dispatcher that
    // died before committing its offsets), they decide nothing. Nor did
    // the command that created the job: its job's row names it.
    assert_eq!(count(&pool, "SELECT count(*) FROM inbox").await, 0);
    let events = count(&pool, "SELECT count(*) FROM attempt_events").await;
    for at in [BASE + 2, BASE + 3] {
        let again = store.process_batch(&reports, at).await.unwrap();
        assert_eq!(again.outcomes, vec![InputOutcome::Applied { events: 0 }; 2]);
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM attempt_events").await,
        events
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM inbox").await, 0);
    // A late report of another lease is fenced once, however often it is
    // delivered: it claims its inbox row.
    let stale = [report("stale", 2, finished())];
    let fenced = store.process_batch(&stale, BASE + 4).await.unwrap();
    assert_eq!(fenced.outcomes, vec![InputOutcome::Applied { events: 1 }]);
    let again = store.process_batch(&stale, BASE + 5).await.unwrap();
    assert_eq!(again.outcomes, vec![InputOutcome::Duplicate]);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM attempt_events WHERE kind = 'report_fenced'"
        )
        .await,
        1
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM inbox").await, 1);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_command_that_creates_its_job_claims_no_inbox_row_and_stays_a_no_op(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let execute = |command_id: Uuid, job_id: &str| Input::Execute {
        policy_digest: None,
        target_keys: Vec::new(),
        spec: std::sync::Arc::new(spec(command_id, job_id, "verify.tcp.connect")),
    };
    let created = Uuid::new_v4();
    let id = format!("command:{created}");
    let first = store
        .process_batch(&[envelope(&id, execute(created, "own/a"))], BASE)
        .await
        .unwrap();
    assert_eq!(first.outcomes, vec![InputOutcome::Applied { events: 1 }]);
    assert_eq!(count(&pool, "SELECT count(*) FROM inbox").await, 0);
    // Redelivered, alone or after the job moved on, it decides nothing.
    let events = count(&pool, "SELECT count(*) FROM attempt_events").await;
    for at in [BASE + 1, BASE + 2] {
        let again = store
            .process_batch(&[envelope(&id, execute(created, "own/a"))], at)
            .await
            .unwrap();
        assert_eq!(again.outcomes, vec![InputOutcome::Duplicate]);
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM attempt_events").await,
        events
    );
    // A cancel under the same command id is a reused id, named as such.
    let attempt_id = attempt_id_for(created, 1);
    let cancel = Input::Cancel {
        attempt_id,
        reason: "reuse".into(),
        requested_by: "test".into(),
        grace: execplane::contract::DurationMs(1_000),
    };
    let reused = store
        .process_batch(&[envelope(&id, cancel.clone())], BASE + 3)
        .await
        .unwrap();
    assert!(
        matches!(&reused.outcomes[0], InputOutcome::Rejected(Rejection::InputIdReused { first, .. })
            if first.contains("own/a")),
        "{:?}",
        reused.outcomes
    );
    // A command the batch refuses creates nothing that would name it: it
    // claims its id, and is a no-op when delivered again.
    let taken = Uuid::new_v4();
    let taken_id = format!("command:{taken}");
    for (at, expected) in [(BASE + 4, true), (BASE + 5, false)] {
        let outcome = store
            .process_batch(&[envelope(&taken_id, execute(taken, "own/a"))], at)
            .await
            .unwrap();
        assert_eq!(
            matches!(
                outcome.outcomes[..],
                [InputOutcome::Rejected(Rejection::JobIdTaken { .. })]
            ),
            expected,
            "{:?}",
            outcome.outcomes
        );
    }
    assert_eq!(count(&pool, "SELECT count(*) FROM inbox").await, 1);
    // A cancel's id claimed first and then sent as an execute of a new job
    // is found in the inbox: a reused id, and no job.
    let cancelled = Uuid::new_v4();
    let cancel_id = format!("command:{cancelled}");
    store
        .process_batch(&[envelope(&cancel_id, cancel)], BASE + 6)
        .await
        .unwrap();
    let reused = store
        .process_batch(
            &[envelope(&cancel_id, execute(cancelled, "own/b"))],
            BASE + 7,
        )
        .await
        .unwrap();
    assert!(
        matches!(&reused.outcomes[0], InputOutcome::Rejected(Rejection::InputIdReused { first, .. })
            if first.contains("cancel")),
        "{:?}",
        reused.outcomes
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM jobs WHERE job_id = 'own/b'").await,
        0
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_reused_command_id_under_another_job_is_refused_not_dropped(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let command_id = Uuid::new_v4();
    let first = Input::Execute {
        policy_digest: None,
        target_keys: Vec::new(),
        spec: std::sync::Arc::new(spec(command_id, "reuse/a", "verify.tcp.connect")),
    };
    let other = Input::Execute {
        policy_digest: None,
        target_keys: Vec::new(),
        spec: std::sync::Arc::new(spec(command_id, "reuse/b", "verify.tcp.connect")),
    };
    let id = format!("command:{command_id}");
    // Across batches (the inbox remembers what the id stood for)...
    store
        .process_batch(&[envelope(&id, first.clone())], BASE)
        .await
        .unwrap();
    let again = store
        .process_batch(
            &[envelope(&id, first.clone()), envelope(&id, other.clone())],
            BASE + 1,
        )
        .await
        .unwrap();
    assert_eq!(again.outcomes[0], InputOutcome::Duplicate, "a redelivery");
    assert!(
        matches!(&again.outcomes[1], InputOutcome::Rejected(Rejection::InputIdReused { first, again, .. })
            if first.contains("reuse/a") && again.contains("reuse/b")),
        "{:?}",
        again.outcomes[1]
    );
    // ...and inside one batch.
    let fresh = Uuid::new_v4();
    let id = format!("command:{fresh}");
    let same_batch = store
        .process_batch(
            &[
                envelope(
                    &id,
                    Input::Execute {
                        policy_digest: None,
                        target_keys: Vec::new(),
                        spec: std::sync::Arc::new(spec(fresh, "reuse/c", "verify.tcp.connect")),
                    },
                ),
                envelope(
                    &id,
                    Input::Execute {
                        policy_digest: None,
                        target_keys: Vec::new(),
                        spec: std::sync::Arc::new(spec(fresh, "reuse/d", "verify.tcp.connect")),
                    },
                ),
            ],
            BASE + 2,
        )
        .await
        .unwrap();
    assert!(matches!(
        same_batch.outcomes[1],
        InputOutcome::Rejected(Rejection::InputIdReused { .. })
    ));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM jobs WHERE job_id IN ('reuse/b', 'reuse/d')"
        )
        .await,
        0
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn one_input_the_database_refuses_is_isolated_and_the_rest_are_decided(pool: PgPool) {
    use execplane::contract::{ReportBody, RunnerReport};
    let store = Store::from_pool(pool.clone());
    // An attempt to report on.
    let command_id = Uuid::new_v4();
    store
        .process_batch(
            &[envelope(
                "setup",
                Input::Execute {
                    policy_digest: None,
                    target_keys: Vec::new(),
                    spec: std::sync::Arc::new(spec(command_id, "iso/0", "verify.tcp.connect")),
                },
            )],
            BASE,
        )
        .await
        .unwrap();
    let attempt_id = attempt_id_for(command_id, 1);
    store
        .process_batch(
            &[envelope(
                "grant",
                Input::Grant {
                    attempt_id,
                    runner_instance: "r-1".into(),
                },
            )],
            BASE + 1,
        )
        .await
        .unwrap();
    // A batch of good commands with, in the middle, a report whose progress
    // holds U+0000: Postgres text cannot store it. (Intake refuses such a
    // report before it gets here; this is the last line of defence.)
    let mut inputs: Vec<InputEnvelope> = (0..9)
        .map(|index| {
            let id = Uuid::new_v4();
            envelope(
                &format!("command:{id}"),
                Input::Execute {
                    policy_digest: None,
                    target_keys: Vec::new(),
                    spec: std::sync::Arc::new(spec(
                        id,
                        &format!("iso/{}", index + 1),
                        "verify.tcp.connect",
                    )),
                },
            )
        })
        .collect();
    inputs.insert(
        5,
        envelope(
            "report:nul",
            Input::Report(RunnerReport {
                attempt_id,
                lease_epoch: 1,
                runner_instance: "r-1".into(),
                body: ReportBody::Progress {
                    message: "half\u{0}way".into(),
                    percent: Some(50),
                },
            }),
        ),
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let isolated = store
        .process_isolating(&inputs, None, &shutdown)
        .await
        .unwrap();
    assert_eq!(isolated.decisions.len(), inputs.len());
    for (index, decision) in isolated.decisions.iter().enumerate() {
        if index == 5 {
            let reason = decision.as_ref().unwrap_err();
            assert!(reason.contains("refuses this record"), "{reason}");
        } else {
            assert!(
                matches!(decision, Ok(InputOutcome::Applied { .. })),
                "{index}: {decision:?}"
            );
        }
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM jobs WHERE job_id LIKE 'iso/%'").await,
        10
    );
    // The refused input left nothing behind, not even its inbox row.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM inbox WHERE input_id = 'report:nul'"
        )
        .await,
        0
    );
    // And shutdown ends a retry loop that cannot succeed.
    let stopped = tokio_util::sync::CancellationToken::new();
    stopped.cancel();
    let bad = [inputs[5].clone()];
    assert!(store
        .process_isolating(&bad, None, &stopped)
        .await
        .is_none());
}

/// A database that refuses every statement for a reason of the deployment's
/// (here a table that is missing, as under a migration not yet applied) is
/// waited out: the record is decided once the table is back, never
/// dead-lettered as if it were the record's fault.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_missing_table_is_waited_out_not_blamed_on_the_record(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    let id = Uuid::new_v4();
    let inputs = [envelope(
        &format!("command:{id}"),
        Input::Execute {
            policy_digest: None,
            target_keys: Vec::new(),
            spec: std::sync::Arc::new(spec(id, "away/1", "verify.tcp.connect")),
        },
    )];
    sqlx::query("ALTER TABLE inbox RENAME TO inbox_away")
        .execute(&pool)
        .await
        .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let deciding = {
        let store = store.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move { store.process_isolating(&inputs, None, &shutdown).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    assert!(!deciding.is_finished(), "it gave up on the record");
    sqlx::query("ALTER TABLE inbox_away RENAME TO inbox")
        .execute(&pool)
        .await
        .unwrap();
    let decided = tokio::time::timeout(std::time::Duration::from_secs(30), deciding)
        .await
        .expect("decided once the table is back")
        .unwrap()
        .unwrap();
    assert!(
        matches!(decided.decisions[0], Ok(InputOutcome::Applied { .. })),
        "{:?}",
        decided.decisions[0]
    );
}

/// Two dispatchers grant two attempts of one target key (limit 1) at the
/// same moment: the key's lock orders them, the second counts the first's
/// hold and leases nothing; once the holder ends, the other is leased.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn two_grants_on_one_target_key_at_once_lease_only_one(pool: PgPool) {
    use execplane::contract::{ReportBody, ReportedOutcome, RunnerReport, TargetKey};
    let store = Store::from_pool(pool.clone());
    let mut attempts = Vec::new();
    for job in ["key/1", "key/2"] {
        let command_id = Uuid::new_v4();
        let execute = Input::Execute {
            policy_digest: None,
            target_keys: vec![TargetKey {
                key: "node:h".into(),
                limit: 1,
            }],
            spec: std::sync::Arc::new(spec(command_id, job, "ssh.command.run")),
        };
        store
            .process_batch(&[envelope(&format!("create {job}"), execute)], BASE)
            .await
            .unwrap();
        attempts.push(attempt_id_for(command_id, 1));
    }
    let grant = |index: usize| [InputEnvelope::grant(attempts[index], format!("r-{index}"))];
    let (first, second) = (grant(0), grant(1));
    let (a, b) = tokio::join!(
        store.process_batch(&first, BASE + 1),
        store.process_batch(&second, BASE + 1)
    );
    let outcomes = [a.unwrap().outcomes, b.unwrap().outcomes].concat();
    let leased: Vec<usize> = (0..2)
        .filter(|index| matches!(outcomes[*index], InputOutcome::Applied { events: 1 }))
        .collect();
    assert_eq!(leased.len(), 1, "{outcomes:?}");
    let (holder, waiter) = (leased[0], 1 - leased[0]);
    assert!(
        matches!(&outcomes[waiter], InputOutcome::Rejected(Rejection::TargetKeyBusy { key, holders: 1, limit: 1, .. }) if key == "node:h"),
        "{outcomes:?}"
    );
    let holding: Vec<Uuid> =
        sqlx::query_scalar("SELECT attempt_id FROM target_keys WHERE key = 'node:h' AND holding")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(holding, vec![attempts[holder]]);

    let done = Input::Report(RunnerReport {
        attempt_id: attempts[holder],
        lease_epoch: 1,
        runner_instance: format!("r-{holder}"),
        body: ReportBody::Finished {
            outcome: ReportedOutcome::Succeeded,
            category: None,
            message: "done".into(),
            result_json: None,
            outputs: Vec::new(),
        },
    });
    store
        .process_batch(&[envelope("done", done)], BASE + 2)
        .await
        .unwrap();
    // The refused grant left no claim behind: the same grant again, once
    // the key is free, is decided, not dropped as a duplicate.
    let again = store
        .process_batch(
            &[InputEnvelope::grant(
                attempts[waiter],
                format!("r-{waiter}"),
            )],
            BASE + 3,
        )
        .await
        .unwrap();
    assert!(
        matches!(again.outcomes[0], InputOutcome::Applied { events: 1 }),
        "{:?}",
        again.outcomes
    );
}

/// The attempts gauge and the console's overview count only attempts that
/// have not ended, every such status with its zero, through the index that
/// holds only them (the deadlines': an attempt has one armed until it
/// ends): its cost is the work in flight, not every attempt ever run.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_attempts_gauge_counts_what_is_in_flight_from_an_index_of_it(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 40).await;
    let all: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM attempts GROUP BY status")
            .fetch_all(&pool)
            .await
            .unwrap();
    let live = store.live_attempts_by_status(None).await.unwrap();
    let names: Vec<&str> = live.iter().map(|(status, _)| status.as_str()).collect();
    assert_eq!(names, ["queued", "leased", "running", "cancel_requested"]);
    for (status, count) in &live {
        let expected = all
            .iter()
            .find(|(counted, _)| counted == status)
            .map_or(0, |(_, count)| *count);
        assert_eq!(*count, expected, "{status}");
    }
    assert!(
        all.iter().any(|(status, _)| status == "succeeded"),
        "the workload ended some attempts: {all:?}"
    );

    // The index that holds only attempts in flight answers it.
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    // For every tenant (the gauge) and for some (the console's overview).
    for tenants in [None, Some(vec!["team-a".to_owned()])] {
        let plan: Vec<String> = sqlx::query_scalar(
            "EXPLAIN SELECT status, count(*) FROM attempts \
             WHERE next_deadline IS NOT NULL \
               AND status IN ('queued', 'leased', 'running', 'cancel_requested') \
               AND ($1::text[] IS NULL OR tenant = ANY($1)) GROUP BY status",
        )
        .bind(&tenants)
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        assert!(
            plan.iter()
                .any(|line| line.contains("attempts_next_deadline")),
            "{tenants:?}: {plan:?}"
        );
    }
    drop(conn);
    let tenants: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT tenant FROM attempts ORDER BY tenant LIMIT 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    let scoped = store.live_attempts_by_status(Some(&tenants)).await.unwrap();
    for (status, count) in &scoped {
        let expected: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM attempts WHERE status = $1 AND tenant = ANY($2)",
        )
        .bind(status)
        .bind(&tenants)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(*count, expected, "{status} of {tenants:?}");
    }
}

/// One due timer the store cannot decide (here its attempt's row is
/// damaged) is refused alone: every other due timer fires, and a sweep
/// that skips the refused one finds nothing more to do. Before, the sweep
/// was one transaction: it failed whole, every sweep, and no timer in the
/// system fired again.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_timer_the_store_cannot_decide_holds_no_other_timer_back(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 40).await;
    let armed: Vec<Uuid> = sqlx::query_scalar(
        "SELECT attempt_id FROM attempts WHERE next_deadline IS NOT NULL ORDER BY next_deadline, attempt_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(armed.len() >= 2, "{armed:?}");
    // The first due is the damaged one: it comes first in every sweep.
    let damaged = armed[0];
    sqlx::query("UPDATE attempts SET last_hash = '\\x00' WHERE attempt_id = $1")
        .bind(damaged)
        .execute(&pool)
        .await
        .unwrap();
    // Past every deadline the workload armed (it runs at BASE).
    let later = BASE + 30 * 24 * 3_600_000;
    let never = tokio_util::sync::CancellationToken::new();
    let swept = store
        .sweep_timers(later, later, 500, &[], &never)
        .await
        .unwrap();
    assert_eq!(
        swept.refused.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [damaged]
    );
    assert!(
        swept.refused[0].1.contains("last_hash"),
        "{:?}",
        swept.refused
    );
    assert!(
        !swept.events.is_empty(),
        "the other timers fired: {} due",
        swept.due
    );
    let fired: std::collections::BTreeSet<Uuid> =
        swept.events.iter().map(|event| event.attempt_id).collect();
    assert!(!fired.contains(&damaged));
    // Skipping it, nothing else is due any more (a fired timer may arm
    // the next one: those fire in the following sweeps).
    let mut rounds = 0;
    loop {
        let again = store
            .sweep_timers(later, later, 500, &[damaged], &never)
            .await
            .unwrap();
        assert!(again.refused.is_empty(), "{:?}", again.refused);
        if again.due == 0 {
            break;
        }
        rounds += 1;
        assert!(rounds < 10, "timers keep firing");
    }
    let still_armed: Vec<Uuid> = sqlx::query_scalar(
        "SELECT attempt_id FROM attempts WHERE next_deadline <= to_timestamp($1::float8 / 1000)",
    )
    .bind(later as f64)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(still_armed, [damaged]);
}

/// The sweeper's probe reads one entry of the deadline index, in every plan
/// the server may cache for it: most sweeps find nothing due, and a probe
/// that scanned the attempts cost what the store holds, once a sweep.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_sweepers_probe_reads_one_entry_of_the_deadline_index(pool: PgPool) {
    let store = Store::from_pool(pool.clone());
    drive_mixed(&store, 40).await;
    let mut conn = pool.acquire().await.unwrap();
    // What a server caches after five executions when the generic plan
    // looks no dearer: the plan that must not scan.
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(&format!(
        "EXPLAIN {}",
        include_str!("../src/store/sql/earliest_deadline.sql")
    ))
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert!(
        plan.iter()
            .any(|line| line.contains("attempts_next_deadline")),
        "{plan:?}"
    );
    assert!(
        !plan.iter().any(|line| line.contains("Seq Scan")),
        "{plan:?}"
    );
}

/// A verification instance's presence, sent now, with `capacity` slots.
fn presence(instance: &str, capacity: i32) -> execplane::codec::PresenceRecord {
    let now = chrono::Utc::now().timestamp_millis();
    execplane::codec::PresenceRecord {
        runner_instance: instance.into(),
        runner_type: "verification".into(),
        version: "test".into(),
        pool: Vec::new(),
        capabilities: Vec::new(),
        operations: vec!["verify.tcp.connect".into()],
        capacity,
        in_flight: 0,
        work_partition: 0,
        status: execplane::codec::PresenceStatus::Ready,
        started_at: now,
        sent_at: now,
        isolation: "sandboxed".into(),
    }
}

/// A placement round says whether it left attempts waiting: an attempt
/// that ends wakes placement only then (docs/ARCHITECTURE.md, "Placement"),
/// so a round that cannot tell must say so.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_placement_round_says_whether_it_left_attempts_waiting(pool: PgPool) {
    use execplane::dispatcher::placement::place_once;
    let store = Store::from_pool(pool.clone());
    let config = execplane::dispatcher::DispatcherConfig::default();
    let mut cursor = String::new();
    store
        .upsert_presence(&[presence("verification-1", 1)])
        .await
        .unwrap();
    let round = place_once(&store, &config, &mut cursor).await.unwrap();
    assert_eq!((round.granted, round.backlog), (0, false), "nothing queued");
    let now = chrono::Utc::now().timestamp_millis();
    for job_id in ["backlog/1", "backlog/2"] {
        let execute = Input::Execute {
            policy_digest: None,
            target_keys: Vec::new(),
            spec: std::sync::Arc::new(spec(Uuid::new_v4(), job_id, "verify.tcp.connect")),
        };
        store
            .process_batch(&[envelope(job_id, execute)], now)
            .await
            .unwrap();
    }
    let round = place_once(&store, &config, &mut cursor).await.unwrap();
    assert_eq!(
        (round.granted, round.backlog),
        (1, true),
        "one slot, two attempts"
    );
    let round = place_once(&store, &config, &mut cursor).await.unwrap();
    assert_eq!(
        (round.granted, round.backlog),
        (0, true),
        "no free slot: the queue is not read, so it may hold anything"
    );
    store
        .upsert_presence(&[presence("verification-1", 2)])
        .await
        .unwrap();
    let round = place_once(&store, &config, &mut cursor).await.unwrap();
    assert_eq!(
        (round.granted, round.backlog),
        (1, false),
        "the queue drained"
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_batch_that_waited_for_a_job_lock_sees_the_job_the_other_batch_created(pool: PgPool) {
    // A batch delivered to two dispatchers during a rebalance: the second
    // waits for a job the first holds, and the first creates a job the
    // second's execute names. Once the lock is free the execute is a
    // repeat, not decided again (which the log's keys would refuse).
    let store = Store::from_pool(pool.clone());
    let execute = |command_id, job_id: &str| Input::Execute {
        policy_digest: None,
        target_keys: Vec::new(),
        spec: std::sync::Arc::new(spec(command_id, job_id, "verify.tcp.connect")),
    };
    let held = Uuid::new_v4();
    store
        .process_batch(
            &[envelope(
                &format!("command:{held}"),
                execute(held, "wait/held"),
            )],
            BASE,
        )
        .await
        .unwrap();
    let created = Uuid::new_v4();
    let create = envelope(
        &format!("command:{created}"),
        execute(created, "wait/created"),
    );
    let cancel = envelope(
        "cancel-held",
        Input::Cancel {
            attempt_id: attempt_id_for(held, 1),
            reason: "wait".into(),
            requested_by: "test".into(),
            grace: execplane::contract::DurationMs(1_000),
        },
    );
    // Another transaction holds the job the second batch needs.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM jobs WHERE job_id = 'wait/held' FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let second = {
        let store = store.clone();
        let inputs = vec![create.clone(), cancel];
        tokio::spawn(async move { store.process_batch(&inputs, BASE + 2).await })
    };
    // Once the second batch waits for that lock, the first creates its job.
    for _ in 0..200 {
        let waiting = count(
            &pool,
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
        )
        .await;
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let first = store.process_batch(&[create], BASE + 1).await.unwrap();
    assert_eq!(first.outcomes, vec![InputOutcome::Applied { events: 1 }]);
    holder.rollback().await.unwrap();
    let second = second.await.unwrap().expect("the second batch is decided");
    assert_eq!(second.outcomes[0], InputOutcome::Duplicate);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM attempts WHERE job_id = 'wait/created'"
        )
        .await,
        1
    );
}
