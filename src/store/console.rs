//! What the operator console reads (docs/INGRESS.md, "The console"): counts
//! for the overview, attempt pages by cursor, plans awaiting approval. Each
//! takes the tenants the reader may see (`None`: every tenant).

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::{Store, StoreError};

/// The overview's counts.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Overview {
    /// (status, attempts) of the attempts that have not ended, every such
    /// status, zero included.
    pub by_state: Vec<(String, i64)>,
    /// The attempts that ended most recently: those of the last hour, or
    /// the newest [`ENDED_READ_LIMIT`] endings of every tenant if the hour
    /// holds more.
    pub ended: Ended,
    /// (runner type, live instances, capacity, in flight).
    pub runners: Vec<(String, i64, i64, i64)>,
}

/// At most this many ended attempts are read for the overview's counts:
/// reading every attempt that ended in the last hour costs the hour's rate
/// (3.6 million rows at 1,000 attempts/s) on each load.
pub const ENDED_READ_LIMIT: i64 = 100_000;

/// Attempts ended since `since`, by (status, failure category), of the
/// tenants the reader may see.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Ended {
    pub counts: Vec<(String, Option<String>, i64)>,
    /// An hour before the read, or where the newest endings read begin
    /// when the hour holds more than the limit (`capped`).
    pub since: DateTime<Utc>,
    pub capped: bool,
}

/// Which attempts a listing shows.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct AttemptFilter {
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub operation: Option<String>,
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub runner_type: Option<String>,
    #[serde(default)]
    pub job_id: Option<String>,
}

/// Where a page of attempts starts: after this (created_at, attempt_id),
/// newest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: DateTime<Utc>,
    pub attempt_id: Uuid,
}

impl Cursor {
    /// `<unix micros>.<attempt id>`: opaque to readers, exact for Postgres.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_at.timestamp_micros(), self.attempt_id)
    }

    pub fn decode(text: &str) -> Option<Self> {
        let (micros, id) = text.split_once('.')?;
        // 1970 to 9999: what Postgres holds and execplane writes.
        let micros: i64 = micros.parse().ok()?;
        if !(0..=253_402_300_799_999_999).contains(&micros) {
            return None;
        }
        Some(Self {
            created_at: DateTime::from_timestamp_micros(micros)?,
            attempt_id: Uuid::parse_str(id).ok()?,
        })
    }
}

/// One line of the attempts list.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AttemptLine {
    pub attempt_id: Uuid,
    pub job_id: String,
    pub attempt_no: i32,
    pub tenant: String,
    pub operation: String,
    pub runner_type: Option<String>,
    pub status: String,
    pub failure_category: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A plan that waits for its approval.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AwaitingPlan {
    pub attempt_id: Uuid,
    pub job_id: String,
    pub tenant: String,
    pub requested_by: Option<String>,
    pub spec: Option<serde_json::Value>,
    pub result_json: Option<String>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// The most attempts one page of the console's list walks, newest first
/// from its cursor, to find its lines: a filter or a tenant that matches
/// few of them (a small tenant among large ones) would otherwise walk the
/// whole table for a page. A page that found fewer than its lines within
/// the walk links to the next stretch.
pub const MAX_WALKED: i64 = 10_000;

/// The attempts page's query (public for the test that reads its plan):
/// at most [`MAX_WALKED`] attempts from the cursor over `attempts_newest`,
/// then the tenants' and the filter's among them (a job's, by job id,
/// without a walk).
pub fn attempts_page<'a>(
    tenants: Option<&'a [String]>,
    filter: &'a AttemptFilter,
    cursor: Option<Cursor>,
    limit: i64,
) -> sqlx::QueryBuilder<'a, sqlx::Postgres> {
    const COLUMNS: &str = "attempt_id, job_id, attempt_no, tenant, operation, runner_type, \
                           status, failure_category, created_at, updated_at";
    let mut query = sqlx::QueryBuilder::new(format!("SELECT {COLUMNS} FROM "));
    if filter.job_id.is_some() {
        // One job's attempts are found by `(job_id, attempt_no)`, however
        // old: no walk.
        query.push("attempts AS walked WHERE true");
        push_after(&mut query, cursor);
    } else {
        query.push(format!("(SELECT {COLUMNS} FROM attempts WHERE true"));
        push_after(&mut query, cursor);
        query
            .push(" ORDER BY created_at DESC, attempt_id DESC LIMIT ")
            .push_bind(MAX_WALKED)
            .push(") AS walked WHERE true");
    }
    if let Some(tenants) = tenants {
        query
            .push(" AND tenant = ANY(")
            .push_bind(tenants)
            .push(")");
    }
    for (column, value) in [
        ("status", &filter.state),
        ("operation", &filter.operation),
        ("tenant", &filter.tenant),
        ("runner_type", &filter.runner_type),
        ("job_id", &filter.job_id),
    ] {
        if let Some(value) = value {
            query
                .push(format!(" AND {column} = "))
                .push_bind(value.as_str());
        }
    }
    query
        .push(" ORDER BY created_at DESC, attempt_id DESC LIMIT ")
        .push_bind(limit);
    query
}

/// ` AND (created_at, attempt_id) < cursor`, when there is one.
fn push_after(query: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>, cursor: Option<Cursor>) {
    if let Some(cursor) = cursor {
        query
            .push(" AND (created_at, attempt_id) < (")
            .push_bind(cursor.created_at)
            .push(", ")
            .push_bind(cursor.attempt_id)
            .push(")");
    }
}

/// One page of the console's list, and where the next starts: after its
/// last line, or, when the walk found fewer than a page, after the last
/// attempt it walked (`sparse`).
#[derive(Clone, Debug, Default)]
pub struct AttemptsPage {
    pub lines: Vec<AttemptLine>,
    pub next: Option<Cursor>,
    pub sparse: bool,
}

impl Store {
    pub async fn console_overview(
        &self,
        tenants: Option<&[String]>,
        fresh_after: DateTime<Utc>,
    ) -> Result<Overview, StoreError> {
        let by_state = self.live_attempts_by_status(tenants).await?;
        let ended = self.ended_recently(tenants, ENDED_READ_LIMIT).await?;
        // The runners are the platform's; the leases counted on them are
        // the principal's tenants' only (another tenant's work in flight
        // is not theirs to follow).
        let runners = sqlx::query(
            "SELECT r.runner_type, count(*), COALESCE(sum(r.capacity), 0)::bigint,
                    COALESCE(sum((SELECT count(*) FROM leases l
                                  JOIN attempts a ON a.attempt_id = l.attempt_id
                                  WHERE l.runner_instance = r.instance_id AND l.active
                                    AND ($2::text[] IS NULL OR a.tenant = ANY($2)))), 0)::bigint
             FROM runner_instances r
             WHERE r.last_seen_at >= $1 AND r.status = 'ready'
             GROUP BY r.runner_type ORDER BY r.runner_type",
        )
        .bind(fresh_after)
        .bind(tenants)
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect();
        Ok(Overview {
            by_state,
            ended,
            runners,
        })
    }

    /// The newest endings of the last hour, at most `limit` of them
    /// ([`ENDED_READ_LIMIT`] for the overview) whatever their tenants (a
    /// backward walk of `attempts_finished`), so the cost is bounded by
    /// the limit, not by the hour's rate; then counted for `tenants`. The
    /// row without a status is the walk's own: how many it read, and the
    /// oldest of them.
    pub async fn ended_recently(
        &self,
        tenants: Option<&[String]>,
        limit: i64,
    ) -> Result<Ended, StoreError> {
        let rows = sqlx::query(
            "WITH newest AS (
                 SELECT status, failure_category, tenant, finished_at FROM attempts
                 WHERE finished_at >= now() - interval '1 hour'
                 ORDER BY finished_at DESC LIMIT $2)
             SELECT status, failure_category, count(*), NULL::timestamptz, NULL::timestamptz
             FROM newest WHERE $1::text[] IS NULL OR tenant = ANY($1)
             GROUP BY status, failure_category
             UNION ALL
             SELECT NULL, NULL, count(*), min(finished_at), now() - interval '1 hour' FROM newest
             ORDER BY 1, 2",
        )
        .bind(tenants)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let mut ended = Ended::default();
        for row in &rows {
            match row.get::<Option<String>, _>(0) {
                Some(status) => ended.counts.push((status, row.get(1), row.get(2))),
                None => {
                    let read: i64 = row.get(2);
                    ended.capped = read >= limit;
                    ended.since = match row.get::<Option<DateTime<Utc>>, _>(3) {
                        Some(oldest) if ended.capped => oldest,
                        _ => row.get(4),
                    };
                }
            }
        }
        Ok(ended)
    }

    /// Up to `limit` attempts after `cursor`, newest first, of `tenants`
    /// and the filter, among the [`MAX_WALKED`] after it: a keyset walk of
    /// `attempts_newest` (the cursor is always the index's bound, so a
    /// later page costs what the first does, and no page walks more).
    pub async fn console_attempts(
        &self,
        tenants: Option<&[String]>,
        filter: &AttemptFilter,
        cursor: Option<Cursor>,
        limit: i64,
    ) -> Result<AttemptsPage, StoreError> {
        let mut query = attempts_page(tenants, filter, cursor, limit);
        let rows = query.build().fetch_all(self.pool()).await?;
        let lines: Vec<AttemptLine> = rows
            .iter()
            .map(|row| AttemptLine {
                attempt_id: row.get(0),
                job_id: row.get(1),
                attempt_no: row.get(2),
                tenant: row.get(3),
                operation: row.get(4),
                runner_type: row.get(5),
                status: row.get(6),
                failure_category: row.get(7),
                created_at: row.get(8),
                updated_at: row.get(9),
            })
            .collect();
        if let Some(last) = lines.last().filter(|_| lines.len() as i64 == limit) {
            let next = Some(Cursor {
                created_at: last.created_at,
                attempt_id: last.attempt_id,
            });
            return Ok(AttemptsPage {
                lines,
                next,
                sparse: false,
            });
        }
        // Fewer than a page: the walk's last attempt, if it walked all it
        // may (older ones are left for the next page). One job's were all
        // found.
        if filter.job_id.is_some() {
            return Ok(AttemptsPage {
                lines,
                next: None,
                sparse: false,
            });
        }
        let mut last =
            sqlx::QueryBuilder::new("SELECT created_at, attempt_id FROM attempts WHERE true");
        push_after(&mut last, cursor);
        last.push(" ORDER BY created_at DESC, attempt_id DESC OFFSET ")
            .push_bind(MAX_WALKED - 1)
            .push(" LIMIT 1");
        let next = last
            .build()
            .fetch_optional(self.pool())
            .await?
            .map(|row| Cursor {
                created_at: row.get(0),
                attempt_id: row.get(1),
            });
        Ok(AttemptsPage {
            lines,
            sparse: next.is_some(),
            next,
        })
    }

    /// Succeeded `opentofu.plan` attempts no one has approved yet, newest
    /// first (at most `limit`).
    pub async fn plans_awaiting_approval(
        &self,
        tenants: Option<&[String]>,
        limit: i64,
    ) -> Result<Vec<AwaitingPlan>, StoreError> {
        let rows = sqlx::query(
            "SELECT a.attempt_id, a.job_id, a.tenant, j.spec->>'requested_by', j.spec,
                    a.result_json, a.finished_at
             FROM attempts a JOIN jobs j USING (job_id)
             WHERE a.operation = 'opentofu.plan' AND a.status = 'succeeded'
               AND a.plan_approval IS NULL
               AND ($1::text[] IS NULL OR a.tenant = ANY($1))
             ORDER BY a.created_at DESC, a.attempt_id DESC LIMIT $2",
        )
        .bind(tenants)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .iter()
            .map(|row| AwaitingPlan {
                attempt_id: row.get(0),
                job_id: row.get(1),
                tenant: row.get(2),
                requested_by: row.get(3),
                spec: row.get(4),
                result_json: row.get(5),
                finished_at: row.get(6),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn a_cursor_round_trips_and_one_out_of_range_is_refused() {
        let cursor = Cursor {
            created_at: chrono::DateTime::from_timestamp_micros(1_800_000_000_123_456).unwrap(),
            attempt_id: uuid::Uuid::new_v4(),
        };
        assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
        let id = cursor.attempt_id;
        for text in [
            format!("-1.{id}"),
            format!("-6311390400000000000.{id}"),
            format!("253402300800000000.{id}"),
            "1.not-a-uuid".to_owned(),
            "nothing".to_owned(),
        ] {
            assert_eq!(Cursor::decode(&text), None, "{text}");
        }
    }
}
