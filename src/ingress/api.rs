//! The internal execute API: submit a JobSpec, cancel an attempt, read
//! attempts, jobs and histories. Submissions and cancels are validated and
//! produced to `exec.commands.v1`, exactly as a control plane on Kafka
//! would; nothing here writes the store.

use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::{Ingress, IngressError};
use crate::codec::{CommandRecord, Family};
use crate::contract::{topics, validate_jobspec_bytes, AttemptEvent};
use crate::kafka::cloudevent_headers;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Submitted {
    pub job_id: String,
    pub command_id: Uuid,
}

/// `POST /v1/attempts/{id}/cancel` body; every field optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub requested_by: Option<String>,
    #[serde(default)]
    pub grace_ms: Option<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CancelAccepted {
    pub attempt_id: Uuid,
    pub command_id: Uuid,
}

/// One line of an attempt's timeline.
pub fn timeline_entry(event: &AttemptEvent) -> serde_json::Value {
    json!({
        "seq": event.seq,
        "kind": event.body.kind(),
        "occurred_at": chrono::DateTime::from_timestamp_millis(event.occurred_at)
            .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        "summary": event.summary(),
    })
}

impl Ingress {
    async fn produce_command(
        &self,
        key: &str,
        command: &CommandRecord,
        ce_type: &str,
        traceparent: Option<&str>,
    ) -> Result<(), IngressError> {
        let payload = self.encode(Family::Command, command)?;
        let headers = cloudevent_headers(
            &command.command_id,
            ce_type,
            "execplane/ingress",
            traceparent,
        );
        self.produce(topics::COMMANDS, key, &payload, headers).await
    }

    /// Validates and produces an ExecuteJob command. A traceparent in the
    /// spec wins over the request's header.
    pub async fn submit(
        &self,
        body: &[u8],
        traceparent: Option<&str>,
    ) -> Result<Submitted, IngressError> {
        let spec = validate_jobspec_bytes(body)
            .map_err(|problems| IngressError::BadRequest(problems.0))?;
        // The same order as intake: the operator's policy, then whether
        // this release runs the operation.
        let refused = self.config.policy.current().check_jobspec(&spec);
        if !refused.is_empty() {
            return Err(IngressError::PolicyProblems(refused));
        }
        if let Some(problem) = spec.operation.not_implemented() {
            return Err(IngressError::BadRequest(vec![problem]));
        }
        let command = CommandRecord::execute(&spec, chrono::Utc::now().timestamp_millis());
        let traceparent = spec
            .trace
            .as_ref()
            .map(|trace| trace.traceparent.as_str())
            .or(traceparent);
        self.produce_command(
            &spec.job_id,
            &command,
            "io.execplane.command.execute_job",
            traceparent,
        )
        .await?;
        tracing::info!(job_id = %spec.job_id, command_id = %spec.command_id, operation = %spec.operation, "job submitted through the execute API");
        Ok(Submitted {
            job_id: spec.job_id,
            command_id: spec.command_id,
        })
    }

    pub async fn cancel(
        &self,
        attempt_id: Uuid,
        request: CancelRequest,
        traceparent: Option<&str>,
    ) -> Result<CancelAccepted, IngressError> {
        let reason = request
            .reason
            .unwrap_or_else(|| "cancelled through the execute API".into());
        let requested_by = request.requested_by.unwrap_or_else(|| "execute-api".into());
        let problems = crate::contract::limits::check_cancel(&reason, &requested_by);
        if !problems.is_empty() {
            return Err(IngressError::BadRequest(problems));
        }
        let Some(attempt) = self.store.attempt_lease(attempt_id).await? else {
            return Err(IngressError::NotFound(format!("attempt {attempt_id}")));
        };
        if attempt.status.is_terminal() {
            return Err(IngressError::Conflict(format!(
                "attempt {attempt_id} already ended: {}",
                attempt.status.as_str()
            )));
        }
        let command_id = Uuid::new_v4();
        let command = CommandRecord::cancel(
            command_id,
            attempt_id,
            reason,
            requested_by,
            request.grace_ms.map(i64::from),
            chrono::Utc::now().timestamp_millis(),
        );
        self.produce_command(
            &attempt.job_id,
            &command,
            "io.execplane.command.cancel_attempt",
            traceparent,
        )
        .await?;
        Ok(CancelAccepted {
            attempt_id,
            command_id,
        })
    }

    /// State plus timeline.
    pub async fn attempt(&self, attempt_id: Uuid) -> Result<serde_json::Value, IngressError> {
        let Some(row) = self.store.attempt_json(attempt_id).await? else {
            return Err(IngressError::NotFound(format!("attempt {attempt_id}")));
        };
        let timeline: Vec<serde_json::Value> = self
            .events_after(attempt_id, 0)
            .await?
            .iter()
            .map(timeline_entry)
            .collect();
        Ok(json!({"attempt": row, "timeline": timeline}))
    }

    pub async fn job(&self, job_id: &str) -> Result<serde_json::Value, IngressError> {
        self.store
            .job_json(job_id)
            .await?
            .ok_or_else(|| IngressError::NotFound(format!("job {job_id}")))
    }

    /// Decoded events after `after_seq`.
    pub async fn events_after(
        &self,
        attempt_id: Uuid,
        after_seq: i64,
    ) -> Result<Vec<AttemptEvent>, IngressError> {
        self.store
            .history_after(attempt_id, after_seq)
            .await?
            .iter()
            .map(|stored| stored.decode().map_err(IngressError::from))
            .collect()
    }
}
