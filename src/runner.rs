//! The runner SDK. A runner instance owns: reading its one partition of its
//! type's work topic, presence, lease checks and self-fencing, attempt
//! heartbeats, progress, cancellation and result reporting. A typed runner
//! only implements [`Executor`]: run this operation, report progress, return
//! a typed outcome.
//!
//! Addressing (docs/ARCHITECTURE.md, "The Kafka pipeline"): a fresh instance id per process start; manual
//! assignment of partition `work_partition(id, n)` at the high watermark,
//! taken BEFORE presence is announced, so nothing addressed to the instance
//! can be missed; no consumer group, no committed offsets.

mod attempt;
mod fence;
mod instance;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::codec::LogStream;
use crate::contract::{FailureCategory, JobSpec, ReportedOutcome, RunnerType};

pub use fence::{LeaseGuard, Stopping};
pub use instance::{run_instance, InstanceHandle};

/// One unit of work handed to an executor.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub attempt_id: uuid::Uuid,
    pub job_id: String,
    pub attempt_no: u32,
    pub lease_epoch: u64,
    pub spec: JobSpec,
}

/// What an executor can do while it runs.
#[derive(Clone, Debug)]
pub struct ExecutionContext {
    /// Cancelled on cancel, lease loss or shutdown: stop the tool promptly.
    pub cancel: CancellationToken,
    progress: mpsc::UnboundedSender<(String, Option<u8>)>,
    log: mpsc::UnboundedSender<(LogStream, String)>,
}

impl ExecutionContext {
    pub fn new(
        cancel: CancellationToken,
        progress: mpsc::UnboundedSender<(String, Option<u8>)>,
        log: mpsc::UnboundedSender<(LogStream, String)>,
    ) -> Self {
        Self {
            cancel,
            progress,
            log,
        }
    }

    /// Writes tool output; it is masked (as a stream) and sent to
    /// `exec.log-chunks.v1` in order.
    pub fn log(&self, stream: LogStream, text: impl Into<String>) {
        let _ = self.log.send((stream, text.into()));
    }

    /// Reports progress; carried on the next heartbeat.
    pub fn progress(&self, message: impl Into<String>, percent: Option<u8>) {
        let _ = self.progress.send((message.into(), percent));
    }
}

/// The typed result of one execution.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionOutcome {
    pub outcome: ReportedOutcome,
    pub category: Option<FailureCategory>,
    pub message: String,
    /// The runner's typed output (evidence, recap, ...) as JSON.
    pub result_json: Option<String>,
}

impl ExecutionOutcome {
    pub fn succeeded(message: impl Into<String>, result: serde_json::Value) -> Self {
        Self {
            outcome: ReportedOutcome::Succeeded,
            category: None,
            message: message.into(),
            result_json: Some(result.to_string()),
        }
    }

    pub fn failed(
        category: FailureCategory,
        message: impl Into<String>,
        result: Option<serde_json::Value>,
    ) -> Self {
        Self {
            outcome: ReportedOutcome::Failed,
            category: Some(category),
            message: message.into(),
            result_json: result.map(|value| value.to_string()),
        }
    }
}

/// A typed runner's one job.
pub trait Executor: Send + Sync + 'static {
    fn runner_type(&self) -> RunnerType;
    /// Capabilities this runner offers placement.
    fn capabilities(&self) -> Vec<String> {
        Vec::new()
    }
    fn execute(
        &self,
        assignment: Assignment,
        context: ExecutionContext,
    ) -> impl Future<Output = ExecutionOutcome> + Send;
}

/// Instance settings; defaults are in the README.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    pub capacity: u32,
    pub pool: BTreeMap<String, String>,
    pub presence_interval: Duration,
    /// How long shutdown waits for running attempts before stopping them.
    pub drain_timeout: Duration,
    /// How long a stopped tool gets to finish before its outcome is reported.
    pub stop_grace: Duration,
    /// Where `{"$secret": ...}` references are resolved; none: a JobSpec
    /// that needs a secret fails `infrastructure`.
    pub secrets: Option<std::sync::Arc<crate::secrets::Vault>>,
    /// The operator's policy (`EXECPLANE_POLICY_FILE`).
    pub policy: std::sync::Arc<crate::policy::OperatorPolicy>,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            capacity: 16,
            pool: BTreeMap::new(),
            presence_interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(30),
            stop_grace: Duration::from_secs(2),
            secrets: None,
            policy: std::sync::Arc::default(),
        }
    }
}

/// The margin before the lease deadline at which a runner fences itself:
/// a tenth of the TTL, at least 250 ms.
pub fn fence_margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(250))
}

/// Heartbeat period: a fifth of the TTL, so a heartbeat always lands in the
/// second half of the lease, where the dispatcher extends it.
pub fn heartbeat_period(ttl: Duration) -> Duration {
    (ttl / 5).max(Duration::from_millis(100))
}
