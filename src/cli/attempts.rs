//! `execplane attempts list|show|watch`: the projection and the log.

use std::process::ExitCode;
use std::time::Duration;

use uuid::Uuid;

use crate::store::Store;

pub async fn list(
    store: &Store,
    status: Option<String>,
    job: Option<String>,
    limit: i64,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let rows = store
        .list_attempts(status.as_deref(), job.as_deref(), limit)
        .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<36}  {:<3} {:<16} {:<20} {:<28} job",
        "attempt", "no", "status", "category", "operation"
    );
    for row in rows {
        println!(
            "{:<36}  {:<3} {:<16} {:<20} {:<28} {}",
            row.attempt_id,
            row.attempt_no,
            row.status,
            row.failure_category.unwrap_or_default(),
            row.operation,
            row.job_id
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn show(store: &Store, attempt_id: Uuid, json: bool) -> anyhow::Result<ExitCode> {
    let row = store.attempt_json(attempt_id).await?;
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
    super::audit::replay(
        store,
        &crate::store::EventSelection::Attempt(attempt_id),
        false,
    )
    .await
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
            let succeeded = store.attempt_status(attempt_id).await?;
            return Ok(if succeeded.as_deref() == Some("succeeded") {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
        }
        tokio::time::sleep(interval).await;
    }
}
