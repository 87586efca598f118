//! Looking for a secret everywhere execplane writes: every record of every
//! topic (payloads and headers), every table, every file under a directory.

use std::time::Duration;

use rdkafka::message::Headers;
use rdkafka::Message;
use sqlx::PgPool;

use super::pipeline::Pipeline;
use execplane::secrets::mask::forms_of;

const WAIT: Duration = Duration::from_secs(60);

/// Every record of a topic up to its high watermarks as of now (presence
/// never goes quiet, so "until quiet" would never end).
pub async fn records_until_now(
    pipeline: &Pipeline,
    topic: &str,
) -> Vec<rdkafka::message::OwnedMessage> {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    let topic = pipeline.kafka.topic(topic);
    let consumer: StreamConsumer = pipeline.kafka.assigned_consumer().unwrap();
    let partitions = execplane::kafka::partition_count(&consumer, &topic).unwrap();
    let mut list = rdkafka::TopicPartitionList::new();
    let mut remaining = std::collections::HashMap::new();
    for partition in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(&topic, partition, Duration::from_secs(5))
            .unwrap();
        if high > low {
            list.add_partition_offset(&topic, partition, rdkafka::Offset::Offset(low))
                .unwrap();
            remaining.insert(partition, high);
        }
    }
    let mut messages = Vec::new();
    if remaining.is_empty() {
        return messages;
    }
    consumer.assign(&list).unwrap();
    while !remaining.is_empty() {
        let message = tokio::time::timeout(WAIT, consumer.recv())
            .await
            .expect("records up to the watermark arrive")
            .unwrap();
        if let Some(high) = remaining.get(&message.partition()) {
            if message.offset() + 1 >= *high {
                remaining.remove(&message.partition());
            }
        }
        messages.push(message.detach());
    }
    messages
}

/// Every form of `value`, and the halves the job split it into.
/// Every topic a runner's attempt writes to or is read from, with the
/// work topic of `runner`: where a leak would be published.
pub fn topics_of(runner: execplane::contract::RunnerType) -> Vec<String> {
    use execplane::contract::topics;
    let mut every: Vec<String> = [
        topics::COMMANDS,
        topics::RUNNER_EVENTS,
        topics::LOG_CHUNKS,
        topics::ATTEMPT_EVENTS,
        topics::ARTIFACTS,
        topics::RESULTS,
        topics::DLQ,
    ]
    .iter()
    .map(|topic| (*topic).to_owned())
    .collect();
    every.push(topics::work(runner));
    every
}

pub fn leaks(value: &str) -> Vec<String> {
    let mut needles = forms_of(value);
    let middle = value
        .char_indices()
        .nth(value.chars().count() / 2)
        .unwrap()
        .0;
    needles.push(value[..middle].to_owned());
    needles.push(value[middle..].to_owned());
    needles
}

pub fn find_leak(haystack: &[u8], needles: &[String]) -> Option<String> {
    needles
        .iter()
        .find(|needle| {
            haystack
                .windows(needle.len())
                .any(|window| window == needle.as_bytes())
        })
        .cloned()
}

/// Asserts that none of `needles` is in any record of `topics`, any table,
/// any stored attempt event or any file under `dir`.
pub async fn assert_nowhere(
    pipeline: &Pipeline,
    pool: &PgPool,
    needles: &[String],
    topics: &[&str],
    dir: &std::path::Path,
) {
    for topic in topics {
        for message in records_until_now(pipeline, topic).await {
            let mut bytes = message.payload().unwrap_or_default().to_vec();
            if let Some(headers) = message.headers() {
                for header in headers.iter() {
                    bytes.extend_from_slice(header.value.unwrap_or_default());
                }
            }
            assert_eq!(find_leak(&bytes, needles), None, "leaked on {topic}");
        }
    }
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in &tables {
        let text: Option<String> = sqlx::query_scalar(&format!(
            "SELECT string_agg(t::text, E'\\n') FROM {table} t"
        ))
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(
            find_leak(text.unwrap_or_default().as_bytes(), needles),
            None,
            "leaked in table {table}"
        );
    }
    let payloads: Vec<Vec<u8>> = sqlx::query_scalar("SELECT payload FROM attempt_events")
        .fetch_all(pool)
        .await
        .unwrap();
    for payload in payloads {
        assert_eq!(
            find_leak(&payload, needles),
            None,
            "leaked in an attempt event"
        );
    }
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                assert_eq!(
                    find_leak(&bytes, needles),
                    None,
                    "leaked in {}",
                    path.display()
                );
            }
        }
    }
}

/// Asserts that `secret`, in none of its forms, is on any topic of
/// `runner`'s attempts (`topics_of`), in any table or stored event, or in
/// any file under `dir`.
pub async fn assert_secret_nowhere(
    pipeline: &Pipeline,
    pool: &PgPool,
    secret: &str,
    runner: execplane::contract::RunnerType,
    dir: &std::path::Path,
) {
    let topics = topics_of(runner);
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    assert_nowhere(pipeline, pool, &leaks(secret), &topics, dir).await;
}
