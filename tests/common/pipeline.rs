//! A real pipeline for one test: its own database (from `#[sqlx::test]`),
//! its own topic prefix and consumer group on the stack's Kafka broker, and
//! `execplane` role processes it can kill, stop and restart.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use execplane::codec::{
    CommandRecord, Family, JobSpecRecord, RunnerEventRecord, WorkRecord, WorkType,
};
use execplane::contract::{topics, validate_jobspec, JobSpec, ReportBody, RunnerType};
use execplane::kafka::KafkaConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde_json::{json, Value};
use sqlx::{PgPool, Row};
use uuid::Uuid;

/// The policy every pipeline's processes run under unless a test sets its
/// own: the defaults, but the test stack's services and the tests' own
/// servers all listen on loopback, which probes and callbacks reach only
/// by the operator's leave (`destinations.allow_private`).
pub const LOOPBACK_POLICY: &str =
    "defaults:\n  destinations:\n    allow_private: [\"127.0.0.0/8\", \"::1\"]\n";

pub struct Pipeline {
    pub url: String,
    pub prefix: String,
    pub brokers: String,
    pub kafka: KafkaConfig,
    pub dir: PathBuf,
    pub pool: PgPool,
    producer: FutureProducer,
    children: Vec<(String, Option<Child>)>,
    /// Set on every process this pipeline spawns.
    env: Vec<(String, String)>,
}

pub fn brokers() -> String {
    std::env::var("EXECPLANE_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// A JobSpec for the tests: short timeouts (a 4 s lease leaves ~1.2 s for
/// the extension round trip on a loaded 2-core machine), given operation
/// and inputs.
pub fn job(operation: &str, inputs: Value, extra: Value) -> JobSpec {
    let mut spec = json!({
        "command_id": Uuid::new_v4().to_string(),
        "job_id": format!("test/{}", Uuid::new_v4().simple()),
        "tenant": "team-a",
        "requested_by": "pipeline-test",
        "operation": operation,
        "inputs": inputs,
        "timeouts": {"schedule_to_start": "20s", "start_to_close": "30s", "heartbeat": "4s", "schedule_to_close": "60s"},
        "retry": {"max_attempts": 2, "initial_backoff": "200ms", "max_backoff": "1s"}
    });
    if let (Some(target), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (key, value) in extra {
            target.insert(key.clone(), value.clone());
        }
    }
    validate_jobspec(&spec).expect("test jobspec is valid")
}

impl Pipeline {
    pub async fn new(pool: &PgPool) -> Self {
        Self::with_brokers(pool, brokers()).await
    }

    pub async fn with_brokers(pool: &PgPool, brokers: String) -> Self {
        let kafka = KafkaConfig {
            brokers,
            topic_prefix: String::new(),
            fetch_wait_ms: 5,
            codec: Default::default(),
            properties: Vec::new(),
            replication_factor: super::replication_factor(),
        };
        Self::with_client(pool, kafka, Vec::new()).await
    }

    /// A pipeline whose processes, and this harness, are Kafka clients of
    /// these settings (`EXECPLANE_KAFKA_*` variables and their values).
    pub async fn with_settings(pool: &PgPool, settings: &[(&str, String)]) -> Self {
        let settings: Vec<(String, String)> = settings
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect();
        let (config, _) = execplane::cli::assemble::load_with(
            None,
            |name| {
                settings
                    .iter()
                    .find(|(setting, _)| setting == name)
                    .map(|(_, value)| value.clone())
            },
            &[],
        )
        .expect("the Kafka settings load");
        Self::with_client(pool, execplane::cli::assemble::kafka(&config), settings).await
    }

    async fn with_client(
        pool: &PgPool,
        mut kafka: KafkaConfig,
        env: Vec<(String, String)>,
    ) -> Self {
        let prefix = format!("t{}.", &Uuid::new_v4().simple().to_string()[..12]);
        kafka.topic_prefix = prefix.clone();
        kafka.replication_factor = kafka.replication_factor.or(super::replication_factor());
        let brokers = kafka.brokers.clone();
        execplane::kafka::topology::apply(&kafka)
            .await
            .expect("topology applies");
        let dir = std::env::temp_dir().join(format!("execplane-{}", prefix.trim_end_matches('.')));
        std::fs::create_dir_all(&dir).unwrap();
        let policy = dir.join("loopback-policy.yaml"); // Self::loopback_policy
        std::fs::write(&policy, LOOPBACK_POLICY).unwrap();
        Self {
            url: super::database_url(pool),
            producer: kafka.producer().unwrap(),
            prefix,
            brokers,
            kafka,
            dir,
            pool: pool.clone(),
            children: Vec::new(),
            env: [("EXECPLANE_POLICY_FILE".into(), policy.display().to_string())]
                .into_iter()
                .chain(env)
                .collect(),
        }
    }

    /// A pipeline whose processes, and this harness, frame records in the
    /// Confluent wire format with these registry ids.
    pub async fn confluent(pool: &PgPool, ids: &[(Family, u32)]) -> Self {
        let mut pipeline = Self::new(pool).await;
        let list: Vec<String> = ids
            .iter()
            .map(|(family, id)| format!("{}={id}", family.file_stem()))
            .collect();
        pipeline.kafka.codec = execplane::codec::Codec::confluent(ids.iter().copied().collect());
        pipeline.env.extend([
            ("EXECPLANE_AVRO_FRAMING".into(), "confluent".into()),
            ("EXECPLANE_CONFLUENT_SCHEMA_IDS".into(), list.join(",")),
        ]);
        pipeline
    }

    /// The policy file of [`LOOPBACK_POLICY`], for a process this pipeline
    /// does not spawn (a CLI run checks the policy too).
    pub fn loopback_policy(&self) -> PathBuf {
        self.dir.join("loopback-policy.yaml")
    }

    /// Sets a variable on every process this pipeline spawns from now on.
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.push((name.to_owned(), value.to_owned()));
    }

    /// Runs every process spawned from now on under the shipped example
    /// operator policy (`examples/policy.yaml`).
    pub fn with_example_policy(&mut self) {
        let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policy.yaml");
        self.set_env("EXECPLANE_POLICY_FILE", example);
    }

    /// The environment of this pipeline's processes, `env` last (each
    /// name's last value is the one that holds).
    pub fn environment(&self, env: &[(&str, &str)]) -> Vec<(String, String)> {
        let own = [
            ("EXECPLANE_DATABASE_URL", self.url.clone()),
            ("EXECPLANE_KAFKA_BROKERS", self.brokers.clone()),
            ("EXECPLANE_TOPIC_PREFIX", self.prefix.clone()),
            (
                "EXECPLANE_DISPATCHER_GROUP",
                format!("{}dispatcher", self.prefix),
            ),
            ("EXECPLANE_PRESENCE_INTERVAL", "300ms".into()),
            ("EXECPLANE_PRESENCE_TTL", "1500ms".into()),
            ("EXECPLANE_SWEEP_INTERVAL", "50ms".into()),
            ("EXECPLANE_CANCEL_GRACE", "3s".into()),
            ("EXECPLANE_RUNNER_DRAIN_TIMEOUT", "5s".into()),
            ("EXECPLANE_LOG", "info,execplane=debug,sqlx=warn".into()),
            ("EXECPLANE_DATABASE_MAX_CONNECTIONS", "5".into()),
            // The built-in test probes: on no allowlist by default.
            ("EXECPLANE_VERIFY_PROBES", "sleep,hang,fail".into()),
            (
                "EXECPLANE_ARTIFACT_DIR",
                self.dir.join("artifacts").display().to_string(),
            ),
            (
                "EXECPLANE_ARTIFACT_GROUP",
                format!("{}artifacts", self.prefix),
            ),
        ];
        own.into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .chain(self.env.iter().cloned())
            .chain(
                env.iter()
                    .map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
            )
            .collect()
    }

    /// Starts `execplane ARGS` with this pipeline's environment; returns its index.
    pub fn spawn(&mut self, args: &[&str], env: &[(&str, &str)]) -> usize {
        let name = format!("{}-{}", args.join("-"), self.children.len());
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_execplane"));
        command
            .args(args)
            .envs(self.environment(env))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = command.spawn().expect("execplane starts");
        self.children.push((name, Some(child)));
        self.children.len() - 1
    }

    /// Runs `execplane ARGS` to its end with this pipeline's environment.
    #[allow(dead_code)]
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_execplane"))
            .args(args)
            .envs(self.environment(env))
            .env("EXECPLANE_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("execplane runs")
    }

    pub fn pid(&self, index: usize) -> i32 {
        self.children[index]
            .1
            .as_ref()
            .map(|child| child.id() as i32)
            .unwrap_or(0)
    }

    /// Waits up to `timeout` for a child to exit; its status, if it did.
    pub fn wait_exit(
        &mut self,
        index: usize,
        timeout: Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.children[index].1.as_mut()?;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// A child's log so far.
    pub fn log(&self, index: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("{}.log", self.children[index].0)))
            .unwrap_or_default()
    }

    pub fn signal(&mut self, index: usize, signal: &str) {
        let pid = self.pid(index);
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
        if signal == "KILL" || signal == "9" {
            if let Some(mut child) = self.children[index].1.take() {
                let _ = child.wait();
            }
        }
    }

    /// The standard roles as separate processes: dispatcher, relay, `runners` verification runners.
    pub fn start_roles(&mut self, runners: usize) -> (usize, usize, Vec<usize>) {
        let dispatcher = self.spawn(&["dispatcher"], &[]);
        let relay = self.spawn(&["relay"], &[]);
        let runners = (0..runners)
            .map(|_| self.spawn(&["runner", "verification"], &[]))
            .collect();
        (dispatcher, relay, runners)
    }

    pub async fn live_runners(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM runner_instances WHERE status = 'ready' AND last_seen_at > now() - interval '1 second'")
            .fetch_one(&self.pool)
            .await
            .unwrap_or(0)
    }

    pub async fn wait_runners(&self, count: i64) {
        self.wait(
            "runners to announce themselves",
            Duration::from_secs(60),
            || async { self.live_runners().await >= count },
        )
        .await;
    }

    /// Waits until the relay has published everything: no outbox row, no
    /// event past its cursor.
    pub async fn wait_published(&self, timeout: Duration) {
        let store = execplane::store::Store::from_pool(self.pool.clone());
        self.wait("the relay to publish everything", timeout, || async {
            store.unpublished().await.unwrap() == 0
        })
        .await;
    }

    pub async fn wait<F, Fut>(&self, what: &str, timeout: Duration, mut condition: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if condition().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "timed out after {timeout:?} waiting for {what}; logs in {}",
            self.dir.display()
        );
    }

    pub async fn submit(&self, spec: &JobSpec) {
        let record = CommandRecord::execute(spec, chrono::Utc::now().timestamp_millis());
        let payload = self.kafka.codec.encode(Family::Command, &record).unwrap();
        self.produce(topics::COMMANDS, &spec.job_id, &payload).await;
    }

    pub async fn cancel(&self, attempt_id: Uuid, grace_ms: i64) {
        let record = CommandRecord::cancel(
            Uuid::new_v4(),
            attempt_id,
            "test".into(),
            "pipeline-test".into(),
            Some(grace_ms),
            chrono::Utc::now().timestamp_millis(),
        );
        let payload = self.kafka.codec.encode(Family::Command, &record).unwrap();
        self.produce(topics::COMMANDS, "cancel", &payload).await;
    }

    /// An ApprovePlan command on the command topic: `approved_by` approves
    /// the saved plan `plan_digest` of `tenant`'s plan attempt.
    pub async fn approve(
        &self,
        plan_attempt_id: Uuid,
        plan_digest: &str,
        tenant: &str,
        approved_by: &str,
    ) {
        let record = CommandRecord::approve(
            Uuid::new_v4(),
            execplane::codec::ApprovePlanRecord {
                plan_attempt_id: plan_attempt_id.to_string(),
                plan_digest: plan_digest.into(),
                tenant: tenant.into(),
                approved_by: approved_by.into(),
            },
            chrono::Utc::now().timestamp_millis(),
        );
        let payload = self.kafka.codec.encode(Family::Command, &record).unwrap();
        self.produce(topics::COMMANDS, "approve", &payload).await;
    }

    pub async fn produce(&self, topic: &str, key: &str, payload: &[u8]) {
        let topic = self.kafka.topic(topic);
        self.producer
            .send(
                FutureRecord::to(&topic).key(key).payload(payload),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| error)
            .expect("produce");
    }

    /// A work record for `instance` of `runner`, straight onto its partition: a lease the
    /// dispatcher never granted, for a JobSpec its policy would refuse.
    pub async fn inject_work(&self, runner: RunnerType, instance: &str, spec: &JobSpec) -> Uuid {
        let attempt_id = Uuid::new_v4();
        let record = WorkRecord {
            record_id: Uuid::new_v4().to_string(),
            runner_instance: instance.to_owned(),
            kind: WorkType::WorkItem,
            attempt_id: attempt_id.to_string(),
            job_id: spec.job_id.clone(),
            attempt_no: 1,
            lease_id: Uuid::new_v4().to_string(),
            lease_epoch: 1,
            expires_at: Some(chrono::Utc::now().timestamp_millis() + 30_000),
            spec: Some(JobSpecRecord::from(spec)),
            reason: None,
        };
        let topic = topics::work(runner);
        let partition = execplane::kafka::work_partition(instance, self.partitions(&topic));
        let payload = self.kafka.codec.encode(Family::WorkItem, &record).unwrap();
        self.produce_to(&topic, partition, instance, &payload).await;
        attempt_id
    }

    /// The runner's final report for `attempt_id`, once it is on the topic.
    pub async fn final_report(&self, attempt_id: Uuid, wait: Duration) -> ReportBody {
        let deadline = std::time::Instant::now() + wait;
        loop {
            for message in self.consume_all(topics::RUNNER_EVENTS).await {
                use rdkafka::Message;
                let Some(payload) = message.payload() else {
                    continue;
                };
                let Ok(record) = self
                    .kafka
                    .codec
                    .decode::<RunnerEventRecord>(Family::RunnerEvent, payload)
                else {
                    continue;
                };
                let Ok(report) = record.to_report() else {
                    continue;
                };
                if report.attempt_id == attempt_id
                    && matches!(report.body, ReportBody::Finished { .. })
                {
                    return report.body;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no final report for {attempt_id}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Produces to one partition, past every partitioner: what a record
    /// injected straight onto a runner's work partition looks like.
    pub async fn produce_to(&self, topic: &str, partition: i32, key: &str, payload: &[u8]) {
        let topic = self.kafka.topic(topic);
        self.producer
            .send(
                FutureRecord::to(&topic)
                    .partition(partition)
                    .key(key)
                    .payload(payload),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| error)
            .expect("produce");
    }

    /// The number of partitions of one of this pipeline's topics.
    pub fn partitions(&self, topic: &str) -> i32 {
        let consumer: StreamConsumer = self.kafka.assigned_consumer().unwrap();
        execplane::kafka::partition_count(&consumer, &self.kafka.topic(topic)).unwrap()
    }

    /// The attempts of a job, oldest first: (attempt_id, status, category).
    pub async fn attempts(&self, job_id: &str) -> Vec<(Uuid, String, Option<String>)> {
        sqlx::query("SELECT attempt_id, status, failure_category FROM attempts WHERE job_id = $1 ORDER BY attempt_no")
            .bind(job_id)
            .fetch_all(&self.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect()
    }

    /// Waits until the job's latest attempt is terminal and returns all attempts.
    pub async fn wait_done(
        &self,
        job_id: &str,
        timeout: Duration,
    ) -> Vec<(Uuid, String, Option<String>)> {
        let terminal = [
            "succeeded",
            "failed",
            "timed_out",
            "cancelled",
            "rejected",
            "outcome_unknown",
        ];
        self.wait(&format!("job {job_id} to end"), timeout, || async {
            let attempts = self.attempts(job_id).await;
            attempts.last().is_some_and(|(_, status, _)| terminal.contains(&status.as_str()))
                && sqlx::query_scalar::<_, bool>("SELECT retry_attempt_id IS NULL FROM attempts WHERE job_id = $1 ORDER BY attempt_no DESC LIMIT 1")
                    .bind(job_id)
                    .fetch_one(&self.pool)
                    .await
                    .unwrap_or(false)
        })
        .await;
        self.attempts(job_id).await
    }

    pub async fn wait_status(&self, job_id: &str, status: &str, timeout: Duration) -> Uuid {
        self.wait(&format!("job {job_id} to be {status}"), timeout, || async {
            self.attempts(job_id)
                .await
                .last()
                .is_some_and(|(_, current, _)| current == status)
        })
        .await;
        self.attempts(job_id).await.last().unwrap().0
    }

    /// Every record of a topic from the beginning, until it has been quiet
    /// for two seconds (or, for a topic written to all the time such as
    /// presence, for twenty seconds at most).
    pub async fn consume_all(&self, topic: &str) -> Vec<OwnedMessage> {
        let topic = self.kafka.topic(topic);
        let consumer: StreamConsumer = self.kafka.assigned_consumer().unwrap();
        let partitions = execplane::kafka::partition_count(&consumer, &topic).unwrap();
        let mut list = TopicPartitionList::new();
        for partition in 0..partitions {
            list.add_partition_offset(&topic, partition, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&list).unwrap();
        let mut messages = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(2), consumer.recv()).await {
                Ok(Ok(message)) => messages.push(message.detach()),
                _ => break,
            }
        }
        messages
    }

    /// Events of the published log decoded, grouped by attempt in offset order.
    pub async fn published_events(&self) -> BTreeMap<Uuid, Vec<execplane::contract::AttemptEvent>> {
        let mut by_attempt: BTreeMap<Uuid, Vec<execplane::contract::AttemptEvent>> =
            BTreeMap::new();
        for message in self.consume_all(topics::ATTEMPT_EVENTS).await {
            let record: execplane::codec::AttemptEventRecord = self
                .kafka
                .codec
                .decode(Family::AttemptEvent, message.payload().unwrap())
                .unwrap();
            let event = execplane::contract::AttemptEvent::try_from(record).unwrap();
            by_attempt.entry(event.attempt_id).or_default().push(event);
        }
        by_attempt
    }

    /// What the tools of each attempt wrote (stdout then stderr, each in
    /// seq order), as published on `exec.log-chunks.v1`: the one place a
    /// sandboxed tool's output reaches outside its attempt.
    #[allow(dead_code)]
    pub async fn tool_output(&self) -> BTreeMap<String, String> {
        let mut chunks: Vec<execplane::codec::LogChunkRecord> = self
            .consume_all(topics::LOG_CHUNKS)
            .await
            .iter()
            .map(|message| {
                self.kafka
                    .codec
                    .decode(Family::LogChunk, message.payload().unwrap())
                    .unwrap()
            })
            .collect();
        chunks.sort_by_key(|chunk| (chunk.attempt_id.clone(), chunk.stream as u8, chunk.seq));
        let mut by_attempt: BTreeMap<String, String> = BTreeMap::new();
        for chunk in chunks {
            by_attempt
                .entry(chunk.attempt_id)
                .or_default()
                .push_str(&chunk.text);
        }
        by_attempt
    }

    /// The log in Postgres, decoded, grouped by attempt in seq order.
    pub async fn stored_events(&self) -> BTreeMap<Uuid, Vec<execplane::contract::AttemptEvent>> {
        let store = execplane::store::Store::from_pool(self.pool.clone());
        let ids: Vec<Uuid> = sqlx::query_scalar("SELECT DISTINCT attempt_id FROM attempt_events")
            .fetch_all(&self.pool)
            .await
            .unwrap();
        let mut by_attempt = BTreeMap::new();
        for id in ids {
            let events = store
                .history(id)
                .await
                .unwrap()
                .iter()
                .map(|stored| stored.decode().unwrap())
                .collect();
            by_attempt.insert(id, events);
        }
        by_attempt
    }

    /// The job's one attempt once it ended: status, failure category,
    /// message and result.
    pub async fn ended(
        &self,
        spec: &JobSpec,
        timeout: Duration,
    ) -> (String, Option<String>, String, Value) {
        self.wait_done(&spec.job_id, timeout).await;
        let row = sqlx::query(
            "SELECT status, failure_category, coalesce(message, ''), result_json FROM attempts WHERE job_id = $1",
        )
        .bind(&spec.job_id)
        .fetch_one(&self.pool)
        .await
        .unwrap();
        let result: Option<String> = row.get(3);
        (
            row.get(0),
            row.get(1),
            row.get(2),
            result.map_or(Value::Null, |text| serde_json::from_str(&text).unwrap()),
        )
    }

    /// `execplane artifacts put --tenant team-a` (the tenant of [`job`]) of
    /// `bytes` into this pipeline's artifact storage: the `sha256:` reference.
    /// Output `name` of `attempt` as a consumer downloads it (`execplane
    /// artifacts get`), once the artifact worker (which must run) has
    /// recorded it; within 30 s.
    pub async fn download(&self, attempt: Uuid, name: &str) -> Vec<u8> {
        let storage = self.dir.join("artifacts");
        for _ in 0..60 {
            let output = super::execplane_with(
                &self.pool,
                &["artifacts", "get", &attempt.to_string(), name],
                &[("EXECPLANE_ARTIFACT_DIR", storage.to_str().unwrap())],
            );
            if output.status.success() {
                return output.stdout;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("output {name} of {attempt} never downloads");
    }

    pub fn put_artifact(&self, name: &str, bytes: &[u8]) -> String {
        self.put_artifact_for("team-a", name, bytes)
    }

    /// `bytes` stored as an input artifact of `tenant`: its reference.
    pub fn put_artifact_for(&self, tenant: &str, name: &str, bytes: &[u8]) -> String {
        let file = self.dir.join(name);
        std::fs::write(&file, bytes).unwrap();
        let storage = self.dir.join("artifacts");
        let put = super::execplane_with(
            &self.pool,
            &[
                "artifacts",
                "put",
                "--tenant",
                tenant,
                file.to_str().unwrap(),
            ],
            &[("EXECPLANE_ARTIFACT_DIR", storage.to_str().unwrap())],
        );
        assert!(put.status.success(), "{put:?}");
        String::from_utf8(put.stdout).unwrap().trim().to_owned()
    }

    pub async fn events_of(&self, attempt_id: Uuid) -> Vec<String> {
        sqlx::query_scalar("SELECT kind FROM attempt_events WHERE attempt_id = $1 ORDER BY seq")
            .bind(attempt_id)
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            if let Some(child) = child.as_mut() {
                let _ = Command::new("kill")
                    .args(["-CONT", &child.id().to_string()])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // Its topics go with it (the broker holds files open for each), on
        // a thread of its own: a drop may run inside the test's runtime.
        let kafka = self.kafka.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(execplane::kafka::topology::remove_prefixed(&kafka))?;
            anyhow::Ok(())
        })
        .join();
    }
}
