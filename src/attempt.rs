//! The pure attempt state machine.
//!
//! `decide(state, input, now)` turns one input into events (or a rejection)
//! and `apply(state, event)` folds one event into an attempt. Both are pure:
//! no I/O, no clock, no randomness. Ids are derived from what the input
//! carries (uuid v5), so the same input always yields the same events and a
//! redelivered command can never mint a second attempt.

mod decide;
#[cfg(test)]
mod examples;
mod fencing;
mod ids;
pub mod placement;
#[cfg(test)]
mod proptests;

pub use decide::{
    approval_refusal, decide, dedupes_by_state, repeats_an_applied_report, ApprovalAsked, Rejection,
};
pub use fencing::{lease_refusal, LeaseFacts};
pub use ids::{attempt_id_for, event_id_for, lease_id_for, report_event_id_for};

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::contract::{
    AttemptEvent, AttemptStatus, CancelInfo, EventBody, FailureCategory, JobSpec, LeaseInfo,
    TargetKey, TerminalOutcome, TimerKind, UnixMillis,
};

/// Everything known about one attempt: the projection row, and what `decide`
/// needs. Derived only from the attempt's own events, so an attempt can be
/// rebuilt from its Kafka partition alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub attempt_id: Uuid,
    pub job_id: String,
    pub command_id: Uuid,
    pub attempt_no: u32,
    pub tenant: String,
    pub operation: String,
    /// Absent only for a rejected attempt.
    pub spec: Option<std::sync::Arc<JobSpec>>,
    pub status: AttemptStatus,
    pub created_at: UnixMillis,
    pub available_at: UnixMillis,
    pub updated_at: UnixMillis,
    pub previous_attempt_id: Option<Uuid>,
    /// The operator policy that admitted the job (or refused it).
    pub policy_digest: Option<String>,
    /// The target keys it holds while it has a lease, with their limits.
    #[serde(default)]
    pub target_keys: Vec<TargetKey>,
    pub lease: Option<LeaseInfo>,
    pub started_at: Option<UnixMillis>,
    pub cancel: Option<CancelInfo>,
    pub progress: Option<String>,
    pub progress_percent: Option<u8>,
    pub outcome: Option<TerminalOutcome>,
    pub failure_category: Option<FailureCategory>,
    pub message: Option<String>,
    pub result_json: Option<String>,
    /// Files the runner stored, as its final report listed them.
    pub outputs: Vec<crate::contract::OutputArtifact>,
    pub finished_at: Option<UnixMillis>,
    pub timer_fired: Option<TimerKind>,
    pub retry_attempt_id: Option<Uuid>,
    pub fenced_reports: u32,
    /// Set once the HTTP callback was delivered (true) or given up (false).
    pub callback_delivered: Option<bool>,
    /// The same, for the callback on the JobSpec's topic.
    #[serde(default)]
    pub callback_topic_delivered: Option<bool>,
    /// An `opentofu.plan` attempt's approvals (`plan_approved` events).
    #[serde(default)]
    pub plan_approval: Option<PlanApproval>,
    pub last_seq: u64,
}

/// Who approved an `opentofu.plan` attempt's saved plan for applying.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanApproval {
    /// `sha256:<hex>` of the saved plan.
    pub digest: String,
    /// The approvers, in the order they approved.
    pub approved_by: Vec<String>,
}

impl Attempt {
    /// A callback's outcome, once recorded (delivered or given up).
    pub fn callback_outcome(&self, url: &str) -> Option<bool> {
        if url.starts_with(crate::contract::callbacks::TOPIC_SCHEME) {
            self.callback_topic_delivered
        } else {
            self.callback_delivered
        }
    }

    /// Where a callback's outcome is kept: a topic's callback is
    /// recorded as `kafka:<topic>` (docs/EVENTS.md, "Callbacks").
    pub fn callback_outcome_mut(&mut self, url: &str) -> &mut Option<bool> {
        if url.starts_with(crate::contract::callbacks::TOPIC_SCHEME) {
            &mut self.callback_topic_delivered
        } else {
            &mut self.callback_delivered
        }
    }

    /// A queued attempt as its first event (seq 1) makes it; the caller
    /// fills in what that event says beyond identity.
    fn first(
        event: &AttemptEvent,
        command_id: Uuid,
        attempt_no: u32,
        tenant: &str,
        operation: &str,
    ) -> Self {
        Attempt {
            attempt_id: event.attempt_id,
            job_id: event.job_id.clone(),
            command_id,
            attempt_no,
            tenant: tenant.to_owned(),
            operation: operation.to_owned(),
            spec: None,
            status: AttemptStatus::Queued,
            created_at: event.occurred_at,
            available_at: event.occurred_at,
            updated_at: event.occurred_at,
            previous_attempt_id: None,
            policy_digest: None,
            target_keys: Vec::new(),
            lease: None,
            started_at: None,
            cancel: None,
            progress: None,
            progress_percent: None,
            outcome: None,
            failure_category: None,
            message: None,
            result_json: None,
            outputs: Vec::new(),
            finished_at: None,
            timer_fired: None,
            retry_attempt_id: None,
            fenced_reports: 0,
            callback_delivered: None,
            callback_topic_delivered: None,
            plan_approval: None,
            last_seq: 1,
        }
    }

    /// Whether it holds its target keys: from its lease to its end.
    pub fn holds_keys(&self) -> bool {
        matches!(
            self.status,
            AttemptStatus::Leased | AttemptStatus::Running | AttemptStatus::CancelRequested
        )
    }

    /// Whether the operation may run twice; a rejected attempt never ran.
    pub fn is_idempotent(&self) -> bool {
        self.spec
            .as_ref()
            .is_none_or(|spec| spec.operation.is_idempotent())
    }

    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// The deadlines that are armed in this state, each at most once.
    pub fn deadlines(&self) -> Vec<(TimerKind, UnixMillis)> {
        let Some(spec) = &self.spec else {
            return Vec::new();
        };
        if self.is_terminal() {
            return Vec::new();
        }
        let timeouts = spec.timeouts;
        let mut deadlines = vec![(
            TimerKind::ScheduleToClose,
            self.created_at
                .saturating_add(timeouts.schedule_to_close.as_i64()),
        )];
        match self.started_at {
            None => deadlines.push((
                TimerKind::ScheduleToStart,
                self.available_at
                    .saturating_add(timeouts.schedule_to_start.as_i64()),
            )),
            Some(started_at) => deadlines.push((
                TimerKind::StartToClose,
                started_at.saturating_add(timeouts.start_to_close.as_i64()),
            )),
        }
        if let Some(lease) = self.lease.as_ref().filter(|lease| lease.active) {
            deadlines.push((TimerKind::Heartbeat, lease.expires_at));
        }
        if let Some(cancel) = &self.cancel {
            deadlines.push((TimerKind::CancelGrace, cancel.grace_deadline));
        }
        deadlines.sort();
        deadlines
    }

    /// The armed deadline due first (of two due together, the one whose
    /// name sorts first): the attempt row's `next_deadline` and
    /// `next_timer`, which the sweeper reads.
    pub fn next_deadline(&self) -> Option<(TimerKind, UnixMillis)> {
        self.deadlines()
            .into_iter()
            .min_by_key(|(kind, due)| (*due, kind.as_str()))
    }

    pub fn deadline(&self, timer: TimerKind) -> Option<UnixMillis> {
        self.deadlines()
            .into_iter()
            .find(|(kind, _)| *kind == timer)
            .map(|(_, due)| due)
    }

    /// The active lease, if any.
    pub fn active_lease(&self) -> Option<&LeaseInfo> {
        self.lease.as_ref().filter(|lease| lease.active)
    }
}

/// Everything `decide` sees of one job: its attempts, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobState {
    pub attempts: Vec<Attempt>,
    /// Set when the input's command id already belongs to another job.
    pub command_owner: Option<String>,
    /// For a grant: how many attempts (of any job) hold each target key of
    /// the attempt, read by the store under the keys' locks. A key of the
    /// attempt missing here is not known to be free, and the grant is
    /// refused.
    pub key_holders: BTreeMap<String, u32>,
    /// For an ExecuteJob of an `opentofu.apply` naming an approved plan:
    /// the digests of its tenant's plans that have an approval, read by the
    /// store. A digest missing here is not approved, and the job is
    /// rejected (`policy`).
    pub approved_plans: BTreeSet<String>,
}

impl JobState {
    pub fn latest(&self) -> Option<&Attempt> {
        self.attempts.last()
    }

    pub fn attempt(&self, attempt_id: Uuid) -> Option<&Attempt> {
        self.attempts
            .iter()
            .find(|attempt| attempt.attempt_id == attempt_id)
    }

    /// The highest lease epoch any attempt of the job was granted; epochs
    /// increase across the whole job.
    pub fn max_epoch(&self) -> u64 {
        self.attempts
            .iter()
            .filter_map(|attempt| attempt.lease.as_ref().map(|lease| lease.epoch))
            .max()
            .unwrap_or(0)
    }

    /// Folds events (possibly for several attempts) into the job.
    pub fn apply_all(&mut self, events: &[AttemptEvent]) -> Result<(), ApplyError> {
        for event in events {
            let index = self
                .attempts
                .iter()
                .position(|attempt| attempt.attempt_id == event.attempt_id);
            match index {
                Some(index) => {
                    let next = apply(Some(&self.attempts[index]), event)?;
                    self.attempts[index] = next;
                }
                None => {
                    let created = apply(None, event)?;
                    self.attempts.push(created);
                    self.attempts.sort_by_key(|attempt| attempt.attempt_no);
                }
            }
        }
        Ok(())
    }
}

/// An event that cannot follow the attempt's history: a gap in `seq`, an event
/// before creation, or anything but bookkeeping after the terminal event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("attempt {attempt_id} seq {seq}: {reason}")]
pub struct ApplyError {
    pub attempt_id: Uuid,
    pub seq: u64,
    pub reason: String,
}

/// Folds one event into an attempt. The only function that changes attempt
/// state, used live and by every rebuild.
pub fn apply(state: Option<&Attempt>, event: &AttemptEvent) -> Result<Attempt, ApplyError> {
    match state {
        None => apply_first(event),
        Some(current) => apply_next(current, event),
    }
}

fn apply_error(event: &AttemptEvent, reason: &str) -> ApplyError {
    ApplyError {
        attempt_id: event.attempt_id,
        seq: event.seq,
        reason: reason.to_owned(),
    }
}

/// The first event of an attempt: `created` or `rejected`, at seq 1.
fn apply_first(event: &AttemptEvent) -> Result<Attempt, ApplyError> {
    let fail = |reason: &str| apply_error(event, reason);
    if event.seq != 1 {
        return Err(fail("the first event of an attempt must have seq 1"));
    }
    match &event.body {
        EventBody::Created {
            command_id,
            attempt_no,
            spec,
            available_at,
            previous_attempt_id,
            policy_digest,
            target_keys,
        } => {
            let mut attempt = Attempt::first(
                event,
                *command_id,
                *attempt_no,
                &spec.tenant,
                spec.operation.as_str(),
            );
            attempt.spec = Some(spec.clone());
            attempt.policy_digest = policy_digest.clone();
            attempt.target_keys = target_keys.clone();
            attempt.available_at = *available_at;
            attempt.previous_attempt_id = *previous_attempt_id;
            Ok(attempt)
        }
        EventBody::Rejected {
            command_id,
            attempt_no,
            tenant,
            operation,
            category,
            problems,
            policy_digest,
        } => {
            let mut attempt = Attempt::first(event, *command_id, *attempt_no, tenant, operation);
            attempt.policy_digest = policy_digest.clone();
            attempt.status = AttemptStatus::Rejected;
            attempt.failure_category = Some(*category);
            attempt.message = Some(rejection_message(problems));
            attempt.finished_at = Some(event.occurred_at);
            Ok(attempt)
        }
        _ => Err(fail(
            "an attempt's history must start with `created` or `rejected`",
        )),
    }
}

/// A rejected attempt's message: its problems, in order.
pub(crate) fn rejection_message(problems: &[crate::contract::Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Any later event: it must follow the last one, and nothing but
/// bookkeeping may follow the terminal state.
fn apply_next(current: &Attempt, event: &AttemptEvent) -> Result<Attempt, ApplyError> {
    let fail = |reason: &str| apply_error(event, reason);
    if event.attempt_id != current.attempt_id {
        return Err(fail("event applied to another attempt"));
    }
    if event.seq != current.last_seq + 1 {
        return Err(fail(&format!("expected seq {}", current.last_seq + 1)));
    }
    if current.is_terminal() && !event.body.is_bookkeeping() {
        return Err(fail(&format!(
            "`{}` after the terminal state {}",
            event.body.kind(),
            current.status.as_str()
        )));
    }
    let mut next = current.clone();
    next.last_seq = event.seq;
    next.updated_at = event.occurred_at;
    apply_body(current, &mut next, event)?;
    Ok(next)
}

/// What one later event changes, one arm per event type.
fn apply_body(
    current: &Attempt,
    next: &mut Attempt,
    event: &AttemptEvent,
) -> Result<(), ApplyError> {
    let fail = |reason: &str| apply_error(event, reason);
    match &event.body {
        EventBody::Created { .. } | EventBody::Rejected { .. } => {
            return Err(fail("an attempt is created once"));
        }
        EventBody::LeaseGranted {
            lease_id,
            epoch,
            runner_instance,
            expires_at,
        } => {
            if current.status != AttemptStatus::Queued {
                return Err(fail("lease granted to an attempt that is not queued"));
            }
            next.status = AttemptStatus::Leased;
            next.lease = Some(LeaseInfo {
                lease_id: *lease_id,
                epoch: *epoch,
                runner_instance: runner_instance.clone(),
                granted_at: event.occurred_at,
                expires_at: *expires_at,
                active: true,
            });
        }
        EventBody::LeaseExtended { epoch, expires_at } => {
            let lease = next
                .lease
                .as_mut()
                .filter(|lease| lease.active && lease.epoch == *epoch)
                .ok_or_else(|| fail("lease extended without an active lease of that epoch"))?;
            lease.expires_at = *expires_at;
        }
        EventBody::Started { epoch, .. } => {
            if next.active_lease().map(|lease| lease.epoch) != Some(*epoch) {
                return Err(fail("started without an active lease of that epoch"));
            }
            next.started_at = Some(event.occurred_at);
            if current.status == AttemptStatus::Leased {
                next.status = AttemptStatus::Running;
            }
        }
        EventBody::Progress {
            message, percent, ..
        } => {
            next.progress = Some(message.clone());
            next.progress_percent = *percent;
        }
        EventBody::CancelRequested {
            reason,
            requested_by,
            grace_deadline,
        } => {
            next.status = AttemptStatus::CancelRequested;
            next.cancel = Some(CancelInfo {
                reason: reason.clone(),
                requested_by: requested_by.clone(),
                requested_at: event.occurred_at,
                grace_deadline: *grace_deadline,
            });
        }
        EventBody::ReportFenced { .. } => {
            next.fenced_reports = next.fenced_reports.saturating_add(1);
            // Bookkeeping does not move the attempt's clock once it is over.
            if current.is_terminal() {
                next.updated_at = current.updated_at;
            }
        }
        EventBody::CallbackRecorded { url, delivered, .. } => {
            *next.callback_outcome_mut(url) = Some(*delivered);
            if current.is_terminal() {
                next.updated_at = current.updated_at;
            }
        }
        EventBody::PlanApproved {
            plan_digest,
            approved_by,
            ..
        } => {
            if current.status != AttemptStatus::Succeeded {
                return Err(fail("a plan approved whose attempt did not succeed"));
            }
            let approval = next.plan_approval.get_or_insert_with(|| PlanApproval {
                digest: plan_digest.clone(),
                approved_by: Vec::new(),
            });
            if approval.digest != *plan_digest {
                return Err(fail("an approval of another plan than the attempt's"));
            }
            if !approval.approved_by.contains(approved_by) {
                approval.approved_by.push(approved_by.clone());
            }
            next.updated_at = current.updated_at;
        }
        EventBody::Finished {
            outcome,
            category,
            message,
            result_json,
            timer,
            lease_revoked: _,
            retry_attempt_id,
            outputs,
        } => {
            next.outputs = outputs.clone();
            next.status = (*outcome).into();
            next.outcome = Some(*outcome);
            next.failure_category = *category;
            next.message = Some(message.clone());
            next.result_json = result_json.clone();
            next.timer_fired = *timer;
            next.finished_at = Some(event.occurred_at);
            next.retry_attempt_id = *retry_attempt_id;
            if let Some(lease) = next.lease.as_mut() {
                lease.active = false;
            }
        }
    }
    Ok(())
}

/// Folds a whole history. Errors on the first event that cannot follow.
pub fn rebuild<'a>(
    events: impl IntoIterator<Item = &'a AttemptEvent>,
) -> Result<Option<Attempt>, ApplyError> {
    let mut state: Option<Attempt> = None;
    for event in events {
        state = Some(apply(state.as_ref(), event)?);
    }
    Ok(state)
}
