//! The write path: claim inputs in the inbox, load and lock the jobs they
//! touch, decide, and append — one transaction per batch.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::outbox::trace_of;
use super::rows::{
    attempt_from_rows, attempt_row, job_row, lease_row, target_key_rows, timestamp,
    unnest_insert_sql, AttemptRow, JobRow, LeaseRow, TargetKeyRow, Writes, LEASE_JOINED,
};
use super::{Store, StoreError};
use crate::attempt::placement::{LiveInstance, QueuedAttempt};
use crate::attempt::{decide, event_id_for, ApplyError, JobState, Rejection};
use crate::codec::{AttemptEventRecord, Codec, Family};
use crate::contract::{AttemptEvent, EventBody, Input, JobSpec, UnixMillis};

pub use crate::audit::{chain_hash, GENESIS_HASH};

/// One input with the id that makes its redelivery a no-op.
#[derive(Clone, Debug)]
pub struct InputEnvelope {
    pub input_id: String,
    /// Where it came from (`commands`, `runner-events`, `timers`, ...).
    pub source: String,
    pub input: Input,
}

/// The prefix of a command's input id: `command:<command id>`.
const COMMAND_INPUT: &str = "command:";

impl InputEnvelope {
    /// A command from the command topic, its input id its command id.
    pub fn command(command_id: Uuid, source: &str, input: Input) -> Self {
        Self {
            input_id: format!("{COMMAND_INPUT}{command_id}"),
            source: source.to_owned(),
            input,
        }
    }

    /// The command id of an input made by [`InputEnvelope::command`].
    fn command_id(&self) -> Option<Uuid> {
        let id = self.input_id.strip_prefix(COMMAND_INPUT)?;
        Uuid::parse_str(id).ok()
    }

    /// A lease grant of `attempt_id` to an instance, whoever makes it
    /// (intake placing new attempts, the placement task the rest). It
    /// claims no inbox row: decided twice, it finds its attempt leased and
    /// is refused.
    pub fn grant(attempt_id: Uuid, runner_instance: String) -> Self {
        Self {
            input_id: format!("grant:{attempt_id}:{runner_instance}"),
            source: "placement".into(),
            input: Input::Grant {
                attempt_id,
                runner_instance,
            },
        }
    }
}

/// Chooses a live instance for queued attempts: the dispatcher's placement
/// decision, handed to the store so that attempts an intake batch creates
/// are leased in the transaction that creates them. The store only writes
/// what it decides.
pub type Placer<'a> = &'a (dyn Fn(&[QueuedAttempt], &[LiveInstance]) -> Vec<(Uuid, String)> + Sync);

/// Placement inside a batch: the placer, and the oldest presence that
/// still counts as live.
#[derive(Clone, Copy)]
pub struct Placing<'a> {
    pub placer: Placer<'a>,
    pub fresh_after: UnixMillis,
}

#[derive(Clone, Debug, PartialEq)]
pub enum InputOutcome {
    /// Seen before (inbox): nothing done.
    Duplicate,
    /// Decided; `events` may be 0 (e.g. a heartbeat that needed nothing).
    Applied { events: usize },
    /// Refused by `decide`; nothing but the inbox row was written.
    Rejected(Rejection),
}

#[derive(Clone, Debug, Default)]
pub struct BatchOutcome {
    /// One per input, in input order.
    pub outcomes: Vec<InputOutcome>,
    pub events: Vec<AttemptEvent>,
    pub projection_rows: usize,
}

/// The jobs a batch touches, as loaded (and locked) from the projection.
#[derive(Clone, Debug, Default)]
pub struct LoadedJobs {
    pub jobs: HashMap<String, JobState>,
    /// The hash of each known attempt's last event.
    pub last_hash: HashMap<Uuid, [u8; 32]>,
}

#[derive(Clone, Debug, Default)]
pub struct AppendOutcome {
    pub events: usize,
    pub projection_rows: usize,
}

impl Store {
    /// Decides and appends a batch of inputs in ONE transaction. Inputs seen
    /// before are skipped; a rejected input writes only its inbox row. On
    /// error nothing is written (the caller retries the batch).
    pub async fn process_batch(
        &self,
        inputs: &[InputEnvelope],
        now: UnixMillis,
    ) -> Result<BatchOutcome, StoreError> {
        let mut tx = self.pool.begin().await?;
        let outcome = process_in(&mut tx, &self.codec, inputs, now, None).await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// As [`Store::process_batch`], and places the attempts the batch
    /// created as `placing` decides, in the same transaction: a command is
    /// leased in one commit, not two. Each grant is an input of its own
    /// (with its inbox id).
    pub async fn process_batch_placing(
        &self,
        inputs: &[InputEnvelope],
        now: UnixMillis,
        placing: Placing<'_>,
    ) -> Result<BatchOutcome, StoreError> {
        let mut tx = self.pool.begin().await?;
        let outcome = process_in(&mut tx, &self.codec, inputs, now, Some(placing)).await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// Loads one job's state (no lock), for readers and tests.
    pub async fn job_state(&self, job_id: &str) -> Result<JobState, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let loaded = load_jobs(&mut conn, &[job_id.to_owned()], &[], false).await?;
        Ok(loaded.jobs.get(job_id).cloned().unwrap_or_default())
    }
}

/// How often a batch the database refuses is retried whole before it is
/// split (a refusal can be a race with another writer, which a retry cures).
const WHOLE_BATCH_TRIES: u32 = 3;

/// What [`Store::process_isolating`] did.
#[derive(Debug, Default)]
pub struct IsolatedOutcome {
    /// One per input, in input order: its outcome, or why the database
    /// refuses it however often it is retried.
    pub decisions: Vec<Result<InputOutcome, String>>,
    pub events: Vec<AttemptEvent>,
}

impl Store {
    /// Decides `inputs` in as few transactions as the database accepts. A
    /// failure that retrying cannot cure (the database refuses the data:
    /// not a lost connection, not a serialization race) is retried whole a
    /// few times, then the batch is split in halves, decided in order, until
    /// the one input the database refuses is alone: it is refused with the
    /// reason and every other input is decided. One bad input can never stop
    /// the rest. Transient failures are retried, with backoff, until
    /// `shutdown` (then `None`: the caller commits nothing). With a placer
    /// and the presence TTL, new attempts are placed in the transaction
    /// that creates them.
    pub async fn process_isolating(
        &self,
        inputs: &[InputEnvelope],
        place_within: Option<(Placer<'_>, std::time::Duration)>,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> Option<IsolatedOutcome> {
        let clock = || chrono::Utc::now().timestamp_millis();
        self.process_isolating_at(inputs, place_within, shutdown, clock)
            .await
    }

    /// As [`Store::process_isolating`], each transaction deciding at the
    /// instant `clock` gives (the timer sweeper's: its own `now`).
    pub(crate) async fn process_isolating_at(
        &self,
        inputs: &[InputEnvelope],
        place_within: Option<(Placer<'_>, std::time::Duration)>,
        shutdown: &tokio_util::sync::CancellationToken,
        clock: impl Fn() -> UnixMillis,
    ) -> Option<IsolatedOutcome> {
        let mut outcome = IsolatedOutcome {
            decisions: Vec::with_capacity(inputs.len()),
            events: Vec::new(),
        };
        // Ranges still to decide, the next on top, in input order.
        let mut pending: Vec<std::ops::Range<usize>> = Vec::with_capacity(8);
        pending.push(0..inputs.len());
        while let Some(range) = pending.pop() {
            if range.is_empty() {
                continue;
            }
            let mut refused = 0u32;
            let mut transient = 0u32;
            loop {
                let now = clock();
                let slice = &inputs[range.clone()];
                let attempt = match place_within {
                    Some((placer, ttl)) => {
                        let fresh_after = now - i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
                        let placing = Placing {
                            placer,
                            fresh_after,
                        };
                        self.process_batch_placing(slice, now, placing).await
                    }
                    None => self.process_batch(slice, now).await,
                };
                let error = match attempt {
                    Ok(batch) => {
                        outcome.events.extend(batch.events);
                        outcome.decisions.extend(batch.outcomes.into_iter().map(Ok));
                        break;
                    }
                    Err(error) => error,
                };
                if error.is_transient() {
                    transient += 1;
                    tracing::warn!(%error, tries = transient, records = range.len(), "batch failed; retrying");
                } else {
                    refused += 1;
                    tracing::warn!(%error, tries = refused, records = range.len(), "the database refused the batch");
                    if refused >= WHOLE_BATCH_TRIES {
                        if range.len() == 1 {
                            outcome
                                .decisions
                                .push(Err(format!("the store refuses this record: {error}")));
                            break;
                        }
                        let middle = range.start + range.len() / 2;
                        pending.push(middle..range.end);
                        pending.push(range.start..middle);
                        break;
                    }
                }
                let pause = std::time::Duration::from_millis(if transient > 0 {
                    100 * u64::from(transient.min(50))
                } else {
                    20
                });
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
        Some(outcome)
    }
}

fn job_key(input: &Input) -> Option<&str> {
    match input {
        Input::Execute { spec, .. } => Some(&spec.job_id),
        Input::ExecuteInvalid { job_id, .. } => Some(job_id),
        _ => None,
    }
}

fn attempt_key(input: &Input) -> Option<Uuid> {
    match input {
        Input::Grant { attempt_id, .. }
        | Input::TimerFired { attempt_id, .. }
        | Input::Cancel { attempt_id, .. }
        | Input::CallbackOutcome { attempt_id, .. } => Some(*attempt_id),
        Input::ApprovePlan {
            plan_attempt_id, ..
        } => Some(*plan_attempt_id),
        Input::Report(report) => Some(report.attempt_id),
        // Exhaustive on purpose: a new input must say how it is routed.
        Input::Execute { .. } | Input::ExecuteInvalid { .. } => None,
    }
}

/// What an input id stands for, where a producer could reuse the id for
/// something else: a command id names one job, or one cancel.
fn subject(input: &Input) -> Option<String> {
    match input {
        Input::Execute { spec, .. } => Some(job_subject(&spec.job_id)),
        Input::ExecuteInvalid { job_id, .. } => Some(job_subject(job_id)),
        Input::Cancel { attempt_id, .. } => Some(format!("a cancel of attempt {attempt_id}")),
        Input::ApprovePlan {
            plan_attempt_id,
            plan_digest,
            approved_by,
            ..
        } => Some(format!(
            "an approval of plan {plan_digest} of attempt {plan_attempt_id} by {approved_by}"
        )),
        _ => None,
    }
}

fn job_subject(job_id: &str) -> String {
    format!("job `{job_id}`")
}

fn command_key(input: &Input) -> Option<Uuid> {
    match input {
        Input::Execute { spec, .. } => Some(spec.command_id),
        Input::ExecuteInvalid { command_id, .. } => Some(*command_id),
        _ => None,
    }
}

/// The id of the command an input came as: an execute's or an approval's
/// own, a cancel's from its input id ([`InputEnvelope::command_id`]).
fn command_of(envelope: &InputEnvelope) -> Option<Uuid> {
    match &envelope.input {
        Input::ApprovePlan { command_id, .. } => Some(*command_id),
        Input::Cancel { .. } => envelope.command_id(),
        input => command_key(input),
    }
}

/// How an input's id meets the inbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// Not at all: a repeat in the batch, or the state dedupes it.
    No,
    /// Claimed: fresh if the id was not there.
    Insert,
    /// Only looked up: an execute that would create its job, whose job row
    /// will name its command. Fresh if the id was not there (a cancel or an
    /// approval, or an execute that was refused, may have claimed it).
    Read,
}

pub(crate) async fn process_in(
    conn: &mut PgConnection,
    codec: &Codec,
    inputs: &[InputEnvelope],
    now: UnixMillis,
    placing: Option<Placing<'_>>,
) -> Result<BatchOutcome, StoreError> {
    // 1. Lock and load the jobs the batch's inputs touch (in job-id order:
    //    concurrent batches lock in one order); a repeat of an id inside
    //    the batch is a duplicate.
    let mut seen = HashSet::new();
    let firsts: Vec<bool> = inputs
        .iter()
        .map(|envelope| seen.insert(envelope.input_id.as_str()))
        .collect();
    let mut context = BatchContext::load(conn, inputs, &firsts).await?;
    // 2. A command whose id a job's row holds is a repeat (of the command
    //    that created the job, or the id reused). Other inputs claim their
    //    ids in the inbox, but for those the state dedupes by itself, and an
    //    execute that would create its job only looks its id up
    //    (docs/ARCHITECTURE.md, "The consistency model"); an id seen before
    //    is a repeat.
    let recorded: Vec<Option<String>> = inputs
        .iter()
        .zip(&firsts)
        .map(|(envelope, first)| first.then(|| context.recorded(envelope)).flatten())
        .collect();
    let claims: Vec<Claim> = inputs
        .iter()
        .zip(firsts.iter().zip(&recorded))
        .map(|(envelope, (first, recorded))| {
            if !*first || recorded.is_some() || !context.needs_inbox(envelope) {
                Claim::No
            } else if context.creates_job(envelope) {
                Claim::Read
            } else {
                Claim::Insert
            }
        })
        .collect();
    // Seen before: claimed already, or (an execute that only looks its id
    // up) found in the inbox when the batch was loaded.
    let mut seen = claim_inputs(conn, inputs, &claims).await?;
    seen.extend(
        inputs
            .iter()
            .zip(&claims)
            .filter(|(envelope, claim)| {
                **claim == Claim::Read && context.in_inbox.contains(&envelope.input_id)
            })
            .map(|(envelope, _)| envelope.input_id.clone()),
    );
    let fresh: Vec<bool> = inputs
        .iter()
        .zip(firsts.iter().zip(&recorded))
        .map(|(envelope, (first, recorded))| {
            *first && recorded.is_none() && !seen.contains(&envelope.input_id)
        })
        .collect();
    // A repeated id is a redelivery only if it stands for the same thing; a
    // command id reused for another job or cancel is refused, not dropped.
    let first_subjects = first_subjects(conn, inputs, &fresh, &recorded).await?;
    // 3. Decide, input by input, on a working copy.
    let mut outcomes = Vec::with_capacity(inputs.len());
    let mut events = Vec::new();
    for (envelope, fresh) in inputs.iter().zip(&fresh) {
        let outcome = if *fresh {
            context.decide(envelope, now, &mut events)?
        } else {
            repeated(envelope, &first_subjects)
        };
        outcomes.push(outcome);
    }
    // An execute that only looked its id up and created nothing claims it
    // now: no job row will name its command, and a redelivery must find it.
    let unrecorded: Vec<Claim> = claims
        .iter()
        .zip(fresh.iter().zip(&outcomes))
        .map(|(claim, (fresh, outcome))| {
            let created = matches!(outcome, InputOutcome::Applied { events } if *events > 0);
            if *claim == Claim::Read && *fresh && !created {
                Claim::Insert
            } else {
                Claim::No
            }
        })
        .collect();
    claim_inputs(conn, inputs, &unrecorded).await?;
    // 4. Place what this batch created, in the same transaction.
    if let Some(placing) = placing {
        place_created(conn, &mut context, placing, now, &mut events).await?;
    }
    // 5. Append through the one write function.
    let appended = append_in(conn, codec, &context.loaded, &events).await?;
    Ok(BatchOutcome {
        outcomes,
        events,
        projection_rows: appended.projection_rows,
    })
}

/// Claims in the inbox the ids `claims` marks `Insert`, in one statement:
/// those that were there before.
async fn claim_inputs(
    conn: &mut PgConnection,
    inputs: &[InputEnvelope],
    claims: &[Claim],
) -> Result<HashSet<String>, StoreError> {
    let mut ids = Vec::new();
    let mut sources = Vec::new();
    let mut subjects = Vec::new();
    for (envelope, claim) in inputs.iter().zip(claims) {
        if *claim == Claim::Insert {
            ids.push(envelope.input_id.clone());
            sources.push(envelope.source.clone());
            subjects.push(subject(&envelope.input));
        }
    }
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    Ok(sqlx::query_scalar::<_, String>(
        "WITH claimed AS (
             INSERT INTO inbox (input_id, source, subject)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[])
             ON CONFLICT DO NOTHING RETURNING input_id)
         SELECT id FROM UNNEST($1::text[]) id WHERE id NOT IN (SELECT input_id FROM claimed)",
    )
    .bind(&ids)
    .bind(&sources)
    .bind(&subjects)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect())
}

/// A repeated input: a duplicate, or a reused id refused with both subjects.
fn repeated(envelope: &InputEnvelope, first_subjects: &HashMap<String, String>) -> InputOutcome {
    match (
        first_subjects.get(&envelope.input_id),
        subject(&envelope.input),
    ) {
        (Some(first), Some(again)) if *first != again => {
            InputOutcome::Rejected(Rejection::InputIdReused {
                input_id: envelope.input_id.clone(),
                first: first.clone(),
                again,
            })
        }
        _ => InputOutcome::Duplicate,
    }
}

/// The jobs a batch touches, loaded and locked, and the working copy the
/// batch decides on.
struct BatchContext {
    loaded: LoadedJobs,
    working: HashMap<String, JobState>,
    attempt_jobs: HashMap<Uuid, String>,
    command_owner: HashMap<Uuid, String>,
    /// Those of the batch's executes' ids the inbox held when it was
    /// loaded: the answer to a `Claim::Read`.
    in_inbox: HashSet<String>,
    /// How many attempts hold each target key a grant of the batch needs,
    /// read under the keys' locks and kept current as the batch grants.
    key_holders: BTreeMap<String, u32>,
    /// The (tenant, digest) of every approved plan an apply of the batch
    /// names (docs/ARCHITECTURE.md, "Plan approvals").
    approved_plans: BTreeSet<(String, String)>,
}

impl BatchContext {
    /// Loads what the inputs `firsts` marks (each the first of its id in
    /// the batch) may need; which of them were seen before is known only
    /// once the loaded state says which need an inbox row.
    async fn load(
        conn: &mut PgConnection,
        inputs: &[InputEnvelope],
        firsts: &[bool],
    ) -> Result<Self, StoreError> {
        let fresh_inputs = || {
            inputs
                .iter()
                .zip(firsts)
                .filter(|(_, first)| **first)
                .map(|(envelope, _)| envelope)
        };
        let attempt_ids: Vec<Uuid> = fresh_inputs()
            .filter_map(|envelope| attempt_key(&envelope.input))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut job_ids = BTreeSet::new();
        let mut command_ids = BTreeSet::new();
        // An execute that creates its job only looks its id up in the inbox
        // (`Claim::Read`); which do is known once the jobs are loaded, so
        // every execute's is looked up with the commands' jobs, in one
        // statement.
        let mut executes = Vec::new();
        for envelope in fresh_inputs() {
            if let Some(job_id) = job_key(&envelope.input) {
                job_ids.insert(job_id.to_owned());
                executes.push(envelope.input_id.clone());
            }
            if let Some(command_id) = command_of(envelope) {
                command_ids.insert(command_id);
            }
        }
        let job_ids: Vec<String> = job_ids.into_iter().collect();
        let command_ids: Vec<Uuid> = command_ids.into_iter().collect();
        let loaded = load_jobs(conn, &job_ids, &attempt_ids, true).await?;
        let (command_owner, in_inbox) = look_up(conn, &command_ids, &executes).await?;
        let attempt_jobs: HashMap<Uuid, String> = loaded
            .jobs
            .iter()
            .flat_map(|(job_id, state)| {
                state
                    .attempts
                    .iter()
                    .map(move |attempt| (attempt.attempt_id, job_id.clone()))
            })
            .collect();
        let granted_keys: BTreeSet<String> = fresh_inputs()
            .filter_map(|envelope| match &envelope.input {
                Input::Grant { attempt_id, .. } => attempt_jobs
                    .get(attempt_id)
                    .and_then(|job_id| loaded.jobs.get(job_id)?.attempt(*attempt_id)),
                _ => None,
            })
            .flat_map(|attempt| attempt.target_keys.iter().map(|key| key.key.clone()))
            .collect();
        let key_holders = lock_target_keys(conn, &granted_keys).await?;
        let named_plans: Vec<String> = fresh_inputs()
            .filter_map(|envelope| match &envelope.input {
                Input::Execute { spec, .. }
                    if spec.operation == crate::contract::Operation::OpentofuApply =>
                {
                    spec.policy.approved_plan_digest.clone()
                }
                _ => None,
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let approved_plans = if named_plans.is_empty() {
            BTreeSet::new()
        } else {
            sqlx::query_as(
                "SELECT tenant, plan_approval->>'digest' FROM attempts
                 WHERE plan_approval IS NOT NULL AND plan_approval->>'digest' = ANY($1)",
            )
            .bind(&named_plans)
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .collect()
        };
        Ok(Self {
            working: loaded.jobs.clone(),
            command_owner,
            in_inbox,
            loaded,
            attempt_jobs,
            key_holders,
            approved_plans,
        })
    }

    /// What a command's id stood for when a job's row holds it: the job it
    /// created. For an execute of that job it is a repeat; for a cancel or
    /// an approval the id was reused. `None` for anything else (an execute
    /// naming another job is decided: the state refuses it).
    fn recorded(&self, envelope: &InputEnvelope) -> Option<String> {
        let owner = self.command_owner.get(&command_of(envelope)?)?;
        match job_key(&envelope.input) {
            Some(job_id) if job_id != owner => None,
            _ => Some(job_subject(owner)),
        }
    }

    /// Whether an input is an execute of a job that does not exist: decided,
    /// it creates the job, whose row names the command.
    fn creates_job(&self, envelope: &InputEnvelope) -> bool {
        job_key(&envelope.input).is_some_and(|job_id| !self.loaded.jobs.contains_key(job_id))
    }

    /// Whether an input needs an inbox row to make its redelivery a no-op:
    /// every input but those the state dedupes by itself.
    /// - A grant: an attempt is queued once, and a grant of an attempt that
    ///   is not queued is refused, so a grant decided again writes nothing.
    /// - A `started` or `finished` report the loaded state dedupes
    ///   (accepted now, or a repeat of one applied). A runner sends one of
    ///   each per lease, in order, so what a batch decides before it cannot
    ///   make it late.
    fn needs_inbox(&self, envelope: &InputEnvelope) -> bool {
        let report = match &envelope.input {
            Input::Grant { .. } => return false,
            Input::Report(report) => report,
            _ => return true,
        };
        let attempt = self
            .attempt_jobs
            .get(&report.attempt_id)
            .and_then(|job_id| self.loaded.jobs.get(job_id)?.attempt(report.attempt_id));
        !attempt.is_some_and(|attempt| crate::attempt::dedupes_by_state(attempt, report))
    }

    /// Decides one fresh input on the working copy; its events are added.
    fn decide(
        &mut self,
        envelope: &InputEnvelope,
        now: UnixMillis,
        events: &mut Vec<AttemptEvent>,
    ) -> Result<InputOutcome, StoreError> {
        let job_id = match job_key(&envelope.input) {
            Some(job_id) => Some(job_id.to_owned()),
            None => attempt_key(&envelope.input)
                .and_then(|attempt_id| self.attempt_jobs.get(&attempt_id).cloned()),
        };
        let Some(job_id) = job_id else {
            let attempt_id = attempt_key(&envelope.input).unwrap_or_default();
            return Ok(InputOutcome::Rejected(Rejection::UnknownAttempt(
                attempt_id,
            )));
        };
        let state = self.working.entry(job_id.clone()).or_default();
        state.command_owner = command_key(&envelope.input)
            .and_then(|command_id| self.command_owner.get(&command_id).cloned());
        // A grant sees the holders of its attempt's keys (and only a grant:
        // nothing else depends on them).
        let granting = match &envelope.input {
            Input::Grant { attempt_id, .. } => state
                .attempt(*attempt_id)
                .map(|attempt| attempt.target_keys.clone())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        state.key_holders = granting
            .iter()
            .filter_map(|key| Some((key.key.clone(), *self.key_holders.get(&key.key)?)))
            .collect();
        // An apply sees its tenant's approved plans (and only an apply).
        if let Input::Execute { spec, .. } = &envelope.input {
            state.approved_plans = self
                .approved_plans
                .iter()
                .filter(|(tenant, _)| *tenant == spec.tenant)
                .map(|(_, digest)| digest.clone())
                .collect();
        }
        let decided = decide(state, &envelope.input, now);
        state.command_owner = None;
        state.key_holders.clear();
        state.approved_plans.clear();
        match decided {
            Ok(decided) => {
                state.apply_all(&decided)?;
                if !decided.is_empty() {
                    for key in &granting {
                        *self.key_holders.entry(key.key.clone()).or_default() += 1;
                    }
                }
                if let Some(first) = state.attempts.first() {
                    self.command_owner
                        .entry(first.command_id)
                        .or_insert_with(|| job_id.clone());
                }
                // An apply later in the batch sees this approval.
                if let Input::ApprovePlan {
                    tenant,
                    plan_digest,
                    ..
                } = &envelope.input
                {
                    self.approved_plans
                        .insert((tenant.clone(), plan_digest.clone()));
                }
                let outcome = InputOutcome::Applied {
                    events: decided.len(),
                };
                events.extend(decided);
                Ok(outcome)
            }
            Err(rejection) => Ok(InputOutcome::Rejected(rejection)),
        }
    }
}

/// The advisory lock space of target keys (`pg_advisory_xact_lock(space,
/// hashtext(key))`; the two-key and one-key spaces never overlap).
const TARGET_KEY_LOCKS: i32 = 0x7467_6b79; // "tgky"

/// Locks `keys` until the transaction ends, in one order (concurrent grant
/// transactions never wait on each other in a cycle: each takes its job
/// rows first, then its keys, sorted), and counts each key's holders. Two
/// keys with one hash share a lock: they serialize, they are never
/// over-granted.
async fn lock_target_keys(
    conn: &mut PgConnection,
    keys: &BTreeSet<String>,
) -> Result<BTreeMap<String, u32>, StoreError> {
    if keys.is_empty() {
        return Ok(BTreeMap::new());
    }
    let keys: Vec<&String> = keys.iter().collect();
    sqlx::query(
        "SELECT pg_advisory_xact_lock($1, h) \
         FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) k ORDER BY 1) locks",
    )
    .bind(TARGET_KEY_LOCKS)
    .bind(&keys)
    .execute(&mut *conn)
    .await?;
    let counted = sqlx::query(
        "SELECT k, count(t.attempt_id) FROM unnest($1::text[]) k \
         LEFT JOIN target_keys t ON t.key = k AND t.holding GROUP BY k",
    )
    .bind(&keys)
    .fetch_all(&mut *conn)
    .await?;
    Ok(counted
        .into_iter()
        .map(|row| {
            let holders: i64 = row.get(1);
            (row.get(0), u32::try_from(holders).unwrap_or(u32::MAX))
        })
        .collect())
}

/// Places the attempts `events` created (available now) as the placer
/// decides, each grant claimed in the inbox and decided like any input.
async fn place_created(
    conn: &mut PgConnection,
    context: &mut BatchContext,
    placing: Placing<'_>,
    now: UnixMillis,
    events: &mut Vec<AttemptEvent>,
) -> Result<(), StoreError> {
    // The job of each attempt created ready to run.
    let mut job_of: HashMap<Uuid, String> = HashMap::new();
    let queued: Vec<QueuedAttempt> = events
        .iter()
        .filter_map(|event| match &event.body {
            // With its keys: the placer leaves an attempt that has any (no
            // key was read here, so none is known to be free) to the
            // placement task, which takes it in its turn on its keys.
            EventBody::Created {
                spec,
                available_at,
                target_keys,
                ..
            } if *available_at <= now => {
                job_of.insert(event.attempt_id, event.job_id.clone());
                Some(QueuedAttempt {
                    attempt_id: event.attempt_id,
                    runner_type: spec.operation.runner_type().as_str().to_owned(),
                    operation: spec.operation.as_str().to_owned(),
                    pool: spec.runner_requirements.pool.clone(),
                    capabilities: spec.runner_requirements.capabilities.clone(),
                    target_keys: target_keys.clone(),
                })
            }
            _ => None,
        })
        .collect();
    if queued.is_empty() {
        return Ok(());
    }
    let instances = super::runners::live_instances_in(conn, placing.fresh_after).await?;
    let grants: Vec<InputEnvelope> = (placing.placer)(&queued, &instances)
        .into_iter()
        .map(|(attempt_id, instance)| InputEnvelope::grant(attempt_id, instance))
        .collect();
    if grants.is_empty() {
        return Ok(());
    }
    // No inbox row: these grants are made and decided in this transaction,
    // never redelivered, and a grant of an attempt that is not queued any
    // more is refused by the state itself.
    for grant in &grants {
        let Input::Grant { attempt_id, .. } = &grant.input else {
            continue;
        };
        let Some(job_id) = job_of.remove(attempt_id) else {
            continue;
        };
        context.attempt_jobs.insert(*attempt_id, job_id);
        // Not queued any more (cancelled in the same batch): refused, and
        // nothing is written.
        context.decide(grant, now, events)?;
    }
    Ok(())
}

/// What each repeated id (with a subject) stood for when it was first seen:
/// in a job's row (`recorded`), in the inbox, or earlier in this batch.
async fn first_subjects(
    conn: &mut PgConnection,
    inputs: &[InputEnvelope],
    fresh: &[bool],
    recorded: &[Option<String>],
) -> Result<HashMap<String, String>, StoreError> {
    let mut firsts: HashMap<String, String> = HashMap::new();
    for (envelope, (fresh, recorded)) in inputs.iter().zip(fresh.iter().zip(recorded)) {
        let first = match recorded {
            Some(recorded) => Some(recorded.clone()),
            None if *fresh => subject(&envelope.input),
            None => None,
        };
        if let Some(subject) = first {
            firsts.entry(envelope.input_id.clone()).or_insert(subject);
        }
    }
    let repeated: Vec<String> = inputs
        .iter()
        .zip(fresh)
        .filter(|(envelope, fresh)| {
            !**fresh
                && subject(&envelope.input).is_some()
                && !firsts.contains_key(&envelope.input_id)
        })
        .map(|(envelope, _)| envelope.input_id.clone())
        .collect();
    if !repeated.is_empty() {
        for row in sqlx::query(
            "SELECT input_id, subject FROM inbox WHERE input_id = ANY($1) AND subject IS NOT NULL",
        )
        .bind(&repeated)
        .fetch_all(&mut *conn)
        .await?
        {
            firsts.insert(row.get(0), row.get(1));
        }
    }
    Ok(firsts)
}

/// The jobs each of `command_ids` created, by command, and which of
/// `input_ids` the inbox holds, in one statement. Run after the job locks,
/// like the attempts' read in [`load_jobs`]: a job created or an id claimed
/// by a transaction this one waited for is seen (a batch delivered to two
/// dispatchers during a rebalance decides its repeats as repeats).
async fn look_up(
    conn: &mut PgConnection,
    command_ids: &[Uuid],
    input_ids: &[String],
) -> Result<(HashMap<Uuid, String>, HashSet<String>), StoreError> {
    let mut command_jobs = HashMap::new();
    let mut in_inbox = HashSet::new();
    if command_ids.is_empty() && input_ids.is_empty() {
        return Ok((command_jobs, in_inbox));
    }
    let rows = sqlx::query(
        "SELECT command_id, job_id, NULL AS input_id FROM jobs WHERE command_id = ANY($1) \
         UNION ALL SELECT NULL, NULL, input_id FROM inbox WHERE input_id = ANY($2)",
    )
    .bind(command_ids)
    .bind(input_ids)
    .fetch_all(&mut *conn)
    .await?;
    for row in rows {
        match row.get::<Option<Uuid>, _>(0) {
            Some(command_id) => {
                command_jobs.insert(command_id, row.get(1));
            }
            None => {
                in_inbox.insert(row.get(2));
            }
        }
    }
    Ok((command_jobs, in_inbox))
}

/// Loads jobs (named, or by one of their attempts), their attempts and
/// leases from the projection, in two statements; with `lock`, takes row
/// locks on the job rows (in job id order), then on their attempts.
pub(crate) async fn load_jobs(
    conn: &mut PgConnection,
    job_ids: &[String],
    attempt_ids: &[Uuid],
    lock: bool,
) -> Result<LoadedJobs, StoreError> {
    let mut loaded = LoadedJobs::default();
    if job_ids.is_empty() && attempt_ids.is_empty() {
        return Ok(loaded);
    }
    // The jobs first, locked in job-id order; then their attempts, in a
    // statement of its own: under READ COMMITTED its snapshot is taken once
    // the job locks are held, so it sees an attempt another transaction
    // added to a job while this one waited for the job's lock.
    let lock_clause = if lock { " FOR UPDATE" } else { "" };
    // Typed columns, not `to_jsonb`: see `AttemptRow::from_pg`.
    let job_rows = sqlx::query(&format!(
        "SELECT job_id, spec FROM jobs \
         WHERE job_id = ANY(array_cat($1::text[], \
             ARRAY(SELECT job_id FROM attempts WHERE attempt_id = ANY($2)))) \
         ORDER BY job_id{lock_clause}"
    ))
    .bind(job_ids)
    .bind(attempt_ids)
    .fetch_all(&mut *conn)
    .await?;
    // One spec a job, shared by its attempts' states and their copies.
    let mut specs: HashMap<String, Option<std::sync::Arc<JobSpec>>> = HashMap::new();
    for row in job_rows {
        let job_id: String = row.get(0);
        let spec = row
            .try_get::<Option<sqlx::types::Json<JobSpec>>, _>(1)
            .map_err(|error| StoreError::Corrupt(format!("job {job_id} spec: {error}")))?
            .map(|json| std::sync::Arc::new(json.0));
        specs.insert(job_id, spec);
    }
    if specs.is_empty() {
        return Ok(loaded);
    }
    let locked_ids: Vec<&str> = specs.keys().map(String::as_str).collect();
    let lock_clause = if lock { " FOR UPDATE OF a" } else { "" };
    let attempts_sql = format!(
        "SELECT a.*, {LEASE_JOINED} FROM attempts a \
         LEFT JOIN leases l ON l.attempt_id = a.attempt_id \
         WHERE a.job_id = ANY($1) ORDER BY a.job_id, a.attempt_no{lock_clause}"
    );
    for row in sqlx::query(&attempts_sql)
        .bind(&locked_ids)
        .fetch_all(&mut *conn)
        .await?
    {
        let attempt = AttemptRow::from_pg(&row)
            .map_err(|error| StoreError::Corrupt(format!("attempts row: {error}")))?;
        let lease = LeaseRow::from_joined(&row)?;
        let hash: [u8; 32] = attempt.last_hash.as_slice().try_into().map_err(|_| {
            StoreError::Corrupt(format!(
                "attempt {}: last_hash is not 32 bytes",
                attempt.attempt_id
            ))
        })?;
        let spec = specs.get(&attempt.job_id).and_then(Option::as_ref);
        loaded.last_hash.insert(attempt.attempt_id, hash);
        let job_id = attempt.job_id.clone();
        let state = attempt_from_rows(attempt, spec, lease)?;
        loaded.jobs.entry(job_id).or_default().attempts.push(state);
    }
    Ok(loaded)
}

/// THE write: appends decided events (hash-chained), folds them through the
/// one `apply` into the projection, and writes what they enqueue — inside
/// the caller's transaction, multi-row. `loaded` is the state the events were
/// decided on. The database refuses anything that races it: `(attempt_id,
/// seq)` and the one-lease-per-attempt key are unique.
pub async fn append_decided(
    conn: &mut PgConnection,
    codec: &Codec,
    loaded: &LoadedJobs,
    events: &[AttemptEvent],
) -> Result<AppendOutcome, StoreError> {
    append_in(conn, codec, loaded, events).await
}

async fn append_in(
    conn: &mut PgConnection,
    codec: &Codec,
    loaded: &LoadedJobs,
    events: &[AttemptEvent],
) -> Result<AppendOutcome, StoreError> {
    if events.is_empty() {
        return Ok(AppendOutcome::default());
    }
    let folded = Folded::fold(codec, loaded, events)?;
    let touched: BTreeSet<Uuid> = events.iter().map(|event| event.attempt_id).collect();
    // One statement: the projection's rows, what the events enqueue or
    // mark, and last the events themselves, which take their positions
    // under the append lock, held until the transaction ends
    // (docs/ARCHITECTURE.md, "Relay").
    let mut writes = Writes::new();
    let projection = ProjectionRows::collect(
        &folded.jobs,
        &touched,
        &folded.created,
        &folded.leases,
        &folded.chain,
    );
    projection
        .write(conn, &mut writes, ProjectionTarget::Live)
        .await?;
    folded.consequences(&mut writes);
    folded.rows.insert(&mut writes);
    writes.execute(conn).await?;
    Ok(AppendOutcome {
        events: events.len(),
        projection_rows: projection.len(),
    })
}

/// A batch of decided events folded through the one `apply`, event by
/// event: the event rows with their chain links, the jobs as they stand
/// after them, and what each event enqueues (callbacks, which need the
/// attempt as of that event) or marks (instances whose lease the heartbeat
/// timer took). What it publishes besides itself the relay derives from the
/// log.
struct Folded {
    jobs: BTreeMap<String, JobState>,
    chain: HashMap<Uuid, [u8; 32]>,
    rows: EventColumns,
    /// The attempts this batch created (a job's first, or a retry): their
    /// rows are inserted, the other touched attempts' updated, and only
    /// their jobs' rows are written.
    created: BTreeSet<Uuid>,
    /// The attempts whose lease row is written, and how.
    leases: HashMap<Uuid, LeaseWrite>,
    callbacks: Vec<super::callbacks::PendingCallback>,
    lost_leases: Vec<(String, chrono::DateTime<chrono::Utc>)>,
}

impl Folded {
    fn fold(
        codec: &Codec,
        loaded: &LoadedJobs,
        events: &[AttemptEvent],
    ) -> Result<Self, StoreError> {
        let mut folded = Self {
            jobs: BTreeMap::new(),
            chain: loaded.last_hash.clone(),
            rows: EventColumns::default(),
            created: BTreeSet::new(),
            leases: HashMap::new(),
            callbacks: Vec::new(),
            lost_leases: Vec::new(),
        };
        for event in events {
            // Ids are unique because they are derived from what the log
            // keeps unique (migration 0022).
            if event.event_id != event_id_for(event.attempt_id, event.seq) {
                return Err(ApplyError {
                    attempt_id: event.attempt_id,
                    seq: event.seq,
                    reason: format!("event id {} is not derived from its seq", event.event_id),
                }
                .into());
            }
            let state = folded
                .jobs
                .entry(event.job_id.clone())
                .or_insert_with(|| loaded.jobs.get(&event.job_id).cloned().unwrap_or_default());
            let lease_before = state
                .attempt(event.attempt_id)
                .and_then(|attempt| attempt.lease.clone());
            let latest_before = state.latest().map(|attempt| attempt.attempt_id);
            state.apply_all(std::slice::from_ref(event))?;
            let attempt = state.attempt(event.attempt_id).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "attempt {} vanished while applying",
                    event.attempt_id
                ))
            })?;
            let payload = crate::codec::datum(&AttemptEventRecord::from(event));
            let prev_hash = folded
                .chain
                .get(&event.attempt_id)
                .copied()
                .unwrap_or(GENESIS_HASH);
            let hash = chain_hash(&prev_hash, &payload);
            folded.chain.insert(event.attempt_id, hash);
            if event.body.is_terminal() {
                folded
                    .callbacks
                    .extend(super::callbacks::pending_for(event, attempt, codec)?);
            }
            if state.latest().map(|latest| latest.attempt_id) != latest_before {
                folded.created.insert(event.attempt_id);
            }
            if matches!(event.body, EventBody::LeaseGranted { .. }) {
                folded.leases.insert(event.attempt_id, LeaseWrite::Insert);
            } else if attempt.lease != lease_before {
                folded
                    .leases
                    .entry(event.attempt_id)
                    .or_insert(LeaseWrite::Update);
            }
            if event.body.is_terminal() {
                // The heartbeat timer took this lease: its instance is
                // suspect until it announces itself again (placement skips
                // it).
                if attempt.timer_fired == Some(crate::contract::TimerKind::Heartbeat) {
                    if let Some(lease) = &attempt.lease {
                        folded
                            .lost_leases
                            .push((lease.runner_instance.clone(), timestamp(event.occurred_at)));
                    }
                }
            }
            folded
                .rows
                .push(event, payload, prev_hash, hash, trace_of(attempt));
        }
        Ok(folded)
    }

    /// Lost-lease marks and callbacks, as parts of `writes`.
    fn consequences(&self, writes: &mut Writes) {
        if !self.lost_leases.is_empty() {
            let (instances, at): (Vec<&str>, Vec<chrono::DateTime<chrono::Utc>>) = self
                .lost_leases
                .iter()
                .map(|(instance, at)| (instance.as_str(), *at))
                .unzip();
            writes
                .part(include_str!("sql/mark_lost_leases.sql"))
                .bind(instances)
                .bind(at);
        }
        if !self.callbacks.is_empty() {
            writes
                .part(include_str!("sql/insert_callbacks.sql"))
                .bind(sqlx::types::Json(&self.callbacks));
        }
    }
}

/// Where projection rows go.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ProjectionTarget<'a> {
    /// The live tables, found through the connection's search_path.
    Live,
    /// A shadow schema being rebuilt (where every lease is new).
    Shadow(&'a str),
}

/// How an attempt's lease row is written: a lease granted is inserted (a
/// second for the attempt is refused); one extended or ended is updated.
/// An event that leaves the lease as it was writes no lease row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseWrite {
    Insert,
    Update,
}

/// The projection rows of one batch, by table.
pub(crate) struct ProjectionRows {
    jobs: Vec<JobRow>,
    /// Attempts created in this batch (inserted).
    new_attempts: Vec<AttemptRow>,
    /// Attempts that were there before it (updated).
    changed_attempts: Vec<AttemptRow>,
    /// Leases granted in this batch (inserted; a second one is refused).
    new_leases: Vec<LeaseRow>,
    /// Leases extended or ended (updated by id and epoch).
    changed_leases: Vec<LeaseRow>,
    target_keys: Vec<TargetKeyRow>,
    /// Touched attempts that have (or had) target keys.
    key_owners: Vec<Uuid>,
}

impl ProjectionRows {
    /// The rows of the touched attempts of `jobs`.
    pub(crate) fn collect(
        jobs: &BTreeMap<String, JobState>,
        touched: &BTreeSet<Uuid>,
        created: &BTreeSet<Uuid>,
        leases: &HashMap<Uuid, LeaseWrite>,
        chain: &HashMap<Uuid, [u8; 32]>,
    ) -> Self {
        let mut rows = Self {
            jobs: Vec::new(),
            new_attempts: Vec::new(),
            changed_attempts: Vec::new(),
            new_leases: Vec::new(),
            changed_leases: Vec::new(),
            target_keys: Vec::new(),
            key_owners: Vec::new(),
        };
        for state in jobs.values() {
            for attempt in state
                .attempts
                .iter()
                .filter(|attempt| touched.contains(&attempt.attempt_id))
            {
                let hash = chain
                    .get(&attempt.attempt_id)
                    .copied()
                    .unwrap_or(GENESIS_HASH);
                let row = attempt_row(attempt, &hash);
                if created.contains(&attempt.attempt_id) {
                    rows.new_attempts.push(row);
                } else {
                    rows.changed_attempts.push(row);
                }
                let write = leases.get(&attempt.attempt_id);
                if let Some((lease, write)) = lease_row(attempt).zip(write) {
                    if *write == LeaseWrite::Insert {
                        rows.new_leases.push(lease);
                    } else {
                        rows.changed_leases.push(lease);
                    }
                }
                if !attempt.target_keys.is_empty() {
                    rows.key_owners.push(attempt.attempt_id);
                    rows.target_keys.extend(target_key_rows(attempt));
                }
            }
            // A job's row changes only with a new attempt, which is its
            // latest.
            if state
                .latest()
                .is_some_and(|latest| created.contains(&latest.attempt_id))
            {
                rows.jobs.extend(job_row(state));
            }
        }
        rows
    }

    /// How many rows are written.
    pub(crate) fn len(&self) -> usize {
        self.jobs.len()
            + self.new_attempts.len()
            + self.changed_attempts.len()
            + self.new_leases.len()
            + self.changed_leases.len()
            + self.target_keys.len()
    }

    /// One part of `writes` per table; an attempt's deadlines are columns
    /// of its row. The target keys the rows replace are deleted at once,
    /// in a statement of their own: the part that inserts their
    /// replacements would not see the delete.
    pub(crate) async fn write(
        &self,
        conn: &mut PgConnection,
        writes: &mut Writes,
        target: ProjectionTarget<'_>,
    ) -> Result<(), StoreError> {
        let qualified = |table: &str| match target {
            ProjectionTarget::Live => table.to_owned(),
            ProjectionTarget::Shadow(schema) => format!("\"{schema}\".{table}"),
        };
        if !self.key_owners.is_empty() {
            sqlx::query(&format!(
                "DELETE FROM {} WHERE attempt_id = ANY($1)",
                qualified("target_keys")
            ))
            .bind(&self.key_owners)
            .execute(&mut *conn)
            .await?;
        }
        if !self.jobs.is_empty() {
            JobRow::upsert(writes, &qualified("jobs"), &self.jobs);
        }
        if !self.new_attempts.is_empty() {
            AttemptRow::insert(writes, &qualified("attempts"), &self.new_attempts);
        }
        if !self.changed_attempts.is_empty() {
            AttemptRow::update(writes, &qualified("attempts"), &self.changed_attempts);
        }
        if !self.new_leases.is_empty() {
            LeaseRow::insert(writes, &qualified("leases"), &self.new_leases);
        }
        if !self.changed_leases.is_empty() {
            // Typed arrays, not a JSON record set: nothing to parse, and
            // the join is planned at a few rows, a lookup by key each
            // (167 leases: 3.5 ms against 5.6, docs/BENCHMARKS.md).
            let changed = &self.changed_leases;
            writes
                .part(&format!(
                    "UPDATE {} l SET expires_at = r.expires_at, active = r.active
                     FROM unnest($1::uuid[], $2::int8[], $3::timestamptz[], $4::bool[])
                          AS r(attempt_id, epoch, expires_at, active)
                     WHERE l.attempt_id = r.attempt_id AND l.epoch = r.epoch",
                    qualified("leases")
                ))
                .bind(
                    changed
                        .iter()
                        .map(|lease| lease.attempt_id)
                        .collect::<Vec<_>>(),
                )
                .bind(changed.iter().map(|lease| lease.epoch).collect::<Vec<_>>())
                .bind(
                    changed
                        .iter()
                        .map(|lease| lease.expires_at)
                        .collect::<Vec<_>>(),
                )
                .bind(changed.iter().map(|lease| lease.active).collect::<Vec<_>>());
        }
        if !self.target_keys.is_empty() {
            TargetKeyRow::insert(writes, &qualified("target_keys"), &self.target_keys);
        }
        Ok(())
    }
}

#[derive(Default)]
struct EventColumns {
    event_id: Vec<Uuid>,
    attempt_id: Vec<Uuid>,
    job_id: Vec<String>,
    seq: Vec<i64>,
    kind: Vec<String>,
    terminal: Vec<bool>,
    occurred_at: Vec<chrono::DateTime<chrono::Utc>>,
    payload: Vec<Vec<u8>>,
    prev_hash: Vec<Vec<u8>>,
    hash: Vec<Vec<u8>>,
    traceparent: Vec<Option<String>>,
    tracestate: Vec<Option<String>>,
}

impl EventColumns {
    fn push(
        &mut self,
        event: &AttemptEvent,
        payload: Vec<u8>,
        prev_hash: [u8; 32],
        hash: [u8; 32],
        trace: Option<&crate::contract::TraceContext>,
    ) {
        self.event_id.push(event.event_id);
        self.attempt_id.push(event.attempt_id);
        self.job_id.push(event.job_id.clone());
        self.seq.push(i64::try_from(event.seq).unwrap_or(i64::MAX));
        self.kind.push(event.body.kind().to_owned());
        self.terminal.push(event.body.is_terminal());
        self.occurred_at.push(timestamp(event.occurred_at));
        self.payload.push(payload);
        self.prev_hash.push(prev_hash.to_vec());
        self.hash.push(hash.to_vec());
        self.traceparent
            .push(trace.map(|trace| trace.traceparent.clone()));
        self.tracestate
            .push(trace.and_then(|trace| trace.tracestate.clone()));
    }

    /// The events' part of `writes`. `position` is the identity's next
    /// value, taken under the append lock the insert's statement trigger
    /// takes before its first row (migrations 0018, 0021).
    fn insert(&self, writes: &mut Writes) {
        writes
            .part(&unnest_insert_sql("attempt_events", EVENT_COLUMNS, None))
            .bind(&self.event_id)
            .bind(&self.attempt_id)
            .bind(&self.job_id)
            .bind(&self.seq)
            .bind(&self.kind)
            .bind(&self.terminal)
            .bind(&self.occurred_at)
            .bind(&self.payload)
            .bind(vec![
                Codec::fingerprint(Family::AttemptEvent) as i64;
                self.event_id.len()
            ])
            .bind(&self.prev_hash)
            .bind(&self.hash)
            .bind(&self.traceparent)
            .bind(&self.tracestate);
    }
}

/// The columns an appended event is written with, in `EventColumns::insert`'s order.
const EVENT_COLUMNS: &[(&str, &str)] = &[
    ("event_id", "uuid"),
    ("attempt_id", "uuid"),
    ("job_id", "text"),
    ("seq", "int8"),
    ("kind", "text"),
    ("terminal", "bool"),
    ("occurred_at", "timestamptz"),
    ("payload", "bytea"),
    ("schema_fingerprint", "int8"),
    ("prev_hash", "bytea"),
    ("hash", "bytea"),
    ("traceparent", "text"),
    ("tracestate", "text"),
];
