//! The topology on a restarted broker: an Apache Kafka node of the test's
//! own (scripts/kafka.sh), stopped and started on its log directory, still
//! holds the whole published log.

mod common;

use std::time::Duration;

use execplane::contract::topics;
use execplane::kafka::KafkaConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};

async fn read_all(kafka: &KafkaConfig, topic: &str) -> usize {
    let topic = kafka.topic(topic);
    let consumer: StreamConsumer = kafka.assigned_consumer().unwrap();
    let partitions = execplane::kafka::partition_count(&consumer, &topic).unwrap();
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition_offset(&topic, partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut count = 0;
    while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(3), consumer.recv()).await {
        count += 1;
    }
    count
}

#[tokio::test]
async fn a_restarted_durable_broker_still_holds_the_whole_published_log() {
    let broker = common::kafka::Cluster::start(1, None);
    let kafka = KafkaConfig {
        brokers: broker.bootstrap(),
        topic_prefix: "durable.".into(),
        fetch_wait_ms: 5,
        codec: Default::default(),
        properties: Vec::new(),
        replication_factor: Some(1),
    };
    execplane::kafka::topology::apply(&kafka)
        .await
        .expect("topology applies");
    let producer = kafka.producer().unwrap();
    let topic = kafka.topic(topics::ATTEMPT_EVENTS);
    for index in 0..500 {
        let key = format!("attempt-{}", index % 37);
        let payload = format!("event {index}");
        producer
            .send(
                FutureRecord::to(&topic).key(&key).payload(&payload),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| error)
            .unwrap();
    }
    assert_eq!(read_all(&kafka, topics::ATTEMPT_EVENTS).await, 500);
    drop(producer);

    broker.stop(1);
    broker.restart(1);
    assert_eq!(
        read_all(&kafka, topics::ATTEMPT_EVENTS).await,
        500,
        "the published log after a broker restart (logs in {})",
        broker.dir.display()
    );
}

/// The stack broker's TLS + SASL listener (scripts/kafka.sh) with the
/// stack's CA and user, and the password `password`.
fn secure_settings(mechanism: &str, password: &str) -> Vec<(&'static str, String)> {
    let tls = common::stack_dir().join("kafka/tls");
    vec![
        ("EXECPLANE_KAFKA_BROKERS", "127.0.0.1:9094".to_owned()),
        ("EXECPLANE_KAFKA_SECURITY_PROTOCOL", "sasl_ssl".to_owned()),
        (
            "EXECPLANE_KAFKA_SSL_CA_FILE",
            tls.join("ca.pem").display().to_string(),
        ),
        ("EXECPLANE_KAFKA_SASL_MECHANISM", mechanism.to_owned()),
        ("EXECPLANE_KAFKA_SASL_USERNAME", "execplane".to_owned()),
        ("EXECPLANE_KAFKA_SASL_PASSWORD", password.to_owned()),
    ]
}

fn stack_password() -> String {
    std::fs::read_to_string(common::stack_dir().join("kafka/tls/client-password"))
        .expect("scripts/kafka.sh wrote the secure listener's password")
        .trim()
        .to_owned()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_job_runs_end_to_end_over_tls_and_scram(pool: sqlx::PgPool) {
    let mut settings = secure_settings("SCRAM-SHA-512", "");
    // By file, as a mounted secret is given.
    settings.retain(|(name, _)| *name != "EXECPLANE_KAFKA_SASL_PASSWORD");
    let file = std::env::temp_dir().join(format!("kafka-password-{}", uuid::Uuid::new_v4()));
    std::fs::write(&file, format!("{}\n", stack_password())).unwrap();
    settings.push((
        "EXECPLANE_KAFKA_SASL_PASSWORD_FILE",
        file.display().to_string(),
    ));
    let mut pipeline = common::pipeline::Pipeline::with_settings(&pool, &settings).await;
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let spec = common::pipeline::job(
        "verify.tcp.connect",
        serde_json::json!({"host": "127.0.0.1", "port": 5432}),
        serde_json::json!({}),
    );
    pipeline.submit(&spec).await;
    let attempts = pipeline
        .wait_done(&spec.job_id, Duration::from_secs(60))
        .await;
    assert_eq!(attempts.last().unwrap().1, "succeeded", "{attempts:?}");
    let _ = std::fs::remove_file(file);
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_wrong_password_stops_a_role_at_start_naming_the_cause(pool: sqlx::PgPool) {
    for mechanism in ["SCRAM-SHA-256", "PLAIN"] {
        let started = std::time::Instant::now();
        let out = tokio::task::spawn_blocking({
            let settings = secure_settings(mechanism, "not-the-password");
            let url = common::database_url(&pool);
            move || {
                std::process::Command::new(env!("CARGO_BIN_EXE_execplane"))
                    .arg("dispatcher")
                    .envs(settings)
                    .env("EXECPLANE_DATABASE_URL", url)
                    .env("EXECPLANE_TOPIC_PREFIX", "wrong-password.")
                    .env("EXECPLANE_METRICS_ADDR", "")
                    .stdin(std::process::Stdio::null())
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{mechanism}: {stderr}");
        assert!(
            stderr.contains("the broker refused this client")
                && stderr.to_ascii_lowercase().contains("authentication"),
            "{mechanism}: {stderr}"
        );
        assert!(!stderr.contains("not-the-password"), "{stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{mechanism}: {:?}",
            started.elapsed()
        );
    }
}

/// On three brokers the log topics get the topology's replication (3
/// replicas, `min.insync.replicas` 2); `topology apply --check` changes
/// nothing and names a live topic that differs from the declaration.
#[tokio::test]
async fn topics_get_the_topologys_replication_and_check_names_drift() {
    let cluster = tokio::task::spawn_blocking(|| common::kafka::Cluster::start(3, None))
        .await
        .unwrap();
    let kafka = KafkaConfig {
        brokers: cluster.bootstrap(),
        topic_prefix: "replicated.".into(),
        fetch_wait_ms: 100,
        codec: Default::default(),
        properties: Vec::new(),
        replication_factor: None,
    };
    // The cluster's controllers elect a leader first.
    let mut report = None;
    for _ in 0..60 {
        match execplane::kafka::topology::apply(&kafka).await {
            Ok(applied) => {
                report = Some(applied);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let report = report.expect("the topology applies on three brokers");
    assert!(!report.created.is_empty());
    // A broker's metadata learns of the new topics a moment after the
    // controller made them: the check is asked until it has (bounded).
    let mut report = execplane::kafka::topology::check(&kafka).await.unwrap();
    for _ in 0..40 {
        if report.created.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        report = execplane::kafka::topology::check(&kafka).await.unwrap();
    }
    assert!(
        report.created.is_empty() && report.drift.is_empty(),
        "{report:?}"
    );

    let check = |factor: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_execplane"))
            .args(["topology", "apply", "--check"])
            .env("EXECPLANE_KAFKA_BROKERS", cluster.bootstrap())
            .env("EXECPLANE_TOPIC_PREFIX", "replicated.")
            .env("EXECPLANE_TOPIC_REPLICATION_FACTOR", factor)
            .env("EXECPLANE_LOG", "warn")
            .output()
            .unwrap()
    };
    let out = check("0");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = check("2");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("replicated.exec.attempt-events.v1: 3 replicas on the broker, 2 declared"),
        "{stdout}"
    );
    // Nothing changed: the declared check is clean again.
    assert_eq!(check("0").status.code(), Some(0));
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `/readyz` of a role's metrics address: its status and body, or `None`
/// while nothing answers there.
async fn readyz(port: u16) -> Option<(u16, String)> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let response = client
        .get(format!("http://127.0.0.1:{port}/readyz"))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.unwrap_or_default()))
}

/// A dispatcher, relay and runner started while their broker is down wait
/// for it (not ready on `/readyz`, never exiting), become ready once it is
/// up and serve a job; when it goes away again they say so, stay up, and
/// SIGTERM still stops each within its grace.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn roles_started_while_the_broker_is_down_wait_for_it_and_stop_on_sigterm(
    pool: sqlx::PgPool,
) {
    let broker = common::kafka::Cluster::start(1, None);
    let mut pipeline = common::pipeline::Pipeline::with_brokers(&pool, broker.bootstrap()).await;
    broker.stop(1);

    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let addresses: Vec<String> = ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let roles: Vec<usize> = [
        vec!["dispatcher"],
        vec!["relay"],
        vec!["runner", "verification"],
    ]
    .iter()
    .zip(&addresses)
    .map(|(args, address)| pipeline.spawn(args, &[("EXECPLANE_METRICS_ADDR", address)]))
    .collect();

    // Down: every role answers `/readyz` with 503 naming the brokers, and
    // keeps waiting (none exits) for longer than a few backoffs.
    for port in &ports {
        let port = *port;
        pipeline
            .wait("a role's /readyz while the broker is down", Duration::from_secs(60), || async move {
                matches!(readyz(port).await, Some((503, body)) if body.contains("kafka: waiting for the brokers"))
            })
            .await;
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    for role in &roles {
        assert!(
            pipeline.wait_exit(*role, Duration::ZERO).is_none(),
            "a role exited while its broker was down: {}",
            pipeline.log(*role)
        );
    }

    // Up: ready, and a job runs end to end.
    broker.restart(1);
    for port in &ports {
        let port = *port;
        pipeline
            .wait(
                "a role's /readyz once the broker is up",
                Duration::from_secs(90),
                || async move { matches!(readyz(port).await, Some((200, _))) },
            )
            .await;
    }
    pipeline.wait_runners(1).await;
    let spec = common::pipeline::job(
        "verify.tcp.connect",
        serde_json::json!({"host": "127.0.0.1", "port": 5432}),
        serde_json::json!({}),
    );
    pipeline.submit(&spec).await;
    let attempts = pipeline
        .wait_done(&spec.job_id, Duration::from_secs(60))
        .await;
    assert_eq!(attempts.last().unwrap().1, "succeeded", "{attempts:?}");

    // Down again while they run: not ready, still up.
    broker.kill(1);
    for port in &ports {
        let port = *port;
        pipeline
            .wait("a role's /readyz once the broker is lost", Duration::from_secs(60), || async move {
                matches!(readyz(port).await, Some((503, body)) if body.contains("kafka: the brokers at"))
            })
            .await;
    }
    for role in &roles {
        assert!(
            pipeline.wait_exit(*role, Duration::ZERO).is_none(),
            "a role exited when its broker was lost: {}",
            pipeline.log(*role)
        );
    }
    // SIGTERM with the broker still down: each stops within its grace
    // (the runner's drain, 5 s here, and the final reports' settling, 5 s).
    for role in &roles {
        pipeline.signal(*role, "TERM");
    }
    for role in &roles {
        let status = pipeline.wait_exit(*role, Duration::from_secs(20));
        assert!(
            status.is_some(),
            "a role ignored SIGTERM for 20 s with its broker down: {}",
            pipeline.log(*role)
        );
    }
}

/// The broker (node id) that leads the most partitions of `topics`, and
/// how many it leads.
fn busiest_leader(kafka: &KafkaConfig, topics: &[&str]) -> (i32, usize) {
    let consumer: StreamConsumer = kafka.assigned_consumer().unwrap();
    let mut led: std::collections::BTreeMap<i32, usize> = Default::default();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(&kafka.topic(topic)), Duration::from_secs(10))
            .unwrap();
        for partition in metadata.topics()[0].partitions() {
            *led.entry(partition.leader()).or_default() += 1;
        }
    }
    led.into_iter().max_by_key(|(_, count)| *count).unwrap()
}

/// How many jobs the broker-loss test runs.
const BROKER_LOSS_JOBS: usize = 2000;

/// Three brokers, the log topics at 3 replicas with `min.insync.replicas`
/// 2; `kill -9` of the broker leading most partitions of the command and
/// log topics while thousands of jobs run, restarted 20 s later. Nothing
/// is lost, no attempt runs twice (its target counts the connections), no
/// attempt ends twice, and the published log deduplicated by event id is
/// the database's. The dip and the recovery are printed (figures, not
/// asserted: `--nocapture` shows them).
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_broker_killed_mid_run_loses_nothing_and_runs_nothing_twice(pool: sqlx::PgPool) {
    let cluster = std::sync::Arc::new(
        tokio::task::spawn_blocking(|| common::kafka::Cluster::start(3, None))
            .await
            .unwrap(),
    );
    // The cluster's controllers elect a leader first; then the topology's
    // own replication (3 replicas, min.insync.replicas 2).
    let settings = [
        ("EXECPLANE_KAFKA_BROKERS", cluster.bootstrap()),
        ("EXECPLANE_TOPIC_REPLICATION_FACTOR", "3".to_owned()),
    ];
    let mut pipeline = None;
    for _ in 0..60 {
        let attempt = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::spawn({
                let (pool, settings) = (pool.clone(), settings.clone());
                async move { common::pipeline::Pipeline::with_settings(&pool, &settings).await }
            }),
        )
        .await;
        if let Ok(Ok(built)) = attempt {
            pipeline = Some(built);
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut pipeline = pipeline.expect("the topology applies on three brokers");

    // The target: counts every connection, so an attempt run twice shows.
    let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = target.local_addr().unwrap().port();
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn({
        let connections = connections.clone();
        async move {
            while let Ok((stream, _)) = target.accept().await {
                connections.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        }
    });

    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    for _ in 0..2 {
        pipeline.spawn(
            &["runner", "verification"],
            &[("EXECPLANE_RUNNER_CAPACITY", "32")],
        );
    }
    pipeline.wait_runners(2).await;

    // Timeouts long enough that a broker's loss costs no lease: what is
    // tested is that nothing is lost or doubled, not a retry.
    let specs: Vec<_> = (0..BROKER_LOSS_JOBS)
        .map(|_| {
            common::pipeline::job(
                "verify.tcp.connect",
                serde_json::json!({"host": "127.0.0.1", "port": port}),
                serde_json::json!({"timeouts": {
                    "schedule_to_start": "5m", "start_to_close": "2m",
                    "heartbeat": "30s", "schedule_to_close": "10m"}}),
            )
        })
        .collect();
    let (victim, led) = busiest_leader(
        &pipeline.kafka,
        &[
            topics::COMMANDS,
            topics::ATTEMPT_EVENTS,
            topics::RUNNER_EVENTS,
        ],
    );
    let started = std::time::Instant::now();
    let ended = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM attempt_events WHERE terminal")
            .fetch_one(&pool)
            .await
            .unwrap() as usize
    };
    // Commands keep coming (about 100 a second) while the broker is lost.
    let submit = async {
        for (index, spec) in specs.iter().enumerate() {
            pipeline.submit(spec).await;
            if index % 10 == 9 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let fault = async {
        while ended().await < BROKER_LOSS_JOBS / 4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let killed_at = chrono::Utc::now();
        let node = u16::try_from(victim).unwrap();
        tokio::task::spawn_blocking({
            let cluster = cluster.clone();
            move || cluster.kill(node)
        })
        .await
        .unwrap();
        let ended_at_kill = ended().await;
        tokio::time::sleep(Duration::from_secs(20)).await;
        tokio::task::spawn_blocking({
            let cluster = cluster.clone();
            move || cluster.restart(node)
        })
        .await
        .unwrap();
        (killed_at, ended_at_kill)
    };
    let ((), (killed_at, ended_at_kill)) = tokio::join!(submit, fault);

    for spec in &specs {
        let attempts = pipeline
            .wait_done(&spec.job_id, Duration::from_secs(300))
            .await;
        assert_eq!(
            attempts.last().unwrap().1,
            "succeeded",
            "{}: {attempts:?}",
            spec.job_id
        );
    }
    let finished_in = started.elapsed();

    // Nothing lost: one job per command.
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(jobs as usize, BROKER_LOSS_JOBS);
    // Nothing run twice: one `started` per attempt, and the target saw
    // exactly as many connections as attempts started.
    let started_twice: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT attempt_id FROM attempt_events WHERE kind = 'started' GROUP BY attempt_id HAVING count(*) > 1) twice",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(started_twice, 0);
    let starts: i64 =
        sqlx::query_scalar("SELECT count(*) FROM attempt_events WHERE kind = 'started'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        starts as usize,
        "connections to the target vs attempts started"
    );

    // The published log, deduplicated by event id, is the database's: one
    // terminal event per attempt, in the same order.
    pipeline.wait_published(Duration::from_secs(120)).await;
    let mut published = pipeline.published_events().await;
    for events in published.values_mut() {
        let mut seen = std::collections::HashSet::new();
        events.retain(|event| seen.insert(event.event_id));
        assert_eq!(
            events
                .iter()
                .filter(|event| event.body.is_terminal())
                .count(),
            1
        );
    }
    let stored = pipeline.stored_events().await;
    assert_eq!(published.len(), stored.len());
    assert!(
        published == stored,
        "the published log differs from the database's"
    );

    // The figures: ends per second before the kill, the lowest second
    // after it, and how long until a second reached half the rate before.
    let seconds: Vec<(f64, i64)> = sqlx::query_as(
        "SELECT extract(epoch FROM date_trunc('second', recorded_at) - date_trunc('second', $1::timestamptz))::float8 AS second, count(*)
           FROM attempt_events WHERE terminal GROUP BY 1 ORDER BY 1",
    )
    .bind(killed_at)
    .fetch_all(&pool)
    .await
    .unwrap();
    let before: Vec<i64> = seconds
        .iter()
        .filter(|(second, _)| *second < 0.0)
        .map(|(_, count)| *count)
        .collect();
    let rate_before = before.iter().sum::<i64>() as f64 / before.len().max(1) as f64;
    let after: std::collections::BTreeMap<i64, i64> = seconds
        .iter()
        .filter(|(second, _)| *second >= 0.0)
        .map(|(second, count)| (*second as i64, *count))
        .collect();
    let last = after.keys().next_back().copied().unwrap_or(0);
    let lowest = (0..=last.min(30))
        .map(|second| after.get(&second).copied().unwrap_or(0))
        .min()
        .unwrap_or(0);
    let recovered = (0..=last)
        .find(|second| {
            *second > 0
                && after.get(second).copied().unwrap_or(0) as f64 >= rate_before / 2.0
                && after
                    .get(&(second - 1))
                    .is_none_or(|count| (*count as f64) < rate_before / 2.0)
        })
        .unwrap_or(0);
    eprintln!(
        "broker loss: {BROKER_LOSS_JOBS} jobs in {:.1} s; killed broker {victim} (leader of {led} partitions of the command, runner-event and log topics) with {ended_at_kill} ended; before: {rate_before:.0} ends/s; lowest second after: {lowest}; back to half that rate {recovered} s after the kill; connections to the target: {}",
        finished_in.as_secs_f64(),
        connections.load(std::sync::atomic::Ordering::SeqCst)
    );
}

/// Every partition of `topic` from its beginning, no group.
fn from_the_beginning(kafka: &KafkaConfig, topic: &str) -> StreamConsumer {
    let consumer: StreamConsumer = kafka.assigned_consumer().unwrap();
    let partitions = execplane::kafka::partition_count(&consumer, topic).unwrap();
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition_offset(topic, partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    consumer
}

/// Intake's batches (docs/ARCHITECTURE.md, "Intake"): the runner events at
/// hand go before commands sent earlier, up to three quarters of a batch
/// while commands wait, so neither topic starves the other; every record
/// comes once and every partition keeps its order.
#[tokio::test]
async fn a_batch_takes_runner_events_first_and_keeps_a_quarter_for_commands() {
    use rdkafka::Message;
    let kafka = KafkaConfig {
        brokers: common::pipeline::brokers(),
        topic_prefix: format!("prio{}.", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        fetch_wait_ms: 100,
        codec: Default::default(),
        properties: Vec::new(),
        replication_factor: common::replication_factor(),
    };
    execplane::kafka::topology::apply(&kafka).await.unwrap();
    let commands = kafka.topic(topics::COMMANDS);
    let events = kafka.topic(topics::RUNNER_EVENTS);
    // Commands first: one queue of both would hand them out first.
    let producer = kafka.producer().unwrap();
    for (topic, count) in [(&commands, 500), (&events, 1000)] {
        let sends = (0..count).map(|index| {
            let key = format!("key-{}", index % 13);
            let payload = index.to_string();
            let producer = &producer;
            async move {
                let record = FutureRecord::to(topic).key(&key).payload(&payload);
                producer.send(record, Duration::from_secs(10)).await
            }
        });
        for sent in futures_util::future::join_all(sends).await {
            sent.map_err(|(error, _)| error).unwrap();
        }
    }
    let of_events = from_the_beginning(&kafka, &events);
    let of_commands = from_the_beginning(&kafka, &commands);
    // The caught-up gate reads every partition's high watermark in one
    // request, as a "timestamp" of `Offset::End`: the same offsets.
    let mut ends = TopicPartitionList::new();
    for partition in 0..execplane::kafka::partition_count(&of_events, &events).unwrap() {
        ends.add_partition_offset(&events, partition, Offset::End)
            .unwrap();
    }
    let ends = of_events
        .offsets_for_times(ends, Duration::from_secs(5))
        .unwrap();
    for element in ends.elements() {
        let (_, high) = of_events
            .fetch_watermarks(&events, element.partition(), Duration::from_secs(5))
            .unwrap();
        assert_eq!(element.offset(), Offset::Offset(high));
    }
    // Both fetched in the background meanwhile: every record is at hand.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut batches = Vec::new();
    loop {
        let batch = execplane::kafka::collect_prioritized(
            &[&of_events, &of_commands],
            Duration::from_secs(2),
            Duration::from_millis(50),
            400,
        )
        .await
        .unwrap();
        if batch.is_empty() {
            break;
        }
        batches.push(batch);
    }
    let topics_of = |batch: &Vec<rdkafka::message::OwnedMessage>| {
        batch
            .iter()
            .map(|message| message.topic() == events)
            .collect::<Vec<bool>>()
    };
    // 300 events then 100 commands, three times; then the last 100 events
    // and the remaining 200 commands.
    let runs = |shape: &[(bool, usize)]| {
        shape
            .iter()
            .flat_map(|(is_event, count)| std::iter::repeat_n(*is_event, *count))
            .collect::<Vec<bool>>()
    };
    let full = runs(&[(true, 300), (false, 100)]);
    let rest = runs(&[(true, 100), (false, 200)]);
    let shapes: Vec<Vec<bool>> = batches.iter().map(topics_of).collect();
    assert_eq!(shapes, vec![full.clone(), full.clone(), full, rest]);

    let mut next: std::collections::HashMap<(String, i32), i64> = Default::default();
    let mut seen = 0;
    for message in batches.iter().flatten() {
        let position = next
            .entry((message.topic().to_owned(), message.partition()))
            .or_insert(0);
        assert_eq!(message.offset(), *position, "a partition's order holds");
        *position += 1;
        seen += 1;
    }
    assert_eq!(seen, 1500);
    execplane::kafka::topology::remove_prefixed(&kafka)
        .await
        .unwrap();
}

/// The caught-up gate after a restart (docs/ARCHITECTURE.md, "Intake"): a
/// group member that starts behind records on one partition does not open
/// its gate past them before it has read them, however soon it polls after
/// its assignment; and partitions whose records the group had read before
/// the restart, with nothing new, do not hold the gate shut (the group's
/// committed offsets say they are done), so timers and bundles still move.
#[tokio::test]
async fn a_restarted_member_opens_its_gate_only_past_what_it_has_read() {
    use rdkafka::Message;
    use std::sync::atomic::{AtomicI64, Ordering};
    let kafka = KafkaConfig {
        brokers: common::pipeline::brokers(),
        topic_prefix: format!("gate{}.", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        fetch_wait_ms: 100,
        codec: Default::default(),
        properties: Vec::new(),
        replication_factor: common::replication_factor(),
    };
    execplane::kafka::topology::apply(&kafka).await.unwrap();
    let topic = kafka.topic(topics::RUNNER_EVENTS);
    let group = format!("{}group", kafka.topic_prefix);
    let producer = kafka.producer().unwrap();
    let probe: StreamConsumer = kafka.assigned_consumer().unwrap();
    let partitions = execplane::kafka::partition_count(&probe, &topic).unwrap();
    let send = |partition: i32, count: usize| {
        let (producer, topic) = (&producer, &topic);
        async move {
            for index in 0..count {
                let payload = index.to_string();
                let record = FutureRecord::to(topic)
                    .partition(partition)
                    .key("k")
                    .payload(&payload);
                producer
                    .send(record, Duration::from_secs(10))
                    .await
                    .map_err(|(error, _)| error)
                    .unwrap();
            }
        }
    };
    // Every partition has a history, which a first member reads and commits.
    for partition in 0..partitions {
        send(partition, 5).await;
    }
    {
        let first = kafka.group_consumer(&group).unwrap();
        first.subscribe(&[topic.as_str()]).unwrap();
        let mut read = 0;
        while read < 5 * partitions as usize {
            let batch = execplane::kafka::collect_batch(
                &first,
                Duration::from_secs(10),
                Duration::from_millis(20),
                100,
            )
            .await
            .unwrap();
            assert!(!batch.is_empty(), "the history is read ({read} so far)");
            read += batch.len();
            execplane::kafka::store_offsets_past(&first, &batch);
        }
        first
            .commit_consumer_state(rdkafka::consumer::CommitMode::Sync)
            .unwrap();
    }
    // While no member runs, new records arrive on one partition only.
    const NEW: usize = 40;
    send(0, NEW).await;
    let sent = chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(5)).await;

    let member = kafka.group_consumer(&group).unwrap();
    member.subscribe(&[topic.as_str()]).unwrap();
    let caught_up = std::sync::Arc::new(AtomicI64::new(0));
    let by_partition = execplane::kafka::PartitionProgress::default();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let gate = execplane::kafka::CaughtUpGate::start(
        &kafka,
        &group,
        caught_up.clone(),
        by_partition.clone(),
        shutdown.clone(),
    );
    let consumers = [&*member];
    let mut read = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        // Everything polled before this instant has been counted.
        if caught_up.load(Ordering::SeqCst) > sent {
            assert_eq!(read, NEW, "the gate opened past records not yet read");
        }
        let every_partition_past = {
            let by_partition = by_partition.lock().unwrap();
            (0..partitions).all(|partition| {
                by_partition
                    .get(&(topic.clone(), partition))
                    .is_some_and(|at| *at > sent)
            })
        };
        if read == NEW && caught_up.load(Ordering::SeqCst) > sent && every_partition_past {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gate did not open: {read} of {NEW} read, caught up to {} against {sent}, by partition {:?}",
            caught_up.load(Ordering::SeqCst),
            by_partition.lock().unwrap()
        );
        // Polls that return at once and take little: the first ones come
        // before the first fetch from the committed offsets returns.
        let batch = gate
            .poll(&consumers, Duration::from_millis(1), Duration::ZERO, 3)
            .await
            .unwrap();
        for message in &batch {
            assert_eq!(message.partition(), 0, "only new records are read");
        }
        read += batch.len();
        execplane::kafka::store_offsets_past(&member, &batch);
    }
    shutdown.cancel();
    drop(gate);
    drop(member);
    execplane::kafka::topology::remove_prefixed(&kafka)
        .await
        .unwrap();
}
