//! The inputs of the kubernetes runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ClusterRef;
use super::OperationInputs;
use super::{Governed, KeyKind};
use crate::contract::DurationMs;
use crate::contract::{Operation, PolicyFlags, Problem};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesApply {
    pub cluster: ClusterRef,
    pub namespace: String,
    /// Inline manifests, or `manifests_artifact` (exactly one of the two).
    #[serde(default)]
    pub manifests: Vec<Value>,
    #[serde(default)]
    pub manifests_artifact: Option<String>,
    #[serde(default = "default_field_manager")]
    pub field_manager: String,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub force_conflicts: bool,
    /// Conditions to wait for once every object is written.
    #[serde(default)]
    pub wait_for: Vec<WaitFor>,
}

/// Conditions to wait for on one object after a write: all of them at
/// once, or (`any`) one of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitFor {
    pub object: ObjectRef,
    pub conditions: Vec<WantedCondition>,
    #[serde(default)]
    pub any: bool,
    /// At most this long (the attempt's deadline bounds it anyway).
    #[serde(default)]
    pub timeout: Option<DurationMs>,
}

/// Most conditions of one wait, and most waits after one write.
pub const MAX_WAITED: usize = 8;

fn default_field_manager() -> String {
    "execplane".to_owned()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesDelete {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub objects: Vec<ObjectRef>,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesWait {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub object: ObjectRef,
    /// One condition, or `conditions` (exactly one of the two).
    #[serde(default)]
    pub condition: Option<WantedCondition>,
    /// Several: all of them at once, or (`any`) one of them.
    #[serde(default)]
    pub conditions: Vec<WantedCondition>,
    #[serde(default)]
    pub any: bool,
    #[serde(default)]
    pub timeout: Option<DurationMs>,
}

impl KubernetesWait {
    /// The conditions waited for: `condition`, or `conditions`.
    pub fn wanted(&self) -> Vec<WantedCondition> {
        wanted(&self.condition, &self.conditions)
    }
}

/// One `condition` or several `conditions`, as a list.
pub fn wanted(
    condition: &Option<WantedCondition>,
    conditions: &[WantedCondition],
) -> Vec<WantedCondition> {
    condition.iter().chain(conditions).cloned().collect()
}

/// A `condition` or `conditions` (exactly one of the two; at most
/// [`MAX_WAITED`] conditions).
pub fn condition_set_problems(
    condition: &Option<WantedCondition>,
    conditions: &[WantedCondition],
) -> Vec<Problem> {
    let mut problems = Vec::new();
    if condition.is_some() != conditions.is_empty() {
        problems.push(Problem::new(
            "inputs.conditions",
            "give exactly one of `condition` and `conditions`",
        ));
    }
    if conditions.len() > MAX_WAITED {
        problems.push(Problem::new(
            "inputs.conditions",
            format!("at most {MAX_WAITED}"),
        ));
    }
    problems
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesObject {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub object: ObjectRef,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchType {
    Merge,
    Strategic,
    Json,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesPatch {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub object: ObjectRef,
    pub patch: Value,
    pub patch_type: PatchType,
    /// Conditions to wait for once the patch is written.
    #[serde(default)]
    pub wait_for: Vec<WaitFor>,
}

super::runner_inputs! {
    /// The inputs of the kubernetes runner's operations.
    KubernetesInputs {
    KubernetesManifestApply(KubernetesApply),
    KubernetesManifestDelete(KubernetesDelete),
    KubernetesWait(KubernetesWait),
    KubernetesRolloutStatus(KubernetesObject),
    KubernetesResourcePatch(KubernetesPatch),
    KubernetesResourceRead(KubernetesObject),
    }
}

impl super::Vocabulary for KubernetesInputs {
    /// The namespace it acts in.
    fn target_keys(&self, _tenant: &str) -> Vec<(KeyKind, String)> {
        let (cluster, namespace) = match self {
            Self::KubernetesManifestApply(apply) => (&apply.cluster, &apply.namespace),
            Self::KubernetesManifestDelete(delete) => (&delete.cluster, &delete.namespace),
            Self::KubernetesWait(wait) => (&wait.cluster, &wait.namespace),
            Self::KubernetesRolloutStatus(read) | Self::KubernetesResourceRead(read) => {
                (&read.cluster, &read.namespace)
            }
            Self::KubernetesResourcePatch(patch) => (&patch.cluster, &patch.namespace),
        };
        super::namespace_key(cluster, namespace)
    }

    /// Every object it names, the objects it waits for too.
    fn governed(&self) -> Vec<Governed<'_>> {
        let object = |cluster, namespace, object| Governed::Object {
            cluster,
            namespace,
            object,
        };
        match self {
            Self::KubernetesManifestApply(apply) => std::iter::once(Governed::Manifests(apply))
                .chain(
                    apply
                        .wait_for
                        .iter()
                        .map(|wait| object(&apply.cluster, &apply.namespace, &wait.object)),
                )
                .collect(),
            Self::KubernetesManifestDelete(delete) => vec![Governed::Deletions(delete)],
            Self::KubernetesWait(wait) => {
                vec![object(&wait.cluster, &wait.namespace, &wait.object)]
            }
            Self::KubernetesRolloutStatus(read) | Self::KubernetesResourceRead(read) => {
                vec![object(&read.cluster, &read.namespace, &read.object)]
            }
            Self::KubernetesResourcePatch(patch) => std::iter::once(&patch.object)
                .chain(patch.wait_for.iter().map(|wait| &wait.object))
                .map(|named| object(&patch.cluster, &patch.namespace, named))
                .collect(),
        }
    }

    /// A delete only destructive.
    fn flag_problems(
        operation: Operation,
        flags: &PolicyFlags,
        _inputs: Option<&Value>,
    ) -> Vec<Problem> {
        match operation {
            Operation::KubernetesManifestDelete if !flags.destructive => vec![Problem::new(
                "policy.destructive",
                "kubernetes.manifest.delete deletes objects and needs `policy.destructive: true`",
            )],
            _ => Vec::new(),
        }
    }

    fn result_problem(_: Operation, result: &Value) -> Result<(), String> {
        super::shaped::<KubernetesResult>(result)
    }
}

/// What intake checks of a kubernetes operation's inputs beyond their
/// shape (names that become request paths are `kube_names`', shared with
/// helm and verification): an apply's manifests come one way; a wait
/// names its conditions one way, and waits are bounded in number; a dry
/// run waits for nothing (nothing is written).
pub(super) fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    use OperationInputs as I;
    let mut problems = Vec::new();
    let (wait_for, dry_run) = match inputs {
        I::KubernetesManifestApply(apply) => {
            if apply.manifests.is_empty() == apply.manifests_artifact.is_none() {
                problems.push(Problem::new(
                    "inputs.manifests",
                    "give exactly one of `manifests` and `manifests_artifact`",
                ));
            }
            (apply.wait_for.as_slice(), apply.dry_run)
        }
        I::KubernetesResourcePatch(patch) => (patch.wait_for.as_slice(), false),
        I::KubernetesWait(wait) => {
            return condition_set_problems(&wait.condition, &wait.conditions)
        }
        _ => return problems,
    };
    if wait_for.len() > MAX_WAITED {
        problems.push(Problem::new(
            "inputs.wait_for",
            format!("at most {MAX_WAITED} waits"),
        ));
    }
    if dry_run && !wait_for.is_empty() {
        problems.push(Problem::new(
            "inputs.wait_for",
            "a server dry run writes nothing to wait for",
        ));
    }
    for (index, wait) in wait_for.iter().enumerate() {
        if !(1..=MAX_WAITED).contains(&wait.conditions.len()) {
            problems.push(Problem::new(
                format!("inputs.wait_for[{index}].conditions"),
                format!("1 to {MAX_WAITED} conditions"),
            ));
        }
    }
    problems
}

/// A condition to wait for: its type and the status that satisfies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WantedCondition {
    pub kind: String,
    pub status: String,
}

impl WantedCondition {
    /// `Available`, `Available=False`, or kubectl's `condition=Available`
    /// (`=True` when no status is given).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.strip_prefix("condition=").unwrap_or(text);
        let (kind, status) = match text.split_once('=') {
            Some((kind, status)) => (kind, status),
            None => (text, "True"),
        };
        let type_ok = (1..=316).contains(&kind.len())
            && kind
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b));
        if !type_ok {
            return Err(format!(
                "`{text}` is not a condition type (letters, digits, `.`, `_`, `/`, `-`)"
            ));
        }
        let status = match status.to_ascii_lowercase().as_str() {
            "true" => "True",
            "false" => "False",
            "unknown" => "Unknown",
            _ => return Err(format!("status `{status}` is not True, False or Unknown")),
        };
        Ok(Self {
            kind: kind.to_owned(),
            status: status.to_owned(),
        })
    }
}

/// Written as the normalised `Type=Status`.
impl Serialize for WantedCondition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{}={}", self.kind, self.status))
    }
}

/// Read from a JobSpec's text: one that does not parse is refused with
/// [`WantedCondition::parse`]'s reason.
impl<'de> Deserialize<'de> for WantedCondition {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

// Results (docs/OPERATIONS.md): what its executor reports.

/// The result of every `kubernetes.*` operation: the objects touched, what
/// happened to each, the cluster's events about them and, for `wait` and
/// `rollout.status`, the history of what was waited for.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesResult {
    /// The cluster's name in the operator's catalogue.
    pub cluster: String,
    /// The API server's dry run: nothing was persisted.
    pub dry_run: bool,
    pub objects: Vec<KubernetesObjectResult>,
    /// The cluster's events about the objects, oldest first (at most 20 each).
    pub events: Vec<KubernetesEvent>,
    /// `kubernetes.wait` and `kubernetes.rollout.status`: the evidence.
    pub wait: Option<KubernetesWaitEvidence>,
    /// An apply's or a patch's `wait_for`: each wait's evidence, in order.
    #[serde(default)]
    pub waits: Vec<KubernetesWaitEvidence>,
}

/// One object as the API server answered for it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesObjectResult {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// `None`: a cluster-scoped object.
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
    /// `created`, `configured`, `unchanged`, `patched`, `deleted`,
    /// `absent` (nothing to delete), `read` or `waited` (the object a wait
    /// or rollout watched, as last seen).
    pub action: String,
    /// The diff summary: paths of the fields the call changed (status and
    /// the server's bookkeeping left out), at most 100.
    pub changed_fields: Vec<String>,
    pub changed_fields_truncated: bool,
    /// `resource.read`: the object as served, without `managedFields`
    /// (`None` when over 128 KiB).
    pub object: Option<Value>,
}

/// One Kubernetes event about an object.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesEvent {
    /// `Kind/name` of the object it is about.
    pub object: String,
    /// `Normal` or `Warning`.
    pub event_type: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub count: Option<i32>,
    /// RFC 3339.
    pub last_seen: Option<String>,
}

/// What was waited for and every change seen on the way.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesWaitEvidence {
    /// `Type=Status` (several: joined by `, ` when all must hold, by ` | `
    /// when one), or `rollout` for `rollout.status`.
    pub condition: String,
    /// What was watched (`<Kind>/<name> in <namespace>`): an apply's or a
    /// patch's waits name it.
    #[serde(default)]
    pub object: Option<String>,
    pub met: bool,
    /// One entry per change (the first look and the last always), at most 100.
    pub history: Vec<ConditionObservation>,
}

/// One look at the object that differed from the look before.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionObservation {
    /// RFC 3339.
    pub at: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// The condition's status (`True`, ...), or the rollout's state
    /// (`Progressing`, `Complete`, `Failed`); `None`: not reported yet.
    pub status: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Rollouts: the replica counts judged.
    pub detail: Option<Value>,
    pub met: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_is_read_at_intake_and_a_bad_one_refused_there() {
        let inputs = |condition: &str| {
            serde_json::json!({"cluster": {"name": "c", "credentials": {"$secret": "k"}},
                               "namespace": "n", "object": {"api_version": "v1", "kind": "Pod", "name": "p"},
                               "condition": condition})
        };
        let parsed = OperationInputs::parse(Operation::KubernetesWait, &inputs("condition=Ready"));
        let Ok(OperationInputs::KubernetesWait(wait)) = parsed else {
            panic!("{parsed:?}");
        };
        let wanted = wait.wanted();
        assert_eq!(
            (wanted[0].kind.as_str(), wanted[0].status.as_str()),
            ("Ready", "True")
        );
        for bad in ["Ready=maybe", "", "a b"] {
            let (path, reason) =
                OperationInputs::parse(Operation::KubernetesWait, &inputs(bad)).unwrap_err();
            assert_eq!(path, "condition", "{bad}: {reason}");
        }
    }

    #[test]
    fn a_wait_names_its_conditions_once_and_a_dry_run_waits_for_nothing() {
        let cluster = serde_json::json!({"name": "c", "credentials": {"$secret": "k"}});
        let object =
            serde_json::json!({"api_version": "apps/v1", "kind": "Deployment", "name": "d"});
        let paths = |operation: Operation, inputs: serde_json::Value| -> Vec<String> {
            let inputs = OperationInputs::parse(operation, &inputs).unwrap();
            problems_of(&inputs).into_iter().map(|p| p.path).collect()
        };
        let wait = |extra: serde_json::Value| {
            let mut inputs =
                serde_json::json!({"cluster": cluster, "namespace": "n", "object": object});
            for (key, value) in extra.as_object().unwrap() {
                inputs[key] = value.clone();
            }
            paths(Operation::KubernetesWait, inputs)
        };
        assert!(wait(serde_json::json!({"condition": "Ready"})).is_empty());
        assert!(wait(serde_json::json!({"conditions": ["Ready", "Available"]})).is_empty());
        assert_eq!(wait(serde_json::json!({})), ["inputs.conditions"]);
        assert_eq!(
            wait(serde_json::json!({"condition": "Ready", "conditions": ["Available"]})),
            ["inputs.conditions"]
        );
        let apply = |dry_run: bool, conditions: serde_json::Value| {
            paths(
                Operation::KubernetesManifestApply,
                serde_json::json!({"cluster": cluster, "namespace": "n", "dry_run": dry_run,
                                   "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}],
                                   "wait_for": [{"object": object, "conditions": conditions}]}),
            )
        };
        assert!(apply(false, serde_json::json!(["Available"])).is_empty());
        assert_eq!(
            apply(true, serde_json::json!(["Available"])),
            ["inputs.wait_for"]
        );
        assert_eq!(
            apply(false, serde_json::json!([])),
            ["inputs.wait_for[0].conditions"]
        );
    }
}
