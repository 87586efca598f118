//! The executor side of the ingress, shared by HTTP and TCP: sessions and
//! their presence, polling for leased work, reports and log chunks. Every
//! request is checked against the runner catalog; a refusal of an
//! authenticated executor is recorded in `ingress_audit`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};
use uuid::Uuid;

use super::protocol::{
    owns_instance, LogRequest, OutputQuery, PollReply, PollRequest, RegisterReply, RegisterRequest,
    ReportReply, ReportRequest, WorkItem, MAX_POLL_WAIT_MS,
};
use super::{Caller, Ingress, IngressError, Refusal};
use crate::artifacts::ArtifactStorage;
use crate::codec::{
    Family, LogChunkRecord, Presence, PresenceRecord, PresenceStatus, RunnerEventRecord,
};
use crate::contract::outputs::{output_name_problem, MAX_OUTPUTS};
use crate::contract::{
    topics, Operation, OutputArtifact, Problem, ReportBody, RetentionClass, RunnerType,
};
use crate::kafka::{cloudevent_headers, partition_count, work_partition};
use crate::store::{AttemptLease, ExecutorGrant};

/// How soon a handed-out lease whose attempt has not started is offered
/// again (the first answer may have been lost with its connection).
pub const REOFFER_AFTER: Duration = Duration::from_secs(5);
/// Output files one session may upload for one attempt: every output it
/// may list, and as many again for retries.
pub const MAX_UPLOADS_PER_ATTEMPT: u32 = 2 * MAX_OUTPUTS as u32;
/// Sessions one executor id may hold at once.
pub const MAX_SESSIONS_PER_EXECUTOR: usize = 64;
/// At most one audit row per (reason, client) this often.
pub const AUDIT_EVERY: Duration = Duration::from_secs(10);
/// How long a waiting poll sleeps when the shared feed says nothing (it
/// wakes the poll as soon as a lease is granted to the instance).
const POLL_FALLBACK: Duration = REOFFER_AFTER;
/// A poll answers this close to its deadline rather than wait once more.
const POLL_STEP: Duration = Duration::from_millis(100);

/// One registered executor session: a runner instance the ingress stands
/// in for.
#[derive(Clone, Debug)]
struct Session {
    executor_id: String,
    runner_type: RunnerType,
    capacity: u32,
    pool: BTreeMap<String, String>,
    capabilities: Vec<String>,
    operations: Vec<String>,
    partition: i32,
    started_at: i64,
    last_seen: Instant,
    polling: u32,
    offered: HashMap<Uuid, Instant>,
    /// Output files uploaded, by attempt.
    uploads: HashMap<Uuid, u32>,
}

/// The live sessions of this ingress process.
#[derive(Default)]
pub struct Sessions {
    inner: Mutex<HashMap<String, Session>>,
    /// Work-topic partition counts, by runner type.
    partitions: Mutex<HashMap<RunnerType, i32>>,
    /// When each (reason, client) refusal was last written to the
    /// audit table: at most one row per AUDIT_EVERY, so a key holder cannot
    /// flood it (the metric still counts every refusal).
    audited: Mutex<HashMap<(&'static str, std::net::IpAddr), Instant>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Counts a waiting poll for its session, and uncounts it however the poll
/// ends (a client that disconnects drops the request mid-wait).
struct Polling<'a> {
    sessions: &'a Sessions,
    instance_id: String,
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        if let Some(session) = self.sessions.lock().get_mut(&self.instance_id) {
            session.polling = session.polling.saturating_sub(1);
            session.last_seen = Instant::now();
        }
    }
}

impl Ingress {
    /// Looks the executor up in the catalog and checks the runner type and
    /// tenant; a refusal is audited before it is returned.
    async fn authorize(
        &self,
        caller: &Caller,
        route: &str,
        runner_type: Option<&str>,
        tenant: Option<&str>,
        attempt_id: Option<Uuid>,
    ) -> Result<ExecutorGrant, IngressError> {
        let grant = self.store.executor_grant(&caller.executor_id).await?;
        let refusal = match &grant {
            None => Some(Refusal::UnknownExecutor),
            Some(grant) if !grant.enabled => Some(Refusal::Disabled),
            Some(grant) if runner_type.is_some_and(|t| !grant.serves_type(t)) => {
                Some(Refusal::RunnerType)
            }
            Some(grant) if tenant.is_some_and(|t| !grant.serves_tenant(t)) => Some(Refusal::Tenant),
            Some(_) => None,
        };
        match (refusal, grant) {
            (None, Some(grant)) => Ok(grant),
            (refusal, _) => {
                let reason = refusal.unwrap_or(Refusal::UnknownExecutor);
                self.refuse(caller, route, reason, attempt_id).await?;
                Err(IngressError::Policy(reason))
            }
        }
    }

    async fn refuse(
        &self,
        caller: &Caller,
        route: &str,
        reason: Refusal,
        attempt_id: Option<Uuid>,
    ) -> Result<(), IngressError> {
        crate::telemetry::metrics::ingress_refused(reason.as_str());
        let due = {
            let mut audited = self
                .executors
                .audited
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if audited.len() > 10_000 {
                audited.retain(|_, at| at.elapsed() < AUDIT_EVERY);
            }
            // Keyed on what the client cannot choose (its address, after the
            // allowlist and trusted proxies), never on the executor id it
            // claims: random ids would each write a row. Every refusal is
            // still counted in the refusals metric.
            let key = (reason.as_str(), caller.client);
            match audited.get(&key) {
                Some(at) if at.elapsed() < AUDIT_EVERY => false,
                _ => {
                    audited.insert(key, Instant::now());
                    true
                }
            }
        };
        if !due {
            return Err(IngressError::Policy(reason));
        }
        warn!(executor_id = %caller.executor_id, client = %caller.client, transport = caller.transport, route, reason = reason.as_str(), "executor refused by policy");
        self.store
            .record_refusal(
                &caller.executor_id,
                caller.client,
                caller.transport,
                route,
                reason.as_str(),
                attempt_id,
            )
            .await?;
        Err(IngressError::Policy(reason))
    }

    pub async fn register(
        &self,
        caller: &Caller,
        request: RegisterRequest,
    ) -> Result<RegisterReply, IngressError> {
        self.authorize(
            caller,
            "register",
            Some(request.runner_type.as_str()),
            None,
            None,
        )
        .await?;
        let problems = request.check();
        if !problems.is_empty() {
            return Err(IngressError::BadRequest(problems));
        }
        let open = self
            .executors
            .lock()
            .values()
            .filter(|session| session.executor_id == caller.executor_id)
            .count();
        if open >= MAX_SESSIONS_PER_EXECUTOR {
            return Err(IngressError::Conflict(format!(
                "executor {} already holds {open} sessions (the most it may)",
                caller.executor_id
            )));
        }
        let instance_id = super::protocol::instance_of(&caller.executor_id);
        let partitions = self.partitions(request.runner_type).await?;
        let operations = request.operations();
        let session = Session {
            executor_id: caller.executor_id.clone(),
            runner_type: request.runner_type,
            capacity: request.capacity,
            pool: request.pool,
            capabilities: request.capabilities,
            operations,
            partition: work_partition(&instance_id, partitions),
            started_at: chrono::Utc::now().timestamp_millis(),
            last_seen: Instant::now(),
            polling: 0,
            offered: HashMap::new(),
            uploads: HashMap::new(),
        };
        self.announce(&instance_id, &session, PresenceStatus::Ready)
            .await?;
        info!(executor_id = %caller.executor_id, runner_instance = %instance_id, runner_type = %session.runner_type, "executor session registered");
        self.executors.lock().insert(instance_id.clone(), session);
        Ok(RegisterReply {
            instance_id,
            heartbeat_interval_ms: u64::try_from(self.config.presence_interval.as_millis())
                .unwrap_or(1_000)
                .max(1_000),
            session_ttl_ms: u64::try_from(self.config.session_ttl.as_millis()).unwrap_or(30_000),
        })
    }

    async fn announce(
        &self,
        instance_id: &str,
        session: &Session,
        status: PresenceStatus,
    ) -> Result<(), IngressError> {
        let record = PresenceRecord::new(
            &Presence {
                runner_instance: instance_id,
                runner_type: session.runner_type.as_str(),
                version: format!("ingress/{}", env!("CARGO_PKG_VERSION")),
                pool: &session.pool,
                capabilities: &session.capabilities,
                operations: &session.operations,
                capacity: session.capacity,
                // Placement counts active leases itself.
                in_flight: 0,
                work_partition: session.partition,
                started_at: session.started_at,
                isolation: crate::codec::Isolation::Remote,
            },
            status,
            chrono::Utc::now().timestamp_millis(),
        );
        let payload = self.encode(Family::Presence, &record)?;
        let id = Uuid::new_v4().to_string();
        let headers = cloudevent_headers(
            &id,
            "io.execplane.runner.presence",
            "execplane/ingress",
            None,
        );
        self.produce(topics::RUNNER_PRESENCE, instance_id, &payload, headers)
            .await
    }

    /// The partition count of a runner type's work topic (cached).
    async fn partitions(&self, runner_type: RunnerType) -> Result<i32, IngressError> {
        if let Some(count) = self
            .executors
            .partitions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&runner_type)
        {
            return Ok(*count);
        }
        let topic = self.kafka.topic(&topics::work(runner_type));
        let consumer = self
            .kafka
            .assigned_consumer()
            .map_err(|error| IngressError::Unavailable(error.to_string()))?;
        let count = tokio::task::spawn_blocking(move || partition_count(&consumer, &topic))
            .await
            .map_err(|error| IngressError::Unavailable(error.to_string()))?
            .map_err(|error| IngressError::Unavailable(error.to_string()))?;
        self.executors
            .partitions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(runner_type, count);
        Ok(count)
    }

    pub async fn poll(
        &self,
        caller: &Caller,
        request: PollRequest,
    ) -> Result<PollReply, IngressError> {
        let mut problems = Vec::new();
        crate::contract::limits::check_identifier(
            "instance_id",
            &request.instance_id,
            &mut problems,
        );
        if !problems.is_empty() {
            return Err(IngressError::BadRequest(problems));
        }
        let grant = self.authorize(caller, "poll", None, None, None).await?;
        let runner_type = {
            let mut sessions = self.executors.lock();
            match sessions.get_mut(&request.instance_id) {
                None => return Err(IngressError::SessionUnknown),
                Some(session) if session.executor_id == caller.executor_id => {
                    session.last_seen = Instant::now();
                    session.polling += 1;
                    Some(session.runner_type)
                }
                Some(_) => None,
            }
        };
        let Some(runner_type) = runner_type else {
            self.refuse(caller, "poll", Refusal::InstanceNotOwned, None)
                .await?;
            return Err(IngressError::Policy(Refusal::InstanceNotOwned));
        };
        let _polling = Polling {
            sessions: &self.executors,
            instance_id: request.instance_id.clone(),
        };
        // The grant may have changed since the session registered.
        if !grant.serves_type(runner_type.as_str()) {
            self.refuse(caller, "poll", Refusal::RunnerType, None)
                .await?;
            return Err(IngressError::Policy(Refusal::RunnerType));
        }
        self.wait_for_work(&request, &grant).await
    }

    /// Leases of the instance not started yet, within the executor's grant.
    /// A lease outside it (placement does not know the catalog's tenant
    /// limits) is never handed out; the attempt's timers recover it. The
    /// grant is read again at each wake of a long poll: a catalog change
    /// (an executor disabled, a tenant taken from it) holds from the next
    /// work handed out, not the next poll.
    async fn wait_for_work(
        &self,
        request: &PollRequest,
        grant: &ExecutorGrant,
    ) -> Result<PollReply, IngressError> {
        let wait = Duration::from_millis(request.wait_ms.min(MAX_POLL_WAIT_MS));
        let deadline = Instant::now() + wait;
        let mut watch = self.feed.instance(&request.instance_id);
        let mut grant = std::borrow::Cow::Borrowed(grant);
        loop {
            let leased = self.store.leased_work(&request.instance_id).await?;
            let now = Instant::now();
            let mut work = Vec::new();
            {
                let mut sessions = self.executors.lock();
                let Some(session) = sessions.get_mut(&request.instance_id) else {
                    return Err(IngressError::SessionUnknown);
                };
                session
                    .offered
                    .retain(|attempt, _| leased.iter().any(|l| l.attempt_id == *attempt));
                for lease in leased {
                    if !grant.serves_tenant(&lease.tenant) || !grant.serves_type(&lease.runner_type)
                    {
                        warn!(attempt_id = %lease.attempt_id, executor_id = %grant.executor_id, "lease outside the executor's grant not handed out");
                        continue;
                    }
                    let due = session
                        .offered
                        .get(&lease.attempt_id)
                        .is_none_or(|at| now.duration_since(*at) >= REOFFER_AFTER);
                    if due {
                        session.offered.insert(lease.attempt_id, now);
                        work.push(WorkItem {
                            attempt_id: lease.attempt_id,
                            job_id: lease.job_id,
                            attempt_no: lease.attempt_no,
                            lease_id: lease.lease_id,
                            lease_epoch: lease.epoch,
                            lease_expires_at: lease.expires_at.timestamp_millis(),
                            operation: lease.operation,
                            spec: lease.spec.unwrap_or_default(),
                        });
                    }
                }
            }
            if !work.is_empty()
                || Instant::now() + POLL_STEP > deadline
                || self.shutdown.is_cancelled()
            {
                crate::telemetry::metrics::ingress_work_handed(work.len());
                return Ok(PollReply { work });
            }
            // Woken by the shared feed when a lease is granted to the
            // instance; a re-offer is due after REOFFER_AFTER at the latest.
            let remaining = deadline.saturating_duration_since(Instant::now());
            tokio::select! {
                _ = watch.changed(remaining.min(POLL_FALLBACK)) => {}
                _ = self.shutdown.cancelled() => {}
            }
            match self.store.executor_grant(&grant.executor_id).await? {
                Some(now) if now.enabled => grant = std::borrow::Cow::Owned(now),
                // Refused, and audited, at its next poll.
                _ => return Ok(PollReply { work: Vec::new() }),
            }
        }
    }

    /// Checks a report or log chunk's attempt: it exists, the instance is
    /// the caller's, the attempt's type and tenant are in its grant, and the
    /// instance holds (or held) the attempt's lease. Only then does anything
    /// reach the broker: a report on someone else's attempt would otherwise
    /// put a `report_fenced` event in that attempt's permanent log.
    async fn check_attempt(
        &self,
        caller: &Caller,
        route: &str,
        attempt_id: Uuid,
        runner_instance: &str,
    ) -> Result<AttemptLease, IngressError> {
        let mut problems = Vec::new();
        crate::contract::limits::check_identifier(
            "runner_instance",
            runner_instance,
            &mut problems,
        );
        if !problems.is_empty() {
            return Err(IngressError::BadRequest(problems));
        }
        if !owns_instance(&caller.executor_id, runner_instance) {
            self.refuse(caller, route, Refusal::InstanceNotOwned, Some(attempt_id))
                .await?;
        }
        let Some(attempt) = self.store.attempt_lease(attempt_id).await? else {
            // Still check the executor, so an unknown one is audited.
            self.authorize(caller, route, None, None, Some(attempt_id))
                .await?;
            return Err(IngressError::NotFound(format!("attempt {attempt_id}")));
        };
        let runner_type = attempt.runner_type.clone().unwrap_or_default();
        self.authorize(
            caller,
            route,
            Some(&runner_type),
            Some(&attempt.tenant),
            Some(attempt_id),
        )
        .await?;
        let held = attempt
            .lease
            .as_ref()
            .is_some_and(|lease| lease.runner_instance == runner_instance);
        if !held {
            return Err(IngressError::Conflict(format!(
                "attempt {attempt_id} was not leased to {runner_instance}"
            )));
        }
        if let Some(session) = self.executors.lock().get_mut(runner_instance) {
            session.last_seen = Instant::now();
        }
        Ok(attempt)
    }

    pub async fn report(
        &self,
        caller: &Caller,
        request: ReportRequest,
        traceparent: Option<&str>,
    ) -> Result<ReportReply, IngressError> {
        let idempotency_key = request.idempotency_key.clone();
        let mut report = request.into_report().map_err(IngressError::BadRequest)?;
        let attempt_id = report.attempt_id;
        let span = info_span!("report", %attempt_id, lease_epoch = report.lease_epoch, runner_instance = %report.runner_instance, kind = report.body.kind());
        async {
            let attempt = self
                .check_attempt(caller, "report", attempt_id, &report.runner_instance)
                .await?;
            self.check_outputs_stored(&report.body).await?;
            // Held to its type as the runner SDK holds a runner's result.
            let result_refused = attempt
                .operation
                .parse::<Operation>()
                .ok()
                .and_then(|operation| report.body.hold_to_type(operation));
            if let Some(problem) = &result_refused {
                warn!(%problem, "the executor's result does not match its operation's type");
            }
            let event_id = match &idempotency_key {
                Some(key) => crate::attempt::report_event_id_for(
                    attempt_id,
                    report.lease_epoch,
                    &report.runner_instance,
                    report.body.kind(),
                    key,
                ),
                None => Uuid::new_v4(),
            };
            let record = RunnerEventRecord::from_report(
                event_id,
                chrono::Utc::now().timestamp_millis(),
                &report,
            );
            let payload = self
                .kafka
                .codec
                .encode_record(&record)
                .map_err(|error| IngressError::Unavailable(error.to_string()))?;
            let ce_type = format!("io.execplane.runner.{}", report.body.kind());
            let headers = cloudevent_headers(
                &event_id.to_string(),
                &ce_type,
                "execplane/ingress",
                traceparent,
            );
            self.produce(
                topics::RUNNER_EVENTS,
                &attempt_id.to_string(),
                &payload,
                headers,
            )
            .await?;
            let lease_valid = lease_valid(&attempt, report.lease_epoch, &report.runner_instance);
            tracing::debug!(lease_valid, "report forwarded");
            Ok(ReportReply {
                accepted: true,
                lease_valid,
                cancel_requested: attempt.cancel_requested,
                lease_expires_at: attempt
                    .lease
                    .as_ref()
                    .map(|lease| lease.expires_at.timestamp_millis()),
                result_refused,
            })
        }
        .instrument(span)
        .await
    }

    /// Every output a finished report lists is on the storage, as large as
    /// it says: stored through [`Self::store_output`] (which checked its
    /// digest), under this attempt's key (`check_report` saw to that).
    async fn check_outputs_stored(&self, body: &ReportBody) -> Result<(), IngressError> {
        let ReportBody::Finished { outputs, .. } = body else {
            return Ok(());
        };
        let mut problems = Vec::new();
        for (index, output) in outputs.iter().enumerate() {
            let size =
                self.storage.size(&output.key).await.map_err(|error| {
                    IngressError::Unavailable(format!("artifact storage: {error}"))
                })?;
            if size != u64::try_from(output.size).ok() {
                problems.push(Problem::new(
                    format!("outputs[{index}]"),
                    "not stored for this attempt as listed: upload it with PUT /v1/executor/outputs/{attempt_id}/{name} and list what that answered",
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(IngressError::BadRequest(problems))
        }
    }

    /// Admits an executor's output upload before its body is read: a name
    /// of an output, an attempt whose lease the instance holds now, and
    /// room in the session's uploads for it (at most
    /// [`MAX_UPLOADS_PER_ATTEMPT`] files for one attempt). The attempt.
    pub async fn admit_output(
        &self,
        caller: &Caller,
        attempt_id: Uuid,
        name: &str,
        query: &OutputQuery,
    ) -> Result<AttemptLease, IngressError> {
        if let Some(problem) = output_name_problem(name) {
            return Err(IngressError::BadRequest(vec![Problem::new(
                "name", problem,
            )]));
        }
        let attempt = self
            .check_attempt(caller, "output", attempt_id, &query.runner_instance)
            .await?;
        if !lease_valid(&attempt, query.lease_epoch, &query.runner_instance) {
            return Err(IngressError::Conflict(format!(
                "the lease of epoch {} on attempt {attempt_id} is no longer valid",
                query.lease_epoch
            )));
        }
        let mut sessions = self.executors.lock();
        let session = sessions
            .get_mut(&query.runner_instance)
            .ok_or(IngressError::SessionUnknown)?;
        let uploads = session.uploads.entry(attempt_id).or_default();
        if *uploads >= MAX_UPLOADS_PER_ATTEMPT {
            return Err(IngressError::BadRequest(vec![Problem::new(
                "name",
                format!(
                    "a session uploads at most {MAX_UPLOADS_PER_ATTEMPT} files for one attempt"
                ),
            )]));
        }
        *uploads += 1;
        Ok(attempt)
    }

    /// Stores an admitted upload ([`Self::admit_output`]): the body must
    /// have the digest the executor names. The reference to list in the
    /// finished report.
    pub async fn store_output(
        &self,
        attempt: &AttemptLease,
        attempt_id: Uuid,
        name: &str,
        media_type: Option<&str>,
        query: OutputQuery,
        bytes: axum::body::Bytes,
    ) -> Result<OutputArtifact, IngressError> {
        // Up to EXECPLANE_INGRESS_MAX_OUTPUT bytes: off the runtime's threads.
        let body = bytes.clone();
        let sha256 = tokio::task::spawn_blocking(move || crate::artifacts::sha256_hex(&body))
            .await
            .map_err(|error| IngressError::Unavailable(format!("hashing the upload: {error}")))?;
        if query.sha256 != sha256 {
            return Err(IngressError::BadRequest(vec![Problem::new(
                "sha256",
                format!("the body's sha256 is {sha256}"),
            )]));
        }
        let media_type =
            media_type.unwrap_or_else(|| crate::artifacts::outputs::media_type_of(name));
        let output = crate::artifacts::outputs::put(
            &*self.storage,
            attempt_id,
            &attempt.tenant,
            crate::artifacts::outputs::Output {
                name,
                class: query.class.unwrap_or(RetentionClass::Evidence),
                media_type,
            },
            &bytes,
        )
        .await
        .map_err(|error| IngressError::Unavailable(format!("artifact storage: {error}")))?;
        info!(%attempt_id, name, size = output.size, "output stored");
        Ok(output)
    }

    pub async fn log_chunk(
        &self,
        caller: &Caller,
        request: LogRequest,
    ) -> Result<(), IngressError> {
        self.check_attempt(caller, "log", request.attempt_id, &request.runner_instance)
            .await?;
        // Its id is stable across re-sends of the same chunk.
        let record = LogChunkRecord::new(
            request.attempt_id,
            request.lease_epoch,
            request.runner_instance,
            request.stream,
            request.seq,
            request.text,
            chrono::Utc::now().timestamp_millis(),
        );
        let payload = self.encode(Family::LogChunk, &record)?;
        let headers = cloudevent_headers(
            &record.chunk_id,
            "io.execplane.runner.log_chunk",
            "execplane/ingress",
            None,
        );
        self.produce(
            topics::LOG_CHUNKS,
            &request.attempt_id.to_string(),
            &payload,
            headers,
        )
        .await
    }
}

/// Whether `runner_instance`'s lease of `epoch` on the attempt is valid
/// now: the dispatcher's fencing rule, with the deadline counted too.
fn lease_valid(attempt: &AttemptLease, epoch: u64, runner_instance: &str) -> bool {
    crate::attempt::lease_refusal(
        attempt
            .status
            .is_terminal()
            .then(|| attempt.status.as_str()),
        attempt
            .lease
            .as_ref()
            .map(|lease| crate::attempt::LeaseFacts {
                epoch: u64::try_from(lease.epoch).unwrap_or(0),
                runner_instance: &lease.runner_instance,
                active: lease.active,
                expires_at: lease.expires_at.timestamp_millis(),
            }),
        epoch,
        runner_instance,
        Some(chrono::Utc::now().timestamp_millis()),
    )
    .is_none()
}

/// Announces every live session each presence interval; a session with no
/// request for the session TTL (and no poll waiting) ends with a `stopped`
/// presence, and so do all of them at shutdown.
pub async fn announce_sessions(ingress: Arc<Ingress>, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(ingress.config.presence_interval);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let (live, ended) = {
            let mut sessions = ingress.executors.lock();
            let ttl = ingress.config.session_ttl;
            let ended: Vec<(String, Session)> = sessions
                .iter()
                .filter(|(_, s)| s.polling == 0 && s.last_seen.elapsed() > ttl)
                .map(|(id, s)| (id.clone(), s.clone()))
                .collect();
            for (id, _) in &ended {
                sessions.remove(id);
            }
            let live: Vec<(String, Session)> = sessions
                .iter()
                .map(|(id, s)| (id.clone(), s.clone()))
                .collect();
            (live, ended)
        };
        crate::telemetry::metrics::ingress_sessions(live.len());
        for (id, session) in &ended {
            info!(runner_instance = %id, executor_id = %session.executor_id, "executor session ended (idle)");
            let _ = ingress.announce(id, session, PresenceStatus::Stopped).await;
        }
        for (id, session) in &live {
            if let Err(error) = ingress.announce(id, session, PresenceStatus::Ready).await {
                warn!(runner_instance = %id, %error, "presence not delivered");
            }
        }
    }
    let sessions: Vec<(String, Session)> = ingress.executors.lock().drain().collect();
    for (id, session) in &sessions {
        let _ = ingress.announce(id, session, PresenceStatus::Stopped).await;
    }
}
