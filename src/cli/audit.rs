use std::process::ExitCode;

use uuid::Uuid;

use crate::contract::{AttemptEvent, EventBody};
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
                summary(&event)
            );
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// One line a person can read.
pub fn summary(event: &AttemptEvent) -> String {
    match &event.body {
        EventBody::Created {
            attempt_no,
            spec,
            available_at,
            previous_attempt_id,
            ..
        } => {
            let retry = previous_attempt_id
                .map(|id| format!(", retry of {id}"))
                .unwrap_or_default();
            let delayed = if *available_at > event.occurred_at {
                format!(", available in {} ms", available_at - event.occurred_at)
            } else {
                String::new()
            };
            format!(
                "attempt {attempt_no} of job `{}`: {} for {}{retry}{delayed}",
                event.job_id, spec.operation, spec.tenant
            )
        }
        EventBody::Rejected {
            category, problems, ..
        } => {
            format!(
                "rejected ({}): {}",
                category.as_str(),
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
        EventBody::LeaseGranted {
            epoch,
            runner_instance,
            expires_at,
            ..
        } => {
            format!(
                "lease epoch {epoch} to {runner_instance}, expires in {} ms",
                expires_at - event.occurred_at
            )
        }
        EventBody::LeaseExtended { epoch, expires_at } => format!(
            "lease epoch {epoch} extended by {} ms",
            expires_at - event.occurred_at
        ),
        EventBody::Started {
            epoch,
            runner_instance,
        } => format!("started by {runner_instance} under epoch {epoch}"),
        EventBody::Progress {
            message, percent, ..
        } => match percent {
            Some(percent) => format!("{percent}% {message}"),
            None => message.clone(),
        },
        EventBody::CancelRequested {
            reason,
            requested_by,
            grace_deadline,
        } => {
            format!(
                "cancel requested by {requested_by} ({reason}); grace {} ms",
                grace_deadline - event.occurred_at
            )
        }
        EventBody::ReportFenced {
            report_kind,
            report_epoch,
            runner_instance,
            reason,
            ..
        } => {
            format!(
                "refused {report_kind} from {runner_instance} under epoch {report_epoch}: {reason}"
            )
        }
        EventBody::CallbackRecorded {
            url,
            delivered,
            attempts,
            http_status,
            error,
            ..
        } => {
            let status = http_status
                .map(|status| format!(" (HTTP {status})"))
                .unwrap_or_default();
            let error = error
                .as_ref()
                .map(|error| format!(": {error}"))
                .unwrap_or_default();
            let verdict = if *delivered { "delivered" } else { "given up" };
            format!("callback to {url} {verdict} after {attempts} attempt(s){status}{error}")
        }
        EventBody::Finished {
            outcome,
            category,
            message,
            retry_attempt_id,
            ..
        } => {
            let outcome = serde_json::to_value(outcome)
                .ok()
                .and_then(|value| value.as_str().map(str::to_owned))
                .unwrap_or_default();
            let category = category
                .map(|category| format!(" ({})", category.as_str()))
                .unwrap_or_default();
            let retry = retry_attempt_id
                .map(|id| format!("; retried as {id}"))
                .unwrap_or_default();
            format!("{outcome}{category}: {message}{retry}")
        }
    }
}
