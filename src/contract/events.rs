//! Attempt events (the system of record), runner reports and the inputs the
//! state machine decides on.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{limits, DurationMs, FailureCategory, JobSpec, Problem};

/// Milliseconds since the Unix epoch, UTC. Every clock in the contract.
pub type UnixMillis = i64;

/// The four timeouts plus the cancel grace period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerKind {
    ScheduleToStart,
    StartToClose,
    Heartbeat,
    ScheduleToClose,
    CancelGrace,
}

impl TimerKind {
    pub const ALL: [TimerKind; 5] = [
        TimerKind::ScheduleToStart,
        TimerKind::StartToClose,
        TimerKind::Heartbeat,
        TimerKind::ScheduleToClose,
        TimerKind::CancelGrace,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            TimerKind::ScheduleToStart => "schedule_to_start",
            TimerKind::StartToClose => "start_to_close",
            TimerKind::Heartbeat => "heartbeat",
            TimerKind::ScheduleToClose => "schedule_to_close",
            TimerKind::CancelGrace => "cancel_grace",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        TimerKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}

/// How a finished attempt ended (`rejected` has its own event).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalOutcome {
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
    /// A started operation that is not idempotent lost its lease (or ignored
    /// a cancel): nobody can say whether it finished. Never retried.
    OutcomeUnknown,
}

/// The active or last lease of an attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub lease_id: Uuid,
    pub epoch: u64,
    pub runner_instance: String,
    pub granted_at: UnixMillis,
    pub expires_at: UnixMillis,
    pub active: bool,
}

/// A recorded cancel request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelInfo {
    pub reason: String,
    pub requested_by: String,
    pub requested_at: UnixMillis,
    pub grace_deadline: UnixMillis,
}

/// One entry of an attempt's history. `seq` starts at 1 per attempt and has
/// no gaps; `event_id` is derived from `(attempt_id, seq)`, so a re-published
/// event keeps its id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptEvent {
    pub event_id: Uuid,
    pub attempt_id: Uuid,
    pub job_id: String,
    pub seq: u64,
    pub occurred_at: UnixMillis,
    pub body: EventBody,
}

/// What happened. The `type` tag is also the CloudEvents `ce_type` suffix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventBody {
    /// The attempt exists and is queued (available from `available_at`).
    Created {
        command_id: Uuid,
        attempt_no: u32,
        spec: std::sync::Arc<JobSpec>,
        available_at: UnixMillis,
        previous_attempt_id: Option<Uuid>,
        /// The operator policy that admitted the job (`sha256:<hex>`), so an
        /// audit can say which policy allowed it. `None` before 0.2.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy_digest: Option<String>,
        /// The keys the attempt holds while leased, each with how many
        /// attempts may hold it at once (docs/ARCHITECTURE.md, "Per-target
        /// concurrency"). Empty before 0.2 and for operations that take none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        target_keys: Vec<super::TargetKey>,
    },
    /// The command broke the contract or a policy; the attempt never ran.
    /// The first and the terminal event of its attempt.
    Rejected {
        command_id: Uuid,
        attempt_no: u32,
        tenant: String,
        operation: String,
        category: FailureCategory,
        problems: Vec<Problem>,
        /// The operator policy in force when it was refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy_digest: Option<String>,
    },
    LeaseGranted {
        lease_id: Uuid,
        epoch: u64,
        runner_instance: String,
        expires_at: UnixMillis,
    },
    /// Persisted at most about once per half lease TTL, on a heartbeat.
    LeaseExtended {
        epoch: u64,
        expires_at: UnixMillis,
    },
    Started {
        epoch: u64,
        runner_instance: String,
    },
    Progress {
        epoch: u64,
        message: String,
        percent: Option<u8>,
    },
    CancelRequested {
        reason: String,
        requested_by: String,
        grace_deadline: UnixMillis,
    },
    /// A report with a stale epoch (or for a lease that is no longer active)
    /// was refused. Bookkeeping: it changes nothing else and may follow the
    /// terminal event.
    ReportFenced {
        report_kind: String,
        report_epoch: u64,
        current_epoch: Option<u64>,
        runner_instance: String,
        reason: String,
    },
    /// The HTTP callback for the terminal state was delivered, or given up
    /// on after its last attempt. Bookkeeping: follows the terminal event.
    CallbackRecorded {
        url: String,
        delivered: bool,
        attempts: u32,
        http_status: Option<u16>,
        error: Option<String>,
        idempotency_key: String,
    },
    /// An `opentofu.plan` attempt's saved plan was approved for applying
    /// (an ApprovePlan command), by someone other than its requester unless
    /// the operator lets the tenant approve its own. Bookkeeping: follows
    /// the terminal event (docs/ARCHITECTURE.md, "Plan approvals").
    PlanApproved {
        command_id: Uuid,
        plan_digest: String,
        approved_by: String,
    },
    /// The terminal event (with `Rejected`): exactly one per attempt.
    Finished {
        outcome: TerminalOutcome,
        category: Option<FailureCategory>,
        message: String,
        result_json: Option<String>,
        timer: Option<TimerKind>,
        /// The lease was taken back from a runner that did not report: the
        /// relay tells the instance to stop.
        lease_revoked: bool,
        /// The infra retry this failure caused, if any.
        retry_attempt_id: Option<Uuid>,
        /// Files the runner stored for the attempt (since 0.2).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        outputs: Vec<super::OutputArtifact>,
    },
}

impl EventBody {
    /// The stable name, e.g. `lease_granted`.
    pub fn kind(&self) -> &'static str {
        use event_kind as kind;
        match self {
            EventBody::Created { .. } => kind::CREATED,
            EventBody::Rejected { .. } => kind::REJECTED,
            EventBody::LeaseGranted { .. } => kind::LEASE_GRANTED,
            EventBody::LeaseExtended { .. } => kind::LEASE_EXTENDED,
            EventBody::Started { .. } => kind::STARTED,
            EventBody::Progress { .. } => kind::PROGRESS,
            EventBody::CancelRequested { .. } => kind::CANCEL_REQUESTED,
            EventBody::ReportFenced { .. } => kind::REPORT_FENCED,
            EventBody::Finished { .. } => kind::FINISHED,
            EventBody::CallbackRecorded { .. } => kind::CALLBACK_RECORDED,
            EventBody::PlanApproved { .. } => kind::PLAN_APPROVED,
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            EventBody::Finished { .. } | EventBody::Rejected { .. }
        )
    }

    /// Events allowed after the terminal one.
    pub fn is_bookkeeping(&self) -> bool {
        matches!(
            self,
            EventBody::ReportFenced { .. }
                | EventBody::CallbackRecorded { .. }
                | EventBody::PlanApproved { .. }
        )
    }
}

/// The outcome a runner reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportedOutcome {
    Succeeded,
    Failed,
    Cancelled,
}

/// What a runner says about an attempt, always under a lease epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunnerReport {
    pub attempt_id: Uuid,
    pub lease_epoch: u64,
    pub runner_instance: String,
    pub body: ReportBody,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReportBody {
    Started,
    Heartbeat {
        progress: Option<String>,
        percent: Option<u8>,
    },
    Progress {
        message: String,
        percent: Option<u8>,
    },
    Finished {
        outcome: ReportedOutcome,
        category: Option<FailureCategory>,
        message: String,
        result_json: Option<String>,
        /// Files the runner stored for the attempt, each under
        /// `outputs::output_key` (since 0.2).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        outputs: Vec<super::OutputArtifact>,
    },
}

impl ReportBody {
    /// Holds a finished report's result to its operation's documented type
    /// (docs/OPERATIONS.md): one that does not match makes the report a
    /// `runner_error` failure naming the mismatch, never a result of another
    /// shape. The mismatch, when there was one.
    pub fn hold_to_type(&mut self, operation: super::Operation) -> Option<String> {
        let ReportBody::Finished {
            outcome,
            category,
            message,
            result_json,
            ..
        } = self
        else {
            return None;
        };
        let problem = serde_json::from_str::<serde_json::Value>(result_json.as_deref()?)
            .map_err(|error| format!("not JSON: {error}"))
            .and_then(|value| super::ops::check_result(operation, &value))
            .err()?;
        // What the result said may be long, and hold any character (a
        // field's name): the message is bounded and storable.
        let problem = limits::shortened(&limits::loggable(&problem), limits::MAX_MESSAGE_BYTES / 2);
        *outcome = ReportedOutcome::Failed;
        *category = Some(FailureCategory::RunnerError);
        *message =
            format!("the result of {operation} does not match its documented type: {problem}");
        *result_json = None;
        Some(problem)
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ReportBody::Started => "started",
            ReportBody::Heartbeat { .. } => "heartbeat",
            ReportBody::Progress { .. } => "progress",
            ReportBody::Finished { .. } => "finished",
        }
    }
}

/// Everything the state machine decides on. Ids and clocks come in from
/// outside; `decide` reads neither a clock nor a random source.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A valid ExecuteJob command.
    Execute {
        spec: std::sync::Arc<JobSpec>,
        /// The operator policy that admitted it (`sha256:<hex>` of the file).
        policy_digest: Option<String>,
        /// The keys the policy says the attempt holds, with their limits.
        target_keys: Vec<super::TargetKey>,
    },
    /// An ExecuteJob command that failed validation but names its command and
    /// job: it becomes a `rejected` attempt so that nothing is silently lost.
    ExecuteInvalid {
        command_id: Uuid,
        job_id: String,
        tenant: String,
        operation: String,
        category: FailureCategory,
        problems: Vec<Problem>,
        /// The operator policy in force when it was refused.
        policy_digest: Option<String>,
    },
    /// Placement chose `runner_instance` for a queued attempt.
    Grant {
        attempt_id: Uuid,
        runner_instance: String,
    },
    Report(RunnerReport),
    /// The sweeper found the deadline due. Firing twice is a no-op.
    TimerFired {
        attempt_id: Uuid,
        timer: TimerKind,
    },
    Cancel {
        attempt_id: Uuid,
        reason: String,
        requested_by: String,
        grace: DurationMs,
    },
    /// An ApprovePlan command: the saved plan `plan_digest` of the
    /// `opentofu.plan` attempt `plan_attempt_id` may be applied. The
    /// operator's policy was checked at intake (the approver is one of the
    /// tenant's `opentofu.approvers`); `self_approve` says whether the
    /// plan's own requester may be the approver.
    ApprovePlan {
        command_id: Uuid,
        plan_attempt_id: Uuid,
        plan_digest: String,
        tenant: String,
        approved_by: String,
        self_approve: bool,
    },
    /// The callback worker's verdict on the terminal state's HTTP callback.
    CallbackOutcome {
        attempt_id: Uuid,
        url: String,
        delivered: bool,
        attempts: u32,
        http_status: Option<u16>,
        error: Option<String>,
        idempotency_key: String,
    },
}

/// The lifecycle state of an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    Queued,
    Leased,
    Running,
    CancelRequested,
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
    Rejected,
    OutcomeUnknown,
}

impl AttemptStatus {
    pub const ALL: [AttemptStatus; 10] = [
        AttemptStatus::Queued,
        AttemptStatus::Leased,
        AttemptStatus::Running,
        AttemptStatus::CancelRequested,
        AttemptStatus::Succeeded,
        AttemptStatus::Failed,
        AttemptStatus::TimedOut,
        AttemptStatus::Cancelled,
        AttemptStatus::Rejected,
        AttemptStatus::OutcomeUnknown,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptStatus::Queued => "queued",
            AttemptStatus::Leased => "leased",
            AttemptStatus::Running => "running",
            AttemptStatus::CancelRequested => "cancel_requested",
            AttemptStatus::Succeeded => "succeeded",
            AttemptStatus::Failed => "failed",
            AttemptStatus::TimedOut => "timed_out",
            AttemptStatus::Cancelled => "cancelled",
            AttemptStatus::Rejected => "rejected",
            AttemptStatus::OutcomeUnknown => "outcome_unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        AttemptStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
    }

    pub const fn is_terminal(self) -> bool {
        !matches!(
            self,
            AttemptStatus::Queued
                | AttemptStatus::Leased
                | AttemptStatus::Running
                | AttemptStatus::CancelRequested
        )
    }
}

impl From<TerminalOutcome> for AttemptStatus {
    fn from(outcome: TerminalOutcome) -> Self {
        match outcome {
            TerminalOutcome::Succeeded => AttemptStatus::Succeeded,
            TerminalOutcome::Failed => AttemptStatus::Failed,
            TerminalOutcome::TimedOut => AttemptStatus::TimedOut,
            TerminalOutcome::Cancelled => AttemptStatus::Cancelled,
            TerminalOutcome::OutcomeUnknown => AttemptStatus::OutcomeUnknown,
        }
    }
}

impl AttemptEvent {
    /// One line a person can read.
    pub fn summary(&self) -> String {
        let event = self;
        match &event.body {
            EventBody::Created {
                attempt_no,
                spec,
                available_at,
                previous_attempt_id,
                ..
            } => {
                let retry = previous_attempt_id
                    .map(|id| format!(", retry of {id}"))
                    .unwrap_or_default();
                let delayed = if *available_at > event.occurred_at {
                    format!(", available in {} ms", available_at - event.occurred_at)
                } else {
                    String::new()
                };
                format!(
                    "attempt {attempt_no} of job `{}`: {} for {}{retry}{delayed}",
                    event.job_id, spec.operation, spec.tenant
                )
            }
            EventBody::Rejected {
                category, problems, ..
            } => {
                format!(
                    "rejected ({}): {}",
                    category.as_str(),
                    problems
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            }
            EventBody::LeaseGranted {
                epoch,
                runner_instance,
                expires_at,
                ..
            } => {
                format!(
                    "lease epoch {epoch} to {runner_instance}, expires in {} ms",
                    expires_at - event.occurred_at
                )
            }
            EventBody::LeaseExtended { epoch, expires_at } => format!(
                "lease epoch {epoch} extended by {} ms",
                expires_at - event.occurred_at
            ),
            EventBody::Started {
                epoch,
                runner_instance,
            } => format!("started by {runner_instance} under epoch {epoch}"),
            EventBody::Progress {
                message, percent, ..
            } => match percent {
                Some(percent) => format!("{percent}% {message}"),
                None => message.clone(),
            },
            EventBody::CancelRequested {
                reason,
                requested_by,
                grace_deadline,
            } => {
                format!(
                    "cancel requested by {requested_by} ({reason}); grace {} ms",
                    grace_deadline - event.occurred_at
                )
            }
            EventBody::ReportFenced {
                report_kind,
                report_epoch,
                runner_instance,
                reason,
                ..
            } => {
                format!(
                    "refused {report_kind} from {runner_instance} under epoch {report_epoch}: {reason}"
                )
            }
            EventBody::CallbackRecorded {
                url,
                delivered,
                attempts,
                http_status,
                error,
                ..
            } => {
                let status = http_status
                    .map(|status| format!(" (HTTP {status})"))
                    .unwrap_or_default();
                let error = error
                    .as_ref()
                    .map(|error| format!(": {error}"))
                    .unwrap_or_default();
                let verdict = if *delivered { "delivered" } else { "given up" };
                format!("callback to {url} {verdict} after {attempts} attempt(s){status}{error}")
            }
            EventBody::PlanApproved {
                plan_digest,
                approved_by,
                ..
            } => format!("plan {plan_digest} approved by {approved_by}"),
            EventBody::Finished {
                outcome,
                category,
                message,
                retry_attempt_id,
                ..
            } => {
                let outcome = serde_json::to_value(outcome)
                    .ok()
                    .and_then(|value| value.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let category = category
                    .map(|category| format!(" ({})", category.as_str()))
                    .unwrap_or_default();
                let retry = retry_attempt_id
                    .map(|id| format!("; retried as {id}"))
                    .unwrap_or_default();
                format!("{outcome}{category}: {message}{retry}")
            }
        }
    }
}

/// The name of each event kind: in `attempt_events.kind`, in `ce_type`
/// (`io.execplane.attempt.<kind>`), in SSE event names, and as the Avro
/// `type` symbol (`codec`). Defined once.
pub mod event_kind {
    /// What `ce_type` prefixes the kind with.
    pub const CE_TYPE_PREFIX: &str = "io.execplane.attempt.";
    pub const CREATED: &str = "created";
    pub const REJECTED: &str = "rejected";
    pub const LEASE_GRANTED: &str = "lease_granted";
    pub const LEASE_EXTENDED: &str = "lease_extended";
    pub const STARTED: &str = "started";
    pub const PROGRESS: &str = "progress";
    pub const CANCEL_REQUESTED: &str = "cancel_requested";
    pub const REPORT_FENCED: &str = "report_fenced";
    pub const FINISHED: &str = "finished";
    pub const CALLBACK_RECORDED: &str = "callback_recorded";
    pub const PLAN_APPROVED: &str = "plan_approved";
}

/// Every problem of a runner report beyond its types: the instance is an
/// identifier, texts are bounded and storable, the percent is at most 100.
pub fn check_report(report: &RunnerReport) -> Vec<Problem> {
    let mut problems = Vec::new();
    limits::check_identifier("runner_instance", &report.runner_instance, &mut problems);
    let percent_ok = |percent: &Option<u8>, problems: &mut Vec<Problem>| {
        if percent.is_some_and(|percent| percent > 100) {
            problems.push(Problem::new("percent", "must be at most 100"));
        }
    };
    match &report.body {
        ReportBody::Started => {}
        ReportBody::Heartbeat { progress, percent } => {
            if let Some(progress) = progress {
                limits::check_free_text(
                    "message",
                    progress,
                    limits::MAX_MESSAGE_BYTES,
                    &mut problems,
                );
            }
            percent_ok(percent, &mut problems);
        }
        ReportBody::Progress { message, percent } => {
            limits::check_free_text("message", message, limits::MAX_MESSAGE_BYTES, &mut problems);
            percent_ok(percent, &mut problems);
        }
        ReportBody::Finished {
            message,
            result_json,
            outputs,
            ..
        } => {
            limits::check_free_text("message", message, limits::MAX_MESSAGE_BYTES, &mut problems);
            super::outputs::check_outputs(report.attempt_id, outputs, &mut problems);
            if let Some(result) = result_json {
                if result.len() > limits::MAX_RESULT_BYTES {
                    problems.push(Problem::new(
                        "result",
                        format!("longer than {} bytes", limits::MAX_RESULT_BYTES),
                    ));
                } else if result.contains('\0') {
                    problems.push(Problem::new("result", limits::NUL));
                } else {
                    match serde_json::from_str::<serde_json::Value>(result) {
                        Err(_) => problems.push(Problem::new("result", "not JSON")),
                        // Escaped: storable text, but not in the callback's `jsonb`.
                        Ok(value) if limits::json_holds_nul(&value) => {
                            problems.push(Problem::new("result", limits::NUL));
                        }
                        Ok(_) => {}
                    }
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod report_tests {
    use super::*;
    use crate::contract::limits::MAX_MESSAGE_BYTES;

    fn report(body: ReportBody, instance: &str) -> RunnerReport {
        RunnerReport {
            attempt_id: uuid::Uuid::nil(),
            lease_epoch: 1,
            runner_instance: instance.into(),
            body,
        }
    }

    #[test]
    fn reports_with_nul_control_characters_or_oversized_text_are_refused() {
        let paths = |report: &RunnerReport| -> Vec<String> {
            check_report(report)
                .into_iter()
                .map(|problem| problem.path)
                .collect()
        };
        let progress = |message: &str| ReportBody::Progress {
            message: message.into(),
            percent: None,
        };
        assert!(paths(&report(progress("line one\nline two\tok"), "a.b")).is_empty());
        assert_eq!(paths(&report(progress("a\u{0}b"), "a.b")), ["message"]);
        assert_eq!(
            paths(&report(progress("\u{1b}[31mred"), "a.b")),
            ["message"]
        );
        assert_eq!(
            paths(&report(progress(&"x".repeat(MAX_MESSAGE_BYTES + 1)), "a.b")),
            ["message"]
        );
        assert_eq!(
            paths(&report(ReportBody::Started, "a.b\nINFO forged")),
            ["runner_instance"]
        );
        let finished = |result: &str| ReportBody::Finished {
            outcome: ReportedOutcome::Succeeded,
            category: None,
            message: String::new(),
            result_json: Some(result.into()),
            outputs: Vec::new(),
        };
        assert!(paths(&report(finished(r#"{"a":"\\u0000"}"#), "a.b")).is_empty());
        assert_eq!(
            paths(&report(finished(r#"{"a":"\u0000"}"#), "a.b")),
            ["result"]
        );
        assert_eq!(
            paths(&report(finished(r#"{"a":[{"b\u0000":1}]}"#), "a.b")),
            ["result"]
        );
        assert_eq!(
            paths(&report(finished("{\"a\":\"\u{0}\"}"), "a.b")),
            ["result"]
        );
        assert_eq!(paths(&report(finished("not json"), "a.b")), ["result"]);
    }
}
