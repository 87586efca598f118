use std::future::Future;
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams,
    PropagationPolicy,
};
use serde::Deserialize;
use serde_json::Value;

use super::KubernetesConfig;
use crate::contract::ops::{
    ClusterRef, KubernetesApply, KubernetesDelete, KubernetesInputs as I, KubernetesInputs,
    KubernetesObject, KubernetesPatch, KubernetesWait, ObjectRef, PatchType, WaitFor,
    WantedCondition,
};
use crate::contract::ops::{
    ConditionObservation, KubernetesEvent, KubernetesObjectResult, KubernetesResult,
    KubernetesWaitEvidence,
};
use crate::contract::{FailureCategory, RunnerType};
use crate::policy::OperationRules;
use crate::runner::kit::kube::judge::{self, Observation, Rollout};
use crate::runner::kit::kube::{self as cluster, Kinds};
use crate::runner::{Assignment, ExecutionContext, ExecutionOutcome, Executor, Failure};

/// The largest manifests file an apply reads (YAML aliases can multiply
/// what a file holds, so the file itself is kept small).
const MAX_MANIFESTS_BYTES: usize = 4 * 1024 * 1024;
/// The most of one event's message kept.
const MAX_EVENT_MESSAGE: usize = 1024;
/// The most events read per object.
const EVENTS_LISTED: u32 = 200;
/// The most manifests one apply takes.
const MAX_MANIFESTS: usize = judge::MAX_DOCUMENTS;
/// The most events reported per object (the newest).
const MAX_EVENTS_PER_OBJECT: usize = 20;
/// The most entries a wait's history keeps (the last look always among them).
const MAX_HISTORY: usize = 100;
/// The largest object `resource.read` returns whole.
const MAX_READ_OBJECT_BYTES: usize = 128 * 1024;
/// The field manager of `resource.patch`.
const PATCH_FIELD_MANAGER: &str = "execplane";

/// The kubernetes runner's executor.
pub struct KubernetesRunner {
    config: KubernetesConfig,
}

impl KubernetesRunner {
    pub fn new(config: KubernetesConfig) -> Self {
        Self { config }
    }
}

impl Executor for KubernetesRunner {
    type Inputs = KubernetesInputs;

    fn runner_type(&self) -> RunnerType {
        RunnerType::Kubernetes
    }

    fn capabilities(&self) -> Vec<String> {
        vec!["kubernetes".into(), "server-side-apply".into()]
    }

    async fn execute(
        &self,
        assignment: Assignment,
        inputs: KubernetesInputs,
        context: ExecutionContext,
    ) -> ExecutionOutcome {
        let cluster_ref = cluster_of(&inputs);
        let policy = context.policy();
        let client = match cluster::connect(policy, cluster_ref, self.config.client) {
            Ok(client) => client,
            Err(failure) => return failure.into(),
        };
        let mut session = Session {
            cluster: cluster_ref.name.clone(),
            client,
            kinds: Kinds::default(),
            rules: policy.tenant(&assignment.spec.tenant).operations.clone(),
            context: &context,
            poll_interval: self.config.poll_interval,
            report: KubernetesResult {
                cluster: cluster_ref.name.clone(),
                ..KubernetesResult::default()
            },
        };
        let done = match &inputs {
            I::KubernetesManifestApply(apply) => session.apply(apply).await,
            I::KubernetesManifestDelete(delete) => session.delete(delete).await,
            I::KubernetesWait(wait) => session.wait(wait).await,
            I::KubernetesRolloutStatus(object) => session.rollout(object).await,
            I::KubernetesResourcePatch(patch) => session.patch(patch).await,
            I::KubernetesResourceRead(object) => session.read(object).await,
        };
        session.snapshot_events().await;
        let report = serde_json::to_value(&session.report).ok();
        match done {
            Ok(message) => ExecutionOutcome::succeeded(message, report.unwrap_or(Value::Null)),
            Err(failure) => failure.outcome(report),
        }
    }
}

fn cluster_of(inputs: &KubernetesInputs) -> &ClusterRef {
    match inputs {
        I::KubernetesManifestApply(apply) => &apply.cluster,
        I::KubernetesManifestDelete(delete) => &delete.cluster,
        I::KubernetesWait(wait) => &wait.cluster,
        I::KubernetesRolloutStatus(object) | I::KubernetesResourceRead(object) => &object.cluster,
        I::KubernetesResourcePatch(patch) => &patch.cluster,
    }
}

/// A failed API call as the attempt's failure: the API server's answer
/// says whose problem it is.
fn api_failure(what: &str, error: kube::Error) -> Failure {
    match error {
        kube::Error::Api(status) => {
            let category = match status.code {
                // The request itself: bad manifest, unknown field, refused
                // credentials or RBAC, something that is not there.
                400 | 401 | 403 | 404 | 405 | 415 | 422 => FailureCategory::Contract,
                // A field owned by another manager, a stale write.
                409 => FailureCategory::RunnerError,
                _ => FailureCategory::Infrastructure,
            };
            // Whole: the report masks the attempt's secrets in it and only
            // then bounds it, so no secret the server echoed is cut in two
            // (a half the masker would not know).
            let message = &status.message;
            let hint = if status.code == 409 && status.reason == "Conflict" {
                " (another field manager owns these fields: set `force_conflicts` to take them)"
            } else {
                ""
            };
            Failure::new(
                category,
                format!(
                    "{what}: the API server answered {} {}: {message}{hint}",
                    status.code, status.reason
                ),
            )
        }
        other => Failure::new(
            FailureCategory::TargetUnreachable,
            format!("{what}: {other}"),
        ),
    }
}

/// One call to the API server, ended by a cancel (or a stop) or by the
/// attempt's start-to-close deadline, whichever comes first.
async fn bounded<T>(
    context: &ExecutionContext,
    what: &str,
    call: impl Future<Output = kube::Result<T>>,
) -> Result<T, Failure> {
    let deadline = context.deadline();
    tokio::select! {
        _ = context.cancel.cancelled() => Err(Failure::new(FailureCategory::Cancelled, format!("{what}: stopped"))),
        _ = sleep_until(deadline) => Err(Failure::new(
            FailureCategory::Timeout,
            format!("{what}: the attempt's start_to_close passed"),
        )),
        result = call => result.map_err(|error| api_failure(what, error)),
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// An object the runner acts on: its API, where it lives, what it is.
struct Target {
    api: Api<DynamicObject>,
    namespace: Option<String>,
    api_version: String,
    kind: String,
    name: String,
}

impl Target {
    fn label(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{}/{} in {namespace}", self.kind, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }

    /// The result entry of this object as `object` (the API server's answer).
    fn result(&self, object: Option<&Value>, action: &str) -> KubernetesObjectResult {
        let text = |pointer: &str| {
            object
                .and_then(|object| object.pointer(pointer))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        KubernetesObjectResult {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: text("/metadata/uid"),
            resource_version: text("/metadata/resourceVersion"),
            generation: object
                .and_then(|object| object.pointer("/metadata/generation"))
                .and_then(Value::as_i64),
            action: action.to_owned(),
            changed_fields: Vec::new(),
            changed_fields_truncated: false,
            object: None,
        }
    }
}

/// One attempt's conversation with its cluster.
struct Session<'a> {
    cluster: String,
    client: kube::Client,
    kinds: Kinds,
    /// The tenant's rules, checked per object with its discovered scope.
    rules: OperationRules,
    context: &'a ExecutionContext,
    poll_interval: Duration,
    report: KubernetesResult,
}

impl Session<'_> {
    /// Resolves a kind through discovery and checks the object against the
    /// tenant's policy with the scope the cluster reports.
    async fn target(
        &mut self,
        field: &str,
        api_version: &str,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
        default_namespace: &str,
    ) -> Result<Target, Failure> {
        let what = format!("{field}: discovery of {api_version} {kind}");
        let resolved = bounded(
            self.context,
            &what,
            self.kinds.resolve(&self.client, api_version, kind),
        )
        .await?
        .ok_or_else(|| {
            Failure::contract(format!(
                "{field}: cluster `{}` serves no kind `{kind}` in `{api_version}`",
                self.cluster
            ))
        })?;
        let namespace = resolved
            .namespaced
            .then(|| namespace.unwrap_or(default_namespace).to_owned());
        // The path's segments: nothing that could reshape the URL.
        use crate::contract::kube_names::{label_problem, name_problem};
        let bad = name_problem(name)
            .map(|problem| format!("{field}: name {problem}"))
            .or_else(|| {
                let namespace = namespace.as_deref()?;
                label_problem(namespace).map(|problem| format!("{field}: namespace {problem}"))
            });
        if let Some(message) = bad {
            return Err(Failure::contract(message));
        }
        self.rules
            .kubernetes_object(&self.cluster, kind, name, namespace.as_deref())
            .map_err(|message| Failure::policy(format!("{field}: {message}")))?;
        let api = match &namespace {
            Some(namespace) => {
                Api::namespaced_with(self.client.clone(), namespace, &resolved.resource)
            }
            None => Api::all_with(self.client.clone(), &resolved.resource),
        };
        Ok(Target {
            api,
            namespace,
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
        })
    }

    async fn target_of(
        &mut self,
        field: &str,
        object: &ObjectRef,
        default_namespace: &str,
    ) -> Result<Target, Failure> {
        self.target(
            field,
            &object.api_version,
            &object.kind,
            &object.name,
            object.namespace.as_deref(),
            default_namespace,
        )
        .await
    }

    async fn get(&self, target: &Target) -> Result<Option<Value>, Failure> {
        let what = format!("read {}", target.label());
        let object = bounded(self.context, &what, target.api.get_opt(&target.name)).await?;
        Ok(object.map(|object| serde_json::to_value(object).unwrap_or(Value::Null)))
    }

    /// `kubernetes.manifest.apply`: every manifest resolved and checked
    /// first (a refused one leaves the cluster untouched), then applied in
    /// order, server-side, as the JobSpec's field manager.
    async fn apply(&mut self, apply: &KubernetesApply) -> Result<String, Failure> {
        self.report.dry_run = apply.dry_run;
        let manager = &apply.field_manager;
        if manager.is_empty()
            || manager.len() > 128
            || !manager.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(Failure::contract(
                "inputs.field_manager: 1-128 printable characters, no spaces",
            ));
        }
        let manifests = self.manifests(apply).await?;
        let targets = self.targets_of(&manifests, &apply.namespace).await?;
        let mut params = PatchParams::apply(manager);
        params.dry_run = apply.dry_run;
        if apply.force_conflicts {
            params = params.force();
        }
        let total = targets.len();
        let mut counts = [0usize; 3];
        for (index, (target, (_, manifest))) in targets.iter().zip(&manifests).enumerate() {
            self.context.progress(
                format!("{}/{total}: apply {}", index + 1, target.label()),
                u8::try_from(index * 100 / total).ok(),
            );
            let before = self.get(target).await?;
            let what = format!("apply {}", target.label());
            let applied = bounded(
                self.context,
                &what,
                target
                    .api
                    .patch(&target.name, &params, &Patch::Apply(manifest)),
            )
            .await?;
            let after = serde_json::to_value(applied).unwrap_or(Value::Null);
            let (changed, truncated) = judge::changed_fields(before.as_ref(), &after);
            // Unchanged: no field differs AND the manager's own entry (the
            // fields it owns, when that last changed) is as it was, so the
            // apply wrote nothing; a change of ownership alone is a write.
            let owned_alike = before
                .as_ref()
                .map(|before| judge::applied_by(before, manager))
                == Some(judge::applied_by(&after, manager));
            let (action, slot) = match (&before, changed.is_empty() && owned_alike) {
                (None, _) => ("created", 0),
                (Some(_), false) => ("configured", 1),
                (Some(_), true) => ("unchanged", 2),
            };
            counts[slot] += 1;
            let mut result = target.result(Some(&after), action);
            result.changed_fields = changed;
            result.changed_fields_truncated = truncated;
            self.report.objects.push(result);
        }
        let dry = if apply.dry_run {
            " (server dry run: nothing persisted)"
        } else {
            ""
        };
        self.wait_for(&apply.wait_for, &apply.namespace).await?;
        let waited = match apply.wait_for.len() {
            0 => String::new(),
            waits => format!("; {waits} wait(s) met"),
        };
        Ok(format!(
            "{total} object(s) applied on `{}`{dry}: {} created, {} configured, {} unchanged{waited}",
            self.cluster, counts[0], counts[1], counts[2]
        ))
    }

    /// Each manifest's object: its names checked, its kind resolved and
    /// checked against the tenant's rules, in `namespace` unless it names
    /// its own.
    async fn targets_of(
        &mut self,
        manifests: &[(String, Value)],
        namespace: &str,
    ) -> Result<Vec<Target>, Failure> {
        let mut targets = Vec::with_capacity(manifests.len());
        for (field, manifest) in manifests {
            let mut problems = Vec::new();
            crate::contract::kube_names::manifest_problems(field, manifest, &mut problems);
            if let Some(problem) = problems.first() {
                return Err(Failure::contract(format!(
                    "{}: {}",
                    problem.path, problem.message
                )));
            }
            let (api_version, kind, name) = identity(field, manifest)?;
            let own = manifest
                .pointer("/metadata/namespace")
                .and_then(Value::as_str);
            let target = self
                .target(field, api_version, kind, name, own, namespace)
                .await?;
            targets.push(target);
        }
        Ok(targets)
    }

    /// The manifests of an apply with the field each came from: inline, or
    /// the documents of a YAML (or JSON) artifact, `List`s expanded.
    async fn manifests(&self, apply: &KubernetesApply) -> Result<Vec<(String, Value)>, Failure> {
        let manifests: Vec<(String, Value)> = match &apply.manifests_artifact {
            None => apply
                .manifests
                .iter()
                .enumerate()
                .map(|(index, manifest)| (format!("inputs.manifests[{index}]"), manifest.clone()))
                .collect(),
            Some(reference) => {
                let reference =
                    crate::artifacts::inputs::InputRef::parse(reference).map_err(|message| {
                        Failure::contract(format!("inputs.manifests_artifact: {message}"))
                    })?;
                let fetched = tokio::select! {
                    _ = self.context.cancel.cancelled() => {
                        return Err(Failure::new(FailureCategory::Cancelled, "inputs.manifests_artifact: stopped"));
                    }
                    fetched = self.context.fetch_input(&reference) => fetched,
                };
                let bytes = fetched.map_err(|error| {
                    Failure::new(
                        error.category(),
                        format!("inputs.manifests_artifact: {error}"),
                    )
                })?;
                if bytes.len() > MAX_MANIFESTS_BYTES {
                    return Err(Failure::contract(format!(
                        "inputs.manifests_artifact: {} bytes; a manifests file is at most {MAX_MANIFESTS_BYTES}",
                        bytes.len()
                    )));
                }
                judge::documents(&bytes)
                    .map_err(|message| {
                        Failure::contract(format!("inputs.manifests_artifact: {message}"))
                    })?
                    .into_iter()
                    .enumerate()
                    .map(|(index, manifest)| {
                        (format!("inputs.manifests_artifact[{index}]"), manifest)
                    })
                    .collect()
            }
        };
        if manifests.is_empty() {
            return Err(Failure::contract("inputs.manifests: nothing to apply"));
        }
        if manifests.len() > MAX_MANIFESTS {
            return Err(Failure::contract(format!(
                "inputs.manifests: {} manifests; one apply takes at most {MAX_MANIFESTS}",
                manifests.len()
            )));
        }
        Ok(manifests)
    }

    /// `kubernetes.manifest.delete`: every object resolved and checked
    /// first, then deleted in order (background propagation); one that is
    /// not there is reported `absent`.
    async fn delete(&mut self, delete: &KubernetesDelete) -> Result<String, Failure> {
        self.report.dry_run = delete.dry_run;
        if delete.objects.is_empty() {
            return Err(Failure::contract("inputs.objects: nothing to delete"));
        }
        let mut targets = Vec::with_capacity(delete.objects.len());
        for (index, object) in delete.objects.iter().enumerate() {
            let field = format!("inputs.objects[{index}]");
            targets.push(self.target_of(&field, object, &delete.namespace).await?);
        }
        let params = DeleteParams {
            dry_run: delete.dry_run,
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        let (total, mut deleted) = (targets.len(), 0);
        for (index, target) in targets.iter().enumerate() {
            self.context.progress(
                format!("{}/{total}: delete {}", index + 1, target.label()),
                u8::try_from(index * 100 / total).ok(),
            );
            let Some(before) = self.get(target).await? else {
                self.report.objects.push(target.result(None, "absent"));
                continue;
            };
            let what = format!("delete {}", target.label());
            let deleting = async {
                match target.api.delete(&target.name, &params).await {
                    Ok(_) => Ok(true),
                    // Gone between the read and the delete: what was asked.
                    Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
                    Err(error) => Err(error),
                }
            };
            if bounded(self.context, &what, deleting).await? {
                deleted += 1;
                self.report
                    .objects
                    .push(target.result(Some(&before), "deleted"));
            } else {
                self.report
                    .objects
                    .push(target.result(Some(&before), "absent"));
            }
        }
        let dry = if delete.dry_run {
            " (server dry run: nothing deleted)"
        } else {
            ""
        };
        Ok(format!(
            "{deleted} of {total} object(s) deleted on `{}`{dry}, {} absent",
            self.cluster,
            total - deleted
        ))
    }

    /// `kubernetes.resource.read`: the object as served.
    async fn read(&mut self, read: &KubernetesObject) -> Result<String, Failure> {
        let target = self
            .target_of("inputs.object", &read.object, &read.namespace)
            .await?;
        let Some(mut object) = self.get(&target).await? else {
            return Err(Failure::contract(format!("{} not found", target.label())));
        };
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("managedFields");
        }
        let object = judge::redacted(object);
        let mut result = target.result(Some(&object), "read");
        let size = serde_json::to_vec(&object).map_or(usize::MAX, |bytes| bytes.len());
        let note = if size <= MAX_READ_OBJECT_BYTES {
            result.object = Some(object);
            String::new()
        } else {
            format!(" (the object is {size} bytes: over {MAX_READ_OBJECT_BYTES}, not returned)")
        };
        self.report.objects.push(result);
        Ok(format!("read {}{note}", target.label()))
    }

    /// `kubernetes.resource.patch`: a merge, strategic merge or JSON patch.
    async fn patch(&mut self, patch: &KubernetesPatch) -> Result<String, Failure> {
        let body = match patch.patch_type {
            PatchType::Merge => Patch::Merge(patch.patch.clone()),
            PatchType::Strategic => Patch::Strategic(patch.patch.clone()),
            PatchType::Json => {
                let operations = json_patch::Patch::deserialize(&patch.patch).map_err(|error| {
                    Failure::contract(format!("inputs.patch: not an RFC 6902 JSON patch: {error}"))
                })?;
                Patch::Json(operations)
            }
        };
        let target = self
            .target_of("inputs.object", &patch.object, &patch.namespace)
            .await?;
        let Some(before) = self.get(&target).await? else {
            return Err(Failure::contract(format!("{} not found", target.label())));
        };
        let params = PatchParams {
            field_manager: Some(PATCH_FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let what = format!("patch {}", target.label());
        let patched = bounded(
            self.context,
            &what,
            target.api.patch(&target.name, &params, &body),
        )
        .await?;
        let after = serde_json::to_value(patched).unwrap_or(Value::Null);
        let (changed, truncated) = judge::changed_fields(Some(&before), &after);
        let rewritten = before.pointer("/metadata/resourceVersion")
            != after.pointer("/metadata/resourceVersion");
        let action = if changed.is_empty() && !rewritten {
            "unchanged"
        } else {
            "patched"
        };
        let mut result = target.result(Some(&after), action);
        result.changed_fields = changed;
        result.changed_fields_truncated = truncated;
        let count = result.changed_fields.len();
        self.report.objects.push(result);
        self.wait_for(&patch.wait_for, &patch.namespace).await?;
        Ok(format!(
            "{action} {} ({count} field(s) changed)",
            target.label()
        ))
    }

    /// `kubernetes.wait`: the named conditions, on the current generation.
    async fn wait(&mut self, wait: &KubernetesWait) -> Result<String, Failure> {
        let target = self
            .target_of("inputs.object", &wait.object, &wait.namespace)
            .await?;
        let limit = wait.timeout.map(|timeout| timeout.as_std());
        self.conditions(&target, &wait.wanted(), wait.any, limit)
            .await
    }

    /// An apply's or a patch's `wait_for`, each in turn once the writes
    /// are done: its evidence in `waits`, naming the object.
    async fn wait_for(&mut self, waits: &[WaitFor], namespace: &str) -> Result<(), Failure> {
        for (index, wait) in waits.iter().enumerate() {
            let field = format!("inputs.wait_for[{index}].object");
            let target = self.target_of(&field, &wait.object, namespace).await?;
            let limit = wait.timeout.map(|timeout| timeout.as_std());
            let waited = self
                .conditions(&target, &wait.conditions, wait.any, limit)
                .await;
            if let Some(mut evidence) = self.report.wait.take() {
                evidence.object = Some(target.label());
                self.report.waits.push(evidence);
            }
            waited?;
        }
        Ok(())
    }

    /// Watches `target` until `wanted` hold (all, or with `any` one).
    async fn conditions(
        &mut self,
        target: &Target,
        wanted: &[WantedCondition],
        any: bool,
        limit: Option<Duration>,
    ) -> Result<String, Failure> {
        let names: Vec<String> = wanted
            .iter()
            .map(|wanted| format!("{}={}", wanted.kind, wanted.status))
            .collect();
        let name = names.join(if any { " | " } else { ", " });
        let judged = self
            .watch(target, &name, limit, |object| {
                Ok((judge::conditions(object, wanted, any), false))
            })
            .await?;
        match judged {
            Watched::Met => Ok(format!("{} has {name}", target.label())),
            Watched::Ended => Err(Failure::new(
                FailureCategory::RunnerError,
                format!("waiting for {name} on {} ended unmet", target.label()),
            )),
            Watched::TimedOut(last) => Err(Failure::new(
                FailureCategory::Timeout,
                format!(
                    "{} did not reach {name} in time; last seen: {last}",
                    target.label()
                ),
            )),
        }
    }

    /// `kubernetes.rollout.status`: until the current generation is rolled
    /// out (`judge::rollout`), or the controller reports it will not be.
    async fn rollout(&mut self, rollout: &KubernetesObject) -> Result<String, Failure> {
        let kind = rollout.object.kind.as_str();
        // apps/v1 only: a custom kind named `Deployment` is not judged as one.
        if !judge::ROLLOUT_KINDS.contains(&kind) || rollout.object.api_version != "apps/v1" {
            return Err(Failure::contract(format!(
                "inputs.object: `{}` `{kind}` has no rollout: rollout.status watches apps/v1 {}",
                rollout.object.api_version,
                judge::ROLLOUT_KINDS.join(", ")
            )));
        }
        let target = self
            .target_of("inputs.object", &rollout.object, &rollout.namespace)
            .await?;
        let mut failed = None;
        let judged = self
            .watch(&target, "rollout", None, |object| {
                let (state, observation) = judge::rollout(kind, object)?;
                let terminal = matches!(state, Rollout::Failed(_));
                if let Rollout::Failed(message) = state {
                    failed = Some(message);
                }
                Ok((observation, terminal))
            })
            .await;
        if let Some(message) = failed {
            return Err(Failure::new(
                FailureCategory::VerificationFailed,
                format!("the rollout of {} failed: {message}", target.label()),
            ));
        }
        match judged? {
            Watched::Met => Ok(format!("{} is rolled out", target.label())),
            Watched::Ended => Err(Failure::new(
                FailureCategory::VerificationFailed,
                format!("the rollout of {} ended unfinished", target.label()),
            )),
            Watched::TimedOut(last) => Err(Failure::new(
                FailureCategory::Timeout,
                format!(
                    "{} was not rolled out in time; last seen: {last}",
                    target.label()
                ),
            )),
        }
    }

    /// Looks at the object every poll interval until `judge` says met, the
    /// limit (or the attempt's deadline) passes, or the attempt is stopped;
    /// every change seen goes into the evidence. A judge that returns a
    /// failure, or says the state is terminal (a rollout that failed), ends
    /// the watch.
    async fn watch(
        &mut self,
        target: &Target,
        condition: &str,
        limit: Option<Duration>,
        mut judge: impl FnMut(&Value) -> Result<(Observation, bool), Failure>,
    ) -> Result<Watched, Failure> {
        let started = tokio::time::Instant::now();
        let limit_at = limit.map(|limit| started + limit);
        let deadline = match (limit_at, self.context.deadline()) {
            (Some(limit), Some(deadline)) => Some(limit.min(deadline)),
            (limit, deadline) => limit.or(deadline),
        };
        let mut history: Vec<ConditionObservation> = Vec::new();
        let mut last: Option<Observation> = None;
        let mut seen: Option<Value>;
        let outcome = loop {
            self.context.progress(
                format!("waiting for {condition} on {}", target.label()),
                None,
            );
            seen = match self.get(target).await {
                Ok(seen) => seen,
                Err(failure) => {
                    self.report.wait = Some(evidence(condition, false, history));
                    return Err(failure);
                }
            };
            let (observation, terminal) = match &seen {
                Some(object) => judge(object)?,
                None => (
                    Observation {
                        generation: None,
                        observed_generation: None,
                        status: None,
                        reason: Some("NotFound".into()),
                        message: Some(format!("{} does not exist", target.label())),
                        detail: None,
                        met: false,
                    },
                    false,
                ),
            };
            let changed = last.as_ref() != Some(&observation);
            if changed {
                record(&mut history, &observation);
            }
            let met = observation.met;
            last = Some(observation);
            if met {
                break Watched::Met;
            }
            if terminal {
                break Watched::Ended;
            }
            if deadline.is_some_and(|deadline| tokio::time::Instant::now() >= deadline) {
                break Watched::TimedOut(describe(last.as_ref()));
            }
            let nap = tokio::time::sleep(self.poll_interval);
            tokio::select! {
                _ = self.context.cancel.cancelled() => {
                    self.report.objects.push(target.result(seen.as_ref(), "waited"));
                    self.report.wait = Some(evidence(condition, false, history));
                    return Err(Failure::new(FailureCategory::Cancelled, format!("waiting for {condition}: stopped")));
                }
                _ = nap => {}
            }
        };
        let met = matches!(outcome, Watched::Met) && last.as_ref().is_some_and(|last| last.met);
        self.report
            .objects
            .push(target.result(seen.as_ref(), "waited"));
        self.report.wait = Some(evidence(condition, met, history));
        Ok(outcome)
    }

    /// The cluster's events about every object the attempt touched that
    /// still has a uid, newest last, at most 20 each. Best effort: a
    /// cluster that will not list them leaves the result without them.
    async fn snapshot_events(&mut self) {
        if self.context.cancel.is_cancelled() {
            return;
        }
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&());
        let mut events = Vec::new();
        for object in &self.report.objects {
            let (Some(uid), Some(namespace)) = (&object.uid, &object.namespace) else {
                continue;
            };
            if object.action == "deleted" || self.report.dry_run {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), namespace, &resource);
            let params = ListParams::default()
                .fields(&format!("involvedObject.uid={uid}"))
                .limit(EVENTS_LISTED);
            let listed = bounded(self.context, "list events", api.list(&params)).await;
            let Ok(listed) = listed else {
                continue;
            };
            let mut about: Vec<KubernetesEvent> = listed
                .items
                .into_iter()
                .filter_map(|event| serde_json::to_value(event).ok())
                .map(|event| {
                    let text = |pointer: &str| {
                        event
                            .pointer(pointer)
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    };
                    KubernetesEvent {
                        object: format!("{}/{}", object.kind, object.name),
                        event_type: text("/type"),
                        reason: text("/reason"),
                        message: text("/message").map(|message| {
                            crate::contract::limits::shortened(&message, MAX_EVENT_MESSAGE)
                        }),
                        count: event
                            .pointer("/count")
                            .and_then(Value::as_i64)
                            .and_then(|count| i32::try_from(count).ok()),
                        last_seen: text("/lastTimestamp")
                            .or_else(|| text("/eventTime"))
                            .or_else(|| text("/metadata/creationTimestamp")),
                    }
                })
                .collect();
            about.sort_by(|a, b| a.last_seen.cmp(&b.last_seen));
            let skip = about.len().saturating_sub(MAX_EVENTS_PER_OBJECT);
            events.extend(about.into_iter().skip(skip));
        }
        self.report.events = events;
    }
}

/// How a watch ended (a stop or a failed call is an error).
enum Watched {
    Met,
    /// The judge said the state will not change by itself.
    Ended,
    /// The limit passed: the last look, described.
    TimedOut(String),
}

fn record(history: &mut Vec<ConditionObservation>, observation: &Observation) {
    if history.len() >= MAX_HISTORY {
        history.pop();
    }
    history.push(ConditionObservation {
        at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        generation: observation.generation,
        observed_generation: observation.observed_generation,
        status: observation.status.clone(),
        reason: observation.reason.clone(),
        message: observation.message.clone(),
        detail: observation.detail.clone(),
        met: observation.met,
    });
}

fn evidence(
    condition: &str,
    met: bool,
    history: Vec<ConditionObservation>,
) -> KubernetesWaitEvidence {
    KubernetesWaitEvidence {
        condition: condition.to_owned(),
        object: None,
        met,
        history,
    }
}

fn describe(observation: Option<&Observation>) -> String {
    let Some(observation) = observation else {
        return "nothing".into();
    };
    let mut parts = Vec::new();
    if let Some(status) = &observation.status {
        parts.push(format!("status {status}"));
    }
    if let Some(reason) = &observation.reason {
        parts.push(format!("reason {reason}"));
    }
    if let Some(message) = &observation.message {
        parts.push(message.clone());
    }
    if let (Some(generation), Some(observed)) =
        (observation.generation, observation.observed_generation)
    {
        parts.push(format!("generation {generation}, observed {observed}"));
    }
    if parts.is_empty() {
        "no such condition reported".into()
    } else {
        parts.join("; ")
    }
}

/// A manifest's apiVersion, kind and name; each is required (an apply
/// names what it makes: no `generateName`).
fn identity<'m>(field: &str, manifest: &'m Value) -> Result<(&'m str, &'m str, &'m str), Failure> {
    let text = |pointer: &str, name: &str| {
        manifest
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
            .ok_or_else(|| Failure::contract(format!("{field}: `{name}` is required")))
    };
    let api_version = text("/apiVersion", "apiVersion")?;
    let kind = text("/kind", "kind")?;
    let name = text("/metadata/name", "metadata.name")?;
    Ok((api_version, kind, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_manifest_names_what_it_makes() {
        let good = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        assert_eq!(identity("m", &good).unwrap(), ("v1", "ConfigMap", "a"));
        let generated =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "a-"}});
        assert!(identity("m", &generated)
            .unwrap_err()
            .message
            .contains("metadata.name"));
    }

    #[test]
    fn a_history_keeps_its_last_look_when_full() {
        let mut history = Vec::new();
        let look = |n: i64| Observation {
            generation: Some(n),
            observed_generation: None,
            status: None,
            reason: None,
            message: None,
            detail: None,
            met: false,
        };
        for n in 0..150 {
            record(&mut history, &look(n));
        }
        assert_eq!(history.len(), MAX_HISTORY);
        assert_eq!(history[0].generation, Some(0));
        assert_eq!(history.last().unwrap().generation, Some(149));
    }
}
