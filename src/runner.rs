//! The runner SDK. A runner instance owns: reading its one partition of its
//! type's work topic, presence, lease checks and self-fencing, attempt
//! heartbeats, progress, cancellation and result reporting. A typed runner
//! only implements [`Executor`]: run this operation, report progress, return
//! a typed outcome.
//!
//! Addressing (docs/ARCHITECTURE.md, "The Kafka pipeline"): a fresh instance id per process start; manual
//! assignment of partition `work_partition(id, n)` at the high watermark,
//! taken BEFORE presence is announced, so nothing addressed to the instance
//! can be missed; no consumer group, no committed offsets.

mod attempt;
mod fence;
mod instance;
pub mod kit;
pub mod outputs;
pub mod preflight;
pub mod sandbox;
pub mod tool;
pub mod yaml;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::contract::{
    FailureCategory, JobSpec, Operation, ReportedOutcome, RunnerInputs, RunnerType,
};

/// The stream a line of an attempt's log goes to
/// ([`ExecutionContext::log`]).
pub use crate::codec::LogStream;
pub(crate) use attempt::admit;
pub use fence::{LeaseGuard, Stopping};
pub use instance::{condition, run_instance, InstanceHandle};

/// The built-in policy a context holds until the SDK hands it the one it
/// checked the attempt against: built once, not per attempt.
static DEFAULT_POLICY: std::sync::LazyLock<std::sync::Arc<crate::policy::OperatorPolicy>> =
    std::sync::LazyLock::new(|| crate::policy::SharedPolicy::default().current());

/// The tool settings of a context nobody gave any (`with_tools`): built
/// once, not for every attempt (they look up the process's own path).
static DEFAULT_TOOLS: std::sync::LazyLock<std::sync::Arc<tool::ToolSettings>> =
    std::sync::LazyLock::new(Default::default);

/// One unit of work handed to an executor.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub attempt_id: uuid::Uuid,
    pub job_id: String,
    pub attempt_no: u32,
    pub lease_epoch: u64,
    pub spec: JobSpec,
}

/// What an executor can do while it runs.
#[derive(Clone, Debug)]
pub struct ExecutionContext {
    /// Cancelled on cancel, lease loss or shutdown: stop the tool promptly.
    pub cancel: CancellationToken,
    progress: mpsc::UnboundedSender<(String, Option<u8>)>,
    log: mpsc::UnboundedSender<(LogStream, String)>,
    tools: std::sync::Arc<tool::ToolSettings>,
    /// How long a stopped tool gets between SIGINT and SIGKILL.
    stop_grace: Duration,
    /// The start-to-close deadline: a tool still running then is stopped.
    deadline: Option<tokio::time::Instant>,
    /// Where input artifacts are read from and outputs stored.
    storage: Option<std::sync::Arc<crate::artifacts::Storage>>,
    /// The tenant whose inputs the attempt may read (`with_tenant`).
    tenant: String,
    /// The attempt's stored outputs (none outside an attempt).
    outputs: Option<outputs::Outputs>,
    /// The output bytes the attempt's tools may still log, all runs
    /// together.
    output_budget: std::sync::Arc<tool::OutputBudget>,
    /// The operator's policy the SDK checked the attempt against.
    policy: std::sync::Arc<crate::policy::OperatorPolicy>,
    /// The secret store secrets are written to (`store_secrets`).
    secrets: Option<std::sync::Arc<crate::secrets::Vault>>,
}

impl ExecutionContext {
    pub fn new(
        cancel: CancellationToken,
        progress: mpsc::UnboundedSender<(String, Option<u8>)>,
        log: mpsc::UnboundedSender<(LogStream, String)>,
    ) -> Self {
        Self {
            cancel,
            progress,
            log,
            tools: DEFAULT_TOOLS.clone(),
            stop_grace: Duration::from_secs(2),
            deadline: None,
            storage: None,
            tenant: String::new(),
            outputs: None,
            output_budget: std::sync::Arc::new(tool::OutputBudget::new(tool::MAX_OUTPUT_BYTES)),
            policy: DEFAULT_POLICY.clone(),
            secrets: None,
        }
    }

    /// The operator's policy as the SDK checked the attempt against it: a
    /// runner reads the policy here, never a newer one, so what it acts on
    /// is what was checked.
    pub fn with_policy(mut self, policy: std::sync::Arc<crate::policy::OperatorPolicy>) -> Self {
        self.policy = policy;
        self
    }

    pub fn policy(&self) -> &crate::policy::OperatorPolicy {
        &self.policy
    }

    /// The secret store `store_secrets` writes to.
    pub fn with_secrets(mut self, secrets: Option<std::sync::Arc<crate::secrets::Vault>>) -> Self {
        self.secrets = secrets;
        self
    }

    /// Writes `data` (key to value) as the tenant's secret at `location`
    /// (`what` says what it is, in a failure): refused as `policy` outside
    /// the operator's secret write prefixes for the tenant, whatever
    /// intake checked. The values are never logged.
    pub async fn store_secrets(
        &self,
        what: &str,
        location: &crate::contract::ops::SecretLocation,
        data: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), Failure> {
        let tenant = self.policy.tenant(&self.tenant);
        if !tenant.secret_writable(&location.mount, &location.path) {
            return Err(Failure::policy(format!(
                "{what}: tenant `{}` may not write `{}/{}`: outside the operator's secret write prefixes for it",
                self.tenant, location.mount, location.path
            )));
        }
        let Some(vault) = &self.secrets else {
            return Err(Failure::infrastructure(format!(
                "{what}: no secret store is configured on this runner (EXECPLANE_VAULT_ADDR)"
            )));
        };
        vault
            .write(what, &location.mount, &location.path, data)
            .await
            .map_err(|error| Failure::new(error.category(), error.to_string()))
    }

    /// The attempt whose outputs `store_output` stores, and the masker
    /// their bytes go through.
    pub(crate) fn with_outputs(mut self, outputs: outputs::Outputs) -> Self {
        self.outputs = Some(outputs);
        self
    }

    /// Stores the regular file at `path` as the attempt's output `name`
    /// (masked like everything else, digest and size computed from the
    /// stored bytes) and lists it in the final report; the artifact worker
    /// records it as an artifact of the attempt.
    pub async fn store_output(
        &self,
        path: &std::path::Path,
        name: &str,
        class: crate::contract::RetentionClass,
    ) -> Result<crate::contract::OutputArtifact, outputs::OutputError> {
        let media_type = crate::artifacts::outputs::media_type_of(name);
        self.outputs(name)?
            .store(self.storage.as_deref(), path, name, class, media_type)
            .await
    }

    /// Stores `bytes` as the attempt's output `name`, as
    /// [`Self::store_output`] stores a file.
    pub async fn store_output_bytes(
        &self,
        bytes: Vec<u8>,
        name: &str,
        class: crate::contract::RetentionClass,
    ) -> Result<crate::contract::OutputArtifact, outputs::OutputError> {
        let media_type = crate::artifacts::outputs::media_type_of(name);
        self.outputs(name)?
            .store_bytes(self.storage.as_deref(), bytes, name, class, media_type)
            .await
    }

    /// The attempt's outputs, which output `name` would join.
    fn outputs(&self, name: &str) -> Result<&outputs::Outputs, outputs::OutputError> {
        self.outputs
            .as_ref()
            .ok_or_else(|| outputs::OutputError::Refused {
                name: name.to_owned(),
                reason: "no attempt to store it for".into(),
            })
    }

    /// Stores what a tool made (a saved plan, say) as an input artifact
    /// of the attempt's tenant, which only its attempts fetch, with
    /// `origin`: the facts of its making, which a later attempt checks it
    /// against ([`Self::input_origin`]). Its reference.
    pub async fn store_input(
        &self,
        bytes: &[u8],
        origin: &serde_json::Value,
    ) -> Result<crate::artifacts::inputs::InputRef, Failure> {
        use crate::artifacts::{inputs, ArtifactStorage};
        let storage = self.storage_or_failure()?;
        let reference = inputs::put(storage, bytes)
            .await
            .map_err(|error| Failure::infrastructure(format!("storing it: {error}")))?;
        inputs::bind(storage, &reference, &self.tenant)
            .await
            .map_err(|error| Failure::infrastructure(format!("storing it: {error}")))?;
        let record = serde_json::to_vec(origin).unwrap_or_default();
        storage
            .put(&inputs::origin_key(&reference), &record)
            .await
            .map_err(|error| Failure::infrastructure(format!("recording its origin: {error}")))?;
        Ok(reference)
    }

    /// Output `name` (digest `sha256`, hex) of another attempt, for this
    /// attempt's tenant: refused as `policy` unless that attempt is the
    /// tenant's ([`artifacts::inputs::fetch_output_for`]), `contract` when
    /// there is no such output, checked against its digest.
    ///
    /// [`artifacts::inputs::fetch_output_for`]: crate::artifacts::inputs::fetch_output_for
    pub async fn fetch_output(
        &self,
        attempt_id: uuid::Uuid,
        name: &str,
        sha256: &str,
    ) -> Result<Vec<u8>, Failure> {
        use crate::artifacts::inputs;
        let storage = self.storage_or_failure()?;
        let reference = inputs::InputRef::parse(&format!("sha256:{sha256}"))
            .map_err(|error| Failure::new(FailureCategory::Contract, error))?;
        inputs::fetch_output_for(storage, attempt_id, name, &reference, &self.tenant)
            .await
            .map_err(|error| Failure::new(error.category(), error.to_string()))
    }

    /// The origin [`Self::store_input`] recorded for `reference`; none for
    /// content no attempt made.
    pub async fn input_origin(
        &self,
        reference: &crate::artifacts::inputs::InputRef,
    ) -> Result<Option<serde_json::Value>, Failure> {
        use crate::artifacts::ArtifactStorage;
        let storage = self.storage_or_failure()?;
        match storage
            .get(&crate::artifacts::inputs::origin_key(reference))
            .await
        {
            Ok(record) => Ok(Some(
                serde_json::from_slice(&record).unwrap_or(serde_json::Value::Null),
            )),
            Err(crate::artifacts::StorageError::NotFound(_)) => Ok(None),
            Err(error) => Err(Failure::infrastructure(format!(
                "reading its origin: {error}"
            ))),
        }
    }

    fn storage_or_failure(&self) -> Result<&crate::artifacts::Storage, Failure> {
        self.storage()
            .ok_or_else(|| Failure::infrastructure("this runner has no artifact storage"))
    }

    /// The artifact storage input artifacts are fetched from.
    pub fn with_storage(
        mut self,
        storage: Option<std::sync::Arc<crate::artifacts::Storage>>,
    ) -> Self {
        self.storage = storage;
        self
    }

    pub(in crate::runner) fn storage(&self) -> Option<&crate::artifacts::Storage> {
        self.storage.as_deref()
    }

    /// The tenant the attempt runs for: the only one whose stored inputs
    /// [`Self::fetch_input`] reads.
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }

    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// A requester's input artifact, checked against its digest and refused
    /// (`policy`) unless it was stored for this attempt's tenant
    /// (`artifacts::inputs::fetch_for`).
    pub async fn fetch_input(
        &self,
        reference: &crate::artifacts::inputs::InputRef,
    ) -> Result<Vec<u8>, crate::artifacts::inputs::InputError> {
        self.fetch(reference, Some(&self.tenant)).await
    }

    /// Content the operator's policy approved by digest for the tenant (an
    /// ansible package, an OpenTofu module, a chart), checked against it:
    /// the approval is its binding to the tenant, re-checked by the SDK
    /// before the executor runs.
    pub async fn fetch_approved(
        &self,
        reference: &crate::artifacts::inputs::InputRef,
    ) -> Result<Vec<u8>, crate::artifacts::inputs::InputError> {
        self.fetch(reference, None).await
    }

    async fn fetch(
        &self,
        reference: &crate::artifacts::inputs::InputRef,
        tenant: Option<&str>,
    ) -> Result<Vec<u8>, crate::artifacts::inputs::InputError> {
        use crate::artifacts::inputs;
        let Some(storage) = self.storage() else {
            return Err(inputs::InputError::Storage {
                reference: reference.clone(),
                source: crate::artifacts::StorageError::Io(std::io::Error::other(
                    "this runner has no artifact storage configured",
                )),
            });
        };
        match tenant {
            Some(tenant) => inputs::fetch_for(storage, reference, tenant).await,
            None => inputs::fetch(storage, reference).await,
        }
    }

    /// Where and how tool processes run, and the grace a stopped one gets.
    pub fn with_tools(
        mut self,
        tools: std::sync::Arc<tool::ToolSettings>,
        stop_grace: Duration,
    ) -> Self {
        self.output_budget = std::sync::Arc::new(tool::OutputBudget::new(tools.max_output_bytes));
        self.tools = tools;
        self.stop_grace = stop_grace;
        self
    }

    pub(crate) fn output_budget(&self) -> std::sync::Arc<tool::OutputBudget> {
        self.output_budget.clone()
    }

    /// The start-to-close deadline of the attempt.
    pub fn with_deadline(mut self, deadline: tokio::time::Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    pub fn tools(&self) -> &tool::ToolSettings {
        &self.tools
    }

    pub fn stop_grace(&self) -> Duration {
        self.stop_grace
    }

    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.deadline
    }

    /// Whole seconds a tool's own timeout may take: what is left of the
    /// attempt (5 minutes without a deadline), less `margin` to report in;
    /// at least one.
    pub fn seconds_left(&self, margin: Duration) -> u64 {
        let left = self
            .deadline
            .map(|deadline| deadline.saturating_duration_since(tokio::time::Instant::now()))
            .unwrap_or(Duration::from_secs(300));
        left.saturating_sub(margin).as_secs().max(1)
    }

    /// Writes tool output; it is masked (as a stream) and sent to
    /// `exec.log-chunks.v1` in order.
    pub fn log(&self, stream: LogStream, text: impl Into<String>) {
        let _ = self.log.send((stream, text.into()));
    }

    /// Reports progress; carried on the next heartbeat.
    pub fn progress(&self, message: impl Into<String>, percent: Option<u8>) {
        let _ = self.progress.send((message.into(), percent));
    }
}

/// The typed result of one execution.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionOutcome {
    pub outcome: ReportedOutcome,
    pub category: Option<FailureCategory>,
    pub message: String,
    /// The runner's typed output (evidence, recap, ...) as JSON.
    pub result_json: Option<String>,
}

impl ExecutionOutcome {
    pub fn succeeded(message: impl Into<String>, result: serde_json::Value) -> Self {
        Self {
            outcome: ReportedOutcome::Succeeded,
            category: None,
            message: message.into(),
            result_json: Some(result.to_string()),
        }
    }

    pub fn failed(
        category: FailureCategory,
        message: impl Into<String>,
        result: Option<serde_json::Value>,
    ) -> Self {
        Self {
            outcome: ReportedOutcome::Failed,
            category: Some(category),
            message: message.into(),
            result_json: result.map(|value| value.to_string()),
        }
    }
}

/// Why an attempt failed, in every runner: the category (which decides
/// retry and who must act), and a message the requester can act on. The
/// result gathered until then goes with it as evidence ([`Self::outcome`]).
#[derive(Debug)]
pub struct Failure {
    pub category: FailureCategory,
    pub message: String,
}

impl Failure {
    pub fn new(category: FailureCategory, message: impl Into<String>) -> Self {
        Self {
            category,
            message: message.into(),
        }
    }

    /// The JobSpec asks for what cannot be: the requester's to fix.
    pub fn contract(message: impl Into<String>) -> Self {
        Self::new(FailureCategory::Contract, message)
    }

    /// The operator's policy refuses it.
    pub fn policy(message: impl Into<String>) -> Self {
        Self::new(FailureCategory::Policy, message)
    }

    /// Something of the platform's own is missing or broken.
    pub fn infrastructure(message: impl Into<String>) -> Self {
        Self::new(FailureCategory::Infrastructure, message)
    }

    /// The outcome to report, with the result gathered so far.
    pub fn outcome(self, result: Option<serde_json::Value>) -> ExecutionOutcome {
        ExecutionOutcome::failed(self.category, self.message, result)
    }
}

impl From<Failure> for ExecutionOutcome {
    fn from(failure: Failure) -> Self {
        failure.outcome(None)
    }
}

/// A typed runner's one job.
pub trait Executor: Send + Sync + 'static {
    /// The inputs of its operations. The SDK parses a JobSpec's inputs once,
    /// after its secrets resolve, checks them as intake did (the
    /// contract's input checks and flag gates) and hands `execute` the
    /// typed value: an executor never parses, and never repeats those
    /// checks.
    type Inputs: RunnerInputs;
    fn runner_type(&self) -> RunnerType;
    /// The operations this executor runs, announced with its presence:
    /// placement grants an attempt only to an instance that lists its
    /// operation. Those of its inputs that this release implements.
    fn operations(&self) -> Vec<Operation> {
        Self::Inputs::OPERATIONS
            .iter()
            .copied()
            .filter(|operation| operation.is_implemented())
            .collect()
    }
    /// Capabilities this runner offers placement.
    fn capabilities(&self) -> Vec<String> {
        Vec::new()
    }
    /// Checked once before the runner announces anything
    /// ([`preflight`]): why this host cannot run its operations (its tool
    /// missing, too old, not answering), else nothing.
    fn preflight(&self) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }
    fn execute(
        &self,
        assignment: Assignment,
        inputs: Self::Inputs,
        context: ExecutionContext,
    ) -> impl Future<Output = ExecutionOutcome> + Send;
}

/// Instance settings; defaults are in the README.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    pub capacity: u32,
    pub pool: BTreeMap<String, String>,
    pub presence_interval: Duration,
    /// How long shutdown waits for running attempts before stopping them.
    pub drain_timeout: Duration,
    /// `EXECPLANE_RUNNER_STOP_GRACE`: how long a stopped tool gets between
    /// SIGINT and SIGKILL; the outcome is reported at most a second after.
    pub stop_grace: Duration,
    /// Where tool processes run.
    pub tools: std::sync::Arc<tool::ToolSettings>,
    /// The artifact storage input artifacts are read from (runners reach
    /// storage, never the store); none: a job naming one fails.
    pub storage: Option<std::sync::Arc<crate::artifacts::Storage>>,
    /// Where `{"$secret": ...}` references are resolved; none: a JobSpec
    /// that needs a secret fails `infrastructure`.
    pub secrets: Option<std::sync::Arc<crate::secrets::Vault>>,
    /// The operator's policy (`EXECPLANE_POLICY_FILE`).
    pub policy: crate::policy::SharedPolicy,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            capacity: 16,
            pool: BTreeMap::new(),
            presence_interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(30),
            stop_grace: Duration::from_secs(2),
            tools: std::sync::Arc::default(),
            storage: None,
            secrets: None,
            policy: crate::policy::SharedPolicy::default(),
        }
    }
}

/// The margin before the lease deadline at which a runner fences itself:
/// a tenth of the TTL, at least 250 ms.
pub fn fence_margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(250))
}

/// Heartbeat period: a fifth of the TTL, so a heartbeat always lands in the
/// second half of the lease, where the dispatcher extends it.
pub fn heartbeat_period(ttl: Duration) -> Duration {
    (ttl / 5).max(Duration::from_millis(100))
}
