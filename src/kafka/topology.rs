//! `topology/topics.yaml` and `execplane topology apply`: create what is
//! missing, report drift, never delete.

use std::time::Duration;

use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::Consumer;
use serde::Deserialize;

use super::{KafkaConfig, KafkaError};
use crate::contract::{topics, RunnerType};

/// The declaration, embedded so the binary needs no checkout.
pub const TOPICS_YAML: &str = include_str!("../../topology/topics.yaml");

#[derive(Debug, Deserialize)]
struct TopologyFile {
    replication_factor: i32,
    min_insync_replicas: i32,
    topics: Vec<DeclaredTopic>,
    work_topics: WorkTopics,
}

#[derive(Debug, Deserialize)]
struct DeclaredTopic {
    name: String,
    partitions: i32,
    retention_ms: i64,
    cleanup_policy: String,
    replication_factor: Option<i32>,
    min_insync_replicas: Option<i32>,
}

#[derive(Debug, Deserialize)]
struct WorkTopics {
    partitions: i32,
    retention_ms: i64,
    cleanup_policy: String,
    types: Vec<String>,
}

/// One declared topic (name without the prefix).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub retention_ms: i64,
    pub cleanup_policy: String,
    pub replication_factor: i32,
    pub min_insync_replicas: i32,
}

impl TopicSpec {
    /// The replication it is created with: the declared factor, or the
    /// operator's override; `min.insync.replicas` at most the factor.
    pub fn replication(&self, factor_override: Option<i32>) -> (i32, i32) {
        let factor = factor_override.unwrap_or(self.replication_factor).max(1);
        (factor, self.min_insync_replicas.clamp(1, factor))
    }
}

/// Every declared topic, the work topics expanded.
pub fn declared() -> Result<Vec<TopicSpec>, KafkaError> {
    let file: TopologyFile = serde_yaml::from_str(TOPICS_YAML)
        .map_err(|error| KafkaError::Topology(format!("topology/topics.yaml: {error}")))?;
    let mut specs: Vec<TopicSpec> = file
        .topics
        .into_iter()
        .map(|topic| TopicSpec {
            name: topic.name,
            partitions: topic.partitions,
            retention_ms: topic.retention_ms,
            cleanup_policy: topic.cleanup_policy,
            replication_factor: topic.replication_factor.unwrap_or(file.replication_factor),
            min_insync_replicas: topic
                .min_insync_replicas
                .unwrap_or(file.min_insync_replicas),
        })
        .collect();
    for name in &file.work_topics.types {
        let runner: RunnerType = name.parse().map_err(KafkaError::Topology)?;
        specs.push(TopicSpec {
            name: topics::work(runner),
            partitions: file.work_topics.partitions,
            retention_ms: file.work_topics.retention_ms,
            cleanup_policy: file.work_topics.cleanup_policy.clone(),
            replication_factor: file.replication_factor,
            min_insync_replicas: file.min_insync_replicas,
        });
    }
    Ok(specs)
}

/// What `apply` found and did.
#[derive(Debug, Default)]
pub struct ApplyReport {
    pub created: Vec<String>,
    pub present: Vec<String>,
    /// Human-readable differences between the declaration and the broker.
    pub drift: Vec<String>,
}

/// Creates the missing topics (with the prefix), reports drift in partition
/// counts, replication and configuration; never deletes, shrinks or
/// reconfigures anything.
pub async fn apply(kafka: &KafkaConfig) -> Result<ApplyReport, KafkaError> {
    apply_or_check(kafka, true).await
}

/// What [`apply`] would do, doing nothing: the missing topics (in
/// `created`, as to be created) and the drift.
pub async fn check(kafka: &KafkaConfig) -> Result<ApplyReport, KafkaError> {
    apply_or_check(kafka, false).await
}

/// Deletes every topic under the config's prefix: a scratch topology's
/// end (the bench's, a test's). A broker keeps files open for every
/// partition it holds, so scratch topics left behind add up. Refused for
/// an empty prefix, which would name the platform's own topics. Bounded:
/// a broker that does not answer within seconds is left as it is.
pub async fn remove_prefixed(kafka: &KafkaConfig) -> Result<usize, KafkaError> {
    if kafka.topic_prefix.is_empty() {
        return Err(KafkaError::Topology(
            "refusing to delete topics without a prefix".into(),
        ));
    }
    let probe = kafka.assigned_consumer()?;
    let metadata = probe.fetch_metadata(None, Duration::from_secs(5))?;
    let names: Vec<&str> = metadata
        .topics()
        .iter()
        .map(|topic| topic.name())
        .filter(|name| name.starts_with(&kafka.topic_prefix))
        .collect();
    if names.is_empty() {
        return Ok(0);
    }
    let options = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(5)))
        .request_timeout(Some(Duration::from_secs(5)));
    let deleted = kafka.admin()?.delete_topics(&names, &options).await?;
    Ok(deleted.iter().filter(|result| result.is_ok()).count())
}

async fn apply_or_check(kafka: &KafkaConfig, create: bool) -> Result<ApplyReport, KafkaError> {
    let specs = declared()?;
    let admin = kafka.admin()?;
    let probe = kafka.assigned_consumer()?;
    let metadata = probe.fetch_metadata(None, Duration::from_secs(10))?;
    let mut report = ApplyReport::default();
    let mut missing = Vec::new();
    let mut present = Vec::new();
    for spec in &specs {
        let name = kafka.topic(&spec.name);
        match metadata.topics().iter().find(|topic| topic.name() == name) {
            Some(existing) if !existing.partitions().is_empty() => {
                let partitions = existing.partitions().len() as i32;
                if partitions != spec.partitions {
                    report.drift.push(format!(
                        "{name}: {partitions} partitions on the broker, {} declared",
                        spec.partitions
                    ));
                }
                let (factor, _) = spec.replication(kafka.replication_factor);
                let replicas = existing
                    .partitions()
                    .iter()
                    .map(|partition| partition.replicas().len() as i32)
                    .min()
                    .unwrap_or(0);
                if replicas != factor {
                    report.drift.push(format!(
                        "{name}: {replicas} replicas on the broker, {factor} declared"
                    ));
                }
                report.present.push(name.clone());
                present.push((name, spec.clone()));
            }
            _ => missing.push((name, spec.clone())),
        }
    }
    report
        .drift
        .extend(config_drift(&admin, &present, kafka.replication_factor).await);
    if !create {
        report.created = missing.into_iter().map(|(name, _)| name).collect();
        return Ok(report);
    }
    if !missing.is_empty() {
        let settings: Vec<(i32, String, String)> = missing
            .iter()
            .map(|(_, spec)| {
                let (factor, min_insync) = spec.replication(kafka.replication_factor);
                (
                    factor,
                    spec.retention_ms.to_string(),
                    min_insync.to_string(),
                )
            })
            .collect();
        let new_topics: Vec<NewTopic<'_>> = missing
            .iter()
            .zip(&settings)
            .map(|((name, spec), (factor, retention, min_insync))| {
                NewTopic::new(name, spec.partitions, TopicReplication::Fixed(*factor))
                    .set("cleanup.policy", &spec.cleanup_policy)
                    .set("retention.ms", retention)
                    .set("min.insync.replicas", min_insync)
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        for result in admin.create_topics(&new_topics, &options).await? {
            match result {
                Ok(name) => report.created.push(name),
                Err((name, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {
                    report.present.push(name)
                }
                Err((name, code)) => {
                    return Err(KafkaError::Topology(format!("creating {name}: {code}")))
                }
            }
        }
        // Wait until every created topic is visible with a leader for each
        // partition: a topic listed before its leaders are elected refuses
        // the first offset query with `NotLeaderForPartition`.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        for name in &report.created {
            while !super::every_partition_led(&probe, name) {
                if std::time::Instant::now() > deadline {
                    return Err(KafkaError::NoPartitions(name.clone()));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Ok(report)
}

/// Retention and cleanup policy of existing topics that differ from the
/// declaration (a topic created with `retention.ms=-1` by an earlier
/// release is named here). A broker that cannot describe configs is noted,
/// not fatal.
async fn config_drift(
    admin: &rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
    present: &[(String, TopicSpec)],
    factor_override: Option<i32>,
) -> Vec<String> {
    use rdkafka::admin::{ConfigResourceResult, ResourceSpecifier};
    if present.is_empty() {
        return Vec::new();
    }
    let specifiers: Vec<ResourceSpecifier<'_>> = present
        .iter()
        .map(|(name, _)| ResourceSpecifier::Topic(name))
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = match admin.describe_configs(&specifiers, &options).await {
        Ok(results) => results,
        Err(error) => return vec![format!("topic configs not checked: {error}")],
    };
    let mut drift = Vec::new();
    for ((name, spec), result) in present.iter().zip(results) {
        let resource: ConfigResourceResult = result;
        let Ok(resource) = resource else {
            continue;
        };
        let value = |key: &str| resource.get(key).and_then(|entry| entry.value.clone());
        if let Some(retention) = value("retention.ms") {
            if retention != spec.retention_ms.to_string() {
                drift.push(format!(
                    "{name}: retention.ms is {retention} on the broker, {} declared",
                    spec.retention_ms
                ));
            }
        }
        let (_, min_insync) = spec.replication(factor_override);
        if let Some(found) = value("min.insync.replicas") {
            if found != min_insync.to_string() {
                drift.push(format!(
                    "{name}: min.insync.replicas is {found} on the broker, {min_insync} declared"
                ));
            }
        }
        if let Some(policy) = value("cleanup.policy") {
            if policy != spec.cleanup_policy {
                drift.push(format!(
                    "{name}: cleanup.policy is {policy} on the broker, {} declared",
                    spec.cleanup_policy
                ));
            }
        }
    }
    drift
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_retention_is_explicit() {
        // -1 means "forever" to Kafka and "delete everything" to Tansu's
        // sqlite engine: the published log must not depend on a broker's
        // reading of it.
        for spec in super::declared().unwrap() {
            assert!(
                spec.retention_ms >= 24 * 3600 * 1000,
                "{}: retention.ms {} is not an explicit duration of a day or more",
                spec.name,
                spec.retention_ms
            );
        }
    }

    #[test]
    fn the_declaration_names_every_topic_of_the_design() {
        let names: Vec<String> = super::declared()
            .unwrap()
            .into_iter()
            .map(|spec| spec.name)
            .collect();
        for expected in [
            "exec.commands.v1",
            "exec.runner-events.v1",
            "exec.runner-presence.v1",
            "exec.log-chunks.v1",
            "exec.attempt-events.v1",
            "exec.artifacts.v1",
            "exec.results.v1",
            "exec.dlq.v1",
            "exec.work.verification.v1",
            "exec.work.ansible.v1",
        ] {
            assert!(
                names.iter().any(|name| name == expected),
                "{expected} missing"
            );
        }
    }
}
