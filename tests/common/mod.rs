//! Shared helpers for the store tests: a mixed workload and CLI access to
//! the per-test database that `#[sqlx::test]` creates.
#![allow(dead_code)]

use std::process::Output;

use execplane::attempt::attempt_id_for;
use execplane::contract::{
    validate_jobspec, DurationMs, FailureCategory, Input, JobSpec, Problem, ReportBody,
    ReportedOutcome, RunnerReport, TimerKind,
};
use execplane::store::{InputEnvelope, InputOutcome, Store};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

pub const BASE: i64 = 1_800_000_000_000;

/// The URL of the test's own database, for running the binary against it.
pub fn database_url(pool: &PgPool) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL is set by the test command");
    let database = pool
        .connect_options()
        .get_database()
        .expect("sqlx::test names its database")
        .to_owned();
    let (prefix, rest) = base
        .rsplit_once('/')
        .expect("a database URL ends with /<database>");
    let query = rest
        .split_once('?')
        .map(|(_, query)| format!("?{query}"))
        .unwrap_or_default();
    format!("{prefix}/{database}{query}")
}

/// The local stack's state directory (`.stack/`, or EXECPLANE_STACK_DIR).
pub fn stack_dir() -> std::path::PathBuf {
    std::env::var("EXECPLANE_STACK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".stack"))
}

/// (access key id, secret) that scripts/garage.sh generated.
pub fn s3_credentials() -> (String, String) {
    let text = std::fs::read_to_string(stack_dir().join("garage-credentials"))
        .expect("start Garage with scripts/garage.sh");
    let value = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_owned()
    };
    (
        value("EXECPLANE_S3_ACCESS_KEY_ID"),
        value("EXECPLANE_S3_SECRET_ACCESS_KEY"),
    )
}

pub fn execplane(pool: &PgPool, args: &[&str]) -> Output {
    execplane_with(pool, args, &[])
}

pub fn execplane_with(pool: &PgPool, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_execplane"));
    command
        .args(args)
        .env("EXECPLANE_DATABASE_URL", database_url(pool))
        .env("EXECPLANE_LOG", "warn");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("the execplane binary runs")
}

/// `execplane artifacts get ATTEMPT NAME -o OUT` (the sha256 checked on
/// the way); the bytes written. Panics, with the command's stderr, when it
/// fails.
#[allow(dead_code)]
pub fn download(
    pool: &PgPool,
    attempt: Uuid,
    name: &str,
    out: &std::path::Path,
    env: &[(&str, &str)],
) -> Vec<u8> {
    let attempt = attempt.to_string();
    let out_text = out.to_str().expect("a UTF-8 path");
    let args = ["artifacts", "get", attempt.as_str(), name, "-o", out_text];
    let output = execplane_with(pool, &args, env);
    assert!(
        output.status.success(),
        "artifacts get {name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read(out).expect("the download was written")
}

pub fn spec(command_id: Uuid, job_id: &str, operation: &str) -> JobSpec {
    let inputs = match operation {
        "ssh.command.run" => json!({"template_id": "uptime"}),
        _ => json!({"host": "127.0.0.1", "port": 5432}),
    };
    validate_jobspec(&json!({
        "command_id": command_id.to_string(),
        "job_id": job_id,
        "tenant": "team-a",
        "requested_by": "test",
        "operation": operation,
        "inputs": inputs,
        "timeouts": {"schedule_to_start": "60s", "start_to_close": "10m", "heartbeat": "30s", "schedule_to_close": "15m"},
        "retry": {"max_attempts": 3, "initial_backoff": "1s", "max_backoff": "10s"}
    }))
    .unwrap()
}

fn report(attempt_id: Uuid, epoch: u64, instance: &str, body: ReportBody) -> Input {
    Input::Report(RunnerReport {
        attempt_id,
        lease_epoch: epoch,
        runner_instance: instance.to_owned(),
        body,
    })
}

fn finished(outcome: ReportedOutcome, category: Option<FailureCategory>) -> ReportBody {
    ReportBody::Finished {
        outcome,
        category,
        message: "done".into(),
        result_json: None,
        outputs: Vec::new(),
    }
}

/// What each job of the mixed workload ends as (for the latest attempt).
pub const SCENARIOS: usize = 10;

/// The timeline of job `index`: (seconds after BASE, input).
pub fn scenario(index: usize) -> Vec<(i64, Input)> {
    let command_id = Uuid::from_u128(0x5eed_0000_0000 + index as u128);
    let job_id = format!("mixed/{index}");
    let first = attempt_id_for(command_id, 1);
    let second = attempt_id_for(command_id, 2);
    let instance = format!("runner-{}", index % 7);
    // A third of the jobs hold a target key of their own while leased, so
    // the key rows go through the projection and its rebuild too.
    let target_keys = if index.is_multiple_of(3) {
        vec![execplane::contract::TargetKey {
            key: format!("node:mixed-{index}"),
            limit: 1,
        }]
    } else {
        Vec::new()
    };
    let create = |operation: &str| Input::Execute {
        policy_digest: None,
        spec: std::sync::Arc::new(spec(command_id, &job_id, operation)),
        target_keys: target_keys.clone(),
    };
    let grant = |attempt_id| Input::Grant {
        attempt_id,
        runner_instance: instance.clone(),
    };
    let timer = |attempt_id, timer| Input::TimerFired { attempt_id, timer };
    match index % SCENARIOS {
        0 => vec![
            (0, create("verify.tcp.connect")),
            (1, grant(first)),
            (2, create("verify.tcp.connect")),
            (3, report(first, 1, &instance, ReportBody::Started)),
            (
                20,
                report(
                    first,
                    1,
                    &instance,
                    ReportBody::Heartbeat {
                        progress: Some("half".into()),
                        percent: Some(50),
                    },
                ),
            ),
            (
                21,
                report(
                    first,
                    1,
                    &instance,
                    ReportBody::Heartbeat {
                        progress: Some("half".into()),
                        percent: Some(50),
                    },
                ),
            ),
            (
                25,
                report(
                    first,
                    1,
                    &instance,
                    finished(ReportedOutcome::Succeeded, None),
                ),
            ),
        ],
        1 => vec![
            (0, create("verify.tcp.connect")),
            (1, grant(first)),
            (2, report(first, 1, &instance, ReportBody::Started)),
            (
                3,
                report(
                    first,
                    1,
                    &instance,
                    finished(
                        ReportedOutcome::Failed,
                        Some(FailureCategory::VerificationFailed),
                    ),
                ),
            ),
        ],
        2 => vec![
            (0, create("verify.tcp.connect")),
            (1, grant(first)),
            (2, report(first, 1, &instance, ReportBody::Started)),
            (
                3,
                report(
                    first,
                    1,
                    &instance,
                    finished(
                        ReportedOutcome::Failed,
                        Some(FailureCategory::Infrastructure),
                    ),
                ),
            ),
            (5, grant(second)),
            (6, report(second, 2, &instance, ReportBody::Started)),
            (
                7,
                report(
                    second,
                    2,
                    &instance,
                    finished(ReportedOutcome::Succeeded, None),
                ),
            ),
        ],
        3 => vec![
            (0, create("verify.tcp.connect")),
            (1, grant(first)),
            (2, report(first, 1, &instance, ReportBody::Started)),
            (40, timer(first, TimerKind::Heartbeat)),
            (41, timer(first, TimerKind::Heartbeat)),
        ],
        4 => vec![
            (0, create("ssh.command.run")),
            (1, grant(first)),
            (2, report(first, 1, &instance, ReportBody::Started)),
            (40, timer(first, TimerKind::Heartbeat)),
        ],
        5 => vec![
            (0, create("verify.tcp.connect")),
            (
                1,
                Input::Cancel {
                    attempt_id: first,
                    reason: "not needed".into(),
                    requested_by: "operator".into(),
                    grace: DurationMs(10_000),
                },
            ),
        ],
        6 => vec![
            (0, create("verify.tcp.connect")),
            (1, grant(first)),
            (2, report(first, 1, &instance, ReportBody::Started)),
            (
                3,
                Input::Cancel {
                    attempt_id: first,
                    reason: "abort".into(),
                    requested_by: "operator".into(),
                    grace: DurationMs(10_000),
                },
            ),
            (
                4,
                report(
                    first,
                    1,
                    &instance,
                    finished(ReportedOutcome::Cancelled, None),
                ),
            ),
        ],
        7 => vec![(
            0,
            Input::ExecuteInvalid {
                policy_digest: None,
                command_id,
                job_id,
                tenant: "team-a".into(),
                operation: "verify.nothing".into(),
                category: FailureCategory::Contract,
                problems: vec![Problem::new(
                    "operation",
                    "unknown operation `verify.nothing`",
                )],
            },
        )],
        8 => vec![
            (0, create("verify.tcp.connect")),
            (70, timer(first, TimerKind::ScheduleToStart)),
        ],
        _ => vec![
            (0, create("verify.tcp.connect")),
            (1, grant(first)),
            (2, report(first, 1, &instance, ReportBody::Started)),
            (
                3,
                report(
                    first,
                    99,
                    &instance,
                    ReportBody::Progress {
                        message: "forged".into(),
                        percent: None,
                    },
                ),
            ),
            (
                4,
                report(
                    first,
                    1,
                    &instance,
                    finished(ReportedOutcome::Succeeded, None),
                ),
            ),
            (
                5,
                report(
                    first,
                    1,
                    &instance,
                    ReportBody::Heartbeat {
                        progress: None,
                        percent: None,
                    },
                ),
            ),
        ],
    }
}

/// Drives `jobs` jobs of the mixed workload through the store in batches.
pub async fn drive_mixed(store: &Store, jobs: usize) -> usize {
    let mut processed = 0;
    for (at, batch) in mixed_batches(jobs) {
        let outcome = store.process_batch(&batch, at).await.unwrap();
        for (envelope, result) in batch.iter().zip(&outcome.outcomes) {
            assert!(
                !matches!(result, InputOutcome::Rejected(_)),
                "{:?} was rejected: {result:?}",
                envelope.input
            );
        }
        processed += batch.len();
    }
    processed
}

/// The mixed workload of `jobs` jobs as the batches `drive_mixed` decides,
/// each with its decision time: inputs of one second, at most 250 a batch.
pub fn mixed_batches(jobs: usize) -> Vec<(i64, Vec<InputEnvelope>)> {
    let mut timeline: Vec<(i64, usize, usize, Input)> = Vec::new();
    for index in 0..jobs {
        for (step, (seconds, input)) in scenario(index).into_iter().enumerate() {
            timeline.push((seconds, index, step, input));
        }
    }
    timeline.sort_by_key(|(seconds, index, step, _)| (*seconds, *index, *step));
    let mut batches = Vec::new();
    let mut start = 0;
    while start < timeline.len() {
        let seconds = timeline[start].0;
        let mut end = start;
        while end < timeline.len() && timeline[end].0 == seconds && end - start < 250 {
            end += 1;
        }
        let batch: Vec<InputEnvelope> = timeline[start..end]
            .iter()
            .map(|(seconds, index, step, input)| InputEnvelope {
                input_id: format!("mixed-{index}-{step}-{seconds}"),
                source: "test".into(),
                input: input.clone(),
            })
            .collect();
        batches.push((BASE + seconds * 1000, batch));
        start = end;
    }
    batches
}

pub mod bao;
pub mod browser;
pub mod conformance;
pub mod consumers;
pub mod examples;
pub mod http;
pub mod ingress;
pub mod kafka;
pub mod kube;
pub mod leaks;
pub mod leases;
pub mod pipeline;
pub mod prometheus;
pub mod proxy;
pub mod sshd;

/// The replicas of the topics a test creates on the stack's broker
/// (`EXECPLANE_TOPIC_REPLICATION_FACTOR`, which the test command sets to
/// its one broker's 1).
pub fn replication_factor() -> Option<i32> {
    std::env::var("EXECPLANE_TOPIC_REPLICATION_FACTOR")
        .ok()
        .and_then(|factor| factor.parse().ok())
        .filter(|factor| *factor > 0)
}
