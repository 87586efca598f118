//! The topology on a durable broker: Tansu's sqlite engine, restarted,
//! still holds the whole published log (its maintenance deletes every
//! record of a topic whose retention is -1, at each start: the topology
//! never declares -1).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use execplane::contract::topics;
use execplane::kafka::KafkaConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};

fn tansu() -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_default();
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(PathBuf::from)
        .chain([PathBuf::from(home).join(".cargo/bin")])
        .map(|dir| dir.join("tansu"))
        .find(|path| path.exists())
        .expect("tansu is installed (scripts/tansu.sh)")
}

struct Broker {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Broker {
    fn start(dir: PathBuf, port: u16) -> Self {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("tansu.log"))
            .unwrap();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(tansu())
            .current_dir(&dir)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "sqlite://tansu.db",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("tansu starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "tansu did not listen on {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            dir,
            port,
            child: Some(child),
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

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
    let dir = std::env::temp_dir().join(format!(
        "execplane-broker-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut broker = Broker::start(dir.clone(), port);
    let kafka = KafkaConfig {
        brokers: format!("127.0.0.1:{}", broker.port),
        topic_prefix: "durable.".into(),
        fetch_wait_ms: 5,
        codec: Default::default(),
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

    broker.stop();
    let broker = Broker::start(broker.dir.clone(), port);
    // The engine's maintenance runs as it starts; give it a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kafka = KafkaConfig {
        brokers: format!("127.0.0.1:{}", broker.port),
        ..kafka
    };
    assert_eq!(
        read_all(&kafka, topics::ATTEMPT_EVENTS).await,
        500,
        "the published log after a broker restart (log in {})",
        dir.display()
    );
}
