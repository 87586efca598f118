//! `execplane attempts list|show|watch`: the projection and the log.

use std::process::ExitCode;
use std::time::Duration;

use sqlx::Row;
use uuid::Uuid;

use crate::store::Store;

pub async fn list(
    store: &Store,
    status: Option<String>,
    job: Option<String>,
    limit: i64,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let rows = sqlx::query(
        "SELECT attempt_id, job_id, attempt_no, operation, status, failure_category, updated_at
         FROM attempts WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR job_id = $2)
         ORDER BY updated_at DESC LIMIT $3",
    )
    .bind(status)
    .bind(job)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    if json {
        let values: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                serde_json::json!({
                    "attempt_id": row.get::<Uuid, _>(0),
                    "job_id": row.get::<String, _>(1),
                    "attempt_no": row.get::<i32, _>(2),
                    "operation": row.get::<String, _>(3),
                    "status": row.get::<String, _>(4),
                    "failure_category": row.get::<Option<String>, _>(5),
                    "updated_at": row.get::<chrono::DateTime<chrono::Utc>, _>(6),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&values)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<36}  {:<3} {:<16} {:<20} {:<28} job",
        "attempt", "no", "status", "category", "operation"
    );
    for row in rows {
        println!(
            "{:<36}  {:<3} {:<16} {:<20} {:<28} {}",
            row.get::<Uuid, _>(0),
            row.get::<i32, _>(2),
            row.get::<String, _>(4),
            row.get::<Option<String>, _>(5).unwrap_or_default(),
            row.get::<String, _>(3),
            row.get::<String, _>(1)
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn show(store: &Store, attempt_id: Uuid, json: bool) -> anyhow::Result<ExitCode> {
    let row: Option<serde_json::Value> = sqlx::query_scalar(
        "SELECT to_jsonb(a) - 'last_hash' FROM attempts a WHERE attempt_id = $1",
    )
    .bind(attempt_id)
    .fetch_optional(store.pool())
    .await?;
    let Some(row) = row else {
        eprintln!("no attempt {attempt_id}");
        return Ok(ExitCode::from(1));
    };
    if json {
        let history: Vec<serde_json::Value> = store
            .history(attempt_id)
            .await?
            .iter()
            .filter_map(|stored| stored.decode().ok())
            .filter_map(|event| serde_json::to_value(event).ok())
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"attempt": row, "events": history}))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    for (key, value) in row.as_object().into_iter().flatten() {
        if !value.is_null() {
            println!(
                "{key:>22}: {}",
                value
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| value.to_string())
            );
        }
    }
    println!();
    super::audit::replay(store, attempt_id, false).await
}

pub async fn watch(
    store: &Store,
    attempt_id: Uuid,
    interval: Duration,
) -> anyhow::Result<ExitCode> {
    let mut printed = 0usize;
    loop {
        let history = store.history(attempt_id).await?;
        for stored in history.iter().skip(printed) {
            let event = stored.decode()?;
            println!(
                "#{:<3} {}  {:<16} {}",
                event.seq,
                stored
                    .occurred_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                event.body.kind(),
                event.summary()
            );
        }
        printed = history.len();
        if history.iter().any(|stored| stored.terminal) {
            let succeeded: Option<String> =
                sqlx::query_scalar("SELECT status FROM attempts WHERE attempt_id = $1")
                    .bind(attempt_id)
                    .fetch_optional(store.pool())
                    .await?;
            return Ok(if succeeded.as_deref() == Some("succeeded") {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
        }
        tokio::time::sleep(interval).await;
    }
}
