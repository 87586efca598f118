//! The internal execute API: submit a JobSpec, cancel an attempt, read
//! attempts, jobs and histories. Submissions and cancels are validated and
//! produced to `exec.commands.v1`, exactly as a control plane on Kafka
//! would; nothing here writes the store.

use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::access::speaking_for;
use super::{Ingress, IngressError};
use crate::codec::CommandRecord;
use crate::contract::{topics, validate_jobspec_bytes, AttemptEvent};
use crate::kafka::cloudevent_headers;
use crate::policy::principals::{Principal, Role};

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
    /// The approver; with principals, the caller's own name or left out.
    #[serde(default)]
    pub approved_by: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApprovalAccepted {
    pub attempt_id: Uuid,
    pub plan_digest: String,
    pub command_id: Uuid,
}

/// The most events one read of an attempt's history returns (a timeline,
/// a page of `/events`, a refill of a stream).
pub const EVENTS_PAGE: usize = 1_000;

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

/// Job and command ids are one namespace for every tenant (the control
/// plane's identities, one command each): a principal's job id is in its
/// tenant's namespace, and its command id, which cannot take a prefix,
/// is random (version 4), so no tenant takes first an id another's jobs
/// would use and has them refused. The shared key stands for every
/// tenant already, and is not held to it.
fn unclaimable_ids(spec: &crate::contract::JobSpec) -> Result<(), IngressError> {
    let namespace = format!("{}/", spec.tenant);
    let mut problems = Vec::new();
    if !spec.job_id.starts_with(&namespace) {
        problems.push(crate::contract::Problem::new(
            "job_id",
            format!(
                "a job submitted through the execute API has an id in its tenant's namespace, `{namespace}<id>`: job ids are shared by every tenant, and each tenant's are its own"
            ),
        ));
    }
    if spec.command_id.get_version_num() != 4 {
        problems.push(crate::contract::Problem::new(
            "command_id",
            "a command submitted through the execute API has a random (version 4) UUID: command ids are shared by every tenant, and one another tenant could work out could be taken first",
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(IngressError::BadRequest(problems))
    }
}

impl Ingress {
    async fn produce_command(
        &self,
        key: &str,
        command: &CommandRecord,
        ce_type: &str,
        traceparent: Option<&str>,
    ) -> Result<(), IngressError> {
        let payload = self
            .kafka
            .codec
            .encode_record(command)
            .map_err(|error| IngressError::Unavailable(error.to_string()))?;
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
        principal: &Principal,
        body: &[u8],
        traceparent: Option<&str>,
    ) -> Result<Submitted, IngressError> {
        let spec = validate_jobspec_bytes(body)
            .map_err(|problems| IngressError::BadRequest(problems.0))?;
        if !principal.may(Role::Operator, &spec.tenant) {
            return Err(IngressError::Forbidden(format!(
                "`{}` lacks the operator role for tenant `{}`",
                principal.name, spec.tenant
            )));
        }
        speaking_for(principal, "requested_by", Some(&spec.requested_by))?;
        if !principal.is_shared_key() {
            unclaimable_ids(&spec)?;
        }
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
        tracing::info!(principal = %principal.name, job_id = %spec.job_id, command_id = %spec.command_id, operation = %spec.operation, "job submitted through the execute API");
        Ok(Submitted {
            job_id: spec.job_id,
            command_id: spec.command_id,
        })
    }

    pub async fn cancel(
        &self,
        principal: &Principal,
        attempt_id: Uuid,
        request: CancelRequest,
        traceparent: Option<&str>,
    ) -> Result<CancelAccepted, IngressError> {
        let reason = request
            .reason
            .unwrap_or_else(|| "cancelled through the execute API".into());
        let requested_by =
            speaking_for(principal, "requested_by", request.requested_by.as_deref())?
                .unwrap_or_else(|| "execute-api".into());
        let problems = crate::contract::limits::check_cancel(&reason, &requested_by);
        if !problems.is_empty() {
            return Err(IngressError::BadRequest(problems));
        }
        self.attempt_for(principal, attempt_id, Role::Operator)
            .await?;
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
        tracing::info!(principal = %principal.name, %attempt_id, %command_id, "cancel requested through the execute API");
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
        principal: &Principal,
        attempt_id: Uuid,
        request: ApproveRequest,
        traceparent: Option<&str>,
    ) -> Result<ApprovalAccepted, IngressError> {
        use crate::contract::Problem;
        let mut problems = Vec::new();
        // The shared key without a name approves as itself.
        let approved_by = speaking_for(principal, "approved_by", request.approved_by.as_deref())?
            .unwrap_or_else(|| principal.name.clone());
        if let Err(message) = crate::contract::artifact_ref::InputRef::parse(&request.plan_digest) {
            problems.push(Problem::new("plan_digest", message));
        }
        crate::contract::limits::check_identifier("approved_by", &approved_by, &mut problems);
        if !problems.is_empty() {
            return Err(IngressError::BadRequest(problems));
        }
        let attempt = self
            .attempt_for(principal, attempt_id, Role::Approver)
            .await?;
        let text = |field: &str| attempt[field].as_str().unwrap_or_default().to_owned();
        let (tenant, job_id) = (text("tenant"), text("job_id"));
        let rules = self
            .config
            .policy
            .current()
            .tenant(&tenant)
            .operations
            .opentofu
            .clone();
        if !rules.may_approve(&approved_by) {
            return Err(IngressError::PolicyProblems(vec![Problem::new(
                "approved_by",
                format!(
                    "`{}` may not approve tenant `{tenant}`'s plans (operator policy rule `tenants.{tenant}.opentofu.approvers`)",
                    approved_by
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
            approved_by: &approved_by,
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
                approved_by,
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
        tracing::info!(principal = %principal.name, %attempt_id, %command_id, "plan approved through the execute API");
        Ok(ApprovalAccepted {
            attempt_id,
            plan_digest: request.plan_digest,
            command_id,
        })
    }

    /// State plus timeline.
    pub async fn attempt(
        &self,
        principal: &Principal,
        attempt_id: Uuid,
    ) -> Result<serde_json::Value, IngressError> {
        let row = self.readable_attempt(principal, attempt_id).await?;
        let timeline: Vec<serde_json::Value> = self
            .events_after(attempt_id, 0)
            .await?
            .iter()
            .map(timeline_entry)
            .collect();
        // Its first events only: the rest are paged by `/events?after=`.
        let complete = timeline.len() < EVENTS_PAGE;
        Ok(json!({"attempt": row, "timeline": timeline, "timeline_complete": complete}))
    }

    /// A job and its attempts, if `principal` may read its tenant.
    pub async fn job(
        &self,
        principal: &Principal,
        job_id: &str,
    ) -> Result<serde_json::Value, IngressError> {
        self.store
            .job_json(job_id)
            .await?
            .filter(|job| {
                principal.may(
                    Role::Viewer,
                    job["job"]["tenant"].as_str().unwrap_or_default(),
                )
            })
            .map(|mut job| {
                for attempt in job["attempts"].as_array_mut().into_iter().flatten() {
                    *attempt = super::access::unseen_holders_removed(principal, attempt.take());
                }
                job
            })
            .ok_or_else(|| IngressError::NotFound(format!("job {job_id}")))
    }

    /// Decoded events after `after_seq`, at most [`EVENTS_PAGE`]: an
    /// attempt's progress makes events without a bound, and each reader
    /// would hold them all.
    pub async fn events_after(
        &self,
        attempt_id: Uuid,
        after_seq: i64,
    ) -> Result<Vec<AttemptEvent>, IngressError> {
        self.store
            .history_after(attempt_id, after_seq, EVENTS_PAGE as i64)
            .await?
            .iter()
            .map(|stored| stored.decode().map_err(IngressError::from))
            .collect()
    }
}

/// One artifact of an attempt, as `GET /v1/attempts/{id}/artifacts` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct ArtifactView {
    pub name: String,
    /// Its retention class: `logs`, `rendered` or `evidence`.
    pub class: String,
    pub media_type: String,
    pub size: i64,
    pub sha256: String,
    pub producer: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl From<&crate::store::ArtifactRow> for ArtifactView {
    fn from(row: &crate::store::ArtifactRow) -> Self {
        Self {
            name: row.name.clone(),
            class: row.retention_class.clone(),
            media_type: row.media_type.clone(),
            size: row.size,
            sha256: row.sha256.clone(),
            producer: row.producer.clone(),
            created_at: row.created_at,
        }
    }
}

/// Artifact downloads one ingress holds in memory at once: each is read
/// whole and its digest checked before a byte is sent.
pub const MAX_CONCURRENT_DOWNLOADS: usize = 4;
/// How long a download waits for a slot before it is answered 503.
const DOWNLOAD_SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// The download slots one tenant's artifacts may hold at once: its slow
/// readers leave the other tenants the rest.
pub const MAX_DOWNLOADS_PER_TENANT: usize = 2;

/// The prefix of a principal's count among the tenants' (no tenant name
/// holds `:`).
const PRINCIPAL_SLOTS: &str = "principal:";

/// How many download slots each tenant's artifacts hold (and each
/// principal's downloads, under [`PRINCIPAL_SLOTS`]).
#[derive(Default)]
pub struct TenantDownloads(std::sync::Mutex<std::collections::HashMap<String, usize>>);

impl TenantDownloads {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, usize>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One more of `tenant`'s, unless it holds its share already.
    pub fn take(self: &std::sync::Arc<Self>, tenant: &str) -> Option<TenantSlot> {
        let mut held = self.lock();
        let count = held.entry(tenant.to_owned()).or_default();
        if *count >= MAX_DOWNLOADS_PER_TENANT {
            return None;
        }
        *count += 1;
        Some(TenantSlot {
            tenant: tenant.to_owned(),
            held: self.clone(),
        })
    }
}

/// One of a tenant's download slots, given back when dropped.
pub struct TenantSlot {
    tenant: String,
    held: std::sync::Arc<TenantDownloads>,
}

impl Drop for TenantSlot {
    fn drop(&mut self) {
        let mut held = self.held.lock();
        if let Some(count) = held.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.tenant);
            }
        }
    }
}

impl Ingress {
    /// An attempt's artifacts, if `principal` may read its tenant.
    pub async fn artifacts(
        &self,
        principal: &Principal,
        attempt_id: Uuid,
    ) -> Result<Vec<crate::store::ArtifactRow>, IngressError> {
        self.readable_attempt(principal, attempt_id).await?;
        Ok(self.store.artifacts_of(attempt_id).await?)
    }

    /// One artifact's bytes, read whole and checked against the sha256
    /// the manifest recorded: bytes that do not match are never served
    /// (an error is logged and counted, and the caller gets a 502). The
    /// download slot comes with them: it is held until they are sent.
    pub async fn artifact(
        &self,
        principal: &Principal,
        attempt_id: Uuid,
        name: &str,
    ) -> Result<Download, IngressError> {
        use crate::artifacts::ArtifactStorage;
        let attempt = self.readable_attempt(principal, attempt_id).await?;
        let row = self
            .store
            .artifacts_of(attempt_id)
            .await?
            .into_iter()
            .find(|row| row.name == name)
            .ok_or_else(|| IngressError::NotFound(format!("artifact `{name}`")))?;
        let tenant = attempt["tenant"].as_str().unwrap_or_default();
        let tenant_slot = self.tenant_downloads.take(tenant).ok_or_else(|| {
            IngressError::Unavailable(format!(
                "{MAX_DOWNLOADS_PER_TENANT} downloads of this tenant's artifacts are being sent; retry"
            ))
        })?;
        // And as many of one principal's: a principal of two tenants
        // would otherwise hold every slot of the ingress.
        let principal_slot = self
            .tenant_downloads
            .take(&format!("{PRINCIPAL_SLOTS}{}", principal.name))
            .ok_or_else(|| {
                IngressError::Unavailable(format!(
                    "{MAX_DOWNLOADS_PER_TENANT} of your downloads are being sent; retry"
                ))
            })?;
        let slot = tokio::time::timeout(DOWNLOAD_SLOT_WAIT, self.downloads.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or_else(|| IngressError::Unavailable("too many downloads at once; retry".into()))?;
        let bytes = self.storage.get(&row.storage_key).await.map_err(|error| {
            tracing::warn!(%attempt_id, artifact = %row.name, %error, "artifact unreadable");
            IngressError::Unavailable("the artifact storage did not answer".into())
        })?;
        let actual = crate::artifacts::sha256_hex(&bytes);
        if actual != row.sha256 {
            tracing::error!(%attempt_id, artifact = %row.name, recorded = %row.sha256, %actual, "artifact content does not match its recorded sha256: not served");
            crate::telemetry::metrics::artifact_digest_mismatch();
            return Err(IngressError::Corrupt(format!(
                "artifact `{name}` on the storage does not match its recorded sha256 {}: not served",
                row.sha256
            )));
        }
        Ok(Download {
            row,
            bytes,
            slot: (slot, tenant_slot, principal_slot),
        })
    }
}

/// An artifact checked against its digest, with the download slot its
/// bytes hold in memory until they are sent (or the client goes).
pub struct Download {
    pub row: crate::store::ArtifactRow,
    pub bytes: Vec<u8>,
    /// The ingress's slot, the tenant's and the principal's.
    pub slot: (tokio::sync::OwnedSemaphorePermit, TenantSlot, TenantSlot),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One tenant holds at most its share of the download slots; the
    /// others keep theirs, and a slot given back is the tenant's again.
    #[test]
    fn a_tenant_holds_its_share_of_the_downloads_and_no_more() {
        let held = std::sync::Arc::new(TenantDownloads::default());
        let first: Vec<TenantSlot> = (0..MAX_DOWNLOADS_PER_TENANT)
            .map(|_| held.take("team-a").unwrap())
            .collect();
        assert!(held.take("team-a").is_none());
        let other = held.take("team-b").unwrap();
        drop(first);
        assert!(held.take("team-a").is_some());
        drop(other);
        assert!(held.lock().is_empty(), "nothing left counted");
    }
}
