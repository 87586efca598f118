//! Random input sequences against the state machine. Every step checks the
//! The invariants 1–3 of docs/ARCHITECTURE.md on what `decide` emitted, and at the end folding
//! the emitted events with `apply` must equal the live state.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use uuid::Uuid;

use super::{apply, decide, rebuild, Attempt, JobState};
use crate::contract::{
    AttemptEvent, DurationMs, EventBody, FailureCategory, Input, JobSpec, Operation, ReportBody,
    ReportedOutcome, RunnerReport, TargetKey, TerminalOutcome, TimerKind,
};

const COMMANDS: u128 = 4;
/// The one target key keyed attempts share, across jobs.
const SHARED_KEY: &str = "node:shared";
const JOBS: usize = 3;
const INSTANCES: [&str; 3] = ["runner-a", "runner-b", "runner-c"];
const OPERATIONS: [Operation; 3] = [
    Operation::VerifyHttpEndpoint,
    Operation::SshCommandRun,
    Operation::OpentofuApply,
];

#[derive(Clone, Debug)]
enum Action {
    Execute {
        command: u128,
        job: usize,
        operation: usize,
        max_attempts: u32,
        invalid: bool,
        /// Holds the shared key when leased (limit 1 or 2 by command).
        keyed: bool,
    },
    Grant {
        job: usize,
        instance: usize,
        /// Whether the store read the key's holders (a grant without them
        /// must be refused).
        read_keys: bool,
    },
    Report {
        job: usize,
        older: bool,
        epoch_shift: i8,
        instance: usize,
        kind: u8,
        category: usize,
    },
    Timer {
        job: usize,
        older: bool,
        timer: usize,
    },
    Cancel {
        job: usize,
        older: bool,
    },
    Advance {
        millis: i64,
    },
}

/// An output artifact of `attempt_id`, as a runner lists it.
fn output(attempt_id: Uuid) -> crate::contract::OutputArtifact {
    let sha256 = "d".repeat(64);
    crate::contract::OutputArtifact {
        key: crate::contract::outputs::output_key(attempt_id, &sha256, "out.txt"),
        name: "out.txt".into(),
        class: crate::contract::RetentionClass::Evidence,
        media_type: "text/plain".into(),
        size: 3,
        sha256,
    }
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0..COMMANDS, 0..JOBS, 0..OPERATIONS.len(), 1u32..4, prop::bool::weighted(0.1), prop::bool::weighted(0.6)).prop_map(
            |(command, job, operation, max_attempts, invalid, keyed)| Action::Execute { command, job, operation, max_attempts, invalid, keyed }
        ),
        3 => (0..JOBS, 0..INSTANCES.len(), prop::bool::weighted(0.9)).prop_map(|(job, instance, read_keys)| Action::Grant { job, instance, read_keys }),
        6 => (0..JOBS, prop::bool::weighted(0.15), prop_oneof![6 => Just(0i8), 1 => Just(-1i8), 1 => Just(1i8)], 0..INSTANCES.len(), 0u8..6, 0..FailureCategory::ALL.len())
            .prop_map(|(job, older, epoch_shift, instance, kind, category)| Action::Report { job, older, epoch_shift, instance, kind, category }),
        3 => (0..JOBS, prop::bool::weighted(0.15), 0..TimerKind::ALL.len()).prop_map(|(job, older, timer)| Action::Timer { job, older, timer }),
        1 => (0..JOBS, prop::bool::weighted(0.2)).prop_map(|(job, older)| Action::Cancel { job, older }),
        3 => (1i64..40_000).prop_map(|millis| Action::Advance { millis }),
    ]
}

fn spec(command: u128, job: usize, operation: Operation, max_attempts: u32) -> JobSpec {
    let policy = crate::contract::PolicyFlags {
        explicit_command: true,
        ..Default::default()
    };
    JobSpec {
        command_id: Uuid::from_u128(command + 1),
        job_id: format!("job-{job}"),
        tenant: "team-a".into(),
        requested_by: "proptest".into(),
        operation,
        inputs: serde_json::json!({}),
        runner_requirements: Default::default(),
        targets: vec![],
        secret_refs: vec![],
        timeouts: crate::contract::Timeouts {
            schedule_to_start: DurationMs(20_000),
            start_to_close: DurationMs(60_000),
            heartbeat: DurationMs(10_000),
            schedule_to_close: DurationMs(120_000),
        },
        retry: crate::contract::RetryPolicy {
            max_attempts,
            initial_backoff: DurationMs(1_000),
            max_backoff: DurationMs(4_000),
        },
        policy,
        callback: None,
        trace: None,
    }
}

#[derive(Default)]
struct World {
    now: i64,
    jobs: BTreeMap<String, JobState>,
    /// command id -> job id: the first job a command created.
    command_jobs: BTreeMap<Uuid, String>,
    log: BTreeMap<Uuid, Vec<AttemptEvent>>,
}

impl World {
    fn pick(&self, job: usize, older: bool) -> Option<&Attempt> {
        let state = self.jobs.get(&format!("job-{job}"))?;
        if older && state.attempts.len() > 1 {
            state.attempts.first()
        } else {
            state.latest()
        }
    }

    fn input(&self, action: &Action) -> Option<(String, Input)> {
        Some(match action {
            Action::Execute {
                command,
                job,
                operation,
                max_attempts,
                invalid,
                keyed,
            } => {
                let spec = spec(*command, *job, OPERATIONS[*operation], *max_attempts);
                let input = if *invalid {
                    Input::ExecuteInvalid {
                        policy_digest: None,
                        command_id: spec.command_id,
                        job_id: spec.job_id.clone(),
                        tenant: spec.tenant.clone(),
                        operation: spec.operation.as_str().into(),
                        category: FailureCategory::Contract,
                        problems: vec![crate::contract::Problem::new("inputs", "bad")],
                    }
                } else {
                    Input::Execute {
                        policy_digest: None,
                        spec: std::sync::Arc::new(spec.clone()),
                        target_keys: if *keyed {
                            vec![TargetKey {
                                key: SHARED_KEY.into(),
                                limit: 1 + (*command % 2) as u32,
                            }]
                        } else {
                            Vec::new()
                        },
                    }
                };
                (spec.job_id, input)
            }
            Action::Grant { job, instance, .. } => {
                let attempt = self.pick(*job, false)?;
                (
                    attempt.job_id.clone(),
                    Input::Grant {
                        attempt_id: attempt.attempt_id,
                        runner_instance: INSTANCES[*instance].into(),
                    },
                )
            }
            Action::Report {
                job,
                older,
                epoch_shift,
                instance,
                kind,
                category,
            } => {
                let attempt = self.pick(*job, *older)?;
                let lease = attempt.lease.as_ref();
                let epoch = lease
                    .map_or(1, |lease| lease.epoch)
                    .saturating_add_signed(i64::from(*epoch_shift) as _)
                    .max(1);
                // Mostly the lease holder, sometimes somebody else.
                let runner_instance = match lease {
                    Some(lease) if *instance != 2 => lease.runner_instance.clone(),
                    _ => INSTANCES[*instance].to_owned(),
                };
                let body = match kind {
                    0 => ReportBody::Started,
                    1 => ReportBody::Heartbeat {
                        progress: None,
                        percent: None,
                    },
                    2 => ReportBody::Heartbeat {
                        progress: Some(format!("step {}", self.now % 3)),
                        percent: Some(50),
                    },
                    3 => ReportBody::Progress {
                        message: "working".into(),
                        percent: None,
                    },
                    4 => ReportBody::Finished {
                        outcome: ReportedOutcome::Succeeded,
                        category: None,
                        message: "ok".into(),
                        result_json: None,
                        // Some successes list an output: the fold must
                        // carry it like every other field.
                        outputs: if self.now % 2 == 0 {
                            vec![output(attempt.attempt_id)]
                        } else {
                            Vec::new()
                        },
                    },
                    _ => ReportBody::Finished {
                        outcome: ReportedOutcome::Failed,
                        category: Some(FailureCategory::ALL[*category]),
                        message: "boom".into(),
                        result_json: None,
                        outputs: Vec::new(),
                    },
                };
                (
                    attempt.job_id.clone(),
                    Input::Report(RunnerReport {
                        attempt_id: attempt.attempt_id,
                        lease_epoch: epoch,
                        runner_instance,
                        body,
                    }),
                )
            }
            Action::Timer { job, older, timer } => {
                let attempt = self.pick(*job, *older)?;
                (
                    attempt.job_id.clone(),
                    Input::TimerFired {
                        attempt_id: attempt.attempt_id,
                        timer: TimerKind::ALL[*timer],
                    },
                )
            }
            Action::Cancel { job, older } => {
                let attempt = self.pick(*job, *older)?;
                (
                    attempt.job_id.clone(),
                    Input::Cancel {
                        attempt_id: attempt.attempt_id,
                        reason: "test".into(),
                        requested_by: "proptest".into(),
                        grace: DurationMs(5_000),
                    },
                )
            }
            Action::Advance { .. } => return None,
        })
    }

    fn step(&mut self, action: &Action) -> Result<(), TestCaseError> {
        if let Action::Advance { millis } = action {
            self.now += millis;
            return Ok(());
        }
        let Some((job_id, input)) = self.input(action) else {
            return Ok(());
        };
        let mut state = self.jobs.get(&job_id).cloned().unwrap_or_default();
        let command_id = match &input {
            Input::Execute { spec, .. } => Some(spec.command_id),
            Input::ExecuteInvalid { command_id, .. } => Some(*command_id),
            _ => None,
        };
        state.command_owner = command_id.and_then(|id| self.command_jobs.get(&id).cloned());
        // As the store does for a grant: the key's holders, across jobs.
        if matches!(
            action,
            Action::Grant {
                read_keys: true,
                ..
            }
        ) {
            state.key_holders = BTreeMap::from([(SHARED_KEY.to_owned(), self.holders())]);
        }
        let before = state.clone();
        let Ok(events) = decide(&state, &input, self.now) else {
            return Ok(());
        };
        // Determinism: the same state, input and clock decide the same events.
        prop_assert_eq!(&decide(&before, &input, self.now).unwrap(), &events);
        self.check(&before, &input, &events)?;
        state
            .apply_all(&events)
            .map_err(|error| TestCaseError::fail(error.to_string()))?;
        state.command_owner = None;
        state.key_holders.clear();
        for attempt in &state.attempts {
            self.command_jobs
                .entry(attempt.command_id)
                .or_insert_with(|| attempt.job_id.clone());
        }
        for event in &events {
            self.log
                .entry(event.attempt_id)
                .or_default()
                .push(event.clone());
        }
        // A timer that fired has no second effect.
        if let Input::TimerFired { .. } = &input {
            if !events.is_empty() {
                prop_assert!(
                    decide(&state, &input, self.now).unwrap().is_empty(),
                    "a timer fired twice"
                );
            }
        }
        self.jobs.insert(job_id, state);
        // Per-target concurrency: each holder was granted below its own
        // limit (checked at the grant), so never more holders than the
        // largest limit among them (limits differ when the policy changed
        // between two jobs).
        let holding: Vec<u32> = self
            .jobs
            .values()
            .flat_map(|state| &state.attempts)
            .filter(|attempt| attempt.holds_keys())
            .flat_map(|attempt| attempt.target_keys.iter().map(|key| key.limit))
            .collect();
        prop_assert!(
            holding.len() as u32 <= holding.iter().copied().max().unwrap_or(0),
            "{} attempts hold the key, limits {:?}",
            holding.len(),
            holding
        );
        Ok(())
    }

    /// Attempts of every job that hold the shared key now.
    fn holders(&self) -> u32 {
        self.jobs
            .values()
            .flat_map(|state| &state.attempts)
            .filter(|attempt| attempt.holds_keys() && !attempt.target_keys.is_empty())
            .count() as u32
    }

    fn check(
        &self,
        before: &JobState,
        input: &Input,
        events: &[AttemptEvent],
    ) -> Result<(), TestCaseError> {
        // Fencing: a report that repeats one of its lease's applied reports
        // yields nothing; any other that is not from the active lease
        // holder yields exactly one fenced-report event and nothing else.
        if let Input::Report(report) = input {
            let attempt = before.attempt(report.attempt_id).unwrap();
            let current = attempt.active_lease().filter(|_| !attempt.is_terminal());
            let valid = current.is_some_and(|lease| {
                lease.epoch == report.lease_epoch && lease.runner_instance == report.runner_instance
            });
            if crate::attempt::repeats_an_applied_report(attempt, report) {
                prop_assert!(events.is_empty(), "a repeat decided {:?}", events);
            } else if !valid {
                prop_assert_eq!(events.len(), 1);
                let fenced = matches!(events[0].body, EventBody::ReportFenced { .. });
                prop_assert!(fenced, "stale report not fenced: {:?}", events);
            } else {
                let fenced = events
                    .iter()
                    .any(|event| matches!(event.body, EventBody::ReportFenced { .. }));
                prop_assert!(!fenced, "a current report was fenced");
            }
        }
        for event in events {
            match &event.body {
                EventBody::Created {
                    command_id,
                    attempt_no,
                    ..
                }
                | EventBody::Rejected {
                    command_id,
                    attempt_no,
                    ..
                } => {
                    // Invariant 1: one job per command; attempt numbers go up by one,
                    // and only after the previous attempt ended.
                    if let Some(owner) = self.command_jobs.get(command_id) {
                        prop_assert_eq!(owner, &event.job_id, "a command made a second job");
                    }
                    let previous = before.attempts.last();
                    match previous {
                        None => prop_assert_eq!(*attempt_no, 1),
                        Some(previous) => {
                            prop_assert_eq!(previous.command_id, *command_id);
                            // A retry holds the keys, with the limits, its
                            // job was admitted with.
                            if let EventBody::Created { target_keys, .. } = &event.body {
                                prop_assert_eq!(target_keys, &previous.target_keys);
                            }
                            prop_assert_eq!(*attempt_no, previous.attempt_no + 1);
                            let terminal_now = events.iter().any(|other| {
                                other.attempt_id == previous.attempt_id && other.body.is_terminal()
                            });
                            prop_assert!(
                                previous.is_terminal() || terminal_now,
                                "retry before the previous attempt ended"
                            );
                        }
                    }
                }
                EventBody::LeaseGranted { epoch, .. } => {
                    // Invariant 2: one lease per attempt, epochs increase per job.
                    let attempt = before.attempt(event.attempt_id).unwrap();
                    prop_assert!(attempt.lease.is_none(), "a second lease for one attempt");
                    prop_assert!(*epoch > before.max_epoch());
                    // A key is only granted with room on it, as read.
                    for key in &attempt.target_keys {
                        let holders = before.key_holders.get(&key.key);
                        prop_assert!(
                            holders.is_some_and(|holders| *holders < key.limit),
                            "granted {} with {:?} holders of {}",
                            key.key,
                            holders,
                            key.limit
                        );
                    }
                }
                EventBody::Finished {
                    outcome,
                    category,
                    retry_attempt_id,
                    ..
                } => {
                    // Only infra failures are retried; never outcome_unknown.
                    if retry_attempt_id.is_some() {
                        prop_assert_eq!(*outcome, TerminalOutcome::Failed);
                        prop_assert!(category.is_some_and(FailureCategory::is_infra));
                    }
                    let attempt = before.attempt(event.attempt_id).unwrap();
                    if *outcome == TerminalOutcome::OutcomeUnknown {
                        prop_assert!(attempt.started_at.is_some());
                        prop_assert!(!attempt.spec.as_ref().unwrap().operation.is_idempotent());
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn check_final(&self) -> Result<(), TestCaseError> {
        for (attempt_id, events) in &self.log {
            // Invariant 3: exactly one terminal event per ended attempt, and only
            // bookkeeping after it.
            let terminal: Vec<usize> = events
                .iter()
                .enumerate()
                .filter(|(_, event)| event.body.is_terminal())
                .map(|(index, _)| index)
                .collect();
            prop_assert!(
                terminal.len() <= 1,
                "attempt {} has {} terminal events",
                attempt_id,
                terminal.len()
            );
            if let Some(index) = terminal.first() {
                let only_bookkeeping = events[index + 1..]
                    .iter()
                    .all(|event| event.body.is_bookkeeping());
                prop_assert!(only_bookkeeping, "events after the terminal one");
            }
            let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
            prop_assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
        }
        let mut seen_commands = BTreeSet::new();
        for state in self.jobs.values() {
            for attempt in &state.attempts {
                // Live == rebuild(log).
                let rebuilt = rebuild(&self.log[&attempt.attempt_id]).unwrap().unwrap();
                prop_assert_eq!(&rebuilt, attempt);
                // Nothing is lost: an attempt is terminal or has a deadline armed.
                prop_assert_eq!(
                    attempt.is_terminal(),
                    attempt.deadlines().is_empty() || attempt.spec.is_none()
                );
                prop_assert_eq!(
                    attempt.is_terminal(),
                    terminal_in(&self.log[&attempt.attempt_id])
                );
            }
            if let Some(first) = state.attempts.first() {
                prop_assert!(
                    seen_commands.insert(first.command_id),
                    "two jobs for one command"
                );
            }
        }
        Ok(())
    }
}

fn terminal_in(events: &[AttemptEvent]) -> bool {
    events.iter().any(|event| event.body.is_terminal())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn random_inputs_keep_the_invariants(actions in prop::collection::vec(action(), 1..120)) {
        let mut world = World::default();
        for action in &actions {
            world.step(action)?;
        }
        world.check_final()?;
    }
}

#[test]
fn apply_refuses_a_second_terminal_event() {
    let spec = spec(0, 0, Operation::VerifyHttpEndpoint, 1);
    let mut state = JobState::default();
    let created = decide(
        &state,
        &Input::Execute {
            policy_digest: None,
            spec: std::sync::Arc::new(spec),
            target_keys: Vec::new(),
        },
        0,
    )
    .unwrap();
    state.apply_all(&created).unwrap();
    let attempt_id = state.attempts[0].attempt_id;
    let cancel = Input::Cancel {
        attempt_id,
        reason: "r".into(),
        requested_by: "t".into(),
        grace: DurationMs(1_000),
    };
    let cancelled = decide(&state, &cancel, 1).unwrap();
    state.apply_all(&cancelled).unwrap();
    let mut again = cancelled[0].clone();
    again.seq += 1;
    assert!(apply(state.attempt(attempt_id), &again).is_err());
}
