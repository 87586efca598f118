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
    let report = execplane::kafka::topology::check(&kafka).await.unwrap();
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
