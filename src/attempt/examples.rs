//! One example per rule of `decide`, each a short story told with real
//! inputs: when a rule is broken, the test named after it fails (the
//! property tests then say what else it broke).

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{
    attempt_id_for, decide, dedupes_by_state, repeats_an_applied_report, JobState, Rejection,
};
use crate::contract::{
    AttemptEvent, AttemptStatus, DurationMs, EventBody, FailureCategory, Input, JobSpec, Operation,
    ReportBody, ReportedOutcome, RunnerReport, TargetKey, TerminalOutcome, TimerKind,
};

const T0: i64 = 1_800_000_000_000;
const TTL: i64 = 10_000;
/// The digest of the operator policy that admitted the story's job.
const POLICY: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000001";

fn spec(operation: Operation, max_attempts: u32) -> JobSpec {
    JobSpec {
        command_id: Uuid::from_u128(7),
        job_id: "job-7".into(),
        tenant: "team-a".into(),
        requested_by: "examples".into(),
        operation,
        inputs: serde_json::json!({}),
        runner_requirements: Default::default(),
        targets: vec![],
        secret_refs: vec![],
        timeouts: crate::contract::Timeouts {
            schedule_to_start: DurationMs(20_000),
            start_to_close: DurationMs(60_000),
            heartbeat: DurationMs(TTL as u64),
            schedule_to_close: DurationMs(120_000),
        },
        retry: crate::contract::RetryPolicy {
            max_attempts,
            initial_backoff: DurationMs(1_000),
            max_backoff: DurationMs(4_000),
        },
        policy: crate::contract::PolicyFlags {
            explicit_command: true,
            ..Default::default()
        },
        callback: None,
        trace: None,
    }
}

/// A job and the attempts it has, driven input by input.
struct Story {
    job: JobState,
    now: i64,
}

impl Story {
    fn new(operation: Operation, max_attempts: u32) -> Self {
        let mut story = Story {
            job: JobState::default(),
            now: T0,
        };
        story.ok(&Input::Execute {
            policy_digest: Some(POLICY.into()),
            spec: std::sync::Arc::new(spec(operation, max_attempts)),
            target_keys: Vec::new(),
        });
        story
    }

    /// A job whose attempts hold `node:web-1` (limit 1) while leased.
    fn keyed(operation: Operation, max_attempts: u32) -> Self {
        let mut story = Story {
            job: JobState::default(),
            now: T0,
        };
        story.ok(&Input::Execute {
            policy_digest: Some(POLICY.into()),
            spec: std::sync::Arc::new(spec(operation, max_attempts)),
            target_keys: vec![TargetKey {
                key: "node:web-1".into(),
                limit: 1,
            }],
        });
        story
    }

    fn attempt_id(&self, number: u32) -> Uuid {
        attempt_id_for(Uuid::from_u128(7), number)
    }

    fn decide(&mut self, input: &Input) -> Result<Vec<AttemptEvent>, Rejection> {
        let events = decide(&self.job, input, self.now)?;
        self.job.apply_all(&events).unwrap();
        Ok(events)
    }

    fn ok(&mut self, input: &Input) -> Vec<AttemptEvent> {
        self.decide(input).unwrap()
    }

    fn grant(&mut self, number: u32, instance: &str) {
        self.ok(&Input::Grant {
            attempt_id: self.attempt_id(number),
            runner_instance: instance.into(),
        });
    }

    fn report(
        &mut self,
        number: u32,
        epoch: u64,
        instance: &str,
        body: ReportBody,
    ) -> Vec<AttemptEvent> {
        self.ok(&Input::Report(RunnerReport {
            attempt_id: self.attempt_id(number),
            lease_epoch: epoch,
            runner_instance: instance.into(),
            body,
        }))
    }

    fn timer(&mut self, number: u32, timer: TimerKind) -> Vec<AttemptEvent> {
        self.ok(&Input::TimerFired {
            attempt_id: self.attempt_id(number),
            timer,
        })
    }

    fn status(&self, number: u32) -> AttemptStatus {
        self.job.attempt(self.attempt_id(number)).unwrap().status
    }
}

fn kinds(events: &[AttemptEvent]) -> Vec<&'static str> {
    events.iter().map(|event| event.body.kind()).collect()
}

fn heartbeat() -> ReportBody {
    ReportBody::Heartbeat {
        progress: None,
        percent: None,
    }
}

fn failed(category: FailureCategory) -> ReportBody {
    ReportBody::Finished {
        outcome: ReportedOutcome::Failed,
        category: Some(category),
        message: "no".into(),
        result_json: None,
        outputs: Vec::new(),
    }
}

#[test]
fn a_heartbeat_extends_the_lease_only_once_half_its_ttl_is_used() {
    let mut story = Story::new(Operation::VerifyHttpEndpoint, 1);
    story.grant(1, "r-1");
    story.report(1, 1, "r-1", ReportBody::Started);
    story.now += TTL / 2 - 1;
    assert!(
        story.report(1, 1, "r-1", heartbeat()).is_empty(),
        "before half the TTL: nothing appended"
    );
    story.now += 2;
    let extended = story.report(1, 1, "r-1", heartbeat());
    assert_eq!(kinds(&extended), ["lease_extended"]);
    assert!(
        matches!(extended[0].body, EventBody::LeaseExtended { expires_at, .. } if expires_at == story.now + TTL)
    );
    assert!(
        story.report(1, 1, "r-1", heartbeat()).is_empty(),
        "just extended"
    );
}

#[test]
fn a_heartbeat_extends_nothing_at_exactly_half_the_ttl_or_after_expiry() {
    let mut story = Story::new(Operation::VerifyHttpEndpoint, 1);
    story.grant(1, "r-1");
    story.report(1, 1, "r-1", ReportBody::Started);
    story.now += TTL / 2;
    assert!(
        story.report(1, 1, "r-1", heartbeat()).is_empty(),
        "exactly half the TTL left: not yet"
    );
    // Past the deadline the runner has fenced itself; a late heartbeat
    // must not revive the lease the sweeper is about to end.
    story.now += TTL;
    assert!(
        story.report(1, 1, "r-1", heartbeat()).is_empty(),
        "after expiry: nothing extended"
    );
}

#[test]
fn reports_under_another_epoch_or_from_another_instance_are_fenced() {
    let mut story = Story::new(Operation::VerifyHttpEndpoint, 1);
    story.grant(1, "r-1");
    for (epoch, instance) in [(2, "r-1"), (0, "r-1"), (1, "r-2")] {
        let events = story.report(1, epoch, instance, ReportBody::Started);
        assert_eq!(
            kinds(&events),
            ["report_fenced"],
            "epoch {epoch} from {instance}"
        );
    }
    assert_eq!(
        story.status(1),
        AttemptStatus::Leased,
        "fenced reports change nothing else"
    );
    assert_eq!(
        kinds(&story.report(1, 1, "r-1", ReportBody::Started)),
        ["started"]
    );
}

#[test]
fn a_repeated_started_or_finished_of_the_lease_decides_nothing_and_needs_no_inbox_row() {
    let mut story = Story::new(Operation::VerifyHttpEndpoint, 1);
    story.grant(1, "r-1");
    let started = RunnerReport {
        attempt_id: story.attempt_id(1),
        lease_epoch: 1,
        runner_instance: "r-1".into(),
        body: ReportBody::Started,
    };
    let finished = RunnerReport {
        body: failed(FailureCategory::VerificationFailed),
        ..started.clone()
    };
    let attempt = |story: &Story| story.job.attempt(story.attempt_id(1)).unwrap().clone();
    // Accepted now, so the state will dedupe its next delivery.
    assert!(dedupes_by_state(&attempt(&story), &started));
    assert_eq!(
        kinds(&story.ok(&Input::Report(started.clone()))),
        ["started"]
    );
    assert!(story.ok(&Input::Report(started.clone())).is_empty());
    assert!(dedupes_by_state(&attempt(&story), &finished));
    assert_eq!(
        kinds(&story.ok(&Input::Report(finished.clone()))),
        ["finished"]
    );
    // Delivered again after the end: repeats, not late reports.
    for report in [&started, &finished] {
        assert!(repeats_an_applied_report(&attempt(&story), report));
        assert!(dedupes_by_state(&attempt(&story), report));
        assert!(story.ok(&Input::Report(report.clone())).is_empty());
    }
    // A heartbeat is not deduped by the state; a report of another lease
    // after the end is fenced, and needs its inbox row.
    let heartbeat = RunnerReport {
        body: heartbeat(),
        ..started.clone()
    };
    assert!(!dedupes_by_state(&attempt(&story), &heartbeat));
    let stale = RunnerReport {
        lease_epoch: 2,
        ..finished.clone()
    };
    assert!(!dedupes_by_state(&attempt(&story), &stale));
    assert_eq!(kinds(&story.ok(&Input::Report(stale))), ["report_fenced"]);
}

#[test]
fn a_finished_report_after_a_timer_ended_the_attempt_is_fenced_every_time() {
    let mut story = Story::new(Operation::VerifyHttpEndpoint, 1);
    story.grant(1, "r-1");
    story.report(1, 1, "r-1", ReportBody::Started);
    story.now += TTL * 2;
    assert_eq!(kinds(&story.timer(1, TimerKind::Heartbeat)), ["finished"]);
    let late = RunnerReport {
        attempt_id: story.attempt_id(1),
        lease_epoch: 1,
        runner_instance: "r-1".into(),
        body: failed(FailureCategory::VerificationFailed),
    };
    let attempt = story.job.attempt(story.attempt_id(1)).unwrap().clone();
    // Late, not a repeat: fenced, and its inbox row keeps a redelivery from
    // being fenced twice.
    assert!(!repeats_an_applied_report(&attempt, &late));
    assert!(!dedupes_by_state(&attempt, &late));
    assert_eq!(kinds(&story.ok(&Input::Report(late))), ["report_fenced"]);
}

#[test]
fn a_lost_lease_of_a_started_non_idempotent_operation_is_outcome_unknown() {
    for (operation, started, expected) in [
        (
            Operation::SshCommandRun,
            true,
            TerminalOutcome::OutcomeUnknown,
        ),
        (Operation::SshCommandRun, false, TerminalOutcome::Failed),
        (Operation::VerifyHttpEndpoint, true, TerminalOutcome::Failed),
    ] {
        let mut story = Story::new(operation, 1);
        story.grant(1, "r-1");
        if started {
            story.report(1, 1, "r-1", ReportBody::Started);
        }
        story.now += TTL;
        let events = story.timer(1, TimerKind::Heartbeat);
        assert!(
            matches!(&events[0].body, EventBody::Finished { outcome, category: Some(FailureCategory::LeaseLost), .. } if *outcome == expected),
            "{operation:?} started={started}: {events:?}"
        );
    }
}

#[test]
fn only_infrastructure_failures_are_retried_with_backoff() {
    for (category, retried) in [
        (FailureCategory::Infrastructure, true),
        (FailureCategory::LeaseLost, true),
        (FailureCategory::VerificationFailed, false),
        (FailureCategory::RunnerError, false),
        (FailureCategory::Contract, false),
    ] {
        let mut story = Story::new(Operation::VerifyHttpEndpoint, 3);
        story.grant(1, "r-1");
        story.report(1, 1, "r-1", ReportBody::Started);
        let events = story.report(1, 1, "r-1", failed(category));
        if retried {
            assert_eq!(kinds(&events), ["finished", "created"], "{category:?}");
            let EventBody::Created {
                attempt_no,
                available_at,
                policy_digest,
                ..
            } = &events[1].body
            else {
                unreachable!()
            };
            assert_eq!(
                (*attempt_no, *available_at),
                (2, story.now + 1_000),
                "backoff before attempt 2"
            );
            assert_eq!(
                policy_digest.as_deref(),
                Some(POLICY),
                "a retry runs under the policy that admitted the job"
            );
            // Not placeable before its backoff.
            assert!(matches!(
                story.decide(&Input::Grant {
                    attempt_id: story.attempt_id(2),
                    runner_instance: "r-2".into()
                }),
                Err(Rejection::NotYetAvailable { .. })
            ));
        } else {
            assert_eq!(kinds(&events), ["finished"], "{category:?} is not retried");
        }
    }
    // And not past the policy: the last allowed attempt is final.
    let mut story = Story::new(Operation::VerifyHttpEndpoint, 1);
    story.grant(1, "r-1");
    assert_eq!(
        kinds(&story.report(1, 1, "r-1", failed(FailureCategory::Infrastructure))),
        ["finished"]
    );
}

#[test]
fn a_cancel_waits_its_grace_then_ends_by_what_was_started() {
    // Confirmed in time: cancelled.
    let mut story = Story::new(Operation::SshCommandRun, 1);
    story.grant(1, "r-1");
    story.report(1, 1, "r-1", ReportBody::Started);
    let requested = story.ok(&Input::Cancel {
        attempt_id: story.attempt_id(1),
        reason: "stop".into(),
        requested_by: "cp".into(),
        grace: DurationMs(5_000),
    });
    assert!(
        matches!(requested[0].body, EventBody::CancelRequested { grace_deadline, .. } if grace_deadline == T0 + 5_000)
    );
    let confirmed = story.report(
        1,
        1,
        "r-1",
        ReportBody::Finished {
            outcome: ReportedOutcome::Cancelled,
            category: None,
            message: "stopped".into(),
            result_json: None,
            outputs: Vec::new(),
        },
    );
    assert!(matches!(
        confirmed[0].body,
        EventBody::Finished {
            outcome: TerminalOutcome::Cancelled,
            ..
        }
    ));
    // Not confirmed: a started non-idempotent operation is outcome_unknown
    // at the grace deadline; an idempotent one is cancelled.
    for (operation, expected) in [
        (Operation::SshCommandRun, TerminalOutcome::OutcomeUnknown),
        (Operation::VerifyHttpEndpoint, TerminalOutcome::Cancelled),
    ] {
        let mut story = Story::new(operation, 1);
        story.grant(1, "r-1");
        story.report(1, 1, "r-1", ReportBody::Started);
        story.ok(&Input::Cancel {
            attempt_id: story.attempt_id(1),
            reason: "stop".into(),
            requested_by: "cp".into(),
            grace: DurationMs(5_000),
        });
        story.now += 4_999;
        assert!(
            story.timer(1, TimerKind::CancelGrace).is_empty(),
            "not due yet"
        );
        story.now += 1;
        let ended = story.timer(1, TimerKind::CancelGrace);
        assert!(
            matches!(&ended[0].body, EventBody::Finished { outcome, lease_revoked: true, .. } if *outcome == expected),
            "{operation:?}: {ended:?}"
        );
    }
    // Leased but never started: nothing can have run, so even a
    // non-idempotent operation ends `cancelled` at the grace deadline.
    let mut story = Story::new(Operation::SshCommandRun, 1);
    story.grant(1, "r-1");
    story.ok(&Input::Cancel {
        attempt_id: story.attempt_id(1),
        reason: "stop".into(),
        requested_by: "cp".into(),
        grace: DurationMs(5_000),
    });
    story.now += 5_000;
    let ended = story.timer(1, TimerKind::CancelGrace);
    assert!(
        matches!(
            &ended[0].body,
            EventBody::Finished {
                outcome: TerminalOutcome::Cancelled,
                ..
            }
        ),
        "never started: {ended:?}"
    );
    // A queued attempt is cancelled at once.
    let mut story = Story::new(Operation::SshCommandRun, 1);
    let events = story.ok(&Input::Cancel {
        attempt_id: story.attempt_id(1),
        reason: "stop".into(),
        requested_by: "cp".into(),
        grace: DurationMs(5_000),
    });
    assert!(matches!(
        events[0].body,
        EventBody::Finished {
            outcome: TerminalOutcome::Cancelled,
            ..
        }
    ));
}

#[test]
fn a_timer_fires_once_and_only_when_due() {
    let mut story = Story::new(Operation::VerifyHttpEndpoint, 1);
    story.now += 19_999;
    assert!(
        story.timer(1, TimerKind::ScheduleToStart).is_empty(),
        "not due"
    );
    story.now += 1;
    assert_eq!(
        kinds(&story.timer(1, TimerKind::ScheduleToStart)),
        ["finished"]
    );
    assert!(
        story.timer(1, TimerKind::ScheduleToStart).is_empty(),
        "fired twice is fired once"
    );
    assert!(
        story.timer(1, TimerKind::ScheduleToClose).is_empty(),
        "an ended attempt arms nothing"
    );
    assert_eq!(story.status(1), AttemptStatus::TimedOut);
}

#[test]
fn a_command_id_makes_one_job_and_a_job_id_belongs_to_one_command() {
    let mut story = Story::new(Operation::VerifyHttpEndpoint, 1);
    let again = story.ok(&Input::Execute {
        policy_digest: None,
        spec: std::sync::Arc::new(spec(Operation::VerifyHttpEndpoint, 1)),
        target_keys: Vec::new(),
    });
    assert!(again.is_empty(), "the same command again is a no-op");
    let mut other = spec(Operation::VerifyHttpEndpoint, 1);
    other.command_id = Uuid::from_u128(8);
    assert!(matches!(
        story.decide(&Input::Execute {
            policy_digest: None,
            spec: std::sync::Arc::new(other),
            target_keys: Vec::new(),
        }),
        Err(Rejection::JobIdTaken { .. })
    ));
}

#[test]
fn the_first_event_records_the_policy_that_admitted_or_refused_the_job() {
    let story = Story::new(Operation::VerifyHttpEndpoint, 1);
    let attempt = story.job.attempt(story.attempt_id(1)).unwrap();
    assert_eq!(attempt.policy_digest.as_deref(), Some(POLICY));
    let refused = decide(
        &JobState::default(),
        &Input::ExecuteInvalid {
            policy_digest: Some(POLICY.into()),
            command_id: Uuid::from_u128(9),
            job_id: "job-9".into(),
            tenant: "team-a".into(),
            operation: "helm.install".into(),
            category: FailureCategory::Policy,
            problems: vec![],
        },
        T0,
    )
    .unwrap();
    assert!(matches!(
        &refused[0].body,
        EventBody::Rejected { policy_digest: Some(digest), .. } if digest == POLICY
    ));
}

#[test]
fn a_grant_needs_room_on_every_key_as_the_store_read_it() {
    let mut story = Story::keyed(Operation::SshCommandRun, 2);
    let grant = Input::Grant {
        attempt_id: story.attempt_id(1),
        runner_instance: "r-1".into(),
    };
    assert!(
        matches!(story.decide(&grant), Err(Rejection::TargetKeyUnread { key, .. }) if key == "node:web-1"),
        "holders nobody read are not known to be free"
    );
    story.job.key_holders = BTreeMap::from([("node:web-1".to_owned(), 1)]);
    assert!(matches!(
        story.decide(&grant),
        Err(Rejection::TargetKeyBusy {
            holders: 1,
            limit: 1,
            ..
        })
    ));
    story.job.key_holders = BTreeMap::from([("node:web-1".to_owned(), 0)]);
    assert_eq!(kinds(&story.ok(&grant)), vec!["lease_granted"]);
    assert!(story.job.attempt(story.attempt_id(1)).unwrap().holds_keys());
    // The retry after an infrastructure failure holds the same key.
    story.report(1, 1, "r-1", failed(FailureCategory::Infrastructure));
    let retry = story.job.attempt(story.attempt_id(2)).unwrap();
    assert_eq!(retry.target_keys, story.job.attempts[0].target_keys);
    assert!(
        !story.job.attempts[0].holds_keys(),
        "an ended attempt holds nothing"
    );
}

#[test]
fn a_plan_is_approved_by_another_and_only_an_approved_plan_is_applied() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let mut story = Story::new(Operation::OpentofuPlan, 1);
    story.grant(1, "tofu-1");
    story.report(1, 1, "tofu-1", ReportBody::Started);
    story.report(
        1,
        1,
        "tofu-1",
        ReportBody::Finished {
            outcome: ReportedOutcome::Succeeded,
            category: None,
            message: "planned".into(),
            result_json: Some(serde_json::json!({"plan": {"artifact": digest}}).to_string()),
            outputs: Vec::new(),
        },
    );
    let approve = |approved_by: &str, plan_digest: &str, tenant: &str, self_approve: bool| {
        Input::ApprovePlan {
            command_id: Uuid::from_u128(90),
            plan_attempt_id: attempt_id_for(Uuid::from_u128(7), 1),
            plan_digest: plan_digest.into(),
            tenant: tenant.into(),
            approved_by: approved_by.into(),
            self_approve,
        }
    };
    // The plan's own requester: four eyes, unless the policy allows it.
    assert!(matches!(
        story.decide(&approve("examples", &digest, "team-a", false)),
        Err(Rejection::PlanNotApprovable { .. })
    ));
    // Another plan than the attempt saved, or another tenant's attempt.
    let other = format!("sha256:{}", "cd".repeat(32));
    assert!(matches!(
        story.decide(&approve("reviewer", &other, "team-a", false)),
        Err(Rejection::PlanNotApprovable { .. })
    ));
    assert!(matches!(
        story.decide(&approve("reviewer", &digest, "team-b", false)),
        Err(Rejection::UnknownAttempt(_))
    ));
    let events = story.ok(&approve("reviewer", &digest, "team-a", false));
    assert_eq!(kinds(&events), ["plan_approved"]);
    assert!(story
        .ok(&approve("reviewer", &digest, "team-a", false))
        .is_empty());
    let self_approved = story.ok(&approve("examples", &digest, "team-a", true));
    assert_eq!(kinds(&self_approved), ["plan_approved"]);
    let attempt = story.job.attempt(story.attempt_id(1)).unwrap();
    assert_eq!(attempt.status, AttemptStatus::Succeeded);
    assert_eq!(
        attempt.plan_approval.as_ref().unwrap().approved_by,
        ["reviewer", "examples"]
    );

    // An apply naming the digest: rejected (policy) without an approval
    // of its tenant in view, created with one.
    let mut apply = spec(Operation::OpentofuApply, 1);
    apply.command_id = Uuid::from_u128(8);
    apply.job_id = "apply-8".into();
    apply.policy.approved_plan_digest = Some(digest.clone());
    let execute = Input::Execute {
        policy_digest: Some(POLICY.into()),
        spec: std::sync::Arc::new(apply),
        target_keys: Vec::new(),
    };
    let mut job = JobState::default();
    let refused = decide(&job, &execute, T0).unwrap();
    let EventBody::Rejected {
        category, problems, ..
    } = &refused[0].body
    else {
        panic!("{refused:?}")
    };
    assert_eq!(*category, FailureCategory::Policy);
    assert_eq!(problems[0].path, "policy.approved_plan_digest");
    job.approved_plans.insert(digest);
    assert_eq!(kinds(&decide(&job, &execute, T0).unwrap()), ["created"]);
}
