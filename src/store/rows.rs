//! Projection rows: one struct per table, field names equal to column names,
//! written through one typed array per column (`unnest_insert_sql`), as
//! parts of one statement (`Writes`), by the one write function the live
//! writer and the rebuild share; read as JSON (`to_jsonb`) except where the
//! hot path reads typed columns (`AttemptRow::from_pg`,
//! `LeaseRow::from_joined`).

use chrono::{DateTime, Utc};
use serde::{de::DeserializeOwned, Serialize};
use uuid::Uuid;

use super::StoreError;
use crate::attempt::{Attempt, JobState};
use crate::contract::{AttemptStatus, CancelInfo, JobSpec, LeaseInfo, Operation, UnixMillis};

pub(crate) fn timestamp(millis: UnixMillis) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

pub(crate) fn millis(timestamp: DateTime<Utc>) -> UnixMillis {
    timestamp.timestamp_millis()
}

/// A serde enum as its plain string (`"lease_lost"`).
pub(crate) fn enum_text<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(text)) => text,
        other => format!("{other:?}"),
    }
}

pub(crate) fn parse_enum<T: DeserializeOwned>(text: &str, column: &str) -> Result<T, StoreError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| StoreError::Corrupt(format!("`{text}` is not a valid {column}")))
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct JobRow {
    pub job_id: String,
    pub command_id: Uuid,
    pub tenant: String,
    pub operation: String,
    pub spec: Option<std::sync::Arc<JobSpec>>,
    pub attempts: i32,
    pub latest_attempt_id: Uuid,
    pub created_at: DateTime<Utc>,
}

const JOB_COLUMNS: &[(&str, &str)] = &[
    ("job_id", "text"),
    ("command_id", "uuid"),
    ("tenant", "text"),
    ("operation", "text"),
    ("spec", "jsonb"),
    ("attempts", "int4"),
    ("latest_attempt_id", "uuid"),
    ("created_at", "timestamptz"),
];

impl JobRow {
    /// Inserts `rows` into `table` (`jobs`), or updates the rows they
    /// replace: a part of `writes` ([`unnest_insert_sql`]).
    pub(crate) fn upsert(writes: &mut Writes, table: &str, rows: &[JobRow]) {
        use sqlx::types::Json;
        // In the order of JOB_COLUMNS.
        writes
            .part(&unnest_insert_sql(table, JOB_COLUMNS, Some("job_id")))
            .bind(column(rows, |row| row.job_id.as_str()))
            .bind(column(rows, |row| row.command_id))
            .bind(column(rows, |row| row.tenant.as_str()))
            .bind(column(rows, |row| row.operation.as_str()))
            .bind(column(rows, |row| row.spec.as_deref().map(Json)))
            .bind(column(rows, |row| row.attempts))
            .bind(column(rows, |row| row.latest_attempt_id))
            .bind(column(rows, |row| row.created_at));
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AttemptRow {
    pub attempt_id: Uuid,
    pub job_id: String,
    pub attempt_no: i32,
    pub command_id: Uuid,
    pub tenant: String,
    pub operation: String,
    pub runner_type: Option<String>,
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub available_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub previous_attempt_id: Option<Uuid>,
    pub policy_digest: Option<String>,
    pub target_keys: Vec<crate::contract::TargetKey>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub cancel_reason: Option<String>,
    pub cancel_requested_by: Option<String>,
    pub cancel_requested_at: Option<DateTime<Utc>>,
    pub cancel_grace_deadline: Option<DateTime<Utc>>,
    pub progress: Option<String>,
    pub progress_percent: Option<i16>,
    pub outcome: Option<String>,
    pub failure_category: Option<String>,
    pub message: Option<String>,
    pub result_json: Option<String>,
    pub outputs: Vec<crate::contract::OutputArtifact>,
    pub timer_fired: Option<String>,
    pub retry_attempt_id: Option<Uuid>,
    pub fenced_reports: i32,
    pub callback_delivered: Option<bool>,
    pub callback_topic_delivered: Option<bool>,
    pub plan_approval: Option<crate::attempt::PlanApproval>,
    pub last_seq: i64,
    pub last_hash: Vec<u8>,
    /// The armed deadline due first ([`Attempt::next_deadline`]).
    pub next_deadline: Option<DateTime<Utc>>,
    pub next_timer: Option<String>,
}

impl AttemptRow {
    /// Reads the row from a query that selects `attempts` columns by name
    /// (`a.*`): typed columns, where `to_jsonb` costs Postgres a JSON
    /// document per row and this side a parse of it (the batch load reads
    /// every touched attempt, docs/BENCHMARKS.md).
    pub(crate) fn from_pg(row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::types::Json;
        use sqlx::Row;
        Ok(Self {
            attempt_id: row.try_get("attempt_id")?,
            job_id: row.try_get("job_id")?,
            attempt_no: row.try_get("attempt_no")?,
            command_id: row.try_get("command_id")?,
            tenant: row.try_get("tenant")?,
            operation: row.try_get("operation")?,
            runner_type: row.try_get("runner_type")?,
            status: row.try_get("status")?,
            created_at: row.try_get("created_at")?,
            available_at: row.try_get("available_at")?,
            updated_at: row.try_get("updated_at")?,
            previous_attempt_id: row.try_get("previous_attempt_id")?,
            policy_digest: row.try_get("policy_digest")?,
            target_keys: row.try_get::<Json<_>, _>("target_keys")?.0,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            cancel_reason: row.try_get("cancel_reason")?,
            cancel_requested_by: row.try_get("cancel_requested_by")?,
            cancel_requested_at: row.try_get("cancel_requested_at")?,
            cancel_grace_deadline: row.try_get("cancel_grace_deadline")?,
            progress: row.try_get("progress")?,
            progress_percent: row.try_get("progress_percent")?,
            outcome: row.try_get("outcome")?,
            failure_category: row.try_get("failure_category")?,
            message: row.try_get("message")?,
            result_json: row.try_get("result_json")?,
            outputs: row.try_get::<Json<_>, _>("outputs")?.0,
            timer_fired: row.try_get("timer_fired")?,
            retry_attempt_id: row.try_get("retry_attempt_id")?,
            fenced_reports: row.try_get("fenced_reports")?,
            callback_delivered: row.try_get("callback_delivered")?,
            callback_topic_delivered: row.try_get("callback_topic_delivered")?,
            plan_approval: row
                .try_get::<Option<Json<_>>, _>("plan_approval")?
                .map(|json| json.0),
            last_seq: row.try_get("last_seq")?,
            last_hash: row.try_get("last_hash")?,
            next_deadline: row.try_get("next_deadline")?,
            next_timer: row.try_get("next_timer")?,
        })
    }
}

/// The columns of `attempts` a write sets, with their types: one typed
/// array each ([`AttemptRow::insert`], [`AttemptRow::update`]).
const ATTEMPT_COLUMNS: &[(&str, &str)] = &[
    ("attempt_id", "uuid"),
    ("job_id", "text"),
    ("attempt_no", "int4"),
    ("command_id", "uuid"),
    ("tenant", "text"),
    ("operation", "text"),
    ("runner_type", "text"),
    ("status", "text"),
    ("created_at", "timestamptz"),
    ("available_at", "timestamptz"),
    ("updated_at", "timestamptz"),
    ("previous_attempt_id", "uuid"),
    ("policy_digest", "text"),
    ("target_keys", "jsonb"),
    ("started_at", "timestamptz"),
    ("finished_at", "timestamptz"),
    ("cancel_reason", "text"),
    ("cancel_requested_by", "text"),
    ("cancel_requested_at", "timestamptz"),
    ("cancel_grace_deadline", "timestamptz"),
    ("progress", "text"),
    ("progress_percent", "int2"),
    ("outcome", "text"),
    ("failure_category", "text"),
    ("message", "text"),
    ("result_json", "text"),
    ("outputs", "jsonb"),
    ("timer_fired", "text"),
    ("retry_attempt_id", "uuid"),
    ("fenced_reports", "int4"),
    ("callback_delivered", "bool"),
    ("callback_topic_delivered", "bool"),
    ("plan_approval", "jsonb"),
    ("last_seq", "int8"),
    ("last_hash", "bytea"),
    ("next_deadline", "timestamptz"),
    ("next_timer", "text"),
];

impl AttemptRow {
    /// Inserts `rows`, attempts new to `table` (`attempts`, qualified or
    /// not): a part of `writes` ([`unnest_insert_sql`]). An attempt that
    /// is already there is refused, not overwritten.
    pub(crate) fn insert(writes: &mut Writes, table: &str, rows: &[AttemptRow]) {
        Self::bind(
            writes.part(&unnest_insert_sql(table, ATTEMPT_COLUMNS, None)),
            rows,
        );
    }

    /// Replaces the rows of `table` that `rows` name by id
    /// ([`unnest_update_sql`]): an update finds its row by key, with no
    /// insert to try first as an upsert does.
    pub(crate) fn update(writes: &mut Writes, table: &str, rows: &[AttemptRow]) {
        Self::bind(
            writes.part(&unnest_update_sql(table, ATTEMPT_COLUMNS, "attempt_id")),
            rows,
        );
    }

    /// One typed array per column, in the order of ATTEMPT_COLUMNS.
    fn bind(writes: &mut Writes, rows: &[AttemptRow]) {
        use sqlx::types::Json;
        writes
            .bind(column(rows, |row| row.attempt_id))
            .bind(column(rows, |row| row.job_id.as_str()))
            .bind(column(rows, |row| row.attempt_no))
            .bind(column(rows, |row| row.command_id))
            .bind(column(rows, |row| row.tenant.as_str()))
            .bind(column(rows, |row| row.operation.as_str()))
            .bind(column(rows, |row| row.runner_type.as_deref()))
            .bind(column(rows, |row| row.status.as_str()))
            .bind(column(rows, |row| row.created_at))
            .bind(column(rows, |row| row.available_at))
            .bind(column(rows, |row| row.updated_at))
            .bind(column(rows, |row| row.previous_attempt_id))
            .bind(column(rows, |row| row.policy_digest.as_deref()))
            .bind(column(rows, |row| Json(&row.target_keys)))
            .bind(column(rows, |row| row.started_at))
            .bind(column(rows, |row| row.finished_at))
            .bind(column(rows, |row| row.cancel_reason.as_deref()))
            .bind(column(rows, |row| row.cancel_requested_by.as_deref()))
            .bind(column(rows, |row| row.cancel_requested_at))
            .bind(column(rows, |row| row.cancel_grace_deadline))
            .bind(column(rows, |row| row.progress.as_deref()))
            .bind(column(rows, |row| row.progress_percent))
            .bind(column(rows, |row| row.outcome.as_deref()))
            .bind(column(rows, |row| row.failure_category.as_deref()))
            .bind(column(rows, |row| row.message.as_deref()))
            .bind(column(rows, |row| row.result_json.as_deref()))
            .bind(column(rows, |row| Json(&row.outputs)))
            .bind(column(rows, |row| row.timer_fired.as_deref()))
            .bind(column(rows, |row| row.retry_attempt_id))
            .bind(column(rows, |row| row.fenced_reports))
            .bind(column(rows, |row| row.callback_delivered))
            .bind(column(rows, |row| row.callback_topic_delivered))
            .bind(column(rows, |row| row.plan_approval.as_ref().map(Json)))
            .bind(column(rows, |row| row.last_seq))
            .bind(column(rows, |row| row.last_hash.as_slice()))
            .bind(column(rows, |row| row.next_deadline))
            .bind(column(rows, |row| row.next_timer.as_deref()));
    }
}

/// `INSERT INTO table (columns) SELECT * FROM UNNEST($1::type[], ...)`,
/// upserting on `conflict` if given: one typed array per column, nothing
/// for Postgres to parse. Through a JSON record set
/// (`jsonb_populate_recordset`) an attempts row cost it about five times
/// as much (docs/BENCHMARKS.md, "Commands without inbox rows, typed arrays
/// for the projection's rows").
pub(crate) fn unnest_insert_sql(
    table: &str,
    columns: &[(&str, &str)],
    conflict: Option<&str>,
) -> String {
    let (names, arrays) = typed_arrays(columns);
    let mut sql = format!(
        "INSERT INTO {table} ({}) SELECT * FROM UNNEST({})",
        names.join(", "),
        arrays.join(", ")
    );
    if let Some(key) = conflict {
        let updated: Vec<&str> = names.iter().copied().filter(|name| *name != key).collect();
        let excluded: Vec<String> = updated
            .iter()
            .map(|name| format!("EXCLUDED.{name}"))
            .collect();
        sql.push_str(&format!(
            " ON CONFLICT ({key}) DO UPDATE SET ({}) = ROW({})",
            updated.join(", "),
            excluded.join(", ")
        ));
    }
    sql
}

/// `UPDATE table t SET (columns) = (r.columns) FROM UNNEST(...) AS r
/// WHERE t.key = r.key`: every column but `key` replaced, one typed array
/// per column as in [`unnest_insert_sql`], `key` among them.
pub(crate) fn unnest_update_sql(table: &str, columns: &[(&str, &str)], key: &str) -> String {
    let (names, arrays) = typed_arrays(columns);
    let updated: Vec<&str> = names.iter().copied().filter(|name| *name != key).collect();
    let from_r: Vec<String> = updated.iter().map(|name| format!("r.{name}")).collect();
    format!(
        "UPDATE {table} t SET ({}) = ROW({}) FROM UNNEST({}) AS r({}) WHERE t.{key} = r.{key}",
        updated.join(", "),
        from_r.join(", "),
        arrays.join(", "),
        names.join(", ")
    )
}

/// The columns' names, and their parameters as typed arrays
/// (`$1::uuid[]`, ...).
fn typed_arrays<'a>(columns: &[(&'a str, &str)]) -> (Vec<&'a str>, Vec<String>) {
    columns
        .iter()
        .enumerate()
        .map(|(index, (name, kind))| (*name, format!("${}::{kind}[]", index + 1)))
        .unzip()
}

/// One column of `rows`, for a typed array.
fn column<'a, R, T>(rows: &'a [R], value: impl Fn(&'a R) -> T) -> Vec<T> {
    rows.iter().map(value).collect()
}

/// `sql` with each parameter `$n` written `$(n + by)`. Parameters only:
/// the parts hold no other `$` followed by a digit.
fn renumbered(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if let Ok(number) = rest[..digits].parse::<usize>() {
            out.push_str(&(number + by).to_string());
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// Data-modifying statements sent as one, each a part of a `WITH`: a
/// batch's writes cost one round trip, not one a table
/// (docs/ARCHITECTURE.md, "The write path"). A part is written with its
/// parameters numbered from `$1`, and renumbered after those of the parts
/// added before it. No part sees the rows another writes, so no two parts
/// may write one row; a foreign key (the callbacks') is checked
/// once every part has run.
pub(crate) struct Writes {
    parts: Vec<String>,
    arguments: sqlx::postgres::PgArguments,
    /// The first value that could not be encoded, reported by `execute`.
    unencodable: Option<sqlx::error::BoxDynError>,
}

impl Writes {
    pub(crate) fn new() -> Self {
        Self {
            parts: Vec::new(),
            arguments: Default::default(),
            unencodable: None,
        }
    }

    /// Adds a part, its parameters (`$1`, `$2`, ...) bound next, in
    /// order.
    pub(crate) fn part(&mut self, sql: &str) -> &mut Self {
        let before = sqlx::Arguments::len(&self.arguments);
        self.parts.push(renumbered(sql, before));
        self
    }

    pub(crate) fn bind<'q, T>(&mut self, value: T) -> &mut Self
    where
        T: sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + 'q,
    {
        if self.unencodable.is_none() {
            if let Err(error) = sqlx::Arguments::add(&mut self.arguments, value) {
                self.unencodable = Some(error);
            }
        }
        self
    }

    /// Runs the parts as one statement. Postgres's documentation leaves
    /// the order of its parts open; Postgres 15 runs a statement's own
    /// part first and then its `WITH` parts from the last listed to the
    /// first, so they are listed in reverse, to run in the order they were
    /// added. Nothing but how long a lock taken by a later part is held
    /// (the append lock: docs/ARCHITECTURE.md, "Relay") depends on that
    /// order.
    pub(crate) async fn execute(self, conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
        if let Some(error) = self.unencodable {
            return Err(sqlx::Error::Encode(error));
        }
        if self.parts.is_empty() {
            return Ok(());
        }
        sqlx::query_with(&self.sql(), self.arguments)
            .execute(conn)
            .await?;
        Ok(())
    }

    /// The parts as one statement: the first the statement's own, the
    /// rest `WITH` parts from the last added to the second.
    fn sql(&self) -> String {
        use std::fmt::Write;
        let Some((first, rest)) = self.parts.split_first() else {
            return String::new();
        };
        let mut sql = String::new();
        for (index, part) in rest.iter().enumerate().rev() {
            let lead = if sql.is_empty() { "WITH" } else { "," };
            let _ = write!(sql, "{lead} w{index} AS ({part})");
        }
        if !sql.is_empty() {
            sql.push(' ');
        }
        sql.push_str(first);
        sql
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LeaseRow {
    pub lease_id: Uuid,
    pub attempt_id: Uuid,
    pub job_id: String,
    pub epoch: i64,
    pub runner_instance: String,
    pub granted_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub active: bool,
}

const LEASE_COLUMNS: &[(&str, &str)] = &[
    ("lease_id", "uuid"),
    ("attempt_id", "uuid"),
    ("job_id", "text"),
    ("epoch", "int8"),
    ("runner_instance", "text"),
    ("granted_at", "timestamptz"),
    ("expires_at", "timestamptz"),
    ("active", "bool"),
];

impl LeaseRow {
    /// Inserts `rows` into `table` (`leases`): a part of `writes`
    /// ([`unnest_insert_sql`]). No upsert: a second lease for an attempt
    /// is refused.
    pub(crate) fn insert(writes: &mut Writes, table: &str, rows: &[LeaseRow]) {
        // In the order of LEASE_COLUMNS.
        writes
            .part(&unnest_insert_sql(table, LEASE_COLUMNS, None))
            .bind(column(rows, |row| row.lease_id))
            .bind(column(rows, |row| row.attempt_id))
            .bind(column(rows, |row| row.job_id.as_str()))
            .bind(column(rows, |row| row.epoch))
            .bind(column(rows, |row| row.runner_instance.as_str()))
            .bind(column(rows, |row| row.granted_at))
            .bind(column(rows, |row| row.expires_at))
            .bind(column(rows, |row| row.active));
    }
}

/// One target key of a live attempt: waiting for it (queued) or holding it
/// (leased to its end). Terminal attempts have none.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TargetKeyRow {
    pub key: String,
    pub attempt_id: Uuid,
    pub key_limit: i32,
    pub holding: bool,
    pub available_at: DateTime<Utc>,
}

const TARGET_KEY_COLUMNS: &[(&str, &str)] = &[
    ("key", "text"),
    ("attempt_id", "uuid"),
    ("key_limit", "int4"),
    ("holding", "bool"),
    ("available_at", "timestamptz"),
];

impl TargetKeyRow {
    /// Inserts `rows` into `table` (`target_keys`): a part of `writes`
    /// ([`unnest_insert_sql`]).
    pub(crate) fn insert(writes: &mut Writes, table: &str, rows: &[TargetKeyRow]) {
        // In the order of TARGET_KEY_COLUMNS.
        writes
            .part(&unnest_insert_sql(table, TARGET_KEY_COLUMNS, None))
            .bind(column(rows, |row| row.key.as_str()))
            .bind(column(rows, |row| row.attempt_id))
            .bind(column(rows, |row| row.key_limit))
            .bind(column(rows, |row| row.holding))
            .bind(column(rows, |row| row.available_at));
    }
}

pub(crate) fn target_key_rows(attempt: &Attempt) -> Vec<TargetKeyRow> {
    if attempt.is_terminal() {
        return Vec::new();
    }
    attempt
        .target_keys
        .iter()
        .map(|key| TargetKeyRow {
            key: key.key.clone(),
            attempt_id: attempt.attempt_id,
            key_limit: i32::try_from(key.limit).unwrap_or(i32::MAX),
            holding: attempt.holds_keys(),
            available_at: timestamp(attempt.available_at),
        })
        .collect()
}

pub(crate) fn job_row(state: &JobState) -> Option<JobRow> {
    let first = state.attempts.first()?;
    let latest = state.latest()?;
    Some(JobRow {
        job_id: first.job_id.clone(),
        command_id: first.command_id,
        tenant: first.tenant.clone(),
        operation: first.operation.clone(),
        spec: first.spec.clone(),
        attempts: i32::try_from(latest.attempt_no).unwrap_or(i32::MAX),
        latest_attempt_id: latest.attempt_id,
        created_at: timestamp(first.created_at),
    })
}

pub(crate) fn attempt_row(attempt: &Attempt, last_hash: &[u8]) -> AttemptRow {
    let cancel = attempt.cancel.as_ref();
    let next = attempt.next_deadline();
    AttemptRow {
        attempt_id: attempt.attempt_id,
        job_id: attempt.job_id.clone(),
        attempt_no: i32::try_from(attempt.attempt_no).unwrap_or(i32::MAX),
        command_id: attempt.command_id,
        tenant: attempt.tenant.clone(),
        operation: attempt.operation.clone(),
        runner_type: attempt
            .operation
            .parse::<Operation>()
            .ok()
            .map(|operation| operation.runner_type().as_str().to_owned()),
        status: attempt.status.as_str().to_owned(),
        created_at: timestamp(attempt.created_at),
        available_at: timestamp(attempt.available_at),
        updated_at: timestamp(attempt.updated_at),
        previous_attempt_id: attempt.previous_attempt_id,
        policy_digest: attempt.policy_digest.clone(),
        target_keys: attempt.target_keys.clone(),
        started_at: attempt.started_at.map(timestamp),
        finished_at: attempt.finished_at.map(timestamp),
        cancel_reason: cancel.map(|cancel| cancel.reason.clone()),
        cancel_requested_by: cancel.map(|cancel| cancel.requested_by.clone()),
        cancel_requested_at: cancel.map(|cancel| timestamp(cancel.requested_at)),
        cancel_grace_deadline: cancel.map(|cancel| timestamp(cancel.grace_deadline)),
        progress: attempt.progress.clone(),
        progress_percent: attempt.progress_percent.map(i16::from),
        outcome: attempt.outcome.as_ref().map(enum_text),
        failure_category: attempt.failure_category.as_ref().map(enum_text),
        message: attempt.message.clone(),
        result_json: attempt.result_json.clone(),
        outputs: attempt.outputs.clone(),
        timer_fired: attempt.timer_fired.map(|timer| timer.as_str().to_owned()),
        retry_attempt_id: attempt.retry_attempt_id,
        fenced_reports: i32::try_from(attempt.fenced_reports).unwrap_or(i32::MAX),
        callback_delivered: attempt.callback_delivered,
        callback_topic_delivered: attempt.callback_topic_delivered,
        plan_approval: attempt.plan_approval.clone(),
        last_seq: i64::try_from(attempt.last_seq).unwrap_or(i64::MAX),
        last_hash: last_hash.to_vec(),
        next_deadline: next.map(|(_, due)| timestamp(due)),
        next_timer: next.map(|(kind, _)| kind.as_str().to_owned()),
    }
}

pub(crate) fn lease_row(attempt: &Attempt) -> Option<LeaseRow> {
    let lease = attempt.lease.as_ref()?;
    Some(LeaseRow {
        lease_id: lease.lease_id,
        attempt_id: attempt.attempt_id,
        job_id: attempt.job_id.clone(),
        epoch: i64::try_from(lease.epoch).unwrap_or(i64::MAX),
        runner_instance: lease.runner_instance.clone(),
        granted_at: timestamp(lease.granted_at),
        expires_at: timestamp(lease.expires_at),
        active: lease.active,
    })
}

/// An attempt's lease, read in the attempt's row through `LEFT JOIN leases
/// l` with these columns (typed, not `to_jsonb(l)`: see
/// `AttemptRow::from_pg`), prefixed so that none meets one of the attempt's.
pub(crate) const LEASE_JOINED: &str = "l.lease_id AS lease_lease_id, \
     l.attempt_id AS lease_attempt_id, l.job_id AS lease_job_id, l.epoch AS lease_epoch, \
     l.runner_instance AS lease_runner_instance, l.granted_at AS lease_granted_at, \
     l.expires_at AS lease_expires_at, l.active AS lease_active";

impl LeaseRow {
    /// The lease read through [`LEASE_JOINED`], or `None` where the attempt
    /// has none.
    pub(crate) fn from_joined(row: &sqlx::postgres::PgRow) -> Result<Option<Self>, StoreError> {
        use sqlx::Row;
        let read = || -> Result<Option<Self>, sqlx::Error> {
            let Some(lease_id) = row.try_get("lease_lease_id")? else {
                return Ok(None);
            };
            Ok(Some(Self {
                lease_id,
                attempt_id: row.try_get("lease_attempt_id")?,
                job_id: row.try_get("lease_job_id")?,
                epoch: row.try_get("lease_epoch")?,
                runner_instance: row.try_get("lease_runner_instance")?,
                granted_at: row.try_get("lease_granted_at")?,
                expires_at: row.try_get("lease_expires_at")?,
                active: row.try_get("lease_active")?,
            }))
        };
        read().map_err(|error| StoreError::Corrupt(format!("leases row: {error}")))
    }
}

/// A lease as the attempt holds it, from its row.
pub(crate) fn lease_info(lease: LeaseRow) -> LeaseInfo {
    LeaseInfo {
        lease_id: lease.lease_id,
        epoch: u64::try_from(lease.epoch).unwrap_or(0),
        runner_instance: lease.runner_instance,
        granted_at: millis(lease.granted_at),
        expires_at: millis(lease.expires_at),
        active: lease.active,
    }
}

/// Rebuilds the in-memory attempt from its projection rows.
pub(crate) fn attempt_from_rows(
    row: AttemptRow,
    spec: Option<&std::sync::Arc<JobSpec>>,
    lease: Option<LeaseRow>,
) -> Result<Attempt, StoreError> {
    let status = AttemptStatus::parse(&row.status).ok_or_else(|| {
        StoreError::Corrupt(format!(
            "attempt {}: unknown status `{}`",
            row.attempt_id, row.status
        ))
    })?;
    let cancel = match (
        row.cancel_reason,
        row.cancel_requested_by,
        row.cancel_requested_at,
        row.cancel_grace_deadline,
    ) {
        (Some(reason), Some(requested_by), Some(requested_at), Some(grace_deadline)) => {
            Some(CancelInfo {
                reason,
                requested_by,
                requested_at: millis(requested_at),
                grace_deadline: millis(grace_deadline),
            })
        }
        _ => None,
    };
    Ok(Attempt {
        attempt_id: row.attempt_id,
        job_id: row.job_id,
        command_id: row.command_id,
        attempt_no: u32::try_from(row.attempt_no).unwrap_or(0),
        tenant: row.tenant,
        operation: row.operation,
        spec: spec.cloned(),
        status,
        created_at: millis(row.created_at),
        available_at: millis(row.available_at),
        updated_at: millis(row.updated_at),
        previous_attempt_id: row.previous_attempt_id,
        policy_digest: row.policy_digest,
        target_keys: row.target_keys,
        lease: lease.map(lease_info),
        started_at: row.started_at.map(millis),
        cancel,
        progress: row.progress,
        progress_percent: row
            .progress_percent
            .and_then(|value| u8::try_from(value).ok()),
        outcome: row
            .outcome
            .as_deref()
            .map(|text| parse_enum(text, "outcome"))
            .transpose()?,
        failure_category: row
            .failure_category
            .as_deref()
            .map(|text| parse_enum(text, "failure category"))
            .transpose()?,
        message: row.message,
        result_json: row.result_json,
        outputs: row.outputs,
        finished_at: row.finished_at.map(millis),
        timer_fired: row
            .timer_fired
            .as_deref()
            .map(|text| {
                crate::contract::TimerKind::parse(text)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown timer `{text}`")))
            })
            .transpose()?,
        retry_attempt_id: row.retry_attempt_id,
        fenced_reports: u32::try_from(row.fenced_reports).unwrap_or(0),
        callback_delivered: row.callback_delivered,
        callback_topic_delivered: row.callback_topic_delivered,
        plan_approval: row.plan_approval,
        last_seq: u64::try_from(row.last_seq).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_renumbered_after_the_parts_before_it() {
        let sql = "UPDATE t SET a = $2 FROM unnest($1::text[], $10::int8[]) WHERE $$x$$ = 'US$'";
        assert_eq!(renumbered(sql, 0), sql);
        assert_eq!(
            renumbered(sql, 37),
            "UPDATE t SET a = $39 FROM unnest($38::text[], $47::int8[]) WHERE $$x$$ = 'US$'"
        );
    }

    #[test]
    fn parts_are_listed_so_that_they_run_in_the_order_added() {
        let mut writes = Writes::new();
        writes.part("INSERT INTO a SELECT $1").bind(1i32);
        writes.part("INSERT INTO b SELECT $1").bind(2i32);
        writes
            .part("INSERT INTO c SELECT $1, $2")
            .bind(3i32)
            .bind(4i32);
        assert_eq!(
            writes.sql(),
            "WITH w1 AS (INSERT INTO c SELECT $3, $4), w0 AS (INSERT INTO b SELECT $2) \
             INSERT INTO a SELECT $1"
        );
    }
}
