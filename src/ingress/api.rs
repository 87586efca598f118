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

/// `POST /v1/attempts/{id}/approve` body: the plan the approver looked at
/// (its digest) and who they are.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveRequest {
    pub plan_digest: String,
    pub approved_by: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApprovalAccepted {
    pub attempt_id: Uuid,
    pub plan_digest: String,
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

    /// Checks an approval as intake will (the attempt a succeeded
    /// `opentofu.plan` whose saved plan is `plan_digest`, the approver one
    /// of its tenant's `opentofu.approvers`, and not its requester unless
    /// the tenant may approve its own) and produces an ApprovePlan command
    /// keyed by the plan's job. Intake decides again; this answers at once.
    pub async fn approve(
        &self,
        attempt_id: Uuid,
        request: ApproveRequest,
        traceparent: Option<&str>,
    ) -> Result<ApprovalAccepted, IngressError> {
        use crate::contract::Problem;
        let mut problems = Vec::new();
        if let Err(message) = crate::contract::artifact_ref::InputRef::parse(&request.plan_digest) {
            problems.push(Problem::new("plan_digest", message));
        }
        crate::contract::limits::check_identifier(
            "approved_by",
            &request.approved_by,
            &mut problems,
        );
        if !problems.is_empty() {
            return Err(IngressError::BadRequest(problems));
        }
        let Some(attempt) = self.store.attempt_json(attempt_id).await? else {
            return Err(IngressError::NotFound(format!("attempt {attempt_id}")));
        };
        let text = |field: &str| attempt[field].as_str().unwrap_or_default().to_owned();
        let (tenant, job_id) = (text("tenant"), text("job_id"));
        let rules = self
            .config
            .policy
            .current()
            .tenant(&tenant)
            .operations
            .opentofu;
        if !rules.may_approve(&request.approved_by) {
            return Err(IngressError::PolicyProblems(vec![Problem::new(
                "approved_by",
                format!(
                    "`{}` may not approve tenant `{tenant}`'s plans (operator policy rule `tenants.{tenant}.opentofu.approvers`)",
                    request.approved_by
                ),
            )]));
        }
        let job = self.store.job_json(&job_id).await?.unwrap_or_default();
        let (operation, result_json) = (text("operation"), text("result_json"));
        let asked = crate::attempt::ApprovalAsked {
            operation: &operation,
            status: crate::contract::AttemptStatus::parse(&text("status"))
                .unwrap_or(crate::contract::AttemptStatus::Queued),
            result_json: Some(&result_json),
            requester: job["job"]["spec"]["requested_by"]
                .as_str()
                .unwrap_or_default(),
            plan_digest: &request.plan_digest,
            approved_by: &request.approved_by,
            self_approve: rules.self_approve,
        };
        if let Some(reason) = crate::attempt::approval_refusal(&asked) {
            return Err(IngressError::Conflict(format!(
                "attempt {attempt_id}'s plan cannot be approved: {reason}"
            )));
        }
        let command_id = Uuid::new_v4();
        let command = CommandRecord::approve(
            command_id,
            crate::codec::ApprovePlanRecord {
                plan_attempt_id: attempt_id.to_string(),
                plan_digest: request.plan_digest.clone(),
                tenant,
                approved_by: request.approved_by,
            },
            chrono::Utc::now().timestamp_millis(),
        );
        self.produce_command(
            &job_id,
            &command,
            "io.execplane.command.approve_plan",
            traceparent,
        )
        .await?;
        Ok(ApprovalAccepted {
            attempt_id,
            plan_digest: request.plan_digest,
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
