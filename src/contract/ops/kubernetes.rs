//! The inputs of the kubernetes runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ClusterRef;
use super::OperationInputs;
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
}

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
    pub condition: String,
    #[serde(default)]
    pub timeout: Option<DurationMs>,
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

/// What intake checks of a kubernetes operation's inputs beyond their
/// shape (names that become request paths are `kube_names`', shared with
/// helm and verification): an apply's manifests come one way.
pub(super) fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    match inputs {
        OperationInputs::KubernetesManifestApply(apply)
            if apply.manifests.is_empty() == apply.manifests_artifact.is_none() =>
        {
            vec![Problem::new(
                "inputs.manifests",
                "give exactly one of `manifests` and `manifests_artifact`",
            )]
        }
        _ => Vec::new(),
    }
}

/// The contract's gate on a kubernetes operation's flags: a delete only
/// destructive.
pub(super) fn flag_problems(operation: Operation, flags: &PolicyFlags) -> Vec<Problem> {
    match operation {
        Operation::KubernetesManifestDelete if !flags.destructive => vec![Problem::new(
            "policy.destructive",
            "kubernetes.manifest.delete deletes objects and needs `policy.destructive: true`",
        )],
        _ => Vec::new(),
    }
}
