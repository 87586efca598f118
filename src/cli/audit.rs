use std::process::ExitCode;

use uuid::Uuid;

use crate::store::Store;

pub async fn verify(store: &Store, attempt: Option<Uuid>) -> anyhow::Result<ExitCode> {
    let report = store.verify_chain(attempt).await?;
    match report.first_break {
        None => {
            println!(
                "hash chain intact: {} attempts, {} events",
                report.attempts, report.events
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(broken) => {
            eprintln!(
                "hash chain broken at attempt {} seq {}: {}",
                broken.attempt_id, broken.seq, broken.reason
            );
            Ok(ExitCode::from(1))
        }
    }
}

pub async fn replay(store: &Store, attempt_id: Uuid, json: bool) -> anyhow::Result<ExitCode> {
    let history = store.history(attempt_id).await?;
    if history.is_empty() {
        eprintln!("no events for attempt {attempt_id}");
        return Ok(ExitCode::from(1));
    }
    let mut entries = Vec::new();
    for stored in &history {
        let event = stored.decode()?;
        if json {
            let mut value = serde_json::to_value(&event)?;
            value["hash"] = serde_json::json!(hex::encode(&stored.hash));
            value["prev_hash"] = serde_json::json!(hex::encode(&stored.prev_hash));
            entries.push(value);
        } else {
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
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
    }
    Ok(ExitCode::SUCCESS)
}
