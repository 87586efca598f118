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
