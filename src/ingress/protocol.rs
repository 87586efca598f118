//! The executor protocol, one JSON shape for HTTP bodies and TCP frames.
//! Parsing names the field path of the first problem (serde stops there)
//! and then checks what the types alone cannot.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::codec::LogStream;
use crate::contract::{
    FailureCategory, Operation, OutputArtifact, Problem, ReportBody, ReportedOutcome,
    RetentionClass, RunnerReport, RunnerType,
};

pub use crate::contract::limits::MAX_MESSAGE_BYTES;
/// Longest poll wait an executor may ask for.
pub const MAX_POLL_WAIT_MS: u64 = 30_000;

/// Parses a JSON body into `T`, naming the path of what is wrong.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Vec<Problem>> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let path = if path == "." || path == "?" {
            String::new()
        } else {
            path
        };
        vec![Problem::new(path, error.into_inner().to_string())]
    })?;
    deserializer
        .end()
        .map_err(|error| vec![Problem::new("", error.to_string())])?;
    Ok(value)
}

/// `POST /v1/executor/register`: start a session; the ingress announces an
/// instance for it so the dispatcher can place work on it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub runner_type: RunnerType,
    #[serde(default = "one")]
    pub capacity: u32,
    #[serde(default)]
    pub pool: BTreeMap<String, String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The operations the executor runs; absent: every implemented
    /// operation of its runner type.
    #[serde(default)]
    pub operations: Option<Vec<String>>,
}

fn one() -> u32 {
    1
}

impl RegisterRequest {
    /// Pool labels and capabilities are re-announced every presence
    /// interval, to Kafka and Postgres: bounded in count and size.
    pub fn check(&self) -> Vec<Problem> {
        use crate::contract::limits::{check_identifier_within, MAX_LABELS, MAX_LABEL_CHARS};
        let mut problems = Vec::new();
        if self.capacity == 0 || self.capacity > 1024 {
            problems.push(Problem::new("capacity", "must be between 1 and 1024"));
        }
        if self.pool.len() > MAX_LABELS {
            problems.push(Problem::new(
                "pool",
                format!("{} labels; at most {MAX_LABELS}", self.pool.len()),
            ));
        } else {
            for (key, value) in &self.pool {
                let path = format!("pool.{}", crate::contract::limits::loggable(key));
                check_identifier_within(&path, key, MAX_LABEL_CHARS, &mut problems);
                check_identifier_within(&path, value, MAX_LABEL_CHARS, &mut problems);
            }
        }
        if self.capabilities.len() > MAX_LABELS {
            problems.push(Problem::new(
                "capabilities",
                format!(
                    "{} capabilities; at most {MAX_LABELS}",
                    self.capabilities.len()
                ),
            ));
        } else {
            for (index, capability) in self.capabilities.iter().enumerate() {
                check_identifier_within(
                    &format!("capabilities[{index}]"),
                    capability,
                    MAX_LABEL_CHARS,
                    &mut problems,
                );
            }
        }
        self.check_operations(&mut problems);
        problems
    }

    /// Each named operation exists, belongs to the runner type and is one
    /// this release runs (an executor cannot make intake accept an
    /// operation the catalog refuses).
    fn check_operations(&self, problems: &mut Vec<Problem>) {
        let Some(operations) = &self.operations else {
            return;
        };
        if operations.is_empty() || operations.len() > Operation::ALL.len() {
            problems.push(Problem::new(
                "operations",
                format!("between 1 and {} operations", Operation::ALL.len()),
            ));
            return;
        }
        for (index, name) in operations.iter().enumerate() {
            let path = format!("operations[{index}]");
            match name.parse::<Operation>() {
                Err(error) => problems.push(Problem::new(path, error)),
                Ok(operation) if operation.runner_type() != self.runner_type => {
                    problems.push(Problem::new(
                        path,
                        format!("`{operation}` is not a {} operation", self.runner_type),
                    ));
                }
                Ok(operation) if !operation.is_implemented() => problems.push(Problem::new(
                    path,
                    format!("`{operation}` is not implemented (see `execplane operations`)"),
                )),
                Ok(_) => {}
            }
        }
    }

    /// The operations to announce: those named, or every implemented
    /// operation of the runner type.
    pub fn operations(&self) -> Vec<String> {
        match &self.operations {
            Some(operations) => operations.clone(),
            None => Operation::implemented_by(self.runner_type)
                .map(|operation| operation.as_str().to_owned())
                .collect(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RegisterReply {
    pub instance_id: String,
    /// Send a heartbeat at least this often while an attempt runs.
    pub heartbeat_interval_ms: u64,
    /// A session with no request for this long ends.
    pub session_ttl_ms: u64,
}

/// `POST /v1/executor/poll`: the leases granted to the instance and not
/// started yet. Waits up to `wait_ms` for one.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollRequest {
    pub instance_id: String,
    #[serde(default)]
    pub wait_ms: u64,
}

/// One leased attempt for an executor.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkItem {
    pub attempt_id: Uuid,
    pub job_id: String,
    pub attempt_no: i32,
    pub lease_id: Uuid,
    pub lease_epoch: i64,
    /// Milliseconds since the epoch; heartbeats extend it.
    pub lease_expires_at: i64,
    pub operation: String,
    /// The JobSpec (its `inputs` carry secret references, never secrets).
    pub spec: serde_json::Value,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PollReply {
    pub work: Vec<WorkItem>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    Started,
    Heartbeat,
    Progress,
    Finished,
}

/// `POST /v1/executor/reports`: one runner report (docs/INGRESS.md), flat.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportRequest {
    pub attempt_id: Uuid,
    pub lease_epoch: u64,
    pub runner_instance: String,
    #[serde(rename = "type")]
    pub kind: ReportKind,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub percent: Option<u8>,
    #[serde(default)]
    pub outcome: Option<ReportedOutcome>,
    #[serde(default)]
    pub category: Option<FailureCategory>,
    /// The typed result (evidence, recap, ...), any JSON.
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    /// Files stored through `PUT /v1/executor/outputs/...`, as that
    /// answered (finished only).
    #[serde(default)]
    pub outputs: Vec<OutputArtifact>,
    /// Names this report: sent again with the same key (a retried request),
    /// it is the same event and is recorded once.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

impl ReportRequest {
    /// The report, or every problem the types could not catch.
    pub fn into_report(self) -> Result<RunnerReport, Vec<Problem>> {
        let mut problems = Vec::new();
        if self.kind != ReportKind::Finished
            && (self.outcome.is_some()
                || self.category.is_some()
                || self.result.is_some()
                || !self.outputs.is_empty())
        {
            problems.push(Problem::new(
                "outcome",
                "outcome, category, result and outputs belong to a `finished` report",
            ));
        }
        if let Some(key) = &self.idempotency_key {
            crate::contract::limits::check_identifier("idempotency_key", key, &mut problems);
        }
        let body = match self.kind {
            ReportKind::Started => ReportBody::Started,
            ReportKind::Heartbeat => ReportBody::Heartbeat {
                progress: self.message.clone(),
                percent: self.percent,
            },
            ReportKind::Progress => match &self.message {
                Some(message) => ReportBody::Progress {
                    message: message.clone(),
                    percent: self.percent,
                },
                None => {
                    problems.push(Problem::new("message", "a progress report needs a message"));
                    ReportBody::Started
                }
            },
            ReportKind::Finished => {
                match (self.outcome, self.category) {
                    (None, _) => problems.push(Problem::new(
                        "outcome",
                        "a finished report needs an outcome (succeeded, failed, cancelled)",
                    )),
                    (Some(ReportedOutcome::Failed), None) => problems.push(Problem::new(
                        "category",
                        "a failed outcome needs a failure category",
                    )),
                    (Some(ReportedOutcome::Succeeded), Some(_)) => problems.push(Problem::new(
                        "category",
                        "a succeeded outcome has no failure category",
                    )),
                    _ => {}
                }
                ReportBody::Finished {
                    outcome: self.outcome.unwrap_or(ReportedOutcome::Failed),
                    category: self.category,
                    message: self.message.clone().unwrap_or_default(),
                    result_json: self.result.as_ref().map(|result| result.to_string()),
                    outputs: self.outputs,
                }
            }
        };
        let report = RunnerReport {
            attempt_id: self.attempt_id,
            lease_epoch: self.lease_epoch,
            runner_instance: self.runner_instance,
            body,
        };
        // The bounds the dispatcher's intake applies too (one rule, two edges).
        if problems.is_empty() {
            problems.extend(crate::contract::check_report(&report));
        }
        if problems.is_empty() {
            Ok(report)
        } else {
            Err(problems)
        }
    }
}

/// The answer to every report, the way a heartbeat is answered in Temporal:
/// the report is on the broker, and this is what the executor should do.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReportReply {
    pub accepted: bool,
    /// False once the lease is gone, revoked, expired or held by another
    /// epoch: stop the tool and report nothing more.
    pub lease_valid: bool,
    /// The control plane asked to cancel: stop and report `cancelled`.
    pub cancel_requested: bool,
    pub lease_expires_at: Option<i64>,
    /// A finished report's result that does not match its operation's
    /// documented type: the report was forwarded as a `runner_error`
    /// failure naming this instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_refused: Option<String>,
}

/// `PUT /v1/executor/outputs/{attempt_id}/{name}`'s query: whose lease the
/// upload is under, and the bytes' digest.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputQuery {
    pub lease_epoch: u64,
    pub runner_instance: String,
    /// Lowercase hex sha256 of the body; the upload is refused otherwise.
    pub sha256: String,
    /// How long it is kept; `evidence` when not said.
    #[serde(default)]
    pub class: Option<RetentionClass>,
}

/// `POST /v1/executor/logs`: one chunk of output, already masked.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogRequest {
    pub attempt_id: Uuid,
    pub lease_epoch: u64,
    pub runner_instance: String,
    pub stream: LogStream,
    pub seq: u64,
    pub text: String,
}

/// The first TCP frame's body.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthRequest {
    pub key: String,
    pub executor_id: String,
}

/// A TCP request: `{"op": "...", "id": 7, "body": {...}}`; `body` is what
/// the HTTP route of the same name takes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpRequest {
    pub op: TcpOp,
    #[serde(default)]
    pub id: Option<u64>,
    #[serde(default)]
    pub body: serde_json::Value,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpOp {
    Auth,
    Register,
    Poll,
    Report,
    Log,
}

/// Executor ids: what the catalog's check constraint admits.
pub fn valid_executor_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// An instance belongs to the executor whose id is its prefix up to the dot.
pub fn instance_of(executor_id: &str) -> String {
    format!("{executor_id}.{}", Uuid::new_v4().simple())
}

pub fn owns_instance(executor_id: &str, instance_id: &str) -> bool {
    instance_id
        .split_once('.')
        .is_some_and(|(owner, rest)| owner == executor_id && !rest.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_bodies_name_the_field_path() {
        let problems = parse::<ReportRequest>(
            br#"{"attempt_id":"00000000-0000-0000-0000-000000000001","lease_epoch":"two","runner_instance":"a.b","type":"started"}"#,
        )
        .unwrap_err();
        assert_eq!(problems[0].path, "lease_epoch");
        let problems =
            parse::<RegisterRequest>(br#"{"runner_type":"verification","pool":{"zone":7}}"#)
                .unwrap_err();
        assert_eq!(problems[0].path, "pool.zone");
        let problems = parse::<ReportRequest>(b"{not json").unwrap_err();
        assert_eq!(problems[0].path, "");
        assert!(parse::<RegisterRequest>(br#"{"runner_type":"verification"} x"#).is_err());
    }

    #[test]
    fn reports_are_checked_beyond_their_types() {
        let base = |extra: &str| {
            format!(
                r#"{{"attempt_id":"00000000-0000-0000-0000-000000000001","lease_epoch":1,"runner_instance":"a.b",{extra}}}"#
            )
        };
        let finished =
            parse::<ReportRequest>(base(r#""type":"finished","outcome":"failed""#).as_bytes())
                .unwrap()
                .into_report()
                .unwrap_err();
        assert_eq!(finished[0].path, "category");
        let report = parse::<ReportRequest>(
            base(r#""type":"finished","outcome":"succeeded","result":{"ok":true}"#).as_bytes(),
        )
        .unwrap()
        .into_report()
        .unwrap();
        assert!(matches!(
            report.body,
            ReportBody::Finished { result_json: Some(ref json), .. } if json == r#"{"ok":true}"#
        ));
        let heartbeat =
            parse::<ReportRequest>(base(r#""type":"heartbeat","percent":101"#).as_bytes())
                .unwrap()
                .into_report()
                .unwrap_err();
        assert_eq!(heartbeat[0].path, "percent");
    }

    #[test]
    fn instances_belong_to_their_executor() {
        let instance = instance_of("exec-a");
        assert!(owns_instance("exec-a", &instance));
        assert!(!owns_instance("exec", &instance));
        assert!(!owns_instance("exec-a", "exec-a"));
        assert!(!owns_instance("exec-a", "exec-b.1"));
        assert!(
            valid_executor_id("exec_a-1") && !valid_executor_id("a.b") && !valid_executor_id("")
        );
    }
}
