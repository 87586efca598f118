use uuid::Uuid;

use super::{attempt_id_for, event_id_for, lease_id_for, Attempt, JobState};
use crate::contract::{
    AttemptEvent, AttemptStatus, EventBody, FailureCategory, Input, ReportBody, ReportedOutcome,
    RunnerReport, TerminalOutcome, TimerKind, UnixMillis,
};

/// Why an input produced no events. Nothing is written for it but its inbox
/// row; the caller logs it (and a transport may dead-letter it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("job `{job_id}` already exists for command {existing_command_id}; a job id is used by one command only")]
    JobIdTaken {
        job_id: String,
        existing_command_id: Uuid,
    },
    #[error("command {command_id} already created job `{owner_job_id}`, and now names job `{job_id}`; a command id yields at most one job")]
    CommandIdReused {
        command_id: Uuid,
        owner_job_id: String,
        job_id: String,
    },
    #[error("no attempt {0}")]
    UnknownAttempt(Uuid),
    #[error("id `{input_id}` was first used for {first} and now for {again}; an id names one input only")]
    InputIdReused {
        input_id: String,
        first: String,
        again: String,
    },
    #[error("attempt {attempt_id} is {status}, not queued; it cannot be leased")]
    NotQueued {
        attempt_id: Uuid,
        status: &'static str,
    },
    #[error("attempt {attempt_id} is not available before {available_at} (retry backoff)")]
    NotYetAvailable {
        attempt_id: Uuid,
        available_at: UnixMillis,
    },
    #[error("attempt {attempt_id} is already {status}")]
    AlreadyTerminal {
        attempt_id: Uuid,
        status: &'static str,
    },
    #[error("attempt {attempt_id} waits for target key `{key}`: {holders} of at most {limit} attempts hold it")]
    TargetKeyBusy {
        attempt_id: Uuid,
        key: String,
        holders: u32,
        limit: u32,
    },
    #[error("attempt {attempt_id} holds target key `{key}` when leased, and nobody read who holds it now; not leased")]
    TargetKeyUnread { attempt_id: Uuid, key: String },
    #[error("attempt {attempt_id}'s plan cannot be approved: {reason}")]
    PlanNotApprovable { attempt_id: Uuid, reason: String },
    #[error("a lease needs a runner instance id")]
    NoRunnerInstance,
    #[error("attempt {attempt_id} has not ended; a callback outcome needs a terminal state")]
    NotTerminal { attempt_id: Uuid },
}

/// Collects events, numbering them per attempt.
struct Emitter<'a> {
    job: &'a JobState,
    now: UnixMillis,
    events: Vec<AttemptEvent>,
}

impl Emitter<'_> {
    fn next_seq(&self, attempt_id: Uuid) -> u64 {
        let stored = self
            .job
            .attempt(attempt_id)
            .map_or(0, |attempt| attempt.last_seq);
        let pending = self
            .events
            .iter()
            .filter(|event| event.attempt_id == attempt_id)
            .count() as u64;
        stored + pending + 1
    }

    fn push(&mut self, attempt_id: Uuid, job_id: &str, body: EventBody) {
        let seq = self.next_seq(attempt_id);
        self.events.push(AttemptEvent {
            event_id: event_id_for(attempt_id, seq),
            attempt_id,
            job_id: job_id.to_owned(),
            seq,
            occurred_at: self.now,
            body,
        });
    }
}

/// Decides what one input means for a job. Pure: same state, input and `now`
/// give the same events. An empty list is a valid answer (a duplicate, a
/// heartbeat that needs no extension, a timer that already fired).
pub fn decide(
    job: &JobState,
    input: &Input,
    now: UnixMillis,
) -> Result<Vec<AttemptEvent>, Rejection> {
    let mut emit = Emitter {
        job,
        now,
        events: Vec::new(),
    };
    match input {
        Input::Execute {
            spec,
            policy_digest,
            target_keys,
        } => {
            if let Some(existing) = check_new_job(job, spec.command_id, &spec.job_id)? {
                return Ok(existing);
            }
            decide_execute(&mut emit, spec, policy_digest.clone(), target_keys);
        }
        Input::ApprovePlan {
            command_id,
            plan_attempt_id,
            plan_digest,
            tenant,
            approved_by,
            self_approve,
        } => decide_approve(
            &mut emit,
            *command_id,
            *plan_attempt_id,
            plan_digest,
            tenant,
            approved_by,
            *self_approve,
        )?,
        Input::ExecuteInvalid {
            command_id,
            job_id,
            tenant,
            operation,
            category,
            problems,
            policy_digest,
        } => {
            if let Some(existing) = check_new_job(job, *command_id, job_id)? {
                return Ok(existing);
            }
            emit.push(
                attempt_id_for(*command_id, 1),
                job_id,
                EventBody::Rejected {
                    command_id: *command_id,
                    attempt_no: 1,
                    tenant: tenant.clone(),
                    operation: operation.clone(),
                    category: *category,
                    problems: problems.clone(),
                    policy_digest: policy_digest.clone(),
                },
            );
        }
        Input::Grant {
            attempt_id,
            runner_instance,
        } => decide_grant(&mut emit, *attempt_id, runner_instance)?,
        Input::Report(report) => decide_report(&mut emit, report)?,
        Input::TimerFired { attempt_id, timer } => {
            let attempt = job
                .attempt(*attempt_id)
                .ok_or(Rejection::UnknownAttempt(*attempt_id))?;
            decide_timer(&mut emit, attempt, *timer);
        }
        Input::CallbackOutcome { attempt_id, .. } => {
            decide_callback_outcome(&mut emit, *attempt_id, input)?
        }
        Input::Cancel {
            attempt_id,
            reason,
            requested_by,
            grace,
        } => decide_cancel(&mut emit, *attempt_id, reason, requested_by, *grace)?,
    }
    Ok(emit.events)
}

/// The first attempt of a new job, available at once; an apply naming a
/// plan no ApprovePlan approved is rejected (`policy`) instead.
fn decide_execute(
    emit: &mut Emitter<'_>,
    spec: &std::sync::Arc<crate::contract::JobSpec>,
    policy_digest: Option<String>,
    target_keys: &[crate::contract::TargetKey],
) {
    let unapproved = match &spec.policy.approved_plan_digest {
        Some(digest)
            if spec.operation == crate::contract::Operation::OpentofuApply
                && !emit.job.approved_plans.contains(digest) =>
        {
            Some(digest)
        }
        _ => None,
    };
    if let Some(digest) = unapproved {
        emit.push(
            attempt_id_for(spec.command_id, 1),
            &spec.job_id,
            EventBody::Rejected {
                command_id: spec.command_id,
                attempt_no: 1,
                tenant: spec.tenant.clone(),
                operation: spec.operation.as_str().to_owned(),
                category: FailureCategory::Policy,
                problems: vec![crate::contract::Problem::new(
                    "policy.approved_plan_digest",
                    format!(
                        "plan {digest} has no approval for tenant `{}`: an ApprovePlan command by one of the tenant's `opentofu.approvers` approves it (`POST /v1/attempts/<plan attempt>/approve`)",
                        spec.tenant
                    ),
                )],
                policy_digest,
            },
        );
        return;
    }
    emit.push(
        attempt_id_for(spec.command_id, 1),
        &spec.job_id,
        EventBody::Created {
            command_id: spec.command_id,
            attempt_no: 1,
            spec: std::sync::Arc::clone(spec),
            available_at: emit.now,
            previous_attempt_id: None,
            policy_digest,
            target_keys: target_keys.to_vec(),
        },
    );
}

/// What is asked of an approval, from the attempt it names.
pub struct ApprovalAsked<'a> {
    pub operation: &'a str,
    pub status: AttemptStatus,
    pub result_json: Option<&'a str>,
    /// The plan's `requested_by`.
    pub requester: &'a str,
    pub plan_digest: &'a str,
    pub approved_by: &'a str,
    /// The operator lets the tenant approve its own plans.
    pub self_approve: bool,
}

/// Why the approval may not be recorded, or `None`: the attempt is a
/// succeeded `opentofu.plan` whose result names `plan_digest`, and the
/// approver is not the plan's requester unless `self_approve`. The one
/// rule, for intake's decision and the execute API's answer.
pub fn approval_refusal(asked: &ApprovalAsked<'_>) -> Option<String> {
    if asked.operation != crate::contract::Operation::OpentofuPlan.as_str() {
        return Some(format!(
            "it is an `{}`, not an opentofu.plan",
            asked.operation
        ));
    }
    if asked.status != AttemptStatus::Succeeded {
        return Some(format!("it is {}, not succeeded", asked.status.as_str()));
    }
    let made = asked
        .result_json
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        .and_then(|result| result["plan"]["artifact"].as_str().map(str::to_owned));
    if made.as_deref() != Some(asked.plan_digest) {
        return Some(format!("its saved plan is not {}", asked.plan_digest));
    }
    if asked.requester == asked.approved_by && !asked.self_approve {
        return Some(format!(
            "`{}` requested the plan, and approves it too: a plan needs another's approval unless the operator's policy lets the tenant approve its own (`opentofu.self_approve`)",
            asked.approved_by
        ));
    }
    None
}

/// An approval of the saved plan of a succeeded `opentofu.plan` attempt of
/// `tenant` ([`approval_refusal`]). Approving again is a no-op.
fn decide_approve(
    emit: &mut Emitter<'_>,
    command_id: Uuid,
    plan_attempt_id: Uuid,
    plan_digest: &str,
    tenant: &str,
    approved_by: &str,
    self_approve: bool,
) -> Result<(), Rejection> {
    let attempt = emit
        .job
        .attempt(plan_attempt_id)
        .ok_or(Rejection::UnknownAttempt(plan_attempt_id))?;
    if attempt.tenant != tenant {
        // Said as if there were no such attempt: ids do not leak tenants.
        return Err(Rejection::UnknownAttempt(plan_attempt_id));
    }
    let asked = ApprovalAsked {
        operation: &attempt.operation,
        status: attempt.status,
        result_json: attempt.result_json.as_deref(),
        requester: attempt
            .spec
            .as_ref()
            .map(|spec| spec.requested_by.as_str())
            .unwrap_or_default(),
        plan_digest,
        approved_by,
        self_approve,
    };
    if let Some(reason) = approval_refusal(&asked) {
        return Err(Rejection::PlanNotApprovable {
            attempt_id: plan_attempt_id,
            reason,
        });
    }
    if attempt
        .plan_approval
        .as_ref()
        .is_some_and(|approval| approval.approved_by.iter().any(|who| who == approved_by))
    {
        return Ok(());
    }
    let job_id = attempt.job_id.clone();
    emit.push(
        plan_attempt_id,
        &job_id,
        EventBody::PlanApproved {
            command_id,
            plan_digest: plan_digest.to_owned(),
            approved_by: approved_by.to_owned(),
        },
    );
    Ok(())
}

/// A lease for a queued attempt whose backoff has passed: the job's next
/// epoch, for one heartbeat TTL.
fn decide_grant(
    emit: &mut Emitter<'_>,
    attempt_id: Uuid,
    runner_instance: &str,
) -> Result<(), Rejection> {
    let attempt = emit
        .job
        .attempt(attempt_id)
        .ok_or(Rejection::UnknownAttempt(attempt_id))?;
    if attempt.status != AttemptStatus::Queued {
        return Err(Rejection::NotQueued {
            attempt_id,
            status: attempt.status.as_str(),
        });
    }
    if emit.now < attempt.available_at {
        return Err(Rejection::NotYetAvailable {
            attempt_id,
            available_at: attempt.available_at,
        });
    }
    if runner_instance.trim().is_empty() {
        return Err(Rejection::NoRunnerInstance);
    }
    // Every key must have room (the holders as the store read them under
    // the keys' locks); a key with no count is not known to be free.
    for key in &attempt.target_keys {
        match emit.job.key_holders.get(&key.key) {
            None => {
                return Err(Rejection::TargetKeyUnread {
                    attempt_id,
                    key: key.key.clone(),
                })
            }
            Some(&holders) if holders >= key.limit => {
                return Err(Rejection::TargetKeyBusy {
                    attempt_id,
                    key: key.key.clone(),
                    holders,
                    limit: key.limit,
                })
            }
            Some(_) => {}
        }
    }
    let epoch = emit.job.max_epoch() + 1;
    let ttl = lease_ttl(attempt);
    let expires_at = emit.now.saturating_add(ttl);
    emit.push(
        attempt_id,
        &attempt.job_id,
        EventBody::LeaseGranted {
            lease_id: lease_id_for(attempt_id, epoch),
            epoch,
            runner_instance: runner_instance.to_owned(),
            expires_at,
        },
    );
    Ok(())
}

/// The outcome of an attempt's callback, recorded once, after its end.
fn decide_callback_outcome(
    emit: &mut Emitter<'_>,
    attempt_id: Uuid,
    input: &Input,
) -> Result<(), Rejection> {
    let Input::CallbackOutcome {
        url,
        delivered,
        attempts,
        http_status,
        error,
        idempotency_key,
        ..
    } = input
    else {
        return Ok(());
    };
    let attempt = emit
        .job
        .attempt(attempt_id)
        .ok_or(Rejection::UnknownAttempt(attempt_id))?;
    if !attempt.is_terminal() {
        return Err(Rejection::NotTerminal { attempt_id });
    }
    // Once per channel: the URL's outcome, the topic's.
    if attempt.callback_outcome(url).is_none() {
        emit.push(
            attempt_id,
            &attempt.job_id,
            EventBody::CallbackRecorded {
                url: url.clone(),
                delivered: *delivered,
                attempts: *attempts,
                http_status: *http_status,
                error: error.clone(),
                idempotency_key: idempotency_key.clone(),
            },
        );
    }
    Ok(())
}

/// A cancel: a queued attempt ends at once; a leased or running one gets a
/// cancel request with a grace deadline (the runner confirms, or the grace
/// timer decides); a second request changes nothing.
fn decide_cancel(
    emit: &mut Emitter<'_>,
    attempt_id: Uuid,
    reason: &str,
    requested_by: &str,
    grace: crate::contract::DurationMs,
) -> Result<(), Rejection> {
    let attempt = emit
        .job
        .attempt(attempt_id)
        .ok_or(Rejection::UnknownAttempt(attempt_id))?;
    match attempt.status {
        status if status.is_terminal() => {
            return Err(Rejection::AlreadyTerminal {
                attempt_id,
                status: status.as_str(),
            });
        }
        AttemptStatus::CancelRequested => {}
        AttemptStatus::Queued => finish(
            emit,
            attempt,
            Terminal {
                outcome: TerminalOutcome::Cancelled,
                category: Some(FailureCategory::Cancelled),
                message: format!("cancelled while queued by {requested_by}: {reason}"),
                result_json: None,
                timer: None,
                lease_revoked: false,
                outputs: Vec::new(),
            },
        ),
        _ => {
            let grace_deadline = emit.now.saturating_add(grace.as_i64());
            emit.push(
                attempt_id,
                &attempt.job_id,
                EventBody::CancelRequested {
                    reason: reason.to_owned(),
                    requested_by: requested_by.to_owned(),
                    grace_deadline,
                },
            );
        }
    }
    Ok(())
}

/// `Ok(Some(vec![]))` for a duplicate of the command that created the job.
fn check_new_job(
    job: &JobState,
    command_id: Uuid,
    job_id: &str,
) -> Result<Option<Vec<AttemptEvent>>, Rejection> {
    if let Some(owner) = job
        .command_owner
        .as_ref()
        .filter(|owner| owner.as_str() != job_id)
    {
        return Err(Rejection::CommandIdReused {
            command_id,
            owner_job_id: owner.clone(),
            job_id: job_id.to_owned(),
        });
    }
    match job.attempts.first() {
        Some(first) if first.command_id == command_id => Ok(Some(Vec::new())),
        Some(first) => Err(Rejection::JobIdTaken {
            job_id: job_id.to_owned(),
            existing_command_id: first.command_id,
        }),
        None => Ok(None),
    }
}

fn lease_ttl(attempt: &Attempt) -> i64 {
    attempt
        .spec
        .as_ref()
        .map_or(30_000, |spec| spec.timeouts.heartbeat.as_i64())
}

/// Whether `report` repeats a report of its lease that was applied: a
/// `started` once the attempt has started, a `finished` once the lease's
/// own report ended it (no timer did). An attempt has one lease, so the
/// lease names the report. A repeat decides nothing, however often it is
/// delivered and whatever happened since: it is not fenced, since nothing
/// was late.
pub fn repeats_an_applied_report(attempt: &Attempt, report: &RunnerReport) -> bool {
    let same_lease = attempt.lease.as_ref().is_some_and(|lease| {
        lease.epoch == report.lease_epoch && lease.runner_instance == report.runner_instance
    });
    same_lease
        && match report.body {
            ReportBody::Started => attempt.started_at.is_some(),
            ReportBody::Finished { .. } => attempt.is_terminal() && attempt.timer_fired.is_none(),
            ReportBody::Heartbeat { .. } | ReportBody::Progress { .. } => false,
        }
}

/// Whether the state alone makes every delivery of `report` after this one
/// decide nothing, so that it needs no inbox row (docs/ARCHITECTURE.md,
/// "The consistency model"): a `started` or `finished` accepted now (its
/// next delivery repeats it) or already a repeat. A heartbeat or progress
/// report is not: a heartbeat delivered again could extend its lease again.
pub fn dedupes_by_state(attempt: &Attempt, report: &RunnerReport) -> bool {
    matches!(
        report.body,
        ReportBody::Started | ReportBody::Finished { .. }
    ) && (fence_reason(attempt, report).is_none() || repeats_an_applied_report(attempt, report))
}

fn decide_report(emit: &mut Emitter<'_>, report: &RunnerReport) -> Result<(), Rejection> {
    let attempt = emit
        .job
        .attempt(report.attempt_id)
        .ok_or(Rejection::UnknownAttempt(report.attempt_id))?;
    if repeats_an_applied_report(attempt, report) {
        return Ok(());
    }
    if let Some(reason) = fence_reason(attempt, report) {
        emit.push(
            attempt.attempt_id,
            &attempt.job_id,
            EventBody::ReportFenced {
                report_kind: report.body.kind().to_owned(),
                report_epoch: report.lease_epoch,
                current_epoch: attempt.lease.as_ref().map(|lease| lease.epoch),
                runner_instance: report.runner_instance.clone(),
                reason,
            },
        );
        return Ok(());
    }
    let epoch = report.lease_epoch;
    match &report.body {
        ReportBody::Started => {
            if attempt.started_at.is_none() {
                emit.push(
                    attempt.attempt_id,
                    &attempt.job_id,
                    EventBody::Started {
                        epoch,
                        runner_instance: report.runner_instance.clone(),
                    },
                );
            }
        }
        ReportBody::Heartbeat { progress, percent } => {
            if let Some(message) = progress {
                push_progress(emit, attempt, epoch, message, *percent);
            }
            // Persist a new deadline only when half the TTL is used up: most
            // heartbeats append nothing. A heartbeat after expiry extends
            // nothing either: the runner has fenced itself by then, and the
            // sweeper ends the lease.
            let ttl = lease_ttl(attempt);
            if let Some(lease) = attempt.active_lease() {
                let remaining = lease.expires_at - emit.now;
                if remaining > 0 && remaining < ttl / 2 {
                    emit.push(
                        attempt.attempt_id,
                        &attempt.job_id,
                        EventBody::LeaseExtended {
                            epoch,
                            expires_at: emit.now.saturating_add(ttl),
                        },
                    );
                }
            }
        }
        ReportBody::Progress { message, percent } => {
            push_progress(emit, attempt, epoch, message, *percent)
        }
        ReportBody::Finished {
            outcome,
            category,
            message,
            result_json,
            outputs,
        } => {
            let terminal = match (outcome, category) {
                (ReportedOutcome::Succeeded, _) => (TerminalOutcome::Succeeded, None),
                (ReportedOutcome::Cancelled, _)
                | (ReportedOutcome::Failed, Some(FailureCategory::Cancelled)) => {
                    (TerminalOutcome::Cancelled, Some(FailureCategory::Cancelled))
                }
                (ReportedOutcome::Failed, Some(FailureCategory::LeaseLost)) => lease_lost(attempt),
                (ReportedOutcome::Failed, category) => (
                    TerminalOutcome::Failed,
                    Some(category.unwrap_or(FailureCategory::RunnerError)),
                ),
            };
            finish(
                emit,
                attempt,
                Terminal {
                    outcome: terminal.0,
                    category: terminal.1,
                    message: message.clone(),
                    result_json: result_json.clone(),
                    timer: None,
                    lease_revoked: false,
                    outputs: outputs.clone(),
                },
            );
        }
    }
    Ok(())
}

/// Why a report cannot be accepted, or `None` when it carries the current
/// lease. Fencing is by epoch and instance, never by clock.
fn fence_reason(attempt: &Attempt, report: &RunnerReport) -> Option<String> {
    super::fencing::lease_refusal(
        attempt.is_terminal().then(|| attempt.status.as_str()),
        attempt
            .lease
            .as_ref()
            .map(|lease| super::fencing::LeaseFacts {
                epoch: lease.epoch,
                runner_instance: &lease.runner_instance,
                active: lease.active,
                expires_at: lease.expires_at,
            }),
        report.lease_epoch,
        &report.runner_instance,
        None,
    )
}

fn push_progress(
    emit: &mut Emitter<'_>,
    attempt: &Attempt,
    epoch: u64,
    message: &str,
    percent: Option<u8>,
) {
    let percent = percent.map(|value| value.min(100));
    let unchanged =
        attempt.progress.as_deref() == Some(message) && attempt.progress_percent == percent;
    if !unchanged {
        emit.push(
            attempt.attempt_id,
            &attempt.job_id,
            EventBody::Progress {
                epoch,
                message: message.to_owned(),
                percent,
            },
        );
    }
}

/// A lost lease: `outcome_unknown` for a started operation that is not
/// idempotent (nobody knows whether it finished), else a retryable failure.
fn lease_lost(attempt: &Attempt) -> (TerminalOutcome, Option<FailureCategory>) {
    let idempotent = attempt.is_idempotent();
    if attempt.started_at.is_some() && !idempotent {
        (
            TerminalOutcome::OutcomeUnknown,
            Some(FailureCategory::LeaseLost),
        )
    } else {
        (TerminalOutcome::Failed, Some(FailureCategory::LeaseLost))
    }
}

fn decide_timer(emit: &mut Emitter<'_>, attempt: &Attempt, timer: TimerKind) {
    let due = match attempt.deadline(timer) {
        Some(due) if due <= emit.now => due,
        // Not armed (any more) or not due: firing again is a no-op.
        _ => return,
    };
    let lease_revoked = attempt.active_lease().is_some();
    let label = |name: &str| {
        let configured = attempt.spec.as_ref().map(|spec| match timer {
            TimerKind::ScheduleToStart => spec.timeouts.schedule_to_start.to_string(),
            TimerKind::StartToClose => spec.timeouts.start_to_close.to_string(),
            TimerKind::ScheduleToClose => spec.timeouts.schedule_to_close.to_string(),
            TimerKind::Heartbeat => spec.timeouts.heartbeat.to_string(),
            TimerKind::CancelGrace => String::new(),
        });
        format!(
            "{name} ({}) passed at {due}",
            configured.unwrap_or_default()
        )
    };
    let terminal = if attempt.status == AttemptStatus::CancelRequested {
        let idempotent = attempt.is_idempotent();
        if attempt.started_at.is_some() && !idempotent {
            Terminal {
                outcome: TerminalOutcome::OutcomeUnknown,
                category: Some(FailureCategory::Cancelled),
                message: format!(
                    "cancel requested, but the runner did not confirm before {}: the started operation may have completed",
                    timer.as_str()
                ),
                result_json: None,
                timer: Some(timer),
                lease_revoked,
                outputs: Vec::new(),
            }
        } else {
            Terminal {
                outcome: TerminalOutcome::Cancelled,
                category: Some(FailureCategory::Cancelled),
                message: format!(
                    "cancelled: the runner did not confirm before {}; the lease is revoked",
                    timer.as_str()
                ),
                result_json: None,
                timer: Some(timer),
                lease_revoked,
                outputs: Vec::new(),
            }
        }
    } else {
        match timer {
            TimerKind::ScheduleToStart => Terminal {
                outcome: TerminalOutcome::TimedOut,
                category: Some(FailureCategory::Timeout),
                message: format!(
                    "no runner started the attempt: {}",
                    label("schedule_to_start")
                ),
                result_json: None,
                timer: Some(timer),
                lease_revoked,
                outputs: Vec::new(),
            },
            TimerKind::StartToClose | TimerKind::ScheduleToClose => Terminal {
                outcome: TerminalOutcome::TimedOut,
                category: Some(FailureCategory::Timeout),
                message: label(timer.as_str()),
                result_json: None,
                timer: Some(timer),
                lease_revoked,
                outputs: Vec::new(),
            },
            TimerKind::Heartbeat => {
                let (outcome, category) = lease_lost(attempt);
                let holder = attempt
                    .active_lease()
                    .map(|lease| {
                        format!("lease epoch {} on {}", lease.epoch, lease.runner_instance)
                    })
                    .unwrap_or_default();
                Terminal {
                    outcome,
                    category,
                    message: format!(
                        "{holder} expired without a heartbeat: {}",
                        label("heartbeat")
                    ),
                    result_json: None,
                    timer: Some(timer),
                    lease_revoked,
                    outputs: Vec::new(),
                }
            }
            // Only armed while a cancel is requested, handled above.
            TimerKind::CancelGrace => return,
        }
    };
    finish(emit, attempt, terminal);
}

struct Terminal {
    outcome: TerminalOutcome,
    category: Option<FailureCategory>,
    message: String,
    result_json: Option<String>,
    timer: Option<TimerKind>,
    lease_revoked: bool,
    /// What the runner stored, as its final report listed it.
    outputs: Vec<crate::contract::OutputArtifact>,
}

/// Emits the terminal event and, for a retryable infra failure within the
/// policy, the next attempt of the job.
fn finish(emit: &mut Emitter<'_>, attempt: &Attempt, terminal: Terminal) {
    let retry_policy = attempt.spec.as_ref().map(|spec| spec.retry);
    let retryable = terminal.outcome == TerminalOutcome::Failed
        && terminal.category.is_some_and(FailureCategory::is_infra)
        && attempt.cancel.is_none()
        && retry_policy.is_some_and(|policy| attempt.attempt_no < policy.max_attempts);
    let next_attempt_no = attempt.attempt_no + 1;
    let retry_attempt_id = retryable.then(|| attempt_id_for(attempt.command_id, next_attempt_no));
    emit.push(
        attempt.attempt_id,
        &attempt.job_id,
        EventBody::Finished {
            outcome: terminal.outcome,
            category: terminal.category,
            message: terminal.message,
            result_json: terminal.result_json,
            timer: terminal.timer,
            lease_revoked: terminal.lease_revoked,
            retry_attempt_id,
            outputs: terminal.outputs,
        },
    );
    if let (Some(next_attempt_id), Some(spec), Some(policy)) =
        (retry_attempt_id, &attempt.spec, retry_policy)
    {
        let backoff = policy.backoff_before(next_attempt_no);
        emit.push(
            next_attempt_id,
            &attempt.job_id,
            EventBody::Created {
                command_id: attempt.command_id,
                attempt_no: next_attempt_no,
                spec: spec.clone(),
                available_at: emit.now.saturating_add(backoff.as_i64()),
                previous_attempt_id: Some(attempt.attempt_id),
                // A retry runs under the policy that admitted the job, with
                // the keys and limits it recorded.
                policy_digest: attempt.policy_digest.clone(),
                target_keys: attempt.target_keys.clone(),
            },
        );
    }
}
