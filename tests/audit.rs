//! The published log as auditors read it (docs/EVENTS.md): it proves its
//! own integrity from Kafka alone, agrees with the database through a
//! relay killed mid-publication, and exports to a signed evidence bundle
//! checked with nothing but the file and a public key.

mod common;

use std::path::Path;
use std::time::Duration;

use common::pipeline::{job, Pipeline};
use execplane::contract::topics;
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::producer::FutureRecord;
use rdkafka::Message;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Every way an attempt ends: success, failure, a retry after `lease_lost`,
/// cancel, and rejected, with the relay killed -9 while it publishes and
/// started again. Waits until every job ended and the outbox is empty.
async fn mixed_run(pipeline: &mut Pipeline) {
    let dispatcher_and_relay = pipeline.start_roles(1);
    let (relay, runner) = (dispatcher_and_relay.1, dispatcher_and_relay.2[0]);
    pipeline.wait_runners(1).await;
    let tcp = |port: u16| {
        job(
            "verify.tcp.connect",
            json!({"host": "127.0.0.1", "port": port}),
            json!({}),
        )
    };
    let succeeds = tcp(5432);
    let fails = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": closed_port()}),
        json!({"retry": {"max_attempts": 1, "initial_backoff": "100ms", "max_backoff": "100ms"}}),
    );
    let loses_its_lease = job(
        "verify.custom.probe",
        json!({"probe_id": "sleep", "args": {"seconds": 4}}),
        json!({"retry": {"max_attempts": 2, "initial_backoff": "100ms", "max_backoff": "100ms"}}),
    );
    let cancelled = job(
        "verify.custom.probe",
        json!({"probe_id": "hang"}),
        json!({}),
    );
    let mut rejected = tcp(5432);
    rejected.inputs = json!({"host": "127.0.0.1"});
    for spec in [&succeeds, &fails, &loses_its_lease, &cancelled, &rejected] {
        pipeline.submit(spec).await;
    }
    let attempt = pipeline
        .wait_status(&cancelled.job_id, "running", WAIT)
        .await;
    pipeline.cancel(attempt, 3_000).await;
    pipeline
        .wait_status(&loses_its_lease.job_id, "running", WAIT)
        .await;
    // Only the one job is to lose its lease: the others end first.
    for spec in [&succeeds, &fails] {
        pipeline.wait_done(&spec.job_id, WAIT).await;
    }
    pipeline.signal(runner, "KILL");
    pipeline.spawn(&["runner", "verification"], &[]);
    let expected = [
        (&succeeds, vec!["succeeded"]),
        (&fails, vec!["failed"]),
        (&loses_its_lease, vec!["failed", "succeeded"]),
        (&cancelled, vec!["cancelled"]),
        (&rejected, vec!["rejected"]),
    ];
    for (spec, statuses) in expected {
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        let ended: Vec<&str> = attempts
            .iter()
            .map(|(_, status, _)| status.as_str())
            .collect();
        assert_eq!(ended, statuses, "{}", spec.job_id);
    }
    // A burst for the relay to be killed in the middle of (the new relay
    // waits out its predecessor's window, so some of the burst may lose
    // their leases: they end all the same).
    let burst: Vec<_> = (0..40).map(|_| tcp(5432)).collect();
    for spec in &burst {
        pipeline.submit(spec).await;
    }
    pipeline
        .wait("some of the burst to be published", WAIT, || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM attempts WHERE status = 'succeeded'")
                .fetch_one(&pipeline.pool)
                .await
                .unwrap()
                > 5
        })
        .await;
    pipeline.signal(relay, "KILL");
    pipeline.spawn(&["relay"], &[]);
    for spec in &burst {
        pipeline.wait_done(&spec.job_id, WAIT).await;
    }
    pipeline.wait_published(WAIT).await;
}

/// Creates `topic` with the published log's partition count.
async fn create_topic(pipeline: &Pipeline, topic: &str) {
    let admin = pipeline.kafka.admin().unwrap();
    let replication = common::replication_factor().unwrap_or(1);
    let created = admin
        .create_topics(
            &[NewTopic::new(
                topic,
                6,
                TopicReplication::Fixed(replication),
            )],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    for result in created {
        result.expect("the scratch topic is created");
    }
}

/// Produces `records` to `topic` as they are (partition, key, headers,
/// value), the one at `alter` passed through `change` first.
async fn copy_to(
    pipeline: &Pipeline,
    topic: &str,
    records: &[OwnedMessage],
    mut change: impl FnMut(usize, Vec<u8>) -> Option<Vec<u8>>,
) {
    let producer = pipeline.kafka.producer().unwrap();
    for (index, record) in records.iter().enumerate() {
        let Some(value) = change(index, record.payload().unwrap_or_default().to_vec()) else {
            continue;
        };
        let mut to = FutureRecord::to(topic)
            .partition(record.partition())
            .payload(&value);
        if let Some(key) = record.key() {
            to = to.key(key);
        }
        if let Some(headers) = record.headers() {
            to = to.headers(headers.clone());
        }
        producer
            .send(to, Duration::from_secs(10))
            .await
            .map_err(|(error, _)| error)
            .expect("produce");
    }
}

fn header<'a>(record: &'a OwnedMessage, name: &str) -> &'a str {
    let headers = record.headers().expect("headers");
    let found = headers
        .iter()
        .find(|header| header.key == name)
        .and_then(|header| header.value)
        .unwrap_or_else(|| panic!("no {name} header"));
    std::str::from_utf8(found).unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_published_log_proves_itself_and_agrees_with_the_database(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    mixed_run(&mut pipeline).await;
    let published = pipeline.kafka.topic(topics::ATTEMPT_EVENTS);
    let records = pipeline.consume_all(topics::ATTEMPT_EVENTS).await;
    // Every record carries its links of the chain.
    for record in &records {
        assert_eq!(header(record, "execplane_hash").len(), 64);
        assert_eq!(header(record, "execplane_prev_hash").len(), 64);
        header(record, "execplane_seq").parse::<i64>().unwrap();
    }
    // Both example consumers fold the topic to the database's states.
    let states = common::consumers::stored_states(&pool).await;
    for (name, command) in common::consumers::each() {
        let fold = common::consumers::fold(name, command, &pipeline.brokers, &published, &[]);
        assert_eq!(
            common::consumers::folded_states(&fold),
            states,
            "the {name} consumer's fold"
        );
    }

    // Three records published again, as a relay does after a crash.
    copy_to(&pipeline, &published, &records[..3], |_, value| Some(value)).await;

    let compared = pipeline.run(&["audit", "compare"], &[]);
    assert!(
        compared.status.success(),
        "{}{}",
        text(&compared.stdout),
        text(&compared.stderr)
    );
    let summary = text(&compared.stdout);
    assert!(
        summary.contains("the topic and the database agree"),
        "{summary}"
    );
    let repeats: u64 = summary
        .split(" repeats dropped")
        .next()
        .and_then(|before| before.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(repeats >= 3, "{summary}");
    let verified = pipeline.run(&["audit", "verify", "--from-kafka"], &[]);
    assert!(verified.status.success(), "{}", text(&verified.stderr));
    assert!(
        text(&verified.stdout).contains("published log intact"),
        "{}",
        text(&verified.stdout)
    );

    // One altered byte in one record's datum, on a copy of the topic.
    let victim = records
        .iter()
        .position(|record| header(record, "execplane_seq") == "2")
        .unwrap();
    let (attempt, seq) = (text(records[victim].key().unwrap()), 2);
    let tampered = format!("{}scratch.tampered", pipeline.prefix);
    create_topic(&pipeline, &tampered).await;
    copy_to(&pipeline, &tampered, &records, |index, mut value| {
        if index == victim {
            let at = value.len() - 2;
            value[at] ^= 0x01;
        }
        Some(value)
    })
    .await;
    let caught = pipeline.run(
        &["audit", "verify", "--from-kafka", "--topic", &tampered],
        &[],
    );
    assert_eq!(caught.status.code(), Some(1), "{}", text(&caught.stdout));
    let said = text(&caught.stderr);
    assert!(
        said.contains(&format!("hash chain broken at attempt {attempt} seq {seq}")),
        "{said}"
    );

    // The same records with the victim published again after its
    // successor, as a relay round that timed out is: still intact.
    let mut reordered: Vec<OwnedMessage> = records.clone();
    let moved = reordered.remove(victim);
    let successor = reordered
        .iter()
        .position(|record| {
            text(record.key().unwrap()) == attempt && header(record, "execplane_seq") == "3"
        })
        .unwrap();
    reordered.insert(successor + 1, moved);
    let late = format!("{}scratch.reordered", pipeline.prefix);
    create_topic(&pipeline, &late).await;
    copy_to(&pipeline, &late, &reordered, |_, value| Some(value)).await;
    let intact = pipeline.run(&["audit", "verify", "--from-kafka", "--topic", &late], &[]);
    assert!(intact.status.success(), "{}", text(&intact.stderr));

    // One event missing from another copy: the last of its attempt, so the
    // chain on the topic still holds and only the comparison can tell. A
    // relay that crashed may have published it twice: every copy goes.
    let last = records
        .iter()
        .rposition(|record| text(record.key().unwrap()) == attempt)
        .unwrap();
    let last_seq = header(&records[last], "execplane_seq").to_owned();
    let short = format!("{}scratch.short", pipeline.prefix);
    create_topic(&pipeline, &short).await;
    copy_to(&pipeline, &short, &records, |index, value| {
        let record = &records[index];
        let copy =
            text(record.key().unwrap()) == attempt && header(record, "execplane_seq") == last_seq;
        (!copy).then_some(value)
    })
    .await;
    let missing = pipeline.run(&["audit", "compare", "--topic", &short], &[]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing.stdout));
    let said = text(&missing.stderr);
    assert!(
        said.contains(&format!(
            "missing on the topic: attempt {attempt} seq {last_seq}"
        )),
        "{said}"
    );
    let timeline = pipeline.run(
        &["audit", "replay", "--from-kafka", "--attempt", &attempt],
        &[],
    );
    assert!(timeline.status.success(), "{}", text(&timeline.stderr));
    let from_database = pipeline.run(&["audit", "replay", "--attempt", &attempt], &[]);
    assert_eq!(text(&timeline.stdout), text(&from_database.stdout));
}

fn write_keys(dir: &Path) -> (String, String) {
    let key = openssl::pkey::PKey::generate_ed25519().unwrap();
    let private = dir.join("audit-key.pem");
    let public = dir.join("audit-key.pub.pem");
    std::fs::write(&private, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
    std::fs::write(&public, key.public_key_to_pem().unwrap()).unwrap();
    (private.display().to_string(), public.display().to_string())
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_evidence_bundle_verifies_offline_and_any_flipped_byte_fails_it(pool: PgPool) {
    let store = execplane::store::Store::from_pool(pool.clone());
    common::drive_mixed(&store, 12).await;
    let dir = std::env::temp_dir().join(format!("execplane-bundle-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (private, public) = write_keys(&dir);
    std::fs::create_dir_all(dir.join("other")).unwrap();
    let (_, stranger) = write_keys(&dir.join("other"));
    let export = common::execplane_with(
        &pool,
        &[
            "audit",
            "export",
            "--since",
            "2020-01-01T00:00:00Z",
            "--until",
            "2100-01-01T00:00:00Z",
        ],
        &[("EXECPLANE_AUDIT_SIGNING_KEY_FILE", &private)],
    );
    assert!(export.status.success(), "{}", text(&export.stderr));
    let bundle = dir.join("bundle.jsonl");
    std::fs::write(&bundle, &export.stdout).unwrap();
    let lines = export.stdout.iter().filter(|byte| **byte == b'\n').count();
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM attempt_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(lines as i64, events + 2, "a header, every event, a trailer");

    // Offline: no database, no broker, no configuration.
    let offline = |file: &Path, key: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_execplane"));
        command
            .env_clear()
            .args(["audit", "verify", "--file"])
            .arg(file);
        if let Some(key) = key {
            command.args(["--public-key", key]);
        }
        command.output().unwrap()
    };
    let good = offline(&bundle, Some(&public));
    assert!(good.status.success(), "{}", text(&good.stderr));
    assert!(
        text(&good.stdout).contains("signed by the given key"),
        "{}",
        text(&good.stdout)
    );
    let other = offline(&bundle, Some(&stranger));
    assert_eq!(other.status.code(), Some(1));
    assert!(
        text(&other.stderr).contains("signature refused"),
        "{}",
        text(&other.stderr)
    );

    // A flipped bit anywhere (header, events, trailer) fails the bundle.
    let bytes = std::fs::read(&bundle).unwrap();
    let flipped = dir.join("flipped.jsonl");
    let step = (bytes.len() / 37).max(1);
    for at in (0..bytes.len()).step_by(step) {
        if bytes[at] == b'\n' {
            continue;
        }
        let mut copy = bytes.clone();
        copy[at] ^= 0x01;
        std::fs::write(&flipped, &copy).unwrap();
        let refused = offline(&flipped, Some(&public));
        assert_eq!(refused.status.code(), Some(1), "byte {at} flipped passed");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
